//! The environment variables through which `opscope record` (and `opscope env`) set up
//! the injected library and the Python bootstrap. The bootstrap
//! (`crates/opscope/src/record/sitecustomize.py`) reads some of them by name: a test
//! holds its names to [`ALL`].

/// The agent's socket (set by `opscope record` when an agent runs, by `opscope env`).
pub const AGENT: &str = "OPSCOPE_AGENT";
/// The token a client gives a TCP agent.
pub const AGENT_TOKEN: &str = "OPSCOPE_AGENT_TOKEN";
/// Seconds a client waits for the agent's answer.
pub const AGENT_TIMEOUT: &str = "OPSCOPE_AGENT_TIMEOUT";
/// `1`: send to the agent only, write no file.
pub const LIVE_ONLY: &str = "OPSCOPE_LIVE_ONLY";
/// The job a process belongs to (`opscope record --job`), before what a scheduler says.
pub const JOB: &str = "OPSCOPE_JOB";
/// Where the session's files go.
pub const SESSION_DIR: &str = "OPSCOPE_SESSION_DIR";
/// Milliseconds between two drains of the threads' buffers.
pub const FLUSH_MS: &str = "OPSCOPE_FLUSH_MS";
/// Each thread's ring, in KiB.
pub const BUFFER_KB: &str = "OPSCOPE_BUFFER_KB";
/// Set: time with `clock_gettime`, never the TSC.
pub const NO_TSC: &str = "OPSCOPE_NO_TSC";
/// `1`: record CUDA activity through CUPTI (`--cupti`).
pub const CUPTI: &str = "OPSCOPE_CUPTI";
/// `0`: the bootstrap installs no framework hooks (`--no-python`).
pub const PYTHON_HOOKS: &str = "OPSCOPE_PYTHON_HOOKS";
/// The injected library's path, instead of the one the executable carries.
pub const RECORD_LIB: &str = "OPSCOPE_RECORD_LIB";
/// The model cache's directory (`off`: no cache).
pub const CACHE_DIR: &str = "OPSCOPE_CACHE_DIR";

/// Every name above.
pub const ALL: [&str; 13] = [
    AGENT,
    AGENT_TOKEN,
    AGENT_TIMEOUT,
    LIVE_ONLY,
    JOB,
    SESSION_DIR,
    FLUSH_MS,
    BUFFER_KB,
    NO_TSC,
    CUPTI,
    PYTHON_HOOKS,
    RECORD_LIB,
    CACHE_DIR,
];
