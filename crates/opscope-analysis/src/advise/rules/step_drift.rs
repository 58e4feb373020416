//! Ranks whose steps drift apart: in synchronous training every rank starts step N at
//! about the same time, since each waits for the others at the collectives. When one
//! rank's start of step N moves away from the others' step after step — by more than
//! 10 % of the median step over the steps the ranks share — the ranks do not run in
//! lockstep (asynchronous or pipelined work, a rank that skips collectives) or their
//! clocks drift apart (which `opscope merge` corrects). The movement is a trend fitted
//! robustly, so one step that starts late on a busy host is not a drift.

use super::{time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "step_drift",
    anchor: "opscope across ranks (step starts that move apart)",
    about: "ranks whose step starts move apart step after step",
    needs_device: false,
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
        let offsets: Vec<(i64, i64)> = rank
            .steps
            .iter()
            .filter_map(|st| {
                let other = reference.steps.iter().find(|r| r.name == st.name)?;
                Some((other.start_ns, st.start_ns - other.start_ns))
            })
            .collect();
        if offsets.len() < 2 {
            continue;
        }
        let drift = trend_ns(&offsets);
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

/// How far a rank's offset from the reference moves over the steps they share: the
/// Theil–Sen slope (the median of the slopes between every two steps) times the span
/// of the reference's step starts, as a magnitude. The range of the offsets would do
/// on a quiet host, but one step that starts 15 ms late there makes ranks in lockstep
/// look like drifting ones; the median slope ignores up to about 29 % of such steps.
///
/// `points` are (the reference's step start, the offset of this rank's start), in
/// step order. Above `MAX_POINTS` steps an even sample of them is fitted, so the
/// pairs stay within a few tens of thousands.
fn trend_ns(points: &[(i64, i64)]) -> i64 {
    const MAX_POINTS: usize = 256;
    let sample: Vec<(i64, i64)> = if points.len() > MAX_POINTS {
        (0..MAX_POINTS)
            .map(|k| points[k * (points.len() - 1) / (MAX_POINTS - 1)])
            .collect()
    } else {
        points.to_vec()
    };
    let mut slopes: Vec<f64> = Vec::with_capacity(sample.len() * sample.len() / 2);
    for (i, a) in sample.iter().enumerate() {
        for b in &sample[i + 1..] {
            if b.0 != a.0 {
                slopes.push((b.1 - a.1) as f64 / (b.0 - a.0) as f64);
            }
        }
    }
    if slopes.is_empty() {
        return 0;
    }
    slopes.sort_unstable_by(f64::total_cmp);
    let n = slopes.len();
    let slope = if n % 2 == 1 {
        slopes[n / 2]
    } else {
        (slopes[n / 2 - 1] + slopes[n / 2]) / 2.0
    };
    let first = sample.iter().map(|p| p.0).min().unwrap_or(0);
    let last = sample.iter().map(|p| p.0).max().unwrap_or(0);
    (slope * (last - first) as f64).abs().round() as i64
}

#[cfg(test)]
mod tests {
    use super::trend_ns;

    const STEP: i64 = 118_000_000;

    fn steps(offsets: &[i64]) -> Vec<(i64, i64)> {
        offsets
            .iter()
            .enumerate()
            .map(|(k, &o)| (k as i64 * STEP, o))
            .collect()
    }

    #[test]
    fn ranks_in_lockstep_with_one_late_start_do_not_drift() {
        // Nine steps within 0.3 ms of each other but one, 14.85 ms late: what a loaded
        // 2-core CI host gave two all-reducing ranks (their range said 13 % of a step).
        let mut offsets = [
            120_000, -80_000, 250_000, 10_000, -200_000, 60_000, 0, 90_000, -40_000,
        ];
        offsets[4] += 14_850_000;
        assert!(
            trend_ns(&steps(&offsets)) < 1_000_000,
            "{}",
            trend_ns(&steps(&offsets))
        );
    }

    #[test]
    fn a_rank_falling_behind_step_after_step_drifts_by_all_of_it() {
        // 100 ms more per step, with a late start on top: 800 ms over nine steps.
        let mut offsets: Vec<i64> = (0..9).map(|k| k * 100_000_000).collect();
        offsets[3] += 15_000_000;
        let got = trend_ns(&steps(&offsets));
        assert!((got - 800_000_000).abs() < 1_000_000, "{got}");
        // Running ahead is as much a drift as falling behind.
        let ahead: Vec<i64> = (0..9).map(|k| -k * 100_000_000).collect();
        assert!((trend_ns(&steps(&ahead)) - 800_000_000).abs() < 1_000_000);
    }

    #[test]
    fn a_clock_running_fast_drifts_in_proportion_over_many_steps() {
        // 5 % fast over 2,000 steps: fitted on a sample of them, still 5 % of the span.
        let points: Vec<(i64, i64)> = (0..2000).map(|k| (k * STEP, k * STEP / 20)).collect();
        let got = trend_ns(&points);
        let want = 1999 * STEP / 20;
        assert!((got - want).abs() < want / 1000, "{got} against {want}");
    }
}
