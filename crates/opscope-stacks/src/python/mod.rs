//! A CPython interpreter read from outside its process: `_PyRuntime` found through the
//! ELF symbol of the mapped `libpython` or `python` executable, then its threads and
//! each thread's frames (`_PyInterpreterFrame` chains) with code objects' names, files
//! and lines — what `py-spy dump` shows, read without stopping the target.

pub mod layout;
pub mod linetable;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use object::{Object, ObjectSegment, ObjectSymbol};
use serde::Serialize;

use crate::maps::{self, Mapping};
use crate::memory::{Memory, Process};
use crate::{Error, Result};
use layout::{Gil, Layout, LineTable};

/// Bounds that keep a walk over a racing or corrupt structure finite.
/// A version found by a file's name only (3.9, 3.10 have no `Py_Version`).
const MICRO_UNKNOWN: u8 = u8::MAX;
const MAX_THREADS: usize = 4096;
const MAX_FRAMES: usize = 4096;
const MAX_STRING: i64 = 4096;
const MAX_LINETABLE: i64 = 1 << 16;

/// One Python frame, innermost first in a [`ThreadStack`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Frame {
    /// `co_name`: what `py-spy` shows.
    pub name: String,
    /// `co_qualname`: `Class.method`.
    pub qualname: String,
    pub filename: String,
    /// The line running, where the code object's line table gives one.
    pub line: Option<i64>,
    /// `co_firstlineno`: the function's `def` line (what torch's Python stacks name a
    /// function by).
    pub first_line: i64,
    /// Called from C: the first frame one run of the interpreter's eval loop ran (the
    /// frames outside it, up to the next entry frame, are an outer loop's). Where the
    /// layout does not say (a memory snapshot's unread bytes), only the outermost.
    #[serde(skip)]
    pub entry: bool,
}

/// A thread of the interpreter and its frames, innermost first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ThreadStack {
    /// `threading.get_ident()`: the thread's pthread_t.
    pub thread_id: u64,
    /// The kernel's thread id (`threading.get_native_id()`).
    pub native_thread_id: u64,
    /// Whether it held the GIL when read.
    pub holds_gil: bool,
    /// Whether the kernel had it running or ready to run (`R` in
    /// `/proc/PID/task/TID/stat`) rather than waiting: py-spy's and austin's "active".
    pub active: bool,
    /// When its innermost frame was found, in ns after [`PythonProcess::stacks`] was
    /// called: a read of many threads, or one retried, takes up to milliseconds, and
    /// the stack is of that moment, not of the read's middle.
    #[serde(skip)]
    pub read_after_ns: u64,
    pub frames: Vec<Frame>,
}

/// A running CPython process whose stacks can be read.
pub struct PythonProcess<M = Process> {
    memory: M,
    pid: i32,
    runtime: u64,
    layout: Layout,
    /// `PyCode_Type`'s address, where a frame's code pointer may point at another
    /// object (3.13's `f_executable`).
    code_type: Option<u64>,
    version: String,
    /// Decoded code objects by address: a code object lives as long as its function,
    /// and reading its strings again each sample would cost most of a walk.
    codes: RefCell<HashMap<u64, Arc<Code>>>,
    /// 3.9, 3.10: where glibc's `struct pthread` holds the tid, once found.
    tid_offset: std::cell::Cell<Option<u64>>,
}

impl Code {
    fn frame(&self, line: Option<i64>) -> Frame {
        Frame {
            line,
            first_line: self.first_line,
            name: self.name.clone(),
            qualname: self.qualname.clone(),
            filename: self.filename.clone(),
            // Set by the walk, which knows the version's way of saying it.
            entry: false,
        }
    }
}

struct Code {
    /// Where its `co_qualname` pointed when it was read: a code object freed and
    /// another made at its address points elsewhere.
    qualname_at: u64,
    name: String,
    qualname: String,
    filename: String,
    first_line: i64,
    linetable: Vec<u8>,
}

impl PythonProcess<Process> {
    /// Finds the interpreter of process `pid`.
    pub fn open(pid: i32) -> Result<PythonProcess> {
        PythonProcess::open_with(pid, |memory| memory)
    }
}

impl<M: Memory> PythonProcess<M> {
    /// Finds the interpreter of process `pid`, read through `wrap` of its memory (a
    /// [`crate::memory::Recorder`] keeps what a walk reads).
    pub fn open_with(pid: i32, wrap: impl FnOnce(Process) -> M) -> Result<PythonProcess<M>> {
        let mappings = maps::read(pid)?;
        let found = find_runtime(pid, &mappings)?;
        let memory = wrap(Process { pid });
        PythonProcess::with_memory(memory, pid, found.version, found.runtime, found.code_type)
    }

    /// The interpreter `version` whose `_PyRuntime` is at `runtime` in `memory` (and
    /// its `PyCode_Type` at `code_type`, for 3.13): what [`PythonProcess::open_with`]
    /// finds in a live process, or a snapshot's record of it.
    pub fn with_memory(
        memory: M,
        pid: i32,
        version: (u8, u8, u8),
        runtime: u64,
        code_type: Option<u64>,
    ) -> Result<PythonProcess<M>> {
        let (major, minor, micro) = version;
        let version = match micro {
            MICRO_UNKNOWN => format!("{major}.{minor}"),
            micro => format!("{major}.{minor}.{micro}"),
        };
        let layout = match layout::of(major, minor) {
            Some(known) => known.clone(),
            // 3.13 says where its fields are.
            None if (major, minor) >= (3, 13) => {
                let offsets = memory.bytes_at(runtime, layout::DEBUG_OFFSETS_313)?;
                layout::from_debug_offsets(&offsets).ok_or(Error::Unsupported {
                    pid,
                    version: format!(
                        "{version} (its _Py_DebugOffsets are not 3.13's, or it is free-threaded)"
                    ),
                })?
            }
            None => return Err(Error::Unsupported { pid, version }),
        };
        Ok(PythonProcess {
            memory,
            pid,
            runtime,
            layout,
            code_type,
            version,
            codes: RefCell::new(HashMap::new()),
            tid_offset: std::cell::Cell::new(None),
        })
    }

    /// The memory it reads.
    pub fn memory(&self) -> &M {
        &self.memory
    }

    /// Where `_PyRuntime` and (3.13) `PyCode_Type` are.
    pub fn runtime(&self) -> (u64, Option<u64>) {
        (self.runtime, self.code_type)
    }
}

impl<M: Memory> PythonProcess<M> {
    /// `3.11.7`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Every thread of every interpreter, with its frames as they are now. The target
    /// runs on while it is read: a frame popped meanwhile can leave a pointer to memory
    /// already reused, so a walk that meets what is not a frame is read again.
    pub fn stacks(&self) -> Result<Vec<ThreadStack>> {
        let called = std::time::Instant::now();
        let mut tries = 0;
        let mut stacks = loop {
            match self.walk(called) {
                Err(Error::Layout { .. } | Error::Read { .. }) if tries < 8 => tries += 1,
                done => break done?,
            }
        };
        for t in &mut stacks {
            t.active =
                running(self.pid, t.native_thread_id) && !t.frames.first().is_some_and(waits);
        }
        Ok(stacks)
    }

    fn walk(&self, called: std::time::Instant) -> Result<Vec<ThreadStack>> {
        let l = &self.layout;
        let m = &self.memory;
        let mut out = Vec::new();
        let mut interp = m.u64_at(self.runtime.wrapping_add(l.interpreters_head))?;
        let mut interpreters = 0;
        while interp != 0 && interpreters < 64 {
            let holder = self.gil_holder(interp)?;
            let mut thread = m.u64_at(interp.wrapping_add(l.threads_head))?;
            while thread != 0 && out.len() < MAX_THREADS {
                let frame = match l.current_frame {
                    layout::CurrentFrame::ViaCFrame {
                        cframe,
                        current_frame,
                    } => match m.u64_at(thread.wrapping_add(cframe))? {
                        0 => 0,
                        cframe => m.u64_at(cframe.wrapping_add(current_frame))?,
                    },
                    layout::CurrentFrame::Direct(at) => m.u64_at(thread.wrapping_add(at))?,
                };
                let read_after_ns = called.elapsed().as_nanos() as u64;
                let thread_id = m.u64_at(thread.wrapping_add(l.thread_id))?;
                let native_thread_id = match l.native_thread_id {
                    Some(at) => m.u64_at(thread.wrapping_add(at))?,
                    None => self.tid_of_pthread(thread_id)?,
                };
                out.push(ThreadStack {
                    thread_id,
                    native_thread_id,
                    holds_gil: holder == Some(thread),
                    active: false,
                    read_after_ns,
                    frames: self.frames(frame)?,
                });
                thread = m.u64_at(thread.wrapping_add(l.thread_next))?;
            }
            // `PyInterpreterState.next` is its first field.
            interp = m.u64_at(interp)?;
            interpreters += 1;
        }
        // Threads listed before the main thread (newest first) learnt no tid: now that
        // the main thread told where it is, read theirs.
        if let (None, Some(offset)) = (l.native_thread_id, self.tid_offset.get()) {
            for t in out.iter_mut().filter(|t| t.native_thread_id == 0) {
                t.native_thread_id = u64::from(m.u32_at(t.thread_id.wrapping_add(offset))?);
            }
        }
        Ok(out)
    }

    /// The tid of the thread whose `pthread_t` is `pthread` (3.9, 3.10 keep no tid):
    /// glibc's `struct pthread` holds it at an offset found once, as austin finds it, in
    /// the main thread's (whose tid is the pid): the first 4-byte slot there equal to
    /// the pid. 0 where it cannot be told.
    fn tid_of_pthread(&self, pthread: u64) -> Result<u64> {
        const LOOK: usize = 1024;
        let offset = match self.tid_offset.get() {
            Some(offset) => offset,
            None => {
                let Ok(words) = self.memory.bytes_at(pthread, LOOK) else {
                    return Ok(0);
                };
                let pid = self.pid as u32;
                let found = words
                    .chunks_exact(4)
                    .position(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) == pid)
                    .map(|i| i as u64 * 4);
                match found {
                    // Only the main thread says where: another's slot holds its own tid.
                    Some(at) if pid != 0 => {
                        self.tid_offset.set(Some(at));
                        at
                    }
                    _ => return Ok(0),
                }
            }
        };
        Ok(u64::from(self.memory.u32_at(pthread.wrapping_add(offset))?))
    }

    /// The thread state holding the GIL, if one does.
    fn gil_holder(&self, interp: u64) -> Result<Option<u64>> {
        let m = &self.memory;
        Ok(match self.layout.gil {
            Gil::RuntimeCurrent(at) => {
                Some(m.u64_at(self.runtime.wrapping_add(at))?).filter(|&t| t != 0)
            }
            Gil::Interpreter {
                last_holder,
                locked,
            } => {
                let locked = m.u32_at(interp.wrapping_add(locked))? != 0;
                let holder = m.u64_at(interp.wrapping_add(last_holder))?;
                (locked && holder != 0).then_some(holder)
            }
        })
    }

    fn frames(&self, mut frame: u64) -> Result<Vec<Frame>> {
        let l = &self.layout;
        let m = &self.memory;
        let mut frames = Vec::new();
        // Frames skipped (C frames, incomplete ones) count too: memory read while it
        // changes can make a cycle of them.
        let mut steps = 0;
        while frame != 0 && steps < MAX_FRAMES {
            steps += 1;
            if let Some(object) = l.frame_object {
                let code_addr = m.u64_at(frame.wrapping_add(l.frame_code))?;
                let lasti = m.u32_at(frame.wrapping_add(object.lasti))? as i32;
                let previous = m.u64_at(frame.wrapping_add(l.frame_previous))?;
                if code_addr != 0 {
                    let code = self.code(code_addr)?;
                    // -1: not started; its first line, as CPython says.
                    let line = match u64::try_from(lasti) {
                        Ok(lasti) => self.line(&code, lasti.saturating_mul(object.unit)),
                        Err(_) => Some(code.first_line),
                    };
                    // Each frame object is run by an eval loop of its own.
                    let mut frame = code.frame(line);
                    frame.entry = true;
                    frames.push(frame);
                }
                frame = previous;
                continue;
            }
            let code_addr = m.u64_at(frame.wrapping_add(l.frame_code))?;
            let prev_instr = m.u64_at(frame.wrapping_add(l.frame_prev_instr))?;
            let owner = m.u8_at(frame.wrapping_add(l.frame_owner))?;
            let previous = m.u64_at(frame.wrapping_add(l.frame_previous))?;
            let not_code = match self.code_type {
                Some(code_type) if code_addr != 0 => {
                    m.u64_at(code_addr.wrapping_add(8))? != code_type
                }
                _ => false,
            };
            if l.owner_cstack == Some(owner) {
                // 3.12+: the shim an eval loop pushes before the frame C called.
                if let Some(called) = frames.last_mut() {
                    called.entry = true;
                }
                frame = previous;
                continue;
            }
            if code_addr == 0 || not_code {
                frame = previous;
                continue;
            }
            let code = self.code(code_addr)?;
            let adaptive = code_addr.wrapping_add(l.code_code_adaptive);
            // A frame whose first instruction has not run yet (CPython's
            // `_PyFrame_IsIncomplete`) is no frame of the stack yet.
            let first = match l.code_firsttraceable {
                Some(at) if owner != layout::OWNED_BY_GENERATOR => {
                    u64::from(m.u32_at(code_addr.wrapping_add(at))?)
                }
                _ => 0,
            };
            if prev_instr < adaptive.saturating_add(2 * first) {
                frame = previous;
                continue;
            }
            let lasti = prev_instr.saturating_sub(adaptive);
            let mut pushed = code.frame(self.line(&code, lasti));
            // 3.11: `is_entry`.
            if let Some(at) = l.frame_is_entry {
                pushed.entry = m.u8_at(frame.wrapping_add(at))? != 0;
            }
            frames.push(pushed);
            frame = previous;
        }
        // The outermost frame was called from C, whatever the layout says.
        if let Some(outermost) = frames.last_mut() {
            outermost.entry = true;
        }
        Ok(frames)
    }

    /// The line of byte offset `lasti` in `code`, by the version's line table.
    fn line(&self, code: &Code, lasti: u64) -> Option<i64> {
        let (table, first) = (&code.linetable, code.first_line);
        match self.layout.line_table {
            LineTable::Locations => linetable::line_at(table, first, lasti),
            LineTable::Pairs => linetable::line_at_pairs(table, first, lasti),
            LineTable::Lnotab => Some(linetable::line_at_lnotab(table, first, lasti)),
        }
    }

    fn code(&self, addr: u64) -> Result<Arc<Code>> {
        let l = &self.layout;
        let m = &self.memory;
        let qualname_at = m.u64_at(addr.wrapping_add(l.code_qualname))?;
        if let Some(code) = self.codes.borrow().get(&addr) {
            if code.qualname_at == qualname_at {
                return Ok(Arc::clone(code));
            }
        }
        let table = m.u64_at(addr.wrapping_add(l.code_linetable))?;
        // A bytes object: `ob_size` at 16, the bytes at 32.
        let len = m.i64_at(table.wrapping_add(16))?;
        if !(0..=MAX_LINETABLE).contains(&len) {
            return Err(self.layout_error("a code object's line table", table));
        }
        let code = Arc::new(Code {
            qualname_at,
            name: self.string(m.u64_at(addr.wrapping_add(l.code_name))?)?,
            qualname: self.string(qualname_at)?,
            filename: self.string(m.u64_at(addr.wrapping_add(l.code_filename))?)?,
            first_line: i64::from(m.u32_at(addr.wrapping_add(l.code_firstlineno))? as i32),
            linetable: m.bytes_at(table.wrapping_add(32), len as usize)?,
        });
        // Names and files hold no control characters: one read while its object was
        // made (or after it was freed) is read again, and not kept.
        let odd = |t: &str| t.is_empty() || t.chars().any(char::is_control);
        if odd(&code.name) || odd(&code.qualname) || odd(&code.filename) {
            return Err(self.layout_error("a code object's names", addr));
        }
        self.codes.borrow_mut().insert(addr, Arc::clone(&code));
        Ok(code)
    }

    /// A `str` object's text: compact ASCII, or compact UCS-1/2/4.
    fn string(&self, addr: u64) -> Result<String> {
        let m = &self.memory;
        let len = m.i64_at(addr.wrapping_add(16))?;
        let state = m.u32_at(addr.wrapping_add(32))?;
        let (kind, compact, ascii) = ((state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1);
        if !(0..=MAX_STRING).contains(&len) || compact == 0 || !matches!(kind, 1 | 2 | 4) {
            return Err(self.layout_error("a str object", addr));
        }
        let data = addr.wrapping_add(if ascii == 1 {
            self.layout.ascii_size
        } else {
            self.layout.compact_size
        });
        let bytes = m.bytes_at(data, len as usize * kind as usize)?;
        Ok(match kind {
            1 => bytes.iter().map(|&b| char::from(b)).collect(),
            2 => char::decode_utf16(
                bytes
                    .chunks_exact(2)
                    .map(|c| u16::from_ne_bytes([c[0], c[1]])),
            )
            .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect(),
            _ => bytes
                .chunks_exact(4)
                .map(|c| {
                    char::from_u32(u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                        .unwrap_or(char::REPLACEMENT_CHARACTER)
                })
                .collect(),
        })
    }

    fn layout_error(&self, what: &'static str, addr: u64) -> Error {
        Error::Layout {
            pid: self.pid,
            what,
            addr,
            version: self.version.clone(),
        }
    }
}

/// Whether thread `tid` of `pid` is running or runnable: the state after the command
/// name's closing parenthesis in its `stat` (the name may hold spaces and parentheses).
/// Whether the innermost frame is one that waits in C though its thread often reads as
/// running: a wait with a short timeout wakes, and is runnable, many times a second
/// (`Condition.wait(timeout=…)`, the DataLoader's and multiprocessing's polls). py-spy
/// calls these idle by name as here; without it a thread polling every 0.5 ms took 7 %
/// of a busy program's running time, where py-spy gave it none.
fn waits(frame: &Frame) -> bool {
    let (name, file) = (frame.name.as_str(), frame.filename.as_str());
    (name == "wait" && file.ends_with("threading.py"))
        || (name == "select" && file.ends_with("selectors.py"))
        || (name == "poll"
            && (file.ends_with("asyncore.py")
                || ["zmq", "gevent", "tornado"]
                    .iter()
                    .any(|p| file.contains(p))))
}

fn running(pid: i32, tid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, rest) = stat.rsplit_once(") ")?;
            rest.chars().next()
        })
        == Some('R')
}

/// What the interpreter's binary tells: where `_PyRuntime` and `PyCode_Type` are in
/// the process, and the version.
struct Found {
    runtime: u64,
    code_type: Option<u64>,
    version: (u8, u8, u8),
}

/// Finds the mapped file (libpython, else the executable) that defines `_PyRuntime`.
fn find_runtime(pid: i32, mappings: &[Mapping]) -> Result<Found> {
    let mut candidates: Vec<&str> = mappings
        .iter()
        .filter_map(|m| m.path.as_deref())
        .filter(|p| {
            let name = p.rsplit('/').next().unwrap_or(p);
            name.starts_with("libpython3") || name.starts_with("python3")
        })
        .collect();
    candidates.dedup();
    // A shared build maps both the executable and libpython: the library defines the
    // runtime, the executable only refers to it.
    candidates.sort_by_key(|p| !p.rsplit('/').next().unwrap_or(p).starts_with("libpython"));
    for path in candidates {
        // The file as the target sees it, also from another mount namespace.
        let on_disk = format!("/proc/{pid}/root{path}");
        let Ok(data) = std::fs::read(&on_disk).or_else(|_| std::fs::read(path)) else {
            continue;
        };
        let binary = |message: String| Error::Binary {
            path: path.to_string(),
            message,
        };
        let file = object::File::parse(&*data).map_err(|e| binary(e.to_string()))?;
        let symbol = |name: &str| {
            file.dynamic_symbols()
                .chain(file.symbols())
                .find(|s| s.name() == Ok(name) && s.address() != 0)
                .map(|s| s.address())
        };
        let Some(runtime) = symbol("_PyRuntime") else {
            continue;
        };
        // The load bias: where the segment at file offset 0 was mapped, less its
        // address in the file.
        let first_segment = file
            .segments()
            .filter(|s| s.file_range().0 == 0)
            .map(|s| s.address())
            .min()
            .unwrap_or(0);
        let Some(base) = mappings
            .iter()
            .filter(|m| m.path.as_deref() == Some(path) && m.offset == 0)
            .map(|m| m.start)
            .min()
        else {
            continue;
        };
        let bias = base.wrapping_sub(first_segment & !0xfff);
        let version = match symbol("Py_Version") {
            // `Py_Version` (3.11+) is `PY_VERSION_HEX`: 0x030B07F0 for 3.11.7.
            Some(at) => read_file_u32(&file, at)
                .map(|hex| ((hex >> 24) as u8, (hex >> 16) as u8, (hex >> 8) as u8))
                .ok_or_else(|| binary("Py_Version outside the file's sections".into()))?,
            None => version_from_name(path).ok_or(Error::Unsupported {
                pid,
                version: format!("of {path} (older than 3.11)"),
            })?,
        };
        return Ok(Found {
            runtime: runtime.wrapping_add(bias),
            // Only 3.13's frames may hold other objects than code where the code goes.
            code_type: symbol("PyCode_Type")
                .filter(|_| (version.0, version.1) >= (3, 13))
                .map(|t| t.wrapping_add(bias)),
            version,
        });
    }
    Err(Error::NotPython { pid })
}

/// The 4 bytes at `addr` in the file's sections.
fn read_file_u32(file: &object::File, addr: u64) -> Option<u32> {
    use object::ObjectSection;
    file.sections().find_map(|s| {
        let (start, size) = (s.address(), s.size());
        if addr < start || addr.checked_add(4)? > start.checked_add(size)? {
            return None;
        }
        let data = s.data().ok()?;
        let at = (addr - start) as usize;
        Some(u32::from_ne_bytes(data.get(at..at + 4)?.try_into().ok()?))
    })
}

/// `libpython3.10.so.1.0`, `python3.9` → (3, minor, [`MICRO_UNKNOWN`]).
fn version_from_name(path: &str) -> Option<(u8, u8, u8)> {
    let name = path.rsplit('/').next()?;
    let rest = name
        .strip_prefix("libpython3.")
        .or_else(|| name.strip_prefix("python3."))?;
    let minor: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    Some((3, minor.parse().ok()?, MICRO_UNKNOWN))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory whose every read gives bytes made up from the address and a seed, some
    /// of them small numbers and pointers near a few bases: a target read while it
    /// changes, at its worst.
    struct Garbage(u64);

    impl Memory for Garbage {
        fn read(&self, addr: u64, buf: &mut [u8]) -> crate::Result<()> {
            let mut x = addr ^ self.0.rotate_left(17) ^ 0x9e37_79b9_7f4a_7c15;
            for chunk in buf.chunks_mut(8) {
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
                let value = match r % 5 {
                    0 => 0,
                    1 => r % 64,
                    2 => 0x1000 + (r % 4096) * 8,
                    3 => u64::MAX - (r % 64),
                    _ => r,
                };
                let bytes = value.to_ne_bytes();
                chunk.copy_from_slice(&bytes[..chunk.len()]);
            }
            Ok(())
        }
    }

    /// No content of the target's memory makes the walker panic or loop: every
    /// layout, thousands of made-up memories, each a result or an error.
    #[test]
    fn any_memory_gives_stacks_or_an_error_never_a_panic() {
        let offsets = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/debug_offsets_3.13.0.bin"
        ))
        .unwrap();
        let layouts = [
            layout::of(3, 9).unwrap().clone(),
            layout::of(3, 10).unwrap().clone(),
            layout::of(3, 11).unwrap().clone(),
            layout::of(3, 12).unwrap().clone(),
            layout::from_debug_offsets(&offsets).unwrap(),
        ];
        for (i, layout) in layouts.into_iter().enumerate() {
            for seed in 0..3000u64 {
                let process = PythonProcess {
                    memory: Garbage(seed),
                    pid: 1,
                    runtime: 0x1000 + seed * 8,
                    layout: layout.clone(),
                    code_type: (i == 4).then_some(0x2000),
                    version: "test".into(),
                    codes: RefCell::new(HashMap::new()),
                    tid_offset: std::cell::Cell::new(None),
                };
                let _ = process.stacks();
            }
        }
    }

    #[test]
    fn versions_come_from_file_names_where_no_symbol_says() {
        assert_eq!(
            version_from_name("/usr/lib/libpython3.10.so.1.0"),
            Some((3, 10, MICRO_UNKNOWN))
        );
        assert_eq!(
            version_from_name("/usr/bin/python3.9"),
            Some((3, 9, MICRO_UNKNOWN))
        );
        assert_eq!(version_from_name("/usr/bin/python"), None);
    }
}
