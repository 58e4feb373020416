//! Links device work to the host: each kernel, copy or set on a GPU stream to the
//! runtime or driver call that launched it, and through that call to the framework op
//! around it. Uses what the trace offers: launch flows (Kineto `ac2g`) first, then
//! equal `correlation` ids between host and device slices of one source, then (for
//! TensorFlow timelines) the graph node `name` the device work and its op share.

use hashbrown::HashMap;
use opscope_model::args::ArgValue;
use opscope_model::{SliceKind, SourceId, Trace, TrackKind, NONE};

/// The result of the pass, indexed by slice row.
#[derive(Clone, Debug, Default)]
pub struct Correlation {
    /// The host slice that launched each device slice, or [`NONE`].
    pub launch: Vec<u32>,
    /// Device slices (kernels, copies, sets on GPU streams) seen.
    pub device_slices: usize,
    /// Device slices with no launch found.
    pub unattributed: usize,
    /// Of those, kernels.
    pub unattributed_kernels: usize,
}

impl Correlation {
    pub fn launch_of(&self, slice: usize) -> Option<usize> {
        match self.launch.get(slice) {
            Some(&l) if l != NONE => Some(l as usize),
            _ => None,
        }
    }

    /// The framework op that made the launch: the innermost `Op` or `Collective`
    /// around the launching call (or the call itself, when it is one).
    pub fn op_of(&self, trace: &Trace, slice: usize) -> Option<usize> {
        let mut at = self.launch_of(slice)? as u32;
        while at != NONE {
            let kind = trace.slices.kind(at as usize);
            if matches!(kind, SliceKind::Op | SliceKind::Collective) {
                return Some(at as usize);
            }
            at = trace.slices.parent[at as usize];
        }
        None
    }
}

/// Whether slice `i` is device work on a GPU stream.
pub fn is_device_work(trace: &Trace, i: usize) -> bool {
    trace.slices.kind(i).is_device_activity()
        && trace.tracks[trace.slices.track[i] as usize].kind == TrackKind::GpuStream
}

/// The source (file) a slice came from.
pub fn source_of(trace: &Trace, i: usize) -> Option<SourceId> {
    let track = &trace.tracks[trace.slices.track[i] as usize];
    track.process.map(|p| trace.processes[p.index()].source)
}

pub fn correlate(trace: &Trace) -> Correlation {
    let s = &trace.slices;
    let n = s.len();
    let mut launch = vec![NONE; n];
    let on_host = |i: usize| trace.tracks[s.track[i] as usize].kind == TrackKind::Thread;

    // Launch flows: host slice → device slice.
    for f in 0..trace.flows.len() {
        let (from, to) = (trace.flows.from[f] as usize, trace.flows.to[f] as usize);
        if is_device_work(trace, to) && on_host(from) && launch[to] == NONE {
            launch[to] = from as u32;
        }
    }

    // Correlation ids, for device slices no flow reached.
    let key = trace.strings.find("correlation");
    if let Some(key) = key {
        let id_of = |i: usize| match trace.args.find(s.args[i], key) {
            Some(ArgValue::Int(v)) => Some(v),
            Some(ArgValue::UInt(v)) => i64::try_from(v).ok(),
            _ => None,
        };
        let mut calls: HashMap<(Option<SourceId>, i64), u32> = HashMap::new();
        for i in 0..n {
            if on_host(i) && matches!(s.kind(i), SliceKind::Runtime | SliceKind::Driver) {
                if let Some(id) = id_of(i) {
                    calls.entry((source_of(trace, i), id)).or_insert(i as u32);
                }
            }
        }
        for (i, slot) in launch.iter_mut().enumerate() {
            if *slot == NONE && is_device_work(trace, i) {
                if let Some(&call) = id_of(i).and_then(|id| calls.get(&(source_of(trace, i), id))) {
                    *slot = call;
                }
            }
        }
    }

    // TensorFlow timelines: a kernel carries the graph node name of the op that ran it.
    if let Some(key) = trace.strings.find("name") {
        let node_of = |i: usize| match trace.args.find(s.args[i], key) {
            Some(ArgValue::Str(n)) => Some(n),
            _ => None,
        };
        let mut ops: HashMap<(Option<SourceId>, opscope_model::StrId), u32> = HashMap::new();
        for i in 0..n {
            if s.kind(i) == SliceKind::Op && !is_device_work(trace, i) {
                if let Some(node) = node_of(i) {
                    ops.entry((source_of(trace, i), node)).or_insert(i as u32);
                }
            }
        }
        if !ops.is_empty() {
            for (i, slot) in launch.iter_mut().enumerate() {
                if *slot == NONE && is_device_work(trace, i) {
                    if let Some(&op) =
                        node_of(i).and_then(|node| ops.get(&(source_of(trace, i), node)))
                    {
                        *slot = op;
                    }
                }
            }
        }
    }

    let mut result = Correlation {
        launch,
        ..Correlation::default()
    };
    for i in 0..n {
        if is_device_work(trace, i) {
            result.device_slices += 1;
            if result.launch[i] == NONE {
                result.unattributed += 1;
                if s.kind(i) == SliceKind::Kernel {
                    result.unattributed_kernels += 1;
                }
            }
        }
    }
    result
}
