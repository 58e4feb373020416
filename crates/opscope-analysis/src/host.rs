//! Where a process's host threads spend their time: computation, communication
//! (collectives run on the CPU: gloo, MPI, oneCCL, TensorFlow's collective ops and gRPC
//! transfers), the two overlapped, or neither. What `steps` and `gpu` show of a run
//! that has no device work, as they show a device's time for one that has.

use opscope_model::{SliceKind, SourceId, StrId, Trace, TrackKind, NONE};
use serde::Serialize;

use crate::intervals::IntervalSet;
use crate::report::{Column, Table, Value};

/// A source's host time as two sets, over all its threads: when some thread computed
/// (an op, a runtime call, compilation, anything but communication), and when some
/// thread communicated.
#[derive(Clone, Debug, Default)]
pub struct HostSets {
    pub computation: IntervalSet,
    pub communication: IntervalSet,
}

/// Host time within a span.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HostTime {
    /// Some thread computed or communicated.
    pub busy_ns: i64,
    pub computation_ns: i64,
    pub communication_ns: i64,
    /// Communication while some thread computed.
    pub overlap_ns: i64,
    /// No thread ran an op: the program's own Python, waits, the data loader.
    pub idle_ns: i64,
}

impl HostTime {
    /// The share of communication that computation overlapped, in percent.
    pub fn communication_overlap_pct(&self) -> Option<f64> {
        (self.communication_ns > 0)
            .then(|| 100.0 * self.overlap_ns as f64 / self.communication_ns as f64)
    }
}

/// Whether a slice counts as host work: an op, a range, a runtime call, compilation or
/// a collective; not a step marker (it spans the step), a Python function of a
/// profiler's Python tracer (it spans whatever Python does), an allocation, or one of
/// the marks `opscope record`'s bootstrap puts around a framework's step calls.
fn counts(trace: &Trace, i: usize, ours: Option<StrId>) -> bool {
    let s = &trace.slices;
    matches!(
        s.kind(i),
        SliceKind::Op
            | SliceKind::Annotation
            | SliceKind::Runtime
            | SliceKind::Driver
            | SliceKind::Sync
            | SliceKind::Compile
            | SliceKind::Collective
    ) && Some(s.category[i]) != ours
        && !crate::markers::is_marker(trace, i)
}

impl HostSets {
    /// The host sets of every source, by source index. On each thread, communication is
    /// the time under a collective, computation the time under any other work that is
    /// not communication (a `DistributedDataParallel.forward` range around a broadcast
    /// computes only outside it).
    pub fn of_sources(trace: &Trace) -> Vec<HostSets> {
        Self::of_sources_in(trace, None, None)
    }

    /// [`HostSets::of_sources`] of the slices `selected` marks (all, without it), for
    /// the sources `wanted` marks (all, without it; the others' sets are empty).
    pub fn of_sources_in(
        trace: &Trace,
        selected: Option<&[bool]>,
        wanted: Option<&[bool]>,
    ) -> Vec<HostSets> {
        let s = &trace.slices;
        let ours = trace.strings.find("opscope");
        // Per source: the spans of computation and of communication, every thread's.
        type Spans = Vec<(i64, i64)>;
        let mut spans: Vec<(Spans, Spans)> = vec![Default::default(); trace.sources.len()];
        for (t, track) in trace.tracks.iter().enumerate() {
            let Some(process) = track.process.filter(|_| track.kind == TrackKind::Thread) else {
                continue;
            };
            let source = trace.processes[process.index()].source.index();
            if wanted.is_some_and(|w| !w.get(source).copied().unwrap_or(false)) {
                continue;
            }
            let (mut work, mut talk) = (Vec::new(), Vec::new());
            for i in trace.track_slices(opscope_model::TrackId(t as u32)) {
                if !counts(trace, i, ours) || selected.is_some_and(|chosen| !chosen[i]) {
                    continue;
                }
                let outer = |pred: &dyn Fn(usize) -> bool| {
                    let mut p = s.parent[i];
                    while p != NONE {
                        if pred(p as usize) {
                            return false;
                        }
                        p = s.parent[p as usize];
                    }
                    true
                };
                if s.kind(i) == SliceKind::Collective {
                    if outer(&|p| s.kind(p) == SliceKind::Collective) {
                        talk.push((s.ts[i], s.end(i)));
                    }
                } else if outer(&|p| counts(trace, p, ours)) {
                    work.push((s.ts[i], s.end(i)));
                }
            }
            let talk = IntervalSet::from_spans(talk);
            let work = IntervalSet::from_spans(work).difference(&talk);
            spans[source].0.extend_from_slice(work.spans());
            spans[source].1.extend_from_slice(talk.spans());
        }
        spans
            .into_iter()
            .map(|(work, talk)| HostSets {
                computation: IntervalSet::from_spans(work),
                communication: IntervalSet::from_spans(talk),
            })
            .collect()
    }

    /// The host time of `[start, end)`.
    pub fn within(&self, start: i64, end: i64) -> HostTime {
        let computation = self.computation.clipped(start, end);
        let communication = self.communication.clipped(start, end);
        let busy = computation.union(&communication).total();
        HostTime {
            busy_ns: busy,
            computation_ns: computation.total(),
            communication_ns: communication.total(),
            overlap_ns: computation.intersection(&communication).total(),
            idle_ns: (end - start).max(0) - busy,
        }
    }

    /// Whether the source ran any host work at all.
    pub fn is_empty(&self) -> bool {
        self.computation.is_empty() && self.communication.is_empty()
    }

    /// From the first host work to the end of the last.
    pub fn span(&self) -> Option<(i64, i64)> {
        let first = |set: &IntervalSet| set.spans().first().map(|s| s.0);
        let last = |set: &IntervalSet| set.spans().last().map(|s| s.1);
        let start = first(&self.computation)
            .into_iter()
            .chain(first(&self.communication))
            .min()?;
        let end = last(&self.computation)
            .into_iter()
            .chain(last(&self.communication))
            .max()?;
        Some((start, end))
    }
}

/// One source's host time in `gpu`, for a run that has no device work.
#[derive(Clone, Debug, Serialize)]
pub struct HostReport {
    pub file: String,
    pub rank: Option<u32>,
    /// `rank 1`, `DataLoader worker 341`, `process 328`.
    pub role: String,
    /// From the source's first host work to the end of its last, in the window.
    pub span_ns: i64,
    pub time: HostTime,
    pub communication_overlap_pct: Option<f64>,
}

/// The host time of each source that has host work but no device work in the window
/// (`selected`), by source.
pub fn reports(trace: &Trace, selected: &[bool], with_devices: &[bool]) -> Vec<HostReport> {
    // Only the sources without device work are reported: the others' threads, most of
    // a GPU trace, are not walked.
    let wanted: Vec<bool> = (0..trace.sources.len())
        .map(|i| !with_devices.get(i).copied().unwrap_or(false))
        .collect();
    HostSets::of_sources_in(trace, Some(selected), Some(&wanted))
        .into_iter()
        .enumerate()
        .filter(|(i, _)| wanted[*i])
        .filter_map(|(i, sets)| {
            let (start, end) = sets.span()?;
            let time = sets.within(start, end);
            let source = &trace.sources[i];
            Some(HostReport {
                file: source.path.clone(),
                rank: source.rank,
                role: crate::roles::role(trace, SourceId(i as u32)),
                span_ns: end - start,
                communication_overlap_pct: time.communication_overlap_pct(),
                time,
            })
        })
        .collect()
}

/// Host reports as a table, one row per source: its span, and busy, computation,
/// communication and idle time as shares of it, with how much of the communication
/// computation overlapped. Several files of one process (a profiler's cycles, each its
/// own trace) are told apart by their file.
pub fn table(hosts: &[HostReport]) -> Table {
    let mut table = Table::new(vec![
        Column::text("process"),
        Column::numeric("span"),
        Column::numeric("busy"),
        Column::numeric("computation"),
        Column::numeric("communication"),
        Column::numeric("comm. overlapped"),
        Column::numeric("idle"),
    ]);
    for h in hosts {
        let alike = hosts.iter().filter(|other| other.role == h.role).count();
        let process = if alike > 1 {
            let file = h.file.rsplit('/').next().unwrap_or(&h.file);
            format!("{} · {file}", h.role)
        } else {
            h.role.clone()
        };
        let share = |n: i64| Value::share_of(n as f64, h.span_ns.max(1) as f64, 1);
        table.rows.push(vec![
            Value::text(process),
            Value::Duration(h.span_ns as f64),
            share(h.time.busy_ns),
            share(h.time.computation_ns),
            share(h.time.communication_ns),
            h.communication_overlap_pct
                .map_or(Value::text("-"), |p| Value::percent(p, 1)),
            share(h.time.idle_ns),
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On one thread a gloo all-reduce inside DDP's forward range is communication, the
    /// rest of the range computation; another thread's op overlaps the all-reduce; the
    /// step marker and the bootstrap's marks count as nothing.
    #[test]
    fn collectives_are_communication_and_the_rest_of_the_ops_computation() {
        let json = r#"[
            {"ph":"X","cat":"user_annotation","name":"ProfilerStep#0","pid":1,"tid":1,"ts":0,"dur":1000},
            {"ph":"X","cat":"user_annotation","name":"DistributedDataParallel.forward","pid":1,"tid":1,"ts":100,"dur":300},
            {"ph":"X","cat":"cpu_op","name":"gloo:all_reduce","pid":1,"tid":1,"ts":200,"dur":100},
            {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":2,"ts":250,"dur":100},
            {"ph":"X","cat":"opscope","name":"jax call f","pid":1,"tid":1,"ts":500,"dur":400}
        ]"#;
        let mut trace = Trace::new();
        opscope_formats::chrome::import(json.as_bytes(), "t.json", &mut trace).unwrap();
        trace.finish();
        let sets = &HostSets::of_sources(&trace)[0];
        assert_eq!(
            sets.within(0, 1_000_000),
            HostTime {
                busy_ns: 300_000,
                computation_ns: 250_000,
                communication_ns: 100_000,
                overlap_ns: 50_000,
                idle_ns: 700_000,
            }
        );
        assert_eq!(
            sets.within(0, 1_000_000).communication_overlap_pct(),
            Some(50.0)
        );
        assert_eq!(sets.within(210_000, 220_000).communication_ns, 10_000);
    }
}
