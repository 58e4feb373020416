//! The Python stacks of a process tree sampled from outside it (`opscope-stacks`):
//! the root and its descendants (DataLoader workers, ranks under a launcher), found
//! again as they come and go, read at a jittered rate until told to stop. `attach`
//! runs it on a running job; `record` on a thread beside the program it started.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use opscope_stacks::PythonProcess;

use super::stacks::{Sample, Sampled};

/// How often the tree is looked at again for new processes, once it has settled
/// (DataLoader workers of a short epoch live for a few tenths of a second); a program
/// just started is looked at sooner (its interpreter maps its library and starts its
/// workers in its first moments).
const RESCAN: Duration = Duration::from_millis(100);
const FIRST_RESCAN: Duration = Duration::from_millis(10);
/// How many looks a process that is no Python this reader knows gets: one just
/// started may not have mapped its interpreter yet.
const LOOKS: u32 = 4;

/// One Python process of the tree being sampled.
struct Sampling {
    process: PythonProcess,
    sampled: Sampled,
    /// It has exited: no more reads.
    gone: bool,
}

/// The Python processes of a process tree and what was read of them.
pub struct Tree {
    root: i32,
    processes: Vec<Sampling>,
    /// Pids that are no Python this reader knows (a shell, a C++ helper), with the
    /// looks each had.
    other: hashbrown::HashMap<i32, u32>,
    /// Reads that failed (frames changing while read) and were left out.
    pub failed: usize,
    pub sampled_for: Duration,
    /// A program just started: its Python may come later, so that none running is no
    /// reason to stop.
    starting: bool,
}

impl Tree {
    /// The tree under `root`; refused where none of it is a Python process to read.
    pub fn new(root: i32) -> Result<Tree> {
        let mut tree = Tree::empty(root);
        // The root's own reason stands when nothing below it is Python either.
        let root_error = match PythonProcess::open(root) {
            Ok(process) => {
                tree.add(root, process);
                None
            }
            Err(e) => {
                tree.other.insert(root, LOOKS);
                Some(e)
            }
        };
        tree.find_new();
        match root_error {
            Some(e) if tree.processes.is_empty() => Err(e.into()),
            _ => Ok(tree),
        }
    }

    /// The tree under a program just started, whose Python processes may not be
    /// readable yet: they are looked for while sampling.
    pub fn starting(root: i32) -> Tree {
        Tree {
            starting: true,
            ..Tree::empty(root)
        }
    }

    fn empty(root: i32) -> Tree {
        Tree {
            root,
            processes: Vec::new(),
            other: hashbrown::HashMap::new(),
            failed: 0,
            sampled_for: Duration::ZERO,
            starting: false,
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

    /// Opens the processes of the tree not read yet.
    fn find_new(&mut self) {
        let mut all: Vec<i32> = super::sampler::process_tree(self.root)
            .into_iter()
            .chain([self.root])
            .collect();
        all.sort_unstable();
        all.dedup();
        for pid in all {
            let looks = self.other.get(&pid).copied().unwrap_or(0);
            if looks >= LOOKS || self.processes.iter().any(|p| p.sampled.pid == pid) {
                continue;
            }
            match PythonProcess::open(pid) {
                Ok(process) => {
                    self.other.remove(&pid);
                    self.add(pid, process)
                }
                Err(_) => {
                    self.other.insert(pid, looks + 1);
                }
            }
        }
    }

    /// Reads every process's stacks `rate` times a second until `duration` has passed
    /// (`None`: no limit), every process read has ended (unless the tree is
    /// [`Tree::starting`]) or `stop` is set.
    pub fn sample(&mut self, duration: Option<Duration>, rate: u32, stop: &AtomicBool) {
        let interval = Duration::from_secs(1) / rate;
        let began = Instant::now();
        let mut next = began;
        let mut looked = began;
        let mut rescan = FIRST_RESCAN;
        // Each wait is the interval times a random factor in [0.5, 1.5): a fixed
        // period locks onto a loop whose period is a multiple of it and sees the same
        // few points of it every time. (A sample stands for the time until the next
        // one, so random waits leave the shares unbiased.)
        let mut jitter = Jitter::new();
        let over = |began: Instant| duration.is_some_and(|d| began.elapsed() >= d);
        while !over(began) && !stop.load(Ordering::Relaxed) {
            if looked.elapsed() >= rescan {
                self.find_new();
                looked = Instant::now();
                rescan = (rescan * 2).min(RESCAN);
            }
            for p in self.processes.iter_mut().filter(|p| !p.gone) {
                p.sampled.interval_ns = interval.as_nanos() as i64;
                let before = super::sampler::monotonic_ns();
                // A reader's bug must cost one sample, not the session's stacks.
                let read =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.process.stacks()));
                // The middle of the read (first reads of a function's strings take a
                // while): what ran then, beside the ops recorded in the process.
                let ts = before + (super::sampler::monotonic_ns() - before) / 2;
                // A failed read (frames changing faster than they could be read, most
                // often in deep, busy stacks) is kept as lost time: counted for the
                // next sample's stack, it would favour the stacks that read easily.
                let lost = Sample {
                    ts,
                    threads: Vec::new(),
                    lost: true,
                };
                match read {
                    Ok(Ok(threads)) => p.sampled.samples.push(Sample {
                        ts,
                        threads,
                        lost: false,
                    }),
                    // The process has ended: what was read stands.
                    Ok(Err(_)) if !Path::new(&format!("/proc/{}", p.sampled.pid)).exists() => {
                        p.gone = true
                    }
                    Ok(Err(_)) | Err(_) => {
                        self.failed += 1;
                        p.sampled.samples.push(lost);
                    }
                }
            }
            // Attached: done once all it read have ended. (A program that `record`
            // started may start more Python later: sampled until it ends.)
            let all_gone = !self.processes.is_empty() && self.processes.iter().all(|p| p.gone);
            if all_gone && !self.starting {
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

    /// What was read, by process.
    pub fn into_sampled(self) -> Vec<Sampled> {
        self.processes.into_iter().map(|p| p.sampled).collect()
    }
}

/// A tree sampled on a thread of its own until [`Background::finish`].
pub struct Background {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Tree>,
}

impl Background {
    /// Samples the tree under `root`, a program just started, `rate` times a second.
    pub fn start(root: i32, rate: u32) -> Background {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut tree = Tree::starting(root);
            tree.sample(None, rate, &flag);
            tree
        });
        Background { stop, thread }
    }

    /// Stops sampling and gives what was read.
    pub fn finish(self) -> Tree {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_else(|_| Tree::empty(0))
    }
}

/// xorshift64*: random enough to break a sampler's phase lock, with no dependency.
struct Jitter(u64);

impl Jitter {
    fn new() -> Jitter {
        let seed = super::sampler::monotonic_ns() as u64 ^ u64::from(std::process::id()) << 32;
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
