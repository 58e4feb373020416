//! The `opscope` executable: the command line of [`opscope::cli`].

use std::process::ExitCode;

fn main() -> ExitCode {
    opscope_engine::load::cut_files::install();
    opscope::cli::models_die_with_the_process();
    ExitCode::from(opscope::cli::run(std::env::args_os()))
}
