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
    }
}
