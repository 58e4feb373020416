//! What the agent knows at one moment, as `opscope top` shows it and `top --once
//! --format json` prints it: the agent's own state, then each job with its processes,
//! step times and busiest ops over the last 1, 10 and 60 seconds.

use opscope_analysis::report::{Column, Line, Report, Reported, Table, Value};
use serde::{Deserialize, Serialize};

use super::metrics::{percent_key, LIVE_METRICS};

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct Snapshot {
    pub agent: AgentState,
    pub jobs: Vec<JobState>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct AgentState {
    pub pid: u32,
    pub uptime_s: f64,
    /// The flight recorder: bytes held, its bound, the seconds it keeps and how far
    /// back it holds now.
    pub flight_bytes: u64,
    pub flight_bound: u64,
    pub flight_window_s: f64,
    pub flight_held_s: f64,
    /// Chunks dropped to keep the bound before their time was up.
    pub flight_evicted_chunks: u64,
    pub flight_evicted_bytes: u64,
    /// Dumps written by triggers.
    pub dumps: Vec<String>,
    /// The host's GPUs as NVML reads them each second (none without NVIDIA's driver).
    pub gpus: Vec<GpuState>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct GpuState {
    pub index: usize,
    pub utilization_percent: f64,
    pub memory_used_bytes: u64,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct JobState {
    pub job: String,
    /// Where the name came from: `--job`, `SLURM_JOB_ID`, `TORCHELASTIC_RUN_ID`,
    /// `kubernetes pod`, or `session` (the session directory).
    pub source: String,
    pub uid: u32,
    /// None of its processes is there any more (the agent keeps it a while).
    #[serde(default)]
    pub ended: bool,
    pub processes: Vec<ProcessState>,
    pub steps: StepState,
    /// Events (slices and instants) received over the last full second.
    pub events_per_s: u64,
    pub events: u64,
    /// Chunks the processes could not send (full socket, no agent) and chunks the
    /// agent could not read.
    pub chunks_lost: u64,
    pub cpu_percent: f64,
    /// Each live metric's share of the last 10 s, its processes' summed
    /// (`communication_percent`; see [`super::metrics`]).
    #[serde(flatten)]
    pub metrics: std::collections::BTreeMap<String, f64>,
    pub rss_bytes: u64,
    /// The GPUs its processes use (NVML's compute processes), by index, and their
    /// memory on them all.
    pub gpus: Vec<usize>,
    pub gpu_memory_bytes: u64,
    /// Its busiest ops, as `stats op` counts them (see `window::ops`), and the
    /// seconds of its events they were found in.
    pub top_ops: Vec<OpState>,
    #[serde(default)]
    pub ops_read_s: f64,
    /// `advise`'s top finding over the same events (see `window::ops`).
    #[serde(default)]
    pub advice: Option<String>,
    /// Its hot functions over the last 10 s, from the stacks an observer (`opscope
    /// attach`, `record --pid`) samples: the busiest first.
    #[serde(default)]
    pub hot_functions: Vec<HotState>,
}

/// A function's share of a job's sampled running time.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct HotState {
    pub function: String,
    pub file: String,
    /// Running time sampled with it innermost (its own time), over the last 10 s.
    pub ns_10s: u64,
    /// That time's share of all the job's sampled running time then.
    pub percent_10s: f64,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct ProcessState {
    pub pid: u32,
    pub ppid: u32,
    /// `rank N`, `worker` (a process the job's process of that rank started: a
    /// DataLoader worker), `launcher` (it started the job's other processes) or `process`.
    pub role: String,
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    pub command: String,
    pub session: String,
    pub file: Option<String>,
    pub connected: bool,
    pub events: u64,
    pub chunks: u64,
    pub chunks_lost: u64,
    pub cpu_percent: f64,
    /// Each live metric's share of the last 10 s (`communication_percent`: of one
    /// thread, as CPU is of one core, so a process whose two threads communicate all
    /// the time says 200 %) and its time since the process connected
    /// (`communication_ms`); see [`super::metrics`].
    #[serde(flatten)]
    pub metrics: std::collections::BTreeMap<String, f64>,
    pub rss_bytes: u64,
    /// The GPUs it uses, as NVML lists it among their compute processes.
    pub gpus: Vec<GpuUse>,
    pub steps: StepState,
}

impl JobState {
    /// A live metric's figure by its snapshot key (0 where the agent did not give it).
    pub fn metric(&self, key: &str) -> f64 {
        self.metrics.get(key).copied().unwrap_or(0.0)
    }
}

impl ProcessState {
    /// A live metric's figure by its snapshot key (0 where the agent did not give it).
    pub fn metric(&self, key: &str) -> f64 {
        self.metrics.get(key).copied().unwrap_or(0.0)
    }
}

/// A process's use of one GPU.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct GpuUse {
    pub index: usize,
    /// Its memory there; `None` where the driver does not say.
    pub memory_bytes: Option<u64>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct StepState {
    /// Where the steps come from, as `opscope steps` says it (`from step markers`,
    /// `from the repeating op sequence`); empty without steps.
    pub found_by: String,
    /// What `count` counts: every step since the process connected, or since the
    /// first search (which reads the last seconds of its events).
    #[serde(default)]
    pub counted: String,
    pub count: u64,
    pub last_ms: Option<f64>,
    pub median_ms: Option<f64>,
    /// The median of the last 10 steps against that of the 10 before, in percent.
    pub trend_percent: Option<f64>,
    /// The durations of the last steps (up to 100), in ms, oldest first.
    pub recent_ms: Vec<f64>,
    /// The median step of the job's first minute (from its first step), and how many
    /// steps began in it.
    #[serde(default)]
    pub first_minute_median_ms: Option<f64>,
    #[serde(default)]
    pub first_minute_steps: u64,
    /// Whether events arrived since the step search last read the job (its chunks mark
    /// no steps): the count may grow at the next search.
    #[serde(default)]
    pub search_pending: bool,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct OpState {
    pub name: String,
    pub kind: String,
    pub calls_1s: u64,
    pub calls_10s: u64,
    pub calls_60s: u64,
    pub time_ms_1s: f64,
    pub time_ms_10s: f64,
    pub time_ms_60s: f64,
    /// Over 10 s: the time not in the ops it called, and its device work's.
    #[serde(default)]
    pub self_ms_10s: f64,
    #[serde(default)]
    pub accelerator_ms_10s: f64,
}

/// A time in ms as a report value (`-` for none).
pub fn ms(v: Option<f64>) -> Value {
    match v {
        Some(ms) => Value::Duration(ms * 1e6),
        None => Value::text("-"),
    }
}

/// A process's step count, `-` for a process that makes none (a worker, a launcher).
pub fn steps_text(count: u64) -> Value {
    match count {
        0 => Value::text("-"),
        n => Value::Count(n as i64),
    }
}

/// A step-time trend in percent as a report value (`-` for none).
pub fn trend(v: Option<f64>) -> Value {
    match v {
        Some(p) => Value::text(format!("{p:+.1}%")),
        None => Value::text("-"),
    }
}

impl Reported for Snapshot {
    fn report(&self) -> Report {
        let mut report = Report::default();
        let a = &self.agent;
        report.line(
            Line::of("agent ")
                .text(a.pid.to_string())
                .text(format!(", up {:.0} s; flight recorder ", a.uptime_s))
                .value(Value::Bytes(a.flight_bytes as i64))
                .text(" of ")
                .value(Value::Bytes(a.flight_bound as i64))
                .text(format!(
                    ", {:.0} s held of {:.0} s",
                    a.flight_held_s, a.flight_window_s
                )),
        );
        for gpu in &a.gpus {
            report.line(
                Line::of(format!("GPU {}: ", gpu.index))
                    .value(Value::percent(gpu.utilization_percent, 0))
                    .text(" busy, ")
                    .value(Value::Bytes(gpu.memory_used_bytes as i64))
                    .text(" used"),
            );
        }
        if self.jobs.is_empty() {
            report.line(Line::of("no jobs (start one with `opscope record -- CMD`)"));
        }
        for job in &self.jobs {
            report.blank();
            let ended = if job.ended { ", ended" } else { "" };
            let mut line = Line::of(format!("job {} ({}{ended}): ", job.job, job.source))
                .value(Value::Count(job.processes.len() as i64))
                .text(" processes, ")
                .value(Value::Count(job.events_per_s as i64))
                .text(" events/s, CPU ")
                .value(Value::percent(job.cpu_percent, 0));
            for m in LIVE_METRICS {
                line = line
                    .text(format!(", {} ", m.name))
                    .value(Value::percent(job.metric(&percent_key(m)), 0));
            }
            line = line
                .text(", RSS ")
                .value(Value::Bytes(job.rss_bytes as i64));
            if !job.gpus.is_empty() {
                line = line
                    .text(format!(", {}: ", gpu_names(&job.gpus)))
                    .value(Value::Bytes(job.gpu_memory_bytes as i64));
            }
            if job.steps.count > 0 {
                line = line
                    .text(format!(", {} steps, last ", job.steps.count))
                    .value(ms(job.steps.last_ms))
                    .text(", median ")
                    .value(ms(job.steps.median_ms))
                    .text(", trend ")
                    .value(trend(job.steps.trend_percent));
            }
            if job.chunks_lost > 0 {
                line = line.text(format!(", {} chunks lost", job.chunks_lost));
            }
            report.line(line);
            if job.steps.count > 0 {
                report.line(Line::of(format!(
                    "steps {}; counted: {}",
                    job.steps.found_by, job.steps.counted
                )));
            }
            let mut columns = vec![
                Column::numeric("pid"),
                Column::text("role"),
                Column::numeric("CPU"),
            ];
            columns.extend(
                LIVE_METRICS
                    .iter()
                    .map(|m| Column::numeric(m.window_column)),
            );
            columns.extend([
                Column::numeric("RSS"),
                Column::text("GPU memory"),
                Column::numeric("events"),
                Column::numeric("steps"),
                Column::numeric("last step"),
                Column::text("command"),
            ]);
            let mut processes = Table::new(columns);
            for p in &job.processes {
                let mut row = vec![
                    Value::Count(p.pid as i64),
                    Value::text(if p.connected {
                        p.role.clone()
                    } else {
                        format!("{} (ended)", p.role)
                    }),
                    Value::percent(p.cpu_percent, 0),
                ];
                row.extend(
                    LIVE_METRICS
                        .iter()
                        .map(|m| Value::percent(p.metric(&percent_key(m)), 0)),
                );
                row.extend([
                    Value::Bytes(p.rss_bytes as i64),
                    Value::text(gpu_use_text(&p.gpus)),
                    Value::Count(p.events as i64),
                    steps_text(p.steps.count),
                    ms(p.steps.last_ms),
                    Value::text(p.command.clone()),
                ]);
                processes.rows.push(row);
            }
            report.table(processes);
            let mut ops = Table::new(vec![
                Column::text("op"),
                Column::text("kind"),
                Column::numeric("calls/s"),
                Column::numeric("time 1 s"),
                Column::numeric("calls 10 s"),
                Column::numeric("time 10 s"),
                Column::numeric("calls 60 s"),
                Column::numeric("time 60 s"),
            ]);
            ops.empty = Some("(no ops in the last minute)");
            if let Some(advice) = &job.advice {
                report.line(Line::of(format!("advice: {advice}")));
            }
            if !job.top_ops.is_empty() {
                report.line(Line::of(format!(
                    "ops as `stats op` counts them, in the last {:.1} s of events read \
                     (seconds before the newest)",
                    job.ops_read_s
                )));
            }
            for op in &job.top_ops {
                ops.rows.push(vec![
                    Value::text(op.name.clone()),
                    Value::text(op.kind.clone()),
                    Value::Count(op.calls_1s as i64),
                    Value::Duration(op.time_ms_1s * 1e6),
                    Value::Count(op.calls_10s as i64),
                    Value::Duration(op.time_ms_10s * 1e6),
                    Value::Count(op.calls_60s as i64),
                    Value::Duration(op.time_ms_60s * 1e6),
                ]);
            }
            report.table(ops);
            if !job.hot_functions.is_empty() {
                report.line(Line::of(
                    "hot functions of its sampled stacks, last 10 s".to_string(),
                ));
                let mut hot = Table::new(vec![
                    Column::numeric("own %"),
                    Column::numeric("own time"),
                    Column::text("function (file)"),
                ]);
                for f in &job.hot_functions {
                    hot.rows.push(vec![
                        Value::percent(f.percent_10s, 1),
                        Value::Duration(f.ns_10s as f64),
                        Value::text(format!("{} ({})", f.function, f.file)),
                    ]);
                }
                report.table(hot);
            }
        }
        report
    }
}

/// `GPU 1` or `GPUs 0,1`.
pub fn gpu_names(indices: &[usize]) -> String {
    let list: Vec<String> = indices.iter().map(|i| i.to_string()).collect();
    let noun = if indices.len() == 1 { "GPU" } else { "GPUs" };
    format!("{noun} {}", list.join(","))
}

/// A process's GPUs and its memory on each (`1: 530 MiB`), or `-`.
pub fn gpu_use_text(gpus: &[GpuUse]) -> String {
    if gpus.is_empty() {
        return "-".into();
    }
    let uses: Vec<String> = gpus
        .iter()
        .map(|g| match g.memory_bytes {
            Some(bytes) => format!(
                "{}: {}",
                g.index,
                opscope_engine::render::text(&Value::Bytes(bytes as i64))
            ),
            None => format!("{}: ?", g.index),
        })
        .collect();
    uses.join(", ")
}
