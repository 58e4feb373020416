//! Training steps and what each spent: from step markers (`ProfilerStep#N`, and user
//! ranges named like `train_step_3` when there are none), or, when a trace has no
//! markers, from the period with which the sequence of top-level ops repeats — other
//! tools refuse such traces.

use opscope_model::{SliceKind, SourceId, Trace, TrackKind, NONE};
use serde::Serialize;

use crate::correlate;
use crate::gpu::classify::{self, WorkClass};
use crate::intervals::IntervalSet;

#[derive(Clone, Debug, Default)]
pub struct StepOptions {
    /// Find steps from the repeating op sequence even where markers exist.
    pub ignore_markers: bool,
}

/// How the steps of a source were found.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum StepSource {
    /// Slices named as steps.
    Markers,
    /// The framework's own record of each step in its profile (Keras's train function
    /// calls, JAX's calls of a jitted function).
    Framework,
    /// The sequence of top-level ops on the busiest thread repeats every `period` ops;
    /// `match_ratio` of the ops equal the op one period later.
    Period { period: usize, match_ratio: f64 },
    /// Neither markers nor a repeating sequence.
    None,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Step {
    pub name: String,
    pub start_ns: i64,
    pub dur_ns: i64,
    /// Time within the step in which some device work ran.
    pub device_busy_ns: i64,
    pub device_idle_ns: i64,
    /// Device time per work class (overlaps count in each class).
    pub computation_ns: i64,
    pub communication_ns: i64,
    pub memory_ns: i64,
    /// Device work that started within the step.
    pub kernels: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct SourceSteps {
    pub file: String,
    pub rank: Option<u32>,
    pub found_by: StepSource,
    pub steps: Vec<Step>,
}

/// Steps of every source, and with two or more sources (ranks) their spread.
#[derive(Clone, Debug, Serialize)]
pub struct StepsReport {
    pub sources: Vec<SourceSteps>,
    /// Per-rank medians across ranks; the straggler is the rank that computes most per
    /// step (in synchronous training the others wait for it, so step times agree).
    pub across: Option<crate::across::Across>,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// [`steps`] and the summary across ranks.
pub fn report(trace: &Trace, options: &StepOptions) -> StepsReport {
    let sources = steps(trace, options);
    let figures: Vec<(String, Vec<(&'static str, f64)>)> = sources
        .iter()
        .filter(|s| !s.steps.is_empty())
        .map(|s| {
            let of = |f: fn(&Step) -> i64| median(s.steps.iter().map(|x| f(x) as f64).collect());
            (
                crate::across::label(&s.file, s.rank, None),
                vec![
                    ("median_step_ns", of(|x| x.dur_ns)),
                    ("median_computation_ns", of(|x| x.computation_ns)),
                    ("median_communication_ns", of(|x| x.communication_ns)),
                    ("median_device_idle_ns", of(|x| x.device_idle_ns)),
                ],
            )
        })
        .collect();
    StepsReport {
        across: crate::across::summarize(&figures, "median_computation_ns"),
        sources,
    }
}

/// User ranges that name a step: `train_step_3`, `TrainStep 3`, `step#3`.
fn is_step_name(name: &str) -> bool {
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

pub fn steps(trace: &Trace, options: &StepOptions) -> Vec<SourceSteps> {
    let s = &trace.slices;
    let mut result = Vec::new();
    // Device work per source, by start time, and the longest piece: a step's work is
    // found by binary search, not by a pass over the whole trace per step.
    let mut work: Vec<Vec<usize>> = vec![Vec::new(); trace.sources.len()];
    let mut host: Vec<Vec<usize>> = vec![Vec::new(); trace.sources.len()];
    for i in 0..s.len() {
        let Some(src) = correlate::source_of(trace, i) else {
            continue;
        };
        if correlate::is_device_work(trace, i) {
            work[src.index()].push(i);
        } else if trace.tracks[s.track[i] as usize].kind == TrackKind::Thread {
            host[src.index()].push(i);
        }
    }
    for list in &mut work {
        list.sort_by_key(|&i| (s.ts[i], i));
    }
    let mut classifier = classify::Classifier::new(trace);
    for (src_index, source) in trace.sources.iter().enumerate() {
        let src = SourceId(src_index as u32);
        let mut found_by = StepSource::None;
        let mut bounds: Vec<Bounds> = Vec::new();
        if !options.ignore_markers {
            bounds = markers(trace, &host[src_index]);
            if !bounds.is_empty() {
                found_by = StepSource::Markers;
            } else {
                bounds = framework_steps(trace, &host[src_index]);
                if !bounds.is_empty() {
                    found_by = StepSource::Framework;
                }
            }
        }
        if bounds.is_empty() {
            if let Some((period, ratio, found)) = periodic_steps(trace, src) {
                found_by = StepSource::Period {
                    period,
                    match_ratio: ratio,
                };
                bounds = found;
            }
        }
        bounds.sort_by_key(|b| b.1);
        let source_work = &work[src_index];
        if bounds.is_empty() && source_work.is_empty() && found_by == StepSource::None {
            continue;
        }
        let longest = source_work.iter().map(|&i| s.dur[i]).max().unwrap_or(0);
        let steps = bounds
            .into_iter()
            .map(|(name, start, end)| {
                step_breakdown(
                    trace,
                    &mut classifier,
                    source_work,
                    longest,
                    name,
                    start,
                    end,
                )
            })
            .collect();
        result.push(SourceSteps {
            file: source.path.clone(),
            rank: source.rank,
            found_by,
            steps,
        });
    }
    result
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

/// The training function Keras runs once per step (`steps_per_execution` batches): its
/// TensorFlow function names under Keras 3 and Keras 2.
const KERAS_TRAIN_FUNCTIONS: [&str; 3] = [
    "multi_step_on_iterator",
    "one_step_on_iterator",
    "train_function",
];

/// Steps as the frameworks' profilers record them in an XPlane, for programs that mark
/// none: each call of Keras's train function (a TensorFlow function call on the Python
/// thread), else each call of the JAX function jitted most often (`PjitFunction(f)`;
/// the first call compiles, every call executes once, so calls and not compilations are
/// the steps). A JAX call returns before its computation ends (dispatch is
/// asynchronous): its step runs until the last op of its XLA module (`jit_f`) that
/// started before the next call.
fn framework_steps(trace: &Trace, host: &[usize]) -> Vec<Bounds> {
    let s = &trace.slices;
    // Outermost slices only: each record appears once per call even where a profiler
    // nests two copies (JAX's Python and C++ TraceMes).
    let outermost = |i: usize, name: opscope_model::StrId| {
        let mut p = s.parent[i];
        while p != NONE {
            if s.name[p as usize] == name {
                return false;
            }
            p = s.parent[p as usize];
        }
        true
    };
    let keras: Vec<usize> = host
        .iter()
        .copied()
        .filter(|&i| KERAS_TRAIN_FUNCTIONS.contains(&trace.str(s.name[i])))
        .filter(|&i| {
            let mut p = s.parent[i];
            while p != NONE {
                if KERAS_TRAIN_FUNCTIONS.contains(&trace.str(s.name[p as usize])) {
                    return false;
                }
                p = s.parent[p as usize];
            }
            true
        })
        .collect();
    if keras.len() >= 2 {
        let mut found: Vec<Bounds> = keras
            .iter()
            .map(|&i| (trace.str(s.name[i]).to_string(), s.ts[i], s.end(i)))
            .collect();
        found.sort_by_key(|b| b.1);
        return found;
    }
    let mut calls: hashbrown::HashMap<&str, Vec<usize>> = Default::default();
    for &i in host {
        let name = trace.str(s.name[i]);
        if let Some(f) = name
            .strip_prefix("PjitFunction(")
            .and_then(|r| r.strip_suffix(')'))
        {
            if outermost(i, s.name[i]) {
                calls.entry(f).or_default().push(i);
            }
        }
    }
    // The step function is the one whose own XLA module ran most often (JAX's helpers,
    // `add` or `_normal`, are called often too but run little or nothing of their own),
    // then the most called; ties go to the name, independent of hash order.
    let key = trace.strings.find("hlo_module");
    let mut best: Option<((usize, usize), &str, Vec<Bounds>)> = None;
    let mut names: Vec<(&str, Vec<usize>)> =
        calls.into_iter().filter(|(_, c)| c.len() >= 2).collect();
    names.sort_by(|a, b| a.0.cmp(b.0));
    for (function, mut calls) in names {
        calls.sort_by_key(|&i| s.ts[i]);
        let module = trace.strings.find(&format!("jit_{function}"));
        let mut ops: Vec<(i64, i64)> = match (module, key) {
            (Some(module), Some(key)) => host
                .iter()
                .copied()
                .filter(|&i| {
                    trace.args.find(s.args[i], key) == Some(opscope_model::ArgValue::Str(module))
                })
                .map(|i| (s.ts[i], s.end(i)))
                .collect(),
            _ => Vec::new(),
        };
        ops.sort_unstable();
        let mut executed = 0;
        let bounds: Vec<Bounds> = calls
            .iter()
            .enumerate()
            .map(|(k, &i)| {
                let next = calls.get(k + 1).map_or(i64::MAX, |&n| s.ts[n]);
                let from = ops.partition_point(|o| o.0 < s.ts[i]);
                let mine = ops[from..].iter().take_while(|o| o.0 < next);
                let mut end = mine.clone().map(|o| o.1).fold(s.end(i), i64::max);
                executed += usize::from(mine.count() > 0);
                // The calling thread may be waiting for the result (block_until_ready,
                // a copy to the host) when the computation ends: the step ends when
                // that wait does, if it ends before the next call.
                let track = opscope_model::TrackId(s.track[i]);
                let mut around = trace.enclosing_slice(track, end).map(|j| j as usize);
                while let Some(j) = around {
                    if s.end(j) < next {
                        end = end.max(s.end(j));
                    }
                    let p = s.parent[j];
                    around = (p != NONE).then_some(p as usize);
                }
                (format!("{function} call {k}"), s.ts[i], end)
            })
            .collect();
        let score = (executed, bounds.len());
        if best.as_ref().is_none_or(|b| score > b.0) {
            best = Some((score, function, bounds));
        }
    }
    best.map_or_else(Vec::new, |b| b.2)
}

/// The step markers of each source (by source index): name, start and end.
pub fn step_markers(trace: &Trace) -> Vec<Vec<Bounds>> {
    let s = &trace.slices;
    let mut host: Vec<Vec<usize>> = vec![Vec::new(); trace.sources.len()];
    for i in 0..s.len() {
        if trace.tracks[s.track[i] as usize].kind == TrackKind::Thread {
            if let Some(src) = correlate::source_of(trace, i) {
                host[src.index()].push(i);
            }
        }
    }
    host.iter().map(|h| markers(trace, h)).collect()
}

/// The device time of one step: `work` is the source's device work by start time, none
/// of it longer than `longest`.
fn step_breakdown(
    trace: &Trace,
    classifier: &mut classify::Classifier,
    work: &[usize],
    longest: i64,
    name: String,
    start: i64,
    end: i64,
) -> Step {
    let s = &trace.slices;
    let mut spans: [Vec<(i64, i64)>; 3] = Default::default();
    let mut kernels = 0;
    // Only work starting after `start - longest` can reach into the step.
    let from = work.partition_point(|&i| s.ts[i] < start.saturating_sub(longest));
    for &i in work[from..].iter().take_while(|&&i| s.ts[i] < end) {
        let (a, b) = (s.ts[i].max(start), s.end(i).min(end));
        if a < b {
            let class = classifier.class(i);
            let slot = WorkClass::ALL.iter().position(|c| *c == class).unwrap_or(0);
            spans[slot].push((a, b));
        }
        if s.ts[i] >= start {
            kernels += 1;
        }
    }
    let sets = spans.map(IntervalSet::from_spans);
    let busy = sets[0].union(&sets[1]).union(&sets[2]).total();
    Step {
        name,
        start_ns: start,
        dur_ns: end - start,
        device_busy_ns: busy,
        device_idle_ns: (end - start) - busy,
        computation_ns: sets[0].total(),
        communication_ns: sets[1].total(),
        memory_ns: sets[2].total(),
        kernels,
    }
}

/// The smallest share of ops that must equal the op one period later.
const MIN_MATCH: f64 = 0.9;

/// Whether slice `i` is an op with no op around it (step and annotation ranges do not
/// count, so the search sees the same ops with or without markers).
fn is_outer_op(trace: &Trace, i: usize) -> bool {
    let s = &trace.slices;
    if s.kind(i) != SliceKind::Op {
        return false;
    }
    let mut p = s.parent[i];
    while p != NONE {
        if s.kind(p as usize) == SliceKind::Op {
            return false;
        }
        p = s.parent[p as usize];
    }
    true
}

/// A step as found: name, start and end.
pub type Bounds = (String, i64, i64);

/// Steps from the repeating sequence of outer ops on the source's busiest thread:
/// `(period, match ratio, steps)`.
///
/// A step runs each of some ops once, so the step count is the number of times such an
/// op occurs. Trying counts from the fewest (longest steps) up, the period is the
/// typical distance between the occurrences of the ops with that count; it is accepted
/// when nearly every op equals the op one period later. Steps then start at each
/// occurrence of the op that starts the first period.
fn periodic_steps(trace: &Trace, src: SourceId) -> Option<(usize, f64, Vec<Bounds>)> {
    let s = &trace.slices;
    // The thread track with the most outer-op time.
    let mut best: Option<(usize, i64)> = None;
    for (t, track) in trace.tracks.iter().enumerate() {
        let from_source = track
            .process
            .is_some_and(|p| trace.processes[p.index()].source == src);
        if track.kind != TrackKind::Thread || !from_source {
            continue;
        }
        let busy: i64 = trace
            .track_slices(opscope_model::TrackId(t as u32))
            .filter(|&i| is_outer_op(trace, i))
            .map(|i| s.dur[i])
            .sum();
        if busy > 0 && best.is_none_or(|b| busy > b.1) {
            best = Some((t, busy));
        }
    }
    let track = opscope_model::TrackId(best?.0 as u32);
    let ops: Vec<usize> = trace
        .track_slices(track)
        .filter(|&i| is_outer_op(trace, i))
        .collect();
    let names: Vec<opscope_model::StrId> = ops.iter().map(|&i| s.name[i]).collect();
    let n = names.len();
    let mut positions: hashbrown::HashMap<opscope_model::StrId, Vec<usize>> = Default::default();
    for (k, name) in names.iter().enumerate() {
        positions.entry(*name).or_default().push(k);
    }
    let mut counts: Vec<usize> = positions
        .values()
        .map(Vec::len)
        .filter(|&c| c >= 2)
        .collect();
    counts.sort_unstable();
    counts.dedup();
    for count in counts {
        // The op of this count whose occurrences are most evenly spaced.
        let mut candidates: Vec<(&opscope_model::StrId, &Vec<usize>)> =
            positions.iter().filter(|(_, p)| p.len() == count).collect();
        // Ties (every op of a step is as evenly spaced) go to the op that comes first,
        // so that the result does not depend on hash order.
        candidates.sort_by_key(|(_, p)| {
            let gaps: Vec<usize> = p.windows(2).map(|w| w[1] - w[0]).collect();
            (
                gaps.iter().max().unwrap() - gaps.iter().min().unwrap(),
                p[0],
            )
        });
        let (_, marks) = candidates[0];
        let mut gaps: Vec<usize> = marks.windows(2).map(|w| w[1] - w[0]).collect();
        gaps.sort_unstable();
        let period = gaps[gaps.len() / 2];
        if period < 2 || period > n / 2 {
            continue;
        }
        let pairs = n - period;
        let same = (0..pairs)
            .filter(|&k| names[k] == names[k + period])
            .count();
        let ratio = same as f64 / pairs as f64;
        if ratio < MIN_MATCH {
            continue;
        }
        let steps = marks
            .iter()
            .enumerate()
            .map(|(k, &from)| {
                let end = match marks.get(k + 1) {
                    Some(&next) => s.ts[ops[next]],
                    None => s.end(ops[(from + period).min(n) - 1]),
                };
                (format!("step {k}"), s.ts[ops[from]], end)
            })
            .collect();
        return Some((period, ratio, steps));
    }
    None
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
