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

use super::stacks::{Recorded, Sample, Sampled};
use native::Native;

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
    native: Native,
    /// The agent this tree's job joined, told its hot functions every second.
    live: Option<Live>,
}

/// What goes to the agent: each innermost Python function's running time since the
/// last report, and the samples themselves (its flight recorder keeps them for
/// `dump`; native stacks stay in the session).
struct Live {
    joined: super::observer::Joined,
    since: Instant,
    by: hashbrown::HashMap<(String, String), u64>,
    samples: Vec<Sampled>,
}

impl Live {
    /// How often the agent hears: `top` refreshes every second.
    const EVERY: Duration = Duration::from_secs(1);

    fn add(&mut self, of: &Sampled, sample: &Sample, interval: Duration) {
        match self.samples.iter_mut().find(|s| s.pid == of.pid) {
            Some(s) => s.samples.push(sample.clone()),
            None => self.samples.push(Sampled {
                pid: of.pid,
                name: of.name.clone(),
                samples: vec![sample.clone()],
                interval_ns: interval.as_nanos() as i64,
            }),
        }
        for t in sample.threads.iter().filter(|t| t.active) {
            if let Some(f) = t.frames.first() {
                *self
                    .by
                    .entry((f.qualname.clone(), f.filename.clone()))
                    .or_default() += interval.as_nanos() as u64;
            }
        }
    }

    /// Sends what was added once a second has passed; false once the agent is gone.
    fn report(&mut self) -> bool {
        if self.since.elapsed() < Live::EVERY {
            return true;
        }
        self.since = Instant::now();
        let functions: Vec<(String, String, u64)> = self
            .by
            .drain()
            .map(|((function, file), ns)| (function, file, ns))
            .collect();
        let recorded = Recorded {
            python: std::mem::take(&mut self.samples),
            ..Recorded::default()
        };
        let sent_samples = recorded.python.is_empty()
            || match super::stacks::to_bytes(&recorded, Path::new("opscope-attach-live")) {
                Ok(packets) => self.joined.send_chunk(&packets),
                Err(_) => true,
            };
        self.joined.send_hot(&functions) && sent_samples
    }
}

impl Tree {
    /// The tree under `root`, its native stacks sampled too if `native`; refused
    /// where none of it is a Python process to read, unless its native stacks can be
    /// (a C++ program, a Python this reader does not know): then those alone.
    pub fn new(root: i32, native: bool) -> Result<Tree> {
        let mut tree = Tree::empty(root).with_native(native);
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
            Some(e) if tree.processes.is_empty() => {
                use opscope_stacks::Error;
                let no_python = matches!(e, Error::NotPython { .. } | Error::Unsupported { .. });
                if !(native && no_python) {
                    return Err(e.into());
                }
                match native::probe(root) {
                    Ok(()) => {
                        eprintln!("opscope: {e}: sampling its native stacks only");
                        Ok(tree)
                    }
                    Err(why) => Err(anyhow::anyhow!("{e}; and no native stacks either: {why}")),
                }
            }
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
            native: Native::default(),
            live: None,
        }
    }

    /// Tells the agent `joined` this tree's hot functions while it is sampled; the
    /// job leaves the agent's live jobs when sampling ends.
    pub fn with_live(mut self, joined: Option<super::observer::Joined>) -> Tree {
        self.live = joined.map(|joined| Live {
            joined,
            since: Instant::now(),
            by: hashbrown::HashMap::new(),
            samples: Vec::new(),
        });
        self
    }

    /// Also samples native stacks (where the kernel allows: see
    /// [`Recorded::native_refused`]).
    pub fn with_native(mut self, on: bool) -> Tree {
        self.native.wanted = on;
        self
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

    /// Opens the processes of the tree not read yet, and the native sampler's new
    /// threads.
    fn find_new(&mut self) {
        let mut all: Vec<i32> = super::sampler::process_tree(self.root)
            .into_iter()
            .chain([self.root])
            .collect();
        all.sort_unstable();
        all.dedup();
        self.native.follow(&all);
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
        self.native.start(rate);
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
                // When the read began: each thread's stack is of the moment its frame
                // was found, `read_after_ns` later (the read's middle, taken before,
                // put 5 % of a fresh program's samples in the op after or before theirs).
                let ts = before;
                // A failed read (frames changing faster than they could be read, most
                // often in deep, busy stacks) is kept as lost time: counted for the
                // next sample's stack, it would favour the stacks that read easily.
                let lost = Sample {
                    ts,
                    threads: Vec::new(),
                    lost: true,
                };
                match read {
                    Ok(Ok(threads)) => {
                        let sample = Sample {
                            ts,
                            threads,
                            lost: false,
                        };
                        if let Some(live) = self.live.as_mut() {
                            live.add(&p.sampled, &sample, interval);
                        }
                        p.sampled.samples.push(sample)
                    }
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
            self.native.drain();
            if self.live.as_mut().is_some_and(|live| !live.report()) {
                self.live = None;
            }
            // Attached: done once all it read have ended (or, natively sampled only,
            // the root). A program that `record` started may start more Python later:
            // sampled until it ends.
            let all_gone = match self.processes.is_empty() {
                false => self.processes.iter().all(|p| p.gone),
                true => {
                    self.native.active() && !Path::new(&format!("/proc/{}", self.root)).exists()
                }
            };
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

    /// What was read: the Python stacks by process, and the native samples.
    pub fn into_sampled(self) -> Recorded {
        let (native, native_refused) = self.native.finish();
        Recorded {
            python: self.processes.into_iter().map(|p| p.sampled).collect(),
            native,
            native_refused,
        }
    }
}

/// A tree sampled on a thread of its own until [`Background::finish`].
pub struct Background {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Tree>,
}

impl Background {
    /// Samples the tree under `root`, a program just started, `rate` times a second
    /// (and its native stacks, if `native`).
    pub fn start(
        root: i32,
        rate: u32,
        native: bool,
        live: Option<super::observer::Joined>,
    ) -> Background {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut tree = Tree::starting(root).with_native(native).with_live(live);
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

/// The native sampler of the tree, where wanted and allowed.
mod native {
    use opscope_stacks::native::{NativeSampler, NativeSamples, Refused};

    /// Whether the kernel lets this process sample `pid`'s threads.
    pub fn probe(pid: i32) -> Result<(), Refused> {
        NativeSampler::new(1).follow(pid)
    }

    pub fn native_rate(rate: u32) -> u32 {
        rate.saturating_mul(4).clamp(rate, 1000)
    }

    #[derive(Default)]
    pub struct Native {
        pub wanted: bool,
        sampler: Option<NativeSampler>,
        /// Why native stacks are off (or stopped following new threads).
        refused: Option<String>,
        /// The sampler stopped following new threads.
        full: bool,
    }

    impl Native {
        /// The kernel samples each thread several times per Python read (up to
        /// 1 kHz): a Python stack takes the native frames of the sample nearest to it,
        /// and the nearer, the less often the two straddle a call.
        pub fn start(&mut self, rate: u32) {
            if self.wanted && self.sampler.is_none() && self.refused.is_none() {
                self.sampler = Some(NativeSampler::new(native_rate(rate)));
            }
        }

        pub fn active(&self) -> bool {
            self.sampler.is_some()
        }

        pub fn follow(&mut self, pids: &[i32]) {
            let Some(sampler) = self.sampler.as_mut() else {
                return;
            };
            sampler.retain_processes(pids);
            if self.full {
                return;
            }
            for &pid in pids {
                if let Err(e) = sampler.follow(pid) {
                    self.refused = Some(e.to_string());
                    self.full = true;
                    let never = matches!(e, Refused::Permission(..) | Refused::Unsupported(_));
                    if never && sampler.is_empty() {
                        self.sampler = None;
                    }
                    return;
                }
            }
        }

        pub fn drain(&mut self) {
            if let Some(sampler) = self.sampler.as_mut() {
                // An unwinder's bug must cost the native stacks, not the session.
                let drained =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sampler.drain()));
                if drained.is_err() {
                    self.sampler = None;
                    self.refused = Some("native sampling stopped on an internal error".into());
                }
            }
        }

        pub fn finish(self) -> (Option<NativeSamples>, Option<String>) {
            let samples = self.sampler.and_then(|s| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.finish())).ok()
            });
            (samples, self.refused)
        }
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
