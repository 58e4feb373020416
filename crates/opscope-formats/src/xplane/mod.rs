//! XPlane (`*.xplane.pb`), the TensorFlow/JAX profiler's XSpace protobuf: each plane
//! (`/host:CPU`, `/device:GPU:N`, …) becomes a process, each line a thread or GPU stream
//! track, each event a slice with its stats as args. Times are absolute: a line's
//! `timestamp_ns` plus the event's `offset_ps`, plus the profile's start time where the
//! profiler normalised them.

mod derived;
mod derived_gpu;
pub(crate) mod kinds;
mod proto;
pub mod threads;

use std::collections::HashMap;

use opscope_model::args::ArgValue;
use opscope_model::{
    ArgsId, ClockDomain, DeviceKind, LinearTransform, SliceKind, Source, SourceId, Trace, TrackKind,
};
use prost::Message;

use crate::error::ImportError;
use proto::{XPlane, XSpaceRest, XStat};

/// Whether `path` names an XPlane file.
/// XSpace protobufs (`*.xplane.pb`, as TensorFlow, JAX and PyTorch/XLA profilers write
/// them) in the registry: told from Perfetto, which opens the same way, by their name.
pub struct XPlaneFormat;

impl crate::importer::Importer for XPlaneFormat {
    fn name(&self) -> &'static str {
        "xplane"
    }

    fn looks_for(&self) -> &'static str {
        ".xplane.pb"
    }

    /// The JAX and TensorFlow profilers write `<host>.trace.json.gz` beside
    /// `<host>.xplane.pb`: the same events, converted.
    fn has_a_copy_in(
        &self,
        path: &std::path::Path,
        exists: &dyn Fn(&std::path::Path) -> bool,
    ) -> bool {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        name.strip_suffix(".trace.json.gz")
            .is_some_and(|host| exists(&path.with_file_name(format!("{host}.xplane.pb"))))
    }

    fn claims_name(&self, name: &str) -> bool {
        name.ends_with(".xplane.pb")
    }

    fn claims_bytes(&self, path: &str, _head: &[u8]) -> bool {
        is_xplane_path(path)
    }

    fn bytes_importer(&self) -> Option<crate::importer::BytesImporter> {
        Some(import)
    }
}

pub fn is_xplane_path(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    lower.ends_with(".xplane.pb") || lower.ends_with(".xplane.pb.gz")
}

/// Whether `bytes`, whole, are an XSpace rather than a Perfetto trace: both are a
/// protobuf of repeated field 1, so it takes the first plane decoding as a named
/// XPlane with lines or metadata (a Perfetto packet read as one fails on its wire types
/// or has neither). For input with no name to go by: standard input, a pipe.
pub fn looks_like_xspace(bytes: &[u8]) -> bool {
    let Ok(ranges) = plane_ranges(bytes, "") else {
        return false;
    };
    let Some(&(start, end)) = ranges.first() else {
        return false;
    };
    XPlane::decode(&bytes[start..end]).is_ok_and(|plane| {
        !plane.name.is_empty() && (!plane.lines.is_empty() || !plane.event_metadata.is_empty())
    })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The byte ranges of the planes of an XSpace.
fn plane_ranges(bytes: &[u8], path: &str) -> Result<Vec<(usize, usize)>, ImportError> {
    let syntax = |offset: usize, message: &str| ImportError::Syntax {
        path: path.to_string(),
        offset: offset as u64,
        message: message.to_string(),
    };
    let mut ranges = Vec::new();
    let mut pos = 0usize;
    while pos < bytes.len() {
        let start = pos;
        let mut buf = &bytes[pos..];
        let before = buf.len();
        let key = prost::encoding::decode_varint(&mut buf).map_err(|_| {
            syntax(
                start,
                "a field key that does not end: a corrupt XPlane file",
            )
        })?;
        let (field, wire) = (key >> 3, key & 7);
        let value_start = pos + (before - buf.len());
        pos = match wire {
            0 => {
                prost::encoding::decode_varint(&mut buf)
                    .map_err(|_| syntax(value_start, "a number that does not end"))?;
                pos + (before - buf.len())
            }
            1 => value_start + 8,
            5 => value_start + 4,
            2 => {
                let len = prost::encoding::decode_varint(&mut buf)
                    .map_err(|_| syntax(value_start, "a length that does not end"))?;
                let data = pos + (before - buf.len());
                let end = usize::try_from(len)
                    .ok()
                    .and_then(|l| data.checked_add(l))
                    .filter(|&e| e <= bytes.len())
                    .ok_or_else(|| {
                        syntax(
                            start,
                            "a field longer than the file: the file looks truncated",
                        )
                    })?;
                if field == u64::from(proto::XSPACE_PLANES) {
                    ranges.push((data, end));
                }
                end
            }
            _ => {
                return Err(syntax(
                    start,
                    "an unknown wire type: this is not an XPlane file",
                ))
            }
        };
        if pos > bytes.len() {
            return Err(syntax(start, "a field cut off by the end of the file"));
        }
    }
    Ok(ranges)
}

/// Imports an XSpace as a new source. Planes that fail to decode are reported by their
/// offset; the planes before them stay in `trace`.
pub fn import(bytes: &[u8], path: &str, trace: &mut Trace) -> Result<SourceId, ImportError> {
    let ranges = plane_ranges(bytes, path)?;
    let rest = XSpaceRest::decode(bytes).map_err(|e| ImportError::Syntax {
        path: path.to_string(),
        offset: 0,
        message: format!("not an XSpace protobuf ({e})"),
    })?;
    let mut planes = Vec::with_capacity(ranges.len());
    let mut failure = None;
    for &(start, end) in &ranges {
        match XPlane::decode(&bytes[start..end]) {
            Ok(plane) => planes.push(plane),
            Err(e) => {
                failure = Some(ImportError::Syntax {
                    path: path.to_string(),
                    offset: start as u64,
                    message: format!("a plane that does not decode ({e})"),
                });
                break;
            }
        }
    }
    let start_ns = profile_start_ns(&planes);
    let clock_name = trace.intern("xplane");
    let clock = trace.add_clock(ClockDomain {
        name: clock_name,
        to_global: LinearTransform::IDENTITY,
        // XPlane times are Unix nanoseconds.
        unix_offset_ns: Some(0),
    });
    let host = rest.hostnames.first().map(|h| trace.intern(&text(h)));
    let source = trace.add_source(Source {
        path: path.to_string(),
        format: crate::importer::Importer::name(&XPlaneFormat).into(),
        clock,
        host,
        rank: None,
        world_size: None,
        metadata: ArgsId::NONE,
    });
    for (index, plane) in planes.iter().enumerate() {
        import_plane(trace, source, index, plane, start_ns);
    }
    trace.finish();
    match failure {
        Some(e) => Err(e),
        None => Ok(source),
    }
}

/// `profile_start_time` of the `Task Environment` plane, in Unix ns.
fn profile_start_ns(planes: &[XPlane]) -> Option<i64> {
    let plane = planes.iter().find(|p| p.name == b"Task Environment")?;
    plane.stats.iter().find_map(|stat| {
        let name = &plane.stat_metadata.get(&stat.metadata_id)?.name;
        (name == b"profile_start_time").then(|| {
            stat.uint64_value
                .and_then(|v| i64::try_from(v).ok())
                .or(stat.int64_value)
        })?
    })
}

/// `/device:GPU:3` → (GPU, 3).
fn plane_device(name: &str) -> Option<(DeviceKind, u32)> {
    let rest = name.strip_prefix("/device:")?;
    let (kind, index) = rest.split_once(':')?;
    let kind = match kind {
        "GPU" => DeviceKind::Gpu,
        "TPU" => DeviceKind::Tpu,
        _ => DeviceKind::Other,
    };
    Some((kind, index.parse().ok()?))
}

fn import_plane(
    trace: &mut Trace,
    source: SourceId,
    index: usize,
    plane: &XPlane,
    start_ns: Option<i64>,
) {
    if plane.lines.iter().all(|l| l.events.is_empty()) {
        return;
    }
    let plane_name = text(&plane.name);
    let process = trace.process(source, index as i64 + 1);
    let name = trace.intern(&plane_name);
    trace.processes[process.index()].name = Some(name);
    let device = plane_device(&plane_name).map(|(kind, i)| trace.device(source, kind, i));
    trace.processes[process.index()].device = device;
    let stat_names: HashMap<i64, String> = plane
        .stat_metadata
        .iter()
        .map(|(id, m)| (*id, text(&m.name)))
        .collect();
    let event_names: HashMap<i64, String> = plane
        .event_metadata
        .iter()
        .map(|(id, m)| {
            let shown = if m.display_name.is_empty() {
                &m.name
            } else {
                &m.display_name
            };
            (*id, text(shown))
        })
        .collect();
    let category = trace.intern(if device.is_some() {
        "xplane_device"
    } else {
        "xplane_host"
    });
    let tensor_core = derived::derives_from_stats(&plane_name);
    for line in &plane.lines {
        if line.events.is_empty() {
            continue;
        }
        let line_name = text(if line.display_name.is_empty() {
            &line.name
        } else {
            &line.display_name
        });
        // xprof's trace viewer draws no async-ops line of a TensorCore (its events
        // still make the derived lines), and names each of its steps by its number.
        if tensor_core && line_name == ASYNC_XLA_OPS {
            continue;
        }
        let step_names = tensor_core && line_name == "Steps";
        let step_num = stat_id(&stat_names, "step_num");
        let hlo_op = stat_id(&stat_names, "hlo_op");
        let thread = trace.thread(process, line.id);
        let line_str = trace.intern(&line_name);
        trace.threads[thread.index()].name = Some(line_str);
        let on_device = device.is_some();
        let track = trace.thread_track(
            thread,
            if on_device {
                TrackKind::GpuStream
            } else {
                TrackKind::Thread
            },
        );
        trace.tracks[track.index()].device = device;
        let base = line_base(line, start_ns);
        for (index, event) in line.events.iter().enumerate() {
            let Some(offset_ps) = event.offset_ps else {
                // Aggregated events (`num_occurrences`) have no time.
                trace.repairs.unsupported_events += 1;
                continue;
            };
            let name_text = if step_names {
                // Its `step_num`, else its place on the line.
                let number = event
                    .stats
                    .iter()
                    .find(|st| Some(st.metadata_id) == step_num)
                    .and_then(stat_int)
                    .unwrap_or(index as i64);
                number.to_string()
            } else {
                event_names
                    .get(&event.metadata_id)
                    .cloned()
                    .unwrap_or_default()
            };
            let metadata = plane.event_metadata.get(&event.metadata_id);
            let of_its_kind = metadata.map(|m| m.stats.as_slice()).unwrap_or_default();
            let has = |stat: Option<i64>| {
                stat.is_some()
                    && (event.stats.iter().chain(of_its_kind))
                        .any(|st| Some(st.metadata_id) == stat)
            };
            let full_name = metadata.map(|m| text(&m.name));
            let kind = kinds::event_kind(&kinds::Event {
                on_device,
                line: &line_name,
                name: &name_text,
                full_name: full_name.as_deref().unwrap_or(&name_text),
                runs_hlo_op: has(hlo_op),
                marks_step: has(step_num),
            });
            let name = trace.intern(&name_text);
            let mut entries: Vec<(opscope_model::StrId, ArgValue)> = Vec::new();
            if let Some((node, op)) = kinds::tf_op(&name_text).filter(|_| kind == SliceKind::Op) {
                let (k1, v1) = (trace.intern("name"), trace.intern(node));
                let (k2, v2) = (trace.intern("op"), trace.intern(op));
                entries.push((k1, ArgValue::Str(v1)));
                entries.push((k2, ArgValue::Str(v2)));
            }
            for stat in &event.stats {
                if let Some(entry) = stat_arg(trace, &stat_names, stat) {
                    // `memcpy_details: "size:112 dest:4 async:0"`: the size is the
                    // copy's bytes, under the key other formats use.
                    if let ArgValue::Str(details) = entry.1 {
                        if trace.str(entry.0) == "memcpy_details" {
                            if let Some(bytes) = detail_number(trace.str(details), "size") {
                                let key = trace.intern("bytes");
                                entries.push((key, ArgValue::Int(bytes)));
                            }
                        }
                    }
                    entries.push(entry);
                }
            }
            // TensorFlow's allocator events: instants in the keys the memory
            // analysis reads (Kineto's), the allocation's bytes signed.
            let allocation = match name_text.as_str() {
                "MemoryAllocation" if !on_device => Some(1),
                "MemoryDeallocation" if !on_device => Some(-1),
                _ => None,
            };
            if let Some(sign) = allocation {
                memory_args(trace, &mut entries, sign);
            }
            let args = trace.args.push_bag(&entries);
            if allocation.is_some() {
                trace.instants.push(opscope_model::events::InstantRow {
                    track,
                    ts: base.saturating_add(offset_ps.div_euclid(1000)),
                    name,
                    category,
                    kind: SliceKind::Alloc,
                    scope: opscope_model::events::InstantScope::Thread,
                    args,
                });
                continue;
            }
            trace.slices.push(opscope_model::events::SliceRow {
                track,
                ts: base.saturating_add(offset_ps.div_euclid(1000)),
                dur: event.duration_ps.max(0) / 1000,
                name,
                category,
                kind,
                args,
            });
        }
    }
    let target = DerivedTarget {
        process,
        device,
        category,
        // Times in ps from the first line's start: absolute ps overflow an i64.
        origin: plane.lines.first().map_or(0, |l| line_base(l, start_ns)),
    };
    if derived::derives_from_stats(&plane_name) {
        let lines = tpu_derived_lines(plane, &stat_names, start_ns, target.origin);
        add_derived_lines(trace, &target, lines);
    } else if derived_gpu::is_gpu_plane(&plane_name) {
        let lines = gpu_derived_lines(plane, &stat_names, start_ns, target.origin);
        add_derived_lines(trace, &target, lines);
    }
}

/// The line of a TensorCore plane that holds its asynchronous ops (collectives,
/// offloaded copies): xprof's trace viewer does not draw it.
const ASYNC_XLA_OPS: &str = "Async XLA Ops";

/// Line ids for the lines xprof derives, above any a profiler writes (xprof's own
/// derived ids start at 0xdeadbeef, and lines from there on are not streams).
const DERIVED_LINE_ID: i64 = 0xdead_beef;

/// Where a plane's derived lines go: its process and device, in ps from `origin` ns.
struct DerivedTarget {
    process: opscope_model::ProcessId,
    device: Option<opscope_model::DeviceId>,
    category: opscope_model::StrId,
    origin: i64,
}

/// The id of the stat metadata of this name.
fn stat_id(stat_names: &HashMap<i64, String>, name: &str) -> Option<i64> {
    stat_names
        .iter()
        .find(|(_, n)| *n == name)
        .map(|(id, _)| *id)
}

/// A stat's string value, or the name its reference points to.
fn stat_str(stat_names: &HashMap<i64, String>, stat: &XStat) -> Option<String> {
    if let Some(v) = &stat.str_value {
        Some(text(v))
    } else {
        stat.ref_value
            .and_then(|r| stat_names.get(&(r as i64)).cloned())
    }
}

fn stat_int(stat: &XStat) -> Option<i64> {
    stat.int64_value
        .or_else(|| stat.uint64_value.map(|v| v as i64))
}

/// The lines xprof's trace viewer derives from a GPU plane's kernel stats.
fn gpu_derived_lines(
    plane: &XPlane,
    stat_names: &HashMap<i64, String>,
    start_ns: Option<i64>,
    origin: i64,
) -> Vec<derived::DerivedLine> {
    let id = |name| stat_id(stat_names, name);
    let (kernel, hlo_op, hlo_module, program, tf_op_stat, group) = (
        id("kernel_details"),
        id("hlo_op"),
        id("hlo_module"),
        id("program_id"),
        id("tf_op"),
        id("group_id"),
    );
    struct Owned {
        begin_ps: i64,
        duration_ps: i64,
        kernel: bool,
        hlo_op: Option<String>,
        hlo_module: Option<String>,
        program_id: Option<i64>,
        tf_op: Option<String>,
        group_id: Option<i64>,
    }
    let mut owned: Vec<(i64, String, Vec<Owned>)> = Vec::new();
    for line in &plane.lines {
        let base = (line_base(line, start_ns) - origin).saturating_mul(1000);
        let mut events = Vec::new();
        for event in &line.events {
            let Some(offset_ps) = event.offset_ps else {
                continue;
            };
            let mut e = Owned {
                begin_ps: base.saturating_add(offset_ps),
                duration_ps: event.duration_ps.max(0),
                kernel: false,
                hlo_op: None,
                hlo_module: None,
                program_id: None,
                tf_op: None,
                group_id: None,
            };
            // Only the event's own stats: xprof reads no metadata stats here.
            for stat in &event.stats {
                let id = Some(stat.metadata_id);
                if id == kernel {
                    e.kernel = stat_str(stat_names, stat).is_some_and(|s| !s.is_empty());
                } else if id == hlo_op {
                    e.hlo_op = stat_str(stat_names, stat);
                } else if id == hlo_module {
                    e.hlo_module = stat_str(stat_names, stat);
                } else if id == program {
                    e.program_id = stat_int(stat);
                } else if id == tf_op_stat {
                    e.tf_op = stat_str(stat_names, stat);
                } else if id == group {
                    e.group_id = stat_int(stat);
                }
            }
            events.push(e);
        }
        let name = text(if line.display_name.is_empty() {
            &line.name
        } else {
            &line.display_name
        });
        owned.push((line.id, name, events));
    }
    let with_steps = !owned.iter().any(|(_, name, _)| name == "Steps");
    let lines = owned
        .iter()
        .map(|(id, name, events)| derived_gpu::GpuLine {
            id: *id,
            name,
            derived: *id >= DERIVED_LINE_ID,
            events: events
                .iter()
                .map(|e| derived_gpu::GpuEvent {
                    begin_ps: e.begin_ps,
                    duration_ps: e.duration_ps,
                    kernel: e.kernel,
                    hlo_op: e.hlo_op.as_deref(),
                    hlo_module: e.hlo_module.as_deref(),
                    program_id: e.program_id,
                    tf_op: e.tf_op.as_deref(),
                    group_id: e.group_id,
                })
                .collect(),
        })
        .collect();
    derived_gpu::derive_lines(lines, with_steps)
}

/// The groups [`tpu_derived_lines`] gives the events of each step, apart from any an
/// event names.
const STEP_GROUPS: i64 = i64::MIN / 2;

/// The lines xprof's trace viewer derives from a TensorCore plane's stats.
fn tpu_derived_lines(
    plane: &XPlane,
    stat_names: &HashMap<i64, String>,
    start_ns: Option<i64>,
    origin: i64,
) -> Vec<derived::DerivedLine> {
    let id_of = |name: &str| stat_id(stat_names, name);
    let (tf_op_stat, source, group, is_async) = (
        id_of("tf_op"),
        id_of("source"),
        id_of("group_id"),
        // xprof's is-async stat.
        id_of("_a"),
    );
    let str_of = |stat: &XStat| stat_str(stat_names, stat);
    let int_of = stat_int;
    struct Owned {
        begin_ps: i64,
        duration_ps: i64,
        metadata_id: i64,
        tf_op: Option<String>,
        source: Option<String>,
        group_id: Option<i64>,
        is_async: bool,
    }
    let mut owned = Vec::new();
    for line in &plane.lines {
        let base = (line_base(line, start_ns) - origin).saturating_mul(1000);
        for event in &line.events {
            let Some(offset_ps) = event.offset_ps else {
                continue;
            };
            let mut e = Owned {
                begin_ps: base.saturating_add(offset_ps),
                duration_ps: event.duration_ps.max(0),
                metadata_id: event.metadata_id,
                tf_op: None,
                source: None,
                group_id: None,
                is_async: false,
            };
            // The metadata's stats first: the event's own override them.
            let metadata_stats = plane
                .event_metadata
                .get(&event.metadata_id)
                .map_or(&[][..], |m| &m.stats[..]);
            for stat in metadata_stats.iter().chain(&event.stats) {
                let id = Some(stat.metadata_id);
                if id == tf_op_stat {
                    e.tf_op = str_of(stat);
                } else if id == source {
                    e.source = str_of(stat);
                } else if id == group {
                    e.group_id = int_of(stat);
                } else if id == is_async {
                    e.is_async = int_of(stat).is_some_and(|v| v != 0);
                }
            }
            owned.push(e);
        }
    }
    // xprof groups a TensorCore's events by its steps: an event within a step is of
    // that step's group, whatever group it says; one outside every step keeps its own.
    let mut steps: Vec<(i64, i64)> = plane
        .lines
        .iter()
        .filter(|l| l.name == b"Steps")
        .flat_map(|l| {
            let base = (line_base(l, start_ns) - origin).saturating_mul(1000);
            l.events.iter().filter_map(move |e| {
                let begin = base.saturating_add(e.offset_ps?);
                Some((begin, begin.saturating_add(e.duration_ps.max(0))))
            })
        })
        .collect();
    steps.sort_unstable();
    for e in &mut owned {
        let at = steps.partition_point(|s| s.0 <= e.begin_ps);
        if let Some(&(_, end)) = at.checked_sub(1).map(|k| &steps[k]) {
            if e.begin_ps < end {
                // Apart from the groups events name themselves.
                e.group_id = Some(STEP_GROUPS + at as i64);
            }
        }
    }
    let names: HashMap<i64, (String, String)> = plane
        .event_metadata
        .iter()
        .map(|(id, m)| (*id, (text(&m.name), text(&m.display_name))))
        .collect();
    let empty = (String::new(), String::new());
    let events = owned
        .iter()
        .map(|e| {
            let (name, display_name) = names.get(&e.metadata_id).unwrap_or(&empty);
            derived::SourceEvent {
                begin_ps: e.begin_ps,
                duration_ps: e.duration_ps,
                name,
                display_name,
                tf_op: e.tf_op.as_deref(),
                source: e.source.as_deref(),
                group_id: e.group_id,
                is_async: e.is_async,
            }
        })
        .collect();
    derived::derive_lines(events)
}

/// Adds a plane's derived lines as tracks of its process.
fn add_derived_lines(trace: &mut Trace, target: &DerivedTarget, lines: Vec<derived::DerivedLine>) {
    let DerivedTarget {
        process,
        device,
        category,
        origin,
    } = *target;
    for (index, line) in lines.into_iter().enumerate() {
        let thread = trace.thread(process, DERIVED_LINE_ID + index as i64);
        let line_name = trace.intern(&line.name);
        trace.threads[thread.index()].name = Some(line_name);
        let track = trace.thread_track(thread, TrackKind::GpuStream);
        trace.tracks[track.index()].device = device;
        // GPU planes have one "Framework Ops - from #N" per stream.
        let framework_ops = line.name.starts_with("Framework Ops");
        let steps = line.name == "Steps";
        for e in line.events {
            let mut entries: Vec<(opscope_model::StrId, ArgValue)> = Vec::new();
            let mut kind = if steps {
                SliceKind::Step
            } else {
                SliceKind::Annotation
            };
            if let Some(long) = &e.long_name {
                if framework_ops {
                    if let Some((node, op)) = kinds::tf_op(long) {
                        kind = SliceKind::Op;
                        let (k1, v1) = (trace.intern("name"), trace.intern(node));
                        let (k2, v2) = (trace.intern("op"), trace.intern(op));
                        entries.push((k1, ArgValue::Str(v1)));
                        entries.push((k2, ArgValue::Str(v2)));
                    }
                }
                let (k, v) = (trace.intern("long_name"), trace.intern(long));
                entries.push((k, ArgValue::Str(v)));
            }
            if let Some(g) = e.group_id {
                let k = trace.intern("group_id");
                entries.push((k, ArgValue::Int(g)));
            }
            let args = trace.args.push_bag(&entries);
            let name = trace.intern(&e.name);
            trace.slices.push(opscope_model::events::SliceRow {
                track,
                ts: origin.saturating_add(e.begin_ps.div_euclid(1000)),
                dur: (e.end_ps - e.begin_ps).max(0) / 1000,
                name,
                category,
                kind,
                args,
            });
        }
    }
}

/// A line's start in Unix ns: normalised planes count from the profile's start.
fn line_base(line: &proto::XLine, start_ns: Option<i64>) -> i64 {
    match start_ns {
        Some(start) if line.timestamp_ns < start / 2 => start.saturating_add(line.timestamp_ns),
        _ => line.timestamp_ns,
    }
}

/// Adds to a `MemoryAllocation` (`sign` 1) or `MemoryDeallocation` (-1) event's stats
/// the keys the memory analysis reads: `Bytes` (signed `allocation_bytes`), `Addr`,
/// `Total Allocated` (the allocator's `bytes_allocated` after it) and `Total Reserved`.
fn memory_args(trace: &mut Trace, entries: &mut Vec<(opscope_model::StrId, ArgValue)>, sign: i64) {
    let find = |trace: &Trace, entries: &[(opscope_model::StrId, ArgValue)], key: &str| {
        entries
            .iter()
            .find(|(k, _)| trace.str(*k) == key)
            .and_then(|(_, v)| v.as_i64())
    };
    let pairs = [
        ("allocation_bytes", "Bytes", sign),
        ("addr", "Addr", 1),
        ("bytes_allocated", "Total Allocated", 1),
        ("bytes_reserved", "Total Reserved", 1),
    ];
    for (from, to, factor) in pairs {
        if let Some(v) = find(trace, entries, from) {
            let key = trace.intern(to);
            entries.push((key, ArgValue::Int(v * factor)));
        }
    }
}

/// The number after `key:` in a `key:value key:value` details string.
pub(crate) fn detail_number(details: &str, key: &str) -> Option<i64> {
    details
        .split_whitespace()
        .find_map(|part| part.strip_prefix(key)?.strip_prefix(':')?.parse().ok())
}

/// One stat as an arg: its metadata's name and its value; `ref_value`s name a stat
/// metadata whose name is the value.
fn stat_arg(
    trace: &mut Trace,
    names: &HashMap<i64, String>,
    stat: &XStat,
) -> Option<(opscope_model::StrId, ArgValue)> {
    let key = names.get(&stat.metadata_id)?;
    let value = if let Some(v) = stat.int64_value {
        ArgValue::Int(v)
    } else if let Some(v) = stat.uint64_value {
        match i64::try_from(v) {
            Ok(i) => ArgValue::Int(i),
            Err(_) => ArgValue::UInt(v),
        }
    } else if let Some(v) = stat.double_value {
        ArgValue::Float(v)
    } else if let Some(v) = &stat.str_value {
        ArgValue::Str(trace.intern(&text(v)))
    } else if let Some(r) = stat.ref_value {
        let referenced = names.get(&(r as i64)).cloned().unwrap_or_default();
        ArgValue::Str(trace.intern(&referenced))
    } else {
        // Bytes values (serialised protos) are left out.
        return None;
    };
    let key = trace.intern(key);
    Some((key, value))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::io::Read;

    use opscope_model::{Trace, TrackId};

    /// ns from a JSON number of µs, exactly.
    fn ns(value: &serde_json::Value) -> i64 {
        crate::chrome::micros_to_ns_for_tests(&value.to_string()).unwrap()
    }

    /// (plane, line) → (name, start, duration) of each event, as xprof's trace viewer
    /// wrote them (times relative to its origin).
    type Lines = HashMap<(String, String), Vec<(String, i64, i64)>>;

    fn golden(path: &std::path::Path) -> Lines {
        let mut text = String::new();
        flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
            .read_to_string(&mut text)
            .unwrap();
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        let events = doc["traceEvents"].as_array().unwrap();
        let meta = |kind: &str| -> HashMap<(i64, i64), String> {
            events
                .iter()
                .filter(|e| e["ph"] == "M" && e["name"] == kind)
                .map(|e| {
                    let tid = e["tid"].as_i64().unwrap_or(0);
                    (
                        (e["pid"].as_i64().unwrap(), tid),
                        e["args"]["name"].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        };
        let (processes, threads) = (meta("process_name"), meta("thread_name"));
        let mut lines = Lines::new();
        for e in events.iter().filter(|e| e["ph"] == "X") {
            let (pid, tid) = (e["pid"].as_i64().unwrap(), e["tid"].as_i64().unwrap());
            let key = (processes[&(pid, 0)].clone(), threads[&(pid, tid)].clone());
            lines.entry(key).or_default().push((
                e["name"].as_str().unwrap().to_string(),
                ns(&e["ts"]),
                ns(&e["dur"]),
            ));
        }
        lines
    }

    /// Ours: slices with a duration (xprof shows zero-length events as instants).
    fn ours(trace: &Trace) -> Lines {
        let mut lines = Lines::new();
        for (t, track) in trace.tracks.iter().enumerate() {
            let (Some(p), Some(th)) = (track.process, track.thread) else {
                continue;
            };
            let plane = trace
                .str(trace.processes[p.index()].name.unwrap())
                .to_string();
            let line = trace
                .str(trace.threads[th.index()].name.unwrap())
                .to_string();
            for i in trace.track_slices(TrackId(t as u32)) {
                if trace.slices.dur[i] > 0 {
                    lines
                        .entry((plane.clone(), line.clone()))
                        .or_default()
                        .push((
                            trace.str(trace.slices.name[i]).to_string(),
                            trace.slices.ts[i],
                            trace.slices.dur[i],
                        ));
                }
            }
        }
        lines
    }

    /// Shared XPlanes (under `traces/xplane`) with the directory of xprof's conversion of
    /// each (under `traces/xplane/xprof-golden`).
    const GOLDEN_PAIRS: [(&str, &str); 2] = [
        (
            "generated-here/keras-cpu-tf2.21/vm.xplane.pb",
            "keras-cpu-tf2.21",
        ),
        (
            "GPU-multi-worker/34.83.195.179_6003.xplane.pb",
            "GPU-multi-worker",
        ),
    ];

    /// The trace in the file at `path`.
    fn load(path: &std::path::Path) -> Trace {
        let bytes = std::fs::read(path).unwrap();
        let mut trace = Trace::new();
        crate::import_bytes(&bytes, &path.display().to_string(), &mut trace).unwrap();
        trace
    }

    /// Every event of xprof's own conversion (its `trace_viewer` output, 2.24.2) is in
    /// ours, at the same nanosecond, except the spans xprof makes from
    /// `ThreadpoolListener::StartRegion`/`StopRegion` instant pairs (one per pair).
    #[test]
    fn events_match_xprof_trace_viewer() {
        let Some(shared) = crate::shared_data::shared() else {
            return;
        };
        for (file, golden_dir) in GOLDEN_PAIRS {
            let path = shared.join("traces/xplane").join(file);
            let trace = load(&path);
            let want = golden(
                &shared
                    .join("traces/xplane/xprof-golden")
                    .join(golden_dir)
                    .join("trace_viewer.json.gz"),
            );
            let got = ours(&trace);
            // xprof counts from its own origin: find it from the python line.
            let (key, gl) = want
                .iter()
                .find(|(k, _)| k.1.starts_with("python"))
                .unwrap();
            let first_ours = got[key].iter().min_by_key(|e| e.1).unwrap();
            let first_gold = gl
                .iter()
                .filter(|e| e.0 == first_ours.0)
                .min_by_key(|e| e.1)
                .unwrap();
            let origin = first_ours.1 - first_gold.1;
            let (mut total, mut matched) = (0, 0);
            for (key, events) in &want {
                let mine = got
                    .get(key)
                    .unwrap_or_else(|| panic!("{file}: no line {key:?}"));
                let mut index: HashMap<(&str, i64, i64), usize> = HashMap::new();
                for e in mine {
                    *index.entry((e.0.as_str(), e.1, e.2)).or_default() += 1;
                }
                let mut missing = 0;
                for e in events {
                    total += 1;
                    match index.get_mut(&(e.0.as_str(), e.1 + origin, e.2)) {
                        Some(n) if *n > 0 => {
                            *n -= 1;
                            matched += 1;
                        }
                        _ => missing += 1,
                    }
                }
                let regions = trace
                    .slices
                    .name
                    .iter()
                    .zip(&trace.slices.track)
                    .filter(|(n, t)| {
                        trace.str(**n) == "ThreadpoolListener::StartRegion" && {
                            let track = &trace.tracks[**t as usize];
                            let th = track
                                .thread
                                .map(|th| trace.str(trace.threads[th.index()].name.unwrap()));
                            th == Some(key.1.as_str())
                        }
                    })
                    .count();
                assert_eq!(
                    missing, regions,
                    "{file} {key:?}: events of xprof's not in ours"
                );
            }
            assert!(matched > 20_000, "{file}: {matched} of {total}");
        }
    }

    /// Kinds of the slices of `trace`, by (plane, line, name): each with how many.
    fn kinds_by_event(
        trace: &Trace,
    ) -> HashMap<(String, String, String), Vec<opscope_model::SliceKind>> {
        let mut kinds: HashMap<_, Vec<opscope_model::SliceKind>> = HashMap::new();
        for i in 0..trace.slices.len() {
            let track = &trace.tracks[trace.slices.track[i] as usize];
            let (Some(p), Some(th)) = (track.process, track.thread) else {
                continue;
            };
            let name_of = |n: Option<opscope_model::StrId>| n.map_or("", |n| trace.str(n));
            let key = (
                name_of(trace.processes[p.index()].name).to_string(),
                name_of(trace.threads[th.index()].name).to_string(),
                trace.str(trace.slices.name[i]).to_string(),
            );
            let kind = trace.slices.kind(i);
            let seen = kinds.entry(key).or_default();
            if !seen.contains(&kind) {
                seen.push(kind);
            }
        }
        kinds
    }

    /// xprof's trace viewer JSON of a profile (what TensorBoard and JAX write as
    /// `*.trace.json.gz`, with no categories) gives each event the kind its XPlane gives
    /// it: ops, Python functions, kernels and copies, annotations. (It gave every event
    /// the kind `other`: no ops, 0 % host busy.)
    #[test]
    fn xprofs_json_has_the_kinds_of_its_xplane() {
        let Some(shared) = crate::shared_data::shared() else {
            return;
        };
        for (file, golden_dir) in GOLDEN_PAIRS {
            let xplane = load(&shared.join("traces/xplane").join(file));
            let json = load(
                &shared
                    .join("traces/xplane/xprof-golden")
                    .join(golden_dir)
                    .join("trace_viewer.json.gz"),
            );
            assert!(json.unknown_categories.is_empty(), "{golden_dir}");
            let want = kinds_by_event(&xplane);
            let got = kinds_by_event(&json);
            let mut kinds_seen = std::collections::BTreeSet::new();
            for (key, kinds) in &got {
                // Events xprof made (the spans of `ThreadpoolListener` region pairs)
                // have no XPlane event to compare with.
                let Some(theirs) = want.get(key) else {
                    continue;
                };
                assert_eq!(kinds, theirs, "{golden_dir}: {key:?}");
                kinds_seen.extend(kinds.iter().map(|k| k.name()));
            }
            let expected: &[&str] = if golden_dir.starts_with("GPU") {
                &["annotation", "kernel", "memcpy_h2d", "op", "step"]
            } else {
                &["annotation", "op", "python_function"]
            };
            for kind in expected {
                assert!(kinds_seen.contains(kind), "{golden_dir}: {kinds_seen:?}");
            }
        }
    }

    #[test]
    fn details_numbers() {
        assert_eq!(
            super::detail_number("size:112 dest:4 async:0", "size"),
            Some(112)
        );
        assert_eq!(super::detail_number("dest:4 async:0", "size"), None);
        assert_eq!(super::detail_number("sizes:3", "size"), None);
    }

    /// A cut file is refused at the offset of the cut plane, without a panic; garbage is
    /// refused at byte 0.
    #[test]
    fn broken_files_fail_with_an_offset() {
        let Some(shared) = crate::shared_data::shared() else {
            return;
        };
        let path = shared.join("traces/xplane/GPU-multi-worker/34.83.195.179_6003.xplane.pb");
        let bytes = std::fs::read(&path).unwrap();
        for cut in [bytes.len() / 2, bytes.len() - 1, 3] {
            let mut trace = Trace::new();
            let err = super::import(&bytes[..cut], "x.xplane.pb", &mut trace).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains("x.xplane.pb") && text.contains("byte"),
                "{text}"
            );
        }
        let mut trace = Trace::new();
        let err =
            super::import(b"\xff\xff\xff\xff garbage", "g.xplane.pb", &mut trace).unwrap_err();
        assert!(err.to_string().contains("byte 0"), "{err}");
    }
}
