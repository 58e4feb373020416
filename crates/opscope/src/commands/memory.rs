//! `opscope memory`: per device and allocator, bytes in use over time — the peak, what
//! was live at it, the ops that allocate most, and growth from step to step.

use std::io::Write;

use anyhow::Result;
use opscope_analysis::memory::{self, AllocatorReport, MemoryOptions};

use crate::load;
use crate::output::{self, duration_text, Table, TextOrJson};

#[derive(clap::Args)]
#[command(
    about = "Memory per device and allocator: peak, what was live at it, top allocating ops, growth per step",
    after_help = "Reads PyTorch's [memory] events (profile_memory=True) and TensorFlow \
                  timelines' allocator counters; without them, the resident memory \
                  `opscope record` sampled per process.\n\nExamples:\n  opscope memory trace.json.gz\n  opscope memory --top 20 --format json trace.json"
)]
pub struct Args {
    #[command(flatten)]
    inputs: load::Inputs,
    /// Rows in the top-ops and live-at-peak lists.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: TextOrJson,
}

pub fn run(args: Args) -> Result<()> {
    let trace = args.inputs.load()?;
    let reports = memory::memory(
        &opscope_analysis::Context::new(&trace),
        &MemoryOptions { top: args.top },
    );
    output::print_report(args.format, &reports, |v, out| {
        print_text(v, trace.time_span().map_or(0, |s| s.0), out)
    })
}

/// `1.5 GiB`.
fn bytes_text(bytes: i64) -> String {
    let abs = bytes.unsigned_abs() as f64;
    let sign = if bytes < 0 { "-" } else { "" };
    for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if abs >= size as f64 {
            return format!("{sign}{:.2} {unit}", abs / size as f64);
        }
    }
    format!("{bytes} B")
}

fn print_text(
    reports: &[AllocatorReport],
    origin: i64,
    out: &mut (impl Write + ?Sized),
) -> std::io::Result<()> {
    if reports.is_empty() {
        return writeln!(
            out,
            "no memory data: no allocator events (PyTorch's profile_memory=True), allocator counters (TensorFlow timelines) or sampled resident memory (opscope record)"
        );
    }
    for r in reports {
        let who = r.rank.map_or_else(String::new, |k| format!("rank {k}, "));
        writeln!(
            out,
            "== {}{} ({} {})",
            who,
            r.allocator,
            r.events,
            match r.data {
                "events" => "allocation events",
                "resident" => "samples of resident memory",
                _ => "counter samples",
            }
        )?;
        if r.data == "resident" {
            print_resident(r, origin, out)?;
            continue;
        }
        write!(
            out,
            "peak in use {} at {}",
            bytes_text(r.peak_in_use),
            duration_text((r.peak_at_ns - origin) as f64)
        )?;
        if let Some(reserved) = r.peak_reserved {
            write!(out, ", peak reserved {}", bytes_text(reserved))?;
        }
        writeln!(out, "; at the end {}", bytes_text(r.final_in_use))?;
        if r.data == "events" {
            writeln!(
                out,
                "allocated {}, freed {}{}",
                bytes_text(r.allocated_bytes),
                bytes_text(r.freed_bytes),
                if r.from_allocator_totals {
                    ""
                } else {
                    " (in use counted from zero at the first event: blocks allocated before the trace are not seen)"
                }
            )?;
        }
        if !r.top_ops.is_empty() {
            writeln!(out)?;
            let mut table =
                Table::new(&[("op", false), ("allocated", true), ("allocations", true)]);
            for o in &r.top_ops {
                table.rows.push(vec![
                    o.op.clone(),
                    bytes_text(o.bytes),
                    o.allocations.to_string(),
                ]);
            }
            table.write_text(out)?;
        }
        if !r.live_at_peak.is_empty() {
            writeln!(out, "\nlargest blocks live at the peak:")?;
            let mut table =
                Table::new(&[("bytes", true), ("allocated at", true), ("by op", false)]);
            for b in &r.live_at_peak {
                table.rows.push(vec![
                    bytes_text(b.bytes),
                    duration_text((b.allocated_at_ns - origin) as f64),
                    b.op.clone().unwrap_or_else(|| "-".into()),
                ]);
            }
            table.write_text(out)?;
        }
        print_steps(r, out)?;
        writeln!(out)?;
    }
    Ok(())
}

/// A process's resident memory: peak, growth from the first sample to the last, per
/// part of the run, and per step.
fn print_resident(
    r: &AllocatorReport,
    origin: i64,
    out: &mut (impl Write + ?Sized),
) -> std::io::Result<()> {
    let first = r.first_in_use.unwrap_or(0);
    writeln!(
        out,
        "peak resident {} at {}; first sample {}, last {} (growth {})",
        bytes_text(r.peak_in_use),
        duration_text((r.peak_at_ns - origin) as f64),
        bytes_text(first),
        bytes_text(r.final_in_use),
        bytes_text(r.final_in_use - first)
    )?;
    if r.over_time.len() > 1 {
        writeln!(out)?;
        let mut table = Table::new(&[
            ("from", true),
            ("to", true),
            ("peak resident", true),
            ("at end", true),
        ]);
        for p in &r.over_time {
            table.rows.push(vec![
                duration_text((p.from_ns - origin) as f64),
                duration_text((p.to_ns - origin) as f64),
                bytes_text(p.peak),
                bytes_text(p.at_end),
            ]);
        }
        table.write_text(out)?;
    }
    print_steps(r, out)?;
    writeln!(out)
}

fn print_steps(r: &AllocatorReport, out: &mut (impl Write + ?Sized)) -> std::io::Result<()> {
    if r.steps.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    let mut table = Table::new(&[
        ("step", false),
        ("in use at start", true),
        ("at end", true),
        ("growth", true),
    ]);
    for s in &r.steps {
        table.rows.push(vec![
            s.step.clone(),
            bytes_text(s.in_use_at_start),
            bytes_text(s.in_use_at_end),
            bytes_text(s.growth),
        ]);
    }
    table.write_text(out)
}
