//! Finding the inputs of a command: a TRACE argument is a file, a directory (walked
//! for trace files, each read once, no link out of it followed), a CTF trace
//! directory, or a pipe (`-` is standard input).

use std::path::{Path, PathBuf};

use opscope_formats::registry;

use super::{io, refuse, warn, LoadError};

/// Whether some format reads files of this name, when a directory is walked.
fn is_trace_file(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| registry::claims_name(&n.to_string_lossy()))
}

/// The directory of a session where opscope keeps its own files.
pub const OWN_NOTES: &str = ".opscope";

/// One input to read, as [`expand`] found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The file, the CTF trace directory, or `-` for standard input.
    pub path: PathBuf,
    pub how: How,
}

/// How an input was reached, which decides what an error in it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    /// Named on the command line: an error in it stops the command.
    Named,
    /// Found by walking a directory: an error in it is a warning and the other files
    /// are still read, so one damaged file (a full disk while recording) does not
    /// hide the rest.
    InDirectory,
    /// A pipe, a FIFO or `-` (standard input): read into memory as a stream, never
    /// cached. An error in it stops the command.
    Stream,
}

/// A file's identity: two paths (links, `..`) to one file are one input.
type FileId = (u64, u64);

fn file_id(meta: &std::fs::Metadata) -> FileId {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

/// What kind of file `meta` describes, for messages about files opscope cannot read.
fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// Expands the TRACE arguments into the inputs to load, in a stable order. A CTF trace
/// is listed as its directory. Each file is read once, however many paths lead to it
/// (checked by device and inode); links that leave the directory given are not
/// followed. What is skipped is told on stderr.
pub fn expand(inputs: &[PathBuf]) -> Result<Vec<Found>, LoadError> {
    use std::os::unix::fs::FileTypeExt;
    let mut files = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for input in inputs {
        if input.as_os_str() == "-" {
            files.push(Found {
                path: input.clone(),
                how: How::Stream,
            });
            continue;
        }
        let meta = std::fs::metadata(input).map_err(io(input.display(), "cannot open"))?;
        if meta.is_dir() {
            let mut walker = Walker::new(input, &mut seen)?;
            walker.run()?;
            let mut found = walker.found;
            if found.is_empty() {
                refuse!(
                    "{}: no trace files in this directory (looked for {})",
                    input.display(),
                    registry::looked_for()
                );
            }
            found.sort();
            files.extend(found.into_iter().map(|path| Found {
                // A directory that is itself a CTF trace was named, not found.
                how: if &path == input {
                    How::Named
                } else {
                    How::InDirectory
                },
                path,
            }));
        } else if input.file_name().is_some_and(|n| n == "metadata") {
            // `TRACE/metadata` stands for the CTF trace `TRACE`.
            let dir = input.parent().unwrap_or(Path::new(".")).to_path_buf();
            let id = std::fs::metadata(&dir).map(|m| file_id(&m)).ok();
            if id.is_none_or(|id| seen.insert(id)) {
                files.push(Found {
                    path: dir,
                    how: How::Named,
                });
            }
        } else if meta.is_file() {
            if seen.insert(file_id(&meta)) {
                files.push(Found {
                    path: input.clone(),
                    how: How::Named,
                });
            } else {
                warn(&format!(
                    "{}: the same file as an input before it; read once",
                    input.display()
                ));
            }
        } else if meta.file_type().is_fifo() {
            files.push(Found {
                path: input.clone(),
                how: How::Stream,
            });
        } else {
            refuse!(
                "{}: not a regular file ({}); opscope reads trace files, directories of them, and pipes (`-` is standard input)",
                input.display(),
                kind_of(&meta)
            );
        }
    }
    Ok(files)
}

/// Walks one directory given on the command line. Its own files and directories come
/// first; symbolic links are followed afterwards, and only to what lies inside the
/// directory and was not reached already, so a link cycle (`ln -s . d/a`), a link up
/// (`ln -s .. d/up`) or a second name (`latest -> run1`) neither hangs the walk nor
/// reads a file twice, and the files keep their own paths rather than a link's.
struct Walker<'s> {
    root: PathBuf,
    /// The root with every link resolved: what links must lead into.
    real_root: PathBuf,
    dirs: std::collections::HashSet<FileId>,
    /// Files (and CTF directories) taken, over all TRACE arguments.
    seen: &'s mut std::collections::HashSet<FileId>,
    links: std::collections::VecDeque<PathBuf>,
    found: Vec<PathBuf>,
    /// Parquet datasets found below the root: a copy of traces (`convert ranks/ -o
    /// ranks/job.parquet`), read only when the walk finds nothing else.
    datasets: Vec<PathBuf>,
}

impl<'s> Walker<'s> {
    fn new(
        root: &Path,
        seen: &'s mut std::collections::HashSet<FileId>,
    ) -> Result<Walker<'s>, LoadError> {
        let real_root = std::fs::canonicalize(root).map_err(io(root.display(), "cannot open"))?;
        Ok(Walker {
            root: root.to_path_buf(),
            real_root,
            dirs: Default::default(),
            seen,
            links: Default::default(),
            found: Vec::new(),
            datasets: Vec::new(),
        })
    }

    fn run(&mut self) -> Result<(), LoadError> {
        let root = self.root.clone();
        let meta = std::fs::metadata(&root).map_err(io(root.display(), "cannot open"))?;
        // The root must be listed; a subdirectory that cannot be is only a warning.
        std::fs::read_dir(&root).map_err(io(root.display(), "cannot list"))?;
        self.dir(&root, &meta);
        while let Some(link) = self.links.pop_front() {
            self.link(&link);
        }
        if self.found.is_empty() {
            self.found = std::mem::take(&mut self.datasets);
        }
        for dataset in &self.datasets {
            warn(&format!(
                "{}: a Parquet dataset beside the traces (a copy of some of them?); skipped \
                 so that nothing counts twice (name it to read it)",
                dataset.display()
            ));
        }
        Ok(())
    }

    fn dir(&mut self, dir: &Path, meta: &std::fs::Metadata) {
        if !self.dirs.insert(file_id(meta)) {
            return;
        }
        if let Some(importer) = registry::for_dir(dir) {
            if self.seen.insert(file_id(meta)) {
                if importer.name() == "parquet" && dir != self.root {
                    self.datasets.push(dir.to_path_buf());
                } else {
                    self.found.push(dir.to_path_buf());
                }
            }
            return;
        }
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) => return warn(&format!("{}: cannot list ({e}); skipped", dir.display())),
        };
        let mut entries: Vec<(PathBuf, std::fs::FileType)> = entries
            .filter_map(|e| {
                let e = e.ok()?;
                Some((e.path(), e.file_type().ok()?))
            })
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (path, file_type) in entries {
            if file_type.is_symlink() {
                self.links.push_back(path);
            } else if file_type.is_dir() {
                // opscope's own notes in a session (its Python bootstrap, what the
                // program's profilers took over, a dump's description): never traces.
                if path.file_name().is_some_and(|n| n == OWN_NOTES) {
                    continue;
                }
                if let Ok(meta) = std::fs::metadata(&path) {
                    self.dir(&path, &meta);
                }
            } else if is_trace_file(&path) && !is_a_copy(&path) {
                if let Ok(meta) = std::fs::metadata(&path) {
                    self.file(&path, &meta);
                }
            }
        }
    }

    fn file(&mut self, path: &Path, meta: &std::fs::Metadata) {
        if !meta.is_file() {
            // A FIFO or device named like a trace would block or never end.
            warn(&format!(
                "{}: not a regular file ({}); skipped",
                path.display(),
                kind_of(meta)
            ));
        } else if self.seen.insert(file_id(meta)) {
            self.found.push(path.to_path_buf());
        }
    }

    fn link(&mut self, link: &Path) {
        let wanted = |meta: Option<&std::fs::Metadata>| {
            meta.is_some_and(|m| m.is_dir()) || is_trace_file(link)
        };
        let Ok(real) = std::fs::canonicalize(link) else {
            if is_trace_file(link) {
                warn(&format!("{}: a broken link; skipped", link.display()));
            }
            return;
        };
        let meta = std::fs::metadata(&real).ok();
        // A link to a file elsewhere is read (once, by its inode: a directory of links
        // to each rank's file is a common layout); a link to a directory elsewhere
        // could lead anywhere, up to the whole disk, and is not followed.
        let is_dir = meta.as_ref().is_some_and(|m| m.is_dir());
        if is_dir && !real.starts_with(&self.real_root) {
            if wanted(meta.as_ref()) {
                warn(&format!(
                    "{}: not followed: the link leads to {}, outside {} (name it on the command line to read it)",
                    link.display(),
                    real.display(),
                    self.root.display()
                ));
            }
            return;
        }
        match meta {
            Some(meta) if meta.is_dir() => self.dir(link, &meta),
            Some(meta) if is_trace_file(link) && !is_a_copy(link) => self.file(link, &meta),
            _ => {}
        }
    }
}

/// A file beside the input it copies (the JAX and TensorFlow profilers write
/// `<host>.trace.json.gz` beside `<host>.xplane.pb`): in a directory only the input is
/// read, so nothing counts twice (named on the command line, the copy is read).
fn is_a_copy(path: &Path) -> bool {
    registry::is_a_copy(path, &|p| p.is_file())
}
