//! How the model's columns are saved (the model cache): each column as one run of
//! little-endian bytes, not one varint per value, so that reading a saved model back is
//! a copy rather than a decode of every number (3–4× faster on a 2 GiB trace's model).

use std::marker::PhantomData;

use crate::args::ArgsId;
use crate::column::{Col, Plain};
use crate::events::InstantScope;
use crate::strings::StrId;

/// A column element with a fixed-size little-endian form (its bytes: see
/// [`crate::column::as_bytes`]).
pub trait Packed: Sized {
    /// The column back, or `None` when the bytes cannot be one (a length that is no
    /// multiple of the element's size, a code no element has).
    fn unpack(bytes: &[u8]) -> Option<Vec<Self>>;
}

macro_rules! packed_numbers {
    ($($ty:ty as $inner:ty => $bytes:literal, $wrap:expr;)*) => {$(
        impl Packed for $ty {
            fn unpack(bytes: &[u8]) -> Option<Vec<Self>> {
                let (chunks, rest) = bytes.as_chunks::<$bytes>();
                rest.is_empty().then(|| {
                    chunks
                        .iter()
                        .map(|&chunk| $wrap(<$inner>::from_le_bytes(chunk)))
                        .collect()
                })
            }
        }
    )*};
}

fn same<T>(value: T) -> T {
    value
}

packed_numbers! {
    u8 as u8 => 1, same;
    u32 as u32 => 4, same;
    i64 as i64 => 8, same;
    f64 as f64 => 8, same;
    StrId as u32 => 4, StrId;
    ArgsId as u32 => 4, ArgsId;
}

impl Packed for InstantScope {
    fn unpack(bytes: &[u8]) -> Option<Vec<Self>> {
        bytes
            .iter()
            .map(|&code| match code {
                0 => Some(InstantScope::Thread),
                1 => Some(InstantScope::Process),
                2 => Some(InstantScope::Global),
                _ => None,
            })
            .collect()
    }
}

/// `#[serde(with = "crate::packed::column")]` on a [`Col`] of a [`Packed`] type. While a
/// model cache entry is written or mapped (see [`crate::column`]) a column is saved as
/// its number in the entry's column area instead of its bytes.
pub mod column {
    use super::*;

    pub fn serialize<S: serde::Serializer, T: Packed + Plain>(
        column: &[T],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match crate::column::routed_put(column) {
            Some(Ok(number)) => serializer.serialize_u32(number),
            Some(Err(e)) => Err(serde::ser::Error::custom(e)),
            None => serializer.serialize_bytes(crate::column::as_bytes(column)),
        }
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>, T: Packed + Plain>(
        deserializer: D,
    ) -> Result<Col<T>, D::Error> {
        if crate::column::mapping() {
            let number = <u32 as serde::Deserialize>::deserialize(deserializer)?;
            return crate::column::routed_get(number).map_err(serde::de::Error::custom);
        }
        deserializer
            .deserialize_bytes(ColumnVisitor(PhantomData))
            .map(Col::from)
    }
}

struct ColumnVisitor<T>(PhantomData<T>);

impl<'de, T: Packed> serde::de::Visitor<'de> for ColumnVisitor<T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "a column of {} as bytes", std::any::type_name::<T>())
    }

    fn visit_bytes<E: serde::de::Error>(self, bytes: &[u8]) -> Result<Vec<T>, E> {
        T::unpack(bytes).ok_or_else(|| {
            E::custom(format!(
                "{} bytes are no column of {}",
                bytes.len(),
                std::any::type_name::<T>()
            ))
        })
    }

    /// Formats without a byte string (JSON) write bytes as a sequence of numbers.
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let mut bytes = Vec::new();
        while let Some(byte) = seq.next_element::<u8>()? {
            bytes.push(byte);
        }
        self.visit_bytes(&bytes)
    }
}

/// A column borrowed for saving in a tuple (see [`crate::StringTable`]'s form).
pub struct PackedRef<'a, T>(pub &'a [T]);

impl<T: Packed + Plain> serde::Serialize for PackedRef<'_, T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        column::serialize(self.0, serializer)
    }
}

/// A column read back from a tuple.
pub struct PackedVec<T: Plain>(pub Col<T>);

impl<'de, T: Packed + Plain> serde::Deserialize<'de> for PackedVec<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        column::deserialize(deserializer).map(PackedVec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Packed + Plain + PartialEq + std::fmt::Debug>(column: Vec<T>, width: usize) {
        let bytes = crate::column::as_bytes(&column).to_vec();
        assert_eq!(bytes.len(), column.len() * width);
        assert_eq!(T::unpack(&bytes), Some(column));
    }

    #[test]
    fn columns_come_back_value_for_value() {
        round_trip(
            vec![0i64, -1, i64::MIN, i64::MAX, 1_700_000_000_123_456_789],
            8,
        );
        round_trip(vec![0u32, 1, u32::MAX], 4);
        round_trip(vec![0.5f64, -0.0, f64::INFINITY, 1e-300], 8);
        round_trip(vec![StrId(7), StrId::EMPTY], 4);
        round_trip(vec![ArgsId::NONE, ArgsId(3)], 4);
        round_trip(vec![0u8, 255], 1);
        round_trip(
            vec![
                InstantScope::Global,
                InstantScope::Thread,
                InstantScope::Process,
            ],
            1,
        );
        let nan = f64::unpack(crate::column::as_bytes(&[f64::NAN])).unwrap();
        assert!(nan[0].is_nan());
    }

    #[test]
    fn bytes_that_are_no_column_are_refused() {
        assert_eq!(i64::unpack(&[0; 9]), None);
        assert_eq!(StrId::unpack(&[0; 3]), None);
        assert_eq!(InstantScope::unpack(&[0, 3]), None);
        assert_eq!(u8::unpack(&[]), Some(vec![]));
    }

    /// A whole model with every table and every kind of value saved and read back as
    /// the model cache does: every column equal, and the model still passes its check.
    #[test]
    fn a_whole_model_reads_back_column_for_column() {
        use crate::events::{InstantRow, SliceRow};
        use crate::*;
        let (mut trace, track) = crate::testing::one_thread();
        let key = trace.intern("k");
        let text = trace.intern("[1, 2]");
        for (i, ts) in [1_700_000_000_123_456_789i64, 1_700_000_000_123_456_800]
            .into_iter()
            .enumerate()
        {
            let args = trace.args.push_bag(&[
                (key, ArgValue::Int(-5 - i as i64)),
                (key, ArgValue::Float(f64::NAN)),
                (key, ArgValue::Json(text)),
                (key, ArgValue::Bool(i == 0)),
            ]);
            let name = trace.intern(&format!("op{i}"));
            trace.slices.push(SliceRow {
                track,
                ts,
                dur: 100 - i as i64 * 50,
                name,
                category: StrId::EMPTY,
                kind: SliceKind::Op,
                args,
            });
        }
        for (ts, scope) in [
            (3, InstantScope::Thread),
            (4, InstantScope::Process),
            (5, InstantScope::Global),
        ] {
            trace.instants.push(InstantRow {
                track,
                ts,
                name: text,
                category: key,
                kind: SliceKind::Other,
                scope,
                args: ArgsId::NONE,
            });
        }
        trace.counters.push(track, 9, -0.25);
        trace.counters.push(track, 10, f64::INFINITY);
        trace.flows.push(0, 1, key, text);
        trace.finish();
        trace.check().unwrap();

        let saved = postcard::to_allocvec(&trace).unwrap();
        let back: Trace = postcard::from_bytes(&saved).unwrap();
        back.check()
            .expect("read back, the model keeps its invariants");
        let s = (&trace.slices, &back.slices);
        assert_eq!(
            (&s.0.ts, &s.0.dur, &s.0.track),
            (&s.1.ts, &s.1.dur, &s.1.track)
        );
        assert_eq!(
            (&s.0.name, &s.0.parent, &s.0.args),
            (&s.1.name, &s.1.parent, &s.1.args)
        );
        assert_eq!(
            (0..2).map(|i| s.0.kind(i)).collect::<Vec<_>>(),
            (0..2).map(|i| s.1.kind(i)).collect::<Vec<_>>()
        );
        let i = (&trace.instants, &back.instants);
        assert_eq!(
            (&i.0.ts, &i.0.scope, &i.0.name),
            (&i.1.ts, &i.1.scope, &i.1.name)
        );
        let c = (&trace.counters, &back.counters);
        assert_eq!(
            (&c.0.ts, &c.0.value, &c.0.track),
            (&c.1.ts, &c.1.value, &c.1.track)
        );
        let f = (&trace.flows, &back.flows);
        assert_eq!(
            (&f.0.from, &f.0.to, &f.0.category),
            (&f.1.from, &f.1.to, &f.1.category)
        );
        let bag =
            |t: &Trace, n: usize| format!("{:?}", t.args.get(t.slices.args[n]).collect::<Vec<_>>());
        for n in 0..2 {
            assert_eq!(bag(&trace, n), bag(&back, n));
        }
        assert_eq!(
            back.str(back.slices.name[1]),
            trace.str(trace.slices.name[1])
        );
    }

    #[test]
    fn a_column_saved_by_postcard_reads_back() {
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct Table {
            #[serde(with = "column")]
            ts: Col<i64>,
            #[serde(with = "column")]
            name: Col<StrId>,
        }
        let table = Table {
            ts: vec![5, -3, i64::MAX].into(),
            name: vec![StrId(1), StrId(2), StrId(0)].into(),
        };
        let bytes = postcard::to_allocvec(&table).unwrap();
        assert_eq!(postcard::from_bytes::<Table>(&bytes).unwrap(), table);
        let json = serde_json::to_string(&table).unwrap();
        assert_eq!(serde_json::from_str::<Table>(&json).unwrap(), table);
    }
}
