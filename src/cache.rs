//! The block cache: verified data-block contents kept in process memory.
//!
//! One cache per [`Db`](crate::Db) (sized by
//! [`Options::block_cache_bytes`](crate::Options::block_cache_bytes)) is
//! shared by every table the database opens. An entry is a copy of a data
//! block's contents (without its checksum trailer), keyed by the table's
//! file number and the block's offset, made after the block's checksum
//! matched. A hit therefore skips the checksum: the copy lives in this
//! process's memory, not in the page cache, so damage to the file after the
//! copy was made cannot reach it, and a block read from the file is still
//! always verified ("a corrupt file is reported, not believed").
//!
//! Keys stay unambiguous because a database never reuses a file number:
//! numbers come from one counter that only grows (`DbInner::next_file`,
//! started past every number in the manifest and in the directory), and the
//! cache lives no longer than the `Db`. A table erases its blocks when it
//! is dropped (its file is then deleted or the database is closing), so the
//! blocks of compacted-away tables do not wait for eviction.
//!
//! Eviction and concurrency are `quick_cache`'s weighted sync cache
//! (CLOCK-Pro-like, sharded, each shard behind its own lock), weighted by
//! the bytes of the copy.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::{OptionsBuilder, Weighter};

/// Bytes charged per entry on top of its contents: the `Arc` header, the
/// key and the cache's own bookkeeping, roughly.
const ENTRY_OVERHEAD: u64 = 64;

/// Weighs an entry by the bytes it holds.
#[derive(Debug, Clone, Copy)]
struct BytesWeighter;

impl Weighter<(u64, u64), Arc<[u8]>> for BytesWeighter {
    fn weight(&self, _key: &(u64, u64), val: &Arc<[u8]>) -> u64 {
        val.len() as u64 + ENTRY_OVERHEAD
    }
}

/// A fast hash of the `(file number, offset)` key (SipHash, the standard
/// default, costs more than the rest of a hit). Keys are not chosen by
/// users, so hash flooding is not a concern.
#[derive(Debug, Clone, Copy, Default)]
struct KeyHashBuilder;

/// The state of [`KeyHashBuilder`]'s hasher.
#[derive(Debug, Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        // Final avalanche (from MurmurHash3's fmix64) so both the shard
        // index (high bits) and the table slot (low bits) are spread.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(29) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

impl BuildHasher for KeyHashBuilder {
    type Hasher = KeyHasher;

    fn build_hasher(&self) -> KeyHasher {
        KeyHasher::default()
    }
}

/// Verified data-block contents keyed by (table file number, block offset),
/// bounded by a byte capacity.
pub(crate) struct BlockCache {
    cache: Cache<(u64, u64), Arc<[u8]>, BytesWeighter, KeyHashBuilder>,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("bytes", &self.usage())
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl BlockCache {
    /// A cache holding at most `capacity` bytes (contents plus a fixed
    /// per-entry overhead); `None` for 0 (no cache).
    pub(crate) fn new(capacity: usize) -> Option<Arc<BlockCache>> {
        if capacity == 0 {
            return None;
        }
        let capacity = capacity as u64;
        // Each shard holds a share of the capacity, and a block larger than
        // a shard's share is never cached: keep shards of at least 1 MiB
        // (one shard below that).
        let mib = (capacity >> 20).clamp(1, 16);
        let shards = 1usize << (63 - mib.leading_zeros());
        let options = OptionsBuilder::new()
            .shards(shards)
            .estimated_items_capacity(((capacity / 4096) as usize).max(16))
            .weight_capacity(capacity)
            .build()
            .ok()?;
        Some(Arc::new(BlockCache {
            cache: Cache::with_options(options, BytesWeighter, KeyHashBuilder, Default::default()),
        }))
    }

    /// The cached contents of block `offset` of table `file`, if held.
    #[inline]
    pub(crate) fn get(&self, file: u64, offset: u64) -> Option<Arc<[u8]>> {
        self.cache.get(&(file, offset))
    }

    /// Caches `contents` (already verified) as block `offset` of table
    /// `file`, evicting others as needed; a block larger than a shard's
    /// capacity is not cached.
    pub(crate) fn insert(&self, file: u64, offset: u64, contents: Arc<[u8]>) {
        self.cache.insert((file, offset), contents);
    }

    /// Drops block `offset` of table `file`, if held.
    pub(crate) fn remove(&self, file: u64, offset: u64) {
        self.cache.remove(&(file, offset));
    }

    /// Bytes held (contents plus per-entry overhead).
    pub(crate) fn usage(&self) -> u64 {
        self.cache.weight()
    }

    /// The capacity in bytes.
    pub(crate) fn capacity(&self) -> u64 {
        self.cache.capacity()
    }

    /// Blocks held.
    pub(crate) fn len(&self) -> usize {
        self.cache.len()
    }
}
