//! The kind of a slice, which analyses rely on whatever the source format called it.

/// Direction of a memory copy.
#[derive(
    Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum CopyDirection {
    H2D,
    D2H,
    D2D,
    P2P,
    H2H,
    /// The source did not say (e.g. a bare `Memcpy` with no direction in its name).
    Unknown,
}

/// What a slice is, independent of the source format.
#[derive(
    Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum SliceKind {
    /// A framework op: aten::mm, a TF MatMul, an ITT task, a oneDNN primitive.
    Op,
    Kernel,
    Memcpy(CopyDirection),
    Memset,
    /// A CUDA/HIP/accelerator runtime API call.
    Runtime,
    Driver,
    Sync,
    /// NCCL/RCCL/gloo collectives, gRPC send/recv.
    Collective,
    /// NVTX ranges, `record_function`, user annotations.
    Annotation,
    Step,
    PythonFunction,
    Alloc,
    Other,
    /// Compilation: XLA compiling a program (its passes, code generation), JAX tracing
    /// and lowering a function, TensorFlow's XLA compile ops. Its own kind of work, not
    /// the program's ops.
    Compile,
}

impl SliceKind {
    /// Every kind, in the order of [`SliceKind::code`].
    pub const ALL: [SliceKind; 19] = [
        SliceKind::Op,
        SliceKind::Kernel,
        SliceKind::Memcpy(CopyDirection::H2D),
        SliceKind::Memcpy(CopyDirection::D2H),
        SliceKind::Memcpy(CopyDirection::D2D),
        SliceKind::Memcpy(CopyDirection::P2P),
        SliceKind::Memcpy(CopyDirection::H2H),
        SliceKind::Memcpy(CopyDirection::Unknown),
        SliceKind::Memset,
        SliceKind::Runtime,
        SliceKind::Driver,
        SliceKind::Sync,
        SliceKind::Collective,
        SliceKind::Annotation,
        SliceKind::Step,
        SliceKind::PythonFunction,
        SliceKind::Alloc,
        SliceKind::Other,
        // Added after the others: a code is saved (the model cache, Parquet), and kept.
        SliceKind::Compile,
    ];

    /// A one-byte code for the columnar store.
    pub fn code(self) -> u8 {
        Self::ALL.iter().position(|&k| k == self).unwrap_or(17) as u8
    }

    pub fn from_code(code: u8) -> SliceKind {
        Self::ALL
            .get(code as usize)
            .copied()
            .unwrap_or(SliceKind::Other)
    }

    /// Stable lower-case name used in CLI output and JSON (`memcpy_h2d`, `kernel`, …).
    pub fn name(self) -> &'static str {
        match self {
            SliceKind::Op => "op",
            SliceKind::Kernel => "kernel",
            SliceKind::Memcpy(CopyDirection::H2D) => "memcpy_h2d",
            SliceKind::Memcpy(CopyDirection::D2H) => "memcpy_d2h",
            SliceKind::Memcpy(CopyDirection::D2D) => "memcpy_d2d",
            SliceKind::Memcpy(CopyDirection::P2P) => "memcpy_p2p",
            SliceKind::Memcpy(CopyDirection::H2H) => "memcpy_h2h",
            SliceKind::Memcpy(CopyDirection::Unknown) => "memcpy",
            SliceKind::Memset => "memset",
            SliceKind::Runtime => "runtime",
            SliceKind::Driver => "driver",
            SliceKind::Sync => "sync",
            SliceKind::Collective => "collective",
            SliceKind::Annotation => "annotation",
            SliceKind::Step => "step",
            SliceKind::PythonFunction => "python_function",
            SliceKind::Alloc => "alloc",
            SliceKind::Other => "other",
            SliceKind::Compile => "compile",
        }
    }

    /// The kind a slice of this kind named `name` has once its name is read, whatever
    /// its format said: an op or range that is communication is a collective, one that
    /// is compilation is compilation (the rules of [`crate::Trace::finish`] that need
    /// no other slice; the live agent applies them event by event).
    pub fn refined_by_name(self, name: &str) -> SliceKind {
        if !matches!(
            self,
            SliceKind::Op | SliceKind::Annotation | SliceKind::Other
        ) {
            self
        } else if is_compile_name(name) {
            SliceKind::Compile
        } else if self != SliceKind::Other && is_communication_name(name) {
            SliceKind::Collective
        } else {
            self
        }
    }

    /// Work that runs on a device rather than a host thread.
    pub fn is_device_activity(self) -> bool {
        matches!(
            self,
            SliceKind::Kernel | SliceKind::Memcpy(_) | SliceKind::Memset
        )
    }
}

/// Whether a range is one PyTorch itself opens around user-level code, which Kineto
/// records as a `user_annotation` and not as an op: a DataLoader's `__next__` (the
/// wait for a batch), an optimizer's `step` and `zero_grad`. Through ITT (`opscope
/// record`) they come like its ops; read as ops, a DataLoader wait was the "most
/// expensive op" and counted as computation.
pub fn is_torch_user_scope(name: &str) -> bool {
    TORCH_USER_SCOPES.iter().any(|p| name.starts_with(p))
}

/// How PyTorch's own user-level ranges begin ([`is_torch_user_scope`]).
const TORCH_USER_SCOPES: [&str; 3] = [
    "enumerate(DataLoader)#",
    "Optimizer.step#",
    "Optimizer.zero_grad#",
];

/// Whether an op name is a collective as PyTorch records it (`c10d::allreduce_`,
/// `nccl:all_reduce`, `gloo:broadcast`, `record_param_comms`): importers make such ops
/// collectives, and analyses count the kernels they launch as communication. Only these
/// exact forms: user ranges such as TorchRec's `## all2all_data:recat_values ##` wrap
/// the computation that prepares a collective, not the collective.
pub fn is_collective_op_name(name: &str) -> bool {
    COLLECTIVE_OP_PREFIXES.iter().any(|p| name.starts_with(p))
        || COLLECTIVE_OP_NAMES.contains(&name)
}

/// How the names of collective ops begin ([`is_collective_op_name`]).
pub const COLLECTIVE_OP_PREFIXES: [&str; 3] = ["nccl:", "c10d::", "gloo:"];
/// Collective ops by their whole name ([`is_collective_op_name`]).
pub const COLLECTIVE_OP_NAMES: [&str; 1] = ["record_param_comms"];

/// Whether an op or range of a host thread is communication with other processes, on
/// CPUs as on GPUs: PyTorch's collectives ([`is_collective_op_name`]), MPI calls
/// (`MPI_Allreduce`, `MPI_Wait`), oneCCL's (`oneccl_bindings_for_pytorch::allreduce`,
/// `ccl::allreduce`), TensorFlow's collective ops (`CollectiveReduceV2`, also as
/// `node:CollectiveReduceV2`; `NcclAllReduce`) and its gRPC transfers (`RecvTensor`,
/// `GrpcRemoteWorker::…`).
pub fn is_communication_name(name: &str) -> bool {
    if is_collective_op_name(name) {
        return true;
    }
    const PREFIXES: [&str; 4] = ["oneccl_bindings_for_pytorch::", "ccl::", "oneccl:", "Grpc"];
    if let Some(call) = name
        .strip_prefix("MPI_")
        .or_else(|| name.strip_prefix("PMPI_"))
    {
        // MPI's set-up and bookkeeping calls move no data.
        const SET_UP: [&str; 16] = [
            "Init",
            "Finalize",
            "Comm_",
            "Type_",
            "Op_",
            "Group_",
            "Info_",
            "Wtime",
            "Wtick",
            "Get_",
            "Abort",
            "Error",
            "Attr",
            "Query_thread",
            "Initialized",
            "Finalized",
        ];
        return !SET_UP.iter().any(|p| call.starts_with(p));
    }
    if PREFIXES.iter().any(|p| name.starts_with(p)) || name.contains("RecvTensor") {
        return true;
    }
    // TensorFlow's ops, by type: the whole name, or the part after `node:`.
    let op_type = match name.rsplit_once(':') {
        Some((node, t)) if !node.ends_with(':') && !t.is_empty() => t,
        _ => name,
    };
    const TF_TYPES: [&str; 6] = [
        "CollectiveReduce",
        "CollectiveGather",
        "CollectiveBcastSend",
        "CollectiveBcastRecv",
        "CollectiveAllToAll",
        "CollectiveReduceScatter",
    ];
    let base = op_type
        .strip_suffix("V2")
        .or_else(|| op_type.strip_suffix("V3"));
    TF_TYPES.contains(&base.unwrap_or(op_type))
        || matches!(op_type, "NcclAllReduce" | "NcclReduce" | "NcclBroadcast")
}

/// Whether an op or range is compilation ([`SliceKind::Compile`]) by its name: XLA's
/// compile entry points and passes' drivers, JAX's tracing, lowering and backend
/// compile, TensorFlow's XLA compile ops, torch.compile's Dynamo (its outermost
/// `dynamo_timed` ranges: `dynamo`, `entire_frame_compile`, `_compile.compile_inner`).
/// What runs inside such a slice is compilation too.
pub fn is_compile_name(name: &str) -> bool {
    const NAMES: [&str; 13] = [
        "dynamo",
        "entire_frame_compile",
        "_compile.compile_inner",
        "_compile.compile_inner (dynamo_timed)",
        "backend_compile",
        "backend_compile_and_load",
        "lower_sharding_computation",
        "lower_jaxpr_to_module",
        "trace_to_jaxpr_dynamic",
        "jax_compile",
        "XlaCompile",
        "_XlaCompile",
        "XlaCompileOnDemand",
    ];
    const PREFIXES: [&str; 6] = [
        "PjRtCpuClient::Compile",
        "PjRtStreamExecutorClient::Compile",
        "PjRtCApiClient::Compile",
        "TfrtCpuClient::Compile",
        "CpuCompiler::",
        "GpuCompiler::",
    ];
    NAMES.contains(&name)
        || PREFIXES.iter().any(|p| name.starts_with(p))
        || name.starts_with("DeviceCompiler::Compile")
        || name.starts_with("XlaCompilationCache::Compile")
}

/// Whether a thread, by its name, runs only compilation: XLA's compiler pool
/// (`tf_PjRtCompilerThreadPool`) and its CPU code generation (`tf_xla-cpu-codegen`).
pub fn is_compile_thread(name: &str) -> bool {
    name.contains("CompilerThreadPool")
        || name.contains("xla-cpu-codegen")
        || name.contains("xla_compile")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_names_are_distinct() {
        let mut names = std::collections::HashSet::new();
        for (i, k) in SliceKind::ALL.iter().enumerate() {
            assert_eq!(k.code() as usize, i);
            assert_eq!(SliceKind::from_code(k.code()), *k);
            assert!(names.insert(k.name()), "duplicate name {}", k.name());
        }
        assert_eq!(SliceKind::from_code(200), SliceKind::Other);
    }
}
