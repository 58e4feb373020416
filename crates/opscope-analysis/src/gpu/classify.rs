//! What a piece of device work is for: computation, communication or memory traffic.
//! Communication is recognised by kernel name, by more than HTA's `^nccl.*Kernel`:
//! RCCL/MSCCL, DeepEP, NVSHMEM, gloo, custom all-reduce kernels (vLLM, SGLang,
//! TensorRT-LLM) and collective names.

use opscope_model::{SliceKind, StrId, Trace};
use serde::Serialize;

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkClass {
    Computation,
    Communication,
    Memory,
}

impl WorkClass {
    pub const ALL: [WorkClass; 3] = [
        WorkClass::Computation,
        WorkClass::Communication,
        WorkClass::Memory,
    ];

    pub fn name(self) -> &'static str {
        match self {
            WorkClass::Computation => "computation",
            WorkClass::Communication => "communication",
            WorkClass::Memory => "memory",
        }
    }
}

pub fn classify(trace: &Trace, slice: usize) -> WorkClass {
    class_with(trace, slice, |name| {
        is_communication_kernel(trace.str(name))
    })
}

/// The class of a slice, with `communication` telling whether a kernel name is one.
fn class_with(trace: &Trace, slice: usize, communication: impl FnOnce(StrId) -> bool) -> WorkClass {
    match trace.slices.kind(slice) {
        SliceKind::Memcpy(_) | SliceKind::Memset => WorkClass::Memory,
        _ if communication(trace.slices.name[slice]) => WorkClass::Communication,
        _ => WorkClass::Computation,
    }
}

/// Classifies many slices of one trace, looking at each distinct name once: a trace
/// runs thousands of kernels under a few hundred names.
pub struct Classifier<'t> {
    trace: &'t Trace,
    /// By name id: 0 not looked at yet, 1 communication, 2 not.
    communication: Vec<u8>,
}

impl<'t> Classifier<'t> {
    pub fn new(trace: &'t Trace) -> Self {
        Classifier {
            trace,
            communication: Vec::new(),
        }
    }

    pub fn class(&mut self, slice: usize) -> WorkClass {
        let trace = self.trace;
        let seen = &mut self.communication;
        class_with(trace, slice, |name| {
            let at = name.0 as usize;
            if at >= seen.len() {
                seen.resize(trace.strings.len().max(at + 1), 0);
            }
            if seen[at] == 0 {
                seen[at] = if is_communication_kernel(trace.str(name)) {
                    1
                } else {
                    2
                };
            }
            seen[at] == 1
        })
    }
}

/// Substrings (of the lower-cased name) that mark a communication kernel.
const COMMUNICATION_MARKS: &[&str] = &[
    "nccl",
    "rccl",
    "msccl",
    "deep_ep",
    "deepep",
    "nvshmem",
    "gloo",
    "allreduce",
    "all_reduce",
    "allgather",
    "all_gather",
    "reducescatter",
    "reduce_scatter",
    "alltoall",
    "all_to_all",
    "cross_device_reduce",
    "sendrecv",
    "multimem",
];

pub fn is_communication_kernel(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    COMMUNICATION_MARKS.iter().any(|m| lower.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn communication_is_more_than_nccl() {
        for comm in [
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
            "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
            "void deep_ep::intranode::dispatch<8, 768>(int4*, float*)",
            "void vllm::cross_device_reduce_1stage<float, 8>(vllm::RankData*)",
            "rcclGenericKernel<1, false>",
            "void multimem_all_reduce_kernel<bf16>",
            "void nvshmemi_transfer_rma_kernel",
            "void twoShotAllReduceKernel<float, 8>",
        ] {
            assert!(is_communication_kernel(comm), "{comm}");
        }
        for compute in [
            "volta_sgemm_128x64_nn",
            "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float>>",
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
            "triton_poi_fused_gather_0",
        ] {
            assert!(!is_communication_kernel(compute), "{compute}");
        }
    }
}
