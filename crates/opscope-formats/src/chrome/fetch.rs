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
    let mut start = 0;
    loop {
        let mut buf = empties.try_recv().unwrap_or_default();
        let want = start + chunk_bytes;
        // Buffers that come back hold old text: reading over it needs no zeroing.
        if buf.len() < want {
            buf.resize(want, 0);
        }
        let mut len = 0;
        let mut end = None;
        while start + len < want {
            match reader.read(&mut buf[start + len..want]) {
                Ok(0) => {
                    end = Some(Piece::End);
                    break;
                }
                Ok(n) => len += n,
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
        start = headroom;
    }
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
