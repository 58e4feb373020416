//! CTF 1.8 (Common Trace Format) decoding, on its own: what LTTng, DPDK, `perf data
//! convert --to-ctf` and opscope's own export write. It knows CTF and nothing of the
//! opscope model; `opscope-formats` maps the events it reads.
//!
//! - [`metadata`]: TSDL text (plain or packetized) → [`types::Metadata`];
//! - [`program`]: a layout's fields compiled into runs of fixed-width reads;
//! - [`decode`]: metadata → compiled layouts; the bit-level reader of a stream's packets
//!   and events.

#![forbid(unsafe_code)]

pub mod decode;
pub mod metadata;
pub mod program;
pub mod types;
