//! The Python stacks `opscope record` samples by default: a PyTorch training loop
//! written for the check (DataLoader workers, a Python helper between steps) is
//! recorded; its helper's sampled time is the program's own measure of it, its ops sit
//! under the Python frames that called them (one timeline), its workers are sampled,
//! and `--no-stacks` leaves them out. Keras and JAX programs get their stacks too.

mod common;

use std::path::Path;
use std::process::Command;

use common::{
    assert_ok, built, python, python_with, repo_root, run_oracle_json, scratch_dir, test_cache_dir,
};
use serde_json::Value;

/// `opscope record OPTIONS -o DIR -- python SCRIPT ARGS`, which must succeed; its
/// stdout.
fn record(dir: &Path, options: &[&str], script: &str, args: &[&Path]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_opscope"))
        .arg("record")
        .args(options)
        .arg("-o")
        .arg(dir)
        .arg("--")
        .arg(python())
        .arg(repo_root().join("tests/record").join(script))
        .args(args)
        .env("OPSCOPE_RECORD_LIB", built("libopscope_record.so"))
        .env("OPSCOPE_CACHE_DIR", test_cache_dir())
        .output()
        .unwrap();
    assert_ok(&out, &format!("recording {script}"));
    String::from_utf8(out.stdout).unwrap()
}

/// What a successful opscope command printed (the tests' model cache).
fn opscope(args: &[&str]) -> String {
    String::from_utf8(common::opscope_ok(args).stdout).unwrap()
}

/// What a successful opscope command said on stderr.
fn opscope_stderr(args: &[&str]) -> String {
    String::from_utf8(common::opscope_ok(args).stderr).unwrap()
}

/// `info --format json` of a session.
fn info_json(dir: &Path) -> Value {
    serde_json::from_str(&opscope(&[
        "info",
        "--format",
        "json",
        dir.to_str().unwrap(),
    ]))
    .unwrap()
}

fn folded(dir: &Path, extra: &[&str]) -> String {
    let file = dir.with_extension("folded");
    let mut args = vec!["convert", "--to", "folded", "-f", "-o"];
    args.extend([file.to_str().unwrap(), dir.to_str().unwrap()]);
    args.extend(extra);
    opscope(&args);
    std::fs::read_to_string(file).unwrap()
}

fn stacks_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("opscope-stacks-")
        })
        .count()
}

#[test]
fn a_recorded_training_loop_has_its_stacks_beside_its_ops() {
    if !python_with(&["torch"]) {
        return;
    }
    let scratch = scratch_dir("record-stacks");
    let dir = scratch.join("session");
    // 400 Hz: enough samples of the helper for its time to be known within a few %.
    let printed = record(&dir, &["--sample-hz", "400"], "stacks_train.py", &[]);
    let own: Value = serde_json::from_str(printed.lines().last().unwrap()).unwrap();
    let own_ns = own["augment_s"].as_f64().unwrap() * 1e9;
    assert_eq!(stacks_files(&dir), 1);

    // The helper's time, sampled, is the program's own measure of it.
    let hot: Value = serde_json::from_str(&opscope(&[
        "stats",
        "hot",
        "--format",
        "json",
        dir.to_str().unwrap(),
    ]))
    .unwrap();
    let augment = hot["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == "augment")
        .unwrap_or_else(|| panic!("no augment in {hot:#}"));
    let sampled_ns = augment["self_ns"].as_f64().unwrap();
    let ratio = sampled_ns / own_ns;
    assert!(
        (0.85..=1.15).contains(&ratio),
        "augment sampled {sampled_ns} ns, timed {own_ns} ns by the program"
    );
    assert!(augment["file"]
        .as_str()
        .unwrap()
        .ends_with("stacks_train.py"));

    // One timeline: the Linear layers' ops sit under the Python frame that ran them.
    let stacks = folded(&dir, &[]);
    let under_forward = stacks.lines().any(|l| {
        l.contains(";train_step (stacks_train.py:")
            && l.contains(";Linear.forward (linear.py:")
            && l.contains("Linear.forward (linear.py:")
            && l.contains(");aten::linear")
    });
    assert!(
        under_forward,
        "no aten::linear under Linear.forward:\n{stacks}"
    );
    // `stats code` charges each op to the Python stack sampled while it ran.
    let code: Value = serde_json::from_str(&opscope(&[
        "stats",
        "code",
        "--format",
        "json",
        dir.to_str().unwrap(),
    ]))
    .unwrap();
    // Nodes by their tree index (`parent` names one); the list is in display order.
    let nodes: std::collections::HashMap<u64, &Value> = code
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["index"].as_u64().unwrap(), n))
        .collect();
    let under_train_step = nodes.values().any(|n| {
        let mut at = n["parent"].as_u64();
        let mut seen = false;
        // A tree is at most as deep as it has nodes.
        for _ in 0..nodes.len() {
            let Some(parent) = at.and_then(|p| nodes.get(&p)) else {
                break;
            };
            seen |= parent["name"]
                .as_str()
                .unwrap()
                .starts_with("train_step (stacks_train.py:");
            at = parent["parent"].as_u64();
        }
        n["name"] == "aten::linear" && seen
    });
    assert!(
        under_train_step,
        "no aten::linear under train_step in stats code"
    );
    // The DataLoader's workers are sampled too, in their own loop.
    let wall = folded(&dir, &["--wall"]);
    let worker = wall
        .lines()
        .any(|l| l.starts_with("DataLoader worker") && l.contains(";_worker_loop (worker.py:"));
    assert!(worker, "no worker's stack:\n{wall}");

    // `info` says what was sampled.
    let info = opscope(&["info", dir.to_str().unwrap()]);
    assert!(info.contains("stacks      "), "{info}");

    // The Parquet dataset's samples, read by DuckDB alone, hold what `stats hot` says.
    if python_with(&["duckdb"]) {
        let dataset = scratch.join("session.parquet");
        opscope(&[
            "convert",
            dir.to_str().unwrap(),
            "-o",
            dataset.to_str().unwrap(),
        ]);
        let read = run_oracle_json("samples_parquet.py", &[&dataset]);
        let info = info_json(&dir);
        assert_eq!(read["samples"], info["stack_samples"]);
        assert_eq!(read["running"], info["stack_samples_on_cpu"]);
        assert_eq!(read["own_ns"]["augment"].as_f64().unwrap(), sampled_ns);
    }
}

/// GET `path` of the viewer at `url`; the body.
fn view_get(url: &str, path: &str) -> Value {
    use std::io::{Read, Write};
    let rest = &url["http://".len()..];
    let (host, token_path) = rest.split_at(rest.find('/').unwrap());
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    write!(
        stream,
        "GET {token_path}{path} HTTP/1.0\r\nHost: {host}\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let body = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer:.300}"))
}

/// The viewer draws a lane of sampled stacks per sampled thread, with the functions
/// nested as they were on the stack.
#[test]
fn the_viewer_draws_a_lane_of_sampled_stacks() {
    let scratch = scratch_dir("record-stacks-view");
    let dir = scratch.join("session");
    record(&dir, &[], "stacks_short.py", &[]);
    let viewer = common::viewer::start_viewer(&[dir.to_str().unwrap()]);
    let meta = view_get(&viewer.url, "api/meta");
    let lane = meta["meta"]["tracks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"].as_str().unwrap().starts_with("sampled stacks · "))
        .unwrap_or_else(|| panic!("no lane of sampled stacks: {meta:#}"))
        .clone();
    // `<module>` with `spin` in it.
    assert!(lane["rows"].as_u64().unwrap() >= 2, "{lane}");
    let view = view_get(
        &viewer.url,
        &format!(
            "api/view?start=-100000000000&end=100000000000000&px=1000&tracks={}",
            lane["id"]
        ),
    );
    let names = view["names"].to_string();
    assert!(names.contains("spin (stacks_short.py)"), "{view:#}");
}

#[test]
fn no_stacks_leaves_them_out() {
    let scratch = scratch_dir("record-no-stacks");
    let dir = scratch.join("session");
    record(&dir, &["--no-stacks"], "stacks_short.py", &[]);
    assert_eq!(stacks_files(&dir), 0);
    let with = scratch.join("with");
    record(&with, &[], "stacks_short.py", &[]);
    assert_eq!(stacks_files(&with), 1);
    assert!(folded(&with, &[]).contains(";spin (stacks_short.py:"));
    // Converted, they are kept where the format has a place for them, and said to be
    // left out where it has none.
    let samples = info_json(&with)["stack_samples"].clone();
    let kept = scratch.join("kept.pftrace");
    let said = opscope_stderr(&[
        "convert",
        with.to_str().unwrap(),
        "-o",
        kept.to_str().unwrap(),
    ]);
    assert!(said.contains(&format!("{samples} stack samples")), "{said}");
    assert_eq!(info_json(&kept)["stack_samples"], samples);
    let json = scratch.join("lost.json");
    let said = opscope_stderr(&[
        "convert",
        with.to_str().unwrap(),
        "-o",
        json.to_str().unwrap(),
    ]);
    assert!(said.contains("stack samples left out"), "{said}");
}

/// Keras (on TensorFlow) and JAX programs written for other checks: their Python
/// frames are sampled beside what their profilers recorded.
#[test]
fn keras_and_jax_programs_are_sampled_too() {
    for (module, script, frame) in [
        (
            "tensorflow",
            "steps_keras.py",
            "<module> (steps_keras.py:41);",
        ),
        ("jax", "jax_jit.py", "<module> (jax_jit.py:"),
    ] {
        if !python_with(&[module]) {
            continue;
        }
        let scratch = scratch_dir(&format!("record-stacks-{module}"));
        let dir = scratch.join("session");
        let log = scratch.join("steps.log");
        record(&dir, &[], script, &[&log]);
        let stacks = folded(&dir, &["--wall"]);
        assert!(
            stacks.lines().any(|l| l.contains(frame)),
            "{script}: no {frame} in\n{stacks}"
        );
        // On the one clock of the session (the framework's profile is on Unix time, and
        // the samples were moved there with the rest): a run of seconds, not decades.
        let span = info_json(&dir)["duration_ns"].as_i64().unwrap();
        assert!(span < 120_000_000_000, "{script}: spans {span} ns");
    }
}

/// `record --pid`: a program already running (`stacks_hot.py`, a fixed amount of work
/// once told to go) is recorded from outside until it ends: its hot functions' stacks
/// and its processes' counters land in the session, and opscope ends when it does.
#[test]
fn record_pid_follows_a_running_program_until_it_ends() {
    use std::io::{BufRead, Write};
    let scratch = scratch_dir("record-pid");
    let mut program = Command::new(python())
        .arg(repo_root().join("tests/record/stacks_hot.py"))
        .env("STACKS_HOT_ROUNDS", "3000")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(program.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    let dir = scratch.join("session");
    let mut recording = Command::new(env!("CARGO_BIN_EXE_opscope"))
        .args(["record", "--pid", &program.id().to_string(), "-o"])
        .arg(&dir)
        .env("OPSCOPE_CACHE_DIR", test_cache_dir())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // It says so once it reads the program; then the program may go.
    let mut said = std::io::BufReader::new(recording.stderr.take().unwrap());
    let mut first = String::new();
    said.read_line(&mut first).unwrap();
    assert!(first.contains("recording process"), "{first}");
    writeln!(program.stdin.take().unwrap(), "go").unwrap();
    assert!(program.wait().unwrap().success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut said, &mut rest).unwrap();
    // It ends by itself once the program has.
    assert!(recording.wait().unwrap().success(), "{rest}");
    let stacks = folded(&dir, &[]);
    for hot in ["heavy (stacks_hot.py:", "light (stacks_hot.py:"] {
        assert!(stacks.contains(hot), "no {hot} in\n{stacks}\n{rest}");
    }
    let files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        files.iter().any(|f| f.starts_with("opscope-processes-")),
        "{files:?}"
    );
}

/// `opscope record -o DIR -- python SCRIPT` with `env`, for a test of native stacks:
/// `false` (the test skipped, saying why) where the kernel refused them off CI.
fn record_native(dir: &Path, script: &Path, env: &[(&str, &str)]) -> bool {
    let out = Command::new(env!("CARGO_BIN_EXE_opscope"))
        .args(["record", "-o", dir.to_str().unwrap(), "--"])
        .arg(python())
        .arg(script)
        .envs(env.iter().copied())
        .env("OPSCOPE_RECORD_LIB", built("libopscope_record.so"))
        .output()
        .unwrap();
    assert_ok(&out, &format!("recording {}", script.display()));
    let said = String::from_utf8_lossy(&out.stderr);
    if said.contains("no native stacks") {
        assert!(
            std::env::var_os("CI").is_none(),
            "native stacks refused in CI: {said}"
        );
        eprintln!("skipped: {said}");
        return false;
    }
    true
}

/// `py-spy record --native` of `python SCRIPT` with `env` (raw folded stacks), or
/// `None` (skipped, saying why) where no py-spy is beside the tests' Python off CI.
fn py_spy_native(scratch: &Path, script: &Path, env: &[(&str, &str)]) -> Option<String> {
    let py_spy = Path::new(&python()).with_file_name("py-spy");
    if !py_spy.exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "no py-spy beside {}",
            python()
        );
        eprintln!(
            "skipped the py-spy comparison: no py-spy beside {}",
            python()
        );
        return None;
    }
    let raw = scratch.join("py-spy-native.txt");
    let out = Command::new(&py_spy)
        .args(["record", "--native", "--format", "raw", "-r", "100", "-o"])
        .arg(&raw)
        .arg("--")
        .arg(python())
        .arg(script)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    // py-spy 0.4 sometimes fails after writing its file, waiting for a child it has
    // already reaped under ptrace ("No child process (os error 10)"): its samples stand.
    let said = [&out.stdout[..], &out.stderr[..]].concat();
    let said = String::from_utf8_lossy(&said);
    if !(said.contains("Wrote raw flamegraph data") && said.contains("No child process")) {
        assert_ok(&out, "py-spy record --native");
    }
    Some(std::fs::read_to_string(&raw).unwrap())
}

/// (innermost Python function, the native function it called) → weight, of the
/// stacks of a folded file (ours or py-spy's raw output) with native frames under
/// Python ones; frames are `function (file:line)` or `function (library)`.
fn python_to_native_calls(folded: &str) -> std::collections::HashMap<(String, String), u64> {
    let mut calls = std::collections::HashMap::new();
    for line in folded.lines() {
        let Some((stack, weight)) = line.rsplit_once(' ') else {
            continue;
        };
        let frames: Vec<&str> = stack.split(';').collect();
        let Some(at) = frames.iter().rposition(|f| f.contains(".py:")) else {
            continue;
        };
        let name = |f: &str| f.split_once(" (").map_or(f, |x| x.0).to_string();
        if let Some(callee) = frames.get(at + 1) {
            *calls.entry((name(frames[at]), name(callee))).or_default() +=
                weight.parse::<u64>().unwrap();
        }
    }
    calls
}

/// Native stacks merged with the Python ones (py-spy's `--native` rule): zlib's C
/// frames stand under the Python function that called it, the interpreter's eval
/// loop and machinery are gone, the pure Python function has (nearly) no zlib under
/// it, each Python-to-native call is one `py-spy record --native` shows in a run of
/// the same program, and `stats hot` counts native code only when asked.
#[test]
fn native_frames_stand_under_the_python_function_that_called_them() {
    let scratch = scratch_dir("record-native");
    let dir = scratch.join("session");
    let script = repo_root().join("tests/record/stacks_native.py");
    let env = [("STACKS_NATIVE_ROUNDS", "40")];
    if !record_native(&dir, &script, &env) {
        return;
    }
    let stacks = folded(&dir, &[]);
    // Per Python function: its weight, and the part with zlib (the extension module
    // or libz) under it.
    let mut under: std::collections::HashMap<&str, [u64; 2]> = Default::default();
    for line in stacks.lines() {
        let (stack, weight) = line.rsplit_once(' ').unwrap();
        let weight: u64 = weight.parse().unwrap();
        let frames: Vec<&str> = stack.split(';').collect();
        let python = frames.iter().any(|f| f.contains(".py:"));
        for machinery in ["_PyEval_EvalFrameDefault", "_PyObject_Malloc", "Py_RunMain"] {
            assert!(
                !python || !frames.iter().any(|f| f.starts_with(machinery)),
                "the interpreter's {machinery} left in a stack with Python frames: {stack}"
            );
        }
        for function in ["in_c", "in_python"] {
            let Some(at) = frames
                .iter()
                .position(|f| f.starts_with(&format!("{function} (")))
            else {
                continue;
            };
            let entry = under.entry(function).or_default();
            entry[0] += weight;
            if frames[at + 1..]
                .iter()
                .any(|f| f.contains("libz.so") || f.contains("(zlib."))
            {
                entry[1] += weight;
            }
        }
    }
    let share = |f: &str| under[f][1] as f64 / under[f][0].max(1) as f64;
    assert!(
        share("in_c") >= 0.2,
        "in_c has little zlib under it: {under:?}"
    );
    assert!(
        share("in_python") <= 0.1,
        "zlib under the Python loop: {under:?}"
    );

    // py-spy stops the program for each sample and reads both stacks at once: every
    // call from Python into native code it saw is the truth to compare with.
    if let Some(raw) = py_spy_native(&scratch, &script, &env) {
        let theirs = python_to_native_calls(&raw);
        let ours = python_to_native_calls(&stacks);
        let all: u64 = ours.values().sum();
        let seen: u64 = ours
            .iter()
            .filter(|(call, _)| theirs.contains_key(*call))
            .map(|(_, w)| w)
            .sum();
        assert!(
            theirs.contains_key(&("in_c".to_string(), "zlib_compress".to_string())),
            "py-spy saw no in_c → zlib_compress: {theirs:?}"
        );
        assert!(
            seen as f64 >= 0.9 * all as f64,
            "our Python → native calls {ours:?}, py-spy's {theirs:?}"
        );
    }

    let hot = |extra: &[&str]| -> Value {
        let mut args = vec!["stats", "hot", "--format", "json", "--limit", "0"];
        args.extend(extra);
        args.push(dir.to_str().unwrap());
        serde_json::from_str(&opscope(&args)).unwrap()
    };
    let python_only = hot(&[]);
    for f in python_only["functions"].as_array().unwrap() {
        let file = f["file"].as_str().unwrap();
        // Python's files: sources, or frozen modules (`<frozen importlib._bootstrap>`).
        let python = file.ends_with(".py") || file.starts_with('<');
        assert!(python, "a native function without --native: {f}");
    }
    let native = hot(&["--native"]);
    let zlib_own: f64 = native["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["file"].as_str().unwrap().starts_with("libz.so"))
        .map(|f| f["self_pct"].as_f64().unwrap())
        .sum();
    assert!(
        zlib_own >= 10.0,
        "libz's own share {zlib_own} %: {native:#}"
    );
}

/// The named native frames between `outer` and `inner` (Python frames) of each stack
/// of a folded file that has both: unnamed code (`[lib]`, `0x…`) left out.
fn native_between(folded: &str, outer: &str, inner: &str) -> Vec<(Vec<String>, u64)> {
    let mut found = Vec::new();
    for line in folded.lines() {
        let Some((stack, weight)) = line.rsplit_once(' ') else {
            continue;
        };
        let frames: Vec<&str> = stack.split(';').collect();
        let at = |name: &str| {
            frames
                .iter()
                .position(|f| f.starts_with(&format!("{name} (")))
        };
        if let (Some(o), Some(i)) = (at(outer), at(inner)) {
            let names = frames[o + 1..i.max(o + 1)]
                .iter()
                .map(|f| f.split_once(" (").map_or(*f, |x| x.0))
                .filter(|f| !f.starts_with('[') && !f.starts_with("0x"))
                .map(str::to_string)
                .collect();
            found.push((names, weight.parse().unwrap()));
        }
    }
    found
}

/// C calling back into Python (libc's qsort through ctypes calling a Python compare):
/// each eval loop gives way to the Python frames it ran, so the C between the two runs
/// stands between them, as `py-spy record --native` shows it: each native function
/// opscope shows there is one py-spy shows there.
#[test]
fn a_callback_from_c_stands_between_its_python_callers() {
    let scratch = scratch_dir("record-callback");
    let dir = scratch.join("session");
    let script = repo_root().join("tests/record/stacks_callback.py");
    if !record_native(&dir, &script, &[]) {
        return;
    }
    let ours = native_between(&folded(&dir, &[]), "sort_in_c", "compare");
    let all: u64 = ours.iter().map(|(_, w)| w).sum();
    // Samples whose native stack was taken at another moment stay Python only (no
    // frames between); every one that has some has the whole chain, in order.
    let merged: Vec<&(Vec<String>, u64)> = ours.iter().filter(|(n, _)| !n.is_empty()).collect();
    let merged_weight: u64 = merged.iter().map(|(_, w)| w).sum();
    for (names, _) in &merged {
        let at = |n: &str| names.iter().position(|f| f == n);
        assert!(
            matches!(
                (at("PyCFuncPtr_call"), at("qsort_r"), at("closure_fcn")),
                (Some(a), Some(b), Some(c)) if a < b && b < c
            ),
            "compare not under qsort_r under sort_in_c: {names:?}"
        );
    }
    assert!(
        merged_weight as f64 >= 0.2 * all as f64,
        "few of compare's samples merged: {ours:?}"
    );

    let Some(raw) = py_spy_native(&scratch, &script, &[]) else {
        return;
    };
    let theirs: std::collections::HashSet<String> = native_between(&raw, "sort_in_c", "compare")
        .into_iter()
        .flat_map(|(names, _)| names)
        .collect();
    assert!(
        theirs.contains("qsort_r"),
        "py-spy saw no qsort_r: {theirs:?}"
    );
    for (names, _) in &ours {
        for name in names {
            assert!(
                theirs.contains(name),
                "{name} is in no stack py-spy shows: {theirs:?}"
            );
        }
    }
}
