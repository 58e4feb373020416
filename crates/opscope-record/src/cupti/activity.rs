//! Decodes one CUPTI activity record from its bytes. The struct version is the running
//! libcupti's (12.x and 13.x differ in size), so only the common prefix of each record
//! is read, by the offsets measured on both header sets (`capture-abis.md` §1.3).

use std::fmt;

/// `CUpti_ActivityKind` values this module decodes.
pub mod kind {
    pub const MEMCPY: u32 = 1;
    pub const MEMSET: u32 = 2;
    pub const KERNEL: u32 = 3;
    pub const DRIVER: u32 = 4;
    pub const RUNTIME: u32 = 5;
    pub const CONCURRENT_KERNEL: u32 = 10;
    pub const SYNCHRONIZATION: u32 = 38;
    pub const EXTERNAL_CORRELATION: u32 = 39;
}

/// Bytes of the prefix each kind needs: the end of the last field read.
pub const KERNEL_PREFIX: usize = 112;
pub const MEMCPY_PREFIX: usize = 52;
pub const MEMSET_PREFIX: usize = 52;
pub const API_PREFIX: usize = 40;
pub const SYNCHRONIZATION_PREFIX: usize = 40;
pub const EXTERNAL_CORRELATION_PREFIX: usize = 20;

/// A kernel (`CUpti_ActivityKernel4`..`13`), from KERNEL or CONCURRENT_KERNEL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernel {
    pub start: u64,
    pub end: u64,
    pub device: u32,
    pub context: u32,
    pub stream: u32,
    pub correlation: u32,
    pub grid: [i32; 3],
    pub block: [i32; 3],
    pub static_shared_memory: i32,
    pub dynamic_shared_memory: i32,
    /// Address of the CUPTI-owned `const char*` name (mangled); the caller reads it.
    pub name: u64,
    pub graph: Graph,
}

/// The CUDA graph node a piece of device work ran as (zeros when it ran outside any
/// graph): at the same offsets in every struct version CUPTI 12 and 13 write (Kernel5
/// to Kernel13 at 144 and 156; Memcpy5 to 7 and Memset4 and 5 at 64 and 72). A record
/// cut before them reads zeros.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Graph {
    pub id: u32,
    pub node: u64,
}

/// `CUpti_ActivityMemcpyKind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyKind {
    HtoD,
    DtoH,
    DtoD,
    HtoH,
    PtoP,
    /// Array copies and kinds added later.
    Other(u8),
}

impl CopyKind {
    pub fn from_raw(raw: u8) -> CopyKind {
        match raw {
            1 => CopyKind::HtoD,
            2 => CopyKind::DtoH,
            8 => CopyKind::DtoD,
            9 => CopyKind::HtoH,
            10 => CopyKind::PtoP,
            other => CopyKind::Other(other),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memcpy {
    pub copy_kind: CopyKind,
    /// `CUpti_ActivityMemoryKind` of source and destination, as CUPTI numbers them.
    pub src_kind: u8,
    pub dst_kind: u8,
    pub bytes: u64,
    pub start: u64,
    pub end: u64,
    pub device: u32,
    pub context: u32,
    pub stream: u32,
    pub correlation: u32,
    pub graph: Graph,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memset {
    pub value: u32,
    pub bytes: u64,
    pub start: u64,
    pub end: u64,
    pub device: u32,
    pub context: u32,
    pub stream: u32,
    pub correlation: u32,
    pub memory_kind: u16,
    pub graph: Graph,
}

/// Which API a call record is from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiKind {
    Driver,
    Runtime,
}

/// A driver or runtime API call (`CUpti_ActivityAPI`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Api {
    pub api: ApiKind,
    pub cbid: u32,
    pub start: u64,
    pub end: u64,
    pub process: u32,
    pub thread: u32,
    pub correlation: u32,
    pub return_value: u32,
}

/// `CUpti_ActivitySynchronizationType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncKind {
    EventSync,
    StreamWaitEvent,
    StreamSync,
    ContextSync,
    Other(u32),
}

impl SyncKind {
    pub fn from_raw(raw: u32) -> SyncKind {
        match raw {
            1 => SyncKind::EventSync,
            2 => SyncKind::StreamWaitEvent,
            3 => SyncKind::StreamSync,
            4 => SyncKind::ContextSync,
            other => SyncKind::Other(other),
        }
    }
}

/// A host thread waiting for the device (`CUpti_ActivitySynchronization2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Synchronization {
    pub sync: SyncKind,
    pub start: u64,
    pub end: u64,
    pub correlation: u32,
    pub context: u32,
    pub stream: u32,
    pub cuda_event: u32,
}

/// Ties a correlation id to an id the program pushed (`CUpti_ActivityExternalCorrelation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExternalCorrelation {
    pub external_kind: u32,
    pub external_id: u64,
    pub correlation: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activity {
    Kernel(Kernel),
    Memcpy(Memcpy),
    Memset(Memset),
    Api(Api),
    Synchronization(Synchronization),
    ExternalCorrelation(ExternalCorrelation),
    /// A kind this module does not read.
    Other(u32),
}

/// The bytes end before the fields of the record's kind do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooShort {
    /// `None` when not even the kind fits.
    pub kind: Option<u32>,
    pub len: usize,
    pub needed: usize,
}

impl fmt::Display for TooShort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            Some(kind) => write!(
                f,
                "CUPTI activity record of kind {kind} has {} bytes, needs {}",
                self.len, self.needed
            ),
            None => write!(f, "CUPTI activity record of {} bytes has no kind", self.len),
        }
    }
}

impl std::error::Error for TooShort {}

/// Little-endian fields of a record whose length was checked.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn bytes<const N: usize>(&self, at: usize) -> [u8; N] {
        // The caller checked the length; a short read gives zeros, never a panic.
        self.0
            .get(at..at + N)
            .and_then(|b| b.try_into().ok())
            .unwrap_or([0; N])
    }
    fn u8(&self, at: usize) -> u8 {
        self.bytes::<1>(at)[0]
    }
    fn u16(&self, at: usize) -> u16 {
        u16::from_le_bytes(self.bytes(at))
    }
    fn u32(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.bytes(at))
    }
    fn i32(&self, at: usize) -> i32 {
        i32::from_le_bytes(self.bytes(at))
    }
    fn u64(&self, at: usize) -> u64 {
        u64::from_le_bytes(self.bytes(at))
    }
    fn i32x3(&self, at: usize) -> [i32; 3] {
        [self.i32(at), self.i32(at + 4), self.i32(at + 8)]
    }
}

/// Decodes the record at the start of `bytes` (which may run past its end, as when the
/// rest of a CUPTI buffer follows).
pub fn decode(bytes: &[u8]) -> Result<Activity, TooShort> {
    let len = bytes.len();
    let Some(kind) = bytes.get(..4).and_then(|b| b.try_into().ok()) else {
        return Err(TooShort {
            kind: None,
            len,
            needed: 4,
        });
    };
    let kind = u32::from_le_bytes(kind);
    let needed = match kind {
        kind::KERNEL | kind::CONCURRENT_KERNEL => KERNEL_PREFIX,
        kind::MEMCPY => MEMCPY_PREFIX,
        kind::MEMSET => MEMSET_PREFIX,
        kind::DRIVER | kind::RUNTIME => API_PREFIX,
        kind::SYNCHRONIZATION => SYNCHRONIZATION_PREFIX,
        kind::EXTERNAL_CORRELATION => EXTERNAL_CORRELATION_PREFIX,
        other => return Ok(Activity::Other(other)),
    };
    if len < needed {
        return Err(TooShort {
            kind: Some(kind),
            len,
            needed,
        });
    }
    let f = Fields(bytes);
    Ok(match kind {
        kind::KERNEL | kind::CONCURRENT_KERNEL => Activity::Kernel(Kernel {
            start: f.u64(16),
            end: f.u64(24),
            device: f.u32(40),
            context: f.u32(44),
            stream: f.u32(48),
            grid: f.i32x3(52),
            block: f.i32x3(64),
            static_shared_memory: f.i32(76),
            dynamic_shared_memory: f.i32(80),
            correlation: f.u32(92),
            name: f.u64(104),
            graph: Graph {
                id: f.u32(156),
                node: f.u64(144),
            },
        }),
        kind::MEMCPY => Activity::Memcpy(Memcpy {
            copy_kind: CopyKind::from_raw(f.u8(4)),
            src_kind: f.u8(5),
            dst_kind: f.u8(6),
            bytes: f.u64(8),
            start: f.u64(16),
            end: f.u64(24),
            device: f.u32(32),
            context: f.u32(36),
            stream: f.u32(40),
            correlation: f.u32(44),
            graph: Graph {
                id: f.u32(72),
                node: f.u64(64),
            },
        }),
        kind::MEMSET => Activity::Memset(Memset {
            value: f.u32(4),
            bytes: f.u64(8),
            start: f.u64(16),
            end: f.u64(24),
            device: f.u32(32),
            context: f.u32(36),
            stream: f.u32(40),
            correlation: f.u32(44),
            memory_kind: f.u16(50),
            graph: Graph {
                id: f.u32(72),
                node: f.u64(64),
            },
        }),
        kind::DRIVER | kind::RUNTIME => Activity::Api(Api {
            api: if kind == kind::DRIVER {
                ApiKind::Driver
            } else {
                ApiKind::Runtime
            },
            cbid: f.u32(4),
            start: f.u64(8),
            end: f.u64(16),
            process: f.u32(24),
            thread: f.u32(28),
            correlation: f.u32(32),
            return_value: f.u32(36),
        }),
        kind::SYNCHRONIZATION => Activity::Synchronization(Synchronization {
            sync: SyncKind::from_raw(f.u32(4)),
            start: f.u64(8),
            end: f.u64(16),
            correlation: f.u32(24),
            context: f.u32(28),
            stream: f.u32(32),
            cuda_event: f.u32(36),
        }),
        _ => Activity::ExternalCorrelation(ExternalCorrelation {
            external_kind: f.u32(4),
            external_id: f.u64(8),
            correlation: f.u32(16),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Record sizes of the structs libcupti 12.9 and 13.5 write (Kernel9/13, Memcpy6/7,
    /// Memset4/5; the others did not change).
    const KERNEL_SIZES: [usize; 2] = [208, 248];
    const MEMCPY_SIZES: [usize; 2] = [96, 112];
    const MEMSET_SIZES: [usize; 2] = [88, 104];
    const API_SIZE: usize = 40;
    const SYNCHRONIZATION_SIZE: usize = 56;
    const EXTERNAL_CORRELATION_SIZE: usize = 24;

    use super::super::layout::Layout;

    fn kernel(size: usize, kind: u32) -> Layout {
        Layout::new(size, kind)
            .u64(16, 1_000)
            .u64(24, 2_500)
            .u64(32, 2_600) // completed: not read
            .u32(40, 1)
            .u32(44, 2)
            .u32(48, 7)
            .i32(52, 128)
            .i32(56, 2)
            .i32(60, 1)
            .i32(64, 256)
            .i32(68, 1)
            .i32(72, 1)
            .i32(76, 4096)
            .i32(80, 512)
            .u32(92, 42)
            .u64(96, 77) // gridId: not read
            .u64(104, 0xdead_beef_0000)
            .u64(144, 1 << 33) // graphNodeId
            .u32(156, 5) // graphId
            .u64(size - 8, u64::MAX) // later fields must not leak into the prefix
    }

    #[test]
    fn kernels_of_both_struct_versions_and_both_kinds_decode() {
        for size in KERNEL_SIZES {
            for k in [kind::KERNEL, kind::CONCURRENT_KERNEL] {
                let record = kernel(size, k).0;
                assert_eq!(
                    decode(&record),
                    Ok(Activity::Kernel(Kernel {
                        start: 1_000,
                        end: 2_500,
                        device: 1,
                        context: 2,
                        stream: 7,
                        correlation: 42,
                        grid: [128, 2, 1],
                        block: [256, 1, 1],
                        static_shared_memory: 4096,
                        dynamic_shared_memory: 512,
                        name: 0xdead_beef_0000,
                        graph: Graph {
                            id: 5,
                            node: 1 << 33,
                        },
                    })),
                    "size {size}, kind {k}"
                );
            }
        }
    }

    #[test]
    fn memcpys_decode_with_every_documented_direction() {
        for size in MEMCPY_SIZES {
            for (raw, copy_kind) in [
                (1, CopyKind::HtoD),
                (2, CopyKind::DtoH),
                (8, CopyKind::DtoD),
                (9, CopyKind::HtoH),
                (10, CopyKind::PtoP),
                (3, CopyKind::Other(3)),
            ] {
                let record = Layout::new(size, kind::MEMCPY)
                    .u8(4, raw)
                    .u8(5, 1)
                    .u8(6, 3)
                    .u8(7, 0xff)
                    .u64(8, 1 << 20)
                    .u64(16, 10)
                    .u64(24, 20)
                    .u32(32, 0)
                    .u32(36, 1)
                    .u32(40, 13)
                    .u32(44, 99)
                    .u32(48, 98) // runtimeCorrelationId: not read
                    .u64(64, 11) // graphNodeId
                    .u32(72, 2) // graphId
                    .u64(size - 8, u64::MAX)
                    .0;
                assert_eq!(
                    decode(&record),
                    Ok(Activity::Memcpy(Memcpy {
                        copy_kind,
                        src_kind: 1,
                        dst_kind: 3,
                        bytes: 1 << 20,
                        start: 10,
                        end: 20,
                        device: 0,
                        context: 1,
                        stream: 13,
                        correlation: 99,
                        graph: Graph { id: 2, node: 11 },
                    }))
                );
            }
        }
    }

    #[test]
    fn memsets_decode() {
        for size in MEMSET_SIZES {
            let record = Layout::new(size, kind::MEMSET)
                .u32(4, 0xab)
                .u64(8, 4096)
                .u64(16, 30)
                .u64(24, 31)
                .u32(32, 3)
                .u32(36, 4)
                .u32(40, 5)
                .u32(44, 6)
                .u16(48, 1)
                .u16(50, 3)
                .u64(64, 12) // graphNodeId
                .u32(72, 3) // graphId
                .u64(size - 8, u64::MAX)
                .0;
            assert_eq!(
                decode(&record),
                Ok(Activity::Memset(Memset {
                    value: 0xab,
                    bytes: 4096,
                    start: 30,
                    end: 31,
                    device: 3,
                    context: 4,
                    stream: 5,
                    correlation: 6,
                    memory_kind: 3,
                    graph: Graph { id: 3, node: 12 },
                }))
            );
        }
    }

    #[test]
    fn driver_and_runtime_calls_decode() {
        for (k, api) in [
            (kind::DRIVER, ApiKind::Driver),
            (kind::RUNTIME, ApiKind::Runtime),
        ] {
            let record = Layout::new(API_SIZE, k)
                .u32(4, 211)
                .u64(8, 500)
                .u64(16, 900)
                .u32(24, 1234)
                .u32(28, 1240)
                .u32(32, 42)
                .u32(36, 0)
                .0;
            assert_eq!(
                decode(&record),
                Ok(Activity::Api(Api {
                    api,
                    cbid: 211,
                    start: 500,
                    end: 900,
                    process: 1234,
                    thread: 1240,
                    correlation: 42,
                    return_value: 0,
                }))
            );
        }
    }

    #[test]
    fn synchronizations_and_external_correlations_decode() {
        let record = Layout::new(SYNCHRONIZATION_SIZE, kind::SYNCHRONIZATION)
            .u32(4, 3)
            .u64(8, 100)
            .u64(16, 200)
            .u32(24, 17)
            .u32(28, 1)
            .u32(32, 7)
            .u32(36, 0xffff_ffff)
            .0;
        assert_eq!(
            decode(&record),
            Ok(Activity::Synchronization(Synchronization {
                sync: SyncKind::StreamSync,
                start: 100,
                end: 200,
                correlation: 17,
                context: 1,
                stream: 7,
                cuda_event: 0xffff_ffff,
            }))
        );
        let record = Layout::new(EXTERNAL_CORRELATION_SIZE, kind::EXTERNAL_CORRELATION)
            .u32(4, 3)
            .u64(8, 1 << 40)
            .u32(16, 17)
            .0;
        assert_eq!(
            decode(&record),
            Ok(Activity::ExternalCorrelation(ExternalCorrelation {
                external_kind: 3,
                external_id: 1 << 40,
                correlation: 17,
            }))
        );
    }

    #[test]
    fn other_kinds_are_named_not_read() {
        // MEMORY2 (49), with no more than its kind.
        assert_eq!(decode(&Layout::new(4, 49).0), Ok(Activity::Other(49)));
        assert_eq!(decode(&Layout::new(56, 12).0), Ok(Activity::Other(12)));
    }

    /// Every record of every kind and size, cut at every length: no panic, and an
    /// error exactly when the cut falls inside the prefix the kind needs.
    #[test]
    fn records_cut_at_any_length_give_errors_not_panics() {
        let mut records = Vec::new();
        for size in KERNEL_SIZES {
            records.push((kernel(size, kind::CONCURRENT_KERNEL).0, KERNEL_PREFIX));
        }
        for size in MEMCPY_SIZES {
            records.push((Layout::new(size, kind::MEMCPY).0, MEMCPY_PREFIX));
        }
        for size in MEMSET_SIZES {
            records.push((Layout::new(size, kind::MEMSET).0, MEMSET_PREFIX));
        }
        records.push((Layout::new(API_SIZE, kind::RUNTIME).0, API_PREFIX));
        records.push((Layout::new(API_SIZE, kind::DRIVER).0, API_PREFIX));
        records.push((
            Layout::new(SYNCHRONIZATION_SIZE, kind::SYNCHRONIZATION).0,
            SYNCHRONIZATION_PREFIX,
        ));
        records.push((
            Layout::new(EXTERNAL_CORRELATION_SIZE, kind::EXTERNAL_CORRELATION).0,
            EXTERNAL_CORRELATION_PREFIX,
        ));
        for (record, prefix) in &records {
            let kind = u32::from_le_bytes(record[..4].try_into().unwrap());
            for len in 0..=record.len() {
                let result = decode(&record[..len]);
                if len < 4 {
                    assert_eq!(
                        result,
                        Err(TooShort {
                            kind: None,
                            len,
                            needed: 4
                        })
                    );
                } else if len < *prefix {
                    assert_eq!(
                        result,
                        Err(TooShort {
                            kind: Some(kind),
                            len,
                            needed: *prefix
                        }),
                        "kind {kind}"
                    );
                    assert!(!result.unwrap_err().to_string().is_empty());
                } else {
                    assert!(result.is_ok(), "kind {kind}, {len} bytes");
                }
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A cheap deterministic generator: every kind value CUPTI has, random fields.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let len = (next() % 260) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if len >= 4 {
                bytes[..4].copy_from_slice(&((next() % 64) as u32).to_le_bytes());
            }
            let _ = decode(&bytes);
        }
    }
}
