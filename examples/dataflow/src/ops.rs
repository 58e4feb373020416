//! The arithmetic: a dense row-major `f32` matrix and the op kernels the graph is made of.
//! Every kernel is single-threaded and has a fixed summation order, so a graph's results
//! do not depend on which worker ran which op or when.

/// A dense row-major matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix {
    rows: usize,
    cols: usize,
    data: Vec<f32>,
}

impl Matrix {
    pub fn zeros(rows: usize, cols: usize) -> Self {
        Self::from_vec(rows, cols, vec![0.0; rows * cols])
    }

    pub fn from_vec(rows: usize, cols: usize, data: Vec<f32>) -> Self {
        assert_eq!(
            data.len(),
            rows * cols,
            "matrix data does not match its shape"
        );
        Self { rows, cols, data }
    }

    #[cfg(test)]
    pub fn rows(&self) -> usize {
        self.rows
    }

    #[cfg(test)]
    pub fn cols(&self) -> usize {
        self.cols
    }

    pub fn data(&self) -> &[f32] {
        &self.data
    }

    pub fn row(&self, r: usize) -> &[f32] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// Sum of all elements, in f64 so that the checksum is not dominated by rounding.
    pub fn sum(&self) -> f64 {
        self.data.iter().map(|&v| f64::from(v)).sum()
    }

    fn zip_map(&self, other: &Matrix, f: impl Fn(f32, f32) -> f32) -> Matrix {
        assert_eq!(
            (self.rows, self.cols),
            (other.rows, other.cols),
            "element-wise op on matrices of different shapes"
        );
        let data = self
            .data
            .iter()
            .zip(&other.data)
            .map(|(&a, &b)| f(a, b))
            .collect();
        Matrix::from_vec(self.rows, self.cols, data)
    }
}

/// One operation of the graph. `Sgd` carries its learning rate; the others have no
/// attributes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    MatMul,
    Relu,
    ReluGrad,
    Softmax,
    Sub,
    Reduce,
    Transpose,
    Sgd { lr: f32 },
}

/// The op type names, in the order the summary lists them; `Op::kind_index` indexes it.
pub const KIND_NAMES: [&str; 8] = [
    "MatMul",
    "Relu",
    "ReluGrad",
    "Softmax",
    "Sub",
    "Reduce",
    "Transpose",
    "Sgd",
];

impl Op {
    pub fn kind_index(self) -> usize {
        match self {
            Op::MatMul => 0,
            Op::Relu => 1,
            Op::ReluGrad => 2,
            Op::Softmax => 3,
            Op::Sub => 4,
            Op::Reduce => 5,
            Op::Transpose => 6,
            Op::Sgd { .. } => 7,
        }
    }

    /// The op type name, which is also the ITT task name.
    pub fn name(self) -> &'static str {
        KIND_NAMES[self.kind_index()]
    }

    pub fn arity(self) -> usize {
        match self {
            Op::Relu | Op::Softmax | Op::Reduce | Op::Transpose => 1,
            Op::MatMul | Op::ReluGrad | Op::Sub | Op::Sgd { .. } => 2,
        }
    }

    /// Runs the op on its inputs (in the graph's input order).
    pub fn apply(self, inputs: &[&Matrix]) -> Matrix {
        assert_eq!(
            inputs.len(),
            self.arity(),
            "{} got the wrong number of inputs",
            self.name()
        );
        match self {
            Op::MatMul => matmul(inputs[0], inputs[1]),
            Op::Relu => relu(inputs[0]),
            Op::ReluGrad => relu_grad(inputs[0], inputs[1]),
            Op::Softmax => softmax_rows(inputs[0]),
            Op::Sub => inputs[0].zip_map(inputs[1], |a, b| a - b),
            Op::Reduce => mean_row_sum_of_squares(inputs[0]),
            Op::Transpose => transpose(inputs[0]),
            Op::Sgd { lr } => inputs[0].zip_map(inputs[1], |w, g| w - lr * g),
        }
    }
}

pub fn matmul(a: &Matrix, b: &Matrix) -> Matrix {
    assert_eq!(a.cols, b.rows, "MatMul of incompatible shapes");
    let mut out = Matrix::zeros(a.rows, b.cols);
    // i-k-j order walks `b` and `out` row by row, which the compiler vectorises.
    for i in 0..a.rows {
        let out_row = &mut out.data[i * b.cols..(i + 1) * b.cols];
        for (k, &aik) in a.row(i).iter().enumerate() {
            for (o, &bkj) in out_row.iter_mut().zip(b.row(k)) {
                *o += aik * bkj;
            }
        }
    }
    out
}

pub fn transpose(a: &Matrix) -> Matrix {
    let mut data = Vec::with_capacity(a.data.len());
    for c in 0..a.cols {
        data.extend((0..a.rows).map(|r| a.data[r * a.cols + c]));
    }
    Matrix::from_vec(a.cols, a.rows, data)
}

pub fn relu(a: &Matrix) -> Matrix {
    let data = a.data.iter().map(|&v| v.max(0.0)).collect();
    Matrix::from_vec(a.rows, a.cols, data)
}

/// Passes the gradient through where the ReLU's input was positive.
pub fn relu_grad(grad: &Matrix, pre_activation: &Matrix) -> Matrix {
    grad.zip_map(pre_activation, |g, x| if x > 0.0 { g } else { 0.0 })
}

pub fn softmax_rows(a: &Matrix) -> Matrix {
    let mut data = Vec::with_capacity(a.data.len());
    for r in 0..a.rows {
        let row = a.row(r);
        // Shifting by the row maximum keeps exp() from overflowing.
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let start = data.len();
        data.extend(row.iter().map(|&v| (v - max).exp()));
        let total: f32 = data[start..].iter().sum();
        for v in &mut data[start..] {
            *v /= total;
        }
    }
    Matrix::from_vec(a.rows, a.cols, data)
}

/// The squared error per row, averaged over rows: the training loss as a 1×1 matrix.
pub fn mean_row_sum_of_squares(a: &Matrix) -> Matrix {
    let total: f64 = a.data.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    let mean = (total / a.rows.max(1) as f64) as f32;
    Matrix::from_vec(1, 1, vec![mean])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(rows: usize, cols: usize, data: &[f32]) -> Matrix {
        Matrix::from_vec(rows, cols, data.to_vec())
    }

    #[test]
    fn matmul_matches_hand_computed_product() {
        let a = m(2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b = m(3, 2, &[7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
        assert_eq!(matmul(&a, &b), m(2, 2, &[58.0, 64.0, 139.0, 154.0]));
    }

    #[test]
    fn transpose_swaps_indices() {
        let a = m(2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let t = transpose(&a);
        assert_eq!(t, m(3, 2, &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]));
        assert_eq!(transpose(&t), a);
    }

    #[test]
    fn softmax_rows_are_distributions_and_keep_order() {
        let s = softmax_rows(&m(2, 3, &[1.0, 2.0, 3.0, 1000.0, 0.0, -1000.0]));
        for r in 0..2 {
            let total: f32 = s.row(r).iter().sum();
            assert!((total - 1.0).abs() < 1e-6, "row {r} sums to {total}");
        }
        assert!(s.row(0)[0] < s.row(0)[1] && s.row(0)[1] < s.row(0)[2]);
        assert!(
            (s.row(1)[0] - 1.0).abs() < 1e-6,
            "large logits must not overflow"
        );
    }

    #[test]
    fn elementwise_ops() {
        let x = m(1, 4, &[-2.0, -0.5, 0.5, 2.0]);
        let g = m(1, 4, &[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(relu(&x), m(1, 4, &[0.0, 0.0, 0.5, 2.0]));
        assert_eq!(relu_grad(&g, &x), m(1, 4, &[0.0, 0.0, 3.0, 4.0]));
        assert_eq!(Op::Sub.apply(&[&g, &x]), m(1, 4, &[3.0, 2.5, 2.5, 2.0]));
        assert_eq!(
            Op::Sgd { lr: 0.5 }.apply(&[&g, &x]),
            m(1, 4, &[2.0, 2.25, 2.75, 3.0])
        );
        assert_eq!(
            mean_row_sum_of_squares(&m(2, 2, &[1.0, 2.0, 3.0, 4.0])),
            m(1, 1, &[15.0])
        );
    }

    #[test]
    fn kind_names_round_trip() {
        let all = [
            Op::MatMul,
            Op::Relu,
            Op::ReluGrad,
            Op::Softmax,
            Op::Sub,
            Op::Reduce,
            Op::Transpose,
            Op::Sgd { lr: 1.0 },
        ];
        for (i, op) in all.into_iter().enumerate() {
            assert_eq!(op.kind_index(), i);
            assert_eq!(op.name(), KIND_NAMES[i]);
        }
    }
}
