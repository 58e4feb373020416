//! `stats op`: per op type, calls, CPU time with and without the ops it called, and the
//! accelerator time of the work it launched (tfprof's op view, torch's key_averages),
//! with tfprof's option language (`-select`, `-order_by`, `-min_micros`, …).

use opscope_analysis::op_stats::{OpStatsOptions, Timing};
use opscope_analysis::report::{Report, Reported};
use opscope_analysis::view::{self, op_view, Column, OpView, OpViewOptions, ViewOptions};
use opscope_analysis::window::Window;
use opscope_analysis::Context;
use serde::{Deserialize, Serialize};

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
#[serde(default, deny_unknown_fields)]
#[command(
    about = "Per op type: calls, CPU time with and without the ops it called, and the accelerator time of the work it launched (tfprof's op view; torch's key_averages). Options take tfprof's spelling, with one dash or two",
    after_help = "Examples:\n  opscope stats op trace.json.gz\n  opscope stats op -order_by self_cpu_micros -min_micros 100 trace.json\n  opscope stats op -select occurrence,accelerator_micros -account_type_regexes 'aten::.*' trace.json\n  opscope stats op -output csv:outfile=ops.csv trace.json"
)]
pub struct Options {
    /// Count each op run and kernel in whole microseconds, at least 1, as tfprof does
    /// (its figures come from TensorFlow's µs fields); default: to the nanosecond.
    #[arg(long = "tfprof_micros", alias = "tfprof-micros")]
    pub tfprof_micros: bool,
    /// Totals and shares count only the rows shown (tfprof's option; `true` or
    /// `false`, no value means true).
    #[arg(
        long = "account_displayed_op_only",
        alias = "account-displayed-op-only",
        num_args = 0..=1,
        default_value_t = false,
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        value_name = "BOOL"
    )]
    pub account_displayed_op_only: bool,
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
    /// Leave out the last profiler step and the work launched in it.
    #[arg(long = "exclude_last_step", alias = "exclude-last-step")]
    exclude_last_step: bool,
    /// Only step N (ProfilerStep#N, train_step_N) and the work launched in it.
    #[arg(long = "step", value_name = "N", conflicts_with = "exclude_last_step")]
    step: Option<u64>,
}

const DEFAULT_SELECT: &str = "occurrence,micros,cpu_micros,self_cpu_micros,accelerator_micros";

impl Default for Options {
    fn default() -> Options {
        Options {
            tfprof_micros: false,
            account_displayed_op_only: false,
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
            exclude_last_step: false,
            step: None,
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

/// How times are counted: tfprof's whole microseconds, or exactly.
pub fn timing(tfprof_micros: bool) -> Timing {
    if tfprof_micros {
        Timing::WholeMicros
    } else {
        Timing::Exact
    }
}

/// The part of the trace `-step` and `--exclude-last-step` ask for.
pub fn chosen_window(cx: &Context, step: Option<u64>, exclude_last: bool) -> Result<Window, Error> {
    match step {
        Some(n) => {
            let known = cx.step_numbers();
            if !known.contains(&n) {
                let list: Vec<String> = known.iter().map(u64::to_string).collect();
                return Err(Error::options(format!(
                    "-step {n}: the trace has no such step marker (its steps: {})",
                    if list.is_empty() {
                        "none".to_string()
                    } else {
                        list.join(", ")
                    }
                )));
            }
            Ok(Window::Step(n))
        }
        None if exclude_last => Ok(Window::BeforeLastStep),
        None => Ok(Window::Whole),
    }
}

/// A list of regexes option: `-NAME` names it in the error.
pub fn regex_list(name: &str, list: &str) -> Result<Vec<regex::Regex>, Error> {
    view::regexes(list).map_err(|e| Error::options(format!("-{name}: not a valid regex list: {e}")))
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
    if o.step.is_some() && o.exclude_last_step {
        return Err(Error::options("-step and -exclude_last_step: give one"));
    }
    let window = chosen_window(cx, o.step, o.exclude_last_step)?;
    let view = op_view(
        cx,
        &OpViewOptions {
            stats: OpStatsOptions {
                window,
                timing: timing(o.tfprof_micros),
            },
            view,
            columns: select,
            account_displayed_only: o.account_displayed_op_only,
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
