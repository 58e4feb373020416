//! Recording sessions: start the program with the injection environment (the injected
//! library as ITT collector and NVTX injection, a Python bootstrap), forward signals,
//! sample its process tree, pass its exit status through, and summarise the session.

mod bootstrap;
mod embedded;
pub(crate) mod kineto_ipc;
pub(crate) mod observer;
pub(crate) mod sampler;
mod signals;
pub(crate) mod stack_sampler;
pub(crate) mod stacks;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use opscope_analysis::op_stats::{op_stats, OpStatsOptions};
use opscope_analysis::steps::StepSource;
use opscope_wire::env;

use opscope_analysis::report::{Column, Table, Value};
use opscope_engine::render::write_table;

/// The injected library's file name.
pub const LIBRARY: &str = "libopscope_record.so";
/// Names the injected library explicitly (tests, installed layouts).
pub const LIBRARY_ENV: &str = env::RECORD_LIB;
/// Where the injected library writes (see `opscope_record::session`).
const SESSION_DIR_ENV: &str = env::SESSION_DIR;

pub struct Options {
    pub output: Option<PathBuf>,
    pub python: bool,
    /// Also name the library as CUDA injection (`CUDA_INJECTION64_PATH`): CUPTI.
    pub cupti: bool,
    pub sample_ms: u64,
    /// Python stack samples a second (0: none).
    pub stacks_hz: u32,
    /// Native stacks too, where the kernel allows.
    pub native: bool,
    pub quiet: bool,
    /// The job's name for the agent [default: what the environment says].
    pub job: Option<String>,
    /// The agent to stream to [default: the running one, if any].
    pub agent: Option<PathBuf>,
    pub live_only: bool,
    pub command: Vec<OsString>,
}

/// What makes a process recorded: the variables `record` starts the program with and
/// `opscope env` prints.
pub struct Environment {
    pub library: PathBuf,
    pub session: PathBuf,
    pub python: bool,
    pub cupti: bool,
    /// The agent's socket, to stream to as well.
    pub agent: Option<PathBuf>,
    pub job: Option<String>,
    /// Stream to the agent only, write no files.
    pub live_only: bool,
}

impl Environment {
    /// The variables, in the order to set them (the Python bootstrap is installed in
    /// the session directory).
    pub fn variables(&self) -> Result<Vec<(&'static str, OsString)>> {
        let mut vars: Vec<(&'static str, OsString)> = vec![
            ("INTEL_LIBITTNOTIFY64", self.library.clone().into()),
            ("NVTX_INJECTION64_PATH", self.library.clone().into()),
            (SESSION_DIR_ENV, self.session.clone().into()),
        ];
        if self.cupti {
            // The bootstrap then leaves TensorFlow's and JAX's profilers off: on GPU
            // builds they would take CUPTI over (one subscriber per process).
            vars.push(("CUDA_INJECTION64_PATH", self.library.clone().into()));
            vars.push((env::CUPTI, "1".into()));
        }
        if self.python {
            let site = bootstrap::install(&self.session)?;
            let mut path = OsString::from(site.as_os_str());
            if let Some(existing) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
                path.push(":");
                path.push(existing);
            }
            vars.push(("PYTHONPATH", path));
        }
        if let Some(agent) = &self.agent {
            vars.push((env::AGENT, agent.clone().into()));
            if self.live_only {
                vars.push((env::LIVE_ONLY, "1".into()));
            }
        }
        if let Some(job) = &self.job {
            vars.push((env::JOB, job.into()));
        }
        Ok(vars)
    }
}

/// The agent's socket when an agent answers on it (this user's, else the system's).
pub fn running_agent() -> Option<PathBuf> {
    let path = opscope_agent::protocol::find_socket(None)?;
    std::os::unix::net::UnixStream::connect(&path).ok()?;
    Some(path)
}

pub fn run(options: &Options) -> Result<u8> {
    let library = find_library()?;
    let (program, args) = options
        .command
        .split_first()
        .context("no command to record (give it after `--`)")?;
    let session = Session::create(options.output.as_deref())?;
    let dir = session.dir.clone();

    let agent = options.agent.clone().or_else(running_agent);
    if options.live_only && agent.is_none() {
        bail!("--live-only needs an agent: none is running (start `opscope agent`, or name one with --agent)");
    }
    let environment = Environment {
        library: library.clone(),
        session: dir.clone(),
        python: options.python,
        cupti: options.cupti,
        agent,
        job: options.job.clone(),
        live_only: options.live_only,
    };
    let mut command = Command::new(program);
    command.args(args);
    for (name, value) in environment.variables()? {
        command.env(name, value);
    }

    // One recording at a time in a process (the Python module can be asked for two):
    // the signal forwarding and the subreaper flag are the process's.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let _subreaper = signals::become_subreaper();
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot run {}", program.to_string_lossy()))?;
    let session = session.started();
    let forwarding = signals::forward_to(child.id() as i32);
    let sampler =
        (options.sample_ms > 0).then(|| sampler::start(child.id() as i32, options.sample_ms));
    let stacks = (options.stacks_hz > 0 && !options.live_only).then(|| {
        // Where an agent runs, the sampled stacks go live too: the program's recorder
        // streams its ops, and this sampler, outside it, its hot functions and stacks
        // (the agent lists the program once, by its own entry).
        let live = environment.agent.as_deref().and_then(|agent| {
            observer::join(Some(agent), child.id() as i32, options.job.as_deref(), &dir)
        });
        stack_sampler::Background::start(child.id() as i32, options.stacks_hz, options.native, live)
    });
    let status = child.wait().context("waiting for the program")?;
    drop(forwarding);
    let mut lost = Vec::new();
    if let Some(stacks) = stacks {
        let sampled = stacks.finish().into_sampled();
        let path = dir.join(format!("opscope-stacks-{}.pftrace", std::process::id()));
        if let Some(why) = sampled.native_refused.as_ref().filter(|_| !options.quiet) {
            eprintln!("opscope: no native stacks: {why}");
        }
        if !sampled.is_empty() {
            if let Err(e) = self::stacks::write(&sampled, &path) {
                let _ = std::fs::remove_file(&path);
                lost.push(format!("the stack samples ({}: {e:#})", path.display()));
            }
        }
    }
    if let Some(sampler) = sampler {
        let path = dir.join(format!("opscope-processes-{}.pftrace", std::process::id()));
        if let Err(e) = sampler.finish(&path) {
            // A full disk must not cost the program's exit status or the rest of the
            // session: say what is missing and drop the partial file.
            let _ = std::fs::remove_file(&path);
            lost.push(format!("the process samples ({}: {e:#})", path.display()));
        }
    }
    drop(session);

    // What was lost is an error: said even with --quiet.
    for what in &lost {
        eprintln!("opscope: lost {what}");
    }
    if !options.quiet {
        if let Some(ending) = abnormal_ending(status) {
            eprintln!("opscope: {ending}");
        }
        let aside = stepped_aside(&dir);
        if !aside.is_empty() {
            let list: Vec<String> = aside
                .iter()
                .map(|(what, n, places)| {
                    let mut notes = Vec::new();
                    if *n > 1 {
                        notes.push(format!("{n} times"));
                    }
                    match places.len() {
                        0 => {}
                        1 => notes.push(format!("its profile in {}", places[0])),
                        _ => notes.push(format!("its profiles in {}", places.join(", "))),
                    }
                    match notes.is_empty() {
                        true => what.clone(),
                        false => format!("{what} ({})", notes.join("; ")),
                    }
                })
                .collect();
            eprintln!(
                "opscope: the program ran its own profiler, and opscope's framework hooks \
                 stepped aside for it (ITT, NVTX and process samples went on): {}",
                list.join(", ")
            );
        }
        summarise(&dir, options.cupti);
    }
    Ok(exit_code(status))
}

/// `record --pid PID`: a process already running, sampled from outside (its Python
/// stacks, its CPU, memory and threads) into a session until it ends or a stop signal.
pub fn run_attached(options: &Options, pid: i32) -> Result<u8> {
    let tree = stack_sampler::Tree::new(pid, options.native)?;
    let session = Session::create(options.output.as_deref())?.started();
    let dir = session.dir.clone();
    let sampler = (options.sample_ms > 0).then(|| sampler::start(pid, options.sample_ms));
    if !options.quiet {
        eprintln!(
            "opscope: recording process {pid} and those below it into {} until it ends (Ctrl-C stops)",
            dir.display()
        );
    }
    let joined = observer::join(options.agent.as_deref(), pid, options.job.as_deref(), &dir);
    if let Some(joined) = joined.as_ref().filter(|_| !options.quiet) {
        eprintln!(
            "opscope: joined the agent as job {} (opscope top)",
            joined.job
        );
    }
    let tree = tree.with_live(joined);
    let sampling = crate::commands::attach::Sampling {
        pid,
        duration: None,
        rate: options.stacks_hz.max(1),
        kineto: false,
    };
    crate::commands::attach::sample_into(tree, &sampling, &dir)?;
    if let Some(sampler) = sampler {
        let path = dir.join(format!("opscope-processes-{}.pftrace", std::process::id()));
        if let Err(e) = sampler.finish(&path) {
            let _ = std::fs::remove_file(&path);
            eprintln!(
                "opscope: lost the process samples ({}: {e:#})",
                path.display()
            );
        }
    }
    if !options.quiet {
        summarise(&dir, false);
    }
    Ok(0)
}

/// The session directory while the program starts: removed again if it cannot start,
/// so a typo in the command leaves nothing behind.
struct Session {
    dir: PathBuf,
    /// Remove `dir` when dropped: opscope made it and the program never ran.
    remove: bool,
}

impl Session {
    fn create(output: Option<&Path>) -> Result<Session> {
        let (dir, made) = session_dir(output)?;
        let session = Session {
            dir: PathBuf::new(),
            remove: made,
        };
        let dir = dir
            .canonicalize()
            .with_context(|| format!("{}: cannot resolve", dir.display()))?;
        Ok(Session { dir, ..session })
    }

    /// The program runs: the session is kept, whatever happens next.
    fn started(mut self) -> Self {
        self.remove = false;
        self
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.remove && !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// How the program ended, when it did not exit with status 0, as a user would want
/// to be told it (the status itself still becomes opscope's).
fn abnormal_ending(status: std::process::ExitStatus) -> Option<String> {
    use std::os::unix::process::ExitStatusExt;
    if let Some(signal) = status.signal() {
        let core = if status.core_dumped() {
            " (core dumped)"
        } else {
            ""
        };
        return Some(format!(
            "the program was killed by {}{core}",
            signal_name(signal)
        ));
    }
    match status.code() {
        Some(0) | None => None,
        Some(code) => Some(format!("the program exited with status {code}")),
    }
}

fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {signal}"),
    };
    name.to_string()
}

/// The program's status as ours: its exit code, or 128 + the signal that ended it (as
/// shells report it).
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => (128 + signal) as u8,
        _ => 1,
    }
}

/// The injected library: named by `OPSCOPE_RECORD_LIB`, or beside the `opscope`
/// executable (where cargo builds it), or in `../lib` of it (an installed layout), or
/// else the copy this binary carries, written once into the user's cache.
pub fn find_library() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os(LIBRARY_ENV) {
        let path = PathBuf::from(path);
        if !path.is_file() {
            bail!("{LIBRARY_ENV}={}: no such file", path.display());
        }
        return Ok(path.canonicalize()?);
    }
    // Run from the Python module, the executable is the interpreter: what lies beside
    // it is not this build's.
    if opscope_engine::cache::runs_from_a_library() {
        if let Some(library) = embedded::library() {
            return library;
        }
    }
    let exe = std::env::current_exe().context("cannot locate the opscope executable")?;
    let dir = exe
        .parent()
        .context("the opscope executable has no directory")?;
    let candidates = [
        dir.join(LIBRARY),
        dir.join("..").join(LIBRARY),
        dir.join("../lib").join(LIBRARY),
    ];
    for c in &candidates {
        if c.is_file() {
            return Ok(c.canonicalize()?);
        }
    }
    if let Some(library) = embedded::library() {
        return library;
    }
    bail!(
        "cannot find {LIBRARY}, the library opscope injects into the program (looked in {}); \
         build it with `cargo build --release` in the opscope workspace, or name it with {LIBRARY_ENV}",
        dir.display()
    )
}

/// The session directory and whether opscope made it: `output` (created, or an empty
/// directory; one that holds anything else is refused, since the session would mix
/// with it and no longer read as one trace), or the first free `opscope-session[-N]`
/// here.
fn session_dir(output: Option<&Path>) -> Result<(PathBuf, bool)> {
    if let Some(dir) = output {
        match std::fs::create_dir(dir) {
            Ok(()) => return Ok((dir.to_path_buf(), true)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("{}: cannot create", dir.display()))?;
                return Ok((dir.to_path_buf(), true));
            }
            Err(e) => return Err(e).with_context(|| format!("{}: cannot create", dir.display())),
        }
        if !dir.is_dir() {
            bail!("{}: exists and is not a directory", dir.display());
        }
        let mut entries = std::fs::read_dir(dir)
            .with_context(|| format!("{}: cannot list", dir.display()))?
            .filter_map(|e| e.ok());
        if let Some(entry) = entries.next() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let what = if name.starts_with("opscope-") || name == ".opscope" {
                "already holds a recording"
            } else {
                "is not empty"
            };
            bail!(
                "{}: {what} (it holds {:?}); give a new or empty -o DIR (sessions are never \
                 mixed with other files or overwritten)",
                dir.display(),
                entry.file_name()
            );
        }
        return Ok((dir.to_path_buf(), false));
    }
    for n in 1..10_000 {
        let dir = match n {
            1 => PathBuf::from("opscope-session"),
            n => PathBuf::from(format!("opscope-session-{n}")),
        };
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok((dir, true)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("{}: cannot create", dir.display())),
        }
    }
    bail!("too many opscope-session directories here; give -o DIR")
}

/// What the bootstrap stepped aside for (`.opscope/aside-PID.txt`: one line a time,
/// framework, profiler and, where the program named it, the directory of its profile),
/// counted by profiler in the order first seen, with the directories.
fn stepped_aside(dir: &Path) -> Vec<(String, usize, Vec<String>)> {
    let mut counted: Vec<(String, usize, Vec<String>)> = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir.join(".opscope")) else {
        return counted;
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("aside-"))
        })
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for line in text.lines() {
            let mut fields = line.split('\t');
            let what = fields.nth(1).unwrap_or(line).to_string();
            let place = fields.next().filter(|p| !p.is_empty()).map(str::to_string);
            let entry = match counted.iter().position(|(w, ..)| *w == what) {
                Some(at) => {
                    counted[at].1 += 1;
                    &mut counted[at]
                }
                None => {
                    counted.push((what, 1, Vec::new()));
                    counted.last_mut().expect("pushed")
                }
            };
            if let Some(place) = place.filter(|p| !entry.2.contains(p)) {
                entry.2.push(place);
            }
        }
    }
    counted
}

/// Prints where the session is, what it holds and its top ops (to stderr: stdout is
/// the program's); with `cupti`, says so when no GPU work was recorded.
fn summarise(dir: &Path, cupti: bool) {
    let trace = match opscope_engine::load::load(
        &[dir.to_path_buf()],
        // Saved in the model cache: the user's next command is likely on this session.
        &opscope_engine::load::LoadOptions {
            quiet: true,
            cache: true,
            partial: false,
        },
    ) {
        Ok(t) => t,
        Err(e) => {
            eprintln!(
                "opscope: session in {} (could not read it back: {e:#})",
                dir.display()
            );
            return;
        }
    };
    // The sampler's file and the library's describe the same processes: count pids.
    let processes = trace
        .processes
        .iter()
        .filter(|p| p.device.is_none())
        .map(|p| p.pid)
        .collect::<std::collections::HashSet<_>>()
        .len();
    let count =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let stacks = match trace.samples.len() {
        0 => String::new(),
        n => format!(", {}", count(n, "stack sample", "stack samples")),
    };
    eprintln!(
        "opscope: session in {} — {}, {}, {}, {}{stacks}",
        dir.display(),
        count(trace.sources.len(), "file", "files"),
        count(processes, "process", "processes"),
        count(trace.slices.len(), "slice", "slices"),
        count(
            trace.counters.value.len(),
            "counter sample",
            "counter samples"
        ),
    );
    let gpu_work = trace.tracks.iter().enumerate().any(|(t, track)| {
        track.kind == opscope_model::TrackKind::GpuStream
            && !trace
                .track_slices(opscope_model::TrackId(t as u32))
                .is_empty()
    });
    if cupti && !gpu_work {
        // CUDA loads CUPTI, and so opscope's library, only in a process that initialises
        // it: a CPU run records nothing on the GPU, and silence would read as a failure.
        eprintln!(
            "--cupti: no kernel, copy or memset was recorded: the program did not run CUDA \
             work (a CPU run, or CUDA was never initialised in the processes recorded)"
        );
    }
    if trace.slices.is_empty() {
        // Nothing the program ran was of a kind opscope hooks: say what it records, so
        // that "0 slices" is not taken for a failure.
        eprintln!(
            "nothing to time in the program's code: opscope records the ops of PyTorch, \
             TensorFlow and JAX (and Keras on them), oneDNN primitives, CUDA work (--cupti), \
             and NVTX and ITT ranges; this program used none of them. Its processes' CPU, \
             memory and threads were sampled: opscope info {}",
            dir.display()
        );
        if !trace.samples.is_empty() {
            eprintln!(
                "its Python stacks were sampled: opscope stats hot {}",
                dir.display()
            );
        }
        return;
    }
    // Steps are no ops: step markers (ProfilerStep#N, `step N` ranges, also one that is
    // no step) and the bootstrap's marks (category `opscope`: the framework's step
    // calls) get a line of their own, and the table shows the ops inside them.
    let cx = opscope_analysis::Context::new(&trace);
    let steps = opscope_analysis::steps::steps(&cx, &Default::default());
    let mut markers: std::collections::HashSet<&str> = steps
        .iter()
        .filter(|s| s.found_by == StepSource::Markers)
        .flat_map(|s| s.steps.iter().map(|step| step.name.as_str()))
        .collect();
    let ours = trace.strings.find("opscope");
    let sl = &trace.slices;
    for i in 0..sl.len() {
        if sl.kind(i) == opscope_model::SliceKind::Step || Some(sl.category[i]) == ours {
            markers.insert(trace.str(sl.name[i]));
        }
    }
    if let Some(line) = opscope_analysis::steps::headline(&steps) {
        let mut text = Vec::new();
        let mut report = opscope_analysis::report::Report::default();
        report.line(line);
        let _ =
            opscope_engine::render::write_report(&report, crate::output::text_width(), &mut text);
        eprint!("{}", String::from_utf8_lossy(&text));
    }
    let compiling = compile_time(&trace);
    if compiling > 0 {
        eprintln!(
            "compilation: {} in which some thread compiled (XLA, JAX's tracing; apart from \
             the ops)",
            opscope_engine::render::duration_text(compiling as f64)
        );
    }
    let table = top_ops(&cx, &markers, 10);
    if !table.rows.is_empty() {
        eprintln!("top ops by total time:");
        let _ = write_table(&table, &mut std::io::stderr(), crate::output::text_width());
        eprintln!("more: opscope stats op {}", dir.display());
    }
}

/// The time in which some thread compiled: the union of the compilation slices. Not
/// their sum over threads: XLA's pool thread waits in its compile slice for the code
/// generation threads', so a sum counted that time twice (7.7 s of "CPU time" in a
/// run of 3 s on 2 cores).
fn compile_time(trace: &opscope_model::Trace) -> i64 {
    use opscope_model::SliceKind;
    let s = &trace.slices;
    let spans = (0..s.len())
        .filter(|&i| s.kind(i) == SliceKind::Compile)
        .map(|i| (s.ts[i], s.end(i)))
        .collect();
    opscope_analysis::intervals::IntervalSet::from_spans(spans).total()
}

/// The `n` ops with the most CPU time, as `opscope stats op` counts them.
fn top_ops(
    cx: &opscope_analysis::Context,
    markers: &std::collections::HashSet<&str>,
    n: usize,
) -> Table {
    let mut ops = op_stats(cx, &OpStatsOptions::default());
    ops.retain(|op| !markers.contains(op.name.as_str()));
    ops.sort_by(|a, b| b.cpu_ns.cmp(&a.cpu_ns).then_with(|| a.name.cmp(&b.name)));
    let mut table = Table::new(vec![
        Column::text("op"),
        Column::numeric("calls"),
        Column::numeric("total"),
        Column::numeric("mean"),
    ]);
    for op in ops.into_iter().take(n) {
        table.rows.push(vec![
            Value::Text(op.name),
            Value::Count(op.occurrence as i64),
            Value::Duration(op.cpu_ns as f64),
            Value::Duration(op.cpu_ns as f64 / op.occurrence.max(1) as f64),
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    /// Compilation on two threads at once counts once: the pool thread's
    /// `backend_compile` (0–100 µs) waits for the codegen thread's pass (20–80 µs),
    /// then a second compile (200–230 µs): 130 µs, not 190.
    #[test]
    fn compilation_is_the_time_some_thread_compiled() {
        let json = r#"[
            {"ph":"X","name":"backend_compile","pid":1,"tid":1,"ts":0,"dur":100},
            {"ph":"X","name":"CpuCompiler::RunBackend","pid":1,"tid":2,"ts":20,"dur":60},
            {"ph":"X","name":"backend_compile","pid":1,"tid":1,"ts":200,"dur":30}
        ]"#;
        let mut trace = opscope_model::Trace::new();
        opscope_formats::chrome::import(json.as_bytes(), "t.json", &mut trace).unwrap();
        assert_eq!(super::compile_time(&trace), 130_000);
    }
}
