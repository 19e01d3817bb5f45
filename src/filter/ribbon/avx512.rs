//! The AVX-512 query (format 0x05): up to eight columns per chunk, one
//! chunk for the usual rates (8 result bits or fewer).
//!
//! A key's window starts at bit `shift = start % 64` of its start block's
//! words (`a`, one 64-bit lane per column) and runs through the next
//! block's (`b`) into the one after (`c`). Three masked 64-byte loads read
//! the key's columns of the three blocks (lanes past the last column are
//! zero and never read); two `vpshrdvq` funnel shifts by `shift` give the
//! window's low and high 64 slots of every column (`lo = (b:a) >> shift`,
//! `hi = (c:b) >> shift`; a count of 0 leaves `a` and `b`, so `c` is then
//! unused), one AND and one `vpternlogq` mask them with the broadcast
//! coefficient halves, and one `vpopcntq` and one `vptestmq` give the eight
//! columns' parities as a mask, compared with the key's result bits.
//!
//! This module has `unsafe` because `#[target_feature]` functions and the
//! vector loads need it. The loads of `check_columns` stay inside slices
//! whose length was checked first; those of `narrow_unchecked` inside the
//! solution, whose length its caller checked once (see its `# Safety`).

use super::layout::{Format, QueryPath, RibbonLayout};
use super::query::Located;
use super::{fastrange64, row_from_seeded, seeded_with_mask, BLOCK_SLOTS, WORD_BYTES};
use std::arch::x86_64::*;

/// `vpternlogq` truth table: `a ^ (b & c)`.
const XOR_AND: i32 = 0x78;

/// The lanes (columns) of `a`, `b` and `c` whose window has odd parity
/// against the coefficients: bit `i` for lane `i`.
#[inline]
#[target_feature(enable = "avx512f,avx512vbmi2,avx512vpopcntdq")]
fn odd_columns(a: __m512i, b: __m512i, c: __m512i, shift: __m512i, coeff: u128) -> u8 {
    let lo = _mm512_shrdv_epi64(a, b, shift);
    let hi = _mm512_shrdv_epi64(b, c, shift);
    let x = _mm512_ternarylogic_epi64::<XOR_AND>(
        _mm512_and_si512(lo, _mm512_set1_epi64(coeff as i64)),
        hi,
        _mm512_set1_epi64((coeff >> 64) as i64),
    );
    _mm512_test_epi64_mask(_mm512_popcnt_epi64(x), _mm512_set1_epi64(1))
}

/// Same answer as `RibbonLayout::check_columns` for format 0x05 layouts
/// of 2 to 8 upper columns (every key has 1 to 8): one chunk, and no
/// bounds checks.
///
/// # Safety
///
/// `layout` comes from `RibbonLayout::parse` of format 0x05 bytes (so
/// its shards lie one after another in the solution, which ends at
/// `table_start`, it has `num_shards` of them, and each has at least
/// 128 slots) with at most 8 upper columns and `layout.table_start <=
/// u32::MAX` (so that `ShardQuery::bases` are exact; all hold when
/// `QueryPath::avx512` picked this path for such a layout), `solution`
/// points to at least `layout.table_start` readable bytes, and to `8 *
/// upper_columns` more if `TAIL_READABLE`, and the CPU supports AVX-512
/// F, VL, VBMI2, VPOPCNTDQ and BMI2.
#[inline]
#[target_feature(enable = "avx512f,avx512vl,avx512vbmi2,avx512vpopcntdq,bmi2")]
pub(super) unsafe fn narrow_unchecked<const TAIL_READABLE: bool>(
    layout: &RibbonLayout,
    solution: *const u8,
    key_hash: u64,
) -> bool {
    debug_assert_eq!(layout.format, Format::V5);
    debug_assert_eq!(
        QueryPath::avx512(layout.upper_columns, layout.table_start),
        QueryPath::Avx512Narrow
    );
    let index = fastrange64(key_hash, layout.num_shards as u64) as usize;
    debug_assert!(index < layout.shards.len());
    // SAFETY: `fastrange64(h, n) < n` for `n >= 1`, and `parse` made one
    // entry per shard (`shards.len() == num_shards >= 1`).
    let shard = unsafe { layout.shards.get_unchecked(index) };
    let row = row_from_seeded(
        seeded_with_mask(key_hash, shard.seed_mask),
        shard.num_starts,
    );
    let block = row.start / BLOCK_SLOTS;
    // `block < 2^58`, so the comparisons are exact.
    let past_last_lower = block as i64 - shard.last_lower_block;
    let upper = usize::from(past_last_lower > 0);
    let stride = shard.strides[upper];
    let lanes = shard.lanes[upper];
    // The key's result bits: one per column it checks.
    let expected = row.result as u8 & lanes;
    // Modulo 2^32, exact for solutions below 4 GiB (this path's
    // condition, see `ShardQuery::bases`).
    let here = shard.bases[upper].wrapping_add((block as u32).wrapping_mul(stride));
    let (here, stride) = (here as usize, stride as usize);
    // The next block follows the start block. The one after follows the
    // next block, which stores one column more than the start block
    // when it is the first upper block. With a block-aligned start the
    // window ends with the next block, which may be the shard's last,
    // and the block after is unused (the shift is 0): it is then read
    // anyway if that is harmless (`TAIL_READABLE`), else the next block
    // is read again.
    let next = here + stride;
    let edge = usize::from(past_last_lower == 0) * WORD_BYTES;
    let last = if !TAIL_READABLE && row.start.is_multiple_of(BLOCK_SLOTS) {
        next
    } else {
        next + stride + edge
    };
    let load = |at: usize| {
        // SAFETY: `start < num_starts = 64 * num_blocks - 127`, so the
        // start block and the next are blocks of the shard, and unless
        // the start is block-aligned so is the one after. `upper` is
        // the start block's kind, so `here` is its first byte (`parse`
        // set `bases` so, exact below 4 GiB: this path's condition) and
        // `stride` its `columns * 8` bytes; the next block starts right
        // after it, and the one after right after the next, which has
        // `stride` bytes or (`edge`, when it is the first upper block)
        // one word more. The `columns` words read at each of `here`,
        // `next` and `last` are therefore words of the shard (the later
        // blocks have at least `columns` columns), which `parse`
        // checked lie below `table_start`, within `solution`'s readable
        // bytes (the caller's contract) -- except `last` for a
        // block-aligned start in the shard's last possible block, which
        // is then `next` (`!TAIL_READABLE`), or the shard's end, where
        // the next shard starts or, for the last shard, at least `8 *
        // upper_columns` readable bytes follow (`TAIL_READABLE`, the
        // caller's contract). `lanes` selects exactly `columns` lanes
        // (`column_lanes`, `columns <= 8`); masked-off lanes are not
        // accessed.
        unsafe { _mm512_maskz_loadu_epi64(lanes, solution.add(at).cast::<i64>()) }
    };
    let shift = _mm512_set1_epi64(row.start as i64);
    // Lanes past the key's columns are zero: even.
    let odd = odd_columns(load(here), load(next), load(last), shift, row.coeff);
    odd == expected
}

/// Same answer as `RibbonLayout::check_columns`, for any column count:
/// chunks of eight columns.
#[inline]
#[target_feature(enable = "avx512f,avx512vl,avx512vbmi2,avx512vpopcntdq,bmi2")]
pub(super) fn check_columns(bytes: &[u8], key: &Located) -> bool {
    let Some(words) = key.words(bytes) else {
        return true;
    };
    let shift = _mm512_set1_epi64(key.shift as i64);
    let mut first = 0;
    while first < key.columns {
        let n = (key.columns - first).min(8);
        let lanes = _bzhi_u32(0xff, n as u32) as u8;
        let load = |block: usize| {
            // SAFETY: `block` is 0, `next` or `last`, and `first + n <=
            // columns`, so the `n` words from word `first` of that block
            // end at most at `last + columns * 8 == words.len()` (`next
            // <= last`, `Located::words`): bytes of `words`. `lanes`
            // selects exactly those `n` lanes, and masked-off lanes are
            // not accessed.
            unsafe {
                _mm512_maskz_loadu_epi64(
                    lanes,
                    words
                        .as_ptr()
                        .wrapping_add(block + first * WORD_BYTES)
                        .cast::<i64>(),
                )
            }
        };
        let odd = odd_columns(load(0), load(key.next), load(key.last), shift, key.coeff);
        if (odd ^ (key.result >> first) as u8) & lanes != 0 {
            return false;
        }
        first += 8;
    }
    true
}
