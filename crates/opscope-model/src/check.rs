//! [`Trace::check`]: whether a model keeps every promise [`Trace::finish`] makes to
//! analyses and exporters (references resolve, columns agree, slices sorted and
//! nested). The fuzz targets hold importers to it, and a model read back from the cache
//! is refused unless it passes, so that no saved file can make an analysis panic.

use crate::args::BagChecker;
use crate::{StrId, Trace, TrackId, TrackKind, NONE};

/// Rows from which a table's rows are checked on two threads.
const PARALLEL_ROWS: usize = 1 << 20;

/// Returns early with a message when a condition fails.
macro_rules! ensure {
    ($cond:expr, $($message:tt)+) => {
        if !$cond {
            return Err(format!($($message)+));
        }
    };
}

impl Trace {
    /// The first broken invariant, if any.
    pub fn check(&self) -> Result<(), String> {
        let n_strings = self.strings.len();
        let str_ok = |id: StrId| (id.0 as usize) < n_strings;
        let bags = self.args.checker(n_strings);
        self.check_dimensions(n_strings, &bags)?;
        self.args.check(n_strings)?;
        self.check_indexes()?;
        self.check_slices(n_strings, &bags)?;

        let n_slices = self.slices.len();
        let n_tracks = self.tracks.len();
        let f = &self.flows;
        ensure!(f.columns_agree(), "flow columns differ in length");
        for i in 0..f.len() {
            ensure!(
                (f.from[i] as usize) < n_slices && (f.to[i] as usize) < n_slices,
                "flow {i}: dangling"
            );
            ensure!(
                str_ok(f.name[i]) && str_ok(f.category[i]),
                "flow {i}: string ids"
            );
        }

        let inst = &self.instants;
        ensure!(inst.columns_agree(), "instant columns differ in length");
        for i in 0..inst.len() {
            ensure!((inst.track[i] as usize) < n_tracks, "instant {i}: track");
            ensure!(
                str_ok(inst.name[i]) && str_ok(inst.category[i]),
                "instant {i}: string ids"
            );
            ensure!(bags.bag_ok(inst.args[i]), "instant {i}: args");
        }
        let c = &self.counters;
        ensure!(c.columns_agree(), "counter columns differ in length");
        for i in 0..c.len() {
            ensure!(
                (c.track[i] as usize) < n_tracks,
                "counter sample {i}: track"
            );
        }
        self.stacks.check(n_strings)?;
        self.samples.check(n_tracks, self.stacks.nodes.len())?;
        Ok(())
    }

    fn check_dimensions(&self, n_strings: usize, bags: &BagChecker) -> Result<(), String> {
        let str_ok = |id: StrId| (id.0 as usize) < n_strings;
        for (i, s) in self.sources.iter().enumerate() {
            ensure!(
                (s.clock.0 as usize) < self.clocks.len(),
                "source {i}: clock"
            );
            ensure!(bags.bag_ok(s.metadata), "source {i}: metadata args");
            ensure!(s.host.is_none_or(str_ok), "source {i}: host");
        }
        for (i, c) in self.clocks.iter().enumerate() {
            ensure!(str_ok(c.name), "clock {i}: name");
        }
        for (i, p) in self.processes.iter().enumerate() {
            ensure!(p.source.index() < self.sources.len(), "process {i}: source");
            ensure!(
                p.device.is_none_or(|d| d.index() < self.devices.len()),
                "process {i}: device"
            );
            ensure!(
                p.name.is_none_or(str_ok) && p.labels.is_none_or(str_ok),
                "process {i}: strings"
            );
        }
        for (i, t) in self.threads.iter().enumerate() {
            ensure!(
                t.process.index() < self.processes.len(),
                "thread {i}: process"
            );
            ensure!(t.name.is_none_or(str_ok), "thread {i}: name");
        }
        for (i, d) in self.devices.iter().enumerate() {
            ensure!(d.source.index() < self.sources.len(), "device {i}: source");
            ensure!(d.name.is_none_or(str_ok), "device {i}: name");
        }
        for (i, t) in self.tracks.iter().enumerate() {
            ensure!(str_ok(t.name), "track {i}: name");
            ensure!(
                t.process.is_none_or(|p| p.index() < self.processes.len()),
                "track {i}: process"
            );
            ensure!(
                t.thread.is_none_or(|th| th.index() < self.threads.len()),
                "track {i}: thread"
            );
            ensure!(
                t.device.is_none_or(|d| d.index() < self.devices.len()),
                "track {i}: device"
            );
        }
        for (&category, _) in &self.unknown_categories {
            ensure!(str_ok(category), "unknown category: string id");
        }
        for (source, _) in &self.warnings {
            ensure!(source.index() < self.sources.len(), "warning: source");
        }
        Ok(())
    }

    fn check_slices(&self, n_strings: usize, bags: &BagChecker) -> Result<(), String> {
        let s = &self.slices;
        let n = s.len();
        ensure!(s.columns_agree(), "slice columns differ in length");
        let n_tracks = self.tracks.len();
        // The rows are checked apart from each other: a large table in two halves, on
        // two threads (reading back a 2 GiB trace's model checks 8 M slices).
        if n >= PARALLEL_ROWS {
            let half = n / 2;
            let (first, second) = std::thread::scope(|scope| {
                let second = std::thread::Builder::new()
                    .spawn_scoped(scope, || self.check_slice_rows(half..n, n_strings, bags));
                let first = self.check_slice_rows(0..half, n_strings, bags);
                let second = match second {
                    Ok(thread) => thread.join(),
                    // No thread to be had (a process limit): the second half here.
                    Err(_) => Ok(self.check_slice_rows(half..n, n_strings, bags)),
                };
                (first, second)
            });
            first?;
            second.map_err(|_| "slice check failed".to_string())??;
        } else {
            self.check_slice_rows(0..n, n_strings, bags)?;
        }
        for t in 0..n_tracks {
            let range = self.track_slices(TrackId(t as u32));
            ensure!(
                range.start <= range.end && range.end <= n,
                "track {t}: slice range out of bounds"
            );
            ensure!(
                s.track[range.clone()].iter().all(|&x| x as usize == t),
                "track {t}: slice range holds other tracks' slices"
            );
            if self.tracks[t].kind == TrackKind::Thread {
                // Thread slices nest strictly: a later slice starting inside an earlier
                // one ends inside it too (`finish` clips it otherwise).
                for i in range {
                    let parent = s.parent[i];
                    ensure!(
                        parent == NONE || s.end(i) <= s.end(parent as usize),
                        "slice {i}: overlaps its parent"
                    );
                }
            }
        }
        Ok(())
    }

    /// The checks of each slice row in `rows` on its own.
    fn check_slice_rows(
        &self,
        rows: std::ops::Range<usize>,
        n_strings: usize,
        bags: &BagChecker,
    ) -> Result<(), String> {
        let str_ok = |id: StrId| (id.0 as usize) < n_strings;
        let s = &self.slices;
        let n_tracks = self.tracks.len();
        for i in rows {
            ensure!(
                (s.track[i] as usize) < n_tracks,
                "slice {i}: track {} of {n_tracks}",
                s.track[i]
            );
            ensure!(s.dur[i] >= 0, "slice {i}: negative duration {}", s.dur[i]);
            ensure!(
                str_ok(s.name[i]) && str_ok(s.category[i]),
                "slice {i}: string ids"
            );
            ensure!(bags.bag_ok(s.args[i]), "slice {i}: args");
            if i > 0 {
                let key = |j: usize| (s.track[j], s.ts[j], std::cmp::Reverse(s.dur[j]));
                ensure!(
                    key(i - 1) <= key(i),
                    "slice {i}: not sorted by track and time"
                );
            }
            let parent = s.parent[i];
            if parent != NONE {
                let p = parent as usize;
                ensure!(p < i, "slice {i}: parent {p} does not precede it");
                ensure!(
                    s.track[p] == s.track[i],
                    "slice {i}: parent on another track"
                );
                ensure!(
                    s.ts[p] <= s.ts[i] && s.end(i) <= s.end(p),
                    "slice {i}: outside its parent {p}"
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::events::SliceRow;
    use crate::*;

    /// A finished trace of two nested slices with args, on one thread.
    fn small_trace() -> Trace {
        let (mut trace, track) = crate::testing::one_thread();
        for (ts, dur, name) in [(0, 10, "outer"), (2, 3, "inner")] {
            let name = trace.intern(name);
            let key = trace.intern("shape");
            let value = trace.intern("[2, 3]");
            let mut w = trace.args.writer();
            w.push(key, ArgValue::Str(value));
            let args = w.finish();
            trace.slices.push(SliceRow {
                track,
                ts,
                dur,
                name,
                category: StrId::EMPTY,
                kind: SliceKind::Op,
                args,
            });
        }
        trace.finish();
        trace
    }

    #[test]
    fn a_finished_trace_passes_and_broken_references_do_not() {
        small_trace()
            .check()
            .expect("a finished trace keeps the invariants");

        let mut trace = small_trace();
        trace.slices.name[1] = StrId(9_999);
        assert_eq!(trace.check().unwrap_err(), "slice 1: string ids");

        let mut trace = small_trace();
        trace.slices.track[0] = 7;
        assert!(trace.check().unwrap_err().starts_with("slice 0: track 7"));

        let mut trace = small_trace();
        trace.slices.parent.pop();
        assert_eq!(trace.check().unwrap_err(), "slice columns differ in length");

        let mut trace = small_trace();
        trace.slices.ts.swap(0, 1);
        assert!(trace.check().is_err(), "unsorted slices pass");

        let mut trace = small_trace();
        let key = trace.intern("k");
        let mut w = trace.args.writer();
        w.push(key, ArgValue::Str(StrId(9_999)));
        trace.slices.args[0] = w.finish();
        assert_eq!(trace.check().unwrap_err(), "slice 0: args");

        let mut trace = small_trace();
        trace.flows.push(0, 5, StrId::EMPTY, StrId::EMPTY);
        assert_eq!(trace.check().unwrap_err(), "flow 0: dangling");
    }
}
