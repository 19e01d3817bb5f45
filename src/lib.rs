//! # sievedb
//!
//! An embeddable LSM-tree key-value store whose read path is built around
//! swappable point-read filters.
//!
//! * [`filter`]: the [`FilterPolicy`](filter::FilterPolicy) trait, the one
//!   key hash, the blocked Bloom filter, the Ribbon filter and no filter.
//! * [`stats`]: read I/O counters (filter checks, negatives, false positives,
//!   data blocks read) and the tree's shape.
//! * [`wal`]: the checksummed record log behind the write-ahead log and the
//!   manifest.
//! * [`manifest`]: version edits, the manifest log and the `CURRENT` pointer.

#![warn(missing_docs)]

pub mod error;
pub mod filter;
pub mod fs;
pub mod iter;
pub mod key;
pub mod manifest;
pub mod stats;
pub mod wal;

pub use error::{Error, Result};
pub use stats::{LevelStats, Stats};
