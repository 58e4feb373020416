//! The contracts between opscope's processes, each written once: the frames a recorded
//! process and a client exchange with the agent ([`frame`]), the greeting a recorded
//! process opens with ([`Hello`]), and the environment variables that pass settings
//! from `opscope record` to the injected library and the Python bootstrap ([`env`]),
//! and how a process's job is named ([`job`]).
//! No dependencies: the injected recorder links it.

#![forbid(unsafe_code)]

pub mod env;
pub mod frame;
mod hello;
pub mod job;

pub use hello::Hello;
