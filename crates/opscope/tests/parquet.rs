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
        assert_eq!(m["schema_version"], 2);
        assert_eq!(m["format"], "chrome-json");
        // Each partition's own metadata names its source and its partition.
        let rank = m["rank"].as_i64().unwrap();
        assert!(m["partition"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/rank={rank}")));
        assert!(m["path"]
            .as_str()
            .unwrap()
            .ends_with(&format!("sampled_rank-{rank}.json.gz")));
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

/// Conversions of other ranks fill one dataset (as the tasks of a cluster job would);
/// a partition written twice is refused unless `--force`, a directory holding anything
/// else is refused, and nothing half-written is left behind.
#[test]
fn conversions_of_other_ranks_fill_one_dataset() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let dir = scratch_dir("parquet-shared");
    let ranks = traces.join("kineto/hta/trace_filter");
    let out = dir.join("job.parquet");
    let convert = |rank: u32, extra: &[&str]| {
        let file = ranks.join(format!("sampled_rank-{rank}.json.gz"));
        let mut args = vec![
            "convert",
            file.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        opscope(&args)
    };
    assert!(convert(0, &[]).status.success());
    assert!(convert(1, &[]).status.success());
    for rank in ["rank=0", "rank=1"] {
        let part = out.join("host=unknown").join(rank);
        assert!(
            part.join("metadata.parquet").is_file(),
            "{}",
            part.display()
        );
        assert!(part.join("slices.parquet").is_file());
    }
    let again = convert(1, &[]);
    assert_eq!(again.status.code(), Some(1));
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains("already holds partition host=unknown/rank=1") && err.contains("--force"),
        "{err}"
    );
    assert!(convert(1, &["--force"]).status.success());
    // Whatever engine reads it sees both ranks, as converting them together would give.
    if python_with(&["pyarrow", "duckdb", "polars"]) {
        let read = run_oracle_json("parquet_read.py", &[out.display().to_string()]);
        assert_counts(&read, &info(&ranks), "trace_filter, ranks converted apart");
        assert_eq!(read["metadata"].as_array().unwrap().len(), 2);
    }
    // Nothing but the partitions is left: no staging directory, in the dataset or in
    // its host directory.
    let names = |d: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect();
        names.sort();
        names
    };
    assert_eq!(names(&out), ["host=unknown"]);
    assert_eq!(names(&out.join("host=unknown")), ["rank=0", "rank=1"]);
    // A conversion that fails (its output's place taken by a file) leaves nothing.
    std::fs::remove_dir_all(out.join("host=unknown/rank=0")).unwrap();
    std::fs::write(out.join("host=unknown/rank=0"), "in the way").unwrap();
    assert!(!convert(0, &[]).status.success());
    assert_eq!(names(&out), ["host=unknown"]);

    // A directory that is no dataset is left alone.
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "mine").unwrap();
    let example = common::repo_root().join("examples/traces/mlp-train.json");
    let run = opscope(&[
        "convert",
        example.to_str().unwrap(),
        "-o",
        other.to_str().unwrap(),
        "--to",
        "parquet",
    ]);
    assert_eq!(run.status.code(), Some(1));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("exists and is not a Parquet dataset (it holds notes.txt)"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&other).unwrap().count(), 1);
}

/// `opscope` reads its own dataset back: every report answers on it as on the traces
/// it was written from (the dataset's rows are checked against pyarrow, DuckDB and
/// Polars above), for each kind of source.
#[test]
fn every_report_answers_on_the_dataset_as_on_its_traces() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let dir = scratch_dir("parquet-read-back");
    for input in [
        "kineto/hta/trace_filter",
        "kineto/hta/amd_trace",
        "kineto/kineto-tb_plugin/resnet50_num_workers_0",
        "xplane/GPU-multi-worker",
        "nsys-sqlite/cloverleaf-nsys",
        "ctf/tracecompass/memory",
    ] {
        let trace = traces.join(input);
        let dataset = dir.join(format!("{}.parquet", input.replace('/', "_")));
        to_dataset(&trace, &dataset);
        let (ours, theirs) = (info(&dataset), info(&trace));
        for key in [
            "slices",
            "slices_by_kind",
            "slice_ns_by_kind",
            "instants",
            "counter_samples",
            "flows",
            // Processes, threads and devices with no events are not in the dataset.
            "tracks",
            "ranks",
            "start_ns",
            "end_ns",
        ] {
            assert_eq!(ours[key], theirs[key], "{input}: info {key}");
        }
        for command in [
            &["gpu"][..],
            &["steps"],
            &["stats", "op"],
            &["stats", "kernel"],
            &["memory"],
        ] {
            let report = |path: &Path| {
                let mut args = command.to_vec();
                args.extend(["--format", "json", path.to_str().unwrap()]);
                String::from_utf8(opscope_ok(&args).stdout).unwrap()
            };
            assert_eq!(
                report(&dataset),
                report(&trace),
                "{input}: {}",
                command.join(" ")
            );
        }
    }
}

/// Ranks converted apart into one dataset read back as the ranks together; a damaged
/// table is an error that names it.
#[test]
fn a_dataset_filled_by_several_conversions_reads_as_one_and_damage_is_named() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let dir = scratch_dir("parquet-read-ranks");
    let ranks = traces.join("kineto/hta/trace_filter");
    let out = dir.join("job.parquet");
    let _ = std::fs::remove_dir_all(&out);
    for rank in [0, 1] {
        let file = ranks.join(format!("sampled_rank-{rank}.json.gz"));
        opscope_ok(&[
            "convert",
            file.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ]);
    }
    let gpu = |path: &Path| {
        String::from_utf8(opscope_ok(&["gpu", "--format", "json", path.to_str().unwrap()]).stdout)
            .unwrap()
    };
    let (ours, theirs) = (info(&out), info(&ranks));
    for key in ["slices", "flows", "ranks", "tracks"] {
        assert_eq!(ours[key], theirs[key], "{key}");
    }
    // The ranks' files named as they were read (the paths differ, nothing else).
    let strip = |text: String| text.replace(ranks.to_str().unwrap(), "");
    assert_eq!(strip(gpu(&out)), strip(gpu(&ranks)));
    // One partition on its own is a dataset too.
    let part = out.join("host=unknown/rank=1");
    assert_eq!(info(&part)["ranks"], serde_json::json!([1]));
    let slices = part.join("slices.parquet");
    let bytes = std::fs::read(&slices).unwrap();
    std::fs::write(&slices, &bytes[..bytes.len() / 2]).unwrap();
    let run = opscope(&["info", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{err}");
    assert!(err.contains("host=unknown/rank=1/slices.parquet"), "{err}");
}

/// A dataset written into the directory of its traces is a copy of them: a walk of the
/// directory reads the traces once and says it skipped the dataset; a directory of
/// datasets only reads them.
#[test]
fn a_dataset_beside_its_traces_is_not_counted_twice() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let dir = scratch_dir("parquet-beside");
    let ranks = dir.join("ranks");
    let _ = std::fs::remove_dir_all(&ranks);
    std::fs::create_dir_all(&ranks).unwrap();
    for rank in [0, 1] {
        let name = format!("sampled_rank-{rank}.json.gz");
        std::fs::copy(
            traces.join("kineto/hta/trace_filter").join(&name),
            ranks.join(&name),
        )
        .unwrap();
    }
    let alone = info(&ranks);
    let dataset = ranks.join("job.parquet");
    to_dataset(&ranks, &dataset);
    let run = opscope(&["info", "--format", "json", ranks.to_str().unwrap()]);
    assert!(run.status.success());
    let walked: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(walked["slices"], alone["slices"]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("job.parquet: a Parquet dataset beside the traces"),
        "{err}"
    );
    let only = dir.join("datasets");
    let _ = std::fs::remove_dir_all(&only);
    std::fs::create_dir_all(&only).unwrap();
    to_dataset(&ranks, &only.join("job.parquet"));
    assert_eq!(info(&only)["slices"], alone["slices"]);
}
