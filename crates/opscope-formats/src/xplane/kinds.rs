//! What an event of the TSL profiler (TensorFlow, JAX) is, from its line (thread or
//! stream), its name and whether it runs an XLA op: one rule for XPlane files and for
//! the trace viewer's JSON that xprof converts them to (`*.trace.json.gz`), whose events
//! carry no category.

use opscope_model::SliceKind;

/// A TensorFlow op's TraceMe name: `node/name:OpType`. Not a C++ `Class::Method`
/// (whose last `:` leaves a node ending in `:`).
pub(crate) fn tf_op(name: &str) -> Option<(&str, &str)> {
    let (node, op) = name.rsplit_once(':')?;
    let op_like = op
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_uppercase() || c == '_')
        && op.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    (op_like && !node.is_empty() && !node.contains("::") && !node.ends_with(':'))
        .then_some((node, op))
}

/// What the kind of an event is told by.
pub(crate) struct Event<'a> {
    /// On a device's plane, not the host's.
    pub on_device: bool,
    /// Its line's name (a thread, a stream, a derived line such as `Steps`).
    pub line: &'a str,
    /// The name shown (an event metadata's display name, else its name).
    pub name: &'a str,
    /// Its metadata's whole name: TensorFlow 2 shows an op as its type (`MatMul`) and
    /// names it `node/name:MatMul` (xprof's JSON: the `long_name` arg).
    pub full_name: &'a str,
    /// It has an `hlo_op` stat, as each op XLA runs on a CPU has (JAX on CPUs: `dot.2`,
    /// `add_tanh_fusion` on the pool threads or the caller's).
    pub runs_hlo_op: bool,
    /// It has a `step_num` stat: a step the program marked (JAX's
    /// `StepTraceAnnotation`, TensorFlow's `tf.profiler.experimental.Trace`).
    pub marks_step: bool,
}

/// The kind of an event of a device plane or the host plane.
pub(crate) fn event_kind(event: &Event) -> SliceKind {
    let Event {
        on_device,
        line,
        name,
        full_name,
        runs_hlo_op,
        marks_step,
    } = *event;
    let lower_line = line.to_ascii_lowercase();
    if on_device {
        if lower_line.starts_with("stream") {
            let lower = format!("{lower_line} {}", name.to_ascii_lowercase());
            return if lower.contains("memcpy") {
                // The stream's name and the event's, as Chrome traces name copies.
                SliceKind::Memcpy(crate::chrome::kinds::memcpy_direction(&lower))
            } else if lower.contains("memset") {
                SliceKind::Memset
            } else {
                SliceKind::Kernel
            };
        }
        return if lower_line == "steps" {
            SliceKind::Step
        } else {
            SliceKind::Annotation
        };
    }
    if marks_step {
        SliceKind::Step
    } else if runs_hlo_op {
        SliceKind::Op
    } else if lower_line.starts_with("python") || name.starts_with('$') {
        // `$file.py:12 function`: the profiler's Python tracer.
        SliceKind::PythonFunction
    } else if tf_op(name).or_else(|| tf_op(full_name)).is_some() {
        SliceKind::Op
    } else {
        SliceKind::Annotation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// XLA's ops on a CPU are ops, its runtime's C++ scopes around them are not (they
    /// were: `ThreadpoolListener::Record` and `ThunkExecutor::Execute` read as the op
    /// `Execute` of the node `ThunkExecutor:`), and TensorFlow's `node:Op` stay ops.
    /// [`event_kind`] of an event whose whole name is the one shown.
    fn kind(on_device: bool, line: &str, name: &str, runs_hlo_op: bool) -> SliceKind {
        event_kind(&Event {
            on_device,
            line,
            name,
            full_name: name,
            runs_hlo_op,
            marks_step: false,
        })
    }

    #[test]
    fn host_events_are_ops_only_when_they_run_one() {
        let pool = "tf_XLAEigen/-862530570";
        assert_eq!(kind(false, pool, "dot.2", true), SliceKind::Op);
        for scope in ["ThunkExecutor::Execute", "ThreadpoolListener::Record"] {
            assert_eq!(kind(false, pool, scope, false), SliceKind::Annotation);
        }
        assert_eq!(
            kind(false, "tf_Compute", "sequential/dense/MatMul:MatMul", false),
            SliceKind::Op
        );
        // TensorFlow 2.21 shows the op's type, its metadata holds the whole name.
        let shown_as_its_type = Event {
            on_device: false,
            line: "tf_Compute/-61470",
            name: "_MklNativeFusedMatMul",
            full_name: "sequential_1/dense_1/Relu:_MklNativeFusedMatMul",
            runs_hlo_op: false,
            marks_step: false,
        };
        assert_eq!(event_kind(&shown_as_its_type), SliceKind::Op);
        // JAX's `StepTraceAnnotation("train", step_num=3)` on the Python thread.
        let marked = Event {
            on_device: false,
            line: "python",
            name: "train",
            full_name: "train",
            runs_hlo_op: false,
            marks_step: true,
        };
        assert_eq!(event_kind(&marked), SliceKind::Step);
        assert_eq!(
            kind(false, "python3", "PjitFunction(step)", false),
            SliceKind::PythonFunction
        );
        assert_eq!(
            kind(false, pool, "$train.py:12 step", false),
            SliceKind::PythonFunction
        );
        assert_eq!(
            kind(true, "Stream #135(MemcpyH2D)", "MemcpyH2D", false),
            SliceKind::Memcpy(opscope_model::CopyDirection::H2D)
        );
        assert_eq!(kind(true, "Steps", "3", false), SliceKind::Step);
        assert_eq!(tf_op("a/b:Relu"), Some(("a/b", "Relu")));
        assert_eq!(tf_op("Foo::Bar"), None);
    }
}
