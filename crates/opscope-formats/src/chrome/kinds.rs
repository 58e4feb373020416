//! How Chrome-trace categories, event names and process names map to the model's
//! slice kinds and devices: Kineto's current and 2021 schemas, the legacy autograd
//! profiler, and TensorFlow 1.x timelines.

use opscope_model::{CopyDirection, DeviceKind, SliceKind};

/// The kind of a slice from its category and name; `None` when the category is one no
/// rule knows (the slice is then kept as `Other` and counted).
pub(crate) fn kind_of(category: &str, name: &str) -> Option<SliceKind> {
    let kind = match category.to_ascii_lowercase().as_str() {
        "cpu_op" | "operator" | "op" => {
            // The 2021 schema records profiler steps as operators.
            if name.starts_with("ProfilerStep#") {
                SliceKind::Step
            } else if opscope_model::kind::is_collective_op_name(name) {
                SliceKind::Collective
            } else {
                SliceKind::Op
            }
        }
        "user_annotation" | "gpu_user_annotation" | "annotation" => {
            if name.starts_with("ProfilerStep#") {
                SliceKind::Step
            } else {
                SliceKind::Annotation
            }
        }
        "python_function" | "python" => SliceKind::PythonFunction,
        "cuda_runtime"
        | "runtime"
        | "mtia_runtime"
        | "hip_runtime"
        | "xpu_runtime"
        | "privateuse1_runtime" => SliceKind::Runtime,
        "cuda_driver" | "driver" | "privateuse1_driver" => SliceKind::Driver,
        "cuda_sync" | "sync" => SliceKind::Sync,
        // MTIA's command processor logs its DMA transfers among the kernels.
        "mtia_ccp_events" if name.starts_with("dma") => SliceKind::Memcpy(CopyDirection::Unknown),
        "kernel" | "mtia_ccp_events" => SliceKind::Kernel,
        "gpu_memcpy" | "memcpy" => SliceKind::Memcpy(memcpy_direction(name)),
        "gpu_memset" | "memset" => SliceKind::Memset,
        "collective" | "nccl" | "comms" | "distributed" => SliceKind::Collective,
        "compile" => SliceKind::Compile,
        // The span of a whole profiling session: neither an op nor a user annotation.
        "trace" => SliceKind::Other,
        // CUPTI profiler ranges.
        "cuda_profiler_range" => SliceKind::Annotation,
        // TF timeline tensor lifetimes and Kineto's allocator instants.
        "tensor" | "memory" | "cpu_instant_event" => SliceKind::Alloc,
        "dataflow" | "ac2g" | "fwdbwd" | "async" | "async_cpu_to_gpu" | "async_gpu" => {
            SliceKind::Other
        }
        _ => return None,
    };
    Some(kind)
}

/// The direction of a copy from its name: Kineto's `Memcpy HtoD (Pageable -> Device)`,
/// TF's `MEMCPYHtoD`, CUPTI-style `memcpy_h2d`.
pub(crate) fn memcpy_direction(name: &str) -> CopyDirection {
    let lower = name.to_ascii_lowercase();
    let has = |a: &str, b: &str| lower.contains(a) || lower.contains(b);
    if has("htod", "h2d") {
        CopyDirection::H2D
    } else if has("dtoh", "d2h") {
        CopyDirection::D2H
    } else if has("dtod", "d2d") {
        CopyDirection::D2D
    } else if has("ptop", "p2p") || lower.contains("peer") {
        CopyDirection::P2P
    } else if has("htoh", "h2h") {
        CopyDirection::H2H
    } else {
        CopyDirection::Unknown
    }
}

/// The device a trace "process" stands for: Kineto labels (`GPU 0`, `MTIA 9`) and TF
/// device names (`/job:localhost/replica:0/task:0/device:GPU:0 Compute`,
/// `/gpu:0/stream:12 Compute`, `/device:SYCL:0/memcpy`).
pub(crate) fn device_of(name: &str) -> Option<(DeviceKind, u32)> {
    let lower = name.to_ascii_lowercase();
    for (prefix, kind) in [
        ("gpu", DeviceKind::Gpu),
        ("mtia", DeviceKind::Mtia),
        ("tpu", DeviceKind::Tpu),
        ("sycl", DeviceKind::Sycl),
        ("xpu", DeviceKind::Gpu),
        ("hpu", DeviceKind::Other),
    ] {
        // Kineto: the whole label is "GPU 0".
        if let Some(rest) = lower.strip_prefix(prefix).and_then(|r| r.strip_prefix(' ')) {
            if let Ok(index) = rest.trim().parse() {
                return Some((kind, index));
            }
        }
        // TF: "device:GPU:0", "/gpu:0/…".
        for marker in [format!("device:{prefix}:"), format!("/{prefix}:")] {
            if let Some(at) = lower.find(&marker) {
                let digits: String = lower[at + marker.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_digit())
                    .collect();
                if let Ok(index) = digits.parse() {
                    return Some((kind, index));
                }
            }
        }
    }
    None
}

/// What a TF timeline device "process" runs: a GPU stream's kernels, copies, or ops
/// launched from the host.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum TfLane {
    Stream,
    Memcpy,
    /// `/gpu:0/stream:all`: TensorFlow's merged copy of every stream's work.
    AllStreams,
}

pub(crate) fn tf_lane(process_name: &str) -> Option<TfLane> {
    let lower = process_name.to_ascii_lowercase();
    if !(lower.starts_with("/job:") || lower.starts_with("/gpu:") || lower.starts_with("/device:"))
    {
        return None;
    }
    if lower.contains("/memcpy") {
        Some(TfLane::Memcpy)
    } else if lower.contains("/stream:all") {
        Some(TfLane::AllStreams)
    } else if lower.contains("/stream:") {
        Some(TfLane::Stream)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_map_to_kinds() {
        assert_eq!(kind_of("cpu_op", "aten::mm"), Some(SliceKind::Op));
        assert_eq!(kind_of("Operator", "aten::mm"), Some(SliceKind::Op));
        assert_eq!(
            kind_of("cpu_op", "nccl:all_reduce"),
            Some(SliceKind::Collective)
        );
        assert_eq!(
            kind_of("user_annotation", "ProfilerStep#3"),
            Some(SliceKind::Step)
        );
        assert_eq!(
            kind_of("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)"),
            Some(SliceKind::Memcpy(CopyDirection::D2H))
        );
        assert_eq!(kind_of("Kernel", "volta_sgemm"), Some(SliceKind::Kernel));
        assert_eq!(
            kind_of("cuda_driver", "cuLaunchKernel"),
            Some(SliceKind::Driver)
        );
        assert_eq!(kind_of("mystery", "x"), None);
        assert_eq!(memcpy_direction("MEMCPYHtoD"), CopyDirection::H2D);
        assert_eq!(
            memcpy_direction("Memcpy PtoP (Device -> Device)"),
            CopyDirection::P2P
        );
        assert_eq!(memcpy_direction("Memcpy"), CopyDirection::Unknown);
    }

    #[test]
    fn devices_are_found_in_process_names() {
        assert_eq!(device_of("GPU 3"), Some((DeviceKind::Gpu, 3)));
        assert_eq!(device_of("MTIA 9"), Some((DeviceKind::Mtia, 9)));
        assert_eq!(
            device_of("/job:localhost/replica:0/task:0/device:GPU:1 Compute"),
            Some((DeviceKind::Gpu, 1))
        );
        assert_eq!(
            device_of("/gpu:0/stream:12 Compute"),
            Some((DeviceKind::Gpu, 0))
        );
        assert_eq!(
            device_of("/device:SYCL:0/memcpy Compute"),
            Some((DeviceKind::Sycl, 0))
        );
        assert_eq!(
            device_of("/job:localhost/replica:0/task:0/cpu:0 Compute"),
            None
        );
        assert_eq!(device_of("python3.8"), None);
        assert_eq!(device_of("CPU"), None);
        assert_eq!(tf_lane("/gpu:0/stream:12 Compute"), Some(TfLane::Stream));
        assert_eq!(tf_lane("/gpu:0/memcpy Compute"), Some(TfLane::Memcpy));
        assert_eq!(
            tf_lane("/job:localhost/replica:0/task:0/device:GPU:0 Compute"),
            None
        );
    }
}
