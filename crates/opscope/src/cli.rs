//! The `opscope` command line: parses arguments into plain options and hands them to
//! one module per subcommand. Errors print as one line and give status 1.

use std::ffi::OsString;
use std::io::Write;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::{commands, output};

#[derive(Parser)]
#[command(
    name = "opscope",
    version,
    about = "Tracer and profiler for ML and dataflow programs",
    long_about = "opscope records ML programs with no change to their code (`opscope record -- \
                  python train.py`), reads the traces ML tools already write (PyTorch/Kineto \
                  and other Chrome trace JSON, TensorFlow timelines and XPlane, LTTng CTF, \
                  Nsight Systems SQLite, Perfetto) into one model, tells what is in them and \
                  where the time and memory go, and converts them for the viewers.\n\n\
                  TRACE is a file or a directory of them (e.g. one file per rank), searched \
                  recursively: Chrome trace JSON (.json, .json.gz: Kineto, TensorFlow \
                  timelines), Perfetto (.pftrace, .perfetto-trace), XPlane (.xplane.pb), \
                  TensorFlow RunMetadata (run_meta, with the graph.pbtxt beside it), Nsight \
                  Systems SQLite exports (.sqlite), or a CTF trace directory (LTTng: the \
                  directory holding its `metadata` file). An `opscope record` session \
                  directory is a TRACE too."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
    /// Keep long names and every column whole in text tables (by default they fit the
    /// terminal, or $COLUMNS, or 200 characters into a file or pipe: names shortened
    /// in the middle, columns that still do not fit left out and named).
    #[arg(long, global = true)]
    pub(crate) wide: bool,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    Convert(commands::convert::Args),
    Record(commands::record::Args),
    Agent(commands::agent::Args),
    Top(commands::top::Args),
    Dump(commands::dump::Args),
    Attach(commands::attach::Args),
    Env(commands::env::Args),
    Flame(commands::flame::Args),
    Diff(commands::diff::Args),
    Report(commands::report::Args),
    View(commands::view::Args),
    Sql(commands::sql::Args),
    Merge(commands::merge::Args),
}

/// tfprof's options are long names after one dash (`-order_by micros`): accept them as
/// if written with two.
pub(crate) fn tfprof_spelling(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    // Arguments after `--` belong to a recorded program: never rewrite them.
    let mut after_separator = false;
    let tfprof = commands::reports::tfprof_options();
    args.into_iter()
        .map(|arg| {
            if after_separator || arg == "--" {
                after_separator = true;
                return arg;
            }
            let text = arg.to_string_lossy();
            let name = text
                .strip_prefix('-')
                .filter(|rest| !rest.starts_with('-'))
                .map(|rest| rest.split('=').next().unwrap_or(rest));
            match name {
                Some(name) if tfprof.iter().any(|o| o == name) => format!("-{text}").into(),
                _ => arg,
            }
        })
        .collect()
}

/// Says that the process exits after its command, so the model a command read need not
/// be freed (the executable; not a Python process, which goes on).
pub fn models_die_with_the_process() {
    crate::load::models_die_with_the_process();
}

/// Runs the command line `args` (the program's name first) and gives the exit status:
/// the recorded program's for `record`, 1 for an error, 2 for a usage error.
pub fn run(args: impl IntoIterator<Item = OsString>) -> u8 {
    let parsed = match parse(args) {
        Ok(parsed) => parsed,
        Err(e) => {
            // Help and version go to stdout with status 0, usage errors to stderr.
            let _ = e.print();
            return e.exit_code().clamp(0, 255) as u8;
        }
    };
    output::set_wide(parsed.wide);
    let status = match parsed.run() {
        Ok(status) => status,
        Err(e) if output::is_broken_pipe(&e) => 0,
        Err(e) => {
            eprintln!("opscope: error: {e:#}");
            1
        }
    };
    // Run from a library (the Python module), nothing flushes Rust's stdout at exit.
    let _ = std::io::stdout().flush();
    status
}

/// The whole command line: this crate's commands and the engine's report commands.
pub(crate) fn command() -> clap::Command {
    commands::reports::add_to(Cli::command())
}

/// A parsed command line.
pub(crate) struct Parsed {
    wide: bool,
    chosen: Chosen,
}

enum Chosen {
    Report(&'static dyn opscope_engine::ReportCommand, clap::ArgMatches),
    Other(Command),
}

/// Parses `args` (the program's name first).
pub(crate) fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Parsed, clap::Error> {
    let matches = command().try_get_matches_from(tfprof_spelling(args))?;
    let wide = matches.get_flag("wide");
    let chosen = match commands::reports::chosen(&matches) {
        Some((report, sub)) => Chosen::Report(report, sub.clone()),
        None => Chosen::Other(Cli::from_arg_matches(&matches)?.command),
    };
    Ok(Parsed { wide, chosen })
}

impl Parsed {
    /// Runs the command; its exit status, where it has one of its own.
    pub(crate) fn run(self) -> anyhow::Result<u8> {
        match self.chosen {
            Chosen::Report(report, matches) => {
                commands::reports::run(report, &matches)?;
                Ok(0)
            }
            Chosen::Other(command) => run_command(command),
        }
    }
}

/// Runs one parsed command; its exit status, where it has one of its own.
pub(crate) fn run_command(command: Command) -> anyhow::Result<u8> {
    match command {
        Command::Convert(args) => commands::convert::run(args),
        Command::Agent(args) => commands::agent::run(args),
        Command::Top(args) => commands::top::run(args),
        Command::Dump(args) => commands::dump::run(args),
        Command::Attach(args) => commands::attach::run(args),
        Command::Env(args) => commands::env::run(args),
        Command::Flame(args) => commands::flame::run(args),
        Command::Diff(args) => commands::diff::run(args),
        Command::Report(args) => commands::report::run(args),
        Command::View(args) => commands::view::run(args),
        Command::Sql(args) => commands::sql::run(args),
        Command::Merge(args) => commands::merge::run(args),
        Command::Record(args) => return commands::record::run(args),
    }?;
    Ok(0)
}
