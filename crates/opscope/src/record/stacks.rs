//! Sampled Python stacks as a session file: each thread's samples on its track, with
//! its stack (function, file and line of each frame) and whether it ran and held the
//! GIL, written as Perfetto `PerfSample`s that every command (and Perfetto's UI) reads.

use std::path::Path;

use anyhow::Result;
use opscope_formats::perfetto::MonotonicClocks;
use opscope_model::samples::state;
use opscope_model::{SampleRow, Trace, TrackId, TrackKind};
use opscope_stacks::ThreadStack;

/// One read of a process's threads, at a `CLOCK_MONOTONIC` time.
pub struct Sample {
    pub ts: i64,
    pub threads: Vec<ThreadStack>,
    /// The read failed: the time since each thread's previous sample is counted for
    /// none.
    pub lost: bool,
}

/// What was sampled of one process.
pub struct Sampled {
    pub pid: i32,
    pub name: String,
    pub samples: Vec<Sample>,
    /// The time between two samples: the last sample's frames last that long.
    pub interval_ns: i64,
}

pub fn to_trace(sampled: &[Sampled], path: &Path, clocks: &MonotonicClocks) -> Trace {
    let mut trace = Trace::new();
    let source = super::sampler::monotonic_source(&mut trace, path, "opscope-stacks", clocks);
    for sampled in sampled {
        add_process(&mut trace, source, sampled);
    }
    trace.finish();
    trace
}

/// One process's samples on its threads' tracks. Each sample stands for half the
/// time to the thread's previous sample and half to its next (a failed read in
/// between ends either half there; the first and last look half an interval out):
/// the sampler's waits depend on what it reads (a deep stack takes longer), so the
/// time to the previous sample alone would favour what follows slow reads.
fn add_process(trace: &mut Trace, source: opscope_model::SourceId, sampled: &Sampled) {
    let process = trace.process(source, i64::from(sampled.pid));
    if !sampled.name.is_empty() {
        let name = trace.intern(&sampled.name);
        trace.processes[process.index()].name = Some(name);
    }
    trace.processes[process.index()].labels = super::sampler::host_label(trace);
    let half = sampled.interval_ns / 2;
    // Per thread: its track, the time of its last sample or failed read, and the row
    // of its last sample while its after-half is still open.
    let mut last: hashbrown::HashMap<u64, (TrackId, i64, Option<usize>)> =
        hashbrown::HashMap::new();
    let close = |trace: &mut Trace, row: Option<usize>, at: i64| {
        if let Some(row) = row {
            let after = (at - trace.samples.ts[row]) / 2;
            trace.samples.period[row] += after.max(0);
        }
    };
    let mut frames = Vec::new();
    for sample in &sampled.samples {
        if sample.lost {
            for (_, previous, open) in last.values_mut() {
                close(trace, open.take(), sample.ts);
                *previous = sample.ts;
            }
            continue;
        }
        for t in &sample.threads {
            let (track, previous, open) = *last.entry(t.native_thread_id).or_insert_with(|| {
                let thread = trace.thread(process, t.native_thread_id as i64);
                let track = trace.thread_track(thread, TrackKind::Thread);
                (track, sample.ts - 2 * half, None)
            });
            close(trace, open, sample.ts);
            frames.clear();
            for f in t.frames.iter().rev() {
                let function = trace.intern(&f.qualname);
                let file = trace.intern(&f.filename);
                let line = f.line.and_then(|l| u32::try_from(l).ok()).unwrap_or(0);
                frames.push(trace.stacks.frame(function, file, line));
            }
            let stack = trace.stacks.stack(frames.iter().copied());
            let mut state = state::ACTIVE_KNOWN;
            if t.active {
                state |= state::ACTIVE;
            }
            if t.holds_gil {
                state |= state::GIL;
            }
            let row = trace.samples.len();
            trace.samples.push(SampleRow {
                ts: sample.ts,
                track,
                stack,
                period: ((sample.ts - previous) / 2).max(0),
                state,
            });
            last.insert(t.native_thread_id, (track, sample.ts, Some(row)));
        }
    }
    for (_, _, open) in last.into_values() {
        if let Some(row) = open {
            trace.samples.period[row] += half;
        }
    }
}

/// Writes the processes' samples as a Perfetto file at `path`.
pub fn write(sampled: &[Sampled], path: &Path) -> Result<()> {
    let clocks = super::sampler::clocks_now();
    super::sampler::write_monotonic(&to_trace(sampled, path, &clocks), path, clocks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_stacks::Frame;

    fn frame(name: &str) -> Frame {
        Frame {
            name: name.into(),
            qualname: name.into(),
            filename: "t.py".into(),
            line: Some(1),
            first_line: 1,
        }
    }

    fn thread(tid: u64, innermost_first: &[&str]) -> ThreadStack {
        ThreadStack {
            thread_id: tid,
            native_thread_id: tid,
            holds_gil: false,
            active: true,
            frames: innermost_first.iter().map(|n| frame(n)).collect(),
        }
    }

    /// Each sample lands on its thread's track with its stack (outermost first in
    /// the tree), half the time to its neighbours and its state.
    #[test]
    fn samples_land_on_their_threads_with_stack_period_and_state() {
        let mut idle = thread(8, &["wait", "a"]);
        idle.active = false;
        let mut busy = thread(7, &["c", "b", "a"]);
        busy.holds_gil = true;
        let sampled = Sampled {
            pid: 7,
            name: "python".into(),
            interval_ns: 10,
            samples: vec![
                Sample {
                    ts: 100,
                    threads: vec![busy.clone(), idle],
                    lost: false,
                },
                // A failed read: the 15 ns before it are nobody's.
                Sample {
                    ts: 115,
                    threads: Vec::new(),
                    lost: true,
                },
                Sample {
                    ts: 125,
                    threads: vec![thread(7, &["d", "a"])],
                    lost: false,
                },
            ],
        };
        let clocks = crate::record::sampler::clocks_now();
        let trace = to_trace(&[sampled], Path::new("s.pftrace"), &clocks);
        let s = &trace.samples;
        assert_eq!(s.len(), 3);
        let names = |i: usize| -> Vec<&str> {
            let f = &trace.stacks.frames;
            let mut v: Vec<&str> = trace
                .stacks
                .frames_of(s.stack[i])
                .map(|f_| trace.str(f.function[f_ as usize]))
                .collect();
            v.reverse();
            v
        };
        let tid = |i: usize| {
            let th = trace.tracks[s.track[i] as usize].thread.unwrap();
            trace.threads[th.index()].tid
        };
        let rows: Vec<(i64, i64, i64, Vec<&str>, u32)> = (0..s.len())
            .map(|i| (tid(i), s.ts[i], s.period[i], names(i), s.state[i]))
            .collect();
        let (on, gil, known) = (state::ACTIVE, state::GIL, state::ACTIVE_KNOWN);
        assert_eq!(
            rows,
            vec![
                // Half of 10 before, half of the 15 to the failed read after.
                (7, 100, 12, vec!["a", "b", "c"], known | on | gil),
                // Half of the 10 from the failed read, half an interval after.
                (7, 125, 10, vec!["a", "d"], known | on),
                (8, 100, 12, vec!["a", "wait"], known),
            ]
        );
        assert!(trace.slices.is_empty());
    }
}
