//! Writes the field numbers and enum values the hand encoder in `src/proto.rs` uses as
//! constants, read from Perfetto's subset in the repository's `proto/` folder by
//! protox. Build-time only: the injected library keeps its few runtime dependencies.

use std::error::Error;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs};

use protox::prost_reflect::DescriptorPool;

const PROTO: &str = "perfetto/trace/perfetto_trace.proto";
const PACKAGE: &str = "perfetto.protos";

/// Field numbers, as `u32`: each constant names `Message.field` in `PACKAGE`. One that
/// serves several messages names each, and their numbers must agree.
const FIELDS: &[(&str, &[&str])] = &[
    ("PACKET", &["Trace.packet"]),
    ("PACKET_TIMESTAMP", &["TracePacket.timestamp"]),
    (
        "PACKET_SEQUENCE_ID",
        &["TracePacket.trusted_packet_sequence_id"],
    ),
    ("PACKET_TRACK_EVENT", &["TracePacket.track_event"]),
    ("PACKET_INTERNED_DATA", &["TracePacket.interned_data"]),
    ("PACKET_SEQUENCE_FLAGS", &["TracePacket.sequence_flags"]),
    ("PACKET_CLOCK_SNAPSHOT", &["TracePacket.clock_snapshot"]),
    ("PACKET_COMPRESSED", &["TracePacket.compressed_packets"]),
    (
        "PACKET_TIMESTAMP_CLOCK_ID",
        &["TracePacket.timestamp_clock_id"],
    ),
    ("PACKET_DEFAULTS", &["TracePacket.trace_packet_defaults"]),
    ("PACKET_TRACK_DESCRIPTOR", &["TracePacket.track_descriptor"]),
    (
        "DEFAULTS_CLOCK_ID",
        &["TracePacketDefaults.timestamp_clock_id"],
    ),
    (
        "DEFAULTS_TRACK_EVENT",
        &["TracePacketDefaults.track_event_defaults"],
    ),
    (
        "TRACK_EVENT_DEFAULTS_TRACK_UUID",
        &["TrackEventDefaults.track_uuid"],
    ),
    ("SNAPSHOT_CLOCK", &["ClockSnapshot.clocks"]),
    (
        "SNAPSHOT_PRIMARY_CLOCK",
        &["ClockSnapshot.primary_trace_clock"],
    ),
    ("CLOCK_ID", &["ClockSnapshot.Clock.clock_id"]),
    ("CLOCK_TIMESTAMP", &["ClockSnapshot.Clock.timestamp"]),
    (
        "CLOCK_IS_INCREMENTAL",
        &["ClockSnapshot.Clock.is_incremental"],
    ),
    ("TRACK_UUID", &["TrackDescriptor.uuid"]),
    ("TRACK_NAME", &["TrackDescriptor.name"]),
    ("TRACK_PROCESS", &["TrackDescriptor.process"]),
    ("TRACK_THREAD", &["TrackDescriptor.thread"]),
    ("TRACK_PARENT_UUID", &["TrackDescriptor.parent_uuid"]),
    ("TRACK_COUNTER", &["TrackDescriptor.counter"]),
    ("TRACK_DESCRIPTION", &["TrackDescriptor.description"]),
    ("PROCESS_PID", &["ProcessDescriptor.pid"]),
    ("PROCESS_NAME", &["ProcessDescriptor.process_name"]),
    ("PROCESS_LABELS", &["ProcessDescriptor.process_labels"]),
    ("THREAD_PID", &["ThreadDescriptor.pid"]),
    ("THREAD_TID", &["ThreadDescriptor.tid"]),
    ("THREAD_NAME", &["ThreadDescriptor.thread_name"]),
    ("EVENT_CATEGORY_IIDS", &["TrackEvent.category_iids"]),
    ("EVENT_DEBUG_ANNOTATIONS", &["TrackEvent.debug_annotations"]),
    ("EVENT_TYPE", &["TrackEvent.type"]),
    ("EVENT_NAME_IID", &["TrackEvent.name_iid"]),
    ("EVENT_TRACK_UUID", &["TrackEvent.track_uuid"]),
    ("EVENT_NAME", &["TrackEvent.name"]),
    ("EVENT_CATEGORIES", &["TrackEvent.categories"]),
    (
        "EVENT_DOUBLE_COUNTER_VALUE",
        &["TrackEvent.double_counter_value"],
    ),
    ("EVENT_FLOW_IDS", &["TrackEvent.flow_ids"]),
    (
        "EVENT_TERMINATING_FLOW_IDS",
        &["TrackEvent.terminating_flow_ids"],
    ),
    ("ANNOTATION_UINT", &["DebugAnnotation.uint_value"]),
    ("ANNOTATION_INT", &["DebugAnnotation.int_value"]),
    ("ANNOTATION_DOUBLE", &["DebugAnnotation.double_value"]),
    ("ANNOTATION_STRING", &["DebugAnnotation.string_value"]),
    ("ANNOTATION_NAME", &["DebugAnnotation.name"]),
    ("INTERNED_CATEGORIES", &["InternedData.event_categories"]),
    ("INTERNED_NAMES", &["InternedData.event_names"]),
    // The writer builds entries of both tables alike.
    ("INTERNED_IID", &["EventCategory.iid", "EventName.iid"]),
    ("INTERNED_NAME", &["EventCategory.name", "EventName.name"]),
];

/// Enum values, as `u64` (the varints the encoder writes): `Enum.VALUE` in `PACKAGE`.
const VALUES: &[(&str, &str)] = &[
    (
        "SEQ_INCREMENTAL_STATE_CLEARED",
        "TracePacket.SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED",
    ),
    (
        "SEQ_NEEDS_INCREMENTAL_STATE",
        "TracePacket.SequenceFlags.SEQ_NEEDS_INCREMENTAL_STATE",
    ),
    ("CLOCK_REALTIME", "BuiltinClock.BUILTIN_CLOCK_REALTIME"),
    ("CLOCK_MONOTONIC", "BuiltinClock.BUILTIN_CLOCK_MONOTONIC"),
    ("CLOCK_BOOTTIME", "BuiltinClock.BUILTIN_CLOCK_BOOTTIME"),
    ("CLOCK_MAX_ID", "BuiltinClock.BUILTIN_CLOCK_MAX_ID"),
    ("TYPE_SLICE_BEGIN", "TrackEvent.Type.TYPE_SLICE_BEGIN"),
    ("TYPE_SLICE_END", "TrackEvent.Type.TYPE_SLICE_END"),
    ("TYPE_INSTANT", "TrackEvent.Type.TYPE_INSTANT"),
    ("TYPE_COUNTER", "TrackEvent.Type.TYPE_COUNTER"),
];

fn main() -> Result<(), Box<dyn Error>> {
    let protos = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    println!("cargo:rerun-if-changed={}", protos.join(PROTO).display());
    let pool = protox::Compiler::new([&protos])?
        .open_file(PROTO)?
        .descriptor_pool();

    let mut out = String::new();
    for (constant, fields) in FIELDS {
        let numbers = fields
            .iter()
            .map(|field| field_number(&pool, field))
            .collect::<Result<Vec<_>, _>>()?;
        if numbers.windows(2).any(|w| w[0] != w[1]) {
            return Err(format!("{constant}: {fields:?} have different numbers").into());
        }
        let names = fields.join("`, `");
        writeln!(
            out,
            "/// `{names}`\npub const {constant}: u32 = {};",
            numbers[0]
        )?;
    }
    for (constant, value) in VALUES {
        let number = enum_value(&pool, value)?;
        let number = u64::try_from(number).map_err(|_| format!("{value} is negative"))?;
        writeln!(out, "/// `{value}`\npub const {constant}: u64 = {number};")?;
    }
    let path = PathBuf::from(env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    fs::write(path.join("perfetto_fields.rs"), out)?;
    Ok(())
}

/// Splits `Outer.Inner.name` into (`PACKAGE.Outer.Inner`, `name`).
fn split(path: &str) -> Result<(String, &str), String> {
    let (scope, name) = path
        .rsplit_once('.')
        .ok_or_else(|| format!("{path} is not Message.name"))?;
    Ok((format!("{PACKAGE}.{scope}"), name))
}

fn field_number(pool: &DescriptorPool, path: &str) -> Result<u32, String> {
    let (message, field) = split(path)?;
    pool.get_message_by_name(&message)
        .and_then(|m| m.get_field_by_name(field))
        .map(|f| f.number())
        .ok_or_else(|| format!("no field {path} in {PROTO}"))
}

fn enum_value(pool: &DescriptorPool, path: &str) -> Result<i32, String> {
    let (enumeration, value) = split(path)?;
    pool.get_enum_by_name(&enumeration)
        .and_then(|e| e.get_value_by_name(value))
        .map(|v| v.number())
        .ok_or_else(|| format!("no enum value {path} in {PROTO}"))
}
