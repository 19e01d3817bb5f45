//! # sievedb
//!
//! An embeddable LSM-tree key-value store whose read path is built around
//! swappable point-read filters.
//!
//! ```no_run
//! use std::sync::Arc;
//! use sievedb::{Db, Options, WriteBatch};
//! use sievedb::filter::RibbonPolicy;
//!
//! # fn main() -> sievedb::Result<()> {
//! let mut opts = Options::default();
//! opts.filter_policy = Arc::new(RibbonPolicy::new(10.0));
//! let db = Db::open("/tmp/sievedb-doc", opts)?;
//! db.put(b"k", b"v")?;
//! let snap = db.snapshot()?;
//! let mut batch = WriteBatch::new();
//! batch.put(b"a", b"1").delete(b"k");
//! db.write(&batch)?;
//! assert_eq!(db.get(b"a")?, Some(b"1".to_vec()));
//! assert_eq!(snap.get(b"k")?, Some(b"v".to_vec())); // as of the snapshot
//! drop(snap);
//! for item in db.scan(b"a".as_slice()..b"z".as_slice())? {
//!     let (key, value) = item?;
//!     println!("{key:?} = {value:?}");
//! }
//! // The same range, largest key first.
//! for item in db.scan(b"a".as_slice()..b"z".as_slice())?.rev() {
//!     let (key, _) = item?;
//!     println!("{key:?}");
//! }
//! println!("{:?}", db.stats());
//! db.close()?;
//! # Ok(()) }
//! ```
//!
//! * [`Db`]: open, put, get, `multi_get` (many keys at one snapshot),
//!   [`Snapshot`]s (a pinned read view), checkpoints (an openable copy,
//!   [`Db::checkpoint`]), prefix scans that skip tables by their filter
//!   ([`Db::scan_prefix`], [`Options::prefix_filter_len`]), delete, atomic [`WriteBatch`]es, range scans (forward, backward or both
//!   ends at once: [`DbIterator`]), flush, compaction,
//!   statistics.
//! * [`filter`]: the [`FilterPolicy`](filter::FilterPolicy) trait, the one
//!   key hash, the blocked Bloom filter, the Ribbon filter and no filter;
//!   [`FilterBudget`] sizes each sorted run's filters (Monkey) through
//!   [`Options::filter_budget`].
//! * [`sstable`]: immutable sorted table files whose filter is asked before
//!   any data block is read.
//! * [`stats`]: read I/O counters (filter checks, negatives, false positives,
//!   data blocks read) and the tree's shape; [`ReadCost`], the same counts
//!   for one read ([`Db::get_with_cost`]).
//! * [`wal`]: the checksummed record log behind the write-ahead log and the
//!   manifest.
//! * [`manifest`]: version edits, the manifest log and the `CURRENT` pointer.
//! * [`sketch`]: HyperLogLog, Count-Min and heavy hitters: distinct-key
//!   counts per table and level, hot keys on the read path.
//! * [`fs`]: the filesystem interface every write goes through (except
//!   the creation of the `LOCK` file), and
//!   [`fs::FaultFs`], which simulates power loss and I/O errors in tests.
//! * [`verify`]: [`Db::verify`], the whole-database integrity check.

#![warn(missing_docs)]

mod batch;
mod cache;
mod checkpoint;
mod compaction;
mod db;
pub mod error;
pub mod filter;
pub mod fs;
pub mod iter;
pub mod key;
pub mod manifest;
mod memtable;
mod merge;
mod options;
mod recovery;
pub mod sketch;
mod snapshot;
pub mod sstable;
pub mod stats;
pub mod verify;
mod version;
pub mod wal;
mod write_group;

pub use batch::WriteBatch;
pub use db::{Db, HOT_KEYS_TRACKED};
pub use error::{Error, Result};
pub use filter::budget::FilterBudget;
pub use merge::DbIterator;
pub use options::{CompactionPick, Options, DEFAULT_BLOCK_CACHE_BYTES};
pub use recovery::{RecoveryReport, RecoveryStop, WalRecovery};
pub use snapshot::Snapshot;
pub use sstable::Compression;
pub use stats::{LevelStats, ReadCost, ReadSource, Stats, TableInfo};
pub use verify::{Problem, VerifyReport};
