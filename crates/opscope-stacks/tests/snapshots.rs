//! Every CPython version the reader supports, read again from a snapshot of a process's
//! memory: where that interpreter is not installed (CI has 3.11 only), the bytes a walk
//! of a live process read (`tests/fixtures/snapshots/python-VERSION/memory.bin`, by
//! page, the rest zero) are walked again, and the stacks must be those py-spy dumped of the same process then
//! (`meta.json`). `capture_a_snapshot` (ignored; run where the interpreter is) makes one:
//!
//! ```sh
//! OPSCOPE_CAPTURE_PYTHON=/usr/local/cpython-3.12.1/bin/python3.12 OPSCOPE_PY_SPY=py-spy \
//!   OPSCOPE_CAPTURE_PLACE=/srv cargo test -p opscope-stacks --test snapshots -- --ignored
//! ```

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use opscope_stacks::memory::{Recorder, Snapshot};
use opscope_stacks::{PythonProcess, ThreadStack};
use serde_json::{json, Value};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/snapshots")
}

/// Each thread as py-spy's JSON and ours can both say it: id, GIL, frames (function,
/// file, line), in thread id order.
fn ours(stacks: &[ThreadStack]) -> Value {
    let mut threads: Vec<Value> = stacks
        .iter()
        .map(|t| {
            let frames: Vec<Value> = t
                .frames
                .iter()
                .map(|f| json!([f.name, f.filename, f.line]))
                .collect();
            json!({
                "thread_id": t.thread_id,
                "tid": t.native_thread_id,
                "gil": t.holds_gil,
                "frames": frames
            })
        })
        .collect();
    threads.sort_by_key(|t| t["thread_id"].as_u64());
    Value::Array(threads)
}

fn py_spys(dump: &Value) -> Value {
    let mut threads: Vec<Value> = dump
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let frames: Vec<Value> = t["frames"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| json!([f["name"], f["filename"], f["line"]]))
                .collect();
            json!({
                "thread_id": t["thread_id"],
                "tid": t["os_thread_id"],
                "gil": t["owns_gil"],
                "frames": frames
            })
        })
        .collect();
    threads.sort_by_key(|t| t["thread_id"].as_u64());
    Value::Array(threads)
}

#[test]
fn every_snapshot_reads_as_py_spy_read_its_process() {
    let mut versions = Vec::new();
    for entry in std::fs::read_dir(fixtures()).unwrap() {
        let dir = entry.unwrap().path();
        let meta: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
        let bytes = std::fs::read(dir.join("memory.bin")).unwrap();
        let memory = Snapshot::from_bytes(&bytes).expect("a snapshot file");
        let v = &meta["version"];
        let version = (
            v[0].as_u64().unwrap() as u8,
            v[1].as_u64().unwrap() as u8,
            // 3.9 and 3.10 are known by their file's name only: no micro version.
            v[2].as_u64().unwrap_or(255) as u8,
        );
        // The pid the process had (3.9, 3.10 find each thread's tid through it).
        let pid = meta["py_spy"][0]["pid"].as_i64().unwrap() as i32;
        let process = PythonProcess::with_memory(
            memory,
            pid,
            version,
            meta["runtime"].as_u64().unwrap(),
            meta["code_type"].as_u64(),
        )
        .unwrap();
        let stacks = process.stacks().unwrap();
        assert_eq!(ours(&stacks), py_spys(&meta["py_spy"]), "{}", dir.display());
        assert!(stacks.iter().any(|t| !t.frames.is_empty()));
        versions.push(format!("{}.{}", version.0, version.1));
    }
    versions.sort();
    // The versions the reader supports, each with its snapshot.
    assert_eq!(
        versions,
        ["3.10", "3.11", "3.12", "3.13", "3.9"],
        "snapshots of {versions:?}"
    );
}

#[test]
#[ignore = "makes a snapshot: needs OPSCOPE_CAPTURE_PYTHON and OPSCOPE_PY_SPY"]
fn capture_a_snapshot() {
    let python = std::env::var("OPSCOPE_CAPTURE_PYTHON").expect("OPSCOPE_CAPTURE_PYTHON");
    let py_spy = std::env::var("OPSCOPE_PY_SPY").unwrap_or_else(|_| "py-spy".into());
    // Run from a neutral place, so that the snapshot names no folder of this checkout
    // (the interpreter's own files are where it is installed: install it under a
    // neutral prefix too, say /usr/local/cpython-VERSION).
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/record/stacks_known.py");
    let place = std::env::var_os("OPSCOPE_CAPTURE_PLACE")
        .map_or_else(std::env::temp_dir, std::path::PathBuf::from)
        .join("opscope-snapshot");
    std::fs::create_dir_all(&place).unwrap();
    let script = place.join("stacks_known.py");
    std::fs::copy(&source, &script).unwrap();
    let mut program = Command::new(&python)
        .arg("stacks_known.py")
        .current_dir(&place)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(program.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    let pid = program.id() as i32;
    let dump = Command::new(&py_spy)
        .args(["dump", "--json", "--pid", &pid.to_string()])
        .output()
        .unwrap();
    assert!(dump.status.success());
    let dump: Value = serde_json::from_slice(&dump.stdout).unwrap();
    let process = PythonProcess::open_with(pid, Recorder::new).unwrap();
    let stacks = process.stacks().unwrap();
    let _ = program.kill();
    let _ = program.wait();
    assert_eq!(ours(&stacks), py_spys(&dump));
    let parts: Vec<u64> = process
        .version()
        .split('.')
        .map(|p| p.parse().unwrap())
        .collect();
    let (runtime, code_type) = process.runtime();
    let dir = fixtures().join(format!("python-{}", process.version()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("memory.bin"),
        process.memory().snapshot().to_bytes(),
    )
    .unwrap();
    let meta = json!({
        "version": parts,
        "runtime": runtime,
        "code_type": code_type,
        "program": "tests/record/stacks_known.py",
        "py_spy": dump,
    });
    std::fs::write(
        dir.join("meta.json"),
        serde_json::to_string_pretty(&meta).unwrap(),
    )
    .unwrap();
}
