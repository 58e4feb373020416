//! The analysis crate's files form layers: no file reaches back to one that uses it
//! (`op_stats` and `memory` once used each other; what they share is `attribution`).

use std::path::Path;

use opscope_corpus::architecture::{file_uses, first_cycle};

#[test]
fn no_file_reaches_back_to_a_file_that_uses_it() {
    let graph = file_uses(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(graph["memory"].contains("attribution"), "{graph:?}");
    if let Some(cycle) = first_cycle(&graph) {
        panic!("import cycle: {}", cycle.join(" -> "));
    }
}
