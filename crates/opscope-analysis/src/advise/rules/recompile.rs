//! Compilation inside the training loop: JAX retracing and XLA recompiling a function
//! whose shapes or static arguments change, `torch.compile` recompiling after a guard
//! fails. Compilation in the first step is expected; compilation in later steps is
//! time the loop loses every time it happens.

use opscope_model::SliceKind;

use super::{sources_of, time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "recompile",
    anchor: "JAX and torch.compile recompilation (compilation after the first step)",
    about: "compilation inside the training loop after its first step",
    needs_device: false,
    check,
};

fn check(facts: &Facts, out: &mut Out) {
    let trace = facts.trace();
    let s = &trace.slices;
    // The outermost compile slices only.
    let compiles: Vec<usize> = facts
        .of_kinds(&[SliceKind::Compile])
        .into_iter()
        .filter(|&i| {
            let p = s.parent[i];
            p == opscope_model::NONE || s.kind(p as usize) != SliceKind::Compile
        })
        .collect();
    for (source, rows) in sources_of(facts, &compiles) {
        let Some(steps) = facts.steps_of(source, 2) else {
            continue;
        };
        let first_end = steps.steps[0].start_ns + steps.steps[0].dur_ns;
        let last_end = steps
            .steps
            .iter()
            .map(|x| x.start_ns + x.dur_ns)
            .max()
            .unwrap_or(first_end);
        let late: Vec<usize> = rows
            .into_iter()
            .filter(|&i| s.ts[i] >= first_end && s.ts[i] < last_end)
            .collect();
        if late.is_empty() {
            continue;
        }
        // Compilations run on several threads at once: their union is the time lost.
        let spent = crate::intervals::IntervalSet::from_spans(
            late.iter().map(|&i| (s.ts[i], s.end(i))).collect(),
        )
        .total();
        let mut with: Vec<usize> = late
            .iter()
            .filter_map(|&i| super::step_at(&steps.steps, s.ts[i]))
            .filter(|&k| k > 0)
            .collect();
        with.sort_unstable();
        with.dedup();
        let in_steps = with.len();
        let mut f = Finding::of(
            &RULE,
            facts.label(source, None),
            format!(
                "the program compiles again in {in_steps} of {} steps after the first",
                steps.steps.len() - 1
            ),
        )
        .saving(facts, source, spent);
        f.severity = Severity::of_share(f.saving_pct, 3.0, 15.0);
        let mut names: Vec<&str> = late.iter().map(|&i| facts.name(i)).collect();
        names.sort_unstable();
        names.dedup();
        names.truncate(3);
        f.evidence.push(format!(
            "{} compiling after the first step, in {} compile ranges ({})",
            time(spent),
            late.len(),
            names.join(", ")
        ));
        f.fix = "keep shapes and static arguments the same from step to step (pad batches \
                 to fixed sizes, mark changing arguments dynamic); JAX: \
                 jax.config.update(\"jax_explain_cache_misses\", True) names the cause; \
                 torch.compile: TORCH_LOGS=recompiles"
            .to_string();
        f.more = format!("opscope view {}", facts.files());
        let first = late[0];
        f.span = Some([s.ts[first], s.end(first)]);
        for (k, v) in [
            ("compilations", late.len() as f64),
            ("steps_with", in_steps as f64),
        ] {
            f.figures.insert(k, v);
        }
        out.finding(f);
    }
}
