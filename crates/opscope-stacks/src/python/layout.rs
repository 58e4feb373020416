//! Where CPython keeps what a stack walk reads, per minor version (x86-64 and other
//! LP64 release builds). 3.11 and 3.12 have no `_Py_DebugOffsets`: their numbers are
//! measured on the release builds (gdb `&((T*)0)->field`) and agree with Meta's
//! strobelight tables; 3.13+ will read the interpreter's own `_Py_DebugOffsets`.

/// Byte offsets, each from the start of the structure its group names.
#[derive(Debug)]
pub struct Layout {
    /// `_PyRuntime.interpreters.head`.
    pub interpreters_head: u64,
    /// The thread holding the GIL.
    pub gil: Gil,
    /// `PyInterpreterState.threads.head`.
    pub threads_head: u64,
    /// `PyThreadState`: `next`, `cframe`, `thread_id` (pthread_t), `native_thread_id`.
    pub thread_next: u64,
    pub thread_cframe: u64,
    pub thread_id: u64,
    pub native_thread_id: u64,
    /// `_PyCFrame.current_frame`.
    pub cframe_current_frame: u64,
    /// `_PyInterpreterFrame`: `previous`, `f_code`, `prev_instr`, `owner`.
    pub frame_previous: u64,
    pub frame_code: u64,
    pub frame_prev_instr: u64,
    pub frame_owner: u64,
    /// The owner value of a frame the C stack owns (an entry shim), if the version has
    /// one (3.12: `FRAME_OWNED_BY_CSTACK`).
    pub owner_cstack: Option<u8>,
    /// `PyCodeObject`.
    pub code_firstlineno: u64,
    pub code_filename: u64,
    pub code_name: u64,
    pub code_qualname: u64,
    pub code_linetable: u64,
    pub code_code_adaptive: u64,
    pub code_firsttraceable: u64,
    /// `sizeof(PyASCIIObject)` and `sizeof(PyCompactUnicodeObject)`: where a compact
    /// string's characters start.
    pub ascii_size: u64,
    pub compact_size: u64,
}

#[derive(Debug)]
pub enum Gil {
    /// 3.11: `_PyRuntime.gilstate.tstate_current`, the holder's thread state.
    RuntimeCurrent(u64),
    /// 3.12: the interpreter's `_gil.last_holder` (a thread state) and `_gil.locked`.
    Interpreter { last_holder: u64, locked: u64 },
}

/// `FRAME_OWNED_BY_GENERATOR`, the same in 3.11 and 3.12.
pub const OWNED_BY_GENERATOR: u8 = 1;

pub static PY311: Layout = Layout {
    interpreters_head: 40,
    gil: Gil::RuntimeCurrent(576),
    threads_head: 16,
    thread_next: 8,
    thread_cframe: 56,
    thread_id: 152,
    native_thread_id: 160,
    cframe_current_frame: 8,
    frame_previous: 48,
    frame_code: 32,
    frame_prev_instr: 56,
    frame_owner: 69,
    owner_cstack: None,
    code_firstlineno: 72,
    code_filename: 112,
    code_name: 120,
    code_qualname: 128,
    code_linetable: 136,
    code_code_adaptive: 184,
    code_firsttraceable: 168,
    ascii_size: 48,
    compact_size: 72,
};

pub static PY312: Layout = Layout {
    interpreters_head: 40,
    gil: Gil::Interpreter {
        last_holder: 1048,
        locked: 1056,
    },
    threads_head: 72,
    thread_next: 8,
    thread_cframe: 56,
    thread_id: 136,
    native_thread_id: 144,
    cframe_current_frame: 0,
    frame_previous: 8,
    frame_code: 0,
    frame_prev_instr: 56,
    frame_owner: 70,
    owner_cstack: Some(3),
    code_firstlineno: 68,
    code_filename: 112,
    code_name: 120,
    code_qualname: 128,
    code_linetable: 136,
    code_code_adaptive: 192,
    code_firsttraceable: 176,
    ascii_size: 40,
    compact_size: 56,
};

/// The layout of Python `major.minor`, where one is known.
pub fn of(major: u8, minor: u8) -> Option<&'static Layout> {
    match (major, minor) {
        (3, 11) => Some(&PY311),
        (3, 12) => Some(&PY312),
        _ => None,
    }
}
