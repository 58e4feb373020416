//! `opscope convert`: reads any supported trace and writes it as Perfetto protobuf (for
//! ui.perfetto.dev) or Chrome trace JSON (chrome://tracing, TensorBoard, HTA).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use flate2::write::GzEncoder;
use flate2::Compression;

use crate::load::{self, LoadOptions};

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Target {
    /// Perfetto protobuf (.pftrace): the main viewer format.
    Perfetto,
    /// Chrome trace JSON (.json, or .json.gz to compress).
    Json,
}

#[derive(clap::Args)]
#[command(
    about = "Convert a trace to Perfetto protobuf or Chrome trace JSON",
    after_help = "The output format comes from --to, or else from OUT's extension \
                  (.pftrace/.perfetto-trace → perfetto, .json/.json.gz → json).\n\n\
                  Examples:\n  opscope convert rank0.json.gz -o rank0.pftrace\n  \
                  opscope convert ranks/ -o all.json --to json"
)]
pub struct Args {
    /// Trace files or directories to read.
    #[arg(required = true, value_name = "TRACE")]
    inputs: Vec<PathBuf>,
    /// Where to write.
    #[arg(short, long, value_name = "OUT")]
    output: PathBuf,
    /// Output format (default: from OUT's extension).
    #[arg(long, value_enum)]
    to: Option<Target>,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

fn target_from_extension(path: &Path) -> Option<Target> {
    let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
    if name.ends_with(".json") || name.ends_with(".json.gz") {
        Some(Target::Json)
    } else if name.ends_with(".pftrace")
        || name.ends_with(".perfetto-trace")
        || name.ends_with(".pb")
    {
        Some(Target::Perfetto)
    } else {
        None
    }
}

pub fn run(args: Args) -> Result<()> {
    let Some(target) = args.to.or_else(|| target_from_extension(&args.output)) else {
        bail!(
            "{}: cannot tell the output format from the extension; pass --to perfetto or --to json",
            args.output.display()
        );
    };
    let trace = load::load(&args.inputs, &LoadOptions { quiet: args.quiet })?;
    let shown = args.output.display().to_string();
    // Write next to the destination and rename at the end, so a failed conversion never
    // leaves a half-written file under the requested name.
    let partial = args.output.with_extension("partial");
    let file = File::create(&partial).with_context(|| format!("{shown}: cannot create"))?;
    let gzip = shown.to_ascii_lowercase().ends_with(".gz");
    let written = (|| -> Result<()> {
        let buffered = BufWriter::with_capacity(1 << 20, file);
        if gzip {
            let mut encoder = GzEncoder::new(buffered, Compression::default());
            write_trace(&trace, target, &mut encoder)?;
            encoder.finish()?.flush()?;
        } else {
            let mut out = buffered;
            write_trace(&trace, target, &mut out)?;
            out.flush()?;
        }
        Ok(())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&partial);
        return Err(e.context(format!("{shown}: writing failed")));
    }
    std::fs::rename(&partial, &args.output)
        .with_context(|| format!("{shown}: cannot rename into place"))?;
    eprintln!(
        "wrote {shown}: {} slices, {} instants, {} counter samples, {} flows",
        trace.slices.len(),
        trace.instants.len(),
        trace.counters.len(),
        trace.flows.len()
    );
    Ok(())
}

fn write_trace(trace: &opscope_model::Trace, target: Target, out: &mut impl Write) -> Result<()> {
    match target {
        Target::Perfetto => opscope_formats::perfetto::export(trace, out)?,
        Target::Json => opscope_formats::chrome::export(trace, out)?,
    }
    Ok(())
}
