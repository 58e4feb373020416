//! Format detection and the one entry point that imports any supported bytes.

use std::borrow::Cow;
use std::io::Read;

use opscope_model::{SourceId, Trace};

use crate::error::ImportError;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Format {
    /// Chrome trace JSON, including PyTorch/Kineto and TensorFlow timelines.
    ChromeJson,
    /// Perfetto protobuf (`Trace` of `TracePacket`s).
    Perfetto,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::ChromeJson => "chrome-json",
            Format::Perfetto => "perfetto",
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
    let first = bytes.iter().copied().find(|b| !b.is_ascii_whitespace())?;
    match first {
        b'{' | b'[' => Some(Format::ChromeJson),
        // A Perfetto trace is a sequence of `packet` fields (field 1, length-delimited).
        0x0a => Some(Format::Perfetto),
        _ => None,
    }
}

/// Imports decompressed `bytes` read from `path` into `trace` and finishes it.
pub fn import_bytes(bytes: &[u8], path: &str, trace: &mut Trace) -> Result<SourceId, ImportError> {
    match detect(bytes) {
        Some(Format::ChromeJson) => crate::chrome::import(bytes, path, trace),
        Some(Format::Perfetto) => crate::perfetto::import(bytes, path, trace),
        None if bytes.is_empty() => Err(ImportError::UnknownFormat {
            path: path.to_string(),
            message: "the file is empty".into(),
        }),
        None => Err(ImportError::UnknownFormat {
            path: path.to_string(),
            message: "neither JSON nor a Perfetto protobuf; byte 0 is not '{', '[' or 0x0a".into(),
        }),
    }
}
