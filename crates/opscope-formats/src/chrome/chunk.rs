//! The hand-over between the thread that reads and parses events and the one that
//! builds the model: a piece of the document's text with its events parsed into spans
//! of that text, so the text can be owned (decompressed data) or borrowed (a mapped
//! file) and the events still borrow nothing across threads.

use std::borrow::Cow;

use super::parse::{Element, Id, Id2, RawEvent};
use super::scan;

/// Part of a string field: a range of the chunk's text, or of its side buffer for
/// strings that had escapes.
#[derive(Copy, Clone, Debug)]
struct Span {
    start: u32,
    len: u32,
    side: bool,
}

#[derive(Copy, Clone, Debug)]
enum IdSpan {
    Int(i64),
    Str(Span),
}

/// One event, as spans.
#[derive(Default, Debug)]
pub(crate) struct Rec {
    /// Where the event starts in the chunk's text.
    pub offset: u32,
    not_an_object: bool,
    ph: Option<Span>,
    name: Option<Span>,
    cat: Option<Span>,
    bp: Option<Span>,
    s: Option<Span>,
    ts: Option<Span>,
    dur: Option<Span>,
    args: Option<Span>,
    pid: Option<IdSpan>,
    tid: Option<IdSpan>,
    id: Option<IdSpan>,
    id2_local: Option<IdSpan>,
    id2_global: Option<IdSpan>,
}

/// Consecutive events and the text they are spans of.
pub(crate) struct Chunk<'a> {
    pub text: Cow<'a, str>,
    side: String,
    pub events: Vec<Rec>,
    /// Offset of the text's first byte in the (decompressed) document.
    pub base: u64,
}

/// A JSON syntax error inside one event, at `offset` in the chunk's text.
pub(crate) struct EventSyntaxError {
    pub offset: usize,
    pub message: String,
}

impl<'a> Chunk<'a> {
    /// Parses the events at `ranges` (byte ranges of `text`) into a chunk.
    pub fn parse(
        text: Cow<'a, str>,
        base: u64,
        ranges: impl Iterator<Item = (usize, usize)>,
        mut events: Vec<Rec>,
    ) -> Result<Chunk<'a>, (Chunk<'a>, EventSyntaxError)> {
        events.clear();
        let mut side = String::new();
        let mut failure = None;
        {
            let all: &str = &text;
            for (start, end) in ranges {
                let element = &all[start..end];
                match scan::parse_element(element) {
                    Ok(element) => events.push(record(all, &mut side, start, element)),
                    Err(e) => {
                        failure = Some(EventSyntaxError {
                            offset: start + e.offset,
                            message: e.message,
                        });
                        break;
                    }
                }
            }
        }
        let chunk = Chunk {
            text,
            side,
            events,
            base,
        };
        match failure {
            None => Ok(chunk),
            Some(e) => Err((chunk, e)),
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

    /// Takes the buffers back for reuse.
    pub fn into_events_buffer(self) -> Vec<Rec> {
        self.events
    }
}

/// The spans of a parsed event; `all` is the chunk text its borrowed strings lie in.
fn record(all: &str, side: &mut String, start: usize, element: Element) -> Rec {
    let base = all.as_ptr() as usize;
    let mut span = |s: &str, borrowed: bool| {
        if borrowed {
            Span {
                start: (s.as_ptr() as usize - base) as u32,
                len: s.len() as u32,
                side: false,
            }
        } else {
            let at = side.len();
            side.push_str(s);
            Span {
                start: at as u32,
                len: s.len() as u32,
                side: true,
            }
        }
    };
    let ev = match element {
        Element::Event(ev) => ev,
        Element::NotAnObject => {
            return Rec {
                offset: start as u32,
                not_an_object: true,
                ..Rec::default()
            }
        }
    };
    let mut cow = |c: Option<Cow<str>>| {
        c.map(|c| match c {
            Cow::Borrowed(s) => span(s, true),
            Cow::Owned(s) => span(&s, false),
        })
    };
    let (ph, name, cat, bp, s) = (cow(ev.ph), cow(ev.name), cow(ev.cat), cow(ev.bp), cow(ev.s));
    let mut id = |i: Option<Id>| {
        i.map(|i| match i {
            Id::Int(n) => IdSpan::Int(n),
            Id::Str(Cow::Borrowed(s)) => IdSpan::Str(span(s, true)),
            Id::Str(Cow::Owned(s)) => IdSpan::Str(span(&s, false)),
        })
    };
    let (pid, tid, eid) = (id(ev.pid), id(ev.tid), id(ev.id));
    let (id2_local, id2_global) = match ev.id2 {
        Some(id2) => (id(id2.local), id(id2.global)),
        None => (None, None),
    };
    let mut raw = |r: Option<&str>| r.map(|r| span(r, true));
    Rec {
        offset: start as u32,
        not_an_object: false,
        ph,
        name,
        cat,
        bp,
        s,
        ts: raw(ev.ts),
        dur: raw(ev.dur),
        args: raw(ev.args),
        pid,
        tid,
        id: eid,
        id2_local,
        id2_global,
    }
}
