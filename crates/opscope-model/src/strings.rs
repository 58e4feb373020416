//! Interned strings: every name, category and string arg value is stored once and
//! referred to by a 4-byte [`StrId`].

use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

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
pub struct StrId(pub u32);

impl StrId {
    pub const EMPTY: StrId = StrId(0);
}

/// All strings of a trace in one buffer, with a hash table for de-duplication.
pub struct StringTable {
    bytes: String,
    /// `ends[i]` is the end offset of string `i` in `bytes`; its start is `ends[i-1]`.
    ends: Vec<u32>,
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
}

impl Default for StringTable {
    fn default() -> Self {
        let mut table = StringTable {
            bytes: String::new(),
            ends: Vec::new(),
            index: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
        };
        table.intern("");
        table
    }
}

impl StringTable {
    pub fn get(&self, id: StrId) -> &str {
        let i = id.0 as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.bytes[start..self.ends[i] as usize]
    }

    /// Returns the id of `s`, adding it if new.
    ///
    /// Strings are limited to 4 GiB in total; a trace that needs more is cut by the
    /// importers long before (they refuse single values over [`Self::MAX_STRING`]).
    pub fn intern(&mut self, s: &str) -> StrId {
        let hash = self.hasher.hash_one(s);
        let (bytes, ends) = (&self.bytes, &self.ends);
        let lookup = |&i: &u32| {
            let i = i as usize;
            let start = if i == 0 { 0 } else { ends[i - 1] as usize };
            &bytes[start..ends[i] as usize] == s
        };
        if let Some(&i) = self.index.find(hash, lookup) {
            return StrId(i);
        }
        let id = self.ends.len() as u32;
        self.bytes.push_str(s);
        self.ends.push(self.bytes.len() as u32);
        let (bytes, ends, hasher) = (&self.bytes, &self.ends, &self.hasher);
        self.index.insert_unique(hash, id, |&i| {
            let i = i as usize;
            let start = if i == 0 { 0 } else { ends[i - 1] as usize };
            hasher.hash_one(&bytes[start..ends[i] as usize])
        });
        StrId(id)
    }

    /// Looks a string up without adding it.
    pub fn find(&self, s: &str) -> Option<StrId> {
        let hash = self.hasher.hash_one(s);
        self.index
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
        self.bytes.capacity() + self.ends.capacity() * 4 + self.index.capacity() * 5
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

/// Saved as the string bytes and their end offsets; the hash index is rebuilt on load.
impl serde::Serialize for StringTable {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (&self.bytes, crate::packed::PackedRef(&self.ends)).serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for StringTable {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let (bytes, crate::packed::PackedVec(ends)): (String, crate::packed::PackedVec<u32>) =
            serde::Deserialize::deserialize(deserializer)?;
        let mut table = StringTable::default();
        let mut start = 0usize;
        for (i, &end) in ends.iter().enumerate() {
            let s = bytes
                .get(start..end as usize)
                .ok_or_else(|| D::Error::custom(format!("string {i}: bad end offset {end}")))?;
            // Interning anew rebuilds the index and checks that no string repeats, so
            // every id keeps its meaning.
            if table.intern(s).0 as usize != i {
                return Err(D::Error::custom(format!(
                    "string {i} repeats an earlier one"
                )));
            }
            start = end as usize;
        }
        if start != bytes.len() {
            return Err(D::Error::custom("string bytes past the last string"));
        }
        Ok(table)
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
    }
}
