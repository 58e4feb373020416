//! Communication the step waits for: PyTorch's profiler plugin flags communication
//! over 10 % of the step time; only communication that computation does not overlap
//! costs step time, so the saving is that part (`opscope gpu`'s overlap).

use super::{time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "communication",
    anchor: "PyTorch profiler plugin (communication > 10 % of the step)",
    about: "collective communication that computation does not hide",
    needs_device: false,
    check,
};

const THRESHOLD_PCT: f64 = 10.0;

fn check(facts: &Facts, out: &mut Out) {
    for steps in &facts.steps().sources {
        if !steps.on_device || steps.steps.is_empty() {
            continue;
        }
        let Some(source) = facts.source_of_file(&steps.file) else {
            continue;
        };
        let comm: i64 = steps.steps.iter().map(|x| x.communication_ns).sum();
        let pct = facts.share(source, comm);
        if pct <= THRESHOLD_PCT {
            continue;
        }
        let overlap = facts
            .gpu()
            .ranks
            .iter()
            .filter(|r| r.file == steps.file)
            .find_map(|r| r.communication_overlap_pct)
            .unwrap_or(0.0);
        let exposed = (comm as f64 * (1.0 - overlap / 100.0)) as i64;
        let mut f = Finding::of(
            &RULE,
            facts.label(source, None),
            format!(
                "communication is {pct:.1} % of the step time, {:.0} % of it not overlapped",
                100.0 - overlap
            ),
        )
        .saving(facts, source, exposed);
        f.severity = Severity::of_share(facts.share(source, exposed), 3.0, 15.0);
        f.evidence.push(format!(
            "{} of communication in {} steps, {overlap:.0} % overlapped by computation",
            time(comm),
            steps.steps.len()
        ));
        f.fix = "overlap it (DDP gradient bucketing, FSDP prefetch), send less (gradient \
                 compression, bf16 gradients) or less often (gradient accumulation, a bigger \
                 batch)"
            .to_string();
        f.more = format!("opscope gpu {}", facts.files());
        for (k, v) in [("communication_ns", comm as f64), ("overlap_pct", overlap)] {
            f.figures.insert(k, v);
        }
        out.finding(f);
    }
}
