//! Records events from several threads through the library's own entry points, then
//! reads the process's file back with opscope's independent Perfetto importer (prost
//! decoding) and checks every event, time and arg arrived.

use std::collections::HashMap;
use std::sync::Barrier;

use opscope_model::{ArgValue, SliceKind, Trace};
use opscope_record::event::{Kind, Value};
use opscope_record::session;

const THREADS: usize = 3;
const PER_THREAD: usize = 2000;

#[test]
fn threads_events_times_and_args_survive_the_round_trip() {
    let dir = std::env::temp_dir().join(format!("opscope-record-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::env::set_var(session::SESSION_DIR_ENV, &dir);
    std::env::set_var(session::FLUSH_MS_ENV, "2");

    let barrier = Barrier::new(THREADS);
    let started = opscope_record::clock::monotonic_ns();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let barrier = &barrier;
            s.spawn(move || {
                session::record(
                    Kind::ThreadName,
                    0,
                    &[],
                    format!("worker-{t}").as_bytes(),
                    |_| {},
                );
                barrier.wait();
                for i in 0..PER_THREAD {
                    let name = format!("op{}", i % 5);
                    session::record(Kind::Begin, 0, &[b"itt/", b"test"], name.as_bytes(), |_| {});
                    session::record(Kind::Begin, 0, &[b"nvtx"], b"inner", |b| {
                        b.arg(b"payload", Value::I64(-(i as i64)));
                    });
                    session::record(Kind::End, 0, &[], b"", |_| {});
                    session::record(Kind::Args, 0, &[], b"", |b| {
                        b.arg(b"index", Value::U64(i as u64));
                    });
                    session::record(Kind::End, 0, &[], b"", |_| {});
                    if i % 100 == 0 {
                        session::record(Kind::Counter, 0, &[b"test"], b"queue", |b| {
                            b.arg(b"value", Value::F64(i as f64 / 2.0));
                        });
                    }
                }
                // A range opened here and closed on another thread.
                session::record(
                    Kind::AsyncBegin,
                    1000 + t as u64,
                    &[b"nvtx/ranges"],
                    b"handoff",
                    |_| {},
                );
            });
        }
    });
    std::thread::spawn(|| {
        for t in 0..THREADS {
            session::record(
                Kind::AsyncEnd,
                1000 + t as u64,
                &[b"nvtx/ranges"],
                b"",
                |_| {},
            );
        }
        session::record(Kind::Instant, 1, &[b"itt/", b"test"], b"done", |_| {});
    })
    .join()
    .unwrap();
    session::finish();
    let ended = opscope_record::clock::monotonic_ns();

    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "one file per process: {files:?}");
    let path = &files[0];
    assert_eq!(
        path.file_name().unwrap().to_string_lossy(),
        format!("opscope-{}.pftrace", std::process::id())
    );
    let bytes = std::fs::read(path).unwrap();
    let mut trace = Trace::new();
    opscope_formats::perfetto::import(&bytes, &path.to_string_lossy(), &mut trace).unwrap();

    assert_eq!(trace.repairs.unmatched_ends, 0);
    let s = &trace.slices;
    let mut per_thread: HashMap<String, usize> = HashMap::new();
    let mut ops = 0;
    let mut inner = 0;
    for i in 0..s.len() {
        assert!(
            s.ts[i] >= started as i64 && s.end(i) <= ended as i64,
            "times on CLOCK_MONOTONIC"
        );
        let track = &trace.tracks[s.track[i] as usize];
        let name = trace.str(s.name[i]).to_string();
        if name.starts_with("op") {
            ops += 1;
            assert_eq!(s.kind(i), SliceKind::Op);
            assert_eq!(trace.str(s.category[i]), "itt/test");
            let thread = &trace.threads[track.thread.unwrap().0 as usize];
            *per_thread
                .entry(trace.str(thread.name.unwrap()).to_string())
                .or_default() += 1;
            // The args record after the inner slice belongs to the enclosing op.
            let index = trace.strings.find("index").unwrap();
            let value = trace.args.find(s.args[i], index).expect("index arg");
            assert!(matches!(value, ArgValue::Int(_) | ArgValue::UInt(_)));
            let j = i + 1;
            assert_eq!(trace.str(s.name[j]), "inner");
            assert_eq!(s.parent[j] as usize, i, "inner nests in its op");
        } else if name == "inner" {
            inner += 1;
            assert_eq!(s.kind(i), SliceKind::Annotation);
            let payload = trace.strings.find("payload").unwrap();
            assert!(
                matches!(trace.args.find(s.args[i], payload), Some(ArgValue::Int(v)) if v <= 0)
            );
        }
    }
    assert_eq!(ops, THREADS * PER_THREAD);
    assert_eq!(inner, THREADS * PER_THREAD);
    for t in 0..THREADS {
        assert_eq!(
            per_thread.get(&format!("worker-{t}")),
            Some(&PER_THREAD),
            "{per_thread:?}"
        );
    }
    let handoffs: Vec<usize> = (0..s.len())
        .filter(|&i| trace.str(s.name[i]) == "handoff")
        .collect();
    assert_eq!(handoffs.len(), THREADS);
    assert!(handoffs.iter().all(|&i| s.dur[i] > 0));
    assert_eq!(trace.counters.value.len(), THREADS * PER_THREAD / 100);
    let done = (0..trace.instants.len())
        .filter(|&i| trace.str(trace.instants.name[i]) == "done")
        .count();
    assert_eq!(done, 1);
}
