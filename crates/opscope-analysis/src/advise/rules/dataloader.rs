//! The DataLoader rule of PyTorch's profiler plugin (`tb_plugin` `data.py`): DataLoader
//! time over step time above 0.05 means the loader holds the training loop back —
//! use worker processes (`num_workers`). DataLoader time is the time in
//! `enumerate(DataLoader)#…` ranges inside steps. tf.data's counterpart is the training
//! thread's time in `IteratorGetNext` (XProf's "waiting for input", at the same 5 %),
//! which runs on the host whatever the device, so it is checked on CPU jobs too.

use opscope_model::{SliceKind, TrackKind, NONE};

use super::{sources_of, time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "dataloader",
    anchor: "PyTorch profiler plugin (DataLoader time > 5 % of the step); XProf (tf.data)",
    about: "the training loop waiting for its DataLoader or tf.data pipeline",
    check,
};

/// The two input pipelines' waits, told apart for the fix.
fn is_torch_loader(name: &str) -> bool {
    name.starts_with("enumerate(DataLoader)")
}

fn is_tf_data(name: &str) -> bool {
    name.contains("IteratorGetNext")
}

const THRESHOLD_PCT: f64 = 5.0;

fn check(facts: &Facts, out: &mut Out) {
    let trace = facts.trace();
    let s = &trace.slices;
    let waits = facts.names_where(|n| is_torch_loader(n) || is_tf_data(n));
    let tf_data = facts.names_where(is_tf_data);
    let wait = |i: u32| waits[s.name[i as usize].0 as usize];
    // The outermost waits on host threads (TensorFlow's `IteratorGetNext` op holds its
    // `IteratorGetNextOp::DoCompute`).
    let ranges: Vec<usize> = facts
        .named(&[SliceKind::Op, SliceKind::Annotation], |n| {
            is_torch_loader(n) || is_tf_data(n)
        })
        .into_iter()
        .filter(|&i| trace.tracks[s.track[i] as usize].kind == TrackKind::Thread)
        .filter(|&i| {
            let mut at = s.parent[i];
            while at != NONE {
                if wait(at) {
                    return false;
                }
                at = s.parent[at as usize];
            }
            true
        })
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
        let tf = rows.iter().any(|&i| tf_data[s.name[i].0 as usize]);
        let what = if tf {
            "its tf.data pipeline"
        } else {
            "the DataLoader"
        };
        let mut f = Finding::of(
            &RULE,
            facts.label(source, None),
            format!("{pct:.1} % of the step time waits for {what}"),
        )
        .saving(facts, source, loader);
        f.severity = Severity::of_share(pct, THRESHOLD_PCT, 20.0);
        f.evidence.push(format!(
            "{} in {} {} over {steps} steps ({} per step)",
            time(loader),
            rows.len(),
            if tf {
                "IteratorGetNext calls"
            } else {
                "DataLoader ranges"
            },
            time(loader / steps as i64)
        ));
        f.fix = if tf {
            "make the pipeline parallel and ahead of the step: \
             dataset.map(f, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE); \
             cache() what does not change; no Python (tf.py_function) in map"
        } else {
            "load batches in worker processes: DataLoader(num_workers=N, \
             pin_memory=True, persistent_workers=True), N up to the CPU cores per GPU"
        }
        .to_string();
        f.more = format!("opscope steps {}", facts.files());
        for (k, v) in [("loader_ns", loader as f64), ("pct", pct)] {
            f.figures.insert(k, v);
        }
        out.finding(f);
    }
}
