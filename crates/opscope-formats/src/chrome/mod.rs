//! Chrome trace JSON, as PyTorch's profiler (Kineto, both schemas, and the legacy
//! autograd profiler), TensorFlow 1.x timelines and many other tools write it: the
//! object form `{"traceEvents": [...]}` and the bare array form.

mod builder;
mod chunk;
mod export;
mod fetch;
mod flows;
pub(crate) mod kinds;
mod parse;
mod reference;
mod scan;
mod split;

use std::borrow::Cow;
use std::io::Read;
use std::sync::mpsc::{Receiver, SyncSender};
use std::thread::Thread;

use opscope_model::args::ArgValue;
use opscope_model::{ClockDomain, LinearTransform, Source, SourceId, Trace};

use crate::error::ImportError;
use crate::map_ahead::MapAhead;
use builder::Builder;
use chunk::{Batch, Chunk, Part, Spare};
pub use export::{export, export_selected};
use fetch::{Fetcher, Piece, Window};
pub use reference::import_reference;
use split::Splitter;

/// Imports one Chrome trace JSON document, already in memory (decompressed), as a new
/// source. What was read before an error stays in `trace`, sorted and usable.
/// Chrome trace JSON (`.json`, `.json.gz`), PyTorch/Kineto and TensorFlow timelines
/// among them, in the registry.
pub struct ChromeFormat;

impl crate::importer::Importer for ChromeFormat {
    fn name(&self) -> &'static str {
        "chrome-json"
    }

    fn looks_for(&self) -> &'static str {
        ".json, .json.gz"
    }

    fn claims_name(&self, name: &str) -> bool {
        name.ends_with(".json") || name.ends_with(".json.gz")
    }

    fn claims_bytes(&self, _path: &str, head: &[u8]) -> bool {
        looks_like_json(head)
    }

    fn bytes_importer(&self) -> Option<crate::importer::BytesImporter> {
        Some(import)
    }

    fn reader_importer(&self) -> Option<crate::importer::ReaderImporter> {
        Some(|reader, path, trace| import_reader(reader, path, trace))
    }

    fn file_importer(&self) -> Option<crate::importer::FileImporter> {
        Some(import_file)
    }
}

/// Whether the first (decompressed) bytes of a file are JSON: text (no control bytes
/// but whitespace in the first 256) whose first character is `{` or `[`. A Perfetto
/// trace also may start with a newline (its packet key, 0x0a), but its packets hold
/// control bytes at once.
pub fn looks_like_json(head: &[u8]) -> bool {
    let head = &head[..head.len().min(256)];
    let is_text = head
        .iter()
        .all(|&b| b >= 0x20 || matches!(b, b'\n' | b'\r' | b'\t'));
    let first = head.iter().copied().find(|b| !b.is_ascii_whitespace());
    is_text && matches!(first, Some(b'{' | b'['))
}

pub fn import(bytes: &[u8], path: &str, trace: &mut Trace) -> Result<SourceId, ImportError> {
    let chunk_bytes = if bytes.len() >= LARGE_INPUT {
        CHUNK_BYTES
    } else {
        SMALL_CHUNK_BYTES
    };
    run(Input::Bytes(bytes), path, trace, chunk_bytes)
}

/// Imports a plain Chrome trace JSON file, reading it with `read` in pieces on a thread
/// of its own: cheaper than a mapping of it (no page faults or unmapping; 1 GB less peak
/// memory at 1 GB, the mapped pages counting in it), and a file cut meanwhile is an
/// error naming the byte, not a fault. Offsets in messages are offsets in the file.
pub fn import_file(
    file: std::fs::File,
    path: &str,
    trace: &mut Trace,
) -> Result<SourceId, ImportError> {
    let len = file.metadata().map_or(0, |m| m.len());
    let chunk_bytes = if len >= LARGE_INPUT as u64 {
        CHUNK_BYTES
    } else {
        SMALL_CHUNK_BYTES
    };
    let input = Input::Stream {
        reader: Box::new(WholeFile {
            file,
            opened_len: len,
            read: 0,
        }),
        in_file: true,
    };
    run(input, path, trace, chunk_bytes)
}

/// A file read to its end that tells one cut short meanwhile (a profiler writing it
/// again) from one that ends there: an end before the length it had when opened is an
/// error of kind `UnexpectedEof`.
struct WholeFile {
    file: std::fs::File,
    opened_len: u64,
    read: u64,
}

impl Read for WholeFile {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read(buf)?;
        if n == 0 && !buf.is_empty() && self.read < self.opened_len {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "the file was cut short while it was read (it had {} bytes when opened)",
                    self.opened_len
                ),
            ));
        }
        self.read += n as u64;
        Ok(n)
    }
}

/// Imports a Chrome trace JSON document from a stream (e.g. a gzip decoder), reading it
/// in pieces: the whole text is never held in memory.
pub fn import_reader(
    reader: impl Read + Send,
    path: &str,
    trace: &mut Trace,
) -> Result<SourceId, ImportError> {
    run(
        Input::Stream {
            reader: Box::new(reader),
            in_file: false,
        },
        path,
        trace,
        SMALL_CHUNK_BYTES,
    )
}

/// `import_reader` handing events over every `chunk_bytes` bytes instead of every
/// mebibyte, so that tests and fuzzing reach the seams between pieces of the text with
/// small inputs.
#[doc(hidden)]
pub fn import_reader_in_pieces(
    reader: impl Read + Send,
    path: &str,
    trace: &mut Trace,
    chunk_bytes: usize,
) -> Result<SourceId, ImportError> {
    run(
        Input::Stream {
            reader: Box::new(reader),
            in_file: false,
        },
        path,
        trace,
        chunk_bytes.max(1),
    )
}

enum Input<'a> {
    Bytes(&'a [u8]),
    Stream {
        reader: Box<dyn Read + Send + 'a>,
        /// Whether offsets in the text are offsets in the file (a plain file), not in
        /// what an inflating reader gives.
        in_file: bool,
    },
}

/// Bytes of events per hand-over between the reading and the building thread, for
/// inputs of [`LARGE_INPUT`] bytes or more: a few chunks and their parsed events are in
/// memory at a time, which on these is little beside the model, and smaller chunks
/// cost 2–4 % more CPU (1 GB trace, 256 KiB against 1 MiB).
const CHUNK_BYTES: usize = 1 << 20;
/// The same for smaller inputs and streams (a gzip decoder, whose inflating bounds the
/// load anyway): the chunks in flight were 10–20 MiB of a 30–40 MiB peak on the shared
/// 30–90 MB traces; with these, 7–10 MiB less.
const SMALL_CHUNK_BYTES: usize = 256 << 10;
/// See [`CHUNK_BYTES`].
const LARGE_INPUT: usize = 256 << 20;

/// The largest single event or top-level value accepted: the string limit of the model
/// plus room for the rest of the event.
const MAX_VALUE_BYTES: usize = opscope_model::StringTable::MAX_STRING + (64 << 20);

/// What the reading thread found besides events.
struct Outline {
    metadata: Vec<(String, Vec<u8>)>,
    saw_events: bool,
}

/// The source a document's events go to, on a clock of its own.
fn new_source(trace: &mut Trace, path: &str) -> SourceId {
    let clock_name = trace.intern("chrome-json");
    let clock = trace.add_clock(ClockDomain {
        name: clock_name,
        to_global: LinearTransform::IDENTITY,
        unix_offset_ns: None,
    });
    trace.add_source(Source {
        path: path.to_string(),
        format: crate::importer::Importer::name(&ChromeFormat).into(),
        clock,
        host: None,
        rank: None,
        world_size: None,
        metadata: opscope_model::ArgsId::NONE,
    })
}

fn run(
    input: Input,
    path: &str,
    trace: &mut Trace,
    chunk_bytes: usize,
) -> Result<SourceId, ImportError> {
    let source = new_source(trace, path);
    // A stream's offsets are in its inflated text, not in the file the load counts.
    let offsets_in_file = match &input {
        Input::Bytes(_) => true,
        Input::Stream { in_file, .. } => *in_file,
    };
    let watched = crate::watch::is_watched();
    let mut builder = Builder::new(trace, source, path);
    // A large mapped input's pages are mapped in ahead of the reader, by a thread of
    // their own.
    let ahead = match &input {
        Input::Bytes(bytes) if bytes.len() >= LARGE_INPUT => Some(MapAhead::new(bytes)),
        _ => None,
    };
    // One thread reads (inflates), splits and parses events; this one builds the model
    // from them: the two cores of a typical machine share the work, and only a few
    // chunks of text are in memory at a time (two waiting: four held 2 MB more at the
    // peak of a 50 MB trace's load and bought no time).
    let (outline, build_error) = std::thread::scope(|scope| {
        let (sender, chunks) = std::sync::mpsc::sync_channel::<Chunk>(2);
        let (recycler, recycled) = std::sync::mpsc::channel::<Spare>();
        let mapper = ahead
            .as_ref()
            .map(|ahead| (ahead, scope.spawn(|| ahead.run()).thread().clone()));
        let map_ahead = mapper.clone();
        let reader = scope
            .spawn(move || read_events(input, path, chunk_bytes, &sender, &recycled, map_ahead));
        let mut build_error = None;
        'chunks: for chunk in chunks.iter() {
            for rec in chunk.events() {
                builder.event_offset = Some(chunk.base + rec.offset as u64);
                let added = match chunk.complete(rec) {
                    Some(complete) => builder.add_complete(&complete),
                    // Nothing to import, and no damage to report.
                    None if rec.empty => Ok(()),
                    None => match chunk.event(rec) {
                        Some(ev) => builder.add(&ev),
                        None => {
                            builder
                                .malformed("an element of the event array that is not an object");
                            Ok(())
                        }
                    },
                };
                if let Err(e) = added {
                    build_error = Some(e);
                    // Dropping the receiver stops the reader at its next chunk.
                    break 'chunks;
                }
                builder.index += 1;
            }
            if watched {
                if offsets_in_file {
                    crate::watch::read_in_file(chunk.base + chunk.text.len() as u64);
                } else {
                    crate::watch::read_to_position();
                }
                crate::watch::offer(builder.trace, move |t| builder::assign_devices(t, source));
            }
            let _ = recycler.send(chunk.into_spare());
        }
        drop(chunks);
        let outline = reader.join();
        if let Some((ahead, thread)) = &mapper {
            ahead.stop(thread);
        }
        let outline = outline.map_err(|_| ImportError::Io {
            path: path.to_string(),
            message: "the reading thread failed".into(),
        });
        (outline, build_error)
    });
    if let Some(error) = build_error {
        builder.finish()?;
        return Err(error);
    }
    match outline {
        Ok((Outline { metadata, .. }, Some(e))) => {
            builder.finish()?;
            apply_metadata(trace, source, &metadata);
            Err(e)
        }
        Ok((
            Outline {
                metadata,
                saw_events: false,
            },
            None,
        )) => {
            let keys: Vec<&str> = metadata.iter().take(6).map(|(k, _)| k.as_str()).collect();
            Err(ImportError::UnknownFormat {
                path: path.to_string(),
                message: format!(
                    "a JSON object with no \"traceEvents\" array, so not a Chrome trace (its keys: {})",
                    keys.join(", ")
                ),
            })
        }
        Ok((Outline { metadata, .. }, None)) => {
            builder.finish()?;
            apply_metadata(trace, source, &metadata);
            Ok(source)
        }
        Err(e) => {
            builder.finish()?;
            Err(e)
        }
    }
}

/// The reading thread: splits the document into events, scans them and sends them on
/// in chunks; returns the top-level metadata, and the error that stopped it, if one
/// did. The metadata before an error is kept: Kineto writes `distributedInfo` (the
/// rank) before the events, so a file cut in its events still knows its rank.
fn read_events<'a>(
    input: Input<'a>,
    path: &str,
    chunk_bytes: usize,
    sender: &SyncSender<Chunk<'a>>,
    recycled: &Receiver<Spare>,
    map_ahead: Option<(&MapAhead, Thread)>,
) -> (Outline, Option<ImportError>) {
    let mut splitter = Splitter::new(MAX_VALUE_BYTES);
    let read = split_input(
        input,
        path,
        chunk_bytes,
        sender,
        recycled,
        map_ahead,
        &mut splitter,
    );
    let not_utf8 = splitter
        .metadata
        .iter()
        .find(|(_, value)| std::str::from_utf8(value).is_err())
        .map(|(key, _)| ImportError::Syntax {
            path: path.to_string(),
            offset: 0,
            message: format!("the value of \"{key}\" is not UTF-8 text"),
        });
    splitter
        .metadata
        .retain(|(_, value)| std::str::from_utf8(value).is_ok());
    let outline = Outline {
        metadata: splitter.metadata,
        saw_events: splitter.saw_events,
    };
    (outline, read.err().or(not_utf8))
}

/// [`read_events`]' work: every event of `input` through `splitter` and on to the
/// builder.
fn split_input<'a>(
    input: Input<'a>,
    path: &str,
    chunk_bytes: usize,
    sender: &SyncSender<Chunk<'a>>,
    recycled: &Receiver<Spare>,
    map_ahead: Option<(&MapAhead, Thread)>,
    splitter: &mut Splitter,
) -> Result<(), ImportError> {
    let syntax = |offset: u64, message: String| ImportError::Syntax {
        path: path.to_string(),
        offset,
        message,
    };
    let stopped = || ImportError::Io {
        path: path.to_string(),
        message: "stopped".into(),
    };
    let mut pool = Pool {
        recycled,
        parts: Vec::new(),
        texts: Vec::new(),
    };
    let mut batch = Batch::default();
    // Sends the events of `batch`, whose text is `text` (starting at `base` in the
    // document); the batch is left empty, with buffers from the pool.
    let send = |batch: &mut Batch, pool: &mut Pool, text: Cow<'a, str>, base: u64| {
        let mut next = pool.part();
        next.clear();
        let full = std::mem::replace(&mut batch.part, next);
        batch.origin = None;
        batch.end = 0;
        sender
            .send(Chunk::new(text, base, full))
            .map_err(|_| stopped())
    };
    match input {
        Input::Bytes(bytes) => {
            let mut offset = 0;
            while offset < bytes.len() || !splitter.is_done() {
                let rest = &bytes[offset..];
                let scanned = splitter.scan(rest, true, chunk_bytes, &mut batch);
                if let Some(origin) = batch.origin.filter(|_| !batch.part.events.is_empty()) {
                    // Events before an error are still delivered.
                    let text = utf8(&rest[origin..batch.end]).map_err(|valid| {
                        syntax((offset + origin + valid) as u64, NOT_UTF8.into())
                    })?;
                    send(
                        &mut batch,
                        &mut pool,
                        Cow::Borrowed(text),
                        (offset + origin) as u64,
                    )?;
                }
                let consumed =
                    scanned.map_err(|e| syntax((offset + e.offset) as u64, e.message))?;
                if consumed == 0 {
                    break;
                }
                offset += consumed;
                if let Some((ahead, mapper)) = &map_ahead {
                    ahead.reached(offset, mapper);
                }
            }
        }
        Input::Stream { reader, in_file } => std::thread::scope(|scope| {
            let fetcher = Fetcher::spawn(scope, reader, chunk_bytes);
            let mut window = Window::default();
            let mut want = chunk_bytes;
            let mut at_eof = false;
            let mut read_error = None;
            loop {
                for text in pool.returned_texts() {
                    fetcher.give_back(text);
                }
                while !at_eof && window.filled < want {
                    match fetcher.next() {
                        Piece::Data { buf, start, len } => {
                            window.take(buf, start, len, &fetcher, chunk_bytes)
                        }
                        Piece::End => at_eof = true,
                        Piece::Failed(e) => {
                            // What was read is still scanned and delivered below.
                            read_error = Some(e);
                            break;
                        }
                    }
                }
                // The chunk's text is the window from its start, so spans need no shift.
                batch.origin = Some(0);
                let scanned = splitter.scan(window.text(), at_eof, usize::MAX, &mut batch);
                let base = window.base;
                let handed_over = !batch.part.events.is_empty();
                if handed_over {
                    // Hand the window itself over, keeping what was not consumed (after
                    // an error, nothing more is read).
                    let rest = *scanned.as_ref().unwrap_or(&batch.end);
                    let mut text = window.hand_over(rest);
                    text.truncate(batch.end);
                    let valid = utf8(&text).map(str::len);
                    let text = match valid {
                        // SAFETY: `utf8` has just checked these very bytes.
                        Ok(_) => unsafe { String::from_utf8_unchecked(text) },
                        Err(valid) => return Err(syntax(base + valid as u64, NOT_UTF8.into())),
                    };
                    send(&mut batch, &mut pool, Cow::Owned(text), base)?;
                }
                let consumed = scanned.map_err(|e| syntax(base + e.offset as u64, e.message))?;
                window.consumed(consumed, !handed_over);
                if let Some(e) = read_error {
                    let message = if in_file && e.kind() == std::io::ErrorKind::UnexpectedEof {
                        e.to_string()
                    } else if in_file {
                        format!("the file cannot be read further ({e})")
                    } else {
                        format!("the data cannot be read further ({e}): a corrupt or truncated compressed file")
                    };
                    return Err(syntax(window.base + window.filled as u64, message));
                }
                if at_eof {
                    break;
                }
                // A value longer than the window: read more before scanning again.
                // (No more than one byte past the limit is held to tell it is past.)
                want = if consumed == 0 {
                    (window.filled * 2).min(MAX_VALUE_BYTES + 1)
                } else {
                    chunk_bytes
                };
                if window.filled > MAX_VALUE_BYTES {
                    return Err(syntax(
                        window.base,
                        format!(
                            "a value longer than the limit of {MAX_VALUE_BYTES} bytes starts here"
                        ),
                    ));
                }
            }
            Ok(())
        })?,
    }
    Ok(())
}

/// Buffers the builder gave back, kept apart by use so that none is dropped: the event
/// lists and side text of a batch, and window texts.
struct Pool<'r> {
    recycled: &'r Receiver<Spare>,
    parts: Vec<Part>,
    texts: Vec<Vec<u8>>,
}

impl Pool<'_> {
    fn take_returned(&mut self) {
        while let Ok(spare) = self.recycled.try_recv() {
            self.parts.push(spare.part);
            if let Some(text) = spare.text {
                self.texts.push(text);
            }
        }
    }

    fn part(&mut self) -> Part {
        self.take_returned();
        self.parts.pop().unwrap_or_default()
    }

    /// Window texts the builder gave back.
    fn returned_texts(&mut self) -> std::vec::Drain<'_, Vec<u8>> {
        self.take_returned();
        self.texts.drain(..)
    }
}

/// The text, or how many bytes of it are valid UTF-8. Checked with SIMD (simdutf8): the
/// standard library's check was 4.7 % of a load's CPU time, every byte of the trace
/// passing through it.
fn utf8(bytes: &[u8]) -> Result<&str, usize> {
    simdutf8::basic::from_utf8(bytes)
        .map_err(|_| std::str::from_utf8(bytes).map_or_else(|e| e.valid_up_to(), str::len))
}

const NOT_UTF8: &str = "not UTF-8 text: this is not a JSON trace, or it is corrupt";

/// serde's message without its " at line L column C" tail: we give byte offsets.
pub(crate) fn serde_message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    text.rsplit_once(" at line ")
        .map_or(text.clone(), |(m, _)| m.to_string())
}

/// File-level keys (everything but `traceEvents`), kept as source metadata.
fn apply_metadata(trace: &mut Trace, source_id: SourceId, metadata: &[(String, Vec<u8>)]) {
    let source = source_id.index();
    let mut entries = Vec::new();
    for (key, raw) in metadata {
        let Ok(text) = std::str::from_utf8(raw) else {
            continue;
        };
        let text = text.trim();
        match key.as_str() {
            "baseTimeNanoseconds" => {
                if let Ok(base) = text.parse::<i64>() {
                    let clock = trace.sources[source].clock;
                    trace.clocks[clock.0 as usize].unix_offset_ns = Some(base);
                }
            }
            "distributedInfo" => {
                #[derive(serde::Deserialize)]
                struct Distributed {
                    rank: Option<u32>,
                    world_size: Option<u32>,
                }
                if let Ok(info) = serde_json::from_str::<Distributed>(text) {
                    trace.sources[source].rank = info.rank;
                    trace.sources[source].world_size = info.world_size;
                }
            }
            "host_name" => {
                if let Ok(host) = serde_json::from_str::<String>(text) {
                    let host = trace.intern(&host);
                    trace.sources[source].host = Some(host);
                }
            }
            "deviceProperties" => {
                #[derive(serde::Deserialize)]
                struct Props {
                    id: Option<u32>,
                    name: Option<String>,
                }
                if let Ok(props) = serde_json::from_str::<Vec<Props>>(text) {
                    for p in props {
                        if let (Some(id), Some(name)) = (p.id, p.name) {
                            let name = trace.intern(&name);
                            if let Some(d) = trace
                                .devices
                                .iter_mut()
                                .find(|d| d.source == source_id && d.index == id)
                            {
                                d.name = Some(name);
                            }
                        }
                    }
                }
            }
            _ => {}
        }
        if text.len() > opscope_model::StringTable::MAX_STRING {
            continue;
        }
        let key = trace.intern(key);
        let value = match serde_json::from_str::<String>(text) {
            Ok(s) => ArgValue::Str(trace.intern(&s)),
            Err(_) => match text.parse::<i64>() {
                Ok(i) => ArgValue::Int(i),
                Err(_) => ArgValue::Json(trace.intern(text)),
            },
        };
        entries.push((key, value));
    }
    let mut w = trace.args.writer();
    for (k, v) in entries {
        w.push(k, v);
    }
    trace.sources[source].metadata = w.finish();
}

/// Exact µs → ns, for other formats' tests that read Chrome JSON.
#[cfg(test)]
pub(crate) fn micros_to_ns_for_tests(raw: &str) -> Option<i64> {
    parse::micros_to_ns(raw)
}

#[cfg(test)]
mod tests {
    use opscope_model::{SourceId, Trace};

    /// Both imports succeeded, or both failed with the same message.
    fn assert_same_outcome(
        got: &Result<SourceId, String>,
        expected: &Result<SourceId, String>,
        what: &str,
    ) {
        assert_eq!(
            got.is_ok(),
            expected.is_ok(),
            "{what}: {got:?} {expected:?}"
        );
        if let (Err(a), Err(b)) = (got, expected) {
            assert_eq!(a, b, "{what}");
        }
    }

    /// A plain file read with `read` in pieces (on a thread of its own, each piece
    /// after room for the event the last one cut) reads as its bytes do whole: the same
    /// model, or the same error at the same offset where the file is cut or damaged.
    #[test]
    fn a_file_reads_as_its_bytes_do() {
        let mut doc = String::from("{\"traceEvents\": [\n");
        for i in 0..20_000 {
            // Names of many lengths, so that pieces end anywhere in an event.
            let name = "n".repeat(i % 97);
            doc.push_str(&format!(
                "{{\"ph\": \"X\", \"pid\": 1, \"tid\": {}, \"ts\": {i}.5, \"dur\": 1, \"name\": \"{name}\", \"args\": {{\"k\": {i}}}}},\n",
                i % 3
            ));
        }
        doc.push_str("{\"ph\": \"i\", \"ts\": 1, \"pid\": 1}]}");
        let whole = doc.as_bytes();
        let mut damaged = whole.to_vec();
        damaged[700_000] = b'}';
        let mut not_utf8 = whole.to_vec();
        not_utf8[1_500_000] = 0xff;
        let cases: [(&str, &[u8]); 5] = [
            ("whole", whole),
            ("cut in the second piece", &whole[..400_000]),
            ("cut near the end", &whole[..whole.len() - 3]),
            ("damaged", &damaged),
            ("not UTF-8", &not_utf8),
        ];
        let path = std::env::temp_dir().join(format!("opscope-file-{}.json", std::process::id()));
        for (what, bytes) in cases {
            std::fs::write(&path, bytes).unwrap();
            let mut from_bytes = Trace::new();
            let expected =
                super::import(bytes, "t.json", &mut from_bytes).map_err(|e| e.to_string());
            let mut from_file = Trace::new();
            let file = std::fs::File::open(&path).unwrap();
            let got = super::import_file(file, "t.json", &mut from_file).map_err(|e| e.to_string());
            assert_same_outcome(&got, &expected, what);
            // Text that is not UTF-8 drops the events of the chunk it is in, and the
            // chunks differ (a piece read, or a budget of events).
            if what != "not UTF-8" {
                assert_eq!(
                    opscope_model::compare::first_difference(&from_file, &from_bytes),
                    None,
                    "{what}"
                );
            }
            assert!(from_file.slices.len() > 1000, "{what}");
        }
        let _ = std::fs::remove_file(&path);
    }

    /// Reading a document whole and as a stream in pieces of every small size gives the
    /// same outcome, the same error offset and the same events, including around errors
    /// that fall in a later piece than the last event (found by fuzzing: a stale end
    /// of the previous piece was used to cut the window).
    /// TensorFlow's and xprof's trace writers end the event array with `{}` (every JAX
    /// `*.trace.json.gz`): nothing to import and nothing damaged, so no warning, where
    /// an object with no field of an event still is one.
    #[test]
    fn the_empty_object_that_ends_xprofs_arrays_is_no_damage() {
        let event = r#"{"ph":"X","pid":1,"tid":1,"ts":1,"dur":2,"name":"a"}"#;
        for (events, malformed) in [
            (format!("{event},{{}}"), 0),
            (format!("{{ }},{event}"), 0),
            (format!("{event},{{\"Ph\":\"X\"}}"), 1),
        ] {
            let doc = format!("{{\"traceEvents\":[{events}]}}");
            for reference in [false, true] {
                let mut trace = Trace::new();
                let read = if reference {
                    super::reference::import_reference(doc.as_bytes(), "t.json", &mut trace)
                } else {
                    super::import(doc.as_bytes(), "t.json", &mut trace)
                };
                read.expect("the document reads");
                let what = format!("{events} (reference reader: {reference})");
                assert_eq!(trace.slices.len(), 1, "{what}");
                assert_eq!(trace.repairs.malformed_events, malformed, "{what}");
                assert_eq!(trace.warnings.len() as u64, malformed, "{what}");
            }
        }
    }

    #[test]
    fn pieces_of_any_size_read_like_the_whole() {
        let docs: [&[u8]; 6] = [
            br#"{"traceEvents": [{"ph": "C", "pid": 1, "ts": 826, "name": "c", "args": {"value": 10}},
                {"ph": "X", "pid": 1, "tid": 2, "ts": 1, "dur": 2, "name": "a\"b"}]}"#,
            b"{\"traceEvents\": [{\"ph\": \"i\", \"ts\": 1, \"pid\": 1},\x0c   {\"ph\": \"i\"}]}",
            br#"[{"ph": "X", "ts": 1, "dur": 1, "pid": 1, "tid": 1, "name": "x"}, 12, "s", 3.5]"#,
            br#"{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}, {"ph": "X", "ts": tru}]}"#,
            br#"{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}, {"ph": "X", "ts": 2"#,
            br#"{"meta": [1, {"a": "]"}], "traceEvents": [{"ph": "i", "ts": 5, "pid": 1}], "x": 1}"#,
        ];
        for doc in docs {
            let mut whole = Trace::new();
            let expected = super::import(doc, "t.json", &mut whole).map_err(|e| e.to_string());
            for pieces in 1..=doc.len() + 1 {
                let mut streamed = Trace::new();
                let got = super::import_reader_in_pieces(doc, "t.json", &mut streamed, pieces)
                    .map_err(|e| e.to_string());
                let shown = String::from_utf8_lossy(doc);
                assert_same_outcome(&got, &expected, &format!("{shown} in pieces of {pieces}"));
                assert_eq!(
                    streamed.slices.len(),
                    whole.slices.len(),
                    "{shown} {pieces}"
                );
                assert_eq!(
                    streamed.instants.len(),
                    whole.instants.len(),
                    "{shown} {pieces}"
                );
                assert_eq!(
                    streamed.counters.len(),
                    whole.counters.len(),
                    "{shown} {pieces}"
                );
            }
        }
    }
}
