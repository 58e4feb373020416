//! Chrome trace JSON, as PyTorch's profiler (Kineto, both schemas, and the legacy
//! autograd profiler), TensorFlow 1.x timelines and many other tools write it: the
//! object form `{"traceEvents": [...]}` and the bare array form.

mod builder;
mod export;
mod kinds;
mod parse;

use std::fmt;

use opscope_model::args::ArgValue;
use opscope_model::{ClockDomain, LinearTransform, Source, SourceId, Trace};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::error::ImportError;
use builder::Builder;
pub use export::export;
use parse::Element;

/// Imports one Chrome trace JSON document (already decompressed) as a new source.
pub fn import(bytes: &[u8], path: &str, trace: &mut Trace) -> Result<SourceId, ImportError> {
    let clock_name = trace.intern("chrome-json");
    let clock = trace.add_clock(ClockDomain {
        name: clock_name,
        to_global: LinearTransform::IDENTITY,
        unix_offset_ns: None,
    });
    let source = trace.add_source(Source {
        path: path.to_string(),
        format: "chrome-json",
        clock,
        host: None,
        rank: None,
        world_size: None,
        metadata: opscope_model::ArgsId::NONE,
    });
    // Validating UTF-8 once up front lets the parser borrow every string without
    // checking each again.
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            return Err(ImportError::Syntax {
                path: path.to_string(),
                offset: e.valid_up_to() as u64,
                message: "not UTF-8 text: this is not a JSON trace, or it is corrupt".into(),
            })
        }
    };
    let mut builder = Builder::new(trace, source, path);
    // Parsing runs on a second thread and hands events over in batches, so that JSON
    // scanning and model building share the two cores of a typical machine.
    let (parsed, build_error) = std::thread::scope(|scope| {
        let (sender, batches) = std::sync::mpsc::sync_channel::<Vec<Element>>(4);
        // Emptied batches go back to the parser: no allocation per batch.
        let (recycler, recycled) = std::sync::mpsc::channel::<Vec<Element>>();
        let parser = scope.spawn(move || {
            let mut top = TopLevel {
                sender,
                recycled,
                batch: Vec::with_capacity(BATCH),
                metadata: Vec::new(),
                saw_events: false,
            };
            let mut de = serde_json::Deserializer::from_str(text);
            let parsed = (&mut de).deserialize_any(&mut top).and_then(|()| de.end());
            top.flush();
            parsed.map(|()| (top.metadata, top.saw_events))
        });
        let mut build_error = None;
        for mut batch in batches.iter() {
            for element in batch.drain(..) {
                let added = match element {
                    Element::Event(ev) => {
                        // Any borrowed field tells where the event is in the input.
                        builder.event_offset = [ev.ts, ev.args, ev.dur]
                            .into_iter()
                            .flatten()
                            .next()
                            .map(|raw| {
                                (raw.get().as_ptr() as usize).wrapping_sub(text.as_ptr() as usize)
                            });
                        builder.add(ev)
                    }
                    Element::NotAnObject => {
                        builder.malformed("an element of the event array that is not an object");
                        Ok(())
                    }
                };
                if let Err(e) = added {
                    build_error = Some(e);
                    break;
                }
                builder.index += 1;
            }
            if build_error.is_some() {
                // Dropping the receiver stops the parser at its next batch.
                break;
            }
            let _ = recycler.send(batch);
        }
        drop(batches);
        let parsed = parser
            .join()
            .unwrap_or_else(|_| Err(de::Error::custom("the JSON parser thread failed")));
        (parsed, build_error)
    });
    if let Some(error) = build_error {
        builder.finish()?;
        return Err(error);
    }
    match parsed {
        Ok((metadata, false)) => {
            let keys: Vec<&str> = metadata.iter().take(6).map(|(k, _)| k.as_str()).collect();
            Err(ImportError::UnknownFormat {
                path: path.to_string(),
                message: format!(
                    "a JSON object with no \"traceEvents\" array, so not a Chrome trace (its keys: {})",
                    keys.join(", ")
                ),
            })
        }
        Ok((metadata, true)) => {
            builder.finish()?;
            apply_metadata(trace, source, &metadata);
            Ok(source)
        }
        Err(e) => {
            // What was read before the error stays in the trace, sorted and usable.
            builder.finish()?;
            Err(syntax_error(path, bytes, &e))
        }
    }
}

/// Events per hand-over between the parser and the builder.
const BATCH: usize = 1024;

/// A serde error as one line with the byte offset it happened at.
fn syntax_error(path: &str, bytes: &[u8], e: &serde_json::Error) -> ImportError {
    // serde_json reports 1-based lines and byte columns; turn them into an offset.
    let mut offset = 0usize;
    if e.line() > 1 {
        offset = memchr::memchr_iter(b'\n', bytes)
            .nth(e.line() - 2)
            .map_or(bytes.len(), |nl| nl + 1);
    }
    offset = (offset + e.column().saturating_sub(1)).min(bytes.len());
    let message = match e.classify() {
        serde_json::error::Category::Eof => {
            format!(
                "the JSON ends early ({} bytes in all): the file looks truncated",
                bytes.len()
            )
        }
        _ => {
            // serde's message ends with " at line L column C": the offset says it better.
            let text = e.to_string();
            text.rsplit_once(" at line ")
                .map_or(text.clone(), |(m, _)| m.to_string())
        }
    };
    ImportError::Syntax {
        path: path.to_string(),
        offset: offset as u64,
        message,
    }
}

/// File-level keys (everything but `traceEvents`), kept as source metadata.
fn apply_metadata(trace: &mut Trace, source_id: SourceId, metadata: &[(String, Box<RawValue>)]) {
    let source = source_id.index();
    let mut entries = Vec::new();
    for (key, raw) in metadata {
        let text = raw.get().trim();
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

/// Visits the document: an object (whose `traceEvents` are streamed and other keys
/// kept) or a bare array of events.
struct TopLevel<'de> {
    sender: std::sync::mpsc::SyncSender<Vec<Element<'de>>>,
    recycled: std::sync::mpsc::Receiver<Vec<Element<'de>>>,
    batch: Vec<Element<'de>>,
    metadata: Vec<(String, Box<RawValue>)>,
    saw_events: bool,
}

impl<'de> TopLevel<'de> {
    /// Hands the batch to the builder; false when the builder has stopped.
    fn flush(&mut self) -> bool {
        if self.batch.is_empty() {
            return true;
        }
        let empty = self
            .recycled
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BATCH));
        let batch = std::mem::replace(&mut self.batch, empty);
        self.sender.send(batch).is_ok()
    }
}

impl<'de> Visitor<'de> for &mut TopLevel<'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a trace object with \"traceEvents\", or an array of events")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == "traceEvents" {
                self.saw_events = true;
                map.next_value_seed(Events { top: &mut *self })?;
            } else {
                let value: Box<RawValue> = map.next_value()?;
                self.metadata.push((key.into_owned(), value));
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        self.saw_events = true;
        Events { top: self }.visit_seq(seq)
    }
}

/// Streams the event array to the builder in batches.
struct Events<'a, 'de> {
    top: &'a mut TopLevel<'de>,
}

impl<'de> DeserializeSeed<'de> for Events<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Events<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of trace events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(element) = seq.next_element::<Element<'de>>()? {
            self.top.batch.push(element);
            if self.top.batch.len() == BATCH && !self.top.flush() {
                return Err(de::Error::custom("stopped by the builder"));
            }
        }
        Ok(())
    }
}
