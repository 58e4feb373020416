//! One column of the model: a vector the model owns, or a run of a mapped file (the
//! model cache) that is read in place and copied only when something changes it. A
//! cached model thus opens at the cost of a map and a checksum, not of a copy.
//!
//! Columns are saved as their little-endian bytes; [`save_columns`] and
//! [`map_columns`] route them, while a model is saved or read back, to a file's
//! aligned column area instead of the serialized stream.

#![allow(unsafe_code)]

use std::any::Any;
use std::cell::RefCell;
use std::ops::{Deref, DerefMut, Range};
use std::sync::Arc;

use crate::args::ArgsId;
use crate::events::InstantScope;
use crate::strings::StrId;

#[cfg(target_endian = "big")]
compile_error!("columns are saved and mapped as little-endian bytes");

/// An element type a column may be mapped as: plain data without padding, whose bytes
/// are its little-endian form.
///
/// # Safety
/// Implementors have no padding and no pointers, and every byte pattern for which
/// [`Plain::valid`] holds is a value of the type.
pub unsafe trait Plain: Copy + Send + Sync + 'static {
    /// Whether `bytes` (a whole number of elements) are values of the type.
    fn valid(_bytes: &[u8]) -> bool {
        true
    }
}

// SAFETY: primitive numbers: no padding, every bit pattern a value.
unsafe impl Plain for u8 {}
// SAFETY: as above.
unsafe impl Plain for u32 {}
// SAFETY: as above.
unsafe impl Plain for i64 {}
// SAFETY: as above.
unsafe impl Plain for f64 {}
// SAFETY: `repr(transparent)` over a u32.
unsafe impl Plain for StrId {}
// SAFETY: `repr(transparent)` over a u32.
unsafe impl Plain for ArgsId {}
// SAFETY: `repr(u8)`, fieldless; `valid` admits only its three codes.
unsafe impl Plain for InstantScope {
    fn valid(bytes: &[u8]) -> bool {
        bytes.iter().all(|&code| code <= InstantScope::Global as u8)
    }
}

/// The bytes of `column` (its little-endian form).
pub fn as_bytes<T: Plain>(column: &[T]) -> &[u8] {
    // SAFETY: `Plain` types have no padding, so every byte of the slice is initialised;
    // u8 has no alignment to keep.
    unsafe { std::slice::from_raw_parts(column.as_ptr().cast(), std::mem::size_of_val(column)) }
}

/// A file (or any bytes) that columns are mapped from; it must not move or change
/// while shared.
pub type Region = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// A column: owned, or mapped from a [`Region`] and copied into an owned vector the
/// first time it is changed.
pub struct Col<T: Plain> {
    repr: Repr<T>,
}

enum Repr<T> {
    Owned(Vec<T>),
    Mapped {
        // Keeps `ptr..ptr+len` alive and unchanged.
        _region: Region,
        ptr: *const T,
        len: usize,
    },
}

// SAFETY: a mapped column only reads memory that its `Arc` keeps alive and that no one
// changes (`Region`'s contract); `T` is `Send + Sync` plain data.
unsafe impl<T: Plain> Send for Col<T> {}
// SAFETY: as above; `&Col` gives only shared reads.
unsafe impl<T: Plain> Sync for Col<T> {}

impl<T: Plain> Col<T> {
    pub const fn new() -> Col<T> {
        Col {
            repr: Repr::Owned(Vec::new()),
        }
    }

    /// The elements at `range` of `region`, if they are in it, aligned for `T`, a whole
    /// number of elements and values of `T`.
    pub fn mapped(region: &Region, range: Range<usize>) -> Option<Col<T>> {
        let bytes = (**region).as_ref().get(range)?;
        let size = std::mem::size_of::<T>();
        if !bytes.len().is_multiple_of(size)
            || !(bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>())
            || !T::valid(bytes)
        {
            return None;
        }
        Some(Col {
            repr: Repr::Mapped {
                _region: region.clone(),
                ptr: bytes.as_ptr().cast(),
                len: bytes.len() / size,
            },
        })
    }

    /// Whether the column is read from a mapped file (not yet changed).
    pub fn is_mapped(&self) -> bool {
        matches!(self.repr, Repr::Mapped { .. })
    }

    /// The column as a vector to change, copied out of its file first if mapped.
    pub fn to_mut(&mut self) -> &mut Vec<T> {
        if let Repr::Mapped { .. } = self.repr {
            self.repr = Repr::Owned(self.deref().to_vec());
        }
        match &mut self.repr {
            Repr::Owned(v) => v,
            Repr::Mapped { .. } => unreachable!("copied just above"),
        }
    }

    pub fn push(&mut self, value: T) {
        self.to_mut().push(value);
    }

    pub fn pop(&mut self) -> Option<T> {
        self.to_mut().pop()
    }

    pub fn extend_from_slice(&mut self, values: &[T]) {
        self.to_mut().extend_from_slice(values);
    }

    pub fn truncate(&mut self, len: usize) {
        self.to_mut().truncate(len);
    }

    pub fn clear(&mut self) {
        self.repr = Repr::Owned(Vec::new());
    }

    /// Elements held: a mapped column's own length (its pages are the file's).
    pub fn capacity(&self) -> usize {
        match &self.repr {
            Repr::Owned(v) => v.capacity(),
            Repr::Mapped { len, .. } => *len,
        }
    }

    pub fn try_reserve(&mut self, more: usize) -> Result<(), std::collections::TryReserveError> {
        self.to_mut().try_reserve(more)
    }

    pub fn reserve_exact(&mut self, more: usize) {
        self.to_mut().reserve_exact(more);
    }

    /// Gives spare capacity back; a mapped column has none.
    pub fn shrink_to_fit(&mut self) {
        if let Repr::Owned(v) = &mut self.repr {
            v.shrink_to_fit();
        }
    }

    /// The owned vector, when the column is one (spare capacity, prefaulting).
    pub fn owned(&self) -> Option<&Vec<T>> {
        match &self.repr {
            Repr::Owned(v) => Some(v),
            Repr::Mapped { .. } => None,
        }
    }
}

impl<T: Plain> Deref for Col<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match &self.repr {
            Repr::Owned(v) => v,
            // SAFETY: `mapped` checked that `ptr..ptr+len` lies in the region, is aligned
            // for `T` and holds values of `T`; the `Arc` beside it keeps it alive and
            // unchanged for as long as `self`.
            Repr::Mapped { ptr, len, .. } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
        }
    }
}

impl<T: Plain> DerefMut for Col<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.to_mut()
    }
}

impl<T: Plain> Default for Col<T> {
    fn default() -> Self {
        Col::new()
    }
}

impl<T: Plain> Clone for Col<T> {
    fn clone(&self) -> Self {
        match &self.repr {
            Repr::Owned(v) => Col::from(v.clone()),
            Repr::Mapped { _region, ptr, len } => Col {
                repr: Repr::Mapped {
                    _region: _region.clone(),
                    ptr: *ptr,
                    len: *len,
                },
            },
        }
    }
}

impl<T: Plain + std::fmt::Debug> std::fmt::Debug for Col<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.deref().fmt(f)
    }
}

impl<T: Plain + PartialEq> PartialEq for Col<T> {
    fn eq(&self, other: &Self) -> bool {
        self.deref() == other.deref()
    }
}

impl<T: Plain + PartialEq> PartialEq<Vec<T>> for Col<T> {
    fn eq(&self, other: &Vec<T>) -> bool {
        self.deref() == other.as_slice()
    }
}

impl<T: Plain + PartialEq> PartialEq<Col<T>> for Vec<T> {
    fn eq(&self, other: &Col<T>) -> bool {
        self.as_slice() == other.deref()
    }
}

impl<T: Plain + PartialEq> PartialEq<[T]> for Col<T> {
    fn eq(&self, other: &[T]) -> bool {
        self.deref() == other
    }
}

impl<T: Plain + PartialEq, const N: usize> PartialEq<[T; N]> for Col<T> {
    fn eq(&self, other: &[T; N]) -> bool {
        self.deref() == other.as_slice()
    }
}

impl<T: Plain> From<Vec<T>> for Col<T> {
    fn from(v: Vec<T>) -> Self {
        Col {
            repr: Repr::Owned(v),
        }
    }
}

impl<T: Plain> FromIterator<T> for Col<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Col::from(iter.into_iter().collect::<Vec<T>>())
    }
}

impl<T: Plain> Extend<T> for Col<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, iter: I) {
        self.to_mut().extend(iter);
    }
}

impl<'a, T: Plain> IntoIterator for &'a Col<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.deref().iter()
    }
}

impl<'a, T: Plain> IntoIterator for &'a mut Col<T> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.deref_mut().iter_mut()
    }
}

/// Where the columns of a model being saved go (see [`save_columns`]).
pub trait ColumnSink: Any {
    /// Stores `bytes` at a multiple of `align` and returns their number.
    fn put(&mut self, bytes: &[u8], align: usize) -> std::io::Result<u32>;
}

/// Where the columns of a model being read back are (see [`map_columns`]): the
/// region and, by number, each column's byte range in it.
pub struct ColumnSource {
    pub region: Region,
    pub columns: Vec<Range<usize>>,
}

enum Routing {
    Save(Box<dyn ColumnSink>),
    Map(ColumnSource),
}

thread_local! {
    static ROUTING: RefCell<Option<Routing>> = const { RefCell::new(None) };
}

/// Runs `save` (which serializes a model) with every column handed to `sink` and only
/// its number written in the stream; returns what `save` returned and the sink.
pub fn save_columns<S: ColumnSink, R>(sink: S, save: impl FnOnce() -> R) -> (R, S) {
    let previous = ROUTING.replace(Some(Routing::Save(Box::new(sink))));
    let result = save();
    let Some(Routing::Save(sink)) = ROUTING.replace(previous) else {
        unreachable!("the routing is only replaced here and in map_columns, both nested");
    };
    let sink: Box<dyn Any> = sink;
    match sink.downcast::<S>() {
        Ok(sink) => (result, *sink),
        Err(_) => unreachable!("the sink put in is the sink taken out"),
    }
}

/// Runs `read` (which deserializes a model saved by [`save_columns`]) with every
/// column mapped from `source`.
pub fn map_columns<R>(source: ColumnSource, read: impl FnOnce() -> R) -> R {
    let previous = ROUTING.replace(Some(Routing::Map(source)));
    let result = read();
    ROUTING.replace(previous);
    result
}

/// How a column is saved right now: `Some(number)` when routed to a sink.
pub(crate) fn routed_put<T: Plain>(column: &[T]) -> Option<std::io::Result<u32>> {
    ROUTING.with_borrow_mut(|routing| match routing {
        Some(Routing::Save(sink)) => Some(sink.put(as_bytes(column), std::mem::align_of::<T>())),
        _ => None,
    })
}

/// Whether columns are being read from a mapping (they are then saved as numbers).
pub(crate) fn mapping() -> bool {
    ROUTING.with_borrow(|routing| matches!(routing, Some(Routing::Map(_))))
}

/// Column `number` of the mapping being read, as a column of `T`.
pub(crate) fn routed_get<T: Plain>(number: u32) -> Result<Col<T>, String> {
    ROUTING.with_borrow(|routing| {
        let Some(Routing::Map(source)) = routing else {
            return Err("no mapping to read columns from".into());
        };
        let range = source
            .columns
            .get(number as usize)
            .ok_or_else(|| format!("column {number} is not in the file"))?;
        Col::mapped(&source.region, range.clone()).ok_or_else(|| {
            format!(
                "column {number} (bytes {range:?}) is no column of {}",
                std::any::type_name::<T>()
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes aligned for any column, as a file mapping is.
    struct Aligned(Vec<u64>);

    impl AsRef<[u8]> for Aligned {
        fn as_ref(&self) -> &[u8] {
            as_bytes(self.0.as_slice())
        }
    }

    // SAFETY: u64: no padding, every bit pattern a value (a test's region only).
    unsafe impl Plain for u64 {}

    fn region(words: Vec<u64>) -> Region {
        Arc::new(Aligned(words))
    }

    #[test]
    fn a_mapped_column_reads_in_place_and_copies_once_changed() {
        let r = region(vec![1, 2, u64::MAX]);
        let mut col = Col::<i64>::mapped(&r, 0..24).unwrap();
        assert!(col.is_mapped());
        assert_eq!(&*col, &[1, 2, -1]);
        col[0] = 7;
        assert!(!col.is_mapped());
        assert_eq!(&*col, &[7, 2, -1]);
        // The region is unchanged: another column over it still reads the file.
        assert_eq!(&*Col::<i64>::mapped(&r, 0..8).unwrap(), &[1]);
    }

    #[test]
    fn ranges_that_cannot_be_a_column_are_refused() {
        let r = region(vec![0x0201_0000_0000_0000, 0]);
        assert!(Col::<i64>::mapped(&r, 4..12).is_none(), "misaligned");
        assert!(Col::<u32>::mapped(&r, 0..6).is_none(), "not whole elements");
        assert!(Col::<u32>::mapped(&r, 8..24).is_none(), "past the end");
        // Bytes 6 and 7 are codes 1 and 2: scopes; byte 5 would be code 0 too.
        assert!(Col::<InstantScope>::mapped(&r, 5..8).is_some());
        let bad = region(vec![3]);
        assert!(
            Col::<InstantScope>::mapped(&bad, 0..1).is_none(),
            "no scope 3"
        );
    }
}
