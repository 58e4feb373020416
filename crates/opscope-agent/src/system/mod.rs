//! What the machine says about the processes the agent and the recorder watch: their
//! `/proc` status and, through NVML where a driver is installed, the GPUs they use.

pub mod nvml;
pub mod proc_stat;
