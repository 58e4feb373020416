//! The traces a command reads, as its arguments say: files and directories that the
//! engine loads ([`opscope_engine::load`]), or a running job the agent holds
//! (`--live`); and a model loaded before, which commands run from Python report on.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use opscope_engine::load::{load, LoadOptions};
use opscope_model::Trace;

/// The model a command reports on: read by the command, or (run on a model loaded
/// before, see [`crate::embed`]) that model, shared.
pub enum Loaded {
    Read(Option<Box<Trace>>),
    Shared(Arc<Trace>),
}

/// Whether models read by commands are left for the process's exit to free: the
/// executable reports and exits, and the kernel takes the memory back at once, where
/// freeing it column by column (each large column unmapped on its own) took 0.5-1 ms of
/// a 20 ms `info` on a 35 MB model. A process that goes on (Python) frees them.
static MODELS_DIE_WITH_THE_PROCESS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Says that this process exits after its command (the executable's `main`).
pub fn models_die_with_the_process() {
    MODELS_DIE_WITH_THE_PROCESS.store(true, std::sync::atomic::Ordering::Relaxed);
}

impl Drop for Loaded {
    fn drop(&mut self) {
        if let Loaded::Read(trace) = self {
            if MODELS_DIE_WITH_THE_PROCESS.load(std::sync::atomic::Ordering::Relaxed) {
                std::mem::forget(trace.take());
            }
        }
    }
}

impl std::ops::Deref for Loaded {
    type Target = Trace;
    fn deref(&self) -> &Trace {
        match self {
            Loaded::Read(Some(trace)) => trace,
            Loaded::Read(None) => unreachable!("a read model is taken only when dropped"),
            Loaded::Shared(trace) => trace,
        }
    }
}

thread_local! {
    /// The model that commands run by [`crate::embed`] on this thread report on, in
    /// place of reading their TRACE arguments.
    static PRELOADED: std::cell::RefCell<Option<Arc<Trace>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` with `trace` as the model every [`Inputs::load`] on this thread gives
/// (the model before it, if any, again after).
pub fn with_preloaded<R>(trace: Arc<Trace>, f: impl FnOnce() -> R) -> R {
    struct Reset(Option<Arc<Trace>>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let before = self.0.take();
            PRELOADED.with(|p| *p.borrow_mut() = before);
        }
    }
    let _reset = Reset(PRELOADED.with(|p| p.borrow_mut().replace(trace)));
    f()
}

/// The traces a command reads, as every analysis command takes them.
#[derive(clap::Args, Debug)]
pub struct Inputs {
    /// Trace files or directories of trace files.
    #[arg(required_unless_present = "live", value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
    /// Read a running job from the agent's flight recorder instead (the job as
    /// `opscope top` names it; with no JOB, every job of yours it holds).
    #[arg(long, value_name = "JOB", conflicts_with = "traces", num_args = 0..=1,
          default_missing_value = "")]
    pub live: Option<String>,
    /// With --live: only the last DURATION (e.g. 10s) [default: all the agent holds].
    #[arg(long, value_name = "DURATION", requires = "live",
          value_parser = opscope_agent::triggers::parse_duration)]
    pub last: Option<Duration>,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
    /// Parse the files even when the model cache holds them, and do not save the model
    /// there (the cache is under ~/.cache/opscope/models; OPSCOPE_CACHE_DIR moves it,
    /// OPSCOPE_CACHE_DIR=off turns it off).
    #[arg(long)]
    pub no_cache: bool,
    /// When a file named here cannot be read to its end (cut off while it was written,
    /// damaged), analyse what was read before the error, with a warning, instead of
    /// stopping.
    #[arg(long)]
    pub partial: bool,
    /// Where the agent is, for --live (a socket, or an agent over TCP and its token).
    #[command(flatten)]
    pub agent: opscope_agent::client::LiveAgentAddress,
}

impl Inputs {
    /// The model of the traces, for a command to report on and then exit.
    pub fn load(&self) -> Result<Loaded> {
        if let Some(trace) = PRELOADED.with(|p| p.borrow().clone()) {
            return Ok(Loaded::Shared(trace));
        }
        Ok(Loaded::Read(Some(Box::new(self.load_owned()?))))
    }

    /// The model, to keep and drop later (a viewer that reloads a live job).
    pub fn load_owned(&self) -> Result<Trace> {
        let trace = match &self.live {
            Some(job) => {
                let address = &self.agent.address;
                let last_ns = self.last.map(|d| d.as_nanos() as u64);
                let jobs = if job.is_empty() {
                    let jobs: Vec<String> = address
                        .snapshot()?
                        .jobs
                        .into_iter()
                        .map(|j| j.job)
                        .collect();
                    if jobs.is_empty() {
                        bail!("the agent holds no job of yours (see `opscope top`)");
                    }
                    jobs
                } else {
                    vec![job.clone()]
                };
                let dumps = jobs
                    .iter()
                    .map(|job| opscope_agent::client::LiveDump::fetch(address, job, last_ns))
                    .collect::<Result<Vec<_>>>()?;
                let paths: Vec<PathBuf> = dumps.iter().map(|d| d.path().to_path_buf()).collect();
                let options = LoadOptions {
                    quiet: true,
                    cache: false,
                    partial: false,
                };
                load(&paths, &options)?
            }
            None => load(&self.traces, &self.options())?,
        };
        Ok(trace)
    }

    pub fn options(&self) -> LoadOptions {
        LoadOptions {
            quiet: self.quiet,
            cache: !self.no_cache,
            partial: self.partial,
        }
    }
}
