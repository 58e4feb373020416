//! Function instrumentation (`-finstrument-functions`): lttng-ust's
//! `lttng_ust_cyg_profile[_fast]:func_entry`/`func_exit` (`liblttng-ust-cyg-profile`)
//! → slices named by the function's `addr` (hex), nested per thread as calls nest.

use opscope_model::{SliceKind, TrackId};

use super::{Class, Plan, Rule};
use crate::ctf::decode::{Event, Layout};
use crate::ctf::mapping::{Mapper, Open};

/// An entry (with its `addr` field) or an exit.
#[derive(Clone, Debug)]
pub(in crate::ctf::mapping) enum Cyg {
    Entry { addr: Option<usize> },
    Exit,
}

pub(super) fn plan(_: &mut Mapper, c: &Class) -> Option<Rule> {
    let cyg = match (c.provider, c.short) {
        ("lttng_ust_cyg_profile" | "lttng_ust_cyg_profile_fast", "func_entry") => Cyg::Entry {
            addr: c.int_field("addr"),
        },
        ("lttng_ust_cyg_profile" | "lttng_ust_cyg_profile_fast", "func_exit") => Cyg::Exit,
        _ => return None,
    };
    Some(Rule::Cyg(cyg))
}

pub(super) fn apply(
    m: &mut Mapper,
    cyg: &Cyg,
    plan: &Plan,
    layout: &Layout,
    r: &Event,
    ts: i64,
    track: TrackId,
) {
    match cyg {
        Cyg::Entry { addr } => {
            let a = addr.map_or(0, |i| m.field_u(r, i));
            let name = m.trace.intern(&format!("0x{a:x}"));
            let args = m.payload_args(plan, layout, r);
            let open = Open {
                key: plan.name,
                name,
                ts,
                kind: SliceKind::Other,
                category: plan.category,
                args,
            };
            m.stacks.begin(track, open);
        }
        Cyg::Exit => match m.stacks.end(track, &mut m.trace.repairs) {
            Some(open) => m.close(open, track, ts, &[]),
            // An exit that closed nothing (counted already) is kept as an instant.
            None => m.instant(plan, layout, r, ts, track),
        },
    }
}
