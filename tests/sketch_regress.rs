//! Regression tests for sketch serialization found through the engine.

use sievedb::filter::key_hash;
use sievedb::sketch::HyperLogLog;

/// A sparse sketch whose unmerged pending pairs take it past the sparse
/// limit must still serialize to bytes that `from_bytes` accepts (it was
/// written as an over-long sparse list and rejected as corrupt).
#[test]
fn sparse_sketch_with_pending_pairs_round_trips_at_every_size() {
    let mut hll = HyperLogLog::new(14);
    for i in 0..20_000u64 {
        hll.insert_hash(key_hash(&i.to_le_bytes()));
        if i % 97 == 0 || (3000..4000).contains(&i) {
            let bytes = hll.to_bytes();
            let back =
                HyperLogLog::from_bytes(&bytes).unwrap_or_else(|e| panic!("{} items: {e}", i + 1));
            // Crossing into the dense form may move the estimate slightly.
            let (a, b) = (back.estimate() as f64, hll.estimate() as f64);
            assert!((a - b).abs() <= 0.02 * b, "{} items: {a} vs {b}", i + 1);
            assert_eq!(
                HyperLogLog::from_bytes(&back.to_bytes())
                    .unwrap()
                    .estimate(),
                back.estimate()
            );
        }
    }
}
