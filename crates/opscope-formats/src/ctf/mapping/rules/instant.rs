//! Every event no other rule takes → an instant of its emitting thread, with its
//! payload's fields as args (numbers as numbers, text interned, compound values as
//! JSON, enumerations as their labels). The other rules keep events as instants
//! through the same functions.

use opscope_model::args::ArgValue;
use opscope_model::events::InstantRow;
use opscope_model::{InstantScope, SliceKind, StrId, TrackId};

use super::libc::field_bit;
use super::{Class, Plan, Rule};
use crate::ctf::decode::{Event, Layout, Node, Val};
use crate::ctf::mapping::Mapper;

/// Takes any class.
pub(super) fn plan(_: &mut Mapper, _: &Class) -> Option<Rule> {
    Some(Rule::Instant)
}

impl Mapper<'_> {
    /// A value as an arg: numbers as numbers, text interned, compound values as JSON.
    fn arg(&mut self, r: &Event, node: &Node, pos: usize) -> ArgValue {
        let vals = &r.vals;
        match (node, vals.get(pos).copied()) {
            (Node::Int(i), Some(v)) => {
                if let Some(labels) = &i.labels {
                    let x = match v {
                        Val::I(x) => x as i128,
                        Val::U(x) => x as i128,
                        _ => 0,
                    };
                    if let Some(l) = labels.entries.iter().find(|e| e.1 <= x && x <= e.2) {
                        return ArgValue::Str(self.trace.intern(&l.0));
                    }
                }
                match v {
                    Val::I(x) => ArgValue::Int(x),
                    Val::U(x) => match i64::try_from(x) {
                        Ok(x) => ArgValue::Int(x),
                        Err(_) => ArgValue::UInt(x),
                    },
                    _ => ArgValue::Null,
                }
            }
            (Node::Float { .. }, Some(Val::F(f))) => ArgValue::Float(f),
            (_, Some(v @ Val::Str { .. })) => ArgValue::Str(self.text(r, v)),
            (Node::Variant { options, .. }, Some(Val::Variant(o))) => match options.get(o as usize)
            {
                Some(opt) => self.arg(r, opt, pos + 1),
                None => ArgValue::Null,
            },
            (_, Some(_)) => {
                let mut s = String::new();
                json(r, node, vals, pos, &mut s);
                ArgValue::Json(self.trace.intern(&s))
            }
            _ => ArgValue::Null,
        }
    }

    pub(super) fn payload_args(
        &mut self,
        plan: &Plan,
        layout: &Layout,
        r: &Event,
    ) -> Vec<(StrId, ArgValue)> {
        let mut out = Vec::new();
        self.push_payload_args(plan, layout, r, 0, &mut out);
        out
    }

    /// Pushes the plan's arg fields but those in the mask `leave_out`.
    fn push_payload_args(
        &mut self,
        plan: &Plan,
        layout: &Layout,
        r: &Event,
        leave_out: u64,
        out: &mut Vec<(StrId, ArgValue)>,
    ) {
        let el = &layout.events[r.event];
        let Some(Node::Struct { fields, .. }) = &el.fields else {
            return;
        };
        for &i in plan.arg_fields.iter() {
            let (Some(&pos), Some(f)) = (self.positions.get(i), fields.get(i)) else {
                break;
            };
            if leave_out & field_bit(i) != 0 {
                continue;
            }
            let v = self.arg(r, f, pos as usize);
            out.push((plan.keys[i], v));
        }
    }

    /// An instant of the event with its payload's fields as args.
    pub(super) fn instant(
        &mut self,
        plan: &Plan,
        layout: &Layout,
        r: &Event,
        ts: i64,
        track: TrackId,
    ) {
        let kind = SliceKind::Other;
        self.instant_leaving_out(plan, layout, r, ts, track, kind, &[], 0);
    }

    /// An instant with `extra` args and the payload's arg fields but those in the mask
    /// `leave_out`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn instant_leaving_out(
        &mut self,
        plan: &Plan,
        layout: &Layout,
        r: &Event,
        ts: i64,
        track: TrackId,
        kind: SliceKind,
        extra: &[(StrId, ArgValue)],
        leave_out: u64,
    ) {
        let args = if plan.arg_fields.is_empty() {
            self.trace.args.push_bag(extra)
        } else {
            // One buffer for every instant: millions of events must not allocate.
            let mut entries = std::mem::take(&mut self.scratch);
            entries.clear();
            entries.extend_from_slice(extra);
            self.push_payload_args(plan, layout, r, leave_out, &mut entries);
            let args = self.trace.args.push_bag(&entries);
            self.scratch = entries;
            args
        };
        self.trace.instants.push(InstantRow {
            track,
            ts,
            name: plan.name,
            category: plan.category,
            kind,
            scope: if plan.process_scope {
                InstantScope::Process
            } else {
                InstantScope::Thread
            },
            args,
        });
    }
}

/// A compound value as JSON text (arrays of small integers: `[1, 2]`).
fn json(r: &Event, node: &Node, vals: &[Val], pos: usize, out: &mut String) -> usize {
    use std::fmt::Write;
    match (node, vals.get(pos)) {
        (_, Some(Val::U(v))) => {
            let _ = write!(out, "{v}");
            pos + 1
        }
        (_, Some(Val::I(v))) => {
            let _ = write!(out, "{v}");
            pos + 1
        }
        (_, Some(Val::F(v))) => {
            if v.is_finite() {
                let _ = write!(out, "{v}");
            } else {
                out.push_str("null");
            }
            pos + 1
        }
        (_, Some(Val::Str { start, len })) => {
            let s = String::from_utf8_lossy(r.text(*start, *len));
            out.push_str(&serde_json::Value::String(s.into_owned()).to_string());
            pos + 1
        }
        (Node::Struct { names, fields, .. }, Some(Val::Compound(_))) => {
            out.push('{');
            let mut p = pos + 1;
            for (i, (n, f)) in names.iter().zip(fields.iter()).enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&serde_json::Value::String(n.clone()).to_string());
                out.push_str(": ");
                p = json(r, f, vals, p, out);
            }
            out.push('}');
            p
        }
        (Node::Array { elem, .. } | Node::Seq { elem, .. }, Some(Val::Compound(n))) => {
            out.push('[');
            let mut p = pos + 1;
            for i in 0..*n {
                if i > 0 {
                    out.push_str(", ");
                }
                p = json(r, elem, vals, p, out);
            }
            out.push(']');
            p
        }
        (Node::Variant { options, .. }, Some(Val::Variant(o))) => match options.get(*o as usize) {
            Some(opt) => json(r, opt, vals, pos + 1, out),
            None => pos + 1,
        },
        _ => {
            out.push_str("null");
            pos + 1
        }
    }
}
