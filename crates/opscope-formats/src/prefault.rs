//! Mapping in the model's next pages from a thread that would otherwise wait.
//!
//! A large import spends a good part of its building thread in page faults: every 4 KiB
//! of a growing column is mapped in when its first row lands there (a third of the
//! mapping thread's time on a CTF trace of millions of events). A decoding thread that
//! is ahead and about to block can instead ask the kernel to map those pages
//! (`madvise(MADV_POPULATE_WRITE)`, Linux 5.14), a window ahead of each column's end,
//! from the address ranges [`opscope_model::Trace::spare_capacity`] lists. Populating
//! keeps every byte as it was: a page mapped in early reads as the zeros a fault would
//! have given it, and one already mapped is left alone.

use std::collections::VecDeque;
use std::ops::Range;

/// How far past each column's end pages are mapped in ahead.
const AHEAD: usize = 512 << 10;
/// Bytes mapped in per step: small, so that the waiting thread checks back soon.
const STEP: usize = 64 << 10;

/// The pages still to map in, from the latest ranges the building thread gave.
pub struct Prefaulter {
    page: usize,
    /// Whether the kernel can populate, once asked.
    supported: Option<bool>,
    /// Per allocation (by its end address, which a live allocation does not share):
    /// how far it is mapped in.
    done: Vec<(usize, usize)>,
    /// What is left to map in, taken in turns a step at a time so that every column's
    /// nearest pages come first: page-aligned ranges, and where each allocation ends.
    todo: VecDeque<(Range<usize>, usize)>,
}

impl Default for Prefaulter {
    fn default() -> Self {
        Prefaulter {
            page: page_size(),
            supported: None,
            done: Vec::new(),
            todo: VecDeque::new(),
        }
    }
}

impl Prefaulter {
    /// Takes the latest spare ranges of the model's columns (older ones are forgotten:
    /// their columns may have moved since).
    pub fn update(&mut self, spare: &[Range<usize>]) {
        if self.supported == Some(false) {
            return;
        }
        let page = self.page;
        self.todo.clear();
        let mut done = Vec::with_capacity(spare.len());
        for r in spare {
            let start = r.start.next_multiple_of(page);
            let end = r.end.min(r.start.saturating_add(AHEAD)) / page * page;
            let mapped = self
                .done
                .iter()
                .find(|(alloc_end, _)| *alloc_end == r.end)
                .map_or(start, |&(_, upto)| upto.max(start));
            done.push((r.end, mapped));
            if mapped < end {
                self.todo.push_back((mapped..end, r.end));
            }
        }
        self.done = done;
    }

    /// Whether there are pages left to map in.
    pub fn has_work(&self) -> bool {
        !self.todo.is_empty()
    }

    /// Maps in up to [`STEP`] bytes of the next range in turn.
    pub fn step(&mut self) {
        let page = self.page;
        if !*self.supported.get_or_insert_with(|| can_populate(page)) {
            self.todo.clear();
            return;
        }
        let Some((range, alloc_end)) = self.todo.pop_front() else {
            return;
        };
        let end = range.end.min(range.start + STEP);
        if let Some(d) = self.done.iter_mut().find(|(e, _)| *e == alloc_end) {
            d.1 = d.1.max(end);
        }
        // A range that fails (its column moved or was freed since) is dropped.
        if populate(range.start..end) && end < range.end {
            self.todo.push_back((end..range.end, alloc_end));
        }
    }
}

/// Whether the kernel knows `MADV_POPULATE_WRITE`: it checks the advice before the
/// length, so an empty range tells without touching anything.
#[cfg(target_os = "linux")]
fn can_populate(page: usize) -> bool {
    // SAFETY: a zero-length range covers no memory.
    let rc = unsafe {
        libc::madvise(
            std::ptr::without_provenance_mut(page),
            0,
            libc::MADV_POPULATE_WRITE,
        )
    };
    rc == 0
}

#[cfg(not(target_os = "linux"))]
fn can_populate(_page: usize) -> bool {
    false
}

/// Maps in the pages of `range` (page-aligned); false when the kernel refused.
#[cfg(target_os = "linux")]
fn populate(range: Range<usize>) -> bool {
    // SAFETY: madvise does not touch memory through a Rust reference, and
    // MADV_POPULATE_WRITE keeps every byte as it was: it maps in the pages not yet
    // mapped, as a first write would fault them in, and leaves mapped ones alone. The
    // ranges are spare capacity of this process's own heap allocations (anonymous
    // memory, where an early page reads as the zeros a late one would). If the column
    // moved since, the range may be unmapped (ENOMEM), read-only or PROT_NONE (EINVAL),
    // or reused: populating a reused anonymous page changes nothing either; a reused
    // writable file mapping would only be dirtied (a private one copied) with its
    // contents unchanged, and this process maps its input files read-only.
    let rc = unsafe {
        libc::madvise(
            std::ptr::without_provenance_mut(range.start),
            range.len(),
            libc::MADV_POPULATE_WRITE,
        )
    };
    rc == 0
}

#[cfg(not(target_os = "linux"))]
fn populate(_range: Range<usize>) -> bool {
    false
}

/// Maps in the whole pages that lie within `bytes` (memory this process maps, such as
/// an input file), as reading them would; false when the kernel refused or cannot
/// (`MADV_POPULATE_READ`, Linux 5.14).
#[cfg(target_os = "linux")]
pub(crate) fn populate_read(bytes: &[u8]) -> bool {
    let page = page_size();
    let start = (bytes.as_ptr() as usize).next_multiple_of(page);
    let end = (bytes.as_ptr() as usize + bytes.len()) / page * page;
    if end <= start {
        return true;
    }
    // SAFETY: madvise does not touch memory through a Rust reference, and
    // MADV_POPULATE_READ changes no byte: it maps in pages as a read would fault them in.
    // The range is whole pages inside `bytes`, memory this process has mapped readable
    // (the borrow keeps it mapped for the call).
    let rc = unsafe {
        libc::madvise(
            std::ptr::without_provenance_mut(start),
            end - start,
            libc::MADV_POPULATE_READ,
        )
    };
    rc == 0
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn populate_read(_bytes: &[u8]) -> bool {
    false
}

fn page_size() -> usize {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf has no preconditions.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if size > 0 {
            return size as usize;
        }
    }
    4096
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A column's spare capacity is mapped in without changing what the column holds,
    /// and a range that is no longer mapped is skipped.
    #[test]
    fn populating_spare_capacity_changes_nothing_the_column_holds() {
        // 64 MiB: above glibc's largest mmap threshold, so a fresh mapping whatever
        // other tests freed before.
        let mut trace = opscope_model::Trace::new();
        let column = &mut trace.counters.ts;
        column.reserve_exact(8 << 20);
        column.extend((0..1000i64).map(|i| i * 7));
        let mut spare = Vec::new();
        trace.spare_capacity(&mut spare);
        assert_eq!(
            spare.len(),
            1,
            "only the reserved column has spare capacity"
        );
        let page = page_size();
        let window = spare[0].start.next_multiple_of(page)..(spare[0].start + AHEAD) / page * page;
        let mut p = Prefaulter::default();
        p.update(&spare);
        assert!(p.has_work());
        #[cfg(target_os = "linux")]
        assert_eq!(
            resident_pages(window.clone()),
            0,
            "a fresh allocation is not mapped in"
        );
        while p.has_work() {
            p.step();
        }
        if p.supported == Some(true) {
            #[cfg(target_os = "linux")]
            assert_eq!(
                resident_pages(window.clone()),
                window.len() / page_size(),
                "every page of the window is mapped in"
            );
        }
        // The same range again: nothing left to do.
        p.update(&spare);
        assert!(!p.has_work());
        let column = &mut trace.counters.ts;
        column.extend((1000..200_000i64).map(|i| i * 7));
        assert!(column.iter().enumerate().all(|(i, &v)| v == i as i64 * 7));
        // A range that was freed.
        let freed = {
            let mut gone = opscope_model::Trace::new();
            gone.counters.ts.reserve_exact(1 << 20);
            let mut s = Vec::new();
            gone.spare_capacity(&mut s);
            s
        };
        p.update(&freed);
        while p.has_work() {
            p.step();
        }
    }

    /// How many pages of `range` (page-aligned) are resident.
    #[cfg(target_os = "linux")]
    fn resident_pages(range: Range<usize>) -> usize {
        let mut vec = vec![0u8; range.len().div_ceil(page_size())];
        // SAFETY: `range` starts on a page and lies in a live allocation of the caller;
        // `vec` has a byte for each page it touches, which is what mincore writes.
        let rc = unsafe {
            libc::mincore(
                std::ptr::without_provenance_mut(range.start),
                range.len(),
                vec.as_mut_ptr(),
            )
        };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 != 0).count()
    }
}
