//! Mapping in the model's next pages from a thread that would otherwise wait.
//!
//! A large import spends a good part of its building thread in page faults: every 4 KiB
//! of a growing column is mapped in when its first row lands there (a third of the
//! mapping thread's time on a CTF trace of millions of events). A decoding thread that
//! is ahead and about to block can instead ask the kernel to map those pages
//! (`madvise(MADV_POPULATE_WRITE)`, Linux 5.14), a window ahead of each column's end,
//! from the address ranges [`opscope_model::Trace::spare_capacity`] lists. Populating
//! changes no byte anyone reads: a page mapped in early reads as the zeros a fault
//! would have given it, and one already mapped is left alone.

use std::ops::Range;

/// How far past each column's end pages are mapped in ahead.
const AHEAD: usize = 512 << 10;
/// Bytes mapped in per step: small, so that the waiting thread checks back soon.
const STEP: usize = 64 << 10;

/// The pages still to map in, from the latest ranges the building thread gave.
#[derive(Default)]
pub struct Prefaulter {
    /// Per allocation (by its end address, which a live allocation does not share):
    /// how far it is mapped in.
    done: Vec<(usize, usize)>,
    /// What is left to map in: page-aligned ranges, and where each allocation ends.
    todo: Vec<(Range<usize>, usize)>,
    /// The kernel cannot do it (too old, or not Linux): no more tries.
    off: bool,
}

impl Prefaulter {
    /// Takes the latest spare ranges of the model's columns (older ones are forgotten:
    /// their columns may have moved since).
    pub fn update(&mut self, spare: &[Range<usize>]) {
        if self.off {
            return;
        }
        let page = page_size();
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
                self.todo.push((mapped..end, r.end));
            }
        }
        self.done = done;
    }

    /// Whether there are pages left to map in.
    pub fn has_work(&self) -> bool {
        !self.off && !self.todo.is_empty()
    }

    /// Maps in up to [`STEP`] bytes of what is left.
    pub fn step(&mut self) {
        let Some((range, alloc_end)) = self.todo.last_mut() else {
            return;
        };
        let end = range.end.min(range.start + STEP);
        let chunk = range.start..end;
        let alloc_end = *alloc_end;
        range.start = end;
        if range.start >= range.end {
            self.todo.pop();
        }
        if let Some(d) = self.done.iter_mut().find(|(e, _)| *e == alloc_end) {
            d.1 = d.1.max(end);
        }
        match populate(chunk) {
            Populated::Yes | Populated::Unmapped => {}
            Populated::Unsupported => {
                self.off = true;
                self.todo.clear();
            }
        }
    }
}

enum Populated {
    Yes,
    /// Part of the range is no longer mapped (the column moved or was freed): skipped.
    Unmapped,
    /// The kernel does not have `MADV_POPULATE_WRITE`.
    Unsupported,
}

#[cfg(target_os = "linux")]
fn populate(range: Range<usize>) -> Populated {
    // SAFETY: madvise reads no memory and writes none that Rust code can observe:
    // MADV_POPULATE_WRITE only makes the kernel map in pages not yet mapped (as zero
    // pages of an anonymous mapping, which is what a first write would have faulted
    // in) and leaves mapped ones alone. A range that is no longer mapped (the column
    // moved since) fails with ENOMEM, or populates someone else's pages, which is as
    // harmless.
    let rc = unsafe {
        libc::madvise(
            range.start as *mut libc::c_void,
            range.len(),
            libc::MADV_POPULATE_WRITE,
        )
    };
    if rc == 0 {
        return Populated::Yes;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ENOMEM) | Some(libc::EFAULT) | Some(libc::EINTR) | Some(libc::EAGAIN) => {
            Populated::Unmapped
        }
        _ => Populated::Unsupported,
    }
}

#[cfg(not(target_os = "linux"))]
fn populate(_range: Range<usize>) -> Populated {
    Populated::Unsupported
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
        let mut column: Vec<u64> = Vec::with_capacity(8 << 20);
        column.extend((0..1000u64).map(|i| i * 7));
        let mut spare = Vec::new();
        spare_of(&column, &mut spare);
        let window = spare[0].start.next_multiple_of(page_size())..spare[0].start + AHEAD;
        let mut p = Prefaulter::default();
        p.update(&spare);
        assert!(p.has_work() || p.off);
        #[cfg(target_os = "linux")]
        assert_eq!(
            resident_pages(window.clone()),
            0,
            "a fresh allocation is not mapped in"
        );
        let mut steps = 0;
        while p.has_work() {
            p.step();
            steps += 1;
        }
        if !p.off {
            assert_eq!(steps, AHEAD / STEP, "the window is mapped in by steps");
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
        column.extend((1000..200_000u64).map(|i| i * 7));
        assert!(column.iter().enumerate().all(|(i, &v)| v == i as u64 * 7));
        // A range that was freed.
        let freed = {
            let gone: Vec<u64> = Vec::with_capacity(1 << 20);
            let mut s = Vec::new();
            spare_of(&gone, &mut s);
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
        let mut vec = vec![0u8; range.len() / page_size()];
        // SAFETY: `range` is page-aligned and lies in a live allocation of the caller;
        // `vec` has one byte per page of it, as mincore writes.
        let rc = unsafe {
            libc::mincore(
                range.start as *mut libc::c_void,
                range.len(),
                vec.as_mut_ptr(),
            )
        };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 != 0).count()
    }

    fn spare_of(column: &Vec<u64>, out: &mut Vec<Range<usize>>) {
        let base = column.as_ptr() as usize;
        out.push(base + column.len() * 8..base + column.capacity() * 8);
    }
}
