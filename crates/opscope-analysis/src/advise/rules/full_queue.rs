//! Time blocked on a full launch queue: HTA's queue length
//! (`TraceCounters.get_queue_length_time_series`): per stream, +1 at each launch call
//! (`cudaLaunchKernel`, `cudaMemcpyAsync`, … — HTA's list) for each piece of work it put
//! there, -1 at the work's start; `get_time_spent_blocked_on_full_queue` sums the time
//! the length stays at 1,024 (`CUDA_MAX_LAUNCH_QUEUE_PER_STREAM`) or more, when the next
//! launch blocks the host.

use hashbrown::HashMap;
use opscope_model::SliceKind;

use super::{time, Facts, Finding, Out, Rule, Severity};
use crate::critical_path::LAUNCHES;

pub static RULE: Rule = Rule {
    name: "full_queue",
    anchor: "HTA queue length (blocked while 1,024 launches are outstanding)",
    about: "launch queues full enough to block the host",
    needs_device: true,
    check,
};

const FULL: i64 = 1024;

/// A change of a queue's length: when, and by how much.
type Change = (i64, i64);

fn check(facts: &Facts, out: &mut Out) {
    let s = &facts.trace().slices;
    let launches = facts.names_where(|n| LAUNCHES.contains(&n));
    let correlation = facts.correlation();
    for work in facts.device_work() {
        // Per stream (track): the launches' times and the work's starts, each in
        // (nearly) sorted order, so that one stable sort merges the two runs.
        let mut steps: HashMap<u32, (Vec<Change>, Vec<Change>)> = HashMap::new();
        for &i in &work.slices {
            if !matches!(
                s.kind(i),
                SliceKind::Kernel | SliceKind::Memcpy(_) | SliceKind::Memset
            ) {
                continue;
            }
            let Some(call) = correlation
                .launch_of(i)
                .filter(|&c| launches[s.name[c].0 as usize])
            else {
                continue;
            };
            let q = steps.entry(s.track[i]).or_default();
            q.0.push((s.ts[call], 1));
            q.1.push((s.ts[i], -1));
        }
        let (mut blocked, mut deepest, mut first) = (0i64, 0i64, None);
        for (mut q, starts) in steps.into_values() {
            // The length's steps, launches first at equal times.
            q.extend(starts);
            q.sort_by_key(|x| (x.0, -x.1));
            let mut depth = 0i64;
            for pair in q.windows(2) {
                depth += pair[0].1;
                deepest = deepest.max(depth);
                if depth >= FULL {
                    blocked += pair[1].0 - pair[0].0;
                    first.get_or_insert(pair[0].0);
                }
            }
        }
        if blocked == 0 {
            continue;
        }
        let mut f = Finding::of(
            &RULE,
            &work.label,
            format!(
                "a launch queue holds {FULL} or more launches for {}",
                time(blocked)
            ),
        )
        .saving(facts, work.source, blocked);
        f.severity = Severity::of_share(f.saving_pct, 3.0, 15.0);
        f.evidence.push(format!(
            "{deepest} launches outstanding at most on one stream"
        ));
        f.fix = "the host is far ahead of the device: fine while the device is the \
                 bottleneck, but launches block meanwhile; make the kernels cheaper or \
                 fewer (fusion, CUDA graphs), or synchronise less often"
            .to_string();
        f.more = format!("opscope gpu {}", facts.files());
        if let Some(at) = first {
            f.span = Some([at, at + blocked]);
        }
        f.figures.insert("blocked_ns", blocked as f64);
        f.figures.insert("deepest", deepest as f64);
        out.finding(f);
    }
}
