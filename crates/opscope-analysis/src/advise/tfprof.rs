//! tfprof's `advise` checkers as tfprof prints them, for a TensorFlow RunMetadata
//! (`tensorflow/core/profiler/internal/advisor/`): AcceleratorUtilizationChecker (per
//! accelerator, the nodes' last step: their accelerator time over the span from their
//! earliest start to their latest end), OperationChecker (BatchNorm without
//! FusedBatchNorm; NHWC on a GPU) and ExpensiveOperationChecker (the top 3 op types and
//! the top 3 scopes, by time; the code view needs code traces a RunMetadata lacks).

use std::collections::BTreeMap;

use opscope_model::{SliceKind, Trace};
use serde::Serialize;

use crate::context::Context;
use crate::op_stats::{OpStatsOptions, Timing};
use crate::tree::{self, TreeKind};
use crate::view::{self, OpViewOptions, ViewOptions};
use crate::window::Window;

/// One checker's report lines.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Checker {
    pub name: &'static str,
    pub reports: Vec<String>,
}

/// The checkers' reports, when every source is a RunMetadata (what tfprof reads).
pub fn checkers(cx: &Context) -> Vec<Checker> {
    let trace = cx.trace();
    if trace.sources.is_empty() || trace.sources.iter().any(|s| s.format != "tf-run-metadata") {
        return Vec::new();
    }
    vec![
        Checker {
            name: "AcceleratorUtilizationChecker",
            reports: accelerator_utilization(trace),
        },
        Checker {
            name: "OperationChecker",
            reports: operation_checker(trace),
        },
        Checker {
            name: "ExpensiveOperationChecker",
            reports: expensive_operations(cx),
        },
    ]
}

/// tfprof's `FormatTime`.
pub fn format_time(micros: i64) -> String {
    if micros > 1_000_000 {
        format!("{:.2}sec", micros as f64 / 1e6)
    } else if micros > 1_000 {
        format!("{:.2}ms", micros as f64 / 1e3)
    } else {
        format!("{micros}us")
    }
}

/// A RunMetadata's times are whole microseconds; tfprof counts a 0 µs run as 1 µs.
fn micros(ns: i64) -> i64 {
    (ns / 1000).max(1)
}

fn accelerator_utilization(trace: &Trace) -> Vec<String> {
    // Per accelerator: earliest start, latest end, accelerator time of its nodes.
    let mut devices: BTreeMap<String, (i64, i64, i64)> = BTreeMap::new();
    let s = &trace.slices;
    // A node's device work, by its op name (the correlation pass links TensorFlow's
    // device work to its op by name).
    let mut work_of: hashbrown::HashMap<(u32, opscope_model::StrId), Vec<usize>> =
        hashbrown::HashMap::new();
    for i in 0..s.len() {
        if !s.kind(i).is_device_activity() {
            continue;
        }
        let Some(src) = crate::correlate::source_of(trace, i) else {
            continue;
        };
        // `conv1/Conv2D:Conv2D` on a stream is node `conv1/Conv2D`.
        let name = trace.str(s.name[i]);
        let node = name.split(':').next().unwrap_or(name);
        if let Some(id) = trace.strings.find(node) {
            work_of.entry((src.0, id)).or_default().push(i);
        }
    }
    let mut seen: hashbrown::HashSet<(u32, opscope_model::StrId)> = hashbrown::HashSet::new();
    for i in 0..s.len() {
        if s.kind(i) != SliceKind::Op {
            continue;
        }
        let track = &trace.tracks[s.track[i] as usize];
        let Some(process) = track.process else {
            continue;
        };
        let process = &trace.processes[process.index()];
        let Some(device) = process.name.map(|n| trace.str(n).to_ascii_lowercase()) else {
            continue;
        };
        if !device.contains("gpu") {
            continue;
        }
        let key = (process.source.0, s.name[i]);
        // A node run twice in a step (a while loop) counts once, as tfprof's node does.
        if !seen.insert(key) {
            continue;
        }
        let work = work_of.get(&key).map(Vec::as_slice).unwrap_or_default();
        let start = std::iter::once(i)
            .chain(work.iter().copied())
            .map(|j| s.ts[j] / 1000)
            .min()
            .unwrap_or(0);
        let end = std::iter::once(i)
            .chain(work.iter().copied())
            .map(|j| s.ts[j] / 1000 + micros(s.dur[j]))
            .max()
            .unwrap_or(0);
        let exec: i64 = work.iter().map(|&j| micros(s.dur[j])).sum();
        let entry = devices.entry(device).or_insert((0, 0, 0));
        if entry.0 == 0 {
            entry.0 = start;
        } else if start != 0 {
            entry.0 = entry.0.min(start);
        }
        entry.1 = entry.1.max(end);
        entry.2 += exec;
    }
    devices
        .iter()
        .filter(|(_, (start, end, _))| end > start)
        .map(|(device, &(start, end, exec))| {
            let utilization = exec as f64 / (end - start) as f64;
            if utilization >= 0.5 {
                format!("device: {device} utilization: {utilization:.2}")
            } else {
                format!("device: {device} low utilization: {utilization:.2}")
            }
        })
        .collect()
}

pub fn operation_checker(trace: &Trace) -> Vec<String> {
    let s = &trace.slices;
    let ops = (0..s.len()).filter(|&i| s.kind(i) == SliceKind::Op);
    let (mut batch_norm, mut fused, mut nhwc_on_gpu) = (false, false, false);
    let data_format = trace.strings.find("data_format");
    for i in ops {
        let name = trace.str(s.name[i]);
        batch_norm |= name.contains("BatchNorm");
        fused |= op_type(trace, i).is_some_and(|t| t == "FusedBatchNorm");
        if let Some(key) = data_format {
            let nhwc = matches!(
                trace.args.find(s.args[i], key),
                Some(opscope_model::args::ArgValue::Str(v)) if trace.str(v) == "NHWC"
            );
            nhwc_on_gpu |= nhwc && on_gpu(trace, i);
        }
    }
    let mut reports = Vec::new();
    if batch_norm && !fused {
        reports.push("Maybe use faster FusedBatchNorm instead of BatchNorm".to_string());
    }
    if nhwc_on_gpu {
        reports.push(
            "Found operation using NHWC data_format on GPU. Maybe NCHW is faster.".to_string(),
        );
    }
    reports
}

/// A TensorFlow op's type (the `op` arg of its graph node).
fn op_type(trace: &Trace, i: usize) -> Option<&str> {
    let key = trace.strings.find("op")?;
    match trace.args.find(trace.slices.args[i], key)? {
        opscope_model::args::ArgValue::Str(v) => Some(trace.str(v)),
        _ => None,
    }
}

fn on_gpu(trace: &Trace, i: usize) -> bool {
    let track = &trace.tracks[trace.slices.track[i] as usize];
    track
        .process
        .and_then(|p| trace.processes[p.index()].name)
        .is_some_and(|n| trace.str(n).to_ascii_lowercase().contains("gpu"))
}

fn expensive_operations(cx: &Context) -> Vec<String> {
    let mut reports = Vec::new();
    // tfprof's op view (its checker's options): ordered by time, at least 1 µs, every op
    // accounted.
    let op_view = view::op_view(
        cx,
        &OpViewOptions {
            stats: OpStatsOptions {
                window: Window::Whole,
                timing: Timing::WholeMicros,
            },
            view: ViewOptions {
                min_micros: 1.0,
                ..ViewOptions::default()
            },
            ..OpViewOptions::default()
        },
    );
    let total = (op_view.totals.micros as f64) / 1000.0;
    let lines: Vec<String> = op_view
        .rows
        .iter()
        .take(3)
        .enumerate()
        .map(|(n, row)| {
            let (cpu, acc) = (row.self_cpu_ns / 1000, row.accelerator_ns / 1000);
            format!(
                "top {} operation type: {}, cpu: {}, accelerator: {}, total: {} ({:.2}%)",
                n + 1,
                row.name,
                format_time(cpu),
                format_time(acc),
                format_time(cpu + acc),
                100.0 * (cpu + acc) as f64 / (total + 1e-10)
            )
        })
        .collect();
    if !lines.is_empty() {
        reports.push(lines.join("\n"));
    }
    // tfprof's scope view (its checker's options: at least 100 µs in all): the root's
    // children by total time, each with its own times.
    let tree = tree::build(cx, TreeKind::Scope, Window::Whole, Timing::WholeMicros);
    let mut children: Vec<&tree::TreeNode> = tree.nodes[0]
        .children
        .iter()
        .map(|&c| &tree.nodes[c])
        .filter(|n| n.total_cpu_ns + n.total_accelerator_ns >= 100_000)
        .collect();
    children.sort_by_key(|n| std::cmp::Reverse(n.total_cpu_ns + n.total_accelerator_ns));
    let lines: Vec<String> = children
        .iter()
        .take(3)
        .enumerate()
        .map(|(n, node)| {
            let (cpu, acc) = (node.self_cpu_ns / 1000, node.self_accelerator_ns / 1000);
            format!(
                "top {} graph node: {}, cpu: {}, accelerator: {}, total: {}",
                n + 1,
                node.name,
                format_time(cpu),
                format_time(acc),
                format_time(cpu + acc)
            )
        })
        .collect();
    if !lines.is_empty() {
        reports.push(lines.join("\n"));
    }
    reports
}
