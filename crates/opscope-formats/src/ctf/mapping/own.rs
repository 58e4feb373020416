//! opscope's own CTF (what `ctf::export` writes), read on a path of its own. Its
//! event classes are few and fixed: byte-aligned little-endian fields, texts as
//! enumerations, one header and context for every event. So a decoding thread reads
//! each field at its place and hands the mapper values ready to store, where the
//! general reader interprets the layout and the mapper looks each field up again. Any
//! layout that is not exactly this takes the general path, which maps the same events
//! to the same model (a test checks both on real traces).

use std::rc::Rc;

use hashbrown::HashMap;

use opscope_model::args::ArgValue;
use opscope_model::events::InstantRow;
use opscope_model::{ArgsId, InstantScope, SliceKind, StrId, Trace};

use super::{split_name, LabelTable, Mapper};
use crate::ctf::decode::{DecodeError, IntNode, Layout, Node, PacketEvents, StreamReader};
use crate::ctf::export::ArgTag;
use crate::ctf::pipeline::{pipelined, HandOver, StreamCounts};
use crate::ctf::types::ClockOrigin;
use crate::error::ImportError;

/// Events per batch handed to the mapper, as in the general pipeline.
const BATCH_EVENTS: usize = 2048;

/// What an event class of opscope's is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Begin,
    End,
    Instant,
    Counter,
}

/// How one payload field is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    U64,
    I64,
    U8,
    F64,
    /// A `uint32_t` enumeration: its value, for the label table.
    Label,
    /// A NUL-terminated string.
    Str,
}

impl Field {
    fn of(node: &Node) -> Option<Field> {
        match node {
            Node::Int(IntNode { op, labels, .. }) => {
                if !op.le || op.align != 8 || op.clock {
                    return None;
                }
                match (op.bits, op.signed, labels.is_some()) {
                    (64, false, false) => Some(Field::U64),
                    (64, true, false) => Some(Field::I64),
                    (8, false, false) => Some(Field::U8),
                    (32, false, true) => Some(Field::Label),
                    _ => None,
                }
            }
            Node::Float {
                bits: 64,
                align: 8,
                le: true,
            } => Some(Field::F64),
            Node::Str => Some(Field::Str),
            _ => None,
        }
    }
}

/// An event class as the decoding thread reads it: its payload's fields in order (the
/// args struct's fields in its place).
#[derive(Clone, Debug)]
struct Shape {
    role: Role,
    fields: Box<[Field]>,
}

/// An event class as the mapper stores it.
struct Class {
    role: Role,
    /// Per payload field (as in [`Shape::fields`]): its enumeration's label table.
    labels: Box<[Option<Rc<LabelTable>>]>,
    /// Typed args: the keys and types of the fields after the role's own; `None`: the
    /// args are one JSON text field.
    typed: Option<Box<[(StrId, ArgTag)]>>,
    /// Where the args start among the payload fields.
    first_arg: usize,
}

/// One decoded value.
#[derive(Clone, Copy, Debug)]
enum Value {
    U(u64),
    I(i64),
    F(f64),
    Label(u32),
    /// A text seen before, by its number (see [`SeenTexts`]).
    Seen(u32),
    /// A text not seen before, which gets the next number: `len` bytes at `start` in
    /// the event's stream file.
    Str {
        start: u64,
        len: u32,
    },
}

/// One decoded event; its payload is `values[values..]` up to the next event's.
#[derive(Clone, Copy, Debug)]
struct Decoded {
    ts: i64,
    pid: i64,
    tid: i64,
    stream: u32,
    class: u32,
    values: u32,
}

#[derive(Default)]
struct Batch {
    events: Vec<Decoded>,
    values: Vec<Value>,
}

/// The shapes of a layout's classes when the layout is exactly what `ctf::export`
/// writes; `None` otherwise.
fn shapes(layout: &Layout) -> Option<Vec<Shape>> {
    if layout.meta.env_str("tracer_name") != Some("opscope") {
        return None;
    }
    for s in &layout.streams {
        let header = struct_fields(s.event_header.as_ref()?)?;
        let context = struct_fields(s.event_context.as_ref()?)?;
        let int = |n: &Node, bits: u32, signed: bool, clock: bool| {
            matches!(n, Node::Int(IntNode { op, labels: None, .. })
                if op.bits == bits && op.signed == signed && op.le && op.align == 8 && op.clock == clock)
        };
        let header_ok = matches!(header.as_slice(), [("id", id), ("timestamp", ts)]
            if int(id, 32, false, false) && int(ts, 64, false, true));
        let context_ok = matches!(context.as_slice(), [("vpid", p), ("vtid", t)]
            if int(p, 64, true, false) && int(t, 64, true, false));
        if !header_ok || !context_ok {
            return None;
        }
    }
    layout
        .events
        .iter()
        .map(|e| {
            if e.context.is_some() {
                return None;
            }
            let (provider, event) = split_name(&e.name);
            if provider != Some("opscope") {
                return None;
            }
            let fields = struct_fields(e.fields.as_ref()?)?;
            let names: Vec<&str> = fields.iter().map(|(n, _)| *n).collect();
            let role = match (event, names.as_slice()) {
                ("slice_begin", ["id", "name", "category", "kind", "args"]) => Role::Begin,
                ("slice_end", ["id", "name"]) => Role::End,
                ("instant", ["name", "category", "kind", "args"]) => Role::Instant,
                ("counter", ["name", "value"]) => Role::Counter,
                _ => return None,
            };
            let mut out = Vec::new();
            for (name, node) in fields {
                match node {
                    Node::Struct { align, .. } if name == "args" && *align <= 8 => {
                        for (_, f) in struct_fields(node)? {
                            out.push(Field::of(f)?);
                        }
                    }
                    _ => out.push(Field::of(node)?),
                }
            }
            let text = |f: Field| matches!(f, Field::Str | Field::Label);
            let fits = match role {
                Role::Begin => out[0] == Field::U64 && out[1..4].iter().all(|&f| text(f)),
                Role::End => out[0] == Field::U64 && text(out[1]),
                Role::Instant => out[..3].iter().all(|&f| text(f)),
                Role::Counter => out == [Field::Str, Field::F64],
            };
            fits.then(|| Shape {
                role,
                fields: out.into(),
            })
        })
        .collect()
}

/// A struct's fields, with their names.
fn struct_fields(node: &Node) -> Option<Vec<(&str, &Node)>> {
    match node {
        Node::Struct {
            align,
            names,
            fields,
        } if *align <= 8 => Some(
            names
                .iter()
                .map(String::as_str)
                .zip(fields.iter())
                .collect(),
        ),
        _ => None,
    }
}

/// The `N` bytes at `at`, moving past them.
#[inline]
fn le<const N: usize>(data: &[u8], at: &mut u64) -> Option<[u8; N]> {
    let start = *at as usize;
    let bytes = data.get(start..start.checked_add(N)?)?.try_into().ok()?;
    *at += N as u64;
    Some(bytes)
}

/// The header and context of the next event of a stream.
#[derive(Clone, Copy, Debug)]
struct Head {
    class: usize,
    /// Clock value.
    clock: u64,
    pid: i64,
    tid: i64,
    /// Where its payload starts.
    payload: u64,
}

/// One stream file, read event by event.
struct OwnStream<'a> {
    reader: StreamReader<'a>,
    file: &'a [u8],
    /// The file up to the end of the current packet's events (empty before the first).
    data: &'a [u8],
    /// The current packet, and the next event's byte.
    packet: Option<PacketEvents>,
    at: u64,
    events: u64,
}

impl<'a> OwnStream<'a> {
    fn new(layout: &'a Layout, file: &'a [u8]) -> Self {
        OwnStream {
            reader: StreamReader::new(layout, file),
            file,
            data: &[],
            packet: None,
            at: 0,
            events: 0,
        }
    }

    fn fail(&self, at: u64, what: &str) -> DecodeError {
        DecodeError {
            offset: at,
            message: format!("event {} of the stream: {what} (at byte {at})", self.events),
        }
    }

    /// Reads the next event's header; `Ok(None)` at the end of the stream.
    fn next_head(&mut self) -> Result<Option<Head>, DecodeError> {
        while self.at >= self.data.len() as u64 {
            if let Some(p) = self.packet.take() {
                if p.end < p.content_end {
                    return Err(DecodeError {
                        offset: p.end,
                        message: format!(
                            "the packet at byte {} is cut off by the end of the file ({} of its {} content bytes are there)",
                            p.packet_start,
                            p.end - p.packet_start,
                            p.content_end - p.packet_start
                        ),
                    });
                }
            }
            match self.reader.next_packet()? {
                Some(p) if p.aligned => {
                    self.at = p.start;
                    self.data = &self.file[..p.end as usize];
                    self.packet = Some(p);
                }
                Some(p) => return Err(self.fail(p.start, "a packet not on byte boundaries")),
                None => return Ok(None),
            }
        }
        let (data, at) = (self.data, self.at);
        let Some(bytes) = data.get(at as usize..at as usize + 28) else {
            return Err(self.fail(at, "the event runs past the end of its packet"));
        };
        let word = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap_or_default());
        let id = u32::from_le_bytes(bytes[..4].try_into().unwrap_or_default());
        let stream = &self.reader.layout.streams[self.reader.stream];
        let Some(class) = stream.event_index(id as u64) else {
            return Err(self.fail(
                at,
                &format!("event id {id}, which stream {} does not declare", stream.id),
            ));
        };
        Ok(Some(Head {
            class,
            clock: word(4),
            pid: word(12) as i64,
            tid: word(20) as i64,
            payload: at + 28,
        }))
    }

    /// Decodes the payload of the event whose header was read into `out`, and moves
    /// past it. Texts already in `seen` are [`Value::Seen`].
    fn payload(
        &mut self,
        head: Head,
        shape: &Shape,
        seen: &mut SeenTexts<'a>,
        out: &mut Vec<Value>,
    ) -> Result<(), DecodeError> {
        let mut at = head.payload;
        let data = self.data;
        seen.added.clear();
        let result = (|| {
            for (i, &f) in shape.fields.iter().enumerate() {
                let v = match f {
                    Field::U64 => Value::U(u64::from_le_bytes(le(data, &mut at)?)),
                    Field::I64 => Value::I(i64::from_le_bytes(le(data, &mut at)?)),
                    Field::F64 => Value::F(f64::from_le_bytes(le(data, &mut at)?)),
                    Field::U8 => Value::U(u8::from_le_bytes(le(data, &mut at)?) as u64),
                    Field::Label => Value::Label(u32::from_le_bytes(le(data, &mut at)?)),
                    Field::Str => {
                        let rest = data.get(at as usize..)?;
                        let len = memchr::memchr(0, rest)?;
                        let v = seen.value(head.class, i, &rest[..len], at);
                        at += len as u64 + 1;
                        v
                    }
                };
                out.push(v);
            }
            Some(at)
        })();
        match result {
            Some(at) => {
                self.at = at;
                self.events += 1;
                Ok(())
            }
            None => {
                seen.forget_added(head.class);
                let start = self.at;
                Err(self.fail(start, "the event runs past the end of its packet"))
            }
        }
    }
}

/// Whether a layout is opscope's own, read by [`import`].
pub(super) fn applies(layout: &Layout) -> bool {
    shapes(layout).is_some()
}

/// Reads the streams of opscope's own CTF into the mapper (the layout must be one that
/// [`applies`] accepts): decoding on a second thread, in time order across streams
/// (ties in stream order), as the general pipeline. Returns what each stream held and
/// the first error.
pub(super) fn import(
    m: &mut Mapper,
    layout: &Layout,
    origin: Option<ClockOrigin>,
    streams: &[(String, &[u8])],
) -> (Vec<StreamCounts>, Option<ImportError>) {
    let Some(shapes) = shapes(layout) else {
        return (Vec::new(), None);
    };
    let classes: Vec<Class> = layout
        .events
        .iter()
        .zip(&shapes)
        .map(|(e, shape)| m.own_class(layout, e, shape))
        .collect();
    let shapes = &shapes;
    // Each text's id in the model, by the number the decoding thread gave it.
    let mut texts: Vec<StrId> = Vec::new();
    pipelined(
        |hand_over| decode(layout, shapes, streams, origin, hand_over),
        |batch: &mut Batch, spare| {
            for (n, e) in batch.events.iter().enumerate() {
                let end = batch
                    .events
                    .get(n + 1)
                    .map_or(batch.values.len(), |next| next.values as usize);
                let values = &mut batch.values[e.values as usize..end];
                let file = streams[e.stream as usize].1;
                // Each new text gets its number in the order the decoder gave them,
                // whichever fields the event's role reads.
                for v in values.iter_mut() {
                    if let Value::Str { .. } = v {
                        texts.push(intern_bytes(m.trace, text_of(file, *v)));
                        *v = Value::Seen(texts.len() as u32 - 1);
                    }
                }
                m.own_event(&classes[e.class as usize], &texts, e, values);
            }
            batch.events.clear();
            batch.values.clear();
            m.trace.spare_capacity(spare);
        },
    )
}

/// A field's last text and its number.
type LastText<'a> = (&'a [u8], u32);

/// The texts a decoding thread has seen, numbered in the order the mapper sees them
/// first: the mapper interns each text once and then looks its number up in a vector,
/// and the hashing is done on the decoding thread, which has time to spare.
struct SeenTexts<'a> {
    numbers: HashMap<&'a [u8], u32>,
    /// Per class and field: its last text and number. A field often repeats its last
    /// text (an op's input types over a run of ops), which comparing finds without
    /// hashing.
    last: Vec<Vec<Option<LastText<'a>>>>,
    /// Those added by the event being read, taken back if it turns out broken.
    added: Vec<&'a [u8]>,
}

impl<'a> SeenTexts<'a> {
    fn new(shapes: &[Shape]) -> Self {
        SeenTexts {
            numbers: HashMap::new(),
            last: shapes.iter().map(|s| vec![None; s.fields.len()]).collect(),
            added: Vec::new(),
        }
    }

    #[inline]
    fn value(&mut self, class: usize, field: usize, text: &'a [u8], start: u64) -> Value {
        let last = &mut self.last[class][field];
        if let Some((previous, n)) = *last {
            if previous == text {
                return Value::Seen(n);
            }
        }
        let next = self.numbers.len() as u32;
        let (n, v) = match self.numbers.entry(text) {
            hashbrown::hash_map::Entry::Occupied(o) => (*o.get(), Value::Seen(*o.get())),
            hashbrown::hash_map::Entry::Vacant(v) => {
                v.insert(next);
                self.added.push(text);
                let v = Value::Str {
                    start,
                    len: text.len() as u32,
                };
                (next, v)
            }
        };
        *last = Some((text, n));
        v
    }

    /// Takes back the texts of an event the mapper will not see.
    fn forget_added(&mut self, class: usize) {
        for text in self.added.drain(..) {
            self.numbers.remove(text);
        }
        self.last[class].fill(None);
    }
}

/// The decoding thread: reads the streams merged by time into batches, handing each
/// full one over.
fn decode(
    layout: &Layout,
    shapes: &[Shape],
    streams: &[(String, &[u8])],
    origin: Option<ClockOrigin>,
    hand_over: &mut HandOver<Batch>,
) -> (Vec<StreamCounts>, Option<ImportError>) {
    let readers: Vec<OwnStream> = streams
        .iter()
        .map(|(_, file)| OwnStream::new(layout, file))
        .collect();
    // The readers, the next event of each, the texts seen and the batch being filled.
    let mut state = (
        readers,
        vec![None::<Head>; streams.len()],
        SeenTexts::new(shapes),
        Batch::default(),
    );
    let first_error = crate::ctf::merge_by_time(
        &mut state,
        streams,
        |(readers, heads, ..), i| {
            heads[i] = readers[i].next_head()?;
            Ok(heads[i].map(|h| h.clock))
        },
        |(readers, heads, seen, batch), i| {
            let Some(head) = heads[i] else {
                return Ok(true);
            };
            let values = batch.values.len() as u32;
            if let Err(e) = readers[i].payload(head, &shapes[head.class], seen, &mut batch.values) {
                batch.values.truncate(values as usize);
                return Err(e);
            }
            batch.events.push(Decoded {
                ts: origin.map_or(head.clock as i64, |o| o.ns(head.clock)),
                pid: head.pid,
                tid: head.tid,
                stream: i as u32,
                class: head.class as u32,
                values,
            });
            Ok(batch.events.len() < BATCH_EVENTS || hand_over.send(batch))
        },
    );
    let (readers, _, _, mut batch) = state;
    if !batch.events.is_empty() {
        hand_over.send(&mut batch);
    }
    let counts = readers
        .iter()
        .map(|r| StreamCounts {
            events: r.events,
            events_discarded: r.reader.events_discarded,
        })
        .collect();
    (counts, first_error)
}

impl Mapper<'_> {
    /// How the mapper stores the events of class `e` (of shape `shape`).
    fn own_class(
        &mut self,
        layout: &Layout,
        e: &crate::ctf::decode::EventLayout,
        shape: &Shape,
    ) -> Class {
        let mut labels = Vec::with_capacity(shape.fields.len());
        let mut walk = |node: &Node, m: &mut Self| match node {
            Node::Int(IntNode {
                labels: Some(l), ..
            }) => labels.push(Some(m.label_table(l))),
            _ => labels.push(None),
        };
        let mut typed_args = false;
        if let Some(Node::Struct { names, fields, .. }) = &e.fields {
            for (name, node) in names.iter().zip(fields.iter()) {
                match node {
                    Node::Struct { fields: inner, .. } if name == "args" => {
                        typed_args = true;
                        for f in inner.iter() {
                            walk(f, self);
                        }
                    }
                    _ => walk(node, self),
                }
            }
        }
        let first_arg = match shape.role {
            Role::Begin => 4,
            Role::Instant => 3,
            Role::End | Role::Counter => shape.fields.len(),
        };
        let typed = typed_args
            .then(|| self.typed_keys(layout, e, shape.fields.len() - first_arg))
            .map(|keys| keys.unwrap_or_default());
        Class {
            role: shape.role,
            labels: labels.into(),
            typed,
            first_arg,
        }
    }

    /// The text of value `v` of payload field `field`; `texts` are the ids of the texts
    /// seen so far, by number (see [`SeenTexts`]).
    fn own_value_text(&mut self, class: &Class, texts: &[StrId], field: usize, v: Value) -> StrId {
        match v {
            // A value with no label (not ours): its number.
            Value::Label(x) => class
                .labels
                .get(field)
                .and_then(|l| l.as_deref())
                .and_then(|table| table.get(self.trace, x as i128))
                .unwrap_or_else(|| self.trace.intern(&x.to_string())),
            Value::Seen(n) => texts.get(n as usize).copied().unwrap_or(StrId::EMPTY),
            // Texts are numbered before the event is mapped; text fields hold nothing
            // else (`shapes` checks).
            _ => StrId::EMPTY,
        }
    }

    /// The args of an event of a class with args.
    fn own_args(&mut self, class: &Class, texts: &[StrId], values: &[Value]) -> ArgsId {
        let first = class.first_arg;
        let Some(keys) = &class.typed else {
            // One JSON text.
            let text = match values.get(first) {
                Some(&v) => self.own_value_text(class, texts, first, v),
                None => return ArgsId::NONE,
            };
            let entries = self.json_args(text);
            return self.trace.args.push_bag(&entries);
        };
        let mut entries = std::mem::take(&mut self.scratch);
        entries.clear();
        let args = values.get(first..).unwrap_or(&[]);
        for (k, (&(key, tag), &v)) in keys.iter().zip(args).enumerate() {
            let value = match (tag, v) {
                (ArgTag::Str, Value::Label(_) | Value::Str { .. } | Value::Seen(_)) => {
                    ArgValue::Str(self.own_value_text(class, texts, first + k, v))
                }
                (ArgTag::Json, Value::Label(_) | Value::Str { .. } | Value::Seen(_)) => {
                    ArgValue::Json(self.own_value_text(class, texts, first + k, v))
                }
                (ArgTag::Int, Value::I(x)) => ArgValue::Int(x),
                (ArgTag::Int, Value::U(x)) => ArgValue::Int(x as i64),
                (ArgTag::UInt, Value::U(x)) => ArgValue::UInt(x),
                (ArgTag::UInt, Value::I(x)) => ArgValue::UInt(x as u64),
                (ArgTag::Float, Value::F(x)) => ArgValue::Float(x),
                (ArgTag::Bool, Value::U(x)) => ArgValue::Bool(x != 0),
                _ => ArgValue::Null,
            };
            entries.push((key, value));
        }
        let args = self.trace.args.push_bag(&entries);
        self.scratch = entries;
        args
    }

    /// Stores one of opscope's own events.
    fn own_event(&mut self, class: &Class, texts: &[StrId], e: &Decoded, values: &[Value]) {
        self.last_ts = self.last_ts.max(e.ts);
        let (process, track) = self.lane(e.pid, e.tid, false);
        let text = |m: &mut Self, i: usize| match values.get(i) {
            Some(&v) => m.own_value_text(class, texts, i, v),
            None => StrId::EMPTY,
        };
        let id = match values.first() {
            Some(Value::U(x)) => *x,
            _ => 0,
        };
        match class.role {
            Role::Begin | Role::Instant => {
                let args = self.own_args(class, texts, values);
                let at = if class.role == Role::Begin { 1 } else { 0 };
                let name = text(self, at);
                let category = text(self, at + 1);
                let kind_text = text(self, at + 2);
                let kind = self.memo_kind(kind_text);
                if class.role == Role::Begin {
                    self.begin_own(id, track, e.ts, name, category, kind, args);
                } else {
                    self.trace.instants.push(InstantRow {
                        track,
                        ts: e.ts,
                        name,
                        category,
                        kind,
                        scope: InstantScope::Thread,
                        args,
                    });
                }
            }
            Role::End => match self.take_own(id) {
                Some(row) => self.end_own(row, track, e.ts),
                None => {
                    // Kept as an instant of the event, as the general path keeps it.
                    self.trace.repairs.unmatched_ends += 1;
                    let name_text = text(self, 1);
                    let entries = [
                        (
                            self.trace.intern("id"),
                            match i64::try_from(id) {
                                Ok(x) => ArgValue::Int(x),
                                Err(_) => ArgValue::UInt(id),
                            },
                        ),
                        (self.trace.intern("name"), ArgValue::Str(name_text)),
                    ];
                    let args = self.trace.args.push_bag(&entries);
                    let name = self.trace.intern("slice_end");
                    let category = self.trace.intern("opscope");
                    self.trace.instants.push(InstantRow {
                        track,
                        ts: e.ts,
                        name,
                        category,
                        kind: SliceKind::Other,
                        scope: InstantScope::Thread,
                        args,
                    });
                }
            },
            Role::Counter => {
                let name = text(self, 0);
                let value = match values.get(1) {
                    Some(Value::F(v)) => *v,
                    _ => f64::NAN,
                };
                let counter = self.own_counter_track(process, track, name);
                self.trace.counters.push(counter, e.ts, value);
            }
        }
    }
}

/// Text as the model keeps it (invalid UTF-8 replaced).
fn intern_bytes(trace: &mut Trace, bytes: &[u8]) -> StrId {
    match std::str::from_utf8(bytes) {
        Ok(s) => trace.intern(s),
        Err(_) => trace.intern(&String::from_utf8_lossy(bytes)),
    }
}

/// The bytes of a text value.
fn text_of(file: &[u8], v: Value) -> &[u8] {
    match v {
        Value::Str { start, len } => file
            .get(start as usize..start as usize + len as usize)
            .unwrap_or(&[]),
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use opscope_model::Trace;

    use super::super::Path as Reader;
    use crate::roundtrip_tests::{args_text, assert_same_events};

    /// A trace written by `ctf::export` (with at most `typed` classes of typed args):
    /// its metadata and stream files, by name.
    fn exported(trace: &Trace, typed: usize) -> BTreeMap<String, Vec<u8>> {
        let mut files = BTreeMap::new();
        crate::ctf::export::export_with(trace, typed, &mut |name, bytes| {
            files.insert(name.to_string(), bytes.to_vec());
            Ok(())
        })
        .unwrap();
        files
    }

    fn read(files: &BTreeMap<String, Vec<u8>>, reader: Reader) -> (Trace, Option<String>) {
        let streams: Vec<(String, &[u8])> = files
            .iter()
            .filter(|(name, _)| *name != "metadata")
            .map(|(name, bytes)| (name.clone(), &bytes[..]))
            .collect();
        let mut trace = Trace::new();
        let result = crate::ctf::import_via(
            "ours",
            &files["metadata"],
            "metadata",
            &streams,
            &mut trace,
            reader,
        );
        (trace, result.err().map(|e| e.to_string()))
    }

    /// What the events do not say: names of processes and threads, repairs, the
    /// source's metadata.
    fn the_rest(t: &Trace) -> Vec<String> {
        let mut lines: Vec<String> = t
            .threads
            .iter()
            .map(|th| {
                let p = &t.processes[th.process.index()];
                format!(
                    "thread {} {:?} of {} {:?}",
                    th.tid,
                    th.name.map(|n| t.str(n)),
                    p.pid,
                    p.name.map(|n| t.str(n))
                )
            })
            .collect();
        lines.sort();
        lines.push(format!("{:?}", t.repairs));
        for s in &t.sources {
            lines.push(args_text(t, s.metadata));
        }
        lines
    }

    /// The fast reader and the general one make the same model of `files`.
    fn assert_both_readers_agree(what: &str, files: &BTreeMap<String, Vec<u8>>) {
        let layout = crate::ctf::layout(&files["metadata"], "metadata").unwrap();
        assert!(super::applies(&layout), "{what}: not read on the fast path");
        let (fast, fast_error) = read(files, Reader::Fast);
        let (general, general_error) = read(files, Reader::General);
        assert_eq!(
            fast_error.is_some(),
            general_error.is_some(),
            "{what}: {fast_error:?} / {general_error:?}"
        );
        assert_same_events(Path::new(what), "the fast reader", &general, &fast);
        assert_eq!(the_rest(&general), the_rest(&fast), "{what}");
    }

    fn import_shared(relative: &str) -> Option<Trace> {
        let path = crate::shared_data::shared()?.join("traces").join(relative);
        let mut trace = Trace::new();
        if path.is_dir() {
            let (metadata, streams) = crate::ctf::tests::read_trace(&path);
            let streams: Vec<(String, &[u8])> =
                streams.iter().map(|(n, b)| (n.clone(), &b[..])).collect();
            crate::ctf::import(relative, &metadata, "metadata", &streams, &mut trace).unwrap();
            return Some(trace);
        }
        let raw = std::fs::read(&path).unwrap();
        let shown = path.display().to_string();
        let bytes = crate::input::decompress_if_gzip(&raw, &shown).unwrap();
        crate::import_bytes(&bytes, &shown, &mut trace).unwrap();
        trace.finish();
        Some(trace)
    }

    /// Real traces of every kind opscope writes as CTF: Kineto (typed args, texts as
    /// enumerations), LTTng user-space (allocations as instants, a bytes-in-use
    /// counter, CPU counters) and kernel (running slices on CPU lanes).
    const REAL: [&str; 6] = [
        "kineto/hta/mtia_trace_single_rank/mtia_rank_0.json.gz",
        "kineto/hta/nccl_parser_config/nccl_data.json.gz",
        "kineto/kineto-tb_plugin/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
        "ctf/generated-here/lttng-ust-libc-python/ust/uid/0/64-bit",
        "ctf/tracecompass/cyg-profile/glxgears-cyg-profile",
        "ctf/babeltrace/ctf-traces/succeed/lttng-tracefile-rotation/kernel",
    ];

    #[test]
    fn both_readers_agree_on_real_traces() {
        for relative in REAL {
            let Some(trace) = import_shared(relative) else {
                return;
            };
            let events = trace.slices.len() + trace.instants.len() + trace.counters.len();
            assert!(events > 1500, "{relative}: {events} events");
            // Typed args, and (past no typed class) args as JSON text.
            for typed in [crate::ctf::export::MAX_TYPED_CLASSES, 0] {
                let files = exported(&trace, typed);
                assert_both_readers_agree(&format!("{relative} (typed {typed})"), &files);
            }
        }
    }

    /// Cut and damaged files: both readers keep the same events before the damage and
    /// fail naming the stream file.
    #[test]
    fn both_readers_agree_on_cut_and_damaged_files() {
        let Some(trace) = import_shared(REAL[0]) else {
            return;
        };
        let files = exported(&trace, crate::ctf::export::MAX_TYPED_CLASSES);
        let (largest, bytes) = files
            .iter()
            .filter(|(name, _)| *name != "metadata")
            .max_by_key(|(_, b)| b.len())
            .map(|(n, b)| (n.clone(), b.clone()))
            .unwrap();
        let mut damaged = Vec::new();
        for cut in [bytes.len() / 2, bytes.len() * 3 / 4 + 5, 100] {
            damaged.push((format!("cut at byte {cut}"), bytes[..cut].to_vec()));
        }
        // An event id no class has, and a string left without its end, each in the
        // middle of the file (the first event of a packet: after its 84-byte header).
        let packet = 4096 * 40;
        let middle = (bytes.len() / 2 / packet) * packet;
        if let Some(at) =
            (middle..bytes.len()).find(|&i| bytes[i..].starts_with(&0xC1FC_1FC1u32.to_le_bytes()))
        {
            let mut bad_id = bytes.clone();
            bad_id[at + 84..at + 88].copy_from_slice(&9999u32.to_le_bytes());
            damaged.push(("an undeclared event id".into(), bad_id));
        }
        for (what, damaged_bytes) in damaged {
            let mut files = files.clone();
            files.insert(largest.clone(), damaged_bytes);
            let (fast, fast_error) = read(&files, Reader::Fast);
            let (general, general_error) = read(&files, Reader::General);
            let error = fast_error.unwrap_or_else(|| panic!("{what}: no error"));
            assert!(
                general_error.is_some(),
                "{what}: the general reader saw no error"
            );
            assert!(error.contains(&largest), "{what}: {error}");
            assert_same_events(Path::new(&what), "the fast reader", &general, &fast);
            assert_eq!(the_rest(&general), the_rest(&fast), "{what}");
            assert!(
                !fast.slices.is_empty() || what.contains("100"),
                "{what}: nothing kept"
            );
        }
    }
}
