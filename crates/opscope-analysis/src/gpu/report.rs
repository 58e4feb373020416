//! How `gpu` reads: per rank and device its time line's breakdown, the work mixes,
//! copies, and a row per stream (idle causes, launch latency, queue depth), then the
//! spread across devices.

use super::{GpuReport, RankReport};
use crate::report::{Column, Line, Report, Reported, Table, Value};

impl Reported for GpuReport {
    fn report(&self) -> Report {
        let mut report = Report::default();
        if self.ranks.is_empty() {
            report.line(Line::of(
                "no device work (kernels, copies, sets on GPU streams) in this trace",
            ));
            host_table(&self.hosts, &mut report);
            return report;
        }
        for rank in &self.ranks {
            rank_blocks(rank, &mut report);
        }
        if let Some(across) = &self.across {
            report.line(Line::of(format!("== across {} devices", across.compared)));
            report.table(crate::across::spread_table(
                across,
                |metric| match metric {
                    "busy_ns" => "busy",
                    "compute_ns" => "computation",
                    "non_compute_ns" => "other busy",
                    "idle_ns" => "idle",
                    "idle_pct" => "idle share",
                    other => other,
                },
                |metric, v| {
                    if metric == "idle_pct" {
                        Value::percent(v, 1)
                    } else {
                        Value::Duration(v)
                    }
                },
            ));
            if let Some(st) = &across.straggler {
                report.line(st.line(""));
            }
            report.blank();
        }
        if self.unattributed > 0 {
            report.line(Line::of(format!(
                "{} pieces of device work have no known launch (no flow or correlation id)",
                self.unattributed
            )));
        }
        report
    }
}

/// Where the host threads' time went, one row per source: what `gpu` says of a run
/// without device work.
fn host_table(hosts: &[crate::host::HostReport], report: &mut Report) {
    if hosts.is_empty() {
        return;
    }
    report.line(Line::of(
        "the host threads' time instead: an op running (computation), a collective \
         (communication), both, or neither (idle)",
    ));
    report.table(crate::host::table(hosts));
}

fn rank_blocks(rank: &RankReport, report: &mut Report) {
    let who = &rank.process;
    report.line(Line::of(match &rank.device {
        Some(device) => format!("== {who}, {device}: {}", rank.file),
        None => format!("== {who}: {}", rank.file),
    }));
    if let Some(c) = &rank.clock_correction {
        report.line(Line::of(format!("on the reference host's {}", c.text())));
    }
    let t = &rank.temporal;
    let ns = |n: i64| Value::Duration(n as f64);
    let share = |n: i64, percent: f64| Value::Share {
        ns: n as f64,
        percent: Some(percent),
        decimals: 1,
    };
    report.line(
        Line::of("span ")
            .value(ns(t.span_ns))
            .text(": idle ")
            .value(share(t.idle_ns, t.idle_pct))
            .text(", computation ")
            .value(share(t.compute_ns, t.compute_pct))
            .text(", other busy ")
            .value(share(t.non_compute_ns, t.non_compute_pct)),
    );
    report.line(
        Line::of("communication overlapped by computation: ").value(Value::Percent {
            value: rank.communication_overlap_pct,
            decimals: 1,
        }),
    );
    report.blank();
    let mut mixes = Table::new(vec![
        Column::text("work running"),
        Column::numeric("time"),
        Column::numeric("share"),
    ]);
    for c in &rank.combinations {
        let names: Vec<&str> = c.classes.iter().map(|c| c.name()).collect();
        mixes.rows.push(vec![
            Value::text(names.join(" + ")),
            ns(c.time_ns),
            Value::percent(c.pct, 1),
        ]);
    }
    report.table(mixes);
    if !rank.transfers.is_empty() {
        report.blank();
        let mut transfers = Table::new(vec![
            Column::text("transfer"),
            Column::numeric("count"),
            Column::numeric("bytes"),
            Column::numeric("time"),
            Column::numeric("GB/s"),
        ]);
        for r in &rank.transfers {
            transfers.rows.push(vec![
                Value::text(&r.direction),
                Value::Count(r.count as i64),
                Value::Count(r.bytes as i64),
                ns(r.time_ns),
                Value::Number {
                    value: r.gb_per_s,
                    decimals: 2,
                },
            ]);
        }
        report.table(transfers);
    }
    report.blank();
    let mut streams = Table::new(vec![
        Column::text("device"),
        Column::text("stream"),
        Column::numeric("work"),
        Column::numeric("busy"),
        Column::numeric("host wait"),
        Column::numeric("kernel wait"),
        Column::numeric("other idle"),
        Column::numeric("launch p50"),
        Column::numeric("launch p99"),
        Column::numeric("queue max"),
        Column::numeric("queue mean"),
        Column::text("queue over time"),
    ]);
    for s in &rank.streams {
        let idle = |c: &super::idle::IdleCategory| Value::Share {
            ns: c.time_ns as f64,
            percent: c.ratio.map(|r| r * 100.0),
            decimals: 1,
        };
        let latency = |f: fn(&crate::distribution::Distribution) -> f64| {
            s.launches
                .latency
                .as_ref()
                .map_or_else(|| Value::text("-"), |d| Value::Duration(f(d)))
        };
        streams.rows.push(vec![
            Value::text(&s.device),
            Value::text(&s.stream),
            Value::Count(s.work as i64),
            ns(s.busy_ns),
            idle(&s.idle.host_wait),
            idle(&s.idle.kernel_wait),
            idle(&s.idle.other),
            latency(|d| d.p50),
            latency(|d| d.p99),
            Value::Count(s.launches.max_queue_depth as i64),
            Value::number(s.launches.mean_queue_depth, 1),
            s.launches.queue_over_time.as_ref().map_or_else(
                || Value::text(""),
                |q| Value::Sparkline {
                    values: q.max.clone(),
                    width: 24,
                },
            ),
        ]);
    }
    report.table(streams);
    report.blank();
}
