//! `opscope stats VIEW`: tables of where time goes. `kernel` gives per kernel name the
//! columns of Nsight Systems' `cuda_gpu_kern_sum`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use opscope_analysis::kernel_stats::{kernel_stats, KernelStatsOptions};

use crate::load::{self, LoadOptions};
use crate::output::{duration_text, OutputFormat, Table};

#[derive(clap::Args)]
#[command(about = "Tables of where the time goes, per kernel")]
pub struct Args {
    #[command(subcommand)]
    view: View,
}

#[derive(clap::Subcommand)]
enum View {
    /// Per GPU kernel name: share of kernel time, total, instances, mean, median, min,
    /// max and standard deviation (Nsight's cuda_gpu_kern_sum columns).
    #[command(
        after_help = "Examples:\n  opscope stats kernel trace.json.gz\n  opscope stats kernel --limit 20 runs/ranks/\n  opscope stats kernel --memory --format csv trace.json > kernels.csv"
    )]
    Kernel(KernelArgs),
}

#[derive(clap::Args)]
struct KernelArgs {
    /// Trace files or directories of trace files.
    #[arg(required = true, value_name = "TRACE")]
    traces: Vec<PathBuf>,
    /// Also list memory copies and sets, each by name.
    #[arg(long)]
    memory: bool,
    /// Show only the N kernels with the most time (0: all).
    #[arg(long, default_value_t = 0, value_name = "N")]
    limit: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: OutputFormat,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

pub fn run(args: Args) -> Result<()> {
    match args.view {
        View::Kernel(args) => kernel(args),
    }
}

fn kernel(args: KernelArgs) -> Result<()> {
    let trace = load::load(&args.traces, &LoadOptions { quiet: args.quiet })?;
    let options = KernelStatsOptions {
        include_memory: args.memory,
    };
    let mut rows = kernel_stats(&trace, &options);
    if args.limit > 0 {
        rows.truncate(args.limit);
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if args.format == OutputFormat::Json {
        serde_json::to_writer_pretty(&mut out, &rows)?;
        writeln!(out)?;
        return Ok(out.flush()?);
    }
    let text = args.format == OutputFormat::Text;
    let time = |ns: f64| {
        if text {
            duration_text(ns)
        } else {
            format!("{ns:.1}")
        }
    };
    let mut table = Table::new(&[
        ("Time(%)", true),
        (if text { "Total" } else { "total_ns" }, true),
        ("Instances", true),
        (if text { "Avg" } else { "avg_ns" }, true),
        (if text { "Med" } else { "med_ns" }, true),
        (if text { "Min" } else { "min_ns" }, true),
        (if text { "Max" } else { "max_ns" }, true),
        (if text { "StdDev" } else { "stddev_ns" }, true),
        ("Name", false),
    ]);
    for r in &rows {
        table.rows.push(vec![
            format!("{:.1}", r.time_pct),
            time(r.total_ns as f64),
            r.instances.to_string(),
            time(r.mean_ns),
            time(r.median_ns),
            time(r.min_ns as f64),
            time(r.max_ns as f64),
            time(r.stddev_ns),
            r.name.clone(),
        ]);
    }
    if text {
        if rows.is_empty() {
            writeln!(out, "no GPU kernels in this trace")?;
        } else {
            table.write_text(&mut out)?;
        }
    } else {
        table.write_csv(&mut out)?;
    }
    Ok(out.flush()?)
}
