//! Sampled Python stacks as a session file: each thread's samples become nested
//! slices on its own track — a frame that stays on the stack from one sample to the
//! next is one slice, from the first sample that had it to the first that did not —
//! named as torch's Python stacks name functions (`file.py(def line): name`), so that
//! `flame`, `stats code` and `view` read them as they read a traced run's.

use std::path::Path;

use anyhow::Result;
use opscope_formats::perfetto::MonotonicClocks;
use opscope_model::{events::SliceRow, ArgsId, SliceKind, StrId, Trace, TrackKind};
use opscope_stacks::ThreadStack;

/// One read of a process's threads, at a `CLOCK_MONOTONIC` time.
pub struct Sample {
    pub ts: i64,
    pub threads: Vec<ThreadStack>,
}

/// What was sampled of one process.
pub struct Sampled {
    pub pid: i32,
    pub name: String,
    pub samples: Vec<Sample>,
    /// The time between two samples: the last sample's frames last that long.
    pub interval_ns: i64,
}

/// A frame open on a thread: its name, and when the first sample with it was.
struct Open {
    name: StrId,
    since: i64,
}

pub fn to_trace(sampled: &[Sampled], path: &Path, clocks: &MonotonicClocks) -> Trace {
    let mut trace = Trace::new();
    let source = super::sampler::monotonic_source(&mut trace, path, "opscope-stacks", clocks);
    let category = trace.intern("python stack sample");
    for sampled in sampled {
        add_process(&mut trace, source, category, sampled);
    }
    trace.finish();
    trace
}

/// One process's samples as slices on its threads' tracks.
fn add_process(
    trace: &mut Trace,
    source: opscope_model::SourceId,
    category: StrId,
    sampled: &Sampled,
) {
    let process = trace.process(source, i64::from(sampled.pid));
    if !sampled.name.is_empty() {
        let name = trace.intern(&sampled.name);
        trace.processes[process.index()].name = Some(name);
    }
    let mut open: hashbrown::HashMap<u64, (opscope_model::TrackId, Vec<Open>)> =
        hashbrown::HashMap::new();
    let close = |trace: &mut Trace, track, frames: &mut Vec<Open>, keep: usize, at: i64| {
        // Outermost first: of slices with the same start and end (frames that came and
        // went together), the model nests the later pushed inside the earlier.
        for f in frames.drain(keep.min(frames.len())..) {
            trace.slices.push(SliceRow {
                track,
                ts: f.since,
                dur: (at - f.since).max(0),
                name: f.name,
                category,
                kind: SliceKind::PythonFunction,
                args: ArgsId::NONE,
            });
        }
    };
    for sample in &sampled.samples {
        let mut seen = hashbrown::HashSet::new();
        for t in &sample.threads {
            seen.insert(t.native_thread_id);
            let (track, frames) = open.entry(t.native_thread_id).or_insert_with(|| {
                let thread = trace.thread(process, t.native_thread_id as i64);
                (trace.thread_track(thread, TrackKind::Thread), Vec::new())
            });
            let names: Vec<StrId> = t
                .frames
                .iter()
                .rev()
                .map(|f| trace.intern(&format!("{}({}): {}", f.filename, f.first_line, f.name)))
                .collect();
            let same = frames
                .iter()
                .zip(&names)
                .take_while(|(o, n)| o.name == **n)
                .count();
            close(trace, *track, frames, same, sample.ts);
            frames.extend(names[same..].iter().map(|&name| Open {
                name,
                since: sample.ts,
            }));
        }
        // A thread gone since the last sample ends its frames there.
        for (tid, (track, frames)) in open.iter_mut() {
            if !seen.contains(tid) {
                close(trace, *track, frames, 0, sample.ts);
            }
        }
    }
    let end = sampled.samples.last().map_or(0, |s| s.ts) + sampled.interval_ns;
    for (track, frames) in open.values_mut() {
        close(trace, *track, frames, 0, end);
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

    /// Frames that stay from sample to sample are one slice each, nested as the stack
    /// was (also where frames came and went together: the same start and end); a frame
    /// that changes ends its slice and its callees' at that sample.
    #[test]
    fn samples_become_slices_nested_as_the_stacks() {
        let sampled = Sampled {
            pid: 7,
            name: "python".into(),
            interval_ns: 10,
            samples: vec![
                Sample {
                    ts: 100,
                    threads: vec![thread(7, &["c", "b", "a"])],
                },
                Sample {
                    ts: 110,
                    threads: vec![thread(7, &["c", "b", "a"])],
                },
                Sample {
                    ts: 120,
                    threads: vec![thread(7, &["d", "a"])],
                },
            ],
        };
        let clocks = crate::record::sampler::clocks_now();
        let trace = to_trace(&[sampled], Path::new("s.pftrace"), &clocks);
        let s = &trace.slices;
        let find = |name: &str| {
            (0..s.len())
                .find(|&i| trace.str(s.name[i]).ends_with(&format!(": {name}")))
                .unwrap_or_else(|| panic!("no {name}"))
        };
        let (a, b, c, d) = (find("a"), find("b"), find("c"), find("d"));
        assert_eq!((s.ts[a], s.dur[a]), (100, 30));
        assert_eq!((s.ts[b], s.dur[b]), (100, 20));
        assert_eq!((s.ts[c], s.dur[c]), (100, 20));
        assert_eq!((s.ts[d], s.dur[d]), (120, 10));
        assert_eq!(s.parent[b] as usize, a);
        assert_eq!(s.parent[c] as usize, b);
        assert_eq!(s.parent[d] as usize, a);
        assert_eq!(trace.str(s.name[a]), "t.py(1): a");
    }
}
