//! `opscope view TRACE…`: a timeline of the trace in the browser, served from this
//! process on the loopback interface (see [`crate::view`]).

use std::time::Duration;

use anyhow::Result;

use crate::load;
use crate::view::{self, ServeOptions};

#[derive(clap::Args)]
#[command(
    about = "Look at a trace in the browser: a timeline of any size, and the reports beside it",
    long_about = "Serve a timeline of the trace on 127.0.0.1 (a random port and a token in the \
                  address, nothing from the network) and open it in the browser. A track per \
                  thread, GPU stream and counter, per process and rank; zoom with W/S or \
                  Ctrl+wheel, pan with A/D, drag or Shift+wheel; click a slice for its args, \
                  launch or kernels and its name's totals; drag on the time axis to see the \
                  `stats op` and `gpu` reports of that span. The server answers each view from \
                  summaries built at load, so a 2 GB trace zooms as fast as a small one. The \
                  page is served at once and draws the trace while it loads: what has been \
                  read so far, and how much remains.",
    after_help = "Examples:\n  opscope view trace.json.gz\n  opscope view ranks/ --no-open   (then open the printed address, e.g. through `ssh -L`)\n  opscope view after/ --against before/   (two runs, one above the other)\n  opscope view --live              (every running job of yours, from the agent)\n  opscope view --live train --last 30s"
)]
pub struct Args {
    #[command(flatten)]
    inputs: load::Inputs,
    /// Print the address only; do not open a browser.
    #[arg(long)]
    no_open: bool,
    /// Port on 127.0.0.1 [default: a free one].
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Show an earlier run above this one, their first steps at one time, and what
    /// changed between them (`opscope diff BEFORE TRACE`) first among the panels.
    #[arg(long, value_name = "BEFORE", num_args = 1.., conflicts_with = "live")]
    against: Vec<std::path::PathBuf>,
    /// With --live: read the job again this often.
    #[arg(long, default_value = "2s", value_name = "DURATION",
          value_parser = opscope_agent::triggers::parse_duration)]
    every: Duration,
}

pub fn run(args: Args) -> Result<()> {
    let title = match &args.inputs.live {
        Some(job) if job.is_empty() => "live: every job".to_string(),
        Some(job) => format!("live: {job}"),
        None => args
            .inputs
            .traces
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    };
    view::serve(
        args.inputs,
        ServeOptions {
            title,
            open: !args.no_open,
            port: args.port,
            reload_every: args.every,
            against: args.against,
        },
    )
}
