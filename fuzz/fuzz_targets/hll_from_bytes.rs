//! `HyperLogLog::from_bytes` on arbitrary bytes: a typed error or a sketch,
//! never a panic; a decoded sketch estimates, merges and re-serializes to
//! bytes that decode again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sievedb::sketch::HyperLogLog;

fuzz_target!(|data: &[u8]| {
    if let Ok(hll) = HyperLogLog::from_bytes(data) {
        let _ = hll.estimate();
        let bytes = hll.to_bytes();
        let back = HyperLogLog::from_bytes(&bytes).expect("re-serialized sketch decodes");
        assert_eq!(back.estimate(), hll.estimate());
        let mut merged = HyperLogLog::new(14);
        let _ = merged.merge(&hll);
        let _ = merged.estimate();
    }
});
