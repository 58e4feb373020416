//! A Parquet dataset partitioned by host and rank (`host=H/rank=R/slices.parquet`, …)
//! for DuckDB, Spark, Polars and pandas, written by `opscope-formats`. A dataset other
//! conversions (of other ranks) wrote into is added to, partition by partition.

use std::path::Path;

use anyhow::{bail, Result};
use opscope_model::Trace;

use super::{ExportOptions, Exporter, Writes};

pub const PARQUET: Exporter = Exporter {
    name: "parquet",
    about: "a Parquet dataset, partitioned by host and rank, for DuckDB, Spark, Polars and \
            pandas: the output is a new directory, or a dataset other conversions (of other \
            ranks) write into",
    extensions: &[".parquet"],
    writes: Writes::Directory { check, write },
};

fn check(dir: &Path, _: &ExportOptions) -> Result<()> {
    // A dataset other conversions write into: the writer checks its partitions.
    if dir.exists() && !dir.is_dir() {
        bail!("{}: already exists and is not a directory", dir.display());
    }
    Ok(())
}

#[cfg(feature = "parquet")]
fn write(trace: &Trace, dir: &Path, options: &ExportOptions) -> Result<String> {
    let version = env!("CARGO_PKG_VERSION");
    let written = opscope_formats::parquet::export_dataset(trace, dir, version, options.force)?;
    let rows: Vec<String> = written
        .rows
        .iter()
        .map(|(t, n)| format!("{n} {t}"))
        .collect();
    Ok(format!(
        "{} partitions, {} files, {:.1} MiB: {}",
        written.partitions,
        written.files,
        written.bytes as f64 / (1 << 20) as f64,
        rows.join(", ")
    ))
}

#[cfg(not(feature = "parquet"))]
fn write(_: &Trace, _: &Path, _: &ExportOptions) -> Result<String> {
    bail!("this opscope was built without Parquet (cargo feature `parquet`)")
}
