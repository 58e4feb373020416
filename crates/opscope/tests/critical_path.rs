//! `opscope critical-path` against HolisticTraceAnalysis 0.5.0's critical path
//! analysis (run by `tests/oracle/hta_critical_path.py` on pandas 2, in the venv of
//! `tests/requirements-hta.txt`) on the shared `hta/critical_path` traces: the same
//! path, edge by edge (type, time, its two ends, the event it is attributed to), the
//! same breakdown by what bounds it, and a graph of as many nodes and edges.

mod common;

use std::path::Path;

use common::*;
use serde_json::Value;

fn hta(python: &str, dir: &Path, annotation: &str, instance: usize) -> Value {
    let instance = instance.to_string();
    let args = [dir.as_os_str(), annotation.as_ref(), instance.as_ref()];
    serde_json::from_slice(&oracle_stdout_with(python, "hta_critical_path.py", &args)).unwrap()
}

/// An edge as both tools name it: type, time (µs), its ends and its attribution.
fn hta_edge(e: &Value) -> (String, i64, String, bool, String, bool, String) {
    let name = |v: &Value| v["name"].as_str().unwrap_or("").to_string();
    (
        e["type"]
            .as_str()
            .unwrap()
            .trim_start_matches("critical_path_")
            .to_string(),
        e["weight"].as_i64().unwrap(),
        name(&e["src"]),
        e["src_start"].as_bool().unwrap(),
        name(&e["dst"]),
        e["dst_start"].as_bool().unwrap(),
        name(&e["attributed"]),
    )
}

fn our_edge(e: &Value) -> (String, i64, String, bool, String, bool, String) {
    let name = |v: &Value| v["name"].as_str().unwrap_or("").to_string();
    (
        e["kind"].as_str().unwrap().to_string(),
        e["duration_ns"].as_i64().unwrap() / 1000,
        name(&e["from"]),
        e["from_start"].as_bool().unwrap(),
        name(&e["to"]),
        e["to_start"].as_bool().unwrap(),
        name(&e["attributed"]),
    )
}

#[test]
fn the_critical_path_is_htas_on_its_own_traces() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let Some(python) = hta_python() else { return };
    let alex = "[param|pytorch.model.alex_net|0|0|0|measure|forward]";
    // HTA's critical-path traces with the windows its own tests give them, and shared
    // traces of other kinds at their first step: nanosecond timestamps (which HTA
    // rounds to µs as doubles), a CUDA graph's launch, NCCL, rank 1 of two, two ranks.
    for (name, annotation, instance) in [
        ("critical_path/simple_add", alex, 1),
        ("critical_path/alexnet", alex, 1),
        ("critical_path/cuda_event_sync", "ProfilerStep", 0),
        ("critical_path/cuda_event_sync_multi_stream", "", 0),
        ("ns_resolution_trace", "ProfilerStep", 0),
        ("negative_queue_length_values_check", "ProfilerStep", 0),
        ("nccl_parser_config", "ProfilerStep", 0),
        ("df_index_resolver", "ProfilerStep", 0),
        ("trace_filter", "ProfilerStep", 0),
    ] {
        let dir = traces.join("kineto/hta").join(name);
        assert_same_path(&python, name, &dir, &dir, annotation, instance);
    }
}

/// opscope's critical path of `ours` is HTA's of `theirs` (the same trace, or one HTA
/// can read), edge by edge, in its breakdown and in the graph's size.
fn assert_same_path(
    python: &str,
    name: &str,
    ours: &Path,
    theirs: &Path,
    annotation: &str,
    instance: usize,
) {
    let want = hta(python, theirs, annotation, instance);
    assert_eq!(want["ok"], true, "{name}");
    let out = opscope_ok(&[
        "critical-path",
        "--format",
        "json",
        "--annotation",
        annotation,
        "--instance",
        &instance.to_string(),
        ours.to_str().unwrap(),
    ]);
    let ours: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (a, b): (Vec<_>, Vec<_>) = (
        want["edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(hta_edge)
            .collect(),
        ours["edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(our_edge)
            .collect(),
    );
    assert_eq!(a.len(), b.len(), "{name}: path lengths");
    for (k, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(x, y, "{name}: edge {k}");
    }
    // The breakdown by what bounds the path, within 0.5 % (equal here).
    let total: i64 = want["summary"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_i64().unwrap())
        .sum();
    for (bound_by, time) in want["summary"].as_object().unwrap() {
        if bound_by.is_empty() {
            continue;
        }
        let ours_us = ours["summary"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["bound_by"] == bound_by.as_str())
            .map_or(0, |s| s["time_ns"].as_i64().unwrap() / 1000);
        let diff = (ours_us - time.as_i64().unwrap()).abs() as f64;
        assert!(
            diff <= 0.005 * total as f64,
            "{name}: {bound_by} {ours_us} µs, HTA {time}"
        );
    }
    assert_eq!(ours["nodes"], want["nodes"], "{name}: nodes");
    assert_eq!(ours["graph_edges"], want["graph_edges"], "{name}: edges");
}

/// A trace from before PyTorch 1.10 names its categories `Operator`, `Runtime`,
/// `Kernel`, `Memcpy`, `Memset`: opscope finds its critical path as HTA finds that of
/// the same trace with today's names (HTA 0.5.0 stops on the original, at its first
/// copy; opscope said "the dependency graph has a cycle" of the empty graph it made).
#[test]
fn a_trace_with_the_old_category_names_has_the_path_hta_finds_with_the_new() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let Some(python) = hta_python() else { return };
    let old = traces.join(
        "kineto/kineto-tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    );
    let dir = scratch_dir("critical-path-renamed");
    let renamed = dir.join("worker0.pt.trace.json");
    let rename = r#"
import gzip, json, sys
names = {"Operator": "cpu_op", "Runtime": "cuda_runtime", "Kernel": "kernel",
         "Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}
trace = json.load(gzip.open(sys.argv[1]))
for e in trace["traceEvents"]:
    e["cat"] = names.get(e.get("cat"), e.get("cat"))
json.dump(trace, open(sys.argv[2], "w"))
"#;
    let made = std::process::Command::new(&python)
        .args(["-c", rename])
        .arg(&old)
        .arg(&renamed)
        .status()
        .unwrap();
    assert!(made.success());
    let only_old = dir.join("old");
    std::fs::create_dir_all(&only_old).unwrap();
    std::os::unix::fs::symlink(&old, only_old.join("worker0.pt.trace.json.gz")).unwrap();
    let only_new = dir.join("new");
    std::fs::create_dir_all(&only_new).unwrap();
    std::fs::rename(&renamed, only_new.join("worker0.pt.trace.json")).unwrap();
    assert_same_path(
        &python,
        "resnet50 (2021)",
        &only_old,
        &only_new,
        "ProfilerStep",
        0,
    );
}

/// A window that is not there is said, naming what was asked.
#[test]
fn a_missing_annotation_or_instance_is_said() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let dir = traces.join("kineto/hta/critical_path/cuda_event_sync");
    let out = opscope(&[
        "critical-path",
        "--annotation",
        "nope",
        dir.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no event's name contains `nope`"));
    let out = opscope(&["critical-path", "--instance", "5", dir.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("has 1 instance(s)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A trace without `ProfilerStep` (a TensorFlow timeline's categories, the program's own
/// `train_step_N` ranges) has the path of the step `steps` finds: through the thread's
/// three ops one after another, their time (HTA weighs the step from one op's end to
/// the next op's start 0), all bound by the host. It said
/// "no event's name contains `ProfilerStep`" for every recording and XPlane trace.
#[test]
fn a_trace_without_profiler_steps_has_the_path_of_its_steps() {
    let dir = scratch_dir("critical-path-steps");
    let mut events = vec![
        serde_json::json!({"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "train"}}),
    ];
    // Three steps of 1 ms, each three ops of 200 µs with 50 µs between them.
    for step in 0..3i64 {
        let start = 1_000 + step * 1_000;
        events.push(
            serde_json::json!({"ph": "X", "name": format!("train_step_{step}"),
            "cat": "user_annotation", "ts": start, "dur": 1_000, "pid": 7, "tid": 1}),
        );
        for (k, op) in ["Conv2D", "Relu", "MatMul"].iter().enumerate() {
            events.push(serde_json::json!({"ph": "X", "name": op, "cat": "Op",
                "ts": start + 100 + 250 * k as i64, "dur": 200, "pid": 7, "tid": 1}));
        }
    }
    let file = dir.join("steps.json");
    std::fs::write(
        &file,
        serde_json::json!({ "traceEvents": events }).to_string(),
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let json = |args: &[&str]| -> Value {
        let out = opscope_ok(&[&["critical-path", "--format", "json"], args, &[file]].concat());
        serde_json::from_slice(&out.stdout).unwrap()
    };
    for (args, step, start_us) in [
        (&[][..], "train_step_0", 1_000),
        (&["--step", "2"][..], "train_step_2", 3_000),
        (&["--instance", "1"][..], "train_step_1", 2_000),
    ] {
        let path = json(args);
        assert_eq!(path["step"], step, "{args:?}: {path}");
        assert_eq!(path["start_ns"], start_us * 1000, "{path}");
        assert_eq!(path["length_ns"], 3 * 200 * 1000, "{args:?}: {path}");
        let kinds: Vec<&str> = path["edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "operator",
                "dependency",
                "operator",
                "dependency",
                "operator"
            ]
        );
        let summary = path["summary"].as_array().unwrap();
        assert_eq!(summary.len(), 1, "{path}");
        assert_eq!(summary[0]["bound_by"], "cpu_bound");
        for e in path["edges"].as_array().unwrap() {
            let attributed = e["attributed"]["name"].as_str().unwrap_or("");
            assert!(
                ["", "Conv2D", "Relu", "MatMul"].contains(&attributed),
                "{e}"
            );
        }
    }
    // A step number not among them names those there are.
    let out = opscope(&["critical-path", "--step", "9", file]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no step found is numbered 9")
            && err.contains("train_step_0, train_step_1, train_step_2"),
        "{err}"
    );
}
