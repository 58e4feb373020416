//! DataLoader workers are no ranks: a worker forked by a rank's process inherits its
//! `RANK`, so the recorder labels the worker's file with the rank too.

use opscope_model::Trace;

/// A DataLoader worker is forked by its rank's process and inherits its `RANK`, so the
/// recorder labels its file with that rank too: it is a worker of the rank, not the
/// rank (PyTorch names a worker's main thread `pt_data_worker`).
pub(super) fn run(trace: &mut Trace) {
    let mut workers = Vec::new();
    for t in &trace.threads {
        let process = &trace.processes[t.process.index()];
        if t.tid == process.pid && t.name.is_some_and(|n| trace.str(n) == "pt_data_worker") {
            workers.push(process.source);
        }
    }
    for source in workers {
        trace.sources[source.index()].rank = None;
        trace.sources[source.index()].world_size = None;
    }
}
