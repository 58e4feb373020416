//! Writes the model as a CTF 1.8 trace (a `metadata` file in TSDL and binary stream
//! files: the tracks of a process share one, and there are at most [`MAX_STREAMS`], as
//! readers merge streams at a cost per stream) that babeltrace2 and Trace Compass read: slices as
//! `opscope:slice_begin`/`opscope:slice_end` pairs (tied by the slice's `id`), instants
//! as `opscope:instant`, counter samples as `opscope:counter`. Names, categories and
//! kinds are event fields; the process and thread are the event context (`vpid`,
//! `vtid`), as LTTng writes them.
//!
//! Args are typed fields of a struct `args`: integers as `int64_t` (`uint64_t` beyond
//! it), floats as `double`, strings as `string`, booleans as `uint8_t`, JSON values as
//! their text. CTF fixes an event's fields in its class, and args' keys and types vary
//! from event to event, so each set of (key, type) in order gets a class of its own,
//! named as the others (`opscope:slice_begin`, `opscope:instant`): babeltrace2 prints
//! every arg as `args = { External_id = 7, … }`, and a reader decodes each value as
//! its type says, with nothing to parse again. (A variant per arg would print its tag
//! and make every reader choose a branch per value; one class per key set keeps the
//! values plain.) Keys are cut to CTF identifiers in the class, so each class's exact
//! keys and types are in the environment (`opscope_args_ID`, a JSON array of `[key,
//! type]`), where opscope's reader takes them back. Past [`MAX_TYPED_CLASSES`] key
//! sets, the rest have their args as one JSON text field, `args`, in the classes of
//! id 0 to 3.
//!
//! Names, categories and kinds, and the string args of a key whose values repeat, are
//! enumeration labels rather than strings: each such field is a `uint32_t` enumeration
//! (`enum opscope_name : uint32_t { "aten::mm" = 0, … }`) whose labels are the field's
//! distinct texts, written once in the metadata. babeltrace2 and Trace Compass show the
//! label, and an event's fields are then fixed-size runs, as LTTng's are, which a reader
//! decodes without finding where each string ends or hashing its text again. Keys whose
//! values rarely repeat (ids, unique text) stay strings, as does any field past
//! [`MAX_LABELS`] labels or with texts that a TSDL string literal does not carry as
//! they are (control characters). The limit is babeltrace2's: it takes time
//! quadratic in an enumeration's labels to read its declaration (2.0.4: 13 ms for
//! 1,024 labels, 165 ms for 4,096), so a field of thousands of distinct texts would
//! cost it more than their strings do.
//!
//! An event whose CPU is known — its args name it (`cpu`), or its thread has a CPU
//! counter (`cpu (tid N)`, which the CTF reader makes from LTTng's packets) — goes to
//! a packet whose `cpu_id` is that CPU, as LTTng's per-CPU streams have it, so that
//! babeltrace2 and Trace Compass see it where they look for it. When no event's CPU is
//! known (a PyTorch or TensorFlow trace), packets have no `cpu_id` at all; when some
//! are, packets of the others say [`NO_CPU`], as the environment (`opscope_no_cpu`)
//! says. The processes' and threads' names are in the environment too
//! (`opscope_processes`, `opscope_threads`: JSON arrays of `[pid, name]` and `[pid,
//! tid, name]`), since a process named by text in its source (a TensorFlow timeline's
//! "/device:GPU:0 Compute") has only a number opscope gave it.
//!
//! Everything is byte-aligned little-endian, so no field needs padding; timestamps are
//! 64-bit nanoseconds from the trace's first event, on a clock whose offset places them
//! in Unix time when the sources say where that is.

use std::fmt::Write as _;
use std::io;

use hashbrown::HashMap;
use opscope_model::args::ArgValue;
use opscope_model::{ArgsId, SliceKind, StrId, Trace, TrackKind, NONE};

use crate::error::ExportError;

const MAGIC: u32 = 0xC1FC_1FC1;
/// Events per packet: packets stay well under a megabyte.
const PACKET_EVENTS: usize = 4096;
/// At most this many stream files: babeltrace2's muxer slows down with every stream it
/// merges (a kernel trace with 16k thread tracks took minutes as one stream each).
pub const MAX_STREAMS: usize = 64;

/// At most this many classes of typed args (metadata readers parse every class).
pub const MAX_TYPED_CLASSES: usize = 2000;

/// The `cpu_id` of packets whose events have no known CPU (0 would claim CPU 0).
pub const NO_CPU: u32 = u32::MAX;

/// At most this many labels in one enumeration: past it, the field stays a string.
pub const MAX_LABELS: usize = 1024;
/// At most this sum, over the enumerations, of their labels squared: what
/// babeltrace2's reading of their declarations takes (about 13 ms per million).
const MAX_LABELS_SQUARED: usize = 1 << 20;

const SLICE_BEGIN: u32 = 0;
const SLICE_END: u32 = 1;
const INSTANT: u32 = 2;
const COUNTER: u32 = 3;
/// The first id of the classes with typed args.
const FIRST_TYPED: u32 = 4;

/// An arg's type in a class with typed args, as the environment names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ArgTag {
    Int,
    UInt,
    Float,
    Str,
    Bool,
    Json,
    Null,
}

impl ArgTag {
    pub(crate) const ALL: [ArgTag; 7] = [
        ArgTag::Int,
        ArgTag::UInt,
        ArgTag::Float,
        ArgTag::Str,
        ArgTag::Bool,
        ArgTag::Json,
        ArgTag::Null,
    ];

    fn of(value: ArgValue) -> ArgTag {
        match value {
            ArgValue::Null => ArgTag::Null,
            ArgValue::Bool(_) => ArgTag::Bool,
            ArgValue::Int(_) => ArgTag::Int,
            ArgValue::UInt(_) => ArgTag::UInt,
            ArgValue::Float(_) => ArgTag::Float,
            ArgValue::Str(_) => ArgTag::Str,
            ArgValue::Json(_) => ArgTag::Json,
        }
    }

    pub(crate) fn code(self) -> &'static str {
        match self {
            ArgTag::Int => "int",
            ArgTag::UInt => "uint",
            ArgTag::Float => "float",
            ArgTag::Str => "str",
            ArgTag::Bool => "bool",
            ArgTag::Json => "json",
            ArgTag::Null => "null",
        }
    }

    fn tsdl(self) -> &'static str {
        match self {
            ArgTag::Int => "int64_t",
            ArgTag::UInt => "uint64_t",
            ArgTag::Float => "double",
            ArgTag::Str | ArgTag::Json => "string",
            ArgTag::Bool | ArgTag::Null => "uint8_t",
        }
    }
}

/// A class of typed args: slice begins or instants, with these keys and types.
type Schema = (bool, Vec<(StrId, ArgTag)>);

/// The classes of typed args a trace needs, by schema, with their ids.
#[derive(Default)]
struct Classes {
    ids: HashMap<Schema, u32>,
    /// In id order.
    list: Vec<Schema>,
    /// At most this many (the events of further schemas have their args as JSON).
    limit: usize,
}

impl Classes {
    /// The class of an event's args, made when new; `None` past the limit.
    fn of(&mut self, trace: &Trace, begin: bool, args: ArgsId) -> Option<u32> {
        let keys: Vec<(StrId, ArgTag)> = trace
            .args
            .get(args)
            .map(|(k, v)| (k, ArgTag::of(v)))
            .collect();
        let schema = (begin, keys);
        if let Some(&id) = self.ids.get(&schema) {
            return Some(id);
        }
        if self.list.len() >= self.limit {
            return None;
        }
        let id = FIRST_TYPED + self.list.len() as u32;
        self.ids.insert(schema.clone(), id);
        self.list.push(schema);
        Some(id)
    }
}

/// TSDL's reserved words, which no field may be named.
const TSDL_KEYWORDS: &[&str] = &[
    "align",
    "callsite",
    "const",
    "char",
    "clock",
    "double",
    "enum",
    "env",
    "event",
    "floating_point",
    "float",
    "integer",
    "int",
    "long",
    "short",
    "signed",
    "stream",
    "string",
    "struct",
    "trace",
    "typealias",
    "typedef",
    "unsigned",
    "variant",
    "void",
    "_Bool",
    "_Complex",
    "_Imaginary",
];

/// CTF field names for `keys`: each cut to an identifier (other characters become
/// `_`; a leading `_` where it would start with a digit or be a reserved word, which
/// babeltrace2 does not print) and made unique, also as babeltrace2 prints them (less
/// one leading `_`).
fn field_names(trace: &Trace, keys: &[(StrId, ArgTag)]) -> Vec<String> {
    let mut shown = hashbrown::HashSet::new();
    keys.iter()
        .map(|&(k, _)| {
            let mut base: String = trace
                .str(k)
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            if base.is_empty()
                || base.starts_with(|c: char| c.is_ascii_digit())
                || TSDL_KEYWORDS.contains(&base.as_str())
            {
                base.insert(0, '_');
            }
            let mut name = base.clone();
            let mut n = 2;
            while !shown.insert(name.strip_prefix('_').unwrap_or(&name).to_string()) {
                name = format!("{base}_{n}");
                n += 1;
            }
            name
        })
        .collect()
}

/// A field written as an enumeration: its texts and their values.
struct Labels {
    /// The enumeration's TSDL name.
    name: String,
    /// The texts, in value order.
    texts: Vec<StrId>,
    value: HashMap<StrId, u32>,
}

/// The fields written as enumerations (see the module's documentation).
#[derive(Default)]
struct Enums {
    name: Option<Labels>,
    category: Option<Labels>,
    /// Per arg key (of string or JSON args of the typed classes).
    args: HashMap<StrId, Labels>,
}

/// The distinct texts of one field, in order of first use, and how often it occurs.
#[derive(Default)]
struct Census {
    texts: Vec<StrId>,
    seen: HashMap<StrId, u32>,
    uses: usize,
}

impl Census {
    fn add(&mut self, text: StrId) {
        self.uses += 1;
        if !self.seen.contains_key(&text) {
            self.seen.insert(text, self.texts.len() as u32);
            self.texts.push(text);
        }
    }
}

/// Whether a TSDL string literal carries `text` as it is, with `\\` and `\"` escaped
/// (babeltrace2 reads other escapes, but not every reader does).
fn label_safe(text: &str) -> bool {
    !text.bytes().any(|b| b < 0x20 || b == 0x7f)
}

impl Enums {
    /// The fields worth an enumeration: those whose texts repeat (each on average at
    /// least twice), most used first, within the limits on labels.
    fn of(trace: &Trace, begin_class: &[u32], instant_class: &[u32]) -> Enums {
        let s = &trace.slices;
        let inst = &trace.instants;
        let mut names = Census::default();
        let mut categories = Census::default();
        for i in 0..s.len() {
            // A slice's name is in its begin and its end.
            names.add(s.name[i]);
            names.add(s.name[i]);
            categories.add(s.category[i]);
        }
        for i in 0..inst.len() {
            names.add(inst.name[i]);
            categories.add(inst.category[i]);
        }
        let mut args: HashMap<StrId, Census> = HashMap::new();
        let typed = |class: u32| class >= FIRST_TYPED;
        let bags = (0..s.len())
            .filter(|&i| typed(begin_class[i]))
            .map(|i| s.args[i])
            .chain(
                (0..inst.len())
                    .filter(|&i| typed(instant_class[i]))
                    .map(|i| inst.args[i]),
            );
        for bag in bags {
            for (key, value) in trace.args.get(bag) {
                if let ArgValue::Str(text) | ArgValue::Json(text) = value {
                    args.entry(key).or_default().add(text);
                }
            }
        }
        // (uses, which: 0 names, 1 categories, 2 an arg, its key).
        let mut fields: Vec<(usize, u8, StrId, Census)> = vec![
            (names.uses, 0, StrId::EMPTY, names),
            (categories.uses, 1, StrId::EMPTY, categories),
        ];
        let mut keys: Vec<(StrId, Census)> = args.into_iter().collect();
        // In key order, so that one trace always gets the same enumerations.
        keys.sort_by_key(|(k, _)| trace.str(*k));
        fields.extend(keys.into_iter().map(|(k, c)| (c.uses, 2, k, c)));
        fields.sort_by_key(|f| std::cmp::Reverse(f.0));
        let mut enums = Enums::default();
        let mut squared = 0;
        let mut arg_number = 0;
        for (uses, which, key, census) in fields {
            let n = census.texts.len();
            let worth = n <= MAX_LABELS
                && 2 * n <= uses
                && squared + n * n <= MAX_LABELS_SQUARED
                && census.texts.iter().all(|&t| label_safe(trace.str(t)));
            if !worth {
                continue;
            }
            squared += n * n;
            let name = match which {
                0 => "opscope_name".to_string(),
                1 => "opscope_category".to_string(),
                _ => {
                    arg_number += 1;
                    format!("opscope_arg_{arg_number}")
                }
            };
            let field = Labels {
                name,
                texts: census.texts,
                value: census.seen,
            };
            match which {
                0 => enums.name = Some(field),
                1 => enums.category = Some(field),
                _ => {
                    enums.args.insert(key, field);
                }
            }
        }
        enums
    }
}

/// The TSDL of an enumeration label: `text` quoted.
fn label_literal(text: &str) -> String {
    format!("\"{}\"", tsdl_string(text))
}

/// The TSDL type of a text field: its enumeration, or `string`.
fn text_type(labels: Option<&Labels>) -> String {
    labels.map_or("string".to_string(), |l| format!("enum {}", l.name))
}

/// The field's text: its value when it is an enumeration, else the string.
fn put_text(out: &mut Vec<u8>, trace: &Trace, labels: Option<&Labels>, text: StrId) {
    match labels {
        Some(l) => put_u32(
            out,
            *l.value
                .get(&text)
                .expect("an enumerated field's labels are all its texts"),
        ),
        None => put_str(out, trace.str(text)),
    }
}

/// Writes `trace`: `write(file_name, bytes)` is called once for `metadata` and once per
/// stream file, each with the whole file.
pub fn export(
    trace: &Trace,
    write: &mut dyn FnMut(&str, &[u8]) -> io::Result<()>,
) -> Result<(), ExportError> {
    export_with(trace, MAX_TYPED_CLASSES, write)
}

/// [`export`] with at most `typed_classes` classes of typed args.
pub(crate) fn export_with(
    trace: &Trace,
    typed_classes: usize,
    write: &mut dyn FnMut(&str, &[u8]) -> io::Result<()>,
) -> Result<(), ExportError> {
    let base = first_time(trace).unwrap_or(0);
    let uuid = trace_uuid(trace);
    // The class of each slice's begin and each instant.
    let mut classes = Classes {
        limit: typed_classes,
        ..Classes::default()
    };
    let s = &trace.slices;
    let begin_class: Vec<u32> = (0..s.len())
        .map(|i| classes.of(trace, true, s.args[i]).unwrap_or(SLICE_BEGIN))
        .collect();
    let inst = &trace.instants;
    let instant_class: Vec<u32> = (0..inst.len())
        .map(|i| classes.of(trace, false, inst.args[i]).unwrap_or(INSTANT))
        .collect();
    let enums = Enums::of(trace, &begin_class, &instant_class);
    let class_of = EventClasses {
        begin: &begin_class,
        instant: &instant_class,
        enums: &enums,
    };
    let mut per_track: Vec<Vec<Event>> = (0..trace.tracks.len()).map(|_| Vec::new()).collect();
    slice_events(trace, &mut per_track);
    let inst = &trace.instants;
    for i in 0..inst.len() {
        per_track[inst.track[i] as usize].push(Event {
            track: 0,
            cpu: NO_CPU,
            ts: inst.ts[i],
            order: 1,
            what: What::Instant(i),
        });
    }
    let c = &trace.counters;
    for i in 0..c.len() {
        per_track[c.track[i] as usize].push(Event {
            track: 0,
            cpu: NO_CPU,
            ts: c.ts[i],
            order: 1,
            what: What::Counter(i),
        });
    }
    // The tracks of a process go to one stream per CPU (events with no known CPU to
    // one more), as LTTng's per-CPU streams; beyond MAX_STREAMS streams are shared and
    // their packets are cut where the CPU changes. Each event names its process and
    // thread in its context.
    let mut stream_of: HashMap<(usize, u32), usize> = HashMap::new();
    let mut per_stream: Vec<Vec<Event>> = Vec::new();
    let s = &trace.slices;
    let slice_cpus: Vec<u32> = (0..s.len()).map(|i| cpu_of(trace, s.args[i])).collect();
    let thread_cpus = thread_cpus(trace);
    for (t, mut events) in per_track.into_iter().enumerate() {
        if events.is_empty() {
            continue;
        }
        // Stable sorts. On a thread track the slice events are in order already (the
        // walk closed each slice before the next began): instants and samples join them
        // by time. Elsewhere ends and begins at one time are put in order here.
        if trace.tracks[t].kind == TrackKind::Thread {
            events.sort_by_key(|e| e.ts);
        } else {
            events.sort_by_key(|e| (e.ts, e.order));
        }
        let bucket = trace.tracks[t]
            .process
            .map_or(0, |p| p.index() % MAX_STREAMS);
        let on_thread = match trace.tracks[t].thread {
            Some(th) if trace.tracks[t].kind == TrackKind::Thread => thread_cpus.get(&th.index()),
            _ => None,
        };
        for e in events {
            let cpu = match e.what {
                What::Begin(i) | What::End(i) => slice_cpus[i],
                What::Instant(i) => cpu_of(trace, trace.instants.args[i]),
                What::Counter(_) => NO_CPU,
            };
            // Else the CPU the thread's CPU counter says it was on then.
            let cpu = match on_thread {
                Some(series) if cpu == NO_CPU && !matches!(e.what, What::Counter(_)) => {
                    let k = series.partition_point(|&(ts, _)| ts <= e.ts);
                    if k == 0 {
                        NO_CPU
                    } else {
                        series[k - 1].1
                    }
                }
                _ => cpu,
            };
            let next = per_stream.len();
            let n = *stream_of
                .entry((bucket, cpu))
                .or_insert(if next < MAX_STREAMS {
                    next
                } else {
                    (bucket + cpu as usize) % MAX_STREAMS
                });
            if n == per_stream.len() {
                per_stream.push(Vec::new());
            }
            per_stream[n].push(Event {
                track: t as u32,
                cpu,
                ..e
            });
        }
    }
    let cpus = per_stream.iter().flatten().any(|e| e.cpu != NO_CPU);
    write(
        "metadata",
        metadata(trace, base, &uuid, &classes, &enums, cpus).as_bytes(),
    )?;
    let mut stream = Vec::new();
    for (n, mut events) in per_stream.into_iter().enumerate() {
        if events.is_empty() {
            continue;
        }
        // Each track's events are in order: a stable sort by time merges them and keeps
        // that order among equal times.
        events.sort_by_key(|e| e.ts);
        stream.clear();
        write_stream(
            trace,
            &class_of,
            n as u64,
            &events,
            Packets {
                base,
                uuid: &uuid,
                cpus,
            },
            &mut stream,
        );
        write(&format!("stream_{n}"), &stream)?;
    }
    Ok(())
}

/// The class id of each slice's begin and of each instant.
struct EventClasses<'c> {
    begin: &'c [u32],
    instant: &'c [u32],
    enums: &'c Enums,
}

#[derive(Copy, Clone)]
enum What {
    Begin(usize),
    End(usize),
    Instant(usize),
    Counter(usize),
}

#[derive(Copy, Clone)]
struct Event {
    /// Set when the tracks are gathered into streams.
    track: u32,
    /// Set with `track`: the CPU from the event's args, or [`NO_CPU`].
    cpu: u32,
    ts: i64,
    /// Among events at one time off thread tracks: 0 closes, 1 opens or marks, 2 closes
    /// a zero-length slice after it opened.
    order: u8,
    what: What,
}

/// Begin and end events of every slice, per track. On thread tracks slices nest: a walk
/// with a stack closes each slice before its next sibling opens. Elsewhere (GPU
/// streams, async lanes) slices may overlap, and ends are only ordered by time.
fn slice_events(trace: &Trace, per_track: &mut [Vec<Event>]) {
    let s = &trace.slices;
    let mut stack: Vec<usize> = Vec::new();
    let mut current_track = u32::MAX;
    let mut nested = false;
    let close = |i: usize, out: &mut Vec<Event>| {
        out.push(Event {
            track: 0,
            cpu: NO_CPU,
            ts: s.end(i),
            order: if s.dur[i] == 0 { 2 } else { 0 },
            what: What::End(i),
        })
    };
    for i in 0..s.len() {
        let track = s.track[i];
        if track != current_track {
            if current_track != u32::MAX {
                let out = &mut per_track[current_track as usize];
                while let Some(open) = stack.pop() {
                    close(open, out);
                }
            }
            current_track = track;
            nested = trace.tracks[track as usize].kind == TrackKind::Thread;
        }
        let out = &mut per_track[track as usize];
        if nested {
            while let Some(&open) = stack.last() {
                if s.parent[i] != NONE && s.parent[i] as usize == open {
                    break;
                }
                stack.pop();
                close(open, out);
            }
            stack.push(i);
        } else {
            close(i, out);
        }
        out.push(Event {
            track: 0,
            cpu: NO_CPU,
            ts: s.ts[i],
            order: 1,
            what: What::Begin(i),
        });
    }
    if current_track != u32::MAX {
        let out = &mut per_track[current_track as usize];
        while let Some(open) = stack.pop() {
            close(open, out);
        }
    }
}

/// Per thread (by index): the samples of its CPU counter (a counter track of the
/// thread named `cpu…`, as the CTF reader makes them), in time order.
fn thread_cpus(trace: &Trace) -> HashMap<usize, Vec<(i64, u32)>> {
    let mut of_track: HashMap<usize, usize> = HashMap::new();
    for (t, track) in trace.tracks.iter().enumerate() {
        if let (TrackKind::Counter, Some(th)) = (track.kind, track.thread) {
            if trace.str(track.name).starts_with("cpu") {
                of_track.insert(t, th.index());
            }
        }
    }
    let mut out: HashMap<usize, Vec<(i64, u32)>> = HashMap::new();
    if of_track.is_empty() {
        return out;
    }
    let c = &trace.counters;
    for i in 0..c.len() {
        if let Some(&th) = of_track.get(&(c.track[i] as usize)) {
            let v = c.value[i];
            let cpu = if v >= 0.0 && v < f64::from(NO_CPU) {
                v as u32
            } else {
                NO_CPU
            };
            out.entry(th).or_default().push((c.ts[i], cpu));
        }
    }
    for series in out.values_mut() {
        series.sort_by_key(|&(ts, _)| ts);
    }
    out
}

/// The CPU an event's args name (`cpu`), or [`NO_CPU`].
fn cpu_of(trace: &Trace, args: ArgsId) -> u32 {
    if args.is_none() {
        return NO_CPU;
    }
    let value = trace
        .args
        .get(args)
        .find(|&(k, _)| trace.str(k) == "cpu")
        .map(|(_, v)| v);
    match value {
        Some(ArgValue::Int(c)) => u32::try_from(c).unwrap_or(NO_CPU),
        Some(ArgValue::UInt(c)) => u32::try_from(c).unwrap_or(NO_CPU),
        _ => NO_CPU,
    }
}

fn first_time(trace: &Trace) -> Option<i64> {
    let slices = trace.slices.ts.iter();
    let instants = trace.instants.ts.iter();
    let counters = trace.counters.ts.iter();
    slices.chain(instants).chain(counters).copied().min()
}

/// A UUID derived from the trace's sources, so that one trace always gets the same.
fn trace_uuid(trace: &Trace) -> [u8; 16] {
    // FNV-1a over the source paths and sizes, spread over 16 bytes.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for source in &trace.sources {
        for b in source.path.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h ^= trace.slices.len() as u64;
    let g = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut uuid = [0u8; 16];
    uuid[..8].copy_from_slice(&h.to_le_bytes());
    uuid[8..].copy_from_slice(&g.to_le_bytes());
    // Version 4 and variant bits, as any RFC 4122 reader expects.
    uuid[6] = (uuid[6] & 0x0f) | 0x40;
    uuid[8] = (uuid[8] & 0x3f) | 0x80;
    uuid
}

fn uuid_text(uuid: &[u8; 16]) -> String {
    let hex: Vec<String> = uuid.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        hex[0..4].concat(),
        hex[4..6].concat(),
        hex[6..8].concat(),
        hex[8..10].concat(),
        hex[10..16].concat()
    )
}

/// Where the trace's time 0 is in Unix time, when every source agrees.
fn unix_offset(trace: &Trace) -> Option<i64> {
    let mut offsets = trace.sources.iter().map(|s| {
        let clock = &trace.clocks[s.clock.0 as usize];
        // A clock's global time is its local time moved by `to_global`; its Unix
        // offset is of local time.
        clock.unix_offset_ns.map(|u| u - clock.to_global.apply(0))
    });
    let first = offsets.next()??;
    offsets.all(|o| o == Some(first)).then_some(first)
}

fn tsdl_string(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

fn metadata(
    trace: &Trace,
    base: i64,
    uuid: &[u8; 16],
    classes: &Classes,
    enums: &Enums,
    cpus: bool,
) -> String {
    let mut m = String::new();
    let uuid = uuid_text(uuid);
    // The clock counts ns from the first event; its offset says when that was.
    let offset = unix_offset(trace).map_or(base, |u| u + base);
    let (offset_s, offset_ns) = (
        offset.div_euclid(1_000_000_000),
        offset.rem_euclid(1_000_000_000),
    );
    let sources: Vec<&str> = trace.sources.iter().map(|s| s.path.as_str()).collect();
    let _ = write!(
        m,
        r#"/* CTF 1.8 */

typealias integer {{ size = 8; align = 8; signed = false; }} := uint8_t;
typealias integer {{ size = 32; align = 8; signed = false; }} := uint32_t;
typealias integer {{ size = 64; align = 8; signed = false; }} := uint64_t;
typealias integer {{ size = 64; align = 8; signed = true; }} := int64_t;
typealias floating_point {{ exp_dig = 11; mant_dig = 53; align = 8; }} := double;

trace {{
    major = 1;
    minor = 8;
    uuid = "{uuid}";
    byte_order = le;
    packet.header := struct {{
        uint32_t magic;
        uint8_t uuid[16];
        uint32_t stream_id;
        uint64_t stream_instance_id;
    }};
}};

env {{
    tracer_name = "opscope";
    tracer_major = 0;
    tracer_minor = 1;
    source = "{sources}";{no_cpu}{names}{schemas}
}};

clock {{
    name = "opscope";
    uuid = "{uuid}";
    description = "opscope's global time: ns since the trace's first event";
    freq = 1000000000;
    precision = 1;
    offset_s = {offset_s};
    offset = {offset_ns};
    absolute = {absolute};
}};

typealias integer {{ size = 64; align = 8; signed = false; map = clock.opscope.value; }} := uint64_clock_t;
{enum_types}
stream {{
    id = 0;
    packet.context := struct {{
        uint64_clock_t timestamp_begin;
        uint64_clock_t timestamp_end;
        uint64_t content_size;
        uint64_t packet_size;
        uint64_t packet_seq_num;
        uint64_t events_discarded;{cpu_id}
    }};
    event.header := struct {{
        uint32_t id;
        uint64_clock_t timestamp;
    }};
    event.context := struct {{
        int64_t vpid;
        int64_t vtid;
    }};
}};

event {{
    name = "opscope:slice_begin";
    id = {SLICE_BEGIN};
    stream_id = 0;
    fields := struct {{
        uint64_t id;
        {name_t} name;
        {category_t} category;
        enum opscope_kind kind;
        string args;
    }};
}};

event {{
    name = "opscope:slice_end";
    id = {SLICE_END};
    stream_id = 0;
    fields := struct {{
        uint64_t id;
        {name_t} name;
    }};
}};

event {{
    name = "opscope:instant";
    id = {INSTANT};
    stream_id = 0;
    fields := struct {{
        {name_t} name;
        {category_t} category;
        enum opscope_kind kind;
        string args;
    }};
}};

event {{
    name = "opscope:counter";
    id = {COUNTER};
    stream_id = 0;
    fields := struct {{
        string name;
        double value;
    }};
}};
"#,
        sources = tsdl_string(&sources.join(", ")),
        schemas = schemas(trace, classes),
        names = names(trace),
        no_cpu = if cpus {
            format!("\n    opscope_no_cpu = {NO_CPU};")
        } else {
            String::new()
        },
        cpu_id = if cpus {
            "\n        uint32_t cpu_id;"
        } else {
            ""
        },
        enum_types = enum_types(trace, enums),
        name_t = text_type(enums.name.as_ref()),
        category_t = text_type(enums.category.as_ref()),
        absolute = if unix_offset(trace).is_some() {
            "TRUE"
        } else {
            "FALSE"
        },
    );
    for (n, (begin, keys)) in classes.list.iter().enumerate() {
        let id = FIRST_TYPED as usize + n;
        let (name, head) = if *begin {
            ("opscope:slice_begin", "uint64_t id;\n        ")
        } else {
            ("opscope:instant", "")
        };
        let _ = write!(
            m,
            "\nevent {{\n    name = \"{name}\";\n    id = {id};\n    stream_id = 0;\n    fields := struct {{\n        {head}{} name;\n        {} category;\n        enum opscope_kind kind;\n        struct {{\n",
            text_type(enums.name.as_ref()),
            text_type(enums.category.as_ref()),
        );
        for (field, (key, tag)) in field_names(trace, keys).iter().zip(keys) {
            let ty = match (tag, enums.args.get(key)) {
                (ArgTag::Str | ArgTag::Json, Some(labels)) => format!("enum {}", labels.name),
                _ => tag.tsdl().to_string(),
            };
            let _ = writeln!(m, "            {ty} {field};");
        }
        m.push_str("        } args;\n    };\n};\n");
    }
    m
}

/// The declarations of the enumerations: kinds, and the fields of `enums`.
fn enum_types(trace: &Trace, enums: &Enums) -> String {
    let mut out = String::new();
    let mut declare = |name: &str, labels: &mut dyn Iterator<Item = (String, u32)>| {
        let _ = write!(out, "\nenum {name} : uint32_t {{");
        for (n, (label, value)) in labels.enumerate() {
            let sep = if n == 0 { "" } else { "," };
            let _ = write!(out, "{sep}\n    {} = {value}", label_literal(&label));
        }
        out.push_str("\n};\n");
    };
    declare(
        "opscope_kind",
        &mut SliceKind::ALL
            .iter()
            .map(|k| (k.name().to_string(), u32::from(k.code()))),
    );
    let mut fields: Vec<&Labels> = enums.name.iter().chain(&enums.category).collect();
    let mut args: Vec<&Labels> = enums.args.values().collect();
    args.sort_by(|a, b| a.name.cmp(&b.name));
    fields.extend(args);
    for f in fields {
        declare(
            &f.name,
            &mut f
                .texts
                .iter()
                .enumerate()
                .map(|(v, &t)| (trace.str(t).to_string(), v as u32)),
        );
    }
    out
}

/// The environment entries that name the processes and threads (see the module's doc).
fn names(trace: &Trace) -> String {
    let processes: Vec<serde_json::Value> = trace
        .processes
        .iter()
        .filter_map(|p| Some(serde_json::json!([p.pid, trace.str(p.name?)])))
        .collect();
    let threads: Vec<serde_json::Value> = trace
        .threads
        .iter()
        .filter_map(|t| {
            let pid = trace.processes[t.process.index()].pid;
            Some(serde_json::json!([pid, t.tid, trace.str(t.name?)]))
        })
        .collect();
    let mut out = String::new();
    for (key, list) in [
        ("opscope_processes", processes),
        ("opscope_threads", threads),
    ] {
        if !list.is_empty() {
            let text = serde_json::Value::Array(list).to_string();
            let _ = write!(out, "\n    {key} = \"{}\";", tsdl_string(&text));
        }
    }
    out
}

/// The environment entries that give each typed class its exact keys and types.
fn schemas(trace: &Trace, classes: &Classes) -> String {
    let mut out = String::new();
    for (n, (_, keys)) in classes.list.iter().enumerate() {
        let list: Vec<serde_json::Value> = keys
            .iter()
            .map(|&(k, tag)| serde_json::json!([trace.str(k), tag.code()]))
            .collect();
        let text = serde_json::Value::Array(list).to_string();
        let id = FIRST_TYPED as usize + n;
        let _ = write!(out, "\n    opscope_args_{id} = \"{}\";", tsdl_string(&text));
    }
    out
}

/// Writes the args of a typed class: each value as its type (the class's) says.
fn put_typed_args(trace: &Trace, enums: &Enums, args: ArgsId, out: &mut Vec<u8>) {
    for (key, value) in trace.args.get(args) {
        match value {
            ArgValue::Null => out.push(0),
            ArgValue::Bool(b) => out.push(u8::from(b)),
            ArgValue::Int(i) => out.extend_from_slice(&i.to_le_bytes()),
            ArgValue::UInt(u) => out.extend_from_slice(&u.to_le_bytes()),
            ArgValue::Float(f) => out.extend_from_slice(&f.to_le_bytes()),
            ArgValue::Str(s) | ArgValue::Json(s) => put_text(out, trace, enums.args.get(&key), s),
        }
    }
}

/// The args as one JSON object.
fn args_json(trace: &Trace, args: ArgsId) -> String {
    if args.is_none() {
        return String::new();
    }
    let mut map = serde_json::Map::new();
    for (key, value) in trace.args.get(args) {
        let v = match value {
            ArgValue::Null => serde_json::Value::Null,
            ArgValue::Bool(b) => b.into(),
            ArgValue::Int(i) => i.into(),
            ArgValue::UInt(u) => u.into(),
            ArgValue::Float(f) => {
                serde_json::Number::from_f64(f).map_or(serde_json::Value::Null, Into::into)
            }
            ArgValue::Str(s) => trace.str(s).into(),
            ArgValue::Json(s) => {
                serde_json::from_str(trace.str(s)).unwrap_or_else(|_| trace.str(s).into())
            }
        };
        map.insert(trace.str(key).to_string(), v);
    }
    serde_json::Value::Object(map).to_string()
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// A CTF string: its UTF-8 bytes, with any NUL (which would end it early) replaced.
fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend(s.bytes().map(|b| if b == 0 { b'?' } else { b }));
    out.push(0);
}

/// What every packet of the trace shares: the time its clock counts from, the trace's
/// uuid, and whether packets have a `cpu_id`.
struct Packets<'u> {
    base: i64,
    uuid: &'u [u8; 16],
    cpus: bool,
}

fn write_stream(
    trace: &Trace,
    classes: &EventClasses,
    instance: u64,
    events: &[Event],
    packets: Packets,
    out: &mut Vec<u8>,
) {
    let Packets { base, uuid, cpus } = packets;
    let s = &trace.slices;
    let enums = classes.enums;
    let time = |ts: i64| ts.saturating_sub(base).max(0) as u64;
    // Packets of at most PACKET_EVENTS events of one CPU.
    let mut rest = events;
    let mut seq = 0u64;
    while !rest.is_empty() {
        let cpu = rest[0].cpu;
        let n = rest
            .iter()
            .take(PACKET_EVENTS)
            .position(|e| e.cpu != cpu)
            .unwrap_or(rest.len().min(PACKET_EVENTS));
        let (packet, after) = rest.split_at(n);
        rest = after;
        let start = out.len();
        put_u32(out, MAGIC);
        out.extend_from_slice(uuid);
        put_u32(out, 0);
        put_u64(out, instance);
        put_u64(out, time(packet[0].ts));
        put_u64(out, time(packet[packet.len() - 1].ts));
        let sizes_at = out.len();
        put_u64(out, 0); // content_size, filled in below
        put_u64(out, 0); // packet_size
        put_u64(out, seq);
        seq += 1;
        put_u64(out, 0);
        if cpus {
            put_u32(out, cpu);
        }
        for e in packet {
            let id = match e.what {
                What::Begin(i) => classes.begin[i],
                What::End(_) => SLICE_END,
                What::Instant(i) => classes.instant[i],
                What::Counter(_) => COUNTER,
            };
            let t = &trace.tracks[e.track as usize];
            let pid = t.process.map_or(0, |p| trace.processes[p.index()].pid);
            let tid = t.thread.map_or(-1, |th| trace.threads[th.index()].tid);
            put_u32(out, id);
            put_u64(out, time(e.ts));
            put_u64(out, pid as u64);
            put_u64(out, tid as u64);
            match e.what {
                What::Begin(i) => {
                    put_u64(out, i as u64);
                    put_text(out, trace, enums.name.as_ref(), s.name[i]);
                    put_text(out, trace, enums.category.as_ref(), s.category[i]);
                    put_u32(out, u32::from(s.kind(i).code()));
                    if id == SLICE_BEGIN {
                        put_str(out, &args_json(trace, s.args[i]));
                    } else {
                        put_typed_args(trace, enums, s.args[i], out);
                    }
                }
                What::End(i) => {
                    put_u64(out, i as u64);
                    put_text(out, trace, enums.name.as_ref(), s.name[i]);
                }
                What::Instant(i) => {
                    let inst = &trace.instants;
                    put_text(out, trace, enums.name.as_ref(), inst.name[i]);
                    put_text(out, trace, enums.category.as_ref(), inst.category[i]);
                    put_u32(out, u32::from(inst.kind(i).code()));
                    if id == INSTANT {
                        put_str(out, &args_json(trace, inst.args[i]));
                    } else {
                        put_typed_args(trace, enums, inst.args[i], out);
                    }
                }
                What::Counter(i) => {
                    put_str(out, trace.str(t.name));
                    out.extend_from_slice(&trace.counters.value[i].to_le_bytes());
                }
            }
        }
        let bits = ((out.len() - start) * 8) as u64;
        out[sizes_at..sizes_at + 8].copy_from_slice(&bits.to_le_bytes());
        out[sizes_at + 8..sizes_at + 16].copy_from_slice(&bits.to_le_bytes());
    }
}

#[cfg(test)]
mod tests;
