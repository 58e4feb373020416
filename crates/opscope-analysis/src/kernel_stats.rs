//! Per kernel name: instances, total, mean, median, minimum, maximum and standard
//! deviation of GPU time, and its share of all kernel time — the columns of Nsight
//! Systems' `cuda_gpu_kern_sum`, for any trace whose slices are of kind `Kernel`.

use hashbrown::HashMap;
use opscope_model::{SliceKind, StrId, Trace};
use serde::Serialize;

use crate::report::{Column, CsvTime, Report, Reported, Table, Value};

/// Which slices count, and how rows are ordered.
#[derive(Clone, Debug, Default)]
pub struct KernelStatsOptions {
    /// Also count memory copies and sets (each as its own row, by name).
    pub include_memory: bool,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct KernelRow {
    pub name: String,
    /// Share of the total time of all rows, in percent.
    pub time_pct: f64,
    pub total_ns: i64,
    pub instances: u64,
    pub mean_ns: f64,
    pub median_ns: f64,
    pub min_ns: i64,
    pub max_ns: i64,
    /// Sample standard deviation (n − 1), as Nsight Systems and pandas give it; 0 for
    /// one instance.
    pub stddev_ns: f64,
}

/// The rows of a kernel table, as `stats kernel` shows them (JSON: the rows).
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(transparent)]
pub struct KernelTable {
    pub rows: Vec<KernelRow>,
}

impl Reported for KernelTable {
    fn report(&self) -> Report {
        let mut table = Table::new(vec![
            Column::numeric("Time(%)"),
            Column::numeric("Total").in_csv("total_ns"),
            Column::numeric("Instances"),
            Column::numeric("Avg").in_csv("avg_ns"),
            Column::numeric("Med").in_csv("med_ns"),
            Column::numeric("Min").in_csv("min_ns"),
            Column::numeric("Max").in_csv("max_ns"),
            Column::numeric("StdDev").in_csv("stddev_ns"),
            Column::text("Name"),
        ]);
        table.csv_time = CsvTime::Nanos;
        table.empty = Some("no GPU kernels in this trace");
        for r in &self.rows {
            table.rows.push(vec![
                Value::number(r.time_pct, 1),
                Value::Duration(r.total_ns as f64),
                Value::Count(r.instances as i64),
                Value::Duration(r.mean_ns),
                Value::Duration(r.median_ns),
                Value::Duration(r.min_ns as f64),
                Value::Duration(r.max_ns as f64),
                Value::Duration(r.stddev_ns),
                Value::text(&r.name),
            ]);
        }
        let mut report = Report::default();
        report.table(table);
        report
    }
}

/// Rows by total time, largest first (ties by name).
pub fn kernel_stats(cx: &crate::context::Context, options: &KernelStatsOptions) -> Vec<KernelRow> {
    let trace = cx.trace();
    let s = &trace.slices;
    // Device work on GPU streams, as every other analysis counts it.
    let counted = (0..s.len()).filter(|&i| {
        crate::correlate::is_device_work(trace, i)
            && match s.kind(i) {
                SliceKind::Kernel => true,
                SliceKind::Memcpy(_) | SliceKind::Memset => options.include_memory,
                _ => false,
            }
    });
    kernel_stats_of(trace, counted)
}

/// Rows for the given slice rows, grouped by name, by total time, largest first.
pub fn kernel_stats_of(trace: &Trace, slices: impl Iterator<Item = usize>) -> Vec<KernelRow> {
    let s = &trace.slices;
    let mut by_name: HashMap<StrId, Vec<i64>> = HashMap::new();
    for i in slices {
        by_name.entry(s.name[i]).or_default().push(s.dur[i]);
    }
    let grand_total: i64 = by_name.values().flatten().sum();
    let mut rows: Vec<KernelRow> = by_name
        .into_iter()
        .map(|(name, mut durations)| {
            durations.sort_unstable();
            summarize(trace.str(name), &durations, grand_total)
        })
        .collect();
    rows.sort_by(|a, b| {
        b.total_ns
            .cmp(&a.total_ns)
            .then_with(|| a.name.cmp(&b.name))
    });
    rows
}

/// The row for `sorted` durations.
fn summarize(name: &str, sorted: &[i64], grand_total: i64) -> KernelRow {
    let n = sorted.len();
    let total: i64 = sorted.iter().sum();
    let mean = total as f64 / n as f64;
    let median = if n % 2 == 1 {
        sorted[n / 2] as f64
    } else {
        (sorted[n / 2 - 1] as f64 + sorted[n / 2] as f64) / 2.0
    };
    let stddev = if n > 1 {
        let squares: f64 = sorted.iter().map(|&d| (d as f64 - mean).powi(2)).sum();
        (squares / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    KernelRow {
        name: name.to_string(),
        time_pct: if grand_total > 0 {
            100.0 * total as f64 / grand_total as f64
        } else {
            0.0
        },
        total_ns: total,
        instances: n as u64,
        mean_ns: mean,
        median_ns: median,
        min_ns: sorted[0],
        max_ns: sorted[n - 1],
        stddev_ns: stddev,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_follow_their_definitions() {
        let row = summarize("k", &[1, 2, 3, 10], 32);
        assert_eq!(
            (row.total_ns, row.instances, row.min_ns, row.max_ns),
            (16, 4, 1, 10)
        );
        assert_eq!((row.mean_ns, row.median_ns, row.time_pct), (4.0, 2.5, 50.0));
        // Sample deviation: squares 9 + 4 + 1 + 36 = 50, over 3.
        assert!((row.stddev_ns - (50.0f64 / 3.0).sqrt()).abs() < 1e-12);
        let one = summarize("k", &[7], 7);
        assert_eq!(
            (one.median_ns, one.stddev_ns, one.time_pct),
            (7.0, 0.0, 100.0)
        );
    }
}
