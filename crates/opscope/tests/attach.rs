//! `opscope attach PID --dump` against py-spy, on programs written for the check: the
//! stacks read from outside a running CPython are py-spy's, frame by frame and line by
//! line; the GIL's holder is the busy thread; what is no Python process says so.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{python, python_with, repo_root};
use serde_json::Value;

/// A program of `tests/record` running under `interpreter`, killed when dropped.
struct Running(Child);

impl Running {
    /// Starts `command` and waits for the first line it prints (`ready …`), which it
    /// gives with the program; the rest of its output stays to read.
    fn spawn(mut command: Command) -> (Running, String) {
        // A group of its own, so that what it starts (a multiprocessing Manager, which
        // outlived its parent's SIGKILL) goes with it.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        (Running(child), line)
    }

    /// `script` under `interpreter`, once it has said `ready`.
    fn start(interpreter: &Path, script: &str) -> Running {
        let mut command = Command::new(interpreter);
        command.arg(repo_root().join("tests/record").join(script));
        let (program, line) = Running::spawn(command);
        assert_eq!(
            line.trim(),
            "ready",
            "{script} under {}",
            interpreter.display()
        );
        program
    }

    fn pid(&self) -> String {
        self.0.id().to_string()
    }

    /// SIGTERM, and waits for it to exit.
    fn terminate(mut self) {
        // SAFETY: kill(2) on our own child's pid, which we have not yet waited for.
        assert_eq!(unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) }, 0);
        self.0.wait().unwrap();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group our child leads when `spawn` started it
        // (its pid); the child itself is not waited for yet.
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs opscope with `args`.
fn opscope<A: AsRef<std::ffi::OsStr>>(args: &[A]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_opscope"))
        .args(args)
        .output()
        .unwrap()
}

/// Runs opscope with `args`, which must succeed; what it said on stderr.
fn opscope_ok<A: AsRef<std::ffi::OsStr>>(args: &[A]) -> String {
    let out = opscope(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

/// A session's stacks as folded lines (`convert --to folded`): CPU time, of the
/// threads that ran.
fn folded(session: &Path) -> String {
    folded_with(session, &[])
}

fn folded_with(session: &Path, extra: &[&str]) -> String {
    let file = session.with_extension("folded");
    let mut args = vec!["convert", "--to", "folded", "-f", "-o"];
    args.extend([file.to_str().unwrap(), session.to_str().unwrap()]);
    args.extend(extra);
    opscope_ok(&args);
    std::fs::read_to_string(file).unwrap()
}

/// `attach PID --duration DURATION -o SESSION` and `extra`, which must succeed; what
/// it said on stderr.
fn sample(pid: &str, duration: &str, session: &Path, extra: &[&str]) -> String {
    let mut args: Vec<&std::ffi::OsStr> = ["attach", pid, "--duration", duration]
        .into_iter()
        .chain(extra.iter().copied())
        .map(std::ffi::OsStr::new)
        .collect();
    args.extend(["-o".as_ref(), session.as_os_str()]);
    opscope_ok(&args)
}

fn attach(pid: &str) -> std::process::Output {
    opscope(&["attach", pid, "--dump", "--format", "json"])
}

/// A frame as both tools print it: function name, file, line.
type FrameKey = (String, String, i64);

/// A thread: its kernel thread id, its frames innermost first, whether it held the GIL
/// (py-spy's `owns_gil`, ours `holds_gil`), whether it was running (both: `active`).
type ThreadKey = (u64, Vec<FrameKey>, bool, bool);

/// The threads of a JSON dump, sorted by kernel thread id, read with each tool's names
/// for the thread id and the GIL.
fn threads(json: &[u8], tid: &str, gil: &str) -> Vec<ThreadKey> {
    let threads: Value = serde_json::from_slice(json).unwrap();
    let mut threads: Vec<ThreadKey> = threads
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let frames = t["frames"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| {
                    (
                        f["name"].as_str().unwrap().to_string(),
                        f["filename"].as_str().unwrap().to_string(),
                        f["line"].as_i64().unwrap_or(-1),
                    )
                })
                .collect();
            (
                t[tid].as_u64().unwrap(),
                frames,
                t[gil].as_bool().unwrap(),
                t["active"].as_bool().unwrap(),
            )
        })
        .collect();
    threads.sort_by_key(|t| t.0);
    threads
}

fn ours(pid: &str) -> Vec<ThreadKey> {
    let out = attach(pid);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    threads(&out.stdout, "native_thread_id", "holds_gil")
}

fn py_spy_dump(py_spy: &Path, pid: &str) -> Vec<ThreadKey> {
    let out = Command::new(py_spy)
        .args(["dump", "--json", "--pid", pid])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "py-spy: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    threads(&out.stdout, "os_thread_id", "owns_gil")
}

/// The CPythons to check: the tests' own (3.11 on CI), the system's (Debian's, built
/// without libpython: the runtime is in the executable), and pyenv's 3.11, 3.12 and
/// 3.13 where this machine has them.
fn interpreters() -> Vec<PathBuf> {
    let own = Command::new(python())
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    let mut found = vec![PathBuf::from(String::from_utf8(own.stdout).unwrap().trim())];
    let system = PathBuf::from("/usr/bin/python3");
    let version = Command::new(&system)
        .args(["-c", "import sys; print(sys.version_info[:2] >= (3, 9))"])
        .output();
    if version.is_ok_and(|v| v.stdout.starts_with(b"True")) {
        found.push(system);
    }
    let home = std::env::var("HOME").unwrap_or_default();
    if let Ok(dir) = std::fs::read_dir(Path::new(&home).join(".pyenv/versions")) {
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            for minor in ["3.9", "3.10", "3.11", "3.12", "3.13"] {
                let exe = entry.path().join("bin").join(format!("python{minor}"));
                if name.starts_with(&format!("{minor}.")) && exe.exists() {
                    found.push(exe);
                }
            }
        }
    }
    found
}

/// Each thread's stack, as py-spy reads it, for every CPython at hand: the main thread
/// waiting in `threading.Event.wait` under two functions of the program, a worker in
/// `time.sleep` three calls below `threading`'s bootstrap.
#[test]
fn stacks_of_a_running_program_are_py_spys() {
    if !python_with(&["threading"]) {
        return;
    }
    let py_spy = Path::new(&python()).with_file_name("py-spy");
    assert!(
        py_spy.exists(),
        "py-spy (tests/requirements.txt) beside {}",
        python()
    );
    let mut checked = Vec::new();
    for interpreter in interpreters() {
        let program = Running::start(&interpreter, "stacks_known.py");
        let pid = program.pid();
        // After `ready` the main thread is on its way into `Event.wait`: read until it
        // is there (a condition, not a time).
        let deadline = Instant::now() + Duration::from_secs(60);
        let stacks = loop {
            let stacks = ours(&pid);
            let main = stacks.iter().find(|t| t.0.to_string() == pid);
            if main.is_some_and(|t| t.1.first().is_some_and(|f| f.0 == "wait")) {
                break stacks;
            }
            assert!(Instant::now() < deadline, "{stacks:?}");
            std::thread::sleep(Duration::from_millis(50));
        };
        let theirs = py_spy_dump(&py_spy, &pid);
        assert_eq!(stacks, theirs, "{}", interpreter.display());
        let worker = stacks.iter().find(|t| t.0.to_string() != pid).unwrap();
        let names: Vec<&str> = worker.1.iter().take(3).map(|f| f.0.as_str()).collect();
        assert_eq!(names, ["leaf_sleeper", "middle", "run"]);
        // Nobody holds the GIL or runs while both threads wait.
        assert!(stacks.iter().all(|t| !t.2 && !t.3), "{stacks:?}");
        checked.push(interpreter.display().to_string());
    }
    eprintln!("attach --dump equals py-spy dump under {checked:?}");
}

/// A busy single-threaded loop holds the GIL and runs when read (most of the time:
/// read until it does), under `heavy` or `light` called from the module.
#[test]
fn the_busy_thread_holds_the_gil() {
    if !python_with(&["threading"]) {
        return;
    }
    for interpreter in interpreters() {
        let program = Running::start(&interpreter, "stacks_busy.py");
        let pid = program.pid();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let stacks = ours(&pid);
            assert_eq!(stacks.len(), 1, "{stacks:?}");
            let frames = &stacks[0].1;
            assert!(
                frames.len() == 2 && ["heavy", "light"].contains(&frames[0].0.as_str()),
                "{frames:?}"
            );
            assert_eq!(frames[1].0, "<module>");
            if stacks[0].2 && stacks[0].3 {
                break;
            }
            assert!(Instant::now() < deadline, "never seen holding the GIL");
        }
    }
}

/// What is no CPython, or no process, is refused with the reason.
#[test]
fn what_is_no_python_process_is_refused_clearly() {
    let sleeper = Command::new("sleep").arg("600").spawn().unwrap();
    let guard = Running(sleeper);
    let out = attach(&guard.pid());
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no Python interpreter found"), "{stderr}");
    let out = attach("999999999");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("process 999999999"), "{stderr}");
    // Sampling it for Python stacks only is refused the same way, before any
    // directory is made (with native stacks it is sampled: the dataflow test).
    let scratch = common::scratch_dir("attach-refused");
    let out = Command::new(env!("CARGO_BIN_EXE_opscope"))
        .args(["attach", &guard.pid(), "--duration", "1s", "--no-native"])
        .current_dir(&scratch)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no Python interpreter found"));
    assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0);
}

/// Each hot function's share of the samples: the leaf frames of `convert --to folded`
/// (ours) or of py-spy's raw output, by function name, in percent of all the time.
fn leaf_shares(folded: &str, name_of: impl Fn(&str) -> Option<&str>) -> Vec<(String, f64)> {
    let mut by: std::collections::BTreeMap<String, f64> = Default::default();
    let mut all = 0.0;
    for line in folded.lines() {
        let Some((stack, weight)) = line.rsplit_once(' ') else {
            continue;
        };
        let weight: f64 = weight.parse().unwrap();
        all += weight;
        // The innermost Python frame: native frames (opscope's, where the kernel
        // allows them) stand under it, and py-spy's shares here are Python's.
        let mut frames = stack.rsplit(';');
        let innermost = frames.clone().next().unwrap();
        let leaf = frames.find(|f| f.contains(".py:")).unwrap_or(innermost);
        if let Some(name) = name_of(leaf).filter(|n| ["heavy", "light", "native"].contains(n)) {
            *by.entry(name.to_string()).or_default() += weight;
        }
    }
    by.into_iter().map(|(k, v)| (k, 100.0 * v / all)).collect()
}

/// One sampling of `stacks_hot.py` by both tools at once (10 s at 400 Hz), with the
/// program's own timing of its functions: (ours, py-spy's, the program's).
type Shares = Vec<(String, f64)>;

fn sample_hot_program(py_spy: &Path, scratch: &Path) -> (Shares, Shares, Shares) {
    let own = scratch.join("own.json");
    let mut command = Command::new(python());
    command
        .arg(repo_root().join("tests/record/stacks_hot.py"))
        .arg(&own);
    let (program, _) = Running::spawn(command);
    let pid = program.pid();
    let raw = scratch.join("py-spy.raw");
    let theirs = Command::new(py_spy)
        .args([
            "record",
            "--nonblocking",
            "--format",
            "raw",
            "--rate",
            "400",
        ])
        .args(["--duration", "10", "--pid", &pid, "--output"])
        .arg(&raw)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let session = scratch.join("session");
    sample(&pid, "10s", &session, &["--rate", "400"]);
    assert!(theirs.wait_with_output().unwrap().status.success());
    // SIGTERM: the program writes its own shares and exits.
    program.terminate();
    let ours = leaf_shares(&folded(&session), |leaf| leaf.split_once(' ').map(|x| x.0));
    let theirs = leaf_shares(&std::fs::read_to_string(&raw).unwrap(), |leaf| {
        leaf.split_once(' ').map(|x| x.0)
    });
    let own: Value = serde_json::from_str(&std::fs::read_to_string(&own).unwrap()).unwrap();
    let own = own
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_f64().unwrap()))
        .collect();
    (ours, theirs, own)
}

fn within(a: &Shares, b: &Shares, points: f64) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.0 == y.0 && (x.1 - y.1).abs() <= points)
}

/// Sampled for 10 s beside py-spy, a program's three hot functions (two in Python, one
/// C call) get the shares py-spy gives them, and the program's own timing of them,
/// within 3 points. Two samplers of 4,000 samples each differ by about 1 point (one
/// standard error): a second sampling is allowed when the first differs from py-spy's,
/// never from the program's own.
#[test]
fn sampled_shares_are_py_spys_and_the_programs_own() {
    if !python_with(&["hashlib"]) {
        return;
    }
    let py_spy = Path::new(&python()).with_file_name("py-spy");
    let scratch = common::scratch_dir("attach-shares");
    let mut tries = Vec::new();
    for _ in 0..2 {
        let _ = std::fs::remove_dir_all(scratch.join("session"));
        let (ours, theirs, own) = sample_hot_program(&py_spy, &scratch);
        assert!(
            within(&ours, &own, 3.0),
            "ours {ours:?}, the program's {own:?}"
        );
        assert!(
            ours.iter().any(|(k, v)| k == "heavy" && *v > 40.0),
            "{ours:?}"
        );
        let agrees = within(&ours, &theirs, 3.0);
        tries.push((ours, theirs));
        if agrees {
            return;
        }
    }
    panic!("ours against py-spy's, twice: {tries:?}");
}

/// Attached to a parent, the sampler reads its worker processes too: each worker's
/// samples are its own process's, spinning in `work`.
#[test]
fn the_tree_below_the_process_is_sampled() {
    if !python_with(&["multiprocessing"]) {
        return;
    }
    let mut command = Command::new(python());
    command.arg(repo_root().join("tests/record/stacks_pool.py"));
    let (program, line) = Running::spawn(command);
    let workers: Vec<String> = line.split_whitespace().skip(1).map(String::from).collect();
    assert_eq!(workers.len(), 2, "{line}");
    let scratch = common::scratch_dir("attach-tree");
    let session = scratch.join("session");
    let pid = program.pid();
    sample(&pid, "2s", &session, &[]);
    let (folded, wall) = (folded(&session), folded_with(&session, &["--wall"]));
    for pid in &workers {
        let spinning = folded.lines().any(|l| {
            l.starts_with(&format!("python (pid {pid});")) && l.contains(";work (stacks_pool.py:")
        });
        assert!(spinning, "worker {pid} not seen in `work`:\n{folded}");
    }
    // The parent waits in `pool.map` the whole time: idle, so in wall time only.
    let parent = format!("python (pid {});", program.pid());
    assert!(wall.lines().any(|l| l.starts_with(&parent)), "{wall}");
    assert!(!folded.lines().any(|l| l.starts_with(&parent)), "{folded}");
}

/// A PyTorch training loop written for the check, attached to while it trains (started
/// without opscope): it prints the same output and exits 0 as it does alone, and the
/// session holds its training stack, `train_step` under `<module>`.
#[test]
fn a_pytorch_job_attached_to_runs_as_it_does_alone() {
    if !python_with(&["torch"]) {
        return;
    }
    let script = repo_root().join("tests/record/attach_torch.py");
    let alone = Command::new(python()).arg(&script).output().unwrap();
    assert!(
        alone.status.success(),
        "{}",
        String::from_utf8_lossy(&alone.stderr)
    );

    let mut child = Command::new(python())
        .arg(&script)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let scratch = common::scratch_dir("attach-torch");
    let session = scratch.join("session");
    sample(&child.id().to_string(), "1s", &session, &[]);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(
        format!("{first}{rest}"),
        String::from_utf8_lossy(&alone.stdout),
        "the job's output with opscope attached"
    );
    let folded = folded(&session);
    assert!(
        folded
            .lines()
            .any(|l| l.contains(";<module> (attach_torch.py:") && l.contains(";train_step (")),
        "{folded}"
    );
}

/// `--kineto`: a PyTorch job started with `KINETO_USE_DAEMON=1` asks opscope, as it
/// would ask dynolog, and its own profiler's trace of the training (its `aten::` ops,
/// over about the second asked for) lands in the session beside the sampled stacks; a
/// job started without it is said to be unable to, and the stacks are sampled alone.
#[test]
fn kineto_traces_a_job_that_polls_for_it() {
    if !python_with(&["torch"]) {
        return;
    }
    let script = repo_root().join("tests/record/attach_torch.py");
    let start = |daemon: bool| {
        let mut command = Command::new(python());
        command.arg(&script).arg("100000");
        if daemon {
            command.env("KINETO_USE_DAEMON", "1");
        }
        Running::spawn(command).0
    };
    let scratch = common::scratch_dir("attach-kineto");
    let job = start(true);
    let session = scratch.join("polling");
    let stderr = sample(&job.pid(), "1s", &session, &["--kineto"]);
    assert!(stderr.contains("Kineto traced 1 of 1"), "{stderr}");
    drop(job);
    let kineto: Vec<PathBuf> = std::fs::read_dir(&session)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    assert_eq!(kineto.len(), 1, "{kineto:?}");
    let trace: Value = serde_json::from_slice(&std::fs::read(&kineto[0]).unwrap()).unwrap();
    let ops: Vec<&Value> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "cpu_op")
        .collect();
    assert!(
        ops.iter().any(|e| e["name"] == "aten::mm"),
        "no training ops in {}",
        kineto[0].display()
    );
    let ts = |e: &&Value| e["ts"].as_f64().unwrap();
    let span_ms = (ops.iter().map(ts).fold(f64::MIN, f64::max)
        - ops.iter().map(ts).fold(f64::MAX, f64::min))
        / 1000.0;
    assert!(
        span_ms > 0.0 && span_ms <= 2000.0,
        "{span_ms} ms of ops for a 1 s trace"
    );
    // The session reads as one: the stacks and Kineto's trace.
    let info = opscope(&["info".as_ref(), session.as_os_str()]);
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(
        info.contains("opscope-attach-") && info.contains("opscope-kineto-"),
        "{info}"
    );
    // One process, not one per file: the samples sit on the threads of Kineto's ops,
    // so its ops come under the sampled Python frames that ran them.
    let info = opscope(&[
        "info".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        session.as_os_str(),
    ]);
    let info: Value = serde_json::from_slice(&info.stdout).unwrap();
    let named = info["process_names"].as_array().unwrap();
    // (Kineto's own pseudo-processes, `Spans`, `Traces`, have pids of their own.)
    let python = named
        .iter()
        .filter(|n| n.as_str().unwrap().starts_with("python (pid"))
        .count();
    assert_eq!(python, 1, "{named:?}");
    let stacks = folded(&session);
    assert!(
        stacks
            .lines()
            .any(|l| l.contains(";train_step (") && l.contains(";aten::")),
        "{stacks}"
    );

    let job = start(false);
    let stderr = sample(
        &job.pid(),
        "1s",
        &scratch.join("not-polling"),
        &["--kineto"],
    );
    assert!(stderr.contains("KINETO_USE_DAEMON=1"), "{stderr}");
}

/// A program with no Python (the dataflow example, Rust) attached to: its native
/// stacks alone, unwound through its own frames as its code calls them (every sample
/// in `matmul` under `Op::apply` under the worker loop), named from its symbols.
#[test]
fn a_program_without_python_is_sampled_natively() {
    let mut program = Command::new(common::built("dataflow"))
        .args(["--steps", "100000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = program.id().to_string();
    let scratch = common::scratch_dir("attach-native");
    let session = scratch.join("session");
    let said = sample(&pid, "3s", &session, &[]);
    // SAFETY: kill(2) on our own child's pid, which we have not yet waited for.
    unsafe { libc::kill(program.id() as i32, libc::SIGKILL) };
    program.wait().unwrap();
    if said.contains("no native stacks either") {
        assert!(
            std::env::var_os("CI").is_none(),
            "native stacks refused in CI: {said}"
        );
        eprintln!("skipped: {said}");
        return;
    }
    assert!(said.contains("sampling its native stacks only"), "{said}");
    let stacks = folded(&session);
    let mut in_matmul = 0;
    for line in stacks.lines() {
        let (stack, _) = line.rsplit_once(' ').unwrap();
        let frames: Vec<&str> = stack.split(';').collect();
        if frames
            .last()
            .unwrap()
            .starts_with("dataflow::ops::matmul (")
        {
            in_matmul += 1;
            let n = frames.len();
            assert!(
                frames[n - 2].starts_with("dataflow::ops::Op::apply (")
                    && frames
                        .iter()
                        .any(|f| f.starts_with("dataflow::exec::worker (")),
                "{stack}"
            );
        }
    }
    assert!(in_matmul > 0, "no sample in matmul:\n{stacks}");
}

/// A thread that waits on a condition with a 0.5 ms timeout wakes, and reads as
/// running, many times a second; py-spy calls such waits idle by name (its running
/// samples of this program: `busy` 100 %). So does opscope: `Condition.wait` has no
/// share of the running time (it had 7 %), `busy` nearly all of it.
#[test]
fn a_thread_polling_a_condition_is_idle() {
    let program = Running::start(Path::new(&python()), "stacks_waiting.py");
    let scratch = common::scratch_dir("attach-waiting");
    let session = scratch.join("session");
    sample(&program.pid(), "2s", &session, &["--no-native"]);
    let out = opscope(&[
        "stats",
        "hot",
        "--format",
        "json",
        session.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hot: Value = serde_json::from_slice(&out.stdout).unwrap();
    let share = |name: &str| {
        hot["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["function"] == name)
            .map_or(0.0, |f| f["self_pct"].as_f64().unwrap())
    };
    assert!(share("Condition.wait") < 1.0, "{hot:#}");
    assert!(share("busy") > 95.0, "{hot:#}");
}
