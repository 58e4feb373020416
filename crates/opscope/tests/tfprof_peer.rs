//! `stats op` and `stats scope` on a TensorFlow RunMetadata and its GraphDef, against
//! tfprof on the same files: the stored peer outputs (tfprof's text, compared in its own
//! units), and tfprof run here through `tests/oracle/tfprof_views.py` (its protos,
//! compared to the microsecond and the byte, with every memory column).

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// The run, and the folder of stored tfprof outputs for it.
fn run_and_peer() -> Option<(PathBuf, PathBuf)> {
    let traces = shared_traces()?;
    Some((
        traces.join("tf-timeline/generated-here/tf2.21-cpu-mlp"),
        traces.join("../peer-outputs/tf/generated-mlp"),
    ))
}

/// tfprof's `FormatTime`.
fn tfprof_time(micros: i64) -> String {
    if micros > 1_000_000 {
        format!("{:.2}sec", micros as f64 / 1e6)
    } else if micros > 1_000 {
        format!("{:.2}ms", micros as f64 / 1e3)
    } else {
        format!("{micros}us")
    }
}

/// tfprof's `FormatMemory`.
fn tfprof_bytes(bytes: i64) -> String {
    if bytes > 1_000_000_000 {
        format!("{:.2}GB", bytes as f64 / 1e9)
    } else if bytes > 1_000_000 {
        format!("{:.2}MB", bytes as f64 / 1e6)
    } else if bytes > 1_000 {
        format!("{:.2}KB", bytes as f64 / 1e3)
    } else {
        format!("{bytes}B")
    }
}

/// The options of `ProfileOptionBuilder.time_and_memory()`, which made the stored
/// outputs, in opscope's spelling.
const TIME_AND_MEMORY: &[&str] = &[
    "-min_micros",
    "1",
    "-min_bytes",
    "1",
    "-account_displayed_op_only",
    "true",
    "-tfprof_micros",
];

/// Runs `opscope stats VIEW` with `options` on the run, as JSON.
fn stats_json(view: &str, run: &Path, options: &[&str]) -> Vec<Value> {
    // Tests run at once in one process: each run and call gets a file of its own.
    let scratch = scratch_dir(&format!(
        "tfprof-{}-{view}-{}",
        run.file_name().unwrap().to_string_lossy(),
        options.join(" ").replace(['/', ' ', ','], "_")
    ));
    let out = scratch.join("stats.json");
    let outfile = format!("json:outfile={}", out.display());
    let run_meta = run.join("run_meta");
    let mut args = vec![
        "stats",
        view,
        run_meta.to_str().unwrap(),
        "-output",
        &outfile,
    ];
    args.extend_from_slice(options);
    opscope_ok(&args);
    serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap()
}

fn int(v: &Value, key: &str) -> i64 {
    v[key]
        .as_i64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

/// tfprof's rows or nodes: the lines after `node name | …`.
fn peer_lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .skip_while(|l| !l.starts_with("node name |"))
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn op_view_equals_the_stored_tfprof_output() {
    let Some((run, peer)) = run_and_peer() else {
        return;
    };
    let ours = stats_json("op", &run, TIME_AND_MEMORY);
    // `Relu   524.29KB (100.00%, 27.72%),  5.81ms (100.00%, 80.14%),  0us (…),  5.81ms (…)`
    let theirs: Vec<[String; 5]> = peer_lines(&peer.join("tfprof_op_time_and_memory.txt"))
        .iter()
        .map(|line| {
            let (name, rest) = line.split_once(' ').unwrap();
            let values: Vec<String> = rest
                .split("),")
                .map(|cell| cell.split_whitespace().next().unwrap().to_string())
                .collect();
            [
                name.to_string(),
                values[0].clone(),
                values[1].clone(),
                values[2].clone(),
                values[3].clone(),
            ]
        })
        .collect();
    assert_eq!(theirs.len(), 24);
    let ours: Vec<[String; 5]> = ours
        .iter()
        .map(|r| {
            let (cpu, accel) = (int(r, "cpu_ns") / 1000, int(r, "accelerator_ns") / 1000);
            [
                r["name"].as_str().unwrap().to_string(),
                tfprof_bytes(int(r, "bytes")),
                tfprof_time(cpu + accel),
                tfprof_time(accel),
                tfprof_time(cpu),
            ]
        })
        .collect();
    // Same rows, same order, same requested bytes and times in tfprof's units.
    assert_eq!(ours, theirs);
}

#[test]
fn scope_view_equals_the_stored_tfprof_output() {
    let Some((run, peer)) = run_and_peer() else {
        return;
    };
    let ours = stats_json("scope", &run, TIME_AND_MEMORY);
    // `  gradients/MatMul_grad (0B/802.82KB, 0us/1.02ms, 0us/0us, 0us/1.02ms)`
    let theirs: Vec<String> = peer_lines(&peer.join("tfprof_scope_time_and_memory.txt"))
        .iter()
        .map(|line| {
            let depth = (line.len() - line.trim_start().len()) / 2;
            let (name, values) = line.trim_start().split_once(" (").unwrap();
            format!("{depth} {name} ({values}")
        })
        .collect();
    let ours: Vec<String> = ours
        .iter()
        .map(|n| {
            let own_micros = (int(n, "self_cpu_ns") + int(n, "self_accelerator_ns")) / 1000;
            let total_cpu = int(n, "shown_total_cpu_ns") / 1000;
            let total_accel = int(n, "shown_total_accelerator_ns") / 1000;
            let root = n["index"] == 0;
            let own = |text: String| if root { "--".to_string() } else { text };
            format!(
                "{} {} ({}/{}, {}/{}, {}/{}, {}/{})",
                int(n, "shown_depth"),
                if root {
                    "_TFProfRoot".to_string()
                } else {
                    n["path"].as_str().unwrap().to_string()
                },
                own(tfprof_bytes(
                    n["self_memory"]["requested"].as_i64().unwrap()
                )),
                tfprof_bytes(n["shown_total_memory"]["requested"].as_i64().unwrap()),
                own(tfprof_time(own_micros)),
                tfprof_time(total_cpu + total_accel),
                own(tfprof_time(int(n, "self_accelerator_ns") / 1000)),
                tfprof_time(total_accel),
                own(tfprof_time(int(n, "self_cpu_ns") / 1000)),
                tfprof_time(total_cpu),
            )
        })
        .collect();
    assert_eq!(theirs.len(), 34);
    assert_eq!(ours, theirs);
}

/// tfprof run here, or `None` (saying why) off CI when TensorFlow is missing.
fn tfprof_live(run: &Path) -> Option<Value> {
    if !python_with(&["tensorflow"]) {
        return None;
    }
    Some(common::run_oracle_json("tfprof_views.py", &[run]))
}

/// Every column of both views, as tfprof's own integers, with its limits and without.
#[test]
fn tfprof_itself_agrees_to_the_microsecond_and_byte() {
    let Some((run, _)) = run_and_peer() else {
        return;
    };
    let Some(tfprof) = tfprof_live(&run) else {
        return;
    };
    let select = [
        "-select",
        "occurrence,micros,bytes,peak_bytes,residual_bytes,output_bytes",
    ];
    let row_values = |r: &Value| -> [i64; 6] {
        [
            int(r, "occurrence"),
            (int(r, "cpu_ns") + int(r, "accelerator_ns")) / 1000,
            int(r, "bytes"),
            int(r, "peak_bytes"),
            int(r, "residual_bytes"),
            int(r, "output_bytes"),
        ]
    };
    let peer_values = |r: &Value| -> [i64; 6] {
        [
            int(r, "runs"),
            int(r, "exec_micros"),
            int(r, "requested_bytes"),
            int(r, "peak_bytes"),
            int(r, "residual_bytes"),
            int(r, "output_bytes"),
        ]
    };
    // The op view with time_and_memory()'s limits: the same rows in the same order.
    let mut options = TIME_AND_MEMORY.to_vec();
    options.extend_from_slice(&select);
    let ours: Vec<(String, [i64; 6])> = stats_json("op", &run, &options)
        .iter()
        .map(|r| (r["name"].as_str().unwrap().to_string(), row_values(r)))
        .collect();
    let theirs: Vec<(String, [i64; 6])> = tfprof["op_default"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].as_str().unwrap().to_string(), peer_values(r)))
        .collect();
    assert_eq!(ours, theirs);

    // No limits: tfprof also lists the graph's op types that never ran (all zero);
    // otherwise the same rows in the same order (the executor's `_SOURCE`, which
    // tfprof leaves out by name, is no op of ours either).
    let ours: Vec<(String, [i64; 6])> =
        stats_json("op", &run, &["-tfprof_micros", select[0], select[1]])
            .iter()
            .map(|r| (r["name"].as_str().unwrap().to_string(), row_values(r)))
            .collect();
    let mut theirs: Vec<(String, [i64; 6])> = Vec::new();
    for r in tfprof["op_all"].as_array().unwrap() {
        let values = peer_values(r);
        if values[0] == 0 {
            assert_eq!(values, [0; 6], "{r}: a type that never ran has nothing");
            continue;
        }
        theirs.push((r["name"].as_str().unwrap().to_string(), values));
    }
    assert_eq!(ours, theirs);

    // The scope view: every node's self and shown-total figures.
    let node_values = |n: &Value| -> [i64; 9] {
        let m = |k: &str, f: &str| n[k][f].as_i64().unwrap();
        [
            (int(n, "self_cpu_ns") + int(n, "self_accelerator_ns")) / 1000,
            (int(n, "shown_total_cpu_ns") + int(n, "shown_total_accelerator_ns")) / 1000,
            m("self_memory", "requested"),
            m("shown_total_memory", "requested"),
            m("self_memory", "peak"),
            m("shown_total_memory", "peak"),
            m("shown_total_memory", "residual"),
            m("self_memory", "output"),
            m("shown_total_memory", "output"),
        ]
    };
    let peer_node = |n: &Value| -> [i64; 9] {
        [
            int(n, "exec_micros"),
            int(n, "total_exec_micros"),
            int(n, "requested_bytes"),
            int(n, "total_requested_bytes"),
            int(n, "peak_bytes"),
            int(n, "total_peak_bytes"),
            int(n, "total_residual_bytes"),
            int(n, "output_bytes"),
            int(n, "total_output_bytes"),
        ]
    };
    let name_of = |n: &Value| -> String {
        if n["index"] == 0 {
            "_TFProfRoot".into()
        } else {
            n["path"].as_str().unwrap().to_string()
        }
    };
    let ours: Vec<(i64, String, [i64; 9])> = stats_json("scope", &run, &options)
        .iter()
        .map(|n| (int(n, "shown_depth"), name_of(n), node_values(n)))
        .collect();
    let theirs: Vec<(i64, String, [i64; 9])> = tfprof["scope_default"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                int(n, "depth"),
                n["name"].as_str().unwrap().to_string(),
                peer_node(n),
            )
        })
        .collect();
    assert_eq!(ours, theirs);

    // And without limits, node by node (tfprof also has the graph's nodes that never
    // ran, all zero).
    let ours: std::collections::HashMap<String, [i64; 9]> = stats_json(
        "scope",
        &run,
        &["-tfprof_micros", "-select", "micros,bytes"],
    )
    .iter()
    .map(|n| (name_of(n), node_values(n)))
    .collect();
    let mut matched = 0;
    for n in tfprof["scope_all"].as_array().unwrap() {
        let name = n["name"].as_str().unwrap();
        let expected = peer_node(n);
        match ours.get(name) {
            Some(values) => {
                assert_eq!(values, &expected, "{name}");
                matched += 1;
            }
            None => assert_eq!(peer_node(n), [0; 9], "{name} ran but is missing"),
        }
    }
    assert_eq!(matched, ours.len(), "every node of ours is tfprof's");
}

/// A TF 1.x GPU step written by `tests/oracle/tf1_gpu_run_meta.py` with TensorFlow's
/// protos (thread id 0 everywhere, ops of one device overlapping, kernels on
/// `stream:N` and again on `stream:all`, copies on `stream:N` and again on `memcpy`),
/// in a directory of its own; `None` off CI without TensorFlow.
fn tf1_gpu_run() -> Option<Scratch> {
    if !python_with(&["tensorflow"]) {
        return None;
    }
    let dir = scratch_dir("tf1-gpu-run");
    common::oracle_stdout("tf1_gpu_run_meta.py", &[&dir]);
    Some(dir)
}

/// tfprof's op and scope views of the GPU step, to the µs: calls, CPU time (the
/// entries on the op's own device), accelerator time (its entries on `stream:all`),
/// and requested bytes, row by row and node by node.
#[test]
fn tfprof_itself_agrees_on_a_tf1_gpu_run() {
    let Some(run) = tf1_gpu_run() else {
        return;
    };
    let Some(tfprof) = tfprof_live(&run) else {
        return;
    };
    let select = [
        "-select",
        "occurrence,micros,cpu_micros,accelerator_micros,bytes",
    ];
    let mut options = TIME_AND_MEMORY.to_vec();
    options.extend_from_slice(&select);
    let ours_row = |r: &Value| -> (String, [i64; 5]) {
        let (cpu, accel) = (int(r, "cpu_ns") / 1000, int(r, "accelerator_ns") / 1000);
        (
            r["name"].as_str().unwrap().to_string(),
            [
                int(r, "occurrence"),
                cpu + accel,
                cpu,
                accel,
                int(r, "bytes"),
            ],
        )
    };
    let peer_row = |r: &Value| -> (String, [i64; 5]) {
        (
            r["name"].as_str().unwrap().to_string(),
            [
                int(r, "runs"),
                int(r, "exec_micros"),
                int(r, "cpu_exec_micros"),
                int(r, "accelerator_exec_micros"),
                int(r, "requested_bytes"),
            ],
        )
    };
    let peer_rows = |view: &str| -> Vec<(String, [i64; 5])> {
        tfprof[view]
            .as_array()
            .unwrap()
            .iter()
            .map(peer_row)
            .collect()
    };
    let ours: Vec<_> = stats_json("op", &run, &options)
        .iter()
        .map(ours_row)
        .collect();
    let theirs = peer_rows("op_default");
    assert!(theirs.len() >= 30, "{theirs:?}");
    assert_eq!(ours, theirs);

    // Without limits: tfprof also has the graph's types that never ran and the copies'
    // `edge_*` nodes it made from the run (nothing on its own device, so all zero).
    let ours: Vec<_> = stats_json("op", &run, &["-tfprof_micros", select[0], select[1]])
        .iter()
        .map(ours_row)
        .collect();
    let theirs: Vec<_> = peer_rows("op_all")
        .into_iter()
        .filter(|r| r.1 != [0; 5])
        .collect();
    assert_eq!(ours, theirs);

    // The scope view: every node's self and total CPU and accelerator time, and bytes.
    let name_of = |n: &Value| -> String {
        if n["index"] == 0 {
            "_TFProfRoot".into()
        } else {
            n["path"].as_str().unwrap().to_string()
        }
    };
    let ours_node = |n: &Value| -> (i64, String, [i64; 5]) {
        (
            int(n, "shown_depth"),
            name_of(n),
            [
                int(n, "self_cpu_ns") / 1000,
                int(n, "shown_total_cpu_ns") / 1000,
                int(n, "self_accelerator_ns") / 1000,
                int(n, "shown_total_accelerator_ns") / 1000,
                n["shown_total_memory"]["requested"].as_i64().unwrap(),
            ],
        )
    };
    let peer_node = |n: &Value| -> (i64, String, [i64; 5]) {
        (
            int(n, "depth"),
            n["name"].as_str().unwrap().to_string(),
            [
                int(n, "cpu_exec_micros"),
                int(n, "total_cpu_exec_micros"),
                int(n, "accelerator_exec_micros"),
                int(n, "total_accelerator_exec_micros"),
                int(n, "total_requested_bytes"),
            ],
        )
    };
    let ours: Vec<_> = stats_json("scope", &run, &options)
        .iter()
        .map(ours_node)
        .collect();
    let theirs: Vec<_> = tfprof["scope_default"]
        .as_array()
        .unwrap()
        .iter()
        .map(peer_node)
        .collect();
    assert!(theirs.len() >= 30, "{theirs:?}");
    assert_eq!(ours, theirs);

    // Without limits, node by node.
    let ours: std::collections::HashMap<String, [i64; 5]> = stats_json(
        "scope",
        &run,
        &["-tfprof_micros", "-select", "micros,bytes"],
    )
    .iter()
    .map(|n| {
        let (_, name, values) = ours_node(n);
        (name, values)
    })
    .collect();
    let mut matched = 0;
    for n in tfprof["scope_all"].as_array().unwrap() {
        let (_, name, expected) = peer_node(n);
        match ours.get(&name) {
            Some(values) => {
                assert_eq!(values, &expected, "{name}");
                matched += 1;
            }
            None => assert_eq!(expected, [0; 5], "{name} ran but is missing"),
        }
    }
    assert_eq!(matched, ours.len(), "every node of ours is tfprof's");
}
