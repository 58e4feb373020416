//! The critical path graph, built as HTA builds it (`critical_path_analysis.py`): a
//! start and an end node for every op, runtime call and launched device event in the
//! window; edges along each host thread's call stacks, from launch calls to their
//! work (when the stream was idle), between consecutive work on a stream, and from
//! device work to the calls that waited for it (stream, device and event
//! synchronisation, stream waits). Its longest path is networkx's `dag_longest_path`:
//! nodes in topological generations, the first best predecessor.

use hashbrown::HashMap;

use super::events::Event;

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EdgeType {
    /// The span of an op, a call or a kernel (or part of one).
    Operator,
    /// Program order between top-level ops of a thread (no time).
    Dependency,
    /// From a launch call's start to its kernel's start.
    KernelLaunchDelay,
    /// From one kernel's end to the next's start on a stream.
    KernelKernelDelay,
    /// Device work a call waited for (no time).
    SyncDependency,
}

impl EdgeType {
    /// HTA's name of the edge type.
    pub fn hta_name(self) -> &'static str {
        match self {
            EdgeType::Operator => "critical_path_operator",
            EdgeType::Dependency => "critical_path_dependency",
            EdgeType::KernelLaunchDelay => "critical_path_kernel_launch_delay",
            EdgeType::KernelKernelDelay => "critical_path_kernel_kernel_delay",
            EdgeType::SyncDependency => "critical_path_sync_dependency",
        }
    }
}

#[derive(Copy, Clone, Debug)]
pub struct Node {
    pub event: usize,
    pub ts: i64,
    pub is_start: bool,
    pub blocking: bool,
}

#[derive(Copy, Clone, Debug)]
pub struct Edge {
    pub from: usize,
    pub to: usize,
    /// The weight the edge was made with (HTA's `CPEdge.weight`, which its breakdown
    /// sums), and the one the path search uses (negative weights made 0).
    pub weight: i64,
    pub search_weight: i64,
    pub kind: EdgeType,
    /// The event the edge's time is attributed to (op, call and kernel spans, and
    /// kernel-kernel delays).
    pub attributed: Option<usize>,
}

/// Calls that block the host until device work is done: their own span is no work.
const BLOCKING: [&str; 6] = [
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventQuery",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cudaMemcpyAsync",
];

/// The calls that launch device work (HTA's `get_runtime_launch_events_query`).
pub const LAUNCHES: [&str; 11] = [
    "cudaMemsetAsync",
    "cudaMemcpyAsync",
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernel",
    "runFunction - job_prep_and_submit_for_execution",
    "hipLaunchKernel",
    "hipExtModuleLaunchKernel",
    "hipMemsetAsync",
    "hipMemcpyAsync",
    "hipMemcpyWithStream",
];

pub struct Graph {
    pub nodes: Vec<Node>,
    /// Edges by (from, to); a second edge between two nodes replaces the first's
    /// weight, type and attribution in place (a DiGraph holds one).
    pub edges: Vec<Edge>,
    index: HashMap<(usize, usize), usize>,
    /// Per node, its incoming and outgoing edges in insertion order.
    pred: Vec<Vec<usize>>,
    succ: Vec<Vec<usize>>,
    start_of: HashMap<usize, usize>,
    end_of: HashMap<usize, usize>,
}

impl Graph {
    fn add_edge(&mut self, from: usize, to: usize, kind: EdgeType, zero: bool) -> usize {
        debug_assert_ne!(from, to);
        let weight = if zero || matches!(kind, EdgeType::Dependency | EdgeType::SyncDependency) {
            0
        } else {
            self.nodes[to].ts - self.nodes[from].ts
        };
        let edge = Edge {
            from,
            to,
            weight,
            search_weight: weight,
            kind,
            attributed: None,
        };
        match self.index.get(&(from, to)) {
            Some(&e) => {
                self.edges[e] = edge;
                e
            }
            None => {
                let e = self.edges.len();
                self.edges.push(edge);
                self.index.insert((from, to), e);
                self.pred[to].push(e);
                self.succ[from].push(e);
                e
            }
        }
    }

    /// HTA's attribution of an op or kernel span, or a kernel-kernel delay: to the
    /// start's event when the edge begins at a start, to the end's when it runs from
    /// an end to an end, else (from one op's end to a sibling's start) to their parent.
    fn attribute(&mut self, e: usize, src_parent: Option<usize>) {
        let edge = self.edges[e];
        if !matches!(edge.kind, EdgeType::Operator | EdgeType::KernelKernelDelay) {
            return;
        }
        let (src, dst) = (self.nodes[edge.from], self.nodes[edge.to]);
        let attributed = if edge.kind == EdgeType::KernelKernelDelay || src.is_start {
            Some(src.event)
        } else if !dst.is_start {
            Some(dst.event)
        } else {
            src_parent
        };
        self.edges[e].attributed = attributed;
    }

    pub fn nodes_of(&self, event: usize) -> Option<(usize, usize)> {
        Some((*self.start_of.get(&event)?, *self.end_of.get(&event)?))
    }
}

/// Builds the graph of the events `clipped` (indices into `all`, the whole source).
pub fn build(all: &[Event], clipped: &[usize]) -> Graph {
    let is_node = |e: &Event| {
        matches!(e.cat.as_str(), "cpu_op" | "cuda_runtime" | "cuda_driver")
            || (e.on_device() && e.partner.is_some())
    };
    // Nodes: every start, then every end, sorted by time.
    let members: Vec<usize> = clipped
        .iter()
        .copied()
        .filter(|&k| is_node(&all[k]))
        .collect();
    let mut raw: Vec<Node> = members
        .iter()
        .map(|&k| Node {
            event: k,
            ts: all[k].ts,
            is_start: true,
            blocking: BLOCKING.contains(&all[k].name.as_str()),
        })
        .chain(members.iter().map(|&k| Node {
            event: k,
            ts: all[k].end(),
            is_start: false,
            blocking: BLOCKING.contains(&all[k].name.as_str()),
        }))
        .collect();
    raw.sort_by_key(|n| (n.ts, !n.is_start, n.event));
    let n = raw.len();
    let mut g = Graph {
        nodes: raw,
        edges: Vec::new(),
        index: HashMap::new(),
        pred: vec![Vec::new(); n],
        succ: vec![Vec::new(); n],
        start_of: HashMap::new(),
        end_of: HashMap::new(),
    };
    for (i, node) in g.nodes.iter().enumerate() {
        if node.is_start {
            g.start_of.insert(node.event, i);
        } else {
            g.end_of.insert(node.event, i);
        }
    }
    call_stacks(&mut g, all, clipped);
    device_work(&mut g, all, clipped);
    for e in &mut g.edges {
        // HTA's default: a weight of -1 or less (nanosecond rounding puts a child's end
        // after its parent's) is searched as 0; its breakdown keeps the weight.
        if e.weight <= -1 {
            e.search_weight = 0;
        }
    }
    g
}

/// Each host thread's ops, in call-stack order (HTA's `_construct_graph_from_call_stack`).
fn call_stacks(g: &mut Graph, all: &[Event], clipped: &[usize]) {
    // Host events by (pid, tid), in start order; threads in (pid, tid) order.
    let mut threads: std::collections::BTreeMap<(i64, i64), Vec<usize>> = Default::default();
    let mut device_threads: hashbrown::HashSet<(i64, i64)> = Default::default();
    for &k in clipped {
        let e = &all[k];
        if e.stream > 0 {
            device_threads.insert((e.pid, e.tid));
        }
        threads.entry((e.pid, e.tid)).or_default().push(k);
    }
    for (thread, mut events) in threads {
        if device_threads.contains(&thread) {
            continue;
        }
        events.sort_by_key(|&k| (all[k].ts, std::cmp::Reverse(all[k].dur), k));
        // The call tree: each event's children, by nesting in time.
        let mut children: HashMap<Option<usize>, Vec<usize>> = HashMap::new();
        let mut parent: HashMap<usize, Option<usize>> = HashMap::new();
        let mut stack: Vec<usize> = Vec::new();
        for &k in &events {
            while let Some(&top) = stack.last() {
                if all[top].end() <= all[k].ts {
                    stack.pop();
                } else {
                    break;
                }
            }
            let p = stack.last().copied();
            children.entry(p).or_default().push(k);
            parent.insert(k, p);
            stack.push(k);
        }
        let mut walk = Walk {
            last_node: None,
            last_top: None,
            depth: 0,
            last_parent: None,
        };
        walk.visit(g, None, &children, &parent);
    }
}

struct Walk {
    last_node: Option<usize>,
    last_top: Option<usize>,
    depth: usize,
    last_parent: Option<usize>,
}

impl Walk {
    fn visit(
        &mut self,
        g: &mut Graph,
        event: Option<usize>,
        children: &HashMap<Option<usize>, Vec<usize>>,
        parent: &HashMap<usize, Option<usize>>,
    ) {
        let nodes = event.and_then(|e| g.nodes_of(e));
        let csnode_parent = event.and_then(|e| parent.get(&e).copied().flatten());
        if let Some((start, _)) = nodes {
            if self.depth == 0 {
                if let Some(top) = self.last_top {
                    g.add_edge(top, start, EdgeType::Dependency, false);
                }
            }
            self.depth += 1;
            if let Some(last) = self.last_node {
                let e = g.add_edge(last, start, EdgeType::Operator, false);
                g.attribute(e, self.last_parent);
            }
            self.last_node = Some(start);
            self.last_parent = csnode_parent;
        }
        if let Some(list) = children.get(&event) {
            for &c in list {
                self.visit(g, Some(c), children, parent);
            }
        }
        if let Some((start, end)) = nodes {
            self.depth -= 1;
            if let Some(last) = self.last_node {
                let zero = g.nodes[start].blocking;
                let e = g.add_edge(last, end, EdgeType::Operator, zero);
                g.attribute(e, self.last_parent);
            }
            if self.depth == 0 {
                self.last_node = None;
                self.last_top = Some(end);
            } else {
                self.last_node = Some(end);
                self.last_parent = csnode_parent;
            }
        }
    }
}

/// Device work: each kernel's span, launch or kernel-kernel delays, and the
/// synchronisations (HTA's `_construct_graph_from_kernels`).
fn device_work(g: &mut Graph, all: &[Event], clipped: &[usize]) {
    let queue = queue_lengths(all);
    let records = event_records(all);
    let waits = stream_waits(all);
    let mut rows: Vec<usize> = clipped
        .iter()
        .copied()
        .filter(|&k| {
            let e = &all[k];
            (e.on_device() || e.name == "Event Sync" || e.name == "Context Sync")
                && e.partner.is_some()
        })
        .collect();
    // Syncs by their end (a sync overlapping a copy on its stream comes after it).
    let sort_by = |k: usize| {
        let e = &all[k];
        if e.cat == "cuda_sync" {
            e.end()
        } else {
            e.ts
        }
    };
    rows.sort_by_key(|&k| (sort_by(k), k));
    let mut last_node: std::collections::BTreeMap<i64, usize> = Default::default();
    let mut last_order: Vec<i64> = Vec::new();
    let mut kernel_sync: HashMap<usize, Option<usize>> = HashMap::new();
    for k in rows {
        let e = &all[k];
        let call = e.partner.expect("rows have a partner");
        if e.cat == "cuda_sync" {
            match e.name.as_str() {
                "Stream Wait Event" | "Event Sync" => {
                    let Some(previous) = e.wait_on_record.and_then(|c| records.get(&c).copied())
                    else {
                        continue;
                    };
                    let Some(src_kernel) = all[previous].partner else {
                        continue;
                    };
                    if e.name == "Stream Wait Event" {
                        let Some(next) = waits.get(&call).copied() else {
                            continue;
                        };
                        if let Some(dest_kernel) = all[next].partner {
                            kernel_sync.insert(dest_kernel, Some(src_kernel));
                        }
                    } else if let Some((_, gpu_end)) = g.nodes_of(src_kernel) {
                        if let Some((_, call_end)) = g.nodes_of(call) {
                            g.add_edge(gpu_end, call_end, EdgeType::SyncDependency, false);
                        }
                    }
                }
                "Stream Sync" | "Context Sync" => {
                    let Some((_, call_end)) = g.nodes_of(call) else {
                        continue;
                    };
                    let sources: Vec<usize> = if e.name == "Context Sync" {
                        last_order
                            .iter()
                            .filter_map(|s| last_node.get(s).copied())
                            .collect()
                    } else {
                        last_node.get(&e.stream).copied().into_iter().collect()
                    };
                    for node in sources {
                        g.add_edge(node, call_end, EdgeType::SyncDependency, false);
                    }
                }
                _ => {}
            }
            continue;
        }
        let Some((start, end)) = g.nodes_of(k) else {
            continue;
        };
        let span = g.add_edge(start, end, EdgeType::Operator, false);
        g.attribute(span, None);
        let mut sync_end: Option<usize> = None;
        if let Some(Some(src)) = kernel_sync.get(&k).copied() {
            if let Some((_, src_end)) = g.nodes_of(src) {
                g.add_edge(src_end, start, EdgeType::SyncDependency, false);
                sync_end = Some(src_end);
            }
            kernel_sync.insert(k, None);
        }
        let (q_call, q_kernel) = (queue.get(&call).copied(), queue.get(&k).copied());
        let call_ts = all[call].ts;
        let last = last_node.get(&e.stream).copied();
        if q_call == Some(1)
            && q_kernel == Some(0)
            && last.is_none_or(|l| g.nodes[l].ts < call_ts)
            && sync_end.is_none_or(|s| g.nodes[s].ts < call_ts)
        {
            if let Some((call_start, _)) = g.nodes_of(call) {
                g.add_edge(call_start, start, EdgeType::KernelLaunchDelay, false);
            }
        } else if let Some(l) =
            last.filter(|&l| sync_end.is_none_or(|s| g.nodes[s].ts < g.nodes[l].ts))
        {
            let delay = g.add_edge(l, start, EdgeType::KernelKernelDelay, false);
            g.attribute(delay, None);
        }
        if !last_node.contains_key(&e.stream) {
            last_order.push(e.stream);
        }
        last_node.insert(e.stream, end);
    }
}

/// HTA's queue length: per stream, +1 at each launch call that launched work, -1 at
/// the work's start, summed in time order (calls first at equal times); each call's
/// and each work's value after its own step.
fn queue_lengths(all: &[Event]) -> HashMap<usize, i64> {
    let mut steps: Vec<(i64, u8, usize, i64, i64)> = Vec::new();
    for (k, e) in all.iter().enumerate() {
        if LAUNCHES.contains(&e.name.as_str()) {
            if let Some(work) = e.partner.filter(|&w| all[w].on_device()) {
                steps.push((e.ts, 0, k, all[work].stream, 1));
                steps.push((all[work].ts, 1, work, all[work].stream, -1));
            }
        }
    }
    steps.sort_by_key(|s| (s.0, s.1, s.2));
    let mut depth: HashMap<i64, i64> = HashMap::new();
    let mut out = HashMap::new();
    for (_, _, k, stream, delta) in steps {
        let d = depth.entry(stream).or_insert(0);
        *d += delta;
        out.insert(k, *d);
    }
    out
}

/// Per cudaEventRecord correlation id waited on, the last launch call on the recorded
/// stream (and device) before the record (HTA's `_get_cuda_event_record_df`).
fn event_records(all: &[Event]) -> HashMap<i64, usize> {
    // Which stream and device each waited-on record was on.
    let mut stream_of: HashMap<i64, (i64, i64)> = HashMap::new();
    for e in all {
        if let (Some(stream), Some(corr)) = (e.wait_on_stream, e.wait_on_record) {
            if stream > -1 {
                stream_of.entry(corr).or_insert((stream, e.pid));
            }
        }
    }
    let mut out = HashMap::new();
    for e in all.iter().filter(|e| e.name == "cudaEventRecord") {
        let Some(corr) = e.correlation else { continue };
        let Some(&(stream, gpu)) = stream_of.get(&corr) else {
            continue;
        };
        let previous = all
            .iter()
            .enumerate()
            .filter(|(_, c)| LAUNCHES.contains(&c.name.as_str()) && c.ts <= e.ts)
            .filter(|(_, c)| {
                c.partner
                    .is_some_and(|w| all[w].stream == stream && all[w].pid == gpu)
            })
            .max_by_key(|(k, c)| (c.ts, *k));
        if let Some((k, _)) = previous {
            out.insert(corr, k);
        }
    }
    out
}

/// Per cudaStreamWaitEvent call, the next launch on its thread onto the stream that
/// waits (HTA's `_get_cuda_stream_wait_event_df`).
fn stream_waits(all: &[Event]) -> HashMap<usize, usize> {
    let mut out = HashMap::new();
    for (w, e) in all.iter().enumerate() {
        if e.name != "cudaStreamWaitEvent" {
            continue;
        }
        let Some(stream) = e.partner.map(|p| all[p].stream) else {
            continue;
        };
        let next = all
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                LAUNCHES.contains(&c.name.as_str())
                    && c.ts >= e.ts
                    && c.pid == e.pid
                    && c.tid == e.tid
                    && c.partner.is_some_and(|p| all[p].stream == stream)
            })
            .min_by_key(|(k, c)| (c.ts, *k));
        if let Some((k, _)) = next {
            out.insert(w, k);
        }
    }
    out
}

/// networkx's `dag_longest_path`: nodes in topological generations (a generation's
/// nodes in the order they became free, the first in node order), each node's best
/// predecessor the first of the greatest, the path ending at the first node of the
/// greatest distance. The path's edges.
pub fn longest_path(g: &Graph) -> Option<Vec<usize>> {
    let n = g.nodes.len();
    let mut indegree: Vec<usize> = (0..n).map(|v| g.pred[v].len()).collect();
    let mut generation: Vec<usize> = (0..n).filter(|&v| indegree[v] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while !generation.is_empty() {
        let mut next = Vec::new();
        for &v in &generation {
            for &e in &g.succ[v] {
                let child = g.edges[e].to;
                indegree[child] -= 1;
                if indegree[child] == 0 {
                    next.push(child);
                }
            }
        }
        order.extend_from_slice(&generation);
        generation = next;
    }
    if order.len() != n {
        return None;
    }
    // Per node: its distance and the edge it came by.
    let mut dist: Vec<(i64, Option<usize>)> = vec![(0, None); n];
    for &v in &order {
        let mut best: Option<(i64, usize)> = None;
        for &e in &g.pred[v] {
            let d = dist[g.edges[e].from].0 + g.edges[e].search_weight;
            if best.is_none_or(|b| d > b.0) {
                best = Some((d, e));
            }
        }
        dist[v] = match best {
            Some((d, e)) if d >= 0 => (d, Some(e)),
            _ => (0, None),
        };
    }
    let mut end = *order.first()?;
    for &v in &order {
        if dist[v].0 > dist[end].0 {
            end = v;
        }
    }
    let mut path = Vec::new();
    let mut at = end;
    while let Some(e) = dist[at].1 {
        path.push(e);
        at = g.edges[e].from;
    }
    path.reverse();
    Some(path)
}
