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
