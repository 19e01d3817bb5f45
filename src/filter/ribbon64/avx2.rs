//! The AVX2 query of format 0x06: four columns per chunk, for CPUs without
//! the AVX-512 features of [`avx512`](super::avx512).
//!
//! The key's coefficients are split once into two 64-bit masks, of its
//! start block's words and the next block's
//! ([`Located64::masks`](super::layout::Located64::masks)). A chunk is one
//! masked 32-byte load per block (four columns; lanes past the last column
//! are zero and never read), two ANDs and one XOR, six shift-XORs that
//! bring each lane's parity to its bit 63 (AVX2 has no vector population
//! count), and one `vmovmskpd` of those bits, compared with the key's
//! result bits.
//!
//! This module has `unsafe` because `#[target_feature]` functions and the
//! vector loads need it; the loads stay inside a slice whose length was
//! checked first.

use super::layout::Located64;
use super::WORD_BYTES;
use std::arch::x86_64::*;

/// `vpmaskmovq` masks selecting the first `n` of four lanes.
static LANES: [[i64; 4]; 5] = [
    [0, 0, 0, 0],
    [-1, 0, 0, 0],
    [-1, -1, 0, 0],
    [-1, -1, -1, 0],
    [-1, -1, -1, -1],
];

/// Same answer as `Ribbon64Table::may_contain_reference`, reads inside
/// `bytes` (a key whose blocks are not all inside answers `true`).
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn check_columns(bytes: &[u8], key: &Located64) -> bool {
    let Some(words) = key.words(bytes) else {
        return true;
    };
    let [m0, m1] = key.masks().map(|m| _mm256_set1_epi64x(m as i64));
    let mut first = 0;
    while first < key.columns {
        let n = (key.columns - first).min(4);
        // SAFETY: `LANES[n]` is 32 readable bytes; the load is unaligned.
        let lanes = unsafe { _mm256_loadu_si256(LANES[n].as_ptr().cast::<__m256i>()) };
        let load = |block: usize| {
            // SAFETY: `block` is 0 or `stride`, and `first + n <= columns`,
            // so the `n` words from word `first` of that block end at most
            // at `stride + columns * 8 == words.len()`
            // (`Located64::words`): bytes of `words`. `lanes` selects
            // exactly those `n` lanes, and masked-off lanes are not
            // accessed.
            unsafe {
                _mm256_maskload_epi64(
                    words
                        .as_ptr()
                        .wrapping_add(block + first * WORD_BYTES)
                        .cast::<i64>(),
                    lanes,
                )
            }
        };
        let mut x = _mm256_xor_si256(
            _mm256_and_si256(load(0), m0),
            _mm256_and_si256(load(key.stride), m1),
        );
        x = _mm256_xor_si256(x, _mm256_slli_epi64::<32>(x));
        x = _mm256_xor_si256(x, _mm256_slli_epi64::<16>(x));
        x = _mm256_xor_si256(x, _mm256_slli_epi64::<8>(x));
        x = _mm256_xor_si256(x, _mm256_slli_epi64::<4>(x));
        x = _mm256_xor_si256(x, _mm256_slli_epi64::<2>(x));
        x = _mm256_xor_si256(x, _mm256_slli_epi64::<1>(x));
        let odd = _mm256_movemask_pd(_mm256_castsi256_pd(x)) as u32;
        if odd != (key.result >> first) & ((1 << n) - 1) {
            return false;
        }
        first += 4;
    }
    true
}
