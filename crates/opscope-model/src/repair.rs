//! Repairs: [`crate::Trace::finish`] establishes the model's invariants (every
//! reference resolves, durations are non-negative, slices are sorted by track and time,
//! and slices on a thread track nest), repairing what breaks them and counting it in
//! [`crate::RepairCounts`]. `check` verifies the same invariants without changing
//! anything (a model read back from the cache).

use std::ops::Range;

use crate::dims::TrackKind;
use crate::events::CounterSamples;
use crate::kind::SliceKind;
use crate::trace::Trace;
use crate::NONE;

pub(crate) fn finish(trace: &mut Trace) {
    drop_dangling(trace);
    for d in trace.slices.dur.iter_mut() {
        if *d < 0 {
            *d = 0;
            trace.repairs.negative_durations += 1;
        }
    }
    // Counter samples are sorted beside the rest when there are many: a large trace
    // spends a good part of its finishing in these permutations.
    let tracks = trace.tracks.len();
    let mut counters = std::mem::take(&mut trace.counters);
    std::thread::scope(|scope| {
        if counters.len() >= PARALLEL_ROWS {
            scope.spawn(|| sort_counters(&mut counters, tracks));
        } else {
            sort_counters(&mut counters, tracks);
        }
        sort_slices(trace);
        let ranges = track_ranges(&trace.slices.track, tracks);
        nest_tracks(trace, &ranges);
        trace.set_track_slices(ranges);
        sort_instants(trace);
        drop_dangling_samples(trace);
        trace.samples.sort();
    });
    trace.counters = counters;
    crate::refine::refine_kinds(trace);
}

/// Samples on no track, or pointing at no stack, are dropped and counted.
fn drop_dangling_samples(trace: &mut Trace) {
    let (tracks, nodes) = (trace.tracks.len() as u32, trace.stacks.nodes.len() as u32);
    let s = &trace.samples;
    let ok = |i: usize| s.track[i] < tracks && (s.stack[i] == NONE || s.stack[i] < nodes);
    if (0..s.len()).all(ok) {
        return;
    }
    let keep: Vec<u32> = (0..s.len() as u32).filter(|&i| ok(i as usize)).collect();
    trace.repairs.dangling_references += (s.len() - keep.len()) as u64;
    trace.samples.permute(&keep);
}

/// Counter samples from which sorting them gets a thread of its own.
const PARALLEL_ROWS: usize = 100_000;

fn drop_dangling(trace: &mut Trace) {
    let tracks = trace.tracks.len() as u32;
    let bad = trace.slices.track.iter().filter(|&&t| t >= tracks).count();
    if bad > 0 {
        let keep: Vec<u32> = (0..trace.slices.len() as u32)
            .filter(|&i| trace.slices.track[i as usize] < tracks)
            .collect();
        reorder_slices(trace, &keep);
        trace.repairs.dangling_references += bad as u64;
    }
    let n = trace.slices.len() as u32;
    let flows = &mut trace.flows;
    let before = flows.len();
    let keep: Vec<usize> = (0..before)
        .filter(|&i| flows.from[i] < n && flows.to[i] < n)
        .collect();
    if keep.len() != before {
        flows.from = keep.iter().map(|&i| flows.from[i]).collect();
        flows.to = keep.iter().map(|&i| flows.to[i]).collect();
        flows.name = keep.iter().map(|&i| flows.name[i]).collect();
        flows.category = keep.iter().map(|&i| flows.category[i]).collect();
        trace.repairs.dangling_references += (before - keep.len()) as u64;
    }
    let c = &mut trace.counters;
    let bad = c.track.iter().filter(|&&t| t >= tracks).count();
    if bad > 0 {
        let keep: Vec<u32> = (0..c.len() as u32)
            .filter(|&i| c.track[i as usize] < tracks)
            .collect();
        c.permute(&keep);
        trace.repairs.dangling_references += bad as u64;
    }
    let bad = trace
        .instants
        .track
        .iter()
        .filter(|&&t| t >= tracks)
        .count();
    if bad > 0 {
        let inst = &trace.instants;
        let keep: Vec<u32> = (0..inst.len() as u32)
            .filter(|&i| inst.track[i as usize] < tracks)
            .collect();
        trace.instants.permute(&keep);
        trace.repairs.dangling_references += bad as u64;
    }
}

/// Keeps slice rows `order` (in that order) and re-points flows; flows whose slices
/// were dropped go too.
fn reorder_slices(trace: &mut Trace, order: &[u32]) {
    let mut new_index = vec![NONE; trace.slices.len()];
    for (new, &old) in order.iter().enumerate() {
        new_index[old as usize] = new as u32;
    }
    trace.slices.permute_but_parents(order);
    let flows = &mut trace.flows;
    for i in 0..flows.len() {
        flows.from[i] = new_index
            .get(flows.from[i] as usize)
            .copied()
            .unwrap_or(NONE);
        flows.to[i] = new_index.get(flows.to[i] as usize).copied().unwrap_or(NONE);
    }
    // Parents are recomputed by `nest` after every reorder.
}

fn sort_slices(trace: &mut Trace) {
    let s = &trace.slices;
    let order = track_time_order(&s.track, trace.tracks.len(), |i| {
        (s.ts[i], std::cmp::Reverse(s.dur[i]))
    });
    if let Some(order) = order {
        reorder_slices(trace, &order);
    }
}

/// The order that sorts rows by track, then by `key` within a track, keeping equal rows
/// in their order; `None` when they are sorted already. Importers emit each track's
/// rows nearly in time order, interleaved with other tracks: a stable bucketing by
/// track (linear) leaves only the few unsorted tracks to sort. Every track must be
/// below `tracks` (dangling rows are dropped before).
fn track_time_order<K: Ord + Copy + Send>(
    track: &[u32],
    tracks: usize,
    key: impl Fn(usize) -> K + Sync,
) -> Option<Vec<u32>> {
    let n = track.len();
    if (1..n).all(|i| (track[i - 1], key(i - 1)) <= (track[i], key(i))) {
        return None;
    }
    let mut starts = vec![0u32; tracks + 1];
    for &t in track {
        starts[t as usize + 1] += 1;
    }
    for t in 0..tracks {
        starts[t + 1] += starts[t];
    }
    let mut order = vec![0u32; n];
    let mut next = starts.clone();
    for (i, &t) in track.iter().enumerate() {
        order[next[t as usize] as usize] = i as u32;
        next[t as usize] += 1;
    }
    // Each track's rows, apart.
    let mut rest = &mut order[..];
    let mut rows_of: Vec<&mut [u32]> = Vec::with_capacity(tracks);
    for t in 0..tracks {
        let (rows, after) = rest.split_at_mut((starts[t + 1] - starts[t]) as usize);
        rows_of.push(rows);
        rest = after;
    }
    if n < PARALLEL_ROWS {
        let mut keyed = Vec::new();
        for rows in rows_of {
            sort_track(rows, &key, &mut keyed);
        }
        return Some(order);
    }
    // The tracks are sorted on two threads, each taking the largest track left until
    // it holds half the rows.
    rows_of.sort_by_key(|rows| std::cmp::Reverse(rows.len()));
    let (mut first, mut second) = (Vec::new(), Vec::new());
    let (mut first_rows, mut second_rows) = (0, 0);
    for rows in rows_of {
        if first_rows <= second_rows {
            first_rows += rows.len();
            first.push(rows);
        } else {
            second_rows += rows.len();
            second.push(rows);
        }
    }
    let key = &key;
    let sort_all = move |tracks: Vec<&mut [u32]>| {
        let mut keyed = Vec::new();
        for rows in tracks {
            sort_track(rows, key, &mut keyed);
        }
    };
    std::thread::scope(|scope| {
        scope.spawn(|| sort_all(second));
        sort_all(first);
    });
    Some(order)
}

/// Sorts one track's rows (ascending) by `key`, keeping equal rows in their order.
/// `keyed` is room for the keys, reused from track to track.
fn sort_track<K: Ord + Copy>(
    rows: &mut [u32],
    key: &impl Fn(usize) -> K,
    keyed: &mut Vec<(K, u32)>,
) {
    if rows
        .windows(2)
        .all(|w| key(w[0] as usize) <= key(w[1] as usize))
    {
        return;
    }
    if rows.len() < KEYED_SORT_ROWS {
        // Small enough for the keys to stay in the cache: sorted through them, with no
        // copy of the keys at the peak of a small trace's memory.
        crate::runs::sort_runs_by_key(rows, |&i| key(i as usize));
        return;
    }
    // Keys beside their rows, not read through them: sorting by an indirect key missed
    // the cache at every comparison (a third of a 1 GB trace's finishing). The rows
    // ascend, so ties broken by row keep equal keys in their order, as a stable sort
    // would.
    keyed.clear();
    keyed.extend(rows.iter().map(|&i| (key(i as usize), i)));
    // A track's rows come as a few long runs already in time order (a 1 GB Kineto
    // trace: 87 descents in 1.8 million rows), and most of them reach into no other: a
    // quicksort partitioned all (113 ms there), a merging sort merged every run into the
    // next (66 ms), these sort only where runs meet.
    crate::runs::sort_runs_by_key(keyed, |&row| row);
    for (row, (_, i)) in rows.iter_mut().zip(keyed.iter()) {
        *row = *i;
    }
}

/// Rows of one track from which its sort copies the keys beside the rows.
const KEYED_SORT_ROWS: usize = 1 << 18;

fn track_ranges(track_column: &[u32], tracks: usize) -> Vec<Range<u32>> {
    let mut ranges = vec![0..0; tracks];
    let mut start = 0;
    while start < track_column.len() {
        let t = track_column[start];
        let mut end = start;
        while end < track_column.len() && track_column[end] == t {
            end += 1;
        }
        ranges[t as usize] = start as u32..end as u32;
        start = end;
    }
    ranges
}

/// Sets every slice's parent, track by track ([`Rows::nest_track`]): a large trace's
/// tracks on two threads, split at the track that starts nearest its middle row.
fn nest_tracks(trace: &mut Trace, ranges: &[Range<u32>]) {
    let strict: Vec<bool> = (trace.tracks.iter())
        .map(|t| t.kind == TrackKind::Thread)
        .collect();
    let s = &mut trace.slices;
    let (ts, kind) = (&s.ts[..], &s.kind[..]);
    let (dur, parent) = (s.dur.to_mut(), s.parent.to_mut());
    let rows = Rows {
        first: 0,
        ts,
        kind,
        dur,
        parent,
    };
    let n = ts.len();
    // The track that starts nearest the middle row, if rows are on both sides.
    let split = (0..ranges.len())
        .min_by_key(|&t| (ranges[t].start as usize).abs_diff(n / 2))
        .filter(|&t| n >= PARALLEL_ROWS && ranges[t].start > 0);
    let clipped = match split {
        None => rows.nest(ranges, &strict),
        Some(t) => {
            let (before, after) = rows.split_at(ranges[t].start as usize);
            let (strict_before, strict_after) = strict.split_at(t);
            let (ranges_before, ranges_after) = ranges.split_at(t);
            std::thread::scope(|scope| {
                let other = scope.spawn(move || after.nest(ranges_after, strict_after));
                let here = before.nest(ranges_before, strict_before);
                here + other.join().expect("nesting does not panic")
            })
        }
    };
    trace.repairs.clipped_overlaps += clipped;
}

/// The columns nesting reads and sets, for rows from `first` on.
struct Rows<'a> {
    first: usize,
    ts: &'a [i64],
    kind: &'a [u8],
    dur: &'a mut [i64],
    parent: &'a mut [u32],
}

impl<'a> Rows<'a> {
    /// The rows before `row` and those from it on.
    fn split_at(self, row: usize) -> (Rows<'a>, Rows<'a>) {
        let at = row - self.first;
        let (ts, ts_after) = self.ts.split_at(at);
        let (kind, kind_after) = self.kind.split_at(at);
        let (dur, dur_after) = self.dur.split_at_mut(at);
        let (parent, parent_after) = self.parent.split_at_mut(at);
        let before = Rows {
            first: self.first,
            ts,
            kind,
            dur,
            parent,
        };
        let after = Rows {
            first: row,
            ts: ts_after,
            kind: kind_after,
            dur: dur_after,
            parent: parent_after,
        };
        (before, after)
    }

    /// [`Rows::nest_track`] of each track of `ranges` (whose kinds `strict` says), all
    /// within these rows; how many slices were clipped.
    fn nest(mut self, ranges: &[Range<u32>], strict: &[bool]) -> u64 {
        (ranges.iter().zip(strict))
            .map(|(range, &strict)| self.nest_track(range.clone(), strict))
            .sum()
    }

    fn kind(&self, i: usize) -> SliceKind {
        SliceKind::from_code(self.kind[i])
    }

    fn end(&self, i: usize) -> i64 {
        self.ts[i].saturating_add(self.dur[i])
    }

    /// Sets the parent of the slices in `range` (one track, sorted); how many slices
    /// were clipped. With `strict`, a slice that outlives its parent is clipped to the
    /// parent's end; otherwise it is attached to the nearest ancestor that contains it.
    fn nest_track(&mut self, range: Range<u32>, strict: bool) -> u64 {
        let mut clipped = 0;
        let mut stack: Vec<u32> = Vec::new();
        // Rows are counted from `first` here; parents are rows of the whole table.
        let local = |row: u32| row as usize - self.first;
        for i in range {
            let iu = local(i);
            let ts = self.ts[iu];
            while let Some(&top) = stack.last() {
                if self.end(local(top)) <= ts {
                    stack.pop();
                } else {
                    break;
                }
            }
            if strict {
                // A Python frame (torch.profiler's `with_stack`) that a framework range
                // crosses gives way: the frames are the profiler's own bookkeeping
                // around `prof.step()`, the range is a step; clipping the range would
                // cut it to µs.
                if self.kind(iu) != SliceKind::PythonFunction {
                    while let Some(&top) = stack.last() {
                        let top = local(top);
                        if self.kind(top) == SliceKind::PythonFunction
                            && self.end(iu) > self.end(top)
                        {
                            self.dur[top] = ts - self.ts[top];
                            clipped += 1;
                            stack.pop();
                        } else {
                            break;
                        }
                    }
                }
                if let Some(&top) = stack.last() {
                    let top_end = self.end(local(top));
                    if self.end(iu) > top_end {
                        self.dur[iu] = top_end - ts;
                        clipped += 1;
                    }
                }
            } else {
                while let Some(&top) = stack.last() {
                    if self.end(iu) > self.end(local(top)) {
                        stack.pop();
                    } else {
                        break;
                    }
                }
            }
            self.parent[iu] = stack.last().copied().unwrap_or(NONE);
            stack.push(i);
        }
        clipped
    }
}

fn sort_counters(c: &mut CounterSamples, tracks: usize) {
    if let Some(order) = track_time_order(&c.track, tracks, |i| c.ts[i]) {
        c.permute(&order);
    }
}

fn sort_instants(trace: &mut Trace) {
    let inst = &trace.instants;
    if let Some(order) = track_time_order(&inst.track, trace.tracks.len(), |i| inst.ts[i]) {
        trace.instants.permute(&order);
    }
}

#[cfg(test)]
mod tests {
    use crate::args::ArgsId;
    use crate::dims::{SourceId, TrackKind};
    use crate::events::SliceRow;
    use crate::kind::SliceKind;
    use crate::strings::StrId;
    use crate::trace::Trace;
    use crate::NONE;

    /// The linear track-then-time order equals a plain stable sort, on sorted,
    /// interleaved and shuffled rows, ties included.
    #[test]
    fn track_time_order_is_a_stable_sort() {
        let mut next = crate::testing::numbers(0x2545_f491_4f6c_dd1du64);
        for case in 0..204 {
            let tracks = 1 + next(6) as usize;
            // The last cases have tracks long enough for the keys to be copied beside
            // their rows.
            let n = if case < 200 {
                next(300) as usize
            } else {
                2 * super::KEYED_SORT_ROWS + next(4 * super::KEYED_SORT_ROWS as u64) as usize
            };
            let track: Vec<u32> = (0..n).map(|_| next(tracks as u64) as u32).collect();
            // Interleaved in time (as importers emit), then some rows out of order.
            let mut ts: Vec<i64> = (0..n as i64).map(|i| i / 3).collect();
            if case % 2 == 1 || case >= 200 {
                for _ in 0..next(5) + (n / 1000) as u64 {
                    let (a, b) = (
                        next(n.max(1) as u64) as usize,
                        next(n.max(1) as u64) as usize,
                    );
                    if a < n && b < n {
                        ts.swap(a, b);
                    }
                }
            }
            let mut expected: Vec<u32> = (0..n as u32).collect();
            expected.sort_by_key(|&i| (track[i as usize], ts[i as usize]));
            let identity: Vec<u32> = (0..n as u32).collect();
            let got = super::track_time_order(&track, tracks, |i| ts[i]).unwrap_or(identity);
            assert_eq!(got, expected, "case {case}");
        }
    }

    fn slice(track: crate::TrackId, ts: i64, dur: i64) -> SliceRow {
        SliceRow {
            track,
            ts,
            dur,
            name: StrId::EMPTY,
            category: StrId::EMPTY,
            kind: SliceKind::Op,
            args: ArgsId::NONE,
        }
    }

    #[test]
    fn finish_sorts_nests_and_repairs() {
        let mut t = Trace::new();
        let p = t.process(SourceId(0), 1);
        let th = t.thread(p, 1);
        let track = t.thread_track(th, TrackKind::Thread);
        // Pushed out of order: child, parent, an overlapping sibling, a negative one.
        let child = t.slices.push(slice(track, 15, 5));
        let parent = t.slices.push(slice(track, 10, 20));
        t.slices.push(slice(track, 25, 10)); // ends at 35 > 30: clipped to 30
        t.slices.push(slice(track, 40, -3));
        t.flows.push(child, parent, StrId::EMPTY, StrId::EMPTY);
        t.finish();
        assert_eq!(t.slices.ts, vec![10, 15, 25, 40]);
        assert_eq!(t.slices.dur, vec![20, 5, 5, 0]);
        let depths: Vec<usize> = (0..4).map(|i| t.slices.depth(i)).collect();
        assert_eq!(depths, vec![0, 1, 1, 0]);
        assert_eq!(t.slices.parent, vec![NONE, 0, 0, NONE]);
        assert_eq!(t.repairs.clipped_overlaps, 1);
        assert_eq!(t.repairs.negative_durations, 1);
        // The flow follows its slices through the sort.
        assert_eq!((t.flows.from[0], t.flows.to[0]), (1, 0));
        assert_eq!(t.enclosing_slice(track, 16), Some(1));
        assert_eq!(t.enclosing_slice(track, 22), Some(0));
        assert_eq!(t.enclosing_slice(track, 26), Some(2));
        assert_eq!(t.enclosing_slice(track, 36), None);
        assert_eq!(t.next_slice(track, 36), Some(3));
        // A second finish changes nothing.
        t.finish();
        assert_eq!(t.repairs.clipped_overlaps, 1);
        assert_eq!(t.slices.ts, vec![10, 15, 25, 40]);
    }

    /// A trace large enough for its tracks to be sorted and nested on two threads ends
    /// as when each track is finished alone: same rows, parents, clipped durations.
    #[test]
    fn a_large_trace_finishes_as_its_tracks_alone() {
        // Slices of every kind of nesting: children, overlaps to clip, Python frames
        // crossed by ranges, on thread tracks and a GPU stream, interleaved.
        fn fill(t: &mut Trace, tracks: &[crate::TrackId], rows: usize, seed: u64) {
            let mut state = seed;
            let mut next = move |below: u64| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (state >> 33) % below
            };
            for i in 0..rows {
                let track = tracks[next(tracks.len() as u64) as usize];
                let ts = (i as i64 / 4) * 10 + next(30) as i64;
                let mut row = slice(track, ts, next(60) as i64);
                if next(5) == 0 {
                    row.kind = SliceKind::PythonFunction;
                }
                t.slices.push(row);
            }
        }
        // Three thread tracks and a GPU stream.
        fn four_tracks(t: &mut Trace) -> Vec<crate::TrackId> {
            let p = t.process(SourceId(0), 1);
            (0..4)
                .map(|k| {
                    let th = t.thread(p, k);
                    let kind = [TrackKind::Thread, TrackKind::GpuStream][usize::from(k == 3)];
                    t.thread_track(th, kind)
                })
                .collect()
        }
        let build = |only: Option<usize>| {
            let mut t = Trace::new();
            let tracks = four_tracks(&mut t);
            // Each track's rows, or only those of track `only` (the others' rows are
            // drawn alike but dropped), so that one track alone can be compared.
            let mut all = Trace::new();
            four_tracks(&mut all);
            fill(&mut all, &tracks, 300_000, 7);
            for i in 0..all.slices.len() {
                let row = all.slices.row(i);
                if only.is_none_or(|k| row.track == tracks[k]) {
                    t.slices.push(row);
                }
            }
            t.finish();
            (t, tracks)
        };
        let (whole, tracks) = build(None);
        assert!(whole.slices.len() >= super::PARALLEL_ROWS);
        let mut clipped = 0;
        for (k, &track) in tracks.iter().enumerate() {
            let (alone, _) = build(Some(k));
            clipped += alone.repairs.clipped_overlaps;
            let rows = whole.track_slices(track);
            assert_eq!(rows.len(), alone.slices.len(), "track {k}");
            let first = rows.start;
            for (i, row) in rows.enumerate() {
                assert_eq!(
                    whole.slices.row(row),
                    alone.slices.row(i),
                    "track {k} row {i}"
                );
                let parent = whole.slices.parent[row];
                let expected = alone.slices.parent[i];
                assert_eq!(
                    (parent != NONE).then(|| parent as usize - first),
                    (expected != NONE).then_some(expected as usize),
                    "track {k} row {i}"
                );
            }
        }
        assert!(clipped > 0);
        assert_eq!(whole.repairs.clipped_overlaps, clipped);
    }

    /// torch.profiler's `with_stack` frames cross its step ranges: `prof.step()` opens
    /// ProfilerStep#N inside the Python frame of `step`, which ends a few µs later. The
    /// frame gives way (ends where the range starts), not the range: clipping the range
    /// instead left steps of a few µs.
    #[test]
    fn a_python_frame_gives_way_to_a_range_that_crosses_it() {
        let mut t = Trace::new();
        let p = t.process(SourceId(0), 1);
        let th = t.thread(p, 1);
        let track = t.thread_track(th, TrackKind::Thread);
        let frame = |ts, dur| SliceRow {
            kind: SliceKind::PythonFunction,
            ..slice(track, ts, dur)
        };
        t.slices.push(frame(0, 1000)); // <module>
        t.slices.push(frame(10, 20)); // profiler.py: step
        t.slices.push(frame(12, 16)); // record_function.__enter__
        t.slices.push(SliceRow {
            kind: SliceKind::Step,
            ..slice(track, 15, 500)
        });
        t.slices.push(frame(510, 20)); // the next step(): crosses the end, is clipped
        t.finish();
        assert_eq!(t.slices.dur, vec![1000, 5, 3, 500, 5]);
        assert_eq!(t.slices.parent, vec![NONE, 0, 1, 0, 3]);
        assert_eq!(t.repairs.clipped_overlaps, 3);
        t.finish();
        assert_eq!(t.slices.dur, vec![1000, 5, 3, 500, 5]);
        assert_eq!(t.repairs.clipped_overlaps, 3);
    }

    #[test]
    fn dangling_rows_are_dropped_and_counted() {
        let mut t = Trace::new();
        let p = t.process(SourceId(0), 1);
        let th = t.thread(p, 1);
        let track = t.thread_track(th, TrackKind::Thread);
        let a = t.slices.push(slice(track, 0, 1));
        t.slices.push(slice(crate::TrackId(99), 0, 1));
        t.flows.push(a, 77, StrId::EMPTY, StrId::EMPTY);
        t.counters.push(crate::TrackId(5), 0, 1.0);
        t.finish();
        assert_eq!(t.slices.len(), 1);
        assert_eq!(t.flows.len(), 0);
        assert_eq!(t.counters.len(), 0);
        assert_eq!(t.repairs.dangling_references, 3);
    }

    #[test]
    fn streams_attach_overlaps_without_clipping() {
        let mut t = Trace::new();
        let p = t.process(SourceId(0), 0);
        let th = t.thread(p, 7);
        let track = t.thread_track(th, TrackKind::GpuStream);
        t.slices.push(slice(track, 0, 100));
        t.slices.push(slice(track, 10, 20));
        t.slices.push(slice(track, 20, 30)); // overlaps the second, inside the first
        t.finish();
        assert_eq!(t.slices.dur, vec![100, 20, 30]);
        assert_eq!(t.slices.parent, vec![NONE, 0, 0]);
        assert_eq!(t.repairs.clipped_overlaps, 0);
    }
}
