//! What the model's unit tests build on: a trace with one source, process and thread.

use crate::*;

/// An empty trace with one clock, source, process and thread, and that thread's track.
pub(crate) fn one_thread() -> (Trace, TrackId) {
    let mut trace = Trace::new();
    let name = trace.intern("clock");
    let clock = trace.add_clock(ClockDomain {
        name,
        to_global: LinearTransform::IDENTITY,
        unix_offset_ns: None,
    });
    let source = trace.add_source(Source {
        path: "t.json".into(),
        format: "test".into(),
        clock,
        host: None,
        rank: None,
        world_size: None,
        metadata: ArgsId::NONE,
    });
    let process = trace.process(source, 1);
    let thread = trace.thread(process, 1);
    let track = trace.thread_track(thread, TrackKind::Thread);
    (trace, track)
}

/// A xorshift generator of numbers below `n`, from `seed`: the same sequence on every
/// run, for tests that try many cases.
pub(crate) fn numbers(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}
