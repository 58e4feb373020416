//! The lines xprof's trace viewer derives from a TPU TensorCore plane's event stats
//! (its `DeriveLinesFromStats`): "Framework Ops" (one event per run of events of one
//! `tf_op`), "Framework Name Scope" (the op's name scopes, nested), "Source code" (per
//! `source` stat) and "Host Offload Ops row N" (an offloaded `copy-start`/`copy-done`
//! pair on host memory, `S(5)`, as one span). The XPlane file does not hold these lines:
//! xprof builds them when it converts, so without them a TPU profile has no
//! framework-op view. The rules follow xprof's (facts, our own code): in which order
//! events are read, which events merge (an event without a group only across a short
//! gap), how stacked events of equal span are shortened by 1 ns per level so the viewer
//! stacks them in order, and which row an offload span goes to. The line building and
//! the framework-op rules are shared with the GPU derivation (`derived_gpu`).

/// One event of the plane, as the derivation reads it.
pub struct SourceEvent<'a> {
    pub begin_ps: i64,
    pub duration_ps: i64,
    /// The metadata's `name` and `display_name` (empty when it has none).
    pub name: &'a str,
    pub display_name: &'a str,
    pub tf_op: Option<&'a str>,
    pub source: Option<&'a str>,
    pub group_id: Option<i64>,
    pub is_async: bool,
}

/// One derived event, in picoseconds like the plane's own.
#[derive(Debug, Clone, PartialEq)]
pub struct DerivedEvent {
    /// What the viewer shows (the metadata's display name, else its name).
    pub name: String,
    /// The full name when it differs from `name` (a framework op's `node:Type`).
    pub long_name: Option<String>,
    pub begin_ps: i64,
    pub end_ps: i64,
    pub group_id: Option<i64>,
}

/// The derived lines of a plane, in the order xprof makes them, without empty ones.
pub struct DerivedLine {
    pub name: String,
    pub events: Vec<DerivedEvent>,
}

/// Whether xprof derives lines for a plane of this name: TensorCore planes
/// (`/device:TPU:N`), not SparseCore or other TPU planes.
pub fn derives_from_stats(plane_name: &str) -> bool {
    plane_name
        .strip_prefix("/device:TPU:")
        .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
}

/// The last event opened at one level of a line: later events with the same key and
/// group extend it instead of starting a new one.
#[derive(Clone)]
struct Open {
    key: String,
    group_id: Option<i64>,
    event: usize,
}

/// Builds one derived line: events of one key and group in a row merge into one, per
/// nesting level. Shared with the GPU derivation (`derived_gpu`).
#[derive(Default)]
pub(super) struct LineBuilder {
    pub(super) events: Vec<DerivedEvent>,
    open: Vec<Option<Open>>,
    /// On GPU planes xprof merges a run across any gap; elsewhere an event without a
    /// group only extends one that ends at most twice its length before it.
    merge_across_gaps: bool,
}

impl LineBuilder {
    /// A builder for a GPU plane's line.
    pub(super) fn merging_across_gaps() -> Self {
        LineBuilder {
            merge_across_gaps: true,
            ..Default::default()
        }
    }

    /// Extends the event open at `level` when it has the same key and group, else
    /// opens a new one there (closing the deeper ones); true when it opened one.
    pub(super) fn expand_or_add(
        &mut self,
        level: usize,
        key: &str,
        show: &str,
        long: Option<&str>,
        span: (i64, i64),
        group_id: Option<i64>,
    ) -> bool {
        if self.open.len() <= level {
            self.open.resize(level + 1, None);
        }
        if let Some(open) = &self.open[level] {
            let last = &self.events[open.event];
            let near = self.merge_across_gaps
                || group_id.is_some()
                || last.end_ps + 2 * (last.end_ps - last.begin_ps) >= span.0;
            if open.key == key && open.group_id == group_id && near {
                let e = &mut self.events[open.event];
                e.begin_ps = e.begin_ps.min(span.0);
                e.end_ps = e.end_ps.max(span.1);
                return false;
            }
        }
        self.reset(level);
        self.events.push(DerivedEvent {
            name: show.to_string(),
            long_name: long.map(str::to_string),
            begin_ps: span.0,
            end_ps: span.1,
            group_id,
        });
        self.open[level] = Some(Open {
            key: key.to_string(),
            group_id,
            event: self.events.len() - 1,
        });
        true
    }

    /// Closes the open events from `level` down. A stack of closed events of one span
    /// is shortened, deeper ones by 1 ns more each (never the top one below 1 ns), as
    /// xprof does so that its viewer nests them in order.
    pub(super) fn reset(&mut self, level: usize) {
        if level < self.open.len() && self.open[level].is_some() {
            let mut top = level;
            while top + 1 < self.open.len() && self.open[top + 1].is_some() {
                top += 1;
            }
            if top > level {
                let top_event = &self.events[self.open[top].as_ref().unwrap().event];
                let max_shrink_ns = (top_event.end_ps - top_event.begin_ps) / 1000 - 1;
                let mut shrink_ns = 0;
                let mut previous: Option<(i64, i64)> = None;
                for open in &self.open[level..=top] {
                    let e = &mut self.events[open.as_ref().unwrap().event];
                    let span = (e.begin_ps, e.end_ps);
                    if shrink_ns < max_shrink_ns && previous == Some(span) {
                        shrink_ns += 1;
                    }
                    previous = Some(span);
                    e.end_ps = span.1 - 1000 * shrink_ns;
                }
            }
        }
        for open in self.open.iter_mut().skip(level) {
            *open = None;
        }
    }
}

/// A framework op's display name, as xprof's `TfOpEventName` makes it, and its name
/// scopes (for TensorFlow and JAX ops only), as xprof's `ParseTfOpFullname` reads
/// `name:Type`.
fn parse_op(full: &str) -> (String, Vec<&str>) {
    let Some((name, ty)) = full.split_once(':') else {
        // Memcpy ops have a type but no scopes; anything else is shown as it is.
        for (prefix, ty) in [
            ("memcpyhtod", "MemcpyHToD"),
            ("memcpydtoh", "MemcpyDToH"),
            ("memcpydtod", "MemcpyDToD"),
            ("memcpyhtoh", "MemcpyHToH"),
        ] {
            if full.len() >= prefix.len() && full[..prefix.len()].eq_ignore_ascii_case(prefix) {
                return (ty.to_string(), Vec::new());
            }
        }
        return (full.trim_end().to_string(), Vec::new());
    };
    if name == "Iterator" {
        let last = full.rsplit("::").next().unwrap_or(full);
        return (format!("Iterator::{last}"), Vec::new());
    }
    if is_tf_op_name(name) && is_tf_op_type(ty) {
        return (ty.to_string(), scopes(name));
    }
    let derived;
    let op_type = if ty.is_empty() {
        derived = derive_op_type(name);
        derived
    } else {
        ty
    };
    if is_jax_op_type(op_type) {
        let ty = op_type.split('[').next().unwrap_or(op_type);
        return (ty.to_string(), scopes(name));
    }
    if ty.is_empty() {
        return (op_type.to_string(), scopes(name));
    }
    (full.trim_end().to_string(), Vec::new())
}

/// The name scopes of an op's node name: all but its last `/` part.
fn scopes(name: &str) -> Vec<&str> {
    let mut parts: Vec<&str> = name.split('/').collect();
    parts.pop();
    parts
}

/// `[A-Za-z0-9.][A-Za-z0-9_.\/>-]*`
fn is_tf_op_name(s: &str) -> bool {
    let mut b = s.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'.')
        && b.all(|c| c.is_ascii_alphanumeric() || b"_./>-".contains(&c))
}

/// `[A-Z_][a-zA-Z0-9_]*`
fn is_tf_op_type(s: &str) -> bool {
    let mut b = s.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_uppercase() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// `[a-z_][a-z0-9_]*(\[.*\])?`
fn is_jax_op_type(s: &str) -> bool {
    let (head, tail) = match s.find('[') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    let mut b = head.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == b'_')
        && b.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
        && (tail.is_empty() || tail.ends_with(']'))
}

/// The op type of a JAX name without one: its last scope, less a `_N` suffix.
fn derive_op_type(name: &str) -> &str {
    let op = name.rsplit('/').next().unwrap_or(name);
    match op.rsplit_once('_') {
        Some((head, suffix)) if suffix.parse::<i64>().is_ok() => head,
        _ => op,
    }
}

/// The order in which xprof derives from events, (begin, duration) in ps: by start,
/// and of events that start together the shorter first (found by experiment: an event
/// of a second line, or a later one of the same line, that is shorter comes first).
pub(super) fn xprof_order(a: (i64, i64), b: (i64, i64)) -> std::cmp::Ordering {
    a.cmp(&b)
}

/// Adds a framework op (`tf_op`) to the name-scope line (its scopes, nested) and the op
/// line (the op, shown by its type).
pub(super) fn add_framework_op(
    scopes: &mut LineBuilder,
    ops: &mut LineBuilder,
    full: &str,
    span: (i64, i64),
    group_id: Option<i64>,
) {
    let (shown, names) = parse_op(full);
    if !names.is_empty() {
        for (level, scope) in names.iter().enumerate() {
            let opened = scopes.expand_or_add(level, scope, scope, None, span, group_id);
            // The op line depends on the scope line: a new outermost scope also ends
            // the op open in it.
            if opened && level == 0 {
                ops.reset(0);
            }
        }
        scopes.reset(names.len());
    }
    ops.expand_or_add(0, full, &shown, Some(full), span, group_id);
}

/// Offloaded copies and slices name tensors in host memory with this memory space.
const HOST_MEMORY: &str = "S(5)";
/// xprof keeps at most this many offload rows (its thread id range for them).
const MAX_OFFLOAD_ROWS: usize = 1000;

/// `copy-start.7` → `offload-copy.7`.
fn offload_name(display: &str) -> String {
    let parts: Vec<&str> = display.split('.').collect();
    let id = if parts.len() < 2 {
        "0"
    } else {
        parts[parts.len() - 1]
    };
    let op = if let Some(i) = display.find("-start") {
        &display[..i]
    } else if let Some(i) = display.find("-done") {
        &display[..i]
    } else {
        display
    };
    format!("offload-{op}.{id}")
}

fn is_offload(e: &SourceEvent) -> bool {
    const KEYWORDS: [&str; 6] = [
        "copy-start",
        "copy-done",
        "dynamic-slice-start",
        "dynamic-slice-done",
        "dynamic-update-slice-start",
        "dynamic-update-slice-done",
    ];
    e.name.contains(HOST_MEMORY) && KEYWORDS.iter().any(|k| e.display_name.contains(k))
}

/// Derives the lines of one TensorCore plane from all its events.
pub fn derive_lines(mut events: Vec<SourceEvent>) -> Vec<DerivedLine> {
    events.sort_by(|a, b| xprof_order((a.begin_ps, a.duration_ps), (b.begin_ps, b.duration_ps)));
    let (mut ops, mut scopes, mut source) = (
        LineBuilder::default(),
        LineBuilder::default(),
        LineBuilder::default(),
    );
    let mut pending: std::collections::HashMap<String, std::collections::VecDeque<i64>> =
        Default::default();
    // Each row: its events and the end of its last one.
    let mut rows: Vec<(Vec<DerivedEvent>, i64)> = Vec::new();
    for e in &events {
        if e.is_async {
            continue;
        }
        let span = (e.begin_ps, e.begin_ps + e.duration_ps);
        if let Some(full) = e.tf_op.filter(|s| !s.is_empty()) {
            add_framework_op(&mut scopes, &mut ops, full, span, e.group_id);
        }
        if let Some(s) = e.source.filter(|s| !s.is_empty()) {
            source.expand_or_add(0, s, s, None, span, e.group_id);
        }
        if is_offload(e) {
            let name = offload_name(e.display_name);
            let queue = pending.entry(name.clone()).or_default();
            if e.display_name.contains("-start") {
                queue.push_back(e.begin_ps);
            } else if e.display_name.contains("-done") {
                // A done whose start was not traced is left out.
                let Some(start) = queue.pop_front() else {
                    continue;
                };
                let span = (start, span.1);
                let mut row = None;
                let mut frontier = span.0;
                for (i, r) in rows.iter().enumerate() {
                    if r.1 <= frontier {
                        row = Some(i);
                        frontier = r.1;
                    }
                }
                let row = row.unwrap_or_else(|| {
                    if rows.len() < MAX_OFFLOAD_ROWS {
                        rows.push((Vec::new(), span.1));
                    }
                    rows.len() - 1
                });
                rows[row].1 = rows[row].1.max(span.1);
                rows[row].0.push(DerivedEvent {
                    name,
                    long_name: None,
                    begin_ps: span.0,
                    end_ps: span.1,
                    group_id: None,
                });
            }
        }
    }
    // The stacks still open are closed (and shortened) at the end too.
    scopes.reset(0);
    ops.reset(0);
    source.reset(0);
    let mut lines = vec![
        DerivedLine {
            name: "Framework Ops".into(),
            events: ops.events,
        },
        DerivedLine {
            name: "Framework Name Scope".into(),
            events: scopes.events,
        },
        DerivedLine {
            name: "Source code".into(),
            events: source.events,
        },
    ];
    for (i, (events, _)) in rows.into_iter().enumerate() {
        lines.push(DerivedLine {
            name: format!("Host Offload Ops row {i}"),
            events,
        });
    }
    lines.retain(|l| !l.events.is_empty());
    lines
}
