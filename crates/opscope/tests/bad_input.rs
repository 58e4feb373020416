//! The bad-input corpus: inputs a user gives by mistake or that damage left behind
//! (link cycles, an input named as the output, files cut short or bit-flipped, FIFOs,
//! devices, a directory with one bad file), each made here in a scratch directory and
//! each with the exit status and the message opscope must give. Every run has a time
//! limit, so a hang fails the test instead of blocking CI.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::{python, scratch_dir, test_cache_dir, Scratch};

/// Longer than any wait opscope itself makes (10 s for a FIFO's writer).
const LIMIT: Duration = Duration::from_secs(30);

/// What a run of opscope gave.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// What the run reads on its standard input.
enum Input {
    Nothing,
    Bytes(Vec<u8>),
    /// Random bytes until opscope stops reading (`cat /dev/urandom |`).
    Endless,
}

/// A fresh scratch directory for one case.
fn case_dir(name: &str) -> Scratch {
    scratch_dir(&format!("bad-input-{name}"))
}

/// Runs `command` with `input` on stdin, killing it after [`LIMIT`]. Output goes to
/// files rather than pipes, so a chatty run cannot block on a full pipe.
fn run_limited(mut command: Command, input: Input) -> Run {
    static RUNS: AtomicU32 = AtomicU32::new(0);
    let n = RUNS.fetch_add(1, Ordering::Relaxed);
    let outputs = scratch_dir(&format!("bad-input-outputs-{n}"));
    let (out, err) = (
        outputs.join(format!("{n}.out")),
        outputs.join(format!("{n}.err")),
    );
    command
        .env("OPSCOPE_CACHE_DIR", test_cache_dir())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .stdin(match input {
            Input::Nothing => Stdio::null(),
            _ => Stdio::piped(),
        });
    let shown = format!("{command:?}");
    let mut child = command.spawn().expect("opscope runs");
    if let Some(mut stdin) = child.stdin.take() {
        std::thread::spawn(move || match input {
            Input::Bytes(bytes) => {
                let _ = stdin.write_all(&bytes);
            }
            Input::Endless => {
                let mut state = 0x2545_f491_4f6c_dd1du64;
                let mut block = vec![0u8; 1 << 16];
                loop {
                    for b in block.iter_mut() {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        *b = state as u8;
                    }
                    if stdin.write_all(&block).is_err() {
                        return;
                    }
                }
            }
            Input::Nothing => {}
        });
    }
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{shown} still ran after {LIMIT:?}: it hangs");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let run = Run {
        code: status.code(),
        stdout: std::fs::read_to_string(&out).unwrap(),
        stderr: std::fs::read_to_string(&err).unwrap(),
    };
    assert!(!run.stderr.contains("panicked"), "{shown}: {}", run.stderr);
    run
}

/// `opscope ARGS` in `dir`, so that messages name files as the user typed them.
fn opscope_in(dir: &Path, args: &[&str], input: Input) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_opscope"));
    command.args(args).current_dir(dir);
    run_limited(command, input)
}

/// Asserts exit status 1 and exactly `message` as the one line on stderr.
fn assert_error(run: &Run, message: &str) {
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert_eq!(run.stderr, format!("opscope: error: {message}\n"));
}

/// The paths of the files `opscope info --format json` reports.
fn files_read(run: &Run) -> Vec<String> {
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let info: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    info["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect()
}

/// A small Chrome trace of `events` ops on one thread, claiming rank 0.
fn json_trace(events: usize) -> Vec<u8> {
    let events: Vec<String> = (0..events)
        .map(|i| {
            format!(
                r#"{{"ph":"X","cat":"cpu_op","name":"aten::op{}","pid":1,"tid":1,"ts":{},"dur":5}}"#,
                i % 5,
                i * 10
            )
        })
        .collect();
    format!(
        r#"{{"traceEvents":[{}],"distributedInfo":{{"rank":0,"world_size":2}}}}"#,
        events.join(",")
    )
    .into_bytes()
}

fn symlink(target: &str, link: &Path) {
    std::os::unix::fs::symlink(target, link).unwrap();
}

/// `ln -s . d/a; ln -s . d/b` once hung; `ln -s .. d/up` read the whole parent; a link
/// to the directory itself read each file again per link.
#[test]
fn link_cycles_and_links_out_of_the_tree_are_walked_once() {
    let dir = case_dir("links");
    let d = dir.join("d");
    std::fs::create_dir_all(d.join("sub")).unwrap();
    std::fs::write(d.join("t.json"), json_trace(3)).unwrap();
    symlink(".", &d.join("a"));
    symlink(".", &d.join("b"));
    symlink(".", &d.join("self"));
    symlink("..", &d.join("sub/up"));
    symlink("..", &d.join("up"));
    // A trace beside the directory that `up` would reach.
    std::fs::write(dir.join("outside.json"), json_trace(3)).unwrap();
    let run = opscope_in(&dir, &["info", "--format", "json", "d"], Input::Nothing);
    assert_eq!(files_read(&run), ["d/t.json"]);
    let real = std::fs::canonicalize(&dir).unwrap();
    assert_eq!(
        run.stderr,
        format!(
            "opscope: warning: d/up: not followed: the link leads to {}, outside d (name it on the command line to read it)\n",
            real.display()
        )
    );
    // A link to a file elsewhere (a directory of links to each rank's file) is read,
    // once, and a second link to the same file adds nothing.
    std::fs::remove_file(d.join("up")).unwrap();
    std::fs::remove_file(d.join("sub/up")).unwrap();
    symlink("../outside.json", &d.join("rank1.json"));
    symlink("../outside.json", &d.join("rank1-again.json"));
    let run = opscope_in(&dir, &["info", "--format", "json", "d"], Input::Nothing);
    assert_eq!(files_read(&run), ["d/rank1-again.json", "d/t.json"]);
    assert!(!run.stderr.contains("not followed"), "{}", run.stderr);
}

/// `runs/latest -> run1` once reported rank 0 twice; two real copies of one rank are
/// both read, with a warning.
#[test]
fn a_second_name_for_a_run_is_read_once_and_two_files_of_one_rank_are_told_of() {
    let dir = case_dir("ranks");
    let runs = dir.join("runs");
    std::fs::create_dir_all(runs.join("run1")).unwrap();
    std::fs::write(runs.join("run1/rank0.json"), json_trace(3)).unwrap();
    symlink("run1", &runs.join("latest"));
    let run = opscope_in(&dir, &["info", "--format", "json", "runs"], Input::Nothing);
    assert_eq!(files_read(&run), ["runs/run1/rank0.json"]);
    assert_eq!(run.stderr, "");
    // A hard link is the same file too.
    std::fs::hard_link(runs.join("run1/rank0.json"), runs.join("run1/again.json")).unwrap();
    let run = opscope_in(&dir, &["info", "--format", "json", "runs"], Input::Nothing);
    assert_eq!(files_read(&run), ["runs/run1/again.json"]);
    std::fs::remove_file(runs.join("run1/again.json")).unwrap();

    std::fs::create_dir_all(runs.join("run2")).unwrap();
    std::fs::write(runs.join("run2/rank0.json"), json_trace(3)).unwrap();
    let run = opscope_in(&dir, &["info", "--format", "json", "runs"], Input::Nothing);
    assert_eq!(
        files_read(&run),
        ["runs/run1/rank0.json", "runs/run2/rank0.json"]
    );
    assert_eq!(
        run.stderr,
        "opscope: warning: runs/run1/rank0.json and runs/run2/rank0.json both claim rank 0 (a copy of one file, or two runs in one directory?)\n"
    );
    // One file named twice is read once.
    let run = opscope_in(
        &dir,
        &[
            "info",
            "--format",
            "json",
            "runs/run1/rank0.json",
            "runs/latest/rank0.json",
        ],
        Input::Nothing,
    );
    assert_eq!(files_read(&run), ["runs/run1/rank0.json"]);
    assert_eq!(
        run.stderr,
        "opscope: warning: runs/latest/rank0.json: the same file as an input before it; read once\n"
    );
}

/// `convert t.json -o t.json` once replaced its input, also through `../` or a hard
/// link; an existing output was overwritten without a word.
#[test]
fn convert_refuses_its_input_as_output_and_an_existing_file_without_force() {
    let dir = case_dir("convert");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let original = json_trace(3);
    std::fs::write(dir.join("t.json"), &original).unwrap();
    std::fs::hard_link(dir.join("t.json"), dir.join("hard.json")).unwrap();
    for (input, output, message) in [
        (
            "t.json",
            "t.json",
            "t.json: is an input of this conversion; write the output elsewhere",
        ),
        (
            "t.json",
            "sub/../t.json",
            "sub/../t.json: is an input of this conversion (the same file as t.json); write the output elsewhere",
        ),
        (
            "hard.json",
            "t.json",
            "t.json: is an input of this conversion (the same file as hard.json); write the output elsewhere",
        ),
        (
            ".",
            "t.json",
            "t.json: is an input of this conversion (the same file as ./hard.json); write the output elsewhere",
        ),
    ] {
        for force in [&[][..], &["--force"][..]] {
            let mut args = vec!["convert", input, "-o", output];
            args.extend(force);
            let run = opscope_in(&dir, &args, Input::Nothing);
            assert_error(&run, message);
        }
    }
    assert_eq!(std::fs::read(dir.join("t.json")).unwrap(), original);

    let run = opscope_in(
        &dir,
        &["convert", "t.json", "-o", "out.pftrace"],
        Input::Nothing,
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let run = opscope_in(
        &dir,
        &["convert", "t.json", "-o", "out.pftrace"],
        Input::Nothing,
    );
    assert_error(
        &run,
        "out.pftrace: already exists; pass --force to replace it",
    );
    let run = opscope_in(
        &dir,
        &["convert", "t.json", "-o", "out.pftrace", "--force"],
        Input::Nothing,
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    // The partial file it wrote first is gone, and no file of the user's was touched
    // (`t.partial` was where it once wrote).
    std::fs::write(dir.join("out.partial"), b"mine").unwrap();
    let run = opscope_in(
        &dir,
        &["convert", "t.json", "-o", "out.json", "--force"],
        Input::Nothing,
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(std::fs::read(dir.join("out.partial")).unwrap(), b"mine");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "hard.json",
            "out.json",
            "out.partial",
            "out.pftrace",
            "sub",
            "t.json"
        ]
    );
    // Only a CTF trace directory is replaced, and a directory is no output file.
    let run = opscope_in(
        &dir,
        &["convert", "t.json", "-o", "sub", "--to", "json", "--force"],
        Input::Nothing,
    );
    assert_error(&run, "sub: already exists and is a directory");
    let run = opscope_in(
        &dir,
        &["convert", "t.json", "-o", "sub", "--to", "ctf", "--force"],
        Input::Nothing,
    );
    assert_error(
        &run,
        "sub: already exists and is not a CTF trace directory (a `metadata` file and its stream files, nothing else): it is not replaced, even with --force",
    );
    // An output under a file: each format names the output once, and the OS's reason
    // once (Parquet once said "write failed: Not a directory (os error 20): Not a
    // directory (os error 20)" and no path).
    for (output, message) in [
        (
            "t.json/x.parquet",
            "t.json/x.parquet: cannot write: Not a directory (os error 20)",
        ),
        (
            "t.json/x.json",
            "t.json/x.json: cannot create: Not a directory (os error 20)",
        ),
        (
            "t.json/x.pftrace",
            "t.json/x.pftrace: cannot create: Not a directory (os error 20)",
        ),
        (
            "t.json/x.ctf",
            "t.json/x.ctf: cannot create: t.json is not a directory",
        ),
    ] {
        let run = opscope_in(
            &dir,
            &["convert", "hard.json", "-o", output],
            Input::Nothing,
        );
        assert_error(&run, message);
        assert_eq!(
            run.stderr.matches("os error").count(),
            usize::from(message.contains("os error")),
            "{}",
            run.stderr
        );
    }
}

/// Converts `json` (written to `dir/name.json`) to `dir/name.pftrace` with opscope.
fn pftrace_of(dir: &Path, name: &str, json: &[u8]) -> Vec<u8> {
    std::fs::write(dir.join(format!("{name}.json")), json).unwrap();
    let run = opscope_in(
        dir,
        &[
            "convert",
            &format!("{name}.json"),
            "-o",
            &format!("{name}.pftrace"),
        ],
        Input::Nothing,
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let bytes = std::fs::read(dir.join(format!("{name}.pftrace"))).unwrap();
    std::fs::remove_file(dir.join(format!("{name}.json"))).unwrap();
    std::fs::remove_file(dir.join(format!("{name}.pftrace"))).unwrap();
    bytes
}

/// The warning a cut Perfetto file gives, checked against the cut: its offset is
/// within the last packet's reach and the bytes lost run from it to the end.
fn assert_cut_warning(line: &str, file: &str, len: usize) {
    let prefix = format!("opscope: warning: {file}: byte ");
    let rest = line
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{line}"));
    let (offset, rest) = rest.split_once(':').unwrap();
    let offset: usize = offset.parse().unwrap();
    assert!(offset < len, "{line}");
    assert!(
        rest.starts_with(" the file ends inside a packet (cut off while being written?); the "),
        "{line}"
    );
    let lost = len - offset;
    assert!(
        rest.ends_with(&format!(
            " packets before it are read, the last {lost} bytes ({:.1}% of the file) are lost",
            lost as f64 * 100.0 / len as f64
        )),
        "{line}"
    );
}

/// A `.pftrace` cut at half once read as complete; so did one cut by a recording that
/// was killed while writing. Both read what is there and say what was lost.
#[test]
fn a_cut_perfetto_file_reads_what_is_there_and_says_what_was_lost() {
    let dir = case_dir("cut-pftrace");
    let whole = pftrace_of(&dir, "t", &json_trace(2000));
    let half = &whole[..whole.len() / 2];
    std::fs::write(dir.join("cut.pftrace"), half).unwrap();
    let run = opscope_in(
        &dir,
        &["info", "--format", "json", "cut.pftrace"],
        Input::Nothing,
    );
    assert_eq!(files_read(&run), ["cut.pftrace"]);
    let info: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let slices = info["slices"].as_u64().unwrap();
    assert!((900..1100).contains(&slices), "{slices} slices of 2000");
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert_cut_warning(run.stderr.trim_end(), "cut.pftrace", half.len());
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// `pftrace` laid out as the recorder writes: every few packets a zlib-compressed
/// chunk, one `TracePacket.compressed_packets` (field 50) each.
fn in_recorder_chunks(pftrace: &[u8], packets_per_chunk: usize) -> Vec<u8> {
    let mut packets = Vec::new();
    let mut pos = 0;
    while pos < pftrace.len() {
        let start = pos;
        pos += 1; // the key of `Trace.packet`
        let (mut len, mut shift) = (0usize, 0);
        loop {
            let b = pftrace[pos];
            pos += 1;
            len |= ((b & 0x7f) as usize) << shift;
            shift += 7;
            if b < 0x80 {
                break;
            }
        }
        pos += len;
        packets.push(&pftrace[start..pos]);
    }
    let mut file = Vec::new();
    for chunk in packets.chunks(packets_per_chunk) {
        let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        zlib.write_all(&chunk.concat()).unwrap();
        let compressed = zlib.finish().unwrap();
        let mut packet = Vec::new();
        varint(&mut packet, 50 << 3 | 2);
        varint(&mut packet, compressed.len() as u64);
        packet.extend(compressed);
        file.push(0x0a);
        varint(&mut file, packet.len() as u64);
        file.extend(packet);
    }
    file
}

/// An `opscope record` session left by a full disk or a kill: a program's file, in
/// the recorder's compressed chunks, cut in the middle of a chunk, and the sampler's
/// file empty. The session still reads, with a warning naming each file.
#[test]
fn a_damaged_recording_session_still_reads() {
    let dir = case_dir("session");
    let session = dir.join("opscope-session-1");
    std::fs::create_dir_all(&session).unwrap();
    let whole = in_recorder_chunks(&pftrace_of(&dir, "t", &json_trace(500)), 100);
    let cut = &whole[..whole.len() * 2 / 3];
    std::fs::write(session.join("opscope-4242.pftrace"), cut).unwrap();
    std::fs::write(session.join("opscope-processes-4242.pftrace"), b"").unwrap();
    let run = opscope_in(
        &dir,
        &["info", "--format", "json", "opscope-session-1"],
        Input::Nothing,
    );
    assert_eq!(files_read(&run), ["opscope-session-1/opscope-4242.pftrace"]);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{}", run.stderr);
    assert_eq!(
        lines[0],
        "opscope: warning: opscope-session-1/opscope-processes-4242.pftrace: the file is empty (0 bytes); the other files are still read"
    );
    assert_cut_warning(
        lines[1],
        "opscope-session-1/opscope-4242.pftrace",
        cut.len(),
    );
    // The chunks before the cut are all there.
    let info: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let slices = info["slices"].as_u64().unwrap();
    assert!((100..500).contains(&slices), "{slices} slices of 500");
    // The summary commands read it too.
    for command in ["gpu", "steps"] {
        let run = opscope_in(&dir, &[command, "opscope-session-1"], Input::Nothing);
        assert_eq!(run.code, Some(0), "{command}: {}", run.stderr);
    }
}

/// One empty, cut or corrupt file in a directory is a warning naming it (and the
/// offset); the other files are read. (The corrupt packet's cause is the one Perfetto
/// reader's own since it replaced prost's decoder there: "a varint cut off by the end
/// of its message" where prost said "failed to decode Protobuf message: invalid varint".) Named on its own, it stays an error, as does a
/// directory none of whose files can be read.
#[test]
fn one_bad_file_in_a_directory_leaves_the_others_readable() {
    let dir = case_dir("dir-one-bad");
    let d = dir.join("d");
    std::fs::create_dir_all(&d).unwrap();
    let good = json_trace(10);
    std::fs::write(d.join("a-good.json"), &good).unwrap();
    std::fs::write(d.join("b-empty.json"), b"").unwrap();
    let cut = good.len() / 2;
    std::fs::write(d.join("c-cut.json"), &good[..cut]).unwrap();
    std::fs::write(
        d.join("d-garbage.pftrace"),
        [0x0au8, 0x05, 0xff, 0xff, 0xff, 0xff, 0xff],
    )
    .unwrap();
    let run = opscope_in(&dir, &["info", "--format", "json", "d"], Input::Nothing);
    // The cut file keeps what it held before the cut.
    assert_eq!(files_read(&run), ["d/a-good.json", "d/c-cut.json"]);
    assert_eq!(
        run.stderr,
        format!(
            "opscope: warning: d/b-empty.json: the file is empty (0 bytes); the other files are still read\n\
             opscope: warning: d/c-cut.json: byte {cut}: the JSON ends early: the file looks truncated; the other files are still read\n\
             opscope: warning: d/d-garbage.pftrace: byte 0: not a valid TracePacket: a varint cut off by the end of its message; the other files are still read\n"
        )
    );
    let run = opscope_in(&dir, &["info", "d/b-empty.json"], Input::Nothing);
    assert_error(&run, "d/b-empty.json: the file is empty (0 bytes)");
    std::fs::remove_file(d.join("a-good.json")).unwrap();
    std::fs::remove_file(d.join("c-cut.json")).unwrap();
    let run = opscope_in(&dir, &["info", "d"], Input::Nothing);
    assert_error(
        &run,
        "none of the 2 trace files could be read; the first: d/b-empty.json: the file is empty (0 bytes)",
    );
    std::fs::remove_file(d.join("d-garbage.pftrace")).unwrap();
    let run = opscope_in(&dir, &["info", "d"], Input::Nothing);
    assert_error(&run, "d/b-empty.json: the file is empty (0 bytes)");
}

/// A bit flipped in a `.json.gz` was blamed on the JSON (`expected ',' or '}'`);
/// offsets into decompressed data did not say so.
#[test]
fn damaged_gzip_is_blamed_on_the_gzip_data() {
    let dir = case_dir("gzip");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&json_trace(5000)).unwrap();
    let gz = gz.finish().unwrap();
    let mut flipped = gz.clone();
    flipped[gz.len() / 2] ^= 0x04;
    std::fs::write(dir.join("flipped.json.gz"), &flipped).unwrap();
    let run = opscope_in(&dir, &["info", "flipped.json.gz"], Input::Nothing);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr
            .starts_with("opscope: error: flipped.json.gz: byte ")
            && run.stderr.contains(": the gzip data is corrupt (")
            && run.stderr.ends_with(
                " bytes of decompressed data came before this point of the file \
                 (5000 slices, instants and samples came before the error: --partial analyses them)\n"
            ),
        "{}",
        run.stderr
    );
    std::fs::write(dir.join("cut.json.gz"), &gz[..gz.len() / 2]).unwrap();
    let run = opscope_in(&dir, &["info", "cut.json.gz"], Input::Nothing);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr.starts_with(&format!(
            "opscope: error: cut.json.gz: byte {}: the gzip data ends early (cut off?); ",
            gz.len() / 2
        )),
        "{}",
        run.stderr
    );
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(br#"{"traceEvents": [{"ph": "X"} {}]}"#)
        .unwrap();
    std::fs::write(dir.join("bad-json.json.gz"), gz.finish().unwrap()).unwrap();
    let run = opscope_in(&dir, &["info", "bad-json.json.gz"], Input::Nothing);
    assert_error(
        &run,
        "bad-json.json.gz: byte 29 of the decompressed data: expected ',' or ']' after an event",
    );
}

/// An Nsight Systems export without its StringIds table once gave kernels named
/// `kernel` and calls named `unknown` without a word.
#[test]
fn an_nsys_export_without_string_ids_is_told_of() {
    let dir = case_dir("nsys");
    let script = r#"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.executescript('''
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER, demangledName INTEGER, shortName INTEGER);
INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (200, 260, 0, 1, 7, 42, 2, 3);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER);
INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (100, 150, 83886082, 42, 1);
''')
db.commit()
"#;
    let made = Command::new(python())
        .args(["-c", script])
        .arg(dir.join("no-strings.sqlite"))
        .status();
    if !made.is_ok_and(|s| s.success()) {
        if std::env::var_os("CI").is_some() {
            panic!("CI is set but python3 with sqlite3 is missing");
        }
        opscope_corpus::skip("no python3 with sqlite3 to make the export");
        return;
    }
    let run = opscope_in(&dir, &["info", "no-strings.sqlite"], Input::Nothing);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        run.stderr,
        "opscope: warning: no-strings.sqlite: 2 kernels, API calls and NVTX ranges have no name (the export has no StringIds table): they are called `kernel`, `unknown` or nothing\n"
    );
}

/// A FIFO with no writer once hung; pipes, `-` and `/dev/stdin` were "empty (0
/// bytes)"; `/dev/urandom` too. Pipes are read as streams; other files that are not
/// regular are refused.
#[test]
fn pipes_fifos_and_devices() {
    let dir = case_dir("pipes");
    let trace = json_trace(3);
    std::fs::write(dir.join("t.json"), &trace).unwrap();
    let fifo = dir.join("p.json");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());

    let started = Instant::now();
    let run = opscope_in(&dir, &["info", "p.json"], Input::Nothing);
    assert_error(
        &run,
        "p.json: a FIFO that nothing came through in 10 s (no writer?)",
    );
    // It gave up rather than hang (10 s of waiting; generous for a loaded machine).
    assert!(started.elapsed() < Duration::from_secs(120));

    // With a writer, the FIFO is read.
    let writer = {
        let (fifo, trace) = (fifo.clone(), trace.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            std::fs::OpenOptions::new()
                .write(true)
                .open(&fifo)
                .unwrap()
                .write_all(&trace)
                .unwrap();
        })
    };
    let run = opscope_in(
        &dir,
        &["info", "--format", "json", "p.json"],
        Input::Nothing,
    );
    writer.join().unwrap();
    assert_eq!(files_read(&run), ["p.json"]);

    // In a directory, a FIFO is skipped rather than waited for.
    let run = opscope_in(&dir, &["info", "--format", "json", "."], Input::Nothing);
    assert_eq!(files_read(&run), ["./t.json"]);
    assert_eq!(
        run.stderr,
        "opscope: warning: ./p.json: not a regular file (a FIFO); skipped\n"
    );

    for name in ["-", "/dev/stdin"] {
        let run = opscope_in(
            &dir,
            &["info", "--format", "json", name],
            Input::Bytes(trace.clone()),
        );
        let shown = if name == "-" { "standard input" } else { name };
        assert_eq!(files_read(&run), [shown], "{}", run.stderr);
    }
    let run = opscope_in(&dir, &["info", "-"], Input::Bytes(Vec::new()));
    assert_error(&run, "standard input: nothing came in (0 bytes)");
    // `cat /dev/urandom | opscope info -`: refused from its first bytes.
    let run = opscope_in(&dir, &["info", "-"], Input::Endless);
    assert_error(&run, "standard input: not a trace opscope can read (neither JSON nor a Perfetto protobuf, from byte 0); from a pipe, opscope reads JSON, gzip'd JSON, Perfetto, XPlane and Nsight Systems exports");
    // A gzip'd trace through a pipe.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&trace).unwrap();
    let run = opscope_in(
        &dir,
        &["info", "--format", "json", "-"],
        Input::Bytes(gz.finish().unwrap()),
    );
    assert_eq!(files_read(&run), ["standard input"]);

    for (device, kind) in [
        ("/dev/urandom", "a character device"),
        ("/dev/null", "a character device"),
    ] {
        let run = opscope_in(&dir, &["info", device], Input::Nothing);
        assert_error(
            &run,
            &format!("{device}: not a regular file ({kind}); opscope reads trace files, directories of them, and pipes (`-` is standard input)"),
        );
    }

    // `opscope info <(cat t.json)`, as a shell passes it: /dev/fd/N, a pipe.
    if Command::new("bash")
        .arg("-c")
        .arg("true")
        .status()
        .is_ok_and(|s| s.success())
    {
        let mut command = Command::new("bash");
        command
            .current_dir(&dir)
            .arg("-c")
            .arg(r#"exec "$0" info --format json <(cat t.json)"#)
            .arg(env!("CARGO_BIN_EXE_opscope"));
        let run = run_limited(command, Input::Nothing);
        let files = files_read(&run);
        assert!(
            files.len() == 1 && files[0].starts_with("/dev/fd/"),
            "{files:?}"
        );
    }
}

/// 300 MB of Kineto-like events into `out`, as a whole trace.
fn write_long_trace(out: &mut impl Write) {
    out.write_all(b"{\"traceEvents\": [\n").unwrap();
    let mut written = 0usize;
    let mut i = 0u64;
    while written < 300 << 20 {
        let event = format!(
            "{{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::op{}\", \"pid\": 1, \"tid\": {}, \"ts\": {}, \"dur\": 3, \"args\": {{\"External id\": {i}}}}},\n",
            i % 97,
            i % 4,
            i * 5
        );
        out.write_all(event.as_bytes()).unwrap();
        written += event.len();
        i += 1;
    }
    out.write_all(b"{\"ph\": \"i\", \"name\": \"end\", \"pid\": 1, \"tid\": 0, \"ts\": 0}]}\n")
        .unwrap();
}

/// Runs `opscope info` on `path`, cuts the file to `cut_at` bytes once `started` says
/// it is being read, and returns what opscope wrote on stderr (it must fail).
fn cut_while_read(path: &Path, cut_at: u64, started: impl Fn(u32) -> bool) -> String {
    let child = Command::new(env!("CARGO_BIN_EXE_opscope"))
        .args(["info", "--no-cache", "--quiet"])
        .arg(path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !started(child.id()) {
        assert!(
            Instant::now() < deadline,
            "opscope never began reading {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(cut_at)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    stderr
}

/// A mapped trace cut short by another process while opscope reads it (a profiler
/// writing it again): the kernel's SIGBUS becomes an error naming the file and the
/// byte, not "Bus error (core dumped)". The file (gzip'd JSON, which is mapped and
/// inflated) is cut once opscope has mapped it, while it reads its 300 MB of text.
#[test]
fn a_mapped_file_cut_while_it_is_read_is_named_with_the_byte() {
    let dir = scratch_dir("cut-while-mapped");
    let path = dir.join("growing.json.gz");
    {
        let file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
        write_long_trace(&mut gz);
        gz.finish().unwrap();
    }
    let name = path.to_str().unwrap();
    let cut_at = 4096u64;
    let stderr = cut_while_read(&path, cut_at, |pid| {
        std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains(name))
    });
    assert!(
        stderr.contains(&format!(
            "{name}: the file was cut short while it was read (reading byte "
        )),
        "{stderr}"
    );
    let byte = number_after(&stderr, "(reading byte ", ' ');
    // The first byte the kernel refuses is past the page the file still has.
    assert!(byte >= cut_at, "{stderr}");
}

/// A JSON trace (read, not mapped) cut short by another process while opscope reads
/// it: the error names the file, says it was cut while read and how long it was, and
/// gives the byte where it then ended, not only that the JSON ends early.
#[test]
fn a_json_file_cut_while_it_is_read_is_named_with_the_byte() {
    let dir = scratch_dir("cut-while-read");
    let path = dir.join("growing.json");
    write_long_trace(&mut std::io::BufWriter::new(
        std::fs::File::create(&path).unwrap(),
    ));
    let len = std::fs::metadata(&path).unwrap().len();
    let cut_at = 4096u64;
    // Cut once opscope has read some of it.
    let stderr = cut_while_read(&path, cut_at, |pid| {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            return false;
        };
        fds.flatten().any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|target| target == path)
                && std::fs::read_to_string(format!(
                    "/proc/{pid}/fdinfo/{}",
                    fd.file_name().to_string_lossy()
                ))
                .is_ok_and(|info| {
                    info.lines()
                        .find_map(|l| l.strip_prefix("pos:"))
                        .and_then(|p| p.trim().parse::<u64>().ok())
                        .is_some_and(|pos| pos > 512)
                })
        })
    });
    let name = path.to_str().unwrap();
    let expected =
        format!(": the file was cut short while it was read (it had {len} bytes when opened)");
    assert!(
        stderr.contains(&format!("{name}: byte ")) && stderr.contains(&expected),
        "{stderr}"
    );
    let byte = number_after(&stderr, ": byte ", ':');
    assert!(byte >= cut_at && byte < len, "{stderr}");
}

/// The number in `text` between `marker` and `end`.
fn number_after(text: &str, marker: &str, end: char) -> u64 {
    text.split(marker)
        .nth(1)
        .and_then(|rest| rest.split(end).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {marker:?} in: {text}"))
}

/// What a tool that reads a binary file as UTF-8 text leaves of it: every byte above
/// 0x7f replaced by U+FFFD.
fn through_text(bytes: &[u8]) -> Vec<u8> {
    String::from_utf8_lossy(
        &bytes
            .iter()
            .flat_map(|&b| if b < 0x80 { vec![b] } else { vec![0xff] })
            .collect::<Vec<u8>>(),
    )
    .into_owned()
    .into_bytes()
}

/// A binary trace that went through a text conversion is named as such, whatever its
/// format and however it comes (file, standard input): Perfetto, XPlane and a
/// RunMetadata. Before: "the file looks truncated", "invalid varint", "buffer
/// underflow", at byte 0.
#[test]
fn a_binary_file_that_went_through_a_text_conversion_is_named_as_such() {
    let dir = case_dir("text-converted");
    let pftrace = pftrace_of(&dir, "ops", &json_trace(500));
    std::fs::write(dir.join("ops.pftrace"), through_text(&pftrace)).unwrap();
    let said = "this binary file went through a text conversion: every byte above 0x7f was \
                replaced by U+FFFD (EF BF BD), as a tool that reads a file as UTF-8 text does \
                (a copy or download in text mode, a text editor); get the original file";
    let run = opscope_in(&dir, &["info", "ops.pftrace"], Input::Nothing);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("ops.pftrace: {said}")),
        "{}",
        run.stderr
    );
    let run = opscope_in(&dir, &["info", "-"], Input::Bytes(through_text(&pftrace)));
    assert!(
        run.stderr.contains(&format!("standard input: {said}")),
        "{}",
        run.stderr
    );
    if let Some(traces) = common::shared_traces() {
        let xplane =
            std::fs::read(traces.join("xplane/GPU-multi-worker/34.83.195.179_6003.xplane.pb"))
                .unwrap();
        std::fs::write(dir.join("host.xplane.pb"), through_text(&xplane)).unwrap();
        let run = opscope_in(&dir, &["info", "host.xplane.pb"], Input::Nothing);
        assert_error(&run, &format!("host.xplane.pb: {said}"));
        let run_meta = traces.join("tf-timeline/generated-here/tf2.21-cpu-mlp");
        std::fs::create_dir_all(dir.join("tf")).unwrap();
        std::fs::write(
            dir.join("tf/run_meta"),
            through_text(&std::fs::read(run_meta.join("run_meta")).unwrap()),
        )
        .unwrap();
        std::fs::copy(run_meta.join("graph.pbtxt"), dir.join("tf/graph.pbtxt")).unwrap();
        let run = opscope_in(&dir, &["info", "tf/run_meta"], Input::Nothing);
        assert_error(&run, &format!("tf/run_meta: {said}"));
    }
}

/// A bare event array with no closing `]`, written as Chrome's py_trace_event writes it
/// (each event followed by a comma, so that a process killed while tracing leaves a
/// whole trace; the Trace Event Format makes the `]` optional), reads whole, as a file
/// and on standard input. Cut inside an event it is still truncated. Before: "the JSON
/// ends early: the file looks truncated" for all three.
#[test]
fn a_bare_array_without_its_closing_bracket_is_a_whole_trace() {
    let dir = case_dir("bare-array-open");
    let mut text = String::from("[");
    for i in 0..3 {
        text.push_str(&format!(
            "{{\"ph\":\"X\",\"name\":\"op{i}\",\"pid\":1,\"tid\":1,\"ts\":{},\"dur\":5}},\n",
            10 * i
        ));
    }
    std::fs::write(dir.join("open.json"), &text).unwrap();
    let slices = |run: &Run| {
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        assert_eq!(run.stderr, "");
        let info: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        info["slices"].as_u64().unwrap()
    };
    let run = opscope_in(
        &dir,
        &["info", "--format", "json", "open.json"],
        Input::Nothing,
    );
    assert_eq!(slices(&run), 3);
    let piped = opscope_in(
        &dir,
        &["info", "--format", "json", "-"],
        Input::Bytes(text.clone().into_bytes()),
    );
    assert_eq!(slices(&piped), 3);
    let cut = text.len() - 10;
    std::fs::write(dir.join("cut.json"), &text[..cut]).unwrap();
    let run = opscope_in(&dir, &["info", "cut.json"], Input::Nothing);
    assert_eq!(run.code, Some(1));
    assert!(
        run.stderr
            .contains(&format!("cut.json: byte {cut}: the JSON ends early")),
        "{}",
        run.stderr
    );
}

/// A real Kineto trace cut while it was written (at 60 %, inside an event). Named alone
/// it is an error that says how many events came before the cut and that `--partial`
/// analyses them. With `--partial` it is a warning, and `info`, `gpu` and `steps` say
/// what they say of the same file ended by hand after its last whole event, the rank
/// included (Kineto writes `distributedInfo` before the events). Before: no count and
/// no flag, and a cut file lost its rank even when read from a directory.
#[test]
fn a_cut_kineto_trace_is_analysed_in_part_with_partial() {
    let Some(traces) = common::shared_traces() else {
        return;
    };
    let dir = case_dir("cut-kineto");
    let gz = std::fs::read(traces.join("kineto/hta/df_index_resolver/df_index_resolver.json.gz"))
        .unwrap();
    let mut whole = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut whole).unwrap();
    let cut = whole.len() * 3 / 5;
    // Kineto ends each event with a line `  },`: the prefix up to the last one before
    // the cut, closed, is the trace of the events written whole.
    let last_end = whole[..cut]
        .windows(5)
        .rposition(|w| w == b"\n  },")
        .expect("an event ends before the cut");
    assert!(last_end + 5 < cut, "the cut is inside an event");
    let mut ended = whole[..last_end + 4].to_vec();
    ended.extend_from_slice(b"\n]}\n");
    std::fs::write(dir.join("cut.json"), &whole[..cut]).unwrap();
    std::fs::write(dir.join("ended.json"), &ended).unwrap();

    let json = |args: &[&str]| -> serde_json::Value {
        let run = opscope_in(&dir, args, Input::Nothing);
        assert_eq!(run.code, Some(0), "{args:?}: {}", run.stderr);
        let mut value: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        // The only difference allowed: the file's name.
        fn unname(v: &mut serde_json::Value) {
            match v {
                serde_json::Value::String(s) if s == "cut.json" || s == "ended.json" => {
                    *s = "FILE".into()
                }
                serde_json::Value::Array(a) => a.iter_mut().for_each(unname),
                serde_json::Value::Object(o) => o.values_mut().for_each(unname),
                _ => {}
            }
        }
        unname(&mut value);
        value
    };
    let info = json(&["info", "--no-cache", "--format", "json", "ended.json"]);
    assert_eq!(info["files"][0]["rank"], 1, "{info}");
    let events = ["slices", "instants", "counter_samples"]
        .iter()
        .map(|k| info[k].as_u64().unwrap())
        .sum::<u64>();

    let run = opscope_in(&dir, &["info", "--no-cache", "cut.json"], Input::Nothing);
    assert_error(
        &run,
        &format!(
            "cut.json: byte {cut}: the JSON ends early: the file looks truncated \
             ({events} slices, instants and samples came before the error: --partial analyses them)"
        ),
    );
    for command in [&["info"][..], &["gpu"], &["steps"]] {
        let args = |file| [command, &["--no-cache", "--format", "json", file]].concat();
        let (mut ended, mut cut) = (
            json(&args("ended.json")),
            json(&[&args("cut.json")[..], &["--partial"]].concat()),
        );
        if command == ["steps"] {
            // Only the file known to be cut has steps ending after its data, marked so
            // (the last one showed whole, with its missing work as idle time); they
            // are the last steps.
            let cut_steps = |report: &mut serde_json::Value| -> Vec<bool> {
                let mut flags = Vec::new();
                for source in report["sources"].as_array_mut().unwrap() {
                    let short = source.as_object_mut().unwrap().remove("cut_short");
                    flags.push(short.unwrap().as_bool().unwrap());
                    for step in source["steps"].as_array_mut().unwrap() {
                        let step = step.as_object_mut().unwrap();
                        flags.push(step.remove("cut").unwrap().as_bool().unwrap());
                    }
                }
                flags
            };
            // Each source's flag comes first, then its steps'.
            assert!(!cut_steps(&mut ended).contains(&true), "{ended}");
            let flags = cut_steps(&mut cut);
            assert!(flags[0], "{cut}");
            let first = 1 + flags[1..].iter().position(|&c| c).expect("a step cut");
            assert!(flags[first..].iter().all(|&c| c) && first > 1, "{flags:?}");
            for report in [&mut ended, &mut cut] {
                report["across"] = serde_json::Value::Null;
            }
        }
        assert_eq!(ended, cut, "{command:?}");
    }
    let text = opscope_in(
        &dir,
        &["steps", "--no-cache", "--partial", "cut.json"],
        Input::Nothing,
    );
    assert!(
        text.stdout.contains("the file was cut short (--partial): 3 steps: ProfilerStep#4 to ProfilerStep#6 ended after its data"),
        "{}",
        text.stdout
    );
    let run = opscope_in(
        &dir,
        &["info", "--no-cache", "--partial", "cut.json"],
        Input::Nothing,
    );
    assert_eq!(
        run.stderr,
        format!(
            "opscope: warning: cut.json: byte {cut}: the JSON ends early: the file looks \
             truncated; what was read before it is analysed\n"
        )
    );
}
