//! Recorded kernel names are demangled as `c++filt` (GNU's demangler, the one behind
//! `__cxa_demangle`, which Kineto uses) demangles them: checked on every mangled kernel
//! name of the shared Nsight Systems exports and on the C++ symbols libstdc++ exports,
//! thousands of templates, each compared with what `c++filt` says; and without
//! libstdc++ (`cpp_demangle` alone), on the kernel names.

#![cfg(feature = "nsys")]

use std::io::Write;
use std::process::{Command, Stdio};

use opscope_formats::kernel_names::{demangled, demangled_in_rust};

fn on_ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// `c++filt`'s reading of each name, one per line, or `None` without it (off CI).
fn cxxfilt(names: &[String]) -> Option<Vec<String>> {
    let child = Command::new("c++filt")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if !on_ci() => {
            eprintln!("skipped: no c++filt ({e}); binutils has it");
            return None;
        }
        Err(e) => panic!("c++filt: {e}"),
    };
    let mut stdin = child.stdin.take().unwrap();
    let input = names.join("\n") + "\n";
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success());
    Some(
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect(),
    )
}

/// The mangled kernel names of the shared Nsight Systems exports.
fn nsys_kernel_symbols() -> Vec<String> {
    let Some(shared) = std::env::var_os("OPSCOPE_SHARED") else {
        return Vec::new();
    };
    let dir = std::path::Path::new(&shared).join("traces/nsys-sqlite");
    let mut files = Vec::new();
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "sqlite") {
                files.push(p);
            }
        }
    }
    let mut names = Vec::new();
    for f in files {
        let conn =
            rusqlite::Connection::open_with_flags(&f, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .unwrap();
        let Ok(mut q) = conn.prepare(
            "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k \
             JOIN StringIds s ON k.mangledName = s.id",
        ) else {
            continue;
        };
        let rows = q.query_map([], |r| r.get::<_, String>(0)).unwrap();
        names.extend(rows.flatten());
    }
    names
}

/// The C++ symbols a system library exports (`nm -D`), or none without `nm`.
fn exported_symbols(library: &str) -> Vec<String> {
    let Ok(out) = Command::new("nm")
        .args(["-D", "--defined-only", library])
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        // `name@@GLIBCXX_3.4`: the version is no part of the symbol.
        .filter_map(|s| s.split('@').next())
        .filter(|s| s.starts_with("_Z"))
        .map(str::to_string)
        .collect()
}

/// `c++filt` writes the standard abbreviations (`Ss`, `Si`, `So`, `Sd`) in full, where
/// `__cxa_demangle` (Kineto's, and ours) keeps `std::string`, `std::istream`, …: the
/// same demangler with its verbose flag. Ours written in full, to compare.
fn verbose(text: &str) -> String {
    const FULL: [(&str, &str); 4] = [
        (
            "std::string",
            "std::basic_string<char, std::char_traits<char>, std::allocator<char> >",
        ),
        (
            "std::istream",
            "std::basic_istream<char, std::char_traits<char> >",
        ),
        (
            "std::ostream",
            "std::basic_ostream<char, std::char_traits<char> >",
        ),
        (
            "std::iostream",
            "std::basic_iostream<char, std::char_traits<char> >",
        ),
    ];
    let mut out = text.to_string();
    for (short, full) in FULL {
        // Whole names only: not `std::istreambuf_iterator`.
        let mut done = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(at) = rest.find(short) {
            let after = &rest[at + short.len()..];
            let whole = !after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
            done.push_str(&rest[..at]);
            done.push_str(if whole { full } else { short });
            // GNU never writes `>>`: a full name closing before another `>` gets a space.
            if whole && after.starts_with('>') {
                done.push(' ');
            }
            rest = after;
        }
        done.push_str(rest);
        out = done;
    }
    out
}

#[test]
fn kernel_names_are_demangled_as_cxxfilt_demangles_them() {
    let mut names = nsys_kernel_symbols();
    let from_nsys = names.len();
    if on_ci() {
        assert!(
            from_nsys > 10,
            "the shared Nsight exports name {from_nsys} kernels"
        );
    }
    let libstdcxx = [
        "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
        "/usr/lib64/libstdc++.so.6",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists());
    names.extend(libstdcxx.map(exported_symbols).unwrap_or_default());
    if on_ci() {
        assert!(names.len() > from_nsys + 1000, "{} symbols", names.len());
    }
    let Some(theirs) = cxxfilt(&names) else {
        return;
    };
    assert_eq!(theirs.len(), names.len());
    let kernels = from_nsys;
    for (what, demangle, checked) in [
        (
            "demangled",
            demangled as fn(&str) -> Option<String>,
            names.len(),
        ),
        ("demangled_in_rust", demangled_in_rust, kernels),
    ] {
        let differ: Vec<(&String, Option<String>, &String)> = names[..checked]
            .iter()
            .zip(&theirs)
            .map(|(n, t)| (n, demangle(n).map(|d| verbose(&d)), t))
            .filter(|(n, ours, t)| ours.as_deref().unwrap_or(n) != t.as_str())
            .collect();
        assert!(
            differ.is_empty(),
            "{what}: {} of {checked} names differ from c++filt's, e.g. {:#?}",
            differ.len(),
            &differ[..differ.len().min(5)]
        );
    }
}
