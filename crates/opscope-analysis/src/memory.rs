//! Memory per device and allocator: bytes in use (and reserved) over time, the peak and
//! the blocks live at it, the ops that allocate most, and growth from step to step.
//! Reads Kineto's `[memory]` events (and their `Total Allocated`/`Total Reserved` when
//! present), XPlane's `MemoryAllocation`/`MemoryDeallocation` events (one allocator per
//! `allocator_name`, with its `bytes_allocated` total), and allocator counters
//! (TensorFlow timelines' `Allocators`). A trace with none of them, such as an `opscope
//! record` session, is reported from the resident memory its process sampler took
//! (`resident bytes` counters): per process, the peak, growth over the run and per
//! step. (A recording cannot turn on `profile_memory`.)

use hashbrown::HashMap;

use opscope_model::{SourceId, StrId, Trace, TrackKind};
use serde::Serialize;

use crate::attribution::{allocation_events, AllocationEvent as Event};
use crate::context::Context;
use crate::steps::{self, StepOptions};

#[derive(Clone, Debug)]
pub struct MemoryOptions {
    /// Rows in the top-ops and live-at-peak lists.
    pub top: usize,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        MemoryOptions { top: 10 }
    }
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LiveBlock {
    pub bytes: i64,
    pub allocated_at_ns: i64,
    /// The innermost op around the allocation.
    pub op: Option<String>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct OpAllocations {
    pub op: String,
    pub bytes: i64,
    pub allocations: u64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct StepGrowth {
    pub step: String,
    pub in_use_at_start: i64,
    pub in_use_at_end: i64,
    pub growth: i64,
}

/// A part of a resident-memory series: its highest sample and the last one.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Period {
    pub from_ns: i64,
    pub to_ns: i64,
    pub peak: i64,
    pub at_end: i64,
}

#[derive(Clone, Debug, Serialize)]
pub struct AllocatorReport {
    pub file: String,
    pub rank: Option<u32>,
    /// `cuda 0`, `cpu`, or the allocator's counter name.
    pub allocator: String,
    /// Kineto's `Device Type` (c10's numbering) and `Device Id`, for event data.
    pub device_type: Option<i64>,
    pub device_id: Option<i64>,
    /// `events` (allocations and frees), `counter` (bytes in use sampled) or `resident`
    /// (a process's resident memory, sampled by the recorder).
    pub data: &'static str,
    pub events: usize,
    pub allocated_bytes: i64,
    pub freed_bytes: i64,
    pub peak_in_use: i64,
    pub peak_at_ns: i64,
    pub final_in_use: i64,
    pub peak_reserved: Option<i64>,
    /// Bytes in use is counted from the trace's own totals; otherwise from zero at the
    /// first event, which undercounts what was allocated before the trace began.
    pub from_allocator_totals: bool,
    pub live_at_peak: Vec<LiveBlock>,
    pub top_ops: Vec<OpAllocations>,
    pub steps: Vec<StepGrowth>,
    /// For `resident` data: the first sample, and the run cut into
    /// [`RESIDENT_PERIODS`] periods of equal time.
    pub first_in_use: Option<i64>,
    pub over_time: Vec<Period>,
}

/// Periods of a resident-memory series in a report.
pub const RESIDENT_PERIODS: usize = 10;

/// c10's device types, as Kineto writes them in `Device Type`.
fn device_type_name(code: i64) -> String {
    const NAMES: &[&str] = &[
        "cpu",
        "cuda",
        "mkldnn",
        "opengl",
        "opencl",
        "ideep",
        "hip",
        "fpga",
        "maia",
        "xla",
        "vulkan",
        "metal",
        "xpu",
        "mps",
        "meta",
        "hpu",
        "ve",
        "lazy",
        "ipu",
        "mtia",
        "privateuse1",
    ];
    usize::try_from(code)
        .ok()
        .and_then(|c| NAMES.get(c))
        .map_or_else(|| format!("device type {code}"), |n| n.to_string())
}

/// Every allocator's report, with the trace's start for the times `memory` shows.
#[derive(Clone, Debug)]
pub struct MemoryReport {
    pub allocators: Vec<AllocatorReport>,
    /// When the trace starts: times are shown from here.
    pub origin_ns: i64,
}

/// In JSON, the allocators' reports.
impl Serialize for MemoryReport {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.allocators.serialize(serializer)
    }
}

/// [`memory`], as `opscope memory` shows it.
pub fn memory_report(cx: &Context, options: &MemoryOptions) -> MemoryReport {
    MemoryReport {
        allocators: memory(cx, options),
        origin_ns: cx.trace().time_span().map_or(0, |s| s.0),
    }
}

pub fn memory(cx: &Context, options: &MemoryOptions) -> Vec<AllocatorReport> {
    memory_over(cx, options, &steps::steps(cx, &StepOptions::default()))
}

/// [`memory`] over steps already found (`steps::steps` with the default options): what
/// `advise` has at hand, where finding them again would cost as much as the rest.
pub fn memory_over(
    cx: &Context,
    options: &MemoryOptions,
    all_steps: &[steps::SourceSteps],
) -> Vec<AllocatorReport> {
    let trace = cx.trace();
    let mut reports = Vec::new();
    for (group, events) in allocation_events(trace) {
        let (source, device_type, device_id, allocator) = group;
        let name = if let Some(a) = allocator {
            trace.str(a).to_string()
        } else if device_id >= 0 {
            format!("{} {device_id}", device_type_name(device_type))
        } else {
            device_type_name(device_type)
        };
        let mut report = from_events(trace, &events, name, options);
        report.device_type = Some(device_type);
        report.device_id = Some(device_id);
        if let Some(src) = source {
            let s = &trace.sources[src.index()];
            report.file = s.path.clone();
            report.rank = s.rank;
            if let Some(found) = all_steps.iter().find(|st| st.file == s.path) {
                report.steps = step_growth(&events, found);
            }
        }
        reports.push(report);
    }
    reports.extend(from_counters(trace, options));
    if reports.is_empty() {
        reports.extend(from_resident(trace, all_steps));
    }
    reports
}

/// Per process with a `resident bytes` counter (the recorder's sampler): its peak,
/// growth over time and per step.
fn from_resident(trace: &Trace, all_steps: &[steps::SourceSteps]) -> Vec<AllocatorReport> {
    let c = &trace.counters;
    let mut per_track: HashMap<usize, Vec<usize>> = HashMap::new();
    for i in 0..c.len() {
        let t = c.track[i] as usize;
        let track = &trace.tracks[t];
        if track.kind == TrackKind::Counter
            && track.process.is_some()
            && trace.str(track.name) == "resident bytes"
        {
            per_track.entry(t).or_default().push(i);
        }
    }
    let mut tracks: Vec<(usize, Vec<usize>)> = per_track.into_iter().collect();
    tracks.sort_by_key(|(t, _)| *t);
    let mut reports = Vec::new();
    for (t, mut samples) in tracks {
        samples.sort_by_key(|&i| c.ts[i]);
        // A live process always holds some memory: a 0 is a sample of the process gone
        // (a zombie waiting to be reaped), not its memory at the end.
        let series: Vec<(i64, i64)> = samples
            .iter()
            .map(|&i| (c.ts[i], c.value[i] as i64))
            .filter(|&(_, bytes)| bytes > 0)
            .collect();
        let Some(&(peak_at, peak)) = series.iter().rev().max_by_key(|(_, v)| *v) else {
            continue;
        };
        let Some(p) = trace.tracks[t].process else {
            continue;
        };
        let process = &trace.processes[p.index()];
        let name = crate::roles::process_name(trace, p);
        let source = &trace.sources[process.source.index()];
        // Steps are found in the files of the process's own events, not the sampler's:
        // those of a source that has a process of the same pid.
        let steps_of = all_steps.iter().find(|st| {
            trace
                .processes
                .iter()
                .any(|q| q.pid == process.pid && trace.sources[q.source.index()].path == st.file)
        });
        let before = |at: i64| -> i64 {
            let k = series.partition_point(|s| s.0 < at);
            series[k.saturating_sub(1)].1
        };
        let steps = steps_of.map_or_else(Vec::new, |found| {
            found
                .steps
                .iter()
                .map(|s| {
                    let (start, end) = (before(s.start_ns), before(s.start_ns + s.dur_ns));
                    StepGrowth {
                        step: s.name.clone(),
                        in_use_at_start: start,
                        in_use_at_end: end,
                        growth: end - start,
                    }
                })
                .collect()
        });
        reports.push(AllocatorReport {
            file: source.path.clone(),
            rank: source.rank,
            allocator: format!("{name} resident"),
            device_type: None,
            device_id: None,
            data: "resident",
            events: series.len(),
            allocated_bytes: 0,
            freed_bytes: 0,
            peak_in_use: peak,
            peak_at_ns: peak_at,
            final_in_use: series.last().map_or(0, |s| s.1),
            peak_reserved: None,
            from_allocator_totals: true,
            live_at_peak: Vec::new(),
            top_ops: Vec::new(),
            steps,
            first_in_use: series.first().map(|s| s.1),
            over_time: periods(&series),
        });
    }
    // The program's own process first, before short-lived helpers (shells, shims).
    reports.sort_by_key(|r| std::cmp::Reverse(r.peak_in_use));
    reports
}

/// The series cut into [`RESIDENT_PERIODS`] periods of equal time (fewer when it has
/// fewer samples); each sample belongs to the period its time falls in.
fn periods(series: &[(i64, i64)]) -> Vec<Period> {
    let (Some(first), Some(last)) = (series.first(), series.last()) else {
        return Vec::new();
    };
    let n = RESIDENT_PERIODS.min(series.len()) as i64;
    let span = (last.0 - first.0).max(1);
    let mut out: Vec<Period> = (0..n)
        .map(|k| Period {
            from_ns: first.0 + span * k / n,
            to_ns: first.0 + span * (k + 1) / n,
            peak: i64::MIN,
            at_end: 0,
        })
        .collect();
    for &(ts, v) in series {
        // The last period takes the last sample (its end is inclusive).
        let k = (((ts - first.0) as i128 * n as i128 / span as i128) as usize).min(out.len() - 1);
        out[k].peak = out[k].peak.max(v);
        out[k].at_end = v;
    }
    // A period with no sample holds what the one before it ended with.
    let mut prev = first.1;
    for p in &mut out {
        if p.peak == i64::MIN {
            (p.peak, p.at_end) = (prev, prev);
        }
        prev = p.at_end;
    }
    out
}

/// Bytes in use after each event.
/// One allocator's bytes in use over time.
pub struct InUseCurve {
    pub source: Option<SourceId>,
    pub allocator: String,
    /// (ns, bytes) at each allocation or free.
    pub points: Vec<(i64, i64)>,
}

/// Bytes in use over time per allocator, as the memory report counts them (the
/// allocator's own totals where every event has one): a curve for a timeline, beside
/// the per-step and per-tenth figures of the report.
pub fn in_use_curves(trace: &Trace) -> Vec<InUseCurve> {
    allocation_events(trace)
        .into_iter()
        .map(|((source, device_type, device_id, allocator), events)| {
            let name = match allocator {
                Some(a) => trace.str(a).to_string(),
                None if device_id >= 0 => format!("{} {device_id}", device_type_name(device_type)),
                None => device_type_name(device_type),
            };
            let (series, _) = in_use_series(&events);
            InUseCurve {
                source,
                allocator: name,
                points: events.iter().map(|e| e.ts).zip(series).collect(),
            }
        })
        .collect()
}

fn in_use_series(events: &[Event]) -> (Vec<i64>, bool) {
    let totals = events.iter().all(|e| e.total_allocated.is_some());
    let mut running = 0i64;
    let series = events
        .iter()
        .map(|e| {
            running += e.bytes;
            if totals {
                e.total_allocated.unwrap_or(running)
            } else {
                running
            }
        })
        .collect();
    (series, totals)
}

fn from_events(
    trace: &Trace,
    events: &[Event],
    allocator: String,
    options: &MemoryOptions,
) -> AllocatorReport {
    let (series, totals) = in_use_series(events);
    let (peak_index, peak) = series
        .iter()
        .enumerate()
        .max_by_key(|(k, v)| (**v, std::cmp::Reverse(*k)))
        .map_or((0, 0), |(k, v)| (k, *v));
    // Replay up to the peak to see which blocks were live.
    let mut live: HashMap<i64, LiveBlock> = HashMap::new();
    for e in &events[..=peak_index.min(events.len().saturating_sub(1))] {
        let Some(addr) = e.addr else { continue };
        if e.bytes > 0 {
            live.insert(
                addr,
                LiveBlock {
                    bytes: e.bytes,
                    allocated_at_ns: e.ts,
                    op: e.op.map(|o| trace.str(trace.slices.name[o]).to_string()),
                },
            );
        } else {
            live.remove(&addr);
        }
    }
    let mut live: Vec<LiveBlock> = live.into_values().collect();
    live.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then(a.allocated_at_ns.cmp(&b.allocated_at_ns))
    });
    live.truncate(options.top);
    let mut by_op: HashMap<Option<StrId>, (i64, u64)> = HashMap::new();
    for e in events.iter().filter(|e| e.bytes > 0) {
        let entry = by_op.entry(e.op.map(|o| trace.slices.name[o])).or_default();
        entry.0 += e.bytes;
        entry.1 += 1;
    }
    let mut top_ops: Vec<OpAllocations> = by_op
        .into_iter()
        .map(|(op, (bytes, n))| OpAllocations {
            op: op.map_or_else(
                || "(outside any op)".to_string(),
                |o| trace.str(o).to_string(),
            ),
            bytes,
            allocations: n,
        })
        .collect();
    top_ops.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.op.cmp(&b.op)));
    top_ops.truncate(options.top);
    AllocatorReport {
        file: String::new(),
        rank: None,
        allocator,
        device_type: None,
        device_id: None,
        data: "events",
        events: events.len(),
        allocated_bytes: events.iter().filter(|e| e.bytes > 0).map(|e| e.bytes).sum(),
        freed_bytes: -events
            .iter()
            .filter(|e| e.bytes < 0)
            .map(|e| e.bytes)
            .sum::<i64>(),
        peak_in_use: peak,
        peak_at_ns: events.get(peak_index).map_or(0, |e| e.ts),
        final_in_use: series.last().copied().unwrap_or(0),
        peak_reserved: events.iter().filter_map(|e| e.total_reserved).max(),
        from_allocator_totals: totals,
        live_at_peak: live,
        top_ops,
        steps: Vec::new(),
        first_in_use: None,
        over_time: Vec::new(),
    }
}

fn step_growth(events: &[Event], found: &steps::SourceSteps) -> Vec<StepGrowth> {
    let (series, _) = in_use_series(events);
    // Before the first event: what its totals say was already in use, when the series
    // is counted from the totals at all.
    let totals = events.iter().all(|e| e.total_allocated.is_some());
    let before = events
        .first()
        .and_then(|e| e.total_allocated.map(|t| t - e.bytes))
        .filter(|_| totals)
        .unwrap_or(0);
    // Bytes in use just before `t`: after the last event before it.
    let at = |t: i64| -> i64 {
        let k = events.partition_point(|e| e.ts < t);
        if k == 0 {
            before
        } else {
            series[k - 1]
        }
    };
    found
        .steps
        .iter()
        .map(|s| {
            let (start, end) = (at(s.start_ns), at(s.start_ns + s.dur_ns));
            StepGrowth {
                step: s.name.clone(),
                in_use_at_start: start,
                in_use_at_end: end,
                growth: end - start,
            }
        })
        .collect()
}

/// Allocator counters: TensorFlow timelines put one per allocator in a process named
/// `Allocators`.
fn from_counters(trace: &Trace, options: &MemoryOptions) -> Vec<AllocatorReport> {
    let c = &trace.counters;
    let mut reports = Vec::new();
    // Allocator counter tracks per source: ops' own memory reports (TensorFlow
    // RunMetadata) name the ops that allocate most when a source has one allocator.
    let mut allocators_per_source: HashMap<SourceId, usize> = HashMap::new();
    for track in &trace.tracks {
        if let Some(p) = track.process {
            let process = &trace.processes[p.index()];
            if track.kind == TrackKind::Counter
                && process.name.is_some_and(|n| trace.str(n) == "Allocators")
            {
                *allocators_per_source.entry(process.source).or_default() += 1;
            }
        }
    }
    let reported_top = |source: SourceId| -> Vec<OpAllocations> {
        let keys = crate::op_stats::MemoryKeys::new(trace);
        let mut by_op: HashMap<StrId, (i64, u64)> = HashMap::new();
        for i in 0..trace.slices.len() {
            let Some(m) = keys.of(trace, i) else { continue };
            if m.requested <= 0 || crate::correlate::source_of(trace, i) != Some(source) {
                continue;
            }
            let e = by_op.entry(trace.slices.name[i]).or_default();
            e.0 += m.requested;
            e.1 += 1;
        }
        let mut top: Vec<OpAllocations> = by_op
            .into_iter()
            .map(|(op, (bytes, allocations))| OpAllocations {
                op: trace.str(op).to_string(),
                bytes,
                allocations,
            })
            .collect();
        top.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.op.cmp(&b.op)));
        top.truncate(options.top);
        top
    };
    for (t, track) in trace.tracks.iter().enumerate() {
        let Some(p) = track.process else { continue };
        let process = &trace.processes[p.index()];
        let is_allocator = track.kind == TrackKind::Counter
            && process.name.is_some_and(|n| trace.str(n) == "Allocators");
        if !is_allocator {
            continue;
        }
        let samples: Vec<usize> = (0..c.len()).filter(|&i| c.track[i] as usize == t).collect();
        let Some(&peak) = samples
            .iter()
            .max_by(|&&a, &&b| c.value[a].total_cmp(&c.value[b]))
        else {
            continue;
        };
        let source = &trace.sources[process.source.index()];
        reports.push(AllocatorReport {
            file: source.path.clone(),
            rank: source.rank,
            allocator: trace.str(track.name).to_string(),
            device_type: None,
            device_id: None,
            data: "counter",
            events: samples.len(),
            allocated_bytes: 0,
            freed_bytes: 0,
            peak_in_use: c.value[peak] as i64,
            peak_at_ns: c.ts[peak],
            final_in_use: samples.last().map_or(0, |&i| c.value[i] as i64),
            peak_reserved: None,
            from_allocator_totals: true,
            live_at_peak: Vec::new(),
            top_ops: if allocators_per_source.get(&process.source) == Some(&1) {
                reported_top(process.source)
            } else {
                Vec::new()
            },
            steps: Vec::new(),
            first_in_use: None,
            over_time: Vec::new(),
        });
    }
    reports
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_model::{ArgsId, ClockDomain, LinearTransform, Source};

    /// A process's resident memory ends where it last held some: the sample of it gone
    /// (0 B, read of a zombie at exit) is none (before: the run ended at 0, "growth
    /// -11.86 MiB").
    #[test]
    fn the_sample_of_a_process_gone_is_no_resident_memory() {
        let mut trace = Trace::new();
        let name = trace.intern("CLOCK_MONOTONIC");
        let clock = trace.add_clock(ClockDomain {
            name,
            to_global: LinearTransform::IDENTITY,
            unix_offset_ns: None,
        });
        let source = trace.add_source(Source {
            path: "opscope-processes-1.pftrace".into(),
            format: "perfetto".into(),
            clock,
            host: None,
            rank: None,
            world_size: None,
            metadata: ArgsId::NONE,
        });
        let process = trace.process(source, 7);
        let name = trace.intern("resident bytes");
        let track = trace.named_track(Some(process), TrackKind::Counter, name, 0);
        for (ts, bytes) in [(0, 10e6), (100, 50e6), (200, 40e6), (300, 0.0)] {
            trace.counters.push(track, ts, bytes);
        }
        trace.finish();
        let reports = memory(&Context::new(&trace), &MemoryOptions::default());
        let resident = reports.iter().find(|r| r.data == "resident").unwrap();
        assert_eq!(resident.final_in_use, 40_000_000);
        assert_eq!(resident.peak_in_use, 50_000_000);
    }
}
