//! The files of a crate as a graph of which names which (through `crate::…` paths),
//! for the tests that keep a crate's files in layers: no file reaches back to a file
//! that uses it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each source file under `src` (as `module` or `module/file`) and the files it names
/// through `crate::…` paths (a path names the longest file it reaches: `crate::gpu::
/// classify::…` names gpu/classify when that is a file, else gpu).
pub fn file_uses(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
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
        let relative = path.strip_prefix(src).unwrap().with_extension("");
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

/// The first cycle of `graph` a depth-first search meets, as the files around it
/// (the first named again at the end); `None` when the files form layers.
pub fn first_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut cycle = path[i..].to_vec();
            cycle.push(n.to_string());
            return Some(cycle);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for next in &graph[n] {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}
