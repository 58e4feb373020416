//! The straggler across ranks: in synchronous training every rank waits for the
//! slowest at each collective, so the rank that computes most per step sets the step
//! time. Reported when its median computation per step is over 5 % above the ranks'
//! median; the saving is that excess over its steps (what the others wait).

use super::{time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "straggler",
    anchor: "opscope across ranks (HTA's and XProf's straggler views)",
    about: "one rank computing more per step than the others, who wait for it",
    needs_device: false,
    check,
};

const THRESHOLD_PCT: f64 = crate::across::STRAGGLER_PCT;

fn check(facts: &Facts, out: &mut Out) {
    let report = facts.steps();
    let Some(across) = &report.across else {
        return;
    };
    let Some(straggler) = &across.straggler else {
        return;
    };
    if !straggler.stands_out() {
        return;
    }
    let Some(steps) = report.sources.iter().find(|s| {
        crate::across::label(&s.file, s.rank, None) == straggler.at && !s.steps.is_empty()
    }) else {
        return;
    };
    let Some(source) = facts.source_of_file(&steps.file) else {
        return;
    };
    // Its steps in every file of its process (a profiler's windows are one rank).
    let trace = facts.trace();
    let key = crate::roles::process_key(trace, source);
    let count: usize = report
        .sources
        .iter()
        .filter(|s| match key {
            Some(key) => crate::roles::process_key(trace, s.source) == Some(key),
            None => s.source == source,
        })
        .map(|s| s.steps.len())
        .sum();
    let excess = ((straggler.value - straggler.median) * count as f64) as i64;
    let mut f = Finding::of(
        &RULE,
        facts.label(source, None),
        format!(
            "the straggler: it computes {:.0} % more per step than the median rank",
            straggler.above_median_pct
        ),
    )
    .saving(facts, source, excess);
    f.severity = Severity::of_share(straggler.above_median_pct, THRESHOLD_PCT, 20.0);
    f.evidence.push(format!(
        "median computation per step {} against {} across {} ranks",
        time(straggler.value as i64),
        time(straggler.median as i64),
        across.compared
    ));
    if let Some(spread) = across.spreads.iter().find(|s| s.metric == "median_step_ns") {
        f.evidence.push(format!(
            "median step time from {} ({}) to {} ({})",
            time(spread.min as i64),
            spread.min_at,
            time(spread.max as i64),
            spread.max_at
        ));
    }
    f.fix = "look for what differs on that rank: its data (uneven batches or sequence \
             lengths), its GPU (clocks, thermal throttling, a noisy neighbour) or its host"
        .to_string();
    f.more = format!("opscope steps {}", facts.files());
    f.figures
        .insert("above_median_pct", straggler.above_median_pct);
    out.finding(f);
}
