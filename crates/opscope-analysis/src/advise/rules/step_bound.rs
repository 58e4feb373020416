//! What bounds a step, as XProf's input-pipeline analysis classifies it
//! (`op_stats_to_input_pipeline_analysis.cc`): each moment of a step goes to the
//! highest-priority work running then (XProf's `EventType` order: host-to-device copy <
//! kernel launch < device collectives < waiting for input < device-to-device copy <
//! device-to-host copy < device compute); a moment with none of these is "all others"
//! (the host's own work: Python, the framework, I/O). Percent of the steps' time:
//! input (waiting for input and host-to-device copies) < 5 no, 5–20 moderately, ≥ 20
//! highly input-bound, and "potentially input-bound" when input < 5 but all others ≥ 3;
//! kernel launch, all others and collectives 3 / 15.

use opscope_model::{CopyDirection, SliceKind, SourceId, TrackKind};
use serde::Serialize;

use super::{time, Facts, Finding, Out, Rule, Severity};
use crate::gpu::classify::{Classifier, WorkClass};

pub static RULE: Rule = Rule {
    name: "step_bound",
    anchor: "XProf input-pipeline analysis (input 5/20 %, launch, all others, collectives 3/15 %)",
    about: "whether steps wait for input, kernel launches, the host's own work or collectives",
    check,
};

/// XProf's event types that a step's time is split into, by priority (low first).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    HostToDevice,
    KernelLaunch,
    Collectives,
    WaitInput,
    DeviceToDevice,
    DeviceToHost,
    Compute,
}

/// A source's steps split by XProf's event types, in ns over all its steps.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Breakdown {
    pub steps: usize,
    pub step_ns: i64,
    pub compute_ns: i64,
    pub collectives_ns: i64,
    pub input_ns: i64,
    pub output_ns: i64,
    pub device_to_device_ns: i64,
    pub kernel_launch_ns: i64,
    pub all_others_ns: i64,
}

impl Breakdown {
    pub fn pct(&self, ns: i64) -> f64 {
        if self.step_ns > 0 {
            100.0 * ns as f64 / self.step_ns as f64
        } else {
            0.0
        }
    }
}

/// Whether a host range waits for input: PyTorch's DataLoader, tf.data's iterator.
pub fn is_input_wait(name: &str) -> bool {
    name.starts_with("enumerate(DataLoader)")
        || name.contains("IteratorGetNext")
        || name.starts_with("Iterator::")
}

/// Whether a runtime call launches device work.
fn is_launch(name: &str) -> bool {
    name.contains("Launch") || name.contains("launch") || name.contains("MemcpyAsync")
}

/// The breakdown of each source with steps on a device.
pub fn breakdowns(facts: &Facts) -> Vec<(SourceId, Breakdown)> {
    let trace = facts.trace();
    let s = &trace.slices;
    let mut classifier = Classifier::with(trace, Some(facts.correlation()), None);
    let launch = facts.names_where(is_launch);
    let input = facts.names_where(is_input_wait);
    let mut kinds: Vec<SliceKind> = super::COPIES.to_vec();
    kinds.extend([
        SliceKind::Kernel,
        SliceKind::Memset,
        SliceKind::Runtime,
        SliceKind::Driver,
        SliceKind::Op,
        SliceKind::Annotation,
    ]);
    let candidates = facts.of_kinds(&kinds);
    let mut out = Vec::new();
    for steps in &facts.steps().sources {
        if !steps.on_device || steps.steps.is_empty() {
            continue;
        }
        let Some(source) = facts.source_of_file(&steps.file) else {
            continue;
        };
        let (first, last) = (
            steps.steps.iter().map(|x| x.start_ns).min().unwrap_or(0),
            steps
                .steps
                .iter()
                .map(|x| x.start_ns + x.dur_ns)
                .max()
                .unwrap_or(0),
        );
        let mut spans: Vec<(i64, i64, Kind)> = Vec::new();
        for &i in &candidates {
            if s.end(i) <= first || s.ts[i] >= last {
                continue;
            }
            if crate::correlate::source_of(trace, i) != Some(source) {
                continue;
            }
            let named = |flags: &[bool]| flags[s.name[i].0 as usize];
            let kind = match s.kind(i) {
                SliceKind::Kernel => match classifier.class(i) {
                    WorkClass::Communication => Kind::Collectives,
                    _ => Kind::Compute,
                },
                SliceKind::Memcpy(CopyDirection::H2D) => Kind::HostToDevice,
                SliceKind::Memcpy(CopyDirection::D2H) => Kind::DeviceToHost,
                SliceKind::Memcpy(_) => Kind::DeviceToDevice,
                SliceKind::Memset => Kind::Compute,
                SliceKind::Runtime | SliceKind::Driver if named(&launch) => Kind::KernelLaunch,
                SliceKind::Op | SliceKind::Annotation
                    if named(&input)
                        && trace.tracks[s.track[i] as usize].kind == TrackKind::Thread =>
                {
                    Kind::WaitInput
                }
                _ => continue,
            };
            spans.push((s.ts[i], s.end(i), kind));
        }
        let mut b = Breakdown {
            steps: steps.steps.len(),
            ..Breakdown::default()
        };
        // Each step sweeps only the spans that can reach into it: sorted by start,
        // from the first that starts after the step's start less the longest span.
        spans.sort_by_key(|x| x.0);
        let longest = spans.iter().map(|x| x.1 - x.0).max().unwrap_or(0);
        for step in &steps.steps {
            let (a, z) = (step.start_ns, step.start_ns + step.dur_ns);
            b.step_ns += step.dur_ns;
            let from = spans.partition_point(|x| x.0 < a.saturating_sub(longest));
            let to = spans.partition_point(|x| x.0 < z);
            let mut covered = 0;
            for (kind, ns) in sweep(&spans[from..to.max(from)], a, z) {
                covered += ns;
                match kind {
                    Kind::Compute => b.compute_ns += ns,
                    Kind::Collectives => b.collectives_ns += ns,
                    Kind::WaitInput | Kind::HostToDevice => b.input_ns += ns,
                    Kind::DeviceToHost => b.output_ns += ns,
                    Kind::DeviceToDevice => b.device_to_device_ns += ns,
                    Kind::KernelLaunch => b.kernel_launch_ns += ns,
                }
            }
            b.all_others_ns += (step.dur_ns - covered).max(0);
        }
        out.push((source, b));
    }
    out
}

/// The time of `[a, z)` that each kind holds, the highest-priority kind winning.
fn sweep(spans: &[(i64, i64, Kind)], a: i64, z: i64) -> Vec<(Kind, i64)> {
    let mut edges: Vec<(i64, i32, Kind)> = Vec::new();
    for &(s, e, k) in spans {
        let (s, e) = (s.max(a), e.min(z));
        if e > s {
            edges.push((s, 1, k));
            edges.push((e, -1, k));
        }
    }
    edges.sort_by_key(|e| (e.0, e.1));
    let mut active = [0i32; 7];
    let mut totals = [0i64; 7];
    let mut at = a;
    for (t, delta, k) in edges {
        if let Some(top) = (0..7).rev().find(|&x| active[x] > 0) {
            totals[top] += t - at;
        }
        at = t;
        active[k as usize] += delta;
    }
    let kinds = [
        Kind::HostToDevice,
        Kind::KernelLaunch,
        Kind::Collectives,
        Kind::WaitInput,
        Kind::DeviceToDevice,
        Kind::DeviceToHost,
        Kind::Compute,
    ];
    kinds.into_iter().zip(totals).filter(|x| x.1 > 0).collect()
}

fn check(facts: &Facts, out: &mut Out) {
    for (source, b) in breakdowns(facts) {
        let scope = facts.label(source, None);
        let more = format!("opscope steps {}", facts.files());
        let evidence = format!(
            "{} steps, {} in all: compute {:.1} %, input {:.1} %, kernel launch {:.1} %, \
             collectives {:.1} %, output {:.1} %, all others {:.1} %",
            b.steps,
            time(b.step_ns),
            b.pct(b.compute_ns),
            b.pct(b.input_ns),
            b.pct(b.kernel_launch_ns),
            b.pct(b.collectives_ns),
            b.pct(b.output_ns),
            b.pct(b.all_others_ns)
        );
        let input = b.pct(b.input_ns);
        let others = b.pct(b.all_others_ns);
        let mut push = |title: String, ns: i64, severity: Severity, fix: &str| {
            let mut f = Finding::of(&RULE, &scope, title).saving(facts, source, ns);
            f.severity = severity;
            f.evidence.push(evidence.clone());
            f.fix = fix.to_string();
            f.more = more.clone();
            for (k, v) in [
                ("step_ns", b.step_ns as f64),
                ("compute_pct", b.pct(b.compute_ns)),
                ("input_pct", b.pct(b.input_ns)),
                ("kernel_launch_pct", b.pct(b.kernel_launch_ns)),
                ("collectives_pct", b.pct(b.collectives_ns)),
                ("all_others_pct", b.pct(b.all_others_ns)),
            ] {
                f.figures.insert(k, v);
            }
            out.finding(f);
        };
        if input >= 5.0 {
            let how = if input >= 20.0 {
                "HIGHLY"
            } else {
                "MODERATELY"
            };
            push(
                format!("{how} input-bound: {input:.1} % of the step time waits for input"),
                b.input_ns,
                Severity::of_share(input, 5.0, 20.0),
                "overlap input with compute: more DataLoader workers (num_workers), \
                 pin_memory, prefetching (tf.data: prefetch, parallel map)",
            );
        } else if others >= 3.0 {
            push(
                format!(
                    "POTENTIALLY input-bound: {others:.1} % of the step time is 'all \
                     others' (I/O or Python)"
                ),
                b.all_others_ns,
                Severity::of_share(others, 3.0, 15.0),
                "see what the host runs while the device waits (Python, I/O, the \
                 framework's dispatch): compile the step (torch.compile, tf.function, \
                 jax.jit) or move work off the training loop",
            );
        }
        let launch = b.pct(b.kernel_launch_ns);
        if launch >= 3.0 {
            push(
                format!("{launch:.1} % of the step time is spent launching kernels"),
                b.kernel_launch_ns,
                Severity::of_share(launch, 3.0, 15.0),
                "fewer, larger kernels: fuse them (torch.compile, XLA) or replay the step \
                 as a CUDA graph",
            );
        }
        let collectives = b.pct(b.collectives_ns);
        if collectives >= 3.0 {
            push(
                format!("{collectives:.1} % of the step time is collective communication"),
                b.collectives_ns,
                Severity::of_share(collectives, 3.0, 15.0),
                "overlap communication with computation (DDP bucketing, FSDP prefetch), \
                 communicate less often (gradient accumulation) or in less precision",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_higher_priority_kind_holds_overlapped_time() {
        let spans = [
            (0, 100, Kind::KernelLaunch),
            (50, 150, Kind::Compute),
            (140, 200, Kind::WaitInput),
        ];
        let got = sweep(&spans, 0, 300);
        assert_eq!(
            got,
            vec![
                (Kind::KernelLaunch, 50),
                (Kind::WaitInput, 50),
                (Kind::Compute, 100)
            ]
        );
    }
}
