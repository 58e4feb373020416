//! The library's own memory: every Rust allocation of the injected library comes from
//! mappings it makes itself, never from the recorded program's `malloc`.
//!
//! A few hundred small blocks that the library keeps (names, caches), taken from the
//! program's heap, move where glibc puts the program's own large blocks and how much
//! heap it gives back to the kernel at each trim: a PyTorch CPU step then spent 5-15 %
//! more in page faults refilling tensor memory (bench/record.py). With memory of its
//! own the library leaves the program's heap exactly as it would be without it.
//!
//! Small blocks come in power-of-two classes of 16 B to 64 KiB, carved from 64 KiB
//! slabs of 4 MiB regions and kept on one lock-free free list per class; larger or
//! more strictly aligned blocks are mappings of their own. Nothing here locks, so an
//! allocation can neither deadlock after `fork` nor in a signal handler. Slab memory
//! is never unmapped: a free list may read a block's link after another thread took it.

use std::alloc::{GlobalAlloc, Layout};
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// The allocator the cdylib (and every binary linking this crate) uses.
pub struct OwnMemory;

const MIN_CLASS_SHIFT: u32 = 4;
const MAX_CLASS_SHIFT: u32 = 16;
const CLASSES: usize = (MAX_CLASS_SHIFT - MIN_CLASS_SHIFT + 1) as usize;
const SLAB: usize = 1 << MAX_CLASS_SHIFT;
const REGION: usize = 64 * SLAB;
const PAGE: usize = 4096;

/// Free-list heads: a block address in the low 48 bits (user-space addresses on
/// x86-64 and aarch64 fit), a counter in the high 16 that every change bumps, so that
/// a head popped and pushed back meanwhile fails the compare-and-swap (ABA).
static FREE: [AtomicU64; CLASSES] = [const { AtomicU64::new(0) }; CLASSES];
const ADDRESS_BITS: u32 = 48;
const ADDRESS_MASK: u64 = (1 << ADDRESS_BITS) - 1;

/// The region slabs are cut from; its first word counts the bytes handed out.
static REGION_NOW: AtomicPtr<Region> = AtomicPtr::new(ptr::null_mut());

#[repr(C)]
struct Region {
    used: AtomicUsize,
}

/// A free block's first word: the next free block of its class.
#[repr(C)]
struct FreeBlock {
    next: AtomicU64,
}

fn class_of(layout: Layout) -> Option<usize> {
    if layout.align() > PAGE {
        return None;
    }
    let size = layout.size().max(layout.align()).max(1 << MIN_CLASS_SHIFT);
    let shift = size.next_power_of_two().trailing_zeros();
    (shift <= MAX_CLASS_SHIFT).then(|| (shift - MIN_CLASS_SHIFT) as usize)
}

fn class_size(class: usize) -> usize {
    1 << (class as u32 + MIN_CLASS_SHIFT)
}

fn map(bytes: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping with no address hint; the result is checked.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED || p as u64 > ADDRESS_MASK {
        if p != libc::MAP_FAILED {
            // SAFETY: unmapping the mapping just made, which nothing else knows.
            unsafe { libc::munmap(p, bytes) };
        }
        return ptr::null_mut();
    }
    p.cast()
}

fn pop(class: usize) -> *mut u8 {
    let head = &FREE[class];
    let mut current = head.load(Ordering::Acquire);
    loop {
        let block = (current & ADDRESS_MASK) as *mut FreeBlock;
        if block.is_null() {
            return ptr::null_mut();
        }
        // SAFETY: free-list blocks lie in slab memory, which is never unmapped; if
        // another thread took this block meanwhile, the link read may be stale, and
        // the compare-and-swap below fails on the changed counter.
        let next = unsafe { (*block).next.load(Ordering::Relaxed) } & ADDRESS_MASK;
        let counter = (current >> ADDRESS_BITS).wrapping_add(1) << ADDRESS_BITS;
        match head.compare_exchange_weak(
            current,
            next | counter,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return block.cast(),
            Err(now) => current = now,
        }
    }
}

/// # Safety
/// `block` is a block of `class` cut from a slab, that nobody uses any more.
unsafe fn push(class: usize, block: *mut u8) {
    let head = &FREE[class];
    let node = block.cast::<FreeBlock>();
    let mut current = head.load(Ordering::Acquire);
    loop {
        // SAFETY: the caller gives the block up; its first word becomes the link.
        unsafe {
            (*node)
                .next
                .store(current & ADDRESS_MASK, Ordering::Relaxed)
        };
        let counter = (current >> ADDRESS_BITS).wrapping_add(1) << ADDRESS_BITS;
        match head.compare_exchange_weak(
            current,
            node as u64 | counter,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return,
            Err(now) => current = now,
        }
    }
}

/// A fresh 64 KiB slab (page-aligned), from the current region or a new one.
fn slab() -> *mut u8 {
    loop {
        let region = REGION_NOW.load(Ordering::Acquire);
        if !region.is_null() {
            // SAFETY: regions are never unmapped; `used` is their first word.
            let offset = unsafe { (*region).used.fetch_add(SLAB, Ordering::AcqRel) };
            if offset + SLAB <= REGION {
                // SAFETY: within the region's mapping.
                return unsafe { region.cast::<u8>().add(offset) };
            }
        }
        let fresh = map(REGION).cast::<Region>();
        if fresh.is_null() {
            return ptr::null_mut();
        }
        // The first slab holds the header and stays unused; this thread takes the
        // second.
        // SAFETY: a fresh mapping of REGION bytes, not yet shared.
        unsafe {
            ptr::write(
                fresh,
                Region {
                    used: AtomicUsize::new(2 * SLAB),
                },
            )
        };
        match REGION_NOW.compare_exchange(region, fresh, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: the second slab of the fresh region, which nobody else can have.
            Ok(_) => return unsafe { fresh.cast::<u8>().add(SLAB) },
            Err(_) => {
                // Another thread installed a region first: use that one.
                // SAFETY: our fresh mapping was never shared.
                unsafe { libc::munmap(fresh.cast(), REGION) };
            }
        }
    }
}

fn alloc_small(class: usize) -> *mut u8 {
    let block = pop(class);
    if !block.is_null() {
        return block;
    }
    let slab = slab();
    if slab.is_null() {
        return ptr::null_mut();
    }
    let size = class_size(class);
    for i in 1..SLAB / size {
        // SAFETY: the slab is this thread's alone; each block lies inside it.
        unsafe { push(class, slab.add(i * size)) };
    }
    slab
}

fn mapped_len(layout: Layout) -> usize {
    layout.size().max(1).next_multiple_of(PAGE)
}

fn alloc_large(layout: Layout) -> *mut u8 {
    let len = mapped_len(layout);
    if layout.align() <= PAGE {
        return map(len);
    }
    // Map more and cut the head and tail that miss the alignment.
    let Some(over) = len.checked_add(layout.align()) else {
        return ptr::null_mut();
    };
    let base = map(over);
    if base.is_null() {
        return base;
    }
    let start = (base as usize).next_multiple_of(layout.align());
    let (head, tail) = (start - base as usize, over - (start - base as usize) - len);
    // SAFETY: unmapping the unused page-aligned head and tail of our own mapping.
    unsafe {
        if head > 0 {
            libc::munmap(base.cast(), head);
        }
        if tail > 0 {
            libc::munmap((start + len) as *mut libc::c_void, tail);
        }
    }
    start as *mut u8
}

// SAFETY: blocks are unique while allocated (free lists hand each out once), at least
// `layout.size()` long and aligned to `layout.align()` (classes are powers of two at
// least as large as the alignment, slabs are page-aligned; large blocks are mappings).
unsafe impl GlobalAlloc for OwnMemory {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match class_of(layout) {
            Some(class) => alloc_small(class),
            None => alloc_large(layout),
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match class_of(layout) {
            Some(class) => {
                let block = alloc_small(class);
                if !block.is_null() {
                    // SAFETY: a block of at least `layout.size()` bytes, ours alone.
                    unsafe { ptr::write_bytes(block, 0, layout.size()) };
                }
                block
            }
            // A fresh mapping is zero already; not touching it leaves its pages
            // unfaulted until used (a thread's 4 MiB ring, say).
            None => alloc_large(layout),
        }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        match class_of(layout) {
            // SAFETY: the caller frees a block `alloc` made for this layout.
            Some(class) => unsafe { push(class, block) },
            // SAFETY: a mapping `alloc_large` made, of exactly this length.
            None => unsafe {
                libc::munmap(block.cast(), mapped_len(layout));
            },
        }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc`: `new_size` fits an allocation
        // with this alignment.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if class_of(layout).is_some() && class_of(layout) == class_of(new_layout) {
            return block;
        }
        // SAFETY: as `GlobalAlloc::realloc`'s default: a new block, the contents
        // copied, the old block freed.
        unsafe {
            let fresh = self.alloc(new_layout);
            if !fresh.is_null() {
                ptr::copy_nonoverlapping(block, fresh, layout.size().min(new_size));
                self.dealloc(block, layout);
            }
            fresh
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn blocks_are_aligned_distinct_and_reused() {
        let mut blocks = Vec::new();
        for (size, align) in [
            (1, 1),
            (16, 8),
            (17, 8),
            (100, 64),
            (4096, 4096),
            (70_000, 8),
        ] {
            for _ in 0..50 {
                // SAFETY: non-zero sizes; every block is freed below with its layout.
                let p = unsafe { OwnMemory.alloc(layout(size, align)) };
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0, "size {size} align {align}");
                // SAFETY: the block is `size` bytes long and ours.
                unsafe { ptr::write_bytes(p, 0xab, size) };
                blocks.push((p as usize, size, align));
            }
        }
        let mut starts: Vec<(usize, usize)> = blocks.iter().map(|&(p, s, _)| (p, s)).collect();
        starts.sort();
        for pair in starts.windows(2) {
            assert!(
                pair[0].0 + pair[0].1 <= pair[1].0,
                "overlapping blocks {pair:?}"
            );
        }
        for &(p, size, align) in &blocks {
            // SAFETY: freeing each block once, with its layout.
            unsafe { OwnMemory.dealloc(p as *mut u8, layout(size, align)) };
        }
    }

    #[test]
    fn freed_blocks_are_handed_out_again() {
        // Other tests allocate at the same time and may take a block now and then; a
        // free list that lost blocks would give a new address every time.
        let l = layout(40, 8);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..100_000 {
            // SAFETY: non-zero size; freed at once with the same layout.
            unsafe {
                let p = OwnMemory.alloc(l);
                assert!(!p.is_null());
                seen.insert(p as usize);
                OwnMemory.dealloc(p, l);
            }
        }
        assert!(
            seen.len() < 10_000,
            "{} distinct blocks for 100,000 allocations",
            seen.len()
        );
    }

    #[test]
    fn zeroed_blocks_are_zero_even_when_reused() {
        for size in [24, 5000, 1 << 20] {
            let l = layout(size, 8);
            // SAFETY: non-zero size; the block is written, freed, then asked for again
            // zeroed and freed.
            unsafe {
                let p = OwnMemory.alloc(l);
                ptr::write_bytes(p, 0xff, size);
                OwnMemory.dealloc(p, l);
                let z = OwnMemory.alloc_zeroed(l);
                assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                OwnMemory.dealloc(z, l);
            }
        }
    }

    #[test]
    fn strict_alignment_beyond_a_page() {
        for align in [8192, 1 << 16, 1 << 21] {
            let l = layout(100, align);
            // SAFETY: non-zero size; freed below.
            let p = unsafe { OwnMemory.alloc(l) };
            assert!(!p.is_null());
            assert_eq!(p as usize % align, 0);
            // SAFETY: the block is 100 bytes long and ours; freed once.
            unsafe {
                ptr::write_bytes(p, 1, 100);
                OwnMemory.dealloc(p, l);
            }
        }
    }

    #[test]
    fn realloc_keeps_the_contents_across_classes() {
        let mut v: Vec<u64> = Vec::new();
        for i in 0..100_000u64 {
            v.push(i);
        }
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64));
        v.truncate(10);
        v.shrink_to_fit();
        assert_eq!(v, (0..10).collect::<Vec<u64>>());
    }

    #[test]
    fn threads_share_the_free_lists_without_losing_blocks() {
        let threads: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut live: Vec<Box<[u8; 48]>> = Vec::new();
                    for i in 0..20_000 {
                        live.push(Box::new([t as u8; 48]));
                        if i % 3 == 0 {
                            live.swap_remove(i % live.len());
                        }
                    }
                    assert!(live.iter().all(|b| b.iter().all(|&x| x == t as u8)));
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
