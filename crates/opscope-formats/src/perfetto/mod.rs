//! Perfetto protobuf traces (TracePacket / TrackEvent), read and written: the exporter
//! writes the file opscope's users open in ui.perfetto.dev, the importer reads those
//! files back losslessly and reads generic TrackEvent traces, and [`StreamDecoder`]
//! reads a recording's chunks as they come, event by event. Both read with one reader
//! (`reader`), which hands what it reads to a sink: the model builder, or the stream's.
//!
//! What the Perfetto protos cannot say directly is carried so the importer can restore
//! it, in forms the Perfetto UI shows harmlessly:
//! - a slice's or instant's [`opscope_model::SliceKind`] as the debug annotation
//!   `opscope.kind` (absent for `Other`), an instant's non-thread scope as
//!   `opscope.scope`, and a flow's category and name as one `opscope.flow` annotation
//!   per entry of the source event's `flow_ids` (`category` U+001F `name`);
//! - facts about tracks in the `TrackDescriptor.description` text, as
//!   `opscope:key=value;key=value` (see [`Marker`]): `kind=gpu_stream` (or another
//!   [`opscope_model::TrackKind`] the descriptor's shape does not imply), `device=gpu:0`
//!   and `device_name=…` on a device's process, and `lane` on the extra child tracks
//!   the exporter adds where slices of one track overlap without nesting (Perfetto
//!   matches begin and end events with a stack, so such slices need separate tracks).
//!
//! Args are debug annotations; a `Null` arg is written as the JSON `null` (debug
//! annotations have no null) and a `Json` arg as `legacy_json_value`.
//!
//! Not kept: which source a process came from (all of a file's processes are one
//! source on import; two processes with one pid stay two), hosts and ranks, source
//! metadata, and threads that have no track.

mod export;
mod import;
pub(crate) mod proto;
mod reader;
mod stream;

#[cfg(test)]
mod tests;

pub use export::{export, export_with, ExportOptions, MonotonicClocks};
pub use import::import;
pub use stream::{StreamDecoder, StreamEvent, StreamTrack};

/// Whether the first (decompressed) bytes of a file are Perfetto packets: the key of a
/// `TracePacket` (field 1, length-delimited: 0x0a) and not JSON text that starts with a
/// newline. XSpace and RunMetadata open alike: their importers claim them by name.
pub fn looks_like_packets(head: &[u8]) -> bool {
    head.first() == Some(&proto::PACKET_KEY) && !crate::chrome::looks_like_json(head)
}

/// Perfetto protobuf traces (`.pftrace`, `.perfetto-trace`, gzip'd or not) in the
/// registry.
pub struct PerfettoFormat;

impl crate::importer::Importer for PerfettoFormat {
    fn name(&self) -> &'static str {
        "perfetto"
    }

    fn looks_for(&self) -> &'static str {
        ".pftrace, .perfetto-trace"
    }

    fn claims_name(&self, name: &str) -> bool {
        [".pftrace", ".pftrace.gz", ".perfetto-trace", ".perfetto"]
            .iter()
            .any(|ext| name.ends_with(ext))
    }

    fn claims_bytes(&self, _path: &str, head: &[u8]) -> bool {
        looks_like_packets(head)
    }

    fn bytes_importer(&self) -> Option<crate::importer::BytesImporter> {
        Some(import)
    }
}

/// The kind of an event written by `opscope record`'s injected library, from its
/// category: ITT tasks (`itt/<domain>`) are ops (oneDNN primitives, PyTorch's
/// `emit_itt` ops), ITT frames (`itt.frame/<domain>`) steps, NVTX ranges and marks
/// (`nvtx`, `nvtx/<domain>`) annotations, and CUPTI's records (`cuda/kernel`,
/// `cuda/memcpy/<direction>`, `cuda/memset`, `cuda/runtime`, `cuda/driver`,
/// `cuda/sync`) what they name. The category is the only place the library can say it
/// without spending bytes on every event. Some names say more, as Kineto records them:
/// PyTorch's `ProfilerStep#N` range, an ITT task like its ops, is a step, and its
/// ranges around user-level code (a DataLoader's `__next__`) are annotations.
fn recorded_kind(category: &str, name: &str) -> Option<opscope_model::SliceKind> {
    use opscope_model::{CopyDirection, SliceKind};
    let (source, rest) = category.split_once('/').unwrap_or((category, ""));
    match source {
        "itt" if name.starts_with("ProfilerStep#") => Some(SliceKind::Step),
        "itt" if opscope_model::kind::is_torch_user_scope(name) => Some(SliceKind::Annotation),
        "itt" => Some(SliceKind::Op),
        "itt.frame" => Some(SliceKind::Step),
        "nvtx" => Some(SliceKind::Annotation),
        // Ranges the Python bootstrap marks: Keras's train-function calls, JAX's
        // jitted calls, and torch.profiler's steps while its profiler records.
        "opscope" if name.starts_with("ProfilerStep#") => Some(SliceKind::Step),
        "opscope" => Some(SliceKind::Annotation),
        "cuda" => match rest {
            "kernel" => Some(SliceKind::Kernel),
            "memset" => Some(SliceKind::Memset),
            "runtime" => Some(SliceKind::Runtime),
            "driver" => Some(SliceKind::Driver),
            "sync" => Some(SliceKind::Sync),
            _ => {
                let direction = rest
                    .strip_prefix("memcpy")
                    .filter(|d| d.is_empty() || d.starts_with('/'))?;
                Some(SliceKind::Memcpy(match direction {
                    "/htod" => CopyDirection::H2D,
                    "/dtoh" => CopyDirection::D2H,
                    "/dtod" => CopyDirection::D2D,
                    "/ptop" => CopyDirection::P2P,
                    "/htoh" => CopyDirection::H2H,
                    _ => CopyDirection::Unknown,
                }))
            }
        },
        _ => None,
    }
}

/// The kind a [`KIND_ANNOTATION`] names.
fn kind_named(name: &str) -> Option<opscope_model::SliceKind> {
    opscope_model::SliceKind::ALL
        .iter()
        .copied()
        .find(|k| k.name() == name)
}

/// Debug annotation carrying a slice's or instant's kind name.
const KIND_ANNOTATION: &str = "opscope.kind";
/// Debug annotation carrying an instant's scope when it is not `thread`.
const SCOPE_ANNOTATION: &str = "opscope.scope";
/// Debug annotation carrying one outgoing flow's category and name.
const FLOW_ANNOTATION: &str = "opscope.flow";
/// Separates category and name in a [`FLOW_ANNOTATION`] value.
const FLOW_SEPARATOR: char = '\u{1f}';

/// The opscope facts kept in a `TrackDescriptor.description`.
#[derive(Debug, Default, PartialEq)]
struct Marker {
    /// A `TrackKind::name()` the descriptor's shape does not imply.
    kind: Option<String>,
    /// `DeviceKind::name():index` of the device a process stands for.
    device: Option<String>,
    device_name: Option<String>,
    /// The track only holds slices of its parent track that overlap others.
    lane: bool,
    /// The `pthread_t` of a thread track's thread (`Thread::handle`).
    pthread: Option<u64>,
}

impl Marker {
    const PREFIX: &'static str = "opscope:";

    fn is_empty(&self) -> bool {
        *self == Marker::default()
    }

    fn format(&self) -> String {
        let mut parts = Vec::new();
        if let Some(k) = &self.kind {
            parts.push(format!("kind={}", escape(k)));
        }
        if let Some(d) = &self.device {
            parts.push(format!("device={}", escape(d)));
        }
        if let Some(n) = &self.device_name {
            parts.push(format!("device_name={}", escape(n)));
        }
        if self.lane {
            parts.push("lane".to_string());
        }
        if let Some(h) = self.pthread {
            parts.push(format!("pthread={h}"));
        }
        format!("{}{}", Self::PREFIX, parts.join(";"))
    }

    /// Reads a description; text that is not ours gives an empty marker.
    fn parse(description: &str) -> Marker {
        let mut marker = Marker::default();
        let Some(rest) = description.strip_prefix(Self::PREFIX) else {
            return marker;
        };
        for part in rest.split(';') {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            let value = unescape(value);
            match key {
                "kind" => marker.kind = Some(value),
                "device" => marker.device = Some(value),
                "device_name" => marker.device_name = Some(value),
                "lane" => marker.lane = true,
                "pthread" => marker.pthread = value.parse().ok(),
                _ => {}
            }
        }
        marker
    }
}

fn escape(s: &str) -> String {
    s.replace('%', "%25").replace(';', "%3B")
}

fn unescape(s: &str) -> String {
    s.replace("%3B", ";").replace("%25", "%")
}

#[cfg(test)]
mod recorded_kind_tests {
    use super::recorded_kind;
    use opscope_model::{CopyDirection, SliceKind};

    #[test]
    fn recorder_categories_give_their_kinds() {
        for (category, kind) in [
            ("itt/PyTorch", Some(SliceKind::Op)),
            ("itt.frame/train", Some(SliceKind::Step)),
            ("nvtx", Some(SliceKind::Annotation)),
            ("nvtx/TSL", Some(SliceKind::Annotation)),
            ("opscope", Some(SliceKind::Annotation)),
            ("cuda/kernel", Some(SliceKind::Kernel)),
            (
                "cuda/memcpy/htod",
                Some(SliceKind::Memcpy(CopyDirection::H2D)),
            ),
            (
                "cuda/memcpy/dtoh",
                Some(SliceKind::Memcpy(CopyDirection::D2H)),
            ),
            (
                "cuda/memcpy/dtod",
                Some(SliceKind::Memcpy(CopyDirection::D2D)),
            ),
            (
                "cuda/memcpy/ptop",
                Some(SliceKind::Memcpy(CopyDirection::P2P)),
            ),
            (
                "cuda/memcpy/htoh",
                Some(SliceKind::Memcpy(CopyDirection::H2H)),
            ),
            (
                "cuda/memcpy/other",
                Some(SliceKind::Memcpy(CopyDirection::Unknown)),
            ),
            (
                "cuda/memcpy",
                Some(SliceKind::Memcpy(CopyDirection::Unknown)),
            ),
            ("cuda/memset", Some(SliceKind::Memset)),
            ("cuda/runtime", Some(SliceKind::Runtime)),
            ("cuda/driver", Some(SliceKind::Driver)),
            ("cuda/sync", Some(SliceKind::Sync)),
            ("cuda/memcpyx", None),
            ("cuda", None),
            ("cuda/other", None),
            ("cuda_runtime", None),
            ("kernel", None),
            ("", None),
        ] {
            assert_eq!(recorded_kind(category, "aten::mm"), kind, "{category}");
        }
        // torch.profiler's step range, recorded through emit_itt or marked by the
        // bootstrap while the program's profiler records, is a step.
        for category in ["itt/PyTorch", "opscope"] {
            assert_eq!(
                recorded_kind(category, "ProfilerStep#3"),
                Some(SliceKind::Step),
                "{category}"
            );
        }
        // PyTorch's ranges around user-level code are annotations, as in Kineto.
        for name in [
            "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
            "Optimizer.step#AdamW.step",
            "Optimizer.zero_grad#AdamW.zero_grad",
        ] {
            assert_eq!(
                recorded_kind("itt/PyTorch", name),
                Some(SliceKind::Annotation),
                "{name}"
            );
        }
        assert_eq!(
            recorded_kind("itt/PyTorch", "Optimizer"),
            Some(SliceKind::Op)
        );
    }
}
