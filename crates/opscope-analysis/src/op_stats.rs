//! Per op type (tfprof's op view, torch's `key_averages`): how often it ran, its CPU
//! time with and without the ops it called, and the accelerator time of the device work
//! it launched. Ops are host slices of kind `Op`, `Collective`, `Annotation`, `Step`,
//! `Runtime`, `Driver` and `Sync`, grouped by name. An op whose only op child has the
//! same name is one call, as torch counts it.

use hashbrown::HashMap;
use opscope_model::args::ArgValue;
use opscope_model::{StrId, Trace, NONE};
use serde::Serialize;

use crate::attribution::is_op_slice;
use crate::context::Context;
use crate::correlate;
use crate::window::Window;

#[derive(Clone, Debug, Default)]
pub struct OpStatsOptions {
    pub window: Window,
    pub timing: Timing,
}

/// How a slice's time is counted.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Timing {
    /// To the nanosecond.
    #[default]
    Exact,
    /// In whole microseconds of the clock, at least one per run, as tfprof counts
    /// (TensorFlow's µs fields truncate each end; tfprof rounds a 0 µs run up to 1).
    WholeMicros,
}

/// The time charged for slice `i`.
pub fn charged_ns(trace: &Trace, i: usize, timing: Timing) -> i64 {
    let s = &trace.slices;
    match timing {
        Timing::Exact => s.dur[i],
        Timing::WholeMicros => {
            let micros = (s.ts[i] + s.dur[i]).div_euclid(1000) - s.ts[i].div_euclid(1000);
            micros.max(1) * 1000
        }
    }
}

/// The memory an op reported for itself (TensorFlow RunMetadata: the arg keys of
/// `opscope_formats::run_metadata::memory_keys`), instead of allocation events.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReportedMemory {
    pub requested: i64,
    pub peak: i64,
    pub residual: i64,
    pub output: i64,
}

impl std::ops::AddAssign for ReportedMemory {
    fn add_assign(&mut self, o: ReportedMemory) {
        self.requested += o.requested;
        self.peak += o.peak;
        self.residual += o.residual;
        self.output += o.output;
    }
}

/// The arg keys of [`ReportedMemory`], looked up once.
pub struct MemoryKeys([Option<StrId>; 4]);

impl MemoryKeys {
    pub fn new(trace: &Trace) -> MemoryKeys {
        let k = |name: &str| trace.strings.find(name);
        MemoryKeys([
            k("requested_bytes"),
            k("peak_bytes"),
            k("residual_bytes"),
            k("output_bytes"),
        ])
    }

    /// Slice `i`'s reported memory, if it has any.
    pub fn of(&self, trace: &Trace, i: usize) -> Option<ReportedMemory> {
        if self.0.iter().all(Option::is_none) {
            return None;
        }
        let args = trace.slices.args[i];
        let get = |k: Option<StrId>| {
            k.and_then(|k| trace.args.find(args, k))
                .and_then(ArgValue::as_i64)
        };
        let values = self.0.map(get);
        values.iter().any(Option::is_some).then(|| ReportedMemory {
            requested: values[0].unwrap_or(0),
            peak: values[1].unwrap_or(0),
            residual: values[2].unwrap_or(0),
            output: values[3].unwrap_or(0),
        })
    }
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct OpRow {
    pub name: String,
    /// Calls.
    pub occurrence: u64,
    /// CPU time from start to end of each call, summed (torch's "CPU total").
    pub cpu_ns: i64,
    /// CPU time not spent in the ops it called (torch's "Self CPU").
    pub self_cpu_ns: i64,
    /// Time of the kernels, copies and sets the op launched itself (not those of the
    /// ops it called).
    pub accelerator_ns: i64,
    /// Bytes the op allocated itself (PyTorch `[memory]` events; tfprof's requested
    /// bytes, from TensorFlow's per-node memory stats).
    pub bytes: i64,
    /// Of those, bytes still allocated when the call ended.
    pub residual_bytes: i64,
    /// The most bytes a call held at once of what it allocated, summed over calls.
    pub peak_bytes: i64,
    /// Bytes of the tensors the op output (TensorFlow's per-node stats).
    pub output_bytes: i64,
    /// Floating-point operations (Kineto's `flops`, recorded with `with_flops=True`).
    pub float_ops: i64,
    /// Devices its device work ran on (`gpu 0`).
    pub devices: Vec<String>,
    /// Distinct input shapes (Kineto's `Input Dims`, recorded with `record_shapes=True`)
    /// and how many calls had each, most frequent first.
    pub input_shapes: Vec<(String, u64)>,
}

impl OpRow {
    /// tfprof's `micros`: CPU and accelerator time.
    pub fn total_ns(&self) -> i64 {
        self.cpu_ns + self.accelerator_ns
    }
}

/// Rows in no particular order.
pub fn op_stats(cx: &Context, options: &OpStatsOptions) -> Vec<OpRow> {
    let trace = cx.trace();
    let correlation = cx.correlation();
    let s = &trace.slices;
    let selected = cx.selected(options.window);
    let is_op = |i: usize| is_op_slice(trace, i);
    let memory_keys = MemoryKeys::new(trace);
    let mut rows: HashMap<StrId, OpRow> = HashMap::new();
    fn row<'r>(rows: &'r mut HashMap<StrId, OpRow>, trace: &Trace, name: StrId) -> &'r mut OpRow {
        rows.entry(name).or_insert_with(|| OpRow {
            name: trace.str(name).to_string(),
            ..OpRow::default()
        })
    }
    // An op whose only op child has its own name (an overload calling another, as
    // `aten::div` does) counts as one call, as in torch's `key_averages`.
    let mut op_children = vec![0u32; s.len()];
    for i in 0..s.len() {
        let parent = s.parent[i];
        if is_op(i) && parent != NONE {
            op_children[parent as usize] += 1;
        }
    }
    let merged = |i: usize| {
        let parent = s.parent[i];
        parent != NONE
            && is_op(parent as usize)
            && op_children[parent as usize] == 1
            && s.name[parent as usize] == s.name[i]
    };
    for i in 0..s.len() {
        if is_op(i) {
            if merged(i) {
                continue;
            }
            let dur = charged_ns(trace, i, options.timing);
            if selected[i] {
                let r = row(&mut rows, trace, s.name[i]);
                r.occurrence += 1;
                r.cpu_ns += dur;
                r.self_cpu_ns += dur;
                if let Some(m) = memory_keys.of(trace, i) {
                    r.bytes += m.requested;
                    r.peak_bytes += m.peak;
                    r.residual_bytes += m.residual;
                    r.output_bytes += m.output;
                }
            }
            // A selected op's self time leaves out all its children, selected or not.
            let parent = s.parent[i];
            if parent != NONE && is_op(parent as usize) && selected[parent as usize] {
                row(&mut rows, trace, s.name[parent as usize]).self_cpu_ns -= dur;
            }
        } else if selected[i] && correlate::is_device_work(trace, i) {
            if let Some(op) = correlation.op_of(trace, i) {
                row(&mut rows, trace, s.name[op]).accelerator_ns +=
                    charged_ns(trace, i, options.timing);
            }
        }
    }
    // Shapes, flops and devices.
    let flops_key = trace.strings.find("flops");
    let dims_key = trace.strings.find("Input Dims");
    let mut shapes: HashMap<StrId, HashMap<String, u64>> = HashMap::new();
    for (i, _) in selected.iter().enumerate().filter(|(_, keep)| **keep) {
        if is_op(i) && !merged(i) {
            if let Some(ArgValue::Int(f)) = flops_key.and_then(|k| trace.args.find(s.args[i], k)) {
                row(&mut rows, trace, s.name[i]).float_ops += f;
            }
            if let Some(ArgValue::Json(d) | ArgValue::Str(d)) =
                dims_key.and_then(|k| trace.args.find(s.args[i], k))
            {
                *shapes
                    .entry(s.name[i])
                    .or_default()
                    .entry(trace.str(d).to_string())
                    .or_default() += 1;
            }
        } else if correlate::is_device_work(trace, i) {
            if let Some(op) = correlation.op_of(trace, i) {
                let device = trace.tracks[s.track[i] as usize]
                    .device
                    .map(|d| &trace.devices[d.index()])
                    .map(|d| format!("{} {}", d.kind.name(), d.index));
                if let Some(device) = device {
                    let r = row(&mut rows, trace, s.name[op]);
                    if !r.devices.contains(&device) {
                        r.devices.push(device);
                        r.devices.sort();
                    }
                }
            }
        }
    }
    for (name, counts) in shapes {
        let mut list: Vec<(String, u64)> = counts.into_iter().collect();
        list.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        row(&mut rows, trace, name).input_shapes = list;
    }
    // Ops that report their own memory are charged that, not the events inside them.
    let allocs: Vec<Allocation> = allocations(trace)
        .into_iter()
        .filter(|a| memory_keys.of(trace, a.op).is_none())
        .collect();
    for alloc in &allocs {
        if !selected[alloc.op] {
            continue;
        }
        let r = row(&mut rows, trace, s.name[alloc.op]);
        r.bytes += alloc.bytes;
        if alloc.freed_at.is_none_or(|t| t > s.end(alloc.op)) {
            r.residual_bytes += alloc.bytes;
        }
    }
    for (op, peak) in peaks_per_call(trace, &allocs) {
        if selected[op] {
            row(&mut rows, trace, s.name[op]).peak_bytes += peak;
        }
    }
    // torch's `key_averages` counts every `ProfilerStep#…` as one `ProfilerStep*`: a
    // row per step would fill the top of the table with the steps.
    let (steps, mut rows): (Vec<OpRow>, Vec<OpRow>) = rows
        .into_values()
        .partition(|r| r.name.starts_with("ProfilerStep#"));
    if let Some(all) = steps.into_iter().reduce(OpRow::with) {
        rows.push(OpRow {
            name: "ProfilerStep*".to_string(),
            ..all
        });
    }
    rows
}

impl OpRow {
    /// This row and `other` counted as one.
    fn with(mut self, other: OpRow) -> OpRow {
        self.occurrence += other.occurrence;
        self.cpu_ns += other.cpu_ns;
        self.self_cpu_ns += other.self_cpu_ns;
        self.accelerator_ns += other.accelerator_ns;
        self.bytes += other.bytes;
        self.residual_bytes += other.residual_bytes;
        self.peak_bytes += other.peak_bytes;
        self.output_bytes += other.output_bytes;
        self.float_ops += other.float_ops;
        for device in other.devices {
            if !self.devices.contains(&device) {
                self.devices.push(device);
            }
        }
        self.devices.sort();
        for (shape, n) in other.input_shapes {
            match self.input_shapes.iter_mut().find(|s| s.0 == shape) {
                Some(s) => s.1 += n,
                None => self.input_shapes.push((shape, n)),
            }
        }
        self.input_shapes
            .sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        self
    }
}

/// One allocation made inside an op.
struct Allocation {
    op: usize,
    bytes: i64,
    ts: i64,
    freed_at: Option<i64>,
}

/// The allocations of PyTorch `[memory]` events made inside an op, each with that op
/// and, when its block is freed later in the trace, when.
fn allocations(trace: &Trace) -> Vec<Allocation> {
    let mut result: Vec<Allocation> = Vec::new();
    // Each allocator's blocks by address. Ranks reuse addresses, so blocks never meet
    // across allocators.
    for (_, events) in crate::attribution::allocation_events(trace) {
        let mut live: HashMap<i64, usize> = HashMap::new();
        for e in events {
            if e.bytes > 0 {
                let Some(op) = e.op else { continue };
                result.push(Allocation {
                    op,
                    bytes: e.bytes,
                    ts: e.ts,
                    freed_at: None,
                });
                if let Some(addr) = e.addr {
                    live.insert(addr, result.len() - 1);
                }
            } else if let Some(k) = e.addr.and_then(|a| live.remove(&a)) {
                result[k].freed_at = Some(e.ts);
            }
        }
    }
    result
}

/// Per op call, the most bytes it held at once of what it allocated itself.
fn peaks_per_call(trace: &Trace, allocs: &[Allocation]) -> HashMap<usize, i64> {
    let mut changes: HashMap<usize, Vec<(i64, i64)>> = HashMap::new();
    for a in allocs {
        let calls = changes.entry(a.op).or_default();
        calls.push((a.ts, a.bytes));
        if let Some(t) = a.freed_at.filter(|&t| t <= trace.slices.end(a.op)) {
            calls.push((t, -a.bytes));
        }
    }
    changes
        .into_iter()
        .map(|(op, mut c)| {
            // Frees before allocations at one instant.
            c.sort_by_key(|&(t, b)| (t, b));
            let (mut held, mut peak) = (0i64, 0i64);
            for (_, b) in c {
                held += b;
                peak = peak.max(held);
            }
            (op, peak)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory, flops, shapes and devices per op on a small trace worked out by hand.
    #[test]
    fn memory_and_shape_columns() {
        // aten::mm (0..100) allocates 100 B at 10 (its output, never freed) and 50 B at
        // 20, freed at 30, then 70 B at 40, freed at 150 (after it ended). Peak held at
        // once: 100 + 50 = 150, then 100 + 70 = 170. Residual: 100 + 70.
        let json = r#"[
            {"ph":"M","name":"process_labels","pid":0,"args":{"labels":"GPU 0"}},
            {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":0,"dur":100,
             "args":{"flops":1000,"Input Dims":[[2,3],[3,4]]}},
            {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":50,"dur":5,"args":{"correlation":1}},
            {"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":60,"dur":5,"args":{"correlation":1}},
            {"ph":"i","s":"t","name":"[memory]","pid":1,"tid":1,"ts":10,"args":{"Device Type":1,"Device Id":0,"Addr":1,"Bytes":100}},
            {"ph":"i","s":"t","name":"[memory]","pid":1,"tid":1,"ts":20,"args":{"Device Type":1,"Device Id":0,"Addr":2,"Bytes":50}},
            {"ph":"i","s":"t","name":"[memory]","pid":1,"tid":1,"ts":30,"args":{"Device Type":1,"Device Id":0,"Addr":2,"Bytes":-50}},
            {"ph":"i","s":"t","name":"[memory]","pid":1,"tid":1,"ts":40,"args":{"Device Type":1,"Device Id":0,"Addr":3,"Bytes":70}},
            {"ph":"i","s":"t","name":"[memory]","pid":1,"tid":1,"ts":150,"args":{"Device Type":1,"Device Id":0,"Addr":3,"Bytes":-70}},
            {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":200,"dur":10,
             "args":{"flops":500,"Input Dims":[[2,3],[3,4]]}}
        ]"#;
        let mut trace = Trace::new();
        opscope_formats::chrome::import(json.as_bytes(), "t.json", &mut trace).unwrap();
        let rows = op_stats(
            &crate::context::Context::new(&trace),
            &OpStatsOptions::default(),
        );
        let mm = rows.iter().find(|r| r.name == "aten::mm").unwrap();
        assert_eq!(mm.occurrence, 2);
        assert_eq!(
            (mm.bytes, mm.residual_bytes, mm.peak_bytes),
            (220, 170, 170)
        );
        assert_eq!(mm.float_ops, 1500);
        assert_eq!(mm.devices, ["gpu 0"]);
        assert_eq!(mm.input_shapes.len(), 1);
        assert_eq!(mm.input_shapes[0].1, 2);
        assert_eq!(mm.accelerator_ns, 5_000);
    }

    /// Two ranks reuse one address: a free in one never frees the other's block.
    #[test]
    fn blocks_of_different_ranks_are_apart() {
        let rank = |op: &str, events: &str| {
            format!(
                r#"[{{"ph":"X","cat":"cpu_op","name":"{op}","pid":1,"tid":1,"ts":0,"dur":30}},{events}]"#
            )
        };
        let a = rank(
            "a",
            r#"{"ph":"i","s":"t","name":"[memory]","pid":1,"tid":1,"ts":10,"args":{"Addr":1,"Bytes":100}}"#,
        );
        let b = rank(
            "b",
            r#"{"ph":"i","s":"t","name":"[memory]","pid":1,"tid":1,"ts":5,"args":{"Addr":1,"Bytes":50}},
               {"ph":"i","s":"t","name":"[memory]","pid":1,"tid":1,"ts":15,"args":{"Addr":1,"Bytes":-50}}"#,
        );
        let mut trace = Trace::new();
        opscope_formats::chrome::import(a.as_bytes(), "rank0.json", &mut trace).unwrap();
        opscope_formats::chrome::import(b.as_bytes(), "rank1.json", &mut trace).unwrap();
        let rows = op_stats(
            &crate::context::Context::new(&trace),
            &OpStatsOptions::default(),
        );
        let row = |n: &str| rows.iter().find(|r| r.name == n).unwrap();
        assert_eq!((row("a").bytes, row("a").residual_bytes), (100, 100));
        assert_eq!((row("b").bytes, row("b").residual_bytes), (50, 0));
    }

    /// With one step selected, the range around the steps (outside the window) gets no
    /// row, and the ops in the step keep their whole self time.
    #[test]
    fn a_selected_step_leaves_enclosing_ranges_alone() {
        let json = r#"[
            {"ph":"X","cat":"user_annotation","name":"epoch","pid":1,"tid":1,"ts":0,"dur":100},
            {"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":0,"dur":40},
            {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":5,"dur":10},
            {"ph":"X","cat":"user_annotation","name":"ProfilerStep#2","pid":1,"tid":1,"ts":50,"dur":40},
            {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":55,"dur":20},
            {"ph":"X","cat":"cpu_op","name":"aten::empty","pid":1,"tid":1,"ts":60,"dur":5}
        ]"#;
        let mut trace = Trace::new();
        opscope_formats::chrome::import(json.as_bytes(), "t.json", &mut trace).unwrap();
        let options = OpStatsOptions {
            window: Window::Step(2),
            ..OpStatsOptions::default()
        };
        let rows = op_stats(&crate::context::Context::new(&trace), &options);
        assert!(
            rows.iter().all(|r| r.self_cpu_ns >= 0 && r.occurrence > 0),
            "{rows:?}"
        );
        assert!(rows.iter().all(|r| r.name != "epoch"));
        let mm = rows.iter().find(|r| r.name == "aten::mm").unwrap();
        assert_eq!(
            (mm.occurrence, mm.cpu_ns, mm.self_cpu_ns),
            (1, 20_000, 15_000)
        );
    }
}
