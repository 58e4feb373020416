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

/// Whether anyone watches this thread's load (so that an importer makes no copy).
pub fn is_watched() -> bool {
    WATCHER.with(|w| w.borrow().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Seen {
        total: Mutex<u64>,
        read: Mutex<Vec<u64>>,
        copies: Mutex<Vec<usize>>,
    }

    impl Watcher for Seen {
        fn begin(&self, total: u64) {
            *self.total.lock().unwrap() = total;
        }
        fn read(&self, done: u64) {
            self.read.lock().unwrap().push(done);
        }
        fn wants_copy(&self) -> bool {
            true
        }
        fn copy(&self, copy: Partial) {
            let trace = copy.finish();
            trace.check().unwrap();
            self.copies.lock().unwrap().push(trace.slices.len());
        }
    }

    fn document(n: usize) -> String {
        let mut doc = String::from("{\"traceEvents\": [");
        for i in 0..n {
            let sep = if i + 1 < n { "," } else { "" };
            doc.push_str(&format!(
                "{{\"ph\": \"X\", \"pid\": 1, \"tid\": {}, \"ts\": {}, \"dur\": 1, \"name\": \"op{}\"}}{sep}\n",
                i % 3,
                n - i,
                i % 17
            ));
        }
        doc.push_str("]}");
        doc
    }

    /// `bytes` imported as the file `path` under a watcher: what it was told.
    fn watched(bytes: &[u8], path: &str) -> (Arc<Seen>, Trace) {
        let seen = Arc::new(Seen::default());
        let mut trace = Trace::new();
        watching(seen.clone(), || {
            begin(bytes.len() as u64);
            file_begins(0);
            crate::registry::import_bytes(bytes, path, &mut trace).unwrap();
        });
        (seen, trace)
    }

    /// A Chrome trace read as a whole, or inflated from gzip as it is read, tells its
    /// progress (in the file's bytes) and offers copies of what it has read, each sorted
    /// and passing the model's checks; nothing is told once the watch is over.
    #[test]
    fn a_load_tells_its_progress_and_offers_what_it_has_read() {
        use std::io::Write;
        let n = 40_000;
        let doc = document(n);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(doc.as_bytes()).unwrap();
        let gz = gz.finish().unwrap();
        for (bytes, path) in [(doc.as_bytes(), "t.json"), (&gz[..], "t.json.gz")] {
            let (seen, trace) = watched(bytes, path);
            assert_eq!(*seen.total.lock().unwrap(), bytes.len() as u64);
            let read = seen.read.lock().unwrap().clone();
            assert!(
                read.iter().filter(|&&r| r > 0).count() > 2,
                "{path}: {read:?}"
            );
            assert!(read.windows(2).all(|w| w[0] <= w[1]), "{path}: {read:?}");
            assert!(*read.last().unwrap() <= bytes.len() as u64, "{path}");
            let copies = seen.copies.lock().unwrap().clone();
            assert!(!copies.is_empty(), "{path}");
            assert!(copies.windows(2).all(|w| w[0] < w[1]), "{path}: {copies:?}");
            assert!(
                copies[0] < n && *copies.last().unwrap() <= n,
                "{path}: {copies:?}"
            );
            assert_eq!(trace.slices.len(), n);
        }
        assert!(!is_watched());
        assert!(POSITION.with(|p| p.borrow().is_none()));
        let (seen, _) = watched(doc.as_bytes(), "t.json");
        let before = seen.read.lock().unwrap().len();
        crate::chrome::import(doc.as_bytes(), "t.json", &mut Trace::new()).unwrap();
        assert_eq!(seen.read.lock().unwrap().len(), before);
    }
}
