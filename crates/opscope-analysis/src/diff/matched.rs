//! `diff` (by default): work matched by where it sits, step by step. Each host op is
//! the op at the same place in the call tree of its step — the same names down from
//! the step, the same count of like-named siblings before it — so that the third
//! `aten::linear` of a step meets the third of the other run's. Device work meets device
//! work by its launching op and its place among that op's launches, whatever the
//! kernel is called on each side (`sm90_xmma_gemm…` against `Cijk_Alik_Bljk…`).
//!
//! Each line has a value per step on each side: the op's self time (host), or the
//! work's device time. A line's verdict compares the medians, with a bootstrap interval
//! ([`super::noise`]); its contribution is the change of its mean, and on the step's
//! own thread the contributions and the time between ops add up to the change of the
//! mean step exactly.

use hashbrown::HashMap;
use opscope_model::args::ArgValue;
use opscope_model::{SourceId, StrId, Trace, TrackKind, NONE};
use serde::Serialize;

use super::noise::{self, mean, median};
use super::{common_ranks, number_in_name, sources_of, Side};
use crate::correlate;
use crate::report::{Column, Line, Report, Reported, Table, Value};
use crate::steps::{self, StepOptions};

#[derive(Clone, Debug, Serialize)]
pub struct MatchedOptions {
    /// A change counts when its interval lies beyond this share of A's median step…
    pub step_percent: f64,
    /// …and beyond this share of the line's own median in A.
    pub line_percent: f64,
    pub resamples: usize,
    /// Lines shown in each table (all are counted in the sums).
    pub top: usize,
}

impl Default for MatchedOptions {
    fn default() -> MatchedOptions {
        MatchedOptions {
            step_percent: 5.0,
            line_percent: 10.0,
            resamples: 2000,
            top: 20,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Slower,
    Faster,
    /// Within the noise, or smaller than the threshold.
    Unchanged,
    /// Only in B.
    Appeared,
    /// Only in A.
    Disappeared,
    /// Too few steps on a side to tell change from noise.
    FewSteps,
}

impl Verdict {
    /// How text shows it.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Slower => "slower",
            Verdict::Faster => "faster",
            Verdict::Unchanged => "unchanged",
            Verdict::Appeared => "appeared",
            Verdict::Disappeared => "disappeared",
            Verdict::FewSteps => "few steps",
        }
    }
}

/// One value per step on each side, and what they say.
#[derive(Clone, Debug, Serialize)]
pub struct Compared {
    pub per_step_ns: [Vec<f64>; 2],
    pub median_ns: [f64; 2],
    pub mean_ns: [f64; 2],
    /// Median of B minus median of A.
    pub change_ns: f64,
    /// Its 95 % bootstrap interval.
    pub interval_ns: Option<(f64, f64)>,
    /// Mean of B minus mean of A: what the line adds to the change of the mean step.
    pub mean_change_ns: f64,
    pub verdict: Verdict,
}

#[derive(Clone, Debug, Serialize)]
pub struct MatchedLine {
    /// The rank both sides' lines come from, where whole traces of several ranks are
    /// matched rank by rank (`None`: one rank, or none, on each side).
    pub rank: Option<u32>,
    /// Names from the step down, ` ▸ ` between them; `#k` is the k-th of like-named
    /// siblings.
    pub path: String,
    /// Host: the op's self time on a thread; device: kernels, copies and sets.
    pub on_device: bool,
    /// On the step's own thread (its lines add up to the step).
    pub main_thread: bool,
    /// What the work is called on each side (device work may differ by name).
    pub names: [Option<String>; 2],
    /// Input shapes (Kineto's `Input Dims`) on each side, where recorded.
    pub dims: [Option<String>; 2],
    /// The stream device work ran on, on each side.
    pub streams: [Option<String>; 2],
    #[serde(flatten)]
    pub compared: Compared,
}

#[derive(Clone, Debug, Serialize)]
pub struct SideSummary {
    pub label: String,
    pub file: String,
    pub role: String,
    pub rank: Option<u32>,
    /// How its steps were found (`markers`, `framework`, `period`).
    pub steps_found_by: String,
    pub step_numbers: Vec<u64>,
    /// Which of the trace's steps, where a span chose them (`--live`).
    pub part: Option<String>,
}

/// The step's time split as `steps` and `gpu` split it, per step, before and after.
#[derive(Clone, Debug, Serialize)]
pub struct BreakdownLine {
    /// `step`, `device busy`, … and `work on stream 7` (its work's time, per stream).
    pub what: String,
    #[serde(flatten)]
    pub compared: Compared,
}

#[derive(Clone, Debug, Serialize)]
pub struct MatchedDiff {
    pub sides: [SideSummary; 2],
    pub options: MatchedOptions,
    /// The step time, then its breakdown.
    pub breakdown: Vec<BreakdownLine>,
    /// The ranks whose lines are matched, each with the same rank on the other side,
    /// where both sides are whole traces of several ranks; empty otherwise.
    pub ranks: Vec<u32>,
    /// The change of the mean step, and how it splits: the main thread's lines, and
    /// the time on it between ops (the two add up to the change). With several ranks,
    /// of the first rank (the sides' summaries say which).
    pub mean_step_change_ns: f64,
    pub main_thread_lines_ns: f64,
    pub between_ops_ns: f64,
    /// The same split for each rank matched (one, the first rank's, otherwise), with
    /// what lines that appeared and disappeared on the step's thread add.
    pub splits: Vec<Split>,
    /// Host lines, by contribution (largest change of the mean first); `top` of them.
    pub host: Vec<MatchedLine>,
    pub device: Vec<MatchedLine>,
    /// Lines in all, before `top` kept the largest.
    pub host_lines: usize,
    pub device_lines: usize,
    /// Bootstrap resamples per line tested: `options.resamples`, fewer where many
    /// lines over many steps needed a test.
    pub resamples: usize,
}

/// How a side's mean step changed: its step thread's lines (of which those that
/// appeared and disappeared), and the time between its outermost ops; the two parts
/// add up to the change.
#[derive(Clone, Debug, Serialize)]
pub struct Split {
    pub rank: Option<u32>,
    pub mean_step_change_ns: f64,
    pub main_thread_lines_ns: f64,
    pub appeared_ns: f64,
    pub disappeared_ns: f64,
    pub between_ops_ns: f64,
}

/// Values drawn, in all, for the lines' bootstrap intervals (about a second here).
const DRAW_BUDGET: usize = 400_000_000;

/// Where a line sits: its parent's key, its name (an index into [`Keys::names`], the
/// same on both sides), and its place among like-named siblings (for device work:
/// among the op's launches).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    parent: u32,
    name: u32,
    ordinal: u32,
}

const DEVICE: &str = "⇢ device";
const MAIN_THREAD: &str = "step thread";
const OTHER_THREAD: &str = "other thread";

/// The keys of both sides, and the names they use: a name is text once, not per event.
#[derive(Default)]
struct Keys {
    keys: Vec<Key>,
    index: HashMap<Key, u32>,
    names: Vec<String>,
    name_index: HashMap<String, u32>,
}

impl Keys {
    fn id(&mut self, key: Key) -> u32 {
        if let Some(&id) = self.index.get(&key) {
            return id;
        }
        let id = self.keys.len() as u32;
        self.keys.push(key);
        self.index.insert(key, id);
        id
    }

    fn name(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.name_index.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_string());
        self.name_index.insert(name.to_string(), id);
        id
    }

    fn name_of(&self, id: u32) -> &str {
        &self.names[self.keys[id as usize].name as usize]
    }

    /// Names from the step down; lines of other threads start with the thread.
    fn path(&self, mut id: u32) -> String {
        let mut parts = Vec::new();
        while id != NONE {
            let key = self.keys[id as usize];
            let name = self.name_of(id);
            if key.parent == NONE && name == MAIN_THREAD {
                break;
            }
            parts.push(match key.ordinal {
                0 => name.to_string(),
                k => format!("{name} #{}", k + 1),
            });
            id = key.parent;
        }
        parts.reverse();
        parts.join(" ▸ ")
    }

    fn root(&self, mut id: u32) -> u32 {
        while self.keys[id as usize].parent != NONE {
            id = self.keys[id as usize].parent;
        }
        id
    }
}

/// What one side's steps hold, per line.
struct Measured {
    summary: SideSummary,
    /// Per step: the step's duration, and the main thread's time between ops.
    step_ns: Vec<f64>,
    between_ns: Vec<f64>,
    /// Per line, its value in each step.
    lines: HashMap<u32, Vec<f64>>,
    names: HashMap<u32, String>,
    dims: HashMap<u32, String>,
    breakdown: Vec<(String, Vec<f64>)>,
    /// Per device line, the stream (its track's name) of its first work.
    streams: HashMap<u32, String>,
}

pub fn matched(a: &Side, b: &Side, options: &MatchedOptions) -> Result<MatchedDiff, String> {
    let mut keys = Keys::default();
    // Parts of one trace (--rank, --steps, --live) share its steps, found once.
    let steps_a = steps::steps(a.cx, &StepOptions::default());
    let steps_b = match std::ptr::eq(a.cx.trace(), b.cx.trace()) {
        true => None,
        false => Some(steps::steps(b.cx, &StepOptions::default())),
    };
    let steps_b = steps_b.as_ref().unwrap_or(&steps_a);
    // Whole traces of several ranks meet rank by rank; the first rank's steps give the
    // step time and its breakdown, as one rank's did before.
    let ranks = common_ranks(a, b);
    let mut measured = Vec::new();
    for &rank in &ranks {
        let pair = measure(a, Some(rank), &steps_a, &mut keys)
            .and_then(|ma| Ok((ma, measure(b, Some(rank), steps_b, &mut keys)?)));
        match pair {
            Ok((ma, mb)) => measured.push((Some(rank), ma, mb)),
            // A rank without steps on a side has no lines to match; the first rank
            // that has them stands for the job.
            Err(e) if ranks.last() == Some(&rank) && measured.is_empty() => return Err(e),
            Err(_) => {}
        }
    }
    if ranks.is_empty() {
        let ma = measure(a, a.rank, &steps_a, &mut keys)?;
        let mb = measure(b, b.rank, steps_b, &mut keys)?;
        measured.push((None, ma, mb));
    }
    let main_rank = measured[0].0;
    let measured_ranks: Vec<u32> = measured.iter().filter_map(|m| m.0).collect();
    let (ma, mb) = (&measured[0].1, &measured[0].2);
    let step_median_a = median(&ma.step_ns);
    // A line's figures and, where its median moved beyond the threshold, its verdict
    // (`Unchanged` where it did not: no interval can then lie beyond it but by the
    // bootstrap's own noise); the interval is found later, for the lines that need it.
    let threshold_of = |median_a: f64| {
        (options.step_percent / 100.0 * step_median_a)
            .max(options.line_percent / 100.0 * median_a.abs())
    };
    let compare = |va: &[f64], vb: &[f64], present: [bool; 2]| -> Compared {
        let median_ns = [median(va), median(vb)];
        let mean_ns = [mean(va), mean(vb)];
        let change_ns = median_ns[1] - median_ns[0];
        let few = va.len() < noise::MIN_STEPS || vb.len() < noise::MIN_STEPS;
        let verdict = match present {
            [false, _] => Verdict::Appeared,
            [_, false] => Verdict::Disappeared,
            _ if few => Verdict::FewSteps,
            _ if change_ns.abs() <= threshold_of(median_ns[0]) => Verdict::Unchanged,
            // Pending its interval.
            _ if change_ns > 0.0 => Verdict::Slower,
            _ => Verdict::Faster,
        };
        Compared {
            per_step_ns: [va.to_vec(), vb.to_vec()],
            median_ns,
            mean_ns,
            change_ns,
            interval_ns: None,
            mean_change_ns: mean_ns[1] - mean_ns[0],
            verdict,
        }
    };
    // The interval, and the verdict it gives a line whose median moved far enough.
    let test = |c: &mut Compared, resamples: usize| {
        let [va, vb] = &c.per_step_ns;
        c.interval_ns = noise::median_change_interval(va, vb, resamples);
        if let (Verdict::Slower | Verdict::Faster, Some((lo, hi))) = (c.verdict, c.interval_ns) {
            let threshold = threshold_of(c.median_ns[0]);
            c.verdict = match () {
                _ if lo > threshold => Verdict::Slower,
                _ if hi < -threshold => Verdict::Faster,
                _ => Verdict::Unchanged,
            };
        }
    };
    let judge = |va: &[f64], vb: &[f64], present: [bool; 2]| -> Compared {
        let mut c = compare(va, vb, present);
        test(&mut c, options.resamples);
        c
    };
    // Both sides' parts, A's order first; one a side lacks (a stream) is zero there.
    let mut whats: Vec<&String> = ma.breakdown.iter().map(|(w, _)| w).collect();
    for (w, _) in &mb.breakdown {
        if !whats.contains(&w) {
            whats.push(w);
        }
    }
    let values = |m: &&Measured, what: &String| {
        m.breakdown
            .iter()
            .find(|(w, _)| w == what)
            .map(|(_, v)| v.clone())
    };
    let breakdown: Vec<BreakdownLine> = whats
        .into_iter()
        .map(|what| {
            let (va, vb) = (values(&ma, what), values(&mb, what));
            let present = [va.is_some(), vb.is_some()];
            let va = va.unwrap_or_else(|| vec![0.0; ma.step_ns.len()]);
            let vb = vb.unwrap_or_else(|| vec![0.0; mb.step_ns.len()]);
            BreakdownLine {
                what: what.clone(),
                compared: judge(&va, &vb, present),
            }
        })
        .collect();
    let zeros = |n: usize| vec![0.0; n];
    let mut host = Vec::new();
    let mut device = Vec::new();
    for (rank, ma, mb) in &measured {
        let mut ids: Vec<u32> = ma.lines.keys().chain(mb.lines.keys()).copied().collect();
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            let va = ma.lines.get(&id).cloned();
            let vb = mb.lines.get(&id).cloned();
            let present = [va.is_some(), vb.is_some()];
            let va = va.unwrap_or_else(|| zeros(ma.step_ns.len()));
            let vb = vb.unwrap_or_else(|| zeros(mb.step_ns.len()));
            let root = keys.root(id);
            let on_device = keys.name_of(id) == DEVICE;
            let line = MatchedLine {
                rank: *rank,
                path: keys.path(id),
                on_device,
                main_thread: keys.name_of(root) == MAIN_THREAD,
                names: [ma.names.get(&id).cloned(), mb.names.get(&id).cloned()],
                streams: [ma.streams.get(&id).cloned(), mb.streams.get(&id).cloned()],
                dims: [ma.dims.get(&id).cloned(), mb.dims.get(&id).cloned()],
                compared: compare(&va, &vb, present),
            };
            match on_device {
                true => device.push(line),
                false => host.push(line),
            }
        }
    }
    let by_contribution = |x: &MatchedLine, y: &MatchedLine| {
        y.compared
            .mean_change_ns
            .abs()
            .total_cmp(&x.compared.mean_change_ns.abs())
            .then_with(|| x.rank.cmp(&y.rank))
            .then_with(|| x.path.cmp(&y.path))
    };
    host.sort_by(by_contribution);
    device.sort_by(by_contribution);
    // Each rank's change of the mean step, split.
    let splits: Vec<Split> = measured
        .iter()
        .map(|(rank, ma, mb)| {
            let of_thread = || host.iter().filter(|l| l.main_thread && l.rank == *rank);
            let sum = |verdict: Option<Verdict>| -> f64 {
                of_thread()
                    .filter(|l| verdict.is_none_or(|v| l.compared.verdict == v))
                    // (An empty f64 sum is -0.0.)
                    .fold(0.0, |a, l| a + l.compared.mean_change_ns)
            };
            Split {
                rank: *rank,
                mean_step_change_ns: mean(&mb.step_ns) - mean(&ma.step_ns),
                main_thread_lines_ns: sum(None),
                appeared_ns: sum(Some(Verdict::Appeared)),
                disappeared_ns: sum(Some(Verdict::Disappeared)),
                between_ops_ns: mean(&mb.between_ns) - mean(&ma.between_ns),
            }
        })
        .collect();
    let main_thread_lines_ns = splits[0].main_thread_lines_ns;
    // Lines whose median moved beyond the threshold are tested; with many steps and
    // many such lines (a 1 GB trace: 435 steps, thousands of lines), fewer resamples
    // each, within a budget of draws (never under 200).
    let pending = |l: &MatchedLine| matches!(l.compared.verdict, Verdict::Slower | Verdict::Faster);
    let draws: usize = host
        .iter()
        .chain(&device)
        .filter(|l| pending(l))
        .map(|l| l.compared.per_step_ns[0].len() + l.compared.per_step_ns[1].len())
        .sum();
    let resamples = match draws {
        0 => options.resamples,
        d => (DRAW_BUDGET / d).clamp(200.min(options.resamples), options.resamples),
    };
    for line in host.iter_mut().chain(device.iter_mut()) {
        if pending(line) {
            test(&mut line.compared, resamples);
        }
    }
    let (host_lines, device_lines) = (host.len(), device.len());
    host.truncate(options.top);
    device.truncate(options.top);
    // The lines shown have their interval, verdict or not.
    for line in host.iter_mut().chain(device.iter_mut()) {
        if line.compared.interval_ns.is_none() && line.compared.verdict == Verdict::Unchanged {
            test(&mut line.compared, resamples);
        }
    }
    let mean_step_change_ns = splits[0].mean_step_change_ns;
    let between_ops_ns = splits[0].between_ops_ns;
    let (_, ma, mb) = measured.swap_remove(0);
    Ok(MatchedDiff {
        ranks: match main_rank {
            Some(_) => measured_ranks,
            None => Vec::new(),
        },
        mean_step_change_ns,
        main_thread_lines_ns,
        between_ops_ns,
        splits,
        sides: [ma.summary, mb.summary],
        options: options.clone(),
        breakdown,
        host,
        device,
        host_lines,
        device_lines,
        resamples,
    })
}

/// One side's lines, step by step, from `all`, the steps of every source of its trace:
/// those of `rank` (else of its lowest rank, else of every source).
fn measure(
    side: &Side,
    rank: Option<u32>,
    all: &[steps::SourceSteps],
    keys: &mut Keys,
) -> Result<Measured, String> {
    let cx = side.cx;
    let trace = cx.trace();
    let s = &trace.slices;
    let sources = sources_of(trace, rank)?;
    let paths: Vec<&str> = sources
        .iter()
        .map(|src| trace.sources[src.index()].path.as_str())
        .collect();
    let chosen = all
        .iter()
        .filter(|st| paths.contains(&st.file.as_str()) && !st.steps.is_empty())
        .filter(|st| !matches!(st.found_by, steps::StepSource::Loader))
        .max_by_key(|st| st.steps.len())
        .ok_or_else(|| {
            format!(
                "{}: no steps found (no step markers, no framework steps, no repeating \
                 sequence of ops)",
                side.label
            )
        })?;
    let source = sources
        .iter()
        .copied()
        .find(|src| trace.sources[src.index()].path == chosen.file)
        .expect("the steps' source is the side's");
    let mut picked: Vec<(u64, &steps::Step)> = chosen
        .steps
        .iter()
        .enumerate()
        .map(|(k, st)| (number_in_name(&st.name).unwrap_or(k as u64), st))
        .collect();
    let mut part = None;
    if let Some(span) = side.span {
        let bounds: Vec<(i64, i64)> = picked
            .iter()
            .map(|(_, st)| (st.start_ns, st.start_ns + st.dur_ns))
            .collect();
        let (places, why) = span.select(&bounds);
        picked = places.into_iter().map(|k| picked[k]).collect();
        part = Some(why);
    }
    if let Some(range) = side.steps {
        picked.retain(|(n, _)| range.contains(*n));
        if picked.is_empty() {
            return Err(format!(
                "{}: none of its {} steps is in {range}",
                side.label,
                chosen.steps.len()
            ));
        }
    }
    // Steps whose ops opscope did not record (it stood aside for the program's own
    // profiler) or a cut file lost would show every op as gone: left out, and said.
    let unmeasured: Vec<&str> = picked
        .iter()
        .filter(|(_, st)| !st.measured())
        .map(|(_, st)| st.name.as_str())
        .collect();
    if !unmeasured.is_empty() {
        let mut whys = Vec::new();
        if picked.iter().any(|(_, st)| st.cut) {
            whys.push("the file was cut short in them");
        }
        if picked.iter().any(|(_, st)| st.mostly_aside() && !st.cut) {
            whys.push(
                "opscope stood aside for the program's own profiler, whose profile holds their ops",
            );
        }
        let why = whys.join("; ");
        if unmeasured.len() == picked.len() {
            return Err(format!(
                "{}: its ops in {} are not in the trace ({why}): choose other steps \
                 (opscope steps shows them)",
                side.label,
                unmeasured.join(", ")
            ));
        }
        let left_out = format!("left out {} ({why})", unmeasured.join(", "));
        part = Some(match part {
            Some(p) => format!("{p}; {left_out}"),
            None => left_out,
        });
        picked.retain(|(_, st)| st.measured());
    }
    let windows: Vec<(i64, i64)> = picked
        .iter()
        .map(|(_, st)| (st.start_ns, st.start_ns + st.dur_ns))
        .collect();
    let threads = threads_by_time(trace, source, &windows);
    let dims_key = trace.strings.find("Input Dims");
    let correlation = cx.correlation();
    // Device work of the source by the time its launch (else itself) started, with
    // the op that launched it.
    let mut work: Vec<(i64, usize, usize)> = Vec::new();
    // And each stream's work, in time order (rows are by track, then time).
    let mut on_streams: HashMap<u32, Vec<usize>> = HashMap::new();
    for w in 0..s.len() {
        if !correlate::is_device_work(trace, w) || correlate::source_of(trace, w) != Some(source) {
            continue;
        }
        on_streams.entry(s.track[w]).or_default().push(w);
        if let Some(op) = correlation.op_of(trace, w) {
            let launched_at = correlation.launch_of(w).map_or(s.ts[w], |c| s.ts[c]);
            work.push((launched_at, w, op));
        }
    }
    work.sort_unstable();
    let n = windows.len();
    let mut lines: HashMap<u32, Vec<f64>> = HashMap::new();
    let mut names: HashMap<u32, String> = HashMap::new();
    let mut dims: HashMap<u32, String> = HashMap::new();
    let mut between_ns = vec![0.0; n];
    let mut streams: HashMap<u32, String> = HashMap::new();
    // Per stream (its track's name), its work's time per step.
    let mut stream_ns: Vec<(String, Vec<f64>)> = Vec::new();
    // Per step, the delays from each launch call's end to its work's start.
    let mut launch_delays: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut stream_labels: HashMap<usize, String> = HashMap::new();
    // In the step at hand, the key of each slice seen (for its children and launches).
    let mut key_of: HashMap<u32, u32> = HashMap::new();
    // Each of this trace's names as a name of the keys, once looked up.
    let mut name_ids: Vec<Option<u32>> = vec![None; trace.strings.len()];
    let device = keys.name(DEVICE);
    for (step, &(start, end)) in windows.iter().enumerate() {
        key_of.clear();
        let step_name = picked[step].1.name.as_str();
        for (place, (track, label, ordinal)) in threads.iter().enumerate() {
            let track = *track;
            let thread = keys.name(label);
            let root = keys.id(Key {
                parent: NONE,
                name: thread,
                ordinal: *ordinal,
            });
            let range = trace.track_slices(opscope_model::TrackId(track));
            let rows = &s.ts[range.clone()];
            let first = range.start + rows.partition_point(|&ts| ts < start);
            let last = range.start + rows.partition_point(|&ts| ts < end);
            let mut siblings: HashMap<(u32, StrId), u32> = HashMap::new();
            let mut top_level_ns = 0i64;
            let clipped = |j: usize| s.end(j).min(end) - s.ts[j];
            for i in first..last {
                if correlate::is_device_work(trace, i) {
                    continue;
                }
                // The step's own marker (or range) is no line: what it holds but its
                // ops is the time between them.
                let name = trace.str(s.name[i]);
                // (Framework steps are named apart from the range they come from:
                // Keras's `keras train step` is step `keras train step 3`.)
                if s.ts[i] == start && (name == step_name || s.end(i) == end) {
                    key_of.insert(i as u32, root);
                    continue;
                }
                // A parent outside the step (a range around it) or none: outermost.
                let parent_key = key_of.get(&s.parent[i]).copied().unwrap_or(root);
                if parent_key == root {
                    top_level_ns += clipped(i);
                }
                let ordinal = siblings.entry((parent_key, s.name[i])).or_default();
                let name = match &mut name_ids[s.name[i].0 as usize] {
                    Some(id) => *id,
                    slot => *slot.insert(keys.name(name)),
                };
                let key = keys.id(Key {
                    parent: parent_key,
                    name,
                    ordinal: *ordinal,
                });
                *ordinal += 1;
                key_of.insert(i as u32, key);
                lines.entry(key).or_insert_with(|| vec![0.0; n])[step] += clipped(i) as f64;
                if parent_key != root {
                    let up = lines.get_mut(&parent_key).expect("a parent is a line");
                    up[step] -= clipped(i) as f64;
                }
                if let Some(ArgValue::Json(d) | ArgValue::Str(d)) =
                    dims_key.and_then(|k| trace.args.find(s.args[i], k))
                {
                    // As JSON text, but for its spacing: a file written by another
                    // tool (`[5,128]` against `[5, 128]`) holds the same shapes.
                    dims.entry(key).or_insert_with(|| {
                        trace
                            .str(d)
                            .chars()
                            .filter(|c| !c.is_whitespace())
                            .collect()
                    });
                }
            }
            if place == 0 {
                between_ns[step] = (end - start - top_level_ns) as f64;
            }
        }
        // Device work, under the op that launched it, in launch order.
        let first = work.partition_point(|&(at, _, _)| at < start);
        let last = work.partition_point(|&(at, _, _)| at < end);
        let mut ordinals: HashMap<u32, u32> = HashMap::new();
        for &(_, w, op) in &work[first..last] {
            let track = s.track[w] as usize;
            // By stream alone: a side is one rank, most often one device, and the two
            // sides' devices may be numbered apart (rank 3's gpu 3, rank 1's gpu 1).
            let stream = stream_labels.entry(track).or_insert_with(|| {
                let (_, stream, _) = crate::gpu::stream_names(trace, track);
                format!("stream {}", stream.trim_start_matches("stream "))
            });
            let stream = stream.as_str();
            let on_stream = match stream_ns.iter_mut().find(|(name, _)| name == stream) {
                Some((_, values)) => values,
                None => {
                    stream_ns.push((stream.to_string(), vec![0.0; n]));
                    &mut stream_ns.last_mut().expect("just pushed").1
                }
            };
            on_stream[step] += s.dur[w] as f64;
            if let Some(call) = correlation.launch_of(w) {
                launch_delays[step].push((s.ts[w] - s.end(call)).max(0) as f64);
            }
            let Some(&op_key) = key_of.get(&(op as u32)) else {
                continue;
            };
            let ordinal = ordinals.entry(op_key).or_default();
            let key = keys.id(Key {
                parent: op_key,
                name: device,
                ordinal: *ordinal,
            });
            *ordinal += 1;
            lines.entry(key).or_insert_with(|| vec![0.0; n])[step] += s.dur[w] as f64;
            names
                .entry(key)
                .or_insert_with(|| trace.str(s.name[w]).to_string());
            streams.entry(key).or_insert_with(|| stream.to_string());
        }
    }
    // The streams' idle time by cause (`gpu`'s rule and threshold): the gap before
    // each piece of work, as much of it as lies in the step the work starts in.
    let mut idle_by_cause = [vec![0.0; n], vec![0.0; n], vec![0.0; n]];
    let threshold = crate::gpu::GpuOptions::default().kernel_wait_threshold_ns;
    for rows in on_streams.values() {
        let gaps = crate::gpu::idle::gaps(trace, correlation, rows, threshold, Default::default());
        for (w, gap, cause) in gaps {
            let at = s.ts[w];
            let k = windows.partition_point(|&(start, _)| start <= at);
            match k.checked_sub(1).map(|k| (k, windows[k])) {
                Some((k, (start, end))) if at < end => {
                    idle_by_cause[cause as usize][k] += (at - (at - gap).max(start)) as f64;
                }
                _ => {}
            }
        }
    }
    let breakdown: Vec<(String, Vec<f64>)> = {
        let of = |f: fn(&steps::Step) -> i64| -> Vec<f64> {
            picked.iter().map(|(_, st)| f(st) as f64).collect()
        };
        let mut b = vec![("step".to_string(), of(|st| st.dur_ns))];
        if chosen.on_device {
            b.push((
                "launch latency (median per step)".into(),
                launch_delays.iter().map(|d| median(d)).collect(),
            ));
            b.push(("device busy".into(), of(|st| st.device_busy_ns)));
            b.push(("device idle".into(), of(|st| st.device_idle_ns)));
            for (cause, values) in crate::gpu::idle::IdleCause::ALL.iter().zip(idle_by_cause) {
                b.push((format!("streams idle (sum): {}", cause.name()), values));
            }
            b.push(("computation".into(), of(|st| st.computation_ns)));
            b.push(("communication".into(), of(|st| st.communication_ns)));
            b.push(("memory".into(), of(|st| st.memory_ns)));
        }
        // Each rank's steps, where the trace has several and the side is the whole
        // trace (no --rank): a job compared with a job, rank by rank.
        let ranked: Vec<&steps::SourceSteps> = all
            .iter()
            .filter(|st| st.rank.is_some() && !st.steps.is_empty())
            .filter(|st| !matches!(st.found_by, steps::StepSource::Loader))
            .collect();
        if ranked.len() > 1 && side.rank.is_none() {
            for st in ranked {
                let mut durations: Vec<(u64, (i64, i64))> = st
                    .steps
                    .iter()
                    .enumerate()
                    .map(|(k, x)| {
                        let n = number_in_name(&x.name).unwrap_or(k as u64);
                        (n, (x.start_ns, x.start_ns + x.dur_ns))
                    })
                    .filter(|(n, _)| side.steps.is_none_or(|r| r.contains(*n)))
                    .collect();
                if let Some(span) = side.span {
                    let bounds: Vec<(i64, i64)> = durations.iter().map(|d| d.1).collect();
                    let (places, _) = span.select(&bounds);
                    durations = places.into_iter().map(|k| durations[k]).collect();
                }
                let rank = st.rank.expect("ranked");
                b.push((
                    format!("step on rank {rank}"),
                    durations.iter().map(|(_, (a, z))| (z - a) as f64).collect(),
                ));
            }
        }
        stream_ns.sort_by(|x, y| x.0.cmp(&y.0));
        b.extend(
            stream_ns
                .into_iter()
                .map(|(name, values)| (format!("work on {name}"), values)),
        );
        b
    };
    let summary = SideSummary {
        label: side.label.clone(),
        file: chosen.file.clone(),
        role: chosen.role.clone(),
        rank: chosen.rank,
        steps_found_by: match &chosen.found_by {
            steps::StepSource::Markers => "markers".into(),
            steps::StepSource::Framework { calls } => format!("framework ({calls})"),
            steps::StepSource::Period { period, .. } => {
                format!("a sequence of {period} ops repeating")
            }
            steps::StepSource::None | steps::StepSource::Loader => "none".into(),
        },
        step_numbers: picked.iter().map(|(n, _)| *n).collect(),
        part,
    };
    Ok(Measured {
        summary,
        step_ns: windows.iter().map(|(a, b)| (b - a) as f64).collect(),
        between_ns,
        lines,
        names,
        dims,
        breakdown,
        streams,
    })
}

/// The host thread tracks of `source`, the step's own thread first (the one whose
/// slices start the most steps: their markers, or the first op of each), then the
/// others by the time their outermost slices spend in the steps, most first. Each with
/// the name its lines are keyed under (the others by the thread's name, its tid left
/// out, so that a gloo thread meets the other run's gloo thread) and its place among
/// the threads of that name.
fn threads_by_time(
    trace: &Trace,
    source: SourceId,
    windows: &[(i64, i64)],
) -> Vec<(u32, String, u32)> {
    let s = &trace.slices;
    // (steps started, busy time, track)
    let mut threads: Vec<(usize, i64, u32)> = Vec::new();
    for (t, track) in trace.tracks.iter().enumerate() {
        if track.kind != TrackKind::Thread
            || correlate::source_of_track(trace, track) != Some(source)
        {
            continue;
        }
        let range = trace.track_slices(opscope_model::TrackId(t as u32));
        let rows = &s.ts[range.clone()];
        let (mut busy, mut started) = (0i64, 0usize);
        for &(start, end) in windows {
            let first = range.start + rows.partition_point(|&ts| ts < start);
            let last = range.start + rows.partition_point(|&ts| ts < end);
            started += usize::from(first < last && s.ts[first] == start);
            for i in first..last {
                let parent = s.parent[i];
                if parent == NONE || s.ts[parent as usize] < start {
                    busy += s.end(i).min(end) - s.ts[i];
                }
            }
        }
        if busy > 0 {
            threads.push((started, busy, t as u32));
        }
    }
    let Some(main) = threads.iter().copied().max() else {
        return Vec::new();
    };
    threads.retain(|&t| t != main);
    threads.sort_unstable_by_key(|&(_, busy, track)| std::cmp::Reverse((busy, track)));
    let mut out = vec![(main.2, MAIN_THREAD.to_string(), 0)];
    let mut seen: HashMap<String, u32> = HashMap::new();
    for (_, _, t) in threads {
        let label = other_thread_label(trace, t);
        let ordinal = seen.entry(label.clone()).or_default();
        out.push((t, label, *ordinal));
        *ordinal += 1;
    }
    out
}

/// `other thread (pt_gloo_runloop)`: a thread of another run is the same thread where
/// it has the same name; the tid (some names hold it) is left out.
fn other_thread_label(trace: &Trace, track: u32) -> String {
    let name = trace.tracks[track as usize]
        .thread
        .and_then(|t| trace.threads.get(t.0 as usize))
        .and_then(|thread| {
            let name = trace.str(thread.name?);
            let name = name.replace(&thread.tid.to_string(), "");
            let name = name.trim_matches(|c: char| c.is_whitespace() || "()-_:#/".contains(c));
            (!name.is_empty()).then(|| name.to_string())
        });
    match name {
        Some(name) => format!("{OTHER_THREAD} ({name})"),
        None => OTHER_THREAD.to_string(),
    }
}

impl MatchedLine {
    /// Its path, after its rank where lines are matched rank by rank.
    pub fn place(&self) -> String {
        match self.rank {
            Some(r) => format!("rank {r} ▸ {}", self.path),
            None => self.path.clone(),
        }
    }

    /// The line as a table shows it: its path, with what it is called on each side
    /// where that differs (device work) and its shapes where they changed.
    fn shown(&self) -> String {
        let mut text = self.place();
        match &self.names {
            [Some(a), Some(b)] if a != b => text += &format!(" ({a} → {b})"),
            [Some(a), None] | [None, Some(a)] => text += &format!(" ({a})"),
            [Some(a), Some(_)] => text += &format!(" ({a})"),
            [None, None] => {}
        }
        if let [Some(a), Some(b)] = &self.streams {
            if a != b {
                text += &format!(" {{{a} → {b}}}");
            }
        }
        if let [Some(a), Some(b)] = &self.dims {
            if a != b {
                text += &format!(" [shapes {a} → {b}]");
            }
        }
        text
    }
}

fn row(kind: &str, verdict: Verdict, c: &Compared, what: String) -> Vec<Value> {
    // No interval (too few steps) is shown as `-`.
    let bound = |k: usize| {
        c.interval_ns.map_or(
            Value::Number {
                value: None,
                decimals: 0,
            },
            |i| Value::Duration([i.0, i.1][k]),
        )
    };
    vec![
        Value::text(verdict.word()),
        Value::Duration(c.median_ns[0]),
        Value::Duration(c.median_ns[1]),
        Value::Duration(c.change_ns),
        bound(0),
        bound(1),
        Value::Duration(c.mean_change_ns),
        Value::text(kind),
        Value::text(what),
    ]
}

impl Reported for MatchedDiff {
    fn report(&self) -> Report {
        let mut report = Report::default();
        for (k, side) in self.sides.iter().enumerate() {
            let numbers = &side.step_numbers;
            let steps = match numbers.as_slice() {
                [] => "no steps".to_string(),
                [one] => format!("step {one}"),
                [first, .., last] => format!("{} steps, {first}..={last}", numbers.len()),
            };
            let part = side
                .part
                .as_ref()
                .map_or(String::new(), |p| format!(": {p}"));
            report.line(Line::of(format!(
                "{}: {} ({}, {}), steps by {}{part}",
                ["A", "B"][k],
                side.label,
                side.role,
                steps,
                side.steps_found_by
            )));
        }
        if let [first, ..] = self.ranks.as_slice() {
            report.line(Line::of(format!(
                "Lines matched rank by rank on ranks {}; the step time and its split are \
                 rank {first}'s (each rank's step time is a line).",
                self.ranks
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        if let Some(step) = self.breakdown.first() {
            let c = &step.compared;
            let mut line = Line::of("Step time (median): ")
                .value(Value::Duration(c.median_ns[0]))
                .text(" → ")
                .value(Value::Duration(c.median_ns[1]))
                .text(", ")
                .value(Value::Duration(c.change_ns));
            if let Some((lo, hi)) = c.interval_ns {
                line = line
                    .text(" (95 % interval ")
                    .value(Value::Duration(lo))
                    .text(" to ")
                    .value(Value::Duration(hi))
                    .text(")");
            }
            report.line(line.text(format!(": {}", c.verdict.word())));
        }
        for split in &self.splits {
            let whose = match split.rank {
                Some(r) => format!("On rank {r}, the mean step changed by "),
                None => "The mean step changed by ".to_string(),
            };
            let mut line = Line::of(whose)
                .value(Value::Duration(split.mean_step_change_ns))
                .text(": ")
                .value(Value::Duration(split.main_thread_lines_ns))
                .text(" in the lines of the step's thread");
            if split.appeared_ns != 0.0 || split.disappeared_ns != 0.0 {
                line = line
                    .text(" (")
                    .value(Value::Duration(split.appeared_ns))
                    .text(" in lines that appeared, ")
                    .value(Value::Duration(split.disappeared_ns))
                    .text(" in lines that disappeared)");
            }
            report.line(
                line.text(", ")
                    .value(Value::Duration(split.between_ops_ns))
                    .text(" between its outermost ops."),
            );
        }
        report.line(Line::of(format!(
            "A line changed where the 95 % interval of its median's change ({} bootstrap \
             resamples of the steps) lies beyond ±max({} % of A's median step, {} % of the \
             line's median in A). Host lines are self time per step, device lines device \
             time per step under the launching op; by contribution to the mean step.",
            self.resamples, self.options.step_percent, self.options.line_percent
        )));
        report.blank();
        let mut table = Table::new(vec![
            Column::text("verdict"),
            Column::numeric("median A").in_csv("median_a_us"),
            Column::numeric("median B").in_csv("median_b_us"),
            Column::numeric("change").in_csv("change_us"),
            Column::numeric("low").in_csv("interval_low_us"),
            Column::numeric("high").in_csv("interval_high_us"),
            Column::numeric("mean Δ").in_csv("mean_change_us"),
            Column::text("kind"),
            Column::text("line"),
        ]);
        for b in &self.breakdown {
            table
                .rows
                .push(row("step", b.compared.verdict, &b.compared, b.what.clone()));
        }
        for l in &self.host {
            let kind = if l.main_thread {
                "host"
            } else {
                "host, other thread"
            };
            table
                .rows
                .push(row(kind, l.compared.verdict, &l.compared, l.shown()));
        }
        for l in &self.device {
            table
                .rows
                .push(row("device", l.compared.verdict, &l.compared, l.shown()));
        }
        report.table(table);
        let hidden = (self.host_lines - self.host.len()) + (self.device_lines - self.device.len());
        if hidden > 0 {
            report.line(Line::of(format!(
                "{hidden} smaller lines not shown (--top)"
            )));
        }
        report
    }
}
