//! The reports' own analyses run over each job's recent window: while someone looks,
//! every few seconds, the last seconds of a job's chunks are read as a trace (as
//! `--live` reads them) and analysed outside the agent's lock. [`ops`]: `stats op`'s
//! rows are `top`'s ops, one definition live and offline; [`steps`]: where no chunk
//! marks steps, `opscope steps` finds them.

pub mod ops;
pub mod steps;

use opscope_model::Trace;

use super::flight::{Flight, ProcessKey};
use super::state::Process;
use super::Shared;

/// Processes' recent bytes (see [`recent_bytes`]) by pid, for [`read`].
pub(crate) type Recent = Vec<(u32, Vec<u8>)>;

/// Runs every window analysis that is due.
pub fn refresh(shared: &Shared, tick: u64, now: u64) {
    steps::refresh(shared, tick, now);
    ops::refresh(shared, tick, now);
    give_back_freed_memory();
}

/// Returns the memory the analyses' models held to the system: glibc keeps freed memory
/// at the top of its heaps (up to its trim threshold), which in the agent, running for
/// months, would keep an analysis's peak resident (past the 64 MiB an agent bounded to
/// 4 MiB of chunks may hold).
pub(crate) fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of malloc's own heaps to the kernel,
    // under malloc's locks; no memory of ours is touched.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// One process's chunks since `since_ns` (agent ns), newest first up to `max_bytes`
/// (at least one chunk), after its preamble: bytes a Perfetto import reads whole.
/// Also how many chunks that leaves out.
pub(crate) fn recent_bytes(
    flight: &Flight,
    process: ProcessKey,
    p: &Process,
    since_ns: u64,
    max_bytes: usize,
) -> Option<(Vec<u8>, usize)> {
    let chunks: Vec<&[u8]> = flight.chunks_of(process, since_ns).collect();
    if chunks.is_empty() {
        return None;
    }
    let mut total = 0;
    let newest = chunks
        .iter()
        .rev()
        .take_while(|c| {
            total += c.len();
            total <= max_bytes
        })
        .count()
        .max(1);
    let mut bytes = p.preamble.clone();
    for chunk in &chunks[chunks.len() - newest..] {
        bytes.extend_from_slice(chunk);
    }
    Some((bytes, chunks.len() - newest))
}

/// The trace of processes' recent bytes (see [`recent_bytes`]), each its own source.
/// What a damaged chunk leaves is still read: an analysis sees what there is.
pub(crate) fn read(processes: &Recent) -> Trace {
    let mut trace = Trace::new();
    for (pid, bytes) in processes {
        let _ = opscope_formats::perfetto::import(bytes, &format!("process {pid}"), &mut trace);
    }
    trace.finish();
    trace
}
