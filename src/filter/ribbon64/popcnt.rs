//! The narrow scalar query of format 0x06, with POPCNT: for CPUs with AVX2
//! whose 256-bit operations run as two 128-bit halves (AMD Zen and Zen+),
//! where one 64-bit register per column beats the AVX2 lanes.
//!
//! It reads as the narrow vector queries do (one length check by the
//! caller, then no bounds checks), and computes each column's parity as the
//! general scalar loop does: `(w0 & m0) ^ (w1 & m1)` with `m0 = coeff <<
//! s`, `m1 = coeff >> (64 - s)` for `s = slot % 64` (0 when `s = 0`), one
//! POPCNT. The first [`EARLY_COLUMNS`] columns are checked without a
//! branch; then a mismatch answers "absent" at once (a random absent key
//! fails one of four columns with probability 15/16), and only keys that
//! match them check the rest.

use super::layout::Ribbon64Layout;
use super::{BLOCK_SLOTS, WORD_BYTES};

/// Columns checked before the one branch (every shard has at least one;
/// a shard with fewer checks them all and does not branch).
const EARLY_COLUMNS: usize = 4;

/// Same answer as `Ribbon64Table::may_contain_reference` for layouts of at
/// most 8 upper columns (every shard has 1 to 8), no bounds checks.
/// `BY_SHIFT` as in the AVX-512 `narrow_unchecked`.
///
/// # Safety
///
/// As for the AVX2 `narrow_unchecked`: `layout` comes from
/// `Ribbon64Layout::parse` (through `from_table`, possibly moved to another
/// path by `on_path`) with at most 8 upper columns and at most
/// `NARROW_MAX_SLOTS` slots, `solution` points to at least
/// `layout.table_start` readable bytes, the CPU supports POPCNT, and if
/// `BY_SHIFT`, `layout.shard_shift != 0`.
#[inline]
#[target_feature(enable = "popcnt")]
pub(super) unsafe fn narrow_unchecked<const BY_SHIFT: bool>(
    layout: &Ribbon64Layout,
    solution: *const u8,
    key_hash: u64,
) -> bool {
    // SAFETY: the caller's contract is `narrow_key`'s.
    let key = unsafe { layout.narrow_key::<BY_SHIFT>(key_hash) };
    let (shard, here, stride, coeff) = (key.shard, key.here, key.stride, key.coeff());
    let s = (key.slot % BLOCK_SLOTS as u64) as u32;
    let m0 = coeff << s;
    // `coeff >> (64 - s)`, 0 for `s = 0`, without a branch.
    let m1 = (coeff >> 1) >> (63 - s);
    let columns = shard.columns as usize;
    let word = |at: usize| {
        // SAFETY: `at` is the word of column `c < columns` of the key's
        // start block or of the next block: inside the solution
        // (`NarrowKey`'s invariant), within `solution`'s readable bytes
        // (the caller's contract).
        unsafe { solution.add(at).cast::<u64>().read_unaligned() }
    };
    let parity = |c: usize| {
        let at = here + c * WORD_BYTES;
        ((word(at) & m0) ^ (word(at + stride) & m1)).count_ones() & 1
    };
    let mut odd = 0u32;
    let early = columns.min(EARLY_COLUMNS);
    for c in 0..early {
        odd |= parity(c) << c;
    }
    let result = key.g as u32 & u32::from(shard.lanes);
    if odd != result & ((1 << early) - 1) {
        return false;
    }
    for c in early..columns {
        odd |= parity(c) << c;
    }
    odd == result
}
