//! `opscope convert`: reads any supported trace and writes it as Perfetto protobuf (for
//! ui.perfetto.dev), Chrome trace JSON (chrome://tracing, TensorBoard, HTA), a CTF
//! trace directory (babeltrace2, Trace Compass) or a Parquet dataset (DuckDB, Spark).

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
    /// A CTF 1.8 trace: OUT is a directory (metadata and one stream file per track).
    Ctf,
    /// Collapsed stacks (`a;b;c NS` lines) for any flame-graph tool: ops under the ops
    /// they sit in, by self time, and kernels under their launching ops, by device time.
    Folded,
    /// speedscope's JSON (.speedscope.json): each thread and stream as a timeline.
    Speedscope,
    /// A Parquet dataset, partitioned by host and rank (`host=H/rank=R/slices.parquet`,
    /// …), for DuckDB, Spark, Polars and pandas. OUT is a new directory, or a dataset
    /// other conversions (of other ranks) write into.
    Parquet,
}

#[derive(clap::Args)]
#[command(
    about = "Convert a trace to Perfetto protobuf, Chrome trace JSON, CTF, a Parquet dataset, collapsed stacks or speedscope",
    after_help = "The output format comes from --to, or else from OUT's extension \
                  (.pftrace/.perfetto-trace → perfetto, .json/.json.gz → json, .ctf → ctf, \
                  .parquet → parquet, .folded → folded, .speedscope.json → speedscope).\n\n\
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
    #[arg(long, value_enum)]
    to: Option<Target>,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
    /// Parse the inputs even when the model cache holds them, and do not save them there.
    #[arg(long)]
    no_cache: bool,
    /// Replace OUT when it exists (never when it is one of the inputs; a directory only
    /// when it holds a CTF trace and nothing else, for CTF output).
    #[arg(long, short)]
    force: bool,
}

impl Target {
    /// As `--to` spells it.
    fn name(self) -> String {
        self.to_possible_value()
            .map_or_else(|| format!("{self:?}"), |v| v.get_name().to_string())
    }
}

fn target_from_extension(path: &Path) -> Option<Target> {
    let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
    if name.ends_with(".speedscope.json") {
        Some(Target::Speedscope)
    } else if name.ends_with(".folded") || name.ends_with(".folded.gz") {
        Some(Target::Folded)
    } else if name.ends_with(".json") || name.ends_with(".json.gz") {
        Some(Target::Json)
    } else if name.ends_with(".ctf") {
        Some(Target::Ctf)
    } else if name.ends_with(".parquet") {
        Some(Target::Parquet)
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
    run_with(args, |_| Ok(false))
}

/// Converts as [`run`] does, with `adjust` run on the model between loading (each host
/// still on its own clock) and writing; unless it says it put the clocks together
/// (`true`), the hosts are then put on one clock as every command does.
pub fn run_with(
    args: Args,
    adjust: impl FnOnce(&mut opscope_model::Trace) -> Result<bool>,
) -> Result<()> {
    let named = target_from_extension(&args.output);
    let Some(target) = args.to.or(named) else {
        bail!(
            "{}: cannot tell the output format from the extension; pass --to perfetto, json, ctf, parquet, folded or speedscope",
            args.output.display()
        );
    };
    // speedscope's files are JSON and often named so.
    let agrees = |n: Target| n == target || (n, target) == (Target::Json, Target::Speedscope);
    if let Some(named) = named.filter(|&n| !agrees(n)) {
        // Other tools choose their reader by the extension, as opscope does.
        bail!(
            "{}: the name says {} but --to says {}; name the output for what it holds (or leave --to out)",
            args.output.display(),
            named.name(),
            target.name()
        );
    }
    let inputs = load::expand(&args.inputs)?;
    check_output(&args.output, &inputs, target, args.force)?;
    let options = LoadOptions {
        quiet: args.quiet,
        cache: !args.no_cache,
    };
    let mut trace = load::load_model(&inputs, &options)?;
    if !adjust(&mut trace)? {
        load::merge_hosts(&mut trace);
    }
    let shown = args.output.display().to_string();
    if target == Target::Ctf {
        write_ctf(&trace, &args.output, args.force)?;
        eprintln!(
            "wrote {shown}/: {} slices (a begin and an end event each), {} instants, {} counter samples",
            trace.slices.len(),
            trace.instants.len(),
            trace.counters.len()
        );
        return Ok(());
    }
    if target == Target::Parquet {
        return write_parquet(&trace, &args.output, args.force);
    }
    // Write next to the destination and rename at the end, so a failed conversion never
    // leaves a half-written file under the requested name.
    let partial = partial_path(&args.output);
    let file = File::options()
        .write(true)
        .create_new(true)
        .open(&partial)
        .with_context(|| format!("{shown}: cannot create"))?;
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
    if let Err(e) = std::fs::rename(&partial, &args.output) {
        let _ = std::fs::remove_file(&partial);
        return Err(e).with_context(|| format!("{shown}: cannot rename into place"));
    }
    eprintln!(
        "wrote {shown}: {} slices, {} instants, {} counter samples, {} flows",
        trace.slices.len(),
        trace.instants.len(),
        trace.counters.len(),
        trace.flows.len()
    );
    Ok(())
}

/// Refuses an output that is one of the files the inputs read (also through a link,
/// `..` or a hard link: compared by device and inode), a directory, or, unless
/// `force`, any file that exists; CTF output is always a new directory.
fn check_output(output: &Path, inputs: &[load::Found], target: Target, force: bool) -> Result<()> {
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
    match target {
        Target::Ctf if !force => bail!("{shown}: already exists; pass --force to replace it"),
        Target::Ctf if !is_ctf_trace(output) => bail!(
            "{shown}: already exists and is not a CTF trace directory (a `metadata` file and \
             its stream files, nothing else): it is not replaced, even with --force"
        ),
        Target::Ctf => return Ok(()),
        // A dataset other conversions write into: the writer checks its partitions.
        Target::Parquet if out.is_dir() => return Ok(()),
        Target::Parquet => bail!("{shown}: already exists and is not a directory"),
        _ => {}
    }
    if out.is_dir() {
        bail!("{shown}: already exists and is a directory");
    }
    if !force {
        bail!("{shown}: already exists; pass --force to replace it");
    }
    Ok(())
}

/// A new name beside `output` to write into before renaming: hidden, and this
/// process's own, so that neither a file of the user's nor another conversion's is
/// touched.
fn partial_path(output: &Path) -> PathBuf {
    let name = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    output.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

fn write_trace(trace: &opscope_model::Trace, target: Target, out: &mut impl Write) -> Result<()> {
    match target {
        Target::Perfetto => opscope_formats::perfetto::export(trace, out)?,
        Target::Json => opscope_formats::chrome::export(trace, out)?,
        Target::Ctf | Target::Parquet => {
            unreachable!("a directory, written by write_ctf or write_parquet")
        }
        Target::Folded => {
            let cx = opscope_analysis::Context::new(trace);
            let options = opscope_analysis::flame::FlameOptions { device: true };
            for (stack, ns) in opscope_analysis::flame::folded(&cx, options) {
                writeln!(out, "{stack} {ns}")?;
            }
        }
        Target::Speedscope => opscope_formats::speedscope::export(trace, "opscope", out)?,
    }
    Ok(())
}

/// Whether `dir` is a directory holding a CTF trace and nothing else: a `metadata` file
/// that says so, and plain files beside it. Only such a directory is replaced.
fn is_ctf_trace(dir: &Path) -> bool {
    let metadata = std::fs::read(dir.join("metadata")).unwrap_or_default();
    // TSDL text starts with its version comment; packetised metadata with its magic.
    let ctf =
        metadata.starts_with(b"/* CTF") || metadata.starts_with(&0x75D1_1D57u32.to_le_bytes());
    let only_files = std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .into_iter()
            .all(|e| e.and_then(|e| e.file_type()).is_ok_and(|t| t.is_file()))
    });
    ctf && only_files
}

/// Writes a CTF trace directory: into a partial directory beside it first (see
/// [`partial_path`]), renamed into place at the end, so a failure never leaves half a
/// trace under the requested name. [`check_output`] refused an existing `dir` unless
/// `force` and it is a CTF trace: that one is moved aside once the new one is whole,
/// and removed once the new one is in its place.
fn write_ctf(trace: &opscope_model::Trace, dir: &Path, force: bool) -> Result<()> {
    let old = (force && dir.exists()).then(|| {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        dir.with_file_name(format!(".{name}.replaced-{}", std::process::id()))
    });
    write_dir(dir, |partial| {
        opscope_formats::ctf::export::export(trace, &mut |name, bytes| {
            std::fs::write(partial.join(name), bytes)
        })?;
        if let Some(old) = &old {
            std::fs::rename(dir, old)
                .with_context(|| format!("{}: cannot move the old trace aside", dir.display()))?;
        }
        Ok(())
    })
    .inspect_err(|_| {
        // The new trace did not take its place: the old one goes back.
        if let Some(old) = &old {
            let _ = std::fs::rename(old, dir);
        }
    })?;
    if let Some(old) = &old {
        std::fs::remove_dir_all(old)
            .with_context(|| format!("{}: cannot remove the replaced trace", old.display()))?;
    }
    Ok(())
}

#[cfg(feature = "parquet")]
fn write_parquet(trace: &opscope_model::Trace, dir: &Path, force: bool) -> Result<()> {
    let version = env!("CARGO_PKG_VERSION");
    let written = opscope_formats::parquet::export_dataset(trace, dir, version, force)?;
    let rows: Vec<String> = written
        .rows
        .iter()
        .map(|(t, n)| format!("{n} {t}"))
        .collect();
    eprintln!(
        "wrote {}/: {} partitions, {} files, {:.1} MiB: {}",
        dir.display(),
        written.partitions,
        written.files,
        written.bytes as f64 / (1 << 20) as f64,
        rows.join(", ")
    );
    Ok(())
}

#[cfg(not(feature = "parquet"))]
fn write_parquet(_: &opscope_model::Trace, _: &Path, _: bool) -> Result<()> {
    bail!("this opscope was built without Parquet (cargo feature `parquet`)")
}

/// Writes a directory output into a new directory beside `dir`, renamed into place when
/// `fill` succeeds and removed when it fails.
fn write_dir(dir: &Path, fill: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let shown = dir.display().to_string();
    let partial = partial_path(dir);
    if let Some(parent) = partial.parent().filter(|p| !p.as_os_str().is_empty()) {
        if parent.exists() && !parent.is_dir() {
            bail!(
                "{shown}: cannot create: {} is not a directory",
                parent.display()
            );
        }
        std::fs::create_dir_all(parent).with_context(|| format!("{shown}: cannot create"))?;
    }
    std::fs::create_dir(&partial).with_context(|| format!("{shown}: cannot create"))?;
    if let Err(e) = fill(&partial) {
        let _ = std::fs::remove_dir_all(&partial);
        return Err(e.context(format!("{shown}: writing failed")));
    }
    std::fs::rename(&partial, dir).with_context(|| format!("{shown}: cannot rename into place"))
}
