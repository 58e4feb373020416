//! DataParallel instead of DistributedDataParallel: PyTorch's profiler plugin advises
//! DDP when `DataParallel` runs over more than one device (its `DataParallel.forward`
//! range, which `torch.nn.DataParallel` records, and kernels on two or more devices of
//! one process): one process drives every GPU, replicating the model each step and
//! gathering on the first device, where DDP overlaps an all-reduce with the backward.

use opscope_model::SliceKind;

use super::{sources_of, time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "data_parallel",
    anchor: "PyTorch profiler plugin (DataParallel with > 1 device)",
    about: "torch.nn.DataParallel driving several GPUs from one process",
    needs_device: true,
    check,
};

fn check(facts: &Facts, out: &mut Out) {
    let s = &facts.trace().slices;
    let ranges = facts.named(&[SliceKind::Annotation, SliceKind::Op], |n| {
        n == "DataParallel.forward"
    });
    for (source, rows) in sources_of(facts, &ranges) {
        let devices: Vec<String> = facts
            .device_work()
            .iter()
            .filter(|w| w.source == source && w.device.is_some())
            .map(|w| w.label.clone())
            .collect();
        if devices.len() < 2 {
            continue;
        }
        let spent: i64 = rows.iter().map(|&i| s.dur[i]).sum();
        let mut f = Finding::of(
            &RULE,
            facts.label(source, None),
            format!(
                "DataParallel drives {} devices from one process",
                devices.len()
            ),
        );
        f.severity = Severity::Medium;
        f.evidence.push(format!(
            "{} DataParallel.forward ranges, {} in them; devices: {}",
            rows.len(),
            time(spent),
            devices.join(", ")
        ));
        f.fix = "use DistributedDataParallel, one process per GPU (torchrun \
                 --nproc-per-node N): its all-reduce overlaps the backward and no device \
                 gathers the outputs"
            .to_string();
        f.more = format!("opscope gpu {}", facts.files());
        f.figures.insert("devices", devices.len() as f64);
        f.figures.insert("ranges", rows.len() as f64);
        out.finding(f);
    }
}
