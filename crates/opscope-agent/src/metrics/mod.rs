//! The live metrics: figures the agent keeps per process and per second of its window,
//! each from the slices of every chunk the process sends. The snapshot gives each as
//! `{name}_percent` (of the last 10 s, of one thread, as CPU is of one core) and
//! `{name}_ms` (since the process connected); `top` and the snapshot's text show a
//! column of each. A new metric is a module here and a line in [`LIVE_METRICS`].

mod communication;

use opscope_model::SliceKind;

/// One live metric.
pub struct LiveMetric {
    /// Its name in the snapshot (`{name}_percent`, `{name}_ms`) and in its text.
    pub name: &'static str,
    /// Its column's header in `top`, and in the snapshot's table of processes.
    pub column: &'static str,
    pub window_column: &'static str,
    /// A fresh tally, for one process's stream.
    pub tally: fn() -> Box<dyn MetricTally>,
}

/// A metric's tally of one process's stream, chunk by chunk.
pub trait MetricTally: Send {
    /// A slice of the chunk, of the kind the session's reports give it.
    fn slice(&mut self, kind: SliceKind, name: &str, start_ns: i64, end_ns: i64);
    /// The time (ns) the chunk's slices add that no chunk before counted.
    fn end_chunk(&mut self) -> u64;
}

/// Every live metric, in the order of their columns.
pub static LIVE_METRICS: &[LiveMetric] = &[communication::COMMUNICATION];

/// A fresh tally of every metric, in the table's order.
pub fn tallies() -> Vec<Box<dyn MetricTally>> {
    LIVE_METRICS.iter().map(|m| (m.tally)()).collect()
}

/// The snapshot's keys of metric `m`: its share of the window and its total.
pub fn percent_key(m: &LiveMetric) -> String {
    format!("{}_percent", m.name)
}

pub fn ms_key(m: &LiveMetric) -> String {
    format!("{}_ms", m.name)
}
