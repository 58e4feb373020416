//! Reading one input's bytes and importing them: files are memory-mapped (and named
//! for the SIGBUS handler while they are), pipes and FIFOs read into memory after
//! their first bytes show a trace, and each goes through the format that claims it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use opscope_formats::registry;
use opscope_model::Trace;

use super::walk::{Found, How};
use super::{cut_files, io, refuse, LoadError};

/// How an input is named in messages.
pub(super) fn shown(path: &Path) -> String {
    if path.as_os_str() == "-" {
        "standard input".into()
    } else {
        path.display().to_string()
    }
}

/// The files importing `input` reads: a CTF trace's metadata and stream files, a
/// RunMetadata and the GraphDef beside it, an SQLite database and its write-ahead log
/// (which SQLite reads, when there is one), or the file alone (as its format says).
pub fn files_read(input: &Path) -> Vec<PathBuf> {
    registry::files_of(input)
}

/// Bytes of a trace file, or of the files of a trace directory.
pub(super) fn input_bytes(path: &Path) -> u64 {
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    if path.is_dir() {
        registry::files_of(path).iter().map(|f| size(f)).sum()
    } else {
        size(path)
    }
}

/// A mapped input, named for the SIGBUS handler while it is mapped.
struct Mapped {
    // Dropped first: unnamed before it is unmapped.
    _named: cut_files::Registered,
    map: memmap2::Mmap,
}

impl std::ops::Deref for Mapped {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.map
    }
}

fn map_file(file: &Path, shown: &str) -> Result<Option<Mapped>, LoadError> {
    let handle = File::open(file).map_err(io(shown, "cannot open"))?;
    if handle.metadata().map(|m| m.len()).unwrap_or(0) == 0 {
        return Ok(None);
    }
    // SAFETY: the map is read-only and lives only while its input is imported; a trace
    // file truncated by another process meanwhile faults (SIGBUS), which the executable
    // reports naming the file and the byte (`cut_files`). It is the risk every
    // mmap-based reader (ripgrep, samply) takes for speed on multi-GB inputs.
    let map = unsafe { memmap2::Mmap::map(&handle) }.map_err(io(shown, "cannot map"))?;
    let named = cut_files::register(&map, shown);
    Ok(Some(Mapped { _named: named, map }))
}

pub(super) fn load_file(file: &Found, shown: &str, trace: &mut Trace) -> Result<(), LoadError> {
    let path = &file.path;
    if file.how == How::Stream {
        let bytes = match read_stream(path, shown)? {
            Stream::Read(bytes) => bytes,
            Stream::Reading(import, head, reader) => {
                let mut stream = std::io::Read::chain(std::io::Cursor::new(head), reader);
                import(&mut stream, shown, trace)?;
                return Ok(());
            }
        };
        opscope_formats::import_bytes(&bytes, shown, trace)
            .map_err(|e| explained(e, &[(shown.to_string(), &bytes)]))?;
        return Ok(());
    }
    if !path.is_dir() && std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) == 0 {
        File::open(path).map_err(io(shown, "cannot open"))?;
        refuse!("{shown}: the file is empty (0 bytes)");
    }
    if !path.is_dir() {
        if let Some((file, import)) = opened_for_its_format(path, shown)? {
            import(file, shown, trace)?;
            return Ok(());
        }
    }
    let importer = registry::for_path(path).map_err(io(shown, "cannot open"))?;
    let Some(importer) = importer else {
        // No format claims it: the one entry point says what it is not.
        let map = map_file(path, shown)?;
        let bytes = map.as_deref().unwrap_or(&[]);
        opscope_formats::import_bytes(bytes, shown, trace)
            .map_err(|e| explained(e, &[(shown.to_string(), bytes)]))?;
        return Ok(());
    };
    let names = if importer.opens_files_itself() {
        Vec::new()
    } else {
        importer
            .files(path)
            .map_err(io(shown, "cannot list the files it is made of"))?
    };
    let mut maps = Vec::with_capacity(names.len());
    for name in &names {
        // The input's own file keeps the name it was given.
        let file_shown = if name == path {
            shown.to_string()
        } else {
            name.display().to_string()
        };
        let map = map_file(name, &file_shown)?;
        maps.push((file_shown, map));
    }
    let files: Vec<(String, &[u8])> = maps
        .iter()
        .map(|(name, map)| (name.clone(), map.as_deref().unwrap_or(&[])))
        .collect();
    let input = registry::Input {
        path,
        shown,
        files: &files,
    };
    registry::import(importer, &input, trace).map_err(|e| explained(e, &files))?;
    Ok(())
}

/// The file, open at its start, with its format's importer that reads it with `read`
/// rather than from a mapping, when its format does so (Chrome JSON); `None`: mapped.
fn opened_for_its_format(
    path: &Path,
    shown: &str,
) -> Result<Option<(File, opscope_formats::importer::FileImporter)>, LoadError> {
    let mut file = File::open(path).map_err(io(shown, "cannot open"))?;
    let import = registry::file_importer(&mut file, shown).map_err(io(shown, "cannot read"))?;
    Ok(import.map(|import| (file, import)))
}

/// An import's error, or what it comes of where it is plain: a file that went through
/// a text conversion fails at some varint or length, which says nothing of why.
fn explained(e: opscope_formats::ImportError, files: &[(String, &[u8])]) -> LoadError {
    match files
        .iter()
        .find(|(_, bytes)| opscope_formats::input::mangled_by_text_conversion(bytes))
    {
        Some((name, _)) => {
            LoadError::Refused(format!("{name}: {}", opscope_formats::input::MANGLED))
        }
        None => e.into(),
    }
}

/// How long a named FIFO may stay without a writer before reading it is given up.
const FIFO_WAIT: Duration = Duration::from_secs(10);

/// A pipe's trace: read to its end, or being read by a format that reads as it goes.
enum Stream {
    Read(Vec<u8>),
    /// The format's importer, the first bytes read, and the rest.
    Reading(
        opscope_formats::importer::ReaderImporter,
        Vec<u8>,
        Box<dyn std::io::Read + Send>,
    ),
}

/// Opens a pipe, a FIFO or standard input (`-`). Its first bytes must look like a
/// trace, so an endless stream of something else (`/dev/urandom` through `cat`) is
/// refused at once rather than read until memory runs out. A format that reads as it
/// goes (Chrome JSON) is handed the stream, so that the text is never held whole and a
/// viewer can draw what has come; others' streams are read to their end. A named FIFO
/// that no writer opens within [`FIFO_WAIT`] is an error, not a hang.
fn read_stream(path: &Path, shown: &str) -> Result<Stream, LoadError> {
    use std::io::{IsTerminal, Read};
    let mut reader: Box<dyn Read + Send> = if path.as_os_str() == "-" {
        let stdin = std::io::stdin();
        if stdin.is_terminal() {
            refuse!("{shown}: is a terminal; pipe a trace into it (`opscope info - < trace.json`)");
        }
        Box::new(std::io::stdin())
    } else {
        Box::new(open_fifo(path, shown)?)
    };
    let read_error = |e: std::io::Error| LoadError::Refused(format!("{shown}: cannot read ({e})"));
    let mut bytes = Vec::new();
    (&mut reader)
        .take(4096)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.is_empty() {
        refuse!("{shown}: nothing came in (0 bytes)");
    }
    // Whatever a format claims by its first bytes (gzip as a container; XPlane's
    // planes are told later).
    let Some(format) = opscope_formats::registry::for_bytes(shown, &bytes) else {
        refuse!(
            "{shown}: not a trace opscope can read (neither JSON nor a Perfetto protobuf, from byte 0); from a pipe, opscope reads JSON, gzip'd JSON, Perfetto, XPlane and Nsight Systems exports"
        );
    };
    if format.container().is_none() {
        if let Some(import) = format.reader_importer() {
            return Ok(Stream::Reading(import, bytes, reader));
        }
    }
    reader.read_to_end(&mut bytes).map_err(read_error)?;
    Ok(Stream::Read(bytes))
}

/// Opens a FIFO (or a pipe, as `/dev/fd/N`) for reading without blocking in `open`
/// when it has no writer, then waits for its first data: for as long as it takes on
/// an anonymous pipe (whose writer exists, or its end has come), for [`FIFO_WAIT`] on
/// a named FIFO.
fn open_fifo(path: &Path, shown: &str) -> Result<File, LoadError> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io(shown, "cannot open"))?;
    let fd = file.as_raw_fd();
    const PIPEFS_MAGIC: libc::c_long = 0x5049_5045;
    // SAFETY: `fd` is open for the whole call and `fs` is a plain struct the kernel
    // fills in.
    let anonymous = unsafe {
        let mut fs: libc::statfs = std::mem::zeroed();
        libc::fstatfs(fd, &mut fs) == 0 && fs.f_type as libc::c_long == PIPEFS_MAGIC
    };
    let timeout = if anonymous {
        -1
    } else {
        FIFO_WAIT.as_millis() as libc::c_int
    };
    let mut poll = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd, alive for the duration of the call.
        let ready = unsafe { libc::poll(&mut poll, 1, timeout) };
        if ready > 0 {
            break;
        }
        if ready == 0 {
            refuse!(
                "{shown}: a FIFO that nothing came through in {} s (no writer?)",
                FIFO_WAIT.as_secs()
            );
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            refuse!("{shown}: cannot wait for data ({e})");
        }
    }
    // Blocking reads from here: the writer is there.
    // SAFETY: fcntl on an open descriptor, changing only its status flags.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) < 0 {
            refuse!("{shown}: cannot read ({})", std::io::Error::last_os_error());
        }
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_an_import_reads_cover_graphs_and_ctf_streams() {
        let dir = std::env::temp_dir().join(format!("opscope-files-read-{}", std::process::id()));
        let ctf = dir.join("ctf");
        std::fs::create_dir_all(ctf.join("index")).unwrap();
        std::fs::write(dir.join("db.sqlite"), b"SQLite format 3\0 and pages").unwrap();
        for name in [
            "run_meta",
            "graph.pbtxt",
            "notes.txt",
            "ctf/metadata",
            "ctf/chan_0",
        ] {
            std::fs::write(dir.join(name), b"x").unwrap();
        }
        // A RunMetadata's types come from the GraphDef beside it: a changed graph must
        // be a changed input.
        assert_eq!(
            files_read(&dir.join("run_meta")),
            [dir.join("run_meta"), dir.join("graph.pbtxt")]
        );
        assert_eq!(files_read(&dir.join("notes.txt")), [dir.join("notes.txt")]);
        assert_eq!(files_read(&ctf), [ctf.join("metadata"), ctf.join("chan_0")]);
        // SQLite reads its write-ahead log beside the database, when there is one.
        #[cfg(feature = "nsys")]
        assert_eq!(
            files_read(&dir.join("db.sqlite")),
            [dir.join("db.sqlite"), dir.join("db.sqlite-wal")]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
