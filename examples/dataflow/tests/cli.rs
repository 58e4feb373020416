//! The example as a program: its help, its exit status option and its one-line account.
//! (Being an integration test also makes `cargo test` build the `dataflow` binary that
//! `opscope record`'s tests run.)

use std::process::Command;

fn dataflow(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dataflow"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn help_exit_code_and_account() {
    let help = dataflow(&["--help"]);
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("--steps"));

    let out = dataflow(&["--steps", "2", "--threads", "1", "--exit-code", "5"]);
    assert_eq!(out.status.code(), Some(5));
    let line = String::from_utf8(out.stdout).unwrap();
    assert!(line.starts_with("{\"steps\":2,\"threads\":1,"), "{line}");

    let bad = dataflow(&["--threads", "0"]);
    assert_eq!(bad.status.code(), Some(2));
}
