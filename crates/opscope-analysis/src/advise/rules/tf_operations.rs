//! tfprof's OperationChecker: a node named `…BatchNorm…` while no node is a
//! `FusedBatchNorm` ("Maybe use faster FusedBatchNorm instead of BatchNorm"), and an op
//! placed on a GPU with `data_format` NHWC ("Maybe NCHW is faster"). It needs a
//! TensorFlow graph: op types, and the attributes a GraphDef gives.

use super::{Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "tf_operations",
    anchor: "tfprof OperationChecker (unfused BatchNorm, NHWC on GPU)",
    about: "TensorFlow ops with a faster form: FusedBatchNorm, NCHW on GPUs",
    needs_device: false,
    check,
};

fn check(facts: &Facts, out: &mut Out) {
    let trace = facts.trace();
    let tensorflow = trace.sources.iter().any(|s| s.format == "tf-run-metadata");
    if !tensorflow {
        return;
    }
    let reports = crate::advise::tfprof::operation_checker(trace);
    for report in reports {
        let mut f = Finding::of(&RULE, facts.files(), report.clone());
        f.severity = Severity::Low;
        f.evidence
            .push(format!("tfprof's OperationChecker: {report}"));
        f.fix = if report.contains("NHWC") {
            "build GPU convolutions and pooling with data_format=\"NCHW\" (cuDNN's native \
             layout on older GPUs; on tensor cores with fp16, NHWC can be the faster one)"
        } else {
            "use tf.compat.v1.layers.batch_normalization(fused=True) / \
             tf.keras.layers.BatchNormalization(fused=True)"
        }
        .to_string();
        f.more = format!("opscope stats op {}", facts.files());
        out.finding(f);
    }
}
