//! Decoding programs: a compiled [`Node`] tree flattened into a list of [`Op`]s.
//!
//! A struct's fields become consecutive ops, so the reader runs one loop per event
//! instead of one call per field; only arrays, sequences and variants run a nested
//! program. Running a program appends the same pre-order [`crate::decode::Val`]s that
//! the node tree describes, so the mapping walks values with the tree.
//!
//! Runs of whole-byte fields at offsets known in advance (most LTTng events are nothing
//! else) are merged into one [`Op::Fixed`]: one bounds check and direct loads instead
//! of an alignment and a bounds check per field.

use crate::decode::{Node, NO_REG};

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
    /// Fields at fixed byte offsets from a start aligned to `align` bits (a power of
    /// two, at least 8), `bytes` long in all; `effects` are the integers among them
    /// that set a register or the clock (all a reader that keeps no values needs).
    Fixed {
        align: u32,
        bytes: u32,
        fields: Box<[FixedField]>,
        effects: Box<[FixedInt]>,
    },
}

/// One value of an [`Op::Fixed`] run, `offset` bytes from its start.
#[derive(Clone, Copy, Debug)]
pub enum FixedField {
    /// A struct's start (`Compound(fields)`).
    Struct {
        fields: u32,
    },
    Int(FixedInt),
    Float {
        offset: u32,
        bytes: u32,
        le: bool,
    },
    /// Text of `len` bytes (shown up to its first NUL).
    Text {
        offset: u32,
        len: u32,
    },
}

/// An integer of 1, 2, 4 or 8 bytes in an [`Op::Fixed`] run, with what reading it
/// takes worked out in advance.
#[derive(Clone, Copy, Debug)]
pub struct FixedInt {
    pub offset: u32,
    pub bytes: u32,
    pub le: bool,
    pub signed: bool,
    /// Shifting the value left then (arithmetically) right by this extends its sign: 0
    /// for unsigned and 64-bit values.
    pub sign_shift: u32,
    /// The value is saved in a register or moves the clock: see `op`.
    pub effects: bool,
    pub op: IntOp,
}

pub type Program = Box<[Op]>;

/// Flattens a node tree into its program.
pub fn program(node: &Node) -> Program {
    let mut ops = Vec::new();
    flatten(node, &mut ops);
    merge_fixed(ops).into_boxed_slice()
}

/// The program with every field its own op (no [`Op::Fixed`] runs): the reference
/// the merged programs are tested against.
pub fn program_per_field(node: &Node) -> Program {
    fn unmerge(ops: Vec<Op>) -> Vec<Op> {
        ops.into_iter()
            .map(|op| match op {
                Op::Elements {
                    len,
                    len_reg,
                    align,
                    body,
                } => Op::Elements {
                    len,
                    len_reg,
                    align,
                    body: unmerge(body.into_vec()).into(),
                },
                Op::Variant {
                    tag_reg,
                    map,
                    options,
                } => Op::Variant {
                    tag_reg,
                    map,
                    options: options
                        .into_vec()
                        .into_iter()
                        .map(|o| unmerge(o.into_vec()).into())
                        .collect(),
                },
                op => op,
            })
            .collect()
    }
    let mut ops = Vec::new();
    flatten(node, &mut ops);
    unmerge(ops).into_boxed_slice()
}

/// Longest text an [`Op::Fixed`] run takes in (longer ones keep their own op).
const MAX_FIXED_TEXT: u64 = 1 << 16;

/// Where a fixed run stands while ops are merged into it.
struct Run {
    align: u32,
    bits: u64,
    fields: Vec<FixedField>,
}

/// Merges runs of whole-byte ops whose offsets follow from the run's start into
/// [`Op::Fixed`]s. A run starts at an op aligned to at least a byte and takes ops
/// aligned to no more than its start.
fn merge_fixed(ops: Vec<Op>) -> Vec<Op> {
    let mut out = Vec::with_capacity(ops.len());
    let mut run: Option<Run> = None;
    for op in ops {
        let Some((align, bits)) = fixed_shape(&op) else {
            close_run(&mut run, &mut out);
            out.push(op);
            continue;
        };
        let fits = run.as_ref().is_some_and(|r| align <= r.align);
        if !fits {
            close_run(&mut run, &mut out);
            if align < 8 {
                // Not known to start on a byte: keep the op as it is.
                out.push(op);
                continue;
            }
            run = Some(Run {
                align,
                bits: 0,
                fields: Vec::new(),
            });
        }
        let r = run.as_mut().expect("a run was just opened");
        let a = align.max(1) as u64;
        r.bits = (r.bits + a - 1) & !(a - 1);
        let offset = (r.bits / 8) as u32;
        r.fields.push(match op {
            Op::Struct { fields, .. } => FixedField::Struct { fields },
            Op::Int(i) => FixedField::Int(FixedInt {
                offset,
                bytes: i.bits / 8,
                le: i.le,
                signed: i.signed,
                sign_shift: if i.signed { 64 - i.bits } else { 0 },
                effects: i.reg != NO_REG || i.special != NO_REG || i.clock,
                op: i,
            }),
            Op::Float { bits, le, .. } => FixedField::Float {
                offset,
                bytes: bits / 8,
                le,
            },
            Op::Text { len, .. } => FixedField::Text {
                offset,
                len: len as u32,
            },
            _ => unreachable!("fixed_shape accepts only these"),
        });
        r.bits += bits;
    }
    close_run(&mut run, &mut out);
    out
}

fn close_run(run: &mut Option<Run>, out: &mut Vec<Op>) {
    if let Some(r) = run.take() {
        let effects = r
            .fields
            .iter()
            .filter_map(|f| match f {
                FixedField::Int(i) if i.effects => Some(*i),
                _ => None,
            })
            .collect();
        out.push(Op::Fixed {
            align: r.align,
            bytes: (r.bits / 8) as u32,
            fields: r.fields.into_boxed_slice(),
            effects,
        });
    }
}

/// Alignment and size in bits of an op that can join a fixed run.
fn fixed_shape(op: &Op) -> Option<(u32, u64)> {
    let whole = |align: u32| align.is_power_of_two();
    match op {
        Op::Int(i) if matches!(i.bits, 8 | 16 | 32 | 64) && whole(i.align) => {
            Some((i.align, i.bits as u64))
        }
        Op::Float { bits, align, .. } if matches!(bits, 32 | 64) && whole(*align) => {
            Some((*align, *bits as u64))
        }
        Op::Struct { align, .. } if whole(*align) => Some((*align, 0)),
        Op::Text {
            len,
            len_reg,
            align,
        } if *len_reg == NO_REG && *len <= MAX_FIXED_TEXT && whole(*align) => {
            Some((*align, len * 8))
        }
        _ => None,
    }
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

/// An event header whose integers all sit at fixed bit offsets from its aligned start,
/// for each option of its last variant (LTTng's compact and large headers): read for
/// the event id and time only, it takes a few loads instead of a program run.
#[derive(Clone, Debug)]
pub struct FlatHeader {
    pub align: u32,
    /// The integers before the variant, and the header's size in bits without one.
    pub fields: Box<[BitField]>,
    pub bits: u32,
    pub variant: Option<FlatVariant>,
}

#[derive(Clone, Debug)]
pub struct FlatVariant {
    pub tag_reg: u32,
    /// Tag value ranges → option index, as in [`Op::Variant`].
    pub map: Box<[(i128, i128, u32)]>,
    /// Per option: its integers and the header's size in bits with it.
    pub options: Box<[(Box<[BitField]>, u32)]>,
}

/// An integer `offset` bits from a flat header's start.
#[derive(Clone, Copy, Debug)]
pub struct BitField {
    pub offset: u32,
    pub op: IntOp,
}

impl FlatHeader {
    /// The flat form of a header program, when it has one: only structs and integers,
    /// and at most one variant, last, whose options hold only structs and integers;
    /// no alignment inside it larger than its start's.
    pub fn of(program: &[Op]) -> Option<FlatHeader> {
        let align = match program.first()? {
            Op::Struct { align, .. } | Op::Fixed { align, .. } => *align,
            Op::Int(i) => i.align,
            _ => return None,
        };
        if align < 8 || !align.is_power_of_two() {
            return None;
        }
        let (body, variant) = match program.split_last()? {
            (Op::Variant { .. }, body) => (body, program.last()),
            _ => (program, None),
        };
        let mut fields = Vec::new();
        let bits = place(body, 0, align, &mut fields)?;
        let variant = match variant {
            Some(Op::Variant {
                tag_reg,
                map,
                options,
            }) => {
                let options = options
                    .iter()
                    .map(|o| {
                        let mut fields = Vec::new();
                        let end = place(o, bits, align, &mut fields)?;
                        Some((fields.into_boxed_slice(), end))
                    })
                    .collect::<Option<Box<[_]>>>()?;
                Some(FlatVariant {
                    tag_reg: *tag_reg,
                    map: map.clone(),
                    options,
                })
            }
            _ => None,
        };
        Some(FlatHeader {
            align,
            fields: fields.into_boxed_slice(),
            bits,
            variant,
        })
    }
}

/// Places the integers of `ops` from bit `at`, alignments no larger than `align`;
/// returns the end, or `None` when an op is not a struct or an integer that one 8-byte
/// load reads.
fn place(ops: &[Op], mut at: u32, align: u32, out: &mut Vec<BitField>) -> Option<u32> {
    let aligned = |at: u32, a: u32| -> Option<u32> {
        (a <= align && a.is_power_of_two()).then(|| at.next_multiple_of(a))
    };
    for op in ops {
        match op {
            Op::Struct { align: a, .. } => at = aligned(at, *a)?,
            Op::Int(i) => {
                at = aligned(at, i.align)?;
                if i.bits == 0 || at % 8 + i.bits > 64 {
                    return None;
                }
                out.push(BitField { offset: at, op: *i });
                at += i.bits;
            }
            Op::Fixed {
                align: a,
                bytes,
                fields,
                ..
            } => {
                at = aligned(at, *a)?;
                for f in fields.iter() {
                    match f {
                        FixedField::Struct { .. } => {}
                        FixedField::Int(i) => out.push(BitField {
                            offset: at + i.offset * 8,
                            op: i.op,
                        }),
                        _ => return None,
                    }
                }
                at += bytes * 8;
            }
            _ => return None,
        }
    }
    Some(at)
}
