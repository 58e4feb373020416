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
use crate::intervals::IntervalSet;

pub static RULE: Rule = Rule {
    name: "step_bound",
    anchor: "XProf input-pipeline analysis (input 5/20 %, launch, all others, collectives 3/15 %)",
    about: "whether steps wait for input, kernel launches, the host's own work or collectives",
    needs_device: false,
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
    // Every span that counts, by source, in one pass over the candidates (not one pass
    // per source: eight ranks would sweep every rank's slices eight times).
    let mut by_source: hashbrown::HashMap<SourceId, [Vec<(i64, i64)>; 7]> =
        hashbrown::HashMap::new();
    for i in facts.of_kinds(&kinds) {
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
                if named(&input) && trace.tracks[s.track[i] as usize].kind == TrackKind::Thread =>
            {
                Kind::WaitInput
            }
            _ => continue,
        };
        if let Some(source) = crate::correlate::source_of(trace, i) {
            by_source.entry(source).or_default()[kind as usize].push((s.ts[i], s.end(i)));
        }
    }
    let mut out = Vec::new();
    for steps in &facts.steps().sources {
        if !steps.on_device || steps.steps.is_empty() {
            continue;
        }
        let Some(source) = facts.source_of_file(&steps.file) else {
            continue;
        };
        let Some(spans) = by_source.remove(&source) else {
            continue;
        };
        let mut b = Breakdown {
            steps: steps.steps.len(),
            ..Breakdown::default()
        };
        let steps_at: Vec<(i64, i64)> = steps
            .steps
            .iter()
            .map(|x| (x.start_ns, x.start_ns + x.dur_ns))
            .collect();
        b.step_ns = steps.steps.iter().map(|x| x.dur_ns).sum();
        let totals = sweep(spans, &steps_at);
        for (kind, ns) in KINDS.into_iter().zip(totals) {
            match kind {
                Kind::Compute => b.compute_ns += ns,
                Kind::Collectives => b.collectives_ns += ns,
                Kind::WaitInput | Kind::HostToDevice => b.input_ns += ns,
                Kind::DeviceToHost => b.output_ns += ns,
                Kind::DeviceToDevice => b.device_to_device_ns += ns,
                Kind::KernelLaunch => b.kernel_launch_ns += ns,
            }
        }
        b.all_others_ns = (b.step_ns - totals.iter().sum::<i64>()).max(0);
        out.push((source, b));
    }
    out
}

/// The kinds by priority, low first (their order in [`Kind`]).
const KINDS: [Kind; 7] = [
    Kind::HostToDevice,
    Kind::KernelLaunch,
    Kind::Collectives,
    Kind::WaitInput,
    Kind::DeviceToDevice,
    Kind::DeviceToHost,
    Kind::Compute,
];

/// The time within `steps` that each kind holds (`spans` by kind, in [`KINDS`]
/// order), the highest-priority kind winning: each kind's union, less what the kinds
/// above it hold.
fn sweep(spans: [Vec<(i64, i64)>; 7], steps: &[(i64, i64)]) -> [i64; 7] {
    let window = IntervalSet::from_spans(steps.to_vec());
    let mut totals = [0i64; 7];
    let mut covered = IntervalSet::default();
    for (k, spans) in spans.into_iter().enumerate().rev() {
        let held = IntervalSet::from_spans(spans).intersection(&window);
        totals[k] = held.difference(&covered).total();
        covered = covered.union(&held);
    }
    totals
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
        let mut spans: [Vec<(i64, i64)>; 7] = Default::default();
        spans[Kind::KernelLaunch as usize].push((0, 100));
        spans[Kind::Compute as usize].push((50, 150));
        spans[Kind::WaitInput as usize].push((140, 200));
        spans[Kind::HostToDevice as usize].push((-50, 400));
        // Two steps with a gap between them, which counts for neither.
        let got = sweep(spans, &[(0, 120), (130, 300)]);
        assert_eq!(got[Kind::KernelLaunch as usize], 50);
        assert_eq!(got[Kind::Compute as usize], 70 + 20);
        assert_eq!(got[Kind::WaitInput as usize], 50);
        assert_eq!(got[Kind::HostToDevice as usize], 100);
        assert_eq!(got.iter().sum::<i64>(), 120 + 170);
    }
}
