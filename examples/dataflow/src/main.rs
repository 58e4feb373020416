//! `dataflow`: the example program that `opscope record` traces. It trains a small MLP
//! as a dataflow graph on worker threads, annotated through the official ITT and NVTX
//! emitter libraries, and prints its own account of the annotations it made.

mod cli;
mod exec;
mod graph;
mod ops;
mod report;

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let options = match cli::parse(std::env::args().skip(1)) {
        Ok(cli::Command::Run(options)) => options,
        Ok(cli::Command::Help) => {
            print!("{}", cli::HELP);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("dataflow: {e}\n\n{}", cli::HELP);
            return ExitCode::from(2);
        }
    };

    let shape = graph::Shape::DEFAULT;
    let graph = graph::build_mlp(shape.batch);
    let report = match exec::run(
        &graph,
        graph::initial_sources(shape),
        options.steps,
        options.threads,
    ) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("dataflow: {e}");
            return ExitCode::FAILURE;
        }
    };

    if !options.quiet {
        let mut stdout = std::io::stdout().lock();
        // A closed stdout must not turn into a panic: the exit status is under test.
        let _ = writeln!(stdout, "{}", report.to_json()).and_then(|()| stdout.flush());
    }
    ExitCode::from(options.exit_code)
}
