//! Step markers: the slices that say where a step begins and ends — `ProfilerStep#N`
//! (kind `Step`), else user ranges named like steps (`train_step_3`, `step#3`), else
//! user ranges named a step with no number (`train_step`). Below
//! the analyses: the window a command looks at and the steps analysis both start here.

use opscope_model::{SliceKind, Trace, TrackKind};

use crate::correlate;
use crate::intervals::IntervalSet;

/// A step as found: name, start and end.
pub type Bounds = (String, i64, i64);

/// The step markers of each source (by source index): name, start and end.
pub fn step_markers(trace: &Trace) -> Vec<Vec<Bounds>> {
    let s = &trace.slices;
    let mut host: Vec<Vec<usize>> = vec![Vec::new(); trace.sources.len()];
    for i in 0..s.len() {
        // Steps may also be process-wide ranges on an async lane (ITT frames, which
        // begin and end on any thread); other async slices are not the host's ops.
        let on = trace.tracks[s.track[i] as usize].kind;
        if on == TrackKind::Thread || (on == TrackKind::Async && s.kind(i) == SliceKind::Step) {
            if let Some(src) = correlate::source_of(trace, i) {
                host[src.index()].push(i);
            }
        }
    }
    let aside = crate::aside::of_sources(trace);
    host.iter()
        .zip(&aside)
        .map(|(h, aside)| markers(trace, h, &aside.times))
        .collect()
}

/// The step markers among `host` slices, in time order: `ProfilerStep#N` (kind `Step`),
/// else user ranges named like steps, else user ranges named a step with no number.
fn markers(trace: &Trace, host: &[usize], aside: &IntervalSet) -> Vec<Bounds> {
    let s = &trace.slices;
    for kinds_match in [
        (|k: SliceKind, _: &str| k == SliceKind::Step) as fn(SliceKind, &str) -> bool,
        |k, name| matches!(k, SliceKind::Annotation | SliceKind::Op) && is_step_name(name),
        |k, name| matches!(k, SliceKind::Annotation | SliceKind::Op) && is_bare_step_name(name),
    ] {
        let mut found: Vec<usize> = host
            .iter()
            .copied()
            .filter(|&i| kinds_match(s.kind(i), trace.str(s.name[i])))
            .collect();
        if found.is_empty() {
            continue;
        }
        found.sort_by_key(|&i| (s.ts[i], i));
        // The step a profiler's last `step()` opens and its stop closes holds nothing
        // of a step: nothing at all, or the loop's head finding the data exhausted. A
        // step the program never ran, unlike the step before it (a trace that carries
        // its steps' markers and nothing else keeps them all).
        if let [.., before, last] = found[..] {
            let (start, end) = (s.ts[last], s.end(last));
            // Where opscope stood aside for the program's profiler it saw no ops, so
            // only the time tells: the step the last `step()` opens and `stop()` closes
            // is a moment, a step of the loop is as long as the ones before.
            if aside.clipped(start, end).total() * 2 > end - start {
                let before: Vec<i64> = found[..found.len() - 1]
                    .iter()
                    .rev()
                    .take(3)
                    .map(|&i| s.dur[i])
                    .collect();
                let longest = before.iter().copied().max().unwrap_or(0);
                if (end - start) * 2 < longest {
                    found.pop();
                }
                return bounds_of(trace, found);
            }
            let ran = children(trace, last);
            let alike = found[..found.len() - 1]
                .iter()
                .rev()
                .take(3)
                .map(|&i| similarity(&children(trace, i), &ran))
                .fold(0.0, f64::max);
            let empty = ran.is_empty() && !children(trace, before).is_empty();
            if empty || (found.len() >= 3 && alike < LAST_MATCH) {
                found.pop();
            }
        }
        return bounds_of(trace, found);
    }
    Vec::new()
}

/// Each marker's name, time and end. A marker whose number is an arg (TSL's
/// `step_num`: JAX's `StepTraceAnnotation("train", step_num=3)`) is named with it, as
/// `ProfilerStep#3` is, so that `--step 3` finds it.
fn bounds_of(trace: &Trace, rows: Vec<usize>) -> Vec<Bounds> {
    let s = &trace.slices;
    let step_num = trace.strings.find("step_num");
    rows.into_iter()
        .map(|i| {
            let name = trace.str(s.name[i]);
            let number = step_num.and_then(|key| trace.args.find(s.args[i], key));
            let name = match number.and_then(opscope_model::args::ArgValue::as_i64) {
                // A name that ends in its number already has it.
                Some(n) if !name.ends_with(|c: char| c.is_ascii_digit()) => format!("{name}#{n}"),
                _ => name.to_string(),
            };
            (name, s.ts[i], s.end(i))
        })
        .collect()
}

/// The names of the slices right inside slice `i` on its track (a track's slices are in
/// time order, each before the slices it holds).
fn children(trace: &Trace, i: usize) -> Vec<opscope_model::StrId> {
    let s = &trace.slices;
    let track = opscope_model::TrackId(s.track[i]);
    let end = s.end(i);
    (i + 1..trace.track_slices(track).end)
        .take_while(|&j| s.ts[j] <= end)
        .filter(|&j| s.parent[j] == i as u32)
        .map(|j| s.name[j])
        .collect()
}

/// The smallest similarity of the last step to the one before: lower than
/// `steps::MIN_MATCH`, as one step's ops against another's rather than a median (steps on
/// `trace_diff/control` vary from 34 to 38 outer ops), yet far above a lone extra run of
/// the loop's head (the DataLoader finding no more data).
pub(crate) const LAST_MATCH: f64 = 0.75;

/// How alike two runs of ops are: the ops they share (as multisets) over the longer.
pub(crate) fn similarity(a: &[opscope_model::StrId], b: &[opscope_model::StrId]) -> f64 {
    let longer = a.len().max(b.len());
    if longer == 0 {
        return 1.0;
    }
    let mut counts: hashbrown::HashMap<opscope_model::StrId, i64> = Default::default();
    for x in a {
        *counts.entry(*x).or_default() += 1;
    }
    let mut shared = 0;
    for x in b {
        if let Some(c) = counts.get_mut(x) {
            if *c > 0 {
                *c -= 1;
                shared += 1;
            }
        }
    }
    shared as f64 / longer as f64
}

/// Whether slice `i` is a step marker (kept out of the search, so that it sees the same
/// sequence with or without markers).
pub(crate) fn is_marker(trace: &Trace, i: usize) -> bool {
    let s = &trace.slices;
    let name = trace.str(s.name[i]);
    s.kind(i) == SliceKind::Step
        || is_step_name(name)
        || (matches!(s.kind(i), SliceKind::Annotation | SliceKind::Op) && is_bare_step_name(name))
}

/// The names of a user range around each iteration that say "step" with no number
/// (`record_function("train_step")`, `nvtx.annotate("training step")`), in any case.
pub(crate) const BARE_STEP_NAMES: [&str; 5] = [
    "train_step",
    "training_step",
    "trainstep",
    "train step",
    "training step",
];

/// Whether a user range's name is one of [`BARE_STEP_NAMES`].
pub(crate) fn is_bare_step_name(name: &str) -> bool {
    BARE_STEP_NAMES.iter().any(|n| name.eq_ignore_ascii_case(n))
}

/// User ranges that name a step: `train_step_3`, `TrainStep 3`, `step#3`.
pub(crate) fn is_step_name(name: &str) -> bool {
    // Without allocating: this runs on every host slice of a trace (a 2 GB trace's
    // `gpu` spent an eighth of its time lower-casing names here).
    let bytes = name.as_bytes();
    let rest = ["train_step", "trainstep", "step"]
        .iter()
        .find_map(|prefix| {
            let head = bytes.get(..prefix.len())?;
            head.eq_ignore_ascii_case(prefix.as_bytes())
                .then(|| &bytes[prefix.len()..])
        });
    rest.is_some_and(|r| {
        let start = r
            .iter()
            .position(|c| !matches!(c, b'_' | b'#' | b' '))
            .unwrap_or(r.len());
        let digits = &r[start..];
        !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_names() {
        for yes in ["train_step_3", "TrainStep 12", "step#4", "step_0", "STEP 7"] {
            assert!(is_step_name(yes), "{yes}");
        }
        for no in [
            "train_step",
            "Optimizer.step#SGD.step",
            "stepper_1",
            "ProfilerStep#1x",
            "stép_1",
            "step_",
            "st",
        ] {
            assert!(!is_step_name(no), "{no}");
        }
        for yes in ["train_step", "Training Step", "TRAINSTEP", "training_step"] {
            assert!(is_bare_step_name(yes), "{yes}");
        }
        for no in [
            "step",
            "train_step_fn",
            "train",
            "Optimizer.step",
            "train_steps",
        ] {
            assert!(!is_bare_step_name(no), "{no}");
        }
    }

    fn markers_of(events: &[String]) -> Vec<Bounds> {
        let json = format!("[{}]", events.join(","));
        let mut trace = Trace::new();
        opscope_formats::chrome::import(json.as_bytes(), "t.json", &mut trace).unwrap();
        trace.finish();
        step_markers(&trace).remove(0)
    }

    /// `record_function("train_step")` around each iteration marks the steps, the
    /// last one too, though no data fetch follows it (the repeating ops made three
    /// steps of four: the last was judged unlike the others). Kineto calls such a
    /// range a user annotation, `opscope record` an op (PyTorch's ITT tasks); a Python
    /// function of that name (a frame of `with_stack`) is no range around a step.
    /// Numbered names come first.
    #[test]
    fn user_ranges_named_a_step_without_a_number_mark_steps() {
        let range = |cat: &str, name: &str, ts: i64, dur: i64| {
            format!(
                r#"{{"ph":"X","cat":"{cat}","name":"{name}","pid":1,"tid":1,"ts":{ts},"dur":{dur}}}"#
            )
        };
        let mut events = Vec::new();
        for k in 0..4 {
            events.push(range("user_annotation", "train_step", 100 * k, 60));
            events.push(range("cpu_op", "aten::mm", 100 * k + 5, 20));
            if k < 3 {
                events.push(range(
                    "user_annotation",
                    "enumerate(DataLoader)#_Iter.__next__",
                    100 * k + 70,
                    20,
                ));
            }
        }
        let found = markers_of(&events);
        let starts: Vec<i64> = found.iter().map(|b| b.1).collect();
        assert_eq!(starts, [0, 100_000, 200_000, 300_000]);
        assert!(found
            .iter()
            .all(|b| b.0 == "train_step" && b.2 - b.1 == 60_000));

        let as_category = |cat: &str| -> Vec<String> {
            events
                .iter()
                .map(|e| {
                    e.replace(
                        "user_annotation\",\"name\":\"train_step",
                        &format!("{cat}\",\"name\":\"train_step"),
                    )
                })
                .collect()
        };
        let ops = as_category("cpu_op");
        assert!(ops
            .iter()
            .any(|e| e.contains(r#""cpu_op","name":"train_step""#)));
        assert_eq!(markers_of(&ops).len(), 4, "a recorded range (an op)");
        let frames = as_category("python_function");
        assert!(markers_of(&frames).is_empty(), "a Python function");

        let mut numbered = events.clone();
        numbered.push(range("user_annotation", "step_1", 0, 390));
        let found = markers_of(&numbered);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, "step_1");
    }
}
