use opscope_model::args::ArgValue;
use opscope_model::{CopyDirection, SliceKind, Trace, TrackKind};
use prost::Message;

use super::proto::*;
use super::*;

fn arg(trace: &Trace, slice: usize, key: &str) -> Option<ArgValue> {
    trace
        .args
        .find(trace.slices.args[slice], trace.strings.find(key)?)
}

fn arg_str(trace: &Trace, slice: usize, key: &str) -> Option<String> {
    match arg(trace, slice, key)? {
        ArgValue::Str(s) => Some(trace.str(s).to_string()),
        _ => None,
    }
}

fn node(name: &str, start_ns: i64, op_end_ns: i64, thread: u32, label: &str) -> NodeExecStats {
    NodeExecStats {
        node_name: name.as_bytes().to_vec(),
        all_start_micros: start_ns / 1000,
        all_start_nanos: start_ns,
        op_end_rel_nanos: op_end_ns,
        op_end_rel_micros: (start_ns + op_end_ns) / 1000 - start_ns / 1000,
        all_end_rel_nanos: op_end_ns + 500,
        thread_id: thread,
        timeline_label: label.as_bytes().to_vec(),
        ..NodeExecStats::default()
    }
}

fn device(name: &str, nodes: Vec<NodeExecStats>) -> DeviceStepStats {
    DeviceStepStats {
        device: name.as_bytes().to_vec(),
        node_stats: nodes,
        thread_names: Default::default(),
    }
}

/// A GPU step: host ops on `/device:GPU:0`, kernels on a stream, the merged lane, and
/// a copy on the memcpy lane.
fn gpu_run() -> Vec<u8> {
    let t0 = 1_700_000_000_000_000_000i64;
    let mut matmul = node("mm", t0, 3_000, 7, "mm = MatMul(a, b)");
    matmul.memory.push(AllocatorMemoryUsed {
        allocator_name: b"GPU_0_bfc".to_vec(),
        total_bytes: 4096,
        peak_bytes: 4096,
        live_bytes: 1024,
        allocator_bytes_in_use: 1 << 20,
    });
    matmul.memory_stats = Some(MemoryStats {
        temp_memory_size: 100,
        persistent_memory_size: 8,
    });
    matmul.output.push(NodeOutput {
        slot: 0,
        tensor_description: Some(TensorDescription {
            allocation_description: Some(AllocationDescription {
                requested_bytes: 1000,
                allocated_bytes: 1024,
                ..AllocationDescription::default()
            }),
            ..TensorDescription::default()
        }),
    });
    let never_ran = NodeExecStats {
        node_name: b"skipped".to_vec(),
        ..NodeExecStats::default()
    };
    RunMetadata {
        step_stats: Some(StepStats {
            dev_stats: vec![
                device(
                    "/job:localhost/replica:0/task:0/device:GPU:0",
                    vec![matmul, never_ran],
                ),
                device(
                    "/job:localhost/replica:0/task:0/device:GPU:0/stream:14",
                    vec![node("mm:MatMul", t0 + 5_000, 20_000, 0, "sgemm_128x64")],
                ),
                device(
                    "/job:localhost/replica:0/task:0/device:GPU:0/stream:all",
                    vec![node("mm:MatMul", t0 + 5_000, 20_000, 0, "sgemm_128x64")],
                ),
                device(
                    "/job:localhost/replica:0/task:0/device:GPU:0/memcpy",
                    vec![node("edge_1_mm:MEMCPYDtoH", t0 + 30_000, 2_000, 0, "")],
                ),
            ],
        }),
        partition_graphs: Vec::new(),
    }
    .encode_to_vec()
}

#[test]
fn gpu_devices_become_stream_tracks_and_host_ops() {
    let mut trace = Trace::new();
    import(&gpu_run(), "run_meta", None, &mut trace).unwrap();
    assert_eq!(
        trace.slices.len(),
        4,
        "the node that never started is left out"
    );
    assert_eq!(trace.repairs.unsupported_events, 1);
    let by_kind = |kind: SliceKind| {
        (0..trace.slices.len())
            .find(|&i| trace.slices.kind(i) == kind)
            .unwrap_or_else(|| panic!("no {kind:?}"))
    };
    let op = by_kind(SliceKind::Op);
    assert_eq!(trace.str(trace.slices.name[op]), "MatMul");
    assert_eq!(arg_str(&trace, op, "name").as_deref(), Some("mm"));
    assert_eq!(trace.slices.dur[op], 3_000);
    assert_eq!(
        arg(&trace, op, "all_end_rel_ns"),
        Some(ArgValue::Int(3_500))
    );
    // tfprof's accounting: allocator totals plus declared temp and persistent memory.
    assert_eq!(
        arg(&trace, op, "requested_bytes"),
        Some(ArgValue::Int(4204))
    );
    assert_eq!(arg(&trace, op, "peak_bytes"), Some(ArgValue::Int(4204)));
    assert_eq!(arg(&trace, op, "residual_bytes"), Some(ArgValue::Int(1032)));
    assert_eq!(arg(&trace, op, "output_bytes"), Some(ArgValue::Int(1024)));
    let op_track = &trace.tracks[trace.slices.track[op] as usize];
    assert_eq!(op_track.kind, TrackKind::Thread);
    assert!(
        op_track.device.is_some(),
        "ops placed on the GPU belong to it"
    );

    let kernel = by_kind(SliceKind::Kernel);
    assert_eq!(trace.str(trace.slices.name[kernel]), "MatMul");
    assert_eq!(arg_str(&trace, kernel, "name").as_deref(), Some("mm"));
    assert_eq!(
        arg_str(&trace, kernel, "label").as_deref(),
        Some("sgemm_128x64")
    );
    let stream = &trace.tracks[trace.slices.track[kernel] as usize];
    assert_eq!(stream.kind, TrackKind::GpuStream);
    assert_eq!(
        trace.str(trace.threads[stream.thread.unwrap().index()].name.unwrap()),
        "stream:14"
    );
    // The merged lane repeats the streams: kept, but not as device work.
    let merged = by_kind(SliceKind::Other);
    assert_ne!(trace.slices.track[merged], trace.slices.track[kernel]);
    let copy = by_kind(SliceKind::Memcpy(CopyDirection::D2H));
    assert_eq!(trace.slices.dur[copy], 2_000);
    // The allocator's bytes in use, sampled at the op's end.
    assert_eq!(trace.counters.len(), 1);
    assert_eq!(trace.counters.value[0], (1 << 20) as f64);
    assert_eq!(trace.devices.len(), 1);
}

#[test]
fn op_types_come_from_the_graph_and_else_from_the_label() {
    let bytes = RunMetadata {
        step_stats: Some(StepStats {
            dev_stats: vec![device(
                "/job:localhost/replica:0/task:0/device:CPU:0",
                vec![
                    node(
                        "dense/MatMul",
                        1_000_000,
                        10,
                        1,
                        "dense/MatMul = _MklMatMul(x, w)",
                    ),
                    node("_SOURCE", 1_000_100, 10, 1, "_SOURCE = NoOp()"),
                ],
            )],
        }),
        partition_graphs: Vec::new(),
    }
    .encode_to_vec();
    let names = |trace: &Trace| -> Vec<String> {
        (0..trace.slices.len())
            .map(|i| trace.str(trace.slices.name[i]).to_string())
            .collect()
    };
    let mut trace = Trace::new();
    import(&bytes, "run_meta", None, &mut trace).unwrap();
    assert_eq!(names(&trace), ["_MklMatMul", "NoOp"]);
    let graph = crate::run_metadata::graph::parse_text(
        b"node { name: \"dense/MatMul\" op: \"MatMul\" }",
        "graph.pbtxt",
    )
    .unwrap();
    let mut trace = Trace::new();
    import(&bytes, "run_meta", Some(&graph), &mut trace).unwrap();
    // Nodes the graph lacks are the executor's own, named as tfprof names them.
    assert_eq!(names(&trace), ["MatMul", "_SOURCE"]);
}

#[test]
fn garbage_is_an_error_naming_the_file() {
    let mut trace = Trace::new();
    let err = import(&[0x0a, 0xff, 0xff], "x/run_meta", None, &mut trace).unwrap_err();
    assert!(err.to_string().starts_with("x/run_meta: byte 0"), "{err}");
    let err = import(&[], "x/run_meta", None, &mut trace).unwrap_err();
    assert!(err.to_string().contains("without step stats"), "{err}");
}

#[test]
fn device_strings() {
    let p = placement("/job:localhost/replica:0/task:0/device:GPU:1/stream:7");
    assert_eq!(p.base, "/job:localhost/replica:0/task:0/device:GPU:1");
    assert_eq!(p.device, Some((DeviceKind::Gpu, 1)));
    assert_eq!(p.lane, Lane::Stream(7));
    assert_eq!(placement("/gpu:0/stream:all").lane, Lane::AllStreams);
    assert_eq!(placement("/device:GPU:0/memcpy").lane, Lane::Memcpy);
    let cpu = placement("/job:localhost/replica:0/task:0/device:CPU:0");
    assert_eq!((cpu.device, cpu.lane), (None, Lane::Host));
    assert!(is_run_metadata_path("a/b/run_meta"));
    assert!(is_run_metadata_path("step3.run_meta"));
    assert!(!is_run_metadata_path("a/trace.json"));
}

/// The real run: one slice per `node_stats` entry at its own times; TensorFlow's own
/// timeline of the same run (`timeline.json`, written by `tf.python.client.timeline`
/// from the same RunMetadata) is the independent reading it is checked against.
#[test]
fn real_run_matches_tensorflows_timeline() {
    let Some(shared) = crate::shared_data::shared() else {
        return;
    };
    let dir = shared.join("traces/tf-timeline/generated-here/tf2.21-cpu-mlp");
    let bytes = std::fs::read(dir.join("run_meta")).unwrap();
    let graph_bytes = std::fs::read(dir.join("graph.pbtxt")).unwrap();
    let graph = crate::run_metadata::graph::parse(&graph_bytes, "graph.pbtxt").unwrap();
    assert_eq!(graph.nodes.len(), 141);
    let mut trace = Trace::new();
    import(&bytes, "run_meta", Some(&graph), &mut trace).unwrap();

    let timeline: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("timeline.json")).unwrap()).unwrap();
    let mut expected: Vec<(String, i64, i64)> = timeline["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| {
            (
                e["args"]["name"].as_str().unwrap().to_string(),
                e["ts"].as_i64().unwrap(),
                e["dur"].as_i64().unwrap(),
            )
        })
        .collect();
    // timeline.py writes whole µs: all_start_micros and all_end_rel_micros, which
    // TensorFlow derives from the nanosecond clock by truncating each end.
    let mut ours: Vec<(String, i64, i64)> = (0..trace.slices.len())
        .map(|i| {
            let ts = trace.slices.ts[i];
            let Some(ArgValue::Int(all_end)) = arg(&trace, i, "all_end_rel_ns") else {
                panic!("no all_end_rel_ns")
            };
            // tfprof's left-out entries (`_SOURCE`) name their node under another key.
            let node = arg_str(&trace, i, "name").or_else(|| arg_str(&trace, i, "uncharged_node"));
            (
                node.unwrap(),
                ts.div_euclid(1000),
                (ts + all_end).div_euclid(1000) - ts.div_euclid(1000),
            )
        })
        .collect();
    expected.sort();
    ours.sort();
    assert_eq!(ours.len(), 48);
    assert_eq!(ours, expected);
}

/// A GPU device's ops all come with thread id 0 and overlap: one that starts inside
/// another and ends after it, and one inside another. Each keeps its whole interval and
/// none is another's child; the thread's track holds what does not overlap.
#[test]
fn overlapping_ops_of_one_thread_keep_their_intervals_on_lanes_of_their_own() {
    let gpu = "/job:localhost/replica:0/task:0/device:GPU:0";
    let us = 1_000;
    let t0 = 1_500_000_000_000_000i64 * us;
    let ops = vec![
        node("hist", t0, 18_244 * us, 0, "hist = HistogramSummary(t, w)"),
        node(
            "scalar",
            t0 + 100 * us,
            14 * us,
            0,
            "scalar = ScalarSummary(t, l)",
        ),
        node(
            "hist_1",
            t0 + 300 * us,
            21_310 * us,
            0,
            "hist_1 = HistogramSummary(t, v)",
        ),
        node(
            "merge",
            t0 + 21_700 * us,
            37 * us,
            0,
            "merge = MergeSummary(hist, hist_1)",
        ),
    ];
    let bytes = RunMetadata {
        step_stats: Some(StepStats {
            dev_stats: vec![device(gpu, ops)],
        }),
        partition_graphs: Vec::new(),
    }
    .encode_to_vec();
    let mut trace = Trace::new();
    import(&bytes, "run_meta", None, &mut trace).unwrap();
    assert_eq!(trace.repairs.clipped_overlaps, 0);
    let s = &trace.slices;
    let by_node = |name: &str| {
        (0..s.len())
            .find(|&i| arg_str(&trace, i, "name").as_deref() == Some(name))
            .unwrap()
    };
    for (name, dur) in [
        ("hist", 18_244),
        ("scalar", 14),
        ("hist_1", 21_310),
        ("merge", 37),
    ] {
        let i = by_node(name);
        assert_eq!(s.dur[i], dur * us, "{name} keeps its interval");
        assert_eq!(s.parent[i], opscope_model::NONE, "{name} is nobody's child");
    }
    let track = |name: &str| &trace.tracks[s.track[by_node(name)] as usize];
    // The thread's track: the first histogram and the merge after both.
    assert_eq!(track("hist").kind, TrackKind::Thread);
    assert_eq!(s.track[by_node("merge")], s.track[by_node("hist")]);
    // The others, one after the other, on the thread's first lane.
    assert_eq!(track("scalar").kind, TrackKind::Async);
    assert_eq!(s.track[by_node("scalar")], s.track[by_node("hist_1")]);
    assert_eq!(track("scalar").device, track("hist").device);
    assert_eq!(
        trace.str(track("scalar").name),
        "thread 0 (overlapping ops)"
    );
}

/// TF 1.x's GPU tracer writes each kernel on its stream and on `stream:all`, and each
/// copy on its stream and on `memcpy`. Each piece is device work once, and only what
/// `stream:all` holds is linked to its node (tfprof's accelerator time).
#[test]
fn repeated_gpu_work_counts_once_and_copies_are_not_charged_to_ops() {
    let t0 = 1_500_000_000_000_000_000i64;
    let copy = |device: &str, name: &str| {
        device_entry(
            device,
            node(name, t0 + 9_000, 2_000, 0, "MEMCPYDtoD 40 bytes"),
        )
    };
    let kernel =
        |device: &str| device_entry(device, node("mm:MatMul", t0 + 5_000, 3_000, 0, "sgemm"));
    let bytes = RunMetadata {
        step_stats: Some(StepStats {
            dev_stats: vec![
                device(
                    "/job:localhost/replica:0/task:0/device:GPU:0",
                    vec![node("mm", t0, 4_000, 0, "mm = MatMul(a, b)")],
                ),
                kernel("/device:GPU:0/stream:all"),
                kernel("/device:GPU:0/stream:14"),
                copy("/device:GPU:0/memcpy", "mm:MatMul"),
                copy("/device:GPU:0/stream:17", "mm:MatMul"),
                copy("/device:GPU:0/memcpy", "edge_3_mm:MEMCPYDtoH"),
            ],
        }),
        partition_graphs: Vec::new(),
    }
    .encode_to_vec();
    let mut trace = Trace::new();
    import(&bytes, "run_meta", None, &mut trace).unwrap();
    let s = &trace.slices;
    let kinds: Vec<(SliceKind, Option<String>, Option<String>)> = (0..s.len())
        .map(|i| {
            (
                s.kind(i),
                arg_str(&trace, i, "name"),
                arg_str(&trace, i, "uncharged_node"),
            )
        })
        .filter(|k| k.0 != SliceKind::Op)
        .collect();
    let mm = || Some("mm".to_string());
    let mut expected = vec![
        // stream:all and its repeat on stream:14: only the stream's is device work.
        (SliceKind::Other, mm(), None),
        (SliceKind::Kernel, mm(), None),
        // The op's copy: the memcpy lane repeats the stream's; not on stream:all, so
        // not charged to the op.
        (SliceKind::Other, mm(), None),
        (SliceKind::Memcpy(CopyDirection::D2D), None, mm()),
        // A copy only the memcpy lane has stays a copy.
        (
            SliceKind::Memcpy(CopyDirection::D2H),
            Some("edge_3_mm".to_string()),
            None,
        ),
    ];
    let mut kinds = kinds;
    let order = |k: &(SliceKind, Option<String>, Option<String>)| format!("{k:?}");
    kinds.sort_by_key(order);
    expected.sort_by_key(order);
    assert_eq!(kinds, expected);
}

fn device_entry(name: &str, node: NodeExecStats) -> DeviceStepStats {
    device(name, vec![node])
}
