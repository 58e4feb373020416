//! A reader that runs its source on a thread of its own, a few blocks ahead of the
//! consumer: inflating a gzip'd trace then overlaps with parsing it instead of taking
//! turns with it on the parsing thread.

use std::io::{self, Read};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::Scope;

/// Bytes per block handed over; large enough that the hand-over costs nothing, small
/// enough that the first block arrives at once.
const BLOCK_BYTES: usize = 256 << 10;

/// Blocks in flight: the producer may run this far ahead.
const BLOCKS_AHEAD: usize = 4;

/// The consumer's side; reads what the producer thread read, in order, and ends with
/// the producer's end or error.
pub struct ReadAhead {
    blocks: Receiver<io::Result<Vec<u8>>>,
    recycle: SyncSender<Vec<u8>>,
    current: Vec<u8>,
    position: usize,
    finished: bool,
}

impl ReadAhead {
    /// Starts reading `source` on a thread of `scope`. The thread stops when the source
    /// ends or fails, or soon after the returned reader is dropped.
    pub fn spawn<'scope, R: Read + Send + 'scope>(
        scope: &'scope Scope<'scope, '_>,
        mut source: R,
    ) -> ReadAhead {
        let (sender, blocks) = sync_channel::<io::Result<Vec<u8>>>(BLOCKS_AHEAD);
        let (recycle, recycled) = sync_channel::<Vec<u8>>(BLOCKS_AHEAD + 2);
        scope.spawn(move || loop {
            let mut block = recycled.try_recv().unwrap_or_default();
            block.resize(BLOCK_BYTES, 0);
            let (filled, error) = fill(&mut source, &mut block);
            block.truncate(filled);
            // A short block is the last: the source ended or failed. An error is
            // handed over after the bytes read before it; the consumer sees the end
            // when this thread returns and drops the sender.
            let last = filled < BLOCK_BYTES || error.is_some();
            let mut sent = (filled > 0 || error.is_none()) && sender.send(Ok(block)).is_ok();
            if let Some(error) = error {
                sent = sender.send(Err(error)).is_ok();
            }
            if !sent || last {
                return;
            }
        });
        ReadAhead {
            blocks,
            recycle,
            current: Vec::new(),
            position: 0,
            finished: false,
        }
    }
}

/// Reads until `block` is full, the source ends or fails: the count read, and the
/// error if it failed.
fn fill(source: &mut impl Read, block: &mut [u8]) -> (usize, Option<io::Error>) {
    let mut filled = 0;
    while filled < block.len() {
        match source.read(&mut block[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (filled, Some(e)),
        }
    }
    (filled, None)
}

impl Read for ReadAhead {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.position == self.current.len() {
            if self.finished {
                return Ok(0);
            }
            match self.blocks.recv() {
                Ok(Ok(block)) => {
                    let spent = std::mem::replace(&mut self.current, block);
                    let _ = self.recycle.try_send(spent);
                    self.position = 0;
                }
                Ok(Err(e)) => {
                    self.finished = true;
                    return Err(e);
                }
                Err(_) => {
                    self.finished = true;
                    return Ok(0);
                }
            }
        }
        let n = out.len().min(self.current.len() - self.position);
        out[..n].copy_from_slice(&self.current[self.position..self.position + n]);
        self.position += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hands out its data a few bytes at a time, then an error if it has one.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        error_at_end: bool,
    }

    impl Read for Trickle {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            if self.at == self.data.len() {
                if self.error_at_end {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "corrupt"));
                }
                return Ok(0);
            }
            let n = out.len().min(7).min(self.data.len() - self.at);
            out[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    fn read_all(len: usize, error_at_end: bool) -> (Vec<u8>, Option<io::Error>) {
        let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let source = Trickle {
            data,
            at: 0,
            error_at_end,
        };
        std::thread::scope(|scope| {
            let mut reader = ReadAhead::spawn(scope, source);
            let mut out = Vec::new();
            let error = reader.read_to_end(&mut out).err();
            (out, error)
        })
    }

    #[test]
    fn hands_over_every_byte_in_order() {
        for len in [
            0,
            1,
            BLOCK_BYTES - 1,
            BLOCK_BYTES,
            BLOCK_BYTES + 1,
            5 * BLOCK_BYTES + 3,
        ] {
            let (out, error) = read_all(len, false);
            assert!(error.is_none(), "len {len}");
            let expected: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            assert!(out == expected, "len {len}: {} bytes read", out.len());
        }
    }

    #[test]
    fn an_error_comes_after_the_bytes_read_before_it() {
        for len in [0, 10, BLOCK_BYTES, 2 * BLOCK_BYTES + 5] {
            let (out, error) = read_all(len, true);
            assert_eq!(out.len(), len);
            assert_eq!(
                error.map(|e| e.kind()),
                Some(io::ErrorKind::InvalidData),
                "len {len}"
            );
        }
    }

    #[test]
    fn dropping_the_reader_stops_the_thread() {
        let source = Trickle {
            data: vec![7; 20 * BLOCK_BYTES],
            at: 0,
            error_at_end: false,
        };
        // The scope joins the thread: this returns only if it stopped.
        std::thread::scope(|scope| {
            let mut reader = ReadAhead::spawn(scope, source);
            let mut first = [0u8; 10];
            reader.read_exact(&mut first).unwrap();
            assert_eq!(first, [7; 10]);
        });
    }
}
