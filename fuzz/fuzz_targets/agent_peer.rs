//! What the per-host agent does with a peer's bytes (`crates/opscope-agent`): frames
//! read as `protocol::read_frame` reads them, greetings and queries parsed as the agent
//! parses them, and chunks decoded as `ingest` decodes them. Arbitrary bytes never
//! panic and never make it allocate past a frame's limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope_agent::protocol;
use opscope_formats::perfetto::StreamDecoder;

fuzz_target!(|data: &[u8]| {
    let mut reader = data;
    let mut buf = Vec::new();
    let mut decoder = StreamDecoder::new();
    let mut first = true;
    while let Ok((kind, body)) = protocol::read_frame(&mut reader, &mut buf) {
        assert!(body.len() < opscope_wire::frame::MAX_FRAME);
        match kind {
            protocol::HELLO if first => {
                let _ = serde_json::from_slice::<protocol::Hello>(body);
            }
            protocol::QUERY if first => {
                let _ = serde_json::from_slice::<protocol::Query>(body);
            }
            protocol::PREAMBLE => {
                let _ = decoder.feed(body, "peer", &mut |_| {});
            }
            protocol::CHUNK if body.len() >= 8 => {
                let _ = decoder.feed(&body[8..], "peer", &mut |_| {});
            }
            _ => break, // the agent drops the peer
        }
        first = false;
    }
});
