//! Columnar event tables: slices, instants, counter samples and flows. Rows are
//! addressed by `u32` index; one column per field keeps a slice at 37 bytes.

use std::ops::Range;

use crate::args::ArgsId;
pub use crate::column::Col;
use crate::dims::TrackId;
use crate::kind::SliceKind;
use crate::strings::StrId;
use crate::NONE;

/// Declares a columnar table once: the struct (a [`Col`] per column, in the order given,
/// which is also the order it is saved in) and what every table has from its columns
/// alone: `COLUMNS`, `len`, `is_empty`, `columns_agree`, `heap_bytes`,
/// `spare_capacity`, `reserve`, `shrink_to_fit` and `permute`. Rows and accessors are written
/// beside it.
macro_rules! columns {
    (
        $(#[$meta:meta])*
        pub struct $table:ident {
            $(#[$first_meta:meta])* $first_vis:vis $first:ident: $first_ty:ty
            $(, $(#[$col_meta:meta])* $col_vis:vis $col:ident: $col_ty:ty)* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Default, Debug, serde::Serialize, serde::Deserialize)]
        pub struct $table {
            $(#[$first_meta])*
            #[serde(with = "crate::packed::column")]
            $first_vis $first: $crate::column::Col<$first_ty>,
            $($(#[$col_meta])*
            #[serde(with = "crate::packed::column")]
            $col_vis $col: $crate::column::Col<$col_ty>,)*
        }

        impl $table {
            /// The columns' names, in their order.
            pub const COLUMNS: &'static [&'static str] = &[stringify!($first) $(, stringify!($col))*];

            /// Rows.
            pub fn len(&self) -> usize {
                self.$first.len()
            }

            pub fn is_empty(&self) -> bool {
                self.$first.is_empty()
            }

            /// Whether every column has one entry per row (a model read back could
            /// differ).
            pub(crate) fn columns_agree(&self) -> bool {
                let n = self.$first.len();
                true $(&& self.$col.len() == n)*
            }

            /// Bytes the columns hold, spare capacity included.
            pub fn heap_bytes(&self) -> usize {
                self.$first.capacity() * std::mem::size_of::<$first_ty>()
                    $(+ self.$col.capacity() * std::mem::size_of::<$col_ty>())*
            }

            /// The address ranges of the columns' spare capacity (see
            /// [`crate::Trace::spare_capacity`]).
            #[allow(dead_code)]
            pub(crate) fn spare_capacity(&self, out: &mut Vec<Range<usize>>) {
                push_spare(&self.$first, out);
                $(push_spare(&self.$col, out);)*
            }

            /// Room for `rows` more rows in every column, as far as memory allows (a
            /// reservation only saves moving the columns later).
            #[allow(dead_code)]
            pub(crate) fn reserve(&mut self, rows: usize) {
                let _ = self.$first.try_reserve(rows);
                $(let _ = self.$col.try_reserve(rows);)*
            }

            pub(crate) fn shrink_to_fit(&mut self) {
                self.$first.shrink_to_fit();
                $(self.$col.shrink_to_fit();)*
            }

            /// Each column by name, in their order, as an exporter takes them (a
            /// Parquet table has these columns, from this one declaration).
            pub fn for_each_column(&self, mut f: impl FnMut(&'static str, Column<'_>)) {
                f(stringify!($first), AsColumn::as_column(&self.$first));
                $(f(stringify!($col), AsColumn::as_column(&self.$col));)*
            }

            /// Reorders every column by `order` (`new[i] = old[order[i]]`); rows not in
            /// `order` are dropped.
            #[allow(dead_code)]
            pub(crate) fn permute(&mut self, order: &[u32]) {
                apply(&mut self.$first, order);
                $(apply(&mut self.$col, order);)*
            }
        }
    };
}
pub(crate) use columns;

/// One column of a table, typed, for exporters (see `for_each_column`).
#[derive(Copy, Clone, Debug)]
pub enum Column<'a> {
    I64(&'a [i64]),
    U32(&'a [u32]),
    F64(&'a [f64]),
    /// A [`SliceKind`] code per row.
    Kind(&'a [u8]),
    Text(&'a [StrId]),
    Args(&'a [ArgsId]),
    Scope(&'a [InstantScope]),
}

/// What a column's element type is as a [`Column`].
pub trait AsColumn {
    fn as_column(&self) -> Column<'_>;
}

macro_rules! as_column {
    ($($ty:ty => $variant:ident),*) => {$(
        impl AsColumn for Col<$ty> {
            fn as_column(&self) -> Column<'_> {
                Column::$variant(self)
            }
        }
    )*};
}
as_column!(i64 => I64, u32 => U32, f64 => F64, u8 => Kind, StrId => Text, ArgsId => Args, InstantScope => Scope);

columns! {
    /// Slices: spans of time on a track.
    pub struct Slices {
        pub ts: i64,
        pub dur: i64,
        pub track: u32,
        pub name: StrId,
        pub category: StrId,
        /// Codes of [`SliceKind`]: read through [`Slices::kind`] outside the model.
        pub(crate) kind: u8,
        /// Index of the enclosing slice, or [`NONE`]; set by [`crate::Trace::finish`].
        pub parent: u32,
        pub args: ArgsId,
    }
}

/// One slice as importers add it.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct SliceRow {
    pub track: TrackId,
    pub ts: i64,
    pub dur: i64,
    pub name: StrId,
    pub category: StrId,
    pub kind: SliceKind,
    pub args: ArgsId,
}

impl Slices {
    pub fn push(&mut self, row: SliceRow) -> u32 {
        let index = self.ts.len() as u32;
        self.ts.push(row.ts);
        self.dur.push(row.dur);
        self.track.push(row.track.0);
        self.name.push(row.name);
        self.category.push(row.category);
        self.kind.push(row.kind.code());
        self.parent.push(NONE);
        self.args.push(row.args);
        index
    }

    pub fn kind(&self, i: usize) -> SliceKind {
        SliceKind::from_code(self.kind[i])
    }

    pub fn set_kind(&mut self, i: usize, kind: SliceKind) {
        self.kind[i] = kind.code();
    }

    /// Each row's kind as its code ([`SliceKind::code`]; a code past
    /// [`SliceKind::ALL`] reads as `Other`), for a pass over every row.
    pub fn kind_codes(&self) -> &[u8] {
        &self.kind
    }

    /// Nesting depth on its track (0 = top level), from the parent chain.
    pub fn depth(&self, i: usize) -> usize {
        let mut depth = 0;
        let mut p = self.parent[i];
        while p != NONE {
            depth += 1;
            p = self.parent[p as usize];
        }
        depth
    }

    pub fn end(&self, i: usize) -> i64 {
        self.ts[i].saturating_add(self.dur[i])
    }

    pub fn row(&self, i: usize) -> SliceRow {
        SliceRow {
            track: TrackId(self.track[i]),
            ts: self.ts[i],
            dur: self.dur[i],
            name: self.name[i],
            category: self.category[i],
            kind: self.kind(i),
            args: self.args[i],
        }
    }

    /// [`Slices::permute`] for a large table, through one scratch per column type, half
    /// the columns on a second thread; but the parents, which only lose the rows past
    /// the new length: they are for nesting to compute again after a reordering.
    pub(crate) fn permute_but_parents(&mut self, order: &[u32]) {
        let Slices {
            ts,
            dur,
            track,
            name,
            category,
            kind,
            parent,
            args,
        } = self;
        let mut times = move || {
            let mut wide = Vec::new();
            apply_via(ts, order, &mut wide);
            apply_via(dur, order, &mut wide);
            let mut bytes = Vec::new();
            apply_via(kind, order, &mut bytes);
        };
        let mut ids = move || {
            apply(track, order);
            parent.to_mut().truncate(order.len());
            let mut texts = Vec::new();
            apply_via(name, order, &mut texts);
            apply_via(category, order, &mut texts);
            apply(args, order);
        };
        // A large trace's columns are reordered on two threads, half each.
        if order.len() >= PARALLEL_ROWS {
            std::thread::scope(|scope| {
                scope.spawn(times);
                ids();
            });
        } else {
            times();
            ids();
        }
    }
}

/// Pushes the address range of `column`'s spare capacity (allocated, not yet used),
/// when it has some.
pub(crate) fn push_spare<T: crate::column::Plain>(column: &Col<T>, out: &mut Vec<Range<usize>>) {
    let Some(column) = column.owned() else {
        return;
    };
    let size = std::mem::size_of::<T>();
    let base = column.as_ptr() as usize;
    let (used, allocated) = (column.len() * size, column.capacity() * size);
    if allocated > used {
        out.push(base + used..base + allocated);
    }
}

/// Replaces a column by its rows `order` (`new[i] = old[order[i]]`).
pub(crate) fn apply<T: crate::column::Plain>(column: &mut Col<T>, order: &[u32]) {
    apply_via(column, order, &mut Vec::new());
}

/// [`apply`] through `scratch`, which the caller reuses for its other columns: the
/// reordered rows become the column, and the column's old pages the scratch for the
/// next, where a new column per reordering would fault in fresh pages and unmap the
/// old ones (most of the time of sorting a large trace).
fn apply_via<T: crate::column::Plain>(column: &mut Col<T>, order: &[u32], scratch: &mut Vec<T>) {
    let column = column.to_mut();
    scratch.clear();
    scratch.extend(order.iter().map(|&i| column[i as usize]));
    std::mem::swap(column, scratch);
}

/// Rows from which reordering a table's columns takes two threads.
const PARALLEL_ROWS: usize = 64 * 1024;

/// Which part of the timeline an instant marks (Chrome's `s` field on `i` events).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[repr(u8)]
pub enum InstantScope {
    // The codes are the saved form (see `packed`).
    Thread = 0,
    Process = 1,
    Global = 2,
}

columns! {
    /// Instants: points in time on a track.
    pub struct Instants {
        pub ts: i64,
        pub track: u32,
        pub name: StrId,
        pub category: StrId,
        kind: u8,
        pub scope: InstantScope,
        pub args: ArgsId,
    }
}

#[derive(Copy, Clone, Debug, PartialEq)]
pub struct InstantRow {
    pub track: TrackId,
    pub ts: i64,
    pub name: StrId,
    pub category: StrId,
    /// Mostly `Other`; `Alloc` for allocator events such as Kineto's `[memory]`.
    pub kind: SliceKind,
    pub scope: InstantScope,
    pub args: ArgsId,
}

impl Instants {
    pub fn push(&mut self, row: InstantRow) -> u32 {
        let index = self.ts.len() as u32;
        self.ts.push(row.ts);
        self.track.push(row.track.0);
        self.name.push(row.name);
        self.category.push(row.category);
        self.kind.push(row.kind.code());
        self.scope.push(row.scope);
        self.args.push(row.args);
        index
    }

    pub fn kind(&self, i: usize) -> SliceKind {
        SliceKind::from_code(self.kind[i])
    }

    pub fn row(&self, i: usize) -> InstantRow {
        InstantRow {
            track: TrackId(self.track[i]),
            ts: self.ts[i],
            name: self.name[i],
            category: self.category[i],
            kind: self.kind(i),
            scope: self.scope[i],
            args: self.args[i],
        }
    }
}

columns! {
    /// Samples of counter tracks.
    pub struct CounterSamples {
        pub track: u32,
        pub ts: i64,
        pub value: f64,
    }
}

impl CounterSamples {
    pub fn push(&mut self, track: TrackId, ts: i64, value: f64) {
        self.track.push(track.0);
        self.ts.push(ts);
        self.value.push(value);
    }
}

columns! {
    /// Flows: arrows from one slice to another (op → launch → kernel, fwd → bwd, send →
    /// recv).
    pub struct Flows {
        pub from: u32,
        pub to: u32,
        pub name: StrId,
        pub category: StrId,
    }
}

impl Flows {
    pub fn push(&mut self, from: u32, to: u32, name: StrId, category: StrId) {
        self.from.push(from);
        self.to.push(to);
        self.name.push(name);
        self.category.push(category);
    }
}
