//! CTF stream decoder and mapping: arbitrary stream bytes under a fixed LTTng-like
//! metadata (compact and large headers with variants, sequences, strings, enums,
//! bitfields, floats; either byte order) never panic; the trace left behind (even after
//! an error) keeps the model's invariants, and a successful import exports as Chrome
//! JSON and Perfetto that import again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope_model::Trace;

const METADATA: &str = r#"/* CTF 1.8 */
typealias integer { size = 5; align = 1; signed = false; } := uint5_t;
typealias integer { size = 8; align = 8; signed = false; } := uint8_t;
typealias integer { size = 16; align = 8; signed = false; } := uint16_t;
typealias integer { size = 32; align = 8; signed = false; } := uint32_t;
typealias integer { size = 64; align = 8; signed = false; } := uint64_t;
trace { major = 1; minor = 8; byte_order = ORDER;
  packet.header := struct { uint32_t magic; uint8_t uuid[16]; uint32_t stream_id; }; };
env { hostname = "fuzz"; domain = "ust"; };
clock { name = "monotonic"; freq = 1000000000; offset = 1448631930242771401; };
typealias integer { size = 27; align = 1; signed = false; map = clock.monotonic.value; } := uint27_clock_monotonic_t;
typealias integer { size = 32; align = 8; signed = false; map = clock.monotonic.value; } := uint32_clock_monotonic_t;
typealias integer { size = 64; align = 8; signed = false; map = clock.monotonic.value; } := uint64_clock_monotonic_t;
struct packet_context {
	uint64_clock_monotonic_t timestamp_begin; uint64_clock_monotonic_t timestamp_end;
	uint64_t content_size; uint64_t packet_size; uint64_t events_discarded; uint32_t cpu_id; };
struct event_header_compact {
	enum : uint5_t { compact = 0 ... 30, extended = 31 } id;
	variant <id> {
		struct { uint27_clock_monotonic_t timestamp; } compact;
		struct { uint32_t id; uint64_clock_monotonic_t timestamp; } extended;
	} v;
} align(8);
struct event_header_large {
	enum : uint16_t { compact = 0 ... 65534, extended = 65535 } id;
	variant <id> {
		struct { uint32_clock_monotonic_t timestamp; } compact;
		struct { uint32_t id; uint64_clock_monotonic_t timestamp; } extended;
	} v;
} align(8);
stream { id = 0; event.header := struct event_header_compact; packet.context := struct packet_context;
  event.context := struct { integer { size = 32; align = 8; signed = 1; } _vpid; integer { size = 32; align = 8; signed = 1; } _vtid; }; };
stream { id = 1; event.header := struct event_header_large; packet.context := struct packet_context; };
event { name = "lttng_ust_libc:malloc"; id = 0; stream_id = 0; fields := struct { uint64_t _size; uint64_t _ptr; }; };
event { name = "lttng_ust_libc:free"; id = 1; stream_id = 0; fields := struct { uint64_t _ptr; }; };
event { name = "lttng_ust_cyg_profile:func_entry"; id = 2; stream_id = 0; fields := struct { uint64_t _addr; uint64_t _call_site; }; };
event { name = "lttng_ust_cyg_profile:func_exit"; id = 3; stream_id = 0; fields := struct { uint64_t _addr; uint64_t _call_site; }; };
event { name = "p:x_entry"; id = 4; stream_id = 0; fields := struct { string _s; uint32_t _len; uint8_t _seq[_len]; integer { size = 8; align = 8; encoding = UTF8; } _text[_len]; }; };
event { name = "p:x_exit"; id = 5; stream_id = 0; fields := struct { enum : uint8_t { A, B = 5 ... 9, C } _e; variant <_e> { uint8_t A; uint16_t B; string C; } _v; }; };
event { name = "cuptiTracer:kernel_begin"; id = 6; stream_id = 0; fields := struct { string name; uint64_t timestamp; floating_point { exp_dig = 11; mant_dig = 53; align = 8; } f; }; };
event { name = "cuptiTracer:kernel_end"; id = 7; stream_id = 0; fields := struct { string name; uint64_t timestamp; integer { size = 3; align = 1; } bits; integer { size = 61; align = 1; signed = true; } rest; }; };
event { name = "sched_switch"; id = 0; stream_id = 1; fields := struct { integer { size = 8; align = 8; encoding = UTF8; } _prev_comm[16]; integer { size = 32; align = 8; signed = 1; } _prev_tid; integer { size = 8; align = 8; encoding = UTF8; } _next_comm[16]; integer { size = 32; align = 8; signed = 1; } _next_tid; }; };
event { name = "syscall_entry_read"; id = 1; stream_id = 1; fields := struct { uint32_t fd; }; };
event { name = "syscall_exit_read"; id = 2; stream_id = 1; fields := struct { integer { size = 64; align = 8; signed = 1; } ret; }; };
"#;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the byte order and how the rest is cut into streams.
    let Some((&head, rest)) = data.split_first() else {
        return;
    };
    let metadata = METADATA.replace("ORDER", if head & 1 == 0 { "le" } else { "be" });
    let pieces = 1 + (head as usize >> 1) % 3;
    let chunk = rest.len().div_ceil(pieces).max(1);
    let streams: Vec<(String, &[u8])> = rest
        .chunks(chunk)
        .enumerate()
        .map(|(i, c)| (format!("fuzz/channel0_{i}"), c))
        .collect();
    let mut trace = Trace::new();
    let result = opscope_formats::ctf::import("fuzz", metadata.as_bytes(), "fuzz/metadata", &streams, &mut trace);
    opscope_fuzz::check_invariants(&trace);
    if result.is_ok() {
        opscope_fuzz::perfetto_round_trip(&trace);
        opscope_fuzz::chrome_round_trip(&trace);
    }
});
