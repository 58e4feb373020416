//! Maps a mapped input's pages in ahead of the thread that reads it, from a thread of
//! its own: the reading thread bounds a large JSON load, and a tenth of its time went
//! to page faults on the input (1 GB of file is 262,144 pages), work the other core can
//! do beside the model's building.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::Thread;

/// How far ahead of the reader pages are mapped in.
const AHEAD: usize = 64 << 20;
/// Bytes mapped in per call: the stop flag is looked at between them.
const STEP: usize = 4 << 20;

/// The window's state, shared by the reader and the mapping thread.
pub(crate) struct MapAhead<'a> {
    bytes: &'a [u8],
    /// How far the reader has come.
    read: AtomicUsize,
    stop: AtomicBool,
}

impl<'a> MapAhead<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        MapAhead {
            bytes,
            read: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        }
    }

    /// The mapping thread: maps pages in up to [`AHEAD`] past the reader, parks while
    /// it is that far ahead, and returns once the input is mapped in, the kernel cannot
    /// do it, or [`MapAhead::stop`] is called.
    pub fn run(&self) {
        let mut mapped = 0;
        while mapped < self.bytes.len() && !self.stop.load(Ordering::Acquire) {
            let until = self
                .read
                .load(Ordering::Acquire)
                .saturating_add(AHEAD)
                .min(self.bytes.len());
            if mapped >= until {
                // Woken by the reader's next report (or spuriously: the loop checks).
                std::thread::park();
                continue;
            }
            let end = until.min(mapped + STEP);
            if !crate::prefault::populate_read(&self.bytes[mapped..end]) {
                return;
            }
            mapped = end;
        }
    }

    /// The reader has come to `offset`.
    pub fn reached(&self, offset: usize, mapper: &Thread) {
        self.read.store(offset, Ordering::Release);
        mapper.unpark();
    }

    /// Ends the mapping thread soon.
    pub fn stop(&self, mapper: &Thread) {
        self.stop.store(true, Ordering::Release);
        mapper.unpark();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The thread follows the reader to the end and stops; stopped early, it returns
    /// too (the scopes join it: these return only if it did). No byte changes.
    #[test]
    fn follows_the_reader_and_stops() {
        let bytes: Vec<u8> = (0..3 * AHEAD + 12345).map(|i| (i % 251) as u8).collect();
        let ahead = MapAhead::new(&bytes);
        std::thread::scope(|scope| {
            let mapper = scope.spawn(|| ahead.run());
            let mut offset = 0;
            while offset < bytes.len() {
                offset = (offset + (1 << 20)).min(bytes.len());
                ahead.reached(offset, mapper.thread());
            }
        });
        let ahead = MapAhead::new(&bytes);
        std::thread::scope(|scope| {
            let mapper = scope.spawn(|| ahead.run());
            ahead.reached(1 << 20, mapper.thread());
            ahead.stop(mapper.thread());
        });
        assert!(bytes.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    }
}
