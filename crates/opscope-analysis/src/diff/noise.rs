//! Whether a change is more than step-to-step noise: the change of the median between
//! two samples of per-step values, with a bootstrap confidence interval (the steps of
//! each side resampled with replacement), from a fixed seed so that the same inputs
//! always give the same interval.

/// The median of `values` (the mean of the middle two for an even count); 0 for none.
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    middle(&sorted)
}

fn middle(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    match n % 2 {
        1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

pub fn mean(values: &[f64]) -> f64 {
    match values.len() {
        0 => 0.0,
        n => values.iter().sum::<f64>() / n as f64,
    }
}

/// The fewest steps a side needs for an interval: with fewer, a resample is mostly the
/// same few values and the interval says nothing.
pub const MIN_STEPS: usize = 3;

/// The 95 % percentile interval of `median(b) - median(a)` over `resamples` bootstrap
/// resamples, or `None` when a side has fewer than [`MIN_STEPS`] values.
pub fn median_change_interval(a: &[f64], b: &[f64], resamples: usize) -> Option<(f64, f64)> {
    if a.len() < MIN_STEPS || b.len() < MIN_STEPS || resamples == 0 {
        return None;
    }
    let mut rng = SplitMix(0x6f70_7363_6f70_6521 ^ (a.len() as u64) << 32 ^ b.len() as u64);
    let (mut a_side, mut b_side) = (Resampled::new(a), Resampled::new(b));
    let mut changes: Vec<f64> = (0..resamples)
        .map(|_| b_side.median(&mut rng) - a_side.median(&mut rng))
        .collect();
    changes.sort_unstable_by(f64::total_cmp);
    let at = |q: f64| changes[((q * (resamples - 1) as f64).round() as usize).min(resamples - 1)];
    Some((at(0.025), at(0.975)))
}

/// One side's values, sorted once, and the medians of resamples of them: a resample
/// is a count of draws per sorted place, so that its median is found by walking the
/// counts, in time linear in the values, with no sort per resample.
struct Resampled {
    sorted: Vec<f64>,
    drawn: Vec<u32>,
}

impl Resampled {
    fn new(values: &[f64]) -> Resampled {
        let mut sorted = values.to_vec();
        sorted.sort_unstable_by(f64::total_cmp);
        Resampled {
            drawn: vec![0; sorted.len()],
            sorted,
        }
    }

    fn median(&mut self, rng: &mut SplitMix) -> f64 {
        let n = self.sorted.len();
        self.drawn.fill(0);
        for _ in 0..n {
            self.drawn[(rng.next() % n as u64) as usize] += 1;
        }
        // The values at places n/2 (and n/2 - 1 for an even count) of the resample.
        let nth = |k: usize| {
            let mut seen = 0usize;
            for (place, &count) in self.drawn.iter().enumerate() {
                seen += count as usize;
                if seen > k {
                    return self.sorted[place];
                }
            }
            self.sorted[n - 1]
        };
        match n % 2 {
            1 => nth(n / 2),
            _ => (nth(n / 2 - 1) + nth(n / 2)) / 2.0,
        }
    }
}

/// SplitMix64: small, fast and good enough to pick resampled indices.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }

    /// Two samples from one noisy distribution: the interval holds 0. The same
    /// distribution shifted by 10 units (noise ±1): the interval holds 10 and not 0.
    #[test]
    fn the_interval_holds_the_shift_and_not_zero_only_when_shifted() {
        let noise = |i: usize| ((i * 7919) % 13) as f64 / 6.0 - 1.0;
        let a: Vec<f64> = (0..30).map(|i| 100.0 + noise(i)).collect();
        let same: Vec<f64> = (30..60).map(|i| 100.0 + noise(i)).collect();
        let shifted: Vec<f64> = (30..60).map(|i| 110.0 + noise(i)).collect();
        let (lo, hi) = median_change_interval(&a, &same, 2000).unwrap();
        assert!(lo <= 0.0 && 0.0 <= hi, "{lo}..{hi}");
        let (lo, hi) = median_change_interval(&a, &shifted, 2000).unwrap();
        assert!(lo > 0.0 && lo <= 10.0 && 10.0 <= hi, "{lo}..{hi}");
        assert_eq!(median_change_interval(&a[..2], &shifted, 2000), None);
        // The same inputs, the same interval.
        assert_eq!(
            median_change_interval(&a, &shifted, 500),
            median_change_interval(&a, &shifted, 500)
        );
    }
}
