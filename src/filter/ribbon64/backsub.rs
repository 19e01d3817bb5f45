//! Back substitution of a banded format 0x06 shard, straight into its
//! region's bytes.
//!
//! Slots are solved from the last to the first. For every result column
//! `c` the solver keeps `state[c]`, the solution bits of the 64 slots
//! `j..j + 64` (bit `k` = slot `j + k`; slots past the shard are 0). Moving
//! from slot `j + 1` to slot `j` shifts every state left by one (slot
//! `j + 64` leaves the window; a row at `j` reaches at most slot `j + 63`)
//! and sets bit 0 to
//!
//! ```text
//! S_c[j] = result_c[j] XOR parity(coeff[j] & state_c)     (state shifted)
//! ```
//!
//! An empty slot (coefficients and result 0) gets 0. Bit 0 of the shifted
//! state is 0 when the parity is taken, so the row's pivot adds nothing.
//!
//! The shard's local slot `j` is region slot `off + j`, and shards are not
//! block-aligned: the first and last block of a shard may hold slots of
//! its neighbours. So the solved bits are ORed into the zeroed region,
//! never stored over a whole word: at each region slot `g = off + j` that
//! starts a block, and at the shard's first slot, `state_c << (g % 64)`
//! is ORed into word `(g / 64, c)`. The state's bits past the shard's last
//! slot are 0, and the shift drops those past the block, which the
//! previous emit (at the next block's first slot) wrote.
//!
//! Two solvers give the same bytes (tested): scalar (POPCNT when the CPU
//! has it, else the portable parity) and AVX-512 F + VPOPCNTDQ, which
//! keeps eight columns' states in a zmm register and solves two slots at a
//! time with one AND, `vpopcntq` and three `vpternlogq` on the chain from
//! pair to pair.

use super::{BLOCK_SLOTS, MAX_COLUMNS, WORD_BYTES};
use crate::filter::ribbon::{has_popcnt, parity_mul, parity_popcnt, SolvePath};

/// Most columns, as an array length.
const COLUMNS: usize = MAX_COLUMNS as usize;

/// ORs the states (one per column, `states.len()` columns) of the slots
/// from region slot `g` on into the words of `g`'s block in `region`.
#[inline]
fn emit(region: &mut [u8], g: usize, states: &[u64]) {
    let (block, shift) = (g / BLOCK_SLOTS, g % BLOCK_SLOTS);
    let columns = states.len();
    for (c, &state) in states.iter().enumerate() {
        let at = (block * columns + c) * WORD_BYTES;
        let bytes = &mut region[at..at + WORD_BYTES];
        let word = u64::from_le_bytes(bytes.try_into().expect("8 bytes")) | (state << shift);
        bytes.copy_from_slice(&word.to_le_bytes());
    }
}

/// Back-substitutes a banded shard: `coeffs` and `results` (one per slot,
/// the same length), its first slot at region slot `offset`, `columns`
/// (`1..=32`) result columns, into `region`, the bytes of its region
/// (blocks of `columns` words), zero where the shard's slots are. `path`
/// picks the solver (all write the same bytes).
///
/// Panics if `region` is too short for the shard's blocks (a caller bug).
pub(crate) fn solve(
    coeffs: &[u64],
    results: &[u64],
    offset: usize,
    columns: usize,
    region: &mut [u8],
    path: SolvePath,
) {
    assert!(coeffs.len() == results.len() && (1..=COLUMNS).contains(&columns));
    #[cfg(target_arch = "x86_64")]
    if path == SolvePath::Fastest && has_avx512() {
        // SAFETY: `has_avx512` just confirmed AVX-512 F and VPOPCNTDQ, the
        // features `solve_avx512` enables, and AVX2, FMA and F16C, which
        // rustc treats `avx512f` as implying.
        return unsafe { solve_avx512(coeffs, results, offset, columns, region) };
    }
    #[cfg(target_arch = "x86_64")]
    if path != SolvePath::Portable && has_popcnt() {
        // SAFETY: `solve_popcnt` only enables `popcnt`, which `has_popcnt`
        // just confirmed.
        return unsafe { solve_popcnt(coeffs, results, offset, columns, region) };
    }
    solve_scalar(coeffs, results, offset, columns, region, parity_mul);
}

/// Whether this CPU has what [`solve_avx512`] needs (cached by `std`).
#[cfg(target_arch = "x86_64")]
fn has_avx512() -> bool {
    use std::arch::is_x86_feature_detected as has;
    has!("avx512f") && has!("avx2") && has!("fma") && has!("f16c") && has!("avx512vpopcntdq")
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
fn solve_popcnt(coeffs: &[u64], results: &[u64], offset: usize, columns: usize, region: &mut [u8]) {
    solve_scalar(coeffs, results, offset, columns, region, parity_popcnt)
}

/// The scalar solver; `parity` is the parity of a `u64`.
#[inline(always)]
fn solve_scalar(
    coeffs: &[u64],
    results: &[u64],
    offset: usize,
    columns: usize,
    region: &mut [u8],
    parity: impl Fn(u64) -> u32,
) {
    // Up to 8 columns (every filter of 1 in 256 false positives or more):
    // one loop per column count, so the states stay in registers and the
    // column loop is unrolled (the POPCNT solver's share of a 1,000,000-key
    // build fell from 12.5% to 7.0% of the cycles on AMD Zen 3, about 1.8x
    // fewer cycles: docs/filters.md).
    match columns {
        1 => return solve_fixed::<1>(coeffs, results, offset, region, parity),
        2 => return solve_fixed::<2>(coeffs, results, offset, region, parity),
        3 => return solve_fixed::<3>(coeffs, results, offset, region, parity),
        4 => return solve_fixed::<4>(coeffs, results, offset, region, parity),
        5 => return solve_fixed::<5>(coeffs, results, offset, region, parity),
        6 => return solve_fixed::<6>(coeffs, results, offset, region, parity),
        7 => return solve_fixed::<7>(coeffs, results, offset, region, parity),
        8 => return solve_fixed::<8>(coeffs, results, offset, region, parity),
        _ => {}
    }
    solve_general(coeffs, results, offset, columns, region, parity)
}

/// [`solve_scalar`] for any column count (`1..=32`), the states in a slice:
/// what it runs for more than 8 columns.
#[inline(always)]
fn solve_general(
    coeffs: &[u64],
    results: &[u64],
    offset: usize,
    columns: usize,
    region: &mut [u8],
    parity: impl Fn(u64) -> u32,
) {
    let mut states = [0u64; COLUMNS];
    let states = &mut states[..columns];
    for (j, (&coeff, &result)) in coeffs.iter().zip(results).enumerate().rev() {
        for (c, state) in states.iter_mut().enumerate() {
            let shifted = *state << 1;
            *state = shifted | ((parity(coeff & shifted) ^ (result >> c) as u32) & 1) as u64;
        }
        let g = offset + j;
        if g.is_multiple_of(BLOCK_SLOTS) || j == 0 {
            emit(region, g, states);
        }
    }
}

/// [`solve_scalar`] for `C` columns.
#[inline(always)]
fn solve_fixed<const C: usize>(
    coeffs: &[u64],
    results: &[u64],
    offset: usize,
    region: &mut [u8],
    parity: impl Fn(u64) -> u32,
) {
    let mut states = [0u64; C];
    for (j, (&coeff, &result)) in coeffs.iter().zip(results).enumerate().rev() {
        for (c, state) in states.iter_mut().enumerate() {
            let shifted = *state << 1;
            *state = shifted | ((parity(coeff & shifted) ^ (result >> c) as u32) & 1) as u64;
        }
        let g = offset + j;
        if g.is_multiple_of(BLOCK_SLOTS) || j == 0 {
            emit(region, g, &states);
        }
    }
}

/// The AVX-512 solver; same contract and bytes as [`solve_scalar`].
///
/// # Safety
///
/// The CPU must support AVX-512 F and VPOPCNTDQ.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vpopcntdq")]
unsafe fn solve_avx512(
    coeffs: &[u64],
    results: &[u64],
    offset: usize,
    columns: usize,
    region: &mut [u8],
) {
    // One monomorphised loop per register count, so the states stay in
    // registers.
    match columns.div_ceil(8) {
        0 | 1 => avx512::solve::<1>(coeffs, results, offset, columns, region),
        2 => avx512::solve::<2>(coeffs, results, offset, columns, region),
        3 => avx512::solve::<3>(coeffs, results, offset, columns, region),
        _ => avx512::solve::<4>(coeffs, results, offset, columns, region),
    }
}

/// `unsafe` here only because `#[target_feature]` functions and the
/// intrinsics need it; every load and store is of a local array.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{emit, BLOCK_SLOTS, COLUMNS};
    use std::arch::x86_64::*;

    /// `vpternlogq` truth table of `a ^ (b & c)`.
    const XOR_AND: i32 = 0x78;

    /// `G` registers: columns `8g..8g + 8` in register `g`. Lanes past
    /// `columns` are solved too, from whatever result bits the rows carry
    /// there; lanes never affect each other, and only the first `columns`
    /// states are emitted.
    ///
    /// Slots go two at a time (see [`solve_pair`]) where they can: the
    /// pairs are aligned so that their lower slot is even in the region,
    /// as every block's first slot is, so each emit falls after a whole
    /// pair. The shard's last slot goes alone first when it would be a
    /// pair's lower slot, and its first slot alone last when it would be
    /// a pair's upper one.
    #[inline]
    #[target_feature(enable = "avx512f,avx512vpopcntdq")]
    pub(super) fn solve<const G: usize>(
        coeffs: &[u64],
        results: &[u64],
        offset: usize,
        columns: usize,
        region: &mut [u8],
    ) {
        let mut states = [_mm512_setzero_si512(); G];
        let mut words = [0u64; COLUMNS];
        let mut emit_at = |j: usize, states: &[__m512i; G]| {
            let g = offset + j;
            if g.is_multiple_of(BLOCK_SLOTS) || j == 0 {
                for (i, state) in states.iter().enumerate() {
                    // SAFETY: `8i + 8 <= 8G <= 32 = COLUMNS`: 64 bytes
                    // inside the local array; an unaligned store.
                    unsafe { _mm512_storeu_si512(words.as_mut_ptr().add(8 * i).cast(), *state) };
                }
                emit(region, g, &words[..columns]);
            }
        };
        let n = coeffs.len().min(results.len());
        // Slots `0..end` are left to solve.
        let mut end = n;
        if end > 0 && (offset + end - 1).is_multiple_of(2) {
            end -= 1;
            solve_one(&mut states, coeffs[end], results[end]);
            emit_at(end, &states);
        }
        while end >= 2 {
            // The next slot down that emits: the first slot of the block
            // holding slot `end - 1`, or the shard's first slot if that
            // block starts before the shard. `offset + end` is even here
            // (the shard's last slot went alone above when it was not), so
            // the pairs from `end` reach it exactly, or stop one above
            // slot 0 (then solved alone below) when `offset` is odd.
            let block_first = (offset + end - 1) / BLOCK_SLOTS * BLOCK_SLOTS;
            let stop = block_first.saturating_sub(offset);
            // The pairs in between, with no emit check and no bounds check
            // per pair (`chunks_exact` over the run): measured faster than
            // a check after every pair, which the compiler padded with the
            // emit's address arithmetic (docs/filters.md, "Thirtieth
            // session").
            let first = stop + (end - stop) % 2;
            for (c, r) in coeffs[first..end]
                .chunks_exact(2)
                .zip(results[first..end].chunks_exact(2))
                .rev()
            {
                solve_pair(&mut states, [c[1], c[0]], [r[1], r[0]]);
            }
            end = first;
            if end == stop {
                emit_at(stop, &states);
            }
        }
        if end == 1 {
            solve_one(&mut states, coeffs[0], results[0]);
            emit_at(0, &states);
        }
    }

    /// Solves one slot: its row `coeff`, `result` against the states of
    /// the slots after it, and shifts it into the states.
    #[inline]
    #[target_feature(enable = "avx512f,avx512vpopcntdq")]
    fn solve_one<const G: usize>(states: &mut [__m512i; G], coeff: u64, result: u64) {
        let one = _mm512_set1_epi64(1);
        // `popcount(shifted & coeff)` is `popcount(state & coeff >> 1)`
        // (the state's top bit leaves the window; the pivot bit meets the
        // shifted-in 0): the AND need not wait for the shift.
        let c = _mm512_set1_epi64((coeff >> 1) as i64);
        for (g, state) in states.iter_mut().enumerate() {
            // The slot's result bits as lanes of 0 or 1, put into the free
            // bit 0 of the shifted state: off the chain from one slot to
            // the next, which is AND, VPOPCNTQ and one `vpternlogq` (`base
            // ^ (count & 1)`), two cycles shorter than shifting first and
            // adding the result after.
            let result_lanes = _mm512_maskz_mov_epi64((result >> (8 * g)) as u8, one);
            let base = _mm512_or_si512(_mm512_slli_epi64::<1>(*state), result_lanes);
            let count = _mm512_popcnt_epi64(_mm512_and_si512(*state, c));
            *state = _mm512_ternarylogic_epi64::<XOR_AND>(base, count, one);
        }
    }

    /// Solves slots `a = b + 1` and then `b` (rows `coeffs = [a's, b's]`,
    /// `results` likewise) with one population count on the chain instead
    /// of two. With `S` the states before `a` (bit `k`: slot `a + 1 + k`):
    ///
    /// ```text
    /// S_a = r_a ^ parity(c_a >> 1 & S)
    /// S_b = r_b ^ parity(c_b >> 1 & (S << 1 | S_a))
    ///     = r_b ^ parity(c_b >> 2 & S) ^ (bit 1 of c_b) & S_a
    /// ```
    ///
    /// so both parities come from `S` at once, and the new states are `S
    /// << 2 | S_a << 1 | S_b`, with the result bits (and `r_a` into `S_b`
    /// when bit 1 of `c_b` is set) put in off the chain.
    #[inline]
    #[target_feature(enable = "avx512f,avx512vpopcntdq")]
    fn solve_pair<const G: usize>(states: &mut [__m512i; G], coeffs: [u64; 2], results: [u64; 2]) {
        let one = _mm512_set1_epi64(1);
        let two = _mm512_set1_epi64(2);
        let [ca, cb] = coeffs;
        let b_sees_a = (cb >> 1) & 1;
        let [ra, rb] = [
            results[0],
            results[1] ^ (results[0] & b_sees_a.wrapping_neg()),
        ];
        let ca1 = _mm512_set1_epi64((ca >> 1) as i64);
        let cb2 = _mm512_set1_epi64((cb >> 2) as i64);
        let a_into_b = _mm512_set1_epi64(b_sees_a as i64);
        for (g, state) in states.iter_mut().enumerate() {
            let results = _mm512_or_si512(
                _mm512_maskz_mov_epi64((ra >> (8 * g)) as u8, two),
                _mm512_maskz_mov_epi64((rb >> (8 * g)) as u8, one),
            );
            let base = _mm512_or_si512(_mm512_slli_epi64::<2>(*state), results);
            let count_a = _mm512_popcnt_epi64(_mm512_and_si512(*state, ca1));
            let count_b = _mm512_popcnt_epi64(_mm512_and_si512(*state, cb2));
            // Bit 0: b's parity, plus a's where b's row reaches slot a.
            let low = _mm512_ternarylogic_epi64::<XOR_AND>(count_b, count_a, a_into_b);
            let high =
                _mm512_ternarylogic_epi64::<XOR_AND>(base, _mm512_slli_epi64::<1>(count_a), two);
            *state = _mm512_ternarylogic_epi64::<XOR_AND>(high, low, one);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::band::Band;
    use super::super::tests::hashes;
    use super::super::{region_blocks, row, seed_mask};
    use super::*;

    /// Shards of these sizes (keys, slots), one after another in one region
    /// starting at slot `first`, each banded with its first solvable seed.
    fn banded(first: usize, sizes: &[(u64, usize)]) -> Vec<(Vec<u64>, Band, usize, u8)> {
        let mut offset = first;
        let mut out = Vec::new();
        for (i, &(keys, slots)) in sizes.iter().enumerate() {
            let keys = hashes(keys, i as u64);
            let mut band = Band::default();
            let seed = (0..=255u8)
                .find(|&seed| {
                    band.prepare(&keys, slots, seed_mask(seed));
                    band.add_from(0)
                })
                .expect("a solvable seed");
            out.push((keys, band, offset, seed));
            offset += slots;
        }
        out
    }

    /// Column `c` of the 64-slot window from region slot `g`.
    fn window(region: &[u8], columns: usize, g: usize, c: usize) -> u64 {
        let word = |b: usize| {
            let at = (b * columns + c) * WORD_BYTES;
            u64::from_le_bytes(region[at..at + WORD_BYTES].try_into().unwrap())
        };
        let (b, s) = (g / 64, g % 64);
        if s == 0 {
            word(b)
        } else {
            (word(b) >> s) | (word(b + 1) << (64 - s))
        }
    }

    #[test]
    fn every_solver_writes_the_same_bytes_and_they_solve_every_row() {
        // Shards not aligned to blocks, sharing boundary blocks; the
        // smallest shard sizes; a region that starts mid-block.
        let sizes = [
            (60u64, 64usize),
            (500, 530),
            (1, 64),
            (0, 70),
            (900, 960),
            (64, 80),
            (100, 131),
            (50, 65),
            (120, 127),
        ];
        for first in [0usize, 37] {
            let shards = banded(first, &sizes);
            let total = first + sizes.iter().map(|s| s.1).sum::<usize>();
            for columns in 1..=COLUMNS {
                let len = region_blocks(total as u64) as usize * columns * WORD_BYTES;
                let mut outputs = Vec::new();
                for path in [SolvePath::Fastest, SolvePath::Scalar, SolvePath::Portable] {
                    let mut region = vec![0u8; len];
                    for (_, band, offset, _) in &shards {
                        solve(
                            band.coeffs(),
                            band.results(),
                            *offset,
                            columns,
                            &mut region,
                            path,
                        );
                    }
                    outputs.push(region);
                }
                assert!(
                    outputs[0] == outputs[1],
                    "{columns} columns: fastest vs scalar"
                );
                assert!(
                    outputs[1] == outputs[2],
                    "{columns} columns: scalar vs portable"
                );
                // The general loop, which the scalar paths skip for up to
                // 8 columns (`solve_fixed`), writes the same bytes too.
                let mut general = vec![0u8; len];
                for (_, band, offset, _) in &shards {
                    solve_general(
                        band.coeffs(),
                        band.results(),
                        *offset,
                        columns,
                        &mut general,
                        parity_mul,
                    );
                }
                assert!(outputs[2] == general, "{columns} columns: general loop");
                let region = &outputs[0];
                // Every key's equations hold, read the way a query reads.
                for (keys, band, offset, seed) in &shards {
                    let slots = band.coeffs().len() as u64;
                    for &h in keys {
                        let r = row(h, seed_mask(*seed), slots);
                        for c in 0..columns {
                            let w = window(region, columns, offset + r.start, c);
                            assert_eq!(
                                (w & r.coeff).count_ones() & 1,
                                (r.result >> c) & 1,
                                "{columns} columns, column {c}"
                            );
                        }
                    }
                }
                // Bits before the region's first shard and past its last
                // slot are 0.
                for c in 0..columns {
                    let w = window(region, columns, 0, c);
                    assert_eq!(w & ((1u64 << first) - 1), 0, "before the first shard");
                    let tail = region_blocks(total as u64) as usize - 1;
                    let at = (tail * columns + c) * WORD_BYTES;
                    let w = u64::from_le_bytes(region[at..at + 8].try_into().unwrap());
                    assert_eq!(w >> (total % 64), 0, "past the region's last slot");
                }
            }
        }
    }
}
