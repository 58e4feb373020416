//! TensorFlow's profiler protos (`tsl/profiler/protobuf/xplane.proto`, package
//! `tensorflow.profiler`), as hand-written prost messages: field numbers from the
//! TensorFlow 2.21 descriptor. `string` fields are read as bytes so that a name that is
//! not UTF-8 is replaced instead of failing the plane; `oneof` members are plain
//! optional fields (same encoding).

use std::collections::HashMap;

/// `XSpace`; the importer walks its planes itself, so only the other fields are here.
#[derive(Clone, PartialEq, prost::Message)]
pub struct XSpaceRest {
    #[prost(bytes = "vec", repeated, tag = "2")]
    pub errors: Vec<Vec<u8>>,
    #[prost(bytes = "vec", repeated, tag = "3")]
    pub warnings: Vec<Vec<u8>>,
    #[prost(bytes = "vec", repeated, tag = "4")]
    pub hostnames: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct XPlane {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(bytes = "vec", tag = "2")]
    pub name: Vec<u8>,
    #[prost(message, repeated, tag = "3")]
    pub lines: Vec<XLine>,
    #[prost(map = "int64, message", tag = "4")]
    pub event_metadata: HashMap<i64, XEventMetadata>,
    #[prost(map = "int64, message", tag = "5")]
    pub stat_metadata: HashMap<i64, XStatMetadata>,
    #[prost(message, repeated, tag = "6")]
    pub stats: Vec<XStat>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct XLine {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(int64, tag = "10")]
    pub display_id: i64,
    #[prost(bytes = "vec", tag = "2")]
    pub name: Vec<u8>,
    #[prost(bytes = "vec", tag = "11")]
    pub display_name: Vec<u8>,
    #[prost(int64, tag = "3")]
    pub timestamp_ns: i64,
    #[prost(int64, tag = "9")]
    pub duration_ps: i64,
    #[prost(message, repeated, tag = "4")]
    pub events: Vec<XEvent>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct XEvent {
    #[prost(int64, tag = "1")]
    pub metadata_id: i64,
    #[prost(int64, optional, tag = "2")]
    pub offset_ps: Option<i64>,
    #[prost(int64, optional, tag = "5")]
    pub num_occurrences: Option<i64>,
    #[prost(int64, tag = "3")]
    pub duration_ps: i64,
    #[prost(message, repeated, tag = "4")]
    pub stats: Vec<XStat>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct XStat {
    #[prost(int64, tag = "1")]
    pub metadata_id: i64,
    #[prost(double, optional, tag = "2")]
    pub double_value: Option<f64>,
    #[prost(uint64, optional, tag = "3")]
    pub uint64_value: Option<u64>,
    #[prost(int64, optional, tag = "4")]
    pub int64_value: Option<i64>,
    #[prost(bytes = "vec", optional, tag = "5")]
    pub str_value: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "6")]
    pub bytes_value: Option<Vec<u8>>,
    /// The id of the `XStatMetadata` whose name is the value.
    #[prost(uint64, optional, tag = "7")]
    pub ref_value: Option<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct XEventMetadata {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(bytes = "vec", tag = "2")]
    pub name: Vec<u8>,
    #[prost(bytes = "vec", tag = "4")]
    pub display_name: Vec<u8>,
    /// Stats every event of this metadata has (xprof's derivations read them too).
    #[prost(message, repeated, tag = "5")]
    pub stats: Vec<XStat>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct XStatMetadata {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(bytes = "vec", tag = "2")]
    pub name: Vec<u8>,
}
