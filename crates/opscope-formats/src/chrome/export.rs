//! Writes the model as Chrome trace JSON (object form) that chrome://tracing, Perfetto,
//! TensorBoard's trace viewer and HTA open: `X` slices on threads and streams, `b`/`e`
//! on async lanes, `i` instants, `C` counters, `s`/`f` flows and `M` names.

use std::io::{self, Write};

use opscope_model::args::ArgValue;
use opscope_model::{ArgsId, InstantScope, SliceKind, Trace, TrackId, TrackKind};

use crate::error::ExportError;

/// Writes `trace` to `out` as one JSON document. With a single source, that source's
/// file-level metadata (schemaVersion, deviceProperties, distributedInfo, …) is written
/// back at the top level so tools that read it still find it.
pub fn export(trace: &Trace, out: &mut impl Write) -> Result<(), ExportError> {
    export_part(trace, None, out)
}

/// Writes the slices `keep` marks (one flag per slice), the flows between them, and the
/// instants and counter samples within their time span: one step or one view of a trace
/// (tfprof's `-output timeline`), with every process and thread named.
pub fn export_selected(
    trace: &Trace,
    keep: &[bool],
    out: &mut impl Write,
) -> Result<(), ExportError> {
    export_part(trace, Some(keep), out)
}

fn export_part(
    trace: &Trace,
    keep: Option<&[bool]>,
    out: &mut impl Write,
) -> Result<(), ExportError> {
    let span = keep.map(|keep| {
        let s = &trace.slices;
        (0..s.len())
            .filter(|&i| keep.get(i) == Some(&true))
            .fold((i64::MAX, i64::MIN), |(lo, hi), i| {
                (lo.min(s.ts[i]), hi.max(s.end(i)))
            })
    });
    let mut w = JsonWriter {
        trace,
        out,
        pids: distinct_pids(trace),
        first: true,
        keep,
        span,
        keeps_category: Default::default(),
    };
    w.out.write_all(b"{\"traceEvents\":[\n")?;
    w.metadata_events()?;
    w.slices()?;
    w.instants()?;
    w.counters()?;
    w.flows()?;
    w.out.write_all(b"\n]")?;
    let mut written: Vec<&str> = Vec::new();
    if let [source] = trace.sources.as_slice() {
        for (key, value) in trace.args.get(source.metadata) {
            let key = trace.str(key);
            if key == "traceEvents" {
                continue;
            }
            w.out.write_all(b",\n")?;
            write_str(w.out, key)?;
            w.out.write_all(b":")?;
            w.value(value)?;
            written.push(key);
        }
    }
    // Kineto's readers look for these (HTA takes a trace's rank from distributedInfo):
    // a trace that came from elsewhere, a recording, gets them here.
    if !written.contains(&"schemaVersion") {
        w.out.write_all(b",\n\"schemaVersion\":1")?;
    }
    let rank = trace.sources.first().and_then(|s| s.rank);
    let same_rank = trace.sources.iter().all(|s| s.rank == rank);
    if let (Some(rank), true, false) = (rank, same_rank, written.contains(&"distributedInfo")) {
        write!(w.out, ",\n\"distributedInfo\":{{\"rank\":{rank}")?;
        if let Some(world) = trace.sources[0].world_size {
            write!(w.out, ",\"world_size\":{world}")?;
        }
        w.out.write_all(b"}")?;
    }
    w.out.write_all(b"}\n")?;
    Ok(())
}

struct JsonWriter<'a, W: Write> {
    trace: &'a Trace,
    out: &'a mut W,
    /// The pid each process is written with ([`distinct_pids`]).
    pids: Vec<i64>,
    first: bool,
    /// Which slices to write (all when `None`).
    keep: Option<&'a [bool]>,
    /// The time span of the kept slices: instants and counters outside it are left out.
    span: Option<(i64, i64)>,
    /// Whether a (category, kind) keeps its category ([`kineto_category`]), decided
    /// once: a trace has a few dozen of them across millions of slices.
    keeps_category: std::collections::HashMap<(opscope_model::StrId, u8), bool>,
}

/// Microseconds with exactly three decimals: nanoseconds survive the round trip.
fn write_micros(out: &mut impl Write, ns: i64) -> io::Result<()> {
    let sign = if ns < 0 { "-" } else { "" };
    let abs = ns.unsigned_abs();
    write!(out, "{sign}{}.{:03}", abs / 1000, abs % 1000)
}

fn write_str(out: &mut impl Write, s: &str) -> io::Result<()> {
    serde_json::to_writer(out, s).map_err(io::Error::other)
}

/// `{:?}` keeps a decimal point on integral floats, so they stay floats. JSON has no
/// NaN or infinity (Perfetto traces do): those are written as `null`.
fn write_f64(out: &mut impl Write, f: f64) -> io::Result<()> {
    if f.is_finite() {
        write!(out, "{f:?}")
    } else {
        out.write_all(b"null")
    }
}

/// The arg that keeps a slice's category when Kineto's had to be written instead.
pub const CATEGORY_ARG: &str = "opscope.category";

/// The category written for a slice: its own when a Kineto reader (opscope's, HTA's,
/// TensorBoard's PyTorch plugin) takes it for the same kind, else Kineto's name for
/// the kind. A recorded PyTorch op (`itt/PyTorch`) becomes a `cpu_op`, a recorded CUDA
/// kernel a `kernel`.
fn kineto_category<'c>(kind: SliceKind, category: &'c str, name: &str) -> &'c str {
    if super::kinds::kind_of(category, name) == Some(kind) {
        return category;
    }
    kineto_name(kind, category, name)
}

/// Kineto's category for a slice kind (`category` where Kineto has none for it).
fn kineto_name<'c>(kind: SliceKind, category: &'c str, name: &str) -> &'c str {
    match kind {
        SliceKind::Op => "cpu_op",
        SliceKind::Kernel => "kernel",
        SliceKind::Memcpy(_) => "gpu_memcpy",
        SliceKind::Memset => "gpu_memset",
        SliceKind::Runtime => "cuda_runtime",
        SliceKind::Driver => "cuda_driver",
        SliceKind::Sync => "cuda_sync",
        SliceKind::Collective => "collective",
        SliceKind::Annotation => "user_annotation",
        SliceKind::Step if name.starts_with("ProfilerStep#") => "user_annotation",
        SliceKind::PythonFunction => "python_function",
        SliceKind::Compile => "compile",
        SliceKind::Step | SliceKind::Alloc | SliceKind::Other => category,
    }
}

/// The pid each process is written with. Files of several ranks each have their
/// `pid 0` (Kineto's GPU) and often the same host pids: in one JSON file they would
/// become one process. A pid already taken by another source's process is moved past
/// every pid in the trace.
fn distinct_pids(trace: &Trace) -> Vec<i64> {
    let mut owner: std::collections::HashMap<i64, opscope_model::SourceId> = Default::default();
    let mut next = trace
        .processes
        .iter()
        .map(|p| p.pid)
        .max()
        .unwrap_or(0)
        .max(0)
        + 1;
    trace
        .processes
        .iter()
        .map(|p| match owner.get(&p.pid) {
            Some(&source) if source != p.source => {
                next += 1;
                next - 1
            }
            _ => {
                owner.insert(p.pid, p.source);
                p.pid
            }
        })
        .collect()
}

fn kept(keep: Option<&[bool]>, slice: usize) -> bool {
    keep.is_none_or(|k| k.get(slice) == Some(&true))
}

fn in_span(span: Option<(i64, i64)>, ts: i64) -> bool {
    span.is_none_or(|(lo, hi)| lo <= ts && ts <= hi)
}

impl<W: Write> JsonWriter<'_, W> {
    fn start_event(&mut self) -> io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        Ok(())
    }

    fn value(&mut self, value: ArgValue) -> io::Result<()> {
        match value {
            ArgValue::Null => self.out.write_all(b"null"),
            ArgValue::Bool(b) => write!(self.out, "{b}"),
            ArgValue::Int(i) => write!(self.out, "{i}"),
            ArgValue::UInt(u) => write!(self.out, "{u}"),
            ArgValue::Float(f) => write_f64(self.out, f),
            ArgValue::Str(s) => write_str(self.out, self.trace.str(s)),
            ArgValue::Json(s) => self.out.write_all(self.trace.str(s).as_bytes()),
        }
    }

    fn args(&mut self, args: ArgsId) -> io::Result<()> {
        self.args_with(args, None)
    }

    /// The args, and the slice's own category when another was written in its place.
    fn args_with(&mut self, args: ArgsId, category: Option<&str>) -> io::Result<()> {
        if args.is_none() && category.is_none() {
            return Ok(());
        }
        self.out.write_all(b",\"args\":{")?;
        let mut first = true;
        if let Some(category) = category {
            write_str(self.out, CATEGORY_ARG)?;
            self.out.write_all(b":")?;
            write_str(self.out, category)?;
            first = false;
        }
        for (key, value) in self.trace.args.get(args) {
            if !first {
                self.out.write_all(b",")?;
            }
            first = false;
            write_str(self.out, self.trace.str(key))?;
            self.out.write_all(b":")?;
            self.value(value)?;
        }
        self.out.write_all(b"}")
    }

    /// `pid` and `tid` of a track: the thread's, or the process's and 0.
    fn pid_tid(&self, track: TrackId) -> (i64, i64) {
        let t = &self.trace.tracks[track.index()];
        let pid = t.process.map_or(0, |p| self.pids[p.index()]);
        let tid = t.thread.map_or(0, |th| self.trace.threads[th.index()].tid);
        (pid, tid)
    }

    fn head(
        &mut self,
        ph: &str,
        name: &str,
        category: &str,
        track: TrackId,
        ts: i64,
    ) -> io::Result<()> {
        let (pid, tid) = self.pid_tid(track);
        self.start_event()?;
        write!(self.out, "{{\"ph\":\"{ph}\",\"name\":")?;
        write_str(self.out, name)?;
        self.out.write_all(b",\"cat\":")?;
        write_str(self.out, category)?;
        write!(self.out, ",\"pid\":{pid},\"tid\":{tid},\"ts\":")?;
        write_micros(self.out, ts)
    }

    fn metadata_events(&mut self) -> io::Result<()> {
        let trace = self.trace;
        let pids = std::mem::take(&mut self.pids);
        for (p, &pid) in trace.processes.iter().zip(&pids) {
            if let Some(name) = p.name {
                self.start_event()?;
                write!(self.out, "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"tid\":0,\"args\":{{\"name\":")?;
                write_str(self.out, trace.str(name))?;
                self.out.write_all(b"}}")?;
            }
            if let Some(labels) = p.labels {
                self.start_event()?;
                write!(self.out, "{{\"ph\":\"M\",\"name\":\"process_labels\",\"pid\":{pid},\"tid\":0,\"args\":{{\"labels\":")?;
                write_str(self.out, trace.str(labels))?;
                self.out.write_all(b"}}")?;
            }
            if let Some(index) = p.sort_index {
                self.start_event()?;
                write!(self.out, "{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{pid},\"tid\":0,\"args\":{{\"sort_index\":{index}}}}}")?;
            }
        }
        self.pids = pids;
        for t in &trace.threads {
            let pid = self.pids[t.process.index()];
            if let Some(name) = t.name {
                self.start_event()?;
                write!(self.out, "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":{},\"args\":{{\"name\":", t.tid)?;
                write_str(self.out, trace.str(name))?;
                self.out.write_all(b"}}")?;
            }
            if let Some(index) = t.sort_index {
                self.start_event()?;
                write!(self.out, "{{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":{pid},\"tid\":{},\"args\":{{\"sort_index\":{index}}}}}", t.tid)?;
            }
        }
        Ok(())
    }

    fn slices(&mut self) -> io::Result<()> {
        let trace = self.trace;
        let s = &trace.slices;
        let keep = self.keep;
        for i in (0..s.len()).filter(|&i| kept(keep, i)) {
            let track = TrackId(s.track[i]);
            let name = trace.str(s.name[i]);
            let original = trace.str(s.category[i]);
            let kind = s.kind(i);
            // On import the kind came from the category and the name together, so one
            // name answers for every slice of the same category and kind.
            let keeps = *self
                .keeps_category
                .entry((s.category[i], kind.code()))
                .or_insert_with(|| kineto_category(kind, original, name) == original);
            let category = if keeps {
                original
            } else {
                kineto_name(kind, original, name)
            };
            // The category Kineto's readers need replaced the model's: keep that one
            // among the args.
            let kept = (category != original).then_some(original);
            if trace.tracks[track.index()].kind == TrackKind::Async {
                self.head("b", name, category, track, s.ts[i])?;
                write!(self.out, ",\"id\":{}", track.0)?;
                self.args_with(s.args[i], kept)?;
                self.out.write_all(b"}")?;
                self.head("e", name, category, track, s.end(i))?;
                write!(self.out, ",\"id\":{}}}", track.0)?;
            } else {
                self.head("X", name, category, track, s.ts[i])?;
                self.out.write_all(b",\"dur\":")?;
                write_micros(self.out, s.dur[i])?;
                self.args_with(s.args[i], kept)?;
                self.out.write_all(b"}")?;
            }
        }
        Ok(())
    }

    fn instants(&mut self) -> io::Result<()> {
        let trace = self.trace;
        let inst = &trace.instants;
        let span = self.span;
        for i in (0..inst.len()).filter(|&i| in_span(span, inst.ts[i])) {
            let track = TrackId(inst.track[i]);
            let name = trace.str(inst.name[i]);
            let category = trace.str(inst.category[i]);
            if trace.tracks[track.index()].kind == TrackKind::Async {
                self.head("n", name, category, track, inst.ts[i])?;
                write!(self.out, ",\"id\":{}", track.0)?;
            } else {
                self.head("i", name, category, track, inst.ts[i])?;
                let scope = match inst.scope[i] {
                    InstantScope::Thread => "t",
                    InstantScope::Process => "p",
                    InstantScope::Global => "g",
                };
                write!(self.out, ",\"s\":\"{scope}\"")?;
            }
            self.args(inst.args[i])?;
            self.out.write_all(b"}")?;
        }
        Ok(())
    }

    fn counters(&mut self) -> io::Result<()> {
        let trace = self.trace;
        let c = &trace.counters;
        let span = self.span;
        for i in (0..c.len()).filter(|&i| in_span(span, c.ts[i])) {
            let track = &trace.tracks[c.track[i] as usize];
            let pid = track.process.map_or(0, |p| self.pids[p.index()]);
            let name = trace.str(track.name);
            self.start_event()?;
            self.out.write_all(b"{\"ph\":\"C\",\"name\":")?;
            write_str(self.out, name)?;
            write!(self.out, ",\"pid\":{pid},\"ts\":")?;
            write_micros(self.out, c.ts[i])?;
            // The series is named like the track, so the track name survives a re-import.
            self.out.write_all(b",\"args\":{")?;
            write_str(self.out, name)?;
            self.out.write_all(b":")?;
            write_f64(self.out, c.value[i])?;
            self.out.write_all(b"}}")?;
        }
        Ok(())
    }

    fn flows(&mut self) -> io::Result<()> {
        let trace = self.trace;
        let f = &trace.flows;
        for i in 0..f.len() {
            let (from, to) = (f.from[i] as usize, f.to[i] as usize);
            if !kept(self.keep, from) || !kept(self.keep, to) {
                continue;
            }
            let name = trace.str(f.name[i]);
            let category = trace.str(f.category[i]);
            let id = i + 1;
            let (start, end) = flow_points(trace, from, to);
            self.head(
                "s",
                name,
                category,
                TrackId(trace.slices.track[from]),
                start,
            )?;
            write!(self.out, ",\"id\":{id}}}")?;
            self.head("f", name, category, TrackId(trace.slices.track[to]), end)?;
            write!(self.out, ",\"id\":{id},\"bp\":\"e\"}}")?;
        }
        Ok(())
    }
}

/// Where to put the `s` and `f` events of a flow from slice `from` to slice `to`, so
/// that an importer binding each to its enclosing slice finds exactly these two, and
/// the `f` does not come before the `s` (flow steps are ordered by time).
fn flow_points(trace: &Trace, from: usize, to: usize) -> (i64, i64) {
    let binds = |i: usize, t: i64| {
        trace.enclosing_slice(TrackId(trace.slices.track[i]), t) == Some(i as u32)
    };
    let start = [anchor(trace, from, false), anchor(trace, from, true)]
        .into_iter()
        .find(|&t| binds(from, t))
        .unwrap_or(trace.slices.ts[from]);
    let end = [anchor(trace, to, false), anchor(trace, to, true)]
        .into_iter()
        .find(|&t| t >= start && binds(to, t))
        .unwrap_or(trace.slices.ts[to]);
    (start, end)
}

/// A time inside slice `i` that no child of it covers, so that a flow event placed
/// there binds to `i` itself and not to a child starting at the same time: the earliest
/// such time, or with `late` the latest one (a flow's end is placed late and its start
/// early, so the two stay in time order even when the arrow points back to a slice that
/// started earlier, as critical-path flows do). Falls back to the slice's start when
/// its children cover all of it.
pub(crate) fn anchor(trace: &Trace, i: usize, late: bool) -> i64 {
    let s = &trace.slices;
    let (start, end) = (s.ts[i], s.end(i));
    let range = trace.track_slices(TrackId(s.track[i]));
    let mut children = (i + 1..range.end)
        .take_while(|&j| s.ts[j] <= end)
        .filter(|&j| s.parent[j] == i as u32);
    if late {
        // A slice that starts where `i` ends would take the end point itself.
        let mut t = if end > start { end - 1 } else { start };
        let kids: Vec<usize> = children.collect();
        for &j in kids.iter().rev() {
            if s.end(j) < t {
                break;
            }
            // A child starting at the first nanosecond of the range covers `i`'s start.
            let Some(before) = s.ts[j].checked_sub(1) else {
                return start;
            };
            t = t.min(before);
        }
        if t >= start {
            t
        } else {
            start
        }
    } else {
        let mut t = start;
        for j in children.by_ref() {
            if s.ts[j] > t {
                break;
            }
            // A child ending at the last nanosecond of the range covers `i`'s end.
            let Some(after) = s.end(j).checked_add(1) else {
                return start;
            };
            t = t.max(after);
        }
        if t <= end {
            t
        } else {
            start
        }
    }
}

#[cfg(test)]
mod tests {
    use opscope_model::Trace;

    /// Found by fuzzing: placing a flow's end on a slice whose children run to the last
    /// nanosecond of the range overflowed `end + 1`.
    #[test]
    fn flow_anchors_at_the_end_of_the_nanosecond_range() {
        let input = br#"[
            {"ph":"X","ts":0,"dur":9223372036854775.807,"pid":1,"tid":1,"name":"a"},
            {"ph":"X","ts":0,"dur":0.005,"pid":1,"tid":1,"name":"b"},
            {"ph":"X","ts":0.006,"dur":9223372036854775.801,"pid":1,"tid":1,"name":"c"},
            {"ph":"s","ts":0,"id":1,"pid":1,"tid":1,"cat":"c"},
            {"ph":"f","ts":0,"id":1,"pid":1,"tid":1,"cat":"c"}
        ]"#;
        let mut trace = Trace::new();
        crate::chrome::import(input, "t.json", &mut trace).unwrap();
        assert_eq!(trace.flows.len(), 1);
        let mut out = Vec::new();
        super::export(&trace, &mut out).unwrap();
        let mut again = Trace::new();
        crate::chrome::import(&out, "t2.json", &mut again).unwrap();
        assert_eq!(again.slices.len(), 3);
        assert_eq!(again.flows.len(), 1);
    }

    /// Found by fuzzing: NaN from a Perfetto trace was written as `NaN`, which is not
    /// JSON; non-finite floats are written as `null`.
    #[test]
    fn non_finite_floats_are_written_as_null() {
        // Perfetto packets at ts 1: an instant with the double annotation `a` = NaN,
        // and a counter event of value NaN.
        let inputs: [&[u8]; 2] = [
            b"\x0a\x14\x40\x01\x5a\x10\x48\x03\x22\x0c\x52\x01a\x29\0\0\0\0\0\0\xf8\x7f",
            b"\x0a\x10\x40\x01\x5a\x0c\x48\x04\xe1\x02\0\0\0\0\0\0\xf8\x7f",
        ];
        for input in inputs {
            let mut trace = Trace::new();
            crate::perfetto::import(input, "t.pftrace", &mut trace).unwrap();
            let mut out = Vec::new();
            super::export(&trace, &mut out).unwrap();
            let text = String::from_utf8(out).unwrap();
            assert!(text.contains(":null}"), "{text}");
            let mut again = Trace::new();
            crate::chrome::import(text.as_bytes(), "t.json", &mut again).unwrap();
        }
    }
}
