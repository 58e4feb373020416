//! Kernel sequences worth a CUDA graph or a fused kernel: HTA's frequent CUDA kernel
//! patterns (`get_frequent_cuda_kernel_sequences`, `min_pattern_len=3`): a top-level
//! op with its kernels in launch order is a pattern; a pattern that repeats launches
//! the same kernels again and again, each launch costing host time. Here every
//! top-level op that launched at least 3 kernels is a candidate (HTA asks for an
//! operator name); reported when the most frequent pattern repeats at least 10 times and
//! the launches of all repeating patterns take 3 % of the time looked at or more. The
//! saving is those launches' time (one graph launch replays a pattern).

use hashbrown::HashMap;
use opscope_model::{SliceKind, StrId, NONE};

use super::{time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "kernel_sequences",
    anchor: "HTA frequent CUDA kernel sequences (min_pattern_len 3)",
    about: "the same op launching the same kernels again and again",
    needs_device: true,
    check,
};

/// A pattern: the op's name and its kernels' names in launch order.
type Pattern = (StrId, Vec<StrId>);
/// A pattern's repeats, its launches' time and its ops' time.
type Seen = (usize, i64, i64);

const MIN_PATTERN_LEN: usize = 3;
const MIN_REPEATS: usize = 10;

fn check(facts: &Facts, out: &mut Out) {
    let trace = facts.trace();
    let s = &trace.slices;
    for work in facts.device_work() {
        // Per top-level op: its kernels' names in start order and their launches'
        // time. Launches under one parent share its root, so each parent's root is
        // looked up once (a launch's ancestors run deep on traces with stacks).
        let mut root_of_parent: HashMap<u32, u32> = HashMap::new();
        let mut launches: Vec<(u32, StrId, i64)> = Vec::new();
        for (i, call) in super::launched_kernels(facts, work) {
            let parent = s.parent[call];
            if parent == NONE {
                continue;
            }
            let root = *root_of_parent.entry(parent).or_insert_with(|| {
                let (mut root, mut at) = (NONE, parent);
                while at != NONE {
                    if s.kind(at as usize) == SliceKind::Op {
                        root = at;
                    }
                    at = s.parent[at as usize];
                }
                root
            });
            if root != NONE {
                launches.push((root, s.name[i], s.dur[call]));
            }
        }
        // Stable: each root's kernels stay in start order.
        launches.sort_by_key(|l| l.0);
        let mut patterns: HashMap<Pattern, Seen> = HashMap::new();
        for group in launches.chunk_by(|a, b| a.0 == b.0) {
            if group.len() < MIN_PATTERN_LEN {
                continue;
            }
            let root = group[0].0 as usize;
            let kernels: Vec<StrId> = group.iter().map(|l| l.1).collect();
            let launch_ns: i64 = group.iter().map(|l| l.2).sum();
            let p = patterns.entry((s.name[root], kernels)).or_default();
            p.0 += 1;
            p.1 += launch_ns;
            p.2 += s.dur[root];
        }
        let repeating: Vec<(&Pattern, &Seen)> = patterns
            .iter()
            .filter(|(_, p)| p.0 >= MIN_REPEATS)
            .collect();
        let Some(top) = repeating
            .iter()
            .max_by_key(|(k, p)| (p.0, p.1, std::cmp::Reverse(trace.str(k.0))))
        else {
            continue;
        };
        let launch_ns: i64 = repeating.iter().map(|(_, p)| p.1).sum();
        if facts.share(work.source, launch_ns) < 3.0 {
            continue;
        }
        let ((op, kernels), (count, _, _)) = (top.0, top.1);
        let mut f = Finding::of(
            &RULE,
            &work.label,
            format!(
                "{} launches the same {} kernels {count} times",
                trace.str(*op),
                kernels.len()
            ),
        )
        .saving(facts, work.source, launch_ns);
        f.severity = Severity::of_share(f.saving_pct, 3.0, 15.0);
        f.evidence.push(format!(
            "{} patterns of at least {MIN_PATTERN_LEN} kernels repeat {MIN_REPEATS} times or \
             more; their launches take {}",
            repeating.len(),
            time(launch_ns)
        ));
        let names: Vec<&str> = kernels.iter().take(4).map(|k| trace.str(*k)).collect();
        f.evidence.push(format!(
            "the most frequent: {} → {}{}",
            trace.str(*op),
            names
                .iter()
                .map(|n| n.chars().take(40).collect::<String>())
                .collect::<Vec<_>>()
                .join(", "),
            if kernels.len() > 4 { ", …" } else { "" }
        ));
        f.fix = "capture the repeating work as a CUDA graph (torch.cuda.graphs, \
                 torch.compile(mode=\"reduce-overhead\")) or fuse its kernels \
                 (torch.compile, a fused implementation of the op)"
            .to_string();
        f.more = format!("opscope stats kernel {}", facts.files());
        f.figures.insert("repeats", *count as f64);
        f.figures.insert("kernels", kernels.len() as f64);
        f.figures.insert("patterns", repeating.len() as f64);
        out.finding(f);
    }
}
