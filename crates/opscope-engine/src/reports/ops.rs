//! `stats op`: per op type, calls, CPU time with and without the ops it called, and the
//! accelerator time of the work it launched (tfprof's op view, torch's key_averages),
//! with tfprof's option language (`-select`, `-order_by`, `-min_micros`, …).

use opscope_analysis::op_stats::OpStatsOptions;
use opscope_analysis::report::{Report, Reported};
use opscope_analysis::view::{op_view, Column, OpView, OpViewOptions, ViewOptions};
use opscope_analysis::window::Window;
use opscope_analysis::Context;
use serde::{Deserialize, Serialize};

use super::tfprof::{regex_list, Accounting, Steps};
use super::{Entry, Error, Formats, Frame, Output};

pub static STATS_OP: Entry<Options> = Entry {
    name: "stats op",
    formats: Formats::TextJsonCsv,
    frames: &[Frame {
        name: "ops",
        path: &[],
        parent: &[],
        unprefixed: &[],
        columns: &[
            "name",
            "occurrence",
            "cpu_ns",
            "self_cpu_ns",
            "accelerator_ns",
            "bytes",
            "residual_bytes",
            "peak_bytes",
            "output_bytes",
            "float_ops",
            "devices",
            "input_shapes",
        ],
    }],
    run,
    section: Some(("Top ops", section)),
    timeline: Some(timeline),
    check: Some(|o| view_options(o).map(|_| ())),
};

/// The columns of the page's top ops (and of the viewer's reports of a span).
pub const TOP_OP_COLUMNS: [Column; 5] = [
    Column::Occurrence,
    Column::Micros,
    Column::CpuMicros,
    Column::SelfCpuMicros,
    Column::AcceleratorMicros,
];

#[derive(clap::Args, Deserialize)]
#[serde(default)]
#[command(
    about = "Per op type: calls, CPU time with and without the ops it called, and the accelerator time of the work it launched (tfprof's op view; torch's key_averages). Options take tfprof's spelling, with one dash or two",
    after_help = "Examples:\n  opscope stats op trace.json.gz\n  opscope stats op -order_by self_cpu_micros -min_micros 100 trace.json\n  opscope stats op -select occurrence,accelerator_micros -account_type_regexes 'aten::.*' trace.json\n  opscope stats op -output csv:outfile=ops.csv trace.json"
)]
pub struct Options {
    #[command(flatten)]
    #[serde(flatten)]
    pub accounting: Accounting,
    /// Columns to show, comma-separated: occurrence, micros, cpu_micros,
    /// self_cpu_micros, accelerator_micros, bytes (requested), residual_bytes,
    /// peak_bytes, output_bytes, float_ops, device, input_shapes.
    #[arg(long = "select", default_value = DEFAULT_SELECT)]
    select: String,
    /// Column to order by (largest first): name, occurrence, micros, cpu_micros,
    /// self_cpu_micros, accelerator_micros, bytes, residual_bytes, peak_bytes,
    /// output_bytes, float_ops.
    #[arg(long = "order_by", alias = "order-by", default_value = "micros")]
    order_by: String,
    /// Hide rows with less CPU plus accelerator time (µs). As in tfprof, the `-min_*`
    /// limits on time and bytes apply to a row's running total: a row is hidden when
    /// it and all rows after it in the order together stay under the limit.
    #[arg(long = "min_micros", alias = "min-micros", default_value_t = 0.0)]
    min_micros: f64,
    /// Hide rows with less accelerator time (µs).
    #[arg(
        long = "min_accelerator_micros",
        alias = "min-accelerator-micros",
        default_value_t = 0.0
    )]
    min_accelerator_micros: f64,
    /// Hide rows with less CPU time (µs).
    #[arg(
        long = "min_cpu_micros",
        alias = "min-cpu-micros",
        default_value_t = 0.0
    )]
    min_cpu_micros: f64,
    /// Hide rows that allocated fewer bytes.
    #[arg(long = "min_bytes", alias = "min-bytes", default_value_t = 0)]
    min_bytes: i64,
    /// Hide rows with fewer calls.
    #[arg(long = "min_occurrence", alias = "min-occurrence", default_value_t = 0)]
    min_occurrence: u64,
    /// Show only rows whose whole name matches one of these comma-separated regexes.
    #[arg(
        long = "show_name_regexes",
        alias = "show-name-regexes",
        default_value = ".*"
    )]
    show_name_regexes: String,
    /// Hide rows whose whole name matches one of these comma-separated regexes.
    #[arg(
        long = "hide_name_regexes",
        alias = "hide-name-regexes",
        default_value = ""
    )]
    hide_name_regexes: String,
    /// Account only ops whose type matches one of these comma-separated regexes.
    #[arg(
        long = "account_type_regexes",
        alias = "account-type-regexes",
        default_value = ".*"
    )]
    account_type_regexes: String,
    /// Show at most this many rows (0: all).
    #[arg(long, default_value_t = 0)]
    limit: usize,
    #[command(flatten)]
    #[serde(flatten)]
    pub steps: Steps,
}

const DEFAULT_SELECT: &str = "occurrence,micros,cpu_micros,self_cpu_micros,accelerator_micros";

impl Default for Options {
    fn default() -> Options {
        Options {
            accounting: Accounting::default(),
            select: DEFAULT_SELECT.to_string(),
            order_by: "micros".to_string(),
            min_micros: 0.0,
            min_accelerator_micros: 0.0,
            min_cpu_micros: 0.0,
            min_bytes: 0,
            min_occurrence: 0,
            show_name_regexes: ".*".to_string(),
            hide_name_regexes: String::new(),
            account_type_regexes: ".*".to_string(),
            limit: 0,
            steps: Steps::default(),
        }
    }
}

/// The op view and the part of the trace it covers (for `-output timeline`).
pub struct Ops {
    view: OpView,
    window: Window,
}

/// In JSON, the rows.
impl Serialize for Ops {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.view.serialize(serializer)
    }
}

impl Reported for Ops {
    fn report(&self) -> Report {
        self.view.report()
    }
}

/// The columns and the view's options, or what is wrong with them.
fn view_options(o: &Options) -> Result<(Vec<Column>, ViewOptions), Error> {
    let select: Vec<Column> = o
        .select
        .split(',')
        .filter(|c| !c.is_empty() && *c != "name")
        .map(Column::parse)
        .collect::<Result<_, _>>()
        .map_err(|e| Error::options(format!("-select: {e}")))?;
    let view = ViewOptions {
        order_by: Column::parse(&o.order_by)
            .map_err(|e| Error::options(format!("-order_by: {e}")))?,
        min_micros: o.min_micros,
        min_cpu_micros: o.min_cpu_micros,
        min_accelerator_micros: o.min_accelerator_micros,
        min_occurrence: o.min_occurrence,
        min_bytes: o.min_bytes,
        show_name_regexes: regex_list("show_name_regexes", &o.show_name_regexes)?,
        hide_name_regexes: regex_list("hide_name_regexes", &o.hide_name_regexes)?,
        account_type_regexes: regex_list("account_type_regexes", &o.account_type_regexes)?,
    };
    Ok((select, view))
}

fn run(cx: &Context, o: &Options) -> Result<Box<dyn Output>, Error> {
    let (select, view) = view_options(o)?;
    let window = o.steps.window(cx)?;
    let view = op_view(
        cx,
        &OpViewOptions {
            stats: OpStatsOptions {
                window,
                timing: o.accounting.timing(),
            },
            view,
            columns: select,
            account_displayed_only: o.accounting.account_displayed_op_only,
            limit: o.limit,
        },
    );
    Ok(Box::new(Ops { view, window }))
}

/// The selected ops shown, and the device work and runtime calls that belong to them.
fn timeline(cx: &Context, output: &dyn Output) -> Option<Vec<bool>> {
    let ops = output.as_any().downcast_ref::<Ops>()?;
    let trace = cx.trace();
    let shown: std::collections::HashSet<&str> =
        ops.view.rows.iter().map(|r| r.name.as_str()).collect();
    Some(crate::timeline::selection(
        cx,
        &cx.selected(ops.window),
        |i| shown.contains(trace.str(trace.slices.name[i])),
    ))
}

fn section(cx: &Context, top: usize) -> Result<String, Error> {
    let ops = op_view(
        cx,
        &OpViewOptions {
            columns: TOP_OP_COLUMNS.to_vec(),
            limit: top,
            ..OpViewOptions::default()
        },
    );
    Ok(crate::html::report(&ops.report()))
}
