//! The AVX-512 query of format 0x06: one 64-bit lane per result column.
//!
//! A key's 64-slot window starts at bit `slot % 64` of its start block's
//! words (`a`) and runs into the next block's (`b`). Two masked loads read
//! the key's columns of both blocks (lanes past its last column are zero
//! and never read), one `vpshrdvq` funnel shift by the slot gives every
//! column's window (`(b:a) >> (slot % 64)`: the instruction takes the count
//! modulo 64, so the slot needs no masking, and a count of 0 leaves `a`),
//! one AND with the broadcast coefficients, one `vpopcntq` and one
//! `vptestmq` give the columns' parities as a mask, compared with the key's
//! result bits.
//!
//! This module has `unsafe` because `#[target_feature]` functions and the
//! vector loads need it. The loads of `check_columns` stay inside a slice
//! whose length was checked first; those of `narrow_unchecked` inside the
//! solution, whose length its caller checked once (see its `# Safety`).

use super::layout::{Located64, Ribbon64Layout};
use super::WORD_BYTES;
use std::arch::x86_64::*;

/// The lanes (columns) whose window `(b:a) >> (slot % 64)` has odd parity
/// against `coeff`: bit `c` for lane `c`.
#[inline]
#[target_feature(enable = "avx512f,avx512vbmi2,avx512vpopcntdq")]
fn odd_columns(a: __m512i, b: __m512i, slot: u64, coeff: u64) -> u8 {
    let window = _mm512_shrdv_epi64(a, b, _mm512_set1_epi64(slot as i64));
    let x = _mm512_and_si512(window, _mm512_set1_epi64(coeff as i64));
    _mm512_test_epi64_mask(_mm512_popcnt_epi64(x), _mm512_set1_epi64(1))
}

/// Same answer as `Ribbon64Table::may_contain_reference` for layouts of at
/// most 8 upper columns (every shard has 1 to 8): one chunk, no loop and
/// no bounds checks. `BY_SHIFT`: the key's shard is `key_hash >>
/// layout.shard_shift` (the same shard as `fastrange64`, for layouts
/// whose shard count is a power of two), else `fastrange64`.
///
/// # Safety
///
/// `layout` comes from `Ribbon64Layout::parse` (through `from_table`,
/// possibly moved to another path by `on_path`) with at most 8 upper
/// columns and at most `NARROW_MAX_SLOTS` slots (the conditions of
/// `Path64::avx512`), `solution` points to at least `layout.table_start` readable
/// bytes that hold the solution of the bytes it was parsed from (only their
/// length matters for safety), the CPU supports AVX-512 F, VL, VBMI2,
/// VPOPCNTDQ and BMI2, and if `BY_SHIFT`, `layout.shard_shift != 0`.
#[inline]
#[target_feature(enable = "avx512f,avx512vl,avx512vbmi2,avx512vpopcntdq,bmi2")]
pub(super) unsafe fn narrow_unchecked<const BY_SHIFT: bool>(
    layout: &Ribbon64Layout,
    solution: *const u8,
    key_hash: u64,
) -> bool {
    // SAFETY: the caller's contract is `narrow_key`'s.
    let key = unsafe { layout.narrow_key::<BY_SHIFT>(key_hash) };
    let lanes = key.shard.lanes;
    let load = |at: usize| {
        // SAFETY: `at` is `key.here` or `key.here + key.stride`: the first
        // byte of the key's start block or of the next block, inside the
        // solution (`NarrowKey`'s invariant), within `solution`'s readable
        // bytes (the caller's contract). `lanes` selects the block's
        // `columns <= 8` words (`column_lanes`), and masked-off lanes are
        // not accessed.
        unsafe { _mm512_maskz_loadu_epi64(lanes, solution.add(at).cast::<i64>()) }
    };
    let window = _mm512_shrdv_epi64(
        load(key.here),
        load(key.here + key.stride),
        _mm512_set1_epi64(key.slot as i64),
    );
    let x = _mm512_and_si512(window, _mm512_set1_epi64(key.coeff() as i64));
    // Lanes past the key's columns load zero: even.
    let odd = _mm512_test_epi64_mask(
        _mm512_popcnt_epi64(x),
        _mm512_set1_epi64(layout.constants.parity_bit as i64),
    );
    odd == key.g as u8 & lanes
}

/// Same answer as `Ribbon64Table::may_contain_reference` for any column
/// count: chunks of 8 columns, reads inside `bytes` (a key whose blocks are
/// not all inside answers `true`).
#[inline]
#[target_feature(enable = "avx512f,avx512vl,avx512vbmi2,avx512vpopcntdq,bmi2")]
pub(super) fn check_columns(bytes: &[u8], key: &Located64) -> bool {
    let Some(words) = key.words(bytes) else {
        return true;
    };
    let mut first = 0;
    while first < key.columns {
        let n = (key.columns - first).min(8);
        let lanes = _bzhi_u32(0xff, n as u32) as u8;
        let load = |block: usize| {
            // SAFETY: `block` is 0 or `stride`, and `first + n <= columns`,
            // so the `n` words from word `first` of that block end at most
            // at `stride + columns * 8 == words.len()` (`Located64::words`):
            // bytes of `words`. `lanes` selects exactly those `n` lanes, and
            // masked-off lanes are not accessed.
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
        let odd = odd_columns(load(0), load(key.stride), key.slot, key.coeff);
        if (odd ^ (key.result >> first) as u8) & lanes != 0 {
            return false;
        }
        first += 8;
    }
    true
}
