//! What the agent holds: jobs (by owner and name), their processes, the live
//! aggregates made from the chunks (events per second, step times, live metrics) and
//! the window analyses' results (ops), the processes' CPU and memory, and the flight
//! recorder; and the snapshot built from them.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::flight::{Flight, ProcessKey};
use super::protocol::Hello;
use super::snapshot::{
    AgentState, GpuState, GpuUse, HotState, JobState, ProcessState, Snapshot, StepState,
};

/// Seconds of events per second kept per job.
const BUCKETS: u64 = 60;
/// Step durations kept per process.
const STEPS_KEPT: usize = 10_000;
/// A job's first minute, whose steps its later ones are compared with.
const FIRST_MINUTE_NS: i64 = 60_000_000_000;
/// Growth of the median step since the first minute that `top` advises on, in percent.
const GROWTH_PCT: f64 = 10.0;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobKey {
    pub uid: u32,
    pub name: String,
}

pub struct State {
    pub pid: u32,
    pub started_ns: u64,
    pub jobs: BTreeMap<JobKey, Job>,
    pub flight: Flight,
    next_process: ProcessKey,
    /// Dumps written by triggers, newest last.
    pub dumps: Vec<String>,
    /// When a snapshot was last asked for (agent ns; 0: never).
    pub snapshot_asked_ns: u64,
    pub gpus: Vec<GpuState>,
}

pub struct Job {
    pub source: String,
    pub processes: BTreeMap<ProcessKey, Process>,
    /// Its ops as `stats op` gives them, over its last seconds (see [`crate::window::ops`]).
    pub ops: crate::window::ops::LiveOps,
    pub event_rate: EventRate,
    pub events: u64,
    /// When the last chunk arrived and when the step search last ran (agent ns).
    pub last_chunk_ns: u64,
    pub searched_ns: u64,
    /// Where the next step search starts reading (chunks that arrived from then on; 0:
    /// all the flight recorder holds): the start of the step the last search left running,
    /// or, when it found none, where that search started (what it read may hold the
    /// start of the first step).
    pub search_from_ns: u64,
    /// The sampler tick of the next search, and the wait after the last.
    pub search_at_tick: u64,
    pub search_wait_ticks: u64,
    /// Chunks the agent received but could not read.
    pub unreadable_chunks: u64,
    pub triggers: super::triggers::JobTriggers,
}

pub struct Process {
    /// An observer's hot functions, by the agent's second they came in.
    pub hot: VecDeque<(u64, Vec<HotSample>)>,
    pub hello: Hello,
    /// From the kernel (`SO_PEERCRED`), not from what the process says.
    pub pid: u32,
    pub connected: bool,
    pub chunks: u64,
    /// Chunks the process could not send, as its last chunk said.
    pub chunks_lost: u64,
    pub events: u64,
    /// The packets a dump of this process starts with.
    pub preamble: Vec<u8>,
    /// Its steps' durations (ms), the last [`STEPS_KEPT`], and how many in all.
    pub steps: VecDeque<f64>,
    pub steps_total: u64,
    /// Where the last step began (the trace's clock): a step is added once, whether a
    /// chunk or a search found it.
    pub last_step_start: i64,
    /// When its first step began, and the durations (ms) of its steps that began in the
    /// minute after: what its later steps are compared with.
    pub first_step_start: Option<i64>,
    pub first_minute_ms: Vec<f64>,
    /// Where its steps come from, as `opscope steps` says it, and what they count.
    pub steps_found_by: String,
    pub steps_counted: &'static str,
    /// Whether its chunks carry its steps (markers, Keras's batches): no search needed.
    pub steps_in_chunks: bool,
    pub cpu: CpuMeter,
    /// Each live metric's time, per second of the agent's clock and in all, in the
    /// order of [`super::metrics::LIVE_METRICS`].
    pub metrics: Vec<MetricTime>,
    pub rss_bytes: u64,
    /// The GPUs NVML last listed it on.
    pub gpus: Vec<GpuUse>,
    /// A DataLoader worker (its main thread's name, as the sampler read it).
    pub loader: bool,
}

/// A live metric's time in one process: per second of the window, and in all.
#[derive(Default)]
pub struct MetricTime {
    pub window: Seconds,
    pub total_ns: u64,
}

impl MetricTime {
    pub fn add(&mut self, second: u64, ns: u64) {
        self.window.add(second, ns);
        self.total_ns += ns;
    }
}

/// A quantity summed per second of the agent's clock over the last
/// [`Seconds::WINDOW`] seconds, each second when the chunk that told it arrived.
#[derive(Default)]
pub struct Seconds {
    sums: VecDeque<(u64, u64)>,
    /// The second of the first sum: a process younger than the window is judged over
    /// its own life.
    first: Option<u64>,
}

impl Seconds {
    pub const WINDOW: u64 = 10;

    pub fn add(&mut self, second: u64, n: u64) {
        self.first.get_or_insert(second);
        match self.sums.back_mut() {
            Some((s, sum)) if *s == second => *sum += n,
            _ => {
                self.sums.push_back((second, n));
                while self
                    .sums
                    .front()
                    .is_some_and(|(s, _)| *s + Self::WINDOW < second)
                {
                    self.sums.pop_front();
                }
            }
        }
    }

    /// The sum over the last full [`Seconds::WINDOW`] seconds before `now_s`.
    pub fn last_window(&self, now_s: u64) -> u64 {
        self.sums
            .iter()
            .filter(|(s, _)| *s < now_s && *s + Self::WINDOW >= now_s)
            .map(|(_, n)| n)
            .sum()
    }

    /// [`Seconds::last_window`] of ns as a percentage of the window's time (or of the
    /// full seconds since the first sum, when fewer).
    pub fn percent_of_window(&self, now_s: u64) -> f64 {
        let Some(first) = self.first else {
            return 0.0;
        };
        let seconds = now_s.saturating_sub(first).clamp(1, Self::WINDOW);
        self.last_window(now_s) as f64 / (seconds as f64 * 1e9) * 100.0
    }
}

/// CPU use from the process's tick count between two samples.
#[derive(Default)]
pub struct CpuMeter {
    last: Option<(u64, u64)>,
    pub percent: f64,
}

impl CpuMeter {
    pub fn sample(&mut self, now_ns: u64, ticks: u64, ticks_per_s: u64) {
        if let Some((t0, k0)) = self.last {
            let seconds = (now_ns.saturating_sub(t0)) as f64 / 1e9;
            if seconds > 0.0 {
                let busy = ticks.saturating_sub(k0) as f64 / ticks_per_s as f64;
                self.percent = 100.0 * busy / seconds;
            }
        }
        self.last = Some((now_ns, ticks));
    }
}

/// Events per second of the agent's clock (each when the chunk holding it arrived),
/// over the last minute.
#[derive(Default)]
pub struct EventRate {
    events: VecDeque<(u64, u64)>,
}

impl EventRate {
    pub fn add(&mut self, second: u64, n: u64) {
        match self.events.back_mut() {
            Some((s, count)) if *s == second => *count += n,
            _ => {
                self.events.push_back((second, n));
                while self.events.len() as u64 > BUCKETS {
                    self.events.pop_front();
                }
            }
        }
    }

    /// Events in the last full second before `now_s`.
    fn per_s(&self, now_s: u64) -> u64 {
        self.events
            .iter()
            .find(|(s, _)| *s + 1 == now_s)
            .map_or(0, |(_, n)| *n)
    }
}

impl State {
    pub fn new(flight: Flight, started_ns: u64) -> State {
        State {
            pid: std::process::id(),
            started_ns,
            jobs: BTreeMap::new(),
            flight,
            next_process: 1,
            dumps: Vec::new(),
            snapshot_asked_ns: 0,
            gpus: Vec::new(),
        }
    }

    /// Forgets the jobs whose processes are all gone and that sent nothing for
    /// `keep_ns`: an agent runs for months, jobs come and go.
    pub fn forget_ended(&mut self, now: u64, keep_ns: u64) {
        self.jobs.retain(|_, job| {
            job.processes.values().any(|p| p.connected)
                || now.saturating_sub(job.last_chunk_ns) < keep_ns
        });
    }

    /// Adds a process that greeted the agent; its key and its job's.
    pub fn join(&mut self, hello: Hello, pid: u32, uid: u32, now: u64) -> (JobKey, ProcessKey) {
        let key = JobKey {
            uid,
            name: hello.job.clone(),
        };
        let process = self.next_process;
        self.next_process += 1;
        let job = self.jobs.entry(key.clone()).or_insert_with(|| Job {
            source: hello.job_source.clone(),
            processes: BTreeMap::new(),
            ops: Default::default(),
            event_rate: EventRate::default(),
            events: 0,
            last_chunk_ns: now,
            searched_ns: 0,
            search_from_ns: 0,
            search_at_tick: 0,
            search_wait_ticks: 0,
            unreadable_chunks: 0,
            triggers: Default::default(),
        });
        job.processes.insert(process, Process::new(hello, pid));
        (key, process)
    }

    pub fn process_mut(&mut self, job: &JobKey, process: ProcessKey) -> Option<&mut Process> {
        self.jobs.get_mut(job)?.processes.get_mut(&process)
    }

    /// What `uid` may see (root: everything), at `now_ns`.
    pub fn snapshot(&self, uid: u32, now_ns: u64) -> Snapshot {
        let now_s = now_ns.saturating_sub(self.started_ns) / 1_000_000_000;
        let (evicted, evicted_bytes) = self.flight.evicted_early();
        Snapshot {
            agent: AgentState {
                pid: self.pid,
                uptime_s: now_ns.saturating_sub(self.started_ns) as f64 / 1e9,
                flight_bytes: self.flight.bytes() as u64,
                flight_bound: self.flight.bound() as u64,
                flight_window_s: self.flight.window_ns() as f64 / 1e9,
                flight_held_s: self.flight.held_ns(now_ns) as f64 / 1e9,
                flight_evicted_chunks: evicted,
                flight_evicted_bytes: evicted_bytes,
                dumps: self.dumps.clone(),
                gpus: self.gpus.clone(),
            },
            jobs: self
                .jobs
                .iter()
                .filter(|(key, _)| uid == 0 || key.uid == uid)
                .map(|(key, job)| job.state(key, now_s))
                .collect(),
        }
    }
}

/// How long an observer's hot functions are kept: the longest window shown.
pub const HOT_KEPT_S: u64 = 60;
/// How many hot functions a job's state lists.
const HOT_LISTED: usize = 10;

/// One function's sampled running time in an interval, as an observer sends it.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize, PartialEq)]
pub struct HotSample {
    pub function: String,
    pub file: String,
    pub ns: u64,
}

impl Job {
    /// Whether `p` is an observer's entry for a process that streams to the agent
    /// itself (`record`'s sampler, outside a program its recorder is in): the process's
    /// own entry stands for it in the job's list and figures, the observer's carries
    /// its sampled stacks and hot functions.
    pub fn shadowed(&self, p: &Process) -> bool {
        p.hello.observed
            && self
                .processes
                .values()
                .any(|q| !q.hello.observed && q.pid == p.pid)
    }

    /// Its processes' hot functions over the 10 s before `now_s`, the busiest first.
    fn hot_functions(&self, now_s: u64) -> Vec<HotState> {
        let mut by: HashMap<(&str, &str), u64> = HashMap::new();
        for p in self.processes.values() {
            for (_, functions) in p.hot.iter().filter(|(s, _)| *s + 10 >= now_s) {
                for f in functions {
                    *by.entry((f.function.as_str(), f.file.as_str()))
                        .or_default() += f.ns;
                }
            }
        }
        let all: u64 = by.values().sum();
        let mut hot: Vec<HotState> = by
            .into_iter()
            .map(|((function, file), ns)| HotState {
                function: function.to_string(),
                file: file.to_string(),
                ns_10s: ns,
                percent_10s: 100.0 * ns as f64 / all.max(1) as f64,
            })
            .collect();
        hot.sort_by(|a, b| {
            b.ns_10s
                .cmp(&a.ns_10s)
                .then_with(|| a.function.cmp(&b.function))
        });
        hot.truncate(HOT_LISTED);
        hot
    }

    fn state(&self, key: &JobKey, now_s: u64) -> JobState {
        let processes: Vec<ProcessState> = self
            .processes
            .values()
            .filter(|p| !self.shadowed(p))
            .map(|p| ProcessState {
                pid: p.pid,
                ppid: p.hello.ppid,
                role: role(p, self.processes.values()),
                rank: p.hello.rank,
                local_rank: p.hello.local_rank,
                world_size: p.hello.world_size,
                command: p.hello.command.clone(),
                session: p.hello.session.clone(),
                file: p.hello.file.clone(),
                connected: p.connected,
                events: p.events,
                chunks: p.chunks,
                chunks_lost: p.chunks_lost,
                cpu_percent: if p.connected { p.cpu.percent } else { 0.0 },
                metrics: super::metrics::LIVE_METRICS
                    .iter()
                    .zip(&p.metrics)
                    .flat_map(|(m, time)| {
                        let percent = if p.connected {
                            time.window.percent_of_window(now_s)
                        } else {
                            0.0
                        };
                        [
                            (super::metrics::percent_key(m), percent),
                            (super::metrics::ms_key(m), time.total_ns as f64 / 1e6),
                        ]
                    })
                    .collect(),
                rss_bytes: if p.connected { p.rss_bytes } else { 0 },
                gpus: if p.connected {
                    p.gpus.clone()
                } else {
                    Vec::new()
                },
                steps: p.step_state(),
            })
            .collect();
        let mut gpus: Vec<usize> = processes
            .iter()
            .flat_map(|p| p.gpus.iter().map(|g| g.index))
            .collect();
        gpus.sort_unstable();
        gpus.dedup();
        JobState {
            job: key.name.clone(),
            source: self.source.clone(),
            uid: key.uid,
            ended: !self.processes.values().any(|p| p.connected),
            steps: self.steps(),
            events_per_s: self.event_rate.per_s(now_s),
            events: self.events,
            chunks_lost: self.unreadable_chunks
                + self.processes.values().map(|p| p.chunks_lost).sum::<u64>(),
            cpu_percent: processes.iter().map(|p| p.cpu_percent).sum(),
            metrics: super::metrics::LIVE_METRICS
                .iter()
                .map(|m| {
                    let key = super::metrics::percent_key(m);
                    let sum = processes.iter().map(|p| p.metric(&key)).sum();
                    (key, sum)
                })
                .collect(),
            rss_bytes: processes.iter().map(|p| p.rss_bytes).sum(),
            gpus,
            gpu_memory_bytes: processes
                .iter()
                .flat_map(|p| &p.gpus)
                .filter_map(|g| g.memory_bytes)
                .sum(),
            top_ops: self.ops.rows.clone(),
            ops_read_s: self.ops.read_s,
            hot_functions: self.hot_functions(now_s),
            advice: growth_advice(&self.steps()).or_else(|| self.ops.advice.clone()),
            processes,
        }
    }

    /// The job's steps: those of its lowest rank that has any (rank 0 in a healthy
    /// job), else of its first process that has any, however they were found.
    pub fn steps(&self) -> StepState {
        StepState {
            search_pending: !self.steps_in_chunks() && self.last_chunk_ns > self.searched_ns,
            ..self
                .step_process()
                .map_or_else(StepState::default, Process::step_state)
        }
    }

    /// The job's steps so far (what triggers judge).
    pub fn step_count(&self) -> u64 {
        self.step_process().map_or(0, |p| p.steps_total)
    }

    /// Whether some process's chunks carry the job's steps.
    pub fn steps_in_chunks(&self) -> bool {
        self.processes.values().any(|p| p.steps_in_chunks)
    }

    /// The process whose events the step search reads: the lowest rank with events,
    /// else the process with the most events that is not a worker.
    pub fn search_process(&self) -> Option<(ProcessKey, &Process)> {
        let with_events = || self.processes.iter().filter(|(_, p)| p.events > 0);
        with_events()
            .filter(|(_, p)| p.hello.rank.is_some())
            .min_by_key(|(_, p)| p.hello.rank)
            .or_else(|| {
                with_events()
                    .filter(|(_, p)| !is_worker(p, self.processes.values()))
                    .max_by_key(|(_, p)| p.events)
            })
            .map(|(k, p)| (*k, p))
    }

    fn step_process(&self) -> Option<&Process> {
        let with_steps = || self.processes.values().filter(|p| p.steps_total > 0);
        with_steps()
            .filter(|p| p.hello.rank.is_some())
            .min_by_key(|p| p.hello.rank)
            .or_else(|| with_steps().next())
    }

    /// The steps completed after the first `seen` of the job's steps: for each, its
    /// number (from 1), its time and the median of the up to 100 before it (none with
    /// fewer than 5 before it). Only the steps still kept are looked at.
    pub fn steps_after(&self, seen: u64) -> Vec<(u64, f64, Option<f64>)> {
        let Some(p) = self.step_process() else {
            return Vec::new();
        };
        let first_kept = p.steps_total - p.steps.len() as u64;
        let start = seen.max(first_kept);
        (start..p.steps_total)
            .map(|number| {
                let i = (number - first_kept) as usize;
                let before: Vec<f64> = p.steps.range(i.saturating_sub(100)..i).copied().collect();
                let median = if before.len() >= 5 {
                    median(before)
                } else {
                    None
                };
                (number + 1, p.steps[i], median)
            })
            .collect()
    }
}

impl Process {
    /// A process that has just connected.
    pub fn new(hello: Hello, pid: u32) -> Process {
        Process {
            hello,
            pid,
            connected: true,
            chunks: 0,
            chunks_lost: 0,
            events: 0,
            preamble: Vec::new(),
            steps: VecDeque::new(),
            steps_total: 0,
            last_step_start: i64::MIN,
            first_step_start: None,
            first_minute_ms: Vec::new(),
            steps_found_by: String::new(),
            steps_counted: "",
            steps_in_chunks: false,
            cpu: CpuMeter::default(),
            metrics: super::metrics::LIVE_METRICS
                .iter()
                .map(|_| MetricTime::default())
                .collect(),
            rss_bytes: 0,
            gpus: Vec::new(),
            loader: false,
            hot: VecDeque::new(),
        }
    }

    /// Keeps an observer's hot functions of the interval ending at `now_s` (the
    /// agent's second), as much as [`HOT_KEPT_S`] seconds of them.
    pub fn add_hot(&mut self, now_s: u64, functions: Vec<HotSample>) {
        self.hot.push_back((now_s, functions));
        while self
            .hot
            .front()
            .is_some_and(|(s, _)| *s + HOT_KEPT_S < now_s)
        {
            self.hot.pop_front();
        }
    }

    /// Adds the step that began at `start_ns` (the trace's clock) and lasted `ms`,
    /// unless a step that began there or later was added already.
    pub fn add_step(&mut self, start_ns: i64, ms: f64) -> bool {
        if start_ns <= self.last_step_start {
            return false;
        }
        self.last_step_start = start_ns;
        let first = *self.first_step_start.get_or_insert(start_ns);
        if start_ns - first < FIRST_MINUTE_NS {
            self.first_minute_ms.push(ms);
        }
        if self.steps.len() == STEPS_KEPT {
            self.steps.pop_front();
        }
        self.steps.push_back(ms);
        self.steps_total += 1;
        true
    }

    fn step_state(&self) -> StepState {
        StepState {
            found_by: self.steps_found_by.clone(),
            counted: self.steps_counted.to_string(),
            first_minute_median_ms: median(self.first_minute_ms.clone()),
            first_minute_steps: self.first_minute_ms.len() as u64,
            ..step_state(&self.steps, self.steps_total)
        }
    }
}

/// What a process is in its job, by the one name every command gives it (see
/// `opscope_analysis::roles`): `rank 0 (pid 41)`, `DataLoader worker (pid 45)`, else its
/// command line (`torchrun --nproc-per-node 2 train.py (pid 40)`).
fn role<'a>(p: &Process, all: impl Iterator<Item = &'a Process> + Clone) -> String {
    let pid = p.pid;
    // A DataLoader worker inherits its rank's environment (RANK included): it is named
    // as what it is, not by that rank.
    match (p.loader, p.hello.rank) {
        (true, _) => format!("DataLoader worker (pid {pid})"),
        (false, Some(r)) if !is_child_of_rank(p, all) => format!("rank {r} (pid {pid})"),
        _ if p.hello.command.is_empty() => format!("process {pid}"),
        _ => format!(
            "{} (pid {pid})",
            opscope_analysis::roles::short_command(&p.hello.command)
        ),
    }
}

/// Whether the process was started by a process of its own rank (a worker it forked,
/// which inherits `RANK`): not the rank's process itself.
fn is_child_of_rank<'a>(p: &Process, mut all: impl Iterator<Item = &'a Process>) -> bool {
    all.any(|q| q.pid == p.hello.ppid && q.pid != p.pid && q.hello.rank == p.hello.rank)
}

/// Whether the process is a DataLoader worker or another child of the job's process.
fn is_worker<'a>(p: &Process, mut all: impl Iterator<Item = &'a Process>) -> bool {
    p.loader || all.any(|q| q.pid == p.hello.ppid && q.pid != p.pid)
}

/// The job's step time grew since its first minute: the median of its last 10 steps
/// against its first minute's, once the job has steps past that minute.
fn growth_advice(steps: &StepState) -> Option<String> {
    let (first, last) = (steps.first_minute_median_ms?, steps.recent_ms.len());
    if last < 10 || steps.count as usize <= steps_in_first_minute(steps) + 10 {
        return None;
    }
    let now = median(steps.recent_ms.iter().rev().take(10).copied().collect())?;
    let growth = 100.0 * (now - first) / first;
    (first > 0.0 && growth >= GROWTH_PCT).then(|| {
        format!(
            "its step time grew {growth:.0} % since its first minute ({first:.1} ms → {now:.1} ms              median; step_growth)"
        )
    })
}

fn steps_in_first_minute(steps: &StepState) -> usize {
    steps.first_minute_steps as usize
}

fn step_state(steps: &VecDeque<f64>, total: u64) -> StepState {
    let recent: Vec<f64> = steps.iter().rev().take(100).rev().copied().collect();
    let last10: Vec<f64> = steps.iter().rev().take(10).copied().collect();
    let before: Vec<f64> = steps.iter().rev().skip(10).take(10).copied().collect();
    let trend = match (median(last10), median(before)) {
        (Some(a), Some(b)) if b > 0.0 => Some(100.0 * (a - b) / b),
        _ => None,
    };
    StepState {
        found_by: String::new(),
        counted: String::new(),
        count: total,
        last_ms: steps.back().copied(),
        median_ms: median(recent.clone()),
        trend_percent: trend,
        recent_ms: recent,
        search_pending: false,
        first_minute_median_ms: None,
        first_minute_steps: 0,
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A share over the last 10 full seconds, or over a younger process's own seconds;
    /// the second in progress and seconds past the window are not in it.
    #[test]
    fn seconds_share_their_window() {
        let mut talk = Seconds::default();
        assert_eq!(talk.percent_of_window(5), 0.0);
        talk.add(3, 500_000_000);
        talk.add(4, 500_000_000);
        talk.add(5, 900_000_000);
        assert_eq!(talk.last_window(5), 1_000_000_000);
        assert!((talk.percent_of_window(5) - 50.0).abs() < 1e-9);
        assert_eq!(talk.last_window(15), 900_000_000);
        assert!((talk.percent_of_window(15) - 9.0).abs() < 1e-9);
        assert_eq!(talk.last_window(16), 0);
    }

    fn hello(pid: u32, ppid: u32, rank: Option<u32>) -> Hello {
        Hello {
            version: 1,
            pid,
            ppid,
            job: "j".into(),
            rank,
            command: format!("python {pid}"),
            ..Hello::default()
        }
    }

    /// An observer's hot functions: summed over the job's processes for the last 10 s
    /// only, the busiest first with its share; older ones are let go after a minute.
    #[test]
    fn hot_functions_sum_the_last_ten_seconds() {
        let mut state = State::new(Flight::new(1 << 20, 60_000_000_000), 0);
        let hot = |function: &str, ns| HotSample {
            function: function.into(),
            file: "t.py".into(),
            ns,
        };
        let (job, a) = state.join(hello(10, 1, None), 10, 1000, 0);
        let (_, b) = state.join(hello(11, 10, None), 11, 1000, 0);
        let p = state.process_mut(&job, a).unwrap();
        p.add_hot(1, vec![hot("old", 900)]);
        p.add_hot(20, vec![hot("heavy", 300), hot("light", 100)]);
        state
            .process_mut(&job, b)
            .unwrap()
            .add_hot(25, vec![hot("heavy", 300)]);
        let snap = state.snapshot(1000, 25 * 1_000_000_000);
        let listed: Vec<(String, u64, f64)> = snap.jobs[0]
            .hot_functions
            .iter()
            .map(|f| (f.function.clone(), f.ns_10s, f.percent_10s))
            .collect();
        assert_eq!(
            listed,
            vec![
                ("heavy".into(), 600, 600.0 / 7.0),
                ("light".into(), 100, 100.0 / 7.0)
            ]
        );
        let p = state.process_mut(&job, a).unwrap();
        p.add_hot(100, Vec::new());
        assert_eq!(p.hot.len(), 1);
    }

    /// A recorded process with an observer beside it (`record`'s sampler): listed once,
    /// by its own entry, with the observer's hot functions; an observer alone (an
    /// attached process) is listed.
    #[test]
    fn an_observer_of_a_recorded_process_is_not_listed_twice() {
        let mut state = State::new(Flight::new(1 << 20, 60_000_000_000), 0);
        let (job, _) = state.join(hello(10, 1, None), 10, 1000, 0);
        let observer = Hello {
            observed: true,
            ..hello(10, 9, None)
        };
        let (_, watcher) = state.join(observer.clone(), 10, 1000, 0);
        state.process_mut(&job, watcher).unwrap().add_hot(
            1,
            vec![HotSample {
                function: "heavy".into(),
                file: "t.py".into(),
                ns: 500,
            }],
        );
        let (_, alone) = state.join(
            Hello {
                pid: 20,
                ..observer
            },
            20,
            1000,
            0,
        );
        let snap = state.snapshot(1000, 2 * 1_000_000_000);
        let pids: Vec<(u32, u32)> = snap.jobs[0]
            .processes
            .iter()
            .map(|p| (p.pid, p.ppid))
            .collect();
        assert_eq!(pids, vec![(10, 1), (20, 9)]);
        assert_eq!(snap.jobs[0].hot_functions[0].function, "heavy");
        let job_state = &state.jobs[&job];
        assert!(job_state.shadowed(&job_state.processes[&watcher]));
        assert!(!job_state.shadowed(&job_state.processes[&alone]));
    }

    #[test]
    fn roles_come_from_ranks_and_parents() {
        let mut state = State::new(Flight::new(1 << 20, 60_000_000_000), 0);
        for (pid, ppid, rank) in [
            (10, 1, None),     // torchrun
            (11, 10, Some(0)), // rank 0
            (12, 10, Some(1)), // rank 1
            (13, 11, Some(0)), // rank 0's DataLoader worker
            (14, 11, Some(0)), // another child of rank 0
            (20, 1, None),     // a lone process
            (30, 1, None),     // a training process without ranks…
            (31, 30, None),    // …and its DataLoader worker
        ] {
            let (job, process) = state.join(hello(pid, ppid, rank), pid, 1000, 0);
            // The sampler reads a DataLoader worker's name.
            state.process_mut(&job, process).unwrap().loader = matches!(pid, 13 | 31);
        }
        let snap = state.snapshot(1000, 0);
        let roles: Vec<(u32, String)> = snap.jobs[0]
            .processes
            .iter()
            .map(|p| (p.pid, p.role.clone()))
            .collect();
        assert_eq!(
            roles,
            [
                (10, "python 10 (pid 10)"),
                (11, "rank 0 (pid 11)"),
                (12, "rank 1 (pid 12)"),
                (13, "DataLoader worker (pid 13)"),
                (14, "python 14 (pid 14)"),
                (20, "python 20 (pid 20)"),
                (30, "python 30 (pid 30)"),
                (31, "DataLoader worker (pid 31)"),
            ]
            .map(|(pid, role)| (pid, role.to_string()))
            .to_vec()
        );
        // Another user sees none of it; root sees it.
        assert!(state.snapshot(1001, 0).jobs.is_empty());
        assert_eq!(state.snapshot(0, 0).jobs.len(), 1);

        // A job is kept while a process is there, and for a while after the last goes.
        let key = state.jobs.keys().next().unwrap().clone();
        state.forget_ended(100, 10);
        assert_eq!(state.jobs.len(), 1, "its processes are still connected");
        for p in state.jobs.get_mut(&key).unwrap().processes.values_mut() {
            p.connected = false;
        }
        state.forget_ended(5, 10);
        assert_eq!(state.jobs.len(), 1, "ended 5 ns ago");
        state.forget_ended(100, 10);
        assert!(state.jobs.is_empty());
    }

    /// A process whose steps take 100 ms in its first minute and 130 ms after has the
    /// growth said; one whose steps stay at 100 ms has none; nor has one too young to
    /// have steps past its first minute.
    #[test]
    fn step_growth_since_the_first_minute() {
        let hello = Hello::default();
        let mut grows = Process::new(hello.clone(), 1);
        let mut steady = Process::new(hello, 2);
        let second = 1_000_000_000i64;
        for k in 0..60 {
            grows.add_step(k * second, 100.0);
            steady.add_step(k * second, 100.0);
        }
        assert!(
            growth_advice(&grows.step_state()).is_none(),
            "no steps past the minute yet"
        );
        for k in 60..80 {
            grows.add_step(k * second, 130.0);
            steady.add_step(k * second, 100.0);
        }
        let said = growth_advice(&grows.step_state()).unwrap();
        assert!(said.starts_with("its step time grew 30 %"), "{said}");
        assert!(said.contains("100.0 ms → 130.0 ms"), "{said}");
        assert_eq!(growth_advice(&steady.step_state()), None);
    }

    #[test]
    fn steps_give_last_median_and_trend() {
        let mut steps = VecDeque::new();
        for _ in 0..10 {
            steps.push_back(100.0);
        }
        for _ in 0..10 {
            steps.push_back(110.0);
        }
        let s = step_state(&steps, 25);
        assert_eq!(s.count, 25);
        assert_eq!(s.last_ms, Some(110.0));
        assert_eq!(s.median_ms, Some(105.0));
        assert!((s.trend_percent.unwrap() - 10.0).abs() < 1e-9);
    }
}
