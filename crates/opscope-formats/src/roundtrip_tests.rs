//! Round trips on every real Chrome/Kineto/TF-timeline trace of the shared corpus:
//! import → Chrome JSON → import and import → Perfetto → import keep every slice,
//! instant, counter sample and flow (names, categories, kinds, args, timestamps and
//! durations to the nanosecond).

use std::path::{Path, PathBuf};

use opscope_model::args::ArgValue;
use opscope_model::{ArgsId, Trace, TrackKind};

fn chrome_traces(traces: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                walk(&path, out);
            } else if (name.ends_with(".json") || name.ends_with(".json.gz"))
                && !name.ends_with("_et.json.gz")
            {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&traces.join("kineto"), &mut files);
    walk(&traces.join("tf-timeline"), &mut files);
    files.sort();
    files
}

pub(crate) fn arg_text(t: &Trace, v: ArgValue) -> String {
    match v {
        ArgValue::Str(s) => format!("Str({:?})", t.str(s)),
        ArgValue::Json(s) => format!("Json({})", t.str(s)),
        ArgValue::Float(f) => format!("Float({:e})", f),
        other => format!("{other:?}"),
    }
}

pub(crate) fn args_text(t: &Trace, id: ArgsId) -> String {
    let mut args: Vec<String> = t
        .args
        .get(id)
        .map(|(k, v)| format!("{}={}", t.str(k), arg_text(t, v)))
        .collect();
    args.sort();
    args.join(", ")
}

/// Where an event is: its process and thread, or its process alone on other tracks
/// (async lanes are re-numbered by a Chrome round trip; their events are not).
fn place(t: &Trace, track: u32) -> String {
    let tr = &t.tracks[track as usize];
    let pid = tr.process.map(|p| t.processes[p.index()].pid);
    match tr.kind {
        TrackKind::Thread | TrackKind::GpuStream => {
            let tid = tr.thread.map(|th| t.threads[th.index()].tid);
            format!("{}:{pid:?}:{tid:?}", tr.kind.name())
        }
        TrackKind::Async => format!("async:{pid:?}"),
        TrackKind::Counter => format!("counter:{pid:?}:{}", t.str(tr.name)),
    }
}

fn slice_text(t: &Trace, i: usize, place: &impl Fn(&Trace, u32) -> String) -> String {
    let s = &t.slices;
    format!(
        "{} {}+{} {:?} {:?} {} depth={}",
        place(t, s.track[i]),
        s.ts[i],
        s.dur[i],
        t.str(s.name[i]),
        t.str(s.category[i]),
        s.kind(i).name(),
        s.depth(i)
    )
}

/// The events of a trace as sorted lines, independent of row order and ids; `place`
/// says how a track is written.
pub(crate) fn event_lines(t: &Trace, place: impl Fn(&Trace, u32) -> String) -> [Vec<String>; 4] {
    let mut slices: Vec<String> = (0..t.slices.len())
        .map(|i| {
            format!(
                "{} [{}]",
                slice_text(t, i, &place),
                args_text(t, t.slices.args[i])
            )
        })
        .collect();
    let inst = &t.instants;
    let mut instants: Vec<String> = (0..inst.len())
        .map(|i| {
            format!(
                "{} {} {:?} {:?} {} {:?} [{}]",
                place(t, inst.track[i]),
                inst.ts[i],
                t.str(inst.name[i]),
                t.str(inst.category[i]),
                inst.kind(i).name(),
                inst.scope[i],
                args_text(t, inst.args[i])
            )
        })
        .collect();
    let c = &t.counters;
    let mut counters: Vec<String> = (0..c.len())
        .map(|i| format!("{} {} {:e}", place(t, c.track[i]), c.ts[i], c.value[i]))
        .collect();
    let f = &t.flows;
    let mut flows: Vec<String> = (0..f.len())
        .map(|i| {
            format!(
                "{} -> {} {:?} {:?}",
                slice_text(t, f.from[i] as usize, &place),
                slice_text(t, f.to[i] as usize, &place),
                t.str(f.name[i]),
                t.str(f.category[i])
            )
        })
        .collect();
    for v in [&mut slices, &mut instants, &mut counters, &mut flows] {
        v.sort();
    }
    [slices, instants, counters, flows]
}

pub(crate) fn assert_same_events(file: &Path, via: &str, a: &Trace, b: &Trace) {
    let names = ["slices", "instants", "counter samples", "flows"];
    for ((x, y), what) in event_lines(a, place)
        .iter()
        .zip(event_lines(b, place).iter())
        .zip(names)
    {
        if x.len() != y.len() {
            let missing: Vec<_> = x.iter().filter(|l| !y.contains(l)).take(5).collect();
            let extra: Vec<_> = y.iter().filter(|l| !x.contains(l)).take(5).collect();
            panic!(
                "{}: {what}: {} before, {} after {via}\n  missing: {missing:#?}\n  extra: {extra:#?}",
                file.display(),
                x.len(),
                y.len()
            );
        }
        if let Some((p, q)) = x.iter().zip(y).find(|(p, q)| p != q) {
            panic!(
                "{}: {what} differ after {via}:\n  before: {p}\n  after:  {q}",
                file.display()
            );
        }
    }
}

fn decompressed(path: &Path) -> Vec<u8> {
    let raw = std::fs::read(path).unwrap();
    let shown = path.display().to_string();
    crate::input::decompress_if_gzip(&raw, &shown)
        .unwrap()
        .into_owned()
}

fn import_file(path: &Path) -> Trace {
    let mut trace = Trace::new();
    crate::import_bytes(&decompressed(path), &path.display().to_string(), &mut trace).unwrap();
    trace
}

fn reimport(bytes: &[u8], name: &str) -> Trace {
    let mut trace = Trace::new();
    crate::import_bytes(bytes, name, &mut trace).unwrap();
    trace
}

#[test]
fn every_real_trace_survives_chrome_and_perfetto_round_trips() {
    let Some(traces) = crate::shared_data::shared().map(|s| s.join("traces")) else {
        return;
    };
    let files = chrome_traces(&traces);
    assert!(
        files.len() >= 60,
        "expected the whole corpus, found {}",
        files.len()
    );
    for file in &files {
        let original = import_file(file);
        // Read as a stream, handed over in small odd-sized pieces: every seam between
        // pieces of text must be invisible.
        let text = decompressed(file);
        let mut streamed = Trace::new();
        let pieces = 4093 + file.as_os_str().len() % 7;
        crate::chrome::import_reader_in_pieces(text.as_slice(), "pieces", &mut streamed, pieces)
            .unwrap();
        assert_same_events(file, "streaming in pieces", &original, &streamed);
        let mut json = Vec::new();
        crate::chrome::export(&original, &mut json).unwrap();
        let from_json = reimport(&json, "round-trip.json");
        assert_same_events(file, "Chrome JSON", &original, &from_json);
        let mut proto = Vec::new();
        crate::perfetto::export(&original, &mut proto).unwrap();
        let from_proto = reimport(&proto, "round-trip.pftrace");
        assert_same_events(file, "Perfetto", &original, &from_proto);
        // Nothing new was repaired on the way back.
        assert_eq!(from_json.repairs.clipped_overlaps, 0, "{}", file.display());
        assert_eq!(from_proto.repairs.total(), 0, "{}", file.display());
    }
}
