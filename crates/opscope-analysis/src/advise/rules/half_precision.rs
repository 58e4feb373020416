//! 16-bit compute: XProf's overview page suggests 16-bit ops when less than 10 % of the
//! device's compute time runs in 16 bits. Like XProf, a kernel is 16-bit when its name
//! says so (`half`, `fp16`, and here also `bf16` and the `h884`/`h1688`/`h16816`
//! tensor-core kernels); the share is of computation kernels' time on each device.

use opscope_model::SliceKind;

use super::{Facts, Finding, Out, Rule, Severity};
use crate::gpu::classify::{Classifier, WorkClass};

pub static RULE: Rule = Rule {
    name: "half_precision",
    anchor: "XProf overview page (16-bit share of device compute < 10 %)",
    about: "devices that compute almost nothing in 16-bit precision",
    needs_device: true,
    check,
};

const THRESHOLD_PCT: f64 = 10.0;

pub fn is_16_bit(kernel: &str) -> bool {
    let k = kernel.to_ascii_lowercase();
    [
        "half", "fp16", "bf16", "bfloat16", "f16f16", "h884", "h1688", "h16816", "hgemm",
    ]
    .iter()
    .any(|p| k.contains(p))
}

fn check(facts: &Facts, out: &mut Out) {
    let trace = facts.trace();
    let s = &trace.slices;
    let mut classifier = Classifier::with(trace, Some(facts.correlation()), None);
    let half_names = facts.names_where(is_16_bit);
    for work in facts.device_work() {
        let (mut compute, mut half) = (0i64, 0i64);
        for &i in &work.slices {
            if s.kind(i) != SliceKind::Kernel || classifier.class(i) != WorkClass::Computation {
                continue;
            }
            compute += s.dur[i];
            if half_names[s.name[i].0 as usize] {
                half += s.dur[i];
            }
        }
        if compute == 0 {
            continue;
        }
        let pct = 100.0 * half as f64 / compute as f64;
        if pct >= THRESHOLD_PCT {
            continue;
        }
        let mut f = Finding::of(
            &RULE,
            &work.label,
            format!("{pct:.1} % of the device's compute time runs in 16 bits"),
        );
        f.severity = Severity::Low;
        f.evidence.push(format!(
            "{} of {} of computation kernels' time in 16-bit kernels",
            super::time(half),
            super::time(compute)
        ));
        f.fix = "train in mixed precision (torch.autocast with bf16/fp16, \
                 tf.keras.mixed_precision.set_global_policy(\"mixed_bfloat16\"), JAX: bf16 \
                 params and activations): 16-bit math is several times faster on tensor cores"
            .to_string();
        f.more = format!("opscope stats kernel {}", facts.files());
        f.figures.insert("pct_16_bit", pct);
        f.figures.insert("compute_ns", compute as f64);
        out.finding(f);
    }
}
