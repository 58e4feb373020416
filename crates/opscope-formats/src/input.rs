//! Format detection and the one entry point that imports any supported bytes.
//! Protobuf formats that share a first byte (Perfetto, XSpace, RunMetadata) are told
//! apart by their file names.

use std::borrow::Cow;
use std::io::Read;

use opscope_model::{SourceId, Trace};

use crate::error::ImportError;
use crate::read_ahead::ReadAhead;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Format {
    /// Chrome trace JSON, including PyTorch/Kineto and TensorFlow timelines.
    ChromeJson,
    /// Perfetto protobuf (`Trace` of `TracePacket`s).
    Perfetto,
    /// TensorFlow/JAX profiler XSpace protobuf (`*.xplane.pb`).
    XPlane,
    /// TensorFlow `RunMetadata` step stats (`run_meta`), tfprof's input.
    RunMetadata,
    /// Nsight Systems SQLite export.
    NsysSqlite,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::ChromeJson => "chrome-json",
            Format::Perfetto => "perfetto",
            Format::XPlane => "xplane",
            Format::RunMetadata => "tf-run-metadata",
            Format::NsysSqlite => "nsys-sqlite",
        }
    }
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Inflates gzip data (all members); other data is returned as is.
pub fn decompress_if_gzip<'a>(bytes: &'a [u8], path: &str) -> Result<Cow<'a, [u8]>, ImportError> {
    if !bytes.starts_with(&GZIP_MAGIC) {
        return Ok(Cow::Borrowed(bytes));
    }
    let mut out = Vec::with_capacity(bytes.len().saturating_mul(6));
    let mut decoder = flate2::read::MultiGzDecoder::new(bytes);
    match decoder.read_to_end(&mut out) {
        Ok(_) => Ok(Cow::Owned(out)),
        Err(e) => Err(ImportError::Syntax {
            path: path.to_string(),
            offset: out.len() as u64,
            message: format!(
                "gzip data is corrupt or truncated ({e}); {} bytes were decompressed before it",
                out.len()
            ),
        }),
    }
}

/// Guesses the format of (decompressed) bytes.
pub fn detect(bytes: &[u8]) -> Option<Format> {
    // A Perfetto trace starts with 0x0a (field 1, length-delimited), which is also a
    // newline: JSON is told apart by being text, while packets hold control bytes
    // (field tags such as 0x08 and 0x10) within their first few bytes.
    let head = &bytes[..bytes.len().min(256)];
    let is_text = head
        .iter()
        .all(|&b| b >= 0x20 || matches!(b, b'\n' | b'\r' | b'\t'));
    let first = bytes.iter().copied().find(|b| !b.is_ascii_whitespace());
    if bytes.starts_with(b"SQLite format 3\0") {
        return Some(Format::NsysSqlite);
    }
    match (is_text, first) {
        (true, Some(b'{' | b'[')) => Some(Format::ChromeJson),
        _ if bytes.first() == Some(&0x0a) => Some(Format::Perfetto),
        _ => None,
    }
}

/// Imports `bytes` read from `path` into `trace` and finishes it. Gzip data is
/// inflated on the way: a gzip'd JSON trace is streamed, never held whole.
pub fn import_bytes(bytes: &[u8], path: &str, trace: &mut Trace) -> Result<SourceId, ImportError> {
    if bytes.starts_with(&GZIP_MAGIC) {
        let mut head = [0u8; 256];
        let mut decoder = flate2::read::MultiGzDecoder::new(bytes);
        let mut filled = 0;
        while filled < head.len() {
            match decoder.read(&mut head[filled..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => filled += n,
            }
        }
        if detect(&head[..filled]) == Some(Format::ChromeJson) {
            // Inflating takes a sixth of the reading thread's time: a thread of its
            // own lets it overlap with splitting and scanning the text.
            return std::thread::scope(|scope| {
                let inflated = ReadAhead::spawn(scope, flate2::read::MultiGzDecoder::new(bytes));
                crate::chrome::import_reader(inflated, path, trace)
            });
        }
        let inflated = decompress_if_gzip(bytes, path)?;
        return import_plain(&inflated, path, trace);
    }
    import_plain(bytes, path, trace)
}

fn import_plain(bytes: &[u8], path: &str, trace: &mut Trace) -> Result<SourceId, ImportError> {
    // XSpace and Perfetto files both open with a length-delimited field 1: the name
    // tells them apart.
    if crate::xplane::is_xplane_path(path) {
        return crate::xplane::import(bytes, path, trace);
    }
    if crate::run_metadata::is_run_metadata_path(path) {
        return crate::run_metadata::import(bytes, path, None, trace);
    }
    match detect(bytes) {
        #[cfg(feature = "nsys")]
        Some(Format::NsysSqlite) => crate::nsys::import_bytes(bytes, path, trace),
        #[cfg(not(feature = "nsys"))]
        Some(Format::NsysSqlite) => Err(ImportError::UnknownFormat {
            path: path.to_string(),
            message: "an Nsight Systems export, but opscope was built without `nsys`".into(),
        }),
        Some(Format::ChromeJson) => crate::chrome::import(bytes, path, trace),
        Some(Format::Perfetto) => crate::perfetto::import(bytes, path, trace),
        Some(Format::XPlane) => crate::xplane::import(bytes, path, trace),
        Some(Format::RunMetadata) => crate::run_metadata::import(bytes, path, None, trace),
        None if bytes.iter().all(u8::is_ascii_whitespace) => Err(ImportError::UnknownFormat {
            path: path.to_string(),
            message: "the file holds no data (byte 0 onwards is empty or blank)".into(),
        }),
        None => Err(ImportError::UnknownFormat {
            path: path.to_string(),
            message: "neither JSON nor a Perfetto protobuf (from byte 0)".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_perfetto_are_told_apart() {
        assert_eq!(detect(b"{\"traceEvents\":[]}"), Some(Format::ChromeJson));
        assert_eq!(detect(b"\n\n  [ {} ]"), Some(Format::ChromeJson));
        // A packet of 123 bytes starts 0x0a 0x7b, that is "\n{", then binary fields.
        let mut packet = vec![0x0a, 0x7b, 0x08, 0x01, 0x10];
        packet.resize(125, 0);
        assert_eq!(detect(&packet), Some(Format::Perfetto));
        assert_eq!(detect(&[0x0a, 0x02, 0x08, 0x01]), Some(Format::Perfetto));
        assert_eq!(detect(b"hello"), None);
        assert_eq!(detect(b""), None);
    }
}
