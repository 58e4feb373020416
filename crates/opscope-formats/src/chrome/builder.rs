//! Turns Chrome trace events, one at a time, into the model: B/E and async b/e
//! matching, object lifetimes, counters, metadata, and flow binding once all slices are
//! known.

use hashbrown::HashMap;

use opscope_model::args::ArgValue;
use opscope_model::events::{InstantRow, SliceRow};
use opscope_model::trace::Finger;
use opscope_model::{
    ArgsId, InstantScope, ProcessId, SliceKind, SourceId, StrId, StringTable, ThreadId, Trace,
    TrackId, TrackKind,
};

use super::chunk::{ArgEntries, ArgKind, Complete};
use super::flows::{FlowGroups, FlowPlace};
use super::kinds::{self, TfLane};
use super::parse::{Id, Micros, RawEvent};
use crate::common::{FlowEnd, FlowRole, SliceStack};
use crate::error::ImportError;

/// Numbers given to string pids and tids that are not numbers ("Traces", "stream 7"):
/// high enough not to clash with real ones, low enough for Perfetto's int32 pids.
const SYNTHETIC_ID_BASE: i64 = opscope_model::SYNTHETIC_PID_BASE;

/// The name a string pid or tid gives its process or thread. Kineto puts its
/// trace-wide instants (`Record Window End`, `"s": "g"`) on `"pid": "", "tid": ""`,
/// which would be a nameless process in every PyTorch trace; Perfetto shows such
/// instants on one global track.
fn named(label: &str) -> &str {
    if label.is_empty() {
        "global"
    } else {
        label
    }
}

struct OpenSlice {
    ts: i64,
    name: StrId,
    category: StrId,
    args: ArgsId,
}

pub(crate) struct Builder<'t> {
    pub trace: &'t mut Trace,
    pub source: SourceId,
    pub path: String,
    /// Index of the event being handled, for error messages.
    pub index: u64,
    open: SliceStack<TrackId, OpenSlice>,
    /// Async lanes: a track and category.
    open_async: SliceStack<(TrackId, StrId), OpenSlice>,
    open_objects: HashMap<(ProcessId, StrId, IdKey), (TrackId, OpenSlice)>,
    string_ids: HashMap<String, u32>,
    flows: FlowGroups,
    synthetic_pids: HashMap<String, i64>,
    last_thread: Option<((i64, i64), (ProcessId, TrackId))>,
    /// Where the event being handled starts in the input, when known.
    pub event_offset: Option<u64>,
    first_malformed: Option<String>,
    malformed_here: u64,
    /// Reused between events so that reading args allocates nothing.
    arg_entries: Vec<(StrId, ArgValue)>,
    synthetic_tids: HashMap<(ProcessId, String), i64>,
    max_ts: i64,
    /// The kinds of (category, name) pairs met lately, by a hash of their ids:
    /// [`kinds::kind_of`] lower-cases the category and matches the name, per slice.
    recent_kinds: Vec<Option<(StrId, StrId, Option<SliceKind>)>>,
    /// Whether an args object opened with opscope's own-category entry
    /// ([`super::export::CATEGORY_ARG`]); until one does, no slice needs the look.
    saw_category_arg: bool,
}

/// Slots of [`Builder::recent_kinds`].
const RECENT_KINDS: usize = 1 << 10;

impl<'t> Builder<'t> {
    pub fn new(trace: &'t mut Trace, source: SourceId, path: &str) -> Self {
        Builder {
            trace,
            source,
            path: path.to_string(),
            index: 0,
            open: SliceStack::new(),
            open_async: SliceStack::new(),
            open_objects: HashMap::new(),
            string_ids: HashMap::new(),
            flows: FlowGroups::default(),
            synthetic_pids: HashMap::new(),
            arg_entries: Vec::new(),
            last_thread: None,
            event_offset: None,
            first_malformed: None,
            malformed_here: 0,
            synthetic_tids: HashMap::new(),
            max_ts: i64::MIN,
            recent_kinds: vec![None; RECENT_KINDS],
            saw_category_arg: false,
        }
    }

    /// Counts an event that cannot be imported; the first of each file is described in
    /// a warning with its index and byte offset.
    pub fn malformed(&mut self, reason: &str) {
        self.trace.repairs.malformed_events += 1;
        self.malformed_here += 1;
        if self.first_malformed.is_none() {
            let at = self
                .event_offset
                .map(|o| format!(" (byte {o})"))
                .unwrap_or_default();
            self.first_malformed = Some(format!("event {}{at}: {reason}", self.index));
        }
    }

    fn string(&mut self, s: &str) -> Result<StrId, ImportError> {
        if s.len() > StringTable::MAX_STRING || !self.trace.strings.has_room_for(s.len()) {
            return Err(ImportError::Event {
                path: self.path.clone(),
                index: self.index,
                message: format!(
                    "a string of {} bytes{} is over the limit of {} bytes per string",
                    s.len(),
                    self.event_offset
                        .map(|o| format!(" in the event at byte {o}"))
                        .unwrap_or_default(),
                    StringTable::MAX_STRING
                ),
            });
        }
        Ok(self.trace.intern(s))
    }

    fn process(&mut self, pid: Option<&Id>) -> Result<ProcessId, ImportError> {
        let (number, label) = match pid {
            None => (0, None),
            Some(id) => match id.as_int() {
                Some(n) => (n, None),
                None => {
                    let Id::Str(s) = id else { unreachable!() };
                    let next = SYNTHETIC_ID_BASE + self.synthetic_pids.len() as i64;
                    let n = *self.synthetic_pids.entry(s.to_string()).or_insert(next);
                    (n, Some(s.clone()))
                }
            },
        };
        let process = self.trace.process(self.source, number);
        if let Some(label) = label {
            if self.trace.processes[process.index()].name.is_none() {
                let label = self.string(named(&label))?;
                self.trace.processes[process.index()].name = Some(label);
            }
        }
        Ok(process)
    }

    fn thread(&mut self, process: ProcessId, tid: Option<&Id>) -> Result<ThreadId, ImportError> {
        let (number, label) = match tid {
            None => (0, None),
            Some(id) => match id.as_int() {
                Some(n) => (n, None),
                None => {
                    let Id::Str(s) = id else { unreachable!() };
                    let next = SYNTHETIC_ID_BASE + self.synthetic_tids.len() as i64;
                    let n = *self
                        .synthetic_tids
                        .entry((process, s.to_string()))
                        .or_insert(next);
                    (n, Some(s.clone()))
                }
            },
        };
        let thread = self.trace.thread(process, number);
        if let Some(label) = label {
            if self.trace.threads[thread.index()].name.is_none() {
                let label = self.string(named(&label))?;
                self.trace.threads[thread.index()].name = Some(label);
            }
        }
        Ok(thread)
    }

    fn thread_track(&mut self, ev: &RawEvent) -> Result<(ProcessId, TrackId), ImportError> {
        // Runs of events on one thread are the norm: remember the last numeric pair.
        let numeric = |id: Option<&Id>| match id {
            None => Some(0),
            Some(Id::Int(i)) => Some(*i),
            Some(Id::Str(_)) => None,
        };
        if let Some((pid, tid)) = numeric(ev.pid.as_ref()).zip(numeric(ev.tid.as_ref())) {
            return self.numeric_thread_track(pid, tid);
        }
        let process = self.process(ev.pid.as_ref())?;
        let thread = self.thread(process, ev.tid.as_ref())?;
        Ok((process, self.trace.thread_track(thread, TrackKind::Thread)))
    }

    /// [`Self::thread_track`] of numeric ids (an absent one is 0, as there).
    #[inline]
    fn numeric_thread_track(
        &mut self,
        pid: i64,
        tid: i64,
    ) -> Result<(ProcessId, TrackId), ImportError> {
        let key = (pid, tid);
        if let Some((last, found)) = self.last_thread {
            if key == last {
                return Ok(found);
            }
        }
        let process = self.process(Some(&Id::Int(pid)))?;
        let thread = self.thread(process, Some(&Id::Int(tid)))?;
        let found = (process, self.trace.thread_track(thread, TrackKind::Thread));
        self.last_thread = Some((key, found));
        Ok(found)
    }

    fn timestamp(&mut self, raw: Option<Micros>) -> Option<i64> {
        let ts = raw?.ns()?;
        self.max_ts = self.max_ts.max(ts);
        Some(ts)
    }

    fn args(&mut self, ev: &RawEvent) -> Result<ArgsId, ImportError> {
        self.args_of(ev.arg_entries, ev.args)
    }

    /// An event's args from its entries (the scanner splits every args object), else
    /// from the raw text of its `args`.
    #[inline]
    fn args_of(
        &mut self,
        entries: Option<ArgEntries>,
        raw: Option<&str>,
    ) -> Result<ArgsId, ImportError> {
        if let Some(split) = entries {
            return self.split_args(split);
        }
        let Some(raw) = raw else {
            return Ok(ArgsId::NONE);
        };
        // Args that are not an object are kept whole under one key.
        let key = self.trace.intern("args");
        let value = self.string(raw.trim())?;
        let mut entries = std::mem::take(&mut self.arg_entries);
        entries.clear();
        entries.push((key, ArgValue::Json(value)));
        Ok(self.seal_args(entries))
    }

    /// Writes one bag of entries; the list goes back for reuse.
    fn seal_args(&mut self, entries: Vec<(StrId, ArgValue)>) -> ArgsId {
        let args = self.trace.args.push_bag(&entries);
        self.arg_entries = entries;
        args
    }

    /// Args the reading thread split into entries (string values already decoded).
    fn split_args(&mut self, split: ArgEntries) -> Result<ArgsId, ImportError> {
        let mut entries = std::mem::take(&mut self.arg_entries);
        entries.clear();
        if let Some(first) = split.entries.first() {
            self.saw_category_arg |= split.texts.of(first.key) == super::export::CATEGORY_ARG;
        }
        for e in split.entries {
            let key = self.string(split.texts.of(e.key))?;
            let value = match e.kind {
                ArgKind::String => ArgValue::Str(self.string(split.texts.of(e.value))?),
                ArgKind::Int(i) => ArgValue::Int(i),
                ArgKind::Other => self.arg_value(split.texts.of(e.value))?,
            };
            entries.push((key, value));
        }
        Ok(self.seal_args(entries))
    }

    fn arg_value(&mut self, raw: &str) -> Result<ArgValue, ImportError> {
        let text = raw.trim();
        Ok(match text.as_bytes().first() {
            Some(b'"') => match serde_json::from_str::<std::borrow::Cow<str>>(text) {
                Ok(s) => ArgValue::Str(self.string(&s)?),
                Err(_) => ArgValue::Json(self.string(text)?),
            },
            Some(b't') => ArgValue::Bool(true),
            Some(b'f') => ArgValue::Bool(false),
            Some(b'n') => ArgValue::Null,
            Some(b'[') | Some(b'{') => ArgValue::Json(self.string(text)?),
            _ => match number_value(text) {
                Some(number) => number,
                None => ArgValue::Json(self.string(text)?),
            },
        })
    }

    /// Handles one event.
    pub fn add(&mut self, ev: &RawEvent) -> Result<(), ImportError> {
        let phase = match ev.ph.as_deref().map(str::as_bytes) {
            Some([p]) => *p,
            _ => {
                self.malformed("no one-letter \"ph\"");
                return Ok(());
            }
        };
        match phase {
            b'X' => self.complete(ev),
            b'B' => self.begin(ev),
            b'E' => self.end(ev),
            b'i' | b'I' | b'R' | b'P' => self.instant(ev),
            b'C' => self.counter(ev),
            b'M' => self.metadata(ev),
            b's' | b't' | b'f' => self.flow(ev, phase),
            b'b' | b'S' => self.async_begin(ev),
            b'e' | b'F' => self.async_end(ev),
            b'n' | b'T' | b'p' => self.async_instant(ev),
            b'N' => self.object_new(ev),
            b'O' => self.object_snapshot(ev),
            b'D' => self.object_delete(ev),
            _ => {
                self.trace.repairs.unsupported_events += 1;
                Ok(())
            }
        }
    }

    fn name_and_category(&mut self, ev: &RawEvent) -> Result<(StrId, StrId), ImportError> {
        let name = self.string(ev.name.as_deref().unwrap_or(""))?;
        let category = self.string(ev.cat.as_deref().unwrap_or(""))?;
        Ok((name, category))
    }

    /// [`kinds::kind_of`] of a slice's category and name, remembered.
    fn kind_of(&mut self, category: StrId, name: StrId) -> Option<SliceKind> {
        let mixed =
            (u64::from(category.0) << 32 | u64::from(name.0)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let slot = (mixed >> 54) as usize % RECENT_KINDS;
        match self.recent_kinds[slot] {
            Some((c, n, kind)) if c == category && n == name => kind,
            _ => {
                let kind = kinds::kind_of(self.trace.str(category), self.trace.str(name));
                self.recent_kinds[slot] = Some((category, name, kind));
                kind
            }
        }
    }

    fn push_slice(&mut self, track: TrackId, ts: i64, dur: i64, open: OpenSlice) {
        let kind = match self.kind_of(open.category, open.name) {
            Some(kind) => kind,
            // The legacy autograd profiler writes ops with no category under the
            // process "CPU functions".
            None if open.category == StrId::EMPTY && self.is_legacy_autograd(track) => {
                SliceKind::Op
            }
            None => {
                self.trace.note_unknown_category(open.category);
                SliceKind::Other
            }
        };
        let (category, args) = self.own_category(open.category, open.args);
        self.trace.slices.push(SliceRow {
            track,
            ts,
            dur,
            name: open.name,
            category,
            kind,
            args,
        });
    }

    /// opscope's Chrome export writes Kineto's category where a slice's own would not
    /// read back as the same kind, and keeps the own one as the first arg
    /// ([`super::export::CATEGORY_ARG`]): the slice gets it back, and loses the arg.
    fn own_category(&mut self, category: StrId, args: ArgsId) -> (StrId, ArgsId) {
        if !self.saw_category_arg {
            return (category, args);
        }
        let Some((key, ArgValue::Str(own))) = self.trace.args.get(args).next() else {
            return (category, args);
        };
        if self.trace.str(key) != super::export::CATEGORY_ARG {
            return (category, args);
        }
        let mut entries = std::mem::take(&mut self.arg_entries);
        entries.clear();
        entries.extend(self.trace.args.get(args).skip(1));
        let args = if entries.is_empty() {
            self.arg_entries = entries;
            ArgsId::NONE
        } else {
            self.seal_args(entries)
        };
        (own, args)
    }

    fn is_legacy_autograd(&self, track: TrackId) -> bool {
        let process = self.trace.tracks[track.index()].process;
        process
            .and_then(|p| self.trace.processes[p.index()].name)
            .is_some_and(|n| self.trace.str(n) == "CPU functions")
    }

    fn complete(&mut self, ev: &RawEvent) -> Result<(), ImportError> {
        let Some(ts) = self.timestamp(ev.ts) else {
            self.malformed("no valid \"ts\"");
            return Ok(());
        };
        let dur = match ev.dur {
            Some(raw) => match raw.ns() {
                Some(d) => d,
                None => {
                    self.malformed("\"dur\" is not a number");
                    return Ok(());
                }
            },
            None => 0,
        };
        self.max_ts = self.max_ts.max(ts.saturating_add(dur));
        let (_, track) = self.thread_track(ev)?;
        let (name, category) = self.name_and_category(ev)?;
        let args = self.args(ev)?;
        let open = OpenSlice {
            ts,
            name,
            category,
            args,
        };
        self.push_slice(track, ts, dur, open);
        Ok(())
    }

    /// A complete event of the usual shape, as [`Self::add`] of its [`RawEvent`] would
    /// handle it (its `ts` is valid, so it is never malformed).
    pub fn add_complete(&mut self, ev: &Complete) -> Result<(), ImportError> {
        let (ts, dur) = (ev.ts, ev.dur);
        self.max_ts = self.max_ts.max(ts).max(ts.saturating_add(dur));
        let (_, track) = self.numeric_thread_track(ev.pid, ev.tid)?;
        let name = self.string(ev.name)?;
        let category = self.string(ev.cat)?;
        let args = self.args_of(ev.arg_entries, ev.args)?;
        let open = OpenSlice {
            ts,
            name,
            category,
            args,
        };
        self.push_slice(track, ts, dur, open);
        Ok(())
    }

    fn begin(&mut self, ev: &RawEvent) -> Result<(), ImportError> {
        let Some(ts) = self.timestamp(ev.ts) else {
            self.malformed("no valid \"ts\"");
            return Ok(());
        };
        let (_, track) = self.thread_track(ev)?;
        let (name, category) = self.name_and_category(ev)?;
        let args = self.args(ev)?;
        self.open.begin(
            track,
            OpenSlice {
                ts,
                name,
                category,
                args,
            },
        );
        Ok(())
    }

    fn end(&mut self, ev: &RawEvent) -> Result<(), ImportError> {
        let Some(ts) = self.timestamp(ev.ts) else {
            self.malformed("no valid \"ts\"");
            return Ok(());
        };
        let (_, track) = self.thread_track(ev)?;
        let Some(mut open) = self.open.end(track, &mut self.trace.repairs) else {
            return Ok(());
        };
        // Args on the `E` event are merged into the slice's, as Chrome does.
        let end_args = self.args(ev)?;
        open.args = self.merge_args(open.args, end_args);
        self.push_slice(track, open.ts, ts.saturating_sub(open.ts), open);
        Ok(())
    }

    fn merge_args(&mut self, a: ArgsId, b: ArgsId) -> ArgsId {
        if b.is_none() {
            return a;
        }
        if a.is_none() {
            return b;
        }
        let entries: Vec<_> = self
            .trace
            .args
            .get(a)
            .chain(self.trace.args.get(b))
            .collect();
        let mut w = self.trace.args.writer();
        for (k, v) in entries {
            w.push(k, v);
        }
        w.finish()
    }

    fn instant(&mut self, ev: &RawEvent) -> Result<(), ImportError> {
        let Some(ts) = self.timestamp(ev.ts) else {
            self.malformed("no valid \"ts\"");
            return Ok(());
        };
        let (_, track) = self.thread_track(ev)?;
        let scope = match ev.s.as_deref() {
            Some("g") => InstantScope::Global,
            Some("p") => InstantScope::Process,
            _ => InstantScope::Thread,
        };
        self.push_instant(track, ts, scope, ev)
    }

    fn push_instant(
        &mut self,
        track: TrackId,
        ts: i64,
        scope: InstantScope,
        ev: &RawEvent,
    ) -> Result<(), ImportError> {
        let (name, category) = self.name_and_category(ev)?;
        let args = self.args(ev)?;
        // Allocator events: Kineto's `[memory]` instants and TF tensor snapshots.
        let is_alloc = self.trace.str(name) == "[memory]"
            || kinds::kind_of(self.trace.str(category), "") == Some(SliceKind::Alloc);
        let kind = if is_alloc {
            SliceKind::Alloc
        } else {
            SliceKind::Other
        };
        self.trace.instants.push(InstantRow {
            track,
            ts,
            name,
            category,
            kind,
            scope,
            args,
        });
        Ok(())
    }

    fn counter(&mut self, ev: &RawEvent) -> Result<(), ImportError> {
        let Some(ts) = self.timestamp(ev.ts) else {
            self.malformed("no valid \"ts\"");
            return Ok(());
        };
        let process = self.process(ev.pid.as_ref())?;
        let mut name = ev.name.as_deref().unwrap_or("").to_string();
        if let Some(id) = &ev.id {
            name = format!("{name}[{}]", id_text(id));
        }
        let Some(map) = ev.args.and_then(parse_args_object) else {
            self.malformed("a counter whose \"args\" is not an object");
            return Ok(());
        };
        for (key, value) in map {
            let Some(v) = number_value(value.trim()).and_then(|v| match v {
                ArgValue::Int(i) => Some(i as f64),
                ArgValue::UInt(u) => Some(u as f64),
                ArgValue::Float(f) => Some(f),
                _ => None,
            }) else {
                continue;
            };
            let track_name = if key == name {
                self.string(&name)?
            } else {
                self.string(&format!("{name}.{key}"))?
            };
            let track = self
                .trace
                .named_track(Some(process), TrackKind::Counter, track_name, 0);
            self.trace.counters.push(track, ts, v);
        }
        Ok(())
    }

    fn metadata(&mut self, ev: &RawEvent) -> Result<(), ImportError> {
        let kind = ev.name.as_deref().unwrap_or("");
        let wanted = match kind {
            "process_name" | "thread_name" => "name",
            "process_labels" => "labels",
            "process_sort_index" | "thread_sort_index" => "sort_index",
            _ => {
                self.trace.repairs.unsupported_events += 1;
                return Ok(());
            }
        };
        // Metadata can be most of a trace (300k of the MTIA trace's 456k events): find
        // the one arg without collecting them.
        let mut raw = None;
        if let Some(args) = ev.args {
            for_each_entry(args, |key, value| {
                if key == wanted {
                    raw = Some(value.trim());
                }
                raw.is_none()
            });
        }
        let Some(raw) = raw else {
            return Ok(());
        };
        let process = self.process(ev.pid.as_ref())?;
        if wanted == "sort_index" {
            let index = raw.parse().ok();
            if kind == "process_sort_index" {
                self.trace.processes[process.index()].sort_index = index;
            } else {
                let thread = self.thread(process, ev.tid.as_ref())?;
                self.trace.threads[thread.index()].sort_index = index;
            }
            return Ok(());
        }
        let text: std::borrow::Cow<str> =
            match raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
                Some(plain) if !plain.contains('\\') => plain.into(),
                _ => match serde_json::from_str::<String>(raw) {
                    Ok(text) => text.into(),
                    Err(_) => return Ok(()),
                },
            };
        let value = self.string(&text)?;
        match kind {
            "process_name" => self.trace.processes[process.index()].name = Some(value),
            "process_labels" => self.trace.processes[process.index()].labels = Some(value),
            _ => {
                let thread = self.thread(process, ev.tid.as_ref())?;
                self.trace.threads[thread.index()].name = Some(value);
            }
        }
        Ok(())
    }

    fn flow(&mut self, ev: &RawEvent, phase: u8) -> Result<(), ImportError> {
        let Some(ts) = self.timestamp(ev.ts) else {
            self.malformed("no valid \"ts\"");
            return Ok(());
        };
        let (process, track) = self.thread_track(ev)?;
        let Some((id, local)) = self.event_id(ev) else {
            self.malformed("no \"id\"");
            return Ok(());
        };
        let (name, category) = self.name_and_category(ev)?;
        let role = match phase {
            b's' => FlowRole::Start,
            b't' => FlowRole::Step,
            _ => FlowRole::End,
        };
        self.flows.add(FlowEnd {
            id: (category, id, local.then_some(process)),
            ts,
            order: self.index,
            role,
            slice: None,
            label: FlowPlace {
                track,
                enclosing: phase != b'f' || ev.bp.as_deref() == Some("e"),
                name,
            },
        });
        Ok(())
    }

    /// The id of a flow, async or object event, and whether it is process-local.
    /// String ids are numbered in the order they are first seen.
    fn event_id(&mut self, ev: &RawEvent) -> Option<(IdKey, bool)> {
        let (id, local) = match (&ev.id, &ev.id2) {
            (Some(id), _) => (id, false),
            (None, Some(id2)) => match (&id2.local, &id2.global) {
                (Some(local), _) => (local, true),
                (None, Some(global)) => (global, false),
                (None, None) => return None,
            },
            (None, None) => return None,
        };
        let key = match id.as_int() {
            Some(i) => IdKey::Int(i),
            None => {
                let next = self.string_ids.len() as u32;
                let text = match id {
                    Id::Str(s) => s.to_string(),
                    Id::Int(i) => i.to_string(),
                };
                IdKey::Str(*self.string_ids.entry(text).or_insert(next))
            }
        };
        Some((key, local))
    }

    /// The lane of an async event: one track per process, category and id.
    fn async_track(&mut self, ev: &RawEvent) -> Result<Option<(TrackId, StrId)>, ImportError> {
        let process = self.process(ev.pid.as_ref())?;
        let Some((id, local)) = self.event_id(ev) else {
            return Ok(None);
        };
        let category = self.string(ev.cat.as_deref().unwrap_or(""))?;
        let track = self.trace.named_track(
            Some(process),
            TrackKind::Async,
            category,
            id.lane() | ((local as u64) << 63),
        );
        Ok(Some((track, category)))
    }

    fn async_begin(&mut self, ev: &RawEvent) -> Result<(), ImportError> {
        let ts = self.timestamp(ev.ts);
        let lane = self.async_track(ev)?;
        let (Some(ts), Some((track, category))) = (ts, lane) else {
            self.malformed("no valid \"ts\" or \"id\"");
            return Ok(());
        };
        let name = self.string(ev.name.as_deref().unwrap_or(""))?;
        let args = self.args(ev)?;
        self.open_async.begin(
            (track, category),
            OpenSlice {
                ts,
                name,
                category,
                args,
            },
        );
        Ok(())
    }

    fn async_end(&mut self, ev: &RawEvent) -> Result<(), ImportError> {
        let ts = self.timestamp(ev.ts);
        let lane = self.async_track(ev)?;
        let (Some(ts), Some((track, category))) = (ts, lane) else {
            self.malformed("no valid \"ts\" or \"id\"");
            return Ok(());
        };
        let name = ev.name.as_deref().unwrap_or("");
        let name = self.trace.strings.find(name);
        // `e` closes the innermost open `b` of the same name, else the innermost one.
        let closed =
            self.open_async
                .end_preferring((track, category), &mut self.trace.repairs, |o| {
                    Some(o.name) == name
                });
        let Some(mut open) = closed else {
            return Ok(());
        };
        let end_args = self.args(ev)?;
        open.args = self.merge_args(open.args, end_args);
        self.push_slice(track, open.ts, ts.saturating_sub(open.ts), open);
        Ok(())
    }

    fn async_instant(&mut self, ev: &RawEvent) -> Result<(), ImportError> {
        let ts = self.timestamp(ev.ts);
        let lane = self.async_track(ev)?;
        let (Some(ts), Some((track, _))) = (ts, lane) else {
            self.malformed("no valid \"ts\" or \"id\"");
            return Ok(());
        };
        self.push_instant(track, ts, InstantScope::Thread, ev)
    }

    /// Objects (TF tensors) live on one async track per process and object name.
    fn object_key(
        &mut self,
        ev: &RawEvent,
    ) -> Result<Option<(ProcessId, StrId, IdKey)>, ImportError> {
        let process = self.process(ev.pid.as_ref())?;
        let Some((id, _)) = self.event_id(ev) else {
            return Ok(None);
        };
        let category = self.string(ev.cat.as_deref().unwrap_or(""))?;
        Ok(Some((process, category, id)))
    }

    fn object_new(&mut self, ev: &RawEvent) -> Result<(), ImportError> {
        let ts = self.timestamp(ev.ts);
        let key = self.object_key(ev)?;
        let (Some(ts), Some(key)) = (ts, key) else {
            self.malformed("no valid \"ts\" or \"id\"");
            return Ok(());
        };
        let (name, category) = self.name_and_category(ev)?;
        let args = self.args(ev)?;
        let track = self
            .trace
            .named_track(Some(key.0), TrackKind::Async, name, key.2.lane());
        let open = OpenSlice {
            ts,
            name,
            category,
            args,
        };
        // A second `N` for a live object ends the first lifetime.
        if let Some((track, old)) = self.open_objects.insert(key, (track, open)) {
            self.push_slice(track, old.ts, ts.saturating_sub(old.ts), old);
        }
        Ok(())
    }

    fn object_snapshot(&mut self, ev: &RawEvent) -> Result<(), ImportError> {
        let ts = self.timestamp(ev.ts);
        let key = self.object_key(ev)?;
        let (Some(ts), Some(key)) = (ts, key) else {
            self.malformed("no valid \"ts\" or \"id\"");
            return Ok(());
        };
        let track = match self.open_objects.get(&key) {
            Some((track, _)) => *track,
            None => {
                let name = self.string(ev.name.as_deref().unwrap_or(""))?;
                self.trace
                    .named_track(Some(key.0), TrackKind::Async, name, key.2.lane())
            }
        };
        // Snapshots often omit the name: they belong to the object they snapshot.
        let named;
        let ev = match (&ev.name, self.open_objects.get(&key)) {
            (None, Some((_, open))) => {
                named = RawEvent {
                    name: Some(self.trace.str(open.name).to_string().into()),
                    ..ev.clone()
                };
                &named
            }
            _ => ev,
        };
        self.push_instant(track, ts, InstantScope::Thread, ev)
    }

    fn object_delete(&mut self, ev: &RawEvent) -> Result<(), ImportError> {
        let ts = self.timestamp(ev.ts);
        let key = self.object_key(ev)?;
        let (Some(ts), Some(key)) = (ts, key) else {
            self.malformed("no valid \"ts\" or \"id\"");
            return Ok(());
        };
        match self.open_objects.remove(&key) {
            Some((track, open)) => {
                self.push_slice(track, open.ts, ts.saturating_sub(open.ts), open)
            }
            None => self.trace.repairs.unmatched_ends += 1,
        }
        Ok(())
    }

    /// Closes what is still open, maps processes to devices, sorts, and binds flows.
    pub fn finish(mut self) -> Result<(), ImportError> {
        if let Some(first) = self.first_malformed.take() {
            let more = match self.malformed_here {
                1 => String::new(),
                n => format!(" ({} more events could not be read either)", n - 1),
            };
            let warning = format!("{}: {first}; the event was skipped{more}", self.path);
            self.trace.warnings.push((self.source, warning));
        }
        let end = if self.max_ts == i64::MIN {
            0
        } else {
            self.max_ts
        };
        let open = self.open.finish(&mut self.trace.repairs);
        let open_async = self.open_async.finish(&mut self.trace.repairs);
        let open_async = open_async.into_iter().map(|((track, _), o)| (track, o));
        for (track, stack) in open.into_iter().chain(open_async) {
            for o in stack {
                self.push_slice(track, o.ts, end.saturating_sub(o.ts), o);
            }
        }
        // Objects never deleted live to the end of the trace: not an error.
        let open: Vec<_> = self.open_objects.drain().collect();
        for (_, (track, o)) in open {
            self.push_slice(track, o.ts, end.saturating_sub(o.ts), o);
        }
        assign_devices(self.trace, self.source);
        // The flow events' sort needs no slices: beside the slices' sorting and nesting.
        let (flows, trace) = (&mut self.flows, &mut *self.trace);
        if flows.len() >= crate::common::flow_binder::PARALLEL_ENDS {
            std::thread::scope(|scope| {
                // One flow event per event, whose index is its order.
                scope.spawn(|| flows.sort_unique());
                trace.finish();
            });
        } else {
            trace.finish();
        }
        // Binding adds only flows between the finished slices: finishing again (sorting
        // checks, nesting, kinds) would change nothing.
        self.bind_flows();
        Ok(())
    }

    /// Binds each flow event to a slice and links consecutive events of a chain: `s`
    /// starts a chain, `t` continues it, `f` ends it.
    fn bind_flows(&mut self) {
        let trace = &*self.trace;
        // In id order, which is about time order on each track (ids are handed out as
        // time goes): each look-up starts where the last one on its track ended.
        self.flows.place(Finger::default, |e, finger| {
            let at = &e.label;
            if at.enclosing {
                trace.enclosing_slice_near(at.track, e.ts, finger)
            } else {
                trace.next_slice_near(at.track, e.ts, finger)
            }
        });
        let flows = &mut self.trace.flows;
        self.flows.bind(&mut self.trace.repairs, |l| {
            flows.push(l.from, l.to, l.to_label.name, l.id.0)
        });
    }
}

/// Gives device-backed processes of `source` their device, and makes the tracks that
/// carry device activity GPU streams; refines TF timeline op kinds on stream and memcpy
/// lanes, and gives the events of xprof's planes their kinds ([`xprof_kind`]). Also run
/// on copies of a model loaded part way, for a viewer.
pub(crate) fn assign_devices(trace: &mut Trace, source: SourceId) {
    let mut lanes: HashMap<ProcessId, TfLane> = HashMap::new();
    for p in 0..trace.processes.len() {
        let process = &trace.processes[p];
        if process.source != source {
            continue;
        }
        let label = process.labels.map(|l| trace.str(l).to_string());
        let name = process.name.map(|n| trace.str(n).to_string());
        let device = label
            .as_deref()
            .and_then(kinds::device_of)
            .or_else(|| name.as_deref().and_then(kinds::device_of));
        if let Some(lane) = name.as_deref().and_then(kinds::tf_lane) {
            lanes.insert(ProcessId(p as u32), lane);
        }
        if let Some((kind, index)) = device {
            let d = trace.device(source, kind, index);
            trace.processes[p].device = Some(d);
        }
    }
    let planes = xprof_planes(trace, source);
    let keys = XprofKeys {
        hlo_op: trace.strings.find("hlo_op"),
        long_name: trace.strings.find("long_name"),
        memcpy_details: trace.strings.find("memcpy_details"),
        step_num: trace.strings.find("step_num"),
    };
    let mut device_activity = vec![false; trace.tracks.len()];
    for i in 0..trace.slices.len() {
        let track = trace.slices.track[i] as usize;
        let process = trace.tracks[track].process;
        // (Most traces have no xprof plane: no look-up per slice for them.)
        let plane = process.filter(|_| !planes.is_empty());
        if let Some(&on_device) = plane.and_then(|p| planes.get(&p)) {
            xprof_kind(trace, i, on_device, &keys);
        }
        if let Some(lane) = process.and_then(|p| lanes.get(&p)) {
            let kind = trace.slices.kind(i);
            if kind == SliceKind::Op {
                let name = trace.str(trace.slices.name[i]);
                // The merged lane repeats work the stream lanes hold: kept for
                // viewers, left out of device time so nothing counts twice.
                let refined = if *lane == TfLane::AllStreams {
                    SliceKind::Other
                } else if name.to_ascii_uppercase().contains("MEMCPY") || *lane == TfLane::Memcpy {
                    SliceKind::Memcpy(kinds::memcpy_direction(name))
                } else {
                    SliceKind::Kernel
                };
                trace.slices.set_kind(i, refined);
            }
        }
        if trace.slices.kind(i).is_device_activity() {
            device_activity[track] = true;
        }
    }
    for (t, track) in trace.tracks.iter_mut().enumerate() {
        let Some(process) = track.process else {
            continue;
        };
        if trace.processes[process.index()].source != source {
            continue;
        }
        track.device = trace.processes[process.index()].device;
        if track.kind == TrackKind::Thread && (device_activity[t] || track.device.is_some()) {
            track.kind = TrackKind::GpuStream;
        }
    }
}

/// The processes of `source` that are xprof's planes (`/host:CPU`, `/device:GPU:0`),
/// each with whether it is a device's: the trace viewer's JSON of a TensorFlow or JAX
/// profile (`*.trace.json.gz`), whose events have no category.
fn xprof_planes(trace: &Trace, source: SourceId) -> HashMap<ProcessId, bool> {
    let mut planes = HashMap::new();
    for (p, process) in trace.processes.iter().enumerate() {
        let name = process.name.map_or("", |n| trace.str(n));
        if process.source == source && (name.starts_with("/host:") || name.starts_with("/device:"))
        {
            planes.insert(ProcessId(p as u32), name.starts_with("/device:"));
        }
    }
    planes
}

/// The keys of the args that tell an xprof event's kind, where any slice has them.
struct XprofKeys {
    hlo_op: Option<StrId>,
    long_name: Option<StrId>,
    memcpy_details: Option<StrId>,
    step_num: Option<StrId>,
}

/// Gives slice `i` of an xprof plane, if its category is none, the kind its XPlane's
/// event gets ([`crate::xplane::kinds::event_kind`]), by its thread (the plane's line),
/// its name, its `long_name` and its `hlo_op` and `step_num` args; it is no longer an unknown
/// category's.
fn xprof_kind(trace: &mut Trace, i: usize, on_device: bool, keys: &XprofKeys) {
    let s = &trace.slices;
    if s.category[i] != StrId::EMPTY || s.kind(i) != SliceKind::Other {
        return;
    }
    let track = &trace.tracks[s.track[i] as usize];
    let line = track
        .thread
        .and_then(|t| trace.threads[t.index()].name)
        .map_or("", |n| trace.str(n));
    let has = |key: Option<StrId>| key.is_some_and(|key| trace.args.find(s.args[i], key).is_some());
    let name = trace.str(s.name[i]);
    let full_name = match keys
        .long_name
        .and_then(|key| trace.args.find(s.args[i], key))
    {
        Some(ArgValue::Str(long)) => trace.str(long),
        _ => name,
    };
    let kind = crate::xplane::kinds::event_kind(&crate::xplane::kinds::Event {
        on_device,
        line,
        name,
        full_name,
        runs_hlo_op: has(keys.hlo_op),
        marks_step: has(keys.step_num),
    });
    trace.slices.set_kind(i, kind);
    if let Some(count) = trace.unknown_categories.get_mut(&StrId::EMPTY) {
        *count -= 1;
        if *count == 0 {
            trace.unknown_categories.remove(&StrId::EMPTY);
        }
    }
    xprof_args(trace, i, keys);
}

/// xprof writes every stat as a string: slice `i`'s integers become integers again, as
/// in its XPlane (the `correlation_id` that ties a launch to its kernel), and a copy's
/// `memcpy_details` (`size:112 dest:4 async:0`) gives its `bytes`, as there.
fn xprof_args(trace: &mut Trace, i: usize, keys: &XprofKeys) {
    let args = trace.slices.args[i];
    if args.is_none() {
        return;
    }
    let mut changed = false;
    let mut bytes = None;
    let mut entries: Vec<(StrId, ArgValue)> = Vec::new();
    for (key, value) in trace.args.get(args) {
        let value = match value {
            ArgValue::Str(text) => {
                let text = trace.str(text);
                if Some(key) == keys.memcpy_details {
                    bytes = crate::xplane::detail_number(text, "size");
                }
                match text.parse::<i64>() {
                    Ok(n) if n.to_string() == text => {
                        changed = true;
                        ArgValue::Int(n)
                    }
                    _ => value,
                }
            }
            _ => value,
        };
        entries.push((key, value));
    }
    if let Some(bytes) = bytes {
        entries.push((trace.intern("bytes"), ArgValue::Int(bytes)));
        changed = true;
    }
    if changed {
        trace.slices.args[i] = trace.args.push_bag(&entries);
    }
}

/// A flow, async or object id: Chrome traces use numbers and strings.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum IdKey {
    Int(i64),
    /// The n-th distinct string id of the file.
    Str(u32),
}

impl IdKey {
    /// A track lane number for the id (ids of the two kinds never share a lane).
    fn lane(self) -> u64 {
        match self {
            IdKey::Int(i) => (i as u64) & !(1 << 62),
            IdKey::Str(n) => (n as u64) | (1 << 62),
        }
    }
}

fn id_text(id: &Id) -> String {
    match id {
        Id::Int(i) => i.to_string(),
        Id::Str(s) => s.to_string(),
    }
}

fn number_value(text: &str) -> Option<ArgValue> {
    if let Ok(i) = text.parse::<i64>() {
        return Some(ArgValue::Int(i));
    }
    if let Ok(u) = text.parse::<u64>() {
        return Some(ArgValue::UInt(u));
    }
    let f: f64 = text.parse().ok()?;
    f.is_finite().then_some(ArgValue::Float(f))
}

/// Calls `f` on each entry of a JSON object until it returns false; false if `text`
/// is not an object.
fn for_each_entry<'a>(text: &'a str, mut f: impl FnMut(&str, &'a str) -> bool) -> bool {
    super::scan::object_entries(text, |key, value| f(key, value))
}

/// The entries of a JSON object, borrowed; `None` if `text` is not an object.
fn parse_args_object(text: &str) -> Option<Vec<(std::borrow::Cow<'_, str>, &str)>> {
    let mut entries = Vec::new();
    super::scan::object_entries(text, |key, value| {
        entries.push((std::borrow::Cow::Owned(key.to_string()), value));
        true
    })
    .then_some(entries)
}

#[cfg(test)]
mod tests {
    use opscope_model::Trace;

    fn import(json: &str) -> Trace {
        let mut trace = Trace::new();
        crate::chrome::import(json.as_bytes(), "t.json", &mut trace).unwrap();
        trace
    }

    /// A flow start that nothing continues is dropped and counted, as an end with no
    /// start is, and as the Perfetto reader counts it (it used to be dropped unseen).
    #[test]
    fn a_flow_start_nothing_continues_is_counted() {
        let slices = r#"{"ph":"X","name":"launch","pid":1,"tid":1,"ts":0,"dur":10},
            {"ph":"X","name":"kernel","pid":2,"tid":7,"ts":20,"dur":10},"#;
        let t = import(&format!(
            r#"[{slices}
            {{"ph":"s","cat":"ac2g","id":1,"pid":1,"tid":1,"ts":1}},
            {{"ph":"f","cat":"ac2g","id":1,"pid":2,"tid":7,"ts":20,"bp":"e"}},
            {{"ph":"s","cat":"ac2g","id":2,"pid":1,"tid":1,"ts":2}},
            {{"ph":"f","cat":"ac2g","id":3,"pid":2,"tid":7,"ts":21,"bp":"e"}}]"#
        ));
        assert_eq!(t.flows.len(), 1);
        assert_eq!(
            t.repairs.unbound_flow_events, 2,
            "the lone s and the lone f"
        );
        // A start another start replaces is dropped too; the second one joins.
        let t = import(&format!(
            r#"[{slices}
            {{"ph":"s","cat":"ac2g","id":1,"pid":1,"tid":1,"ts":1}},
            {{"ph":"s","cat":"ac2g","id":1,"pid":1,"tid":1,"ts":2}},
            {{"ph":"f","cat":"ac2g","id":1,"pid":2,"tid":7,"ts":20,"bp":"e"}}]"#
        ));
        assert_eq!(t.flows.len(), 1);
        assert_eq!(t.repairs.unbound_flow_events, 1);
        // The Trace Event Format chains by time: an `f` before its `s` joins nothing,
        // and both are counted.
        let t = import(&format!(
            r#"[{slices}
            {{"ph":"f","cat":"ac2g","id":1,"pid":2,"tid":7,"ts":20,"bp":"e"}},
            {{"ph":"s","cat":"ac2g","id":1,"pid":1,"tid":1,"ts":20}}]"#
        ));
        assert_eq!(t.flows.len(), 0);
        assert_eq!(t.repairs.unbound_flow_events, 2);
    }

    /// Found by fuzzing: a span from one end of the nanosecond range to the other
    /// overflowed `end - start`; it saturates now, as `Slices::end` does.
    #[test]
    fn spans_past_the_nanosecond_range_saturate() {
        let inputs: [&[u8]; 5] = [
            br#"[{"ph":"B","ts":-9000000000000000},{"ph":"E","ts":9000000000000000}]"#,
            br#"[{"ph":"B","ts":-9000000000000000},{"ph":"i","ts":9000000000000000}]"#,
            br#"[{"ph":"b","id":1,"ts":-9e15},{"ph":"e","id":1,"ts":9e15}]"#,
            br#"[{"ph":"N","id":1,"ts":-9e15},{"ph":"D","id":1,"ts":9e15}]"#,
            br#"[{"ph":"N","id":1,"ts":-9e15},{"ph":"N","id":1,"ts":9e15}]"#,
        ];
        for input in inputs {
            let mut trace = Trace::new();
            crate::chrome::import(input, "t.json", &mut trace).unwrap();
            assert_eq!(
                trace.slices.dur[0],
                i64::MAX,
                "{}",
                String::from_utf8_lossy(input)
            );
        }
    }
}
