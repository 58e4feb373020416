//! What the viewer serves, for one loaded trace: the tracks in the order they are
//! drawn, their level-of-detail summaries, and the answers to the page's questions
//! (a view of a span, a slice's details, a search, the reports of a span) as JSON or
//! HTML. Built once per load; a live view builds a new one per reload.

use std::fmt::Write as _;
use std::sync::OnceLock;

use opscope_analysis::correlate::{self, Correlation};
use opscope_analysis::markers::{self, Bounds};
use opscope_analysis::memory::in_use_curves;
use opscope_analysis::timeline::{Item, Sample, Series, Timeline, TrackLod};
use opscope_analysis::Context;
use opscope_model::{ArgValue, SliceKind, Trace, TrackKind};

/// A track as the page lists it.
pub struct TrackInfo {
    /// The group it is drawn under: a rank or file, and its process.
    pub group: String,
    pub name: String,
    pub kind: &'static str,
    pub what: What,
}

/// Where a track's items come from.
pub enum What {
    /// A track of the model (its index), slices or counter.
    Model(usize),
    /// A counter derived from the trace (bytes in use of an allocator).
    Derived(Series),
}

/// Launch links, computed after the first picture (they take a pass over every slice).
pub struct Links {
    pub correlation: Correlation,
    /// Per launching call, the device work it launched (only calls that launched any).
    pub launched: hashbrown::HashMap<u32, Vec<u32>>,
    pub markers: Vec<Vec<Bounds>>,
}

/// Where a model's tracks, slices and names start among the page's, when the page shows
/// two traces (`view --against`): the second's are numbered after the first's.
#[derive(Clone, Copy, Debug, Default)]
pub struct Base {
    pub track: usize,
    pub slice: usize,
    pub name: u32,
}

pub struct ViewModel {
    pub trace: Trace,
    pub title: String,
    /// The page's numbers of this model's first track, slice and name.
    pub base: Base,
    /// All times the page sees are ns after this.
    pub origin: i64,
    pub span_ns: i64,
    pub timeline: Timeline,
    pub tracks: Vec<TrackInfo>,
    /// Per slice, its row on its track.
    pub row_of: Vec<u8>,
    pub links: OnceLock<Links>,
    /// The report panels' HTML, made when first asked.
    pub panels: OnceLock<String>,
    /// The steps as `/api/steps` gives them, made when first asked.
    pub steps: OnceLock<String>,
}

impl ViewModel {
    pub fn build(mut trace: Trace, title: String) -> ViewModel {
        super::stacks::draw(&mut trace);
        let timeline = Timeline::build(&trace);
        let (origin, end) = trace.time_span().unwrap_or((0, 0));
        let mut row_of = vec![0u8; trace.slices.len()];
        for lod in &timeline.tracks {
            if let TrackLod::Slices(rows) = lod {
                for r in 0..rows.rows() {
                    for &i in rows.slices_of(r) {
                        row_of[i as usize] = r as u8;
                    }
                }
            }
        }
        let tracks = order_tracks(&trace, &timeline);
        ViewModel {
            trace,
            title,
            base: Base::default(),
            origin,
            span_ns: (end - origin).max(1),
            timeline,
            tracks,
            row_of,
            links: OnceLock::new(),
            panels: OnceLock::new(),
            steps: OnceLock::new(),
        }
    }

    /// The launch links, computing them now if no one has.
    pub fn links(&self) -> &Links {
        self.links.get_or_init(|| {
            let correlation = correlate::correlate(&self.trace);
            let mut launched: hashbrown::HashMap<u32, Vec<u32>> = hashbrown::HashMap::new();
            for (work, call) in correlation.launch.iter() {
                launched.entry(call as u32).or_default().push(work as u32);
            }
            Links {
                correlation,
                launched,
                markers: markers::step_markers(&self.trace),
            }
        })
    }

    pub fn context(&self) -> Context<'_> {
        let links = self.links();
        Context::sharing(&self.trace, &links.correlation, &links.markers)
    }

    /// `{title, span, tracks: [...]}`: what the page needs before its first view.
    /// `loading`: bytes read and in all, while the model is a draft of a load.
    pub fn meta_json(
        &self,
        live: bool,
        generation: u64,
        note: &str,
        loading: Option<(u64, u64)>,
    ) -> String {
        let tracks: Vec<serde_json::Value> = self
            .tracks
            .iter()
            .enumerate()
            .map(|(id, t)| {
                let mut v = serde_json::json!({
                    "id": id, "group": t.group, "name": t.name, "kind": t.kind,
                });
                match self.lod(id) {
                    Some(Lod::Rows(rows)) => v["rows"] = rows.rows().into(),
                    Some(Lod::Series(series)) => {
                        v["min"] = finite(series.min()).into();
                        v["max"] = finite(series.max()).into();
                    }
                    None => {}
                }
                v
            })
            .collect();
        serde_json::json!({
            "title": self.title,
            "span": self.span_ns,
            "origin": self.origin,
            "events": self.trace.slices.len() + self.trace.instants.len() + self.trace.counters.len(),
            "tracks": tracks,
            "live": live,
            "generation": generation,
            "note": note,
            "loading": loading.map(|(done, total)| serde_json::json!({"done": done, "total": total})),
        })
        .to_string()
    }

    fn lod(&self, id: usize) -> Option<Lod<'_>> {
        match &self.tracks.get(id)?.what {
            What::Model(t) => match &self.timeline.tracks[*t] {
                TrackLod::Slices(rows) => Some(Lod::Rows(rows)),
                TrackLod::Counter(series) => Some(Lod::Series(series)),
            },
            What::Derived(series) => Some(Lod::Series(series)),
        }
    }

    /// What `tracks` show of `[start, end]` (ns after the origin) across `px` pixels:
    /// per track its rows' items `[start, end, slice, count, kind, name]` (blocks are
    /// `count > 1`) or its counter's `[start, end, min, max, last]`, the names used,
    /// and the launch arrows between slices drawn alone. Each track comes with the rows
    /// the page shows of it (a folded track shows its first few).
    pub fn view_json(&self, start: i64, end: i64, px: f64, tracks: &[(usize, usize)]) -> String {
        self.view_parts(start, end, px, tracks).json()
    }

    /// [`Self::view_json`]'s three parts.
    pub fn view_parts(
        &self,
        start: i64,
        end: i64,
        px: f64,
        tracks: &[(usize, usize)],
    ) -> ViewParts {
        let ns_per_px = ((end - start) as f64 / px.max(1.0)).max(1e-3);
        let (a, b) = (self.origin + start, self.origin + end);
        let s = &self.trace.slices;
        let mut out = String::with_capacity(1 << 16);
        let mut names: hashbrown::HashSet<u32> = hashbrown::HashSet::new();
        let mut alone: Vec<u32> = Vec::new();
        let mut items: Vec<Item> = Vec::new();
        let mut samples: Vec<Sample> = Vec::new();
        // The three parts, each without its brackets, so that two models' views join.
        for (k, &(id, shown_rows)) in tracks.iter().enumerate() {
            if k > 0 {
                out.push(',');
            }
            let _ = write!(out, "{{\"id\":{}", id + self.base.track);
            match self.lod(id) {
                Some(Lod::Rows(rows)) => {
                    out.push_str(",\"rows\":[");
                    for r in 0..rows.rows().min(shown_rows) {
                        items.clear();
                        rows.query(&self.trace, r, a, b, ns_per_px, &mut items);
                        out.push_str(if r > 0 { ",[" } else { "[" });
                        for (j, it) in items.iter().enumerate() {
                            let name = s.name[it.slice as usize];
                            names.insert(name.0);
                            // A block's arrow is its longest slice's: arrows show at
                            // every zoom, not only once slices stand alone.
                            alone.push(it.slice);
                            let _ = write!(
                                out,
                                "{}[{},{},{},{},{},{}]",
                                if j > 0 { "," } else { "" },
                                it.start - self.origin,
                                it.end - self.origin,
                                it.slice as usize + self.base.slice,
                                it.count,
                                s.kind(it.slice as usize).code(),
                                name.0 + self.base.name
                            );
                        }
                        out.push(']');
                    }
                    out.push(']');
                }
                Some(Lod::Series(series)) => {
                    samples.clear();
                    series.query(a, b, ns_per_px, &mut samples);
                    out.push_str(",\"samples\":[");
                    for (j, x) in samples.iter().enumerate() {
                        let _ = write!(
                            out,
                            "{}[{},{},{},{},{}]",
                            if j > 0 { "," } else { "" },
                            x.start - self.origin,
                            x.end - self.origin,
                            finite(x.min),
                            finite(x.max),
                            finite(x.last)
                        );
                    }
                    out.push(']');
                }
                None => {}
            }
            out.push('}');
        }
        let tracks_part = std::mem::take(&mut out);
        for (j, n) in names.iter().enumerate() {
            let text = self.trace.str(opscope_model::StrId(*n));
            let _ = write!(
                out,
                "{}\"{}\":{}",
                if j > 0 { "," } else { "" },
                n + self.base.name,
                serde_json::to_string(text).unwrap_or_default()
            );
        }
        let names_part = std::mem::take(&mut out);
        // Arrows only once the links are known: the first picture does not wait.
        if let Some(links) = self.links.get() {
            let shown: hashbrown::HashMap<usize, usize> = tracks
                .iter()
                .filter_map(|&(id, _)| match self.tracks[id].what {
                    What::Model(t) => Some((t, id)),
                    What::Derived(_) => None,
                })
                .collect();
            let mut written = 0;
            for &work in &alone {
                if written >= MAX_FLOWS {
                    break;
                }
                let Some(call) = links.correlation.launch_of(work as usize) else {
                    continue;
                };
                let Some(&from) = shown.get(&(s.track[call] as usize)) else {
                    continue;
                };
                let Some(&to) = shown.get(&(s.track[work as usize] as usize)) else {
                    continue;
                };
                let _ = write!(
                    out,
                    "{}[{},{},{},{},{},{},{},{}]",
                    if written > 0 { "," } else { "" },
                    call + self.base.slice,
                    from + self.base.track,
                    self.row_of[call],
                    s.ts[call] - self.origin,
                    work as usize + self.base.slice,
                    to + self.base.track,
                    self.row_of[work as usize],
                    s.ts[work as usize] - self.origin
                );
                written += 1;
            }
        }
        ViewParts {
            tracks: tracks_part,
            names: names_part,
            flows: out,
        }
    }

    /// The steps of each process that has any (`opscope steps`), ns after the origin:
    /// `{"spans": [[start, end]], "steps": [{process, name, start, end}]}`, the first
    /// span the whole run of steps. Made after the first picture, when first asked.
    pub fn steps_json(&self) -> &str {
        self.steps.get_or_init(|| {
            let found = opscope_analysis::steps::steps(
                &self.context(),
                &opscope_analysis::steps::StepOptions::default(),
            );
            let mut steps = Vec::new();
            let (mut first, mut last) = (i64::MAX, i64::MIN);
            for source in found.iter().filter(|s| !s.steps.is_empty()) {
                for step in &source.steps {
                    let (a, b) = (
                        step.start_ns - self.origin,
                        step.start_ns + step.dur_ns - self.origin,
                    );
                    first = first.min(a);
                    last = last.max(b);
                    steps.push(serde_json::json!({
                        "process": source.role, "name": step.name, "start": a, "end": b,
                    }));
                }
            }
            let spans: Vec<[i64; 2]> = (first <= last)
                .then_some([first, last])
                .into_iter()
                .collect();
            serde_json::json!({ "spans": spans, "steps": steps }).to_string()
        })
    }

    /// One slice: what it is, its args, its launch or the work it launched, the op it
    /// belongs to, and the totals of every slice of its name and kind.
    pub fn slice_json(&self, i: usize) -> Option<String> {
        let s = &self.trace.slices;
        if i >= s.len() {
            return None;
        }
        let t = &self.trace;
        let brief = |j: usize| {
            serde_json::json!({
                "id": j + self.base.slice, "name": t.str(s.name[j]), "kind": s.kind(j).name(),
                "start": s.ts[j] - self.origin, "dur": s.dur[j],
                "track": self.page_track(s.track[j] as usize), "row": self.row_of[j],
            })
        };
        let args: Vec<(String, String)> = t
            .args
            .get(s.args[i])
            .map(|(k, v)| (t.str(k).to_string(), arg_text(t, v)))
            .collect();
        let links = self.links();
        let launch = links.correlation.launch_of(i).map(brief);
        let op = if s.kind(i).is_device_activity() {
            links.correlation.op_of(t, i).map(brief)
        } else {
            None
        };
        let launched = links.launched.get(&(i as u32));
        let kernels: Vec<serde_json::Value> = launched
            .into_iter()
            .flatten()
            .take(50)
            .map(|&k| brief(k as usize))
            .collect();
        let (name, kind) = (s.name[i], s.kind(i));
        let (mut count, mut total, mut min, mut max) = (0u64, 0i64, i64::MAX, i64::MIN);
        for j in 0..s.len() {
            if s.name[j] == name && s.kind(j) == kind {
                count += 1;
                total += s.dur[j];
                min = min.min(s.dur[j]);
                max = max.max(s.dur[j]);
            }
        }
        let mut v = brief(i);
        v["category"] = t.str(s.category[i]).into();
        v["args"] = serde_json::json!(args);
        v["launch"] = launch.into();
        v["op"] = op.into();
        v["launched"] = launched.map_or(0, Vec::len).into();
        v["kernels"] = kernels.into();
        v["totals"] = serde_json::json!({
            "count": count, "total": total, "min": min, "max": max,
            "mean": total as f64 / count.max(1) as f64,
        });
        Some(v.to_string())
    }

    /// The page's track showing model track `t`.
    fn page_track(&self, t: usize) -> Option<usize> {
        self.tracks
            .iter()
            .position(|info| matches!(info.what, What::Model(m) if m == t))
            .map(|id| id + self.base.track)
    }

    /// The first slice after `after` (ns after the origin) whose name holds `query`
    /// (any case), and how many slices match in all.
    /// `{slices, edges, length_ns, summary}` of the critical path of an annotation's
    /// instance (see `opscope critical-path`), or `{error}`: the slices its edges join,
    /// and each edge that crosses from one slice to another as `[from track, row, ns,
    /// to track, row, ns]` (viewer tracks, ns after the origin), for the path's lines.
    pub fn critical_path_json(&self, annotation: &str, instance: usize) -> String {
        let options = opscope_analysis::critical_path::CriticalPathOptions {
            rank: None,
            annotation: annotation.to_string(),
            instance,
        };
        match opscope_analysis::critical_path::critical_path(&self.context(), &options) {
            Ok(path) => {
                let mut slices: Vec<usize> = path
                    .edges
                    .iter()
                    .flat_map(|e| [e.from.slice, e.to.slice])
                    .collect();
                slices.sort_unstable();
                slices.dedup();
                for slice in &mut slices {
                    *slice += self.base.slice;
                }
                let s = &self.trace.slices;
                let viewer_track: hashbrown::HashMap<usize, usize> = self
                    .tracks
                    .iter()
                    .enumerate()
                    .filter_map(|(id, t)| match t.what {
                        What::Model(m) => Some((m, id + self.base.track)),
                        What::Derived(_) => None,
                    })
                    .collect();
                let end = |slice: usize, start: bool| {
                    let ts = if start { s.ts[slice] } else { s.end(slice) };
                    let track = *viewer_track.get(&(s.track[slice] as usize))?;
                    Some((track, self.row_of[slice], ts - self.origin))
                };
                let edges: Vec<[i64; 6]> = path
                    .edges
                    .iter()
                    .filter(|e| e.from.slice != e.to.slice)
                    .filter_map(|e| {
                        let a = end(e.from.slice, e.from_start)?;
                        let b = end(e.to.slice, e.to_start)?;
                        Some([a.0 as i64, a.1 as i64, a.2, b.0 as i64, b.1 as i64, b.2])
                    })
                    .collect();
                serde_json::json!({
                    "slices": slices,
                    "edges": edges,
                    "length_ns": path.length_ns,
                    "summary": path.summary,
                })
                .to_string()
            }
            Err(e) => serde_json::json!({ "error": e.to_string() }).to_string(),
        }
    }

    pub fn search_json(&self, query: &str, after: i64) -> String {
        let query = query.to_lowercase();
        let t = &self.trace;
        let wanted: Vec<bool> = (0..t.strings.len())
            .map(|k| {
                !query.is_empty()
                    && t.str(opscope_model::StrId(k as u32))
                        .to_lowercase()
                        .contains(&query)
            })
            .collect();
        let s = &t.slices;
        let at = self.origin + after;
        let (mut matches, mut best, mut first) = (0u64, None::<usize>, None::<usize>);
        for i in 0..s.len() {
            if !wanted.get(s.name[i].0 as usize).copied().unwrap_or(false) {
                continue;
            }
            matches += 1;
            if s.ts[i] > at && best.is_none_or(|b| s.ts[i] < s.ts[b]) {
                best = Some(i);
            }
            if first.is_none_or(|f| s.ts[i] < s.ts[f]) {
                first = Some(i);
            }
        }
        // Past the last match, the search wraps to the first.
        let found = best.or(first);
        serde_json::json!({
            "matches": matches,
            "slice": found.map(|i| serde_json::json!({
                "id": i + self.base.slice, "name": t.str(s.name[i]), "start": s.ts[i] - self.origin,
                "dur": s.dur[i], "track": self.page_track(s.track[i] as usize),
                "row": self.row_of[i],
            })),
        })
        .to_string()
    }
}

/// A view's tracks, names and arrows, as JSON lists without their brackets.
#[derive(Default)]
pub struct ViewParts {
    pub tracks: String,
    pub names: String,
    pub flows: String,
}

impl ViewParts {
    /// Another model's view after this one's.
    pub fn join(mut self, other: ViewParts) -> ViewParts {
        for (mine, theirs) in [
            (&mut self.tracks, other.tracks),
            (&mut self.names, other.names),
            (&mut self.flows, other.flows),
        ] {
            if !mine.is_empty() && !theirs.is_empty() {
                mine.push(',');
            }
            mine.push_str(&theirs);
        }
        self
    }

    pub fn json(&self) -> String {
        format!(
            "{{\"tracks\":[{}],\"names\":{{{}}},\"flows\":[{}]}}",
            self.tracks, self.names, self.flows
        )
    }
}

/// Arrows per view at most.
const MAX_FLOWS: usize = 2000;

enum Lod<'a> {
    Rows(&'a opscope_analysis::timeline::SliceRows),
    Series(&'a Series),
}

/// JSON has no NaN or infinity.
fn finite(v: f64) -> f64 {
    if v.is_finite() {
        v
    } else {
        0.0
    }
}

fn arg_text(t: &Trace, v: ArgValue) -> String {
    match v {
        ArgValue::Null => "null".to_string(),
        ArgValue::Bool(b) => b.to_string(),
        ArgValue::Int(n) => n.to_string(),
        ArgValue::UInt(n) => n.to_string(),
        ArgValue::Float(x) => x.to_string(),
        ArgValue::Str(id) | ArgValue::Json(id) => t.str(id).to_string(),
    }
}

/// Where a track goes: its (source, rank, process order), its class (threads, async
/// lanes, streams, counters) and its order within the class.
type TrackOrder = ((usize, i64, i64), u8, i64);

/// The page's tracks: per source (a rank or file) and process, its threads, async
/// lanes, GPU streams and counters, in the trace's own order where it gives one; then
/// the derived memory curves of each source. Empty tracks are left out.
fn order_tracks(trace: &Trace, timeline: &Timeline) -> Vec<TrackInfo> {
    let source_label = |src: usize| {
        let source = &trace.sources[src];
        match source.rank {
            Some(rank) => format!("rank {rank}"),
            None => std::path::Path::new(&source.path)
                .file_name()
                .map_or(source.path.clone(), |n| n.to_string_lossy().into_owned()),
        }
    };
    let several_sources = trace.sources.len() > 1;
    let mut names: std::collections::HashMap<opscope_model::ProcessId, String> = Default::default();
    let mut group_of = |track: &opscope_model::Track| -> (String, (usize, i64, i64)) {
        let Some(p) = track.process else {
            return ("trace".to_string(), (usize::MAX, 0, 0));
        };
        let process = &trace.processes[p.index()];
        // The process's one name, as every command gives it (`rank 0 (pid 41)`).
        let label = names
            .entry(p)
            .or_insert_with(|| opscope_analysis::roles::process_name(trace, p))
            .clone();
        let src = process.source.index();
        let rank = trace.sources[src].rank.map_or(src as i64, i64::from);
        (
            label,
            (src, rank, process.sort_index.unwrap_or(process.pid)),
        )
    };
    let mut order: Vec<(TrackOrder, TrackInfo)> = Vec::new();
    for (t, track) in trace.tracks.iter().enumerate() {
        let empty = match &timeline.tracks[t] {
            TrackLod::Slices(rows) => rows.rows() == 0,
            TrackLod::Counter(series) => series.is_empty(),
        };
        if empty {
            continue;
        }
        let (group, key) = group_of(track);
        let thread = track.thread.map(|th| &trace.threads[th.index()]);
        let tid = thread.map_or(0, |th| th.tid);
        // A profile's line ids (XPlane's 64-bit ones, often negative) are no thread ids
        // a person knows: they are not shown, nor kept at the end of a line's name.
        let real_tid = (0..=i64::from(i32::MAX)).contains(&tid);
        let bare = |name: &str| -> String {
            let cut = name
                .rsplit_once('/')
                .filter(|(_, id)| {
                    id.parse::<i64>()
                        .is_ok_and(|n| !(0..=i64::from(i32::MAX)).contains(&n))
                })
                .map_or(name, |(head, _)| head);
            cut.to_string()
        };
        // The track's own name, else its thread's, else what it is and its number.
        let name = match (trace.str(track.name), thread.and_then(|th| th.name)) {
            (own, _) if !own.is_empty() => own.to_string(),
            (_, Some(n)) if !real_tid => bare(trace.str(n)),
            (_, Some(n)) if trace.str(n).contains(&tid.to_string()) => bare(trace.str(n)),
            (_, Some(n)) => format!("{} {tid}", trace.str(n)),
            (_, None) if track.kind == TrackKind::GpuStream => format!("stream {tid}"),
            (_, None) if !real_tid => "line".to_string(),
            (_, None) => format!("thread {tid}"),
        };
        let (class, within) = match track.kind {
            TrackKind::Thread => (0, thread.and_then(|th| th.sort_index).unwrap_or(tid)),
            TrackKind::Async => (1, t as i64),
            TrackKind::GpuStream => (2, thread.and_then(|th| th.sort_index).unwrap_or(tid)),
            TrackKind::Counter => (3, t as i64),
        };
        let info = TrackInfo {
            group,
            name: name.trim().to_string(),
            kind: track.kind.name(),
            what: What::Model(t),
        };
        order.push(((key, class, within), info));
    }
    order.sort_by_key(|(key, _)| *key);
    let mut tracks: Vec<TrackInfo> = order.into_iter().map(|(_, info)| info).collect();
    for curve in in_use_curves(trace) {
        if curve.points.len() < 2 {
            continue;
        }
        let group = match curve.source {
            Some(s) if several_sources => format!("{} · memory", source_label(s.index())),
            _ => "memory".to_string(),
        };
        tracks.push(TrackInfo {
            group,
            name: format!("memory in use: {}", curve.allocator),
            kind: "counter",
            what: What::Derived(Series::new(
                curve
                    .points
                    .into_iter()
                    .map(|(ts, v)| (ts, v as f64))
                    .collect(),
            )),
        });
    }
    tracks
}

/// The kinds as the page colours them, by code.
pub fn kinds_json() -> String {
    let names: Vec<&str> = SliceKind::ALL.iter().map(|k| k.name()).collect();
    serde_json::to_string(&names).unwrap_or_default()
}
