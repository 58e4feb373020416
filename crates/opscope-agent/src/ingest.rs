//! One recorded process's stream: each chunk is decoded on the connection's own thread
//! (its events counted, its steps and live metrics tallied), then kept in the flight
//! recorder, which the window analyses read (`top`'s ops), and added to its job's
//! aggregates under the lock, briefly.

use std::io::Read;

use opscope_analysis::steps;
use opscope_formats::perfetto::{StreamDecoder, StreamEvent};
use opscope_model::SliceKind;

use super::flight::ProcessKey;
use super::metrics::{self, MetricTally};
use super::protocol::{read_frame, Hello, CHUNK, HOT, PREAMBLE};
use super::state::{HotSample, JobKey, Process};
use super::{now_ns, Shared};

/// What one chunk held, tallied before the lock is taken.
struct Tallies {
    /// Steps the chunk marks (start in the trace's clock, ms): step markers, and the
    /// batches of Keras's `fit` as the bootstrap marks them.
    steps: Vec<(i64, f64)>,
    /// How the last of them was found, as `opscope steps` says it.
    steps_how: &'static str,
    /// Each live metric's, in the table's order (they keep what spans chunks).
    metrics: Vec<Box<dyn MetricTally>>,
    events: u64,
}

impl Default for Tallies {
    fn default() -> Tallies {
        Tallies {
            steps: Vec::new(),
            steps_how: "",
            metrics: metrics::tallies(),
            events: 0,
        }
    }
}

impl Tallies {
    fn clear(&mut self) {
        self.steps.clear();
        self.events = 0;
    }
}

/// Reads the process's frames until it goes (or says something that is not a frame),
/// then marks it ended.
pub fn run(hello: Hello, pid: u32, uid: u32, mut reader: impl Read, shared: &Shared) {
    let (job, process) = shared.state().join(hello, pid, uid, now_ns());
    let mut stream = Stream {
        job,
        process,
        decoder: StreamDecoder::new(),
        tallies: Tallies::default(),
        preamble_len: 0,
        name: format!("process {pid}"),
    };
    let mut buf = Vec::new();
    while let Ok((kind, body)) = read_frame(&mut reader, &mut buf) {
        let keep = match kind {
            PREAMBLE => stream.preamble(body, shared),
            CHUNK if body.len() >= 8 => stream.chunk(body, shared),
            HOT => stream.hot(body, shared),
            _ => false, // not a sender's frame: drop the peer
        };
        if !keep {
            break;
        }
    }
    let mut state = shared.state();
    if let Some(job) = state.jobs.get_mut(&stream.job) {
        if let Some(p) = job.processes.get_mut(&stream.process) {
            p.connected = false;
        }
        // Its last step is complete now: the step search reads it once more, and its
        // last ops are in.
        job.searched_ns = 0;
        job.search_at_tick = 0;
        job.ops.again();
    }
}

/// One process's stream as the agent reads it.
struct Stream {
    job: JobKey,
    process: ProcessKey,
    decoder: StreamDecoder,
    tallies: Tallies,
    /// The length of the decoder's preamble when it was last copied to the process.
    preamble_len: usize,
    name: String,
}

impl Stream {
    /// The packets every chunk's reader needs; false when the job is gone.
    fn preamble(&mut self, body: &[u8], shared: &Shared) -> bool {
        let _ = self.decoder.feed(body, &self.name, &mut |_| {});
        let mut state = shared.state();
        let Some(p) = state.process_mut(&self.job, self.process) else {
            return false;
        };
        self.copy_preamble(p);
        true
    }

    /// An observer's hot functions of its last interval; false when the job is gone
    /// or the frame is no list of them.
    fn hot(&mut self, body: &[u8], shared: &Shared) -> bool {
        /// More than a sampler's interval can name: the rest is dropped.
        const MOST: usize = 4096;
        let Ok(mut functions) = serde_json::from_slice::<Vec<HotSample>>(body) else {
            return false;
        };
        functions.truncate(MOST);
        let now = now_ns();
        let mut state = shared.state();
        let second = now.saturating_sub(state.started_ns) / 1_000_000_000;
        let Some(p) = state.process_mut(&self.job, self.process) else {
            return false;
        };
        p.add_hot(second, functions);
        true
    }

    /// One chunk: decoded and tallied here, then kept and added to its job's figures
    /// under the lock; false when the job is gone.
    fn chunk(&mut self, body: &[u8], shared: &Shared) -> bool {
        let lost = u64::from_le_bytes(body[..8].try_into().expect("8 bytes"));
        let chunk = &body[8..];
        let tallies = &mut self.tallies;
        tallies.clear();
        let read = self
            .decoder
            .feed(chunk, &self.name, &mut |event| tally(tallies, event));
        let now = now_ns();
        let mut state = shared.state();
        let second = now.saturating_sub(state.started_ns) / 1_000_000_000;
        if read.is_ok() {
            state.flight.push(self.process, now, chunk);
        }
        let Some(job) = state.jobs.get_mut(&self.job) else {
            return false;
        };
        if read.is_err() {
            job.unreadable_chunks += 1;
        }
        job.events += tallies.events;
        job.last_chunk_ns = now;
        job.event_rate.add(second, tallies.events);
        let Some(p) = job.processes.get_mut(&self.process) else {
            return false;
        };
        p.chunks += 1;
        p.chunks_lost = lost;
        for (metric, tally) in p.metrics.iter_mut().zip(&mut tallies.metrics) {
            metric.add(second, tally.end_chunk());
        }
        p.events += tallies.events;
        if !tallies.steps.is_empty() {
            p.steps_in_chunks = true;
            if p.steps_found_by != tallies.steps_how {
                p.steps_found_by = tallies.steps_how.to_string();
            }
            p.steps_counted = "every step since the process connected";
        }
        tallies.steps.sort_by_key(|s| s.0);
        for &(start, ms) in &tallies.steps {
            p.add_step(start, ms);
        }
        self.copy_preamble(p);
        true
    }

    /// Gives the process the decoder's preamble when it grew (new track descriptors),
    /// and the rank its descriptors came to say.
    fn copy_preamble(&mut self, p: &mut Process) {
        if self.decoder.preamble().len() != self.preamble_len {
            self.preamble_len = self.decoder.preamble().len();
            p.preamble = self.decoder.preamble().to_vec();
            let labels = self.decoder.tracks().flat_map(|t| t.labels.iter());
            take_rank_labels(&mut p.hello, labels.map(String::as_str));
        }
    }
}

/// A process that `torch.multiprocessing.spawn` started learns its rank after it
/// greeted the agent: the recorder then labels its process descriptor (`rank=1`,
/// `world_size=2`). What the greeting had from the launcher's variables stays.
fn take_rank_labels<'a>(hello: &mut Hello, labels: impl Iterator<Item = &'a str>) {
    for label in labels {
        let Some((key, value)) = label.split_once('=') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<u32>() else {
            continue;
        };
        let field = match key {
            "rank" => &mut hello.rank,
            "local_rank" => &mut hello.local_rank,
            "world_size" => &mut hello.world_size,
            _ => continue,
        };
        field.get_or_insert(value);
    }
}

fn tally(t: &mut Tallies, event: StreamEvent<'_>) {
    match event {
        StreamEvent::Slice {
            name,
            kind,
            start_ns,
            end_ns,
            ..
        } => {
            t.events += 1;
            let ns = end_ns.saturating_sub(start_ns);
            let step = (start_ns as i64, ns as f64 / 1e6);
            if name == steps::KERAS_BATCH_MARK {
                t.steps.push(step);
                t.steps_how = "from the framework's records: Keras fit's batches";
                return;
            }
            if name == steps::KERAS_STEP_MARK {
                return;
            }
            // The kind the session's reports give it (a gloo all-reduce the recorder
            // wrote as an op is communication), so that the metrics and `gpu` agree.
            let kind = kind.unwrap_or(SliceKind::Other).refined_by_name(name);
            if kind == SliceKind::Step {
                t.steps.push(step);
                t.steps_how = "from step markers";
                return;
            }
            for metric in &mut t.metrics {
                metric.slice(kind, name, start_ns as i64, end_ns as i64);
            }
        }
        StreamEvent::Instant { .. } => t.events += 1,
        StreamEvent::Counter { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(name: &str, kind: SliceKind, start_ns: u64, end_ns: u64) -> StreamEvent<'_> {
        StreamEvent::Slice {
            track: 1,
            name,
            category: "cpu_op",
            kind: Some(kind),
            start_ns,
            end_ns,
            depth: 0,
        }
    }

    /// Labels given after the greeting name the rank; the launcher's variables win.
    #[test]
    fn a_rank_labelled_later_names_the_process() {
        let mut hello = Hello::default();
        take_rank_labels(
            &mut hello,
            ["job=x", "rank=1", "world_size=2", "rank=zero"].into_iter(),
        );
        assert_eq!(
            (hello.rank, hello.world_size, hello.local_rank),
            (Some(1), Some(2), None)
        );
        hello.rank = Some(3);
        take_rank_labels(&mut hello, ["rank=1"].into_iter());
        assert_eq!(hello.rank, Some(3));
    }

    /// A gloo all-reduce the recorder wrote as an op is a collective live as in the
    /// session's reports; a collective around one of the last chunk's counts only the
    /// time outside it, and nested ones in one chunk count once.
    #[test]
    fn collectives_by_name_count_their_time_once_across_chunks() {
        let mut t = Tallies::default();
        tally(&mut t, slice("gloo:all_reduce", SliceKind::Op, 100, 200));
        tally(&mut t, slice("aten::mm", SliceKind::Op, 200, 300));
        // The communication metric (the table's first).
        assert_eq!(metrics::LIVE_METRICS[0].name, "communication");
        assert_eq!(t.metrics[0].end_chunk(), 100);
        t.clear();
        tally(&mut t, slice("c10d::allreduce_", SliceKind::Op, 50, 250));
        tally(&mut t, slice("gloo:broadcast", SliceKind::Op, 60, 70));
        assert_eq!(t.metrics[0].end_chunk(), 100);
        t.clear();
        assert_eq!(t.metrics[0].end_chunk(), 0);
    }
}
