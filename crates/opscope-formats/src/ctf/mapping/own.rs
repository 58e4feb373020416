//! opscope's own CTF (what `ctf::export` writes), read on a path of its own. Its
//! event classes are few and fixed: byte-aligned little-endian fields, texts as
//! enumerations, one header and context for every event. So a decoding thread reads
//! each field at its place and hands the mapper values ready to store, where the
//! general reader interprets the layout and the mapper looks each field up again. Any
//! layout that is not exactly this takes the general path, which maps the same events
//! to the same model (a test checks both on real traces).
//!
//! The mapper is the slower of the two threads, so the decoding thread does whatever
//! needs no model: it numbers each distinct text (labels included) and each lane
//! (pid, tid), and the mapper turns a number into the model's id with one load.

use std::sync::Arc;

use hashbrown::HashMap;

use opscope_model::args::ArgValue;
use opscope_model::events::InstantRow;
use opscope_model::{ArgsId, InstantScope, ProcessId, SliceKind, StrId, Trace, TrackId};

use super::rules::opscope::LabelIndex;
use super::{split_name, Mapper};
use crate::ctf::decode::{DecodeError, IntNode, Layout, Node, PacketEvents, StreamReader};
use crate::ctf::export::ArgTag;
use crate::ctf::pipeline::{pipelined, HandOver, StreamCounts};
use crate::ctf::types::{ClockOrigin, EnumTy};
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
    /// A `uint32_t` enumeration, whose label is the text.
    Label,
    /// A NUL-terminated string.
    Str,
}

impl Field {
    /// The fewest bytes the field takes.
    fn min_bytes(self) -> usize {
        match self {
            Field::U64 | Field::I64 | Field::F64 => 8,
            Field::Label => 4,
            Field::U8 => 1,
            // Its terminating NUL.
            Field::Str => 1,
        }
    }

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
    /// Per field: the enumeration of a [`Field::Label`].
    enums: Box<[Option<Arc<EnumTy>>]>,
}

/// An event class as the mapper stores it.
struct Class {
    role: Role,
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
    /// A text, by its number (see [`Texts`]).
    Text(u32),
    /// An enumeration's value without a label (not ours): its number is its text.
    Unlabelled(u32),
}

/// One decoded event; its payload is `values[values..]` up to the next event's.
#[derive(Clone, Copy, Debug)]
struct Decoded {
    ts: i64,
    /// Its (pid, tid), by number (see [`Lanes`]).
    lane: u32,
    class: u32,
    values: u32,
}

#[derive(Default)]
struct Batch<'a> {
    events: Vec<Decoded>,
    values: Vec<Value>,
    /// The texts first numbered in this batch, in number order.
    new_texts: Vec<&'a [u8]>,
    /// The (pid, tid) of the lanes first numbered in this batch, in number order.
    new_lanes: Vec<(i64, i64)>,
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
            let mut enums = Vec::new();
            let mut field = |node: &Node| {
                enums.push(match node {
                    Node::Int(IntNode { labels, .. }) => labels.clone(),
                    _ => None,
                });
                Field::of(node)
            };
            for (name, node) in fields {
                match node {
                    Node::Struct { align, .. } if name == "args" && *align <= 8 => {
                        for (_, f) in struct_fields(node)? {
                            out.push(field(f)?);
                        }
                    }
                    _ => out.push(field(node)?),
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
                enums: enums.into(),
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

/// An event's header (`id`, `timestamp`) and context (`vpid`, `vtid`): 4 + 8 + 8 + 8.
const HEADER_BYTES: usize = 28;

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
        let Some(bytes) = data.get(at as usize..at as usize + HEADER_BYTES) else {
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
            payload: at + HEADER_BYTES as u64,
        }))
    }

    /// Decodes the payload of the event whose header was read into `out` (class `head.class`
    /// of shape `shape`), and moves past it; its texts are numbered by `texts`, those
    /// numbered first added to `new`.
    fn payload(
        &mut self,
        head: Head,
        shape: &'a Shape,
        texts: &mut Texts<'a>,
        out: &mut Vec<Value>,
        new: &mut Vec<&'a [u8]>,
    ) -> Result<(), DecodeError> {
        let mut at = head.payload;
        let data = self.data;
        texts.begin_event();
        let result = (|| {
            for (i, &f) in shape.fields.iter().enumerate() {
                let v = match f {
                    Field::U64 => Value::U(u64::from_le_bytes(le(data, &mut at)?)),
                    Field::I64 => Value::I(i64::from_le_bytes(le(data, &mut at)?)),
                    Field::F64 => Value::F(f64::from_le_bytes(le(data, &mut at)?)),
                    Field::U8 => Value::U(u8::from_le_bytes(le(data, &mut at)?) as u64),
                    Field::Label => {
                        let v = u32::from_le_bytes(le(data, &mut at)?);
                        texts.label(head.class, i, v, new)
                    }
                    Field::Str => {
                        let rest = data.get(at as usize..)?;
                        let len = memchr::memchr(0, rest)?;
                        at += len as u64 + 1;
                        texts.string(head.class, i, &rest[..len], new)
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
                texts.forget_event(head.class, new);
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
    m.trace.reserve(room(&shapes, streams));
    let shapes = &shapes;
    let mut known = Known::default();
    pipelined(
        |hand_over| decode(layout, shapes, streams, origin, hand_over),
        |batch: &mut Batch, spare| {
            known.learn(batch);
            for (n, e) in batch.events.iter().enumerate() {
                let end = batch
                    .events
                    .get(n + 1)
                    .map_or(batch.values.len(), |next| next.values as usize);
                let values = &batch.values[e.values as usize..end];
                m.own_event(&classes[e.class as usize], &mut known, e, values);
            }
            batch.events.clear();
            batch.values.clear();
            m.trace.spare_capacity(spare);
        },
    )
}

/// The most the streams can add to the model: as many slices as the smallest begin
/// event fits in their bytes, as many instants as the smallest instant or end (an end
/// without its begin is kept as an instant); for args, as many bytes as the streams
/// hold (their values take about as many bytes in the model as in the file).
fn room(shapes: &[Shape], streams: &[(String, &[u8])]) -> opscope_model::Room {
    let bytes: usize = streams.iter().map(|(_, file)| file.len()).sum();
    let smallest = |roles: &[Role]| {
        shapes
            .iter()
            .filter(|s| roles.contains(&s.role))
            .map(|s| HEADER_BYTES + s.fields.iter().map(|f| f.min_bytes()).sum::<usize>())
            .min()
    };
    let fit = |size: Option<usize>| size.map_or(0, |size| bytes / size);
    opscope_model::Room {
        slices: fit(smallest(&[Role::Begin])),
        instants: fit(smallest(&[Role::Instant, Role::End])),
        args_bytes: bytes,
    }
}

/// What the mapper has made of the decoding thread's numbers: each text's id in the
/// model, interned at its first use (so that the model holds the texts the events use,
/// in the order they use them), with the slice kind it names once asked, and each
/// lane's process and track, made at its first event.
#[derive(Default)]
struct Known<'a> {
    texts: Vec<&'a [u8]>,
    ids: Vec<Option<StrId>>,
    kinds: Vec<Option<SliceKind>>,
    lane_keys: Vec<(i64, i64)>,
    lanes: Vec<Option<(ProcessId, TrackId)>>,
}

impl<'a> Known<'a> {
    /// Takes in the texts and lanes a batch numbered first.
    fn learn(&mut self, batch: &mut Batch<'a>) {
        self.texts.append(&mut batch.new_texts);
        self.ids.resize(self.texts.len(), None);
        self.kinds.resize(self.texts.len(), None);
        self.lane_keys.append(&mut batch.new_lanes);
        self.lanes.resize(self.lane_keys.len(), None);
    }

    /// The text a value holds.
    #[inline]
    fn text(&mut self, trace: &mut Trace, v: Value) -> StrId {
        match v {
            Value::Text(n) => match self.ids.get_mut(n as usize) {
                Some(Some(id)) => *id,
                Some(slot) => *slot.insert(intern_bytes(trace, self.texts[n as usize])),
                None => StrId::EMPTY,
            },
            Value::Unlabelled(x) => trace.intern(&x.to_string()),
            _ => StrId::EMPTY,
        }
    }
}

/// A field's last text and its number.
type LastText<'a> = (&'a [u8], u32);

/// No number yet: a value of [`Labels::numbers`].
const NO_NUMBER: u32 = u32::MAX;

/// The texts the decoding thread has met, numbered in the order the mapper meets them
/// first: the mapper interns each text once and then finds its id by number, and the
/// hashing is done here, on the thread with time to spare.
struct Texts<'a> {
    numbers: HashMap<&'a [u8], u32>,
    /// Per class and field: its last text and number. A field often repeats its last
    /// text (an op's input types over a run of ops), which comparing finds without
    /// hashing.
    last: Vec<Vec<Option<LastText<'a>>>>,
    /// The enumerations' labels, and per class and field, which of them it has.
    labels: Vec<Labels<'a>>,
    label_of: Vec<Vec<Option<usize>>>,
    /// What the event being read numbered, taken back if it turns out broken.
    added: Vec<&'a [u8]>,
    added_labels: Vec<(usize, usize)>,
}

/// An enumeration's labels, each numbered at its first use.
struct Labels<'a> {
    enumeration: &'a EnumTy,
    index: LabelIndex,
    /// Per value from 0 (as far as the index is dense): its text's number.
    numbers: Vec<u32>,
}

impl<'a> Texts<'a> {
    fn new(shapes: &'a [Shape]) -> Self {
        let mut labels: Vec<Labels<'a>> = Vec::new();
        let mut label_of = Vec::new();
        for shape in shapes {
            let mut of_fields = vec![None; shape.enums.len()];
            for (field, e) in shape.enums.iter().enumerate() {
                let Some(e) = e else { continue };
                let known = labels
                    .iter()
                    .position(|l| std::ptr::eq(l.enumeration, &**e));
                let n = known.unwrap_or_else(|| {
                    let index = LabelIndex::new(Arc::clone(e));
                    labels.push(Labels {
                        enumeration: e,
                        numbers: vec![NO_NUMBER; index.dense_len()],
                        index,
                    });
                    labels.len() - 1
                });
                of_fields[field] = Some(n);
            }
            label_of.push(of_fields);
        }
        Texts {
            numbers: HashMap::new(),
            last: shapes.iter().map(|s| vec![None; s.fields.len()]).collect(),
            labels,
            label_of,
            added: Vec::new(),
            added_labels: Vec::new(),
        }
    }

    /// The number of `text`, numbered (and added to `new`) if it has none yet.
    #[inline]
    fn number(&mut self, text: &'a [u8], new: &mut Vec<&'a [u8]>) -> u32 {
        let next = self.numbers.len() as u32;
        match self.numbers.entry(text) {
            hashbrown::hash_map::Entry::Occupied(o) => *o.get(),
            hashbrown::hash_map::Entry::Vacant(v) => {
                v.insert(next);
                self.added.push(text);
                new.push(text);
                next
            }
        }
    }

    /// A string field's value.
    #[inline]
    fn string(
        &mut self,
        class: usize,
        field: usize,
        text: &'a [u8],
        new: &mut Vec<&'a [u8]>,
    ) -> Value {
        if let Some((previous, n)) = self.last[class][field] {
            if previous == text {
                return Value::Text(n);
            }
        }
        let n = self.number(text, new);
        self.last[class][field] = Some((text, n));
        Value::Text(n)
    }

    /// An enumeration field's value: its label's text, numbered once per value.
    #[inline]
    fn label(&mut self, class: usize, field: usize, v: u32, new: &mut Vec<&'a [u8]>) -> Value {
        let Some(table) = self.label_of[class][field] else {
            return Value::Unlabelled(v);
        };
        let labels = &self.labels[table];
        if let Some(&n) = labels.numbers.get(v as usize) {
            if n != NO_NUMBER {
                return Value::Text(n);
            }
        }
        let Some(entry) = labels.index.entry(v as i128) else {
            return Value::Unlabelled(v);
        };
        let text = labels.enumeration.entries[entry].0.as_bytes();
        let n = self.number(text, new);
        if let Some(slot) = self.labels[table].numbers.get_mut(v as usize) {
            *slot = n;
            self.added_labels.push((table, v as usize));
        }
        Value::Text(n)
    }

    fn begin_event(&mut self) {
        self.added.clear();
        self.added_labels.clear();
    }

    /// Takes back what an event the mapper will not see numbered (the last of `new`).
    fn forget_event(&mut self, class: usize, new: &mut Vec<&'a [u8]>) {
        for text in self.added.drain(..) {
            self.numbers.remove(text);
            new.pop();
        }
        for (table, v) in self.added_labels.drain(..) {
            self.labels[table].numbers[v] = NO_NUMBER;
        }
        self.last[class].fill(None);
    }
}

/// The lanes (pid, tid) the decoding thread has met, numbered in order.
#[derive(Default)]
struct Lanes {
    numbers: HashMap<(i64, i64), u32>,
    last: Option<((i64, i64), u32)>,
}

impl Lanes {
    /// The number of lane `key`, numbered (and added to `new`) if it has none yet.
    #[inline]
    fn number(&mut self, key: (i64, i64), new: &mut Vec<(i64, i64)>) -> u32 {
        if let Some((k, n)) = self.last {
            if k == key {
                return n;
            }
        }
        let next = self.numbers.len() as u32;
        let n = *self.numbers.entry(key).or_insert_with(|| {
            new.push(key);
            next
        });
        self.last = Some((key, n));
        n
    }
}

/// The decoding thread: reads the streams merged by time into batches, handing each
/// full one over.
fn decode<'a>(
    layout: &'a Layout,
    shapes: &'a [Shape],
    streams: &'a [(String, &'a [u8])],
    origin: Option<ClockOrigin>,
    hand_over: &mut HandOver<Batch<'a>>,
) -> (Vec<StreamCounts>, Option<ImportError>) {
    let readers: Vec<OwnStream> = streams
        .iter()
        .map(|(_, file)| OwnStream::new(layout, file))
        .collect();
    // The readers, the next event of each, the texts and lanes numbered, and the batch
    // being filled.
    let mut state = (
        readers,
        vec![None::<Head>; streams.len()],
        (Texts::new(shapes), Lanes::default()),
        Batch::default(),
    );
    let first_error = crate::ctf::merge_by_time(
        &mut state,
        streams,
        |(readers, heads, ..), i| {
            heads[i] = readers[i].next_head()?;
            Ok(heads[i].map(|h| h.clock))
        },
        |(readers, heads, (texts, lanes), batch), i| {
            let Some(head) = heads[i] else {
                return Ok(true);
            };
            let values = batch.values.len() as u32;
            let shape = &shapes[head.class];
            if let Err(e) =
                readers[i].payload(head, shape, texts, &mut batch.values, &mut batch.new_texts)
            {
                batch.values.truncate(values as usize);
                return Err(e);
            }
            batch.events.push(Decoded {
                ts: origin.map_or(head.clock as i64, |o| o.ns(head.clock)),
                lane: lanes.number((head.pid, head.tid), &mut batch.new_lanes),
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
        let typed_args = match &e.fields {
            Some(Node::Struct { names, fields, .. }) => names
                .iter()
                .zip(fields.iter())
                .any(|(name, node)| name == "args" && matches!(node, Node::Struct { .. })),
            _ => false,
        };
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
            typed,
            first_arg,
        }
    }

    /// The slice kind a text value names.
    fn own_kind(&mut self, known: &mut Known, v: Value) -> SliceKind {
        if let Value::Text(n) = v {
            if let Some(Some(kind)) = known.kinds.get(n as usize) {
                return *kind;
            }
        }
        let text = known.text(self.trace, v);
        let kind = self.memo_kind(text);
        if let Value::Text(n) = v {
            if let Some(slot) = known.kinds.get_mut(n as usize) {
                *slot = Some(kind);
            }
        }
        kind
    }

    /// The process and track of lane number `lane`.
    fn own_lane(&mut self, known: &mut Known, lane: u32) -> (ProcessId, TrackId) {
        let lane = lane as usize;
        if let Some(Some(l)) = known.lanes.get(lane) {
            return *l;
        }
        let (pid, tid) = known.lane_keys[lane];
        let l = self.lane(pid, tid, false);
        known.lanes[lane] = Some(l);
        l
    }

    /// The args of an event of a class with args.
    fn own_args(&mut self, class: &Class, known: &mut Known, values: &[Value]) -> ArgsId {
        let first = class.first_arg;
        let Some(keys) = &class.typed else {
            // One JSON text.
            let text = match values.get(first) {
                Some(&v) => known.text(self.trace, v),
                None => return ArgsId::NONE,
            };
            let entries = self.json_args(text);
            return self.trace.args.push_bag(&entries);
        };
        let mut entries = std::mem::take(&mut self.scratch);
        entries.clear();
        let args = values.get(first..).unwrap_or(&[]);
        for (&(key, tag), &v) in keys.iter().zip(args) {
            let value = match (tag, v) {
                (ArgTag::Str, Value::Text(_) | Value::Unlabelled(_)) => {
                    ArgValue::Str(known.text(self.trace, v))
                }
                (ArgTag::Json, Value::Text(_) | Value::Unlabelled(_)) => {
                    ArgValue::Json(known.text(self.trace, v))
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
    fn own_event(&mut self, class: &Class, known: &mut Known, e: &Decoded, values: &[Value]) {
        self.last_ts = self.last_ts.max(e.ts);
        let (process, track) = self.own_lane(known, e.lane);
        let text = |m: &mut Self, known: &mut Known, i: usize| match values.get(i) {
            Some(&v) => known.text(m.trace, v),
            None => StrId::EMPTY,
        };
        let id = match values.first() {
            Some(Value::U(x)) => *x,
            _ => 0,
        };
        match class.role {
            Role::Begin | Role::Instant => {
                let args = self.own_args(class, known, values);
                let at = if class.role == Role::Begin { 1 } else { 0 };
                let name = text(self, known, at);
                let category = text(self, known, at + 1);
                let kind = match values.get(at + 2) {
                    Some(&v) => self.own_kind(known, v),
                    None => self.memo_kind(StrId::EMPTY),
                };
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
                    let name_text = text(self, known, 1);
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
                let name = text(self, known, 0);
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
        // middle of the file (the first event of a packet: after its header, of 80
        // bytes, or 84 with a `cpu_id`).
        let metadata_text = String::from_utf8_lossy(&files["metadata"]);
        let header = if metadata_text.contains("cpu_id") {
            84
        } else {
            80
        };
        let packet = 4096 * 40;
        let middle = (bytes.len() / 2 / packet) * packet;
        if let Some(at) =
            (middle..bytes.len()).find(|&i| bytes[i..].starts_with(&0xC1FC_1FC1u32.to_le_bytes()))
        {
            let mut bad_id = bytes.clone();
            bad_id[at + header..at + header + 4].copy_from_slice(&9999u32.to_le_bytes());
            damaged.push(("an undeclared event id".into(), bad_id));
        }
        // A slice begin first in a packet, whose name (an enumeration after its 28-byte
        // header and 8-byte id) has a value without a label: its number is its name.
        let layout = crate::ctf::layout(&files["metadata"], "metadata").unwrap();
        let begins: Vec<[u8; 4]> = layout
            .events
            .iter()
            .filter(|e| e.name.ends_with(":slice_begin"))
            .map(|e| (e.id as u32).to_le_bytes())
            .collect();
        let magic = 0xC1FC_1FC1u32.to_le_bytes();
        if let Some(at) = (middle..bytes.len()).find(|&i| {
            bytes[i..].starts_with(&magic)
                && bytes
                    .get(i + header..i + header + 4)
                    .is_some_and(|id| begins.iter().any(|b| b == id))
        }) {
            let mut unlabelled = bytes.clone();
            let name = at + header + 28 + 8;
            unlabelled[name..name + 4].copy_from_slice(&0x7FFF_FFFFu32.to_le_bytes());
            damaged.push(("a name without a label".into(), unlabelled));
        }
        let mut unlabelled_seen = false;
        for (what, damaged_bytes) in damaged {
            let mut files = files.clone();
            files.insert(largest.clone(), damaged_bytes);
            let (fast, fast_error) = read(&files, Reader::Fast);
            let (general, general_error) = read(&files, Reader::General);
            if what.contains("label") {
                // Not an error: an enumeration may have values without labels.
                assert_eq!(fast_error, None, "{what}");
                assert_eq!(general_error, None, "{what}");
                assert!(
                    fast.slices
                        .name
                        .iter()
                        .any(|&n| fast.str(n) == "2147483647"),
                    "{what}: the name is not its number"
                );
                assert_same_events(Path::new(&what), "the fast reader", &general, &fast);
                unlabelled_seen = true;
                continue;
            }
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
        assert!(
            unlabelled_seen,
            "no packet after the middle opens with a slice begin"
        );
    }
}
