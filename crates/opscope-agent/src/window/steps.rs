//! Steps of jobs whose chunks do not mark them (no step markers, no Keras batches):
//! every few seconds, what one process's chunks added since the last search is read as
//! a trace and `opscope steps` runs on it, outside the agent's lock: the calls of a
//! jitted JAX function, or the repeating op sequence. Each step found is added once.

use std::time::Duration;

use opscope_analysis::steps::{self, StepOptions, StepSource};
use opscope_analysis::Context;

use crate::flight::ProcessKey;
use crate::state::{Job, JobKey};
use crate::Shared;

/// How often a job's steps are searched again (sampler ticks of a second); a search
/// that finds none waits twice as long before the next, up to [`MAX_WAIT_TICKS`], so a
/// job importing and compiling for a while shows its first steps soon after they come.
const EVERY_TICKS: u64 = 5;
const MAX_WAIT_TICKS: u64 = 15;
/// What a search reads of the process's chunks: those that arrived from where the last
/// search left off (the start of the step it left running, less [`MARGIN`]; where it
/// started itself, when it found none), else all the flight recorder holds; at most
/// this many bytes (about 300,000 events), newest first. A search costs what it reads
/// (about 1 µs an event), so this bounds the agent's CPU on a busy job; what it could
/// not read is said in the count's description. No bound in time: an agent at idle
/// priority on a busy host may search a job only after it ended (the last 20 s it read
/// then lost the first steps of a job on a loaded machine).
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

/// One process's search, taken under the agent's lock and run outside it.
struct Search {
    key: JobKey,
    process: ProcessKey,
    pid: u32,
    /// Whether the process is still connected (its last step may still run).
    connected: bool,
    /// Whether `bytes` hold every chunk from `since` on.
    whole: bool,
    /// Where the read began: where the next search starts if this finds no steps.
    since: u64,
    bytes: Vec<u8>,
}

/// Searches the jobs `due` says; with the sampler's `tick`, schedules each one's next
/// search (sooner when it found steps).
fn run(shared: &Shared, now: u64, due: impl Fn(&Job) -> bool, tick: Option<u64>) {
    let margin = MARGIN.as_nanos() as u64;
    let work: Vec<Search> = {
        let state = shared.state();
        state
            .jobs
            .iter()
            .filter(|(_, job)| {
                !job.steps_in_chunks() && job.last_chunk_ns > job.searched_ns && due(job)
            })
            .filter_map(|(key, job)| {
                let (process, p) = job.search_process()?;
                let since = job.search_from_ns;
                let (bytes, left_out) =
                    super::recent_bytes(&state.flight, process, p, since, MAX_BYTES)?;
                Some(Search {
                    key: key.clone(),
                    process,
                    pid: p.pid,
                    connected: p.connected,
                    whole: left_out == 0,
                    since,
                    bytes,
                })
            })
            .collect()
    };
    for Search {
        key,
        process,
        pid,
        connected,
        whole,
        since,
        bytes,
    } in work
    {
        let found = search(bytes, pid);
        let mut state = shared.state();
        let Some(job) = state.jobs.get_mut(&key) else {
            continue;
        };
        job.searched_ns = now;
        // Found none: the next search reads this one's stretch again, with what came
        // since (a first step that began before it may end after it: moving on to the
        // search's time less a margin cut a loaded machine's first step short, or lost
        // the first few).
        job.search_from_ns = since;
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
        // The next search reads from the start of the step left running: a recorded
        // event's time is the agent's clock (`CLOCK_MONOTONIC`), and a chunk arrives
        // after its events. A margin, or this search's time less one where the step's
        // start says nothing of the clock, keeps it safe; a step found there starting
        // before the running one is a piece of one already counted, never counted again.
        if let Some(&(running, _)) = found.steps.get(complete) {
            let running = u64::try_from(running).unwrap_or(0);
            job.search_from_ns = running.min(now).saturating_sub(margin);
            p.last_step_start = p.last_step_start.max(running as i64 - 1);
        } else {
            job.search_from_ns = now.saturating_sub(margin);
        }
        p.steps_found_by = found.how;
        if p.steps_counted.is_empty() {
            p.steps_counted = "every step since the first search, and before it as far back \
                               as the agent held the job's events";
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use opscope_model::events::SliceRow;
    use opscope_model::{ArgsId, SliceKind, SourceId, StrId, Trace, TrackKind};
    use opscope_wire::Hello;

    use crate::flight::{Flight, ProcessKey};
    use crate::state::{JobKey, State};
    use crate::{Options, Shared};

    const S: u64 = 1_000_000_000;

    /// Perfetto bytes of process 42 calling its jitted `step` once a second from
    /// `first` s, each call half a second (the bootstrap's marks of a JAX program).
    fn calls(first: u64, n: u64) -> Vec<u8> {
        let mut trace = Trace::new();
        let p = trace.process(SourceId(0), 42);
        let th = trace.thread(p, 42);
        let track = trace.thread_track(th, TrackKind::Thread);
        let name = trace.intern(&format!("{}step", opscope_analysis::steps::JAX_CALL_MARK));
        for k in first..first + n {
            trace.slices.push(SliceRow {
                track,
                ts: (k * S) as i64,
                dur: (S / 2) as i64,
                name,
                category: StrId::EMPTY,
                kind: SliceKind::Annotation,
                args: ArgsId::NONE,
            });
        }
        trace.finish();
        let mut bytes = Vec::new();
        opscope_formats::perfetto::export(&trace, &mut bytes).unwrap();
        bytes
    }

    /// An agent holding one job of one process, which joined at 100 s.
    fn agent() -> (Shared, JobKey, ProcessKey) {
        let mut state = State::new(Flight::new(1 << 24, 600 * S), 0);
        let hello = Hello {
            version: 1,
            pid: 42,
            job: "j".into(),
            command: "python train.py".into(),
            ..Hello::default()
        };
        let (job, process) = state.join(hello, 42, 1000, 100 * S);
        let options = Options {
            socket: Default::default(),
            system: false,
            window: Duration::from_secs(600),
            memory_bound: 1 << 24,
            triggers: Vec::new(),
            dump_dir: Default::default(),
            keep: 1,
            cooldown: Duration::ZERO,
            idle_priority: false,
            listen: None,
            quiet: true,
        };
        let shared = Shared {
            state: Mutex::new(state),
            options,
        };
        (shared, job, process)
    }

    /// The chunk `bytes` arrives at `at` s with `events` events.
    fn arrive(shared: &Shared, job: &JobKey, process: ProcessKey, at: u64, bytes: &[u8]) {
        let mut state = shared.state();
        state.flight.push(process, at * S, bytes);
        let job = state.jobs.get_mut(job).unwrap();
        job.last_chunk_ns = at * S;
        job.processes.get_mut(&process).unwrap().events += 1;
    }

    fn steps_ms(shared: &Shared, job: &JobKey, process: ProcessKey) -> Vec<f64> {
        let state = shared.state();
        let p = &state.jobs[job].processes[&process];
        assert_eq!(p.steps_total as usize, p.steps.len());
        p.steps.iter().copied().collect()
    }

    /// A job first searched long after its steps came (an agent at idle priority on a
    /// busy host searches only when it gets the CPU, maybe after the job ended) counts
    /// every step the agent holds: the search read the last 20 s only, and a job of a
    /// loaded machine lost its first steps.
    #[test]
    fn a_job_searched_long_after_its_steps_counts_them_all() {
        let (shared, job, process) = agent();
        arrive(&shared, &job, process, 111, &calls(101, 10));
        shared
            .state()
            .jobs
            .get_mut(&job)
            .unwrap()
            .processes
            .get_mut(&process)
            .unwrap()
            .connected = false;
        super::refresh_unseen(&shared, 160 * S, Duration::ZERO);
        let steps = steps_ms(&shared, &job, process);
        assert_eq!(steps.len(), 10, "{steps:?}");
        assert!(steps[..9].iter().all(|&ms| ms == 1000.0), "{steps:?}");
    }

    /// A search that finds no steps (the first call only, or none yet) leaves the next
    /// to read what it read again: the next read from its time less 3 s, which lost or
    /// cut short the first steps when the wait between searches had grown.
    #[test]
    fn a_search_that_finds_none_leaves_its_stretch_to_the_next() {
        let (shared, job, process) = agent();
        arrive(&shared, &job, process, 102, &calls(101, 1));
        super::refresh(&shared, 0, 106 * S);
        assert!(steps_ms(&shared, &job, process).is_empty());
        arrive(&shared, &job, process, 112, &calls(102, 10));
        super::refresh(&shared, 15, 112 * S);
        let steps = steps_ms(&shared, &job, process);
        // The last call still runs: it waits for the next search.
        assert_eq!(steps, vec![1000.0; 10]);
    }
}
