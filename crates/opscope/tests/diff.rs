//! `opscope diff`: `--by name` against HolisticTraceAnalysis 0.5.0's
//! `TraceDiff.compare_traces` and `ops_diff` (run by `tests/oracle/hta_trace_diff.py`)
//! on the shared `hta/trace_diff` and `hta/trace_compare` pairs; matched lines on
//! programs recorded twice, unchanged and with one deliberate change.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use serde_json::Value;

/// Per name: A's count, B's count, A's total µs, B's total µs.
type Rows = BTreeMap<String, (u64, u64, f64, f64)>;

fn ours(a: &Path, b: &Path, device: &str, iteration: Option<&str>) -> (Rows, Value) {
    let mut args = vec![
        "diff",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--by",
        "name",
        "--device",
        device,
        "--format",
        "json",
        "-q",
    ];
    if let Some(i) = iteration {
        args.extend(["--steps", i]);
    }
    let out: Value = serde_json::from_slice(&opscope_ok(&args).stdout).unwrap();
    let rows = out["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let n = |v: &Value, k: usize| v[k].as_f64().unwrap();
            (
                l["name"].as_str().unwrap().to_string(),
                (
                    n(&l["counts"], 0) as u64,
                    n(&l["counts"], 1) as u64,
                    n(&l["total_us"], 0),
                    n(&l["total_us"], 1),
                ),
            )
        })
        .collect();
    (rows, out)
}

#[test]
fn by_name_equals_htas_trace_diff_on_its_own_pairs() {
    let _turn = turn();
    let Some(traces) = shared_traces() else {
        return;
    };
    let Some(python) = hta_python() else { return };
    let hta = traces.join("kineto/hta");
    for (control, test, iteration) in [
        ("trace_diff/control", "trace_diff/test", None),
        ("trace_diff/control", "trace_diff/test", Some("1011")),
        ("trace_compare/base", "trace_compare/test", None),
    ] {
        let (a, b) = (hta.join(control), hta.join(test));
        let mut args = vec![a.as_os_str(), b.as_os_str()];
        if let Some(i) = iteration {
            args.push(i.as_ref());
        }
        let want: Value =
            serde_json::from_slice(&oracle_stdout_with(&python, "hta_trace_diff.py", &args))
                .unwrap();
        for device in ["cpu", "gpu", "all"] {
            let what = format!("{control} vs {test}, iteration {iteration:?}, {device}");
            let (rows, out) = ours(&a, &b, device, iteration);
            let hta_rows: Rows = want[device]["rows"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(name, r)| {
                    let n = |k: usize| r[k].as_f64().unwrap();
                    (name.clone(), (n(0) as u64, n(1) as u64, n(2), n(3)))
                })
                .collect();
            assert!(!hta_rows.is_empty(), "{what}: HTA compared nothing");
            assert_eq!(
                rows.keys().collect::<Vec<_>>(),
                hta_rows.keys().collect::<Vec<_>>(),
                "{what}: the names"
            );
            for (name, (ca, cb, da, db)) in &rows {
                let h = hta_rows[name];
                assert_eq!((*ca, *cb), (h.0, h.1), "{what}: counts of {name}");
                // HTA floors each event's start and ceils its end to whole µs: within
                // a µs per event.
                for (ours, theirs, count) in [(*da, h.2, *ca), (*db, h.3, *cb)] {
                    assert!(
                        (ours - theirs).abs() <= count as f64 + 1e-6,
                        "{what}: {name} took {ours} µs here, {theirs} µs in HTA over {count}"
                    );
                }
            }
            // ops_diff's categories, name for name.
            let mut categories: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for line in out["lines"].as_array().unwrap() {
                categories
                    .entry(line["change"].as_str().unwrap().to_string())
                    .or_default()
                    .push(line["name"].as_str().unwrap().to_string());
            }
            for (category, names) in want[device]["ops_diff"].as_object().unwrap() {
                let mut mine = categories.get(category).cloned().unwrap_or_default();
                mine.sort();
                let theirs: Vec<String> = names
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|n| n.as_str().unwrap().to_string())
                    .collect();
                assert_eq!(mine, theirs, "{what}: ops_diff's {category}");
            }
        }
    }
}

#[test]
fn by_name_says_which_iterations_a_trace_lacks() {
    let _turn = turn();
    let Some(traces) = shared_traces() else {
        return;
    };
    let dir = traces.join("kineto/hta/trace_compare/base");
    let d = dir.to_str().unwrap();
    let out = opscope(&["diff", d, d, "--by", "name", "--steps", "5000", "-q"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no iteration in 5000"), "{err}");
    let out = opscope(&["diff", d, "--by", "name", "-q"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--rank twice or --steps"),
        "one trace alone names what else to give"
    );
}

/// The tests take turns: a test that records compares runs whose speeds must not
/// depend on what another test does to the machine meanwhile (two loaded cores shared
/// unevenly made an unchanged pair's steps differ by more than 5 %).
static MACHINE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    MACHINE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records `tests/record/diff_program.py` once per variant, their loops started
/// together (so that the machine's load, whatever it is, falls on every run alike);
/// the sessions, in order.
fn record_variants(dir: &Path, variants: &[&str]) -> Vec<std::path::PathBuf> {
    let program = repo_root().join("tests/record/diff_program.py");
    let ready = dir.join("ready");
    let count = variants.len().to_string();
    let runs: Vec<(std::path::PathBuf, std::process::Child)> = variants
        .iter()
        .enumerate()
        .map(|(k, variant)| {
            let session = dir.join(format!("{k}-{variant}"));
            let child = std::process::Command::new(env!("CARGO_BIN_EXE_opscope"))
                .args(["record", "-q", "-o"])
                .arg(&session)
                .arg("--")
                .arg(python())
                .arg(&program)
                .arg(variant)
                .arg(&ready)
                .arg(&count)
                .arg("--log")
                .arg(timings_of(&session))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            (session, child)
        })
        .collect();
    runs.into_iter()
        .map(|(session, child)| {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{}: {}",
                session.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            session
        })
        .collect()
}

/// Where the program recorded into `session` writes its own timings.
fn timings_of(session: &Path) -> std::path::PathBuf {
    session.with_extension("timings")
}

fn matched(a: &Path, b: &Path) -> Value {
    let out = opscope_ok(&[
        "diff",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--format",
        "json",
        "-q",
    ]);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn lines(diff: &Value) -> impl Iterator<Item = &Value> {
    diff["host"]
        .as_array()
        .unwrap()
        .iter()
        .chain(diff["device"].as_array().unwrap())
}

/// A program recorded twice as it is: its step and every line unchanged within the
/// noise. A verdict is a statistical test, so a false alarm is possible: a pair that
/// gives one is recorded again, and only a third false alarm in a row fails (two in a
/// row came once in a clean-clone CI run at load, the second recording's step faster
/// both times, where the test passes alone and in the suite otherwise). A step verdict
/// the program's own clock bears out is no alarm: under load two runs do differ.
#[test]
fn a_program_recorded_twice_unchanged_is_unchanged_within_noise() {
    let _turn = turn();
    if !python_with(&["torch"]) {
        return;
    }
    let dir = scratch_dir("diff-unchanged");
    let mut said = Vec::new();
    for attempt in 0..3 {
        let sessions = record_variants(&dir.join(attempt.to_string()), &["same", "same"]);
        let diff = matched(&sessions[0], &sessions[1]);
        assert_eq!(
            diff["sides"][0]["step_numbers"].as_array().unwrap().len(),
            60
        );
        let step = &diff["breakdown"][0];
        let step_median = step["median_ns"][0].as_f64().unwrap();
        let mut alarms: Vec<String> = lines(&diff)
            .filter(|l| {
                let v = l["verdict"].as_str().unwrap();
                let big = l["mean_change_ns"].as_f64().unwrap().abs() > 0.05 * step_median;
                v == "slower" || v == "faster" || (big && v != "unchanged")
            })
            .map(|l| format!("{} {}", l["verdict"], l["path"]))
            .collect();
        // A step verdict the program's own clock bears out (its median step 3 % or more
        // apart, the same way) is right, not an alarm: the runs did differ.
        let own = |k: usize| {
            median(
                diff_program_timings(&timings_of(&sessions[k]))
                    .iter()
                    .map(|t| t.1),
            )
        };
        let own_change = own(1) / own(0) - 1.0;
        let borne_out = (step["verdict"] == "slower" && own_change >= 0.03)
            || (step["verdict"] == "faster" && own_change <= -0.03);
        if step["verdict"] != "unchanged" && !borne_out {
            alarms.push(format!(
                "the step: {} (by the program's own clock {:+.1} %)",
                step["verdict"],
                100.0 * own_change
            ));
        }
        // Each line counted, and the sums close: lines and time between ops make the
        // change of the mean step.
        let sum = diff["main_thread_lines_ns"].as_f64().unwrap()
            + diff["between_ops_ns"].as_f64().unwrap();
        let total = diff["mean_step_change_ns"].as_f64().unwrap();
        assert!((sum - total).abs() < 1.0, "{sum} against {total}");
        if alarms.is_empty() {
            return;
        }
        eprintln!("attempt {attempt}: false alarms {alarms:?}");
        said.extend(alarms);
    }
    panic!("the same program recorded twice, three times over, changed: {said:?}");
}

/// The data loader sleeps 15 ms per batch in B: `diff` names the loader's line first,
/// slower, its median change the 15 ms slept within 5 %. The step grows by more than
/// that (every op ran 10-50 % slower after a sleep: caches went cold while the other
/// run used them), and the lines and the time between ops add up to its change.
/// Layers 4x wider in C: the matmuls of the wider layer come first.
#[test]
fn a_deliberate_change_comes_first_with_the_step_time_it_explains() {
    let _turn = turn();
    if !python_with(&["torch"]) {
        return;
    }
    let dir = scratch_dir("diff-changed");
    // In pairs: beside a third run on two cores, the one that sleeps would also run
    // its ops on a less crowded machine.
    let sessions = record_variants(&dir.join("sleep"), &["same", "sleep"]);
    let diff = matched(&sessions[0], &sessions[1]);
    let step = &diff["breakdown"][0];
    assert_eq!(step["verdict"], "slower", "{step:#}");
    let total = diff["mean_step_change_ns"].as_f64().unwrap();
    let sum =
        diff["main_thread_lines_ns"].as_f64().unwrap() + diff["between_ops_ns"].as_f64().unwrap();
    assert!((sum - total).abs() < 1.0, "{sum} against {total}");
    let first = &diff["host"][0];
    let path = first["path"].as_str().unwrap();
    assert!(path.contains("DataLoader"), "first: {path}");
    assert_eq!(first["verdict"], "slower");
    // The loader's change against the program's own clock around `next(loader)` in the
    // same runs (under load the step after a sleep wakes late and collates on cold
    // caches, so the change is more than the 15 ms slept, as the program sees too).
    let slept = 15e6;
    let change = first["change_ns"].as_f64().unwrap();
    let own = |k: usize| {
        median(
            diff_program_timings(&timings_of(&sessions[k]))
                .iter()
                .map(|t| t.0),
        )
    };
    let own_change = own(1) - own(0);
    assert!(
        own_change >= 0.95 * slept,
        "the program's own loader changed by {own_change} ns; it sleeps {slept} ns more"
    );
    assert!(
        (change - own_change).abs() <= 0.05 * slept,
        "{path} changed by {change} ns; by the program's own clock, {own_change} ns"
    );
    // The rest of the step may also come out a little faster in the run that sleeps
    // (in a clean-clone CI run the loader's 15.09 ms came in a step 14.11 ms longer):
    // up to a tenth of the sleep.
    let explained = first["mean_change_ns"].as_f64().unwrap();
    assert!(
        explained >= 0.6 * total && explained <= total + 0.1 * slept,
        "{path} explains {explained} ns of {total} ns"
    );
    // Other lines may be truly slower: after the sleep the ops run on cold caches (in
    // one CI run at load, aten::mm's median went from 1.24 to 1.91 ms, higher in nearly
    // every step, and "slower" was the right verdict). What must hold is that none of
    // them rivals the deliberate change: each is under a tenth of the sleep.
    for line in lines(&diff).skip(1) {
        if line["verdict"] == "slower" {
            let mean = line["mean_change_ns"].as_f64().unwrap();
            assert!(mean < 0.1 * slept, "{line:#}");
        }
    }

    let sessions = record_variants(&dir.join("wide"), &["same", "wide"]);
    let diff = matched(&sessions[0], &sessions[1]);
    assert_eq!(diff["breakdown"][0]["verdict"], "slower");
    let first = diff["host"][0]["path"].as_str().unwrap();
    assert!(
        first.ends_with("aten::mm")
            || first.ends_with("aten::mm #2")
            || first.ends_with("aten::addmm"),
        "first: {first}"
    );
    let text = String::from_utf8(
        opscope_ok(&[
            "diff",
            sessions[0].to_str().unwrap(),
            sessions[1].to_str().unwrap(),
            "-q",
        ])
        .stdout,
    )
    .unwrap();
    assert!(
        text.contains("Step time (median)") && text.contains("slower"),
        "{text}"
    );
}

/// A Kineto trace of `steps` steps, each an `aten::addmm` launching one kernel named
/// `kernel` that runs `kernel_us` on `stream`.
fn kineto_steps(steps: usize, kernel: &str, kernel_us: u64, stream: u32) -> String {
    let mut events = Vec::new();
    for k in 0..steps {
        let t = 1000 * k as u64;
        let corr = 100 + k;
        events.push(format!(
            r#"{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{k}","pid":1,"tid":1,"ts":{t},"dur":900}},
{{"ph":"X","cat":"cpu_op","name":"aten::addmm","pid":1,"tid":1,"ts":{},"dur":100}},
{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":{},"dur":10,"args":{{"correlation":{corr}}}}},
{{"ph":"X","cat":"kernel","name":"{kernel}","pid":0,"tid":{stream},"ts":{},"dur":{kernel_us},"args":{{"correlation":{corr},"stream":{stream},"device":0}}}}"#,
            t + 10,
            t + 20,
            t + 40,
        ));
    }
    format!(
        r#"{{"schemaVersion":1,"traceEvents":[{}]}}"#,
        events.join(",\n")
    )
}

/// `aten::addmm` → `sm90_xmma_gemm…` in A and → `Cijk_Alik_Bljk…` in B: one device line
/// under the op, with both names, slower by the 70 µs per step B's kernel takes more
/// (beyond 5 % of the 900 µs step), moved from stream 7 to stream 13.
#[test]
fn kernels_renamed_under_their_op_are_one_line() {
    let _turn = turn();
    let dir = scratch_dir("diff-renamed");
    let a = dir.join("a.json");
    let b = dir.join("b.json");
    std::fs::write(&a, kineto_steps(8, "sm90_xmma_gemm_f32f32_tn", 50, 7)).unwrap();
    std::fs::write(&b, kineto_steps(8, "Cijk_Alik_Bljk_SB_MT64x64", 120, 13)).unwrap();
    let diff = matched(&a, &b);
    let device = diff["device"].as_array().unwrap();
    assert_eq!(device.len(), 1, "{device:#?}");
    let line = &device[0];
    assert_eq!(line["path"], "aten::addmm ▸ ⇢ device");
    assert_eq!(
        line["names"],
        serde_json::json!(["sm90_xmma_gemm_f32f32_tn", "Cijk_Alik_Bljk_SB_MT64x64"])
    );
    assert_eq!(line["verdict"], "slower");
    assert_eq!(line["change_ns"], 70_000.0);
    // It moved from stream 7 to stream 13: said on the line, and per stream.
    assert_eq!(
        line["streams"],
        serde_json::json!(["stream 7", "stream 13"])
    );
    let verdict_of = |what: &str| {
        diff["breakdown"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["what"] == what)
            .map(|b| b["verdict"].clone())
    };
    assert_eq!(verdict_of("work on stream 7"), Some("disappeared".into()));
    // Each launch call ends 10 µs before its kernel starts, on both sides.
    let latency = diff["breakdown"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["what"] == "launch latency (median per step)")
        .expect("a launch latency line");
    assert_eq!(
        latency["median_ns"],
        serde_json::json!([10_000.0, 10_000.0])
    );
    assert_eq!(verdict_of("work on stream 13"), Some("appeared".into()));
    // Each kernel is launched after the one before it ended (host wait); the gap
    // before it lies 40 µs in its step (the step starts 40 µs before the kernel), and
    // the first step's kernel has no gap before it.
    let per_step = |what: &str| {
        diff["breakdown"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["what"] == what)
            .unwrap_or_else(|| panic!("no line {what}"))["per_step_ns"]
            .clone()
    };
    let mut host_wait = vec![40_000.0; 8];
    host_wait[0] = 0.0;
    assert_eq!(
        per_step("streams idle (sum): host wait"),
        serde_json::json!([host_wait, host_wait])
    );
    for cause in ["kernel wait", "other"] {
        assert_eq!(
            per_step(&format!("streams idle (sum): {cause}")),
            serde_json::json!([vec![0.0; 8], vec![0.0; 8]])
        );
    }
    // The page: each side's steps, the line that moved, every line's table; in a real
    // browser too.
    let page = dir.join("diff.html");
    opscope_ok(&[
        "diff",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "-q",
        "-o",
        page.to_str().unwrap(),
    ]);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("<h2>Step time, step by step</h2>"));
    let first_line = html.split("<h3>").nth(1).unwrap_or("");
    assert!(
        first_line.starts_with("aten::addmm ▸ ⇢ device"),
        "{first_line}"
    );
    assert!(html.contains("Cijk_Alik_Bljk_SB_MT64x64"));
    let again = opscope(&[
        "diff",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
    ]);
    assert!(
        !again.status.success(),
        "an existing page is kept without --force"
    );
    if let Some(chromium) = common::browser::chromium() {
        let dom = std::process::Command::new(chromium)
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
            .arg(format!("file://{}", page.display()))
            .output()
            .unwrap();
        let dom = String::from_utf8_lossy(&dom.stdout);
        // Two charts (A, B) for the step and for each line drawn.
        assert!(dom.matches("<svg").count() >= 4, "{dom}");
        assert!(dom.contains("<h2>Every line</h2>"));
    }
    // By name, the two kernels are two names: one deleted, one added.
    let (rows, _) = ours(&a, &b, "gpu", Some("0..8"));
    assert_eq!(rows["sm90_xmma_gemm_f32f32_tn"].0, 8);
    assert_eq!(rows["Cijk_Alik_Bljk_SB_MT64x64"].1, 8);
}

/// Whole traces of several ranks: each rank's step time, before and after, is the one
/// `opscope steps` gives that rank.
#[test]
fn each_rank_of_whole_traces_has_its_step_time() {
    let _turn = turn();
    let Some(traces) = shared_traces() else {
        return;
    };
    let two = traces.join("kineto/hta/trace_filter");
    let t = two.to_str().unwrap();
    let diff = matched(&two, &two);
    let steps: Value =
        serde_json::from_slice(&opscope_ok(&["steps", t, "--format", "json", "-q"]).stdout)
            .unwrap();
    let mut ranks = 0;
    for source in steps["sources"].as_array().unwrap() {
        let Some(rank) = source["rank"].as_u64() else {
            continue;
        };
        let durations: Vec<f64> = source["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["dur_ns"].as_f64().unwrap())
            .collect();
        let line = diff["breakdown"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["what"] == format!("step on rank {rank}").as_str())
            .unwrap_or_else(|| panic!("no line for rank {rank}"));
        assert_eq!(line["per_step_ns"][0], serde_json::json!(durations));
        ranks += 1;
    }
    assert_eq!(ranks, 2);
    // Two ranks named: their own lines, no per-rank lines.
    let out = opscope_ok(&[
        "diff", t, "--rank", "0", "--rank", "1", "--format", "json", "-q",
    ]);
    let diff: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!diff["breakdown"]
        .as_array()
        .unwrap()
        .iter()
        .any(|b| b["what"].as_str().unwrap().starts_with("step on rank")));
}

/// `report TEST --against CONTROL`: the report of TEST with, after its verdict, what
/// `diff CONTROL TEST` says (its step verdict and its table of every line).
#[test]
fn a_report_against_an_earlier_run_holds_their_diff() {
    let _turn = turn();
    let Some(traces) = shared_traces() else {
        return;
    };
    let dir = traces.join("kineto/hta/trace_diff");
    let (control, test) = (dir.join("control"), dir.join("test"));
    let scratch = scratch_dir("diff-report");
    let page = scratch.join("report.html");
    opscope_ok(&[
        "report",
        test.to_str().unwrap(),
        "--against",
        control.to_str().unwrap(),
        "-q",
        "-o",
        page.to_str().unwrap(),
    ]);
    let html = std::fs::read_to_string(&page).unwrap();
    let diff = matched(&control, &test);
    let at = |what: &str| html.find(what).unwrap_or_else(|| panic!("no {what}"));
    assert!(at("<h2>Verdict</h2>") < at("<h2>Before and after: "));
    assert!(at("<h2>Before and after: ") < at("<h3>Every line</h3>"));
    assert!(at("<h3>Every line</h3>") < at("<h2>What the trace holds</h2>"));
    // The step's verdict and each line the diff shows are in the section.
    let section = &html[at("<h2>Before and after: ")..at("<h2>What the trace holds</h2>")];
    let step = &diff["breakdown"][0];
    assert_eq!(step["what"], "step");
    assert!(section.contains(&format!(": {}", step["verdict"].as_str().unwrap())));
    for line in lines(&diff) {
        let path = line["path"].as_str().unwrap();
        let last = path.rsplit(" ▸ ").next().unwrap();
        let escaped = last
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;");
        assert!(section.contains(&escaped), "{last}");
    }
    // Against a trace with no steps: the report is written, and says why there is no
    // comparison.
    let no_steps = traces.join("ctf/tracecompass/context-switches");
    let out = opscope_ok(&[
        "report",
        test.to_str().unwrap(),
        "--against",
        no_steps.to_str().unwrap(),
        "-q",
        "--force",
        "-o",
        page.to_str().unwrap(),
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no comparison with"));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("No comparison: "), "the section says why");
    assert!(html.contains("<h2>What the trace holds</h2>"));
}

/// Two whole traces of two ranks: lines are matched on each rank. A copy of
/// `hta/trace_filter` whose rank 1 calls `aten::ones_like` another name: rank 1's lines
/// say so (the old name disappeared, the new one appeared), rank 0's do not move, and
/// rank 1's lines are those `--rank 1` finds.
#[test]
fn lines_of_every_rank_are_matched_rank_by_rank() {
    let _turn = turn();
    let Some(traces) = shared_traces() else {
        return;
    };
    let original = traces.join("kineto/hta/trace_filter");
    let dir = scratch_dir("diff-ranks");
    let copy = dir.join("renamed");
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::copy(
        original.join("sampled_rank-0.json.gz"),
        copy.join("sampled_rank-0.json.gz"),
    )
    .unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(
            std::fs::File::open(original.join("sampled_rank-1.json.gz")).unwrap(),
        ),
        &mut text,
    )
    .unwrap();
    let mut rank1: Value = serde_json::from_str(&text).unwrap();
    let mut renamed = 0;
    for event in rank1["traceEvents"].as_array_mut().unwrap() {
        if event["name"] == "aten::ones_like" {
            event["name"] = "aten::ones_like_v2".into();
            renamed += 1;
        }
    }
    assert!(renamed > 0);
    std::fs::write(
        copy.join("sampled_rank-1.json"),
        serde_json::to_string(&rank1).unwrap(),
    )
    .unwrap();
    let diff_of = |rank: Option<&str>| -> Value {
        let mut args = vec![
            "diff",
            original.to_str().unwrap(),
            copy.to_str().unwrap(),
            "--top",
            "100000",
            "--format",
            "json",
            "-q",
        ];
        if let Some(r) = rank {
            args.extend(["--rank", r]);
        }
        serde_json::from_slice(&opscope_ok(&args).stdout).unwrap()
    };
    let every = diff_of(None);
    assert_eq!(every["ranks"], serde_json::json!([0, 1]));
    let touching = |diff: &Value, rank: Option<u64>| -> Vec<(String, String, Value)> {
        let mut found: Vec<(String, String, Value)> = lines(diff)
            .filter(|l| l["rank"].as_u64() == rank || rank.is_none())
            .filter(|l| l["path"].as_str().unwrap().contains("aten::ones_like"))
            .map(|l| {
                (
                    l["path"].as_str().unwrap().to_string(),
                    l["verdict"].as_str().unwrap().to_string(),
                    l["per_step_ns"].clone(),
                )
            })
            .collect();
        found.sort_by(|x, y| x.0.cmp(&y.0));
        found
    };
    let on_1 = touching(&every, Some(1));
    assert!(
        on_1.iter()
            .any(|(p, v, _)| p.ends_with("aten::ones_like") && v == "disappeared"),
        "{on_1:#?}"
    );
    assert!(
        on_1.iter()
            .any(|(p, v, _)| p.ends_with("aten::ones_like_v2") && v == "appeared"),
        "{on_1:#?}"
    );
    let on_0 = touching(&every, Some(0));
    assert!(!on_0.is_empty());
    for (path, verdict, values) in &on_0 {
        assert!(!path.contains("_v2"), "{path}");
        assert_eq!(values[0], values[1], "{path}: {verdict}");
    }
    // Rank 1's lines, rank by rank, are what a diff of rank 1 alone finds.
    assert_eq!(on_1, touching(&diff_of(Some("1")), None));
    // The text says which rank a line is on.
    let text = opscope_ok(&[
        "diff",
        original.to_str().unwrap(),
        copy.to_str().unwrap(),
        "--top",
        "400",
        "--wide",
        "-q",
    ]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("Lines matched rank by rank on ranks 0, 1"),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.contains("appeared")
            && l.contains("rank 1 ▸")
            && l.contains("aten::ones_like_v2")),
        "{text}"
    );
}

/// A 2-rank DDP job on gloo (`tests/record/diff_ranks.py`) recorded as it is and with
/// 30 extra matmuls per step on rank 1: lines are matched rank by rank, each rank's
/// step thread is its main thread (gloo's runloop threads, busier inside all-reduce,
/// are other threads, met by name), the matmuls appeared on rank 1 alone, and each
/// rank's split of its mean step adds up.
#[test]
fn a_job_of_two_ranks_recorded_twice_meets_rank_by_rank() {
    let _turn = turn();
    if !python_with(&["torch"]) {
        return;
    }
    let dir = scratch_dir("diff-ranks-recorded");
    let sessions: Vec<std::path::PathBuf> = ["same", "slow"]
        .iter()
        .map(|variant| {
            let session = dir.join(variant);
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_opscope"))
                .args(["record", "-q", "-o"])
                .arg(&session)
                .arg("--")
                .arg(Path::new(&python()).with_file_name("torchrun"))
                .args(["--standalone", "--nproc-per-node", "2"])
                .arg(repo_root().join("tests/record/diff_ranks.py"))
                .arg(variant)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            session
        })
        .collect();
    let out = opscope_ok(&[
        "diff",
        sessions[0].to_str().unwrap(),
        sessions[1].to_str().unwrap(),
        "--top",
        "100000",
        "--format",
        "json",
        "-q",
    ]);
    let diff: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(diff["ranks"], serde_json::json!([0, 1]));
    for rank in [0, 1] {
        // DDP's forward runs on the main thread: a line of the step's thread.
        let forward: Vec<&Value> = lines(&diff)
            .filter(|l| l["rank"] == rank && l["path"] == "DistributedDataParallel.forward")
            .collect();
        assert_eq!(forward.len(), 1, "rank {rank}: {forward:#?}");
        assert_eq!(forward[0]["main_thread"], true);
        assert!(
            !lines(&diff).any(|l| l["rank"] == rank
                && l["path"]
                    .as_str()
                    .unwrap()
                    .contains("▸ DistributedDataParallel.forward")),
            "rank {rank}: the forward pass under another thread"
        );
        // gloo's threads are named lines of their own.
        assert!(lines(&diff).any(|l| l["rank"] == rank
            && l["path"]
                .as_str()
                .unwrap()
                .starts_with("other thread (pt_gloo_runloop)")));
    }
    let appeared_mm = |rank: u64| {
        lines(&diff)
            .filter(|l| l["rank"] == rank && l["main_thread"] == true)
            .filter(|l| l["verdict"] == "appeared")
            .filter(|l| l["path"].as_str().unwrap().starts_with("aten::mm"))
            .count()
    };
    assert!(
        appeared_mm(1) >= 30,
        "rank 1: {} matmuls appeared",
        appeared_mm(1)
    );
    assert_eq!(appeared_mm(0), 0);
    let splits = diff["splits"].as_array().unwrap();
    assert_eq!(splits.len(), 2);
    for split in splits {
        let n = |k: &str| split[k].as_f64().unwrap();
        let sum = n("main_thread_lines_ns") + n("between_ops_ns");
        assert!((sum - n("mean_step_change_ns")).abs() < 1.0, "{split}");
    }
    assert!(splits[1]["appeared_ns"].as_f64().unwrap() > 0.0);
}

/// The shared AMD (ROCm) trace against a copy in which one `aten::mse_loss_backward`
/// got other input shapes: its line, and no other, says so (`[shapes … → …]`), in
/// JSON and in text. The copy is written by serde_json, without the original's spaces
/// in its shapes: that alone is no change (before, 62 lines said their shapes changed).
#[test]
fn an_op_whose_input_shapes_changed_says_so() {
    let _turn = turn();
    let Some(traces) = shared_traces() else {
        return;
    };
    let dir = scratch_dir("diff-shapes");
    let original = traces.join("kineto/hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz");
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(&original).unwrap()),
        &mut text,
    )
    .unwrap();
    let mut trace: Value = serde_json::from_str(&text).unwrap();
    let mut changed = 0;
    for event in trace["traceEvents"].as_array_mut().unwrap() {
        if event["name"] == "aten::mse_loss_backward" {
            // The outer of two nested calls.
            if changed == 0 {
                event["args"]["Input Dims"] = serde_json::json!([[], [10, 128], [10, 128], []]);
            }
            changed += 1;
        }
    }
    assert_eq!(changed, 2);
    let (a, b) = (dir.join("a.json"), dir.join("b.json"));
    std::fs::write(&a, &text).unwrap();
    std::fs::write(&b, serde_json::to_string(&trace).unwrap()).unwrap();
    let args = |format: &str| {
        let out = opscope_ok(&[
            "--wide",
            "diff",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--top",
            "100000",
            "--format",
            format,
            "-q",
        ]);
        String::from_utf8(out.stdout).unwrap()
    };
    let diff: Value = serde_json::from_str(&args("json")).unwrap();
    let changed: Vec<&Value> = diff["host"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["dims"][0] != l["dims"][1])
        .collect();
    assert_eq!(changed.len(), 1, "{changed:#?}");
    assert!(
        changed[0]["path"]
            .as_str()
            .unwrap()
            .ends_with("aten::mse_loss_backward"),
        "{:#}",
        changed[0]
    );
    assert_eq!(
        changed[0]["dims"][1],
        serde_json::json!("[[],[10,128],[10,128],[]]")
    );
    let text = args("text");
    let said: Vec<&str> = text.lines().filter(|l| l.contains("[shapes ")).collect();
    assert_eq!(said.len(), 1, "{text}");
    assert!(
        said[0].contains("[shapes [[],[5,128],[5,128],[]] → [[],[10,128],[10,128],[]]]"),
        "{}",
        said[0]
    );
}

/// Steps found from a framework's records (Keras fit's batches, from the `keras train
/// step` ranges opscope's bootstrap writes) are named apart from those ranges: the
/// range is still the step, no line of its own (before, every op sat under a `keras
/// train step` line that held the step's idle time too).
#[test]
fn a_framework_steps_range_is_the_step_not_a_line() {
    let _turn = turn();
    let dir = scratch_dir("diff-framework-steps");
    let mut events = Vec::new();
    for k in 0..6u64 {
        let t = 1000 * k;
        let mm = if k < 3 { 300 } else { 600 };
        events.push(format!(
            r#"{{"ph":"X","cat":"user_annotation","name":"keras train step","pid":1,"tid":1,"ts":{t},"dur":900}},
{{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":{},"dur":{mm}}}"#,
            t + 100
        ));
    }
    let trace = dir.join("keras.json");
    std::fs::write(
        &trace,
        format!(r#"{{"traceEvents":[{}]}}"#, events.join(",")),
    )
    .unwrap();
    let t = trace.to_str().unwrap();
    let out = opscope_ok(&[
        "diff", t, "--steps", "..3", "--steps", "3..", "--format", "json", "-q",
    ]);
    let diff: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        diff["sides"][0]["steps_found_by"]
            .as_str()
            .unwrap()
            .starts_with("framework"),
        "{:#}",
        diff["sides"][0]
    );
    let paths: Vec<&str> = diff["host"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["aten::mm"]);
    assert_eq!(
        diff["host"][0]["median_ns"],
        serde_json::json!([300_000.0, 600_000.0])
    );
    // The 900 µs step: 300 µs more in the op, 300 µs less between ops.
    assert_eq!(diff["between_ops_ns"], -300_000.0);
}

/// Steps whose ops opscope did not record (it stood aside for the program's own
/// profiler) are no steps to compare: a diff that names only such steps on a side is
/// an error that says why, and one whose range holds some leaves them out and says so.
/// (`diff --steps 2 --steps 6` of a recording showed every op as "appeared".)
#[test]
fn steps_opscope_stood_aside_for_are_not_compared() {
    let dir = scratch_dir("diff-aside");
    let mut events = Vec::new();
    for k in 0..10 {
        let ts = 100 * k;
        events.push(format!(
            r#"{{"ph":"X","cat":"user_annotation","name":"train_step_{k}","pid":1,"tid":1,"ts":{ts},"dur":100}}"#
        ));
        if !(5..8).contains(&k) {
            events.push(format!(
                r#"{{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":{},"dur":60}}"#,
                ts + 10
            ));
        }
    }
    let name = "opscope stood aside for a PyTorch profiler";
    events.push(format!(
        r#"{{"ph":"b","cat":"opscope","id":1,"name":"{name}","pid":1,"tid":1,"ts":495}}"#
    ));
    events.push(format!(
        r#"{{"ph":"e","cat":"opscope","id":1,"name":"{name}","pid":1,"tid":1,"ts":805}}"#
    ));
    let file = dir.join("run.json");
    std::fs::write(&file, format!("[{}]", events.join(","))).unwrap();
    let file = file.to_str().unwrap();
    let out = opscope(&["diff", file, file, "--steps", "2", "--steps", "6", "-q"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("its ops in train_step_6 are not in the trace (opscope stood aside for"),
        "{err}"
    );
    let out = opscope_ok(&[
        "diff", file, file, "--steps", "0..3", "--steps", "3..9", "--format", "json", "-q",
    ]);
    let diff: Value = serde_json::from_slice(&out.stdout).unwrap();
    let b = &diff["sides"][1];
    assert_eq!(b["step_numbers"], serde_json::json!([3, 4, 8]), "{b}");
    assert!(
        b["part"]
            .as_str()
            .unwrap()
            .starts_with("left out train_step_5, train_step_6, train_step_7 (opscope stood aside"),
        "{b}"
    );
    assert!(lines(&diff).all(|l| l["verdict"] != "appeared"), "{diff}");
}
