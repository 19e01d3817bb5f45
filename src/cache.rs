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
//! started past every number in the manifest and in the directory), and a
//! cache belongs to one open `Db`: a reopened database gets a new one. (An
//! iterator still open after `Db::close` keeps its tables, and through them
//! the old cache, alive; it reads only its own tables' blocks, so no key of
//! the new cache can meet them.) A table erases its blocks when it
//! is dropped (its file is then deleted or the database is closing), so the
//! blocks of compacted-away tables do not wait for eviction.
//!
//! Eviction and concurrency are `quick_cache`'s weighted sync cache
//! (CLOCK-Pro-like, sharded, each shard behind its own lock), weighted by
//! the bytes of the copy.
//!
//! # Admission
//!
//! A block enters the cache on its *second* miss within a window, not its
//! first (TinyLFU's "doorkeeper"): a bit array remembers the blocks that
//! missed once, and is cleared after every `window` misses, `window` being
//! about the number of blocks the cache holds. Copying a block in costs a
//! 4 KiB allocation, a copy and an eviction; when reads are spread over far
//! more data than the cache holds, almost every copy was evicted unused,
//! and filling on every miss made such gets about 20% slower than no cache
//! at all (docs/benchmarks.md, "Block cache"). A block read twice within
//! a window is likely to be read again before it would be evicted; a block
//! read once is not worth the copy. The bit array takes one byte per 4 KiB
//! of capacity (8 bits per block the cache holds).

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::{OptionsBuilder, Weighter};

/// Bytes charged per entry on top of its contents: the `Arc` header, the
/// key, the cache's own bookkeeping and the allocator's rounding, roughly.
/// Measured (live heap bytes against the charged bytes, 33,334 blocks of
/// 64 bytes, twenty-ninth session): about 125 bytes per entry; with 64 the
/// cache of tiny blocks held 1.44x its capacity.
const ENTRY_OVERHEAD: u64 = 128;

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
    /// The doorkeeper: one bit per hash slot, set by a block's first miss.
    seen: Box<[AtomicU64]>,
    /// Misses since the doorkeeper was last cleared.
    misses: AtomicU64,
    /// Misses between clears of the doorkeeper.
    window: u64,
    /// The heaviest entry the cache accepts: `HOT_ALLOCATION` of a
    /// shard's capacity (`quick_cache` refuses heavier ones).
    max_weight: u64,
}

/// The share of each shard the cache's hot entries may take (`quick_cache`'s
/// default, set explicitly because an entry heavier than this share of its
/// shard is refused).
const HOT_ALLOCATION: f64 = 0.97;

/// Bytes of a typical data block, to turn the capacity into a block count
/// for the doorkeeper (the default `Options::block_bytes`).
const TYPICAL_BLOCK_BYTES: u64 = 4096;

/// Doorkeeper bits per block the cache holds: with the window at one
/// block per cached block, at most 1/8 of the bits are set, so at most one
/// first miss in eight is admitted by a colliding bit.
const DOORKEEPER_BITS_PER_BLOCK: u64 = 8;

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
    /// per-entry overhead); `None` for 0 (no cache). Settings the cache
    /// crate refuses are [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    pub(crate) fn new(capacity: usize) -> crate::Result<Option<Arc<BlockCache>>> {
        if capacity == 0 {
            return Ok(None);
        }
        let capacity = capacity as u64;
        // Each shard holds a share of the capacity, and a block heavier than
        // `HOT_ALLOCATION` of a shard's share is never cached: keep shards of at least 1 MiB
        // (one shard below that).
        let mib = (capacity >> 20).clamp(1, 16);
        let shards = 1usize << (63 - mib.leading_zeros());
        // The cache crate rounds each shard's share up: a multiple of the
        // shard count keeps the total at most `capacity` (at most 15 bytes
        // below it).
        let capacity = capacity - capacity % shards as u64;
        let options = OptionsBuilder::new()
            .shards(shards)
            .hot_allocation(HOT_ALLOCATION)
            .estimated_items_capacity(((capacity / 4096) as usize).max(16))
            .weight_capacity(capacity)
            .build()
            .map_err(|e| {
                crate::Error::invalid(format!("block cache of {capacity} bytes: {e:?}"))
            })?;
        let window = (capacity / TYPICAL_BLOCK_BYTES).max(64);
        let words = (window * DOORKEEPER_BITS_PER_BLOCK)
            .div_ceil(64)
            .next_power_of_two();
        let cache = Cache::with_options(options, BytesWeighter, KeyHashBuilder, Default::default());
        // As `quick_cache` computes it for each shard.
        let shard = cache.shard_capacity();
        let max_weight = ((shard as f64 * HOT_ALLOCATION) as u64).clamp(shard.min(1), shard);
        Ok(Some(Arc::new(BlockCache {
            cache,
            seen: (0..words).map(|_| AtomicU64::new(0)).collect(),
            misses: AtomicU64::new(0),
            window,
            max_weight,
        })))
    }

    /// Records a miss of block `offset` of table `file` and says whether
    /// the block should now be cached: true if it already missed since the
    /// doorkeeper was last cleared (or its bit collides with one that did).
    pub(crate) fn admit(&self, file: u64, offset: u64) -> bool {
        let h = KeyHashBuilder.hash_one((file, offset));
        // `seen.len()` is a power of two: the low bits pick the word, the
        // top six the bit in it.
        let word = &self.seen[(h as usize) & (self.seen.len() - 1)];
        let mask = 1u64 << (h >> 58);
        let before = word.fetch_or(mask, Ordering::Relaxed);
        if self.misses.fetch_add(1, Ordering::Relaxed) % self.window == self.window - 1 {
            for w in self.seen.iter() {
                w.store(0, Ordering::Relaxed);
            }
        }
        before & mask != 0
    }

    /// Whether a block of `len` bytes (decompressed) can be cached at all:
    /// a heavier one is refused by [`insert`](Self::insert), so copying it
    /// for the cache would be wasted.
    #[inline]
    pub(crate) fn can_hold(&self, len: usize) -> bool {
        (len as u64).saturating_add(ENTRY_OVERHEAD) <= self.max_weight
    }

    /// The cached contents of block `offset` of table `file`, if held.
    #[inline]
    pub(crate) fn get(&self, file: u64, offset: u64) -> Option<Arc<[u8]>> {
        self.cache.get(&(file, offset))
    }

    /// Caches `contents` (already verified) as block `offset` of table
    /// `file`, evicting others as needed; a block that [`can_hold`]
    /// refuses (heavier than `HOT_ALLOCATION` of a shard's capacity) is
    /// not cached.
    ///
    /// [`can_hold`]: Self::can_hold
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
