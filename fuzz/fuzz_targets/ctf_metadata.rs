//! CTF metadata: arbitrary bytes (TSDL text, packetized or not) never panic the TSDL
//! parser or the layout compiler; when they compile, decoding a few bytes as a stream
//! does not panic either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope_formats::ctf;

fuzz_target!(|data: &[u8]| {
    // Split off a small stream after a NUL, if any.
    let (metadata, stream) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    if let Ok(layout) = ctf::layout(metadata, "fuzz/metadata") {
        let streams = vec![("fuzz/stream".to_string(), stream)];
        let (_, _) = ctf::read_merged(&layout, &streams, |_, _| {});
    }
});
