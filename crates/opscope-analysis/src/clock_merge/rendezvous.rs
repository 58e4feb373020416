//! What the traces say about two clocks: collective kernels. No rank leaves a
//! collective (all-reduce, all-gather, reduce-scatter, broadcast, all-to-all, barrier)
//! before the last rank has entered it, so each instance seen on two clock domains
//! gives a one-way constraint each way. The n-th kernel of a name on one rank is
//! matched with the n-th on the others (not within steps: a GPU runs behind its host's
//! step markers by a different amount on each rank). A send/receive kernel is used
//! only in a job of two ranks, where its peer is known, and only one that does both
//! (NCCL's `SendRecv`): a send alone may end before its receiver starts.

use hashbrown::HashMap;
use opscope_model::{SliceKind, Trace};

use super::fit::Constraints;
use crate::correlate::is_device_work;
pub(super) use crate::correlate::source_of_track;

/// Lower-cased kernel name parts of a collective every rank takes part in.
const COLLECTIVE_MARKS: &[&str] = &[
    "allreduce",
    "all_reduce",
    "allgather",
    "all_gather",
    "reducescatter",
    "reduce_scatter",
    "broadcast",
    "alltoall",
    "all_to_all",
    "barrier",
];
/// … and of a transfer both ways between two ranks.
const PAIR_MARKS: &[&str] = &["sendrecv"];

/// Each domain's first and last time.
pub(super) fn spans(trace: &Trace, domain_of_source: &[usize], n: usize) -> Vec<(i64, i64)> {
    let mut spans = vec![(i64::MAX, i64::MIN); n];
    let domain_of_track: Vec<Option<usize>> = trace
        .tracks
        .iter()
        .map(|t| source_of_track(trace, t).map(|s| domain_of_source[s.index()]))
        .collect();
    let s = &trace.slices;
    for i in 0..s.len() {
        if let Some(d) = domain_of_track[s.track[i] as usize] {
            spans[d].0 = spans[d].0.min(s.ts[i]);
            spans[d].1 = spans[d].1.max(s.ts[i] + s.dur[i]);
        }
    }
    for span in &mut spans {
        if span.0 > span.1 {
            *span = (0, 0);
        }
    }
    spans
}

/// One instance of a collective on one rank.
struct Seen {
    domain: usize,
    start: i64,
    end: i64,
}

/// The constraints between every two domains (`a < b`; B's clock of A's).
pub(super) fn constraints(
    trace: &Trace,
    domain_of_source: &[usize],
) -> HashMap<(usize, usize), Constraints> {
    let s = &trace.slices;
    // Send/receive kernels bind two ranks: only in a job of two are they each other's.
    let pairs_known = trace.sources.iter().all(|src| src.world_size == Some(2));
    // Per source: its collective kernels in time order.
    let mut kernels: Vec<Vec<usize>> = vec![Vec::new(); trace.sources.len()];
    for i in 0..s.len() {
        if s.kind(i) != SliceKind::Kernel || !is_device_work(trace, i) {
            continue;
        }
        let Some(src) = source_of_track(trace, &trace.tracks[s.track[i] as usize]) else {
            continue;
        };
        let lower = trace.str(s.name[i]).to_ascii_lowercase();
        if COLLECTIVE_MARKS.iter().any(|m| lower.contains(m))
            || (pairs_known && PAIR_MARKS.iter().any(|m| lower.contains(m)))
        {
            kernels[src.index()].push(i);
        }
    }
    // Instances by (kernel name, ordinal).
    let mut instances: HashMap<(opscope_model::StrId, usize), Vec<Seen>> = HashMap::new();
    for (src, list) in kernels.iter_mut().enumerate() {
        list.sort_by_key(|&i| (s.ts[i], i));
        let mut ordinal: HashMap<opscope_model::StrId, usize> = HashMap::new();
        for &i in list.iter() {
            let n = ordinal.entry(s.name[i]).or_insert(0);
            instances.entry((s.name[i], *n)).or_default().push(Seen {
                domain: domain_of_source[src],
                start: s.ts[i],
                end: s.ts[i] + s.dur[i],
            });
            *n += 1;
        }
    }
    let mut pairs: HashMap<(usize, usize), Constraints> = HashMap::new();
    for ((name, _), seen) in instances {
        let lower = trace.str(name).to_ascii_lowercase();
        let collective = COLLECTIVE_MARKS.iter().any(|m| lower.contains(m));
        if !collective && seen.len() != 2 {
            continue;
        }
        // Per domain: its latest entry and earliest exit of this instance.
        let mut per_domain: HashMap<usize, (i64, i64)> = HashMap::new();
        for k in &seen {
            let e = per_domain.entry(k.domain).or_insert((i64::MIN, i64::MAX));
            e.0 = e.0.max(k.start);
            e.1 = e.1.min(k.end);
        }
        let mut ds: Vec<(usize, (i64, i64))> = per_domain.into_iter().collect();
        ds.sort_by_key(|d| d.0);
        for (x, &(a, (enter_a, leave_a))) in ds.iter().enumerate() {
            for &(b, (enter_b, leave_b)) in &ds[x + 1..] {
                let c = pairs.entry((a, b)).or_default();
                // B entered before A left; A entered before B left.
                c.below.push((leave_a, enter_b));
                c.above.push((enter_a, leave_b));
            }
        }
    }
    pairs
}
