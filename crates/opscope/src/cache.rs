//! The model cache: the model of a loaded trace, saved under the user's cache directory
//! so that the next command on the same, unchanged files reads it back instead of
//! parsing them again (`opscope gpu`, then `stats op`, then `steps` on one big trace).
//!
//! An entry is found by a key naming this build of opscope and every input file's path,
//! size, modification time and inode; any change to a file or to opscope is a miss. A
//! damaged or unreadable entry is a miss too: the cache can only save time, never change
//! an answer or stop a command.

use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use opscope_model::Trace;

/// Bumped whenever the saved form of the model changes meaning without changing the
/// build identity (it is part of every key, with the binary's own size and mtime).
const FORMAT_VERSION: u32 = 1;

const MAGIC: &[u8; 8] = b"OPSCMDL\n";

/// Inputs smaller than this parse in a few milliseconds: not worth an entry.
pub const MIN_INPUT_BYTES: u64 = 1 << 20;

/// The cache keeps its newest entries up to this many bytes in all.
const MAX_TOTAL_BYTES: u64 = 2 << 30;

/// Where entries live: `$OPSCOPE_CACHE_DIR`, else `$XDG_CACHE_HOME/opscope/models`, else
/// `~/.cache/opscope/models`. `OPSCOPE_CACHE_DIR=off` (or empty) turns the cache off.
pub fn directory() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("OPSCOPE_CACHE_DIR") {
        if dir.is_empty() || dir == "off" {
            return None;
        }
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("opscope").join("models"))
}

/// One cache entry: where it is and the exact key text it must hold.
pub struct Entry {
    path: PathBuf,
    key: String,
}

impl Entry {
    /// The entry for loading `inputs`: each input as named (a file, or a CTF directory)
    /// with every file its import reads (a CTF trace's metadata and streams, a
    /// RunMetadata's GraphDef). `None` when a file cannot be described.
    pub fn for_inputs(dir: &Path, inputs: &[(PathBuf, Vec<PathBuf>)]) -> Option<Entry> {
        let mut key = format!(
            "opscope {} format {FORMAT_VERSION} {}\n",
            env!("CARGO_PKG_VERSION"),
            describe(&std::env::current_exe().ok()?)?
        );
        for (input, read) in inputs {
            // Sources keep the path as given, and answers show it: a file named another
            // way is another entry.
            key += &format!("as {}\n", input.display());
            for file in read {
                key += &describe(file)?;
                key.push('\n');
            }
        }
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut hasher);
        let path = dir.join(format!("{:016x}.model", hasher.finish()));
        Some(Entry { path, key })
    }

    /// The saved model, if the entry exists, holds this key and is intact.
    pub fn read(&self) -> Option<Trace> {
        let bytes = std::fs::read(&self.path).ok()?;
        let payload = unwrap(&bytes, &self.key)?;
        let mut trace: Trace = bincode::deserialize(payload).ok()?;
        // Vectors read back grow by doubling: give the slack back, as after parsing.
        trace.shrink_to_fit();
        // Entries read recently are the last to be evicted.
        if let Ok(f) = File::options().write(true).open(&self.path) {
            let _ = f.set_modified(SystemTime::now());
        }
        Some(trace)
    }

    /// Saves `trace`; failures (a read-only home, a full disk) are ignored, since the
    /// next command simply parses again.
    pub fn write(&self, trace: &Trace) {
        let Ok(payload) = bincode::serialize(trace) else {
            return;
        };
        let Some(dir) = self.path.parent() else {
            return;
        };
        if std::fs::create_dir_all(dir).is_err() {
            return;
        }
        // Written aside and renamed, so a reader never sees half an entry.
        let temporary = self
            .path
            .with_extension(format!("tmp{}", std::process::id()));
        let written = File::create(&temporary).and_then(|mut f| {
            f.write_all(&header(&self.key, &payload))?;
            f.write_all(&payload)
        });
        if written.is_err() || std::fs::rename(&temporary, &self.path).is_err() {
            let _ = std::fs::remove_file(&temporary);
            return;
        }
        evict(dir, MAX_TOTAL_BYTES);
    }
}

/// One line naming a file as it is now.
fn describe(path: &Path) -> Option<String> {
    let canonical = std::fs::canonicalize(path).ok()?;
    let meta = std::fs::metadata(&canonical).ok()?;
    Some(format!(
        "{} {} {}.{:09} {}:{}",
        canonical.display(),
        meta.len(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.dev(),
        meta.ino()
    ))
}

/// `MAGIC`, the key's length and text, the payload's length and CRC-32.
fn header(key: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAGIC.len() + 16 + key.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out
}

/// The payload of an entry, if it holds `key` and its checksum matches.
fn unwrap<'a>(bytes: &'a [u8], key: &str) -> Option<&'a [u8]> {
    let rest = bytes.strip_prefix(MAGIC.as_slice())?;
    let (key_len, rest) = rest.split_first_chunk::<4>()?;
    let key_len = u32::from_le_bytes(*key_len) as usize;
    if rest.get(..key_len)? != key.as_bytes() {
        return None;
    }
    let rest = &rest[key_len..];
    let (payload_len, rest) = rest.split_first_chunk::<8>()?;
    let (crc, payload) = rest.split_first_chunk::<4>()?;
    let complete = u64::from_le_bytes(*payload_len) == payload.len() as u64;
    (complete && crc32fast::hash(payload) == u32::from_le_bytes(*crc)).then_some(payload)
}

/// Deletes the least recently used entries until the rest fit in `limit` bytes.
fn evict(dir: &Path, limit: u64) {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<(SystemTime, u64, PathBuf)> = listing
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "model"))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            Some((meta.modified().ok()?, meta.len(), e.path()))
        })
        .collect();
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

    #[test]
    fn an_entry_reads_back_only_with_its_key_and_intact() {
        let payload = bincode::serialize(&small_trace()).unwrap();
        let mut bytes = header("key A", &payload);
        bytes.extend_from_slice(&payload);
        assert_eq!(unwrap(&bytes, "key A"), Some(payload.as_slice()));
        assert_eq!(unwrap(&bytes, "key B"), None);
        let last = bytes.len() - 1;
        let mut damaged = bytes.clone();
        damaged[last] ^= 1;
        assert_eq!(unwrap(&damaged, "key A"), None);
        assert_eq!(unwrap(&bytes[..last], "key A"), None);
        assert_eq!(unwrap(&bytes[..5], "key A"), None);
    }

    #[test]
    fn the_string_table_survives_a_round_trip() {
        let trace = small_trace();
        let back: Trace = bincode::deserialize(&bincode::serialize(&trace).unwrap()).unwrap();
        let id = back
            .strings
            .find("aten::mm")
            .expect("interned string found by value");
        assert_eq!(back.str(id), "aten::mm");
        assert_eq!(back.strings.len(), trace.strings.len());
    }

    #[test]
    fn eviction_keeps_the_newest_entries_within_the_limit() {
        let dir = std::env::temp_dir().join(format!("opscope-cache-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let now = SystemTime::now();
        for (i, age) in [30u64, 20, 10].iter().enumerate() {
            let path = dir.join(format!("{i}.model"));
            std::fs::write(&path, vec![0u8; 100]).unwrap();
            let f = File::options().write(true).open(&path).unwrap();
            f.set_modified(now - std::time::Duration::from_secs(*age))
                .unwrap();
        }
        std::fs::write(dir.join("other.txt"), vec![0u8; 1000]).unwrap();
        evict(&dir, 250);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["1.model", "2.model", "other.txt"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
