//! Watching a load while it runs: how many of the input's bytes are read, and copies of
//! the model as it stands, for a viewer that draws what has arrived before the load
//! ends. A watcher is set for the loading thread; importers that know their progress
//! report it here, and nothing is done when no one watches.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use opscope_model::Trace;

/// What a watcher is told.
pub trait Watcher: Send + Sync {
    /// The load will read this many bytes of input in all.
    fn begin(&self, total_bytes: u64);
    /// This many of them are read.
    fn read(&self, done_bytes: u64);
    /// Whether a copy of the model as it stands is wanted now (copies cost a pass over
    /// what is loaded: a watcher asks seldom).
    fn wants_copy(&self) -> bool;
    /// A copy of the model as it stands: its events so far, still to be made whole by
    /// [`Partial::finish`] (importers leave sorting and indexing to their end).
    fn copy(&self, copy: Partial);
}

/// A model loaded part way, and what makes it whole enough to draw.
pub struct Partial {
    pub trace: Trace,
    finish: Option<Finish>,
}

/// An importer's finishing of its part of a copy.
type Finish = Box<dyn FnOnce(&mut Trace) + Send>;

impl Partial {
    /// The importer's own finishing of its part (devices, kinds) and the model's
    /// sorting and indexes; spans still open and flows not yet bound are left out.
    pub fn finish(mut self) -> Trace {
        if let Some(finish) = self.finish.take() {
            finish(&mut self.trace);
        }
        self.trace.finish();
        self.trace
    }
}

thread_local! {
    static WATCHER: RefCell<Option<Arc<dyn Watcher>>> = const { RefCell::new(None) };
    /// Bytes of the files read before the one being read.
    static BASE: Cell<u64> = const { Cell::new(0) };
    /// Where the reading of a compressed file is, in the file: kept by the thread that
    /// inflates it, told by the one that builds the model.
    static POSITION: RefCell<Option<Arc<AtomicU64>>> = const { RefCell::new(None) };
}

/// Runs `load` with `watcher` told of its progress (on this thread: the one that builds
/// the model).
pub fn watching<R>(watcher: Arc<dyn Watcher>, load: impl FnOnce() -> R) -> R {
    struct Unset;
    impl Drop for Unset {
        fn drop(&mut self) {
            WATCHER.with(|w| w.borrow_mut().take());
        }
    }
    WATCHER.with(|w| *w.borrow_mut() = Some(watcher));
    BASE.with(|b| b.set(0));
    let _unset = Unset;
    load()
}

fn with<R>(f: impl FnOnce(&dyn Watcher) -> R) -> Option<R> {
    // Cloned out so that a watcher may itself load (it would see no watcher).
    let watcher = WATCHER.with(|w| w.borrow().clone())?;
    Some(f(&*watcher))
}

/// The load reads `total_bytes` in all.
pub fn begin(total_bytes: u64) {
    with(|w| w.begin(total_bytes));
}

/// A file begins, `base` bytes into the input.
pub fn file_begins(base: u64) {
    BASE.with(|b| b.set(base));
    with(|w| w.read(base));
}

/// `offset` bytes of the file being read are read.
pub fn read_in_file(offset: u64) {
    let base = BASE.with(Cell::get);
    with(|w| w.read(base + offset));
}

/// Runs `read` with `position` as where the file being read is (its compressed bytes
/// read, for an importer that sees only the inflated text).
pub fn with_position<R>(position: Arc<AtomicU64>, read: impl FnOnce() -> R) -> R {
    struct Unset(Option<Arc<AtomicU64>>);
    impl Drop for Unset {
        fn drop(&mut self) {
            POSITION.with(|p| *p.borrow_mut() = self.0.take());
        }
    }
    let _unset = Unset(POSITION.with(|p| p.borrow_mut().replace(position)));
    read()
}

/// Tells the watcher where the file being read is, when that is known.
pub(crate) fn read_to_position() {
    if let Some(at) = POSITION.with(|p| p.borrow().clone()) {
        read_in_file(at.load(Ordering::Relaxed));
    }
}

/// Offers the model as it stands; `finish` is the importer's finishing of its part,
/// run on the copy by whoever draws it.
pub fn offer(trace: &Trace, finish: impl FnOnce(&mut Trace) + Send + 'static) {
    with(|w| {
        if w.wants_copy() {
            w.copy(Partial {
                trace: trace.clone(),
                finish: Some(Box::new(finish)),
            });
        }
    });
}

/// Offers what a failed load read before its error, whether or not a copy is due: the
/// load returns no model, and a watcher may show this instead.
pub fn offer_last(trace: &Trace) {
    with(|w| {
        w.copy(Partial {
            trace: trace.clone(),
            finish: None,
        })
    });
}

/// Whether anyone watches this thread's load (so that an importer makes no copy).
pub fn is_watched() -> bool {
    WATCHER.with(|w| w.borrow().is_some())
}
