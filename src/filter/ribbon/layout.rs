use super::{
    seed_mask, BLOCK_SLOTS, MAX_COLUMNS, SHARD_ENTRY_BYTES, TRAILER_BYTES, V3_BLOCK_SLOTS,
    V3_WORD_BYTES, W, WORD_BYTES,
};
use crate::filter::{FORMAT_RIBBON, FORMAT_RIBBON_V3};
// The AVX-512 check both Ribbon formats' paths share.
pub(super) use crate::filter::cpu_has_avx512;
use std::sync::{Arc, OnceLock};

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

    pub(super) fn write(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&self.word_offset.to_le_bytes());
        out[4..8].copy_from_slice(&self.num_blocks.to_le_bytes());
        out[8..12].copy_from_slice(&self.upper_start_block.to_le_bytes());
        out[12] = self.seed;
    }

    /// Solution words (one column of one block each) for `upper` columns.
    pub(super) fn words(&self, upper: u32) -> u64 {
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
pub(super) enum Format {
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
pub(super) struct ShardQuery {
    /// XORed into the key hash before the seeded remix.
    pub(super) seed_mask: u64,
    /// Possible start slots (at least 1).
    pub(super) num_starts: u64,
    /// Where the shard's solution starts, in solution words.
    pub(super) word_offset: u32,
    /// First block that stores `upper_columns` columns.
    pub(super) upper_start_block: u32,
    /// `upper_start_block - 1`: the last lower block, whose next block
    /// stores one column more than itself (-1, no block, when every block
    /// is an upper one). A block is an upper one iff it is greater, so one
    /// comparison tells both.
    pub(super) last_lower_block: i64,
    /// For the narrow AVX-512 query (format 0x05), by block kind (0: the
    /// lower blocks, 1: the upper ones): block `b` of that kind starts at
    /// byte `bases[kind] + b * strides[kind]`, modulo 2^32 (for the upper
    /// blocks the base is `word_offset * 8 - upper_start_block * 8`, as if
    /// the lower blocks had their column count too). Exact only when the
    /// solution is smaller than 4 GiB, which that path requires.
    pub(super) bases: [u32; 2],
    /// Bytes per block of each kind: `columns * 8` (the lower blocks have
    /// `upper_columns - 1` columns, the upper ones `upper_columns`).
    pub(super) strides: [u32; 2],
    /// `bzhi(0xff, columns)` for each kind: bit `i` selects the block's
    /// word `i` (the load mask), and the same bits select the result bits a
    /// key starting in such a block checks (of the first 8).
    pub(super) lanes: [u8; 2],
}

impl ShardQuery {
    /// The first word of block `block`, in a layout of `upper` columns:
    /// blocks before `upper_start_block` store one column less, so the
    /// block starts at word `block * upper - min(block, upper_start_block)`
    /// of the shard. Branch-free.
    #[inline(always)]
    pub(super) fn block_word(&self, block: usize, upper: usize) -> usize {
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
    pub(super) num_shards: u32,
    pub(super) upper_columns: u32,
    pub(super) table_start: usize,
    /// Which layout the bytes have (format id 0x05, or the retired 0x03).
    pub(super) format: Format,
    /// One entry per shard; shared, so cloning a decoded filter is cheap.
    pub(super) shards: Arc<[ShardQuery]>,
    /// Whether at least `8 * upper_columns` bytes follow the solution (the
    /// shard table and trailer: filters of about 5 shards or more), so that
    /// the narrow AVX-512 query may read the block after its key's next
    /// block even when that is past the last shard (a block-aligned start
    /// in the last shard's last possible block, whose window does not use
    /// it), instead of choosing another block for such starts. For
    /// [`may_contain`](Self::may_contain) on a slice; a decoded filter
    /// decides by its own readable length (`query_fn_for`).
    pub(super) tail_readable: bool,
    /// Bytes at least this long take the narrow AVX-512 query without
    /// bounds checks: `table_start` (plus `8 * upper_columns` if
    /// `tail_readable`) if this layout is one that query covers
    /// (`QueryPath::avx512` picks it: format 0x05, 2 to 8 columns, a
    /// solution under 4 GiB), else `usize::MAX` (never).
    pub(super) unchecked_len: usize,
    /// The query path this CPU takes (checked once, at parse). Same answers
    /// on every path.
    pub(super) path: QueryPath,
    /// `path.query_fn()`: what [`may_contain`](Self::may_contain) calls, so
    /// that the dispatch is one load and one indirect jump.
    pub(super) query: QueryFn,
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
pub(super) enum QueryPath {
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
    pub(super) fn avx512(upper_columns: u32, table_start: usize) -> QueryPath {
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
    pub(super) fn query_fn(self) -> QueryFn {
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
}

/// Whether this CPU has AVX2 and BMI2 (the Ribbon query's vector path; BMI2
/// only lets the row hashing use `mulx` and `rorx`, every AVX2 CPU has it).
pub(super) fn cpu_has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("bmi2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}
