//! The dataflow graph: one training step of a 3-layer MLP (forward, loss, backward and
//! SGD update) as a DAG of ops, plus the deterministic inputs and initial weights it
//! starts from.

use crate::ops::{Matrix, Op};

/// Where an op reads one input from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// An external tensor of the step (data, labels or a weight).
    Source(usize),
    /// The output of another node in the same step.
    Node(usize),
}

#[derive(Clone, Debug)]
pub struct Node {
    pub op: Op,
    pub inputs: Vec<Input>,
}

/// A DAG whose nodes only read sources or earlier nodes, so it cannot have cycles.
#[derive(Clone, Debug)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub source_count: usize,
    /// After each step, the output of node `.0` replaces source `.1` (the SGD updates).
    pub updates: Vec<(usize, usize)>,
    /// The node whose 1×1 output is the step's loss.
    pub loss: usize,
}

impl Graph {
    /// For each node, the nodes that read it (once per reading input).
    pub fn dependents(&self) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new(); self.nodes.len()];
        for (i, node) in self.nodes.iter().enumerate() {
            for input in &node.inputs {
                if let Input::Node(j) = *input {
                    out[j].push(i);
                }
            }
        }
        out
    }

    #[cfg(test)]
    /// How many nodes of each kind (indexed like `KIND_NAMES`) one step runs.
    pub fn kind_counts(&self) -> [u64; crate::ops::KIND_NAMES.len()] {
        let mut counts = [0; crate::ops::KIND_NAMES.len()];
        for node in &self.nodes {
            counts[node.op.kind_index()] += 1;
        }
        counts
    }
}

/// Layer sizes of the MLP: `batch` samples of `dims[0]` features, `dims[3]` classes.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub batch: usize,
    pub dims: [usize; 4],
}

impl Shape {
    /// Sized so that 20 steps take about a second on two cores in release mode.
    pub const DEFAULT: Shape = Shape {
        batch: 768,
        dims: [64, 512, 512, 64],
    };
}

const X: usize = 0;
const Y: usize = 1;
const W1: usize = 2;
const W2: usize = 3;
const W3: usize = 4;
const SOURCES: usize = 5;

struct Builder {
    nodes: Vec<Node>,
}

impl Builder {
    fn add(&mut self, op: Op, inputs: &[Input]) -> Input {
        for input in inputs {
            if let Input::Node(j) = *input {
                assert!(j < self.nodes.len(), "node inputs must already exist");
            }
        }
        self.nodes.push(Node {
            op,
            inputs: inputs.to_vec(),
        });
        Input::Node(self.nodes.len() - 1)
    }
}

fn node_index(input: Input) -> usize {
    match input {
        Input::Node(i) => i,
        Input::Source(_) => unreachable!("builder outputs are always nodes"),
    }
}

/// One SGD step of a softmax classifier `softmax(relu(relu(X·W1)·W2)·W3)`, 23 ops.
pub fn build_mlp(batch: usize) -> Graph {
    use Input::Source;
    use Op::{MatMul, Reduce, Relu, ReluGrad, Softmax, Sub, Transpose};
    #[allow(clippy::cast_precision_loss)]
    let sgd = Op::Sgd {
        // The output gradient is summed over the batch, so the rate is per sample.
        lr: 0.5 / batch.max(1) as f32,
    };
    let mut g = Builder { nodes: Vec::new() };

    let h1 = g.add(MatMul, &[Source(X), Source(W1)]);
    let a1 = g.add(Relu, &[h1]);
    let h2 = g.add(MatMul, &[a1, Source(W2)]);
    let a2 = g.add(Relu, &[h2]);
    let logits = g.add(MatMul, &[a2, Source(W3)]);
    let probs = g.add(Softmax, &[logits]);
    // d(cross-entropy)/d(logits) for softmax outputs is simply p - y.
    let d3 = g.add(Sub, &[probs, Source(Y)]);
    let loss = g.add(Reduce, &[d3]);

    let a2t = g.add(Transpose, &[a2]);
    let gw3 = g.add(MatMul, &[a2t, d3]);
    let w3t = g.add(Transpose, &[Source(W3)]);
    let da2 = g.add(MatMul, &[d3, w3t]);
    let d2 = g.add(ReluGrad, &[da2, h2]);
    let a1t = g.add(Transpose, &[a1]);
    let gw2 = g.add(MatMul, &[a1t, d2]);
    let w2t = g.add(Transpose, &[Source(W2)]);
    let da1 = g.add(MatMul, &[d2, w2t]);
    let d1 = g.add(ReluGrad, &[da1, h1]);
    let xt = g.add(Transpose, &[Source(X)]);
    let gw1 = g.add(MatMul, &[xt, d1]);

    let new_w1 = g.add(sgd, &[Source(W1), gw1]);
    let new_w2 = g.add(sgd, &[Source(W2), gw2]);
    let new_w3 = g.add(sgd, &[Source(W3), gw3]);

    Graph {
        nodes: g.nodes,
        source_count: SOURCES,
        updates: vec![
            (node_index(new_w1), W1),
            (node_index(new_w2), W2),
            (node_index(new_w3), W3),
        ],
        loss: node_index(loss),
    }
}

/// A small fixed-seed generator (xorshift64*): the run must be reproducible, and std
/// has no seedable RNG.
struct Rng(u64);

impl Rng {
    /// Uniform in [-1, 1).
    fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
        #[allow(clippy::cast_precision_loss)]
        let unit = bits as f32 / (1u64 << 24) as f32;
        unit * 2.0 - 1.0
    }

    fn matrix(&mut self, rows: usize, cols: usize, scale: f32) -> Matrix {
        let data = (0..rows * cols).map(|_| self.next_f32() * scale).collect();
        Matrix::from_vec(rows, cols, data)
    }
}

/// The sources for `build_mlp`: random data, labels from a random linear "teacher" (so
/// the task is learnable and the loss falls), and scaled random weights.
pub fn initial_sources(shape: Shape) -> Vec<Matrix> {
    let [d0, d1, d2, d3] = shape.dims;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let x = rng.matrix(shape.batch, d0, 1.0);
    let teacher = rng.matrix(d0, d3, 1.0);
    let scores = crate::ops::matmul(&x, &teacher);
    let mut labels = Vec::with_capacity(shape.batch * d3);
    for r in 0..shape.batch {
        let row = scores.row(r);
        let best = (0..d3).fold(0, |best, c| if row[c] > row[best] { c } else { best });
        labels.extend((0..d3).map(|c| if c == best { 1.0 } else { 0.0 }));
    }
    let y = Matrix::from_vec(shape.batch, d3, labels);
    #[allow(clippy::cast_precision_loss)]
    let he = |fan_in: usize| (6.0 / fan_in.max(1) as f32).sqrt();
    let w1 = rng.matrix(d0, d1, he(d0));
    let w2 = rng.matrix(d1, d2, he(d1));
    let w3 = rng.matrix(d2, d3, he(d2));
    vec![x, y, w1, w2, w3]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlp_graph_is_well_formed() {
        let g = build_mlp(8);
        assert_eq!(g.nodes.len(), 23);
        for (i, node) in g.nodes.iter().enumerate() {
            assert_eq!(node.inputs.len(), node.op.arity(), "node {i}");
            for input in &node.inputs {
                match *input {
                    Input::Node(j) => assert!(j < i, "node {i} reads later node {j}"),
                    Input::Source(s) => assert!(s < g.source_count),
                }
            }
        }
        assert_eq!(g.nodes[g.loss].op, Op::Reduce);
        assert_eq!(g.kind_counts(), [8, 2, 2, 1, 1, 1, 5, 3]);
        let deps = g.dependents();
        assert!(deps[g.loss].is_empty());
        for &(node, _) in &g.updates {
            assert!(deps[node].is_empty(), "updates are sinks");
        }
    }

    #[test]
    fn initial_sources_are_deterministic_and_shaped() {
        let shape = Shape {
            batch: 4,
            dims: [5, 6, 7, 3],
        };
        let a = initial_sources(shape);
        assert_eq!(a, initial_sources(shape));
        let shapes: Vec<_> = a.iter().map(|m| (m.rows(), m.cols())).collect();
        assert_eq!(shapes, [(4, 5), (4, 3), (5, 6), (6, 7), (7, 3)]);
        for r in 0..4 {
            assert_eq!(a[Y].row(r).iter().sum::<f32>(), 1.0, "labels are one-hot");
        }
        assert!(a[X].data().iter().all(|v| (-1.0..1.0).contains(v)));
    }
}
