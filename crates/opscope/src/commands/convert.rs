//! `opscope convert`: reads any supported trace and writes it in any format of the
//! exporters' table (`crate::exporters`): Perfetto protobuf, Chrome trace JSON, CTF, a
//! Parquet dataset, collapsed stacks, speedscope, a flame graph SVG.

use std::path::PathBuf;

use anyhow::{bail, Result};

use crate::exporters::{self, ExportOptions, Writes};
use opscope_engine::load::{self, LoadOptions};
use opscope_engine::passes;

/// `--to`'s values, with what each writes, from the exporters' table.
fn formats() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        exporters::EXPORTERS
            .iter()
            .map(|e| clap::builder::PossibleValue::new(e.name).help(e.about)),
    )
}

#[derive(clap::Args)]
#[command(
    about = "Convert a trace to Perfetto protobuf, Chrome trace JSON, CTF, a Parquet dataset, collapsed stacks, speedscope or a flame graph SVG",
    after_help = "The output format comes from --to, or else from OUT's extension \
                  (.pftrace/.perfetto-trace → perfetto, .json/.json.gz → json, .ctf → ctf, \
                  .parquet → parquet, .folded → folded, .speedscope.json → speedscope, .svg → svg).\n\n\
                  Examples:\n  opscope convert rank0.json.gz -o rank0.pftrace\n  \
                  opscope convert ranks/ -o all.json --to json\n  \
                  opscope convert run_meta -o run.ctf --to ctf     # then: babeltrace2 run.ctf\n  \
                  opscope convert ranks/ -o job.parquet            # then: duckdb -c \"select count(*) from 'job.parquet/*/*/slices.parquet'\"\n  \
                  opscope convert trace.json.gz -o ops.folded       # then: flamegraph.pl ops.folded > ops.svg\n  \
                  opscope convert trace.json.gz -o ops.speedscope.json   # then open it in speedscope"
)]
pub struct Args {
    /// Trace files or directories to read.
    #[arg(required = true, value_name = "TRACE")]
    inputs: Vec<PathBuf>,
    /// Where to write.
    #[arg(short, long, value_name = "OUT")]
    output: PathBuf,
    /// Output format (default: from OUT's extension).
    #[arg(long, value_parser = formats())]
    to: Option<String>,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
    /// Parse the inputs even when the model cache holds them, and do not save them there.
    #[arg(long)]
    no_cache: bool,
    /// When a file named here cannot be read to its end (cut off while it was written,
    /// damaged), convert what was read before the error, with a warning, instead of
    /// stopping.
    #[arg(long)]
    partial: bool,
    /// Replace OUT when it exists (never when it is one of the inputs; a directory only
    /// when it holds a CTF trace and nothing else, for CTF output).
    #[arg(long, short)]
    force: bool,
    /// Collapsed stacks and flame graphs of sampled stacks count idle threads' samples
    /// too (wall time); by default only those of threads that ran (CPU time).
    #[arg(long)]
    wall: bool,
}

pub fn run(args: Args) -> Result<()> {
    run_with(args, |_| Ok(false))
}

/// Converts as [`run`] does, with `adjust` run on the model between loading (each host
/// still on its own clock) and writing; unless it says it put the clocks together
/// (`true`), the hosts are then put on one clock as every command does.
pub fn run_with(
    args: Args,
    adjust: impl FnOnce(&mut opscope_model::Trace) -> Result<bool>,
) -> Result<()> {
    let target = exporters::choose(&args.output, args.to.as_deref())?;
    let export = ExportOptions {
        force: args.force,
        wall: args.wall,
        ..ExportOptions::default()
    };
    let inputs = load::expand(&args.inputs)?;
    refuse_an_input(&args.output, &inputs)?;
    target.check(&args.output, &export)?;
    let options = LoadOptions {
        quiet: args.quiet,
        cache: !args.no_cache,
        partial: args.partial,
    };
    let mut trace = load::load_model(&inputs, &options)?;
    if !adjust(&mut trace)? {
        passes::merge_hosts(&mut trace);
    }
    let said = target.write(&trace, &args.output, &export)?;
    let slash = if matches!(target.writes, Writes::Directory { .. }) {
        "/"
    } else {
        ""
    };
    eprintln!("wrote {}{slash}: {said}", args.output.display());
    Ok(())
}

/// Refuses an output that is one of the files the inputs read (also through a link,
/// `..` or a hard link: compared by device and inode); what else may be replaced is
/// each exporter's to say.
fn refuse_an_input(output: &std::path::Path, inputs: &[load::Found]) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let shown = output.display();
    let Ok(out) = std::fs::metadata(output) else {
        return Ok(());
    };
    for input in inputs.iter().filter(|f| f.how != load::How::Stream) {
        let mut read = load::files_read(&input.path);
        read.push(input.path.clone());
        for file in read {
            let same = std::fs::metadata(&file)
                .is_ok_and(|m| (m.dev(), m.ino()) == (out.dev(), out.ino()));
            if same {
                let alias = if file == output {
                    String::new()
                } else {
                    format!(" (the same file as {})", file.display())
                };
                bail!("{shown}: is an input of this conversion{alias}; write the output elsewhere");
            }
        }
    }
    Ok(())
}
