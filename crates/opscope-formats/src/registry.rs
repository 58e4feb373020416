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

/// One input, as the caller read it.
pub struct Input<'a> {
    /// The input itself: a file, or a directory for a format whose traces are
    /// directories.
    pub path: &'a Path,
    /// How the input is named in messages.
    pub shown: &'a str,
    /// The files [`Importer::files`] named, in that order: how each is named in
    /// messages, and its bytes (empty for an empty file).
    pub files: &'a [(String, &'a [u8])],
}

/// Imports the decompressed bytes of one file (`path` names it in messages) as a new
/// source.
pub type BytesImporter = fn(&[u8], &str, &mut Trace) -> Result<SourceId, ImportError>;

/// A format opscope reads.
pub trait Importer: Sync {
    /// The format's name, as its sources record it (`Source::format`).
    fn name(&self) -> &'static str;

    /// Whether a file of this name (lower case) is one of its inputs, when a directory
    /// is walked.
    fn claims_name(&self, _name: &str) -> bool {
        false
    }

    /// What a directory walk looks for, for messages (`.json, .json.gz`).
    fn looks_for(&self) -> &'static str;

    /// Whether a file found in a directory walk is a copy of one of this format's
    /// inputs beside it, and is left out so that nothing counts twice.
    fn has_a_copy_in(&self, _path: &Path) -> bool {
        false
    }

    /// Whether a directory is one of its inputs.
    fn claims_dir(&self, _dir: &Path) -> bool {
        false
    }

    /// Whether a file named `path`, whose first (decompressed) bytes are `head`, is one
    /// of its inputs.
    fn claims_bytes(&self, _path: &str, _head: &[u8]) -> bool {
        false
    }

    /// The files one input at `path` is made of, in the order [`Input::files`] holds
    /// them: what the caller reads, and what a saved model is checked against.
    fn files(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        Ok(vec![path.to_path_buf()])
    }

    /// Whether it opens its files itself (SQLite does), so that the caller reads none
    /// of them and [`Input::files`] is empty.
    fn opens_files_itself(&self) -> bool {
        false
    }

    /// How it imports the decompressed bytes of one file, for a format that one buffer
    /// can hold (`None` otherwise).
    fn bytes_importer(&self) -> Option<BytesImporter> {
        None
    }

    /// Imports one input as a new source of `trace`; by default its one file, through
    /// [`crate::import_bytes`] (gzip'd or not).
    fn import(&self, input: &Input, trace: &mut Trace) -> Result<SourceId, ImportError> {
        let bytes = input.files.first().map_or(&[][..], |f| f.1);
        crate::input::import_bytes(bytes, input.shown, trace)
    }
}

/// Every format, in the order they are asked: formats known by their path before those
/// known by their bytes (XSpace, RunMetadata and Perfetto files all open with a
/// length-delimited field 1).
pub static IMPORTERS: &[&dyn Importer] = &[
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
pub fn is_a_copy(path: &Path) -> bool {
    IMPORTERS.iter().any(|i| i.has_a_copy_in(path))
}

/// Whether some format reads files of this name, when a directory is walked.
pub fn claims_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    IMPORTERS.iter().any(|i| i.claims_name(&lower))
}

/// The importer of the input at `path` (a directory, or a file whose first bytes are
/// read, inflated when gzip'd).
pub fn for_path(path: &Path) -> io::Result<Option<&'static dyn Importer>> {
    if path.is_dir() {
        return Ok(for_dir(path));
    }
    let head = crate::input::head_of_file(path)?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
            let source = importer.import(&input, &mut trace).unwrap();
            assert_eq!(trace.sources[source.index()].format, want, "{relative}");
            assert!(trace.slices.len() + trace.instants.len() > 0, "{relative}");
        }
    }
}
