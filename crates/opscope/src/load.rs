//! Finding and loading trace files: a TRACE argument is a file or a directory (searched
//! recursively for trace files); files are memory-mapped, gzip is inflated, and each
//! is imported into one shared model, with a progress bar on long loads. A directory
//! holding a `metadata` file is a CTF trace: its stream files are read together (an
//! LTTng session directory holds several such traces).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use opscope_model::{SourceId, Trace};

use crate::cache;

/// What loading was asked to do.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Never show a progress bar (it is shown only on a terminal, for big inputs).
    pub quiet: bool,
    /// Read the model from the model cache when it holds these very files, and save
    /// it there after parsing them (see [`crate::cache`]).
    pub cache: bool,
}

/// The traces a command reads, as every analysis command takes them.
#[derive(clap::Args, Debug)]
pub struct Inputs {
    /// Trace files or directories of trace files.
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
    /// Parse the files even when the model cache holds them, and do not save the model
    /// there (the cache is under ~/.cache/opscope/models; OPSCOPE_CACHE_DIR moves it,
    /// OPSCOPE_CACHE_DIR=off turns it off).
    #[arg(long)]
    pub no_cache: bool,
}

impl Inputs {
    pub fn load(&self) -> Result<Trace> {
        load(&self.traces, &self.options())
    }

    pub fn options(&self) -> LoadOptions {
        LoadOptions {
            quiet: self.quiet,
            cache: !self.no_cache,
        }
    }
}

/// File names opscope reads when it walks a directory.
fn is_trace_file(path: &Path) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    if opscope_formats::run_metadata::is_run_metadata_path(&name) {
        return true;
    }
    [
        ".json",
        ".json.gz",
        ".pftrace",
        ".xplane.pb",
        ".perfetto-trace",
        ".pftrace.gz",
        ".perfetto",
        ".sqlite",
    ]
    .iter()
    .any(|ext| name.ends_with(ext))
}

/// Whether `dir` is a CTF trace (it holds a `metadata` file).
fn is_ctf_dir(dir: &Path) -> bool {
    dir.join("metadata").is_file()
}

/// Expands the TRACE arguments into the files to load, in a stable order. A CTF trace
/// is listed as its directory.
pub fn expand(inputs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for input in inputs {
        let meta = std::fs::metadata(input)
            .with_context(|| format!("{}: cannot open", input.display()))?;
        if meta.is_dir() {
            let mut found = Vec::new();
            walk(input, &mut found)?;
            if found.is_empty() {
                bail!(
                    "{}: no trace files in this directory (looked for .json, .json.gz, .pftrace, .xplane.pb, run_meta, .sqlite, and CTF directories with a `metadata` file)",
                    input.display()
                );
            }
            found.sort();
            files.extend(found);
        } else if input.file_name().is_some_and(|n| n == "metadata") {
            // `TRACE/metadata` stands for the CTF trace `TRACE`.
            files.push(input.parent().unwrap_or(Path::new(".")).to_path_buf());
        } else {
            files.push(input.clone());
        }
    }
    Ok(files)
}

fn walk(dir: &Path, found: &mut Vec<PathBuf>) -> Result<()> {
    if is_ctf_dir(dir) {
        found.push(dir.to_path_buf());
        return Ok(());
    }
    for entry in
        std::fs::read_dir(dir).with_context(|| format!("{}: cannot list", dir.display()))?
    {
        let path = entry?.path();
        if path.is_dir() {
            walk(&path, found)?;
        } else if is_trace_file(&path) && !is_copy_of_an_xplane(&path) {
            found.push(path);
        }
    }
    Ok(())
}

/// The JAX and TensorFlow profilers write `<host>.trace.json.gz` beside
/// `<host>.xplane.pb`: the same events, converted. In a directory only the XPlane is
/// read, so nothing counts twice (named on the command line, the JSON is read).
fn is_copy_of_an_xplane(path: &Path) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    name.strip_suffix(".trace.json.gz")
        .is_some_and(|host| path.with_file_name(format!("{host}.xplane.pb")).is_file())
}

/// Loads every file of `inputs` into one trace.
pub fn load(inputs: &[PathBuf], options: &LoadOptions) -> Result<Trace> {
    let files = expand(inputs)?;
    let total: u64 = files.iter().map(|f| input_bytes(f)).sum();
    let entry = (options.cache && total >= cache::MIN_INPUT_BYTES)
        .then(cache::directory)
        .flatten()
        .and_then(|dir| {
            let inputs = files.iter().map(|f| (f.clone(), files_read(f))).collect();
            cache::Entry::for_inputs(&dir, inputs)
        });
    if let Some(trace) = entry.as_ref().and_then(cache::Entry::read) {
        print_warnings(&trace);
        return Ok(trace);
    }
    let parse_started = std::time::Instant::now();
    let bar = progress_bar(total, options);
    let mut trace = Trace::new();
    for file in &files {
        let shown = file.display().to_string();
        bar.set_message(shown.clone());
        load_file(file, &shown, &mut trace)?;
        bar.inc(input_bytes(file));
    }
    bar.finish_and_clear();
    number_hosts_of_runs(&mut trace);
    unite_recorded_processes(&mut trace);
    // A recording session mixes opscope's CLOCK_MONOTONIC files with frameworks'
    // Unix-time ones (XPlane): one time line for all.
    opscope_model::clock_sync::align_to_unix(&mut trace);
    print_warnings(&trace);
    trace.shrink_to_fit();
    if let Some(entry) = entry {
        entry.write(&trace, parse_started.elapsed());
    }
    Ok(trace)
}

fn print_warnings(trace: &Trace) {
    for (_, warning) in &trace.warnings {
        eprintln!("opscope: warning: {warning}");
    }
}

/// The files importing `input` reads: a CTF trace's metadata and stream files, a
/// RunMetadata and the GraphDef beside it, an SQLite database and its write-ahead log
/// (which SQLite reads, when there is one), or the file alone.
fn files_read(input: &Path) -> Vec<PathBuf> {
    if input.is_dir() {
        let mut files = vec![input.join("metadata")];
        files.extend(ctf_stream_files(input).unwrap_or_default());
        return files;
    }
    let mut files = vec![input.to_path_buf()];
    if opscope_formats::run_metadata::is_run_metadata_path(&input.to_string_lossy()) {
        files.extend(graph_candidates(input).unwrap_or_default());
    }
    if is_sqlite(input) {
        let mut wal = input.as_os_str().to_owned();
        wal.push("-wal");
        files.push(wal.into());
    }
    files
}

fn is_sqlite(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 16];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| &magic == b"SQLite format 3\0")
}

/// Bytes of a trace file, or of a CTF directory's files.
fn input_bytes(path: &Path) -> u64 {
    if path.is_dir() {
        ctf_stream_files(path)
            .map(|files| {
                files
                    .iter()
                    .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
                    .sum()
            })
            .unwrap_or(0)
    } else {
        std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
    }
}

/// The stream files of a CTF trace directory: every regular file but `metadata` and
/// hidden files, in name order (`index/` and other directories are skipped).
fn ctf_stream_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in
        std::fs::read_dir(dir).with_context(|| format!("{}: cannot list", dir.display()))?
    {
        let path = entry?.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if path.is_file() && name != "metadata" && !name.starts_with('.') {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

fn map_file(file: &Path, shown: &str) -> Result<Option<memmap2::Mmap>> {
    let handle = File::open(file).with_context(|| format!("{shown}: cannot open"))?;
    if handle.metadata().map(|m| m.len()).unwrap_or(0) == 0 {
        return Ok(None);
    }
    // SAFETY: as in `load_file`: read-only, alive only while the trace is imported.
    let map =
        unsafe { memmap2::Mmap::map(&handle) }.with_context(|| format!("{shown}: cannot map"))?;
    Ok(Some(map))
}

/// Loads a CTF trace directory (its `metadata` and stream files) as one source.
fn load_ctf(dir: &Path, shown: &str, trace: &mut Trace) -> Result<()> {
    let metadata_path = dir.join("metadata");
    let metadata_shown = metadata_path.display().to_string();
    let metadata =
        std::fs::read(&metadata_path).with_context(|| format!("{metadata_shown}: cannot read"))?;
    let files = ctf_stream_files(dir)?;
    let mut maps = Vec::with_capacity(files.len());
    for f in &files {
        let shown = f.display().to_string();
        maps.push((shown.clone(), map_file(f, &shown)?));
    }
    let streams: Vec<(String, &[u8])> = maps
        .iter()
        .map(|(name, map)| (name.clone(), map.as_deref().unwrap_or(&[])))
        .collect();
    opscope_formats::ctf::import(shown, &metadata, &metadata_shown, &streams, trace)?;
    Ok(())
}

fn load_file(file: &Path, shown: &str, trace: &mut Trace) -> Result<()> {
    if file.is_dir() {
        return load_ctf(file, shown, trace);
    }
    let handle = File::open(file).with_context(|| format!("{shown}: cannot open"))?;
    let len = handle.metadata().map(|m| m.len()).unwrap_or(0);
    if len == 0 {
        bail!("{shown}: the file is empty (0 bytes)");
    }
    // SAFETY: the map is read-only and lives only while this file is imported; a trace
    // file truncated by another process meanwhile would fault, which is the same risk
    // every mmap-based reader (ripgrep, samply) accepts for speed on multi-GB inputs.
    let map =
        unsafe { memmap2::Mmap::map(&handle) }.with_context(|| format!("{shown}: cannot map"))?;
    // SQLite reads the file itself, without a copy in memory.
    #[cfg(feature = "nsys")]
    if opscope_formats::detect(&map) == Some(opscope_formats::Format::NsysSqlite) {
        drop(map);
        opscope_formats::nsys::import_path(file, shown, trace)?;
        return Ok(());
    }
    if opscope_formats::run_metadata::is_run_metadata_path(shown) {
        let graph = companion_graph(file)?;
        opscope_formats::run_metadata::import(&map, shown, graph.as_ref(), trace)?;
        return Ok(());
    }
    opscope_formats::import_bytes(&map, shown, trace)?;
    Ok(())
}

/// A TensorBoard profile run (`plugins/profile/<run>/<host>.xplane.pb`) with several
/// hosts is one multi-host job: its hosts become ranks 0…n-1, in the order of their
/// file names, so that per-rank views and summaries cover them.
fn number_hosts_of_runs(trace: &mut Trace) {
    let mut runs: std::collections::BTreeMap<PathBuf, Vec<usize>> = Default::default();
    for (i, source) in trace.sources.iter().enumerate() {
        if source.format == "xplane" && source.rank.is_none() {
            let dir = Path::new(&source.path).parent().unwrap_or(Path::new(""));
            runs.entry(dir.to_path_buf()).or_default().push(i);
        }
    }
    for (_, mut sources) in runs.into_iter().filter(|(_, s)| s.len() > 1) {
        sources.sort_by(|&a, &b| trace.sources[a].path.cmp(&trace.sources[b].path));
        let world = sources.len() as u32;
        for (rank, &i) in sources.iter().enumerate() {
            trace.sources[i].rank = Some(rank as u32);
            trace.sources[i].world_size = Some(world);
        }
    }
}

/// The files of one `opscope record` session (`opscope-<pid>.pftrace` from the
/// recorded processes, `opscope-processes-<pid>.pftrace` from the sampler) were written
/// on one machine over one run: a pid there is one process, not one per file.
fn unite_recorded_processes(trace: &mut Trace) {
    let mut sessions: std::collections::BTreeMap<PathBuf, Vec<SourceId>> = Default::default();
    for (i, source) in trace.sources.iter().enumerate() {
        let path = Path::new(&source.path);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        if source.format == "perfetto" && name.starts_with("opscope-") && name.ends_with(".pftrace")
        {
            let dir = path.parent().unwrap_or(Path::new("")).to_path_buf();
            sessions.entry(dir).or_default().push(SourceId(i as u32));
        }
    }
    for sources in sessions.into_values().filter(|s| s.len() > 1) {
        trace.unite_processes(&sources);
    }
}

/// The GraphDef saved beside a RunMetadata (`graph.pbtxt`, `graph.pb`, or the one
/// `*.pbtxt`), which types its nodes as tfprof's `--graph_path` does.
fn companion_graph(run_meta: &Path) -> Result<Option<opscope_formats::tf_graph::Graph>> {
    let candidates = graph_candidates(run_meta)?;
    let chosen = candidates
        .iter()
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n == "graph.pbtxt" || n == "graph.pb")
        })
        .or(if candidates.len() == 1 {
            candidates.first()
        } else {
            None
        });
    let Some(path) = chosen else {
        return Ok(None);
    };
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).with_context(|| format!("{shown}: cannot read"))?;
    Ok(Some(opscope_formats::tf_graph::parse(&bytes, &shown)?))
}

/// The GraphDef files beside a RunMetadata, in name order.
fn graph_candidates(run_meta: &Path) -> Result<Vec<PathBuf>> {
    // `run_meta` alone has the parent "", which cannot be listed.
    let dir = run_meta
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut candidates: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("{}: cannot list", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| opscope_formats::tf_graph::is_graph_path(&p.to_string_lossy()))
        .collect();
    candidates.sort();
    Ok(candidates)
}

fn progress_bar(total: u64, options: &LoadOptions) -> ProgressBar {
    use std::io::IsTerminal;
    // Small inputs load in well under a second: a bar would only flicker.
    if options.quiet || !std::io::stderr().is_terminal() || total < 32 << 20 {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{spinner} loading {bytes}/{total_bytes} {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
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
        assert_eq!(
            files_read(&dir.join("db.sqlite")),
            [dir.join("db.sqlite"), dir.join("db.sqlite-wal")]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
