//! A hand-written reader for one trace event object: it borrows every field it can,
//! keeps `ts`, `dur` and `args` as raw JSON text, and validates the rest of the event
//! without building it. It does the work serde's generic machinery did, at a fraction
//! of the cost, on the hottest path of every import.

use std::borrow::Cow;

use memchr::memchr2;

use super::parse::{Element, Id, Id2, RawEvent};

/// A syntax error at `offset` in the event's text.
#[derive(Debug, PartialEq)]
pub(crate) struct ScanError {
    pub offset: usize,
    pub message: String,
}

/// Containers nested deeper than this are refused, as serde_json does, so hostile input
/// cannot exhaust anything.
const MAX_DEPTH: usize = 128;

struct Cursor<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

type Result<T> = std::result::Result<T, ScanError>;

impl<'a> Cursor<'a> {
    fn fail<T>(&self, message: &str) -> Result<T> {
        Err(ScanError {
            offset: self.pos.min(self.bytes.len()),
            message: message.to_string(),
        })
    }

    fn skip_ws(&mut self) {
        while let Some(b) = self.bytes.get(self.pos) {
            if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                break;
            }
            self.pos += 1;
        }
    }

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

    /// A string at the cursor: borrowed when it has no escapes.
    fn string(&mut self) -> Result<Cow<'a, str>> {
        let start = self.pos;
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
            return Ok(Cow::Borrowed(&self.text[start + 1..self.pos - 1]));
        }
        match serde_json::from_str::<String>(&self.text[start..self.pos]) {
            Ok(s) => Ok(Cow::Owned(s)),
            Err(e) => {
                self.pos = start;
                self.fail(&format!("an invalid string ({})", super::serde_message(&e)))
            }
        }
    }

    /// A number or literal at the cursor, checked for JSON's grammar.
    fn scalar(&mut self) -> Result<&'a str> {
        let start = self.pos;
        let end = self.bytes[start..]
            .iter()
            .position(
                |b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E' | b'a'..=b'z'),
            )
            .map_or(self.bytes.len(), |n| start + n);
        let word = &self.text[start..end];
        let valid = matches!(word, "true" | "false" | "null") || is_json_number(word);
        if !valid {
            return self.fail("an invalid value");
        }
        self.pos = end;
        Ok(word)
    }

    /// Skips any value at the cursor, checking its syntax; returns its text.
    fn value(&mut self) -> Result<&'a str> {
        self.skip_ws();
        let start = self.pos;
        // The closing bracket of each open container.
        let mut open: Vec<u8> = Vec::new();
        loop {
            // A value starts here.
            self.skip_ws();
            match self.peek() {
                None => return self.fail("the event ends early"),
                Some(c @ (b'{' | b'[')) => {
                    if open.len() == MAX_DEPTH {
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
                Some(b'"') => {
                    self.string()?;
                }
                Some(b'}' | b']' | b',' | b':') => return self.fail("expected a value"),
                Some(_) => {
                    self.scalar()?;
                }
            }
            // After a value: close containers, or move to their next member.
            loop {
                let Some(&close) = open.last() else {
                    return Ok(&self.text[start..self.pos]);
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
        self.string()?;
        self.expect(b':', "expected ':' after a key")
    }

    /// Reads the object at the cursor, calling `member` with each key once the cursor
    /// is on its value; `member` reads the value and says whether to go on. Returns
    /// false if `member` stopped early.
    fn members(
        &mut self,
        mut member: impl FnMut(&mut Self, Cow<'a, str>) -> Result<bool>,
    ) -> Result<bool> {
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

    /// A string field, or `None` (the value skipped) when it holds another type.
    fn lenient_string(&mut self) -> Result<Option<Cow<'a, str>>> {
        self.skip_ws();
        if self.peek() == Some(b'"') {
            self.string().map(Some)
        } else {
            self.value().map(|_| None)
        }
    }

    /// A pid, tid or id: a number or a string; `None` for other types.
    fn lenient_id(&mut self) -> Result<Option<Id<'a>>> {
        self.skip_ws();
        match self.peek() {
            Some(b'"') => Ok(Some(Id::Str(self.string()?))),
            Some(b'-' | b'0'..=b'9') => {
                let text = self.scalar()?;
                Ok(Some(number_id(text)))
            }
            Some(b't') => self.scalar().map(|_| Some(Id::Int(1))),
            Some(b'f') => self.scalar().map(|_| Some(Id::Int(0))),
            _ => self.value().map(|_| None),
        }
    }
}

/// The next `"` or `\\` at or after `from`. Most strings in traces are short keys and
/// names, for which a plain loop beats setting up a vectorised search.
pub(crate) fn find_quote_or_backslash(bytes: &[u8], from: usize) -> Option<usize> {
    let rest = bytes.get(from..)?;
    for (i, &b) in rest.iter().take(16).enumerate() {
        if b == b'"' || b == b'\\' {
            return Some(from + i);
        }
    }
    if rest.len() <= 16 {
        return None;
    }
    memchr2(b'"', b'\\', &rest[16..]).map(|n| from + 16 + n)
}

fn number_id(text: &str) -> Id<'_> {
    if let Ok(i) = text.parse::<i64>() {
        return Id::Int(i);
    }
    match text.parse::<f64>() {
        Ok(v) if v.fract() == 0.0 && v.abs() < 9.0e15 => Id::Int(v as i64),
        _ => Id::Str(Cow::Borrowed(text)),
    }
}

/// JSON's number grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
fn is_json_number(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if b.first() == Some(&b'-') {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i > start
    };
    if b.get(i) == Some(&b'0') {
        i += 1;
    } else if !digits(&mut i) {
        return false;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        if !digits(&mut i) {
            return false;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digits(&mut i) {
            return false;
        }
    }
    i == b.len()
}

/// Reads one element of the event array (its whole text, as the splitter found it).
pub(crate) fn parse_element(text: &str) -> Result<Element<'_>> {
    let mut c = Cursor {
        text,
        bytes: text.as_bytes(),
        pos: 0,
    };
    c.skip_ws();
    if c.peek() != Some(b'{') {
        c.value()?;
        return finish(&mut c, Element::NotAnObject);
    }
    let mut ev = RawEvent::default();
    c.members(|c, key| {
        match key.as_ref() {
            "ph" => ev.ph = c.lenient_string()?,
            "name" => ev.name = c.lenient_string()?,
            "cat" => ev.cat = c.lenient_string()?,
            "bp" => ev.bp = c.lenient_string()?,
            "s" => ev.s = c.lenient_string()?,
            "pid" => ev.pid = c.lenient_id()?,
            "tid" => ev.tid = c.lenient_id()?,
            "id" => ev.id = c.lenient_id()?,
            "ts" => ev.ts = Some(c.value()?),
            "dur" => ev.dur = Some(c.value()?),
            "args" => ev.args = Some(c.value()?),
            "id2" => ev.id2 = serde_json::from_str::<Id2>(c.value()?).ok(),
            _ => {
                c.value()?;
            }
        }
        Ok(true)
    })?;
    finish(&mut c, Element::Event(ev))
}

/// Calls `f` with each key and raw value of the JSON object `text` until it returns
/// false. False if `text` is not a valid object or `f` stopped.
///
/// `text` must be JSON the event scanner has already checked (an event's `args`): values
/// are skipped by bracket matching, not validated again.
pub(crate) fn object_entries<'a>(text: &'a str, mut f: impl FnMut(&str, &'a str) -> bool) -> bool {
    let mut c = Cursor {
        text,
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
        let value = &c.text[c.pos..end];
        c.pos = end;
        Ok(f(&key, value))
    });
    let complete = complete.unwrap_or(false);
    c.skip_ws();
    complete && c.pos == c.bytes.len()
}

fn finish<'a>(c: &mut Cursor<'a>, element: Element<'a>) -> Result<Element<'a>> {
    c.skip_ws();
    if c.pos != c.bytes.len() {
        return c.fail("data after the end of an event");
    }
    Ok(element)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(e: &Element) -> String {
        match e {
            Element::NotAnObject => "not an object".into(),
            Element::Event(ev) => format!(
                "{:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
                ev.ph,
                ev.name,
                ev.cat,
                ev.pid,
                ev.tid,
                ev.ts,
                ev.dur,
                ev.id,
                ev.id2,
                ev.bp,
                ev.s,
                ev.args
            ),
        }
    }

    /// The scanner reads what serde (the reference reader) reads, and fails where it fails.
    #[test]
    fn agrees_with_serde() {
        let cases = [
            r#"{"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 12, "tid": "stream 7", "ts": 1.5, "dur": 2, "args": {"a": [1, {"b": null}], "c": "d\"e"}}"#,
            r#"{"name": "caf\u00e9\n", "pid": -3, "tid": 4.0, "id": "0x1f", "id2": {"local": "0x2"}, "bp": "e", "s": "g"}"#,
            r#"{"ph": 5, "name": ["x"], "pid": {"a": 1}, "tid": true, "ts": "12", "unknown": {"deep": [[[]]]}}"#,
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
        ];
        for case in cases {
            let ours = parse_element(case);
            let reference = serde_json::from_str::<Element>(case);
            match (&ours, &reference) {
                (Ok(a), Ok(b)) => assert_eq!(summary(a), summary(b), "{case}"),
                (Err(_), Err(_)) => {}
                _ => panic!(
                    "{case}: scanner {:?} but serde {:?}",
                    ours.as_ref().map(summary),
                    reference.as_ref().map(summary).map_err(|e| e.to_string())
                ),
            }
        }
    }

    #[test]
    fn nesting_is_limited() {
        let deep = format!("{{\"a\": {}{}}}", "[".repeat(200), "]".repeat(200));
        assert!(parse_element(&deep).is_err());
        let ok = format!("{{\"a\": {}{}}}", "[".repeat(100), "]".repeat(100));
        assert!(parse_element(&ok).is_ok());
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
            assert!(is_json_number(good), "{good}");
        }
        for bad in [
            "", "-", "01", "1.", ".5", "1e", "1e+", "+1", "0x1", "1.2.3", "--1",
        ] {
            assert!(!is_json_number(bad), "{bad}");
        }
    }
}
