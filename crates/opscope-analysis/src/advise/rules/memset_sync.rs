//! Synchronous memsets: Nsight Systems' expert rule `cuda_memset_sync` — a `cudaMemset*`
//! call without `async` on pinned host or managed memory (CUPTI memory kinds 1 and 4)
//! blocks the host. The kind comes from the set's `memKind` (Nsight) or its name
//! (Kineto: `Memset (Pinned)`).

use opscope_model::SliceKind;

use super::{pairs_by_source, time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "memset_sync",
    anchor: "Nsight Systems expert rule cuda_memset_sync",
    about: "memsets on pinned or managed memory whose call blocks the host",
    needs_device: true,
    check,
};

fn pinned_or_managed(facts: &Facts, i: usize) -> bool {
    if let Some(kind) = facts.int_arg(i, "memKind") {
        return kind == 1 || kind == 4;
    }
    let name = facts.name(i);
    name.contains("(Pinned") || name.contains("(Managed")
}

fn check(facts: &Facts, out: &mut Out) {
    let trace = facts.trace();
    let sets: Vec<(usize, usize)> = super::launched_by_api(facts, &[SliceKind::Memset])
        .into_iter()
        .filter_map(|(i, call)| {
            let name = facts.name(call).to_ascii_lowercase();
            (name.starts_with("cudamemset")
                && !name.contains("async")
                && pinned_or_managed(facts, i))
            .then_some((i, call))
        })
        .collect();
    let s = &trace.slices;
    for (source, pairs) in pairs_by_source(facts, &sets) {
        let blocked: i64 = pairs.iter().map(|c| s.dur[c.1]).sum();
        let rows: Vec<usize> = pairs.iter().map(|c| c.0).collect();
        let mut f = Finding::of(
            &RULE,
            facts.label(source, None),
            format!("{} synchronous memsets block the host", rows.len()),
        )
        .saving(facts, source, blocked);
        f.severity = Severity::of_share(f.saving_pct, 3.0, 15.0);
        f.evidence.push(format!("{} in their calls", time(blocked)));
        f.fix = "use cudaMemsetAsync on a stream".to_string();
        f.more = format!("opscope gpu {}", facts.files());
        for (k, v) in [("sets", rows.len() as f64), ("blocked_ns", blocked as f64)] {
            f.figures.insert(k, v);
        }
        out.finding(f);
    }
}
