//! Finds the events of a Chrome trace JSON document as its bytes arrive: a resumable
//! scanner of the top-level structure (`{"traceEvents": [...], other keys}` or a bare
//! array) that hands each event to the event scanner and keeps the other top-level
//! values as metadata. This lets a gzip stream be inflated, split and parsed in pieces,
//! in one pass, never holding the whole decompressed text.

use memchr::memchr3;

use super::chunk::Batch;
use super::scan;

/// Where the scanner is in the document, between complete tokens.
#[derive(Clone, Debug, PartialEq)]
enum State {
    Start,
    /// In the top-level object: a key or (when `first`) `}`.
    Key {
        first: bool,
    },
    Colon {
        key: String,
    },
    Value {
        key: String,
    },
    /// After a top-level value: `,` or `}`.
    AfterValue,
    /// In the event array: an event or (when `first`) `]`. `bare` for a top-level array.
    Event {
        first: bool,
        bare: bool,
    },
    /// After an event: `,` or `]`.
    AfterEvent {
        bare: bool,
    },
    End,
}

/// A problem in the document's structure, at `offset` in the bytes scanned.
#[derive(Debug, PartialEq)]
pub(crate) struct SplitError {
    pub offset: usize,
    pub message: String,
}

pub(crate) struct Splitter {
    state: State,
    /// The largest event accepted, in bytes.
    max_event_bytes: usize,
    /// Top-level entries other than `traceEvents`, as raw JSON text.
    pub metadata: Vec<(String, Vec<u8>)>,
    /// Whether an event array was found.
    pub saw_events: bool,
    /// Whether the last whole element of the event array was an object.
    last_was_object: bool,
}

/// The end of the string that starts at `pos` (just past its closing quote), or `None`
/// if `bytes` ends first.
fn string_end(bytes: &[u8], pos: usize) -> Option<usize> {
    let mut i = pos + 1;
    loop {
        let at = super::scan::find_quote_or_backslash(bytes, i)?;
        if bytes[at] == b'\\' {
            i = at + 2;
        } else {
            return Some(at + 1);
        }
    }
}

/// The end of the JSON value that starts at `pos`, or `None` if `bytes` ends first
/// (`at_eof` says whether more can come). Containers are matched by counting their
/// own bracket outside strings; what is inside is checked later by the parser.
pub(crate) fn value_end(bytes: &[u8], pos: usize, at_eof: bool) -> Option<usize> {
    let (open, close) = match bytes[pos] {
        b'"' => return string_end(bytes, pos),
        b'{' => (b'{', b'}'),
        b'[' => (b'[', b']'),
        _ => {
            let end = bytes[pos..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                .map(|n| pos + n);
            return end.or(at_eof.then_some(bytes.len()));
        }
    };
    let mut depth = 0usize;
    let mut i = pos;
    loop {
        let at = i + memchr3(b'"', open, close, bytes.get(i..)?)?;
        match bytes[at] {
            b'"' => i = string_end(bytes, at)?,
            b if b == open => {
                depth += 1;
                i = at + 1;
            }
            _ => {
                depth -= 1;
                i = at + 1;
                if depth == 0 {
                    return Some(i);
                }
            }
        }
    }
}

impl Splitter {
    pub fn new(max_event_bytes: usize) -> Splitter {
        Splitter {
            state: State::Start,
            max_event_bytes,
            metadata: Vec::new(),
            saw_events: false,
            last_was_object: false,
        }
    }

    /// Whether the text so far is a top-level array of one or more whole elements, the
    /// last an object (an event: `[1, 2` is no trace), after it or a comma after it.
    fn ends_between_bare_events(&self) -> bool {
        self.last_was_object
            && matches!(
                self.state,
                State::AfterEvent { bare: true } | State::Event { bare: true, .. }
            )
    }

    /// Whether the whole document has been seen.
    pub fn is_done(&self) -> bool {
        self.state == State::End
    }

    /// Scans `bytes` (the data after what earlier calls consumed), adding each complete
    /// event to `batch`. Stops once `budget` bytes of events are found, or where a token
    /// is cut off by the end of `bytes` (unless `at_eof`, which makes that an error).
    /// Returns how many bytes are consumed; the rest must be passed again, with more
    /// data after it. After an error, `batch` holds the events before it.
    pub fn scan(
        &mut self,
        bytes: &[u8],
        at_eof: bool,
        budget: usize,
        batch: &mut Batch,
    ) -> Result<usize, SplitError> {
        let error = |offset: usize, message: &str| {
            Err(SplitError {
                offset,
                message: message.to_string(),
            })
        };
        let mut pos = 0;
        let mut found = 0;
        loop {
            while pos < bytes.len() && bytes[pos].is_ascii_whitespace() {
                pos += 1;
            }
            if pos == bytes.len() {
                if at_eof && self.ends_between_bare_events() {
                    // The Trace Event Format makes a bare array's `]` optional, so that
                    // a process killed while tracing leaves a whole trace (Chrome's
                    // py_trace_event writes none, each event followed by a comma).
                    self.state = State::End;
                }
                if at_eof && self.state != State::End {
                    return error(pos, "the JSON ends early: the file looks truncated");
                }
                return Ok(pos);
            }
            if found >= budget {
                return Ok(pos);
            }
            let c = bytes[pos];
            // Events and the commas between them, the bulk of a document, without
            // moving the state out and back in (it may hold a key).
            match self.state {
                State::Event { first, bare } => {
                    if c == b']' && first {
                        self.state = if bare { State::End } else { State::AfterValue };
                        pos += 1;
                        continue;
                    }
                    if c == b']' || c == b',' {
                        return error(pos, "expected an event");
                    }
                    let (mark, origin) = (batch.part.mark(), batch.origin);
                    let start = *batch.origin.get_or_insert(pos);
                    match scan::scan_event(bytes, pos, start, &mut batch.part) {
                        // A number may go on in the data not read yet.
                        Ok(end)
                            if end == bytes.len()
                                && !at_eof
                                && batch.part.events.last().is_some_and(|r| r.not_an_object) =>
                        {
                            batch.part.events.pop();
                            batch.part.roll_back(mark);
                            batch.origin = origin;
                            return self.cut(
                                State::Event { first, bare },
                                pos,
                                at_eof,
                                bytes.len(),
                            );
                        }
                        Ok(end) => {
                            if end - pos > self.max_event_bytes {
                                batch.part.events.pop();
                                return error(
                                    pos,
                                    &format!(
                                        "an event of {} bytes, over the limit of {}",
                                        end - pos,
                                        self.max_event_bytes
                                    ),
                                );
                            }
                            batch.end = end;
                            found += end - pos;
                            pos = end;
                            self.last_was_object = c == b'{';
                            self.state = State::AfterEvent { bare };
                            continue;
                        }
                        Err(e) => {
                            batch.part.roll_back(mark);
                            batch.origin = origin;
                            // Tell a broken event from one that is only cut off
                            // by the end of the data read so far.
                            return match value_end(bytes, pos, at_eof) {
                                None => {
                                    self.cut(State::Event { first, bare }, pos, at_eof, bytes.len())
                                }
                                Some(_) => error(e.offset, &e.message),
                            };
                        }
                    }
                }
                State::AfterEvent { bare } => {
                    self.state = match c {
                        b',' => State::Event { first: false, bare },
                        b']' if bare => State::End,
                        b']' => State::AfterValue,
                        _ => return error(pos, "expected ',' or ']' after an event"),
                    };
                    pos += 1;
                    continue;
                }
                _ => {}
            }
            let state = std::mem::replace(&mut self.state, State::End);
            self.state = match state {
                State::Start => match c {
                    b'{' => State::Key { first: true },
                    b'[' => {
                        self.saw_events = true;
                        State::Event {
                            first: true,
                            bare: true,
                        }
                    }
                    _ => return error(pos, "expected a JSON object or array"),
                },
                State::Key { first } => match c {
                    b'}' if first => State::End,
                    b'"' => match string_end(bytes, pos) {
                        Some(end) => {
                            let key = match serde_json::from_slice::<String>(&bytes[pos..end]) {
                                Ok(key) => key,
                                Err(_) => return error(pos, "an invalid object key"),
                            };
                            pos = end;
                            self.state = State::Colon { key };
                            continue;
                        }
                        None => return self.cut(state, pos, at_eof, bytes.len()),
                    },
                    _ => return error(pos, "expected a key string in the top-level object"),
                },
                State::Colon { key } => match c {
                    b':' => State::Value { key },
                    _ => return error(pos, "expected ':' after a key"),
                },
                State::Value { key } => {
                    if key == "traceEvents" && c != b'[' {
                        return error(pos, "\"traceEvents\" is not an array");
                    }
                    if key == "traceEvents" {
                        self.saw_events = true;
                        State::Event {
                            first: true,
                            bare: false,
                        }
                    } else {
                        match value_end(bytes, pos, at_eof) {
                            Some(end) => {
                                self.metadata.push((key, bytes[pos..end].to_vec()));
                                pos = end;
                                self.state = State::AfterValue;
                                continue;
                            }
                            None => {
                                return self.cut(State::Value { key }, pos, at_eof, bytes.len())
                            }
                        }
                    }
                }
                State::AfterValue => match c {
                    b',' => State::Key { first: false },
                    b'}' => State::End,
                    _ => return error(pos, "expected ',' or '}' in the top-level object"),
                },
                State::Event { .. } | State::AfterEvent { .. } => {
                    unreachable!("handled above")
                }
                State::End => return error(pos, "data after the end of the JSON document"),
            };
            pos += 1;
        }
    }

    /// A token cut off at the end of the data: wait for more, or fail at the end.
    fn cut(
        &mut self,
        state: State,
        pos: usize,
        at_eof: bool,
        len: usize,
    ) -> Result<usize, SplitError> {
        self.state = state;
        if at_eof {
            return Err(SplitError {
                offset: len,
                message: "the JSON ends early: the file looks truncated".into(),
            });
        }
        Ok(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(doc: &[u8], piece: usize) -> Result<(Vec<String>, Splitter), SplitError> {
        let mut splitter = Splitter::new(usize::MAX);
        let mut window: Vec<u8> = Vec::new();
        let mut found = Vec::new();
        let mut fed = 0;
        loop {
            let next = (fed + piece).min(doc.len());
            window.extend_from_slice(&doc[fed..next]);
            fed = next;
            let at_eof = fed == doc.len();
            let mut batch = Batch::default();
            let consumed = splitter.scan(&window, at_eof, usize::MAX, &mut batch)?;
            for rec in &batch.part.events {
                let start = batch.origin.unwrap() + rec.offset as usize;
                let end = value_end(&window, start, true).unwrap();
                found.push(String::from_utf8(window[start..end].to_vec()).unwrap());
            }
            window.drain(..consumed);
            if at_eof {
                return Ok((found, splitter));
            }
        }
    }

    #[test]
    fn events_and_metadata_are_found_in_any_piece_size() {
        let doc = br#" {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "x]}"}],
            "traceEvents": [{"ph": "X", "name": "a\"}{", "args": {"d": [[1], {}]}}, [1, 2], 3, "s"],
            "distributedInfo": {"rank": 1}} "#;
        for piece in [1, 2, 3, 7, 64, 10_000] {
            let (events, splitter) = split_all(doc, piece).unwrap();
            assert_eq!(
                events,
                vec![
                    r#"{"ph": "X", "name": "a\"}{", "args": {"d": [[1], {}]}}"#,
                    "[1, 2]",
                    "3",
                    r#""s""#
                ],
                "piece {piece}"
            );
            let keys: Vec<&str> = splitter.metadata.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(
                keys,
                ["schemaVersion", "deviceProperties", "distributedInfo"]
            );
            assert_eq!(
                splitter.metadata[1].1,
                br#"[{"id": 0, "name": "x]}"}]"#.to_vec()
            );
            assert!(splitter.saw_events && splitter.is_done());
        }
    }

    #[test]
    fn bare_arrays_and_empty_documents() {
        let (events, s) = split_all(b"[{\"a\":1},\n{\"b\":2}]\n", 3).unwrap();
        assert_eq!(events, [r#"{"a":1}"#, r#"{"b":2}"#]);
        assert!(s.saw_events);
        let (events, s) = split_all(b"{}", 1).unwrap();
        assert!(events.is_empty() && !s.saw_events);
        let (events, _) = split_all(b"{\"traceEvents\": []}", 1).unwrap();
        assert!(events.is_empty());
    }

    /// A bare array may end without its `]` (the Trace Event Format allows it), after
    /// an event or the comma after one; cut inside an event, or before any, it is still
    /// truncated, and so is an object cut anywhere.
    #[test]
    fn a_bare_array_needs_no_closing_bracket() {
        for text in [
            &b"[{\"a\":1},{\"b\":2}"[..],
            b"[{\"a\":1},{\"b\":2},",
            b"[{\"a\":1},\n{\"b\":2},\n",
        ] {
            let (events, s) = split_all(text, 3).unwrap();
            assert_eq!(events, [r#"{"a":1}"#, r#"{"b":2}"#]);
            assert!(s.saw_events && s.is_done());
        }
        for text in [
            &b"[{\"a\":1},{\"b\""[..],
            b"[",
            b"[\n",
            br#"{"traceEvents": [{"a":1},"#,
            br#"{"traceEvents": [{"a":1}]"#,
            b"[1, 2",
            b"[{\"a\":1}, 2,",
        ] {
            let Err(error) = split_all(text, 3) else {
                panic!("{text:?} read whole");
            };
            assert!(error.message.contains("ends early"), "{error:?}");
        }
    }

    #[test]
    fn broken_documents_fail_with_an_offset() {
        let cases: [(&[u8], usize); 8] = [
            (br#"{"traceEvents": [{"ph": "X"}"#, 28),
            (br#"{"traceEvents": [{"ph": "X"}, ]}"#, 30),
            (br#"{"traceEvents" [1]}"#, 15),
            (br#"{"traceEvents": {"ph": "X"}}"#, 16),
            (br#"{"a": 1} x"#, 9),
            (b"5", 0),
            (br#"{"traceEvents": [{"ph": "#, 24),
            (br#"{"a": "unterminated"#, 19),
        ];
        for (doc, offset) in cases {
            for piece in [1, 5, 1000] {
                let err = split_all(doc, piece).err().expect("an error");
                // Offsets are relative to the window, which starts at what was consumed.
                assert!(
                    err.offset <= offset,
                    "{:?}: {err:?}",
                    String::from_utf8_lossy(doc)
                );
            }
            let err = split_all(doc, 10_000).err().unwrap();
            assert_eq!(err.offset, offset, "{:?}", String::from_utf8_lossy(doc));
        }
    }
}
