//! Reads a stream ahead of the thread that scans it, on a thread of its own: a file's
//! `read` copies, or a gzip stream's inflating, run on the other core while the events
//! already read are scanned. Each piece is read into a buffer after a little headroom,
//! so that the scanner can put the unfinished event it kept from the piece before in
//! front of it without copying the piece.

use std::io::{self, Read};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::thread::Scope;

/// The most headroom left before a piece: an event cut by a piece's end is rarely
/// longer (a longer one is copied).
const HEADROOM: usize = 16 << 10;

/// What the reading thread gets next.
pub(crate) enum Piece {
    /// `buf[start..start + len]` is the stream's next `len` bytes (`len > 0`);
    /// `buf[..start]` is free for the scanner's use.
    Data {
        buf: Vec<u8>,
        start: usize,
        len: usize,
    },
    End,
    Failed(io::Error),
}

/// The scanner's end of the reading thread.
pub(crate) struct Fetcher {
    pieces: Receiver<Piece>,
    empties: Sender<Vec<u8>>,
}

impl Fetcher {
    /// Starts reading `reader` in pieces of `chunk_bytes` on a thread of `scope`. The
    /// thread ends at the stream's end or error, or once this is dropped and it has a
    /// piece to hand over.
    pub fn spawn<'scope, 'env: 'scope>(
        scope: &'scope Scope<'scope, 'env>,
        reader: Box<dyn Read + Send + 'env>,
        chunk_bytes: usize,
    ) -> Fetcher {
        // Two pieces waiting: the inflating or copying stays ahead without holding
        // much.
        let (piece_sender, pieces) = sync_channel(2);
        let (empties, empty_receiver) = channel();
        scope.spawn(move || fetch(reader, chunk_bytes, &piece_sender, &empty_receiver));
        Fetcher { pieces, empties }
    }

    /// The next piece; `End` once the thread is gone.
    pub fn next(&self) -> Piece {
        self.pieces.recv().unwrap_or(Piece::End)
    }

    /// A buffer to read a later piece into.
    pub fn give_back(&self, buf: Vec<u8>) {
        let _ = self.empties.send(buf);
    }
}

fn fetch(
    mut reader: Box<dyn Read + Send + '_>,
    chunk_bytes: usize,
    pieces: &SyncSender<Piece>,
    empties: &Receiver<Vec<u8>>,
) {
    let chunk_bytes = chunk_bytes.max(1);
    let headroom = chunk_bytes.min(HEADROOM);
    // The first piece has nothing before it.
    let mut first = true;
    // Bytes of the stream read so far: where the next piece starts in a file.
    let mut position = 0u64;
    loop {
        let mut buf = empties.try_recv().unwrap_or_default();
        // Buffers that come back hold old text: reading over it needs no zeroing. Their
        // length is settled before their address is used, so they never move after.
        // Pieces under a page (tests and fuzzing cut streams into bytes) are not put in
        // phase: the room for it would be most of their buffer.
        let phase_room = if chunk_bytes >= PAGE { PAGE } else { 0 };
        let room = headroom + phase_room + chunk_bytes;
        if buf.len() < room {
            buf.resize(room, 0);
        }
        let start = if first {
            0
        } else if phase_room == 0 {
            headroom
        } else {
            headroom + page_phase(buf.as_ptr() as usize + headroom, position)
        };
        let want = start + chunk_bytes;
        let mut len = 0;
        let mut end = None;
        while start + len < want {
            match reader.read(&mut buf[start + len..want]) {
                Ok(0) => {
                    end = Some(Piece::End);
                    break;
                }
                Ok(n) => {
                    len += n;
                    position += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    end = Some(Piece::Failed(e));
                    break;
                }
            }
        }
        if len > 0 && pieces.send(Piece::Data { buf, start, len }).is_err() {
            return;
        }
        if let Some(end) = end {
            let _ = pieces.send(end);
            return;
        }
        first = false;
    }
}

/// The page the kernel's copies out of the page cache are measured in.
const PAGE: usize = 4096;

/// How far past `address` a piece of a file read from `position` on goes so that both
/// sit at one offset within their pages. The kernel's `read` copies with `rep movsb`,
/// which on AMD EPYC (family 25, as a KVM guest) runs 5× slower when the destination
/// is 1–31 bytes past the source within a page (a 1 GB file: 0.45 s against 0.09 s):
/// a large `Vec` from `malloc`'s mapping begins 16 bytes into a page, and those reads
/// took 1.1–1.5 s of system time in the load of a 1 GB trace.
fn page_phase(address: usize, position: u64) -> usize {
    ((position as usize).wrapping_sub(address)) % PAGE
}

/// The text the scanner has not consumed yet: `bytes[..filled]`, starting at `base` in
/// the document. Each piece read is put after it without copying the piece: the window's
/// text goes into the room before the piece, and the piece's buffer becomes the window;
/// the piece is copied only onto a window too long for that room.
#[derive(Default)]
pub(crate) struct Window {
    bytes: Vec<u8>,
    pub filled: usize,
    pub base: u64,
    /// The short buffer a handed-over window's unconsumed end is kept in.
    carry: Vec<u8>,
}

impl Window {
    pub fn text(&self) -> &[u8] {
        &self.bytes[..self.filled]
    }

    /// Puts the piece `buf[start..start + len]` after the window's text.
    pub fn take(
        &mut self,
        mut buf: Vec<u8>,
        start: usize,
        len: usize,
        fetcher: &Fetcher,
        chunk_bytes: usize,
    ) {
        // Spaces before the text (JSON whitespace: the window starts between tokens)
        // fill the room it leaves, and move where the window starts in the document.
        let pad = start.wrapping_sub(self.filled);
        if self.filled <= start && pad as u64 <= self.base {
            buf[pad..start].copy_from_slice(self.text());
            buf[..pad].fill(b' ');
            self.base -= pad as u64;
            self.filled = start + len;
            let old = std::mem::replace(&mut self.bytes, buf);
            // A piece's buffer goes back to be read into; the short one a carried end
            // was in carries the next.
            if old.capacity() >= chunk_bytes {
                fetcher.give_back(old);
            } else {
                self.carry = old;
            }
        } else {
            self.bytes.truncate(self.filled);
            self.bytes.extend_from_slice(&buf[start..start + len]);
            self.filled += len;
            fetcher.give_back(buf);
        }
    }

    /// The window's buffer, to be handed over whole; the window keeps its text from
    /// `rest` on (still at `base`, until [`Window::consumed`] moves it).
    pub fn hand_over(&mut self, rest: usize) -> Vec<u8> {
        let mut tail = std::mem::take(&mut self.carry);
        tail.clear();
        tail.extend_from_slice(&self.bytes[rest..self.filled]);
        self.filled = tail.len();
        std::mem::replace(&mut self.bytes, tail)
    }

    /// The scanner consumed `consumed` bytes of the text; `drop_them` when the text is
    /// still in the window (not handed over).
    pub fn consumed(&mut self, consumed: usize, drop_them: bool) {
        if drop_them {
            self.bytes.copy_within(consumed..self.filled, 0);
            self.filled -= consumed;
        }
        self.base += consumed as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::{Fetcher, Piece, PAGE};
    use std::io::Read;
    use std::sync::{Arc, Mutex};

    /// A stream that notes where each `read` wrote and from which position.
    struct Noting {
        text: Vec<u8>,
        at: usize,
        reads: Arc<Mutex<Vec<(usize, usize)>>>,
    }

    impl Read for Noting {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            // Short reads now and then, as a pipe or a signal gives them.
            let n = buf.len().min(self.text.len() - self.at).min(100_003);
            self.reads
                .lock()
                .unwrap()
                .push((buf.as_ptr() as usize, self.at));
            buf[..n].copy_from_slice(&self.text[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    /// Every read after the first piece lands at the offset within its page that its
    /// position in the stream has (the kernel's copy from the page cache is then at its
    /// fastest), and the pieces are the stream's bytes in order.
    #[test]
    fn reads_land_at_their_position_within_a_page() {
        let text: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let reads = Arc::new(Mutex::new(Vec::new()));
        let reader = Noting {
            text: text.clone(),
            at: 0,
            reads: reads.clone(),
        };
        let chunk = 256 << 10;
        let mut got = Vec::new();
        std::thread::scope(|scope| {
            let fetcher = Fetcher::spawn(scope, Box::new(reader), chunk);
            loop {
                match fetcher.next() {
                    Piece::Data { buf, start, len } => {
                        got.extend_from_slice(&buf[start..start + len]);
                        fetcher.give_back(buf);
                    }
                    Piece::End => break,
                    Piece::Failed(e) => panic!("{e}"),
                }
            }
        });
        assert_eq!(got, text);
        let reads = reads.lock().unwrap();
        let later: Vec<_> = reads.iter().filter(|&&(_, at)| at >= chunk).collect();
        assert!(later.len() > 10);
        for &&(address, at) in &later {
            assert_eq!(address % PAGE, at % PAGE, "a read from {at}");
        }
    }
}
