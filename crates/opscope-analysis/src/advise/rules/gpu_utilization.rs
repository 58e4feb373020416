//! Low accelerator utilization: tfprof's AcceleratorUtilizationChecker and the PyTorch
//! profiler plugin's "GPU utilization < 0.5" both flag a device busy less than half of
//! its span (tfprof: Σ accelerator time ÷ (latest end − earliest start); the plugin:
//! busy time ÷ the profiled span). Here busy is the union of the device's work over
//! the span from its first work to its last, as `opscope gpu` shows it.

use super::{time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "gpu_utilization",
    anchor: "tfprof AcceleratorUtilizationChecker; PyTorch profiler plugin (utilization < 0.5)",
    about: "a device busy less than half of its span",
    needs_device: true,
    check,
};

const LOW: f64 = 0.5;

fn check(facts: &Facts, out: &mut Out) {
    for rank in &facts.gpu().ranks {
        let Some(source) = facts.source_of_file(&rank.file) else {
            continue;
        };
        let t = &rank.temporal;
        if t.span_ns <= 0 {
            continue;
        }
        let utilization = t.busy_ns as f64 / t.span_ns as f64;
        if utilization >= LOW {
            continue;
        }
        let scope = match &rank.device {
            Some(d) => format!("{} {d}", facts.label(source, None)),
            None => facts.label(source, None),
        };
        let (mut host_wait, mut kernel_wait, mut other) = (0, 0, 0);
        for s in &rank.streams {
            host_wait += s.idle.host_wait.time_ns;
            kernel_wait += s.idle.kernel_wait.time_ns;
            other += s.idle.other.time_ns;
        }
        let mut f = Finding::of(
            &RULE,
            scope,
            format!(
                "the device is busy {:.0} % of its span",
                100.0 * utilization
            ),
        )
        .saving(facts, source, t.idle_ns);
        f.severity = if utilization <= 0.2 {
            Severity::High
        } else {
            Severity::Medium
        };
        f.evidence = vec![
            format!(
                "busy {} of {} (utilization {utilization:.2}; low under {LOW})",
                time(t.busy_ns),
                time(t.span_ns)
            ),
            format!(
                "streams' idle time: host wait {}, kernel wait {}, other {}",
                time(host_wait),
                time(kernel_wait),
                time(other)
            ),
        ];
        f.fix = if host_wait >= kernel_wait.max(other) {
            "work reaches the device late: find what the host does between launches \
             (input pipeline, Python, synchronisation); raise the batch size"
                .to_string()
        } else {
            "many short gaps between kernels: fuse kernels or capture the step in a CUDA \
             graph (torch.compile mode=\"reduce-overhead\"); raise the batch size"
                .to_string()
        };
        f.more = format!("opscope gpu {}", facts.files());
        for (k, v) in [
            ("busy_ns", t.busy_ns as f64),
            ("span_ns", t.span_ns as f64),
            ("utilization", utilization),
        ] {
            f.figures.insert(k, v);
        }
        out.finding(f);
    }
}
