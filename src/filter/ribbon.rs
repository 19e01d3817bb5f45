//! Standard Ribbon filter (Dillinger and Walzer, "Ribbon filter: practically
//! smaller than Bloom and Xor", 2021, arXiv 2103.02515), with 128-bit
//! coefficient rows.
//!
//! # Idea
//!
//! Each key gets a *row*: a start slot `s`, a 128-bit coefficient vector `c`
//! (bit 0 forced to 1) covering slots `s..s+128`, and an `r`-bit result
//! fingerprint `f`. The filter stores a solution matrix `S` (one `r`-bit value
//! per slot) such that for every key, the XOR of `S[s + i]` over the set bits
//! `i` of `c` equals `f`. A query recomputes that XOR for its key and compares
//! it with `f`; an absent key matches each result bit with probability 1/2, so
//! the false-positive rate is `2^-r`.
//!
//! *Banding* (incremental Gaussian elimination): the band holds at most one
//! row per slot, the row whose first set bit (pivot) is that slot. A new row
//! goes to its start slot; if the slot is taken, the stored row is XORed into
//! it (coefficients and result), which clears bit 0, and the row moves right
//! to its new first set bit. It ends in an empty slot, or reduces to all
//! zeros: with a zero result it was redundant (a duplicate key), otherwise the
//! system has no solution and the build retries with another seed.
//!
//! *Back substitution* walks the slots from last to first: a slot without a
//! row gets 0; a slot with row `(c, f)` gets `f XOR (XOR of S[slot + i] for
//! set bits i > 0 of c)`, which only involves slots already solved.
//!
//! # Shards
//!
//! The overhead a single band needs for a given build-failure rate grows
//! with its size (measured: about 2.5% at 8,000 keys, 3.5% at 130,000, over
//! 4.5% at 1,000,000 for a 1-in-20 failure rate per seed), because a larger
//! band has more places where too many rows pile up. The keys are therefore
//! split by the high bits of their hash (`fastrange64(h, num_shards)`) into
//! shards of about [`SHARD_KEYS`] keys, each an independent Ribbon system
//! with its own size, seed and retries. The overhead stays that of a small
//! band at any filter size, a failed seed costs one shard's work, and the
//! band being solved fits in the L2 cache. The price is one extra 13-byte
//! table entry per shard (0.013 bits/key at 8,192 keys per shard). The
//! table is decoded once, when the filter is parsed, into an array of
//! per-shard query parameters (seed mask, start count, word offset, first
//! upper block and the byte offsets of block 0 of each column count), so a
//! query reads one 32-byte entry of that array instead of parsing bytes.
//!
//! The build bands three shards at a time, one elimination step of each in
//! turn: a single chain of steps is latency-bound (each slot to visit
//! depends on the previous XOR and trailing-zero count), unrelated ones
//! overlap in the CPU. The shards form a work queue: a lane whose shard is
//! solved (back substitution at once, into the output) or whose seed failed
//! (prepared again with the next seed) takes up its next work at once, so
//! retried seeds and the ends of unequal shards are banded next to other
//! shards rather than alone. A shard's bytes depend only on its keys and
//! seeds, so the schedule does not change them. Measured against banding
//! two shards at a time with retries alone: 1.12-1.16x faster builds at
//! 10,000 keys, 1.25-1.30x at 1,000,000; four lanes were slower (the loop
//! no longer keeps the lanes in registers), and so was a branch-free step
//! that removes the mispredicted branch at the end of each key's chain
//! (every step then stores and selects, and the loop is bound by its
//! instruction count); see docs/filters.md.
//!
//! # Fractional result bits
//!
//! To hit a false-positive rate `p` between `2^-u` and `2^-(u-1)`, the first
//! `upper_start_block` blocks of a shard store `u - 1` columns and the rest
//! store `u`. A key uses the column count of the block its start slot falls
//! in; a key that starts in an upper block only touches upper blocks, so the
//! whole system is solved with `u` columns and the extra column of the lower
//! blocks is simply not stored. The share of starts in upper blocks is
//! chosen so that `f * 2^-u + (1 - f) * 2^-(u-1) = p`.
//!
//! # Layout
//!
//! ```text
//! +-----------------+-----+-------------------+-----------------------------+------------+-------+--------+------+
//! | shard 0         | ... | shard k-1         | shard table, k entries of   | num_shards | upper | crc32  | 0x03 |
//! | solution        |     | solution          | 13 bytes:                   | (k) u32 LE | cols  | u32 LE | (id) |
//! |                 |     |                   |  word_offset       u32 LE   |            | u8    |        |      |
//! |                 |     |                   |  num_blocks        u32 LE   |            | 1..=32|        |      |
//! |                 |     |                   |  upper_start_block u32 LE   |            |       |        |      |
//! |                 |     |                   |  seed              u8       |            |       |        |      |
//! +-----------------+-----+-------------------+-----------------------------+------------+-------+--------+------+
//!
//! shard solution: blocks 0..num_blocks, block b = cols(b) words of 16 bytes
//!   cols(b) = upper_cols - 1 if b < upper_start_block, else upper_cols
//!   word j of block b = column j of slots 128b..128b+128 (u128 LE, bit i =
//!   slot 128b+i)
//! word_offset: where the shard's solution starts, in 16-byte words; shards
//!   are contiguous and in order, the last one ends at the shard table
//! crc32 (CRC-32/ISO-HDLC, crc32fast): over the shard table, num_shards and
//!   upper cols
//! ```
//!
//! Format id 0x03. The first version of this filter used id 0x02 with the
//! same layout but another row hashing; its bytes are not read (see
//! [`FORMAT_RIBBON_V1`](super::FORMAT_RIBBON_V1)).
//!
//! The table and trailer carry their own checksum because a damaged seed or
//! offset would still look consistent yet make queries wrong, giving false
//! negatives; with the checksum, such damage decodes to "may contain". The
//! solution bits themselves are covered by the table's block checksum.
//!
//! The solution is interleaved column-major per block of 128 slots, so a
//! query reads one 16-byte word per column from its start block and, unless
//! its start is block-aligned, the same column of the next block, which
//! directly follows: one contiguous run of `2 x cols x 16` bytes (224 bytes,
//! four or five cache lines, at 7 columns).
//!
//! On CPUs with AVX-512 F, VL, VBMI2 and VPOPCNTDQ (and BMI2; detected once,
//! when the layout is parsed) the query checks up to eight columns of both
//! blocks in zmm registers: two masked 64-byte loads per block (four columns
//! each; lanes past the last column are neither read nor checked), an AND
//! and a `vpternlogq` with the key's window per load pair, the two halves of
//! each column folded with the fingerprint bit, and one `vpopcntq` and one
//! mask test for all eight parities (`mod avx512`; filters of 2 to 8 upper
//! columns, rates of 2^-8 and above, take a variant without the chunk loop,
//! chosen at parse; measured 1.03x-1.28x faster than the AVX2 query in
//! docs/filters.md). That variant checks once per call that the bytes hold
//! the whole solution (which `parse` checked covers every read a key can
//! make) and then reads without bounds checks; its block offset is one
//! multiply-add from values precomputed at parse. Without AVX-512, on CPUs
//! with AVX2 the query checks up to eight columns at once: each pair of adjacent columns is one 32-byte
//! load per block, ANDed with the key's coefficient window, and the eight
//! parities are compared with the fingerprint in one vector test (`mod
//! avx2`; measured 1.5x-2.1x faster than the POPCNT query in
//! docs/filters.md). The scalar query checks the first four columns
//! without branches and stops there if any disagrees with the fingerprint,
//! which an absent key does with probability 15/16; one exit branch that is
//! nearly always right is cheaper than a mispredicted exit per column
//! (measured: 1.4x faster absent queries, same present ones).
//!
//! Parity is POPCNT when the CPU has it (run-time detection; the scalar
//! query and back substitution are then compiled with that target feature),
//! else a multiply trick; all paths give identical bytes and answers
//! (tested).
//!
//! `num_starts = 128 * num_blocks - 127`: a key's start is
//! `fastrange64(h1, num_starts)`, so its 128 slots stay inside its shard.
//!
//! # Hashing
//!
//! The shard comes from the key hash `h` directly (XXH3 is already well
//! mixed). Then, with the shard's seed `s`:
//!
//! ```text
//! seed_mask = (s + 1) * 0x9e3779b97f4a7c15            (mod 2^64)
//! g  = (h ^ seed_mask) * 0xbf58476d1ce4e5b9            (mod 2^64)
//! h1 = g ^ (g >> 32)
//! start  = fastrange64(h1, num_starts)                (high bits of h1)
//! p      = h1 * 0xc28f82822b650bed                    (full 128-bit product)
//! coeff  = (high64(p) ^ rotl(low64(p), 32)) << 64 | low64(p) | 1
//! result = bits 0..cols of (h1 >> 32)
//! ```
//!
//! Three multiplications instead of the two SplitMix64 finalisers of the
//! first version (four multiplications and six xor-shifts): the key hash is
//! already uniform, so the rehash only has to make seeds differ. The rotated
//! low half is XORed into the high coefficients because the product's high
//! half alone is close to `h1 x 0.76`, which would give keys with nearly the
//! same start nearly the same top coefficient bits. The build failure rate
//! per seed was re-measured with this hashing (docs/filters.md).
//!
//! # Fallback
//!
//! Below [`MIN_SLOTS`] slots a blocked Bloom filter is smaller, and when a
//! shard fails [`MAX_SEEDS`] seeds the build gives up on Ribbon: in both
//! cases the bytes are a blocked Bloom filter (format id 0x04) at the
//! equivalent bits per key, which the generic decoder reads as such.

use super::bloom::{self, blocked_bloom_fp_rate, probes_for_bits_per_key, BloomPolicy};
use super::{fastrange64, FilterPolicy, BUILTIN_NAME_PREFIX, FORMAT_RIBBON};
use crate::error::{Error, Result};
use std::sync::Arc;

mod backsub;

/// Slots per block, and bits per coefficient row.
const W: usize = 128;
const WORD_BYTES: usize = W / 8;
/// Bytes per shard table entry: word_offset (4), num_blocks (4),
/// upper_start_block (4), seed (1).
pub const SHARD_ENTRY_BYTES: usize = 13;
/// Bytes after the shard table: num_shards (4), upper columns (1), crc32 (4),
/// format id (1).
pub const TRAILER_BYTES: usize = 10;
/// Most result bits (columns) a Ribbon filter stores: a false-positive rate
/// of about 2.3e-10. Rates below it are built with 32 columns.
pub const MAX_COLUMNS: u32 = 32;
/// Seeds a shard tries before the build falls back to a blocked Bloom filter
/// (RocksDB's bound as well).
pub const MAX_SEEDS: u32 = 256;
/// Filters that would have fewer slots than this are built as blocked Bloom
/// filters instead (RocksDB's threshold): at that size the Ribbon's fixed
/// costs are no longer paid back.
pub const MIN_SLOTS: usize = 1024;
/// Keys per shard the build aims at (shards hold `n / ceil(n / SHARD_KEYS)`
/// keys on average).
pub const SHARD_KEYS: usize = 8192;

const SEED_MULT: u64 = 0x9e37_79b9_7f4a_7c15;
/// Odd multiplier of the per-seed rehash.
const REHASH_MULT: u64 = 0xbf58_476d_1ce4_e5b9;
/// Odd multiplier whose full 128-bit product with the rehashed key gives the
/// coefficients.
const COEFF_MULT: u64 = 0xc28f_8282_2b65_0bed;

/// A key's row for a given seed.
#[derive(Clone, Copy)]
struct Row {
    start: usize,
    coeff: u128,
    result: u32,
}

/// What a seed XORs into the key hash before the rehash.
#[inline]
fn seed_mask(seed: u8) -> u64 {
    (seed as u64 + 1).wrapping_mul(SEED_MULT)
}

/// The per-seed rehash: one multiply (its high bits, which pick the start,
/// depend on every input bit) and one xor-shift (so the low bits, which feed
/// the result and the low coefficients, depend on the high ones). The key
/// hash is already uniform (XXH3), so this only has to make different seeds
/// give unrelated rows, not to repair a weak hash.
#[inline(always)]
fn seeded_with_mask(key_hash: u64, seed_mask: u64) -> u64 {
    let h = (key_hash ^ seed_mask).wrapping_mul(REHASH_MULT);
    h ^ (h >> 32)
}

#[inline]
fn seeded(key_hash: u64, seed: u8) -> u64 {
    seeded_with_mask(key_hash, seed_mask(seed))
}

/// The row of a rehashed key: start from the high bits (`fastrange64`),
/// coefficients from one 64x64->128-bit multiplication, result from the
/// high 32 bits.
///
/// The product's high half alone would be close to `h1 * COEFF_MULT / 2^64`,
/// so keys with nearly the same start (same top bits of `h1`) would get
/// nearly the same top coefficient bits, i.e. dependent rows; XORing in the
/// rotated low half, whose bits depend on the low bits of `h1`, removes that.
/// The result comes from other bits than the low coefficients, so that it is
/// not close to a linear function of them.
#[inline(always)]
fn row_from_seeded(h1: u64, num_starts: u64) -> Row {
    let product = (h1 as u128).wrapping_mul(COEFF_MULT as u128);
    let lo = product as u64;
    let hi = (product >> 64) as u64 ^ lo.rotate_left(32);
    Row {
        start: fastrange64(h1, num_starts) as usize,
        coeff: ((hi as u128) << 64) | (lo | 1) as u128,
        result: (h1 >> 32) as u32,
    }
}

/// Parity of the set bits of `v`, portable.
///
/// Without a multiply: the default x86-64 target has no POPCNT instruction,
/// and `count_ones` then expands to about 15 instructions. Here each
/// nibble's parity lands in its low bit, and one multiplication sums those 16
/// bits into the top nibble (Bit Twiddling Hacks, "parity with a multiply").
#[inline(always)]
fn parity_mul(mut v: u64) -> u32 {
    v ^= v >> 1;
    v ^= v >> 2;
    v = (v & 0x1111_1111_1111_1111).wrapping_mul(0x1111_1111_1111_1111);
    ((v >> 60) & 1) as u32
}

/// Parity of the set bits of `v` with `count_ones`: one POPCNT instruction
/// when inlined into a function compiled with that feature.
#[inline(always)]
fn parity_popcnt(v: u64) -> u32 {
    v.count_ones() & 1
}

/// XOR of the two halves: same parity as `x`.
#[inline(always)]
fn fold(x: u128) -> u64 {
    x as u64 ^ (x >> 64) as u64
}

/// Whether this CPU has POPCNT (cached by `std` after the first call).
#[inline(always)]
fn has_popcnt() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("popcnt")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // Other targets either have a native population count in their
        // baseline or gain nothing from the detour; `count_ones` is right.
        true
    }
}

/// Columns a query checks before its first early exit. An absent key fails
/// one of them with probability 15/16, so the exit branch is predictable,
/// while the columns themselves are computed without branches (measured
/// against one exit per column, see docs/filters.md).
const EARLY_EXIT_COLUMNS: usize = 4;

/// One shard's entry in the shard table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RibbonShard {
    /// Where the shard's solution starts, in 16-byte words.
    pub word_offset: u32,
    /// Number of 128-slot blocks.
    pub num_blocks: u32,
    /// Blocks before this one store `upper_columns - 1` result bits per
    /// slot, the rest `upper_columns`.
    pub upper_start_block: u32,
    /// The seed whose rows the shard was solved with.
    pub seed: u8,
}

impl RibbonShard {
    #[inline]
    fn read(bytes: &[u8], at: usize) -> Option<RibbonShard> {
        let e: [u8; SHARD_ENTRY_BYTES] = bytes.get(at..at + SHARD_ENTRY_BYTES)?.try_into().ok()?;
        Some(RibbonShard {
            word_offset: u32::from_le_bytes([e[0], e[1], e[2], e[3]]),
            num_blocks: u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
            upper_start_block: u32::from_le_bytes([e[8], e[9], e[10], e[11]]),
            seed: e[12],
        })
    }

    fn write(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&self.word_offset.to_le_bytes());
        out[4..8].copy_from_slice(&self.num_blocks.to_le_bytes());
        out[8..12].copy_from_slice(&self.upper_start_block.to_le_bytes());
        out[12] = self.seed;
    }

    /// 16-byte words of solution for `upper` columns.
    fn words(&self, upper: u32) -> u64 {
        let usb = self.upper_start_block as u64;
        usb * (upper as u64 - 1) + (self.num_blocks as u64 - usb) * upper as u64
    }

    /// Number of possible start slots.
    fn num_starts(&self) -> u64 {
        self.num_blocks as u64 * W as u64 - (W as u64 - 1)
    }

    /// Share of start slots inside upper blocks (the query's chance of using
    /// `upper` columns).
    fn upper_start_share(&self) -> f64 {
        let upper_blocks = (self.num_blocks - self.upper_start_block) as u64;
        let upper_starts = (upper_blocks * W as u64).saturating_sub(W as u64 - 1);
        upper_starts as f64 / self.num_starts() as f64
    }
}

/// What a query needs of one shard, decoded once by [`RibbonLayout::parse`]
/// so that a query does no byte parsing and no seed arithmetic. 32 bytes:
/// two per cache line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ShardQuery {
    /// XORed into the key hash before the seeded remix.
    seed_mask: u64,
    /// Possible start slots (at least 1).
    num_starts: u64,
    /// Where the shard's solution starts, in 16-byte words.
    word_offset: u32,
    /// First block that stores `upper_columns` columns.
    upper_start_block: u32,
    /// For the narrow AVX-512 query, by block kind (0: the lower blocks,
    /// 1: the upper ones, see [`RibbonLayout::kinds`]): block `b` of that
    /// kind starts at byte `bases[kind] + b * stride`, modulo 2^32 (for the
    /// upper blocks the base is `word_offset * 16 - upper_start_block * 16`,
    /// as if the lower blocks had their column count too). Exact only when
    /// the solution is smaller than 4 GiB, which that path requires.
    bases: [u32; 2],
}

impl ShardQuery {
    /// The byte offset of the first column word of the block holding slot
    /// `start`, and that block's column count, in a layout of `upper`
    /// columns. Branch-free: blocks before `upper_start_block` store one
    /// column less, so the block's first word is `block * upper -
    /// min(block, upper_start_block)`.
    #[inline(always)]
    fn block_of(&self, start: usize, upper: usize) -> (usize, usize) {
        let block = start / W;
        let usb = self.upper_start_block as usize;
        let lower_blocks = block.min(usb);
        let here = (self.word_offset as usize + block * upper - lower_blocks) * WORD_BYTES;
        (here, upper - usize::from(block < usb))
    }
}

/// The blocks of one column count, for the narrow AVX-512 query (see
/// [`RibbonLayout::kinds`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BlockKind {
    /// Bytes per block: `columns * 16`.
    stride: u32,
    /// `bzhi(0xffff, 2 * columns)`: bit `i` selects 64-bit word `i` of the
    /// block's first 8 columns (the load masks: the low byte for columns
    /// 0-3, the high byte for 4-7).
    lanes: u16,
    /// `bzhi(0xffff, columns)`: the result bits a key starting in such a
    /// block checks (of the first 16).
    result_bits: u16,
}

impl BlockKind {
    fn new(columns: u32) -> BlockKind {
        let ones = |n: u32| (1u32 << n.min(16)).wrapping_sub(1) as u16;
        BlockKind {
            stride: columns * WORD_BYTES as u32,
            lanes: ones(2 * columns),
            result_bits: ones(columns),
        }
    }
}

/// Parameters of a Ribbon filter read from its trailer and shard table.
#[derive(Debug, Clone)]
pub struct RibbonLayout {
    num_shards: u32,
    upper_columns: u32,
    table_start: usize,
    /// One entry per shard; shared, so cloning a decoded filter is cheap.
    shards: Arc<[ShardQuery]>,
    /// The lower blocks' column count (`upper_columns - 1`, index 0) and the
    /// upper blocks' (index 1), for the narrow AVX-512 query.
    kinds: [BlockKind; 2],
    /// Bytes at least this long take the narrow AVX-512 query without
    /// bounds checks: `table_start` if this layout is one that query covers
    /// (`QueryPath::avx512` picks it: 2 to 8 columns, a solution under 4
    /// GiB), else `usize::MAX` (never).
    unchecked_len: usize,
    /// The query path this CPU takes (checked once, at parse). Same answers
    /// on every path.
    path: QueryPath,
    /// `path.query_fn()`: what [`may_contain`](Self::may_contain) calls, so
    /// that the dispatch is one load and one indirect jump.
    query: QueryFn,
}

/// Layouts are equal when they were parsed from the same table and take the
/// same path (`query` follows from `path`; function addresses are not
/// compared).
impl PartialEq for RibbonLayout {
    fn eq(&self, other: &Self) -> bool {
        self.num_shards == other.num_shards
            && self.upper_columns == other.upper_columns
            && self.table_start == other.table_start
            && self.shards == other.shards
            && self.kinds == other.kinds
            && self.unchecked_len == other.unchecked_len
            && self.path == other.path
    }
}

impl Eq for RibbonLayout {}

/// A query path's function, called by [`RibbonLayout::may_contain`].
///
/// Calling it is `unsafe`: the vector paths need CPU features, which
/// [`QueryPath::query_fn`] documents and [`RibbonLayout`] guarantees by
/// storing only `path.query_fn()` for a `path` the CPU can run.
type QueryFn = unsafe fn(&RibbonLayout, &[u8], u64) -> bool;

/// Which code checks a key's columns, picked once per parsed layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QueryPath {
    /// `mod avx512` for filters of 2 to 8 upper columns (every key has 1 to
    /// 8): one chunk of columns, no loop.
    Avx512Narrow,
    /// `mod avx512` for any column count: chunks of up to eight columns.
    Avx512,
    /// `mod avx2`: eight columns per chunk; fewer than two columns go to the
    /// scalar loop.
    Avx2,
    /// The scalar loop, with POPCNT when the CPU has it.
    Scalar,
}

impl QueryPath {
    fn detect(upper_columns: u32, table_start: usize) -> QueryPath {
        if cpu_has_avx512() {
            QueryPath::avx512(upper_columns, table_start)
        } else if cpu_has_avx2() {
            QueryPath::Avx2
        } else {
            QueryPath::Scalar
        }
    }

    /// The AVX-512 path for filters of `upper_columns` columns whose
    /// solution takes `table_start` bytes: the narrow one needs at most 8
    /// columns and block offsets that fit in 32 bits (`ShardQuery::bases`).
    fn avx512(upper_columns: u32, table_start: usize) -> QueryPath {
        if (2..=8).contains(&upper_columns) && u32::try_from(table_start).is_ok() {
            QueryPath::Avx512Narrow
        } else {
            QueryPath::Avx512
        }
    }

    /// The function [`RibbonLayout::may_contain`] calls on this path. It
    /// may only be called if the CPU has the path's features: AVX-512 F, VL,
    /// VBMI2, VPOPCNTDQ and BMI2 for `Avx512` and `Avx512Narrow`
    /// ([`cpu_has_avx512`]), AVX2 and BMI2 for `Avx2` ([`cpu_has_avx2`]);
    /// `Scalar` needs nothing.
    fn query_fn(self) -> QueryFn {
        #[cfg(target_arch = "x86_64")]
        match self {
            QueryPath::Avx512Narrow => RibbonLayout::may_contain_avx512_narrow,
            QueryPath::Avx512 => RibbonLayout::may_contain_avx512,
            QueryPath::Avx2 => RibbonLayout::may_contain_avx2_or_scalar,
            QueryPath::Scalar => RibbonLayout::may_contain_scalar_path,
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            // `detect` and `on_path` give `Scalar` on other targets.
            RibbonLayout::may_contain_scalar_path
        }
    }
}

/// Where a key's row lives in the solution, and the row itself.
struct Located {
    /// Byte offset of the key's first column word in its start block.
    here: usize,
    /// Result columns of the start block (the next block has at least as
    /// many).
    columns: usize,
    /// Start slot within its block: `0..128`.
    shift: u32,
    coeff: u128,
    result: u32,
}

impl RibbonLayout {
    /// Reads and validates the trailer and shard table: format id, checksum,
    /// column count in `1..=MAX_COLUMNS`, at least one shard, and every shard
    /// with at least one block, `upper_start_block <= num_blocks`, starting
    /// where the previous one ends, the last one ending exactly at the shard
    /// table. `None` if the bytes are not a consistent Ribbon filter. Never
    /// panics; costs one pass over the shard table.
    pub fn parse(bytes: &[u8]) -> Option<RibbonLayout> {
        let trailer_start = bytes.len().checked_sub(TRAILER_BYTES)?;
        let t = bytes.get(trailer_start..)?;
        if t[9] != FORMAT_RIBBON {
            return None;
        }
        let num_shards = u32::from_le_bytes([t[0], t[1], t[2], t[3]]);
        let upper_columns = t[4] as u32;
        let stored_crc = u32::from_le_bytes([t[5], t[6], t[7], t[8]]);
        if num_shards == 0 || upper_columns == 0 || upper_columns > MAX_COLUMNS {
            return None;
        }
        let table_len = (num_shards as usize).checked_mul(SHARD_ENTRY_BYTES)?;
        let table_start = trailer_start.checked_sub(table_len)?;
        let checked = bytes.get(table_start..trailer_start + 5)?;
        if crc32fast::hash(checked) != stored_crc {
            return None;
        }
        let mut shards = Vec::with_capacity(num_shards as usize);
        let mut next_word = 0u64;
        for i in 0..num_shards as usize {
            let shard = RibbonShard::read(bytes, table_start + i * SHARD_ENTRY_BYTES)?;
            if shard.num_blocks == 0
                || shard.upper_start_block > shard.num_blocks
                || shard.word_offset as u64 != next_word
            {
                return None;
            }
            // Modulo 2^32 (see `ShardQuery::bases`).
            let byte_offset = shard.word_offset.wrapping_mul(WORD_BYTES as u32);
            let lower_bytes = shard.upper_start_block.wrapping_mul(WORD_BYTES as u32);
            shards.push(ShardQuery {
                seed_mask: seed_mask(shard.seed),
                num_starts: shard.num_starts(),
                word_offset: shard.word_offset,
                upper_start_block: shard.upper_start_block,
                bases: [byte_offset, byte_offset.wrapping_sub(lower_bytes)],
            });
            next_word += shard.words(upper_columns);
        }
        if next_word.checked_mul(WORD_BYTES as u64)? != table_start as u64 {
            return None;
        }
        let path = QueryPath::detect(upper_columns, table_start);
        Some(RibbonLayout {
            num_shards,
            upper_columns,
            table_start,
            shards: shards.into(),
            kinds: [
                BlockKind::new(upper_columns - 1),
                BlockKind::new(upper_columns),
            ],
            unchecked_len: if QueryPath::avx512(upper_columns, table_start)
                == QueryPath::Avx512Narrow
            {
                table_start
            } else {
                usize::MAX
            },
            path,
            query: path.query_fn(),
        })
    }

    /// Number of shards.
    pub fn num_shards(&self) -> u32 {
        self.num_shards
    }

    /// Result bits per slot in the upper blocks of every shard.
    pub fn upper_columns(&self) -> u32 {
        self.upper_columns
    }

    /// Shard `index`'s table entry, `None` past the last shard.
    pub fn shard(&self, bytes: &[u8], index: u32) -> Option<RibbonShard> {
        if index >= self.num_shards {
            return None;
        }
        RibbonShard::read(bytes, self.table_start + index as usize * SHARD_ENTRY_BYTES)
    }

    /// Total slots over all shards.
    pub fn num_slots(&self, bytes: &[u8]) -> u64 {
        (0..self.num_shards)
            .filter_map(|i| self.shard(bytes, i))
            .map(|s| s.num_blocks as u64 * W as u64)
            .sum()
    }

    /// The false-positive rate the layout implies for a random absent key:
    /// shards are equally likely, and within a shard the start-weighted mix
    /// of `2^-(upper_columns-1)` and `2^-upper_columns`.
    pub fn expected_fp_rate(&self, bytes: &[u8]) -> f64 {
        let u = self.upper_columns as i32;
        let (upper_fp, lower_fp) = (2f64.powi(-u), 2f64.powi(1 - u));
        let total: f64 = (0..self.num_shards)
            .filter_map(|i| self.shard(bytes, i))
            .map(|s| {
                let f = s.upper_start_share();
                f * upper_fp + (1.0 - f) * lower_fp
            })
            .sum();
        total / self.num_shards as f64
    }

    /// Queries `bytes` (the bytes this layout was parsed from). Any bytes
    /// are safe: reads are bounds-checked, or (the narrow AVX-512 path)
    /// follow one check that `bytes` holds the whole solution; reads past
    /// the end of shorter bytes answer `true`.
    ///
    /// Uses AVX-512 over the result columns when the CPU has it (checked
    /// once, at parse), else AVX2, else POPCNT when the CPU has that
    /// (detected at run time), otherwise a portable parity; all give the
    /// same answer.
    #[inline]
    pub fn may_contain(&self, bytes: &[u8], key_hash: u64) -> bool {
        // SAFETY: `query` is `path.query_fn()` (set together in `parse` and
        // `on_path`), and `path` is a vector path only if the CPU reported
        // every feature that path's function enables (`QueryPath::detect`,
        // `on_path`), which is all `query_fn` asks of its callers.
        unsafe { (self.query)(self, bytes, key_hash) }
    }

    /// The AVX2 query, or the scalar one for start blocks with fewer than
    /// two columns. Out of line, like every path's function, so that
    /// [`may_contain`](Self::may_contain) is a tail call through
    /// [`query`](Self::query) and inlines into callers without making them
    /// save registers.
    ///
    /// Only called when `path` is `Avx2`.
    #[cfg(target_arch = "x86_64")]
    #[inline(never)]
    fn may_contain_avx2_or_scalar(&self, bytes: &[u8], key_hash: u64) -> bool {
        debug_assert_eq!(self.path, QueryPath::Avx2);
        // SAFETY: this is called only when `path` is `Avx2`, which it is only
        // if the CPU reported AVX2 and BMI2 when this layout was parsed
        // (`cpu_has_avx2`), the target features `may_contain_avx2` enables.
        if let Some(answer) = unsafe { self.may_contain_avx2(bytes, key_hash) } {
            return answer;
        }
        self.may_contain_scalar_path(bytes, key_hash)
    }

    /// The scalar query (POPCNT when the CPU has it), kept out of line so
    /// that [`may_contain`](Self::may_contain), a dispatch to out-of-line
    /// vector functions, stays small enough to inline into its callers.
    #[inline(never)]
    fn may_contain_scalar_path(&self, bytes: &[u8], key_hash: u64) -> bool {
        #[cfg(target_arch = "x86_64")]
        if has_popcnt() {
            // SAFETY: `may_contain_popcnt` only enables the `popcnt`
            // target feature, and `has_popcnt` just confirmed this CPU
            // supports it.
            return unsafe { self.may_contain_popcnt(bytes, key_hash) };
        }
        self.query(bytes, key_hash, parity_mul)
    }

    /// [`may_contain`](Self::may_contain) with the portable parity only,
    /// whatever the CPU; for tests that compare both paths.
    #[doc(hidden)]
    pub fn may_contain_portable(&self, bytes: &[u8], key_hash: u64) -> bool {
        self.query(bytes, key_hash, parity_mul)
    }

    /// This layout with [`may_contain`](Self::may_contain) forced onto the
    /// named path: `"avx512"`, `"avx2"` or `"scalar"` (POPCNT when the CPU
    /// has it); `None` for another name or a path this CPU cannot run. For
    /// benchmarks and tests.
    #[doc(hidden)]
    pub fn on_path(self, name: &str) -> Option<RibbonLayout> {
        let path = match name {
            "avx512" if cpu_has_avx512() => QueryPath::avx512(self.upper_columns, self.table_start),
            "avx2" if cpu_has_avx2() => QueryPath::Avx2,
            "scalar" => QueryPath::Scalar,
            _ => return None,
        };
        Some(RibbonLayout {
            path,
            query: path.query_fn(),
            ..self
        })
    }

    /// The scalar query (POPCNT when the CPU has it, else the portable
    /// parity), whatever path [`may_contain`](Self::may_contain) takes; for
    /// tests that compare the paths.
    #[doc(hidden)]
    pub fn may_contain_scalar(&self, bytes: &[u8], key_hash: u64) -> bool {
        #[cfg(target_arch = "x86_64")]
        if has_popcnt() {
            // SAFETY: `may_contain_popcnt` only enables the `popcnt` target
            // feature, and `has_popcnt` just confirmed this CPU supports it.
            return unsafe { self.may_contain_popcnt(bytes, key_hash) };
        }
        self.query(bytes, key_hash, parity_mul)
    }

    /// Whether [`may_contain`](Self::may_contain) takes the AVX2 path on
    /// this CPU (it has AVX2 and BMI2 but not the AVX-512 features of
    /// [`uses_avx512`](Self::uses_avx512)); for tests.
    #[doc(hidden)]
    pub fn uses_avx2(&self) -> bool {
        self.path == QueryPath::Avx2
    }

    /// Whether [`may_contain`](Self::may_contain) takes the AVX-512 path on
    /// this CPU (AVX-512 F, VL, VBMI2, VPOPCNTDQ and BMI2); for tests.
    #[doc(hidden)]
    pub fn uses_avx512(&self) -> bool {
        matches!(self.path, QueryPath::Avx512 | QueryPath::Avx512Narrow)
    }

    /// The AVX2 query (scalar for start blocks with fewer than two columns)
    /// whatever path [`may_contain`](Self::may_contain) takes; `None` if the
    /// CPU lacks AVX2 or BMI2. For tests that compare the paths.
    #[doc(hidden)]
    pub fn may_contain_avx2_path(&self, bytes: &[u8], key_hash: u64) -> Option<bool> {
        #[cfg(target_arch = "x86_64")]
        if cpu_has_avx2() {
            // SAFETY: `cpu_has_avx2` just confirmed AVX2 and BMI2, the
            // target features `may_contain_avx2` enables.
            let answer = unsafe { self.may_contain_avx2(bytes, key_hash) };
            return Some(answer.unwrap_or_else(|| self.may_contain_scalar(bytes, key_hash)));
        }
        let _ = (bytes, key_hash);
        None
    }

    /// The AVX-512 query whatever path [`may_contain`](Self::may_contain)
    /// takes; `None` if the CPU lacks one of its features. For tests that
    /// compare the paths.
    #[doc(hidden)]
    pub fn may_contain_avx512_path(&self, bytes: &[u8], key_hash: u64) -> Option<bool> {
        #[cfg(target_arch = "x86_64")]
        if cpu_has_avx512() {
            // SAFETY: `cpu_has_avx512` just confirmed every target feature
            // `may_contain_avx512` enables.
            return Some(
                if QueryPath::avx512(self.upper_columns, self.table_start)
                    == QueryPath::Avx512Narrow
                {
                    // SAFETY: as above.
                    unsafe { self.may_contain_avx512_narrow(bytes, key_hash) }
                } else {
                    // SAFETY: as above.
                    unsafe { self.may_contain_avx512(bytes, key_hash) }
                },
            );
        }
        let _ = (bytes, key_hash);
        None
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "popcnt")]
    fn may_contain_popcnt(&self, bytes: &[u8], key_hash: u64) -> bool {
        self.query(bytes, key_hash, parity_popcnt)
    }

    /// The answer, or `None` if the key's start block has fewer than two
    /// columns: the vector path reads columns in pairs, and one column (or
    /// none: the lower blocks of a 1-column filter) is left to the scalar
    /// loop, so that the vector path keeps nothing live for it.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,bmi2")]
    fn may_contain_avx2(&self, bytes: &[u8], key_hash: u64) -> Option<bool> {
        let Some(key) = self.locate(key_hash) else {
            return Some(true);
        };
        avx2::check_columns(bytes, &key)
    }

    /// The AVX-512 query: every column count, no scalar fallback.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vl,avx512vbmi2,avx512vpopcntdq,bmi2")]
    fn may_contain_avx512(&self, bytes: &[u8], key_hash: u64) -> bool {
        let Some(key) = self.locate(key_hash) else {
            return true;
        };
        avx512::check_columns(bytes, &key)
    }

    /// The AVX-512 query for layouts of 2 to 8 upper columns (every start
    /// block has 1 to 8): one chunk.
    ///
    /// One length check per call (`bytes` covers the solution, which
    /// [`parse`](Self::parse) checked holds every read a key can make), then
    /// no bounds checks; shorter bytes, and layouts this query does not
    /// cover, go to the bounds-checked scalar path.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vl,avx512vbmi2,avx512vpopcntdq,bmi2")]
    fn may_contain_avx512_narrow(&self, bytes: &[u8], key_hash: u64) -> bool {
        if bytes.len() < self.unchecked_len {
            return self.may_contain_checked(bytes, key_hash);
        }
        // SAFETY: `unchecked_len` is `table_start` only for a layout that
        // `QueryPath::avx512` gives the narrow path (else `usize::MAX`, which
        // no slice length reaches), so this layout, which came from `parse`,
        // meets `narrow_unchecked`'s conditions on it, and `bytes` has at
        // least `table_start` readable bytes (just checked); the CPU has
        // every feature `narrow_unchecked` needs (this function's target
        // features).
        unsafe { avx512::narrow_unchecked(self, bytes.as_ptr(), key_hash) }
    }

    /// The narrow AVX-512 query's answer for bytes shorter than the solution
    /// this layout was parsed from (or a layout it does not cover): the
    /// bounds-checked scalar query, whose reads past the end answer "may
    /// contain" (the answer every path gives).
    #[cold]
    #[inline(never)]
    fn may_contain_checked(&self, bytes: &[u8], key_hash: u64) -> bool {
        self.may_contain_scalar_path(bytes, key_hash)
    }

    /// The key's shard, row and position in the solution; `None` if the
    /// layout has no shard for it (impossible for a parsed layout).
    ///
    /// Branch-free after the shard lookup: the start block's column count
    /// and first word come from `min` rather than a test against the first
    /// upper block.
    #[inline(always)]
    fn locate(&self, key_hash: u64) -> Option<Located> {
        let index = fastrange64(key_hash, self.num_shards as u64) as usize;
        let shard = self.shards.get(index)?;
        let h1 = seeded_with_mask(key_hash, shard.seed_mask);
        let row = row_from_seeded(h1, shard.num_starts);
        let (here, columns) = shard.block_of(row.start, self.upper_columns as usize);
        Some(Located {
            here,
            columns,
            shift: (row.start % W) as u32,
            coeff: row.coeff,
            result: row.result,
        })
    }

    #[inline(always)]
    fn query(&self, bytes: &[u8], key_hash: u64, parity64: impl Fn(u64) -> u32) -> bool {
        match self.locate(key_hash) {
            Some(key) => Self::check_columns(bytes, &key, parity64),
            None => true,
        }
    }

    /// The scalar column loop: one parity per result column.
    #[inline(always)]
    fn check_columns(bytes: &[u8], key: &Located, parity64: impl Fn(u64) -> u32) -> bool {
        let (here, columns, shift) = (key.here, key.columns, key.shift);
        // The key's 128 slots are bits `shift..128` of its start block's
        // words and bits `0..shift` of the next block's. Rather than shifting
        // every solution word into a window, split the coefficients once:
        // `low` masks the start block's word, `high` the next block's.
        let low = key.coeff << shift;
        let word = |chunk: &[u8]| <[u8; WORD_BYTES]>::try_from(chunk).map(u128::from_le_bytes);
        // Columns are checked in a branch-free group of EARLY_EXIT_COLUMNS,
        // then the rest: `diff` collects mismatching columns.
        let mut diff = 0u32;
        if shift == 0 {
            let Some(words) = bytes.get(here..here + columns * WORD_BYTES) else {
                return true;
            };
            for (j, chunk) in words.chunks_exact(WORD_BYTES).enumerate() {
                let Ok(w) = word(chunk) else { return true };
                diff |= parity64(fold(w & low)) ^ ((key.result >> j) & 1);
                if j + 1 == EARLY_EXIT_COLUMNS && diff != 0 {
                    return false;
                }
            }
        } else {
            let high = key.coeff >> (W as u32 - shift);
            // The next block follows and stores at least `columns` columns.
            let Some(words) = bytes.get(here..here + 2 * columns * WORD_BYTES) else {
                return true;
            };
            let (this_block, next_block) = words.split_at(columns * WORD_BYTES);
            let pairs = this_block
                .chunks_exact(WORD_BYTES)
                .zip(next_block.chunks_exact(WORD_BYTES));
            for (j, (c0, c1)) in pairs.enumerate() {
                let (Ok(w0), Ok(w1)) = (word(c0), word(c1)) else {
                    return true;
                };
                diff |= parity64(fold((w0 & low) ^ (w1 & high))) ^ ((key.result >> j) & 1);
                if j + 1 == EARLY_EXIT_COLUMNS && diff != 0 {
                    return false;
                }
            }
        }
        diff == 0
    }
}

/// Whether this CPU has AVX2 and BMI2 (the Ribbon query's vector path; BMI2
/// only lets the row hashing use `mulx` and `rorx`, every AVX2 CPU has it).
fn cpu_has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("bmi2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this CPU has what the AVX-512 query uses: AVX-512 F and VL (masked
/// loads, ternary logic, 256-bit permutes), VBMI2 (the funnel shift that
/// builds the window), VPOPCNTDQ (the parities) and BMI2 (the row hashing's
/// `mulx` and `rorx`).
fn cpu_has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        // avx2 and fma too: rustc treats avx512f as implying them, and older
        // std versions did not check them as part of `avx512f`.
        has!("avx512f")
            && has!("avx2")
            && has!("fma")
            && has!("avx512vl")
            && has!("avx512vbmi2")
            && has!("avx512vpopcntdq")
            && has!("bmi2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The AVX-512 query: up to eight columns of both blocks per chunk, one
/// chunk for the usual rates (8 result bits or fewer).
///
/// The window (`coeff << shift` over the start block's word and the next
/// block's) is built in a 256-bit register by one masked `valignq` (whole
/// words), one `valignq` (the word below each) and one `vpshldvq` (the bits
/// within a word), and its low and high halves are broadcast to all four
/// 128-bit lanes of a zmm. A chunk of `n <= 8` columns
/// is two masked 64-byte loads per block (columns 0-3 and 4-7 of the chunk;
/// lanes past the last column are zero and never read), masked and combined
/// by one AND and one `vpternlogq` per 64 bytes: `(w0 & low) ^ (w1 &
/// high)`. `vpunpcklqdq` / `vpunpckhqdq` and a three-way XOR fold each
/// column's two 64-bit halves into one 64-bit lane (eight columns in one
/// zmm) and XOR in the column's result bit at bit 0, so a column matches
/// iff its lane has even parity: one `vpopcntq` and one `vptestmq` of the
/// counts' bit 0 give the mismatching columns as a mask.
///
/// This module has `unsafe` because `#[target_feature]` functions and the
/// vector loads need it. The loads of `check_columns` stay inside a slice
/// whose length was checked first; those of `narrow_unchecked` inside the
/// solution, whose length its caller checked once (see its `# Safety`).
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{
        fastrange64, row_from_seeded, seeded_with_mask, Located, QueryPath, RibbonLayout, W,
        WORD_BYTES,
    };
    use std::arch::x86_64::*;

    /// `vpternlogq` truth tables: `a ^ (b & c)` and `a ^ b ^ c`.
    const XOR_AND: i32 = 0x78;
    const XOR3: i32 = 0x96;

    /// `lanes` for the first `n` columns of a chunk (`n <= 8`): bit `i`
    /// selects 64-bit word `i`, two per column.
    #[inline]
    #[target_feature(enable = "bmi2")]
    fn lanes(n: usize) -> u16 {
        // `bzhi` reads the low 8 bits of its index and keeps all 16 bits
        // from 16 up: `min(i / 2, 8)` columns, `i` = those 8 bits of `2n`,
        // never more than `n` (`n < 8` gives `i = 2n`).
        _bzhi_u32(0xffff, (2 * n) as u32) as u16
    }

    /// Whether any of the columns that `lanes` selects (`lanes(n)` for `n`
    /// columns, `1..=8`) differs from the key's result bits `bits` (bit `k`
    /// = the column `k` after `at`, zero from bit `n` up). The columns'
    /// start block words begin at `at`, their next block words at `at +
    /// next`; `low` and `high` are the window halves broadcast to every
    /// 128-bit lane.
    ///
    /// # Safety
    ///
    /// `lanes` is `lanes(n)`, the `n * 16` bytes at `at` and at `at + next`
    /// are readable, and the CPU must support AVX-512 F and VPOPCNTDQ.
    #[inline]
    #[target_feature(enable = "avx512f,avx512vpopcntdq")]
    unsafe fn chunk_differs(
        at: *const u8,
        next: usize,
        lanes: u16,
        low: __m512i,
        high: __m512i,
        bits: u32,
    ) -> bool {
        // Two 64-bit words per column: the first register takes the first
        // four columns, the second the rest.
        let (m0, m1) = (lanes as u8, (lanes >> 8) as u8);
        let load = |offset: usize, mask: u8| {
            // SAFETY: the lanes `mask` selects are the bytes `offset..offset
            // + 8 * popcount(mask)` from `at` (`lanes(n)` is contiguous from
            // bit 0), within the first `n` columns, so within the `n * 16`
            // readable bytes at `at` or at `at + next` by the caller's
            // contract; masked-off lanes are not accessed (and do not
            // fault), and `wrapping_add` makes computing an address past
            // them for an all-zero mask harmless.
            unsafe { _mm512_maskz_loadu_epi64(mask, at.wrapping_add(offset).cast::<i64>()) }
        };
        let x0 = _mm512_ternarylogic_epi64::<XOR_AND>(
            _mm512_and_si512(load(0, m0), low),
            load(next, m0),
            high,
        );
        let x1 = _mm512_ternarylogic_epi64::<XOR_AND>(
            _mm512_and_si512(load(64, m1), low),
            load(next + 64, m1),
            high,
        );
        // After the unpack below, 64-bit lane `2k` holds column `k` of the
        // chunk and lane `2k + 1` column `k + 4`: shift each lane's result
        // bit to bit 0 (a constant vector, so the compiler knows every shift
        // is below 64).
        let lane_column = _mm512_set_epi64(7, 3, 6, 2, 5, 1, 4, 0);
        let expected = _mm512_and_si512(
            _mm512_srlv_epi64(_mm512_set1_epi64(bits as i64), lane_column),
            _mm512_set1_epi64(1),
        );
        // Lane 2k: column k (both halves XORed), lane 2k + 1: column k + 4.
        let folded = _mm512_ternarylogic_epi64::<XOR3>(
            _mm512_unpacklo_epi64(x0, x1),
            _mm512_unpackhi_epi64(x0, x1),
            expected,
        );
        let counts = _mm512_popcnt_epi64(folded);
        _mm512_test_epi64_mask(counts, _mm512_set1_epi64(1)) != 0
    }

    /// Same answer as `RibbonLayout::check_columns` for layouts of 2 to 8
    /// upper columns (every key has 1 to 8): one chunk, and no bounds
    /// checks.
    ///
    /// # Safety
    ///
    /// `layout` comes from `RibbonLayout::parse` (so its shards lie one after
    /// another in the solution, which ends at `table_start`, and it has
    /// `num_shards` of them) and `layout.table_start <= u32::MAX` (so that
    /// `ShardQuery::bases` are exact; both hold when `QueryPath::avx512`
    /// picked this path), `solution` points to at least `layout.table_start`
    /// readable bytes, and the CPU supports AVX-512 F, VL, VBMI2, VPOPCNTDQ
    /// and BMI2.
    #[inline]
    #[target_feature(enable = "avx512f,avx512vl,avx512vbmi2,avx512vpopcntdq,bmi2")]
    pub(super) unsafe fn narrow_unchecked(
        layout: &RibbonLayout,
        solution: *const u8,
        key_hash: u64,
    ) -> bool {
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
        let (block, shift) = (row.start / W, row.start % W);
        let upper = usize::from(block >= shard.upper_start_block as usize);
        let kind = &layout.kinds[upper];
        // Modulo 2^32, exact for solutions below 4 GiB (this path's
        // condition, see `ShardQuery::bases`).
        let here = shard.bases[upper].wrapping_add((block as u32).wrapping_mul(kind.stride));
        let (here, stride) = (here as usize, kind.stride as usize);
        let bits = row.result & u32::from(kind.result_bits);
        // With a block-aligned start the window has no high half; the "next
        // block" is then the start block again (ANDed with zero), so that
        // the read stays inside the shard even for its last block.
        let next = if shift == 0 { 0 } else { stride };
        let (low, high) = window(row.coeff, shift as u32);
        // SAFETY: `start < num_starts = 128 * num_blocks - 127`, so the start
        // block is one of the shard's blocks, and unless the start is
        // block-aligned (`next == 0`) it is not the last one. `kind` is the
        // start block's, so `here` is the block's first byte (`parse` set
        // `bases` so, exact below 4 GiB: this path's condition) and
        // `stride` its `columns * 16` bytes: the `columns` words at `here`
        // and at `here + next` are words of the shard, which `parse`
        // checked lie below `table_start`, within `solution`'s readable
        // bytes (the caller's contract). `kind.lanes` is `lanes(min(columns,
        // 8))` (`BlockKind::new`). The CPU has AVX-512 F and VPOPCNTDQ (this
        // function's target features).
        !unsafe {
            chunk_differs(
                solution.wrapping_add(here),
                next,
                kind.lanes,
                low,
                high,
                bits,
            )
        }
    }

    /// Same answer as `RibbonLayout::check_columns`, for any column count:
    /// chunks of eight columns.
    #[inline]
    #[target_feature(enable = "avx512f,avx512vl,avx512vbmi2,avx512vpopcntdq,bmi2")]
    pub(super) fn check_columns(bytes: &[u8], key: &Located) -> bool {
        let columns = key.columns;
        let Some((words, next)) = key_words(bytes, key) else {
            return true;
        };
        let (low, high) = window(key.coeff, key.shift);
        let mut first = 0;
        while first < columns {
            let n = (columns - first).min(8);
            let at = words.as_ptr().wrapping_add(first * WORD_BYTES);
            // SAFETY: `first + n <= columns`, so the `n` words at `first`
            // and at `next + first` end at most at `next + columns * 16 ==
            // words.len()` (`key_words`): they are bytes of `words`; `lanes`
            // is `lanes(n)`. The CPU has AVX-512 F and VPOPCNTDQ (this
            // function's target features).
            let bits = _bzhi_u32(key.result >> first, n as u32);
            if unsafe { chunk_differs(at, next, lanes(n), low, high, bits) } {
                return false;
            }
            first += 8;
        }
        true
    }

    /// The bytes a key's columns live in, from its start block's first word:
    /// `columns` words of the start block, then (unless the start is
    /// block-aligned) `columns` words of the next block, which begin at the
    /// returned offset `next`; `None` if `bytes` is too short. With a
    /// block-aligned start the window has no high half; `next` is then 0
    /// (the start block again, ANDed with zero) so that the read stays
    /// inside the shard even for its last block.
    #[inline(always)]
    fn key_words<'a>(bytes: &'a [u8], key: &Located) -> Option<(&'a [u8], usize)> {
        let next = if key.shift == 0 {
            0
        } else {
            key.columns * WORD_BYTES
        };
        // Two comparisons and no overflow check: `here <= bytes.len()`, then
        // the length of the rest.
        let words = bytes
            .get(key.here..)?
            .get(..next + key.columns * WORD_BYTES)?;
        Some((words, next))
    }

    /// The key's window `coeff << shift` over the start block's word (the
    /// first result, `low`) and the next block's (`high`), each broadcast to
    /// every 128-bit lane.
    ///
    /// `[c0, c1, 0, 0]` is shifted left as one 256-bit number: by one whole
    /// word when `shift >= 64` (a `valignq` with zero, masked by that test),
    /// then the bits within a word by a funnel shift with the word below
    /// (`valignq` with zero: the moved words one word up; `vpshldvq` reads
    /// the low six bits of the count, and `shift % 64 == 0` keeps the word
    /// as it is).
    #[inline]
    #[target_feature(enable = "avx512f,avx512vl,avx512vbmi2")]
    fn window(coeff: u128, shift: u32) -> (__m512i, __m512i) {
        let coeff = _mm256_set_epi64x(0, 0, (coeff >> 64) as i64, coeff as i64);
        let shift = _mm256_set1_epi64x(shift as i64);
        let zero = _mm256_setzero_si256();
        let whole = _mm256_test_epi64_mask(shift, _mm256_set1_epi64x(64));
        let moved = _mm256_mask_alignr_epi64::<3>(coeff, whole, coeff, zero);
        let carried = _mm256_alignr_epi64::<3>(moved, zero);
        let window = _mm512_castsi256_si512(_mm256_shldv_epi64(moved, carried, shift));
        (
            _mm512_shuffle_i64x2::<0b00_00_00_00>(window, window),
            _mm512_shuffle_i64x2::<0b01_01_01_01>(window, window),
        )
    }
}

/// The AVX2 query: all result columns of a key at once.
///
/// The key's window is the 256-bit value `coeff << shift` over the start
/// block's word (bits 0..128) and the next block's (bits 128..256). Two
/// adjacent columns of a block are one 32-byte load, so a pair of columns is
/// two loads, two ANDs (with the window's low half broadcast to both 128-bit
/// lanes, and its high half) and an XOR. Four pairs (eight columns) are
/// reduced together: unpack and XOR to one 64-bit word per column, one
/// shuffle and XOR to one 32-bit word per column, two shift-XORs, an AND and
/// one multiplication to put each column's parity in bit 31, XOR with the
/// key's result bits shifted there, and one `vtestps` of the bits 31 tells
/// whether any column differs.
///
/// This module has `unsafe` because `#[target_feature]` functions and the
/// vector loads need it; the loads stay inside a slice whose length was
/// checked first.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Located, WORD_BYTES};
    use std::arch::x86_64::*;

    /// `vpermd` indices that move the 64-bit words of `[c0, c1, 0, 0]` up
    /// by 0, 1 or 2 words, filling with the zero words.
    static SHIFT_WORDS: [[i32; 8]; 3] = [
        [0, 1, 2, 3, 4, 5, 6, 7],
        [4, 5, 0, 1, 2, 3, 4, 5],
        [4, 5, 4, 5, 0, 1, 2, 3],
    ];

    /// Lane `i` of the reduced vector of a chunk holds column `a_(i % 4) +
    /// i / 4`, where pair `q` covers columns `a_q = min(first + 2q,
    /// columns - 2)` and `a_q + 1`. These are `31 - column` for the first
    /// chunk (`first == 0`) of 6, 7 and 8 or more columns: the shifts that
    /// bring each lane's result bit to bit 31.
    static FIRST_CHUNK_SHIFTS: [[i32; 8]; 3] = {
        let mut table = [[0; 8]; 3];
        let mut columns = 6;
        while columns <= 8 {
            let mut lane = 0;
            while lane < 8 {
                let pair = 2 * (lane % 4) as i32;
                let last_pair = columns - 2;
                let first = if pair < last_pair { pair } else { last_pair };
                table[(columns - 6) as usize][lane] = 31 - (first + (lane / 4) as i32);
                lane += 1;
            }
            columns += 1;
        }
        table
    };

    /// The relative pair starts and second-column offsets of lanes, for
    /// other chunks: see [`FIRST_CHUNK_SHIFTS`].
    static PAIR_FIRST: [i32; 8] = [0, 2, 4, 6, 0, 2, 4, 6];
    static PAIR_SECOND: [i32; 8] = [0, 0, 0, 0, 1, 1, 1, 1];

    /// Loads 32 bytes at `at` of `words`.
    ///
    /// # Safety
    ///
    /// `at + 32 <= words.len()`, and the CPU must support AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load32(words: &[u8], at: usize) -> __m256i {
        debug_assert!(at + 32 <= words.len());
        // SAFETY: the caller guarantees `at + 32 <= words.len()`, so the
        // unaligned 32-byte load reads only bytes of `words`.
        unsafe { _mm256_loadu_si256(words.as_ptr().add(at).cast::<__m256i>()) }
    }

    /// Loads an `[i32; 8]` as a vector.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn load_i32x8(v: &[i32; 8]) -> __m256i {
        // SAFETY: `v` is 32 readable bytes; the load is unaligned.
        unsafe { _mm256_loadu_si256(v.as_ptr().cast::<__m256i>()) }
    }

    /// Eight columns, as four pairs starting at byte offsets `at` (each at
    /// most `columns * 16 - 32`) of the start block (`words`) and of the
    /// next block (`words[next..]`): the parity of each column's masked
    /// solution bits in bit 31 of a 32-bit lane, lane `i` for the pair
    /// `at[i % 4]`, its column `i / 4` (other bits are garbage).
    ///
    /// # Safety
    ///
    /// `next + at[q] + 32 <= words.len()` for every `q`, and the CPU must
    /// support AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn chunk_parities(
        words: &[u8],
        next: usize,
        at: [usize; 4],
        low: __m256i,
        high: __m256i,
    ) -> __m256i {
        let pair = |at: usize| {
            // SAFETY: the caller guarantees `next + at + 32 <=
            // words.len()`, which covers both loads.
            let (w0, w1) = unsafe { (load32(words, at), load32(words, next + at)) };
            // 64-bit words: [a lo, a hi, a+1 lo, a+1 hi].
            _mm256_xor_si256(_mm256_and_si256(w0, low), _mm256_and_si256(w1, high))
        };
        let (p0, p1, p2, p3) = (pair(at[0]), pair(at[1]), pair(at[2]), pair(at[3]));
        // One 64-bit word per column: [a0, a1 | a0+1, a1+1].
        let z01 = _mm256_xor_si256(_mm256_unpacklo_epi64(p0, p1), _mm256_unpackhi_epi64(p0, p1));
        let z23 = _mm256_xor_si256(_mm256_unpacklo_epi64(p2, p3), _mm256_unpackhi_epi64(p2, p3));
        // One 32-bit word per column: [a0, a1, a2, a3 | a0+1, .., a3+1].
        let (z01, z23) = (_mm256_castsi256_ps(z01), _mm256_castsi256_ps(z23));
        let mut x = _mm256_castps_si256(_mm256_xor_ps(
            _mm256_shuffle_ps::<0b10_00_10_00>(z01, z23),
            _mm256_shuffle_ps::<0b11_01_11_01>(z01, z23),
        ));
        // Parity of each 32-bit lane into its bit 31: each nibble's parity
        // into the nibble's bit 0, then one multiplication sums those eight
        // bits into bits 31.. (the partial sums below stay under bit 31).
        x = _mm256_xor_si256(x, _mm256_srli_epi32::<1>(x));
        x = _mm256_xor_si256(x, _mm256_srli_epi32::<2>(x));
        x = _mm256_and_si256(x, _mm256_set1_epi32(0x1111_1111));
        _mm256_mullo_epi32(x, _mm256_set1_epi32(0x8888_8888_u32 as i32))
    }

    /// Same answer as `RibbonLayout::check_columns` for `key.columns >= 2`;
    /// `None` for fewer columns.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) fn check_columns(bytes: &[u8], key: &Located) -> Option<bool> {
        let columns = key.columns;
        if columns < 2 {
            return None;
        }
        let shift = key.shift;
        // The next block's words, relative to `here`. With a block-aligned
        // start the window has no high half; point the "next block" at the
        // start block instead (ANDed with zero) so that the read stays inside
        // the shard even for its last block.
        let next = if shift == 0 { 0 } else { columns * WORD_BYTES };
        let Some(words) = bytes.get(key.here..key.here + next + columns * WORD_BYTES) else {
            return Some(true);
        };

        // The window: [c0, c1, 0, 0] shifted left by `shift` bits as one
        // 256-bit number. Whole words by `vpermd`, then the bits within a
        // word; `srlv` by 64 gives 0, so `bits == 0` needs no special case.
        let coeff =
            _mm256_zextsi128_si256(_mm_set_epi64x((key.coeff >> 64) as i64, key.coeff as i64));
        let (whole, bits) = ((shift / 64) as usize, (shift % 64) as i64);
        let moved = _mm256_permutevar8x32_epi32(coeff, load_i32x8(&SHIFT_WORDS[whole]));
        let carried = _mm256_permutevar8x32_epi32(coeff, load_i32x8(&SHIFT_WORDS[whole + 1]));
        let window = _mm256_or_si256(
            _mm256_sllv_epi64(moved, _mm256_set1_epi64x(bits)),
            _mm256_srlv_epi64(carried, _mm256_set1_epi64x(64 - bits)),
        );
        // Both lanes `low` (masks the start block), both lanes `high`.
        let low = _mm256_permute4x64_epi64::<0b01_00_01_00>(window);
        let high = _mm256_permute4x64_epi64::<0b11_10_11_10>(window);
        let result = _mm256_set1_epi32(key.result as i32);

        // Pair q covers columns a_q and a_q + 1, a_q = first + 2q clamped so
        // that the pair stays inside the block; a clamped pair repeats
        // columns already checked, against the same result bits.
        let last_pair = columns - 2;
        let at =
            |first: usize| [0, 2, 4, 6].map(|q: usize| (first + q).min(last_pair) * WORD_BYTES);
        let mut first = 0;
        if columns >= 6 {
            // The usual case (rates of 2^-5 and below): only the fourth
            // pair of the first chunk can need clamping.
            let at = [0, 32, 64, (3 * 32).min(last_pair * WORD_BYTES)];
            // SAFETY: every offset is at most `(columns - 2) * 16` (as
            // `columns >= 6`), so `next + at + 32 <= next + columns * 16 ==
            // words.len()`; the CPU has AVX2 (this function's target
            // feature).
            let parities = unsafe { chunk_parities(words, next, at, low, high) };
            let shifts = load_i32x8(&FIRST_CHUNK_SHIFTS[columns.min(8) - 6]);
            let mismatch = _mm256_xor_si256(parities, _mm256_sllv_epi32(result, shifts));
            if _mm256_testz_ps(_mm256_castsi256_ps(mismatch), _mm256_castsi256_ps(mismatch)) == 0 {
                return Some(false);
            }
            first = 8;
        }
        // Fewer than six columns, or more than eight (rates below 2^-8):
        // eight at a time.
        while first < columns {
            // SAFETY: every offset is at most `(columns - 2) * 16`, so
            // `next + at + 32 <= next + columns * 16 == words.len()`; the
            // CPU has AVX2 (this function's target feature).
            let parities = unsafe { chunk_parities(words, next, at(first), low, high) };
            let column = _mm256_add_epi32(
                _mm256_min_epi32(
                    _mm256_add_epi32(_mm256_set1_epi32(first as i32), load_i32x8(&PAIR_FIRST)),
                    _mm256_set1_epi32(last_pair as i32),
                ),
                load_i32x8(&PAIR_SECOND),
            );
            let expected =
                _mm256_sllv_epi32(result, _mm256_sub_epi32(_mm256_set1_epi32(31), column));
            let mismatch = _mm256_xor_si256(parities, expected);
            if _mm256_testz_ps(_mm256_castsi256_ps(mismatch), _mm256_castsi256_ps(mismatch)) == 0 {
                return Some(false);
            }
            first += 8;
        }
        Some(true)
    }
}

/// Slot overhead (slots / keys - 1) a shard of `num_keys` keys is built
/// with, chosen from measurement (`cargo run --release --example
/// ribbon_overhead`, see docs/filters.md) so that about 1 seed in 20
/// fails. The slot count is then rounded to the nearest whole 128-slot block
/// (nearest rather than up, so rounding adds nothing on average).
pub fn overhead_for_keys(num_keys: usize) -> f64 {
    // (log2 keys, overhead) points, linear in log2(keys) between them; past
    // the last point +0.38% per doubling (RocksDB's growth rate).
    const POINTS: [(f64, f64); 6] = [
        (10.0, 0.022),
        (12.0, 0.022),
        (13.0, 0.0235),
        (15.0, 0.0295),
        (17.0, 0.032),
        (20.0, 0.039),
    ];
    let x = (num_keys.max(1) as f64).log2();
    if x <= POINTS[0].0 {
        return POINTS[0].1;
    }
    for pair in POINTS.windows(2) {
        let ((x0, y0), (x1, y1)) = (pair[0], pair[1]);
        if x <= x1 {
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
        }
    }
    let (xl, yl) = POINTS[POINTS.len() - 1];
    yl + 0.0038 * (x - xl)
}

/// Build knobs for tests and the overhead tool.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BuildKnobs {
    /// Fixed slot overhead for every shard instead of [`overhead_for_keys`],
    /// clamped to [-1, 10]
    /// (may be negative to force failures).
    pub overhead: Option<f64>,
    /// Seeds a shard may try (at most [`MAX_SEEDS`]).
    pub max_seeds: u32,
    /// Keys per shard to aim at.
    pub shard_keys: usize,
    /// The back substitution to use (every one must write the same bytes).
    pub solve_path: SolvePath,
}

impl Default for BuildKnobs {
    fn default() -> Self {
        BuildKnobs {
            overhead: None,
            max_seeds: MAX_SEEDS,
            shard_keys: SHARD_KEYS,
            solve_path: SolvePath::Fastest,
        }
    }
}

/// What a build did (for tests and the overhead tool).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BuildOutcome {
    /// Shards built (0 when the Ribbon build was not attempted).
    pub shards: u32,
    /// Seeds that failed, over all shards.
    pub failed_seeds: u32,
    /// True when the bytes are a blocked Bloom filter.
    pub fell_back_to_bloom: bool,
}

/// Policy for the standard Ribbon filter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RibbonPolicy {
    fp_rate: f64,
    bloom_bits_per_key: f64,
}

impl RibbonPolicy {
    /// The name recorded in tables built with this policy.
    pub const NAME: &'static str = "sievedb.Ribbon";

    /// A Ribbon filter with the false-positive rate of a blocked Bloom filter
    /// at `bloom_equivalent_bits_per_key` (10.0 gives about 0.954% at about
    /// 7 bits/key). Out-of-range values are clamped like
    /// [`BloomPolicy::new`]: below 1 becomes 1, above 100 becomes 100, NaN
    /// becomes 10. Use [`try_new`](Self::try_new) to reject them.
    pub fn new(bloom_equivalent_bits_per_key: f64) -> RibbonPolicy {
        let bpk = BloomPolicy::new(bloom_equivalent_bits_per_key).bits_per_key();
        Self::from_bloom_bits(bpk)
    }

    /// Like [`new`](Self::new) but returns [`Error::InvalidArgument`] for NaN,
    /// infinite, values below 1 or above 100.
    pub fn try_new(bloom_equivalent_bits_per_key: f64) -> Result<RibbonPolicy> {
        let bpk = BloomPolicy::try_new(bloom_equivalent_bits_per_key)
            .map_err(|_| {
                Error::invalid(format!(
                    "ribbon bloom-equivalent bits per key must be in [1, 100], \
                     got {bloom_equivalent_bits_per_key}"
                ))
            })?
            .bits_per_key();
        Ok(Self::from_bloom_bits(bpk))
    }

    fn from_bloom_bits(bpk: f64) -> RibbonPolicy {
        RibbonPolicy {
            fp_rate: blocked_bloom_fp_rate(bpk, probes_for_bits_per_key(bpk)),
            bloom_bits_per_key: bpk,
        }
    }

    /// A Ribbon filter with false-positive rate `p`, which must lie in
    /// (0, 1). Rates below `2^-32` are built with 32 result bits. The Bloom
    /// fallback uses the bits per key [`BloomPolicy::with_fp_rate`] picks
    /// (100 where that is not enough).
    pub fn with_fp_rate(p: f64) -> Result<RibbonPolicy> {
        if p.is_nan() || p <= 0.0 || p >= 1.0 {
            return Err(Error::invalid(format!(
                "false-positive rate must be in (0, 1), got {p}"
            )));
        }
        let bloom_bits_per_key = BloomPolicy::with_fp_rate(p)
            .map(|b| b.bits_per_key())
            .unwrap_or(bloom::MAX_BITS_PER_KEY);
        Ok(RibbonPolicy {
            fp_rate: p,
            bloom_bits_per_key,
        })
    }

    /// The false-positive rate this policy aims at.
    pub fn fp_rate(&self) -> f64 {
        self.fp_rate
    }

    /// Bits per key of the blocked Bloom filter built as the fallback.
    pub fn bloom_bits_per_key(&self) -> f64 {
        self.bloom_bits_per_key
    }

    /// `(upper_columns, share of starts that should use upper_columns)` for
    /// this policy's rate: `f * 2^-u + (1 - f) * 2^-(u-1) = p`.
    fn columns(&self) -> (u32, f64) {
        let bits = -self.fp_rate.log2();
        if bits >= MAX_COLUMNS as f64 {
            return (MAX_COLUMNS, 1.0);
        }
        let upper = (bits.ceil() as u32).clamp(1, MAX_COLUMNS);
        let lower_fp = 2f64.powi(1 - upper as i32);
        let upper_fp = 2f64.powi(-(upper as i32));
        let share = ((lower_fp - self.fp_rate) / (lower_fp - upper_fp)).clamp(0.0, 1.0);
        (upper, share)
    }

    /// Builds with explicit knobs; the normal build uses
    /// `BuildKnobs::default()`. For tests and the overhead-measuring tool: a
    /// tiny or negative overhead forces failed seeds and the Bloom fallback.
    #[doc(hidden)]
    pub fn build_with(&self, key_hashes: &[u64], knobs: BuildKnobs) -> (Vec<u8>, BuildOutcome) {
        let fallback = |outcome: BuildOutcome| {
            let outcome = BuildOutcome {
                fell_back_to_bloom: true,
                ..outcome
            };
            (
                bloom::build_bloom(key_hashes, self.bloom_bits_per_key),
                outcome,
            )
        };
        let n = key_hashes.len();
        let overhead_of = |keys: usize| {
            let o = knobs.overhead.unwrap_or_else(|| overhead_for_keys(keys));
            if o.is_finite() {
                o.clamp(-1.0, 10.0)
            } else {
                0.0
            }
        };
        let total_slots = ((n as f64 * (1.0 + overhead_of(n))).ceil() as usize).div_ceil(W) * W;
        if n == 0 || total_slots < MIN_SLOTS {
            return fallback(BuildOutcome::default());
        }
        let num_shards = n.div_ceil(knobs.shard_keys.max(1)).min(u32::MAX as usize);
        let (upper, share) = self.columns();

        // Partition the hashes by shard (counting sort).
        let mut ends = vec![0usize; num_shards];
        let shard_of = |h: u64| fastrange64(h, num_shards as u64) as usize;
        for &h in key_hashes {
            ends[shard_of(h)] += 1;
        }
        let mut sum = 0;
        for slot in ends.iter_mut() {
            sum += *slot;
            *slot = sum;
        }
        let mut partitioned = vec![0u64; n];
        let mut fill = ends.clone();
        for &h in key_hashes.iter().rev() {
            let f = &mut fill[shard_of(h)];
            *f -= 1;
            partitioned[*f] = h;
        }

        // Shard sizes first, so the output is allocated once.
        let mut shards = Vec::with_capacity(num_shards);
        let mut word_offset = 0u64;
        let mut begin = 0;
        for &end in &ends {
            let keys = end - begin;
            begin = end;
            let wanted = (keys as f64 * (1.0 + overhead_of(keys))).ceil();
            let num_blocks = ((wanted / W as f64).round() as usize).max(1);
            if num_blocks > u32::MAX as usize {
                return fallback(BuildOutcome::default());
            }
            // Upper blocks sit at the end; pick their number so the share of
            // starts in them matches `share`.
            let num_starts = (num_blocks * W - (W - 1)) as f64;
            let upper_blocks = ((share * num_starts + (W - 1) as f64) / W as f64).round() as usize;
            let upper_blocks = if share <= 0.0 {
                0
            } else {
                upper_blocks.clamp(1, num_blocks)
            };
            let shard = RibbonShard {
                word_offset: word_offset as u32,
                num_blocks: num_blocks as u32,
                upper_start_block: (num_blocks - upper_blocks) as u32,
                seed: 0,
            };
            word_offset += shard.words(upper);
            if word_offset > u32::MAX as u64 {
                return fallback(BuildOutcome::default());
            }
            shards.push(shard);
        }
        let solution_bytes = word_offset as usize * WORD_BYTES;
        let table_bytes = num_shards * SHARD_ENTRY_BYTES;
        let mut out = vec![0u8; solution_bytes + table_bytes + TRAILER_BYTES];

        let mut outcome = BuildOutcome {
            shards: num_shards as u32,
            ..BuildOutcome::default()
        };
        // Shards are banded up to LANES at a time (`run_jobs`), started in
        // shard order; a lane tries its shard's seeds in order until one
        // solves, then the shard is solved into `out` and the lane takes the
        // next shard. Each shard's bytes depend only on its own keys and
        // seeds, so the schedule does not change them.
        let max_seeds = knobs.max_seeds.min(MAX_SEEDS);
        let mut bands: [Band; LANES] = Default::default();
        let mut key_ranges = Vec::with_capacity(num_shards);
        let mut begin = 0;
        for &end in &ends {
            key_ranges.push(begin..end);
            begin = end;
        }
        // Seeds failed per shard.
        let mut failures = vec![0u32; num_shards];
        // The lowest shard that failed every seed (`num_shards`: none yet);
        // shards after it are not worth banding.
        let mut exhausted = num_shards;
        let mut jobs: Vec<Job> = Vec::with_capacity(LANES);
        let mut next_shard = 0;
        let solve = |band: &Band, shard: &mut RibbonShard, seed: u32, out: &mut [u8]| {
            shard.seed = seed as u8;
            let at = shard.word_offset as usize * WORD_BYTES;
            let len = shard.words(upper) as usize * WORD_BYTES;
            band.solve(
                upper,
                shard.upper_start_block as usize,
                &mut out[at..at + len],
                knobs.solve_path,
            );
        };
        loop {
            while jobs.len() < LANES && next_shard < exhausted {
                let shard = next_shard;
                next_shard += 1;
                if max_seeds == 0 {
                    exhausted = shard;
                    break;
                }
                let band = (0..LANES)
                    .find(|&b| jobs.iter().all(|job| job.band != b))
                    .expect("a free band");
                let slots = shards[shard].num_blocks as usize * W;
                bands[band].prepare(&partitioned[key_ranges[shard].clone()], slots, 0);
                if bands[band].keys() == 0 {
                    solve(&bands[band], &mut shards[shard], 0, &mut out);
                    continue;
                }
                jobs.push(Job {
                    shard,
                    band,
                    seed: 0,
                    at: LaneRow::new(&bands[band], 0),
                });
            }
            if jobs.is_empty() {
                break;
            }
            let (stopped, solved) = run_jobs(&mut bands, &mut jobs);
            let job = &mut jobs[stopped];
            if solved {
                solve(&bands[job.band], &mut shards[job.shard], job.seed, &mut out);
                jobs.swap_remove(stopped);
                continue;
            }
            failures[job.shard] += 1;
            job.seed += 1;
            if job.seed < max_seeds {
                let band = &mut bands[job.band];
                let slots = shards[job.shard].num_blocks as usize * W;
                band.prepare(
                    &partitioned[key_ranges[job.shard].clone()],
                    slots,
                    job.seed as u8,
                );
                job.at = LaneRow::new(band, 0);
            } else {
                exhausted = exhausted.min(job.shard);
                jobs.retain(|job| job.shard < exhausted);
            }
        }
        if exhausted < num_shards {
            // As if the shards had been built one after another: the failures
            // up to the first shard that failed every seed.
            outcome.failed_seeds = failures[..=exhausted].iter().sum();
            return fallback(outcome);
        }
        outcome.failed_seeds = failures.iter().sum();

        for (i, shard) in shards.iter().enumerate() {
            let at = solution_bytes + i * SHARD_ENTRY_BYTES;
            shard.write(&mut out[at..at + SHARD_ENTRY_BYTES]);
        }
        let t = solution_bytes + table_bytes;
        out[t..t + 4].copy_from_slice(&(num_shards as u32).to_le_bytes());
        out[t + 4] = upper as u8;
        let crc = crc32fast::hash(&out[solution_bytes..t + 5]);
        out[t + 5..t + 9].copy_from_slice(&crc.to_le_bytes());
        out[t + 9] = FORMAT_RIBBON;
        (out, outcome)
    }
}

impl Default for RibbonPolicy {
    fn default() -> Self {
        RibbonPolicy::new(10.0)
    }
}

/// Shards banded at once, each in its own band (see [`band_lanes_3`];
/// [`run_jobs`] has a function for each count up to this).
const LANES: usize = 3;

/// Slots per bucket of the counting sort that orders rows by start.
const SLOTS_PER_BUCKET: usize = 64;

/// The band under construction: per slot, the row whose pivot it is.
#[derive(Default)]
struct Band {
    coeffs: Vec<u128>,
    results: Vec<u32>,
    /// Seeded hashes in key order.
    seeded: Vec<u64>,
    /// Start slots of the band being built.
    num_starts: u64,
    /// Seeded hashes ordered by bucket of their start slot, then one zero
    /// hash (so that a lane can always compute the row after its current
    /// one, see [`Lane`]).
    sorted: Vec<u64>,
    bucket_next: Vec<usize>,
}

impl Band {
    /// Clears the band to `slots` slots and orders the keys' seeded hashes
    /// for `seed` by (roughly) increasing start: the start is monotone in
    /// the seeded hash, so a counting sort on its top bits puts consecutive
    /// rows within about `SLOTS_PER_BUCKET` slots of each other, and the
    /// elimination chains walk L1-resident slots instead of random L2 ones.
    fn prepare(&mut self, key_hashes: &[u64], slots: usize, seed: u8) {
        self.coeffs.clear();
        self.coeffs.resize(slots, 0);
        self.results.clear();
        self.results.resize(slots, 0);
        let num_starts = (slots - (W - 1)) as u64;
        let buckets = (slots / SLOTS_PER_BUCKET)
            .next_power_of_two()
            .clamp(1, 1 << 16);
        let bucket_bits = buckets.trailing_zeros();
        let bucket_of = |h1: u64| h1.checked_shr(64 - bucket_bits).unwrap_or(0) as usize;
        self.sorted.clear();
        self.sorted.resize(key_hashes.len() + 1, 0);
        self.bucket_next.clear();
        self.bucket_next.resize(buckets, 0);
        self.seeded.clear();
        self.seeded
            .extend(key_hashes.iter().map(|&h| seeded(h, seed)));
        for &h1 in &self.seeded {
            self.bucket_next[bucket_of(h1)] += 1;
        }
        let mut sum = 0;
        for next in self.bucket_next.iter_mut() {
            let count = *next;
            *next = sum;
            sum += count;
        }
        for &h1 in &self.seeded {
            let next = &mut self.bucket_next[bucket_of(h1)];
            self.sorted[*next] = h1;
            *next += 1;
        }
        self.num_starts = num_starts;
    }

    /// Keys of the prepared band.
    fn keys(&self) -> usize {
        self.sorted.len() - 1
    }

    /// The row of prepared key `index` (in start order).
    fn row(&self, index: usize) -> Row {
        row_from_seeded(self.sorted[index], self.num_starts)
    }

    /// Bands every key's row for `seed` into `slots` slots, one at a time;
    /// false if the system has no solution.
    #[cfg(test)]
    fn add_all(&mut self, key_hashes: &[u64], slots: usize, seed: u8) -> bool {
        self.prepare(key_hashes, slots, seed);
        (0..self.keys()).all(|i| self.add(self.row(i)))
    }

    #[inline]
    fn add(&mut self, row: Row) -> bool {
        add_in(&mut self.coeffs, &mut self.results, row)
    }

    /// Back substitution into the interleaved layout `out` (exactly the
    /// shard's solution bytes): AVX-512 when the CPU has it, else the scalar
    /// solver with POPCNT when it has that, else the portable parity (all
    /// write the same bytes; `path` forces a slower one for tests).
    fn solve(&self, upper: u32, upper_start_block: usize, out: &mut [u8], path: SolvePath) {
        let mut layout = Interleaved128 {
            out,
            block_end: None,
            upper_start_block,
            upper: upper as usize,
        };
        let columns = upper as usize;
        #[cfg(target_arch = "x86_64")]
        if path == SolvePath::Fastest && cpu_has_avx512() {
            // SAFETY: `cpu_has_avx512` just confirmed AVX-512 F, VBMI2 and
            // VPOPCNTDQ, all `solve_avx512` needs.
            return unsafe {
                backsub::solve_avx512(&self.coeffs, &self.results, columns, &mut layout)
            };
        }
        #[cfg(target_arch = "x86_64")]
        if path != SolvePath::Portable && has_popcnt() {
            // SAFETY: `solve_popcnt` only enables the `popcnt` target
            // feature, and `has_popcnt` just confirmed this CPU supports it.
            return unsafe { self.solve_popcnt(columns, &mut layout) };
        }
        backsub::solve_scalar(
            &self.coeffs,
            &self.results,
            columns,
            parity_mul,
            &mut layout,
        );
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "popcnt")]
    fn solve_popcnt(&self, columns: usize, layout: &mut Interleaved128<'_>) {
        backsub::solve_scalar(&self.coeffs, &self.results, columns, parity_popcnt, layout)
    }
}

/// Which back substitution a build uses (tests compare their bytes).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SolvePath {
    /// AVX-512 if the CPU has it, else scalar with POPCNT if it has that,
    /// else portable.
    Fastest,
    /// Scalar, with POPCNT if the CPU has it.
    Scalar,
    /// Scalar with the portable parity.
    Portable,
}

/// Writes solved words into a shard's interleaved solution: block `b` (128
/// slots, 64-slot blocks `2b` and `2b + 1`) holds one 16-byte word per
/// column, `upper - 1` columns below `upper_start_block`, `upper` from it.
struct Interleaved128<'a> {
    /// Exactly the shard's solution bytes.
    out: &'a mut [u8],
    /// Where the block after the one being written starts (`None`: the end).
    block_end: Option<usize>,
    upper_start_block: usize,
    upper: usize,
}

impl backsub::Solution for Interleaved128<'_> {
    fn emit(&mut self, q: usize, low: &[u64], high: &[u64]) {
        if q % 2 == 1 {
            // The first half of a 128-slot block: its words are `high` when
            // block `q - 1` is emitted.
            return;
        }
        let block = q / 2;
        let columns = self.upper - usize::from(block < self.upper_start_block);
        let end = self.block_end.unwrap_or(self.out.len());
        let start = end - columns * WORD_BYTES;
        for (j, (&lo, &hi)) in low.iter().zip(high).take(columns).enumerate() {
            let word = u128::from(lo) | u128::from(hi) << 64;
            let at = start + j * WORD_BYTES;
            self.out[at..at + WORD_BYTES].copy_from_slice(&word.to_le_bytes());
        }
        self.block_end = Some(start);
    }
}

/// Where a lane stands in its band: the row in progress (coefficient
/// words, start, result) and the index, in start order, of the key it came
/// from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LaneRow {
    lo: u64,
    hi: u64,
    start: usize,
    result: u32,
    index: usize,
}

impl LaneRow {
    /// The row of prepared key `index` of `band`.
    fn new(band: &Band, index: usize) -> LaneRow {
        LaneRow::from_row(band.row(index), index)
    }

    fn from_row(row: Row, index: usize) -> LaneRow {
        LaneRow {
            lo: row.coeff as u64,
            hi: (row.coeff >> 64) as u64,
            start: row.start,
            result: row.result,
            index,
        }
    }

    fn row(&self) -> Row {
        Row {
            start: self.start,
            coeff: ((self.hi as u128) << 64) | self.lo as u128,
            result: self.result,
        }
    }
}

/// One shard being banded by a `band_lanes_*` function: its band's slots,
/// its keys' seeded hashes in start order, the row in progress and the
/// next key's seeded hash.
struct Lane<'a> {
    /// The band's `coeffs` and `results` (`slots` each), as raw pointers:
    /// the row in progress is at `slot`, a pointer into `coeffs`, so that
    /// the dependent chain of steps needs no base register per lane.
    coeffs: *mut u128,
    results: *mut u32,
    slots: usize,
    /// `Band::sorted`, with the trailing zero hash.
    sorted: &'a [u64],
    num_starts: u64,
    /// The row in progress: coefficient words, `&coeffs[start]`, result.
    lo: u64,
    hi: u64,
    slot: *mut u128,
    result: u32,
    /// The next key's seeded hash, loaded when the current key started (so
    /// that its row is a few multiplications away when the current chain
    /// ends), and where the hash after it is: the current key's index plus
    /// 2, `sorted.len()` once the current key is the last one (`pending` is
    /// then the zero hash, never used).
    pending: u64,
    next: usize,
    /// Set when the lane has stopped: whether its system was solvable.
    solved: Option<bool>,
    band: std::marker::PhantomData<&'a mut [u128]>,
}

impl<'a> Lane<'a> {
    /// The lane of prepared `band` at `at` (a key of the band).
    fn new(band: &'a mut Band, at: LaneRow) -> Lane<'a> {
        let slots = band.coeffs.len();
        assert!(at.index < band.keys() && band.results.len() == slots && at.start < slots);
        let pending = band.sorted[at.index + 1];
        let coeffs = band.coeffs.as_mut_ptr();
        Lane {
            coeffs,
            results: band.results.as_mut_ptr(),
            slots,
            sorted: &band.sorted,
            num_starts: band.num_starts,
            lo: at.lo,
            hi: at.hi,
            // SAFETY: `at.start < slots` (asserted).
            slot: unsafe { coeffs.add(at.start) },
            result: at.result,
            pending,
            next: at.index + 2,
            solved: None,
            band: std::marker::PhantomData,
        }
    }

    fn state(&self) -> LaneRow {
        LaneRow {
            lo: self.lo,
            hi: self.hi,
            start: self.start(),
            result: self.result,
            index: self.next - 2,
        }
    }

    /// The start slot of the row in progress.
    #[inline(always)]
    fn start(&self) -> usize {
        // SAFETY: `slot` points into `coeffs`, at or after its start.
        unsafe { self.slot.offset_from(self.coeffs) as usize }
    }

    /// One elimination step (the scalar [`step_in`], on the lane's row):
    /// store the row if its start slot is empty and take the next key's
    /// row, else XOR the stored row in and shift to the next pivot. True
    /// when the lane needs [`attend`](Self::attend): its last row was
    /// stored (`solved` is set), or the low 64 coefficient bits XORed to
    /// zero (rare: a far pivot, a redundant row or no solution; nothing was
    /// written then).
    #[inline(always)]
    fn step(&mut self) -> bool {
        // Invariants while the lane runs: bit 0 of `lo` is set, `slot` is
        // `&coeffs[start]` with `start + 128 <= slots` (a row's pivot stays
        // in its 128-slot window, which `num_starts` keeps inside the band),
        // and `next <= sorted.len()`. Unchecked accesses measured 1.1x
        // faster builds than indexing with bounds checks.
        let slot = self.slot;
        let at = self.start();
        debug_assert!(at < self.slots && self.next <= self.sorted.len());
        // SAFETY: `slot` is `&coeffs[at]` with `at < slots` (above).
        let existing = unsafe { *slot };
        let e_lo = existing as u64;
        if e_lo == 0 {
            // The slot is empty (a stored row has bit 0 set).
            // SAFETY: `at < slots` (above).
            unsafe {
                *slot = ((self.hi as u128) << 64) | self.lo as u128;
                *self.results.add(at) = self.result;
            }
            if self.next == self.sorted.len() {
                self.solved = Some(true);
                return true;
            }
            let row = row_from_seeded(self.pending, self.num_starts);
            self.lo = row.coeff as u64;
            self.hi = (row.coeff >> 64) as u64;
            // SAFETY: a start is below `num_starts < slots`.
            self.slot = unsafe { self.coeffs.add(row.start) };
            self.result = row.result;
            // SAFETY: `next < sorted.len()` (checked above).
            self.pending = unsafe { *self.sorted.get_unchecked(self.next) };
            self.next += 1;
            return false;
        }
        let lo = self.lo ^ e_lo;
        if lo == 0 {
            return true;
        }
        let hi = self.hi ^ (existing >> 64) as u64;
        // SAFETY: `at < slots` (above).
        self.result ^= unsafe { *self.results.add(at) };
        // Below 64, so the 128-bit shift is two instructions (see `step_in`).
        let tz = lo.trailing_zeros() & 63;
        self.lo = (lo >> tz) | ((hi << 1) << (63 - tz));
        self.hi = hi >> tz;
        // SAFETY: the next pivot is still in the row's window (above).
        self.slot = unsafe { slot.add(tz as usize) };
        false
    }

    /// Handles what [`step`](Self::step) left (see [`attend`]). True when
    /// the lane has stopped (`solved` is set).
    #[inline(always)]
    fn attend(&mut self) -> bool {
        if self.solved.is_some() {
            return true;
        }
        let state = self.state();
        // SAFETY: the lane stands for its band's only borrow; these slices
        // are the band's `coeffs` and `results`, and are dropped before the
        // lane's pointers are used again.
        let (coeffs, results) = unsafe {
            (
                std::slice::from_raw_parts_mut(self.coeffs, self.slots),
                std::slice::from_raw_parts_mut(self.results, self.slots),
            )
        };
        match attend(coeffs, results, self.sorted, self.num_starts, state) {
            Ok(at) => {
                self.lo = at.lo;
                self.hi = at.hi;
                // SAFETY: a row's pivot is below `slots`.
                self.slot = unsafe { self.coeffs.add(at.start) };
                self.result = at.result;
                if at.index != state.index {
                    self.pending = self.sorted[at.index + 1];
                    self.next = at.index + 2;
                }
                false
            }
            Err(solved) => {
                self.solved = Some(solved);
                true
            }
        }
    }
}

/// The rare step of [`Lane::step`], redone by the general code: the row
/// moves to its next pivot past the low 64 bits (`Ok`, same key), or it
/// is redundant (`Ok` with the next key's row, or `Err(true)` if it was the
/// last key), or the system has no solution (`Err(false)`). Out of line,
/// and taking the lane's row by value, so that the lanes' rows stay in
/// registers.
#[cold]
#[inline(never)]
fn attend(
    coeffs: &mut [u128],
    results: &mut [u32],
    sorted: &[u64],
    num_starts: u64,
    at: LaneRow,
) -> std::result::Result<LaneRow, bool> {
    let mut row = at.row();
    match step_in(coeffs, results, &mut row) {
        None => Ok(LaneRow::from_row(row, at.index)),
        Some(false) => Err(false),
        Some(true) if at.index + 1 < sorted.len() - 1 => {
            let index = at.index + 1;
            Ok(LaneRow::from_row(
                row_from_seeded(sorted[index], num_starts),
                index,
            ))
        }
        Some(true) => Err(true),
    }
}

/// Defines `$name`, which bands as many shards at once as it lists lanes
/// (see [`band_lanes_3`]). A macro rather than a const-generic function
/// over an array of lanes: the compiler keeps the lanes held in separate
/// local variables in registers, but left an array of them in memory, so
/// that every step went through the stack (measured 1.3x slower).
macro_rules! band_lanes {
    ($(#[$doc:meta])* $name:ident, $n:literal, $($lane:ident),+) => {
        $(#[$doc])*
        #[inline(never)]
        #[allow(unused_assignments)]
        fn $name(bands: [&mut Band; $n], rows: &mut [LaneRow; $n]) -> (usize, bool) {
            let [$($lane),+] = bands;
            let mut i = 0;
            $(
                let mut $lane = Lane::new($lane, rows[i]);
                i += 1;
            )+
            let stopped = 'steps: loop {
                let mut i = 0;
                $(
                    if $lane.step() && $lane.attend() {
                        break 'steps i;
                    }
                    i += 1;
                )+
            };
            let mut i = 0;
            let mut solved = false;
            $(
                rows[i] = $lane.state();
                if i == stopped {
                    solved = $lane.solved == Some(true);
                }
                i += 1;
            )+
            (stopped, solved)
        }
    };
}

band_lanes!(
    /// Bands two shards at once, one elimination step of each in turn (see
    /// [`band_lanes_3`]).
    band_lanes_2,
    2,
    a,
    b
);
band_lanes!(
    /// Bands three shards at once from where they stand (`rows[i]` is the
    /// row in progress in `bands[i]`, updated on return) until one of them
    /// stops; returns that one's position and whether its system was
    /// solvable.
    ///
    /// Each pass of the loop does one elimination step of each lane
    /// ([`Lane::step`]). A single chain of steps is latency-bound (each
    /// slot to visit depends on the previous XOR and trailing-zero count);
    /// unrelated chains overlap in the CPU.
    band_lanes_3,
    3,
    a,
    b,
    c
);
/// Bands the rows of `band` from `at` on, one at a time (the last lane
/// left); whether the system was solvable.
fn band_alone(band: &mut Band, at: LaneRow) -> bool {
    band.add(at.row())
        && (at.index + 1..band.keys()).all(|i| {
            let row = band.row(i);
            band.add(row)
        })
}

/// A shard in a lane of the build: which shard, which band, the seed being
/// tried and the row in progress.
struct Job {
    shard: usize,
    band: usize,
    seed: u32,
    at: LaneRow,
}

/// Bands the shards of `jobs` (each in its own band, `jobs.len()` from 1
/// to [`LANES`]) until one stops; returns its position in `jobs` and
/// whether its system was solvable.
fn run_jobs(bands: &mut [Band; LANES], jobs: &mut [Job]) -> (usize, bool) {
    type Lanes<const N: usize> = fn([&mut Band; N], &mut [LaneRow; N]) -> (usize, bool);
    fn lanes<const N: usize>(
        bands: &mut [Band; LANES],
        jobs: &mut [Job],
        band_lanes: Lanes<N>,
    ) -> (usize, bool) {
        let ids: [usize; N] = std::array::from_fn(|i| jobs[i].band);
        let bands = bands.get_disjoint_mut(ids).expect("one band per job");
        let mut rows: [LaneRow; N] = std::array::from_fn(|i| jobs[i].at);
        let stopped = band_lanes(bands, &mut rows);
        for (job, row) in jobs.iter_mut().zip(rows) {
            job.at = row;
        }
        stopped
    }
    match jobs.len() {
        1 => (0, band_alone(&mut bands[jobs[0].band], jobs[0].at)),
        2 => lanes(bands, jobs, band_lanes_2),
        3 => lanes(bands, jobs, band_lanes_3),
        n => unreachable!("{n} jobs"),
    }
}

/// Bands `row` into the band `coeffs`, `results` (see [`step_in`]).
#[inline]
fn add_in(coeffs: &mut [u128], results: &mut [u32], mut row: Row) -> bool {
    loop {
        if let Some(ok) = step_in(coeffs, results, &mut row) {
            return ok;
        }
    }
}

/// One elimination step of `row` in the band `coeffs`, `results`:
/// `Some(true)` when it was stored or was redundant, `Some(false)` when the
/// system has no solution, `None` when it moved on to its next pivot.
#[inline(always)]
fn step_in(coeffs: &mut [u128], results: &mut [u32], row: &mut Row) -> Option<bool> {
    // Invariants: bit 0 of `coeff` is set and `start + 128 <= slots`, so
    // every index below is in bounds; a stored row at `start` also has
    // bit 0 set, hence the XOR clears it and the pivot moves right.
    let existing = coeffs[row.start];
    if existing == 0 {
        coeffs[row.start] = row.coeff;
        results[row.start] = row.result;
        return Some(true);
    }
    row.coeff ^= existing;
    row.result ^= results[row.start];
    let low = row.coeff as u64;
    if low != 0 {
        // The usual case: the next pivot is within 64 slots. With the
        // shift known to be below 64 the 128-bit shift is two
        // instructions, without the general shift's test and moves on
        // this dependent chain.
        let tz = low.trailing_zeros() & 63;
        row.start += tz as usize;
        row.coeff >>= tz;
        return None;
    }
    if row.coeff == 0 {
        // Redundant (e.g. a duplicate key) if the results agree.
        return Some(row.result == 0);
    }
    let tz = row.coeff.trailing_zeros();
    row.start += tz as usize;
    row.coeff >>= tz;
    None
}

impl FilterPolicy for RibbonPolicy {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn build(&self, key_hashes: &[u64]) -> Vec<u8> {
        self.build_with(key_hashes, BuildKnobs::default()).0
    }

    fn may_contain(&self, filter: &[u8], key_hash: u64) -> bool {
        super::may_contain(filter, key_hash)
    }
}

const _: () = assert!(BUILTIN_NAME_PREFIX.len() < RibbonPolicy::NAME.len());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_solve_the_mix() {
        let p = RibbonPolicy::new(10.0);
        let (u, f) = p.columns();
        assert_eq!(u, 7);
        let mix = f * 2f64.powi(-7) + (1.0 - f) * 2f64.powi(-6);
        assert!(
            (mix - p.fp_rate()).abs() < 1e-12,
            "{mix} vs {}",
            p.fp_rate()
        );
        let (u, f) = RibbonPolicy::with_fp_rate(1.0 / 256.0).unwrap().columns();
        assert_eq!((u, f), (8, 1.0));
        let (u, f) = RibbonPolicy::with_fp_rate(1e-15).unwrap().columns();
        assert_eq!((u, f), (MAX_COLUMNS, 1.0));
    }

    #[test]
    fn overhead_table_is_monotone() {
        let mut last = 0.0;
        for shift in 8..30 {
            let o = overhead_for_keys(1 << shift);
            assert!(o >= last && o < 0.2, "{shift}: {o}");
            last = o;
        }
    }

    #[test]
    fn band_rejects_inconsistent_duplicate_rows() {
        let mut band = Band::default();
        assert!(band.add_all(&[], 1024, 0));
        let row = |result| Row {
            start: 5,
            coeff: 0b1011,
            result,
        };
        assert!(band.add(row(3)));
        assert!(band.add(row(3)), "same row and result is redundant");
        assert!(!band.add(row(2)), "same row, other result has no solution");
    }

    fn test_hashes(n: u64, tag: u64) -> Vec<u64> {
        (0..n)
            .map(|i| super::super::key_hash(&[tag.to_le_bytes(), i.to_le_bytes()].concat()))
            .collect()
    }

    /// A shard for the lane tests: keys, slots, seed.
    type Shard = (Vec<u64>, usize, u8);

    /// Bands `shards` the way the build does, up to [`LANES`] at a time
    /// through [`run_jobs`], a finished lane taking the next shard, and
    /// checks each outcome and band against banding the shard alone, one
    /// row at a time.
    fn check_lanes_match_one_at_a_time(shards: &[Shard]) -> Vec<bool> {
        let mut bands: [Band; LANES] = Default::default();
        let mut jobs: Vec<Job> = Vec::new();
        let mut outcomes = vec![None; shards.len()];
        let mut next = 0;
        let mut check = |band: &Band, shard: usize, solved: bool| {
            let (keys, slots, seed) = &shards[shard];
            let mut alone = Band::default();
            assert_eq!(alone.add_all(keys, *slots, *seed), solved, "shard {shard}");
            assert!(alone.coeffs == band.coeffs, "shard {shard}: coefficients");
            assert!(alone.results == band.results, "shard {shard}: results");
            outcomes[shard] = Some(solved);
        };
        loop {
            while jobs.len() < LANES && next < shards.len() {
                let band = (0..LANES)
                    .find(|&b| jobs.iter().all(|job| job.band != b))
                    .unwrap();
                let (keys, slots, seed) = &shards[next];
                bands[band].prepare(keys, *slots, *seed);
                if bands[band].keys() == 0 {
                    check(&bands[band], next, true);
                } else {
                    jobs.push(Job {
                        shard: next,
                        band,
                        seed: *seed as u32,
                        at: LaneRow::new(&bands[band], 0),
                    });
                }
                next += 1;
            }
            if jobs.is_empty() {
                break;
            }
            let (stopped, solved) = run_jobs(&mut bands, &mut jobs);
            let job = jobs.swap_remove(stopped);
            check(&bands[job.band], job.shard, solved);
        }
        outcomes.into_iter().map(Option::unwrap).collect()
    }

    #[test]
    fn lanes_band_like_one_shard_at_a_time() {
        // Lanes of very different lengths finish at different times (one
        // key, a few, thousands); every lane count from LANES down to one
        // runs.
        let sizes = [1u64, 3_000, 2, 700, 5_000, 40, 1, 2_500, 0, 4_000];
        let shards: Vec<Shard> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let slots = (((n as f64 * 1.03) as usize).div_ceil(W) * W).max(W);
                (test_hashes(n, i as u64), slots, i as u8)
            })
            .collect();
        let solved = check_lanes_match_one_at_a_time(&shards);
        assert!(solved.iter().all(|&s| s), "{solved:?}");
    }

    #[test]
    fn lanes_fail_and_find_redundant_rows_like_one_shard_at_a_time() {
        let unique = test_hashes(3_000, 77);
        let mut with_duplicates = unique.clone();
        with_duplicates.extend_from_slice(&unique[..1_500]);
        with_duplicates.extend_from_slice(&unique[2_000..]);
        let mut shards: Vec<Shard> = Vec::new();
        for seed in 0..4u8 {
            // Duplicates only: redundant rows inside a lane, solvable.
            shards.push((with_duplicates.clone(), 3_200, seed));
            // Too few slots: the lane fails part-way, while others run on.
            shards.push((test_hashes(2_000, 5 + seed as u64), 1_920, seed));
            // Tight: some seeds fail near the end of the band.
            shards.push((test_hashes(3_000, 9), 3_072, seed));
        }
        let solved = check_lanes_match_one_at_a_time(&shards);
        for (i, s) in solved.iter().enumerate() {
            match i % 3 {
                0 => assert!(s, "duplicates, shard {i}"),
                1 => assert!(!s, "too few slots, shard {i}"),
                _ => {}
            }
        }
    }

    #[test]
    fn attend_moves_a_row_past_the_low_64_bits() {
        // A stored row and a new one at the same slot with the same low 64
        // coefficient bits: the XOR leaves only high bits, a pivot 64 or
        // more slots on, which `Lane::step` leaves to `attend`.
        let mut band = Band::default();
        band.prepare(&[1, 2], 1024, 0);
        let stored = Row {
            start: 10,
            coeff: (0b1010 << 64) | 0xff,
            result: 6,
        };
        assert!(band.add(stored));
        let row = Row {
            start: 10,
            coeff: (0b0110 << 64) | 0xff,
            result: 5,
        };
        let sorted = band.sorted.clone();
        let at = LaneRow::from_row(row, 0);
        let moved = attend(
            &mut band.coeffs,
            &mut band.results,
            &sorted,
            band.num_starts,
            at,
        )
        .expect("moved on");
        assert_eq!(moved.index, 0, "same key");
        assert_eq!(moved.start, 10 + 64 + 2);
        assert_eq!((moved.lo, moved.hi, moved.result), (0b11, 0, 3));
        // The same row again is redundant: on to the next key's row.
        let next = attend(
            &mut band.coeffs,
            &mut band.results,
            &sorted,
            band.num_starts,
            LaneRow::from_row(stored, 0),
        )
        .expect("next key");
        assert_eq!(next.index, 1);
        assert_eq!(next.row().coeff, band.row(1).coeff);
        // Redundant on the last key: done; inconsistent: no solution.
        let last = LaneRow::from_row(stored, 1);
        assert_eq!(
            attend(
                &mut band.coeffs,
                &mut band.results,
                &sorted,
                band.num_starts,
                last
            ),
            Err(true)
        );
        let inconsistent = LaneRow::from_row(
            Row {
                result: 7,
                ..stored
            },
            0,
        );
        assert_eq!(
            attend(
                &mut band.coeffs,
                &mut band.results,
                &sorted,
                band.num_starts,
                inconsistent
            ),
            Err(false)
        );
    }
}
