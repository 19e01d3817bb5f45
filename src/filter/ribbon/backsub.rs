//! Back substitution: the solution of a banded Ribbon system, one 64-slot
//! block at a time, from the last slot to the first.
//!
//! For every result column `j` the solver keeps `state[j]`, the solution
//! bits of the 128 slots `i..i + 128` (bit `k` = slot `i + k`) as it walks
//! `i` down. Moving from slot `i + 1` to slot `i` shifts every state left by
//! one (slot `i + 128` leaves the window, which no row reaches) and sets bit
//! 0 to the slot's solution bit:
//!
//! ```text
//! S_j[i] = result_j[i] XOR parity(coeff[i] & state_j)     (state already shifted)
//! ```
//!
//! A slot without a row (coefficients and result zero) gets 0. Bit 0 of the
//! shifted state is still 0 when the parity is taken, so the row's own
//! pivot bit adds nothing. Each time `i` reaches a multiple of 64 the low
//! halves of the states are the finished solution words of that 64-slot
//! block, and the caller lays them out ([`Solution::emit`]).
//!
//! Two implementations give the same words (tested):
//!
//! * scalar: one `u128` state per column, a POPCNT (or portable) parity
//!   per column and slot;
//! * AVX-512 (F, VBMI2, VPOPCNTDQ): the states of eight columns in two zmm
//!   registers (low and high 64-bit halves), so one slot costs a funnel
//!   shift (`vpshldq`), a shift, an AND, a `vpternlogq`, a `vpopcntq`, a
//!   second `vpternlogq` (`(count & 1) ^ result`) and an OR for eight
//!   columns at once, instead of eight scalar parities. The new bits stay
//!   in the vector domain: a `vptestmq` to a mask register and a masked OR
//!   back made the slot-to-slot dependency chain about four cycles longer.
//!   Up to 32 columns take up to four register pairs.
//!
//! Measured at 1,000,000 keys, 7 columns (`perf record` of `cargo run
//! --release --example ribbon_build`, docs/filters.md): back substitution
//! went from about 15% of the Ribbon build's samples (scalar POPCNT) to
//! about 6%, and the build from 45.0-45.3 to 42.9-43.1 ns/key.

/// Receives the solved words of each 64-slot block.
pub(super) trait Solution {
    /// Block `q` (slots `64q..64q + 64`) is solved: `low[j]` is column `j`'s
    /// solution bits of those slots (bit `k` = slot `64q + k`), `high[j]`
    /// the bits of the following 64 slots (already emitted as block `q + 1`,
    /// zero past the band). Called for `q` from the last block down to 0.
    fn emit(&mut self, q: usize, low: &[u64], high: &[u64]);
}

/// Most columns the solver handles (the filter's maximum).
const MAX_COLUMNS: usize = super::MAX_COLUMNS as usize;

/// The 64-slot blocks from the last to the first, each with its slots'
/// `(coefficients, result)` from the last to the first: the order back
/// substitution visits them in.
#[inline(always)]
fn blocks_from_last<'a>(
    coeffs: &'a [u128],
    results: &'a [u32],
) -> impl Iterator<Item = (usize, impl Iterator<Item = (u128, u32)> + 'a)> + 'a {
    coeffs
        .chunks_exact(64)
        .zip(results.chunks_exact(64))
        .enumerate()
        .rev()
        .map(|(q, (c, r))| (q, c.iter().copied().zip(r.iter().copied()).rev()))
}

/// The scalar solver: `coeffs.len()` must be a multiple of 64 and equal to
/// `results.len()`, `columns` at most [`MAX_COLUMNS`]. `parity64` is the
/// parity of a `u64` (POPCNT or portable; same answers).
#[inline(always)]
pub(super) fn solve_scalar(
    coeffs: &[u128],
    results: &[u32],
    columns: usize,
    parity64: impl Fn(u64) -> u32,
    out: &mut impl Solution,
) {
    debug_assert_eq!(coeffs.len(), results.len());
    debug_assert_eq!(coeffs.len() % 64, 0);
    let mut state = [0u128; MAX_COLUMNS];
    let state = &mut state[..columns];
    let (mut low, mut high) = ([0u64; MAX_COLUMNS], [0u64; MAX_COLUMNS]);
    for (q, slots) in blocks_from_last(coeffs, results) {
        for (coeff, result) in slots {
            for (j, s) in state.iter_mut().enumerate() {
                *s <<= 1;
                *s |= ((parity64(super::fold(coeff & *s)) ^ (result >> j)) & 1) as u128;
            }
        }
        for (j, s) in state.iter().enumerate() {
            low[j] = *s as u64;
            high[j] = (*s >> 64) as u64;
        }
        out.emit(q, &low[..columns], &high[..columns]);
    }
}

/// The AVX-512 solver; same contract and words as [`solve_scalar`].
///
/// # Safety
///
/// The CPU must support AVX-512 F, VBMI2 and VPOPCNTDQ.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vbmi2,avx512vpopcntdq")]
pub(super) unsafe fn solve_avx512(
    coeffs: &[u128],
    results: &[u32],
    columns: usize,
    out: &mut impl Solution,
) {
    debug_assert!(columns <= MAX_COLUMNS);
    // One monomorphised loop per register-pair count, so the states stay in
    // registers.
    match columns.div_ceil(8) {
        0 | 1 => avx512::solve::<1>(coeffs, results, columns, out),
        2 => avx512::solve::<2>(coeffs, results, columns, out),
        3 => avx512::solve::<3>(coeffs, results, columns, out),
        _ => avx512::solve::<4>(coeffs, results, columns, out),
    }
}

/// This module has `unsafe` only because `#[target_feature]` functions need
/// it; every load and store is of a local array.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Solution, MAX_COLUMNS};
    use std::arch::x86_64::*;

    /// `vpternlogq` truth tables of `a ^ (b & c)` and `(a & b) ^ c`.
    const XOR_AND: i32 = 0x78;
    const AND_XOR: i32 = 0x6a;

    /// `G` register pairs: columns `8g..8g + 8` in pair `g`. Lanes past
    /// `columns` are solved too, from whatever result bits the rows carry
    /// there; lanes never affect each other, and only the first `columns`
    /// words are passed to `emit`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512vbmi2,avx512vpopcntdq")]
    pub(super) fn solve<const G: usize>(
        coeffs: &[u128],
        results: &[u32],
        columns: usize,
        out: &mut impl Solution,
    ) {
        let zero = _mm512_setzero_si512();
        let one = _mm512_set1_epi64(1);
        let mut low = [zero; G];
        let mut high = [zero; G];
        let mut low_words = [0u64; MAX_COLUMNS];
        let mut high_words = [0u64; MAX_COLUMNS];
        for (q, slots) in super::blocks_from_last(coeffs, results) {
            for (coeff, result) in slots {
                let c_low = _mm512_set1_epi64(coeff as i64);
                let c_high = _mm512_set1_epi64((coeff >> 64) as i64);
                for g in 0..G {
                    // The slot's result bits as lanes of 0 or 1; not on the
                    // dependency chain from one slot to the next.
                    let result_lanes = _mm512_maskz_mov_epi64((result >> (8 * g)) as u8, one);
                    // state <<= 1 over the 128-bit pair.
                    high[g] = _mm512_shldi_epi64::<1>(high[g], low[g]);
                    let shifted = _mm512_slli_epi64::<1>(low[g]);
                    // (low & c_low) ^ (high & c_high): same parity as the
                    // 128-bit AND.
                    let masked = _mm512_ternarylogic_epi64::<XOR_AND>(
                        _mm512_and_si512(shifted, c_low),
                        high[g],
                        c_high,
                    );
                    // New bit: (popcount & 1) ^ result, kept in the vector
                    // domain (a mask test and a masked OR took four more
                    // cycles per slot on this chain).
                    let bit = _mm512_ternarylogic_epi64::<AND_XOR>(
                        _mm512_popcnt_epi64(masked),
                        one,
                        result_lanes,
                    );
                    low[g] = _mm512_or_si512(shifted, bit);
                }
            }
            for g in 0..G {
                // SAFETY: `8g + 8 <= 8G <= 32 = MAX_COLUMNS`: 64 bytes inside
                // each local array; unaligned stores.
                unsafe {
                    _mm512_storeu_si512(low_words.as_mut_ptr().add(8 * g).cast(), low[g]);
                    _mm512_storeu_si512(high_words.as_mut_ptr().add(8 * g).cast(), high[g]);
                }
            }
            out.emit(q, &low_words[..columns], &high_words[..columns]);
        }
    }
}
