//! Why a stream sat idle between two pieces of work (HTA's idle-time breakdown): the
//! host launched the next one late (host wait), or it came soon after the previous one
//! ended (kernel wait: launch overhead and dependencies), or neither (other).

use serde::Serialize;

use crate::correlate::Correlation;
use crate::distribution::Distribution;
use opscope_model::Trace;

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct IdleCategory {
    pub time_ns: i64,
    /// Gaps in this category (gaps of zero length included).
    pub gaps: usize,
    /// Share of the stream's idle time; `None` when the stream was never idle.
    pub ratio: Option<f64>,
    /// The lengths of those gaps, in ns.
    pub distribution: Option<Distribution>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct StreamIdle {
    pub host_wait: IdleCategory,
    pub kernel_wait: IdleCategory,
    pub other: IdleCategory,
}

/// Where the gap before a piece of work is measured from.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum GapsFrom {
    /// The latest end of earlier work on the stream: work that overlaps on a stream
    /// (MTIA queues run DMA beside kernels) leaves no gap, never a negative one.
    #[default]
    LatestEnd,
    /// The end of the work just before, as HTA measures: overlapping work gives
    /// negative "idle" time. Only for comparing with HTA.
    PreviousWork,
}

/// Why a stream sat idle before a piece of work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleCause {
    /// The host launched the work after the stream's earlier work had ended.
    HostWait,
    /// A gap shorter than the threshold: launch overhead, dependencies.
    KernelWait,
    Other,
}

impl IdleCause {
    pub const ALL: [IdleCause; 3] = [IdleCause::HostWait, IdleCause::KernelWait, IdleCause::Other];

    pub fn name(self) -> &'static str {
        match self {
            IdleCause::HostWait => "host wait",
            IdleCause::KernelWait => "kernel wait",
            IdleCause::Other => "other",
        }
    }
}

/// The gap before each piece of `work` of one stream but the first (slice rows in time
/// order), and its cause: `(work, gap_ns, cause)`.
pub fn gaps(
    trace: &Trace,
    correlation: &Correlation,
    work: &[usize],
    kernel_wait_threshold_ns: i64,
    gaps_from: GapsFrom,
) -> Vec<(usize, i64, IdleCause)> {
    let s = &trace.slices;
    let mut out = Vec::with_capacity(work.len());
    let mut latest_end: Option<i64> = None;
    for &i in work {
        if let Some(prev_end) = latest_end {
            let gap = match gaps_from {
                GapsFrom::LatestEnd => (s.ts[i] - prev_end).max(0),
                GapsFrom::PreviousWork => s.ts[i] - prev_end,
            };
            let launched_late = correlation
                .launch_of(i)
                .is_some_and(|call| s.ts[call] > prev_end);
            let cause = if launched_late {
                IdleCause::HostWait
            } else if gap < kernel_wait_threshold_ns {
                IdleCause::KernelWait
            } else {
                IdleCause::Other
            };
            out.push((i, gap, cause));
        }
        latest_end = Some(match (gaps_from, latest_end) {
            (GapsFrom::LatestEnd, Some(e)) => e.max(s.end(i)),
            _ => s.end(i),
        });
    }
    out
}

/// Classifies the gap before each piece of work of one stream. `work` holds slice rows in
/// time order.
pub fn stream_idle(
    trace: &Trace,
    correlation: &Correlation,
    work: &[usize],
    kernel_wait_threshold_ns: i64,
    gaps_from: GapsFrom,
) -> StreamIdle {
    let mut gaps: [Vec<f64>; 3] = Default::default();
    for (_, gap, cause) in self::gaps(
        trace,
        correlation,
        work,
        kernel_wait_threshold_ns,
        gaps_from,
    ) {
        gaps[cause as usize].push(gap as f64);
    }
    // (An empty f64 sum is -0.0.)
    let total: f64 = gaps.iter().flatten().fold(0.0, |a, b| a + b);
    let category = |values: &Vec<f64>| {
        let time = values.iter().fold(0.0, |a, b| a + b);
        IdleCategory {
            time_ns: time as i64,
            gaps: values.len(),
            ratio: (total > 0.0).then(|| time / total),
            distribution: Distribution::of(values),
        }
    };
    StreamIdle {
        host_wait: category(&gaps[0]),
        kernel_wait: category(&gaps[1]),
        other: category(&gaps[2]),
    }
}
