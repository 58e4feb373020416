//! Synchronisation APIs: Nsight Systems' expert rule `cuda_api_sync` — calls that block
//! the host until the device (`cudaDeviceSynchronize%`) or a stream
//! (`cudaStreamSynchronize%`) has finished all its work (HIP's equivalents too). Where
//! the trace has steps, only calls inside steps count: one at the end of training is
//! harmless.

use opscope_model::SliceKind;

use super::{sources_of, time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "sync_apis",
    anchor: "Nsight Systems expert rule cuda_api_sync",
    about: "device- and stream-wide synchronisation calls that block the host",
    needs_device: true,
    check,
};

pub const PREFIXES: [&str; 4] = [
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "hipDeviceSynchronize",
    "hipStreamSynchronize",
];

pub fn is_sync_api(name: &str) -> bool {
    PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The calls of a source that are inside its steps (all of them without steps).
pub fn in_steps(facts: &Facts, source: opscope_model::SourceId, rows: Vec<usize>) -> Vec<usize> {
    let trace = facts.trace();
    let Some(steps) = facts.steps_of(source, 1) else {
        return rows;
    };
    let s = &trace.slices;
    rows.into_iter()
        .filter(|&i| super::step_at(&steps.steps, s.ts[i]).is_some())
        .collect()
}

fn check(facts: &Facts, out: &mut Out) {
    let calls = facts.named(
        &[SliceKind::Runtime, SliceKind::Driver, SliceKind::Sync],
        is_sync_api,
    );
    let s = &facts.trace().slices;
    for (source, rows) in sources_of(facts, &calls) {
        let rows = in_steps(facts, source, rows);
        if rows.is_empty() {
            continue;
        }
        let total: i64 = rows.iter().map(|&i| s.dur[i]).sum();
        let longest = rows
            .iter()
            .copied()
            .max_by_key(|&i| s.dur[i])
            .unwrap_or(rows[0]);
        let (_, steps) = facts.time_looked_at(source);
        let mut f = Finding::of(
            &RULE,
            facts.label(source, None),
            format!(
                "{} synchronisation call{} block the host",
                rows.len(),
                if rows.len() == 1 { "" } else { "s" }
            ),
        )
        .saving(facts, source, total);
        f.severity = Severity::of_share(f.saving_pct, 3.0, 15.0);
        let mut names: Vec<&str> = rows.iter().map(|&i| facts.name(i)).collect();
        names.sort_unstable();
        names.dedup();
        f.evidence.push(format!(
            "{} blocked in {}{}",
            time(total),
            names.join(", "),
            if steps > 0 {
                format!(" ({:.1} per step)", rows.len() as f64 / steps as f64)
            } else {
                String::new()
            }
        ));
        f.evidence.push(format!(
            "the longest {} at {} ns",
            time(s.dur[longest]),
            s.ts[longest]
        ));
        f.fix = "synchronise only where the host needs a result: wait on an event \
                 (cudaStreamWaitEvent, cudaEventSynchronize) rather than the whole device"
            .to_string();
        f.more = format!("opscope stats op {}", facts.files());
        f.span = Some([s.ts[longest], s.end(longest)]);
        for (k, v) in [("calls", rows.len() as f64), ("blocked_ns", total as f64)] {
            f.figures.insert(k, v);
        }
        out.finding(f);
    }
}
