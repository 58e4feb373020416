//! Launch-delay outliers: HTA's kernel launch statistics (`launch_delay_cutoff=100`):
//! the time from the end of a launch call to the start of its kernel, over 100 µs.
//! A long delay means the device was still busy with earlier work (the host is ahead:
//! good) or that something held the queue; reported as information with the worst
//! ones, as HTA plots them; with the count of launch calls over 50 µs (HTA's runtime
//! outliers).

use super::{time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "launch_delay",
    anchor: "HTA kernel launch statistics (launch delay > 100 us)",
    about: "kernels that start long after their launch returned",
    needs_device: true,
    check,
};

const CUTOFF_NS: i64 = 100_000;
const RUNTIME_CUTOFF_NS: i64 = 50_000;

fn check(facts: &Facts, out: &mut Out) {
    let s = &facts.trace().slices;
    let launches = facts.names_where(|n| crate::critical_path::LAUNCHES.contains(&n));
    for work in facts.device_work() {
        let mut outliers: Vec<(usize, i64)> = Vec::new();
        let (mut launched, mut long_calls) = (0usize, 0usize);
        for (i, call) in super::hta_launches(facts, work, &launches) {
            launched += 1;
            // HTA's runtime outliers: launch calls over 50 µs.
            long_calls += usize::from(s.dur[call] > RUNTIME_CUTOFF_NS);
            let delay = (s.ts[i] - s.end(call)).max(0);
            if delay > CUTOFF_NS {
                outliers.push((i, delay));
            }
        }
        if outliers.is_empty() {
            continue;
        }
        let worst = *outliers.iter().max_by_key(|o| o.1).unwrap_or(&outliers[0]);
        let mut f = Finding::of(
            &RULE,
            &work.label,
            format!(
                "{} of {launched} kernels start over {} after their launch returned",
                outliers.len(),
                time(CUTOFF_NS)
            ),
        );
        f.severity = Severity::Info;
        f.evidence.push(format!(
            "{long_calls} launch calls take over 50 µs (HTA's runtime outliers)"
        ));
        f.evidence.push(format!(
            "the longest delay {} ({})",
            time(worst.1),
            facts.name(worst.0)
        ));
        f.fix = "usually the device still running earlier work (the host is ahead, which \
                 is good); if the device sits idle meanwhile, look for a full launch queue \
                 or a synchronisation between launch and start"
            .to_string();
        f.more = format!("opscope gpu {}", facts.files());
        f.span = Some([s.ts[worst.0] - worst.1, s.end(worst.0)]);
        for (k, v) in [
            ("outliers", outliers.len() as f64),
            ("launched", launched as f64),
            ("runtime_outliers", long_calls as f64),
        ] {
            f.figures.insert(k, v);
        }
        out.finding(f);
    }
}
