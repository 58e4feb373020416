//! Typed key/value bags attached to slices and instants, encoded compactly in one
//! shared byte buffer. A bag's keys and value types (its *shape*) are interned once —
//! every `aten::mm` op or kernel has the same shape — so a bag is a shape number
//! followed by its values: varint integers, interned string ids, 8-byte floats.

use hashbrown::HashMap;

use crate::column::Col;
use crate::strings::StrId;

/// Reference to one arg bag in [`Args`]; [`ArgsId::NONE`] for no args.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[repr(transparent)]
pub struct ArgsId(pub u32);

impl ArgsId {
    pub const NONE: ArgsId = ArgsId(u32::MAX);

    pub fn is_none(self) -> bool {
        self == ArgsId::NONE
    }
}

/// One arg value.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum ArgValue {
    Null,
    Bool(bool),
    Int(i64),
    /// Unsigned values that do not fit an `i64`.
    UInt(u64),
    Float(f64),
    Str(StrId),
    /// An array or object kept as its JSON text (interned: shapes repeat).
    Json(StrId),
}

impl ArgValue {
    /// The value as an integer, when it is one that fits.
    pub fn as_i64(self) -> Option<i64> {
        match self {
            ArgValue::Int(v) => Some(v),
            ArgValue::UInt(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }
}

const TAG_NULL: u8 = 0;
const TAG_FALSE: u8 = 1;
const TAG_TRUE: u8 = 2;
const TAG_INT: u8 = 3;
const TAG_UINT: u8 = 4;
const TAG_FLOAT: u8 = 5;
const TAG_STR: u8 = 6;
const TAG_JSON: u8 = 7;

type Shape = Box<[(StrId, u8)]>;

/// The shared buffer of all arg bags of a trace.
#[derive(Clone, Default, Debug, serde::Serialize, serde::Deserialize)]
pub struct Args {
    #[serde(with = "crate::packed::column")]
    bytes: Col<u8>,
    shapes: Vec<Shape>,
    shape_index: HashMap<Shape, u32>,
    /// The shape of the bag being written; kept to reuse its allocation.
    #[serde(skip)]
    pending: Vec<(StrId, u8)>,
    /// The shapes used last, most recent first: bags of one importer repeat a few
    /// shapes, and comparing is cheaper than hashing.
    #[serde(skip)]
    recent: [u32; RECENT_SHAPES],
}

const RECENT_SHAPES: usize = 4; // `finish` shifts them by hand

impl Args {
    /// Starts a new bag; entries are added with the writer and sealed by
    /// [`ArgsWriter::finish`]. A bag with no entries costs nothing and yields `NONE`.
    pub fn writer(&mut self) -> ArgsWriter<'_> {
        let start = self.bytes.len();
        // One byte is reserved for the shape number (a varint); `finish` widens it
        // once a trace has more than 127 shapes.
        self.bytes.push(0);
        self.pending.clear();
        ArgsWriter { args: self, start }
    }

    /// Iterates the entries of one bag.
    pub fn get(&self, id: ArgsId) -> ArgsIter<'_> {
        self.bag(id).unwrap_or(ArgsIter {
            bytes: &[],
            shape: &[],
        })
    }

    /// The entries of bag `id`, or `None` when it is out of the buffer or names no
    /// shape (or is `NONE`).
    fn bag(&self, id: ArgsId) -> Option<ArgsIter<'_>> {
        if id.is_none() || id.0 as usize >= self.bytes.len() {
            return None;
        }
        let mut pos = id.0 as usize;
        let shape = read_varint(&self.bytes, &mut pos) as usize;
        Some(ArgsIter {
            bytes: &self.bytes[pos..],
            shape: self.shapes.get(shape)?,
        })
    }

    /// Looks up one key of a bag.
    pub fn find(&self, id: ArgsId, key: StrId) -> Option<ArgValue> {
        self.get(id).find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    pub(crate) fn spare_capacity(&self, out: &mut Vec<std::ops::Range<usize>>) {
        crate::events::push_spare(&self.bytes, out);
    }

    /// Room for `bytes` more bytes of bags, as far as memory allows.
    pub(crate) fn reserve(&mut self, bytes: usize) {
        let _ = self.bytes.try_reserve(bytes);
    }

    pub fn heap_bytes(&self) -> usize {
        self.bytes.capacity()
            + self
                .shapes
                .iter()
                .map(|s| s.len() * 8 * 2 + 32)
                .sum::<usize>()
    }

    /// Whether every shape's keys and every bag's string values are ids below
    /// `n_strings`, and every bag's shape exists (a model read back could differ).
    pub(crate) fn check(&self, n_strings: usize) -> Result<(), String> {
        let str_ok = |id: StrId| (id.0 as usize) < n_strings;
        for (n, shape) in self.shapes.iter().enumerate() {
            if !shape.iter().all(|&(key, _)| str_ok(key)) {
                return Err(format!("args shape {n}: key string ids"));
            }
            if let Some(&(_, tag)) = shape.iter().find(|&&(_, tag)| tag > TAG_JSON) {
                return Err(format!("args shape {n}: unknown value tag {tag}"));
            }
        }
        if self
            .shape_index
            .values()
            .any(|&n| n as usize >= self.shapes.len())
        {
            return Err("args shape index: unknown shape".into());
        }
        Ok(())
    }

    /// A checker of bags against `n_strings` (see [`BagChecker`]).
    pub(crate) fn checker(&self, n_strings: usize) -> BagChecker<'_> {
        let last_string = self
            .shapes
            .iter()
            .map(|shape| {
                shape
                    .iter()
                    .rposition(|&(_, tag)| tag >= TAG_STR)
                    .map_or(0, |i| i + 1)
            })
            .collect();
        BagChecker {
            args: self,
            n_strings,
            last_string,
        }
    }

    pub fn shrink_to_fit(&mut self) {
        self.bytes.shrink_to_fit();
        self.pending = Vec::new();
    }
}

/// Checks bags as [`crate::Trace::check`] needs: that each names an existing shape and
/// that its string values are ids below the table's length. Millions of bags are checked
/// when a model is read back, so values after a shape's last string are not decoded and
/// the others are skipped, not built.
pub(crate) struct BagChecker<'a> {
    args: &'a Args,
    n_strings: usize,
    /// Per shape, how many of its entries to walk: up to its last string value.
    last_string: Vec<usize>,
}

impl BagChecker<'_> {
    pub(crate) fn bag_ok(&self, id: ArgsId) -> bool {
        if id.is_none() {
            return true;
        }
        let bytes = &self.args.bytes;
        let mut pos = id.0 as usize;
        if pos >= bytes.len() {
            return false;
        }
        let shape = read_varint(bytes, &mut pos) as usize;
        let (Some(entries), Some(&walk)) =
            (self.args.shapes.get(shape), self.last_string.get(shape))
        else {
            return false;
        };
        for &(_, tag) in &entries[..walk] {
            match tag {
                TAG_INT | TAG_UINT => {
                    // A varint: up to and including its first byte below 0x80.
                    match bytes
                        .get(pos..)
                        .and_then(|b| b.iter().position(|&b| b < 0x80))
                    {
                        Some(n) => pos += n + 1,
                        // The bag is cut: the reader takes the strings after it as
                        // id 0, the empty string, which every table has.
                        None => return true,
                    }
                }
                TAG_FLOAT => pos += 8,
                TAG_NULL | TAG_FALSE | TAG_TRUE => {}
                // As the reader does, any other tag is read as a string id.
                _ => {
                    if pos >= bytes.len() {
                        return true;
                    }
                    // Truncated to 32 bits, as the reader makes it an id.
                    if read_varint(bytes, &mut pos) as u32 as usize >= self.n_strings {
                        return false;
                    }
                }
            }
        }
        true
    }
}

/// Adds entries to a bag being built.
pub struct ArgsWriter<'a> {
    args: &'a mut Args,
    start: usize,
}

impl ArgsWriter<'_> {
    #[inline]
    pub fn push(&mut self, key: StrId, value: ArgValue) {
        write_value(self.args.bytes.to_mut(), value);
        self.args.pending.push((key, tag_of(value)));
    }

    /// Seals the bag. Returns `ArgsId::NONE` for an empty bag.
    pub fn finish(self) -> ArgsId {
        let args = self.args;
        if args.pending.is_empty() || self.start >= u32::MAX as usize {
            // Empty, or the buffer is full (4 GiB of args): nothing is referenced,
            // rather than a reference that would not fit.
            args.bytes.truncate(self.start);
            return ArgsId::NONE;
        }
        let pending = std::mem::take(&mut args.pending);
        let recent = args.recent_shape(|s| **s == *pending);
        let shape = recent.unwrap_or_else(|| args.shape_number(&pending));
        args.pending = pending;
        if shape < 0x80 {
            args.bytes[self.start] = shape as u8;
        } else {
            let mut number = Vec::new();
            write_varint(&mut number, shape as u64);
            args.bytes
                .to_mut()
                .splice(self.start..self.start + 1, number);
        }
        ArgsId(self.start as u32)
    }
}

impl Args {
    /// Writes a whole bag at once: the same bag as a writer pushing `entries` one by
    /// one, without its bookkeeping per entry (for importers that write millions of
    /// bags whose entries they hold in a slice).
    pub fn push_bag(&mut self, entries: &[(StrId, ArgValue)]) -> ArgsId {
        let start = self.bytes.len();
        if entries.is_empty() || start >= u32::MAX as usize {
            return ArgsId::NONE;
        }
        let same = |s: &Shape| {
            s.len() == entries.len()
                && s.iter()
                    .zip(entries)
                    .all(|(&(k, t), &(key, value))| k == key && t == tag_of(value))
        };
        let shape = match self.recent_shape(same) {
            Some(n) => n,
            None => {
                let mut pending = std::mem::take(&mut self.pending);
                pending.clear();
                pending.extend(entries.iter().map(|&(k, v)| (k, tag_of(v))));
                let n = self.shape_number(&pending);
                self.pending = pending;
                n
            }
        };
        if shape < 0x80 {
            self.bytes.push(shape as u8);
        } else {
            write_varint(self.bytes.to_mut(), shape as u64);
        }
        for &(_, value) in entries {
            write_value(self.bytes.to_mut(), value);
        }
        ArgsId(start as u32)
    }

    /// The number of the recent shape that `same` accepts, made the most recent.
    #[inline]
    fn recent_shape(&mut self, same: impl Fn(&Shape) -> bool) -> Option<u32> {
        let shapes = &self.shapes;
        let i = self
            .recent
            .iter()
            .position(|&n| shapes.get(n as usize).is_some_and(&same))?;
        self.recent.swap(0, i);
        Some(self.recent[0])
    }

    /// The number of a shape that is not among the recent ones (registered if new),
    /// made the most recent.
    fn shape_number(&mut self, shape: &[(StrId, u8)]) -> u32 {
        let n = match self.shape_index.get(shape) {
            Some(&n) => n,
            None => {
                let n = self.shapes.len() as u32;
                let shape: Shape = shape.into();
                self.shapes.push(shape.clone());
                self.shape_index.insert(shape, n);
                n
            }
        };
        let r = &mut self.recent;
        (r[3], r[2], r[1], r[0]) = (r[2], r[1], r[0], n);
        n
    }
}

/// The tag a value is stored under.
#[inline]
fn tag_of(value: ArgValue) -> u8 {
    match value {
        ArgValue::Null => TAG_NULL,
        ArgValue::Bool(false) => TAG_FALSE,
        ArgValue::Bool(true) => TAG_TRUE,
        ArgValue::Int(_) => TAG_INT,
        ArgValue::UInt(_) => TAG_UINT,
        ArgValue::Float(_) => TAG_FLOAT,
        ArgValue::Str(_) => TAG_STR,
        ArgValue::Json(_) => TAG_JSON,
    }
}

/// Appends a value's bytes (none for null and booleans: the tag says it all).
#[inline]
fn write_value(out: &mut Vec<u8>, value: ArgValue) {
    match value {
        ArgValue::Null | ArgValue::Bool(_) => {}
        ArgValue::Int(v) => write_varint(out, ((v << 1) ^ (v >> 63)) as u64),
        ArgValue::UInt(v) => write_varint(out, v),
        ArgValue::Float(v) => out.extend_from_slice(&v.to_le_bytes()),
        ArgValue::Str(s) | ArgValue::Json(s) => write_varint(out, s.0 as u64),
    }
}

/// Iterator over one bag's `(key, value)` entries.
pub struct ArgsIter<'a> {
    bytes: &'a [u8],
    shape: &'a [(StrId, u8)],
}

impl Iterator for ArgsIter<'_> {
    type Item = (StrId, ArgValue);

    fn next(&mut self) -> Option<Self::Item> {
        let (&(key, tag), rest) = self.shape.split_first()?;
        self.shape = rest;
        let b = self.bytes;
        let mut pos = 0;
        let value = match tag {
            TAG_NULL => ArgValue::Null,
            TAG_FALSE => ArgValue::Bool(false),
            TAG_TRUE => ArgValue::Bool(true),
            TAG_INT => {
                let z = read_varint(b, &mut pos);
                ArgValue::Int(((z >> 1) as i64) ^ -((z & 1) as i64))
            }
            TAG_UINT => ArgValue::UInt(read_varint(b, &mut pos)),
            TAG_FLOAT => {
                let raw: [u8; 8] = b.get(..8)?.try_into().ok()?;
                pos = 8;
                ArgValue::Float(f64::from_le_bytes(raw))
            }
            TAG_STR => ArgValue::Str(StrId(read_varint(b, &mut pos) as u32)),
            _ => ArgValue::Json(StrId(read_varint(b, &mut pos) as u32)),
        };
        self.bytes = &b[pos.min(b.len())..];
        Some((key, value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.shape.len(), Some(self.shape.len()))
    }
}

#[inline(always)]
fn write_varint(out: &mut Vec<u8>, v: u64) {
    if v < 1 << 56 {
        // Up to 8 bytes: the 7-bit groups spread into the bytes of one word, the
        // continuation bits set on all but the last, one fixed-size append, then cut.
        // Large traces write millions of pointers (7 bytes each): no loop per byte.
        // 28-bit halves into 32-bit lanes, 14-bit quarters into 16-bit lanes, 7-bit
        // groups into bytes.
        let mut word = (v & 0x0fff_ffff) | ((v & 0x00ff_ffff_f000_0000) << 4);
        word = (word & 0x0000_3fff_0000_3fff) | ((word & 0x0fff_c000_0fff_c000) << 2);
        word = (word & 0x007f_007f_007f_007f) | ((word & 0x3f80_3f80_3f80_3f80) << 1);
        let significant = 64 - (v | 1).leading_zeros();
        let len = significant.div_ceil(7) as usize;
        let continued = (1u64 << (8 * (len - 1))).wrapping_sub(1);
        word |= 0x8080_8080_8080_8080 & continued;
        let at = out.len();
        out.extend_from_slice(&word.to_le_bytes());
        out.truncate(at + len);
        return;
    }
    let mut v = v;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn read_varint(bytes: &[u8], pos: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    while let Some(&b) = bytes.get(*pos) {
        *pos += 1;
        if shift < 64 {
            v |= ((b & 0x7f) as u64) << shift;
        }
        if b < 0x80 {
            break;
        }
        shift += 7;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LEB128 as its definition states it, one 7-bit group per byte.
    fn leb128(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let group = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(group);
                return out;
            }
            out.push(group | 0x80);
        }
    }

    /// A seeded xorshift generator: the same values on every run.
    fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    /// A bag of fewer than `max_len` entries of every kind, keys below `keys`, string
    /// ids below 2^(64 - `string_shift`).
    fn random_bag(
        next: &mut impl FnMut() -> u64,
        max_len: u64,
        keys: u64,
        string_shift: u32,
    ) -> Vec<(StrId, ArgValue)> {
        let n = next() % max_len;
        (0..n)
            .map(|_| {
                let v = next();
                let value = match v % 8 {
                    0 => ArgValue::Null,
                    1 => ArgValue::Bool(v & 8 == 0),
                    2 => ArgValue::Int(v as i64 >> (v % 60)),
                    3 => ArgValue::UInt(v >> (v % 64)),
                    4 => ArgValue::Float(v as f64 / 3.0),
                    5 => ArgValue::Str(StrId((v >> string_shift) as u32)),
                    6 => ArgValue::Json(StrId((v >> (string_shift + 10).min(63)) as u32)),
                    _ => ArgValue::Int(-((v >> 20) as i64)),
                };
                (StrId((next() % keys) as u32), value)
            })
            .collect()
    }

    /// A whole bag written at once is the bag a writer makes: same bytes, same id, same
    /// shapes, over many shapes (more than fit the one-byte shape number) and values
    /// of every kind.
    #[test]
    fn bags_pushed_whole_equal_bags_written_entry_by_entry() {
        let (mut whole, mut by_entry) = (Args::default(), Args::default());
        let mut next = xorshift(0x2545_F491_4F6C_DD1Du64);
        for _ in 0..5000 {
            // Keys from a small set, so that shapes repeat and also number in the
            // hundreds.
            let entries = random_bag(&mut next, 5, 12, 40);
            let a = whole.push_bag(&entries);
            let mut w = by_entry.writer();
            for &(k, v) in &entries {
                w.push(k, v);
            }
            assert_eq!(a, w.finish());
            assert_eq!(whole.get(a).collect::<Vec<_>>(), entries);
        }
        assert_eq!(whole.bytes, by_entry.bytes);
        assert_eq!(whole.shapes, by_entry.shapes);
        assert!(whole.shapes.len() > 200, "{}", whole.shapes.len());
    }

    /// The checker, which skips what it need not decode, judges every bag as decoding
    /// it whole would: on bags as written and on the same bytes damaged at random.
    #[test]
    fn the_bag_checker_agrees_with_decoding_every_value() {
        let mut next = xorshift(0x9E37_79B9_7F4A_7C15u64);
        let mut args = Args::default();
        let mut ids = Vec::new();
        for _ in 0..3000 {
            // String ids up to 2^10, against tables of 3 to 2^10 strings.
            let entries = random_bag(&mut next, 6, 5, 54);
            ids.push(args.push_bag(&entries));
        }
        ids.extend([
            ArgsId::NONE,
            ArgsId(args.bytes.len() as u32),
            ArgsId(u32::MAX - 1),
        ]);
        let decoded_ok = |args: &Args, id: ArgsId, n_strings: usize| {
            id.is_none()
                || args.bag(id).is_some_and(|mut entries| {
                    entries.all(|(_, v)| match v {
                        ArgValue::Str(s) | ArgValue::Json(s) => (s.0 as usize) < n_strings,
                        _ => true,
                    })
                })
        };
        let (mut passed, mut refused) = (0, 0);
        for round in 0..20 {
            if round > 0 {
                for _ in 0..50 {
                    let at = (next() % args.bytes.len() as u64) as usize;
                    args.bytes[at] = next() as u8;
                }
            }
            if round % 5 == 4 {
                // Tags no writer makes: the reader takes them as strings.
                let n = (next() % args.shapes.len() as u64) as usize;
                if let Some(entry) = args.shapes[n].first_mut() {
                    entry.1 = 8 + (next() % 200) as u8;
                }
            }
            for n_strings in [1usize << 10, 1 << 8, 3] {
                let checker = args.checker(n_strings);
                for &id in &ids {
                    let expected = decoded_ok(&args, id, n_strings);
                    assert_eq!(checker.bag_ok(id), expected, "bag {id:?}, round {round}");
                    if expected {
                        passed += 1;
                    } else {
                        refused += 1;
                    }
                }
            }
        }
        assert!(
            passed > 10_000 && refused > 10_000,
            "{passed} passed, {refused} refused"
        );
    }

    /// A saved shape whose tag no writer makes would be read as a string id taken
    /// from the next bytes: the model is refused, not read into a panic.
    #[test]
    fn a_shape_with_an_unknown_tag_is_refused() {
        let mut trace = crate::Trace::new();
        let key = trace.intern("k");
        trace.args.push_bag(&[(key, ArgValue::UInt(0x7fff_0000))]);
        trace.check().expect("a well-formed model passes");
        trace.args.shapes[0] = Box::new([(key, 8)]);
        assert_eq!(
            trace.check().unwrap_err(),
            "args shape 0: unknown value tag 8"
        );
    }

    #[test]
    fn varints_are_leb128_at_every_length() {
        let mut values = vec![0, 1, 0x7f, 0x80, u64::MAX, 0x7fff_ffff_ffff];
        for bits in 1..64 {
            values.extend([(1u64 << bits) - 1, 1u64 << bits, (1u64 << bits) + 1]);
        }
        for v in values {
            let mut out = vec![0xaa];
            write_varint(&mut out, v);
            assert_eq!(out[1..], leb128(v), "{v:#x}");
            let mut pos = 1;
            assert_eq!(read_varint(&out, &mut pos), v);
            assert_eq!(pos, out.len());
        }
    }

    #[test]
    fn bags_round_trip_every_value_type() {
        let mut args = Args::default();
        let values = [
            ArgValue::Null,
            ArgValue::Bool(true),
            ArgValue::Bool(false),
            ArgValue::Int(-5),
            ArgValue::Int(i64::MIN),
            ArgValue::Int(i64::MAX),
            ArgValue::UInt(u64::MAX),
            ArgValue::Float(1.5e-300),
            ArgValue::Str(StrId(7)),
            ArgValue::Json(StrId(123_456)),
        ];
        let mut w = args.writer();
        for (i, v) in values.iter().enumerate() {
            w.push(StrId(i as u32 + 1), *v);
        }
        let id = w.finish();
        let empty = args.writer().finish();
        assert!(empty.is_none());
        let mut w2 = args.writer();
        w2.push(StrId(9), ArgValue::Int(300));
        let id2 = w2.finish();
        let got: Vec<_> = args.get(id).collect();
        assert_eq!(got.len(), values.len());
        for (i, (k, v)) in got.iter().enumerate() {
            assert_eq!(k.0, i as u32 + 1);
            assert_eq!(*v, values[i]);
        }
        assert_eq!(args.find(id2, StrId(9)), Some(ArgValue::Int(300)));
        assert_eq!(args.find(id2, StrId(1)), None);
        assert_eq!(args.get(ArgsId::NONE).count(), 0);
    }

    /// Bags cycling through more shapes than the recent-shape cache holds, with the
    /// same keys in other value types: every bag reads back as written.
    #[test]
    fn recent_shapes_never_confuse_bags() {
        let mut args = Args::default();
        let mut written = Vec::new();
        for round in 0..50i64 {
            for shape in 0..(RECENT_SHAPES as u32 + 3) {
                let mut entries = vec![(StrId(1), ArgValue::Int(round))];
                for k in 0..shape {
                    let v = if (round + k as i64) % 2 == 0 {
                        ArgValue::Int(round * 1000 + k as i64)
                    } else {
                        ArgValue::Str(StrId(k))
                    };
                    entries.push((StrId(10 + k), v));
                }
                let mut w = args.writer();
                for (k, v) in &entries {
                    w.push(*k, *v);
                }
                written.push((w.finish(), entries));
            }
        }
        for (id, entries) in &written {
            assert_eq!(&args.get(*id).collect::<Vec<_>>(), entries);
        }
        // Each distinct key/type list is one shape.
        let distinct: std::collections::HashSet<Vec<(StrId, u8)>> = written
            .iter()
            .map(|(_, e)| {
                e.iter()
                    .map(|(k, v)| (*k, matches!(v, ArgValue::Str(_)) as u8))
                    .collect()
            })
            .collect();
        assert_eq!(args.shapes.len(), distinct.len());
    }

    #[test]
    fn shapes_are_shared_and_many_shapes_still_decode() {
        let mut args = Args::default();
        let mut ids = Vec::new();
        // 300 distinct shapes (one key each), then the first shape again.
        for i in 0..300u32 {
            let mut w = args.writer();
            w.push(StrId(i), ArgValue::Int(i as i64));
            ids.push(w.finish());
        }
        let before = args.bytes.len();
        let mut w = args.writer();
        w.push(StrId(0), ArgValue::Int(1));
        let again = w.finish();
        // Shape number (1 byte) and the value (1 byte): no key or type stored again.
        assert_eq!(args.bytes.len() - before, 2);
        assert_eq!(args.shapes.len(), 300);
        for (i, id) in ids.iter().enumerate() {
            let got: Vec<_> = args.get(*id).collect();
            assert_eq!(got, vec![(StrId(i as u32), ArgValue::Int(i as i64))]);
        }
        assert_eq!(args.find(again, StrId(0)), Some(ArgValue::Int(1)));
    }

    #[test]
    fn a_bag_of_many_entries_decodes() {
        let mut args = Args::default();
        let mut w = args.writer();
        for i in 0..1000u32 {
            w.push(StrId(i), ArgValue::Str(StrId(i * 3)));
        }
        let id = w.finish();
        assert_eq!(args.get(id).count(), 1000);
        assert_eq!(args.find(id, StrId(999)), Some(ArgValue::Str(StrId(2997))));
    }
}
