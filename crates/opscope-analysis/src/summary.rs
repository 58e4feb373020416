//! What a trace holds, in numbers: files and their format, ranks, hosts, processes,
//! devices, tracks, time span, slices per kind, repairs and the model's memory — what
//! `opscope info` shows.

use std::collections::BTreeMap;

use opscope_model::{SliceKind, Trace, TrackKind};
use serde::Serialize;

use crate::context::Context;
use crate::report::{Line, Report, Reported, Value};

/// The summary `info` prints; its field names are the documented JSON keys.
#[derive(Serialize, Debug)]
pub struct Summary {
    pub files: Vec<FileSummary>,
    pub hosts: Vec<String>,
    pub ranks: Vec<u32>,
    pub processes: usize,
    /// Each host process by the one name every command gives it (`rank 0 (pid 41)`),
    /// in the trace's order.
    pub process_names: Vec<String>,
    pub threads: usize,
    pub devices: Vec<DeviceSummary>,
    pub tracks: BTreeMap<&'static str, usize>,
    pub start_ns: Option<i64>,
    pub end_ns: Option<i64>,
    pub duration_ns: Option<i64>,
    pub slices: usize,
    pub slices_by_kind: BTreeMap<&'static str, usize>,
    /// Summed durations of the slices of each kind.
    pub slice_ns_by_kind: BTreeMap<&'static str, i64>,
    pub instants: usize,
    pub counter_samples: usize,
    pub flows: usize,
    /// Sampled stacks, and those of threads that ran (the rest waited).
    pub stack_samples: usize,
    pub stack_samples_on_cpu: usize,
    /// Threads with sampled stacks.
    pub sampled_threads: usize,
    /// Kernels, copies and sets on GPU streams.
    pub device_work: usize,
    /// Of those, how many have no launching host call (no flow, no correlation id).
    pub unattributed_device_work: usize,
    pub unattributed_kernels: usize,
    pub repairs: BTreeMap<&'static str, u64>,
    pub unknown_categories: BTreeMap<String, u64>,
    pub distinct_strings: usize,
    pub model_bytes: usize,
    pub model_bytes_per_slice: Option<f64>,
    /// Where `model_bytes` goes: strings, args, slices, instants, counters, flows.
    pub model_bytes_by_table: BTreeMap<&'static str, usize>,
}

#[derive(Serialize, Debug)]
pub struct FileSummary {
    pub path: String,
    pub format: String,
    pub rank: Option<u32>,
    pub world_size: Option<u32>,
    pub host: Option<String>,
    /// Events read from the file, where the format counts them itself (CTF: every
    /// event record of every stream, whatever it became in the model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<u64>,
    /// Events the tracer said it dropped (CTF packets' `events_discarded`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_discarded: Option<u64>,
    /// The correction that put this file's host on the reference host's clock, when
    /// hosts were merged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_correction: Option<ClockCorrection>,
}

/// A host's clock correction ([`crate::clock_merge`]).
#[derive(Serialize, Debug, Clone, Copy, PartialEq)]
pub struct ClockCorrection {
    /// Added at the host's first event.
    pub offset_ns: i64,
    pub drift_ppm: f64,
    /// How far off it may be at worst.
    pub bound_ns: Option<i64>,
}

impl ClockCorrection {
    /// Each source's correction (by source index), where hosts were merged onto one
    /// clock: the offset quoted at the source's first event.
    pub fn of_sources(trace: &Trace) -> Vec<Option<ClockCorrection>> {
        let merged: Vec<Option<&opscope_model::ClockDomain>> = trace
            .sources
            .iter()
            .map(|s| {
                trace.clocks.get(s.clock.0 as usize).filter(|c| {
                    trace
                        .str(c.name)
                        .starts_with(opscope_model::clock::MERGED_CLOCK_PREFIX)
                })
            })
            .collect();
        if merged.iter().all(Option::is_none) {
            return vec![None; trace.sources.len()];
        }
        let mut first = vec![i64::MAX; trace.sources.len()];
        let source_of_track: Vec<Option<usize>> = trace
            .tracks
            .iter()
            .map(|t| crate::correlate::source_of_track(trace, t).map(|s| s.index()))
            .collect();
        for (&ts, &track) in trace.slices.ts.iter().zip(&trace.slices.track) {
            if let Some(s) = source_of_track[track as usize] {
                first[s] = first[s].min(ts);
            }
        }
        merged
            .iter()
            .zip(&first)
            .map(|(clock, &at)| {
                let t = (*clock)?.to_global;
                // The shift at the first event's own time: `at` is its corrected time,
                // `at − shift` its own (the shift from 0: drift·x + offset).
                let at = if at == i64::MAX { 0 } else { at };
                let shift = |x: f64| t.offset_ns as f64 + x * t.drift_ppb / 1e9;
                let local = at as f64 - shift(at as f64);
                Some(ClockCorrection {
                    offset_ns: shift(local).round() as i64,
                    drift_ppm: t.drift_ppb / 1e3,
                    bound_ns: t.error_bound_ns,
                })
            })
            .collect()
    }

    /// `clock +205.7 µs, 46.66 ppm, ±16.2 µs` for a report line.
    pub fn text(&self) -> String {
        let us = |ns: i64| ns as f64 / 1e3;
        let bound = self
            .bound_ns
            .map_or_else(|| "no bound".to_string(), |b| format!("±{:.1} µs", us(b)));
        format!(
            "clock {:+.1} µs, {:+.2} ppm, {bound}",
            us(self.offset_ns),
            self.drift_ppm
        )
    }
}

#[derive(Serialize, Debug)]
pub struct DeviceSummary {
    pub kind: &'static str,
    pub index: u32,
    pub name: Option<String>,
    pub file: usize,
    /// Slices on the device's tracks (0 for devices a trace declares but did not use).
    pub slices: usize,
}

/// A count the importer put in a source's metadata.
fn source_count(trace: &Trace, source: &opscope_model::Source, key: &str) -> Option<u64> {
    let key = trace.strings.find(key)?;
    let n = trace.args.find(source.metadata, key)?.as_i64()?;
    u64::try_from(n).ok()
}

pub fn summarize(cx: &Context) -> Summary {
    let trace = cx.trace();
    let corrections = ClockCorrection::of_sources(trace);
    let files = trace
        .sources
        .iter()
        .enumerate()
        .map(|(i, s)| FileSummary {
            path: s.path.clone(),
            format: s.format.to_string(),
            rank: s.rank,
            world_size: s.world_size,
            host: s.host.map(|h| trace.str(h).to_string()),
            events: source_count(trace, s, "events"),
            events_discarded: source_count(trace, s, "events_discarded"),
            clock_correction: corrections[i],
        })
        .collect::<Vec<_>>();
    let mut hosts: Vec<String> = files.iter().filter_map(|f| f.host.clone()).collect();
    hosts.sort();
    hosts.dedup();
    let mut ranks: Vec<u32> = files.iter().filter_map(|f| f.rank).collect();
    ranks.sort();
    ranks.dedup();
    let mut device_slices = vec![0usize; trace.devices.len()];
    for (t, track) in trace.tracks.iter().enumerate() {
        if let Some(d) = track.device {
            device_slices[d.index()] += trace.track_slices(opscope_model::TrackId(t as u32)).len();
        }
    }
    let devices = trace
        .devices
        .iter()
        .zip(device_slices)
        .map(|(d, slices)| DeviceSummary {
            kind: d.kind.name(),
            index: d.index,
            name: d.name.map(|n| trace.str(n).to_string()),
            file: d.source.index(),
            slices,
        })
        .collect();
    let mut tracks = BTreeMap::new();
    for kind in [
        TrackKind::Thread,
        TrackKind::GpuStream,
        TrackKind::Async,
        TrackKind::Counter,
    ] {
        tracks.insert(
            kind.name(),
            trace.tracks.iter().filter(|t| t.kind == kind).count(),
        );
    }
    let mut by_code = [0usize; SliceKind::ALL.len()];
    let mut ns_by_code = [0i64; SliceKind::ALL.len()];
    // Over the columns, not row by row through `kind(i)`: a large cached trace's `info`
    // is mostly this pass.
    let other = SliceKind::Other.code() as usize;
    for (&code, &dur) in trace
        .slices
        .kind_codes()
        .iter()
        .zip(trace.slices.dur.iter())
    {
        let code = if (code as usize) < SliceKind::ALL.len() {
            code as usize
        } else {
            other
        };
        by_code[code] += 1;
        ns_by_code[code] += dur;
    }
    let slices_by_kind = SliceKind::ALL
        .iter()
        .zip(by_code)
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| (k.name(), n))
        .collect();
    let slice_ns_by_kind = SliceKind::ALL
        .iter()
        .zip(by_code.iter().zip(ns_by_code))
        .filter(|(_, (n, _))| **n > 0)
        .map(|(k, (_, ns))| (k.name(), ns))
        .collect();
    let r = &trace.repairs;
    let repairs = BTreeMap::from([
        ("negative_durations", r.negative_durations),
        ("clipped_overlaps", r.clipped_overlaps),
        ("dangling_references", r.dangling_references),
        ("unmatched_begins", r.unmatched_begins),
        ("unmatched_ends", r.unmatched_ends),
        ("unbound_flow_events", r.unbound_flow_events),
        ("malformed_events", r.malformed_events),
        ("unsupported_events", r.unsupported_events),
    ]);
    let unknown_categories = trace
        .unknown_categories
        .iter()
        .map(|(c, n)| (trace.str(*c).to_string(), *n))
        .collect();
    let span = trace.time_span();
    let model_bytes = trace.heap_bytes();
    let correlation = cx.correlation();
    Summary {
        files,
        hosts,
        ranks,
        processes: trace.processes.len(),
        process_names: (0..trace.processes.len())
            .filter(|&p| trace.processes[p].device.is_none())
            .map(|p| crate::roles::process_name(trace, opscope_model::ProcessId(p as u32)))
            .collect(),
        threads: trace.threads.len(),
        devices,
        tracks,
        start_ns: span.map(|s| s.0),
        end_ns: span.map(|s| s.1),
        duration_ns: span.map(|s| s.1 - s.0),
        slices: trace.slices.len(),
        slices_by_kind,
        slice_ns_by_kind,
        instants: trace.instants.len(),
        counter_samples: trace.counters.len(),
        flows: trace.flows.len(),
        stack_samples: trace.samples.len(),
        stack_samples_on_cpu: (0..trace.samples.len())
            .filter(|&i| trace.samples.on_cpu(i))
            .count(),
        sampled_threads: {
            let mut tracks = trace.samples.track.to_vec();
            tracks.dedup();
            tracks.len()
        },
        device_work: correlation.device_slices,
        unattributed_device_work: correlation.unattributed,
        unattributed_kernels: correlation.unattributed_kernels,
        repairs,
        unknown_categories,
        distinct_strings: trace.strings.len(),
        model_bytes,
        model_bytes_per_slice: (!trace.slices.is_empty())
            .then(|| model_bytes as f64 / trace.slices.len() as f64),
        model_bytes_by_table: BTreeMap::from([
            ("strings", trace.strings.heap_bytes()),
            ("args", trace.args.heap_bytes()),
            ("slices", trace.slices.heap_bytes()),
            ("instants", trace.instants.heap_bytes()),
            ("counters", trace.counters.heap_bytes()),
            ("flows", trace.flows.heap_bytes()),
            (
                "samples",
                trace.samples.heap_bytes() + trace.stacks.heap_bytes(),
            ),
        ]),
    }
}

impl Reported for Summary {
    fn report(&self) -> Report {
        let s = self;
        let mut report = Report::default();
        for f in &s.files {
            let mut line = format!("file        {} ({})", f.path, f.format);
            if let Some(rank) = f.rank {
                line += &format!(", rank {rank}");
                if let Some(w) = f.world_size {
                    line += &format!(" of {w}");
                }
            }
            if let Some(host) = &f.host {
                line += &format!(", host {host}");
            }
            if let Some(n) = f.events {
                line += &format!(", {n} events");
            }
            if let Some(n) = f.events_discarded.filter(|&n| n > 0) {
                line += &format!(", {n} events discarded by the tracer");
            }
            if let Some(c) = &f.clock_correction {
                line += &format!(", {}", c.text());
            }
            report.line(Line::of(line));
        }
        report.line(Line::of(format!(
            "processes   {}  threads {}",
            s.processes, s.threads
        )));
        for name in s.process_names.iter().take(8) {
            report.line(Line::of(format!("  {name}")));
        }
        if s.process_names.len() > 8 {
            report.line(Line::of(format!(
                "  … and {} more (--format json lists them all)",
                s.process_names.len() - 8
            )));
        }
        for d in s.devices.iter().filter(|d| d.slices > 0) {
            let mut line = format!("device      {} {}", d.kind, d.index);
            if let Some(name) = &d.name {
                line += &format!(" ({name})");
            }
            report.line(Line::of(format!("{line}: {} slices", d.slices)));
        }
        let unused = s.devices.iter().filter(|d| d.slices == 0).count();
        if unused > 0 {
            report.line(Line::of(format!(
                "            {unused} more devices declared, with no events"
            )));
        }
        let tracks: Vec<String> = s
            .tracks
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        report.line(Line::of(format!("tracks      {}", tracks.join(", "))));
        if let (Some(start), Some(dur)) = (s.start_ns, s.duration_ns) {
            report.line(
                Line::of("time        ")
                    .value(Value::Duration(dur as f64))
                    .text(format!(" from {start} ns")),
            );
        }
        report.line(Line::of(format!("slices      {}", s.slices)));
        let width = s.slices_by_kind.keys().map(|k| k.len()).max().unwrap_or(0);
        for (kind, n) in &s.slices_by_kind {
            report.line(Line::of(format!("  {kind:<width$}  {n:>10}")));
        }
        report.line(Line::of(format!("instants    {}", s.instants)));
        report.line(Line::of(format!(
            "counters    {} samples",
            s.counter_samples
        )));
        report.line(Line::of(format!("flows       {}", s.flows)));
        if s.stack_samples > 0 {
            report.line(Line::of(format!(
                "stacks      {} samples of {} threads, {} of them running (the rest waiting)",
                s.stack_samples, s.sampled_threads, s.stack_samples_on_cpu
            )));
        }
        if s.device_work > 0 {
            report.line(Line::of(format!(
                "launches    {} of {} kernels, copies and sets linked to their launch; {} kernels unattributed",
                s.device_work - s.unattributed_device_work,
                s.device_work,
                s.unattributed_kernels
            )));
        }
        let repairs: Vec<String> = s
            .repairs
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| format!("{n} {}", k.replace('_', " ")))
            .collect();
        report.line(Line::of(if repairs.is_empty() {
            "repairs     none".to_string()
        } else {
            format!("repairs     {}", repairs.join(", "))
        }));
        if !s.unknown_categories.is_empty() {
            let cats: Vec<String> = s
                .unknown_categories
                .iter()
                .map(|(c, n)| format!("{c:?} ({n})"))
                .collect();
            report.line(Line::of(format!(
                "unknown     categories kept as 'other': {}",
                cats.join(", ")
            )));
        }
        let mut memory = Line::of("memory      ")
            .value(Value::number(s.model_bytes as f64 / (1 << 20) as f64, 1))
            .text(" MiB in the model");
        if let Some(per) = s.model_bytes_per_slice {
            memory = memory
                .text(" (")
                .value(Value::number(per, 1))
                .text(" bytes per slice)");
        }
        report.line(memory);
        report
    }
}
