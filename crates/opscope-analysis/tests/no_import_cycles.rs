//! The analysis crate's files form layers: no file reaches back to one that uses it
//! (`op_stats` and `memory` once used each other; what they share is `attribution`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each source file (as `module` or `module/file`) and the files it names through
/// `crate::…` paths.
fn uses() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let node = |path: &Path| {
        let relative = path.strip_prefix(&src).unwrap().with_extension("");
        let name = relative.to_string_lossy().replace('\\', "/");
        name.strip_suffix("/mod").unwrap_or(&name).to_string()
    };
    let nodes: BTreeSet<String> = files.iter().map(|f| node(f)).collect();
    let mut graph = BTreeMap::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let me = node(file);
        let mut used = BTreeSet::new();
        for (at, _) in text.match_indices("crate::") {
            // `crate::gpu::classify::…` names gpu/classify when that is a file, else gpu.
            let path: String = text[at + 7..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
            for n in (1..=parts.len()).rev() {
                let candidate = parts[..n].join("/");
                if nodes.contains(&candidate) {
                    if candidate != me && !me.starts_with(&format!("{candidate}/")) {
                        used.insert(candidate);
                    }
                    break;
                }
            }
        }
        graph.insert(me, used);
    }
    graph
}

#[test]
fn no_file_reaches_back_to_a_file_that_uses_it() {
    let graph = uses();
    assert!(graph["memory"].contains("attribution"), "{graph:?}");
    // Depth-first search for a cycle, reporting its files.
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) {
        if let Some(i) = path.iter().position(|p| p == n) {
            panic!("import cycle: {} -> {n}", path[i..].join(" -> "));
        }
        if done.contains(n) {
            return;
        }
        path.push(n.to_string());
        for next in &graph[n] {
            visit(next, graph, path, done);
        }
        path.pop();
        done.insert(n.to_string());
    }
    let mut done = BTreeSet::new();
    for n in graph.keys() {
        visit(n, &graph, &mut Vec::new(), &mut done);
    }
}
