//! Step markers: the slices that say where a step begins and ends — `ProfilerStep#N`
//! (kind `Step`), else user ranges named like steps (`train_step_3`, `step#3`). Below
//! the analyses: the window a command looks at and the steps analysis both start here.

use opscope_model::{SliceKind, Trace, TrackKind};

use crate::correlate;

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
    host.iter().map(|h| markers(trace, h)).collect()
}

/// The step markers among `host` slices, in time order: `ProfilerStep#N` (kind `Step`),
/// else user ranges named like steps.
fn markers(trace: &Trace, host: &[usize]) -> Vec<Bounds> {
    let s = &trace.slices;
    for kinds_match in [
        (|k: SliceKind, _: &str| k == SliceKind::Step) as fn(SliceKind, &str) -> bool,
        |k, name| matches!(k, SliceKind::Annotation | SliceKind::Op) && is_step_name(name),
    ] {
        let mut found: Vec<Bounds> = host
            .iter()
            .copied()
            .filter(|&i| kinds_match(s.kind(i), trace.str(s.name[i])))
            .map(|i| (trace.str(s.name[i]).to_string(), s.ts[i], s.end(i)))
            .collect();
        if !found.is_empty() {
            found.sort_by_key(|b| b.1);
            return found;
        }
    }
    Vec::new()
}

/// Whether slice `i` is a step marker (kept out of the search, so that it sees the same
/// sequence with or without markers).
pub(crate) fn is_marker(trace: &Trace, i: usize) -> bool {
    let s = &trace.slices;
    s.kind(i) == SliceKind::Step || is_step_name(trace.str(s.name[i]))
}

/// User ranges that name a step: `train_step_3`, `TrainStep 3`, `step#3`.
pub(crate) fn is_step_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("train_step")
        .or_else(|| lower.strip_prefix("trainstep"))
        .or_else(|| lower.strip_prefix("step"));
    rest.is_some_and(|r| {
        let digits = r.trim_start_matches(['_', '#', ' ']);
        !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_names() {
        for yes in ["train_step_3", "TrainStep 12", "step#4", "step_0"] {
            assert!(is_step_name(yes), "{yes}");
        }
        for no in [
            "train_step",
            "Optimizer.step#SGD.step",
            "stepper_1",
            "ProfilerStep#1x",
        ] {
            assert!(!is_step_name(no), "{no}");
        }
    }
}
