//! GPU kernel names as users read them: CUPTI hands over a kernel's mangled symbol
//! (`_ZN2at6native…`), where Kineto, TensorBoard and torch.profiler's tables show it
//! demangled by `__cxa_demangle`; recorded kernels are named the same way, so that a
//! kernel has one name whichever tool recorded it. GNU's demangler (libstdc++'s, found
//! at run time) is used where the machine has it, as Kineto does; elsewhere
//! `cpp_demangle`, whose output is brought to GNU's spelling.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

use hashbrown::HashMap;
use opscope_model::StrId;

/// `name` demangled, or `None` where it is no mangled C++ symbol (a C kernel, a symbol
/// neither demangler can read): such names stay as they are.
pub fn demangled(name: &str) -> Option<String> {
    if !name.starts_with("_Z") {
        return None;
    }
    by_gnu(name).or_else(|| demangled_in_rust(name))
}

/// `name` demangled by `cpp_demangle` alone, in GNU's spelling where the two differ
/// only in how integers are written (the fallback where there is no libstdc++).
pub fn demangled_in_rust(name: &str) -> Option<String> {
    if !name.starts_with("_Z") {
        return None;
    }
    let symbol = cpp_demangle::Symbol::new(name).ok()?;
    let text = symbol.demangle().ok().filter(|text| !text.is_empty())?;
    Some(gnu_literals(&text))
}

/// `char *__cxa_demangle(const char *mangled, char *buffer, size_t *length, int *status)`.
type CxaDemangle =
    unsafe extern "C" fn(*const c_char, *mut c_char, *mut usize, *mut c_int) -> *mut c_char;

/// Names longer than this are left to `cpp_demangle`: GNU's demangler recurses over
/// the symbol, and a name from a damaged or hostile file must not take the stack.
const GNU_MAX_LEN: usize = 16 << 10;

/// libstdc++'s `__cxa_demangle`, if this machine has libstdc++.
fn gnu_demangler() -> Option<CxaDemangle> {
    static GNU: OnceLock<Option<usize>> = OnceLock::new();
    let address = GNU.get_or_init(|| {
        // SAFETY: dlopen and dlsym with NUL-terminated names; the handle is kept open
        // (never closed) for the function's sake.
        unsafe {
            let library = libc::dlopen(
                c"libstdc++.so.6".as_ptr(),
                libc::RTLD_NOW | libc::RTLD_LOCAL,
            );
            if library.is_null() {
                return None;
            }
            let f: *mut c_void = libc::dlsym(library, c"__cxa_demangle".as_ptr());
            (!f.is_null()).then_some(f as usize)
        }
    });
    // SAFETY: the address of libstdc++'s `__cxa_demangle`, whose C signature is
    // `CxaDemangle` (the Itanium C++ ABI, §3.4).
    address.map(|a| unsafe { std::mem::transmute::<usize, CxaDemangle>(a) })
}

fn by_gnu(name: &str) -> Option<String> {
    if name.len() > GNU_MAX_LEN {
        return None;
    }
    let demangle = gnu_demangler()?;
    let mangled = CString::new(name).ok()?;
    let mut status: c_int = -1;
    // SAFETY: a NUL-terminated name, no buffer (the demangler allocates one with
    // malloc), and an out-pointer for the status.
    let text = unsafe {
        demangle(
            mangled.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut status,
        )
    };
    if text.is_null() {
        return None;
    }
    // SAFETY: on success a NUL-terminated string that malloc allocated, ours to free.
    let result = unsafe {
        let owned = CStr::from_ptr(text).to_string_lossy().into_owned();
        libc::free(text.cast());
        owned
    };
    (status == 0 && !result.is_empty()).then_some(result)
}

/// Integer template arguments as GNU writes them (`4ul`, `-1l`), where `cpp_demangle`
/// writes a cast (`(unsigned long)4`); `int` and the types GNU also casts stay as they
/// are.
fn gnu_literals(text: &str) -> String {
    const SUFFIXES: [(&str, &str); 5] = [
        ("(unsigned long long)", "ull"),
        ("(unsigned long)", "ul"),
        ("(unsigned int)", "u"),
        ("(long long)", "ll"),
        ("(long)", "l"),
    ];
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    'scan: while let Some(at) = rest.find('(') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        for (cast, suffix) in SUFFIXES {
            let Some(after) = rest.strip_prefix(cast) else {
                continue;
            };
            let sign = usize::from(after.starts_with('-'));
            let digits = after[sign..].bytes().take_while(u8::is_ascii_digit).count();
            if digits > 0 {
                out.push_str(&after[..sign + digits]);
                out.push_str(suffix);
                rest = &after[sign + digits..];
                continue 'scan;
            }
        }
        out.push('(');
        rest = &rest[1..];
    }
    out.push_str(rest);
    out
}

/// Each distinct kernel name demangled once (a trace names the same few hundred
/// kernels millions of times).
#[derive(Default)]
pub(crate) struct Demangler {
    seen: HashMap<StrId, StrId>,
}

impl Demangler {
    /// The id of `name` demangled, if it was seen before.
    pub fn get(&self, name: StrId) -> Option<StrId> {
        self.seen.get(&name).copied()
    }

    /// Demangles `text` (the text of `name`), interning the result with `intern`.
    pub fn learn(&mut self, name: StrId, text: &str, intern: impl FnOnce(&str) -> StrId) -> StrId {
        let done = demangled(text).map_or(name, |d| intern(&d));
        self.seen.insert(name, done);
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mangled_names_are_demangled_and_others_kept() {
        for demangle in [demangled, demangled_in_rust] {
            assert_eq!(
                demangle("_Z5saxpyPdS_S_di").as_deref(),
                Some("saxpy(double*, double*, double*, double, int)")
            );
            assert_eq!(demangle("_Zgarbage"), None);
        }
        assert_eq!(
            gnu_literals("f<(unsigned long)4, (long)-1, (int)2, (unsigned long)x>(long)"),
            "f<4ul, -1l, (int)2, (unsigned long)x>(long)"
        );
        for plain in ["gemm", "Memcpy HtoD", "_Z", "_Zgarbage", ""] {
            assert_eq!(demangled(plain), None, "{plain}");
        }
    }
}
