//! `opscope convert --to parquet`: the dataset read back by pyarrow, DuckDB and Polars
//! (`tests/oracle/parquet_read.py`), its row counts equal to `opscope info`, its
//! partitions one per rank, and its slices equal to the Kineto files' complete events
//! as the oracle reads the files itself.

mod common;

use std::path::Path;

use common::{opscope, opscope_ok, python_with, run_oracle_json, scratch_dir, shared_traces};
use serde_json::Value;

fn info(input: &Path) -> Value {
    let out = opscope_ok(&["info", "--format", "json", input.to_str().unwrap()]);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `opscope convert INPUT -o OUT` into a fresh `out`.
fn to_dataset(input: &Path, out: &Path) {
    let _ = std::fs::remove_dir_all(out);
    opscope_ok(&[
        "convert",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
}

/// Every engine reads every table with the rows `info` counts.
fn assert_counts(read: &Value, info: &Value, what: &str) {
    for engine in ["pyarrow", "duckdb", "polars"] {
        let e = &read["engines"][engine];
        for (table, key) in [
            ("slices", "slices"),
            ("instants", "instants"),
            ("counters", "counter_samples"),
            ("flows", "flows"),
        ] {
            assert_eq!(e[table], info[key], "{what}: {engine} reads {table}");
        }
        assert!(
            e["tracks"].as_u64().unwrap() > 0,
            "{what}: {engine}: no tracks"
        );
    }
}

#[test]
fn a_dataset_reads_back_in_pyarrow_duckdb_and_polars_as_the_trace() {
    let Some(traces) = shared_traces() else {
        return;
    };
    if !python_with(&["pyarrow", "duckdb", "polars"]) {
        return;
    }
    let dir = scratch_dir("parquet");

    // Two ranks: a partition each, and the files' own events, one for one.
    let ranks = traces.join("kineto/hta/trace_filter");
    let out = dir.join("ranks.parquet");
    to_dataset(&ranks, &out);
    let files: Vec<String> = (0..2)
        .map(|r| {
            ranks
                .join(format!("sampled_rank-{r}.json.gz"))
                .display()
                .to_string()
        })
        .collect();
    let mut args = vec![out.display().to_string(), "--kineto".into()];
    args.extend(files);
    let read = run_oracle_json("parquet_read.py", &args);
    assert_counts(&read, &info(&ranks), "trace_filter");
    let partitions: Vec<&str> = read["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(partitions.len(), 2, "{partitions:?}");
    assert!(partitions.iter().any(|p| p.ends_with("rank=0")));
    assert!(partitions.iter().any(|p| p.ends_with("rank=1")));
    for engine in ["pyarrow", "duckdb", "polars"] {
        let per_rank = &read["engines"][engine]["slices_per_rank"];
        assert_eq!(per_rank["0"], 4811, "{engine}: {per_rank}");
        assert_eq!(per_rank["1"], 4676, "{engine}: {per_rank}");
    }
    let kineto = &read["kineto"];
    assert_eq!(kineto["events"], 9487);
    assert_eq!(kineto["missing_from_dataset"], 0, "{kineto}");
    assert_eq!(kineto["not_in_files"], 0, "{kineto}");
    let meta = read["metadata"].as_array().unwrap();
    assert_eq!(meta.len(), 2);
    for m in meta {
        assert_eq!(m["schema_version"], 1);
        assert_eq!(m["format"], "chrome-json");
        assert!(m["partition"].as_str().unwrap().starts_with("host="));
    }

    // Flows, instants (allocator events, their args as JSON) and counters.
    for input in [
        traces.join("kineto/hta/df_index_resolver/df_index_resolver.json.gz"),
        traces.join("tf-timeline/xprof-demo/trace.json"),
    ] {
        let out = dir.join("one.parquet");
        to_dataset(&input, &out);
        let read = run_oracle_json("parquet_read.py", &[out.display().to_string()]);
        assert_counts(&read, &info(&input), &input.display().to_string());
    }
}

/// A dataset is a new directory: an existing one is refused, and nothing is left
/// behind by a conversion that could not start.
#[test]
fn a_dataset_is_never_written_into_an_existing_directory() {
    let dir = scratch_dir("parquet-existing");
    let out = dir.join("exists.parquet");
    std::fs::create_dir_all(&out).unwrap();
    let example = common::repo_root().join("examples/traces/mlp-train.json");
    let run = opscope(&[
        "convert",
        example.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("already exists"), "{err}");
    let fresh = dir.join("fresh.parquet");
    let _ = std::fs::remove_dir_all(&fresh);
    opscope_ok(&[
        "convert",
        example.to_str().unwrap(),
        "-o",
        fresh.to_str().unwrap(),
    ]);
    assert!(fresh.join("metadata.parquet").is_file());
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".partial-"))
        .collect();
    assert!(leftovers.is_empty());
}
