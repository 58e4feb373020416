//! Per-thread event buffers: each thread that emits owns a single-producer ring of
//! bytes that only the writer thread drains. Writing a record is a few loads, one copy
//! and one release store: no lock, no allocation (after the thread's first event), no
//! system call; a full ring drops the record and counts it, never waits.
//!
//! Buffers are never freed: a thread that exits retires its buffer, the writer drains
//! it and marks it free, and the next new thread takes it over.

use std::cell::{Cell, RefCell};
use std::ptr;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, AtomicU8, Ordering};

use crate::event::{compact, header_kind, record_len, wrap_header, Kind, COMPACT};

/// A thread owns the buffer and writes to it.
const ACTIVE: u8 = 0;
/// Its thread exited; the writer drains what is left, then frees it.
const RETIRED: u8 = 1;
/// Drained and free for the next new thread.
const FREE: u8 = 2;
/// A new thread is taking it over: its tid and claim count are not set yet, so the
/// writer leaves it alone (it would start the new thread's sequence from the old
/// claim and lose the names the thread defines first).
const CLAIMING: u8 = 3;

/// Default size of a thread's ring (see `OPSCOPE_BUFFER_KB`).
pub const DEFAULT_CAPACITY: usize = 4 << 20;

pub struct ThreadBuffer {
    data: *mut u8,
    /// A power of two, at least 64 KiB.
    capacity: usize,
    /// Bytes consumed by the writer (wraps around the ring; only grows).
    head: AtomicU64,
    /// Bytes published by the owner (only grows).
    tail: AtomicU64,
    dropped: AtomicU64,
    state: AtomicU8,
    tid: AtomicI32,
    /// The owner's `pthread_self()`: some profilers name threads by it (see
    /// `Thread::handle` in the model).
    handle: AtomicU64,
    /// Bumped each time a thread takes the buffer over, so the writer starts a new
    /// packet sequence for it.
    claim: AtomicU64,
    next: AtomicPtr<ThreadBuffer>,
}

// SAFETY: the ring bytes are shared by exactly one producer (the owning thread) and one
// consumer (the writer, which holds the writer lock); each only touches the part of the
// ring that `head`/`tail` (with acquire/release ordering) give it.
unsafe impl Sync for ThreadBuffer {}
// SAFETY: as above; the buffer is never freed, so the pointer stays valid on any thread.
unsafe impl Send for ThreadBuffer {}

/// All buffers ever made, newest first (a lock-free list that only grows).
static REGISTRY: AtomicPtr<ThreadBuffer> = AtomicPtr::new(ptr::null_mut());

fn capacity_from_env() -> usize {
    std::env::var(opscope_wire::env::BUFFER_KB)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .map(|kb| (kb.clamp(64, 1 << 20) * 1024).next_power_of_two())
        .unwrap_or(DEFAULT_CAPACITY)
}

impl ThreadBuffer {
    /// None when the memory cannot be had (an address-space limit, many threads):
    /// that thread then records nothing, rather than the program aborting.
    fn allocate(capacity: usize) -> Option<&'static ThreadBuffer> {
        let layout = std::alloc::Layout::from_size_align(capacity, 8).ok()?;
        // SAFETY: the size is not zero (at least 64 KiB). From the library's own
        // mappings (`crate::alloc`): neither taken from the program's heap nor touched
        // before it is written.
        let data = unsafe { std::alloc::alloc_zeroed(layout) };
        if data.is_null() {
            return None;
        }
        Some(Box::leak(Box::new(ThreadBuffer {
            data,
            capacity,
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            state: AtomicU8::new(CLAIMING),
            tid: AtomicI32::new(0),
            handle: AtomicU64::new(0),
            claim: AtomicU64::new(0),
            next: AtomicPtr::new(ptr::null_mut()),
        })))
    }

    /// Takes a free buffer over, or makes a new one, for the calling thread.
    fn claim() -> Option<&'static ThreadBuffer> {
        let tid = current_tid();
        let buffer = registry()
            .find(|b| {
                b.state
                    .compare_exchange(FREE, CLAIMING, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            })
            .or_else(|| {
                let b = ThreadBuffer::allocate(capacity_from_env())?;
                let mut head = REGISTRY.load(Ordering::Acquire);
                loop {
                    b.next.store(head, Ordering::Relaxed);
                    match REGISTRY.compare_exchange_weak(
                        head,
                        b as *const _ as *mut _,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => break,
                        Err(now) => head = now,
                    }
                }
                Some(b)
            })?;
        buffer.tid.store(tid, Ordering::Relaxed);
        buffer.handle.store(current_handle(), Ordering::Relaxed);
        buffer.dropped.store(0, Ordering::Relaxed);
        buffer.claim.fetch_add(1, Ordering::Relaxed);
        // Publishes the tid and claim with the state the writer reads first.
        buffer.state.store(ACTIVE, Ordering::Release);
        Some(buffer)
    }

    /// Appends one record (`bytes.len()` a multiple of 8); false (and counted as
    /// dropped) when it does not fit.
    #[cfg(test)]
    fn push(&self, bytes: &[u8]) -> bool {
        self.push_with(bytes.len(), 0, |slot| {
            slot[..bytes.len()].copy_from_slice(bytes);
            bytes.len()
        })
    }

    /// Appends one record that `write` builds in place: it gets `max` free bytes and
    /// returns how many it used (a multiple of 8, at most `max`). False (and counted as
    /// dropped, with `write` never called) when `max` bytes are not free with `reserve`
    /// more left over (the room promised to the ends of the thread's open slices).
    #[inline(always)]
    fn push_with(&self, max: usize, reserve: u64, write: impl FnOnce(&mut [u8]) -> usize) -> bool {
        let pushed = self.try_push_with(max, reserve, write);
        if !pushed {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        pushed
    }

    /// [`Self::push_with`], counting nothing when the record does not fit.
    #[inline(always)]
    fn try_push_with(
        &self,
        max: usize,
        reserve: u64,
        write: impl FnOnce(&mut [u8]) -> usize,
    ) -> bool {
        let max = max as u64;
        let cap = self.capacity as u64;
        let tail = self.tail.load(Ordering::Relaxed);
        let head = self.head.load(Ordering::Acquire);
        let at = tail & (cap - 1);
        let to_end = cap - at;
        // The record must be contiguous: when `max` bytes do not fit before the end of
        // the ring, a filler takes the rest and the record starts at 0.
        let need = if max <= to_end { max } else { to_end + max };
        if tail.wrapping_sub(head) + need + reserve > cap {
            return false;
        }
        let below_a_quarter = tail.wrapping_sub(head) < self.quarter();
        let (mut at, mut tail) = (at, tail);
        if max > to_end {
            // SAFETY: `at` is 8-aligned and at least 8 bytes remain before the end
            // (capacity and all records are multiples of 8); the region is free.
            unsafe {
                ptr::write_unaligned(
                    self.data.add(at as usize) as *mut u64,
                    wrap_header(to_end as usize),
                );
            }
            tail += to_end;
            at = 0;
        }
        // SAFETY: the `max` bytes from `at` lie inside the ring and are free (checked
        // above); only this thread touches them until `tail` is published.
        let slot =
            unsafe { std::slice::from_raw_parts_mut(self.data.add(at as usize), max as usize) };
        let len = write(slot).min(max as usize) as u64;
        self.tail.store(tail + len, Ordering::Release);
        if below_a_quarter && (tail + len).wrapping_sub(head) >= self.quarter() {
            // The writer sleeps a whole drain interval; a burst could fill the rest of
            // the ring before it wakes. Once per crossing: a ring that stays full while
            // the writer drains must not wake it at every record.
            wake_writer();
        }
        true
    }

    /// Calls `f` on each published record, then frees their space. Only the writer
    /// (holding the writer lock) calls this.
    pub fn drain(&self, f: &mut dyn FnMut(&[u8])) {
        let tail = self.tail.load(Ordering::Acquire);
        let mut head = self.head.load(Ordering::Relaxed);
        let cap = self.capacity as u64;
        while head < tail {
            let at = (head & (cap - 1)) as usize;
            // SAFETY: `head < tail`, so a whole record (at least its 8-byte header) was
            // published at `at` with release ordering, acquired above.
            let header = unsafe { ptr::read_unaligned(self.data.add(at) as *const u64) };
            let len = record_len(header);
            if len < 8 || len as u64 > tail - head || at + len > self.capacity {
                // Cannot happen with records from `push`; stop rather than read junk.
                head = tail;
                break;
            }
            if header_kind(header) != Kind::Wrap as u8 {
                // SAFETY: the record's `len` bytes were published (checked above).
                f(unsafe { std::slice::from_raw_parts(self.data.add(at), len) });
            }
            head += len as u64;
        }
        self.head.store(head, Ordering::Release);
    }

    pub fn tid(&self) -> i32 {
        self.tid.load(Ordering::Relaxed)
    }

    pub fn handle(&self) -> u64 {
        self.handle.load(Ordering::Relaxed)
    }

    pub fn claim_count(&self) -> u64 {
        self.claim.load(Ordering::Acquire)
    }

    /// Records dropped since the last call (the ring was full).
    pub fn take_dropped(&self) -> u64 {
        self.dropped.swap(0, Ordering::Relaxed)
    }

    pub fn is_retired(&self) -> bool {
        self.state.load(Ordering::Acquire) == RETIRED
    }

    /// Whether the thread has published at least a quarter of the ring that the writer
    /// has not drained yet.
    pub fn at_least_a_quarter_full(&self) -> bool {
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Relaxed);
        tail.wrapping_sub(head) >= self.quarter()
    }

    /// How much undrained data wakes the writer: a thread writing millions of events
    /// a second fills the rest of its ring well within one drain interval.
    fn quarter(&self) -> u64 {
        self.capacity as u64 / 4
    }

    /// Free, or being claimed by a new thread: nothing for the writer yet.
    pub fn holds_no_thread(&self) -> bool {
        matches!(self.state.load(Ordering::Acquire), FREE | CLAIMING)
    }

    /// Hands a drained, retired buffer back for reuse.
    pub fn release(&self) {
        let _ = self
            .state
            .compare_exchange(RETIRED, FREE, Ordering::AcqRel, Ordering::Relaxed);
    }
}

fn wake_writer() {
    #[cfg(test)]
    tests::WAKES_SENT.with(|n| n.set(n.get() + 1));
    crate::wake::wake_writer();
}

/// Every buffer, newest first.
pub fn registry() -> impl Iterator<Item = &'static ThreadBuffer> {
    let mut at = REGISTRY.load(Ordering::Acquire);
    std::iter::from_fn(move || {
        // SAFETY: registry entries are leaked `ThreadBuffer`s, never freed.
        let b = unsafe { at.as_ref()? };
        at = b.next.load(Ordering::Acquire);
        Some(b)
    })
}

fn current_tid() -> i32 {
    // SAFETY: gettid has no preconditions; called once per thread (and after fork).
    unsafe { libc::gettid() }
}

fn current_handle() -> u64 {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    unsafe { libc::pthread_self() as u64 }
}

/// The calling thread's hold on its buffer; dropping it (at thread exit) retires it.
struct Slot {
    buffer: Cell<Option<&'static ThreadBuffer>>,
    /// One bit per open-slice depth (up to 64): whether that begin was dropped, so its
    /// end is dropped too and slices stay balanced.
    dropped_depths: Cell<u64>,
    depth: Cell<u32>,
    /// Names this thread defined for its compact begins ([`Kind::BeginNamed`]); made
    /// at the first, in the library's own memory: a 10 KB thread-local would be
    /// allocated from the program's heap by the dynamic loader, for every thread.
    names: RefCell<Option<Box<NameCache>>>,
    /// Inside a record: a signal handler that records on this thread must not write
    /// the room the record it interrupted is writing.
    busy: Cell<bool>,
    /// No buffer could be had: the thread records nothing (and tries no more).
    without_buffer: Cell<bool>,
}

/// A small direct-mapped cache from a name's key (the pointers an API identifies it by,
/// which stay valid and distinct for the process's life: ITT domains and string
/// handles) to the id the thread defined for it. A collision just defines again.
/// A slot's id is its index + 1: a key that takes a slot over defines that id again
/// (the writer then names later begins by the new definition), so a thread never has
/// more than `NAME_SLOTS` ids, however many names it goes through, and no id can wrap
/// onto one another slot still holds.
struct NameCache {
    keys: [(usize, usize); NAME_SLOTS],
    defined: [bool; NAME_SLOTS],
    /// The buffer's claim the ids were defined under: a fork starts a new one (a new
    /// sequence for a new writer, which knows none of them), also when the fork came
    /// from a signal handler while the cache was in use and could not be cleared.
    claim: u64,
}

const NAME_BITS: u32 = 9;
const NAME_SLOTS: usize = 1 << NAME_BITS;

impl NameCache {
    const EMPTY: NameCache = NameCache {
        keys: [(0, 0); NAME_SLOTS],
        defined: [false; NAME_SLOTS],
        claim: 0,
    };

    fn slot(key: (usize, usize)) -> usize {
        let h = (key.0 ^ key.1.rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        // The top bits of a multiplicative hash are its best mixed.
        h >> (usize::BITS - NAME_BITS)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(b) = self.buffer.get() {
            b.state.store(RETIRED, Ordering::Release);
        }
    }
}

thread_local! {
    static SLOT: Slot = const {
        Slot {
            buffer: Cell::new(None),
            dropped_depths: Cell::new(0),
            depth: Cell::new(0),
            names: RefCell::new(None),
            busy: Cell::new(false),
            without_buffer: Cell::new(false),
        }
    };
}

impl Slot {
    fn buffer(&self) -> Option<&'static ThreadBuffer> {
        if let Some(b) = self.buffer.get() {
            return Some(b);
        }
        if self.without_buffer.get() {
            return None;
        }
        let b = ThreadBuffer::claim();
        self.buffer.set(b);
        self.without_buffer.set(b.is_none());
        b
    }
}

/// Runs `f` with the calling thread's slot and buffer. Does nothing on a thread that is
/// being torn down or has no buffer, and drops (and counts) the record of a signal
/// handler that records while its thread is inside a record: the two would write the
/// same room, and the nesting state would be updated under the interrupted one.
#[inline(always)]
fn with_slot(f: impl FnOnce(&Slot, &'static ThreadBuffer)) {
    struct Done<'a>(&'a Cell<bool>);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            self.0.set(false);
        }
    }
    let _ = SLOT.try_with(|slot| {
        if slot.busy.replace(true) {
            if let Some(b) = slot.buffer.get() {
                b.dropped.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        let _done = Done(&slot.busy);
        if let Some(buffer) = slot.buffer() {
            f(slot, buffer);
        }
    });
}

impl Slot {
    /// The bytes a record must leave free for the ends of the open slices whose begin
    /// was kept, and of `opening` more: 16 each, and 8 for the filler one of them may
    /// need at the ring's end. A begin is dropped rather than one of those ends.
    fn reserve(&self, opening: u32) -> u64 {
        let depth = self.depth.get();
        // Only the bits below the depth are open slices (the rest are stale); depths
        // past 64 count as kept, as `closed` treats them.
        let open_bits = if depth >= 64 {
            u64::MAX
        } else {
            (1u64 << depth) - 1
        };
        let dropped = (self.dropped_depths.get() & open_bits).count_ones();
        match depth - dropped + opening {
            0 => 0,
            n => n as u64 * COMPACT as u64 + 8,
        }
    }

    /// Notes a begin at the current depth, kept or dropped.
    fn opened(&self, kept: bool) {
        let depth = self.depth.get();
        self.depth.set(depth.saturating_add(1));
        if depth < 64 {
            let bit = 1u64 << depth;
            let flags = self.dropped_depths.get();
            self.dropped_depths
                .set(if kept { flags & !bit } else { flags | bit });
        }
    }

    /// Notes an end: whether its begin was kept (so the end must be too).
    fn closed(&self) -> bool {
        let Some(depth) = self.depth.get().checked_sub(1) else {
            // An end without a begin we saw: keep it, the reader reports it.
            return true;
        };
        self.depth.set(depth);
        !(depth < 64 && self.dropped_depths.get() & (1 << depth) != 0)
    }
}

/// Writes one record of kind `kind`, which `write` builds in place in at most `max`
/// bytes, into the calling thread's buffer; on a full buffer `write` is not even
/// called. Quietly does nothing on a thread that is being torn down.
pub fn emit(kind: Kind, max: usize, write: impl FnOnce(&mut [u8]) -> usize) {
    with_slot(|slot, buffer| {
        match kind {
            Kind::Begin | Kind::BeginNamed => {
                slot.opened(buffer.push_with(max, slot.reserve(1), write))
            }
            Kind::End => {
                if slot.closed() {
                    // Into the room its begin reserved (when it was kept).
                    buffer.push_with(max, 0, write);
                }
            }
            _ => {
                buffer.push_with(max, slot.reserve(0), write);
            }
        }
    });
}

/// The hot path of a named begin (an ITT task): a 16-byte record naming the slice by
/// the id this thread gave `key` (two pointers that identify the name for the process's
/// life). The first time, `define` builds the [`Kind::DefineName`] record (given the new
/// id) that tells the writer the id's category and name.
pub fn emit_named_begin(
    key: (usize, usize),
    ts: u64,
    define: impl FnOnce(&mut [u8], u32) -> usize,
) {
    with_slot(|slot, buffer| {
        let Ok(mut cache) = slot.names.try_borrow_mut() else {
            return;
        };
        let names = cache.get_or_insert_with(|| Box::new(NameCache::EMPTY));
        let claim = buffer.claim_count();
        if names.claim != claim {
            **names = NameCache {
                claim,
                ..NameCache::EMPTY
            };
        }
        let i = NameCache::slot(key);
        let id = i as u32 + 1;
        if !(names.keys[i] == key && names.defined[i]) {
            // Cached only once the writer is sure to learn the name; without the
            // definition the begin is dropped too (its end follows it).
            let room = slot.reserve(1) + COMPACT as u64; // and the begin after it
            if !buffer.push_with(crate::event::MAX_RECORD, room, |bytes| define(bytes, id)) {
                drop(cache);
                slot.opened(false);
                return;
            }
            names.keys[i] = key;
            names.defined[i] = true;
        }
        drop(cache);
        let kept = buffer.push_with(COMPACT, slot.reserve(1), |bytes| {
            compact(bytes, Kind::BeginNamed, id, ts)
        });
        slot.opened(kept);
    });
}

/// A begin the program made but that is not recorded (its end is not either): takes
/// the thread's buffer, as a recorded one would, and nothing else.
pub fn skip_begin() {
    with_slot(|slot, _| slot.opened(false));
}

/// The hot path of an end: a 16-byte record.
pub fn emit_end(ts: u64) {
    emit(Kind::End, COMPACT, |bytes| compact(bytes, Kind::End, 0, ts));
}

/// Like [`emit`] for records that open or close nothing, from a thread that may wait
/// (a collector's own thread, never one of the program's): when the buffer is full,
/// `make_room` runs (the writer drains it) and the record is tried once more before it
/// is dropped. CUPTI hands over thousands of records at once, more than a buffer holds.
pub fn emit_or_make_room(max: usize, write: impl Fn(&mut [u8]) -> usize, make_room: impl FnOnce()) {
    with_slot(|slot, buffer| {
        let reserve = slot.reserve(0);
        if !buffer.try_push_with(max, reserve, &write) {
            make_room();
            buffer.push_with(max, reserve, &write);
        }
    });
}

/// After `fork`, in the child: only the forking thread exists. Its buffer is emptied
/// (what it holds is the parent's to write) and becomes the only one registered; the
/// parent's other buffers are abandoned.
pub fn reset_after_fork() {
    let mine = SLOT.try_with(|slot| slot.buffer.get()).ok().flatten();
    match mine {
        Some(b) => {
            let tail = b.tail.load(Ordering::Relaxed);
            b.head.store(tail, Ordering::Relaxed);
            b.tid.store(current_tid(), Ordering::Relaxed);
            b.dropped.store(0, Ordering::Relaxed);
            // A new claim: the child's writer starts afresh, and the thread's next
            // begin defines its names again (`NameCache::claim`).
            b.claim.fetch_add(1, Ordering::Release);
            b.next.store(ptr::null_mut(), Ordering::Relaxed);
            REGISTRY.store(b as *const _ as *mut _, Ordering::Release);
        }
        None => REGISTRY.store(ptr::null_mut(), Ordering::Release),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Builder, Record};

    thread_local! {
        /// Wake-ups this test thread's pushes sent the writer.
        pub(super) static WAKES_SENT: Cell<u64> = const { Cell::new(0) };
    }

    fn wakes_sent() -> u64 {
        WAKES_SENT.with(Cell::get)
    }

    /// Pushes one small record at a time until the ring holds at least `used`
    /// undrained bytes.
    fn fill_to(b: &ThreadBuffer, used: u64) {
        let filler = record(0, 0);
        while b.tail.load(Ordering::Relaxed) - b.head.load(Ordering::Relaxed) < used {
            assert!(b.push(&filler), "the ring has room up to {used} bytes");
        }
    }

    /// Drains whole records until fewer than `used` undrained bytes are left: a drain
    /// that ended while the thread kept writing.
    fn drain_to(b: &ThreadBuffer, used: u64) {
        let head = b.head.load(Ordering::Relaxed);
        let tail = b.tail.load(Ordering::Relaxed);
        let step = record(0, 0).len() as u64;
        let skip = (tail - head).saturating_sub(used).div_ceil(step) * step;
        b.head.store(head + skip, Ordering::Release);
    }

    #[test]
    fn a_ring_wakes_the_writer_once_per_crossing_of_a_quarter() {
        let b = ThreadBuffer::allocate(64 * 1024).unwrap();
        let quarter = b.quarter();
        let before = wakes_sent();
        fill_to(b, quarter - 64);
        assert_eq!(
            wakes_sent(),
            before,
            "below a quarter: the writer sleeps on"
        );
        fill_to(b, quarter);
        assert_eq!(wakes_sent(), before + 1, "the record that crosses wakes it");
        fill_to(b, 3 * quarter);
        assert_eq!(
            wakes_sent(),
            before + 1,
            "a ring that stays full wakes it once"
        );
        b.drain(&mut |_| {});
        fill_to(b, quarter);
        assert_eq!(wakes_sent(), before + 2, "crossing again wakes it again");
    }

    /// A ring the writer left a quarter full wakes no one however much more its thread
    /// writes (it never crosses from below): the writer's loop must see it and drain on
    /// without sleeping (`session::writer_loop` asks `at_least_a_quarter_full`).
    #[test]
    fn a_ring_left_a_quarter_full_by_a_drain_is_seen_by_the_writer_and_wakes_no_one() {
        let b = ThreadBuffer::allocate(64 * 1024).unwrap();
        let quarter = b.quarter();
        fill_to(b, 2 * quarter);
        drain_to(b, quarter + 8);
        assert!(b.at_least_a_quarter_full());
        let before = wakes_sent();
        fill_to(b, 3 * quarter);
        assert_eq!(wakes_sent(), before, "no crossing, no wake-up");
        assert!(b.at_least_a_quarter_full());
        drain_to(b, quarter - 8);
        assert!(
            !b.at_least_a_quarter_full(),
            "below a quarter the writer may sleep"
        );
        fill_to(b, quarter);
        assert_eq!(wakes_sent(), before + 1, "and the next crossing wakes it");
    }

    /// Between taking a buffer over and publishing its new thread's tid and claim count,
    /// the writer must leave it alone; a retired buffer, once drained and released, is
    /// free again for the next thread.
    #[test]
    fn a_buffer_holds_a_thread_only_from_its_claim_to_its_release() {
        let made = ThreadBuffer::allocate(64 * 1024).unwrap();
        assert!(
            made.holds_no_thread(),
            "a buffer being claimed holds no thread yet"
        );
        std::thread::spawn(|| {
            let b = ThreadBuffer::claim().unwrap();
            assert!(!b.holds_no_thread());
            assert_eq!(b.tid(), current_tid());
            let claims = b.claim_count();
            b.push(&record(7, 3));
            b.state.store(RETIRED, Ordering::Release);
            assert!(!b.holds_no_thread(), "its last records are still to drain");
            let mut drained = 0;
            b.drain(&mut |_| drained += 1);
            assert_eq!(drained, 1);
            b.release();
            assert!(b.holds_no_thread());
            // The next thread to claim may take this one over: if it does, it starts
            // a new claim (a new packet sequence for the writer).
            let next = std::thread::spawn(|| {
                let b = ThreadBuffer::claim().unwrap();
                (b as *const ThreadBuffer as usize, b.claim_count(), b.tid())
            })
            .join()
            .unwrap();
            if next.0 == b as *const ThreadBuffer as usize {
                assert_eq!(next.1, claims + 1);
                assert_ne!(next.2, current_tid());
            }
        })
        .join()
        .unwrap();
    }

    fn record(i: u64, name_len: usize) -> Vec<u8> {
        let name = vec![b'x'; name_len];
        let mut buf = vec![0u8; crate::event::MAX_RECORD];
        Builder::new(&mut buf, Kind::Instant, i, 0, &[b"c"], &name)
            .finish()
            .to_vec()
    }

    /// A record made while the thread is inside a record of its own (a signal handler
    /// that records, interrupting it) is dropped and counted; the interrupted one is
    /// kept whole.
    #[test]
    fn a_record_nested_in_a_record_of_its_thread_is_dropped_and_counted() {
        std::thread::spawn(|| {
            let outer = record(1, 5);
            let inner = record(2, 9);
            emit(Kind::Instant, outer.len(), |slot| {
                emit(Kind::Instant, inner.len(), |nested| {
                    nested[..inner.len()].copy_from_slice(&inner);
                    inner.len()
                });
                slot[..outer.len()].copy_from_slice(&outer);
                outer.len()
            });
            let buffer = SLOT.with(|slot| slot.buffer.get()).unwrap();
            let mut kept = Vec::new();
            buffer.drain(&mut |bytes| kept.push(bytes.to_vec()));
            assert_eq!(kept, vec![outer]);
            assert_eq!(buffer.take_dropped(), 1);
            emit(Kind::Instant, inner.len(), |slot| {
                slot[..inner.len()].copy_from_slice(&inner);
                inner.len()
            });
            buffer.drain(&mut |bytes| kept.push(bytes.to_vec()));
            assert_eq!(
                kept.len(),
                2,
                "the thread records again after the nested one"
            );
        })
        .join()
        .unwrap();
    }

    /// A thread's name definitions hold for one claim of its buffer: after a fork (a
    /// new claim, for the child's new writer) a begin defines its name again, even when
    /// the fork could not clear the cache (it came from a signal handler while the
    /// cache was in use).
    #[test]
    fn names_are_defined_again_under_a_new_claim() {
        std::thread::spawn(|| {
            let definition = record(0, 4);
            let defines = Cell::new(0);
            let begin = || {
                emit_named_begin((1, 2), 5, |bytes, _id| {
                    defines.set(defines.get() + 1);
                    bytes[..definition.len()].copy_from_slice(&definition);
                    definition.len()
                });
                emit_end(6);
            };
            begin();
            begin();
            assert_eq!(defines.get(), 1, "a name is defined once per claim");
            let buffer = SLOT.with(|slot| slot.buffer.get()).unwrap();
            buffer.claim.fetch_add(1, Ordering::Release); // what a fork does
            begin();
            assert_eq!(
                defines.get(),
                2,
                "the new claim's writer must learn the name"
            );
            buffer.drain(&mut |_| {});
        })
        .join()
        .unwrap();
    }

    /// A ring the system will not give (an address-space limit) leaves the thread
    /// without one: no abort of the program. Run in a child, whose limit is its own.
    #[test]
    fn a_ring_that_cannot_be_mapped_is_none_not_an_abort() {
        let _one = crate::fork_lock::tests::one_fork_test_at_a_time();
        let code = crate::fork_lock::tests::in_a_child(|| {
            let granted = ThreadBuffer::allocate(64 << 20).is_some();
            let limit = libc::rlimit {
                rlim_cur: 1 << 20,
                rlim_max: 1 << 20,
            };
            // SAFETY: a valid rlimit; lowering our own limit below what we use only
            // makes new mappings fail.
            unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) };
            let refused = ThreadBuffer::allocate(64 << 20).is_none();
            if granted && refused {
                7
            } else {
                8
            }
        });
        assert_eq!(code, 7, "the child got its ring under the limit");
    }

    #[test]
    fn records_come_out_in_order_across_wrap_arounds_and_full_rings_drop() {
        let b = ThreadBuffer::allocate(64 * 1024).unwrap();
        let mut next_in = 0u64;
        let mut next_out = 0u64;
        let mut dropped = 0;
        for round in 0..200 {
            // Fill past capacity now and then, with records of varying size.
            let n = if round % 10 == 0 { 2000 } else { 300 };
            for _ in 0..n {
                if b.push(&record(next_in, (next_in % 97) as usize)) {
                    next_in += 1;
                } else {
                    dropped += 1;
                }
            }
            b.drain(&mut |bytes| {
                let r = Record::parse(bytes).unwrap();
                assert_eq!(r.ts, next_out);
                assert_eq!(r.name.len(), (next_out % 97) as usize);
                next_out += 1;
            });
        }
        assert_eq!(next_in, next_out);
        assert!(dropped > 0, "the big rounds overflow a 64 KiB ring");
        assert_eq!(b.take_dropped(), dropped);
    }

    #[test]
    fn a_full_ring_counts_a_drop_only_when_the_record_is_given_up() {
        let b = ThreadBuffer::allocate(64 * 1024).unwrap();
        let r = record(0, 100);
        let try_push = |r: &[u8]| {
            b.try_push_with(r.len(), 0, |slot| {
                slot[..r.len()].copy_from_slice(r);
                r.len()
            })
        };
        while try_push(&r) {}
        assert_eq!(b.take_dropped(), 0, "trying is not dropping");
        assert!(!b.push(&r));
        assert_eq!(b.take_dropped(), 1);
        b.drain(&mut |_| {});
        assert!(try_push(&r), "room again after a drain");
    }

    #[test]
    fn a_reader_thread_sees_every_record_a_writer_thread_pushed() {
        let b = ThreadBuffer::allocate(64 * 1024).unwrap();
        let total = 200_000u64;
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut i = 0;
                while i < total {
                    if b.push(&record(i, (i % 13) as usize)) {
                        i += 1;
                    } else {
                        std::thread::yield_now();
                    }
                }
            });
            let mut seen = 0u64;
            while seen < total {
                b.drain(&mut |bytes| {
                    assert_eq!(Record::parse(bytes).unwrap().ts, seen);
                    seen += 1;
                });
            }
        });
    }
}
