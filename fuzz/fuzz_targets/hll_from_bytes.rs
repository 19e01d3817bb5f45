//! `HyperLogLog::from_bytes` on arbitrary bytes: a typed error or a sketch,
//! never a panic; a decoded sketch estimates, merges and re-serializes to
//! bytes that decode again.
//!
//! The sketch bytes end with a CRC-32 of everything before them, which random
//! input almost never matches. So each input is tried twice: as given, and
//! with a correct CRC appended, so the structural checks behind the checksum
//! (header, lengths, pair order, register ranges) are fuzzed too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sievedb::sketch::HyperLogLog;

fn exercise(bytes: &[u8]) {
    if let Ok(hll) = HyperLogLog::from_bytes(bytes) {
        let estimate = hll.estimate();
        let again = HyperLogLog::from_bytes(&hll.to_bytes()).expect("re-serialized sketch decodes");
        assert_eq!(again.estimate(), estimate);
        let mut merged = HyperLogLog::new(12);
        merged.merge(&hll).expect("merge folds any precision");
        let _ = merged.estimate();
    }
}

fuzz_target!(|data: &[u8]| {
    exercise(data);
    let mut framed = data.to_vec();
    framed.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
    exercise(&framed);
});
