//! Single-tensor optimizers: torch's `OptimizerSingleTensorPattern` flags
//! `_single_tensor_{adam,sgd,adamw}`, which updates each parameter with its own
//! kernels; the `foreach` (multi-tensor) or `fused` implementations update all of them
//! in a few launches. Without Python frames in the trace, an optimizer step range
//! (`Optimizer.step#…`) whose ops include no `_foreach_` or `_fused_` op and at least
//! 4 element-wise updates is one.

use opscope_model::SliceKind;

use super::{sources_of, time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "optimizer",
    anchor: "torch.profiler _pattern_matcher OptimizerSingleTensorPattern",
    about: "optimizers that update parameters one tensor at a time",
    check,
};

const MIN_UPDATES: usize = 4;

fn check(facts: &Facts, out: &mut Out) {
    let trace = facts.trace();
    let s = &trace.slices;
    let mut steps = facts.named(&[SliceKind::Annotation, SliceKind::Op], |n| {
        n.starts_with("Optimizer.step#")
    });
    steps.extend(facts.named(&SliceKind::ALL, |n| n.starts_with("_single_tensor_")));
    steps.sort_unstable();
    steps.dedup();
    for (source, rows) in sources_of(facts, &steps) {
        let mut single = Vec::new();
        for &i in &rows {
            if facts.name(i).starts_with("_single_tensor_") {
                single.push(i);
                continue;
            }
            // The ops inside this range on its thread.
            let (a, z, track) = (s.ts[i], s.end(i), s.track[i]);
            // A track's slices are in start order: the range's are found by search.
            let range = trace.track_slices(opscope_model::TrackId(track));
            let from = range.start + s.ts[range.clone()].partition_point(|&t| t < a);
            let to = range.start + s.ts[range.clone()].partition_point(|&t| t < z);
            let (mut multi, mut updates) = (false, 0usize);
            for j in from..to {
                if j == i || s.kind(j) != SliceKind::Op {
                    continue;
                }
                let n = facts.name(j);
                multi |= n.contains("_foreach_") || n.contains("_fused_");
                if matches!(
                    n,
                    "aten::add_"
                        | "aten::mul_"
                        | "aten::addcmul_"
                        | "aten::addcdiv_"
                        | "aten::lerp_"
                ) {
                    updates += 1;
                }
            }
            if !multi && updates >= MIN_UPDATES {
                single.push(i);
            }
        }
        if single.is_empty() {
            continue;
        }
        let spent: i64 = single.iter().map(|&i| s.dur[i]).sum();
        let mut f = Finding::of(
            &RULE,
            facts.label(source, None),
            "the optimizer updates parameters one tensor at a time".to_string(),
        )
        .saving(facts, source, spent);
        f.severity = Severity::of_share(f.saving_pct, 3.0, 15.0);
        f.evidence.push(format!(
            "{} optimizer steps ({}) with no multi-tensor op, {} in them",
            single.len(),
            facts.name(single[0]),
            time(spent)
        ));
        f.fix = "use the multi-tensor or fused implementation: torch.optim.AdamW(..., \
                 foreach=True) or fused=True"
            .to_string();
        f.more = format!("opscope stats op {}", facts.files());
        f.figures.insert("steps", single.len() as f64);
        out.finding(f);
    }
}
