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
    if let Err(e) = sampler.follow(pid) {
        assert!(
            std::env::var_os("CI").is_none(),
            "native sampling refused in CI: {e}"
        );
        eprintln!("skipped: {e}");
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
    if let Err(e) = sampler.follow(pid) {
        assert!(
            std::env::var_os("CI").is_none(),
            "native sampling refused in CI: {e}"
        );
        eprintln!("skipped: {e}");
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
