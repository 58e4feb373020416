//! `opscope critical-path`: the longest chain of dependent work in a step — host ops
//! and calls, launches, kernels and the synchronisations between them — and what bounds
//! it (the host, device computation or communication, launch and kernel-to-kernel
//! overheads), built as HolisticTraceAnalysis's critical path analysis builds it, so that
//! the two agree.

mod events;
mod graph;

use opscope_model::SourceId;
use serde::Serialize;

use crate::context::Context;
use crate::report::{Column, Line, Report, Reported, Table, Value};
pub use graph::{EdgeType, LAUNCHES};

#[derive(Clone, Debug, Default)]
pub struct CriticalPathOptions {
    /// The rank (or source) to analyse: the first with a rank, else the first.
    pub rank: Option<u32>,
    /// The annotation whose instance bounds the window (`ProfilerStep`: any event whose
    /// name contains it); empty for the whole trace.
    pub annotation: String,
    /// Which instance of it, in start order.
    pub instance: usize,
}

/// One edge of the path.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PathEdge {
    pub kind: EdgeType,
    /// Its time, ns.
    pub duration_ns: i64,
    pub from: EventRef,
    pub from_start: bool,
    pub to: EventRef,
    pub to_start: bool,
    /// The event its time is attributed to.
    pub attributed: Option<EventRef>,
    /// `cpu_bound`, `gpu_compute_bound`, `gpu_communication_bound`,
    /// `gpu_kernel_kernel_overhead`, `gpu_kernel_launch_overhead`, or empty (edges of
    /// no time).
    pub bound_by: &'static str,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct EventRef {
    /// The slice row in the model.
    pub slice: usize,
    pub name: String,
    pub ts_ns: i64,
    pub dur_ns: i64,
    /// `-1` on the host.
    pub stream: i64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct BoundBy {
    pub bound_by: &'static str,
    pub time_ns: i64,
    pub pct: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct CriticalPath {
    pub file: String,
    pub rank: Option<u32>,
    /// The step `opscope steps` found that bounds the window, where no event named by
    /// the annotation was there to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The window: the annotation instance's span.
    pub start_ns: i64,
    pub end_ns: i64,
    pub length_ns: i64,
    pub nodes: usize,
    pub graph_edges: usize,
    pub summary: Vec<BoundBy>,
    pub edges: Vec<PathEdge>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    NoSource,
    NoAnnotation(String),
    NoInstance {
        annotation: String,
        found: usize,
    },
    /// No step of that number among the steps found (where no `ProfilerStep` is).
    NoStep {
        number: u64,
        found: Vec<String>,
    },
    /// No op, runtime call or device work with its call in the window.
    Empty,
    Cycle,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NoSource => write!(f, "no such rank in the trace"),
            Error::NoAnnotation(a) => write!(f, "no event's name contains `{a}`"),
            Error::NoInstance { annotation, found } => write!(
                f,
                "`{annotation}` has {found} instance(s); instances count from 0"
            ),
            Error::NoStep { number, found } => write!(
                f,
                "no `ProfilerStep` marks steps here, and no step found is numbered {number}: \
                 the steps are {}",
                abbreviated(found)
            ),
            Error::Empty => write!(
                f,
                "no op, runtime call or device work (with its launch) in the chosen window: \
                 nothing to find a path through"
            ),
            Error::Cycle => write!(f, "the dependency graph has a cycle"),
        }
    }
}

/// The first and last few of many names.
fn abbreviated(names: &[String]) -> String {
    if names.len() <= 6 {
        return names.join(", ");
    }
    format!(
        "{}, … {} (of {})",
        names[..3].join(", "),
        names[names.len() - 2..].join(", "),
        names.len()
    )
}

/// A step found by `opscope steps`, where no `ProfilerStep` marks one.
struct FoundStep {
    source: SourceId,
    name: String,
    start_ns: i64,
    dur_ns: i64,
}

/// The step `options` asks for among those `opscope steps` finds: of the asked rank, else
/// of the first source with steps (a rank's before a DataLoader worker's); `ProfilerStep#N`
/// is the step numbered N, else the `instance`-th.
fn found_step(cx: &Context, options: &CriticalPathOptions) -> Result<FoundStep, Error> {
    let sources = crate::steps::steps(cx, &crate::steps::StepOptions::default());
    let chosen = sources
        .iter()
        .filter(|s| !s.steps.is_empty() && s.found_by != crate::steps::StepSource::Loader)
        .find(|s| options.rank.is_none() || s.rank == options.rank)
        .ok_or_else(|| Error::NoAnnotation(options.annotation.clone()))?;
    let number = options
        .annotation
        .strip_prefix(STEP_ANNOTATION)
        .and_then(|rest| rest.strip_prefix('#'))
        .and_then(|n| n.parse::<u64>().ok());
    // Steps with no number in their names (`multi_step_on_iterator`) are numbered by
    // their place, from 0.
    let unnumbered = chosen
        .steps
        .iter()
        .all(|s| crate::window::step_number(&s.name).is_none());
    let step = match number {
        Some(n) if unnumbered => chosen.steps.get(n as usize).ok_or(Error::NoStep {
            number: n,
            found: vec![format!("{} steps, numbered from 0", chosen.steps.len())],
        })?,
        Some(n) => chosen
            .steps
            .iter()
            .find(|s| crate::window::step_number(&s.name) == Some(n))
            .ok_or(Error::NoStep {
                number: n,
                found: chosen.steps.iter().map(|s| s.name.clone()).collect(),
            })?,
        None => chosen
            .steps
            .get(options.instance)
            .ok_or(Error::NoInstance {
                annotation: format!("the steps found ({})", steps_found_by(&chosen.found_by)),
                found: chosen.steps.len(),
            })?,
    };
    Ok(FoundStep {
        source: chosen.source,
        name: step.name.clone(),
        start_ns: step.start_ns,
        dur_ns: step.dur_ns,
    })
}

/// How the steps were found, in a few words.
fn steps_found_by(found_by: &crate::steps::StepSource) -> String {
    use crate::steps::StepSource;
    match found_by {
        StepSource::Markers => "by their markers".to_string(),
        StepSource::Framework { calls } => format!("as {calls}"),
        StepSource::Period { period, .. } => format!("as a sequence of {period} ops repeating"),
        StepSource::None | StepSource::Loader => "none".to_string(),
    }
}

/// Whether a kernel is communication, as HTA tells it (its name has `nccl`).
fn is_comm_kernel(name: &str) -> bool {
    name.to_ascii_lowercase().contains("nccl")
}

/// The annotation that stands for a step. Where no event's name holds it (a recording,
/// XPlane, a program without `torch.profiler`'s schedule), the steps `opscope steps`
/// finds bound the window instead: the program's own step ranges, Keras's and JAX's
/// calls, the repeating op sequence.
pub const STEP_ANNOTATION: &str = "ProfilerStep";

pub fn critical_path(cx: &Context, options: &CriticalPathOptions) -> Result<CriticalPath, Error> {
    let trace = cx.trace();
    let mut source = match options.rank {
        Some(r) => trace.sources.iter().position(|s| s.rank == Some(r)),
        None => trace
            .sources
            .iter()
            .position(|s| s.rank.is_some())
            .or((!trace.sources.is_empty()).then_some(0)),
    }
    .map(|i| SourceId(i as u32))
    .ok_or(Error::NoSource)?;
    let mut all = events::events(trace, source);
    let mut step = None;
    // The window: the instance of the annotation, or everything.
    let (start, end) = if options.annotation.is_empty() {
        (
            all.iter().map(|e| e.ts).min().unwrap_or(0),
            all.iter().map(|e| e.end()).max().unwrap_or(0),
        )
    } else {
        let instances: Vec<&events::Event> = all
            .iter()
            .filter(|e| e.name.contains(&options.annotation))
            .collect();
        if instances.is_empty() && options.annotation.starts_with(STEP_ANNOTATION) {
            let found = found_step(cx, options)?;
            if found.source != source {
                source = found.source;
                all = events::events(trace, source);
            }
            let bounds = (found.start_ns, found.start_ns + found.dur_ns);
            step = Some(found.name);
            bounds
        } else {
            if instances.is_empty() {
                return Err(Error::NoAnnotation(options.annotation.clone()));
            }
            let e = instances.get(options.instance).ok_or(Error::NoInstance {
                annotation: options.annotation.clone(),
                found: instances.len(),
            })?;
            (e.ts, e.end())
        }
    };
    // HTA's clipping: host events that start in the window and last; device work whose
    // launch does; stream waits.
    let clipped: Vec<usize> = (0..all.len())
        .filter(|&k| {
            let e = &all[k];
            if !e.on_device() {
                e.ts >= start && e.ts <= end && e.dur > 0
            } else {
                // Work whose call is paired with it (of a CUDA graph's, the last).
                e.name == "Stream Wait Event"
                    || e.partner.is_some_and(|c| {
                        let call = &all[c];
                        call.partner == Some(k)
                            && !call.on_device()
                            && call.ts >= start
                            && call.ts <= end
                            && call.dur > 0
                    })
            }
        })
        .collect();
    let g = graph::build(&all, &clipped);
    if g.nodes.is_empty() {
        return Err(Error::Empty);
    }
    let path = graph::longest_path(&g).ok_or(Error::Cycle)?;
    let event_ref = |k: usize| EventRef {
        slice: all[k].slice,
        name: all[k].name.clone(),
        ts_ns: all[k].ts,
        dur_ns: all[k].dur,
        stream: all[k].stream,
    };
    let edges: Vec<PathEdge> = path
        .iter()
        .map(|&e| {
            let edge = g.edges[e];
            let (from, to) = (g.nodes[edge.from], g.nodes[edge.to]);
            let bound_by = match edge.kind {
                EdgeType::KernelKernelDelay => "gpu_kernel_kernel_overhead",
                EdgeType::KernelLaunchDelay => "gpu_kernel_launch_overhead",
                EdgeType::Dependency | EdgeType::SyncDependency => "",
                EdgeType::Operator => match edge.attributed {
                    Some(a) if all[a].stream < 0 => "cpu_bound",
                    Some(a) if is_comm_kernel(&all[a].name) => "gpu_communication_bound",
                    Some(_) => "gpu_compute_bound",
                    None => "cpu_bound",
                },
            };
            PathEdge {
                kind: edge.kind,
                duration_ns: edge.weight,
                from: event_ref(from.event),
                from_start: from.is_start,
                to: event_ref(to.event),
                to_start: to.is_start,
                attributed: edge.attributed.map(event_ref),
                bound_by,
            }
        })
        .collect();
    let total: i64 = edges.iter().map(|e| e.duration_ns).sum();
    let mut summary: Vec<BoundBy> = Vec::new();
    for e in &edges {
        match summary.iter_mut().find(|b| b.bound_by == e.bound_by) {
            Some(b) => b.time_ns += e.duration_ns,
            None => summary.push(BoundBy {
                bound_by: e.bound_by,
                time_ns: e.duration_ns,
                pct: 0.0,
            }),
        }
    }
    summary.retain(|b| !b.bound_by.is_empty());
    for b in &mut summary {
        b.pct = if total > 0 {
            100.0 * b.time_ns as f64 / total as f64
        } else {
            0.0
        };
    }
    summary.sort_by(|a, b| b.time_ns.cmp(&a.time_ns).then(a.bound_by.cmp(b.bound_by)));
    let src = &trace.sources[source.index()];
    Ok(CriticalPath {
        file: src.path.clone(),
        rank: src.rank,
        step,
        start_ns: start,
        end_ns: end,
        length_ns: total,
        nodes: g.nodes.len(),
        graph_edges: g.edges.len(),
        summary,
        edges,
    })
}

impl Reported for CriticalPath {
    fn report(&self) -> Report {
        let mut r = Report::default();
        r.line(
            Line::of(format!(
                "critical path of {}{}: ",
                self.file,
                self.rank
                    .map(|x| format!(" (rank {x})"))
                    .unwrap_or_default()
            ))
            .value(Value::Duration(self.length_ns as f64))
            .text(format!(
                " in {} edges of a graph of {} nodes and {} edges, over ",
                self.edges.len(),
                self.nodes,
                self.graph_edges
            ))
            .value(Value::Duration((self.end_ns - self.start_ns) as f64))
            .text(match &self.step {
                Some(name) => format!(
                    " of {name} (no ProfilerStep marks steps: the step as `opscope steps` \
                     finds it)"
                ),
                None => String::new(),
            }),
        );
        let mut summary = Table::new(vec![
            Column::text("bound by"),
            Column::numeric("time"),
            Column::numeric("share"),
        ]);
        for b in &self.summary {
            summary.rows.push(vec![
                Value::text(b.bound_by),
                Value::Duration(b.time_ns as f64),
                Value::percent(b.pct, 2),
            ]);
        }
        r.table(summary);
        r.blank();
        let mut edges = Table::new(vec![
            Column::numeric("time"),
            Column::text("kind"),
            Column::text("bound by"),
            Column::text("from"),
            Column::text("to"),
            Column::text("attributed to"),
        ]);
        for e in &self.edges {
            let end = |r: &EventRef, start: bool| {
                format!("{} {}", if start { "start" } else { "end" }, r.name)
            };
            edges.rows.push(vec![
                Value::Duration(e.duration_ns as f64),
                Value::text(e.kind.hta_name().trim_start_matches("critical_path_")),
                Value::text(e.bound_by),
                Value::text(end(&e.from, e.from_start)),
                Value::text(end(&e.to, e.to_start)),
                Value::text(e.attributed.as_ref().map_or("", |a| a.name.as_str())),
            ]);
        }
        r.table(edges);
        r
    }
}
