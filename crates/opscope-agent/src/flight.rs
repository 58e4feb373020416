//! The flight recorder: the chunks of every job's processes as they arrived, in their
//! recorded (compressed) form, the oldest dropped first once they are older than the
//! window or the whole passes the memory bound. A dump is a process's preamble followed
//! by its chunks still held: a Perfetto file like the one it writes itself.

use std::collections::VecDeque;

/// One process of one job, as the agent numbers them.
pub type ProcessKey = u64;

struct Stored {
    process: ProcessKey,
    arrived_ns: u64,
    bytes: Box<[u8]>,
}

pub struct Flight {
    chunks: VecDeque<Stored>,
    bytes: usize,
    bound: usize,
    window_ns: u64,
    /// Chunks that had to go for the memory bound before their time was up.
    evicted_early: u64,
    evicted_early_bytes: u64,
}

impl Flight {
    pub fn new(bound: usize, window_ns: u64) -> Flight {
        Flight {
            chunks: VecDeque::new(),
            bytes: 0,
            bound,
            window_ns,
            evicted_early: 0,
            evicted_early_bytes: 0,
        }
    }

    /// Keeps `bytes` for `process`, arrived at `now_ns`, making room as needed.
    pub fn push(&mut self, process: ProcessKey, now_ns: u64, bytes: &[u8]) {
        self.expire(now_ns);
        if bytes.len() > self.bound {
            self.evicted_early += 1;
            self.evicted_early_bytes += bytes.len() as u64;
            return;
        }
        while self.bytes + bytes.len() > self.bound {
            let Some(old) = self.chunks.pop_front() else {
                break;
            };
            self.bytes -= old.bytes.len();
            self.evicted_early += 1;
            self.evicted_early_bytes += old.bytes.len() as u64;
        }
        self.bytes += bytes.len();
        self.chunks.push_back(Stored {
            process,
            arrived_ns: now_ns,
            bytes: bytes.into(),
        });
    }

    /// Drops what is older than the window.
    pub fn expire(&mut self, now_ns: u64) {
        while let Some(old) = self.chunks.front() {
            if now_ns.saturating_sub(old.arrived_ns) <= self.window_ns {
                break;
            }
            self.bytes -= old.bytes.len();
            self.chunks.pop_front();
        }
    }

    /// The chunks of `process` that arrived at or after `since_ns`, oldest first.
    pub fn chunks_of(
        &self,
        process: ProcessKey,
        since_ns: u64,
    ) -> impl Iterator<Item = &[u8]> + '_ {
        self.chunks
            .iter()
            .filter(move |c| c.process == process && c.arrived_ns >= since_ns)
            .map(|c| &c.bytes[..])
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn bound(&self) -> usize {
        self.bound
    }

    pub fn window_ns(&self) -> u64 {
        self.window_ns
    }

    pub fn evicted_early(&self) -> (u64, u64) {
        (self.evicted_early, self.evicted_early_bytes)
    }

    /// How far back the oldest chunk held goes, from `now_ns`.
    pub fn held_ns(&self, now_ns: u64) -> u64 {
        self.chunks
            .front()
            .map_or(0, |c| now_ns.saturating_sub(c.arrived_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_go_first_for_the_bound_and_for_the_window() {
        let mut f = Flight::new(10, 1_000);
        f.push(1, 0, b"aaaa");
        f.push(2, 10, b"bbbb");
        assert_eq!(f.bytes(), 8);
        f.push(1, 20, b"cccc"); // 12 > 10: the oldest goes
        assert_eq!(f.bytes(), 8);
        assert_eq!(f.evicted_early(), (1, 4));
        assert_eq!(f.chunks_of(1, 0).collect::<Vec<_>>(), vec![&b"cccc"[..]]);
        assert_eq!(f.chunks_of(2, 0).count(), 1);
        assert_eq!(f.chunks_of(2, 11).count(), 0);
        // Past the window: 10 is more than 1,000 before 1,015; 20 is not.
        f.expire(1_015);
        assert_eq!(f.chunks_of(2, 0).count(), 0);
        assert_eq!(f.chunks_of(1, 0).count(), 1);
        assert_eq!(f.evicted_early(), (1, 4), "expiry is not eviction");
        // A chunk bigger than the whole bound is not kept and costs nothing else.
        f.push(3, 1_016, &[0u8; 11]);
        assert_eq!(f.chunks_of(1, 0).count(), 1);
        assert_eq!(f.evicted_early(), (2, 15));
    }
}
