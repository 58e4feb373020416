//! `host`: per process, its host threads' time — busy, computation, communication
//! (collectives on the CPU), their overlap, and idle, from its first host work to the
//! end of its last (what `gpu` shows for processes without device work, here for all).

use opscope_analysis::host::{self, HostReport};
use opscope_analysis::report::{Report, Reported};
use opscope_analysis::window::Window;
use opscope_analysis::Context;
use serde::{Deserialize, Serialize};

use super::{boxed, Entry, Error, Formats, Frame, Output};

pub static HOST: Entry<Options> = Entry {
    name: "host",
    formats: Formats::TextJsonCsv,
    frames: &[Frame {
        name: "processes",
        path: &["processes"],
        parent: &[],
        unprefixed: &["time"],
        columns: &[
            "rank",
            "role",
            "file",
            "span_ns",
            "busy_ns",
            "computation_ns",
            "communication_ns",
            "overlap_ns",
            "idle_ns",
            "communication_overlap_pct",
        ],
    }],
    run,
    section: Some(("Host threads", section)),
    timeline: None,
    check: None,
};

#[derive(clap::Args, Deserialize, Default)]
#[serde(default)]
#[command(
    about = "Per process, its host threads' time: busy, computation, communication (collectives on the CPU), their overlap, idle",
    after_help = "Computation is the time some thread runs an op, a range or a runtime call \
                  outside a collective; communication the time under a collective (gloo, \
                  MPI, NCCL calls); idle the time no thread runs either (the program's own \
                  Python, waits, input).\n\nExamples:\n  opscope host trace.json.gz\n  opscope host --exclude-last-step ranks/ --format csv"
)]
pub struct Options {
    /// Leave out the last profiler step and the work launched in it.
    #[arg(long)]
    exclude_last_step: bool,
}

/// Every process with host work.
#[derive(Serialize)]
pub struct Hosts {
    processes: Vec<HostReport>,
}

impl Reported for Hosts {
    fn report(&self) -> Report {
        let mut table = host::table(&self.processes);
        table.empty = Some("no host work in the trace");
        let mut report = Report::default();
        report.table(table);
        report
    }
}

fn section(cx: &Context, _top: usize) -> Result<String, Error> {
    let hosts = hosts(cx, &Options::default());
    Ok(crate::html::report(&hosts.report()))
}

fn run(cx: &Context, o: &Options) -> Result<Box<dyn Output>, Error> {
    boxed(hosts(cx, o))
}

fn hosts(cx: &Context, o: &Options) -> Hosts {
    let window = if o.exclude_last_step {
        Window::BeforeLastStep
    } else {
        Window::Whole
    };
    Hosts {
        processes: host::reports(cx.trace(), &cx.selected(window), &[]),
    }
}
