//! The opscope trace model: one [`Trace`] holds everything loaded from any number of
//! files, hosts and ranks, on one nanosecond clock. Importers fill it through
//! [`Trace`]'s builder methods and call [`Trace::finish`], which sorts slices and checks
//! the invariants; analyses and exporters only read it.

// Unsafe code only where columns are mapped from a file (`column`) and read as text
// (`strings`).
#![deny(unsafe_code)]

pub mod args;
mod check;
pub mod clock;
pub mod column;
#[cfg(feature = "compare")]
pub mod compare;
pub mod dims;
pub mod events;
pub mod kind;
mod packed;
mod refine;
pub mod repair;
pub mod runs;
pub mod samples;
pub mod strings;
#[cfg(test)]
mod testing;
pub mod trace;

pub use args::{ArgValue, Args, ArgsId, ArgsWriter};
pub use clock::{ClockDomain, ClockId, LinearTransform};
pub use dims::{
    Device, DeviceId, DeviceKind, Process, ProcessId, Source, SourceId, Thread, ThreadId, Track,
    TrackId, TrackKind, SYNTHETIC_PID_BASE,
};
pub use events::{CounterSamples, Flows, InstantScope, Instants, Slices};
pub use kind::{CopyDirection, SliceKind};
pub use samples::{SampleRow, StackSamples, Stacks};
pub use strings::{StrId, StringTable};
pub use trace::{RepairCounts, Room, Trace};

/// Marker for "no reference" in the `u32` index columns.
pub const NONE: u32 = u32::MAX;
