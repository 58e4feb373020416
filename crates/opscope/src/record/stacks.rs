//! Sampled stacks as a session file: each thread's samples on its track, with its
//! stack (function, file and line of each frame; native frames, where sampled, with
//! their library in place of a file) and whether it ran and held the GIL, written as
//! Perfetto `PerfSample`s that every command (and Perfetto's UI) reads.

use std::path::Path;

use anyhow::Result;
use opscope_formats::perfetto::MonotonicClocks;
use opscope_model::samples::state;
use opscope_model::{SampleRow, Trace, TrackId, TrackKind};
use opscope_stacks::native::{merge, Merged, NativeSample, NativeSamples};
use opscope_stacks::ThreadStack;

/// One read of a process's threads, at a `CLOCK_MONOTONIC` time.
#[derive(Clone)]
pub struct Sample {
    /// When the read began; each thread's stack is of [`Sample::at`].
    pub ts: i64,
    pub threads: Vec<ThreadStack>,
    /// The read failed: the time since each thread's previous sample is counted for
    /// none.
    pub lost: bool,
}

impl Sample {
    /// The moment thread `t`'s stack was found.
    pub fn at(&self, t: &ThreadStack) -> i64 {
        self.ts
            .saturating_add(i64::try_from(t.read_after_ns).unwrap_or(i64::MAX))
    }
}

/// What was sampled of one process.
pub struct Sampled {
    pub pid: i32,
    pub name: String,
    pub samples: Vec<Sample>,
    /// The time between two samples: the last sample's frames last that long.
    pub interval_ns: i64,
}

/// What a sampling session read: Python stacks by process, native samples of the
/// whole tree where the kernel allowed them.
#[derive(Default)]
pub struct Recorded {
    pub python: Vec<Sampled>,
    pub native: Option<NativeSamples>,
    /// Why there are no native stacks (or not of every thread), to say once.
    pub native_refused: Option<String>,
}

impl Recorded {
    pub fn is_empty(&self) -> bool {
        self.python.is_empty() && self.native.as_ref().is_none_or(|n| n.samples.is_empty())
    }
}

/// Each thread's native samples in time order, by tid; a thread's samples are
/// taken out as a Python thread claims them.
type NativeByThread<'a> = hashbrown::HashMap<u64, Vec<&'a NativeSample>>;

pub fn to_trace(recorded: &Recorded, path: &Path, clocks: &MonotonicClocks) -> Trace {
    let mut trace = Trace::new();
    let source = super::sampler::monotonic_source(&mut trace, path, "opscope-stacks", clocks);
    let mut native: NativeByThread = hashbrown::HashMap::new();
    if let Some(n) = &recorded.native {
        for sample in &n.samples {
            native.entry(sample.tid as u64).or_default().push(sample);
        }
        for samples in native.values_mut() {
            samples.sort_by_key(|s| s.ts);
        }
    }
    let window = recorded
        .native
        .as_ref()
        .map_or(0, |n| n.interval_ns * 6 / 10);
    for sampled in &recorded.python {
        add_process(&mut trace, source, sampled, &mut native, window);
    }
    if let Some(n) = &recorded.native {
        add_native_threads(&mut trace, source, n, native);
    }
    trace.finish();
    trace
}

/// The threads no Python sample claimed (a C++ program, a library's worker threads,
/// the interpreter's own helpers): their native samples alone, each standing for
/// the running time the kernel sampled it after.
fn add_native_threads(
    trace: &mut Trace,
    source: opscope_model::SourceId,
    native: &NativeSamples,
    left: NativeByThread,
) {
    let mut threads: Vec<(u64, Vec<&NativeSample>)> = left.into_iter().collect();
    threads.sort_by_key(|(tid, _)| *tid);
    let mut frames = Vec::new();
    for (tid, samples) in threads {
        let Some(pid) = samples.first().map(|s| s.pid) else {
            continue;
        };
        let process = trace.process(source, i64::from(pid));
        if trace.processes[process.index()].name.is_none() {
            if let Some((_, name)) = native.processes.iter().find(|(p, _)| *p == pid) {
                let name = trace.intern(name);
                trace.processes[process.index()].name = Some(name);
            }
            trace.processes[process.index()].labels = super::sampler::host_label(trace);
        }
        let thread = trace.thread(process, tid as i64);
        let track = trace.thread_track(thread, TrackKind::Thread);
        for sample in samples {
            let merged: Vec<Merged> = sample.frames.iter().map(Merged::Native).collect();
            let stack = stack_of(trace, &merged, &mut frames);
            trace.samples.push(SampleRow {
                ts: sample.ts,
                track,
                stack,
                period: native.interval_ns,
                state: state::ACTIVE_KNOWN | state::ACTIVE,
            });
        }
    }
}

/// A merged stack (innermost first) as the model's stack: Python frames with their
/// file and line, native ones with their library and line 0.
fn stack_of(trace: &mut Trace, merged: &[Merged], frames: &mut Vec<u32>) -> u32 {
    frames.clear();
    for m in merged.iter().rev() {
        let (function, file, line) = match m {
            Merged::Python(f) => (
                trace.intern(&f.qualname),
                trace.intern(&f.filename),
                f.line.and_then(|l| u32::try_from(l).ok()).unwrap_or(0),
            ),
            Merged::Native(f) => (trace.intern(&f.function), trace.intern(&f.module), 0),
        };
        frames.push(trace.stacks.frame(function, file, line));
    }
    trace.stacks.stack(frames.iter().copied())
}

/// The native sample of thread `tid` nearest to `ts`, if one is within `window`.
fn nearest<'a>(
    native: &NativeByThread<'a>,
    tid: u64,
    ts: i64,
    window: i64,
) -> Option<&'a NativeSample> {
    let samples = native.get(&tid)?;
    let at = samples.partition_point(|s| s.ts < ts);
    [at.checked_sub(1), Some(at)]
        .into_iter()
        .flatten()
        .filter_map(|i| samples.get(i).copied())
        .filter(|s| (s.ts - ts).abs() <= window)
        .min_by_key(|s| (s.ts - ts).abs())
}

/// Each thread's reads in order: their time and innermost Python frame.
type Reads<'a> = hashbrown::HashMap<u64, Vec<(i64, Option<&'a opscope_stacks::Frame>)>>;

fn reads_by_thread(sampled: &Sampled) -> Reads<'_> {
    let mut reads: Reads = hashbrown::HashMap::new();
    for sample in sampled.samples.iter().filter(|s| !s.lost) {
        for t in &sample.threads {
            let read = (sample.at(t), t.frames.first());
            reads.entry(t.native_thread_id).or_default().push(read);
        }
    }
    reads
}

/// Whether the Python read `k` of a thread and the native sample at `ts` are of one
/// call: the thread's read on the native sample's far side has the same innermost
/// function. The two samplers are not synchronous; where the thread moved on between
/// its reads, a native sample near one of them may be of the next call already
/// (zlib's frames under a pure Python loop), and a Python stack without native
/// frames is better than one with another call's.
fn same_call_across(reads: &[(i64, Option<&opscope_stacks::Frame>)], k: usize, ts: i64) -> bool {
    let (at, frame) = reads[k];
    let other = match ts >= at {
        true => reads.get(k + 1),
        false => k.checked_sub(1).and_then(|i| reads.get(i)),
    };
    let same = |a: Option<&opscope_stacks::Frame>, b: Option<&opscope_stacks::Frame>| {
        a.map(|f| (&f.qualname, &f.filename)) == b.map(|f| (&f.qualname, &f.filename))
    };
    match other {
        Some((_, far)) => same(*far, frame),
        // The first or last read: nothing says the call changed.
        None => true,
    }
}

/// The line a thread was at (its innermost Python frame's function, file, line).
type Line<'a> = Option<(&'a str, &'a str, Option<i64>)>;

fn line_of(t: &ThreadStack) -> Line<'_> {
    t.frames
        .first()
        .map(|f| (f.qualname.as_str(), f.filename.as_str(), f.line))
}

/// The native function the innermost Python frame of a merged stack called (`None`:
/// it called none, the interpreter ran its bytecode).
fn callee<'a>(merged: &[Merged<'a>]) -> Option<&'a str> {
    let first_python = merged.iter().position(|m| matches!(m, Merged::Python(_)))?;
    match merged.get(first_python.checked_sub(1)?)? {
        Merged::Native(f) => Some(&f.function),
        Merged::Python(_) => None,
    }
}

/// What each Python line called natively in the matches [`same_call_across`]
/// confirms. A match it cannot confirm (the thread was elsewhere at its other read)
/// is still taken where its line is known to call that function: in real programs a
/// line calls the same few native functions, and only its time was in doubt.
fn learn_callees<'a>(
    sampled: &'a Sampled,
    native: &NativeByThread<'a>,
    window: i64,
    reads: &Reads<'a>,
) -> hashbrown::HashMap<Line<'a>, hashbrown::HashSet<Option<&'a str>>> {
    let mut learned: hashbrown::HashMap<Line, hashbrown::HashSet<Option<&str>>> =
        hashbrown::HashMap::new();
    let mut index: hashbrown::HashMap<u64, usize> = hashbrown::HashMap::new();
    for sample in sampled.samples.iter().filter(|s| !s.lost) {
        for t in &sample.threads {
            let tid = t.native_thread_id;
            let k = index.entry(tid).or_default();
            let this = *k;
            *k += 1;
            let Some(n) = nearest(native, tid, sample.at(t), window).filter(|_| t.active) else {
                continue;
            };
            if !same_call_across(&reads[&tid], this, n.ts) {
                continue;
            }
            if let Some(merged) = merge(&t.frames, &n.frames, n.complete) {
                learned
                    .entry(line_of(t))
                    .or_default()
                    .insert(callee(&merged));
            }
        }
    }
    learned
}

/// One process's samples on its threads' tracks. Each sample stands for half the
/// time to the thread's previous sample and half to its next (a failed read in
/// between ends either half there; the first and last look half an interval out):
/// the sampler's waits depend on what it reads (a deep stack takes longer), so the
/// time to the previous sample alone would favour what follows slow reads. A running
/// thread's stack takes the native frames of the kernel's sample of it nearest in
/// time (within an interval), merged; a thread read here leaves its native samples
/// to these (each stands for the time of a Python sample already).
fn add_process(
    trace: &mut Trace,
    source: opscope_model::SourceId,
    sampled: &Sampled,
    native: &mut NativeByThread,
    native_window: i64,
) {
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
    let mut claimed = Vec::new();
    // Within about half the native sampler's period: a thread that ran throughout has
    // a native sample that near; one further off may be in another call already.
    let window = native_window;
    let reads = reads_by_thread(sampled);
    let learned = learn_callees(sampled, native, window, &reads);
    let mut read_index: hashbrown::HashMap<u64, usize> = hashbrown::HashMap::new();
    for sample in &sampled.samples {
        if sample.lost {
            for (_, previous, open) in last.values_mut() {
                close(trace, open.take(), sample.ts);
                *previous = sample.ts;
            }
            continue;
        }
        // A thread missing from a read has ended: its last sample's time ends there,
        // not at a later failed read (which gave a helper thread that ended early
        // the whole rest of the run).
        for (tid, (_, previous, open)) in last.iter_mut() {
            if open.is_some() && !sample.threads.iter().any(|t| t.native_thread_id == *tid) {
                close(trace, open.take(), sample.ts);
                *previous = sample.ts;
            }
        }
        for t in &sample.threads {
            let at = sample.at(t);
            let (track, previous, open) = *last.entry(t.native_thread_id).or_insert_with(|| {
                let thread = trace.thread(process, t.native_thread_id as i64);
                let track = trace.thread_track(thread, TrackKind::Thread);
                (track, at - 2 * half, None)
            });
            close(trace, open, at);
            let tid = t.native_thread_id;
            let k = read_index.entry(tid).or_default();
            let this = *k;
            *k += 1;
            let candidate = match t.active {
                true => nearest(native, tid, at, window),
                false => None,
            };
            let merged = candidate
                .and_then(|n| merge(&t.frames, &n.frames, n.complete))
                .filter(|m| {
                    let n = candidate.map_or(0, |n| n.ts);
                    same_call_across(&reads[&tid], this, n)
                        || learned
                            .get(&line_of(t))
                            .is_some_and(|callees| callees.contains(&callee(m)))
                })
                .unwrap_or_else(|| t.frames.iter().map(Merged::Python).collect());
            let stack = stack_of(trace, &merged, &mut frames);
            claimed.push(tid);
            let mut state = state::ACTIVE_KNOWN;
            if t.active {
                state |= state::ACTIVE;
            }
            if t.holds_gil {
                state |= state::GIL;
            }
            let row = trace.samples.len();
            trace.samples.push(SampleRow {
                ts: at,
                track,
                stack,
                period: ((at - previous) / 2).max(0),
                state,
            });
            last.insert(t.native_thread_id, (track, at, Some(row)));
        }
    }
    for (_, _, open) in last.into_values() {
        if let Some(row) = open {
            trace.samples.period[row] += half;
        }
    }
    for tid in claimed {
        native.remove(&tid);
    }
}

/// The session's samples as the bytes of a Perfetto file (what the agent's flight
/// recorder keeps of an observed job, a second at a time).
pub fn to_bytes(recorded: &Recorded, label: &Path) -> Result<Vec<u8>> {
    let clocks = super::sampler::clocks_now();
    let trace = to_trace(recorded, label, &clocks);
    let mut bytes = Vec::new();
    let options = opscope_formats::perfetto::ExportOptions {
        monotonic: Some(clocks),
    };
    opscope_formats::perfetto::export_with(&trace, &mut bytes, &options)?;
    Ok(bytes)
}

/// Writes the session's samples as a Perfetto file at `path`.
pub fn write(recorded: &Recorded, path: &Path) -> Result<()> {
    let clocks = super::sampler::clocks_now();
    super::sampler::write_monotonic(&to_trace(recorded, path, &clocks), path, clocks)
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
            entry: false,
        }
    }

    /// The trace of one process's Python samples.
    fn trace_of(sampled: Sampled) -> Trace {
        let clocks = crate::record::sampler::clocks_now();
        let recorded = Recorded {
            python: vec![sampled],
            ..Recorded::default()
        };
        to_trace(&recorded, Path::new("s.pftrace"), &clocks)
    }

    fn thread(tid: u64, innermost_first: &[&str]) -> ThreadStack {
        ThreadStack {
            thread_id: tid,
            native_thread_id: tid,
            holds_gil: false,
            active: true,
            read_after_ns: 0,
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
        let trace = trace_of(sampled);
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

    /// A read of several threads takes a while: each thread's sample is at the moment
    /// its frame was found, and stands for half the time to its own neighbours.
    #[test]
    fn each_thread_is_sampled_when_its_frame_was_found() {
        let mut late = thread(9, &["helper"]);
        late.read_after_ns = 40;
        let mut later = late.clone();
        later.read_after_ns = 20;
        let sampled = Sampled {
            pid: 7,
            name: "python".into(),
            interval_ns: 100,
            samples: vec![
                Sample {
                    ts: 1000,
                    threads: vec![thread(7, &["main"]), late],
                    lost: false,
                },
                Sample {
                    ts: 1100,
                    threads: vec![thread(7, &["main"]), later],
                    lost: false,
                },
            ],
        };
        let trace = trace_of(sampled);
        let s = &trace.samples;
        let tid = |i: usize| {
            let th = trace.tracks[s.track[i] as usize].thread.unwrap();
            trace.threads[th.index()].tid
        };
        let mut rows: Vec<(i64, i64, i64)> = (0..s.len())
            .map(|i| (tid(i), s.ts[i], s.period[i]))
            .collect();
        rows.sort_unstable();
        assert_eq!(
            rows,
            vec![
                (7, 1000, 100),
                (7, 1100, 100),
                // 1040 and 1120: 80 apart, each half an interval out at its far end.
                (9, 1040, 90),
                (9, 1120, 90),
            ]
        );
    }

    /// A thread that ended (missing from the next read) stands for half the time to
    /// that read, not to a failed read long after.
    #[test]
    fn a_thread_that_ended_is_not_charged_until_a_later_failed_read() {
        let sampled = Sampled {
            pid: 7,
            name: "python".into(),
            interval_ns: 10,
            samples: vec![
                Sample {
                    ts: 100,
                    threads: vec![thread(7, &["main"]), thread(9, &["helper"])],
                    lost: false,
                },
                Sample {
                    ts: 110,
                    threads: vec![thread(7, &["main"])],
                    lost: false,
                },
                Sample {
                    ts: 1000,
                    threads: Vec::new(),
                    lost: true,
                },
            ],
        };
        let trace = trace_of(sampled);
        let s = &trace.samples;
        let helper: Vec<i64> = (0..s.len())
            .filter(|&i| {
                let th = trace.tracks[s.track[i] as usize].thread.unwrap();
                trace.threads[th.index()].tid == 9
            })
            .map(|i| s.period[i])
            .collect();
        assert_eq!(helper, vec![10]);
    }
}
