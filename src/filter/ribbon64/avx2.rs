//! The AVX2 queries of format 0x06, for CPUs without the AVX-512 features
//! of [`avx512`](super::avx512): a narrow one for layouts of at most 8
//! columns, and a general one in chunks of 4 columns.
//!
//! Both split the key's coefficients into two 64-bit masks, of its start
//! block's words and the next block's: the parity of `window & coeff` over
//! a column is that of `(w0 & m0) ^ (w1 & m1)`, `m0 = coeff << s` and `m1 =
//! coeff >> (64 - s)` for `s = slot % 64` (AVX2's variable shifts give 0
//! for a count of 64, so `s = 0` needs no case of its own). AVX2 has no
//! vector population count; parities are shift-XOR folds.
//!
//! **Narrow** (`narrow_unchecked`): all 8 columns at once, no loop, no
//! branch, no bounds check after one length check by the caller. Two masked
//! 32-byte loads per block (columns 0-3 and 4-7; lanes past the shard's
//! last column are zero and never read), the ANDs and XORs, then each
//! 64-bit lane is folded to 32 bits and the two halves blended into one
//! vector of eight 32-bit lanes (columns 0, 4, 1, 5, 2, 6, 3, 7), five
//! shift-XORs bring each lane's parity to its sign bit, and one
//! `vmovmskps` gives the eight parities, compared with the key's result
//! bits put in the same order by a 256-byte table. Measured against the
//! general path in `examples/ribbon64_query.rs` (docs/filters.md).
//!
//! **General** (`check_columns`): any column count, bounds-checked, in
//! chunks of 4 columns: one masked load per block, six shift-XORs per
//! 64-bit lane and one `vmovmskpd`, with an exit after the first chunk
//! that mismatches.
//!
//! This module has `unsafe` because `#[target_feature]` functions and the
//! vector loads need it; the loads of `check_columns` stay inside a slice
//! whose length was checked first, those of `narrow_unchecked` inside the
//! solution, whose length its caller checked once (see its `# Safety`).

use super::layout::{Located64, Ribbon64Layout};
use super::{BLOCK_SLOTS, WORD_BYTES};
use std::arch::x86_64::*;

/// `vpmaskmovq` masks of the narrow query: entry `c` selects the first `c`
/// of 8 columns (lanes 0-3 the first load's, 4-7 the second's). 64-byte
/// entries on 64-byte boundaries: one cache line per column count.
#[repr(C, align(64))]
struct NarrowLanes([[i64; 8]; 9]);

static NARROW_LANES: NarrowLanes = {
    let mut out = [[0i64; 8]; 9];
    let mut c = 0;
    while c <= 8 {
        let mut lane = 0;
        while lane < c {
            out[c][lane] = -1;
            lane += 1;
        }
        c += 1;
    }
    NarrowLanes(out)
};

/// The narrow query's order of parities: bit `2i` of `INTERLEAVED[r]` is
/// bit `i` of `r` (column `i`), bit `2i + 1` is bit `i + 4` (column `i +
/// 4`), for `i` in `0..4`.
static INTERLEAVED: [u8; 256] = {
    let mut out = [0u8; 256];
    let mut r = 0;
    while r < 256 {
        let mut i = 0;
        while i < 4 {
            out[r] |= (((r >> i) & 1) << (2 * i) | ((r >> (i + 4)) & 1) << (2 * i + 1)) as u8;
            i += 1;
        }
        r += 1;
    }
    out
};

/// Same answer as `Ribbon64Table::may_contain_reference` for layouts of at
/// most 8 upper columns (every shard has 1 to 8): one pass over all eight
/// column lanes, no loop and no bounds checks (see the module doc).
///
/// # Safety
///
/// `layout` comes from `Ribbon64Layout::parse` (through `from_table`,
/// possibly moved to another path by `on_path`) with at most 8 upper
/// columns and at most `NARROW_MAX_SLOTS` slots (the conditions of
/// `Path64::narrow`), `solution` points to at least `layout.table_start`
/// readable bytes that hold the solution of the bytes it was parsed from
/// (only their length matters for safety), the CPU supports AVX2, and if
/// `BY_SHIFT`, `layout.shard_shift != 0` (`BY_SHIFT` as in the AVX-512
/// `narrow_unchecked`).
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn narrow_unchecked<const BY_SHIFT: bool>(
    layout: &Ribbon64Layout,
    solution: *const u8,
    key_hash: u64,
) -> bool {
    // SAFETY: the caller's contract is `narrow_key`'s.
    let key = unsafe { layout.narrow_key::<BY_SHIFT>(key_hash) };
    let (shard, here, stride) = (key.shard, key.here, key.stride);
    // Every shard of a narrow layout has 1 to 8 columns (the index check
    // is for the compiler; it never fails).
    let lanes = &NARROW_LANES.0[(shard.columns as usize).min(8)];
    // SAFETY: `lanes` is 8 readable i64; two unaligned 32-byte loads.
    let (lanes_lo, lanes_hi) = unsafe {
        (
            _mm256_loadu_si256(lanes.as_ptr().cast::<__m256i>()),
            _mm256_loadu_si256(lanes.as_ptr().add(4).cast::<__m256i>()),
        )
    };
    let load = |at: usize, mask: __m256i| {
        // SAFETY: `at` is `here` or `here + stride` (the first byte of the
        // key's start block or of the next block, inside the solution:
        // `NarrowKey`'s invariant), plus 0 or 32, within `solution`'s
        // readable bytes (the caller's contract). The mask selects the
        // words of columns below the shard's `columns` (words `0..4` of the
        // block at offset 0, `4..8` at offset 32), all inside the block,
        // and masked-off lanes are not accessed (a load whose lanes are all
        // off, past the end, reads nothing: hence `wrapping_add`).
        unsafe { _mm256_maskload_epi64(solution.wrapping_add(at).cast::<i64>(), mask) }
    };
    let c = _mm256_set1_epi64x(key.coeff() as i64);
    let s = _mm256_set1_epi64x((key.slot % BLOCK_SLOTS as u64) as i64);
    let m0 = _mm256_sllv_epi64(c, s);
    let m1 = _mm256_srlv_epi64(c, _mm256_sub_epi64(_mm256_set1_epi64x(64), s));
    let next = here + stride;
    let x_lo = _mm256_xor_si256(
        _mm256_and_si256(load(here, lanes_lo), m0),
        _mm256_and_si256(load(next, lanes_lo), m1),
    );
    let x_hi = _mm256_xor_si256(
        _mm256_and_si256(load(here + 32, lanes_hi), m0),
        _mm256_and_si256(load(next + 32, lanes_hi), m1),
    );
    // Columns 0-3 folded into the low halves of their lanes, 4-7 into the
    // high halves, then one vector of eight 32-bit parities' worth.
    let folded_lo = _mm256_xor_si256(x_lo, _mm256_srli_epi64::<32>(x_lo));
    let folded_hi = _mm256_xor_si256(x_hi, _mm256_slli_epi64::<32>(x_hi));
    let mut y = _mm256_blend_epi32::<0b1010_1010>(folded_lo, folded_hi);
    y = _mm256_xor_si256(y, _mm256_slli_epi32::<16>(y));
    y = _mm256_xor_si256(y, _mm256_slli_epi32::<8>(y));
    y = _mm256_xor_si256(y, _mm256_slli_epi32::<4>(y));
    y = _mm256_xor_si256(y, _mm256_slli_epi32::<2>(y));
    y = _mm256_xor_si256(y, _mm256_slli_epi32::<1>(y));
    let odd = _mm256_movemask_ps(_mm256_castsi256_ps(y)) as u8;
    // Lanes past the key's columns load zero: even, as their masked-off
    // result bits.
    odd == INTERLEAVED[(key.g as u8 & shard.lanes) as usize]
}

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
