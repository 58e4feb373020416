//! A hand-written reader for one trace event object, run on the bytes as they arrive:
//! it records each field it needs as a span of the text (or of a side buffer, for the
//! rare string with escapes), converts plain `ts` and `dur` to nanoseconds (others stay
//! JSON text, as `args` does, with its entries split), and checks the syntax of the rest
//! without building it. This is the hottest path of every import.

use memchr::memchr2;

use super::chunk::{ArgKind, ArgRec, IdSpan, MicrosSpan, Part, Rec, Span};

/// A syntax error at `offset` in the text scanned.
#[derive(Debug, PartialEq)]
pub(crate) struct ScanError {
    pub offset: usize,
    pub message: String,
}

/// Containers nested deeper than this are refused, as serde_json does, so hostile input
/// cannot exhaust anything.
const MAX_DEPTH: usize = 128;

/// Boxed: errors are rare, and a small error lets every reading function return its
/// result in registers (with the error inline, the member dispatch stalled on results
/// passed through memory).
type Result<T> = std::result::Result<T, Box<ScanError>>;

/// A string read at the cursor: where its contents lie, or its decoded text when it
/// had escapes.
enum Str {
    Plain(usize, usize),
    Decoded(String),
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn fail<T>(&self, message: &str) -> Result<T> {
        Err(Box::new(ScanError {
            offset: self.pos.min(self.bytes.len()),
            message: message.to_string(),
        }))
    }

    #[inline]
    fn skip_ws(&mut self) {
        while let Some(b) = self.bytes.get(self.pos) {
            if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                break;
            }
            self.pos += 1;
        }
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn expect(&mut self, byte: u8, message: &str) -> Result<()> {
        self.skip_ws();
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            self.fail(message)
        }
    }

    /// The string at the cursor. Its bytes are not checked to be UTF-8 here: the caller
    /// checks the whole text it hands on.
    #[inline(always)]
    fn string(&mut self) -> Result<Str> {
        let start = self.pos;
        // Inline for the common string (no escape): its span is returned in registers.
        if let Some(at) = find_quote_or_backslash(self.bytes, start + 1) {
            if self.bytes[at] == b'"' {
                self.pos = at + 1;
                return Ok(Str::Plain(start + 1, at));
            }
        }
        self.escaped_string(start)
    }

    /// [`Self::string`] for a string with an escape, or one that does not end.
    #[inline(never)]
    fn escaped_string(&mut self, start: usize) -> Result<Str> {
        let mut i = start + 1;
        let mut escaped = false;
        loop {
            let Some(at) = find_quote_or_backslash(self.bytes, i) else {
                self.pos = self.bytes.len();
                return self.fail("a string that does not end");
            };
            if self.bytes[at] == b'"' {
                self.pos = at + 1;
                break;
            }
            escaped = true;
            match self.bytes.get(at + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i = at + 2,
                Some(b'u') => {
                    let hex = self.bytes.get(at + 2..at + 6);
                    if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                        self.pos = at;
                        return self.fail("an invalid \\u escape");
                    }
                    i = at + 6;
                }
                _ => {
                    self.pos = at;
                    return self.fail("an invalid escape in a string");
                }
            }
        }
        if !escaped {
            return Ok(Str::Plain(start + 1, self.pos - 1));
        }
        match serde_json::from_slice::<String>(&self.bytes[start..self.pos]) {
            Ok(s) => Ok(Str::Decoded(s)),
            Err(e) => {
                self.pos = start;
                self.fail(&format!("an invalid string ({})", super::serde_message(&e)))
            }
        }
    }

    /// Skips the string at the cursor, checking its escapes.
    fn skip_string(&mut self) -> Result<()> {
        self.string().map(|_| ())
    }

    /// A number or literal at the cursor, checked for JSON's grammar; returns its end.
    // This, `string`'s common case and the spans' small helpers are inlined into the
    // event loop: called, their results went back through memory, and the loads of them
    // stalled the loop (reading alone: 0.85 s per GB before, 0.62 after).
    #[inline(always)]
    fn scalar(&mut self) -> Result<usize> {
        let rest = &self.bytes[self.pos..];
        let len = match rest.first() {
            Some(b't') if rest.starts_with(b"true") => Some(4),
            Some(b'f') if rest.starts_with(b"false") => Some(5),
            Some(b'n') if rest.starts_with(b"null") => Some(4),
            _ => number_len(rest),
        };
        // What could continue a word makes it invalid ("01", "1.2.3", "nulls").
        match len {
            Some(len)
                if !rest.get(len).is_some_and(
                    |b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E' | b'a'..=b'z'),
                ) =>
            {
                self.pos += len;
                Ok(self.pos)
            }
            _ => self.fail("an invalid value"),
        }
    }

    /// Skips any value at the cursor, checking its syntax; returns where it starts.
    fn value(&mut self) -> Result<usize> {
        self.skip_ws();
        let start = self.pos;
        // Scalars first: most values are, and the container walk's bracket stack is not
        // free to set up.
        match self.peek() {
            None => return self.fail("the event ends early"),
            Some(b'{' | b'[') => {}
            Some(b'"') => {
                self.skip_string()?;
                return Ok(start);
            }
            Some(b'}' | b']' | b',' | b':') => return self.fail("expected a value"),
            Some(_) => {
                self.scalar()?;
                return Ok(start);
            }
        }
        // The closing bracket of each open container (on the stack: `Input Dims` and
        // `Input type` arrays come with every PyTorch op).
        let mut open = Brackets::default();
        loop {
            // A value starts here.
            self.skip_ws();
            match self.peek() {
                None => return self.fail("the event ends early"),
                Some(c @ (b'{' | b'[')) => {
                    if open.depth == MAX_DEPTH {
                        return self.fail("values nested too deep");
                    }
                    let close = if c == b'{' { b'}' } else { b']' };
                    self.pos += 1;
                    self.skip_ws();
                    if self.peek() == Some(close) {
                        self.pos += 1;
                    } else {
                        open.push(close);
                        if close == b'}' {
                            self.key()?;
                        }
                        continue;
                    }
                }
                Some(b'"') => self.skip_string()?,
                Some(b'}' | b']' | b',' | b':') => return self.fail("expected a value"),
                Some(_) => {
                    self.scalar()?;
                }
            }
            // After a value: close containers, or move to their next member.
            loop {
                let Some(&close) = open.last() else {
                    return Ok(start);
                };
                self.skip_ws();
                match self.peek() {
                    Some(b',') => {
                        self.pos += 1;
                        if close == b'}' {
                            self.key()?;
                        }
                        break;
                    }
                    Some(c) if c == close => {
                        self.pos += 1;
                        open.pop();
                    }
                    _ => return self.fail("expected ',' or the end of a container"),
                }
            }
        }
    }

    /// An object key and its colon.
    fn key(&mut self) -> Result<()> {
        self.skip_ws();
        if self.peek() != Some(b'"') {
            return self.fail("expected a key");
        }
        self.skip_string()?;
        self.expect(b':', "expected ':' after a key")
    }

    /// Reads the object at the cursor, calling `member` with each key once the cursor
    /// is on its value; `member` reads the value and says whether to go on. Returns
    /// false if `member` stopped early.
    fn members(&mut self, mut member: impl FnMut(&mut Self, Str) -> Result<bool>) -> Result<bool> {
        self.expect(b'{', "expected an object")?;
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(true);
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return self.fail("expected a key");
            }
            let key = self.string()?;
            self.expect(b':', "expected ':' after a key")?;
            self.skip_ws();
            if !member(self, key)? {
                return Ok(false);
            }
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(true);
                }
                _ => return self.fail("expected ',' or '}' in an object"),
            }
        }
    }

    /// The bytes of a key read by `string`.
    fn key_bytes<'k>(&self, key: &'k Str) -> &'k [u8]
    where
        'a: 'k,
    {
        match key {
            Str::Plain(a, b) => &self.bytes[*a..*b],
            Str::Decoded(s) => s.as_bytes(),
        }
    }
}

/// A stack of closing brackets, as deep as values may nest.
struct Brackets {
    close: [u8; MAX_DEPTH],
    depth: usize,
}

impl Default for Brackets {
    fn default() -> Self {
        Brackets {
            close: [0; MAX_DEPTH],
            depth: 0,
        }
    }
}

impl Brackets {
    fn push(&mut self, close: u8) {
        self.close[self.depth] = close;
        self.depth += 1;
    }

    fn last(&self) -> Option<&u8> {
        self.close[..self.depth].last()
    }

    fn pop(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }
}

/// Where the spans of one event go: positions are made relative to `origin` (where the
/// chunk's text starts), decoded strings are appended to `side`.
struct Spans<'s> {
    origin: usize,
    side: &'s mut String,
    args: &'s mut Vec<ArgRec>,
}

impl Spans<'_> {
    #[inline(always)]
    fn text(&self, start: usize, end: usize) -> Span {
        Span {
            start: (start - self.origin) as u32,
            len: (end - start) as u32,
            side: false,
        }
    }

    #[inline(always)]
    fn string(&mut self, s: Str) -> Span {
        match s {
            Str::Plain(a, b) => self.text(a, b),
            Str::Decoded(s) => {
                let at = self.side.len();
                self.side.push_str(&s);
                Span {
                    start: at as u32,
                    len: s.len() as u32,
                    side: true,
                }
            }
        }
    }

    /// A string field, or `None` (the value skipped) when it holds another type.
    #[inline(always)]
    fn lenient_string(&mut self, c: &mut Cursor) -> Result<Option<Span>> {
        if c.peek() == Some(b'"') {
            let s = c.string()?;
            Ok(Some(self.string(s)))
        } else {
            c.value().map(|_| None)
        }
    }

    /// A pid, tid or id: a number or a string; `None` for other types.
    // The integer case is inlined into the event loop (pids and tids are two in every
    // event); the rest is not.
    #[inline(always)]
    fn lenient_id(&mut self, c: &mut Cursor) -> Result<Option<IdSpan>> {
        if let Some(b'-' | b'0'..=b'9') = c.peek() {
            if let Some((i, end)) = plain_integer(c.bytes, c.pos) {
                c.pos = end;
                return Ok(Some(IdSpan::Int(i)));
            }
            let start = c.pos;
            let end = c.scalar()?;
            return Ok(Some(match integer(&c.bytes[start..end]) {
                Some(i) => IdSpan::Int(i),
                None => self.unusual_number_id(&c.bytes[start..end], start),
            }));
        }
        self.other_id(c)
    }

    /// A numeric id that is not an `i64` as written: an integer past i64 as written
    /// when it fits a u64, any other number as the shortest form of the f64 serde reads
    /// (`22.30` is `22.3`; serde's f64 of a long integer is not always the nearest): so
    /// the same id whichever reader reads the file.
    #[inline(never)]
    fn unusual_number_id(&mut self, digits: &[u8], start: usize) -> IdSpan {
        let end = start + digits.len();
        // The grammar check leaves only ASCII.
        let text = std::str::from_utf8(digits).unwrap_or("");
        if let Some(i) = number_id(text) {
            return IdSpan::Int(i);
        }
        if text.parse::<u64>().is_ok() {
            return IdSpan::Str(self.text(start, end));
        }
        match serde_json::from_str::<f64>(text) {
            Ok(v) => IdSpan::Str(self.string(Str::Decoded(v.to_string()))),
            Err(_) => IdSpan::Str(self.text(start, end)),
        }
    }

    /// [`Self::lenient_id`] for an id that is not a number.
    #[inline(never)]
    fn other_id(&mut self, c: &mut Cursor) -> Result<Option<IdSpan>> {
        match c.peek() {
            Some(b'"') => {
                let s = c.string()?;
                Ok(Some(IdSpan::Str(self.string(s))))
            }
            Some(b't') => c.scalar().map(|_| Some(IdSpan::Int(1))),
            Some(b'f') => c.scalar().map(|_| Some(IdSpan::Int(0))),
            _ => c.value().map(|_| None),
        }
    }

    /// An event's `args`: its raw text, and when it is an object, its entries split
    /// into the args list (string values decoded): work taken off the thread that
    /// builds the model.
    fn args(&mut self, c: &mut Cursor, rec: &mut Rec) -> Result<()> {
        if c.peek() != Some(b'{') {
            rec.args = Some(self.raw(c)?);
            return Ok(());
        }
        let start = c.pos;
        let first = self.args.len();
        c.members(|c, key| {
            let key = self.string(key);
            let (value, kind) = match c.peek() {
                Some(b'"') => {
                    let s = c.string()?;
                    (self.string(s), ArgKind::String)
                }
                Some(b'-' | b'0'..=b'9') => {
                    let start = c.pos;
                    if let Some((i, end)) = plain_integer(c.bytes, start) {
                        c.pos = end;
                        (self.text(start, end), ArgKind::Int(i))
                    } else {
                        let end = c.scalar()?;
                        let kind =
                            integer(&c.bytes[start..end]).map_or(ArgKind::Other, ArgKind::Int);
                        (self.text(start, end), kind)
                    }
                }
                _ => (self.raw(c)?, ArgKind::Other),
            };
            self.args.push(ArgRec { key, value, kind });
            Ok(true)
        })?;
        rec.args = Some(self.text(start, c.pos));
        rec.arg_entries = Some((first as u32, (self.args.len() - first) as u32));
        Ok(())
    }

    /// A `ts` or `dur`: in nanoseconds when it is a plain number (this thread has its
    /// digits at hand), else its text for the builder's exact conversion.
    #[inline(always)]
    fn micros(&mut self, c: &mut Cursor) -> Result<MicrosSpan> {
        if let Some((ns, end)) = plain_micros(c.bytes, c.pos) {
            c.pos = end;
            return Ok(MicrosSpan::Ns(ns));
        }
        self.raw(c).map(MicrosSpan::Text)
    }

    /// A raw value's text.
    fn raw(&mut self, c: &mut Cursor) -> Result<Span> {
        let start = c.value()?;
        Ok(self.text(start, c.pos))
    }

    /// `id2: {"local": ID}` or `{"global": ID}`; `None` when it is anything else, or
    /// when an id in it is not a number or string.
    fn id2(&mut self, c: &mut Cursor) -> Result<Option<(Option<IdSpan>, Option<IdSpan>)>> {
        if c.peek() != Some(b'{') {
            return c.value().map(|_| None);
        }
        let (mut local, mut global, mut valid) = ((None, false), (None, false), true);
        c.members(|c, key| {
            let (slot, seen) = match c.key_bytes(&key) {
                b"local" => (&mut local.0, &mut local.1),
                b"global" => (&mut global.0, &mut global.1),
                _ => {
                    c.value()?;
                    return Ok(true);
                }
            };
            valid &= !*seen;
            *seen = true;
            if c.bytes[c.pos..].starts_with(b"null") {
                c.scalar()?;
                return Ok(true);
            }
            *slot = self.lenient_id(c)?;
            valid &= slot.is_some();
            Ok(true)
        })?;
        let (local, global) = (local.0, global.0);
        Ok(valid.then_some((local, global)))
    }
}

/// Reads the element of the event array that starts at `pos` in `bytes`; returns its
/// spans (relative to `origin`, with decoded strings appended to `side`) and where it
/// ends. An error at the end of `bytes` may only mean the element is cut off there.
pub(crate) fn scan_event(
    bytes: &[u8],
    pos: usize,
    origin: usize,
    part: &mut Part,
) -> Result<usize> {
    let Part { events, side, args } = part;
    // Built in place: a record is about 200 bytes, and moving it out of a result and
    // into the list showed in profiles.
    events.push(Rec {
        offset: (pos - origin) as u32,
        ..Rec::default()
    });
    let rec = events.last_mut().expect("just pushed");
    let read = read_event(bytes, pos, origin, side, args, rec);
    if read.is_err() {
        events.pop();
    }
    read
}

fn read_event(
    bytes: &[u8],
    pos: usize,
    origin: usize,
    side: &mut String,
    args: &mut Vec<ArgRec>,
    rec: &mut Rec,
) -> Result<usize> {
    let mut c = Cursor { bytes, pos };
    if c.peek() != Some(b'{') {
        c.value()?;
        rec.not_an_object = true;
        return Ok(c.pos);
    }
    let mut spans = Spans { origin, side, args };
    c.pos += 1;
    c.skip_ws();
    if c.peek() == Some(b'}') {
        c.pos += 1;
        rec.empty = true;
        return Ok(c.pos);
    }
    // Kineto writes the keys of every complete event in one order: they are read in that
    // order, a test per key, before the loop below takes any other key on. The loop's
    // dispatch on each key (an indirect jump) was the reading thread's costliest line.
    // At the first other key the loop goes on from there, so what is read is the same.
    'in_order: {
        macro_rules! next {
            ($key:literal, $read:expr) => {{
                const K: (u64, u64, usize) = key_word($key);
                match c.bytes.get(c.pos..c.pos + 8) {
                    Some(eight)
                        if u64::from_le_bytes(eight.try_into().expect("eight bytes")) & K.1
                            == K.0 => {}
                    _ => break 'in_order,
                }
                c.pos += K.2;
                c.skip_ws();
                $read;
                c.skip_ws();
                match c.peek() {
                    Some(b',') => c.pos += 1,
                    Some(b'}') => {
                        c.pos += 1;
                        return Ok(c.pos);
                    }
                    _ => return c.fail("expected ',' or '}' in an object"),
                }
                c.skip_ws();
            }};
        }
        next!(b"ph", rec.ph = spans.lenient_string(&mut c)?);
        next!(b"cat", rec.cat = spans.lenient_string(&mut c)?);
        next!(b"name", rec.name = spans.lenient_string(&mut c)?);
        next!(b"pid", rec.pid = spans.lenient_id(&mut c)?);
        next!(b"tid", rec.tid = spans.lenient_id(&mut c)?);
        next!(b"ts", rec.ts = Some(spans.micros(&mut c)?));
        next!(b"dur", rec.dur = Some(spans.micros(&mut c)?));
        next!(b"args", spans.args(&mut c, rec)?);
    }
    loop {
        c.skip_ws();
        if c.peek() != Some(b'"') {
            return c.fail("expected a key");
        }
        match c.field()? {
            Field::Ph => rec.ph = spans.lenient_string(&mut c)?,
            Field::Name => rec.name = spans.lenient_string(&mut c)?,
            Field::Cat => rec.cat = spans.lenient_string(&mut c)?,
            Field::Bp => rec.bp = spans.lenient_string(&mut c)?,
            Field::S => rec.s = spans.lenient_string(&mut c)?,
            Field::Pid => rec.pid = spans.lenient_id(&mut c)?,
            Field::Tid => rec.tid = spans.lenient_id(&mut c)?,
            Field::Id => rec.id = spans.lenient_id(&mut c)?,
            Field::Ts => rec.ts = Some(spans.micros(&mut c)?),
            Field::Dur => rec.dur = Some(spans.micros(&mut c)?),
            Field::Args => spans.args(&mut c, rec)?,
            Field::Id2 => {
                (rec.id2_local, rec.id2_global) = spans.id2(&mut c)?.unwrap_or((None, None));
            }
            Field::Other => {
                c.value()?;
            }
        }
        c.skip_ws();
        match c.peek() {
            Some(b',') => c.pos += 1,
            Some(b'}') => {
                c.pos += 1;
                return Ok(c.pos);
            }
            _ => return c.fail("expected ',' or '}' in an object"),
        }
    }
}

/// The event fields the reader keeps.
#[derive(Copy, Clone)]
enum Field {
    Ph,
    Name,
    Cat,
    Bp,
    S,
    Pid,
    Tid,
    Id,
    Ts,
    Dur,
    Args,
    Id2,
    Other,
}

impl Field {
    /// The field a key names, by its bytes.
    fn of(key: &[u8]) -> Field {
        match key {
            b"ph" => Field::Ph,
            b"name" => Field::Name,
            b"cat" => Field::Cat,
            b"bp" => Field::Bp,
            b"s" => Field::S,
            b"pid" => Field::Pid,
            b"tid" => Field::Tid,
            b"id" => Field::Id,
            b"ts" => Field::Ts,
            b"dur" => Field::Dur,
            b"args" => Field::Args,
            b"id2" => Field::Id2,
            _ => Field::Other,
        }
    }
}

/// `"key":` as a little-endian word and the mask of its bytes: every field name is short
/// enough for the quotes and the colon to fit in eight bytes.
const fn key_word(key: &[u8]) -> (u64, u64, usize) {
    let mut word = [0u8; 8];
    word[0] = b'"';
    let mut i = 0;
    while i < key.len() {
        word[i + 1] = key[i];
        i += 1;
    }
    word[key.len() + 1] = b'"';
    word[key.len() + 2] = b':';
    let len = key.len() + 3;
    let mask = if len == 8 {
        u64::MAX
    } else {
        (1u64 << (len * 8)) - 1
    };
    (u64::from_le_bytes(word), mask, len)
}

impl Cursor<'_> {
    /// The key at the cursor (on its opening quote) and its colon. Keys written as
    /// Kineto and Chrome write them (`"ph":`, no escapes, no space before the colon)
    /// are recognised from one eight-byte load; anything else is read as a string.
    /// Leaves the cursor on the value.
    // Inlined with the spaces skipped inside, so that the caller's dispatch on the field
    // folds into this one on the key's first letter: two indirect jumps per field were
    // 8 % of the reading thread's samples.
    #[inline(always)]
    fn field(&mut self) -> Result<Field> {
        if let Some(eight) = self.bytes.get(self.pos..self.pos + 8) {
            let word = u64::from_le_bytes(eight.try_into().expect("eight bytes"));
            macro_rules! known {
                ($($key:literal => $field:expr),+) => {{
                    $({
                        const K: (u64, u64, usize) = key_word($key);
                        if word & K.1 == K.0 {
                            self.pos += K.2;
                            self.skip_ws();
                            return Ok($field);
                        }
                    })+
                }};
            }
            match eight[1] {
                b'p' => known!(b"ph" => Field::Ph, b"pid" => Field::Pid),
                b'n' => known!(b"name" => Field::Name),
                b'c' => known!(b"cat" => Field::Cat),
                b't' => known!(b"tid" => Field::Tid, b"ts" => Field::Ts),
                b'd' => known!(b"dur" => Field::Dur),
                b'a' => known!(b"args" => Field::Args),
                b'i' => known!(b"id" => Field::Id, b"id2" => Field::Id2),
                b'b' => known!(b"bp" => Field::Bp),
                b's' => known!(b"s" => Field::S),
                _ => {}
            }
        }
        let key = self.string()?;
        let field = Field::of(self.key_bytes(&key));
        self.expect(b':', "expected ':' after a key")?;
        self.skip_ws();
        Ok(field)
    }
}

/// The next `"` or `\\` at or after `from`. Most strings in traces are short keys and
/// names: eight bytes at a time beats setting up a vectorised search for those.
// Inlined into each string read: called, it was 4 % of a load's samples on its own
// (CPU 0.97-0.98 inlined, in pairs on the 0.27 and 1.09 GB traces).
#[inline(always)]
pub(crate) fn find_quote_or_backslash(bytes: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // The high bit of each byte of `word` equal to `byte`, exact up to the first one
    // (the borrow can only mark bytes after a true match).
    let matches = |word: u64, byte: u8| {
        let x = word ^ (ONES * byte as u64);
        x.wrapping_sub(ONES) & !x & HIGHS
    };
    let rest = bytes.get(from..)?;
    let mut i = 0;
    while i < 32 {
        let Some(eight) = rest.get(i..i + 8) else {
            return rest[i..]
                .iter()
                .position(|&b| b == b'"' || b == b'\\')
                .map(|n| from + i + n);
        };
        let word = u64::from_le_bytes(eight.try_into().expect("eight bytes"));
        let found = matches(word, b'"') | matches(word, b'\\');
        if found != 0 {
            return Some(from + i + (found.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    memchr2(b'"', b'\\', &rest[i..]).map(|n| from + i + n)
}

/// The JSON number `text` (already checked by the grammar) as an `i64`, as
/// `str::parse::<i64>` reads it: digits and an optional `-`, in range. Straight from the
/// bytes: going through `str` cost a UTF-8 check per number (8 % of the reading thread).
#[inline]
fn integer(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    // Up to 18 digits cannot overflow: no check per digit (ids and args are mostly
    // short integers, read once per event each).
    if digits.len() <= 18 {
        let mut value: i64 = 0;
        for &d in digits {
            let d = d.wrapping_sub(b'0');
            if d > 9 {
                return None;
            }
            value = value * 10 + d as i64;
        }
        return Some(if negative { -value } else { value });
    }
    // Accumulated below zero, so that i64::MIN fits.
    let mut value: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_sub((d - b'0') as i64)?;
    }
    if negative {
        Some(value)
    } else {
        value.checked_neg()
    }
}

/// A numeric id as an integer, when it is one (`12`, `4.0`).
fn number_id(text: &str) -> Option<i64> {
    if let Ok(i) = text.parse::<i64>() {
        return Some(i);
    }
    match text.parse::<f64>() {
        Ok(v) if v.fract() == 0.0 && v.abs() < 9.0e15 => Some(v as i64),
        _ => None,
    }
}

/// The length of the JSON number at the start of `b`, by JSON's grammar
/// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`; `None` where a part is
/// started but not finished (`-`, `1.`, `1e+`). What follows is the caller's to check.
#[inline(always)]
fn number_len(b: &[u8]) -> Option<usize> {
    let mut i = 0;
    if b.first() == Some(&b'-') {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        *i = digits_end(b, start);
        *i > start
    };
    if b.get(i) == Some(&b'0') {
        i += 1;
    } else if !digits(&mut i) {
        return None;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        if !digits(&mut i) {
            return None;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digits(&mut i) {
            return None;
        }
    }
    Some(i)
}

/// The number of microseconds at `pos` in nanoseconds, and where it ends, when it is
/// written plainly, as traces write times: 1 to 16 digits (no leading zero), then
/// maybe a point and 1 to 3 digits, and no byte after it that [`Cursor::scalar`] would
/// refuse or read on (an exponent). Equal to [`super::parse::micros_to_ns`] of the text;
/// `None` for anything else, which takes the general path.
#[inline(always)]
fn plain_micros(b: &[u8], pos: usize) -> Option<(i64, usize)> {
    let whole_end = digits_end(b, pos);
    let n = whole_end - pos;
    if !(1..=16).contains(&n) || (n > 1 && b[pos] == b'0') {
        return None;
    }
    let whole = digits_value(b, whole_end, n).checked_mul(1000)?;
    let (frac, end) = if b.get(whole_end) == Some(&b'.') {
        let frac_end = digits_end(b, whole_end + 1);
        let k = frac_end - whole_end - 1;
        if !(1..=3).contains(&k) {
            return None;
        }
        let scale = [1, 100, 10, 1][k];
        (digits_value(b, frac_end, k) * scale, frac_end)
    } else {
        (0, whole_end)
    };
    if continues_a_number(b, end) {
        return None;
    }
    Some((whole.checked_add(frac)?, end))
}

/// The value of the `n` ASCII digits (1 to 16) that end at `end` in `b`. Read from one
/// or two eight-byte loads of the bytes before `end`, with no loop: a loop over the
/// digits ends at a different count for each number (ids, args and times vary in
/// length), and its exit was mispredicted about once per number.
#[inline(always)]
fn digits_value(b: &[u8], end: usize, n: usize) -> i64 {
    debug_assert!((1..=16).contains(&n) && n <= end && end <= b.len());
    let word_before =
        |at: usize| u64::from_le_bytes(b[at - 8..at].try_into().expect("eight bytes"));
    if n <= 8 && end >= 8 {
        return eight_digits(zero_padded(word_before(end), n)) as i64;
    }
    if n > 8 && end >= 16 {
        let high = eight_digits(zero_padded(word_before(end - 8), n - 8));
        return (high * 100_000_000 + eight_digits(word_before(end))) as i64;
    }
    // A number within the first bytes of the text.
    b[end - n..end]
        .iter()
        .fold(0, |value, &d| value * 10 + (d - b'0') as i64)
}

/// `word` (eight bytes as loaded) with all but its last `n` bytes (1 to 8) made `'0'`.
#[inline(always)]
fn zero_padded(word: u64, n: usize) -> u64 {
    const ZEROS: u64 = u64::from_ne_bytes([b'0'; 8]);
    let keep = u64::MAX << (8 * (8 - n));
    (word & keep) | (ZEROS & !keep)
}

/// The value of eight ASCII digits loaded little-endian (the first digit in the lowest
/// byte): digits paired, the pairs into two fours, the fours into one, by multiplies.
#[inline(always)]
fn eight_digits(word: u64) -> u64 {
    const ZEROS: u64 = u64::from_ne_bytes([b'0'; 8]);
    const EVERY_FOURTH: u64 = 0x0000_00ff_0000_00ff;
    let d = word.wrapping_sub(ZEROS);
    // Byte 2k holds digit 2k times ten plus digit 2k+1 (at most 99: no carry).
    let pairs = d.wrapping_mul(10).wrapping_add(d >> 8);
    // The upper half of each product collects two pairs; their sum is the value.
    let high = (pairs & EVERY_FOURTH).wrapping_mul(100 + (1_000_000 << 32));
    let low = ((pairs >> 16) & EVERY_FOURTH).wrapping_mul(1 + (10_000 << 32));
    high.wrapping_add(low) >> 32
}

/// The integer at `pos` and where it ends, when it is written plainly: an optional `-`
/// and 1 to 16 digits (no leading zero), with no byte after it that [`Cursor::scalar`]
/// would refuse or read on. Equal to [`integer`] of the text [`Cursor::scalar`] takes;
/// `None` for anything else, which takes that general path.
#[inline(always)]
fn plain_integer(b: &[u8], pos: usize) -> Option<(i64, usize)> {
    let negative = b.get(pos) == Some(&b'-');
    let first = pos + negative as usize;
    let end = digits_end(b, first);
    let n = end - first;
    if !(1..=16).contains(&n) || (n > 1 && b[first] == b'0') || continues_a_number(b, end) {
        return None;
    }
    let value = digits_value(b, end, n);
    Some((if negative { -value } else { value }, end))
}

/// Whether the byte at `end` would continue a number or word there (making it invalid
/// or not plain), as [`Cursor::scalar`] judges.
#[inline(always)]
fn continues_a_number(b: &[u8], end: usize) -> bool {
    b.get(end)
        .is_some_and(|c| matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E' | b'a'..=b'z'))
}

/// Where the run of ASCII digits that starts at `from` ends. Timestamps and ids are
/// long runs of digits: eight bytes are checked at a time.
#[inline]
fn digits_end(b: &[u8], from: usize) -> usize {
    const LOW: u64 = u64::from_ne_bytes([0x30; 8]);
    const SIX: u64 = u64::from_ne_bytes([0x06; 8]);
    const HIGH_NIBBLES: u64 = u64::from_ne_bytes([0xf0; 8]);
    let mut i = from;
    while let Some(eight) = b.get(i..i + 8) {
        // A digit is 0x30..=0x39: after `^ 0x30`, its high nibble is zero and adding 6
        // keeps it so. A carry out of a byte that is not a digit can only mark the
        // bytes after it, so the lowest mark is exact.
        let x = u64::from_le_bytes(eight.try_into().expect("eight bytes")) ^ LOW;
        let not_digits = (x | x.wrapping_add(SIX)) & HIGH_NIBBLES;
        if not_digits != 0 {
            return i + (not_digits.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while b.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    i
}

/// Calls `f` with each key and raw value of the JSON object `text` until it returns
/// false. False if `text` is not a valid object or `f` stopped.
///
/// `text` must be JSON the event scanner has already checked (an event's `args`): values
/// are skipped by bracket matching, not validated again.
pub(crate) fn object_entries<'a>(text: &'a str, mut f: impl FnMut(&str, &'a str) -> bool) -> bool {
    let mut c = Cursor {
        bytes: text.as_bytes(),
        pos: 0,
    };
    let complete = c.members(|c, key| {
        if c.pos >= c.bytes.len() {
            return c.fail("expected a value");
        }
        let Some(end) = super::split::value_end(c.bytes, c.pos, true) else {
            return c.fail("a value that does not end");
        };
        let value = &text[c.pos..end];
        c.pos = end;
        // JSON's structural bytes are ASCII, so the key's bounds are char boundaries.
        let go_on = match &key {
            Str::Plain(a, b) => f(&text[*a..*b], value),
            Str::Decoded(s) => f(s, value),
        };
        Ok(go_on)
    });
    let complete = complete.unwrap_or(false);
    c.skip_ws();
    complete && c.pos == c.bytes.len()
}
#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;
    use crate::chrome::chunk::{Chunk, Part};
    use crate::chrome::parse::{Element, Micros, RawEvent};

    #[test]
    fn integers_read_as_str_parse_reads_them() {
        for text in [
            "0",
            "-0",
            "7",
            "-42",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "-9223372036854775809",
            "18446744073709551615",
            "12345678901234567890123",
            "999999999999999999",
            "-999999999999999999",
            "1000000000000000000",
            "-1000000000000000000",
            "40000014788",
            "12a",
            "-a",
            "1/",
            "1:",
            "--1",
            "1.5",
            "1e3",
            "-",
            "",
        ] {
            assert_eq!(integer(text.as_bytes()), text.parse::<i64>().ok(), "{text}");
        }
    }

    /// Where the reading thread converts a time itself, it reads the same number as
    /// the scalar check and gets what the builder's exact conversion gets; and it does
    /// on the times traces write.
    #[test]
    fn plain_micros_agree_with_the_exact_conversion() {
        let mut next = below(0x9e37_79b9_7f4a_7c15);
        let alphabet = b"0123456789000111999..-+eE ,}xa";
        let mut texts: Vec<String> = [
            "1712195520148961.616,",
            "48.279}",
            "0",
            "0.5",
            "00",
            "01.5",
            "1.",
            "1.2345",
            "1e3",
            "1.5E-3,",
            "-5",
            "9223372036854775",
            "9223372036854776",
            "9223372036854775.807",
            "9223372036854775.808",
            "9999999999999999.999",
            "12345678901234567",
            "1.5x",
            "7 ,",
        ]
        .iter()
        .map(|t| t.to_string())
        .collect();
        for _ in 0..200_000 {
            let len = next(24) as usize;
            let text: Vec<u8> = (0..len)
                .map(|_| alphabet[next(alphabet.len() as u64) as usize])
                .collect();
            texts.push(String::from_utf8(text).unwrap());
        }
        let mut converted = 0;
        for text in &texts {
            let bytes = text.as_bytes();
            let Some((ns, end)) = plain_micros(bytes, 0) else {
                continue;
            };
            converted += 1;
            let mut c = Cursor { bytes, pos: 0 };
            assert_eq!(c.scalar().ok(), Some(end), "{text:?}");
            assert_eq!(
                crate::chrome::parse::micros_to_ns(&text[..end]),
                Some(ns),
                "{text:?}"
            );
        }
        assert!(converted > 5_000, "only {converted} converted");
        for (text, ns) in [
            ("1712195520148961.616,", 1_712_195_520_148_961_616),
            ("48.279}", 48_279),
            ("0.5", 500),
            ("7 ,", 7000),
        ] {
            assert_eq!(plain_micros(text.as_bytes(), 0).map(|(ns, _)| ns), Some(ns));
        }
        for text in [
            "00",
            "1.",
            "1.2345",
            "1e3",
            "-5",
            "9223372036854776",
            "1.5x",
        ] {
            assert_eq!(plain_micros(text.as_bytes(), 0), None, "{text}");
        }
    }

    /// The digits' value from whole-word loads is the digits' value, for every length,
    /// whatever bytes lie before them, and where they start within the first words of
    /// the text (where the loads cannot reach back).
    #[test]
    fn digit_values_from_words_equal_the_digits() {
        let mut next = below(0x2545_f491_4f6c_dd1d);
        for n in 1..=16 {
            for before in 0..20 {
                for _ in 0..40 {
                    let mut text: Vec<u8> = (0..before).map(|_| next(256) as u8).collect();
                    let digits: Vec<u8> = (0..n).map(|_| b'0' + next(10) as u8).collect();
                    text.extend_from_slice(&digits);
                    text.extend((0..next(3)).map(|_| next(256) as u8));
                    let naive = digits.iter().fold(0i64, |v, &d| v * 10 + (d - b'0') as i64);
                    assert_eq!(
                        digits_value(&text, before + n, n),
                        naive,
                        "{:?}",
                        String::from_utf8_lossy(&digits)
                    );
                }
            }
        }
        assert_eq!(eight_digits(u64::from_le_bytes(*b"12345678")), 12_345_678);
        assert_eq!(eight_digits(u64::from_le_bytes(*b"99999999")), 99_999_999);
        assert_eq!(eight_digits(u64::from_le_bytes(*b"00000000")), 0);
    }

    /// Where the reading thread takes an integer as plain, it ends where the scalar
    /// check ends it and has the value the general path's [`integer`] gives; it takes
    /// the integers traces write.
    #[test]
    fn plain_integers_agree_with_the_general_path() {
        let mut next = below(0x9e37_79b9_7f4a_7c15);
        let alphabet = b"0123456789000111999..-+eE ,}xa";
        let mut texts: Vec<Vec<u8>> = Vec::new();
        for _ in 0..200_000 {
            let prefix = next(12) as usize;
            let len = next(24) as usize;
            let mut text: Vec<u8> = (0..prefix).map(|_| b"{\":,x "[next(6) as usize]).collect();
            text.extend((0..len).map(|_| alphabet[next(alphabet.len() as u64) as usize]));
            texts.push(text);
        }
        let mut taken = 0;
        for text in &texts {
            for pos in 0..text.len() {
                let Some((value, end)) = plain_integer(text, pos) else {
                    continue;
                };
                taken += 1;
                let mut c = Cursor { bytes: text, pos };
                assert_eq!(c.scalar().ok(), Some(end), "{text:?} at {pos}");
                assert_eq!(integer(&text[pos..end]), Some(value), "{text:?} at {pos}");
            }
        }
        assert!(taken > 100_000, "only {taken} taken");
        for (text, pos, value) in [
            (&b"\"External id\":40000014788,"[..], 14, 40_000_014_788),
            (b"{\"pid\":1102}", 7, 1102),
            (b"-7}", 0, -7),
            (b"-0,", 0, 0),
            (b"9999999999999999", 0, 9_999_999_999_999_999),
        ] {
            assert_eq!(plain_integer(text, pos).map(|(v, _)| v), Some(value));
        }
        for text in ["01", "1.5", "1e3", "-", "12345678901234567", "7a"] {
            assert_eq!(plain_integer(text.as_bytes(), 0), None, "{text}");
        }
    }

    /// A xorshift generator of numbers below the bound it is given each call.
    fn below(mut seed: u64) -> impl FnMut(u64) -> u64 {
        move |n| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        }
    }

    fn summary(ev: &RawEvent) -> String {
        // An id2 with neither id means no id2.
        let id2 = ev
            .id2
            .as_ref()
            .filter(|id2| id2.local.is_some() || id2.global.is_some());
        format!(
            "{:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
            ev.ph,
            ev.name,
            ev.cat,
            ev.pid,
            ev.tid,
            ev.ts.map(Micros::ns),
            ev.dur.map(Micros::ns),
            ev.id,
            id2,
            ev.bp,
            ev.s,
            ev.args
        )
    }

    /// Scans `text` as one whole element, as the splitter would, and reads it back
    /// through a chunk: `None` for an element that is not an object.
    fn scan_whole(text: &str) -> Result<Option<String>> {
        let bytes = text.as_bytes();
        let mut c = Cursor { bytes, pos: 0 };
        c.skip_ws();
        let mut part = Part::default();
        let end = scan_event(bytes, c.pos, 0, &mut part)?;
        let mut c = Cursor { bytes, pos: end };
        c.skip_ws();
        if c.pos != bytes.len() {
            return c.fail("data after the end of an event");
        }
        let chunk = Chunk::new(Cow::Borrowed(text), 0, part);
        if chunk.events()[0].empty {
            return Ok(Some("{}".into()));
        }
        let event = chunk.event(&chunk.events()[0]);
        if let Some(ev) = &event {
            check_split_args(ev);
        }
        Ok(event.map(|ev| summary(&ev)))
    }

    /// The args entries split while scanning are the object's entries as serde reads
    /// them: same keys in order, string values decoded, other values as their text.
    fn check_split_args(ev: &RawEvent) {
        let Some(split) = ev.arg_entries else {
            return;
        };
        let raw = ev.args.expect("split args keep their text");
        let mut reference = Vec::new();
        assert!(object_entries(raw, |k, v| {
            reference.push((k.to_string(), v.to_string()));
            true
        }));
        assert_eq!(split.entries.len(), reference.len(), "{raw}");
        for (e, (key, value)) in split.entries.iter().zip(&reference) {
            assert_eq!(split.texts.of(e.key), key);
            let got = split.texts.of(e.value);
            match e.kind {
                ArgKind::String => {
                    assert_eq!(got, serde_json::from_str::<String>(value).unwrap())
                }
                ArgKind::Int(i) => {
                    assert_eq!(got, value);
                    assert_eq!(Some(i), serde_json::from_str::<i64>(value).ok());
                }
                ArgKind::Other => {
                    assert_eq!(got, value);
                    assert!(serde_json::from_str::<i64>(value).is_err());
                }
            }
        }
    }

    /// The scanner reads what serde (the reference reader) reads, and fails where it fails.
    #[test]
    fn agrees_with_serde() {
        let cases = [
            r#"{"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 12, "tid": "stream 7", "ts": 1.5, "dur": 2, "args": {"a": [1, {"b": null}], "c": "d\"e"}}"#,
            r#"{"name": "caf\u00e9\n", "pid": -3, "tid": 4.0, "id": "0x1f", "id2": {"local": "0x2"}, "bp": "e", "s": "g"}"#,
            r#"{"ph": 5, "name": ["x"], "pid": {"a": 1}, "tid": true, "ts": "12", "unknown": {"deep": [[[]]]}}"#,
            r#"{"id2": {"global": 7, "other": [1]}, "id": 18446744073709551615, "pid": false}"#,
            r#"{"id2": {"local": null}}"#,
            // Ids that are numbers but not integers: serde reads them as f64s.
            r#"{"pid": 22.30, "tid": 1.5e3, "id": 123456789012345678901234, "id2": {"local": 0.10}}"#,
            r#"{"pid": -18446744073709551616, "tid": 9007199254740993.0, "id": 2.5E-1}"#,
            r#"{"id2": {"local": null, "global": 5}}"#,
            r#"{"id2": {"global": 5, "global": null}}"#,
            r#"{"id2": {}}"#,
            r#"{"id2": {"local": 1, "local": 2}}"#,
            // (serde would also read an id2 array as its fields in order; traces never write one.)
            r#"{"id2": "x", "n\u0061me": "escaped key"}"#,
            r#"{"args": { "k\u0031" : "v\n" , "n": -1.5e3 , "t": true, "o": {}, "k1": null }}"#,
            r#"{"args": {"i": -42, "big": 18446744073709551615, "z": 0, "f": 2.0, "e": 1e2}}"#,
            r#"{"args": {}}"#,
            r#"{"args": [1, "a"]}"#,
            r#"{"args": {"a": 1,}}"#,
            r#"{}"#,
            r#"  { "ph" : "i" , "ts" : 1e3 }  "#,
            r#"[1, 2]"#,
            r#""text""#,
            r#"7"#,
            r#"null"#,
            r#"{"ph": "X",}"#,
            r#"{"ph" "X"}"#,
            r#"{"ph": "X" "name": "y"}"#,
            r#"{"a": [1, 2,]}"#,
            r#"{"a": [1 2]}"#,
            r#"{"a": tru}"#,
            r#"{"a": 01}"#,
            r#"{"a": 1.}"#,
            r#"{"a": "\x"}"#,
            r#"{"a": "\u12"}"#,
            r#"{"a": {"b" 1}}"#,
            r#"{"a": {1: 2}}"#,
            r#"{"a": 1} x"#,
            r#"{"a": [}"#,
            r#"{"a": -}"#,
            r#"{"a": {"b": 1,}}"#,
            // Keys the eight-byte match must not take for fields, or must take exactly.
            r#"{"phx":"B","ph":"X","names":1,"name":"n","s":"p","s2":"q","id2x":1,"id2":{"local":3},"tsx":9,"ts":1,"cats":"z","cat":"c"}"#,
            r#"{"ph" :"X","pid" : 1,"tid":2,"ts":3,"dur":4,"args":{"ph":"x"},"bp":"e","id":5}"#,
            r#"{"p\u0068":"X","na\u006de":"m","tid":"t","s":"g"}"#,
            r#"{"ts":1}"#,
            r#"{"s":1}"#,
            r#"{"ph":"#,
            r#"{"ph":"X","pid":123456789012345678,"tid":-0,"ts":1712195500577678.888,"dur":0.001}"#,
            // Kineto's order, read key after key, and each way out of it into the loop.
            r#"{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":7,"tid":8,"ts":1.5,"dur":2,"args":{"External id":3,"Ev Idx":4}}"#,
            "{\n    \"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"pid\": 0, \"tid\": 7,\n    \"ts\": 1695835542514261, \"dur\": 43,\n    \"args\": {\n      \"External id\": 1,\"Ev Idx\": 0\n    }\n  }",
            r#"{"ph":"X","cat":"c","name":"n","pid":1,"tid":2,"ts":3,"dur":4,"args":{},"id":5,"ph":"B"}"#,
            r#"{"ph":"X","cat":"c","ph":"B","name":"n"}"#,
            r#"{"ph":"f","id":1,"pid":2,"tid":3,"ts":4,"cat":"fwdbwd","name":"fwdbwd","bp":"e"}"#,
            r#"{"ph":"X","cat":"c","name":"n","pid":1,"tid":2,"ts":3}"#,
            r#"{"ph":"X","cat" :"c","name":"n"}"#,
            r#"{"ph":"X","cat":"c","name":"n","pid":"p","tid":true,"ts":"5","dur":null,"args":[1]}"#,
            r#"{"ph":"X","cat":"c","name":"n","pid":1,"tid":2,"ts":3,"dur":4,"args":{"a":1}"#,
            r#"{"ph":"X","cat":"c","name":"n","pid":1,"tid":2,"ts":3,"dur":4,"args":{"a":1},}"#,
            r#"{"ph":"X","cat":"c","name":"n","pid":1,"tid":2,"ts":3,"dur":4,"args":{"a":1}"ts":9}"#,
            r#"{"ph":"X","cat":"c","name":"n","pid":1,"tid":2,"ts":3,"dur":4,"args":{"a":1},"ts":9}"#,
            r#"{"ph":"X","cat":"c","name":"n","pid":1,"tid":2,"ts":3,"dur":4,"args":{"a":1}, "ts":9 }"#,
            r#"{"ph":"X","cat":"c","name":"n","pid":1,"tid":2,"ts":3,"dur":4,"args":{"a":1},"#,
            r#"{"ph":"X","cat":"c""#,
            r#"{"ph":"X","ca"#,
            r#"{"ph""#,
        ];
        for case in cases {
            let ours = scan_whole(case);
            let reference = serde_json::from_str::<Element>(case).map(|e| match e {
                Element::Event(ev) => Some(summary(&ev)),
                Element::Empty => Some("{}".into()),
                Element::NotAnObject => None,
            });
            match (&ours, &reference) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{case}"),
                (Err(_), Err(_)) => {}
                _ => panic!(
                    "{case}: scanner {ours:?} but serde {:?}",
                    reference.as_ref().map_err(|e| e.to_string())
                ),
            }
        }
    }

    #[test]
    fn digit_runs_end_at_the_first_other_byte() {
        // Every byte value, at every position of a run that crosses eight-byte words.
        for len in 0..20 {
            for other in 0..=255u8 {
                let mut text = vec![b'7'; len];
                text.push(other);
                text.extend_from_slice(b"12345678");
                for from in 0..=len.min(3) {
                    let naive = from
                        + text[from..]
                            .iter()
                            .position(|b| !b.is_ascii_digit())
                            .unwrap_or(text.len() - from);
                    assert_eq!(digits_end(&text, from), naive, "{len} {other} {from}");
                }
            }
        }
    }

    #[test]
    fn nesting_is_limited() {
        let deep = format!("{{\"a\": {}{}}}", "[".repeat(200), "]".repeat(200));
        assert!(scan_whole(&deep).is_err());
        let ok = format!("{{\"a\": {}{}}}", "[".repeat(100), "]".repeat(100));
        assert!(scan_whole(&ok).is_ok());
    }

    fn scalar_ok(text: &str) -> bool {
        let mut c = Cursor {
            bytes: text.as_bytes(),
            pos: 0,
        };
        c.scalar().is_ok() && c.pos == text.len()
    }

    #[test]
    fn quotes_and_backslashes_are_found_at_any_position() {
        for len in 0..80 {
            for at in 0..len {
                for byte in [b'"', b'\\'] {
                    let mut text = vec![b'a'; len];
                    text[at] = byte;
                    // A byte that differs from the target by the borrow must not match.
                    if at + 1 < len {
                        text[at + 1] = byte + 1;
                    }
                    for from in 0..=at {
                        assert_eq!(
                            find_quote_or_backslash(&text, from),
                            Some(at),
                            "{len} {at} {from}"
                        );
                    }
                    assert_eq!(
                        find_quote_or_backslash(&text, at + 1),
                        text[at + 1..]
                            .iter()
                            .position(|&b| b == b'"' || b == b'\\')
                            .map(|n| at + 1 + n)
                    );
                }
            }
            assert_eq!(find_quote_or_backslash(&vec![0xffu8; len], 0), None);
        }
        for good in ["true", "false", "null", "-0.5e7"] {
            assert!(scalar_ok(good), "{good}");
        }
        for bad in ["nul", "nulls", "truex", "t", "1x"] {
            assert!(!scalar_ok(bad), "{bad}");
        }
    }

    #[test]
    fn numbers_follow_json() {
        for good in [
            "0",
            "-0",
            "12",
            "1.5",
            "-1.25e-3",
            "1E9",
            "3605057436125.863",
        ] {
            assert_eq!(number_len(good.as_bytes()), Some(good.len()), "{good}");
        }
        for bad in [
            "", "-", "01", "1.", ".5", "1e", "1e+", "+1", "0x1", "1.2.3", "--1",
        ] {
            assert!(!scalar_ok(bad), "{bad}");
        }
    }

    #[test]
    fn object_entries_reads_keys_and_raw_values() {
        let mut seen = Vec::new();
        assert!(object_entries(
            r#" {"a": [1, "]"], "b\u0021": {"c": 2}} "#,
            |k, v| {
                seen.push(format!("{k}={v}"));
                true
            }
        ));
        assert_eq!(seen, [r#"a=[1, "]"]"#, r#"b!={"c": 2}"#]);
        assert!(!object_entries("[1]", |_, _| true));
        assert!(!object_entries(r#"{"a": 1} x"#, |_, _| true));
    }
}
