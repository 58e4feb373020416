//! `advise`: what bounds each job and what to change — findings of the rules in
//! `opscope_analysis::advise`, ranked by the time a fix could save at most.

use opscope_analysis::advise::{self, AdviseOptions};
use opscope_analysis::window::Window;
use opscope_analysis::Context;
use serde::Deserialize;

use super::{boxed, Entry, Error, Formats, Frame, Output};

pub static ADVISE: Entry<Options> = Entry {
    name: "advise",
    formats: Formats::TextJsonCsv,
    frames: &[
        Frame {
            name: "findings",
            path: &["findings"],
            parent: &[],
            unprefixed: &[],
            columns: &[
                "rule",
                "anchor",
                "severity",
                "scope",
                "title",
                "evidence",
                "fix",
                "more",
                "saving_ns",
                "saving_pct",
                "span",
            ],
        },
        Frame {
            name: "not_checked",
            path: &["not_checked"],
            parent: &[],
            unprefixed: &[],
            columns: &["rule", "reason"],
        },
    ],
    run,
    section: Some(("Verdict", crate::page::advise_section)),
    timeline: None,
    check: Some(|o| options(o).map(|_| ())),
};

#[derive(clap::Args, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[command(
    about = "What bounds each job and what to change: findings ranked by the time a fix could save",
    long_about = "What bounds each job and what to change.\n\n\
        Each finding names its rule and the rule's anchor (tfprof's checkers, Nsight \
        Systems' expert rules, XProf's step classification, HTA's kernel analyses, \
        PyTorch's profiler plugin and pattern matcher), the numbers behind it, what to \
        try, the command that shows more, and the most time a fix could save (an upper \
        bound from the trace: the idle time it removes, the blocking calls it avoids) as \
        a share of the steps' time (or the span, without steps). A rule that needs what \
        the trace lacks says so once, under 'not checked'. On a TensorFlow RunMetadata \
        the output ends with what tfprof's advise prints.",
    after_help = "Examples:\n  opscope advise trace.json.gz\n  opscope advise runs/ranks/ --format json\n  opscope advise --rules gpu_gaps --gap-ms 100 report.sqlite"
)]
pub struct Options {
    /// Leave out the last profiler step and the work launched in it.
    #[arg(long)]
    exclude_last_step: bool,
    /// Only these rules (comma-separated; a name that is no rule has them all listed).
    #[arg(long, value_name = "RULES")]
    rules: Option<String>,
    /// gpu_gaps: report gaps of at least this many ms (Nsight Systems' default: 500).
    #[arg(long, default_value_t = 500.0, value_name = "MS")]
    gap_ms: f64,
    /// gpu_time_util: cut each device's span into this many chunks (Nsight's: 30).
    #[arg(long, default_value_t = 30, value_name = "N")]
    util_chunks: usize,
    /// gpu_time_util: report chunks busy less than this percent (Nsight's: 50).
    #[arg(long, default_value_t = 50.0, value_name = "PCT")]
    util_threshold: f64,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            exclude_last_step: false,
            rules: None,
            gap_ms: 500.0,
            util_chunks: 30,
            util_threshold: 50.0,
        }
    }
}

fn run(cx: &Context, o: &Options) -> Result<Box<dyn Output>, Error> {
    boxed(advise::advise(cx, &options(o)?))
}

fn options(o: &Options) -> Result<AdviseOptions, Error> {
    let known = advise::rule_names();
    let rules: Vec<String> = o
        .rules
        .as_deref()
        .map(|r| {
            r.split(',')
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty())
                .collect()
        })
        .unwrap_or_default();
    if let Some(bad) = rules.iter().find(|r| !known.contains(&r.as_str())) {
        return Err(Error::options(format!(
            "--rules: no rule `{bad}`; the rules: {}",
            known.join(", ")
        )));
    }
    if o.gap_ms.is_nan() || o.gap_ms < 0.0 || o.util_chunks == 0 || o.util_chunks > 1000 {
        return Err(Error::options(
            "--gap-ms must be 0 or more and --util-chunks from 1 to 1000",
        ));
    }
    Ok(AdviseOptions {
        window: if o.exclude_last_step {
            Window::BeforeLastStep
        } else {
            Window::Whole
        },
        rules,
        gap_ns: (o.gap_ms * 1e6).round() as i64,
        util_chunks: o.util_chunks,
        util_threshold_pct: o.util_threshold,
    })
}
