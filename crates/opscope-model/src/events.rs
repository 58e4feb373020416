//! Columnar event tables: slices, instants, counter samples and flows. Rows are
//! addressed by `u32` index; one column per field keeps a slice at 37 bytes.

use std::ops::Range;

use crate::args::ArgsId;
use crate::dims::TrackId;
use crate::kind::SliceKind;
use crate::strings::StrId;
use crate::NONE;

/// Slices: spans of time on a track.
#[derive(Default, Debug, serde::Serialize, serde::Deserialize)]
pub struct Slices {
    pub ts: Vec<i64>,
    pub dur: Vec<i64>,
    pub track: Vec<u32>,
    pub name: Vec<StrId>,
    pub category: Vec<StrId>,
    kind: Vec<u8>,
    /// Index of the enclosing slice, or [`NONE`]; set by [`crate::Trace::finish`].
    pub parent: Vec<u32>,
    pub args: Vec<ArgsId>,
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

    pub fn len(&self) -> usize {
        self.ts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ts.is_empty()
    }

    pub fn kind(&self, i: usize) -> SliceKind {
        SliceKind::from_code(self.kind[i])
    }

    pub fn set_kind(&mut self, i: usize, kind: SliceKind) {
        self.kind[i] = kind.code();
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

    /// Reorders every column by `order` (`new[i] = old[order[i]]`); rows not in
    /// `order` are dropped.
    pub(crate) fn permute(&mut self, order: &[u32]) {
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
            let mut numbers = Vec::new();
            apply_via(track, order, &mut numbers);
            apply_via(parent, order, &mut numbers);
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

    /// Whether every column has one entry per slice (a model read back could differ).
    pub(crate) fn columns_agree(&self) -> bool {
        let n = self.ts.len();
        [
            self.dur.len(),
            self.track.len(),
            self.name.len(),
            self.category.len(),
            self.kind.len(),
            self.parent.len(),
            self.args.len(),
        ]
        .iter()
        .all(|&len| len == n)
    }

    pub fn heap_bytes(&self) -> usize {
        self.ts.capacity() * 8
            + self.dur.capacity() * 8
            + self.track.capacity() * 4
            + self.name.capacity() * 4
            + self.category.capacity() * 4
            + self.kind.capacity()
            + self.parent.capacity() * 4
            + self.args.capacity() * 4
    }

    /// The address ranges of the columns' spare capacity (see [`crate::Trace::spare_capacity`]).
    pub(crate) fn spare_capacity(&self, out: &mut Vec<Range<usize>>) {
        push_spare(&self.ts, out);
        push_spare(&self.dur, out);
        push_spare(&self.track, out);
        push_spare(&self.name, out);
        push_spare(&self.category, out);
        push_spare(&self.kind, out);
        push_spare(&self.parent, out);
        push_spare(&self.args, out);
    }

    pub(crate) fn shrink_to_fit(&mut self) {
        self.ts.shrink_to_fit();
        self.dur.shrink_to_fit();
        self.track.shrink_to_fit();
        self.name.shrink_to_fit();
        self.category.shrink_to_fit();
        self.kind.shrink_to_fit();
        self.parent.shrink_to_fit();
        self.args.shrink_to_fit();
    }
}

/// Pushes the address range of `column`'s spare capacity (allocated, not yet used),
/// when it has some.
pub(crate) fn push_spare<T>(column: &Vec<T>, out: &mut Vec<Range<usize>>) {
    let size = std::mem::size_of::<T>();
    let base = column.as_ptr() as usize;
    let (used, allocated) = (column.len() * size, column.capacity() * size);
    if allocated > used {
        out.push(base + used..base + allocated);
    }
}

/// Replaces a column by its rows `order` (`new[i] = old[order[i]]`).
fn apply<T: Copy>(column: &mut Vec<T>, order: &[u32]) {
    apply_via(column, order, &mut Vec::new());
}

/// [`apply`] through `scratch`, which the caller reuses for its other columns: the
/// reordered rows are written back into the column's own pages, where a new column
/// per reordering would fault in fresh pages and unmap the old ones (most of the
/// time of sorting a large trace).
fn apply_via<T: Copy>(column: &mut Vec<T>, order: &[u32], scratch: &mut Vec<T>) {
    scratch.clear();
    scratch.extend(order.iter().map(|&i| column[i as usize]));
    column.truncate(order.len());
    column.copy_from_slice(scratch);
}

/// Rows from which reordering a table's columns takes two threads.
const PARALLEL_ROWS: usize = 64 * 1024;

/// Which part of the timeline an instant marks (Chrome's `s` field on `i` events).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum InstantScope {
    Thread,
    Process,
    Global,
}

/// Instants: points in time on a track.
#[derive(Default, Debug, serde::Serialize, serde::Deserialize)]
pub struct Instants {
    pub ts: Vec<i64>,
    pub track: Vec<u32>,
    pub name: Vec<StrId>,
    pub category: Vec<StrId>,
    kind: Vec<u8>,
    pub scope: Vec<InstantScope>,
    pub args: Vec<ArgsId>,
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
    pub(crate) fn spare_capacity(&self, out: &mut Vec<Range<usize>>) {
        push_spare(&self.ts, out);
        push_spare(&self.track, out);
        push_spare(&self.name, out);
        push_spare(&self.category, out);
        push_spare(&self.kind, out);
        push_spare(&self.scope, out);
        push_spare(&self.args, out);
    }

    pub(crate) fn shrink_to_fit(&mut self) {
        self.ts.shrink_to_fit();
        self.track.shrink_to_fit();
        self.name.shrink_to_fit();
        self.category.shrink_to_fit();
        self.kind.shrink_to_fit();
        self.scope.shrink_to_fit();
        self.args.shrink_to_fit();
    }

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

    pub fn len(&self) -> usize {
        self.ts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ts.is_empty()
    }

    /// Reorders every column by `order`; rows not in `order` are dropped.
    pub(crate) fn permute(&mut self, order: &[u32]) {
        apply(&mut self.ts, order);
        apply(&mut self.track, order);
        apply(&mut self.name, order);
        apply(&mut self.category, order);
        apply(&mut self.kind, order);
        apply(&mut self.scope, order);
        apply(&mut self.args, order);
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

    /// Whether every column has one entry per instant.
    pub(crate) fn columns_agree(&self) -> bool {
        let n = self.ts.len();
        [
            self.track.len(),
            self.name.len(),
            self.category.len(),
            self.kind.len(),
            self.scope.len(),
            self.args.len(),
        ]
        .iter()
        .all(|&len| len == n)
    }

    pub fn heap_bytes(&self) -> usize {
        self.ts.capacity() * 8
            + self.track.capacity() * 4
            + self.name.capacity() * 4
            + self.category.capacity() * 4
            + self.kind.capacity()
            + self.scope.capacity()
            + self.args.capacity() * 4
    }
}

/// Samples of counter tracks.
#[derive(Default, Debug, serde::Serialize, serde::Deserialize)]
pub struct CounterSamples {
    pub track: Vec<u32>,
    pub ts: Vec<i64>,
    pub value: Vec<f64>,
}

impl CounterSamples {
    pub(crate) fn spare_capacity(&self, out: &mut Vec<Range<usize>>) {
        push_spare(&self.track, out);
        push_spare(&self.ts, out);
        push_spare(&self.value, out);
    }

    pub(crate) fn shrink_to_fit(&mut self) {
        self.track.shrink_to_fit();
        self.ts.shrink_to_fit();
        self.value.shrink_to_fit();
    }

    pub fn push(&mut self, track: TrackId, ts: i64, value: f64) {
        self.track.push(track.0);
        self.ts.push(ts);
        self.value.push(value);
    }

    /// Reorders every column by `order`; rows not in `order` are dropped.
    pub(crate) fn permute(&mut self, order: &[u32]) {
        apply(&mut self.track, order);
        apply(&mut self.ts, order);
        apply(&mut self.value, order);
    }

    pub fn len(&self) -> usize {
        self.ts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ts.is_empty()
    }

    /// Whether every column has one entry per sample.
    pub(crate) fn columns_agree(&self) -> bool {
        self.track.len() == self.ts.len() && self.value.len() == self.ts.len()
    }

    pub fn heap_bytes(&self) -> usize {
        self.track.capacity() * 4 + self.ts.capacity() * 8 + self.value.capacity() * 8
    }
}

/// Flows: arrows from one slice to another (op → launch → kernel, fwd → bwd, send → recv).
#[derive(Default, Debug, serde::Serialize, serde::Deserialize)]
pub struct Flows {
    pub from: Vec<u32>,
    pub to: Vec<u32>,
    pub name: Vec<StrId>,
    pub category: Vec<StrId>,
}

impl Flows {
    pub(crate) fn spare_capacity(&self, out: &mut Vec<Range<usize>>) {
        push_spare(&self.from, out);
        push_spare(&self.to, out);
        push_spare(&self.name, out);
        push_spare(&self.category, out);
    }

    pub(crate) fn shrink_to_fit(&mut self) {
        self.from.shrink_to_fit();
        self.to.shrink_to_fit();
        self.name.shrink_to_fit();
        self.category.shrink_to_fit();
    }

    pub fn push(&mut self, from: u32, to: u32, name: StrId, category: StrId) {
        self.from.push(from);
        self.to.push(to);
        self.name.push(name);
        self.category.push(category);
    }

    pub fn len(&self) -> usize {
        self.from.len()
    }

    pub fn is_empty(&self) -> bool {
        self.from.is_empty()
    }

    /// Whether every column has one entry per flow.
    pub(crate) fn columns_agree(&self) -> bool {
        let n = self.from.len();
        self.to.len() == n && self.name.len() == n && self.category.len() == n
    }

    pub fn heap_bytes(&self) -> usize {
        self.from.capacity() * 4
            + self.to.capacity() * 4
            + self.name.capacity() * 4
            + self.category.capacity() * 4
    }
}
