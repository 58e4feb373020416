//! Ranks whose steps drift apart: in synchronous training every rank starts step N at
//! about the same time, since each waits for the others at the collectives. When one
//! rank's start of step N moves away from the others' step after step — by more than
//! 10 % of the median step over the steps the ranks share — the ranks do not run in
//! lockstep (asynchronous or pipelined work, a rank that skips collectives) or their
//! clocks drift apart (which `opscope merge` corrects).

use super::{time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "step_drift",
    anchor: "opscope across ranks (step starts that move apart)",
    about: "ranks whose step starts move apart step after step",
    check,
};

const THRESHOLD_PCT: f64 = 10.0;

fn check(facts: &Facts, out: &mut Out) {
    let report = facts.steps();
    // Ranks with step markers, by step name.
    let ranks: Vec<&crate::steps::SourceSteps> = report
        .sources
        .iter()
        .filter(|s| {
            s.rank.is_some()
                && s.steps.len() >= 2
                && s.found_by == crate::steps::StepSource::Markers
        })
        .collect();
    if ranks.len() < 2 {
        return;
    }
    let reference = ranks[0];
    let mut lengths: Vec<i64> = reference.steps.iter().map(|x| x.dur_ns).collect();
    lengths.sort_unstable();
    let median = lengths[lengths.len() / 2];
    if median <= 0 {
        return;
    }
    let mut worst: Option<(&crate::steps::SourceSteps, i64, usize)> = None;
    for rank in &ranks[1..] {
        let offsets: Vec<i64> = rank
            .steps
            .iter()
            .filter_map(|st| {
                let other = reference.steps.iter().find(|r| r.name == st.name)?;
                Some(st.start_ns - other.start_ns)
            })
            .collect();
        if offsets.len() < 2 {
            continue;
        }
        let drift = offsets.iter().max().unwrap_or(&0) - offsets.iter().min().unwrap_or(&0);
        if worst.is_none_or(|w| drift > w.1) {
            worst = Some((rank, drift, offsets.len()));
        }
    }
    let Some((rank, drift, shared)) = worst else {
        return;
    };
    let pct = 100.0 * drift as f64 / median as f64;
    if pct <= THRESHOLD_PCT {
        return;
    }
    let Some(source) = facts.source_of_file(&rank.file) else {
        return;
    };
    let mut f = Finding::of(
        &RULE,
        facts.label(source, None),
        format!(
            "its step starts move {} ({pct:.0} % of a step) against rank {}'s",
            time(drift),
            reference.rank.unwrap_or(0)
        ),
    );
    f.severity = Severity::of_share(pct, THRESHOLD_PCT, 50.0);
    f.evidence.push(format!(
        "over {shared} steps both ranks mark; median step {}",
        time(median)
    ));
    f.fix = "if the ranks should run in lockstep, look for collectives one rank skips or \
             a rank that runs ahead; if their hosts' clocks drift, put them on one clock \
             (opscope merge)"
        .to_string();
    f.more = format!("opscope steps {}", facts.files());
    f.figures.insert("drift_ns", drift as f64);
    f.figures.insert("pct_of_step", pct);
    out.finding(f);
}
