//! The DataLoader rule of PyTorch's profiler plugin (`tb_plugin` `data.py`): DataLoader
//! time over step time above 0.05 means the loader holds the training loop back —
//! use worker processes (`num_workers`). DataLoader time is the time in
//! `enumerate(DataLoader)#…` ranges inside steps. tf.data's counterpart is the training
//! thread's time in `IteratorGetNext` (XProf's "waiting for input", at the same 5 %),
//! which runs on the host whatever the device, so it is checked on CPU jobs too.
//! A loader that already has workers is told apart: its first batch waits for their
//! start-up, which is no step's lasting cost, and its fix is not "use workers".

use opscope_model::{SliceKind, TrackKind, NONE};

use super::{sources_of, time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "dataloader",
    anchor: "PyTorch profiler plugin (DataLoader time > 5 % of the step); XProf (tf.data)",
    about: "the training loop waiting for its DataLoader or tf.data pipeline",
    needs_device: false,
    check,
};

/// The two input pipelines' waits, told apart for the fix.
fn is_torch_loader(name: &str) -> bool {
    name.starts_with("enumerate(DataLoader)")
}

fn is_tf_data(name: &str) -> bool {
    name.contains("IteratorGetNext")
}

/// The range PyTorch names around each batch of a DataLoader with worker processes.
fn has_workers(name: &str) -> bool {
    is_torch_loader(name) && name.contains("MultiProcessing")
}

const THRESHOLD_PCT: f64 = 5.0;

/// A wait this many times the median of a loader's waits is its workers' start-up.
const START_UP_FACTOR: i64 = 4;

/// Of a loader's waits (by their durations), those that are its workers' start-up:
/// their processes forked and each filling its prefetch, at the first batch of every
/// epoch unless the workers persist. Far longer than the rest.
fn start_ups(durations: &[i64]) -> Vec<usize> {
    if durations.len() < 3 {
        return Vec::new();
    }
    let mut sorted = durations.to_vec();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2].max(1);
    (0..durations.len())
        .filter(|&k| durations[k] > START_UP_FACTOR * median)
        .collect()
}

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
        let mut rows = super::sync_apis::in_steps(facts, source, rows);
        rows.sort_by_key(|&i| (s.ts[i], i));
        let workers = rows.iter().any(|&i| has_workers(trace.str(s.name[i])));
        let start_ups: Vec<usize> = match workers {
            true => start_ups(&rows.iter().map(|&i| s.dur[i]).collect::<Vec<_>>()),
            false => Vec::new(),
        };
        let start_up_ns: i64 = start_ups.iter().map(|&k| s.dur[rows[k]]).sum();
        let kept: Vec<usize> = (0..rows.len())
            .filter(|k| !start_ups.contains(k))
            .map(|k| rows[k])
            .collect();
        let rows = kept;
        // Workers started again at every epoch (no persistent_workers) cost the
        // start-up each time: a finding of its own where that passes the threshold.
        let restart_pct = facts.share(source, start_up_ns);
        if start_ups.len() > 1 && restart_pct > THRESHOLD_PCT {
            let mut f = Finding::of(
                &RULE,
                facts.label(source, None),
                format!(
                    "{restart_pct:.1} % of the step time waits for the DataLoader's workers \
                     to start, {} times (at each epoch)",
                    start_ups.len()
                ),
            )
            .saving(facts, source, start_up_ns);
            f.severity = Severity::of_share(restart_pct, THRESHOLD_PCT, 20.0);
            f.evidence.push(format!(
                "{} in {} batches over {}× the median wait (of {} batches), as the first \
                 batch of an epoch waits for the workers to start",
                time(start_up_ns),
                start_ups.len(),
                START_UP_FACTOR,
                start_ups.len() + rows.len()
            ));
            f.fix = "keep the workers across epochs: DataLoader(..., persistent_workers=True)"
                .to_string();
            f.more = format!("opscope steps {}", facts.files());
            for (k, v) in [("start_up_ns", start_up_ns as f64), ("pct", restart_pct)] {
                f.figures.insert(k, v);
            }
            out.finding(f);
        }
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
        if !start_ups.is_empty() {
            f.evidence.push(format!(
                "left out: {} of the workers' start-up, in {} batch{} (each over {}× the \
                 median wait)",
                time(start_up_ns),
                start_ups.len(),
                if start_ups.len() == 1 { "" } else { "es" },
                START_UP_FACTOR,
            ));
        }
        f.fix = if tf {
            "make the pipeline parallel and ahead of the step: \
             dataset.map(f, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE); \
             cache() what does not change; no Python (tf.py_function) in map"
        } else if workers {
            "the DataLoader's workers do not keep up: more of them (num_workers up to the \
             CPU cores per GPU), prefetch_factor above 2, pin_memory=True, and cheaper \
             samples (the dataset's __getitem__ and collate_fn, decoding done once)"
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

#[cfg(test)]
mod tests {
    use opscope_model::Trace;

    use crate::advise::{advise, AdviseOptions};
    use crate::context::Context;

    /// The findings of the rule on 6 steps of 10 ms, each waiting `waits[k]` µs for
    /// the loader named `iter`.
    fn findings(iter: &str, waits: &[i64]) -> Vec<crate::advise::Finding> {
        let mut events = Vec::new();
        for (k, wait) in waits.iter().enumerate() {
            let ts = 10_000 * k as i64;
            events.push(format!(
                r#"{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{k}","pid":1,"tid":1,"ts":{ts},"dur":10000}}"#
            ));
            events.push(format!(
                r#"{{"ph":"X","cat":"user_annotation","name":"enumerate(DataLoader)#{iter}.__next__","pid":1,"tid":1,"ts":{},"dur":{wait}}}"#,
                ts + 1
            ));
            events.push(format!(
                r#"{{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":{},"dur":5000}}"#,
                ts + wait + 2
            ));
        }
        let json = format!("[{}]", events.join(","));
        let mut trace = Trace::new();
        opscope_formats::chrome::import(json.as_bytes(), "t.json", &mut trace).unwrap();
        let options = AdviseOptions {
            rules: vec!["dataloader".into()],
            ..AdviseOptions::default()
        };
        advise(&Context::new(&trace), &options)
            .findings
            .into_iter()
            .filter(|f| f.rule == "dataloader")
            .collect()
    }

    /// A loader with workers waits long for its first batch only while they start: no
    /// finding (with the first wait at 4 ms of 60 ms it said "use num_workers" to a
    /// program that had 2 workers). The same first wait without workers is the
    /// loader's own, and lasting waits with workers get a fix that is not "add workers".
    #[test]
    fn the_workers_start_up_is_no_lasting_wait() {
        let first_slow = [4_000, 20, 20, 20, 20, 20];
        assert!(findings("_MultiProcessingDataLoaderIter", &first_slow).is_empty());
        let single = findings("_SingleProcessDataLoaderIter", &first_slow);
        assert_eq!(single.len(), 1);
        assert!(single[0].fix.contains("num_workers=N"), "{}", single[0].fix);
        let slow = findings(
            "_MultiProcessingDataLoaderIter",
            &[4_000, 900, 900, 900, 900, 900],
        );
        assert_eq!(slow.len(), 1);
        assert!(slow[0]
            .fix
            .starts_with("the DataLoader's workers do not keep up"));
        assert!(
            slow[0].evidence[1].contains("the workers' start-up"),
            "{:?}",
            slow[0].evidence
        );
        // Workers started again in the fourth step (a second epoch): that is a finding
        // of its own, whose fix keeps them.
        let restarted = findings(
            "_MultiProcessingDataLoaderIter",
            &[4_000, 20, 20, 4_000, 20, 20],
        );
        assert_eq!(restarted.len(), 1, "{restarted:?}");
        assert!(restarted[0].fix.contains("persistent_workers=True"));
        assert!(
            restarted[0].title.contains("to start, 2 times"),
            "{}",
            restarted[0].title
        );
    }
}
