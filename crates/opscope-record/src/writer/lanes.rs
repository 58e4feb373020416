//! Tracks for ranges that may overlap without nesting (NVTX start/end ranges, ITT
//! overlapped tasks and frames): a range goes to the first lane free for its whole span.

use std::collections::BTreeSet;

/// The lanes of one category.
#[derive(Default)]
pub(super) struct Lanes {
    /// Each lane's track and spans, sorted: spans of a lane do not overlap, so their
    /// ends are sorted too and one neighbour tells whether a new span fits.
    pub(super) lanes: Vec<(u64, BTreeSet<(u64, u64)>)>,
}

/// Whether `[begin, end]` overlaps none of `spans` (touching is not overlapping).
pub(super) fn fits(spans: &BTreeSet<(u64, u64)>, begin: u64, end: u64) -> bool {
    // The span starting last before `end` ends last among those that could overlap.
    spans
        .range(..(end, 0))
        .next_back()
        .is_none_or(|&(_, e)| e <= begin)
}
