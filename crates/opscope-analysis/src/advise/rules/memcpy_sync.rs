//! Synchronous copies: Nsight Systems' expert rule `cuda_memcpy_sync` — copies whose
//! call blocks the host (a `cudaMemcpy*` without `Async`), leaving out copies within one
//! device and host-to-device copies of 64 KB or less (its recipe's README).

use opscope_model::{CopyDirection, SliceKind};

use super::{pairs_by_source, time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "memcpy_sync",
    anchor: "Nsight Systems expert rule cuda_memcpy_sync",
    about: "copies whose call blocks the host",
    needs_device: true,
    check,
};

const SMALL_H2D: i64 = 64 * 1024;

/// The copies the rule reports: with their launching call.
pub fn sync_copies(facts: &Facts) -> Vec<(usize, usize)> {
    let trace = facts.trace();
    super::launched_by_api(facts, &super::COPIES)
        .into_iter()
        .filter_map(|(i, call)| {
            let name = facts.name(call).to_ascii_lowercase();
            if !name.contains("memcpy") || name.contains("async") {
                return None;
            }
            match trace.slices.kind(i) {
                SliceKind::Memcpy(CopyDirection::D2D) => None,
                SliceKind::Memcpy(CopyDirection::H2D)
                    if facts.int_arg(i, "bytes").is_some_and(|b| b <= SMALL_H2D) =>
                {
                    None
                }
                _ => Some((i, call)),
            }
        })
        .collect()
}

fn check(facts: &Facts, out: &mut Out) {
    let copies = sync_copies(facts);
    let s = &facts.trace().slices;
    for (source, pairs) in pairs_by_source(facts, &copies) {
        let rows: Vec<usize> = pairs.iter().map(|c| c.0).collect();
        let calls: Vec<usize> = pairs.iter().map(|c| c.1).collect();
        let blocked: i64 = calls.iter().map(|&c| s.dur[c]).sum();
        let bytes: i64 = rows.iter().filter_map(|&i| facts.int_arg(i, "bytes")).sum();
        let mut f = Finding::of(
            &RULE,
            facts.label(source, None),
            format!("{} synchronous copies block the host", rows.len()),
        )
        .saving(facts, source, blocked);
        f.severity = Severity::of_share(f.saving_pct, 3.0, 15.0);
        f.evidence.push(format!(
            "{} in the copying calls, {} copied ({:.1} MB)",
            time(blocked),
            time(rows.iter().map(|&i| s.dur[i]).sum()),
            bytes as f64 / 1e6
        ));
        f.fix = "use cudaMemcpyAsync on a stream (from pinned memory) and synchronise on an \
                 event where the result is needed (PyTorch: tensor.to(device, non_blocking=True) \
                 with pin_memory)"
            .to_string();
        f.more = format!("opscope gpu {}", facts.files());
        for (k, v) in [
            ("copies", rows.len() as f64),
            ("blocked_ns", blocked as f64),
            ("bytes", bytes as f64),
        ] {
            f.figures.insert(k, v);
        }
        out.finding(f);
    }
}
