//! The rules `advise` runs, one module each, in the order of [`RULES`]. A rule reads
//! [`Facts`] and writes findings (or why it could not check) to [`Out`]; its module doc
//! names its anchor and the anchor's exact criterion.

mod communication;
mod dataloader;
mod gpu_gaps;
mod gpu_time_util;
mod gpu_utilization;
mod host_sync;
mod launch_delay;
mod memcpy_pageable;
mod memcpy_sync;
mod memset_sync;
mod optimizer;
mod peak_memory;
mod recompile;
mod short_kernels;
mod step_bound;
mod straggler;
mod sync_apis;
mod tensor_cores;
mod zero_grad;

use super::{Facts, Finding, Out, Rule, Severity};

pub static RULES: &[&Rule] = &[
    &gpu_utilization::RULE,
    &gpu_gaps::RULE,
    &gpu_time_util::RULE,
    &step_bound::RULE,
    &dataloader::RULE,
    &communication::RULE,
    &straggler::RULE,
    &sync_apis::RULE,
    &host_sync::RULE,
    &memcpy_sync::RULE,
    &memcpy_pageable::RULE,
    &memset_sync::RULE,
    &short_kernels::RULE,
    &launch_delay::RULE,
    &tensor_cores::RULE,
    &peak_memory::RULE,
    &optimizer::RULE,
    &zero_grad::RULE,
    &recompile::RULE,
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
        }
    }

    /// The saving, and its share of the time `facts` looked at `source`.
    pub fn saving(mut self, facts: &Facts, source: opscope_model::SourceId, ns: i64) -> Finding {
        self.saving_ns = ns.max(0);
        self.saving_pct = facts.share(source, self.saving_ns);
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
