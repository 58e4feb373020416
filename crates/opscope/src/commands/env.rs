//! `opscope env`: the variables that make any process recorded without wrapping its
//! command, for a scheduler's prolog, a container's environment or a shell.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::record::{self, Environment};

#[derive(clap::Args)]
#[command(
    about = "Print the variables that record any process started with them (for a job scheduler's prolog or a container)",
    long_about = "Print the variables that make every process started with them recorded, \
                  as `opscope record` would, without wrapping its command: the ITT and NVTX \
                  injection, the Python bootstrap (installed in the session directory), and \
                  the agent to stream to. Every process of the job's tree is reached, \
                  launcher and workers, because each inherits them.",
    after_help = "Examples:\n  eval \"$(opscope env -o /scratch/$USER/opscope/$SLURM_JOB_ID)\"   # in a SLURM prolog or job script\n  opscope env --job train --live-only   # stream to the agent, write no files\n  opscope env --format docker > opscope.env && docker run --env-file opscope.env …"
)]
pub struct Args {
    /// The session directory the processes write to [default: ./opscope-session].
    #[arg(short, long, value_name = "DIR")]
    output: Option<PathBuf>,
    /// The job's name for the agent [default: what the environment says].
    #[arg(long, value_name = "NAME")]
    job: Option<String>,
    /// Stream to the agent only: no files (needs a running agent, or --agent).
    #[arg(long)]
    live_only: bool,
    /// The agent's socket [default: the running agent, if any].
    #[arg(long, value_name = "PATH")]
    agent: Option<PathBuf>,
    /// Do not stream to an agent (by default: the running one, else this user's, as
    /// soon as it starts).
    #[arg(long, conflicts_with_all = ["agent", "live_only"])]
    no_agent: bool,
    /// Leave Python programs alone.
    #[arg(long)]
    no_python: bool,
    /// Record CUDA through CUPTI too (experimental).
    #[arg(long)]
    cupti: bool,
    /// `sh` (export lines for eval), `fish`, or `docker` (an --env-file).
    #[arg(long, value_enum, default_value_t)]
    format: Shell,
}

#[derive(clap::ValueEnum, Clone, Copy, Default)]
enum Shell {
    #[default]
    Sh,
    Fish,
    Docker,
}

pub fn run(args: Args) -> Result<()> {
    let session = args
        .output
        .unwrap_or_else(|| PathBuf::from("opscope-session"));
    std::fs::create_dir_all(&session)
        .with_context(|| format!("{}: cannot create", session.display()))?;
    let session = session
        .canonicalize()
        .with_context(|| format!("{}: cannot resolve", session.display()))?;
    let running = args.agent.clone().or_else(record::running_agent);
    if args.live_only && running.is_none() {
        anyhow::bail!("--live-only needs an agent: none is running (start `opscope agent`, or name one with --agent)");
    }
    // Processes stream to this user's agent even when it starts after them: they try
    // its socket once a second.
    let agent = running.or_else(|| (!args.no_agent).then(opscope_agent::protocol::user_socket));
    let environment = Environment {
        library: record::find_library()?,
        session,
        python: !args.no_python,
        cupti: args.cupti,
        agent,
        job: args.job,
        live_only: args.live_only,
    };
    for (name, value) in environment.variables()? {
        println!("{}", line(args.format, name, &value));
    }
    Ok(())
}

fn line(shell: Shell, name: &str, value: &OsString) -> String {
    let value = value.to_string_lossy();
    match shell {
        Shell::Sh => format!("export {name}='{}'", value.replace('\'', "'\\''")),
        // fish has no '\'' trick: inside its single quotes, \\ and \' are escapes.
        Shell::Fish => format!(
            "set -gx {name} '{}'",
            value.replace('\\', "\\\\").replace('\'', "\\'")
        ),
        Shell::Docker => format!("{name}={value}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_quoted_so_the_shell_expands_nothing() {
        let v = OsString::from("/a b/it's $HOME");
        assert_eq!(line(Shell::Sh, "X", &v), r#"export X='/a b/it'\''s $HOME'"#);
        assert_eq!(
            line(Shell::Fish, "X", &v),
            r#"set -gx X '/a b/it\'s $HOME'"#
        );
        assert_eq!(line(Shell::Docker, "X", &v), "X=/a b/it's $HOME");
    }
}
