//! Kinds that follow from what a slice is called, whatever its format said: set by
//! [`crate::Trace::finish`] once the slices nest, so that every importer's slices get
//! them alike (communication on CPUs, compilation).

use crate::dims::TrackKind;
use crate::kind::SliceKind;
use crate::trace::Trace;
use crate::NONE;

/// Kinds that follow from a slice's name or its thread's, whatever format it came in:
/// an op or range that is communication becomes a collective (gloo's, MPI's, oneCCL's
/// and TensorFlow's on CPUs, as NCCL's), and one that is compilation (by its name, by
/// the slice it runs in, by a thread that only compiles) becomes compilation. Slices
/// are in track and time order, each after the slice it runs in.
pub(crate) fn refine_kinds(trace: &mut Trace) {
    use crate::kind::is_compile_thread;
    const UNSEEN: u8 = 0;
    const COMMUNICATION: u8 = 1;
    const COMPILE: u8 = 2;
    const NEITHER: u8 = 3;
    let compile_tracks: Vec<bool> = trace
        .tracks
        .iter()
        .map(|t| {
            t.kind == TrackKind::Thread
                && t.thread
                    .and_then(|th| trace.threads.get(th.index()))
                    .and_then(|th| th.name)
                    .is_some_and(|n| is_compile_thread(trace.strings.get(n)))
        })
        .collect();
    let mut by_name = vec![UNSEEN; trace.strings.len()];
    let s = &mut trace.slices;
    for i in 0..s.len() {
        let kind = s.kind(i);
        if !matches!(
            kind,
            SliceKind::Op | SliceKind::Annotation | SliceKind::Other
        ) {
            continue;
        }
        let name = s.name[i].0 as usize;
        if by_name.get(name) == Some(&UNSEEN) {
            // By an op's name alone (an Op refines as a range does, save Other).
            by_name[name] = match SliceKind::Op.refined_by_name(trace.strings.get(s.name[i])) {
                SliceKind::Compile => COMPILE,
                SliceKind::Collective => COMMUNICATION,
                _ => NEITHER,
            };
        }
        let class = by_name.get(name).copied().unwrap_or(NEITHER);
        let parent = s.parent[i];
        let in_compile = parent != NONE && s.kind(parent as usize) == SliceKind::Compile;
        if class == COMPILE || in_compile || compile_tracks[s.track[i] as usize] {
            s.set_kind(i, SliceKind::Compile);
        } else if class == COMMUNICATION && kind != SliceKind::Other {
            s.set_kind(i, SliceKind::Collective);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::*;

    /// gloo's collective on a CPU thread is communication; an XLA compile and what
    /// runs in it, and whatever a compiler thread runs, is compilation; the program's
    /// ops and runtime calls stay what they were.
    #[test]
    fn names_and_threads_give_kinds() {
        let (mut trace, main) = crate::testing::one_thread();
        let process = trace.threads[0].process;
        let pool = trace.thread(process, 2);
        trace.threads[pool.index()].name = Some(trace.intern("tf_PjRtCompilerThreadPool/7"));
        let pool = trace.thread_track(pool, TrackKind::Thread);
        let add = |trace: &mut Trace, track, ts, dur, name: &str, kind| {
            let name = trace.intern(name);
            let category = trace.intern("c");
            trace.slices.push(events::SliceRow {
                track,
                ts,
                dur,
                name,
                category,
                kind,
                args: ArgsId::NONE,
            });
        };
        add(&mut trace, main, 0, 100, "gloo:all_reduce", SliceKind::Op);
        add(
            &mut trace,
            main,
            200,
            100,
            "PjRtCpuClient::Compile",
            SliceKind::Op,
        );
        add(
            &mut trace,
            main,
            210,
            10,
            "CanonicalizerPass",
            SliceKind::Annotation,
        );
        add(&mut trace, main, 400, 10, "dot", SliceKind::Op);
        add(
            &mut trace,
            main,
            500,
            10,
            "MPI_Allreduce",
            SliceKind::Annotation,
        );
        add(
            &mut trace,
            main,
            600,
            10,
            "cudaLaunchKernel",
            SliceKind::Runtime,
        );
        add(
            &mut trace,
            main,
            700,
            10,
            "w/CollectiveReduceV2:CollectiveReduceV2",
            SliceKind::Op,
        );
        add(&mut trace, pool, 0, 50, "dce", SliceKind::Op);
        trace.finish();
        let kinds: Vec<(&str, SliceKind)> = (0..trace.slices.len())
            .map(|i| (trace.str(trace.slices.name[i]), trace.slices.kind(i)))
            .collect();
        for (name, kind) in [
            ("gloo:all_reduce", SliceKind::Collective),
            ("PjRtCpuClient::Compile", SliceKind::Compile),
            ("CanonicalizerPass", SliceKind::Compile),
            ("dot", SliceKind::Op),
            ("MPI_Allreduce", SliceKind::Collective),
            ("cudaLaunchKernel", SliceKind::Runtime),
            (
                "w/CollectiveReduceV2:CollectiveReduceV2",
                SliceKind::Collective,
            ),
            ("dce", SliceKind::Compile),
        ] {
            assert!(kinds.contains(&(name, kind)), "{name}: {kinds:?}");
        }
    }
}
