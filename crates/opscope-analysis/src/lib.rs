//! opscope's analyses: pure functions of a [`opscope_model::Trace`] that read slice
//! kinds, tracks and flows, never a source format, so that every analysis works on
//! every trace opscope can read.

#![forbid(unsafe_code)]

pub mod across;
pub mod advise;
pub mod aside;
pub mod attribution;
pub mod clock_merge;
pub mod clock_sync;
pub mod context;
pub mod correlate;
pub mod critical_path;
pub mod diff;
pub mod distribution;
pub mod flame;
pub mod gpu;
pub mod host;
pub mod hot;
pub mod intervals;
pub mod kernel_stats;
pub mod markers;
pub mod memory;
mod memory_report;
pub mod op_stats;
pub mod report;
pub mod roles;
pub mod sql;
pub mod steps;
pub mod summary;
pub mod timeline;
pub mod tree;
pub mod view;
pub mod window;

pub use context::Context;
