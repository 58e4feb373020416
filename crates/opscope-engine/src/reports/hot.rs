//! `stats hot`: the hot functions of the sampled stacks (`opscope record`, `opscope
//! attach`), py-spy top's columns: own and total share and time per function.

use opscope_analysis::hot::{self, Hot, HotOptions};
use opscope_analysis::report::{Report, Reported};
use opscope_analysis::Context;
use serde::Deserialize;

use super::{boxed, Entry, Error, Formats, Frame, Output};

pub static STATS_HOT: Entry<Options> = Entry {
    name: "stats hot",
    formats: Formats::TextJsonCsv,
    frames: &[Frame {
        name: "functions",
        path: &["functions"],
        parent: &[],
        unprefixed: &[],
        columns: &[
            "function",
            "file",
            "line",
            "self_ns",
            "total_ns",
            "self_pct",
            "total_pct",
            "self_samples",
            "total_samples",
        ],
    }],
    run,
    section: Some(("Hot functions", section)),
    timeline: None,
    check: None,
};

#[derive(clap::Args, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
#[command(
    about = "Hot functions of the sampled Python stacks: each function's own and total share of the samples (py-spy top's columns)",
    after_help = "Own time is the samples where the function was the innermost frame; total \
                  time those where it was anywhere on the stack. By default only samples of \
                  threads that ran count (CPU time); --wall counts waiting threads too. The \
                  stacks come from `opscope record` (on by default) or `opscope attach`.\n\n\
                  Examples:\n  opscope stats hot opscope-session\n  opscope stats hot --wall --limit 20 opscope-attach-4242\n  opscope stats hot --lines --format csv run/ > lines.csv"
)]
pub struct Options {
    /// Count the samples of waiting threads too (wall time: locks, I/O, the GPU).
    #[arg(long)]
    wall: bool,
    /// One row per line of each function rather than per function.
    #[arg(long)]
    lines: bool,
    /// Native (C, C++) functions too, where native stacks were sampled: own time goes
    /// to the native function running rather than to the Python one that called it.
    #[arg(long)]
    native: bool,
    /// Show only the N functions with the most own time (0: all).
    #[arg(long, default_value_t = 30, value_name = "N")]
    limit: usize,
}

/// The hot functions, with the number of rows to show.
struct Listed {
    hot: Hot,
    limit: usize,
}

impl serde::Serialize for Listed {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut hot = Hot {
            time: self.hot.time,
            sampled_ns: self.hot.sampled_ns,
            samples: self.hot.samples,
            functions: self.hot.functions.clone(),
        };
        if self.limit > 0 {
            hot.functions.truncate(self.limit);
        }
        hot.serialize(s)
    }
}

impl Reported for Listed {
    fn report(&self) -> Report {
        let mut report = Report::default();
        let limit = if self.limit == 0 {
            usize::MAX
        } else {
            self.limit
        };
        report.table(hot::table(&self.hot, limit));
        report
    }
}

fn listed(cx: &Context, o: &Options) -> Listed {
    let options = HotOptions {
        wall: o.wall,
        lines: o.lines,
        native: o.native,
    };
    Listed {
        hot: hot::hot(cx.trace(), options),
        limit: o.limit,
    }
}

fn run(cx: &Context, o: &Options) -> Result<Box<dyn Output>, Error> {
    boxed(listed(cx, o))
}

fn section(cx: &Context, top: usize) -> Result<String, Error> {
    if cx.trace().samples.is_empty() {
        return Ok(String::new());
    }
    let o = Options {
        limit: top,
        ..Options::default()
    };
    Ok(crate::html::report(&listed(cx, &o).report()))
}
