//! Names the program gives once and events read often (ITT events, NVTX categories): an
//! append-only table of fixed size whose entries are written under a lock and then
//! published, so events read them without one. Names are leaked: they live as long as
//! the process, as the handles that refer to them do.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::fork_lock::{ForkLock, ForkTable};

/// One published name and the key it was given under.
struct Entry {
    key: [AtomicU64; 2],
    name: AtomicUsize,
}

pub struct NameTable<const N: usize> {
    entries: [Entry; N],
    count: AtomicUsize,
    lock: ForkLock<()>,
}

impl<const N: usize> NameTable<N> {
    pub const fn new() -> NameTable<N> {
        NameTable {
            entries: [const {
                Entry {
                    key: [AtomicU64::new(0), AtomicU64::new(0)],
                    name: AtomicUsize::new(0),
                }
            }; N],
            count: AtomicUsize::new(0),
            lock: ForkLock::new(()),
        }
    }

    /// For the fork handlers: abandoning the table in a child unlocks it and nothing
    /// more, since an entry a lost holder was writing is not published yet (`count`).
    pub fn fork_table(&self) -> &dyn ForkTable {
        &self.lock
    }

    /// Adds `name` under `key`; returns its index, or `None` when the table is full.
    pub fn add(&self, key: [u64; 2], name: &[u8]) -> Option<usize> {
        // None, as for a full table, on a thread inside this call already.
        let _lock = self.lock.lock()?;
        let n = self.count.load(Ordering::Acquire);
        let entry = self.entries.get(n)?;
        let text: &'static [u8] = Box::leak(name.to_vec().into_boxed_slice());
        let slot: &'static &'static [u8] = Box::leak(Box::new(text));
        for (k, v) in entry.key.iter().zip(key) {
            k.store(v, Ordering::Relaxed);
        }
        entry
            .name
            .store(slot as *const &[u8] as usize, Ordering::Relaxed);
        // Publishes the entry written above.
        self.count.store(n + 1, Ordering::Release);
        Some(n)
    }

    /// The name at `index`, if one was added there.
    pub fn get(&self, index: usize) -> Option<&'static [u8]> {
        (index < self.count.load(Ordering::Acquire)).then(|| self.name_at(index))
    }

    /// The latest name added under `key`.
    pub fn find(&self, key: [u64; 2]) -> Option<&'static [u8]> {
        let n = self.count.load(Ordering::Acquire);
        (0..n)
            .rev()
            .find(|&i| {
                self.entries[i]
                    .key
                    .each_ref()
                    .map(|k| k.load(Ordering::Relaxed))
                    == key
            })
            .map(|i| self.name_at(i))
    }

    /// The name of a published entry.
    fn name_at(&self, index: usize) -> &'static [u8] {
        let p = self.entries[index].name.load(Ordering::Relaxed) as *const &'static [u8];
        // SAFETY: entries below `count` (read with acquire ordering) point to leaked
        // names, never freed.
        unsafe { *p }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_found_by_index_and_by_key_latest_first_until_full() {
        let table: NameTable<3> = NameTable::new();
        assert_eq!(table.add([7, 1], b"io"), Some(0));
        assert_eq!(table.add([8, 1], b"compute"), Some(1));
        assert_eq!(table.add([7, 1], b"input"), Some(2));
        assert_eq!(table.add([9, 1], b"full"), None);
        assert_eq!(table.get(1), Some(&b"compute"[..]));
        assert_eq!(table.get(3), None);
        assert_eq!(table.find([7, 1]), Some(&b"input"[..]));
        assert_eq!(table.find([7, 2]), None);
    }
}
