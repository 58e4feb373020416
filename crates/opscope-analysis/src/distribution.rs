//! Summaries of a sample of values: count, mean, sample standard deviation, minimum,
//! quartiles (linear interpolation, as numpy and pandas compute them) and maximum.

use serde::Serialize;

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Distribution {
    pub count: usize,
    pub mean: f64,
    /// Sample standard deviation (n − 1); `None` for fewer than two values.
    pub stddev: Option<f64>,
    pub min: f64,
    pub p25: f64,
    pub p50: f64,
    pub p75: f64,
    pub p99: f64,
    pub max: f64,
}

impl Distribution {
    /// `None` for an empty sample.
    pub fn of(values: &[f64]) -> Option<Distribution> {
        if values.is_empty() {
            return None;
        }
        let mut sorted = values.to_vec();
        // Unstable is as exact here: values equal under `total_cmp` are the same bits.
        sorted.sort_unstable_by(f64::total_cmp);
        let n = sorted.len();
        let mean = sorted.iter().sum::<f64>() / n as f64;
        let stddev = (n > 1).then(|| {
            let squares: f64 = sorted.iter().map(|v| (v - mean).powi(2)).sum();
            (squares / (n - 1) as f64).sqrt()
        });
        Some(Distribution {
            count: n,
            mean,
            stddev,
            min: sorted[0],
            p25: quantile(&sorted, 0.25),
            p50: quantile(&sorted, 0.5),
            p75: quantile(&sorted, 0.75),
            p99: quantile(&sorted, 0.99),
            max: sorted[n - 1],
        })
    }
}

/// The `q` quantile of sorted values by linear interpolation between the closest ranks
/// (Hyndman and Fan's type 7, numpy's default).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    let h = (sorted.len() - 1) as f64 * q;
    let (lo, frac) = (h.floor() as usize, h - h.floor());
    match sorted.get(lo + 1) {
        Some(next) => sorted[lo] + frac * (next - sorted[lo]),
        None => sorted[lo],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quartiles_interpolate_like_numpy() {
        // numpy.percentile([1, 2, 3, 4, 10], [25, 50, 75, 99]) = 2, 3, 4, 9.76
        let d = Distribution::of(&[10.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!(
            (d.min, d.p25, d.p50, d.p75, d.max),
            (1.0, 2.0, 3.0, 4.0, 10.0)
        );
        assert!((d.p99 - 9.76).abs() < 1e-12);
        assert_eq!(d.mean, 4.0);
        // Sample variance: (9 + 4 + 1 + 0 + 36) / 4 = 12.5.
        assert!((d.stddev.unwrap() - 12.5f64.sqrt()).abs() < 1e-12);
        let one = Distribution::of(&[5.0]).unwrap();
        assert_eq!((one.stddev, one.p25, one.p99), (None, 5.0, 5.0));
        assert!(Distribution::of(&[]).is_none());
    }
}
