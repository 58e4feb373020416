//! `opscope stats VIEW`: where time goes, with tfprof's option language. `scope` and
//! `code` are trees (name scopes, Python call stacks; `-max_depth`,
//! `-start_name_regexes`, …); `op` and `kernel` are the engine's report commands,
//! added to this group with the others (see [`super::reports`]).

use std::io::Write;

use anyhow::{Context, Result};
use opscope_analysis::tree::{self, TreeColumn, TreeDisplay, TreeKind, TreeView};
use opscope_engine::reports::ops::{chosen_window, regex_list, timing};

use opscope_engine::render::Format;

use super::reports::{destination, Destination};
use crate::load;
use crate::output::{self, OutputFormat};

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

pub fn run(args: Args) -> Result<()> {
    match args.view {
        View::Scope(args) => tree(args, TreeKind::Scope),
        View::Code(args) => tree(args, TreeKind::Code),
    }
}

fn tree(args: TreeArgs, kind: TreeKind) -> Result<()> {
    let columns = TreeColumn::parse_list(&args.select)
        .map_err(anyhow::Error::msg)
        .context("-select")?;
    let display = TreeDisplay {
        max_depth: args.max_depth,
        min_micros: args.min_micros,
        min_bytes: args.min_bytes,
        account_displayed_only: args.accounting.account_displayed_op_only,
        start_name_regexes: regex_list("start_name_regexes", &args.start_name_regexes)?,
        trim_name_regexes: regex_list("trim_name_regexes", &args.trim_name_regexes)?,
        show_name_regexes: regex_list("show_name_regexes", &args.show_name_regexes)?,
        hide_name_regexes: regex_list("hide_name_regexes", &args.hide_name_regexes)?,
    };
    let destination = destination(&args.output, args.format.into())?;
    let trace = args.inputs.load()?;
    let cx = opscope_analysis::Context::new(&trace);
    let win = chosen_window(&cx, args.step, args.exclude_last_step)?;
    let built = tree::build(&cx, kind, win, timing(args.accounting.tfprof_micros));
    let shown = tree::display(&built, &display);
    let view = TreeView {
        tree: &built,
        shown: &shown,
        columns: &columns,
    };
    let nodes = shown.len();
    let report = opscope_analysis::report::Reported::report(&view);
    let json = || serde_json::to_string_pretty(&view);
    let (path, write): (_, Box<dyn FnOnce(&mut dyn Write) -> Result<()>>) = match destination {
        Destination::Stdout(format) => (None, Box::new(move |out| write_view(&report, json, format, out))),
        Destination::File(format, path) => (
            Some(path),
            Box::new(move |out| write_view(&report, json, format, out)),
        ),
        Destination::Timeline(path) => (
            Some(path),
            Box::new(|out| {
                let keep = opscope_engine::timeline_selection(&cx, &cx.selected(win), |_| true);
                opscope_formats::chrome::export_selected(&trace, &keep, &mut &mut *out)?;
                Ok(())
            }),
        ),
    };
    output::write_to(path.as_deref(), write)?;
    if let Some(path) = path {
        eprintln!("wrote {nodes} nodes to {}", path.display());
    }
    Ok(())
}

/// A tree view in `format` (it borrows the tree, so it is rendered here rather than
/// as an engine output).
fn write_view(
    report: &opscope_analysis::report::Report,
    json: impl FnOnce() -> serde_json::Result<String>,
    format: Format,
    out: &mut dyn Write,
) -> Result<()> {
    use opscope_engine::render;
    match format {
        Format::Json => writeln!(out, "{}", json()?)?,
        Format::Csv => {
            if let Some(table) = report.csv_table() {
                render::write_csv(table, out)?;
            }
        }
        Format::Text => render::write_report(report, output::text_width(), out)?,
    }
    Ok(())
}
