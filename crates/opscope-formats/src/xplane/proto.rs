//! TensorFlow's profiler protos (`tsl/profiler/protobuf/xplane.proto`, package
//! `tensorflow.profiler`) as prost messages generated at build time from the subset in
//! `proto/` (see `build.rs`): strings are read as bytes, so that a name that is not
//! UTF-8 is replaced instead of failing the plane.

// `XSpace` itself is declared for its field numbers: the importer walks its planes by
// hand and decodes the rest as `XSpaceRest`.
#[allow(dead_code)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/tensorflow.profiler.rs"));
    include!(concat!(env!("OUT_DIR"), "/xplane_fields.rs"));
}

pub use generated::*;
