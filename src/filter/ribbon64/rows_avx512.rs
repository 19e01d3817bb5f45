//! A band's prepared rows, eight keys at a time with AVX-512 F and DQ.
//!
//! [`Band::prepare`](super::band::Band::prepare) turns each key hash of a
//! shard into the row the banding lanes take up: coefficients, the
//! address of the start slot, result bits. One key at a time that is a
//! 64-bit multiply (the rehash), a 64 x 64 -> 128-bit multiply (the
//! coefficients), another (the start's `fastrange`) and two clamps, about
//! 25 instructions, two of them 128-bit `mul`s (each writing `rdx:rax`);
//! it took about a tenth of a 1,000,000-key build
//! (`perf record` of the build, docs/filters.md). Here eight keys share
//! each instruction:
//!
//! * rehash: `vpmullq` (DQ), the low 64 bits of `(h ^ mask) * REHASH_MULT`;
//! * coefficients `lo ^ hi | 1` of `g * COEFF_MULT`: the low word by
//!   `vpmullq`; the high word from the four 32 x 32-bit partial products
//!   (`vpmuludq`), `hi = gh*ch + (gl*ch >> 32) + (gh*cl >> 32) + carry`,
//!   where the carry is the top of
//!   `(gl*cl >> 32) + lo32(gl*ch) + lo32(gh*cl)` (a sum below `3 * 2^32`,
//!   so no lane overflows);
//! * start: `fastrange64(g, n)` for `n < 2^16` is
//!   `(gh*n + (gl*n >> 32)) >> 32` (exact: `gh*n < 2^48`), then
//!   `min(max(u - SMASH, 0), n - 64)` with signed 64-bit min and max
//!   (every value is below `2^16`);
//! * the three words of eight rows interleaved by six two-source permutes
//!   and stored as three 64-byte vectors.
//!
//! The same rows as the scalar code, bit for bit (a test in `band.rs`
//! compares them over random hashes, every tail length and the extreme
//! slot counts).

use std::arch::x86_64::*;

use super::band::Prepared;
use super::{COEFF_MULT, REHASH_MULT, SMASH, W};

/// Whether this CPU has what [`extend`] needs (cached by `std`). AVX2, FMA
/// and F16C too: rustc treats `avx512f` as implying them, and a virtual
/// CPU may mask one.
pub(super) fn available() -> bool {
    use std::arch::is_x86_feature_detected as has;
    has!("avx512f") && has!("avx512dq") && has!("avx2") && has!("fma") && has!("f16c")
}

/// Whether [`extend`] is the faster way to prepare rows on this CPU: it
/// runs here ([`available`]) and the CPU is not Intel's. Measured on one
/// machine of each kind (`examples/ribbon_build`, whole 1,000,000-key
/// builds, per-round ratios): on AMD Zen 5 the builds with these rows took
/// 0.94x-0.97x the time of those with rows prepared one key at a time, on
/// an Intel Xeon with AVX-512 (Sapphire Rapids class) 1.05x-1.07x. Intel
/// cores split the 64-bit vector multiply `vpmullq` into three uops and
/// run 512-bit multiplies on one port; Zen 5 runs it as one. Cached after
/// the first call (the vendor comes from `cpuid`, which a virtual machine
/// may trap).
pub(super) fn preferred() -> bool {
    use std::sync::atomic::{AtomicU8, Ordering};
    // 0: not asked yet, 1: no, 2: yes.
    static PREFERRED: AtomicU8 = AtomicU8::new(0);
    match PREFERRED.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let vendor = __cpuid(0);
            let intel = (vendor.ebx, vendor.edx, vendor.ecx)
                == (
                    u32::from_le_bytes(*b"Genu"),
                    u32::from_le_bytes(*b"ineI"),
                    u32::from_le_bytes(*b"ntel"),
                );
            let preferred = available() && !intel;
            PREFERRED.store(1 + u8::from(preferred), Ordering::Relaxed);
            preferred
        }
    }
}

/// Appends the rows of the longest prefix of `key_hashes` whose length is a
/// multiple of 8 to `rows` (the rows `Band::prepare` computes one at a time
/// for a band of `slots` slots whose cells are at address `cells`, seed
/// mask `mask`), and returns that length. The caller appends the rest.
///
/// # Safety
///
/// The CPU supports AVX-512 F and DQ (and AVX2, FMA and F16C: see
/// [`available`]). Memory safety does not depend on `slots` or `cells`
/// (they only enter the values written), but the rows are only what the
/// lanes expect for `slots` in `64..=65535`.
#[target_feature(enable = "avx512f,avx512dq")]
pub(super) unsafe fn extend(
    rows: &mut Vec<Prepared>,
    key_hashes: &[u64],
    mask: u64,
    slots: usize,
    cells: usize,
) -> usize {
    debug_assert!((W..=65_535).contains(&slots));
    let chunks = key_hashes.chunks_exact(8);
    let done = key_hashes.len() - chunks.remainder().len();
    rows.reserve(done);
    let splat = |v: u64| _mm512_set1_epi64(v as i64);
    let seed = splat(mask);
    let rehash_mult = splat(REHASH_MULT);
    let coeff_mult = splat(COEFF_MULT);
    let coeff_high = splat(COEFF_MULT >> 32);
    let low32 = splat(u32::MAX as u64);
    let one = splat(1);
    let n = splat(slots as u64);
    let smash = splat(SMASH);
    let zero = _mm512_setzero_si512();
    let max_start = splat((slots - W) as u64);
    let base = splat(cells as u64);
    // Output words 0-7, 8-15 and 16-23 of eight rows (c, s, r per row),
    // as indices into (c, s) (0-7: c, 8-15: s), then r merged in.
    let idx = |v: [i64; 8]| _mm512_setr_epi64(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
    let cs = [
        idx([0, 8, 0, 1, 9, 0, 2, 10]),
        idx([0, 3, 11, 0, 4, 12, 0, 5]),
        idx([13, 0, 6, 14, 0, 7, 15, 0]),
    ];
    let r = [
        idx([0, 0, 0, 0, 0, 1, 0, 0]),
        idx([2, 0, 0, 3, 0, 0, 4, 0]),
        idx([0, 5, 0, 0, 6, 0, 0, 7]),
    ];
    // The lanes that take r: bits of the positions above.
    let r_lanes: [__mmask8; 3] = [0b0010_0100, 0b0100_1001, 0b1001_0010];
    let out = rows.as_mut_ptr().wrapping_add(rows.len()).cast::<__m512i>();
    for (i, chunk) in chunks.enumerate() {
        // SAFETY: `chunk` is 8 `u64`s: 64 readable bytes.
        let h = unsafe { _mm512_loadu_si512(chunk.as_ptr().cast()) };
        let g = _mm512_mullo_epi64(_mm512_xor_si512(h, seed), rehash_mult);
        let gh = _mm512_srli_epi64::<32>(g);
        // Coefficients: `(g * COEFF_MULT)` low word XOR high word, | 1.
        let ll = _mm512_mul_epu32(g, coeff_mult);
        let lh = _mm512_mul_epu32(g, coeff_high);
        let hl = _mm512_mul_epu32(gh, coeff_mult);
        let hh = _mm512_mul_epu32(gh, coeff_high);
        let mid = _mm512_add_epi64(
            _mm512_add_epi64(_mm512_srli_epi64::<32>(ll), _mm512_and_si512(lh, low32)),
            _mm512_and_si512(hl, low32),
        );
        let high = _mm512_add_epi64(
            _mm512_add_epi64(hh, _mm512_srli_epi64::<32>(mid)),
            _mm512_add_epi64(_mm512_srli_epi64::<32>(lh), _mm512_srli_epi64::<32>(hl)),
        );
        let low = _mm512_mullo_epi64(g, coeff_mult);
        let coeff = _mm512_or_si512(_mm512_xor_si512(low, high), one);
        // Start: `fastrange64(g, slots)`, smashed and clamped.
        let u = _mm512_srli_epi64::<32>(_mm512_add_epi64(
            _mm512_mul_epu32(gh, n),
            _mm512_srli_epi64::<32>(_mm512_mul_epu32(g, n)),
        ));
        let start = _mm512_min_epi64(
            _mm512_max_epi64(_mm512_sub_epi64(u, smash), zero),
            max_start,
        );
        let slot = _mm512_add_epi64(base, _mm512_slli_epi64::<3>(start));
        let result = _mm512_and_si512(g, low32);
        for k in 0..3 {
            let words = _mm512_mask_permutexvar_epi64(
                _mm512_permutex2var_epi64(coeff, cs[k], slot),
                r_lanes[k],
                r[k],
                result,
            );
            // SAFETY: `rows` has room for `done` more rows (reserved
            // above): chunk `i < done / 8` writes rows `len + 8i ..
            // len + 8i + 8`, 192 bytes, vector `3i + k` of them.
            // `Prepared` is `repr(C)`, three 8-byte words with no padding,
            // and every bit pattern is a valid one.
            unsafe { _mm512_storeu_si512(out.wrapping_add(3 * i + k).cast(), words) };
        }
    }
    // SAFETY: the loop initialized the `done` rows after the old length,
    // within the reserved capacity.
    unsafe { rows.set_len(rows.len() + done) };
    done
}
