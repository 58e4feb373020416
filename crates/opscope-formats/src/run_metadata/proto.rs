//! TensorFlow's `RunMetadata` and the parts of `StepStats` tfprof reads
//! (`tensorflow/core/framework/step_stats.proto`, `config.proto`), as hand-written
//! prost messages with the field numbers of TensorFlow 2.21. Strings are read as bytes
//! so that a name that is not UTF-8 is replaced instead of failing the file.

use std::collections::HashMap;

#[derive(Clone, PartialEq, prost::Message)]
pub struct RunMetadata {
    #[prost(message, optional, tag = "1")]
    pub step_stats: Option<StepStats>,
    /// The graphs the session ran, after placement: op types when no GraphDef is given.
    #[prost(message, repeated, tag = "3")]
    pub partition_graphs: Vec<super::graph::proto::GraphDef>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StepStats {
    #[prost(message, repeated, tag = "1")]
    pub dev_stats: Vec<DeviceStepStats>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DeviceStepStats {
    #[prost(bytes = "vec", tag = "1")]
    pub device: Vec<u8>,
    #[prost(message, repeated, tag = "2")]
    pub node_stats: Vec<NodeExecStats>,
    #[prost(map = "uint32, bytes", tag = "3")]
    pub thread_names: HashMap<u32, Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeExecStats {
    #[prost(bytes = "vec", tag = "1")]
    pub node_name: Vec<u8>,
    #[prost(int64, tag = "2")]
    pub all_start_micros: i64,
    #[prost(int64, tag = "3")]
    pub op_start_rel_micros: i64,
    #[prost(int64, tag = "4")]
    pub op_end_rel_micros: i64,
    #[prost(int64, tag = "5")]
    pub all_end_rel_micros: i64,
    #[prost(message, repeated, tag = "6")]
    pub memory: Vec<AllocatorMemoryUsed>,
    #[prost(message, repeated, tag = "7")]
    pub output: Vec<NodeOutput>,
    #[prost(bytes = "vec", tag = "8")]
    pub timeline_label: Vec<u8>,
    #[prost(int64, tag = "9")]
    pub scheduled_micros: i64,
    #[prost(uint32, tag = "10")]
    pub thread_id: u32,
    #[prost(message, optional, tag = "12")]
    pub memory_stats: Option<MemoryStats>,
    #[prost(int64, tag = "13")]
    pub all_start_nanos: i64,
    #[prost(int64, tag = "14")]
    pub op_start_rel_nanos: i64,
    #[prost(int64, tag = "15")]
    pub op_end_rel_nanos: i64,
    #[prost(int64, tag = "16")]
    pub all_end_rel_nanos: i64,
    #[prost(int64, tag = "17")]
    pub scheduled_nanos: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AllocatorMemoryUsed {
    #[prost(bytes = "vec", tag = "1")]
    pub allocator_name: Vec<u8>,
    #[prost(int64, tag = "2")]
    pub total_bytes: i64,
    #[prost(int64, tag = "3")]
    pub peak_bytes: i64,
    #[prost(int64, tag = "4")]
    pub live_bytes: i64,
    #[prost(int64, tag = "5")]
    pub allocator_bytes_in_use: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeOutput {
    #[prost(int32, tag = "1")]
    pub slot: i32,
    #[prost(message, optional, tag = "3")]
    pub tensor_description: Option<TensorDescription>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorDescription {
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    #[prost(message, optional, tag = "2")]
    pub shape: Option<super::graph::proto::TensorShape>,
    #[prost(message, optional, tag = "4")]
    pub allocation_description: Option<AllocationDescription>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AllocationDescription {
    #[prost(int64, tag = "1")]
    pub requested_bytes: i64,
    #[prost(int64, tag = "2")]
    pub allocated_bytes: i64,
    #[prost(bytes = "vec", tag = "3")]
    pub allocator_name: Vec<u8>,
    #[prost(uint64, tag = "6")]
    pub ptr: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MemoryStats {
    #[prost(int64, tag = "1")]
    pub temp_memory_size: i64,
    #[prost(int64, tag = "3")]
    pub persistent_memory_size: i64,
}
