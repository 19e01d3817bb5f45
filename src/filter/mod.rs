//! Point-read filters: the trait every policy implements, the one hash a key
//! gets, and the decoder that reads any built-in filter from its bytes alone.
//!
//! # The read path
//!
//! A point read hashes its user key once with [`key_hash`] (XXH3-64) and hands
//! that hash to every table it consults. Each table asks its filter first; a
//! "definitely absent" answer skips the table without touching a data block.
//!
//! # Self-describing bytes
//!
//! Every built-in filter ends with a one-byte *format id* ([`FORMAT_BLOOM`],
//! [`FORMAT_RIBBON`], the Ribbon format of 64-bit rows [`FORMAT_RIBBON64`],
//! and the earlier Bloom formats [`FORMAT_BLOOM_V2`] and [`FORMAT_BLOOM_V1`]
//! and the previous Ribbon layout [`FORMAT_RIBBON_V3`], all still read)
//! preceded by
//! that format's own small trailer (sizes, probe count or seed). A table
//! written under one policy therefore stays readable after the database
//! switches to another: [`Filter::decode`] and the free function
//! [`may_contain`] pick the right implementation from the bytes. Empty
//! bytes mean the table has no filter ([`Unfiltered::NoFilter`]). Bytes that
//! are truncated, or carry an unknown id or impossible parameters, are never
//! trusted: they decode to a filter that answers "may contain" for every key
//! (no filtering, still correct), and each such decode is counted in
//! [`undecodable_filters`]. A flipped bit *inside* the bit array cannot be seen
//! here; the table's block checksum catches it before the filter is decoded.
//!
//! # Policies
//!
//! * [`BloomPolicy`]: a cache-local blocked Bloom filter (one 64-byte line per
//!   key), the default at 10 bits/key.
//! * [`RibbonPolicy`]: a standard Ribbon filter, about 30% smaller than the
//!   blocked Bloom filter at the same false-positive rate, for more build CPU.
//! * [`NoFilter`]: no bytes, every key "may be present": the baseline.
//!
//! Users can implement [`FilterPolicy`] themselves; such a filter is decoded by
//! the policy of the same [`name`](FilterPolicy::name) given to the database.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};

pub mod bloom;
pub mod budget;
pub mod ribbon;
pub mod ribbon64;
mod shards;

pub use bloom::BloomPolicy;
pub use ribbon::RibbonPolicy;

/// Format id (last byte) of a blocked Bloom filter whose probes are
/// distinct by construction: affine images of one of 128 fixed random
/// "shapes" (what [`BloomPolicy`] builds; see [`bloom`]).
pub const FORMAT_BLOOM: u8 = 0x07;
/// Format id of the second blocked Bloom format: same layout and trailer,
/// probes the first distinct values of a multiply chain, which a query had
/// to find by skipping repeats. Still read and queried exactly; no longer
/// built.
pub const FORMAT_BLOOM_V2: u8 = 0x04;
/// Format id of the first blocked Bloom format: same layout and trailer,
/// but a key's probes were drawn with replacement, so two could land on the
/// same bit (about 1.2% more false positives at 10 bits/key). Still read
/// and queried exactly; no longer built.
pub const FORMAT_BLOOM_V1: u8 = 0x01;
/// Format id (last byte) of a standard Ribbon filter with 128-bit
/// coefficient rows ([`ribbon`]): its solution is stored in blocks of 64
/// slots. Still read and queried; built only when asked for
/// ([`RibbonPolicy`] builds [`FORMAT_RIBBON64`]).
pub const FORMAT_RIBBON: u8 = 0x05;
/// Format id of a Ribbon filter with 64-bit coefficient rows, smashed starts
/// and one column count per shard ([`ribbon64`]): what [`RibbonPolicy`]
/// builds.
pub const FORMAT_RIBBON64: u8 = 0x06;
/// Format id of the previous Ribbon layout: same rows, sizes, shard table
/// and trailer, but the solution stored in blocks of 128 slots (16-byte
/// words). Still read and queried exactly, through a bounds-checked scalar
/// query; no longer built.
pub const FORMAT_RIBBON_V3: u8 = 0x03;
/// Format id of the first Ribbon version, retired: the layout of
/// [`FORMAT_RIBBON_V3`], but its rows
/// were derived from the key hash differently, so reading its bytes with the
/// current code would give false negatives. Such bytes decode as
/// undecodable ("may contain" for every key, counted in
/// [`undecodable_filters`]).
pub const FORMAT_RIBBON_V1: u8 = 0x02;

/// Prefix of the names of built-in policies. Filters recorded under such a
/// name are decoded from their bytes, whatever policy the database now uses.
pub const BUILTIN_NAME_PREFIX: &str = "sievedb.";

/// The one hash a key gets: XXH3, 64 bits.
///
/// A point read computes it once and reuses it for every table it consults;
/// filters derive all their probe positions from it.
#[inline]
pub fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// Seed of [`prefix_hash`]: keeps a prefix's hash apart from the
/// [`key_hash`] of a key made of the same bytes, so a table holding the
/// prefix `"ab"` of `"abc"` does not look like it holds the key `"ab"`.
const PREFIX_HASH_SEED: u64 = 0x005e_ed0f_9e37_79b9;

/// The hash a key prefix gets in a table's filter (XXH3 with its own seed),
/// when the table is built with a prefix length
/// ([`Options::prefix_filter_len`](crate::Options::prefix_filter_len)): the
/// filter then answers "may this table hold a key starting with these
/// bytes?" as well as "may it hold this key?".
#[inline]
pub fn prefix_hash(prefix: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(prefix, PREFIX_HASH_SEED)
}

/// A way of building and querying point-read filters.
///
/// Object-safe: the engine holds the policy as `Arc<dyn FilterPolicy>`. A
/// filter must never give a false negative: if `h` was among the hashes passed
/// to [`build`](FilterPolicy::build), `may_contain(filter, h)` is true.
pub trait FilterPolicy: Send + Sync {
    /// A stable name recorded in every table built with this policy. Built-in
    /// policies use names that start with [`BUILTIN_NAME_PREFIX`]; filters
    /// recorded under such a name are read as built-in filter bytes, so a
    /// custom policy must not use that prefix
    /// ([`Options::validate`](crate::Options::validate) refuses one whose
    /// filters do not decode as built-in ones or give a false negative when
    /// read that way).
    fn name(&self) -> &str;

    /// Builds filter bytes for a set of key hashes (from [`key_hash`]).
    /// Duplicate hashes are allowed.
    fn build(&self, key_hashes: &[u64]) -> Vec<u8>;

    /// Answers whether `key_hash` may have been among the built hashes.
    /// Must return `true` for bytes it cannot interpret.
    ///
    /// When the engine queries a table's filter through a custom policy, a
    /// panic here is caught: that query answers "may contain" (the read
    /// then looks in the table, so its answer stays correct) and counts in
    /// [`custom_filter_panics`].
    fn may_contain(&self, filter: &[u8], key_hash: u64) -> bool;

    /// The policy's size as bits per key, in the unit
    /// [`with_budget_bits_per_key`](Self::with_budget_bits_per_key) takes,
    /// for engines that size each sorted run's filters differently
    /// ([`budget::FilterBudget::Monkey`]). `None` (the default): the
    /// policy has one size and is used as it is.
    fn budget_bits_per_key(&self) -> Option<f64> {
        None
    }

    /// The same policy at `bits_per_key` (in the unit of
    /// [`budget_bits_per_key`](Self::budget_bits_per_key)), with the same
    /// [`name`](Self::name). `None` (the default) for a policy with one
    /// size. Tables record the size their filter was built for (any
    /// positive number: the unit is the policy's), and the engine reads a
    /// custom policy's filter through the configured policy resized to that
    /// size, so the bytes need not say it. A table whose recorded size is
    /// not a finite positive number, read while the configured policy
    /// reports a size, has its filter left unconsulted ("may contain",
    /// counted in [`undecodable_filters`]) rather than read at a wrong size.
    fn with_budget_bits_per_key(&self, bits_per_key: f64) -> Option<Arc<dyn FilterPolicy>> {
        let _ = bits_per_key;
        None
    }
}

impl fmt::Debug for dyn FilterPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FilterPolicy({})", self.name())
    }
}

/// The baseline policy: builds no bytes; every key "may be present", so every
/// point read goes to the table's data blocks.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFilter;

impl NoFilter {
    /// The name recorded in tables built without a filter.
    pub const NAME: &'static str = "sievedb.NoFilter";
}

impl FilterPolicy for NoFilter {
    fn name(&self) -> &str {
        Self::NAME
    }
    fn build(&self, _key_hashes: &[u64]) -> Vec<u8> {
        Vec::new()
    }
    fn may_contain(&self, _filter: &[u8], _key_hash: u64) -> bool {
        true
    }
}

static UNDECODABLE: AtomicU64 = AtomicU64::new(0);

/// How many filters, since the process started, could not be decoded (unknown
/// format id, truncated or inconsistent trailer, unknown custom policy) and
/// were therefore treated as "may contain" for every key.
pub fn undecodable_filters() -> u64 {
    UNDECODABLE.load(Ordering::Relaxed)
}

static CUSTOM_PANICS: AtomicU64 = AtomicU64::new(0);

/// How many queries of a custom policy's filter, since the process
/// started, panicked in [`FilterPolicy::may_contain`]. Each answered "may
/// contain": a panicking policy costs data block reads, not wrong answers
/// or a panicking read (found by review, thirty-first session: the panic
/// reached the caller of `get`).
pub fn custom_filter_panics() -> u64 {
    CUSTOM_PANICS.load(Ordering::Relaxed)
}

/// A custom policy's answer, "may contain" if it panics.
fn custom_may_contain(policy: &dyn FilterPolicy, bytes: &[u8], key_hash: u64) -> bool {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        policy.may_contain(bytes, key_hash)
    }))
    .unwrap_or_else(|_| {
        CUSTOM_PANICS.fetch_add(1, Ordering::Relaxed);
        true
    })
}

/// Why a filter answers "may contain" for every key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unfiltered {
    /// The table was built without a filter (empty bytes).
    NoFilter,
    /// The bytes could not be decoded (counted in [`undecodable_filters`]).
    Undecodable,
}

#[derive(Clone)]
enum Kind {
    /// A blocked Bloom filter; its layout is [`Filter::bloom`].
    Bloom,
    /// A Ribbon filter of format 0x05 or 0x03; its layout is
    /// [`Filter::ribbon`].
    Ribbon,
    /// A Ribbon filter of format 0x06; its layout is [`Filter::ribbon64`].
    Ribbon64,
    Custom(Arc<dyn FilterPolicy>),
    All(Unfiltered),
}

/// A decoded filter, ready to answer queries without re-parsing its bytes.
///
/// Tables decode their filter once when they are opened.
#[derive(Clone)]
#[repr(C)]
pub struct Filter {
    /// The layout of a blocked Bloom filter ([`Kind::Bloom`]), parsed from
    /// `bytes`; for other kinds, that of an empty filter, never read. The
    /// first field (`repr(C)`): its address is the filter's, so the Bloom
    /// query's `asm` reads `num_lines` at a constant offset from the
    /// filter pointer it was called with, no address computed first.
    bloom: bloom::BloomLayout,
    bytes: LineAligned,
    kind: Kind,
    /// The layout of a Ribbon filter ([`Kind::Ribbon`]), parsed from
    /// `bytes`; for other kinds, that of an empty filter, never read. A
    /// field rather than the kind's payload, so that the Ribbon query
    /// function reads it without a branch on the kind.
    ribbon: ribbon::RibbonLayout,
    /// The layout of a format 0x06 Ribbon filter ([`Kind::Ribbon64`]),
    /// parsed from `bytes`; for other kinds, that of an empty filter, never
    /// read. A field for the same reason as `ribbon`.
    ribbon64: ribbon64::Ribbon64Layout,
    /// What [`may_contain`](Self::may_contain) calls, chosen at decode for
    /// the kind (and, for a Bloom filter, by the layout for its scheme,
    /// probe count and the CPU): a point read's filter check is then one
    /// indirect call, with no branch on the kind first. Measured against a
    /// `match` on the kind followed by the layout's own dispatch:
    /// docs/filters.md. The one exception, the most common query, is
    /// called directly (see `may_contain`).
    query: bloom::QueryFn<Filter>,
}

// SAFETY: `bloom` is either the layout `BloomLayout::parse` accepted for
// exactly these bytes (`num_lines` lines and then a trailer, so `num_lines *
// 64 <= len`), possibly moved to another path by `with_bloom_path` (which
// keeps `num_lines`), or an empty layout (no lines); `bytes` is owned by the filter,
// never modified, and `as_ptr` points to its first byte.
unsafe impl bloom::BloomLines for Filter {
    #[inline(always)]
    fn layout(&self) -> &bloom::BloomLayout {
        &self.bloom
    }
    #[inline(always)]
    fn lines(&self) -> *const u8 {
        self.bytes.as_ptr()
    }
}

/// The query of a filter that filters nothing.
///
/// # Safety
///
/// None needed (`unsafe` only to have the type of every query function).
unsafe fn query_all(_: &Filter, _: u64) -> bool {
    true
}

// SAFETY: `ribbon` is either `RibbonLayout::empty()` or the layout
// `RibbonLayout::parse` returned for exactly `bytes.as_slice()`
// (`decode_builtin`); `bytes` is owned by the filter and never modified,
// and neither field changes after construction (`with_bloom_path` keeps
// both). `as_slice` and `as_ptr` start at the same byte, from which
// `readable_len` bytes (whole initialised lines, at least `len`) are
// readable.
unsafe impl ribbon::RibbonSource for Filter {
    #[inline(always)]
    fn ribbon(&self) -> &ribbon::RibbonLayout {
        &self.ribbon
    }
    #[inline(always)]
    fn ribbon_bytes(&self) -> &[u8] {
        self.bytes.as_slice()
    }
    #[inline(always)]
    fn readable_len(&self) -> usize {
        self.bytes.readable_len()
    }
}

// SAFETY: `ribbon64` is either `Ribbon64Layout::empty()` or the layout
// `Ribbon64Layout::parse` returned for exactly `bytes.as_slice()`
// (`decode_builtin`); `bytes` is owned by the filter and never modified, and
// neither field changes after construction (`with_bloom_path` keeps both).
unsafe impl ribbon64::Ribbon64Source for Filter {
    #[inline(always)]
    fn ribbon64(&self) -> &ribbon64::Ribbon64Layout {
        &self.ribbon64
    }
    #[inline(always)]
    fn ribbon64_bytes(&self) -> &[u8] {
        self.bytes.as_slice()
    }
}

/// The query of a custom policy's filter.
///
/// # Safety
///
/// None needed (`unsafe` only to have the type of every query function).
unsafe fn query_custom(filter: &Filter, key_hash: u64) -> bool {
    match &filter.kind {
        Kind::Custom(policy) => {
            custom_may_contain(policy.as_ref(), filter.bytes.as_slice(), key_hash)
        }
        _ => filter.may_contain_by_kind(key_hash),
    }
}

/// How many keys ahead [`Filter::may_contain_batch`] prefetches a blocked
/// Bloom filter's line: far enough that the line has arrived when its key is
/// answered, near enough that it is still in L1. Measured against 8 and 32
/// in docs/filters.md ("Batched queries").
pub const BATCH_PREFETCH_DISTANCE: usize = 16;

/// A software prefetch of the cache line holding `*value`, into all cache
/// levels (`_MM_HINT_T0`); nothing on targets other than x86_64.
#[inline(always)]
pub(crate) fn prefetch_read<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch is a hint that never faults and reads nothing
        // into the program; SSE (which provides it) is part of the x86_64
        // baseline; the address is that of a live reference.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(value).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// Filter bytes that start on a 64-byte (cache-line) boundary.
///
/// A blocked Bloom filter promises one cache line per query, which holds
/// only if its 64-byte lines are 64-byte aligned in memory. A `Vec<u8>` or a
/// copy out of a table file is 16-byte aligned at best, and then three lines
/// in four straddle two cache lines. The bytes are copied once, when the
/// filter is decoded, into whole aligned lines (the last one zero-padded),
/// followed by one more zeroed line: the narrow AVX-512 Ribbon query may
/// read up to 64 bytes past the end of the bytes (for a window that does
/// not use them), and can then skip choosing another address for such
/// keys (see `RibbonSource::readable_len`).
#[derive(Clone)]
struct LineAligned {
    lines: Box<[CacheLine]>,
    len: usize,
}

/// What decoding found: the kind, and the layout of a Ribbon filter of that
/// kind (the other layout, and both for other kinds, empty).
struct Decoded {
    kind: Kind,
    ribbon: ribbon::RibbonLayout,
    ribbon64: ribbon64::Ribbon64Layout,
}

impl Decoded {
    /// `kind` with empty Ribbon layouts.
    fn of_kind(kind: Kind) -> Decoded {
        Decoded {
            kind,
            ribbon: ribbon::RibbonLayout::empty(),
            ribbon64: ribbon64::Ribbon64Layout::empty(),
        }
    }
}

/// 64 bytes on a 64-byte boundary.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct CacheLine([u8; 64]);

impl LineAligned {
    fn new(bytes: &[u8]) -> LineAligned {
        let mut lines = vec![CacheLine([0; 64]); bytes.len().div_ceil(64) + 1].into_boxed_slice();
        for (line, chunk) in lines.iter_mut().zip(bytes.chunks(64)) {
            line.0[..chunk.len()].copy_from_slice(chunk);
        }
        LineAligned {
            lines,
            len: bytes.len(),
        }
    }

    /// The first filter byte, on a 64-byte boundary; `len` bytes follow.
    ///
    /// The Bloom query reads its line through this pointer: it is on every
    /// point read's path, and the safe alternatives (slicing the bytes on
    /// every query, or a byte buffer plus an aligned offset into it) cost
    /// it bounds checks worth about a tenth of its instructions
    /// (docs/filters.md).
    #[inline]
    fn as_ptr(&self) -> *const u8 {
        self.lines.as_ptr().cast::<u8>()
    }

    /// Bytes readable from [`as_ptr`](Self::as_ptr): the filter bytes, the
    /// zero padding of their last line and one more zeroed line.
    #[inline]
    fn readable_len(&self) -> usize {
        self.lines.len() * 64
    }

    /// The filter bytes as a slice.
    #[inline]
    fn as_slice(&self) -> &[u8] {
        let len = self.len.min(self.lines.len() * 64);
        // SAFETY: `CacheLine` is `repr(C)` around `[u8; 64]` (size 64, no
        // padding), so `lines` is `lines.len() * 64` initialised, contiguous
        // bytes, and `len` does not exceed that. The slice borrows `self`, so
        // the boxed lines outlive it and are not mutated meanwhile.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<u8>(), len) }
    }
}

impl fmt::Debug for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Bloom => "bloom",
            Kind::Ribbon | Kind::Ribbon64 => "ribbon",
            Kind::Custom(p) => p.name(),
            Kind::All(Unfiltered::NoFilter) => "none",
            Kind::All(Unfiltered::Undecodable) => "undecodable",
        };
        f.debug_struct("Filter")
            .field("kind", &kind)
            .field("bytes", &self.bytes.len)
            .finish()
    }
}

impl Filter {
    /// Decodes built-in filter bytes from the bytes alone.
    pub fn decode(bytes: impl AsRef<[u8]>) -> Filter {
        let bytes = LineAligned::new(bytes.as_ref());
        let decoded = Self::decode_builtin(bytes.as_slice());
        Filter::new(bytes, decoded)
    }

    /// The filter of `kind` over `bytes`, with its query function; `ribbon`
    /// is the layout parsed from `bytes` for [`Kind::Ribbon`], `ribbon64`
    /// that for [`Kind::Ribbon64`], else empty.
    fn new(bytes: LineAligned, decoded: Decoded) -> Filter {
        let Decoded {
            kind,
            ribbon,
            ribbon64,
        } = decoded;
        let (bloom, query) = match &kind {
            Kind::Bloom => match bloom::BloomLayout::parse(bytes.as_slice()) {
                Some(layout) => (layout, layout.query_fn::<Filter>()),
                // Unreachable: `Kind::Bloom` comes from a successful parse of
                // these bytes. Filtering nothing is still correct.
                None => (
                    bloom::BloomLayout::empty(),
                    query_all as bloom::QueryFn<Filter>,
                ),
            },
            Kind::All(_) => (bloom::BloomLayout::empty(), query_all as _),
            Kind::Ribbon => (
                bloom::BloomLayout::empty(),
                ribbon.query_fn_for::<Filter>(bytes.readable_len()),
            ),
            Kind::Ribbon64 => (
                bloom::BloomLayout::empty(),
                ribbon64.query_fn_for::<Filter>(),
            ),
            Kind::Custom(_) => (bloom::BloomLayout::empty(), query_custom as _),
        };
        Filter {
            bytes,
            kind,
            bloom,
            ribbon,
            ribbon64,
            query,
        }
    }

    /// Decodes the filter of a table whose properties record `policy_name`.
    ///
    /// Built-in names are decoded from the bytes. A custom name is decoded by
    /// `current` when `current` has that name; otherwise the filter cannot be
    /// read and answers "may contain" (counted, never a false negative).
    pub fn for_policy(
        policy_name: &str,
        bytes: impl AsRef<[u8]>,
        current: &Arc<dyn FilterPolicy>,
    ) -> Filter {
        let bytes = LineAligned::new(bytes.as_ref());
        let decoded = if policy_name.starts_with(BUILTIN_NAME_PREFIX) {
            Self::decode_builtin(bytes.as_slice())
        } else if current.name() == policy_name {
            Decoded::of_kind(Kind::Custom(Arc::clone(current)))
        } else {
            UNDECODABLE.fetch_add(1, Ordering::Relaxed);
            Decoded::of_kind(Kind::All(Unfiltered::Undecodable))
        };
        Filter::new(bytes, decoded)
    }

    /// A filter whose bytes cannot be read correctly (a custom policy's
    /// filter whose recorded size is unusable): answers "may contain" for
    /// every key, counted in [`undecodable_filters`].
    pub(crate) fn unreadable(bytes: impl AsRef<[u8]>) -> Filter {
        UNDECODABLE.fetch_add(1, Ordering::Relaxed);
        Filter::new(
            LineAligned::new(bytes.as_ref()),
            Decoded::of_kind(Kind::All(Unfiltered::Undecodable)),
        )
    }

    /// The kind of built-in filter bytes, and their Ribbon layout (empty
    /// for other kinds).
    fn decode_builtin(bytes: &[u8]) -> Decoded {
        let decoded = match bytes.last() {
            None => return Decoded::of_kind(Kind::All(Unfiltered::NoFilter)),
            Some(&FORMAT_BLOOM | &FORMAT_BLOOM_V2 | &FORMAT_BLOOM_V1) => {
                bloom::BloomLayout::parse(bytes).map(|_| Decoded::of_kind(Kind::Bloom))
            }
            Some(&FORMAT_RIBBON | &FORMAT_RIBBON_V3) => {
                ribbon::RibbonLayout::parse(bytes).map(|layout| Decoded {
                    ribbon: layout,
                    ..Decoded::of_kind(Kind::Ribbon)
                })
            }
            Some(&FORMAT_RIBBON64) => {
                ribbon64::Ribbon64Layout::parse(bytes).map(|layout| Decoded {
                    ribbon64: layout,
                    ..Decoded::of_kind(Kind::Ribbon64)
                })
            }
            Some(_) => None,
        };
        decoded.unwrap_or_else(|| {
            UNDECODABLE.fetch_add(1, Ordering::Relaxed);
            Decoded::of_kind(Kind::All(Unfiltered::Undecodable))
        })
    }

    /// False only if `key_hash` was certainly not among the built hashes.
    #[inline]
    pub fn may_contain(&self, key_hash: u64) -> bool {
        // The most common queries (Bloom format 0x07, at most 8 probes, on
        // AVX-512 or else AVX2) inline, written in `asm!` so that they can
        // (`bloom::inline_asm`): measured faster than a direct call on AMD
        // Zen 4, which was faster than the indirect one (docs/filters.md,
        // "Format 0x07" and the issue-2 targets' "Thirty-sixth session").
        #[cfg(target_arch = "x86_64")]
        if self.bloom.queries_shapes8_avx512() {
            // SAFETY: the layout says its query is this function (and so
            // that the CPU runs it); `Filter`'s `BloomLines` contract holds.
            return unsafe { bloom::shapes8_avx512(self, key_hash) };
        }
        #[cfg(target_arch = "x86_64")]
        if self.bloom.queries_shapes_avx2() {
            // SAFETY: as above: the layout says its query is this
            // function (and so that the CPU runs it).
            return unsafe { bloom::shapes_avx2(self, key_hash) };
        }
        // SAFETY: `query` is the function `Filter::new` (or
        // `with_bloom_path`) chose for this filter: for a Bloom filter, the
        // one its layout's `query_fn` returned for `Filter`, whose
        // `BloomLines` contract holds (see the impl); for a Ribbon filter,
        // the one its layout's `query_fn_for` returned for `Filter`, whose
        // `RibbonSource` contract holds (see the impl).
        unsafe { (self.query)(self, key_hash) }
    }

    /// Answers [`may_contain`](Self::may_contain) for every hash of
    /// `key_hashes`, writing answer `i` to `out[i]`.
    ///
    /// The answers are exactly those of `may_contain`, key by key: for a
    /// blocked Bloom filter each key is answered by the same query
    /// function, and the batch only adds a software prefetch of the line of
    /// the key [`BATCH_PREFETCH_DISTANCE`] places ahead, so that the cache
    /// misses of a filter larger than the cache overlap instead of waiting
    /// one after another (as far as the CPU's reorder window reaches). Other
    /// kinds answer key by key with `may_contain`.
    ///
    /// The answers go to a caller's slice, one `bool` per key, so that a
    /// caller answering many batches reuses one buffer (no allocation per
    /// call, unlike returning a `Vec<bool>`) and reads each answer without
    /// the shifts and masks of a bitmap.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `out.len() != key_hashes.len()`; then
    /// nothing is written to `out`. Empty input with empty `out` is `Ok`.
    pub fn may_contain_batch(&self, key_hashes: &[u64], out: &mut [bool]) -> Result<()> {
        if out.len() != key_hashes.len() {
            return Err(Error::invalid(format!(
                "Filter::may_contain_batch: {} key hashes but {} answer slots",
                key_hashes.len(),
                out.len()
            )));
        }
        match self.kind {
            Kind::Bloom => self.may_contain_batch_bloom::<BATCH_PREFETCH_DISTANCE>(key_hashes, out),
            _ => {
                for (answer, &h) in out.iter_mut().zip(key_hashes) {
                    *answer = self.may_contain(h);
                }
            }
        }
        Ok(())
    }

    /// The batch of a blocked Bloom filter: the lines of the first `AHEAD`
    /// keys are prefetched, then key `i` is answered after prefetching the
    /// line of key `i + AHEAD`.
    ///
    /// Not inlined into `may_contain_batch`: there the `Result` being built
    /// keeps one more register live across the query call, the query
    /// function's address then goes to the stack, and the loop measured
    /// about 0.2 ns per key slower (docs/filters.md, "Batched queries").
    #[inline(never)]
    fn may_contain_batch_bloom<const AHEAD: usize>(&self, key_hashes: &[u64], out: &mut [bool]) {
        for &h in key_hashes.iter().take(AHEAD) {
            self.prefetch_bloom_line(h);
        }
        for (i, (answer, &h)) in out.iter_mut().zip(key_hashes).enumerate() {
            if let Some(&ahead) = key_hashes.get(i + AHEAD) {
                self.prefetch_bloom_line(ahead);
            }
            *answer = self.may_contain(h);
        }
    }

    /// Asks the CPU to bring the Bloom line of `key_hash` into the L1 cache.
    /// A hint only: no answer depends on it.
    #[inline(always)]
    fn prefetch_bloom_line(&self, key_hash: u64) {
        // `get` keeps the address inside the filter's own lines (it always
        // is: the index is below `num_lines`, and `lines` holds them all).
        if let Some(line) = self
            .bloom
            .line_index(key_hash)
            .and_then(|i| self.bytes.lines.get(i))
        {
            prefetch_read(line);
        }
    }

    /// The answer by a `match` on the kind, without the query function
    /// (which `query_custom` falls back to should it ever be called on
    /// another kind; `Filter::new` never does that).
    #[inline(never)]
    fn may_contain_by_kind(&self, key_hash: u64) -> bool {
        match &self.kind {
            Kind::Ribbon => self.ribbon.may_contain(self.bytes.as_slice(), key_hash),
            Kind::Ribbon64 => self.ribbon64.may_contain(self.bytes.as_slice(), key_hash),
            Kind::Custom(policy) => {
                custom_may_contain(policy.as_ref(), self.bytes.as_slice(), key_hash)
            }
            Kind::Bloom => self.bloom.may_contain(self.bytes.as_slice(), key_hash),
            Kind::All(_) => true,
        }
    }

    /// This filter with its blocked Bloom queries forced onto the named code
    /// path (see `BloomLayout::on_path`); `None` for other filters or a path
    /// this CPU cannot run. For benchmarks.
    #[doc(hidden)]
    pub fn with_bloom_path(self, name: &str) -> Option<Filter> {
        match self.kind {
            Kind::Bloom => {
                let bloom = self.bloom.on_path(name)?;
                Some(Filter {
                    query: bloom.query_fn::<Filter>(),
                    bloom,
                    ..self
                })
            }
            _ => None,
        }
    }

    /// `Some(reason)` when this filter filters nothing.
    pub fn unfiltered(&self) -> Option<Unfiltered> {
        match self.kind {
            Kind::All(reason) => Some(reason),
            _ => None,
        }
    }

    /// Size of the filter's bytes (what it costs in memory).
    pub fn len_bytes(&self) -> usize {
        self.bytes.len
    }

    /// A short name of the decoded format: `"bloom"`, `"ribbon"`, `"none"`,
    /// `"undecodable"` or the custom policy's name.
    pub fn format_name(&self) -> &str {
        match &self.kind {
            Kind::Bloom => "bloom",
            Kind::Ribbon | Kind::Ribbon64 => "ribbon",
            Kind::Custom(p) => p.name(),
            Kind::All(Unfiltered::NoFilter) => "none",
            Kind::All(Unfiltered::Undecodable) => "undecodable",
        }
    }
}

/// Answers a query against built-in filter bytes, decoding them on the fly.
///
/// Empty, unknown or damaged bytes answer `true` ("may contain"). Tables
/// decode once with [`Filter::decode`] instead of calling this per key.
pub fn may_contain(filter_bytes: &[u8], key_hash: u64) -> bool {
    match filter_bytes.last() {
        None => true,
        Some(&FORMAT_BLOOM | &FORMAT_BLOOM_V2 | &FORMAT_BLOOM_V1) => {
            match bloom::BloomLayout::parse(filter_bytes) {
                Some(layout) => layout.may_contain(filter_bytes, key_hash),
                None => {
                    UNDECODABLE.fetch_add(1, Ordering::Relaxed);
                    true
                }
            }
        }
        Some(&FORMAT_RIBBON | &FORMAT_RIBBON_V3) => match ribbon::RibbonLayout::parse(filter_bytes)
        {
            Some(layout) => layout.may_contain(filter_bytes, key_hash),
            None => {
                UNDECODABLE.fetch_add(1, Ordering::Relaxed);
                true
            }
        },
        Some(&FORMAT_RIBBON64) => match ribbon64::Ribbon64Layout::parse(filter_bytes) {
            Some(layout) => layout.may_contain(filter_bytes, key_hash),
            None => {
                UNDECODABLE.fetch_add(1, Ordering::Relaxed);
                true
            }
        },
        Some(_) => {
            UNDECODABLE.fetch_add(1, Ordering::Relaxed);
            true
        }
    }
}

/// Whether this CPU has what the Ribbon AVX-512 queries and back
/// substitutions use (formats 0x05 and 0x06): AVX-512 F and VL (masked
/// loads, ternary logic), VBMI2 (the funnel shift that moves a key's window
/// into place), VPOPCNTDQ (the parities) and BMI2 (`mulx`, `rorx` and
/// `bzhi` in the row hashing).
pub(crate) fn cpu_has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        // avx2, fma and f16c too: rustc treats avx512f as implying them
        // (and avx512vbmi2 as implying avx512bw), and older std versions
        // did not check them as part of those; a virtual CPU may mask one.
        has!("avx512f")
            && has!("avx2")
            && has!("fma")
            && has!("f16c")
            && has!("avx512bw")
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

/// Maps a 32-bit hash onto `0..n` without a division (Lemire's fastrange).
#[inline]
pub(crate) fn fastrange32(hash: u32, n: u32) -> u32 {
    ((hash as u64 * n as u64) >> 32) as u32
}

/// Maps a 64-bit hash onto `0..n` without a division.
#[inline]
pub(crate) fn fastrange64(hash: u64, n: u64) -> u64 {
    ((hash as u128 * n as u128) >> 64) as u64
}

/// [`fastrange64`] for a range below 2^32, by two 64-bit multiplies of
/// 32-bit halves instead of one 64x64->128 multiply: exactly
/// `fastrange64(hash, n)`. With `hash = hi x 2^32 + lo`,
/// `hash x n = (hi x n) x 2^32 + lo x n`, so the top 64 bits of the
/// 128-bit product are `(hi x n + (lo x n >> 32)) >> 32`; both products
/// and their sum stay below 2^64 when `n < 2^32`.
///
/// Why: on AMD Zen 3 a counting loop whose counter address comes from the
/// 128-bit `mul` ran at 4.2 ns per key, against 1.2-1.9 ns with this form
/// (1,000,000 keys into 977 counters; docs/filters.md, "Twenty-first
/// session"). On AMD Zen 5 the 128-bit product was the faster; the Ribbon
/// partition chooses by CPU (`shards::ShardIndex`).
#[inline]
pub(crate) fn fastrange64_narrow(hash: u64, n: u32) -> u32 {
    let n = u64::from(n);
    let high = (hash >> 32) * n;
    let low = (hash & 0xffff_ffff) * n;
    ((high + (low >> 32)) >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fastrange64_narrow_is_fastrange64() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut hashes = vec![
            0,
            1,
            u64::MAX,
            u64::MAX - 1,
            1 << 63,
            (1 << 32) - 1,
            1 << 32,
        ];
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            hashes.push(x);
        }
        for n in [
            1u32,
            2,
            3,
            977,
            1024,
            65_535,
            1 << 31,
            u32::MAX - 1,
            u32::MAX,
        ] {
            for &h in &hashes {
                assert_eq!(
                    u64::from(fastrange64_narrow(h, n)),
                    fastrange64(h, u64::from(n)),
                    "hash {h:#x}, n {n}"
                );
            }
        }
    }

    #[test]
    fn decoded_filter_bytes_start_on_a_cache_line() {
        let hashes: Vec<u64> = (0..5_000u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect();
        let built = BloomPolicy::new(10.0).build(&hashes);
        // Misalign the source on purpose: every offset 0..64 of a buffer.
        let mut padded = vec![0u8; built.len() + 64];
        for shift in 0..64 {
            padded[shift..shift + built.len()].copy_from_slice(&built);
            let source: Box<[u8]> = padded[shift..shift + built.len()].into();
            let filter = Filter::decode(source);
            let bytes = filter.bytes.as_slice();
            assert_eq!(bytes, &built[..], "shift {shift}");
            assert_eq!(bytes.as_ptr() as usize % 64, 0, "shift {shift}");
            assert!(hashes.iter().all(|&h| filter.may_contain(h)));
            assert_eq!(filter.len_bytes(), built.len());
        }
        let empty = Filter::decode(Vec::new());
        assert_eq!(empty.len_bytes(), 0);
        assert!(empty.may_contain(1));
    }
}
