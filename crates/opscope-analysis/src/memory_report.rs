//! How `memory` reads: per allocator its peak and what was in use at the end, the ops
//! that allocated most, the largest blocks live at the peak and growth per step; for
//! sampled resident memory, its course over the run.

use crate::memory::{AllocatorReport, MemoryReport};
use crate::report::{Column, Line, Report, Reported, Table, Value};

impl Reported for MemoryReport {
    fn report(&self) -> Report {
        let mut report = Report::default();
        if self.allocators.is_empty() {
            report.line(Line::of(
                "no memory data: no allocator events (PyTorch's profile_memory=True), allocator counters (TensorFlow timelines) or sampled resident memory (opscope record)",
            ));
            return report;
        }
        let origin = self.origin_ns;
        let at = |ns: i64| Value::Duration((ns - origin) as f64);
        for r in &self.allocators {
            report.line(Line::of(format!(
                "== {} ({} {})",
                heading(r.rank, &r.allocator),
                r.events,
                match r.data {
                    "events" => "allocation events",
                    "resident" => "samples of resident memory",
                    _ => "counter samples",
                }
            )));
            if r.data == "resident" {
                resident(r, origin, &mut report);
                continue;
            }
            let mut peak = Line::of("peak in use ")
                .value(Value::Bytes(r.peak_in_use))
                .text(" at ")
                .value(at(r.peak_at_ns));
            if let Some(reserved) = r.peak_reserved {
                peak = peak.text(", peak reserved ").value(Value::Bytes(reserved));
            }
            report.line(
                peak.text("; at the end ")
                    .value(Value::Bytes(r.final_in_use)),
            );
            if r.data == "events" {
                report.line(
                    Line::of("allocated ")
                        .value(Value::Bytes(r.allocated_bytes))
                        .text(", freed ")
                        .value(Value::Bytes(r.freed_bytes))
                        .text(if r.from_allocator_totals {
                            ""
                        } else {
                            " (in use counted from zero at the first event: blocks allocated before the trace are not seen)"
                        }),
                );
            }
            if !r.top_ops.is_empty() {
                report.blank();
                let mut table = Table::new(vec![
                    Column::text("op"),
                    Column::numeric("allocated"),
                    Column::numeric("allocations"),
                ]);
                for o in &r.top_ops {
                    table.rows.push(vec![
                        Value::text(&o.op),
                        Value::Bytes(o.bytes),
                        Value::Count(o.allocations as i64),
                    ]);
                }
                report.table(table);
            }
            if !r.live_at_peak.is_empty() {
                report.blank();
                report.line(Line::of("largest blocks live at the peak:"));
                let mut table = Table::new(vec![
                    Column::numeric("bytes"),
                    Column::numeric("allocated at"),
                    Column::text("by op"),
                ]);
                for b in &r.live_at_peak {
                    table.rows.push(vec![
                        Value::Bytes(b.bytes),
                        at(b.allocated_at_ns),
                        Value::text(b.op.clone().unwrap_or_else(|| "-".into())),
                    ]);
                }
                report.table(table);
            }
            steps(r, &mut report);
            report.blank();
        }
        report
    }
}

/// A process's resident memory: peak, growth from the first sample to the last, per
/// part of the run, and per step.
fn resident(r: &AllocatorReport, origin: i64, report: &mut Report) {
    let at = |ns: i64| Value::Duration((ns - origin) as f64);
    let first = r.first_in_use.unwrap_or(0);
    report.line(
        Line::of("peak resident ")
            .value(Value::Bytes(r.peak_in_use))
            .text(" at ")
            .value(at(r.peak_at_ns))
            .text("; first sample ")
            .value(Value::Bytes(first))
            .text(", last ")
            .value(Value::Bytes(r.final_in_use))
            .text(" (growth ")
            .value(Value::Bytes(r.final_in_use - first))
            .text(")"),
    );
    if r.over_time.len() > 1 {
        report.blank();
        let mut table = Table::new(vec![
            Column::numeric("from"),
            Column::numeric("to"),
            Column::numeric("peak resident"),
            Column::numeric("at end"),
        ]);
        for p in &r.over_time {
            table.rows.push(vec![
                at(p.from_ns),
                at(p.to_ns),
                Value::Bytes(p.peak),
                Value::Bytes(p.at_end),
            ]);
        }
        report.table(table);
    }
    steps(r, report);
    report.blank();
}

fn steps(r: &AllocatorReport, report: &mut Report) {
    if r.steps.is_empty() {
        return;
    }
    report.blank();
    let mut table = Table::new(vec![
        Column::text("step"),
        Column::numeric("in use at start"),
        Column::numeric("at end"),
        Column::numeric("growth"),
    ]);
    for s in &r.steps {
        table.rows.push(vec![
            Value::text(&s.step),
            Value::Bytes(s.in_use_at_start),
            Value::Bytes(s.in_use_at_end),
            Value::Bytes(s.growth),
        ]);
    }
    report.table(table);
}

/// Whose memory a section is: the rank, then the allocator, unless the allocator's
/// name (a process's, for its resident memory) says the rank already.
fn heading(rank: Option<u32>, allocator: &str) -> String {
    match rank {
        Some(k) if !allocator.starts_with(&format!("rank {k} ")) => {
            format!("rank {k}, {allocator}")
        }
        _ => allocator.to_string(),
    }
}

#[cfg(test)]
mod tests {
    /// A rank's resident memory, whose allocator is the process named by its rank, says
    /// the rank once (it read "== rank 1, rank 1 (pid 7)").
    #[test]
    fn the_heading_says_the_rank_once() {
        assert_eq!(super::heading(Some(1), "rank 1 (pid 7)"), "rank 1 (pid 7)");
        assert_eq!(super::heading(Some(1), "cuda 0"), "rank 1, cuda 0");
        assert_eq!(
            super::heading(Some(1), "rank 10 (pid 7)"),
            "rank 1, rank 10 (pid 7)"
        );
        assert_eq!(super::heading(None, "cpu"), "cpu");
    }
}
