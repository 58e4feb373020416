//! Just enough protobuf encoding for the Perfetto packets the writer emits (field
//! numbers from Perfetto's `trace_packet.proto`, `track_event.proto`,
//! `track_descriptor.proto`, `clock_snapshot.proto`, `interned_data.proto`).

// TracePacket
pub const PACKET: u32 = 1; // Trace.packet
pub const PACKET_TIMESTAMP: u32 = 8;
pub const PACKET_SEQUENCE_ID: u32 = 10;
pub const PACKET_TRACK_EVENT: u32 = 11;
pub const PACKET_INTERNED_DATA: u32 = 12;
pub const PACKET_SEQUENCE_FLAGS: u32 = 13;
pub const PACKET_CLOCK_SNAPSHOT: u32 = 6;
pub const PACKET_COMPRESSED: u32 = 50;
pub const PACKET_TIMESTAMP_CLOCK_ID: u32 = 58;
pub const PACKET_DEFAULTS: u32 = 59;
pub const PACKET_TRACK_DESCRIPTOR: u32 = 60;

pub const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
pub const SEQ_NEEDS_INCREMENTAL_STATE: u64 = 2;

// TracePacketDefaults / TrackEventDefaults
pub const DEFAULTS_CLOCK_ID: u32 = 58;
pub const DEFAULTS_TRACK_EVENT: u32 = 11;
pub const TRACK_EVENT_DEFAULTS_TRACK_UUID: u32 = 11;

// ClockSnapshot / Clock
pub const SNAPSHOT_CLOCK: u32 = 1;
pub const SNAPSHOT_PRIMARY_CLOCK: u32 = 2;
pub const CLOCK_ID: u32 = 1;
pub const CLOCK_TIMESTAMP: u32 = 2;
pub const CLOCK_IS_INCREMENTAL: u32 = 3;

/// Builtin clock ids.
pub const CLOCK_REALTIME: u64 = 1;
pub const CLOCK_MONOTONIC: u64 = 3;
pub const CLOCK_BOOTTIME: u64 = 6;
/// The first id of the clocks a packet sequence defines for itself.
pub const SEQUENCE_CLOCK: u64 = 64;

// TrackDescriptor
pub const TRACK_UUID: u32 = 1;
pub const TRACK_NAME: u32 = 2;
pub const TRACK_PROCESS: u32 = 3;
pub const TRACK_THREAD: u32 = 4;
pub const TRACK_PARENT_UUID: u32 = 5;
pub const TRACK_COUNTER: u32 = 8;
pub const TRACK_DESCRIPTION: u32 = 14;
pub const PROCESS_PID: u32 = 1;
pub const PROCESS_NAME: u32 = 6;
pub const PROCESS_LABELS: u32 = 8;
pub const THREAD_PID: u32 = 1;
pub const THREAD_TID: u32 = 2;
pub const THREAD_NAME: u32 = 5;

// TrackEvent
pub const EVENT_CATEGORY_IIDS: u32 = 3;
pub const EVENT_DEBUG_ANNOTATIONS: u32 = 4;
pub const EVENT_TYPE: u32 = 9;
pub const EVENT_NAME_IID: u32 = 10;
pub const EVENT_TRACK_UUID: u32 = 11;
pub const EVENT_NAME: u32 = 23;
pub const EVENT_CATEGORIES: u32 = 22;
pub const EVENT_DOUBLE_COUNTER_VALUE: u32 = 44;
pub const EVENT_FLOW_IDS: u32 = 47;
pub const EVENT_TERMINATING_FLOW_IDS: u32 = 48;
pub const TYPE_SLICE_BEGIN: u64 = 1;
pub const TYPE_SLICE_END: u64 = 2;
pub const TYPE_INSTANT: u64 = 3;
pub const TYPE_COUNTER: u64 = 4;

// DebugAnnotation
pub const ANNOTATION_UINT: u32 = 3;
pub const ANNOTATION_INT: u32 = 4;
pub const ANNOTATION_DOUBLE: u32 = 5;
pub const ANNOTATION_STRING: u32 = 6;
pub const ANNOTATION_NAME: u32 = 10;

// InternedData: EventCategory / EventName are {iid = 1, name = 2}.
pub const INTERNED_CATEGORIES: u32 = 1;
pub const INTERNED_NAMES: u32 = 2;
pub const INTERNED_IID: u32 = 1;
pub const INTERNED_NAME: u32 = 2;

pub fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn uint(out: &mut Vec<u8>, field: u32, v: u64) {
    varint(out, (field as u64) << 3);
    varint(out, v);
}

pub fn double(out: &mut Vec<u8>, field: u32, v: f64) {
    varint(out, ((field as u64) << 3) | 1);
    out.extend_from_slice(&v.to_le_bytes());
}

pub fn fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    varint(out, ((field as u64) << 3) | 1);
    out.extend_from_slice(&v.to_le_bytes());
}

pub fn bytes(out: &mut Vec<u8>, field: u32, v: &[u8]) {
    varint(out, ((field as u64) << 3) | 2);
    varint(out, v.len() as u64);
    out.extend_from_slice(v);
}

/// Writes a length-delimited field whose body `f` writes, without a scratch buffer:
/// the body is written after a one-byte length slot and moved when it needs more.
pub fn message(out: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
    varint(out, ((field as u64) << 3) | 2);
    let slot = out.len();
    out.push(0);
    f(out);
    let len = out.len() - slot - 1;
    if len < 0x80 {
        out[slot] = len as u8;
    } else {
        let mut prefix = Vec::with_capacity(10);
        varint(&mut prefix, len as u64);
        // The length needs more bytes than the slot: shift the body right.
        out.splice(slot..slot + 1, prefix);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_messages_of_any_length_get_the_right_length_prefix() {
        for len in [0usize, 1, 127, 128, 300, 20_000] {
            let mut out = Vec::new();
            message(&mut out, 1, |o| o.extend(std::iter::repeat_n(7u8, len)));
            let mut expected = Vec::new();
            bytes(&mut expected, 1, &vec![7u8; len]);
            assert_eq!(out, expected, "body of {len} bytes");
        }
    }

    #[test]
    fn varints_match_the_protobuf_examples() {
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, [0xAC, 0x02]);
        out.clear();
        uint(&mut out, 1, 150);
        assert_eq!(out, [0x08, 0x96, 0x01]);
    }
}
