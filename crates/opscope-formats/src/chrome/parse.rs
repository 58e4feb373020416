//! Borrowing serde structures for Chrome trace JSON: one event at a time, straight from
//! the input bytes, with exact decimal timestamps.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// One trace event as written. Reading is lenient: a field of the wrong type reads as
/// absent (the builder then counts the event as malformed) instead of failing the file.
#[derive(Default, Debug, Clone)]
pub(crate) struct RawEvent<'a> {
    pub ph: Option<Cow<'a, str>>,
    pub name: Option<Cow<'a, str>>,
    pub cat: Option<Cow<'a, str>>,
    pub pid: Option<Id<'a>>,
    pub tid: Option<Id<'a>>,
    pub ts: Option<Micros<'a>>,
    pub dur: Option<Micros<'a>>,
    pub id: Option<Id<'a>>,
    pub id2: Option<Id2<'a>>,
    pub bp: Option<Cow<'a, str>>,
    pub s: Option<Cow<'a, str>>,
    /// Raw JSON text of the args value.
    pub args: Option<&'a str>,
    /// The entries of `args` when it is an object, split by the reading thread.
    pub arg_entries: Option<super::chunk::ArgEntries<'a>>,
}

/// An element of the event array, as the reference reader sees it: an event object, or
/// anything else.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Element<'a> {
    Event(RawEvent<'a>),
    NotAnObject,
    /// `{}`: the element TensorFlow's and xprof's trace writers end the array with.
    Empty,
}

/// The reference reader the hand-written scanner is tested against.
impl<'de: 'a, 'a> Deserialize<'de> for Element<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Element<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a trace event object")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut ev = RawEvent::default();
                let mut empty = true;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    empty = false;
                    match key.as_ref() {
                        "ph" => ev.ph = map.next_value::<Lenient<Cow<'de, str>>>()?.0,
                        "name" => ev.name = map.next_value::<Lenient<Cow<'de, str>>>()?.0,
                        "cat" => ev.cat = map.next_value::<Lenient<Cow<'de, str>>>()?.0,
                        "pid" => ev.pid = map.next_value::<Lenient<Id<'de>>>()?.0,
                        "tid" => ev.tid = map.next_value::<Lenient<Id<'de>>>()?.0,
                        "id" => ev.id = map.next_value::<Lenient<Id<'de>>>()?.0,
                        "bp" => ev.bp = map.next_value::<Lenient<Cow<'de, str>>>()?.0,
                        "s" => ev.s = map.next_value::<Lenient<Cow<'de, str>>>()?.0,
                        "ts" => {
                            ev.ts = Some(Micros::Text(map.next_value::<&'de RawValue>()?.get()))
                        }
                        "dur" => {
                            ev.dur = Some(Micros::Text(map.next_value::<&'de RawValue>()?.get()))
                        }
                        "args" => ev.args = Some(map.next_value::<&'de RawValue>()?.get()),
                        "id2" => {
                            let raw: &'de RawValue = map.next_value()?;
                            ev.id2 = serde_json::from_str(raw.get()).ok();
                        }
                        _ => {
                            map.next_value::<de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(if empty {
                    Element::Empty
                } else {
                    Element::Event(ev)
                })
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                Ok(Element::NotAnObject)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Element::NotAnObject)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Element::NotAnObject)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Element::NotAnObject)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Element::NotAnObject)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Element::NotAnObject)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Element::NotAnObject)
            }
        }
        d.deserialize_any(V)
    }
}

/// A string, or `None` when the JSON holds another type (which is consumed).
struct Lenient<T>(Option<T>);

impl<'de: 'a, 'a> Deserialize<'de> for Lenient<Cow<'a, str>> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Lenient<Cow<'de, str>>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Lenient(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Lenient(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Lenient(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Lenient(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Lenient(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Lenient(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Lenient(None))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                Ok(Lenient(None))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map
                    .next_entry::<de::IgnoredAny, de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(Lenient(None))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Lenient<Id<'a>> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Lenient(Id::deserialize_lenient(d)?))
    }
}

/// A pid, tid or id: Chrome traces use numbers and strings for all three.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Id<'a> {
    Int(i64),
    Str(Cow<'a, str>),
}

impl Id<'_> {
    /// A number when the id is one, or a string of digits (Kineto writes both for one
    /// thread).
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Id::Int(i) => Some(*i),
            Id::Str(s) => s.trim().parse().ok(),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Id<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Id::deserialize_lenient(d)?
            .ok_or_else(|| de::Error::custom("expected a number or a string"))
    }
}

impl<'a> Id<'a> {
    /// Reads a number or string; anything else is consumed and read as `None`.
    fn deserialize_lenient<'de: 'a, D: Deserializer<'de>>(d: D) -> Result<Option<Self>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Option<Id<'de>>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number or a string")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Some(Id::Int(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Some(match i64::try_from(v) {
                    Ok(i) => Id::Int(i),
                    Err(_) => Id::Str(Cow::Owned(v.to_string())),
                }))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(Some(if v.fract() == 0.0 && v.abs() < 9.0e15 {
                    Id::Int(v as i64)
                } else {
                    Id::Str(Cow::Owned(v.to_string()))
                }))
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Some(Id::Str(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Some(Id::Str(Cow::Owned(v.to_string()))))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(Some(Id::Int(v as i64)))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                Ok(None)
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map
                    .next_entry::<de::IgnoredAny, de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(None)
            }
        }
        d.deserialize_any(V)
    }
}

/// Chrome's `id2: {"local": …}` / `{"global": …}`.
#[derive(Deserialize, Clone, Debug, PartialEq)]
pub(crate) struct Id2<'a> {
    #[serde(borrow, default)]
    pub local: Option<Id<'a>>,
    #[serde(borrow, default)]
    pub global: Option<Id<'a>>,
}

/// A `ts` or `dur` as read: nanoseconds the reading thread converted already (a plain
/// number, see `scan::plain_micros`), or the JSON text as written.
#[derive(Copy, Clone, Debug, PartialEq)]
pub(crate) enum Micros<'a> {
    Ns(i64),
    Text(&'a str),
}

impl Micros<'_> {
    /// Exact nanoseconds, or `None` where [`micros_to_ns`] has none.
    #[inline]
    pub fn ns(self) -> Option<i64> {
        match self {
            Micros::Ns(ns) => Some(ns),
            Micros::Text(text) => micros_to_ns(text),
        }
    }
}

/// Parses a JSON number of microseconds into exact nanoseconds: `1712195495505583.0`,
/// `3605057436125.863`, `-5`, `1.5e3`. Digits past the nanosecond are rounded half away
/// from zero. `None` for anything that is not a finite number in range.
pub(crate) fn micros_to_ns(raw: &str) -> Option<i64> {
    // Fast path for what traces hold: plain digits with at most three decimals, sixteen
    // whole digits at most (Unix time in µs; no overflow while reading them), in one
    // pass.
    let bytes = raw.as_bytes();
    let digits = |from: usize, to: usize| {
        let mut value: i64 = 0;
        let mut at = from;
        while at < to {
            let digit = bytes[at].wrapping_sub(b'0');
            if digit > 9 {
                break;
            }
            value = value * 10 + digit as i64;
            at += 1;
        }
        (value, at)
    };
    let (whole, at) = digits(0, bytes.len().min(17));
    if (1..=16).contains(&at) {
        if at == bytes.len() {
            return whole.checked_mul(1000);
        }
        if bytes[at] == b'.' && (2..=4).contains(&(bytes.len() - at)) {
            let (frac, end) = digits(at + 1, bytes.len());
            if end == bytes.len() {
                let scale = [1000, 100, 10, 1][end - at - 1];
                return whole.checked_mul(1000)?.checked_add(frac * scale);
            }
        }
    }
    let text = raw.trim();
    let text = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    if digits.contains(['e', 'E']) {
        let v: f64 = text.parse().ok()?;
        let ns = (v * 1000.0).round();
        return (ns.is_finite() && ns.abs() < 9.2e18).then_some(ns as i64);
    }
    let (int_part, frac_part) = digits.split_once('.').unwrap_or((digits, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    if !int_part.bytes().all(|b| b.is_ascii_digit())
        || !frac_part.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let mut ns: i64 = 0;
    for b in int_part.bytes() {
        ns = ns.checked_mul(10)?.checked_add((b - b'0') as i64)?;
    }
    ns = ns.checked_mul(1000)?;
    let frac = frac_part.as_bytes();
    let mut scale = 100;
    for &b in frac.iter().take(3) {
        ns = ns.checked_add((b - b'0') as i64 * scale)?;
        scale /= 10;
    }
    if frac.get(3).is_some_and(|&b| b >= b'5') {
        ns = ns.checked_add(1)?;
    }
    Some(if negative { -ns } else { ns })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_exact_to_the_nanosecond() {
        assert_eq!(
            micros_to_ns("3605057436125.863"),
            Some(3_605_057_436_125_863)
        );
        assert_eq!(
            micros_to_ns("1712195495505583.0"),
            Some(1_712_195_495_505_583_000)
        );
        assert_eq!(
            micros_to_ns("1669783687389324"),
            Some(1_669_783_687_389_324_000)
        );
        assert_eq!(micros_to_ns("4.928"), Some(4928));
        assert_eq!(micros_to_ns("0.0004"), Some(0));
        assert_eq!(micros_to_ns("0.0005"), Some(1));
        assert_eq!(micros_to_ns("-2.5"), Some(-2500));
        assert_eq!(micros_to_ns("1.5e3"), Some(1_500_000));
        assert_eq!(micros_to_ns("\"12\""), Some(12_000));
        assert_eq!(micros_to_ns("1e400"), None);
        assert_eq!(micros_to_ns("99999999999999999999"), None);
        assert_eq!(micros_to_ns("abc"), None);
        assert_eq!(micros_to_ns("."), None);
        assert_eq!(micros_to_ns("12.5"), Some(12_500));
        assert_eq!(
            micros_to_ns("1712195495505583.123"),
            Some(1_712_195_495_505_583_123)
        );
        assert_eq!(micros_to_ns("9999999999999999999999"), None);
        assert_eq!(micros_to_ns("null"), None);
    }

    /// Every shape of plain number near the fast path's edges (whole digits 1 to 20,
    /// fraction digits 0 to 5, a dot with none after it, a minus, values near i64's limit) gives
    /// what exact integer arithmetic gives: rounded half away from zero past the
    /// nanosecond, `None` out of range.
    #[test]
    fn plain_numbers_equal_exact_arithmetic() {
        fn exact(text: &str) -> Option<i64> {
            let (negative, digits) = match text.strip_prefix('-') {
                Some(rest) => (true, rest),
                None => (false, text),
            };
            let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
            if whole.is_empty() && frac.is_empty() {
                return None;
            }
            let whole: i128 = if whole.is_empty() {
                0
            } else {
                whole.parse().ok()?
            };
            let mut ns = whole * 1000;
            let mut scale = 100;
            for (k, b) in frac.bytes().enumerate() {
                let digit = (b - b'0') as i128;
                if k < 3 {
                    ns += digit * scale;
                    scale /= 10;
                } else {
                    ns += (k == 3 && digit >= 5) as i128;
                    break;
                }
            }
            let ns = if negative { -ns } else { ns };
            i64::try_from(ns).ok()
        }
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut cases = vec![
            "9223372036854775".to_string(),
            "9223372036854775.807".to_string(),
            "9223372036854775.808".to_string(),
            "9223372036854776".to_string(),
            "0.".to_string(),
            "7.".to_string(),
        ];
        for whole in 1..=20 {
            for frac in 0..=5 {
                for _ in 0..50 {
                    let mut text: String = (0..whole)
                        .map(|_| (b'0' + (next() % 10) as u8) as char)
                        .collect();
                    if frac > 0 {
                        text.push('.');
                        text.extend((0..frac).map(|_| (b'0' + (next() % 10) as u8) as char));
                    }
                    if next() % 4 == 0 {
                        text.insert(0, '-');
                    }
                    cases.push(text);
                }
            }
        }
        for text in &cases {
            assert_eq!(micros_to_ns(text), exact(text), "{text}");
        }
    }
}
