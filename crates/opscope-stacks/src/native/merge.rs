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

/// `native` and `python` (both innermost first) as one stack, innermost first: the
/// native frames called from Python (below the innermost eval loop), the Python
/// frames, then the native frames that started the interpreter (above the outermost
/// eval loop). Native frames between two eval loops (C calling back into Python) are
/// left out: which Python frames each loop ran is not known from outside. A native
/// stack with no eval loop (its copy ended before reaching one, or the thread ran no
/// Python) keeps all its frames under the Python ones.
pub fn merge<'a>(python: &'a [Frame], native: &'a [NativeFrame]) -> Vec<Merged<'a>> {
    let evals: Vec<usize> = native
        .iter()
        .enumerate()
        .filter(|(_, f)| f.is_python_eval())
        .map(|(i, _)| i)
        .collect();
    let (inner, outer) = match (evals.first(), evals.last()) {
        (Some(&first), Some(&last)) if !python.is_empty() => {
            (&native[..first], &native[last + 1..])
        }
        // No Python frames to stand in for the loops: the native stack as it is.
        _ if python.is_empty() => (native, &[][..]),
        _ => (native, &[][..]),
    };
    inner
        .iter()
        .map(Merged::Native)
        .chain(python.iter().map(Merged::Python))
        .chain(outer.iter().map(Merged::Native))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(names: &[&str]) -> Vec<NativeFrame> {
        names
            .iter()
            .map(|n| NativeFrame {
                function: (*n).into(),
                module: "lib.so".into(),
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
