//! Device memory near its limit: PyTorch's profiler plugin warns when the peak of
//! device memory in use passes 90 % of the device's total memory
//! (`totalGlobalMem`): one more tensor and the step fails, and the caching allocator
//! spends time freeing and retrying.

use super::{Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "peak_memory",
    anchor: "PyTorch profiler plugin (peak memory > 90 % of the device)",
    about: "device memory in use near the device's total",
    needs_device: true,
    check,
};

const THRESHOLD: f64 = 0.9;

fn check(facts: &Facts, out: &mut Out) {
    let trace = facts.trace();
    let reports = crate::memory::memory_over(
        &facts.context(),
        &crate::memory::MemoryOptions::default(),
        &facts.steps().sources,
    );
    for r in reports.iter().filter(|r| r.device_type == Some(1)) {
        let Some(source) = facts.source_of_file(&r.file) else {
            continue;
        };
        let id = r.device_id.unwrap_or(0) as u32;
        let props = facts
            .device_props()
            .iter()
            .find(|p| p.source == source && p.id == id);
        let Some(total) = props.and_then(|p| p.total_memory) else {
            out.not_checked(
                RULE.name,
                "the trace does not give the devices' total memory (Kineto's deviceProperties)",
            );
            continue;
        };
        let peak = r.peak_reserved.unwrap_or(0).max(r.peak_in_use);
        let share = peak as f64 / total as f64;
        if share <= THRESHOLD {
            continue;
        }
        let mut f = Finding::of(
            &RULE,
            format!("{} {}", facts.label(source, None), r.allocator),
            format!(
                "device memory peaks at {:.0} % of the device",
                100.0 * share
            ),
        );
        f.severity = Severity::High;
        f.evidence.push(format!(
            "peak {:.2} GiB of {:.2} GiB{}",
            peak as f64 / (1u64 << 30) as f64,
            total as f64 / (1u64 << 30) as f64,
            if r.peak_reserved.is_some() {
                " (reserved by the caching allocator)"
            } else {
                ""
            }
        ));
        f.fix = "free memory: activation checkpointing, mixed precision, a smaller batch \
                 with gradient accumulation, or sharding (FSDP, ZeRO)"
            .to_string();
        f.more = format!("opscope memory {}", facts.files());
        f.span = Some([r.peak_at_ns, r.peak_at_ns]);
        let _ = trace;
        for (k, v) in [("peak_bytes", peak as f64), ("total_bytes", total as f64)] {
            f.figures.insert(k, v);
        }
        out.finding(f);
    }
}
