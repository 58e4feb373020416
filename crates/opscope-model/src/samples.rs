//! Sampled call stacks: what a thread was running at sampled moments (Python frames
//! read from outside the process, later native ones), on the thread tracks of the
//! same model and clock as its ops, so each op has the stacks that ran under it.
//! Stacks are a prefix tree of frames, as Perfetto's and samply's tables keep them.

use std::ops::Range;

use hashbrown::HashMap;

use crate::dims::TrackId;
use crate::events::{apply, columns, push_spare, AsColumn, Column};
use crate::strings::StrId;
use crate::NONE;

/// Bits of [`StackSamples::state`]: what the sampler knew of the thread.
pub mod state {
    /// Running or runnable (on a CPU, or waiting for one), not blocked: the samples a
    /// CPU-time view counts. A wall-time view counts every sample.
    pub const ACTIVE: u32 = 1;
    /// The thread held the GIL.
    pub const GIL: u32 = 2;
    /// The sampler could tell whether the thread was active (otherwise `ACTIVE` is
    /// unset and means nothing).
    pub const ACTIVE_KNOWN: u32 = 4;
}

columns! {
    /// Distinct frames: a function, its file and the line running in it.
    pub struct Frames {
        pub function: StrId,
        pub file: StrId,
        /// The line executing in the function (0: not known).
        pub line: u32,
    }
}

columns! {
    /// Nodes of the stack tree: a frame called from its parent node ([`NONE`] for an
    /// outermost frame). A stack is its innermost node.
    pub struct StackNodes {
        pub parent: u32,
        pub frame: u32,
    }
}

columns! {
    /// One row per sample of a thread.
    pub struct StackSamples {
        pub ts: i64,
        /// The thread's track (kind `Thread`).
        pub track: u32,
        /// The innermost node of the stack, or [`NONE`] for a thread that ran no
        /// frame the sampler could read.
        pub stack: u32,
        /// The time this sample stands for (the sampling interval it ends or starts),
        /// its weight in time views.
        pub period: i64,
        /// [`state`] bits.
        pub state: u32,
    }
}

/// The stack tree, with the look-ups that keep frames and nodes distinct while an
/// importer adds them (not saved: a model read back only reads them).
#[derive(Clone, Default, Debug, serde::Serialize, serde::Deserialize)]
pub struct Stacks {
    pub frames: Frames,
    pub nodes: StackNodes,
    #[serde(skip)]
    frame_index: HashMap<(StrId, StrId, u32), u32>,
    #[serde(skip)]
    node_index: HashMap<(u32, u32), u32>,
}

impl Stacks {
    /// The frame of `function` in `file` at `line`, added on first use.
    pub fn frame(&mut self, function: StrId, file: StrId, line: u32) -> u32 {
        if self.frame_index.len() != self.frames.len() {
            self.reindex();
        }
        *self
            .frame_index
            .entry((function, file, line))
            .or_insert_with(|| {
                self.frames.function.push(function);
                self.frames.file.push(file);
                self.frames.line.push(line);
                self.frames.function.len() as u32 - 1
            })
    }

    /// The node of `frame` called from node `parent` ([`NONE`]: outermost).
    pub fn node(&mut self, parent: u32, frame: u32) -> u32 {
        if self.node_index.len() != self.nodes.len() {
            self.reindex();
        }
        *self.node_index.entry((parent, frame)).or_insert_with(|| {
            self.nodes.parent.push(parent);
            self.nodes.frame.push(frame);
            self.nodes.parent.len() as u32 - 1
        })
    }

    /// The stack of `frames`, outermost first: its innermost node, or [`NONE`] when
    /// there is no frame.
    pub fn stack(&mut self, frames: impl IntoIterator<Item = u32>) -> u32 {
        frames
            .into_iter()
            .fold(NONE, |parent, f| self.node(parent, f))
    }

    /// The frames of the stack ending at `node`, innermost first.
    pub fn frames_of(&self, node: u32) -> impl Iterator<Item = u32> + '_ {
        let mut at = node;
        std::iter::from_fn(move || {
            let n = *self.nodes.parent.get(at as usize)?;
            let frame = self.nodes.frame[at as usize];
            at = n;
            Some(frame)
        })
    }

    /// Rebuilds the look-ups (a model read back, or one whose tables were moved).
    fn reindex(&mut self) {
        self.frame_index = (0..self.frames.len())
            .map(|i| {
                let f = &self.frames;
                ((f.function[i], f.file[i], f.line[i]), i as u32)
            })
            .collect();
        self.node_index = (0..self.nodes.len())
            .map(|i| ((self.nodes.parent[i], self.nodes.frame[i]), i as u32))
            .collect();
    }

    pub fn heap_bytes(&self) -> usize {
        self.frames.heap_bytes() + self.nodes.heap_bytes()
    }

    pub(crate) fn shrink_to_fit(&mut self) {
        self.frames.shrink_to_fit();
        self.nodes.shrink_to_fit();
    }

    /// Whether every reference resolves and parents come before children (so that no
    /// walk up the tree can loop).
    pub(crate) fn check(&self, n_strings: usize) -> Result<(), String> {
        let (f, n) = (&self.frames, &self.nodes);
        if !f.columns_agree() || !n.columns_agree() {
            return Err("stack columns differ in length".into());
        }
        for i in 0..f.len() {
            if f.function[i].0 as usize >= n_strings || f.file[i].0 as usize >= n_strings {
                return Err(format!("frame {i}: string ids"));
            }
        }
        for i in 0..n.len() {
            let parent_ok = n.parent[i] == NONE || (n.parent[i] as usize) < i;
            if !parent_ok || n.frame[i] as usize >= f.len() {
                return Err(format!("stack node {i}: parent or frame"));
            }
        }
        Ok(())
    }
}

/// One sample as a sampler or importer adds it.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct SampleRow {
    pub ts: i64,
    pub track: TrackId,
    pub stack: u32,
    pub period: i64,
    pub state: u32,
}

impl StackSamples {
    pub fn push(&mut self, row: SampleRow) {
        self.ts.push(row.ts);
        self.track.push(row.track.0);
        self.stack.push(row.stack);
        self.period.push(row.period.max(0));
        self.state.push(row.state);
    }

    /// Sorts by track, then time (stable: samples of one time keep their order).
    pub(crate) fn sort(&mut self) {
        let sorted = self
            .track
            .windows(2)
            .zip(self.ts.windows(2))
            .all(|(t, s)| (t[0], s[0]) <= (t[1], s[1]));
        if sorted {
            return;
        }
        let mut order: Vec<u32> = (0..self.len() as u32).collect();
        order.sort_by_key(|&i| (self.track[i as usize], self.ts[i as usize]));
        self.permute(&order);
    }

    /// The rows of `track`, once sorted.
    pub fn of_track(&self, track: TrackId) -> Range<usize> {
        let lo = self.track.partition_point(|&t| t < track.0);
        let hi = self.track.partition_point(|&t| t <= track.0);
        lo..hi
    }

    /// Whether the sample counts in a CPU-time view: active, or not known not to be.
    pub fn on_cpu(&self, i: usize) -> bool {
        let s = self.state[i];
        s & state::ACTIVE_KNOWN == 0 || s & state::ACTIVE != 0
    }

    pub(crate) fn check(&self, n_tracks: usize, n_nodes: usize) -> Result<(), String> {
        if !self.columns_agree() {
            return Err("sample columns differ in length".into());
        }
        for i in 0..self.len() {
            if self.track[i] as usize >= n_tracks {
                return Err(format!("sample {i}: track"));
            }
            if self.stack[i] != NONE && self.stack[i] as usize >= n_nodes {
                return Err(format!("sample {i}: stack"));
            }
            if i > 0 && (self.track[i - 1], self.ts[i - 1]) > (self.track[i], self.ts[i]) {
                return Err(format!("sample {i}: not sorted"));
            }
        }
        Ok(())
    }
}

impl crate::Trace {
    /// Whether sampled frame `f` is native code (C, C++): such frames have no line and
    /// a library (or nothing) in place of a source file; Python's have a line, or a
    /// `.py` file or a `<frozen …>`/`<string>` one.
    pub fn is_native_frame(&self, f: u32) -> bool {
        let frames = &self.stacks.frames;
        let f = f as usize;
        let file = self.str(frames.file[f]);
        frames.line[f] == 0 && !file.ends_with(".py") && !file.starts_with('<')
    }

    /// Whether sampled frame `f` is opscope's own: the Python bootstrap `opscope record`
    /// puts in the session (`.opscope/python/sitecustomize.py`), whose wrappers stand
    /// between the program's frames and are no code of the program.
    pub fn is_recorder_frame(&self, f: u32) -> bool {
        let file = self.str(self.stacks.frames.file[f as usize]);
        file.ends_with(".opscope/python/sitecustomize.py")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_share_their_outer_frames_and_walk_back_innermost_first() {
        let mut stacks = Stacks::default();
        let (main, f, g) = (StrId(1), StrId(2), StrId(3));
        let file = StrId(4);
        let m = stacks.frame(main, file, 10);
        let a = stacks.frame(f, file, 20);
        let b = stacks.frame(g, file, 30);
        let one = stacks.stack([m, a]);
        let two = stacks.stack([m, b]);
        let again = stacks.stack([m, a]);
        assert_eq!(one, again);
        assert_ne!(one, two);
        assert_eq!(stacks.nodes.len(), 3, "main shared by both");
        assert_eq!(stacks.frames_of(two).collect::<Vec<_>>(), vec![b, m]);
        assert_eq!(stacks.stack([]), NONE);
        assert_eq!(stacks.frame(f, file, 20), a, "frames are distinct");
        assert_eq!(
            stacks.frame(f, file, 21),
            3,
            "another line is another frame"
        );
        assert!(stacks.check(5).is_ok());
        assert!(stacks.check(4).is_err(), "file id 4 past the strings");
    }

    #[test]
    fn samples_sort_by_track_then_time_and_know_cpu_from_wall() {
        let mut samples = StackSamples::default();
        let row = |ts, track, state| SampleRow {
            ts,
            track: TrackId(track),
            stack: NONE,
            period: 10,
            state,
        };
        samples.push(row(30, 1, 0));
        samples.push(row(20, 0, state::ACTIVE_KNOWN));
        samples.push(row(10, 1, state::ACTIVE_KNOWN | state::ACTIVE));
        samples.sort();
        assert_eq!(samples.ts, vec![20, 10, 30]);
        assert_eq!(samples.of_track(TrackId(1)), 1..3);
        assert!(!samples.on_cpu(0), "known idle");
        assert!(samples.on_cpu(1), "known active");
        assert!(samples.on_cpu(2), "not known: counted");
        assert!(samples.check(2, 0).is_ok());
        assert!(samples.check(1, 0).is_err());
    }
}
