//! `opscope stats VIEW`: where time goes, with tfprof's option language. `op` aggregates
//! per op type (`-select`, `-order_by`, `-min_micros`, …); `scope` and `code` are trees
//! (name scopes, Python call stacks; `-max_depth`, `-start_name_regexes`, …); `kernel`
//! gives per kernel name the columns of Nsight Systems' `cuda_gpu_kern_sum`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use opscope_analysis::correlate;
use opscope_analysis::kernel_stats::{kernel_stats, KernelStatsOptions, KernelTable};
use opscope_analysis::op_stats::{OpStatsOptions, Timing};
use opscope_analysis::tree::{self, TreeColumn, TreeDisplay, TreeKind, TreeView};
use opscope_analysis::view::{self, op_view, Column, OpViewOptions, ViewOptions};
use opscope_analysis::window::Window;

use crate::load;
use crate::output::{self, OutputFormat};
use crate::render::{render, Format};

#[derive(clap::Args)]
#[command(
    about = "Where the time goes: per op type, scope tree, Python call tree (tfprof options), or per kernel"
)]
pub struct Args {
    #[command(subcommand)]
    view: View,
}

#[derive(clap::Subcommand)]
enum View {
    /// Per op type: calls, CPU time with and without the ops it called, and the
    /// accelerator time of the work it launched (tfprof's op view; torch's
    /// key_averages). Options take tfprof's spelling, with one dash or two.
    #[command(
        after_help = "Examples:\n  opscope stats op trace.json.gz\n  opscope stats op -order_by self_cpu_micros -min_micros 100 trace.json\n  opscope stats op -select occurrence,accelerator_micros -account_type_regexes 'aten::.*' trace.json\n  opscope stats op -output csv:outfile=ops.csv trace.json"
    )]
    Op(OpArgs),
    /// The name-scope tree: TensorFlow node names split at "/", or the nesting of
    /// PyTorch ops and record_function ranges; self and total CPU and accelerator time
    /// per node (tfprof's scope view).
    #[command(
        after_help = "Examples:\n  opscope stats scope -max_depth 3 trace.json\n  opscope stats scope -start_name_regexes 'gradients' -min_micros 10 timeline.json\n  opscope stats scope -output json:outfile=scope.json trace.json.gz"
    )]
    Scope(TreeArgs),
    /// The Python call tree: each op's time charged to the source lines of its call
    /// stack (Kineto's "Call stack", or python_function ranges), tfprof's code view.
    #[command(
        after_help = "Examples:\n  opscope stats code -max_depth 6 -min_micros 1000 trace.json.gz\n  opscope stats code -trim_name_regexes '.*site-packages.*' trace.json.gz"
    )]
    Code(TreeArgs),
    /// Per GPU kernel name: share of kernel time, total, instances, mean, median, min,
    /// max and standard deviation (Nsight's cuda_gpu_kern_sum columns).
    #[command(
        after_help = "Examples:\n  opscope stats kernel trace.json.gz\n  opscope stats kernel --limit 20 runs/ranks/\n  opscope stats kernel --memory --format csv trace.json > kernels.csv"
    )]
    Kernel(KernelArgs),
}

#[derive(clap::Args)]
struct KernelArgs {
    #[command(flatten)]
    inputs: load::Inputs,
    /// Also list memory copies and sets, each by name.
    #[arg(long)]
    memory: bool,
    /// Show only the N kernels with the most time (0: all).
    #[arg(long, default_value_t = 0, value_name = "N")]
    limit: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: OutputFormat,
}

/// How times are counted and totals made, for every tfprof view.
#[derive(clap::Args)]
struct Accounting {
    /// Count each op run and kernel in whole microseconds, at least 1, as tfprof does
    /// (its figures come from TensorFlow's µs fields); default: to the nanosecond.
    #[arg(long = "tfprof_micros", alias = "tfprof-micros")]
    tfprof_micros: bool,
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
    account_displayed_op_only: bool,
}

impl Accounting {
    fn timing(&self) -> Timing {
        if self.tfprof_micros {
            Timing::WholeMicros
        } else {
            Timing::Exact
        }
    }
}

/// tfprof's options, as `stats op` understands them.
#[derive(clap::Args)]
struct OpArgs {
    #[command(flatten)]
    inputs: load::Inputs,
    #[command(flatten)]
    accounting: Accounting,
    /// Columns to show, comma-separated: occurrence, micros, cpu_micros,
    /// self_cpu_micros, accelerator_micros, bytes (requested), residual_bytes,
    /// peak_bytes, output_bytes, float_ops, device, input_shapes.
    #[arg(
        long = "select",
        default_value = "occurrence,micros,cpu_micros,self_cpu_micros,accelerator_micros"
    )]
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
    /// Where to write: stdout, file:outfile=F (text), csv:outfile=F, json:outfile=F, or
    /// timeline:outfile=F (the ops shown and their device work, as a Chrome trace).
    #[arg(long = "output", default_value = "stdout")]
    output: String,
    /// Output format on stdout (tfprof's `-output` names a file and its format).
    #[arg(long, value_enum, default_value_t)]
    format: OutputFormat,
    /// Leave out the last profiler step and the work launched in it.
    #[arg(long = "exclude_last_step", alias = "exclude-last-step")]
    exclude_last_step: bool,
    /// Only step N (ProfilerStep#N, train_step_N) and the work launched in it.
    #[arg(long = "step", value_name = "N", conflicts_with = "exclude_last_step")]
    step: Option<u64>,
}

/// tfprof's options for the tree views.
#[derive(clap::Args)]
struct TreeArgs {
    #[command(flatten)]
    inputs: load::Inputs,
    #[command(flatten)]
    accounting: Accounting,
    /// Columns to show, comma-separated, each as self/total: micros (CPU and
    /// accelerator time), cpu_micros, accelerator_micros, bytes (requested),
    /// peak_bytes, residual_bytes, output_bytes, occurrence.
    #[arg(long = "select", default_value = "micros,occurrence")]
    select: String,
    /// Hide nodes whose subtree requested fewer bytes.
    #[arg(long = "min_bytes", alias = "min-bytes", default_value_t = 0)]
    min_bytes: i64,
    /// Deepest level shown (the root is 0).
    #[arg(long = "max_depth", alias = "max-depth")]
    max_depth: Option<usize>,
    /// Hide nodes whose subtree has less CPU plus accelerator time (µs).
    #[arg(long = "min_micros", alias = "min-micros", default_value_t = 0.0)]
    min_micros: f64,
    /// Show only subtrees under nodes whose whole name matches one of these
    /// comma-separated regexes.
    #[arg(
        long = "start_name_regexes",
        alias = "start-name-regexes",
        default_value = ""
    )]
    start_name_regexes: String,
    /// Show matching nodes but nothing under them.
    #[arg(
        long = "trim_name_regexes",
        alias = "trim-name-regexes",
        default_value = ""
    )]
    trim_name_regexes: String,
    /// Show only nodes whose whole name matches (their children may still show).
    #[arg(
        long = "show_name_regexes",
        alias = "show-name-regexes",
        default_value = ""
    )]
    show_name_regexes: String,
    /// Hide nodes whose whole name matches.
    #[arg(
        long = "hide_name_regexes",
        alias = "hide-name-regexes",
        default_value = ""
    )]
    hide_name_regexes: String,
    /// Where to write: stdout, file:outfile=F (text), csv:outfile=F, json:outfile=F, or
    /// timeline:outfile=F (the ops of the chosen step and their device work, as a
    /// Chrome trace).
    #[arg(long = "output", default_value = "stdout")]
    output: String,
    /// Output format on stdout (tfprof's `-output` names a file and its format).
    #[arg(long, value_enum, default_value_t)]
    format: OutputFormat,
    /// Leave out the last profiler step and the work launched in it.
    #[arg(long = "exclude_last_step", alias = "exclude-last-step")]
    exclude_last_step: bool,
    /// Only step N (ProfilerStep#N, train_step_N) and the work launched in it.
    #[arg(long = "step", value_name = "N", conflicts_with = "exclude_last_step")]
    step: Option<u64>,
}

/// tfprof's long options, written with one dash (`-order_by`), that the command line
/// accepts as if written with two.
pub const TFPROF_OPTIONS: &[&str] = &[
    "select",
    "order_by",
    "min_micros",
    "min_accelerator_micros",
    "min_cpu_micros",
    "min_occurrence",
    "show_name_regexes",
    "hide_name_regexes",
    "account_type_regexes",
    "output",
    "exclude_last_step",
    "max_depth",
    "min_bytes",
    "start_name_regexes",
    "trim_name_regexes",
    "account_displayed_op_only",
    "step",
    "tfprof_micros",
];

/// Where `-output` (or `--format` on stdout) sends a table: a file, or stdout (`None`).
enum Destination {
    Text(Option<PathBuf>),
    Csv(Option<PathBuf>),
    Json(Option<PathBuf>),
    /// The ops shown and their device work, as a Chrome trace.
    Timeline(PathBuf),
}

impl Destination {
    /// The format of a table written to stdout or a file.
    fn format(&self) -> Format {
        match self {
            Destination::Text(_) | Destination::Timeline(_) => Format::Text,
            Destination::Csv(_) => Format::Csv,
            Destination::Json(_) => Format::Json,
        }
    }

    /// Runs `write` on stdout or the file, and says what was written where.
    fn write(&self, write: impl FnOnce(&mut dyn Write) -> Result<()>, what: &str) -> Result<()> {
        let path = match self {
            Destination::Text(p) | Destination::Csv(p) | Destination::Json(p) => p.as_deref(),
            Destination::Timeline(p) => Some(p.as_path()),
        };
        output::write_to(path, write)?;
        if let Some(path) = path {
            eprintln!("wrote {what} to {}", path.display());
        }
        Ok(())
    }
}

/// tfprof's `-output` spec, or for `stdout` the `--format` every command takes.
fn destination(spec: &str, format: OutputFormat) -> Result<Destination> {
    if spec == "stdout" {
        return Ok(match format {
            OutputFormat::Text => Destination::Text(None),
            OutputFormat::Json => Destination::Json(None),
            OutputFormat::Csv => Destination::Csv(None),
        });
    }
    if format != OutputFormat::Text {
        bail!("give either --format or -output {spec}, not both");
    }
    let (kind, options) = spec.split_once(':').unwrap_or((spec, ""));
    let file = options
        .split(',')
        .find_map(|o| o.strip_prefix("outfile="))
        .map(PathBuf::from);
    let need = || {
        file.clone()
            .with_context(|| format!("-output {spec}: give outfile=FILE"))
    };
    Ok(match kind {
        "file" => Destination::Text(Some(need()?)),
        "csv" => Destination::Csv(Some(need()?)),
        "json" => Destination::Json(Some(need()?)),
        "timeline" => Destination::Timeline(need()?),
        "pprof" => bail!("-output pprof is not supported (use stdout, file, csv, json or timeline)"),
        _ => bail!(
            "-output {spec}: expected stdout, file:outfile=F, csv:outfile=F, json:outfile=F or timeline:outfile=F"
        ),
    })
}

/// For `-output timeline`: the selected ops `wanted` accepts, and the device work and
/// runtime calls that belong to them.
fn timeline_selection(
    trace: &opscope_model::Trace,
    correlation: &correlate::Correlation,
    selected: &[bool],
    wanted: impl Fn(usize) -> bool,
) -> Vec<bool> {
    let s = &trace.slices;
    let is_op = |i: usize| opscope_analysis::attribution::is_op_slice(trace, i);
    (0..s.len())
        .map(|i| {
            selected[i]
                && if is_op(i) {
                    wanted(i)
                } else {
                    correlation
                        .op_of(trace, i)
                        .is_some_and(|op| is_op(op) && wanted(op))
                }
        })
        .collect()
}

/// The part of the trace `-step` and `--exclude-last-step` ask for.
fn chosen_window(
    cx: &opscope_analysis::Context,
    step: Option<u64>,
    exclude_last: bool,
) -> Result<Window> {
    match step {
        Some(n) => {
            let known = cx.step_numbers();
            if !known.contains(&n) {
                let list: Vec<String> = known.iter().map(u64::to_string).collect();
                bail!(
                    "-step {n}: the trace has no such step marker (its steps: {})",
                    if list.is_empty() {
                        "none".to_string()
                    } else {
                        list.join(", ")
                    }
                );
            }
            Ok(Window::Step(n))
        }
        None if exclude_last => Ok(Window::BeforeLastStep),
        None => Ok(Window::Whole),
    }
}

pub fn run(args: Args) -> Result<()> {
    match args.view {
        View::Op(args) => op(args),
        View::Scope(args) => tree(args, TreeKind::Scope),
        View::Code(args) => tree(args, TreeKind::Code),
        View::Kernel(args) => kernel(args),
    }
}

fn op(args: OpArgs) -> Result<()> {
    let select: Vec<Column> = args
        .select
        .split(',')
        .filter(|c| !c.is_empty() && *c != "name")
        .map(Column::parse)
        .collect::<Result<_, _>>()
        .map_err(anyhow::Error::msg)
        .context("-select")?;
    let regex_option = |name: &str, list: &str| {
        view::regexes(list).with_context(|| format!("-{name}: not a valid regex list"))
    };
    let options = ViewOptions {
        order_by: Column::parse(&args.order_by)
            .map_err(anyhow::Error::msg)
            .context("-order_by")?,
        min_micros: args.min_micros,
        min_cpu_micros: args.min_cpu_micros,
        min_accelerator_micros: args.min_accelerator_micros,
        min_occurrence: args.min_occurrence,
        min_bytes: args.min_bytes,
        show_name_regexes: regex_option("show_name_regexes", &args.show_name_regexes)?,
        hide_name_regexes: regex_option("hide_name_regexes", &args.hide_name_regexes)?,
        account_type_regexes: regex_option("account_type_regexes", &args.account_type_regexes)?,
    };
    let destination = destination(&args.output, args.format)?;
    let trace = args.inputs.load()?;
    let cx = opscope_analysis::Context::new(&trace);
    let window = chosen_window(&cx, args.step, args.exclude_last_step)?;
    let view = op_view(
        &cx,
        &OpViewOptions {
            stats: OpStatsOptions {
                window,
                timing: args.accounting.timing(),
            },
            view: options,
            columns: select,
            account_displayed_only: args.accounting.account_displayed_op_only,
            limit: args.limit,
        },
    );
    let rows = &view.rows;
    let shown: std::collections::HashSet<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    let timeline_keep = || {
        let selected = cx.selected(window);
        timeline_selection(&trace, cx.correlation(), &selected, |i| {
            shown.contains(trace.str(trace.slices.name[i]))
        })
    };
    let write = |out: &mut dyn Write| -> Result<()> {
        match &destination {
            Destination::Timeline(_) => {
                opscope_formats::chrome::export_selected(&trace, &timeline_keep(), &mut &mut *out)?
            }
            other => render(&view, other.format(), out)?,
        }
        Ok(())
    };
    destination.write(write, &format!("{} rows", rows.len()))
}

fn kernel(args: KernelArgs) -> Result<()> {
    let trace = args.inputs.load()?;
    let options = KernelStatsOptions {
        include_memory: args.memory,
    };
    let mut rows = kernel_stats(&opscope_analysis::Context::new(&trace), &options);
    if args.limit > 0 {
        rows.truncate(args.limit);
    }
    output::print(args.format, &KernelTable { rows })
}

fn tree(args: TreeArgs, kind: TreeKind) -> Result<()> {
    let columns = TreeColumn::parse_list(&args.select)
        .map_err(anyhow::Error::msg)
        .context("-select")?;
    let regex_option = |name: &str, list: &str| {
        view::regexes(list).with_context(|| format!("-{name}: not a valid regex list"))
    };
    let display = TreeDisplay {
        max_depth: args.max_depth,
        min_micros: args.min_micros,
        min_bytes: args.min_bytes,
        account_displayed_only: args.accounting.account_displayed_op_only,
        start_name_regexes: regex_option("start_name_regexes", &args.start_name_regexes)?,
        trim_name_regexes: regex_option("trim_name_regexes", &args.trim_name_regexes)?,
        show_name_regexes: regex_option("show_name_regexes", &args.show_name_regexes)?,
        hide_name_regexes: regex_option("hide_name_regexes", &args.hide_name_regexes)?,
    };
    let destination = destination(&args.output, args.format)?;
    let trace = args.inputs.load()?;
    let cx = opscope_analysis::Context::new(&trace);
    let win = chosen_window(&cx, args.step, args.exclude_last_step)?;
    let built = tree::build(&cx, kind, win, args.accounting.timing());
    let shown = tree::display(&built, &display);
    let view = TreeView {
        tree: &built,
        shown: &shown,
        columns: &columns,
    };
    let write = |out: &mut dyn Write| -> Result<()> {
        match &destination {
            Destination::Timeline(_) => {
                let keep =
                    timeline_selection(&trace, cx.correlation(), &cx.selected(win), |_| true);
                opscope_formats::chrome::export_selected(&trace, &keep, &mut &mut *out)?
            }
            other => render(&view, other.format(), out)?,
        }
        Ok(())
    };
    destination.write(write, &format!("{} nodes", shown.len()))
}
