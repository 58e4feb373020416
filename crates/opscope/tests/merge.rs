//! `opscope merge`: hosts put on one clock from their collectives. Four hosts' Kineto
//! traces of one job are written here with known true times, then each host's clock is
//! skewed by a seeded offset (hundreds of µs) and drift (tens of ppm); the corrections
//! found must hold the truth within their stated bounds, the bounds must be tight where
//! collectives are frequent, the collectives' exits must line up again, and the
//! straggler must be the one of the unskewed job. A trace whose collectives cannot be
//! matched (the shared `trace_filter` ranks are sampled: events were dropped) is left
//! on its own clock, and said.

mod common;

use std::path::Path;

use common::{opscope, opscope_ok, scratch_dir, shared_traces};
use serde_json::{json, Value};

const HOSTS: usize = 4;
const STEPS: usize = 10;
const COLLECTIVES_PER_STEP: usize = 20;
const STEP_NS: i64 = 20_000_000;

/// A small deterministic generator (xorshift).
struct Rand(u64);

impl Rand {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Each host's clock against true time: local = true·(1 + drift) + offset.
fn skews(seed: u64) -> Vec<(f64, f64)> {
    let mut r = Rand(seed);
    (0..HOSTS)
        .map(|h| {
            if h == 0 {
                (0.0, 0.0)
            } else {
                let offset = 200_000.0 + r.below(600_000) as f64;
                let sign = if r.below(2) == 0 { -1.0 } else { 1.0 };
                let drift = (10.0 + r.below(40) as f64) * 1e-6;
                (sign * offset, if r.below(2) == 0 { -drift } else { drift })
            }
        })
        .collect()
}

/// Writes the job's four traces into `dir`, each host's times through `skew`. Rank 2
/// computes most; every rank enters each all-reduce when its compute ends, and all
/// leave 6-7 µs after the last has entered (a small all-reduce in NCCL's LL protocol
/// within a node). That latency is what bounds any fit from collectives: no constraint
/// says more than "within it".
fn write_job(dir: &Path, skew: &[(f64, f64)]) {
    std::fs::create_dir_all(dir).unwrap();
    let base: i64 = 1_700_000_000_000_000_000;
    let mut r = Rand(0x5eed);
    let mut events: Vec<Vec<Value>> = vec![Vec::new(); HOSTS];
    let us = |h: usize, t: i64| -> f64 {
        let (offset, drift) = skew[h];
        let local = (t - base) as f64 * (1.0 + drift) + offset;
        // Kineto's µs with three decimals: nanoseconds.
        (local.round()) / 1000.0
    };
    let mut correlation = 1;
    for step in 0..STEPS {
        let step_start = base + 1_000_000 + step as i64 * STEP_NS;
        for (h, evs) in events.iter_mut().enumerate() {
            let (s, e) = (us(h, step_start), us(h, step_start + STEP_NS - 100_000));
            evs.push(
                json!({"ph": "X", "cat": "user_annotation", "name": format!("ProfilerStep#{step}"),
                "pid": 100, "tid": 100, "ts": s, "dur": e - s}),
            );
        }
        let mut t = step_start + 50_000;
        for _ in 0..COLLECTIVES_PER_STEP {
            let mut enter = [0i64; HOSTS];
            for h in 0..HOSTS {
                let compute = 300_000 + r.below(200_000) as i64 + if h == 2 { 60_000 } else { 0 };
                let (s, e) = (us(h, t), us(h, t + compute));
                events[h].push(json!({"ph": "X", "cat": "kernel", "name": "volta_sgemm_128x64_nn",
                    "pid": 0, "tid": 7, "ts": s, "dur": e - s,
                    "args": {"device": 0, "stream": 7, "correlation": h as i64 * 1_000_000 + correlation}}));
                correlation += 1;
                enter[h] = t + compute + r.below(3_000) as i64;
            }
            let last = *enter.iter().max().unwrap();
            for h in 0..HOSTS {
                let leave = last + 6_000 + r.below(1_000) as i64;
                let (s, e) = (us(h, enter[h]), us(h, leave));
                events[h].push(json!({"ph": "X", "cat": "kernel",
                    "name": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
                    "pid": 0, "tid": 20, "ts": s, "dur": e - s,
                    // The host in the id too: a JSON export puts every rank's GPU 0 in one pid.
                    "args": {"device": 0, "stream": 20, "correlation": h as i64 * 1_000_000 + correlation}}));
                correlation += 1;
            }
            t = last + 40_000;
        }
    }
    for (h, evs) in events.into_iter().enumerate() {
        let mut all = vec![
            json!({"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}}),
            json!({"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}}),
            json!({"ph": "M", "name": "thread_name", "pid": 0, "tid": 20, "args": {"name": "stream 20"}}),
        ];
        all.extend(evs);
        let trace = json!({
            "host_name": format!("node{h}"),
            "distributedInfo": {"rank": h, "world_size": HOSTS},
            "traceEvents": all,
        });
        std::fs::write(
            dir.join(format!("rank-{h}.json")),
            serde_json::to_string(&trace).unwrap(),
        )
        .unwrap();
    }
}

fn json_of(args: &[&str]) -> Value {
    serde_json::from_slice(&opscope_ok(args).stdout).unwrap()
}

#[test]
fn skewed_hosts_are_put_back_on_one_clock_within_their_bounds() {
    let dir = scratch_dir("merge-skewed");
    let truth = dir.join("true");
    write_job(&truth, &[(0.0, 0.0); HOSTS]);
    let skew = skews(42);
    let skewed = dir.join("skewed");
    write_job(&skewed, &skew);

    let merged = dir.join("merged.json");
    let report = json_of(&[
        "merge",
        skewed.to_str().unwrap(),
        "-o",
        merged.to_str().unwrap(),
        "--format",
        "json",
        "--no-cache",
    ]);
    let domains = report["domains"].as_array().unwrap();
    assert_eq!(domains.len(), HOSTS);
    let mut bounds = Vec::new();
    for d in domains {
        let h: usize = d["name"].as_str().unwrap()["node".len()..].parse().unwrap();
        if h == 0 {
            assert_eq!(d["reference"], true);
            continue;
        }
        let bound = d["bound_ns"].as_f64().expect("a bound");
        bounds.push(bound);
        assert!(d["drift_known"].as_bool().unwrap(), "{d}");
        // The host's first event, in its own time: the first step's start.
        let (offset, drift) = skew[h];
        let local = |t: f64| t * (1.0 + drift) + offset;
        let start = local(1_000_000.0).round();
        let end = local(1_000_000.0 + (STEPS as f64) * STEP_NS as f64).round();
        let found_drift = d["drift_ppm"].as_f64().unwrap() * 1e-6;
        let found_offset = d["offset_ns"].as_f64().unwrap();
        for x in [start, end] {
            // True time of local time x, against the correction's.
            let true_time = (x - offset) / (1.0 + drift);
            let corrected = x + found_offset + found_drift * (x - start);
            assert!(
                (corrected - true_time).abs() <= bound + 1.0,
                "{}: at local {x} corrected {corrected} true {true_time} bound {bound}",
                d["name"]
            );
        }
    }
    bounds.sort_by(f64::total_cmp);
    eprintln!("bounds of the corrections (ns): {bounds:?}");
    let median = bounds[bounds.len() / 2];
    assert!(median < 10_000.0, "median bound {median} ns: {bounds:?}");

    // After merging, every rank of an all-reduce leaves it at the same time again (the
    // exits were 6-7 µs after the last entry: within 1 µs of each other, plus the
    // bound).
    let text = std::fs::read_to_string(&merged).unwrap();
    let out: Value = serde_json::from_str(&text).unwrap();
    let mut exits: std::collections::BTreeMap<i64, Vec<f64>> = Default::default();
    for e in out["traceEvents"].as_array().unwrap() {
        if e["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("ncclKernel_AllReduce"))
        {
            let host = e["args"]["correlation"].as_i64().unwrap() / 1_000_000;
            exits
                .entry(host)
                .or_default()
                .push(e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap());
        }
    }
    assert_eq!(exits.len(), HOSTS, "{:?}", exits.keys());
    let lists: Vec<Vec<f64>> = exits
        .into_values()
        .map(|mut v| {
            v.sort_by(f64::total_cmp);
            v
        })
        .collect();
    let worst_bound = bounds.last().copied().unwrap();
    for k in 0..STEPS * COLLECTIVES_PER_STEP {
        let at: Vec<f64> = lists.iter().map(|l| l[k]).collect();
        let spread = at.iter().cloned().fold(f64::MIN, f64::max)
            - at.iter().cloned().fold(f64::MAX, f64::min);
        assert!(
            spread * 1000.0 <= 1_000.0 + 2.0 * worst_bound,
            "all-reduce {k}: exits {at:?} (µs) spread {spread} µs"
        );
    }

    // `info` says each file's correction, as `merge` found it.
    let info = json_of(&[
        "info",
        skewed.to_str().unwrap(),
        "--format",
        "json",
        "--no-cache",
    ]);
    for f in info["files"].as_array().unwrap() {
        let host = f["host"].as_str().unwrap();
        let d = domains.iter().find(|d| d["name"] == host).unwrap();
        if host == "node0" {
            assert!(f["clock_correction"].is_null(), "{f}");
            continue;
        }
        let c = &f["clock_correction"];
        assert_eq!(
            c["offset_ns"].as_i64(),
            Some(d["offset_ns"].as_f64().unwrap().round() as i64),
            "{f}"
        );
        assert_eq!(
            c["bound_ns"].as_i64(),
            Some(d["bound_ns"].as_f64().unwrap().ceil() as i64),
            "{f}"
        );
    }
    let gpu_text =
        String::from_utf8(opscope_ok(&["gpu", skewed.to_str().unwrap(), "--no-cache"]).stdout)
            .unwrap();
    assert_eq!(
        gpu_text.matches("on the reference host's clock").count(),
        HOSTS - 1,
        "{gpu_text}"
    );

    // Every command merges a directory of several hosts by itself: the straggler is
    // the unskewed job's.
    let straggler = |dir: &Path| {
        let gpu = json_of(&[
            "gpu",
            dir.to_str().unwrap(),
            "--format",
            "json",
            "--no-cache",
        ]);
        gpu["across"]["straggler"]["at"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(straggler(&truth), "rank 2 gpu 0");
    assert_eq!(straggler(&skewed), straggler(&truth));
}

/// The shared two-rank traces were sampled from a larger job (most collective kernels
/// dropped, and their send/receive kernels' peers unknown): nothing links their
/// clocks, so the ranks keep them, unmoved, and the user is told.
#[test]
fn ranks_nothing_links_keep_their_clocks() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let dir = scratch_dir("merge-sampled");
    let out = dir.join("merged.json");
    let ranks = traces.join("kineto/hta/trace_filter");
    let run = opscope(&[
        "merge",
        "--clock-per-file",
        ranks.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--format",
        "json",
        "--no-cache",
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("its times are its own"), "{err}");
    let report: Value = serde_json::from_slice(&run.stdout).unwrap();
    let other = &report["domains"][1];
    assert!(other["against"].is_null(), "{other}");
    assert_eq!(other["offset_ns"], 0.0, "{other}");
    // Every slice where it was.
    let before = json_of(&["info", ranks.to_str().unwrap(), "--format", "json"]);
    let after = json_of(&["info", out.to_str().unwrap(), "--format", "json"]);
    for key in ["start_ns", "end_ns", "slices"] {
        assert_eq!(before[key], after[key], "{key}");
    }
}

/// A host whose trace lost a collective (its first all-reduce dropped): its instances
/// pair with the wrong ones, the constraints conflict by far more than timestamps'
/// errors, and it keeps its own clock, said with by how much.
#[test]
fn a_host_whose_collectives_do_not_pair_keeps_its_clock() {
    let dir = scratch_dir("merge-dropped");
    let job = dir.join("job");
    write_job(&job, &skews(7));
    let file = job.join("rank-3.json");
    let mut trace: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array_mut().unwrap();
    let first = events
        .iter()
        .position(|e| {
            e["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("ncclKernel"))
        })
        .unwrap();
    events.remove(first);
    std::fs::write(&file, serde_json::to_string(&trace).unwrap()).unwrap();
    let run = opscope(&[
        "merge",
        job.to_str().unwrap(),
        "-o",
        dir.join("merged.json").to_str().unwrap(),
        "--format",
        "json",
        "--no-cache",
    ]);
    assert!(run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("node3: its collectives cannot be matched with node0's"),
        "{err}"
    );
    let report: Value = serde_json::from_slice(&run.stdout).unwrap();
    let node3 = report["domains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "node3")
        .unwrap();
    assert!(node3["against"].is_null(), "{node3}");
    assert!(node3["conflict_ns"].as_f64().unwrap() > 10_000.0, "{node3}");
    // The others are still merged.
    let merged = report["domains"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| !d["against"].is_null())
        .count();
    assert_eq!(merged, 2);
}

/// A file of the job that cannot be read (cut before its first event) is left out with
/// a warning, and is no clock domain: the report names only the hosts it merged.
#[test]
fn a_file_that_could_not_be_read_is_no_clock_domain() {
    let dir = scratch_dir("merge-unreadable");
    let job = dir.join("job");
    write_job(&job, &skews(7));
    std::fs::write(job.join("rank-9.json"), br#"{"traceEvents": [{"ph": "X""#).unwrap();
    let run = opscope(&[
        "merge",
        job.to_str().unwrap(),
        "-o",
        dir.join("merged.json").to_str().unwrap(),
        "--format",
        "json",
        "--no-cache",
        "--force",
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("rank-9.json") && err.contains("still read"),
        "{err}"
    );
    assert!(!err.contains("its times are its own"), "{err}");
    let report: Value = serde_json::from_slice(&run.stdout).unwrap();
    let names: Vec<&str> = report["domains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert!(names.iter().all(|n| !n.contains("rank-9")), "{names:?}");
    assert_eq!(names.len(), 4, "{names:?}");
}
