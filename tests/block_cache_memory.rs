//! What the block cache costs in memory: the bytes it charges against its
//! capacity cover the heap it really holds, and a block it can never hold
//! is not copied for it.
//!
//! A counting global allocator measures the heap, so this file is its own
//! test binary and its tests run one at a time.
#![allow(clippy::field_reassign_with_default)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;

use sievedb::{Db, Options, Stats};

/// Counts the bytes every allocation asks for, and the bytes live.
struct Counting;
static ALLOCATED: AtomicU64 = AtomicU64::new(0);
static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counters are only statistics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(l.size() as u64, Ordering::Relaxed);
        LIVE.fetch_add(l.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's contract is `System.alloc`'s.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's contract is `System.dealloc`'s.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new as u64, Ordering::Relaxed);
        LIVE.fetch_add(new as i64 - l.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's contract is `System.realloc`'s.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The counters are global: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn options(cache: usize) -> Options {
    let mut opts = Options::default();
    opts.background_compaction = false;
    opts.track_hot_keys = false;
    opts.block_cache_bytes = cache;
    opts
}

/// Bytes allocated per get of a key whose value (and so its data block) is
/// 4 MiB, once the doorkeeper has seen the block miss twice.
fn bytes_per_get_of_a_big_block(cache: usize) -> (u64, Stats) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(cache)).unwrap();
    let value = vec![7u8; 4 << 20];
    db.put(b"big", &value).unwrap();
    db.flush().unwrap();
    for _ in 0..2 {
        assert_eq!(db.get(b"big").unwrap().unwrap().len(), value.len());
    }
    let before = ALLOCATED.load(Ordering::Relaxed);
    for _ in 0..4 {
        assert_eq!(db.get(b"big").unwrap().unwrap().len(), value.len());
    }
    let per_get = (ALLOCATED.load(Ordering::Relaxed) - before) / 4;
    (per_get, db.stats())
}

/// A 4 MiB block fits neither a 1-byte cache nor a 2 MiB one (two 1 MiB
/// shards): every get misses, and costs what it costs without a cache
/// (one copy of the value), not a second 4 MiB copy made for an insert the
/// cache would refuse.
#[test]
fn a_block_the_cache_cannot_hold_is_not_copied_for_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (without, _) = bytes_per_get_of_a_big_block(0);
    for cache in [1usize, 2 << 20] {
        let (with, s) = bytes_per_get_of_a_big_block(cache);
        assert_eq!(s.block_cache_blocks, 0, "cache of {cache} bytes");
        assert_eq!(s.block_cache_hits, 0, "cache of {cache} bytes");
        assert!(
            with < without + (1 << 20),
            "cache of {cache} bytes: {with} bytes allocated per get, {without} without a cache"
        );
    }
}

/// A block is cached when its copy plus the per-entry charge weighs at most
/// 97% of its shard (`quick_cache` refuses heavier entries), and not when
/// heavier: with one shard of 1 MiB, a 1,000,000-byte value's block is
/// cached, a 1,030,000-byte one's is not.
#[test]
fn a_block_is_cached_up_to_97_percent_of_its_shard() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for (len, cached) in [(1_000_000usize, 1u64), (1_030_000, 0)] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), options(1 << 20)).unwrap();
        db.put(b"k", vec![1u8; len]).unwrap();
        db.flush().unwrap();
        for _ in 0..4 {
            assert_eq!(db.get(b"k").unwrap().unwrap().len(), len);
        }
        let s = db.stats();
        assert_eq!(s.block_cache_blocks, cached, "value of {len} bytes");
        assert_eq!(s.block_cache_hits, 2 * cached, "value of {len} bytes");
    }
}

/// Heap bytes held after reading 100,000 keys three times, and the stats.
fn heap_held_after_reads(cache: usize, block_bytes: usize) -> (i64, Stats) {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(cache);
    opts.block_bytes = block_bytes;
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 0..100_000u32 {
        db.put(format!("k{i:07}"), [1u8; 8]).unwrap();
    }
    db.flush().unwrap();
    db.compact_all().unwrap();
    for i in 0..10u32 {
        db.get(format!("k{i:07}")).unwrap();
    }
    let before = LIVE.load(Ordering::Relaxed);
    for _ in 0..3 {
        for i in 0..100_000u32 {
            assert!(db.get(format!("k{i:07}")).unwrap().is_some());
        }
    }
    (LIVE.load(Ordering::Relaxed) - before, db.stats())
}

/// The bytes the cache charges cover the heap its entries hold, for the
/// smallest blocks (where the per-entry overhead dominates) and the default
/// ones, so `block_cache_bytes` bounds the memory it takes.
#[test]
fn charged_bytes_cover_the_heap_the_cache_holds() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for block_bytes in [64usize, 4096] {
        let (base, _) = heap_held_after_reads(0, block_bytes);
        let (with, s) = heap_held_after_reads(8 << 20, block_bytes);
        assert!(s.block_cache_blocks > 0, "{s:?}");
        let held = (with - base) as f64;
        let charged = s.block_cache_bytes as f64;
        eprintln!(
            "blocks of {block_bytes} bytes: {} cached, charged {charged} bytes, heap {held} bytes ({:.2}x)",
            s.block_cache_blocks,
            held / charged
        );
        assert!(
            held <= 1.1 * charged,
            "blocks of {block_bytes} bytes: the cache holds {held} heap bytes, charged {charged}"
        );
    }
}
