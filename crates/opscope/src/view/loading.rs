//! A picture while the trace loads: the viewer serves at once, and the load offers
//! copies of the model as it stands (`opscope_formats::watch`); each is drawn into a
//! draft view model that replaces the last, until the whole model replaces them all.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opscope_formats::watch::{Partial, Watcher};

use super::model::ViewModel;
use super::Shared;

/// The first draft is drawn from the first events read; the next after this, and each
/// gap after that twice the last...
const FIRST_GAP: Duration = Duration::from_millis(250);
/// ...and at most one part in this many of the time goes to them (copying, sorting and
/// summarising what is loaded so far), so that the whole model is late by little.
const GAP_PER_COST: u32 = 8;
/// No draft when the rest of the load should take less than this many times what the
/// draft would cost (the last one's, grown with what has been read since): the whole
/// model is about to come, and a draft would only delay it.
const LEFT_PER_COST: u32 = 8;
/// Drafts of at least this many bytes read tell what a later one will cost.
const ESTIMATE_FROM: u64 = 64 << 20;

/// How far the load is, for the page.
#[derive(Default)]
pub struct Progress {
    pub loading: AtomicBool,
    pub done: AtomicU64,
    pub total: AtomicU64,
}

impl Progress {
    /// `(bytes read, bytes in all)` while loading.
    pub fn get(&self) -> Option<(u64, u64)> {
        self.loading.load(Ordering::Acquire).then(|| {
            (
                self.done.load(Ordering::Relaxed),
                self.total.load(Ordering::Relaxed),
            )
        })
    }
}

/// When the next draft is due.
struct Schedule {
    started: Instant,
    next: Duration,
    gap: Duration,
    /// A draft is being copied or drawn: none is asked for meanwhile.
    busy: bool,
    /// When the copy being made was asked for (its cost counts the copying), and the
    /// bytes read then.
    asked: Option<(Instant, u64)>,
    /// What the last draft cost, and the bytes read when it was asked for.
    last: Option<(Duration, u64)>,
}

/// A copy to draw, when it was asked for and the bytes read then.
type Asked = (Partial, (Instant, u64));

/// The watcher of a load that the viewer draws while it runs.
pub struct Drafts {
    shared: Arc<Shared>,
    schedule: Mutex<Schedule>,
    to_draw: Mutex<Option<SyncSender<Asked>>>,
    drawer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Drafts {
    /// Starts the thread that draws drafts into `shared`, titled `title`.
    pub fn start(shared: Arc<Shared>, title: String) -> Arc<Drafts> {
        let (sender, drafts) = std::sync::mpsc::sync_channel(1);
        let this = Arc::new(Drafts {
            shared,
            schedule: Mutex::new(Schedule {
                started: Instant::now(),
                next: Duration::ZERO,
                gap: FIRST_GAP,
                busy: false,
                asked: None,
                last: None,
            }),
            to_draw: Mutex::new(Some(sender)),
            drawer: Mutex::new(None),
        });
        let drawer = this.clone();
        let handle = std::thread::spawn(move || drawer.draw(drafts, &title));
        *this.drawer.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        this
    }

    /// No more drafts: the drawing thread ends after those it holds. The whole model
    /// does not wait for it (a draft drawn after it is dropped).
    pub fn stop(&self) {
        self.lock_sender().take();
    }

    /// No more drafts, once those offered are shown: after a failed load, the last one
    /// holds what was read before the error.
    pub fn stop_and_wait(&self) {
        self.stop();
        let drawer = self.drawer.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(drawer) = drawer {
            let _ = drawer.join();
        }
    }

    fn lock_schedule(&self) -> std::sync::MutexGuard<'_, Schedule> {
        self.schedule.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_sender(&self) -> std::sync::MutexGuard<'_, Option<SyncSender<Asked>>> {
        self.to_draw.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn draw(&self, drafts: Receiver<Asked>, title: &str) {
        for (partial, (asked, done)) in drafts {
            let model = Arc::new(ViewModel::build(partial.finish(), title.to_string()));
            // The whole model may have come meanwhile: a draft never replaces it.
            if self.shared.install(model, true) {
                let cost = asked.elapsed();
                let mut schedule = self.lock_schedule();
                let now = schedule.started.elapsed();
                schedule.next = now + schedule.gap.max(cost * GAP_PER_COST);
                schedule.gap *= 2;
                // A small draft's cost is mostly fixed (a thread to wake on two busy
                // cores), not a guide to a larger one's.
                if done >= ESTIMATE_FROM {
                    schedule.last = Some((cost, done));
                }
            }
            self.lock_schedule().busy = false;
        }
    }
}

impl Watcher for Drafts {
    fn begin(&self, total_bytes: u64) {
        self.shared
            .progress
            .total
            .store(total_bytes, Ordering::Relaxed);
    }

    fn read(&self, done_bytes: u64) {
        self.shared
            .progress
            .done
            .store(done_bytes, Ordering::Relaxed);
    }

    fn wants_copy(&self) -> bool {
        let mut schedule = self.lock_schedule();
        let elapsed = schedule.started.elapsed();
        if schedule.busy || elapsed < schedule.next || self.lock_sender().is_none() {
            return false;
        }
        let (done, total) = self.shared.progress.get().unwrap_or((0, 0));
        if let Some((cost, then)) = schedule.last.filter(|_| total > 0 && done > 0) {
            let left = elapsed.mul_f64(total.saturating_sub(done) as f64 / done as f64);
            let next_cost = cost.mul_f64(done as f64 / then.max(1) as f64);
            if left < next_cost * LEFT_PER_COST {
                return false;
            }
        }
        schedule.busy = true;
        schedule.asked = Some((Instant::now(), done));
        true
    }

    fn copy(&self, copy: Partial) {
        let asked = self
            .lock_schedule()
            .asked
            .take()
            .unwrap_or((Instant::now(), 0));
        let sent = match self.lock_sender().as_ref() {
            Some(sender) => sender.try_send((copy, asked)),
            None => Err(TrySendError::Disconnected((copy, asked))),
        };
        if sent.is_err() {
            self.lock_schedule().busy = false;
        }
    }
}
