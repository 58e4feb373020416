//! Per op type (tfprof's op view, torch's `key_averages`): how often it ran, its CPU
//! time with and without the ops it called, and the accelerator time of the device work
//! it launched. Ops are host slices of kind `Op`, `Collective`, `Annotation`, `Step`,
//! `Runtime`, `Driver` and `Sync`, grouped by name. An op whose only op child has the
//! same name is one call, as torch counts it.

use hashbrown::HashMap;
use opscope_model::{SliceKind, StrId, Trace, TrackId, TrackKind, NONE};
use serde::Serialize;

use crate::correlate::{self, Correlation};
use crate::window::{self, Window};

#[derive(Clone, Debug, Default)]
pub struct OpStatsOptions {
    pub window: Window,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct OpRow {
    pub name: String,
    /// Calls.
    pub occurrence: u64,
    /// CPU time from start to end of each call, summed (torch's "CPU total").
    pub cpu_ns: i64,
    /// CPU time not spent in the ops it called (torch's "Self CPU").
    pub self_cpu_ns: i64,
    /// Time of the kernels, copies and sets the op launched itself (not those of the
    /// ops it called).
    pub accelerator_ns: i64,
    /// Bytes the op allocated itself (PyTorch `[memory]` events; tfprof's requested
    /// bytes).
    pub bytes: i64,
}

impl OpRow {
    /// tfprof's `micros`: CPU and accelerator time.
    pub fn total_ns(&self) -> i64 {
        self.cpu_ns + self.accelerator_ns
    }
}

/// Whether a slice kind is an op for this view.
pub fn is_op_kind(kind: SliceKind) -> bool {
    matches!(
        kind,
        SliceKind::Op
            | SliceKind::Collective
            | SliceKind::Annotation
            | SliceKind::Step
            | SliceKind::Runtime
            | SliceKind::Driver
            | SliceKind::Sync
    )
}

/// Rows in no particular order.
pub fn op_stats(trace: &Trace, correlation: &Correlation, options: &OpStatsOptions) -> Vec<OpRow> {
    let s = &trace.slices;
    let selected = window::select(trace, correlation, options.window);
    // Host threads hold the ops; TensorFlow also puts the ops it runs for a GPU on a
    // lane of that GPU.
    let is_op = |i: usize| {
        let kind = s.kind(i);
        is_op_kind(kind)
            && (kind == SliceKind::Op
                || trace.tracks[s.track[i] as usize].kind == TrackKind::Thread)
    };
    let mut rows: HashMap<StrId, OpRow> = HashMap::new();
    fn row<'r>(rows: &'r mut HashMap<StrId, OpRow>, trace: &Trace, name: StrId) -> &'r mut OpRow {
        rows.entry(name).or_insert_with(|| OpRow {
            name: trace.str(name).to_string(),
            ..OpRow::default()
        })
    }
    // An op whose only op child has its own name (an overload calling another, as
    // `aten::div` does) counts as one call, as in torch's `key_averages`.
    let mut op_children = vec![0u32; s.len()];
    for i in 0..s.len() {
        let parent = s.parent[i];
        if is_op(i) && parent != NONE {
            op_children[parent as usize] += 1;
        }
    }
    let merged = |i: usize| {
        let parent = s.parent[i];
        parent != NONE
            && is_op(parent as usize)
            && op_children[parent as usize] == 1
            && s.name[parent as usize] == s.name[i]
    };
    for (i, _) in selected.iter().enumerate().filter(|(_, keep)| **keep) {
        if is_op(i) && merged(i) {
            continue;
        }
        if is_op(i) {
            let r = row(&mut rows, trace, s.name[i]);
            r.occurrence += 1;
            r.cpu_ns += s.dur[i];
            r.self_cpu_ns += s.dur[i];
            let parent = s.parent[i];
            if parent != NONE && is_op(parent as usize) {
                row(&mut rows, trace, s.name[parent as usize]).self_cpu_ns -= s.dur[i];
            }
        } else if correlate::is_device_work(trace, i) {
            if let Some(op) = correlation.op_of(trace, i) {
                row(&mut rows, trace, s.name[op]).accelerator_ns += s.dur[i];
            }
        }
    }
    let bytes_key = trace.strings.find("Bytes");
    let inst = &trace.instants;
    for i in 0..inst.len() {
        if inst.kind(i) != SliceKind::Alloc {
            continue;
        }
        let bytes = match bytes_key.and_then(|k| trace.args.find(inst.args[i], k)) {
            Some(opscope_model::args::ArgValue::Int(b)) if b > 0 => b,
            _ => continue,
        };
        if let Some(op) = innermost_op(trace, TrackId(inst.track[i]), inst.ts[i]) {
            if selected[op] {
                row(&mut rows, trace, s.name[op]).bytes += bytes;
            }
        }
    }
    rows.into_values().collect()
}

/// The innermost op running on `track` at `ts`.
pub fn innermost_op(trace: &Trace, track: TrackId, ts: i64) -> Option<usize> {
    let mut at = trace.enclosing_slice(track, ts)?;
    loop {
        if is_op_kind(trace.slices.kind(at as usize)) {
            return Some(at as usize);
        }
        at = trace.slices.parent[at as usize];
        if at == NONE {
            return None;
        }
    }
}
