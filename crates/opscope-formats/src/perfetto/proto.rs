//! The subset of Perfetto's trace protos that opscope reads and writes, as hand-written
//! prost messages. Only the fields we use are declared; prost skips the others when
//! decoding, so traces with any other content still parse.
//!
//! Field numbers are Perfetto's official ones, taken from google/perfetto
//! `protos/perfetto/trace/trace_packet.proto`, `trace_packet_defaults.proto`,
//! `clock_snapshot.proto`, `interned_data/interned_data.proto` and
//! `track_event/{track_event,track_descriptor,process_descriptor,thread_descriptor,
//! counter_descriptor,debug_annotation}.proto`, and checked against the descriptors in
//! the Python `perfetto` package 0.59.1 (`perfetto/protos/perfetto/trace/perfetto_trace_pb2`).
//!
//! Deliberate differences from the upstream declarations, all wire-compatible:
//! - `string` fields are declared `bytes`, so that a name that is not valid UTF-8 (a
//!   thread name cut inside a character, say) is replaced on import instead of failing
//!   the whole packet.
//! - `oneof` members are plain optional fields (same encoding; a reader keeps the last).
//! - `ProcessDescriptor.pid`, `ThreadDescriptor.pid` and both `legacy_sort_index` are
//!   `int32` upstream and `int64` here: varints of either width decode as the other, so
//!   our files keep the model's 64-bit values and other readers see them truncated to 32
//!   bits, as they would for any oversized int32.
//! - Repeated scalars are unpacked (`packed = "false"`): the upstream files are proto2,
//!   where that is the default encoding readers such as protozero expect; prost decodes
//!   both forms.

/// `Trace`: the whole file, a sequence of `packet = 1` fields. The importer and the
/// exporter frame packets themselves to stream; tests decode whole files with it.
#[cfg(test)]
#[derive(Clone, PartialEq, prost::Message)]
pub struct Trace {
    #[prost(message, repeated, tag = "1")]
    pub packet: Vec<TracePacket>,
}

/// Values of `TracePacket.sequence_flags`.
pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
pub const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;

/// `TracePacket`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacket {
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    /// Deprecated upstream in favour of `SEQ_INCREMENTAL_STATE_CLEARED`; still read.
    #[prost(bool, optional, tag = "41")]
    pub incremental_state_cleared: Option<bool>,
    /// A `bool` in older protos, data-loss flags in newer ones; non-zero means loss.
    #[prost(uint32, optional, tag = "42")]
    pub previous_packet_dropped: Option<u32>,
    #[prost(bool, optional, tag = "87")]
    pub first_packet_on_sequence: Option<bool>,
    #[prost(message, optional, tag = "12")]
    pub interned_data: Option<InternedData>,
    #[prost(message, optional, boxed, tag = "59")]
    pub trace_packet_defaults: Option<Box<TracePacketDefaults>>,
    // Members of the `data` oneof. All but the frequent `track_event` are boxed, so
    // that a packet stays small to build and move.
    #[prost(message, optional, tag = "11")]
    pub track_event: Option<TrackEvent>,
    #[prost(message, optional, boxed, tag = "60")]
    pub track_descriptor: Option<Box<TrackDescriptor>>,
    #[prost(message, optional, boxed, tag = "6")]
    pub clock_snapshot: Option<Box<ClockSnapshot>>,
    /// Deprecated upstream (use a `TrackDescriptor`); gives the default thread of the
    /// packet's sequence in old traces.
    #[prost(message, optional, boxed, tag = "44")]
    pub thread_descriptor: Option<Box<ThreadDescriptor>>,
    /// Deprecated upstream (use a `TrackDescriptor`).
    #[prost(message, optional, boxed, tag = "43")]
    pub process_descriptor: Option<Box<ProcessDescriptor>>,
}

/// The fields of `TracePacket` the importer's first pass needs: everything that is
/// global to the trace rather than to a sequence.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacketGlobals {
    #[prost(message, optional, tag = "60")]
    pub track_descriptor: Option<TrackDescriptor>,
    #[prost(message, optional, tag = "6")]
    pub clock_snapshot: Option<ClockSnapshot>,
    /// Zlib-deflated `Trace` bytes holding more packets.
    #[prost(bytes = "vec", optional, tag = "50")]
    pub compressed_packets: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "133")]
    pub zstd_compressed_packets: Option<Vec<u8>>,
}

/// `TracePacketDefaults`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacketDefaults {
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
    #[prost(message, optional, tag = "11")]
    pub track_event_defaults: Option<TrackEventDefaults>,
}

/// `TrackEventDefaults`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackEventDefaults {
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    #[prost(uint64, repeated, packed = "false", tag = "31")]
    pub extra_counter_track_uuids: Vec<u64>,
    #[prost(uint64, repeated, packed = "false", tag = "45")]
    pub extra_double_counter_track_uuids: Vec<u64>,
}

/// `ClockSnapshot`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ClockSnapshot {
    #[prost(message, repeated, tag = "1")]
    pub clocks: Vec<Clock>,
    #[prost(int32, optional, tag = "2")]
    pub primary_trace_clock: Option<i32>,
}

/// `ClockSnapshot.Clock`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Clock {
    #[prost(uint32, optional, tag = "1")]
    pub clock_id: Option<u32>,
    #[prost(uint64, optional, tag = "2")]
    pub timestamp: Option<u64>,
    #[prost(bool, optional, tag = "3")]
    pub is_incremental: Option<bool>,
    #[prost(uint64, optional, tag = "4")]
    pub unit_multiplier_ns: Option<u64>,
}

/// `ClockSnapshot.Clock.BuiltinClocks` values used here.
pub const CLOCK_REALTIME: u32 = 1;
pub const CLOCK_MONOTONIC: u32 = 3;
pub const CLOCK_BOOTTIME: u32 = 6;

/// `InternedData`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InternedData {
    #[prost(message, repeated, tag = "1")]
    pub event_categories: Vec<Interned>,
    #[prost(message, repeated, tag = "2")]
    pub event_names: Vec<Interned>,
    #[prost(message, repeated, tag = "3")]
    pub debug_annotation_names: Vec<Interned>,
    #[prost(message, repeated, tag = "29")]
    pub debug_annotation_string_values: Vec<Interned>,
}

impl InternedData {
    pub fn is_empty(&self) -> bool {
        self.event_categories.is_empty()
            && self.event_names.is_empty()
            && self.debug_annotation_names.is_empty()
            && self.debug_annotation_string_values.is_empty()
    }

    pub fn clear(&mut self) {
        self.event_categories.clear();
        self.event_names.clear();
        self.debug_annotation_names.clear();
        self.debug_annotation_string_values.clear();
    }
}

/// One interned string: `EventCategory`, `EventName` and `DebugAnnotationName` are
/// `{uint64 iid = 1; string name = 2}` and `InternedString` is `{uint64 iid = 1; bytes
/// str = 2}`, so one message serves all four tables.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Interned {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub name: Option<Vec<u8>>,
}

/// `TrackDescriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackDescriptor {
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub name: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "10")]
    pub static_name: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "14")]
    pub description: Option<Vec<u8>>,
    #[prost(message, optional, tag = "3")]
    pub process: Option<ProcessDescriptor>,
    #[prost(message, optional, tag = "4")]
    pub thread: Option<ThreadDescriptor>,
    #[prost(message, optional, tag = "8")]
    pub counter: Option<CounterDescriptor>,
}

/// `ProcessDescriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProcessDescriptor {
    /// `int32` upstream; see the module docs.
    #[prost(int64, optional, tag = "1")]
    pub pid: Option<i64>,
    #[prost(bytes = "vec", optional, tag = "6")]
    pub process_name: Option<Vec<u8>>,
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub process_labels: Vec<Vec<u8>>,
    /// `int32` upstream; see the module docs.
    #[prost(int64, optional, tag = "3")]
    pub legacy_sort_index: Option<i64>,
}

/// `ThreadDescriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ThreadDescriptor {
    /// `int32` upstream; see the module docs.
    #[prost(int64, optional, tag = "1")]
    pub pid: Option<i64>,
    #[prost(int64, optional, tag = "2")]
    pub tid: Option<i64>,
    #[prost(bytes = "vec", optional, tag = "5")]
    pub thread_name: Option<Vec<u8>>,
    /// `int32` upstream; see the module docs.
    #[prost(int64, optional, tag = "3")]
    pub legacy_sort_index: Option<i64>,
}

/// `CounterDescriptor`. Its presence makes a track a counter track.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CounterDescriptor {
    #[prost(int64, optional, tag = "4")]
    pub unit_multiplier: Option<i64>,
    #[prost(bool, optional, tag = "5")]
    pub is_incremental: Option<bool>,
}

/// Values of `TrackEvent.type`.
pub const TYPE_SLICE_BEGIN: i32 = 1;
pub const TYPE_SLICE_END: i32 = 2;
pub const TYPE_INSTANT: i32 = 3;
pub const TYPE_COUNTER: i32 = 4;

/// `TrackEvent`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackEvent {
    #[prost(uint64, repeated, packed = "false", tag = "3")]
    pub category_iids: Vec<u64>,
    #[prost(bytes = "vec", repeated, tag = "22")]
    pub categories: Vec<Vec<u8>>,
    #[prost(uint64, optional, tag = "10")]
    pub name_iid: Option<u64>,
    #[prost(bytes = "vec", optional, tag = "23")]
    pub name: Option<Vec<u8>>,
    /// `TrackEvent.Type`, one of the `TYPE_*` constants.
    #[prost(int32, optional, tag = "9")]
    pub r#type: Option<i32>,
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    #[prost(int64, optional, tag = "30")]
    pub counter_value: Option<i64>,
    #[prost(double, optional, tag = "44")]
    pub double_counter_value: Option<f64>,
    #[prost(uint64, repeated, packed = "false", tag = "31")]
    pub extra_counter_track_uuids: Vec<u64>,
    #[prost(int64, repeated, packed = "false", tag = "12")]
    pub extra_counter_values: Vec<i64>,
    #[prost(uint64, repeated, packed = "false", tag = "45")]
    pub extra_double_counter_track_uuids: Vec<u64>,
    #[prost(double, repeated, packed = "false", tag = "46")]
    pub extra_double_counter_values: Vec<f64>,
    #[prost(uint64, repeated, packed = "false", tag = "36")]
    pub flow_ids_old: Vec<u64>,
    #[prost(fixed64, repeated, packed = "false", tag = "47")]
    pub flow_ids: Vec<u64>,
    #[prost(uint64, repeated, packed = "false", tag = "42")]
    pub terminating_flow_ids_old: Vec<u64>,
    #[prost(fixed64, repeated, packed = "false", tag = "48")]
    pub terminating_flow_ids: Vec<u64>,
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
    /// Deprecated upstream (use `TracePacket.timestamp`); read when a packet has no
    /// timestamp of its own.
    #[prost(int64, optional, tag = "16")]
    pub timestamp_absolute_us: Option<i64>,
}

/// `DebugAnnotation`: one arg of an event.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DebugAnnotation {
    #[prost(uint64, optional, tag = "1")]
    pub name_iid: Option<u64>,
    #[prost(bytes = "vec", optional, tag = "10")]
    pub name: Option<Vec<u8>>,
    // Members of the `value` oneof.
    #[prost(bool, optional, tag = "2")]
    pub bool_value: Option<bool>,
    #[prost(uint64, optional, tag = "3")]
    pub uint_value: Option<u64>,
    #[prost(int64, optional, tag = "4")]
    pub int_value: Option<i64>,
    #[prost(double, optional, tag = "5")]
    pub double_value: Option<f64>,
    #[prost(bytes = "vec", optional, tag = "6")]
    pub string_value: Option<Vec<u8>>,
    #[prost(uint64, optional, tag = "7")]
    pub pointer_value: Option<u64>,
    #[prost(message, optional, tag = "8")]
    pub nested_value: Option<NestedValue>,
    #[prost(bytes = "vec", optional, tag = "9")]
    pub legacy_json_value: Option<Vec<u8>>,
    #[prost(uint64, optional, tag = "17")]
    pub string_value_iid: Option<u64>,
    // Structured values (newer than `nested_value`).
    #[prost(message, repeated, tag = "11")]
    pub dict_entries: Vec<DebugAnnotation>,
    #[prost(message, repeated, tag = "12")]
    pub array_values: Vec<DebugAnnotation>,
}

/// `DebugAnnotation.NestedValue.NestedType` values.
pub const NESTED_DICT: i32 = 1;
pub const NESTED_ARRAY: i32 = 2;

/// `DebugAnnotation.NestedValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NestedValue {
    #[prost(int32, optional, tag = "1")]
    pub nested_type: Option<i32>,
    #[prost(bytes = "vec", repeated, tag = "2")]
    pub dict_keys: Vec<Vec<u8>>,
    #[prost(message, repeated, tag = "3")]
    pub dict_values: Vec<NestedValue>,
    #[prost(message, repeated, tag = "4")]
    pub array_values: Vec<NestedValue>,
    #[prost(int64, optional, tag = "5")]
    pub int_value: Option<i64>,
    #[prost(double, optional, tag = "6")]
    pub double_value: Option<f64>,
    #[prost(bool, optional, tag = "7")]
    pub bool_value: Option<bool>,
    #[prost(bytes = "vec", optional, tag = "8")]
    pub string_value: Option<Vec<u8>>,
}
