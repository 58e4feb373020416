//! Flame graphs and the stack formats on real traces: `flame` (SVG), `convert --to
//! folded` and `--to speedscope`, checked against an independent reading of the raw
//! trace (`tests/oracle/flame_totals.py`) and against what each format requires.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use common::{opscope_ok, run_oracle_json, scratch_dir, shared_traces};
use serde_json::Value;

/// Kineto traces of the shared corpus with GPU work, small enough for a test.
fn kineto_traces() -> Vec<PathBuf> {
    let Some(traces) = shared_traces() else {
        return Vec::new();
    };
    [
        "kineto/hta/trace_filter/sampled_rank-0.json.gz",
        "kineto/hta/trace_filter/sampled_rank-1.json.gz",
    ]
    .iter()
    .map(|p| traces.join(p))
    .filter(|p| p.exists())
    .collect()
}

fn folded(trace: &Path, out: &Path) -> Vec<(String, u64)> {
    let _ = std::fs::remove_file(out);
    opscope_ok(&[
        "convert",
        trace.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    std::fs::read_to_string(out)
        .unwrap()
        .lines()
        .map(|l| {
            let (stack, ns) = l.rsplit_once(' ').expect("`stack weight` lines");
            (stack.to_string(), ns.parse().expect("a whole number of ns"))
        })
        .collect()
}

#[test]
fn folded_stacks_hold_every_ns_of_cpu_and_device_time() {
    let traces = kineto_traces();
    if traces.is_empty() {
        assert!(std::env::var_os("CI").is_none(), "CI has the shared traces");
        opscope_corpus::skip("the shared traces are not here (OPSCOPE_SHARED)");
        return;
    }
    let dir = scratch_dir("flame-folded");
    for trace in traces {
        let want = run_oracle_json("flame_totals.py", &[&trace]);
        let stacks = folded(&trace, &dir.join("t.folded"));
        let device: u64 = stacks
            .iter()
            .filter(|(s, _)| s.rsplit(';').next().unwrap().starts_with('['))
            .map(|(_, ns)| ns)
            .sum();
        let cpu: u64 = stacks.iter().map(|(_, ns)| ns).sum::<u64>() - device;
        let name = trace.display();
        assert_eq!(
            device,
            want["device_ns"].as_u64().unwrap(),
            "{name}: device time"
        );
        let want_cpu = want["cpu_ns"].as_u64().unwrap() as f64;
        // The model clips a slice that outlives the one around it (Kineto's rounding).
        assert!(
            (cpu as f64 - want_cpu).abs() <= 1e-4 * want_cpu,
            "{name}: CPU time {cpu} against {want_cpu}"
        );
        // Every stack starts at a process, then its thread; kernels hang under ops.
        for (stack, _) in &stacks {
            let frames: Vec<&str> = stack.split(';').collect();
            assert!(frames.len() >= 3, "{stack}");
            assert!(
                frames[0].contains("(pid ") && frames[1].contains("(tid "),
                "{stack}"
            );
        }
        let kernels_under_ops = stacks
            .iter()
            .filter(|(s, _)| s.contains(";[kernel] ") && s.contains("aten::"))
            .count();
        assert!(kernels_under_ops > 0, "{name}: no kernel under an aten op");
    }
}

#[test]
fn the_flame_graph_is_an_svg_with_the_ops_and_speedscope_nests() {
    let dir = scratch_dir("flame-svg");
    for trace in kineto_traces() {
        let svg = dir.join("flame.svg");
        let _ = std::fs::remove_file(&svg);
        opscope_ok(&[
            "flame",
            trace.to_str().unwrap(),
            "-o",
            svg.to_str().unwrap(),
        ]);
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("<svg") && text.trim_end().ends_with("</svg>"));
        // The busiest ops of the folded stacks are drawn (inferno names each frame in
        // a <title>: `name (N ns, P%)`).
        let stacks = folded(&trace, &dir.join("t.folded"));
        let mut by_leaf: HashMap<&str, u64> = HashMap::new();
        for (stack, ns) in &stacks {
            *by_leaf
                .entry(stack.rsplit(';').next().unwrap())
                .or_default() += ns;
        }
        let mut leaves: Vec<(&str, u64)> = by_leaf.into_iter().collect();
        leaves.sort_by_key(|l| std::cmp::Reverse(l.1));
        for (leaf, _) in leaves.iter().take(5) {
            let escaped = leaf
                .replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;");
            assert!(
                text.contains(&format!("<title>{escaped} (")),
                "{leaf} not drawn"
            );
        }
        // An existing file is not replaced without --force.
        let again = common::opscope(&[
            "flame",
            trace.to_str().unwrap(),
            "-o",
            svg.to_str().unwrap(),
        ]);
        assert!(!again.status.success());

        // speedscope: every profile's events open and close as a stack, in time order.
        let out = dir.join("t.speedscope.json");
        let _ = std::fs::remove_file(&out);
        opscope_ok(&[
            "convert",
            trace.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ]);
        let v: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        let frames = v["shared"]["frames"].as_array().unwrap().len() as u64;
        let profiles = v["profiles"].as_array().unwrap();
        assert!(profiles.len() >= 2, "threads and streams");
        for p in profiles {
            assert_eq!(p["type"], "evented");
            let mut open: Vec<u64> = Vec::new();
            let mut last = i64::MIN;
            for e in p["events"].as_array().unwrap() {
                let (frame, at) = (e["frame"].as_u64().unwrap(), e["at"].as_i64().unwrap());
                assert!(frame < frames && at >= last, "{}: {e}", p["name"]);
                last = at;
                match e["type"].as_str().unwrap() {
                    "O" => open.push(frame),
                    "C" => assert_eq!(open.pop(), Some(frame), "{}", p["name"]),
                    other => panic!("event type {other}"),
                }
            }
            assert!(open.is_empty());
        }
    }
}
