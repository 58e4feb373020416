//! `opscope sql`: the SQL of each analysis, run on the Parquet dataset of real traces by
//! DuckDB (embedded) and by Spark SQL in local mode (`tests/oracle/sql_run.py`), gives
//! the numbers of the matching command's JSON: times within 0.5 %, counts and names
//! exact.

mod common;

use std::path::{Path, PathBuf};

use common::{eight_ranks, opscope_ok, python_with, run_oracle_json, scratch_dir, shared_traces};
use serde_json::Value;

const QUERIES: [&str; 5] = ["gpu", "kernel-types", "kernels", "steps", "stragglers"];

/// How far the engines' numbers may be from the command's, by what they measure: the
/// engines sum and divide in doubles and in another order, so within 0.5 % of the
/// value, but never less than a unit's own rounding, and a point in time exactly.
#[derive(Copy, Clone, Debug)]
enum Unit {
    /// A length of time in ns: 0.5 %, or 1 ns.
    Duration,
    /// A point in time in ns since the epoch (a step's start): 1 ns. (0.5 % of one is
    /// three months.)
    Instant,
    /// A share in percent: 0.5 % of it, or 0.01 points (a sum of the rows' rounded
    /// shares). Not a whole point: 2.0 % against 2.9 % is a different answer.
    Percent,
    /// A number of anything else (a median of ms, a count): 0.5 %.
    Other,
}

impl Unit {
    /// The unit of a column by its name, as both sides name them.
    fn of(key: &str) -> Unit {
        if key == "start_ns" {
            Unit::Instant
        } else if key.ends_with("_ns") {
            Unit::Duration
        } else if key.ends_with("pct") {
            Unit::Percent
        } else {
            Unit::Other
        }
    }

    fn close(self, a: f64, b: f64) -> bool {
        let relative = 0.005 * a.abs().max(b.abs());
        let allowed = match self {
            Unit::Duration => relative.max(1.0),
            Unit::Instant => 1.0,
            Unit::Percent => relative.max(0.01),
            Unit::Other => relative.max(1e-9),
        };
        (a - b).abs() <= allowed
    }
}

#[test]
fn each_quantity_is_compared_in_its_own_unit() {
    assert!(!Unit::of("pct").close(2.0, 2.9));
    assert!(Unit::of("idle_pct").close(40.0, 40.1));
    assert!(!Unit::of("start_ns").close(1.7e18, 1.7e18 + 1e6));
    assert!(Unit::of("start_ns").close(1.7e18, 1.7e18 + 1.0));
    assert!(Unit::of("busy_ns").close(1e9, 1.004e9) && !Unit::of("busy_ns").close(1e9, 1.006e9));
    assert!(Unit::of("min_ns").close(0.0, 1.0));
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("a number, not {v}"))
}

/// `sql` and `cli`, values of the column `key`, agree in its unit ([`Unit::of`]).
fn assert_close(what: &str, key: &str, sql: &Value, cli: &Value) {
    match (sql, cli) {
        (Value::Null, Value::Null) => {}
        _ => assert!(
            Unit::of(key).close(num(sql), num(cli)),
            "{what}: SQL {sql}, CLI {cli} ({:?})",
            Unit::of(key)
        ),
    }
}

/// Two rows of one source: the same partition and number.
fn same_source(a: &Value, b: &Value) -> bool {
    ["host", "rank", "source"].iter().all(|k| a[k] == b[k])
}

fn json(args: &[&str]) -> Value {
    serde_json::from_slice(&opscope_ok(args).stdout).unwrap()
}

/// A trace (file or directory) and its dataset, with the SQL files of every query in
/// both dialects beside it.
struct Case {
    name: &'static str,
    trace: PathBuf,
    sql: Vec<(String, &'static str, PathBuf)>,
}

fn prepare(dir: &Path, name: &'static str, trace: PathBuf) -> Case {
    let dataset = dir.join(format!("{name}.parquet"));
    convert(&trace, &dataset);
    queries(dir, name, trace, &dataset)
}

fn convert(trace: &Path, dataset: &Path) {
    opscope_ok(&[
        "convert",
        trace.to_str().unwrap(),
        "-o",
        dataset.to_str().unwrap(),
        "--to",
        "parquet",
        "--quiet",
    ]);
}

/// The SQL files of every query over `dataset`, whose numbers must be the CLI's on
/// `trace`.
fn queries(dir: &Path, name: &'static str, trace: PathBuf, dataset: &Path) -> Case {
    let mut sql = Vec::new();
    for dialect in ["duckdb", "spark"] {
        for query in QUERIES.iter().copied().chain(["sources"]) {
            let path = dir.join(format!("{name}-{query}-{dialect}.sql"));
            let text = if query == "sources" {
                // Which source is which file, to match the CLI's rows by file.
                let views = opscope_ok(&[
                    "sql",
                    "kernels",
                    dataset.to_str().unwrap(),
                    "--dialect",
                    dialect,
                ]);
                let views = String::from_utf8(views.stdout).unwrap();
                let setup: String = views.split_inclusive(";\n").take(4).collect();
                format!("{setup}select host, rank, source, path from metadata;\n")
            } else {
                let out = opscope_ok(&[
                    "sql",
                    query,
                    dataset.to_str().unwrap(),
                    "--dialect",
                    dialect,
                ]);
                String::from_utf8(out.stdout).unwrap()
            };
            std::fs::write(&path, text).unwrap();
            sql.push((dialect.to_string(), query, path));
        }
    }
    Case { name, trace, sql }
}

/// Every query's rows on `case`, as the engine gave them, against the CLI.
fn check(case: &Case, engine: &str, results: &Value) {
    let rows = |query: &str| -> &Vec<Value> {
        let (_, _, path) = case
            .sql
            .iter()
            .find(|(d, q, _)| d == engine && *q == query)
            .unwrap();
        results[path.to_str().unwrap()].as_array().unwrap()
    };
    let what = |x: &str| format!("{} on {engine}: {x}", case.name);
    let trace = case.trace.to_str().unwrap();
    // Sources are numbered within each conversion: a partition and its number say which.
    let paths: Vec<(Value, Value, Value, String)> = rows("sources")
        .iter()
        .map(|r| {
            (
                r["host"].clone(),
                r["rank"].clone(),
                r["source"].clone(),
                r["path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let path_of = |row: &Value| -> &str {
        &paths
            .iter()
            .find(|p| p.0 == row["host"] && p.1 == row["rank"] && p.2 == row["source"])
            .unwrap_or_else(|| panic!("no source for {row}"))
            .3
    };

    // gpu: per device, then its streams; kernel types per device.
    let gpu = json(&["gpu", trace, "--format", "json"]);
    let sql_gpu = rows("gpu");
    let devices: Vec<&Value> = sql_gpu.iter().filter(|r| r["stream"].is_null()).collect();
    let cli_ranks = gpu["ranks"].as_array().unwrap();
    assert_eq!(devices.len(), cli_ranks.len(), "{}", what("devices"));
    let types = rows("kernel-types");
    for (row, cli) in devices.iter().zip(cli_ranks) {
        let who = what(&format!("{} {}", cli["file"], cli["device"]));
        assert_eq!(path_of(row), cli["file"].as_str().unwrap(), "{who}");
        assert_eq!(row["device"], cli["device"], "{who}");
        assert_eq!(
            row["rank"].as_i64().unwrap(),
            cli["rank"].as_i64().unwrap_or(-1),
            "{who}"
        );
        for key in [
            "span_ns",
            "busy_ns",
            "idle_ns",
            "compute_ns",
            "non_compute_ns",
            "idle_pct",
            "compute_pct",
            "non_compute_pct",
        ] {
            assert_close(
                &format!("{who} {key}"),
                key,
                &row[key],
                &cli["temporal"][key],
            );
        }
        assert_close(
            &format!("{who} overlap"),
            "communication_overlap_pct",
            &row["communication_overlap_pct"],
            &cli["communication_overlap_pct"],
        );
        let streams: Vec<&Value> = sql_gpu
            .iter()
            .filter(|r| {
                same_source(r, row) && r["device"] == row["device"] && !r["stream"].is_null()
            })
            .collect();
        let cli_streams = cli["streams"].as_array().unwrap();
        assert_eq!(streams.len(), cli_streams.len(), "{who} streams");
        for (s, c) in streams.iter().zip(cli_streams) {
            assert_eq!(s["stream"], c["stream"], "{who}");
            assert_eq!(s["stream_id"], c["stream_id"], "{who} {}", c["stream"]);
            assert_eq!(s["work"], c["work"], "{who} {}", c["stream"]);
            assert_close(
                &format!("{who} {} busy", c["stream"]),
                "busy_ns",
                &s["busy_ns"],
                &c["busy_ns"],
            );
        }
        assert_eq!(
            row["work"].as_u64().unwrap(),
            cli_streams
                .iter()
                .map(|s| s["work"].as_u64().unwrap())
                .sum::<u64>(),
            "{who} work"
        );
        let mine: Vec<&Value> = types
            .iter()
            .filter(|r| same_source(r, row) && r["device"] == row["device"])
            .collect();
        let combos = cli["combinations"].as_array().unwrap();
        assert_eq!(mine.len(), combos.len(), "{who} kernel types");
        for c in combos {
            let label: Vec<&str> = c["classes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap())
                .collect();
            let label = label.join(" + ");
            let r = mine
                .iter()
                .find(|r| r["work_running"] == label.as_str())
                .unwrap_or_else(|| panic!("{who}: no row for {label}"));
            assert_close(
                &format!("{who} {label}"),
                "time_ns",
                &r["time_ns"],
                &c["time_ns"],
            );
            assert_close(&format!("{who} {label} %"), "pct", &r["pct"], &c["pct"]);
        }
    }

    // stats kernel.
    let kernels = json(&["stats", "kernel", trace, "--format", "json"]);
    let kernels = kernels.as_array().unwrap();
    let sql_kernels = rows("kernels");
    assert_eq!(sql_kernels.len(), kernels.len(), "{}", what("kernel names"));
    for (s, c) in sql_kernels.iter().zip(kernels) {
        let who = what(c["name"].as_str().unwrap());
        assert_eq!(s["name"], c["name"], "{who}: order");
        assert_eq!(s["instances"], c["instances"], "{who}");
        for key in [
            "time_pct",
            "total_ns",
            "mean_ns",
            "median_ns",
            "min_ns",
            "max_ns",
            "stddev_ns",
        ] {
            assert_close(&format!("{who} {key}"), key, &s[key], &c[key]);
        }
    }

    // steps: the sources whose steps are marked.
    let steps = json(&["steps", trace, "--format", "json"]);
    let marked: Vec<&Value> = steps["sources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["found_by"]["kind"] == "markers")
        .collect();
    let sql_steps = rows("steps");
    assert_eq!(
        sql_steps.len(),
        marked
            .iter()
            .map(|s| s["steps"].as_array().unwrap().len())
            .sum::<usize>(),
        "{}",
        what("steps")
    );
    for source in &marked {
        let mine: Vec<&Value> = sql_steps
            .iter()
            .filter(|r| path_of(r) == source["file"].as_str().unwrap())
            .collect();
        let theirs = source["steps"].as_array().unwrap();
        assert_eq!(
            mine.len(),
            theirs.len(),
            "{}",
            what(source["file"].as_str().unwrap())
        );
        for (s, c) in mine.iter().zip(theirs) {
            let who = what(&format!("{} {}", source["file"], c["name"]));
            assert_eq!(s["name"], c["name"], "{who}");
            assert_eq!(s["kernels"], c["kernels"], "{who}");
            for key in [
                "start_ns",
                "dur_ns",
                "device_busy_ns",
                "device_idle_ns",
                "computation_ns",
                "communication_ns",
                "memory_ns",
            ] {
                assert_close(&format!("{who} {key}"), key, &s[key], &c[key]);
            }
        }
    }

    // stragglers: both commands' summaries across ranks.
    let sql_spread = rows("stragglers");
    eprintln!(
        "{}: {} devices, {} streams, {} kernel-type rows, {} kernel names, {} steps, {} spread rows",
        what("compared"),
        devices.len(),
        sql_gpu.len() - devices.len(),
        types.len(),
        sql_kernels.len(),
        sql_steps.len(),
        sql_spread.len()
    );
    for (summary, across) in [("gpu", &gpu["across"]), ("steps", &steps["across"])] {
        let mine: Vec<&Value> = sql_spread
            .iter()
            .filter(|r| r["summary"] == summary)
            .collect();
        if across.is_null() {
            assert!(
                mine.is_empty(),
                "{}",
                what(&format!("{summary}: no summary, SQL {mine:?}"))
            );
            continue;
        }
        let spreads = across["spreads"].as_array().unwrap();
        assert_eq!(mine.len(), spreads.len(), "{}", what(summary));
        for (s, c) in mine.iter().zip(spreads) {
            let who = what(&format!("{summary} {}", c["metric"]));
            assert_eq!(s["metric"], c["metric"], "{who}");
            assert_eq!(s["compared"], across["compared"], "{who}");
            assert_eq!(s["least"], c["min_at"], "{who}");
            assert_eq!(s["most"], c["max_at"], "{who}");
            // The metric names its unit (`busy_ns`, `idle_pct`).
            let unit = c["metric"].as_str().unwrap();
            for key in ["min", "median", "max"] {
                assert_close(&format!("{who} {key}"), unit, &s[key], &c[key]);
            }
            let straggler = &across["straggler"];
            let named = !straggler.is_null() && straggler["metric"] == c["metric"];
            assert_eq!(s["straggler"].as_bool(), Some(named), "{who}");
            if named {
                assert_eq!(s["most"], straggler["at"], "{who}");
                assert_close(
                    &format!("{who} above"),
                    "above_median_pct",
                    &s["above_median_pct"],
                    &straggler["above_median_pct"],
                );
            }
        }
    }
}

/// A Kineto trace whose kernel, named like computation, was launched inside an
/// all-reduce: communication by its launch, not its name. Two ranks, so that both
/// summaries across ranks have something to compare.
fn collective_launch(dir: &Path) -> PathBuf {
    let ranks = dir.join("collective-launch");
    std::fs::create_dir_all(&ranks).unwrap();
    for rank in 0..2 {
        let skew = rank * 7;
        let events = serde_json::json!({
            "distributedInfo": {"rank": rank, "world_size": 2},
            "traceEvents": [
                {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 10, "tid": 10, "ts": 0, "dur": 400},
                {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 10, "tid": 10, "ts": 10, "dur": 50},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10, "ts": 20, "dur": 5, "args": {"correlation": 1}},
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 10, "ts": 100, "dur": 40},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10, "ts": 110, "dur": 5, "args": {"correlation": 2}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 10, "tid": 10, "ts": 150, "dur": 5, "args": {"correlation": 3}},
                {"ph": "X", "cat": "kernel", "name": "custom_reduce_kernel", "pid": 0, "tid": 7, "ts": 30, "dur": 100 + skew, "args": {"correlation": 1, "device": 0, "stream": 7}},
                {"ph": "X", "cat": "kernel", "name": "volta_sgemm_128x64_nn", "pid": 0, "tid": 8, "ts": 120, "dur": 60 + skew, "args": {"correlation": 2, "device": 0, "stream": 8}},
                {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 8, "ts": 200, "dur": 30, "args": {"correlation": 3, "device": 0, "stream": 8}},
                {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
                {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
                {"ph": "M", "name": "thread_name", "pid": 0, "tid": 8, "args": {"name": "stream 8"}}
            ]
        });
        std::fs::write(
            ranks.join(format!("rank-{rank}.json")),
            serde_json::to_string(&events).unwrap(),
        )
        .unwrap();
    }
    // The rule is what makes the kernel communication here.
    let gpu = json(&["gpu", ranks.to_str().unwrap(), "--format", "json"]);
    let classes: Vec<String> = gpu["ranks"][0]["combinations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["classes"].to_string())
        .collect();
    assert!(
        classes.iter().any(|c| c.contains("communication")),
        "{classes:?}"
    );
    ranks
}

/// One host's two processes with no rank: one profiled in three windows of a profiler
/// schedule (three files, its third window's kernels slower), the other once. The
/// command compares two processes, the first's steps pooled and its device time summed
/// over its windows; SQL grouped by file compared four, each window against the others.
fn one_process_windows(dir: &Path) -> PathBuf {
    let windows = dir.join("one-process-windows");
    std::fs::create_dir_all(&windows).unwrap();
    let files = [(4242, 0, 0), (4242, 1, 0), (4242, 2, 90), (5151, 0, 30)];
    for (pid, window, slower) in files {
        let mut events = vec![
            serde_json::json!({"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}}),
            serde_json::json!({"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}}),
        ];
        for k in 0..3i64 {
            let step = window * 3 + k;
            let ts = 100_000 * window + 1000 * k;
            let correlation = pid * 100 + step;
            events.extend([
                serde_json::json!({"ph": "X", "cat": "user_annotation", "name": format!("ProfilerStep#{step}"), "pid": pid, "tid": pid, "ts": ts, "dur": 900}),
                serde_json::json!({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": pid, "ts": ts + 10, "dur": 100}),
                serde_json::json!({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": pid, "ts": ts + 20, "dur": 5, "args": {"correlation": correlation}}),
                serde_json::json!({"ph": "X", "cat": "kernel", "name": "volta_sgemm_128x64_nn", "pid": 0, "tid": 7, "ts": ts + 30, "dur": 300 + slower + 10 * k, "args": {"correlation": correlation, "device": 0, "stream": 7}}),
            ]);
        }
        let doc = serde_json::json!({"host_name": "node-a", "traceEvents": events});
        std::fs::write(
            windows.join(format!("node-a_{pid}.{window}.pt.trace.json")),
            serde_json::to_string(&doc).unwrap(),
        )
        .unwrap();
    }
    // What the SQL must agree with: the command compares the two processes.
    for command in ["gpu", "steps"] {
        let report = json(&[command, windows.to_str().unwrap(), "--format", "json"]);
        assert_eq!(report["across"]["compared"], 2, "{command}: {report}");
    }
    windows
}

/// The shared GPU XSpace in two profile runs of one log directory: one host profiled
/// twice, one process (its devices compared once, not each against itself).
fn xplane_twice(dir: &Path, traces: &Path) -> PathBuf {
    let xplane = traces.join("xplane/GPU-multi-worker/34.83.195.179_6003.xplane.pb");
    let logdir = dir.join("xplane-twice");
    for run in ["2026_11_22_03_00_00", "2026_11_22_03_05_00"] {
        let run = logdir.join("plugins/profile").join(run);
        std::fs::create_dir_all(&run).unwrap();
        std::fs::copy(&xplane, run.join("34.83.195.179_6003.xplane.pb")).unwrap();
    }
    logdir
}

/// A rank whose loop marks each iteration with `record_function("train_step")` and
/// no number, its data fetched between them; the first iteration's fetch came before
/// the profile, the last one's after it. The command takes the four ranges as the
/// steps (the repeating ops gave three: the last range, no fetch after it, was judged
/// unlike the others).
fn bare_step_markers(dir: &Path) -> PathBuf {
    let file = dir.join("bare-step-markers.json");
    let mut events = Vec::new();
    for k in 0..4i64 {
        let ts = 1000 * k;
        let dur = if k == 3 { 300 } else { 700 };
        events.extend([
            serde_json::json!({"ph": "X", "cat": "user_annotation", "name": "train_step", "pid": 10, "tid": 10, "ts": ts, "dur": dur}),
            serde_json::json!({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 10, "ts": ts + 10, "dur": 200}),
            serde_json::json!({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10, "ts": ts + 20, "dur": 5, "args": {"correlation": k + 1}}),
            serde_json::json!({"ph": "X", "cat": "kernel", "name": "volta_sgemm_128x64_nn", "pid": 0, "tid": 7, "ts": ts + 30, "dur": 150, "args": {"correlation": k + 1, "device": 0, "stream": 7}}),
        ]);
        if k < 3 {
            events.push(serde_json::json!({"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", "pid": 10, "tid": 10, "ts": ts + 800, "dur": 100}));
        }
    }
    let doc = serde_json::json!({"traceEvents": events});
    std::fs::write(&file, serde_json::to_string(&doc).unwrap()).unwrap();
    let steps = json(&["steps", file.to_str().unwrap(), "--format", "json"]);
    let source = &steps["sources"][0];
    assert_eq!(source["found_by"]["kind"], "markers", "{steps}");
    let found: Vec<(i64, i64)> = source["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["start_ns"].as_i64().unwrap(),
                s["dur_ns"].as_i64().unwrap(),
            )
        })
        .collect();
    let start = found[0].0;
    assert_eq!(
        found,
        [
            (start, 700_000),
            (start + 1_000_000, 700_000),
            (start + 2_000_000, 700_000),
            (start + 3_000_000, 300_000)
        ]
    );
    file
}

#[test]
fn every_query_gives_the_commands_numbers_on_duckdb_and_spark() {
    let Some(traces) = shared_traces() else {
        return;
    };
    if !python_with(&["duckdb"]) {
        return;
    }
    let dir = scratch_dir("sql");
    let mut cases = vec![
        prepare(&dir, "two-ranks", traces.join("kineto/hta/trace_filter")),
        prepare(&dir, "eight-ranks", eight_ranks(&dir, 0.05).unwrap()),
        prepare(
            &dir,
            "resnet50",
            traces.join("kineto/kineto-tb_plugin/resnet50_num_workers_0"),
        ),
        prepare(&dir, "amd", traces.join("kineto/hta/amd_trace")),
        prepare(
            &dir,
            "nsys-mpi",
            traces.join("nsys-sqlite/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"),
        ),
    ];
    for (name, path) in [
        (
            "cloverleaf",
            "nsys-sqlite/cloverleaf-nsys/perlmutter-cloverleaf-cuda.sqlite",
        ),
        ("nccl", "kineto/hta/nccl_parser_config"),
        ("ns-resolution", "kineto/hta/ns_resolution_trace"),
        ("alexnet", "kineto/hta/critical_path/alexnet"),
    ] {
        cases.push(prepare(&dir, name, traces.join(path)));
    }
    cases.push(prepare(&dir, "collective-launch", collective_launch(&dir)));
    cases.push(prepare(&dir, "bare-step-markers", bare_step_markers(&dir)));
    cases.push(prepare(
        &dir,
        "one-process-windows",
        one_process_windows(&dir),
    ));
    cases.push(prepare(&dir, "xplane-twice", xplane_twice(&dir, &traces)));
    // A fresh JAX program on one host: one process profiled twice (its XSpaces share
    // its threads) and another once: two processes to compare.
    if python_with(&["jax"]) {
        let jax = dir.join("jax-processes");
        common::jax_profiled_sessions(&jax, &["512,1024", "2048"]);
        cases.push(prepare(&dir, "jax-processes", jax));
    }
    // As a cluster job would write it: each rank converted on its own into one dataset,
    // so that ids and source numbers repeat across partitions.
    let two = traces.join("kineto/hta/trace_filter");
    let apart = dir.join("two-ranks-apart.parquet");
    for rank in 0..2 {
        convert(&two.join(format!("sampled_rank-{rank}.json.gz")), &apart);
    }
    cases.push(queries(&dir, "two-ranks-apart", two, &apart));
    cases.retain(|c| c.trace.exists());
    let files = |cases: &[Case], engine: &str| -> Vec<PathBuf> {
        cases
            .iter()
            .flat_map(|c| c.sql.iter())
            .filter(|(d, _, _)| d == engine)
            .map(|(_, _, p)| p.clone())
            .collect()
    };
    let duck = run_oracle_json(
        "sql_run.py",
        &[&["duckdb".into()], &files(&cases, "duckdb")[..]].concat(),
    );
    for case in &cases {
        check(case, "duckdb", &duck);
    }
    // Spark needs Java as well as pyspark.
    let java = std::process::Command::new("java")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !java && std::env::var_os("CI").is_some() {
        panic!("CI is set but there is no java for Spark");
    }
    if !java {
        opscope_corpus::skip("Spark: no java");
        return;
    }
    if !python_with(&["pyspark"]) {
        return;
    }
    // Spark in local mode takes 20-30 s a dataset on two cores: the multi-rank ones and
    // one of each other kind of trace.
    let on_spark = [
        "two-ranks",
        "eight-ranks",
        "two-ranks-apart",
        "collective-launch",
        "one-process-windows",
        "resnet50",
        "nsys-mpi",
    ];
    cases.retain(|c| on_spark.contains(&c.name));
    let spark = run_oracle_json(
        "sql_run.py",
        &[&["spark".into()], &files(&cases, "spark")[..]].concat(),
    );
    for case in &cases {
        check(case, "spark", &spark);
    }
}

/// A dataset that is not there is refused before any SQL is printed; a URL is the
/// engine's to read.
#[test]
fn a_missing_dataset_is_refused_and_a_url_is_passed_on() {
    let out = common::opscope(&["sql", "gpu", "no/such/dataset"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no/such/dataset: no such dataset"), "{err}");
    assert!(out.stdout.is_empty());
    // Traces given for a dataset: the hint converts them to a dataset beside them
    // (before, it suggested writing the dataset over the traces, which convert refuses),
    // and the command it gives works.
    let dir = common::scratch_dir("sql-hint");
    let trace = dir.join("mlp-train.json");
    std::fs::copy(
        common::repo_root().join("examples/traces/mlp-train.json"),
        &trace,
    )
    .unwrap();
    let _ = std::fs::remove_dir_all(dir.join("mlp-train.parquet"));
    let out = common::opscope(&["sql", "gpu", trace.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    let dataset = dir.join("mlp-train.parquet");
    let convert = format!(
        "`opscope convert {} -o {}`",
        trace.display(),
        dataset.display()
    );
    assert!(!out.status.success() && err.contains(&convert), "{err}");
    opscope_ok(&[
        "convert",
        trace.to_str().unwrap(),
        "-o",
        dataset.to_str().unwrap(),
    ]);
    opscope_ok(&["sql", "gpu", dataset.to_str().unwrap()]);
    let out = opscope_ok(&["sql", "steps", "s3://bucket/run", "--dialect", "spark"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("path 's3://bucket/run/*/*/slices.parquet', basePath 's3://bucket/run'"),
        "{text}"
    );
}
