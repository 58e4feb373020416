//! The records the hot path writes into a thread's buffer and the writer reads back:
//! a kind, a timestamp and a few inline fields (strings are copied, since the program
//! may free them as soon as the call returns). Records are built in place, in the room
//! the ring reserved for them, so building one never allocates or copies twice. The
//! commonest pair, an ITT task's begin and end, has 16-byte forms ([`Kind::BeginNamed`],
//! [`Kind::End`]) that refer to a name the thread defined once ([`Kind::DefineName`]).

/// Longest string kept in a record; longer ones are cut (at a UTF-8 boundary).
pub const MAX_STRING: usize = 1024;
/// Most args one record carries.
pub const MAX_ARGS: usize = 8;
/// Room for the largest record: header, time, id, two strings and the args.
pub const MAX_RECORD: usize = 32 + 2 * (2 + MAX_STRING) + MAX_ARGS * (2 + 64 + 1 + 8 + 2 + 64) + 8;

/// What a record stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Filler at the end of the ring: the next record starts at offset 0.
    Wrap = 0,
    /// A slice opens on the writing thread: category, name, args.
    Begin = 1,
    /// The innermost open slice of the writing thread closes (16 bytes: header, time).
    End = 2,
    /// A point in time: category, name, args; `id` is the scope (0 thread, 1 process).
    Instant = 3,
    /// A counter sample: category (the counter's domain), name, one f64 arg `value`.
    Counter = 4,
    /// The writing thread's name.
    ThreadName = 5,
    /// An asynchronous range (may end on another thread) opens: `id`, category, name.
    AsyncBegin = 6,
    /// The asynchronous range `id` of the category closes.
    AsyncEnd = 7,
    /// Args for the innermost open slice of the writing thread.
    Args = 8,
    /// The name of another thread: `id` is its tid.
    OtherThreadName = 9,
    /// A complete slice with its own begin (`id`) and end (the record's time), as ITT
    /// frame submissions give.
    Complete = 10,
    /// Work that ran on a device (a CUDA kernel, copy or memset): begins at `id`, ends
    /// at the record's time; args `device` and `stream` place it, `correlation` ties it
    /// to the API call that launched it.
    DeviceSlice = 11,
    /// A CUDA runtime or driver API call reported after the fact: begins at `id`, ends
    /// at the record's time, on the thread of its `thread` arg; `correlation` as above.
    ApiSlice = 12,
    /// Gives name `id` (for this thread's [`Kind::BeginNamed`] records) its category
    /// and name.
    DefineName = 13,
    /// A slice opens with the category and name the thread defined as the id in the
    /// header (16 bytes: header, time).
    BeginNamed = 14,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            0 => Kind::Wrap,
            1 => Kind::Begin,
            2 => Kind::End,
            3 => Kind::Instant,
            4 => Kind::Counter,
            5 => Kind::ThreadName,
            6 => Kind::AsyncBegin,
            7 => Kind::AsyncEnd,
            8 => Kind::Args,
            9 => Kind::OtherThreadName,
            10 => Kind::Complete,
            11 => Kind::DeviceSlice,
            12 => Kind::ApiSlice,
            13 => Kind::DefineName,
            14 => Kind::BeginNamed,
            _ => return None,
        })
    }
}

/// An arg value as the emitting APIs give them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    U64(u64),
    I64(i64),
    F64(f64),
    Str(&'a [u8]),
}

const TAG_U64: u8 = 0;
const TAG_I64: u8 = 1;
const TAG_F64: u8 = 2;
const TAG_STR: u8 = 3;

/// Builds one record in place. Layout (little-endian): `u32 len | u8 kind | u8 flags |
/// 2 pad | u64 ts | u64 id | str category | str name | u8 nargs | (str key, u8 tag,
/// value)*`, padded to a multiple of 8; a string is `u16 len` and its bytes.
pub struct Builder<'a> {
    bytes: &'a mut [u8],
    len: usize,
    nargs_at: usize,
}

impl<'a> Builder<'a> {
    /// A record in `bytes` (at least [`MAX_RECORD`] long) whose category is `category`
    /// (given in parts, joined without a separator, so callers need not allocate to
    /// prefix it).
    pub fn new(
        bytes: &'a mut [u8],
        kind: Kind,
        ts: u64,
        id: u64,
        category: &[&[u8]],
        name: &[u8],
    ) -> Builder<'a> {
        bytes[4..8].copy_from_slice(&[kind as u8, 0, 0, 0]);
        bytes[8..16].copy_from_slice(&ts.to_le_bytes());
        bytes[16..24].copy_from_slice(&id.to_le_bytes());
        let mut b = Builder {
            bytes,
            len: 24,
            nargs_at: 0,
        };
        b.string_parts(category);
        b.string(name);
        b.nargs_at = b.len;
        b.bytes[b.len] = 0;
        b.len += 1;
        b
    }

    /// Marks the record's times (`ts`, and `id` where it is a time) as nanoseconds of
    /// `CLOCK_MONOTONIC` rather than ticks of the recording clock.
    pub fn times_in_ns(&mut self) -> &mut Builder<'a> {
        self.bytes[5] |= FLAG_NS;
        self
    }

    fn string_parts(&mut self, parts: &[&[u8]]) {
        let at = self.len;
        self.len += 2;
        let mut room = MAX_STRING;
        for part in parts {
            let part = cut(part, room);
            self.bytes[self.len..self.len + part.len()].copy_from_slice(part);
            self.len += part.len();
            room -= part.len();
        }
        let len = (self.len - at - 2) as u16;
        self.bytes[at..at + 2].copy_from_slice(&len.to_le_bytes());
    }

    fn string(&mut self, s: &[u8]) {
        let s = cut(s, MAX_STRING);
        self.bytes[self.len..self.len + 2].copy_from_slice(&(s.len() as u16).to_le_bytes());
        self.bytes[self.len + 2..self.len + 2 + s.len()].copy_from_slice(s);
        self.len += 2 + s.len();
    }

    /// Adds an arg; past [`MAX_ARGS`] args are ignored. Keys and string values are
    /// cut to 64 bytes.
    pub fn arg(&mut self, key: &[u8], value: Value<'_>) -> &mut Builder<'a> {
        if self.bytes[self.nargs_at] as usize >= MAX_ARGS {
            return self;
        }
        self.bytes[self.nargs_at] += 1;
        self.string(cut(key, 64));
        let (tag, raw) = match value {
            Value::U64(v) => (TAG_U64, v),
            Value::I64(v) => (TAG_I64, v as u64),
            Value::F64(v) => (TAG_F64, v.to_bits()),
            Value::Str(s) => {
                self.bytes[self.len] = TAG_STR;
                self.len += 1;
                self.string(cut(s, 64));
                return self;
            }
        };
        self.bytes[self.len] = tag;
        self.bytes[self.len + 1..self.len + 9].copy_from_slice(&raw.to_le_bytes());
        self.len += 9;
        self
    }

    /// The finished record, padded to a multiple of 8 bytes.
    pub fn finish(&mut self) -> &[u8] {
        let padded = self.len.div_ceil(8) * 8;
        self.bytes[self.len..padded].fill(0);
        self.bytes[0..4].copy_from_slice(&(padded as u32).to_le_bytes());
        &self.bytes[..padded]
    }
}

/// `s` cut to at most `max` bytes, at a UTF-8 character boundary when `s` is UTF-8.
fn cut(s: &[u8], max: usize) -> &[u8] {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    // Back off continuation bytes (10xxxxxx) so a multi-byte character is not split.
    while end > 0 && (s[end] & 0xC0) == 0x80 {
        end -= 1;
    }
    &s[..end]
}

/// Flag bit of a header: the record's times are already nanoseconds.
const FLAG_NS: u8 = 1;
/// Size of the compact records ([`Kind::BeginNamed`], [`Kind::End`]).
pub const COMPACT: usize = 16;

/// Writes a compact record (header with `id` in its top 24 bits, then the time).
pub fn compact(bytes: &mut [u8], kind: Kind, id: u32, ts: u64) -> usize {
    let header = COMPACT as u64 | ((kind as u64) << 32) | ((id as u64 & 0xFF_FFFF) << 40);
    bytes[..8].copy_from_slice(&header.to_le_bytes());
    bytes[8..16].copy_from_slice(&ts.to_le_bytes());
    COMPACT
}

/// The total length of the record starting at `bytes` (from its header word).
pub fn record_len(header: u64) -> usize {
    (header & 0xFFFF_FFFF) as usize
}

/// The kind byte of a header word.
pub fn header_kind(header: u64) -> u8 {
    ((header >> 32) & 0xFF) as u8
}

/// A header word for the filler record that sends the reader back to offset 0.
pub fn wrap_header(len: usize) -> u64 {
    len as u64 | ((Kind::Wrap as u64) << 32)
}

/// A record read back.
#[derive(Debug)]
pub struct Record<'a> {
    pub kind: Kind,
    /// The times are nanoseconds already (not recording-clock ticks).
    pub times_in_ns: bool,
    pub ts: u64,
    pub id: u64,
    pub category: &'a [u8],
    pub name: &'a [u8],
    args: &'a [u8],
    nargs: u8,
}

impl<'a> Record<'a> {
    /// Reads a record written by [`Builder`]; `None` for bytes that are not one.
    pub fn parse(bytes: &'a [u8]) -> Option<Record<'a>> {
        let kind = Kind::from_u8(*bytes.get(4)?)?;
        let ts = u64::from_le_bytes(bytes.get(8..16)?.try_into().ok()?);
        if matches!(kind, Kind::BeginNamed | Kind::End) {
            // Compact records hold an id where others hold flags; their times are
            // always recording-clock ticks.
            let header = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
            return Some(Record {
                kind,
                times_in_ns: false,
                ts,
                id: header >> 40,
                category: &[],
                name: &[],
                args: &[],
                nargs: 0,
            });
        }
        let times_in_ns = bytes.get(5)? & FLAG_NS != 0;
        let id = u64::from_le_bytes(bytes.get(16..24)?.try_into().ok()?);
        let mut pos = 24;
        let category = read_str(bytes, &mut pos)?;
        let name = read_str(bytes, &mut pos)?;
        let nargs = *bytes.get(pos)?;
        Some(Record {
            kind,
            times_in_ns,
            ts,
            id,
            category,
            name,
            args: &bytes[pos + 1..],
            nargs,
        })
    }

    /// The record's args, in the order they were added.
    pub fn args(&self) -> Args<'a> {
        Args {
            bytes: self.args,
            pos: 0,
            left: self.nargs,
        }
    }
}

fn read_str<'a>(bytes: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    let len = u16::from_le_bytes(bytes.get(*pos..*pos + 2)?.try_into().ok()?) as usize;
    let s = bytes.get(*pos + 2..*pos + 2 + len)?;
    *pos += 2 + len;
    Some(s)
}

/// Iterates a record's args.
pub struct Args<'a> {
    bytes: &'a [u8],
    pos: usize,
    left: u8,
}

impl<'a> Iterator for Args<'a> {
    type Item = (&'a [u8], Value<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let key = read_str(self.bytes, &mut self.pos)?;
        let tag = *self.bytes.get(self.pos)?;
        self.pos += 1;
        if tag == TAG_STR {
            return Some((key, Value::Str(read_str(self.bytes, &mut self.pos)?)));
        }
        let raw = u64::from_le_bytes(self.bytes.get(self.pos..self.pos + 8)?.try_into().ok()?);
        self.pos += 8;
        let value = match tag {
            TAG_U64 => Value::U64(raw),
            TAG_I64 => Value::I64(raw as i64),
            TAG_F64 => Value::F64(f64::from_bits(raw)),
            _ => return None,
        };
        Some((key, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_as_built() {
        let mut buf = vec![0u8; MAX_RECORD];
        let mut b = Builder::new(
            &mut buf,
            Kind::Begin,
            123,
            7,
            &[b"itt/", b"PyTorch"],
            b"aten::mm",
        );
        b.arg(b"payload", Value::I64(-5))
            .arg(b"color", Value::Str(b"#ff0000"))
            .arg(b"x", Value::F64(1.5))
            .arg(b"n", Value::U64(u64::MAX));
        let bytes = b.finish().to_vec();
        assert_eq!(bytes.len() % 8, 0);
        assert_eq!(
            record_len(u64::from_le_bytes(bytes[..8].try_into().unwrap())),
            bytes.len()
        );
        let r = Record::parse(&bytes).unwrap();
        assert_eq!((r.kind, r.ts, r.id), (Kind::Begin, 123, 7));
        assert_eq!(
            (r.category, r.name),
            (&b"itt/PyTorch"[..], &b"aten::mm"[..])
        );
        let args: Vec<_> = r.args().collect();
        assert_eq!(
            args,
            vec![
                (&b"payload"[..], Value::I64(-5)),
                (&b"color"[..], Value::Str(b"#ff0000")),
                (&b"x"[..], Value::F64(1.5)),
                (&b"n"[..], Value::U64(u64::MAX)),
            ]
        );
    }

    #[test]
    fn compact_records_carry_their_id_and_time_in_16_bytes() {
        let mut buf = [0u8; COMPACT];
        for id in [1u32, 2, 0xFF_FFFF] {
            assert_eq!(compact(&mut buf, Kind::BeginNamed, id, 77), COMPACT);
            let r = Record::parse(&buf).unwrap();
            assert_eq!((r.kind, r.id, r.ts), (Kind::BeginNamed, id as u64, 77));
            assert!(!r.times_in_ns, "an odd id is not a flag");
            assert_eq!(
                record_len(u64::from_le_bytes(buf[..8].try_into().unwrap())),
                COMPACT
            );
        }
        compact(&mut buf, Kind::End, 0, 5);
        assert_eq!(Record::parse(&buf).unwrap().kind, Kind::End);
    }

    #[test]
    fn long_strings_are_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_STRING); // 2 bytes per character
        let mut buf = vec![0u8; MAX_RECORD];
        let mut b = Builder::new(&mut buf, Kind::Instant, 0, 0, &[], long.as_bytes());
        let bytes = b.finish().to_vec();
        let r = Record::parse(&bytes).unwrap();
        assert!(r.name.len() <= MAX_STRING);
        assert!(std::str::from_utf8(r.name).is_ok());
    }

    #[test]
    fn args_beyond_the_limit_are_dropped_and_the_largest_record_fits() {
        let s = [b'a'; 200];
        let mut buf = vec![0u8; MAX_RECORD];
        let mut b = Builder::new(
            &mut buf,
            Kind::Begin,
            0,
            0,
            &[&[b'c'; 5000], b"more"],
            &[b'n'; 5000],
        );
        for _ in 0..MAX_ARGS + 3 {
            b.arg(&s, Value::Str(&s));
        }
        let bytes = b.finish().to_vec();
        assert!(bytes.len() <= MAX_RECORD);
        assert_eq!(Record::parse(&bytes).unwrap().args().count(), MAX_ARGS);
    }
}
