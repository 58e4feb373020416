//! `opscope gpu`: per rank, device and stream, where device time goes — busy or idle,
//! computation, communication or memory, why streams sat idle, how long launches take
//! to start, how deep queues get, and what bandwidth copies reach.

pub mod classify;
pub mod idle;
pub mod launch;
mod report;
pub mod transfer;
pub mod utilization;

use serde::Serialize;

use crate::context::Context;
use crate::correlate::{self, Correlation};
use crate::intervals::IntervalSet;
use crate::window::Window;
use classify::WorkClass;
use opscope_model::Trace;

#[derive(Clone, Debug)]
pub struct GpuOptions {
    pub window: Window,
    /// A gap shorter than this, before work whose launch came in time, is kernel wait
    /// rather than other idle time (HTA's `consecutive_kernel_delay`, 30 µs).
    pub kernel_wait_threshold_ns: i64,
    pub idle_gaps_from: idle::GapsFrom,
    /// Kernel names the user calls communication, beside the ones opscope knows.
    pub communication_kernels: Option<regex::Regex>,
}

impl Default for GpuOptions {
    fn default() -> Self {
        GpuOptions {
            window: Window::Whole,
            kernel_wait_threshold_ns: 30_000,
            idle_gaps_from: idle::GapsFrom::LatestEnd,
            communication_kernels: None,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct GpuReport {
    pub ranks: Vec<RankReport>,
    /// With two or more devices: spreads across them and the straggler (the device
    /// that computes most).
    pub across: Option<crate::across::Across>,
    /// Device work with no launch found (all ranks).
    pub unattributed: usize,
    /// The host threads' time of each source with no device work: where a CPU-only
    /// run's time goes (computation, communication on the CPU, idle).
    pub hosts: Vec<crate::host::HostReport>,
}

/// One device of one source file (a rank of a job, usually one device).
#[derive(Clone, Debug, Serialize)]
pub struct RankReport {
    pub file: String,
    pub rank: Option<u32>,
    /// The process whose device this is, by its one name (`rank 0 (pid 41)`).
    pub process: String,
    /// The correction that put the file's host on the reference host's clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_correction: Option<crate::summary::ClockCorrection>,
    /// `gpu 0`, or `None` for streams of no known device.
    pub device: Option<String>,
    pub temporal: utilization::Temporal,
    pub combinations: Vec<utilization::Combination>,
    /// Percent of communication time overlapped by computation.
    pub communication_overlap_pct: Option<f64>,
    pub transfers: Vec<transfer::TransferRow>,
    pub streams: Vec<StreamReport>,
}

#[derive(Clone, Debug, Serialize)]
pub struct StreamReport {
    /// `gpu 0`, `mtia 9`, or the process's name when it is no known device.
    pub device: String,
    /// The stream's name in the trace (`stream 7`), or its thread id.
    pub stream: String,
    /// The stream's number: the one in its name (`stream 7`, `Stream 1 FW`), else the
    /// thread id.
    pub stream_id: Option<i64>,
    pub work: usize,
    pub busy_ns: i64,
    pub idle: idle::StreamIdle,
    pub launches: launch::LaunchStats,
}

/// A source (by index) and one of its devices.
type DeviceKey = (usize, Option<opscope_model::DeviceId>);

pub fn analyze(cx: &Context, options: &GpuOptions) -> GpuReport {
    let trace = cx.trace();
    let correlation = cx.correlation();
    let selected = cx.selected(options.window);
    // Device work per source and track, in time order (slices are sorted by track, then
    // time).
    let mut per_track: Vec<Vec<usize>> = vec![Vec::new(); trace.tracks.len()];
    for (i, &keep) in selected.iter().enumerate() {
        if keep && correlate::is_device_work(trace, i) {
            per_track[trace.slices.track[i] as usize].push(i);
        }
    }
    // Streams per source and device, in track order.
    let mut groups: Vec<(DeviceKey, Vec<usize>)> = Vec::new();
    for (t, work) in per_track.iter().enumerate() {
        let track = &trace.tracks[t];
        let Some(process) = track.process.filter(|_| !work.is_empty()) else {
            continue;
        };
        let key = (
            trace.processes[process.index()].source.index(),
            track.device,
        );
        match groups.iter_mut().find(|g| g.0 == key) {
            Some(group) => group.1.push(t),
            None => groups.push((key, vec![t])),
        }
    }
    groups.sort_by_key(|g| (g.0 .0, g.0 .1.map(|d| d.0)));
    let mut ranks = Vec::new();
    let mut keys = Vec::new();
    let mut classifier = classify::Classifier::with(
        trace,
        Some(correlation),
        options.communication_kernels.as_ref(),
    );
    let corrections = crate::summary::ClockCorrection::of_sources(trace);
    let mut with_devices = vec![false; trace.sources.len()];
    for ((src_index, _), _) in &groups {
        with_devices[*src_index] = true;
    }
    for ((src_index, device), tracks) in groups {
        let source = &trace.sources[src_index];
        let mut spans: [Vec<(i64, i64)>; 3] = Default::default();
        for &t in &tracks {
            for &i in &per_track[t] {
                let class = classifier.class(i);
                let slot = WorkClass::ALL.iter().position(|c| *c == class).unwrap_or(0);
                spans[slot].push((trace.slices.ts[i], trace.slices.end(i)));
            }
        }
        // The streams' figures and the device's are apart: one on each core.
        let ((temporal, combinations, communication_overlap_pct, transfers), streams) = rayon::join(
            || {
                let sets = spans.map(IntervalSet::from_spans);
                (
                    utilization::temporal(&sets),
                    utilization::combinations(&sets),
                    utilization::communication_overlap(&sets),
                    transfer::transfers(
                        trace,
                        tracks.iter().flat_map(|&t| per_track[t].iter().copied()),
                    ),
                )
            },
            || {
                tracks
                    .iter()
                    .map(|&t| stream_report(trace, correlation, t, &per_track[t], options))
                    .collect()
            },
        );
        keys.push(
            crate::roles::process_key(trace, opscope_model::SourceId(src_index as u32)).map(
                |process| {
                    let device = device.map(|d| {
                        let d = &trace.devices[d.index()];
                        (d.kind.name(), d.index)
                    });
                    (process, device)
                },
            ),
        );
        ranks.push(RankReport {
            file: source.path.clone(),
            rank: source.rank,
            process: crate::roles::role(trace, opscope_model::SourceId(src_index as u32)),
            clock_correction: corrections[src_index],
            device: device.map(|d| {
                let d = &trace.devices[d.index()];
                format!("{} {}", d.kind.name(), d.index)
            }),
            temporal,
            combinations,
            communication_overlap_pct,
            transfers,
            streams,
        });
    }
    // The files of one process on one device (a profiler's successive windows) are
    // one device to compare, with the time of all of them.
    let figures: Vec<(String, Vec<(&'static str, f64)>)> = crate::across::groups(&keys)
        .into_iter()
        .map(|group| {
            let sum = |f: fn(&utilization::Temporal) -> i64| {
                group.iter().map(|&i| f(&ranks[i].temporal)).sum::<i64>()
            };
            let (span, idle) = (sum(|t| t.span_ns), sum(|t| t.idle_ns));
            let first = &ranks[group[0]];
            (
                crate::across::label(&first.file, first.rank, first.device.as_deref()),
                vec![
                    ("busy_ns", sum(|t| t.busy_ns) as f64),
                    ("compute_ns", sum(|t| t.compute_ns) as f64),
                    ("non_compute_ns", sum(|t| t.non_compute_ns) as f64),
                    ("idle_ns", idle as f64),
                    (
                        "idle_pct",
                        if span > 0 {
                            100.0 * idle as f64 / span as f64
                        } else {
                            0.0
                        },
                    ),
                ],
            )
        })
        .collect();
    GpuReport {
        across: crate::across::summarize(&figures, "compute_ns"),
        ranks,
        unattributed: correlation.unattributed,
        hosts: crate::host::reports(trace, &selected, &with_devices),
    }
}

fn stream_report(
    trace: &Trace,
    correlation: &Correlation,
    track: usize,
    work: &[usize],
    options: &GpuOptions,
) -> StreamReport {
    let (device, stream, stream_id) = stream_names(trace, track);
    let busy = IntervalSet::from_spans(
        work.iter()
            .map(|&i| (trace.slices.ts[i], trace.slices.end(i)))
            .collect(),
    );
    StreamReport {
        device,
        stream,
        stream_id,
        work: work.len(),
        busy_ns: busy.total(),
        idle: idle::stream_idle(
            trace,
            correlation,
            work,
            options.kernel_wait_threshold_ns,
            options.idle_gaps_from,
        ),
        launches: launch::launch_stats(trace, correlation, work),
    }
}

/// A stream track's device (`gpu 0`, else its process's name), its name (`stream 7`,
/// else its thread id) and its number (see [`StreamReport::stream_id`]).
pub fn stream_names(trace: &Trace, track: usize) -> (String, String, Option<i64>) {
    let t = &trace.tracks[track];
    let process = t.process.map(|p| &trace.processes[p.index()]);
    let device = match process.and_then(|p| p.device) {
        Some(d) => {
            let d = &trace.devices[d.index()];
            format!("{} {}", d.kind.name(), d.index)
        }
        None => process
            .and_then(|p| p.name)
            .map_or_else(|| "?".to_string(), |n| trace.str(n).to_string()),
    };
    let thread = t.thread.map(|th| &trace.threads[th.index()]);
    let name = thread
        .and_then(|th| th.name)
        .map(|n| trace.str(n).trim().to_string());
    let tid = thread.map(|th| th.tid);
    let stream_id = name.as_deref().and_then(number_after_stream).or(tid);
    let stream = name.unwrap_or_else(|| tid.map_or_else(|| "?".into(), |t| t.to_string()));
    (device, stream, stream_id)
}

/// `7` in `stream 7`, `1` in `Stream 1 FW`.
fn number_after_stream(name: &str) -> Option<i64> {
    let lower = name.to_ascii_lowercase();
    let rest = &lower[lower.find("stream")? + "stream".len()..];
    let digits: String = rest
        .trim_start_matches([' ', ':', '#'])
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}
