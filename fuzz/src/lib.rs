//! Checks shared by the fuzz targets: the invariants [`opscope_model::Trace::finish`]
//! promises, and the export/re-import round trips.

use opscope_model::{Trace, TrackId, TrackKind, NONE};

/// Panics if `trace` breaks an invariant of the model: every reference resolves,
/// durations are non-negative, slices are sorted by track and time with valid nesting,
/// and strings and arg bags can be read.
pub fn check_invariants(trace: &Trace) {
    let n_tracks = trace.tracks.len();
    let n_strings = trace.strings.len();
    let str_ok = |id: opscope_model::StrId| (id.0 as usize) < n_strings;

    for p in &trace.processes {
        assert!(p.source.index() < trace.sources.len(), "process source");
        assert!(p.device.is_none_or(|d| d.index() < trace.devices.len()), "process device");
        assert!(p.name.is_none_or(str_ok) && p.labels.is_none_or(str_ok), "process strings");
    }
    for t in &trace.threads {
        assert!(t.process.index() < trace.processes.len(), "thread process");
        assert!(t.name.is_none_or(str_ok), "thread name");
    }
    for d in &trace.devices {
        assert!(d.source.index() < trace.sources.len(), "device source");
    }
    for s in &trace.sources {
        assert!((s.clock.0 as usize) < trace.clocks.len(), "source clock");
        let _ = trace.args.get(s.metadata).count();
    }
    for t in &trace.tracks {
        assert!(str_ok(t.name), "track name");
        assert!(t.process.is_none_or(|p| p.index() < trace.processes.len()), "track process");
        assert!(t.thread.is_none_or(|th| th.index() < trace.threads.len()), "track thread");
        assert!(t.device.is_none_or(|d| d.index() < trace.devices.len()), "track device");
    }

    let s = &trace.slices;
    let n = s.len();
    for col in [s.dur.len(), s.track.len(), s.name.len(), s.category.len(), s.parent.len(), s.args.len()] {
        assert_eq!(col, n, "slice columns differ in length");
    }
    for i in 0..n {
        assert!((s.track[i] as usize) < n_tracks, "slice {i}: track {} of {n_tracks}", s.track[i]);
        assert!(s.dur[i] >= 0, "slice {i}: negative duration {}", s.dur[i]);
        assert!(str_ok(s.name[i]) && str_ok(s.category[i]), "slice {i}: string ids");
        let _ = trace.str(s.name[i]);
        let _ = s.kind(i);
        let _ = trace.args.get(s.args[i]).count();
        if i > 0 {
            let key = |j: usize| (s.track[j], s.ts[j], std::cmp::Reverse(s.dur[j]));
            assert!(key(i - 1) <= key(i), "slice {i}: not sorted by track and time");
        }
        let parent = s.parent[i];
        if parent != NONE {
            let p = parent as usize;
            assert!(p < i, "slice {i}: parent {p} does not precede it");
            assert_eq!(s.track[p], s.track[i], "slice {i}: parent on another track");
            assert!(s.ts[p] <= s.ts[i] && s.end(i) <= s.end(p), "slice {i}: outside its parent {p}");
        }
    }
    for t in 0..n_tracks {
        let range = trace.track_slices(TrackId(t as u32));
        assert!(range.end <= n, "track {t}: slice range past the end");
        assert!(s.track[range.clone()].iter().all(|&x| x as usize == t), "track {t}: range");
        if trace.tracks[t].kind == TrackKind::Thread {
            // Thread slices nest strictly: a later slice starting inside an earlier one
            // ends inside it too (`finish` clips it otherwise).
            for i in range.clone() {
                let parent = s.parent[i];
                if parent != NONE {
                    assert!(s.end(i) <= s.end(parent as usize), "slice {i}: overlaps its parent");
                }
            }
        }
    }

    let f = &trace.flows;
    assert!(f.to.len() == f.len() && f.name.len() == f.len() && f.category.len() == f.len());
    for i in 0..f.len() {
        assert!((f.from[i] as usize) < n && (f.to[i] as usize) < n, "flow {i}: dangling");
        assert!(str_ok(f.name[i]) && str_ok(f.category[i]), "flow {i}: string ids");
    }

    let inst = &trace.instants;
    for i in 0..inst.len() {
        assert!((inst.track[i] as usize) < n_tracks, "instant {i}: track");
        assert!(str_ok(inst.name[i]) && str_ok(inst.category[i]), "instant {i}: string ids");
        let _ = inst.kind(i);
        let _ = trace.args.get(inst.args[i]).count();
    }
    let c = &trace.counters;
    assert!(c.track.len() == c.len() && c.value.len() == c.len());
    for i in 0..c.len() {
        assert!((c.track[i] as usize) < n_tracks, "counter sample {i}: track");
    }
    let _ = trace.time_span();
}

/// Exports `trace` as Chrome JSON and imports the output again: the exporter must
/// write what the importer reads.
pub fn chrome_round_trip(trace: &Trace) {
    let mut out = Vec::new();
    opscope_formats::chrome::export(trace, &mut out).expect("chrome export failed");
    let mut again = Trace::new();
    if let Err(e) = opscope_formats::chrome::import(&out, "exported.json", &mut again) {
        panic!("re-importing the Chrome export failed: {e}\n{}", String::from_utf8_lossy(&out));
    }
    check_invariants(&again);
}

/// Exports `trace` as Perfetto protobuf and imports the output again.
pub fn perfetto_round_trip(trace: &Trace) {
    let mut out = Vec::new();
    opscope_formats::perfetto::export(trace, &mut out).expect("perfetto export failed");
    let mut again = Trace::new();
    if let Err(e) = opscope_formats::perfetto::import(&out, "exported.pftrace", &mut again) {
        panic!("re-importing the Perfetto export failed: {e}");
    }
    check_invariants(&again);
}
