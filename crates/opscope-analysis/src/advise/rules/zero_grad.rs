//! Gradients zeroed instead of dropped: torch's `GradNotSetToNonePattern` flags
//! `zero_grad` ranges that run `aten::zero_` (not inside `aten::zeros`): with
//! `set_to_none=True` (PyTorch 2's default) the gradients are freed, not written.

use opscope_model::SliceKind;

use super::{sources_of, time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "zero_grad",
    anchor: "torch.profiler _pattern_matcher GradNotSetToNonePattern",
    about: "zero_grad writing zeros into gradients instead of dropping them",
    needs_device: false,
    check,
};

fn check(facts: &Facts, out: &mut Out) {
    let trace = facts.trace();
    let s = &trace.slices;
    let zeros = facts.named(&[SliceKind::Op], |n| n == "aten::zero_");
    let mut hits = Vec::new();
    for i in zeros {
        let mut at = s.parent[i];
        let mut under_zero_grad = false;
        while at != opscope_model::NONE {
            let n = facts.name(at as usize);
            if n == "aten::zeros" {
                under_zero_grad = false;
                break;
            }
            if n.contains("zero_grad") {
                under_zero_grad = true;
                break;
            }
            at = s.parent[at as usize];
        }
        if under_zero_grad {
            hits.push(i);
        }
    }
    for (source, rows) in sources_of(facts, &hits) {
        let spent: i64 = rows.iter().map(|&i| s.dur[i]).sum();
        let mut f = Finding::of(
            &RULE,
            facts.label(source, None),
            "zero_grad writes zeros into the gradients".to_string(),
        )
        .saving(facts, source, spent);
        f.severity = Severity::of_share(f.saving_pct, 3.0, 15.0).min(Severity::Medium);
        f.evidence.push(format!(
            "{} aten::zero_ calls under zero_grad, {}",
            rows.len(),
            time(spent)
        ));
        f.fix = "optimizer.zero_grad(set_to_none=True) (the default since PyTorch 2.0)".to_string();
        f.more = format!("opscope stats op {}", facts.files());
        f.figures.insert("calls", rows.len() as f64);
        out.finding(f);
    }
}
