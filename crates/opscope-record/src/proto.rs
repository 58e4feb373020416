//! Just enough protobuf encoding for the Perfetto packets the writer emits, with the
//! field numbers and enum values of the repository's Perfetto subset
//! (`proto/perfetto/trace/perfetto_trace.proto`), turned into constants at build time.

include!(concat!(env!("OUT_DIR"), "/perfetto_fields.rs"));

/// The first id of the clocks a packet sequence defines for itself.
pub const SEQUENCE_CLOCK: u64 = CLOCK_MAX_ID + 1;

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
