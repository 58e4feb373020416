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
}

impl SliceKind {
    /// Every kind, in the order of [`SliceKind::code`].
    pub const ALL: [SliceKind; 18] = [
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
