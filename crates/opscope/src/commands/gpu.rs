//! `opscope gpu`: per rank, device and stream — busy and idle time, computation,
//! communication and memory work and their overlap, why streams sat idle, launch
//! latency, queue depth and copy bandwidth.

use std::io::Write;

use anyhow::{Context, Result};
use opscope_analysis::gpu::{self, GpuOptions, GpuReport};
use opscope_analysis::window::Window;

use crate::load;
use crate::output::{self, duration_text, Table, TextOrJson};

#[derive(clap::Args)]
#[command(
    about = "Where GPU time goes: busy/idle, compute/communication/memory, idle causes per stream",
    long_about = "Where GPU time goes, per rank, device and stream.\n\n\
        Temporal breakdown: over the span from the first to the last device work, the time \
        no stream runs anything (idle), the time some computation runs, and other busy time \
        (communication or memory only). Combinations: exclusive time of each mix of \
        computation, communication and memory work. Communication kernels are recognised by \
        name (NCCL, RCCL, MSCCL, DeepEP, NVSHMEM, gloo, custom all-reduce kernels and \
        collective names).\n\n\
        Idle breakdown per stream (HTA's definitions): a gap before work whose launch came \
        after the stream went idle is host wait; a shorter gap than --kernel-wait-us is \
        kernel wait; the rest is other.",
    after_help = "Examples:\n  opscope gpu trace.json.gz\n  opscope gpu runs/ranks/ --format json\n  opscope gpu --exclude-last-step trace.json   # as HTA does by default"
)]
pub struct Args {
    #[command(flatten)]
    inputs: load::Inputs,
    /// Leave out the last profiler step (often cut short when profiling stops) and the
    /// work launched in it, as HTA does by default.
    #[arg(long)]
    exclude_last_step: bool,
    /// Gaps shorter than this (µs) between work launched in time are kernel wait.
    #[arg(long, default_value_t = 30.0, value_name = "US")]
    kernel_wait_us: f64,
    /// Also count kernels whose name matches this regex as communication (opscope knows
    /// NCCL, RCCL, MSCCL++, DeepEP, NVSHMEM, gloo and custom all-reduce kernels, and any
    /// kernel a collective op launched).
    #[arg(long, value_name = "REGEX")]
    comm_kernels: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: TextOrJson,
}

pub fn run(args: Args) -> Result<()> {
    let communication_kernels = args
        .comm_kernels
        .as_deref()
        .map(regex::Regex::new)
        .transpose()
        .context("--comm-kernels: not a valid regex")?;
    let trace = args.inputs.load()?;
    let options = GpuOptions {
        window: if args.exclude_last_step {
            Window::BeforeLastStep
        } else {
            Window::Whole
        },
        kernel_wait_threshold_ns: (args.kernel_wait_us * 1000.0).round() as i64,
        communication_kernels,
        ..GpuOptions::default()
    };
    let report = gpu::analyze(&opscope_analysis::Context::new(&trace), &options);
    output::print_report(args.format, &report, |v, out| print_text(v, out))
}

/// The deepest queue per bucket, `width` characters wide, scaled to the deepest of all.
fn sparkline(max: &[u32], width: usize) -> String {
    const BARS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let per = max.len().div_ceil(width.max(1)).max(1);
    let top = max.iter().copied().max().unwrap_or(0).max(1);
    max.chunks(per)
        .map(|c| {
            let m = c.iter().copied().max().unwrap_or(0);
            BARS[((m as usize * 8).div_ceil(top as usize)).min(8)]
        })
        .collect()
}

fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_string(), |v| format!("{v:.1}%"))
}

fn print_text(report: &GpuReport, out: &mut (impl Write + ?Sized)) -> std::io::Result<()> {
    if report.ranks.is_empty() {
        return writeln!(
            out,
            "no device work (kernels, copies, sets on GPU streams) in this trace"
        );
    }
    for rank in &report.ranks {
        let who = rank
            .rank
            .map_or_else(|| "rank ?".to_string(), |r| format!("rank {r}"));
        match &rank.device {
            Some(device) => writeln!(out, "== {who}, {device}: {}", rank.file)?,
            None => writeln!(out, "== {who}: {}", rank.file)?,
        }
        let t = &rank.temporal;
        writeln!(
            out,
            "span {}: idle {} ({:.1}%), computation {} ({:.1}%), other busy {} ({:.1}%)",
            duration_text(t.span_ns as f64),
            duration_text(t.idle_ns as f64),
            t.idle_pct,
            duration_text(t.compute_ns as f64),
            t.compute_pct,
            duration_text(t.non_compute_ns as f64),
            t.non_compute_pct
        )?;
        writeln!(
            out,
            "communication overlapped by computation: {}",
            pct(rank.communication_overlap_pct)
        )?;
        writeln!(out)?;
        let mut table = Table::new(&[("work running", false), ("time", true), ("share", true)]);
        for c in &rank.combinations {
            let names: Vec<&str> = c.classes.iter().map(|c| c.name()).collect();
            table.rows.push(vec![
                names.join(" + "),
                duration_text(c.time_ns as f64),
                format!("{:.1}%", c.pct),
            ]);
        }
        table.write_text(out)?;
        if !rank.transfers.is_empty() {
            writeln!(out)?;
            let mut table = Table::new(&[
                ("transfer", false),
                ("count", true),
                ("bytes", true),
                ("time", true),
                ("GB/s", true),
            ]);
            for r in &rank.transfers {
                table.rows.push(vec![
                    r.direction.clone(),
                    r.count.to_string(),
                    r.bytes.to_string(),
                    duration_text(r.time_ns as f64),
                    r.gb_per_s.map_or_else(|| "-".into(), |g| format!("{g:.2}")),
                ]);
            }
            table.write_text(out)?;
        }
        writeln!(out)?;
        let mut table = Table::new(&[
            ("device", false),
            ("stream", false),
            ("work", true),
            ("busy", true),
            ("host wait", true),
            ("kernel wait", true),
            ("other idle", true),
            ("launch p50", true),
            ("launch p99", true),
            ("queue max", true),
            ("queue mean", true),
            ("queue over time", false),
        ]);
        for s in &rank.streams {
            let idle = |c: &gpu::idle::IdleCategory| {
                format!(
                    "{} ({})",
                    duration_text(c.time_ns as f64),
                    pct(c.ratio.map(|r| r * 100.0))
                )
            };
            let latency = |f: fn(&opscope_analysis::distribution::Distribution) -> f64| {
                s.launches
                    .latency
                    .as_ref()
                    .map_or_else(|| "-".into(), |d| duration_text(f(d)))
            };
            table.rows.push(vec![
                s.device.clone(),
                s.stream.clone(),
                s.work.to_string(),
                duration_text(s.busy_ns as f64),
                idle(&s.idle.host_wait),
                idle(&s.idle.kernel_wait),
                idle(&s.idle.other),
                latency(|d| d.p50),
                latency(|d| d.p99),
                s.launches.max_queue_depth.to_string(),
                format!("{:.1}", s.launches.mean_queue_depth),
                s.launches
                    .queue_over_time
                    .as_ref()
                    .map_or_else(String::new, |q| sparkline(&q.max, 24)),
            ]);
        }
        table.write_text(out)?;
        writeln!(out)?;
    }
    if let Some(across) = &report.across {
        writeln!(out, "== across {} devices", across.compared)?;
        output::write_across(
            out,
            across,
            |metric| match metric {
                "busy_ns" => "busy",
                "compute_ns" => "computation",
                "non_compute_ns" => "other busy",
                "idle_ns" => "idle",
                "idle_pct" => "idle share",
                other => other,
            },
            |metric, v| {
                if metric == "idle_pct" {
                    format!("{v:.1}%")
                } else {
                    duration_text(v)
                }
            },
        )?;
        if let Some(st) = &across.straggler {
            writeln!(
                out,
                "straggler: {} computes {}, {:.1}% above the median {}",
                st.at,
                duration_text(st.value),
                st.above_median_pct,
                duration_text(st.median)
            )?;
        }
        writeln!(out)?;
    }
    if report.unattributed > 0 {
        writeln!(
            out,
            "{} pieces of device work have no known launch (no flow or correlation id)",
            report.unattributed
        )?;
    }
    Ok(())
}
