//! opscope's own events (`opscope:*`, what `ctf::export` writes) in any layout: back to
//! the slices, instants and counter samples they were written from. A layout that is
//! exactly the writer's is read by [`super::super::own`], which shares the helpers here.
//!
//! Their names, categories, kinds and repeated string args are enumerations: each
//! enumeration's labels are interned at most once, through a table by value built at
//! its first event, so that an event's text is a load rather than a scan, a UTF-8 check
//! and a hash. A slice's row is added at its begin (the model's order) and its end sets
//! its duration; begins never ended (a cut trace) end at the trace's last event,
//! counted as unmatched.

use std::cell::Cell;
use std::rc::Rc;

use opscope_model::args::ArgValue;
use opscope_model::events::{InstantRow, SliceRow};
use opscope_model::{ArgsId, InstantScope, ProcessId, SliceKind, StrId, Trace, TrackId, TrackKind};

use super::{Class, Plan, Rule};
use crate::ctf::decode::{Event, EventLayout, IntNode, Layout, Node, Val};
use crate::ctf::export::ArgTag;
use crate::ctf::mapping::Mapper;
use crate::ctf::types::EnumTy;

/// What an opscope event class is, with its payload fields' indexes.
#[derive(Clone, Debug)]
pub(in crate::ctf::mapping) enum Own {
    Begin {
        id: usize,
        name: OwnText,
        category: OwnText,
        kind: OwnText,
        args: usize,
    },
    End {
        id: usize,
    },
    Instant {
        name: OwnText,
        category: OwnText,
        kind: Option<OwnText>,
        args: usize,
    },
    Counter {
        name: usize,
        value: usize,
    },
    /// Slice begins and instants with typed args: `args` is the payload field of the
    /// struct whose fields are, in order, these keys of these types.
    Typed {
        id: Option<usize>,
        name: OwnText,
        category: OwnText,
        kind: OwnText,
        args: usize,
        keys: Box<[(StrId, ArgTag)]>,
        /// Per key: its enumeration's labels, when its values are written so.
        labels: Box<[Option<Rc<LabelTable>>]>,
    },
}

/// Takes the `opscope:*` classes whose fields are the ones `ctf::export` writes; any
/// other goes on to the next rules.
pub(super) fn plan(m: &mut Mapper, c: &Class) -> Option<Rule> {
    if c.provider != "opscope" {
        return None;
    }
    let typed = match c.short {
        "slice_begin" | "instant" => fitting_typed_keys(m, c),
        _ => None,
    };
    if let Some(keys) = typed {
        let fields = c.fields()?;
        let args = c.field("args")?;
        let Node::Struct { fields: typed, .. } = &fields[args] else {
            return None;
        };
        let labels = typed
            .iter()
            .map(|f| match f {
                Node::Int(IntNode {
                    labels: Some(e), ..
                }) => Some(m.label_table(e)),
                _ => None,
            })
            .collect();
        return Some(Rule::Opscope(Own::Typed {
            id: if c.short == "slice_begin" {
                Some(c.int_field("id")?)
            } else {
                None
            },
            name: text_field(m, c, "name")?,
            category: text_field(m, c, "category")?,
            kind: text_field(m, c, "kind")?,
            args,
            keys,
            labels,
        }));
    }
    let own = match c.short {
        "slice_begin" => Own::Begin {
            id: c.int_field("id")?,
            name: text_field(m, c, "name")?,
            category: text_field(m, c, "category")?,
            kind: text_field(m, c, "kind")?,
            args: c.str_field("args")?,
        },
        "slice_end" => Own::End {
            id: c.int_field("id")?,
        },
        "instant" => Own::Instant {
            name: text_field(m, c, "name")?,
            category: text_field(m, c, "category")?,
            kind: text_field(m, c, "kind"),
            args: c.str_field("args")?,
        },
        "counter" => Own::Counter {
            name: c.str_field("name")?,
            value: c.field("value")?,
        },
        _ => return None,
    };
    Some(Rule::Opscope(own))
}

/// The keys and types of a typed class's args, when its `args` struct holds one
/// scalar of each key's type.
fn fitting_typed_keys(m: &mut Mapper, c: &Class) -> Option<Box<[(StrId, ArgTag)]>> {
    let fields = c.fields()?;
    let args = fields.get(c.field("args")?)?;
    let Node::Struct { fields: typed, .. } = args else {
        return None;
    };
    let keys = m.typed_keys(c.layout, c.el, typed.len())?;
    // Every field a scalar value of the type the schema says.
    let fits = keys.len() == typed.len()
        && keys
            .iter()
            .zip(typed.iter())
            .all(|((_, tag), f)| match tag {
                ArgTag::Float => matches!(f, Node::Float { .. }),
                ArgTag::Str | ArgTag::Json => matches!(
                    f,
                    Node::Str
                        | Node::Int(IntNode {
                            labels: Some(_),
                            ..
                        })
                ),
                _ => matches!(f, Node::Int(_)),
            });
    fits.then_some(keys)
}

/// A text field of opscope's own: a string or an enumeration of its texts.
fn text_field(m: &mut Mapper, c: &Class, n: &str) -> Option<OwnText> {
    if let Some(i) = c.str_field(n) {
        return Some(OwnText {
            field: i,
            labels: None,
        });
    }
    let i = c.field(n)?;
    let fields = c.fields()?;
    let Node::Int(IntNode {
        labels: Some(e), ..
    }) = &fields[i]
    else {
        return None;
    };
    Some(OwnText {
        field: i,
        labels: Some(m.label_table(e)),
    })
}

#[allow(clippy::too_many_arguments)]
pub(super) fn apply(
    m: &mut Mapper,
    own: &Own,
    plan: &Plan,
    layout: &Layout,
    r: &Event,
    ts: i64,
    process: ProcessId,
    track: TrackId,
) {
    match own {
        Own::Begin {
            id,
            name,
            category,
            kind,
            args,
        } => {
            let entries = m.field_json_args(r, *args);
            let args = m.trace.args.push_bag(&entries);
            let name = m.own_text(r, 0, name);
            let category = m.own_text(r, 1, category);
            let kind_text = m.own_text(r, 2, kind);
            let kind = m.memo_kind(kind_text);
            let id = m.field_u(r, *id);
            m.begin_own(id, track, ts, name, category, kind, args);
        }
        Own::End { id } => match m.take_own(m.field_u(r, *id)) {
            Some(row) => m.end_own(row, track, ts),
            None => {
                m.trace.repairs.unmatched_ends += 1;
                m.instant(plan, layout, r, ts, track);
            }
        },
        Own::Instant {
            name,
            category,
            kind,
            args,
        } => {
            let entries = m.field_json_args(r, *args);
            let args = m.trace.args.push_bag(&entries);
            let kind = match kind {
                Some(k) => {
                    let text = m.own_text(r, 2, k);
                    m.memo_kind(text)
                }
                None => SliceKind::Other,
            };
            let row = InstantRow {
                track,
                ts,
                name: m.own_text(r, 0, name),
                category: m.own_text(r, 1, category),
                kind,
                scope: InstantScope::Thread,
                args,
            };
            m.trace.instants.push(row);
        }
        Own::Typed {
            id,
            name,
            category,
            kind,
            args,
            keys,
            labels,
        } => {
            let args = m.typed_args(r, *args, keys, labels);
            let name = m.own_text(r, 0, name);
            let category = m.own_text(r, 1, category);
            let kind_text = m.own_text(r, 2, kind);
            let kind = m.memo_kind(kind_text);
            match id {
                Some(id) => {
                    let id = m.field_u(r, *id);
                    m.begin_own(id, track, ts, name, category, kind, args);
                }
                None => {
                    m.trace.instants.push(InstantRow {
                        track,
                        ts,
                        name,
                        category,
                        kind,
                        scope: InstantScope::Thread,
                        args,
                    });
                }
            }
        }
        Own::Counter { name, value } => {
            let name = m.field_text(r, *name);
            let counter = m.own_counter_track(process, track, name);
            let v = match m
                .positions
                .get(*value)
                .and_then(|&p| r.vals.get(p as usize))
            {
                Some(Val::F(v)) => *v,
                Some(Val::I(v)) => *v as f64,
                Some(Val::U(v)) => *v as f64,
                _ => f64::NAN,
            };
            m.trace.counters.push(counter, ts, v);
        }
    }
}

/// Ends the slices begun and never ended (a cut trace) at `end`, counted as unmatched.
pub(in crate::ctf::mapping) fn finish(m: &mut Mapper, end: i64) {
    let mut own: Vec<u32> = std::mem::take(&mut m.own_replaced);
    own.extend(m.own_rows.iter().copied().filter(|&r| r != NO_ROW));
    own.extend(m.own_open.values().copied());
    for row in own {
        m.trace.repairs.unmatched_begins += 1;
        let s = &mut m.trace.slices;
        let i = row as usize;
        s.dur[i] = end.saturating_sub(s.ts[i]).max(0);
    }
}

/// A text field of opscope's own events: a string, or an enumeration whose labels are
/// the texts (`ctf::export` writes names, categories and kinds so).
#[derive(Clone, Debug)]
pub(in crate::ctf::mapping) struct OwnText {
    field: usize,
    labels: Option<Rc<LabelTable>>,
}

/// Which label of an enumeration a value has: the entry of each value from 0 (as
/// `ctf::export` numbers them) in a vector, other entries searched in declaration
/// order. Shared by the mapper's [`LabelTable`] and opscope's own reader, which number
/// labels on its decoding thread.
#[derive(Debug)]
pub(in crate::ctf::mapping) struct LabelIndex {
    pub(in crate::ctf::mapping) labels: std::sync::Arc<EnumTy>,
    /// Per value from 0: its entry, or [`NO_ENTRY`].
    dense: Vec<u32>,
    /// Any other entries (their indexes), in declaration order.
    ranges: Vec<u32>,
}

/// No entry: a value of `LabelIndex::dense` that has no label.
const NO_ENTRY: u32 = u32::MAX;

impl LabelIndex {
    pub(in crate::ctf::mapping) fn new(labels: std::sync::Arc<EnumTy>) -> LabelIndex {
        let mut dense: Vec<u32> = Vec::new();
        let mut ranges = Vec::new();
        // Values beyond this are not dense: a corrupt value cannot make a huge table.
        let dense_limit = 4 * labels.entries.len() as i128 + 16;
        for (n, (_, lo, hi)) in labels.entries.iter().enumerate() {
            if lo == hi && (0..dense_limit).contains(lo) {
                let v = *lo as usize;
                if dense.len() <= v {
                    dense.resize(v + 1, NO_ENTRY);
                }
                // The first label of a value is the one shown, as for other enums.
                if dense[v] == NO_ENTRY {
                    dense[v] = n as u32;
                }
            } else {
                ranges.push(n as u32);
            }
        }
        LabelIndex {
            labels,
            dense,
            ranges,
        }
    }

    /// How many values from 0 have a place in the dense vector.
    pub(in crate::ctf::mapping) fn dense_len(&self) -> usize {
        self.dense.len()
    }

    /// The entry of value `v`, if it has a label.
    #[inline]
    pub(in crate::ctf::mapping) fn entry(&self, v: i128) -> Option<usize> {
        if let Some(&entry) = usize::try_from(v).ok().and_then(|v| self.dense.get(v)) {
            if entry != NO_ENTRY {
                return Some(entry as usize);
            }
        }
        let e = &self.labels.entries;
        self.ranges
            .iter()
            .map(|&n| n as usize)
            .find(|&n| e[n].1 <= v && v <= e[n].2)
    }

    /// The label of entry `n`.
    pub(in crate::ctf::mapping) fn label(&self, n: usize) -> &str {
        &self.labels.entries[n].0
    }
}

/// An enumeration's labels, by value, each interned at its first use (so that the
/// model holds the texts the events use, in the order they use them): built once per
/// enumeration, so that an event's text is one load, with nothing to scan or hash.
#[derive(Debug)]
pub(in crate::ctf::mapping) struct LabelTable {
    index: LabelIndex,
    /// Per value of the dense vector: its text, once used.
    ids: Vec<Cell<Option<StrId>>>,
}

impl LabelTable {
    fn new(labels: std::sync::Arc<EnumTy>) -> LabelTable {
        let index = LabelIndex::new(labels);
        LabelTable {
            ids: vec![Cell::new(None); index.dense_len()],
            index,
        }
    }

    /// The text of value `v`, if it has a label.
    fn get(&self, trace: &mut Trace, v: i128) -> Option<StrId> {
        let cached = usize::try_from(v).ok().and_then(|v| self.ids.get(v));
        if let Some(id) = cached.and_then(Cell::get) {
            return Some(id);
        }
        let text = trace.intern(self.index.label(self.index.entry(v)?));
        // Values past the dense vector (rare: ranges, corrupt values) are not cached.
        if let Some(cell) = cached {
            cell.set(Some(text));
        }
        Some(text)
    }
}

/// No row: an id of `own_rows` that is not open.
const NO_ROW: u32 = u32::MAX;

impl Mapper<'_> {
    /// The keys and types of the `count` args of opscope's typed class `e`, from the
    /// trace's environment (`opscope_args_ID`).
    pub(in crate::ctf::mapping) fn typed_keys(
        &mut self,
        layout: &Layout,
        e: &EventLayout,
        count: usize,
    ) -> Option<Box<[(StrId, ArgTag)]>> {
        let schema = layout.meta.env_str(&format!("opscope_args_{}", e.id))?;
        let Ok(serde_json::Value::Array(list)) = serde_json::from_str(schema) else {
            return None;
        };
        let keys = list
            .iter()
            .map(|pair| {
                let key = pair.get(0)?.as_str()?;
                let code = pair.get(1)?.as_str()?;
                let tag = ArgTag::ALL.into_iter().find(|t| t.code() == code)?;
                Some((self.trace.intern(key), tag))
            })
            .collect::<Option<Box<[_]>>>()?;
        (keys.len() == count).then_some(keys)
    }

    /// A field holding the args as a JSON object (`ctf::export` writes them so).
    fn field_json_args(&mut self, r: &Event, i: usize) -> Vec<(StrId, ArgValue)> {
        let text = self.field_text(r, i);
        self.json_args(text)
    }

    /// Args held as the text of a JSON object.
    pub(in crate::ctf::mapping) fn json_args(&mut self, text: StrId) -> Vec<(StrId, ArgValue)> {
        let Ok(serde_json::Value::Object(map)) =
            serde_json::from_str::<serde_json::Value>(self.trace.str(text))
        else {
            return Vec::new();
        };
        map.into_iter()
            .map(|(k, v)| {
                let value = match v {
                    serde_json::Value::Null => ArgValue::Null,
                    serde_json::Value::Bool(b) => ArgValue::Bool(b),
                    serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                        (Some(i), _, _) => ArgValue::Int(i),
                        (_, Some(u), _) => ArgValue::UInt(u),
                        (_, _, Some(f)) => ArgValue::Float(f),
                        _ => ArgValue::Null,
                    },
                    serde_json::Value::String(s) => ArgValue::Str(self.trace.intern(&s)),
                    other => ArgValue::Json(self.trace.intern(&other.to_string())),
                };
                (self.trace.intern(&k), value)
            })
            .collect()
    }

    /// Field `i`'s text, as the previous event of its class in `slot` had it when its
    /// bytes are the same: the category and kind of one class rarely change, nor the
    /// name over runs of events, and comparing bytes is cheaper than checking and
    /// hashing them.
    fn memo_text(&mut self, r: &Event, slot: usize, i: usize) -> StrId {
        let at = r.event * 3 + slot;
        let Some(&Val::Str { start, len }) =
            self.positions.get(i).and_then(|&p| r.vals.get(p as usize))
        else {
            return self.field_text(r, i);
        };
        let bytes = r.text(start, len);
        if let Some(&prev) = self.memo.get(at) {
            if prev != StrId::EMPTY && self.trace.str(prev).as_bytes() == bytes {
                return prev;
            }
        }
        let id = self.field_text(r, i);
        if self.memo.len() <= at {
            self.memo.resize(at + 1, StrId::EMPTY);
        }
        self.memo[at] = id;
        id
    }

    /// The label table of an enumeration, built at its first use.
    fn label_table(&mut self, e: &std::sync::Arc<EnumTy>) -> Rc<LabelTable> {
        let key = std::sync::Arc::as_ptr(e);
        if let Some(t) = self.label_tables.get(&key) {
            return Rc::clone(t);
        }
        let table = Rc::new(LabelTable::new(std::sync::Arc::clone(e)));
        self.label_tables.insert(key, Rc::clone(&table));
        table
    }

    /// The text of one of opscope's own text fields (`slot`: its place among the
    /// event class's three, for [`Mapper::memo_text`]).
    fn own_text(&mut self, r: &Event, slot: usize, f: &OwnText) -> StrId {
        let Some(labels) = &f.labels else {
            return self.memo_text(r, slot, f.field);
        };
        let v = match self
            .positions
            .get(f.field)
            .and_then(|&p| r.vals.get(p as usize))
        {
            Some(Val::U(v)) => *v as i128,
            Some(Val::I(v)) => *v as i128,
            _ => return StrId::EMPTY,
        };
        match labels.get(self.trace, v) {
            Some(id) => id,
            // A value with no label (not ours): its number.
            None => self.trace.intern(&v.to_string()),
        }
    }

    /// One of opscope's own slices begins: its row is added now, in the order of
    /// begins, which is the model's order (by track, time, then longest first), so
    /// that finishing the trace finds each track sorted; its end sets its duration.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::ctf::mapping) fn begin_own(
        &mut self,
        id: u64,
        track: TrackId,
        ts: i64,
        name: StrId,
        category: StrId,
        kind: SliceKind,
        args: ArgsId,
    ) {
        let row = self.trace.slices.push(SliceRow {
            track,
            ts,
            dur: 0,
            name,
            category,
            kind,
            args,
        });
        self.open_own(id, row);
    }

    /// Slice `row` ends at `ts` (on `track`, where its end is).
    pub(in crate::ctf::mapping) fn end_own(&mut self, row: u32, track: TrackId, ts: i64) {
        let s = &mut self.trace.slices;
        let i = row as usize;
        s.dur[i] = ts.saturating_sub(s.ts[i]);
        s.track[i] = track.0;
    }

    /// Notes that slice `row` is open under the writer's `id`.
    fn open_own(&mut self, id: u64, row: u32) {
        // Ids are slice indexes: a vector holds them, but for ids far beyond the
        // events seen (a corrupt or foreign file), which must not grow it.
        let dense_limit = 2 * self.trace.slices.len() as u64 + 4096;
        if id < dense_limit {
            let i = id as usize;
            if self.own_rows.len() <= i {
                self.own_rows.resize(i + 1, NO_ROW);
            }
            if self.own_rows[i] != NO_ROW {
                // Begun twice: the first is replaced, as a map would have it.
                self.own_replaced.push(self.own_rows[i]);
            }
            self.own_rows[i] = row;
        } else if let Some(old) = self.own_open.insert(id, row) {
            self.own_replaced.push(old);
        }
    }

    /// The row of the open slice of the writer's `id`, no longer open.
    pub(in crate::ctf::mapping) fn take_own(&mut self, id: u64) -> Option<u32> {
        match self.own_rows.get_mut(id as usize) {
            Some(row) if *row != NO_ROW => Some(std::mem::replace(row, NO_ROW)),
            _ => self.own_open.remove(&id),
        }
    }

    /// The kind a kind's name says, remembering the last.
    pub(in crate::ctf::mapping) fn memo_kind(&mut self, name: StrId) -> SliceKind {
        if let Some((n, k)) = self.last_kind {
            if n == name {
                return k;
            }
        }
        let text = self.trace.str(name);
        let kind = SliceKind::ALL
            .into_iter()
            .find(|k| k.name() == text)
            .unwrap_or(SliceKind::Other);
        self.last_kind = Some((name, kind));
        kind
    }

    /// The args of a typed class (`ctf::export`): payload field `field` is a struct
    /// whose fields hold `keys`' values, each of its type.
    fn typed_args(
        &mut self,
        r: &Event,
        field: usize,
        keys: &[(StrId, ArgTag)],
        labels: &[Option<Rc<LabelTable>>],
    ) -> ArgsId {
        let Some(&at) = self.positions.get(field) else {
            return ArgsId::NONE;
        };
        let mut entries = std::mem::take(&mut self.scratch);
        entries.clear();
        // The struct's own value, then one per field.
        let vals = r.vals.get(at as usize + 1..).unwrap_or(&[]);
        let mut memo = std::mem::take(&mut self.arg_memo);
        if memo.len() <= r.event {
            memo.resize_with(r.event + 1, Vec::new);
        }
        let memo_of_class = &mut memo[r.event];
        if memo_of_class.len() < keys.len() {
            memo_of_class.resize(keys.len(), StrId::EMPTY);
        }
        for (k, (&(key, tag), &v)) in keys.iter().zip(vals).enumerate() {
            // A string arg often repeats the previous event's of its class (an op's
            // input types and shapes): equal bytes are that string, as for names.
            let mut text = |m: &mut Self, v: Val| match v {
                Val::Str { start, len } => {
                    let prev = memo_of_class[k];
                    if prev != StrId::EMPTY && m.trace.str(prev).as_bytes() == r.text(start, len) {
                        return prev;
                    }
                    let id = m.text(r, v);
                    memo_of_class[k] = id;
                    id
                }
                _ => StrId::EMPTY,
            };
            // Written as an enumeration: its label.
            if let (Some(Some(table)), ArgTag::Str | ArgTag::Json, Val::U(x)) =
                (labels.get(k), tag, v)
            {
                let text = match table.get(self.trace, x as i128) {
                    Some(id) => id,
                    None => self.trace.intern(&x.to_string()),
                };
                let value = if tag == ArgTag::Str {
                    ArgValue::Str(text)
                } else {
                    ArgValue::Json(text)
                };
                entries.push((key, value));
                continue;
            }
            let value = match (tag, v) {
                (ArgTag::Int, Val::I(x)) => ArgValue::Int(x),
                (ArgTag::Int, Val::U(x)) => ArgValue::Int(x as i64),
                (ArgTag::UInt, Val::U(x)) => ArgValue::UInt(x),
                (ArgTag::UInt, Val::I(x)) => ArgValue::UInt(x as u64),
                (ArgTag::Float, Val::F(x)) => ArgValue::Float(x),
                (ArgTag::Bool, Val::U(x)) => ArgValue::Bool(x != 0),
                (ArgTag::Str, v @ Val::Str { .. }) => ArgValue::Str(text(self, v)),
                (ArgTag::Json, v @ Val::Str { .. }) => ArgValue::Json(text(self, v)),
                _ => ArgValue::Null,
            };
            entries.push((key, value));
        }
        self.arg_memo = memo;
        let args = self.trace.args.push_bag(&entries);
        self.scratch = entries;
        args
    }

    /// The counter track `name` of opscope's own counter events of `process` (written
    /// on `track`).
    pub(in crate::ctf::mapping) fn own_counter_track(
        &mut self,
        process: ProcessId,
        track: TrackId,
        name: StrId,
    ) -> TrackId {
        if let Some(&t) = self.counters.get(&(process, name)) {
            return t;
        }
        let t = self
            .trace
            .named_track(Some(process), TrackKind::Counter, name, 0);
        // A thread's counter (its CPU) is written with the thread's tid, a process's
        // with -1.
        let thread = self.trace.tracks[track.index()]
            .thread
            .filter(|th| self.trace.threads[th.index()].tid != -1);
        self.trace.tracks[t.index()].thread = thread;
        self.counters.insert((process, name), t);
        t
    }
}
