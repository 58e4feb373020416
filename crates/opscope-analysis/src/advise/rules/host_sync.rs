//! The host waiting for the device inside every step: `.item()`, `.cpu()`, `print` of a
//! tensor or a `nonzero` make PyTorch synchronise (`aten::_local_scalar_dense`, a
//! blocking device-to-host copy, a stream synchronisation) — the device's queue runs
//! dry at each. Reported when at least 90 % of the steps synchronise; the saving is the
//! time the host spent blocked in them.

use opscope_model::SliceKind;

use super::{sources_of, time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "host_sync",
    anchor: "PyTorch performance tuning guide (avoid unnecessary CPU-GPU synchronization)",
    about: "a synchronisation of the host with the device in every step",
    needs_device: true,
    check,
};

/// Whether a name makes the host wait for the device: PyTorch's scalar read, the
/// synchronisation calls, a blocking copy.
fn is_sync_name(name: &str) -> bool {
    name == "aten::_local_scalar_dense"
        || super::sync_apis::is_sync_api(name)
        || (name.starts_with("cudaMemcpy") && !name.contains("Async"))
}

fn check(facts: &Facts, out: &mut Out) {
    if facts.device_work().is_empty() {
        return;
    }
    let s = &facts.trace().slices;
    let names = facts.names_where(is_sync_name);
    let mut syncs: Vec<usize> = facts
        .of_kinds(&[SliceKind::Op, SliceKind::Runtime, SliceKind::Driver])
        .into_iter()
        .filter(|&i| names[s.name[i].0 as usize])
        // The scalar read is an op; a runtime call of that name is no sync.
        .filter(|&i| (s.kind(i) == SliceKind::Op) == (facts.name(i) == "aten::_local_scalar_dense"))
        .collect();
    syncs.sort_unstable();
    let is_sync = |i: usize| names[s.name[i].0 as usize];
    for (source, rows) in sources_of(facts, &syncs) {
        let Some(steps) = facts.steps_of(source, 2) else {
            continue;
        };
        let mut per_step = vec![0usize; steps.steps.len()];
        let mut blocked = 0;
        for &i in &rows {
            // A synchronisation inside another counts once.
            if s.parent[i] != opscope_model::NONE && is_sync(s.parent[i] as usize) {
                continue;
            }
            if let Some(k) = super::step_at(&steps.steps, s.ts[i]) {
                per_step[k] += 1;
                blocked += s.dur[i];
            }
        }
        let with = per_step.iter().filter(|&&n| n > 0).count();
        if (with as f64) < 0.9 * per_step.len() as f64 {
            continue;
        }
        let calls: usize = per_step.iter().sum();
        let mut f = Finding::of(
            &RULE,
            facts.label(source, None),
            format!(
                "the host waits for the device in {with} of {} steps",
                per_step.len()
            ),
        )
        .saving(facts, source, blocked);
        f.severity = Severity::of_share(f.saving_pct, 3.0, 15.0);
        let mut names: Vec<&str> = rows.iter().map(|&i| facts.name(i)).collect();
        names.sort_unstable();
        names.dedup();
        f.evidence.push(format!(
            "{calls} synchronisations ({}), {} blocked",
            names.join(", "),
            time(blocked)
        ));
        f.fix = "keep values on the device inside the loop: no .item(), .cpu(), print() or \
                 bool() of a tensor per step; accumulate metrics on the device and read them \
                 every N steps"
            .to_string();
        f.more = format!("opscope stats op {}", facts.files());
        for (k, v) in [
            ("steps_with", with as f64),
            ("steps", per_step.len() as f64),
            ("calls", calls as f64),
        ] {
            f.figures.insert(k, v);
        }
        out.finding(f);
    }
}
