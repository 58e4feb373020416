//! Every format opscope reads, in one registry ([`IMPORTERS`]): how each knows its
//! inputs (a file's name, its first bytes, or a directory), which files one input is
//! made of, and how it imports them into a [`Trace`]. The CLI walks directories, maps
//! the files an importer names, shows progress and caches models, and asks this
//! module everything about formats. A new format is a module with an [`Importer`] and
//! one line in [`IMPORTERS`].

use std::io;
use std::path::{Path, PathBuf};

use opscope_model::{SourceId, Trace};

use crate::error::ImportError;
pub use crate::importer::{BytesImporter, Dispatch, Importer, Input};
use crate::input;

/// Every format, in the order they are asked: containers first (gzip'd bytes are
/// inflated before any format reads them, whatever the file's name), then formats
/// known by their path before those known by their bytes (XSpace, RunMetadata and
/// Perfetto files all open with a length-delimited field 1).
pub static IMPORTERS: &[&dyn Importer] = &[
    &crate::gzip::GzipFormat,
    &crate::archive::ArchiveFormat,
    #[cfg(feature = "parquet")]
    &crate::parquet::ParquetFormat,
    &crate::ctf::CtfFormat,
    #[cfg(feature = "nsys")]
    &crate::nsys::NsysFormat,
    &crate::xplane::XPlaneFormat,
    &crate::run_metadata::RunMetadataFormat,
    &crate::perfetto::PerfettoFormat,
    &crate::chrome::ChromeFormat,
];

/// The importer of a directory, if one reads it.
pub fn for_dir(dir: &Path) -> Option<&'static dyn Importer> {
    IMPORTERS.iter().copied().find(|i| i.claims_dir(dir))
}

/// The importer of a file named `path` whose first (decompressed) bytes are `head`.
pub fn for_bytes(path: &str, head: &[u8]) -> Option<&'static dyn Importer> {
    IMPORTERS
        .iter()
        .copied()
        .find(|i| i.claims_bytes(path, head))
}

/// What a directory walk looks for, every format's, for messages.
pub fn looked_for() -> String {
    let all: Vec<&str> = IMPORTERS
        .iter()
        .map(|i| i.looks_for())
        .filter(|l| !l.is_empty())
        .collect();
    all.join(", ")
}

/// Whether a file found in a directory walk copies an input of some format beside it.
pub fn is_a_copy(path: &Path, exists: &dyn Fn(&Path) -> bool) -> bool {
    IMPORTERS.iter().any(|i| i.has_a_copy_in(path, exists))
}

/// Whether some format reads files of this name, when a directory is walked.
pub fn claims_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    IMPORTERS.iter().any(|i| i.claims_name(&lower))
}

/// The importer of the input at `path` (a directory, or a file whose first bytes are
/// read, inflated when gzip'd: the format of what the gzip container holds).
pub fn for_path(path: &Path) -> io::Result<Option<&'static dyn Importer>> {
    if path.is_dir() {
        return Ok(for_dir(path));
    }
    let head = input::head_of_file(path)?;
    Ok(for_bytes(&path.to_string_lossy(), &head))
}

/// The files one input at `path` is made of (the input alone when no format reads it).
pub fn files_of(path: &Path) -> Vec<PathBuf> {
    match for_path(path) {
        Ok(Some(importer)) => importer
            .files(path)
            .unwrap_or_else(|_| vec![path.to_path_buf()]),
        _ => vec![path.to_path_buf()],
    }
}

/// How the plain file `file` (open at its start) is read with `read` as it goes, where
/// the format its first bytes (as read, not inflated) say reads files so
/// ([`Importer::file_importer`]); `None`: it is mapped and imported through [`import`].
/// `shown` names it, as in [`import_bytes`], which this agrees with on the format. The
/// file is left at its start.
pub fn file_importer(
    file: &mut std::fs::File,
    shown: &str,
) -> io::Result<Option<crate::importer::FileImporter>> {
    use std::io::Seek;
    let head = input::raw_head(file)?;
    file.rewind()?;
    if crate::perfetto::looks_like_packets(&head) {
        return Ok(None);
    }
    Ok(for_bytes(shown, &head).and_then(|importer| importer.file_importer()))
}

/// Imports one input through `importer`: its own import where it has one, else the
/// input's one file through the format its bytes say (gzip'd ones through the gzip
/// container).
pub fn import(
    importer: &dyn Importer,
    input: &Input,
    trace: &mut Trace,
) -> Result<SourceId, ImportError> {
    if let Some(own) = importer.import(input, trace) {
        return own;
    }
    let bytes = input.files.first().map_or(&[][..], |f| f.1);
    import_bytes(bytes, input.shown, trace)
}

/// SQLite's first bytes (an Nsight Systems export).
const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";

/// Imports `bytes` read from `path` into `trace` through the format that claims them
/// (a container, gzip or an archive, dispatching again to what it holds) and finishes
/// it.
pub fn import_bytes(bytes: &[u8], path: &str, trace: &mut Trace) -> Result<SourceId, ImportError> {
    // An XPlane is known by its name; without one, by its planes.
    if crate::perfetto::looks_like_packets(bytes) && crate::xplane::looks_like_xspace(bytes) {
        return crate::xplane::import(bytes, path, trace);
    }
    if let Some(importer) = for_bytes(path, bytes) {
        if let Some(open) = importer.container() {
            return open(bytes, path, trace, &Registry);
        }
        if let Some(import) = importer.bytes_importer() {
            return import(bytes, path, trace);
        }
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

/// The registry, as a container's importer reads its members through it.
struct Registry;

impl Dispatch for Registry {
    fn import_bytes(
        &self,
        bytes: &[u8],
        shown: &str,
        trace: &mut Trace,
    ) -> Result<SourceId, ImportError> {
        import_bytes(bytes, shown, trace)
    }

    fn claims(&self, shown: &str, head: &[u8]) -> Option<&'static dyn Importer> {
        for_bytes(shown, head)
    }

    fn is_a_copy(&self, member: &Path, exists: &dyn Fn(&Path) -> bool) -> bool {
        is_a_copy(member, exists)
    }
}

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

    /// Gzip is a container that dispatches again: gzip'd gzip (a `.json.gz` gzip'd
    /// once more on its way into a ticket) reads as the JSON it holds (before: "neither
    /// JSON nor a Perfetto protobuf"), a Perfetto trace inside reads as Perfetto, and a
    /// gzip that goes on inflating into gzip stops at a bound (a gzip quine inflates to
    /// itself).
    #[test]
    fn gzip_dispatches_again_to_what_it_holds_to_a_bound() {
        let json = json_trace(100);
        let mut plain = Trace::new();
        import_bytes(&json, "t.json", &mut plain).unwrap();
        let twice = gzip(&gzip(&json));
        let mut trace = Trace::new();
        let source = import_bytes(&twice, "t.json.gz.gz", &mut trace).unwrap();
        assert_eq!(trace.sources[source.index()].format, "chrome-json");
        assert_eq!(trace.slices.len(), plain.slices.len());
        assert_eq!(trace.slices.len(), 100);

        let mut pftrace = Vec::new();
        crate::perfetto::export(&plain, &mut pftrace).unwrap();
        let mut back = Trace::new();
        let source = import_bytes(&gzip(&pftrace), "t.pftrace.gz", &mut back).unwrap();
        assert_eq!(back.sources[source.index()].format, "perfetto");
        assert_eq!(back.slices.len(), 100);

        let mut deep = json;
        for _ in 0..5 {
            deep = gzip(&deep);
        }
        let e = error_of(&deep, "t.gz");
        assert!(
            e.contains("gzip data inside 4 layers of gzip: not read"),
            "{e}"
        );
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

    fn name_of(importer: Option<&dyn Importer>) -> Option<&'static str> {
        importer.map(|i| i.name())
    }

    /// What a directory walk reads, and which format reads a file, by name and bytes.
    #[test]
    fn each_input_goes_to_its_format() {
        let by_name = |name: &str| {
            IMPORTERS
                .iter()
                .filter(|i| i.claims_name(name))
                .map(|i| i.name())
                .collect::<Vec<_>>()
        };
        assert_eq!(by_name("rank0.json"), ["chrome-json"]);
        assert_eq!(by_name("rank0.pt.trace.json.gz"), ["chrome-json"]);
        assert_eq!(by_name("t.pftrace"), ["perfetto"]);
        assert_eq!(by_name("host.xplane.pb"), ["xplane"]);
        assert_eq!(by_name("run_meta"), ["tf-run-metadata"]);
        assert_eq!(by_name("report.sqlite"), ["nsys-sqlite"]);
        assert!(by_name("notes.txt").is_empty());
        assert!(!claims_name("graph.pbtxt"));
        // XSpace, RunMetadata and Perfetto open alike: the name decides.
        let protobuf = [0x0a, 0x05, 0x08, 0x01, 0x10, 0x02];
        assert_eq!(
            name_of(for_bytes("host.xplane.pb", &protobuf)),
            Some("xplane")
        );
        assert_eq!(
            name_of(for_bytes("run_meta", &protobuf)),
            Some("tf-run-metadata")
        );
        assert_eq!(name_of(for_bytes("t.pftrace", &protobuf)), Some("perfetto"));
        assert_eq!(name_of(for_bytes("t.bin", &protobuf)), Some("perfetto"));
        assert_eq!(
            name_of(for_bytes("t", b"  {\"traceEvents\": []}")),
            Some("chrome-json")
        );
        assert_eq!(name_of(for_bytes("t", b"hello")), None);
    }

    /// One real trace of each format: the registry picks the format whose importer
    /// then records its name on the source it adds.
    #[test]
    fn real_traces_are_imported_by_the_format_that_claims_them() {
        let Some(shared) = crate::shared_data::shared() else {
            return;
        };
        let traces = shared.join("traces");
        let mut inputs = vec![
            (
                "kineto/hta/nccl_parser_config/nccl_data.json.gz",
                "chrome-json",
            ),
            (
                "tf-timeline/generated-here/tf2.21-cpu-mlp/run_meta",
                "tf-run-metadata",
            ),
            ("ctf/tracecompass/cyg-profile/glxgears-cyg-profile", "ctf"),
        ];
        if cfg!(feature = "nsys") {
            inputs.push((
                "nsys-sqlite/saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
                "nsys-sqlite",
            ));
        }
        let xplane = std::fs::read_dir(traces.join("xplane/GPU-multi-worker"))
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.to_string_lossy().ends_with(".xplane.pb"));
        let xplane = xplane.map(|p| p.strip_prefix(&traces).unwrap().display().to_string());
        if let Some(x) = &xplane {
            inputs.push((x.as_str(), "xplane"));
        }
        assert!(xplane.is_some(), "an XPlane in the corpus");
        for (relative, want) in inputs {
            let path = traces.join(relative);
            let importer = for_path(&path)
                .unwrap()
                .unwrap_or_else(|| panic!("{relative}"));
            assert_eq!(importer.name(), want, "{relative}");
            let names = if importer.opens_files_itself() {
                Vec::new()
            } else {
                importer.files(&path).unwrap()
            };
            let contents: Vec<Vec<u8>> = names.iter().map(|n| std::fs::read(n).unwrap()).collect();
            let files: Vec<(String, &[u8])> = names
                .iter()
                .zip(&contents)
                .map(|(n, b)| (n.display().to_string(), &b[..]))
                .collect();
            let shown = path.display().to_string();
            let input = Input {
                path: &path,
                shown: &shown,
                files: &files,
            };
            let mut trace = Trace::new();
            let source = import(importer, &input, &mut trace).unwrap();
            assert_eq!(trace.sources[source.index()].format, want, "{relative}");
            assert!(trace.slices.len() + trace.instants.len() > 0, "{relative}");
        }
    }
}
