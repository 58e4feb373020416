//! The rules `advise` runs, one module each, in the order of [`RULES`]. A rule reads
//! [`Facts`] and writes findings (or why it could not check) to [`Out`]; its module doc
//! names its anchor and the anchor's exact criterion.

mod communication;
mod data_parallel;
mod dataloader;
mod expensive_ops;
mod extra_copies;
mod full_queue;
mod gpu_gaps;
mod gpu_time_util;
mod gpu_utilization;
mod graph_breaks;
mod half_precision;
mod host_sync;
mod kernel_sequences;
mod launch_delay;
mod memcpy_pageable;
mod memcpy_sync;
mod memset_sync;
mod optimizer;
mod peak_memory;
mod recompile;
mod short_kernels;
mod step_bound;
mod step_drift;
mod straggler;
mod sync_apis;
mod tensor_cores;
mod tf_operations;
mod zero_grad;

use super::{Facts, Finding, Out, Rule, Severity};

pub static RULES: &[&Rule] = &[
    &gpu_utilization::RULE,
    &gpu_gaps::RULE,
    &gpu_time_util::RULE,
    &step_bound::RULE,
    &dataloader::RULE,
    &communication::RULE,
    &data_parallel::RULE,
    &straggler::RULE,
    &step_drift::RULE,
    &sync_apis::RULE,
    &host_sync::RULE,
    &memcpy_sync::RULE,
    &memcpy_pageable::RULE,
    &memset_sync::RULE,
    &short_kernels::RULE,
    &launch_delay::RULE,
    &kernel_sequences::RULE,
    &full_queue::RULE,
    &tensor_cores::RULE,
    &half_precision::RULE,
    &peak_memory::RULE,
    &optimizer::RULE,
    &zero_grad::RULE,
    &extra_copies::RULE,
    &recompile::RULE,
    &graph_breaks::RULE,
    &tf_operations::RULE,
    &expensive_ops::RULE,
];

impl Finding {
    /// A finding of `rule` about `scope`, with no evidence or saving yet.
    pub fn of(rule: &Rule, scope: impl Into<String>, title: impl Into<String>) -> Finding {
        Finding {
            rule: rule.name,
            anchor: rule.anchor,
            severity: Severity::Medium,
            scope: scope.into(),
            title: title.into(),
            evidence: Vec::new(),
            fix: String::new(),
            more: String::new(),
            saving_ns: 0,
            saving_pct: 0.0,
            span: None,
            figures: Default::default(),
            looked_at: None,
        }
    }

    /// The finding with one of its rule's figures.
    pub fn figure(mut self, name: &'static str, value: impl Into<f64>) -> Finding {
        self.figures.insert(name, value.into());
        self
    }

    /// The saving, and its share of the time `facts` looked at `source`.
    /// A fix cannot save more than the time looked at: device idle time outside the
    /// steps is no step time.
    pub fn saving(mut self, facts: &Facts, source: opscope_model::SourceId, ns: i64) -> Finding {
        let (of, _) = facts.time_looked_at(source);
        self.saving_ns = ns.clamp(0, of.max(0));
        self.saving_pct = facts.share(source, self.saving_ns);
        self.looked_at = Some(facts.bounds_of(source));
        self
    }
}

/// A duration for prose: `1.24 ms`, `830 µs`, `2.1 s`.
pub fn time(ns: i64) -> String {
    let ns = ns as f64;
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// Which source each slice row comes from, by index (`None`: no source).
pub fn sources_of(facts: &Facts, rows: &[usize]) -> Vec<(opscope_model::SourceId, Vec<usize>)> {
    let trace = facts.trace();
    let mut groups: Vec<(opscope_model::SourceId, Vec<usize>)> = Vec::new();
    for &i in rows {
        let Some(src) = crate::correlate::source_of(trace, i) else {
            continue;
        };
        match groups.iter_mut().find(|g| g.0 == src) {
            Some(g) => g.1.push(i),
            None => groups.push((src, vec![i])),
        }
    }
    groups.sort_by_key(|g| g.0 .0);
    groups
}

/// Device work and its launching call, grouped by the source of the work.
pub fn pairs_by_source(
    facts: &Facts,
    pairs: &[(usize, usize)],
) -> Vec<(opscope_model::SourceId, Vec<(usize, usize)>)> {
    let trace = facts.trace();
    let mut groups: Vec<(opscope_model::SourceId, Vec<(usize, usize)>)> = Vec::new();
    for &(work, call) in pairs {
        let Some(src) = crate::correlate::source_of(trace, work) else {
            continue;
        };
        match groups.iter_mut().find(|g| g.0 == src) {
            Some(g) => g.1.push((work, call)),
            None => groups.push((src, vec![(work, call)])),
        }
    }
    groups.sort_by_key(|g| g.0 .0);
    groups
}

/// Whether a host slice is a CUDA/HIP runtime or driver call (what Nsight's rules name).
pub fn is_api_call(facts: &Facts, i: usize) -> bool {
    matches!(
        facts.trace().slices.kind(i),
        opscope_model::SliceKind::Runtime | opscope_model::SliceKind::Driver
    )
}

/// Which of `steps` (sorted by start, not overlapping) holds time `ts`: a binary
/// search, so that rules cost O(log steps) per slice on traces of thousands of steps.
pub fn step_at(steps: &[crate::steps::Step], ts: i64) -> Option<usize> {
    let k = steps.partition_point(|st| st.start_ns <= ts);
    let k = k.checked_sub(1)?;
    (ts < steps[k].start_ns + steps[k].dur_ns).then_some(k)
}

/// Every kind of copy.
pub const COPIES: [opscope_model::SliceKind; 6] = {
    use opscope_model::{CopyDirection as D, SliceKind::Memcpy};
    [
        Memcpy(D::H2D),
        Memcpy(D::D2H),
        Memcpy(D::D2D),
        Memcpy(D::P2P),
        Memcpy(D::H2H),
        Memcpy(D::Unknown),
    ]
};

/// Device work of `kinds` (in the window) with the runtime or driver call that
/// launched it: what Nsight's copy and memset rules look at.
pub fn launched_by_api(facts: &Facts, kinds: &[opscope_model::SliceKind]) -> Vec<(usize, usize)> {
    let correlation = facts.correlation();
    facts
        .of_kinds(kinds)
        .into_iter()
        .filter_map(|i| {
            let call = correlation
                .launch_of(i)
                .filter(|&c| is_api_call(facts, c))?;
            Some((i, call))
        })
        .collect()
}

/// The kernels of one device's work with the call that launched each, in start order.
pub fn launched_kernels<'a>(
    facts: &'a Facts,
    work: &'a crate::advise::DeviceWork,
) -> impl Iterator<Item = (usize, usize)> + 'a {
    let s = &facts.trace().slices;
    let correlation = facts.correlation();
    work.slices
        .iter()
        .filter(move |&&i| s.kind(i) == opscope_model::SliceKind::Kernel)
        .filter_map(move |&i| Some((i, correlation.launch_of(i)?)))
}

/// Device work launched by one of HTA's launch calls (`cudaLaunchKernel`,
/// `cudaMemcpyAsync`, `cudaMemsetAsync`, …), with the call: what HTA's kernel launch
/// statistics look at (`include_memory_events=True`), in start order.
pub fn hta_launches<'a>(
    facts: &'a Facts,
    work: &'a crate::advise::DeviceWork,
    launches: &'a [bool],
) -> impl Iterator<Item = (usize, usize)> + 'a {
    let s = &facts.trace().slices;
    let correlation = facts.correlation();
    work.slices.iter().filter_map(move |&i| {
        let call = correlation.launch_of(i)?;
        launches[s.name[call].0 as usize].then_some((i, call))
    })
}
