//! What a format opscope reads implements ([`Importer`]), what an import is given
//! ([`Input`]), and how a container of traces reads its members ([`Dispatch`]). The
//! registry lists the importers and dispatches to them; the importers name only this.

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

/// Imports one file's decompressed bytes from a stream, for a format that reads as it
/// goes (`path` names it in messages).
pub type ReaderImporter =
    fn(&mut (dyn io::Read + Send), &str, &mut Trace) -> Result<SourceId, ImportError>;

/// Imports one plain (not compressed) file, read with `read` as it goes (`path` names
/// it in messages), for a format that does better so than from a mapping.
pub type FileImporter = fn(std::fs::File, &str, &mut Trace) -> Result<SourceId, ImportError>;

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

    /// Whether a file found in a directory walk (or an archive) is a copy of one of
    /// this format's inputs beside it, and is left out so that nothing counts twice;
    /// `exists` says whether a file is there (on disk, or among the archive's members).
    fn has_a_copy_in(&self, _path: &Path, _exists: &dyn Fn(&Path) -> bool) -> bool {
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

    /// How it reads one file's bytes from a stream (a gzip'd file as it is inflated),
    /// for a format that reads as it goes; `None`: the stream is read whole first.
    fn reader_importer(&self) -> Option<ReaderImporter> {
        None
    }

    /// How it reads one plain file whose first bytes it claims, with `read` rather than
    /// from the caller's mapping of it; `None`: mapped. A mapping's pages count in the
    /// process's memory and cost page faults and an unmapping: for a format read once
    /// front to back, `read` into a few reused buffers is cheaper (Chrome JSON).
    fn file_importer(&self) -> Option<FileImporter> {
        None
    }

    /// Its own import of one input as a new source of `trace`, for a format that one
    /// file's bytes are not enough for (a directory, files beside it, a database SQLite
    /// opens); `None`: the registry imports the input's one file through
    /// [`Importer::bytes_importer`] (gzip'd through the gzip container).
    fn import(&self, _input: &Input, _trace: &mut Trace) -> Option<Result<SourceId, ImportError>> {
        None
    }

    /// How it reads a container of other traces (an archive), which it is handed the
    /// registry to read them through; `None` for a trace format.
    fn container(&self) -> Option<ContainerImporter> {
        None
    }
}

/// What a container's importer reads its members through: the registry, handed to it
/// so that it need not name the registry that lists it.
pub trait Dispatch {
    /// Imports one member's bytes (gzip'd or not) through the format that claims them.
    fn import_bytes(
        &self,
        bytes: &[u8],
        shown: &str,
        trace: &mut Trace,
    ) -> Result<SourceId, ImportError>;
    /// The format that claims a member of this name and first (inflated) bytes.
    fn claims(&self, shown: &str, head: &[u8]) -> Option<&'static dyn Importer>;
    /// Whether a member copies another beside it (`exists`: whether the archive holds
    /// a member of that name), as a directory walk leaves such files out.
    fn is_a_copy(&self, member: &Path, exists: &dyn Fn(&Path) -> bool) -> bool;
}

/// Imports the bytes of a container (`shown` names it), each member through `dispatch`.
pub type ContainerImporter =
    fn(&[u8], &str, &mut Trace, &dyn Dispatch) -> Result<SourceId, ImportError>;

/// How deep a container's contents are, for containers that may hold themselves (an
/// archive inside itself, a gzip quine): each kind keeps its own count per thread.
pub struct Nesting {
    depth: std::cell::Cell<u32>,
    /// Levels read at most.
    max: u32,
    /// What is said past them (`an archive inside 4 archives`).
    refusal: fn(u32) -> String,
}

impl Nesting {
    pub const fn new(max: u32, refusal: fn(u32) -> String) -> Nesting {
        Nesting {
            depth: std::cell::Cell::new(0),
            max,
            refusal,
        }
    }

    /// Runs `read` one level deeper; past the last level, the refusal for `shown`.
    pub fn deeper<T>(
        &self,
        shown: &str,
        read: impl FnOnce() -> Result<T, ImportError>,
    ) -> Result<T, ImportError> {
        let depth = self.depth.get();
        if depth >= self.max {
            return Err(ImportError::UnknownFormat {
                path: shown.to_string(),
                message: (self.refusal)(self.max),
            });
        }
        self.depth.set(depth + 1);
        let read = read();
        self.depth.set(depth);
        read
    }
}
