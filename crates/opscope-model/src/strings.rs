//! Interned strings: every name, category and string arg value is stored once and
//! referred to by a 4-byte [`StrId`].

use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;
use std::sync::OnceLock;

use crate::column::Col;

/// Index of an interned string. `StrId::EMPTY` is the empty string.
#[derive(
    Copy,
    Clone,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[repr(transparent)]
pub struct StrId(pub u32);

impl StrId {
    pub const EMPTY: StrId = StrId(0);
}

/// All strings of a trace in one buffer, with a hash table for de-duplication.
pub struct StringTable {
    /// UTF-8, and every end offset is a character boundary (kept by `intern`, and
    /// checked of a table read back).
    bytes: Col<u8>,
    /// `ends[i]` is the end offset of string `i` in `bytes`; its start is `ends[i-1]`.
    ends: Col<u32>,
    /// Built on first use: a model read back from the cache is often only read by id.
    index: OnceLock<HashTable<u32>>,
    hasher: DefaultHashBuilder,
    /// The ids of strings interned lately, by a cheap hash of their bytes: importers
    /// intern the same few names, categories and arg keys over and over, and a hit here
    /// costs one comparison instead of a full hash and a probe of the index. Empty
    /// until the first `intern`.
    recent: Vec<u32>,
}

/// Slots of [`StringTable::recent`].
const RECENT_SLOTS: usize = 1 << 12;

/// The first and last eight bytes of `s` (or four, or each byte): for a string of at
/// most 16 bytes, these and its length are the whole string.
#[inline(always)]
fn ends_of(s: &[u8]) -> (u64, u64) {
    let n = s.len();
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("eight bytes"));
    let half = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("four bytes")) as u64;
    if n >= 8 {
        (word(&s[..8]), word(&s[n - 8..]))
    } else if n >= 4 {
        (half(&s[..4]), half(&s[n - 4..]))
    } else {
        let at = |i: usize| s.get(i).map_or(0, |&b| b as u64);
        (at(0) | at(1) << 8 | at(2) << 16, 0)
    }
}

/// The slot in [`StringTable::recent`] of a string of length `n` with [`ends_of`]
/// `(head, tail)`, mixed. Strings that differ only in the middle share a slot, and take
/// turns in it.
#[inline]
fn recent_slot(n: usize, (head, tail): (u64, u64)) -> usize {
    let mixed = (head ^ tail.rotate_left(31) ^ (n as u64).rotate_left(58))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (mixed >> (64 - 12)) as usize
}

impl Default for StringTable {
    fn default() -> Self {
        let mut table = StringTable {
            bytes: Col::new(),
            ends: Col::new(),
            index: OnceLock::new(),
            hasher: DefaultHashBuilder::default(),
            recent: Vec::new(),
        };
        table.intern("");
        table
    }
}

/// A copy without the hash index: it is built again when the copy first looks a string
/// up (a copy made to be drawn is only read by id).
impl Clone for StringTable {
    fn clone(&self) -> Self {
        StringTable {
            bytes: self.bytes.clone(),
            ends: self.ends.clone(),
            index: OnceLock::new(),
            hasher: self.hasher,
            recent: Vec::new(),
        }
    }
}

impl StringTable {
    pub fn get(&self, id: StrId) -> &str {
        string_at(&self.bytes, &self.ends, id.0 as usize)
    }

    /// The hash index of the strings, built on first use.
    fn index(&self) -> &HashTable<u32> {
        self.index.get_or_init(|| {
            let mut index = HashTable::with_capacity(self.ends.len());
            for i in 0..self.ends.len() as u32 {
                let hash = self.hasher.hash_one(self.get(StrId(i)));
                // A table read back whose strings repeat keeps the first id of each.
                if index
                    .find(hash, |&j| self.get(StrId(j)) == self.get(StrId(i)))
                    .is_none()
                {
                    index.insert_unique(hash, i, |&j| self.hasher.hash_one(self.get(StrId(j))));
                }
            }
            index
        })
    }

    /// Returns the id of `s`, adding it if new.
    ///
    /// Strings are limited to 4 GiB in total; a trace that needs more is cut by the
    /// importers long before (they refuse single values over [`Self::MAX_STRING`]).
    pub fn intern(&mut self, s: &str) -> StrId {
        if self.recent.is_empty() {
            self.recent = vec![0; RECENT_SLOTS];
        }
        // Slots only ever hold ids of this table (it never drops a string), and a hit is
        // checked against the string itself.
        let ends = ends_of(s.as_bytes());
        let slot = recent_slot(s.len(), ends);
        let recent = self.recent[slot];
        if (recent as usize) < self.ends.len() {
            // Most names, categories and keys are short: compared by the words already
            // loaded instead of a call to memcmp (4 % of a load's samples).
            let held = string_at(&self.bytes, &self.ends, recent as usize).as_bytes();
            if held.len() == s.len()
                && if s.len() <= 16 {
                    ends_of(held) == ends
                } else {
                    held == s.as_bytes()
                }
            {
                return StrId(recent);
            }
        }
        let id = self.intern_indexed(s);
        self.recent[slot] = id.0;
        id
    }

    /// `intern` through the hash index.
    fn intern_indexed(&mut self, s: &str) -> StrId {
        let hash = self.hasher.hash_one(s);
        self.index();
        let (bytes, ends) = (&self.bytes, &self.ends);
        let lookup = |&i: &u32| string_at(bytes, ends, i as usize) == s;
        if let Some(&i) = self.index().find(hash, lookup) {
            return StrId(i);
        }
        let id = self.ends.len() as u32;
        self.bytes.extend_from_slice(s.as_bytes());
        self.ends.push(self.bytes.len() as u32);
        let (bytes, ends, hasher) = (&self.bytes, &self.ends, &self.hasher);
        let index = self.index.get_mut().expect("built above");
        // Rehashing must hash each string as `intern` and `find` do: as a `str`.
        index.insert_unique(hash, id, |&i| {
            hasher.hash_one(string_at(bytes, ends, i as usize))
        });
        StrId(id)
    }

    /// Looks a string up without adding it.
    pub fn find(&self, s: &str) -> Option<StrId> {
        let hash = self.hasher.hash_one(s);
        self.index()
            .find(hash, |&i| self.get(StrId(i)) == s)
            .map(|&i| StrId(i))
    }

    /// Number of distinct strings, the empty string included.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.len() <= 1
    }

    /// Bytes of memory held.
    pub fn heap_bytes(&self) -> usize {
        let index = self.index.get().map_or(0, |index| index.capacity() * 5);
        self.bytes.capacity() + self.ends.capacity() * 4 + index
    }

    pub(crate) fn shrink_to_fit(&mut self) {
        self.bytes.shrink_to_fit();
        self.ends.shrink_to_fit();
    }

    /// The largest single string importers accept (the table's offsets are 32-bit).
    pub const MAX_STRING: usize = 1 << 30;

    /// Whether `extra` more bytes still fit.
    pub fn has_room_for(&self, extra: usize) -> bool {
        self.bytes.len() + extra < u32::MAX as usize
    }
}

/// String `i` of a table's `bytes` and `ends`.
fn string_at<'a>(bytes: &'a [u8], ends: &[u32], i: usize) -> &'a str {
    let start = if i == 0 { 0 } else { ends[i - 1] as usize };
    let bytes = &bytes[start..ends[i] as usize];
    // SAFETY: a table's `bytes` are UTF-8 and every end offset a character boundary
    // (its invariant, kept by `intern` and checked of a table read back), so each
    // string between two of them is UTF-8.
    #[allow(unsafe_code)]
    unsafe {
        std::str::from_utf8_unchecked(bytes)
    }
}

/// Saved as the string bytes and their end offsets; the hash index is built again on
/// first use.
impl serde::Serialize for StringTable {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (
            crate::packed::PackedRef(&self.bytes),
            crate::packed::PackedRef(&self.ends),
        )
            .serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for StringTable {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let (crate::packed::PackedVec(bytes), crate::packed::PackedVec(ends)): (
            crate::packed::PackedVec<u8>,
            crate::packed::PackedVec<u32>,
        ) = serde::Deserialize::deserialize(deserializer)?;
        let text = std::str::from_utf8(&bytes)
            .map_err(|e| D::Error::custom(format!("string bytes: {e}")))?;
        if ends.first() != Some(&0) {
            return Err(D::Error::custom("string 0 is not the empty string"));
        }
        let mut start = 0usize;
        for (i, &end) in ends.iter().enumerate() {
            let end = end as usize;
            if end < start || !text.is_char_boundary(end) {
                return Err(D::Error::custom(format!(
                    "string {i}: bad end offset {end}"
                )));
            }
            start = end;
        }
        if start != bytes.len() {
            return Err(D::Error::custom("string bytes past the last string"));
        }
        Ok(StringTable {
            bytes,
            ends,
            index: OnceLock::new(),
            hasher: DefaultHashBuilder::default(),
            recent: Vec::new(),
        })
    }
}

impl std::fmt::Debug for StringTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StringTable({} strings)", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_strings_differing_in_one_byte_keep_their_own_ids() {
        // Every length the word comparison covers and just past it, each byte changed in
        // turn: a comparison that missed a byte would hand one string another's id.
        let mut strings = Vec::new();
        for n in 0..=18 {
            strings.push("a".repeat(n));
            for i in 0..n {
                let mut s = "a".repeat(n).into_bytes();
                s[i] = b'b';
                strings.push(String::from_utf8(s).unwrap());
            }
        }
        let mut t = StringTable::default();
        let mut reference: std::collections::HashMap<&str, StrId> = Default::default();
        for _ in 0..3 {
            for s in strings.iter().chain(strings.iter().rev()) {
                let id = t.intern(s);
                assert_eq!(id, *reference.entry(s).or_insert(id), "{s:?}");
                assert_eq!(t.get(id), s);
            }
        }
        assert_eq!(t.len(), strings.len());
    }

    #[test]
    fn strings_sharing_a_recent_slot_keep_their_own_ids() {
        // Same length, same first and last eight bytes: the same slot of `recent`.
        let (a, b) = ("aaaaaaaa_X_bbbbbbbb", "aaaaaaaa_Y_bbbbbbbb");
        let slot = |s: &str| recent_slot(s.len(), ends_of(s.as_bytes()));
        assert_eq!(slot(a), slot(b));
        let mut t = StringTable::default();
        let mut reference: std::collections::HashMap<String, StrId> = Default::default();
        // Many strings, short and long, repeating in an order that makes them evict each
        // other; each id must be the one a plain map gives.
        for round in 0..3 {
            for i in 0..20_000u32 {
                let s = match i % 4 {
                    0 => a.to_string(),
                    1 => b.to_string(),
                    2 => format!("{}", i % 97),
                    _ => format!("aten::op_{}_{round}", i % 5_000),
                };
                let id = t.intern(&s);
                let expected = *reference.entry(s.clone()).or_insert(id);
                assert_eq!(id, expected, "{s}");
                assert_eq!(t.get(id), s);
            }
        }
        assert_eq!(
            t.len(),
            reference.len() + usize::from(!reference.contains_key(""))
        );
        // A copy and a table read back start with no recent ids and intern the same.
        let copy = t.clone();
        let mut copy = copy;
        assert_eq!(copy.intern(a), reference[a]);
        assert_eq!(copy.intern(""), StrId::EMPTY);
    }

    #[test]
    fn interning_dedups_and_round_trips() {
        let mut t = StringTable::default();
        let a = t.intern("aten::mm");
        let b = t.intern("kernel");
        assert_ne!(a, b);
        assert_eq!(t.intern("aten::mm"), a);
        assert_eq!(t.get(a), "aten::mm");
        assert_eq!(t.get(b), "kernel");
        assert_eq!(t.get(StrId::EMPTY), "");
        assert_eq!(t.intern(""), StrId::EMPTY);
        assert_eq!(t.find("kernel"), Some(b));
        assert_eq!(t.find("nope"), None);
        for i in 0..10_000 {
            let s = format!("s{i}");
            let id = t.intern(&s);
            assert_eq!(t.get(id), s);
        }
        assert_eq!(t.len(), 10_003);
        // After the index grew many times, every string is still found, not added again.
        for i in 0..10_000 {
            let s = format!("s{i}");
            assert_eq!(t.find(&s).map(|id| t.get(id)), Some(s.as_str()));
            t.intern(&s);
        }
        assert_eq!(t.len(), 10_003);
    }

    /// A table read back builds its index on first use: strings keep their ids, new
    /// ones are added after them, and bytes that are no table are refused.
    #[test]
    fn a_table_read_back_finds_its_strings() {
        let mut t = StringTable::default();
        for i in 0..5_000 {
            t.intern(&format!("kernel<{i}>"));
        }
        t.intern("é");
        let saved = postcard::to_allocvec(&t).unwrap();
        let mut back: StringTable = postcard::from_bytes(&saved).unwrap();
        assert_eq!(back.find("kernel<4999>"), t.find("kernel<4999>"));
        assert_eq!(back.intern("kernel<17>"), t.find("kernel<17>").unwrap());
        assert_eq!(back.intern("é"), t.find("é").unwrap());
        assert_eq!(back.intern("new").0 as usize, t.len());
        // The two bytes of "é" split by an end offset: not UTF-8 strings.
        let (bytes, mut ends) = (t.bytes.to_vec(), t.ends.to_vec());
        let last = ends.len() - 1;
        ends.insert(last, ends[last] - 1);
        let split = postcard::to_allocvec(&(
            crate::packed::PackedRef(&Col::from(bytes)),
            crate::packed::PackedRef(&Col::from(ends)),
        ))
        .unwrap();
        assert!(postcard::from_bytes::<StringTable>(&split).is_err());
    }
}
