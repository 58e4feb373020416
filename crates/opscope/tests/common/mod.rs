//! Helpers of the end-to-end tests: running the binary, finding the shared corpus of
//! real traces, and running the Python oracles in `tests/oracle`.
#![allow(dead_code)] // each test file uses its own subset

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn opscope(args: &[&str]) -> Output {
    opscope_with_cache(&test_cache_dir(), args)
}

/// Runs opscope with its model cache in `cache`.
pub fn opscope_with_cache(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_opscope"))
        .args(args)
        .env("OPSCOPE_CACHE_DIR", cache)
        .output()
        .expect("the opscope binary runs")
}

/// Runs opscope and requires success, showing its stderr otherwise.
pub fn opscope_ok(args: &[&str]) -> Output {
    opscope_ok_with_cache(&test_cache_dir(), args)
}

/// [`opscope_ok`] with the model cache in `cache`.
pub fn opscope_ok_with_cache(cache: &Path, args: &[&str]) -> Output {
    let out = opscope_with_cache(cache, args);
    assert!(
        out.status.success(),
        "opscope {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The model cache the tests share, under the build directory rather than the user's
/// home: tests that load the same trace read each other's saved models, so their
/// comparisons with the peers cover the cache as well as the parsers.
pub fn test_cache_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("model-cache")
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

// Not every test binary that compiles this module looks for the corpus.
#[allow(unused_imports)]
pub use opscope_corpus::traces as shared_traces;

pub mod browser;
#[allow(dead_code)]
pub mod viewer;

/// GETs `path` under `url` (a viewer's address, `http://HOST:PORT/TOKEN/`) and parses
/// the answer as JSON.
pub fn http_json(url: &str, path: &str) -> serde_json::Value {
    let body = http_text(url, path);
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

/// GETs `path` under `url`: the answer's body.
pub fn http_text(url: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("an http address");
    let (host, base) = rest.split_once('/').unwrap();
    let mut s = std::net::TcpStream::connect(host).unwrap();
    write!(s, "GET /{base}{path} HTTP/1.0\r\nHost: {host}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string()
}

pub fn python() -> String {
    std::env::var("OPSCOPE_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// The test Python has `modules`; off CI a missing one skips the test (saying so), with
/// `CI` set it fails the test.
pub fn python_with(modules: &[&str]) -> bool {
    let check = format!("import {}", modules.join(", "));
    let ok = Command::new(python())
        .args(["-c", &check])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        if std::env::var_os("CI").is_some() {
            panic!(
                "CI is set but `{}` cannot `{check}` (set OPSCOPE_PYTHON; tests/requirements.txt)",
                python()
            );
        }
        opscope_corpus::skip(&format!(
            "`{}` cannot `{check}` (set OPSCOPE_PYTHON)",
            python()
        ));
    }
    ok
}

/// A test's own directory under the system's temporary directory. It is removed when
/// the test passes and kept when it fails (the failure message can then name files
/// in it): runs of the suite otherwise left gigabytes behind and filled the disk.
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for Scratch {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

pub fn scratch_dir(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("opscope-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// Runs one of the Python oracles in `tests/oracle` with `args`; its standard output,
/// once it succeeded.
pub fn oracle_stdout<A: AsRef<std::ffi::OsStr>>(script: &str, args: &[A]) -> Vec<u8> {
    oracle_stdout_with(&python(), script, args)
}

/// [`oracle_stdout`] with another Python (HTA's venv).
pub fn oracle_stdout_with<A: AsRef<std::ffi::OsStr>>(
    python: &str,
    script: &str,
    args: &[A],
) -> Vec<u8> {
    let out = Command::new(python)
        .arg(repo_root().join("tests/oracle").join(script))
        .args(args)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The Python with HTA on pandas 2 (HTA 0.5.0's critical path needs it):
/// `OPSCOPE_HTA_PYTHON`, which .ci/run makes from tests/requirements-hta.txt; off CI a
/// missing one skips the test, saying so.
/// The include directories of NVIDIA's CUDA and CUPTI headers that the stand-in
/// libcupti is built against (`OPSCOPE_CUDA_HEADERS`, `:`-separated, as
/// `tests/cuda-headers.sh` prints them); off CI a missing one skips the test, on CI it
/// fails it.
pub fn cuda_headers() -> Option<Vec<PathBuf>> {
    let dirs: Vec<PathBuf> = std::env::var("OPSCOPE_CUDA_HEADERS")
        .unwrap_or_default()
        .split(':')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    let ok = dirs.iter().any(|d| d.join("cupti_activity.h").is_file())
        && dirs.iter().any(|d| d.join("cuda.h").is_file());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but OPSCOPE_CUDA_HEADERS ({dirs:?}) lacks cupti_activity.h or cuda.h \
             (tests/cuda-headers.sh)"
        );
        opscope_corpus::skip(
            "CUDA headers: set OPSCOPE_CUDA_HEADERS to what tests/cuda-headers.sh prints",
        );
        return None;
    }
    Some(dirs)
}

pub fn hta_python() -> Option<String> {
    let python = std::env::var("OPSCOPE_HTA_PYTHON").ok();
    let ok = python.as_ref().is_some_and(|p| {
        Command::new(p)
            .args([
                "-c",
                "import hta, pandas; assert int(pandas.__version__[0]) < 3",
            ])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but OPSCOPE_HTA_PYTHON ({python:?}) has no HTA on pandas 2 \
             (tests/requirements-hta.txt)"
        );
        opscope_corpus::skip("HTA: set OPSCOPE_HTA_PYTHON (tests/requirements-hta.txt)");
        return None;
    }
    python
}

/// An oracle that prints one JSON document.
pub fn run_oracle_json<A: AsRef<std::ffi::OsStr>>(script: &str, args: &[A]) -> serde_json::Value {
    serde_json::from_slice(&oracle_stdout(script, args)).unwrap()
}

/// An oracle that prints one JSON line per file of `files`, by path.
pub fn run_oracle(script: &str, files: &[PathBuf]) -> HashMap<String, serde_json::Value> {
    String::from_utf8(oracle_stdout(script, files))
        .unwrap()
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            (v["path"].as_str().unwrap().to_string(), v)
        })
        .collect()
}

/// A binary built beside opscope by the workspace (the example, the injected library).
/// `cargo test` leaves a library built only for tests in `deps/`: the newer copy wins.
pub fn built(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_opscope"))
        .parent()
        .unwrap()
        .to_path_buf();
    let newest = [dir.join(name), dir.join("deps").join(name)]
        .into_iter()
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max();
    match newest {
        Some((_, path)) => path,
        None => panic!(
            "{name} is missing from {}: build the workspace (`cargo test --workspace` does)",
            dir.display()
        ),
    }
}

/// Requires `out` to be a success, showing its output otherwise.
pub fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({}): {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Compiles `tests/record/SOURCE` (then `extra`: more sources, flags, libraries) into
/// `output` with the system's C compiler.
pub fn compile_c<S: AsRef<std::ffi::OsStr>>(source: &str, output: &Path, extra: &[S]) {
    std::fs::create_dir_all(output.parent().unwrap()).unwrap();
    let compiled = Command::new("cc")
        .arg("-O2")
        .arg(repo_root().join("tests/record").join(source))
        .args(extra)
        .arg("-o")
        .arg(output)
        .output()
        .expect("a C compiler (cc)");
    assert_ok(&compiled, &format!("compiling {source}"));
}

/// ittnotify's C library as the ittapi-sys crate ships it (the example's dependency).
pub fn ittnotify_sources() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline"])
        // Offline, only this platform's packages are there to resolve.
        .arg("--filter-platform")
        .arg(format!("{}-unknown-linux-gnu", std::env::consts::ARCH))
        .arg("--manifest-path")
        .arg(repo_root().join("Cargo.toml"))
        .output()
        .expect("cargo runs");
    assert_ok(&out, "cargo metadata");
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let crate_dir = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "ittapi-sys")
        .map(|p| {
            Path::new(p["manifest_path"].as_str().unwrap())
                .parent()
                .unwrap()
                .to_path_buf()
        })
        .expect("ittapi-sys among the workspace's packages");
    crate_dir.join("c-library")
}

/// `tests/record/NAME.c` compiled with ittnotify's static part into DIR.
pub fn compile_itt_program(dir: &Path, name: &str) -> PathBuf {
    let itt = ittnotify_sources();
    let program = dir.join(name);
    let extra = [
        format!("-I{}", itt.join("include").display()),
        format!("-I{}", itt.join("src/ittnotify").display()),
        itt.join("src/ittnotify/ittnotify_static.c")
            .display()
            .to_string(),
        "-ldl".into(),
        "-lpthread".into(),
    ];
    compile_c(&format!("{name}.c"), &program, &extra);
    program
}

/// Eight rank files in `dir/ranks`: the two shared ranks of `kineto/hta/trace_filter`
/// four times, each copy numbered as its own rank in its `distributedInfo`, and copy
/// `k`'s kernels `k × stretch` longer (so that ranks differ, for a straggler); `None`
/// without the shared traces.
#[allow(dead_code)]
pub fn eight_ranks(dir: &Path, stretch: f64) -> Option<PathBuf> {
    use std::io::{Read, Write};
    let traces = shared_traces()?.join("kineto/hta/trace_filter");
    let ranks = dir.join("ranks");
    let _ = std::fs::remove_dir_all(&ranks);
    std::fs::create_dir_all(&ranks).unwrap();
    for copy in 0..4 {
        for rank in 0..2 {
            let path = traces.join(format!("sampled_rank-{rank}.json.gz"));
            let mut json = String::new();
            flate2::read::GzDecoder::new(std::fs::File::open(&path).ok()?)
                .read_to_string(&mut json)
                .unwrap();
            let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
            let new_rank = copy * 2 + rank;
            v["distributedInfo"]["rank"] = new_rank.into();
            v["distributedInfo"]["world_size"] = 8.into();
            let factor = 1.0 + copy as f64 * stretch;
            if factor != 1.0 {
                for e in v["traceEvents"].as_array_mut().unwrap() {
                    if e["cat"] == "kernel" {
                        if let Some(dur) = e["dur"].as_f64() {
                            e["dur"] = (dur * factor).round().into();
                        }
                    }
                }
            }
            let out =
                std::fs::File::create(ranks.join(format!("rank-{new_rank}.json.gz"))).unwrap();
            let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
            gz.write_all(serde_json::to_string(&v).unwrap().as_bytes())
                .unwrap();
            gz.finish().unwrap();
        }
    }
    Some(ranks)
}

/// Whether `name` is a file the injected library wrote in a session (`opscope-PID.pftrace`),
/// rather than the samplers' (`opscope-processes-*`, `opscope-stacks-*`).
pub fn is_recorders_file(name: &str) -> bool {
    name.strip_prefix("opscope-")
        .and_then(|n| n.strip_suffix(".pftrace"))
        .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

/// `tests/record/diff_program.py`'s own timing of its steps (its `--log`): per step, the
/// nanoseconds its data loader took and the whole step's.
pub fn diff_program_timings(log: &Path) -> Vec<(f64, f64)> {
    let text = std::fs::read_to_string(log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    text.lines()
        .map(|line| {
            let mut numbers = line.split(' ').map(|n| n.parse::<f64>().unwrap());
            (numbers.next().unwrap(), numbers.next().unwrap())
        })
        .collect()
}

/// The median of `values` (the mean of the middle two of an even count), as `diff`
/// takes it.
pub fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.into_iter().collect();
    assert!(!v.is_empty(), "the median of nothing");
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs `tests/record/jax_profiled_sessions.py` once per entry of `processes`, one after
/// another, each profiling itself into the log directory `logdir` in one session per
/// batch size of its entry (`"512,2048"`: two sessions); panics if one fails. The
/// caller checks `python_with(&["jax"])` first.
pub fn jax_profiled_sessions(logdir: &Path, processes: &[&str]) {
    for batches in processes {
        let out = Command::new(python())
            .arg(repo_root().join("tests/record/jax_profiled_sessions.py"))
            .arg(logdir)
            .arg(batches)
            .output()
            .expect("python runs");
        assert_ok(&out, &format!("jax_profiled_sessions.py {batches}"));
    }
}
