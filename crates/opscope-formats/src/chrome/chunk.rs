//! The hand-over between the thread that reads and scans events and the one that
//! builds the model: a piece of the document's text with its events as spans of that
//! text, so the text can be owned (decompressed data) or borrowed (a mapped file) and
//! the events still borrow nothing across threads.

use std::borrow::Cow;

use super::parse::{Id, Id2, RawEvent};

/// Part of a string field: a range of the chunk's text, or of its side buffer for
/// strings that had escapes.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Span {
    pub start: u32,
    pub len: u32,
    pub side: bool,
}

#[derive(Copy, Clone, Debug)]
pub(crate) enum IdSpan {
    Int(i64),
    Str(Span),
}

/// One element of the event array, as spans.
#[derive(Default, Debug)]
pub(crate) struct Rec {
    /// Where the element starts in the chunk's text.
    pub offset: u32,
    pub not_an_object: bool,
    pub ph: Option<Span>,
    pub name: Option<Span>,
    pub cat: Option<Span>,
    pub bp: Option<Span>,
    pub s: Option<Span>,
    pub ts: Option<Span>,
    pub dur: Option<Span>,
    pub args: Option<Span>,
    pub pid: Option<IdSpan>,
    pub tid: Option<IdSpan>,
    pub id: Option<IdSpan>,
    pub id2_local: Option<IdSpan>,
    pub id2_global: Option<IdSpan>,
}

/// Events being gathered by the splitter, before their text is handed over.
#[derive(Default)]
pub(crate) struct Batch {
    pub events: Vec<Rec>,
    /// Decoded strings (those that had escapes).
    pub side: String,
    /// Where the chunk's text starts in the scanned bytes: set by the caller, or else at
    /// the first event found.
    pub origin: Option<usize>,
    /// Where the last event found ends in the scanned bytes.
    pub end: usize,
}

/// Consecutive events and the text they are spans of.
pub(crate) struct Chunk<'a> {
    pub text: Cow<'a, str>,
    side: String,
    pub events: Vec<Rec>,
    /// Offset of the text's first byte in the (decompressed) document.
    pub base: u64,
}

/// Buffers of a used chunk, for the next ones.
#[derive(Default)]
pub(crate) struct Spare {
    pub events: Vec<Rec>,
    pub side: String,
    pub text: Option<Vec<u8>>,
}

impl<'a> Chunk<'a> {
    pub fn new(text: Cow<'a, str>, base: u64, events: Vec<Rec>, side: String) -> Chunk<'a> {
        Chunk {
            text,
            side,
            events,
            base,
        }
    }

    fn text_of(&self, span: Span) -> &str {
        let (start, end) = (span.start as usize, (span.start + span.len) as usize);
        if span.side {
            &self.side[start..end]
        } else {
            &self.text[start..end]
        }
    }

    fn id(&self, id: Option<IdSpan>) -> Option<Id<'_>> {
        Some(match id? {
            IdSpan::Int(i) => Id::Int(i),
            IdSpan::Str(s) => Id::Str(Cow::Borrowed(self.text_of(s))),
        })
    }

    /// The event of `rec`, borrowing this chunk; `None` for an array element that is
    /// not an object.
    pub fn event(&self, rec: &Rec) -> Option<RawEvent<'_>> {
        if rec.not_an_object {
            return None;
        }
        let text = |s: Option<Span>| s.map(|s| self.text_of(s));
        let cow = |s: Option<Span>| s.map(|s| Cow::Borrowed(self.text_of(s)));
        let id2 = (rec.id2_local.is_some() || rec.id2_global.is_some()).then(|| Id2 {
            local: self.id(rec.id2_local),
            global: self.id(rec.id2_global),
        });
        Some(RawEvent {
            ph: cow(rec.ph),
            name: cow(rec.name),
            cat: cow(rec.cat),
            pid: self.id(rec.pid),
            tid: self.id(rec.tid),
            ts: text(rec.ts),
            dur: text(rec.dur),
            id: self.id(rec.id),
            id2,
            bp: cow(rec.bp),
            s: cow(rec.s),
            args: text(rec.args),
        })
    }

    /// Gives the buffers back for reuse.
    pub fn into_spare(self) -> Spare {
        Spare {
            events: self.events,
            side: self.side,
            text: match self.text {
                Cow::Owned(text) => Some(text.into_bytes()),
                Cow::Borrowed(_) => None,
            },
        }
    }
}
