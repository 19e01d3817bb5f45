//! The key hashes the filter benchmarks, examples and tests build and query
//! with (each includes this file with `#[path]`).

use sievedb::filter::key_hash;

/// XXH3 hashes of `count` distinct 16-byte keys: `tag` (8 bytes LE), then
/// the key's number (8 bytes LE). Different tags give disjoint key sets.
pub fn key_hashes(tag: u64, count: usize) -> Vec<u64> {
    (0..count as u64)
        .map(|i| {
            let mut key = [0u8; 16];
            key[..8].copy_from_slice(&tag.to_le_bytes());
            key[8..].copy_from_slice(&i.to_le_bytes());
            key_hash(&key)
        })
        .collect()
}

/// Keys the build measurements cycle through in all: a CPU that builds one
/// small key set over and over learns its branches, which no real build
/// sees (the fifth session's branching Ribbon build measured 14.3-15.2
/// ns/key at 10,000 keys on one set against 23.4-24.0 on 64 sets).
#[allow(dead_code)] // not every includer builds
pub const BUILD_KEYS_CYCLED: usize = 640_000;

/// Distinct key sets of `present.len()` keys each, `present` first, of at
/// least [`BUILD_KEYS_CYCLED`] keys in all (64 sets at 10,000 keys, one at
/// 1,000,000), for build measurements to cycle through.
#[allow(dead_code)] // not every includer builds
pub fn build_key_sets(present: &[u64]) -> Vec<Vec<u64>> {
    let sets = BUILD_KEYS_CYCLED.div_ceil(present.len().max(1)).max(1);
    (0..sets as u64)
        .map(|s| {
            if s == 0 {
                present.to_vec()
            } else {
                key_hashes(100 + s, present.len())
            }
        })
        .collect()
}
