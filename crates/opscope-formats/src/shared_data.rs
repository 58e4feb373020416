//! The shared corpus of real traces, for this crate's unit tests (see `opscope_corpus`).

pub(crate) use opscope_corpus::shared;
