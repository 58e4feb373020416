//! TensorFlow `RunMetadata` (`run_meta`, the step stats a `Session.run` with
//! `FULL_TRACE` returns, and tfprof's input): each device of the step stats becomes a
//! process; host devices get a thread track per executor thread, GPU streams and the
//! memcpy lane get stream tracks. Each `node_stats` entry is one slice, typed by the
//! GraphDef when one is given, and carries TensorFlow's own memory figures for the node.
//!
//! A slice runs from `all_start` to `all_start + op_end_rel`: the span tfprof counts as
//! the node's execution time (`all_end_rel` adds the executor's post-processing and is
//! kept as an arg). Nanosecond fields are used when the file has them (TF ≥ 2.3).
//!
//! Ops of one executor thread need not nest: a GPU run gives every op `thread_id` 0,
//! and inter-op parallelism overlaps them. TensorFlow never runs an op inside another,
//! so each op keeps its whole interval and none becomes another's child: ops that
//! overlap one already on the thread's track go to async lanes of that thread.
//!
//! The GPU tracer writes some work twice: every kernel on its `stream:N` and again on
//! `stream:all`, every copy on its `stream:N` and again on `memcpy`. The repeats are
//! kept for viewers as `Other` slices, so device time counts each piece once. tfprof
//! charges an op with its `stream:all` entries only (TF 1.x left copies out of that
//! lane), so work on a `stream:N` that `stream:all` does not repeat names its node
//! under `uncharged_node` rather than `name`, the key that links work to its op.
//! So do the entries tfprof drops by name when the graph lacks them (the executor's
//! `_SOURCE`, `RecvTensor`, `*MEMCPY*`); a host one is no op either (kind `Other`).

pub mod graph;
mod proto;

use std::collections::{HashMap, HashSet};

use opscope_model::args::ArgValue;
use opscope_model::{
    ArgsId, ClockDomain, CopyDirection, DeviceKind, LinearTransform, ProcessId, SliceKind, Source,
    SourceId, StrId, ThreadId, Trace, TrackId, TrackKind,
};
use prost::Message;

use crate::error::ImportError;
use crate::run_metadata::graph::Graph;

/// Arg keys of an op's memory, in TensorFlow's own accounting (tfprof's columns); any
/// importer whose source measures per-op memory this way may set them.
pub mod memory_keys {
    pub const REQUESTED: &str = "requested_bytes";
    pub const PEAK: &str = "peak_bytes";
    pub const RESIDUAL: &str = "residual_bytes";
    pub const OUTPUT: &str = "output_bytes";
}

/// Whether `path` names a RunMetadata file (`run_meta`, `*.run_meta`,
/// `run_metadata*.pb`).
pub fn is_run_metadata_path(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path).to_ascii_lowercase();
    let name = name.strip_suffix(".gz").unwrap_or(&name);
    name == "run_meta"
        || name.ends_with(".run_meta")
        || name.starts_with("run_meta")
        || name.ends_with(".runmeta")
        || name.ends_with(".run_metadata.pb")
}

/// Where a step-stats device string runs: the device, and which lane of it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Placement {
    /// The device without its lane suffix (`/job:…/device:GPU:0`).
    base: String,
    device: Option<(DeviceKind, u32)>,
    lane: Lane,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Lane {
    /// Ops run by executor threads.
    Host,
    /// Kernels of one GPU stream.
    Stream(u32),
    /// TensorFlow's merged copy of all streams (what tfprof counts as accelerator time).
    AllStreams,
    Memcpy,
}

fn placement(device: &str) -> Placement {
    let lower = device.to_ascii_lowercase();
    let (base, lane) = if let Some(at) = lower.find("/stream:") {
        let rest = &lower[at + "/stream:".len()..];
        let lane = if rest == "all" {
            Lane::AllStreams
        } else {
            rest.parse().map_or(Lane::AllStreams, Lane::Stream)
        };
        (&device[..at], lane)
    } else if let Some(at) = lower.find("/memcpy") {
        (&device[..at], Lane::Memcpy)
    } else {
        (device, Lane::Host)
    };
    // `/device:GPU:0`, `/gpu:0`, `/job:…/device:CPU:0`.
    let last = base.rsplit('/').next().unwrap_or(base);
    let last = last.strip_prefix("device:").unwrap_or(last);
    let device = last.split_once(':').and_then(|(kind, index)| {
        let kind = match kind.to_ascii_lowercase().as_str() {
            "gpu" => DeviceKind::Gpu,
            "tpu" => DeviceKind::Tpu,
            "cpu" => return None,
            _ => DeviceKind::Other,
        };
        Some((kind, index.parse().ok()?))
    });
    Placement {
        base: base.to_string(),
        device,
        lane,
    }
}

/// `name = Op(inputs)` → `Op`.
fn label_op(label: &str) -> Option<&str> {
    let (_, rest) = label.split_once(" = ")?;
    let op = rest.split('(').next()?.trim();
    (!op.is_empty()).then_some(op)
}

fn copy_direction(text: &str) -> CopyDirection {
    let t = text.to_ascii_lowercase();
    if t.contains("htod") || t.contains("h2d") {
        CopyDirection::H2D
    } else if t.contains("dtoh") || t.contains("d2h") {
        CopyDirection::D2H
    } else if t.contains("dtod") || t.contains("d2d") {
        CopyDirection::D2D
    } else if t.contains("ptop") || t.contains("p2p") {
        CopyDirection::P2P
    } else {
        CopyDirection::Unknown
    }
}

/// Tracks of lanes that are not executor threads are told apart from thread ids by
/// living above this.
const LANE_TID_BASE: i64 = 1 << 40;

/// One entry of the step stats, as the GPU tracer repeats it on another lane: the
/// device, the node and the times.
type EntryKey<'a> = (&'a str, &'a [u8], i64, i64, i64, i64);

fn entry_key<'a>(base: &'a str, node: &'a proto::NodeExecStats) -> EntryKey<'a> {
    (
        base,
        &node.node_name,
        node.all_start_micros,
        node.all_start_nanos,
        node.op_end_rel_micros,
        node.op_end_rel_nanos,
    )
}

/// Which entries the GPU tracer wrote twice.
struct Repeats<'a> {
    /// Entries of the `stream:N` lanes.
    on_streams: HashSet<EntryKey<'a>>,
    /// Entries of the `stream:all` lanes.
    on_all_streams: HashSet<EntryKey<'a>>,
    /// Devices that have a `stream:all` lane.
    with_all_streams: HashSet<&'a str>,
}

impl<'a> Repeats<'a> {
    fn of(devices: &'a [(Placement, &'a proto::DeviceStepStats)]) -> Repeats<'a> {
        let mut repeats = Repeats {
            on_streams: HashSet::new(),
            on_all_streams: HashSet::new(),
            with_all_streams: HashSet::new(),
        };
        for (place, dev) in devices {
            let set = match place.lane {
                Lane::Stream(_) => &mut repeats.on_streams,
                Lane::AllStreams => {
                    repeats.with_all_streams.insert(&place.base);
                    &mut repeats.on_all_streams
                }
                Lane::Host | Lane::Memcpy => continue,
            };
            set.extend(dev.node_stats.iter().map(|n| entry_key(&place.base, n)));
        }
        repeats
    }

    /// Whether work on a `stream:N` counts as its node's accelerator time: when
    /// `stream:all` repeats it, or the device has no `stream:all`.
    fn charged(&self, base: &str, node: &proto::NodeExecStats) -> bool {
        !self.with_all_streams.contains(base)
            || self.on_all_streams.contains(&entry_key(base, node))
    }
}

/// An op run by an executor thread, until its lane is known.
struct HostOp {
    slice: u32,
    thread: ThreadId,
    track: TrackId,
}

/// Moves each op that overlaps an earlier op of its thread's track to the first async
/// lane of that thread where it overlaps nothing, so that every op keeps its whole
/// interval and no op nests in another.
fn spread_overlapping_ops(trace: &mut Trace, mut ops: Vec<HostOp>) {
    let s = &trace.slices;
    ops.sort_by_key(|o| {
        let i = o.slice as usize;
        (o.track, s.ts[i], std::cmp::Reverse(s.dur[i]), o.slice)
    });
    let lane_name = |trace: &mut Trace, thread: ThreadId| {
        let t = &trace.threads[thread.index()];
        let name = match t.name {
            Some(n) => format!("{} (overlapping ops)", trace.str(n)),
            None => format!("thread {} (overlapping ops)", t.tid),
        };
        trace.intern(&name)
    };
    let mut ends: Vec<i64> = Vec::new();
    let mut current = None;
    for op in ops {
        if current != Some(op.track) {
            current = Some(op.track);
            ends.clear();
        }
        let i = op.slice as usize;
        let (ts, end) = (trace.slices.ts[i], trace.slices.end(i));
        let lane = match ends.iter().position(|&e| e <= ts) {
            Some(lane) => lane,
            None => {
                ends.push(end);
                ends.len() - 1
            }
        };
        ends[lane] = end;
        if lane > 0 {
            let process: ProcessId = trace.threads[op.thread.index()].process;
            let name = lane_name(trace, op.thread);
            let track = trace.named_track(Some(process), TrackKind::Async, name, lane as u64);
            trace.slices.track[i] = track.0;
        }
    }
}

/// TensorFlow RunMetadata files (`run_meta`, tfprof's input) in the registry, each
/// with the GraphDef beside it (`graph.pbtxt`, `graph.pb`, or the one `*.pbtxt`,
/// `*.graphdef` there) that types its nodes.
pub struct RunMetadataFormat;

impl crate::importer::Importer for RunMetadataFormat {
    fn name(&self) -> &'static str {
        "tf-run-metadata"
    }

    fn looks_for(&self) -> &'static str {
        "run_meta"
    }

    fn claims_name(&self, name: &str) -> bool {
        is_run_metadata_path(name)
    }

    fn claims_bytes(&self, path: &str, _head: &[u8]) -> bool {
        is_run_metadata_path(path)
    }

    /// The RunMetadata, then the GraphDef files beside it, in name order: a changed
    /// graph is a changed input.
    fn files(&self, path: &std::path::Path) -> std::io::Result<Vec<std::path::PathBuf>> {
        // `run_meta` alone has the parent "", which cannot be listed.
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        let mut graphs: Vec<std::path::PathBuf> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| graph::is_graph_path(&p.to_string_lossy()))
            .collect();
        graphs.sort();
        let mut files = vec![path.to_path_buf()];
        files.extend(graphs);
        Ok(files)
    }

    fn bytes_importer(&self) -> Option<crate::importer::BytesImporter> {
        Some(|bytes, path, trace| import(bytes, path, None, trace))
    }

    fn import(
        &self,
        input: &crate::importer::Input,
        trace: &mut Trace,
    ) -> Option<Result<SourceId, ImportError>> {
        Some(import_files(input, trace))
    }
}

/// Imports one input from its files, as the registry read them.
fn import_files(
    input: &crate::importer::Input,
    trace: &mut Trace,
) -> Result<SourceId, ImportError> {
    let Some(((_, bytes), graphs)) = input.files.split_first() else {
        return Err(ImportError::UnknownFormat {
            path: input.shown.to_string(),
            message: "no RunMetadata file".into(),
        });
    };
    // `graph.pbtxt` or `graph.pb` when there, else the only candidate.
    let name_of = |shown: &str| shown.rsplit('/').next().unwrap_or(shown).to_string();
    let chosen = graphs
        .iter()
        .find(|(shown, _)| matches!(name_of(shown).as_str(), "graph.pbtxt" | "graph.pb"))
        .or(if graphs.len() == 1 {
            graphs.first()
        } else {
            None
        });
    let graph = match chosen {
        Some((shown, graph_bytes)) => Some(graph::parse(graph_bytes, shown)?),
        None => None,
    };
    import(bytes, input.shown, graph.as_ref(), trace)
}

/// Imports a RunMetadata as a new source. `graph` types the nodes: those it lacks
/// (the executor's `_SOURCE`, `_arg_*` feeds) are typed by their node name, as tfprof
/// does; with no graph, the op in the node's timeline label is used.
pub fn import(
    bytes: &[u8],
    path: &str,
    graph: Option<&Graph>,
    trace: &mut Trace,
) -> Result<SourceId, ImportError> {
    let meta = proto::RunMetadata::decode(bytes).map_err(|e| ImportError::Syntax {
        path: path.to_string(),
        offset: 0,
        message: format!("not a TensorFlow RunMetadata protobuf ({e})"),
    })?;
    let Some(step_stats) = meta.step_stats else {
        return Err(ImportError::UnknownFormat {
            path: path.to_string(),
            message: "a RunMetadata without step stats (was it run with FULL_TRACE?)".into(),
        });
    };
    let mut partition_graph = Graph::default();
    for g in &meta.partition_graphs {
        partition_graph.add_binary(g);
    }
    let types = graph.unwrap_or(&partition_graph);
    let graph_given = graph.is_some() || !meta.partition_graphs.is_empty();

    let clock_name = trace.intern("tensorflow");
    let clock = trace.add_clock(ClockDomain {
        name: clock_name,
        to_global: LinearTransform::IDENTITY,
        // Step stats are Unix time.
        unix_offset_ns: Some(0),
    });
    let source = trace.add_source(Source {
        path: path.to_string(),
        format: crate::importer::Importer::name(&RunMetadataFormat).into(),
        clock,
        host: None,
        rank: None,
        world_size: None,
        metadata: ArgsId::NONE,
    });
    let keys = Keys::new(trace);
    let mut processes: HashMap<String, opscope_model::ProcessId> = HashMap::new();
    let mut in_use_tracks: HashMap<String, opscope_model::TrackId> = HashMap::new();
    let allocators = trace.process(source, -1);
    let allocators_name = trace.intern("Allocators");
    trace.processes[allocators.index()].name = Some(allocators_name);

    let devices: Vec<(Placement, &proto::DeviceStepStats)> = step_stats
        .dev_stats
        .iter()
        .map(|dev| (placement(&String::from_utf8_lossy(&dev.device)), dev))
        .collect();
    let repeats = Repeats::of(&devices);
    let mut host_ops: Vec<HostOp> = Vec::new();
    for (place, dev) in &devices {
        let next_pid = processes.len() as i64;
        let process = *processes.entry(place.base.clone()).or_insert_with(|| {
            let p = trace.process(source, next_pid);
            let name = trace.intern(&place.base);
            trace.processes[p.index()].name = Some(name);
            if let Some((kind, index)) = place.device {
                let d = trace.device(source, kind, index);
                trace.processes[p.index()].device = Some(d);
            }
            p
        });
        let category = trace.intern(match place.lane {
            Lane::Host => "Op",
            Lane::Stream(_) | Lane::AllStreams => "stream",
            Lane::Memcpy => "memcpy",
        });
        for node in &dev.node_stats {
            if node.all_start_micros <= 0 && node.all_start_nanos <= 0 {
                // tfprof skips these too: a node with no start never ran.
                trace.repairs.unsupported_events += 1;
                continue;
            }
            let node_name = String::from_utf8_lossy(&node.node_name).into_owned();
            let label = String::from_utf8_lossy(&node.timeline_label).into_owned();
            // Stream entries are named `node:Op`.
            let (node_part, op_suffix) = match node_name.split_once(':') {
                Some((n, op)) => (n, Some(op)),
                None => (node_name.as_str(), None),
            };
            let op_type = if graph_given {
                types.op_type(node_part).unwrap_or(node_part).to_string()
            } else {
                label_op(&label)
                    .or(op_suffix)
                    .unwrap_or(node_part)
                    .to_string()
            };
            // Entries tfprof leaves out (`CreateRunMetadataNode`'s deny list, for names
            // the graph lacks): kept on the time line, charged to no op.
            let run_metadata_only = (!graph_given || types.op_type(node_part).is_none())
                && (node_part == "_SOURCE"
                    || node_part == "RecvTensor"
                    || node_part.contains("MEMCPY"));
            let (tid, kind) = match place.lane {
                Lane::Host if run_metadata_only => (i64::from(node.thread_id), SliceKind::Other),
                Lane::Host => (i64::from(node.thread_id), SliceKind::Op),
                // Repeats of the copies on the `stream:N` lanes.
                Lane::Memcpy if repeats.on_streams.contains(&entry_key(&place.base, node)) => {
                    (LANE_TID_BASE * 3, SliceKind::Other)
                }
                Lane::Stream(n) => {
                    let text = format!("{label} {node_name}").to_ascii_lowercase();
                    let kind = if text.contains("memcpy") {
                        SliceKind::Memcpy(copy_direction(&text))
                    } else if text.contains("memset") {
                        SliceKind::Memset
                    } else {
                        SliceKind::Kernel
                    };
                    (LANE_TID_BASE + i64::from(n), kind)
                }
                Lane::AllStreams => (LANE_TID_BASE * 2, SliceKind::Other),
                Lane::Memcpy => (
                    LANE_TID_BASE * 3,
                    SliceKind::Memcpy(copy_direction(&format!("{label} {node_name}"))),
                ),
            };
            let thread = trace.thread(process, tid);
            if trace.threads[thread.index()].name.is_none() {
                let name = match place.lane {
                    Lane::Host => dev
                        .thread_names
                        .get(&node.thread_id)
                        .map(|n| String::from_utf8_lossy(n).into_owned()),
                    Lane::Stream(n) => Some(format!("stream:{n}")),
                    Lane::AllStreams => Some("stream:all".into()),
                    Lane::Memcpy => Some("memcpy".into()),
                };
                if let Some(name) = name {
                    let name = trace.intern(&name);
                    trace.threads[thread.index()].name = Some(name);
                }
            }
            let track = trace.thread_track(
                thread,
                if place.lane == Lane::Host {
                    TrackKind::Thread
                } else {
                    TrackKind::GpuStream
                },
            );
            let nanos = node.all_start_nanos > 0;
            let ts = if nanos {
                node.all_start_nanos
            } else {
                node.all_start_micros.saturating_mul(1000)
            };
            let rel = |ns: i64, us: i64| if nanos { ns } else { us.saturating_mul(1000) };
            let dur = rel(node.op_end_rel_nanos, node.op_end_rel_micros).max(0);

            let mut entries: Vec<(StrId, ArgValue)> = Vec::with_capacity(10);
            let node_str = trace.intern(node_part);
            let op_str = trace.intern(&op_type);
            let charged = !run_metadata_only
                && match place.lane {
                    Lane::Stream(_) => repeats.charged(&place.base, node),
                    _ => true,
                };
            entries.push((
                if charged {
                    keys.name
                } else {
                    keys.uncharged_node
                },
                ArgValue::Str(node_str),
            ));
            entries.push((keys.op, ArgValue::Str(op_str)));
            if let Some(format) = types.data_format(node_part) {
                let format = trace.intern(format);
                entries.push((keys.data_format, ArgValue::Str(format)));
            }
            if !label.is_empty() {
                entries.push((keys.label, ArgValue::Str(trace.intern(&label))));
            }
            entries.push((
                keys.op_start_rel,
                ArgValue::Int(rel(node.op_start_rel_nanos, node.op_start_rel_micros)),
            ));
            entries.push((
                keys.all_end_rel,
                ArgValue::Int(rel(node.all_end_rel_nanos, node.all_end_rel_micros)),
            ));
            if place.lane == Lane::Host {
                entries.extend(node_memory(&keys, node));
                for mem in &node.memory {
                    if mem.allocator_bytes_in_use <= 0 {
                        continue;
                    }
                    let allocator = String::from_utf8_lossy(&mem.allocator_name).into_owned();
                    let counter = *in_use_tracks.entry(allocator.clone()).or_insert_with(|| {
                        let name = trace.intern(&allocator);
                        trace.named_track(Some(allocators), TrackKind::Counter, name, 0)
                    });
                    trace
                        .counters
                        .push(counter, ts + dur, mem.allocator_bytes_in_use as f64);
                }
            }
            let mut w = trace.args.writer();
            for (k, v) in entries {
                w.push(k, v);
            }
            let args = w.finish();
            let name = if place.lane == Lane::Host {
                op_str
            } else {
                // Kernels and copies are named by what the stream ran.
                trace.intern(op_suffix.unwrap_or(if label.is_empty() {
                    op_type.as_str()
                } else {
                    label.as_str()
                }))
            };
            let slice = trace.slices.push(opscope_model::events::SliceRow {
                track,
                ts,
                dur,
                name,
                category,
                kind,
                args,
            });
            if place.lane == Lane::Host {
                host_ops.push(HostOp {
                    slice,
                    thread,
                    track,
                });
            }
        }
    }
    spread_overlapping_ops(trace, host_ops);
    trace.finish();
    Ok(source)
}

struct Keys {
    name: StrId,
    /// The node of device work that TensorFlow did not charge to it.
    uncharged_node: StrId,
    op: StrId,
    data_format: StrId,
    label: StrId,
    op_start_rel: StrId,
    all_end_rel: StrId,
    requested: StrId,
    peak: StrId,
    residual: StrId,
    output: StrId,
}

impl Keys {
    fn new(trace: &mut Trace) -> Keys {
        Keys {
            name: trace.intern("name"),
            uncharged_node: trace.intern("uncharged_node"),
            op: trace.intern("op"),
            data_format: trace.intern("data_format"),
            label: trace.intern("label"),
            op_start_rel: trace.intern("op_start_rel_ns"),
            all_end_rel: trace.intern("all_end_rel_ns"),
            requested: trace.intern(memory_keys::REQUESTED),
            peak: trace.intern(memory_keys::PEAK),
            residual: trace.intern(memory_keys::RESIDUAL),
            output: trace.intern(memory_keys::OUTPUT),
        }
    }
}

/// A node's memory in TensorFlow's accounting: what its allocators report for it,
/// plus the temporary and persistent memory the kernel declared, and its outputs.
fn node_memory(keys: &Keys, node: &proto::NodeExecStats) -> Vec<(StrId, ArgValue)> {
    let (mut requested, mut peak, mut residual) = (0i64, 0i64, 0i64);
    for mem in &node.memory {
        requested += mem.total_bytes;
        peak += mem.peak_bytes;
        residual += mem.live_bytes;
    }
    if let Some(stats) = &node.memory_stats {
        let declared = stats.temp_memory_size + stats.persistent_memory_size;
        requested += declared;
        peak += declared;
        residual += stats.persistent_memory_size;
    }
    let output: i64 = node
        .output
        .iter()
        .filter_map(|o| {
            o.tensor_description
                .as_ref()?
                .allocation_description
                .as_ref()
        })
        .map(|a| a.allocated_bytes.max(a.requested_bytes))
        .sum();
    let has_memory = !node.memory.is_empty() || node.memory_stats.is_some();
    let mut out = Vec::new();
    if has_memory {
        out.push((keys.requested, ArgValue::Int(requested)));
        out.push((keys.peak, ArgValue::Int(peak)));
        out.push((keys.residual, ArgValue::Int(residual)));
    }
    if !node.output.is_empty() {
        out.push((keys.output, ArgValue::Int(output)));
    }
    out
}

#[cfg(test)]
mod tests;
