//! Putting sources recorded on different clocks on one time line. A recording session
//! holds files on `CLOCK_MONOTONIC` (opscope's own) beside files on Unix time (the
//! TensorFlow profiler's XPlane); each knows its offset to Unix time, so all of them
//! are moved onto Unix time.

use opscope_model::Trace;

/// When sources of `trace` sit on clocks of different names whose Unix offsets are
/// known, moves every such source onto Unix time (its timestamps shifted by its
/// offset, its clock's `to_global` recording the shift). Sources whose offset is not
/// known stay where they are. Returns how many clocks were moved.
///
/// Traces of one clock (the ranks of a Kineto run, say) are left alone: their times are
/// already comparable.
pub fn align_to_unix(trace: &mut Trace) -> usize {
    let known: Vec<usize> = (0..trace.clocks.len())
        .filter(|&c| trace.clocks[c].unix_offset_ns.is_some())
        .collect();
    let mut names: Vec<_> = known.iter().map(|&c| trace.clocks[c].name).collect();
    names.sort_unstable_by_key(|n| n.0);
    names.dedup();
    if names.len() < 2 {
        return 0;
    }
    // Shift per clock, looked up per track through its process's source.
    let mut shift_of_clock = vec![0i64; trace.clocks.len()];
    let mut moved = 0;
    for &c in &known {
        let clock = &mut trace.clocks[c];
        let offset = clock.unix_offset_ns.unwrap_or(0) - clock.to_global.offset_ns;
        if offset != 0 {
            shift_of_clock[c] = offset;
            clock.to_global.offset_ns += offset;
            moved += 1;
        }
    }
    if moved == 0 {
        return 0;
    }
    let track_shift: Vec<i64> = trace
        .tracks
        .iter()
        .map(|t| {
            let source = t
                .process
                .map(|p| trace.processes[p.index()].source)
                .or(t.device.map(|d| trace.devices[d.index()].source));
            source.map_or(0, |s| {
                shift_of_clock[trace.sources[s.index()].clock.0 as usize]
            })
        })
        .collect();
    let shift = |ts: &mut i64, track: u32| *ts = ts.saturating_add(track_shift[track as usize]);
    for (ts, &track) in trace.slices.ts.iter_mut().zip(&trace.slices.track) {
        shift(ts, track);
    }
    for (ts, &track) in trace.instants.ts.iter_mut().zip(&trace.instants.track) {
        shift(ts, track);
    }
    for (ts, &track) in trace.counters.ts.iter_mut().zip(&trace.counters.track) {
        shift(ts, track);
    }
    for (ts, &track) in trace.samples.ts.iter_mut().zip(&trace.samples.track) {
        shift(ts, track);
    }
    moved
}
