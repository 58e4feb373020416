//! opscope's analyses as SQL over the Parquet dataset (`convert --to parquet`), for the
//! engines people already run: DuckDB on a laptop, Spark on a cluster. Each query is
//! written once, in the SQL both dialects share, from fragments in this directory; the
//! few places where they differ (quoting, regular expressions, how a dataset becomes a
//! table) are filled in per dialect. `docs/sql.md` says what each query answers.

use std::fmt::Write;

use crate::gpu::classify::COMMUNICATION_MARKS;
use opscope_model::kind::{COLLECTIVE_OP_NAMES, COLLECTIVE_OP_PREFIXES};

/// Which engine the SQL is for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Dialect {
    DuckDb,
    Spark,
}

/// The analyses there is SQL for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Query {
    /// `opscope gpu`'s temporal breakdown per source and device, and per stream.
    Gpu,
    /// `opscope gpu`'s breakdown by kind of work running (HTA's kernel type breakdown).
    KernelTypes,
    /// `opscope stats kernel`.
    Kernels,
    /// `opscope steps` for traces that mark their steps.
    Steps,
    /// The spread across devices and ranks, and the straggler (`gpu` and `steps`).
    Stragglers,
}

impl Query {
    pub const ALL: [Query; 5] = [
        Query::Gpu,
        Query::KernelTypes,
        Query::Kernels,
        Query::Steps,
        Query::Stragglers,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Query::Gpu => "gpu",
            Query::KernelTypes => "kernel-types",
            Query::Kernels => "kernels",
            Query::Steps => "steps",
            Query::Stragglers => "stragglers",
        }
    }

    /// The common table expressions the query reads, in order, then its final select.
    fn parts(self) -> (&'static [&'static str], &'static str) {
        const DEVICE_TIME: &[&str] = &[DEVICE_WORK, WORK_CLASS, DEVICE_TIME_LINE];
        match self {
            Query::Gpu => (DEVICE_TIME, GPU),
            Query::KernelTypes => (DEVICE_TIME, KERNEL_TYPES),
            Query::Kernels => (&[], KERNELS),
            Query::Steps => (&[DEVICE_WORK, STEPS_WORK], STEPS),
            Query::Stragglers => (
                &[
                    DEVICE_WORK,
                    WORK_CLASS,
                    DEVICE_TIME_LINE,
                    STEPS_WORK,
                    HOST_TIME,
                ],
                STRAGGLERS,
            ),
        }
    }
}

const DEVICE_WORK: &str = include_str!("device_work.sql");
const WORK_CLASS: &str = include_str!("work_class.sql");
const DEVICE_TIME_LINE: &str = include_str!("device_time.sql");
const STEPS_WORK: &str = include_str!("steps_work.sql");
const HOST_TIME: &str = include_str!("host_time.sql");
const GPU: &str = include_str!("gpu.sql");
const KERNEL_TYPES: &str = include_str!("kernel_types.sql");
const KERNELS: &str = include_str!("kernels.sql");
const STEPS: &str = include_str!("steps.sql");
const STRAGGLERS: &str = include_str!("stragglers.sql");

/// The dataset's tables, as the queries name them.
pub const TABLES: [&str; 4] = ["slices", "tracks", "flows", "metadata"];

/// The statements that make the dataset at `dataset` (a directory, or any URL the
/// engine reads, such as `s3://bucket/run`) the tables the queries read: temporary
/// views, one statement each.
pub fn views(dialect: Dialect, dataset: &str) -> String {
    let base = dataset.trim_end_matches('/');
    let mut out = String::new();
    for table in TABLES {
        let path = format!("{base}/*/*/{table}.parquet");
        let _ = match dialect {
            Dialect::DuckDb => writeln!(
                out,
                "create or replace temp view {table} as select * from read_parquet({}, \
                 hive_partitioning = true);",
                literal(dialect, &path)
            ),
            // A glob finds the table's files among the others; `basePath` makes Spark
            // read `host=` and `rank=` from the directories below it.
            Dialect::Spark => writeln!(
                out,
                "create or replace temporary view {table} using parquet options (path {}, \
                 basePath {});",
                literal(dialect, &path),
                literal(dialect, base)
            ),
        };
    }
    out
}

/// The query, as one statement ending in `;`.
pub fn query(query: Query, dialect: Dialect) -> String {
    let (ctes, select) = query.parts();
    let mut out = String::new();
    // The final select's own comment says what the rows are: put it first.
    let (comment, body) = split_comment(select);
    out.push_str(comment);
    // A query's own file may begin with table expressions of its own.
    let mut parts: Vec<&str> = ctes.iter().map(|c| c.trim_end()).collect();
    let (own, select) = match body.find("\nselect ") {
        Some(at) if !body.starts_with("select ") => (Some(body[..at].trim_end()), &body[at + 1..]),
        _ => (None, body),
    };
    parts.extend(own);
    if !parts.is_empty() {
        out.push_str("with\n");
        out.push_str(&parts.join(",\n"));
        out.push('\n');
    }
    out.push_str(select.trim_end());
    out.push_str(";\n");
    fill(&out, dialect)
}

/// The leading `--` comment lines of `sql`, and the rest.
fn split_comment(sql: &str) -> (&str, &str) {
    let mut at = 0;
    for line in sql.split_inclusive('\n') {
        if !line.starts_with("--") {
            break;
        }
        at += line.len();
    }
    sql.split_at(at)
}

/// A string literal: DuckDB doubles a quote; Spark escapes it with a backslash (and
/// joins adjacent literals, so doubling would drop the quote).
fn literal(dialect: Dialect, text: &str) -> String {
    match dialect {
        Dialect::DuckDb => format!("'{}'", text.replace('\'', "''")),
        Dialect::Spark => format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'")),
    }
}

/// Fills the places where the dialects differ.
fn fill(sql: &str, dialect: Dialect) -> String {
    let quote = |name: &str| match dialect {
        Dialect::DuckDb => format!("\"{name}\""),
        Dialect::Spark => format!("`{name}`"),
    };
    let communication: Vec<String> = COMMUNICATION_MARKS
        .iter()
        .map(|m| format!("instr(lname, {}) > 0", literal(dialect, m)))
        .collect();
    let collective: Vec<String> = COLLECTIVE_OP_PREFIXES
        .iter()
        .map(|p| {
            format!(
                "substr(s.name, 1, {}) = {}",
                p.chars().count(),
                literal(dialect, p)
            )
        })
        .chain(
            COLLECTIVE_OP_NAMES
                .iter()
                .map(|n| format!("s.name = {}", literal(dialect, n))),
        )
        .collect();
    // `markers::is_step_name`: train_step_3, TrainStep 12, step#4.
    let step_pattern = "'^(train_step|trainstep|step)[_# ]*[0-9]+$'";
    let step_name = match dialect {
        Dialect::DuckDb => format!("regexp_matches(lower(s.name), {step_pattern})"),
        Dialect::Spark => format!("lower(s.name) rlike {step_pattern}"),
    };
    // `markers::BARE_STEP_NAMES`.
    let bare_step_name = format!(
        "lower(s.name) in ({})",
        crate::markers::BARE_STEP_NAMES
            .iter()
            .map(|n| literal(dialect, n))
            .collect::<Vec<_>>()
            .join(", ")
    );
    sql.replace("{{FROM}}", &quote("from"))
        .replace("{{TO}}", &quote("to"))
        .replace(
            "{{COMMUNICATION_NAME}}",
            &format!("({})", communication.join(" or ")),
        )
        .replace("{{COLLECTIVE_OP_NAME}}", &collective.join(" or "))
        .replace("{{STEP_NAME}}", &format!("({step_name})"))
        .replace("{{BARE_STEP_NAME}}", &format!("({bare_step_name})"))
        // The args' JSON is compact (`arrow::JsonTexts`): an integer `step_num` at the
        // top level is `"step_num":3` after the `{` or a `,`.
        .replace(
            "{{STEP_NUM_ARG}}",
            &literal(dialect, r#"(^[{]|,)"step_num":(-?[0-9]+)[,}]"#),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled_and_every_statement_ends() {
        for q in Query::ALL {
            for d in [Dialect::DuckDb, Dialect::Spark] {
                let sql = query(q, d);
                assert!(!sql.contains("{{"), "{} {d:?}: {sql}", q.name());
                // Statements are split at a `;` that ends a line.
                let ends = sql.lines().filter(|l| l.trim_end().ends_with(';'));
                assert_eq!(ends.count(), 1, "{}", q.name());
                assert!(sql.starts_with("-- "), "{}", q.name());
            }
        }
        let spark = query(Query::Gpu, Dialect::Spark);
        assert!(spark.contains("f.`from`") && !spark.contains("\"from\""));
    }

    #[test]
    fn paths_are_quoted_for_each_dialect() {
        let duck = views(Dialect::DuckDb, "/data/it's/");
        assert!(duck.contains("read_parquet('/data/it''s/*/*/slices.parquet'"));
        let spark = views(Dialect::Spark, "s3://b/it's");
        assert!(spark.contains(r"path 's3://b/it\'s/*/*/tracks.parquet', basePath 's3://b/it\'s'"));
        assert_eq!(spark.lines().count(), TABLES.len());
    }
}
