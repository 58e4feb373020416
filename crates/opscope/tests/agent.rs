//! The per-host agent end to end: real recorded programs stream to a real agent, and
//! what `top --once --format json`, `dump` and `--live` say is checked against the
//! programs' own account and against the session files the same runs wrote.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{assert_ok, built, compile_itt_program, scratch_dir, test_cache_dir};
use serde_json::Value;

/// Whether what a test needs is here: off CI its absence skips the test, saying so;
/// on CI it fails the test.
fn have(present: bool, what: &str) -> bool {
    if !present {
        assert!(std::env::var_os("CI").is_none(), "CI needs {what}");
        opscope_corpus::skip(&format!("needs {what}"));
    }
    present
}

/// How long a test waits for a condition (a job showing in `top`, a process ending)
/// before it fails: waiting costs time only when the test fails, and a machine running
/// the whole suite on 2 cores (or a CI host at a load of 8) is slow to get there.
const PATIENCE: Duration = Duration::from_secs(120);

/// A running agent, killed when dropped.
struct Agent {
    child: Child,
    socket: PathBuf,
}

impl Agent {
    /// An agent listening in `dir` (or at `dir` when it names a socket).
    fn start(dir: &Path, extra: &[&str]) -> Agent {
        let socket = if dir.extension().is_some_and(|e| e == "sock") {
            dir.to_path_buf()
        } else {
            dir.join("agent.sock")
        };
        Agent::start_at(&socket, extra)
    }

    fn start_at(socket: &Path, extra: &[&str]) -> Agent {
        Agent::start_with(socket, extra, &[])
    }

    /// An agent at `socket` (or, when `socket` is in `XDG_RUNTIME_DIR`, at its default
    /// path there) with more environment.
    fn start_with(socket: &Path, extra: &[&str], env: &[(&str, &Path)]) -> Agent {
        let mut command = Command::new(env!("CARGO_BIN_EXE_opscope"));
        command.arg("agent").arg("--quiet");
        if !env.iter().any(|(k, _)| *k == "XDG_RUNTIME_DIR") {
            command.arg("--socket").arg(socket);
        }
        for (k, v) in env {
            command.env(k, v);
        }
        let child = command
            .args(extra)
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the agent starts");
        let agent = Agent {
            child,
            socket: socket.to_path_buf(),
        };
        let deadline = Instant::now() + PATIENCE;
        while UnixStream::connect(socket).is_err() {
            assert!(Instant::now() < deadline, "the agent never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
        agent
    }

    fn opscope(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_opscope"))
            .args(args)
            .env("OPSCOPE_AGENT", &self.socket)
            .env("OPSCOPE_RECORD_LIB", built("libopscope_record.so"))
            .env("OPSCOPE_CACHE_DIR", test_cache_dir())
            .output()
            .expect("opscope runs")
    }

    fn top(&self) -> Value {
        let out = self.opscope(&["top", "--once", "--format", "json"]);
        assert_ok(&out, "top --once");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Polls `top` until `ready` holds of it (at most `within`).
    fn top_until(&self, within: Duration, ready: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let top = self.top();
            if ready(&top) {
                return top;
            }
            assert!(Instant::now() < deadline, "top never showed it: {top:#}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Records `program args` as job `job` into `session`, and returns once `top`
    /// shows more than `events` of its events (the program still running).
    fn record_until(
        &self,
        job_name: &str,
        session: &Path,
        program: &Path,
        args: &[&str],
        events: u64,
    ) -> Child {
        let run = record(&self.socket, job_name, session, program, args);
        self.top_until(PATIENCE, |top| {
            job(top, job_name).is_some_and(|j| j["events"].as_u64() > Some(events))
        });
        run
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `opscope record --job JOB --agent SOCKET -o SESSION -- program args`, started.
fn record(agent: &Path, job: &str, session: &Path, program: &Path, args: &[&str]) -> Child {
    let _ = std::fs::remove_dir_all(session);
    Command::new(env!("CARGO_BIN_EXE_opscope"))
        .args([
            "record",
            "--quiet",
            "--sample-ms",
            "0",
            "--job",
            job,
            "--agent",
        ])
        .arg(agent)
        .arg("-o")
        .arg(session)
        .arg("--")
        .arg(program)
        .args(args)
        .env("OPSCOPE_RECORD_LIB", built("libopscope_record.so"))
        .env("OPSCOPE_FLUSH_MS", "50")
        .stdout(Stdio::piped())
        .spawn()
        .expect("opscope record starts")
}

fn job<'t>(top: &'t Value, name: &str) -> Option<&'t Value> {
    top["jobs"].as_array()?.iter().find(|j| j["job"] == name)
}

fn info(path: &Path) -> Value {
    let out = common::opscope_ok(&[
        "info",
        path.to_str().unwrap(),
        "--format",
        "json",
        "--no-cache",
    ]);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The injected library's one file in a session.
fn process_file(session: &Path) -> PathBuf {
    let files: Vec<PathBuf> = std::fs::read_dir(session)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            common::is_recorders_file(&name)
        })
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

/// The records the recorder said it dropped for a full buffer in `file` (its
/// `opscope: events dropped` instants), read through a Chrome JSON conversion.
fn dropped_by_recorder(dir: &Path, file: &Path) -> u64 {
    let json = dir.join("dropped-check.json");
    let _ = std::fs::remove_file(&json);
    common::opscope_ok(&[
        "convert",
        file.to_str().unwrap(),
        "-o",
        json.to_str().unwrap(),
        "--no-cache",
    ]);
    let trace: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "opscope: events dropped (buffer full)")
        .filter_map(|e| e["args"]["count"].as_u64())
        .sum()
}

fn count(info: &Value, kind: &str) -> u64 {
    info["slices_by_kind"][kind].as_u64().unwrap_or(0)
}

#[test]
fn a_recorded_job_is_live_in_top_and_its_dump_reads_as_its_file() {
    let dir = scratch_dir("agent-live");
    let program = compile_itt_program(&dir, "itt_steps");
    let agent = Agent::start(&dir, &[]);
    let session = dir.join("session");
    // 40 steps of 300 ops and 40 ms: about two seconds.
    let run = record(
        &agent.socket,
        "steady",
        &session,
        &program,
        &["40", "300", "40"],
    );

    // While it runs: the job, its one process, connected, with events arriving.
    let live = agent.top_until(PATIENCE, |top| {
        job(top, "steady").is_some_and(|j| j["events"].as_u64() > Some(0))
    });
    let j = job(&live, "steady").unwrap();
    assert_eq!(j["source"], "--job");
    let p = &j["processes"][0];
    assert_eq!(p["connected"], true, "{live:#}");
    let role = p["role"].as_str().unwrap();
    assert!(
        role.starts_with("itt_steps 40 300 40 (pid "),
        "named by its command line: {role}"
    );
    assert!(p["command"].as_str().unwrap().contains("itt_steps"));
    assert!(p["file"].as_str().unwrap().starts_with("opscope-"));

    let out = run.wait_with_output().unwrap();
    assert!(out.status.success());
    let own: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (steps, tasks) = (
        own["steps"].as_u64().unwrap(),
        own["tasks"].as_u64().unwrap(),
    );

    // Once the process is gone and a full second has passed since its last chunk:
    // every step and every op it emitted, in the agent's windows too.
    let done = agent.top_until(PATIENCE, |top| {
        job(top, "steady").is_some_and(|j| {
            j["processes"][0]["connected"] == false
                && j["top_ops"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|o| o["calls_60s"].as_u64().unwrap())
                    .sum::<u64>()
                    == tasks
        })
    });
    let j = job(&done, "steady").unwrap();
    assert_eq!(j["steps"]["count"].as_u64(), Some(steps), "{j:#}");
    let median = j["steps"]["median_ms"].as_f64().unwrap();
    assert!((40.0..200.0).contains(&median), "median step {median} ms");
    let ops: Vec<&str> = j["top_ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert!(
        ops.contains(&"forward_op") && ops.contains(&"backward_op"),
        "{ops:?}"
    );

    // The file the process wrote, read by the same reader as the dump.
    let file = info(&process_file(&session));
    let events = j["processes"][0]["events"].as_u64().unwrap();
    let in_file = file["slices"].as_u64().unwrap() + file["instants"].as_u64().unwrap();
    assert_eq!(events, in_file, "the agent's count against the file's");

    // The dump: a session every command reads, holding what the file holds.
    let dumped = dir.join("dump");
    let _ = std::fs::remove_dir_all(&dumped);
    let out = agent.opscope(&["dump", "steady", "-o", dumped.to_str().unwrap()]);
    assert_ok(&out, "dump");
    let from_dump = info(&dumped);
    for kind in ["op", "step"] {
        assert_eq!(count(&from_dump, kind), count(&file, kind), "{kind}");
    }
    assert_eq!(count(&from_dump, "op"), tasks);
    let meta: Value =
        serde_json::from_slice(&std::fs::read(dumped.join(".opscope/dump.json")).unwrap()).unwrap();
    assert_eq!(meta["job"], "steady");
    assert_eq!(meta["processes"].as_array().unwrap().len(), 1);
    // A dump refuses a directory with files in it.
    let again = agent.opscope(&["dump", "steady", "-o", dumped.to_str().unwrap()]);
    assert!(!again.status.success());

    // --live: the same report as on the file.
    let live_steps = agent.opscope(&["steps", "--live", "steady", "--format", "json"]);
    assert_ok(&live_steps, "steps --live");
    let file_steps = common::opscope_ok(&["steps", session.to_str().unwrap(), "--format", "json"]);
    let (a, b): (Value, Value) = (
        serde_json::from_slice(&live_steps.stdout).unwrap(),
        serde_json::from_slice(&file_steps.stdout).unwrap(),
    );
    let steps_of = |v: &Value| v["sources"][0]["steps"].as_array().unwrap().clone();
    assert_eq!(
        steps_of(&b).len() as u64,
        steps,
        "the file's steps, from its ITT frames"
    );
    assert_eq!(steps_of(&a), steps_of(&b));
    let unknown = agent.opscope(&["stats", "op", "--live", "nosuchjob"]);
    assert!(!unknown.status.success());
    let message = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        message.contains("no job `nosuchjob`") && message.contains("steady"),
        "{message}"
    );
}

/// `top`'s ops are `stats op`'s rows over the job's last seconds: an op that calls
/// itself (an overload calling another) is one call in both. Before, `top` tallied
/// each slice by name as chunks arrived and counted the inner call too.
#[test]
fn top_counts_ops_as_stats_op_does() {
    let dir = scratch_dir("agent-ops");
    let program = compile_itt_program(&dir, "itt_nested");
    let agent = Agent::start(&dir, &[]);
    let session = dir.join("session");
    let run = record(
        &agent.socket,
        "nested",
        &session,
        &program,
        &["20", "50", "20"],
    );
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success());
    let own: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (outer_tasks, leaf_tasks) = (
        own["outer_tasks"].as_u64().unwrap(),
        own["leaf_tasks"].as_u64().unwrap(),
    );
    let stats = common::opscope_ok(&["stats", "op", "--format", "json", session.to_str().unwrap()]);
    let stats: Value = serde_json::from_slice(&stats.stdout).unwrap();
    let row = |name: &str| {
        stats
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in stats op: {stats:#}"))
            .clone()
    };
    // The program's own count: each outer call is two tasks of one name, one call.
    assert_eq!(row("outer")["occurrence"].as_u64(), Some(outer_tasks / 2));
    assert_eq!(row("leaf")["occurrence"].as_u64(), Some(leaf_tasks));
    let op = |j: &Value, name: &str| {
        j["top_ops"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["name"] == name)
            .cloned()
    };
    // Once the process has gone and its last ops are in.
    let done = agent.top_until(PATIENCE, |top| {
        job(top, "nested").is_some_and(|j| {
            j["ended"] == true
                && op(j, "leaf").is_some_and(|o| o["calls_60s"].as_u64() == Some(leaf_tasks))
        })
    });
    let j = job(&done, "nested").unwrap();
    for name in ["outer", "leaf"] {
        let (live, file) = (op(j, name).unwrap(), row(name));
        assert_eq!(live["calls_60s"], file["occurrence"], "{name}: {live:#}");
        let live_ns = live["time_ms_60s"].as_f64().unwrap() * 1e6;
        let file_ns = file["cpu_ns"].as_f64().unwrap();
        assert!(
            (live_ns - file_ns).abs() <= 1.0,
            "{name}: {live_ns} ns live, {file_ns} in the file"
        );
    }
    assert!(j["ops_read_s"].as_f64().unwrap() > 0.0);
}

/// `top` has one line of advice per job: `advise`'s first finding over the job's last
/// minute, which for a fresh PyTorch program recorded whole (single-tensor SGD, its
/// DataLoader in the process) is the first finding of `advise` on its session.
#[test]
fn top_advises_each_job_as_advise_does_on_its_session() {
    if !common::python_with(&["torch"]) {
        return;
    }
    let dir = scratch_dir("agent-advice");
    let agent = Agent::start(&dir, &[]);
    let session = dir.join("session");
    let python = PathBuf::from(common::python());
    let script = common::repo_root().join("tests/record/advise_torch_patterns.py");
    let out_json = dir.join("own-profile.json");
    let run = record(
        &agent.socket,
        "patterns",
        &session,
        &python,
        &[script.to_str().unwrap(), "bad", out_json.to_str().unwrap()],
    );
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success());
    let advice: Value = serde_json::from_slice(
        &common::opscope_ok(&["advise", "--format", "json", session.to_str().unwrap()]).stdout,
    )
    .unwrap();
    let first = advice["findings"][0].clone();
    let (title, rule) = (
        first["title"].as_str().unwrap(),
        first["rule"].as_str().unwrap(),
    );
    // The agent analyses the job again once its process has gone and its last chunks
    // are in: then the live line is the session's first finding.
    let done = agent.top_until(PATIENCE, |top| {
        job(top, "patterns").is_some_and(|j| {
            j["ended"] == true
                && j["advice"]
                    .as_str()
                    .is_some_and(|a| a.starts_with(title) && a.ends_with(&format!("{rule})")))
        })
    });
    let live = job(&done, "patterns").unwrap()["advice"]
        .as_str()
        .unwrap()
        .to_string();
    let text = agent.opscope(&["top", "--once"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains(&format!("advice: {live}")));
}

#[test]
fn an_agent_killed_mid_run_costs_the_job_nothing_and_a_new_one_has_it_back() {
    let dir = scratch_dir("agent-killed");
    let program = compile_itt_program(&dir, "itt_steps");
    let mut agent = Agent::start(&dir, &[]);
    let session = dir.join("session");
    // 60 steps of 50 ms: three seconds.
    let run = agent.record_until("survivor", &session, &program, &["60", "200", "50"], 0);
    agent.child.kill().unwrap(); // SIGKILL: the socket file stays behind
    agent.child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let restarted = Agent::start_at(&agent.socket, &[]);
    // The recording finds the new agent by itself while the program runs (the job's
    // events reach it only from a live process).
    restarted.top_until(PATIENCE, |top| {
        job(top, "survivor").is_some_and(|j| j["events"].as_u64() > Some(0))
    });

    let out = run.wait_with_output().unwrap();
    assert!(out.status.success(), "the program must not notice");
    let own: Value = serde_json::from_slice(&out.stdout).unwrap();
    let file = info(&process_file(&session));
    assert_eq!(
        count(&file, "op"),
        own["tasks"].as_u64().unwrap(),
        "the file is whole"
    );
    assert_eq!(count(&file, "step"), own["steps"].as_u64().unwrap());
}

#[test]
fn garbage_on_the_socket_costs_only_that_peer() {
    let dir = scratch_dir("agent-garbage");
    let agent = Agent::start(&dir, &[]);
    let frame = |kind: u8, body: &[u8]| {
        let mut f = ((body.len() + 1) as u32).to_le_bytes().to_vec();
        f.push(kind);
        f.extend_from_slice(body);
        f
    };
    let hostile: Vec<Vec<u8>> = vec![
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        u32::MAX.to_le_bytes().to_vec(),
        frame(1, b"{not json"),
        frame(16, b"{\"query\":\"rm -rf\"}"),
        [
            frame(1, br#"{"version":1,"pid":1,"job":"evil"}"#),
            frame(3, &[1, 2, 3]),
        ]
        .concat(),
        [
            frame(1, br#"{"version":1,"pid":1,"job":"evil2"}"#),
            frame(
                3,
                &[0u8; 8]
                    .iter()
                    .chain(b"\x0a\xff\xff\xff\xff\x0fjunk")
                    .copied()
                    .collect::<Vec<_>>(),
            ),
        ]
        .concat(),
        (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect(),
    ];
    for bytes in &hostile {
        let mut peer = UnixStream::connect(&agent.socket).unwrap();
        let _ = peer.write_all(bytes);
        let _ = peer.shutdown(std::net::Shutdown::Write);
        let mut answer = Vec::new();
        let _ = std::io::Read::read_to_end(&mut peer, &mut answer);
    }
    let top = agent.top();
    assert!(
        top["agent"]["pid"].as_u64().is_some(),
        "the agent still answers"
    );
    let evil2 = job(&top, "evil2").expect("a peer that greeted is a job");
    assert!(evil2["chunks_lost"].as_u64().unwrap() >= 1, "{evil2:#}");
    assert_eq!(evil2["processes"][0]["connected"], false);
}

#[test]
fn a_slow_step_and_a_stall_dump_the_job_with_the_reason() {
    let dir = scratch_dir("agent-triggers");
    let program = compile_itt_program(&dir, "itt_steps");
    let dumps = dir.join("dumps");
    let _ = std::fs::remove_dir_all(&dumps);
    let agent = Agent::start(
        &dir,
        &[
            "--dump-on",
            // Far above what load does to a 30 ms step, far below the 200x of the slow
            // one.
            "slow-step=20x",
            "--dump-on",
            "stall=1500ms",
            "--dump-dir",
            dumps.to_str().unwrap(),
        ],
    );
    let session = dir.join("session");
    // Steps of 30 ms; step 10 takes 6 s more: slow when it ends, a stall while it runs
    // (the agent's sampler, at idle priority, must get a turn in the 4.5 s between the
    // threshold and the step's end: with 3 s more, a run beside the other tests' jobs
    // and agents on two cores missed it).
    let run = record(
        &agent.socket,
        "slow",
        &session,
        &program,
        &["14", "50", "30", "10", "6000"],
    );
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success());
    let deadline = Instant::now() + PATIENCE;
    let reasons = loop {
        let mut reasons = Vec::new();
        for entry in std::fs::read_dir(&dumps).into_iter().flatten().flatten() {
            let meta = entry.path().join(".opscope/dump.json");
            if let Ok(bytes) = std::fs::read(&meta) {
                let meta: Value = serde_json::from_slice(&bytes).unwrap();
                reasons.push((entry.path(), meta["reason"].as_str().unwrap().to_string()));
            }
        }
        if reasons.len() >= 2 || Instant::now() > deadline {
            break reasons;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stall = reasons.iter().find(|(_, r)| r.starts_with("stall"));
    let slow = reasons.iter().find(|(_, r)| r.starts_with("slow-step"));
    assert!(stall.is_some() && slow.is_some(), "{reasons:?}");
    let (slow_dir, slow_reason) = slow.unwrap();
    assert!(slow_reason.contains("step 11 took"), "{slow_reason}");
    // Beside the slow step's dump, what it spent its 6 s more on: `diff` of the slowest
    // step against the others, written once the dump is.
    let written = slow_dir.join(".opscope/diff.json");
    let deadline = Instant::now() + PATIENCE;
    while !written.exists() {
        assert!(Instant::now() < deadline, "no {}", written.display());
        std::thread::sleep(Duration::from_millis(100));
    }
    // Its writer may be mid-file: read until it parses.
    let diff: Value = loop {
        if let Ok(v) = serde_json::from_slice(&std::fs::read(&written).unwrap()) {
            break v;
        }
        assert!(
            Instant::now() < deadline,
            "{} never parsed",
            written.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(diff["sides"][1]["part"], "the slowest step");
    assert_eq!(
        diff["sides"][1]["step_numbers"].as_array().unwrap().len(),
        1
    );
    let total = diff["mean_step_change_ns"].as_f64().unwrap();
    assert!(
        (5.5e9..7e9).contains(&total),
        "the slowest step is {total} ns longer"
    );
    let sum =
        diff["main_thread_lines_ns"].as_f64().unwrap() + diff["between_ops_ns"].as_f64().unwrap();
    assert!((sum - total).abs() < 1.0, "{sum} against {total}");
    // The dump reads as a trace with the steps so far.
    let steps = common::opscope_ok(&["steps", slow_dir.to_str().unwrap(), "--format", "json"]);
    let steps: Value = serde_json::from_slice(&steps.stdout).unwrap();
    assert!(
        steps["sources"][0]["steps"].as_array().unwrap().len() >= 11,
        "{steps:#}"
    );
    let top = agent.top();
    assert_eq!(
        top["agent"]["dumps"].as_array().unwrap().len(),
        2,
        "{top:#}"
    );
}

/// Records tests/record/steps_slow_unmarked.py (a PyTorch loop with no step markers) as
/// job `job` into `dir/session`, to its end.
fn record_unmarked_loop(agent: &Agent, job: &str, dir: &Path) {
    let script = common::repo_root().join("tests/record/steps_slow_unmarked.py");
    let run = record(
        &agent.socket,
        job,
        &dir.join("session"),
        Path::new(&common::python()),
        &[script.to_str().unwrap()],
    );
    let out = run.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A PyTorch job with no step markers at all (tests/record/steps_slow_unmarked.py):
/// its steps are found by the repeating op sequence, and the `slow-step` trigger judges
/// them as it judges marked ones: step 10, 1.5 s longer than the others, is dumped with
/// the reason. Before, a 1,027 ms step against a 28.9 ms median gave no dump.
#[test]
fn a_slow_step_of_a_job_without_markers_is_dumped() {
    if !common::python_with(&["torch"]) {
        return;
    }
    let dir = scratch_dir("agent-slow-unmarked");
    let dumps = dir.join("dumps");
    let _ = std::fs::remove_dir_all(&dumps);
    let agent = Agent::start(
        &dir,
        &[
            // A CPU-bound 29 ms step tripled by a burst of load on two cores would
            // take the one dump before step 10 (1.5 s, 50x) and name the wrong step.
            "--dump-on",
            "slow-step=20x",
            "--dump-dir",
            dumps.to_str().unwrap(),
        ],
    );
    record_unmarked_loop(&agent, "unmarked", &dir);
    let top = agent.top_until(PATIENCE, |top| {
        top["agent"]["dumps"]
            .as_array()
            .is_some_and(|d| !d.is_empty())
    });
    let dump = top["agent"]["dumps"][0].as_str().unwrap();
    let meta: Value =
        serde_json::from_slice(&std::fs::read(Path::new(dump).join(".opscope/dump.json")).unwrap())
            .unwrap();
    let reason = meta["reason"].as_str().unwrap();
    assert!(reason.starts_with("slow-step: step 10 took"), "{reason}");
    let live = &job(&top, "unmarked").unwrap()["steps"];
    assert!(
        live["found_by"]
            .as_str()
            .unwrap()
            .contains("repeating op sequence"),
        "{live:#}"
    );
}

/// A job nobody watched while it ran (no `top`, no trigger): the first look, one `top
/// --once`, has its steps, found by the same search (the repeating op sequence), and
/// its ops. Before, the search ran only on the sampler's turns while someone looked,
/// so the first look said 0 steps.
#[test]
fn a_first_look_has_the_steps_of_a_job_nobody_watched() {
    if !common::python_with(&["torch"]) {
        return;
    }
    let dir = scratch_dir("agent-first-look");
    let agent = Agent::start(&dir, &[]);
    record_unmarked_loop(&agent, "unwatched", &dir);
    // The agent has taken in the whole stream once it saw the process go.
    let deadline = Instant::now() + PATIENCE;
    let top = loop {
        let top = agent.top();
        let gone = job(&top, "unwatched").is_some_and(|j| {
            j["processes"]
                .as_array()
                .unwrap()
                .iter()
                .all(|p| p["connected"] == false)
        });
        if gone {
            break top;
        }
        assert!(Instant::now() < deadline, "the process never went: {top:#}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let j = job(&top, "unwatched").unwrap();
    let steps = &j["steps"];
    assert!(steps["count"].as_u64() > Some(0), "{j:#}");
    assert!(
        steps["found_by"]
            .as_str()
            .unwrap()
            .contains("repeating op sequence"),
        "{j:#}"
    );
    assert!(!j["top_ops"].as_array().unwrap().is_empty(), "{j:#}");
}

/// An agent that is stopped (SIGSTOP) accepts connections but never answers: `top`,
/// `dump` and `--live` say so after the wait (OPSCOPE_AGENT_TIMEOUT) instead of waiting
/// forever; `top` on no terminal points to `--once`. Before, all three hung.
#[test]
fn a_stopped_agent_is_said_so_instead_of_waited_for() {
    let dir = scratch_dir("agent-stopped");
    let agent = Agent::start(&dir, &[]);
    let pid = agent.child.id() as i32;
    // SAFETY: a plain signal to the agent this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let out_dir = dir.join("dump");
    for args in [
        vec!["top", "--once"],
        vec!["dump", "some-job", "-o", out_dir.to_str().unwrap()],
        vec!["stats", "op", "--live", "some-job"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_opscope"))
            .args(&args)
            .env("OPSCOPE_AGENT", &agent.socket)
            .env("OPSCOPE_AGENT_TIMEOUT", "1s")
            .output()
            .expect("opscope runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            stderr.contains("the agent did not answer within 1 s") && stderr.contains("stopped"),
            "{args:?}: {stderr}"
        );
    }
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let out = Command::new(env!("CARGO_BIN_EXE_opscope"))
        .arg("top")
        .env("OPSCOPE_AGENT", &agent.socket)
        .stdin(Stdio::null())
        .output()
        .expect("opscope runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("opscope top --once"), "{stderr}");
}

#[test]
fn a_client_that_stops_reading_leaves_the_agent_and_the_jobs_alone() {
    let dir = scratch_dir("agent-stuck-client");
    let program = compile_itt_program(&dir, "itt_steps");
    let agent = Agent::start(&dir, &["--memory", "4MiB"]);
    let session = dir.join("session");
    // 4 M tasks: 7-13 MB of chunks (timestamps' deltas, and so the bytes, vary with the
    // machine's load), more than the flight recorder may keep.
    let run = agent.record_until("busy", &session, &program, &["200", "20000", "5"], 10_000);
    // Ask for a dump and never read it; the agent's answer fills the socket.
    let mut stuck = UnixStream::connect(&agent.socket).unwrap();
    let query = br#"{"query":"dump","job":"busy"}"#;
    let mut frame = ((query.len() + 1) as u32).to_le_bytes().to_vec();
    frame.push(16);
    frame.extend_from_slice(query);
    stuck.write_all(&frame).unwrap();
    // Meanwhile top answers (within the client's own time limit, or it fails) and the
    // job goes on.
    agent.top();
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success());
    let own: Value = serde_json::from_slice(&out.stdout).unwrap();
    let file = info(&process_file(&session));
    // Every task is in the file, but for what the recorder said it dropped because its
    // buffer was full (a host too busy to let its writer thread keep up: the program is
    // never made to wait): the stuck client cost the job nothing.
    let tasks = own["tasks"].as_u64().unwrap();
    let dropped = dropped_by_recorder(&dir, &process_file(&session));
    let ops = count(&file, "op");
    if dropped == 0 {
        assert_eq!(ops, tasks);
    } else {
        eprintln!("the recorder dropped {dropped} records for a full buffer");
        assert!(
            ops < tasks && ops + dropped >= tasks,
            "{ops} ops of {tasks} tasks, {dropped} dropped"
        );
    }
    // The recorder kept to its bound, dropping the oldest, and so did the agent.
    let top = agent.top_until(PATIENCE, |top| {
        job(top, "busy").is_some_and(|j| j["processes"][0]["connected"] == false)
    });
    assert!(
        top["agent"]["flight_bytes"].as_u64().unwrap() <= 4 << 20,
        "{top:#}"
    );
    assert!(
        top["agent"]["flight_evicted_chunks"].as_u64().unwrap() > 0,
        "{top:#}"
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.child.id())).unwrap();
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(rss_kib < 64 << 10, "the agent holds {rss_kib} KiB");
    drop(stuck);
}

#[test]
fn env_prints_what_records_a_process_without_wrapping_it() {
    let dir = scratch_dir("agent-env");
    let program = compile_itt_program(&dir, "itt_steps");
    let agent = Agent::start(&dir, &[]);
    let session = dir.join("session");
    let _ = std::fs::remove_dir_all(&session);
    let out = agent.opscope(&["env", "-o", session.to_str().unwrap(), "--job", "prolog"]);
    assert_ok(&out, "env");
    let script = format!(
        "{}\nexec {} 5 10 10",
        String::from_utf8_lossy(&out.stdout),
        program.display()
    );
    let ran = Command::new("sh")
        .args(["-c", &script])
        .env("OPSCOPE_RECORD_LIB", built("libopscope_record.so"))
        .output()
        .unwrap();
    assert_ok(&ran, "the program under `opscope env`'s variables");
    let file = info(&process_file(&session));
    assert_eq!(count(&file, "op"), 50);
    let top = agent.top_until(PATIENCE, |top| {
        job(top, "prolog").is_some_and(|j| j["processes"][0]["connected"] == false)
    });
    let in_file = file["slices"].as_u64().unwrap() + file["instants"].as_u64().unwrap();
    assert_eq!(
        job(&top, "prolog").unwrap()["events"].as_u64(),
        Some(in_file)
    );
}

/// The process with `pid` in a job of `top`.
fn process(job: &Value, pid: u64) -> &Value {
    job["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("no process {pid} in {job:#}"))
}

#[test]
fn python_jobs_at_once_show_their_ranks_workers_ops_and_steps() {
    if !common::python_with(&["torch", "tensorflow", "jax"]) {
        return;
    }
    let dir = scratch_dir("agent-three-jobs");
    let agent = Agent::start(&dir, &[]);
    let python = PathBuf::from(common::python());
    let script = |name: &str| {
        common::repo_root()
            .join("tests/record")
            .join(name)
            .to_string_lossy()
            .into_owned()
    };
    let log = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let torchrun = python.with_file_name("torchrun");
    let start = |name: &'static str, program: &Path, args: &[&str]| {
        (
            name,
            record(&agent.socket, name, &dir.join(name), program, args),
        )
    };
    let runs = [
        start(
            "loader",
            &python,
            &[&script("steps_torch_dataloader.py"), &log("loader.log")],
        ),
        start(
            "ddp",
            &torchrun,
            &[
                "--standalone",
                "--nproc-per-node",
                "2",
                &script("ranks.py"),
                &log("rank"),
            ],
        ),
        start(
            "keras",
            &python,
            &[&script("steps_keras.py"), &log("keras.log")],
        ),
        start("jax", &python, &[&script("steps_jax.py"), &log("jax.log")]),
        start(
            "spawned",
            &python,
            &[&script("ranks_spawned.py"), &log("spawned.log")],
        ),
    ];
    for (name, run) in runs {
        let out = run.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Every process gone, and the period search run since.
    let top = agent.top_until(PATIENCE, |top| {
        ["loader", "ddp", "keras", "jax", "spawned"]
            .iter()
            .all(|name| {
                job(top, name).is_some_and(|j| {
                    j["processes"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .all(|p| p["connected"] == false)
                })
            })
            && ["loader", "keras", "jax"].iter().all(|name| {
                // The final search after the process went has run.
                let steps = &job(top, name).unwrap()["steps"];
                steps["count"].as_u64() > Some(0)
                    && steps["counted"].as_str() != Some("")
                    && steps["search_pending"] == false
                    && job(top, name).unwrap()["ended"] == true
            })
    });
    // Each process has one name, live and in every command on its session: `info`
    // names every process of the session as `top` names it (before: `worker`,
    // `launcher`, `process` live; `DataLoader worker 27347` in `steps`, the command line
    // in `memory`).
    let roles = |name: &str| {
        let mut roles: Vec<String> = job(&top, name).unwrap()["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["role"].as_str().unwrap().to_string())
            .collect();
        roles.sort();
        roles
    };
    let names = |info: Value| {
        let mut named: Vec<String> = info["process_names"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect();
        named.sort();
        named
    };
    for name in ["loader", "ddp", "keras", "jax", "spawned"] {
        // The files of record's own samplers (stacks, and each process's CPU and
        // memory) may add a process no recorder spoke for, which the agent never saw:
        // a short-lived child of no Python (ctypes' `ldconfig -p`, run by torch at
        // import). The processes that did speak are named alike with them and without.
        let session = dir.join(name);
        let recorded: Vec<PathBuf> = std::fs::read_dir(&session)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let file = p.file_name().unwrap().to_string_lossy().into_owned();
                file.ends_with(".pftrace")
                    && !file.starts_with("opscope-stacks-")
                    && !file.starts_with("opscope-processes-")
            })
            .collect();
        assert!(
            recorded.len() + 2 <= std::fs::read_dir(&session).unwrap().count(),
            "{name}: no samplers' files"
        );
        let mut args = vec!["info".to_string()];
        args.extend(recorded.iter().map(|p| p.to_string_lossy().into_owned()));
        args.extend(["--format", "json", "--no-cache"].map(String::from));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let without_stacks = serde_json::from_slice(&common::opscope_ok(&args).stdout).unwrap();
        assert_eq!(roles(name), names(without_stacks), "{name}");
        let with_stacks = names(info(&session));
        for role in roles(name) {
            assert!(
                with_stacks.contains(&role),
                "{name}: {role} not in {with_stacks:?}"
            );
        }
    }
    let kinds = |name: &str| -> Vec<String> {
        roles(name)
            .iter()
            .map(|r| r.split(" (pid").next().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        kinds("loader"),
        [
            "DataLoader worker",
            "DataLoader worker",
            "python steps_torch_dataloader.py loader.log"
        ]
    );
    let ddp = kinds("ddp");
    assert_eq!(ddp[1..], ["rank 0", "rank 1"]);
    // Ranks that torch.multiprocessing.spawn started learn their rank after they
    // connected: named ranks live too (before: by their command line).
    assert_eq!(kinds("spawned")[1..], ["rank 0", "rank 1"]);
    // The launcher is named by the interpreter its script's `#!` line runs: pip writes
    // `bin/python3` there, uv `bin/python`.
    let shebang = std::fs::read_to_string(&torchrun).unwrap();
    let interpreter = shebang.lines().next().unwrap().trim_start_matches("#!");
    let interpreter = Path::new(interpreter.split_whitespace().next().unwrap());
    let launcher = format!(
        "{} torchrun --standalone",
        interpreter.file_name().unwrap().to_string_lossy()
    );
    assert!(ddp[0].starts_with(&launcher), "{ddp:?}, not {launcher}");

    // Each process's events are its file's, every one.
    for name in ["loader", "ddp", "keras", "jax", "spawned"] {
        let j = job(&top, name).unwrap();
        for p in j["processes"].as_array().unwrap() {
            let file = dir.join(name).join(p["file"].as_str().unwrap());
            let info = info(&file);
            let in_file = info["slices"].as_u64().unwrap() + info["instants"].as_u64().unwrap();
            assert_eq!(p["events"].as_u64().unwrap(), in_file, "{name}: {p:#}");
            assert_eq!(p["chunks_lost"], 0);
        }
    }
    let ranks = job(&top, "ddp").unwrap();
    for rank in 0..2u64 {
        let pid: u64 = std::fs::read_to_string(format!("{}.{rank}", log("rank")))
            .unwrap()
            .parse()
            .unwrap();
        let p = process(ranks, pid);
        assert_eq!(p["rank"], rank);
        assert_eq!(p["world_size"], 2);
        // The ranks' time in gloo's collectives (which the recorder writes as ops) is
        // communication live as in the session's reports: equal, to rounding (live
        // it was 0 before; `top` listed them as ops).
        let gpu =
            common::opscope_ok(&["gpu", dir.join("ddp").to_str().unwrap(), "--format", "json"]);
        let gpu: Value = serde_json::from_slice(&gpu.stdout).unwrap();
        let host = gpu["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| {
                h["file"]
                    .as_str()
                    .unwrap()
                    .ends_with(&format!("opscope-{pid}.pftrace"))
            })
            .unwrap_or_else(|| panic!("no host row of rank {rank}: {gpu:#}"));
        let in_file = host["time"]["communication_ns"].as_f64().unwrap() / 1e6;
        let live = p["communication_ms"].as_f64().unwrap();
        assert!(
            in_file > 0.0 && (live - in_file).abs() <= 1e-3 * in_file + 1e-3,
            "rank {rank}: communication {live} ms live, {in_file} ms in the file"
        );
    }
    let collectives: Vec<&str> = ranks["top_ops"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|op| op["name"].as_str().unwrap().starts_with("gloo:"))
        .map(|op| op["kind"].as_str().unwrap())
        .collect();
    assert!(
        !collectives.is_empty() && collectives.iter().all(|&k| k == "collective"),
        "{collectives:?}"
    );

    // Steps found live are those `steps` finds in the session, however they are found:
    // the loader's by the same period search on the same ops; Keras's from its batches
    // as the bootstrap marks them, in the chunks; JAX's from the calls of its jitted
    // step (the bootstrap marks each call; JAX's own record is written only when its
    // profiler stops), searched in what the job's chunks added since the last search,
    // as the loader's are (on a loaded machine the agent, at idle priority, may search
    // only after the jobs ended: all of them still). A JAX job had no events, ops or
    // steps live before. Its last step is left out: live,
    // its end is estimated (JAX's record of the wait for its result is in the
    // session's profile only).
    for (name, found_by, but_last) in [
        ("loader", "repeating op sequence", false),
        ("keras", "Keras fit's batches", false),
        ("jax", "calls of the jitted step", true),
    ] {
        let j = job(&top, name).unwrap();
        let live = &j["steps"];
        assert!(
            live["found_by"].as_str().unwrap().contains(found_by),
            "{live:#}"
        );
        let session = common::opscope_ok(&[
            "steps",
            dir.join(name).to_str().unwrap(),
            "--format",
            "json",
        ]);
        let session: Value = serde_json::from_slice(&session.stdout).unwrap();
        let main_pid = j["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| !p["role"].as_str().unwrap().contains("DataLoader worker"))
            .unwrap()["pid"]
            .as_u64()
            .unwrap();
        // The main process's file, or the framework's profile that `steps` reads the
        // process's steps from (JAX's, which holds its record of the calls too).
        let sources = session["sources"].as_array().unwrap();
        let source = sources
            .iter()
            .find(|s| {
                s["file"]
                    .as_str()
                    .unwrap()
                    .ends_with(&format!("opscope-{main_pid}.pftrace"))
                    && !s["steps"].as_array().unwrap().is_empty()
            })
            .or_else(|| {
                sources
                    .iter()
                    .find(|s| s["found_by"]["kind"] == "framework")
            })
            .unwrap_or_else(|| panic!("{name}: no steps for the main process: {session:#}"));
        let mut from_file: Vec<f64> = source["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["dur_ns"].as_f64().unwrap() / 1e6)
            .collect();
        let mut from_agent: Vec<f64> = live["recent_ms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        if but_last {
            from_file.pop();
            from_agent.pop();
        }
        assert_eq!(
            from_agent.len(),
            from_file.len(),
            "{name}: {from_agent:?} {from_file:?}"
        );
        // Live and in the file the steps are read from the same events: equal, to
        // rounding.
        for (k, (a, f)) in from_agent.iter().zip(&from_file).enumerate() {
            assert!(
                (a - f).abs() <= 1e-3,
                "{name}: step {k}: {a} ms live against {f} ms in the file"
            );
        }
        let median = |steps: &[f64]| {
            let mut sorted = steps.to_vec();
            sorted.sort_by(f64::total_cmp);
            sorted[sorted.len() / 2]
        };
        let (a, f) = (median(&from_agent), median(&from_file));
        assert!(
            (a - f).abs() <= 0.01 * f,
            "{name}: median step {a} ms live against {f} ms in the file"
        );
    }
}

/// Runs `command` as the unprivileged user `nobody` (uid 65534).
fn as_nobody(command: &mut Command) -> &mut Command {
    let program = command.get_program().to_os_string();
    let args: Vec<std::ffi::OsString> = command.get_args().map(|a| a.to_os_string()).collect();
    let mut wrapped = Command::new("setpriv");
    wrapped
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(program)
        .args(args);
    for (k, v) in command.get_envs() {
        if let Some(v) = v {
            wrapped.env(k, v);
        }
    }
    *command = wrapped;
    command
}

#[test]
fn each_user_sees_only_their_own_jobs_and_root_sees_all() {
    // SAFETY: getuid has no preconditions.
    let root = unsafe { libc::getuid() } == 0;
    let setpriv = Command::new("setpriv").arg("--version").output().is_ok();
    if !have(
        root && setpriv,
        "root and setpriv (util-linux) to run a job as another user",
    ) {
        return;
    }
    let dir = scratch_dir("agent-two-users");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let program = compile_itt_program(&dir, "itt_steps");
    let agent = Agent::start(&dir.join("system").join("agent.sock"), &["--system"]);

    let mut root_job = record(
        &agent.socket,
        "roots",
        &dir.join("root-session"),
        &program,
        &["5", "20", "10"],
    );
    let nobody_session = dir.join("nobody-session");
    // The build may sit where nobody cannot reach (a home directory): nobody runs
    // copies of the binary and the library from the scratch directory.
    let opscope = dir.join("opscope");
    let library = dir.join("libopscope_record.so");
    std::fs::copy(env!("CARGO_BIN_EXE_opscope"), &opscope).unwrap();
    std::fs::copy(built("libopscope_record.so"), &library).unwrap();
    let mut nobody = Command::new(&opscope);
    nobody
        .args([
            "record",
            "--quiet",
            "--sample-ms",
            "0",
            "--job",
            "nobodys",
            "--agent",
        ])
        .arg(&agent.socket)
        .arg("-o")
        .arg(&nobody_session)
        .arg("--")
        .arg(&program)
        .args(["5", "20", "10"])
        .env("OPSCOPE_RECORD_LIB", &library)
        .env("OPSCOPE_CACHE_DIR", dir.join("nobody-cache"));
    let out = as_nobody(&mut nobody).output().unwrap();
    assert_ok(&out, "a recording as nobody");
    assert!(root_job.wait().unwrap().success());

    let everyone = agent.top_until(PATIENCE, |top| {
        job(top, "roots").is_some() && job(top, "nobodys").is_some()
    });
    assert_eq!(job(&everyone, "nobodys").unwrap()["uid"], 65534);
    assert_eq!(job(&everyone, "roots").unwrap()["uid"], 0);

    let ask = |args: &[&str]| {
        let mut command = Command::new(&opscope);
        command.args(args).arg("--socket").arg(&agent.socket);
        as_nobody(&mut command).output().unwrap()
    };
    let out = ask(&["top", "--once", "--format", "json"]);
    assert_ok(&out, "top as nobody");
    let theirs: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = theirs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["nobodys"]);
    let stolen = dir.join("stolen");
    let out = ask(&["dump", "roots", "-o", stolen.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no job `roots`"));
    assert!(!stolen.join(".opscope").exists());
}

/// The stand-in NVML (`tests/record/fake_nvml.c`) built as `libnvidia-ml.so.1` into a
/// folder of `dir`, which it returns (for `LD_LIBRARY_PATH`).
fn stand_in_nvml(dir: &Path) -> PathBuf {
    let lib_dir = dir.join("lib");
    common::compile_c(
        "fake_nvml.c",
        &lib_dir.join("libnvidia-ml.so.1"),
        &["-shared", "-fPIC"],
    );
    lib_dir
}

/// The GPUs a job uses: each process NVML lists among a device's compute processes is
/// charged to its job with its memory there; processes of no job are not.
#[test]
fn a_jobs_processes_on_the_gpus_are_charged_to_it() {
    let dir = scratch_dir("agent-gpu-users");
    let program = compile_itt_program(&dir, "itt_steps");
    let lib_dir = stand_in_nvml(&dir);
    let users = dir.join("gpu-users");
    std::fs::write(&users, "").unwrap();
    let agent = Agent::start_with(
        &dir.join("agent.sock"),
        &[],
        &[
            ("LD_LIBRARY_PATH", &lib_dir),
            ("FAKE_NVML_PROCESSES", &users),
        ],
    );
    // 60 steps of about 100 ms: 6 s of run.
    let session = dir.join("session");
    let mut run = agent.record_until("on-gpu", &session, &program, &["60", "20", "100"], 10);
    let top = agent.top();
    let j = job(&top, "on-gpu").unwrap();
    assert_eq!(
        j["gpus"],
        serde_json::json!([]),
        "before NVML lists it: {j:#}"
    );
    let pid = j["processes"][0]["pid"].as_u64().unwrap();
    // The job's process on GPU 1 with 555,555,555 bytes and on GPU 0 with no figure,
    // beside 70 processes of no job on GPU 0 (more than NVML's first call has room
    // for).
    let mut lines = format!("1 {pid} 555555555\n0 {pid} -\n");
    for other in 0..70 {
        lines += &format!("0 {} 1000\n", 4_000_000 + other);
    }
    std::fs::write(&users, lines).unwrap();
    let top = agent.top_until(PATIENCE, |top| {
        job(top, "on-gpu").is_some_and(|j| j["gpu_memory_bytes"] == 555_555_555u64)
    });
    let j = job(&top, "on-gpu").unwrap();
    assert_eq!(j["gpus"], serde_json::json!([0, 1]));
    assert_eq!(
        j["processes"][0]["gpus"],
        serde_json::json!([
            {"index": 0, "memory_bytes": null},
            {"index": 1, "memory_bytes": 555_555_555u64},
        ])
    );
    let out = agent.opscope(&["top", "--once"]);
    assert_ok(&out, "top --once");
    let screen = String::from_utf8_lossy(&out.stdout);
    let memory = format!("{:.2} MiB", 555_555_555.0 / (1u64 << 20) as f64);
    for shown in [format!("GPUs 0,1: {memory}"), format!("0: ?, 1: {memory}")] {
        assert!(screen.contains(&shown), "{shown:?} not in: {screen}");
    }
    let _ = run.kill();
    let _ = run.wait();
}

#[test]
fn record_and_top_find_this_users_agent_and_the_agent_reads_the_gpus() {
    let dir = scratch_dir("agent-default-socket");
    let program = compile_itt_program(&dir, "itt_steps");
    let lib_dir = stand_in_nvml(&dir);
    let runtime = dir.join("run");
    let _ = std::fs::remove_dir_all(&runtime);
    std::fs::create_dir_all(&runtime).unwrap();
    let socket = runtime.join("opscope").join("agent.sock");
    let agent = Agent::start_with(
        &socket,
        &[],
        &[("XDG_RUNTIME_DIR", &runtime), ("LD_LIBRARY_PATH", &lib_dir)],
    );
    // The socket's directory is the user's alone.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(socket.parent().unwrap())
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o700);

    // Neither --agent nor OPSCOPE_AGENT: record and top look where this user's agent is.
    let session = dir.join("session");
    let _ = std::fs::remove_dir_all(&session);
    let opscope = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_opscope"))
            .args(args)
            .env_remove("OPSCOPE_AGENT")
            .env("XDG_RUNTIME_DIR", &runtime)
            .env("OPSCOPE_RECORD_LIB", built("libopscope_record.so"))
            .env("OPSCOPE_CACHE_DIR", test_cache_dir())
            .output()
            .unwrap()
    };
    // `opscope record -q --sample-ms 0 OPTIONS -o SESSION -- itt_steps 3 10 10`, finished,
    // and its job in `top` once its process is gone.
    let record_here = |options: &[&str], job_name: &str, session: &Path| {
        let mut args = vec!["record", "-q", "--sample-ms", "0", "--job", job_name];
        args.extend_from_slice(options);
        let (session, program) = (session.to_str().unwrap(), program.to_str().unwrap());
        args.extend_from_slice(&["-o", session, "--", program, "3", "10", "10"]);
        assert_ok(&opscope(&args), "record");
        agent.top_until(PATIENCE, |top| {
            job(top, job_name).is_some_and(|j| j["processes"][0]["connected"] == false)
        })
    };
    let top = record_here(&[], "found", &session);
    assert!(job(&top, "found").unwrap()["events"].as_u64() > Some(0));
    let out = opscope(&["top", "--once", "--format", "json"]);
    assert_ok(&out, "top on the default socket");
    let top: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The stand-in NVML's two devices, as it reports them.
    let gpus = top["agent"]["gpus"].as_array().unwrap();
    let readings: Vec<(f64, u64)> = gpus
        .iter()
        .map(|g| {
            (
                g["utilization_percent"].as_f64().unwrap(),
                g["memory_used_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(readings, [(37.0, 123456789), (81.0, 987654321)]);

    // --live-only: the agent has the job, the session no process file.
    let live_only = dir.join("live-only");
    let _ = std::fs::remove_dir_all(&live_only);
    let top = record_here(&["--live-only"], "nofile", &live_only);
    let p = &job(&top, "nofile").unwrap()["processes"][0];
    assert!(
        p["file"].is_null() && p["events"].as_u64() > Some(0),
        "{p:#}"
    );
    let files: Vec<_> = std::fs::read_dir(&live_only)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".pftrace"))
        .collect();
    assert!(files.is_empty(), "{files:?}");
}

#[test]
fn over_tcp_only_a_client_with_the_token_is_answered() {
    let dir = scratch_dir("agent-tcp");
    let program = compile_itt_program(&dir, "itt_steps");
    let agent = Agent::start(&dir, &["--listen", "127.0.0.1:0"]);
    let run = record(
        &agent.socket,
        "remote",
        &dir.join("session"),
        &program,
        &["3", "10", "10"],
    );
    assert!(run.wait_with_output().unwrap().status.success());
    // The agent decodes at the kernel's idle priority: on a busy machine the job's
    // chunks are taken in after the job ends. Its process gone from the agent, they all
    // are.
    agent.top_until(PATIENCE, |top| {
        job(top, "remote").is_some_and(|j| {
            j["processes"]
                .as_array()
                .unwrap()
                .iter()
                .all(|p| p["connected"] == false)
        })
    });
    let file = std::fs::read_to_string(agent.socket.with_extension("tcp")).unwrap();
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(agent.socket.with_extension("tcp"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o077, 0, "the token is for the agent's user only");
    let mut lines = file.lines();
    let (address, token) = (lines.next().unwrap(), lines.next().unwrap());
    assert!(address.starts_with("127.0.0.1:"));
    let tcp = |token: &str| {
        Command::new(env!("CARGO_BIN_EXE_opscope"))
            .args([
                "top",
                "--once",
                "--format",
                "json",
                "--connect",
                address,
                "--token",
                token,
            ])
            .env_remove("OPSCOPE_AGENT")
            .output()
            .unwrap()
    };
    let out = tcp(token);
    assert_ok(&out, "top over TCP");
    let top: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(job(&top, "remote").is_some(), "{top:#}");
    let wrong = tcp(&"0".repeat(token.len()));
    assert!(!wrong.status.success());
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("token"));
    // Any report reads a job over TCP too (before, `--live` knew only the socket).
    let live = Command::new(env!("CARGO_BIN_EXE_opscope"))
        .args([
            "info",
            "--format",
            "json",
            "--live",
            "remote",
            "--connect",
            address,
        ])
        .args(["--token", token])
        .env_remove("OPSCOPE_AGENT")
        .output()
        .unwrap();
    assert_ok(&live, "info --live over TCP");
    let info: Value = serde_json::from_slice(&live.stdout).unwrap();
    assert!(info["slices"].as_u64() > Some(0), "{info:#}");
}

/// An address other machines reach is refused unless asked for by name: the port is
/// not encrypted, and the token would cross the network in clear.
#[test]
fn listening_on_the_network_needs_its_own_flag() {
    let dir = scratch_dir("agent-tcp-network");
    let socket = dir.join("agent.sock");
    let agent = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_opscope"))
            .args(["agent", "--socket", socket.to_str().unwrap()])
            .args(extra)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    for address in ["0.0.0.0:0", "[::]:0", "192.0.2.1:7878"] {
        let out = agent(&["--listen", address]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && stderr.contains("--listen-on-network")
                && stderr.contains("encrypted"),
            "{address}: {stderr}"
        );
        assert!(!socket.exists(), "the agent started for {address}");
    }
    let out = agent(&["--listen-on-network"]);
    assert!(
        !out.status.success(),
        "--listen-on-network alone is accepted"
    );
}

#[test]
fn top_draws_the_jobs_on_a_terminal_and_leaves_on_q() {
    let script = Command::new("script").arg("--version").output().is_ok();
    if !have(script, "`script` (bsdutils) to give top a terminal") {
        return;
    }
    let dir = scratch_dir("agent-top-tty");
    let program = compile_itt_program(&dir, "itt_steps");
    let agent = Agent::start(&dir, &[]);
    let run = record(
        &agent.socket,
        "on-screen",
        &dir.join("session"),
        &program,
        &["5", "10", "10"],
    );
    assert!(run.wait_with_output().unwrap().status.success());
    // `script` gives top a terminal of its own; q on its input ends it.
    let command = format!(
        "stty rows 30 cols 120; {} top --socket {}",
        env!("CARGO_BIN_EXE_opscope"),
        agent.socket.display()
    );
    let mut top = Command::new("script")
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // What top draws, as it draws it: q is pressed once the job is on the screen (a
    // loaded machine may take a while to draw it), not after some time.
    let drawn = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let reader = {
        let drawn = drawn.clone();
        let mut stdout = top.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                drawn.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    };
    let texts = ["on-screen", "jobs", "forward_op", "pause"];
    let screen = || String::from_utf8_lossy(&drawn.lock().unwrap()).into_owned();
    let deadline = Instant::now() + PATIENCE;
    while !texts.iter().all(|t| screen().contains(t)) {
        assert!(
            Instant::now() < deadline,
            "not all of {texts:?} on the screen: {}",
            screen()
        );
        assert!(top.try_wait().unwrap().is_none(), "top ended: {}", screen());
        std::thread::sleep(Duration::from_millis(50));
    }
    top.stdin.as_mut().unwrap().write_all(b"q").unwrap();
    let deadline = Instant::now() + PATIENCE;
    while top.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "top did not leave on q");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = top.wait_with_output().unwrap();
    reader.join().unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        screen(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `opscope view --live` (no job named: every job of this user) reloads the running
/// job: each generation reaches later into the run, its views hold the job's latest
/// ops, and the page, following, keeps its view at the job's end.
#[test]
fn view_live_follows_a_running_job() {
    let dir = scratch_dir("agent-view-live");
    let program = compile_itt_program(&dir, "itt_steps");
    let agent = Agent::start(&dir, &[]);
    let session = dir.join("session");
    // 80 steps of about 100 ms: 8 s of run.
    let mut run = agent.record_until("watched", &session, &program, &["80", "20", "100"], 100);
    let mut viewer = Command::new(env!("CARGO_BIN_EXE_opscope"))
        .args(["view", "--live", "--no-open", "--every", "500ms"])
        .env("OPSCOPE_AGENT", &agent.socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut url = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(viewer.stdout.take().unwrap()),
        &mut url,
    )
    .unwrap();
    let url = url.trim().to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url:?}");
    let get = |path: &str| common::http_json(&url, path);
    let end_of = |meta: &Value| meta["origin"].as_i64().unwrap() + meta["span"].as_i64().unwrap();
    let first = get("api/meta")["meta"].clone();
    assert_eq!(first["live"], true);
    let deadline = Instant::now() + PATIENCE;
    // Reloaded three times, and half a second of the run later than the first view (a
    // loaded machine may reload before the job has moved that far: wait for both).
    let later = loop {
        let meta = get("api/meta")["meta"].clone();
        if meta["generation"].as_u64().unwrap() >= 3 && end_of(&meta) > end_of(&first) + 500_000_000
        {
            break meta;
        }
        assert!(
            Instant::now() < deadline,
            "the view did not move on: {} then {meta}",
            end_of(&first)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // The last second of the job, as a page would ask for it: its ops are there.
    let span = later["span"].as_i64().unwrap();
    let tracks: Vec<String> = later["tracks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].to_string())
        .collect();
    let view = get(&format!(
        "api/view?start={}&end={span}&px=1000&tracks={}",
        span - 1_000_000_000,
        tracks.join(",")
    ));
    let names: Vec<&str> = view["names"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(Value::as_str)
        .collect();
    assert!(names.contains(&"forward_op"), "{names:?}");

    if let Some(chromium) = common::browser::chromium() {
        let mut b = common::browser::Browser::start(chromium, dir.join("profile"), 1200, 800);
        b.navigate(&url);
        b.wait_for(
            "!!window.opscopeViewer && window.opscopeViewer.answered >= 1",
            Duration::from_secs(20),
        );
        let generation = b.eval("window.opscopeViewer.generation").as_u64().unwrap();
        b.wait_for(
            &format!("window.opscopeViewer.generation >= {} && Math.abs(window.opscopeViewer.end - window.opscopeViewer.meta.span) < 2", generation + 2),
            Duration::from_secs(20),
        );
        b.screenshot(&common::browser::artifacts_dir().join("view-live.png"));
    }
    let _ = viewer.kill();
    let _ = viewer.wait();
    let _ = run.kill();
    let _ = run.wait();
}

/// A job whose data the flight recorder no longer holds is not dumped into an empty
/// directory (which every command would then refuse): the dump says why and writes
/// nothing.
#[test]
fn a_dump_of_a_job_whose_data_expired_says_so_and_writes_nothing() {
    let dir = scratch_dir("agent-expired");
    let program = compile_itt_program(&dir, "itt_steps");
    let agent = Agent::start(&dir, &["--window", "1s"]);
    let run = record(
        &agent.socket,
        "brief",
        &dir.join("session"),
        &program,
        &["3", "5", "5"],
    );
    assert!(run.wait_with_output().unwrap().status.success());
    agent.top_until(PATIENCE, |top| job(top, "brief").is_some());
    // The window is a second: wait for the agent to let the chunks go.
    let deadline = Instant::now() + Duration::from_secs(120);
    let out_dir = dir.join("dump");
    loop {
        let _ = std::fs::remove_dir_all(&out_dir);
        let out = agent.opscope(&["dump", "brief", "-o", out_dir.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() && stderr.contains("holds nothing of it") {
            assert!(stderr.contains("nothing written"), "{stderr}");
            assert!(
                !out_dir.exists(),
                "an empty dump was left at {}",
                out_dir.display()
            );
            break;
        }
        // Ended jobs are kept (ENDED_JOBS_KEPT) far longer than this window.
        assert!(out.status.success(), "{stderr}");
        assert!(
            Instant::now() < deadline,
            "the job's data never expired: {stderr}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `opscope attach` joins the running agent for the process it samples: `top` lists
/// the job, named from the process's own environment (its SLURM job), with that
/// process connected while it is sampled and its hot functions (the busiest first),
/// its stacks in the flight recorder (`dump`), and no longer connected once attach
/// has stopped.
#[test]
fn an_attached_process_is_a_job_in_top_while_it_is_sampled() {
    use std::io::BufRead;
    let scratch = scratch_dir("agent-attach");
    let agent = Agent::start(&scratch, &[]);
    let mut program = Command::new(common::python())
        .arg(common::repo_root().join("tests/record/stacks_hot.py"))
        .env("SLURM_JOB_ID", "attached-job")
        .env("STACKS_HOT_ROUNDS", "100000")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(program.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    let pid = program.id();
    let session = scratch.join("session");
    let attach = Command::new(env!("CARGO_BIN_EXE_opscope"))
        .args(["attach", &pid.to_string(), "--duration", "600s", "--agent"])
        .arg(&agent.socket)
        .arg("-o")
        .arg(&session)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let process_of = |top: &Value, connected: bool| {
        top["jobs"].as_array().unwrap().iter().any(|j| {
            j["job"] == "attached-job"
                && j["source"] == "SLURM_JOB_ID"
                && j["processes"].as_array().unwrap().iter().any(|p| {
                    p["pid"].as_u64() == Some(u64::from(pid)) && p["connected"] == connected
                })
        })
    };
    agent.top_until(PATIENCE, |top| process_of(top, true));
    // Its hot functions, sampled from outside, reach `top`: the program spends about
    // 60 % of its time in `heavy`, its busiest.
    let top = agent.top_until(PATIENCE, |top| {
        top["jobs"].as_array().unwrap().iter().any(|j| {
            j["job"] == "attached-job"
                && j["hot_functions"].as_array().is_some_and(|h| h.len() >= 2)
        })
    });
    let job = top["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job"] == "attached-job")
        .unwrap();
    assert_eq!(job["hot_functions"][0]["function"], "heavy", "{job:#}");
    let text = agent.opscope(&["top", "--once"]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("hot functions of its sampled stacks"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
    // Its stacks are in the flight recorder: a dump of the job has them, with the
    // shares `top` gave.
    dumped_stacks_put_heavy_first(&agent, "attached-job", &scratch);
    // Ctrl-C: attach stops, keeps what it read, and leaves the agent.
    // SAFETY: kill(2) on our own child's pid, which we have not yet waited for.
    assert_eq!(unsafe { libc::kill(attach.id() as i32, libc::SIGINT) }, 0);
    let out = attach.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("joined the agent as job attached-job"),
        "{said}"
    );
    agent.top_until(PATIENCE, |top| process_of(top, false));
    // SAFETY: as above, for the program.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    program.wait().unwrap();
}

/// A program started under `record` while an agent runs: `record`'s sampler, outside
/// it, joins the agent for its stacks (beside the recorder inside, which streams what
/// it records), so `top` gives the job's hot functions (`heavy` first, as for an
/// attached job) with each process listed once, and a dump of the job has the sampled
/// stacks. Before, the samples of a recorded job reached its session only.
#[test]
fn a_recorded_programs_stacks_reach_top_and_its_dump() {
    let scratch = scratch_dir("agent-record-stacks");
    let agent = Agent::start(&scratch, &[]);
    let session = scratch.join("session");
    let program = common::repo_root().join("tests/record/stacks_hot.py");
    let python = PathBuf::from(common::python());
    let mut run = Stopping(Some(record(
        &agent.socket,
        "stacks-job",
        &session,
        &python,
        &[program.to_str().unwrap()],
    )));
    let top = agent.top_until(PATIENCE, |top| {
        job(top, "stacks-job")
            .is_some_and(|j| j["hot_functions"].as_array().is_some_and(|h| h.len() >= 2))
    });
    let found = job(&top, "stacks-job").unwrap();
    assert_eq!(found["hot_functions"][0]["function"], "heavy", "{found:#}");
    let mut pids: Vec<u64> = found["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    let listed = pids.len();
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids.len(), listed, "each process listed once: {found:#}");
    dumped_stacks_put_heavy_first(&agent, "stacks-job", &scratch);
    let run = run.0.take().unwrap();
    // SAFETY: kill(2) on our own child's pid, which we have not yet waited for; record
    // passes the signal on to the program, which ends.
    assert_eq!(unsafe { libc::kill(run.id() as i32, libc::SIGTERM) }, 0);
    let out = run.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    agent.top_until(PATIENCE, |top| {
        job(top, "stacks-job").is_some_and(|j| j["ended"] == true)
    });
}

/// `opscope dump JOB` holds the job's sampled stacks of `stacks_hot.py`: `stats hot` of
/// the dump puts `heavy` first.
fn dumped_stacks_put_heavy_first(agent: &Agent, job: &str, scratch: &Path) {
    let dumped = scratch.join("dumped");
    let out = agent.opscope(&["dump", job, "-o", dumped.to_str().unwrap()]);
    assert_ok(&out, &format!("dump {job}"));
    let out = agent.opscope(&["stats", "hot", "--format", "json", dumped.to_str().unwrap()]);
    assert_ok(&out, "stats hot of the dump");
    let hot: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hot["functions"][0]["function"], "heavy", "{hot:#}");
}

/// A `record` run stopped (SIGTERM, which it passes on to its program) if the test
/// fails before stopping it, so that no program is left running.
struct Stopping(Option<Child>);

impl Drop for Stopping {
    fn drop(&mut self) {
        if let Some(mut run) = self.0.take() {
            // SAFETY: kill(2) on our own child's pid, not yet waited for.
            unsafe { libc::kill(run.id() as i32, libc::SIGTERM) };
            let _ = run.wait();
        }
    }
}

/// `diff --live JOB`: a PyTorch job whose data loader starts sleeping 15 ms per batch
/// halfway through: its last steps against its first name the loader's line first,
/// slower, by the 15 ms slept.
#[test]
fn diff_live_names_what_slowed_a_running_job_since_it_started() {
    if !common::python_with(&["torch"]) {
        return;
    }
    let dir = scratch_dir("agent-diff-live");
    let agent = Agent::start(&dir, &[]);
    let program = common::repo_root().join("tests/record/diff_program.py");
    let timings = dir.join("timings");
    let run = record(
        &agent.socket,
        "slows",
        &dir.join("session"),
        Path::new(&common::python()),
        &[
            program.to_str().unwrap(),
            "slows",
            "--log",
            timings.to_str().unwrap(),
        ],
    );
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success());
    // Every step the job ran is in the agent, whose period search has run since.
    agent.top_until(PATIENCE, |top| {
        job(top, "slows").is_some_and(|j| {
            j["ended"] == true
                && j["steps"]["search_pending"] == false
                && j["steps"]["count"].as_u64() >= Some(60)
        })
    });
    let out = agent.opscope(&["diff", "--live", "slows", "--format", "json"]);
    assert_ok(&out, "diff --live");
    let diff: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Two seconds of steps, under twice the minute: halves.
    let part = diff["sides"][0]["part"].as_str().unwrap();
    assert!(part.contains("first half"), "{part}");
    assert_eq!(
        diff["sides"][1]["step_numbers"].as_array().unwrap().len(),
        30
    );
    assert_eq!(diff["breakdown"][0]["verdict"], "slower");
    let first = &diff["host"][0];
    let path = first["path"].as_str().unwrap();
    assert!(path.contains("DataLoader"), "first: {path}");
    assert_eq!(first["verdict"], "slower");
    // Against the program's own clock around `next(loader)`, half against half: under
    // load the change is more than the 15 ms slept (a late wake-up, collating on cold
    // caches), and the halves ran at different moments of the machine's load.
    let change = first["change_ns"].as_f64().unwrap();
    let own = common::diff_program_timings(&timings);
    assert_eq!(own.len(), 60);
    let half = |h: &[(f64, f64)]| common::median(h.iter().map(|t| t.0));
    let own_change = half(&own[30..]) - half(&own[..30]);
    assert!(
        own_change >= 0.95 * 15e6,
        "the program's own change: {own_change} ns"
    );
    assert!(
        (change - own_change).abs() <= 0.05 * 15e6,
        "{path} changed by {change} ns; by the program's own clock, {own_change} ns"
    );
    let text = agent.opscope(&["diff", "--live", "slows"]);
    assert_ok(&text, "diff --live as text");
    assert!(String::from_utf8_lossy(&text.stdout).contains("A: job slows"));
}
