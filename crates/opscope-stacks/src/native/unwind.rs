//! One sampled process's code as the unwinder sees it: each executable mapping of a
//! file with the file's unwind tables (`.eh_frame`, found through `.eh_frame_hdr`),
//! and a sample's registers and stack copy turned into the addresses of its frames.

use std::time::{Duration, Instant};

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder};

use super::images::{Bytes, Images};
use super::perf::RawSample;
use crate::maps;

/// Frames kept of one stack: deeper ones are a loop in corrupt memory, not a program.
pub const MAX_FRAMES: usize = 512;
/// How soon the memory map is read again for an address no mapped file holds (code
/// loaded since), and the longest wait it backs off to while the reads find nothing
/// new (an address a frame-pointer guess made up is in no file ever).
const REFRESH: Duration = Duration::from_millis(50);
const REFRESH_MOST: Duration = Duration::from_secs(2);

/// Where a frame was: a file's own address, or an address no known file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Address {
    Code { image: u32, svma: u64 },
    Unknown(u64),
}

struct Loaded {
    start: u64,
    end: u64,
    image: u32,
    /// The process's address minus the file's.
    bias: u64,
}

pub struct ProcessCode {
    pid: i32,
    unwinder: UnwinderX86_64<Bytes>,
    cache: CacheX86_64,
    loaded: Vec<Loaded>,
    /// Executable memory of no file (JIT code, `[vdso]`) as of the last read of the
    /// map: an address there is no reason to read it again.
    fileless: Vec<(u64, u64)>,
    refreshed: Option<Instant>,
    refresh_every: Duration,
}

impl ProcessCode {
    pub fn new(pid: i32, images: &mut Images) -> ProcessCode {
        let mut code = ProcessCode {
            pid,
            unwinder: UnwinderX86_64::new(),
            cache: CacheX86_64::new(),
            loaded: Vec::new(),
            fileless: Vec::new(),
            refreshed: None,
            refresh_every: REFRESH,
        };
        code.refresh(images);
        code
    }

    /// Adds the executable file mappings not known yet (an ended process keeps what
    /// it had: its buffered samples still unwind).
    fn refresh(&mut self, images: &mut Images) {
        self.refreshed = Some(Instant::now());
        let Ok(mappings) = maps::read(self.pid) else {
            return;
        };
        // Code unmapped since (a library closed; the whole image, after an exec) must
        // not name the addresses of what came in its place.
        let unwinder = &mut self.unwinder;
        self.loaded.retain(|l| {
            let kept = mappings
                .iter()
                .any(|m| m.executable && m.start == l.start && m.end == l.end);
            if !kept {
                unwinder.remove_module(l.start);
            }
            kept
        });
        self.fileless = mappings
            .iter()
            .filter(|m| m.executable && m.path.is_none())
            .map(|m| (m.start, m.end))
            .collect();
        let mut added = 0;
        for m in mappings.iter().filter(|m| m.executable) {
            let Some(path) = &m.path else { continue };
            if self
                .loaded
                .iter()
                .any(|l| l.start == m.start && l.end == m.end)
            {
                continue;
            }
            let Some(index) = images.get(path) else {
                continue;
            };
            let image = &images.images[index as usize];
            let Some(svma) = image.svma_of_offset(m.offset) else {
                continue;
            };
            let bias = m.start.wrapping_sub(svma);
            let info = ExplicitModuleSectionInfo {
                base_svma: 0,
                text_svma: image.text.as_ref().map(|s| s.svma.clone()),
                text: image.text.as_ref().map(|s| s.bytes.clone()),
                got_svma: image.got.clone(),
                eh_frame_svma: image.eh_frame.as_ref().map(|s| s.svma.clone()),
                eh_frame: image.eh_frame.as_ref().map(|s| s.bytes.clone()),
                eh_frame_hdr_svma: image.eh_frame_hdr.as_ref().map(|s| s.svma.clone()),
                eh_frame_hdr: image.eh_frame_hdr.as_ref().map(|s| s.bytes.clone()),
                stubs_svma: None,
                stub_helper_svma: None,
                unwind_info: None,
                debug_frame: None,
                text_segment_svma: None,
                text_segment: None,
            };
            self.unwinder.add_module(Module::new(
                image.name.to_string(),
                m.start..m.end,
                bias,
                info,
            ));
            added += 1;
            self.loaded.push(Loaded {
                start: m.start,
                end: m.end,
                image: index,
                bias,
            });
        }
        self.loaded.sort_unstable_by_key(|l| l.start);
        self.refresh_every = match added {
            0 => (self.refresh_every * 2).min(REFRESH_MOST),
            _ => REFRESH,
        };
    }

    /// The frames of `sample`, innermost first, into `out` (cleared first); whether
    /// the unwinder reached the stack's end (not cut short by the copy's end or a
    /// frame it could not explain). Return addresses are moved back one byte, into the
    /// call instruction, so that a call that ends a function is named by that function.
    /// A frame in code no known file holds (a library loaded since the map was read:
    /// `import ctypes` after sampling began) has the map read again, at most every
    /// [`REFRESH`] (backing off while nothing new turns up), and the stack unwound
    /// again with it.
    pub fn unwind(
        &mut self,
        sample: &RawSample,
        images: &mut Images,
        out: &mut Vec<Address>,
    ) -> bool {
        let complete = self.unwind_with_known(sample, out);
        let fileless = |at: u64| {
            self.fileless
                .iter()
                .any(|&(start, end)| (start..end).contains(&at))
        };
        let unknown = out.is_empty()
            || out
                .iter()
                .any(|a| matches!(*a, Address::Unknown(at) if !fileless(at)));
        let stale = self
            .refreshed
            .is_none_or(|t| t.elapsed() >= self.refresh_every);
        if !(unknown && stale) {
            return complete;
        }
        self.refresh(images);
        self.unwind_with_known(sample, out)
    }

    fn unwind_with_known(&mut self, sample: &RawSample, out: &mut Vec<Address>) -> bool {
        out.clear();
        let (base, stack) = (sample.sp, sample.stack);
        let mut read = |addr: u64| -> Result<u64, ()> {
            let at = usize::try_from(addr.checked_sub(base).ok_or(())?).map_err(|_| ())?;
            let word = stack.get(at..at.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_ne_bytes(word.try_into().map_err(|_| ())?))
        };
        let regs = UnwindRegsX86_64::new(sample.ip, sample.sp, sample.bp);
        let mut frames = self
            .unwinder
            .iter_frames(sample.ip, regs, &mut self.cache, &mut read);
        let loaded = &self.loaded;
        // An error (the stack copy ends, a frame the tables cannot explain) ends the
        // stack where it is: the frames found so far are right.
        loop {
            match frames.next() {
                Ok(Some(frame)) if out.len() < MAX_FRAMES => {
                    out.push(address(loaded, frame.address_for_lookup()))
                }
                Ok(None) => return true,
                _ => return false,
            }
        }
    }
}

fn address(loaded: &[Loaded], avma: u64) -> Address {
    let at = loaded.partition_point(|l| l.start <= avma);
    match at.checked_sub(1).map(|i| &loaded[i]) {
        Some(l) if avma < l.end => Address::Code {
            image: l.image,
            svma: avma.wrapping_sub(l.bias),
        },
        _ => Address::Unknown(avma),
    }
}
