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
