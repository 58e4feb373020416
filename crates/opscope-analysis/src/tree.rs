//! tfprof's tree views. `scope`: the name-scope tree — TensorFlow node names split at
//! `/`, or, for ops without one (PyTorch), the nesting of ops and `record_function`
//! ranges. `code`: the Python call tree — the `Call stack` of each op, or the
//! `python_function` ranges around it — with op time charged to the source lines.
//! Each op's self CPU time, the accelerator time it launched and the memory it reported
//! land on its node; totals add up the subtree, so nothing counts twice.

use hashbrown::HashMap;
use opscope_model::args::ArgValue;
use opscope_model::{SliceKind, Trace, NONE};
use regex::Regex;
use serde::Serialize;

use crate::attribution::{is_op_kind, is_op_slice};
use crate::context::Context;
use crate::correlate;
use crate::op_stats::{charged_ns, MemoryKeys, ReportedMemory, Timing};
use crate::report::{
    Block, Column as ReportColumn, Part, Report, Reported, Table, Tree as ReportTree, TreeRow,
    Value,
};
use crate::window::Window;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TreeKind {
    Scope,
    Code,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct TreeNode {
    pub name: String,
    pub depth: usize,
    /// Index of the parent node; the root (0) has none.
    pub parent: Option<usize>,
    /// Ops whose own node this is.
    pub occurrence: u64,
    pub self_cpu_ns: i64,
    pub self_accelerator_ns: i64,
    pub total_cpu_ns: i64,
    pub total_accelerator_ns: i64,
    /// Memory the node's ops reported (TensorFlow RunMetadata), tfprof's columns.
    pub self_memory: ReportedMemory,
    pub total_memory: ReportedMemory,
    #[serde(skip)]
    pub children: Vec<usize>,
}

/// What a node counts, self or total.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Amounts {
    pub cpu_ns: i64,
    pub accelerator_ns: i64,
    pub memory: ReportedMemory,
}

impl std::ops::AddAssign for Amounts {
    fn add_assign(&mut self, o: Amounts) {
        self.cpu_ns += o.cpu_ns;
        self.accelerator_ns += o.accelerator_ns;
        self.memory += o.memory;
    }
}

impl TreeNode {
    pub fn self_amounts(&self) -> Amounts {
        Amounts {
            cpu_ns: self.self_cpu_ns,
            accelerator_ns: self.self_accelerator_ns,
            memory: self.self_memory,
        }
    }

    pub fn total_amounts(&self) -> Amounts {
        Amounts {
            cpu_ns: self.total_cpu_ns,
            accelerator_ns: self.total_accelerator_ns,
            memory: self.total_memory,
        }
    }
}

/// Nodes in depth-first order of insertion; node 0 is the root.
#[derive(Clone, Debug, Serialize)]
pub struct Tree {
    pub nodes: Vec<TreeNode>,
}

impl Tree {
    /// Node `i`'s names from the root down, joined by `/` (the root left out): a
    /// TensorFlow node's full name in the scope view.
    pub fn path(&self, i: usize) -> String {
        let mut parts = Vec::new();
        let mut at = Some(i);
        while let Some(n) = at.filter(|&n| n != 0) {
            parts.push(self.nodes[n].name.as_str());
            at = self.nodes[n].parent;
        }
        parts.reverse();
        parts.join("/")
    }

    fn new() -> Tree {
        Tree {
            nodes: vec![TreeNode {
                name: "_TFProfRoot".into(),
                ..TreeNode::default()
            }],
        }
    }

    fn child(
        &mut self,
        parent: usize,
        name: &str,
        index: &mut HashMap<(usize, String), usize>,
    ) -> usize {
        if let Some(&c) = index.get(&(parent, name.to_string())) {
            return c;
        }
        let c = self.nodes.len();
        self.nodes.push(TreeNode {
            name: name.to_string(),
            depth: self.nodes[parent].depth + 1,
            parent: Some(parent),
            ..TreeNode::default()
        });
        self.nodes[parent].children.push(c);
        index.insert((parent, name.to_string()), c);
        c
    }
}

/// The path of names under which an op is charged.
fn path(
    trace: &Trace,
    kind: TreeKind,
    op: usize,
    keys: &Keys,
    stacks: &crate::attribution::OpStacks<'_>,
) -> Vec<String> {
    let s = &trace.slices;
    let name = trace.str(s.name[op]).to_string();
    let arg_str = |key: Option<opscope_model::StrId>| match key
        .and_then(|k| trace.args.find(s.args[op], k))
    {
        Some(ArgValue::Str(v)) => Some(trace.str(v)),
        _ => None,
    };
    // Enclosing slices of the wanted kinds, innermost first.
    let ancestors = |wanted: &dyn Fn(SliceKind) -> bool| {
        let mut names = Vec::new();
        let mut p = s.parent[op];
        while p != NONE {
            if wanted(s.kind(p as usize)) {
                names.push(trace.str(s.name[p as usize]).to_string());
            }
            p = s.parent[p as usize];
        }
        names
    };
    match kind {
        TreeKind::Scope => match arg_str(keys.node_name) {
            Some(node) if !node.is_empty() => node.split('/').map(str::to_string).collect(),
            _ => {
                let mut names = ancestors(&|k| is_op_kind(k));
                names.reverse();
                names.push(name);
                names
            }
        },
        TreeKind::Code => {
            let mut frames: Vec<String> = match arg_str(keys.call_stack) {
                // Kineto writes the innermost frame first.
                Some(stack) if !stack.is_empty() => {
                    stack.split(';').rev().map(str::to_string).collect()
                }
                _ => {
                    let mut names = ancestors(&|k| k == SliceKind::PythonFunction);
                    names.reverse();
                    names
                }
            };
            // No stack of its own: the one sampled on its thread while it ran
            // (`opscope record`, `attach`).
            if frames.is_empty() {
                if let Some(stack) = stacks.of(op) {
                    // Python frames: the code's lines, not the native code under them
                    // nor the recorder's wrappers between them.
                    let program =
                        |f: &u32| !trace.is_native_frame(*f) && !trace.is_recorder_frame(*f);
                    frames = stack
                        .frames
                        .iter()
                        .filter(|f| program(f))
                        .map(|&f| crate::flame::sampled_frame_text(trace, f as usize))
                        .collect();
                    frames.extend(
                        stack
                            .caller
                            .filter(program)
                            .map(|f| crate::flame::frame_text_without_line(trace, f as usize)),
                    );
                }
            }
            if frames.is_empty() {
                frames.push("(no Python stack)".into());
            }
            frames.push(name);
            frames
        }
    }
}

struct Keys {
    node_name: Option<opscope_model::StrId>,
    call_stack: Option<opscope_model::StrId>,
}

/// The tree of `kind` over the slices of `window`.
pub fn build(cx: &Context, kind: TreeKind, window: Window, timing: Timing) -> Tree {
    let trace = cx.trace();
    let correlation = cx.correlation();
    let selected = &*cx.selected(window);
    let s = &trace.slices;
    let keys = Keys {
        node_name: trace.strings.find("name"),
        call_stack: trace.strings.find("Call stack"),
    };
    let memory_keys = MemoryKeys::new(trace);
    let is_op = |i: usize| is_op_slice(trace, i);
    // Self CPU time of the selected ops (all their children left out, selected or
    // not), and the accelerator time of the selected device work, per op.
    let mut self_cpu: HashMap<usize, i64> = HashMap::new();
    let mut accelerator: HashMap<usize, i64> = HashMap::new();
    for i in 0..s.len() {
        if is_op(i) {
            let dur = charged_ns(trace, i, timing);
            if selected[i] {
                *self_cpu.entry(i).or_default() += dur;
            }
            let p = s.parent[i];
            if p != NONE && is_op(p as usize) && selected[p as usize] {
                *self_cpu.entry(p as usize).or_default() -= dur;
            }
        } else if selected[i] && correlate::is_device_work(trace, i) {
            if let Some(op) = correlation.op_of(trace, i) {
                *accelerator.entry(op).or_default() += charged_ns(trace, i, timing);
            }
        }
    }
    let mut tree = Tree::new();
    let mut index = HashMap::new();
    let stacks = match kind {
        TreeKind::Code => crate::attribution::OpStacks::new(trace),
        TreeKind::Scope => crate::attribution::OpStacks::none(trace),
    };
    let mut ops: Vec<usize> = self_cpu.keys().chain(accelerator.keys()).copied().collect();
    ops.sort_unstable_by_key(|&i| (s.ts[i], i));
    ops.dedup();
    for op in ops {
        let mut node = 0;
        for part in path(trace, kind, op, &keys, &stacks) {
            node = tree.child(node, &part, &mut index);
        }
        let memory = if self_cpu.contains_key(&op) {
            memory_keys.of(trace, op).unwrap_or_default()
        } else {
            ReportedMemory::default()
        };
        let n = &mut tree.nodes[node];
        if self_cpu.contains_key(&op) {
            n.occurrence += 1;
        }
        n.self_cpu_ns += self_cpu.get(&op).copied().unwrap_or(0);
        n.self_accelerator_ns += accelerator.get(&op).copied().unwrap_or(0);
        n.self_memory += memory;
    }
    // Totals, children before parents (children always come later).
    for i in (0..tree.nodes.len()).rev() {
        let mut total = tree.nodes[i].self_amounts();
        for &c in &tree.nodes[i].children {
            total += tree.nodes[c].total_amounts();
        }
        let n = &mut tree.nodes[i];
        n.total_cpu_ns = total.cpu_ns;
        n.total_accelerator_ns = total.accelerator_ns;
        n.total_memory = total.memory;
    }
    tree
}

/// Which nodes a tree view shows (tfprof's options for the tree views).
#[derive(Clone, Debug, Default)]
pub struct TreeDisplay {
    /// Deepest level shown (the root is level 0); `None` for all.
    pub max_depth: Option<usize>,
    /// Hide nodes whose subtree has less CPU plus accelerator time (µs).
    pub min_micros: f64,
    /// Hide nodes whose subtree requested fewer bytes.
    pub min_bytes: i64,
    /// Totals count only the nodes shown (tfprof's `-account_displayed_op_only`).
    pub account_displayed_only: bool,
    /// Show only the subtrees under nodes whose whole name matches (all when empty).
    pub start_name_regexes: Vec<Regex>,
    /// Show a matching node but nothing under it.
    pub trim_name_regexes: Vec<Regex>,
    /// Show only nodes whose whole name matches (all when empty); others are skipped
    /// but their children can still show.
    pub show_name_regexes: Vec<Regex>,
    pub hide_name_regexes: Vec<Regex>,
}

fn matches(regexes: &[Regex], text: &str) -> bool {
    regexes.iter().any(|r| r.is_match(text))
}

/// One node as a view prints it.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Shown {
    pub node: usize,
    /// Depth to print it at (hidden ancestors do not count).
    pub depth: usize,
    /// Its subtree's totals: all of it, or with `account_displayed_only` only the
    /// nodes shown.
    pub total: Amounts,
}

/// The nodes to print, in depth-first order. A hidden node's shown descendants move up
/// to its nearest shown ancestor; siblings are ordered by the totals printed (as tfprof
/// orders them), largest first.
pub fn display(tree: &Tree, options: &TreeDisplay) -> Vec<Shown> {
    struct Entry {
        node: usize,
        parent: Option<usize>,
        children: Vec<usize>,
        total: Amounts,
    }
    let mut entries: Vec<Entry> = Vec::new();
    // (node, nearest shown ancestor's entry, inside a started subtree)
    let mut stack = vec![(0usize, None::<usize>, options.start_name_regexes.is_empty())];
    while let Some((i, above, started)) = stack.pop() {
        let node = &tree.nodes[i];
        let started = started || matches(&options.start_name_regexes, &node.name);
        let micros = (node.total_cpu_ns + node.total_accelerator_ns) as f64 / 1000.0;
        if i != 0
            && (micros < options.min_micros || node.total_memory.requested < options.min_bytes)
        {
            continue;
        }
        let shown = started
            && (options.show_name_regexes.is_empty()
                || matches(&options.show_name_regexes, &node.name))
            && !matches(&options.hide_name_regexes, &node.name);
        let mut below = above;
        if shown {
            let e = entries.len();
            entries.push(Entry {
                node: i,
                parent: above,
                children: Vec::new(),
                total: node.self_amounts(),
            });
            if let Some(a) = above {
                entries[a].children.push(e);
            }
            below = Some(e);
        }
        if options.max_depth.is_some_and(|m| node.depth >= m)
            || (i != 0 && matches(&options.trim_name_regexes, &node.name))
        {
            continue;
        }
        for &c in node.children.iter().rev() {
            stack.push((c, below, started));
        }
    }
    // Entries come after their parents: add up the shown totals bottom-up.
    for e in (0..entries.len()).rev() {
        if !options.account_displayed_only {
            entries[e].total = tree.nodes[entries[e].node].total_amounts();
        } else if let Some(p) = entries[e].parent {
            let t = entries[e].total;
            entries[p].total += t;
        }
    }
    let time = |e: &Entry| e.total.cpu_ns + e.total.accelerator_ns;
    let order = |list: &mut Vec<usize>, entries: &[Entry]| {
        list.sort_by(|&a, &b| {
            time(&entries[b]).cmp(&time(&entries[a])).then_with(|| {
                tree.nodes[entries[a].node]
                    .name
                    .cmp(&tree.nodes[entries[b].node].name)
            })
        });
    };
    let mut roots: Vec<usize> = (0..entries.len())
        .filter(|&e| entries[e].parent.is_none())
        .collect();
    order(&mut roots, &entries);
    for e in 0..entries.len() {
        let mut kids = std::mem::take(&mut entries[e].children);
        order(&mut kids, &entries);
        entries[e].children = kids;
    }
    let mut out = Vec::with_capacity(entries.len());
    let mut stack: Vec<(usize, usize)> = roots.iter().rev().map(|&r| (r, 0)).collect();
    while let Some((e, depth)) = stack.pop() {
        out.push(Shown {
            node: entries[e].node,
            depth,
            total: entries[e].total,
        });
        for &c in entries[e].children.iter().rev() {
            stack.push((c, depth + 1));
        }
    }
    out
}

/// A column of the tree views, shown as self/total (tfprof's `-select` for them).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TreeColumn {
    Micros,
    CpuMicros,
    AcceleratorMicros,
    Bytes,
    PeakBytes,
    ResidualBytes,
    OutputBytes,
    Occurrence,
}

impl TreeColumn {
    pub const ALL: [(&'static str, TreeColumn); 8] = [
        ("micros", TreeColumn::Micros),
        ("cpu_micros", TreeColumn::CpuMicros),
        ("accelerator_micros", TreeColumn::AcceleratorMicros),
        ("bytes", TreeColumn::Bytes),
        ("peak_bytes", TreeColumn::PeakBytes),
        ("residual_bytes", TreeColumn::ResidualBytes),
        ("output_bytes", TreeColumn::OutputBytes),
        ("occurrence", TreeColumn::Occurrence),
    ];

    /// A comma-separated list of tfprof's names.
    pub fn parse_list(list: &str) -> Result<Vec<TreeColumn>, String> {
        list.split(',')
            .filter(|c| !c.is_empty())
            .map(|c| {
                Self::ALL
                    .iter()
                    .find(|(name, _)| *name == c)
                    .map(|&(_, col)| col)
                    .ok_or_else(|| {
                        let known: Vec<&str> = Self::ALL.iter().map(|(n, _)| *n).collect();
                        format!(
                            "unknown column {c:?} for a tree view (known: {})",
                            known.join(", ")
                        )
                    })
            })
            .collect()
    }

    /// Its title in the header; pairs say so (`ops`, one count, is no pair).
    fn legend(self) -> &'static str {
        match self {
            TreeColumn::Micros => "cpu time (self/total) | accelerator time (self/total)",
            TreeColumn::CpuMicros => "cpu time (self/total)",
            TreeColumn::AcceleratorMicros => "accelerator time (self/total)",
            TreeColumn::Bytes => "requested bytes (self/total)",
            TreeColumn::PeakBytes => "peak bytes (self/total)",
            TreeColumn::ResidualBytes => "residual bytes (self/total)",
            TreeColumn::OutputBytes => "output bytes (self/total)",
            TreeColumn::Occurrence => "ops",
        }
    }
}

/// A tree view as `stats scope` and `stats code` show it: the nodes shown, with the
/// columns chosen.
pub struct TreeView<'a> {
    pub tree: &'a Tree,
    pub shown: &'a [Shown],
    pub columns: &'a [TreeColumn],
}

/// In JSON, each node shown with its path, the depth it is shown at and its shown
/// totals.
impl Serialize for TreeView<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let nodes: Vec<serde_json::Value> = self
            .shown
            .iter()
            .map(|s| {
                let mut v = serde_json::to_value(&self.tree.nodes[s.node]).unwrap_or_default();
                v["path"] = self.tree.path(s.node).into();
                v["shown_depth"] = s.depth.into();
                v["index"] = s.node.into();
                v["shown_total_cpu_ns"] = s.total.cpu_ns.into();
                v["shown_total_accelerator_ns"] = s.total.accelerator_ns.into();
                v["shown_total_memory"] = serde_json::to_value(s.total.memory).unwrap_or_default();
                v
            })
            .collect();
        nodes.serialize(serializer)
    }
}

impl Reported for TreeView<'_> {
    fn report(&self) -> Report {
        let legend: Vec<&str> = self.columns.iter().map(|c| c.legend()).collect();
        let mut table = Table::new(
            [
                ("depth", true),
                ("name", false),
                ("occurrence", true),
                ("self_cpu_micros", true),
                ("total_cpu_micros", true),
                ("self_accelerator_micros", true),
                ("total_accelerator_micros", true),
                ("self_requested_bytes", true),
                ("total_requested_bytes", true),
                ("self_peak_bytes", true),
                ("total_peak_bytes", true),
                ("self_residual_bytes", true),
                ("total_residual_bytes", true),
                ("self_output_bytes", true),
                ("total_output_bytes", true),
            ]
            .into_iter()
            .map(|(title, numeric)| {
                if numeric {
                    ReportColumn::numeric(title)
                } else {
                    ReportColumn::text(title)
                }
            })
            .collect(),
        );
        let mut rows = Vec::new();
        for s in self.shown {
            let n = &self.tree.nodes[s.node];
            let (own, total) = (n.self_amounts(), s.total);
            let time = |ns: i64| Value::Duration(ns as f64);
            let bytes = |b: i64| Value::TfprofBytes(b);
            table.rows.push(vec![
                Value::Count(s.depth as i64),
                Value::text(&n.name),
                Value::Count(n.occurrence as i64),
                time(own.cpu_ns),
                time(total.cpu_ns),
                time(own.accelerator_ns),
                time(total.accelerator_ns),
                bytes(own.memory.requested),
                bytes(total.memory.requested),
                bytes(own.memory.peak),
                bytes(total.memory.peak),
                bytes(own.memory.residual),
                bytes(total.memory.residual),
                bytes(own.memory.output),
                bytes(total.memory.output),
            ]);
            let parts = self
                .columns
                .iter()
                .flat_map(|c| match c {
                    TreeColumn::Micros => vec![
                        Part::Pair(time(own.cpu_ns), time(total.cpu_ns)),
                        Part::Pair(time(own.accelerator_ns), time(total.accelerator_ns)),
                    ],
                    TreeColumn::CpuMicros => {
                        vec![Part::Pair(time(own.cpu_ns), time(total.cpu_ns))]
                    }
                    TreeColumn::AcceleratorMicros => vec![Part::Pair(
                        time(own.accelerator_ns),
                        time(total.accelerator_ns),
                    )],
                    TreeColumn::Bytes => vec![Part::Pair(
                        bytes(own.memory.requested),
                        bytes(total.memory.requested),
                    )],
                    TreeColumn::PeakBytes => {
                        vec![Part::Pair(bytes(own.memory.peak), bytes(total.memory.peak))]
                    }
                    TreeColumn::ResidualBytes => vec![Part::Pair(
                        bytes(own.memory.residual),
                        bytes(total.memory.residual),
                    )],
                    TreeColumn::OutputBytes => vec![Part::Pair(
                        bytes(own.memory.output),
                        bytes(total.memory.output),
                    )],
                    TreeColumn::Occurrence => vec![Part::One(Value::Count(n.occurrence as i64))],
                })
                .collect();
            rows.push(TreeRow {
                depth: s.depth,
                name: n.name.clone(),
                parts,
            });
        }
        Report {
            blocks: vec![Block::Tree(ReportTree {
                legend: legend.join(" | "),
                rows,
                table,
            })],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// root → a (30 µs) → a/x (20 µs), root → b (5 µs).
    fn sample() -> Tree {
        let mut tree = Tree::new();
        let mut index = HashMap::new();
        let a = tree.child(0, "a", &mut index);
        let x = tree.child(a, "x", &mut index);
        let b = tree.child(0, "b", &mut index);
        for (node, self_us) in [(a, 10), (x, 20), (b, 5)] {
            tree.nodes[node].self_cpu_ns = self_us * 1000;
        }
        let totals = [(0, 35), (a, 30), (x, 20), (b, 5)];
        for (node, total_us) in totals {
            tree.nodes[node].total_cpu_ns = total_us * 1000;
        }
        tree
    }

    /// An op's sampled stack in the code tree holds the program's frames, not the
    /// wrappers of `opscope record`'s bootstrap between them (`_wrapped` showed under the
    /// program's loop in a fresh program's tree).
    #[test]
    fn the_recorders_frames_are_no_code_of_the_program() {
        use opscope_model::events::SliceRow;
        use opscope_model::samples::state;
        use opscope_model::{ArgsId, SampleRow, SliceKind, TrackKind};
        let mut t = Trace::new();
        let source = t.add_source(opscope_model::Source {
            path: "run.pftrace".into(),
            format: "perfetto".into(),
            clock: opscope_model::ClockId(0),
            host: None,
            rank: None,
            world_size: None,
            metadata: ArgsId::NONE,
        });
        let p = t.process(source, 1);
        let th = t.thread(p, 1);
        let track = t.thread_track(th, TrackKind::Thread);
        let (program, ours) = (
            t.intern("train.py"),
            t.intern("session/.opscope/python/sitecustomize.py"),
        );
        let frame = |t: &mut Trace, name: &str, file, line| {
            let name = t.intern(name);
            t.stacks.frame(name, file, line)
        };
        let main = frame(&mut t, "main", program, 3);
        let wrapper = frame(&mut t, "_wrapped", ours, 40);
        let step = frame(&mut t, "step", program, 9);
        let stack = t.stacks.stack([main, wrapper, step]);
        t.samples.push(SampleRow {
            ts: 50,
            track,
            stack,
            period: 10,
            state: state::ACTIVE_KNOWN | state::ACTIVE,
        });
        let name = t.intern("aten::mm");
        t.slices.push(SliceRow {
            track,
            ts: 0,
            dur: 100,
            name,
            category: name,
            kind: SliceKind::Op,
            args: ArgsId::NONE,
        });
        t.finish();
        let tree = build(
            &Context::new(&t),
            TreeKind::Code,
            Window::Whole,
            Timing::Exact,
        );
        let all = names(&tree, &TreeDisplay::default());
        assert_eq!(
            all,
            [
                "_TFProfRoot",
                " main (train.py:3)",
                "  step (train.py:9)",
                "   aten::mm"
            ]
        );
    }

    /// A trace of one recorded process with one thread, and its track.
    fn one_sampled_thread() -> (Trace, opscope_model::TrackId) {
        let mut t = Trace::new();
        let source = t.add_source(opscope_model::Source {
            path: "run.pftrace".into(),
            format: "perfetto".into(),
            clock: opscope_model::ClockId(0),
            host: None,
            rank: None,
            world_size: None,
            metadata: opscope_model::ArgsId::NONE,
        });
        let p = t.process(source, 1);
        let th = t.thread(p, 1);
        let track = t.thread_track(th, opscope_model::TrackKind::Thread);
        (t, track)
    }

    /// A running thread's sample of `frames` (outermost first).
    fn push_sample(
        t: &mut Trace,
        track: opscope_model::TrackId,
        ts: i64,
        frames: &[u32],
        period: i64,
    ) {
        use opscope_model::samples::state;
        let stack = t.stacks.stack(frames.iter().copied());
        t.samples.push(opscope_model::SampleRow {
            ts,
            track,
            stack,
            period,
            state: state::ACTIVE_KNOWN | state::ACTIVE,
        });
    }

    fn push_op(t: &mut Trace, track: opscope_model::TrackId, name: &str, ts: i64, dur: i64) {
        let name = t.intern(name);
        t.slices.push(opscope_model::events::SliceRow {
            track,
            ts,
            dur,
            name,
            category: name,
            kind: opscope_model::SliceKind::Op,
            args: opscope_model::ArgsId::NONE,
        });
    }

    /// An op no sample fell in belongs to what the samples around it share, not to
    /// the stack sampled last before it: a DataLoader's `__next__` between two
    /// samples showed under the `backward` of the step before (14 of 66 in a fresh
    /// two-epoch program). The loop that called it is named without a line, which no
    /// sample saw; an op far past the last sample has no stack.
    #[test]
    fn an_op_between_samples_has_the_frames_they_share() {
        let (mut t, track) = one_sampled_thread();
        let file = t.intern("train.py");
        let frame = |t: &mut Trace, name: &str, line| {
            let name = t.intern(name);
            t.stacks.frame(name, file, line)
        };
        let main = frame(&mut t, "main", 30);
        let (train_backward, backward) = (frame(&mut t, "train", 12), frame(&mut t, "backward", 5));
        let (train_forward, forward) = (frame(&mut t, "train", 10), frame(&mut t, "forward", 20));
        for (ts, frames) in [
            (1_000, [main, train_backward, backward]),
            (11_000, [main, train_forward, forward]),
        ] {
            push_sample(&mut t, track, ts, &frames, 10_000);
        }
        for (name, ts) in [("__next__", 5_000), ("close", 40_000)] {
            push_op(&mut t, track, name, ts, 100);
        }
        t.finish();
        let tree = build(
            &Context::new(&t),
            TreeKind::Code,
            Window::Whole,
            Timing::Exact,
        );
        let all = names(&tree, &TreeDisplay::default());
        assert_eq!(
            all,
            [
                "_TFProfRoot",
                " (no Python stack)",
                "  close",
                " main (train.py:30)",
                "  train (train.py)",
                "   __next__"
            ]
        );
    }

    /// An op no sample fell in, between samples of another phase of the loop, has the
    /// stack of its name's nearest sampled call: `alpha` between two samples of `beta`
    /// showed under `beta` (what the samples around it share), in a fresh program that
    /// alternates two 4 ms phases.
    #[test]
    fn an_unsampled_op_has_the_stack_of_its_sampled_calls() {
        let (mut t, track) = one_sampled_thread();
        let file = t.intern("phases.py");
        let frame = |t: &mut Trace, name: &str, line| {
            let name = t.intern(name);
            t.stacks.frame(name, file, line)
        };
        let main = frame(&mut t, "main", 23);
        let (alpha, beta, spin) = (
            frame(&mut t, "alpha", 13),
            frame(&mut t, "beta", 17),
            frame(&mut t, "spin", 7),
        );
        // beta, alpha (not sampled), beta, alpha.
        for (name, ts, sampled) in [
            ("phase_beta", 0, Some(beta)),
            ("phase_alpha", 4_000, None),
            ("phase_beta", 8_000, Some(beta)),
            ("phase_alpha", 12_000, Some(alpha)),
        ] {
            push_op(&mut t, track, name, ts, 4_000);
            if let Some(phase) = sampled {
                push_sample(&mut t, track, ts + 2_000, &[main, phase, spin], 5_000);
            }
        }
        t.finish();
        let tree = build(
            &Context::new(&t),
            TreeKind::Code,
            Window::Whole,
            Timing::Exact,
        );
        let shown: Vec<(String, u64)> = display(&tree, &TreeDisplay::default())
            .into_iter()
            .map(|s| {
                let n = &tree.nodes[s.node];
                (format!("{}{}", " ".repeat(s.depth), n.name), n.occurrence)
            })
            .collect();
        let row = |name: &str, calls| (name.to_string(), calls);
        assert_eq!(
            shown,
            [
                row("_TFProfRoot", 0),
                row(" main (phases.py:23)", 0),
                row("  alpha (phases.py:13)", 0),
                row("   spin (phases.py:7)", 0),
                row("    phase_alpha", 2),
                row("  beta (phases.py:17)", 0),
                row("   spin (phases.py:7)", 0),
                row("    phase_beta", 2),
            ]
        );
    }

    /// The header calls the pairs self/total, and the count of ops one number (it read
    /// "cpu time | accelerator time | ops (self/total)", over rows whose count is one).
    #[test]
    fn only_the_pairs_are_self_and_total() {
        let tree = sample();
        let shown = display(&tree, &TreeDisplay::default());
        let columns = [TreeColumn::Micros, TreeColumn::Occurrence];
        let report = TreeView {
            tree: &tree,
            shown: &shown,
            columns: &columns,
        }
        .report();
        let legend = report.blocks.iter().find_map(|b| match b {
            crate::report::Block::Tree(t) => Some(t.legend.clone()),
            _ => None,
        });
        assert_eq!(
            legend.as_deref(),
            Some("cpu time (self/total) | accelerator time (self/total) | ops")
        );
    }

    fn names(tree: &Tree, options: &TreeDisplay) -> Vec<String> {
        display(tree, options)
            .into_iter()
            .map(|s| format!("{}{}", " ".repeat(s.depth), tree.nodes[s.node].name))
            .collect()
    }

    #[test]
    fn tree_display_follows_tfprof_options() {
        let tree = sample();
        let all = TreeDisplay::default();
        assert_eq!(names(&tree, &all), ["_TFProfRoot", " a", "  x", " b"]);
        let shallow = TreeDisplay {
            max_depth: Some(1),
            ..TreeDisplay::default()
        };
        assert_eq!(names(&tree, &shallow), ["_TFProfRoot", " a", " b"]);
        let big = TreeDisplay {
            min_micros: 10.0,
            ..TreeDisplay::default()
        };
        assert_eq!(names(&tree, &big), ["_TFProfRoot", " a", "  x"]);
        let trimmed = TreeDisplay {
            trim_name_regexes: crate::view::regexes("a").unwrap(),
            ..TreeDisplay::default()
        };
        assert_eq!(names(&tree, &trimmed), ["_TFProfRoot", " a", " b"]);
        // Starting at "x" shows it alone, at the top.
        let started = TreeDisplay {
            start_name_regexes: crate::view::regexes("x").unwrap(),
            ..TreeDisplay::default()
        };
        assert_eq!(names(&tree, &started), ["x"]);
        let hidden = TreeDisplay {
            hide_name_regexes: crate::view::regexes("a").unwrap(),
            ..TreeDisplay::default()
        };
        assert_eq!(names(&tree, &hidden), ["_TFProfRoot", " x", " b"]);
        // Totals of what is shown: without "a", the root holds x and b.
        let shown_only = TreeDisplay {
            account_displayed_only: true,
            ..hidden.clone()
        };
        let totals: Vec<i64> = display(&tree, &shown_only)
            .iter()
            .map(|s| s.total.cpu_ns / 1000)
            .collect();
        assert_eq!(totals, [25, 20, 5]);
        let all_totals: Vec<i64> = display(&tree, &hidden)
            .iter()
            .map(|s| s.total.cpu_ns / 1000)
            .collect();
        assert_eq!(all_totals, [35, 20, 5]);
    }
}
