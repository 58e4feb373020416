//! Where CPython keeps what a stack walk reads, per minor version (x86-64 and other
//! LP64 release builds). 3.9 to 3.12 have no `_Py_DebugOffsets`: their numbers are
//! measured on the release builds (gdb `&((T*)0)->field`) and agree with Meta's
//! strobelight tables. 3.13 says where its fields are itself, in the `_Py_DebugOffsets`
//! at the start of `_PyRuntime` ([`from_debug_offsets`]). Up to 3.10 frames are
//! `PyFrameObject`s, from 3.11 `_PyInterpreterFrame`s.

/// Byte offsets, each from the start of the structure its group names.
#[derive(Clone, Debug)]
pub struct Layout {
    /// `_PyRuntime.interpreters.head`.
    pub interpreters_head: u64,
    /// The thread holding the GIL.
    pub gil: Gil,
    /// `PyInterpreterState.threads.head`.
    pub threads_head: u64,
    /// `PyThreadState`: `next`, `thread_id` (pthread_t), `native_thread_id`.
    pub thread_next: u64,
    pub thread_id: u64,
    /// 3.11+; before, the thread's tid is found in its `pthread_t`'s structure.
    pub native_thread_id: Option<u64>,
    /// Where a thread's innermost frame is.
    pub current_frame: CurrentFrame,
    /// `_PyInterpreterFrame`: `previous`, `f_code`, `prev_instr`, `owner`.
    pub frame_previous: u64,
    pub frame_code: u64,
    pub frame_prev_instr: u64,
    pub frame_owner: u64,
    /// The owner value of a frame the C stack owns (an entry shim), if the version has
    /// one (3.12: `FRAME_OWNED_BY_CSTACK`).
    pub owner_cstack: Option<u8>,
    /// `_PyInterpreterFrame.is_entry` (3.11; later versions mark entries with shims).
    pub frame_is_entry: Option<u64>,
    /// Frame objects (3.9, 3.10) in place of interpreter frames.
    pub frame_object: Option<FrameObject>,
    /// `PyCodeObject` (no `co_qualname` before 3.11: `co_name` is read in its place).
    pub code_firstlineno: u64,
    pub code_filename: u64,
    pub code_name: u64,
    pub code_qualname: u64,
    pub code_linetable: u64,
    pub code_code_adaptive: u64,
    /// `_co_firsttraceable`, where known (3.13 does not say): a frame before it has
    /// not started.
    pub code_firsttraceable: Option<u64>,
    /// `sizeof(PyASCIIObject)` and `sizeof(PyCompactUnicodeObject)`: where a compact
    /// string's characters start.
    pub ascii_size: u64,
    pub compact_size: u64,
    pub line_table: LineTable,
}

/// 3.9 and 3.10's frames: `PyFrameObject.f_lasti`, an int counting `unit` bytes
/// (3.9 bytes, 3.10 code units of 2).
#[derive(Clone, Copy, Debug)]
pub struct FrameObject {
    pub lasti: u64,
    pub unit: u64,
}

/// How a code object maps bytecode offsets to lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineTable {
    /// 3.9: `co_lnotab`.
    Lnotab,
    /// 3.10: `co_linetable`, pairs of byte delta and line delta (-128: no line).
    Pairs,
    /// 3.11+: the location table.
    Locations,
}

#[derive(Clone, Copy, Debug)]
pub enum CurrentFrame {
    /// 3.11, 3.12: `PyThreadState.cframe`, then `_PyCFrame.current_frame`.
    ViaCFrame { cframe: u64, current_frame: u64 },
    /// 3.13: `PyThreadState.current_frame`.
    Direct(u64),
}

#[derive(Clone, Copy, Debug)]
pub enum Gil {
    /// 3.11: `_PyRuntime.gilstate.tstate_current`, the holder's thread state.
    RuntimeCurrent(u64),
    /// 3.12, 3.13: the interpreter's `_gil.last_holder` (a thread state) and
    /// `_gil.locked`, both from the interpreter's start.
    Interpreter { last_holder: u64, locked: u64 },
}

/// `FRAME_OWNED_BY_GENERATOR`, the same in 3.11 to 3.13.
pub const OWNED_BY_GENERATOR: u8 = 1;

pub static PY311: Layout = Layout {
    interpreters_head: 40,
    gil: Gil::RuntimeCurrent(576),
    threads_head: 16,
    thread_next: 8,
    thread_id: 152,
    native_thread_id: Some(160),
    current_frame: CurrentFrame::ViaCFrame {
        cframe: 56,
        current_frame: 8,
    },
    frame_previous: 48,
    frame_code: 32,
    frame_prev_instr: 56,
    frame_owner: 69,
    owner_cstack: None,
    frame_is_entry: Some(68),
    frame_object: None,
    code_firstlineno: 72,
    code_filename: 112,
    code_name: 120,
    code_qualname: 128,
    code_linetable: 136,
    code_code_adaptive: 184,
    code_firsttraceable: Some(168),
    ascii_size: 48,
    compact_size: 72,
    line_table: LineTable::Locations,
};

pub static PY312: Layout = Layout {
    interpreters_head: 40,
    gil: Gil::Interpreter {
        last_holder: 1048,
        locked: 1056,
    },
    threads_head: 72,
    thread_next: 8,
    thread_id: 136,
    native_thread_id: Some(144),
    current_frame: CurrentFrame::ViaCFrame {
        cframe: 56,
        current_frame: 0,
    },
    frame_previous: 8,
    frame_code: 0,
    frame_prev_instr: 56,
    frame_owner: 70,
    owner_cstack: Some(3),
    frame_is_entry: None,
    frame_object: None,
    code_firstlineno: 68,
    code_filename: 112,
    code_name: 120,
    code_qualname: 128,
    code_linetable: 136,
    code_code_adaptive: 192,
    code_firsttraceable: Some(176),
    ascii_size: 40,
    compact_size: 56,
    line_table: LineTable::Locations,
};

/// 3.10: frame objects, `f_lasti` in code units, `co_linetable` of pairs.
pub static PY310: Layout = Layout {
    interpreters_head: 32,
    gil: Gil::RuntimeCurrent(568),
    threads_head: 8,
    thread_next: 8,
    thread_id: 176,
    native_thread_id: None,
    current_frame: CurrentFrame::Direct(24),
    frame_previous: 24,
    frame_code: 32,
    // Interpreter frames' fields: unused with frame objects.
    frame_prev_instr: 0,
    frame_owner: 0,
    owner_cstack: None,
    frame_is_entry: None,
    frame_object: Some(FrameObject { lasti: 96, unit: 2 }),
    code_firstlineno: 40,
    code_filename: 104,
    code_name: 112,
    code_qualname: 112,
    code_linetable: 120,
    code_code_adaptive: 0,
    code_firsttraceable: None,
    ascii_size: 48,
    compact_size: 72,
    line_table: LineTable::Pairs,
};

/// 3.9: as 3.10, but `f_lasti` in bytes, at 104, and `co_lnotab`.
pub static PY39: Layout = Layout {
    frame_object: Some(FrameObject {
        lasti: 104,
        unit: 1,
    }),
    line_table: LineTable::Lnotab,
    ..PY310
};

/// The layout of Python `major.minor` where this table has it (3.9 to 3.12).
pub fn of(major: u8, minor: u8) -> Option<&'static Layout> {
    match (major, minor) {
        (3, 9) => Some(&PY39),
        (3, 10) => Some(&PY310),
        (3, 11) => Some(&PY311),
        (3, 12) => Some(&PY312),
        _ => None,
    }
}

/// `_Py_DebugOffsets`'s size in 3.13 (584 bytes), and its first bytes.
pub const DEBUG_OFFSETS_313: usize = 584;
pub const DEBUG_COOKIE: &[u8; 8] = b"xdebugpy";

/// The layout 3.13's `_Py_DebugOffsets` describes (`Include/internal/
/// pycore_debug_offsets.h`): after the cookie, `version` and `free_threaded`, groups of
/// u64 offsets — `runtime_state` (size, finalizing, interpreters_head),
/// `interpreter_state` (13), `thread_state` (9), `interpreter_frame` (6), `code_object`
/// (10), then object layouts up to `unicode_object` (size, state, length,
/// asciiobject_size). `None` for another version or a free-threaded build, whose
/// structures this reader does not know.
pub fn from_debug_offsets(bytes: &[u8]) -> Option<Layout> {
    if bytes.len() < DEBUG_OFFSETS_313 || &bytes[..8] != DEBUG_COOKIE {
        return None;
    }
    let field = |index: usize| {
        let at = 8 * index;
        u64::from_ne_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
    };
    let version = field(1);
    if version >> 16 != 0x030D || field(2) != 0 {
        return None;
    }
    // Field indexes: 0 cookie, 1 version, 2 free_threaded; runtime_state from 3.
    let (runtime, interp, thread, frame, code) = (3, 6, 19, 28, 34);
    // unicode_object: after pyobject (2), type_object (4), tuple, list (3 each), dict
    // (3), float (2), long (3), bytes (3).
    let unicode = code + 10 + 2 + 4 + 3 + 3 + 3 + 2 + 3 + 3;
    Some(Layout {
        interpreters_head: field(runtime + 2),
        gil: Gil::Interpreter {
            last_holder: field(interp + 12),
            locked: field(interp + 11),
        },
        threads_head: field(interp + 3),
        thread_next: field(thread + 2),
        thread_id: field(thread + 5),
        native_thread_id: Some(field(thread + 6)),
        current_frame: CurrentFrame::Direct(field(thread + 4)),
        frame_previous: field(frame + 1),
        frame_code: field(frame + 2),
        frame_prev_instr: field(frame + 3),
        frame_owner: field(frame + 5),
        owner_cstack: Some(3),
        frame_is_entry: None,
        frame_object: None,
        code_firstlineno: field(code + 5),
        code_filename: field(code + 1),
        code_name: field(code + 2),
        code_qualname: field(code + 3),
        code_linetable: field(code + 4),
        code_code_adaptive: field(code + 9),
        code_firsttraceable: None,
        ascii_size: field(unicode + 3),
        // A compact non-ASCII string's characters follow `PyCompactUnicodeObject`:
        // the ASCII header, then utf8_length and utf8 (two words).
        compact_size: field(unicode + 3) + 16,
        line_table: LineTable::Locations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 584 bytes of `_Py_DebugOffsets` read from a running CPython 3.13.0 (x86-64):
    /// the offsets come out as gdb measures those fields in that build.
    #[test]
    fn cpython_3_13_debug_offsets_give_its_layout() {
        let bytes = include_bytes!("../../tests/fixtures/debug_offsets_3.13.0.bin");
        let l = from_debug_offsets(bytes).expect("3.13's offsets");
        assert_eq!(l.interpreters_head, 632);
        assert_eq!(l.threads_head, 7344);
        assert!(matches!(
            l.gil,
            Gil::Interpreter {
                last_holder: 7760,
                locked: 7768
            }
        ));
        assert_eq!(
            (l.thread_next, l.thread_id, l.native_thread_id),
            (8, 152, Some(160))
        );
        assert!(matches!(l.current_frame, CurrentFrame::Direct(72)));
        assert_eq!(
            (l.frame_previous, l.frame_code, l.frame_prev_instr),
            (8, 0, 56)
        );
        assert_eq!(l.frame_owner, 70);
        assert_eq!(
            (l.code_filename, l.code_name, l.code_qualname),
            (112, 120, 128)
        );
        assert_eq!((l.code_linetable, l.code_firstlineno), (136, 68));
        assert_eq!(l.code_code_adaptive, 200);
        assert_eq!((l.ascii_size, l.compact_size), (40, 56));
        // Not 3.13's: refused.
        let mut other = bytes.to_vec();
        other[8..16].copy_from_slice(&0x030E_00F0u64.to_ne_bytes());
        assert!(from_debug_offsets(&other).is_none());
        assert!(from_debug_offsets(&bytes[..100]).is_none());
        let mut free_threaded = bytes.to_vec();
        free_threaded[16..24].copy_from_slice(&1u64.to_ne_bytes());
        assert!(from_debug_offsets(&free_threaded).is_none());
    }
}
