//! The CTF 1.8 type tree and trace description as the TSDL parser produces them.

use std::sync::Arc;

#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum ByteOrder {
    /// The trace's byte order (resolved when layouts are compiled).
    #[default]
    Native,
    Le,
    Be,
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct IntTy {
    pub size: u32,
    /// In bits.
    pub align: u32,
    pub signed: bool,
    pub byte_order: ByteOrder,
    /// 2, 8, 10 or 16.
    pub base: u32,
    /// `encoding = UTF8/ASCII`: arrays and sequences of it are text.
    pub encoded: bool,
    /// `map = clock.NAME.value`.
    pub map_clock: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FloatTy {
    pub size: u32,
    pub align: u32,
    pub byte_order: ByteOrder,
}

#[derive(Clone, Debug, PartialEq)]
pub struct EnumTy {
    pub int: IntTy,
    /// Label and inclusive value range.
    pub entries: Vec<(String, i128, i128)>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct StructTy {
    /// Field names with one leading underscore removed, as CTF readers show them.
    pub fields: Vec<(String, Ty)>,
    /// `align(n)` in bits (1 when not given).
    pub min_align: u32,
    /// Nesting depth (1 + the deepest field), computed once when built.
    pub depth: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct VariantTy {
    /// The tag's path as written (`id`, `event.fields.kind`).
    pub tag: Option<Vec<String>>,
    pub options: Vec<(String, Ty)>,
    /// Nesting depth (1 + the deepest option).
    pub depth: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Ty {
    Int(IntTy),
    Float(FloatTy),
    Str,
    Enum(Arc<EnumTy>),
    Struct(Arc<StructTy>),
    Array(Box<Ty>, u64),
    /// Element type and the path of the length field as written.
    Sequence(Box<Ty>, Vec<String>),
    Variant(Arc<VariantTy>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum EnvValue {
    Int(i64),
    Str(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct ClockClass {
    pub name: String,
    pub freq: u64,
    pub offset_s: i64,
    /// In cycles.
    pub offset: i64,
    pub description: Option<String>,
    pub uuid: Option<String>,
}

impl ClockClass {
    /// Nanoseconds since the clock's origin (the Unix epoch for LTTng) of a clock
    /// value, the way babeltrace2 computes it: exact at 1 GHz, in `f64` otherwise.
    pub fn ns_from_origin(&self, cycles: u64) -> i64 {
        self.origin().ns(cycles)
    }

    /// The clock's offset resolved once, for converting many values.
    pub fn origin(&self) -> ClockOrigin {
        // Normalise the offset so that its cycles are below one second.
        let freq = self.freq as i128;
        let mut offset_s = self.offset_s as i128;
        let mut offset_cycles = self.offset as i128;
        if offset_cycles >= freq || offset_cycles < 0 {
            offset_s += offset_cycles.div_euclid(freq);
            offset_cycles = offset_cycles.rem_euclid(freq);
        }
        ClockOrigin {
            freq: self.freq,
            base_ns: offset_s * 1_000_000_000
                + cycles_to_ns(self.freq, offset_cycles as u64) as i128,
        }
    }
}

/// A clock's frequency and its offset in nanoseconds: [`ClockClass::ns_from_origin`]
/// without resolving the offset per value.
#[derive(Clone, Copy, Debug)]
pub struct ClockOrigin {
    freq: u64,
    base_ns: i128,
}

impl ClockOrigin {
    pub fn ns(&self, cycles: u64) -> i64 {
        let total = self.base_ns + cycles_to_ns(self.freq, cycles) as i128;
        total.clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }
}

pub fn cycles_to_ns(freq: u64, cycles: u64) -> u64 {
    if freq == 1_000_000_000 {
        cycles
    } else {
        let ns = 1e9 * cycles as f64 / freq as f64;
        if ns >= u64::MAX as f64 {
            u64::MAX
        } else {
            ns as u64
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct StreamClass {
    pub id: u64,
    pub packet_context: Option<Ty>,
    pub event_header: Option<Ty>,
    pub event_context: Option<Ty>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct EventClass {
    pub name: String,
    pub id: Option<u64>,
    pub stream_id: Option<u64>,
    pub loglevel: Option<i64>,
    pub context: Option<Ty>,
    pub fields: Option<Ty>,
}

/// Everything a TSDL metadata text declares.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metadata {
    pub major: u32,
    pub minor: u32,
    pub byte_order: ByteOrder,
    pub uuid: Option<[u8; 16]>,
    pub packet_header: Option<Ty>,
    pub env: Vec<(String, EnvValue)>,
    pub clocks: Vec<ClockClass>,
    pub streams: Vec<StreamClass>,
    pub events: Vec<EventClass>,
}

impl Metadata {
    pub fn env_str(&self, key: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|e| e.0 == key)
            .and_then(|e| match &e.1 {
                EnvValue::Str(s) => Some(s.as_str()),
                EnvValue::Int(_) => None,
            })
    }
}

impl Ty {
    /// Nesting depth: 0 for a scalar. Structs and variants store theirs, so this only
    /// walks chains of arrays.
    pub fn depth(&self) -> usize {
        match self {
            Ty::Struct(s) => s.depth,
            Ty::Variant(v) => v.depth,
            Ty::Array(e, _) | Ty::Sequence(e, _) => 1 + e.depth(),
            _ => 0,
        }
    }
}

/// Depth of the deepest of some fields, plus one.
pub fn depth_of(fields: &[(String, Ty)]) -> usize {
    1 + fields.iter().map(|f| f.1.depth()).max().unwrap_or(0)
}

/// Whether `ty` nests deeper than `budget`.
pub fn too_deep(ty: &Ty, budget: usize) -> bool {
    ty.depth() > budget
}
