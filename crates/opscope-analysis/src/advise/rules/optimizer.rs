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
    needs_device: false,
    check,
};

const MIN_UPDATES: usize = 4;

const UPDATES: [&str; 5] = [
    "aten::add_",
    "aten::mul_",
    "aten::addcmul_",
    "aten::addcdiv_",
    "aten::lerp_",
];

/// Whether slice `at` (or [`NONE`](opscope_model::NONE)) is a per-tensor update: an
/// update inside another counts once.
fn is_update(facts: &Facts, at: u32) -> bool {
    at != opscope_model::NONE && UPDATES.contains(&facts.name(at as usize))
}

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
        // The single-tensor steps, and the time of their per-tensor updates: what a
        // multi-tensor implementation replaces (its few ops take time too, so this
        // bounds the saving from above).
        let (mut single, mut updates_ns) = (Vec::new(), 0i64);
        for &i in &rows {
            if facts.name(i).starts_with("_single_tensor_") {
                single.push(i);
                updates_ns += s.dur[i];
                continue;
            }
            // The ops inside this range on its thread.
            let (a, z, track) = (s.ts[i], s.end(i), s.track[i]);
            // A track's slices are in start order: the range's are found by search.
            let range = trace.track_slices(opscope_model::TrackId(track));
            let from = range.start + s.ts[range.clone()].partition_point(|&t| t < a);
            let to = range.start + s.ts[range.clone()].partition_point(|&t| t < z);
            let (mut multi, mut updates, mut spent) = (false, 0usize, 0i64);
            for j in from..to {
                if j == i || s.kind(j) != SliceKind::Op {
                    continue;
                }
                let n = facts.name(j);
                multi |= n.contains("_foreach_") || n.contains("_fused_");
                if UPDATES.contains(&n) && !is_update(facts, s.parent[j]) {
                    updates += 1;
                    spent += s.dur[j];
                }
            }
            if !multi && updates >= MIN_UPDATES {
                single.push(i);
                updates_ns += spent;
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
        .saving(facts, source, updates_ns);
        f.severity = Severity::of_share(f.saving_pct, 3.0, 15.0);
        f.evidence.push(format!(
            "{} optimizer steps ({}) with no multi-tensor op, {} in them, {} of it in \
             per-tensor updates",
            single.len(),
            facts.name(single[0]),
            time(spent),
            time(updates_ns)
        ));
        let mut classes: Vec<&str> = single
            .iter()
            .filter_map(|&i| optimizer_class(facts.name(i)))
            .collect();
        classes.dedup();
        f.fix = fix(&classes);
        f.more = format!("opscope stats op {}", facts.files());
        f.figures.insert("steps", single.len() as f64);
        out.finding(f);
    }
}

/// The optimizer class a step's name says: `Optimizer.step#SGD.step` (torch's range)
/// or `_single_tensor_adamw` (its Python frame).
fn optimizer_class(name: &str) -> Option<&str> {
    if let Some(class) = name
        .strip_prefix("Optimizer.step#")
        .and_then(|rest| rest.strip_suffix(".step"))
    {
        return Some(class);
    }
    let function = name.strip_prefix("_single_tensor_")?;
    // torch.optim's functions by class (`_single_tensor_<lowercase class>`).
    const CLASSES: [&str; 11] = [
        "Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam", "ASGD",
        "Adadelta", "Rprop",
    ];
    let function = function
        .split(|c: char| !c.is_ascii_alphanumeric())
        .next()?;
    CLASSES
        .into_iter()
        .find(|c| c.eq_ignore_ascii_case(function))
}

/// What to change, for the classes found (`SGD`): the multi-tensor implementation, and
/// the fused one where torch has it (Adam, AdamW, SGD, Adagrad).
fn fix(classes: &[&str]) -> String {
    let Some(&class) = classes.first() else {
        return "use the multi-tensor or fused implementation of the optimizer: \
                foreach=True or fused=True"
            .to_string();
    };
    let fused = ["Adam", "AdamW", "SGD", "Adagrad"].contains(&class);
    let mut fix =
        format!("use the multi-tensor implementation: torch.optim.{class}(..., foreach=True)");
    if fused {
        fix.push_str(", or the fused one: fused=True");
    }
    if classes.len() > 1 {
        fix.push_str(&format!(" (also for {})", classes[1..].join(", ")));
    }
    fix
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fix names the optimizer the program uses: it said `torch.optim.AdamW` for
    /// every optimizer (a fresh program's SGD among them).
    #[test]
    fn the_fix_names_the_programs_optimizer() {
        assert_eq!(optimizer_class("Optimizer.step#SGD.step"), Some("SGD"));
        assert_eq!(optimizer_class("_single_tensor_adamw"), Some("AdamW"));
        assert_eq!(
            optimizer_class("_single_tensor_rmsprop (torch/optim/rmsprop.py:300)"),
            Some("RMSprop")
        );
        assert_eq!(optimizer_class("aten::add_"), None);
        assert_eq!(
            fix(&["SGD"]),
            "use the multi-tensor implementation: torch.optim.SGD(..., foreach=True), or the \
             fused one: fused=True"
        );
        assert_eq!(
            fix(&["RMSprop"]),
            "use the multi-tensor implementation: torch.optim.RMSprop(..., foreach=True)"
        );
        assert!(fix(&[]).contains("foreach=True"));
    }
}
