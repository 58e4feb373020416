//! Sampled stacks drawn in the viewer: each sampled thread gets a lane beside it where
//! a function that stays on the stack from one sample to the next is one span (from the
//! first sample that had it to the first that did not), nested as the stacks were, so
//! the page shows them as it shows ops. The lanes are the viewer's only: analyses read
//! the samples themselves.

use opscope_model::events::SliceRow;
use opscope_model::{ArgsId, SliceKind, StrId, Trace, TrackId, TrackKind};

/// Adds a lane of spans per sampled thread to `trace` (finished again).
pub fn draw(trace: &mut Trace) {
    if trace.samples.is_empty() {
        return;
    }
    let category = trace.intern("sampled stack");
    let mut names: hashbrown::HashMap<u32, StrId> = hashbrown::HashMap::new();
    let mut rows: Vec<SliceRow> = Vec::new();
    let n = trace.samples.len();
    let mut i = 0;
    while i < n {
        let track = trace.samples.track[i];
        let end = i + trace.samples.track[i..].partition_point(|&t| t == track);
        let lane = lane_of(trace, TrackId(track));
        // Open spans: (function and file, name, since).
        let mut open: Vec<((StrId, StrId), StrId, i64)> = Vec::new();
        let mut chain: Vec<u32> = Vec::new();
        for j in i..end {
            let ts = trace.samples.ts[j];
            chain.clear();
            chain.extend(trace.stacks.frames_of(trace.samples.stack[j]));
            chain.reverse();
            let frames = &trace.stacks.frames;
            let keys: Vec<(StrId, StrId)> = chain
                .iter()
                .map(|&f| (frames.function[f as usize], frames.file[f as usize]))
                .collect();
            let same = open
                .iter()
                .zip(&keys)
                .take_while(|(o, k)| o.0 == **k)
                .count();
            close(&mut open, same, ts, lane, category, &mut rows);
            for (&f, &key) in chain[same..].iter().zip(&keys[same..]) {
                let name = *names
                    .entry(f)
                    .or_insert_with(|| span_name(trace, f as usize));
                open.push((key, name, ts));
            }
        }
        let last = end - 1;
        let until = trace.samples.ts[last] + trace.samples.period[last].max(1);
        close(&mut open, 0, until, lane, category, &mut rows);
        i = end;
    }
    for row in rows {
        trace.slices.push(row);
    }
    trace.finish();
}

/// Ends the open spans past the first `keep`, innermost last pushed, at `at`: outermost
/// first, so that of spans that began and end together the model nests the later pushed
/// in the earlier.
fn close(
    open: &mut Vec<((StrId, StrId), StrId, i64)>,
    keep: usize,
    at: i64,
    lane: TrackId,
    category: StrId,
    rows: &mut Vec<SliceRow>,
) {
    for (_, name, since) in open.drain(keep.min(open.len())..) {
        rows.push(SliceRow {
            track: lane,
            ts: since,
            dur: (at - since).max(0),
            name,
            category,
            kind: SliceKind::Other,
            args: ArgsId::NONE,
        });
    }
}

/// The lane of a sampled thread's spans: a lane of its process named after it.
fn lane_of(trace: &mut Trace, track: TrackId) -> TrackId {
    let t = &trace.tracks[track.index()];
    let (process, thread) = (t.process, t.thread);
    let who = match thread.map(|th| &trace.threads[th.index()]) {
        Some(th) => match th.name {
            Some(name) => format!("{} {}", trace.str(name), th.tid),
            None => format!("tid {}", th.tid),
        },
        None => trace.str(t.name).to_string(),
    };
    let name = trace.intern(&format!("sampled stacks · {who}"));
    trace.named_track(process, TrackKind::Async, name, u64::from(track.0))
}

/// `function (file.py)`: the function, and its file without folders.
fn span_name(trace: &mut Trace, f: usize) -> StrId {
    let frames = &trace.stacks.frames;
    let file = trace.str(frames.file[f]);
    let file = file.rsplit('/').next().unwrap_or(file);
    let text = format!("{} ({file})", trace.str(frames.function[f]));
    trace.intern(&text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_model::SampleRow;

    /// A function on the stack over several samples is one span, nested in its caller;
    /// a line change inside it is no new span.
    #[test]
    fn samples_become_nested_spans_on_a_lane_of_their_thread() {
        let mut t = Trace::new();
        let p = t.process(opscope_model::SourceId(0), 1);
        let th = t.thread(p, 7);
        let track = t.thread_track(th, TrackKind::Thread);
        let file = t.intern("/x/m.py");
        let frame = |t: &mut Trace, name: &str, line| {
            let name = t.intern(name);
            t.stacks.frame(name, file, line)
        };
        let (main, f1, f2, g) = (
            frame(&mut t, "main", 1),
            frame(&mut t, "f", 5),
            frame(&mut t, "f", 6),
            frame(&mut t, "g", 9),
        );
        let stacks = [
            t.stacks.stack([main, f1]),
            t.stacks.stack([main, f2]),
            t.stacks.stack([main, g]),
        ];
        for (k, stack) in stacks.into_iter().enumerate() {
            t.samples.push(SampleRow {
                ts: 100 + 10 * k as i64,
                track,
                stack,
                period: 10,
                state: 0,
            });
        }
        t.finish();
        draw(&mut t);
        let spans: Vec<(String, i64, i64, bool)> = (0..t.slices.len())
            .map(|i| {
                let s = &t.slices;
                let lane = &t.tracks[s.track[i] as usize];
                assert_eq!(t.str(lane.name), "sampled stacks · tid 7");
                (
                    t.str(s.name[i]).to_string(),
                    s.ts[i],
                    s.dur[i],
                    s.parent[i] == opscope_model::NONE,
                )
            })
            .collect();
        assert_eq!(
            spans,
            vec![
                ("main (m.py)".to_string(), 100, 30, true),
                ("f (m.py)".to_string(), 100, 20, false),
                ("g (m.py)".to_string(), 120, 10, false),
            ]
        );
    }
}
