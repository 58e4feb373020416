//! Low GPU time utilization: Nsight Systems' expert rule `gpu_time_util` ("GPU Low
//! Utilization"). Per process and device, the span from the first kernel, copy or set
//! to the end of the last is cut into 30 equal chunks; a chunk's utilization is the
//! time its work overlaps it over its length (concurrent work adds, so it may pass
//! 100 %); chunks under 50 % are reported, neighbours merged with their
//! duration-weighted utilization.

use super::{time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "gpu_time_util",
    anchor: "Nsight Systems expert rule gpu_time_util (30 chunks, < 50 %)",
    about: "stretches of a device's span where it is mostly idle",
    needs_device: true,
    check,
};

/// A run of low chunks: start, length (ns), utilization (percent).
#[derive(Clone, Debug, PartialEq)]
pub struct LowRegion {
    pub start: i64,
    pub len: i64,
    pub utilization_pct: f64,
}

/// The chunks' utilizations (percent) and their bounds, of work sorted by start.
pub fn chunks(facts: &Facts, slices: &[usize], n: usize) -> Vec<(i64, i64, f64)> {
    let s = &facts.trace().slices;
    let Some(first) = slices.iter().map(|&i| s.ts[i]).min() else {
        return Vec::new();
    };
    let last = slices.iter().map(|&i| s.end(i)).max().unwrap_or(first);
    if last <= first || n == 0 {
        return Vec::new();
    }
    let span = (last - first) as f64;
    let bound = |k: usize| first + (span * k as f64 / n as f64).round() as i64;
    let mut busy = vec![0i64; n];
    for &i in slices {
        let (a, b) = (s.ts[i], s.end(i));
        let from = (((a - first) as f64 / span * n as f64) as usize).min(n - 1);
        for (k, b_k) in busy.iter_mut().enumerate().skip(from) {
            let (lo, hi) = (bound(k), bound(k + 1));
            if lo >= b {
                break;
            }
            *b_k += (b.min(hi) - a.max(lo)).max(0);
        }
    }
    (0..n)
        .map(|k| {
            let (lo, hi) = (bound(k), bound(k + 1));
            let pct = if hi > lo {
                100.0 * busy[k] as f64 / (hi - lo) as f64
            } else {
                100.0
            };
            (lo, hi, pct)
        })
        .collect()
}

/// Low chunks, consecutive ones merged.
pub fn low_regions(chunks: &[(i64, i64, f64)], threshold: f64) -> Vec<LowRegion> {
    let mut out: Vec<LowRegion> = Vec::new();
    let mut previous_low = false;
    for &(lo, hi, pct) in chunks {
        let low = pct < threshold;
        if low {
            match out.last_mut().filter(|_| previous_low) {
                Some(r) => {
                    let len = hi - r.start;
                    r.utilization_pct =
                        (r.utilization_pct * r.len as f64 + pct * (hi - lo) as f64) / len as f64;
                    r.len = len;
                }
                None => out.push(LowRegion {
                    start: lo,
                    len: hi - lo,
                    utilization_pct: pct,
                }),
            }
        }
        previous_low = low;
    }
    out
}

fn check(facts: &Facts, out: &mut Out) {
    let (n, threshold) = (facts.options.util_chunks, facts.options.util_threshold_pct);
    for work in facts.device_work() {
        let all = chunks(facts, &work.slices, n);
        let low = low_regions(&all, threshold);
        if low.is_empty() {
            continue;
        }
        // What a fix could win at most: the idle part of the low stretches.
        let idle: i64 = low
            .iter()
            .map(|r| (r.len as f64 * (1.0 - r.utilization_pct / 100.0).max(0.0)) as i64)
            .sum();
        let low_time: i64 = low.iter().map(|r| r.len).sum();
        let mut f = Finding::of(
            &RULE,
            &work.label,
            format!(
                "{} of {} chunks of the device's span are under {threshold:.0} % busy",
                all.iter().filter(|c| c.2 < threshold).count(),
                all.len()
            ),
        )
        .saving(facts, work.source, idle);
        f.severity = Severity::of_share(f.saving_pct, 5.0, 20.0);
        f.evidence.push(format!(
            "{} in low stretches, {} of it idle",
            time(low_time),
            time(idle)
        ));
        for r in low.iter().take(5) {
            f.evidence.push(format!(
                "{:.1} % busy for {} from {} ns",
                r.utilization_pct,
                time(r.len),
                r.start
            ));
        }
        f.fix = "see what the host does in the low stretches (the steps' breakdown, \
                 CPU sampling); more work per launch (batch size) raises utilization"
            .to_string();
        f.more = format!("opscope steps {}", facts.files());
        let worst = low
            .iter()
            .max_by_key(|r| (r.len as f64 * (100.0 - r.utilization_pct)) as i64)
            .unwrap_or(&low[0]);
        f.span = Some([worst.start, worst.start + worst.len]);
        for (k, v) in [
            ("chunks", all.len() as f64),
            (
                "low_chunks",
                all.iter().filter(|c| c.2 < threshold).count() as f64,
            ),
            ("regions", low.len() as f64),
            ("low_ns", low_time as f64),
        ] {
            f.figures.insert(k, v);
        }
        out.finding(f);
    }
}
