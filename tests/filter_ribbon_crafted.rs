//! Ribbon filters from crafted bytes: shard tables and trailers that carry a
//! valid checksum (the CRC is not a MAC) but were not written by the
//! builder. Consistent ones must answer exactly as the format defines on
//! every query path (checked against a slot-by-slot reference written from
//! the format description, not the library's own addressing); inconsistent
//! ones must be rejected without panicking, looping or allocating much.
//!
//! Format 0x05 (and 0x03) only: [`RibbonPolicy`] builds format 0x06 by
//! default (crafted 0x06 bytes are in `filter_ribbon64.rs`), so the tests
//! here that build filters ask for format 0x05 explicitly ([`knobs_0x05`],
//! [`build_0x05`]).

mod common;

#[cfg(unix)]
use common::filters::Guarded;
use common::filters::{build_0x05, knobs_0x05, probes};
use rand::{Rng, SeedableRng};
use sievedb::filter::ribbon::{BuildKnobs, RibbonLayout, SHARD_ENTRY_BYTES, TRAILER_BYTES};
use sievedb::filter::{self, Filter, FilterPolicy, RibbonPolicy, FORMAT_RIBBON, FORMAT_RIBBON_V3};

const SEED_MULT: u64 = 0x9e37_79b9_7f4a_7c15;
const REHASH_MULT: u64 = 0xbf58_476d_1ce4_e5b9;
const COEFF_MULT: u64 = 0xc28f_8282_2b65_0bed;

#[derive(Clone, Copy, Debug)]
struct Entry {
    word_offset: u32,
    num_blocks: u32,
    upper_start_block: u32,
    seed: u8,
}

/// Bytes of a Ribbon filter: `solution`, then the table of `entries`, then
/// the trailer with a valid CRC (computed as the builder does).
fn assemble(solution: &[u8], entries: &[Entry], num_shards: u32, upper: u8, id: u8) -> Vec<u8> {
    let mut out = solution.to_vec();
    let table_start = out.len();
    for e in entries {
        out.extend_from_slice(&e.word_offset.to_le_bytes());
        out.extend_from_slice(&e.num_blocks.to_le_bytes());
        out.extend_from_slice(&e.upper_start_block.to_le_bytes());
        out.push(e.seed);
    }
    out.extend_from_slice(&num_shards.to_le_bytes());
    out.push(upper);
    let crc = crc32fast::hash(&out[table_start..]);
    out.extend_from_slice(&crc.to_le_bytes());
    out.push(id);
    out
}

fn fastrange64(h: u64, n: u64) -> u64 {
    ((h as u128 * n as u128) >> 64) as u64
}

/// The format's definition of a query, slot by slot (format 0x05: blocks of
/// 64 slots and 8-byte words; 0x03: 128 slots and 16-byte words).
fn reference(bytes: &[u8], entries: &[Entry], upper: usize, id: u8, h: u64) -> bool {
    let block_slots: usize = if id == FORMAT_RIBBON { 64 } else { 128 };
    let word_bytes = block_slots / 8;
    let e = entries[fastrange64(h, entries.len() as u64) as usize];
    let mask = (e.seed as u64 + 1).wrapping_mul(SEED_MULT);
    let g = (h ^ mask).wrapping_mul(REHASH_MULT);
    let h1 = g ^ (g >> 32);
    let product = (h1 as u128).wrapping_mul(COEFF_MULT as u128);
    let lo = product as u64;
    let hi = (product >> 64) as u64 ^ lo.rotate_left(32);
    let coeff = ((hi as u128) << 64) | (lo | 1) as u128;
    let result = (h1 >> 32) as u32;
    let num_starts = e.num_blocks as u64 * block_slots as u64 - 127;
    let start = fastrange64(h1, num_starts) as usize;
    let usb = e.upper_start_block as usize;
    let cols = |q: usize| upper - usize::from(q < usb);
    let first_word = |q: usize| e.word_offset as usize + q * upper - q.min(usb);
    let bit = |slot: usize, j: usize| -> u32 {
        let q = slot / block_slots;
        assert!(q < e.num_blocks as usize);
        let at = (first_word(q) + j) * word_bytes + (slot % block_slots) / 8;
        ((bytes[at] >> (slot % 8)) & 1) as u32
    };
    for j in 0..cols(start / block_slots) {
        let mut parity = 0;
        for i in 0..128 {
            if (coeff >> i) & 1 == 1 {
                parity ^= bit(start + i, j);
            }
        }
        if parity != (result >> j) & 1 {
            return false;
        }
    }
    true
}

/// A random consistent layout: `num_shards` shards of `blocks` blocks
/// (random in the range), any first upper block, random seeds.
fn random_layout(
    rng: &mut impl Rng,
    num_shards: usize,
    blocks: std::ops::RangeInclusive<u32>,
    upper: u32,
    id: u8,
) -> (Vec<u8>, Vec<Entry>) {
    let word_bytes = if id == FORMAT_RIBBON { 8 } else { 16 };
    let mut entries = Vec::new();
    let mut words = 0u64;
    for _ in 0..num_shards {
        let num_blocks = rng.gen_range(blocks.clone());
        let upper_start_block = match rng.gen_range(0..4) {
            0 => 0,
            1 => num_blocks,
            2 => num_blocks.saturating_sub(1),
            _ => rng.gen_range(0..=num_blocks),
        };
        let e = Entry {
            word_offset: words as u32,
            num_blocks,
            upper_start_block,
            seed: rng.gen(),
        };
        let usb = upper_start_block as u64;
        words += usb * (upper as u64 - 1) + (num_blocks as u64 - usb) * upper as u64;
        entries.push(e);
    }
    let solution: Vec<u8> = (0..words * word_bytes).map(|_| rng.gen()).collect();
    let bytes = assemble(&solution, &entries, num_shards as u32, upper as u8, id);
    (bytes, entries)
}

/// Every way to query `bytes`, each compared with the reference.
fn check_all_paths(bytes: &[u8], entries: &[Entry], upper: u32, id: u8, probes: &[u64]) {
    let layout = RibbonLayout::parse(bytes).expect("consistent crafted layout");
    let decoded = Filter::decode(bytes);
    assert_eq!(decoded.format_name(), "ribbon");
    let paths: Vec<(&str, RibbonLayout)> = ["avx512", "avx2", "scalar"]
        .iter()
        .filter_map(|&p| layout.clone().on_path(p).map(|l| (p, l)))
        .collect();
    // The same bytes in an allocation of exactly their length, so that a
    // read past their end leaves the allocation (AddressSanitizer).
    let exact: Box<[u8]> = bytes.into();
    let name = format!("upper {upper}, id {id:#x}, entries {entries:?}");
    for &h in probes {
        let want = reference(bytes, entries, upper as usize, id, h);
        assert_eq!(decoded.may_contain(h), want, "Filter::decode, {name}");
        assert_eq!(
            filter::may_contain(&exact, h),
            want,
            "filter::may_contain, {name}"
        );
        assert_eq!(layout.may_contain(&exact, h), want, "layout, {name}");
        assert_eq!(
            layout.may_contain_portable(&exact, h),
            want,
            "portable, {name}"
        );
        assert_eq!(layout.may_contain_scalar(&exact, h), want, "scalar, {name}");
        for answer in [
            layout.may_contain_avx2_path(&exact, h),
            layout.may_contain_avx512_path(&exact, h),
        ] {
            assert!(answer.is_none_or(|a| a == want), "vector path, {name}");
        }
        for (p, l) in &paths {
            assert_eq!(l.may_contain(&exact, h), want, "on_path({p}), {name}");
        }
    }
    // Only the solution (no table, no trailer) and shorter: never a read
    // past the end, never a false negative.
    let table_start = bytes.len() - TRAILER_BYTES - entries.len() * SHARD_ENTRY_BYTES;
    for len in [table_start, table_start.saturating_sub(1), table_start / 2] {
        let cut: Box<[u8]> = bytes[..len].into();
        for &h in &probes[..probes.len().min(64)] {
            let want = reference(bytes, entries, upper as usize, id, h);
            let portable = layout.may_contain_portable(&cut, h);
            assert!(portable || !want || len < table_start);
            assert_eq!(layout.may_contain(&cut, h), portable, "cut {len}, {name}");
            for (p, l) in &paths {
                assert_eq!(l.may_contain(&cut, h), portable, "cut {len}, {p}, {name}");
            }
            for answer in [
                layout.may_contain_avx2_path(&cut, h),
                layout.may_contain_avx512_path(&cut, h),
            ] {
                assert!(answer.is_none_or(|a| a == portable), "cut {len}, {name}");
            }
        }
    }
}

/// Crafted consistent layouts of every column count, small shards (2 to 9
/// blocks, odd counts and first upper blocks the builder never writes),
/// one to twelve shards: every path answers as the format defines.
#[test]
fn crafted_consistent_layouts_answer_as_defined_on_every_path() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    for upper in 1..=32u32 {
        for num_shards in [1usize, 2, 3, 5, 7, 12] {
            for id in [FORMAT_RIBBON, FORMAT_RIBBON_V3] {
                let blocks = if id == FORMAT_RIBBON { 2..=9 } else { 1..=5 };
                let (bytes, entries) = random_layout(&mut rng, num_shards, blocks, upper, id);
                let p = probes(&mut rng, 300);
                check_all_paths(&bytes, &entries, upper, id, &p);
            }
        }
    }
}

/// The narrow AVX-512 query's edge cases, many probes each: shards of two
/// blocks (every start is 0, block-aligned, and its window ends with the
/// shard: the block after is past the shard, the next shard or the table),
/// the first upper block at 1 (the block after a start block is the first
/// upper one: the third block is one word further), all lower or all upper
/// blocks, one shard (table too short to read past the solution) and many.
#[test]
fn crafted_layouts_at_the_narrow_query_edges() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for upper in 2..=8u32 {
        for num_shards in [1usize, 2, 6, 9] {
            for usb in [0u32, 1, 2, 3] {
                for num_blocks in [2u32, 3, 4] {
                    let usb = usb.min(num_blocks);
                    let mut entries = Vec::new();
                    let mut words = 0u32;
                    for _ in 0..num_shards {
                        entries.push(Entry {
                            word_offset: words,
                            num_blocks,
                            upper_start_block: usb,
                            seed: rng.gen(),
                        });
                        words += usb * (upper - 1) + (num_blocks - usb) * upper;
                    }
                    let solution: Vec<u8> = (0..words * 8).map(|_| rng.gen()).collect();
                    let bytes = assemble(
                        &solution,
                        &entries,
                        num_shards as u32,
                        upper as u8,
                        FORMAT_RIBBON,
                    );
                    let p = probes(&mut rng, 400);
                    check_all_paths(&bytes, &entries, upper, FORMAT_RIBBON, &p);
                }
            }
        }
    }
}

/// Inconsistent tables with a valid checksum: rejected (decoded as
/// "undecodable", "may contain" everywhere), without a panic in debug
/// builds (arithmetic overflow) or a large allocation.
#[test]
fn crafted_inconsistent_tables_are_rejected() {
    let e = |word_offset, num_blocks, upper_start_block| Entry {
        word_offset,
        num_blocks,
        upper_start_block,
        seed: 3,
    };
    let max = u32::MAX;
    // (solution bytes, entries, upper columns)
    let cases: Vec<(usize, Vec<Entry>, u8)> = vec![
        (8 * 7, vec![e(0, 1, 0)], 7),               // 64 slots: too few
        (0, vec![e(0, 0, 0)], 7),                   // no blocks
        (8 * 14, vec![e(0, 2, 3)], 7),              // first upper past the end
        (8 * 14, vec![e(0, 2, max)], 7),            // same, at the limit
        (8 * 14, vec![e(1, 2, 0)], 7),              // gap before shard 0
        (8 * 28, vec![e(0, 2, 0), e(15, 2, 0)], 7), // gap between shards
        (8 * 28, vec![e(0, 2, 0), e(13, 2, 0)], 7), // overlap
        (8 * 15, vec![e(0, 2, 0)], 7),              // extra solution bytes
        (8 * 13, vec![e(0, 2, 0)], 7),              // missing solution bytes
        (64, vec![e(0, max, 0)], 32),               // huge shard, few bytes
        (64, vec![e(0, max, max)], 32),
        (64, vec![e(0, max, max)], 1), // zero-column lower blocks
        (64, vec![e(max, 2, 0)], 8),
        (64, vec![e(0, 2, 0), e(max, max, 0)], 8),
        (64, vec![e(0, 2, 0), e(16, max, max)], 8),
        (16, vec![e(0, 2, 0)], 0),       // no columns
        (16 * 33, vec![e(0, 2, 0)], 33), // too many columns
        (16 * 255, vec![e(0, 2, 0)], 255),
    ];
    for id in [FORMAT_RIBBON, FORMAT_RIBBON_V3] {
        for (len, entries, upper) in &cases {
            let solution = vec![0xa5u8; *len];
            let bytes = assemble(&solution, entries, entries.len() as u32, *upper, id);
            let name = format!("{id:#x} {len} {entries:?} {upper}");
            // Format 0x03 counts 16-byte words: some cases are consistent
            // there; they must then answer as defined.
            if let Some(layout) = RibbonLayout::parse(&bytes) {
                assert_eq!(id, FORMAT_RIBBON_V3, "{name}");
                let _ = layout;
                continue;
            }
            assert_eq!(
                Filter::decode(&bytes).format_name(),
                "undecodable",
                "{name}"
            );
            for h in [0u64, 1, u64::MAX, 0x1234_5678_9abc_def0] {
                assert!(filter::may_contain(&bytes, h), "{name}");
                assert!(Filter::decode(&bytes).may_contain(h), "{name}");
            }
        }
    }
    // A shard count the bytes cannot hold, and the largest one: the table
    // would start before the bytes.
    for num_shards in [0u32, 2, 1000, u32::MAX / 13, u32::MAX / 13 + 1, u32::MAX] {
        let bytes = assemble(&[0u8; 14 * 8], &[e(0, 2, 0)], num_shards, 7, FORMAT_RIBBON);
        assert!(RibbonLayout::parse(&bytes).is_none(), "{num_shards} shards");
        assert!(filter::may_contain(&bytes, 5));
    }
}

/// Many one-block-pair shards: the shard table is larger than the solution
/// (the query array is at most a few times the bytes), and every key of
/// every shard reads at the shard's end.
#[test]
fn crafted_many_tiny_shards() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    for upper in [2u32, 7, 8, 9] {
        let (bytes, entries) = random_layout(&mut rng, 2_000, 2..=2, upper, FORMAT_RIBBON);
        let p = probes(&mut rng, 4_000);
        check_all_paths(&bytes, &entries, upper, FORMAT_RIBBON, &p);
    }
}

/// Builds with `max_seeds` of 0 and 1, one-key shards and duplicate keys:
/// a Ribbon filter only when every shard solved within the seeds allowed,
/// never a false negative, and the same bytes whatever the schedule (a
/// shard's bytes depend only on its keys and seed).
#[test]
fn builds_with_few_seeds_tiny_shards_and_duplicates() {
    let policy = RibbonPolicy::new(10.0);
    let keys: Vec<u64> = (0..3_000u64)
        .map(|i| filter::key_hash(&i.to_le_bytes()))
        .collect();
    let mut with_duplicates = keys.clone();
    with_duplicates.extend_from_slice(&keys[..1_000]);
    with_duplicates.extend_from_slice(&keys[..1_000]);
    for key_set in [&keys, &with_duplicates] {
        for shard_keys in [1usize, 2, 100, 8192] {
            let reference = policy.build_with(
                key_set,
                BuildKnobs {
                    shard_keys,
                    ..knobs_0x05()
                },
            );
            for max_seeds in [0u32, 1, 2] {
                let knobs = BuildKnobs {
                    max_seeds,
                    shard_keys,
                    ..knobs_0x05()
                };
                let (bytes, outcome) = policy.build_with(key_set, knobs);
                let name = format!(
                    "{} keys, {shard_keys}/shard, {max_seeds} seeds",
                    key_set.len()
                );
                if max_seeds == 0 {
                    assert!(outcome.fell_back_to_bloom, "{name}: {outcome:?}");
                    assert_eq!(outcome.failed_seeds, 0, "{name}");
                }
                if !outcome.fell_back_to_bloom {
                    assert_eq!(bytes.last(), Some(&FORMAT_RIBBON), "{name}");
                    // Every shard solved with a seed below max_seeds.
                    let layout = RibbonLayout::parse(&bytes).expect("ribbon");
                    for i in 0..layout.num_shards() {
                        assert!((layout.shard(&bytes, i).unwrap().seed as u32) < max_seeds);
                    }
                    // The reference solved every shard within these seeds
                    // too: same bytes.
                    assert_eq!(bytes, reference.0, "{name}");
                } else if max_seeds > 0 {
                    // Some shard failed all its seeds: the reference needed
                    // more for it.
                    assert!(reference.1.failed_seeds >= 1, "{name}");
                }
                let decoded = Filter::decode(&bytes);
                for &h in key_set.iter() {
                    assert!(decoded.may_contain(h), "{name}");
                    assert!(policy.may_contain(&bytes, h), "{name}");
                }
            }
        }
    }
}

/// The slice queries (`RibbonLayout::may_contain` on every path, and
/// `filter::may_contain`) on bytes followed by an inaccessible page: the
/// whole filter, the solution alone and the solution plus fewer bytes than
/// the narrow query's tail. One shard (too few table bytes after the
/// solution for the narrow query to read past it, from 3 columns) and
/// many; two-block shards, so that every key's window ends with its shard.
#[cfg(unix)]
#[test]
fn slice_queries_never_read_past_the_bytes() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(13);
    for upper in [2u32, 3, 5, 8, 9] {
        for num_shards in [1usize, 2, 7] {
            for blocks in [2..=2, 2..=5] {
                let (bytes, entries) =
                    random_layout(&mut rng, num_shards, blocks, upper, FORMAT_RIBBON);
                let layout = RibbonLayout::parse(&bytes).expect("consistent");
                let paths: Vec<RibbonLayout> = ["avx512", "avx2", "scalar"]
                    .iter()
                    .filter_map(|&p| layout.clone().on_path(p))
                    .collect();
                let table_start = bytes.len() - TRAILER_BYTES - num_shards * SHARD_ENTRY_BYTES;
                let tail = 8 * upper as usize;
                let mut lengths = vec![bytes.len(), table_start, table_start + 1];
                lengths.extend([table_start + tail - 1, table_start + tail]);
                lengths.retain(|&len| len <= bytes.len());
                let p = probes(&mut rng, 300);
                for len in lengths {
                    let guarded = Guarded::new(&bytes[..len]);
                    let cut = guarded.bytes();
                    for &h in &p {
                        let want = layout.may_contain_portable(cut, h);
                        if len >= table_start {
                            let defined =
                                reference(&bytes, &entries, upper as usize, FORMAT_RIBBON, h);
                            assert_eq!(want, defined, "length {len}");
                        }
                        assert_eq!(layout.may_contain(cut, h), want, "length {len}");
                        for l in &paths {
                            assert_eq!(l.may_contain(cut, h), want, "length {len}");
                        }
                        for answer in [
                            layout.may_contain_avx2_path(cut, h),
                            layout.may_contain_avx512_path(cut, h),
                        ] {
                            assert!(answer.is_none_or(|a| a == want), "length {len}");
                        }
                        if len == bytes.len() {
                            assert_eq!(filter::may_contain(cut, h), want);
                        }
                    }
                }
            }
        }
    }
}

/// `RibbonLayout::expected_fp_rate` and `num_slots` read the shard table from
/// the bytes they are given: bytes other than the parsed ones (another
/// filter's, shorter, arbitrary, with tiny or zero block counts) give some
/// rate in [0, 1] and a slot count, never a panic (debug builds check
/// arithmetic overflow).
#[test]
fn layout_statistics_of_other_bytes_never_panic() {
    let keys: Vec<u64> = (0..20_000u64)
        .map(|i| filter::key_hash(&i.to_le_bytes()))
        .collect();
    let bytes = build_0x05(&RibbonPolicy::new(10.0), &keys);
    let layout = RibbonLayout::parse(&bytes).expect("a Ribbon filter");
    let rate = layout.expected_fp_rate(&bytes);
    assert!(rate > 0.005 && rate < 0.02, "{rate}");
    let mut others: Vec<Vec<u8>> = vec![Vec::new(), bytes[..bytes.len() / 2].to_vec()];
    others.push(build_0x05(&RibbonPolicy::new(16.0), &keys[..5_000]));
    // Every shard entry with 0, 1 and 2 blocks and a first upper block
    // past them.
    for blocks in [0u32, 1, 2] {
        let mut other = bytes.clone();
        let table = other.len() - TRAILER_BYTES - SHARD_ENTRY_BYTES * layout.num_shards() as usize;
        for i in 0..layout.num_shards() as usize {
            let at = table + i * SHARD_ENTRY_BYTES;
            other[at + 4..at + 8].copy_from_slice(&blocks.to_le_bytes());
            other[at + 8..at + 12].copy_from_slice(&u32::MAX.to_le_bytes());
        }
        others.push(other);
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    for _ in 0..20 {
        let mut other = bytes.clone();
        rng.fill(&mut other[..]);
        others.push(other);
    }
    for other in &others {
        let rate = layout.expected_fp_rate(other);
        assert!((0.0..=1.0).contains(&rate), "{rate}");
        let _ = layout.num_slots(other);
    }
}
