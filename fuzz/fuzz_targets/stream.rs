//! Perfetto stream decoder (`perfetto::StreamDecoder`, what the per-host agent reads a
//! live recording with): arbitrary bytes fed in two pieces (cut where the first byte
//! says) never panic; after any error the decoder still reads a valid chunk, and its
//! preamble always imports.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope_formats::perfetto::{StreamDecoder, StreamEvent};
use opscope_model::Trace;

/// One packet on a sequence of its own: a slice begin named `x` on track 9 at 10 ns
/// (`TracePacket { timestamp: 10, trusted_packet_sequence_id: 7, track_event {
/// type: SLICE_BEGIN, track_uuid: 9, name: "x" } }`).
const VALID_CHUNK: &[u8] = &[
    0x0a, 0x0e, 0x40, 0x0a, 0x50, 0x07, 0x5a, 0x08, 0x48, 0x01, 0x58, 0x09, 0xba, 0x01, 0x01, b'x',
];

fuzz_target!(|data: &[u8]| {
    let Some((&head, rest)) = data.split_first() else {
        return;
    };
    let cut = head as usize * rest.len() / 256;
    let mut decoder = StreamDecoder::new();
    // Reads the text each event borrows from the decoder.
    let mut text = 0usize;
    let mut on = |e: StreamEvent<'_>| {
        if let StreamEvent::Slice { name, category, .. }
        | StreamEvent::Instant { name, category, .. } = e
        {
            text += name.chars().count() + category.len();
        }
    };
    let _ = decoder.feed(&rest[..cut], "fuzz-1", &mut on);
    let _ = decoder.feed(&rest[cut..], "fuzz-2", &mut on);
    let open = decoder.open_slices();
    if let Err(e) = decoder.feed(VALID_CHUNK, "valid", &mut on) {
        panic!("a valid chunk after the fuzzed ones failed: {e}");
    }
    // The begin opens a slice unless the track was already past its depth bound.
    assert!(decoder.open_slices() <= open + 1);
    let _ = decoder.tracks().count();
    let mut trace = Trace::new();
    if let Err(e) = opscope_formats::perfetto::import(decoder.preamble(), "preamble", &mut trace) {
        panic!("the preamble does not import: {e}");
    }
    opscope_fuzz::check_invariants(&trace);
});
