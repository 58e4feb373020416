//! Gzip as a container, as Perfetto's trace processor reads it: gzip'd bytes (a
//! `.json.gz`, a `.pftrace.gz`, a gzip'd tar, a gzip'd member of an archive) are
//! inflated and dispatched again to the format their inflated bytes show. A format that
//! reads as it goes (Chrome JSON) is fed the inflated stream from a thread of its own,
//! never holding the whole text; the others get the inflated buffer.

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use opscope_model::{SourceId, Trace};

use crate::error::ImportError;
use crate::importer::{ContainerImporter, Dispatch, Importer, Nesting};
use crate::input::{self, GZIP_MAGIC};
use crate::read_ahead::ReadAhead;

/// Gzip data in the registry.
pub struct GzipFormat;

impl Importer for GzipFormat {
    fn name(&self) -> &'static str {
        "gzip"
    }

    /// The formats it holds say what a walk looks for (`.json.gz`, `.pftrace.gz`).
    fn looks_for(&self) -> &'static str {
        ""
    }

    fn claims_bytes(&self, _path: &str, head: &[u8]) -> bool {
        head.starts_with(&GZIP_MAGIC)
    }

    fn container(&self) -> Option<ContainerImporter> {
        Some(import)
    }
}

thread_local! {
    /// How many gzip layers the data being read is inside: gzip in gzip is inflated
    /// four deep (a gzip quine, a file that inflates to itself, would never end).
    static NESTING: Nesting = const {
        Nesting::new(4, |max| format!("gzip data inside {max} layers of gzip: not read"))
    };
}

/// How many inflated first bytes tell the format apart (a tar's magic is at 257).
const HEAD: u64 = 512;

/// Inflates `bytes` (`shown` names them) and imports what they hold through
/// `dispatch`. A fault in the gzip data is told at its offset in the file; an error in
/// the inflated data at its offset there, said to be one.
pub fn import(
    bytes: &[u8],
    shown: &str,
    trace: &mut Trace,
    dispatch: &dyn Dispatch,
) -> Result<SourceId, ImportError> {
    NESTING.with(|nesting| {
        nesting.deeper(shown, || {
            inflate_and_dispatch(bytes, shown, trace, dispatch)
        })
    })
}

fn inflate_and_dispatch(
    bytes: &[u8],
    shown: &str,
    trace: &mut Trace,
    dispatch: &dyn Dispatch,
) -> Result<SourceId, ImportError> {
    let mut head = Vec::with_capacity(HEAD as usize);
    let _ = flate2::read::MultiGzDecoder::new(bytes)
        .take(HEAD)
        .read_to_end(&mut head);
    let streamed = dispatch
        .claims(shown, &head)
        .and_then(|format| format.reader_importer());
    if let Some(read) = streamed {
        // Inflating takes a sixth of the reading thread's time: a thread of its own
        // lets it overlap with splitting and scanning the text.
        let position = Arc::new(AtomicU64::new(0));
        let compressed = Counted {
            bytes,
            at: 0,
            position: position.clone(),
        };
        let imported = crate::watch::with_position(position, || {
            std::thread::scope(|scope| {
                let decoder = flate2::read::MultiGzDecoder::new(compressed);
                let mut inflated = ReadAhead::spawn(scope, decoder);
                read(&mut inflated, shown, trace)
            })
        });
        return imported
            .map_err(|e| input::gzip_fault(bytes, shown).unwrap_or(input::in_decompressed(e)));
    }
    let inflated = input::decompress_if_gzip(bytes, shown)?;
    dispatch
        .import_bytes(&inflated, shown, trace)
        .map_err(input::in_decompressed)
}

/// The compressed bytes, keeping where their reading is for a watcher of the load.
struct Counted<'a> {
    bytes: &'a [u8],
    at: usize,
    position: Arc<AtomicU64>,
}

impl Read for Counted<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = (&self.bytes[self.at..]).read(out)?;
        self.at += n;
        self.position.store(self.at as u64, Ordering::Relaxed);
        Ok(n)
    }
}
