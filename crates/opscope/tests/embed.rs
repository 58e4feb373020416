//! `opscope::embed`, what the Python module is built on: a model loaded once, the report
//! commands run on it, their output the executable's own on the same files.

mod common;

use std::sync::Arc;

use common::{opscope_ok, shared_traces};

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).expect("a JSON document")
}

#[test]
fn reports_on_a_loaded_model_are_the_executables() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let ranks = traces.join("kineto/hta/trace_filter");
    let trace = Arc::new(opscope::embed::load(std::slice::from_ref(&ranks), false, false).unwrap());
    let path = ranks.to_str().unwrap();
    for command in [
        &["gpu", "--exclude-last-step"][..],
        &["steps"],
        &["stats", "op", "-order_by", "self_cpu_micros"],
        &["stats", "kernel"],
        &["info"],
    ] {
        let mut args: Vec<String> = command.iter().map(|s| s.to_string()).collect();
        args.extend(["--format".into(), "json".into()]);
        let embedded =
            opscope::embed::run_on(Arc::clone(&trace), std::slice::from_ref(&ranks), &args)
                .unwrap();
        let mut argv: Vec<&str> = args.iter().map(String::as_str).collect();
        argv.extend(["--no-cache", path]);
        let executable = opscope_ok(&argv).stdout;
        assert_eq!(json(&embedded), json(&executable), "{}", args.join(" "));
    }
    // tfprof's options as keywords become the flags the command line takes.
    assert_eq!(opscope::embed::flag("stats", "order_by"), "-order_by");
    assert_eq!(
        opscope::embed::flag("gpu", "exclude_last_step"),
        "--exclude-last-step"
    );
}

#[test]
fn what_cannot_run_on_a_loaded_model_is_refused() {
    let empty = Arc::new(opscope_model::Trace::default());
    let err = opscope::embed::run_on(Arc::clone(&empty), &[], &["record".into()]).unwrap_err();
    assert!(
        err.to_string()
            .contains("does not report on a loaded trace"),
        "{err}"
    );
    let err = opscope::embed::run_on(Arc::clone(&empty), &[], &[]).unwrap_err();
    assert!(err.to_string().contains("no command given"), "{err}");
    let err =
        opscope::embed::run_on(empty, &[], &["gpu".into(), "--no-such-flag".into()]).unwrap_err();
    assert!(err.to_string().contains("--no-such-flag"), "{err}");
}
