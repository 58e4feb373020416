//! Correlation on an XPlane with GPUs: every kernel and copy is linked, through
//! `correlation_id`, to a host launch event that carries the same id and starts before it;
//! so in xprof's trace viewer JSON of the same profile, which writes every stat as a
//! string.

mod common;

use common::{load, shared};
use opscope_analysis::correlate;
use opscope_model::args::ArgValue;

/// The GPU profile as an XPlane and as xprof's trace viewer JSON of it.
const GPU_PROFILES: [&str; 2] = [
    "traces/xplane/GPU-multi-worker/34.83.195.179_6003.xplane.pb",
    "traces/xplane/xprof-golden/GPU-multi-worker/trace_viewer.json.gz",
];

#[test]
fn xplane_gpu_work_is_linked_to_its_launch() {
    let Some(shared) = shared() else {
        return;
    };
    for file in GPU_PROFILES {
        let trace = load(&shared.join(file));
        work_is_linked_to_its_launch(&trace);
    }
}

fn work_is_linked_to_its_launch(trace: &opscope_model::Trace) {
    let c = correlate::correlate(trace);
    assert!(c.device_slices > 1500, "{} device slices", c.device_slices);
    assert_eq!(c.unattributed, 0);
    let key = trace.strings.find("correlation_id").unwrap();
    let id = |i: usize| match trace.args.find(trace.slices.args[i], key) {
        Some(ArgValue::Int(v)) => v,
        other => panic!("slice {i}: correlation_id {other:?}"),
    };
    for i in (0..trace.slices.len()).filter(|&i| correlate::is_device_work(trace, i)) {
        let call = c.launch_of(i).unwrap();
        assert_eq!(id(call), id(i));
        assert!(
            trace.slices.ts[call] <= trace.slices.ts[i],
            "work {i} starts before its launch"
        );
    }
}

/// Per kernel name, instances, total, minimum and maximum time equal xprof's
/// `kernel_stats` (2.24.2) summed over its rows of that name (xprof splits a kernel by
/// launch shape). Our times are whole ns (XPlane has ps), so totals may differ by up to
/// 1 ns per instance.
#[test]
fn kernel_stats_agree_with_xprof() {
    use opscope_analysis::kernel_stats::{kernel_stats, KernelStatsOptions};
    use std::collections::HashMap;
    let Some(shared) = shared() else {
        return;
    };
    let trace = load(&shared.join("traces/xplane/GPU-multi-worker/34.83.195.179_6003.xplane.pb"));
    let ours = kernel_stats(
        &opscope_analysis::Context::new(&trace),
        &KernelStatsOptions::default(),
    );
    let doc: serde_json::Value = serde_json::from_slice(
        &std::fs::read(shared.join("peer-outputs/xprof/GPU-multi-worker/kernel_stats.json"))
            .unwrap(),
    )
    .unwrap();
    let cols: Vec<&str> = doc["cols"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    let col = |name: &str| cols.iter().position(|c| *c == name).unwrap();
    // name → (occurrences, total µs, min µs, max µs)
    let mut xprof: HashMap<String, (u64, f64, f64, f64)> = HashMap::new();
    for row in doc["rows"].as_array().unwrap() {
        let cell = |name: &str| &row["c"][col(name)]["v"];
        let entry = xprof
            .entry(cell("kernel_name").as_str().unwrap().to_string())
            .or_insert((0, 0.0, f64::INFINITY, 0.0));
        entry.0 += cell("occurrences").as_f64().unwrap() as u64;
        entry.1 += cell("total_duration_us").as_f64().unwrap();
        entry.2 = entry.2.min(cell("min_duration_us").as_f64().unwrap());
        entry.3 = entry.3.max(cell("max_duration_us").as_f64().unwrap());
    }
    assert_eq!(ours.len(), xprof.len(), "kernel names");
    for row in &ours {
        let (n, total, min, max) = xprof[&row.name];
        assert_eq!(row.instances, n, "{}", row.name);
        let close = |a: f64, b: f64, slack_us: f64| (a - b).abs() <= slack_us + 1e-6;
        assert!(
            close(row.total_ns as f64 / 1000.0, total, n as f64 * 0.001),
            "{}: total {} vs {total}",
            row.name,
            row.total_ns
        );
        assert!(
            close(row.min_ns as f64 / 1000.0, min, 0.001),
            "{}: min {} vs {min}",
            row.name,
            row.min_ns
        );
        assert!(
            close(row.max_ns as f64 / 1000.0, max, 0.001),
            "{}: max {} vs {max}",
            row.name,
            row.max_ns
        );
    }
}

/// Copy bytes per GPU and direction come from XPlane's `memcpy_details` (`size:N`): the
/// transfer table adds up to the sizes those strings give.
#[test]
fn xplane_copy_bytes_come_from_memcpy_details() {
    let Some(shared) = shared() else {
        return;
    };
    for file in GPU_PROFILES {
        copy_bytes_come_from_memcpy_details(&load(&shared.join(file)));
    }
}

fn copy_bytes_come_from_memcpy_details(trace: &opscope_model::Trace) {
    use opscope_analysis::gpu::{self, GpuOptions};
    use std::collections::HashMap;
    let key = trace.strings.find("memcpy_details").unwrap();
    let mut want: HashMap<(String, String), u64> = HashMap::new();
    for i in (0..trace.slices.len()).filter(|&i| correlate::is_device_work(trace, i)) {
        if let Some(ArgValue::Str(d)) = trace.args.find(trace.slices.args[i], key) {
            let size: u64 = trace
                .str(d)
                .split("size:")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            let device = trace.tracks[trace.slices.track[i] as usize].device.unwrap();
            let device = format!("gpu {}", trace.devices[device.index()].index);
            *want
                .entry((device, trace.slices.kind(i).name().to_string()))
                .or_default() += size;
        }
    }
    let report = gpu::analyze(
        &opscope_analysis::Context::new(trace),
        &GpuOptions::default(),
    );
    let mut got: HashMap<(String, String), u64> = HashMap::new();
    for rank in &report.ranks {
        for t in &rank.transfers {
            got.insert((rank.device.clone().unwrap(), t.direction.clone()), t.bytes);
        }
    }
    assert_eq!(got, want);
    assert_eq!(
        got[&("gpu 4".to_string(), "memcpy_h2d".to_string())],
        37_447
    );
}
