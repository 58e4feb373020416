//! `opscope steps`: per training step, its time and how the device spent it; steps come
//! from markers, or from the repeating op sequence when a trace has none.

use std::io::Write;

use anyhow::Result;
use opscope_analysis::distribution::Distribution;
use opscope_analysis::steps::{self, SourceSteps, StepOptions, StepSource, StepsReport};

use crate::load;
use crate::output::{self, duration_text, Table, TextOrJson};

#[derive(clap::Args)]
#[command(
    about = "Per-step time and its breakdown, from step markers or the repeating op sequence",
    after_help = "Steps are ProfilerStep#N ranges, else user ranges named like train_step_3; \
                  a trace with neither is cut where its sequence of top-level ops repeats.\n\n\
                  Examples:\n  opscope steps trace.json.gz\n  opscope steps --ignore-markers trace.json   # check the period search against the markers\n  opscope steps --format json runs/ranks/"
)]
pub struct Args {
    #[command(flatten)]
    inputs: load::Inputs,
    /// Find steps from the repeating op sequence even where markers exist.
    #[arg(long)]
    ignore_markers: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: TextOrJson,
}

pub fn run(args: Args) -> Result<()> {
    let trace = args.inputs.load()?;
    let report = steps::report(
        &opscope_analysis::Context::new(&trace),
        &StepOptions {
            ignore_markers: args.ignore_markers,
        },
    );
    output::print_report(args.format, &report, |v, out| print_text(v, out))
}

fn print_text(report: &StepsReport, out: &mut (impl Write + ?Sized)) -> std::io::Result<()> {
    let found: &[SourceSteps] = &report.sources;
    if found.is_empty() {
        return writeln!(
            out,
            "no steps: no step markers, and no repeating sequence of ops"
        );
    }
    for source in found {
        writeln!(out, "== {}: {}", source.role, source.file)?;
        match &source.found_by {
            StepSource::Markers => writeln!(out, "{} steps from step markers", source.steps.len())?,
            StepSource::Framework => writeln!(
                out,
                "{} steps from the framework's own step records",
                source.steps.len()
            )?,
            StepSource::Period { period, match_ratio } => writeln!(
                out,
                "no step markers: the top-level ops repeat every {period} ops ({:.0}% match), giving {} steps",
                match_ratio * 100.0,
                source.steps.len()
            )?,
            StepSource::None => {
                writeln!(out, "no step markers, and the ops do not repeat: no steps")?;
                continue;
            }
        }
        let durations: Vec<f64> = source.steps.iter().map(|s| s.dur_ns as f64).collect();
        if let Some(d) = Distribution::of(&durations) {
            writeln!(
                out,
                "step time: mean {}, median {}, min {}, max {}",
                duration_text(d.mean),
                duration_text(d.p50),
                duration_text(d.min),
                duration_text(d.max)
            )?;
        }
        let origin = source.steps.first().map_or(0, |s| s.start_ns);
        // A CPU-only run has no device to be idle: its steps would read "device idle
        // 100%", which misleads. Its table keeps the step times only.
        let device_work = source.steps.iter().any(|s| {
            s.kernels > 0 || s.device_busy_ns > 0 || s.communication_ns > 0 || s.memory_ns > 0
        });
        let mut columns = vec![("step", false), ("start", true), ("time", true)];
        if device_work {
            columns.extend([
                ("device busy", true),
                ("device idle", true),
                ("computation", true),
                ("communication", true),
                ("memory", true),
                ("kernels", true),
            ]);
        } else {
            writeln!(out, "no device work in these steps: times only")?;
        }
        let mut table = Table::new(&columns);
        for s in &source.steps {
            let share = |ns: i64| {
                format!(
                    "{} ({:.0}%)",
                    duration_text(ns as f64),
                    100.0 * ns as f64 / s.dur_ns.max(1) as f64
                )
            };
            let mut row = vec![
                s.name.clone(),
                duration_text((s.start_ns - origin) as f64),
                duration_text(s.dur_ns as f64),
            ];
            if device_work {
                row.extend([
                    share(s.device_busy_ns),
                    share(s.device_idle_ns),
                    duration_text(s.computation_ns as f64),
                    duration_text(s.communication_ns as f64),
                    duration_text(s.memory_ns as f64),
                    s.kernels.to_string(),
                ]);
            }
            table.rows.push(row);
        }
        table.write_text(out)?;
        writeln!(out)?;
    }
    if let Some(across) = &report.across {
        writeln!(
            out,
            "== across {} ranks (medians per step)",
            across.compared
        )?;
        output::write_across(
            out,
            across,
            |metric| match metric {
                "median_step_ns" => "step time",
                "median_computation_ns" => "computation",
                "median_communication_ns" => "communication",
                "median_device_idle_ns" => "device idle",
                other => other,
            },
            |_, v| duration_text(v),
        )?;
        if let Some(st) = &across.straggler {
            writeln!(
                out,
                "straggler: {} computes {} per step, {:.1}% above the median {}",
                st.at,
                duration_text(st.value),
                st.above_median_pct,
                duration_text(st.median)
            )?;
        }
    }
    Ok(())
}
