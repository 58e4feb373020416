//! The most expensive op types: tfprof's ExpensiveOperationChecker lists the top 3 op
//! types by time (host and accelerator), each with its share; where to look first, not
//! a fault, so its finding is information. Only where a framework's ops are in the
//! trace.

use super::{time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "expensive_ops",
    anchor: "tfprof ExpensiveOperationChecker (top 3 op types)",
    about: "the op types that take the most time",
    needs_device: false,
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
    // Steps are no op type (a recording's step ranges reach op_stats as ranges), nor
    // are the user ranges that mark them (`train_step_3`, `train_step`): each holds its
    // whole step's time.
    let cx = facts.context();
    let mut steps: hashbrown::HashSet<&str> = (0..s.len())
        .filter(|&i| s.kind(i) == opscope_model::SliceKind::Step)
        .map(|i| facts.name(i))
        .collect();
    steps.extend(cx.step_markers().iter().flatten().map(|b| b.0.as_str()));
    // Nor are the ranges `opscope record` marks around a framework's calls: their own
    // time is the framework's work outside ops (tracing, compiling, waiting).
    // Nor are ranges that are no op anywhere: a runtime's scopes around the ops and its
    // waits (JAX on CPUs: `ThunkExecutor::Execute (wait for completion)`, a third of a
    // fresh program's time, came first), user ranges.
    let op_names: hashbrown::HashSet<&str> = (0..s.len())
        .filter(|&i| {
            matches!(
                s.kind(i),
                opscope_model::SliceKind::Op | opscope_model::SliceKind::Collective
            )
        })
        .map(|i| facts.name(i))
        .collect();
    rows.retain(|r| {
        op_names.contains(r.name.as_str())
            && !steps.contains(r.name.as_str())
            && !r.name.starts_with("ProfilerStep")
            && !crate::steps::is_bootstrap_mark(&r.name)
    });
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

#[cfg(test)]
mod tests {
    use opscope_model::Trace;

    use crate::advise::{advise, AdviseOptions};
    use crate::context::Context;

    /// The user ranges that mark the steps hold each step's whole time: they are no
    /// op type to start with (`train_step` came first, at a third of the time); nor is
    /// the range opscope's bootstrap marks around Keras's train function (it came
    /// first in a fresh Keras program, with its tracing's 1.7 s).
    #[test]
    fn step_markers_are_no_op_type() {
        for marker in ["train_step", "train_step_7"] {
            let mut events = Vec::new();
            for k in 0..4 {
                let ts = 100 * k;
                events.push(format!(
                    r#"{{"ph":"X","cat":"user_annotation","name":"{marker}","pid":1,"tid":1,"ts":{ts},"dur":90}}"#
                ));
                // The range `opscope record` marks around Keras's train function: its
                // own time (tracing, waits) is no op type's.
                events.push(format!(
                    r#"{{"ph":"X","cat":"user_annotation","name":"keras train_function call","pid":1,"tid":1,"ts":{},"dur":85}}"#,
                    ts + 2
                ));
                for (name, at, dur) in [("aten::mm", 5, 50), ("aten::add", 60, 20)] {
                    events.push(format!(
                        r#"{{"ph":"X","cat":"cpu_op","name":"{name}","pid":1,"tid":1,"ts":{},"dur":{dur}}}"#,
                        ts + at
                    ));
                }
            }
            let evidence = top_ops(&events);
            assert!(
                evidence[0].starts_with("aten::mm ") && evidence.len() == 2,
                "{marker}: {evidence:?}"
            );
        }
    }

    /// The evidence of the expensive-ops finding on a Chrome trace of `events`.
    fn top_ops(events: &[String]) -> Vec<String> {
        let json = format!("[{}]", events.join(","));
        let mut trace = Trace::new();
        opscope_formats::chrome::import(json.as_bytes(), "t.json", &mut trace).unwrap();
        let options = AdviseOptions {
            rules: vec!["expensive_ops".into()],
            ..AdviseOptions::default()
        };
        let advice = advise(&Context::new(&trace), &options);
        let finding = advice
            .findings
            .into_iter()
            .find(|f| f.rule == "expensive_ops")
            .expect("a finding");
        finding.evidence
    }

    /// JAX on CPUs, as xprof's trace viewer JSON has it (no categories): XLA's ops on a
    /// pool thread under the runtime's scope, while the caller waits for them. The wait
    /// and the scope are no op types (the wait came first, at 34 % of a fresh
    /// program's time).
    #[test]
    fn a_runtimes_waits_and_scopes_are_no_op_type() {
        let mut events = vec![
            r#"{"ph":"M","pid":7,"name":"process_name","args":{"name":"/host:CPU"}}"#.to_string(),
            r#"{"ph":"M","pid":7,"tid":1,"name":"thread_name","args":{"name":"python"}}"#
                .to_string(),
            r#"{"ph":"M","pid":7,"tid":2,"name":"thread_name","args":{"name":"tf_XLAEigen/5"}}"#
                .to_string(),
        ];
        for k in 0..3 {
            let ts = 1000 * k;
            events.push(format!(
                r#"{{"ph":"X","name":"ThunkExecutor::Execute (wait for completion)","pid":7,"tid":1,"ts":{ts},"dur":900}}"#
            ));
            events.push(format!(
                r#"{{"ph":"X","name":"ThunkExecutor::Execute","pid":7,"tid":2,"ts":{},"dur":890}}"#,
                ts + 5
            ));
            for (name, at, dur) in [("dot.2", 10, 500), ("add_tanh_fusion", 520, 300)] {
                events.push(format!(
                    r#"{{"ph":"X","name":"{name}","pid":7,"tid":2,"ts":{},"dur":{dur},"args":{{"hlo_module":"jit_step","hlo_op":"{name}","run_id":"{k}"}}}}"#,
                    ts + at
                ));
            }
        }
        let evidence = top_ops(&events);
        assert!(
            evidence[0].starts_with("dot.2 ")
                && evidence[1].starts_with("add_tanh_fusion ")
                && evidence.len() == 2,
            "{evidence:?}"
        );
    }
}
