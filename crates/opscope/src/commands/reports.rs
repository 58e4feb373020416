//! The report commands of the engine's table on the command line: each gets its
//! options, the traces (or `--live JOB`), `--format` and, where it takes them, tfprof's
//! `-output` destinations; this module names none of them.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{ArgMatches, Args, FromArgMatches};
use opscope_engine::render::Format;
use opscope_engine::reports::Formats;
use opscope_engine::{ReportCommand, REPORTS};

use crate::load;
use crate::output::{self, OutputFormat, TextOrJson};

/// `cli` with every report command of the table added, each under its group
/// (`stats kernel` under `stats`).
pub fn add_to(mut cli: clap::Command) -> clap::Command {
    for command in REPORTS {
        let sub = command_line(*command);
        match command.name().split_once(' ') {
            Some((group, _)) => {
                if cli.find_subcommand(group).is_none() {
                    let about = opscope_engine::reports::GROUPS
                        .iter()
                        .find(|(name, _)| *name == group)
                        .map_or("", |(_, about)| about);
                    cli = cli.subcommand(
                        clap::Command::new(group)
                            .about(about)
                            .subcommand_required(true)
                            .arg_required_else_help(true)
                            .display_order(0),
                    );
                }
                cli = cli.mut_subcommand(group, |g| g.subcommand(sub));
            }
            None => cli = cli.subcommand(sub),
        }
    }
    cli
}

/// tfprof's long options, which the command line accepts written with one dash
/// (`-order_by`): every option of the commands that take tfprof's `-output`.
pub fn tfprof_options() -> Vec<String> {
    let mut names: Vec<String> = REPORTS
        .iter()
        .filter(|r| r.tfprof_output())
        .flat_map(|r| {
            r.command()
                .get_arguments()
                .filter_map(|a| a.get_long().map(String::from))
                .collect::<Vec<_>>()
        })
        .chain(std::iter::once("output".to_string()))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The report command `matches` chose, and its own matches, if it chose one.
pub fn chosen(matches: &ArgMatches) -> Option<(&'static dyn ReportCommand, &ArgMatches)> {
    let (first, sub) = matches.subcommand()?;
    if let Some(command) = opscope_engine::find(first) {
        return Some((command, sub));
    }
    let (second, leaf) = sub.subcommand()?;
    opscope_engine::find(&format!("{first} {second}")).map(|command| (command, leaf))
}

/// One report command's flags: its options, the traces, `--format`, `-output`.
fn command_line(command: &dyn ReportCommand) -> clap::Command {
    let own = command.command();
    // Flattened arguments bring their struct's doc comment as the command's: the
    // command's own description is put back after.
    let (about, long_about, after_help) = (
        own.get_about().cloned(),
        own.get_long_about().cloned(),
        own.get_after_help().cloned(),
    );
    let cli = load::Inputs::augment_args(own)
        // Before the commands that record, convert or serve.
        .display_order(0);
    let cli = match command.formats() {
        Formats::TextJson => TextOrJsonArg::augment_args(cli),
        Formats::TextJsonCsv => FormatArg::augment_args(cli),
    };
    let cli = if command.tfprof_output() {
        DestinationArg::augment_args(cli)
    } else {
        cli
    };
    let mut cli = cli;
    if let Some(about) = about {
        cli = cli.about(about);
    }
    if let Some(long_about) = long_about {
        cli = cli.long_about(long_about);
    }
    if let Some(after_help) = after_help {
        cli = cli.after_help(after_help);
    }
    cli
}

#[derive(clap::Args)]
struct FormatArg {
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: OutputFormat,
}

#[derive(clap::Args)]
struct TextOrJsonArg {
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: TextOrJson,
}

#[derive(clap::Args)]
struct DestinationArg {
    /// Where to write: stdout, file:outfile=F (text), csv:outfile=F, json:outfile=F, or
    /// timeline:outfile=F (the ops shown and their device work, as a Chrome trace).
    #[arg(long = "output", default_value = "stdout")]
    output: String,
}

/// Runs `command` as its `matches` say, and prints or writes what it reports.
pub fn run(command: &dyn ReportCommand, matches: &ArgMatches) -> Result<()> {
    let format: Format = match command.formats() {
        Formats::TextJson => TextOrJsonArg::from_arg_matches(matches)?.format.into(),
        Formats::TextJsonCsv => FormatArg::from_arg_matches(matches)?.format.into(),
    };
    let destination = if command.tfprof_output() {
        destination(&DestinationArg::from_arg_matches(matches)?.output, format)?
    } else {
        Destination::Stdout(format)
    };
    command.check_matches(matches)?;
    let inputs = load::Inputs::from_arg_matches(matches)?;
    let trace = inputs.load()?;
    let cx = opscope_analysis::Context::new(&trace);
    let result = command.run_matches(&cx, matches)?;
    let (path, what) = match &destination {
        Destination::Stdout(format) => {
            return output::print(*format, &*result);
        }
        Destination::File(format, path) => {
            let what = format!(
                "{} rows",
                result.blocks().csv_table().map_or(0, |t| t.rows.len())
            );
            output::write_to(Some(path), |out| {
                Ok(opscope_engine::render::render(
                    &*result, *format, None, out,
                )?)
            })?;
            (path, what)
        }
        Destination::Timeline(path) => {
            let keep = command
                .timeline(&cx, &*result)
                .context("-output timeline: this command has no ops to show")?;
            output::write_to(Some(path), |out: &mut dyn Write| {
                opscope_formats::chrome::export_selected(&trace, &keep, &mut &mut *out)?;
                Ok(())
            })?;
            let rows = result.blocks().csv_table().map_or(0, |t| t.rows.len());
            (path, format!("{rows} rows"))
        }
    };
    eprintln!("wrote {what} to {}", path.display());
    Ok(())
}

/// Where `-output` (or `--format` on stdout) sends a report.
pub enum Destination {
    Stdout(Format),
    File(Format, PathBuf),
    /// The ops shown and their device work, as a Chrome trace.
    Timeline(PathBuf),
}

/// tfprof's `-output` spec, or for `stdout` the `--format` every command takes.
pub fn destination(spec: &str, format: Format) -> Result<Destination> {
    if spec == "stdout" {
        return Ok(Destination::Stdout(format));
    }
    if format != Format::Text {
        bail!("give either --format or -output {spec}, not both");
    }
    let (kind, options) = spec.split_once(':').unwrap_or((spec, ""));
    let file = options
        .split(',')
        .find_map(|o| o.strip_prefix("outfile="))
        .map(PathBuf::from);
    let need = || {
        file.clone()
            .with_context(|| format!("-output {spec}: give outfile=FILE"))
    };
    Ok(match kind {
        "file" => Destination::File(Format::Text, need()?),
        "csv" => Destination::File(Format::Csv, need()?),
        "json" => Destination::File(Format::Json, need()?),
        "timeline" => Destination::Timeline(need()?),
        "pprof" => bail!("-output pprof is not supported (use stdout, file, csv, json or timeline)"),
        _ => bail!(
            "-output {spec}: expected stdout, file:outfile=F, csv:outfile=F, json:outfile=F or timeline:outfile=F"
        ),
    })
}
