//! Clock domains. Every timestamp in a [`crate::Trace`] is an `i64` nanosecond on one
//! trace-global clock; each source keeps the domain it was recorded in and the linear
//! transform that maps that domain onto the global clock.

use crate::strings::StrId;

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ClockId(pub u32);

/// `global = offset_ns + local * (1 + drift_ppb / 1e9)`.
#[derive(Copy, Clone, Debug, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct LinearTransform {
    pub offset_ns: i64,
    pub drift_ppb: f64,
    /// How far off the transform may be, when it was estimated rather than known.
    pub error_bound_ns: Option<i64>,
}

impl LinearTransform {
    pub const IDENTITY: LinearTransform = LinearTransform {
        offset_ns: 0,
        drift_ppb: 0.0,
        error_bound_ns: None,
    };

    pub fn apply(&self, local_ns: i64) -> i64 {
        let drift = if self.drift_ppb == 0.0 {
            0
        } else {
            (local_ns as f64 * self.drift_ppb / 1e9) as i64
        };
        local_ns
            .saturating_add(drift)
            .saturating_add(self.offset_ns)
    }
}

/// How the clock of a host put on another's (`opscope merge`) is named:
/// `host clock NAME`. Its `to_global` is the correction applied to the host's times.
pub const MERGED_CLOCK_PREFIX: &str = "host clock ";

/// A clock some source was recorded with.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClockDomain {
    /// e.g. `kineto`, `CLOCK_MONOTONIC`, `tf-timeline`.
    pub name: StrId,
    pub to_global: LinearTransform,
    /// Nanoseconds to add to a local timestamp to get Unix time, when the source says
    /// (Kineto's `baseTimeNanoseconds`).
    pub unix_offset_ns: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transform_applies_offset_and_drift() {
        let t = LinearTransform {
            offset_ns: 100,
            drift_ppb: 1000.0,
            error_bound_ns: None,
        };
        assert_eq!(t.apply(1_000_000_000), 1_000_000_000 + 1000 + 100);
        assert_eq!(LinearTransform::IDENTITY.apply(-5), -5);
        assert_eq!(LinearTransform::IDENTITY.apply(i64::MAX), i64::MAX);
    }
}
