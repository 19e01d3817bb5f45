//! What `benches/filters.rs` and `examples/filter_race.rs` share (each
//! includes this file with `#[path]`): the peer filters, built as both
//! compare them, at the same memory as sievedb's Bloom filter.

use std::hash::{BuildHasher, Hasher};

/// Bloom filter bits per key every family is compared at.
pub const BITS_PER_KEY: usize = 10;

/// Parquet's split-block Bloom filter (`sbbf-rs-safe`, 32-byte blocks,
/// 8 probes with SIMD) over `hashes`.
pub fn build_sbbf(hashes: &[u64]) -> sbbf_rs_safe::Filter {
    let mut filter = sbbf_rs_safe::Filter::new(BITS_PER_KEY, hashes.len());
    for &h in hashes {
        filter.insert_hash(h);
    }
    filter
}

/// `fastbloom` 0.9's default `BloomFilter` at the same number of bits,
/// over `hashes`.
pub fn build_fastbloom(hashes: &[u64]) -> fastbloom::BloomFilter<512, PassThrough> {
    let mut filter = fastbloom::BloomFilter::with_num_bits(BITS_PER_KEY * hashes.len())
        .hasher(PassThrough(0))
        .expected_items(hashes.len());
    for h in hashes {
        filter.insert(h);
    }
    filter
}

/// Hands fastbloom the precomputed hash unchanged.
#[derive(Clone, Default)]
pub struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used (hashing a u64); fold anything else.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, h: u64) {
        self.0 = h;
    }
}

impl BuildHasher for PassThrough {
    type Hasher = PassThrough;
    fn build_hasher(&self) -> PassThrough {
        PassThrough(0)
    }
}
