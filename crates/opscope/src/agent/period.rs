//! Steps of jobs without step markers, found as `opscope steps` finds them in files:
//! every few seconds, the last seconds of one process's chunks are read as a trace and
//! the same period search runs on them (outside the agent's lock).

use std::time::Duration;

use opscope_analysis::steps::{self, StepOptions, StepSource};
use opscope_analysis::Context;
use opscope_model::Trace;

use super::state::{FoundSteps, JobKey};
use super::Shared;

/// How often a job's steps are searched again (sampler ticks of a second); a search
/// that finds none waits twice as long before the next, up to [`MAX_WAIT_TICKS`].
const EVERY_TICKS: u64 = 5;
const MAX_WAIT_TICKS: u64 = 60;
/// How much of the process's ops a search reads: its last seconds, and at most this
/// many bytes of chunks (about 80,000 events), newest first. A search costs what it
/// reads (about 1 µs an event), so this bounds the agent's CPU on a busy job.
const WINDOW: Duration = Duration::from_secs(20);
const MAX_BYTES: usize = 256 << 10;

/// Searches again every job that has no markers and has received chunks since its
/// last search.
pub fn refresh(shared: &Shared, tick: u64, now: u64) {
    let window = WINDOW.as_nanos() as u64;
    let work: Vec<(JobKey, u32, Vec<u8>)> = {
        let state = shared.state();
        state
            .jobs
            .iter()
            .filter(|(_, job)| {
                job.marker_step_count() == 0
                    && job.last_chunk_ns > job.searched_ns
                    && tick >= job.search_at_tick
            })
            .filter_map(|(key, job)| {
                let (process, p) = job.search_process()?;
                let chunks: Vec<&[u8]> = state
                    .flight
                    .chunks_of(process, now.saturating_sub(window))
                    .collect();
                let mut total = 0;
                let newest = chunks
                    .iter()
                    .rev()
                    .take_while(|c| {
                        total += c.len();
                        total <= MAX_BYTES
                    })
                    .count()
                    .max(1);
                let mut bytes = p.preamble.clone();
                for chunk in &chunks[chunks.len().saturating_sub(newest)..] {
                    bytes.extend_from_slice(chunk);
                }
                (!chunks.is_empty()).then(|| (key.clone(), p.pid, bytes))
            })
            .collect()
    };
    for (key, pid, bytes) in work {
        let found = search(&bytes, pid);
        let mut state = shared.state();
        if let Some(job) = state.jobs.get_mut(&key) {
            job.searched_ns = now;
            job.search_wait_ticks = match found {
                Some(_) => EVERY_TICKS,
                None => (job.search_wait_ticks * 2).clamp(EVERY_TICKS, MAX_WAIT_TICKS),
            };
            job.search_at_tick = tick + job.search_wait_ticks;
            if let Some(steps_ms) = found {
                job.found_steps = Some(FoundSteps {
                    pid,
                    window_s: WINDOW.as_secs_f64(),
                    steps_ms,
                });
            }
        }
    }
}

/// The steps the period search finds in one process's Perfetto bytes, in ms.
fn search(bytes: &[u8], pid: u32) -> Option<Vec<f64>> {
    let mut trace = Trace::new();
    // What a damaged chunk leaves is still read; the search sees what there is.
    let _ = opscope_formats::perfetto::import(bytes, &format!("process {pid}"), &mut trace);
    let found = steps::steps(&Context::new(&trace), &StepOptions::default());
    let source = found
        .into_iter()
        .find(|s| !matches!(s.found_by, StepSource::None) && !s.steps.is_empty())?;
    Some(source.steps.iter().map(|s| s.dur_ns as f64 / 1e6).collect())
}
