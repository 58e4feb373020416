//! The formats opscope writes, in one table beside the importers' registry: each
//! exporter's name (`convert --to`), the file names that choose it, and how it writes.
//! `convert` (and `merge`, through it) and `flame` write through this table; a new
//! exporter is one module and one line of [`EXPORTERS`].

mod ctf;
mod folded;
mod parquet;
mod svg;
mod trace;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use flate2::write::GzEncoder;
use flate2::Compression;
use opscope_model::Trace;

/// What an exporter may be asked beyond the trace.
#[derive(Clone, Debug)]
pub struct ExportOptions {
    /// Device work (kernels, copies, sets) in stacks (folded, SVG); off: CPU time only.
    pub device: bool,
    /// Sampled stacks in stacks (folded, SVG) count idle threads' samples too (wall
    /// time); off: only those of threads that ran (CPU time).
    pub wall: bool,
    /// A flame graph's title.
    pub title: String,
    /// Replace what exists at the output (each exporter says what it will replace).
    pub force: bool,
}

impl Default for ExportOptions {
    fn default() -> ExportOptions {
        ExportOptions {
            device: true,
            wall: false,
            title: "opscope: where the time goes".to_string(),
            force: false,
        }
    }
}

/// How an exporter writes.
pub enum Writes {
    /// One file, written beside its place and renamed into it (gzip'd where its name
    /// ends in `.gz`); gives a line saying what it wrote.
    Stream(fn(&Trace, &ExportOptions, &mut dyn Write) -> Result<String>),
    /// A directory: the exporter checks what is at the path (`check`, before the
    /// trace is read) and writes it whole or not at all (`write`); gives a line saying
    /// what it wrote.
    Directory {
        check: fn(&Path, &ExportOptions) -> Result<()>,
        write: fn(&Trace, &Path, &ExportOptions) -> Result<String>,
    },
}

/// One format opscope writes.
pub struct Exporter {
    /// As `convert --to` names it.
    pub name: &'static str,
    /// One line for `--help`.
    pub about: &'static str,
    /// The ends of the file names that choose it (lowercase; the longest match wins).
    pub extensions: &'static [&'static str],
    pub writes: Writes,
}

/// Every exporter. `--to`'s values and its help come from here.
pub static EXPORTERS: &[Exporter] = &[
    trace::PERFETTO,
    trace::JSON,
    ctf::CTF,
    folded::FOLDED,
    trace::SPEEDSCOPE,
    parquet::PARQUET,
    svg::SVG,
];

/// The exporter `--to` names.
pub fn by_name(name: &str) -> Option<&'static Exporter> {
    EXPORTERS.iter().find(|e| e.name == name)
}

/// The exporter a file's name chooses: the one with the longest matching end
/// (`.speedscope.json` is speedscope's, not JSON's).
pub fn by_file_name(path: &Path) -> Option<&'static Exporter> {
    let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
    EXPORTERS
        .iter()
        .flat_map(|e| e.extensions.iter().map(move |x| (e, *x)))
        .filter(|(_, x)| name.ends_with(x))
        .max_by_key(|(_, x)| x.len())
        .map(|(e, _)| e)
}

/// The exporter for `output`: the one `to` names, else the one its file name chooses.
/// A name that says another format than `to` is refused (other tools choose their
/// reader by the name, as opscope does), but for speedscope's files, which are JSON.
pub fn choose(output: &Path, to: Option<&str>) -> Result<&'static Exporter> {
    let named = by_file_name(output);
    let chosen = match to {
        Some(name) => Some(by_name(name).with_context(|| {
            format!("no format {name:?}: opscope writes {}", names().join(", "))
        })?),
        None => None,
    };
    let Some(target) = chosen.or(named) else {
        bail!(
            "{}: cannot tell the output format from the extension; pass --to {}",
            output.display(),
            names().join(", ")
        );
    };
    let agrees =
        |n: &Exporter| n.name == target.name || (n.name, target.name) == ("json", "speedscope");
    if let Some(named) = named.filter(|n| !agrees(n)) {
        bail!(
            "{}: the name says {} but --to says {}; name the output for what it holds (or leave --to out)",
            output.display(),
            named.name,
            target.name
        );
    }
    Ok(target)
}

/// `--to`'s values, for clap.
pub fn names() -> Vec<&'static str> {
    EXPORTERS.iter().map(|e| e.name).collect()
}

impl Exporter {
    /// Whether what is at `output` may be written over (run before reading the trace,
    /// so a refusal costs nothing).
    pub fn check(&self, output: &Path, options: &ExportOptions) -> Result<()> {
        match &self.writes {
            Writes::Directory { check, .. } => check(output, options),
            Writes::Stream(_) => {
                let Ok(meta) = std::fs::metadata(output) else {
                    return Ok(());
                };
                let shown = output.display();
                if meta.is_dir() {
                    bail!("{shown}: already exists and is a directory");
                }
                if !options.force {
                    bail!("{shown}: already exists; pass --force to replace it");
                }
                Ok(())
            }
        }
    }

    /// Writes `trace` to `output` and gives the line that says what was written.
    pub fn write(&self, trace: &Trace, output: &Path, options: &ExportOptions) -> Result<String> {
        match &self.writes {
            Writes::Directory { write, .. } => write(trace, output, options),
            Writes::Stream(write) => write_file(output, |out| write(trace, options, out)),
        }
    }
}

/// Writes a file next to `output` and renames it into place at the end, so a failed
/// export never leaves a half-written file under the requested name.
fn write_file(
    output: &Path,
    fill: impl FnOnce(&mut dyn Write) -> Result<String>,
) -> Result<String> {
    let shown = output.display().to_string();
    let partial = partial_path(output);
    let file = File::options()
        .write(true)
        .create_new(true)
        .open(&partial)
        .with_context(|| format!("{shown}: cannot create"))?;
    let gzip = shown.to_ascii_lowercase().ends_with(".gz");
    let written = (|| -> Result<String> {
        let buffered = BufWriter::with_capacity(1 << 20, file);
        if gzip {
            let mut encoder = GzEncoder::new(buffered, Compression::default());
            let said = fill(&mut encoder)?;
            encoder.finish()?.flush()?;
            Ok(said)
        } else {
            let mut out = buffered;
            let said = fill(&mut out)?;
            out.flush()?;
            Ok(said)
        }
    })();
    let said = match written {
        Ok(said) => said,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e.context(format!("{shown}: writing failed")));
        }
    };
    if let Err(e) = std::fs::rename(&partial, output) {
        let _ = std::fs::remove_file(&partial);
        return Err(e).with_context(|| format!("{shown}: cannot rename into place"));
    }
    Ok(said)
}

/// A new name beside `output` to write into before renaming: hidden, and this
/// process's own, so that neither a file of the user's nor another export's is
/// touched.
fn partial_path(output: &Path) -> PathBuf {
    let name = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    output.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

/// Writes a directory output into a new directory beside `dir`, renamed into place when
/// `fill` succeeds and removed when it fails.
fn write_dir(dir: &Path, fill: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let shown = dir.display().to_string();
    let partial = partial_path(dir);
    if let Some(parent) = partial.parent().filter(|p| !p.as_os_str().is_empty()) {
        if parent.exists() && !parent.is_dir() {
            bail!(
                "{shown}: cannot create: {} is not a directory",
                parent.display()
            );
        }
        std::fs::create_dir_all(parent).with_context(|| format!("{shown}: cannot create"))?;
    }
    std::fs::create_dir(&partial).with_context(|| format!("{shown}: cannot create"))?;
    if let Err(e) = fill(&partial) {
        let _ = std::fs::remove_dir_all(&partial);
        return Err(e.context(format!("{shown}: writing failed")));
    }
    std::fs::rename(&partial, dir).with_context(|| format!("{shown}: cannot rename into place"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every exporter is found by its name and by each of its file names, and every
    /// file name chooses one exporter only (the longest end wins where two match).
    #[test]
    fn names_and_file_names_choose_one_exporter_each() {
        for e in EXPORTERS {
            assert!(std::ptr::eq(by_name(e.name).unwrap(), e), "{}", e.name);
            for x in e.extensions {
                let chosen = by_file_name(Path::new(&format!("dir/out{x}"))).unwrap();
                assert_eq!(chosen.name, e.name, "{x}");
            }
        }
        assert_eq!(
            by_file_name(Path::new("a.speedscope.json")).unwrap().name,
            "speedscope"
        );
        assert_eq!(by_file_name(Path::new("a.JSON.GZ")).unwrap().name, "json");
        assert!(by_file_name(Path::new("a.txt")).is_none());
    }

    /// Every exporter of the table writes a small trace (an op in an op, a kernel it
    /// launched) to a file or directory that then holds something, and says what it
    /// wrote; the trace formats read back with the same slices.
    #[test]
    fn every_exporter_writes_a_trace() {
        let json = br#"{"traceEvents":[
            {"ph":"X","cat":"cpu_op","name":"outer","pid":1,"tid":1,"ts":0,"dur":100},
            {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":10,"dur":50,"args":{"External id":1}},
            {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":20,"dur":5,"args":{"correlation":7}},
            {"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":30,"dur":40,"args":{"correlation":7,"stream":7,"device":0}}
        ]}"#;
        let mut trace = Trace::new();
        opscope_formats::chrome::import(json, "t.json", &mut trace).unwrap();
        trace.finish();
        let dir = std::env::temp_dir().join(format!("opscope-exporters-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for e in EXPORTERS {
            if cfg!(not(feature = "parquet")) && e.name == "parquet" {
                continue;
            }
            let out = dir.join(format!("out{}", e.extensions[0]));
            let options = ExportOptions::default();
            e.check(&out, &options).unwrap();
            let said = e.write(&trace, &out, &options).unwrap();
            assert!(!said.is_empty(), "{}", e.name);
            let bytes: u64 = if out.is_dir() {
                std::fs::read_dir(&out)
                    .unwrap()
                    .flatten()
                    .map(|f| f.metadata().map_or(0, |m| m.len()))
                    .sum()
            } else {
                std::fs::metadata(&out).unwrap().len()
            };
            assert!(bytes > 0, "{}: nothing written", e.name);
            // A second write over it is refused without --force (a dataset takes other
            // ranks' partitions, so its writer refuses the partition it already holds).
            if e.name == "parquet" {
                assert!(e.write(&trace, &out, &options).is_err(), "{}", e.name);
            } else {
                assert!(e.check(&out, &options).is_err(), "{}", e.name);
            }
            if matches!(e.name, "perfetto" | "json") {
                let mut back = Trace::new();
                let data = std::fs::read(&out).unwrap();
                if e.name == "perfetto" {
                    opscope_formats::perfetto::import(&data, "back", &mut back).unwrap();
                } else {
                    opscope_formats::chrome::import(&data, "back", &mut back).unwrap();
                }
                back.finish();
                assert_eq!(back.slices.len(), trace.slices.len(), "{}", e.name);
            }
        }
        let folded = std::fs::read_to_string(dir.join("out.folded")).unwrap();
        assert!(
            folded.lines().any(|l| l.contains("outer;aten::mm")),
            "{folded}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
