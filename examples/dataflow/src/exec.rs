//! Runs a graph for a number of steps on a pool of worker threads, and annotates the run
//! for tracers: an ITT task around every op on the worker that runs it, an NVTX range
//! around every step on the scheduling thread. Also keeps the program's own tally of both.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread;

use crate::graph::{Graph, Input};
use crate::ops::{Matrix, Op, KIND_NAMES};
use crate::report::{Execution, Report};

/// The ITT domain of the op tasks and the NVTX domain of the step ranges and the mark.
pub const DOMAIN: &str = "opscope.example";

struct Job {
    step: usize,
    node: usize,
    op: Op,
    inputs: Vec<Arc<Matrix>>,
}

enum Message {
    Done {
        exec: Execution,
        output: Matrix,
    },
    /// Sent by a worker's guard while it unwinds, so the scheduler does not wait forever.
    Died(usize),
}

struct DeathNotice {
    worker: usize,
    done: Sender<Message>,
}

impl Drop for DeathNotice {
    fn drop(&mut self) {
        if thread::panicking() {
            let _ = self.done.send(Message::Died(self.worker));
        }
    }
}

fn worker(
    index: usize,
    itt: &ittapi::Domain,
    clock: &AtomicU64,
    jobs: &Receiver<Job>,
    done: Sender<Message>,
) -> [u64; KIND_NAMES.len()] {
    // ittapi 0.5 has no safe wrapper for __itt_thread_set_name, so for ITT the name is
    // only the OS thread name the spawner set; NVTX is told it explicitly.
    nvtx::name_thread!("worker-{index}");
    let notice = DeathNotice {
        worker: index,
        done,
    };
    let mut counts = [0; KIND_NAMES.len()];
    while let Ok(job) = jobs.recv() {
        let inputs: Vec<&Matrix> = job.inputs.iter().map(AsRef::as_ref).collect();
        let task = ittapi::Task::begin(itt, job.op.name());
        counts[job.op.kind_index()] += 1;
        let start_seq = clock.fetch_add(1, Ordering::SeqCst);
        let output = job.op.apply(&inputs);
        let end_seq = clock.fetch_add(1, Ordering::SeqCst);
        task.end();
        let exec = Execution {
            step: job.step,
            node: job.node,
            worker: index,
            start_seq,
            end_seq,
        };
        if notice.done.send(Message::Done { exec, output }).is_err() {
            break;
        }
    }
    counts
}

/// The scheduler's side of the pool: one job channel per worker, so that an op is only
/// handed to a worker that is idle.
struct Pool {
    jobs: Vec<Sender<Job>>,
    done: Receiver<Message>,
    idle: VecDeque<usize>,
}

/// Runs one step: dispatches each node once all its inputs exist, until all have run.
fn run_step(
    graph: &Graph,
    dependents: &[Vec<usize>],
    sources: &[Arc<Matrix>],
    step: usize,
    pool: &mut Pool,
    executions: &mut Vec<Execution>,
) -> Result<Vec<Option<Arc<Matrix>>>, String> {
    let n = graph.nodes.len();
    let mut values: Vec<Option<Arc<Matrix>>> = vec![None; n];
    let mut waiting: Vec<usize> = graph
        .nodes
        .iter()
        .map(|node| {
            node.inputs
                .iter()
                .filter(|i| matches!(i, Input::Node(_)))
                .count()
        })
        .collect();
    let mut ready: VecDeque<usize> = (0..n).filter(|&i| waiting[i] == 0).collect();
    let mut remaining = n;
    while remaining > 0 {
        while let Some(&w) = pool.idle.front() {
            let Some(node) = ready.pop_front() else {
                break;
            };
            pool.idle.pop_front();
            let inputs = graph.nodes[node]
                .inputs
                .iter()
                .map(|input| match *input {
                    Input::Source(s) => Arc::clone(&sources[s]),
                    Input::Node(j) => Arc::clone(values[j].as_ref().expect("input has run")),
                })
                .collect();
            let job = Job {
                step,
                node,
                op: graph.nodes[node].op,
                inputs,
            };
            pool.jobs[w]
                .send(job)
                .map_err(|_| format!("worker-{w} has gone"))?;
        }
        match pool.done.recv() {
            Ok(Message::Done { exec, output }) => {
                values[exec.node] = Some(Arc::new(output));
                pool.idle.push_back(exec.worker);
                executions.push(exec);
                remaining -= 1;
                for &d in &dependents[exec.node] {
                    waiting[d] -= 1;
                    if waiting[d] == 0 {
                        ready.push_back(d);
                    }
                }
            }
            Ok(Message::Died(w)) => return Err(format!("worker-{w} panicked")),
            Err(_) => return Err("all workers have gone".to_owned()),
        }
    }
    Ok(values)
}

/// Runs `steps` training steps of `graph` from `sources` on `threads` worker threads.
pub fn run(
    graph: &Graph,
    sources: Vec<Matrix>,
    steps: usize,
    threads: usize,
) -> Result<Report, String> {
    if threads == 0 {
        return Err("at least one worker thread is needed".to_owned());
    }
    assert_eq!(sources.len(), graph.source_count, "wrong number of sources");
    let mut sources: Vec<Arc<Matrix>> = sources.into_iter().map(Arc::new).collect();
    let dependents = graph.dependents();

    // Created before the workers start, so that ittnotify loads its collector once, here.
    let itt = ittapi::Domain::new(DOMAIN);
    nvtx::mark!("graph built");
    let nvtx_marks = 1;

    let clock = AtomicU64::new(0);
    let mut report = Report {
        steps,
        threads,
        op_counts: [0; KIND_NAMES.len()],
        nvtx_ranges: 0,
        nvtx_marks,
        losses: Vec::with_capacity(steps),
        checksum: 0.0,
        executions: Vec::with_capacity(steps * graph.nodes.len()),
    };

    thread::scope(|scope| {
        let (done_tx, done_rx) = mpsc::channel();
        let mut job_txs = Vec::with_capacity(threads);
        let mut handles = Vec::with_capacity(threads);
        for k in 0..threads {
            let (job_tx, job_rx) = mpsc::channel();
            let done = done_tx.clone();
            let (itt, clock) = (&itt, &clock);
            let handle = thread::Builder::new()
                .name(format!("worker-{k}"))
                .spawn_scoped(scope, move || worker(k, itt, clock, &job_rx, done))
                .map_err(|e| format!("cannot start worker-{k}: {e}"))?;
            job_txs.push(job_tx);
            handles.push(handle);
        }
        // Only the workers may hold senders, so that recv() fails if they all exit.
        drop(done_tx);
        let mut pool = Pool {
            jobs: job_txs,
            done: done_rx,
            idle: (0..threads).collect(),
        };

        let mut result = Ok(());
        for step in 0..steps {
            // nvtxRangePushA in NVTX's default domain; popped when the step is done.
            nvtx::range_push!("step {step}");
            report.nvtx_ranges += 1;
            let values = match run_step(
                graph,
                &dependents,
                &sources,
                step,
                &mut pool,
                &mut report.executions,
            ) {
                Ok(values) => values,
                Err(e) => {
                    nvtx::range_pop!();
                    result = Err(e);
                    break;
                }
            };
            let loss = values[graph.loss].as_ref().expect("every node ran");
            report.losses.push(loss.data()[0]);
            report.checksum += f64::from(loss.data()[0]);
            for &(node, source) in &graph.updates {
                sources[source] = Arc::clone(values[node].as_ref().expect("every node ran"));
            }
            nvtx::range_pop!();
        }

        // Closing the job channels is what tells the workers to exit.
        drop(pool);
        for (k, handle) in handles.into_iter().enumerate() {
            match handle.join() {
                Ok(counts) => {
                    for (total, c) in report.op_counts.iter_mut().zip(counts) {
                        *total += c;
                    }
                }
                Err(_) => result = Err(format!("worker-{k} panicked")),
            }
        }
        result
    })?;

    for &(_, source) in &graph.updates {
        report.checksum += sources[source].sum();
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{build_mlp, initial_sources, Shape};

    const SMALL: Shape = Shape {
        batch: 16,
        dims: [24, 20, 12, 6],
    };

    fn run_small(steps: usize, threads: usize) -> (Graph, Report) {
        let graph = build_mlp(SMALL.batch);
        let report = run(&graph, initial_sources(SMALL), steps, threads).expect("run succeeds");
        (graph, report)
    }

    #[test]
    fn every_op_runs_once_per_step_after_its_inputs() {
        let steps = 4;
        let (graph, report) = run_small(steps, 3);
        assert_eq!(report.executions.len(), steps * graph.nodes.len());
        for step in 0..steps {
            let mut by_node: Vec<Option<Execution>> = vec![None; graph.nodes.len()];
            for e in report.executions.iter().filter(|e| e.step == step) {
                assert!(
                    by_node[e.node].is_none(),
                    "node {} ran twice in step {step}",
                    e.node
                );
                by_node[e.node] = Some(*e);
            }
            for (i, node) in graph.nodes.iter().enumerate() {
                let e = by_node[i].unwrap_or_else(|| panic!("node {i} did not run in step {step}"));
                assert!(e.start_seq < e.end_seq);
                for input in &node.inputs {
                    if let Input::Node(j) = *input {
                        let dep = by_node[j].expect("input ran");
                        assert!(
                            dep.end_seq < e.start_seq,
                            "step {step}: node {i} started before its input {j} finished"
                        );
                    }
                }
            }
        }
        // Steps do not overlap: the next step reads the weights the previous one wrote.
        for pair in report.executions.windows(2) {
            if pair[0].step != pair[1].step {
                let last = report.executions.iter().filter(|e| e.step == pair[0].step);
                let first = report.executions.iter().filter(|e| e.step == pair[1].step);
                let last_end = last.map(|e| e.end_seq).max().expect("nonempty");
                let first_start = first.map(|e| e.start_seq).min().expect("nonempty");
                assert!(last_end < first_start);
            }
        }
        assert!(report.executions.iter().all(|e| e.worker < 3));
    }

    #[test]
    fn counts_in_json_are_ops_per_step_times_steps() {
        let steps = 5;
        let (graph, report) = run_small(steps, 2);
        let per_step = graph.kind_counts();
        for (i, name) in KIND_NAMES.iter().enumerate() {
            assert_eq!(report.op_counts[i], per_step[i] * steps as u64, "{name}");
        }
        assert_eq!(report.nvtx_ranges, steps as u64);
        assert_eq!(report.nvtx_marks, 1);
        let json = report.to_json();
        let expected_prefix = concat!(
            r#"{"steps":5,"threads":2,"ops":{"MatMul":40,"Relu":10,"ReluGrad":10,"#,
            r#""Softmax":5,"Sub":5,"Reduce":5,"Transpose":25,"Sgd":15},"#,
            r#""nvtx_ranges":5,"nvtx_marks":1,"checksum":"#
        );
        assert!(json.starts_with(expected_prefix), "{json}");
        let checksum: f64 = json[expected_prefix.len()..json.len() - 1]
            .parse()
            .expect("checksum is a plain number");
        assert_eq!(checksum, report.checksum);
        assert!(!json.contains('\n'));
    }

    #[test]
    fn results_do_not_depend_on_thread_count() {
        let (_, one) = run_small(6, 1);
        let (_, three) = run_small(6, 3);
        assert_eq!(one.losses, three.losses);
        assert_eq!(one.checksum.to_bits(), three.checksum.to_bits());
        assert!(one.checksum.is_finite());
    }

    #[test]
    fn training_reduces_the_loss() {
        let (_, report) = run_small(30, 2);
        let first = report.losses[0];
        let last = *report.losses.last().expect("30 steps");
        assert!(last < 0.8 * first, "loss went from {first} to {last}");
    }

    #[test]
    fn zero_steps_and_zero_threads() {
        let (_, report) = run_small(0, 2);
        assert_eq!(report.op_counts, [0; KIND_NAMES.len()]);
        assert_eq!(report.nvtx_ranges, 0);
        assert!(report.to_json().contains(r#""ops":{"MatMul":0,"#));
        let graph = build_mlp(SMALL.batch);
        assert!(run(&graph, initial_sources(SMALL), 1, 0).is_err());
    }
}
