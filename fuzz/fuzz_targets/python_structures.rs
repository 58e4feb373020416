//! What `opscope attach` reads out of another process's memory, on any bytes: a code
//! object's line tables (3.11+ locations, 3.10's pairs, 3.9's `co_lnotab`) at any
//! offset, a `_Py_DebugOffsets` block, and a whole walk of every supported version's
//! interpreter over the bytes taken as a memory snapshot. Memory read from a running
//! process can be half-written or not what it seems: no panic, no endless loop.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope_stacks::memory::Snapshot;
use opscope_stacks::python::{layout, linetable};
use opscope_stacks::PythonProcess;

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let lasti = u64::from(u32::from_le_bytes([data[0], data[1], data[2], data[3]]));
    let first_line = i64::from(data[4] as i8);
    let _ = linetable::line_at(&data[5..], first_line, lasti);
    let _ = linetable::line_at_pairs(&data[5..], first_line, lasti);
    let _ = linetable::line_at_lnotab(&data[5..], first_line, lasti);
    let _ = layout::from_debug_offsets(data);
    // The bytes as pages of memory (each 8-byte address then 4096 bytes; the tail
    // that makes no page is dropped), walked as each version would walk them from
    // `_PyRuntime` at the first page.
    let whole = data.len() - data.len() % (8 + 4096);
    let Some(memory) = Snapshot::from_bytes(&data[..whole]) else {
        return;
    };
    let runtime = data
        .get(..8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
    for minor in [9, 10, 11, 12, 13] {
        let version = (3, minor, 0);
        let code_type = (minor == 13).then_some(runtime ^ 0x40);
        if let Ok(process) =
            PythonProcess::with_memory(memory.clone(), 0, version, runtime, code_type)
        {
            let _ = process.stacks();
        }
    }
});
