//! Training steps and what each spent: from step markers (`ProfilerStep#N`, and user
//! ranges named like `train_step_3` when there are none), or, when a trace has no
//! markers, from the period with which the sequence of top-level ops repeats — other
//! tools refuse such traces.

use opscope_model::{SliceKind, SourceId, Trace, TrackKind, NONE};
use serde::Serialize;

use crate::context::Context;
use crate::correlate;
use crate::distribution::Distribution;
use crate::gpu::classify::{self, WorkClass};
use crate::host::{HostSets, HostTime};
use crate::intervals::IntervalSet;
use crate::markers::{is_marker, similarity, Bounds, LAST_MATCH};
use crate::report::{Column, Line, Report, Reported, Table, Value};
use crate::roles::{is_loader as loader_source, role};

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
    /// The framework's own record of each step (Keras's batches or train-function
    /// calls, the calls of a function JAX jitted), as `calls` says.
    Framework { calls: String },
    /// The sequence of top-level ops on the busiest thread repeats every `period` ops;
    /// `match_ratio` of the ops equal the op one period later.
    Period { period: usize, match_ratio: f64 },
    /// Neither markers nor a repeating sequence.
    None,
    /// A DataLoader worker: the batches it fetches are its training process's steps.
    Loader,
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
    /// The host threads' time within the step: what a run without device work shows
    /// (collectives on CPUs are its communication).
    pub host: HostTime,
    /// Time within the step in which `opscope record` stood aside for a profiler the
    /// program ran itself: the ops are in the program's profile, so the time without
    /// them is no idle time.
    pub aside_ns: i64,
    /// Whether the step ends after the data of a file cut short (`--partial`): what
    /// ran in it after the cut is missing, so its breakdown would show it as idle.
    pub cut: bool,
}

impl Step {
    /// Whether opscope stood aside for most of the step: its breakdown says little.
    pub fn mostly_aside(&self) -> bool {
        self.aside_ns * 2 > self.dur_ns
    }

    /// Whether its breakdown tells how the step went: neither stood aside for nor cut.
    pub fn measured(&self) -> bool {
        !self.mostly_aside() && !self.cut
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct SourceSteps {
    #[serde(skip)]
    pub source: SourceId,
    pub file: String,
    pub rank: Option<u32>,
    /// What the source's process is: `rank 3` only where the trace says so, else
    /// `DataLoader worker 341`, `process 328`, or the profiler that wrote it.
    pub role: String,
    pub found_by: StepSource,
    /// Whether the steps ran work on a device: their breakdown is the device's, else
    /// the host threads'.
    pub on_device: bool,
    pub steps: Vec<Step>,
    /// The program's own profilers that `opscope record` stood aside for during some
    /// of the steps (`a PyTorch profiler`): those steps' ops are in their profiles.
    pub aside_for: Vec<String>,
    /// Whether the source's file was cut short (`--partial`): its steps past the end
    /// of its data are [`Step::cut`], and those before may lack events the file held
    /// after the cut.
    pub cut_short: bool,
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
pub fn report(cx: &Context, options: &StepOptions) -> StepsReport {
    let sources = steps(cx, options);
    StepsReport {
        across: across(cx.trace(), &sources),
        sources,
    }
}

/// The ranks' per-step medians compared. The files of one process (a profiler's
/// successive windows, a recorded file beside the program's own profile) are one rank:
/// their steps are pooled, else a process would be its own straggler.
fn across(trace: &Trace, sources: &[SourceSteps]) -> Option<crate::across::Across> {
    // A DataLoader worker's batches are no training steps to compare with a rank's.
    let ranks: Vec<&SourceSteps> = sources
        .iter()
        .filter(|s| !s.steps.is_empty() && !is_loader(s))
        .collect();
    let keys: Vec<_> = ranks
        .iter()
        .map(|s| crate::roles::process_key(trace, s.source))
        .collect();
    let figures: Vec<(String, Vec<(&'static str, f64)>)> = crate::across::groups(&keys)
        .into_iter()
        .map(|group| {
            let members: Vec<&SourceSteps> = group.iter().map(|&i| ranks[i]).collect();
            // A run with device work is compared by it, from the files that have it.
            let on_device = members.iter().any(|s| s.on_device);
            let all: Vec<&Step> = members
                .iter()
                .filter(|s| s.on_device == on_device)
                .flat_map(|s| &s.steps)
                .collect();
            // Steps whose ops the program's own profiler holds, or that a cut file
            // ended in, have no breakdown here.
            let measured: Vec<&Step> = match all.iter().any(|x| x.measured()) {
                false => all,
                true => all.into_iter().filter(|x| x.measured()).collect(),
            };
            let of = |f: fn(&Step) -> i64| median(measured.iter().map(|x| f(x) as f64).collect());
            // A run without device work is compared by its host threads' time.
            let figures = if on_device {
                vec![
                    ("median_step_ns", of(|x| x.dur_ns)),
                    ("median_computation_ns", of(|x| x.computation_ns)),
                    ("median_communication_ns", of(|x| x.communication_ns)),
                    ("median_device_idle_ns", of(|x| x.device_idle_ns)),
                ]
            } else {
                vec![
                    ("median_step_ns", of(|x| x.dur_ns)),
                    ("median_computation_ns", of(|x| x.host.computation_ns)),
                    ("median_communication_ns", of(|x| x.host.communication_ns)),
                    ("median_host_idle_ns", of(|x| x.host.idle_ns)),
                ]
            };
            let first = members[0];
            (crate::across::label(&first.file, first.rank, None), figures)
        })
        .collect();
    crate::across::summarize(&figures, "median_computation_ns")
}

/// Whether a source's steps are a DataLoader worker's batches, no training steps.
fn is_loader(source: &SourceSteps) -> bool {
    source.found_by == StepSource::Loader
}

impl StepSource {
    /// Where steps came from, for people: `from step markers`.
    pub fn how(&self) -> String {
        match self {
            StepSource::Markers => "from step markers".to_string(),
            StepSource::Framework { calls } => format!("from the framework's records: {calls}"),
            StepSource::Period { .. } => "from the repeating op sequence".to_string(),
            StepSource::None => "none found".to_string(),
            StepSource::Loader => "a DataLoader worker's batches, no steps".to_string(),
        }
    }
}

/// One line on the steps of a run: `steps: 12 per rank, 2 ranks (from step markers),
/// median 4.1 ms, 1.4 ms to 12.1 ms`. Only the program's steps: a DataLoader worker's
/// batches are not steps of their own.
pub fn headline(sources: &[SourceSteps]) -> Option<Line> {
    let sources: Vec<&SourceSteps> = sources
        .iter()
        .filter(|s| !s.steps.is_empty() && !is_loader(s))
        .collect();
    let times: Vec<f64> = sources
        .iter()
        .flat_map(|s| s.steps.iter().map(|step| step.dur_ns as f64))
        .collect();
    let d = Distribution::of(&times)?;
    let counts: Vec<usize> = sources.iter().map(|s| s.steps.len()).collect();
    let count = if sources.len() == 1 {
        counts[0].to_string()
    } else if counts.iter().all(|&c| c == counts[0]) {
        let (one, many) = if sources.iter().all(|s| s.rank.is_some()) {
            ("rank", "ranks")
        } else {
            ("process", "processes")
        };
        format!("{} per {one}, {} {many}", counts[0], sources.len())
    } else {
        sources
            .iter()
            .map(|s| format!("{} {}", s.role, s.steps.len()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut how: Vec<String> = sources.iter().map(|s| s.found_by.how()).collect();
    how.dedup();
    let how = if how.len() == 1 {
        how.remove(0)
    } else {
        sources
            .iter()
            .map(|s| format!("{} {}", s.role, s.found_by.how()))
            .collect::<Vec<_>>()
            .join("; ")
    };
    Some(
        Line::of(format!("steps: {count} ({how}), median "))
            .value(Value::Duration(d.p50))
            .text(", ")
            .value(Value::Duration(d.min))
            .text(" to ")
            .value(Value::Duration(d.max)),
    )
}

pub fn steps(cx: &Context, options: &StepOptions) -> Vec<SourceSteps> {
    let trace = cx.trace();
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
    let aside = crate::aside::of_sources(trace);
    let mut classifier = classify::Classifier::new(trace);
    let hosts = HostSets::of_sources(trace);
    for (src_index, source) in trace.sources.iter().enumerate() {
        let src = SourceId(src_index as u32);
        let role = role(trace, src);
        let mut found_by = StepSource::None;
        let mut bounds: Vec<Bounds> = Vec::new();
        // A DataLoader worker fetches batches for its training process, whose steps
        // they are: its own repeats are no steps (they made pseudo-steps by the
        // hundred beside a rank's).
        let loader = loader_source(trace, src);
        if loader {
            found_by = StepSource::Loader;
        } else if !options.ignore_markers {
            bounds = cx.step_markers()[src_index].clone();
            if !bounds.is_empty() {
                found_by = StepSource::Markers;
            } else {
                if let Some((calls, found)) = framework_steps(trace, &host[src_index]) {
                    found_by = StepSource::Framework { calls };
                    bounds = found;
                }
            }
        }
        if bounds.is_empty() && !loader {
            let source_end = host[src_index]
                .iter()
                .chain(&work[src_index])
                .map(|&i| s.end(i))
                .max()
                .unwrap_or(i64::MAX);
            if let Some((period, ratio, found)) = periodic_steps(trace, src, source_end) {
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
        let data_end = match trace.is_cut(src) {
            true => end_of_data(trace, &host[src_index], source_work),
            false => i64::MAX,
        };
        let steps: Vec<Step> = bounds
            .into_iter()
            .map(|(name, start, end)| {
                let mut step = step_breakdown(
                    trace,
                    &mut classifier,
                    source_work,
                    longest,
                    name,
                    start,
                    end,
                );
                step.host = hosts[src_index].within(start, end);
                step.aside_ns = aside[src_index].times.clipped(start, end).total();
                step.cut = end > data_end;
                step
            })
            .collect();
        let aside_for = match steps.iter().any(|s| s.aside_ns > 0) {
            true => aside[src_index].what.clone(),
            false => Vec::new(),
        };
        result.push(SourceSteps {
            source: src,
            file: source.path.clone(),
            rank: source.rank,
            role,
            found_by,
            on_device: steps.iter().any(|s| s.kernels > 0 || s.device_busy_ns > 0),
            steps,
            aside_for,
            cut_short: trace.is_cut(src),
        });
    }
    result
}

/// The name of the range `opscope record`'s Python bootstrap puts around each call of
/// Keras's train function. In a session, TensorFlow's own record of the call is
/// preferred (it leaves out Keras's Python work around the call); the marks stand in
/// where the program's own profiler kept opscope's from recording.
pub const KERAS_STEP_MARK: &str = "keras train_function call";

/// The range the bootstrap puts around each batch of Keras's `fit`, from the batch's
/// `on_train_batch_begin` to the return of its `on_train_batch_end`: the step as the fit
/// loop runs it (the callbacks' work in it, the epoch's end not), with any backend.
pub const KERAS_BATCH_MARK: &str = "keras train step";

/// How the bootstrap names the range around each call of a function the program jitted
/// with `jax.jit`: this, then the function's name.
pub const JAX_CALL_MARK: &str = "jax call ";

/// Whether a range is one the bootstrap of `opscope record` marks around a framework's
/// calls (Keras's train function and batches, JAX's jitted calls, the time it stood
/// aside): no op of the program, though it holds the program's time.
pub fn is_bootstrap_mark(name: &str) -> bool {
    name == KERAS_STEP_MARK
        || name == KERAS_BATCH_MARK
        || name.starts_with(JAX_CALL_MARK)
        || name.starts_with(crate::aside::ASIDE_MARK)
}

/// The training function Keras runs once per step (`steps_per_execution` batches): its
/// TensorFlow function names under Keras 3 and Keras 2.
const KERAS_TRAIN_FUNCTIONS: [&str; 3] = [
    "multi_step_on_iterator",
    "one_step_on_iterator",
    "train_function",
];

/// The name of the step function a slice records a call of, for JAX: the bootstrap's
/// mark (`jax call f`, true) or JAX's own record (`PjitFunction(f)`, false).
fn jax_call(name: &str) -> Option<(&str, bool)> {
    if let Some(f) = name.strip_prefix(JAX_CALL_MARK) {
        return Some((f, true));
    }
    name.strip_prefix("PjitFunction(")
        .and_then(|r| r.strip_suffix(')'))
        .map(|f| (f, false))
}

/// Whether no slice around `i` on its track satisfies `around`.
fn outermost(trace: &Trace, i: usize, around: impl Fn(usize) -> bool) -> bool {
    let s = &trace.slices;
    let mut p = s.parent[i];
    while p != NONE {
        if around(p as usize) {
            return false;
        }
        p = s.parent[p as usize];
    }
    true
}

/// `preferred`, and each of `others` that overlaps none of them (the same call recorded
/// twice, by opscope's mark and by the framework's profile), in time order.
fn merge_calls(trace: &Trace, preferred: &[usize], others: &[usize]) -> Vec<usize> {
    let s = &trace.slices;
    let mut spans: Vec<(i64, i64)> = preferred.iter().map(|&i| (s.ts[i], s.end(i))).collect();
    spans.sort_unstable();
    let mut calls: Vec<usize> = preferred.to_vec();
    for &i in others {
        let (a, b) = (s.ts[i], s.end(i));
        let from = spans.partition_point(|sp| sp.1 < a);
        if spans[from..].first().is_none_or(|sp| sp.0 > b) {
            calls.push(i);
        }
    }
    calls.sort_by_key(|&i| (s.ts[i], i));
    calls
}

/// Steps as the frameworks record them, for programs that mark none:
/// - Keras: each batch of `fit` as the bootstrap marks it; else each call of its train
///   function (TensorFlow's record, and opscope's marks where TensorFlow's profiler did
///   not record).
/// - JAX: each iteration of the loop that calls the program's step function, from one
///   call to the next, the last until its work ends (its XLA module's ops, the wait for
///   its result). The step function is the one called most often with the most work,
///   among those called at least a quarter as often as any: set-up helpers
///   (`jax.random.normal`) run a few times before the loop, JAX's own per-operation
///   functions (`add`) run often but do little. Calls come from the bootstrap's marks of
///   the program's `jax.jit` functions, and from JAX's profile where opscope's was on.
fn framework_steps(trace: &Trace, host: &[usize]) -> Option<(String, Vec<Bounds>)> {
    let s = &trace.slices;
    let named = |names: &[&str]| -> Vec<usize> {
        host.iter()
            .copied()
            .filter(|&i| names.contains(&trace.str(s.name[i])))
            .filter(|&i| outermost(trace, i, |p| names.contains(&trace.str(s.name[p]))))
            .collect()
    };
    let mut batches = named(&[KERAS_BATCH_MARK]);
    if batches.len() >= 2 {
        batches.sort_by_key(|&i| (s.ts[i], i));
        let bounds = batches
            .iter()
            .enumerate()
            .map(|(k, &i)| (format!("{KERAS_BATCH_MARK} {k}"), s.ts[i], s.end(i)))
            .collect();
        return Some(("Keras fit's batches".to_string(), bounds));
    }
    let keras = merge_calls(
        trace,
        &named(&KERAS_TRAIN_FUNCTIONS),
        &named(&[KERAS_STEP_MARK]),
    );
    if keras.len() >= 2 {
        let bounds = keras
            .iter()
            .map(|&i| (trace.str(s.name[i]).to_string(), s.ts[i], s.end(i)))
            .collect();
        return Some(("calls of Keras's train function".to_string(), bounds));
    }
    jax_steps(trace, host)
}

/// The JAX part of [`framework_steps`].
fn jax_steps(trace: &Trace, host: &[usize]) -> Option<(String, Vec<Bounds>)> {
    let s = &trace.slices;
    // Per function: opscope's marks and JAX's records of its calls, the outermost jitted
    // calls only (a jitted function calls others while it is traced).
    let mut calls: hashbrown::HashMap<&str, (Vec<usize>, Vec<usize>)> = Default::default();
    for &i in host {
        let Some((function, marked)) = jax_call(trace.str(s.name[i])) else {
            continue;
        };
        if outermost(trace, i, |p| jax_call(trace.str(s.name[p])).is_some()) {
            let entry = calls.entry(function).or_default();
            if marked {
                entry.0.push(i);
            } else {
                entry.1.push(i);
            }
        }
    }
    let mut functions: Vec<(&str, bool, Vec<usize>)> = calls
        .into_iter()
        .map(|(f, (marks, records))| (f, !marks.is_empty(), merge_calls(trace, &marks, &records)))
        .filter(|(_, _, c)| c.len() >= 2)
        .collect();
    functions.sort_by(|a, b| a.0.cmp(b.0));
    let most = functions.iter().map(|f| f.2.len()).max().unwrap_or(0);
    let key = trace.strings.find("hlo_module");
    // Marked by opscope (the program's own `jax.jit`), called as often as the loop,
    // the most work.
    type Score = (bool, bool, i64);
    let mut best: Option<(Score, &str, Vec<CallSpan>)> = None;
    for (function, marked, calls) in functions {
        let spans = call_spans(trace, function, &calls, host, key);
        let work: i64 = spans.iter().map(|c| c.end - c.start).sum();
        let score = (marked, calls.len() * 4 >= most, work);
        if best.as_ref().is_none_or(|b| score > b.0) {
            best = Some((score, function, spans));
        }
    }
    let (_, function, mut spans) = best?;
    let mut lengths: Vec<i64> = spans.windows(2).map(|w| w[1].start - w[0].start).collect();
    lengths.sort_unstable();
    let typical = lengths.get(lengths.len() / 2).copied();
    if let (Some(typical), Some(last)) = (typical, spans.last_mut()) {
        // The last call's work unknown (JAX's profile was the program's, or off): the
        // step runs until the thread does something else (the program stopping its
        // profiler after the loop), if that comes within two steps' time; else as
        // long as the others.
        if last.end == last.call_end {
            let range = trace.track_slices(last.track);
            let after = range.start + s.ts[range.clone()].partition_point(|&t| t < last.end);
            let next = (after < range.end).then(|| s.ts[after]);
            let until = match next {
                Some(next) if next <= last.start + 2 * typical => next,
                _ => last.start + typical,
            };
            let bound = host.iter().map(|&i| s.end(i)).max().unwrap_or(last.end);
            last.end = last.end.max(until.min(bound));
        }
    }
    // An iteration runs from one call to the next: what the loop does between calls
    // (waiting for the result, logging, loading the next batch) is the step's. A loop
    // that does not wait for each result dispatches ahead of the computation: there a
    // step begins when the computation before it ends, not at its call (which came
    // microseconds after the one before, while the first still ran).
    let mut starts: Vec<i64> = Vec::with_capacity(spans.len());
    let mut done = i64::MIN;
    for span in &spans {
        let start = span
            .start
            .max(done)
            .max(starts.last().copied().unwrap_or(i64::MIN));
        starts.push(start);
        if let Some((_, end)) = span.execution {
            done = done.max(end);
        }
    }
    let last = spans.len() - 1;
    let bounds = (0..spans.len())
        .map(|k| {
            let end = starts.get(k + 1).copied().unwrap_or(spans[last].end);
            (
                format!("{function} call {k}"),
                starts[k],
                end.max(starts[k]),
            )
        })
        .collect();
    Some((format!("calls of the jitted {function}"), bounds))
}

/// One call of a jitted function and the end of the work it started.
struct CallSpan {
    start: i64,
    call_end: i64,
    end: i64,
    track: opscope_model::TrackId,
    /// The run of its XLA module the call started, where ops name their run
    /// (`run_id`): from its first op's start to its last op's end.
    execution: Option<(i64, i64)>,
}

/// The runs of an XLA module, from its ops (`(start, end, run_id)`): each run's first
/// start and last end, in time order.
fn executions(ops: &[(i64, i64, Option<u64>)]) -> Vec<(i64, i64)> {
    let mut runs: hashbrown::HashMap<u64, (i64, i64)> = Default::default();
    for &(a, b, run) in ops {
        if let Some(run) = run {
            let r = runs.entry(run).or_insert((a, b));
            *r = (r.0.min(a), r.1.max(b));
        }
    }
    let mut runs: Vec<(i64, i64)> = runs.into_values().collect();
    runs.sort_unstable();
    runs
}

/// Each call of a jitted function with the end of its work: the call returns before its
/// computation ends (dispatch is asynchronous), so the work runs until the last op of
/// its XLA module (`jit_f`) that started before the next call, or until a wait for its
/// result the call's thread began after the call (block_until_ready, a copy to the
/// host), if that ends before the next call.
fn call_spans(
    trace: &Trace,
    function: &str,
    calls: &[usize],
    host: &[usize],
    key: Option<opscope_model::StrId>,
) -> Vec<CallSpan> {
    let s = &trace.slices;
    let module = trace.strings.find(&format!("jit_{function}"));
    let run_key = trace.strings.find("run_id");
    let run_of = |i: usize| match trace.args.find(s.args[i], run_key?)? {
        // Only told apart, never ordered: the bits are the run.
        opscope_model::ArgValue::Int(run) => Some(run as u64),
        opscope_model::ArgValue::UInt(run) => Some(run),
        // xprof's trace viewer JSON writes every stat as a string.
        opscope_model::ArgValue::Str(run) => trace.str(run).parse().ok(),
        _ => None,
    };
    let mut ops: Vec<(i64, i64, Option<u64>)> = match (module, key) {
        (Some(module), Some(key)) => host
            .iter()
            .copied()
            .filter(|&i| {
                trace.args.find(s.args[i], key) == Some(opscope_model::ArgValue::Str(module))
            })
            .map(|i| (s.ts[i], s.end(i), run_of(i)))
            .collect(),
        _ => Vec::new(),
    };
    ops.sort_unstable();
    // Each call starts the next run that begins after it (runs of a module on one
    // device go in the order of their calls).
    let mut runs = executions(&ops).into_iter().peekable();
    calls
        .iter()
        .enumerate()
        .map(|(k, &i)| {
            let next = calls.get(k + 1).map_or(i64::MAX, |&n| s.ts[n]);
            while runs.next_if(|r| r.0 < s.ts[i]).is_some() {}
            let execution = runs.next();
            let from = ops.partition_point(|o| o.0 < s.ts[i]);
            let mut end = ops[from..]
                .iter()
                .take_while(|o| o.0 < next)
                .map(|o| o.1)
                .fold(s.end(i), i64::max);
            if let Some((_, run_end)) = execution {
                end = end.max(run_end);
            }
            // Only a wait begun by the step counts: what encloses the call (the
            // program's loop, the profiler's session) would stretch the last step,
            // which no next call bounds, to its own end.
            let track = opscope_model::TrackId(s.track[i]);
            let mut around = trace.enclosing_slice(track, end).map(|j| j as usize);
            while let Some(j) = around {
                if s.end(j) < next && s.ts[j] >= s.ts[i] {
                    end = end.max(s.end(j));
                }
                let p = s.parent[j];
                around = (p != NONE).then_some(p as usize);
            }
            CallSpan {
                start: s.ts[i],
                call_end: s.end(i),
                end,
                track,
                execution,
            }
        })
        .collect()
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
        host: HostTime::default(),
        aside_ns: 0,
        cut: false,
    }
}

/// Where the data of a source cut short ends: the earliest of the last ends of its host
/// ops and of its device work (a file may hold each in a block of its own, so the cut
/// may have taken the end of one and not the other). Step markers are left out: their
/// ranges are written whole, with their starts.
fn end_of_data(trace: &Trace, host: &[usize], work: &[usize]) -> i64 {
    let s = &trace.slices;
    let ops = host
        .iter()
        .filter(|&&i| !matches!(s.kind(i), SliceKind::Step | SliceKind::Annotation))
        .map(|&i| s.end(i))
        .max();
    let device = work.iter().map(|&i| s.end(i)).max();
    [ops, device]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(i64::MIN)
}

/// The smallest similarity of consecutive steps (the median over the steps) for a cut
/// to be accepted.
const MIN_MATCH: f64 = 0.9;

/// The smallest share of the op sequence the steps must cover: an op that runs twice
/// in the set-up before a loop does not make two steps.
const MIN_COVER: f64 = 0.5;

/// Whether slice `i` is an op or a user range (`record_function`, DataLoader's
/// `enumerate(DataLoader)#…__next__`, `Optimizer.step#…`) with none around it but step
/// markers. Ranges count: a step's first op can come long after its first range (the
/// data wait, `zero_grad`).
fn is_outer_item(trace: &Trace, i: usize) -> bool {
    let s = &trace.slices;
    let item = |j: usize| {
        matches!(s.kind(j), SliceKind::Op | SliceKind::Annotation) && !is_marker(trace, j)
    };
    if !item(i) {
        return false;
    }
    let mut p = s.parent[i];
    while p != NONE {
        if item(p as usize) {
            return false;
        }
        p = s.parent[p as usize];
    }
    true
}

/// The thread tracks of a source in the order the period search tries them: the main
/// thread (tid = pid: the one running the training loop), then by outer-op time, and
/// last the threads that only run autograd's backward functions (they start each step
/// late, after the forward pass, and are busiest on large models).
fn threads_to_search(trace: &Trace, src: SourceId) -> Vec<opscope_model::TrackId> {
    let s = &trace.slices;
    let mut found: Vec<(bool, bool, i64, usize)> = Vec::new();
    for (t, track) in trace.tracks.iter().enumerate() {
        let Some(process) = track.process else {
            continue;
        };
        let process = &trace.processes[process.index()];
        if track.kind != TrackKind::Thread || process.source != src {
            continue;
        }
        let mut busy = 0;
        let mut backward_only = true;
        for i in trace.track_slices(opscope_model::TrackId(t as u32)) {
            if is_outer_item(trace, i) {
                busy += s.dur[i];
                backward_only &= trace
                    .str(s.name[i])
                    .starts_with("autograd::engine::evaluate_function");
            }
        }
        if busy == 0 {
            continue;
        }
        let main = track
            .thread
            .is_some_and(|th| trace.threads[th.index()].tid == process.pid);
        found.push((backward_only, !main, -busy, t));
    }
    found.sort_unstable();
    found
        .into_iter()
        .map(|f| opscope_model::TrackId(f.3 as u32))
        .collect()
}

/// Steps from the repeating sequence of outer ops and ranges on the first thread of
/// [`threads_to_search`] that has one: `(ops per step, similarity, steps)`.
fn periodic_steps(
    trace: &Trace,
    src: SourceId,
    source_end: i64,
) -> Option<(usize, f64, Vec<Bounds>)> {
    threads_to_search(trace, src)
        .into_iter()
        .find_map(|track| periodic_on(trace, track, source_end))
}

/// Whether a range is an optimizer's update as PyTorch names it
/// (`Optimizer.step#SGD.step`): once per training step.
fn is_optimizer_update(name: &str) -> bool {
    name.starts_with("Optimizer.step#")
}

/// The period search on one thread.
///
/// A step runs some ops exactly once, so the step count is the number of times such an
/// op occurs. Trying counts from the fewest (longest steps) up, the op of that count
/// whose occurrences are most evenly spaced cuts the sequence into runs; the cut is
/// accepted when consecutive runs are alike as multisets of ops (steps differ by a few
/// ops from one to the next — a bucketed all-reduce, a data-dependent branch — so a
/// position-by-position match would refuse them). Steps then start at the op that
/// comes first among those that run once in every run: the head of the loop (the data
/// fetch), which may come before the op that cut.
/// No step ends after `source_end`, the end of the source's last event.
fn periodic_on(
    trace: &Trace,
    track: opscope_model::TrackId,
    source_end: i64,
) -> Option<(usize, f64, Vec<Bounds>)> {
    let s = &trace.slices;
    let ops: Vec<usize> = trace
        .track_slices(track)
        .filter(|&i| is_outer_item(trace, i))
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
    // An optimizer's update runs once a step: its count is tried first. From the fewest
    // up, an op run once an epoch (with two epochs, the DataLoader's `__iter__`) cut the
    // loop into epochs, as alike as steps are.
    let updates: Vec<usize> = positions
        .iter()
        .filter(|(name, _)| is_optimizer_update(trace.str(**name)))
        .map(|(_, p)| p.len())
        .collect();
    counts.sort_by_key(|c| (!updates.contains(c), *c));
    for count in counts {
        // Ties (every op of a step is as evenly spaced) go to the op that comes first,
        // so that the result does not depend on hash order.
        let Some(marks) = positions
            .values()
            .filter(|p| p.len() == count)
            .min_by_key(|p| {
                let gaps = p.windows(2).map(|w| w[1] - w[0]);
                (gaps.clone().max().unwrap() - gaps.min().unwrap(), p[0])
            })
        else {
            continue;
        };
        let mut gaps: Vec<usize> = marks.windows(2).map(|w| w[1] - w[0]).collect();
        gaps.sort_unstable();
        let period = gaps[gaps.len() / 2];
        if period < 2 || ((count * period) as f64) < MIN_COVER * n as f64 {
            continue;
        }
        // Runs between the marks, the last as long as the one before it.
        let mut runs: Vec<(usize, usize)> = marks.windows(2).map(|w| (w[0], w[1])).collect();
        let last = *marks.last().unwrap();
        runs.push((
            last,
            (last + (runs.last().unwrap().1 - runs.last().unwrap().0)).min(n),
        ));
        let mut alike: Vec<f64> = runs
            .windows(2)
            .map(|w| similarity(&names[w[0].0..w[0].1], &names[w[1].0..w[1].1]))
            .collect();
        alike.sort_by(f64::total_cmp);
        let ratio = alike[alike.len() / 2];
        if ratio < MIN_MATCH {
            continue;
        }
        // The loop's head: of the ops that run once in every full run, the one that
        // first occurs earliest in the loop. An op's occurrences before the loop (in
        // the set-up) are those not one period apart from the next; and the loop began
        // at most two periods before the first mark (the first step may lack an op the
        // others run, so that the first mark falls in the second step).
        let full = &runs[..runs.len() - 1];
        let earliest = marks[0].saturating_sub(2 * period);
        let in_loop = |p: &Vec<usize>| {
            p.windows(2)
                .position(|w| (w[1] - w[0]).abs_diff(period) <= period / 2)
                .map(|at| p[at])
        };
        let head = positions
            .values()
            .filter(|p| {
                full.iter()
                    .all(|&(a, b)| p.iter().filter(|&&k| a <= k && k < b).count() == 1)
            })
            .filter_map(in_loop)
            .filter(|&k| k >= earliest)
            .min()
            .unwrap_or(marks[0]);
        let cuts: Vec<usize> = positions[&names[head]]
            .iter()
            .copied()
            .filter(|&k| k >= head)
            .collect();
        let mut steps: Vec<Bounds> = cuts
            .windows(2)
            .map(|w| (s.ts[ops[w[0]]], s.ts[ops[w[1]]]))
            .enumerate()
            .map(|(k, (a, b))| (format!("step {k}"), a, b))
            .collect();
        // What the steps do after their last op before the next step's head (the
        // loop's Python work, the data wait before the head's first range): the last
        // step has it too, though no next head shows where it ends.
        let mut tails: Vec<i64> = cuts
            .windows(2)
            .map(|w| s.ts[ops[w[1]]] - s.end(ops[w[1] - 1]))
            .collect();
        tails.sort_unstable();
        let tail = tails.get(tails.len() / 2).copied().unwrap_or(0).max(0);
        // The last step runs as many ops as the longest step before it at most (fewer
        // if the trace ends first), less the ops at its end that no step before ran
        // (what follows the loop); unlike the steps before, the last cut is no step if
        // it is unlike them (the loop's head ran once more to find the data exhausted).
        if let [.., before, last] = cuts[..] {
            let longest = cuts.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(1);
            let ran: hashbrown::HashSet<opscope_model::StrId> =
                names[cuts[0]..last].iter().copied().collect();
            let mut end = (last + longest).min(n);
            while end > last + 1 && !ran.contains(&names[end - 1]) {
                end -= 1;
            }
            if similarity(&names[before..last], &names[last..end]) >= LAST_MATCH {
                let k = steps.len();
                let work_end = s.end(ops[end - 1]);
                let until = (work_end + tail).min(source_end).max(work_end);
                steps.push((format!("step {k}"), s.ts[ops[last]], until));
            }
        }
        if steps.len() < 2 {
            continue;
        }
        return Some((period, ratio, steps));
    }
    None
}

/// The steps for which `which` holds, by runs of consecutive steps:
/// `8 steps: ProfilerStep#1 to ProfilerStep#4, ProfilerStep#6 to ProfilerStep#9`.
fn runs_of(steps: &[Step], which: impl Fn(&Step) -> bool) -> Option<String> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (k, _) in steps.iter().enumerate().filter(|(_, s)| which(s)) {
        match runs.last_mut() {
            Some(run) if run.1 + 1 == k => run.1 = k,
            _ => runs.push((k, k)),
        }
    }
    let count: usize = runs.iter().map(|(a, b)| b - a + 1).sum();
    let named: Vec<String> = runs
        .iter()
        .map(|&(a, b)| match a == b {
            true => steps[a].name.clone(),
            false => format!("{} to {}", steps[a].name, steps[b].name),
        })
        .collect();
    match count {
        0 => None,
        1 => Some(named.join("")),
        n => Some(format!("{n} steps: {}", named.join(", "))),
    }
}

/// How `steps` reads: per source how its steps were found, their times, and a row per
/// step; then the spread across ranks.
impl Reported for StepsReport {
    fn report(&self) -> Report {
        let mut report = Report::default();
        if self.sources.is_empty() {
            report.line(Line::of(
                "no steps: no step markers, and no repeating sequence of ops",
            ));
            return report;
        }
        for source in &self.sources {
            report.line(Line::of(format!("== {}: {}", source.role, source.file)));
            let n = source.steps.len();
            report.line(Line::of(match &source.found_by {
                StepSource::Markers => format!("{n} steps from step markers"),
                StepSource::Framework { calls } => {
                    format!("{n} steps from the framework's records: {calls}")
                }
                StepSource::Period {
                    period,
                    match_ratio,
                } => format!(
                    "no step markers: the top-level ops repeat every {period} ops ({:.0}% match), giving {n} steps",
                    match_ratio * 100.0
                ),
                StepSource::None => {
                    "no step markers, and the ops do not repeat: no steps".to_string()
                }
                StepSource::Loader => {
                    "a DataLoader worker: the batches it fetches are its training process's steps"
                        .to_string()
                }
            }));
            if matches!(source.found_by, StepSource::None | StepSource::Loader) {
                continue;
            }
            let durations: Vec<f64> = source
                .steps
                .iter()
                .filter(|s| !s.cut)
                .map(|s| s.dur_ns as f64)
                .collect();
            if let Some(d) = Distribution::of(&durations) {
                report.line(
                    Line::of("step time: mean ")
                        .value(Value::Duration(d.mean))
                        .text(", median ")
                        .value(Value::Duration(d.p50))
                        .text(", min ")
                        .value(Value::Duration(d.min))
                        .text(", max ")
                        .value(Value::Duration(d.max)),
                );
            }
            if let Some(which) = runs_of(&source.steps, |s| s.mostly_aside() && !s.cut) {
                report.line(Line::of(format!(
                    "{which}: opscope stood aside for the program's own profiler ({}), \
                     whose profile holds their ops: no breakdown of them here",
                    source.aside_for.join(", ")
                )));
            }
            if source.cut_short {
                let past = match runs_of(&source.steps, |s| s.cut) {
                    Some(which) => format!(
                        "{which} ended after its data: what ran in them after the cut is \
                         missing, so they have no breakdown and no part in the step times; \
                         the steps before"
                    ),
                    None => "the steps".to_string(),
                };
                report.line(Line::of(format!(
                    "the file was cut short (--partial): {past} may lack events it held after \
                     the cut (a profiler need not write its events in time order)"
                )));
            }
            let origin = source.steps.first().map_or(0, |s| s.start_ns);
            // A CPU-only run has no device to be idle: its steps show where the host
            // threads' time went instead (its collectives are its communication).
            let device_work = source.on_device;
            let mut columns = vec![
                Column::text("step"),
                Column::numeric("start"),
                Column::numeric("time"),
            ];
            if device_work {
                columns.extend(
                    [
                        "device busy",
                        "device idle",
                        "computation",
                        "communication",
                        "memory",
                        "kernels",
                    ]
                    .map(Column::numeric),
                );
            } else {
                report.line(Line::of(
                    "no device work in these steps: the host threads' time (an op running, \
                     a collective, or neither)",
                ));
                columns.extend(
                    [
                        "host busy",
                        "host idle",
                        "computation",
                        "communication",
                        "overlapped",
                    ]
                    .map(Column::numeric),
                );
            }
            let mut table = Table::new(columns);
            let ns = |n: i64| Value::Duration(n as f64);
            for s in &source.steps {
                let mut row = vec![Value::text(&s.name), ns(s.start_ns - origin), ns(s.dur_ns)];
                let share = |n: i64| Value::share_of(n as f64, s.dur_ns.max(1) as f64, 0);
                if s.cut || s.mostly_aside() {
                    // What opscope saw of such a step is a part (ITT's oneDNN
                    // primitives, …): no breakdown rather than a wrong one.
                    let columns = table.columns.len() - row.len();
                    let why = if s.cut { "cut" } else { "aside" };
                    row.extend((0..columns).map(|_| Value::text(why)));
                } else if device_work {
                    row.extend([
                        share(s.device_busy_ns),
                        share(s.device_idle_ns),
                        ns(s.computation_ns),
                        ns(s.communication_ns),
                        ns(s.memory_ns),
                        Value::Count(s.kernels as i64),
                    ]);
                } else {
                    row.extend([
                        share(s.host.busy_ns),
                        share(s.host.idle_ns),
                        ns(s.host.computation_ns),
                        ns(s.host.communication_ns),
                        ns(s.host.overlap_ns),
                    ]);
                }
                table.rows.push(row);
            }
            report.table(table);
            report.blank();
        }
        if let Some(across) = &self.across {
            report.line(Line::of(format!(
                "== across {} ranks (medians per step)",
                across.compared
            )));
            report.table(crate::across::spread_table(
                across,
                |metric| match metric {
                    "median_step_ns" => "step time",
                    "median_computation_ns" => "computation",
                    "median_communication_ns" => "communication",
                    "median_device_idle_ns" => "device idle",
                    "median_host_idle_ns" => "host idle",
                    other => other,
                },
                |_, v| Value::Duration(v),
            ));
            if let Some(st) = &across.straggler {
                report.line(st.line(" per step"));
            }
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The steps found in a Chrome trace of `events` (JSON objects), named `file`.
    fn steps_of_events(events: &[String], file: &str) -> Vec<SourceSteps> {
        let json = format!("[{}]", events.join(","));
        let mut trace = Trace::new();
        opscope_formats::chrome::import(json.as_bytes(), file, &mut trace).unwrap();
        trace.finish();
        steps(&Context::new(&trace), &StepOptions::default())
    }

    /// Each call of a jitted function starts a step that lasts until the next call (the
    /// loop's iteration); the last one ends when the wait for its result does, though
    /// nothing after it bounds it: what encloses every call (the program's loop) does
    /// not stretch it to its own end.
    #[test]
    fn jax_steps_end_with_the_wait_for_their_result() {
        let mut events = vec![
            r#"{"ph":"X","name":"training loop","pid":1,"tid":1,"ts":0,"dur":1000}"#.to_string(),
        ];
        for start in [100, 300, 500] {
            events.push(format!(
                r#"{{"ph":"X","name":"PjitFunction(step)","pid":1,"tid":1,"ts":{start},"dur":10}}"#
            ));
            events.push(format!(
                r#"{{"ph":"X","name":"block_until_ready","pid":1,"tid":1,"ts":{},"dur":140}}"#,
                start + 10
            ));
            events.push(format!(
                r#"{{"ph":"X","name":"dot","pid":1,"tid":2,"ts":{},"dur":120,"args":{{"hlo_module":"jit_step"}}}}"#,
                start + 20
            ));
        }
        let found = steps_of_events(&events, "jax.json");
        let bounds: Vec<(i64, i64)> = found[0]
            .steps
            .iter()
            .map(|s| (s.start_ns, s.start_ns + s.dur_ns))
            .collect();
        assert_eq!(
            found[0].found_by,
            StepSource::Framework {
                calls: "calls of the jitted step".into()
            }
        );
        assert_eq!(
            bounds,
            [(100_000, 300_000), (300_000, 500_000), (500_000, 650_000)]
        );
    }

    /// A JAX loop that does not wait for each result dispatches all its calls within
    /// microseconds while the runs of its module follow one after another: each step
    /// is one run (from the end of the run before), not the 10 µs of its call. (The
    /// steps were the calls: a median of 24 µs in a fresh program whose runs took
    /// 1.3-3 ms each, and the last step held all the work.)
    #[test]
    fn jax_steps_of_a_loop_that_runs_ahead_are_its_module_runs() {
        let mut events = Vec::new();
        for k in 0..5 {
            let start = 100 + 20 * k;
            events.push(format!(
                r#"{{"ph":"X","name":"PjitFunction(update)","pid":1,"tid":1,"ts":{start},"dur":10}}"#
            ));
            // Run k: two ops on a pool thread, 1 ms from its start to its end.
            let run = 1000 + 1000 * k;
            for (at, dur) in [(0, 600), (650, 350)] {
                events.push(format!(
                    r#"{{"ph":"X","name":"fusion","pid":1,"tid":2,"ts":{},"dur":{dur},"args":{{"hlo_module":"jit_update","run_id":{}}}}}"#,
                    run + at,
                    7_000 + k
                ));
            }
        }
        events.push(
            r#"{"ph":"X","name":"block_until_ready","pid":1,"tid":1,"ts":200,"dur":5900}"#
                .to_string(),
        );
        let found = steps_of_events(&events, "jax.json");
        let bounds: Vec<(i64, i64)> = found[0]
            .steps
            .iter()
            .map(|s| (s.start_ns / 1000, (s.start_ns + s.dur_ns) / 1000))
            .collect();
        assert_eq!(
            bounds,
            [
                (100, 2000),
                (2000, 3000),
                (3000, 4000),
                (4000, 5000),
                (5000, 6100)
            ]
        );
    }

    /// JAX's `StepTraceAnnotation("train", step_num=k)` marks the steps (an XPlane's
    /// `step_num` stat; a string arg in xprof's JSON of it), before the calls of any
    /// jitted function: here a helper's, called once a step too, whose first call
    /// compiles (it was taken for the loop's function, its compile a step).
    #[test]
    fn jax_step_annotations_are_the_steps() {
        let mut events = vec![
            r#"{"ph":"M","pid":7,"name":"process_name","args":{"name":"/host:CPU"}}"#.to_string(),
            r#"{"ph":"M","pid":7,"tid":1,"name":"thread_name","args":{"name":"python"}}"#
                .to_string(),
        ];
        for k in 0..4 {
            let start = if k == 0 { 0 } else { 5000 + 1000 * k };
            let end = 5000 + 1000 * (k + 1);
            events.push(format!(
                r#"{{"ph":"X","name":"train","pid":7,"tid":1,"ts":{start},"dur":{},"args":{{"step_num":"{k}"}}}}"#,
                end - start
            ));
            let helper = if k == 0 { 4000 } else { 20 };
            for (name, at, dur) in [("_normal", start + 5, helper), ("update", end - 300, 250)] {
                events.push(format!(
                    r#"{{"ph":"X","name":"PjitFunction({name})","pid":7,"tid":1,"ts":{at},"dur":{dur}}}"#
                ));
            }
        }
        let found = steps_of_events(&events, "vm.trace.json.gz");
        assert_eq!(found[0].found_by, StepSource::Markers);
        let steps: Vec<(&str, i64)> = found[0]
            .steps
            .iter()
            .map(|s| (s.name.as_str(), s.start_ns / 1000))
            .collect();
        assert_eq!(
            steps,
            [
                ("train#0", 0),
                ("train#1", 6000),
                ("train#2", 7000),
                ("train#3", 8000)
            ]
        );
    }

    /// A loop over two epochs without step markers is cut into its iterations, not its
    /// epochs: the optimizer's update runs once a step. (An op run once an epoch, the
    /// DataLoader's `__iter__`, cut a fresh two-epoch program into 2 "steps" of 32
    /// iterations, at a 100 % match.)
    #[test]
    fn a_loop_of_two_epochs_has_a_step_per_iteration() {
        // (name, duration µs) in order, each 5 µs after the one before.
        let mut ops: Vec<(&str, i64)> = Vec::new();
        for _epoch in 0..2 {
            ops.push((
                "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__iter__",
                300,
            ));
            for _ in 0..8 {
                ops.extend([
                    (
                        "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
                        20,
                    ),
                    ("Optimizer.zero_grad#SGD.zero_grad", 5),
                    ("aten::linear", 50),
                    ("aten::cross_entropy_loss", 10),
                    ("autograd::engine::evaluate_function: AddmmBackward0", 60),
                    ("Optimizer.step#SGD.step", 15),
                ]);
            }
        }
        let (mut events, mut heads, mut ts) = (Vec::new(), Vec::new(), 0);
        for (name, dur) in ops {
            if name.ends_with("__next__") {
                heads.push(ts * 1000);
            }
            events.push(format!(
                r#"{{"ph":"X","cat":"cpu_op","name":"{name}","pid":1,"tid":1,"ts":{ts},"dur":{dur}}}"#
            ));
            ts += dur + 5;
        }
        let found = steps_of_events(&events, "epochs.json");
        assert!(
            matches!(found[0].found_by, StepSource::Period { .. }),
            "{:?}",
            found[0].found_by
        );
        let starts: Vec<i64> = found[0].steps.iter().map(|s| s.start_ns).collect();
        assert_eq!(starts, heads);
    }

    /// Steps in which `opscope record` stood aside for the program's profiler (an
    /// async range of category `opscope`) have no ops of their own: they are called
    /// aside, by runs, and get no breakdown, instead of 100 % idle host time; the last
    /// one is a step (it was dropped as empty) unless it is a moment.
    #[test]
    fn steps_opscope_stood_aside_for_are_no_idle_time() {
        let mut events = Vec::new();
        for k in 0..6 {
            let ts = 100 * k;
            events.push(format!(
                r#"{{"ph":"X","cat":"user_annotation","name":"train_step_{k}","pid":1,"tid":1,"ts":{ts},"dur":100}}"#
            ));
            if ![2, 3, 5].contains(&k) {
                events.push(format!(
                    r#"{{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":{},"dur":60}}"#,
                    ts + 10
                ));
            }
        }
        // What the last `step()` opens and `stop()` closes: a moment, no step.
        events.push(
            r#"{"ph":"X","cat":"user_annotation","name":"train_step_6","pid":1,"tid":1,"ts":600,"dur":2}"#
                .to_string(),
        );
        for (id, (start, end)) in [(195, 402), (499, 603)].into_iter().enumerate() {
            let name = "opscope stood aside for a PyTorch profiler";
            events.push(format!(
                r#"{{"ph":"b","cat":"opscope","id":{id},"name":"{name}","pid":1,"tid":1,"ts":{start}}}"#
            ));
            events.push(format!(
                r#"{{"ph":"e","cat":"opscope","id":{id},"name":"{name}","pid":1,"tid":1,"ts":{end}}}"#
            ));
        }
        let json = format!("[{}]", events.join(","));
        let mut trace = Trace::new();
        opscope_formats::chrome::import(json.as_bytes(), "aside.json", &mut trace).unwrap();
        trace.finish();
        let report = report(&Context::new(&trace), &StepOptions::default());
        let found = &report.sources[0];
        let aside: Vec<usize> = (0..found.steps.len())
            .filter(|&k| found.steps[k].mostly_aside())
            .collect();
        assert_eq!(found.steps.len(), 6);
        assert_eq!(aside, [2, 3, 5]);
        assert_eq!(found.steps[1].aside_ns, 5_000, "the edge of step 1");
        assert_eq!(found.aside_for, ["a PyTorch profiler"]);
        let shown = report.report();
        let lines: Vec<String> = shown
            .blocks
            .iter()
            .filter_map(|b| match b {
                crate::report::Block::Line(line) => Some(format!("{:?}", line.0)),
                _ => None,
            })
            .collect();
        assert!(
            lines.iter().any(|l| l.contains(
                "3 steps: train_step_2 to train_step_3, train_step_5: opscope stood aside for \
                 the program's own profiler (a PyTorch profiler)"
            )),
            "{lines:?}"
        );
        let table = shown.csv_table().unwrap();
        for (k, row) in table.rows.iter().enumerate() {
            let asides = row.iter().filter(|v| **v == Value::text("aside")).count();
            let want = match aside.contains(&k) {
                true => table.columns.len() - 3,
                false => 0,
            };
            assert_eq!(asides, want, "step {k}: {row:?}");
        }
    }

    /// Processes of no known rank with as many steps each: "2 per process" (it said
    /// "per processe").
    #[test]
    fn the_headline_counts_steps_per_process_or_rank() {
        let mut trace = Trace::new();
        for pid in [1, 2] {
            let events: Vec<String> = (0..2)
                .map(|k| {
                    format!(
                        r#"{{"ph":"X","cat":"user_annotation","name":"train_step_{k}","pid":{pid},"tid":{pid},"ts":{},"dur":90}}"#,
                        100 * k
                    )
                })
                .collect();
            let json = format!("[{}]", events.join(","));
            let path = format!("p{pid}.json");
            opscope_formats::chrome::import(json.as_bytes(), &path, &mut trace).unwrap();
        }
        let found = steps(&Context::new(&trace), &StepOptions::default());
        let line = headline(&found).unwrap();
        let Some(crate::report::Piece::Text(text)) = line.0.first() else {
            panic!("{line:?}");
        };
        assert!(
            text.starts_with("steps: 2 per process, 2 processes ("),
            "{text}"
        );
    }

    /// Keras steps are TensorFlow's records of its train-function calls; where the
    /// session has none (the program's own profiler kept opscope's off), the ranges
    /// the bootstrap marks around each call stand in.
    #[test]
    fn keras_steps_come_from_tensorflows_record_else_from_opscopes_marks() {
        let import = |names: &[(&str, i64, i64)]| {
            let events: Vec<String> = names
                .iter()
                .map(|(name, ts, dur)| {
                    format!(r#"{{"ph":"X","name":"{name}","pid":1,"tid":1,"ts":{ts},"dur":{dur}}}"#)
                })
                .collect();
            let mut trace = Trace::new();
            let json = format!("[{}]", events.join(","));
            opscope_formats::chrome::import(json.as_bytes(), "keras.json", &mut trace).unwrap();
            trace.finish();
            let found = steps(&Context::new(&trace), &StepOptions::default());
            let bounds: Vec<(i64, i64)> = found[0]
                .steps
                .iter()
                .map(|s| (s.start_ns / 1000, (s.start_ns + s.dur_ns) / 1000))
                .collect();
            (found[0].found_by.clone(), bounds)
        };
        let marks = [
            (KERAS_STEP_MARK, 100, 90),
            (KERAS_STEP_MARK, 300, 50),
            (KERAS_STEP_MARK, 400, 50),
        ];
        let records = [
            ("multi_step_on_iterator", 101, 80),
            ("multi_step_on_iterator", 301, 48),
            ("multi_step_on_iterator", 401, 48),
        ];
        let both: Vec<_> = marks.iter().chain(&records).copied().collect();
        assert_eq!(
            import(&both),
            (
                StepSource::Framework {
                    calls: "calls of Keras's train function".into()
                },
                vec![(101, 181), (301, 349), (401, 449)]
            )
        );
        assert_eq!(
            import(&marks),
            (
                StepSource::Framework {
                    calls: "calls of Keras's train function".into()
                },
                vec![(100, 190), (300, 350), (400, 450)]
            )
        );
    }
}
