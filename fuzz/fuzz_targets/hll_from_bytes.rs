//! `HyperLogLog::from_bytes` on arbitrary bytes: a typed error or a sketch,
//! never a panic. The sketch lives on branch `sketch`; build with
//! `--features sketch` once it is merged. Without the feature this target
//! is empty (so the fuzz crate builds on every branch).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[cfg(feature = "sketch")]
fuzz_target!(|data: &[u8]| {
    if let Ok(hll) = sievedb::sketch::HyperLogLog::from_bytes(data) {
        let _ = format!("{hll:?}");
    }
});

#[cfg(not(feature = "sketch"))]
fuzz_target!(|_data: &[u8]| {});
