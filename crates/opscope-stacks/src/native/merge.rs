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

/// `native` and `python` (both innermost first) as one stack, innermost first, without
/// the interpreter's machinery: each run of the eval loop in the native stack gives
/// way to the Python frames it ran (a run of Python frames ends, outward, at the frame
/// C called: [`Frame::entry`]), so that C++ calling back into Python (an autograd
/// hook, a ctypes callback) stands between the two Python runs. `complete`: the
/// native stack reaches its thread's start. Where it was cut short, the outer runs all
/// go to the outermost loop seen (or, with no loop seen, the native frames stand under
/// the Python ones). `None` where the two disagree: a whole native stack with another
/// number of eval loops than the Python stack has runs was sampled at another moment
/// of the thread (a callback just returned or not yet called), and a Python stack
/// without native frames is better than one with another moment's.
pub fn merge<'a>(
    python: &'a [Frame],
    native: &'a [NativeFrame],
    complete: bool,
) -> Option<Vec<Merged<'a>>> {
    if python.is_empty() {
        return Some(native.iter().map(Merged::Native).collect());
    }
    let evals: Vec<usize> = native
        .iter()
        .enumerate()
        .filter(|(_, f)| f.is_python_eval())
        .map(|(i, _)| i)
        .collect();
    let mut runs: Vec<&[Frame]> = Vec::new();
    let mut start = 0;
    for (i, frame) in python.iter().enumerate() {
        if frame.entry || i + 1 == python.len() {
            runs.push(&python[start..=i]);
            start = i + 1;
        }
    }
    let agree = match complete {
        true => runs.len() == evals.len(),
        false => runs.len() >= evals.len(),
    };
    if !agree {
        return None;
    }
    let mut out = Vec::new();
    let natives = |out: &mut Vec<Merged<'a>>, frames: &'a [NativeFrame]| {
        out.extend(
            frames
                .iter()
                .filter(|f| !interpreter_machinery(f))
                .map(Merged::Native),
        );
    };
    let pythons = |out: &mut Vec<Merged<'a>>, runs: &[&'a [Frame]]| {
        out.extend(runs.iter().flat_map(|r| r.iter()).map(Merged::Python));
    };
    match (evals.first(), evals.last()) {
        (Some(&first), Some(&last)) => {
            natives(&mut out, &native[..first]);
            for (k, pair) in evals.windows(2).enumerate() {
                pythons(&mut out, &runs[k..=k]);
                natives(&mut out, &native[pair[0] + 1..pair[1]]);
            }
            pythons(&mut out, &runs[evals.len() - 1..]);
            natives(&mut out, &native[last + 1..]);
        }
        _ => {
            natives(&mut out, native);
            pythons(&mut out, &runs);
        }
    }
    Some(out)
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
            .map(|n| {
                // `*name`: a frame called from C.
                let entry = n.starts_with('*');
                let n = n.trim_start_matches('*');
                Frame {
                    name: n.into(),
                    qualname: n.into(),
                    filename: "t.py".into(),
                    line: Some(1),
                    first_line: 1,
                    entry,
                }
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
        // `main_loop` was called from C (the trampoline): two runs for two loops, the
        // second in the loop's cold part.
        let p = python(&["compress_it", "*main_loop", "*<module>"]);
        assert_eq!(
            names(&merge(&p, &n, true).unwrap()),
            [
                "deflate_slow",
                "zlib_compress",
                "py:compress_it",
                "py:main_loop",
                "callback_trampoline",
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
        assert_eq!(
            names(&merge(&p, &n, false).unwrap()),
            ["py:add", "__libc_start_main"]
        );
        let sleeping = native(&[
            "libc.so.6!clock_nanosleep",
            "python3.11!time_sleep",
            "python3.11!_PyEval_EvalFrameDefault",
        ]);
        assert_eq!(
            names(&merge(&p, &sleeping, false).unwrap()),
            ["clock_nanosleep", "time_sleep", "py:add"]
        );
        // A thread that ran no Python keeps every frame.
        assert_eq!(names(&merge(&[], &n, true).unwrap()).len(), 5);
    }

    /// C++ calling back into Python: each eval loop gives way to the Python frames it
    /// ran, the C++ between them stays.
    #[test]
    fn a_callback_from_cpp_stands_between_its_python_runs() {
        let n = native(&[
            "memcpy",
            "python3.11!_PyEval_EvalFrameDefault",
            "python3.11!_PyObject_Call",
            "libtorch_cpu.so!torch::autograd::Engine::evaluate_function",
            "libtorch_python.so!THPEngine_run_backward",
            "python3.11!_PyEval_EvalFrameDefault",
            "python3.11!Py_RunMain",
        ]);
        let p = python(&["*hook", "backward", "*train"]);
        assert_eq!(
            names(&merge(&p, &n, false).unwrap()),
            [
                "memcpy",
                "py:hook",
                "torch::autograd::Engine::evaluate_function",
                "THPEngine_run_backward",
                "py:backward",
                "py:train"
            ]
        );
        // The native copy ended before the outer loop: the outer run goes to the
        // outermost loop seen.
        let cut = &n[..3];
        assert_eq!(
            names(&merge(&p, cut, false).unwrap()),
            ["memcpy", "py:hook", "py:backward", "py:train"]
        );
        // A whole stack with another number of loops than runs: another moment.
        let one_run = python(&["hook", "backward", "*train"]);
        assert_eq!(merge(&one_run, &n, true), None);
        assert_eq!(merge(&one_run, &n, false), None);
        assert_eq!(merge(&p, cut, true), None);
        // The whole stack of the same moment merges as the cut one does.
        assert_eq!(names(&merge(&p, &n, true).unwrap()).len(), 6);
    }

    #[test]
    fn without_an_eval_loop_or_python_frames_nothing_is_lost() {
        let n = native(&["memcpy", "worker"]);
        let p = python(&["f"]);
        assert_eq!(
            names(&merge(&p, &n, false).unwrap()),
            ["memcpy", "worker", "py:f"]
        );
        assert_eq!(names(&merge(&[], &n, true).unwrap()), ["memcpy", "worker"]);
        let with_loop = native(&["leaf", "_PyEval_EvalFrameDefault", "main"]);
        assert_eq!(
            names(&merge(&[], &with_loop, true).unwrap()),
            ["leaf", "_PyEval_EvalFrameDefault", "main"]
        );
    }
}
