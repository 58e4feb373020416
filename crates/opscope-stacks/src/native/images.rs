//! The code files a sampled process has mapped (executables and shared libraries):
//! their unwind tables for the unwinder and their symbol tables for names, each file
//! opened once however many processes map it (DataLoader workers share their parent's).

use std::collections::HashMap;
use std::ops::{Deref, Range};
use std::path::Path;
use std::sync::{Arc, OnceLock};

use memmap2::Mmap;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};

/// A part of a mapped file: what the unwinder is given of a section.
#[derive(Clone)]
pub struct Bytes {
    map: Arc<Mmap>,
    range: Range<usize>,
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map[self.range.clone()]
    }
}

/// A section's addresses in the file's own numbering and its bytes.
#[derive(Clone)]
pub struct Section {
    pub svma: Range<u64>,
    pub bytes: Bytes,
}

/// One ELF file's parts the sampler needs.
pub struct Image {
    /// The file's name without its directory (`libtorch_cpu.so`): what a frame shows.
    pub name: Arc<str>,
    path: String,
    map: Arc<Mmap>,
    /// Loadable segments: (address, file offset, file size).
    segments: Vec<(u64, u64, u64)>,
    pub text: Option<Section>,
    pub eh_frame: Option<Section>,
    pub eh_frame_hdr: Option<Section>,
    pub got: Option<Range<u64>>,
    symbols: OnceLock<Symbols>,
}

impl Image {
    fn open(path: &str) -> Option<Image> {
        let file = std::fs::File::open(path).ok()?;
        // SAFETY: a read-only private mapping of a code file a process has mapped;
        // such files are replaced (a new inode) rather than written in place, and a
        // file truncated under us costs this profiler, not the profiled program.
        let map = Arc::new(unsafe { Mmap::map(&file) }.ok()?);
        let elf = object::File::parse(&**map).ok()?;
        let section = |name: &str| {
            let s = elf.section_by_name(name)?;
            let (offset, size) = s.file_range()?;
            let range = usize::try_from(offset).ok()?..usize::try_from(offset + size).ok()?;
            (range.end <= map.len()).then(|| Section {
                svma: s.address()..s.address() + s.size(),
                bytes: Bytes {
                    map: Arc::clone(&map),
                    range,
                },
            })
        };
        let segments = elf
            .segments()
            .map(|s| {
                let (offset, size) = s.file_range();
                (s.address(), offset, size)
            })
            .collect();
        let name = Path::new(path)
            .file_name()
            .map_or(path.into(), |n| n.to_string_lossy().into());
        Some(Image {
            text: section(".text"),
            eh_frame: section(".eh_frame"),
            eh_frame_hdr: section(".eh_frame_hdr"),
            got: elf
                .section_by_name(".got")
                .map(|s| s.address()..s.address() + s.size()),
            name,
            path: path.to_string(),
            segments,
            map: Arc::clone(&map),
            symbols: OnceLock::new(),
        })
    }

    /// The file's address of the byte mapped from file offset `offset`, the start of
    /// a mapping. A mapping starts at a page boundary, so it may begin in the bytes
    /// before its segment (which may belong to the previous one): the segment mapped
    /// is the last one whose page-aligned start is at or before the offset.
    pub fn svma_of_offset(&self, offset: u64) -> Option<u64> {
        const PAGE: u64 = 4096;
        self.segments
            .iter()
            .filter(|(_, start, size)| {
                start & !(PAGE - 1) <= offset && offset < start + size.max(&1)
            })
            .max_by_key(|(_, start, _)| *start)
            .map(|(address, start, _)| address.wrapping_add(offset).wrapping_sub(*start))
    }

    /// The function containing `svma`, demangled without its parameters, or
    /// `[file]` where no symbol covers it (a stripped library's inner functions: one
    /// name for all, as `perf report` shows `[unknown]`, so their time adds up).
    pub fn function(&self, svma: u64) -> String {
        let symbols = self.symbols.get_or_init(|| {
            Symbols::of(&self.map)
                .or_else(|| self.debug_file_symbols())
                .unwrap_or_default()
        });
        match symbols.find(svma) {
            Some(name) => demangle(name),
            None => format!("[{}]", self.name),
        }
    }

    /// A stripped file's symbols from its separate debug file
    /// (`/usr/lib/debug/.build-id/xx/rest.debug`), where a debug package installed one.
    fn debug_file_symbols(&self) -> Option<Symbols> {
        let elf = object::File::parse(&**self.map).ok()?;
        let id = elf.build_id().ok()??;
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let path = format!(
            "/usr/lib/debug/.build-id/{}/{}.debug",
            hex.get(..2)?,
            hex.get(2..)?
        );
        if path == self.path {
            return None;
        }
        let file = std::fs::File::open(&path).ok()?;
        // SAFETY: as in `open`: a read-only mapping of an installed debug file.
        let map = unsafe { Mmap::map(&file) }.ok()?;
        Symbols::of(&map)
    }
}

/// Function symbols sorted by address.
#[derive(Default)]
struct Symbols {
    /// (address, size, name).
    entries: Vec<(u64, u64, String)>,
}

impl Symbols {
    /// The full symbol table where the file kept one, else the dynamic one (what a
    /// stripped library still exports); `None` where it has neither.
    fn of(bytes: &[u8]) -> Option<Symbols> {
        let elf = object::File::parse(bytes).ok()?;
        let mut entries: Vec<(u64, u64, String)> = elf
            .symbols()
            .chain(elf.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| {
                // A symbol of no stated size (`_init`, hand-written assembly) ends with
                // its section at the latest: the PLT after `.init` is not `_init`.
                let size = match s.size() {
                    0 => s
                        .section_index()
                        .and_then(|i| elf.section_by_index(i).ok())
                        .map_or(0, |sec| {
                            (sec.address() + sec.size()).saturating_sub(s.address())
                        }),
                    size => size,
                };
                Some((s.address(), size, s.name().ok()?.to_string()))
            })
            .collect();
        if entries.is_empty() {
            return None;
        }
        entries.sort_unstable();
        entries.dedup_by_key(|e| e.0);
        Some(Symbols { entries })
    }

    fn find(&self, svma: u64) -> Option<&str> {
        let at = self
            .entries
            .partition_point(|e| e.0 <= svma)
            .checked_sub(1)?;
        let (start, size, name) = &self.entries[at];
        // A symbol of no stated size stands until the next one; past a sized one's
        // end the address is in code no symbol names.
        let inside = *size == 0 || svma < start + size;
        inside.then_some(name.as_str())
    }
}

/// Rust names without their hashes, C++ names without their parameter lists (what a
/// flame graph can show); other names as they are.
pub fn demangle(name: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        // Rust's legacy scheme is C++'s with a hash: told apart by that hash.
        if name.starts_with("_R") || format!("{rust:#}") != rust.to_string() {
            return format!("{rust:#}");
        }
    }
    if name.starts_with("_Z") {
        if let Ok(symbol) = cpp_demangle::Symbol::new(name) {
            let options = cpp_demangle::DemangleOptions::new()
                .no_params()
                .no_return_type();
            if let Ok(text) = symbol.demangle_with_options(&options) {
                return text;
            }
        }
    }
    name.to_string()
}

/// Every file opened so far, by path (`None`: not an ELF file this reader can use).
#[derive(Default)]
pub struct Images {
    by_path: HashMap<String, Option<u32>>,
    pub images: Vec<Arc<Image>>,
}

impl Images {
    /// The image of the file at `path`, opened on first use.
    pub fn get(&mut self, path: &str) -> Option<u32> {
        if let Some(known) = self.by_path.get(path) {
            return *known;
        }
        let index = Image::open(path).map(|image| {
            self.images.push(Arc::new(image));
            (self.images.len() - 1) as u32
        });
        self.by_path.insert(path.to_string(), index);
        index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpp_names_lose_their_parameters_and_c_names_stay() {
        assert_eq!(
            demangle("_ZN2at6native5addmmERKNS_6TensorES3_"),
            "at::native::addmm"
        );
        assert_eq!(demangle("deflate_slow"), "deflate_slow");
        assert_eq!(demangle("_Zgarbage"), "_Zgarbage");
        assert_eq!(
            demangle("_ZN6native9spin_here17h88ce95169ddfb251E"),
            "native::spin_here"
        );
        assert_eq!(
            demangle(
                "_RNvNvMs0_NtNtNtCsjrHSEGnQ3l9_3std3sys6thread4unixNtB7_6Thread3new12thread_start"
            ),
            "<std::sys::thread::unix::Thread>::new::thread_start"
        );
    }

    /// A PIE executable's text segment starts mid-page after the read-only one; its
    /// mapping starts at that page, inside the read-only segment's bytes.
    #[test]
    fn a_mapping_at_a_page_boundary_belongs_to_the_segment_it_maps() {
        let segments = vec![(0, 0, 0x60970), (0x61970, 0x60970, 0x111ce0)];
        let image = Image {
            name: "t".into(),
            path: "t".into(),
            map: Arc::new(
                memmap2::MmapOptions::new()
                    .len(1)
                    .map_anon()
                    .unwrap()
                    .make_read_only()
                    .unwrap(),
            ),
            segments,
            text: None,
            eh_frame: None,
            eh_frame_hdr: None,
            got: None,
            symbols: OnceLock::new(),
        };
        assert_eq!(image.svma_of_offset(0x60000), Some(0x61000));
        assert_eq!(image.svma_of_offset(0), Some(0));
    }

    #[test]
    fn an_address_is_named_by_the_symbol_covering_it_only() {
        let symbols = Symbols {
            entries: vec![(0x100, 0x10, "a".into()), (0x200, 0, "b".into())],
        };
        assert_eq!(symbols.find(0x100), Some("a"));
        assert_eq!(symbols.find(0x10f), Some("a"));
        assert_eq!(symbols.find(0x110), None);
        assert_eq!(symbols.find(0x2ff), Some("b"));
        assert_eq!(symbols.find(0xff), None);
    }
}
