//! The DataLoader rule of PyTorch's profiler plugin (`tb_plugin` `data.py`): DataLoader
//! time over step time above 0.05 means the loader holds the training loop back —
//! use worker processes (`num_workers`). DataLoader time is the time in
//! `enumerate(DataLoader)#…` ranges inside steps.

use opscope_model::{SliceKind, TrackKind};

use super::{sources_of, time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "dataloader",
    anchor: "PyTorch profiler plugin (DataLoader time > 5 % of the step)",
    about: "the training loop waiting for its DataLoader",
    check,
};

const THRESHOLD_PCT: f64 = 5.0;

fn check(facts: &Facts, out: &mut Out) {
    let trace = facts.trace();
    let s = &trace.slices;
    let ranges: Vec<usize> = facts
        .named(&[SliceKind::Op, SliceKind::Annotation], |n| {
            n.starts_with("enumerate(DataLoader)")
        })
        .into_iter()
        .filter(|&i| trace.tracks[s.track[i] as usize].kind == TrackKind::Thread)
        .collect();
    for (source, rows) in sources_of(facts, &ranges) {
        let (_, steps) = facts.time_looked_at(source);
        if steps == 0 {
            continue;
        }
        let rows = super::sync_apis::in_steps(facts, source, rows);
        let loader: i64 = rows.iter().map(|&i| s.dur[i]).sum();
        let pct = facts.share(source, loader);
        if pct <= THRESHOLD_PCT {
            continue;
        }
        let mut f = Finding::of(
            &RULE,
            facts.label(source, None),
            format!("{pct:.1} % of the step time waits for the DataLoader"),
        )
        .saving(facts, source, loader);
        f.severity = Severity::of_share(pct, THRESHOLD_PCT, 20.0);
        f.evidence.push(format!(
            "{} in {} DataLoader ranges over {steps} steps ({} per step)",
            time(loader),
            rows.len(),
            time(loader / steps as i64)
        ));
        f.fix = "load batches in worker processes: DataLoader(num_workers=N, \
                 pin_memory=True, persistent_workers=True), N up to the CPU cores per GPU"
            .to_string();
        f.more = format!("opscope steps {}", facts.files());
        for (k, v) in [("loader_ns", loader as f64), ("pct", pct)] {
            f.figures.insert(k, v);
        }
        out.finding(f);
    }
}
