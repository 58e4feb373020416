//! What a piece of device work is for: computation, communication or memory traffic.
//! Communication is recognised by kernel name, by more than HTA's `^nccl.*Kernel`:
//! RCCL/MSCCL/MSCCL++, DeepEP (both its `deep_ep::` and DeepSeek's `dpsk::ep::`
//! namespaces), NVSHMEM, gloo, custom all-reduce kernels (vLLM, SGLang, TensorRT-LLM)
//! and collective names; by the collective op that launched it, where the trace
//! correlates launches; and by a user's own pattern (`gpu --comm-kernels`).

use opscope_model::{SliceKind, StrId, Trace, NONE};
use regex::Regex;
use serde::Serialize;

use crate::correlate::Correlation;

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
    /// Launches, to find the op that launched a kernel whose name says nothing.
    correlation: Option<&'t Correlation>,
    /// The user's own communication kernels.
    extra: Option<&'t Regex>,
    /// By a launch call's parent: whether a collective is among its ancestors. Kernels
    /// launched under one op share the answer, and the walk up a deep stack, testing
    /// each ancestor's name, is what classifying a million kernels costs otherwise.
    collective_parent: hashbrown::HashMap<u32, bool>,
}

impl<'t> Classifier<'t> {
    /// By kernel name alone.
    pub fn new(trace: &'t Trace) -> Self {
        Classifier::with(trace, None, None)
    }

    /// By kernel name, `extra` (kernel names the user calls communication), and, with
    /// `correlation`, the op that launched the kernel.
    pub fn with(
        trace: &'t Trace,
        correlation: Option<&'t Correlation>,
        extra: Option<&'t Regex>,
    ) -> Self {
        Classifier {
            trace,
            communication: Vec::new(),
            correlation,
            extra,
            collective_parent: hashbrown::HashMap::new(),
        }
    }

    pub fn class(&mut self, slice: usize) -> WorkClass {
        let trace = self.trace;
        let extra = self.extra;
        let seen = &mut self.communication;
        let class = class_with(trace, slice, |name| {
            let at = name.0 as usize;
            if at >= seen.len() {
                seen.resize(trace.strings.len().max(at + 1), 0);
            }
            if seen[at] == 0 {
                let text = trace.str(name);
                seen[at] =
                    if is_communication_kernel(text) || extra.is_some_and(|r| r.is_match(text)) {
                        1
                    } else {
                        2
                    };
            }
            seen[at] == 1
        });
        match (class, self.correlation) {
            (WorkClass::Computation, Some(correlation))
                if trace.slices.kind(slice) == SliceKind::Kernel =>
            {
                let Some(call) = correlation.launch_of(slice) else {
                    return class;
                };
                let parent = trace.slices.parent[call];
                let by_collective = *self
                    .collective_parent
                    .entry(parent)
                    .or_insert_with(|| under_a_collective(trace, parent));
                if by_collective {
                    WorkClass::Communication
                } else {
                    class
                }
            }
            _ => class,
        }
    }
}

/// Whether `at` or one of its ancestors is a collective (so the kernel whose launch call
/// sits under `at` ran for it): a `Collective` slice, or an op named as one
/// (`c10d::allreduce_`, `nccl:all_reduce`, `record_param_comms`).
fn under_a_collective(trace: &Trace, mut at: u32) -> bool {
    let s = &trace.slices;
    while at != NONE {
        let i = at as usize;
        match s.kind(i) {
            SliceKind::Collective => return true,
            SliceKind::Op | SliceKind::Annotation
                if opscope_model::kind::is_collective_op_name(trace.str(s.name[i])) =>
            {
                return true
            }
            _ => {}
        }
        at = s.parent[i];
    }
    false
}

/// Substrings (of the lower-cased name) that mark a communication kernel.
pub const COMMUNICATION_MARKS: &[&str] = &[
    "nccl",
    "rccl",
    "msccl",
    "deep_ep",
    "deepep",
    // DeepSeek's own build of DeepEP: dpsk::ep::internode::dispatch, …::combine,
    // …::notify_dispatch, …::cached_notify, and the intranode variants.
    "dpsk::ep::",
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
            "void dpsk::ep::internode::dispatch<8, 768>(int4*, float*)",
            "void dpsk::ep::internode::combine<8, 768>(int4*, float*)",
            "void dpsk::ep::internode::notify_dispatch<8>(int const*, int*)",
            "void dpsk::ep::internode::cached_notify<8>(int, int*)",
            "void dpsk::ep::intranode::dispatch<8, 768>(int4*, float*)",
            "void dpsk::ep::intranode::combine<float, 8, 768>(float*)",
            "void deep_ep::internode_ll::dispatch<3, 10, 7168>(void*)",
            "void mscclpp::allreduce6<float>(float*, mscclpp::DeviceHandle)",
            "void gloo::cuda_reduce_kernel<float>(float*)",
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
