//! Native stacks (the C and C++ frames of the interpreter, PyTorch, oneDNN, a CUDA
//! runtime) sampled by the kernel (`perf`), unwound here from each sample's registers
//! and stack copy with the files' DWARF unwind tables (`unwind`, `images`), named from
//! their symbol tables, and merged with a Python stack read at the same moment: the
//! Python frames stand where the interpreter's eval loop stood (`merge`).

pub mod images;
pub mod merge;
pub mod perf;
pub mod unwind;

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use images::Images;
use perf::{Record, ThreadEvent};
use unwind::{Address, ProcessCode};

pub use merge::{merge, Merged};

/// Data pages per thread's buffer (a power of two): about fifteen samples with their
/// stack copies, so a sampler late by a tenth of a second at 100 Hz loses none.
const PAGES: usize = 64;
/// What is tried where the kernel's locked-memory allowance for perf buffers
/// (`kernel.perf_event_mlock_kb`, per user) refuses the larger buffer.
const FEW_PAGES: usize = 8;

/// One native frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeFrame {
    /// The function, demangled without parameters (`at::native::addmm`), or the file
    /// and offset where no symbol names it.
    pub function: Arc<str>,
    /// The file's name (`libtorch_cpu.so`), empty for code in no file.
    pub module: Arc<str>,
}

impl NativeFrame {
    /// CPython's eval loop: where the Python frames it runs stand in a merged stack
    /// (its `.cold` part included; the `PyEval_EvalFrame*` wrappers around it are not
    /// loops of their own).
    pub fn is_python_eval(&self) -> bool {
        self.function.starts_with("_PyEval_EvalFrameDefault")
    }
}

/// A native sample: a thread's frames, innermost first, at a `CLOCK_MONOTONIC` time.
#[derive(Clone, Debug)]
pub struct NativeSample {
    pub pid: i32,
    pub tid: i32,
    pub ts: i64,
    pub frames: Vec<NativeFrame>,
    /// The unwinder reached the stack's end: every frame is there.
    pub complete: bool,
}

/// What a native sampling session gives.
#[derive(Default)]
pub struct NativeSamples {
    pub samples: Vec<NativeSample>,
    /// The processes sampled and their names (`comm`).
    pub processes: Vec<(i32, String)>,
    /// The running time each sample stands for.
    pub interval_ns: i64,
    /// Samples the kernel dropped (a buffer full).
    pub lost: u64,
}

struct Raw {
    pid: i32,
    tid: i32,
    ts: i64,
    frames: Vec<Address>,
    complete: bool,
}

/// The native sampler of a process tree: each thread followed by an event of its
/// own, each event's buffer drained and its samples unwound while the processes
/// still run; names are looked up once, at the end.
pub struct NativeSampler {
    hz: u32,
    pages: usize,
    events: HashMap<i32, (i32, ThreadEvent)>,
    code: HashMap<i32, ProcessCode>,
    names: Vec<(i32, String)>,
    images: Images,
    raw: Vec<Raw>,
    buffer: Vec<u8>,
    frames: Vec<Address>,
    lost: u64,
}

/// Why native stacks are off, said once by the caller.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error(
        "the kernel refuses to sample other processes' threads (perf_event_open: {0}; \
         kernel.perf_event_paranoid is {1}): root, CAP_PERFMON, or perf_event_paranoid 1 or \
         less allows it"
    )]
    Permission(io::Error, String),
    #[error("this kernel has no perf events to sample with (perf_event_open: {0})")]
    Unsupported(io::Error),
    #[error(
        "the kernel's locked-memory allowance for perf buffers is spent \
         (kernel.perf_event_mlock_kb; {0}): threads started from now on have no native stacks"
    )]
    Memory(io::Error),
}

impl NativeSampler {
    pub fn new(hz: u32) -> NativeSampler {
        NativeSampler {
            hz,
            pages: PAGES,
            events: HashMap::new(),
            code: HashMap::new(),
            names: Vec::new(),
            images: Images::default(),
            raw: Vec::new(),
            buffer: Vec::new(),
            frames: Vec::new(),
            lost: 0,
        }
    }

    /// Starts sampling the threads of `pid` not followed yet; threads that have
    /// ended are drained and let go. An error means no more threads can be followed
    /// (those followed go on).
    pub fn follow(&mut self, pid: i32) -> Result<(), Refused> {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return Ok(());
        };
        let tids: Vec<i32> = tasks
            .filter_map(|t| t.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        let ended: Vec<i32> = self
            .events
            .iter()
            .filter(|(tid, (owner, _))| *owner == pid && !tids.contains(tid))
            .map(|(tid, _)| *tid)
            .collect();
        for tid in ended {
            if let Some((_, mut event)) = self.events.remove(&tid) {
                self.drain_event(pid, &mut event);
            }
        }
        if !self.code.contains_key(&pid) {
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            self.names.push((pid, name.trim().to_string()));
            self.code
                .insert(pid, ProcessCode::new(pid, &mut self.images));
        }
        for tid in tids {
            if self.events.contains_key(&tid) {
                continue;
            }
            match self.open(tid) {
                Ok(event) => {
                    self.events.insert(tid, (pid, event));
                }
                Err(e) => match e.raw_os_error() {
                    // The thread ended meanwhile.
                    Some(libc::ESRCH) => {}
                    Some(libc::EACCES | libc::EPERM) if self.events.is_empty() => {
                        let paranoid =
                            std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                                .map_or("unknown".into(), |s| s.trim().to_string());
                        return Err(Refused::Permission(e, paranoid));
                    }
                    Some(libc::EPERM | libc::ENOMEM) => return Err(Refused::Memory(e)),
                    _ => return Err(Refused::Unsupported(e)),
                },
            }
        }
        Ok(())
    }

    /// Lets go of the threads of every process not in `live` (ended, or left the
    /// tree), their buffers drained first: a long run whose DataLoader workers come
    /// and go each epoch must not keep their events (a file descriptor and a locked
    /// buffer each).
    pub fn retain_processes(&mut self, live: &[i32]) {
        let gone: Vec<(i32, i32)> = self
            .events
            .iter()
            .filter(|(_, (pid, _))| !live.contains(pid))
            .map(|(tid, (pid, _))| (*tid, *pid))
            .collect();
        for (tid, pid) in gone {
            if let Some((_, mut event)) = self.events.remove(&tid) {
                self.drain_event(pid, &mut event);
            }
        }
    }

    /// Threads followed now.
    pub fn followed(&self) -> usize {
        self.events.len()
    }

    fn open(&mut self, tid: i32) -> io::Result<ThreadEvent> {
        match ThreadEvent::open(tid, self.hz, self.pages) {
            Err(e) if e.raw_os_error() == Some(libc::EPERM) && self.pages > FEW_PAGES => {
                // The event opened but its buffer could not be locked: smaller ones
                // for this thread and the rest.
                self.pages = FEW_PAGES;
                ThreadEvent::open(tid, self.hz, self.pages).map_err(|_| e)
            }
            other => other,
        }
    }

    /// Samples unwound so far.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// Unwinds what every followed thread's buffer holds.
    pub fn drain(&mut self) {
        let mut events = std::mem::take(&mut self.events);
        for (pid, event) in events.values_mut() {
            self.drain_event(*pid, event);
        }
        self.events = events;
    }

    fn drain_event(&mut self, pid: i32, event: &mut ThreadEvent) {
        self.buffer.clear();
        event.drain(&mut self.buffer);
        let Some(code) = self.code.get_mut(&pid) else {
            return;
        };
        for record in perf::records(&self.buffer) {
            match record {
                Record::Sample(sample) => {
                    let complete = code.unwind(&sample, &mut self.images, &mut self.frames);
                    if self.frames.is_empty() {
                        continue;
                    }
                    self.raw.push(Raw {
                        pid: sample.pid,
                        tid: sample.tid,
                        ts: sample.time as i64,
                        frames: self.frames.clone(),
                        complete,
                    });
                }
                Record::Lost(n) => self.lost += n,
                Record::Other => {}
            }
        }
    }

    /// Stops sampling; the samples with their frames named.
    pub fn finish(mut self) -> NativeSamples {
        self.drain();
        self.events.clear();
        let mut named: HashMap<Address, NativeFrame> = HashMap::new();
        let images = &self.images.images;
        let unknown: Arc<str> = Arc::from("");
        let mut name = |address: Address| -> NativeFrame {
            named
                .entry(address)
                .or_insert_with(|| match address {
                    Address::Code { image, svma } => {
                        let image = &images[image as usize];
                        NativeFrame {
                            function: image.function(svma).into(),
                            module: Arc::clone(&image.name),
                        }
                    }
                    Address::Unknown(avma) => NativeFrame {
                        function: format!("{avma:#x}").into(),
                        module: Arc::clone(&unknown),
                    },
                })
                .clone()
        };
        let samples = self
            .raw
            .iter()
            .map(|r| NativeSample {
                pid: r.pid,
                tid: r.tid,
                ts: r.ts,
                frames: r.frames.iter().map(|&a| name(a)).collect(),
                complete: r.complete,
            })
            .collect();
        NativeSamples {
            samples,
            processes: self.names,
            interval_ns: 1_000_000_000 / i64::from(self.hz.max(1)),
            lost: self.lost,
        }
    }
}
