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
//! and last lower block, and for each column count the byte offset of
//! block 0, the block stride and the load mask), so a query reads one
//! 64-byte entry of that array instead of parsing bytes.
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
//! chosen so that `f * 2^-u + (1 - f) * 2^-(u-1) = p`. Shards are sized in
//! whole rows' widths (128 slots) and their first upper block is chosen on
//! that grid, then stored as blocks of 64 slots (twice as many, and twice
//! the first upper block): the sizes and rates of the 128-slot layout.
//!
//! # Layout
//!
//! ```text
//! +-----------------+-----+-------------------+-----------------------------+------------+-------+--------+------+
//! | shard 0         | ... | shard k-1         | shard table, k entries of   | num_shards | upper | crc32  | 0x05 |
//! | solution        |     | solution          | 13 bytes:                   | (k) u32 LE | cols  | u32 LE | (id) |
//! |                 |     |                   |  word_offset       u32 LE   |            | u8    |        |      |
//! |                 |     |                   |  num_blocks        u32 LE   |            | 1..=32|        |      |
//! |                 |     |                   |  upper_start_block u32 LE   |            |       |        |      |
//! |                 |     |                   |  seed              u8       |            |       |        |      |
//! +-----------------+-----+-------------------+-----------------------------+------------+-------+--------+------+
//!
//! shard solution: blocks 0..num_blocks of 64 slots, block q = cols(q)
//!   words of 8 bytes, one after another (column-major within the block)
//!   cols(q) = upper_cols - 1 if q < upper_start_block, else upper_cols
//!   word j of block q = column j of slots 64q..64q+64 (u64 LE, bit i =
//!   slot 64q+i)
//! word_offset: where the shard's solution starts, in 8-byte words; shards
//!   are contiguous and in order, the last one ends at the shard table
//! num_blocks >= 2 (at least one row's width, 128 slots)
//! crc32 (CRC-32/ISO-HDLC, crc32fast): over the shard table, num_shards and
//!   upper cols
//! ```
//!
//! Format id 0x05. Format 0x03 had the same rows, sizes, shard table and
//! trailer, but blocks of 128 slots of 16-byte words (`num_blocks`,
//! `upper_start_block` and `word_offset` counted in those): still read and
//! answered exactly, through a bounds-checked scalar query (no vector
//! code), never built. The first version used id 0x02 with the layout of
//! 0x03 but another row hashing; its bytes are not read (see
//! [`FORMAT_RIBBON_V1`](super::FORMAT_RIBBON_V1)).
//!
//! The table and trailer carry their own checksum because a damaged seed or
//! offset would still look consistent yet make queries wrong, giving false
//! negatives; with the checksum, such damage decodes to "may contain". The
//! solution bits themselves are covered by the table's block checksum.
//!
//! `num_starts = 64 * num_blocks - 127`: a key's start is
//! `fastrange64(h1, num_starts)`, so its 128 slots stay inside its shard.
//! Its window begins at bit `shift = start % 64` of its start block `q =
//! start / 64` and spans blocks `q`, `q + 1` and `q + 2` (only `q` and `q +
//! 1` when `shift` is 0: block `q + 2` then need not exist). Block `q + 1`
//! starts right after block `q`, and block `q + 2` right after block `q +
//! 1`, which has one word more than block `q` when `q + 1` is the first
//! upper block: a query reads `3 x cols x 8` bytes (168 at 7 columns) in
//! three runs at `here`, `here + stride` and `here + 2 x stride` (+ 8 at
//! that one block).
//!
//! # Query
//!
//! On CPUs with AVX-512 F, VL, VBMI2 and VPOPCNTDQ (and BMI2; detected once,
//! when the layout is parsed) the query checks up to eight columns in zmm
//! registers (`mod avx512`): three masked 64-byte loads, one per block,
//! lane `j` = column `j` (lanes past the key's columns are neither read
//! nor checked); two `vpshrdvq` funnel shifts by `start` (the count is
//! taken mod 64) give each column's 128-slot window as a low and a high
//! 64-bit word; one `vpandq` and one `vpternlogq` with the broadcast
//! coefficient halves, one `vpopcntq` and one `vptestmq` give the eight
//! parities as a mask, compared with the key's result bits. Filters of 2 to
//! 8 upper columns (rates of 2^-8 and above) whose solution is under 4 GiB
//! take a variant without a loop and without bounds checks (`parse` has
//! shown that the blocks a key can read lie in the solution); a decoded
//! [`Filter`](super::Filter) calls that variant directly through its one
//! query function pointer, a [`RibbonLayout::may_contain`] call checks the
//! length of its bytes once first. The block offsets come from values
//! precomputed at parse (`ShardQuery`): one comparison of the start block
//! with the last lower block gives both the block kind and whether the
//! third block is one word further. Other column counts loop over chunks
//! of eight columns with bounds-checked slices.
//!
//! Without AVX-512, on CPUs with AVX2 the query (`mod avx2`) splits the
//! key's coefficients once into three 64-bit masks (`coeff << shift` over
//! the three blocks) and checks four columns per chunk: one masked 32-byte
//! load per block, three ANDs and two XORs, six shift-XORs that bring each
//! lane's parity to its top bit, and one `vmovmskpd`. The scalar query
//! does the same one column at a time; it checks the first four columns
//! without branches and stops there if any disagrees with the fingerprint,
//! which an absent key does with probability 15/16; one exit branch that is
//! nearly always right is cheaper than a mispredicted exit per column
//! (measured: 1.4x faster absent queries, same present ones).
//!
//! Parity is POPCNT when the CPU has it (run-time detection; the scalar
//! query and back substitution are then compiled with that target feature),
//! else a multiply trick; all paths give identical bytes and answers
//! (tested). With AVX-512 the back substitution solves eight columns at
//! once in zmm registers (`backsub::solve_avx512`, same bytes).
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
use super::{fastrange64, FilterPolicy, BUILTIN_NAME_PREFIX, FORMAT_RIBBON, FORMAT_RIBBON_V3};
use crate::error::{Error, Result};
use std::sync::{Arc, OnceLock};

mod backsub;

/// Bits per coefficient row (the row width): a key's row covers `W`
/// consecutive slots from its start.
const W: usize = 128;
/// Slots per block of the stored solution (format 0x05): one 64-bit word per
/// column and block.
const BLOCK_SLOTS: usize = 64;
/// Bytes per solution word (one column of one block).
const WORD_BYTES: usize = BLOCK_SLOTS / 8;
/// Slots per block, and bytes per word, of the retired layout of format
/// 0x03 (still read, never built).
const V3_BLOCK_SLOTS: usize = 128;
const V3_WORD_BYTES: usize = V3_BLOCK_SLOTS / 8;
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
    /// Where the shard's solution starts, in solution words (8 bytes in
    /// format 0x05, 16 in format 0x03).
    pub word_offset: u32,
    /// Number of blocks (of 64 slots in format 0x05, 128 in format 0x03).
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

    /// Solution words (one column of one block each) for `upper` columns.
    fn words(&self, upper: u32) -> u64 {
        let usb = self.upper_start_block as u64;
        usb * (upper as u64 - 1) + (self.num_blocks as u64 - usb) * upper as u64
    }

    /// Number of possible start slots with blocks of `block_slots` slots:
    /// every slot but the last `W - 1`, so that a key's row stays inside
    /// its shard. Meaningful for at least `W` slots (which `parse`
    /// requires).
    fn num_starts(&self, block_slots: u64) -> u64 {
        // Saturating: a shard read from bytes other than the parsed ones
        // (`RibbonLayout::expected_fp_rate` takes any bytes) may be smaller.
        (self.num_blocks as u64 * block_slots).saturating_sub(W as u64 - 1)
    }

    /// Share of start slots inside upper blocks (the query's chance of using
    /// `upper` columns).
    fn upper_start_share(&self, block_slots: u64) -> f64 {
        let starts = self.num_starts(block_slots);
        if starts == 0 {
            return 0.0;
        }
        let lower_starts = (self.upper_start_block as u64 * block_slots).min(starts);
        (starts - lower_starts) as f64 / starts as f64
    }
}

/// The two layouts this module reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// Format 0x03, retired: 128-slot blocks of 16-byte words. Read through
    /// a bounds-checked scalar query only.
    V3,
    /// Format 0x05, built now: 64-slot blocks of 8-byte words.
    V5,
}

impl Format {
    fn block_slots(self) -> u64 {
        match self {
            Format::V3 => V3_BLOCK_SLOTS as u64,
            Format::V5 => BLOCK_SLOTS as u64,
        }
    }

    fn word_bytes(self) -> u64 {
        match self {
            Format::V3 => V3_WORD_BYTES as u64,
            Format::V5 => WORD_BYTES as u64,
        }
    }
}

/// What a query needs of one shard, decoded once by [`RibbonLayout::parse`]
/// so that a query does no byte parsing and no seed arithmetic. 64 bytes,
/// one cache line, so that the narrow AVX-512 query finds everything of
/// its key's shard in one line and needs nothing else of the layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
struct ShardQuery {
    /// XORed into the key hash before the seeded remix.
    seed_mask: u64,
    /// Possible start slots (at least 1).
    num_starts: u64,
    /// Where the shard's solution starts, in solution words.
    word_offset: u32,
    /// First block that stores `upper_columns` columns.
    upper_start_block: u32,
    /// `upper_start_block - 1`: the last lower block, whose next block
    /// stores one column more than itself (-1, no block, when every block
    /// is an upper one). A block is an upper one iff it is greater, so one
    /// comparison tells both.
    last_lower_block: i64,
    /// For the narrow AVX-512 query (format 0x05), by block kind (0: the
    /// lower blocks, 1: the upper ones): block `b` of that kind starts at
    /// byte `bases[kind] + b * strides[kind]`, modulo 2^32 (for the upper
    /// blocks the base is `word_offset * 8 - upper_start_block * 8`, as if
    /// the lower blocks had their column count too). Exact only when the
    /// solution is smaller than 4 GiB, which that path requires.
    bases: [u32; 2],
    /// Bytes per block of each kind: `columns * 8` (the lower blocks have
    /// `upper_columns - 1` columns, the upper ones `upper_columns`).
    strides: [u32; 2],
    /// `bzhi(0xff, columns)` for each kind: bit `i` selects the block's
    /// word `i` (the load mask), and the same bits select the result bits a
    /// key starting in such a block checks (of the first 8).
    lanes: [u8; 2],
}

impl ShardQuery {
    /// The first word of block `block`, in a layout of `upper` columns:
    /// blocks before `upper_start_block` store one column less, so the
    /// block starts at word `block * upper - min(block, upper_start_block)`
    /// of the shard. Branch-free.
    #[inline(always)]
    fn block_word(&self, block: usize, upper: usize) -> usize {
        let lower_blocks = block.min(self.upper_start_block as usize);
        self.word_offset as usize + block * upper - lower_blocks
    }
}

/// `bzhi(0xff, columns)`: the lanes of a block of `columns` columns (of
/// the first 8).
fn column_lanes(columns: u32) -> u8 {
    ((1u32 << columns.min(8)) - 1) as u8
}

/// Parameters of a Ribbon filter read from its trailer and shard table.
#[derive(Debug, Clone)]
pub struct RibbonLayout {
    num_shards: u32,
    upper_columns: u32,
    table_start: usize,
    /// Which layout the bytes have (format id 0x05, or the retired 0x03).
    format: Format,
    /// One entry per shard; shared, so cloning a decoded filter is cheap.
    shards: Arc<[ShardQuery]>,
    /// Whether at least `8 * upper_columns` bytes follow the solution (the
    /// shard table and trailer: filters of about 5 shards or more), so that
    /// the narrow AVX-512 query may read the block after its key's next
    /// block even when that is past the last shard (a block-aligned start
    /// in the last shard's last possible block, whose window does not use
    /// it), instead of choosing another block for such starts. For
    /// [`may_contain`](Self::may_contain) on a slice; a decoded filter
    /// decides by its own readable length (`query_fn_for`).
    tail_readable: bool,
    /// Bytes at least this long take the narrow AVX-512 query without
    /// bounds checks: `table_start` (plus `8 * upper_columns` if
    /// `tail_readable`) if this layout is one that query covers
    /// (`QueryPath::avx512` picks it: format 0x05, 2 to 8 columns, a
    /// solution under 4 GiB), else `usize::MAX` (never).
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
            && self.format == other.format
            && self.shards == other.shards
            && self.tail_readable == other.tail_readable
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

/// A decoded Ribbon filter, as the query functions that
/// [`RibbonLayout::query_fn_for`] returns read it.
///
/// # Safety
///
/// [`ribbon`](Self::ribbon) must return either [`RibbonLayout::empty`] or
/// what [`RibbonLayout::parse`] returned for exactly the bytes
/// [`ribbon_bytes`](Self::ribbon_bytes) returns (possibly moved to another
/// path by [`RibbonLayout::on_path`]), and those bytes must stay valid and
/// unmodified while `self` is borrowed. At least
/// [`readable_len`](Self::readable_len) bytes, never fewer than
/// `ribbon_bytes().len()`, must be readable from `ribbon_bytes().as_ptr()`,
/// and that length must not change.
pub(crate) unsafe trait RibbonSource {
    /// The filter's layout ([`RibbonLayout::empty`] if it is not a Ribbon
    /// filter).
    fn ribbon(&self) -> &RibbonLayout;
    /// The bytes the layout was parsed from.
    fn ribbon_bytes(&self) -> &[u8];
    /// How many bytes from the first of `ribbon_bytes()` may be read (the
    /// bytes themselves and any readable padding after them).
    fn readable_len(&self) -> usize;
}

/// A query function over a decoded filter `F`. Calling one is `unsafe`: it
/// must be the function [`RibbonLayout::query_fn_for`] returned for `F`'s
/// layout (it relies on the CPU features and layout that chose it).
pub(crate) type SourceQueryFn<F> = unsafe fn(&F, u64) -> bool;

/// Which code checks a key's columns, picked once per parsed layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QueryPath {
    /// `mod avx512` for format 0x05 filters of 2 to 8 upper columns (every
    /// key has 1 to 8): one chunk of columns, no loop, no bounds checks.
    Avx512Narrow,
    /// `mod avx512` for any column count: chunks of up to eight columns.
    Avx512,
    /// `mod avx2`: four columns per chunk.
    Avx2,
    /// The scalar loop, with POPCNT when the CPU has it.
    Scalar,
    /// Format 0x03: the bounds-checked scalar query of the retired layout.
    Legacy,
}

impl QueryPath {
    fn detect(format: Format, upper_columns: u32, table_start: usize) -> QueryPath {
        if format == Format::V3 {
            QueryPath::Legacy
        } else if cpu_has_avx512() {
            QueryPath::avx512(upper_columns, table_start)
        } else if cpu_has_avx2() {
            QueryPath::Avx2
        } else {
            QueryPath::Scalar
        }
    }

    /// The AVX-512 path for format 0x05 filters of `upper_columns` columns
    /// whose solution takes `table_start` bytes: the narrow one needs at
    /// most 8 columns and block offsets that fit in 32 bits
    /// (`ShardQuery::bases`).
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
    /// `Scalar` and `Legacy` need nothing.
    fn query_fn(self) -> QueryFn {
        #[cfg(target_arch = "x86_64")]
        match self {
            QueryPath::Avx512Narrow => RibbonLayout::may_contain_avx512_narrow,
            QueryPath::Avx512 => RibbonLayout::may_contain_avx512,
            QueryPath::Avx2 => RibbonLayout::may_contain_avx2,
            QueryPath::Scalar => RibbonLayout::may_contain_scalar_path,
            // The scalar path answers format 0x03 layouts through `query`.
            QueryPath::Legacy => RibbonLayout::may_contain_scalar_path,
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            // `detect` and `on_path` give `Scalar` (or `Legacy`, which the
            // scalar path answers through `query`) on other targets.
            let _ = self;
            RibbonLayout::may_contain_scalar_path
        }
    }
}

/// Where a key's row lives in the solution (format 0x05), and the row
/// itself. The key's 128 slots start at bit `shift` of its start block's
/// words and run through the next block into the one after.
struct Located {
    /// Byte offset of the key's first column word in its start block.
    here: usize,
    /// Bytes from `here` to the first column word of the next block (the
    /// start block's `columns * 8`).
    next: usize,
    /// Bytes from `here` to the first column word of the block after that
    /// (`next` plus the next block's size); `next` when `shift` is 0,
    /// whose window ends with the next block (which then may be the
    /// shard's last one).
    last: usize,
    /// Result columns of the start block (the later blocks have at least
    /// as many).
    columns: usize,
    /// Start slot within its block: `0..64`.
    shift: u32,
    coeff: u128,
    result: u32,
}

impl Located {
    /// The bytes the key's columns live in, from `here`: `columns` words at
    /// offsets 0, `next` and `last`; `None` if `bytes` is too short. One
    /// bounds check covers the three blocks (`next <= last`).
    #[inline(always)]
    fn words<'a>(&self, bytes: &'a [u8]) -> Option<&'a [u8]> {
        bytes
            .get(self.here..)?
            .get(..self.last + self.columns * WORD_BYTES)
    }

    /// The key's window `coeff << shift` as three 64-bit masks of the
    /// start block's, the next block's and the last block's words (the
    /// last is 0 when `shift` is 0).
    #[inline(always)]
    fn masks(&self) -> [u64; 3] {
        let shifted = self.coeff << self.shift;
        let carried = if self.shift == 0 {
            0
        } else {
            (self.coeff >> (W as u32 - self.shift)) as u64
        };
        [shifted as u64, (shifted >> 64) as u64, carried]
    }
}

impl RibbonLayout {
    /// Reads and validates the trailer and shard table: format id (0x05, or
    /// the retired 0x03), checksum, column count in `1..=MAX_COLUMNS`, at
    /// least one shard, and every shard with at least 128 slots,
    /// `upper_start_block <= num_blocks`, starting where the previous one
    /// ends, the last one ending exactly at the shard table. `None` if the
    /// bytes are not a consistent Ribbon filter. Never panics; costs one
    /// pass over the shard table.
    pub fn parse(bytes: &[u8]) -> Option<RibbonLayout> {
        let trailer_start = bytes.len().checked_sub(TRAILER_BYTES)?;
        let t = bytes.get(trailer_start..)?;
        let format = match t[9] {
            FORMAT_RIBBON => Format::V5,
            FORMAT_RIBBON_V3 => Format::V3,
            _ => return None,
        };
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
        let (block_slots, word_bytes) = (format.block_slots(), format.word_bytes());
        let mut shards = Vec::with_capacity(num_shards as usize);
        let mut next_word = 0u64;
        for i in 0..num_shards as usize {
            let shard = RibbonShard::read(bytes, table_start + i * SHARD_ENTRY_BYTES)?;
            // At least one row's width of slots, so that every start keeps
            // its 128 slots inside the shard.
            if (shard.num_blocks as u64) * block_slots < W as u64
                || shard.upper_start_block > shard.num_blocks
                || shard.word_offset as u64 != next_word
            {
                return None;
            }
            // Modulo 2^32 (see `ShardQuery::bases`).
            let byte_offset = shard.word_offset.wrapping_mul(word_bytes as u32);
            let lower_bytes = shard.upper_start_block.wrapping_mul(word_bytes as u32);
            shards.push(ShardQuery {
                seed_mask: seed_mask(shard.seed),
                num_starts: shard.num_starts(block_slots),
                word_offset: shard.word_offset,
                upper_start_block: shard.upper_start_block,
                last_lower_block: shard.upper_start_block as i64 - 1,
                bases: [byte_offset, byte_offset.wrapping_sub(lower_bytes)],
                strides: [
                    (upper_columns - 1) * WORD_BYTES as u32,
                    upper_columns * WORD_BYTES as u32,
                ],
                lanes: [column_lanes(upper_columns - 1), column_lanes(upper_columns)],
            });
            next_word += shard.words(upper_columns);
        }
        if next_word.checked_mul(word_bytes)? != table_start as u64 {
            return None;
        }
        let path = QueryPath::detect(format, upper_columns, table_start);
        let narrow = format == Format::V5
            && QueryPath::avx512(upper_columns, table_start) == QueryPath::Avx512Narrow;
        let tail = upper_columns as usize * WORD_BYTES;
        let tail_readable = bytes.len() - table_start >= tail;
        Some(RibbonLayout {
            num_shards,
            upper_columns,
            table_start,
            format,
            shards: shards.into(),
            tail_readable,
            unchecked_len: match (narrow, tail_readable) {
                (false, _) => usize::MAX,
                (true, false) => table_start,
                (true, true) => table_start + tail,
            },
            path,
            query: path.query_fn(),
        })
    }

    /// The layout of a filter with no shards, which answers "may contain"
    /// for every key: what a decoded filter of another kind holds in place
    /// of a Ribbon layout. Never on the narrow AVX-512 path.
    pub(crate) fn empty() -> RibbonLayout {
        // One shared empty table, so that decoding a filter of another kind
        // allocates nothing for it.
        static NO_SHARDS: OnceLock<Arc<[ShardQuery]>> = OnceLock::new();
        let path = QueryPath::Scalar;
        RibbonLayout {
            num_shards: 0,
            upper_columns: 1,
            table_start: 0,
            format: Format::V5,
            shards: Arc::clone(NO_SHARDS.get_or_init(|| Arc::from(Vec::new()))),
            tail_readable: false,
            unchecked_len: usize::MAX,
            path,
            query: path.query_fn(),
        }
    }

    /// Number of shards.
    pub fn num_shards(&self) -> u32 {
        self.num_shards
    }

    /// Result bits per slot in the upper blocks of every shard.
    pub fn upper_columns(&self) -> u32 {
        self.upper_columns
    }

    /// The format id of the parsed bytes: [`FORMAT_RIBBON`] (0x05) or the
    /// retired [`FORMAT_RIBBON_V3`] (0x03).
    pub fn format_id(&self) -> u8 {
        match self.format {
            Format::V3 => FORMAT_RIBBON_V3,
            Format::V5 => FORMAT_RIBBON,
        }
    }

    /// Slots per block of this layout's solution: 64 (format 0x05) or 128
    /// (format 0x03).
    pub fn block_slots(&self) -> u32 {
        self.format.block_slots() as u32
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
            .map(|s| s.num_blocks as u64 * self.format.block_slots())
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
                let f = s.upper_start_share(self.format.block_slots());
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
    /// same answer. Format 0x03 bytes take a bounds-checked scalar query.
    #[inline]
    pub fn may_contain(&self, bytes: &[u8], key_hash: u64) -> bool {
        // SAFETY: `query` is `path.query_fn()` (set together in `parse` and
        // `on_path`), and `path` is a vector path only if the CPU reported
        // every feature that path's function enables (`QueryPath::detect`,
        // `on_path`), which is all `query_fn` asks of its callers.
        unsafe { (self.query)(self, bytes, key_hash) }
    }

    /// The function a decoded filter `F` stores to answer its queries: on
    /// the narrow AVX-512 path, the query itself (reading the solution
    /// without bounds checks, which `F`'s contract allows), so that a query
    /// is one indirect call; on other paths, a call of
    /// [`may_contain`](Self::may_contain) on `F`'s bytes. `readable_len` is
    /// `F`'s [`RibbonSource::readable_len`].
    pub(crate) fn query_fn_for<F: RibbonSource>(&self, readable_len: usize) -> SourceQueryFn<F> {
        #[cfg(target_arch = "x86_64")]
        if self.path == QueryPath::Avx512Narrow {
            let tail = self.upper_columns as usize * WORD_BYTES;
            return if readable_len.saturating_sub(self.table_start) >= tail {
                query_narrow::<F, true>
            } else {
                query_narrow::<F, false>
            };
        }
        let _ = readable_len;
        query_via_layout::<F>
    }

    /// The AVX2 query. Out of line, like every path's function, so that
    /// [`may_contain`](Self::may_contain) is a tail call through
    /// [`query`](Self::query) and inlines into callers without making them
    /// save registers.
    ///
    /// Only called when `path` is `Avx2`, or after checking the CPU.
    #[cfg(target_arch = "x86_64")]
    #[inline(never)]
    #[target_feature(enable = "avx2,bmi2")]
    fn may_contain_avx2(&self, bytes: &[u8], key_hash: u64) -> bool {
        match self.locate_v5(bytes, key_hash) {
            Ok(key) => avx2::check_columns(bytes, &key),
            Err(answer) => answer,
        }
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
    /// benchmarks and tests. A format 0x03 layout has one path, which every
    /// name keeps.
    #[doc(hidden)]
    pub fn on_path(self, name: &str) -> Option<RibbonLayout> {
        let path = match name {
            "avx512" if cpu_has_avx512() => QueryPath::avx512(self.upper_columns, self.table_start),
            "avx2" if cpu_has_avx2() => QueryPath::Avx2,
            "scalar" => QueryPath::Scalar,
            _ => return None,
        };
        let path = if self.format == Format::V3 {
            QueryPath::Legacy
        } else {
            path
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
        self.may_contain_scalar_path(bytes, key_hash)
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

    /// The AVX2 query whatever path [`may_contain`](Self::may_contain)
    /// takes; `None` if the CPU lacks AVX2 or BMI2. For tests that compare
    /// the paths.
    #[doc(hidden)]
    pub fn may_contain_avx2_path(&self, bytes: &[u8], key_hash: u64) -> Option<bool> {
        #[cfg(target_arch = "x86_64")]
        if cpu_has_avx2() {
            // SAFETY: `cpu_has_avx2` just confirmed AVX2 and BMI2, the
            // target features `may_contain_avx2` enables.
            return Some(unsafe { self.may_contain_avx2(bytes, key_hash) });
        }
        let _ = (bytes, key_hash);
        None
    }

    /// The AVX-512 query whatever path [`may_contain`](Self::may_contain)
    /// takes (the narrow one where the layout allows it); `None` if the CPU
    /// lacks one of its features. For tests that compare the paths.
    #[doc(hidden)]
    pub fn may_contain_avx512_path(&self, bytes: &[u8], key_hash: u64) -> Option<bool> {
        #[cfg(target_arch = "x86_64")]
        if cpu_has_avx512() {
            return Some(
                if QueryPath::avx512(self.upper_columns, self.table_start)
                    == QueryPath::Avx512Narrow
                {
                    // SAFETY: `cpu_has_avx512` just confirmed every target
                    // feature `may_contain_avx512_narrow` enables.
                    unsafe { self.may_contain_avx512_narrow(bytes, key_hash) }
                } else {
                    // SAFETY: as above, for `may_contain_avx512`.
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

    /// The AVX-512 query: every column count, no scalar fallback.
    #[cfg(target_arch = "x86_64")]
    #[inline(never)]
    #[target_feature(enable = "avx512f,avx512vl,avx512vbmi2,avx512vpopcntdq,bmi2")]
    fn may_contain_avx512(&self, bytes: &[u8], key_hash: u64) -> bool {
        match self.locate_v5(bytes, key_hash) {
            Ok(key) => avx512::check_columns(bytes, &key),
            Err(answer) => answer,
        }
    }

    /// The AVX-512 query for format 0x05 layouts of 2 to 8 upper columns
    /// (every start block has 1 to 8): one chunk.
    ///
    /// One length check per call (`bytes` covers the solution, which
    /// [`parse`](Self::parse) checked holds every read a key can make), then
    /// no bounds checks; shorter bytes, and layouts this query does not
    /// cover, go to the bounds-checked scalar path.
    #[cfg(target_arch = "x86_64")]
    #[inline(never)]
    #[target_feature(enable = "avx512f,avx512vl,avx512vbmi2,avx512vpopcntdq,bmi2")]
    fn may_contain_avx512_narrow(&self, bytes: &[u8], key_hash: u64) -> bool {
        if bytes.len() < self.unchecked_len {
            return self.may_contain_checked(bytes, key_hash);
        }
        // SAFETY: `unchecked_len` is below `usize::MAX` only for a format
        // 0x05 layout that `QueryPath::avx512` gives the narrow path (else
        // `usize::MAX`, which no slice length reaches), so this layout,
        // which came from `parse`, meets `narrow_unchecked`'s conditions on
        // it, and `bytes` has at least `table_start` readable bytes, and
        // `8 * upper_columns` more if `tail_readable` (`unchecked_len`, just
        // checked); the CPU has every feature `narrow_unchecked` needs (this
        // function's target features).
        unsafe {
            if self.tail_readable {
                avx512::narrow_unchecked::<true>(self, bytes.as_ptr(), key_hash)
            } else {
                avx512::narrow_unchecked::<false>(self, bytes.as_ptr(), key_hash)
            }
        }
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

    /// The key's shard, row and position in a format 0x05 solution; `None`
    /// if the layout has no shard for it (impossible for a parsed layout).
    ///
    /// Branch-free after the shard lookup: each block's first word comes
    /// from `min` rather than a test against the first upper block.
    #[inline(always)]
    fn locate(&self, key_hash: u64) -> Option<Located> {
        debug_assert_eq!(self.format, Format::V5);
        let index = fastrange64(key_hash, self.num_shards as u64) as usize;
        let shard = self.shards.get(index)?;
        let h1 = seeded_with_mask(key_hash, shard.seed_mask);
        let row = row_from_seeded(h1, shard.num_starts);
        let upper = self.upper_columns as usize;
        let block = row.start / BLOCK_SLOTS;
        let shift = (row.start % BLOCK_SLOTS) as u32;
        let first_upper = shard.upper_start_block as usize;
        let columns = upper - usize::from(block < first_upper);
        // Blocks are contiguous: the next block follows the start block,
        // and the one after follows the next block.
        let next = columns * WORD_BYTES;
        let next_columns = upper - usize::from(block + 1 < first_upper);
        Some(Located {
            here: shard.block_word(block, upper) * WORD_BYTES,
            next,
            last: if shift == 0 {
                next
            } else {
                next + next_columns * WORD_BYTES
            },
            columns,
            shift,
            coeff: row.coeff,
            result: row.result,
        })
    }

    /// For the vector paths: the key's row in a format 0x05 layout, or the
    /// answer when there is nothing for them to check (a format 0x03 layout,
    /// answered by its own bounds-checked query, or a key without a shard).
    #[inline(always)]
    fn locate_v5(&self, bytes: &[u8], key_hash: u64) -> std::result::Result<Located, bool> {
        if self.format == Format::V3 {
            return Err(self.may_contain_scalar_path(bytes, key_hash));
        }
        self.locate(key_hash).ok_or(true)
    }

    #[inline(always)]
    fn query(&self, bytes: &[u8], key_hash: u64, parity64: impl Fn(u64) -> u32) -> bool {
        if self.format == Format::V3 {
            return self.query_v3(bytes, key_hash, parity64);
        }
        match self.locate(key_hash) {
            Some(key) => Self::check_columns(bytes, &key, parity64),
            None => true,
        }
    }

    /// The scalar column loop (format 0x05): one parity per result column.
    #[inline(always)]
    fn check_columns(bytes: &[u8], key: &Located, parity64: impl Fn(u64) -> u32) -> bool {
        let len = key.columns * WORD_BYTES;
        // Rather than shifting every solution word into the window, split
        // the coefficients once into a mask per block.
        let [m0, m1, m2] = key.masks();
        let Some(words) = key.words(bytes) else {
            return true;
        };
        let (a, b, c) = (
            &words[..len],
            &words[key.next..key.next + len],
            &words[key.last..],
        );
        let word = |chunk: &[u8]| <[u8; WORD_BYTES]>::try_from(chunk).map(u64::from_le_bytes);
        // Columns are checked in a branch-free group of EARLY_EXIT_COLUMNS,
        // then the rest: `diff` collects mismatching columns.
        let mut diff = 0u32;
        let columns = a
            .chunks_exact(WORD_BYTES)
            .zip(b.chunks_exact(WORD_BYTES))
            .zip(c.chunks_exact(WORD_BYTES));
        for (j, ((wa, wb), wc)) in columns.enumerate() {
            let (Ok(wa), Ok(wb), Ok(wc)) = (word(wa), word(wb), word(wc)) else {
                return true;
            };
            diff |= parity64((wa & m0) ^ (wb & m1) ^ (wc & m2)) ^ ((key.result >> j) & 1);
            if j + 1 == EARLY_EXIT_COLUMNS && diff != 0 {
                return false;
            }
        }
        diff == 0
    }

    /// Format 0x03: the key's start block of 128 slots holds bits
    /// `shift..128` of its window, the next block (which directly follows
    /// and stores at least as many columns) the rest.
    #[inline(always)]
    fn query_v3(&self, bytes: &[u8], key_hash: u64, parity64: impl Fn(u64) -> u32) -> bool {
        let index = fastrange64(key_hash, self.num_shards as u64) as usize;
        let Some(shard) = self.shards.get(index) else {
            return true;
        };
        let row = row_from_seeded(
            seeded_with_mask(key_hash, shard.seed_mask),
            shard.num_starts,
        );
        let upper = self.upper_columns as usize;
        let block = row.start / V3_BLOCK_SLOTS;
        let shift = (row.start % V3_BLOCK_SLOTS) as u32;
        let columns = upper - usize::from(block < shard.upper_start_block as usize);
        let here = shard.block_word(block, upper) * V3_WORD_BYTES;
        let len = columns * V3_WORD_BYTES;
        let low = row.coeff << shift;
        let high = if shift == 0 {
            0
        } else {
            row.coeff >> (W as u32 - shift)
        };
        // With a block-aligned start the window ends with the start block,
        // which may be the shard's last: read it again (ANDed with zero).
        let next = if shift == 0 { here } else { here + len };
        let (Some(this_block), Some(next_block)) =
            (bytes.get(here..here + len), bytes.get(next..next + len))
        else {
            return true;
        };
        let word = |chunk: &[u8]| <[u8; V3_WORD_BYTES]>::try_from(chunk).map(u128::from_le_bytes);
        let pairs = this_block
            .chunks_exact(V3_WORD_BYTES)
            .zip(next_block.chunks_exact(V3_WORD_BYTES));
        for (j, (c0, c1)) in pairs.enumerate() {
            let (Ok(w0), Ok(w1)) = (word(c0), word(c1)) else {
                return true;
            };
            if parity64(fold((w0 & low) ^ (w1 & high))) != (row.result >> j) & 1 {
                return false;
            }
        }
        true
    }
}

/// The query a decoded filter stores on paths other than the narrow
/// AVX-512 one: its layout's [`may_contain`](RibbonLayout::may_contain) on
/// its bytes; `true` ("may contain") for a filter that is not a Ribbon one.
///
/// # Safety
///
/// None needed (`unsafe` only to have the type of every query function).
unsafe fn query_via_layout<F: RibbonSource>(filter: &F, key_hash: u64) -> bool {
    filter.ribbon().may_contain(filter.ribbon_bytes(), key_hash)
}

/// The narrow AVX-512 query of a decoded filter, with no length check:
/// `F`'s contract says its bytes are those the layout was parsed from.
///
/// # Safety
///
/// Must be the function [`RibbonLayout::query_fn_for`] returned for the
/// filter's layout (its path is the narrow AVX-512 one, so the CPU has
/// AVX-512 F, VL, VBMI2, VPOPCNTDQ and BMI2).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512vbmi2,avx512vpopcntdq,bmi2")]
unsafe fn query_narrow<F: RibbonSource, const TAIL_READABLE: bool>(
    filter: &F,
    key_hash: u64,
) -> bool {
    let layout = filter.ribbon();
    debug_assert_eq!(layout.path, QueryPath::Avx512Narrow);
    debug_assert!(
        !TAIL_READABLE
            || filter.readable_len() >= layout.table_start + layout.upper_columns as usize * 8
    );
    // SAFETY: `query_fn_for` returns this function only for a layout on the
    // narrow path, with `TAIL_READABLE` only if `F`'s `readable_len` (which
    // does not change) is at least `table_start + 8 * upper_columns`;
    // `parse` (or `on_path`, which keeps the parsed fields) chooses that
    // path only for a format 0x05 layout that meets `narrow_unchecked`'s
    // conditions and only when the CPU has its features (`empty()` never
    // does), and layouts are not modified after that. By `F`'s contract the
    // layout was parsed from exactly `ribbon_bytes()`, whose length `parse`
    // checked is at least `table_start`, and `readable_len` bytes are
    // readable from its first.
    unsafe {
        avx512::narrow_unchecked::<TAIL_READABLE>(layout, filter.ribbon_bytes().as_ptr(), key_hash)
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
/// loads, ternary logic), VBMI2 (the funnel shift that moves the key's
/// window into place), VPOPCNTDQ (the parities) and BMI2 (the row hashing's
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

/// The AVX-512 query (format 0x05): up to eight columns per chunk, one
/// chunk for the usual rates (8 result bits or fewer).
///
/// A key's window starts at bit `shift = start % 64` of its start block's
/// words (`a`, one 64-bit lane per column) and runs through the next
/// block's (`b`) into the one after (`c`). Three masked 64-byte loads read
/// the key's columns of the three blocks (lanes past the last column are
/// zero and never read); two `vpshrdvq` funnel shifts by `shift` give the
/// window's low and high 64 slots of every column (`lo = (b:a) >> shift`,
/// `hi = (c:b) >> shift`; a count of 0 leaves `a` and `b`, so `c` is then
/// unused), one AND and one `vpternlogq` mask them with the broadcast
/// coefficient halves, and one `vpopcntq` and one `vptestmq` give the eight
/// columns' parities as a mask, compared with the key's result bits.
///
/// This module has `unsafe` because `#[target_feature]` functions and the
/// vector loads need it. The loads of `check_columns` stay inside slices
/// whose length was checked first; those of `narrow_unchecked` inside the
/// solution, whose length its caller checked once (see its `# Safety`).
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{
        fastrange64, row_from_seeded, seeded_with_mask, Format, Located, QueryPath, RibbonLayout,
        BLOCK_SLOTS, WORD_BYTES,
    };
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
}

/// The AVX2 query (format 0x05): four columns per chunk.
///
/// The key's window is split once into three 64-bit masks, of its start
/// block's words, the next block's and the one after's
/// ([`Located::masks`](super::Located)). A chunk is one masked 32-byte load
/// per block (four columns; lanes past the last column are zero and never
/// read), three ANDs and two XORs, six shift-XORs that bring each lane's
/// parity to its bit 63, and one `vmovmskpd` of those bits, compared with
/// the key's result bits.
///
/// This module has `unsafe` because `#[target_feature]` functions and the
/// vector loads need it; the loads stay inside slices whose length was
/// checked first.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Located, WORD_BYTES};
    use std::arch::x86_64::*;

    /// `vpmaskmovq` masks selecting the first `n` of four lanes.
    static LANES: [[i64; 4]; 5] = [
        [0, 0, 0, 0],
        [-1, 0, 0, 0],
        [-1, -1, 0, 0],
        [-1, -1, -1, 0],
        [-1, -1, -1, -1],
    ];

    /// Same answer as `RibbonLayout::check_columns`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) fn check_columns(bytes: &[u8], key: &Located) -> bool {
        let Some(words) = key.words(bytes) else {
            return true;
        };
        let [m0, m1, m2] = key.masks().map(|m| _mm256_set1_epi64x(m as i64));
        let mut first = 0;
        while first < key.columns {
            let n = (key.columns - first).min(4);
            // SAFETY: `LANES[n]` is 32 readable bytes; the load is unaligned.
            let lanes = unsafe { _mm256_loadu_si256(LANES[n].as_ptr().cast::<__m256i>()) };
            let load = |block: usize| {
                // SAFETY: `block` is 0, `next` or `last`, and `first + n <=
                // columns`, so the `n` words from word `first` of that block
                // end at most at `last + columns * 8 == words.len()` (`next
                // <= last`, `Located::words`): bytes of `words`. `lanes`
                // selects exactly those `n` lanes, and masked-off lanes are
                // not accessed.
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
                _mm256_xor_si256(
                    _mm256_and_si256(load(0), m0),
                    _mm256_and_si256(load(key.next), m1),
                ),
                _mm256_and_si256(load(key.last), m2),
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
            // Sized in whole rows' widths (128 slots), as the first layout
            // was, then stored as blocks of 64 slots.
            let rows_wide = ((wanted / W as f64).round() as usize).max(1);
            // Upper blocks sit at the end; pick their number so the share of
            // starts in them matches `share`.
            let num_starts = (rows_wide * W - (W - 1)) as f64;
            let upper_wide = ((share * num_starts + (W - 1) as f64) / W as f64).round() as usize;
            let upper_wide = if share <= 0.0 {
                0
            } else {
                upper_wide.clamp(1, rows_wide)
            };
            let per_row = W / BLOCK_SLOTS;
            let num_blocks = rows_wide * per_row;
            if num_blocks > u32::MAX as usize {
                return fallback(BuildOutcome::default());
            }
            let shard = RibbonShard {
                word_offset: word_offset as u32,
                num_blocks: num_blocks as u32,
                upper_start_block: ((rows_wide - upper_wide) * per_row) as u32,
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
                let slots = shards[shard].num_blocks as usize * BLOCK_SLOTS;
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
                let slots = shards[job.shard].num_blocks as usize * BLOCK_SLOTS;
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
        let mut layout = Interleaved64 {
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
    fn solve_popcnt(&self, columns: usize, layout: &mut Interleaved64<'_>) {
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

/// Writes solved words into a shard's interleaved solution (format 0x05):
/// block `q` (64 slots) holds one 8-byte word per column, `upper - 1`
/// columns below `upper_start_block`, `upper` from it, blocks one after
/// another.
struct Interleaved64<'a> {
    /// Exactly the shard's solution bytes.
    out: &'a mut [u8],
    /// Where the block after the one being written starts (`None`: the end).
    block_end: Option<usize>,
    upper_start_block: usize,
    upper: usize,
}

impl backsub::Solution for Interleaved64<'_> {
    fn emit(&mut self, q: usize, low: &[u64], _high: &[u64]) {
        let columns = self.upper - usize::from(q < self.upper_start_block);
        let end = self.block_end.unwrap_or(self.out.len());
        let start = end - columns * WORD_BYTES;
        for (j, &word) in low.iter().take(columns).enumerate() {
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
    fn lanes_on_the_smallest_bands() {
        // 128 slots: one start (0) for every key, so chains run through the
        // whole band to its last slot; 192: starts 0..65. One key, a few,
        // about as many keys as slots (solvable or not) and more than
        // slots (never), with and without duplicates; lanes stop at very
        // different times.
        let mut shards: Vec<Shard> = Vec::new();
        for i in 0..24u64 {
            let n = [1u64, 2, 60, 110, 128, 140][i as usize % 6];
            let mut keys = test_hashes(n, 1_000 + i);
            if i % 4 == 3 {
                keys.extend(keys.clone());
            }
            let slots = if i % 12 < 6 { 128 } else { 192 };
            shards.push((keys, slots, i as u8));
        }
        let solved = check_lanes_match_one_at_a_time(&shards);
        assert!(solved[0] && solved[1], "{solved:?}");
        assert!(!solved[5], "{solved:?}");
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
        let num_starts = band.num_starts;
        let mut attend_row = |row: LaneRow| {
            attend(
                &mut band.coeffs,
                &mut band.results,
                &sorted,
                num_starts,
                row,
            )
        };
        let moved = attend_row(LaneRow::from_row(row, 0)).expect("moved on");
        assert_eq!(moved.index, 0, "same key");
        assert_eq!(moved.start, 10 + 64 + 2);
        assert_eq!((moved.lo, moved.hi, moved.result), (0b11, 0, 3));
        // The same row again is redundant: on to the next key's row.
        let next = attend_row(LaneRow::from_row(stored, 0)).expect("next key");
        assert_eq!(next.index, 1);
        // Redundant on the last key: done; inconsistent: no solution.
        assert_eq!(attend_row(LaneRow::from_row(stored, 1)), Err(true));
        let inconsistent = Row {
            result: 7,
            ..stored
        };
        assert_eq!(attend_row(LaneRow::from_row(inconsistent, 0)), Err(false));
        assert_eq!(next.row().coeff, band.row(1).coeff);
    }
}
