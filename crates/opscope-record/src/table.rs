//! The recorder's hash tables, keyed by names and ids the program gives: ITT string
//! handles (looked up on every PyTorch op) and the writer's interning. Hashed with
//! foldhash's fixed-seed fast hasher: SipHash took a fifth of the writer's time.

/// A `HashMap` with the fast hasher; make one with `Map::default()`.
pub type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;
