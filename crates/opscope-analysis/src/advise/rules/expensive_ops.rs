//! The most expensive op types: tfprof's ExpensiveOperationChecker lists the top 3 op
//! types by time (host and accelerator), each with its share; where to look first, not
//! a fault, so its finding is information. Only where a framework's ops are in the
//! trace.

use super::{time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "expensive_ops",
    anchor: "tfprof ExpensiveOperationChecker (top 3 op types)",
    about: "the op types that take the most time",
    check,
};

fn check(facts: &Facts, out: &mut Out) {
    // A framework's ops: a program of CUDA calls alone has no op types to rank.
    let s = &facts.trace().slices;
    if !(0..s.len()).any(|i| s.kind(i) == opscope_model::SliceKind::Op) {
        return;
    }
    // Ops nest (PyTorch's `aten::linear` around `aten::addmm`): an op type's own time
    // (host self time and its device work) is what it costs, and the shares add up.
    let mut rows = facts.op_rows().to_vec();
    let own = |r: &crate::op_stats::OpRow| r.self_cpu_ns + r.accelerator_ns;
    // Steps are no op type (a recording's step ranges reach op_stats as ranges).
    let steps: hashbrown::HashSet<&str> = (0..s.len())
        .filter(|&i| s.kind(i) == opscope_model::SliceKind::Step)
        .map(|i| facts.name(i))
        .collect();
    rows.retain(|r| !steps.contains(r.name.as_str()) && !r.name.starts_with("ProfilerStep#"));
    let total: i64 = rows.iter().map(own).sum();
    if total <= 0 {
        return;
    }
    rows.sort_by_key(|r| std::cmp::Reverse(own(r)));
    let top: Vec<String> = rows
        .iter()
        .take(3)
        .map(|r| {
            format!(
                "{} {:.1} % ({} host, {} device)",
                r.name,
                100.0 * own(r) as f64 / total as f64,
                time(r.self_cpu_ns),
                time(r.accelerator_ns)
            )
        })
        .collect();
    let mut f = Finding::of(&RULE, facts.files(), format!("most time in {}", top[0]));
    f.severity = Severity::Info;
    f.evidence = top;
    f.fix = "start with these ops: their shapes, their kernels, whether they can be fused \
             or run in lower precision"
        .to_string();
    f.more = format!("opscope stats op {}", facts.files());
    out.finding(f);
}
