//! The native sampler on a thread of this test whose call chain is known by
//! construction: every sample taken inside `spin_here` must unwind through
//! `middle_frame` and `outer_frame`, in that order, with their names from the
//! test binary's symbol table.
#![cfg(target_arch = "x86_64")]

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opscope_stacks::native::NativeSampler;

/// Whether `sampler` follows `pid`: off CI a refusing kernel skips the test, saying
/// why; in CI it fails it.
fn follows(sampler: &mut NativeSampler, pid: i32) -> bool {
    match sampler.follow(pid) {
        Ok(()) => true,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "native sampling refused in CI: {e}"
            );
            eprintln!("skipped: {e}");
            false
        }
    }
}

#[inline(never)]
fn spin_here(stop: &AtomicBool) -> u64 {
    let mut x = 1u64;
    while !stop.load(Ordering::Relaxed) {
        for i in 0..10_000u64 {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    x
}

#[inline(never)]
fn middle_frame(stop: &AtomicBool) -> u64 {
    black_box(spin_here(stop)) + 1
}

#[inline(never)]
fn outer_frame(stop: &AtomicBool) -> u64 {
    black_box(middle_frame(stop)) + 1
}

#[test]
fn a_known_call_chain_unwinds_through_every_frame() {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let worker = std::thread::spawn(move || outer_frame(&flag));
    let pid = std::process::id() as i32;
    let mut sampler = NativeSampler::new(200);
    if !follows(&mut sampler, pid) {
        stop.store(true, Ordering::Relaxed);
        worker.join().unwrap();
        return;
    }
    // Waits for samples, not for time (a loaded machine runs the worker less).
    let began = Instant::now();
    while sampler.len() < 60 && began.elapsed() < Duration::from_secs(600) {
        std::thread::sleep(Duration::from_millis(20));
        sampler.drain();
    }
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    let native = sampler.finish();
    let in_spin: Vec<_> = native
        .samples
        .iter()
        .filter(|s| {
            s.frames
                .first()
                .is_some_and(|f| f.function.contains("spin_here"))
        })
        .collect();
    assert!(
        in_spin.len() >= 20,
        "{} samples in spin_here of {}",
        in_spin.len(),
        native.samples.len()
    );
    let mut whole = 0;
    for s in &in_spin {
        assert!(s.tid != pid, "the worker's samples carry its own tid");
        let names: Vec<&str> = s.frames.iter().map(|f| &*f.function).collect();
        let at = |name: &str| names.iter().position(|n| n.contains(name));
        if let (Some(m), Some(o)) = (at("middle_frame"), at("outer_frame")) {
            assert_eq!((m, o), (1, 2), "{names:?}");
            whole += 1;
        }
        assert!(
            s.frames[0].module.starts_with("native"),
            "{:?}",
            s.frames[0]
        );
    }
    // The kernel may sample while the stack is being set up for the call (a
    // prologue the tables describe too): nearly all must unwind whole.
    assert!(
        whole * 10 >= in_spin.len() * 9,
        "{whole} of {} unwound whole",
        in_spin.len()
    );
}

/// A process that has ended (or left the tree) is let go: its threads' events (a file
/// descriptor and a buffer each) do not pile up over a long run's workers.
#[test]
fn an_ended_process_is_let_go() {
    let mut child = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let mut sampler = NativeSampler::new(100);
    if !follows(&mut sampler, pid) {
        child.kill().unwrap();
        child.wait().unwrap();
        return;
    }
    assert_eq!(sampler.followed(), 1);
    sampler.retain_processes(&[pid]);
    assert_eq!(sampler.followed(), 1);
    child.kill().unwrap();
    child.wait().unwrap();
    sampler.retain_processes(&[]);
    assert_eq!(sampler.followed(), 0);
}

/// A return address in a library mapped after the process's map was read (a
/// program importing an extension while sampled) is found once the map is read
/// again: this process's map is read, libz is loaded, and a stack whose innermost
/// frame is at the entry of a function of this binary (known from the start)
/// returns into libz's `deflate`.
#[test]
fn a_library_loaded_after_the_map_was_read_is_found() {
    use opscope_stacks::native::images::Images;
    use opscope_stacks::native::perf::RawSample;
    use opscope_stacks::native::unwind::{Address, ProcessCode};

    let mut images = Images::default();
    let mut code = ProcessCode::new(std::process::id() as i32, &mut images);
    // SAFETY: dlopen/dlsym with NUL-terminated names; the handle is never closed, so
    // the address stays valid for the test.
    let deflate = unsafe {
        let handle = libc::dlopen(c"libz.so.1".as_ptr(), libc::RTLD_NOW);
        if handle.is_null() {
            assert!(std::env::var_os("CI").is_none(), "no libz.so.1 in CI");
            eprintln!("skipped: no libz.so.1");
            return;
        }
        libc::dlsym(handle, c"deflate".as_ptr()) as u64
    };
    assert_ne!(deflate, 0);
    // The map is read again at most every 50 ms: a sample this late may have it read.
    std::thread::sleep(Duration::from_millis(60));
    let entry = spin_here as *const () as u64;
    let stack = (deflate + 16).to_ne_bytes();
    let sample = RawSample {
        pid: std::process::id() as i32,
        tid: std::process::id() as i32,
        time: 0,
        ip: entry,
        sp: 0x7000_0000,
        bp: 0,
        stack: &stack,
    };
    let mut frames = Vec::new();
    code.unwind(&sample, &mut images, &mut frames);
    assert!(frames.len() >= 2, "{frames:?}");
    let Address::Code { image, .. } = frames[1] else {
        panic!("the return into libz is no known code: {frames:?}");
    };
    assert!(
        images.images[image as usize].name.starts_with("libz"),
        "{frames:?}"
    );
}

/// Code mapped after sampling began is named: a Python program that imports ctypes
/// only after it was followed (so its map, read then, has no `_ctypes` or libffi) and
/// then sorts with a Python comparison through libc's `qsort`. Samples inside the
/// comparison run in the interpreter (mapped from the start) under libffi's and
/// ctypes' frames, which must unwind and be named too.
#[test]
fn code_loaded_after_sampling_began_is_named() {
    let python = std::env::var("OPSCOPE_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/record/stacks_callback.py");
    let program = format!(
        "import time; time.sleep(0.3); exec(compile(open({s:?}).read(), {s:?}, 'exec'))",
        s = script.display().to_string()
    );
    let mut child = match std::process::Command::new(&python)
        .args(["-c", &program])
        .env("STACKS_CALLBACK_ROUNDS", "2")
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            assert!(std::env::var_os("CI").is_none(), "no {python} in CI: {e}");
            eprintln!("skipped: no {python}: {e}");
            return;
        }
    };
    let mut sampler = NativeSampler::new(400);
    if !follows(&mut sampler, child.id() as i32) {
        child.kill().unwrap();
        child.wait().unwrap();
        return;
    }
    // Until the program ends (its own work bounds the wait).
    while child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(20));
        sampler.drain();
    }
    assert!(child.wait().unwrap().success());
    let native = sampler.finish();
    let named = |name: &str| {
        native
            .samples
            .iter()
            .filter(|s| s.frames.iter().any(|f| &*f.function == name))
            .count()
    };
    assert!(
        named("ffi_call") > 0 && named("qsort_r") > 0,
        "no ffi_call/qsort_r in {} samples",
        native.samples.len()
    );
}
