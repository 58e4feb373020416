//! `opscope sql QUERY [DATASET]`: prints the SQL that computes one of opscope's
//! analyses over a Parquet dataset (`convert --to parquet`), for DuckDB or Spark.

use std::io::Write;

use anyhow::{bail, Result};
use clap::ValueEnum;
use opscope_analysis::sql::{self, Dialect, Query};

#[derive(clap::Args)]
#[command(
    about = "Print the SQL of an analysis over a Parquet dataset, for DuckDB or Spark",
    long_about = "Print the SQL that computes one of opscope's analyses over a dataset \
                  written by `opscope convert --to parquet`, for DuckDB (a laptop) or Spark \
                  SQL (a cluster): the same numbers as the command named, for datasets too \
                  large for one machine or already on a cluster's storage.\n\n\
                  With DATASET (a directory, or a URL the engine reads such as \
                  s3://bucket/run), the SQL first makes the dataset's tables temporary views \
                  (slices, tracks, flows, metadata); without it, only the query, which reads \
                  views of those names. Statements end with `;` at the end of a line.",
    after_help = "Examples:\n  \
                  opscope convert ranks/ -o run.parquet\n  \
                  opscope sql gpu run.parquet | duckdb\n  \
                  opscope sql steps run.parquet --dialect spark > steps.sql\n  \
                  opscope sql kernels > kernels.sql     (the query alone)\n\n\
                  docs/sql.md says what each query returns and how it differs from the CLI."
)]
pub struct Args {
    /// The analysis.
    #[arg(value_enum)]
    query: QueryArg,
    /// The dataset the views read (see above).
    dataset: Option<String>,
    /// The engine the SQL is for.
    #[arg(long, value_enum, default_value_t = DialectArg::Duckdb)]
    dialect: DialectArg,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum QueryArg {
    /// `opscope gpu`: per rank and device, busy, idle, computation and other time; a row
    /// per stream too.
    Gpu,
    /// `opscope gpu`'s time per combination of computation, communication and memory
    /// work (HTA's kernel type breakdown).
    KernelTypes,
    /// `opscope stats kernel`: per kernel name, instances and GPU time.
    Kernels,
    /// `opscope steps`: each marked step's device busy, idle and per-class time.
    Steps,
    /// The spread across devices and ranks (`gpu`, `steps`) and the straggler.
    Stragglers,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum DialectArg {
    Duckdb,
    Spark,
}

pub fn run(args: Args) -> Result<()> {
    let query = match args.query {
        QueryArg::Gpu => Query::Gpu,
        QueryArg::KernelTypes => Query::KernelTypes,
        QueryArg::Kernels => Query::Kernels,
        QueryArg::Steps => Query::Steps,
        QueryArg::Stragglers => Query::Stragglers,
    };
    let dialect = match args.dialect {
        DialectArg::Duckdb => Dialect::DuckDb,
        DialectArg::Spark => Dialect::Spark,
    };
    let mut text = String::new();
    if let Some(dataset) = &args.dataset {
        // A local dataset is checked now; a URL is the engine's to read.
        let path = std::path::Path::new(dataset);
        if !dataset.contains("://") && !holds_a_partition(path) {
            if path.exists() {
                // Most likely the traces themselves: the dataset is written beside them.
                let stem = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let stem = stem
                    .split('.')
                    .next()
                    .filter(|s| !s.is_empty())
                    .unwrap_or("job");
                let target = path.with_file_name(format!("{stem}.parquet"));
                bail!(
                    "{dataset}: not a Parquet dataset (no host=…/rank=…/metadata.parquet); \
                     if these are traces, write their dataset first: \
                     `opscope convert {dataset} -o {}`, then `opscope sql … {}`",
                    target.display(),
                    target.display()
                );
            }
            bail!(
                "{dataset}: no such dataset; write one with `opscope convert TRACE… -o {dataset} --to parquet`"
            );
        }
        text.push_str(&sql::views(dialect, dataset));
    }
    text.push_str(&sql::query(query, dialect));
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Whether `dir` holds a partition of a dataset (`host=H/rank=R/metadata.parquet`).
fn holds_a_partition(dir: &std::path::Path) -> bool {
    let entries = |d: &std::path::Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(d)
            .map(|e| e.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    entries(dir).iter().any(|host| {
        entries(host)
            .iter()
            .any(|part| part.join("metadata.parquet").is_file())
    })
}
