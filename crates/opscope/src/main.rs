//! The `opscope` executable: the command line of [`opscope::cli`].

use std::process::ExitCode;

fn main() -> ExitCode {
    keep_freed_memory();
    ExitCode::from(opscope::cli::run(std::env::args_os()))
}

/// A command makes and drops column buffers of many MB (the Parquet writer's chunks,
/// the importers' growing columns), and lives seconds. glibc's malloc gives each such
/// buffer fresh pages from the kernel and returns them on free, so every chunk paid
/// its page faults again: with buffers up to 64 MiB taken from the heap and 512 MiB of
/// freed heap kept, `convert --to parquet` of ResNet-50's trace took 44 ms instead of
/// 55 (peak memory of a 2 GB trace's load: +2.5 %). Only the executable does this: in
/// Python the process is the interpreter's.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets two of malloc's tunables; it runs before any thread
    // is started, and glibc checks the values.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 512 << 20);
    }
}
