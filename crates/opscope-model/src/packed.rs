//! How the model's columns are saved (the model cache): each column as one run of
//! little-endian bytes, not one varint per value, so that reading a saved model back is
//! a copy rather than a decode of every number (3–4× faster on a 2 GiB trace's model).

use std::marker::PhantomData;

use crate::args::ArgsId;
use crate::events::InstantScope;
use crate::strings::StrId;

/// A column element with a fixed-size little-endian form.
pub trait Packed: Sized {
    /// The column as bytes.
    fn pack(column: &[Self]) -> Vec<u8>;
    /// The column back, or `None` when the bytes cannot be one (a length that is no
    /// multiple of the element's size, a code no element has).
    fn unpack(bytes: &[u8]) -> Option<Vec<Self>>;
}

macro_rules! packed_numbers {
    ($($ty:ty as $inner:ty => $bytes:literal, $wrap:expr, $unwrap:expr;)*) => {$(
        impl Packed for $ty {
            fn pack(column: &[Self]) -> Vec<u8> {
                let mut out = Vec::with_capacity(column.len() * $bytes);
                for &value in column {
                    out.extend_from_slice(&$unwrap(value).to_le_bytes());
                }
                out
            }

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
    u8 as u8 => 1, same, same;
    u32 as u32 => 4, same, same;
    i64 as i64 => 8, same, same;
    f64 as f64 => 8, same, same;
    StrId as u32 => 4, StrId, |id: StrId| id.0;
    ArgsId as u32 => 4, ArgsId, |id: ArgsId| id.0;
}

impl Packed for InstantScope {
    fn pack(column: &[Self]) -> Vec<u8> {
        column.iter().map(|&scope| scope as u8).collect()
    }

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

/// `#[serde(with = "crate::packed::column")]` on a `Vec` of a [`Packed`] type.
pub mod column {
    use super::*;

    pub fn serialize<S: serde::Serializer, T: Packed>(
        column: &[T],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&T::pack(column))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>, T: Packed>(
        deserializer: D,
    ) -> Result<Vec<T>, D::Error> {
        deserializer.deserialize_bytes(ColumnVisitor(PhantomData))
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

impl<T: Packed> serde::Serialize for PackedRef<'_, T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        column::serialize(self.0, serializer)
    }
}

/// A column read back from a tuple.
pub struct PackedVec<T>(pub Vec<T>);

impl<'de, T: Packed> serde::Deserialize<'de> for PackedVec<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        column::deserialize(deserializer).map(PackedVec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Packed + PartialEq + std::fmt::Debug + Clone>(column: Vec<T>, width: usize) {
        let bytes = T::pack(&column);
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
        let nan = f64::unpack(&f64::pack(&[f64::NAN])).unwrap();
        assert!(nan[0].is_nan());
    }

    #[test]
    fn bytes_that_are_no_column_are_refused() {
        assert_eq!(i64::unpack(&[0; 9]), None);
        assert_eq!(StrId::unpack(&[0; 3]), None);
        assert_eq!(InstantScope::unpack(&[0, 3]), None);
        assert_eq!(u8::unpack(&[]), Some(vec![]));
    }

    #[test]
    fn a_column_saved_by_postcard_reads_back() {
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct Table {
            #[serde(with = "column")]
            ts: Vec<i64>,
            #[serde(with = "column")]
            name: Vec<StrId>,
        }
        let table = Table {
            ts: vec![5, -3, i64::MAX],
            name: vec![StrId(1), StrId(2), StrId(0)],
        };
        let bytes = postcard::to_allocvec(&table).unwrap();
        assert_eq!(postcard::from_bytes::<Table>(&bytes).unwrap(), table);
        let json = serde_json::to_string(&table).unwrap();
        assert_eq!(serde_json::from_str::<Table>(&json).unwrap(), table);
    }
}
