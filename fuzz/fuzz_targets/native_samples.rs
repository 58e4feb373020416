//! What the native sampler does with a perf ring buffer's bytes: records parsed as the
//! kernel lays them out, and each sample's registers and stack copy unwound with this
//! process's own modules (real `.eh_frame` tables) — a target's stack holds anything,
//! and a buffer overwritten under the reader is cut anywhere: no panic, no endless
//! walk, never more frames than the bound.
#![no_main]

use std::sync::Mutex;

use libfuzzer_sys::fuzz_target;
use opscope_stacks::native::images::Images;
use opscope_stacks::native::perf::{self, Record};
use opscope_stacks::native::unwind::{ProcessCode, MAX_FRAMES};

/// This process's modules, opened once (the fuzzer's binary, libc, the loader).
static CODE: Mutex<Option<(ProcessCode, Images)>> = Mutex::new(None);

fuzz_target!(|data: &[u8]| {
    let mut code = CODE.lock().unwrap_or_else(|e| e.into_inner());
    let (process, images) = code.get_or_insert_with(|| {
        let mut images = Images::default();
        (ProcessCode::new(std::process::id() as i32, &mut images), images)
    });
    let mut frames = Vec::new();
    for record in perf::records(data) {
        if let Record::Sample(mut sample) = record {
            // Half the inputs aim the instruction pointer at this binary's own code
            // (so the unwind tables are used, not only rejected).
            if sample.ip & 1 == 1 {
                sample.ip = (fuzz_target_address() as u64).wrapping_add(sample.ip % 4096);
            }
            process.unwind(&sample, images, &mut frames);
            assert!(frames.len() <= MAX_FRAMES);
        }
    }
});

fn fuzz_target_address() -> usize {
    fuzz_target_address as *const () as usize
}
