//! A second reader of Chrome trace JSON, slow and simple, for differential tests: serde
//! reads the whole document and each event, and the events go to the same model
//! builder as the fast reader's. Whatever the fast reader's splitting and scanning
//! become, on a document both accept they must give the same model, byte for byte.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use opscope_model::{SourceId, Trace};

use super::builder::Builder;
use super::chunk::{ArgEntries, ArgKind, ArgRec, Span, Texts};
use super::parse::Element;
use crate::error::ImportError;

/// The top level of a document: a bare event array, or an object whose `traceEvents`
/// holds them and whose other entries are metadata (raw JSON text).
#[derive(Default)]
struct Document<'a> {
    events: Option<Vec<&'a RawValue>>,
    metadata: Vec<(String, Vec<u8>)>,
}

impl<'de> de::Deserialize<'de> for Document<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Document<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a trace object or an event array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut events = Vec::new();
                while let Some(event) = seq.next_element::<&'de RawValue>()? {
                    events.push(event);
                }
                Ok(Document {
                    events: Some(events),
                    metadata: Vec::new(),
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut doc = Document::default();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    let value: &'de RawValue = map.next_value()?;
                    if key == "traceEvents" && value.get().starts_with('[') {
                        let events: Vec<&'de RawValue> =
                            serde_json::from_str(value.get()).map_err(de::Error::custom)?;
                        doc.events.get_or_insert_with(Vec::new).extend(events);
                    } else {
                        doc.metadata
                            .push((key.into_owned(), value.get().as_bytes().to_vec()));
                    }
                }
                Ok(doc)
            }
        }
        d.deserialize_any(V)
    }
}

/// An args object's entries in order, duplicates kept, as raw values.
struct Entries<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> de::Deserialize<'de> for Entries<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entries<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        d.deserialize_map(V)
    }
}

/// Imports `bytes` as [`super::import`] does, through serde instead of the fast
/// reader. Refuses what serde refuses (with no partial result to compare).
#[doc(hidden)]
pub fn import_reference(
    bytes: &[u8],
    path: &str,
    trace: &mut Trace,
) -> Result<SourceId, ImportError> {
    let syntax = |message: String| ImportError::Syntax {
        path: path.to_string(),
        offset: 0,
        message,
    };
    let doc: Document = serde_json::from_slice(bytes).map_err(|e| syntax(e.to_string()))?;
    let Some(events) = doc.events else {
        return Err(ImportError::UnknownFormat {
            path: path.to_string(),
            message: "no \"traceEvents\" array".into(),
        });
    };
    let source = super::new_source(trace, path);
    let mut builder = Builder::new(trace, source, path);
    let mut side = String::new();
    let mut entries = Vec::new();
    for raw in events {
        let text = raw.get();
        builder.event_offset = Some(text.as_ptr() as u64 - bytes.as_ptr() as u64);
        let element: Element = serde_json::from_str(text).map_err(|e| syntax(e.to_string()))?;
        let added = match element {
            Element::NotAnObject => {
                builder.malformed("an element of the event array that is not an object");
                Ok(())
            }
            Element::Empty => Ok(()),
            Element::Event(mut ev) => {
                side.clear();
                entries.clear();
                if let Some(args) = ev.args.filter(|a| a.starts_with('{')) {
                    let Entries(split) =
                        serde_json::from_str(args).map_err(|e| syntax(e.to_string()))?;
                    for (key, value) in split {
                        let key = push_span(&mut side, &key);
                        let raw = value.get();
                        let (value, kind) = if raw.starts_with('"') {
                            let decoded: String =
                                serde_json::from_str(raw).map_err(|e| syntax(e.to_string()))?;
                            (push_span(&mut side, &decoded), ArgKind::String)
                        } else if raw
                            .starts_with(['-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'])
                        {
                            let kind = raw.parse().map_or(ArgKind::Other, ArgKind::Int);
                            (push_span(&mut side, raw), kind)
                        } else {
                            (push_span(&mut side, raw), ArgKind::Other)
                        };
                        entries.push(ArgRec { key, value, kind });
                    }
                    ev.arg_entries = Some(ArgEntries {
                        entries: &entries,
                        texts: Texts::side_only(&side),
                    });
                }
                builder.add(&ev)
            }
        };
        if let Err(e) = added {
            builder.finish()?;
            return Err(e);
        }
        builder.index += 1;
    }
    builder.finish()?;
    super::apply_metadata(trace, source, &doc.metadata);
    Ok(source)
}

fn push_span(side: &mut String, text: &str) -> Span {
    let start = side.len() as u32;
    side.push_str(text);
    Span {
        start,
        len: text.len() as u32,
        side: true,
    }
}
