//! The one entry point that imports the bytes of any one file, gzip'd or not, through
//! the format that claims them (see [`crate::registry`]: each format knows its own
//! first bytes or names); and the first bytes of a file, inflated, that they are
//! asked about.

use std::borrow::Cow;
use std::io::Read;

use opscope_model::{SourceId, Trace};

use crate::error::ImportError;
use crate::read_ahead::ReadAhead;

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
fn gzip_fault(bytes: &[u8], path: &str) -> Option<ImportError> {
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
fn in_decompressed(e: ImportError) -> ImportError {
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

/// SQLite's first bytes (an Nsight Systems export).
const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";

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
        if crate::chrome::looks_like_json(&head[..filled]) {
            // Inflating takes a sixth of the reading thread's time: a thread of its
            // own lets it overlap with splitting and scanning the text.
            let imported = std::thread::scope(|scope| {
                let inflated = ReadAhead::spawn(scope, flate2::read::MultiGzDecoder::new(bytes));
                crate::chrome::import_reader(inflated, path, trace)
            });
            return imported.map_err(|e| gzip_fault(bytes, path).unwrap_or(in_decompressed(e)));
        }
        let inflated = decompress_if_gzip(bytes, path)?;
        return import_plain(&inflated, path, trace).map_err(in_decompressed);
    }
    import_plain(bytes, path, trace)
}

/// Imports decompressed bytes through the format that claims them.
fn import_plain(bytes: &[u8], path: &str, trace: &mut Trace) -> Result<SourceId, ImportError> {
    // An XPlane is known by its name; without one, by its planes.
    if crate::perfetto::looks_like_packets(bytes) && crate::xplane::looks_like_xspace(bytes) {
        return crate::xplane::import(bytes, path, trace);
    }
    if let Some(import) = crate::registry::for_bytes(path, bytes).and_then(|i| i.bytes_importer()) {
        return import(bytes, path, trace);
    }
    match bytes {
        _ if bytes.starts_with(SQLITE_MAGIC) => Err(ImportError::UnknownFormat {
            path: path.to_string(),
            message: "an Nsight Systems export, but opscope was built without `nsys`".into(),
        }),
        _ if bytes.iter().all(u8::is_ascii_whitespace) => Err(ImportError::UnknownFormat {
            path: path.to_string(),
            message: "the file holds no data (byte 0 onwards is empty or blank)".into(),
        }),
        _ => Err(ImportError::UnknownFormat {
            path: path.to_string(),
            message: "neither JSON nor a Perfetto protobuf (from byte 0)".into(),
        }),
    }
}

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
    let mut raw = Vec::with_capacity(HEAD);
    std::fs::File::open(path)?
        .take(HEAD as u64)
        .read_to_end(&mut raw)?;
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

/// How many first bytes [`head_of_file`] reads.
/// Enough for a tar header, whose magic is at byte 257.
const HEAD: usize = 512;

#[cfg(test)]
mod tests {
    use super::*;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    fn json_trace(events: usize) -> Vec<u8> {
        let events: Vec<String> = (0..events)
            .map(|i| {
                format!(
                    r#"{{"ph":"X","name":"op{}","pid":1,"tid":1,"ts":{i},"dur":1}}"#,
                    i % 7
                )
            })
            .collect();
        format!(r#"{{"traceEvents":[{}]}}"#, events.join(",")).into_bytes()
    }

    fn error_of(bytes: &[u8], path: &str) -> String {
        import_bytes(bytes, path, &mut Trace::new())
            .unwrap_err()
            .to_string()
    }

    /// A damaged gzip stream is blamed on the gzip data, at an offset into the file,
    /// not on the garbage it inflates to; an error in intact gzip data is at an offset
    /// into the decompressed data, and says so.
    #[test]
    fn gzip_damage_is_told_apart_from_damage_to_what_it_holds() {
        let good = gzip(&json_trace(20_000));
        for flipped in [good.len() / 3, good.len() / 2, good.len() - 6] {
            let mut bad = good.clone();
            bad[flipped] ^= 0x10;
            let e = error_of(&bad, "t.json.gz");
            assert!(e.starts_with("t.json.gz: byte "), "{e}");
            assert!(e.contains(": the gzip data is corrupt ("), "{e}");
            let offset: usize = e["t.json.gz: byte ".len()..]
                .split(':')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert!(
                (flipped..=good.len()).contains(&offset),
                "flipped {flipped}: {e}"
            );
        }
        let cut = &good[..good.len() / 2];
        let e = error_of(cut, "t.json.gz");
        assert!(
            e.starts_with(&format!(
                "t.json.gz: byte {}: the gzip data ends early (cut off?)",
                cut.len()
            )),
            "{e}"
        );
        let mut text = json_trace(10);
        let comma = text.len() - 3;
        text[comma] = b'!';
        assert_eq!(
            error_of(&gzip(&text), "t.json.gz"),
            error_of(&text, "t.json").replacen(
                &format!("t.json: byte {comma}:"),
                &format!("t.json.gz: byte {comma} of the decompressed data:"),
                1
            )
        );
        // Gzip'd Perfetto data is inflated whole first; its errors say so too.
        let e = error_of(&gzip(&[0x0a, 0x02, 0xff, 0xff]), "t.pftrace.gz");
        assert!(
            e.starts_with("t.pftrace.gz: byte 0 of the decompressed data: "),
            "{e}"
        );
    }

    #[test]
    fn json_and_perfetto_are_told_apart() {
        let json = |b: &[u8]| crate::chrome::looks_like_json(b);
        let packets = |b: &[u8]| crate::perfetto::looks_like_packets(b);
        assert!(json(b"{\"traceEvents\":[]}") && !packets(b"{\"traceEvents\":[]}"));
        assert!(json(b"\n\n  [ {} ]") && !packets(b"\n\n  [ {} ]"));
        // A packet of 123 bytes starts 0x0a 0x7b, that is "\n{", then binary fields.
        let mut packet = vec![0x0a, 0x7b, 0x08, 0x01, 0x10];
        packet.resize(125, 0);
        assert!(packets(&packet) && !json(&packet));
        assert!(packets(&[0x0a, 0x02, 0x08, 0x01]));
        assert!(!json(b"hello") && !packets(b"hello"));
        assert!(!json(b"") && !packets(b""));
    }
}
