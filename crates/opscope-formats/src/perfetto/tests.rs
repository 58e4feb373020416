//! Tests of the Perfetto exporter and importer: a hand-built trace survives export and
//! import unchanged, the exported bytes decode with the official protos (through the
//! Python `perfetto` package), generic TrackEvent traces import, and bad input gives an
//! error or a counted repair, never a panic.

use std::collections::HashMap;
use std::process::Command;

use opscope_model::events::{InstantRow, SliceRow};
use opscope_model::{
    ArgValue, ArgsId, ClockDomain, CopyDirection, DeviceKind, InstantScope, LinearTransform,
    SliceKind, Source, SourceId, StrId, Trace, TrackId, TrackKind,
};
use prost::Message;
use serde_json::{json, Value};

use super::proto::{self, *};
use super::{export, export_with, import, ExportOptions, Marker, MonotonicClocks};
use crate::roundtrip_tests::{args_text, event_lines};
use crate::ImportError;

fn new_trace() -> (Trace, SourceId) {
    let mut t = Trace::new();
    let name = t.intern("test");
    let clock = t.add_clock(ClockDomain {
        name,
        to_global: LinearTransform::IDENTITY,
        unix_offset_ns: None,
    });
    let source = t.add_source(Source {
        path: "test".into(),
        format: "test".into(),
        clock,
        host: None,
        rank: None,
        world_size: None,
        metadata: ArgsId::NONE,
    });
    (t, source)
}

struct Slice<'a> {
    track: TrackId,
    ts: i64,
    dur: i64,
    name: &'a str,
    cat: &'a str,
    kind: SliceKind,
}

fn slice(t: &mut Trace, s: Slice<'_>, args: ArgsId) -> u32 {
    let name = t.intern(s.name);
    let category = t.intern(s.cat);
    t.slices.push(SliceRow {
        track: s.track,
        ts: s.ts,
        dur: s.dur,
        name,
        category,
        kind: s.kind,
        args,
    })
}

/// Two processes (a CPU one and a GPU device), a thread with nested slices carrying
/// args of every type, a GPU stream whose slices overlap, an async track, a counter
/// track, instants and two flows.
pub(super) fn sample_trace() -> Trace {
    let (mut t, src) = new_trace();
    let cpu = t.process(src, 4242);
    let python = t.intern("python3 train.py");
    let labels = t.intern("rank 0");
    t.processes[cpu.index()].name = Some(python);
    t.processes[cpu.index()].labels = Some(labels);
    t.processes[cpu.index()].sort_index = Some(-3);
    let main = t.thread(cpu, 4243);
    let main_name = t.intern("MainThread");
    t.threads[main.index()].name = Some(main_name);
    t.threads[main.index()].sort_index = Some(1);
    let main_track = t.thread_track(main, TrackKind::Thread);

    let gpu = t.process(src, 0);
    let device = t.device(src, DeviceKind::Gpu, 0);
    let model = t.intern("Tesla V100; 16GB %");
    t.devices[device.index()].name = Some(model);
    t.processes[gpu.index()].device = Some(device);
    let gpu_name = t.intern("GPU 0");
    t.processes[gpu.index()].name = Some(gpu_name);
    let stream = t.thread(gpu, 7);
    let stream_name = t.intern("stream 7");
    t.threads[stream.index()].name = Some(stream_name);
    let stream_track = t.thread_track(stream, TrackKind::GpuStream);

    let lane_name = t.intern("nccl:all_reduce");
    let async_track = t.named_track(Some(cpu), TrackKind::Async, lane_name, 1);
    let mem_name = t.intern("allocated bytes");
    let counter_track = t.named_track(Some(cpu), TrackKind::Counter, mem_name, 0);

    // Args of every type.
    let keys: Vec<StrId> = ["none", "flag", "n", "big", "x", "s", "shape", "neg"]
        .iter()
        .map(|k| t.intern(k))
        .collect();
    let text = t.intern("float32");
    let shape = t.intern("[[2,3],[3,4]]");
    let mut w = t.args.writer();
    w.push(keys[0], ArgValue::Null);
    w.push(keys[1], ArgValue::Bool(true));
    w.push(keys[2], ArgValue::Int(i64::MAX));
    w.push(keys[3], ArgValue::UInt(u64::MAX));
    w.push(keys[4], ArgValue::Float(1.5e-300));
    w.push(keys[5], ArgValue::Str(text));
    w.push(keys[6], ArgValue::Json(shape));
    w.push(keys[7], ArgValue::Int(-7));
    let mm_args = w.finish();
    let mut w = t.args.writer();
    w.push(keys[1], ArgValue::Bool(false));
    let launch_args = w.finish();

    let step = Slice {
        track: main_track,
        ts: 1_000,
        dur: 9_000,
        name: "ProfilerStep#1",
        cat: "user_annotation",
        kind: SliceKind::Step,
    };
    let step = slice(&mut t, step, ArgsId::NONE);
    let mm = Slice {
        track: main_track,
        ts: 1_500,
        dur: 1_500,
        name: "aten::mm",
        cat: "cpu_op",
        kind: SliceKind::Op,
    };
    slice(&mut t, mm, mm_args);
    // Starts when the previous one ends: its end must come first.
    let launch = Slice {
        track: main_track,
        ts: 3_000,
        dur: 1_000,
        name: "cudaLaunchKernel",
        cat: "cuda_runtime",
        kind: SliceKind::Runtime,
    };
    let launch = slice(&mut t, launch, launch_args);
    let mark = Slice {
        track: main_track,
        ts: 4_000,
        dur: 0,
        name: "zero",
        cat: "",
        kind: SliceKind::Other,
    };
    slice(&mut t, mark, ArgsId::NONE);
    let kernel = Slice {
        track: stream_track,
        ts: 3_500,
        dur: 2_500,
        name: "volta_sgemm",
        cat: "kernel",
        kind: SliceKind::Kernel,
    };
    let kernel = slice(&mut t, kernel, ArgsId::NONE);
    let copy = Slice {
        track: stream_track,
        ts: 6_000,
        dur: 500,
        name: "Memcpy HtoD",
        cat: "gpu_memcpy",
        kind: SliceKind::Memcpy(CopyDirection::H2D),
    };
    slice(&mut t, copy, ArgsId::NONE);
    // Overlaps the copy without nesting: needs a second lane.
    let late = Slice {
        track: stream_track,
        ts: 6_400,
        dur: 600,
        name: "volta_sgemm",
        cat: "kernel",
        kind: SliceKind::Kernel,
    };
    let late = slice(&mut t, late, ArgsId::NONE);
    for (ts, dur) in [(2_000, 3_000), (2_500, 3_000), (6_000, 10)] {
        let s = Slice {
            track: async_track,
            ts,
            dur,
            name: "allreduce",
            cat: "collective",
            kind: SliceKind::Collective,
        };
        slice(&mut t, s, ArgsId::NONE);
    }
    for (ts, v) in [(1_000, 1.5), (2_000, 2.5e9), (3_000, -1.0)] {
        t.counters.push(counter_track, ts, v);
    }

    let alloc = t.intern("[memory]");
    let bytes_key = t.intern("Bytes");
    let mut w = t.args.writer();
    w.push(bytes_key, ArgValue::Int(4096));
    let alloc_args = w.finish();
    t.instants.push(InstantRow {
        track: main_track,
        ts: 2_000,
        name: alloc,
        category: StrId::EMPTY,
        kind: SliceKind::Alloc,
        scope: InstantScope::Thread,
        args: alloc_args,
    });
    let sync = t.intern("sync point");
    t.instants.push(InstantRow {
        track: main_track,
        ts: 5_000,
        name: sync,
        category: StrId::EMPTY,
        kind: SliceKind::Other,
        scope: InstantScope::Process,
        args: ArgsId::NONE,
    });

    let ac2g = t.intern("ac2g");
    t.flows.push(launch, kernel, ac2g, ac2g);
    t.flows.push(step, late, StrId::EMPTY, StrId::EMPTY);
    add_samples(&mut t, main_track);
    t.finish();
    assert_eq!(t.repairs.total(), 0);
    t
}

/// Sampled stacks on `track`: two stacks sharing their outer frame, a sample outside
/// any frame, and each state bit.
fn add_samples(t: &mut Trace, track: TrackId) {
    use opscope_model::samples::state;
    let frame = |t: &mut Trace, function: &str, file: &str, line| {
        let (function, file) = (t.intern(function), t.intern(file));
        t.stacks.frame(function, file, line)
    };
    let main = frame(t, "<module>", "train.py", 40);
    let step = frame(t, "Model.step", "train.py", 12);
    let load = frame(t, "load", "data/loader.py", 7);
    let one = t.stacks.stack([main, step]);
    let two = t.stacks.stack([main, load]);
    for (ts, stack, state) in [
        (1_000, one, state::ACTIVE_KNOWN | state::ACTIVE | state::GIL),
        (11_000, two, state::ACTIVE_KNOWN),
        (21_000, opscope_model::NONE, 0),
        (31_000, one, state::ACTIVE_KNOWN | state::ACTIVE),
    ] {
        t.samples.push(opscope_model::SampleRow {
            ts,
            track,
            stack,
            period: 10_000,
            state,
        });
    }
}

/// Each sample as `owner ts period state frames` (outermost first).
fn sample_lines(t: &Trace, owner: impl Fn(&Trace, u32) -> String) -> Vec<String> {
    let s = &t.samples;
    let mut lines: Vec<String> = (0..s.len())
        .map(|i| {
            let frames: Vec<String> = stack_frames(t, s.stack[i]);
            let (ts, period, state) = (s.ts[i], s.period[i], s.state[i]);
            format!("{} {ts} {period} {state} {frames:?}", owner(t, s.track[i]))
        })
        .collect();
    lines.sort();
    lines
}

/// The frames of a stack, outermost first, as `function file:line`.
fn stack_frames(t: &Trace, stack: u32) -> Vec<String> {
    let f = &t.stacks.frames;
    let mut frames: Vec<String> = t
        .stacks
        .frames_of(stack)
        .map(|i| {
            let i = i as usize;
            format!(
                "{} {}:{}",
                t.str(f.function[i]),
                t.str(f.file[i]),
                f.line[i]
            )
        })
        .collect();
    frames.reverse();
    frames
}

fn name(t: &Trace, id: Option<StrId>) -> &str {
    id.map_or("-", |id| t.str(id))
}

fn track_text(t: &Trace, track: u32) -> String {
    let tr = &t.tracks[track as usize];
    let pid = tr.process.map(|p| t.processes[p.index()].pid);
    let thread = tr.thread.map(|th| t.threads[th.index()].tid);
    format!("{}:{:?}:{pid:?}:{thread:?}", tr.kind.name(), t.str(tr.name))
}

/// Everything the round trip must keep, as sorted lines that do not depend on row
/// order or ids.
fn canonical(t: &Trace) -> Vec<Vec<String>> {
    let mut processes: Vec<String> = t
        .processes
        .iter()
        .map(|p| {
            let device = p.device.map(|d| {
                let d = &t.devices[d.index()];
                format!("{}:{}:{}", d.kind.name(), d.index, name(t, d.name))
            });
            format!(
                "{} {} {} {:?} {device:?}",
                p.pid,
                name(t, p.name),
                name(t, p.labels),
                p.sort_index
            )
        })
        .collect();
    let mut threads: Vec<String> = t
        .threads
        .iter()
        .map(|th| {
            let pid = t.processes[th.process.index()].pid;
            format!("{pid} {} {} {:?}", th.tid, name(t, th.name), th.sort_index)
        })
        .collect();
    let mut tracks: Vec<String> = (0..t.tracks.len() as u32)
        .map(|i| track_text(t, i))
        .collect();
    let [slices, instants, counters, flows] = event_lines(t, track_text);
    for v in [&mut processes, &mut threads, &mut tracks] {
        v.sort();
    }
    let samples = sample_lines(t, track_text);
    vec![
        processes, threads, tracks, slices, instants, counters, flows, samples,
    ]
}

pub(super) fn export_bytes(t: &Trace) -> Vec<u8> {
    let mut out = Vec::new();
    export(t, &mut out).expect("export to memory");
    out
}

pub(super) fn import_bytes(bytes: &[u8]) -> Result<Trace, ImportError> {
    let mut t = Trace::new();
    import(bytes, "test.perfetto", &mut t)?;
    Ok(t)
}

#[test]
fn perfetto_round_trip_keeps_everything() {
    let original = sample_trace();
    let bytes = export_bytes(&original);
    let back = import_bytes(&bytes).expect("import");
    assert_eq!(back.repairs.total(), 0, "{:?}", back.repairs);
    assert_eq!(back.sources.len(), 1);
    assert_eq!(back.sources[0].format, "perfetto");
    let (a, b) = (canonical(&original), canonical(&back));
    for (a, b) in a.iter().zip(&b) {
        assert_eq!(a, b);
    }
    // And again: nothing drifts (string ids differ, so the bytes may too).
    let again = import_bytes(&export_bytes(&back)).expect("second import");
    assert_eq!(canonical(&again), a);
}

#[test]
fn perfetto_export_frames_and_interns() {
    let t = sample_trace();
    let bytes = export_bytes(&t);
    let trace = proto::Trace::decode(&bytes[..]).expect("decodes as a Trace");
    let first = &trace.packet[0];
    assert_eq!(first.sequence_flags, Some(SEQ_INCREMENTAL_STATE_CLEARED));
    assert!(trace
        .packet
        .iter()
        .all(|p| p.trusted_packet_sequence_id == Some(1)));
    // Each name is interned once.
    let names: Vec<_> = trace
        .packet
        .iter()
        .filter_map(|p| p.interned_data.as_ref())
        .flat_map(|d| &d.event_names)
        .map(|n| n.name.clone().unwrap_or_default())
        .collect();
    let sgemm = names
        .iter()
        .filter(|n| n.as_slice() == b"volta_sgemm")
        .count();
    assert_eq!(sgemm, 1);
    // The overlapping stream slice went to a child track marked as a lane.
    let lanes: Vec<_> = trace
        .packet
        .iter()
        .filter_map(|p| p.track_descriptor.as_ref())
        .filter(|d| {
            let text = String::from_utf8_lossy(d.description.as_deref().unwrap_or_default());
            Marker::parse(&text).lane
        })
        .collect();
    assert_eq!(
        lanes.len(),
        2,
        "one for the stream, one for the async track"
    );
    // Events are in time order.
    let times: Vec<u64> = trace
        .packet
        .iter()
        .filter(|p| p.track_event.is_some())
        .map(|p| p.timestamp.unwrap_or_default())
        .collect();
    assert!(times.is_sorted());
    let events = times.len();
    assert_eq!(
        events,
        2 * t.slices.len() + t.instants.len() + t.counters.len()
    );
}

#[test]
fn perfetto_marker_round_trips() {
    let m = Marker {
        kind: Some("gpu_stream".into()),
        device: Some("gpu:1".into()),
        device_name: Some("a;b%3Bc".into()),
        lane: true,
        pthread: Some(140444649003904),
    };
    assert_eq!(Marker::parse(&m.format()), m);
    assert_eq!(Marker::parse("a track of stream 7"), Marker::default());
}

#[test]
fn perfetto_negative_times_are_shifted() {
    let (mut t, src) = new_trace();
    let p = t.process(src, 1);
    let th = t.thread(p, 1);
    let track = t.thread_track(th, TrackKind::Thread);
    for (ts, dur) in [(-100, 50), (10, 5)] {
        let s = Slice {
            track,
            ts,
            dur,
            name: "s",
            cat: "",
            kind: SliceKind::Op,
        };
        slice(&mut t, s, ArgsId::NONE);
    }
    t.finish();
    let back = import_bytes(&export_bytes(&t)).expect("import");
    assert_eq!(back.slices.ts, vec![0, 110]);
    assert_eq!(back.slices.dur, vec![50, 5]);
}

/// Runs the independent decoder on an exported trace; `None` when Python or the
/// `perfetto` package is missing and `CI` is not set.
fn decode_with_official_protos(bytes: &[u8]) -> Option<Value> {
    let python = std::env::var("OPSCOPE_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/perfetto_decode.py");
    let path = std::env::temp_dir().join(format!(
        "opscope-perfetto-{}-{:?}.pftrace",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::write(&path, bytes).expect("write temp trace");
    let output = Command::new(&python).arg(script).arg(&path).output();
    let _ = std::fs::remove_file(&path);
    let missing = |why: String| {
        if std::env::var_os("CI").is_some() {
            panic!("{why} (CI is set, so this test may not skip)");
        }
        eprintln!("SKIPPED: {why}; set OPSCOPE_PYTHON to a Python with the `perfetto` package");
    };
    let output = match output {
        Ok(o) => o,
        Err(e) => {
            missing(format!("cannot run {python}: {e}"));
            return None;
        }
    };
    if output.status.code() == Some(3) {
        missing(format!(
            "{python} lacks the `perfetto` package: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
        return None;
    }
    assert!(
        output.status.success(),
        "perfetto_decode.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(serde_json::from_slice(&output.stdout).expect("decoder prints JSON"))
}

fn owner(t: &Trace, track: u32) -> String {
    let tr = &t.tracks[track as usize];
    match tr.thread {
        Some(th) => {
            let th = &t.threads[th.index()];
            format!("thread {} {}", t.processes[th.process.index()].pid, th.tid)
        }
        None => format!("track {}", t.str(tr.name)),
    }
}

/// An arg as the decoder prints it.
fn decoded_arg(t: &Trace, key: StrId, v: ArgValue) -> Value {
    let value = match v {
        ArgValue::Null => json!(["json", "null"]),
        ArgValue::Bool(b) => json!(["bool", b]),
        ArgValue::Int(i) => json!(["int", i]),
        ArgValue::UInt(u) => json!(["int", u]),
        ArgValue::Float(f) => json!(["float", f.to_bits()]),
        ArgValue::Str(s) => json!(["str", t.str(s)]),
        ArgValue::Json(s) => json!(["json", t.str(s)]),
    };
    json!([t.str(key), value])
}

fn sorted(mut v: Vec<Value>) -> Value {
    v.sort_by_key(|x| x.to_string());
    Value::Array(v)
}

fn decoded_args(t: &Trace, id: ArgsId, kind: SliceKind, extra: Vec<Value>) -> Value {
    let mut args: Vec<Value> = t.args.get(id).map(|(k, v)| decoded_arg(t, k, v)).collect();
    if kind != SliceKind::Other {
        args.push(json!(["opscope.kind", ["str", kind.name()]]));
    }
    args.extend(extra);
    sorted(args)
}

/// Exports `t`, decodes the file with the official protos and checks that it holds
/// exactly the model's events, names and flows.
fn assert_official_decode_matches(t: &Trace) {
    let Some(got) = decode_with_official_protos(&export_bytes(t)) else {
        return;
    };
    let origin = t.time_span().map_or(0, |(lo, _)| lo.min(0));
    let s = &t.slices;
    let f = &t.flows;
    let mut outgoing: HashMap<u32, Vec<usize>> = HashMap::new();
    for k in 0..f.len() {
        outgoing.entry(f.from[k]).or_default().push(k);
    }
    let flow_labels = |i: usize| -> Vec<Value> {
        let out = outgoing.get(&(i as u32)).map_or(&[][..], |v| &v[..]);
        let unnamed = |&k: &usize| f.name[k] == StrId::EMPTY && f.category[k] == StrId::EMPTY;
        if out.iter().all(unnamed) {
            return Vec::new();
        }
        out.iter()
            .map(|&k| {
                let v = format!("{}\u{1f}{}", t.str(f.category[k]), t.str(f.name[k]));
                json!(["opscope.flow", ["str", v]])
            })
            .collect()
    };
    let slices = (0..s.len())
        .map(|i| {
            json!([
                owner(t, s.track[i]),
                t.str(s.name[i]),
                t.str(s.category[i]),
                s.ts[i] - origin,
                s.dur[i],
                decoded_args(t, s.args[i], s.kind(i), flow_labels(i))
            ])
        })
        .collect();
    let inst = &t.instants;
    let instants = (0..inst.len())
        .map(|i| {
            let mut extra = Vec::new();
            let scope = match inst.scope[i] {
                InstantScope::Thread => None,
                InstantScope::Process => Some("process"),
                InstantScope::Global => Some("global"),
            };
            if let Some(scope) = scope {
                extra.push(json!(["opscope.scope", ["str", scope]]));
            }
            json!([
                owner(t, inst.track[i]),
                t.str(inst.name[i]),
                t.str(inst.category[i]),
                inst.ts[i] - origin,
                decoded_args(t, inst.args[i], inst.kind(i), extra)
            ])
        })
        .collect();
    let c = &t.counters;
    let counters = (0..c.len())
        .map(|i| json!([owner(t, c.track[i]), c.ts[i] - origin, c.value[i].to_bits()]))
        .collect();
    let key = |i: u32| {
        let i = i as usize;
        json!([owner(t, s.track[i]), t.str(s.name[i]), s.ts[i] - origin])
    };
    let flows = (0..f.len())
        .map(|k| json!([key(f.from[k]), key(f.to[k])]))
        .collect();
    // An absent name decodes as the proto default, "".
    let text = |id: Option<StrId>| id.map_or("", |id| t.str(id));
    let processes = t
        .processes
        .iter()
        .map(|p| json!([p.pid, text(p.name)]))
        .collect();
    let threads = t
        .tracks
        .iter()
        .filter_map(|tr| tr.thread)
        .map(|th| {
            let th = &t.threads[th.index()];
            let pid = t.processes[th.process.index()].pid;
            json!([pid, th.tid, text(th.name)])
        })
        .collect();

    // The opscope state bits are a field of our own, which the official protos skip.
    let ss = &t.samples;
    let samples = (0..ss.len())
        .map(|i| {
            json!([
                owner(t, ss.track[i]),
                ss.ts[i] - origin,
                stack_frames(t, ss.stack[i]),
                ss.period[i]
            ])
        })
        .collect();

    let counts = &got["counts"];
    assert_eq!(counts["begin"], json!(s.len()));
    assert_eq!(counts["end"], json!(s.len()));
    assert_eq!(counts["instant"], json!(inst.len()));
    assert_eq!(counts["counter"], json!(c.len()));
    assert_eq!(got["open_slices"], json!(0));
    let list = |v: &Value| sorted(v.as_array().cloned().unwrap_or_default());
    assert_eq!(list(&got["processes"]), sorted(processes));
    assert_eq!(list(&got["threads"]), sorted(threads));
    assert_eq!(list(&got["slices"]), sorted(slices));
    assert_eq!(list(&got["instants"]), sorted(instants));
    assert_eq!(list(&got["counters"]), sorted(counters));
    assert_eq!(list(&got["flows"]), sorted(flows));
    assert_eq!(list(&got["samples"]), sorted(samples));
}

#[test]
fn perfetto_export_decodes_with_official_protos() {
    assert_official_decode_matches(&sample_trace());
}

/// Real traces (`../shared/traces`, read with the Chrome importer) survive export and
/// import unchanged, and the small ones decode as the model says.
#[test]
fn perfetto_round_trips_real_traces() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces");
    let files = [
        (
            "kineto/generated-here/torch2.15-cpu-kineto/torch-cpu-trace.json",
            true,
        ),
        ("tf-timeline/dorsal/trace_CNNGender_tf_700-15ISK.json", true),
        // A GPU training step: streams, flows from launches to kernels, 45k slices.
        (
            "kineto/kineto-tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
            false,
        ),
    ];
    for (file, decode) in files {
        let path = format!("{root}/{file}");
        let Ok(raw) = std::fs::read(&path) else {
            if std::env::var_os("CI").is_some() {
                panic!("{path} is missing (CI is set, so this test may not skip)");
            }
            eprintln!("SKIPPED: {path} is missing");
            continue;
        };
        let bytes = crate::input::decompress_if_gzip(&raw, &path).expect("decompress");
        let mut original = Trace::new();
        crate::import_bytes(&bytes, &path, &mut original).expect("chrome import");
        assert!(!original.slices.is_empty(), "{file}");
        let back = import_bytes(&export_bytes(&original)).expect("import");
        assert_eq!(back.repairs.total(), 0, "{file}: {:?}", back.repairs);
        for (a, b) in canonical(&original).iter().zip(&canonical(&back)) {
            assert!(a == b, "{file}: the round trip changed the trace");
        }
        if decode {
            assert_official_decode_matches(&original);
        }
    }
}

// ---- generic traces and bad input ----

pub(super) fn frame(packets: &[TracePacket]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in packets {
        out.push(0x0a);
        p.encode_length_delimited(&mut out).expect("encode");
    }
    out
}

pub(super) fn interned(iid: u64, name: &str) -> Interned {
    Interned {
        iid: Some(iid),
        name: Some(name.as_bytes().to_vec()),
    }
}

pub(super) fn event(ts: u64, seq: u32, te: TrackEvent) -> TracePacket {
    TracePacket {
        timestamp: Some(ts),
        trusted_packet_sequence_id: Some(seq),
        sequence_flags: Some(SEQ_NEEDS_INCREMENTAL_STATE),
        track_event: Some(te),
        ..Default::default()
    }
}

pub(super) fn thread_descriptor(uuid: u64, pid: i64, tid: i64, name: &str) -> TracePacket {
    TracePacket {
        track_descriptor: Some(Box::new(TrackDescriptor {
            uuid: Some(uuid),
            thread: Some(ThreadDescriptor {
                pid: Some(pid),
                tid: Some(tid),
                thread_name: Some(name.as_bytes().to_vec()),
                legacy_sort_index: None,
            }),
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// A trace as the Perfetto SDK writes it: an incremental sequence clock, a default
/// track, interned names and categories, structured args and a chain of flows.
pub(super) fn sdk_style_trace() -> Vec<u8> {
    let seq = 5;
    let begin = |name_iid: u64, flows: Vec<u64>, terminating: Vec<u64>| TrackEvent {
        r#type: Some(TYPE_SLICE_BEGIN),
        name_iid: Some(name_iid),
        category_iids: vec![1],
        flow_ids: flows,
        terminating_flow_ids: terminating,
        ..Default::default()
    };
    let end = || TrackEvent {
        r#type: Some(TYPE_SLICE_END),
        ..Default::default()
    };
    let mut packets = vec![
        TracePacket {
            trusted_packet_sequence_id: Some(seq),
            sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
            trace_packet_defaults: Some(Box::new(TracePacketDefaults {
                timestamp_clock_id: Some(64),
                track_event_defaults: Some(TrackEventDefaults {
                    track_uuid: Some(11),
                    ..Default::default()
                }),
            })),
            ..Default::default()
        },
        TracePacket {
            trusted_packet_sequence_id: Some(seq),
            clock_snapshot: Some(Box::new(ClockSnapshot {
                clocks: vec![
                    Clock {
                        clock_id: Some(CLOCK_BOOTTIME),
                        timestamp: Some(1_000_000),
                        ..Default::default()
                    },
                    Clock {
                        clock_id: Some(64),
                        timestamp: Some(1_000),
                        is_incremental: Some(true),
                        unit_multiplier_ns: Some(1_000),
                    },
                ],
                primary_trace_clock: None,
            })),
            ..Default::default()
        },
        TracePacket {
            track_descriptor: Some(Box::new(TrackDescriptor {
                uuid: Some(10),
                process: Some(ProcessDescriptor {
                    pid: Some(77),
                    process_name: Some(b"server".to_vec()),
                    ..Default::default()
                }),
                ..Default::default()
            })),
            ..Default::default()
        },
        thread_descriptor(11, 77, 78, "worker"),
        TracePacket {
            track_descriptor: Some(Box::new(TrackDescriptor {
                uuid: Some(12),
                parent_uuid: Some(10),
                name: Some(b"queue depth".to_vec()),
                counter: Some(CounterDescriptor::default()),
                ..Default::default()
            })),
            ..Default::default()
        },
    ];
    // Times are deltas of 1 µs units on clock 64: 1001, 1003, 1004, 1006, 1010, 1011 µs.
    let mut first = event(
        1,
        seq,
        TrackEvent {
            debug_annotations: vec![
                DebugAnnotation {
                    name_iid: Some(1),
                    string_value_iid: Some(1),
                    ..Default::default()
                },
                DebugAnnotation {
                    name: Some(b"dims".to_vec()),
                    dict_entries: vec![DebugAnnotation {
                        name: Some(b"w".to_vec()),
                        int_value: Some(3),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            ],
            ..begin(1, vec![99], vec![])
        },
    );
    first.interned_data = Some(InternedData {
        event_names: vec![interned(1, "request"), interned(2, "handle")],
        event_categories: vec![interned(1, "rpc")],
        debug_annotation_names: vec![interned(1, "method")],
        debug_annotation_string_values: vec![interned(1, "GET")],
        ..Default::default()
    });
    packets.push(first);
    packets.push(event(2, seq, end()));
    packets.push(event(1, seq, begin(2, vec![99], vec![])));
    packets.push(event(2, seq, end()));
    packets.push(event(4, seq, begin(2, vec![], vec![99])));
    packets.push(event(
        1,
        seq,
        TrackEvent {
            track_uuid: Some(12),
            r#type: Some(TYPE_COUNTER),
            counter_value: Some(5),
            ..Default::default()
        },
    ));
    frame(&packets)
}

#[test]
fn perfetto_imports_sdk_style_traces() {
    let t = import_bytes(&sdk_style_trace()).expect("import");

    let s = &t.slices;
    assert_eq!(s.ts, vec![1_001_000, 1_004_000, 1_010_000]);
    // The last slice never ends: closed at the last time on its track, and counted.
    assert_eq!(s.dur, vec![2_000, 2_000, 0]);
    assert_eq!(t.repairs.unmatched_begins, 1);
    let names: Vec<&str> = s.name.iter().map(|&n| t.str(n)).collect();
    assert_eq!(names, ["request", "handle", "handle"]);
    assert!(s.category.iter().all(|&c| t.str(c) == "rpc"));
    assert!((0..s.len()).all(|i| s.kind(i) == SliceKind::Other));
    assert_eq!(
        args_text(&t, s.args[0]),
        r#"dims=Json({"w":3}), method=Str("GET")"#
    );
    let flows: Vec<(u32, u32)> = (0..t.flows.len())
        .map(|i| (t.flows.from[i], t.flows.to[i]))
        .collect();
    assert_eq!(flows, vec![(0, 1), (1, 2)]);
    let track = &t.tracks[s.track[0] as usize];
    let thread = &t.threads[track.thread.expect("a thread track").index()];
    assert_eq!((thread.tid, name(&t, thread.name)), (78, "worker"));
    let process = &t.processes[thread.process.index()];
    assert_eq!((process.pid, name(&t, process.name)), (77, "server"));
    assert_eq!(t.counters.ts, vec![1_011_000]);
    assert_eq!(t.counters.value, vec![5.0]);
    let counter = &t.tracks[t.counters.track[0] as usize];
    assert_eq!(
        (counter.kind, t.str(counter.name)),
        (TrackKind::Counter, "queue depth")
    );
    assert_eq!(counter.process, Some(thread.process));
}

#[test]
fn perfetto_unmatched_and_skipped_events_are_counted() {
    let clear = TracePacket {
        trusted_packet_sequence_id: Some(1),
        sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
        ..Default::default()
    };
    let on = |ts, ty| {
        event(
            ts,
            1,
            TrackEvent {
                r#type: Some(ty),
                track_uuid: Some(3),
                name: Some(b"x".to_vec()),
                ..Default::default()
            },
        )
    };
    let mut needs_state = on(1, TYPE_SLICE_BEGIN);
    needs_state.trusted_packet_sequence_id = Some(2); // never cleared: skipped
    let packets = vec![
        thread_descriptor(3, 1, 2, "t"),
        needs_state,
        clear,
        on(5, TYPE_SLICE_END), // nothing open
        on(10, TYPE_SLICE_BEGIN),
        on(20, TYPE_SLICE_BEGIN),
        on(30, TYPE_INSTANT),
    ];
    let t = import_bytes(&frame(&packets)).expect("import");
    assert_eq!(t.repairs.unmatched_ends, 1);
    assert_eq!(t.repairs.unmatched_begins, 2);
    assert_eq!(t.repairs.malformed_events, 1);
    assert_eq!(t.slices.ts, vec![10, 20]);
    assert_eq!(t.slices.dur, vec![20, 10]);
    assert_eq!(t.instants.len(), 1);
}

/// An instant has no slice for a flow to join: its flow event breaks the chain there
/// and is the one counted, as a Chrome flow event outside any slice is. (Its partner
/// used to be counted as well, as an end with no start.)
#[test]
fn perfetto_flows_of_instants_break_their_chain_and_count_once() {
    let clear = TracePacket {
        trusted_packet_sequence_id: Some(1),
        sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
        ..Default::default()
    };
    let on = |ts, ty, flows: Vec<u64>, terminating: Vec<u64>| {
        event(
            ts,
            1,
            TrackEvent {
                r#type: Some(ty),
                track_uuid: Some(3),
                name: Some(b"x".to_vec()),
                flow_ids: flows,
                terminating_flow_ids: terminating,
                ..Default::default()
            },
        )
    };
    let end = |ts| on(ts, TYPE_SLICE_END, vec![], vec![]);
    let packets = vec![
        thread_descriptor(3, 1, 2, "t"),
        clear,
        // 7: from an instant to a slice.
        on(10, TYPE_INSTANT, vec![7], vec![]),
        on(20, TYPE_SLICE_BEGIN, vec![], vec![7]),
        end(21),
        // 8: from a slice through an instant to a slice: no flow goes around it.
        on(30, TYPE_SLICE_BEGIN, vec![8], vec![]),
        end(31),
        on(40, TYPE_INSTANT, vec![8], vec![]),
        on(50, TYPE_SLICE_BEGIN, vec![], vec![8]),
        end(51),
    ];
    let t = import_bytes(&frame(&packets)).expect("import");
    assert_eq!(t.flows.len(), 0);
    assert_eq!(t.repairs.unbound_flow_events, 2);
    assert_eq!(t.instants.len(), 2);
}

fn syntax_offset(r: Result<Trace, ImportError>) -> u64 {
    match r {
        Err(ImportError::Syntax { offset, .. }) => offset,
        Err(other) => panic!("expected a syntax error, got {other}"),
        Ok(_) => panic!("expected a syntax error, got a trace"),
    }
}

#[test]
fn perfetto_bad_framing_is_an_error_with_offset() {
    let good = export_bytes(&sample_trace());
    let first_len = good[1] as usize + 2; // the first packet is short
                                          // Wrong wire type for `packet`.
    let mut bad = good[..first_len].to_vec();
    bad.extend([0x0b, 0x00]);
    assert_eq!(syntax_offset(import_bytes(&bad)), first_len as u64);
    // A well-framed packet whose content is not a TracePacket.
    let mut bad = good[..first_len].to_vec();
    bad.extend([0x0a, 0x02, 0xff, 0xff]);
    assert_eq!(syntax_offset(import_bytes(&bad)), first_len as u64);
    // A varint longer than ten bytes.
    let mut bad = good[..first_len].to_vec();
    bad.push(0x0a);
    bad.extend([0xff; 11]);
    assert_eq!(syntax_offset(import_bytes(&bad)), first_len as u64);
    // Cut inside the first packet: nothing to keep.
    assert_eq!(syntax_offset(import_bytes(&[0x0a, 0x10, 1, 2, 3])), 0);
    assert_eq!(syntax_offset(import_bytes(&[0x0a, 0x80])), 0);
}

/// The bytes of the file's trailing sample packets (the exporter writes them last).
fn samples_bytes(file: &[u8]) -> usize {
    let mut pos = 0;
    let mut first_sample = file.len();
    while pos < file.len() {
        let start = pos;
        pos += 1;
        let mut len = 0usize;
        let mut shift = 0;
        loop {
            let b = file[pos];
            pos += 1;
            len |= ((b & 0x7f) as usize) << shift;
            shift += 7;
            if b < 0x80 {
                break;
            }
        }
        let packet = TracePacket::decode(&file[pos..pos + len]).expect("packet");
        if packet.perf_sample.is_some() && first_sample == file.len() {
            first_sample = start;
        }
        pos += len;
    }
    file.len() - first_sample
}

#[test]
fn perfetto_truncated_file_keeps_what_was_read() {
    let good = export_bytes(&sample_trace());
    let t = import_bytes(&good[..good.len() - 3]).expect("import");
    assert_eq!(t.repairs.malformed_events, 1);
    // The last packet is a sampled stack, lost; the events before it are whole.
    assert_eq!(t.repairs.unmatched_begins, 0);
    assert_eq!(t.slices.len(), sample_trace().slices.len());
    assert_eq!(t.samples.len(), sample_trace().samples.len() - 1);
    // Cut before the samples: the last event is an end, its slice closed and counted.
    let before_samples = good.len() - samples_bytes(&good);
    let early = import_bytes(&good[..before_samples - 3]).expect("import");
    assert_eq!(early.repairs.unmatched_begins, 1);
    assert!(early.samples.is_empty());
    // And the user is told where the file was cut and how much was lost.
    let cut = good.len() - 3;
    let (last, packets) = {
        // The offset of the last packet: walk the framing of the whole file.
        let (mut pos, mut last, mut packets) = (0, 0, 0);
        while pos < good.len() {
            (last, packets) = (pos, packets + 1);
            let (mut len, mut shift, mut i) = (0usize, 0, pos + 1);
            loop {
                let b = good[i];
                len |= ((b & 0x7f) as usize) << shift;
                shift += 7;
                i += 1;
                if b < 0x80 {
                    break;
                }
            }
            pos = i + len;
        }
        (last, packets - 1)
    };
    let warnings: Vec<&str> = t.warnings.iter().map(|(_, w)| w.as_str()).collect();
    assert_eq!(
        warnings,
        [format!(
            "test.perfetto: byte {last}: the file ends inside a packet (cut off while being written?); the {packets} packets before it are read, the last {} bytes ({:.1}% of the file) are lost",
            cut - last,
            (cut - last) as f64 * 100.0 / cut as f64
        )]
    );
}

#[test]
fn perfetto_corrupt_input_never_panics() {
    let mut good = export_bytes(&sample_trace());
    // Our own files, and the other kinds of packet a generic trace has.
    good.extend(sdk_style_trace());
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..2_000 {
        let mut bytes = good.clone();
        for _ in 0..1 + next() % 4 {
            let i = (next() % bytes.len() as u64) as usize;
            bytes[i] = next() as u8;
        }
        if next() % 4 == 0 {
            bytes.truncate((next() % bytes.len() as u64) as usize);
        }
        let _ = import_bytes(&bytes);
    }
}

/// `plain` packets zlib'd into the `compressed_packets` of one packet, framed as a file.
fn in_compressed_packet(plain: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(plain).expect("compress");
    let outer = TracePacketGlobals {
        compressed_packets: Some(z.finish().expect("compress")),
        ..Default::default()
    };
    let mut bytes = vec![0x0a];
    outer.encode_length_delimited(&mut bytes).expect("encode");
    bytes
}

/// Packets may come zlib-compressed inside a `compressed_packets` packet, as the
/// Perfetto service writes them when asked to.
#[test]
fn perfetto_reads_compressed_packets() {
    let t = sample_trace();
    let plain = export_bytes(&t);
    let bytes = in_compressed_packet(&plain);
    let back = import_bytes(&bytes).expect("import");
    assert_eq!(canonical(&back), canonical(&t));

    // Corrupt compressed data is an error at the packet that holds it.
    let mut bad = plain[..plain[1] as usize + 2].to_vec();
    let at = bad.len() as u64;
    let outer = TracePacketGlobals {
        compressed_packets: Some(vec![0x78, 0x9c, 0xff, 0xff]),
        ..Default::default()
    };
    bad.push(0x0a);
    outer.encode_length_delimited(&mut bad).expect("encode");
    assert_eq!(syntax_offset(import_bytes(&bad)), at);
}

/// A clock snapshot: BOOTTIME 1,000 ns is REALTIME 1.7e18 ns.
fn boottime_1000_at_realtime_1_7e18() -> TracePacket {
    TracePacket {
        clock_snapshot: Some(Box::new(ClockSnapshot {
            clocks: vec![
                Clock {
                    clock_id: Some(CLOCK_BOOTTIME),
                    timestamp: Some(1_000),
                    ..Default::default()
                },
                Clock {
                    clock_id: Some(CLOCK_REALTIME),
                    timestamp: Some(1_700_000_000_000_000_000),
                    ..Default::default()
                },
            ],
            primary_trace_clock: None,
        })),
        ..Default::default()
    }
}

/// Timestamps of other clocks are moved onto the trace clock (BOOTTIME) with the
/// trace's clock snapshot, and the source learns the Unix-time offset.
#[test]
fn perfetto_converts_clocks_with_snapshots() {
    let snapshot = boottime_1000_at_realtime_1_7e18();
    let instant = |ts, clock| TracePacket {
        timestamp: Some(ts),
        timestamp_clock_id: clock,
        track_event: Some(TrackEvent {
            r#type: Some(TYPE_INSTANT),
            name: Some(b"i".to_vec()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let packets = [
        snapshot,
        instant(1_700_000_000_000_000_500, Some(CLOCK_REALTIME)),
        instant(2_000, None),
    ];
    let t = import_bytes(&frame(&packets)).expect("import");
    assert_eq!(t.instants.ts, vec![1_500, 2_000]);
    // On the implicit global track.
    assert_eq!(t.instants.scope, vec![InstantScope::Global; 2]);
    let clock = &t.clocks[t.sources[0].clock.0 as usize];
    assert_eq!(
        clock.unix_offset_ns,
        Some(1_700_000_000_000_000_000 - 1_000)
    );
    assert_eq!(t.str(clock.name), "perfetto:BOOTTIME");
}

/// A trace of one instant at `ts` whose clock sits `unix_offset_ns` before Unix time.
fn one_instant_on_unix_time(ts: i64, unix_offset_ns: i64) -> Trace {
    let (mut t, src) = new_trace();
    t.clocks[t.sources[src.0 as usize].clock.0 as usize].unix_offset_ns = Some(unix_offset_ns);
    let process = t.process(src, 7);
    let thread = t.thread(process, 7);
    let track = t.thread_track(thread, TrackKind::Thread);
    let name = t.intern("i");
    t.instants.push(InstantRow {
        track,
        ts,
        name,
        category: StrId::EMPTY,
        kind: SliceKind::Other,
        scope: InstantScope::Thread,
        args: ArgsId::NONE,
    });
    t.finish();
    t
}

fn unix_time_of_first_instant(t: &Trace) -> i64 {
    let clock = &t.clocks[t.sources[0].clock.0 as usize];
    t.instants.ts[0] + clock.unix_offset_ns.expect("a Unix offset")
}

/// A trace with negative times is written shifted to start at 0; its clock snapshot
/// moves with it, so each event keeps its Unix time.
#[test]
fn perfetto_shifted_trace_keeps_unix_time() {
    let unix = 1_700_000_000_000_000_000;
    let original = one_instant_on_unix_time(-5_000, unix);
    let mut bytes = Vec::new();
    export(&original, &mut bytes).expect("export");
    let back = import_bytes(&bytes).expect("import");
    assert_eq!(back.instants.ts[0], 0, "shifted to start at 0");
    assert_eq!(unix_time_of_first_instant(&back), unix - 5_000);
}

/// A recording on CLOCK_MONOTONIC says so: its snapshot's primary clock is MONOTONIC,
/// with the wall and boot clocks read beside it, and times stay where they were.
#[test]
fn perfetto_monotonic_recording_names_its_clock() {
    let clocks = MonotonicClocks {
        monotonic_ns: 50_000,
        realtime_ns: 1_700_000_000_000_050_000,
        boottime_ns: 80_000,
    };
    let offset = clocks.realtime_ns as i64 - clocks.monotonic_ns as i64;
    let original = one_instant_on_unix_time(40_000, offset);
    let mut bytes = Vec::new();
    let options = ExportOptions {
        monotonic: Some(clocks),
    };
    export_with(&original, &mut bytes, &options).expect("export");
    let back = import_bytes(&bytes).expect("import");
    let clock = &back.clocks[back.sources[0].clock.0 as usize];
    assert_eq!(back.str(clock.name), "perfetto:MONOTONIC");
    assert_eq!(back.instants.ts[0], 40_000);
    assert_eq!(unix_time_of_first_instant(&back), offset + 40_000);
    let (primary, snapshot) = snapshot_of(&bytes);
    assert_eq!(primary, Some(CLOCK_MONOTONIC as i32));
    assert_eq!(
        snapshot,
        vec![
            (CLOCK_MONOTONIC, 50_000),
            (CLOCK_REALTIME, clocks.realtime_ns),
            (CLOCK_BOOTTIME, 80_000)
        ]
    );
}

/// The primary clock and the clocks (in the order written) of the first clock snapshot
/// in an exported file.
fn snapshot_of(bytes: &[u8]) -> (Option<i32>, Vec<(u32, u64)>) {
    let trace = proto::Trace::decode(bytes).expect("a Perfetto trace");
    let snapshot = trace
        .packet
        .iter()
        .find_map(|p| p.clock_snapshot.as_ref())
        .expect("a clock snapshot");
    let clocks = snapshot
        .clocks
        .iter()
        .map(|c| (c.clock_id.unwrap_or(0), c.timestamp.unwrap_or(0)))
        .collect();
    (snapshot.primary_trace_clock, clocks)
}

/// Found by fuzzing: a `legacy_json_value` that is not JSON was kept as a `Json` arg,
/// which the Chrome exporter writes verbatim, so `convert` wrote a file it could not read.
#[test]
fn perfetto_legacy_json_that_is_not_json_is_kept_as_text() {
    // One packet at ts 1: an instant with the annotation `a` whose legacy JSON is `[`.
    let bytes = b"\x0a\x0e\x40\x01\x5a\x0a\x48\x03\x22\x06\x52\x01a\x4a\x01[";
    let t = import_bytes(bytes).expect("import");
    assert_eq!(args_text(&t, t.instants.args[0]), r#"a=Str("[")"#);
    let mut json = Vec::new();
    crate::chrome::export(&t, &mut json).expect("export");
    let mut back = Trace::new();
    crate::chrome::import(&json, "test.json", &mut back).expect("re-import");
    assert_eq!(back.instants.len(), 1);
}

// ---- one reader: the importer and the stream read damage alike ----

/// `(name, start, end)` of every slice the stream reports for `bytes` fed whole, sorted,
/// with the decoder's counts of ignored events; the feed must succeed.
fn streamed(bytes: &[u8]) -> (Vec<(String, i64, i64)>, u64) {
    let mut d = super::StreamDecoder::new();
    let mut slices = Vec::new();
    d.feed(bytes, "test", &mut |e| {
        if let super::StreamEvent::Slice {
            name,
            start_ns,
            end_ns,
            ..
        } = e
        {
            slices.push((name.to_string(), start_ns as i64, end_ns as i64));
        }
    })
    .expect("feed");
    slices.sort();
    (slices, d.ignored())
}

fn imported(t: &Trace) -> Vec<(String, i64, i64)> {
    let s = &t.slices;
    let mut v: Vec<_> = (0..s.len())
        .map(|i| (t.str(s.name[i]).to_string(), s.ts[i], s.ts[i] + s.dur[i]))
        .collect();
    v.sort();
    v
}

/// Events without a track on sequences that described their thread with a legacy
/// `ThreadDescriptor` packet belong to that thread. The stream used to put them all on
/// the global track, so that one thread's end closed another's slice.
#[test]
fn perfetto_legacy_threads_match_their_own_slices_in_both_readers() {
    let legacy = |seq: u32, tid: i64| TracePacket {
        trusted_packet_sequence_id: Some(seq),
        thread_descriptor: Some(Box::new(ThreadDescriptor {
            pid: Some(1),
            tid: Some(tid),
            thread_name: Some(format!("t{tid}").into_bytes()),
            legacy_sort_index: None,
        })),
        ..Default::default()
    };
    let on = |seq: u32, ts: u64, ty: i32, name: &str| TracePacket {
        timestamp: Some(ts),
        trusted_packet_sequence_id: Some(seq),
        track_event: Some(TrackEvent {
            r#type: Some(ty),
            name: Some(name.as_bytes().to_vec()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let bytes = frame(&[
        legacy(1, 11),
        legacy(2, 12),
        on(1, 10, TYPE_SLICE_BEGIN, "a"),
        on(2, 20, TYPE_SLICE_BEGIN, "b"),
        on(1, 30, TYPE_SLICE_END, ""),
        on(2, 40, TYPE_SLICE_END, ""),
    ]);
    let t = import_bytes(&bytes).expect("import");
    let expected = vec![("a".to_string(), 10, 30), ("b".to_string(), 20, 40)];
    assert_eq!(imported(&t), expected);
    let tids: Vec<i64> = (0..t.slices.len())
        .map(|i| {
            let track = &t.tracks[t.slices.track[i] as usize];
            t.threads[track.thread.expect("a thread").index()].tid
        })
        .collect();
    assert_eq!(tids, [11, 12]);
    assert_eq!(streamed(&bytes).0, expected);
}

/// Times on a global clock other than the trace's are moved onto it with the clock
/// snapshot. The stream used to report them unconverted.
#[test]
fn perfetto_other_clocks_convert_alike_in_both_readers() {
    let snapshot = boottime_1000_at_realtime_1_7e18();
    let on = |ts, ty| TracePacket {
        timestamp: Some(ts),
        timestamp_clock_id: Some(CLOCK_REALTIME),
        track_event: Some(TrackEvent {
            r#type: Some(ty),
            track_uuid: Some(5),
            name: Some(b"s".to_vec()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let bytes = frame(&[
        snapshot,
        on(1_700_000_000_000_000_500, TYPE_SLICE_BEGIN),
        on(1_700_000_000_000_000_700, TYPE_SLICE_END),
    ]);
    let expected = vec![("s".to_string(), 1_500, 1_700)];
    assert_eq!(imported(&import_bytes(&bytes).expect("import")), expected);
    assert_eq!(streamed(&bytes).0, expected);
}

/// Compressed packets whose inflated bytes end inside a packet keep the packets
/// before the cut, which is counted, as a file cut while written does. The stream
/// used to reject the whole chunk, after reporting what came before the cut.
#[test]
fn perfetto_packets_cut_inside_compressed_ones_are_counted_alike() {
    let slice = |ts, ty| TracePacket {
        timestamp: Some(ts),
        track_event: Some(TrackEvent {
            r#type: Some(ty),
            track_uuid: Some(5),
            name: Some(b"s".to_vec()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut plain = frame(&[slice(10, TYPE_SLICE_BEGIN), slice(20, TYPE_SLICE_END)]);
    // A packet of 9 bytes of which 2 are there.
    plain.extend([0x0a, 9, 0x40, 30]);
    let bytes = in_compressed_packet(&plain);

    let t = import_bytes(&bytes).expect("import");
    let expected = vec![("s".to_string(), 10, 20)];
    assert_eq!(imported(&t), expected);
    assert_eq!(t.repairs.malformed_events, 1);
    assert_eq!(streamed(&bytes), (expected, 1));
}

/// A damaged packet amid whole ones (here compressed data that does not inflate) ends
/// the import with an error at its offset, and the packets before it are in the trace,
/// as read from a file that ends there: `--partial` analyses them.
#[test]
fn perfetto_damaged_packet_keeps_the_packets_before_it() {
    let plain = export_bytes(&sample_trace());
    let mut bytes = in_compressed_packet(&plain);
    let at = bytes.len();
    let damaged = TracePacketGlobals {
        compressed_packets: Some(vec![0x78, 0x9c, 0xff, 0xff]),
        ..Default::default()
    };
    bytes.push(0x0a);
    damaged.encode_length_delimited(&mut bytes).expect("encode");
    bytes.extend(in_compressed_packet(&plain));

    let mut t = Trace::new();
    let err = import(&bytes, "test.perfetto", &mut t).expect_err("a damaged packet");
    assert!(
        matches!(err, ImportError::Syntax { offset, .. } if offset == at as u64),
        "{err}"
    );
    let before = import_bytes(&bytes[..at]).expect("the whole packets before it");
    assert!(!before.slices.is_empty());
    assert_eq!(canonical(&t), canonical(&before));
    assert_eq!(t.sources.len(), 1);
}
