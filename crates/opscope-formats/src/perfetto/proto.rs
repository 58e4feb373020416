//! The subset of Perfetto's trace protos that opscope reads and writes, as prost
//! messages generated at build time from `proto/perfetto/trace/perfetto_trace.proto`
//! (see `build.rs`). prost skips undeclared fields, so traces with any other content
//! still parse.
//!
//! Beyond that file's own differences from upstream (oneofs as optional fields,
//! 64-bit pids), the build script reads every `string` as bytes, so that a name that
//! is not UTF-8 is replaced on import instead of failing the whole packet, and adds
//! partial views: `TracePacket` without its compressed packets, `TracePacketGlobals`
//! for the importer's first pass, and `Interned` for the entries of every
//! `InternedData` table.

// The .proto also declares messages only the record crate's encoder or the views use;
// upstream's `SEQ_*` flag names keep their common prefix in Rust.
#[allow(dead_code, clippy::enum_variant_names)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/perfetto.protos.rs"));
    include!(concat!(env!("OUT_DIR"), "/perfetto_fields.rs"));
}

pub use generated::clock_snapshot::Clock;
pub use generated::debug_annotation::NestedValue;
pub use generated::*;

use generated::debug_annotation::nested_value::NestedType;
use generated::trace_packet::SequenceFlags;
use generated::track_event::Type;
use prost::encoding::WireType;

/// The key of every `Trace.packet`: its field number and wire type, one byte (fields
/// 1 to 15 have one-byte keys, as the exporter and format detection assume).
pub const PACKET_KEY: u8 = {
    assert!(TRACE_PACKET < 16);
    ((TRACE_PACKET << 3) | WireType::LengthDelimited as u32) as u8
};

/// Values of `TracePacket.sequence_flags`.
pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = SequenceFlags::SeqIncrementalStateCleared as u32;
pub const SEQ_NEEDS_INCREMENTAL_STATE: u32 = SequenceFlags::SeqNeedsIncrementalState as u32;

/// `BuiltinClock` values used here.
pub const CLOCK_REALTIME: u32 = BuiltinClock::Realtime as u32;
pub const CLOCK_MONOTONIC: u32 = BuiltinClock::Monotonic as u32;
pub const CLOCK_BOOTTIME: u32 = BuiltinClock::Boottime as u32;

/// Values of `TrackEvent.type`.
pub const TYPE_SLICE_BEGIN: i32 = Type::SliceBegin as i32;
pub const TYPE_SLICE_END: i32 = Type::SliceEnd as i32;
pub const TYPE_INSTANT: i32 = Type::Instant as i32;
pub const TYPE_COUNTER: i32 = Type::Counter as i32;

/// `DebugAnnotation.NestedValue.NestedType` values.
pub const NESTED_DICT: i32 = NestedType::Dict as i32;
pub const NESTED_ARRAY: i32 = NestedType::Array as i32;

impl InternedData {
    pub fn is_empty(&self) -> bool {
        self.event_categories.is_empty()
            && self.event_names.is_empty()
            && self.debug_annotation_names.is_empty()
            && self.debug_annotation_string_values.is_empty()
            && self.function_names.is_empty()
            && self.source_paths.is_empty()
            && self.frames.is_empty()
            && self.callstacks.is_empty()
    }

    pub fn clear(&mut self) {
        self.event_categories.clear();
        self.event_names.clear();
        self.debug_annotation_names.clear();
        self.debug_annotation_string_values.clear();
        self.function_names.clear();
        self.source_paths.clear();
        self.frames.clear();
        self.callstacks.clear();
    }
}
