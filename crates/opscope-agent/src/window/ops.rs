//! `top`'s ops: `stats op`'s rows ([`op_stats`], the one definition of an op's calls
//! and times) over the last 1, 10 and 60 s of each job's events, read from the flight
//! recorder every few seconds while someone looks, and once more when a process
//! goes. Before, `top` tallied each slice by name as chunks arrived: an overload that
//! calls itself (torch's `aten::div`) counted twice there and once in `stats op`.

use std::time::Duration;

use hashbrown::HashMap;
use opscope_analysis::advise::{advise, AdviseOptions};
use opscope_analysis::attribution::is_op_slice;
use opscope_analysis::op_stats::{op_stats, OpRow, OpStatsOptions};
use opscope_analysis::steps::{KERAS_BATCH_MARK, KERAS_STEP_MARK};
use opscope_analysis::window::Window;
use opscope_analysis::Context;
use opscope_model::{SliceKind, Trace};

use crate::snapshot::OpState;
use crate::state::JobKey;
use crate::Shared;

/// How often a job's ops are analysed again (sampler ticks of a second).
const EVERY_TICKS: u64 = 2;
/// What an analysis reads: each process's chunks of the last minute, newest first, at
/// most this many bytes of them (about 200,000 events, a few seconds of a busy
/// process), so that it costs the agent a bounded time and memory however busy the
/// job (the model of 1 MiB of chunks took the agent past 140 MiB); what it covers is
/// said (`ops_read_s`).
const SPAN: Duration = Duration::from_secs(60);
const MAX_BYTES: usize = 512 << 10;
/// The windows of the figures, in seconds before the newest event read.
const WINDOWS_S: [i64; 3] = [1, 10, 60];
/// Ops listed per job.
const TOP_OPS: usize = 20;

/// A job's ops as last analysed.
#[derive(Default)]
pub struct LiveOps {
    pub rows: Vec<OpState>,
    /// Seconds of events the analysis read (at most [`SPAN`]).
    pub read_s: f64,
    /// When it ran (agent ns), and the tick of the next.
    pub analysed_ns: u64,
    pub at_tick: u64,
    /// `advise`'s top finding over the same events, in one line.
    pub advice: Option<String>,
}

impl LiveOps {
    /// Has the next refresh analyse the job again (a process went: its last ops are
    /// in now).
    pub fn again(&mut self) {
        self.at_tick = 0;
        self.analysed_ns = 0;
    }
}

/// Analyses every job that received chunks since its last analysis and is due.
pub fn refresh(shared: &Shared, tick: u64, now: u64) {
    run(shared, now, |ops| tick >= ops.at_tick, tick + EVERY_TICKS);
}

/// Analyses the jobs not analysed in the last `stale` (nobody looked: the sampler
/// left them alone), for a snapshot about to be taken.
pub fn refresh_unseen(shared: &Shared, now: u64, stale: Duration) {
    let stale = stale.as_nanos() as u64;
    run(
        shared,
        now,
        |ops| now.saturating_sub(ops.analysed_ns) >= stale,
        0,
    );
}

fn run(shared: &Shared, now: u64, due: impl Fn(&LiveOps) -> bool, next_tick: u64) {
    let since = now.saturating_sub(SPAN.as_nanos() as u64);
    let work: Vec<(JobKey, super::Recent)> = {
        let state = shared.state();
        state
            .jobs
            .iter()
            .filter(|(_, job)| job.last_chunk_ns > job.ops.analysed_ns && due(&job.ops))
            .map(|(key, job)| {
                let processes = job
                    .processes
                    .iter()
                    .filter_map(|(&process, p)| {
                        let (bytes, _) =
                            super::recent_bytes(&state.flight, process, p, since, MAX_BYTES)?;
                        Some((p.pid, bytes))
                    })
                    .collect();
                (key.clone(), processes)
            })
            .collect()
    };
    for (key, processes) in work {
        let trace = super::read(&processes);
        let (rows, read_s) = analyse(&trace);
        let advice = advice(&trace);
        drop(trace);
        let mut state = shared.state();
        if let Some(job) = state.jobs.get_mut(&key) {
            job.ops = LiveOps {
                rows,
                read_s,
                analysed_ns: now,
                at_tick: next_tick,
                advice,
            };
        }
    }
}

/// `advise`'s top finding over the job's last minute, in one line: what `top` says
/// the job should change (or, with nothing to change, where its time goes).
pub fn advice(trace: &Trace) -> Option<String> {
    if trace.slices.is_empty() {
        return None;
    }
    let cx = Context::new(trace);
    let advice = advise(&cx, &AdviseOptions::default());
    let top = advice.findings.first()?;
    Some(if top.saving_ns > 0 {
        format!(
            "{} (up to {:.0} % of its time; {})",
            top.title, top.saving_pct, top.rule
        )
    } else {
        format!("{} ({})", top.title, top.rule)
    })
}

/// The busiest ops of `trace` by time over its last 10 s, with their 1, 10 and 60 s
/// figures (before its newest event), and the seconds of events it holds. Steps are
/// left out: `top` shows them as steps.
pub fn analyse(trace: &Trace) -> (Vec<OpState>, f64) {
    let s = &trace.slices;
    let (mut first, mut last) = (i64::MAX, i64::MIN);
    let mut kinds: HashMap<&str, SliceKind> = HashMap::new();
    for i in (0..s.len()).filter(|&i| is_op_slice(trace, i)) {
        first = first.min(s.ts[i]);
        last = last.max(s.ts[i] + s.dur[i]);
        kinds.entry(trace.str(s.name[i])).or_insert(s.kind(i));
    }
    if first > last {
        return (Vec::new(), 0.0);
    }
    let cx = Context::new(trace);
    let windows: Vec<HashMap<String, OpRow>> = WINDOWS_S
        .iter()
        .map(|w| {
            let options = OpStatsOptions {
                window: Window::Span(last - w * 1_000_000_000, i64::MAX),
                ..Default::default()
            };
            let rows = op_stats(&cx, &options);
            rows.into_iter().map(|r| (r.name.clone(), r)).collect()
        })
        .collect();
    let mut ops: Vec<OpState> = windows[2]
        .values()
        .filter_map(|sixty| {
            let kind = *kinds.get(sixty.name.as_str())?;
            if kind == SliceKind::Step
                || [KERAS_BATCH_MARK, KERAS_STEP_MARK].contains(&&*sixty.name)
            {
                return None;
            }
            let of = |w: usize| windows[w].get(&sixty.name).cloned().unwrap_or_default();
            let (one, ten) = (of(0), of(1));
            let ms = |ns: i64| ns as f64 / 1e6;
            Some(OpState {
                name: sixty.name.clone(),
                kind: kind.name().to_string(),
                calls_1s: one.occurrence,
                calls_10s: ten.occurrence,
                calls_60s: sixty.occurrence,
                time_ms_1s: ms(one.cpu_ns),
                time_ms_10s: ms(ten.cpu_ns),
                time_ms_60s: ms(sixty.cpu_ns),
                self_ms_10s: ms(ten.self_cpu_ns),
                accelerator_ms_10s: ms(ten.accelerator_ns),
            })
        })
        .collect();
    ops.sort_by(|a, b| {
        b.time_ms_10s
            .total_cmp(&a.time_ms_10s)
            .then(b.time_ms_60s.total_cmp(&a.time_ms_60s))
            .then(a.name.cmp(&b.name))
    });
    ops.truncate(TOP_OPS);
    (ops, (last - first) as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Figures worked out by hand with `stats op`'s rules: an overload whose only op
    /// child has its name is one call, its child's time its own (the tally by name
    /// counted two calls), the windows end at the newest event, and steps are left out.
    #[test]
    fn ops_are_stats_ops_rows_over_the_last_seconds() {
        let json = r#"[
            {"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":0,"dur":59600000},
            {"ph":"X","cat":"cpu_op","name":"old","pid":1,"tid":1,"ts":0,"dur":1000},
            {"ph":"X","cat":"cpu_op","name":"mid","pid":1,"tid":1,"ts":50000000,"dur":1000},
            {"ph":"X","cat":"cpu_op","name":"aten::div","pid":1,"tid":1,"ts":59500000,"dur":100},
            {"ph":"X","cat":"cpu_op","name":"aten::div","pid":1,"tid":1,"ts":59500010,"dur":50}
        ]"#;
        let mut trace = Trace::new();
        opscope_formats::chrome::import(json.as_bytes(), "t.json", &mut trace).unwrap();
        trace.finish();
        let (ops, read_s) = analyse(&trace);
        let by = |name: &str| ops.iter().find(|o| o.name == name).cloned();
        let div = by("aten::div").unwrap();
        assert_eq!((div.calls_1s, div.calls_10s, div.calls_60s), (1, 1, 1));
        assert_eq!(div.kind, "op");
        assert!((div.time_ms_1s - 0.1).abs() < 1e-9, "{div:?}");
        assert!((div.self_ms_10s - 0.1).abs() < 1e-9, "{div:?}");
        let mid = by("mid").unwrap();
        assert_eq!((mid.calls_1s, mid.calls_10s, mid.calls_60s), (0, 1, 1));
        let old = by("old").unwrap();
        assert_eq!((old.calls_1s, old.calls_10s, old.calls_60s), (0, 0, 1));
        assert!(by("ProfilerStep#1").is_none(), "{ops:?}");
        let order: Vec<&str> = ops.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(
            order,
            ["mid", "aten::div", "old"],
            "by time over 10 s, then 60 s"
        );
        assert!((read_s - 59.6).abs() < 1e-9, "{read_s}");
    }
}
