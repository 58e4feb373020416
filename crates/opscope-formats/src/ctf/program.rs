//! Decoding programs: a compiled [`Node`] tree flattened into a list of [`Op`]s.
//!
//! A struct's fields become consecutive ops, so the reader runs one loop per event
//! instead of one call per field; only arrays, sequences and variants run a nested
//! program. Running a program appends the same pre-order [`super::decode::Val`]s that
//! the node tree describes, so the mapping walks values with the tree.

use super::decode::{Node, NO_REG};

/// One integer field, as the reader needs it (its display base and enum labels are for
/// the mapping).
#[derive(Clone, Copy, Debug)]
pub struct IntOp {
    pub bits: u32,
    pub align: u32,
    pub signed: bool,
    pub le: bool,
    /// Register the value is saved in, for sequences and variants that refer to it.
    pub reg: u32,
    /// One of the `REG_*` registers the reader uses, or `NO_REG`.
    pub special: u32,
    /// Mapped to the stream's clock: updates it (with wrap-around when narrower than 64).
    pub clock: bool,
}

#[derive(Clone, Debug)]
pub enum Op {
    Int(IntOp),
    Float {
        bits: u32,
        align: u32,
        le: bool,
    },
    /// A NUL-terminated string.
    Str,
    /// Text: an array (`len`) or sequence (`len_reg`) of 8-bit encoded integers.
    Text {
        len: u64,
        len_reg: u32,
        align: u32,
    },
    /// A struct's start: its alignment and field count; its fields' ops follow.
    Struct {
        align: u32,
        fields: u32,
    },
    /// An array (`len`) or sequence (`len_reg`) running `body` once per element.
    Elements {
        len: u64,
        len_reg: u32,
        align: u32,
        body: Program,
    },
    Variant {
        tag_reg: u32,
        /// Tag value ranges → option index.
        map: Box<[(i128, i128, u32)]>,
        options: Box<[Program]>,
    },
}

pub type Program = Box<[Op]>;

/// Flattens a node tree into its program.
pub fn program(node: &Node) -> Program {
    let mut ops = Vec::new();
    flatten(node, &mut ops);
    ops.into_boxed_slice()
}

fn flatten(node: &Node, ops: &mut Vec<Op>) {
    match node {
        Node::Int(i) => ops.push(Op::Int(i.op)),
        Node::Float { bits, align, le } => ops.push(Op::Float {
            bits: *bits,
            align: *align,
            le: *le,
        }),
        Node::Str => ops.push(Op::Str),
        Node::Struct { align, fields, .. } => {
            ops.push(Op::Struct {
                align: *align,
                fields: fields.len() as u32,
            });
            for f in fields.iter() {
                flatten(f, ops);
            }
        }
        Node::Array { len, elem, text } => ops.push(elements(*len, NO_REG, elem, *text)),
        Node::Seq {
            len_reg,
            elem,
            text,
        } => ops.push(elements(0, *len_reg, elem, *text)),
        Node::Variant {
            tag_reg,
            map,
            options,
            ..
        } => ops.push(Op::Variant {
            tag_reg: *tag_reg,
            map: map.clone(),
            options: options.iter().map(program).collect(),
        }),
    }
}

fn elements(len: u64, len_reg: u32, elem: &Node, text: bool) -> Op {
    let align = elem.align();
    if text {
        Op::Text {
            len,
            len_reg,
            align,
        }
    } else {
        Op::Elements {
            len,
            len_reg,
            align,
            body: program(elem),
        }
    }
}
