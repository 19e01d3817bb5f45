//! Helpers shared by the filter tests: key hash sets, format 0x05 builds
//! and guarded bytes.

use proptest::prelude::*;
use rand::Rng;
use sievedb::filter::ribbon::{BuildKnobs, RibbonFormat};
use sievedb::filter::{self, Filter, RibbonPolicy};

/// Hashes of `n` distinct keys, `offset` separating independent key sets.
pub fn hashes(n: u64, offset: u64) -> Vec<u64> {
    (offset..offset + n)
        .map(|i| filter::key_hash(&i.to_le_bytes()))
        .collect()
}

/// Hashes of keys from a range no key set here uses (never inserted
/// anywhere).
pub fn absent(n: u64) -> Vec<u64> {
    hashes(n, 1 << 50)
}

/// The default build knobs, but building format 0x05 (the policy's default
/// is format 0x06).
pub fn knobs_0x05() -> BuildKnobs {
    BuildKnobs {
        format: RibbonFormat::Rows128,
        ..BuildKnobs::default()
    }
}

/// `policy`'s filter of `keys` in format 0x05: what `policy.build(keys)`
/// wrote before format 0x06 became the default (a blocked Bloom filter
/// where the policy falls back to one).
pub fn build_0x05(policy: &RibbonPolicy, keys: &[u64]) -> Vec<u8> {
    policy.build_with(keys, knobs_0x05()).0
}

/// `n` random probe hashes.
pub fn probes(rng: &mut impl Rng, n: usize) -> Vec<u64> {
    (0..n).map(|_| rng.gen()).collect()
}

/// The false-positive rate measured as `hits` of `probes` absent keys,
/// asserted within five standard deviations of the binomial count of the
/// `expected` rate.
pub fn assert_fp_rate_near(hits: usize, probes: u64, expected: f64) -> f64 {
    let measured = hits as f64 / probes as f64;
    let sigma = (expected * (1.0 - expected) / probes as f64).sqrt();
    assert!(
        (measured - expected).abs() < 5.0 * sigma,
        "measured {measured}, expected {expected} (sigma {sigma})"
    );
    measured
}

/// In a property test: no false negative for `keys` through `decoded` (the
/// filter of `bytes`) and the generic query.
pub fn prop_no_false_negatives(
    decoded: &Filter,
    bytes: &[u8],
    keys: &[u64],
) -> Result<(), TestCaseError> {
    for &h in keys {
        prop_assert!(decoded.may_contain(h));
        prop_assert!(filter::may_contain(bytes, h));
    }
    Ok(())
}

/// `bytes` copied so that they end exactly where an inaccessible page
/// begins: a read past their end faults (the test process dies) instead of
/// reading whatever follows, so out-of-bounds reads that do not change the
/// answer (a masked-off window, a shifted-out word) are caught without a
/// sanitizer.
#[cfg(unix)]
pub struct Guarded {
    map: *mut libc::c_void,
    map_len: usize,
    start: usize,
    len: usize,
}

#[cfg(unix)]
impl Guarded {
    pub fn new(bytes: &[u8]) -> Guarded {
        // SAFETY: plain libc calls; the mapping is private to this value,
        // the copy stays inside its accessible pages, and `drop` unmaps it.
        unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE) as usize;
            let data_pages = bytes.len().div_ceil(page).max(1);
            let map_len = (data_pages + 1) * page;
            let map = libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(map, libc::MAP_FAILED);
            let guard = map.cast::<u8>().add(data_pages * page);
            assert_eq!(libc::mprotect(guard.cast(), page, libc::PROT_NONE), 0);
            let start = data_pages * page - bytes.len();
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), map.cast::<u8>().add(start), bytes.len());
            Guarded {
                map,
                map_len,
                start,
                len: bytes.len(),
            }
        }
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `len` initialised bytes at `start` of the live mapping.
        unsafe { std::slice::from_raw_parts(self.map.cast::<u8>().add(self.start), self.len) }
    }
}

#[cfg(unix)]
impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer borrowed.
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}
