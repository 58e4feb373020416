//! Matrix work that could run on tensor cores: PyTorch's profiler plugin recommends
//! AMP when a device of compute capability 7.0 or more ran no tensor-core kernel while
//! tensor-core-eligible ops (matrix multiplications and convolutions) ran kernels;
//! torch's `FP32MatMulPattern` does the same for fp32 matmuls on sm_80 (TF32). A kernel
//! uses tensor cores when its name says so (`884`, `1688`, `16816`, `hmma`, `xmma`,
//! `tensorop`, `wmma`, …, the plugin's list of patterns).

use opscope_model::SliceKind;

use super::{time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "tensor_cores",
    anchor: "PyTorch profiler plugin (TC-eligible ops, no tensor-core kernels, CC >= 7.0)",
    about: "matrix multiplications and convolutions not using tensor cores",
    needs_device: true,
    check,
};

const TENSOR_CORE_PATTERNS: [&str; 14] = [
    "884", "1688", "16816", "hmma", "xmma", "tensorop", "wmma", "_tc_", "s161616", "gmma", "bf16",
    "f16f16", "tf32", "h1688",
];

pub fn uses_tensor_cores(kernel: &str) -> bool {
    let k = kernel.to_ascii_lowercase();
    TENSOR_CORE_PATTERNS.iter().any(|p| k.contains(p))
}

/// Whether an op is one tensor cores could run.
pub fn is_eligible_op(op: &str) -> bool {
    let op = op.strip_prefix("aten::").unwrap_or(op);
    matches!(
        op,
        "mm" | "addmm" | "bmm" | "baddbmm" | "matmul" | "linear" | "addmv" | "mv" | "einsum"
    ) || op.starts_with("conv")
        || op.starts_with("cudnn_convolution")
        || op.starts_with("_convolution")
        || op == "convolution_backward"
}

fn check(facts: &Facts, out: &mut Out) {
    let trace = facts.trace();
    let s = &trace.slices;
    let correlation = facts.correlation();
    let tensor_core = facts.names_where(uses_tensor_cores);
    let eligible_op = facts.names_where(is_eligible_op);
    for work in facts.device_work() {
        let (mut tc, mut eligible, mut eligible_n) = (0i64, 0i64, 0usize);
        for &i in &work.slices {
            if s.kind(i) != SliceKind::Kernel {
                continue;
            }
            if tensor_core[s.name[i].0 as usize] {
                tc += s.dur[i];
                continue;
            }
            let Some(op) = correlation.op_of(trace, i) else {
                continue;
            };
            // The op or any op around it (`aten::linear` → `aten::addmm`).
            let mut at = op as u32;
            while at != opscope_model::NONE {
                if eligible_op[s.name[at as usize].0 as usize] {
                    eligible += s.dur[i];
                    eligible_n += 1;
                    break;
                }
                at = s.parent[at as usize];
            }
        }
        if eligible == 0 || tc > 0 {
            continue;
        }
        let Some(props) = facts.props_of(work.source, work.device) else {
            out.not_checked(
                RULE.name,
                "the trace does not give the devices' compute capability (Kineto's \
                 deviceProperties)",
            );
            continue;
        };
        let Some((major, minor)) = props.compute else {
            continue;
        };
        // Compute capability is NVIDIA's numbering; AMD's Kineto traces put the gfx
        // version there, and its matrix cores run kernels named otherwise.
        let vendor = props.name.to_ascii_lowercase();
        if ["amd", "radeon", "instinct", "gfx"]
            .iter()
            .any(|v| vendor.contains(v))
        {
            out.not_checked(
                RULE.name,
                "an AMD device: matrix-core kernels are not recognised by name yet",
            );
            continue;
        }
        if major < 7 {
            continue;
        }
        let mut f = Finding::of(
            &RULE,
            &work.label,
            format!(
                "{eligible_n} matrix kernels ran without tensor cores on a {} (compute {major}.{minor})",
                props.name
            ),
        )
        // Tensor cores' peak is 8× fp32's (V100 fp16: 125 against 15.7 TFLOP/s; A100
        // TF32: 156 against 19.5): the kernels' time falls by 7/8 at most.
        .saving(facts, work.source, eligible * 7 / 8);
        f.severity = Severity::of_share(f.saving_pct, 5.0, 20.0);
        f.evidence.push(format!(
            "{} in kernels of matrix multiplications and convolutions, none on tensor cores \
             (at their 8× peak, 7/8 of it saved at most)",
            time(eligible)
        ));
        f.fix = if major >= 8 {
            "run them in bf16/fp16 with automatic mixed precision (torch.autocast) or allow \
             TF32 (torch.backends.cuda.matmul.allow_tf32 = True, \
             torch.set_float32_matmul_precision(\"high\"))"
        } else {
            "run them in fp16 with automatic mixed precision (torch.autocast, \
             torch.cuda.amp.GradScaler)"
        }
        .to_string();
        f.more = format!("opscope stats kernel {}", facts.files());
        for (k, v) in [
            ("eligible_ns", eligible as f64),
            ("kernels", eligible_n as f64),
        ] {
            f.figures.insert(k, v);
        }
        out.finding(f);
    }
}
