//! `opscope record` end to end: real programs (the dataflow example, Python scripts
//! using the `nvtx`, `ittapi`, `torch` and `tensorflow` packages) are recorded, and what
//! the session holds, read back by an independent decoder built on Perfetto's own protos
//! (`tests/oracle/recorded_events.py`), is compared with each program's own account of
//! what it emitted, or with torch.profiler's count of the same script's ops.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{
    assert_ok, built, compile_c, compile_itt_program, python, python_with, repo_root,
    run_oracle_json, scratch_dir, test_cache_dir,
};
use serde_json::Value;

/// Runs `opscope record -o DIR -- program args` with extra environment.
fn record(dir: &Path, program: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    record_with(&[], dir, program, args, env)
}

/// Runs `opscope record OPTIONS -o DIR -- program args` with extra environment.
fn record_with(
    options: &[&str],
    dir: &Path,
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    let mut command = record_command(options, dir);
    command.arg(program).args(args);
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().expect("opscope runs")
}

/// `opscope record OPTIONS -o DIR --` (DIR emptied first), with the library this build
/// made; the program and its arguments are for the caller to add.
fn record_command(options: &[&str], dir: &Path) -> Command {
    let _ = std::fs::remove_dir_all(dir);
    let mut command = Command::new(env!("CARGO_BIN_EXE_opscope"));
    command
        .arg("record")
        .args(options)
        .arg("-o")
        .arg(dir)
        .arg("--")
        .env("OPSCOPE_RECORD_LIB", built("libopscope_record.so"))
        .env("OPSCOPE_CACHE_DIR", test_cache_dir());
    command
}

/// The injected library's files of a session, decoded independently, by pid.
fn recorded(dir: &Path) -> BTreeMap<i64, Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            common::is_recorders_file(&name)
        })
        .collect();
    files.sort();
    let decoded = run_oracle_json("recorded_events.py", &files);
    decoded
        .as_object()
        .unwrap()
        .values()
        .map(|f| (f["pid"].as_i64().unwrap(), f.clone()))
        .collect()
}

fn script(name: &str) -> String {
    repo_root()
        .join("tests/record")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// Slices of a decoded file as (category, name) → count.
fn slice_counts(file: &Value) -> HashMap<(String, String), u64> {
    let mut counts = HashMap::new();
    for s in file["slices"].as_array().unwrap() {
        let key = (
            s[1].as_str().unwrap().to_string(),
            s[2].as_str().unwrap().to_string(),
        );
        *counts.entry(key).or_default() += 1;
    }
    counts
}

/// The process sampler's file of a session, decoded independently.
fn sampler_file(dir: &Path) -> Value {
    let sampler = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("opscope-processes")
        })
        .expect("the sampler's file");
    let decoded = run_oracle_json("recorded_events.py", &[sampler]);
    decoded
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap()
        .clone()
}

/// The samples of the one counter of decoded `file` whose "process name/track name"
/// key names `track` and has `owner` in its process's name.
fn counter_samples(file: &Value, owner: &str, track: &str) -> Vec<f64> {
    let values = &file["counter_values"];
    let (_, samples) = values
        .as_object()
        .unwrap()
        .iter()
        .find(|(key, _)| key.ends_with(&format!("/{track}")) && key.contains(owner))
        .unwrap_or_else(|| panic!("no {track} counter of {owner:?} in {values}"));
    samples
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect()
}

/// `record --cupti` of a program that never initialises CUDA says that no GPU work was
/// recorded (it said nothing: the session looked like a recording that had failed).
#[test]
fn cupti_on_a_program_without_cuda_says_no_gpu_work_was_recorded() {
    let dir = scratch_dir("record-cupti-no-cuda");
    let session = dir.join("session");
    let out = record_with(
        &["--cupti"],
        &session,
        &built("dataflow"),
        &["--steps", "2"],
        &[],
    );
    assert_ok(&out, "recording the example with --cupti");
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(
        summary.contains("--cupti: no kernel, copy or memset was recorded"),
        "{summary}"
    );
    // Its ops are recorded and summarised all the same.
    assert!(summary.contains("top ops by total time"), "{summary}");
}

/// The pids the process sampler saw (every process of the recorded tree).
fn sampled_pids(dir: &Path) -> Vec<i64> {
    sampler_file(dir)["pids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_i64().unwrap())
        .collect()
}

#[test]
fn the_example_workload_is_recorded_as_it_accounts_for_itself() {
    if !python_with(&["perfetto"]) {
        return;
    }
    let dir = scratch_dir("record-example");
    let session = dir.join("session");
    let out = record(&session, &built("dataflow"), &["--steps", "5"], &[]);
    assert_ok(&out, "recording the example");
    let own: Value = serde_json::from_slice(&out.stdout).expect("the example's JSON line");

    let files = recorded(&session);
    assert_eq!(files.len(), 1, "one process, one file");
    let file = files.values().next().unwrap();
    let counts = slice_counts(file);
    for (op, n) in own["ops"].as_object().unwrap() {
        let key = ("itt/opscope.example".to_string(), op.clone());
        assert_eq!(
            counts.get(&key).copied().unwrap_or(0),
            n.as_u64().unwrap(),
            "{op}"
        );
    }
    let ops: u64 = own["ops"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    let steps = own["steps"].as_u64().unwrap();
    let step_ranges = (0..steps)
        .filter(|i| counts.get(&("nvtx".into(), format!("step {i}"))) == Some(&1))
        .count() as u64;
    assert_eq!(step_ranges, own["nvtx_ranges"].as_u64().unwrap());
    let marks: Vec<&Value> = file["instants"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i[2] == "graph built")
        .collect();
    assert_eq!(marks.len() as u64, own["nvtx_marks"].as_u64().unwrap());

    // Ops ran on the worker threads, each named; the steps on the main thread, and
    // every op lies inside a step.
    let threads = file["threads"].as_object().unwrap();
    let pid = file["pid"].as_i64().unwrap();
    let mut ops_seen = 0;
    let slices = file["slices"].as_array().unwrap();
    let steps_spans: Vec<(i64, i64)> = slices
        .iter()
        .filter(|s| s[1] == "nvtx")
        .map(|s| {
            assert_eq!(s[0].as_i64(), Some(pid), "steps on the main thread");
            (
                s[3].as_i64().unwrap(),
                s[3].as_i64().unwrap() + s[4].as_i64().unwrap(),
            )
        })
        .collect();
    for s in slices.iter().filter(|s| s[1] == "itt/opscope.example") {
        let tid = s[0].as_i64().unwrap().to_string();
        assert!(
            threads[&tid].as_str().unwrap().starts_with("worker-"),
            "{s}"
        );
        let (b, e) = (
            s[3].as_i64().unwrap(),
            s[3].as_i64().unwrap() + s[4].as_i64().unwrap(),
        );
        assert!(
            steps_spans.iter().any(|&(sb, se)| sb <= b && e <= se),
            "op outside every step: {s}"
        );
        ops_seen += 1;
    }
    assert_eq!(ops_seen, ops);

    // The session is a TRACE for the other commands.
    let info = common::opscope_ok(&["info", "--format", "json", session.to_str().unwrap()]);
    let info: Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(info["slices_by_kind"]["op"].as_u64(), Some(ops));
    // The program's file and the samplers' describe one process (the stack sampler's
    // file holds its native stacks: a Rust program has no Python ones).
    let stacks_file = std::fs::read_dir(&session).unwrap().any(|e| {
        e.unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("opscope-stacks-")
    });
    assert!(
        stacks_file || std::env::var_os("CI").is_none(),
        "no native stacks of the example in CI"
    );
    let files = 2 + usize::from(stacks_file);
    assert_eq!(info["files"].as_array().map(Vec::len), Some(files));
    assert_eq!(info["processes"].as_u64(), Some(1), "{info}");
    assert_eq!(info["slices_by_kind"]["annotation"].as_u64(), Some(steps));
    // The summary: the steps on a line of their own, and in the table every op type
    // the example ran (it has eight, under ten rows), no step.
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(!summary.contains("--cupti"), "{summary}");
    assert!(
        summary.contains(&format!("steps: {steps} (from step markers)")),
        "{summary}"
    );
    let table: Vec<&str> = summary
        .lines()
        .skip_while(|l| !l.starts_with("top ops by total time"))
        .skip(2)
        .take_while(|l| !l.starts_with("more:"))
        .collect();
    let names: std::collections::BTreeSet<&str> = table
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    let expected: std::collections::BTreeSet<&str> = own["ops"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(names, expected, "{summary}");
}

#[test]
fn the_programs_exit_status_and_output_pass_through() {
    let dir = scratch_dir("record-status");
    let out = record(
        &dir.join("a"),
        &built("dataflow"),
        &["--steps", "1", "--quiet", "--exit-code", "3"],
        &[],
    );
    assert_eq!(out.status.code(), Some(3));
    assert!(out.stdout.is_empty());

    // A program that uses no framework: untouched, same status, same output.
    let program = "import sys; print('plain'); sys.stderr.write('err\\n'); sys.exit(7)";
    let plain = Command::new(python())
        .args(["-c", program])
        .output()
        .unwrap();
    let out = record(&dir.join("b"), Path::new(&python()), &["-c", program], &[]);
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(out.status.code(), plain.status.code());
    assert_eq!(out.stdout, plain.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("err\n"));
    assert!(
        recorded_files(&dir.join("b")).is_empty(),
        "nothing loaded the library"
    );
    // "0 slices" alone reads as a failure: the summary says what opscope records and
    // that this program used none of it.
    assert!(
        stderr.contains("0 slices") && stderr.contains("this program used none of them"),
        "{stderr}"
    );

    // A signal that ends the program is reported as shells do.
    let out = record(
        &dir.join("c"),
        Path::new("/bin/sh"),
        &["-c", "kill -TERM $$"],
        &[],
    );
    assert_eq!(out.status.code(), Some(128 + 15));

    // A missing program is a clear error, not a panic, and leaves no session behind.
    let out = record(&dir.join("d"), Path::new("/no/such/program"), &[], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot run /no/such/program"));
    assert!(
        !dir.join("d").exists(),
        "the session directory of a program that never started is removed"
    );
}

/// A program that crashes or fails is said to have done so, and its status still
/// becomes opscope's.
#[test]
fn a_program_that_crashes_or_fails_is_reported() {
    let dir = scratch_dir("record-crash");
    let crash = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)";
    let out = record(&dir.join("a"), Path::new(&python()), &["-c", crash], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + 11), "{stderr}");
    assert!(
        stderr.contains("opscope: the program was killed by SIGSEGV"),
        "{stderr}"
    );
    let out = record(&dir.join("b"), Path::new("/bin/sh"), &["-c", "exit 3"], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr.contains("opscope: the program exited with status 3"),
        "{stderr}"
    );
    // A program that ends well gets no such line.
    let out = record(&dir.join("c"), Path::new("/bin/true"), &[], &[]);
    assert_ok(&out, "true");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("opscope: the program"), "{stderr}");
}

/// A disk that fills up while the program runs: the program's status is its own,
/// record says what was lost, and every command still reads what the session holds.
/// The disk is a 1 MiB tmpfs in a mount namespace of the test's own (`unshare`), which
/// a shell fills between two runs of the example workload.
#[test]
fn a_full_disk_loses_only_what_did_not_fit() {
    let dir = scratch_dir("record-full-disk");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let can_mount = Command::new("unshare")
        .args([
            "-rm",
            "sh",
            "-c",
            "mount -t tmpfs -o size=64k tmpfs \"$0\"",
            dir.to_str().unwrap(),
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !can_mount {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but `unshare -rm` cannot mount a tmpfs"
        );
        opscope_corpus::skip("`unshare -rm` cannot mount a tmpfs here");
        return;
    }
    let disk = dir.join("disk");
    std::fs::create_dir_all(&disk).unwrap();
    let session = disk.join("session");
    let dataflow = built("dataflow");
    let program = format!(
        "{d} --steps 3 --quiet; dd if=/dev/zero of={disk}/fill bs=4k 2>/dev/null; {d} --steps 30 --quiet; exit 5",
        d = dataflow.display(),
        disk = disk.display()
    );
    let opscope = env!("CARGO_BIN_EXE_opscope");
    let script = format!(
        "mount -t tmpfs -o size=1m tmpfs {disk} || exit 99; \
         {opscope} record -o {session} -- sh -c '{program}'; echo \"record=$?\"; \
         {opscope} info --format json {session} > {out}/info.json; echo \"info=$?\"",
        disk = disk.display(),
        session = session.display(),
        out = dir.display(),
    );
    let out = Command::new("unshare")
        .args(["-rm", "sh", "-c", &script])
        .env("OPSCOPE_RECORD_LIB", built("libopscope_record.so"))
        .env("OPSCOPE_CACHE_DIR", test_cache_dir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("record=5"),
        "the program's status: {stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("No space left on device")
            && stderr.contains("recording is off in process"),
        "the library says its file is cut short: {stderr}"
    );
    assert!(
        stderr.contains("opscope: lost the process samples"),
        "{stderr}"
    );
    assert!(
        stdout.contains("info=0"),
        "the session still reads: {stdout}\n{stderr}"
    );
    let info: Value =
        serde_json::from_slice(&std::fs::read(dir.join("info.json")).unwrap()).unwrap();
    let ops = info["slices_by_kind"]["op"].as_u64().unwrap_or(0);
    assert!(
        ops >= 3 * 23,
        "the first run's ops (23 a step) are all there: {info}"
    );
}

/// `cargo install` puts the `opscope` binary alone in `~/.cargo/bin`: it carries the
/// injected library and writes it once into the user's cache, so a copy of the binary
/// with nothing beside it records.
#[test]
fn the_binary_alone_records_with_the_library_it_carries() {
    let dir = scratch_dir("record-installed");
    let _ = std::fs::remove_dir_all(&dir);
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_opscope"), bin.join("opscope")).unwrap();
    let home = dir.join("home");
    let record_once = |session: &str| {
        Command::new(bin.join("opscope"))
            .args(["record", "-o"])
            .arg(dir.join(session))
            .arg("--")
            .arg(built("dataflow"))
            .args(["--steps", "2", "--quiet"])
            .env_remove("OPSCOPE_RECORD_LIB")
            .env_remove("XDG_CACHE_HOME")
            .env("HOME", &home)
            .env("OPSCOPE_CACHE_DIR", "off")
            .output()
            .unwrap()
    };
    let out = record_once("s1");
    assert_ok(&out, "the binary alone");
    assert_eq!(
        recorded_files(&dir.join("s1")).len(),
        1,
        "the carried library recorded the program"
    );
    let cached: Vec<PathBuf> = walk(&home.join(".cache/opscope/lib"));
    assert_eq!(cached.len(), 1, "written once into the cache: {cached:?}");
    let written = std::fs::metadata(&cached[0]).unwrap().modified().unwrap();
    assert_ok(&record_once("s2"), "the second run");
    assert_eq!(
        std::fs::metadata(&cached[0]).unwrap().modified().unwrap(),
        written,
        "the second run uses the cached library as it is"
    );
}

/// `-o DIR` is a new or empty directory: a session mixed into other files would no
/// longer read as one trace, and a recording is never overwritten.
#[test]
fn record_takes_only_a_new_or_empty_directory() {
    let dir = scratch_dir("record-output-dir");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("busy")).unwrap();
    std::fs::write(dir.join("busy/notes.txt"), "mine").unwrap();
    std::fs::create_dir_all(dir.join("empty")).unwrap();
    let record_into = |name: &str| {
        Command::new(env!("CARGO_BIN_EXE_opscope"))
            .args(["record", "-q", "-o"])
            .arg(dir.join(name))
            .args(["--", "/bin/true"])
            .env("OPSCOPE_RECORD_LIB", built("libopscope_record.so"))
            .output()
            .unwrap()
    };
    let out = record_into("busy");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is not empty"), "{stderr}");
    assert_eq!(
        std::fs::read_dir(dir.join("busy")).unwrap().count(),
        1,
        "nothing written beside the user's file"
    );
    assert_ok(&record_into("empty"), "record into an empty directory");
    let out = record_into("empty");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("already holds a recording"), "{stderr}");
}

fn recorded_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            common::is_recorders_file(&name)
        })
        .collect()
}

#[test]
fn a_users_sitecustomize_still_runs_under_the_bootstrap() {
    let dir = scratch_dir("record-sitecustomize");
    let site = dir.join("site");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(
        site.join("sitecustomize.py"),
        "import os\nos.environ['USER_SITE_RAN'] = 'yes'\n",
    )
    .unwrap();
    let out = record(
        &dir.join("session"),
        Path::new(&python()),
        &["-c", "import os; print(os.environ.get('USER_SITE_RAN'))"],
        &[("PYTHONPATH", site.to_str().unwrap())],
    );
    assert_ok(&out, "python with a sitecustomize");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "yes");
}

#[test]
fn nvtx_ranges_marks_domains_and_payloads_arrive_as_pushed() {
    if !python_with(&["nvtx", "perfetto"]) {
        return;
    }
    let dir = scratch_dir("record-nvtx");
    let own_path = dir.join("pushed.json");
    let out = record(
        &dir.join("session"),
        Path::new(&python()),
        &[&script("nvtx_ranges.py"), own_path.to_str().unwrap()],
        &[],
    );
    assert_ok(&out, "nvtx_ranges.py");
    let pushed: Value = serde_json::from_slice(&std::fs::read(&own_path).unwrap()).unwrap();
    let files = recorded(&dir.join("session"));
    assert_eq!(files.len(), 1);
    let file = files.values().next().unwrap();

    // Each list as sorted (where, category, name, args) tuples, times aside.
    let shape = |items: &Value, args_at: usize| -> Vec<String> {
        let mut v: Vec<String> = items
            .as_array()
            .unwrap()
            .iter()
            .map(|i| format!("{} {} {} {}", i[0], i[1], i[2], i[args_at]))
            .collect();
        v.sort();
        v
    };
    let mut got_slices: Vec<Value> = Vec::new();
    let mut got_ranges: Vec<Value> = Vec::new();
    for s in file["slices"].as_array().unwrap() {
        let entry = Value::Array(vec![s[0].clone(), s[1].clone(), s[2].clone(), s[5].clone()]);
        if s[0].is_string() {
            got_ranges.push(entry);
        } else {
            got_slices.push(entry);
        }
    }
    assert_eq!(
        shape(&Value::Array(got_slices), 3),
        shape(&pushed["slices"], 3)
    );
    assert_eq!(
        shape(&Value::Array(got_ranges), 3),
        shape(&pushed["ranges"], 3)
    );
    assert_eq!(shape(&file["instants"], 4), shape(&pushed["instants"], 3));
}

#[test]
fn itt_tasks_events_and_thread_names_from_python_arrive_as_emitted() {
    if !python_with(&["ittapi", "perfetto"]) {
        return;
    }
    let dir = scratch_dir("record-ittapi");
    let own_path = dir.join("counts.json");
    let out = record(
        &dir.join("session"),
        Path::new(&python()),
        &[&script("itt_tasks.py"), own_path.to_str().unwrap()],
        &[],
    );
    assert_ok(&out, "itt_tasks.py");
    let own: BTreeMap<String, u64> =
        serde_json::from_slice(&std::fs::read(&own_path).unwrap()).unwrap();
    let files = recorded(&dir.join("session"));
    let file = files.values().next().unwrap();
    let threads = file["threads"].as_object().unwrap();
    let mut got: BTreeMap<String, u64> = BTreeMap::new();
    for s in file["slices"].as_array().unwrap() {
        // Overlapped tasks sit on their domain's lanes, not on a thread.
        let thread = s[0].as_i64().map_or(String::new(), |tid| {
            threads[&tid.to_string()].as_str().unwrap().to_string()
        });
        *got.entry(format!(
            "{}|{}|{}",
            s[1].as_str().unwrap(),
            s[2].as_str().unwrap(),
            thread
        ))
        .or_default() += 1;
    }
    assert_eq!(got, own);
}

/// Blocks the collector kept in the program's heap moved glibc's trims and cost PyTorch
/// steps page faults (BENCHMARKS.md): it must take nothing from `malloc` as it records.
#[test]
fn the_collector_takes_nothing_from_the_programs_heap() {
    if !python_with(&["ittapi", "perfetto"]) {
        return;
    }
    let dir = scratch_dir("record-heap");
    let out = record(
        &dir.join("session"),
        Path::new(&python()),
        &[&script("heap_untouched.py")],
        &[],
    );
    assert_ok(&out, "heap_untouched.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap();
    // The collector that kept its names in the program's heap took about 280 bytes a
    // name (165-180 KB for 600); Python's own allocations move the count by a few KB.
    let grown = report["after"].as_i64().unwrap() - report["before"].as_i64().unwrap();
    assert!(
        grown < 32 << 10,
        "the program's heap grew by {grown} bytes while 2000 new task names were recorded"
    );
    // The collector was there: every task of both rounds was recorded.
    let files = recorded(&dir.join("session"));
    let slices = files.values().next().unwrap()["slices"].as_array().unwrap();
    let measured = slices
        .iter()
        .filter(|s| s[2].as_str().unwrap_or("").starts_with("measured task "))
        .count();
    assert_eq!(measured, 2000);
}

#[test]
fn pytorch_ops_are_counted_as_torch_profiler_counts_them() {
    if !python_with(&["torch", "perfetto"]) {
        return;
    }
    let profiled = Command::new(python())
        .args([&script("torch_cnn.py"), "profile"])
        .output()
        .unwrap();
    assert_ok(&profiled, "torch_cnn.py under torch.profiler");
    let expected: BTreeMap<String, u64> = serde_json::from_slice(&profiled.stdout).unwrap();

    let dir = scratch_dir("record-torch");
    let out = record(
        &dir.join("session"),
        Path::new(&python()),
        &[&script("torch_cnn.py")],
        &[],
    );
    assert_ok(&out, "torch_cnn.py");
    let files = recorded(&dir.join("session"));
    assert_eq!(files.len(), 1);
    let mut got: BTreeMap<String, u64> = BTreeMap::new();
    let mut onednn = 0;
    for ((category, name), n) in slice_counts(files.values().next().unwrap()) {
        match category.as_str() {
            "itt/PyTorch" => *got.entry(name).or_default() += n,
            c if c.starts_with("itt/dnnl") => onednn += n,
            _ => {}
        }
    }
    assert!(
        expected.len() > 20,
        "the profiler saw the ops: {expected:?}"
    );
    assert_eq!(
        got, expected,
        "per-op counts: opscope record vs torch.profiler key_averages()"
    );
    assert!(onednn > 0, "torch's oneDNN primitives are recorded too");
}

/// The library is loaded and recording before the program's first line: what a
/// process pays once (ITT loading the library, the library's file and writer thread,
/// the profiler ops' look-up: 0.5-1.7 ms) fell inside the program's first step, before
/// its first range, which then started that late. The bootstrap's warm-up range itself
/// is not recorded.
#[test]
fn torch_programs_first_range_finds_recording_started() {
    if !python_with(&["torch", "perfetto"]) {
        return;
    }
    let dir = scratch_dir("record-first-range");
    let session = dir.join("session");
    let out = record(
        &session,
        Path::new(&python()),
        &[&script("torch_first_range.py")],
        &[],
    );
    assert_ok(&out, "torch_first_range.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let seen: Value = stdout
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON line from the program: {stdout}"));
    assert_eq!(seen["loaded"], true, "{seen}");
    assert_eq!(seen["started"], true, "{seen}");
    let files = recorded(&session);
    let counts = slice_counts(files.values().next().expect("the program's file"));
    let named = |name: &str| -> u64 {
        counts
            .iter()
            .filter(|((_, n), _)| n == name)
            .map(|(_, c)| c)
            .sum()
    };
    assert_eq!(named("first"), 1, "{counts:?}");
    assert_eq!(named("opscope warm-up"), 0, "{counts:?}");
}

#[test]
fn keras_onednn_primitives_and_tensorflow_ops_share_one_clock() {
    if !python_with(&["tensorflow", "perfetto"]) {
        return;
    }
    let dir = scratch_dir("record-keras");
    let session = dir.join("session");
    let out = record(
        &session,
        Path::new(&python()),
        &[&script("keras_cnn.py")],
        // TensorFlow turns oneDNN on by default only on CPUs with AVX512_VNNI, AVX_VNNI,
        // AVX512_BF16 or AMX (an AVX2-only AMD EPYC here has none): this test is about
        // its primitives, so it asks for them.
        &[
            ("TF_CPP_MIN_LOG_LEVEL", "2"),
            ("TF_ENABLE_ONEDNN_OPTS", "1"),
        ],
    );
    assert_ok(&out, "keras_cnn.py");
    let xplanes: Vec<PathBuf> = walk(&session)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".xplane.pb"))
        .collect();
    assert_eq!(
        xplanes.len(),
        1,
        "the TensorFlow profiler wrote its XPlane into the session"
    );
    // One program, one process: its own file, the sampler's and TensorFlow's XPlane
    // all describe it.
    let info = common::opscope_ok(&["info", "--format", "json", session.to_str().unwrap()]);
    let info: Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(info["processes"], 1, "{info}");
    let duration = info["duration_ns"].as_i64().unwrap();
    assert!(
        duration > 0 && duration < 600_000_000_000,
        "one time line: {duration} ns"
    );

    let complete = complete_events(&dir, &session);
    let conv_ops: Vec<(f64, f64, &Value)> = complete
        .iter()
        .filter(|e| e["cat"] == "xplane_host" && e["name"].as_str().unwrap().contains("Conv2D"))
        .map(|e| {
            let (b, end) = span(e);
            (b, end, &e["tid"])
        })
        .collect();
    let primitives: Vec<&Value> = complete
        .iter()
        .filter(|e| e["cat"] == "itt/dnnl::primitive::execute" && e["name"] == "convolution")
        .collect();
    // The model's layers as oneDNN runs them (conv, pooling, dense), and the layout
    // changes between them, each on TF's worker threads.
    let kinds: std::collections::BTreeSet<&str> = complete
        .iter()
        .filter(|e| e["cat"] == "itt/dnnl::primitive::execute")
        .inspect(|e| assert_ne!(e["tid"], e["pid"], "a primitive on the main thread: {e}"))
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    for kind in ["convolution", "pooling", "inner_product", "reorder"] {
        assert!(
            kinds.contains(kind),
            "no oneDNN {kind} primitive: {kinds:?}"
        );
    }
    assert!(!conv_ops.is_empty(), "TF's Conv2D ops come from the XPlane");
    assert!(
        !primitives.is_empty(),
        "oneDNN convolutions come from the ITT collector"
    );
    // One clock: every oneDNN convolution runs inside one of TF's Conv2D ops (1 µs of
    // slack for the two clock snapshots). One thread: where the op ran on the
    // primitive's thread (the XPlane names it by a hash of its `pthread_t`, the
    // recorder by its tid), the primitive is the op's child, its time not counted a
    // second time beside it. (On Eigen's pool threads a primitive is a share of an op
    // that another thread runs.)
    let mut on_the_ops_thread = 0;
    for p in &primitives {
        let (b, e) = span(p);
        assert!(
            conv_ops
                .iter()
                .any(|&(ob, oe, _)| ob - 1.0 <= b && e <= oe + 1.0),
            "a oneDNN convolution outside every TF Conv2D op: {p}"
        );
        let same_thread: Vec<_> = conv_ops
            .iter()
            .filter(|&&(ob, oe, tid)| *tid == p["tid"] && ob < e && b < oe)
            .collect();
        if !same_thread.is_empty() {
            on_the_ops_thread += 1;
            assert!(
                same_thread.iter().any(|&&(ob, oe, _)| ob <= b && e <= oe),
                "a Conv2D op on the oneDNN convolution's thread crosses it: {p}"
            );
        }
        assert_ne!(
            p["tid"], p["pid"],
            "oneDNN runs on TF's worker threads, not the main one"
        );
    }
    // The main thread too, though it records nothing itself: the bootstrap starts the
    // library on it, and the library's file names its `pthread_t`.
    assert!(
        complete
            .iter()
            .any(|e| e["cat"] == "xplane_host" && e["tid"] == e["pid"]),
        "the XPlane's main-thread line is not the process's main thread"
    );
    assert!(
        on_the_ops_thread > 0,
        "no oneDNN convolution on the thread of a TF Conv2D op: the XPlane's threads \
         are not the recorded ones"
    );
}

#[test]
fn jaxs_profiler_writes_into_the_session_and_is_read_once() {
    if !python_with(&["jax", "perfetto"]) {
        return;
    }
    let dir = scratch_dir("record-jax");
    let session = dir.join("session");
    let out = record(
        &session,
        Path::new(&python()),
        &[&script("jax_jit.py")],
        &[],
    );
    assert_ok(&out, "jax_jit.py");
    let files = walk(&session);
    let xplane = files
        .iter()
        .find(|p| p.to_string_lossy().ends_with(".xplane.pb"))
        .expect("JAX's XPlane in the session");
    assert!(xplane.starts_with(session.join("jax")));
    let info = common::opscope_ok(&["info", "--format", "json", session.to_str().unwrap()]);
    let info: Value = serde_json::from_slice(&info.stdout).unwrap();
    let read: Vec<&str> = info["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(read.iter().filter(|p| p.ends_with(".xplane.pb")).count(), 1);
    assert!(
        !read.iter().any(|p| p.ends_with(".trace.json.gz")),
        "JAX's JSON copy of the XPlane is not read too: {read:?}"
    );
    // One clock: the XPlane's events fall inside the sampler's recording window.
    let span = info["duration_ns"].as_i64().unwrap();
    assert!(
        span > 0 && span < 120_000_000_000,
        "one time line, not two clocks apart: {span} ns"
    );
}

/// A Kineto trace the program writes into the session joins the recorded files on one
/// time line: Kineto's times are Unix time from its `baseTimeNanoseconds`, ours
/// CLOCK_MONOTONIC with a snapshot. The script runs the same work under emit_itt,
/// under torch.profiler, then under emit_itt again, so every op the profiler saw must
/// lie between the two recorded blocks, whose gaps to it are about a millisecond.
#[test]
fn a_kineto_trace_in_the_session_shares_the_recorded_clock() {
    if !python_with(&["torch"]) {
        return;
    }
    let dir = scratch_dir("record-kineto");
    let session = dir.join("session");
    let out = record_with(
        &["--no-python"],
        &session,
        Path::new(&python()),
        &[&script("torch_kineto_in_session.py")],
        &[],
    );
    assert_ok(&out, "torch_kineto_in_session.py");
    let complete = complete_events(&dir, &session);
    let spans = |category: &str| -> Vec<(f64, f64)> {
        complete
            .iter()
            .filter(|e| e["name"] == "aten::tanh" && e["cat"] == category)
            .map(span)
            .collect()
    };
    let (kineto, recorded) = (spans("cpu_op"), spans("itt/PyTorch"));
    assert_eq!(
        kineto.len(),
        20,
        "the profiler's tanh ops, from kineto.pt.trace.json"
    );
    assert_eq!(
        recorded.len(),
        40,
        "two blocks of tanh ops through the ITT collector"
    );
    let first = kineto.iter().map(|s| s.0).fold(f64::INFINITY, f64::min);
    let last = kineto.iter().map(|s| s.1).fold(f64::NEG_INFINITY, f64::max);
    let before = recorded.iter().filter(|s| s.1 <= first).count();
    let after = recorded.iter().filter(|s| s.0 >= last).count();
    assert_eq!(
        (before, after),
        (20, 20),
        "the profiler's ops, {first}..{last} µs, lie between the two recorded blocks: {recorded:?}"
    );
}

/// Runs `tests/oracle/SCRIPT PATH` and returns the JSON of its last line (the peers
/// log to stdout before it).
fn oracle_report(script: &str, path: &Path, what: &str) -> Value {
    let stdout = common::oracle_stdout(script, &[path]);
    let last = stdout
        .split(|&b| b == b'\n')
        .rfind(|l| !l.is_empty())
        .unwrap_or_default();
    serde_json::from_slice(last).unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// The Chrome JSON `opscope convert` writes from a recorded PyTorch session reads as a
/// Kineto trace: opscope's own `stats op` gives the same table as on the session, and
/// HolisticTraceAnalysis and TensorBoard's PyTorch plugin find every op with its calls.
#[test]
fn a_recorded_pytorch_session_converts_to_json_that_kineto_readers_read() {
    if !python_with(&["torch", "hta", "torch_tb_profiler"]) {
        return;
    }
    let dir = scratch_dir("record-to-kineto");
    let session = dir.join("session");
    let out = record(
        &session,
        Path::new(&python()),
        &[&script("torch_cnn.py")],
        &[],
    );
    assert_ok(&out, "torch_cnn.py");
    let runs = dir.join("run");
    std::fs::create_dir_all(&runs).unwrap();
    let json = runs.join("worker0.pt.trace.json");
    let _ = std::fs::remove_file(&json);
    common::opscope_ok(&[
        "convert",
        "-q",
        session.to_str().unwrap(),
        "-o",
        json.to_str().unwrap(),
    ]);

    let ops = |trace: &Path| -> BTreeMap<String, (u64, i64)> {
        let out = common::opscope_ok(&[
            "stats",
            "op",
            "--no-cache",
            "--format",
            "json",
            trace.to_str().unwrap(),
        ]);
        let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
        rows.as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["name"].as_str().unwrap().to_string(),
                    (
                        r["occurrence"].as_u64().unwrap(),
                        r["cpu_ns"].as_i64().unwrap(),
                    ),
                )
            })
            .collect()
    };
    let recorded = ops(&session);
    assert!(recorded.contains_key("aten::convolution"), "{recorded:?}");
    assert_eq!(
        ops(&json),
        recorded,
        "stats op on the JSON and on the session"
    );
    let calls: BTreeMap<String, u64> = recorded.iter().map(|(k, v)| (k.clone(), v.0)).collect();
    // PyTorch's ranges around the optimizer's calls are user annotations, as Kineto
    // writes them: `stats op` lists them (torch's `key_averages` does), HTA's `cpu_op`
    // table does not.
    let mut cpu_ops = calls.clone();
    cpu_ops.retain(|name, _| !name.starts_with("Optimizer."));
    assert!(cpu_ops.len() < calls.len(), "{calls:?}");

    let hta = oracle_report("hta_ops.py", &json, "HTA on the JSON");
    let hta_calls: BTreeMap<String, u64> = hta["cpu_ops"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect();
    assert_eq!(hta_calls, cpu_ops, "HTA's cpu_op calls per name");

    let tb = oracle_report(
        "tb_plugin_ops.py",
        &runs,
        "TensorBoard's PyTorch plugin on the JSON",
    );
    let worker = &tb["worker0"];
    let tb_calls: BTreeMap<String, u64> = worker["ops"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect();
    // The plugin leaves the optimizer's ranges out of its table (torch_tb_profiler's
    // node.py: `not node.name.startswith("Optimizer.")`), whatever writes the trace.
    let mut plugin_rows = calls.clone();
    plugin_rows.retain(|name, _| !name.starts_with("Optimizer."));
    assert_eq!(tb_calls, plugin_rows, "the plugin's operator table");
    let total = worker["overview"][0]["value"].as_i64().unwrap();
    assert!(total > 0, "the plugin's total time is a time: {worker}");
}

/// Runs `script OUT` as a plain program and under `opscope record` (each with its own
/// OUT): the program's own report of what its profilers saw and wrote must be the same
/// (the plain run is the oracle). Returns the recorded run's output and session.
fn run_plain_and_recorded(
    dir: &Path,
    script_name: &str,
    env: &[(&str, &str)],
) -> (Output, PathBuf) {
    let (plain_out, recorded_out, session) =
        (dir.join("plain"), dir.join("recorded"), dir.join("session"));
    std::fs::create_dir_all(&plain_out).unwrap();
    std::fs::create_dir_all(&recorded_out).unwrap();
    let mut plain = Command::new(python());
    plain.arg(script(script_name)).arg(&plain_out);
    for (k, v) in env {
        plain.env(k, v);
    }
    let plain = plain.output().unwrap();
    assert_ok(&plain, &format!("{script_name} without opscope"));
    let out = record(
        &session,
        Path::new(&python()),
        &[&script(script_name), recorded_out.to_str().unwrap()],
        env,
    );
    assert_ok(&out, &format!("{script_name} under opscope record"));
    let report = |o: &Output| -> Value {
        let text = String::from_utf8_lossy(&o.stdout);
        serde_json::from_str(text.lines().last().unwrap_or(""))
            .unwrap_or_else(|e| panic!("{script_name} prints its report as JSON ({e}): {text}"))
    };
    assert_eq!(
        report(&out),
        report(&plain),
        "what the program's own profilers saw and wrote, under opscope and without"
    );
    (out, session)
}

/// A PyTorch program that runs its own profilers (torch.profiler, with a schedule and
/// tensorboard_trace_handler too, autograd's, the legacy one, emit_itt) works as
/// without opscope, whose emit_itt steps aside for each and records the work between.
#[test]
fn a_programs_own_pytorch_profilers_work_as_without_opscope() {
    if !python_with(&["torch", "perfetto"]) {
        return;
    }
    let scratch = scratch_dir("record-own-torch");
    let (out, session) = run_plain_and_recorded(&scratch, "torch_own_profilers.py", &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(report["torch.profiler"]["aten::cos"], 10, "{report}");
    assert_eq!(report["autograd profiler"]["aten::tan"], 10, "{report}");
    assert_eq!(report["legacy profiler"]["aten::sqrt"], 10, "{report}");
    assert_eq!(report["files"]["./profile.json"], 10, "{report}");
    assert_eq!(
        report["files"]["tb/*.pt.trace.json"], 2,
        "the schedule's two active steps: {report}"
    );

    let files = recorded(&session);
    assert_eq!(files.len(), 1);
    let counts = slice_counts(files.values().next().unwrap());
    let count = |op: &str| {
        counts
            .get(&("itt/PyTorch".to_string(), op.to_string()))
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(
        count("aten::sin"),
        50,
        "the five plain blocks between profilers"
    );
    assert_eq!(
        count("aten::sigmoid"),
        10,
        "the program's own emit_itt reaches opscope's collector"
    );
    assert_eq!(
        count("aten::cos"),
        0,
        "the program's profiler had those ops"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("stepped aside for it")
            && stderr.contains("a PyTorch profiler (4 times), PyTorch's legacy profiler"),
        "{stderr}"
    );
    // The schedule's six steps are steps, not ops: those outside its warm-up and active
    // steps (0, 4, 5) reached opscope as ITT tasks, the others (1-3, while the program's
    // profiler recorded) as the bootstrap's marks; the one the last `step()` opens, and
    // the profile's stop closes at once, is none (before: 4 steps, the last that one).
    assert!(stderr.contains("steps: 6 (from step markers)"), "{stderr}");
    let table = stderr
        .split("top ops by total time:")
        .nth(1)
        .unwrap_or_default();
    assert!(!table.contains("ProfilerStep#"), "{stderr}");
}

/// Keras's TensorBoard callback profiling batches, and `tf.profiler.experimental`
/// start/stop and `Profile`, write their profiles as without opscope; opscope's own
/// profile of the rest of the run lands in the session.
#[test]
fn a_programs_own_tensorflow_profilers_work_as_without_opscope() {
    if !python_with(&["tensorflow", "tensorboard", "perfetto"]) {
        return;
    }
    let scratch = scratch_dir("record-own-tf");
    let (out, session) = run_plain_and_recorded(
        &scratch,
        "tf_own_profilers.py",
        &[("TF_CPP_MIN_LOG_LEVEL", "2")],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(
        report["xplanes"],
        serde_json::json!({"board": 1, "manual": 1, "context": 1}),
        "each of the program's profiles was written"
    );
    let ours = walk(&session.join("tensorflow"))
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".xplane.pb"))
        .count();
    assert!(
        ours >= 4,
        "opscope's profile before, between and after the program's: {ours} XPlanes"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("tf.profiler"), "{stderr}");
    common::opscope_ok(&["info", session.to_str().unwrap()]);
}

/// A TF 1.x program that asks for its own trace of some `Session.run`s (FULL_TRACE
/// RunOptions, a callable made with them) gets the same RunMetadata as without
/// opscope, whose TensorFlow profiler steps aside for those runs and says so (before,
/// TensorFlow refused the first traced run: "Another profiling session active").
#[test]
fn a_tf1_programs_traced_session_runs_work_as_without_opscope() {
    if !python_with(&["tensorflow", "perfetto"]) {
        return;
    }
    let scratch = scratch_dir("record-tf1-traced");
    let (out, session) = run_plain_and_recorded(
        &scratch,
        "tf1_traced_runs.py",
        &[("TF_CPP_MIN_LOG_LEVEL", "2")],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(
        report["traced"].as_object().map(|o| o.len()),
        Some(5),
        "four traced runs and the traced callable: {report}"
    );
    for (run, ops) in report["traced"].as_object().unwrap() {
        assert_eq!(
            ops,
            &serde_json::json!(["conv", "kernel", "pooled", "score"]),
            "{run}"
        );
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("a Session.run traced by its RunOptions (3 times)"),
        "opscope's profiler stepped aside for runs 0-1, 3-4 and the callable: {stderr}"
    );
    // Its profile of the untraced runs (before the first traced run, and between).
    let ours = walk(&session.join("tensorflow"))
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".xplane.pb"))
        .count();
    assert!(ours >= 3, "{ours} XPlanes of opscope's");
    common::opscope_ok(&["info", session.to_str().unwrap()]);
}

/// `jax.profiler.trace` and `start_trace`/`stop_trace` in the program write their
/// profiles as without opscope.
#[test]
fn a_programs_own_jax_profiler_works_as_without_opscope() {
    if !python_with(&["jax", "perfetto"]) {
        return;
    }
    let scratch = scratch_dir("record-own-jax");
    let (out, session) = run_plain_and_recorded(&scratch, "jax_own_profilers.py", &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(
        report["xplanes"],
        serde_json::json!({"context": 1, "manual": 1}),
        "each of the program's profiles was written"
    );
    let ours = walk(&session.join("jax"))
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".xplane.pb"))
        .count();
    assert_eq!(
        ours, 3,
        "opscope's profile before, between and after the program's"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "jax.profiler (2 times; its profiles in {}, {})",
            scratch.join("recorded/context").display(),
            scratch.join("recorded/manual").display()
        )),
        "{stderr}"
    );
}

/// The session's complete ("X") events, as `opscope convert` writes them to Chrome JSON
/// in `dir`: one time line for every file of the session.
fn complete_events(dir: &Path, session: &Path) -> Vec<Value> {
    let json = dir.join("session.json");
    let _ = std::fs::remove_file(&json);
    common::opscope_ok(&[
        "convert",
        session.to_str().unwrap(),
        "-o",
        json.to_str().unwrap(),
    ]);
    let mut events: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let Value::Array(all) = events["traceEvents"].take() else {
        panic!("no traceEvents array in {}", json.display());
    };
    // Slices whose own category a Kineto reader would not take for their kind are
    // written as Kineto's, their own kept in an arg: the tests tell sources apart by it.
    all.into_iter()
        .filter(|e| e["ph"] == "X")
        .map(|mut e| {
            if let Some(own) = e["args"]["opscope.category"].as_str() {
                e["cat"] = Value::String(own.to_string());
            }
            e
        })
        .collect()
}

/// A complete event's start and end, in µs.
fn span(e: &Value) -> (f64, f64) {
    let ts = e["ts"].as_f64().unwrap();
    (ts, ts + e["dur"].as_f64().unwrap())
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A flood of nested tasks into the smallest ring, drained once a second: what is kept
/// stays well formed (every kept begin has its end: ends have room kept for them), and
/// what is dropped is counted, so kept + dropped = what the program began.
#[test]
fn a_full_ring_drops_whole_tasks_and_counts_them() {
    if !python_with(&["perfetto"]) {
        return;
    }
    let dir = scratch_dir("record-itt-flood");
    let program = compile_itt_program(&dir, "itt_flood");
    let session = dir.join("session");
    let out = record(
        &session,
        &program,
        &["2000000"],
        &[("OPSCOPE_BUFFER_KB", "64"), ("OPSCOPE_FLUSH_MS", "1000")],
    );
    assert_ok(&out, "itt_flood");
    let own: Value = serde_json::from_slice(&out.stdout).unwrap();
    let files = recorded(&session); // the oracle fails on an end without its begin
    let file = files.values().next().unwrap();
    let counts = slice_counts(file);
    let kept: u64 = ["outer", "inner"]
        .iter()
        .map(|n| {
            counts
                .get(&("itt/flood".into(), n.to_string()))
                .copied()
                .unwrap_or(0)
        })
        .sum();
    let dropped: u64 = file["instants"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i[2] == "opscope: events dropped (buffer full)")
        .map(|i| i[4]["count"].as_u64().unwrap())
        .sum();
    assert!(dropped > 0, "a 64 KB ring drained once a second overflows");
    assert!(kept > 0);
    assert_eq!(
        kept + dropped,
        own["tasks"].as_u64().unwrap(),
        "kept {kept} + dropped {dropped}"
    );
    let info = common::opscope_ok(&["info", session.to_str().unwrap(), "--format", "json"]);
    let info: Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(
        info["repairs"]["unmatched_begins"], 0,
        "{}",
        info["repairs"]
    );
    assert_eq!(info["repairs"]["unmatched_ends"], 0, "{}", info["repairs"]);
}

/// The ITT calls beyond tasks, from C through ittnotify's static part: frames begun
/// and ended or submitted, markers, metadata on a task, a task named by its function's
/// address, and counters set, increased and decreased, each as the program says it
/// emitted them.
#[test]
fn itt_frames_markers_metadata_and_counters_arrive_as_emitted() {
    if !python_with(&["perfetto"]) {
        return;
    }
    let dir = scratch_dir("record-itt-surface");
    let program = compile_itt_program(&dir, "itt_surface");
    let session = dir.join("session");
    let out = record(&session, &program, &[], &[]);
    assert_ok(&out, "itt_surface");
    let own: Value = serde_json::from_slice(&out.stdout).unwrap();
    let files = recorded(&session);
    assert_eq!(files.len(), 1);
    let file = files.values().next().unwrap();

    let counts = slice_counts(file);
    let frames = ("itt.frame/surface".to_string(), "surface".to_string());
    assert_eq!(
        counts.get(&frames),
        Some(&6),
        "5 frames begun and ended, 1 submitted: {counts:?}"
    );
    let slices = file["slices"].as_array().unwrap();
    let step = slices
        .iter()
        .find(|s| s[2] == "step")
        .unwrap_or_else(|| panic!("no step task: {slices:?}"));
    assert_eq!(step[1], "itt/surface");
    assert_eq!(
        step[5],
        serde_json::json!({"batch[0]": 32, "batch[1]": 64, "phase": "train"}),
        "the task's metadata"
    );
    let by_function = format!("fn {}", own["function"].as_str().unwrap());
    assert!(
        slices
            .iter()
            .any(|s| s[2] == by_function.as_str() && s[1] == "itt/surface"),
        "a task named {by_function}: {slices:?}"
    );
    let marks: Vec<&Value> = file["instants"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i[1] == "itt/surface" && i[2] == "mark")
        .collect();
    assert_eq!(marks.len(), 4, "markers: {marks:?}");
    assert_eq!(
        marks.iter().filter(|i| i[0].is_null()).count(),
        1,
        "the global marker is the process's, the others the thread's: {marks:?}"
    );
    for counter in ["queue depth", "load"] {
        let got = counter_samples(file, "", counter);
        let want: Vec<f64> = own[counter]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(got, want, "{counter}");
    }
    assert_eq!(
        file["threads"]
            .as_object()
            .unwrap()
            .values()
            .next()
            .unwrap(),
        "surface-main"
    );
}

/// `--cupti` on a machine without a GPU: a host program plays the CUDA driver (it calls
/// the library's `InitializeInjection`) and a stand-in libcupti (`fake_cupti.c`, the
/// activity API as documented) reports one cudaLaunchKernel call at the flush at exit.
/// The call must arrive with its correlation id and its span on the program's clock;
/// and when another subscriber holds CUPTI, the program must run on with a message.
#[test]
fn cupti_activity_is_flushed_at_exit_and_a_busy_cupti_is_left_alone() {
    if !python_with(&["perfetto"]) {
        return;
    }
    let dir = scratch_dir("record-cupti");
    let lib_dir = dir.join("lib");
    compile_c(
        "fake_cupti.c",
        &lib_dir.join("libcupti.so.13"),
        &["-shared", "-fPIC"],
    );
    let host = dir.join("cupti_host");
    compile_c("cupti_host.c", &host, &["-ldl"]);
    let lib_path = lib_dir.to_str().unwrap();

    let session = dir.join("session");
    let out = record_with(
        &["-q", "--cupti"],
        &session,
        &host,
        &["60"],
        &[("LD_LIBRARY_PATH", lib_path)],
    );
    assert_ok(&out, "cupti_host");
    let own: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(own["initialized"], 1, "InitializeInjection reports success");
    let files = recorded(&session);
    let calls: Vec<&Value> = files
        .values()
        .flat_map(|f| f["slices"].as_array().unwrap())
        .filter(|s| s[1] == "cuda/runtime")
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let call = calls[0];
    assert_eq!(call[2], "cudaLaunchKernel");
    assert_eq!(call[5]["correlation"], 42, "{call}");
    let span_ms = call[4].as_f64().unwrap() / 1e6;
    assert!(
        (60.0..2000.0).contains(&span_ms),
        "the call spans the host's 60 ms wait on the recording clock: {span_ms} ms"
    );

    let busy = dir.join("busy");
    let out = record_with(
        &["-q", "--cupti"],
        &busy,
        &host,
        &["10"],
        &[("LD_LIBRARY_PATH", lib_path), ("FAKE_CUPTI_BUSY", "1")],
    );
    assert_ok(&out, "cupti_host with CUPTI held by another subscriber");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("CUPTI is already in use"), "{stderr}");
    let cuda = cuda_slices(&busy).len();
    assert_eq!(
        cuda, 0,
        "nothing taken from a CUPTI another subscriber holds"
    );
}

/// What the stand-in libcupti (`stand_in_cupti.c`, built against NVIDIA's own headers,
/// so its records have libcupti 12.9's layouts) is told to hand over: kernels on two
/// streams and devices, copies of three kinds, a memset, runtime and driver calls, a
/// host wait, a graph launch whose two kernels share its correlation id, and three
/// records CUPTI could not keep. Times are µs after the subscriber registered.
const CUPTI_SCRIPT: &str = "\
runtime cbid=211 corr=1 start=10 end=15
kernel name=gemm_a stream=7 corr=1 start=30 end=80 grid=128,1,1 block=256,1,1 static_shared=2048
driver cbid=307 corr=2 start=20 end=22
kernel name=gemm_b device=1 context=2 stream=13 corr=2 start=85 end=95 grid=64,2,1 block=128,2,1 dynamic_shared=4096
runtime cbid=41 corr=3 start=100 end=101
memcpy copy=1 bytes=4096 stream=7 corr=3 start=102 end=110
memcpy copy=2 bytes=8192 stream=7 corr=4 start=111 end=120
memcpy copy=8 bytes=65536 stream=13 corr=5 start=121 end=124
memset bytes=1024 value=7 stream=13 corr=6 start=125 end=126
sync type=3 stream=7 corr=7 start=127 end=129
runtime cbid=311 corr=9 start=130 end=131
kernel name=graph_node_1 stream=7 corr=9 graph=5 node=1 start=132 end=140
kernel name=graph_node_2 stream=7 corr=9 graph=5 node=2 start=140 end=150
external kind=1 id=77 corr=1
dropped 3
";

/// A scratch directory with the stand-in libcupti built (as `lib/libcupti.so.12`), the
/// host program that plays the driver, and `CUPTI_SCRIPT` written out; `None` (the test
/// skips) without the `perfetto` reader or NVIDIA's headers, off CI.
struct StandIn {
    dir: common::Scratch,
    lib_dir: PathBuf,
    host: PathBuf,
    script_path: PathBuf,
}

fn stand_in_cupti(name: &str) -> Option<StandIn> {
    if !python_with(&["perfetto"]) {
        return None;
    }
    let headers = common::cuda_headers()?;
    let dir = scratch_dir(name);
    let lib_dir = dir.join("lib");
    let mut flags: Vec<String> = vec!["-shared".into(), "-fPIC".into()];
    flags.extend(headers.iter().map(|h| format!("-I{}", h.display())));
    compile_c("stand_in_cupti.c", &lib_dir.join("libcupti.so.12"), &flags);
    let host = dir.join("cupti_host");
    compile_c("cupti_host.c", &host, &["-ldl"]);
    let script_path = dir.join("script.txt");
    std::fs::write(&script_path, CUPTI_SCRIPT).unwrap();
    Some(StandIn {
        dir,
        lib_dir,
        host,
        script_path,
    })
}

impl StandIn {
    /// `record --cupti` of the host program playing the stand-in's script, with `env`
    /// besides the library path and the script.
    fn record_script(&self, session: &Path, host_args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut all = vec![
            ("LD_LIBRARY_PATH", self.lib_dir.to_str().unwrap()),
            ("STAND_IN_CUPTI_SCRIPT", self.script_path.to_str().unwrap()),
        ];
        all.extend_from_slice(env);
        record_with(&["-q", "--cupti"], session, &self.host, host_args, &all)
    }
}

/// The CUPTI records of a session (categories `cuda/…`), every file's.
fn cuda_slices(session: &Path) -> Vec<Value> {
    recorded(session)
        .values()
        .flat_map(|f| f["slices"].as_array().unwrap().clone())
        .filter(|s| s[1].as_str().unwrap_or_default().starts_with("cuda/"))
        .collect()
}

/// `--cupti` against the stand-in libcupti playing `CUPTI_SCRIPT`: every record arrives
/// as the script says (names, devices, streams, correlation ids, sizes, each time to
/// the ns relative to the others), the drops are told, the buffers are opscope's.
/// The expectations are the script's, not the decoder's.
#[test]
fn cupti_records_in_libcuptis_own_layouts_arrive_as_the_script_says() {
    let Some(stand_in) = stand_in_cupti("record-cupti-script") else {
        return;
    };
    let log = stand_in.dir.join("stand-in.log");
    let session = stand_in.dir.join("session");
    let out = stand_in.record_script(
        &session,
        &["20"],
        &[("STAND_IN_CUPTI_LOG", log.to_str().unwrap())],
    );
    assert_ok(&out, "cupti_host with the stand-in libcupti");
    let files = recorded(&session);
    let slices: Vec<&Value> = files
        .values()
        .flat_map(|f| f["slices"].as_array().unwrap())
        .filter(|s| s[1].as_str().unwrap_or_default().starts_with("cuda/"))
        .collect();
    let find = |category: &str, name: &str, correlation: u64| -> &Value {
        let found: Vec<&&Value> = slices
            .iter()
            .filter(|s| s[1] == category && s[2] == name)
            .filter(|s| s[5]["correlation"] == correlation)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "{category} {name} {correlation}: {slices:#?}"
        );
        found[0]
    };
    // Each slice's start and length in ns, and its args.
    let ts = |s: &Value| s[3].as_i64().unwrap();
    let dur = |s: &Value| s[4].as_i64().unwrap();
    let launch = find("cuda/runtime", "cudaLaunchKernel", 1);
    let origin = ts(launch) - 10_000;
    let at = |s: &Value, start_us: i64, end_us: i64| {
        assert_eq!(
            (ts(s) - origin, dur(s)),
            (start_us * 1000, (end_us - start_us) * 1000),
            "{s}"
        );
    };
    at(launch, 10, 15);
    at(find("cuda/driver", "cuLaunchKernel", 2), 20, 22);
    let a = find("cuda/kernel", "gemm_a", 1);
    at(a, 30, 80);
    assert_eq!(
        (&a[5]["device"], &a[5]["stream"], &a[5]["context"]),
        (&Value::from(0), &Value::from(7), &Value::from(1))
    );
    assert_eq!(
        (&a[5]["grid"], &a[5]["block"]),
        (&Value::from("[128, 1, 1]"), &Value::from("[256, 1, 1]"))
    );
    assert_eq!(a[5]["static_shared_memory"], 2048);
    let b = find("cuda/kernel", "gemm_b", 2);
    at(b, 85, 95);
    assert_eq!(
        (&b[5]["device"], &b[5]["stream"], &b[5]["context"]),
        (&Value::from(1), &Value::from(13), &Value::from(2))
    );
    assert_eq!(
        (&b[5]["grid"], &b[5]["block"]),
        (&Value::from("[64, 2, 1]"), &Value::from("[128, 2, 1]"))
    );
    assert_eq!(b[5]["dynamic_shared_memory"], 4096);
    at(find("cuda/runtime", "cudaMemcpyAsync", 3), 100, 101);
    for (category, name, corr, bytes, stream, (start, end)) in [
        ("cuda/memcpy/htod", "Memcpy HtoD", 3, 4096, 7, (102, 110)),
        ("cuda/memcpy/dtoh", "Memcpy DtoH", 4, 8192, 7, (111, 120)),
        ("cuda/memcpy/dtod", "Memcpy DtoD", 5, 65536, 13, (121, 124)),
    ] {
        let copy = find(category, name, corr);
        at(copy, start, end);
        assert_eq!(
            (&copy[5]["bytes"], &copy[5]["stream"]),
            (&Value::from(bytes), &Value::from(stream))
        );
    }
    let set = find("cuda/memset", "Memset", 6);
    at(set, 125, 126);
    assert_eq!(
        (&set[5]["bytes"], &set[5]["value"], &set[5]["stream"]),
        (&Value::from(1024), &Value::from(7), &Value::from(13))
    );
    let wait = find("cuda/sync", "Stream Sync", 7);
    at(wait, 127, 129);
    assert_eq!(wait[5]["stream"], 7);
    // A graph launch: its kernels carry its correlation id.
    at(find("cuda/runtime", "cudaGraphLaunch", 9), 130, 131);
    for (name, node, (start, end)) in [
        ("graph_node_1", 1, (132, 140)),
        ("graph_node_2", 2, (140, 150)),
    ] {
        let kernel = find("cuda/kernel", name, 9);
        at(kernel, start, end);
        // The graph and the node it ran as.
        assert_eq!(
            (&kernel[5]["graph_id"], &kernel[5]["graph_node_id"]),
            (&Value::from(5), &Value::from(node)),
            "{kernel}"
        );
    }
    assert_eq!(a[5].get("graph_id"), None, "not in a graph: {a}");
    assert_eq!(slices.len(), 13, "one slice per timed record: {slices:#?}");
    // The drops are told, never silent.
    let lost: u64 = files
        .values()
        .flat_map(|f| f["instants"].as_array().unwrap())
        .filter(|i| i[2] == "opscope: CUPTI records lost")
        .map(|i| {
            i.as_array().unwrap().last().unwrap()["dropped"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert_eq!(lost, 3);
    // What the stand-in saw: opscope's buffers (8 MiB), every record of the kinds it
    // enables written into one.
    let log = std::fs::read_to_string(&log).unwrap();
    let buffers: Vec<&str> = log
        .lines()
        .filter_map(|l| l.strip_prefix("buffer "))
        .collect();
    assert!(!buffers.is_empty());
    assert!(buffers.iter().all(|b| *b == "8388608"), "{buffers:?}");
    assert_eq!(
        log.lines().filter(|l| l.starts_with("written ")).count(),
        14,
        "{log}"
    );
    assert!(!log.lines().any(|l| l.starts_with("dropped ")), "{log}");
}

/// CUPTI holding more buffers than opscope's bound (`OPSCOPE_CUPTI_MAX_BUFFERS=2`, the
/// stand-in holding two before any record): a 12.9 CUPTI is refused the next one, so
/// every record is dropped, counted and told (the script's 3 and its 14); an older one
/// (version 26, which crashes on a refusal) is given it, with a warning that memory
/// grows, and every record arrives.
#[test]
fn cupti_buffers_past_the_bound_are_refused_from_12_9_only() {
    let Some(stand_in) = stand_in_cupti("record-cupti-bound") else {
        return;
    };
    let dir = &stand_in.dir;
    for (version, refused) in [("28", true), ("27", true), ("26", false)] {
        let log = dir.join(format!("stand-in-{version}.log"));
        let session = dir.join(format!("session-{version}"));
        let out = stand_in.record_script(
            &session,
            &["10"],
            &[
                ("STAND_IN_CUPTI_LOG", log.to_str().unwrap()),
                ("STAND_IN_CUPTI_HOLD", "2"),
                ("STAND_IN_CUPTI_VERSION", version),
                ("OPSCOPE_CUPTI_MAX_BUFFERS", "2"),
            ],
        );
        assert_ok(&out, &format!("cupti_host, CUPTI version {version}"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let files = recorded(&session);
        let kernels = files
            .values()
            .flat_map(|f| f["slices"].as_array().unwrap())
            .filter(|s| s[1] == "cuda/kernel")
            .count();
        let lost: u64 = files
            .values()
            .flat_map(|f| f["instants"].as_array().unwrap())
            .filter(|i| i[2] == "opscope: CUPTI records lost")
            .map(|i| {
                i.as_array().unwrap().last().unwrap()["dropped"]
                    .as_u64()
                    .unwrap()
            })
            .sum();
        let log = std::fs::read_to_string(&log).unwrap();
        let held: Vec<&str> = log
            .lines()
            .filter_map(|l| l.strip_prefix("held "))
            .collect();
        assert_eq!(held, ["8388608", "8388608"], "version {version}: {log}");
        if refused {
            assert!(stderr.contains("records are dropped until"), "{stderr}");
            assert!(log.lines().any(|l| l == "buffer 0"), "{log}");
            assert_eq!(kernels, 0, "version {version}");
            assert_eq!(lost, 3 + 14, "version {version}");
        } else {
            assert!(
                stderr.contains("cannot be refused one, so memory grows"),
                "{stderr}"
            );
            assert!(!log.lines().any(|l| l == "buffer 0"), "{log}");
            assert_eq!(kernels, 4, "version {version}");
            assert_eq!(lost, 3, "version {version}");
        }
    }
}

/// A libcupti without the timestamp callback, on CLOCK_REALTIME (CUPTI's default on
/// Linux): its records are moved onto the recording clock (CLOCK_MONOTONIC), the first
/// call landing inside the host program's own span, their spacing kept to the ns. The
/// program forks after CUDA started: the child's exit does not flush CUPTI (nothing of
/// the parent's is handed over twice).
#[test]
fn cupti_on_its_own_clock_is_moved_to_ours_and_a_forked_child_does_not_flush() {
    let Some(stand_in) = stand_in_cupti("record-cupti-clock") else {
        return;
    };
    let log = stand_in.dir.join("stand-in.log");
    let session = stand_in.dir.join("session");
    let out = stand_in.record_script(
        &session,
        &["20", "fork"],
        &[
            ("STAND_IN_CUPTI_LOG", log.to_str().unwrap()),
            ("STAND_IN_CUPTI_CLOCK", "realtime"),
        ],
    );
    assert_ok(&out, "cupti_host on CUPTI's own clock, forking");
    let own: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (started, ended) = (
        own["monotonic"][0].as_i64().unwrap(),
        own["monotonic"][1].as_i64().unwrap(),
    );
    let slices = cuda_slices(&session);
    let one = |name: &str| -> &Value {
        let found: Vec<&Value> = slices.iter().filter(|s| s[2] == name).collect();
        assert_eq!(found.len(), 1, "{name}: {slices:#?}");
        found[0]
    };
    let launch = one("cudaLaunchKernel")[3].as_i64().unwrap();
    assert!(
        (started..ended).contains(&launch),
        "the call at {launch} ns lies in the program's span {started}..{ended} (CLOCK_MONOTONIC)"
    );
    assert_eq!(one("gemm_a")[3].as_i64().unwrap() - launch, 20_000);
    assert_eq!(slices.len(), 13, "each record once");
    let log = std::fs::read_to_string(&log).unwrap();
    let flushes: Vec<&str> = log.lines().filter(|l| l.starts_with("flush ")).collect();
    assert_eq!(
        flushes.len(),
        1,
        "only the process CUPTI started in flushes: {log}"
    );
}

/// The process sampler's readings of a program that knows its own: one thread busy
/// beside three waiting ones, 200 MB touched. CPU % must match the CPU the program
/// measured itself using, the thread count its own, and resident memory at least the
/// 200 MB and at most its peak (VmHWM).
#[test]
fn process_samples_agree_with_the_programs_own_account() {
    if !python_with(&["perfetto"]) {
        return;
    }
    let dir = scratch_dir("record-sampler");
    let own_path = dir.join("busy.json");
    let session = dir.join("session");
    let out = record_with(
        &["-q", "--no-python", "--sample-ms", "100"],
        &session,
        Path::new(&python()),
        &[&script("busy.py"), own_path.to_str().unwrap(), "1.5"],
        &[],
    );
    assert_ok(&out, "busy.py");
    let own: Value = serde_json::from_slice(&std::fs::read(&own_path).unwrap()).unwrap();
    let sampled = sampler_file(&session);
    let track = |name: &str| counter_samples(&sampled, "busy.py", name);
    let cpu = track("CPU %");
    assert!(cpu.len() >= 10, "1.5 s sampled every 100 ms: {cpu:?}");
    // The program is busy on one thread from its start to its account (imports, the
    // pages it touches, then the timed spell): every sample but the first and the last
    // (which straddle its start and its end) is of that, and their mean is its CPU
    // share as the program measured it over the spell. Each sample counts the
    // kernel's 10 ms ticks over 100 ms, a reading to 10 points; over the ≥ 8 samples
    // averaged, that is a few points. 12 points leave room for a load that changes
    // between the program's start and its spell (a suite of tests on 2 cores).
    let inner = &cpu[1..cpu.len() - 1];
    let mean = inner.iter().sum::<f64>() / inner.len() as f64;
    let own_cpu =
        100.0 * own["busy_cpu_s"].as_f64().unwrap() / own["busy_wall_s"].as_f64().unwrap();
    assert!(
        (mean - own_cpu).abs() <= 12.0,
        "sampled CPU % (mean {mean:.1}: {cpu:?}) against the program's own {own_cpu:.1} %"
    );
    let threads = track("threads");
    let most = threads.iter().copied().fold(0.0, f64::max);
    assert_eq!(
        most,
        own["threads"].as_f64().unwrap(),
        "threads: {threads:?}"
    );
    let rss = track("resident bytes");
    let peak = rss.iter().copied().fold(0.0, f64::max);
    let hwm = own["hwm"].as_f64().unwrap();
    // The program reads its VmHWM before its last moments (joining its threads,
    // writing its account), which may touch a few more pages that a later sample sees.
    let slack = 1024.0 * 1024.0;
    assert!(
        peak >= 200.0 * 1024.0 * 1024.0 && peak <= hwm + slack,
        "resident bytes peak {peak} against 200 MiB touched and VmHWM {hwm}"
    );
}

/// `--no-python` leaves Python alone: no bootstrap on `PYTHONPATH`, so no framework
/// hook; the native collectors (ITT, NVTX) stay offered.
#[test]
fn no_python_leaves_the_interpreter_alone() {
    let dir = scratch_dir("record-no-python");
    let probe = "import os, sys; print(os.environ.get('PYTHONPATH', '<unset>')); \
                 print(os.environ.get('INTEL_LIBITTNOTIFY64', '<unset>')); \
                 print('sitecustomize' in sys.modules and sys.modules['sitecustomize'].__file__ or '-')";
    let mut outputs = Vec::new();
    for options in [&["-q"][..], &["-q", "--no-python"]] {
        let mut command = record_command(options, &dir.join("session"));
        let out = command
            .arg(python())
            .args(["-c", probe])
            .env_remove("PYTHONPATH")
            .output()
            .unwrap();
        assert_ok(&out, "python -c probe");
        outputs.push(String::from_utf8(out.stdout).unwrap());
    }
    // The bootstrap lives in the session; this test's scratch directory names it.
    let in_session = |text: &str| text.contains("record-no-python");
    let hooked: Vec<&str> = outputs[0].lines().collect();
    assert!(
        in_session(hooked[0]) && in_session(hooked[2]),
        "by default the bootstrap is on PYTHONPATH and imported: {hooked:?}"
    );
    let plain: Vec<&str> = outputs[1].lines().collect();
    assert_eq!(plain[0], "<unset>", "--no-python: {plain:?}");
    assert!(!in_session(plain[2]), "--no-python: {plain:?}");
    assert!(
        plain[1].ends_with("libopscope_record.so"),
        "--no-python: {plain:?}"
    );
}

/// A job stopped by SIGTERM (a scheduler's time limit, torchrun stopping its workers)
/// runs no exit handler, so CUPTI is never flushed at exit: the library's SIGTERM
/// handler has the writer take what CUPTI holds before the process ends. Every record
/// of the script arrives, launches linked to their kernels, though the program died of
/// the signal.
#[test]
fn cupti_records_survive_a_sigterm() {
    let Some(stand_in) = stand_in_cupti("record-cupti-sigterm") else {
        return;
    };
    let session = stand_in.dir.join("session");
    let out = stand_in.record_script(&session, &["20", "term"], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(
        out.status.code(),
        Some(0),
        "the program dies of SIGTERM: {stderr}"
    );
    let own: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(own["initialized"], 1);
    let slices = cuda_slices(&session);
    // The script's 13 timed records (its external correlation is no slice).
    assert_eq!(slices.len(), 13, "{stderr}\n{slices:#?}");
    let names: HashSet<&str> = slices.iter().filter_map(|s| s[2].as_str()).collect();
    for name in [
        "gemm_a",
        "gemm_b",
        "cudaLaunchKernel",
        "cuLaunchKernel",
        "graph_node_2",
    ] {
        assert!(names.contains(name), "{name}: {names:?}");
    }
}

/// A CUDA process that leaves by `os._exit` runs no exit handler either: the flush the
/// Python bootstrap makes before it (`opscope_record_flush`) has CUPTI hand over what
/// it holds first. The launch and its kernel arrive.
#[test]
fn cupti_records_survive_os_exit() {
    let Some(StandIn { dir, lib_dir, .. }) = stand_in_cupti("record-cupti-os-exit") else {
        return;
    };
    let session = dir.join("session");
    let out = record_with(
        &["-q", "--cupti", "--no-stacks"],
        &session,
        Path::new(&python()),
        &[&script("cupti_os_exit.py")],
        &[("LD_LIBRARY_PATH", lib_dir.to_str().unwrap())],
    );
    assert_ok(&out, "cupti_os_exit.py");
    let names: Vec<String> = cuda_slices(&session)
        .iter()
        .map(|s| s[2].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&"k_exit".to_string()), "{names:?}");
}

/// External correlation: a Python program (the `nvtx` package) makes API calls inside
/// nested NVTX ranges on two threads, and the stand-in libcupti names, for each call,
/// the external id the thread had pushed, as libcupti does. Each kernel then carries
/// the id of the innermost range its launch was made in, as the program says (none
/// outside any range), every push is popped, and `stats op` charges each kernel to
/// that range.
#[test]
fn cupti_kernels_carry_the_nvtx_range_their_launch_was_made_in() {
    if !python_with(&["nvtx"]) {
        return;
    }
    let Some(StandIn { dir, lib_dir, .. }) = stand_in_cupti("record-cupti-ranges") else {
        return;
    };
    let log = dir.join("stand-in.log");
    let session = dir.join("session");
    let out = record_with(
        &["-q", "--cupti", "--no-stacks"],
        &session,
        Path::new(&python()),
        &[&script("cupti_ranges.py")],
        &[
            ("LD_LIBRARY_PATH", lib_dir.to_str().unwrap()),
            ("STAND_IN_CUPTI_LOG", log.to_str().unwrap()),
        ],
    );
    assert_ok(&out, "cupti_ranges.py with the stand-in libcupti");
    let made_in: BTreeMap<String, Option<String>> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(made_in.len(), 5);
    let slices: Vec<Value> = recorded(&session)
        .values()
        .flat_map(|f| f["slices"].as_array().unwrap().clone())
        .collect();
    // The id each range was pushed with, by its name.
    let range_ids: HashMap<String, u64> = slices
        .iter()
        .filter(|s| ["outer", "inner", "worker"].contains(&s[2].as_str().unwrap_or_default()))
        .map(|s| {
            let id = s[5]["external_id"]
                .as_u64()
                .unwrap_or_else(|| panic!("a range without its external id: {s}"));
            (s[2].as_str().unwrap().to_string(), id)
        })
        .collect();
    assert_eq!(range_ids.len(), 3, "{range_ids:?}");
    let distinct: HashSet<u64> = range_ids.values().copied().collect();
    assert_eq!(distinct.len(), 3, "{range_ids:?}");
    for (correlation, range) in &made_in {
        let name = format!("k{correlation}");
        let kernel = slices
            .iter()
            .find(|s| s[1] == "cuda/kernel" && s[2] == name.as_str())
            .unwrap_or_else(|| panic!("no kernel {name}: {slices:#?}"));
        let want = range.as_ref().map(|r| range_ids[r]);
        assert_eq!(kernel[5]["external_id"].as_u64(), want, "{name}: {kernel}");
    }
    let log = std::fs::read_to_string(&log).unwrap();
    let pushed: Vec<&str> = log
        .lines()
        .filter_map(|l| l.strip_prefix("pushed "))
        .collect();
    let mut popped: Vec<&str> = log
        .lines()
        .filter_map(|l| l.strip_prefix("popped "))
        .collect();
    assert_eq!(pushed.len(), 3, "{log}");
    popped.sort();
    let mut sorted = pushed.clone();
    sorted.sort();
    assert_eq!(sorted, popped, "every pushed id popped: {log}");
    // The session's model charges each kernel to its range (the worker's to "worker").
    let stats = common::opscope_ok(&[
        "stats",
        "op",
        "--format",
        "json",
        "-q",
        session.to_str().unwrap(),
    ]);
    let rows: Vec<Value> = serde_json::from_slice(&stats.stdout).unwrap();
    let device_ns = |name: &str| -> i64 {
        rows.iter()
            .find(|r| r["name"] == name)
            .map_or(0, |r| r["accelerator_ns"].as_i64().unwrap())
    };
    // Each stand-in kernel lasts 2 µs.
    assert_eq!(
        (device_ns("outer"), device_ns("inner"), device_ns("worker")),
        (4_000, 2_000, 2_000),
        "{rows:#?}"
    );
}

/// Where an NVIDIA driver exists the sampler reads each GPU's utilisation and memory
/// through NVML. No GPU here: a stand-in `libnvidia-ml.so.1` (tests/record/fake_nvml.c,
/// its structs laid out from nvml.h) gives two devices fixed readings, and each must
/// arrive as its GPU's counters, every sample. The driver's list of processes on each
/// GPU (the stand-in's file, written by the recorded program with its own pid) gives
/// the program's memory on each; another process's (pid 1) and a process whose memory
/// the driver does not tell are not shown.
#[test]
fn gpu_readings_from_nvml_become_counters() {
    if !python_with(&["perfetto"]) {
        return;
    }
    let dir = scratch_dir("record-nvml");
    let lib_dir = dir.join("lib");
    compile_c(
        "fake_nvml.c",
        &lib_dir.join("libnvidia-ml.so.1"),
        &["-shared", "-fPIC"],
    );
    let session = dir.join("session");
    let users = dir.join("gpu-users.txt");
    let program =
        "printf '0 1 777\\n1 %s 5000000\\n0 %s -\\n' $$ $$ > \"$FAKE_NVML_PROCESSES\"; sleep 0.3";
    let out = record_with(
        &["-q", "--sample-ms", "20"],
        &session,
        Path::new("sh"),
        &["-c", program],
        &[
            ("LD_LIBRARY_PATH", lib_dir.to_str().unwrap()),
            ("FAKE_NVML_PROCESSES", users.to_str().unwrap()),
        ],
    );
    assert_ok(&out, "opscope record with a stand-in NVML");
    let file = sampler_file(&session);
    // The program's memory on GPU 1, as the driver listed it once the program wrote it.
    let held = counter_samples(&file, "sh -c", "GPU 1 memory bytes");
    assert!(
        !held.is_empty() && held.iter().all(|&b| b == 5_000_000.0),
        "{held:?}"
    );
    let values = &file["counter_values"];
    let memory_tracks: Vec<&String> = values
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.ends_with(" memory bytes"))
        .collect();
    assert_eq!(
        memory_tracks.len(),
        1,
        "only the program's, on GPU 1: {memory_tracks:?}"
    );
    for (gpu, utilization, used) in [(0, 37.0, 123456789.0), (1, 81.0, 987654321.0)] {
        for (track, want) in [
            ("GPU utilisation %", utilization),
            ("GPU memory used bytes", used),
        ] {
            let key = format!("GPU {gpu}/{track}");
            let samples = values[&key]
                .as_array()
                .unwrap_or_else(|| panic!("no {key} in {values}"));
            // 0.3 s sampled every 20 ms, with a first sample at the start.
            assert!(samples.len() >= 3, "{key}: {samples:?}");
            assert!(
                samples.iter().all(|v| v.as_f64() == Some(want)),
                "{key}: {samples:?}"
            );
        }
    }
}

#[test]
fn every_process_of_a_multiprocessing_pool_is_recorded() {
    if !python_with(&["nvtx", "perfetto"]) {
        return;
    }
    for method in ["fork", "spawn"] {
        let dir = scratch_dir(&format!("record-pool-{method}"));
        let own_path = dir.join("workers.json");
        let session = dir.join("session");
        let out = record(
            &session,
            Path::new(&python()),
            &[&script("pool.py"), own_path.to_str().unwrap(), method],
            &[],
        );
        assert_ok(&out, "pool.py");
        let own: BTreeMap<String, u64> =
            serde_json::from_slice(&std::fs::read(&own_path).unwrap()).unwrap();
        let files = recorded(&session);
        for (pid, tasks) in &own {
            let file = files
                .get(&pid.parse::<i64>().unwrap())
                .unwrap_or_else(|| panic!("{method}: no file for worker {pid}"));
            let ranges = slice_counts(file)
                .iter()
                .filter(|((c, _), _)| c == "nvtx/pool")
                .map(|(_, n)| n)
                .sum::<u64>();
            assert_eq!(ranges, *tasks, "{method}: worker {pid}");
        }
        let sampled = sampled_pids(&session);
        for pid in own.keys() {
            assert!(
                sampled.contains(&pid.parse().unwrap()),
                "{method}: the sampler missed {pid}: {sampled:?}"
            );
        }
        assert!(
            sampled.len() > own.len(),
            "{method}: the pool's parent is sampled too"
        );
    }
}

#[test]
fn a_dataloaders_worker_processes_are_recorded() {
    if !python_with(&["torch", "perfetto"]) {
        return;
    }
    let dir = scratch_dir("record-dataloader");
    let own_path = dir.join("pids.json");
    let session = dir.join("session");
    let out = record(
        &session,
        Path::new(&python()),
        &[&script("dataloader.py"), own_path.to_str().unwrap()],
        &[],
    );
    assert_ok(&out, "dataloader.py");
    let own: Value = serde_json::from_slice(&std::fs::read(&own_path).unwrap()).unwrap();
    let workers: Vec<i64> = own["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_i64().unwrap())
        .collect();
    assert_eq!(workers.len(), 2);
    let files = recorded(&session);
    let main = own["main"].as_i64().unwrap();
    let main_ops = slice_counts(&files[&main])
        .keys()
        .filter(|(c, _)| c == "itt/PyTorch")
        .count();
    assert!(main_ops > 0, "the main process's ops are recorded");
    for worker in &workers {
        let file = files
            .get(worker)
            .unwrap_or_else(|| panic!("no file for worker {worker}"));
        let fills = slice_counts(file)
            .iter()
            .filter(|((c, n), _)| c == "itt/PyTorch" && n == "aten::full")
            .map(|(_, count)| count)
            .sum::<u64>();
        assert!(
            fills > 0,
            "worker {worker}'s torch.full ops are in its own file"
        );
    }
    let sampled = sampled_pids(&session);
    for pid in workers.iter().chain([&main]) {
        assert!(
            sampled.contains(pid),
            "process {pid} not recorded: {sampled:?}"
        );
    }
}

#[test]
fn each_torchrun_rank_writes_its_own_file() {
    if !python_with(&["torch", "perfetto"]) {
        return;
    }
    let dir = scratch_dir("record-torchrun");
    let session = dir.join("session");
    let pids = dir.join("rank");
    let torchrun = Path::new(&python()).with_file_name("torchrun");
    let out = record(
        &session,
        &torchrun,
        &[
            "--standalone",
            "--nproc-per-node",
            "2",
            &script("ranks.py"),
            pids.to_str().unwrap(),
        ],
        &[],
    );
    assert_ok(&out, "torchrun ranks.py");
    let files = recorded(&session);
    for rank in 0..2 {
        let pid: i64 = std::fs::read_to_string(format!("{}.{rank}", pids.display()))
            .unwrap()
            .parse()
            .unwrap();
        let file = files
            .get(&pid)
            .unwrap_or_else(|| panic!("no file for rank {rank} (pid {pid})"));
        let all_reduces = slice_counts(file)
            .get(&("itt/PyTorch".into(), "c10d::allreduce_".into()))
            .copied();
        assert_eq!(all_reduces, Some(3), "rank {rank}");
    }
    // Each file is its rank's, as torch.distributed numbered it (the pid each rank
    // wrote): `info` and `steps` say so.
    let info = common::opscope_ok(&["info", "--format", "json", session.to_str().unwrap()]);
    let info: Value = serde_json::from_slice(&info.stdout).unwrap();
    for rank in 0..2 {
        let pid = std::fs::read_to_string(format!("{}.{rank}", pids.display())).unwrap();
        let file = info["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| {
                f["path"]
                    .as_str()
                    .unwrap()
                    .ends_with(&format!("opscope-{pid}.pftrace"))
            })
            .unwrap_or_else(|| panic!("no file for pid {pid}: {info}"));
        assert_eq!(file["rank"], rank, "{file}");
        assert_eq!(file["world_size"], 2, "{file}");
    }
}

#[test]
fn a_termination_request_to_opscope_reaches_the_program() {
    let dir = scratch_dir("record-sigterm");
    let session = dir.join("session");
    let program = "import signal, sys, time\n\
                   signal.signal(signal.SIGTERM, lambda *a: sys.exit(42))\n\
                   print('ready', flush=True)\n\
                   time.sleep(30)\n";
    let mut child = record_command(&["-q"], &session)
        .args([&python(), "-c", program])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "ready");
    // SAFETY: kill on the pid of the opscope we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(
        child.wait().unwrap().code(),
        Some(42),
        "the program's own SIGTERM handler ran"
    );
}

#[test]
fn a_fork_without_exec_gives_the_child_its_own_file() {
    if !python_with(&["nvtx", "perfetto"]) {
        return;
    }
    let dir = scratch_dir("record-fork");
    let own_path = dir.join("pids.json");
    let session = dir.join("session");
    let out = record(
        &session,
        Path::new(&python()),
        &[&script("fork_no_exec.py"), own_path.to_str().unwrap()],
        &[],
    );
    assert_ok(&out, "fork_no_exec.py");
    let own: Value = serde_json::from_slice(&std::fs::read(&own_path).unwrap()).unwrap();
    assert_eq!(own["child_status"], 0);
    let files = recorded(&session);
    let names = |pid: i64| -> Vec<String> {
        let mut v: Vec<String> = files[&pid]["slices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s[2].as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        names(own["parent"].as_i64().unwrap()),
        ["before fork", "parent 0", "parent 1"]
    );
    // The child's file holds only its own ranges: nothing of the parent's is repeated.
    assert_eq!(
        names(own["child"].as_i64().unwrap()),
        ["child 0", "child 1", "child 2"]
    );
}

#[test]
fn a_program_killed_mid_run_leaves_a_readable_trace() {
    if !python_with(&["perfetto"]) {
        return;
    }
    let dir = scratch_dir("record-kill");
    let session = dir.join("session");
    let flush_ms = 50;
    let mut child = record_command(&["-q"], &session)
        .arg(built("dataflow"))
        .args(["--steps", "100000", "--quiet"])
        .env("OPSCOPE_FLUSH_MS", flush_ms.to_string())
        .spawn()
        .unwrap();
    // Let it run until its file holds a good many steps (a busy machine may take a
    // while to start it), find the program (opscope's child), and kill it outright.
    let started = std::time::Instant::now();
    let program = loop {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let program = children_of(child.id() as i32).into_iter().next();
        let written = program
            .and_then(|p| std::fs::metadata(session.join(format!("opscope-{p}.pftrace"))).ok())
            .map_or(0, |m| m.len());
        if written >= 8 << 10 {
            break program.unwrap();
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(300),
            "the program wrote {written} bytes in five minutes"
        );
    };
    let killed_at = monotonic_ns();
    // SAFETY: kill on a pid we just read; SIGKILL cannot be caught.
    unsafe { libc::kill(program, libc::SIGKILL) };
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(128 + 9),
        "opscope reports the kill as shells do"
    );

    let files = recorded(&session);
    let file = &files[&(program as i64)];
    let slices = file["slices"].as_array().unwrap();
    assert!(
        slices.len() > 100,
        "the run's ops before the kill: {}",
        slices.len()
    );
    let end_of = |s: &Value| s[3].as_i64().unwrap() + s[4].as_i64().unwrap();
    let last_end = slices.iter().map(end_of).max().unwrap();
    // The writer flushes every interval, so the file reaches close to the kill; the
    // bound is wide (20 intervals) because on a loaded machine the writer may wait for
    // a core, and what it had not written then is lost with the process, rightly.
    assert!(
        last_end >= killed_at - 20 * flush_ms * 1_000_000,
        "last event {} ms before the kill",
        (killed_at - last_end) / 1_000_000
    );
    // Nothing older is missing. Each thread's file reaches to its last event written:
    // before the earliest of those ends, every step (an NVTX range on the main thread)
    // is there, and each holds all its graph's ops (from the worker threads), as many
    // as the first step. A chunk lost on the way would lose a step or some of its ops.
    let mut reach: HashMap<i64, i64> = HashMap::new();
    for s in slices {
        let tid = s[0].as_i64().unwrap_or(-1);
        let end = end_of(s);
        reach
            .entry(tid)
            .and_modify(|r| *r = (*r).max(end))
            .or_insert(end);
    }
    let horizon = *reach.values().min().unwrap();
    let mut steps: BTreeMap<u64, (i64, i64)> = BTreeMap::new();
    for s in slices.iter().filter(|s| s[1] == "nvtx") {
        if let Some(n) = s[2].as_str().and_then(|n| n.strip_prefix("step ")) {
            steps.insert(n.parse().unwrap(), (s[3].as_i64().unwrap(), end_of(s)));
        }
    }
    let numbers: Vec<u64> = steps.keys().copied().collect();
    let expected: Vec<u64> = (0..numbers.len() as u64).collect();
    assert_eq!(numbers, expected, "steps missing");
    let ops_in = |(b, e): (i64, i64)| {
        slices
            .iter()
            .filter(|s| s[1] == "itt/opscope.example")
            .filter(|s| s[3].as_i64().unwrap() >= b && end_of(s) <= e)
            .count()
    };
    let per_step = ops_in(steps[&0]);
    assert!(per_step > 0);
    let complete: Vec<(u64, usize)> = steps
        .iter()
        .filter(|(_, &(_, e))| e < horizon)
        .map(|(&n, &span)| (n, ops_in(span)))
        .collect();
    assert!(
        complete.len() >= 3,
        "steps before every thread's last event: {complete:?}"
    );
    for (n, ops) in complete {
        assert_eq!(ops, per_step, "step {n}'s ops");
    }
    // And opscope itself reads it.
    common::opscope_ok(&["info", session.to_str().unwrap()]);
}

fn children_of(pid: i32) -> Vec<i32> {
    let text =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    text.split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn monotonic_ns() -> i64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Each recorded file, the process sampler's too, carries a snapshot of
/// CLOCK_MONOTONIC (its events' clock, and the snapshot's primary one), CLOCK_REALTIME
/// and CLOCK_BOOTTIME, so sessions of several hosts can be merged: the snapshot's
/// offsets must be the ones this test reads from the same clocks.
#[test]
fn each_file_snapshots_monotonic_realtime_and_boottime() {
    if !python_with(&["perfetto"]) {
        return;
    }
    let dir = scratch_dir("record-clocks");
    let session = dir.join("session");
    let started = monotonic_ns();
    let out = record(
        &session,
        &built("dataflow"),
        &["--steps", "2", "--quiet"],
        &[],
    );
    let ended = monotonic_ns();
    assert_ok(&out, "the example");
    let offset = |clock| clock_ns(clock) - monotonic_ns();
    let (realtime, boottime) = (offset(libc::CLOCK_REALTIME), offset(libc::CLOCK_BOOTTIME));
    // Perfetto's built-in clock ids.
    let (id_realtime, id_monotonic, id_boottime) = ("1", "3", "6");
    let mut files: Vec<Value> = recorded(&session).into_values().collect();
    assert!(!files.is_empty());
    let sampler: Vec<PathBuf> = std::fs::read_dir(&session)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("opscope-processes"))
        .collect();
    let decoded = run_oracle_json("recorded_events.py", &sampler);
    files.extend(decoded.as_object().unwrap().values().cloned());
    assert_eq!(files.len(), 2, "the example's file and the sampler's");
    for file in &files {
        assert_eq!(file["primary_clock"], 3, "{file}");
        let snapshot = &file["snapshot"];
        let at = |id: &str| {
            snapshot[id]
                .as_i64()
                .unwrap_or_else(|| panic!("no clock {id} in {snapshot}"))
        };
        let monotonic = at(id_monotonic);
        assert!((started..=ended).contains(&monotonic), "{snapshot}");
        for (name, id, want) in [
            ("realtime", id_realtime, realtime),
            ("boottime", id_boottime, boottime),
        ] {
            let got = at(id) - monotonic;
            // Read a few ms apart; the offsets move only if the clock is stepped.
            assert!(
                (got - want).abs() < 50_000_000,
                "{name} - monotonic: {got} in the file, {want} read here"
            );
        }
    }
}

/// `opscope memory` on a session whose program has no allocator events reports the
/// resident memory the recorder sampled: a Python program holds 200 MiB, then frees
/// it. The peak lies between what it held and its own VmHWM (the sampler sees only
/// some instants), and the memory after the free is below the peak by most of it.
#[test]
fn memory_reports_a_recordings_sampled_resident_memory() {
    let dir = scratch_dir("record-resident");
    let session = dir.join("s");
    let out = record_with(
        &["--sample-ms", "20"],
        &session,
        Path::new(&python()),
        &[&script("resident.py")],
        &[],
    );
    assert_ok(&out, "recording resident.py");
    let told: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (pid, held, vmhwm) = (
        told["pid"].as_i64().unwrap(),
        told["held"].as_i64().unwrap(),
        told["vmhwm"].as_i64().unwrap(),
    );
    let report = Command::new(env!("CARGO_BIN_EXE_opscope"))
        .args(["memory", "--quiet", "--format", "json"])
        .arg(&session)
        .env("OPSCOPE_CACHE_DIR", test_cache_dir())
        .output()
        .unwrap();
    assert_ok(&report, "opscope memory");
    let reports: Value = serde_json::from_slice(&report.stdout).unwrap();
    let mine = reports
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["data"] == "resident"
                && r["allocator"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("(pid {pid})"))
        })
        .unwrap_or_else(|| panic!("no resident memory of pid {pid}: {reports:#}"));
    let peak = mine["peak_in_use"].as_i64().unwrap();
    assert!(
        held <= peak && peak <= vmhwm,
        "held {held} <= peak {peak} <= VmHWM {vmhwm}"
    );
    let last = mine["final_in_use"].as_i64().unwrap();
    assert!(
        last < peak - held / 2,
        "freed: {last} after a peak of {peak}"
    );
    let first = mine["first_in_use"].as_i64().unwrap();
    assert!(first < held / 2, "before the block: {first}");
    // Over time: the periods hold the peak, and the run begins and ends low.
    let periods = mine["over_time"].as_array().unwrap();
    assert!(periods.len() > 2, "{periods:?}");
    let peaks: Vec<i64> = periods
        .iter()
        .map(|p| p["peak"].as_i64().unwrap())
        .collect();
    assert_eq!(peaks.iter().max(), Some(&peak));
    assert!(peaks[0] < held / 2 && periods.last().unwrap()["at_end"].as_i64() == Some(last));
    // The text report says it too, and no longer asks for profile_memory.
    let text = Command::new(env!("CARGO_BIN_EXE_opscope"))
        .args(["memory", "--quiet"])
        .arg(&session)
        .env("OPSCOPE_CACHE_DIR", test_cache_dir())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("peak resident"), "{text}");
    assert!(!text.contains("profile_memory"), "{text}");
}

/// On a recording with steps (NVTX ranges `train_step_N`) and no allocator events, the
/// growth of resident memory per step is what the program's own VmRSS says it grew by
/// in each step (the sampler's last sample before each boundary stands for it).
/// A program that holds its memory to the end (tests/record/resident_kept.py): the
/// sampler's file holds no sample of the exited process (0 B, which `memory` took for
/// the memory at the end: "growth -11.86 MiB"), the peak is what the program read of
/// itself as its last act (within a tenth), and the run ends above where it began
/// (the interpreter frees the arrays as it exits, so the last sample may be lower than
/// the peak, never 0).
#[test]
fn memory_at_the_end_is_the_programs_not_its_exits() {
    if !python_with(&["perfetto"]) {
        return;
    }
    let dir = scratch_dir("record-resident-kept");
    let session = dir.join("s");
    let out = record_with(
        &["--sample-ms", "10"],
        &session,
        Path::new(&python()),
        &[&script("resident_kept.py")],
        &[],
    );
    assert_ok(&out, "recording resident_kept.py");
    let told: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (pid, at_end) = (
        told["pid"].as_i64().unwrap(),
        told["rss_at_end"].as_i64().unwrap(),
    );
    let report = common::opscope_ok(&["memory", "--format", "json", session.to_str().unwrap()]);
    let reports: Value = serde_json::from_slice(&report.stdout).unwrap();
    let mine = reports
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["data"] == "resident"
                && r["allocator"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("(pid {pid})"))
        })
        .unwrap_or_else(|| panic!("no resident memory of pid {pid}: {reports:#}"));
    let (peak, first, last) = (
        mine["peak_in_use"].as_i64().unwrap(),
        mine["first_in_use"].as_i64().unwrap(),
        mine["final_in_use"].as_i64().unwrap(),
    );
    assert!(
        (peak - at_end).abs() <= at_end / 10,
        "the peak resident memory {peak}, the program's own {at_end}"
    );
    assert!(last >= first && first > 0, "first {first}, last {last}");
    let samples = counter_samples(
        &sampler_file(&session),
        "resident_kept.py",
        "resident bytes",
    );
    assert!(
        !samples.is_empty() && samples.iter().all(|&v| v > 0.0),
        "{samples:?}"
    );
}

/// A recorded session knows its host: every file of it names the host it was recorded
/// on (the kernel's hostname), and its Parquet partition is that host's (before:
/// `host=unknown`, and Python's `host` null).
#[test]
fn a_recorded_session_knows_its_host() {
    let dir = scratch_dir("record-host");
    let session = dir.join("s");
    let account = dir.join("account.json");
    let out = record(
        &session,
        Path::new(&python()),
        &[&script("busy.py"), account.to_str().unwrap(), "0.2"],
        &[],
    );
    assert_ok(&out, "recording busy.py");
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string();
    let info = common::opscope_ok(&["info", "--format", "json", session.to_str().unwrap()]);
    let info: Value = serde_json::from_slice(&info.stdout).unwrap();
    for file in info["files"].as_array().unwrap() {
        assert_eq!(file["host"], hostname.as_str(), "{file}");
    }
    let parquet = dir.join("s.parquet");
    common::opscope_ok(&[
        "convert",
        "--quiet",
        session.to_str().unwrap(),
        "-o",
        parquet.to_str().unwrap(),
    ]);
    let partitions: Vec<String> = std::fs::read_dir(&parquet)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("host="))
        .collect();
    assert_eq!(partitions, [format!("host={hostname}")]);
}

#[test]
fn memory_reports_resident_growth_per_step() {
    if !python_with(&["nvtx"]) {
        return;
    }
    let dir = scratch_dir("record-resident-steps");
    let session = dir.join("s");
    let out = record_with(
        &["--sample-ms", "20"],
        &session,
        Path::new(&python()),
        &[&script("resident_steps.py")],
        &[],
    );
    assert_ok(&out, "recording resident_steps.py");
    let told: Value = serde_json::from_slice(&out.stdout).unwrap();
    let block = told["block"].as_i64().unwrap();
    let report = Command::new(env!("CARGO_BIN_EXE_opscope"))
        .args(["memory", "--quiet", "--format", "json"])
        .arg(&session)
        .env("OPSCOPE_CACHE_DIR", test_cache_dir())
        .output()
        .unwrap();
    assert_ok(&report, "opscope memory");
    let reports: Value = serde_json::from_slice(&report.stdout).unwrap();
    // The program's process holds the most.
    let mine = &reports[0];
    assert_eq!(mine["data"], "resident", "{reports:#}");
    let steps = mine["steps"].as_array().unwrap();
    let theirs = told["steps"].as_array().unwrap();
    assert_eq!(steps.len(), theirs.len(), "{steps:?}");
    for (ours, theirs) in steps.iter().zip(theirs) {
        let growth = ours["growth"].as_i64().unwrap();
        let own = theirs["end"].as_i64().unwrap() - theirs["start"].as_i64().unwrap();
        assert!(own >= block, "the program grew by {own} in a step");
        assert!(
            (growth - own).abs() <= 4 << 20,
            "growth {growth} sampled, {own} by VmRSS: {ours}"
        );
    }
}
