//! Dimension tables: the sources (files) a trace was loaded from, and the processes,
//! threads, devices and tracks its events belong to.

use crate::clock::ClockId;
use crate::strings::StrId;

macro_rules! id_type {
    ($($name:ident),*) => {$(
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
        pub struct $name(pub u32);
        impl $name {
            pub fn index(self) -> usize { self.0 as usize }
        }
    )*};
}
id_type!(SourceId, ProcessId, ThreadId, DeviceId, TrackId);

/// One loaded file (or session part), with what it says about where it came from.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Source {
    pub path: String,
    /// Short format name: `kineto`, `chrome-json`, `tf-timeline`, `perfetto`, ….
    pub format: std::borrow::Cow<'static, str>,
    pub clock: ClockId,
    pub host: Option<StrId>,
    pub rank: Option<u32>,
    pub world_size: Option<u32>,
    /// File-level metadata (schema version, distributedInfo, …) as an arg bag.
    pub metadata: crate::args::ArgsId,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Process {
    pub source: SourceId,
    /// The pid as the source gave it; sources with string pids get a stable number.
    pub pid: i64,
    pub name: Option<StrId>,
    pub labels: Option<StrId>,
    pub sort_index: Option<i64>,
    /// The device this "process" stands for (Kineto and TF put each GPU in one).
    pub device: Option<DeviceId>,
}

/// Pids from here up are numbers an importer gave to processes that a file names by a
/// string (Kineto's `"Spans"` and `"Traces"`): no system's pid, and nothing outside
/// their own file (every Kineto file has its `"Spans"` under the same number).
pub const SYNTHETIC_PID_BASE: i64 = 1 << 30;

impl Process {
    /// Whether the pid is one an importer made up ([`SYNTHETIC_PID_BASE`]).
    pub fn has_synthetic_pid(&self) -> bool {
        self.pid >= SYNTHETIC_PID_BASE
    }
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Thread {
    pub process: ProcessId,
    pub tid: i64,
    pub name: Option<StrId>,
    pub sort_index: Option<i64>,
    /// The thread's `pthread_t` (what Python's `threading.get_ident()` gives), when the
    /// recorder saw it: profilers that name threads by it (TSL's XPlane lines, by a
    /// hash of it) are matched to the thread through it.
    pub handle: Option<u64>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum DeviceKind {
    Cpu,
    Gpu,
    Mtia,
    Tpu,
    Sycl,
    Other,
}

impl DeviceKind {
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Gpu => "gpu",
            DeviceKind::Mtia => "mtia",
            DeviceKind::Tpu => "tpu",
            DeviceKind::Sycl => "sycl",
            DeviceKind::Other => "other",
        }
    }
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Device {
    pub source: SourceId,
    pub kind: DeviceKind,
    pub index: u32,
    /// Model name, e.g. `Tesla V100-SXM2-16GB`, when known.
    pub name: Option<StrId>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum TrackKind {
    /// A CPU thread: its slices nest.
    Thread,
    /// A GPU stream or accelerator queue.
    GpuStream,
    /// An async lane (Chrome `b`/`e` events, object lifetimes).
    Async,
    /// Values over time.
    Counter,
}

impl TrackKind {
    pub fn name(self) -> &'static str {
        match self {
            TrackKind::Thread => "thread",
            TrackKind::GpuStream => "gpu_stream",
            TrackKind::Async => "async",
            TrackKind::Counter => "counter",
        }
    }
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Track {
    pub kind: TrackKind,
    pub name: StrId,
    pub process: Option<ProcessId>,
    pub thread: Option<ThreadId>,
    pub device: Option<DeviceId>,
}
