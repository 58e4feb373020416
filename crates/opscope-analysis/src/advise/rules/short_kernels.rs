//! Kernels that cost more to launch than to run: HTA's kernel launch statistics
//! (`cuda_kernel_analysis.py`, `runtime_cutoff=50`): a kernel whose launch call takes
//! at most 50 µs and runs for less than its launch is "short". Reported when short
//! kernels are at least half of the launched kernels and their launches take 3 % of
//! the time looked at or more (XProf's kernel-launch threshold); the saving is the
//! launch time beyond their run time, which fusing or a CUDA graph removes at most.

use super::{time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "short_kernels",
    anchor: "HTA kernel launch statistics (CPU <= 50 us, GPU < CPU)",
    about: "kernels that run for less time than their launch takes",
    needs_device: true,
    check,
};

const RUNTIME_CUTOFF_NS: i64 = 50_000;

fn check(facts: &Facts, out: &mut Out) {
    let s = &facts.trace().slices;
    let launches = facts.names_where(|n| crate::critical_path::LAUNCHES.contains(&n));
    for work in facts.device_work() {
        let (mut launched, mut short, mut launch_ns, mut excess) = (0usize, 0usize, 0i64, 0i64);
        for (i, call) in super::hta_launches(facts, work, &launches) {
            launched += 1;
            let (cpu, gpu) = (s.dur[call], s.dur[i]);
            if cpu <= RUNTIME_CUTOFF_NS && gpu < cpu {
                short += 1;
                launch_ns += cpu;
                excess += cpu - gpu;
            }
        }
        if launched == 0 || short * 2 < launched {
            continue;
        }
        let pct = facts.share(work.source, launch_ns);
        if pct < 3.0 {
            continue;
        }
        let mut f = Finding::of(
            &RULE,
            &work.label,
            format!("{short} of {launched} kernels run shorter than their launch takes"),
        )
        .saving(facts, work.source, excess);
        f.severity = Severity::of_share(pct, 3.0, 15.0);
        f.evidence.push(format!(
            "{} launching them ({pct:.1} % of the time looked at), {} more than they run",
            time(launch_ns),
            time(excess)
        ));
        f.fix = "fuse small kernels (torch.compile, XLA, a fused optimizer) or capture the \
                 step as a CUDA graph so one launch replays them all"
            .to_string();
        f.more = format!("opscope gpu {}", facts.files());
        for (k, v) in [("short", short as f64), ("launched", launched as f64)] {
            f.figures.insert(k, v);
        }
        out.finding(f);
    }
}
