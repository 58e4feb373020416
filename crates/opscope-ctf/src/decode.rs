//! Compiled layouts and the bit-level packet/event reader.
//!
//! The type tree is compiled once into [`Node`]s where every dynamic reference (a
//! sequence's length, a variant's tag) is resolved to a register number, and the
//! fields the reader needs (packet sizes, event id, timestamps) are marked. Decoding an
//! event then walks the compiled nodes and appends flat [`Val`]s to a reused buffer: no
//! allocation and no name look-up per field.

use std::collections::HashMap;
use std::sync::Arc;

use crate::program::{program, BitField, FixedField, FixedInt, FlatHeader, IntOp, Op, Program};
use crate::types::{too_deep, ByteOrder, ClockClass, EnumTy, IntTy, Metadata, StructTy, Ty};

pub const NO_REG: u32 = u32::MAX;
pub const REG_MAGIC: u32 = 0;
pub const REG_STREAM_ID: u32 = 1;
pub const REG_CONTENT_SIZE: u32 = 2;
pub const REG_PACKET_SIZE: u32 = 3;
pub const REG_TS_BEGIN: u32 = 4;
pub const REG_TS_END: u32 = 5;
pub const REG_DISCARDED: u32 = 6;
pub const REG_EVENT_ID: u32 = 7;
pub const REG_CPU_ID: u32 = 8;
pub const REG_SEQ_NUM: u32 = 9;
const FIRST_DYNAMIC_REG: u32 = 10;

const PACKET_MAGIC: u64 = 0xC1FC_1FC1;
/// Longest array or sequence of empty (zero-bit) elements the reader accepts.
const MAX_EMPTY_ELEMENTS: u64 = 1 << 16;
/// Deepest type and most compiled fields the reader accepts: aliases can nest types
/// beyond what the text nests, and a type used twice in each of its parents grows
/// exponentially.
const MAX_TYPE_DEPTH: usize = 100;
const MAX_COMPILED_FIELDS: usize = 1 << 20;

#[derive(Clone, Debug)]
pub struct IntNode {
    /// What reading it takes.
    pub op: IntOp,
    pub base: u32,
    pub encoded: bool,
    pub labels: Option<Arc<EnumTy>>,
}

#[derive(Clone, Debug)]
pub enum Node {
    Int(IntNode),
    Float {
        bits: u32,
        align: u32,
        le: bool,
    },
    Str,
    Struct {
        align: u32,
        names: Box<[String]>,
        fields: Box<[Node]>,
    },
    Array {
        len: u64,
        elem: Box<Node>,
        /// Bytes of text (an array of 8-bit encoded integers).
        text: bool,
    },
    Seq {
        len_reg: u32,
        elem: Box<Node>,
        text: bool,
    },
    Variant {
        tag_reg: u32,
        /// Tag value ranges → option index.
        map: Box<[(i128, i128, u32)]>,
        names: Box<[String]>,
        options: Box<[Node]>,
    },
}

impl Node {
    pub fn align(&self) -> u32 {
        match self {
            Node::Int(i) => i.op.align,
            Node::Float { align, .. } => *align,
            Node::Str => 8,
            Node::Struct { align, .. } => *align,
            Node::Array { elem, text, .. } | Node::Seq { elem, text, .. } => {
                if *text {
                    8
                } else {
                    elem.align()
                }
            }
            Node::Variant { .. } => 1,
        }
    }

    /// Number of values this node adds, when fixed.
    pub fn fixed_width(&self) -> Option<usize> {
        match self {
            Node::Int(_) | Node::Float { .. } | Node::Str => Some(1),
            Node::Array { text: true, .. } | Node::Seq { text: true, .. } => Some(1),
            Node::Struct { fields, .. } => {
                let mut n = 1;
                for f in fields.iter() {
                    n += f.fixed_width()?;
                }
                Some(n)
            }
            Node::Array { len, elem, .. } => Some(1 + *len as usize * elem.fixed_width()?),
            _ => None,
        }
    }
}

/// One decoded value, in pre-order: a struct is `Compound(n)` and its n fields, an
/// array or sequence `Compound(len)` and its elements, a variant `Variant(option)` and
/// the option's values.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Val {
    U(u64),
    I(i64),
    F(f64),
    /// Text: `len` bytes at file offset `start` (without the terminating NUL).
    Str {
        start: u64,
        len: u32,
    },
    Compound(u32),
    Variant(u32),
}

/// Index just after the values of `node` starting at `pos`.
pub fn skip(node: &Node, vals: &[Val], pos: usize) -> usize {
    match node {
        Node::Int(_) | Node::Float { .. } | Node::Str => pos + 1,
        Node::Array { text: true, .. } | Node::Seq { text: true, .. } => pos + 1,
        Node::Struct { fields, .. } => {
            let mut p = pos + 1;
            for f in fields.iter() {
                p = skip(f, vals, p);
            }
            p
        }
        Node::Array { elem, .. } | Node::Seq { elem, .. } => {
            let n = match vals.get(pos) {
                Some(Val::Compound(n)) => *n,
                _ => 0,
            };
            let mut p = pos + 1;
            for _ in 0..n {
                p = skip(elem, vals, p);
            }
            p
        }
        Node::Variant { options, .. } => match vals.get(pos) {
            Some(Val::Variant(i)) => match options.get(*i as usize) {
                Some(o) => skip(o, vals, pos + 1),
                None => pos + 1,
            },
            _ => pos + 1,
        },
    }
}

#[derive(Debug)]
pub struct StreamLayout {
    pub id: u64,
    pub packet_context: Option<Node>,
    pub event_header: Option<Node>,
    pub event_context: Option<Node>,
    /// The three scopes' decoding programs.
    pub packet_context_program: Option<Program>,
    pub event_header_program: Option<Program>,
    pub event_context_program: Option<Program>,
    /// The event header's flat form, when it has one (read when its values are not
    /// kept).
    pub event_header_flat: Option<FlatHeader>,
    pub has_content_size: bool,
    pub has_packet_size: bool,
    pub has_ts_begin: bool,
    pub has_cpu_id: bool,
    /// Bits of `events_discarded`, when the packet context has it.
    pub discarded_bits: Option<u32>,
    /// Event id → index in [`Layout::events`].
    pub event_ids: HashMap<u64, usize>,
    /// Dense look-up for small ids.
    pub event_dense: Vec<u32>,
}

impl StreamLayout {
    #[inline]
    pub fn event_index(&self, id: u64) -> Option<usize> {
        if let Some(&e) = self.event_dense.get(id as usize) {
            return (e != u32::MAX).then_some(e as usize);
        }
        self.event_ids.get(&id).copied()
    }
}

#[derive(Debug)]
pub struct EventLayout {
    pub name: String,
    pub id: u64,
    pub stream: usize,
    pub context: Option<Node>,
    pub fields: Option<Node>,
    pub context_program: Option<Program>,
    pub fields_program: Option<Program>,
}

/// A trace's metadata compiled for reading.
#[derive(Debug)]
pub struct Layout {
    pub meta: Metadata,
    pub packet_header: Option<Node>,
    pub packet_header_program: Option<Program>,
    pub streams: Vec<StreamLayout>,
    pub events: Vec<EventLayout>,
    pub registers: usize,
    /// The clock timestamps are mapped to (the first one declared when none is named).
    pub clock: Option<ClockClass>,
}

impl Layout {
    /// The same layout decoded field by field (no fixed runs), for tests that check
    /// the fixed runs against it (`opscope-formats`' tests of real traces).
    pub fn per_field(&self) -> Layout {
        use crate::program::program_per_field as p;
        Layout {
            meta: self.meta.clone(),
            packet_header: self.packet_header.clone(),
            packet_header_program: self.packet_header.as_ref().map(p),
            streams: self
                .streams
                .iter()
                .map(|s| StreamLayout {
                    id: s.id,
                    packet_context: s.packet_context.clone(),
                    event_header: s.event_header.clone(),
                    event_context: s.event_context.clone(),
                    packet_context_program: s.packet_context.as_ref().map(p),
                    event_header_program: s.event_header.as_ref().map(p),
                    event_context_program: s.event_context.as_ref().map(p),
                    event_header_flat: s.event_header.as_ref().and_then(|h| FlatHeader::of(&p(h))),
                    has_content_size: s.has_content_size,
                    has_packet_size: s.has_packet_size,
                    has_ts_begin: s.has_ts_begin,
                    has_cpu_id: s.has_cpu_id,
                    discarded_bits: s.discarded_bits,
                    event_ids: s.event_ids.clone(),
                    event_dense: s.event_dense.clone(),
                })
                .collect(),
            events: self
                .events
                .iter()
                .map(|e| EventLayout {
                    name: e.name.clone(),
                    id: e.id,
                    stream: e.stream,
                    context: e.context.clone(),
                    fields: e.fields.clone(),
                    context_program: e.context.as_ref().map(p),
                    fields_program: e.fields.as_ref().map(p),
                })
                .collect(),
            registers: self.registers,
            clock: self.clock.clone(),
        }
    }
}

/// A layout problem: the metadata is well-formed TSDL but cannot be read as a trace.
pub type LayoutError = String;

// ---------------------------------------------------------------------------------
// Compilation

struct Compiler<'m> {
    meta: &'m Metadata,
    le: bool,
    /// Location of a field that something refers to → its register.
    regs_at: HashMap<String, u32>,
    /// Location of a sequence or variant → the register of its length or tag, and the
    /// tag's enum.
    refs: HashMap<String, (u32, Option<Arc<EnumTy>>)>,
    next_reg: u32,
    /// Fields visited so far (bounded by [`MAX_COMPILED_FIELDS`]).
    fields: usize,
}

/// The root type of a scope key.
fn scope_root<'m>(meta: &'m Metadata, key: &str) -> Option<&'m Ty> {
    if key == "T.ph" {
        return meta.packet_header.as_ref();
    }
    let (head, scope) = key.split_once('.')?;
    let index: usize = head[1..].parse().ok()?;
    match (&head[..1], scope) {
        ("S", "pc") => meta.streams.get(index)?.packet_context.as_ref(),
        ("S", "eh") => meta.streams.get(index)?.event_header.as_ref(),
        ("S", "ec") => meta.streams.get(index)?.event_context.as_ref(),
        ("E", "ctx") => meta.events.get(index)?.context.as_ref(),
        ("E", "f") => meta.events.get(index)?.fields.as_ref(),
        _ => None,
    }
}

fn strip(name: &str) -> &str {
    name.strip_prefix('_').unwrap_or(name)
}

/// Follows `path` from `ty` (a struct) and returns the location and type reached.
fn descend<'t>(ty: &'t Ty, loc: &str, path: &[String]) -> Option<(String, &'t Ty)> {
    let mut ty = ty;
    let mut loc = loc.to_string();
    for part in path {
        let Ty::Struct(s) = ty else { return None };
        let (name, t) = s.fields.iter().find(|f| f.0 == strip(part))?;
        loc.push('/');
        loc.push_str(name);
        ty = t;
    }
    Some((loc, ty))
}

impl<'m> Compiler<'m> {
    /// Scope keys a relative path may fall back to, innermost first.
    fn fallback_scopes(stream: usize, event: Option<usize>) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(e) = event {
            v.push(format!("E{e}.f"));
            v.push(format!("E{e}.ctx"));
        }
        v.push(format!("S{stream}.ec"));
        v.push(format!("S{stream}.eh"));
        v.push(format!("S{stream}.pc"));
        v.push("T.ph".into());
        v
    }

    fn resolve(
        &self,
        path: &[String],
        lexical: &[(String, Arc<StructTy>)],
        stream: usize,
        event: Option<usize>,
    ) -> Option<(String, &'m Ty)> {
        let p: Vec<&str> = path.iter().map(|s| s.as_str()).collect();
        let absolute = match p.as_slice() {
            ["trace", "packet", "header", ..] => Some(("T.ph".to_string(), 3)),
            ["stream", "packet", "context", ..] => Some((format!("S{stream}.pc"), 3)),
            ["stream", "event", "header", ..] => Some((format!("S{stream}.eh"), 3)),
            ["stream", "event", "context", ..] => Some((format!("S{stream}.ec"), 3)),
            ["event", "context", ..] => event.map(|e| (format!("E{e}.ctx"), 2)),
            ["event", "fields", ..] => event.map(|e| (format!("E{e}.f"), 2)),
            _ => None,
        };
        if let Some((key, skip)) = absolute {
            let root = scope_root(self.meta, &key)?;
            return descend(root, &key, &path[skip..]);
        }
        // Relative: the enclosing structs, innermost first, then the scopes.
        for (loc, st) in lexical.iter().rev() {
            if st.fields.iter().any(|f| f.0 == strip(&path[0])) {
                // Re-find through the meta-owned tree to get a `'m` reference.
                let (key, rest) = split_loc(loc);
                let root = scope_root(self.meta, key)?;
                let (_, inner) = descend_loc(root, rest)?;
                return descend(inner, loc, path);
            }
        }
        for key in Self::fallback_scopes(stream, event) {
            if let Some(root) = scope_root(self.meta, &key) {
                if let Some(found) = descend(root, &key, path) {
                    return Some(found);
                }
            }
        }
        None
    }

    /// Pass 1: every sequence and variant gets the register of what it refers to.
    fn collect(
        &mut self,
        ty: &'m Ty,
        loc: &str,
        lexical: &mut Vec<(String, Arc<StructTy>)>,
        stream: usize,
        event: Option<usize>,
    ) -> Result<(), LayoutError> {
        self.fields += 1;
        if self.fields > MAX_COMPILED_FIELDS {
            return Err(format!(
                "the metadata's types unfold into more than {MAX_COMPILED_FIELDS} fields"
            ));
        }
        match ty {
            Ty::Struct(s) => {
                lexical.push((loc.to_string(), s.clone()));
                for (name, t) in &s.fields {
                    self.collect(t, &format!("{loc}/{name}"), lexical, stream, event)?;
                }
                lexical.pop();
            }
            Ty::Array(elem, _) => {
                self.collect(elem, &format!("{loc}[]"), lexical, stream, event)?
            }
            Ty::Sequence(elem, path) => {
                let Some((target, tty)) = self.resolve(path, lexical, stream, event) else {
                    return Err(format!(
                        "the length `{}` of sequence `{}` names no field",
                        path.join("."),
                        display_loc(loc)
                    ));
                };
                if !matches!(tty, Ty::Int(_) | Ty::Enum(_)) {
                    return Err(format!(
                        "the length `{}` of sequence `{}` is not an integer",
                        path.join("."),
                        display_loc(loc)
                    ));
                }
                let reg = self.reg_for(&target);
                self.refs.insert(loc.to_string(), (reg, None));
                self.collect(elem, &format!("{loc}[]"), lexical, stream, event)?;
            }
            Ty::Variant(v) => {
                let Some(path) = &v.tag else {
                    return Err(format!("variant `{}` has no tag", display_loc(loc)));
                };
                let Some((target, tty)) = self.resolve(path, lexical, stream, event) else {
                    return Err(format!(
                        "the tag `{}` of variant `{}` names no field",
                        path.join("."),
                        display_loc(loc)
                    ));
                };
                let Ty::Enum(e) = tty else {
                    return Err(format!(
                        "the tag `{}` of variant `{}` is not an enum",
                        path.join("."),
                        display_loc(loc)
                    ));
                };
                let reg = self.reg_for(&target);
                self.refs.insert(loc.to_string(), (reg, Some(e.clone())));
                for (name, t) in &v.options {
                    self.collect(t, &format!("{loc}/{name}"), lexical, stream, event)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn reg_for(&mut self, target: &str) -> u32 {
        if let Some(&r) = self.regs_at.get(target) {
            return r;
        }
        let r = self.next_reg;
        self.next_reg += 1;
        self.regs_at.insert(target.to_string(), r);
        r
    }

    fn le(&self, order: ByteOrder) -> bool {
        match order {
            ByteOrder::Native => self.le,
            ByteOrder::Le => true,
            ByteOrder::Be => false,
        }
    }

    fn int(&self, i: &IntTy, loc: &str, labels: Option<Arc<EnumTy>>) -> IntNode {
        let (scope, rest) = split_loc(loc);
        let name = loc.rsplit('/').next().unwrap_or("");
        let top = rest.matches('/').count() == 1;
        let header = scope.ends_with(".eh");
        let special = match (scope, top, name) {
            ("T.ph", true, "magic") => REG_MAGIC,
            ("T.ph", true, "stream_id") => REG_STREAM_ID,
            (s, true, n) if s.ends_with(".pc") => match n {
                "content_size" => REG_CONTENT_SIZE,
                "packet_size" => REG_PACKET_SIZE,
                "timestamp_begin" => REG_TS_BEGIN,
                "timestamp_end" => REG_TS_END,
                "events_discarded" => REG_DISCARDED,
                "cpu_id" => REG_CPU_ID,
                "packet_seq_num" => REG_SEQ_NUM,
                _ => NO_REG,
            },
            _ if header && name == "id" => REG_EVENT_ID,
            _ => NO_REG,
        };
        let clock =
            i.map_clock.is_some() && !scope.ends_with(".pc") || (header && name == "timestamp");
        IntNode {
            op: IntOp {
                bits: i.size,
                align: i.align.max(1),
                signed: i.signed,
                le: self.le(i.byte_order),
                reg: self.regs_at.get(loc).copied().unwrap_or(NO_REG),
                special,
                clock,
            },
            base: i.base,
            encoded: i.encoded,
            labels,
        }
    }

    /// Pass 2: the nodes.
    fn node(&self, ty: &Ty, loc: &str) -> Node {
        match ty {
            Ty::Int(i) => Node::Int(self.int(i, loc, None)),
            Ty::Enum(e) => Node::Int(self.int(&e.int, loc, Some(e.clone()))),
            Ty::Float(f) => Node::Float {
                bits: f.size,
                align: f.align.max(1),
                le: self.le(f.byte_order),
            },
            Ty::Str => Node::Str,
            Ty::Struct(s) => {
                let fields: Vec<Node> = s
                    .fields
                    .iter()
                    .map(|(name, t)| self.node(t, &format!("{loc}/{name}")))
                    .collect();
                let align = fields
                    .iter()
                    .map(Node::align)
                    .fold(s.min_align.max(1), u32::max);
                Node::Struct {
                    align,
                    names: s.fields.iter().map(|f| f.0.clone()).collect(),
                    fields: fields.into(),
                }
            }
            Ty::Array(elem, len) => {
                let e = self.node(elem, &format!("{loc}[]"));
                let text = is_text(&e);
                Node::Array {
                    len: *len,
                    elem: Box::new(e),
                    text,
                }
            }
            Ty::Sequence(elem, _) => {
                let e = self.node(elem, &format!("{loc}[]"));
                let text = is_text(&e);
                Node::Seq {
                    len_reg: self.refs.get(loc).map_or(NO_REG, |r| r.0),
                    elem: Box::new(e),
                    text,
                }
            }
            Ty::Variant(v) => {
                let (tag_reg, labels) = self.refs.get(loc).cloned().unwrap_or((NO_REG, None));
                let mut map = Vec::new();
                if let Some(e) = labels {
                    for (label, lo, hi) in &e.entries {
                        if let Some(i) = v.options.iter().position(|o| o.0 == strip(label)) {
                            map.push((*lo, *hi, i as u32));
                        }
                    }
                }
                Node::Variant {
                    tag_reg,
                    map: map.into(),
                    names: v.options.iter().map(|o| o.0.clone()).collect(),
                    options: v
                        .options
                        .iter()
                        .map(|(name, t)| self.node(t, &format!("{loc}/{name}")))
                        .collect(),
                }
            }
        }
    }
}

fn is_text(e: &Node) -> bool {
    matches!(e, Node::Int(i) if i.encoded && i.op.bits == 8 && i.op.align % 8 == 0)
}

fn split_loc(loc: &str) -> (&str, &str) {
    match loc.find('/') {
        Some(i) => (&loc[..i], &loc[i..]),
        None => (loc, ""),
    }
}

/// Follows a location suffix (`/a/b`) from a root struct; locations through arrays or
/// variants are not needed for relative look-ups of enclosing structs.
fn descend_loc<'t>(ty: &'t Ty, rest: &str) -> Option<(String, &'t Ty)> {
    let parts: Vec<String> = rest
        .split('/')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    let mut ty = ty;
    for part in &parts {
        let part = part.trim_end_matches("[]");
        match ty {
            Ty::Struct(s) => ty = &s.fields.iter().find(|f| f.0 == part)?.1,
            Ty::Variant(v) => ty = &v.options.iter().find(|f| f.0 == part)?.1,
            _ => return None,
        }
        while let Ty::Array(e, _) | Ty::Sequence(e, _) = ty {
            ty = e;
        }
    }
    Some((rest.to_string(), ty))
}

fn display_loc(loc: &str) -> String {
    let (scope, rest) = split_loc(loc);
    let scope = match scope.split_once('.') {
        Some((_, "ph")) => "trace.packet.header",
        Some((_, "pc")) => "stream.packet.context",
        Some((_, "eh")) => "stream.event.header",
        Some((_, "ec")) => "stream.event.context",
        Some((_, "ctx")) => "event.context",
        Some((_, "f")) => "event.fields",
        _ => scope,
    };
    format!("{scope}{}", rest.replace('/', "."))
}

/// Compiles the metadata's types for reading.
pub fn compile(meta: Metadata) -> Result<Layout, LayoutError> {
    let mut meta = meta;
    if meta.streams.is_empty() {
        meta.streams.push(crate::types::StreamClass {
            id: 0,
            packet_context: None,
            event_header: None,
            event_context: None,
        });
    }
    let le = meta.byte_order != ByteOrder::Be;
    let stream_of = |sid: Option<u64>| -> Option<usize> {
        match sid {
            Some(id) => meta.streams.iter().position(|s| s.id == id),
            None => Some(0),
        }
    };
    let mut event_streams = Vec::new();
    for e in &meta.events {
        match stream_of(e.stream_id) {
            Some(s) => event_streams.push(s),
            None => {
                return Err(format!(
                    "event `{}` belongs to stream {} which is not declared",
                    e.name,
                    e.stream_id.unwrap_or(0)
                ))
            }
        }
    }
    let mut c = Compiler {
        meta: &meta,
        le,
        regs_at: HashMap::new(),
        refs: HashMap::new(),
        next_reg: FIRST_DYNAMIC_REG,
        fields: 0,
    };
    let mut lexical = Vec::new();
    let mut scopes: Vec<(String, usize, Option<usize>)> = vec![("T.ph".into(), 0, None)];
    for s in 0..meta.streams.len() {
        for k in ["pc", "eh", "ec"] {
            scopes.push((format!("S{s}.{k}"), s, None));
        }
    }
    for (e, &s) in event_streams.iter().enumerate() {
        scopes.push((format!("E{e}.ctx"), s, Some(e)));
        scopes.push((format!("E{e}.f"), s, Some(e)));
    }
    for (key, s, e) in &scopes {
        if let Some(root) = scope_root(&meta, key) {
            if too_deep(root, MAX_TYPE_DEPTH) {
                return Err(format!(
                    "{} nests types more than {MAX_TYPE_DEPTH} deep",
                    display_loc(key)
                ));
            }
            c.collect(root, key, &mut lexical, *s, *e)?;
        }
    }
    let node_of = |c: &Compiler, key: &str| scope_root(c.meta, key).map(|t| c.node(t, key));
    let packet_header = node_of(&c, "T.ph");
    let mut streams = Vec::new();
    for (s, sc) in meta.streams.iter().enumerate() {
        let packet_context = node_of(&c, &format!("S{s}.pc"));
        let mut flags = [false; 16];
        let mut discarded_bits = None;
        if let Some(Node::Struct { fields, .. }) = &packet_context {
            for f in fields.iter() {
                if let Node::Int(IntNode { op: i, .. }) = f {
                    if i.special != NO_REG {
                        flags[i.special as usize] = true;
                        if i.special == REG_DISCARDED {
                            discarded_bits = Some(i.bits);
                        }
                    }
                }
            }
        }
        let event_header = node_of(&c, &format!("S{s}.eh"));
        let event_context = node_of(&c, &format!("S{s}.ec"));
        streams.push(StreamLayout {
            id: sc.id,
            packet_context_program: packet_context.as_ref().map(program),
            event_header_flat: event_header
                .as_ref()
                .and_then(|h| FlatHeader::of(&program(h))),
            event_header_program: event_header.as_ref().map(program),
            event_context_program: event_context.as_ref().map(program),
            packet_context,
            event_header,
            event_context,
            has_content_size: flags[REG_CONTENT_SIZE as usize],
            has_packet_size: flags[REG_PACKET_SIZE as usize],
            has_ts_begin: flags[REG_TS_BEGIN as usize],
            has_cpu_id: flags[REG_CPU_ID as usize],
            discarded_bits,
            event_ids: HashMap::new(),
            event_dense: Vec::new(),
        });
    }
    let mut events = Vec::new();
    for (e, ec) in meta.events.iter().enumerate() {
        let s = event_streams[e];
        let id = ec.id.unwrap_or(e as u64);
        let stream = &mut streams[s];
        if stream.event_ids.insert(id, e).is_some() {
            return Err(format!("two events with id {id} in stream {}", stream.id));
        }
        if id < 1 << 16 {
            if stream.event_dense.len() <= id as usize {
                stream.event_dense.resize(id as usize + 1, u32::MAX);
            }
            stream.event_dense[id as usize] = e as u32;
        }
        let context = node_of(&c, &format!("E{e}.ctx"));
        let fields = node_of(&c, &format!("E{e}.f"));
        events.push(EventLayout {
            name: ec.name.clone(),
            id,
            stream: s,
            context_program: context.as_ref().map(program),
            fields_program: fields.as_ref().map(program),
            context,
            fields,
        });
    }
    let registers = c.next_reg as usize;
    let mapped = find_mapped_clock(&meta);
    let clock = mapped
        .and_then(|name| meta.clocks.iter().find(|k| k.name == name))
        .or(meta.clocks.first())
        .cloned();
    Ok(Layout {
        meta,
        packet_header_program: packet_header.as_ref().map(program),
        packet_header,
        streams,
        events,
        registers,
        clock,
    })
}

fn find_mapped_clock(meta: &Metadata) -> Option<String> {
    fn walk(t: &Ty) -> Option<String> {
        match t {
            Ty::Int(i) => i.map_clock.clone(),
            Ty::Enum(e) => e.int.map_clock.clone(),
            Ty::Struct(s) => s.fields.iter().find_map(|f| walk(&f.1)),
            Ty::Variant(v) => v.options.iter().find_map(|f| walk(&f.1)),
            Ty::Array(e, _) | Ty::Sequence(e, _) => walk(e),
            _ => None,
        }
    }
    meta.streams
        .iter()
        .filter_map(|s| s.event_header.as_ref().or(s.packet_context.as_ref()))
        .find_map(walk)
}

// ---------------------------------------------------------------------------------
// Reading

/// A decoding problem at a byte offset of the stream file.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeError {
    pub offset: u64,
    pub message: String,
}

struct Cursor<'a, 'r> {
    /// The packet's bytes (up to its content end or the end of the file).
    data: &'a [u8],
    /// File offset of `data[0]`.
    base: u64,
    bit: u64,
    end: u64,
    regs: &'r mut [u64],
    clock: &'r mut u64,
    /// Whether runs append their values; when not, only registers and the clock are
    /// set (and only fixed runs and variants skip their values: the caller truncates).
    emit: bool,
}

/// A cursor's error, boxed: the per-field `Result`s stay one word wide on the hot path.
type Fail = Box<DecodeError>;

impl From<Fail> for DecodeError {
    fn from(boxed: Fail) -> Self {
        *boxed
    }
}

impl Cursor<'_, '_> {
    #[cold]
    fn fail(&self, what: &str) -> Fail {
        Box::new(DecodeError {
            offset: self.base + self.bit / 8,
            message: what.to_string(),
        })
    }

    #[inline]
    fn align(&mut self, align: u32) -> Result<(), Fail> {
        if align > 1 {
            let a = align as u64;
            let aligned = (self.bit + a - 1) & !(a - 1);
            if aligned > self.end {
                return Err(self.fail("the packet ends inside an alignment padding"));
            }
            self.bit = aligned;
        }
        Ok(())
    }

    #[inline]
    fn bits(&mut self, bits: u32, le: bool) -> Result<u64, Fail> {
        let pos = self.bit;
        if pos + bits as u64 > self.end {
            return Err(self.fail(
                "a field runs past the end of the packet's content (truncated or corrupt packet)",
            ));
        }
        let byte = (pos >> 3) as usize;
        let shift = (pos & 7) as u32;
        self.bit = pos + bits as u64;
        let d = self.data;
        if shift == 0 {
            match bits {
                8 => return Ok(d[byte] as u64),
                16 => {
                    let b = [d[byte], d[byte + 1]];
                    return Ok(if le {
                        u16::from_le_bytes(b)
                    } else {
                        u16::from_be_bytes(b)
                    } as u64);
                }
                32 => {
                    let b: [u8; 4] = d[byte..byte + 4].try_into().unwrap_or([0; 4]);
                    return Ok(if le {
                        u32::from_le_bytes(b)
                    } else {
                        u32::from_be_bytes(b)
                    } as u64);
                }
                64 => {
                    let b: [u8; 8] = d[byte..byte + 8].try_into().unwrap_or([0; 8]);
                    return Ok(if le {
                        u64::from_le_bytes(b)
                    } else {
                        u64::from_be_bytes(b)
                    });
                }
                _ => {}
            }
        }
        // Any field of up to 57 bits lies in the 8 bytes from its first one: one load.
        if shift + bits <= 64 && byte + 8 <= d.len() {
            let w: [u8; 8] = d[byte..byte + 8].try_into().unwrap_or([0; 8]);
            let mask = u64::MAX >> (64 - bits);
            return Ok(if le {
                (u64::from_le_bytes(w) >> shift) & mask
            } else {
                (u64::from_be_bytes(w) >> (64 - shift - bits)) & mask
            });
        }
        let n = (shift + bits).div_ceil(8) as usize;
        let bytes = &d[byte..byte + n];
        let mask: u128 = (1u128 << bits) - 1;
        let v = if le {
            let mut v = 0u128;
            for (i, &b) in bytes.iter().enumerate() {
                v |= (b as u128) << (8 * i);
            }
            (v >> shift) & mask
        } else {
            let mut v = 0u128;
            for &b in bytes {
                v = (v << 8) | b as u128;
            }
            (v >> (n as u32 * 8 - shift - bits)) & mask
        };
        Ok(v as u64)
    }

    #[inline(always)]
    fn int(&mut self, i: &IntOp, out: &mut Vec<Val>) -> Result<(), Fail> {
        self.align(i.align)?;
        let raw = self.bits(i.bits, i.le)?;
        let v = sign_extended(i, raw);
        self.apply(i, raw, v);
        out.push(if i.signed {
            Val::I(v as i64)
        } else {
            Val::U(v)
        });
        Ok(())
    }

    /// Runs an [`Op::Fixed`]: its fields at their offsets from the aligned start (only
    /// its `effects` when values are not kept).
    #[inline]
    fn fixed(
        &mut self,
        align: u32,
        bytes: u32,
        fields: &[FixedField],
        effects: &[FixedInt],
        out: &mut Vec<Val>,
    ) -> Result<(), Fail> {
        self.align(align)?;
        let start = (self.bit / 8) as usize;
        self.advance(bytes as u64 * 8)?;
        let Some(run) = self.data.get(start..start + bytes as usize) else {
            return Err(self.fail("a field runs past the end of the packet's content"));
        };
        if !self.emit {
            // Most runs set nothing (an event context read elsewhere): nothing to read.
            for i in effects {
                let raw = load(run, i.offset, i.bytes, i.le);
                let v = ((raw << i.sign_shift) as i64 >> i.sign_shift) as u64;
                self.apply(&i.op, raw, v);
            }
            return Ok(());
        }
        // Integers are read as the 8 bytes from their first one when the packet has
        // them (all but the last few of a packet): no branch on their width.
        let words = self.data.get(start..).unwrap_or(&[]);
        let base = self.base + start as u64;
        // One extend over the fields: the vector grows once, not once per value.
        out.extend(fields.iter().map(|field| match field {
            FixedField::Int(i) => {
                let raw = match words.get(i.offset as usize..i.offset as usize + 8) {
                    Some(w) => {
                        let w: [u8; 8] = w.try_into().unwrap_or([0; 8]);
                        let keep = 64 - i.bytes * 8;
                        if i.le {
                            (u64::from_le_bytes(w) << keep) >> keep
                        } else {
                            u64::from_be_bytes(w) >> keep
                        }
                    }
                    None => load(run, i.offset, i.bytes, i.le),
                };
                let v = ((raw << i.sign_shift) as i64 >> i.sign_shift) as u64;
                if i.effects {
                    self.apply(&i.op, raw, v);
                }
                if i.signed {
                    Val::I(v as i64)
                } else {
                    Val::U(v)
                }
            }
            FixedField::Struct { fields } => Val::Compound(*fields),
            FixedField::Float { offset, bytes, le } => {
                let raw = load(run, *offset, *bytes, *le);
                Val::F(if *bytes == 4 {
                    f32::from_bits(raw as u32) as f64
                } else {
                    f64::from_bits(raw)
                })
            }
            FixedField::Text { offset, len } => {
                let at = *offset as usize;
                let text = run.get(at..at + *len as usize).unwrap_or(&[]);
                Val::Str {
                    start: base + at as u64,
                    len: text_len(text) as u32,
                }
            }
        }));
        Ok(())
    }

    /// Reads a flat event header for its registers and clock only.
    fn flat_header(&mut self, header: &FlatHeader) -> Result<(), Fail> {
        self.align(header.align)?;
        let start = self.bit;
        for f in header.fields.iter() {
            self.flat_int(start, f)?;
        }
        let bits = match &header.variant {
            None => header.bits,
            Some(v) => {
                let tag = self.reg_or(v.tag_reg, 0);
                let Some(option) = variant_option(&v.map, tag) else {
                    return Err(self.fail(&format!("variant tag value {tag} selects no option")));
                };
                let (fields, bits) = &v.options[option as usize];
                for f in fields.iter() {
                    self.flat_int(start, f)?;
                }
                *bits
            }
        };
        self.bit = start + bits as u64;
        if self.bit > self.end {
            return Err(self.fail("the packet ends inside an event header"));
        }
        Ok(())
    }

    /// Reads an integer of a flat header that starts at bit `start`, for its registers
    /// and clock only: one 8-byte load when the packet has the bytes.
    #[inline(always)]
    fn flat_int(&mut self, start: u64, f: &BitField) -> Result<(), Fail> {
        let i = &f.op;
        let pos = start + f.offset as u64;
        let byte = (pos / 8) as usize;
        let word = self.data.get(byte..byte + 8);
        let raw = match word {
            Some(w) if pos + i.bits as u64 <= self.end => {
                let w: [u8; 8] = w.try_into().unwrap_or([0; 8]);
                let shift = (pos % 8) as u32;
                // `place` made sure that shift + bits <= 64.
                if i.le {
                    (u64::from_le_bytes(w) >> shift) & (u64::MAX >> (64 - i.bits))
                } else {
                    (u64::from_be_bytes(w) << shift) >> (64 - i.bits)
                }
            }
            _ => {
                self.bit = pos;
                self.bits(i.bits, i.le)?
            }
        };
        self.apply(i, raw, sign_extended(i, raw));
        Ok(())
    }

    /// Saves an integer's value (`raw` as read, `v` sign-extended) in its registers,
    /// or moves the clock with it.
    #[inline]
    fn apply(&mut self, i: &IntOp, raw: u64, v: u64) {
        if i.reg != NO_REG {
            self.regs[i.reg as usize] = v;
        }
        if i.special != NO_REG {
            self.regs[i.special as usize] = v;
        }
        if i.clock {
            update_clock(self.clock, raw, i.bits);
        }
    }

    /// The value saved in register `reg` (a sequence's length, a variant's tag), or
    /// `fixed` when there is none.
    fn reg_or(&self, reg: u32, fixed: u64) -> u64 {
        if reg == NO_REG {
            fixed
        } else {
            self.regs[reg as usize]
        }
    }

    /// Runs a scope's program: straight to the fixed run when that is all it is (the
    /// common case), else op by op.
    #[inline]
    fn run_scope(&mut self, program: &[Op], out: &mut Vec<Val>) -> Result<(), Fail> {
        match program {
            [Op::Fixed {
                align,
                bytes,
                fields,
                effects,
            }] => self.fixed(*align, *bytes, fields, effects, out),
            program => self.run(program, out),
        }
    }

    /// Moves past `bits` that the packet must hold.
    #[inline]
    fn advance(&mut self, bits: u64) -> Result<(), Fail> {
        if self.bit + bits > self.end {
            return Err(self.fail(
                "a field runs past the end of the packet's content (truncated or corrupt packet)",
            ));
        }
        self.bit += bits;
        Ok(())
    }

    /// Runs a scope's program keeping none of its values (registers and the clock are
    /// still set): a fixed run then costs a bounds check and its effects.
    #[inline]
    fn pass(&mut self, program: &[Op], out: &mut Vec<Val>) -> Result<(), Fail> {
        if let [Op::Fixed {
            align,
            bytes,
            effects,
            ..
        }] = program
        {
            if effects.is_empty() {
                // It sets nothing: only its bytes are passed over.
                self.align(*align)?;
                return self.advance(*bytes as u64 * 8);
            }
        }
        let start = out.len();
        self.emit = false;
        let result = self.run_scope(program, out);
        self.emit = true;
        out.truncate(start);
        result
    }

    /// Runs a decoding program, appending its values to `out`.
    fn run(&mut self, program: &[Op], out: &mut Vec<Val>) -> Result<(), Fail> {
        for op in program {
            match op {
                Op::Int(i) => self.int(i, out)?,
                Op::Struct { align, fields } => {
                    self.align(*align)?;
                    out.push(Val::Compound(*fields));
                }
                Op::Float { bits, align, le } => {
                    self.align(*align)?;
                    let raw = self.bits(*bits, *le)?;
                    out.push(Val::F(if *bits == 32 {
                        f32::from_bits(raw as u32) as f64
                    } else {
                        f64::from_bits(raw)
                    }));
                }
                Op::Str => {
                    self.align(8)?;
                    let start = (self.bit / 8) as usize;
                    let limit = ((self.end / 8) as usize).min(self.data.len());
                    let Some(len) = self
                        .data
                        .get(start..limit)
                        .and_then(|s| memchr::memchr(0, s))
                    else {
                        return Err(self.fail(
                            "a string without its terminating NUL before the end of the packet",
                        ));
                    };
                    self.bit += (len as u64 + 1) * 8;
                    out.push(Val::Str {
                        start: self.base + start as u64,
                        len: len as u32,
                    });
                }
                Op::Text {
                    len,
                    len_reg,
                    align,
                } => {
                    let len = self.reg_or(*len_reg, *len);
                    self.align(*align)?;
                    let bytes = len.saturating_mul(8);
                    if self.bit.saturating_add(bytes) > self.end {
                        return Err(
                            self.fail("a text array runs past the end of the packet's content")
                        );
                    }
                    let start = (self.bit / 8) as usize;
                    let slice = &self.data[start..start + len as usize];
                    let shown = memchr::memchr(0, slice).unwrap_or(slice.len());
                    out.push(Val::Str {
                        start: self.base + start as u64,
                        len: shown as u32,
                    });
                    self.bit += bytes;
                }
                Op::Elements {
                    len,
                    len_reg,
                    align,
                    body,
                } => {
                    let len = self.reg_or(*len_reg, *len);
                    // Every element but an empty one takes at least a bit: a length
                    // beyond the bits left is corrupt (and cannot make the reader spin
                    // or allocate without end).
                    if len > (self.end - self.bit).max(MAX_EMPTY_ELEMENTS) {
                        return Err(self.fail(&format!(
                            "an array or sequence of {len} elements, more than the packet can hold"
                        )));
                    }
                    self.align(*align)?;
                    out.push(Val::Compound(len as u32));
                    for _ in 0..len {
                        self.run(body, out)?;
                    }
                }
                Op::Fixed {
                    align,
                    bytes,
                    fields,
                    effects,
                } => self.fixed(*align, *bytes, fields, effects, out)?,
                Op::Variant {
                    tag_reg,
                    map,
                    options,
                } => {
                    let tag = self.reg_or(*tag_reg, 0);
                    let Some(option) = variant_option(map, tag) else {
                        return Err(
                            self.fail(&format!("variant tag value {tag} selects no option"))
                        );
                    };
                    if self.emit {
                        out.push(Val::Variant(option));
                    }
                    match &*options[option as usize] {
                        // An event header's timestamp: no call for the common case.
                        [Op::Fixed {
                            align,
                            bytes,
                            fields,
                            effects,
                        }] => self.fixed(*align, *bytes, fields, effects, out)?,
                        option => self.run(option, out)?,
                    }
                }
            }
        }
        Ok(())
    }
}

/// An integer's value as read, sign-extended to 64 bits when it is signed.
#[inline]
fn sign_extended(i: &IntOp, raw: u64) -> u64 {
    if i.signed && i.bits < 64 {
        let s = 64 - i.bits;
        ((raw << s) as i64 >> s) as u64
    } else {
        raw
    }
}

/// The option a variant's tag selects. The tag's register holds the value
/// sign-extended to 64 bits: it matches a range as signed or as unsigned.
#[inline]
fn variant_option(map: &[(i128, i128, u32)], tag: u64) -> Option<u32> {
    let (st, ut) = (tag as i64 as i128, tag as i128);
    map.iter()
        .find(|(lo, hi, _)| (*lo <= st && st <= *hi) || (*lo <= ut && ut <= *hi))
        .map(|&(_, _, option)| option)
}

/// The length of text up to its first NUL. Fixed texts are mostly short names
/// (`procname` has 17 bytes), for which a plain loop beats a call to `memchr`.
#[inline]
pub fn text_len(text: &[u8]) -> usize {
    if text.len() <= 32 {
        text.iter().position(|&b| b == 0).unwrap_or(text.len())
    } else {
        memchr::memchr(0, text).unwrap_or(text.len())
    }
}

/// The integer of `bytes` (1, 2, 4 or 8) bytes at `offset` of `run`, which holds them.
#[inline(always)]
fn load(run: &[u8], offset: u32, bytes: u32, le: bool) -> u64 {
    let at = offset as usize;
    macro_rules! word {
        ($t:ty, $n:literal) => {{
            let b: [u8; $n] = run
                .get(at..at + $n)
                .and_then(|b| b.try_into().ok())
                .unwrap_or([0; $n]);
            (if le {
                <$t>::from_le_bytes(b)
            } else {
                <$t>::from_be_bytes(b)
            }) as u64
        }};
    }
    match bytes {
        1 => run.get(at).copied().unwrap_or(0) as u64,
        2 => word!(u16, 2),
        4 => word!(u32, 4),
        _ => word!(u64, 8),
    }
}

#[inline]
pub fn update_clock(clock: &mut u64, value: u64, bits: u32) {
    if bits >= 64 {
        *clock = value;
        return;
    }
    let mask = (1u64 << bits) - 1;
    let mut new = (*clock & !mask) | value;
    if value < (*clock & mask) {
        new = new.wrapping_add(1u64 << bits);
    }
    *clock = new;
}

/// One decoded event, detached from the reader that decoded it.
#[derive(Clone, Copy, Debug)]
pub struct Event<'a, 'v> {
    /// The stream file (string values point into it).
    pub file: &'a [u8],
    /// Stream class and event class (indexes in the layout).
    pub stream: usize,
    pub event: usize,
    pub timestamp: u64,
    pub cpu_id: Option<u64>,
    /// Where event header, stream event context, event context and payload start in
    /// `vals` (`u32::MAX`: absent).
    pub scopes: [u32; 4],
    pub vals: &'v [Val],
    /// Bit of the file where the stream event context starts (before its alignment),
    /// when the event has one: its values may be read from there when `vals` does not
    /// hold them.
    pub context_at: Option<u64>,
}

impl<'a> Event<'a, '_> {
    /// The text of a string value.
    pub fn text(&self, start: u64, len: u32) -> &'a [u8] {
        let s = start as usize;
        self.file.get(s..s + len as usize).unwrap_or(&[])
    }
}

/// Where a packet's events are in its stream file (byte offsets), for readers that
/// decode them themselves ([`StreamReader::next_packet`]).
#[derive(Clone, Copy, Debug)]
pub struct PacketEvents {
    /// The first event's byte.
    pub start: u64,
    /// The end of what the file holds of the content.
    pub end: u64,
    /// The end of the content: beyond `end` when the file cuts the packet off.
    pub content_end: u64,
    pub packet_start: u64,
    /// Whether the header and the content end on byte boundaries.
    pub aligned: bool,
}

/// Reads the packets and events of one stream file in order.
pub struct StreamReader<'a> {
    pub layout: &'a Layout,
    pub file: &'a [u8],
    next_packet: u64,
    /// Current packet: file offset, content end and position in bits from its start.
    pkt_start: u64,
    pkt_end_bits: u64,
    /// Bits of the packet present in the file (less than the content when truncated).
    pkt_avail_bits: u64,
    pkt_bit: u64,
    in_packet: bool,
    pub stream: usize,
    pub clock: u64,
    pub regs: Vec<u64>,
    /// Packet header then packet context values of the current packet.
    pub packet_vals: Vec<Val>,
    pub packet_context_at: Option<usize>,
    /// Event header, stream event context, event context, payload of the current event.
    pub vals: Vec<Val>,
    /// Where each of the four scopes starts in `vals` (`u32::MAX`: absent).
    pub scopes: [u32; 4],
    pub event: usize,
    pub timestamp: u64,
    pub cpu_id: Option<u64>,
    pub events_discarded: u64,
    last_discarded: Option<u64>,
    pub packets: u64,
    pub events: u64,
    /// File offset of the current event.
    pub event_offset: u64,
    /// Whether `vals` holds the event header's values (the event id and timestamp are
    /// read either way): a reader that needs only the rest skips making them.
    pub header_values: bool,
    /// Whether `vals` holds the stream event context's values; when not, they can be
    /// read at `context_at`.
    pub context_values: bool,
    pub context_at: Option<u64>,
}

impl<'a> StreamReader<'a> {
    pub fn new(layout: &'a Layout, file: &'a [u8]) -> Self {
        StreamReader {
            layout,
            file,
            next_packet: 0,
            pkt_start: 0,
            pkt_end_bits: 0,
            pkt_avail_bits: 0,
            pkt_bit: 0,
            in_packet: false,
            stream: 0,
            clock: 0,
            regs: vec![0; layout.registers],
            packet_vals: Vec::new(),
            packet_context_at: None,
            vals: Vec::with_capacity(64),
            scopes: [u32::MAX; 4],
            event: 0,
            timestamp: 0,
            cpu_id: None,
            events_discarded: 0,
            last_discarded: None,
            packets: 0,
            events: 0,
            event_offset: 0,
            header_values: true,
            context_values: true,
            context_at: None,
        }
    }

    fn cursor(&mut self) -> Cursor<'a, '_> {
        let start = self.pkt_start as usize;
        let avail_bytes = self.pkt_avail_bits.div_ceil(8) as usize;
        Cursor {
            data: &self.file[start..start + avail_bytes],
            base: self.pkt_start,
            bit: self.pkt_bit,
            end: self.pkt_avail_bits,
            regs: &mut self.regs,
            clock: &mut self.clock,
            emit: true,
        }
    }

    fn open_packet(&mut self) -> Result<(), DecodeError> {
        let layout = self.layout;
        let start = self.next_packet;
        let file_bits = (self.file.len() as u64 - start) * 8;
        self.pkt_start = start;
        self.pkt_bit = 0;
        self.pkt_avail_bits = file_bits;
        self.pkt_end_bits = file_bits;
        self.packet_vals.clear();
        self.packet_context_at = None;
        for r in [REG_STREAM_ID, REG_MAGIC] {
            self.regs[r as usize] = 0;
        }
        let mut vals = std::mem::take(&mut self.packet_vals);
        let mut cur = self.cursor();
        if let Some(h) = &layout.packet_header_program {
            cur.run(h, &mut vals)?;
        }
        let has_magic = matches!(&layout.packet_header, Some(Node::Struct { names, .. }) if names.iter().any(|n| n == "magic"));
        if has_magic && cur.regs[REG_MAGIC as usize] != PACKET_MAGIC {
            let found = cur.regs[REG_MAGIC as usize];
            self.packet_vals = vals;
            return Err(DecodeError {
                offset: start,
                message: format!("packet magic is {found:#x}, not 0xc1fc1fc1 (corrupt stream or not a CTF stream)"),
            });
        }
        let sid = cur.regs[REG_STREAM_ID as usize];
        let stream = if layout.streams.len() == 1 {
            0
        } else {
            match layout.streams.iter().position(|s| s.id == sid) {
                Some(s) => s,
                None => {
                    return Err(DecodeError {
                        offset: start,
                        message: format!(
                            "packet of stream {sid}, which the metadata does not declare"
                        ),
                    })
                }
            }
        };
        let sl = &layout.streams[stream];
        let mut ctx_at = None;
        if let Some(pc) = &sl.packet_context_program {
            ctx_at = Some(vals.len());
            cur.run(pc, &mut vals)?;
        }
        let header_bits = cur.bit;
        let regs = &*cur.regs;
        let content = if sl.has_content_size {
            Some(regs[REG_CONTENT_SIZE as usize])
        } else {
            None
        };
        let packet = if sl.has_packet_size {
            Some(regs[REG_PACKET_SIZE as usize])
        } else {
            None
        };
        let (content, packet) = match (content, packet) {
            (Some(c), Some(p)) => (c, p),
            (Some(c), None) => (c, c.div_ceil(8) * 8),
            (None, Some(p)) => (p, p),
            (None, None) => (file_bits, file_bits),
        };
        if packet == 0 || packet % 8 != 0 || content > packet || content < header_bits {
            self.packet_vals = vals;
            return Err(DecodeError {
                offset: start,
                message: format!(
                    "packet with content size {content} bits and packet size {packet} bits (after a {header_bits}-bit header)"
                ),
            });
        }
        let ts_begin = regs[REG_TS_BEGIN as usize];
        let discarded = regs[REG_DISCARDED as usize];
        let cpu = regs[REG_CPU_ID as usize];
        self.packet_vals = vals;
        self.packet_context_at = ctx_at;
        self.stream = stream;
        self.pkt_end_bits = content;
        self.pkt_avail_bits = content.min(file_bits);
        self.pkt_bit = header_bits;
        self.next_packet = start + packet / 8;
        self.in_packet = true;
        self.packets += 1;
        self.cpu_id = sl.has_cpu_id.then_some(cpu);
        if sl.has_ts_begin {
            self.clock = ts_begin;
        }
        if let Some(bits) = sl.discarded_bits {
            let prev = self.last_discarded.unwrap_or(0);
            let diff = if bits >= 64 {
                discarded.wrapping_sub(prev)
            } else {
                discarded.wrapping_sub(prev) & ((1u64 << bits) - 1)
            };
            self.events_discarded += diff;
            self.last_discarded = Some(discarded);
        }
        Ok(())
    }

    /// Reads the next event; `Ok(false)` at the end of the stream.
    pub fn next_event(&mut self) -> Result<bool, DecodeError> {
        let layout = self.layout;
        loop {
            if self.in_packet && self.pkt_bit < self.pkt_avail_bits {
                break;
            }
            if self.in_packet {
                self.in_packet = false;
                if self.pkt_avail_bits < self.pkt_end_bits {
                    return Err(DecodeError {
                        offset: self.pkt_start + self.pkt_avail_bits / 8,
                        message: format!(
                            "the packet at byte {} is cut off by the end of the file ({} of its {} content bytes are there)",
                            self.pkt_start,
                            self.pkt_avail_bits / 8,
                            self.pkt_end_bits / 8
                        ),
                    });
                }
            }
            if self.next_packet >= self.file.len() as u64 {
                return Ok(false);
            }
            self.open_packet()?;
        }
        let sl = &layout.streams[self.stream];
        self.event_offset = self.pkt_start + self.pkt_bit / 8;
        let mut vals = std::mem::take(&mut self.vals);
        vals.clear();
        self.regs[REG_EVENT_ID as usize] = 0;
        let mut scopes = [u32::MAX; 4];
        let (header_values, context_values) = (self.header_values, self.context_values);
        let base_bit = self.pkt_start * 8;
        let mut context_at = None;
        let mut cur = self.cursor();
        let result = (|| {
            if let Some(h) = &sl.event_header_program {
                if header_values {
                    scopes[0] = vals.len() as u32;
                    cur.run_scope(h, &mut vals)?;
                } else if let Some(flat) = &sl.event_header_flat {
                    cur.flat_header(flat)?;
                } else {
                    cur.pass(h, &mut vals)?;
                }
            }
            let id = cur.regs[REG_EVENT_ID as usize];
            let Some(event) = sl.event_index(id) else {
                return Err(cur.fail(&format!(
                    "event id {id}, which stream {} does not declare",
                    sl.id
                )));
            };
            if let Some(c) = &sl.event_context_program {
                context_at = Some(base_bit + cur.bit);
                if context_values {
                    scopes[1] = vals.len() as u32;
                    cur.run_scope(c, &mut vals)?;
                } else {
                    cur.pass(c, &mut vals)?;
                }
            }
            let el = &layout.events[event];
            if let Some(c) = &el.context_program {
                scopes[2] = vals.len() as u32;
                cur.run_scope(c, &mut vals)?;
            }
            if let Some(f) = &el.fields_program {
                scopes[3] = vals.len() as u32;
                cur.run_scope(f, &mut vals)?;
            }
            Ok((event, cur.bit))
        })();
        self.vals = vals;
        match result {
            Ok((event, bit)) => {
                if bit == self.pkt_bit {
                    self.in_packet = false;
                    return Err(DecodeError {
                        offset: self.event_offset,
                        message: "an event of zero bits: the reader cannot advance".into(),
                    });
                }
                self.pkt_bit = bit;
                self.scopes = scopes;
                self.context_at = context_at;
                self.event = event;
                self.timestamp = self.clock;
                self.events += 1;
                Ok(true)
            }
            Err(e) => {
                self.in_packet = false;
                self.next_packet = self.file.len() as u64;
                Err(DecodeError {
                    offset: self.event_offset,
                    message: format!(
                        "event {} of the stream: {} (at byte {})",
                        self.events, e.message, e.offset
                    ),
                })
            }
        }
    }

    /// For a reader that decodes a packet's events itself: opens the next packet and
    /// returns where its events are; the reader then stands after it. `Ok(None)` at the
    /// end of the stream.
    pub fn next_packet(&mut self) -> Result<Option<PacketEvents>, DecodeError> {
        if self.next_packet >= self.file.len() as u64 {
            return Ok(None);
        }
        self.open_packet()?;
        self.in_packet = false;
        let start = self.pkt_start;
        Ok(Some(PacketEvents {
            start: start + self.pkt_bit.div_ceil(8),
            end: start + self.pkt_avail_bits / 8,
            content_end: start + self.pkt_end_bits / 8,
            packet_start: start,
            aligned: self.pkt_bit.is_multiple_of(8) && self.pkt_end_bits.is_multiple_of(8),
        }))
    }

    /// The event just read, as the mapping sees it.
    pub fn current(&self) -> Event<'a, '_> {
        Event {
            file: self.file,
            stream: self.stream,
            event: self.event,
            timestamp: self.timestamp,
            cpu_id: self.cpu_id,
            scopes: self.scopes,
            vals: &self.vals,
            context_at: self.context_at,
        }
    }

    /// The text of a string value.
    pub fn text(&self, start: u64, len: u32) -> &'a [u8] {
        self.current().text(start, len)
    }
}
