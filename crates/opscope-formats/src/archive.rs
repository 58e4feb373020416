//! Traces in archives, as users attach them to tickets: a zip, a tar or a gzip'd tar
//! is one input whose member files are read as if they lay in a directory, each
//! through the format that claims it (by its name or first bytes) and named
//! `ARCHIVE/MEMBER` in messages. Formats whose traces are directories or that SQLite
//! opens itself (CTF, Nsight Systems) are named in a warning: extract those.

use std::io::Read;

use opscope_model::{SourceId, Trace};

use crate::error::ImportError;
use crate::importer::{ContainerImporter, Dispatch, Importer, Nesting};

const ZIP_MAGIC: &[u8] = b"PK\x03\x04";
/// A POSIX tar header's magic, at byte 257 of the first header.
const TAR_MAGIC_AT: usize = 257;
/// A member may inflate to at most this many times the archive's size (or
/// [`MIN_INFLATE_BOUND`]): a zip bomb is refused rather than let fill memory.
const INFLATE_RATIO: u64 = 64;
const MIN_INFLATE_BOUND: u64 = 1 << 30;

/// Zip and tar archives in the registry.
pub struct ArchiveFormat;

impl Importer for ArchiveFormat {
    fn name(&self) -> &'static str {
        "archive"
    }

    fn looks_for(&self) -> &'static str {
        ""
    }

    /// None: a directory walk leaves archives alone (one beside its traces mostly
    /// holds copies of them); an archive named as an input is known by its bytes.
    fn claims_name(&self, _name: &str) -> bool {
        false
    }

    fn claims_bytes(&self, _path: &str, head: &[u8]) -> bool {
        is_zip(head) || is_tar(head)
    }

    /// From a file, a pipe or another archive alike (a gzip'd tar comes inflated).
    fn container(&self) -> Option<ContainerImporter> {
        Some(import)
    }
}

thread_local! {
    /// How many archives the member being read is inside: archives within archives
    /// are read four deep (an archive that holds itself would otherwise never end).
    static NESTING: Nesting = const {
        Nesting::new(4, |max| format!("an archive inside {max} archives: not read"))
    };
}

/// Imports the members of the zip or tar archive `bytes` (`shown` names it), each
/// through `dispatch`.
pub fn import(
    bytes: &[u8],
    shown: &str,
    trace: &mut Trace,
    dispatch: &dyn Dispatch,
) -> Result<SourceId, ImportError> {
    NESTING.with(|nesting| {
        nesting.deeper(shown, || {
            let bound = (bytes.len() as u64)
                .saturating_mul(INFLATE_RATIO)
                .max(MIN_INFLATE_BOUND);
            let members = if is_zip(bytes) {
                zip_members(bytes, shown, bound)?
            } else {
                tar_members(bytes, shown, bound)?
            };
            import_members(members, shown, trace, dispatch)
        })
    })
}

fn is_zip(head: &[u8]) -> bool {
    head.starts_with(ZIP_MAGIC)
}

fn is_tar(head: &[u8]) -> bool {
    head.get(TAR_MAGIC_AT..TAR_MAGIC_AT + 5) == Some(b"ustar")
}

/// A member's name in the archive, and its bytes or why they could not be read.
type Member = (String, Result<Vec<u8>, String>);

fn zip_members(bytes: &[u8], shown: &str, bound: u64) -> Result<Vec<Member>, ImportError> {
    let mut archive = match zip::ZipArchive::new(std::io::Cursor::new(bytes)) {
        Ok(archive) => archive,
        // A zip cut short has lost its directory (at its end): its members are still
        // found one after the other by their own headers.
        Err(_) => return zip_members_in_order(bytes, shown, bound),
    };
    let mut members = Vec::new();
    for i in 0..archive.len() {
        let mut file = match archive.by_index(i) {
            Ok(file) => file,
            Err(e) => {
                members.push((format!("member {i}"), Err(e.to_string())));
                continue;
            }
        };
        if !file.is_file() {
            continue;
        }
        let name = file.name().to_string();
        let read = read_bounded(&mut file, bound);
        members.push((name, read));
    }
    Ok(members)
}

/// The members of a zip whose directory is missing, read in order from their local
/// headers, up to the first that cannot be read (which is named).
fn zip_members_in_order(bytes: &[u8], shown: &str, bound: u64) -> Result<Vec<Member>, ImportError> {
    let mut reader = std::io::Cursor::new(bytes);
    let mut members = Vec::new();
    loop {
        let at = reader.position();
        match zip::read::read_zipfile_from_stream(&mut reader) {
            Ok(Some(mut file)) => {
                if !file.is_file() {
                    continue;
                }
                let name = file.name().to_string();
                let read = read_bounded(&mut file, bound);
                members.push((name, read));
            }
            Ok(None) => break,
            Err(e) => {
                if members.is_empty() {
                    return Err(ImportError::Syntax {
                        path: shown.to_string(),
                        offset: at,
                        message: format!("not a zip archive that can be read: {e}"),
                    });
                }
                members.push((
                    format!("(the member at byte {at})"),
                    Err(format!("the archive is cut or damaged here: {e}")),
                ));
                break;
            }
        }
    }
    Ok(members)
}

fn tar_members(bytes: &[u8], shown: &str, bound: u64) -> Result<Vec<Member>, ImportError> {
    let mut archive = tar::Archive::new(bytes);
    let entries = archive.entries().map_err(|e| ImportError::Syntax {
        path: shown.to_string(),
        offset: 0,
        message: format!("not a tar archive that can be read: {e}"),
    })?;
    let mut members = Vec::new();
    for (i, entry) in entries.enumerate() {
        let mut entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                // A cut or damaged header ends the walk: what came before stays.
                members.push((format!("member {i}"), Err(e.to_string())));
                break;
            }
        };
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let name = entry
            .path()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("member {i}"));
        let read = read_bounded(&mut entry, bound);
        members.push((name, read));
    }
    Ok(members)
}

fn read_bounded(from: &mut impl Read, bound: u64) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    from.take(bound + 1)
        .read_to_end(&mut out)
        .map_err(|e| e.to_string())?;
    if out.len() as u64 > bound {
        return Err(format!(
            "inflates past {bound} bytes ({INFLATE_RATIO}× the archive): not read"
        ));
    }
    Ok(out)
}

/// Imports every member some format reads from its bytes; warns of those that need
/// a directory or a file of their own, and of those that failed, once something was
/// read (else the first failure is the error).
fn import_members(
    members: Vec<Member>,
    shown: &str,
    trace: &mut Trace,
    dispatch: &dyn Dispatch,
) -> Result<SourceId, ImportError> {
    let mut first = None;
    let mut failed: Vec<ImportError> = Vec::new();
    let mut not_here: Vec<String> = Vec::new();
    let names: std::collections::HashSet<std::path::PathBuf> =
        members.iter().map(|(name, _)| name.into()).collect();
    let exists = |p: &std::path::Path| names.contains(p);
    for (name, bytes) in members {
        if dispatch.is_a_copy(std::path::Path::new(&name), &exists) {
            continue;
        }
        let member = format!("{shown}/{name}");
        let bytes = match bytes {
            Ok(bytes) => bytes,
            Err(message) => {
                failed.push(ImportError::Syntax {
                    path: member,
                    offset: 0,
                    message,
                });
                continue;
            }
        };
        let lower = name.to_ascii_lowercase();
        let base = lower.rsplit('/').next().unwrap_or(&lower);
        let head = crate::input::head_of_bytes(&bytes);
        match dispatch.claims(&member, &head) {
            Some(i) if i.bytes_importer().is_some() || i.container().is_some() => {
                match dispatch.import_bytes(&bytes, &member, trace) {
                    Ok(source) => {
                        first.get_or_insert(source);
                    }
                    Err(e) => failed.push(e),
                }
            }
            Some(i) => not_here.push(format!("{name} ({})", i.name())),
            None if base == "metadata" => not_here.push(format!("{name} (a CTF trace's)")),
            // Notes, READMEs and whatever else a ticket's archive holds.
            None => {}
        }
    }
    let Some(source) = first else {
        return Err(failed.into_iter().next().unwrap_or_else(|| {
            let extract = if not_here.is_empty() {
                String::new()
            } else {
                format!(
                    "; it holds {} that opscope reads only from a directory: extract it",
                    not_here.join(", ")
                )
            };
            ImportError::UnknownFormat {
                path: shown.to_string(),
                message: format!("no member of this archive is a trace opscope reads{extract}"),
            }
        }));
    };
    for e in failed {
        trace.warnings.push((
            source,
            format!("{e}; the archive's other members are still read"),
        ));
    }
    if !not_here.is_empty() {
        trace.warnings.push((
            source,
            format!(
                "{shown}: {} read only from a directory: extract the archive to read them",
                not_here.join(", ")
            ),
        ));
    }
    Ok(source)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn json_trace(name: &str, n: usize) -> Vec<u8> {
        let events: Vec<String> = (0..n)
            .map(|i| {
                format!(
                    r#"{{"ph":"X","cat":"cpu_op","name":"{name}","pid":1,"tid":1,"ts":{},"dur":5}}"#,
                    i * 10
                )
            })
            .collect();
        format!(r#"{{"traceEvents":[{}]}}"#, events.join(",")).into_bytes()
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    fn zip_of(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        for (name, bytes) in members {
            w.start_file(*name, options).unwrap();
            w.write_all(bytes).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    fn tar_of(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, bytes) in members {
            let mut header = tar::Header::new_ustar();
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            b.append_data(&mut header, name, *bytes).unwrap();
        }
        b.into_inner().unwrap()
    }

    /// The registry as these tests need it, without it: JSON members through Chrome's
    /// importer, archives through this module (the registry's dispatch is tested
    /// end to end by the command line's tests).
    struct JsonAndArchives;

    impl Dispatch for JsonAndArchives {
        fn import_bytes(
            &self,
            bytes: &[u8],
            shown: &str,
            trace: &mut Trace,
        ) -> Result<SourceId, ImportError> {
            let bytes = crate::input::decompress_if_gzip(bytes, shown)?;
            if is_zip(&bytes) || is_tar(&bytes) {
                import(&bytes, shown, trace, self)
            } else {
                crate::chrome::import(&bytes, shown, trace)
            }
        }

        fn is_a_copy(&self, _: &std::path::Path, _: &dyn Fn(&std::path::Path) -> bool) -> bool {
            false
        }

        fn claims(&self, _shown: &str, head: &[u8]) -> Option<&'static dyn Importer> {
            if is_zip(head) || is_tar(head) {
                Some(&ArchiveFormat)
            } else if crate::chrome::looks_like_json(head) {
                Some(&crate::chrome::ChromeFormat)
            } else {
                None
            }
        }
    }

    fn slices_of(bytes: &[u8], shown: &str) -> Result<(Trace, Vec<String>), ImportError> {
        let mut trace = Trace::new();
        JsonAndArchives.import_bytes(bytes, shown, &mut trace)?;
        trace.finish();
        let files = trace.sources.iter().map(|s| s.path.clone()).collect();
        Ok((trace, files))
    }

    /// A zip, a tar and a gzip'd tar of two traces (one gzip'd) and a note read as the
    /// two traces do apart, each member named inside its archive; an archive in an
    /// archive is read too.
    #[test]
    fn archives_read_as_their_members() {
        let a = json_trace("a", 30);
        let b = gzip(&json_trace("b", 20));
        let members: [(&str, &[u8]); 3] = [
            ("run/a.json", &a),
            ("run/b.json.gz", &b),
            ("README.txt", b"notes"),
        ];
        let zip = zip_of(&members);
        let tar = tar_of(&members);
        for (bytes, shown) in [
            (zip.clone(), "t.zip"),
            (tar.clone(), "t.tar"),
            (gzip(&tar), "t.tar.gz"),
        ] {
            let (trace, files) = slices_of(&bytes, shown).unwrap();
            assert_eq!(trace.slices.len(), 50, "{shown}");
            assert_eq!(
                files,
                [
                    format!("{shown}/run/a.json"),
                    format!("{shown}/run/b.json.gz")
                ],
                "{shown}"
            );
        }
        let outer = zip_of(&[("inner.zip", &zip)]);
        let (trace, files) = slices_of(&outer, "outer.zip").unwrap();
        assert_eq!(trace.slices.len(), 50);
        assert_eq!(files[0], "outer.zip/inner.zip/run/a.json");
    }

    /// A zip cut short (its directory gone) gives the members before the cut and says
    /// where it broke; a damaged member is named while the others are read; an archive
    /// of nothing opscope reads says so and names what wants extracting; archives
    /// nested deeper than the bound stop with a message.
    #[test]
    fn damaged_and_hostile_archives_say_what_they_lost() {
        let a = json_trace("a", 2000);
        let b = json_trace("b", 2000);
        let zip = zip_of(&[("a.json", &a), ("b.json", &b)]);
        // Cut where the directory begins: every member is whole, none is listed.
        let directory = zip.windows(4).position(|w| w == b"PK\x01\x02").unwrap();
        let cut = &zip[..directory];
        let (trace, files) = slices_of(cut, "cut.zip").unwrap();
        assert_eq!(files, ["cut.zip/a.json", "cut.zip/b.json"]);
        assert_eq!(trace.slices.len(), 4000);
        let half = &zip[..zip.len() / 2 + 40];
        let (trace, _) = slices_of(half, "half.zip").unwrap();
        assert_eq!(trace.slices.len(), 2000);
        assert!(
            trace.warnings.iter().any(|(_, w)| w.contains("half.zip/")),
            "{:?}",
            trace.warnings
        );

        let bad = zip_of(&[("a.json", &a), ("bad.json", b"{\"traceEvents\":[{\"ph\":")]);
        let (trace, _) = slices_of(&bad, "bad.zip").unwrap();
        assert_eq!(trace.slices.len(), 2000);
        assert!(trace
            .warnings
            .iter()
            .any(|(_, w)| w.starts_with("bad.zip/bad.json")));

        let ctf = tar_of(&[("trace/metadata", b"/* CTF 1.8 */"), ("notes.txt", b"x")]);
        let e = slices_of(&ctf, "ctf.tar").unwrap_err().to_string();
        assert!(
            e.contains("trace/metadata (a CTF trace's)") && e.contains("extract"),
            "{e}"
        );

        let mut nested = zip_of(&[("a.json", &a)]);
        for _ in 0..4 {
            nested = zip_of(&[("n.zip", &nested)]);
        }
        let e = slices_of(&nested, "deep.zip").unwrap_err().to_string();
        assert!(e.contains("inside 4 archives"), "{e}");

        assert!(read_bounded(&mut &[0u8; 100][..], 99).is_err());
        assert_eq!(read_bounded(&mut &[0u8; 100][..], 100).unwrap().len(), 100);
    }

    /// Archives with bytes changed here and there, cut anywhere, give an error or a
    /// trace, never a panic.
    #[test]
    fn mutated_archives_never_panic() {
        let a = json_trace("a", 200);
        let b = gzip(&json_trace("b", 100));
        let members: [(&str, &[u8]); 2] = [("a.json", &a), ("b.json.gz", &b)];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for archive in [zip_of(&members), tar_of(&members), gzip(&tar_of(&members))] {
            for round in 0..150 {
                let mut bytes = archive.clone();
                if round % 3 == 0 {
                    bytes.truncate(next() as usize % bytes.len());
                } else {
                    for _ in 0..1 + next() % 8 {
                        let at = next() as usize % bytes.len();
                        bytes[at] = next() as u8;
                    }
                }
                let _ = slices_of(&bytes, "mutated");
            }
        }
    }
}
