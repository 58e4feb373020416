//! Typed key/value bags attached to slices and instants, encoded compactly in one
//! shared byte buffer: keys and string values are interned, integers are varints, so a
//! typical Kineto op's args take a few dozen bytes.

use crate::strings::StrId;

/// Reference to one arg bag in [`Args`]; [`ArgsId::NONE`] for no args.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
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
    /// An array or object kept as its compact JSON text (interned: shapes repeat).
    Json(StrId),
}

const TAG_NULL: u8 = 0;
const TAG_FALSE: u8 = 1;
const TAG_TRUE: u8 = 2;
const TAG_INT: u8 = 3;
const TAG_UINT: u8 = 4;
const TAG_FLOAT: u8 = 5;
const TAG_STR: u8 = 6;
const TAG_JSON: u8 = 7;

/// The shared buffer of all arg bags of a trace.
#[derive(Default, Debug)]
pub struct Args {
    bytes: Vec<u8>,
}

impl Args {
    /// Starts a new bag; entries are added with the writer and sealed by
    /// [`ArgsWriter::finish`]. A bag with no entries costs nothing and yields `NONE`.
    pub fn writer(&mut self) -> ArgsWriter<'_> {
        let start = self.bytes.len();
        // One byte is reserved for the entry count (a varint); `finish` widens it in the
        // rare bag of 128 entries or more.
        self.bytes.push(0);
        ArgsWriter {
            args: self,
            start,
            count: 0,
        }
    }

    /// Iterates the entries of one bag.
    pub fn get(&self, id: ArgsId) -> ArgsIter<'_> {
        if id.is_none() || id.0 as usize >= self.bytes.len() {
            return ArgsIter {
                bytes: &[],
                remaining: 0,
            };
        }
        let mut pos = id.0 as usize;
        let remaining = read_varint(&self.bytes, &mut pos) as usize;
        ArgsIter {
            bytes: &self.bytes[pos..],
            remaining,
        }
    }

    /// Looks up one key of a bag.
    pub fn find(&self, id: ArgsId, key: StrId) -> Option<ArgValue> {
        self.get(id).find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    pub fn heap_bytes(&self) -> usize {
        self.bytes.capacity()
    }

    pub fn shrink_to_fit(&mut self) {
        self.bytes.shrink_to_fit();
    }
}

/// Adds entries to a bag being built.
pub struct ArgsWriter<'a> {
    args: &'a mut Args,
    start: usize,
    count: u32,
}

impl ArgsWriter<'_> {
    pub fn push(&mut self, key: StrId, value: ArgValue) {
        let out = &mut self.args.bytes;
        write_varint(out, key.0 as u64);
        match value {
            ArgValue::Null => out.push(TAG_NULL),
            ArgValue::Bool(false) => out.push(TAG_FALSE),
            ArgValue::Bool(true) => out.push(TAG_TRUE),
            ArgValue::Int(v) => {
                out.push(TAG_INT);
                write_varint(out, ((v << 1) ^ (v >> 63)) as u64);
            }
            ArgValue::UInt(v) => {
                out.push(TAG_UINT);
                write_varint(out, v);
            }
            ArgValue::Float(v) => {
                out.push(TAG_FLOAT);
                out.extend_from_slice(&v.to_le_bytes());
            }
            ArgValue::Str(s) => {
                out.push(TAG_STR);
                write_varint(out, s.0 as u64);
            }
            ArgValue::Json(s) => {
                out.push(TAG_JSON);
                write_varint(out, s.0 as u64);
            }
        }
        self.count += 1;
    }

    /// Seals the bag. Returns `ArgsId::NONE` for an empty bag.
    pub fn finish(self) -> ArgsId {
        let bytes = &mut self.args.bytes;
        if self.count == 0 || self.start >= u32::MAX as usize {
            // Empty, or the buffer is full (4 GiB of args): nothing is referenced,
            // rather than a reference that would not fit.
            bytes.truncate(self.start);
            return ArgsId::NONE;
        }
        if self.count < 0x80 {
            bytes[self.start] = self.count as u8;
        } else {
            let mut count = Vec::new();
            write_varint(&mut count, self.count as u64);
            bytes.splice(self.start..self.start + 1, count);
        }
        ArgsId(self.start as u32)
    }
}

/// Iterator over one bag's `(key, value)` entries.
pub struct ArgsIter<'a> {
    bytes: &'a [u8],
    remaining: usize,
}

impl Iterator for ArgsIter<'_> {
    type Item = (StrId, ArgValue);

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 || self.bytes.is_empty() {
            return None;
        }
        self.remaining -= 1;
        let mut pos = 0;
        let b = self.bytes;
        let key = StrId(read_varint(b, &mut pos) as u32);
        let tag = *b.get(pos)?;
        pos += 1;
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
                let raw: [u8; 8] = b.get(pos..pos + 8)?.try_into().ok()?;
                pos += 8;
                ArgValue::Float(f64::from_le_bytes(raw))
            }
            TAG_STR => ArgValue::Str(StrId(read_varint(b, &mut pos) as u32)),
            _ => ArgValue::Json(StrId(read_varint(b, &mut pos) as u32)),
        };
        self.bytes = &b[pos.min(b.len())..];
        Some((key, value))
    }
}

fn write_varint(out: &mut Vec<u8>, mut v: u64) {
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
}
