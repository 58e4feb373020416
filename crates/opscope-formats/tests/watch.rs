//! A load under a watcher (`opscope_formats::watch`): what a viewer drawing the trace
//! while it loads is told.

use std::sync::{Arc, Mutex};

use opscope_formats::watch::{begin, file_begins, is_watched, watching, Partial, Watcher};
use opscope_model::Trace;

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
        opscope_formats::import_bytes(bytes, path, &mut trace).unwrap();
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
    let (seen, _) = watched(doc.as_bytes(), "t.json");
    let before = seen.read.lock().unwrap().len();
    opscope_formats::chrome::import(doc.as_bytes(), "t.json", &mut Trace::new()).unwrap();
    assert_eq!(seen.read.lock().unwrap().len(), before);
}
