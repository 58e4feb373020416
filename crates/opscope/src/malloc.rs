//! How the Python module uses glibc's malloc: freed memory is kept for reuse. A load
//! makes and drops column buffers of many MB within seconds, and with glibc's defaults
//! each such buffer in the interpreter's process paid its page faults again.
//!
//! The executable no longer does this (2026-11-29): with the importers' buffers
//! prefaulted and reused, it bought no time (`info` and `convert --to parquet`, 0.25 and
//! 2 GB traces, ratio 0.99–1.01) and raised peak memory by 7 % on a 2 GB trace and by
//! 20–30 % on the shared 30–90 MB ones (blocks of several MB grown in the heap are
//! copied where `mremap` would grow a mapping in place).

/// Blocks up to 64 MiB come from the heap, and each heap keeps up to 512 MiB freed at
/// its top. `opscope.load` of eight ranks in Python: 0.84× the executable's time instead
/// of 1.15× (2026-11-26).
pub fn keep_freed_memory() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: mallopt only sets two of malloc's tunables, which glibc checks and
        // reads under its own lock; no memory of ours is involved.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 512 << 20);
        }
    });
}
