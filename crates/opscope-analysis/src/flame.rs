//! Flame-graph stacks: every host op (the op kinds of the views, and Python frames)
//! under the ops it sits in on its thread, weighted by its self time, and each piece of
//! device work under the op that launched it, weighted by its device time; as collapsed
//! stacks (`process;thread;op;…;leaf weight`), the input of every flame-graph tool
//! (flamegraph.pl, inferno, speedscope's importer). Slices of other kinds (a
//! profiler's own spans, allocations) are left out, their children kept.
//!
//! A trace with sampled stacks has its host time from the samples instead: each
//! sample's Python frames, then the ops open on its thread at that moment, weighted by
//! the time the sample stands for; device work goes under its launching op placed
//! under the stack sampled while that op ran.

use hashbrown::HashMap;
use opscope_model::{SliceKind, StrId, Trace, TrackId, TrackKind, NONE};

use crate::Context;
use crate::{attribution, correlate};

#[derive(Clone, Copy, Debug)]
pub struct FlameOptions {
    /// Put kernels, copies and sets under the op that launched them (their device
    /// time), beside the ops' CPU time.
    pub device: bool,
    /// With sampled stacks: count every sample, of idle threads too (wall time), rather
    /// than only those of threads that ran (CPU time, py-spy's default).
    pub wall: bool,
}

/// A frame of the tree: its parent node and its text.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Frame {
    Process(u32),
    Thread(u32),
    Slice(StrId),
    Device(SliceKind, StrId),
    /// Device work with no launching op found.
    Unattributed,
    /// A frame of a sampled stack (a row of the model's frames).
    Sampled(u32),
}

/// Collapsed stacks, one per distinct stack with its weight in ns, sorted by stack.
pub fn folded(cx: &Context, options: FlameOptions) -> Vec<(String, u64)> {
    if !cx.trace().samples.is_empty() {
        return sampled(cx, options);
    }
    let trace = cx.trace();
    let s = &trace.slices;
    let mut tree = Tree::default();
    // Self time: each frame's duration less that of the frames in it (through slices
    // that are no frames).
    let mut children = vec![0i64; s.len()];
    for i in 0..s.len() {
        if !is_frame(trace, i) {
            continue;
        }
        let mut p = s.parent[i];
        while p != NONE && !is_frame(trace, p as usize) {
            p = s.parent[p as usize];
        }
        if p != NONE {
            children[p as usize] += s.dur[i];
        }
    }
    let mut node = vec![u32::MAX; s.len()];
    let mut weights: HashMap<u32, u64> = HashMap::new();
    let mut chain = Vec::new();
    for i in 0..s.len() {
        if !is_frame(trace, i) {
            continue;
        }
        // The slice's node, made with those of its ancestors not made yet.
        chain.clear();
        let mut at = i as u32;
        while at != NONE && node[at as usize] == u32::MAX {
            chain.push(at);
            at = s.parent[at as usize];
        }
        let mut parent = if at == NONE {
            tree.thread_root(trace, s.track[i])
        } else {
            node[at as usize]
        };
        for &j in chain.iter().rev() {
            // A slice that is no frame passes its place on to its children.
            if is_frame(trace, j as usize) {
                parent = tree.child(parent, Frame::Slice(s.name[j as usize]));
            }
            node[j as usize] = parent;
        }
        let self_ns = (s.dur[i] - children[i]).max(0) as u64;
        if self_ns > 0 {
            *weights.entry(node[i]).or_default() += self_ns;
        }
    }
    if options.device {
        let op_node = |_: &mut Tree, op: usize| Some(node[op]).filter(|&n| n != u32::MAX);
        add_device_work(cx, &mut tree, &mut weights, op_node);
    }
    collapsed(trace, &tree, weights)
}

/// [`folded`] of a trace with sampled stacks.
fn sampled(cx: &Context, options: FlameOptions) -> Vec<(String, u64)> {
    let trace = cx.trace();
    let samples = &trace.samples;
    let mut tree = Tree::default();
    let mut weights: HashMap<u32, u64> = HashMap::new();
    let mut ops = Vec::new();
    for i in 0..samples.len() {
        if !options.wall && !samples.on_cpu(i) {
            continue;
        }
        let track = TrackId(samples.track[i]);
        let (mut node, native) = sample_node(trace, &mut tree, i);
        ops_at(trace, track, samples.ts[i], &mut ops);
        for &op in ops.iter().rev() {
            node = tree.child(node, Frame::Slice(trace.slices.name[op as usize]));
        }
        // The native code the innermost op (or Python frame) ran, under it.
        for f in native {
            node = tree.child(node, Frame::Sampled(f));
        }
        *weights.entry(node).or_default() += samples.period[i].max(0) as u64;
    }
    if options.device {
        let s = &trace.slices;
        let mut ops = Vec::new();
        let stacks = attribution::OpStacks::new(trace);
        let op_node = |tree: &mut Tree, op: usize| {
            let track = TrackId(s.track[op]);
            // Device work hangs under its op, under the Python frames that ran it.
            let mut node = match stacks.of(op) {
                Some(stack) => stack_node(trace, tree, track.0, stack.frames).0,
                None => tree.thread_root(trace, track.0),
            };
            ops_at(trace, track, s.ts[op], &mut ops);
            // The launching op itself, also where the ops open at its start have a
            // deeper one (a launch inside it).
            let through = ops.iter().position(|&o| o as usize == op);
            let chain = match through {
                Some(k) => &ops[k..],
                None => &ops[..0],
            };
            for &o in chain.iter().rev() {
                node = tree.child(node, Frame::Slice(s.name[o as usize]));
            }
            if through.is_none() {
                node = tree.child(node, Frame::Slice(s.name[op]));
            }
            Some(node)
        };
        add_device_work(cx, &mut tree, &mut weights, op_node);
    }
    collapsed(trace, &tree, weights)
}

/// The weighted nodes as collapsed stacks, sorted by stack.
fn collapsed(trace: &Trace, tree: &Tree, weights: HashMap<u32, u64>) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = weights
        .into_iter()
        .map(|(n, w)| (tree.path(trace, n), w))
        .collect();
    out.sort();
    out
}

/// Each kernel, copy and set under the node `op_node` gives its launching op (under an
/// "unattributed" frame of its process where it has none), weighted by its duration.
fn add_device_work(
    cx: &Context,
    tree: &mut Tree,
    weights: &mut HashMap<u32, u64>,
    mut op_node: impl FnMut(&mut Tree, usize) -> Option<u32>,
) {
    let trace = cx.trace();
    let s = &trace.slices;
    let correlation = cx.correlation();
    for i in 0..s.len() {
        if !correlate::is_device_work(trace, i) || s.dur[i] <= 0 {
            continue;
        }
        let leaf = Frame::Device(s.kind(i), s.name[i]);
        let at = match correlation.op_of(trace, i).and_then(|op| op_node(tree, op)) {
            Some(n) => tree.child(n, leaf),
            None => {
                let root = tree.process_root(trace, s.track[i]);
                let none = tree.child(root, Frame::Unattributed);
                tree.child(none, leaf)
            }
        };
        *weights.entry(at).or_default() += s.dur[i] as u64;
    }
}

/// The tree node of sample `i`'s stack under its thread.
/// Sample `i`'s node down to its innermost Python frame, and the native frames it
/// ran below that (outermost first): the ops open at the sample's time go between
/// the two, where Python called into the framework. A stack of native frames only
/// (a thread that ran no Python) is all node.
fn sample_node(trace: &Trace, tree: &mut Tree, i: usize) -> (u32, Vec<u32>) {
    let samples = &trace.samples;
    let mut frames: Vec<u32> = trace.stacks.frames_of(samples.stack[i]).collect();
    frames.reverse();
    stack_node(trace, tree, samples.track[i], frames)
}

/// As [`sample_node`], for the `frames` (outermost first) of a stack on `track`.
fn stack_node(trace: &Trace, tree: &mut Tree, track: u32, mut frames: Vec<u32>) -> (u32, Vec<u32>) {
    let mut node = tree.thread_root(trace, track);
    let split = frames
        .iter()
        .rposition(|&f| !trace.is_native_frame(f))
        .map_or(frames.len(), |k| k + 1);
    let native = frames.split_off(split);
    for f in frames {
        node = tree.child(node, Frame::Sampled(f));
    }
    (node, native)
}

/// The op frames open on `track` at `ts`, innermost first (into `out`).
fn ops_at(trace: &Trace, track: TrackId, ts: i64, out: &mut Vec<u32>) {
    out.clear();
    let mut at = trace.enclosing_slice(track, ts).unwrap_or(NONE);
    while at != NONE {
        if is_frame(trace, at as usize) {
            out.push(at);
        }
        at = trace.slices.parent[at as usize];
    }
}

/// Whether slice `i` is a frame: a host op of the views, or a Python frame, on a thread.
fn is_frame(trace: &Trace, i: usize) -> bool {
    let kind = trace.slices.kind(i);
    trace.tracks[trace.slices.track[i] as usize].kind == TrackKind::Thread
        && (attribution::is_op_kind(kind) || kind == SliceKind::PythonFunction)
}

/// The frames met so far, as a tree of (parent, frame) → node.
#[derive(Default)]
struct Tree {
    nodes: Vec<(u32, Frame)>,
    index: HashMap<(u32, Frame), u32>,
}

const ROOT: u32 = u32::MAX;

impl Tree {
    fn child(&mut self, parent: u32, frame: Frame) -> u32 {
        if let Some(&n) = self.index.get(&(parent, frame)) {
            return n;
        }
        let n = self.nodes.len() as u32;
        self.nodes.push((parent, frame));
        self.index.insert((parent, frame), n);
        n
    }

    fn process_root(&mut self, trace: &Trace, track: u32) -> u32 {
        let process = trace.tracks[track as usize]
            .process
            .map_or(u32::MAX, |p| p.0);
        self.child(ROOT, Frame::Process(process))
    }

    fn thread_root(&mut self, trace: &Trace, track: u32) -> u32 {
        let root = self.process_root(trace, track);
        let thread = trace.tracks[track as usize]
            .thread
            .map_or(u32::MAX - track, |t| t.0);
        self.child(root, Frame::Thread(thread))
    }

    /// `a;b;c`: frames from the root, `;` in names written as `:` (the separator).
    fn path(&self, trace: &Trace, mut n: u32) -> String {
        let mut frames = Vec::new();
        while n != ROOT {
            let (parent, frame) = self.nodes[n as usize];
            frames.push(frame_text(trace, frame));
            n = parent;
        }
        frames.reverse();
        frames
            .iter()
            .map(|f| f.replace(';', ":"))
            .collect::<Vec<_>>()
            .join(";")
    }
}

fn frame_text(trace: &Trace, frame: Frame) -> String {
    match frame {
        Frame::Process(p) => match trace.processes.get(p as usize) {
            Some(_) => crate::roles::process_name(trace, opscope_model::ProcessId(p)),
            None => "(no process)".to_string(),
        },
        Frame::Thread(t) => match trace.threads.get(t as usize) {
            Some(thread) => match thread.name {
                Some(name) => format!("{} (tid {})", trace.str(name), thread.tid),
                None => format!("tid {}", thread.tid),
            },
            None => "(no thread)".to_string(),
        },
        Frame::Slice(name) => trace.str(name).to_string(),
        Frame::Device(kind, name) => format!("[{}] {}", kind.name(), trace.str(name)),
        Frame::Unattributed => "(device work with no launching op)".to_string(),
        Frame::Sampled(f) => sampled_frame_text(trace, f as usize),
    }
}

/// A sampled frame as py-spy names one: `function (file.py:line)`, the file without
/// its folders.
pub fn sampled_frame_text(trace: &Trace, f: usize) -> String {
    function_at_line(trace, f, trace.stacks.frames.line[f])
}

/// As [`sampled_frame_text`], for a function whose running line is not known.
pub fn frame_text_without_line(trace: &Trace, f: usize) -> String {
    function_at_line(trace, f, 0)
}

fn function_at_line(trace: &Trace, f: usize, line: u32) -> String {
    let frames = &trace.stacks.frames;
    let file = trace.str(frames.file[f]);
    let file = file.rsplit('/').next().unwrap_or(file);
    let function = trace.str(frames.function[f]);
    match line {
        0 if file.is_empty() => function.to_string(),
        0 => format!("{function} ({file})"),
        line => format!("{function} ({file}:{line})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `aten::linear` over `aten::addmm`, whose launch ran the kernel `gemm;v2`, then
    /// `aten::relu`, on thread 7 of process 1 (a Kineto trace's shape).
    fn linear_with_a_kernel() -> Trace {
        let json = r#"{"traceEvents":[
            {"ph":"M","name":"process_name","pid":1,"args":{"name":"python"}},
            {"ph":"M","name":"thread_name","pid":1,"tid":7,"args":{"name":"main"}},
            {"ph":"X","cat":"cpu_op","name":"aten::linear","pid":1,"tid":7,"ts":0,"dur":100},
            {"ph":"X","cat":"cpu_op","name":"aten::addmm","pid":1,"tid":7,"ts":10,"dur":60},
            {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":7,"ts":20,"dur":5,"args":{"correlation":9}},
            {"ph":"X","cat":"cpu_op","name":"aten::relu","pid":1,"tid":7,"ts":200,"dur":30},
            {"ph":"X","cat":"kernel","name":"gemm;v2","pid":0,"tid":7,"ts":40,"dur":50,"args":{"correlation":9,"device":0,"stream":7}}
        ]}"#;
        let mut trace = Trace::new();
        opscope_formats::chrome::import(json.as_bytes(), "t.json", &mut trace).unwrap();
        trace
    }

    /// Self times sum to the roots' durations, nesting becomes the stack, and a kernel
    /// goes under the op whose launch it came from.
    #[test]
    fn stacks_weigh_self_time_and_put_kernels_under_their_ops() {
        let mut trace = linear_with_a_kernel();
        trace.finish();
        let cx = Context::new(&trace);
        let stacks = folded(
            &cx,
            FlameOptions {
                device: true,
                wall: false,
            },
        );
        let root = "python (pid 1);main (tid 7)";
        let want = vec![
            (format!("{root};aten::linear"), 40_000),
            (format!("{root};aten::linear;aten::addmm"), 55_000),
            (
                format!("{root};aten::linear;aten::addmm;[kernel] gemm:v2"),
                50_000,
            ),
            (
                format!("{root};aten::linear;aten::addmm;cudaLaunchKernel"),
                5_000,
            ),
            (format!("{root};aten::relu"), 30_000),
        ];
        assert_eq!(stacks, want);
        let cpu: u64 = folded(
            &cx,
            FlameOptions {
                device: false,
                wall: false,
            },
        )
        .iter()
        .map(|(_, w)| w)
        .sum();
        assert_eq!(cpu, 130_000, "the roots' durations");
    }

    /// With sampled stacks: each sample's frames, then the ops open on its thread then,
    /// weighted by its period; a kernel under its op under the stack sampled while the
    /// op ran; idle samples only in wall time.
    #[test]
    fn samples_put_their_frames_above_the_ops_and_kernels() {
        use opscope_model::samples::state;
        let mut trace = linear_with_a_kernel();
        let track = TrackId(trace.slices.track[0]);
        let (main, forward, file) = (
            trace.intern("main"),
            trace.intern("Linear.forward"),
            trace.intern("m.py"),
        );
        let outer = trace.stacks.frame(main, file, 3);
        let inner = trace.stacks.frame(forward, file, 9);
        let stack = trace.stacks.stack([outer, inner]);
        let running = state::ACTIVE_KNOWN | state::ACTIVE;
        for (ts_us, st) in [(15, running), (50, running), (300, state::ACTIVE_KNOWN)] {
            trace.samples.push(opscope_model::SampleRow {
                ts: ts_us * 1000,
                track,
                stack,
                period: 10_000,
                state: st,
            });
        }
        trace.finish();
        let cx = Context::new(&trace);
        let options = FlameOptions {
            device: true,
            wall: false,
        };
        let python = "python (pid 1);main (tid 7);main (m.py:3);Linear.forward (m.py:9)";
        let want = vec![
            (format!("{python};aten::linear;aten::addmm"), 20_000),
            (
                format!("{python};aten::linear;aten::addmm;[kernel] gemm:v2"),
                50_000,
            ),
        ];
        assert_eq!(folded(&cx, options), want);
        let wall = folded(
            &cx,
            FlameOptions {
                wall: true,
                ..options
            },
        );
        assert!(wall.contains(&(python.to_string(), 10_000)), "{wall:?}");
    }
}
