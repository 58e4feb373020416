//! TensorFlow's `RunMetadata`, the parts of `StepStats` tfprof reads and the `GraphDef`
//! subset (`tensorflow/core/protobuf/config.proto`, `framework/step_stats.proto`,
//! `framework/graph.proto` and their imports), as prost messages generated at build time
//! from the subsets in `proto/` (see `build.rs`). Strings are read as bytes so that a
//! name that is not UTF-8 is replaced instead of failing the file.

// prost-build gives every enum helpers (`as_str_name`, ...) that nothing here calls.
#[allow(dead_code)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/tensorflow.rs"));
}

pub use generated::*;
