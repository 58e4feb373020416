//! opscope importers and exporters.
