//! GPU work and the CUDA calls that launched it, as CUPTI reports them: each device a
//! process of its own with a track per stream, and each call held back until its work
//! comes, so that the two share one flow.

use super::*;

/// The device (GPU index) of synthetic processes: above any Linux pid (at most 2^22),
/// distinct per recording process so that files put together never merge devices.
pub(super) fn device_pid(pid: i32, device: u32) -> i32 {
    (1 << 30) | (((device & 0xFF) as i32) << 22) | (pid & 0x3F_FFFF)
}

/// A slice written once its track or flow is known: its times, names and annotations.
pub(super) struct PendingSlice {
    pub(super) begin: u64,
    pub(super) end: u64,
    pub(super) category: Vec<u8>,
    pub(super) name: Vec<u8>,
    pub(super) annotations: Vec<u8>,
}

impl PendingSlice {
    /// The slice of a record that carries its begin in `id` (annotations come later).
    pub(super) fn of(r: &Record<'_>) -> PendingSlice {
        PendingSlice {
            begin: r.id,
            end: r.ts.max(r.id),
            category: r.category.to_vec(),
            name: r.name.to_vec(),
            annotations: Vec::new(),
        }
    }
}

/// Device work of one drain, placed once it is sorted: a stream's work never overlaps,
/// but CUPTI may hand it over out of order.
pub(super) struct DeviceWork {
    pub(super) slice: PendingSlice,
    pub(super) device: u32,
    pub(super) stream: u32,
    pub(super) correlation: u32,
}

/// A CUDA API call whose device work may still come: held back (for [`HOLD_NS`], at
/// most [`MAX_HELD_CALLS`]) so that, if it does, both get one flow. A flow id on a call
/// that launched nothing would be a flow without an end.
pub(super) struct HeldCall {
    pub(super) slice: PendingSlice,
    pub(super) tid: i32,
}

/// How long a CUDA call waits for its device work (CUPTI hands buffers over when they
/// are full: work and call may be some seconds apart).
pub(super) const HOLD_NS: u64 = 10_000_000_000;
pub(super) const MAX_HELD_CALLS: usize = 1 << 16;

/// Which side of a flow an event is.
#[derive(Clone, Copy)]
pub(super) enum Flow {
    None,
    Out(u64),
    In(u64),
}

impl Writer {
    /// The process track of `device`, described on first use as opscope's exporter
    /// describes a device's process (`opscope:device=gpu:N`).
    pub(super) fn device_process(&mut self, device: u32) -> u64 {
        if let Some(&uuid) = self.devices.get(&device) {
            return uuid;
        }
        let uuid = self.uuid();
        self.devices.insert(device, uuid);
        let pid = device_pid(self.pid, device) as u64;
        self.descriptor(|d| {
            uint(d, pb::TRACK_UUID, uuid);
            pb::bytes(
                d,
                pb::TRACK_DESCRIPTION,
                format!("opscope:device=gpu:{device}").as_bytes(),
            );
            message(d, pb::TRACK_PROCESS, |p| {
                uint(p, pb::PROCESS_PID, pid);
                pb::bytes(p, pb::PROCESS_NAME, format!("GPU {device}").as_bytes());
            });
        });
        uuid
    }

    /// A track of `(device, stream)` free from `begin` on: the stream's own (a thread
    /// of the device's process, marked `opscope:kind=gpu_stream`, as the exporter writes
    /// streams), or an overflow lane under it (`opscope:lane`) for work that overlaps.
    pub(super) fn stream_track(&mut self, device: u32, stream: u32, begin: u64, end: u64) -> u64 {
        let (free, number) = match self.streams.get_mut(&(device, stream)) {
            Some(lanes) => {
                let number = lanes.len();
                (lanes.iter_mut().find(|(_, last)| *last <= begin), number)
            }
            None => (None, 0),
        };
        if let Some((uuid, last)) = free {
            *last = end;
            return *uuid;
        }
        let uuid = self.uuid();
        let name = format!("stream {stream}");
        if number == 0 {
            let parent = self.device_process(device);
            let pid = device_pid(self.pid, device) as u64;
            self.descriptor(|d| {
                uint(d, pb::TRACK_UUID, uuid);
                uint(d, pb::TRACK_PARENT_UUID, parent);
                pb::bytes(d, pb::TRACK_DESCRIPTION, b"opscope:kind=gpu_stream");
                message(d, pb::TRACK_THREAD, |t| {
                    uint(t, pb::THREAD_PID, pid);
                    uint(t, pb::THREAD_TID, stream as u64);
                    pb::bytes(t, pb::THREAD_NAME, name.as_bytes());
                });
            });
        } else {
            let parent = self.streams[&(device, stream)][0].0;
            self.descriptor(|d| {
                uint(d, pb::TRACK_UUID, uuid);
                uint(d, pb::TRACK_PARENT_UUID, parent);
                pb::bytes(
                    d,
                    pb::TRACK_NAME,
                    format!("{name} #{}", number + 1).as_bytes(),
                );
                pb::bytes(d, pb::TRACK_DESCRIPTION, b"opscope:lane");
            });
        }
        self.streams
            .entry((device, stream))
            .or_default()
            .push((uuid, end));
        uuid
    }

    /// Writes this drain's device work in time order, with a flow from the call that
    /// launched it when that call is held.
    pub(super) fn place_device_work(&mut self) {
        let mut work = std::mem::take(&mut self.device_work);
        work.sort_by_key(|w| (w.slice.begin, w.slice.end));
        for w in work.drain(..) {
            let flow = match self.held_calls.remove(&w.correlation) {
                Some(call) if w.correlation != 0 => {
                    let id = w.correlation as u64;
                    self.write_call(call, Flow::Out(id));
                    Flow::In(id)
                }
                _ => Flow::None,
            };
            let track = self.stream_track(w.device, w.stream, w.slice.begin, w.slice.end);
            self.write_pending(&w.slice, track, flow);
        }
        // Keep the allocation for the next drain.
        self.device_work = work;
    }

    pub(super) fn hold_call(&mut self, correlation: u32, call: HeldCall) {
        if let Some(earlier) = self.held_calls.insert(correlation, call) {
            // Correlation ids are unique; one seen twice ties nothing.
            self.write_call(earlier, Flow::None);
        }
        self.held_order
            .push_back((correlation, clock::monotonic_ns()));
    }

    /// Writes the held calls that waited long enough (all of them when `all`), or that
    /// are too many, without a flow.
    pub(super) fn release_held_calls(&mut self, all: bool) {
        let now = clock::monotonic_ns();
        while let Some(&(correlation, since)) = self.held_order.front() {
            let due = all
                || now.saturating_sub(since) >= HOLD_NS
                || self.held_calls.len() > MAX_HELD_CALLS;
            if !due && self.held_calls.contains_key(&correlation) {
                break;
            }
            self.held_order.pop_front();
            if let Some(call) = self.held_calls.remove(&correlation) {
                self.write_call(call, Flow::None);
            }
        }
    }

    /// A CUDA API call on its thread's track.
    pub(super) fn write_call(&mut self, call: HeldCall, flow: Flow) {
        let track = self.thread_track(call.tid, 0, None);
        self.write_pending(&call.slice, track, flow);
    }

    fn write_pending(&mut self, slice: &PendingSlice, track: u64, flow: Flow) {
        self.flow_event(
            slice.begin,
            track,
            pb::TYPE_SLICE_BEGIN,
            &slice.category,
            &slice.name,
            &slice.annotations,
            flow,
        );
        self.absolute_event(slice.end, track, pb::TYPE_SLICE_END, b"", b"", &[]);
    }

    /// [`Writer::absolute_event`] with one end of a flow: Perfetto draws an arrow from
    /// the event with `flow_ids` to the one with the same `terminating_flow_ids`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn flow_event(
        &mut self,
        ts: u64,
        track: u64,
        kind: u64,
        category: &[u8],
        name: &[u8],
        annotations: &[u8],
        flow: Flow,
    ) {
        message(&mut self.packets, pb::PACKET, |p| {
            uint(p, pb::PACKET_TIMESTAMP, ts);
            uint(p, pb::PACKET_TIMESTAMP_CLOCK_ID, pb::CLOCK_MONOTONIC);
            uint(p, pb::PACKET_SEQUENCE_ID, GLOBAL_SEQUENCE);
            message(p, pb::PACKET_TRACK_EVENT, |e| {
                uint(e, pb::EVENT_TYPE, kind);
                uint(e, pb::EVENT_TRACK_UUID, track);
                if !category.is_empty() {
                    pb::bytes(e, pb::EVENT_CATEGORIES, category);
                }
                if !name.is_empty() {
                    pb::bytes(e, pb::EVENT_NAME, name);
                }
                match flow {
                    Flow::None => {}
                    Flow::Out(id) => pb::fixed64(e, pb::EVENT_FLOW_IDS, id),
                    Flow::In(id) => pb::fixed64(e, pb::EVENT_TERMINATING_FLOW_IDS, id),
                }
                e.extend_from_slice(annotations);
            });
        });
    }

    /// Writes held CUDA calls now, without waiting for their device work: for exits
    /// that skip `atexit`, which end the process right after.
    pub fn write_held(&mut self) -> std::io::Result<()> {
        self.release_held_calls(true);
        self.write_chunk()
    }
}
