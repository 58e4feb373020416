//! The hand-over between the thread that reads and scans events and the one that
//! builds the model: a piece of the document's text with its events as spans of that
//! text, so the text can be owned (decompressed data) or borrowed (a mapped file) and
//! the events still borrow nothing across threads.

use std::borrow::Cow;

use super::parse::{Id, Id2, Micros, RawEvent};

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

/// A `ts` or `dur`: converted to nanoseconds already, or its text.
#[derive(Copy, Clone, Debug)]
pub(crate) enum MicrosSpan {
    Ns(i64),
    Text(Span),
}

/// One entry of an event's `args` object, split on the reading thread: its key and its
/// value's text (a string's decoded, without quotes; anything else's raw JSON).
#[derive(Copy, Clone, Debug)]
pub(crate) struct ArgRec {
    pub key: Span,
    pub value: Span,
    pub kind: ArgKind,
}

#[derive(Copy, Clone, Debug, PartialEq)]
pub(crate) enum ArgKind {
    String,
    /// A number that is an `i64`, already parsed.
    Int(i64),
    /// Any other JSON value.
    Other,
}

/// One element of the event array, as spans.
#[derive(Default, Debug)]
pub(crate) struct Rec {
    /// Where the element starts in the chunk's text.
    pub offset: u32,
    pub not_an_object: bool,
    /// `{}`: the element TensorFlow's and xprof's trace writers end the array with.
    pub empty: bool,
    pub ph: Option<Span>,
    pub name: Option<Span>,
    pub cat: Option<Span>,
    pub bp: Option<Span>,
    pub s: Option<Span>,
    pub ts: Option<MicrosSpan>,
    pub dur: Option<MicrosSpan>,
    pub args: Option<Span>,
    /// When `args` is an object: its entries, a range of the chunk's [`ArgRec`]s.
    pub arg_entries: Option<(u32, u32)>,
    pub pid: Option<IdSpan>,
    pub tid: Option<IdSpan>,
    pub id: Option<IdSpan>,
    pub id2_local: Option<IdSpan>,
    pub id2_global: Option<IdSpan>,
}

/// Events being gathered by the splitter, before their text is handed over.
#[derive(Default)]
pub(crate) struct Batch {
    pub part: Part,
    /// Where the chunk's text starts in the scanned bytes: set by the caller, or else at
    /// the first event found.
    pub origin: Option<usize>,
    /// Where the last event found ends in the scanned bytes.
    pub end: usize,
}

/// Consecutive events and the text they are spans of.
pub(crate) struct Chunk<'a> {
    pub text: Cow<'a, str>,
    part: Part,
    /// Offset of the text's first byte in the (decompressed) document.
    pub base: u64,
}

/// The buffers a batch of events fills: handed over in a chunk, given back to be
/// refilled.
#[derive(Default)]
pub(crate) struct Part {
    pub events: Vec<Rec>,
    /// Decoded strings (those that had escapes).
    pub side: String,
    /// The entries of the events' args objects.
    pub args: Vec<ArgRec>,
}

impl Part {
    pub fn clear(&mut self) {
        self.events.clear();
        self.side.clear();
        self.args.clear();
    }

    /// How far the side buffers are filled, to take back what a failed scan added.
    pub fn mark(&self) -> (usize, usize) {
        (self.side.len(), self.args.len())
    }

    pub fn roll_back(&mut self, (side, args): (usize, usize)) {
        self.side.truncate(side);
        self.args.truncate(args);
    }
}

/// The texts spans point into: the chunk's text and its side buffer.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Texts<'a> {
    text: &'a str,
    side: &'a str,
}

impl<'a> Texts<'a> {
    /// Texts whose spans all lie in `side` (the reference reader's).
    pub fn side_only(side: &'a str) -> Texts<'a> {
        Texts { text: "", side }
    }

    #[inline]
    pub fn of(&self, span: Span) -> &'a str {
        let (start, end) = (span.start as usize, (span.start + span.len) as usize);
        if span.side {
            &self.side[start..end]
        } else {
            &self.text[start..end]
        }
    }
}

/// An event's args entries, as split by the reading thread.
#[derive(Copy, Clone, Debug)]
pub(crate) struct ArgEntries<'a> {
    pub entries: &'a [ArgRec],
    pub texts: Texts<'a>,
}

/// A complete (`X`) event of the usual shape, as [`Chunk::complete`] finds it: what
/// the builder's `complete` reads of a [`RawEvent`], with absent names and ids as the
/// builder reads them (empty, 0).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Complete<'a> {
    pub ts: i64,
    pub dur: i64,
    pub pid: i64,
    pub tid: i64,
    pub name: &'a str,
    pub cat: &'a str,
    pub args: Option<&'a str>,
    pub arg_entries: Option<ArgEntries<'a>>,
}

/// Buffers of a used chunk, for the next ones.
#[derive(Default)]
pub(crate) struct Spare {
    pub part: Part,
    pub text: Option<Vec<u8>>,
}

impl<'a> Chunk<'a> {
    pub fn new(text: Cow<'a, str>, base: u64, part: Part) -> Chunk<'a> {
        Chunk { text, part, base }
    }

    #[inline(always)]
    fn text_of(&self, span: Span) -> &str {
        self.texts().of(span)
    }

    #[inline(always)]
    fn texts(&self) -> Texts<'_> {
        Texts {
            text: &self.text,
            side: &self.part.side,
        }
    }

    pub fn events(&self) -> &[Rec] {
        &self.part.events
    }

    #[inline(always)]
    fn micros(&self, m: &MicrosSpan) -> Micros<'_> {
        match m {
            MicrosSpan::Ns(ns) => Micros::Ns(*ns),
            MicrosSpan::Text(s) => Micros::Text(self.text_of(*s)),
        }
    }

    #[inline(always)]
    fn id(&self, id: &Option<IdSpan>) -> Option<Id<'_>> {
        Some(match id.as_ref()? {
            IdSpan::Int(i) => Id::Int(*i),
            IdSpan::Str(s) => Id::Str(Cow::Borrowed(self.text_of(*s))),
        })
    }

    /// `rec` as a [`Complete`] when it is a complete (`X`) event of the usual shape:
    /// a `ts` (and `dur`) already in nanoseconds and numeric (or absent) pid and tid.
    /// The builder takes these fields as they are, where a [`RawEvent`] of them would
    /// be built and dropped per event (8 % of a Kineto load's samples).
    #[inline(always)]
    pub fn complete(&self, rec: &Rec) -> Option<Complete<'_>> {
        let ph = rec.ph?;
        let Some(MicrosSpan::Ns(ts)) = rec.ts else {
            return None;
        };
        let dur = match rec.dur {
            None => 0,
            Some(MicrosSpan::Ns(dur)) => dur,
            Some(MicrosSpan::Text(_)) => return None,
        };
        let int = |id: Option<IdSpan>| match id {
            None => Some(0),
            Some(IdSpan::Int(i)) => Some(i),
            Some(IdSpan::Str(_)) => None,
        };
        let (pid, tid) = (int(rec.pid)?, int(rec.tid)?);
        if ph.len != 1 || rec.not_an_object || self.text_of(ph) != "X" {
            return None;
        }
        let text = |s: Option<Span>| s.map_or("", |s| self.text_of(s));
        Some(Complete {
            ts,
            dur,
            pid,
            tid,
            name: text(rec.name),
            cat: text(rec.cat),
            args: rec.args.map(|s| self.text_of(s)),
            arg_entries: rec.arg_entries.map(|(start, len)| ArgEntries {
                entries: &self.part.args[start as usize..(start + len) as usize],
                texts: self.texts(),
            }),
        })
    }

    /// The event of `rec`, borrowing this chunk; `None` for an array element that is
    /// not an object.
    #[inline(always)]
    pub fn event(&self, rec: &Rec) -> Option<RawEvent<'_>> {
        if rec.not_an_object {
            return None;
        }
        let text = |s: Option<Span>| s.map(|s| self.text_of(s));
        let cow = |s: Option<Span>| s.map(|s| Cow::Borrowed(self.text_of(s)));
        let id2 = (rec.id2_local.is_some() || rec.id2_global.is_some()).then(|| Id2 {
            local: self.id(&rec.id2_local),
            global: self.id(&rec.id2_global),
        });
        Some(RawEvent {
            ph: cow(rec.ph),
            name: cow(rec.name),
            cat: cow(rec.cat),
            pid: self.id(&rec.pid),
            tid: self.id(&rec.tid),
            ts: rec.ts.as_ref().map(|t| self.micros(t)),
            dur: rec.dur.as_ref().map(|d| self.micros(d)),
            id: self.id(&rec.id),
            id2,
            bp: cow(rec.bp),
            s: cow(rec.s),
            args: text(rec.args),
            arg_entries: rec.arg_entries.map(|(start, len)| ArgEntries {
                entries: &self.part.args[start as usize..(start + len) as usize],
                texts: self.texts(),
            }),
        })
    }

    /// Gives the buffers back for reuse.
    pub fn into_spare(self) -> Spare {
        Spare {
            part: self.part,
            text: match self.text {
                Cow::Owned(text) => Some(text.into_bytes()),
                Cow::Borrowed(_) => None,
            },
        }
    }
}
