//! GPU gaps: Nsight Systems' expert rule `gpu_gaps` ("GPU Starvation"). Per process and
//! device, the periods with no kernel, copy or set running, inside the span from the
//! first such work to the end of the last (leading and trailing time left out),
//! measured from the latest end so far (overlapping work leaves no gap); gaps of at
//! least 500 ms by default (`gap=`).

use super::{time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "gpu_gaps",
    anchor: "Nsight Systems expert rule gpu_gaps (gap >= 500 ms)",
    about: "long periods in which a device runs nothing",
    needs_device: true,
    check,
};

/// The gaps of one device's work (sorted by start): `(start, length)`.
pub fn gaps(facts: &Facts, slices: &[usize], threshold: i64) -> Vec<(i64, i64)> {
    let s = &facts.trace().slices;
    let mut out = Vec::new();
    let mut latest_end: Option<i64> = None;
    for &i in slices {
        if let Some(end) = latest_end {
            if s.ts[i] - end >= threshold {
                out.push((end, s.ts[i] - end));
            }
        }
        latest_end = Some(latest_end.map_or(s.end(i), |e| e.max(s.end(i))));
    }
    out
}

fn check(facts: &Facts, out: &mut Out) {
    let threshold = facts.options.gap_ns;
    for work in facts.device_work() {
        let found = gaps(facts, &work.slices, threshold);
        if found.is_empty() {
            continue;
        }
        let total: i64 = found.iter().map(|g| g.1).sum();
        let longest = *found.iter().max_by_key(|g| g.1).unwrap_or(&found[0]);
        let mut f = Finding::of(
            &RULE,
            &work.label,
            format!(
                "{} gap{} of at least {} with nothing on the device",
                found.len(),
                if found.len() == 1 { "" } else { "s" },
                time(threshold)
            ),
        )
        .saving(facts, work.source, total);
        f.severity = Severity::of_share(f.saving_pct, 5.0, 20.0);
        f.evidence.push(format!(
            "{} in gaps; the longest {} from {} ns",
            time(total),
            time(longest.1),
            longest.0
        ));
        let mut by_length = found.clone();
        by_length.sort_by_key(|g| std::cmp::Reverse(g.1));
        for (start, len) in by_length.iter().take(5) {
            f.evidence
                .push(format!("gap of {} at {start} ns", time(*len)));
        }
        f.fix = "find what the host does in these gaps (data loading, checkpointing, \
                 evaluation, synchronisation); add NVTX/record_function ranges or sample \
                 the CPU to see it"
            .to_string();
        f.more = format!("opscope view {}", facts.files());
        f.span = Some([longest.0, longest.0 + longest.1]);
        for (k, v) in [
            ("gaps", found.len() as f64),
            ("gap_ns", total as f64),
            ("longest_ns", longest.1 as f64),
        ] {
            f.figures.insert(k, v);
        }
        out.finding(f);
    }
}
