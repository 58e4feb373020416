//! Asynchronous copies from pageable memory: Nsight Systems' expert rule
//! `cuda_memcpy_async` — a `cudaMemcpy*Async*` call whose copy has pageable memory at
//! either end (CUPTI memory kind 0) runs synchronously. The kind comes from the copy's
//! `srcKind`/`dstKind` (Nsight) or its name (Kineto: `Memcpy HtoD (Pageable -> Device)`).

use super::{pairs_by_source, time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "memcpy_pageable",
    anchor: "Nsight Systems expert rule cuda_memcpy_async",
    about: "asynchronous copies from pageable memory, which run synchronously",
    needs_device: true,
    check,
};

/// Whether a copy's memory kinds are known, and whether one is pageable.
fn pageable(facts: &Facts, i: usize) -> Option<bool> {
    let kinds = [facts.int_arg(i, "srcKind"), facts.int_arg(i, "dstKind")];
    if kinds.iter().any(Option::is_some) {
        return Some(kinds.contains(&Some(0)));
    }
    let name = facts.name(i);
    name.contains('(').then(|| name.contains("Pageable"))
}

fn check(facts: &Facts, out: &mut Out) {
    let trace = facts.trace();
    let mut unknown = false;
    let copies: Vec<(usize, usize)> = super::launched_by_api(facts, &super::COPIES)
        .into_iter()
        .filter_map(|(i, call)| {
            let name = facts.name(call);
            if !(name.contains("Memcpy") && name.contains("Async")) {
                return None;
            }
            match pageable(facts, i) {
                Some(true) => Some((i, call)),
                Some(false) => None,
                None => {
                    unknown = true;
                    None
                }
            }
        })
        .collect();
    if unknown {
        out.not_checked(
            RULE.name,
            "some copies do not say which memory they copy from (no srcKind/dstKind, no \
             kind in the name)",
        );
    }
    let s = &trace.slices;
    for (source, pairs) in pairs_by_source(facts, &copies) {
        let rows: Vec<usize> = pairs.iter().map(|c| c.0).collect();
        let calls: Vec<usize> = pairs.iter().map(|c| c.1).collect();
        let blocked: i64 = calls.iter().map(|&c| s.dur[c]).sum();
        let mut f = Finding::of(
            &RULE,
            facts.label(source, None),
            format!(
                "{} asynchronous copies from pageable memory run synchronously",
                rows.len()
            ),
        )
        .saving(facts, source, blocked);
        f.severity = Severity::of_share(f.saving_pct, 3.0, 15.0);
        f.evidence.push(format!(
            "{} in their calls, {} copying",
            time(blocked),
            time(rows.iter().map(|&i| s.dur[i]).sum())
        ));
        f.fix = "copy from pinned memory (cudaMallocHost / cudaHostRegister; PyTorch: \
                 DataLoader(pin_memory=True) and tensor.pin_memory())"
            .to_string();
        f.more = format!("opscope gpu {}", facts.files());
        for (k, v) in [
            ("copies", rows.len() as f64),
            ("blocked_ns", blocked as f64),
        ] {
            f.figures.insert(k, v);
        }
        out.finding(f);
    }
}
