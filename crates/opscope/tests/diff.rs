//! `opscope diff`: `--by name` against HolisticTraceAnalysis 0.5.0's
//! `TraceDiff.compare_traces` and `ops_diff` (run by `tests/oracle/hta_trace_diff.py`)
//! on the shared `hta/trace_diff` and `hta/trace_compare` pairs; matched lines on
//! programs recorded twice, unchanged and with one deliberate change.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use serde_json::Value;

/// Per name: A's count, B's count, A's total µs, B's total µs.
type Rows = BTreeMap<String, (u64, u64, f64, f64)>;

fn ours(a: &Path, b: &Path, device: &str, iteration: Option<&str>) -> (Rows, Value) {
    let mut args = vec![
        "diff",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--by",
        "name",
        "--device",
        device,
        "--format",
        "json",
        "-q",
    ];
    if let Some(i) = iteration {
        args.extend(["--steps", i]);
    }
    let out: Value = serde_json::from_slice(&opscope_ok(&args).stdout).unwrap();
    let rows = out["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let n = |v: &Value, k: usize| v[k].as_f64().unwrap();
            (
                l["name"].as_str().unwrap().to_string(),
                (
                    n(&l["counts"], 0) as u64,
                    n(&l["counts"], 1) as u64,
                    n(&l["total_us"], 0),
                    n(&l["total_us"], 1),
                ),
            )
        })
        .collect();
    (rows, out)
}

#[test]
fn by_name_equals_htas_trace_diff_on_its_own_pairs() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let Some(python) = hta_python() else { return };
    let hta = traces.join("kineto/hta");
    for (control, test, iteration) in [
        ("trace_diff/control", "trace_diff/test", None),
        ("trace_diff/control", "trace_diff/test", Some("1011")),
        ("trace_compare/base", "trace_compare/test", None),
    ] {
        let (a, b) = (hta.join(control), hta.join(test));
        let mut args = vec![a.as_os_str(), b.as_os_str()];
        if let Some(i) = iteration {
            args.push(i.as_ref());
        }
        let want: Value =
            serde_json::from_slice(&oracle_stdout_with(&python, "hta_trace_diff.py", &args))
                .unwrap();
        for device in ["cpu", "gpu", "all"] {
            let what = format!("{control} vs {test}, iteration {iteration:?}, {device}");
            let (rows, out) = ours(&a, &b, device, iteration);
            let hta_rows: Rows = want[device]["rows"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(name, r)| {
                    let n = |k: usize| r[k].as_f64().unwrap();
                    (name.clone(), (n(0) as u64, n(1) as u64, n(2), n(3)))
                })
                .collect();
            assert!(!hta_rows.is_empty(), "{what}: HTA compared nothing");
            assert_eq!(
                rows.keys().collect::<Vec<_>>(),
                hta_rows.keys().collect::<Vec<_>>(),
                "{what}: the names"
            );
            for (name, (ca, cb, da, db)) in &rows {
                let h = hta_rows[name];
                assert_eq!((*ca, *cb), (h.0, h.1), "{what}: counts of {name}");
                // HTA floors each event's start and ceils its end to whole µs: within
                // a µs per event.
                for (ours, theirs, count) in [(*da, h.2, *ca), (*db, h.3, *cb)] {
                    assert!(
                        (ours - theirs).abs() <= count as f64 + 1e-6,
                        "{what}: {name} took {ours} µs here, {theirs} µs in HTA over {count}"
                    );
                }
            }
            // ops_diff's categories, name for name.
            let mut categories: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for line in out["lines"].as_array().unwrap() {
                categories
                    .entry(line["change"].as_str().unwrap().to_string())
                    .or_default()
                    .push(line["name"].as_str().unwrap().to_string());
            }
            for (category, names) in want[device]["ops_diff"].as_object().unwrap() {
                let mut mine = categories.get(category).cloned().unwrap_or_default();
                mine.sort();
                let theirs: Vec<String> = names
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|n| n.as_str().unwrap().to_string())
                    .collect();
                assert_eq!(mine, theirs, "{what}: ops_diff's {category}");
            }
        }
    }
}

#[test]
fn by_name_says_which_iterations_a_trace_lacks() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let dir = traces.join("kineto/hta/trace_compare/base");
    let d = dir.to_str().unwrap();
    let out = opscope(&["diff", d, d, "--by", "name", "--steps", "5000", "-q"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no iteration in 5000"), "{err}");
    let out = opscope(&["diff", d, "--by", "name", "-q"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--rank twice or --steps"),
        "one trace alone names what else to give"
    );
}
