//! Which thread an XPlane host line is. TSL's profiler (TensorFlow, JAX) ids a line by
//! `std::hash<std::thread::id>` of the thread, not by its tid, so a program's XPlane
//! and a file that gives a thread's tid with its `pthread_t` (opscope's recorder) name
//! one thread two ways; this finds the tid behind a line id.

use opscope_model::{ProcessId, ThreadId, Trace};

/// The id TSL gives the line of the thread whose `pthread_t` is `handle`: libstdc++'s
/// hash of a `std::thread::id` (its `_Hash_bytes`, a 64-bit MurmurHash2 with seed
/// 0xc70f6907, over the 8 bytes of the handle), as XPlane's signed `int64`.
pub fn line_id_of_thread(handle: u64) -> i64 {
    const MUL: u64 = 0xc6a4a793_5bd1e995;
    const SEED: u64 = 0xc70f6907;
    let shift_mix = |v: u64| v ^ (v >> 47);
    let mut hash = SEED ^ 8u64.wrapping_mul(MUL);
    hash ^= shift_mix(handle.wrapping_mul(MUL)).wrapping_mul(MUL);
    hash = hash.wrapping_mul(MUL);
    hash = shift_mix(hash).wrapping_mul(MUL);
    shift_mix(hash) as i64
}

/// Gives the lines of `process` (an XPlane's host plane) that are threads of `known`
/// (each with its `pthread_t`) those threads' tid, and both TSL's name for the thread
/// (without the line id it appends to a pool thread's name: `tf_Compute`, where the
/// recorder read the `python` a pool thread inherits); returns how many. Uniting the
/// process with the one of `known` then makes each line and its thread one thread.
pub fn adopt_tids(trace: &mut Trace, process: ProcessId, known: &[(u64, ThreadId)]) -> usize {
    let by_line: std::collections::HashMap<i64, ThreadId> = known
        .iter()
        .map(|&(handle, thread)| (line_id_of_thread(handle), thread))
        .collect();
    let lines: Vec<_> = (0..trace.threads.len())
        .filter(|&t| trace.threads[t].process == process)
        .map(|t| ThreadId(t as u32))
        .collect();
    let mut adopted = 0;
    for line in lines {
        let line_id = trace.threads[line.index()].tid;
        let Some(&thread) = by_line.get(&line_id) else {
            continue;
        };
        if let Some(name) = trace.threads[line.index()].name {
            let suffix = format!("/{line_id}");
            let plain = trace.str(name).strip_suffix(&suffix).map(str::to_string);
            let name = plain.map_or(name, |p| trace.intern(&p));
            trace.threads[line.index()].name = Some(name);
            trace.threads[thread.index()].name = Some(name);
        }
        trace.set_tid(line, trace.threads[thread.index()].tid);
        adopted += 1;
    }
    adopted
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pairs of (`threading.get_ident()`, the id of the XPlane's `python` line) that
    /// TensorFlow 2.21's profiler wrote for the main thread of three runs (x86-64
    /// Linux), negative ids included.
    #[test]
    fn line_ids_are_tsls() {
        for (handle, line) in [
            (140444649003904, 3733055504141286799),
            (139715083332480, -6752265092372366284),
            (139806692969344, -3622560680105682265),
        ] {
            assert_eq!(line_id_of_thread(handle), line, "{handle}");
        }
    }
}
