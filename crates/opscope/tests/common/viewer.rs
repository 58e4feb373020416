//! `opscope view` started for a test: its address, and the process stopped when the
//! test is done.

use std::io::BufRead;
use std::io::BufReader;
use std::process::{Child, Command, Stdio};

/// The viewer, stopped when dropped.
pub struct Viewer {
    pub child: Child,
    pub url: String,
}

impl Drop for Viewer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `opscope view ARGS`, once it has given its address and shows the whole trace.
pub fn start_viewer(args: &[&str]) -> Viewer {
    let mut viewer = launch_viewer(args);
    // Files are served while they load: a test looks at the whole trace.
    while !super::http_json(&viewer.url, "api/meta")["meta"]["loading"].is_null() {
        if let Ok(Some(status)) = viewer.child.try_wait() {
            panic!("the viewer ended while loading: {status}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    viewer
}

/// `opscope view ARGS`, as soon as it has given its address (it may still be loading).
pub fn launch_viewer(args: &[&str]) -> Viewer {
    let mut child = Command::new(env!("CARGO_BIN_EXE_opscope"))
        .arg("view")
        .arg("--no-open")
        .args(args)
        .env("OPSCOPE_CACHE_DIR", "off")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().to_string();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with('/'),
        "the viewer printed {url:?}"
    );
    Viewer { child, url }
}
