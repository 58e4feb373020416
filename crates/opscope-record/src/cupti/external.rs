//! External correlation: each NVTX push range (and each range the Python bootstrap
//! marks) is pushed onto CUPTI's per-thread stack of external ids while it is open, so
//! that CUPTI names, for every API call made inside it, the innermost range's id; the
//! device work those calls queued then carries it (`external_id`), and finds its range
//! even where the launching call's record is lost or on another thread.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use super::{Cupti, CUPTI, STARTED_IN, SUCCESS};

/// `CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1`: Kineto's kind for user annotations (it
/// pushes its ops as CUSTOM0); records of other kinds are someone else's.
pub(crate) const KIND: u32 = 4;

/// Whether ranges are pushed: CUPTI started in this process and has the calls.
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Range ids, unique in the process (0 is "none").
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Ranges deeper than this on one thread are not pushed (their outer range's id stands).
const MAX_DEPTH: u32 = 64;

thread_local! {
    /// This thread's open ranges: how many, and for each of the first 64 whether it was
    /// pushed onto CUPTI (a range opened before CUPTI started was not, and its end must
    /// not pop another's id).
    static OPEN: Cell<(u32, u64)> = const { Cell::new((0, 0)) };
}

/// Turns pushing on once CUPTI has started with the push and pop calls.
pub(crate) fn activate(cupti: &Cupti) {
    ACTIVE.store(
        cupti.push_external.is_some() && cupti.pop_external.is_some(),
        Ordering::Release,
    );
}

fn cupti_here() -> Option<&'static Cupti> {
    if !ACTIVE.load(Ordering::Acquire) {
        return None;
    }
    // A forked child has CUPTI's state but not its threads: never call into it there.
    if STARTED_IN.load(Ordering::Relaxed) != std::process::id() {
        return None;
    }
    CUPTI.get()
}

/// A range opens on this thread: its external id where CUPTI took it, to record with
/// the range.
pub(crate) fn range_opened() -> Option<u64> {
    let (depth, pushed) = OPEN.try_with(Cell::get).ok()?;
    let id = (depth < MAX_DEPTH)
        .then(cupti_here)
        .flatten()
        .and_then(|cupti| {
            let push = cupti.push_external?;
            let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
            // SAFETY: a documented kind and any id.
            (unsafe { push(KIND, id) } == SUCCESS).then_some(id)
        });
    let bit = if depth < MAX_DEPTH && id.is_some() {
        1u64 << depth
    } else {
        0
    };
    let mask = if depth < MAX_DEPTH {
        !(1u64 << depth)
    } else {
        u64::MAX
    };
    let _ = OPEN.try_with(|open| open.set((depth + 1, (pushed & mask) | bit)));
    id
}

/// The innermost range of this thread closes: its id leaves CUPTI's stack if it was
/// pushed.
pub(crate) fn range_closed() {
    let Ok((depth, pushed)) = OPEN.try_with(Cell::get) else {
        return;
    };
    if depth == 0 {
        return; // a pop with nothing open (the program's mistake)
    }
    let depth = depth - 1;
    let _ = OPEN.try_with(|open| open.set((depth, pushed)));
    if depth >= MAX_DEPTH || pushed & (1u64 << depth) == 0 {
        return;
    }
    if let Some(pop) = cupti_here().and_then(|c| c.pop_external) {
        let mut last = 0u64;
        // SAFETY: a documented kind and an out-pointer to a local.
        unsafe { pop(KIND, &mut last) };
    }
}

/// Slots of the table from correlation id to external id: CUPTI writes a call's
/// external correlation record when the call returns, its device work's records when
/// the work ends, so a record needs to be found only across the calls made while work
/// is in flight.
const SLOTS: usize = 1 << 16;

/// (correlation id, external id) by correlation id modulo [`SLOTS`]; filled and read
/// in CUPTI's buffer callbacks only.
static TABLE: Mutex<Vec<(u32, u64)>> = Mutex::new(Vec::new());

/// CUPTI says the call `correlation` was made inside range `external`.
pub(crate) fn correlated(correlation: u32, external: u64) {
    let Ok(mut table) = TABLE.lock() else {
        return;
    };
    if table.is_empty() {
        table.resize(SLOTS, (0, 0));
    }
    table[correlation as usize % SLOTS] = (correlation, external);
}

/// The range the call `correlation` was made in, if CUPTI said so.
pub(crate) fn of(correlation: u32) -> Option<u64> {
    let table = TABLE.lock().ok()?;
    match table.get(correlation as usize % SLOTS) {
        Some(&(c, external)) if c == correlation && correlation != 0 => Some(external),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_finds_the_range_it_was_made_in_until_its_slot_is_reused() {
        correlated(7, 70);
        correlated(8, 80);
        assert_eq!((of(7), of(8), of(9)), (Some(70), Some(80), None));
        // A call 2^16 later takes slot 7: 7 is no longer known, never mistaken.
        correlated(7 + SLOTS as u32, 71);
        assert_eq!((of(7), of(7 + SLOTS as u32)), (None, Some(71)));
    }

    #[test]
    fn ranges_opened_without_cupti_are_counted_and_never_popped() {
        // No CUPTI in this test process: nothing is pushed, and depths balance.
        assert_eq!(range_opened(), None);
        assert_eq!(range_opened(), None);
        range_closed();
        range_closed();
        range_closed(); // one pop too many: ignored
        assert_eq!(OPEN.with(Cell::get), (0, 0));
    }
}
