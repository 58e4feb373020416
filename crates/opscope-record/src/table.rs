//! The recorder's hash tables. They are keyed by names and ids the program gives, and
//! looked up once or twice per event on the hot path and in the writer: hashed with
//! foldhash's fixed-seed fast hasher, since SipHash took a fifth of the writer's time
//! and nothing here has to resist keys chosen to collide.

/// A `HashMap` with the fast hasher; make one with `Map::default()`.
pub type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;
