//! What a source's process is, for people: a rank where the trace says so, a DataLoader
//! worker (it inherits its rank's environment, so only its thread's name tells), a
//! framework profiler's file, or a process by its pid.

use opscope_model::{SourceId, Trace};

/// How a DataLoader worker's role begins.
pub const LOADER_ROLE: &str = "DataLoader worker";

/// PyTorch names a DataLoader worker process's main thread so.
const DATALOADER_WORKER_THREAD: &str = "pt_data_worker";

/// What a source's process is, for people: a DataLoader worker by its thread's name
/// (it inherits its rank's environment), its rank where the trace gives one, a
/// framework profiler's file by its format, else the process by its pid.
pub fn role(trace: &Trace, src: SourceId) -> String {
    let host = trace
        .processes
        .iter()
        .enumerate()
        .filter(|(_, p)| p.source == src && p.device.is_none());
    for (index, process) in host.clone() {
        let main_thread = trace
            .threads
            .iter()
            .find(|t| t.process.index() == index && t.tid == process.pid && t.name.is_some());
        if main_thread.is_some_and(|t| {
            t.name
                .is_some_and(|n| trace.str(n) == DATALOADER_WORKER_THREAD)
        }) {
            return format!("{LOADER_ROLE} {}", process.pid);
        }
    }
    if let Some(rank) = trace.sources[src.index()].rank {
        return format!("rank {rank}");
    }
    if trace.sources[src.index()].format == "xplane" {
        return "TensorFlow/JAX profiler".to_string();
    }
    match host.map(|(_, p)| p.pid).next() {
        Some(pid) => format!("process {pid}"),
        None => "trace".to_string(),
    }
}
