//! What the Ribbon builds of formats 0x05 and 0x06 share: key hashes
//! partitioned by shard.
//!
//! The partition scatters every hash to the next free position of its
//! shard's *bucket*: a fixed run of [`bucket_capacity`] positions, the mean
//! number of hashes per shard plus eight standard deviations of a Poisson
//! count (1,288 for a mean of 1,024), so no pass has to count the shards
//! first. A shard's hashes then fill the start of its bucket. Random
//! hashes overflow a bucket with a probability below 10^-15 per shard;
//! repeated or crafted ones can, and then the partition is a counting sort
//! instead (one pass counts each shard's keys, a second scatters every hash
//! to its shard's next position). The buckets take about a quarter more
//! memory than the hashes, for the build's duration, and save one pass over
//! them: on an Intel Xeon (Sapphire Rapids class) a 1,000,000-key
//! format-0x06 build took 23.4-24.6 ns/key against 24.8-26.2 with the
//! counting pass (four alternating runs; docs/filters.md, "Twenty-third
//! session").
//!
//! A 1,000,000-key filter has about a thousand shards, so the scatter writes
//! a thousand streams into an 8 MB buffer, each store to a cache line that
//! is not in cache: the core must first read the line (a read for
//! ownership) and the hardware prefetchers cannot follow a thousand
//! streams. Timed alone that scatter took about as long as the whole
//! Bloom build (Intel Xeon, 1,000,000 keys).
//!
//! So a large partition writes through staging lines (software write-combining,
//! as in radix-partitioning joins): each shard collects its next hashes in
//! a 64-byte staging line (a thousand of them fit in L2), and a staging
//! line is copied out once it holds a whole aligned cache line of the
//! output. On x86-64 that copy is four non-temporal 16-byte stores
//! (`movntdq`, SSE2, present on every x86-64 CPU): the line is written
//! whole, without being read first. A bucket starts a cache line and holds
//! whole lines, so only its last, partial line is copied with ordinary
//! stores; in the counting sort a shard's first line may be partial too
//! (its other elements belong to the shard before). The result is the same
//! as a plain counting sort (a test checks it against one); only the
//! stores differ.
//!
//! Only a large one: non-temporal stores send the lines to memory, out of
//! the caches, and the banding reads every shard right after. Measured on
//! the same machine (builds with each partition in alternating rounds):
//! the staged partition's build took 1.16x the plain one's at 10,000 keys,
//! 1.06x at 100,000, 0.99x at 300,000 (2.4 MB of hashes), 0.95x at
//! 1,000,000 and 0.95x at 3,000,000. So partitions of at least
//! [`STAGED_FROM_BYTES`] take the staged scatter, smaller ones the plain
//! one (docs/filters.md, "Fourteenth session").

use std::cell::Cell;

use super::{fastrange64, fastrange64_narrow};

/// `u64`s in a 64-byte cache line.
const LINE_WORDS: usize = 8;

/// Hash bytes from which a partition writes through staging lines with
/// non-temporal stores (module doc): between the measured break-even
/// (2.4 MB) and the measured gain (8 MB).
const STAGED_FROM_BYTES: usize = 4 << 20;

/// Partition bytes a thread keeps for its next partition, at most: the
/// buckets of about 1,600,000 keys (2,097,152 hashes).
///
/// A fresh buffer is memory the kernel maps and zeroes page by page on the
/// scatter's first store to it. A build right after another build gets
/// the freed buffer back from the allocator anyway, but one after other
/// allocations and frees (a table's other blocks, another policy's
/// filter, compaction's buffers) often gets fresh pages: in
/// `examples/filter_race`, where every round also builds three other
/// filters, `perf` put 13% of the Ribbon build's samples in page faults,
/// nearly all of them in the partition (docs/filters.md, "Twenty-second
/// session"). So the buffer goes back to the thread when the build is
/// done, as the bands do (`ribbon64::band::Bands`).
const KEEP_PARTITION_BYTES: usize = 16 << 20;

thread_local! {
    /// The partition buffer a finished build on this thread left for the
    /// next one (its elements are that partition's hashes).
    static SPARE_PARTITION: Cell<Vec<u64>> = const { Cell::new(Vec::new()) };
}

/// A buffer of `len` hashes for a partition to overwrite: the thread's
/// spare one when it has one (only elements past its old length are
/// written here), else a new one.
fn partition_buffer(len: usize) -> Vec<u64> {
    // `try_with`: none while the thread's locals are being destroyed.
    let mut buffer = SPARE_PARTITION.try_with(Cell::take).unwrap_or_default();
    if buffer.capacity() < len {
        // Too small: growing it would copy the old hashes first.
        return vec![0; len];
    }
    if buffer.len() >= len {
        buffer.truncate(len);
    } else {
        buffer.resize(len, 0);
    }
    buffer
}

/// Key hashes partitioned by shard (into buckets, or by a counting sort:
/// module doc): shard `fastrange64(hash, num_shards)`, as queries find it,
/// each shard's hashes in their input order.
pub(crate) struct ShardedKeys {
    hashes: Vec<u64>,
    /// `begins[i]`: the index of shard `i`'s first hash in `hashes`.
    begins: Vec<usize>,
    /// `ends[i]`: one past shard `i`'s last hash in `hashes`.
    ends: Vec<usize>,
}

/// How the partition computes a hash's shard, `fastrange64(hash,
/// num_shards)`: the same number either way, one is faster on some CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShardIndex {
    /// One 64 x 64 -> 128-bit multiply ([`fastrange64`]).
    Wide,
    /// Two 64-bit multiplies of the hash's 32-bit halves
    /// ([`fastrange64_narrow`]; shard counts below 2^32 only).
    Narrow,
}

impl ShardIndex {
    /// The faster form on this CPU, as measured on the machines this was
    /// tuned on (a counting pass alone, 1,000,000 hashes into 977 shards;
    /// docs/filters.md, "Twenty-first session" and "Twenty-second
    /// session"): on AMD Zen 3 (AVX2, no AVX-512) the counting loop took
    /// 4.2 ns per key with the 128-bit product feeding the counter's
    /// address and 1.2-1.9 with the narrow form; on AMD Zen 5 (AVX-512)
    /// the 128-bit product is the faster, 0.46-0.81 ms against 0.73-1.16
    /// ms for the count, 3.0-4.5 against 3.7-5.4 ms for the whole
    /// partition. One machine of each: CPUs with AVX-512 F and DQ (what
    /// the Ribbon build's vector row code needs) take the wide form,
    /// others the narrow one, and the partition is the same either way.
    pub(crate) fn detect() -> ShardIndex {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512dq")
        {
            return ShardIndex::Wide;
        }
        ShardIndex::Narrow
    }
}

impl ShardedKeys {
    /// Partitions `key_hashes` into `num_shards` (at least 1) shards.
    pub(crate) fn new(key_hashes: &[u64], num_shards: usize) -> ShardedKeys {
        Self::with_index(key_hashes, num_shards, ShardIndex::detect())
    }

    /// [`new`](Self::new) with the shard computed by `index` (the same
    /// partition whatever it is).
    pub(crate) fn with_index(
        key_hashes: &[u64],
        num_shards: usize,
        index: ShardIndex,
    ) -> ShardedKeys {
        let num_shards = num_shards.max(1);
        if num_shards >= 2 && num_shards.is_power_of_two() {
            // `fastrange64(h, 2^k)` is `h >> (64 - k)`: one shift, the same
            // shard (format 0x06 builds choose such counts).
            let shift = 64 - num_shards.trailing_zeros();
            return Self::partition(key_hashes, num_shards, move |h| (h >> shift) as usize);
        }
        // The narrow form needs a shard count below 2^32: every realistic
        // one (a shard holds about a thousand keys).
        match (index, u32::try_from(num_shards)) {
            (ShardIndex::Narrow, Ok(n)) => Self::partition(key_hashes, num_shards, |h| {
                fastrange64_narrow(h, n) as usize
            }),
            _ => Self::partition(key_hashes, num_shards, |h| {
                fastrange64(h, num_shards as u64) as usize
            }),
        }
    }

    /// The partition by `shard_of`: into buckets when no shard overflows
    /// its bucket, else by a counting sort.
    fn partition(
        key_hashes: &[u64],
        num_shards: usize,
        shard_of: impl Fn(u64) -> usize + Copy,
    ) -> ShardedKeys {
        let staged = std::mem::size_of_val(key_hashes) >= STAGED_FROM_BYTES;
        if let Some(sharded) = Self::bucketed(key_hashes, num_shards, shard_of, staged) {
            return sharded;
        }
        if staged {
            Self::staged(key_hashes, num_shards, shard_of)
        } else {
            Self::plain(key_hashes, num_shards, shard_of)
        }
    }

    /// The first index of each shard in the partition (`begins`) and one
    /// past its last (`ends`). `shard_of` maps a hash to its shard, below
    /// `num_shards`.
    fn count(
        key_hashes: &[u64],
        num_shards: usize,
        shard_of: impl Fn(u64) -> usize,
    ) -> (Vec<usize>, Vec<usize>) {
        let mut ends = vec![0usize; num_shards];
        for &h in key_hashes {
            ends[shard_of(h)] += 1;
        }
        let mut begins = vec![0usize; num_shards];
        let mut sum = 0;
        for (begin, end) in begins.iter_mut().zip(ends.iter_mut()) {
            *begin = sum;
            sum += *end;
            *end = sum;
        }
        (begins, ends)
    }

    /// The counting sort's scatter with ordinary stores.
    fn plain(
        key_hashes: &[u64],
        num_shards: usize,
        shard_of: impl Fn(u64) -> usize + Copy,
    ) -> ShardedKeys {
        let (begins, ends) = Self::count(key_hashes, num_shards, shard_of);
        // Every element is written below (each hash to its own position).
        let mut hashes = partition_buffer(key_hashes.len());
        let mut next = begins.clone();
        for &h in key_hashes {
            let at = &mut next[shard_of(h)];
            hashes[*at] = h;
            *at += 1;
        }
        ShardedKeys {
            hashes,
            begins,
            ends,
        }
    }

    /// The counting sort's scatter through staging lines (module doc).
    fn staged(
        key_hashes: &[u64],
        num_shards: usize,
        shard_of: impl Fn(u64) -> usize + Copy,
    ) -> ShardedKeys {
        let (begins, ends) = Self::count(key_hashes, num_shards, shard_of);
        // Every element is written below (each hash to its own position).
        let mut hashes = partition_buffer(key_hashes.len());
        // Output positions `p` with `p % LINE_WORDS == lead` start a cache
        // line: the lines are those of the buffer's addresses, wherever the
        // allocator put it.
        let misalignment = (hashes.as_ptr() as usize / 8) % LINE_WORDS;
        let lead = (LINE_WORDS - misalignment) % LINE_WORDS;
        let mut next = begins.clone();
        let mut staging = vec![[0u64; LINE_WORDS]; num_shards];
        for &h in key_hashes {
            let shard = shard_of(h);
            let at = next[shard];
            next[shard] = at + 1;
            let slot = (at + LINE_WORDS - lead) % LINE_WORDS;
            let line = &mut staging[shard];
            line[slot] = h;
            if slot == LINE_WORDS - 1 {
                // `at` ends a cache line; it starts at `at + 1 - LINE_WORDS`
                // (which may lie before the buffer when `lead` > 0).
                let line_start = (at + 1).checked_sub(LINE_WORDS);
                match line_start {
                    Some(start) if start >= begins[shard] => {
                        write_line(&mut hashes[start..=at], line)
                    }
                    _ => {
                        let from = begins[shard];
                        let skip = LINE_WORDS - (at + 1 - from);
                        hashes[from..=at].copy_from_slice(&line[skip..]);
                    }
                }
            }
        }
        // Each shard's last, partial line is still in its staging line.
        for (shard, line) in staging.iter().enumerate() {
            let (from, to) = (begins[shard], next[shard]);
            if to == from {
                continue;
            }
            let last_slot = (to - 1 + LINE_WORDS - lead) % LINE_WORDS;
            if last_slot == LINE_WORDS - 1 {
                continue;
            }
            // `saturating_sub`: the line may start before the buffer.
            let line_start = (to - 1).saturating_sub(last_slot).max(from);
            let skip = last_slot + 1 - (to - line_start);
            hashes[line_start..to].copy_from_slice(&line[skip..=last_slot]);
        }
        store_fence();
        ShardedKeys {
            hashes,
            begins,
            ends,
        }
    }

    /// The partition into one bucket of [`bucket_capacity`] hashes per
    /// shard, with no counting pass, or `None` if a shard has more hashes
    /// than that (then nothing was partitioned: the caller counts). With
    /// `staged`, full cache lines go out through staging lines as in
    /// [`staged`](Self::staged); every bucket starts a cache line and
    /// holds whole lines, so every full staging line is a whole line of
    /// its bucket.
    fn bucketed(
        key_hashes: &[u64],
        num_shards: usize,
        shard_of: impl Fn(u64) -> usize,
        staged: bool,
    ) -> Option<ShardedKeys> {
        let capacity = bucket_capacity(key_hashes.len(), num_shards)?;
        // `LINE_WORDS - 1` more: room to start the first bucket on a line.
        let len = num_shards
            .checked_mul(capacity)?
            .checked_add(LINE_WORDS - 1)?;
        // Tiny shards (a few keys each, only from build knobs) would make
        // the buckets many times the hashes: count instead.
        if len > 2 * key_hashes.len() + MAX_BUCKET_SLACK {
            return None;
        }
        let mut hashes = partition_buffer(len);
        let misalignment = (hashes.as_ptr() as usize / 8) % LINE_WORDS;
        let lead = (LINE_WORDS - misalignment) % LINE_WORDS;
        // Shard `i`'s bucket: `lead + i * capacity ..` `+ capacity`.
        let begins: Vec<usize> = (0..num_shards).map(|i| lead + i * capacity).collect();
        // The next free position of each bucket, and one past its end.
        let mut cursors: Vec<[usize; 2]> = begins.iter().map(|&b| [b, b + capacity]).collect();
        if staged {
            let mut staging = vec![[0u64; LINE_WORDS]; num_shards];
            for &h in key_hashes {
                let shard = shard_of(h);
                let [at, end] = cursors[shard];
                if at == end {
                    return None;
                }
                cursors[shard][0] = at + 1;
                // The bucket starts a line (`lead`) and holds whole lines
                // (`capacity % LINE_WORDS == 0`).
                let slot = (at - lead) % LINE_WORDS;
                let line = &mut staging[shard];
                line[slot] = h;
                if slot == LINE_WORDS - 1 {
                    write_line(&mut hashes[at + 1 - LINE_WORDS..=at], line);
                }
            }
            // Each bucket's last, partial line is still in its staging line.
            for (line, &[to, _]) in staging.iter().zip(&cursors) {
                let partial = (to - lead) % LINE_WORDS;
                hashes[to - partial..to].copy_from_slice(&line[..partial]);
            }
            store_fence();
        } else {
            for &h in key_hashes {
                let cursor = &mut cursors[shard_of(h)];
                if cursor[0] == cursor[1] {
                    return None;
                }
                hashes[cursor[0]] = h;
                cursor[0] += 1;
            }
        }
        let ends = cursors.into_iter().map(|[next, _]| next).collect();
        Some(ShardedKeys {
            hashes,
            begins,
            ends,
        })
    }

    /// The hashes of shard `i`.
    pub(crate) fn keys(&self, i: usize) -> &[u64] {
        &self.hashes[self.begins[i]..self.ends[i]]
    }
}

impl Drop for ShardedKeys {
    /// Leaves the buffer to the thread's next partition
    /// ([`KEEP_PARTITION_BYTES`]), unless the thread's spare is larger.
    fn drop(&mut self) {
        let buffer = std::mem::take(&mut self.hashes);
        if buffer.capacity() * size_of::<u64>() > KEEP_PARTITION_BYTES {
            return;
        }
        let _ = SPARE_PARTITION.try_with(|spare| {
            let old = spare.take();
            spare.set(if old.capacity() > buffer.capacity() {
                old
            } else {
                buffer
            });
        });
    }
}

/// Positions the buckets may have beyond twice the hashes: room for the
/// buckets of small partitions (a shard of a few hundred keys gets a bucket
/// about 1.5 times its mean), not for thousands of near-empty shards.
const MAX_BUCKET_SLACK: usize = 1 << 14;

/// Hashes a shard's bucket holds in [`ShardedKeys::bucketed`], a
/// multiple of [`LINE_WORDS`]: the mean number per shard plus eight
/// standard deviations of a Poisson count and one line (`None` if that
/// overflows). A shard of random hashes exceeds it with a probability
/// below 10^-15 (1,288 hashes against a mean of 1,024); only repeated or
/// crafted hashes do, and then the partition counts first instead.
fn bucket_capacity(keys: usize, num_shards: usize) -> Option<usize> {
    let mean = keys.div_ceil(num_shards.max(1));
    let deviations = 8 * mean.isqrt();
    mean.checked_add(deviations)?
        .checked_add(LINE_WORDS)?
        .checked_next_multiple_of(LINE_WORDS)
}

/// Copies a full staging line to `dest`, one 64-byte-aligned cache line of
/// the output, without reading that line first.
#[cfg(target_arch = "x86_64")]
#[inline]
fn write_line(dest: &mut [u64], line: &[u64; LINE_WORDS]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    assert_eq!(dest.len(), LINE_WORDS);
    // What `movntdq` needs (a safe function cannot leave it to its caller):
    // one compare per 64 bytes written.
    assert_eq!(dest.as_ptr() as usize % 16, 0, "unaligned staging copy");
    let to = dest.as_mut_ptr().cast::<__m128i>();
    let from = line.as_ptr().cast::<__m128i>();
    for i in 0..4 {
        // SAFETY: `dest` is 8 `u64`s (checked above), so the four 16-byte
        // stores at `to + i` (i < 4) and the four loads from `line` stay
        // inside their slices. `movntdq` needs a 16-byte-aligned address:
        // asserted above (`ShardedKeys::staged` chooses `lead` so that
        // `dest` starts a 64-byte cache line). SSE2 is part of x86-64.
        unsafe { _mm_stream_si128(to.add(i), _mm_loadu_si128(from.add(i))) };
    }
}

/// Copies a full staging line to `dest` (no non-temporal store on this
/// architecture).
#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn write_line(dest: &mut [u64], line: &[u64; LINE_WORDS]) {
    dest.copy_from_slice(line);
}

/// Orders the non-temporal stores of `write_line` before every later store,
/// so the partition is complete for whoever reads it next, on this thread
/// or another.
#[cfg(target_arch = "x86_64")]
fn store_fence() {
    // SAFETY: `sfence` has no operands and no preconditions (SSE, part of
    // x86-64).
    unsafe { std::arch::x86_64::_mm_sfence() }
}

#[cfg(not(target_arch = "x86_64"))]
fn store_fence() {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The partition as a plain counting sort: what every path must
    /// produce.
    fn reference(key_hashes: &[u64], num_shards: usize) -> Vec<Vec<u64>> {
        let mut shards = vec![Vec::new(); num_shards];
        for &h in key_hashes {
            shards[fastrange64(h, num_shards as u64) as usize].push(h);
        }
        shards
    }

    fn hashes(count: u64, salt: u64) -> Vec<u64> {
        (0..count)
            .map(|i| crate::filter::key_hash(&(i ^ salt << 40).to_le_bytes()))
            .collect()
    }

    /// Every path's partition of `keys` against the reference.
    fn assert_partitions(keys: &[u64], shards: usize) {
        let want = reference(keys, shards);
        let shard_of = |h: u64| fastrange64(h, shards as u64) as usize;
        let mut paths = vec![
            ("plain", ShardedKeys::plain(keys, shards, shard_of)),
            ("staged", ShardedKeys::staged(keys, shards, shard_of)),
            ("new", ShardedKeys::new(keys, shards)),
            (
                "wide",
                ShardedKeys::with_index(keys, shards, ShardIndex::Wide),
            ),
            (
                "narrow",
                ShardedKeys::with_index(keys, shards, ShardIndex::Narrow),
            ),
        ];
        // The buckets, where no shard overflows its bucket and the buckets
        // are not too many.
        let capacity = bucket_capacity(keys.len(), shards).expect("a capacity");
        let fits = want.iter().all(|shard| shard.len() <= capacity)
            && shards * capacity + LINE_WORDS - 1 <= 2 * keys.len() + MAX_BUCKET_SLACK;
        for (path, staged) in [("bucketed", false), ("bucketed staged", true)] {
            let bucketed = ShardedKeys::bucketed(keys, shards, shard_of, staged);
            assert_eq!(bucketed.is_some(), fits, "{path}: {} keys", keys.len());
            paths.extend(bucketed.map(|sharded| (path, sharded)));
        }
        for (path, sharded) in paths {
            for (i, want) in want.iter().enumerate() {
                assert_eq!(
                    sharded.keys(i),
                    &want[..],
                    "{path}: {} keys, shard {i}/{shards}",
                    keys.len()
                );
            }
        }
    }

    #[test]
    fn matches_a_plain_counting_sort() {
        // Sizes around the staging line (shards of 0 to 20 keys, partial
        // first and last lines, lines that start before a shard), a large
        // one, and one large enough that `new` stages.
        for (count, shards) in [
            (0, 1),
            (1, 1),
            (7, 1),
            (8, 1),
            (9, 1),
            (17, 3),
            (100, 7),
            (100, 40),
            (1000, 333),
            (1000, 1000),
            (5000, 2),
            (200_000, 196),
            (STAGED_FROM_BYTES as u64 / 8 + 1, 513),
            // Powers of two, which `with_index` partitions by a shift.
            (100, 2),
            (1000, 64),
            (200_000, 256),
            (STAGED_FROM_BYTES as u64 / 8 + 1, 1024),
        ] {
            assert_partitions(&hashes(count, count ^ shards as u64), shards);
        }
    }

    #[test]
    fn partitions_reuse_the_threads_buffer_whatever_it_held() {
        // Larger, then smaller, then larger again: the spare buffer holds
        // the previous partition's hashes, which must never show through.
        let big = hashes(STAGED_FROM_BYTES as u64 / 8 + 100, 1);
        let small = hashes(3_000, 2);
        let mid = hashes(60_000, 3);
        drop(ShardedKeys::new(&big, 600));
        let spare = SPARE_PARTITION.with(|spare| {
            let buffer = spare.take();
            let capacity = buffer.capacity();
            spare.set(buffer);
            capacity
        });
        assert!(spare >= big.len(), "the buffer was left to the thread");
        for (keys, shards) in [(&small, 5), (&mid, 61), (&big, 600), (&small, 3)] {
            assert_partitions(keys, shards);
        }
        // A buffer over the limit is not kept.
        let huge = KEEP_PARTITION_BYTES / 8 + 1;
        drop(ShardedKeys {
            hashes: vec![0; huge],
            begins: Vec::new(),
            ends: Vec::new(),
        });
        let kept = SPARE_PARTITION.with(|spare| {
            let buffer = spare.take();
            let capacity = buffer.capacity();
            spare.set(buffer);
            capacity
        });
        assert!(kept < huge);
    }

    #[test]
    fn a_dirty_spare_buffer_never_shows_through_either_scatter() {
        // The thread's spare filled with a value no partition holds, longer
        // than the partition, a little longer, and shorter (then not used).
        let poison = 0xdead_beef_dead_beef;
        for (count, shards) in [
            (1u64, 1usize),
            (9, 1),
            (17, 3),
            (100, 7),
            (1000, 333),
            (5000, 2),
            (70_000, 61),
        ] {
            let keys = hashes(count, count ^ shards as u64 ^ 77);
            let want = reference(&keys, shards);
            let shard_of = |h: u64| fastrange64(h, shards as u64) as usize;
            for staged in [false, true] {
                for len in [count as usize / 2, count as usize, count as usize + 13] {
                    let mut spare = Vec::with_capacity(count as usize + 13);
                    spare.resize(len, poison);
                    SPARE_PARTITION.with(|cell| cell.set(spare));
                    let counted = if staged {
                        ShardedKeys::staged(&keys, shards, shard_of)
                    } else {
                        ShardedKeys::plain(&keys, shards, shard_of)
                    };
                    let mut spare = Vec::with_capacity(2 * count as usize + 100);
                    spare.resize(len, poison);
                    SPARE_PARTITION.with(|cell| cell.set(spare));
                    let bucketed = ShardedKeys::bucketed(&keys, shards, shard_of, staged)
                        .expect("random hashes fit their buckets");
                    for sharded in [counted, bucketed] {
                        for (i, want) in want.iter().enumerate() {
                            assert_eq!(sharded.keys(i), &want[..], "{count} keys, shard {i}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn duplicate_hashes_and_one_shard_with_all_keys() {
        let mut keys = vec![42u64; 50];
        keys.extend(hashes(30, 7));
        keys.extend([0, u64::MAX, 1 << 63, 0]);
        for shards in [1, 2, 5, 64] {
            assert_partitions(&keys, shards);
        }
    }

    #[test]
    fn a_shard_over_its_bucket_falls_back_to_counting() {
        // 20,000 copies of one hash among 100,000 random ones in 100 shards:
        // one shard gets about 21,000 hashes, its bucket holds 1,264. Both
        // sizes, so that both scatters overflow.
        for total in [100_000u64, STAGED_FROM_BYTES as u64 / 8 + 1] {
            let mut keys = hashes(total, 9);
            keys[..total as usize / 5].fill(0x1234_5678_9abc_def0);
            let shards = total as usize / 1000;
            let shard_of = |h: u64| fastrange64(h, shards as u64) as usize;
            for staged in [false, true] {
                assert!(ShardedKeys::bucketed(&keys, shards, shard_of, staged).is_none());
            }
            assert_partitions(&keys, shards);
        }
    }
}
