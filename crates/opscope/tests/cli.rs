//! End-to-end tests of the `opscope` binary: counts on every real Chrome/Kineto/TF
//! trace against an independent count made with Python's `json` module, conversions,
//! and clear one-line errors on bad input.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::*;

/// Every Chrome-trace file under `kineto/` and `tf-timeline/`, except PyTorch's
/// execution traces, which are another format.
fn chrome_traces(traces: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                walk(&path, out);
            } else if (name.ends_with(".json") || name.ends_with(".json.gz"))
                && !name.ends_with("_et.json.gz")
            {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&traces.join("kineto"), &mut files);
    walk(&traces.join("tf-timeline"), &mut files);
    files.sort();
    files
}

fn info_json(path: &Path) -> serde_json::Value {
    let out = opscope(&[
        "info",
        "--format",
        "json",
        "--quiet",
        path.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "opscope info {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("info prints JSON")
}

#[test]
fn every_real_chrome_trace_matches_an_independent_python_count() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let files = chrome_traces(&traces);
    assert!(
        files.len() >= 60,
        "expected the whole corpus, found {} files",
        files.len()
    );
    let oracle = repo_root().join("tests/oracle/count_chrome_events.py");
    let out = Command::new(python())
        .arg(&oracle)
        .args(&files)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "oracle failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected: HashMap<String, serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            (v["path"].as_str().unwrap().to_string(), v)
        })
        .collect();
    let mut checked = 0;
    for file in &files {
        let key = file.to_str().unwrap();
        let want = &expected[key];
        let got = info_json(file);
        for field in ["slices", "instants", "counter_samples", "flows"] {
            assert_eq!(got[field], want[field], "{field} of {key}");
        }
        assert_eq!(got["repairs"]["malformed_events"], 0, "{key}");
        assert_eq!(got["repairs"]["dangling_references"], 0, "{key}");
        checked += 1;
    }
    assert_eq!(checked, files.len());
}

/// `info` says how much GPU work has no known launch; an independent count (by
/// correlation id for Kineto, by graph node name for TensorFlow timelines) agrees on
/// every trace with GPU work.
#[test]
fn unattributed_gpu_work_matches_an_independent_count() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let files = chrome_traces(&traces);
    let expected = run_oracle("count_launches.py", &files);
    let mut checked = 0;
    for file in &files {
        let key = file.to_str().unwrap();
        let want = &expected[key];
        if want["device_work"] == 0 {
            continue;
        }
        let got = info_json(file);
        assert_eq!(got["device_work"], want["device_work"], "{key}");
        assert_eq!(
            got["unattributed_device_work"], want["unattributed"],
            "{key}"
        );
        assert_eq!(
            got["unattributed_kernels"], want["unattributed_kernels"],
            "{key}"
        );
        checked += 1;
    }
    assert!(checked >= 25, "only {checked} traces with GPU work");
}

#[test]
fn kineto_metadata_ranks_and_devices_are_read() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let info = info_json(&traces.join("kineto/hta/df_index_resolver/df_index_resolver.json.gz"));
    assert_eq!(info["ranks"], serde_json::json!([1]));
    assert_eq!(info["files"][0]["world_size"], 2);
    let devices = info["devices"].as_array().unwrap();
    assert!(
        devices
            .iter()
            .any(|d| d["kind"] == "gpu" && d["index"] == 1 && d["name"] == "Tesla V100-SXM2-32GB"),
        "{devices:?}"
    );
    assert!(info["tracks"]["gpu_stream"].as_u64().unwrap() >= 1);
    assert!(info["slices_by_kind"]["kernel"].as_u64().unwrap() > 10_000);
    // The MTIA trace names its device "MTIA 9".
    let mtia = info_json(&traces.join("kineto/hta/mtia_trace_single_rank/mtia_rank_0.json.gz"));
    assert!(mtia["devices"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["kind"] == "mtia"));
    // A directory of per-rank files is one trace with both ranks.
    let two = info_json(&traces.join("kineto/hta/trace_filter"));
    assert_eq!(two["ranks"], serde_json::json!([0, 1]));
    assert_eq!(two["files"].as_array().unwrap().len(), 2);
}

#[test]
fn tf_timeline_devices_and_kinds() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let info = info_json(&traces.join("tf-timeline/dorsal/trace_CNNGender_tf_700-15ISK.json"));
    assert!(info["devices"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["kind"] == "gpu" && d["index"] == 0));
    assert!(info["slices_by_kind"]["kernel"].as_u64().unwrap() > 0);
    assert!(info["slices_by_kind"]["memcpy_h2d"].as_u64().unwrap() > 0);
    let sycl = info_json(&traces.join("tf-timeline/dorsal/trace_logreg_All-Series.json"));
    assert!(sycl["devices"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["kind"] == "sycl"));
    // Allocator counters and tensor objects of the TF 2.21 timeline.
    let mlp = info_json(&traces.join("tf-timeline/generated-here/tf2.21-cpu-mlp/timeline.json"));
    assert_eq!(mlp["counter_samples"], 86);
    assert_eq!(mlp["slices_by_kind"]["alloc"], 43);
}

fn convert(input: &Path, output: &Path, to: Option<&str>) {
    // convert refuses to replace a file without --force (a scratch directory may be
    // left from a run of the same process id).
    let _ = std::fs::remove_file(output);
    let mut args = vec![
        "convert",
        "--quiet",
        input.to_str().unwrap(),
        "-o",
        output.to_str().unwrap(),
    ];
    if let Some(to) = to {
        args.extend(["--to", to]);
    }
    let out = opscope(&args);
    assert!(
        out.status.success(),
        "convert failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn convert_keeps_every_event_in_both_formats() {
    let example = repo_root().join("examples/traces/mlp-train.json");
    let dir = scratch_dir("convert");
    let before = info_json(&example);
    for out_name in ["out.pftrace", "out.json", "out.json.gz"] {
        let out = dir.join(out_name);
        convert(&example, &out, None);
        let after = info_json(&out);
        for field in [
            "slices",
            "instants",
            "counter_samples",
            "flows",
            "slices_by_kind",
        ] {
            assert_eq!(
                after[field], before[field],
                "{field} after converting to {out_name}"
            );
        }
    }
    // --to wins over the extension; no partial file is left on failure.
    convert(&example, &dir.join("forced.bin"), Some("json"));
    assert!(info_json(&dir.join("forced.bin"))["slices"] == before["slices"]);
    let out = opscope(&[
        "convert",
        example.to_str().unwrap(),
        "-o",
        dir.join("x.unknown").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--to"));
    // A name that says another format than --to: refused, nothing written (a viewer
    // would take JSON in a .pftrace for a damaged protobuf).
    let mismatch = dir.join("y.pftrace");
    let _ = std::fs::remove_file(&mismatch);
    let out = opscope(&[
        "convert",
        example.to_str().unwrap(),
        "-o",
        mismatch.to_str().unwrap(),
        "--to",
        "json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("the name says perfetto but --to says json"),
        "{stderr}"
    );
    assert!(!mismatch.exists());
}

/// CTF output replaces an existing CTF trace with --force (and only with it), never a
/// directory that holds anything else; a failed write leaves the old trace in place.
#[test]
fn ctf_output_replaces_only_a_ctf_trace_and_only_with_force() {
    let dir = scratch_dir("convert-ctf-force");
    let example = repo_root().join("examples/traces/mlp-train.json");
    let small = dir.join("small.json");
    std::fs::write(
        &small,
        r#"[{"ph": "X", "name": "only", "pid": 1, "tid": 1, "ts": 0, "dur": 1}]"#,
    )
    .unwrap();
    let out_dir = dir.join("out.ctf");
    let _ = std::fs::remove_dir_all(&out_dir);
    let to_ctf = |input: &Path, force: bool| {
        let mut args = vec![
            "convert",
            "--quiet",
            input.to_str().unwrap(),
            "-o",
            out_dir.to_str().unwrap(),
        ];
        if force {
            args.push("--force");
        }
        opscope(&args)
    };
    assert!(to_ctf(&example, false).status.success());
    let slices = |path: &Path| info_json(path)["slices"].as_u64().unwrap();
    let full = slices(&out_dir);
    assert!(full > 1);
    let again = to_ctf(&small, false);
    assert!(!again.status.success() && String::from_utf8_lossy(&again.stderr).contains("--force"));
    assert_eq!(slices(&out_dir), full);
    assert!(to_ctf(&small, true).status.success());
    assert_eq!(slices(&out_dir), 1);
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    // A directory with something else in it is never replaced.
    std::fs::create_dir_all(out_dir.join("notes")).unwrap();
    let refused = to_ctf(&example, true);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("not a CTF trace directory"),
        "{stderr}"
    );
    assert!(out_dir.join("notes").is_dir());
    let home = dir.join("home");
    std::fs::create_dir_all(home.join("photos")).unwrap();
    let out = opscope(&[
        "convert",
        "--quiet",
        small.to_str().unwrap(),
        "-o",
        home.to_str().unwrap(),
        "--to",
        "ctf",
        "--force",
    ]);
    assert!(!out.status.success());
    assert!(home.join("photos").is_dir());
}

/// Two ranks' files in one Chrome JSON stay two of everything: their processes (both
/// have a `pid 0` GPU and host pids of their own), threads and streams, and the GPU
/// time of each stream.
#[test]
fn ranks_converted_to_one_json_file_stay_apart() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let ranks = traces.join("kineto/hta/trace_filter");
    let dir = scratch_dir("convert-ranks");
    let out = dir.join("both.json");
    convert(&ranks, &out, None);
    let (before, after) = (info_json(&ranks), info_json(&out));
    for field in ["processes", "threads", "tracks", "slices", "slices_by_kind"] {
        assert_eq!(after[field], before[field], "{field}");
    }
    let streams = |path: &Path| -> Vec<i64> {
        let gpu: serde_json::Value = serde_json::from_slice(
            &opscope_ok(&["gpu", path.to_str().unwrap(), "--format", "json"]).stdout,
        )
        .unwrap();
        let mut busy: Vec<i64> = gpu["ranks"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["streams"].as_array().unwrap().iter())
            .map(|s| s["busy_ns"].as_i64().unwrap())
            .collect();
        busy.sort_unstable();
        busy
    };
    assert_eq!(streams(&out), streams(&ranks));
}

/// Runs `info` on a file holding `bytes`, expecting one error line that names the file
/// and a byte offset, exit status 1, and no panic.
fn expect_clear_error(name: &str, bytes: &[u8], offset_text: &str) {
    let dir = scratch_dir("bad");
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    let out = opscope(&["info", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{name}: one line, got: {stderr}");
    assert!(stderr.starts_with("opscope: error: "), "{name}: {stderr}");
    assert!(
        stderr.contains(path.to_str().unwrap()),
        "{name}: names the file: {stderr}"
    );
    assert!(
        stderr.contains(offset_text),
        "{name}: wants {offset_text:?} in {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{name}: {stderr}");
}

#[test]
fn bad_input_gets_one_clear_error_line() {
    expect_clear_error("empty.json", b"", "0 bytes");
    let trace = std::fs::read(repo_root().join("examples/traces/mlp-train.json")).unwrap();
    let cut = trace.len() / 2;
    expect_clear_error(
        "truncated.json",
        &trace[..cut],
        &format!("byte {cut}: the JSON ends early"),
    );
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&trace).unwrap();
    let gz = gz.finish().unwrap();
    expect_clear_error("truncated.json.gz", &gz[..gz.len() / 2], "byte ");
    expect_clear_error(
        "wrong-type.json",
        br#"{"traceEvents": {"ph": "X"}}"#,
        "byte 16: \"traceEvents\" is not an array",
    );
    expect_clear_error("number.json", b"[1, 2", "byte 5");
    let garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 | 0x80)
        .collect();
    expect_clear_error("garbage.json", &garbage, "byte 0");
    expect_clear_error(
        "not-utf8.json",
        b"{\"traceEvents\":[{\"name\":\"\xff\"}]}",
        "byte 25",
    );
}

#[test]
fn events_with_wrong_types_are_skipped_with_a_warning_and_the_rest_kept() {
    let dir = scratch_dir("wrong-event");
    let path = dir.join("t.json");
    std::fs::write(
        &path,
        br#"{"traceEvents": [{"ph": "X", "ts": "soon", "pid": [1]}, {"ph": "X", "ts": 1, "dur": 2, "name": "ok"}, 7]}"#,
    )
    .unwrap();
    let out = opscope(&["info", "--format", "json", path.to_str().unwrap()]);
    assert!(out.status.success());
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(info["slices"], 1);
    assert_eq!(info["repairs"]["malformed_events"], 2);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("event 0 (byte 17)"), "{stderr}");
}

/// A 2 GiB string: refused with the event index, without running out of memory.
#[test]
fn a_two_gigabyte_string_is_refused() {
    if std::env::var_os("CI").is_none() && std::env::var_os("OPSCOPE_BIG_TESTS").is_none() {
        opscope_corpus::skip("the 2 GiB test outside CI (set OPSCOPE_BIG_TESTS=1 to run it)");
        return;
    }
    let dir = scratch_dir("huge");
    let path = dir.join("huge.json");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        f.write_all(br#"{"traceEvents":[{"ph":"X","ts":1,"dur":1,"name":""#)
            .unwrap();
        let chunk = vec![b'a'; 1 << 20];
        for _ in 0..2048 {
            f.write_all(&chunk).unwrap();
        }
        f.write_all(br#""}]}"#).unwrap();
    }
    let out = opscope(&["info", path.to_str().unwrap()]);
    let _ = std::fs::remove_file(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    // The event (at byte 16) is refused once it is longer than the limit (the file is
    // read in pieces, so its whole length is not known then).
    assert!(
        stderr.contains("byte 16: a value longer than the limit of 1140850688 bytes"),
        "{stderr}"
    );
}

#[test]
fn help_has_examples() {
    for sub in ["info", "convert"] {
        let out = opscope(&[sub, "--help"]);
        assert!(out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Examples:"),
            "{sub}"
        );
    }
}

/// Every command's "Where the agent is" section holds the agent's options only:
/// `--format`, `--port` and the rest of a command's own options came under it in every
/// command that reads a trace or the agent (`opscope diff --help` showed 12 of them).
#[test]
fn the_agents_heading_holds_its_options_only() {
    let help = |args: &[&str]| String::from_utf8(opscope(args).stdout).unwrap();
    let top = help(&["--help"]);
    let commands: Vec<&str> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() > 10, "{top}");
    let mut with_heading = 0;
    for command in commands.iter().flat_map(|c| match *c {
        // The groups of report commands: their first reads traces as the others do.
        "stats" => vec!["stats op", "stats kernel"],
        c => vec![c],
    }) {
        let args: Vec<&str> = command.split(' ').chain(["--help"]).collect();
        let text = help(&args);
        let Some(at) = text.find("Where the agent is") else {
            continue;
        };
        with_heading += 1;
        let section: Vec<&str> = text[at..]
            .lines()
            .skip(1)
            .take_while(|l| l.is_empty() || l.starts_with(' '))
            .filter_map(|l| l.trim_start().strip_prefix("--"))
            .map(|l| l.split([' ', '=']).next().unwrap())
            .collect();
        assert_eq!(section, ["socket", "connect", "token"], "{command}: {text}");
    }
    assert!(with_heading >= 8, "{with_heading}");
}

/// The example trace's events, parsed here with serde_json, as the independent count.
fn example_events() -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(repo_root().join("examples/traces/mlp-train.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    doc["traceEvents"].as_array().unwrap().clone()
}

fn count_named(events: &[serde_json::Value], cats: &[&str], name: &str) -> usize {
    events
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"] == name)
        .filter(|e| cats.iter().any(|c| e["cat"] == *c))
        .count()
}

#[test]
fn stats_op_takes_tfprof_options_and_writes_csv() {
    let dir = scratch_dir("stats-op");
    let csv = dir.join("ops.csv");
    opscope_ok(&[
        "stats",
        "op",
        "-order_by",
        "occurrence",
        "-select",
        "occurrence,cpu_micros",
        "-hide_name_regexes",
        "ProfilerStep.*",
        &format!("-output=csv:outfile={}", csv.display()),
        "--quiet",
        repo_root()
            .join("examples/traces/mlp-train.json")
            .to_str()
            .unwrap(),
    ]);
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("name,occurrence,cpu_micros"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let counts: Vec<u64> = rows.iter().map(|r| r[1].parse().unwrap()).collect();
    assert!(
        counts.windows(2).all(|w| w[0] >= w[1]),
        "ordered by occurrence: {counts:?}"
    );
    assert!(rows.iter().all(|r| !r[0].starts_with("ProfilerStep")));
    let events = example_events();
    for name in ["aten::addmm", "aten::to", "AddmmBackward0"] {
        let row = rows
            .iter()
            .find(|r| r[0] == name)
            .unwrap_or_else(|| panic!("{name}"));
        assert_eq!(
            row[1].parse::<usize>().unwrap(),
            count_named(&events, &["cpu_op"], name),
            "{name}"
        );
    }
    // A column tfprof has and we do not yet is refused by name.
    let out = opscope(&["stats", "op", "-select", "params", "x.json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("params"));
}

#[test]
fn stats_kernel_and_gpu_count_the_device_work() {
    let example = repo_root().join("examples/traces/mlp-train.json");
    let events = example_events();
    let out = opscope_ok(&[
        "stats",
        "kernel",
        "--format",
        "json",
        "--quiet",
        example.to_str().unwrap(),
    ]);
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!rows.is_empty());
    for row in &rows {
        let name = row["name"].as_str().unwrap();
        assert_eq!(
            row["instances"],
            count_named(&events, &["kernel"], name) as u64,
            "{name}"
        );
    }
    let out = opscope_ok(&[
        "gpu",
        "--format",
        "json",
        "--quiet",
        example.to_str().unwrap(),
    ]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let device: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| {
            ["kernel", "gpu_memcpy", "gpu_memset"]
                .iter()
                .any(|c| e["cat"] == *c)
        })
        .collect();
    let streams = report["ranks"][0]["streams"].as_array().unwrap();
    let work: u64 = streams.iter().map(|s| s["work"].as_u64().unwrap()).sum();
    assert_eq!(work, device.len() as u64);
    // One stream whose work does not overlap: busy time is the sum of durations.
    let mut spans: Vec<(f64, f64)> = device
        .iter()
        .map(|e| (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap()))
        .collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(spans.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0));
    let busy_us: f64 = spans.iter().map(|s| s.1).sum();
    assert_eq!(
        streams[0]["busy_ns"].as_f64().unwrap(),
        (busy_us * 1000.0).round()
    );
}

fn steps_json(path: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["steps", "--format", "json", "--quiet"];
    args.extend_from_slice(extra);
    args.push(path.to_str().unwrap());
    let out = opscope(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Steps come from the ProfilerStep markers exactly as an independent listing gives
/// them; with the markers ignored, the search for the repeating op sequence finds the
/// same number of steps, each starting inside the marked step it stands for.
#[test]
fn steps_follow_the_markers_and_the_period_search_finds_them() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let files = [
        traces.join("kineto/hta/df_index_resolver/df_index_resolver.json.gz"),
        traces.join(
            "kineto/kineto-tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
        ),
        repo_root().join("examples/traces/mlp-train.json"),
    ];
    let expected = run_oracle("list_steps.py", &files);
    for file in &files {
        let key = file.to_str().unwrap();
        let want = expected[key]["steps"].as_array().unwrap();
        assert!(want.len() >= 3, "{key}");
        let marked = steps_json(file, &[]);
        let marked = &marked["sources"];
        assert_eq!(marked[0]["found_by"]["kind"], "markers", "{key}");
        let got = marked[0]["steps"].as_array().unwrap();
        assert_eq!(got.len(), want.len(), "{key}");
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g["name"], w["name"], "{key}");
            assert_eq!(g["start_ns"], w["start_ns"], "{key}");
            assert_eq!(g["dur_ns"], w["dur_ns"], "{key}");
        }
        let found = steps_json(file, &["--ignore-markers"]);
        let found = &found["sources"];
        assert_eq!(found[0]["found_by"]["kind"], "period", "{key}");
        let found = found[0]["steps"].as_array().unwrap();
        assert_eq!(
            found.len(),
            want.len(),
            "{key}: steps found without markers"
        );
        for (f, w) in found.iter().zip(want) {
            let start = f["start_ns"].as_i64().unwrap();
            let (from, dur) = (
                w["start_ns"].as_i64().unwrap(),
                w["dur_ns"].as_i64().unwrap(),
            );
            assert!(
                (from..from + dur).contains(&start),
                "{key}: found step at {start}, marked {from}+{dur}"
            );
        }
    }
}

/// `memory` on the Kineto traces with [memory] events (the current schema with the
/// allocator's totals, and the 2021 schema without): allocated and freed bytes, the peak
/// in use and the five ops that allocate most, per device, as an independent reading of
/// the raw events gives them.
#[test]
fn memory_matches_an_independent_reading_of_the_allocation_events() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let files = [
        traces.join("kineto/hta/df_index_resolver/df_index_resolver.json.gz"),
        traces.join(
            "kineto/kineto-tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
        ),
        traces.join(
            "kineto/kineto-tb_plugin/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
        ),
    ];
    let expected = run_oracle("memory_events.py", &files);
    let mut checked = 0;
    for file in &files {
        let key = file.to_str().unwrap();
        let devices = expected[key]["devices"].as_object().unwrap();
        if devices.is_empty() {
            continue;
        }
        let out = opscope_ok(&["memory", "--format", "json", "--quiet", "--top", "5", key]);
        let reports: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        for (device, want) in devices {
            let got = reports
                .iter()
                .find(|r| format!("{}/{}", r["device_type"], r["device_id"]) == *device)
                .unwrap_or_else(|| panic!("{key}: no report for device {device}"));
            let what = format!("{key} device {device}");
            assert_eq!(got["allocated_bytes"], want["allocated"], "{what}");
            assert_eq!(got["freed_bytes"], want["freed"], "{what}");
            assert_eq!(got["peak_in_use"], want["peak"], "{what}");
            let top: Vec<serde_json::Value> = got["top_ops"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| serde_json::json!([o["op"], o["bytes"], o["allocations"]]))
                .collect();
            assert_eq!(serde_json::Value::Array(top), want["top_ops"], "{what}");
            checked += 1;
        }
    }
    assert!(checked >= 4, "only {checked} devices compared");
}

/// The tree views take tfprof's one-dash options and write their trees as JSON.
#[test]
fn stats_scope_and_code_write_trees() {
    let example = repo_root().join("examples/traces/mlp-train.json");
    let dir = scratch_dir("trees");
    for view in ["scope", "code"] {
        let file = dir.join(format!("{view}.json"));
        opscope_ok(&[
            "stats",
            view,
            "-max_depth",
            "2",
            "-output",
            &format!("json:outfile={}", file.display()),
            "--quiet",
            example.to_str().unwrap(),
        ]);
        let nodes: Vec<serde_json::Value> =
            serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(nodes[0]["name"], "_TFProfRoot");
        assert!(
            nodes.iter().all(|n| n["depth"].as_u64().unwrap() <= 2),
            "{view}"
        );
        assert!(nodes.len() > 1, "{view}");
        // Totals of the root's children add up to the root's.
        let root_total = nodes[0]["total_cpu_ns"].as_i64().unwrap();
        let children: i64 = nodes
            .iter()
            .filter(|n| n["parent"] == 0)
            .map(|n| n["total_cpu_ns"].as_i64().unwrap())
            .sum();
        assert_eq!(children, root_total, "{view}");
    }
}

/// `-step N` keeps the ops that start inside that profiler step, as an independent count
/// on the raw events gives them; a step the trace does not have is a clear error.
#[test]
fn stats_op_step_selects_one_profiler_step() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let file = traces.join("kineto/hta/df_index_resolver/df_index_resolver.json.gz");
    let dir = scratch_dir("step");
    for (step, op) in [("3", "aten::mm"), ("5", "record_param_comms")] {
        let csv = dir.join(format!("step{step}.csv"));
        opscope_ok(&[
            "stats",
            "op",
            "-step",
            step,
            "-select",
            "occurrence",
            "-output",
            &format!("csv:outfile={}", csv.display()),
            "--quiet",
            file.to_str().unwrap(),
        ]);
        let text = std::fs::read_to_string(&csv).unwrap();
        let ours: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{op},")))
            .unwrap_or_else(|| panic!("no {op} row"))
            .parse()
            .unwrap();
        let oracle = Command::new(python())
            .arg(repo_root().join("tests/oracle/ops_in_step.py"))
            .args([file.to_str().unwrap(), step, op])
            .output()
            .unwrap();
        let want: serde_json::Value = serde_json::from_slice(&oracle.stdout).unwrap();
        assert_eq!(ours, want["calls"].as_u64().unwrap(), "{op} in step {step}");
        assert!(ours > 0);
        // `-output timeline` writes those calls (and nothing else of the op view) as a
        // trace, which reads back with the same count.
        let timeline = dir.join(format!("step{step}.json"));
        opscope_ok(&[
            "stats",
            "op",
            "-step",
            step,
            "-show_name_regexes",
            op,
            "-output",
            &format!("timeline:outfile={}", timeline.display()),
            "--quiet",
            file.to_str().unwrap(),
        ]);
        opscope_ok(&[
            "stats",
            "op",
            "-output",
            &format!("json:outfile={}", dir.join("again.json").display()),
            timeline.to_str().unwrap(),
        ]);
        let rows: Vec<serde_json::Value> =
            serde_json::from_slice(&std::fs::read(dir.join("again.json")).unwrap()).unwrap();
        let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
        assert_eq!(names, [op], "only the op shown is in the timeline");
        assert_eq!(rows[0]["occurrence"].as_u64(), Some(ours));
    }
    let out = opscope(&[
        "stats",
        "op",
        "-step",
        "99",
        "--quiet",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("its steps: 2, 3, 4, 5, 6"));
}

/// Nsight Systems exports: per table, the number of rows and their summed durations
/// (Python's sqlite3 on the tables themselves) equal the slices of each kind; `stats
/// kernel` equals Nsight's cuda_gpu_kern_sum computed from the kernel table; every
/// kernel and copy is linked to its launch by correlation id.
#[test]
fn nsys_exports_match_their_own_tables() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let files = [
        traces.join("nsys-sqlite/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"),
        traces.join("nsys-sqlite/cloverleaf-nsys/perlmutter-cloverleaf-cuda.sqlite"),
    ];
    let oracle = run_oracle("nsys_sums.py", &files);
    for file in &files {
        let want = &oracle[file.to_str().unwrap()];
        let info = info_json(file);
        let pairs = [
            ("kernel", "kernel"),
            ("memcpy_h2d", "memcpy_h2d"),
            ("memcpy_d2h", "memcpy_d2h"),
            ("runtime", "runtime"),
            ("driver", "driver"),
            ("sync", "sync"),
            // OS runtime calls, and the threads' spells on a CPU (SCHED_EVENTS).
            ("osrt+sched_spells", "other"),
            // NVTX ranges that are MPI's communication calls (MPI_Send, MPI_Recv) are
            // collectives, the others annotations.
            ("nvtx_range", "annotation+collective"),
        ];
        for (tables, kinds) in pairs {
            let (mut count, mut ns) = (0, 0);
            for kind in kinds.split('+') {
                count += info["slices_by_kind"][kind].as_i64().unwrap_or(0);
                ns += info["slice_ns_by_kind"][kind].as_i64().unwrap_or(0);
            }
            let (mut want_count, mut want_ns) = (0, 0);
            for table in tables.split('+') {
                want_count += want[table][0].as_i64().unwrap();
                want_ns += want[table][1].as_i64().unwrap();
            }
            assert_eq!(
                [count, ns],
                [want_count, want_ns],
                "{}: {tables} rows and summed ns",
                file.display()
            );
        }
        // MPI's calls that move data are communication.
        assert_eq!(
            [
                info["slices_by_kind"]["collective"].as_i64().unwrap_or(0),
                info["slice_ns_by_kind"]["collective"].as_i64().unwrap_or(0)
            ],
            [
                want["nvtx_mpi"][0].as_i64().unwrap(),
                want["nvtx_mpi"][1].as_i64().unwrap()
            ],
            "{}: MPI's ranges",
            file.display()
        );
        assert_eq!(info["instants"], want["nvtx_mark"][0]);
        // The CPU samples' call stacks, which opscope keeps no place for yet, are said
        // not to be read, with their rows.
        let stderr = String::from_utf8_lossy(&opscope_ok(&["info", file.to_str().unwrap()]).stderr)
            .into_owned();
        let rows = want["sampling_callchains_rows"].as_i64().unwrap();
        if rows > 0 {
            assert!(
                stderr.contains(&format!("SAMPLING_CALLCHAINS ({rows} rows")),
                "{stderr}"
            );
        }
        assert_eq!(info["unattributed_device_work"], 0, "{}", file.display());
        let kernels = opscope_ok(&[
            "stats",
            "kernel",
            "--format",
            "json",
            file.to_str().unwrap(),
        ]);
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&kernels.stdout).unwrap();
        // Nsight's cuda_gpu_kern_sum, row by row.
        let sums = want["kernel_sum"].as_object().unwrap();
        assert_eq!(rows.len(), sums.len());
        for row in &rows {
            let theirs = &sums[row["name"].as_str().unwrap()];
            for (ours, key) in [
                ("instances", "instances"),
                ("total_ns", "total"),
                ("min_ns", "min"),
                ("max_ns", "max"),
            ] {
                assert_eq!(row[ours].as_i64(), theirs[key].as_i64(), "{ours}: {row}");
            }
            for (ours, key) in [
                ("mean_ns", "mean"),
                ("median_ns", "median"),
                ("stddev_ns", "stddev"),
            ] {
                let (a, b) = (row[ours].as_f64().unwrap(), theirs[key].as_f64().unwrap());
                assert!(
                    (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                    "{ours}: {a} vs {b}"
                );
            }
        }
        let total: i64 = rows.iter().map(|r| r["total_ns"].as_i64().unwrap()).sum();
        let instances: i64 = rows.iter().map(|r| r["instances"].as_i64().unwrap()).sum();
        assert_eq!(
            [instances, total],
            [
                want["kernel"][0].as_i64().unwrap(),
                want["kernel"][1].as_i64().unwrap()
            ]
        );
    }
}

/// One host profiled twice (two runs of a log directory, each with that host's XPlane)
/// is one process, not two ranks: its devices are compared with each other once, and
/// its steps with no one. Before, each run was a rank, and the second a straggler
/// against the first (a fresh JAX program profiled twice with a larger batch the
/// second time was told its "straggler" saved 35 %).
#[test]
fn one_host_profiled_twice_is_no_two_ranks() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let xplane = traces.join("xplane/GPU-multi-worker/34.83.195.179_6003.xplane.pb");
    let logdir = scratch_dir("logdir-twice");
    for run in ["2026_11_22_03_00_00", "2026_11_22_03_05_00"] {
        let run = logdir.join("plugins/profile").join(run);
        std::fs::create_dir_all(&run).unwrap();
        std::fs::copy(&xplane, run.join("34.83.195.179_6003.xplane.pb")).unwrap();
    }
    let dir = logdir.to_str().unwrap();
    let json = |command: &str| -> serde_json::Value {
        serde_json::from_slice(&opscope_ok(&[command, "--format", "json", dir]).stdout).unwrap()
    };
    let gpu = json("gpu");
    let reports = gpu["ranks"].as_array().unwrap();
    let devices: std::collections::BTreeSet<String> = reports
        .iter()
        .map(|r| r["device"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(reports.len(), 2 * devices.len(), "{reports:?}");
    assert_eq!(
        gpu["across"]["compared"].as_u64(),
        Some(devices.len() as u64)
    );
    let steps = json("steps");
    assert_eq!(steps["sources"].as_array().unwrap().len(), 2);
    assert!(steps["across"].is_null(), "{}", steps["across"]);
}

/// A TensorBoard log directory whose profile run has several hosts reads as one job with
/// a rank per host, in file-name order; `gpu` then reports each rank.
#[test]
fn multi_host_profile_runs_become_ranks() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let xplane = traces
        .join("xplane/GPU-multi-worker/34.83.195.179_6003.xplane.pb")
        .canonicalize()
        .unwrap();
    let logdir = scratch_dir("logdir");
    let run = logdir.join("plugins/profile/2026_11_22_03_00_00");
    std::fs::create_dir_all(&run).unwrap();
    // Copies, not links: a directory walk reads a file once however many names it
    // has, and follows no link out of the directory.
    for host in ["worker-b", "worker-a"] {
        let copy = run.join(format!("{host}.xplane.pb"));
        let _ = std::fs::remove_file(&copy);
        std::fs::copy(&xplane, &copy).unwrap();
    }
    let info = info_json(&logdir);
    assert_eq!(info["ranks"], serde_json::json!([0, 1]));
    let files = info["files"].as_array().unwrap();
    for file in files {
        let rank = file["rank"].as_u64().unwrap();
        let expected = if rank == 0 { "worker-a" } else { "worker-b" };
        assert!(file["path"].as_str().unwrap().contains(expected), "{file}");
    }
    let gpu = opscope_ok(&["gpu", "--format", "json", logdir.to_str().unwrap()]);
    let report: serde_json::Value = serde_json::from_slice(&gpu.stdout).unwrap();
    let ranks: Vec<u64> = report["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["rank"].as_u64())
        .collect();
    assert!(ranks.contains(&0) && ranks.contains(&1), "{ranks:?}");
    // The two hosts are the same file: every figure's spread is nil between them, and
    // the straggler is the device that computes most on either.
    let across = &report["across"];
    assert_eq!(across["compared"].as_u64(), Some(ranks.len() as u64));
    let most = report["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["temporal"]["compute_ns"].as_i64().unwrap())
        .max()
        .unwrap();
    assert_eq!(across["straggler"]["value"].as_f64(), Some(most as f64));
    assert!(across["straggler"]["at"]
        .as_str()
        .unwrap()
        .starts_with("rank 0"));
}

/// `convert --to ctf` on every shared Kineto, TF timeline, XPlane and CTF 1.8 trace, and
/// on a RunMetadata and an Nsight export: babeltrace2 reads each whole — every stream
/// in time order, or its muxer would stop — with a begin and an end per slice, and
/// every instant and counter sample; so does babeltrace 1.5, a second CTF reader
/// written apart from it, whose event lines are counted.
#[test]
fn ctf_output_reads_in_babeltrace2_and_babeltrace1() {
    let Some(traces) = shared_traces() else {
        return;
    };
    if Command::new("babeltrace2")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but babeltrace2 is missing"
        );
        opscope_corpus::skip("babeltrace2 is not installed");
        return;
    }
    // Debian's `babeltrace` has no --version; its help says whether it runs.
    let babeltrace1 = Command::new("babeltrace").arg("--help").output().is_ok();
    assert!(
        babeltrace1 || std::env::var_os("CI").is_none(),
        "CI is set but babeltrace (1.5) is missing"
    );
    if !babeltrace1 {
        eprintln!("not checking with babeltrace 1.5: it is not installed");
    }
    let dir = scratch_dir("ctf");
    let mut inputs = chrome_traces(&traces);
    inputs.extend([
        traces.join("tf-timeline/generated-here/tf2.21-cpu-mlp/run_meta"),
        traces.join("xplane/GPU-multi-worker/34.83.195.179_6003.xplane.pb"),
        traces.join("xplane/generated-here/keras-cpu-tf2.21/vm.xplane.pb"),
        traces.join("nsys-sqlite/cloverleaf-nsys/perlmutter-cloverleaf-cuda.sqlite"),
    ]);
    // Every CTF 1.8 trace directory (CTF 2 is refused on input).
    fn ctf_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
        if dir.join("metadata").is_file() {
            let head = std::fs::read(dir.join("metadata")).unwrap_or_default();
            if head.first() != Some(&0x1e) {
                out.push(dir.to_path_buf());
            }
            return;
        }
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        entries.sort();
        for e in entries {
            ctf_dirs(&e, out);
        }
    }
    let mut ctf = Vec::new();
    ctf_dirs(&traces.join("ctf"), &mut ctf);
    assert!(ctf.len() >= 20, "{ctf:?}");
    inputs.extend(ctf);
    for (n, input) in inputs.iter().enumerate() {
        let info = info_json(input);
        let out = dir.join(format!("t{n}.ctf"));
        let _ = std::fs::remove_dir_all(&out);
        opscope_ok(&[
            "convert",
            "--quiet",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ]);
        let read = Command::new("babeltrace2")
            .args(["-c", "sink.utils.counter"])
            .arg(&out)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&read.stdout);
        assert!(
            read.status.success(),
            "babeltrace2 refused {}: {}",
            input.display(),
            String::from_utf8_lossy(&read.stderr)
        );
        // `            207 Event messages`, in snapshots as it goes: the last is the total.
        let events: u64 = text
            .lines()
            .rev()
            .find_map(|l| l.trim().strip_suffix(" Event messages"))
            .unwrap_or_else(|| panic!("no event count in {text}"))
            .trim()
            .parse()
            .unwrap();
        let want = 2 * info["slices"].as_u64().unwrap()
            + info["instants"].as_u64().unwrap()
            + info["counter_samples"].as_u64().unwrap();
        assert_eq!(events, want, "{}", input.display());
        if babeltrace1 {
            let read = Command::new("babeltrace").arg(&out).output().unwrap();
            assert!(
                read.status.success(),
                "babeltrace 1.5 refused {}: {}",
                input.display(),
                String::from_utf8_lossy(&read.stderr)
            );
            // One line an event, `[12:00:00.000000001] (+0.000000001) opscope:…` (the
            // first event's delta is `(+?.?????????)`); the `] (+` tells it from a string
            // field's own line breaks.
            let lines = read
                .stdout
                .split(|&b| b == b'\n')
                .filter(|l| l.starts_with(b"[") && l.windows(4).any(|w| w == b"] (+"))
                .count() as u64;
            assert_eq!(lines, want, "babeltrace 1.5 on {}", input.display());
        }
    }
}

/// A folder of ranks: `steps` summarises them, with each rank's median step time equal
/// to the median of the marked steps an independent listing gives for its file.
#[test]
fn steps_summarise_ranks() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let dir = traces.join("kineto/hta/trace_filter");
    let files = [
        dir.join("sampled_rank-0.json.gz"),
        dir.join("sampled_rank-1.json.gz"),
    ];
    let expected = run_oracle("list_steps.py", &files);
    let medians: Vec<f64> = files
        .iter()
        .map(|f| {
            median(
                expected[f.to_str().unwrap()]["steps"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s["dur_ns"].as_f64().unwrap()),
            )
        })
        .collect();
    let report = steps_json(&dir, &[]);
    let across = &report["across"];
    assert_eq!(across["compared"], 2);
    let step = across["spreads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["metric"] == "median_step_ns")
        .unwrap();
    let (lo, hi) = (medians[0].min(medians[1]), medians[0].max(medians[1]));
    assert_eq!(step["min"].as_f64(), Some(lo));
    assert_eq!(step["max"].as_f64(), Some(hi));
    let slowest = if medians[1] > medians[0] {
        "rank 1"
    } else {
        "rank 0"
    };
    assert_eq!(step["max_at"], slowest);
    assert!(across["straggler"]["at"]
        .as_str()
        .unwrap()
        .starts_with("rank "));
}

/// CTF directories (a `metadata` file and streams) load as traces, alone or found while
/// walking a session directory, and convert; discarded events are shown.
#[test]
fn ctf_traces_load_walk_and_convert() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let ctf = traces.join("ctf");
    let memory = info_json(&ctf.join("tracecompass/memory"));
    assert_eq!(memory["files"][0]["format"], "ctf");
    // Every event record read: babeltrace2's count (peer-outputs/babeltrace2-bench.txt).
    assert_eq!(memory["files"][0]["events"], 328_056);
    // Every malloc/free is an Alloc instant (realloc may add one more).
    assert!(memory["instants"].as_u64().unwrap() >= 328_056, "{memory}");
    assert!(memory["counter_samples"].as_u64().unwrap() > 300_000);
    // A trace named by its metadata file, and an LTTng session walked to its traces.
    let by_metadata = info_json(&ctf.join("tracecompass/memory/metadata"));
    assert_eq!(by_metadata["instants"], memory["instants"]);
    let rotation = info_json(&ctf.join("babeltrace/ctf-traces/succeed/session-rotation"));
    assert_eq!(rotation["files"].as_array().unwrap().len(), 6);
    let session = info_json(&ctf.join("generated-here/lttng-ust-libc-python"));
    assert!(session["files"][0]["path"]
        .as_str()
        .unwrap()
        .ends_with("ust/uid/0/64-bit"));
    // Discarded events, in JSON and text.
    let lost = info_json(&ctf.join("tracecompass/hello-lost"));
    assert_eq!(lost["files"][0]["events_discarded"], 967_700);
    let out = opscope_ok(&[
        "info",
        "--quiet",
        ctf.join("tracecompass/hello-lost").to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("967700 events discarded by the tracer"),
        "{text}"
    );
    // Conversion to Perfetto and Chrome JSON keeps the instants.
    let dir = scratch_dir("ctf-instants");
    for name in ["memory.pftrace", "memory.json"] {
        let out = dir.join(name);
        convert(&ctf.join("tracecompass/memory"), &out, None);
        let back = info_json(&out);
        assert_eq!(back["instants"], memory["instants"], "{name}");
    }
    // CTF 2 is refused with one clear line naming the metadata file.
    let out = opscope(&[
        "info",
        "--quiet",
        ctf.join("tracecompass/CTF2-7.0-smalltrace")
            .to_str()
            .unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("CTF2-7.0-smalltrace/metadata") && err.contains("CTF 2"),
        "{err}"
    );
}

/// A Kineto trace with one op launching one kernel whose name is as long as real
/// templated CUDA kernel names get.
fn long_kernel_trace(dir: &Path) -> (PathBuf, String) {
    let kernel = format!(
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_{}_align4>(Params)",
        "256x128_32x3_nn".repeat(60)
    );
    let trace = serde_json::json!({
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
             "ts": 10.0, "dur": 50.0, "args": {"External id": 1}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": 20.0, "dur": 5.0, "args": {"correlation": 7, "External id": 1}},
            {"ph": "X", "cat": "cpu_op", "name": format!("tensorrt::execute_engine::{kernel}"),
             "pid": 1, "tid": 1, "ts": 80.0, "dur": 10.0, "args": {"External id": 2}},
            {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7,
             "ts": 30.0, "dur": 40.0,
             "args": {"correlation": 7, "External id": 1, "device": 0, "stream": 7}}
        ]
    });
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("long.json");
    std::fs::write(&path, serde_json::to_vec(&trace).unwrap()).unwrap();
    (path, kernel)
}

/// Text tables fit the width they are given ($COLUMNS here; the terminal's on a
/// terminal), long names shortened in the middle; `--wide`, JSON and CSV keep them.
#[test]
fn long_names_fit_the_width_and_stay_whole_when_asked() {
    let dir = scratch_dir("cli-long-names");
    let (trace, kernel) = long_kernel_trace(&dir);
    let trace = trace.to_str().unwrap();
    let run = |args: &[&str], columns: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_opscope"))
            .args(args)
            .env("COLUMNS", columns)
            .env("OPSCOPE_CACHE_DIR", "off")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    for args in [
        &["stats", "kernel", trace][..],
        &[
            "stats",
            "op",
            "-select",
            "occurrence,accelerator_micros",
            trace,
        ][..],
    ] {
        let fitted = run(args, "120");
        assert!(fitted.contains('…'), "{args:?}: {fitted}");
        for line in fitted.lines() {
            assert!(
                line.chars().count() <= 120,
                "{args:?}: {} wide: {line}",
                line.chars().count()
            );
        }
        let mut wide = args.to_vec();
        wide.push("--wide");
        assert!(run(&wide, "100").contains(&kernel), "{args:?} --wide");
    }
    let kernels: serde_json::Value =
        serde_json::from_str(&run(&["stats", "kernel", "--format", "json", trace], "100")).unwrap();
    assert_eq!(kernels[0]["name"], kernel.as_str());
    assert!(run(&["stats", "kernel", "--format", "csv", trace], "100").contains(&kernel));
}

/// `stats op|scope|code --format json|csv` print what `-output json|csv:outfile=F`
/// writes, as every other command takes `--format`.
#[test]
fn stats_views_take_format_as_every_command_does() {
    let dir = scratch_dir("cli-stats-format");
    let (trace, _) = long_kernel_trace(&dir);
    let trace = trace.to_str().unwrap();
    for view in ["op", "scope", "code"] {
        for (format, ext) in [("json", "json"), ("csv", "csv")] {
            let file = dir.join(format!("{view}.{ext}"));
            let spec = format!("{format}:outfile={}", file.display());
            opscope_ok(&["stats", view, "--no-cache", "-output", &spec, trace]);
            let printed = opscope_ok(&["stats", view, "--no-cache", "--format", format, trace]);
            let written = std::fs::read(&file).unwrap();
            assert!(!written.is_empty(), "{view} {format}");
            assert_eq!(
                String::from_utf8_lossy(&printed.stdout),
                String::from_utf8_lossy(&written),
                "stats {view} --format {format}"
            );
        }
    }
    let out = opscope(&[
        "stats",
        "op",
        "--format",
        "json",
        "-output",
        "csv:outfile=x.csv",
        trace,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not both"));
}

/// `opscope --help` names every format a TRACE can be.
#[test]
fn help_names_every_input_format() {
    let out = opscope_ok(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for format in [
        ".json.gz",
        ".pftrace",
        ".xplane.pb",
        "run_meta",
        ".sqlite",
        "CTF",
        "metadata",
    ] {
        assert!(help.contains(format), "--help leaves out {format}: {help}");
    }
}

/// Communication is recognised by the kernel names the libraries really use (DeepEP as
/// DeepSeek builds it, `dpsk::ep::…`, among them), by the collective op that launched
/// a kernel, and by the user's `--comm-kernels`; the rest is computation. Each kernel
/// runs alone, 10 µs apart, so the communication-only time is the sum of their
/// durations.
#[test]
fn communication_kernels_are_known_by_their_real_names_and_their_launching_op() {
    let named = [
        "void dpsk::ep::internode::dispatch<8, 768, 4>(int4*, float*, int*)",
        "void dpsk::ep::internode::combine<8, 768>(int4*, float*)",
        "void dpsk::ep::internode::notify_dispatch<8>(int const*, int*)",
        "void dpsk::ep::internode::cached_notify<8>(int, int*)",
        "void dpsk::ep::intranode::dispatch<8, 768>(int4*, float*)",
        "void dpsk::ep::intranode::combine<float, 8, 768>(float*)",
        "void deep_ep::internode_ll::dispatch<3, 10, 7168>(void*)",
        "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        "rcclGenericKernel<1, false>(ncclDevComm*)",
        "void mscclpp::allreduce6<float>(float*, mscclpp::DeviceHandle)",
        "void nvshmemi_transfer_rma_kernel<1>(void*)",
        "void vllm::cross_device_reduce_1stage<float, 8>(vllm::RankData*)",
    ];
    let compute = "volta_sgemm_128x64_nn";
    let copy_under_collective = "void at::native::vectorized_elementwise_kernel<4>(int)";
    let users_own = "void fabric::exchange_kernel<16>(void*)";

    let mut events = Vec::new();
    let mut kernels: Vec<(&str, f64, Option<&str>)> =
        named.iter().map(|&n| (n, 20.0, None)).collect();
    kernels.push((compute, 30.0, None));
    kernels.push((copy_under_collective, 15.0, Some("nccl:all_reduce")));
    kernels.push((users_own, 25.0, None));
    let mut ts = 100.0;
    for (i, (name, dur, op)) in kernels.iter().enumerate() {
        let correlation = i + 1;
        let op_name = op.unwrap_or("aten::op");
        events.push(serde_json::json!({"ph": "X", "cat": if op.is_some() {"user_annotation"} else {"cpu_op"},
            "name": op_name, "pid": 1, "tid": 1, "ts": ts, "dur": 8.0}));
        events.push(
            serde_json::json!({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
            "pid": 1, "tid": 1, "ts": ts + 1.0, "dur": 5.0, "args": {"correlation": correlation}}),
        );
        events.push(
            serde_json::json!({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7,
            "ts": ts + 10.0, "dur": dur,
            "args": {"correlation": correlation, "device": 0, "stream": 7}}),
        );
        ts += 100.0;
    }
    let dir = scratch_dir("cli-comm-kernels");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("comm.json");
    std::fs::write(
        &path,
        serde_json::to_vec(&serde_json::json!({"traceEvents": events})).unwrap(),
    )
    .unwrap();

    let communication_only = |extra: &[&str]| -> i64 {
        let mut args = vec!["gpu", "--format", "json", "--no-cache"];
        args.extend_from_slice(extra);
        args.push(path.to_str().unwrap());
        let out = opscope_ok(&args);
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        report["ranks"][0]["combinations"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["classes"] == serde_json::json!(["communication"]))
            .map(|c| c["time_ns"].as_i64().unwrap())
            .sum()
    };
    let known = named.len() as i64 * 20_000 + 15_000;
    assert_eq!(
        communication_only(&[]),
        known,
        "named kernels and the one nccl:all_reduce launched"
    );
    assert_eq!(
        communication_only(&["--comm-kernels", "fabric::exchange"]),
        known + 25_000,
        "and the user's own"
    );
    let bad = opscope(&["gpu", "--comm-kernels", "(", path.to_str().unwrap()]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--comm-kernels: not a valid regex"));
}

/// A CPU-only run has no device: its steps table gives step times, not a "device idle
/// 100%" that reads as an idle GPU; a GPU run keeps its device columns.
#[test]
fn steps_of_a_cpu_only_run_show_no_device_columns() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let text = |trace: &str| {
        let out = opscope_ok(&["steps", traces.join(trace).to_str().unwrap()]);
        String::from_utf8(out.stdout).unwrap()
    };
    let cpu = text("kineto/generated-here/torch2.15-cpu-kineto/torch-cpu-trace.json");
    assert!(cpu.contains("3 steps from step markers"), "{cpu}");
    assert!(!cpu.contains("device idle"), "{cpu}");
    assert!(cpu.contains("no device work in these steps"), "{cpu}");
    let gpu = text(
        "kineto/kineto-tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    );
    assert!(
        gpu.contains("device idle") && gpu.contains("kernels"),
        "{gpu}"
    );
}

/// `gpu --exclude-last-step` is HTA's default window: on a trace whose first 400
/// kernels were launched before recording began (their launches cut out by
/// tests/oracle/hta_unlaunched.py, which then runs HTA's temporal breakdown on it),
/// computation, other busy and idle time equal HTA's to the µs: device work whose
/// launch is not in the trace is left out, as HTA leaves it out. Before: 492.891 ms of
/// computation against HTA's 460.008. `--before-last-step` keeps that work.
#[test]
fn exclude_last_step_leaves_out_work_launched_before_the_trace_as_hta_does() {
    let Some(traces) = shared_traces() else {
        return;
    };
    if !common::python_with(&["hta"]) {
        return;
    }
    let dir = scratch_dir("gpu-unlaunched");
    let cut = dir.join("cut.json");
    let source = traces.join(
        "kineto/kineto-tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    );
    let hta = common::run_oracle_json(
        "hta_unlaunched.py",
        &[
            source.as_os_str(),
            cut.as_os_str(),
            std::ffi::OsStr::new("400"),
        ],
    );
    assert_eq!(hta["launches_dropped"], 400);
    let gpu = |flag: &str| -> serde_json::Value {
        let out = opscope_ok(&["gpu", flag, "--format", "json", cut.to_str().unwrap()]);
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        report["ranks"][0]["temporal"].clone()
    };
    let ours = gpu("--exclude-last-step");
    for (key, theirs) in [
        ("compute_ns", "compute_us"),
        ("non_compute_ns", "non_compute_us"),
        ("idle_ns", "idle_us"),
        ("span_ns", "kernel_us"),
    ] {
        let (a, b) = (
            ours[key].as_f64().unwrap() / 1e3,
            hta[theirs].as_f64().unwrap(),
        );
        assert!((a - b).abs() <= 1.0, "{key}: ours {a} µs, HTA's {b} µs");
    }
    let kept = gpu("--before-last-step");
    assert!(
        kept["compute_ns"].as_f64() > ours["compute_ns"].as_f64(),
        "{kept} {ours}"
    );
}

/// `opscope info --format json -` with `file` on standard input.
fn info_from_stdin(file: &Path) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_opscope"))
        .args(["info", "--format", "json", "-"])
        .stdin(std::fs::File::open(file).unwrap())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// An XPlane has no name on standard input, and is a protobuf of repeated field 1 as a
/// Perfetto trace is: it is told by its planes and read as from its file (before, it
/// was "not a valid TracePacket"), while Perfetto traces still read as Perfetto.
#[test]
fn xplane_and_perfetto_on_standard_input_read_as_from_their_files() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let mut xplanes: Vec<PathBuf> = walk_files(&traces.join("xplane"))
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".xplane.pb"))
        .collect();
    xplanes.sort();
    assert!(xplanes.len() >= 2, "{xplanes:?}");
    let dir = scratch_dir("stdin-protobuf");
    let mut perfetto = Vec::new();
    for (n, input) in [
        repo_root().join("examples/traces/mlp-train.json"),
        traces.join("kineto/hta/trace_filter"),
    ]
    .iter()
    .enumerate()
    {
        let out = dir.join(format!("{n}.pftrace"));
        convert(input, &out, None);
        perfetto.push(out);
    }
    for file in xplanes.iter().take(6).chain(&perfetto) {
        let (from_stdin, from_file) = (info_from_stdin(file), info_json(file));
        for key in [
            "slices",
            "instants",
            "counter_samples",
            "slices_by_kind",
            "processes",
        ] {
            assert_eq!(from_stdin[key], from_file[key], "{}: {key}", file.display());
        }
        let format = |info: &serde_json::Value| info["files"][0]["format"].clone();
        assert_eq!(
            format(&from_stdin),
            format(&from_file),
            "{}",
            file.display()
        );
    }
}

fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk_files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// Two ranks' traces in a zip, as a user attaches them to a ticket: `gpu` on the
/// archive gives what it gives on the directory, and each file is named inside it; the
/// same archive through a pipe too. A zip cut before its directory gives the members
/// it still holds.
#[test]
fn a_zip_of_traces_reads_as_its_directory() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let ranks = traces.join("kineto/hta/trace_filter");
    let dir = scratch_dir("zip-of-ranks");
    let archive = dir.join("ranks.zip");
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&archive).unwrap());
    let options = zip::write::SimpleFileOptions::default();
    for rank in 0..2 {
        let name = format!("sampled_rank-{rank}.json.gz");
        zip.start_file(format!("job/{name}"), options).unwrap();
        zip.write_all(&std::fs::read(ranks.join(&name)).unwrap())
            .unwrap();
    }
    zip.start_file("job/README", options).unwrap();
    zip.write_all(b"the ranks of the slow run").unwrap();
    zip.finish().unwrap();

    let gpu = |input: &str| -> serde_json::Value {
        let out = opscope_ok(&["gpu", "--format", "json", "--no-cache", input]);
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let strip = |mut v: serde_json::Value| {
        // Where each rank's file is differs; what was found in it must not.
        for rank in v["ranks"].as_array_mut().unwrap() {
            rank.as_object_mut().unwrap().remove("file");
        }
        v
    };
    let from_dir = gpu(ranks.to_str().unwrap());
    let from_zip = gpu(archive.to_str().unwrap());
    let files: Vec<&str> = from_zip["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["file"].as_str().unwrap())
        .collect();
    assert!(
        files
            .iter()
            .all(|f| f.contains("ranks.zip/job/sampled_rank-")),
        "{files:?}"
    );
    assert_eq!(strip(from_zip), strip(from_dir.clone()));

    let piped = Command::new(env!("CARGO_BIN_EXE_opscope"))
        .args(["info", "--format", "json", "-"])
        .stdin(std::fs::File::open(&archive).unwrap())
        .output()
        .unwrap();
    let info: serde_json::Value = serde_json::from_slice(&piped.stdout).unwrap();
    assert_eq!(info["files"].as_array().unwrap().len(), 2, "{info:#}");

    let bytes = std::fs::read(&archive).unwrap();
    let directory = bytes.windows(4).position(|w| w == b"PK\x01\x02").unwrap();
    let cut = dir.join("cut.zip");
    std::fs::write(&cut, &bytes[..directory]).unwrap();
    let from_cut = gpu(cut.to_str().unwrap());
    assert_eq!(
        from_cut["ranks"].as_array().unwrap().len(),
        from_dir["ranks"].as_array().unwrap().len()
    );
}

/// A profile directory as TensorFlow and JAX write it (`HOST.xplane.pb` with its
/// `HOST.trace.json.gz` copy beside it) reads the same from a zip as from the
/// directory: the copy is left out in both (before: read from the zip, twice the
/// events).
#[test]
fn an_archive_leaves_out_the_copies_a_directory_walk_leaves_out() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let xplane = traces.join("xplane/GPU-multi-worker/34.83.195.179_6003.xplane.pb");
    let dir = scratch_dir("zip-of-a-profile");
    let profile = dir.join("profile");
    std::fs::create_dir_all(&profile).unwrap();
    std::fs::copy(&xplane, profile.join("host.xplane.pb")).unwrap();
    let mut copy = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    copy.write_all(br#"{"traceEvents":[{"ph":"X","name":"copy","pid":1,"tid":1,"ts":0,"dur":1}]}"#)
        .unwrap();
    let copy = copy.finish().unwrap();
    std::fs::write(profile.join("host.trace.json.gz"), &copy).unwrap();
    let archive = dir.join("profile.zip");
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&archive).unwrap());
    let options = zip::write::SimpleFileOptions::default();
    for name in ["host.xplane.pb", "host.trace.json.gz"] {
        zip.start_file(format!("profile/{name}"), options).unwrap();
        zip.write_all(&std::fs::read(profile.join(name)).unwrap())
            .unwrap();
    }
    zip.finish().unwrap();
    let info = |input: &Path| -> serde_json::Value {
        let out = opscope_ok(&[
            "info",
            "--format",
            "json",
            "--no-cache",
            input.to_str().unwrap(),
        ]);
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let (walked, zipped) = (info(&profile), info(&archive));
    for key in ["slices", "instants", "counter_samples"] {
        assert_eq!(walked[key], zipped[key], "{key}");
    }
    assert_eq!(zipped["files"].as_array().unwrap().len(), 1, "{zipped:#}");
}

/// A reader that stops early (`| head`) is no error, in every output format: the
/// command says nothing and exits 0 (JSON output once reported a broken pipe).
#[test]
fn a_closed_pipe_is_not_an_error_in_any_format() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let trace = traces.join(
        "kineto/kineto-tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    );
    for format in ["json", "csv", "text"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_opscope"))
            .args(["stats", "op", "--wide", "--no-cache", "--format", format])
            .arg(&trace)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Closed before the trace is read: the first write finds no reader (the
        // output, 74 KB of JSON, is more than a pipe holds in any case).
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{format}: {stderr}");
        assert!(!stderr.contains("error"), "{format}: {stderr}");
    }
}

/// A Kineto trace rewritten without what links kernels to their launch (the `ac2g`
/// flows, `correlation` ids and the runtime calls themselves), `external id` kept or
/// not.
fn without_launch_links(file: &Path, keep_external: bool, out: &Path) {
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(file).unwrap()),
        &mut text,
    )
    .unwrap();
    let mut trace: serde_json::Value = serde_json::from_str(&text).unwrap();
    let events = trace["traceEvents"].as_array_mut().unwrap();
    events.retain(|e| {
        !matches!(e["ph"].as_str(), Some("s" | "f"))
            && !matches!(e["cat"].as_str(), Some("Runtime" | "cuda_runtime"))
    });
    for e in events.iter_mut() {
        if let Some(args) = e.get_mut("args").and_then(|a| a.as_object_mut()) {
            args.remove("correlation");
            if !keep_external {
                args.remove("external id");
                args.remove("External id");
            }
        }
    }
    std::fs::write(out, serde_json::to_vec(&trace).unwrap()).unwrap();
}

/// Accelerator time per op (`stats op`), ops that launched any.
fn accelerator_by_op(file: &Path) -> HashMap<String, i64> {
    let out = opscope_ok(&[
        "stats",
        "op",
        "--format",
        "json",
        "-q",
        file.to_str().unwrap(),
    ]);
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    rows.iter()
        .map(|r| {
            let ns = r["accelerator_ns"].as_i64().unwrap();
            (r["name"].as_str().unwrap().to_string(), ns)
        })
        .filter(|(_, ns)| *ns > 0)
        .collect()
}

/// Kernels whose launch is not in the trace find their op by the id of the op they were
/// queued in: on the 2021 Kineto trace (kernels carry the op's id as `external id`), with
/// flows, correlation ids and runtime calls taken out, each op's accelerator time is
/// what Kineto's own flows give it; with the ids taken out too, none is found. Current
/// Kineto writes `External id` on kernels as the correlation id, not an op's (checked:
/// on `simple_add` it names an op that did not launch the kernel): those are not used,
/// so nothing is charged to the wrong op.
#[test]
fn kernels_without_their_launch_find_their_op_by_its_external_id() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let dir = scratch_dir("external-id");
    let old = traces.join(
        "kineto/kineto-tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    );
    let by_flows = accelerator_by_op(&old);
    assert!(by_flows.len() > 20, "{by_flows:?}");
    let kept = dir.join("kept.json");
    without_launch_links(&old, true, &kept);
    assert_eq!(accelerator_by_op(&kept), by_flows);
    let none = dir.join("none.json");
    without_launch_links(&old, false, &none);
    assert_eq!(accelerator_by_op(&none), HashMap::new());

    let current = traces.join(
        "kineto/hta/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz",
    );
    assert!(!accelerator_by_op(&current).is_empty());
    let stripped = dir.join("current.json");
    without_launch_links(&current, true, &stripped);
    assert_eq!(accelerator_by_op(&stripped), HashMap::new());
}
