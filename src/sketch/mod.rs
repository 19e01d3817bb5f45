//! Key statistics: sketches that summarise many keys in little memory.
//!
//! * [`HyperLogLog`]: how many *distinct* keys a set holds (a table, a level,
//!   the union of compaction inputs), within about 0.8% at 12 KiB, mergeable
//!   across tables and precisions.
//! * [`CountMinSketch`]: how often a given key occurred, as an upper bound
//!   that exceeds the truth by at most `epsilon * N` with probability
//!   `1 - delta`; plain (mergeable) or conservative update, optional aging.
//! * [`HeavyHitters`]: the most frequent keys of a stream (the engine's point
//!   reads), from a conservative count-min sketch and a `2k` candidate list.
//!
//! All three take the engine's one key hash
//! ([`key_hash`](crate::filter::key_hash)) so a key is never hashed twice.
//! The HyperLogLog and count-min sketch serialize to versioned, checksummed
//! bytes (formats at the top of [`hll`] and [`cms`]). Measured accuracy and
//! costs are in `docs/statistics.md`.

pub mod cms;
pub mod heavy;
pub mod hll;

pub use cms::{CountMinSketch, UpdateMode};
pub use heavy::HeavyHitters;
pub use hll::HyperLogLog;
