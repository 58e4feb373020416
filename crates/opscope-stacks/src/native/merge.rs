//! py-spy's `--native` rule: a thread's native stack with its Python frames put where
//! the interpreter's eval loop ran them, so that one stack reads from `main` through
//! the Python function to the C++ kernel it called.

use super::NativeFrame;
use crate::Frame;

/// One frame of a merged stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Merged<'a> {
    Python(&'a Frame),
    Native(&'a NativeFrame),
}

/// Interpreter functions kept in a merged stack, by their name's first word: the
/// builtins that are a program's own calls (`time.sleep`, `os.read`, a lock's
/// acquire) rather than the interpreter's machinery (py-spy keeps the same).
const INTERPRETER_KEPT: [&str; 11] = [
    "time",
    "sys",
    "gc",
    "os",
    "unicode",
    "thread",
    "stringio",
    "sre",
    "PyGilState",
    "PyThread",
    "lock",
];

/// A frame of the interpreter's own machinery (object allocation, calls, integer
/// arithmetic while running bytecode): in a stack with Python frames it is the
/// Python function's own time, as py-spy shows it.
fn interpreter_machinery(frame: &NativeFrame) -> bool {
    let module = &*frame.module;
    let interpreter = module.starts_with("libpython") || module.starts_with("python");
    let first = frame.function.split(['_', '.']).find(|w| !w.is_empty());
    interpreter && !first.is_some_and(|w| INTERPRETER_KEPT.contains(&w))
}

/// `native` and `python` (both innermost first) as one stack, innermost first: the
/// native frames called from Python (below the innermost eval loop), the Python
/// frames, then the native frames that started the interpreter (above the outermost
/// eval loop), without the interpreter's machinery. Native frames between two eval
/// loops (C calling back into Python) are left out: which Python frames each loop ran
/// is not known from outside. A native stack with no eval loop (its copy ended before
/// reaching one) keeps its frames under the Python ones; with no Python frames (the
/// thread ran none) it stays whole.
pub fn merge<'a>(python: &'a [Frame], native: &'a [NativeFrame]) -> Vec<Merged<'a>> {
    if python.is_empty() {
        return native.iter().map(Merged::Native).collect();
    }
    let evals: Vec<usize> = native
        .iter()
        .enumerate()
        .filter(|(_, f)| f.is_python_eval())
        .map(|(i, _)| i)
        .collect();
    let (inner, outer) = match (evals.first(), evals.last()) {
        (Some(&first), Some(&last)) => (&native[..first], &native[last + 1..]),
        _ => (native, &[][..]),
    };
    let own = |f: &&NativeFrame| !interpreter_machinery(f);
    inner
        .iter()
        .filter(own)
        .map(Merged::Native)
        .chain(python.iter().map(Merged::Python))
        .chain(outer.iter().filter(own).map(Merged::Native))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames named `module!function`, or `function` in `lib.so`.
    fn native(names: &[&str]) -> Vec<NativeFrame> {
        names
            .iter()
            .map(|n| {
                let (module, function) = n.split_once('!').unwrap_or(("lib.so", n));
                NativeFrame {
                    function: function.into(),
                    module: module.into(),
                }
            })
            .collect()
    }

    fn python(names: &[&str]) -> Vec<Frame> {
        names
            .iter()
            .map(|n| Frame {
                name: (*n).into(),
                qualname: (*n).into(),
                filename: "t.py".into(),
                line: Some(1),
                first_line: 1,
            })
            .collect()
    }

    fn names(merged: &[Merged]) -> Vec<String> {
        merged
            .iter()
            .map(|m| match m {
                Merged::Python(f) => format!("py:{}", f.name),
                Merged::Native(f) => f.function.to_string(),
            })
            .collect()
    }

    #[test]
    fn python_frames_stand_where_the_eval_loops_were() {
        let n = native(&[
            "deflate_slow",
            "zlib_compress",
            "_PyEval_EvalFrameDefault",
            "callback_trampoline",
            "_PyEval_EvalFrameDefault.cold",
            "Py_RunMain",
            "main",
        ]);
        let p = python(&["compress_it", "main_loop", "<module>"]);
        assert_eq!(
            names(&merge(&p, &n)),
            [
                "deflate_slow",
                "zlib_compress",
                "py:compress_it",
                "py:main_loop",
                "py:<module>",
                "Py_RunMain",
                "main"
            ]
        );
    }

    /// py-spy's rule: the interpreter's machinery under and over Python frames is
    /// the Python function's own time; its builtins that are the program's calls stay.
    #[test]
    fn the_interpreters_machinery_goes_and_its_program_calls_stay() {
        let n = native(&[
            "libpython3.11.so.1.0!_PyObject_Malloc",
            "libpython3.11.so.1.0!x_add",
            "libpython3.11.so.1.0!_PyEval_EvalFrameDefault",
            "libpython3.11.so.1.0!Py_RunMain",
            "libc.so.6!__libc_start_main",
        ]);
        let p = python(&["add"]);
        assert_eq!(names(&merge(&p, &n)), ["py:add", "__libc_start_main"]);
        let sleeping = native(&[
            "libc.so.6!clock_nanosleep",
            "python3.11!time_sleep",
            "python3.11!_PyEval_EvalFrameDefault",
        ]);
        assert_eq!(
            names(&merge(&p, &sleeping)),
            ["clock_nanosleep", "time_sleep", "py:add"]
        );
        // A thread that ran no Python keeps every frame.
        assert_eq!(names(&merge(&[], &n)).len(), 5);
    }

    #[test]
    fn without_an_eval_loop_or_python_frames_nothing_is_lost() {
        let n = native(&["memcpy", "worker"]);
        let p = python(&["f"]);
        assert_eq!(names(&merge(&p, &n)), ["memcpy", "worker", "py:f"]);
        assert_eq!(names(&merge(&[], &n)), ["memcpy", "worker"]);
        let with_loop = native(&["leaf", "_PyEval_EvalFrameDefault", "main"]);
        assert_eq!(
            names(&merge(&[], &with_loop)),
            ["leaf", "_PyEval_EvalFrameDefault", "main"]
        );
    }
}
