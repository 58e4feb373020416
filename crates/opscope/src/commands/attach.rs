//! `opscope attach PID`: a running Python process's stacks read from outside it
//! (`opscope-stacks`), without stopping or changing it — sampled for a while into a
//! session directory, or printed once (`--dump`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use opscope_agent::triggers;
use opscope_stacks::{PythonProcess, ThreadStack};

use crate::record::stacks::{self, Sample, Sampled};

#[derive(clap::Args)]
#[command(
    about = "Sample a running Python process's stacks from outside it (no restart, no change to it)",
    long_about = "Reads a running CPython process's threads and the Python stack of each \
                  from outside the process, as py-spy does: the target goes on running. \
                  By default samples them RATE times a second for --duration (or until \
                  Ctrl-C) into a session directory that every command reads (`flame`, \
                  `stats code`, `view`); `--dump` prints them once. Needs the right to read \
                  its memory (its user with kernel.yama.ptrace_scope 0 or as its parent, \
                  root, or CAP_SYS_PTRACE). CPython 3.11 to 3.13.",
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
    let mut tree = Tree::new(args.pid)?;
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
    let kineto = match args.kineto {
        true => ask_kineto(args.pid, args.duration),
        false => None,
    };
    tree.sample(args.duration, args.rate);
    let file = dir.join(format!("opscope-attach-{}.pftrace", args.pid));
    let sampled: Vec<Sampled> = tree.processes.into_iter().map(|p| p.sampled).collect();
    stacks::write(&sampled, &file)?;
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
    eprintln!(
        "opscope: {} Python process{} from {}: {samples} samples of {threads} threads over {:.1} s written to {}",
        sampled.len(),
        if sampled.len() == 1 { "" } else { "es" },
        args.pid,
        tree.sampled_for.as_secs_f64(),
        dir.display()
    );
    if tree.failed > 0 {
        eprintln!(
            "opscope: {} of {} reads failed (frames changing while read) and were left out",
            tree.failed,
            samples + tree.failed
        );
    }
    if let Some(asking) = kineto {
        collect_kineto(asking, args.duration, &dir)?;
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

/// Waits for the traces Kineto was asked for and moves them into the session.
fn collect_kineto(asking: Asking, duration: Duration, dir: &std::path::Path) -> Result<()> {
    let asked = asking
        .join()
        .map_err(|_| anyhow::anyhow!("the Kineto request thread failed"))??;
    if asked.is_empty() {
        eprintln!(
            "opscope: no process of the tree asked for a Kineto trace within {} s",
            KINETO_GRACE.as_secs().max(duration.as_secs())
        );
        return Ok(());
    }
    let written =
        crate::record::kineto_ipc::collect(&asked, Instant::now() + duration + KINETO_GRACE);
    for file in &written {
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

/// One Python process of the tree being sampled.
struct Sampling {
    process: PythonProcess,
    sampled: Sampled,
    /// It has exited: no more reads.
    gone: bool,
}

/// The Python processes of a process tree: the root and its descendants (DataLoader
/// workers, ranks under a launcher), found again every second as they come and go.
struct Tree {
    root: i32,
    processes: Vec<Sampling>,
    /// Pids looked at that are no Python this reader knows (a shell, a C++ helper).
    other: hashbrown::HashSet<i32>,
    failed: usize,
    sampled_for: Duration,
}

impl Tree {
    /// The tree under `root`; refused where none of it is a Python process to read.
    fn new(root: i32) -> Result<Tree> {
        let mut tree = Tree {
            root,
            processes: Vec::new(),
            other: hashbrown::HashSet::new(),
            failed: 0,
            sampled_for: Duration::ZERO,
        };
        // The root's own reason stands when nothing below it is Python either.
        let root_error = match PythonProcess::open(root) {
            Ok(process) => {
                tree.add(root, process);
                None
            }
            Err(e) => {
                tree.other.insert(root);
                Some(e)
            }
        };
        tree.find_new();
        match root_error {
            Some(e) if tree.processes.is_empty() => Err(e.into()),
            _ => Ok(tree),
        }
    }

    fn add(&mut self, pid: i32, process: PythonProcess) {
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|n| n.trim().to_string())
            .unwrap_or_default();
        self.processes.push(Sampling {
            process,
            sampled: Sampled {
                pid,
                name,
                samples: Vec::new(),
                interval_ns: 0,
            },
            gone: false,
        });
    }

    /// Opens the descendants not looked at yet.
    fn find_new(&mut self) {
        let mut below: Vec<i32> = crate::record::sampler::process_tree(self.root)
            .into_iter()
            .collect();
        below.sort_unstable();
        for pid in below {
            if self.other.contains(&pid) || self.processes.iter().any(|p| p.sampled.pid == pid) {
                continue;
            }
            match PythonProcess::open(pid) {
                Ok(process) => self.add(pid, process),
                Err(_) => {
                    self.other.insert(pid);
                }
            }
        }
    }

    /// Reads every process's stacks `rate` times a second until `duration` has passed,
    /// every process has ended, or a stop signal comes.
    fn sample(&mut self, duration: Duration, rate: u32) {
        for signal in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
            unsafe { libc::signal(signal, on_stop as *const () as libc::sighandler_t) };
        }
        let interval = Duration::from_secs(1) / rate;
        for p in &mut self.processes {
            p.sampled.interval_ns = interval.as_nanos() as i64;
        }
        let began = Instant::now();
        let mut next = began;
        let mut looked = began;
        // Each wait is the interval times a random factor in [0.5, 1.5): a fixed
        // period locks onto a loop whose period is a multiple of it and sees the same
        // few points of it every time. (A sample stands for the time until the next
        // one, so random waits leave the shares unbiased.)
        let mut jitter = Jitter::new();
        while began.elapsed() < duration && !STOP.load(Ordering::Relaxed) {
            if looked.elapsed() >= Duration::from_secs(1) {
                self.find_new();
                for p in &mut self.processes {
                    p.sampled.interval_ns = interval.as_nanos() as i64;
                }
                looked = Instant::now();
            }
            for p in self.processes.iter_mut().filter(|p| !p.gone) {
                let ts = crate::record::sampler::monotonic_ns();
                match p.process.stacks() {
                    Ok(threads) => p.sampled.samples.push(Sample { ts, threads }),
                    // The process has ended: what was read stands.
                    Err(_)
                        if !std::path::Path::new(&format!("/proc/{}", p.sampled.pid)).exists() =>
                    {
                        p.gone = true
                    }
                    Err(_) => self.failed += 1,
                }
            }
            if self.processes.iter().all(|p| p.gone) {
                break;
            }
            next += interval.mul_f64(0.5 + jitter.next());
            // Behind (a slow read): the next sample at once, not a burst to catch up.
            match next.checked_duration_since(Instant::now()) {
                Some(wait) => std::thread::sleep(wait),
                None => next = Instant::now(),
            }
        }
        self.sampled_for = began.elapsed();
    }
}

/// xorshift64*: random enough to break a sampler's phase lock, with no dependency.
struct Jitter(u64);

impl Jitter {
    fn new() -> Jitter {
        let seed =
            crate::record::sampler::monotonic_ns() as u64 ^ u64::from(std::process::id()) << 32;
        Jitter(seed | 1)
    }

    /// A number in [0, 1).
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
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
