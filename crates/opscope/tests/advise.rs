//! `opscope advise` on real traces: each rule fires where its anchor's criterion holds
//! and stays silent on a counter-example; tfprof's checkers equal tfprof's own
//! `advise` (run here as the oracle); Nsight Systems' rules equal their criteria
//! computed from the export's own tables (`tests/oracle/nsys_rules.py`); the PyTorch
//! and JAX rules on programs written and recorded here.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;

/// `opscope advise ARGS --format json`.
fn advise(args: &[&str]) -> Value {
    let mut all = vec!["advise"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--format", "json"]);
    let out = opscope_ok(&all);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn findings<'a>(report: &'a Value, rule: &str) -> Vec<&'a Value> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == rule)
        .collect()
}

fn figure(finding: &Value, name: &str) -> f64 {
    finding["figures"][name]
        .as_f64()
        .unwrap_or_else(|| panic!("no figure {name} in {finding}"))
}

fn trace(rel: &str) -> Option<PathBuf> {
    Some(shared_traces()?.join(rel))
}

/// Runs `advise` on `fires` and on `silent`, and checks `rule` fires on the first only.
fn fires_on_and_not_on(rule: &str, fires: &Path, silent: &Path, extra: &[&str]) -> Value {
    let mut args = vec![fires.to_str().unwrap(), "--rules", rule];
    args.extend_from_slice(extra);
    let fired = advise(&args);
    assert!(
        !findings(&fired, rule).is_empty(),
        "{rule} does not fire on {}: {fired}",
        fires.display()
    );
    let mut args = vec![silent.to_str().unwrap(), "--rules", rule];
    args.extend_from_slice(extra);
    let quiet = advise(&args);
    assert!(
        findings(&quiet, rule).is_empty(),
        "{rule} fires on {}: {quiet}",
        silent.display()
    );
    fired
}

/// Runs a program of `tests/record` with the tests' Python; panics with its output
/// when it fails.
fn run_program(script: &str, args: &[&std::ffi::OsStr]) {
    run(Command::new(python()), script, args);
}

/// Runs a program of `tests/record` as two ranks, under `torchrun`.
fn run_two_ranks(script: &str, args: &[&std::ffi::OsStr]) {
    let mut torchrun = Command::new(Path::new(&python()).with_file_name("torchrun"));
    torchrun.args(["--standalone", "--nproc-per-node", "2"]);
    run(torchrun, script, args);
}

fn run(mut command: Command, script: &str, args: &[&std::ffi::OsStr]) {
    let out = command
        .arg(repo_root().join("tests/record").join(script))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Records a program of `tests/record` with `opscope record` into `session`.
fn record_program(session: &Path, script: &str, args: &[&std::ffi::OsStr]) {
    let out = Command::new(env!("CARGO_BIN_EXE_opscope"))
        .arg("record")
        .arg("-o")
        .arg(session)
        .arg("--")
        .arg(python())
        .arg(repo_root().join("tests/record").join(script))
        .args(args)
        .env("OPSCOPE_RECORD_LIB", built("libopscope_record.so"))
        .env("OPSCOPE_CACHE_DIR", test_cache_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const RESNET_0: &str = "kineto/kineto-tb_plugin/resnet50_num_workers_0";
const RESNET_4: &str = "kineto/kineto-tb_plugin/resnet50_num_workers_4";
const SAXPY: &str = "nsys-sqlite/saxpy-mpi-cuda_nsys_perlmutter0.sqlite";
const CLOVERLEAF: &str = "nsys-sqlite/cloverleaf-nsys/perlmutter-cloverleaf-cuda.sqlite";

/// Nsight Systems' rules on both shared exports equal the rules' criteria computed
/// with sqlite3 from the export's tables: the calls, copies, blocked time and bytes,
/// the gaps (at Nsight's default of 500 ms, where neither export has one, and at
/// 50 ms) and the low-utilization chunks; and on a copy of saxpy's made to copy from
/// pageable memory asynchronously and set pinned memory synchronously, where those two
/// rules fire (and stay silent on saxpy's own).
#[test]
fn nsys_rules_equal_their_criteria_on_the_exports() {
    let Some(saxpy) = trace(SAXPY) else { return };
    let cloverleaf = trace(CLOVERLEAF).unwrap();
    // Neither export copies asynchronously or sets memory: a copy of saxpy's that does
    // (tests/oracle/nsys_with_async_and_memsets.py) has the rules fire.
    let scratch = scratch_dir("advise-nsys");
    let derived = scratch.join("saxpy-async-memset.sqlite");
    oracle_stdout(
        "nsys_with_async_and_memsets.py",
        &[saxpy.as_os_str(), derived.as_os_str()],
    );
    for file in [&saxpy, &cloverleaf, &derived] {
        for gap_ms in ["500", "50"] {
            let gap_ns = (gap_ms.parse::<i64>().unwrap() * 1_000_000).to_string();
            let oracle = run_oracle_json(
                "nsys_rules.py",
                &[file.to_str().unwrap(), &gap_ns, "30", "50"],
            );
            let ours = advise(&[file.to_str().unwrap(), "--gap-ms", gap_ms]);
            let what = format!("{} at {gap_ms} ms", file.display());
            // One process per export: the oracle's groups are ours.
            let one = |key: &str| -> Option<Value> {
                let list = oracle[key].as_array().unwrap();
                assert!(list.len() <= 1, "{what}: {key} {list:?}");
                list.first().cloned()
            };
            let check = |rule: &str, key: &str, pairs: &[(&str, &str)]| {
                let got = findings(&ours, rule);
                match one(key) {
                    None => assert!(got.is_empty(), "{what}: {rule} fired: {got:?}"),
                    Some(want) => {
                        assert_eq!(got.len(), 1, "{what}: {rule}: {got:?}");
                        for (ours_name, oracle_name) in pairs {
                            assert_eq!(
                                figure(got[0], ours_name),
                                want[*oracle_name].as_f64().unwrap(),
                                "{what}: {rule} {ours_name}"
                            );
                        }
                    }
                }
            };
            check(
                "sync_apis",
                "cuda_api_sync",
                &[("calls", "count"), ("blocked_ns", "ns")],
            );
            check(
                "memcpy_sync",
                "cuda_memcpy_sync",
                &[
                    ("copies", "count"),
                    ("blocked_ns", "ns"),
                    ("bytes", "bytes"),
                ],
            );
            check(
                "memcpy_pageable",
                "cuda_memcpy_async",
                &[("copies", "count"), ("blocked_ns", "ns")],
            );
            check(
                "memset_sync",
                "cuda_memset_sync",
                &[("sets", "count"), ("blocked_ns", "ns")],
            );
            check(
                "gpu_gaps",
                "gpu_gaps",
                &[
                    ("gaps", "count"),
                    ("gap_ns", "ns"),
                    ("longest_ns", "longest"),
                ],
            );
            // gpu_time_util: a finding exactly where the oracle has low chunks.
            let want = one("gpu_time_util").unwrap();
            let got = findings(&ours, "gpu_time_util");
            if want["low_chunks"].as_f64().unwrap() > 0.0 {
                assert_eq!(got.len(), 1, "{what}");
                assert_eq!(
                    figure(got[0], "low_chunks"),
                    want["low_chunks"].as_f64().unwrap(),
                    "{what}"
                );
            } else {
                assert!(got.is_empty(), "{what}: {got:?}");
            }
        }
    }
    // ResNet-50's PyTorch copies are all asynchronous.
    if let Some(resnet) = trace(RESNET_4) {
        fires_on_and_not_on("memcpy_sync", &saxpy, &resnet, &[]);
    }
    let derived_report = advise(&[derived.to_str().unwrap()]);
    for rule in ["memcpy_pageable", "memset_sync"] {
        fires_on_and_not_on(rule, &derived, &saxpy, &[]);
        assert_eq!(findings(&derived_report, rule).len(), 1, "{rule}");
    }
    // The pairs the oracle's numbers make: each rule fires on one export and not the
    // other (memcpy_sync fires on both: each copies synchronously).
    let saxpy_report = advise(&[saxpy.to_str().unwrap(), "--gap-ms", "50"]);
    let cloverleaf_report = advise(&[cloverleaf.to_str().unwrap(), "--gap-ms", "50"]);
    for (rule, on_saxpy) in [
        ("sync_apis", false),
        ("gpu_gaps", true),
        ("gpu_time_util", true),
        ("gpu_utilization", true),
    ] {
        assert_eq!(
            !findings(&saxpy_report, rule).is_empty(),
            on_saxpy,
            "{rule} on saxpy"
        );
        assert_eq!(
            !findings(&cloverleaf_report, rule).is_empty(),
            !on_saxpy,
            "{rule} on cloverleaf"
        );
    }
}

/// tfprof's checkers, on the shared CPU RunMetadata and on a TF 1.x GPU step laid out
/// as its executor wrote it (`tf1_gpu_run_meta.py`), print what tfprof's own `advise`
/// returns, checker by checker and line by line: utilization per accelerator, NHWC on
/// a GPU from the GraphDef's attributes, the top op types and scopes.
#[test]
fn tfprof_checkers_equal_tfprof_advise() {
    let Some(cpu) = trace("tf-timeline/generated-here/tf2.21-cpu-mlp") else {
        return;
    };
    if !python_with(&["tensorflow"]) {
        return;
    }
    let scratch = scratch_dir("advise-tfprof");
    let gpu = scratch.join("gpu-run");
    oracle_stdout("tf1_gpu_run_meta.py", &[&gpu]);
    for run in [cpu, gpu] {
        let want = run_oracle_json("tfprof_advise.py", &[&run]);
        let ours = advise(&[run.join("run_meta").to_str().unwrap()]);
        let checkers = ours["tfprof"].as_array().unwrap();
        assert_eq!(checkers.len(), 3, "{}", run.display());
        for c in checkers {
            let name = c["name"].as_str().unwrap();
            let expected = want.get(name).cloned().unwrap_or(Value::Array(Vec::new()));
            assert_eq!(c["reports"], expected, "{}: {name}", run.display());
        }
    }
    // The GPU step's NHWC is also a finding; the CPU run has none.
    let gpu_run = scratch.join("gpu-run/run_meta");
    let cpu_run = trace("tf-timeline/generated-here/tf2.21-cpu-mlp/run_meta").unwrap();
    fires_on_and_not_on("tf_operations", &gpu_run, &cpu_run, &[]);
}

/// The PyTorch profiler plugin's DataLoader rule and XProf's input-bound class fire on
/// the ResNet-50 run with the DataLoader in the training process (the plugin's own
/// sample for that advice) and not on the run with 4 workers.
#[test]
fn dataloader_and_input_bound_fire_without_workers_only() {
    let Some(zero) = trace(RESNET_0) else { return };
    let four = trace(RESNET_4).unwrap();
    let fired = fires_on_and_not_on("dataloader", &zero, &four, &[]);
    let f = findings(&fired, "dataloader")[0];
    assert!(figure(f, "pct") > 20.0, "{f}");
    // XProf's classification: highly input-bound without workers; with them, no
    // input-bound class (its 'all others' may still say potentially).
    let input_bound = |report: &Value| {
        findings(report, "step_bound").iter().any(|f| {
            let title = f["title"].as_str().unwrap();
            title.starts_with("HIGHLY") || title.starts_with("MODERATELY")
        })
    };
    let zero_report = advise(&[zero.to_str().unwrap(), "--rules", "step_bound"]);
    let four_report = advise(&[four.to_str().unwrap(), "--rules", "step_bound"]);
    assert!(input_bound(&zero_report), "{zero_report}");
    assert!(findings(&zero_report, "step_bound")
        .iter()
        .any(|f| f["title"].as_str().unwrap().starts_with("HIGHLY")));
    assert!(!input_bound(&four_report), "{four_report}");
}

/// Rules whose criterion a real trace meets, each with a real trace where it does not.
#[test]
fn each_rule_fires_on_its_trace_and_not_on_its_counter_example() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let t = |rel: &str| traces.join(rel);
    // Synchronisation APIs: CloverLeaf synchronises the device after every kernel.
    fires_on_and_not_on("sync_apis", &t(CLOVERLEAF), &t(SAXPY), &[]);
    // Synchronous copies: saxpy's cudaMemcpy; PyTorch copies asynchronously.
    fires_on_and_not_on("memcpy_sync", &t(SAXPY), &t(RESNET_4), &[]);
    // Asynchronous copies from pageable memory (Kineto names the memory kinds);
    // the HTA critical-path trace's copies are pinned.
    fires_on_and_not_on(
        "memcpy_pageable",
        &t(RESNET_4),
        &t("kineto/hta/ns_resolution_trace"),
        &[],
    );
    // Utilization: saxpy's device is busy a third of its span, ResNet-50's most of it.
    fires_on_and_not_on("gpu_utilization", &t(SAXPY), &t(RESNET_4), &[]);
    fires_on_and_not_on("gpu_time_util", &t(SAXPY), &t(CLOVERLEAF), &[]);
    fires_on_and_not_on("gpu_gaps", &t(SAXPY), &t(CLOVERLEAF), &["--gap-ms", "50"]);
    // fp32 convolutions on a V100 (compute 7.0) with no tensor-core kernel; the
    // backward-thread trace's GEMM runs on tensor cores (cutlass tensorop).
    let tc = fires_on_and_not_on(
        "tensor_cores",
        &t(RESNET_4),
        &t("kineto/hta/call_stack"),
        &[],
    );
    assert!(figure(findings(&tc, "tensor_cores")[0], "eligible_ns") > 0.0);
    // An AMD device has no compute capability to judge by: said, not guessed.
    let amd = advise(&[
        t("kineto/hta/amd_trace").to_str().unwrap(),
        "--rules",
        "tensor_cores",
    ]);
    assert!(findings(&amd, "tensor_cores").is_empty(), "{amd}");
    assert!(amd["not_checked"].to_string().contains("AMD"), "{amd}");
    // Communication over 10 % of the step: the distributed V100 run; ResNet-50 on one
    // GPU has none.
    fires_on_and_not_on(
        "communication",
        &t("kineto/hta/df_index_resolver"),
        &t(RESNET_4),
        &[],
    );
    // Short kernels: ResNet-50's launches outlast most of its kernels; the V100 run
    // with ns timestamps launches fewer, longer kernels.
    fires_on_and_not_on(
        "short_kernels",
        &t(RESNET_4),
        &t("kineto/hta/ns_resolution_trace"),
        &[],
    );
    // A synchronisation in every step: the HTA diff control run; the ns-resolution run
    // has none.
    fires_on_and_not_on(
        "host_sync",
        &t("kineto/hta/trace_diff/control"),
        &t("kineto/hta/ns_resolution_trace"),
        &[],
    );
    // The same op launching the same kernels over and over: the V100 run's backward
    // convolutions (8 kernels, 35 times); ResNet-50's 6 steps repeat no pattern 10 times.
    fires_on_and_not_on(
        "kernel_sequences",
        &t("kineto/hta/ns_resolution_trace"),
        &t(RESNET_4),
        &[],
    );
    // Launch-delay outliers (information): ResNet-50's queue is deep; the AMD toy's
    // kernels start at once.
    fires_on_and_not_on(
        "launch_delay",
        &t(RESNET_4),
        &t("kineto/hta/amd_trace"),
        &[],
    );
    // zero_grad writing zeros: PyTorch 1.9's default; 2.x's sets to None.
    fires_on_and_not_on(
        "zero_grad",
        &t(RESNET_4),
        &t("kineto/generated-here/torch2.15-cpu-kineto"),
        &[],
    );
    // 16-bit compute: ResNet-50 trains in fp32; the TF multi-worker profile's kernels
    // are Eigen::half ones (XProf puts its 16-bit share at 30.5 %: over 10 % as well).
    fires_on_and_not_on(
        "half_precision",
        &t(RESNET_4),
        &t("xplane/GPU-multi-worker"),
        &[],
    );
    // No shared trace holds 1,024 launches on a stream (HTA's largest: 1,013, the HTA
    // diff's test job): full_queue_fires_on_a_queue_that_fills makes one.
    let quiet = advise(&[
        t("kineto/hta/trace_diff/test").to_str().unwrap(),
        "--rules",
        "full_queue",
    ]);
    assert!(findings(&quiet, "full_queue").is_empty(), "{quiet}");
    // Tensors made on the host and copied at once (torch's ExtraCUDACopyPattern): in
    // the HTA diff's control job; none in ResNet-50's.
    let ec = fires_on_and_not_on(
        "extra_copies",
        &t("kineto/hta/trace_diff/control"),
        &t(RESNET_4),
        &[],
    );
    // The count of torch's rule applied to the raw JSON by tests/oracle/extra_copies.py.
    let want: f64 = String::from_utf8(oracle_stdout(
        "extra_copies.py",
        &[t("kineto/hta/trace_diff/control")],
    ))
    .unwrap()
    .trim()
    .parse()
    .unwrap();
    assert_eq!(figure(findings(&ec, "extra_copies")[0], "copies"), want);
    // The op types that cost most (information): none in an export of CUDA calls only.
    fires_on_and_not_on("expensive_ops", &t(RESNET_4), &t(CLOVERLEAF), &[]);
}

/// Peak device memory over 90 % of the device: the ResNet-50 trace with its device's
/// total memory given as just above the peak its memory events reach (the real 32 GB
/// V100 is far from full, and stays silent).
#[test]
fn peak_memory_fires_near_the_devices_total() {
    use std::io::{Read, Write};
    let Some(real) = trace(RESNET_4) else { return };
    let file = std::fs::read_dir(&real)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut json = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&file).unwrap())
        .read_to_string(&mut json)
        .unwrap();
    let quiet = advise(&[real.to_str().unwrap(), "--rules", "peak_memory"]);
    assert!(findings(&quiet, "peak_memory").is_empty(), "{quiet}");
    let memory = opscope_ok(&["memory", real.to_str().unwrap(), "--format", "json"]);
    let memory: Value = serde_json::from_slice(&memory.stdout).unwrap();
    let cuda = memory
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["device_type"] == 1)
        .unwrap_or_else(|| panic!("no CUDA allocator: {memory}"));
    let peak = cuda["peak_reserved"]
        .as_i64()
        .unwrap_or(0)
        .max(cuda["peak_in_use"].as_i64().unwrap());
    assert!(peak > 0);
    let mut v: Value = serde_json::from_str(&json).unwrap();
    for p in v["deviceProperties"].as_array_mut().unwrap() {
        p["totalGlobalMem"] = (peak + peak / 20).into();
    }
    let scratch = scratch_dir("advise-peak-memory");
    let near = scratch.join("near-full.json.gz");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&near).unwrap(),
        flate2::Compression::fast(),
    );
    gz.write_all(serde_json::to_string(&v).unwrap().as_bytes())
        .unwrap();
    gz.finish().unwrap();
    let fired = advise(&[near.to_str().unwrap(), "--rules", "peak_memory"]);
    let f = findings(&fired, "peak_memory");
    assert_eq!(f.len(), 1, "{fired}");
    assert_eq!(figure(f[0], "peak_bytes") as i64, peak);
}

/// The straggler of 8 ranks made from the two shared sampled ranks, one pair's kernels
/// stretched, is that pair's slower rank. The shared pair has a straggler of its own
/// (rank 1 computes 13 % more per step than rank 0, and the two step in lockstep); four
/// copies of rank 0 alone have none.
#[test]
fn the_straggler_is_the_stretched_rank() {
    use std::io::Write;
    let scratch = scratch_dir("advise-straggler");
    let Some(stretched) = eight_ranks(&scratch.join("stretched"), 0.1) else {
        return;
    };
    let fired = advise(&[stretched.to_str().unwrap(), "--rules", "straggler"]);
    let f = findings(&fired, "straggler");
    assert_eq!(f.len(), 1, "{fired}");
    // eight_ranks stretches copy k's kernels by 1 + 0.1 k: rank 7 (rank 1 × 1.3) most.
    assert_eq!(f[0]["scope"], "rank 7", "{}", f[0]);
    assert!(figure(f[0], "above_median_pct") > 5.0, "{}", f[0]);
    let pair = advise(&[
        trace("kineto/hta/trace_filter").unwrap().to_str().unwrap(),
        "--rules",
        "straggler",
    ]);
    assert_eq!(findings(&pair, "straggler")[0]["scope"], "rank 1", "{pair}");
    // Four ranks that are rank 0 again.
    let same = scratch.join("same");
    std::fs::create_dir_all(&same).unwrap();
    let rank0 = trace("kineto/hta/trace_filter/sampled_rank-0.json.gz").unwrap();
    let mut json = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(rank0).unwrap()),
        &mut json,
    )
    .unwrap();
    let mut v: Value = serde_json::from_str(&json).unwrap();
    for rank in 0..4 {
        v["distributedInfo"]["rank"] = rank.into();
        v["distributedInfo"]["world_size"] = 4.into();
        let mut gz = flate2::write::GzEncoder::new(
            std::fs::File::create(same.join(format!("rank-{rank}.json.gz"))).unwrap(),
            flate2::Compression::fast(),
        );
        gz.write_all(serde_json::to_string(&v).unwrap().as_bytes())
            .unwrap();
        gz.finish().unwrap();
    }
    let quiet = advise(&[same.to_str().unwrap(), "--rules", "straggler"]);
    assert!(findings(&quiet, "straggler").is_empty(), "{quiet}");
}

/// A PyTorch program written for this check, under its own profiler: its Kineto trace
/// with the DataLoader in the process, a single-tensor SGD and zero_grad writing zeros
/// has the three findings; the same program with workers, foreach and set_to_none has
/// none of them.
#[test]
fn pytorch_patterns_on_a_fresh_program() {
    if !python_with(&["torch"]) {
        return;
    }
    let scratch = scratch_dir("advise-torch");
    let run = |mode: &str| {
        let out = scratch.join(format!("{mode}.json"));
        run_program(
            "advise_torch_patterns.py",
            &[mode.as_ref(), out.as_os_str()],
        );
        advise(&[
            out.to_str().unwrap(),
            "--rules",
            "dataloader,optimizer,zero_grad",
        ])
    };
    let bad = run("bad");
    let good = run("good");
    for rule in ["dataloader", "optimizer", "zero_grad"] {
        assert_eq!(findings(&bad, rule).len(), 1, "{rule}: {bad}");
        assert!(findings(&good, rule).is_empty(), "{rule}: {good}");
    }
}

/// A PyTorch program written for this check whose own profiler runs on a schedule: its
/// two windows are two files of one process at different times, not two ranks. Before,
/// `steps` compared them as ranks and `advise` called one the other's straggler, and
/// each finding named the process twice. And `stats op` agrees with torch's own
/// `key_averages()` of each window on every row (calls, CPU total and self CPU), its
/// `ProfilerStep*` row included, which counts the window's steps as one op.
#[test]
fn a_profiler_schedules_windows_are_one_process() {
    if !python_with(&["torch"]) {
        return;
    }
    let scratch = scratch_dir("advise-torch-windows");
    run_program("torch_profiler_windows.py", &[scratch.as_os_str()]);
    let windows: Vec<String> = (0..2)
        .map(|n| {
            scratch
                .join(format!("window-{n}.json"))
                .display()
                .to_string()
        })
        .collect();

    let steps: Value = serde_json::from_slice(
        &opscope_ok(&["steps", &windows[0], &windows[1], "--format", "json"]).stdout,
    )
    .unwrap();
    let counts: Vec<usize> = steps["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["steps"].as_array().unwrap().len())
        .collect();
    assert_eq!(counts, [3, 3], "{steps}");
    assert!(steps["across"].is_null(), "{}", steps["across"]);

    let report = advise(&[&windows[0], &windows[1]]);
    assert!(findings(&report, "straggler").is_empty(), "{report}");
    let optimizer = findings(&report, "optimizer");
    assert_eq!(optimizer.len(), 1, "{report}");
    let scope = optimizer[0]["scope"].as_str().unwrap();
    assert!(
        scope.starts_with("python") && !scope.contains(" and ") && !scope.contains(".json"),
        "{scope}"
    );
    assert!(
        optimizer[0]["evidence"]
            .to_string()
            .contains("found in 2 files of it, each of another time"),
        "{}",
        optimizer[0]
    );

    for (n, window) in windows.iter().enumerate() {
        let ours: Vec<Value> = serde_json::from_slice(
            &opscope_ok(&["stats", "op", window, "--format", "json"]).stdout,
        )
        .unwrap();
        let torch: Vec<Value> = serde_json::from_str(
            &std::fs::read_to_string(scratch.join(format!("window-{n}.key_averages.json")))
                .unwrap(),
        )
        .unwrap();
        assert!(torch
            .iter()
            .any(|r| r["name"] == "ProfilerStep*" && r["count"] == 3));
        assert_eq!(ours.len(), torch.len(), "window {n}: rows");
        for row in &torch {
            let name = row["name"].as_str().unwrap();
            let mine = ours
                .iter()
                .find(|r| r["name"] == name)
                .unwrap_or_else(|| panic!("window {n}: no row {name}"));
            let calls = row["count"].as_f64().unwrap();
            assert_eq!(mine["occurrence"].as_f64().unwrap(), calls, "{name}");
            // torch sums the same events' µs; ours are ns from them: 1 µs a call.
            for (theirs, key) in [("cpu_us", "cpu_ns"), ("self_cpu_us", "self_cpu_ns")] {
                let (t, o) = (
                    row[theirs].as_f64().unwrap(),
                    mine[key].as_f64().unwrap() / 1e3,
                );
                assert!(
                    (t - o).abs() <= calls.max(1.0),
                    "window {n}: {name} {key}: {o} µs against torch's {t}"
                );
            }
        }
    }
}

/// A `torch.compile`d loop written for this check, under its own profiler: with two
/// graph breaks in its forward, `graph_breaks` finds as many breaks per step, at the
/// lines `torch._dynamo.explain` gives; with the batch changing once, `recompile`
/// finds compilation in one later step; with neither, both stay silent.
#[test]
fn torch_compile_graph_breaks_and_recompiles_on_a_fresh_program() {
    if !python_with(&["torch"]) {
        return;
    }
    let scratch = scratch_dir("advise-torch-compile");
    let run = |mode: &str| {
        let out = scratch.join(format!("{mode}.json"));
        run_program("advise_torch_compile.py", &[mode.as_ref(), out.as_os_str()]);
        let explained: Value = serde_json::from_str(
            &std::fs::read_to_string(scratch.join(format!("{mode}.json.explain.json"))).unwrap(),
        )
        .unwrap();
        (out, explained)
    };
    let (breaks, explained) = run("breaks");
    let (shapes, _) = run("shapes");
    let (clean, clean_explained) = run("clean");
    assert_eq!(clean_explained["graph_break_count"], 0);

    let fired = fires_on_and_not_on("graph_breaks", &breaks, &clean, &[]);
    let f = findings(&fired, "graph_breaks")[0];
    let per_step = figure(f, "breaks") / figure(f, "steps_with");
    assert_eq!(
        per_step,
        explained["graph_break_count"].as_f64().unwrap(),
        "{f} against {explained}"
    );
    // Every profiled step after the first breaks.
    assert_eq!(figure(f, "steps_with"), 4.0, "{f}");
    let evidence = f["evidence"].to_string();
    for line in explained["break_lines"].as_array().unwrap() {
        assert!(
            evidence.contains(&format!("advise_torch_compile.py:{line}")),
            "break at line {line} not named: {f}"
        );
    }
    let quiet = advise(&[shapes.to_str().unwrap(), "--rules", "graph_breaks"]);
    assert!(findings(&quiet, "graph_breaks").is_empty(), "{quiet}");

    let fired = fires_on_and_not_on("recompile", &shapes, &clean, &[]);
    let f = findings(&fired, "recompile")[0];
    assert_eq!(figure(f, "steps_with"), 1.0, "{f}");
    // Dynamo's own tracing counts, not only the backend's compile inside it.
    assert!(f["evidence"].to_string().contains("dynamo"), "{f}");
    let quiet = advise(&[breaks.to_str().unwrap(), "--rules", "recompile"]);
    assert!(findings(&quiet, "recompile").is_empty(), "{quiet}");
}

/// A Keras loop written for this check, recorded with `opscope record` (no profiler of
/// its own): fed by a serial tf.data pipeline that sleeps in Python, the loop waits in
/// `IteratorGetNext` for about as long per step as the pipeline alone takes to make a
/// batch (the program times it before training); parallel and prefetched, it does not
/// wait and the rule is silent. Before, the rule knew only PyTorch's DataLoader.
#[test]
fn tf_data_input_waits_on_a_fresh_keras_program() {
    if !python_with(&["tensorflow"]) {
        return;
    }
    let scratch = scratch_dir("advise-keras-input");
    let record = |mode: &str| {
        let session = scratch.join(mode);
        let log = scratch.join(format!("{mode}.log.json"));
        record_program(
            &session,
            "advise_keras_input.py",
            &[mode.as_ref(), log.as_os_str()],
        );
        let log: Value = serde_json::from_str(&std::fs::read_to_string(log).unwrap()).unwrap();
        (session, log)
    };
    let (slow, log) = record("slow");
    let (fast, _) = record("fast");
    let fired = fires_on_and_not_on("dataloader", &slow, &fast, &[]);
    let f = findings(&fired, "dataloader")[0];
    assert_eq!(f["severity"], "high", "{f}");
    assert!(f["title"].as_str().unwrap().contains("tf.data"), "{f}");
    let per_step_s = figure(f, "loader_ns") / 12.0 / 1e9;
    let input_s = log["input_s"].as_f64().unwrap();
    assert!(
        (per_step_s - input_s).abs() <= 0.25 * input_s,
        "{per_step_s} s waiting per step, the pipeline makes a batch in {input_s} s: {f}"
    );
}

/// A JAX loop recorded with `opscope record` whose batch grows every step compiles in
/// every step after the first; the same loop with a fixed batch compiles once.
#[test]
fn jax_recompiling_in_the_loop_is_found() {
    if !python_with(&["jax"]) {
        return;
    }
    let scratch = scratch_dir("advise-jax");
    let record = |name: &str, args: &[&str]| {
        let session = scratch.join(name);
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        record_program(&session, "advise_jax_recompile.py", &args);
        session
    };
    let grows = record("grows", &["grow"]);
    let fixed = record("fixed", &[]);
    let fired = fires_on_and_not_on("recompile", &grows, &fixed, &[]);
    let f = findings(&fired, "recompile")[0];
    assert_eq!(figure(f, "steps_with"), 11.0, "{f}");
}

/// Every finding of the shared traces carries its anchor, a fix and a command, and the
/// findings come ranked by what they save; a bad rule name is refused before loading.
#[test]
fn findings_are_ranked_and_complete() {
    let Some(zero) = trace(RESNET_0) else { return };
    let report = advise(&[zero.to_str().unwrap()]);
    let list = report["findings"].as_array().unwrap();
    assert!(list.len() >= 5, "{report}");
    let savings: Vec<i64> = list
        .iter()
        .map(|f| f["saving_ns"].as_i64().unwrap())
        .collect();
    assert!(savings.windows(2).all(|w| w[0] >= w[1]), "{savings:?}");
    for f in list {
        for key in ["anchor", "fix", "more", "title"] {
            assert!(!f[key].as_str().unwrap().is_empty(), "{key}: {f}");
        }
        assert!(f["saving_pct"].as_f64().unwrap() <= 100.0, "{f}");
    }
    assert!(report["verdict"]
        .as_str()
        .unwrap()
        .contains(list[0]["title"].as_str().unwrap()));
    let out = opscope(&["advise", zero.to_str().unwrap(), "--rules", "nope"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no rule `nope`"));
}

/// The Kineto JSON of a shared gzip'd trace, to derive others from.
fn read_trace(path: &Path) -> Value {
    use std::io::Read;
    let file = if path.is_dir() {
        std::fs::read_dir(path)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path()
    } else {
        path.to_path_buf()
    };
    let mut json = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(file).unwrap())
        .read_to_string(&mut json)
        .unwrap();
    serde_json::from_str(&json).unwrap()
}

fn write_trace(v: &Value, path: &Path) {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(path).unwrap(),
        flate2::Compression::fast(),
    );
    gz.write_all(serde_json::to_string(v).unwrap().as_bytes())
        .unwrap();
    gz.finish().unwrap();
}

/// DataParallel over two devices: no GPU here runs it, so the trace is ResNet-50's
/// made into one: its forward passes inside `DataParallel.forward` ranges (what
/// `torch.nn.DataParallel` records) and its kernels run again on a second device. The
/// ResNet-50 run itself (one device, no DataParallel) is silent; so is the derived
/// trace without the second device's kernels.
#[test]
fn data_parallel_fires_on_two_devices_driven_by_one_process() {
    let Some(real) = trace(RESNET_4) else { return };
    let scratch = scratch_dir("advise-data-parallel");
    let mut v = read_trace(&real);
    let events = v["traceEvents"].as_array_mut().unwrap();
    let steps: Vec<Value> = events
        .iter()
        .filter(|e| {
            e["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("ProfilerStep#"))
        })
        .cloned()
        .collect();
    for step in &steps {
        let mut range = step.clone();
        range["name"] = "DataParallel.forward".into();
        range["cat"] = "user_annotation".into();
        events.push(range);
    }
    let one_device = scratch.join("one-device.json.gz");
    write_trace(&v, &one_device);
    let kernels: Vec<Value> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        // This 2021 schema spells the category `Kernel`.
        .filter(|e| {
            e["cat"]
                .as_str()
                .is_some_and(|c| c.eq_ignore_ascii_case("kernel"))
        })
        .map(|e| {
            let mut k = e.clone();
            k["pid"] = 1.into();
            k["args"]["device"] = 1.into();
            k
        })
        .collect();
    v["traceEvents"].as_array_mut().unwrap().extend(kernels);
    let two_devices = scratch.join("two-devices.json.gz");
    write_trace(&v, &two_devices);
    let fired = fires_on_and_not_on("data_parallel", &two_devices, &real, &[]);
    assert_eq!(figure(findings(&fired, "data_parallel")[0], "devices"), 2.0);
    let quiet = advise(&[one_device.to_str().unwrap(), "--rules", "data_parallel"]);
    assert!(findings(&quiet, "data_parallel").is_empty(), "{quiet}");
}

/// Ranks whose steps drift apart: two ranks made from the ResNet-50 run, the second's
/// clock running 5 % fast (its step starts move further from rank 0's each step);
/// two ranks in lockstep (the same run twice) are silent.
#[test]
fn step_drift_fires_when_step_starts_move_apart() {
    let Some(real) = trace(RESNET_4) else { return };
    let scratch = scratch_dir("advise-step-drift");
    let base = read_trace(&real);
    let t0 = base["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["ts"].as_f64())
        .fold(f64::INFINITY, f64::min);
    let write_ranks = |dir: &Path, fast: f64| {
        std::fs::create_dir_all(dir).unwrap();
        for rank in 0..2 {
            let mut v = base.clone();
            v["distributedInfo"] =
                serde_json::json!({"rank": rank, "world_size": 2, "backend": "nccl"});
            if rank == 1 {
                for e in v["traceEvents"].as_array_mut().unwrap() {
                    if let Some(ts) = e["ts"].as_f64() {
                        e["ts"] = (t0 + (ts - t0) * fast).round().into();
                    }
                }
            }
            write_trace(&v, &dir.join(format!("rank-{rank}.json.gz")));
        }
    };
    let drifting = scratch.join("drifting");
    let lockstep = scratch.join("lockstep");
    write_ranks(&drifting, 1.05);
    write_ranks(&lockstep, 1.0);
    let fired = fires_on_and_not_on("step_drift", &drifting, &lockstep, &[]);
    let f = findings(&fired, "step_drift")[0];
    assert_eq!(f["scope"], "rank 1", "{f}");
    assert!(figure(f, "pct_of_step") > 10.0, "{f}");
}

/// Held while a timing-sensitive program runs: two ranks in lockstep stay within a
/// millisecond of each other alone, less surely beside another test's program.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Two ranks written for this check (`torchrun`, gloo), each under its own profiler,
/// rank 1 spending 100 ms more per step: without a collective per step rank 1 falls
/// behind step after step, and `step_drift` names it with the drift the ranks' own
/// clocks measured at their steps' starts; all-reducing every step, the ranks stay in
/// lockstep and the rule is silent (on a busy CI host one of their step starts came
/// 15 ms late: a single late step is no drift).
#[test]
fn step_drift_on_two_ranks_of_a_fresh_program() {
    if !python_with(&["torch"]) {
        return;
    }
    let scratch = scratch_dir("advise-drift-ranks");
    let run = |mode: &str| {
        let dir = scratch.join(mode);
        let _alone = alone();
        run_two_ranks("advise_ranks_drift.py", &[mode.as_ref(), dir.as_os_str()]);
        dir
    };
    let drift = run("drift");
    let lockstep = run("lockstep");
    let fired = fires_on_and_not_on("step_drift", &drift, &lockstep, &[]);
    let f = findings(&fired, "step_drift")[0];
    assert_eq!(f["scope"], "rank 1", "{f}");
    let starts = |rank: usize| -> Vec<i64> {
        std::fs::read_to_string(drift.join(format!("rank-{rank}.starts")))
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect()
    };
    // The ranks' own clocks, fitted as the rule fits: the median of the slopes between
    // every two steps (one step that starts late on a busy host moves it little), over
    // rank 0's span.
    let (zero, one) = (starts(0), starts(1));
    let offsets: Vec<(f64, f64)> = zero
        .iter()
        .zip(&one)
        .map(|(z, o)| (*z as f64, (o - z) as f64))
        .collect();
    let mut slopes: Vec<f64> = Vec::new();
    for (i, a) in offsets.iter().enumerate() {
        for b in &offsets[i + 1..] {
            slopes.push((b.1 - a.1) / (b.0 - a.0));
        }
    }
    slopes.sort_by(f64::total_cmp);
    let n = slopes.len();
    let slope = (slopes[(n - 1) / 2] + slopes[n / 2]) / 2.0;
    let theirs = (slope * (zero[zero.len() - 1] - zero[0]) as f64).abs();
    let ours = figure(f, "drift_ns");
    assert!(
        (ours - theirs).abs() <= 2e6_f64.max(0.02 * theirs),
        "drift {ours} ns, the ranks' own clocks {theirs} ns: {f}"
    );
}

/// A launch queue full enough to block: the ResNet-50 run with its device's work two
/// seconds later than it ran, so that its launches pile up on the stream (every one of
/// its 9,258 launches before the first work starts); the run itself is silent. With the
/// last step left out, as HTA's parser leaves it out, the deepest queue and the time
/// blocked are HTA's (`tests/oracle/hta_queue_length.py`).
#[test]
fn full_queue_fires_on_a_queue_that_fills() {
    let Some(real) = trace(RESNET_4) else { return };
    let scratch = scratch_dir("advise-full-queue");
    let mut v = read_trace(&real);
    for e in v["traceEvents"].as_array_mut().unwrap() {
        let on_device = e["pid"] == 0 && (e["ph"] == "X" || e["ph"] == "f");
        if let (true, Some(ts)) = (on_device, e["ts"].as_f64()) {
            e["ts"] = (ts + 2_000_000.0).round().into();
        }
    }
    let late = scratch.join("late-device.json.gz");
    write_trace(&v, &late);
    let fired = fires_on_and_not_on("full_queue", &late, &real, &[]);
    let f = findings(&fired, "full_queue")[0];
    // Kernels, sets and copies: all launched before the first starts.
    assert_eq!(figure(f, "deepest"), 8868.0 + 378.0 + 12.0, "{f}");
    assert!(figure(f, "blocked_ns") > 2e9, "{f}");

    let Some(python) = hta_python() else { return };
    let want: Value = serde_json::from_slice(&oracle_stdout_with(
        &python,
        "hta_queue_length.py",
        &[late.parent().unwrap()],
    ))
    .unwrap();
    let ours = advise(&[
        late.to_str().unwrap(),
        "--exclude-last-step",
        "--rules",
        "full_queue",
    ]);
    let f = findings(&ours, "full_queue")[0];
    assert_eq!(
        figure(f, "deepest"),
        want["deepest"].as_f64().unwrap(),
        "{want}"
    );
    assert_eq!(
        figure(f, "blocked_ns"),
        want["blocked_ns"].as_f64().unwrap(),
        "{want}"
    );
}

/// The launch rules against HTA's kernel launch statistics (`tests/oracle/
/// hta_launch_stats.py`, HTA 0.5.0 in the critical path's venv), with the last step left
/// out as HTA leaves it out: the launches paired with their work, the short kernels,
/// the runtime outliers and the launch-delay outliers are HTA's counts.
#[test]
fn launch_rules_count_as_hta_does() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let Some(python) = hta_python() else { return };
    for rel in [RESNET_4, "kineto/hta/ns_resolution_trace"] {
        let dir = traces.join(rel);
        let want: Value =
            serde_json::from_slice(&oracle_stdout_with(&python, "hta_launch_stats.py", &[&dir]))
                .unwrap();
        let ours = advise(&[
            dir.to_str().unwrap(),
            "--exclude-last-step",
            "--rules",
            "launch_delay,short_kernels",
            "--util-chunks",
            "30",
        ]);
        let delay = findings(&ours, "launch_delay");
        assert_eq!(delay.len(), 1, "{rel}: {ours}");
        let n = |name: &str| want[name].as_f64().unwrap();
        assert_eq!(figure(delay[0], "launched"), n("launched"), "{rel}");
        assert_eq!(figure(delay[0], "outliers"), n("delay_outliers"), "{rel}");
        let long_calls = figure(delay[0], "runtime_outliers");
        if rel == RESNET_4 {
            assert_eq!(long_calls, n("runtime_outliers"), "{rel}");
        } else {
            // A nanosecond trace: HTA rounds each call to whole µs, its start up and its
            // end down, so calls of 50 to 52 µs fall to 50 µs or less there (675 calls
            // over 50 µs to the nanosecond, 663 in HTA's µs).
            assert!(
                long_calls >= n("runtime_outliers") && long_calls <= n("runtime_outliers") * 1.02,
                "{rel}: {long_calls} against HTA's {}",
                n("runtime_outliers")
            );
        }
        // short_kernels reports when short kernels are half the launches or more.
        match findings(&ours, "short_kernels").first() {
            Some(f) => assert_eq!(figure(f, "short"), n("short"), "{rel}"),
            None => assert!(n("short") * 2.0 < n("launched"), "{rel}: {want}"),
        }
    }
}
