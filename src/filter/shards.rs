//! What the Ribbon builds of formats 0x05 and 0x06 share: key hashes
//! partitioned by shard.

use super::fastrange64;

/// Key hashes partitioned by shard with a counting sort: shard
/// `fastrange64(hash, num_shards)`, as queries find it, each shard's hashes
/// in their input order.
pub(crate) struct ShardedKeys {
    hashes: Vec<u64>,
    /// `ends[i]`: one past shard `i`'s last hash in `hashes`.
    ends: Vec<usize>,
}

impl ShardedKeys {
    /// Partitions `key_hashes` into `num_shards` (at least 1) shards.
    pub(crate) fn new(key_hashes: &[u64], num_shards: usize) -> ShardedKeys {
        let shard_of = |h: u64| fastrange64(h, num_shards as u64) as usize;
        let mut ends = vec![0usize; num_shards];
        for &h in key_hashes {
            ends[shard_of(h)] += 1;
        }
        let mut sum = 0;
        for end in ends.iter_mut() {
            sum += *end;
            *end = sum;
        }
        let mut hashes = vec![0u64; key_hashes.len()];
        let mut fill = ends.clone();
        for &h in key_hashes.iter().rev() {
            let f = &mut fill[shard_of(h)];
            *f -= 1;
            hashes[*f] = h;
        }
        ShardedKeys { hashes, ends }
    }

    /// The hashes of shard `i`.
    pub(crate) fn keys(&self, i: usize) -> &[u64] {
        let begin = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.hashes[begin..self.ends[i]]
    }
}
