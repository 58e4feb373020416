//! `opscope attach PID --dump`: a running Python process's threads and their stacks,
//! read from outside it (`opscope-stacks`), without stopping or changing it.

use anyhow::{bail, Context, Result};
use opscope_stacks::{PythonProcess, ThreadStack};

#[derive(clap::Args)]
#[command(
    about = "Read a running Python process's stacks from outside it (no restart, no change to it)",
    long_about = "Reads a running CPython process's threads and the Python stack of each \
                  from outside the process, as py-spy does: the target goes on running. \
                  Needs the right to read its memory (its user with kernel.yama.ptrace_scope \
                  0 or as its parent, root, or CAP_SYS_PTRACE). CPython 3.11 and 3.12.",
    after_help = "Examples:\n  opscope attach 4242 --dump\n  opscope attach 4242 --dump --format json"
)]
pub struct Args {
    /// The process id.
    pid: i32,
    /// Print each thread's stack once, innermost frame first, and exit.
    #[arg(long)]
    dump: bool,
    /// text, or json (one object per thread).
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    format: String,
}

pub fn run(args: Args) -> Result<()> {
    if !args.dump {
        bail!(
            "attach: sampling a running process over time is not built yet; `--dump` prints \
             its stacks now"
        );
    }
    let process = PythonProcess::open(args.pid)?;
    let stacks = process
        .stacks()
        .with_context(|| format!("reading the stacks of process {}", args.pid))?;
    let mut out = std::io::stdout().lock();
    if args.format == "json" {
        serde_json::to_writer_pretty(&mut out, &stacks)?;
        use std::io::Write;
        writeln!(out)?;
    } else {
        print_text(&mut out, args.pid, process.version(), &stacks)?;
    }
    Ok(())
}

fn print_text(
    out: &mut impl std::io::Write,
    pid: i32,
    version: &str,
    stacks: &[ThreadStack],
) -> Result<()> {
    writeln!(
        out,
        "process {pid}: Python {version}, {} threads",
        stacks.len()
    )?;
    for t in stacks {
        writeln!(
            out,
            "\nthread {}{}",
            t.native_thread_id,
            if t.holds_gil { " (holds the GIL)" } else { "" }
        )?;
        for f in &t.frames {
            let line = f.line.map_or_else(|| "?".to_string(), |l| l.to_string());
            writeln!(out, "    {} ({}:{line})", f.qualname, f.filename)?;
        }
    }
    Ok(())
}
