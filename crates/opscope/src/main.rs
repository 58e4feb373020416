//! The `opscope` command line: parses arguments into plain options and hands them to
//! one module per subcommand. Errors print as one line and exit with status 1.

mod commands;
mod load;
mod output;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "opscope",
    version,
    about = "Tracer and profiler for ML and dataflow programs",
    long_about = "opscope reads the traces ML tools already write (PyTorch/Kineto and other Chrome \
                  trace JSON, TensorFlow timelines, Perfetto) into one model, tells what is in \
                  them, and converts them for the viewers.\n\n\
                  TRACE is a file (.json, .json.gz, .pftrace) or a directory of them, e.g. one \
                  file per rank."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Info(commands::info::Args),
    Convert(commands::convert::Args),
    Stats(commands::stats::Args),
    Gpu(commands::gpu::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info(args) => commands::info::run(args),
        Command::Convert(args) => commands::convert::run(args),
        Command::Stats(args) => commands::stats::run(args),
        Command::Gpu(args) => commands::gpu::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if output::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("opscope: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
