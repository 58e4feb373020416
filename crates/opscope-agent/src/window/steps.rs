//! Steps of jobs whose chunks do not mark them (no step markers, no Keras batches):
//! every few seconds, the last seconds of one process's chunks are read as a trace and
//! `opscope steps` runs on them, outside the agent's lock: the calls of a jitted JAX
//! function, or the repeating op sequence. Each step found is added once.

use std::time::Duration;

use opscope_analysis::steps::{self, StepOptions, StepSource};
use opscope_analysis::Context;

use crate::flight::ProcessKey;
use crate::state::{Job, JobKey};
use crate::Shared;

/// How often a job's steps are searched again (sampler ticks of a second); a search
/// that finds none waits twice as long before the next, up to [`MAX_WAIT_TICKS`].
const EVERY_TICKS: u64 = 5;
/// Less than the [`WINDOW`] a search reads, less its [`MARGIN`]: a job that found no
/// steps for a while (a JAX job importing and compiling) is searched again before its
/// first steps leave the window (with 60, a loaded machine lost a JAX job's first 4).
const MAX_WAIT_TICKS: u64 = WINDOW.as_secs() - MARGIN.as_secs() - 2;
/// How much of the process's events a search reads: what arrived since the last search
/// (and [`MARGIN`] before it, for the step then running), at most its last seconds and
/// at most this many bytes of chunks (about 300,000 events), newest first. A search
/// costs what it reads (about 1 µs an event), so this bounds the agent's CPU on a busy
/// job; what it could not read is said in the count's description.
const WINDOW: Duration = Duration::from_secs(20);
const MARGIN: Duration = Duration::from_secs(3);
const MAX_BYTES: usize = 1 << 20;

/// What one search found: each step's start (the trace's clock) and duration, and how.
struct Found {
    steps: Vec<(i64, i64)>,
    how: String,
}

/// Searches again every job whose chunks carry no steps, that has received chunks
/// since its last search, and whose turn it is.
pub fn refresh(shared: &Shared, tick: u64, now: u64) {
    run(shared, now, |job| tick >= job.search_at_tick, Some(tick));
}

/// Searches the jobs not searched in the last `stale` (nobody looked: the sampler left
/// them alone), for a snapshot about to be taken; their turns stay as they were.
pub fn refresh_unseen(shared: &Shared, now: u64, stale: Duration) {
    let stale = stale.as_nanos() as u64;
    run(
        shared,
        now,
        |job| now.saturating_sub(job.searched_ns) >= stale,
        None,
    );
}

/// Searches the jobs `due` says; with the sampler's `tick`, schedules each one's next
/// search (sooner when it found steps).
fn run(shared: &Shared, now: u64, due: impl Fn(&Job) -> bool, tick: Option<u64>) {
    let window = WINDOW.as_nanos() as u64;
    let margin = MARGIN.as_nanos() as u64;
    let work: Vec<(JobKey, ProcessKey, u32, bool, bool, Vec<u8>)> = {
        let state = shared.state();
        state
            .jobs
            .iter()
            .filter(|(_, job)| {
                !job.steps_in_chunks() && job.last_chunk_ns > job.searched_ns && due(job)
            })
            .filter_map(|(key, job)| {
                let (process, p) = job.search_process()?;
                let oldest = now.saturating_sub(window);
                let since = match job.searched_ns {
                    0 => oldest,
                    last => last.saturating_sub(margin).max(oldest),
                };
                let (bytes, left_out) =
                    super::recent_bytes(&state.flight, process, p, since, MAX_BYTES)?;
                // Whether it reads every chunk that arrived since the last search (the
                // first reads what it can of the last seconds: the count starts there).
                let read = state.flight.chunks_of(process, since).count() - left_out;
                let whole = job.searched_ns == 0
                    || (job.searched_ns >= oldest
                        && read >= state.flight.chunks_of(process, job.searched_ns).count());
                Some((key.clone(), process, p.pid, p.connected, whole, bytes))
            })
            .collect()
    };
    for (key, process, pid, connected, whole, bytes) in work {
        let found = search(bytes, pid);
        let mut state = shared.state();
        let Some(job) = state.jobs.get_mut(&key) else {
            continue;
        };
        job.searched_ns = now;
        if let Some(tick) = tick {
            job.search_wait_ticks = match found {
                Some(_) => EVERY_TICKS,
                None => (job.search_wait_ticks * 2).clamp(EVERY_TICKS, MAX_WAIT_TICKS),
            };
            job.search_at_tick = tick + job.search_wait_ticks;
        }
        let (Some(found), Some(p)) = (found, job.processes.get_mut(&process)) else {
            continue;
        };
        // The window's last step may still be running: it waits for the next search,
        // but for a process that has gone.
        let complete = found.steps.len() - usize::from(connected && !found.steps.is_empty());
        for &(start, dur) in &found.steps[..complete] {
            p.add_step(start, dur as f64 / 1e6);
        }
        p.steps_found_by = found.how;
        if p.steps_counted.is_empty() {
            p.steps_counted = "every step since the first search (its last 20 s of events then)";
        }
        if !whole {
            // Steps between the last search and this one's start were never read: the
            // job made events faster than a search reads, or nobody looked a while.
            p.steps_counted = "the steps of the stretches searched, while someone looked (some \
                               of the run between searches was not read)";
        }
    }
}

/// The steps `opscope steps` finds in one process's Perfetto bytes.
fn search(bytes: Vec<u8>, pid: u32) -> Option<Found> {
    let trace = super::read(&vec![(pid, bytes)]);
    let found = steps::steps(&Context::new(&trace), &StepOptions::default());
    let source = found.into_iter().find(|s| {
        !matches!(s.found_by, StepSource::None | StepSource::Loader) && !s.steps.is_empty()
    })?;
    Some(Found {
        how: source.found_by.how(),
        steps: source
            .steps
            .iter()
            .map(|s| (s.start_ns, s.dur_ns))
            .collect(),
    })
}
