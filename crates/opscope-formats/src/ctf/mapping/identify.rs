//! Who emitted a CTF event and when: the event's time in ns, and its pid, tid and
//! process name, found in the stream event context, the event context or (perf) the
//! payload. Worked out once per layout (where each scope holds them, at fixed offsets
//! when it can) and per event on the decoding thread.

use super::super::decode::{skip, Event, Layout, Node, Val};
use super::super::program::{FixedField, FixedInt, Op};
use super::super::types::ClockOrigin;

/// Where each field of a struct scope is among its values, when that is fixed.
pub(super) type FieldOffsets = Option<Box<[u32]>>;

/// Where the pid/tid/procname of an event are, per scope.
#[derive(Default, Clone, Copy)]
struct Ids {
    pid: Option<usize>,
    tid: Option<usize>,
    procname: Option<usize>,
}

fn ids_of(node: Option<&Node>, pid: &[&str], tid: &[&str]) -> Ids {
    let mut ids = Ids::default();
    if let Some(Node::Struct { names, fields, .. }) = node {
        for (i, (n, f)) in names.iter().zip(fields.iter()).enumerate() {
            let int = matches!(f, Node::Int(_));
            if int && pid.contains(&n.as_str()) && ids.pid.is_none() {
                ids.pid = Some(i);
            } else if int && tid.contains(&n.as_str()) && ids.tid.is_none() {
                ids.tid = Some(i);
            } else if n == "procname" {
                ids.procname = Some(i);
            }
        }
    }
    ids
}

/// Who emitted an event and when, worked out on the decoding thread.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Who {
    pub(crate) ts: i64,
    pub(crate) pid: Option<i64>,
    pub(crate) tid: Option<i64>,
    pub(crate) procname: Option<Val>,
}

/// What finding an event's time and emitter needs from the layout, computed once and
/// shared with the decoding thread.
pub(crate) struct Identify {
    pub(crate) origin: Option<ClockOrigin>,
    /// Per stream class: ids in the stream event context, and its field offsets.
    stream_ids: Vec<(Ids, FieldOffsets)>,
    /// Per event class: ids in the event context and payload (perf).
    event_ids: Vec<(Ids, Ids)>,
    /// Per event class: field offsets of the event context and payload, when fixed.
    pub(super) offsets: Vec<(FieldOffsets, FieldOffsets)>,
    /// Per event class: where its pid, tid and process name are, when the scopes that
    /// hold them have fixed offsets (most traces); `who` then reads them directly.
    direct: Vec<Option<DirectWho>>,
    /// Per stream class: where the pid, tid and process name are in the bytes of its
    /// event context, when that is one fixed run.
    context_bytes: Vec<Option<ContextBytes>>,
    /// Every event class finds its pid, tid and process name in its stream event
    /// context's bytes: the reader then keeps no values of those contexts.
    pub(crate) context_by_bytes: bool,
}

/// Where an event context's pid, tid and process name are, from its aligned start.
#[derive(Clone, Copy, Debug, Default)]
struct ContextBytes {
    align: u32,
    pid: Option<FixedInt>,
    tid: Option<FixedInt>,
    /// Offset and length of the text.
    procname: Option<(u32, u32)>,
}

impl ContextBytes {
    /// The plan for a stream class whose event context program is one fixed run of a
    /// flat struct.
    fn of(program: Option<&[Op]>, ids: &Ids) -> Option<ContextBytes> {
        let [Op::Fixed { align, fields, .. }] = program? else {
            return None;
        };
        let (FixedField::Struct { fields: n }, rest) = fields.split_first()? else {
            return None;
        };
        if rest.len() != *n as usize {
            return None;
        }
        let int = |i: Option<usize>| -> Option<Option<FixedInt>> {
            match i.map(|i| rest.get(i)) {
                None => Some(None),
                Some(Some(FixedField::Int(f))) => Some(Some(*f)),
                Some(_) => None,
            }
        };
        let procname = match ids.procname.map(|i| rest.get(i)) {
            None => None,
            Some(Some(FixedField::Text { offset, len })) => Some((*offset, *len)),
            Some(_) => return None,
        };
        debug_assert!(
            align.is_power_of_two(),
            "fixed runs are aligned to powers of two"
        );
        Some(ContextBytes {
            align: *align,
            pid: int(ids.pid)?,
            tid: int(ids.tid)?,
            procname,
        })
    }

    /// The event's pid, tid and process name, from the context starting at bit `at` of
    /// `file`.
    fn read(&self, file: &[u8], at: u64) -> (Option<i64>, Option<i64>, Option<Val>) {
        // A mask, not a division: `ContextBytes::of` takes only fixed runs, whose
        // alignment is a power of two of at least 8 (program::merge_fixed).
        let a = self.align as u64;
        let start = (((at + a - 1) & !(a - 1)) / 8) as usize;
        let int = |f: Option<FixedInt>| {
            let f = f?;
            let from = start + f.offset as usize;
            let b = file.get(from..from + f.bytes as usize)?;
            let mut word = [0u8; 8];
            let raw = if f.le {
                word[..b.len()].copy_from_slice(b);
                u64::from_le_bytes(word)
            } else {
                word[8 - b.len()..].copy_from_slice(b);
                u64::from_be_bytes(word)
            };
            Some(((raw << f.sign_shift) as i64) >> f.sign_shift)
        };
        // The whole field: the mapping cuts it at its first NUL, once per thread.
        let procname = self.procname.and_then(|(offset, len)| {
            let from = start + offset as usize;
            file.get(from..from + len as usize)?;
            Some(Val::Str {
                start: from as u64,
                len,
            })
        });
        (int(self.pid), int(self.tid), procname)
    }
}

/// Where an event's pid, tid and process name are: (scope, value index from the
/// scope's start).
#[derive(Clone, Copy, Default)]
struct DirectWho {
    pid: Option<(usize, u32)>,
    tid: Option<(usize, u32)>,
    procname: Option<(usize, u32)>,
}

impl Identify {
    pub(crate) fn new(layout: &Layout) -> Self {
        let pid = ["vpid", "pid"];
        let tid = ["vtid", "tid"];
        let mut ident = Identify {
            direct: Vec::new(),
            context_bytes: Vec::new(),
            context_by_bytes: false,
            origin: layout.clock.as_ref().map(|c| c.origin()),
            stream_ids: layout
                .streams
                .iter()
                .map(|s| {
                    let node = s.event_context.as_ref();
                    (ids_of(node, &pid, &tid), fixed_offsets(node))
                })
                .collect(),
            event_ids: layout
                .events
                .iter()
                .map(|e| {
                    (
                        ids_of(e.context.as_ref(), &pid, &tid),
                        ids_of(e.fields.as_ref(), &["perf_pid"], &["perf_tid"]),
                    )
                })
                .collect(),
            offsets: layout
                .events
                .iter()
                .map(|e| {
                    (
                        fixed_offsets(e.context.as_ref()),
                        fixed_offsets(e.fields.as_ref()),
                    )
                })
                .collect(),
        };
        ident.direct = (0..layout.events.len())
            .map(|ev| ident.direct_who(layout.events[ev].stream, ev))
            .collect();
        ident.context_bytes = layout
            .streams
            .iter()
            .zip(&ident.stream_ids)
            .map(|(s, (ids, _))| ContextBytes::of(s.event_context_program.as_deref(), ids))
            .collect();
        // Every class's ids come from its stream event context alone, and that context
        // can be read from its bytes (or there is none).
        ident.context_by_bytes = ident.direct.iter().zip(&layout.events).all(|(d, e)| {
            let Some(d) = d else { return false };
            let from_context = [d.pid, d.tid, d.procname]
                .iter()
                .all(|p| p.is_none_or(|(scope, _)| scope == 1));
            let context = &layout.streams[e.stream].event_context_program;
            from_context && (context.is_none() || ident.context_bytes[e.stream].is_some())
        });
        ident
    }

    /// Whether `who` reads events of class `ev` directly.
    #[cfg(test)]
    pub(crate) fn reads_directly(&self, ev: usize) -> bool {
        self.direct.get(ev).is_some_and(|d| d.is_some())
    }

    /// The places `who` would look up for events of class `ev`, when each is at a fixed
    /// offset of its scope: the same first-found order (stream event context, event
    /// context, then the payload's perf ids only when neither context has a pid or a
    /// tid).
    fn direct_who(&self, stream: usize, ev: usize) -> Option<DirectWho> {
        let (stream_ids, stream_offsets) = self.stream_ids.get(stream)?;
        let (event_ids, payload_ids) = self.event_ids[ev];
        let (event_offsets, payload_offsets) = &self.offsets[ev];
        let mut direct = DirectWho::default();
        let scoped = [
            (1, stream_ids, stream_offsets),
            (2, &event_ids, event_offsets),
        ];
        for (scope, ids, offsets) in scoped {
            if ids.pid.is_none() && ids.tid.is_none() && ids.procname.is_none() {
                continue;
            }
            let offsets = offsets.as_ref()?;
            let at = |i: Option<usize>| i.map(|i| (scope, offsets[i]));
            direct.pid = direct.pid.or(at(ids.pid));
            direct.tid = direct.tid.or(at(ids.tid));
            direct.procname = direct.procname.or(at(ids.procname));
        }
        if direct.pid.is_none()
            && direct.tid.is_none()
            && (payload_ids.pid.is_some() || payload_ids.tid.is_some())
        {
            let offsets = payload_offsets.as_ref()?;
            let at = |i: Option<usize>| i.map(|i| (3, offsets[i]));
            direct.pid = at(payload_ids.pid);
            direct.tid = at(payload_ids.tid);
        }
        Some(direct)
    }

    /// The event's time in ns and its pid, tid and process name, from the stream event
    /// context, the event context, or (perf) the payload.
    pub(crate) fn who(&self, layout: &Layout, r: &Event, positions: &mut Vec<u32>) -> Who {
        let ts = match self.origin {
            Some(o) => o.ns(r.timestamp),
            None => r.timestamp as i64,
        };
        let ev = r.event;
        if let (Some(Some(bytes)), Some(at)) = (self.context_bytes.get(r.stream), r.context_at) {
            if r.scopes[1] == u32::MAX {
                let (pid, tid, procname) = bytes.read(r.file, at);
                return Who {
                    ts,
                    pid,
                    tid,
                    procname,
                };
            }
        }
        if let Some(Some(direct)) = self.direct.get(ev) {
            if layout.events[ev].stream == r.stream {
                let at = |place: Option<(usize, u32)>| {
                    let (scope, offset) = place?;
                    let start = *r.scopes.get(scope)?;
                    r.vals.get(start.checked_add(offset)? as usize).copied()
                };
                let int = |place| match at(place) {
                    Some(Val::I(v)) => Some(v),
                    Some(Val::U(v)) => Some(v as i64),
                    _ => None,
                };
                return Who {
                    ts,
                    pid: int(direct.pid),
                    tid: int(direct.tid),
                    procname: at(direct.procname),
                };
            }
        }
        self.who_by_walking(layout, r, positions)
    }

    /// [`Identify::who`] for any layout: the scopes' fields are found by walking their
    /// values.
    pub(crate) fn who_by_walking(
        &self,
        layout: &Layout,
        r: &Event,
        positions: &mut Vec<u32>,
    ) -> Who {
        let ts = match self.origin {
            Some(o) => o.ns(r.timestamp),
            None => r.timestamp as i64,
        };
        let ev = r.event;
        let el = &layout.events[ev];
        let sl = &layout.streams[r.stream];
        let (mut pid, mut tid, mut procname) = (None, None, None);
        let (stream_ids, stream_offsets) = &self.stream_ids[r.stream];
        let scoped = [
            (
                sl.event_context.as_ref(),
                stream_offsets,
                r.scopes[1],
                *stream_ids,
            ),
            (
                el.context.as_ref(),
                &self.offsets[ev].0,
                r.scopes[2],
                self.event_ids[ev].0,
            ),
        ];
        for (node, offsets, start, ids) in scoped {
            if ids.pid.is_none() && ids.tid.is_none() && ids.procname.is_none() {
                continue;
            }
            field_positions(node, offsets, r.vals, start, positions);
            let at = |i: Option<usize>| i.and_then(|i| positions.get(i).copied());
            pid = pid.or(int_at(r.vals, at(ids.pid)));
            tid = tid.or(int_at(r.vals, at(ids.tid)));
            if procname.is_none() {
                procname = at(ids.procname).and_then(|p| r.vals.get(p as usize).copied());
            }
        }
        let payload_ids = self.event_ids[ev].1;
        if pid.is_none()
            && tid.is_none()
            && (payload_ids.pid.is_some() || payload_ids.tid.is_some())
        {
            field_positions(
                el.fields.as_ref(),
                &self.offsets[ev].1,
                r.vals,
                r.scopes[3],
                positions,
            );
            let at = |i: Option<usize>| i.and_then(|i| positions.get(i).copied());
            pid = int_at(r.vals, at(payload_ids.pid));
            tid = int_at(r.vals, at(payload_ids.tid));
        }
        Who {
            ts,
            pid,
            tid,
            procname,
        }
    }
}

/// A text value cut at its first NUL.
pub(crate) fn up_to_nul(r: &Event, v: Val) -> Val {
    match v {
        Val::Str { start, len } => Val::Str {
            start,
            len: super::super::decode::text_len(r.text(start, len)) as u32,
        },
        v => v,
    }
}

pub(super) fn int_at(vals: &[Val], pos: Option<u32>) -> Option<i64> {
    match vals.get(pos? as usize)? {
        Val::I(v) => Some(*v),
        Val::U(v) => Some(*v as i64),
        _ => None,
    }
}

/// Where each field of a struct scope's values is: offsets from the struct's value
/// when every field adds a fixed number of values (most events), else `None`.
fn fixed_offsets(node: Option<&Node>) -> FieldOffsets {
    let Some(Node::Struct { fields, .. }) = node else {
        return None;
    };
    let mut offsets = Vec::with_capacity(fields.len());
    let mut at = 1;
    for f in fields.iter() {
        offsets.push(at as u32);
        at += f.fixed_width()?;
    }
    Some(offsets.into())
}

/// The value index of each field of the struct scope starting at `start`
/// (`u32::MAX`: the event has no such scope) into `out`.
pub(super) fn field_positions(
    node: Option<&Node>,
    offsets: &FieldOffsets,
    vals: &[Val],
    start: u32,
    out: &mut Vec<u32>,
) {
    out.clear();
    if start == u32::MAX {
        return;
    }
    if let Some(offsets) = offsets {
        out.extend(offsets.iter().map(|o| start + o));
    } else if let Some(Node::Struct { fields, .. }) = node {
        let mut p = start as usize + 1;
        for f in fields.iter() {
            out.push(p as u32);
            p = skip(f, vals, p);
        }
    }
}
