//! XPlane as xprof shows it: every complete event of xprof's own trace-viewer
//! conversion, the lines it derives from a TPU or GPU plane's stats included, is in
//! opscope's model at the same nanosecond. The XPlanes are built and converted by
//! `tests/oracle/xplane_derived.py` and `xplane_derived_gpu.py` (xprof is the oracle).

mod common;

use std::collections::HashMap;

use common::{python_with, scratch_dir};
use opscope_model::{Trace, TrackId};

/// (plane, line, name, start ns, duration ns) → how many.
type Events = HashMap<(String, String, String, i64, i64), usize>;

fn ours(trace: &Trace) -> Events {
    let mut events = Events::new();
    for (t, track) in trace.tracks.iter().enumerate() {
        let (Some(p), Some(th)) = (track.process, track.thread) else {
            continue;
        };
        let plane = trace.str(trace.processes[p.index()].name.unwrap());
        let line = trace.str(trace.threads[th.index()].name.unwrap());
        for i in trace.track_slices(TrackId(t as u32)) {
            let key = (
                plane.to_string(),
                line.to_string(),
                trace.str(trace.slices.name[i]).to_string(),
                trace.slices.ts[i],
                trace.slices.dur[i],
            );
            *events.entry(key).or_default() += 1;
        }
    }
    events
}

/// Runs an oracle script that builds an XPlane and converts it with xprof, imports the
/// XPlane, asserts that every complete event of xprof's is in ours and that ours has no
/// other, and returns the names of the lines xprof's output has.
fn check_against_xprof(script: &str, scratch: &str) -> std::collections::BTreeSet<String> {
    let dir = scratch_dir(scratch);
    let doc = common::run_oracle_json(script, &[&dir]);
    let lines = equal_to_xprof(script, &doc);
    let _ = std::fs::remove_dir_all(&dir);
    lines
}

/// Asserts that the XPlane at `doc["path"]` reads as the events xprof made of it,
/// `doc["events"]`, one for one; the names of xprof's lines.
fn equal_to_xprof(what: &str, doc: &serde_json::Value) -> std::collections::BTreeSet<String> {
    let path = doc["path"].as_str().unwrap();
    let mut trace = Trace::new();
    opscope_formats::import_bytes(&std::fs::read(path).unwrap(), path, &mut trace).unwrap();
    let mut got = ours(&trace);
    let (mut total, mut missing) = (0, Vec::new());
    let mut lines = std::collections::BTreeSet::new();
    for e in doc["events"].as_array().unwrap() {
        let key = (
            e[0].as_str().unwrap().to_string(),
            e[1].as_str().unwrap().to_string(),
            e[2].as_str().unwrap().to_string(),
            e[3].as_i64().unwrap(),
            e[4].as_i64().unwrap(),
        );
        total += 1;
        lines.insert(key.1.clone());
        match got.get_mut(&key) {
            Some(n) if *n > 0 => *n -= 1,
            _ => missing.push(key),
        }
    }
    assert!(
        missing.is_empty(),
        "{what}: {} of {total} events of xprof's not in ours: {missing:#?}",
        missing.len()
    );
    let extra: Vec<_> = got.into_iter().filter(|(_, n)| *n > 0).collect();
    assert!(
        extra.is_empty(),
        "{what}: events of ours xprof does not show: {extra:#?}"
    );
    lines
}

fn names(names: &[&str]) -> std::collections::BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn tpu_derived_lines_match_xprof_trace_viewer() {
    if !python_with(&["xprof.convert.raw_to_tool_data", "tensorflow"]) {
        return;
    }
    let lines = check_against_xprof("xplane_derived.py", "xplane-derived");
    // The oracle's XPlane exercises every derived line.
    assert_eq!(
        lines,
        names(&[
            "python",
            "XLA Ops",
            "XLA Ops 2",
            "Framework Ops",
            "Framework Name Scope",
            "Source code",
            "Host Offload Ops row 0",
            "Host Offload Ops row 1",
        ])
    );
}

/// TensorCore planes that vary what real TPU profiles vary (tests/oracle/xplane_variants.py:
/// stats on the event or its metadata, runs of one framework op across gaps, several
/// devices, a Steps line, asynchronous ops on their own line, offloaded copies whose
/// halves lie on different lines) read as xprof's trace viewer shows them, event for
/// event, both ways. Before: the ops of a step, not grouped by it, made many Framework
/// Ops where xprof makes one; steps kept their own names; the `Async XLA Ops` line,
/// which xprof does not draw, was drawn.
#[test]
fn tensor_core_variants_equal_xprof_trace_viewer() {
    if !python_with(&["xprof.convert.raw_to_tool_data", "tensorflow"]) {
        return;
    }
    let dir = scratch_dir("xplane-variants");
    let doc = common::run_oracle_json("xplane_variants.py", &[&dir]);
    let variants = doc.as_object().unwrap();
    assert_eq!(variants.len(), 5);
    for (name, variant) in variants {
        equal_to_xprof(name, variant);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The lines xprof derives for GPU planes: steps from `group_id`, and per stream the
/// XLA modules and ops and the framework ops and name scopes of its kernels.
#[test]
fn gpu_derived_lines_match_xprof_trace_viewer() {
    if !python_with(&["xprof.convert.raw_to_tool_data", "tensorflow"]) {
        return;
    }
    let lines = check_against_xprof("xplane_derived_gpu.py", "xplane-derived-gpu");
    assert_eq!(
        lines,
        names(&[
            "python",
            "Stream #7(Compute)",
            "Stream #9(Compute)",
            "Stream #11(MemcpyH2D)",
            "Steps",
            "XLA Modules - from #7",
            "XLA Ops - from #7",
            "Framework Ops - from #7",
            "Framework Name Scope - from #7",
            "Framework Ops - from #9",
            "Framework Name Scope - from #9",
        ])
    );
}

/// `opscope memory` on an XPlane TensorFlow's profiler wrote with its allocator events:
/// per allocator, the events, bytes allocated and freed, and the peak in use equal the
/// figures the XPlane itself gives (`bytes_allocated`, `peak_bytes_in_use`), read by
/// `tests/oracle/xplane_memory.py`.
#[test]
fn xplane_memory_matches_its_own_allocator_figures() {
    if !python_with(&["tensorflow"]) {
        return;
    }
    let dir = scratch_dir("xplane-memory");
    let doc = common::run_oracle_json("xplane_memory.py", &[&dir]);
    let path = doc["path"].as_str().unwrap();
    let want = doc["allocators"].as_object().unwrap();
    assert!(!want.is_empty(), "TensorFlow wrote no allocator events");
    let report = common::opscope_ok(&["memory", "--format", "json", path]);
    let got: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    let got = got.as_array().unwrap();
    for (allocator, figures) in want {
        let row = got
            .iter()
            .find(|r| r["allocator"] == allocator.as_str())
            .unwrap_or_else(|| panic!("no allocator {allocator} in {got:#?}"));
        assert_eq!(row["events"], figures["events"], "{allocator}");
        assert_eq!(row["allocated_bytes"], figures["allocated"], "{allocator}");
        assert_eq!(row["freed_bytes"], figures["freed"], "{allocator}");
        assert_eq!(
            row["peak_in_use"], figures["peak_bytes_allocated"],
            "{allocator}"
        );
        assert_eq!(
            row["peak_in_use"], figures["peak_bytes_in_use"],
            "{allocator}"
        );
        assert_eq!(row["from_allocator_totals"], true);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
