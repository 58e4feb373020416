//! Decoding on a second thread: the streams are read and merged by time there, and
//! their events reach the caller in batches, so that decoding overlaps with mapping.
//!
//! Only the payload's values are copied into the batch: the headers and contexts are
//! read on the decoding thread (`prepare`), and every byte handed over is a cache miss
//! on the mapping thread. String values keep pointing into the stream files.
//!
//! [`pipelined`] is the hand-over itself (batches one way, the model's spare capacity
//! the other, for the decoding thread to map in while it waits), which opscope's own
//! reader (`mapping::own`) uses too.

use std::ops::Range;
use std::sync::mpsc;

use super::decode::{Event, Layout, Val};
use crate::error::ImportError;
use crate::prefault::Prefaulter;

/// Events per batch: large enough that hand-overs are rare, small enough to stay in
/// cache.
const BATCH_EVENTS: usize = 2048;
/// Batches in flight: the decoder stays this far ahead at most.
const BATCHES_AHEAD: usize = 4;

/// What one stream file held, once read.
#[derive(Clone, Copy, Debug, Default)]
pub struct StreamCounts {
    pub events: u64,
    pub events_discarded: u64,
}

struct Head<P> {
    stream_index: u32,
    stream: u32,
    event: u32,
    timestamp: u64,
    cpu_id: Option<u64>,
    /// The event's payload is `vals[start..]` up to the next event's start.
    start: u32,
    has_payload: bool,
    prepared: P,
}

struct Batch<P> {
    heads: Vec<Head<P>>,
    vals: Vec<Val>,
}

impl<P> Default for Batch<P> {
    fn default() -> Self {
        Batch {
            heads: Vec::new(),
            vals: Vec::new(),
        }
    }
}

impl<P> Batch<P> {
    fn clear(&mut self) {
        self.heads.clear();
        self.vals.clear();
    }
}

/// Where [`read_merged_batched`] delivers, on the caller's thread.
pub trait Sink<'a, P> {
    /// One event, in time order: `prepared` is what `prepare` made of it.
    fn event(&mut self, stream_index: usize, event: &Event<'a, '_>, prepared: P);

    /// After each batch: the address ranges of the model's spare capacity (see
    /// [`crate::prefault`]), which the decoding thread maps in when it is ahead instead
    /// of waiting.
    fn spare_capacity(&mut self, out: &mut Vec<Range<usize>>);
}

/// Like [`super::read_merged`], with the decoding on a thread of its own (and the
/// stream event contexts' values kept only when `keep_context`): `sink.event(stream
/// index, event, prepare(event))` is called on the caller's thread, in time order, with
/// the event's payload only (`scopes[3]` is 0, or `u32::MAX` without one); `prepare`
/// runs on the decoding thread and sees the whole event. Returns what each stream held
/// and the first error.
pub fn read_merged_batched<'a, P: Copy + Send>(
    layout: &'a Layout,
    streams: &[(String, &'a [u8])],
    keep_context: bool,
    mut prepare: impl FnMut(&Event<'a, '_>) -> P + Send,
    sink: &mut impl Sink<'a, P>,
) -> (Vec<StreamCounts>, Option<ImportError>) {
    let decode = |hand_over: &mut HandOver<Batch<P>>| {
        let mut batch = Batch::<P>::default();
        let mut receiver_gone = false;
        // Nobody here reads the event headers' values.
        let keep = super::Keep {
            header: false,
            context: keep_context,
        };
        let (readers, error) = super::read_merged_keeping(layout, streams, keep, |i, r| {
            if receiver_gone {
                return;
            }
            let prepared = prepare(&r.current());
            let payload = r.scopes[3];
            batch.heads.push(Head {
                prepared,
                stream_index: i as u32,
                stream: r.stream as u32,
                event: r.event as u32,
                timestamp: r.timestamp,
                cpu_id: r.cpu_id,
                start: batch.vals.len() as u32,
                has_payload: payload != u32::MAX,
            });
            if let Some(vals) = r.vals.get(payload as usize..) {
                batch.vals.extend_from_slice(vals);
            }
            if batch.heads.len() >= BATCH_EVENTS {
                receiver_gone = !hand_over.send(&mut batch);
            }
        });
        if !batch.heads.is_empty() && !receiver_gone {
            hand_over.send(&mut batch);
        }
        let counts: Vec<StreamCounts> = readers
            .iter()
            .map(|r| StreamCounts {
                events: r.events,
                events_discarded: r.events_discarded,
            })
            .collect();
        (counts, error)
    };
    pipelined(decode, |batch: &mut Batch<P>, spare| {
        for (n, h) in batch.heads.iter().enumerate() {
            let end = batch
                .heads
                .get(n + 1)
                .map_or(batch.vals.len(), |next| next.start as usize);
            let i = h.stream_index as usize;
            let event = Event {
                file: streams[i].1,
                stream: h.stream as usize,
                event: h.event as usize,
                timestamp: h.timestamp,
                cpu_id: h.cpu_id,
                scopes: [
                    u32::MAX,
                    u32::MAX,
                    u32::MAX,
                    if h.has_payload { 0 } else { u32::MAX },
                ],
                vals: &batch.vals[h.start as usize..end],
                context_at: None,
            };
            sink.event(i, &event, h.prepared);
        }
        batch.clear();
        sink.spare_capacity(spare);
    })
}

/// A batch on its way between the two threads, with, on its way back, the model's
/// spare capacity once the batch was mapped.
struct Carrier<B> {
    batch: B,
    spare: Vec<Range<usize>>,
}

/// The decoding thread's end of [`pipelined`].
pub(crate) struct HandOver<B> {
    full: mpsc::SyncSender<Carrier<B>>,
    empty: mpsc::Receiver<Carrier<B>>,
    /// Batches back from the mapping thread, for reuse.
    empties: Vec<Carrier<B>>,
    prefaulter: Prefaulter,
}

impl<B: Default> HandOver<B> {
    /// Hands a full batch over, leaving an empty one in its place; while the mapping
    /// thread is behind, maps in the model's next pages instead of waiting. False once
    /// the mapping thread is gone.
    pub(crate) fn send(&mut self, batch: &mut B) -> bool {
        let next = self.empties.pop().map(|c| c.batch).unwrap_or_default();
        let mut full = Carrier {
            batch: std::mem::replace(batch, next),
            spare: Vec::new(),
        };
        loop {
            let returned = self.empties.len();
            self.empties.extend(self.empty.try_iter());
            // Only the latest ranges matter: the columns may have moved since.
            if let Some(latest) = self.empties[returned..].last() {
                self.prefaulter.update(&latest.spare);
            }
            match self.full.try_send(full) {
                Ok(()) => return true,
                Err(mpsc::TrySendError::Disconnected(_)) => return false,
                Err(mpsc::TrySendError::Full(back)) => full = back,
            }
            if !self.prefaulter.has_work() {
                return self.full.send(full).is_ok();
            }
            self.prefaulter.step();
        }
    }
}

/// Runs `decode` on a thread of its own, handing batches over to `map` on the
/// caller's thread (which empties each and says the model's spare capacity, see
/// [`crate::prefault`]); returns what `decode` returns.
pub(crate) fn pipelined<B: Default + Send, R: Send>(
    decode: impl FnOnce(&mut HandOver<B>) -> R + Send,
    mut map: impl FnMut(&mut B, &mut Vec<Range<usize>>),
) -> R {
    std::thread::scope(|scope| {
        let (full_tx, full_rx) = mpsc::sync_channel::<Carrier<B>>(BATCHES_AHEAD);
        let (empty_tx, empty_rx) = mpsc::channel::<Carrier<B>>();
        let decoder = scope.spawn(move || {
            let mut hand_over = HandOver {
                full: full_tx,
                empty: empty_rx,
                empties: Vec::new(),
                prefaulter: Prefaulter::default(),
            };
            decode(&mut hand_over)
        });
        for mut carrier in full_rx {
            map(&mut carrier.batch, &mut carrier.spare);
            // The decoder may have finished: then nobody reuses the batch.
            let _ = empty_tx.send(carrier);
        }
        decoder
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}
