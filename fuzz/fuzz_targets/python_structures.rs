//! What `opscope attach` reads out of another process's memory, on any bytes: a code
//! object's location table (3.11+ `co_linetable`) at any offset, and a `_Py_DebugOffsets`
//! block. Memory read from a running process can be half-written or not what it seems:
//! no panic, no endless loop.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope_stacks::python::{layout, linetable};

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let lasti = u64::from(u32::from_le_bytes([data[0], data[1], data[2], data[3]]));
    let first_line = i64::from(data[4] as i8);
    let _ = linetable::line_at(&data[5..], first_line, lasti);
    let _ = layout::from_debug_offsets(data);
});
