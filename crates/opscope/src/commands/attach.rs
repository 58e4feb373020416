//! `opscope attach PID`: a running Python process's stacks read from outside it
//! (`opscope-stacks`), without stopping or changing it — sampled for a while into a
//! session directory, or printed once (`--dump`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use opscope_agent::triggers;
use opscope_stacks::{PythonProcess, ThreadStack};

use crate::record::observer;
use crate::record::stack_sampler::Tree;
use crate::record::stacks::{self, Sampled};

#[derive(clap::Args)]
#[command(
    about = "Sample a running process's Python and native stacks from outside it (no restart, no change to it)",
    long_about = "Reads a running CPython process's threads and the Python stack of each \
                  from outside the process, as py-spy does: the target goes on running. \
                  By default samples them RATE times a second for --duration (or until \
                  Ctrl-C) into a session directory that every command reads (`flame`, \
                  `stats code`, `view`); `--dump` prints them once. Needs the right to read \
                  its memory (its user with kernel.yama.ptrace_scope 0 or as its parent, \
                  root, or CAP_SYS_PTRACE). CPython 3.9 to 3.13. Where the kernel allows \
                  (root, CAP_PERFMON or kernel.perf_event_paranoid ≤ 1) each thread's native \
                  stack too, merged in place of the interpreter's eval loop (--no-native: \
                  Python only); a process with no Python gets its native stacks alone.",
    after_help = "Examples:\n  opscope attach 4242 --duration 30s -o train-stacks && opscope flame train-stacks\n  opscope attach 4242 --dump\n  opscope attach 4242 --dump --format json"
)]
pub struct Args {
    /// The process id.
    pid: i32,
    /// Print each thread's stack once, innermost frame first, and exit.
    #[arg(long)]
    dump: bool,
    /// With --dump: text, or json (one object per thread).
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    format: String,
    /// How long to sample (e.g. 30s, 2m); Ctrl-C stops sooner, keeping what was read.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = triggers::parse_duration)]
    duration: Duration,
    /// Samples a second.
    #[arg(long, value_name = "HZ", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    rate: u32,
    /// The session directory to write [default: opscope-attach-PID].
    #[arg(short, long, value_name = "DIR")]
    output: Option<PathBuf>,
    /// Also have PyTorch's own profiler (Kineto) trace each process of the tree for the
    /// --duration, as dynolog would ask it: works in processes started with
    /// KINETO_USE_DAEMON=1, which poll for it every 5 s (their traces land in the
    /// session).
    #[arg(long)]
    kineto: bool,
    /// Sample Python stacks only: no native (C, C++) frames from the kernel's sampler
    /// (which needs perf_event_paranoid ≤ 1, CAP_PERFMON or root).
    #[arg(long)]
    no_native: bool,
    /// The job's name, as the agent (`opscope top`) shows it [default: what the
    /// process's environment says (SLURM_JOB_ID, TORCHELASTIC_RUN_ID, …), else the
    /// session directory].
    #[arg(long, value_name = "NAME")]
    job: Option<String>,
    /// Join the agent at this socket [default: the running agent, if any], so that
    /// `opscope top` lists the process while it is sampled.
    #[arg(long, value_name = "PATH")]
    agent: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<()> {
    if args.dump {
        let process = PythonProcess::open(args.pid)?;
        let stacks = process
            .stacks()
            .with_context(|| format!("reading the stacks of process {}", args.pid))?;
        let mut out = std::io::stdout().lock();
        if args.format == "json" {
            serde_json::to_writer_pretty(&mut out, &stacks)?;
            use std::io::Write;
            writeln!(out)?;
        } else {
            print_text(&mut out, args.pid, process.version(), &stacks)?;
        }
        return Ok(());
    }
    let tree = Tree::new(args.pid, !args.no_native)?;
    let dir = args
        .output
        .unwrap_or_else(|| PathBuf::from(format!("opscope-attach-{}", args.pid)));
    if dir.exists() && std::fs::read_dir(&dir)?.next().is_some() {
        bail!(
            "{}: not empty; give a new or empty directory with -o",
            dir.display()
        );
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let session = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
    let joined = observer::join(
        args.agent.as_deref(),
        args.pid,
        args.job.as_deref(),
        &session,
    );
    if let Some(joined) = &joined {
        eprintln!(
            "opscope: joined the agent as job {} (opscope top)",
            joined.job
        );
    }
    let tree = tree.with_live(joined);
    let sampling = Sampling {
        pid: args.pid,
        duration: Some(args.duration),
        rate: args.rate,
        kineto: args.kineto,
    };
    sample_into(tree, &sampling, &dir)
}

/// How to sample a running tree.
pub struct Sampling {
    pub pid: i32,
    /// `None`: until the tree has ended or a stop signal comes.
    pub duration: Option<Duration>,
    pub rate: u32,
    pub kineto: bool,
}

/// Samples `tree` into the session directory `dir` (which exists), and says what was
/// written.
pub fn sample_into(mut tree: Tree, sampling: &Sampling, dir: &std::path::Path) -> Result<()> {
    let kineto_for = sampling.duration.unwrap_or(Duration::from_secs(10));
    let kineto = match sampling.kineto {
        true => ask_kineto(sampling.pid, kineto_for),
        false => None,
    };
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(signal, on_stop as *const () as libc::sighandler_t) };
    }
    // Kineto traces its window when its process next polls (every 5 s): the stacks are
    // sampled until that window has ended too, so that both cover it.
    let began = Instant::now();
    let kineto = kineto.map(|asking| {
        std::thread::spawn(move || {
            let asked = asking
                .join()
                .map_err(|_| anyhow::anyhow!("the Kineto request thread failed"))
                .and_then(|a| a);
            // Kineto writes its trace when its window ends (which starts a while after
            // it asked): sampled until then.
            let written = match &asked {
                Ok(a) if !a.is_empty() => crate::record::kineto_ipc::collect(
                    a,
                    Instant::now() + kineto_for + KINETO_GRACE,
                ),
                _ => {
                    // Product behaviour (the window asked for), not a test's wait.
                    while !STOP.load(Ordering::Relaxed) {
                        match (began + kineto_for).checked_duration_since(Instant::now()) {
                            Some(left) => std::thread::sleep(left.min(Duration::from_millis(50))),
                            None => break,
                        }
                    }
                    Vec::new()
                }
            };
            STOP.store(true, Ordering::Relaxed);
            asked.map(|a| (a, written))
        })
    });
    let limit = if kineto.is_some() {
        None
    } else {
        sampling.duration
    };
    tree.sample(limit, sampling.rate, &STOP);
    let (failed, sampled_for) = (tree.failed, tree.sampled_for);
    let file = dir.join(format!("opscope-attach-{}.pftrace", sampling.pid));
    let recorded = tree.into_sampled();
    stacks::write(&recorded, &file)?;
    if let Some(why) = &recorded.native_refused {
        eprintln!("opscope: no native stacks: {why}");
    }
    let sampled: &[Sampled] = &recorded.python;
    let samples: usize = sampled.iter().map(|p| p.samples.len()).sum();
    let threads: usize = sampled
        .iter()
        .map(|p| {
            p.samples
                .iter()
                .flat_map(|s| s.threads.iter().map(|t| t.native_thread_id))
                .collect::<hashbrown::HashSet<u64>>()
                .len()
        })
        .sum();
    let python = match sampled.len() {
        0 => format!("process {} (no Python)", sampling.pid),
        1 => format!(
            "1 Python process from {}: {samples} samples of {threads} threads",
            sampling.pid
        ),
        n => format!(
            "{n} Python processes from {}: {samples} samples of {threads} threads",
            sampling.pid
        ),
    };
    eprintln!(
        "opscope: {python} over {:.1} s written to {}",
        sampled_for.as_secs_f64(),
        dir.display()
    );
    if let Some(native) = recorded.native.as_ref().filter(|n| !n.samples.is_empty()) {
        let threads: hashbrown::HashSet<i32> = native.samples.iter().map(|s| s.tid).collect();
        let lost = match native.lost {
            0 => String::new(),
            n => format!(" ({n} dropped by the kernel: its buffers were full)"),
        };
        eprintln!(
            "opscope: {} native stacks of {} threads{}{lost}",
            native.samples.len(),
            threads.len(),
            if sampled.is_empty() {
                ""
            } else {
                ", merged with the Python ones"
            }
        );
    }
    if failed > 0 {
        eprintln!(
            "opscope: {failed} of {} reads failed (frames changing while read) and were left out",
            samples + failed
        );
    }
    if let Some(watcher) = kineto {
        let (asked, written) = watcher
            .join()
            .map_err(|_| anyhow::anyhow!("the Kineto request thread failed"))??;
        collect_kineto(&asked, &written, kineto_for, dir)?;
    }
    Ok(())
}

/// How long Kineto's processes may take to ask (they poll every 5 s by default) and
/// to write what they traced.
const KINETO_GRACE: Duration = Duration::from_secs(12);

type Asking = std::thread::JoinHandle<Result<Vec<crate::record::kineto_ipc::Asked>>>;

/// Serves Kineto's requests from the tree below `root` on a thread of its own, while
/// the stacks are sampled; `None`, said, where no process of the tree polls for them.
fn ask_kineto(root: i32, duration: Duration) -> Option<Asking> {
    let tree = move || {
        let mut tree = crate::record::sampler::process_tree(root);
        tree.insert(root);
        tree
    };
    let expected = crate::record::kineto_ipc::polling(&tree()).len();
    if expected == 0 {
        eprintln!(
            "opscope: --kineto: no process of the tree was started with KINETO_USE_DAEMON=1, \
             so none asks for a Kineto trace; sampling stacks only"
        );
        return None;
    }
    // Where Kineto may write on-demand traces: its KINETO_ONDEMAND_TRACE_DIR, else /tmp.
    let dir = std::fs::read(format!("/proc/{root}/environ"))
        .ok()
        .and_then(|env| {
            env.split(|&b| b == 0)
                .find_map(|v| v.strip_prefix(b"KINETO_ONDEMAND_TRACE_DIR="))
                .map(|d| PathBuf::from(String::from_utf8_lossy(d).into_owned()))
        })
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let token = format!(
        "{}-{}",
        std::process::id(),
        crate::record::sampler::monotonic_ns()
    );
    let until = Instant::now() + duration.max(KINETO_GRACE);
    Some(std::thread::spawn(move || {
        crate::record::kineto_ipc::serve(tree, expected, duration, &dir, &token, until)
    }))
}

/// Moves the traces Kineto wrote into the session, and says so.
fn collect_kineto(
    asked: &[crate::record::kineto_ipc::Asked],
    written: &[PathBuf],
    duration: Duration,
    dir: &std::path::Path,
) -> Result<()> {
    if asked.is_empty() {
        eprintln!(
            "opscope: no process of the tree asked for a Kineto trace within {} s",
            KINETO_GRACE.as_secs().max(duration.as_secs())
        );
        return Ok(());
    }
    for file in written {
        let to = dir.join(file.file_name().unwrap_or_default());
        if std::fs::rename(file, &to).is_err() {
            std::fs::copy(file, &to).with_context(|| format!("copying {}", file.display()))?;
            let _ = std::fs::remove_file(file);
        }
    }
    eprintln!(
        "opscope: Kineto traced {} of {} processes asked ({})",
        written.len(),
        asked.len(),
        asked
            .iter()
            .map(|a| a.pid.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

/// Set by SIGINT or SIGTERM: sampling stops and what was read is written.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn print_text(
    out: &mut impl std::io::Write,
    pid: i32,
    version: &str,
    stacks: &[ThreadStack],
) -> Result<()> {
    writeln!(
        out,
        "process {pid}: Python {version}, {} threads",
        stacks.len()
    )?;
    for t in stacks {
        writeln!(
            out,
            "\nthread {}{}",
            t.native_thread_id,
            match (t.active, t.holds_gil) {
                (true, true) => " (active, holds the GIL)",
                (true, false) => " (active)",
                (false, true) => " (idle, holds the GIL)",
                (false, false) => " (idle)",
            }
        )?;
        for f in &t.frames {
            let line = f.line.map_or_else(|| "?".to_string(), |l| l.to_string());
            writeln!(out, "    {} ({}:{line})", f.qualname, f.filename)?;
        }
    }
    Ok(())
}
