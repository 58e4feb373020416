//! The formats crate's files form layers: no file reaches back to one that uses it.
//! Importers name only `importer` (the interface), the registry lists them and
//! dispatches to them, and a container (an archive) reads its members through the
//! dispatcher it is handed, not through the registry that lists it (before: eleven
//! files in one cycle through the registry, `input` and the archive).

use std::path::Path;

use opscope_corpus::architecture::{file_uses, first_cycle};

#[test]
fn no_file_reaches_back_to_a_file_that_uses_it() {
    let graph = file_uses(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    // The graph is read at all: the registry names the importers it lists.
    assert!(graph["registry"].contains("chrome"), "{graph:?}");
    assert!(graph["chrome"].contains("importer"), "{graph:?}");
    if let Some(cycle) = first_cycle(&graph) {
        panic!("import cycle: {}", cycle.join(" -> "));
    }
}
