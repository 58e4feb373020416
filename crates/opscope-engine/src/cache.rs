//! The model cache: the model of a loaded trace, saved under the user's cache directory
//! so that the next command on the same, unchanged files reads it back instead of
//! parsing them again (`opscope gpu`, then `stats op`, then `steps` on one big trace).
//!
//! An entry is found by a key naming this build of opscope and every file the import
//! read, with its path, size, modification and change times and inode; any change to a
//! file or to opscope is a miss. The model's columns lie in the entry aligned, as they
//! are in memory, and are mapped, not copied: opening a cached model costs a map and a
//! check of checksums, and a column is copied only if a command changes it.
//!
//! A damaged entry is a miss: the cache can only save time, never change an answer or
//! stop a command. Only a model that keeps its invariants ([`Trace::check`]) is saved,
//! and each column's CRC-32, and one over the key with the rest of the model, are
//! checked on opening, so that what is read back is what was checked, under the key it
//! was saved for. A directory that another user owns or may write into is not used at
//! all, and entries are only read if they are this user's and no one else may write
//! them: whoever could plant an entry with good checksums could as well replace the
//! `opscope` executable.

use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::{BufWriter, Write};
use std::ops::Range;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opscope_model::{column, Trace};

/// Bumped whenever the saved form of the model changes meaning without changing the
/// build identity (it is part of every key, with the binary's own size and times).
const FORMAT_VERSION: u32 = 7;

const MAGIC: &[u8; 8] = b"OPSCMDL\n";
/// The last bytes of an entry: where the rest of the model and the column table are,
/// the number of columns, and the CRC-32 of the key, the rest and the table (see
/// [`Trailer`]).
const TRAILER_BYTES: usize = 32;
/// Columns start at multiples of this in the file (and so in memory, mapped).
const COLUMN_ALIGN: usize = 64;
/// Per column in the table: its offset and length (u64) and CRC-32 (u32).
const TABLE_ROW_BYTES: usize = 20;

/// Inputs smaller than this parse in a few milliseconds: not worth an entry.
pub const MIN_INPUT_BYTES: u64 = 1 << 20;

/// The cache keeps its most recently used entries up to this many bytes in all.
const MAX_TOTAL_BYTES: u64 = 2 << 30;

/// Models that parsed faster than this per byte of model are not saved. Writing an
/// entry costs about 2 ns per byte (a 2 GiB trace's 427 MB entry: 0.9 s), while opening
/// one costs only its checksums, about 0.05 ns per byte since its columns are mapped
/// (23 ms): an entry pays back on its first read for inputs slow to parse, as JSON is
/// (10–20 ns per byte of the model it makes), not for a CTF trace's binary events
/// (about 2: its 200 MB model would cost 0.4 s to save, against 0.35 s to parse).
const MIN_PARSE_NS_PER_MODEL_BYTE: u128 = 5;

/// Entries being written that are older than this were left by a command that died.
const STALE_TEMPORARY: Duration = Duration::from_secs(3600);

/// Where entries live: `$OPSCOPE_CACHE_DIR`, else `$XDG_CACHE_HOME/opscope/models`, else
/// `~/.cache/opscope/models` (relative or empty values are ignored, as the XDG rules
/// say). `OPSCOPE_CACHE_DIR=off` (or empty) turns the cache off.
pub fn directory() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(opscope_wire::env::CACHE_DIR) {
        if dir.is_empty() || dir == "off" {
            return None;
        }
        return Some(PathBuf::from(dir));
    }
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let base = absolute("XDG_CACHE_HOME").or_else(|| absolute("HOME").map(|h| h.join(".cache")))?;
    Some(base.join("opscope").join("models"))
}

/// Why `dir` cannot hold entries safely, if it cannot: it exists and is not a
/// directory of this user's that no one else may write into. A directory that does not
/// exist yet is fine: it is created private.
pub fn why_not_private(dir: &Path) -> Option<String> {
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return Some(format!("cannot be examined ({e})")),
    };
    if !meta.is_dir() {
        return Some("is not a directory".into());
    }
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    if meta.uid() != uid {
        return Some(format!(
            "belongs to uid {}, not to you (uid {uid})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Some(format!(
            "may be written by others (mode {:o})",
            meta.mode() & 0o777
        ));
    }
    None
}

/// One cache entry: where it is, the exact key text it must hold, and the files that
/// key describes.
pub struct Entry {
    path: PathBuf,
    key: String,
    inputs: Vec<(PathBuf, Vec<PathBuf>)>,
}

impl Entry {
    /// The entry for loading `inputs`: each input as named (a file, or a CTF directory)
    /// with every file its import reads (a CTF trace's metadata and streams, a
    /// RunMetadata's GraphDef, an SQLite database's write-ahead log).
    pub fn for_inputs(dir: &Path, inputs: Vec<(PathBuf, Vec<PathBuf>)>) -> Option<Entry> {
        let key = key_of(&inputs)?;
        // The hash only names the file: the whole key is stored in it and compared, so
        // a collision, or a hash that changes with the Rust release, is only a miss.
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut hasher);
        let path = dir.join(format!("{:016x}.model", hasher.finish()));
        Some(Entry { path, key, inputs })
    }

    /// The saved model, if the entry exists, holds this key, is intact and keeps the
    /// model's invariants.
    pub fn read(&self) -> Option<Trace> {
        let file = File::open(&self.path).ok()?;
        // An entry someone else wrote (a hard link into the directory, or one left from
        // before it was made private) is not taken on trust either.
        let meta = file.metadata().ok()?;
        // SAFETY: getuid has no preconditions.
        if meta.uid() != unsafe { libc::getuid() } || meta.mode() & 0o022 != 0 {
            return None;
        }
        let name = format!("the model cache's {}", self.path.display());
        let trace = map_entry(&file, &self.key, &name)?;
        // Entries read recently are the last to be evicted.
        let _ = file.set_modified(SystemTime::now());
        Some(trace)
    }

    /// Saves `trace`, which took `parse_time` to parse, unless reading it back would
    /// not save time or an input changed while it was parsed. Failures (a read-only
    /// home, a full disk) are ignored, since the next command simply parses again.
    pub fn write(&self, trace: &Trace, parse_time: Duration) {
        let model_bytes = trace.heap_bytes();
        if parse_time.as_nanos() < MIN_PARSE_NS_PER_MODEL_BYTE * model_bytes as u128
            || model_bytes as u64 > MAX_TOTAL_BYTES / 2
            || key_of(&self.inputs).as_ref() != Some(&self.key)
            // Entries are not checked again when read back, only their checksums.
            || trace.check().is_err()
        {
            return;
        }
        let Some(dir) = self.path.parent() else {
            return;
        };
        let created = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir);
        if created.is_err() {
            return;
        }
        // Written aside under a fresh name and renamed, so that a reader never sees
        // half an entry and two commands never write into one file.
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let temporary = self
            .path
            .with_extension(format!("{}-{nanos}.tmp", std::process::id()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)
            .and_then(|file| write_entry(file, &self.key, trace));
        if written.is_err() || std::fs::rename(&temporary, &self.path).is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        evict(dir, MAX_TOTAL_BYTES, STALE_TEMPORARY);
    }
}

/// The file that holds this code, when it is not the executable (the Python module's
/// shared library), set once by whoever loaded it.
static CODE_FILE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Names the file that holds this code, so that models cached by another build of it
/// are not taken for this one's.
pub fn set_code_file(path: PathBuf) {
    let _ = CODE_FILE.set(path);
}

/// Whether this code runs from a library another program loaded (see
/// [`set_code_file`]), not from the `opscope` executable.
pub fn runs_from_a_library() -> bool {
    CODE_FILE.get().is_some()
}

fn code_file() -> Option<PathBuf> {
    match CODE_FILE.get() {
        Some(path) => Some(path.clone()),
        None => std::env::current_exe().ok(),
    }
}

/// The key text: this binary, then each input as named and the files it reads.
fn key_of(inputs: &[(PathBuf, Vec<PathBuf>)]) -> Option<String> {
    let mut key = format!(
        "opscope {} format {FORMAT_VERSION} {}\n",
        env!("CARGO_PKG_VERSION"),
        describe(&code_file()?)
    );
    for (input, read) in inputs {
        // Sources keep the path as given, and answers show it: a file named another
        // way is another entry.
        key += &format!("as {}\n", input.display());
        for file in read {
            key += &describe(file);
            key.push('\n');
        }
    }
    Some(key)
}

/// One line naming a file as it is now, or saying it is absent. The change time is
/// there because no tool can set it: a file rewritten with its old size and
/// modification time (`cp -p`, `touch -r`) still changes it.
fn describe(path: &Path) -> String {
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    match std::fs::metadata(&canonical) {
        Ok(meta) => format!(
            "{} {} m{}.{:09} c{}.{:09} {}:{}",
            canonical.display(),
            meta.len(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ctime(),
            meta.ctime_nsec(),
            meta.dev(),
            meta.ino()
        ),
        Err(_) => format!("{} absent", canonical.display()),
    }
}

/// `MAGIC`, the key's length and text, the columns (each at a multiple of
/// [`COLUMN_ALIGN`]), the rest of the model (postcard, naming each column by its
/// number), the column table, then the [`Trailer`]. Columns stream out from the model
/// as they are, with no copy of them in memory.
fn write_entry(file: File, key: &str, trace: &Trace) -> std::io::Result<()> {
    let mut out = BufWriter::with_capacity(1 << 20, file);
    out.write_all(MAGIC)?;
    out.write_all(&(key.len() as u32).to_le_bytes())?;
    out.write_all(key.as_bytes())?;
    let sink = ColumnWriter {
        out,
        at: (MAGIC.len() + 4 + key.len()) as u64,
        table: Vec::new(),
    };
    let (rest, sink) = column::save_columns(sink, || postcard::to_allocvec(trace));
    let rest = rest.map_err(std::io::Error::other)?;
    let ColumnWriter {
        mut out,
        at,
        table: columns,
    } = sink;
    let mut table = Vec::with_capacity(columns.len() * TABLE_ROW_BYTES);
    for (offset, len, crc) in &columns {
        table.extend_from_slice(&offset.to_le_bytes());
        table.extend_from_slice(&len.to_le_bytes());
        table.extend_from_slice(&crc.to_le_bytes());
    }
    out.write_all(&rest)?;
    out.write_all(&table)?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(key.as_bytes());
    crc.update(&rest);
    crc.update(&table);
    let trailer = Trailer {
        rest_at: at,
        rest_len: rest.len() as u64,
        table_at: at + rest.len() as u64,
        columns: columns.len() as u32,
        crc: crc.finalize(),
    };
    out.write_all(&trailer.to_bytes())?;
    // No fsync: after a crash, an entry cut short fails its length or CRC check and is
    // a miss; waiting for the disk would cost more than the cache saves.
    out.flush()
}

/// Writes each column of a model being saved at the next multiple of [`COLUMN_ALIGN`]
/// and keeps its offset, length and CRC-32.
struct ColumnWriter {
    out: BufWriter<File>,
    at: u64,
    table: Vec<(u64, u64, u32)>,
}

impl column::ColumnSink for ColumnWriter {
    fn put(&mut self, bytes: &[u8], _align: usize) -> std::io::Result<u32> {
        let pad = (COLUMN_ALIGN - (self.at as usize % COLUMN_ALIGN)) % COLUMN_ALIGN;
        self.out.write_all(&[0; COLUMN_ALIGN][..pad])?;
        self.at += pad as u64;
        self.out.write_all(bytes)?;
        self.table
            .push((self.at, bytes.len() as u64, crc32fast::hash(bytes)));
        self.at += bytes.len() as u64;
        u32::try_from(self.table.len() - 1).map_err(std::io::Error::other)
    }
}

/// The end of an entry, little-endian.
struct Trailer {
    rest_at: u64,
    rest_len: u64,
    table_at: u64,
    columns: u32,
    /// Of the key, the rest and the table together.
    crc: u32,
}

impl Trailer {
    fn to_bytes(&self) -> [u8; TRAILER_BYTES] {
        let mut out = [0; TRAILER_BYTES];
        out[..8].copy_from_slice(&self.rest_at.to_le_bytes());
        out[8..16].copy_from_slice(&self.rest_len.to_le_bytes());
        out[16..24].copy_from_slice(&self.table_at.to_le_bytes());
        out[24..28].copy_from_slice(&self.columns.to_le_bytes());
        out[28..].copy_from_slice(&self.crc.to_le_bytes());
        out
    }

    fn from_bytes(bytes: &[u8; TRAILER_BYTES]) -> Trailer {
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        Trailer {
            rest_at: u64_at(0),
            rest_len: u64_at(8),
            table_at: u64_at(16),
            columns: u32_at(24),
            crc: u32_at(28),
        }
    }
}

/// The model an entry holds, its columns mapped from `file`, if the entry holds `key`
/// and every checksum matches.
fn map_entry(file: &File, key: &str, name: &str) -> Option<Trace> {
    // SAFETY: a read-only map of a file that writers only ever replace by renaming a
    // finished one over it, never change in place (nor does anything else write this
    // user's private entries); the columns mapped from it keep it alive.
    let map = unsafe { memmap2::MmapOptions::new().populate().map(file) }.ok()?;
    let named = crate::load::cut_files::register(&map, name);
    let (rest, columns) = columns_of(&map, key)?;
    let region: column::Region = Arc::new(MappedEntry { map, _named: named });
    let rest = (*region).as_ref().get(rest)?;
    column::map_columns(
        column::ColumnSource {
            region: region.clone(),
            columns,
        },
        || postcard::from_bytes::<Trace>(rest).ok(),
    )
}

/// An entry's mapping, named for the SIGBUS handler while any column of it lives (were
/// the file cut short under a command, it says so instead of "Bus error").
struct MappedEntry {
    map: memmap2::Mmap,
    _named: crate::load::cut_files::Registered,
}

impl AsRef<[u8]> for MappedEntry {
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}

/// Where the rest of the model and each column lie in `bytes`, if they hold `key`, are
/// whole and every checksum matches.
fn columns_of(bytes: &[u8], key: &str) -> Option<(Range<usize>, Vec<Range<usize>>)> {
    let rest = bytes.strip_prefix(MAGIC.as_slice())?;
    let (key_len, rest) = rest.split_first_chunk::<4>()?;
    let key_len = u32::from_le_bytes(*key_len) as usize;
    if rest.get(..key_len)? != key.as_bytes() {
        return None;
    }
    let trailer_at = bytes.len().checked_sub(TRAILER_BYTES)?;
    let trailer = Trailer::from_bytes(bytes[trailer_at..].try_into().ok()?);
    let at = |offset: u64| usize::try_from(offset).ok();
    let rest_range = at(trailer.rest_at)?..at(trailer.rest_at.checked_add(trailer.rest_len)?)?;
    let table_len = (trailer.columns as usize).checked_mul(TABLE_ROW_BYTES)?;
    let table_range = at(trailer.table_at)?..at(trailer.table_at)?.checked_add(table_len)?;
    if rest_range.end != table_range.start || table_range.end != trailer_at {
        return None;
    }
    let (rest, table) = (bytes.get(rest_range.clone())?, bytes.get(table_range)?);
    let mut crc = crc32fast::Hasher::new();
    crc.update(key.as_bytes());
    crc.update(rest);
    crc.update(table);
    if crc.finalize() != trailer.crc {
        return None;
    }
    let header_end = MAGIC.len() + 4 + key_len;
    let mut columns = Vec::with_capacity(trailer.columns as usize);
    let mut sums = Vec::with_capacity(trailer.columns as usize);
    for row in table.chunks_exact(TABLE_ROW_BYTES) {
        let offset = at(u64::from_le_bytes(row[..8].try_into().ok()?))?;
        let len = at(u64::from_le_bytes(row[8..16].try_into().ok()?))?;
        let range = offset..offset.checked_add(len)?;
        if range.start < header_end || range.end > rest_range.start {
            return None;
        }
        sums.push(u32::from_le_bytes(row[16..].try_into().ok()?));
        columns.push(range);
    }
    columns_intact(bytes, &columns, &sums).then_some((rest_range, columns))
}

/// Whether every column's CRC-32 matches, checked on two threads for a large model (the
/// columns split by bytes).
fn columns_intact(bytes: &[u8], columns: &[Range<usize>], sums: &[u32]) -> bool {
    let total: usize = columns.iter().map(|r| r.len()).sum();
    let mut half = 0;
    let split = columns
        .iter()
        .position(|r| {
            half += r.len();
            half >= total / 2
        })
        .map_or(columns.len(), |i| i + 1);
    let check = |range: Range<usize>| {
        columns[range.clone()]
            .iter()
            .zip(&sums[range])
            .all(|(r, &sum)| crc32fast::hash(&bytes[r.clone()]) == sum)
    };
    if total < 8 << 20 {
        return check(0..columns.len());
    }
    std::thread::scope(|scope| {
        let second = scope.spawn(|| check(split..columns.len()));
        let first = check(0..split);
        first && second.join().unwrap_or(false)
    })
}

/// Deletes the least recently used entries until the rest fit in `limit` bytes, and
/// entries being written that are older than `stale` (their writer died).
fn evict(dir: &Path, limit: u64, stale: Duration) {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    let mut entries: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
    for e in listing.filter_map(|e| e.ok()) {
        let path = e.path();
        let Some(meta) = e.metadata().ok() else {
            continue;
        };
        let modified = meta.modified().unwrap_or(now);
        match path.extension().and_then(|x| x.to_str()) {
            Some("model") => entries.push((modified, meta.len(), path)),
            Some("tmp") if now.duration_since(modified).unwrap_or_default() > stale => {
                let _ = std::fs::remove_file(path);
            }
            _ => {}
        }
    }
    entries.sort_by_key(|e| std::cmp::Reverse(e.0));
    let mut kept = 0u64;
    for (_, len, path) in entries {
        kept += len;
        if kept > limit {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small_trace() -> Trace {
        let mut trace = Trace::new();
        let name = trace.intern("aten::mm");
        assert_eq!(trace.str(name), "aten::mm");
        trace
    }

    /// A model with one thread track, and the track.
    fn one_thread() -> (Trace, opscope_model::TrackId) {
        let mut trace = small_trace();
        let clock_name = trace.intern("clock");
        let clock = trace.add_clock(opscope_model::ClockDomain {
            name: clock_name,
            to_global: opscope_model::LinearTransform::IDENTITY,
            unix_offset_ns: None,
        });
        let source = trace.add_source(opscope_model::Source {
            path: "s.pftrace".into(),
            format: "perfetto".into(),
            clock,
            host: None,
            rank: None,
            world_size: None,
            metadata: opscope_model::ArgsId::NONE,
        });
        let p = trace.process(source, 1);
        let th = trace.thread(p, 1);
        let track = trace.thread_track(th, opscope_model::TrackKind::Thread);
        (trace, track)
    }

    /// A finished model with `n` nested slices, each with a bag of args, a counter and
    /// an instant: every kind of column.
    fn model_of(n: usize) -> Trace {
        use opscope_model::events::{InstantRow, SliceRow};
        use opscope_model::{ArgValue, InstantScope, SliceKind, StrId};
        let (mut trace, track) = one_thread();
        let key = trace.intern("shape");
        for i in 0..n {
            let args = trace.args.push_bag(&[(key, ArgValue::Int(i as i64))]);
            let name = trace.intern(&format!("op{}", i % 7));
            trace.slices.push(SliceRow {
                track,
                ts: 1_000 + i as i64,
                dur: (n - i) as i64 * 2,
                name,
                category: StrId::EMPTY,
                kind: SliceKind::Op,
                args,
            });
        }
        trace.instants.push(InstantRow {
            track,
            ts: 5,
            name: key,
            category: StrId::EMPTY,
            kind: SliceKind::Other,
            scope: InstantScope::Global,
            args: opscope_model::ArgsId::NONE,
        });
        trace.counters.push(track, 9, 0.5);
        trace.finish();
        trace.check().unwrap();
        trace
    }

    /// A model read back has its columns mapped from the entry, equal to the model
    /// saved; one changed after reading is copied first, so the entry stays as saved.
    #[test]
    fn columns_are_mapped_from_the_entry_and_copied_only_when_changed() {
        let trace = model_of(1000);
        let bytes = entry_bytes("key", &trace);
        let mut back = read_back(&bytes, "key").expect("an entry reads back");
        assert!(back.slices.ts.is_mapped() && back.slices.name.is_mapped());
        assert!(back.instants.scope.is_mapped() && back.counters.value.is_mapped());
        assert_eq!(back.check(), Ok(()));
        assert_eq!(back.slices.ts, trace.slices.ts);
        assert_eq!(back.slices.dur, trace.slices.dur);
        assert_eq!(back.slices.parent, trace.slices.parent);
        assert_eq!(back.instants.scope, trace.instants.scope);
        let bag =
            |t: &Trace, i: usize| format!("{:?}", t.args.get(t.slices.args[i]).collect::<Vec<_>>());
        assert_eq!(bag(&back, 999), bag(&trace, 999));
        assert_eq!(
            back.str(back.slices.name[3]),
            trace.str(trace.slices.name[3])
        );
        // Strings read back are found, and new ones do not take an old one's id.
        assert_eq!(back.strings.find("op6"), trace.strings.find("op6"));
        let fresh = back.intern("new");
        assert_eq!(fresh.0 as usize, trace.strings.len());
        back.slices.ts[0] = -1;
        assert!(!back.slices.ts.is_mapped(), "changed, so copied");
        assert_eq!(read_back(&bytes, "key").unwrap().slices.ts, trace.slices.ts);
    }

    /// Any byte of any column changed makes the entry a miss: columns are checked by
    /// their own CRC-32, not only the rest of the model.
    #[test]
    fn a_damaged_column_is_a_miss() {
        let trace = model_of(50);
        let bytes = entry_bytes("key", &trace);
        let (_, columns) = columns_of(&bytes, "key").expect("intact");
        assert!(
            columns.len() >= 20,
            "every table's columns: {}",
            columns.len()
        );
        for range in columns.iter().filter(|r| !r.is_empty()) {
            for at in [range.start, range.end - 1] {
                let mut damaged = bytes.clone();
                damaged[at] ^= 0x10;
                assert!(
                    read_back(&damaged, "key").is_none(),
                    "byte {at} of column {range:?} changed, read back"
                );
            }
        }
    }

    /// A model that breaks an invariant is not saved: entries are not checked again
    /// when read back.
    #[test]
    fn a_model_that_fails_its_check_is_not_saved() {
        let dir = std::env::temp_dir().join(format!("opscope-cache-check-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let entry = Entry::for_inputs(&dir, Vec::new()).unwrap();
        let slow = Duration::from_secs(60);
        let mut trace = model_of(10);
        trace.slices.name[2] = opscope_model::StrId(1 << 30);
        entry.write(&trace, slow);
        assert!(!entry.path.exists(), "a broken model was saved");
        entry.write(&model_of(10), slow);
        assert!(entry.read().is_some(), "a good model was not saved");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn entry_bytes(key: &str, trace: &Trace) -> Vec<u8> {
        let path = std::env::temp_dir().join(format!(
            "opscope-cache-entry-{}-{}",
            std::process::id(),
            key.len()
        ));
        write_entry(File::create(&path).unwrap(), key, trace).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        bytes
    }

    /// The model in entry `bytes` under `key`, read as `Entry::read` reads it.
    fn read_back(bytes: &[u8], key: &str) -> Option<Trace> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "opscope-cache-read-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::write(&path, bytes).unwrap();
        let trace = map_entry(&File::open(&path).unwrap(), key, "entry");
        std::fs::remove_file(&path).unwrap();
        trace
    }

    #[test]
    fn an_entry_reads_back_only_with_its_key_and_intact() {
        let trace = small_trace();
        let bytes = entry_bytes("key A", &trace);
        let back = read_back(&bytes, "key A").expect("an entry reads back");
        assert_eq!(
            back.strings.find("aten::mm").map(|id| back.str(id)),
            Some("aten::mm")
        );
        assert!(read_back(&bytes, "key B").is_none());
        let middle = bytes.len() - TRAILER_BYTES - 1;
        let mut damaged = bytes.clone();
        damaged[middle] ^= 1;
        assert!(read_back(&damaged, "key A").is_none());
        assert!(read_back(&bytes[..bytes.len() - 1], "key A").is_none());
        assert!(read_back(&bytes[..5], "key A").is_none());
    }

    /// Sampled stacks come back whole, and the stack tree read back still keeps its
    /// frames distinct when more are added (its look-ups are rebuilt, not saved).
    #[test]
    fn sampled_stacks_read_back_whole() {
        use opscope_model::SampleRow;
        let (mut trace, track) = one_thread();
        let (f, file) = (trace.intern("train"), trace.intern("t.py"));
        let frame = trace.stacks.frame(f, file, 3);
        let stack = trace.stacks.stack([frame]);
        trace.samples.push(SampleRow {
            ts: 5,
            track,
            stack,
            period: 10,
            state: 7,
        });
        trace.finish();
        let bytes = entry_bytes("key", &trace);
        let mut back = read_back(&bytes, "key").unwrap();
        assert_eq!(back.check(), Ok(()));
        assert_eq!(
            (back.samples.ts.to_vec(), back.samples.period.to_vec()),
            (vec![5], vec![10])
        );
        assert_eq!(back.samples.state, vec![7]);
        assert_eq!(back.stacks.frames_of(back.samples.stack[0]).count(), 1);
        assert_eq!(
            back.stacks.frame(f, file, 3),
            frame,
            "the same frame, not a new one"
        );
        assert_eq!(back.stacks.frames.len(), 1);
    }

    #[test]
    fn a_model_moved_under_another_key_is_refused() {
        let trace = small_trace();
        let a = entry_bytes("key A", &trace);
        // Entry B's header with entry A's payload and trailer, as someone who copies
        // one entry's tail onto another's key would make it.
        let b = entry_bytes("key B", &Trace::new());
        let header = MAGIC.len() + 4 + "key B".len();
        let mut forged = b[..header].to_vec();
        forged.extend_from_slice(&a[MAGIC.len() + 4 + "key A".len()..]);
        assert!(read_back(&forged, "key B").is_none());
        assert!(read_back(&a, "key A").is_some());
    }

    #[test]
    fn a_directory_others_may_write_into_is_not_used() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("opscope-cache-open-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(why_not_private(&dir), None);
        assert_eq!(why_not_private(&dir.join("not yet")), None);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let why = why_not_private(&dir).expect("a directory open to all is refused");
        assert!(why.contains("written by others"), "{why}");
        let file = dir.join("f");
        std::fs::write(&file, b"").unwrap();
        assert_eq!(
            why_not_private(&file).as_deref(),
            Some("is not a directory")
        );
        // Owned by root, as another user's directory would be to a test running as a
        // user; when the test runs as root, /proc's owner is its own and says nothing.
        // SAFETY: getuid has no preconditions.
        if unsafe { libc::getuid() } != 0 {
            assert!(why_not_private(Path::new("/"))
                .unwrap()
                .contains("belongs to uid 0"));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn eviction_keeps_the_newest_entries_within_the_limit() {
        let dir = std::env::temp_dir().join(format!("opscope-cache-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let now = SystemTime::now();
        let aged = |name: &str, len: usize, age: u64| {
            let path = dir.join(name);
            std::fs::write(&path, vec![0u8; len]).unwrap();
            let f = File::options().write(true).open(&path).unwrap();
            f.set_modified(now - Duration::from_secs(age)).unwrap();
        };
        for (i, age) in [30u64, 20, 10].iter().enumerate() {
            aged(&format!("{i}.model"), 100, *age);
        }
        aged("other.txt", 1000, 50);
        aged("3.1-5.tmp", 10, 7200);
        aged("3.2-6.tmp", 10, 5);
        evict(&dir, 250, Duration::from_secs(3600));
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["1.model", "2.model", "3.2-6.tmp", "other.txt"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_is_described_by_its_times_and_an_absent_one_as_absent() {
        let dir = std::env::temp_dir().join(format!("opscope-describe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.json");
        std::fs::write(&path, b"[1]").unwrap();
        let before = describe(&path);
        // The same size and modification time, as `cp -p` leaves them: the change time
        // still moves.
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&path, b"[2]").unwrap();
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(modified)
            .unwrap();
        assert_ne!(describe(&path), before);
        assert!(describe(&dir.join("t.json-wal")).ends_with(" absent"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
