//! `stats kernel`: per GPU kernel name, the columns of Nsight Systems'
//! `cuda_gpu_kern_sum` (share, total, instances, mean, median, min, max, deviation).

use opscope_analysis::kernel_stats::{kernel_stats, KernelStatsOptions, KernelTable};
use opscope_analysis::Context;
use serde::Deserialize;

use super::{boxed, Entry, Error, Formats, Frame, Output};

pub static STATS_KERNEL: Entry<Options> = Entry {
    name: "stats kernel",
    formats: Formats::TextJsonCsv,
    frames: &[Frame {
        name: "kernels",
        path: &[],
        parent: &[],
        unprefixed: &[],
        columns: &[
            "name",
            "time_pct",
            "total_ns",
            "instances",
            "mean_ns",
            "median_ns",
            "min_ns",
            "max_ns",
            "stddev_ns",
        ],
    }],
    run,
    section: Some(("Top kernels", section)),
    timeline: None,
    check: None,
};

#[derive(clap::Args, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
#[command(
    about = "Per GPU kernel name: share of kernel time, total, instances, mean, median, min, max and standard deviation (Nsight's cuda_gpu_kern_sum columns)",
    after_help = "Examples:\n  opscope stats kernel trace.json.gz\n  opscope stats kernel --limit 20 runs/ranks/\n  opscope stats kernel --memory --format csv trace.json > kernels.csv"
)]
pub struct Options {
    /// Also list memory copies and sets, each by name.
    #[arg(long)]
    memory: bool,
    /// Show only the N kernels with the most time (0: all).
    #[arg(long, default_value_t = 0, value_name = "N")]
    limit: usize,
}

fn table(cx: &Context, o: &Options) -> KernelTable {
    let mut rows = kernel_stats(
        cx,
        &KernelStatsOptions {
            include_memory: o.memory,
        },
    );
    if o.limit > 0 {
        rows.truncate(o.limit);
    }
    KernelTable { rows }
}

fn run(cx: &Context, o: &Options) -> Result<Box<dyn Output>, Error> {
    boxed(table(cx, o))
}

fn section(cx: &Context, top: usize) -> Result<String, Error> {
    let kernels = table(
        cx,
        &Options {
            memory: false,
            limit: top,
        },
    );
    Ok(crate::html::report(
        &opscope_analysis::report::Reported::report(&kernels),
    ))
}
