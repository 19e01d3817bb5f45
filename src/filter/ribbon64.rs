//! Ribbon filter format 0x06: 64-bit coefficient rows, "smashed" starts and
//! one result-column count per shard.
//!
//! The same kind of filter as [`ribbon`](super::ribbon) (a standard Ribbon
//! filter after Dillinger and Walzer 2021: banding, back substitution, one
//! `r`-bit fingerprint per key, false-positive rate `2^-r`), with three
//! choices made differently for speed at the same size:
//!
//! * **64-bit rows.** A key's coefficient row covers 64 slots instead of
//!   128. Each elimination step of the build is one 64-bit XOR and shift
//!   instead of two, and a query reads two 64-slot blocks instead of three.
//!   Narrow rows need more slack for the same failure rate per seed, which
//!   the next two points pay for.
//! * **Smashed starts** (RocksDB's `kUseSmash`). A shard of `S` slots draws
//!   `u` uniformly in `0..S` and starts the key at
//!   `min(u.saturating_sub(32), S - 64)`: the edge slots, which plain
//!   starts in `0..=S-64` load lightly, get their share of keys. The band is
//!   then evenly loaded, fewer seeds fail at a given overhead, and the
//!   elimination chains are shorter.
//! * **Small shards, one column count each.** Keys are split into shards of
//!   about a thousand keys (a small band needs less overhead, and a failed
//!   seed redoes little work). For a rate between `2^-u` and `2^-(u-1)` the
//!   first `lower_shards` shards store `u - 1` result columns and the others
//!   `u`; with hundreds of shards the mix is fine-grained. A key's column
//!   count follows from its shard alone, so a query needs no per-block
//!   test.
//!
//! # Layout
//!
//! ```text
//! +-----------+-----------+-----------------------+------------+--------------+-------+--------+------+
//! | region 0  | region 1  | shard table,          | num_shards | lower_shards | upper | crc32  | 0x06 |
//! | (lower    | (upper    | num_shards entries    | u32 LE     | u32 LE       | cols  | u32 LE | (id) |
//! | shards)   | shards)   | of 3 bytes:           |            |              | u8    |        |      |
//! |           |           |  num_slots u16 LE     |            |              | 1..=32|        |      |
//! |           |           |  seed      u8         |            |              |       |        |      |
//! +-----------+-----------+-----------------------+------------+--------------+-------+--------+------+
//!
//! shards 0..lower_shards are lower shards: they store cols = upper_cols - 1
//!   result columns and live in region 0; the others store upper_cols and
//!   live in region 1 (lower_shards <= num_shards; lower_shards = 0 when
//!   upper_cols = 1)
//! num_shards: at least 1
//! num_slots: 64..=65535 slots per shard
//! region j: the slots of its shards, one after another in shard order
//!   (shard i occupies region slots off_i .. off_i + num_slots_i, off_i the
//!   sum of num_slots of the earlier shards of the same region), stored as
//!   blocks_j = (if slots_j == 0 { 0 } else { slots_j / 64 + 1 }) blocks of
//!   64 slots; block b = cols_j words of 8 bytes (u64 LE), word c = column c
//!   of slots 64b .. 64b+64 (bit i = slot 64b + i); bits past the region's
//!   last slot are 0 (a reader need not check them: no key's window
//!   reaches them)
//! off_i < 2^32 for every shard (a reader rejects larger tables; the
//!   builder never writes a region of more than 2^32 - 1 slots)
//! region 0 is blocks_0 * cols_0 * 8 bytes, region 1 follows it and is
//!   blocks_1 * cols_1 * 8 bytes, and the shard table follows region 1
//! crc32 (CRC-32/ISO-HDLC, crc32fast): over the shard table and the first
//!   9 bytes of the trailer (num_shards, lower_shards, upper cols)
//! ```
//!
//! The extra block at the end of each region lets every key read two whole
//! blocks: a key's window `g .. g + 64` (region slot `g`, see below) lies
//! in its shard, so `g + 64 <= slots_j`, and block `g / 64 + 1 <= slots_j /
//! 64` exists. The table and trailer carry their own checksum for the same
//! reason as format 0x05: a damaged seed or size would still look
//! consistent and give false negatives. The solution bits are covered by
//! the table's block checksum.
//!
//! # Rows
//!
//! From the key hash `h` (XXH3-64):
//!
//! ```text
//! shard  i = fastrange64(h, num_shards)                  (high bits of h)
//! mask     = (seed_i + 1) * 0x9e3779b97f4a7c15          (mod 2^64)
//! g        = (h ^ mask) * 0xbf58476d1ce4e5b9             (mod 2^64)
//! u        = fastrange64(g, S_i)                         (S_i = num_slots_i)
//! start    = min(u.saturating_sub(32), S_i - 64)         (0 ..= S_i - 64)
//! p        = g * 0xc28f82822b650bed                      (full 128-bit product)
//! coeff    = (low64(p) ^ high64(p)) | 1                  (bit k: slot start + k)
//! result   = low cols_i bits of g
//! ```
//!
//! The multiply by the seed-dependent mask is what makes seeds differ: the
//! shard comes from the high bits of `h`, so the start must not (a shard's
//! keys share those bits). Every bit of `g`'s high half depends on every bit
//! of `h ^ mask`. The coefficients XOR both halves of the second product:
//! the high half alone is close to `g x 0.76`, so keys with nearly the same
//! start (nearly the same high bits of `g`) would get nearly the same high
//! coefficient bits; the low half's bits depend on the low bits of `g`. The
//! result comes from the low bits of `g`, which neither the start (high
//! bits) nor the coefficients take directly.
//!
//! # Query
//!
//! With `g = off_i + start` the key's region slot, `b = g / 64` and
//! `s = g % 64`, column `c`'s window is `word(b, c) >> s | word(b + 1, c)
//! << (64 - s)` (only the first word when `s` is 0). The key may be present
//! iff for every column `c < cols_i`, the parity of `window & coeff` equals
//! bit `c` of `result`.
//!
//! # Shard counts
//!
//! The format allows any shard count. The builder picks a power of two
//! ([`shard_count_64`]): for `num_shards = 2^k`, `k >= 1`, the shard
//! `fastrange64(h, num_shards)` is `h >> (64 - k)`, and the narrow queries
//! compute it so (one shift instead of a 128-bit multiply before the shard
//! entry's load; the same shard). Tables with other counts, written before
//! that choice, take the multiply.

use super::fastrange64;
use crate::filter::FORMAT_RIBBON64;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod backsub;
mod band;
mod build;
mod layout;
#[cfg(target_arch = "x86_64")]
mod popcnt;
mod query;
#[cfg(target_arch = "x86_64")]
mod rows_avx512;

pub use band::elimination_steps;
pub(crate) use build::build;
pub use build::{overhead64_for_keys, shard_count_64, LANES_64, SHARD_KEYS_64};
pub use layout::Ribbon64Layout;
pub(crate) use query::Ribbon64Source;

/// Bits per coefficient row: a key's row covers `W` consecutive slots from
/// its start.
pub const W: usize = 64;
/// Slots per stored block (one 64-bit word per column and block).
pub const BLOCK_SLOTS: usize = 64;
/// Bytes per solution word (one column of one block).
pub const WORD_BYTES: usize = 8;
/// How far a smashed start is moved down: `start = min(u - SMASH, S - W)`
/// for `u >= SMASH` (half the row width).
pub const SMASH: u64 = (W / 2) as u64;
/// Bytes per shard table entry: num_slots (2), seed (1).
pub const SHARD_ENTRY_BYTES: usize = 3;
/// Bytes after the shard table: num_shards (4), lower_shards (4), upper
/// columns (1), crc32 (4), format id (1).
pub const TRAILER_BYTES: usize = 14;
/// The fewest slots a shard has: one row's width.
pub const MIN_SHARD_SLOTS: usize = W;
/// The most slots a shard has (its size is stored in 16 bits).
pub const MAX_SHARD_SLOTS: usize = u16::MAX as usize;
/// Most result bits (columns) a shard stores.
pub const MAX_COLUMNS: u32 = 32;

/// Multiplier of the seed into its mask.
const SEED_MULT: u64 = 0x9e37_79b9_7f4a_7c15;
/// Odd multiplier of the per-seed rehash.
const REHASH_MULT: u64 = 0xbf58_476d_1ce4_e5b9;
/// Odd multiplier whose 128-bit product with the rehashed key gives the
/// coefficients.
const COEFF_MULT: u64 = 0xc28f_8282_2b65_0bed;

/// What a seed XORs into the key hash before the rehash.
#[inline(always)]
pub(crate) fn seed_mask(seed: u8) -> u64 {
    (seed as u64 + 1).wrapping_mul(SEED_MULT)
}

/// A key's row in a shard of `num_slots` slots (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Row {
    /// Start slot within the shard: `0..=num_slots - 64`.
    pub start: usize,
    /// Coefficients: bit `k` stands for slot `start + k`; bit 0 is set.
    pub coeff: u64,
    /// Fingerprint: bit `c` is the expected parity of column `c`.
    pub result: u32,
}

/// The rehashed key `g` for a shard whose seed mask is `mask`.
#[inline(always)]
pub(crate) fn rehash(key_hash: u64, mask: u64) -> u64 {
    (key_hash ^ mask).wrapping_mul(REHASH_MULT)
}

/// The smashed start of rehashed key `g` in a shard of `num_slots >= 64`
/// slots.
#[inline(always)]
pub(crate) fn start_of(g: u64, num_slots: u64) -> u64 {
    // The clamps as masks: each binds for about one key in 32, at random,
    // and the branches LLVM makes of `saturating_sub` and `min` here (even
    // written as `select_unpredictable`) mispredict in the build's row
    // preparation. The upper clamp now compiles without a branch (LLVM
    // still turns the lower one into a subtract and a short branch);
    // builds measured 1.5-2% faster (docs/filters.md). Every value is
    // below 2^16, so the sign of a wrapped difference is the comparison.
    let below = |d: u64| ((d as i64) >> 63) as u64;
    let d = fastrange64(g, num_slots).wrapping_sub(SMASH);
    let low = d & !below(d);
    let max_start = num_slots - W as u64;
    let e = low.wrapping_sub(max_start);
    let start = max_start.wrapping_add(e & below(e));
    debug_assert_eq!(
        start,
        fastrange64(g, num_slots)
            .saturating_sub(SMASH)
            .min(num_slots - W as u64)
    );
    start
}

/// The coefficients of rehashed key `g`.
#[inline(always)]
pub(crate) fn coeff_of(g: u64) -> u64 {
    let p = (g as u128).wrapping_mul(COEFF_MULT as u128);
    (p as u64 ^ (p >> 64) as u64) | 1
}

/// The row of `key_hash` in a shard of `num_slots >= 64` slots whose seed
/// mask is `mask`.
#[inline(always)]
pub(crate) fn row(key_hash: u64, mask: u64, num_slots: u64) -> Row {
    let g = rehash(key_hash, mask);
    Row {
        start: start_of(g, num_slots) as usize,
        coeff: coeff_of(g),
        result: g as u32,
    }
}

/// One shard's entry in the shard table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard64 {
    /// Slots of the shard: `64..=65535`.
    pub num_slots: u16,
    /// The seed whose rows the shard was solved with.
    pub seed: u8,
}

impl Shard64 {
    /// The entry at `at` in `bytes`; `None` past the end.
    pub(crate) fn read(bytes: &[u8], at: usize) -> Option<Shard64> {
        let e = bytes.get(at..at.checked_add(SHARD_ENTRY_BYTES)?)?;
        Some(Shard64 {
            num_slots: u16::from_le_bytes([e[0], e[1]]),
            seed: e[2],
        })
    }

    /// Writes the entry to the first [`SHARD_ENTRY_BYTES`] bytes of `out`.
    pub fn write(&self, out: &mut [u8]) {
        out[..2].copy_from_slice(&self.num_slots.to_le_bytes());
        out[2] = self.seed;
    }
}

/// Blocks a region of `slots` slots stores (see the layout).
#[inline]
pub fn region_blocks(slots: u64) -> u64 {
    if slots == 0 {
        0
    } else {
        slots / BLOCK_SLOTS as u64 + 1
    }
}

/// The trailer and shard table of format 0x06 bytes, checked: what every
/// query path of this format starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ribbon64Table {
    /// Shards, in order.
    pub shards: Vec<Shard64>,
    /// Shards `0..lower_shards` store `upper_columns - 1` columns.
    pub lower_shards: u32,
    /// Columns of the upper shards: `1..=32`.
    pub upper_columns: u32,
    /// Each shard's first slot within its region.
    pub offsets: Vec<u32>,
    /// Byte offset of region 1 (the length of region 0).
    pub region1_start: usize,
    /// Byte offset of the shard table (the length of both regions).
    pub table_start: usize,
}

impl Ribbon64Table {
    /// Reads and validates the trailer and shard table of `bytes`: format id
    /// 0x06, checksum, `upper_columns` in `1..=32`, at least one shard,
    /// `lower_shards <= num_shards` (0 when `upper_columns` is 1), every
    /// shard with `64..=65535` slots and its region offset below `2^32`,
    /// and the regions' sizes adding up to exactly the bytes before the
    /// shard table. `None` if the bytes are not
    /// a consistent format 0x06 filter. Never panics.
    pub fn parse(bytes: &[u8]) -> Option<Ribbon64Table> {
        let trailer_start = bytes.len().checked_sub(TRAILER_BYTES)?;
        let t = &bytes[trailer_start..];
        if t[13] != FORMAT_RIBBON64 {
            return None;
        }
        let num_shards = u32::from_le_bytes([t[0], t[1], t[2], t[3]]);
        let lower_shards = u32::from_le_bytes([t[4], t[5], t[6], t[7]]);
        let upper_columns = t[8] as u32;
        let stored_crc = u32::from_le_bytes([t[9], t[10], t[11], t[12]]);
        if num_shards == 0
            || !(1..=MAX_COLUMNS).contains(&upper_columns)
            || lower_shards > num_shards
            || (upper_columns == 1 && lower_shards != 0)
        {
            return None;
        }
        let table_len = (num_shards as usize).checked_mul(SHARD_ENTRY_BYTES)?;
        let table_start = trailer_start.checked_sub(table_len)?;
        if crc32fast::hash(&bytes[table_start..trailer_start + 9]) != stored_crc {
            return None;
        }
        let mut shards = Vec::with_capacity(num_shards as usize);
        let mut offsets = Vec::with_capacity(num_shards as usize);
        let mut region_slots = [0u64; 2];
        for i in 0..num_shards as usize {
            let shard = Shard64::read(bytes, table_start + i * SHARD_ENTRY_BYTES)?;
            if (shard.num_slots as usize) < MIN_SHARD_SLOTS {
                return None;
            }
            let region = usize::from(i as u32 >= lower_shards);
            offsets.push(u32::try_from(region_slots[region]).ok()?);
            region_slots[region] += shard.num_slots as u64;
            shards.push(shard);
        }
        let region_bytes = |region: usize, columns: u32| -> Option<u64> {
            region_blocks(region_slots[region])
                .checked_mul(columns as u64)?
                .checked_mul(WORD_BYTES as u64)
        };
        let region0 = region_bytes(0, upper_columns - 1)?;
        let region1 = region_bytes(1, upper_columns)?;
        if region0.checked_add(region1)? != table_start as u64 {
            return None;
        }
        Some(Ribbon64Table {
            shards,
            lower_shards,
            upper_columns,
            offsets,
            region1_start: region0 as usize,
            table_start,
        })
    }

    /// Result columns of shard `i`.
    pub fn columns(&self, i: usize) -> u32 {
        self.upper_columns - u32::from((i as u32) < self.lower_shards)
    }

    /// Byte offset of shard `i`'s region.
    pub fn region_start(&self, i: usize) -> usize {
        if (i as u32) < self.lower_shards {
            0
        } else {
            self.region1_start
        }
    }

    /// The reference query, written from the module doc and nothing else:
    /// slow (bounds-checked reads, one column at a time), for tests to hold
    /// the fast paths against. `bytes` must be those this table was parsed
    /// from; reads past their end answer `true`.
    pub fn may_contain_reference(&self, bytes: &[u8], key_hash: u64) -> bool {
        let i = fastrange64(key_hash, self.shards.len() as u64) as usize;
        let shard = self.shards[i];
        let row = row(key_hash, seed_mask(shard.seed), shard.num_slots as u64);
        let columns = self.columns(i) as usize;
        let g = self.offsets[i] as usize + row.start;
        let (b, s) = (g / BLOCK_SLOTS, (g % BLOCK_SLOTS) as u32);
        let region = self.region_start(i);
        let word = |block: usize, column: usize| -> Option<u64> {
            let at = region + (block * columns + column) * WORD_BYTES;
            let w = bytes.get(at..at + WORD_BYTES)?;
            Some(u64::from_le_bytes(w.try_into().ok()?))
        };
        for c in 0..columns {
            let (Some(w0), Some(w1)) = (word(b, c), word(b + 1, c)) else {
                return true;
            };
            let window = if s == 0 {
                w0
            } else {
                (w0 >> s) | (w1 << (64 - s))
            };
            let parity = (window & row.coeff).count_ones() & 1;
            if parity != (row.result >> c) & 1 {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hashes of `n` distinct keys, `tag` separating independent key sets
    /// (for the tests of this module and its submodules).
    pub(super) fn hashes(n: u64, tag: u64) -> Vec<u64> {
        (0..n)
            .map(|i| crate::filter::key_hash(&[tag.to_le_bytes(), i.to_le_bytes()].concat()))
            .collect()
    }

    #[test]
    fn smashed_starts_cover_the_band_and_pile_at_its_edges() {
        let slots = 1000u64;
        let mut counts = vec![0u32; slots as usize];
        for i in 0..200_000u64 {
            let g = rehash(crate::filter::key_hash(&i.to_le_bytes()), seed_mask(0));
            let s = start_of(g, slots);
            assert!(s <= slots - W as u64);
            counts[s as usize] += 1;
        }
        // About 33 and 32 u-values land on the first and last start, one on
        // each start between.
        let per_u = 200_000.0 / slots as f64;
        let first = counts[0] as f64 / per_u;
        let last = counts[(slots - W as u64) as usize] as f64 / per_u;
        assert!((28.0..38.0).contains(&first), "{first}");
        assert!((27.0..37.0).contains(&last), "{last}");
        assert!(counts[1..(slots - W as u64) as usize]
            .iter()
            .all(|&c| c > 0));
    }

    #[test]
    fn rows_have_their_first_coefficient_set() {
        for i in 0..10_000u64 {
            let r = row(crate::filter::key_hash(&i.to_le_bytes()), seed_mask(3), 64);
            assert_eq!(r.coeff & 1, 1);
            assert_eq!(r.start, 0);
        }
    }

    #[test]
    fn parse_rejects_what_it_cannot_trust() {
        // One shard of 64 slots and 1 column: region 1 has 2 blocks of one
        // word.
        let mut bytes = vec![0u8; 16 + SHARD_ENTRY_BYTES];
        Shard64 {
            num_slots: 64,
            seed: 0,
        }
        .write(&mut bytes[16..]);
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.push(1);
        let crc = crc32fast::hash(&bytes[16..]);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes.push(FORMAT_RIBBON64);
        let table = Ribbon64Table::parse(&bytes).expect("consistent");
        assert_eq!(table.table_start, 16);
        assert_eq!(table.columns(0), 1);
        for cut in 1..bytes.len() {
            assert!(Ribbon64Table::parse(&bytes[cut..]).is_none(), "{cut}");
            assert!(Ribbon64Table::parse(&bytes[..cut]).is_none(), "{cut}");
        }
        for at in 16..bytes.len() - 1 {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x10;
            assert!(Ribbon64Table::parse(&damaged).is_none(), "{at}");
        }
    }
}
