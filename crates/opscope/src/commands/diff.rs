//! `opscope diff A B`: what changed between two traces, two ranks of one (`--rank 0
//! --rank 3`) or two step ranges of one (`--steps 10..20 --steps 80..90`), matched by
//! place in the call tree with a verdict against noise, or grouped by name as HTA's
//! `TraceDiff` (`--by name`).

use std::path::PathBuf;

use anyhow::{bail, Context as _, Result};
use clap::ValueEnum;
use opscope_analysis::diff::{self, Device, MatchedOptions, Side, Span, StepRange};
use opscope_analysis::Context;
use opscope_engine::load::{load, LoadOptions};
use opscope_engine::Output;
use opscope_model::Trace;

use crate::output::{self, OutputFormat};

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, ValueEnum)]
enum By {
    /// Each op against the op at the same place in the call tree, device work under
    /// its launching op, per step, with a verdict against the noise.
    #[default]
    Structure,
    /// Counts and total durations per name, as HTA's TraceDiff.compare_traces and
    /// ops_diff (one iteration per side unless --steps).
    Name,
}

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, ValueEnum)]
enum DeviceArg {
    Cpu,
    Gpu,
    #[default]
    All,
}

#[derive(clap::Args)]
#[command(
    about = "What changed between two runs, two ranks or two step ranges, and whether it is more than noise",
    long_about = "Compare two traces (two runs, two hosts, two library versions), two ranks of one \
                  trace (--rank 0 --rank 3) or two step ranges of one (--steps 10..20 --steps 80..90).\n\n\
                  By default work is matched by place: each op against the op at the same place \
                  in its step's call tree (the same names from the step down, the same number of \
                  like-named siblings before it), device work under its launching op whatever its \
                  kernel is called on each side. Each line has one value per step on each side \
                  (host: the op's self time; device: its device time); its verdict (slower, \
                  faster, unchanged) comes from the change of the median and its 95 % bootstrap \
                  interval against a threshold (--step-percent of A's median step, --line-percent \
                  of the line's own median). Lines are sorted by their contribution to the change \
                  of the mean step; on the step's thread the contributions and the time between \
                  ops add up to that change exactly.\n\n\
                  --live JOB compares a running job's first --window of steps (default 60 s) with \
                  its last, from the agent's flight recorder: what changed since it started.\n\n\
                  --by name groups by name as HTA's TraceDiff.compare_traces does: one rank (the \
                  lowest unless --rank) and one iteration (the first ProfilerStep#N unless \
                  --steps) per side, counts and total durations per name, and ops_diff's \
                  categories (added, deleted, increased, decreased, unchanged).",
    after_help = "Examples:\n  opscope diff before/ after/\n  opscope diff --live train --window 2m\n  opscope diff run.json.gz --rank 0 --rank 3\n  opscope diff run/ --steps 10..20 --steps 80..90\n  opscope diff control.json.gz test.json.gz --by name --device gpu --format csv"
)]
pub struct Args {
    /// Two traces (A, then B), or one with --rank or --steps given twice. A trace is a
    /// file or a directory of trace files, as every command takes it.
    #[arg(value_name = "TRACE", required_unless_present = "live", num_args = 1..=2)]
    traces: Vec<PathBuf>,
    /// A running job instead (as `opscope top` names it): the steps of its first
    /// --window in the agent's flight recorder against those of its last.
    #[arg(long, value_name = "JOB", conflicts_with = "traces")]
    live: Option<String>,
    /// With --live: how much of the job's start and of its end to compare (halves of
    /// its steps when it holds less than twice this).
    #[arg(long, value_name = "DURATION", default_value = "60s", requires = "live",
          value_parser = opscope_agent::triggers::parse_duration)]
    window: std::time::Duration,
    /// The rank of each side: twice (A's, then B's), or once for both [default: the
    /// lowest rank of each trace].
    #[arg(long, value_name = "RANK", action = clap::ArgAction::Append, value_delimiter = ',')]
    rank: Vec<u32>,
    /// The steps of each side (N, A..B with B excluded, A..=B, A..): twice (A's, then
    /// B's), or once for both. Steps are numbered as their markers are
    /// (ProfilerStep#N), else by their place from 0 [default: every step; with --by
    /// name, the first iteration].
    #[arg(long, value_name = "RANGE", action = clap::ArgAction::Append, value_delimiter = ',')]
    steps: Vec<StepRange>,
    /// How work is paired.
    #[arg(long, value_enum, default_value_t)]
    by: By,
    /// With --by name: host events, device work, or both.
    #[arg(long, value_enum, default_value_t)]
    device: DeviceArg,
    /// With --by name: HTA's short names (no template or function arguments).
    #[arg(long)]
    short_names: bool,
    /// A change counts only beyond this percentage of A's median step…
    #[arg(long, default_value_t = MatchedOptions::default().step_percent, value_name = "PERCENT")]
    step_percent: f64,
    /// …and beyond this percentage of the line's own median in A.
    #[arg(long, default_value_t = MatchedOptions::default().line_percent, value_name = "PERCENT")]
    line_percent: f64,
    /// Lines shown of each kind (host, device), largest contribution first.
    #[arg(long, default_value_t = MatchedOptions::default().top, value_name = "N")]
    top: usize,
    #[arg(long, value_enum, default_value_t)]
    format: OutputFormat,
    /// Also write the diff as one HTML page (each side's steps on one scale, the lines
    /// that moved most step by step, every line's table).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Replace FILE when it exists.
    #[arg(long, short)]
    force: bool,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
    /// Parse the files even when the model cache holds them.
    #[arg(long)]
    no_cache: bool,
    /// When a file named here cannot be read to its end (cut off while it was written,
    /// damaged), analyse what was read before the error, with a warning, instead of
    /// stopping.
    #[arg(long)]
    partial: bool,
    /// Where the agent is, for --live.
    #[command(flatten)]
    agent: opscope_agent::client::LiveAgentAddress,
}

/// Each side's value of a twice-given option: A's then B's, or one for both.
fn per_side<T: Clone>(values: &[T], name: &str) -> Result<[Option<T>; 2]> {
    Ok(match values {
        [] => [None, None],
        [both] => [Some(both.clone()), Some(both.clone())],
        [a, b] => [Some(a.clone()), Some(b.clone())],
        _ => bail!("--{name} is given once (both sides) or twice (A's, then B's)"),
    })
}

pub fn run(args: Args) -> Result<()> {
    // Said before the trace is read.
    two_sides(&args)?;
    if let Some(page) = &args.output {
        output::refuse_existing(page, args.force)?;
    }
    let (a, b) = match &args.live {
        // The agent's dump is read at once: its files may go when `dump` does.
        Some(job) => {
            let dump = opscope_agent::client::LiveDump::fetch(&args.agent.address, job, None)?;
            let options = LoadOptions {
                quiet: true,
                cache: false,
                partial: false,
            };
            (load(&[dump.path().to_path_buf()], &options)?, None)
        }
        None => {
            let options = LoadOptions {
                quiet: args.quiet,
                cache: !args.no_cache,
                partial: args.partial,
            };
            let a = load(&args.traces[..1], &options)?;
            let b = match args.traces.len() {
                1 => None,
                _ => Some(load(&args.traces[1..], &options)?),
            };
            (a, b)
        }
    };
    let result = compare(&args, &a, b.as_ref())?;
    output::print(args.format, result.as_ref())
}

/// Writes the page `-o` asks for, if it asks, and says so on stderr.
fn write_page(args: &Args, page: impl FnOnce() -> String) -> Result<()> {
    let Some(path) = &args.output else {
        return Ok(());
    };
    let html = page();
    std::fs::write(path, &html)
        .with_context(|| format!("{}: cannot write the page", path.display()))?;
    eprintln!(
        "wrote {} ({} KiB)",
        path.display(),
        html.len().div_ceil(1024)
    );
    Ok(())
}

/// Whether `args` name two sides: two traces, parts of one, or a live job's start and
/// end.
fn two_sides(args: &Args) -> Result<()> {
    if args.live.is_some() && args.by == By::Name {
        bail!("--live compares matched lines; --by name takes iterations, not spans of time");
    }
    if args.live.is_none() && args.traces.len() == 1 && args.rank.len() < 2 && args.steps.len() < 2
    {
        bail!(
            "one trace is compared with itself only by parts: give --rank twice or --steps \
             twice (or give two traces)"
        );
    }
    Ok(())
}

/// The comparison `args` asks for, of `a` and `b` (of parts of `a` where `b` is none),
/// loaded from `args`' traces.
pub fn compare(args: &Args, a: &Trace, b: Option<&Trace>) -> Result<Box<dyn Output>> {
    two_sides(args)?;
    let ranks = per_side(&args.rank, "rank")?;
    let steps = per_side(&args.steps, "steps")?;
    let window_ns = args.window.as_nanos().min(i64::MAX as u128) as i64;
    let cx_a = Context::new(a);
    let cx_b = b.map(Context::new);
    let label = |k: usize| {
        let path = match &args.live {
            Some(job) => format!("job {job}"),
            None => args.traces[k.min(args.traces.len() - 1)]
                .display()
                .to_string(),
        };
        let mut parts = vec![path];
        if args.rank.len() == 2 {
            parts.push(format!("rank {}", args.rank[k]));
        }
        if args.steps.len() == 2 {
            parts.push(format!("steps {}", args.steps[k]));
        }
        parts.join(", ")
    };
    let side_a = Side {
        cx: &cx_a,
        label: label(0),
        rank: ranks[0],
        steps: steps[0],
        span: args.live.as_ref().map(|_| Span::First(window_ns)),
    };
    let side_b = Side {
        cx: cx_b.as_ref().unwrap_or(&cx_a),
        label: label(1),
        rank: ranks[1],
        steps: steps[1],
        span: args.live.as_ref().map(|_| Span::Last(window_ns)),
    };
    Ok(match args.by {
        By::Name => {
            let device = match args.device {
                DeviceArg::Cpu => Device::Cpu,
                DeviceArg::Gpu => Device::Gpu,
                DeviceArg::All => Device::All,
            };
            let result = diff::by_name::by_name(&side_a, &side_b, device, args.short_names)
                .map_err(anyhow::Error::msg)?;
            write_page(args, || opscope_engine::diff_page::tables(&result))?;
            Box::new(result)
        }
        By::Structure => {
            let options = MatchedOptions {
                step_percent: args.step_percent,
                line_percent: args.line_percent,
                top: args.top,
                ..MatchedOptions::default()
            };
            let result =
                diff::matched::matched(&side_a, &side_b, &options).map_err(anyhow::Error::msg)?;
            write_page(args, || opscope_engine::diff_page::matched(&result))?;
            Box::new(result)
        }
    })
}

/// `opscope diff ARGS` (no program name, no traces) on models loaded before, named
/// `names` (A's then B's; one for parts of one trace): the JSON document it prints
/// with `--format json`.
/// A's lines matched with B's, as `opscope diff A B` matches them by default; the two
/// sides named by `labels`. For the pages that show a comparison beside other things
/// (`report --against`, `view --against`).
pub fn matched_default(
    a: &Trace,
    b: &Trace,
    labels: [String; 2],
) -> Result<diff::matched::MatchedDiff> {
    let (cx_a, cx_b) = (Context::new(a), Context::new(b));
    let [label_a, label_b] = labels;
    let side = |cx, label| Side {
        cx,
        label,
        rank: None,
        steps: None,
        span: None,
    };
    diff::matched::matched(
        &side(&cx_a, label_a),
        &side(&cx_b, label_b),
        &MatchedOptions::default(),
    )
    .map_err(anyhow::Error::msg)
}

pub fn compare_loaded(
    a: &Trace,
    b: Option<&Trace>,
    names: &[PathBuf],
    args: &[String],
) -> Result<String> {
    use clap::{Args as _, FromArgMatches};
    let argv = std::iter::once("diff".to_string())
        .chain(args.iter().cloned())
        .chain(std::iter::once("--".to_string()))
        .chain(names.iter().map(|p| p.display().to_string()));
    let matches = Args::augment_args(clap::Command::new("diff").no_binary_name(false))
        .try_get_matches_from(argv)
        .map_err(|e| anyhow::anyhow!("{}", e.render().to_string().trim_end()))?;
    let args = Args::from_arg_matches(&matches)?;
    let result = compare(&args, a, b)?;
    let mut out = Vec::new();
    result.write_json(&mut out)?;
    Ok(String::from_utf8(out)?)
}
