//! # sievedb
//!
//! An embeddable LSM-tree key-value store whose read path is built around
//! swappable point-read filters.
//!
//! * [`filter`]: the [`FilterPolicy`](filter::FilterPolicy) trait, the one
//!   key hash, the blocked Bloom filter, the Ribbon filter and no filter.
//! * [`sketch`]: HyperLogLog distinct counts, count-min frequencies and
//!   heavy hitters over keys.
//! * [`stats`]: read I/O counters (filter checks, negatives, false positives,
//!   data blocks read) and the tree's shape.

#![warn(missing_docs)]

pub mod error;
pub mod filter;
pub mod fs;
pub mod iter;
pub mod key;
pub mod sketch;
pub mod stats;

pub use error::{Error, Result};
pub use stats::{LevelStats, Stats};
