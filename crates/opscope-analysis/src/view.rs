//! tfprof's option language for the `stats` views: which rows are shown (`-min_*`,
//! `-show_name_regexes`, `-hide_name_regexes`, `-account_type_regexes`), in which order
//! (`-order_by`) and with which columns (`-select`), so that tfprof users feel at home.

use regex::Regex;
use serde::Serialize;

use crate::context::Context;
use crate::op_stats::{op_stats, OpRow, OpStatsOptions};
use crate::report::{Column as ReportColumn, Report, Reported, Table, Value};

/// A column a view can show or order by.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Column {
    Name,
    Occurrence,
    /// CPU plus accelerator time.
    Micros,
    CpuMicros,
    SelfCpuMicros,
    AcceleratorMicros,
    /// Bytes allocated.
    Bytes,
    ResidualBytes,
    PeakBytes,
    OutputBytes,
    FloatOps,
    /// Devices the work ran on (shown, not ordered by).
    Device,
    /// Input shapes seen (shown, not ordered by).
    InputShapes,
}

impl Column {
    pub const ALL: [Column; 13] = [
        Column::Name,
        Column::Occurrence,
        Column::Micros,
        Column::CpuMicros,
        Column::SelfCpuMicros,
        Column::AcceleratorMicros,
        Column::Bytes,
        Column::ResidualBytes,
        Column::PeakBytes,
        Column::OutputBytes,
        Column::FloatOps,
        Column::Device,
        Column::InputShapes,
    ];

    /// tfprof's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Column::Name => "name",
            Column::Occurrence => "occurrence",
            Column::Micros => "micros",
            Column::CpuMicros => "cpu_micros",
            Column::SelfCpuMicros => "self_cpu_micros",
            Column::AcceleratorMicros => "accelerator_micros",
            Column::Bytes => "bytes",
            Column::ResidualBytes => "residual_bytes",
            Column::PeakBytes => "peak_bytes",
            Column::OutputBytes => "output_bytes",
            Column::FloatOps => "float_ops",
            Column::Device => "device",
            Column::InputShapes => "input_shapes",
        }
    }

    pub fn parse(text: &str) -> Result<Column, String> {
        Column::ALL
            .into_iter()
            .find(|c| c.name() == text)
            .ok_or_else(|| {
                let known: Vec<&str> = Column::ALL.iter().map(|c| c.name()).collect();
                // Parameter counts need a checkpoint or variable shapes.
                let later = ["params"];
                if later.contains(&text) {
                    format!(
                        "{text:?} is not available yet (known: {})",
                        known.join(", ")
                    )
                } else {
                    format!("unknown column {text:?} (known: {})", known.join(", "))
                }
            })
    }
}

/// The row filters and order of a view. `Default` shows everything by `micros`.
#[derive(Clone, Debug)]
pub struct ViewOptions {
    pub order_by: Column,
    pub min_micros: f64,
    pub min_cpu_micros: f64,
    pub min_accelerator_micros: f64,
    pub min_occurrence: u64,
    pub min_bytes: i64,
    /// Rows whose name matches one of these are shown (all when empty).
    pub show_name_regexes: Vec<Regex>,
    /// Rows whose name matches one of these are hidden.
    pub hide_name_regexes: Vec<Regex>,
    /// Only ops whose type matches one of these are accounted (all when empty).
    pub account_type_regexes: Vec<Regex>,
}

impl Default for ViewOptions {
    fn default() -> Self {
        ViewOptions {
            order_by: Column::Micros,
            min_micros: 0.0,
            min_cpu_micros: 0.0,
            min_accelerator_micros: 0.0,
            min_occurrence: 0,
            min_bytes: 0,
            show_name_regexes: Vec::new(),
            hide_name_regexes: Vec::new(),
            account_type_regexes: Vec::new(),
        }
    }
}

/// What a view needs to know of a row to filter and order it.
pub trait ViewRow {
    fn name(&self) -> &str;
    /// The op type, for `-account_type_regexes` (the name in the op view).
    fn op_type(&self) -> &str {
        self.name()
    }
    fn occurrence(&self) -> u64;
    fn cpu_ns(&self) -> i64;
    fn self_cpu_ns(&self) -> i64;
    fn accelerator_ns(&self) -> i64;
    fn bytes(&self) -> i64;
    fn residual_bytes(&self) -> i64 {
        0
    }
    fn peak_bytes(&self) -> i64 {
        0
    }
    fn output_bytes(&self) -> i64 {
        0
    }
    fn float_ops(&self) -> i64 {
        0
    }
}

impl ViewRow for crate::op_stats::OpRow {
    fn name(&self) -> &str {
        &self.name
    }
    fn occurrence(&self) -> u64 {
        self.occurrence
    }
    fn cpu_ns(&self) -> i64 {
        self.cpu_ns
    }
    fn self_cpu_ns(&self) -> i64 {
        self.self_cpu_ns
    }
    fn accelerator_ns(&self) -> i64 {
        self.accelerator_ns
    }
    fn bytes(&self) -> i64 {
        self.bytes
    }
    fn residual_bytes(&self) -> i64 {
        self.residual_bytes
    }
    fn peak_bytes(&self) -> i64 {
        self.peak_bytes
    }
    fn output_bytes(&self) -> i64 {
        self.output_bytes
    }
    fn float_ops(&self) -> i64 {
        self.float_ops
    }
}

/// tfprof matches regexes against the whole name.
fn full_match(regexes: &[Regex], text: &str) -> bool {
    regexes.iter().any(|r| {
        r.find(text)
            .is_some_and(|m| m.start() == 0 && m.end() == text.len())
    })
}

/// Compiles tfprof regex options: comma-separated, each matched against whole names.
pub fn regexes(list: &str) -> Result<Vec<Regex>, regex::Error> {
    list.split(',')
        .filter(|r| !r.is_empty())
        .map(|r| Regex::new(&format!("^(?:{r})$")))
        .collect()
}

/// Keeps the rows the options let through, in their order (largest first, names
/// ascending for `name`). As in tfprof's op view, the `-min_*` limits on time and
/// bytes apply to a row's running total: the row plus every accounted row after it,
/// so a row is hidden when it and all smaller rows together stay under the limit.
pub fn apply<R: ViewRow>(mut rows: Vec<R>, options: &ViewOptions) -> Vec<R> {
    rows.retain(|r| {
        options.account_type_regexes.is_empty()
            || full_match(&options.account_type_regexes, r.op_type())
    });
    let key = |r: &R| -> i64 {
        match options.order_by {
            Column::Occurrence => r.occurrence() as i64,
            Column::Micros => r.cpu_ns() + r.accelerator_ns(),
            Column::CpuMicros => r.cpu_ns(),
            Column::SelfCpuMicros => r.self_cpu_ns(),
            Column::AcceleratorMicros => r.accelerator_ns(),
            Column::Bytes => r.bytes(),
            Column::ResidualBytes => r.residual_bytes(),
            Column::PeakBytes => r.peak_bytes(),
            Column::OutputBytes => r.output_bytes(),
            Column::FloatOps => r.float_ops(),
            Column::Name | Column::Device | Column::InputShapes => 0,
        }
    };
    rows.sort_by(|a, b| key(b).cmp(&key(a)).then_with(|| a.name().cmp(b.name())));
    let micros = |ns: i64| ns as f64 / 1000.0;
    let (mut cpu, mut accelerator, mut bytes) = (0i64, 0i64, 0i64);
    let mut keep = vec![false; rows.len()];
    for (i, r) in rows.iter().enumerate().rev() {
        cpu += r.cpu_ns();
        accelerator += r.accelerator_ns();
        bytes += r.bytes();
        keep[i] = micros(cpu + accelerator) >= options.min_micros
            && micros(cpu) >= options.min_cpu_micros
            && micros(accelerator) >= options.min_accelerator_micros
            && bytes >= options.min_bytes
            && r.occurrence() >= options.min_occurrence
            && (options.show_name_regexes.is_empty()
                || full_match(&options.show_name_regexes, r.name()))
            && !full_match(&options.hide_name_regexes, r.name());
    }
    let mut keep = keep.into_iter();
    rows.retain(|_| keep.next().unwrap_or(false));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op_stats::OpRow;

    fn row(name: &str, occurrence: u64, cpu_us: i64, accel_us: i64) -> OpRow {
        OpRow {
            name: name.into(),
            occurrence,
            cpu_ns: cpu_us * 1000,
            self_cpu_ns: cpu_us * 500,
            accelerator_ns: accel_us * 1000,
            ..OpRow::default()
        }
    }

    #[test]
    fn filters_and_order_follow_tfprof() {
        let rows = vec![
            row("MatMul", 3, 100, 50),
            row("Relu", 10, 300, 0),
            row("aten::mm", 1, 5, 400),
        ];
        let names = |o: &ViewOptions| -> Vec<String> {
            apply(rows.clone(), o).into_iter().map(|r| r.name).collect()
        };
        assert_eq!(
            names(&ViewOptions::default()),
            ["aten::mm", "Relu", "MatMul"]
        );
        let by = |c| ViewOptions {
            order_by: c,
            ..ViewOptions::default()
        };
        assert_eq!(
            names(&by(Column::Occurrence)),
            ["Relu", "MatMul", "aten::mm"]
        );
        assert_eq!(names(&by(Column::Name)), ["MatMul", "Relu", "aten::mm"]);
        assert_eq!(
            names(&by(Column::CpuMicros)),
            ["Relu", "MatMul", "aten::mm"]
        );
        // Running totals, largest first: aten::mm 405 + Relu 300 + MatMul 150 µs.
        let o = ViewOptions {
            min_micros: 150.0,
            hide_name_regexes: regexes("Re.*").unwrap(),
            ..ViewOptions::default()
        };
        assert_eq!(names(&o), ["aten::mm", "MatMul"]);
        let o = ViewOptions {
            min_micros: 151.0,
            ..ViewOptions::default()
        };
        assert_eq!(
            names(&o),
            ["aten::mm", "Relu"],
            "MatMul's running total is its own 150 µs"
        );
        let o = ViewOptions {
            min_micros: 451.0,
            ..ViewOptions::default()
        };
        assert_eq!(names(&o), ["aten::mm"], "Relu's running total is 450 µs");
        // Whole-name matches: "Mat" alone matches nothing.
        let o = ViewOptions {
            show_name_regexes: regexes("Mat,aten::.*").unwrap(),
            ..ViewOptions::default()
        };
        assert_eq!(names(&o), ["aten::mm"]);
        let o = ViewOptions {
            min_accelerator_micros: 10.0,
            min_occurrence: 2,
            ..ViewOptions::default()
        };
        // Relu has no accelerator time of its own, but MatMul's 50 µs below it count.
        assert_eq!(names(&o), ["Relu", "MatMul"]);
        assert!(Column::parse("params")
            .unwrap_err()
            .contains("not available yet"));
        assert!(Column::parse("nonsense")
            .unwrap_err()
            .contains("unknown column"));
        assert_eq!(Column::parse("bytes"), Ok(Column::Bytes));
        assert_eq!(Column::parse("cpu_micros"), Ok(Column::CpuMicros));
    }
}

/// What `stats op` shows: which ops count, how they are filtered and ordered, and the
/// columns shown after the name.
#[derive(Clone, Debug, Default)]
pub struct OpViewOptions {
    pub stats: OpStatsOptions,
    pub view: ViewOptions,
    pub columns: Vec<Column>,
    /// Totals and shares count only the rows shown (tfprof's
    /// `-account_displayed_op_only`).
    pub account_displayed_only: bool,
    /// At most this many rows (0: all).
    pub limit: usize,
}

/// tfprof's op view: the rows shown, in order, and the totals their shares are of.
#[derive(Clone, Debug)]
pub struct OpView {
    pub rows: Vec<OpRow>,
    pub columns: Vec<Column>,
    pub totals: OpTotals,
}

/// What each time column's shares are of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpTotals {
    pub micros: i64,
    pub cpu: i64,
    pub self_cpu: i64,
    pub accelerator: i64,
}

pub fn op_view(cx: &Context, options: &OpViewOptions) -> OpView {
    let all = op_stats(cx, &options.stats);
    // Ops nest, so CPU shares are of the self time of all ops (torch's "Self CPU time
    // total"), which counts each moment once and bounds every op's inclusive time.
    let self_total = all.iter().map(|r| r.self_cpu_ns).sum::<i64>();
    let accounted: Vec<OpRow> = apply(
        all,
        &ViewOptions {
            account_type_regexes: options.view.account_type_regexes.clone(),
            ..ViewOptions::default()
        },
    );
    let accelerator_total = accounted.iter().map(|r| r.accelerator_ns).sum::<i64>();
    let mut rows = apply(accounted, &options.view);
    let totals = if options.account_displayed_only {
        let cpu = rows.iter().map(|r| r.self_cpu_ns).sum::<i64>();
        let accelerator = rows.iter().map(|r| r.accelerator_ns).sum::<i64>();
        OpTotals {
            micros: cpu + accelerator,
            cpu,
            self_cpu: cpu,
            accelerator,
        }
    } else {
        OpTotals {
            micros: self_total + accelerator_total,
            cpu: self_total,
            self_cpu: self_total,
            accelerator: accelerator_total,
        }
    };
    if options.limit > 0 {
        rows.truncate(options.limit);
    }
    OpView {
        rows,
        columns: options.columns.clone(),
        totals,
    }
}

/// In JSON, the rows.
impl Serialize for OpView {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.rows.serialize(serializer)
    }
}

impl Reported for OpView {
    fn report(&self) -> Report {
        let mut columns = vec![ReportColumn::text("name")];
        columns.extend(self.columns.iter().map(|c| ReportColumn::numeric(c.name())));
        let mut table = Table::new(columns);
        table.empty = Some("no ops to show");
        let share = |ns: i64, of: i64| Value::share_of(ns as f64, of as f64, 2);
        let t = &self.totals;
        for r in &self.rows {
            let mut cells = vec![Value::text(&r.name)];
            for c in &self.columns {
                cells.push(match c {
                    Column::Occurrence => Value::Count(r.occurrence as i64),
                    Column::Micros => share(r.total_ns(), t.micros),
                    Column::CpuMicros => share(r.cpu_ns, t.cpu),
                    Column::SelfCpuMicros => share(r.self_cpu_ns, t.self_cpu),
                    Column::AcceleratorMicros => share(r.accelerator_ns, t.accelerator),
                    Column::Bytes => Value::Count(r.bytes),
                    Column::ResidualBytes => Value::Count(r.residual_bytes),
                    Column::PeakBytes => Value::Count(r.peak_bytes),
                    Column::OutputBytes => Value::Count(r.output_bytes),
                    Column::FloatOps => Value::Count(r.float_ops),
                    Column::Device => Value::text(r.devices.join(" ")),
                    Column::InputShapes => {
                        let shown: Vec<String> = r
                            .input_shapes
                            .iter()
                            .take(3)
                            .map(|(shape, n)| format!("{shape} x{n}"))
                            .collect();
                        let more = r.input_shapes.len().saturating_sub(3);
                        Value::Text(if more > 0 {
                            format!("{}; {more} more", shown.join("; "))
                        } else {
                            shown.join("; ")
                        })
                    }
                    Column::Name => Value::text(&r.name),
                });
            }
            table.rows.push(cells);
        }
        let mut report = Report::default();
        report.table(table);
        report
    }
}
