//! The bytes of an input before a format reads them: gzip inflated (and where it breaks),
//! the first bytes formats are told apart by, and a binary file that went through a
//! text conversion.

use std::borrow::Cow;
use std::io::Read;

use crate::error::ImportError;

pub(crate) const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Inflates gzip data (all members); other data is returned as is.
pub fn decompress_if_gzip<'a>(bytes: &'a [u8], path: &str) -> Result<Cow<'a, [u8]>, ImportError> {
    if !bytes.starts_with(&GZIP_MAGIC) {
        return Ok(Cow::Borrowed(bytes));
    }
    let mut out = Vec::with_capacity(bytes.len().saturating_mul(6));
    let mut decoder = flate2::read::MultiGzDecoder::new(bytes);
    match decoder.read_to_end(&mut out) {
        Ok(_) => Ok(Cow::Owned(out)),
        Err(_) => Err(
            gzip_fault(bytes, path).unwrap_or_else(|| ImportError::Syntax {
                path: path.to_string(),
                offset: 0,
                message: "the gzip data is corrupt".into(),
            }),
        ),
    }
}

/// Where the gzip data in `bytes` breaks, if it does: an error at the offset in the
/// file (the compressed bytes) where inflating failed, saying how much came out before.
/// Deflate data carries no checksum but at the end of a member, so a damaged stream
/// may first inflate into garbage that the parser of the text stumbles on: the stream
/// is checked on its own before the parser's error is believed.
pub(crate) fn gzip_fault(bytes: &[u8], path: &str) -> Option<ImportError> {
    /// A `BufRead` over the compressed bytes that knows how far the decoder has taken.
    struct Counting<'a> {
        bytes: &'a [u8],
        taken: usize,
    }
    impl Read for Counting<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = (&self.bytes[self.taken..]).read(out)?;
            self.taken += n;
            Ok(n)
        }
    }
    impl std::io::BufRead for Counting<'_> {
        fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
            Ok(&self.bytes[self.taken..])
        }
        fn consume(&mut self, n: usize) {
            self.taken = (self.taken + n).min(self.bytes.len());
        }
    }
    let mut input = Counting { bytes, taken: 0 };
    let mut decoder = flate2::bufread::MultiGzDecoder::new(&mut input);
    let mut block = vec![0u8; 1 << 16];
    let mut inflated = 0u64;
    let error = loop {
        match decoder.read(&mut block) {
            Ok(0) => return None,
            Ok(n) => inflated += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => break e,
        }
    };
    drop(decoder);
    let what = if error.kind() == std::io::ErrorKind::UnexpectedEof {
        "the gzip data ends early (cut off?)".to_string()
    } else {
        format!("the gzip data is corrupt ({error})")
    };
    Some(ImportError::Syntax {
        path: path.to_string(),
        offset: input.taken as u64,
        message: format!(
            "{what}; {inflated} bytes of decompressed data came before this point of the file"
        ),
    })
}

/// An error of reading decompressed data: its offset is one into that data, and says
/// so, since it is not one into the file.
pub(crate) fn in_decompressed(e: ImportError) -> ImportError {
    match e {
        ImportError::Syntax {
            path,
            offset,
            message,
        } => ImportError::Decompressed {
            path,
            offset,
            message,
        },
        other => other,
    }
}

/// Whether binary bytes went through a text conversion: a tool that read them as UTF-8
/// replaced every byte above 0x7f by U+FFFD (`EF BF BD`), so the only high bytes left
/// are those triples, many of them. Such a file fails any binary reader at some early
/// varint or length, which says nothing of why.
pub fn mangled_by_text_conversion(bytes: &[u8]) -> bool {
    const REPLACEMENT: [u8; 3] = [0xef, 0xbf, 0xbd];
    let head = &bytes[..bytes.len().min(1 << 16)];
    let mut replaced = 0;
    let mut i = 0;
    while i < head.len() {
        if head[i] < 0x80 {
            i += 1;
        } else if head[i..].starts_with(&REPLACEMENT) {
            replaced += 1;
            i += 3;
        } else if i + 3 > head.len() {
            break; // a triple cut by the sample's end
        } else {
            return false;
        }
    }
    replaced >= 8
}

/// What is said of a file that went through a text conversion.
pub const MANGLED: &str = "this binary file went through a text conversion: every byte above 0x7f \
     was replaced by U+FFFD (EF BF BD), as a tool that reads a file as UTF-8 text does \
     (a copy or download in text mode, a text editor); get the original file";

/// The first bytes of `bytes`, inflated when they are gzip'd: what formats are told
/// apart by.
pub fn head_of_bytes(bytes: &[u8]) -> Vec<u8> {
    if !bytes.starts_with(&GZIP_MAGIC) {
        return bytes[..bytes.len().min(HEAD)].to_vec();
    }
    let mut head = Vec::with_capacity(HEAD);
    let _ = flate2::read::MultiGzDecoder::new(bytes)
        .take(HEAD as u64)
        .read_to_end(&mut head);
    head
}

/// The first bytes of the file at `path`, as [`head_of_bytes`] gives them.
pub fn head_of_file(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    let raw = raw_head(&mut std::fs::File::open(path)?)?;
    if !raw.starts_with(&GZIP_MAGIC) {
        return Ok(raw);
    }
    let mut head = Vec::with_capacity(HEAD);
    let file = std::fs::File::open(path)?;
    let _ = flate2::read::MultiGzDecoder::new(file)
        .take(HEAD as u64)
        .read_to_end(&mut head);
    Ok(head)
}

/// The first bytes of `file` from where it is, as they are (not inflated).
pub(crate) fn raw_head(file: &mut std::fs::File) -> std::io::Result<Vec<u8>> {
    let mut raw = Vec::with_capacity(HEAD);
    file.by_ref().take(HEAD as u64).read_to_end(&mut raw)?;
    Ok(raw)
}

/// How many first bytes [`head_of_file`] reads.
/// Enough for a tar header, whose magic is at byte 257.
const HEAD: usize = 512;
