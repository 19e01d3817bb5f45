//! Helpers shared by the integration tests.
#![allow(dead_code)]
// Options are built by assigning fields to the defaults, on purpose.
#![allow(clippy::field_reassign_with_default)]

use std::sync::Arc;

use sievedb::filter::{BloomPolicy, FilterPolicy, NoFilter, RibbonPolicy};
use sievedb::Options;

/// Every built-in filter policy, at the usual settings.
pub fn policies() -> Vec<Arc<dyn FilterPolicy>> {
    vec![
        Arc::new(BloomPolicy::new(10.0)),
        Arc::new(RibbonPolicy::new(10.0)),
        Arc::new(NoFilter),
    ]
}

/// Options with small memtables and levels so flushes and compactions
/// happen constantly in tests.
pub fn small_options() -> Options {
    Options {
        memtable_bytes: 64 << 10,
        level1_bytes: 256 << 10,
        table_bytes: 64 << 10,
        level0_compaction_trigger: 4,
        level0_stop_writes: 12,
        ..Options::default()
    }
}

/// A deterministic pseudo-random generator (splitmix64) for tests.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}

/// The key used by tests for index `i`: fixed width so order is numeric.
pub fn key(i: u64) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}
