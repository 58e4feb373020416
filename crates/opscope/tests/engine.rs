//! Every report command of the engine's table reaches every surface with no line of
//! its own there: the command line (`--help`, each `--format`), `opscope report`'s
//! page, the viewer's panels and its `/api/report`, and `--live`. (Python's are in
//! python/tests: `REPORT_COMMANDS` enumerated the same way.)

mod common;

use std::process::Command;

use common::viewer::start_viewer;
use common::{http_json, opscope_ok, scratch_dir, shared_traces};
use opscope_engine::reports::Formats;

fn stdout(args: &[&str]) -> String {
    String::from_utf8(opscope_ok(args).stdout).unwrap()
}

/// `%XX` for what a query parameter may not hold as it is.
fn query_encoded(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The shared two-rank trace with GPU work, steps and ops (every command has something
/// to say of it), and its model.
fn two_ranks() -> Option<(std::path::PathBuf, opscope_model::Trace)> {
    let trace = shared_traces()?.join("kineto/hta/trace_filter");
    let loaded = opscope::embed::load(std::slice::from_ref(&trace), false, false).unwrap();
    Some((trace, loaded))
}

#[test]
fn every_report_command_is_on_every_surface() {
    let Some((trace, loaded)) = two_ranks() else {
        return;
    };
    let path = trace.to_str().unwrap();
    let cx = opscope_analysis::Context::new(&loaded);

    let dir = scratch_dir("engine-surfaces");
    let page_path = dir.join("report.html");
    opscope_ok(&[
        "report",
        "--no-cache",
        "-o",
        page_path.to_str().unwrap(),
        path,
    ]);
    let page = std::fs::read_to_string(&page_path).unwrap();
    let viewer = start_viewer(&[path]);
    let panels = {
        use std::io::{Read, Write};
        let rest = viewer.url.strip_prefix("http://").unwrap();
        let (host, base) = rest.split_once('/').unwrap();
        let mut s = std::net::TcpStream::connect(host).unwrap();
        write!(s, "GET /{base}api/panels HTTP/1.0\r\nHost: {host}\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    };
    let listed = http_json(&viewer.url, "api/reports");
    assert_eq!(
        listed.as_array().unwrap().len(),
        opscope_engine::REPORTS.len()
    );

    assert!(opscope_engine::REPORTS.len() >= 6);
    for command in opscope_engine::REPORTS {
        let name = command.name();
        let words: Vec<&str> = name.split(' ').collect();
        let leaf = *words.last().unwrap();

        // In the list of its group (or of all commands), with its description.
        let group_help = stdout(&[&words[..words.len() - 1], &["--help"]].concat());
        let about = command.about();
        assert!(
            group_help.contains(&format!("  {leaf} ")),
            "{name}: not listed:\n{group_help}"
        );
        // `-h`: the short help, whose first line is the description (`--help` may have a
        // longer one).
        let own_help = stdout(&[&words[..], &["-h"]].concat());
        let first_words: String = about
            .split_whitespace()
            .take(4)
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            own_help
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .contains(&first_words),
            "{name}: its description is not its help's:\n{own_help}"
        );
        assert!(own_help.contains("--live"), "{name}: no --live");
        for keyword in command.keywords() {
            assert!(
                own_help.contains(&keyword.replace('_', "-")) || own_help.contains(&keyword),
                "{name}: option {keyword} not in --help"
            );
        }

        // Each format; JSON is the engine's own, run with no options (so the command
        // line's defaults are the options struct's).
        let engine_json = {
            let result = command.run_keywords(&cx, &serde_json::Map::new()).unwrap();
            let mut out = Vec::new();
            result.write_json(&mut out).unwrap();
            out.push(b'\n');
            String::from_utf8(out).unwrap()
        };
        let formats: &[&str] = match command.formats() {
            Formats::TextJson => &["text", "json"],
            Formats::TextJsonCsv => &["text", "json", "csv"],
        };
        for format in formats {
            let out = stdout(&[&words[..], &["--no-cache", "--format", format, path]].concat());
            assert!(!out.trim().is_empty(), "{name} --format {format}: nothing");
            if *format == "json" {
                assert_eq!(
                    out, engine_json,
                    "{name}: the CLI's JSON is not the engine's"
                );
            }
        }

        // Its section of the page and of the viewer's panels.
        if let Some((title, _)) = command.section(&cx, 20).unwrap() {
            let heading = format!("<h2>{title}</h2>");
            assert!(page.contains(&heading), "{name}: no {heading} in the page");
            assert!(
                panels.contains(&heading),
                "{name}: no {heading} in the panels"
            );
        }

        // The viewer's report of it, as the CLI's JSON.
        let from_viewer = http_json(
            &viewer.url,
            &format!("api/report?name={}", query_encoded(name)),
        );
        let engine: serde_json::Value = serde_json::from_str(&engine_json).unwrap();
        assert_eq!(from_viewer, engine, "{name}: the viewer's report differs");

        // --live goes to the agent (none here: it says so).
        let live = Command::new(env!("CARGO_BIN_EXE_opscope"))
            .args(&words)
            .args(["--live", "some-job"])
            .env("OPSCOPE_AGENT", dir.join("no-agent.sock"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&live.stderr);
        assert!(
            !live.status.success() && stderr.contains("cannot reach the agent"),
            "{name} --live: {stderr}"
        );
    }
}

/// Options given by name are checked against the command's own (the error names the
/// flag and lists them), lists are the command line's comma-separated values, and the
/// viewer's query parameters are typed as the command line types them.
#[test]
fn options_by_name_are_the_command_lines() {
    let Some((trace, loaded)) = two_ranks() else {
        return;
    };
    let path = trace.to_str().unwrap();
    let cx = opscope_analysis::Context::new(&loaded);
    // `stats  op`: the name's words are found however they are spaced.
    let ops = opscope_engine::find("stats  op").unwrap();
    // The JSON of `stats op` with options by name, and with the command line's flags.
    let same = |keywords: &str, flags: &[&str]| {
        let keywords: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(keywords).unwrap();
        let mut by_name = Vec::new();
        ops.run_keywords(&cx, &keywords)
            .unwrap()
            .write_json(&mut by_name)
            .unwrap();
        by_name.push(b'\n');
        let args = [
            &["stats", "op", "--no-cache"],
            flags,
            &["--format", "json", path],
        ]
        .concat();
        let cli = opscope_ok(&args);
        assert_eq!(
            String::from_utf8(by_name).unwrap(),
            String::from_utf8(cli.stdout).unwrap(),
            "{keywords:?}"
        );
    };
    same(
        r#"{"select": ["occurrence", "self_cpu_micros"], "order_by": "self_cpu_micros", "min_micros": 100}"#,
        &[
            "-select",
            "occurrence,self_cpu_micros",
            "-order_by",
            "self_cpu_micros",
            "-min_micros",
            "100",
        ],
    );
    // The tfprof views' shared options (flattened in their structs).
    same(
        r#"{"step": 551, "tfprof_micros": true}"#,
        &["-step", "551", "-tfprof_micros"],
    );

    let unknown: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(r#"{"kernel_wait": 3}"#).unwrap();
    let gpu = opscope_engine::find("gpu").unwrap();
    let Err(e) = gpu.run_keywords(&cx, &unknown) else {
        panic!("an unknown option was taken");
    };
    let message = e.to_string();
    assert!(
        message.contains("--kernel-wait") && message.contains("kernel_wait_us"),
        "{message}"
    );
    let wrong: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(r#"{"kernel_wait_us": "fast"}"#).unwrap();
    let Err(e) = gpu.run_keywords(&cx, &wrong) else {
        panic!("text was taken for a number");
    };
    assert!(e.to_string().contains("fast"), "{e}");

    let viewer = start_viewer(&[path]);
    let narrow = http_json(
        &viewer.url,
        "api/report?name=gpu&kernel_wait_us=1000&exclude_last_step=true",
    );
    let cli: serde_json::Value = serde_json::from_slice(
        &opscope_ok(&[
            "gpu",
            "--no-cache",
            "--kernel-wait-us",
            "1000",
            "--exclude-last-step",
            "--format",
            "json",
            path,
        ])
        .stdout,
    )
    .unwrap();
    assert_eq!(narrow, cli);
}

/// `host` (added to the table with no other file touched): a process's host time,
/// worked out by hand on a trace made here — an op on one thread, then a gloo
/// all-reduce, and an op on another thread that overlaps it.
#[test]
fn host_threads_time_is_worked_out_by_hand() {
    let dir = scratch_dir("engine-host");
    let trace = dir.join("two-threads.json");
    std::fs::write(
        &trace,
        r#"{"traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
            {"ph": "X", "cat": "cpu_op", "name": "gloo:all_reduce", "pid": 1, "tid": 1, "ts": 150, "dur": 100},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 200, "dur": 100}
        ]}"#,
    )
    .unwrap();
    let out = opscope_ok(&[
        "host",
        "--no-cache",
        "--format",
        "json",
        trace.to_str().unwrap(),
    ]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &doc["processes"][0];
    let us = |v: &serde_json::Value| v.as_i64().unwrap() / 1000;
    // From 0 to 300 µs: computation 0-100 and 200-300, communication 150-250, both at
    // once 200-250, nothing 100-150.
    assert_eq!(us(&p["span_ns"]), 300);
    assert_eq!(us(&p["time"]["computation_ns"]), 200);
    assert_eq!(us(&p["time"]["communication_ns"]), 100);
    assert_eq!(us(&p["time"]["overlap_ns"]), 50);
    assert_eq!(us(&p["time"]["busy_ns"]), 250);
    assert_eq!(us(&p["time"]["idle_ns"]), 50);
    let csv = String::from_utf8(
        opscope_ok(&[
            "host",
            "--no-cache",
            "--format",
            "csv",
            trace.to_str().unwrap(),
        ])
        .stdout,
    )
    .unwrap();
    assert!(csv.starts_with("process,span,busy,"), "{csv}");
}
