//! CTF 1.8 (Common Trace Format) reader: LTTng user-space and kernel traces, DPDK and
//! `perf data convert --to-ctf` traces.
//!
//! - decoding is the crate `opscope-ctf` (re-exported here: [`metadata`], [`decode`],
//!   [`program`], [`types`]);
//! - [`mapping`]: CTF events → the opscope model (slices, instants, counters);
//!   opscope's own CTF on a path of its own (`mapping::own`);
//! - `pipeline`: decoding on a second thread, handing batches to the mapping.
//!
//! One trace is a metadata file and its stream files; the caller (the CLI) finds them
//! and maps them. Streams are merged by time. CTF 2 (JSON metadata) is refused with a
//! clear error.

pub mod export;
pub(crate) mod mapping;
mod pipeline;

pub use opscope_ctf::{decode, metadata, program, types};

#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use opscope_model::{SourceId, Trace};

use crate::error::ImportError;
pub use decode::{Event, Layout, Node, StreamReader, Val};

/// CTF traces in the registry: a directory holding a `metadata` file and its stream
/// files (an LTTng session holds several, one per domain and bitness).
pub struct CtfFormat;

impl crate::importer::Importer for CtfFormat {
    fn name(&self) -> &'static str {
        "ctf"
    }

    fn looks_for(&self) -> &'static str {
        "CTF directories with a `metadata` file"
    }

    fn claims_dir(&self, dir: &std::path::Path) -> bool {
        dir.join("metadata").is_file()
    }

    /// `metadata`, then the stream files: every regular file but `metadata` and hidden
    /// ones, in name order (`index/` and other directories are skipped).
    fn files(&self, dir: &std::path::Path) -> std::io::Result<Vec<std::path::PathBuf>> {
        let mut streams = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if path.is_file() && name != "metadata" && !name.starts_with('.') {
                streams.push(path);
            }
        }
        streams.sort();
        let mut files = vec![dir.join("metadata")];
        files.extend(streams);
        Ok(files)
    }

    fn import(
        &self,
        input: &crate::importer::Input,
        trace: &mut Trace,
    ) -> Option<Result<SourceId, ImportError>> {
        Some(import_files(input, trace))
    }
}

/// Imports one input from its files, as the registry read them.
fn import_files(
    input: &crate::importer::Input,
    trace: &mut Trace,
) -> Result<SourceId, ImportError> {
    let Some(((metadata_shown, metadata), streams)) = input.files.split_first() else {
        return Err(ImportError::UnknownFormat {
            path: input.shown.to_string(),
            message: "a CTF trace without its `metadata` file".into(),
        });
    };
    import(input.shown, metadata, metadata_shown, streams, trace)
}

/// Whether a metadata file is CTF 2 (JSON text sequence), which this reader refuses.
pub fn is_ctf2(metadata: &[u8]) -> bool {
    metadata::metadata_kind(metadata) == metadata::MetadataKind::Ctf2
}

/// Parses and compiles a metadata file (`path` is used in errors).
pub fn layout(metadata_bytes: &[u8], path: &str) -> Result<Layout, ImportError> {
    if is_ctf2(metadata_bytes) {
        return Err(ImportError::UnknownFormat {
            path: path.to_string(),
            message: "CTF 2 metadata (JSON, byte 0 is 0x1E) is not supported yet; only CTF 1.8 is"
                .into(),
        });
    }
    let syntax = |e: metadata::MetaError, what: &str| ImportError::Syntax {
        path: path.to_string(),
        offset: e.offset,
        message: format!("{what}{}", e.message),
    };
    let text = metadata::metadata_text(metadata_bytes).map_err(|e| syntax(e, ""))?;
    let packetized = metadata::metadata_kind(metadata_bytes) == metadata::MetadataKind::Packetized;
    let meta = metadata::parse(&text).map_err(|e| {
        syntax(
            e,
            if packetized {
                "(offset in the unpacked TSDL text) "
            } else {
                ""
            },
        )
    })?;
    decode::compile(meta).map_err(|message| ImportError::Syntax {
        path: path.to_string(),
        offset: 0,
        message,
    })
}

/// Reads the events of several streams of one trace in time order (ties in stream
/// order), calling `f(stream index, reader)` for each; the reader holds the decoded
/// event. Streams that fail stop at their error; the others are read to the end and
/// the first error is returned.
pub fn read_merged<'a>(
    layout: &'a Layout,
    streams: &[(String, &'a [u8])],
    f: impl FnMut(usize, &StreamReader<'a>),
) -> (Vec<StreamReader<'a>>, Option<ImportError>) {
    read_merged_keeping(layout, streams, Keep::ALL, f)
}

/// Which scopes' values a reader keeps in each event's `vals` (event ids, times and
/// what later fields refer to are read either way).
#[derive(Clone, Copy, Debug)]
struct Keep {
    header: bool,
    context: bool,
}

impl Keep {
    const ALL: Keep = Keep {
        header: true,
        context: true,
    };
}

/// Reads `count` streams merged by time, ties in stream order: `advance(state, i)` reads
/// stream `i`'s next event and gives its time (`None` at its end), and `take(state, i)`
/// takes the event read last (`Ok(false)` stops every stream). A stream stays read while
/// it stays first: streams come in long runs (a thread keeps its CPU), and the heap is
/// then left alone. A stream stops at its first error; the first of all is returned,
/// naming its stream file (`streams`: path, bytes).
pub(crate) fn merge_by_time<S>(
    state: &mut S,
    streams: &[(String, &[u8])],
    mut advance: impl FnMut(&mut S, usize) -> Result<Option<u64>, decode::DecodeError>,
    mut take: impl FnMut(&mut S, usize) -> Result<bool, decode::DecodeError>,
) -> Option<ImportError> {
    let count = streams.len();
    let mut first_error = None;
    let mut failed = |i: usize, e: decode::DecodeError| {
        if first_error.is_none() {
            first_error = Some(ImportError::Syntax {
                path: streams[i].0.clone(),
                offset: e.offset,
                message: e.message,
            });
        }
    };
    let mut heap = BinaryHeap::with_capacity(count);
    for i in 0..count {
        match advance(state, i) {
            Ok(Some(time)) => heap.push(Reverse((time, i))),
            Ok(None) => {}
            Err(e) => failed(i, e),
        }
    }
    while let Some(Reverse((_, i))) = heap.pop() {
        loop {
            match take(state, i) {
                Ok(true) => {}
                Ok(false) => return first_error,
                Err(e) => {
                    failed(i, e);
                    break;
                }
            }
            match advance(state, i) {
                Ok(Some(time)) => {
                    if heap.peek().is_none_or(|Reverse(top)| (time, i) <= *top) {
                        continue;
                    }
                    heap.push(Reverse((time, i)));
                }
                Ok(None) => {}
                Err(e) => failed(i, e),
            }
            break;
        }
    }
    first_error
}

/// [`read_merged`], keeping the values `keep` says.
fn read_merged_keeping<'a>(
    layout: &'a Layout,
    streams: &[(String, &'a [u8])],
    keep: Keep,
    mut f: impl FnMut(usize, &StreamReader<'a>),
) -> (Vec<StreamReader<'a>>, Option<ImportError>) {
    let mut readers: Vec<StreamReader<'a>> = streams
        .iter()
        .map(|(_, bytes)| {
            let mut reader = StreamReader::new(layout, bytes);
            reader.header_values = keep.header;
            reader.context_values = keep.context;
            reader
        })
        .collect();
    let first_error = merge_by_time(
        &mut readers,
        streams,
        |readers, i| match readers[i].next_event() {
            Ok(true) => Ok(Some(readers[i].timestamp)),
            Ok(false) => Ok(None),
            Err(e) => Err(e),
        },
        |readers, i| {
            f(i, &readers[i]);
            Ok(true)
        },
    );
    (readers, first_error)
}

/// Imports one CTF trace: its metadata and stream files (path for errors, bytes), as
/// one source named `trace_name`. Events read before an error stay in `trace`; the
/// first error (naming the stream file and byte offset) is returned after the rest of
/// the trace was read.
pub fn import(
    trace_name: &str,
    metadata: &[u8],
    metadata_path: &str,
    streams: &[(String, &[u8])],
    trace: &mut Trace,
) -> Result<SourceId, ImportError> {
    import_via(
        trace_name,
        metadata,
        metadata_path,
        streams,
        trace,
        mapping::Path::Fast,
    )
}

/// [`import`] with opscope's own CTF read by the reader `path` says.
pub(crate) fn import_via(
    trace_name: &str,
    metadata: &[u8],
    metadata_path: &str,
    streams: &[(String, &[u8])],
    trace: &mut Trace,
    path: mapping::Path,
) -> Result<SourceId, ImportError> {
    let layout = layout(metadata, metadata_path)?;
    let (source, error) = mapping::import_layout(trace_name, &layout, streams, trace, path);
    trace.finish();
    match error {
        Some(e) => Err(e),
        None => Ok(source),
    }
}
