//! Across ranks and devices: the spread (min, median, max) of each device's busy,
//! computation and idle time, and the straggler — the device with the most
//! computation, which the others wait for at every collective — and by how much it
//! exceeds the median.

use serde::Serialize;

use super::RankReport;

/// One figure across devices.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Spread {
    pub metric: &'static str,
    pub min: f64,
    pub median: f64,
    pub max: f64,
    /// Which device has the least and the most (`rank 3 gpu 0`).
    pub min_at: String,
    pub max_at: String,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Straggler {
    pub at: String,
    pub compute_ns: i64,
    pub median_compute_ns: f64,
    /// How far its computation is above the median, in percent of the median.
    pub above_median_pct: f64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CrossRank {
    /// Devices compared (a rank's file × device).
    pub devices: usize,
    pub spreads: Vec<Spread>,
    pub straggler: Option<Straggler>,
}

/// How a device is named in the summary.
pub fn label(r: &RankReport) -> String {
    let who = r
        .rank
        .map_or_else(|| r.file.clone(), |rank| format!("rank {rank}"));
    match &r.device {
        Some(device) => format!("{who} {device}"),
        None => who,
    }
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// The spread of `values` (one per device, with its label); `None` when empty.
pub fn spread(metric: &'static str, values: &[(String, f64)]) -> Option<Spread> {
    let mut sorted: Vec<f64> = values.iter().map(|v| v.1).collect();
    sorted.sort_by(f64::total_cmp);
    // Ties go to the first device in report order.
    let min_at = values.iter().min_by(|a, b| a.1.total_cmp(&b.1))?;
    let max_at = values.iter().rev().max_by(|a, b| a.1.total_cmp(&b.1))?;
    Some(Spread {
        metric,
        min: sorted[0],
        median: median(&sorted),
        max: sorted[sorted.len() - 1],
        min_at: min_at.0.clone(),
        max_at: max_at.0.clone(),
    })
}

/// The summary of two or more devices; `None` for fewer.
pub fn cross_rank(ranks: &[RankReport]) -> Option<CrossRank> {
    if ranks.len() < 2 {
        return None;
    }
    let column = |f: &dyn Fn(&RankReport) -> f64| -> Vec<(String, f64)> {
        ranks.iter().map(|r| (label(r), f(r))).collect()
    };
    let metrics: [(&'static str, Vec<(String, f64)>); 5] = [
        ("busy_ns", column(&|r| r.temporal.busy_ns as f64)),
        ("compute_ns", column(&|r| r.temporal.compute_ns as f64)),
        (
            "non_compute_ns",
            column(&|r| r.temporal.non_compute_ns as f64),
        ),
        ("idle_ns", column(&|r| r.temporal.idle_ns as f64)),
        ("idle_pct", column(&|r| r.temporal.idle_pct)),
    ];
    let spreads: Vec<Spread> = metrics
        .iter()
        .filter_map(|(name, values)| spread(name, values))
        .collect();
    let compute = spreads.iter().find(|s| s.metric == "compute_ns")?;
    let straggler = (compute.max > 0.0).then(|| Straggler {
        at: compute.max_at.clone(),
        compute_ns: compute.max as i64,
        median_compute_ns: compute.median,
        above_median_pct: if compute.median > 0.0 {
            100.0 * (compute.max - compute.median) / compute.median
        } else {
            0.0
        },
    });
    Some(CrossRank {
        devices: ranks.len(),
        spreads,
        straggler,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_names_the_extremes() {
        let values = vec![
            ("rank 0".to_string(), 10.0),
            ("rank 1".to_string(), 40.0),
            ("rank 2".to_string(), 20.0),
            ("rank 3".to_string(), 12.0),
        ];
        let s = spread("compute_ns", &values).unwrap();
        assert_eq!((s.min, s.median, s.max), (10.0, 16.0, 40.0));
        assert_eq!((s.min_at.as_str(), s.max_at.as_str()), ("rank 0", "rank 1"));
        assert!(spread("x", &[]).is_none());
        let tie = spread("x", &[("a".into(), 1.0), ("b".into(), 1.0)]).unwrap();
        assert_eq!((tie.min_at.as_str(), tie.max_at.as_str()), ("a", "a"));
    }
}
