//! The model cache end to end: a command on a trace saved by an earlier one answers as
//! parsing does, a damaged entry or a changed input is parsed again, and `--no-cache`
//! leaves the cache alone.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

mod common;
use common::*;

fn entries(cache: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(cache)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    found.sort();
    found
}

fn set_age(path: &Path, age: Duration) {
    let file = std::fs::File::options().write(true).open(path).unwrap();
    file.set_modified(SystemTime::now() - age).unwrap();
}

fn inode(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().ino()
}

fn age(path: &Path) -> Duration {
    let modified = std::fs::metadata(path).unwrap().modified().unwrap();
    SystemTime::now()
        .duration_since(modified)
        .unwrap_or_default()
}

#[test]
fn a_saved_model_answers_every_command_as_parsing_does() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let trace = traces.join(
        "kineto/kineto-tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    );
    let trace = trace.to_str().unwrap();
    let cache = scratch_dir("cache-answers");
    opscope_ok_with_cache(&cache, &["stats", "op", trace]);
    let saved = entries(&cache);
    assert_eq!(
        saved.len(),
        1,
        "one entry after the first command: {saved:?}"
    );
    // A read refreshes the entry's time (the eviction order), while a miss would write
    // a new file in its place: the same file with a fresh time shows a read.
    let saved_inode = inode(&saved[0]);
    set_age(&saved[0], Duration::from_secs(3600));
    let commands: [&[&str]; 9] = [
        &["info", trace, "--format", "json"],
        &["stats", "op", trace, "-output", "csv:outfile=/dev/stdout"],
        &["stats", "kernel", trace, "--format", "json"],
        &["gpu", trace, "--format", "json"],
        &["steps", trace, "--format", "json"],
        &["memory", trace, "--format", "json"],
        &["advise", trace, "--format", "json"],
        &["host", trace, "--format", "json"],
        &["critical-path", trace, "--format", "json"],
    ];
    for args in commands {
        let cached = opscope_ok_with_cache(&cache, args);
        assert!(
            inode(&saved[0]) == saved_inode && age(&saved[0]) < Duration::from_secs(600),
            "opscope {} did not read the saved model",
            args.join(" ")
        );
        set_age(&saved[0], Duration::from_secs(3600));
        let parsed = opscope_ok_with_cache(&cache, &[args, &["--no-cache"]].concat());
        assert!(
            inode(&saved[0]) == saved_inode && age(&saved[0]) > Duration::from_secs(3000),
            "--no-cache read or wrote the saved model"
        );
        assert!(!cached.stdout.is_empty());
        assert_eq!(
            String::from_utf8_lossy(&cached.stdout),
            String::from_utf8_lossy(&parsed.stdout),
            "opscope {}: the saved model answers otherwise than parsing",
            args.join(" ")
        );
        assert_eq!(cached.stderr, parsed.stderr);
    }
    assert_eq!(entries(&cache), saved, "--no-cache saved nothing");
}

/// A Chrome trace of `events` complete events, over a MiB so that it is cached. Each
/// event is indented and repeats a long string arg: parsing them takes time while the
/// model keeps neither, so the model is well worth saving (the cache skips models that
/// parse about as fast as they would read back: here parsing takes about 19 ns per byte
/// of model, the cache saves from 5).
fn write_trace(path: &Path, events: usize) {
    let mut json = String::from("{\"traceEvents\": [\n");
    let shapes = "[[32, 3, 224, 224], [64, 3, 7, 7], [64], [], [], [], []], ".repeat(8);
    let indent = " ".repeat(400);
    for i in 0..events {
        json += &format!(
            "{indent}{{\"ph\": \"X\", \"name\": \"op_{}\", \"cat\": \"cpu_op\", \"pid\": 1, \"tid\": 1, \"ts\": {}, \"dur\": 5, \"args\": {{\"n\": {i}, \"shapes\": \"{shapes}\"}}}},\n",
            i % 7,
            i * 10
        );
    }
    json +=
        "{\"ph\": \"i\", \"name\": \"end\", \"pid\": 1, \"tid\": 1, \"ts\": 0, \"s\": \"t\"}\n]}\n";
    assert!(json.len() > 1 << 20);
    std::fs::write(path, json).unwrap();
}

fn slices(cache: &Path, trace: &Path) -> u64 {
    let out = opscope_ok_with_cache(
        cache,
        &["info", trace.to_str().unwrap(), "--format", "json"],
    );
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    info["slices"].as_u64().unwrap()
}

#[test]
fn a_damaged_entry_or_a_changed_input_is_parsed_again() {
    let dir = scratch_dir("cache-stale");
    let cache = dir.join("cache");
    let trace = dir.join("trace.json");
    write_trace(&trace, 12_000);
    assert_eq!(slices(&cache, &trace), 12_000);
    let saved = entries(&cache);
    assert_eq!(saved.len(), 1);
    let whole = std::fs::metadata(&saved[0]).unwrap().len();

    // Half an entry (a full disk, a crash while writing elsewhere) is a miss, and the
    // command saves the model anew.
    let bytes = std::fs::read(&saved[0]).unwrap();
    std::fs::write(&saved[0], &bytes[..bytes.len() / 2]).unwrap();
    assert_eq!(slices(&cache, &trace), 12_000);
    assert_eq!(std::fs::metadata(&saved[0]).unwrap().len(), whole);

    // A flipped byte fails the checksum: the same.
    let mut bytes = std::fs::read(&saved[0]).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&saved[0], &bytes).unwrap();
    assert_eq!(slices(&cache, &trace), 12_000);
    assert_ne!(std::fs::read(&saved[0]).unwrap(), bytes);

    // The file changes in place, keeping its size and modification time (as `cp -p`
    // or `touch -r` leave them): one complete event becomes an instant.
    let modified = std::fs::metadata(&trace).unwrap().modified().unwrap();
    let text = std::fs::read_to_string(&trace).unwrap();
    let edited = text.replacen(r#""ph": "X""#, r#""ph": "i""#, 1);
    assert_eq!(edited.len(), text.len());
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&trace, edited).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&trace)
        .unwrap()
        .set_modified(modified)
        .unwrap();
    assert_eq!(slices(&cache, &trace), 11_999);
    assert_eq!(entries(&cache).len(), 2);

    // The file grows: a new entry, and the new answer.
    std::thread::sleep(Duration::from_millis(20));
    write_trace(&trace, 12_345);
    assert_eq!(slices(&cache, &trace), 12_345);
    assert_eq!(entries(&cache).len(), 3);

    // Small inputs parse faster than an entry is worth: none is made.
    let small = dir.join("small.json");
    std::fs::write(
        &small,
        r#"[{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 1}]"#,
    )
    .unwrap();
    assert_eq!(slices(&cache, &small), 1);
    assert_eq!(entries(&cache).len(), 3);
}

#[test]
fn an_entry_carrying_another_traces_model_or_a_directory_open_to_others_is_not_trusted() {
    let dir = scratch_dir("cache-trust");
    let cache = dir.join("cache");
    let (a, b) = (dir.join("a.json"), dir.join("b.json"));
    write_trace(&a, 12_000);
    write_trace(&b, 13_000);
    assert_eq!(slices(&cache, &a), 12_000);
    let entry_a = entries(&cache);
    assert_eq!(slices(&cache, &b), 13_000);
    let entry_b: Vec<PathBuf> = entries(&cache)
        .into_iter()
        .filter(|e| !entry_a.contains(e))
        .collect();
    let (entry_a, entry_b) = (&entry_a[0], &entry_b[0]);

    // A's entry made of A's key and B's model with B's checksum: the copy that anyone
    // able to write there could make without computing anything.
    let header =
        |bytes: &[u8]| 8 + 4 + u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    let bytes_a = std::fs::read(entry_a).unwrap();
    let bytes_b = std::fs::read(entry_b).unwrap();
    let mut forged = bytes_a[..header(&bytes_a)].to_vec();
    forged.extend_from_slice(&bytes_b[header(&bytes_b)..]);
    std::fs::write(entry_a, &forged).unwrap();
    assert_eq!(slices(&cache, &a), 12_000, "A answered with B's model");
    assert_ne!(
        std::fs::read(entry_a).unwrap(),
        forged,
        "the forged entry was kept"
    );

    // A cache directory others may write into is not used: said once, and nothing is
    // read from it or written to it.
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(entry_a, &forged).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = opscope_with_cache(&cache, &["info", a.to_str().unwrap(), "--format", "json"]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("may be written by others") && stderr.contains("not used"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(entry_a).unwrap(),
        forged,
        "an entry was written there"
    );
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
}
