//! The linking passes that run on a model once its files are imported, before the
//! model cache keeps it: each is one module named for what it links, and [`PASSES`]
//! runs them in order. [`merge_hosts`] runs after the cache, on every load.

mod dataloader_workers;
mod hosts_clock;
mod hosts_of_runs;
mod recorded_processes;
mod shared_ranks;

use opscope_model::Trace;

pub use hosts_clock::merge_hosts;

/// A pass over the whole model.
pub struct Pass {
    pub name: &'static str,
    pub run: fn(&mut Trace),
}

/// The passes, in the order they run.
pub const PASSES: &[Pass] = &[
    Pass {
        name: "dataloader-workers",
        run: dataloader_workers::run,
    },
    Pass {
        name: "shared-ranks",
        run: shared_ranks::run,
    },
    Pass {
        name: "hosts-of-runs",
        run: hosts_of_runs::run,
    },
    // A recording session mixes opscope's CLOCK_MONOTONIC files with frameworks'
    // Unix-time ones (XPlane): one time line for all. Before the processes are united:
    // each track moves by the clock of its process's file.
    Pass {
        name: "unix-clock",
        run: |trace| {
            opscope_analysis::clock_sync::align_to_unix(trace);
        },
    },
    Pass {
        name: "recorded-processes",
        run: recorded_processes::run,
    },
];

/// Runs every pass of [`PASSES`] on `trace`.
pub fn run_all(trace: &mut Trace) {
    for pass in PASSES {
        (pass.run)(trace);
    }
}
