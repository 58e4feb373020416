//! How long device work waits after its launch (launch-to-start latency) and how many
//! launched pieces of work are queued on a stream at once (queue depth), from the
//! launches the correlation pass found.

use serde::Serialize;

use crate::correlate::Correlation;
use crate::distribution::Distribution;
use opscope_model::Trace;

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LaunchStats {
    /// Work with a known launch.
    pub launched: usize,
    /// From the start of the launch call to the start of the work, in ns.
    pub latency: Option<Distribution>,
    /// Work that started before its launch call did: the host and device clocks
    /// disagree.
    pub started_before_launch: usize,
    /// Most pieces of work launched and not yet finished at one time.
    pub max_queue_depth: usize,
    /// Queue depth averaged over the time from the first launch to the last end.
    pub mean_queue_depth: f64,
    /// Queue depth over time, in equal buckets of that span.
    pub queue_over_time: Option<QueueSeries>,
}

/// Queue depth over time: the span from the first launch to the last end cut into
/// equal buckets, with the deepest and the time-weighted mean depth of each.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct QueueSeries {
    pub start_ns: i64,
    pub bucket_ns: i64,
    pub max: Vec<u32>,
    pub mean: Vec<f64>,
}

/// Buckets of [`QueueSeries`].
pub const QUEUE_BUCKETS: usize = 48;

/// The series of a sorted list of depth changes `(time, +1 | -1)`.
fn queue_series(changes: &[(i64, i32)]) -> Option<QueueSeries> {
    let (start, end) = (changes.first()?.0, changes.last()?.0);
    if end <= start {
        return None;
    }
    // Round the bucket up so that the buckets cover the span.
    let bucket = (end - start + QUEUE_BUCKETS as i64 - 1) / QUEUE_BUCKETS as i64;
    let mut max = vec![0u32; QUEUE_BUCKETS];
    let mut weighted = vec![0f64; QUEUE_BUCKETS];
    let mut depth = 0i64;
    for pair in changes.windows(2) {
        depth += i64::from(pair[0].1);
        let (mut from, to) = (pair[0].0, pair[1].0);
        // Spread this constant depth over the buckets it spans.
        while from < to {
            let b = (((from - start) / bucket) as usize).min(QUEUE_BUCKETS - 1);
            let bucket_end = (start + (b as i64 + 1) * bucket).min(to);
            let until = if b == QUEUE_BUCKETS - 1 {
                to
            } else {
                bucket_end
            };
            max[b] = max[b].max(depth.max(0) as u32);
            weighted[b] += depth as f64 * (until - from) as f64;
            from = until;
        }
    }
    Some(QueueSeries {
        start_ns: start,
        bucket_ns: bucket,
        max,
        mean: weighted.iter().map(|w| w / bucket as f64).collect(),
    })
}

/// `work`: the slice rows of one stream.
pub fn launch_stats(trace: &Trace, correlation: &Correlation, work: &[usize]) -> LaunchStats {
    let s = &trace.slices;
    let mut latencies = Vec::new();
    let mut changes: Vec<(i64, i32)> = Vec::new();
    for &i in work {
        let Some(call) = correlation.launch_of(i) else {
            continue;
        };
        latencies.push((s.ts[i] - s.ts[call]) as f64);
        let queued_at = s.ts[call].min(s.ts[i]);
        // Zero-length work is never queued for any time.
        if s.end(i) > queued_at {
            changes.push((queued_at, 1));
            changes.push((s.end(i), -1));
        }
    }
    // Ends before starts at one instant, so back-to-back work does not count twice.
    changes.sort_unstable();
    let (mut depth, mut max_depth, mut weighted) = (0i64, 0i64, 0f64);
    for pair in changes.windows(2) {
        depth += pair[0].1 as i64;
        max_depth = max_depth.max(depth);
        weighted += depth as f64 * (pair[1].0 - pair[0].0) as f64;
    }
    let span = match (changes.first(), changes.last()) {
        (Some(a), Some(b)) if b.0 > a.0 => (b.0 - a.0) as f64,
        _ => 0.0,
    };
    LaunchStats {
        launched: latencies.len(),
        started_before_launch: latencies.iter().filter(|&&l| l < 0.0).count(),
        latency: Distribution::of(&latencies),
        max_queue_depth: max_depth.max(0) as usize,
        mean_queue_depth: if span > 0.0 { weighted / span } else { 0.0 },
        queue_over_time: queue_series(&changes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_series_spreads_depth_over_buckets() {
        // Depth 1 over [0, 48), 2 over [24, 36): each bucket is 1 ns.
        let mut changes = vec![(0, 1), (48, -1), (24, 1), (36, -1)];
        changes.sort_unstable();
        let q = queue_series(&changes).unwrap();
        assert_eq!((q.start_ns, q.bucket_ns), (0, 1));
        assert_eq!(q.max[0], 1);
        assert_eq!(q.max[24], 2);
        assert_eq!(q.max[35], 2);
        assert_eq!(q.max[36], 1);
        assert!((q.mean[30] - 2.0).abs() < 1e-12);
        // The buckets' weighted means add up to the whole span's.
        let total: f64 = q.mean.iter().sum::<f64>() * q.bucket_ns as f64;
        assert!((total - (48.0 + 12.0)).abs() < 1e-9);
        assert!(queue_series(&[(5, 1), (5, -1)]).is_none());
    }
}
