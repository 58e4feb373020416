//! The program's own account of a run: which op executions happened where, how many ITT
//! tasks and NVTX events it emitted, and the one-line JSON summary printed at exit (the
//! tracer's tests compare a recorded trace against it).

use std::fmt::Write as _;

use crate::ops::KIND_NAMES;

/// One op execution as seen by the worker that ran it. `start_seq`/`end_seq` come from
/// one process-wide counter, so they order executions across threads.
// Only the tests read these; the program records them anyway so that it is what is tested.
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Clone, Copy, Debug)]
pub struct Execution {
    pub step: usize,
    pub node: usize,
    pub worker: usize,
    pub start_seq: u64,
    pub end_seq: u64,
}

/// What the program did, by its own account.
#[derive(Debug)]
pub struct Report {
    pub steps: usize,
    pub threads: usize,
    /// ITT tasks emitted per op type, indexed like `KIND_NAMES`.
    pub op_counts: [u64; KIND_NAMES.len()],
    pub nvtx_ranges: u64,
    pub nvtx_marks: u64,
    /// The loss of every step.
    pub losses: Vec<f32>,
    /// Sum of the step losses plus the sum of the final weights.
    pub checksum: f64,
    pub executions: Vec<Execution>,
}

impl Report {
    /// The one-line JSON summary printed at exit.
    pub fn to_json(&self) -> String {
        let mut s = format!(
            "{{\"steps\":{},\"threads\":{},\"ops\":{{",
            self.steps, self.threads
        );
        for (i, (name, count)) in KIND_NAMES.iter().zip(self.op_counts).enumerate() {
            let sep = if i == 0 { "" } else { "," };
            let _ = write!(s, "{sep}\"{name}\":{count}");
        }
        let _ = write!(
            s,
            "}},\"nvtx_ranges\":{},\"nvtx_marks\":{},\"checksum\":",
            self.nvtx_ranges, self.nvtx_marks
        );
        // JSON has no NaN or infinity; Display never uses exponents, so finite is valid.
        if self.checksum.is_finite() {
            let _ = write!(s, "{}", self.checksum);
        } else {
            s.push_str("null");
        }
        s.push('}');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_checksum_is_null() {
        let report = Report {
            steps: 0,
            threads: 1,
            op_counts: [0; KIND_NAMES.len()],
            nvtx_ranges: 0,
            nvtx_marks: 1,
            losses: Vec::new(),
            checksum: f64::NAN,
            executions: Vec::new(),
        };
        assert!(report.to_json().ends_with(r#""checksum":null}"#));
    }
}
