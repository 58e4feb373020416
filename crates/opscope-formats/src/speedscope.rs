//! speedscope's file format (<https://www.speedscope.app/file-format-schema.json>),
//! written: each thread's and each device stream's slices as an "evented" profile
//! (a frame opened at a slice's start and closed at its end, in ns), which speedscope
//! shows as its time-ordered, left-heavy and sandwich views; and each sampled thread's
//! stacks as a "sampled" profile (the samples of running threads, each weighted by the
//! time it stands for, frames with their file and line). Async lanes, whose slices
//! need not nest, and counters are left out.

use std::io::Write;

use hashbrown::HashMap;
use opscope_model::{StrId, Trace, TrackKind};
use serde::Serialize;

#[derive(Serialize)]
struct File<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    shared: Shared,
    profiles: Vec<Profile>,
    name: &'a str,
    exporter: String,
}

#[derive(Serialize)]
struct Shared {
    frames: Vec<FrameName>,
}

#[derive(Serialize)]
struct FrameName {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Profile {
    #[serde(rename = "type")]
    kind: &'static str,
    name: String,
    unit: &'static str,
    start_value: i64,
    end_value: i64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    events: Vec<Event>,
    /// Sampled profiles: each sample's frames, outermost first, and its weight.
    #[serde(skip_serializing_if = "Option::is_none")]
    samples: Option<Vec<Vec<u32>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    weights: Option<Vec<i64>>,
}

#[derive(Serialize)]
struct Event {
    #[serde(rename = "type")]
    kind: &'static str,
    frame: u32,
    at: i64,
}

/// Writes `trace` as a speedscope file named `name`.
pub fn export(trace: &Trace, name: &str, out: &mut impl Write) -> std::io::Result<()> {
    let s = &trace.slices;
    let mut by_track: Vec<Vec<usize>> = vec![Vec::new(); trace.tracks.len()];
    for i in 0..s.len() {
        by_track[s.track[i] as usize].push(i);
    }
    let mut frames: Vec<FrameName> = Vec::new();
    let mut frame_of: HashMap<StrId, u32> = HashMap::new();
    let mut profiles = Vec::new();
    for (t, slices) in by_track.iter_mut().enumerate() {
        let track = &trace.tracks[t];
        if slices.is_empty() || !matches!(track.kind, TrackKind::Thread | TrackKind::GpuStream) {
            continue;
        }
        // Outer before inner: by start, the longer first.
        slices.sort_by_key(|&i| (s.ts[i], std::cmp::Reverse(s.end(i)), i));
        let mut events = Vec::with_capacity(2 * slices.len());
        // Open frames and where each closes (never after the frame around it).
        let mut open: Vec<(u32, i64)> = Vec::new();
        for &i in slices.iter() {
            let start = s.ts[i];
            while let Some(&(frame, end)) = open.last() {
                if end > start {
                    break;
                }
                events.push(Event {
                    kind: "C",
                    frame,
                    at: end,
                });
                open.pop();
            }
            let end = open.last().map_or(s.end(i), |&(_, e)| s.end(i).min(e));
            let frame = *frame_of.entry(s.name[i]).or_insert_with(|| {
                frames.push(FrameName {
                    name: trace.str(s.name[i]).to_string(),
                    file: None,
                    line: None,
                });
                (frames.len() - 1) as u32
            });
            events.push(Event {
                kind: "O",
                frame,
                at: start,
            });
            open.push((frame, end.max(start)));
        }
        while let Some((frame, end)) = open.pop() {
            events.push(Event {
                kind: "C",
                frame,
                at: end,
            });
        }
        let start_value = events.first().map_or(0, |e| e.at);
        let end_value = events.iter().map(|e| e.at).max().unwrap_or(0);
        profiles.push(Profile {
            kind: "evented",
            name: track_name(trace, t),
            unit: "nanoseconds",
            start_value,
            end_value,
            events,
            samples: None,
            weights: None,
        });
    }
    sampled_profiles(trace, &mut frames, &mut profiles);
    let file = File {
        schema: "https://www.speedscope.app/file-format-schema.json",
        shared: Shared { frames },
        profiles,
        name,
        exporter: format!("opscope {}", env!("CARGO_PKG_VERSION")),
    };
    serde_json::to_writer(&mut *out, &file).map_err(std::io::Error::other)
}

/// A "sampled" profile per thread with sampled stacks: its running threads' samples.
fn sampled_profiles(trace: &Trace, frames: &mut Vec<FrameName>, profiles: &mut Vec<Profile>) {
    let (samples, stacks) = (&trace.samples, &trace.stacks);
    let mut frame_of: HashMap<u32, u32> = HashMap::new();
    let mut i = 0;
    while i < samples.len() {
        let track = samples.track[i];
        let end = i + samples.track[i..].partition_point(|&t| t == track);
        let (mut stacks_of, mut weights) = (Vec::new(), Vec::new());
        for j in (i..end).filter(|&j| samples.on_cpu(j)) {
            let mut stack: Vec<u32> = stacks
                .frames_of(samples.stack[j])
                .map(|f| {
                    *frame_of.entry(f).or_insert_with(|| {
                        let k = f as usize;
                        frames.push(FrameName {
                            name: trace.str(stacks.frames.function[k]).to_string(),
                            file: Some(trace.str(stacks.frames.file[k]).to_string()),
                            line: Some(stacks.frames.line[k]).filter(|&l| l > 0),
                        });
                        (frames.len() - 1) as u32
                    })
                })
                .collect();
            stack.reverse();
            stacks_of.push(stack);
            weights.push(samples.period[j]);
        }
        if !weights.is_empty() {
            profiles.push(Profile {
                kind: "sampled",
                name: format!("{} · sampled stacks", track_name(trace, track as usize)),
                unit: "nanoseconds",
                start_value: samples.ts[i],
                end_value: samples.ts[end - 1],
                events: Vec::new(),
                samples: Some(stacks_of),
                weights: Some(weights),
            });
        }
        i = end;
    }
}

/// `process (pid N) / thread (tid M)`, or the track's own name for device streams.
fn track_name(trace: &Trace, t: usize) -> String {
    let track = &trace.tracks[t];
    let process = track.process.map(|p| {
        let p = &trace.processes[p.0 as usize];
        match p.name {
            Some(n) => format!("{} (pid {})", trace.str(n), p.pid),
            None => format!("pid {}", p.pid),
        }
    });
    let own = match track.thread {
        Some(th) => {
            let th = &trace.threads[th.0 as usize];
            match th.name {
                Some(n) => format!("{} (tid {})", trace.str(n), th.tid),
                None => format!("tid {}", th.tid),
            }
        }
        None => trace.str(track.name).to_string(),
    };
    match process {
        Some(p) => format!("{p} / {own}"),
        None => own,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_open_and_close_nested_and_in_time_order() {
        let json = r#"{"traceEvents":[
            {"ph":"X","name":"outer","pid":1,"tid":1,"ts":0,"dur":100},
            {"ph":"X","name":"inner","pid":1,"tid":1,"ts":10,"dur":20},
            {"ph":"X","name":"inner","pid":1,"tid":1,"ts":40,"dur":20},
            {"ph":"X","name":"later","pid":1,"tid":1,"ts":150,"dur":10}
        ]}"#;
        let mut trace = Trace::new();
        crate::chrome::import(json.as_bytes(), "t.json", &mut trace).unwrap();
        trace.finish();
        let mut out = Vec::new();
        export(&trace, "t", &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let names: Vec<&str> = v["shared"]["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["outer", "inner", "later"]);
        let events: Vec<(String, u64, i64)> = v["profiles"][0]["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["type"].as_str().unwrap().to_string(),
                    e["frame"].as_u64().unwrap(),
                    e["at"].as_i64().unwrap(),
                )
            })
            .collect();
        let us = 1000;
        let want: Vec<(String, u64, i64)> = [
            ("O", 0, 0),
            ("O", 1, 10 * us),
            ("C", 1, 30 * us),
            ("O", 1, 40 * us),
            ("C", 1, 60 * us),
            ("C", 0, 100 * us),
            ("O", 2, 150 * us),
            ("C", 2, 160 * us),
        ]
        .iter()
        .map(|&(k, f, at)| (k.to_string(), f, at))
        .collect();
        assert_eq!(events, want);
        assert_eq!(v["profiles"][0]["unit"], "nanoseconds");
        assert_eq!(v["profiles"][0]["endValue"], 160 * us);
    }

    /// Sampled stacks become a sampled profile: outermost frame first, each sample
    /// weighted by its period, waiting threads' samples left out.
    #[test]
    fn sampled_stacks_become_a_sampled_profile() {
        use opscope_model::samples::state;
        let mut trace = Trace::new();
        let p = trace.process(opscope_model::SourceId(0), 1);
        let th = trace.thread(p, 2);
        let track = trace.thread_track(th, TrackKind::Thread);
        let (main, f, file) = (
            trace.intern("main"),
            trace.intern("f"),
            trace.intern("m.py"),
        );
        let outer = trace.stacks.frame(main, file, 3);
        let inner = trace.stacks.frame(f, file, 0);
        let stack = trace.stacks.stack([outer, inner]);
        let on = state::ACTIVE_KNOWN | state::ACTIVE;
        for (ts, st) in [(10, on), (20, state::ACTIVE_KNOWN), (30, on)] {
            trace.samples.push(opscope_model::SampleRow {
                ts,
                track,
                stack,
                period: ts,
                state: st,
            });
        }
        trace.finish();
        let mut out = Vec::new();
        export(&trace, "t", &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let profile = &v["profiles"][0];
        assert_eq!(profile["type"], "sampled");
        let frames = &v["shared"]["frames"];
        let named: Vec<Vec<&str>> = profile["samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let s = s.as_array().unwrap();
                s.iter()
                    .map(|f| {
                        frames[f.as_u64().unwrap() as usize]["name"]
                            .as_str()
                            .unwrap()
                    })
                    .collect()
            })
            .collect();
        assert_eq!(named, [["main", "f"], ["main", "f"]]);
        assert_eq!(profile["weights"], serde_json::json!([10, 30]));
        let main = profile["samples"][0][0].as_u64().unwrap() as usize;
        let f = profile["samples"][0][1].as_u64().unwrap() as usize;
        assert_eq!(
            (&frames[main]["file"], &frames[main]["line"]),
            (&serde_json::json!("m.py"), &serde_json::json!(3))
        );
        assert!(frames[f].get("line").is_none(), "no line known");
        assert!(profile.get("events").is_none());
    }
}
