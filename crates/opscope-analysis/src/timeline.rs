//! Level of detail for drawing a timeline of any size. Each track's slices are packed
//! into rows that do not overlap; each row keeps summaries at bucket widths of
//! 16 ns × 4^k, in which slices narrower than a bucket are merged into blocks, and each
//! counter keeps min/max per bucket. A view then reads the coarsest summary no wider
//! than one of its pixels, so it costs what the screen holds, not what the trace holds.

use opscope_model::{Trace, TrackKind};

/// The narrowest summary's bucket, in ns.
const BASE_WIDTH: i64 = 16;
/// Each summary's buckets are this many times wider than the last one's.
const FACTOR: i64 = 4;
/// Rows per track at most: a slice deeper than this (or overlapping this many others on
/// a lane that does not nest) is drawn in the last row.
pub const MAX_ROWS: usize = 48;

/// One thing to draw in a row: a slice (`count == 1`, `slice` its row in the model) or a
/// block of `count` slices each too narrow to see at this zoom (`slice` the longest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    pub start: i64,
    pub end: i64,
    pub slice: u32,
    pub count: u32,
}

/// Counter values over `[start, end]`: the least, the greatest and the last.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    pub start: i64,
    pub end: i64,
    pub min: f64,
    pub max: f64,
    pub last: f64,
}

impl Sample {
    /// One sample: `value` at `ts`.
    fn at(ts: i64, value: f64) -> Sample {
        Sample {
            start: ts,
            end: ts,
            min: value,
            max: value,
            last: value,
        }
    }
}

/// A summary: items at one bucket width.
struct Tier<T> {
    width: i64,
    items: Vec<T>,
}

/// One row of a track: its slices in time order (they do not overlap) and their
/// summaries, finest first. Summaries that would merge little are not kept.
struct Row {
    slices: Vec<u32>,
    tiers: Vec<Tier<Item>>,
}

/// A track's slices, in rows.
pub struct SliceRows {
    rows: Vec<Row>,
}

/// A counter's samples and their summaries.
pub struct Series {
    samples: Vec<(i64, f64)>,
    tiers: Vec<Tier<Sample>>,
}

/// What a track holds, ready to draw.
pub enum TrackLod {
    Slices(SliceRows),
    Counter(Series),
}

/// Every track of a trace, indexed as `trace.tracks`.
pub struct Timeline {
    pub tracks: Vec<TrackLod>,
}

impl Timeline {
    /// Builds every track's summaries: first each track's rows, then the summaries of
    /// every row of every track, largest first, spread over the machine's cores (the
    /// main thread of a trace can hold most of its slices).
    pub fn build(trace: &Trace) -> Timeline {
        let counters = counter_ranges(trace);
        let packed: Vec<Result<Vec<Vec<u32>>, Series>> =
            in_parallel(trace.tracks.len(), |t| match trace.tracks[t].kind {
                TrackKind::Counter => {
                    let c = &trace.counters;
                    let samples = counters[t].iter().map(|&i| (c.ts[i], c.value[i])).collect();
                    Err(Series::new(samples))
                }
                _ => Ok(pack_rows(trace, t)),
            });
        let mut jobs: Vec<(usize, usize)> = packed
            .iter()
            .enumerate()
            .flat_map(|(t, p)| {
                let rows = p.as_ref().map_or(0, Vec::len);
                (0..rows).map(move |r| (t, r))
            })
            .collect();
        let size = |&(t, r): &(usize, usize)| packed[t].as_ref().map_or(0, |rows| rows[r].len());
        jobs.sort_by_key(|job| std::cmp::Reverse(size(job)));
        let mut summaries: Vec<Option<Vec<Tier<Item>>>> = in_parallel(jobs.len(), |j| {
            let (t, r) = jobs[j];
            packed[t]
                .as_ref()
                .ok()
                .map(|rows| slice_tiers(trace, &rows[r]))
        });
        let mut tiers_of: Vec<Vec<Vec<Tier<Item>>>> = packed.iter().map(|_| Vec::new()).collect();
        let mut order: Vec<usize> = (0..jobs.len()).collect();
        order.sort_by_key(|&j| jobs[j]);
        for j in order {
            tiers_of[jobs[j].0].push(summaries[j].take().unwrap_or_default());
        }
        let tracks = packed
            .into_iter()
            .zip(tiers_of)
            .map(|(p, tiers)| match p {
                Ok(rows) => TrackLod::Slices(SliceRows {
                    rows: rows
                        .into_iter()
                        .zip(tiers)
                        .map(|(slices, tiers)| Row { slices, tiers })
                        .collect(),
                }),
                Err(series) => TrackLod::Counter(series),
            })
            .collect();
        Timeline { tracks }
    }
}

/// `f(0..jobs)` on the machine's cores; the results in job order.
fn in_parallel<T: Send>(jobs: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    use rayon::prelude::*;
    (0..jobs).into_par_iter().map(&f).collect()
}

/// Per track, its counter sample rows in time order.
fn counter_ranges(trace: &Trace) -> Vec<Vec<usize>> {
    let c = &trace.counters;
    let mut per_track = vec![Vec::new(); trace.tracks.len()];
    for i in 0..c.len() {
        if let Some(rows) = per_track.get_mut(c.track[i] as usize) {
            rows.push(i);
        }
    }
    for rows in &mut per_track {
        rows.sort_by_key(|&i| c.ts[i]);
    }
    per_track
}

impl SliceRows {
    /// Track `track`'s rows and their summaries, alone: what [`Timeline::build`] makes
    /// for every track at once (the tests compare the two).
    #[cfg(test)]
    fn build(trace: &Trace, track: usize) -> SliceRows {
        let rows = pack_rows(trace, track)
            .into_iter()
            .map(|slices| {
                let tiers = slice_tiers(trace, &slices);
                Row { slices, tiers }
            })
            .collect();
        SliceRows { rows }
    }

    pub fn rows(&self) -> usize {
        self.rows.len()
    }

    /// The slices of row `row`, in time order.
    pub fn slices_of(&self, row: usize) -> &[u32] {
        self.rows.get(row).map_or(&[], |r| &r.slices)
    }

    /// Appends to `out` what row `row` shows of `[start, end]` at `ns_per_px`: slices
    /// and blocks, in time order, about two per pixel at most.
    pub fn query(
        &self,
        trace: &Trace,
        row: usize,
        start: i64,
        end: i64,
        ns_per_px: f64,
        out: &mut Vec<Item>,
    ) {
        let Some(row) = self.rows.get(row) else {
            return;
        };
        let cap = out.len() + item_cap(start, end, ns_per_px);
        match row.tiers.iter().rev().find(|t| t.width as f64 <= ns_per_px) {
            Some(tier) => {
                let first = tier.items.partition_point(|it| it.end < start);
                out.extend(
                    tier.items[first..]
                        .iter()
                        .take_while(|it| it.start <= end)
                        .take(cap.saturating_sub(out.len())),
                );
            }
            None => {
                let s = &trace.slices;
                let first = row.slices.partition_point(|&i| s.end(i as usize) < start);
                out.extend(
                    row.slices[first..]
                        .iter()
                        .map(|&i| single(trace, i))
                        .take_while(|it| it.start <= end)
                        .take(cap.saturating_sub(out.len())),
                );
            }
        }
    }
}

/// Packs track `track`'s slices into rows, each slice into the first row whose last
/// slice has ended: on a thread, where slices nest, that is the slice's depth.
fn pack_rows(trace: &Trace, track: usize) -> Vec<Vec<u32>> {
    let s = &trace.slices;
    let mut rows: Vec<Vec<u32>> = Vec::new();
    let mut row_ends: Vec<i64> = Vec::new();
    for i in trace.track_slices(opscope_model::TrackId(track as u32)) {
        let (ts, end) = (s.ts[i], s.end(i));
        let row = match row_ends.iter().position(|&e| e <= ts) {
            Some(r) => r,
            None if rows.len() < MAX_ROWS => {
                rows.push(Vec::new());
                row_ends.push(i64::MIN);
                rows.len() - 1
            }
            None => MAX_ROWS - 1,
        };
        rows[row].push(i as u32);
        row_ends[row] = row_ends[row].max(end);
    }
    rows
}

/// The most items one row of a view returns: the summaries keep it near two per pixel;
/// this bounds a row where slices overlap (past [`MAX_ROWS`]) as well.
fn item_cap(start: i64, end: i64, ns_per_px: f64) -> usize {
    let pixels = ((end - start) as f64 / ns_per_px.max(1e-9)).clamp(1.0, 1e6);
    4 * pixels as usize + 64
}

fn single(trace: &Trace, slice: u32) -> Item {
    let s = &trace.slices;
    Item {
        start: s.ts[slice as usize],
        end: s.end(slice as usize),
        slice,
        count: 1,
    }
}

/// The summaries of one row (see [`tiers`]): a slice at least a bucket long stays
/// alone; a block keeps its longest slice.
fn slice_tiers(trace: &Trace, slices: &[u32]) -> Vec<Tier<Item>> {
    let (Some(&first), Some(&last)) = (slices.first(), slices.last()) else {
        return Vec::new();
    };
    let s = &trace.slices;
    let span = s.end(last as usize) - s.ts[first as usize];
    let dur = |i: u32| s.dur[i as usize];
    tiers(
        slices.iter().map(|&i| single(trace, i)).collect(),
        span,
        |it: &Item, width| it.start.div_euclid(width),
        |it, width| it.count == 1 && it.end - it.start >= width,
        |block, it| {
            block.end = block.end.max(it.end);
            block.count += it.count;
            if dur(it.slice) > dur(block.slice) {
                block.slice = it.slice;
            }
        },
    )
}

/// Summaries of `items` (in time order, spanning `span` ns) at bucket widths 16 ns ×
/// 4^k: each merges the last's neighbours that fall in one `bucket`, except those that
/// stay `alone`, into one by `absorb`. A summary is kept when it has at most three
/// quarters of the items of the last kept (or of `items`).
fn tiers<T: Copy>(
    items: Vec<T>,
    span: i64,
    bucket: impl Fn(&T, i64) -> i64,
    alone: impl Fn(&T, i64) -> bool,
    absorb: impl Fn(&mut T, &T),
) -> Vec<Tier<T>> {
    let span = span.max(1);
    let mut current = items;
    let mut kept_len = current.len();
    let mut tiers = Vec::new();
    let mut width = BASE_WIDTH;
    while current.len() > 1 && width <= span.saturating_mul(FACTOR) {
        // Where nothing would merge (slices longer than the buckets), the summary
        // equals the last: only looked at, not copied.
        if let Some(merged) = merge_buckets(&current, width, &bucket, &alone, &absorb) {
            if merged.len() * 4 <= kept_len * 3 {
                kept_len = merged.len();
                tiers.push(Tier {
                    width,
                    items: merged.clone(),
                });
            }
            current = merged;
        }
        width = width.saturating_mul(FACTOR);
    }
    tiers
}

/// `items` at bucket width `width` (see [`tiers`]), or `None` when no two would merge.
fn merge_buckets<T: Copy>(
    items: &[T],
    width: i64,
    bucket: impl Fn(&T, i64) -> i64,
    alone: impl Fn(&T, i64) -> bool,
    absorb: impl Fn(&mut T, &T),
) -> Option<Vec<T>> {
    let mut previous = None;
    let merges = items.iter().any(|it| {
        let b = (!alone(it, width)).then(|| bucket(it, width));
        let same = b.is_some() && b == previous;
        previous = b;
        same
    });
    if !merges {
        return None;
    }
    let mut out: Vec<T> = Vec::with_capacity(items.len() / 2 + 1);
    let mut open: Option<(i64, T)> = None;
    for it in items {
        if alone(it, width) {
            out.extend(open.take().map(|(_, block)| block));
            out.push(*it);
            continue;
        }
        let b = bucket(it, width);
        match &mut open {
            Some((ob, block)) if *ob == b => absorb(block, it),
            _ => {
                out.extend(open.take().map(|(_, block)| block));
                open = Some((b, *it));
            }
        }
    }
    out.extend(open.map(|(_, block)| block));
    Some(out)
}

impl Series {
    /// A counter from its samples in time order: each value holds until the next.
    pub fn new(samples: Vec<(i64, f64)>) -> Series {
        let span = match (samples.first(), samples.last()) {
            (Some(a), Some(b)) => b.0 - a.0,
            _ => 0,
        };
        let items = samples.iter().map(|&(ts, v)| Sample::at(ts, v)).collect();
        let tiers = tiers(
            items,
            span,
            |it: &Sample, width| it.start.div_euclid(width),
            |_, _| false,
            |block, it| {
                block.end = block.end.max(it.end);
                block.min = block.min.min(it.min);
                block.max = block.max.max(it.max);
                block.last = it.last;
            },
        );
        Series { samples, tiers }
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The greatest value of the whole series (to scale its track).
    pub fn max(&self) -> f64 {
        self.samples.iter().map(|s| s.1).fold(f64::NAN, f64::max)
    }

    /// The least value of the whole series.
    pub fn min(&self) -> f64 {
        self.samples.iter().map(|s| s.1).fold(f64::NAN, f64::min)
    }

    /// Appends what the counter shows of `[start, end]` at `ns_per_px`, the sample in
    /// force at `start` included: about one summary per pixel.
    pub fn query(&self, start: i64, end: i64, ns_per_px: f64, out: &mut Vec<Sample>) {
        let cap = out.len() + item_cap(start, end, ns_per_px);
        match self
            .tiers
            .iter()
            .rev()
            .find(|t| t.width as f64 <= ns_per_px)
        {
            Some(tier) => {
                let first = tier.items.partition_point(|it| it.end < start);
                out.extend(
                    tier.items[first.saturating_sub(1)..]
                        .iter()
                        .take_while(|it| it.start <= end)
                        .take(cap.saturating_sub(out.len())),
                );
            }
            None => {
                let first = self.samples.partition_point(|it| it.0 < start);
                out.extend(
                    self.samples[first.saturating_sub(1)..]
                        .iter()
                        .take_while(|it| it.0 <= end)
                        .take(cap.saturating_sub(out.len()))
                        .map(|&(ts, v)| Sample::at(ts, v)),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_model::events::SliceRow;
    use opscope_model::{ArgsId, SliceKind, TrackKind};

    /// A small deterministic generator, so a failure names its case.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, below: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % below.max(1)
        }
    }

    /// A thread of nested slices: each top-level slice holds up to three children,
    /// durations from 1 ns to 1 ms, so every zoom level has both blocks and slices.
    fn nested_trace(seed: u64, tops: usize) -> Trace {
        let mut rng = Lcg(seed);
        let mut t = Trace::new();
        let source = t.add_source(opscope_model::Source {
            path: "t".into(),
            format: "test".into(),
            clock: opscope_model::ClockId(0),
            host: None,
            rank: None,
            world_size: None,
            metadata: ArgsId::NONE,
        });
        let p = t.process(source, 1);
        let th = t.thread(p, 1);
        let track = t.thread_track(th, TrackKind::Thread);
        let name = t.intern("op");
        let mut at = 0i64;
        for _ in 0..tops {
            at += rng.next(1000) as i64;
            let dur = (1 + rng.next(1_000_000) as i64) >> rng.next(20);
            let row = |ts, dur| SliceRow {
                track,
                ts,
                dur,
                name,
                category: name,
                kind: SliceKind::Op,
                args: ArgsId::NONE,
            };
            t.slices.push(row(at, dur));
            let mut inner = at;
            for _ in 0..rng.next(4) {
                let d = rng.next((at + dur - inner).max(1) as u64) as i64 / 2;
                if inner + d > at + dur {
                    break;
                }
                t.slices.push(row(inner, d));
                inner += d;
            }
            at += dur;
        }
        t.finish();
        t
    }

    /// The whole-trace build, which spreads rows over threads, puts each row's
    /// summaries back with its row.
    #[test]
    fn the_parallel_build_equals_the_track_by_track_one() {
        let t = nested_trace(11, 5000);
        let whole = Timeline::build(&t);
        let TrackLod::Slices(rows) = &whole.tracks[0] else {
            panic!("a thread track summarised as a counter");
        };
        let alone = SliceRows::build(&t, 0);
        assert_eq!(rows.rows(), alone.rows());
        for (a, b) in rows.rows.iter().zip(&alone.rows) {
            assert_eq!(a.slices, b.slices);
            let widths = |r: &Row| {
                r.tiers
                    .iter()
                    .map(|t| (t.width, t.items.clone()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(widths(a), widths(b));
        }
    }

    #[test]
    fn rows_are_the_depth_on_a_thread() {
        let t = nested_trace(7, 2000);
        let rows = SliceRows::build(&t, 0);
        for (r, row) in rows.rows.iter().enumerate() {
            for &i in &row.slices {
                assert_eq!(t.slices.depth(i as usize), r, "slice {i}");
            }
        }
        let placed: usize = rows.rows.iter().map(|r| r.slices.len()).sum();
        assert_eq!(placed, t.slices.len());
    }

    /// At every zoom, each slice in view is drawn alone when at least a bucket wide
    /// and otherwise lies inside a block; nothing is drawn twice, nothing outside the
    /// view; and a view returns about two items per pixel at most.
    #[test]
    fn a_view_shows_every_slice_in_it_and_holds_what_the_screen_holds() {
        for seed in 1..6 {
            let t = nested_trace(seed, 20_000);
            let rows = SliceRows::build(&t, 0);
            let (t0, t1) = t.time_span().unwrap();
            let mut rng = Lcg(seed * 31);
            let px = 2000.0;
            let mut span = (t1 - t0) as f64;
            while span >= 100.0 {
                let start = t0 + rng.next(((t1 - t0) as f64 - span).max(1.0) as u64) as i64;
                let end = start + span as i64;
                let ns_per_px = span / px;
                for r in 0..rows.rows() {
                    let mut out = Vec::new();
                    rows.query(&t, r, start, end, ns_per_px, &mut out);
                    assert!(
                        out.len() as f64 <= 2.0 * px + 8.0,
                        "seed {seed}, span {span}: {} items in row {r}",
                        out.len()
                    );
                    for w in out.windows(2) {
                        assert!(w[0].end <= w[1].start, "items overlap: {w:?}");
                    }
                    let counted: u64 = out.iter().map(|it| it.count as u64).sum();
                    let in_view: Vec<u32> = rows.rows[r]
                        .slices
                        .iter()
                        .copied()
                        .filter(|&i| {
                            t.slices.end(i as usize) >= start && t.slices.ts[i as usize] <= end
                        })
                        .collect();
                    // Blocks at the view's edges may hold slices just outside it.
                    assert!(counted >= in_view.len() as u64);
                    for &i in &in_view {
                        let (ts, e) = (t.slices.ts[i as usize], t.slices.end(i as usize));
                        let inside = out.iter().any(|it| it.start <= ts && e <= it.end);
                        assert!(
                            inside,
                            "slice {i} [{ts}, {e}] not drawn at {ns_per_px} ns/px"
                        );
                        if (e - ts) as f64 >= 4.0 * ns_per_px {
                            assert!(
                                out.iter().any(|it| it.count == 1 && it.slice == i),
                                "slice {i} is {} px wide but merged",
                                (e - ts) as f64 / ns_per_px
                            );
                        }
                    }
                }
                span /= 3.7;
            }
        }
    }

    #[test]
    fn a_counter_keeps_its_extremes_at_every_zoom() {
        let mut rng = Lcg(3);
        let samples: Vec<(i64, f64)> = (0..50_000)
            .map(|k| (k * 1000 + rng.next(500) as i64, rng.next(1_000_000) as f64))
            .collect();
        let series = Series::new(samples.clone());
        assert!(!series.tiers.is_empty());
        let (t0, t1) = (samples[0].0, samples.last().unwrap().0);
        for ns_per_px in [1.0, 100.0, 10_000.0, 1e6, 1e8] {
            let (start, end) = (
                t0 + (t1 - t0) / 3,
                t0 + (t1 - t0) / 3 + (ns_per_px * 500.0) as i64,
            );
            let mut out = Vec::new();
            series.query(start, end, ns_per_px, &mut out);
            // 500 pixels: at most two and a half per pixel (buckets are up to 4x finer).
            assert!(out.len() <= 1258, "{} samples at {ns_per_px}", out.len());
            let truth = samples
                .iter()
                .filter(|s| s.0 >= start && s.0 <= end)
                .map(|s| s.1)
                .fold(f64::NAN, f64::max);
            let shown = out.iter().map(|s| s.max).fold(f64::NAN, f64::max);
            assert!(
                truth.is_nan() || shown >= truth,
                "max {truth} shown as {shown} at {ns_per_px}"
            );
            // The value in force at the view's start is there.
            let before = samples.partition_point(|s| s.0 < start);
            assert!(out[0].start <= samples[before].0);
            assert!(
                out[0].start < start,
                "the sample before the view is missing"
            );
        }
    }
}
