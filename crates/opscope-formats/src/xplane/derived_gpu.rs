//! The lines xprof's trace viewer derives for a GPU plane (`/device:GPU:N`) from its
//! events' stats: "Steps" (one event per run of events of one `group_id`, over all the
//! plane's lines) and, for each stream, "XLA Modules - from #L" (`hlo_module`, with
//! its `program_id`), "XLA Ops - from #L" (`hlo_op`, its `::`-separated levels nested),
//! "Framework Ops - from #L" and "Framework Name Scope - from #L" (`tf_op`, for kernels
//! that are not XLA ops), L being the stream's line id. The XPlane file does not hold
//! these lines: xprof builds them when it converts, and without them a JAX or XLA GPU
//! profile has no per-op view. The rules follow xprof 2.24.2's, found by experiment
//! (facts, our own code):
//! - only a stream's kernels (events with a `kernel_details` stat) make its op lines;
//!   memcpys and other events do not, though their `group_id` counts for "Steps";
//! - the stats are the event's own, not its metadata's;
//! - an event without a `group_id` takes the one of the latest event before it on the
//!   plane (any line);
//! - runs merge across any gap, unlike on TPU planes;
//! - a new XLA module ends the XLA op and name scope open in the one before;
//! - xprof's `source` and the framework op of an XLA kernel come from the HLO proto
//!   the XSpace may carry, not from the kernel's stats: they are not derived here;
//! - a step is named by its group id; when xprof groups the host's events into steps
//!   (root events, kernels joined to launches by `correlation_id`) it names them after
//!   the host's step and regroups kernels, which is not done here.

use super::derived::{add_framework_op, xprof_order, DerivedLine, LineBuilder};

/// One event of a GPU plane, with the event's own stats.
pub struct GpuEvent<'a> {
    pub begin_ps: i64,
    pub duration_ps: i64,
    /// Whether it has `kernel_details`: only kernels make op lines.
    pub kernel: bool,
    pub hlo_op: Option<&'a str>,
    pub hlo_module: Option<&'a str>,
    pub program_id: Option<i64>,
    pub tf_op: Option<&'a str>,
    pub group_id: Option<i64>,
}

/// One line of a GPU plane.
pub struct GpuLine<'a> {
    pub id: i64,
    pub name: &'a str,
    /// A line a profiler already derived (xprof's derived line ids): its events count
    /// for steps but it is not a stream.
    pub derived: bool,
    pub events: Vec<GpuEvent<'a>>,
}

/// Whether xprof derives GPU lines for a plane of this name.
pub fn is_gpu_plane(plane_name: &str) -> bool {
    plane_name.starts_with("/device:GPU:")
}

fn by_time(a: &GpuEvent, b: &GpuEvent) -> std::cmp::Ordering {
    xprof_order((a.begin_ps, a.duration_ps), (b.begin_ps, b.duration_ps))
}

/// Derives a GPU plane's lines. `with_steps` is false when the plane already has a
/// "Steps" line (older TensorFlow profilers wrote one), which xprof's would duplicate.
pub fn derive_lines(mut lines: Vec<GpuLine>, with_steps: bool) -> Vec<DerivedLine> {
    inherit_groups(&mut lines);
    let mut out = Vec::new();
    if with_steps {
        let mut all: Vec<&GpuEvent> = lines.iter().flat_map(|l| &l.events).collect();
        all.sort_by(|a, b| by_time(a, b));
        let mut steps = LineBuilder::merging_across_gaps();
        for e in all {
            if let Some(g) = e.group_id {
                let name = g.to_string();
                let span = (e.begin_ps, e.begin_ps + e.duration_ps);
                steps.expand_or_add(0, &name, &name, None, span, Some(g));
            }
        }
        out.push(DerivedLine {
            name: "Steps".into(),
            events: steps.events,
        });
    }
    // xprof derives the compute streams' lines first, then the busier streams'.
    let mut streams: Vec<&GpuLine> = lines.iter().filter(|l| !l.derived).collect();
    streams.sort_by_key(|l| {
        (
            !l.name.contains("Compute"),
            std::cmp::Reverse(l.events.len()),
        )
    });
    for line in streams {
        out.extend(stream_lines(line));
    }
    out.retain(|l| !l.events.is_empty());
    out
}

/// An event without a group joins the group of the latest grouped event before it.
fn inherit_groups(lines: &mut [GpuLine]) {
    let mut order: Vec<(usize, usize)> = lines
        .iter()
        .enumerate()
        .flat_map(|(l, line)| (0..line.events.len()).map(move |e| (l, e)))
        .collect();
    order.sort_by(|&(la, ea), &(lb, eb)| by_time(&lines[la].events[ea], &lines[lb].events[eb]));
    let mut group = None;
    for (l, e) in order {
        let event = &mut lines[l].events[e];
        match event.group_id {
            Some(g) => group = Some(g),
            None => event.group_id = group,
        }
    }
}

/// The op lines of one stream.
fn stream_lines(line: &GpuLine) -> Vec<DerivedLine> {
    let builder = LineBuilder::merging_across_gaps;
    let (mut scopes, mut ops, mut xla_ops, mut modules) =
        (builder(), builder(), builder(), builder());
    let mut events: Vec<&GpuEvent> = line.events.iter().filter(|e| e.kernel).collect();
    events.sort_by(|a, b| by_time(a, b));
    for e in events {
        let span = (e.begin_ps, e.begin_ps + e.duration_ps);
        let module = e.hlo_module.unwrap_or("");
        if !module.is_empty() {
            let name = match e.program_id {
                Some(id) => format!("{module}({id})"),
                None => module.to_string(),
            };
            if modules.expand_or_add(0, &name, &name, None, span, e.group_id) {
                // The op and scope lines depend on the module line.
                scopes.reset(0);
                ops.reset(0);
                xla_ops.reset(0);
            }
        }
        if let Some(hlo) = e.hlo_op {
            // Ops of one name in two modules are two ops.
            let prefix = match e.program_id {
                Some(id) => id.to_string(),
                None => module.to_string(),
            };
            let levels: Vec<&str> = hlo.split("::").collect();
            for (level, op) in levels.iter().enumerate() {
                let key = format!("{prefix}/{op}");
                xla_ops.expand_or_add(level, &key, op, Some(&key), span, e.group_id);
            }
            xla_ops.reset(levels.len());
        } else if let Some(full) = e.tf_op.filter(|s| !s.is_empty()) {
            add_framework_op(&mut scopes, &mut ops, full, span, e.group_id);
        }
    }
    [
        ("Framework Name Scope", scopes),
        ("XLA Ops", xla_ops),
        ("XLA Modules", modules),
        ("Framework Ops", ops),
    ]
    .into_iter()
    .map(|(name, b)| DerivedLine {
        name: format!("{name} - from #{}", line.id),
        events: b.events,
    })
    .collect()
}
