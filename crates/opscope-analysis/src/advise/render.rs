//! `advise` for people: the verdict, then each finding with its evidence, fix and the
//! command that shows more, a table of all findings (CSV's), what could not be checked,
//! and on a RunMetadata what tfprof's checkers print.

use super::{Advice, Severity};
use crate::report::{Column, Line, Report, Reported, Table, Value};

impl Reported for Advice {
    fn report(&self) -> Report {
        let mut r = Report::default();
        r.line(Line::of(format!("verdict: {}", self.verdict)));
        let mut table = Table::new(vec![
            Column::numeric("#"),
            Column::text("severity"),
            Column::numeric("saves at most").in_csv("saving_ns"),
            Column::numeric("of time").in_csv("saving_pct"),
            Column::text("rule"),
            Column::text("scope"),
            Column::text("finding"),
        ]);
        table.csv_time = crate::report::CsvTime::Nanos;
        table.empty = Some("no findings");
        for (n, f) in self.findings.iter().enumerate() {
            table.rows.push(vec![
                Value::Count(n as i64 + 1),
                Value::text(f.severity.name()),
                Value::Duration(f.saving_ns as f64),
                Value::percent(f.saving_pct, 1),
                Value::text(f.rule),
                Value::text(&f.scope),
                Value::text(&f.title),
            ]);
        }
        r.blank();
        r.table(table);
        for (n, f) in self.findings.iter().enumerate() {
            if f.severity == Severity::Info && n >= 10 {
                continue;
            }
            r.blank();
            let mut head = Line::of(format!(
                "{}. [{}] {}: {}",
                n + 1,
                f.severity.name(),
                f.scope,
                f.title
            ));
            if f.saving_ns > 0 {
                head = head
                    .text(" — saves at most ")
                    .value(Value::Duration(f.saving_ns as f64))
                    .text(format!(" ({:.1} %)", f.saving_pct));
            }
            r.line(head);
            for e in &f.evidence {
                r.line(Line::of(format!("   {e}")));
            }
            if !f.fix.is_empty() {
                r.line(Line::of(format!("   try: {}", f.fix)));
            }
            if !f.more.is_empty() {
                r.line(Line::of(format!("   more: {}", f.more)));
            }
            r.line(Line::of(format!("   rule: {} ({})", f.rule, f.anchor)));
        }
        if !self.not_checked.is_empty() {
            r.blank();
            r.line(Line::of("not checked:"));
            // Rules left out for one reason (the device rules on a CPU run) share a line.
            let mut reasons: Vec<(&str, Vec<&str>)> = Vec::new();
            for n in &self.not_checked {
                match reasons.iter_mut().find(|(reason, _)| *reason == n.reason) {
                    Some((_, rules)) => rules.push(n.rule),
                    None => reasons.push((&n.reason, vec![n.rule])),
                }
            }
            for (reason, rules) in reasons {
                r.line(Line::of(format!("  {}: {reason}", rules.join(", "))));
            }
        }
        if !self.tfprof.is_empty() {
            r.blank();
            r.line(Line::of(
                "tfprof's checkers (as tfprof advise prints them):",
            ));
            for c in &self.tfprof {
                r.line(Line::of(format!("{}:", c.name)));
                for report in &c.reports {
                    for line in report.lines() {
                        r.line(Line::of(line.to_string()));
                    }
                }
            }
        }
        r.blank();
        r.line(Line::of(format!(
            "{} rules checked: {}",
            self.rules.len(),
            self.rules.join(", ")
        )));
        r
    }
}
