//! Links device work to the host: each kernel, copy or set on a GPU stream to the
//! runtime or driver call that launched it, and through that call to the framework op
//! around it. Uses what the trace offers: launch flows (Kineto `ac2g`) first, then
//! equal `correlation` ids (XPlane: `correlation_id`) between host and device slices of
//! one source, then (for TensorFlow timelines) the graph node `name` the device work and
//! its op share, then the id of the range or op the work was queued in (`external_id`).
//! With no ids at all (HIP and SYCL traces of the original tracer), the in-order queue
//! rule: on an in-order queue work runs in launch order, so the n-th launch is the n-th
//! piece of work.

use hashbrown::HashMap;
use opscope_model::args::ArgValue;
use opscope_model::{SliceKind, SourceId, Trace, TrackKind, NONE};

/// Per slice row, the row it links to, if any.
#[derive(Clone, Debug, Default)]
pub struct RowLinks(
    /// The row plus one, 0 for none: a new table is zeroed memory, which the kernel maps
    /// in only where a link is written (most rows of a large trace are host rows that
    /// link to nothing, and filling them with a marker took most of `info` on a cached
    /// 2 GB trace).
    Vec<u32>,
);

impl RowLinks {
    fn new(rows: usize) -> RowLinks {
        RowLinks(vec![0; rows])
    }

    pub fn get(&self, row: usize) -> Option<usize> {
        match self.0.get(row) {
            Some(&to) if to != 0 => Some(to as usize - 1),
            _ => None,
        }
    }

    fn is_none(&self, row: usize) -> bool {
        self.0[row] == 0
    }

    fn set(&mut self, row: usize, to: u32) {
        self.0[row] = to + 1;
    }

    /// Every linked row with the row it links to, in row order.
    pub fn iter(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, &to)| to != 0)
            .map(|(row, &to)| (row, to as usize - 1))
    }
}

/// The result of the pass, indexed by slice row.
#[derive(Clone, Debug, Default)]
pub struct Correlation {
    /// The host call (runtime, driver) that launched each device slice.
    pub launch: RowLinks,
    /// For device slices with no known launch call, the op that ran them when the trace
    /// names it (TensorFlow's graph node name). Not a launch: its start says nothing
    /// about when the work was queued.
    pub op_link: RowLinks,
    /// Device slices (kernels, copies, sets on GPU streams) seen.
    pub device_slices: usize,
    /// Device slices linked to neither a launch nor an op.
    pub unattributed: usize,
    /// Of those, kernels.
    pub unattributed_kernels: usize,
}

impl Correlation {
    pub fn launch_of(&self, slice: usize) -> Option<usize> {
        self.launch.get(slice)
    }

    /// The op the device work belongs to: the innermost `Op` or `Collective` around
    /// the launching call; without one, the innermost annotation or step range around
    /// it; without either, the call itself — so no device time is lost. For work linked
    /// by op name, that op.
    pub fn op_of(&self, trace: &Trace, slice: usize) -> Option<usize> {
        let Some(call) = self.launch_of(slice) else {
            return self.op_link.get(slice);
        };
        let s = &trace.slices;
        let mut range = None;
        let mut at = call as u32;
        while at != NONE {
            match s.kind(at as usize) {
                SliceKind::Op | SliceKind::Collective => return Some(at as usize),
                SliceKind::Annotation | SliceKind::Step if range.is_none() => {
                    range = Some(at as usize)
                }
                _ => {}
            }
            at = s.parent[at as usize];
        }
        Some(range.unwrap_or(call))
    }
}

/// Whether slice `i` is device work on a GPU stream.
pub fn is_device_work(trace: &Trace, i: usize) -> bool {
    trace.slices.kind(i).is_device_activity()
        && trace.tracks[trace.slices.track[i] as usize].kind == TrackKind::GpuStream
}

/// The source (file) a track came from: its process's, else its device's.
pub fn source_of_track(trace: &Trace, t: &opscope_model::Track) -> Option<SourceId> {
    t.process
        .map(|p| trace.processes[p.index()].source)
        .or(t.device.map(|d| trace.devices[d.index()].source))
}

/// The source (file) a slice came from.
pub fn source_of(trace: &Trace, i: usize) -> Option<SourceId> {
    let track = &trace.tracks[trace.slices.track[i] as usize];
    track.process.map(|p| trace.processes[p.index()].source)
}

/// The device work of a model ([`is_device_work`]), in row order: found through the GPU
/// stream tracks' row ranges, so a large trace's host rows are not visited (a model not
/// finished, without those ranges, is scanned row by row).
pub fn device_work(trace: &Trace) -> Vec<u32> {
    let track = |t: usize| trace.track_slices(opscope_model::TrackId(t as u32));
    let ranged: usize = (0..trace.tracks.len()).map(|t| track(t).len()).sum();
    if ranged != trace.slices.len() {
        return (0..trace.slices.len())
            .filter(|&i| is_device_work(trace, i))
            .map(|i| i as u32)
            .collect();
    }
    let mut rows: Vec<u32> = Vec::new();
    for (t, info) in trace.tracks.iter().enumerate() {
        if info.kind == TrackKind::GpuStream {
            rows.extend(
                track(t)
                    .filter(|&i| trace.slices.kind(i).is_device_activity())
                    .map(|i| i as u32),
            );
        }
    }
    if !rows.is_sorted() {
        rows.sort_unstable();
    }
    rows
}

pub fn correlate(trace: &Trace) -> Correlation {
    let s = &trace.slices;
    let n = s.len();
    let mut launch = RowLinks::new(n);
    let mut op_link = RowLinks::new(n);
    let on_host = |i: usize| trace.tracks[s.track[i] as usize].kind == TrackKind::Thread;
    let device = device_work(trace);

    // Launch flows: host slice → device slice.
    for f in 0..trace.flows.len() {
        let (from, to) = (trace.flows.from[f] as usize, trace.flows.to[f] as usize);
        if is_device_work(trace, to) && on_host(from) && launch.is_none(to) {
            launch.set(to, from as u32);
        }
    }

    // Correlation ids, for device slices no flow reached.
    // Correlation ids: Kineto's `correlation` on runtime and driver calls; XPlane's
    // `correlation_id` on the host event of each launch (named after the kernel).
    // Each later rule only runs while some device work is still unlinked: reading
    // every slice's args is the costly part, and flows usually link everything.
    let unlinked = |launch: &RowLinks, op_link: &RowLinks| {
        device
            .iter()
            .any(|&i| launch.is_none(i as usize) && op_link.is_none(i as usize))
    };
    for (key_name, host_kinds_only) in [("correlation", true), ("correlation_id", false)] {
        let Some(key) = trace.strings.find(key_name) else {
            continue;
        };
        if !unlinked(&launch, &op_link) {
            break;
        }
        let id_of = |i: usize| trace.args.find(s.args[i], key).and_then(ArgValue::as_i64);
        let mut calls: HashMap<(Option<SourceId>, i64), u32> = HashMap::new();
        for i in 0..n {
            let launch_kind = matches!(s.kind(i), SliceKind::Runtime | SliceKind::Driver);
            if on_host(i) && (launch_kind || !host_kinds_only) {
                if let Some(id) = id_of(i) {
                    calls.entry((source_of(trace, i), id)).or_insert(i as u32);
                }
            }
        }
        for &i in &device {
            let i = i as usize;
            if launch.is_none(i) {
                if let Some(&call) = id_of(i).and_then(|id| calls.get(&(source_of(trace, i), id))) {
                    launch.set(i, call);
                }
            }
        }
    }

    // TensorFlow timelines: a kernel carries the graph node name of the op that ran it.
    if let Some(key) = trace
        .strings
        .find("name")
        .filter(|_| unlinked(&launch, &op_link))
    {
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
            for &i in &device {
                let i = i as usize;
                if launch.is_none(i) {
                    if let Some(&op) =
                        node_of(i).and_then(|node| ops.get(&(source_of(trace, i), node)))
                    {
                        op_link.set(i, op);
                    }
                }
            }
        }
    }

    external_id_rule(trace, &device, &launch, &mut op_link);

    if unlinked(&launch, &op_link) {
        in_order_queue_rule(trace, &mut launch, &op_link);
    }

    let mut result = Correlation {
        launch,
        op_link,
        ..Correlation::default()
    };
    result.device_slices = device.len();
    for &i in &device {
        let i = i as usize;
        if result.launch.is_none(i) && result.op_link.is_none(i) {
            result.unattributed += 1;
            if s.kind(i) == SliceKind::Kernel {
                result.unattributed_kernels += 1;
            }
        }
    }
    result
}

/// Device work still unlinked that carries the id of the range or op it was queued in:
/// opscope's `external_id` (the NVTX range CUPTI named for the launching call) to the
/// range with that `external_id`; Kineto's lowercase `external id` (2021 traces) to the
/// op whose `External id` it is. Current Kineto writes `External id` on kernels too, but
/// there it is the correlation id, not an op's: it is not used.
fn external_id_rule(trace: &Trace, device: &[u32], launch: &RowLinks, op_link: &mut RowLinks) {
    let s = &trace.slices;
    let n = s.len();
    let on_host = |i: usize| trace.tracks[s.track[i] as usize].kind == TrackKind::Thread;
    for (work_key, owner_key) in [
        ("external_id", "external_id"),
        ("external id", "External id"),
    ] {
        let (Some(work_key), Some(owner_key)) =
            (trace.strings.find(work_key), trace.strings.find(owner_key))
        else {
            continue;
        };
        let waiting: Vec<usize> = device
            .iter()
            .map(|&i| i as usize)
            .filter(|&i| launch.is_none(i) && op_link.is_none(i))
            .collect();
        if waiting.is_empty() {
            return;
        }
        let id_of = |i: usize, key| trace.args.find(s.args[i], key).and_then(ArgValue::as_i64);
        let mut owners: HashMap<(Option<SourceId>, i64), u32> = HashMap::new();
        for i in 0..n {
            let owner_kind = matches!(
                s.kind(i),
                SliceKind::Op | SliceKind::Collective | SliceKind::Annotation | SliceKind::Step
            );
            if owner_kind && on_host(i) {
                if let Some(id) = id_of(i, owner_key) {
                    owners.entry((source_of(trace, i), id)).or_insert(i as u32);
                }
            }
        }
        for i in waiting {
            if let Some(&owner) =
                id_of(i, work_key).and_then(|id| owners.get(&(source_of(trace, i), id)))
            {
                op_link.set(i, owner);
            }
        }
    }
}

/// Whether a host call launches device work, by its name: `hipLaunchKernel`,
/// `cuLaunchKernel`, `cudaMemcpyAsync`, `clEnqueueNDRangeKernel`,
/// `zeCommandListAppendLaunchKernel`, …
fn is_launch_call(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    ["launch", "memcpy", "memset", "enqueue"]
        .iter()
        .any(|m| lower.contains(m))
}

/// Pairs device work that has no launch yet with launch calls that launched nothing,
/// in order, for each source whose unpaired work runs on a single queue: the n-th
/// launch with the n-th piece of work, as long as no work would start before its
/// launch.
fn in_order_queue_rule(trace: &Trace, launch: &mut RowLinks, op_link: &RowLinks) {
    let s = &trace.slices;
    let mut used = vec![false; s.len()];
    for (_, l) in launch.iter() {
        used[l] = true;
    }
    // One pass: unpaired work and unused launch calls, per source.
    let mut work: HashMap<Option<SourceId>, Vec<usize>> = HashMap::new();
    let mut calls: HashMap<Option<SourceId>, Vec<usize>> = HashMap::new();
    for (i, &used) in used.iter().enumerate() {
        if launch.is_none(i) && op_link.is_none(i) && is_device_work(trace, i) {
            work.entry(source_of(trace, i)).or_default().push(i);
        } else if !used
            && matches!(s.kind(i), SliceKind::Runtime | SliceKind::Driver)
            && trace.tracks[s.track[i] as usize].kind == TrackKind::Thread
            && is_launch_call(trace.str(s.name[i]))
        {
            calls.entry(source_of(trace, i)).or_default().push(i);
        }
    }
    for (src, work) in work {
        // Work is in time order: slices are sorted by track, then time.
        let single_queue = work.iter().all(|&i| s.track[i] == s.track[work[0]]);
        let Some(calls) = calls
            .get_mut(&src)
            .filter(|c| single_queue && c.len() == work.len())
        else {
            continue;
        };
        calls.sort_by_key(|&i| (s.ts[i], i));
        if calls.iter().zip(&work).any(|(&c, &w)| s.ts[c] > s.ts[w]) {
            continue;
        }
        for (&c, &w) in calls.iter().zip(&work) {
            launch.set(w, c as u32);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn import(json: &str) -> Trace {
        let mut trace = Trace::new();
        opscope_formats::chrome::import(json.as_bytes(), "t.json", &mut trace).unwrap();
        trace
    }

    fn launch_names(trace: &Trace, c: &Correlation) -> Vec<(String, Option<String>)> {
        (0..trace.slices.len())
            .filter(|&i| is_device_work(trace, i))
            .map(|i| {
                let op = c
                    .op_of(trace, i)
                    .map(|o| trace.str(trace.slices.name[o]).to_string());
                (trace.str(trace.slices.name[i]).to_string(), op)
            })
            .collect()
    }

    /// Device work found through the stream tracks' row ranges is what a scan of every
    /// row finds, on a model with work on two streams between host rows; and the links
    /// read back as written.
    #[test]
    fn device_work_through_track_ranges_is_every_device_row() {
        let trace = import(
            r#"[
            {"ph":"M","name":"process_labels","pid":9,"args":{"labels":"GPU 0"}},
            {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":0,"dur":10},
            {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":1,"dur":2,"args":{"correlation":7}},
            {"ph":"X","cat":"kernel","name":"gemm","pid":9,"tid":2,"ts":15,"dur":5,"args":{"correlation":7}},
            {"ph":"X","cat":"gpu_memcpy","name":"Memcpy HtoD","pid":9,"tid":1,"ts":16,"dur":5},
            {"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":2,"ts":20,"dur":10},
            {"ph":"X","cat":"kernel","name":"add","pid":9,"tid":1,"ts":25,"dur":5}
        ]"#,
        );
        let scanned: Vec<u32> = (0..trace.slices.len())
            .filter(|&i| is_device_work(&trace, i))
            .map(|i| i as u32)
            .collect();
        assert_eq!(scanned.len(), 3);
        assert_eq!(device_work(&trace), scanned);
        let c = correlate(&trace);
        assert_eq!(c.device_slices, 3);
        let launched: Vec<(usize, usize)> = c.launch.iter().collect();
        assert_eq!(launched.len(), 1);
        let (work, call) = launched[0];
        assert_eq!(trace.str(trace.slices.name[work]), "gemm");
        assert_eq!(trace.str(trace.slices.name[call]), "cudaLaunchKernel");
        assert_eq!(c.launch_of(work), Some(call));
        assert_eq!(c.launch_of(call), None);
    }

    /// HIP without correlation ids: the n-th launch on the only queue is the n-th kernel.
    #[test]
    fn in_order_queue_pairs_launches_and_kernels() {
        let trace = import(
            r#"[
            {"ph":"M","name":"process_labels","pid":9,"args":{"labels":"GPU 0"}},
            {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":0,"dur":10},
            {"ph":"X","cat":"hip_runtime","name":"hipLaunchKernel","pid":1,"tid":1,"ts":1,"dur":2},
            {"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":20,"dur":10},
            {"ph":"X","cat":"hip_runtime","name":"hipLaunchKernel","pid":1,"tid":1,"ts":21,"dur":2},
            {"ph":"X","cat":"kernel","name":"gemm","pid":9,"tid":1,"ts":15,"dur":5},
            {"ph":"X","cat":"kernel","name":"add","pid":9,"tid":1,"ts":25,"dur":5}
        ]"#,
        );
        let c = correlate(&trace);
        assert_eq!(c.unattributed, 0);
        assert_eq!(
            launch_names(&trace, &c),
            [
                ("gemm".to_string(), Some("aten::mm".to_string())),
                ("add".to_string(), Some("aten::add".to_string()))
            ]
        );
        // A kernel that would start before its launch breaks the rule: nothing is paired.
        let trace = import(
            r#"[
            {"ph":"M","name":"process_labels","pid":9,"args":{"labels":"GPU 0"}},
            {"ph":"X","cat":"hip_runtime","name":"hipLaunchKernel","pid":1,"tid":1,"ts":30,"dur":2},
            {"ph":"X","cat":"kernel","name":"k","pid":9,"tid":1,"ts":15,"dur":5}
        ]"#,
        );
        assert_eq!(correlate(&trace).unattributed, 1);
    }

    /// Every kernel of a CUDA graph carries the correlation id of the graph launch: all
    /// go to the op that launched the graph.
    #[test]
    fn graph_kernels_go_to_the_op_that_launched_the_graph() {
        let trace = import(
            r#"[
            {"ph":"M","name":"process_labels","pid":0,"args":{"labels":"GPU 0"}},
            {"ph":"X","cat":"cpu_op","name":"CUDAGraph::replay","pid":1,"tid":1,"ts":0,"dur":10},
            {"ph":"X","cat":"cuda_runtime","name":"cudaGraphLaunch","pid":1,"tid":1,"ts":1,"dur":5,"args":{"correlation":7}},
            {"ph":"X","cat":"kernel","name":"k1","pid":0,"tid":7,"ts":12,"dur":2,"args":{"correlation":7}},
            {"ph":"X","cat":"kernel","name":"k2","pid":0,"tid":7,"ts":15,"dur":2,"args":{"correlation":7}},
            {"ph":"X","cat":"kernel","name":"k3","pid":0,"tid":8,"ts":13,"dur":2,"args":{"correlation":7}}
        ]"#,
        );
        let c = correlate(&trace);
        assert_eq!(c.unattributed, 0);
        for (kernel, op) in launch_names(&trace, &c) {
            assert_eq!(op.as_deref(), Some("CUDAGraph::replay"), "{kernel}");
        }
    }
}
