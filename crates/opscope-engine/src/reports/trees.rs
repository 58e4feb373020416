//! `stats scope` and `stats code`: tfprof's tree views — the name-scope tree
//! (TensorFlow node names split at "/", or the nesting of PyTorch ops and ranges) and
//! the Python call tree — with self and total time per node and tfprof's options.

use opscope_analysis::report::{Report, Reported};
use opscope_analysis::tree::{self, Shown, Tree, TreeColumn, TreeDisplay, TreeKind, TreeView};
use opscope_analysis::window::Window;
use opscope_analysis::Context;
use serde::{Deserialize, Serialize};

use super::tfprof::{regex_list, Accounting, Steps};
use super::{Entry, Error, Formats, Frame, Output, Run};

/// Each node shown, with its path and its self and total figures.
const NODES: &[Frame] = &[Frame {
    name: "nodes",
    path: &[],
    parent: &[],
    unprefixed: &[],
    columns: &[
        "shown_depth",
        "name",
        "path",
        "occurrence",
        "self_cpu_ns",
        "total_cpu_ns",
        "self_accelerator_ns",
        "total_accelerator_ns",
    ],
}];

pub static STATS_SCOPE: Entry<ScopeOptions> = Entry {
    name: "stats scope",
    formats: Formats::TextJsonCsv,
    frames: NODES,
    run: |cx, o| run(cx, &o.tree, TreeKind::Scope),
    section: None,
    timeline: Some(timeline),
    check: Some(|o| display(&o.tree).map(|_| ())),
};

pub static STATS_CODE: Entry<CodeOptions> = Entry {
    name: "stats code",
    formats: Formats::TextJsonCsv,
    frames: NODES,
    run: |cx, o| run(cx, &o.tree, TreeKind::Code),
    section: None,
    timeline: Some(timeline),
    check: Some(|o| display(&o.tree).map(|_| ())),
};

#[derive(clap::Args, Deserialize, Default)]
#[serde(default)]
#[command(
    about = "The name-scope tree: TensorFlow node names split at \"/\", or the nesting of PyTorch ops and record_function ranges; self and total CPU and accelerator time per node (tfprof's scope view)",
    after_help = "Examples:\n  opscope stats scope -max_depth 3 trace.json\n  opscope stats scope -start_name_regexes 'gradients' -min_micros 10 timeline.json\n  opscope stats scope -output json:outfile=scope.json trace.json.gz"
)]
pub struct ScopeOptions {
    #[command(flatten)]
    #[serde(flatten)]
    tree: TreeOptions,
}

#[derive(clap::Args, Deserialize, Default)]
#[serde(default)]
#[command(
    about = "The Python call tree: each op's time charged to the source lines of its call stack (Kineto's \"Call stack\", or python_function ranges), tfprof's code view",
    after_help = "Examples:\n  opscope stats code -max_depth 6 -min_micros 1000 trace.json.gz\n  opscope stats code -trim_name_regexes '.*site-packages.*' trace.json.gz"
)]
pub struct CodeOptions {
    #[command(flatten)]
    #[serde(flatten)]
    tree: TreeOptions,
}

/// tfprof's options for the tree views.
#[derive(clap::Args, Deserialize)]
#[serde(default)]
pub struct TreeOptions {
    #[command(flatten)]
    #[serde(flatten)]
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
    #[command(flatten)]
    #[serde(flatten)]
    steps: Steps,
}

impl Default for TreeOptions {
    fn default() -> TreeOptions {
        TreeOptions {
            accounting: Accounting::default(),
            select: "micros,occurrence".to_string(),
            min_bytes: 0,
            max_depth: None,
            min_micros: 0.0,
            start_name_regexes: String::new(),
            trim_name_regexes: String::new(),
            show_name_regexes: String::new(),
            hide_name_regexes: String::new(),
            steps: Steps::default(),
        }
    }
}

/// A tree, the nodes shown of it and the columns chosen: what the view borrows.
pub struct Trees {
    tree: Tree,
    shown: Vec<Shown>,
    columns: Vec<TreeColumn>,
    window: Window,
}

impl Trees {
    fn view(&self) -> TreeView<'_> {
        TreeView {
            tree: &self.tree,
            shown: &self.shown,
            columns: &self.columns,
        }
    }
}

impl Serialize for Trees {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.view().serialize(serializer)
    }
}

impl Reported for Trees {
    fn report(&self) -> Report {
        self.view().report()
    }
}

/// The columns and what is shown, or what is wrong with them.
fn display(o: &TreeOptions) -> Result<(Vec<TreeColumn>, TreeDisplay), Error> {
    let columns =
        TreeColumn::parse_list(&o.select).map_err(|e| Error::options(format!("-select: {e}")))?;
    let display = TreeDisplay {
        max_depth: o.max_depth,
        min_micros: o.min_micros,
        min_bytes: o.min_bytes,
        account_displayed_only: o.accounting.account_displayed_op_only,
        start_name_regexes: regex_list("start_name_regexes", &o.start_name_regexes)?,
        trim_name_regexes: regex_list("trim_name_regexes", &o.trim_name_regexes)?,
        show_name_regexes: regex_list("show_name_regexes", &o.show_name_regexes)?,
        hide_name_regexes: regex_list("hide_name_regexes", &o.hide_name_regexes)?,
    };
    Ok((columns, display))
}

fn run(cx: &Context, o: &TreeOptions, kind: TreeKind) -> Run {
    let (columns, display) = display(o)?;
    let window = o.steps.window(cx)?;
    let tree = tree::build(cx, kind, window, o.accounting.timing());
    let shown = tree::display(&tree, &display);
    Ok(Box::new(Trees {
        tree,
        shown,
        columns,
        window,
    }))
}

/// The ops of the chosen part of the trace and the work they launched.
fn timeline(cx: &Context, output: &dyn Output) -> Option<Vec<bool>> {
    let trees = output.as_any().downcast_ref::<Trees>()?;
    Some(crate::timeline::selection(
        cx,
        &cx.selected(trees.window),
        |_| true,
    ))
}
