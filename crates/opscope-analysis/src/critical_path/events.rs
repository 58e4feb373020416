//! One source's events as HTA's critical path reads them: a row per slice with its
//! category, stream (`-1` on the host), correlation id and the index of its partner
//! across host and device (`index_correlation`: a launch call's work, a device event's
//! call), in an order that stands for the file's.

use hashbrown::HashMap;
use opscope_model::args::ArgValue;
use opscope_model::{SliceKind, SourceId, Trace, TrackKind};

#[derive(Clone, Debug)]
pub struct Event {
    /// The slice row in the model.
    pub slice: usize,
    pub ts: i64,
    pub dur: i64,
    pub name: String,
    pub cat: String,
    pub pid: i64,
    pub tid: i64,
    /// The `stream` arg of device events, `-1` on the host (and for Event and Context
    /// Syncs, whose `stream` arg is `-1`).
    pub stream: i64,
    pub correlation: Option<i64>,
    /// The partner across host and device, by event index.
    pub partner: Option<usize>,
    pub wait_on_stream: Option<i64>,
    pub wait_on_record: Option<i64>,
}

impl Event {
    pub fn end(&self) -> i64 {
        self.ts + self.dur
    }

    pub fn on_device(&self) -> bool {
        self.stream != -1
    }
}

/// The events of `source`, sorted by start (then longer first, then slice row).
pub fn events(trace: &Trace, source: SourceId) -> Vec<Event> {
    let s = &trace.slices;
    let key = |name: &str| trace.strings.find(name);
    let (stream_key, corr_key, wait_stream_key, wait_record_key) = (
        key("stream"),
        key("correlation"),
        key("wait_on_stream"),
        key("wait_on_cuda_event_record_corr_id"),
    );
    let int = |i: usize, k: Option<opscope_model::StrId>| -> Option<i64> {
        match trace.args.find(s.args[i], k?)? {
            ArgValue::Int(v) => Some(v),
            ArgValue::UInt(v) => i64::try_from(v).ok(),
            ArgValue::Float(v) => Some(v as i64),
            _ => None,
        }
    };
    // A trace with a timestamp finer than a µs is one HTA reads as floats and rounds.
    let rounded = (0..s.len()).any(|i| {
        s.ts[i] % 1000 != 0
            && crate::correlate::source_of_track(trace, &trace.tracks[s.track[i] as usize])
                == Some(source)
    });
    let mut out = Vec::new();
    // The host ops of a source written by no Kineto (a recording, XPlane, a TensorFlow
    // timeline) are its ops by kind, so that its path runs along them as along Kineto's
    // `cpu_op`s; a Kineto source keeps HTA's reading exactly.
    let mut by_kind: Vec<Option<&'static str>> = Vec::new();
    for i in 0..s.len() {
        let t = s.track[i] as usize;
        let track = &trace.tracks[t];
        if crate::correlate::source_of_track(trace, track) != Some(source) {
            continue;
        }
        let cat = hta_category(trace.str(s.category[i])).to_string();
        let process = track.process.map(|p| &trace.processes[p.index()]);
        let thread = track.thread.map(|th| &trace.threads[th.index()]);
        let device_side = track.kind == TrackKind::GpuStream || cat == "cuda_sync";
        let stream = if device_side {
            int(i, stream_key).unwrap_or(-1)
        } else {
            -1
        };
        let (ts, dur) = hta_times(s.ts[i], s.dur[i], rounded);
        by_kind.push(match s.kind(i) {
            SliceKind::Op | SliceKind::Collective if track.kind == TrackKind::Thread => {
                Some("cpu_op")
            }
            SliceKind::Runtime if track.kind == TrackKind::Thread => Some("cuda_runtime"),
            SliceKind::Driver if track.kind == TrackKind::Thread => Some("cuda_driver"),
            _ => None,
        });
        out.push(Event {
            slice: i,
            ts,
            dur,
            name: trace.str(s.name[i]).to_string(),
            cat,
            pid: process.map_or(-1, |p| p.pid),
            tid: thread.map_or(-1, |th| th.tid),
            stream,
            correlation: int(i, corr_key),
            partner: None,
            wait_on_stream: int(i, wait_stream_key),
            wait_on_record: int(i, wait_record_key),
        });
    }
    if !out
        .iter()
        .any(|e| KINETO_CATEGORIES.contains(&e.cat.as_str()))
    {
        for (e, cat) in out.iter_mut().zip(by_kind) {
            if let Some(cat) = cat {
                e.cat = cat.to_string();
            }
        }
    }
    out.sort_by_key(|e| (e.ts, std::cmp::Reverse(e.dur), e.slice));
    // Host calls and device events of one correlation id are partners.
    let is_call = |e: &Event| e.cat == "cuda_runtime" || e.cat == "cuda_driver";
    let is_device = |e: &Event| e.on_device() || e.cat == "cuda_sync";
    let mut calls: HashMap<i64, usize> = HashMap::new();
    for (k, e) in out.iter().enumerate() {
        if let Some(c) = e.correlation.filter(|_| is_call(e)) {
            calls.entry(c).or_insert(k);
        }
    }
    // A call that launched several pieces of work (a CUDA graph) is paired with the
    // last, as HTA pairs it (each piece still names the call).
    let mut device: HashMap<i64, usize> = HashMap::new();
    for (k, e) in out.iter().enumerate() {
        if let Some(c) = e.correlation.filter(|_| is_device(e) && !is_call(e)) {
            device.insert(c, k);
        }
    }
    for e in &mut out {
        e.partner = match e.correlation {
            Some(c) if is_call(e) => device.get(&c).copied(),
            Some(c) if is_device(e) => calls.get(&c).copied(),
            _ => None,
        };
    }
    out
}

/// The categories of the events HTA's graph is built of, as Kineto names them.
const KINETO_CATEGORIES: [&str; 6] = [
    "cpu_op",
    "cuda_runtime",
    "cuda_driver",
    "kernel",
    "gpu_memcpy",
    "gpu_memset",
];

/// The category as current Kineto names it: traces written before PyTorch 1.10 name
/// ops, runtime calls and device work `Operator`, `Runtime`, `Kernel`, `Memcpy` and
/// `Memset` (HTA 0.5.0 reads no graph from them: it stops at their first copy).
fn hta_category(cat: &str) -> &str {
    match cat {
        "Operator" => "cpu_op",
        "Runtime" => "cuda_runtime",
        "Kernel" => "kernel",
        "Memcpy" => "gpu_memcpy",
        "Memset" => "gpu_memset",
        other => other,
    }
}

/// An event's start and duration as HTA holds them, in ns. A trace whose timestamps are
/// whole µs keeps them. One with finer timestamps HTA reads as doubles and rounds to
/// whole µs (`round_down_time_stamps`): the start up, the end (start plus duration, a
/// double sum, at 0.25 µs steps near today's epoch) down; so a sub-µs event lasts 0 µs
/// or less there, and HTA's clipping leaves it out.
fn hta_times(ts_ns: i64, dur_ns: i64, rounded: bool) -> (i64, i64) {
    if !rounded {
        return (ts_ns, dur_ns);
    }
    // The double nearest the decimal µs the file held (q is exact in a double).
    let (q, r) = (ts_ns.div_euclid(1000), ts_ns.rem_euclid(1000));
    let ts = q as f64 + r as f64 / 1000.0;
    let end = ts + dur_ns as f64 / 1000.0;
    let (start, end) = (ts.ceil() as i64, end.floor() as i64);
    (start * 1000, (end - start) * 1000)
}
