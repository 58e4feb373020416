//! `opscope advise`: what bounds each job and what to change, as findings ranked by the
//! time a fix could save at most. Each rule is a module of [`rules`] that carries its
//! anchor's criterion and thresholds (tfprof's checkers, Nsight Systems' expert rules,
//! XProf's step classification, HTA, PyTorch's profiler plugin); where a trace lacks what
//! a rule needs, the rule says so once instead of guessing.

mod facts;
mod render;
pub mod rules;
pub mod tfprof;

use rayon::prelude::*;
use serde::Serialize;

use crate::context::Context;
use crate::window::Window;
pub use facts::{DeviceWork, Facts};

#[derive(Clone, Debug)]
pub struct AdviseOptions {
    pub window: Window,
    /// Only the rules whose names are listed (all when empty).
    pub rules: Vec<String>,
    /// Nsight Systems' `gpu_gaps` threshold (its default: 500 ms).
    pub gap_ns: i64,
    /// Nsight Systems' `gpu_time_util`: chunks of the device's span, and the
    /// utilization (percent) under which a chunk is reported.
    pub util_chunks: usize,
    pub util_threshold_pct: f64,
}

impl Default for AdviseOptions {
    fn default() -> AdviseOptions {
        AdviseOptions {
            window: Window::Whole,
            rules: Vec::new(),
            gap_ns: 500_000_000,
            util_chunks: 30,
            util_threshold_pct: 50.0,
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth knowing; no time to win from it alone.
    Info,
    Low,
    Medium,
    High,
}

impl Severity {
    pub fn name(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
        }
    }

    /// The severity of a share of the time looked at, on the anchor's two thresholds
    /// (XProf's 5/20 % for input, 3/15 % for launches): under `low` it is low, from
    /// `high` on high.
    pub fn of_share(pct: f64, low: f64, high: f64) -> Severity {
        if pct >= high {
            Severity::High
        } else if pct >= low {
            Severity::Medium
        } else {
            Severity::Low
        }
    }
}

/// One thing to change (or to know), with the numbers that show it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Finding {
    /// The rule's name (`gpu_gaps`).
    pub rule: &'static str,
    /// Whose rule it is and where its criterion comes from.
    pub anchor: &'static str,
    pub severity: Severity,
    /// What it is about: `rank 0 gpu 0`, `trace.json`, `every rank`.
    pub scope: String,
    /// What bounds the job, in one line.
    pub title: String,
    /// The numbers behind it (what other commands print).
    pub evidence: Vec<String>,
    /// What to try.
    pub fix: String,
    /// The command that shows more.
    pub more: String,
    /// The most time a fix could save over the time looked at (an upper bound from
    /// the trace: the idle time it removes, the blocking calls it avoids), in ns.
    pub saving_ns: i64,
    /// That time's share of the time looked at (the steps' time of the scope, or its
    /// span without steps), in percent.
    pub saving_pct: f64,
    /// The time span the finding is about, for a viewer to show.
    pub span: Option<[i64; 2]>,
    /// The rule's own figures (`calls`, `blocked_ns`, `gaps`), for scripts and tests.
    pub figures: std::collections::BTreeMap<&'static str, f64>,
    /// Where the events of the file the saving was found in start and end: findings
    /// of one scope in files of overlapping times saw the same time twice.
    #[serde(skip)]
    pub(crate) looked_at: Option<[i64; 2]>,
}

/// A rule that could not be checked, and why.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct NotChecked {
    pub rule: &'static str,
    pub reason: String,
}

/// What `advise` says of a trace.
#[derive(Clone, Debug, Serialize)]
pub struct Advice {
    /// One sentence: the top finding, or that nothing passed a threshold.
    pub verdict: String,
    /// Ranked by saving, then severity.
    pub findings: Vec<Finding>,
    pub not_checked: Vec<NotChecked>,
    /// The rules run.
    pub rules: Vec<&'static str>,
    /// On a TensorFlow RunMetadata: what tfprof's `advise` prints, checker by checker.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tfprof: Vec<tfprof::Checker>,
}

/// What rules write to.
#[derive(Default)]
pub struct Out {
    findings: Vec<Finding>,
    not_checked: Vec<NotChecked>,
}

impl Out {
    pub fn finding(&mut self, finding: Finding) {
        self.findings.push(finding);
    }

    /// The rule cannot be checked on this trace: said once per rule and reason.
    pub fn not_checked(&mut self, rule: &'static str, reason: impl Into<String>) {
        let reason = reason.into();
        if !self
            .not_checked
            .iter()
            .any(|n| n.rule == rule && n.reason == reason)
        {
            self.not_checked.push(NotChecked { rule, reason });
        }
    }
}

/// A rule: its name, its anchor, and its check.
pub struct Rule {
    pub name: &'static str,
    pub anchor: &'static str,
    /// What it looks for, for `--help` and the docs.
    pub about: &'static str,
    /// Whether it reads device work or the calls that drive it: on a trace with
    /// neither (a run on CPUs) it is not checked, and said so.
    pub needs_device: bool,
    pub check: fn(&Facts, &mut Out),
}

pub fn advise(cx: &Context, options: &AdviseOptions) -> Advice {
    let facts = Facts::new(cx, options);
    if options.rules.is_empty() {
        facts.prefetch();
    }
    let asked: Vec<&Rule> = rules::RULES
        .iter()
        .copied()
        .filter(|rule| options.rules.is_empty() || options.rules.iter().any(|r| r == rule.name))
        .collect();
    let device = has_device(cx.trace());
    let (chosen, no_device): (Vec<&Rule>, Vec<&Rule>) = asked
        .into_iter()
        .partition(|rule| device || !rule.needs_device);
    // The rules side by side, their outputs in the table's order.
    let outs: Vec<Out> = chosen
        .par_iter()
        .map(|rule| {
            let mut out = Out::default();
            (rule.check)(&facts, &mut out);
            out
        })
        .collect();
    let run: Vec<&'static str> = chosen.iter().map(|r| r.name).collect();
    let mut out = Out::default();
    for rule in no_device {
        out.not_checked(rule.name, NO_DEVICE);
    }
    for o in outs {
        out.findings.extend(o.findings);
        out.not_checked.extend(o.not_checked);
    }
    let mut findings = out.findings;
    // A finding whose fix would save under 1 % of the time is worth knowing, no more.
    for f in &mut findings {
        if f.saving_ns > 0 && f.saving_pct < 1.0 {
            f.severity = Severity::Info;
        }
    }
    let mut findings = merge_across_sources(findings);
    findings.sort_by(|a, b| {
        b.saving_ns
            .cmp(&a.saving_ns)
            .then(b.severity.cmp(&a.severity))
            .then(a.rule.cmp(b.rule))
            .then(a.scope.cmp(&b.scope))
    });
    let verdict = verdict(&findings);
    Advice {
        verdict,
        findings,
        not_checked: out.not_checked,
        rules: run,
        tfprof: tfprof::checkers(cx),
    }
}

/// Why a rule about devices is not checked on a trace without them.
pub const NO_DEVICE: &str = "the trace has no device work and no call that drives a device \
    (a run on CPUs)";

/// Whether a trace holds device work or runtime or driver calls.
fn has_device(trace: &opscope_model::Trace) -> bool {
    use opscope_model::SliceKind;
    let device = |code: u8| {
        SliceKind::ALL.get(code as usize).is_some_and(|k| {
            k.is_device_activity() || matches!(k, SliceKind::Runtime | SliceKind::Driver)
        })
    };
    trace.slices.kind_codes().iter().any(|&c| device(c))
}

/// One finding per rule and fix however many ranks (or files) it fires on: the one
/// that saves most stands for the others, which its evidence names with their share.
/// Ranks run side by side, so the saving is the largest one, not their sum.
fn merge_across_sources(findings: Vec<Finding>) -> Vec<Finding> {
    let mut groups: Vec<Vec<Finding>> = Vec::new();
    for f in merge_within_scopes(findings) {
        match groups
            .iter_mut()
            .find(|g| g[0].rule == f.rule && g[0].fix == f.fix)
        {
            Some(g) => g.push(f),
            None => groups.push(vec![f]),
        }
    }
    groups
        .into_iter()
        .map(|mut g| {
            if g.len() == 1 {
                return g.remove(0);
            }
            g.sort_by(|a, b| {
                b.saving_ns
                    .cmp(&a.saving_ns)
                    .then(b.severity.cmp(&a.severity))
            });
            let n = g.len();
            let mut top = g.remove(0);
            let others: Vec<String> = g
                .iter()
                .map(|f| format!("{} ({:.1} %)", f.scope, f.saving_pct))
                .collect();
            top.evidence.push(format!(
                "also on {} more: {}",
                n - 1,
                if others.len() > 8 {
                    format!("{}, …", others[..8].join(", "))
                } else {
                    others.join(", ")
                }
            ));
            // Two read as two ("rank 0 and rank 1", not "rank 0 and 1 more").
            top.scope = match g.as_slice() {
                [other] => format!("{} and {}", top.scope, other.scope),
                _ => format!("{} and {} more", top.scope, n - 1),
            };
            top.severity = g
                .iter()
                .map(|f| f.severity)
                .fold(top.severity, Severity::max);
            top
        })
        .collect()
}

/// One finding per rule, fix and scope: a scope that several files show (a rank's
/// successive profiler windows, a recorded file beside its program's own profile) has
/// one finding per file.
fn merge_within_scopes(findings: Vec<Finding>) -> Vec<Finding> {
    let mut groups: Vec<Vec<Finding>> = Vec::new();
    for f in findings {
        let same = |g: &&mut Vec<Finding>| {
            g[0].rule == f.rule && g[0].fix == f.fix && g[0].scope == f.scope
        };
        match groups.iter_mut().find(same) {
            Some(g) => g.push(f),
            None => groups.push(vec![f]),
        }
    }
    groups.into_iter().map(one_scope).collect()
}

/// The findings of one scope as one. Files whose times overlap saw the same time twice,
/// and the largest saving among them stands for them; files of different times (a
/// profiler's windows) add up, and the share is of all their time. The finding that
/// saves most gives the evidence.
fn one_scope(mut group: Vec<Finding>) -> Finding {
    if group.len() == 1 {
        return group.remove(0);
    }
    let files = group.len();
    // A finding of unknown time may overlap any: all are then one time.
    let start = |f: &Finding| f.looked_at.map_or(i64::MIN, |b| b[0]);
    let end = |f: &Finding| f.looked_at.map_or(i64::MAX, |b| b[1]);
    group.sort_by_key(start);
    // Each run of overlapping times, by its largest saving.
    let mut times: Vec<(i64, usize)> = Vec::new();
    let mut reach = i64::MIN;
    for (i, f) in group.iter().enumerate() {
        match times.last_mut() {
            Some(last) if start(f) < reach => {
                if f.saving_ns > group[last.1].saving_ns {
                    last.1 = i;
                }
            }
            _ => times.push((start(f), i)),
        }
        reach = reach.max(end(f));
    }
    let kept: Vec<usize> = times.iter().map(|t| t.1).collect();
    let saving: i64 = kept.iter().map(|&i| group[i].saving_ns).sum();
    // The time a finding's share is of, back from the share.
    let looked_at: i64 = kept
        .iter()
        .map(|&i| &group[i])
        .filter(|f| f.saving_pct > 0.0)
        .map(|f| (f.saving_ns as f64 * 100.0 / f.saving_pct) as i64)
        .sum();
    let severity = group
        .iter()
        .map(|f| f.severity)
        .fold(Severity::Info, Severity::max);
    let best = kept
        .iter()
        .copied()
        .max_by_key(|&i| (group[i].saving_ns, std::cmp::Reverse(i)))
        .expect("at least one");
    let mut top = group.swap_remove(best);
    top.severity = severity;
    if kept.len() > 1 {
        top.saving_ns = saving;
        if looked_at > 0 {
            top.saving_pct = 100.0 * saving as f64 / looked_at as f64;
        }
        let times = match kept.len() == files {
            true => "each of another time".to_string(),
            false => format!("of {} different times", kept.len()),
        };
        top.evidence.push(format!(
            "found in {files} files of it, {times} (the numbers above are one file's); the \
             saving is theirs together"
        ));
    } else {
        top.evidence.push(format!(
            "found in {files} files of it that cover the same time; the saving is the largest"
        ));
    }
    top
}

/// The names of every rule, for option checks.
pub fn rule_names() -> Vec<&'static str> {
    rules::RULES.iter().map(|r| r.name).collect()
}

fn verdict(findings: &[Finding]) -> String {
    match findings.iter().find(|f| f.severity > Severity::Info) {
        Some(top) if top.saving_ns > 0 => format!(
            "{}: {} (up to {:.1} % of the time looked at)",
            top.scope, top.title, top.saving_pct
        ),
        Some(top) => format!("{}: {}", top.scope, top.title),
        None => "nothing passed a rule's threshold".to_string(),
    }
}

#[cfg(test)]
mod tests;
