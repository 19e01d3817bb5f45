//! Ribbon filter format 0x05 (128-bit rows; and the format 0x03 it
//! replaced): correctness, fallbacks, measured false-positive rate,
//! decoding through the generic decoder, and damaged bytes.
//!
//! [`RibbonPolicy`] builds format 0x06 by default (tested in
//! `filter_ribbon_policy.rs`, `filter_ribbon64.rs` and
//! `filter_ribbon64_build.rs`); format 0x05 is still built when asked for
//! and read. Every filter here is built as format 0x05 explicitly, through
//! [`build_0x05`] and [`knobs_0x05`].

mod common;

use common::filters::{
    absent, assert_fp_rate_near, build_0x05, hashes, knobs_0x05, prop_no_false_negatives,
};
use std::sync::OnceLock;

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use sievedb::filter::ribbon::{
    BuildKnobs, RibbonLayout, RibbonShard, SolvePath, MAX_SEEDS, SHARD_ENTRY_BYTES, SHARD_KEYS,
    TRAILER_BYTES,
};
use sievedb::filter::{
    self, bloom, BloomPolicy, Filter, FilterPolicy, RibbonPolicy, FORMAT_BLOOM, FORMAT_RIBBON,
    FORMAT_RIBBON_V3,
};

fn assert_no_false_negatives(bytes: &[u8], keys: &[u64]) {
    let decoded = Filter::decode(bytes);
    let policy = RibbonPolicy::new(10.0);
    for &h in keys {
        assert!(decoded.may_contain(h), "Filter::decode false negative");
        assert!(
            filter::may_contain(bytes, h),
            "free may_contain false negative"
        );
        assert!(policy.may_contain(bytes, h), "policy false negative");
    }
}

struct Million {
    keys: Vec<u64>,
    bytes: Vec<u8>,
}

fn million() -> &'static Million {
    static M: OnceLock<Million> = OnceLock::new();
    M.get_or_init(|| {
        let keys = hashes(1_000_000, 0);
        let bytes = build_0x05(&RibbonPolicy::new(10.0), &keys);
        Million { keys, bytes }
    })
}

#[test]
fn no_false_negatives_at_all_sizes() {
    let policy = RibbonPolicy::new(10.0);
    for n in [0u64, 1, 2, 100, 10_000] {
        let keys = hashes(n, 7);
        let bytes = build_0x05(&policy, &keys);
        assert_no_false_negatives(&bytes, &keys);
        let expected = if n >= 10_000 { "ribbon" } else { "bloom" };
        assert_eq!(
            Filter::decode(bytes.clone()).format_name(),
            expected,
            "{n} keys"
        );
    }
    let m = million();
    assert_eq!(Filter::decode(m.bytes.clone()).format_name(), "ribbon");
    assert_no_false_negatives(&m.bytes, &m.keys);
}

#[test]
fn empty_set_rejects_everything() {
    let bytes = build_0x05(&RibbonPolicy::new(10.0), &[]);
    let decoded = Filter::decode(bytes.clone());
    assert_eq!(decoded.format_name(), "bloom");
    for h in absent(1000) {
        assert!(!decoded.may_contain(h));
        assert!(!filter::may_contain(&bytes, h));
    }
}

#[test]
fn small_sets_fall_back_to_bloom_and_large_ones_do_not() {
    // What this suite builds: format 0x05 (64-slot blocks); 0x03 is only
    // read.
    assert_eq!((FORMAT_RIBBON, FORMAT_RIBBON_V3), (0x05, 0x03));
    let policy = RibbonPolicy::new(10.0);
    let small = hashes(700, 1);
    let (bytes, outcome) = policy.build_with(&small, knobs_0x05());
    assert!(outcome.fell_back_to_bloom);
    assert_eq!(outcome.shards, 0);
    assert_eq!(bytes.last(), Some(&FORMAT_BLOOM));
    // The fallback is the blocked Bloom filter at the equivalent bits/key.
    assert_eq!(bytes, BloomPolicy::new(10.0).build(&small));

    let large = hashes(5_000, 1);
    let (bytes, outcome) = policy.build_with(&large, knobs_0x05());
    assert!(!outcome.fell_back_to_bloom);
    assert_eq!(outcome.shards, 1);
    assert_eq!(bytes.last(), Some(&FORMAT_RIBBON));
    let layout = RibbonLayout::parse(&bytes).expect("ribbon bytes");
    assert_eq!(
        (layout.format_id(), layout.block_slots()),
        (FORMAT_RIBBON, 64)
    );
    assert_no_false_negatives(&bytes, &large);
}

#[test]
fn duplicate_hashes_are_redundant_rows_not_failures() {
    let unique = hashes(20_000, 3);
    let mut keys = unique.clone();
    keys.extend_from_slice(&unique);
    keys.extend_from_slice(&unique[..5_000]);
    let policy = RibbonPolicy::new(10.0);
    // Slots for the unique keys only (45,000 rows, 20,352 slots): duplicates
    // add no information, so the system must still solve.
    let knobs = BuildKnobs {
        overhead: Some(-0.55),
        shard_keys: usize::MAX,
        ..knobs_0x05()
    };
    let (bytes, outcome) = policy.build_with(&keys, knobs);
    assert!(!outcome.fell_back_to_bloom, "{outcome:?}");
    assert_eq!(bytes.last(), Some(&FORMAT_RIBBON));
    assert_no_false_negatives(&bytes, &unique);
}

#[test]
fn failed_seeds_are_retried_and_still_give_a_correct_filter() {
    let policy = RibbonPolicy::new(10.0);
    // A tight overhead makes seeds fail often; look for key sets where the
    // first seed fails and a later one succeeds.
    let knobs = BuildKnobs {
        overhead: Some(0.012),
        ..knobs_0x05()
    };
    let keys = hashes(200_000, 5);
    let (bytes, outcome) = policy.build_with(&keys, knobs);
    assert!(!outcome.fell_back_to_bloom, "{outcome:?}");
    assert!(outcome.failed_seeds >= 3, "{outcome:?}");
    assert_no_false_negatives(&bytes, &keys);
    let layout = RibbonLayout::parse(&bytes).expect("ribbon bytes");
    assert_eq!(layout.num_shards(), outcome.shards);
    let seeds: Vec<u8> = (0..layout.num_shards())
        .map(|i| layout.shard(&bytes, i).unwrap().seed)
        .collect();
    let retried_seeds: u32 = seeds.iter().map(|&s| s as u32).sum();
    assert_eq!(
        retried_seeds, outcome.failed_seeds,
        "seed i means i failures"
    );
    assert!(layout.shard(&bytes, layout.num_shards()).is_none());
}

#[test]
fn exhausted_seeds_fall_back_to_bloom() {
    let policy = RibbonPolicy::new(10.0);
    let keys = hashes(10_000, 9);
    // Fewer slots than keys: no seed can solve the system.
    let knobs = BuildKnobs {
        overhead: Some(-0.02),
        ..knobs_0x05()
    };
    let (bytes, outcome) = policy.build_with(&keys, knobs);
    assert_eq!(outcome.failed_seeds, MAX_SEEDS);
    assert!(outcome.fell_back_to_bloom);
    assert_eq!(Filter::decode(bytes.clone()).format_name(), "bloom");
    assert_no_false_negatives(&bytes, &keys);
    assert_eq!(bytes, BloomPolicy::new(10.0).build(&keys));
}

/// Measured false-positive rate over `probes` absent keys against the
/// layout's slot-weighted rate, allowing 5 standard deviations.
fn check_fp_rate(bytes: &[u8], probes: u64) -> (f64, f64) {
    let layout = RibbonLayout::parse(bytes).expect("ribbon bytes");
    let expected = layout.expected_fp_rate(bytes);
    let hits = absent(probes)
        .into_iter()
        .filter(|&h| layout.may_contain(bytes, h))
        .count();
    let measured = assert_fp_rate_near(hits, probes, expected);
    (measured, expected)
}

#[test]
fn fp_rate_matches_fractional_result_bits_at_a_million_keys() {
    let m = million();
    let layout = RibbonLayout::parse(&m.bytes).unwrap();
    assert_eq!(layout.upper_columns(), 7);
    assert_eq!(
        layout.num_shards() as usize,
        1_000_000usize.div_ceil(SHARD_KEYS)
    );
    for i in 0..layout.num_shards() {
        let shard = layout.shard(&m.bytes, i).unwrap();
        assert!(shard.upper_start_block > 0 && shard.upper_start_block < shard.num_blocks);
    }
    let (_, expected) = check_fp_rate(&m.bytes, 1_000_000);
    // The mix was chosen to equal the blocked Bloom rate at 10 bits/key.
    let bloom_fp = BloomPolicy::new(10.0).expected_fp_rate();
    assert!(
        (expected - bloom_fp).abs() / bloom_fp < 0.01,
        "{expected} vs {bloom_fp}"
    );
    // The size target: at most 7.0 bits/key at that rate.
    let bits_per_key = m.bytes.len() as f64 * 8.0 / 1_000_000.0;
    assert!(bits_per_key <= 7.0, "{bits_per_key} bits/key");
    // And it costs about 30% less space than that Bloom filter.
    let bloom_bytes = (1_000_000.0 * 10.0 / 8.0) as usize;
    assert!(
        (m.bytes.len() as f64) < 0.73 * bloom_bytes as f64,
        "{} bytes",
        m.bytes.len()
    );
}

#[test]
fn fp_rate_matches_whole_result_bits() {
    let keys = hashes(200_000, 11);
    let bytes = build_0x05(&RibbonPolicy::with_fp_rate(1.0 / 256.0).unwrap(), &keys);
    let layout = RibbonLayout::parse(&bytes).unwrap();
    assert_eq!(layout.upper_columns(), 8);
    assert!(
        (0..layout.num_shards()).all(|i| layout.shard(&bytes, i).unwrap().upper_start_block == 0)
    );
    let (_, expected) = check_fp_rate(&bytes, 1_000_000);
    assert_eq!(expected, 1.0 / 256.0);
    assert_no_false_negatives(&bytes, &keys);
}

#[test]
fn low_and_high_rates_build_correct_filters() {
    let keys = hashes(30_000, 13);
    // 1 bit/key equivalent: upper = 1, lower blocks store no columns at all.
    for policy in [
        RibbonPolicy::new(1.0),
        RibbonPolicy::new(3.3),
        RibbonPolicy::new(100.0),
        RibbonPolicy::with_fp_rate(1e-12).unwrap(),
    ] {
        let bytes = build_0x05(&policy, &keys);
        assert_eq!(bytes.last(), Some(&FORMAT_RIBBON), "{policy:?}");
        assert_no_false_negatives(&bytes, &keys);
        check_fp_rate(&bytes, 200_000);
    }
}

#[test]
fn constructors_validate_and_clamp() {
    assert!(RibbonPolicy::NAME.starts_with(filter::BUILTIN_NAME_PREFIX));
    assert_eq!(RibbonPolicy::new(10.0).name(), RibbonPolicy::NAME);
    assert_eq!(RibbonPolicy::new(f64::NAN), RibbonPolicy::new(10.0));
    assert_eq!(RibbonPolicy::new(0.2), RibbonPolicy::new(1.0));
    assert_eq!(RibbonPolicy::new(1e9), RibbonPolicy::new(100.0));
    assert_eq!(RibbonPolicy::default(), RibbonPolicy::new(10.0));
    for bad in [f64::NAN, f64::INFINITY, 0.5, 100.5, -3.0] {
        let err = RibbonPolicy::try_new(bad).unwrap_err();
        assert!(matches!(err, sievedb::Error::InvalidArgument(_)), "{bad}");
    }
    assert_eq!(
        RibbonPolicy::try_new(10.0).unwrap(),
        RibbonPolicy::new(10.0)
    );
    for bad in [0.0, 1.0, -0.1, 2.0, f64::NAN] {
        let err = RibbonPolicy::with_fp_rate(bad).unwrap_err();
        assert!(matches!(err, sievedb::Error::InvalidArgument(_)), "{bad}");
    }
    let p = RibbonPolicy::new(10.0);
    let expected = bloom::blocked_bloom_fp_rate(10.0, bloom::probes_for_bits_per_key(10.0));
    assert_eq!(p.fp_rate(), expected);
    assert_eq!(p.bloom_bits_per_key(), 10.0);
    let q = RibbonPolicy::with_fp_rate(0.01).unwrap();
    assert_eq!(q.fp_rate(), 0.01);
    assert_eq!(
        q.bloom_bits_per_key(),
        BloomPolicy::with_fp_rate(0.01).unwrap().bits_per_key()
    );
}

fn small_ribbon() -> (Vec<u64>, Vec<u8>) {
    let keys = hashes(3_000, 21);
    let bytes = build_0x05(&RibbonPolicy::new(10.0), &keys);
    assert_eq!(bytes.last(), Some(&FORMAT_RIBBON));
    (keys, bytes)
}

#[test]
fn truncated_bytes_never_panic_nor_lose_keys() {
    let (keys, bytes) = small_ribbon();
    for len in 0..bytes.len() {
        let cut = &bytes[..len];
        assert!(RibbonLayout::parse(cut).is_none(), "parsed at length {len}");
        assert_no_false_negatives(cut, &keys[..50]);
    }
    // Extra bytes in front are as inconsistent as missing ones.
    let mut longer = vec![0u8];
    longer.extend_from_slice(&bytes);
    assert!(RibbonLayout::parse(&longer).is_none());
    assert_eq!(Filter::decode(longer).format_name(), "undecodable");
}

/// A layout queried with fewer bytes than it was parsed from (the public
/// `RibbonLayout::may_contain` takes any bytes): the vector paths check the
/// length once and leave such bytes to the bounds-checked scalar query, so
/// every path answers like the portable one and never panics.
#[test]
fn a_layout_queried_with_shorter_bytes_answers_like_the_portable_path() {
    // One shard (too few table bytes after the solution for the narrow
    // AVX-512 query to read past it), and seven (enough: it then needs the
    // solution and 8 x columns bytes after it).
    let (keys, bytes) = small_ribbon();
    let many = hashes(50_000, 41);
    let many_bytes = build_0x05(&RibbonPolicy::new(10.0), &many);
    for (keys, bytes) in [(keys, bytes), (many, many_bytes)] {
        let layout = RibbonLayout::parse(&bytes).expect("ribbon bytes");
        let probes: Vec<u64> = keys[..200].iter().copied().chain(absent(2_000)).collect();
        let shards = layout.num_shards() as usize;
        assert!(shards == 1 || shards == 7, "{shards} shards");
        let solution = bytes.len() - shards * SHARD_ENTRY_BYTES - TRAILER_BYTES;
        let tail = 8 * layout.upper_columns() as usize;
        let lengths = [
            0,
            1,
            100,
            solution / 2,
            solution - 1,
            solution,
            solution + 8,
            (solution + tail - 1).min(bytes.len()),
            (solution + tail).min(bytes.len()),
            bytes.len(),
        ];
        for len in lengths {
            let cut = &bytes[..len];
            for &h in &probes {
                let portable = layout.may_contain_portable(cut, h);
                let name = format!("{shards} shards, length {len}");
                assert_eq!(layout.may_contain(cut, h), portable, "{name}");
                assert_eq!(layout.may_contain_scalar(cut, h), portable, "{name}");
                for path in [
                    layout.may_contain_avx2_path(cut, h),
                    layout.may_contain_avx512_path(cut, h),
                ] {
                    assert!(path.is_none_or(|answer| answer == portable), "{name}");
                }
            }
        }
        // Whole bytes: the key set is found on every path.
        assert!(keys.iter().all(|&h| layout.may_contain(&bytes, h)));
    }
}

#[test]
fn every_single_bit_flip_in_the_trailer_and_shard_table_is_detected() {
    let (keys, bytes) = small_ribbon();
    check_every_trailer_flip(&keys, &bytes);
    // Three shards: offsets of later shards are covered as well.
    let keys = hashes(3 * SHARD_KEYS as u64 - 100, 23);
    let bytes = build_0x05(&RibbonPolicy::new(10.0), &keys);
    assert_eq!(RibbonLayout::parse(&bytes).unwrap().num_shards(), 3);
    check_every_trailer_flip(&keys, &bytes);
}

fn check_every_trailer_flip(keys: &[u64], bytes: &[u8]) {
    let shards = RibbonLayout::parse(bytes).unwrap().num_shards() as usize;
    let trailer = bytes.len() - TRAILER_BYTES - shards * SHARD_ENTRY_BYTES;
    for at in trailer..bytes.len() {
        for bit in 0..8 {
            let mut damaged = bytes.to_vec();
            damaged[at] ^= 1 << bit;
            assert!(
                RibbonLayout::parse(&damaged).is_none(),
                "byte {at} bit {bit}"
            );
            let decoded = Filter::decode(damaged.clone());
            assert!(decoded.unfiltered().is_some(), "byte {at} bit {bit}");
            assert_no_false_negatives(&damaged, &keys[..50]);
        }
    }
}

#[test]
fn random_trailer_damage_never_panics_nor_loses_keys() {
    let (keys, bytes) = small_ribbon();
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let trailer = bytes.len() - TRAILER_BYTES - SHARD_ENTRY_BYTES;
    for _ in 0..2_000 {
        let mut damaged = bytes.clone();
        let flips = rng.gen_range(1..=12);
        for _ in 0..flips {
            let at = rng.gen_range(trailer..bytes.len());
            damaged[at] ^= 1 << rng.gen_range(0..8);
        }
        if damaged == bytes {
            continue; // flips cancelled out
        }
        assert_no_false_negatives(&damaged, &keys[..20]);
    }
}

#[test]
fn solution_bit_flips_never_panic() {
    let (keys, bytes) = small_ribbon();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let solution = bytes.len() - TRAILER_BYTES - SHARD_ENTRY_BYTES;
    for _ in 0..200 {
        let mut damaged = bytes.clone();
        for _ in 0..rng.gen_range(1..=64) {
            let at = rng.gen_range(0..solution);
            damaged[at] ^= 1 << rng.gen_range(0..8);
        }
        // Still a consistent layout; answers may be wrong (the table's block
        // checksum catches this) but nothing may panic.
        assert!(RibbonLayout::parse(&damaged).is_some());
        let decoded = Filter::decode(damaged.clone());
        for &h in keys.iter().chain(absent(100).iter()) {
            let _ = decoded.may_contain(h);
            let _ = filter::may_contain(&damaged, h);
        }
    }
}

#[test]
fn arbitrary_bytes_ending_in_the_ribbon_id_never_panic() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    for id in [FORMAT_RIBBON, FORMAT_RIBBON_V3] {
        for len in 0..400usize {
            let mut bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            if let Some(last) = bytes.last_mut() {
                *last = id;
            }
            let decoded = Filter::decode(bytes.clone());
            for h in absent(10) {
                let _ = decoded.may_contain(h);
                let _ = filter::may_contain(&bytes, h);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn proptest_no_false_negatives(
        keys in prop::collection::vec(any::<u64>(), 0..6_000),
        dup_every in 1usize..50,
        bits in 1.0f64..24.0,
    ) {
        let mut all = keys.clone();
        all.extend(keys.iter().step_by(dup_every).copied());
        let bytes = build_0x05(&RibbonPolicy::new(bits), &all);
        let decoded = Filter::decode(bytes.clone());
        prop_assert!(decoded.unfiltered().is_none() || all.is_empty());
        prop_no_false_negatives(&decoded, &bytes, &all)?;
    }
}

#[test]
fn tables_recording_the_ribbon_name_decode_from_bytes() {
    let keys = hashes(5_000, 31);
    let bytes = build_0x05(&RibbonPolicy::new(10.0), &keys);
    // Whatever policy the database uses now, a built-in name decodes the
    // bytes themselves.
    let current: std::sync::Arc<dyn FilterPolicy> = std::sync::Arc::new(BloomPolicy::new(10.0));
    let decoded = Filter::for_policy(RibbonPolicy::NAME, bytes.clone(), &current);
    assert_eq!(decoded.format_name(), "ribbon");
    assert_eq!(decoded.len_bytes(), bytes.len());
    assert!(format!("{decoded:?}").contains("ribbon"));
    assert!(keys.iter().all(|&h| decoded.may_contain(h)));
    let rejected = absent(10_000)
        .into_iter()
        .filter(|&h| !decoded.may_contain(h))
        .count();
    assert!(
        rejected > 9_800,
        "only {rejected} of 10,000 absent keys rejected"
    );
}

/// The scalar query path with POPCNT (when the CPU has it), `may_contain`
/// (the vector path this CPU takes) and the portable path give the same
/// answer for every key, present or absent, in lower and upper blocks,
/// including block-aligned starts.
#[test]
fn popcnt_and_portable_queries_agree() {
    let m = million();
    let layout = RibbonLayout::parse(&m.bytes).expect("ribbon bytes");
    let mut disagreements = 0;
    let mut positives = 0;
    for &h in m.keys.iter().step_by(10).chain(absent(200_000).iter()) {
        let fast = layout.may_contain_scalar(&m.bytes, h);
        disagreements += usize::from(fast != layout.may_contain_portable(&m.bytes, h));
        disagreements += usize::from(fast != layout.may_contain(&m.bytes, h));
        positives += usize::from(fast);
    }
    assert_eq!(disagreements, 0);
    // 100,000 present keys, and about 0.95% of 200,000 absent ones.
    assert!((101_000..103_500).contains(&positives), "{positives}");
}

/// Every present key and many absent ones get the same answer from
/// `may_contain` (the AVX-512 column path on CPUs with its features, else
/// the AVX2 one on CPUs with AVX2, as this test checks on x86-64), from the
/// AVX2 and the AVX-512 paths called directly (where the CPU has them) and
/// from the portable scalar loop, and no present key is rejected: filters of
/// 1 to 1,000,000 keys, whole and fractional result bits from 0 to 32
/// columns (the AVX2 path reads chunks of four columns, the AVX-512 path
/// chunks of eight, with masked loads; so every count from 0 to 11 and 16,
/// 17 and 32 cover odd counts, partial and whole registers, one and several
/// chunks), shards of one row's width (two 64-slot blocks: every start is
/// slot 0, block-aligned, and its third block is past the shard: the next
/// shard's first block, or past the solution for the last shard, which the
/// one-shard filters of 100 keys also reach through their last start, on
/// the byte-slice path and through `Filter`) and block-aligned starts in
/// larger shards.
#[test]
fn avx2_avx512_and_portable_queries_agree_on_many_filters() {
    let tight = knobs_0x05();
    // 100 keys need a large overhead to reach the 1,024 slots of a Ribbon
    // filter; one key never does (it is a Bloom filter, checked below).
    let roomy = BuildKnobs {
        overhead: Some(10.0),
        ..knobs_0x05()
    };
    // One key per shard: every shard is 128 slots (two blocks), every start
    // slot 0.
    let one_block_shards = BuildKnobs {
        shard_keys: 1,
        ..knobs_0x05()
    };
    let policies = [
        RibbonPolicy::new(10.0),                               // 7 / 6 columns
        RibbonPolicy::new(16.0),                               // 11 / 10
        RibbonPolicy::with_fp_rate(1.0 / 256.0).unwrap(),      // 8
        RibbonPolicy::with_fp_rate(2f64.powf(-8.5)).unwrap(),  // 9 / 8
        RibbonPolicy::with_fp_rate(2f64.powf(-16.4)).unwrap(), // 17 / 16
        RibbonPolicy::with_fp_rate(1e-12).unwrap(),            // 32
        RibbonPolicy::with_fp_rate(2f64.powf(-4.5)).unwrap(),  // 5 / 4
        RibbonPolicy::with_fp_rate(2f64.powf(-3.5)).unwrap(),  // 4 / 3
        RibbonPolicy::with_fp_rate(2f64.powf(-2.5)).unwrap(),  // 3 / 2
        RibbonPolicy::with_fp_rate(0.3).unwrap(),              // 2 / 1
        RibbonPolicy::with_fp_rate(0.6).unwrap(),              // 1 / 0
    ];
    let mut cases: Vec<(Vec<u64>, Vec<u8>, String)> = Vec::new();
    for (p, policy) in policies.iter().enumerate() {
        let p = p as u64;
        for (n, knobs, name) in [
            (100u64, roomy, "roomy"),
            (2_000, one_block_shards, "one-block shards"),
            (10_000, tight, "default"),
        ] {
            let keys = hashes(n, 1_000 * p + n);
            let (bytes, outcome) = policy.build_with(&keys, knobs);
            assert!(!outcome.fell_back_to_bloom, "{n} keys, {name}, policy {p}");
            cases.push((keys, bytes, format!("{n} keys, {name}, policy {p}")));
        }
    }
    let keys = hashes(1_000_000, 77);
    let bytes = build_0x05(&RibbonPolicy::new(16.0), &keys);
    cases.push((keys, bytes, "1,000,000 keys, 11 / 10 columns".into()));
    let m = million();
    cases.push((m.keys.clone(), m.bytes.clone(), "1,000,000 keys".into()));

    let absent_keys = absent(100_000);
    let mut aligned_starts = 0;
    for (keys, bytes, name) in &cases {
        let layout = RibbonLayout::parse(bytes).expect("ribbon bytes");
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let avx512 = has!("avx512f")
                && has!("avx512vl")
                && has!("avx512vbmi2")
                && has!("avx512vpopcntdq")
                && has!("bmi2");
            let avx2 = has!("avx2") && has!("bmi2");
            assert_eq!(layout.uses_avx512(), avx512, "{name}");
            assert_eq!(layout.uses_avx2(), avx2 && !avx512, "{name}");
            assert_eq!(layout.may_contain_avx512_path(bytes, 1).is_some(), avx512);
            assert_eq!(layout.may_contain_avx2_path(bytes, 1).is_some(), avx2);
        }
        let decoded = Filter::decode(bytes.clone());
        for &h in keys {
            assert!(layout.may_contain(bytes, h), "{name}: false negative");
            assert!(layout.may_contain_portable(bytes, h), "{name}: portable");
            assert_ne!(
                layout.may_contain_avx2_path(bytes, h),
                Some(false),
                "{name}: avx2"
            );
            assert_ne!(
                layout.may_contain_avx512_path(bytes, h),
                Some(false),
                "{name}: avx512"
            );
            assert!(decoded.may_contain(h), "{name}: decoded");
        }
        let absent_checked = if keys.len() >= 1_000_000 {
            100_000
        } else {
            20_000
        };
        for &h in &absent_keys[..absent_checked] {
            let fast = layout.may_contain(bytes, h);
            assert_eq!(fast, layout.may_contain_portable(bytes, h), "{name}");
            for path in [
                layout.may_contain_avx2_path(bytes, h),
                layout.may_contain_avx512_path(bytes, h),
            ] {
                assert!(path.is_none_or(|answer| answer == fast), "{name}");
            }
            assert_eq!(fast, decoded.may_contain(h), "{name}");
        }
        if layout.num_shards() as usize == keys.len() {
            aligned_starts += keys.len();
        }
    }
    assert!(aligned_starts > 0);
    // One key: too few slots for a Ribbon filter, built as a Bloom filter.
    let one = hashes(1, 5);
    let bytes = build_0x05(&RibbonPolicy::new(10.0), &one);
    assert_eq!(bytes.last(), Some(&FORMAT_BLOOM));
    assert_no_false_negatives(&bytes, &one);
}

/// Every back substitution (AVX-512 when the CPU has it, scalar with POPCNT,
/// scalar with the portable parity) writes the same bytes, for whole and
/// fractional result bits and 1 to 32 columns (one to four AVX-512 register
/// pairs, full and partial).
#[test]
fn every_back_substitution_writes_the_same_bytes() {
    let keys = hashes(50_000, 3);
    let mut policies = vec![RibbonPolicy::new(10.0), RibbonPolicy::new(16.0)];
    for p in [
        1.0 / 256.0,
        0.3,
        0.6,
        1e-3,
        2f64.powi(-9),
        2f64.powf(-16.4),
        2f64.powi(-17),
        1e-12,
    ] {
        policies.push(RibbonPolicy::with_fp_rate(p).unwrap());
    }
    for policy in policies {
        let (fast, _) = policy.build_with(&keys, knobs_0x05());
        assert_eq!(fast[fast.len() - 1], FORMAT_RIBBON);
        for path in [SolvePath::Scalar, SolvePath::Portable] {
            let knobs = BuildKnobs {
                solve_path: path,
                ..knobs_0x05()
            };
            let (slow, _) = policy.build_with(&keys, knobs);
            assert!(
                fast == slow,
                "bytes differ: {path:?}, p = {}",
                policy.fp_rate()
            );
        }
        assert_no_false_negatives(&fast, &keys);
    }
}

/// Bytes of the first Ribbon version (format id 0x02, other row hashing)
/// are not believed: they may contain every key and are counted.
#[test]
fn first_version_format_id_is_not_read() {
    let keys = hashes(20_000, 11);
    let mut bytes = build_0x05(&RibbonPolicy::new(10.0), &keys);
    let last = bytes.last_mut().expect("non-empty filter");
    assert_eq!(*last, FORMAT_RIBBON);
    *last = filter::FORMAT_RIBBON_V1;
    assert!(RibbonLayout::parse(&bytes).is_none());
    let before = filter::undecodable_filters();
    let decoded = Filter::decode(bytes.clone());
    assert_eq!(decoded.unfiltered(), Some(filter::Unfiltered::Undecodable));
    assert!(filter::undecodable_filters() > before);
    for &h in keys.iter().take(100).chain(absent(1000).iter()) {
        assert!(decoded.may_contain(h));
        assert!(filter::may_contain(&bytes, h));
    }
}

/// The same filter in the layout of format 0x03, which stored the solution
/// in blocks of 128 slots (one 16-byte word per column: the words of two
/// 64-slot blocks of format 0x05, low half first) with the same rows,
/// sizes, shard table and trailer. Built filters have an even number of
/// 64-slot blocks per shard and an even first upper block (they are sized
/// in whole rows' widths), so the conversion is exact.
fn to_format_0x03(bytes: &[u8]) -> Vec<u8> {
    let layout = RibbonLayout::parse(bytes).expect("ribbon bytes");
    assert_eq!(layout.format_id(), FORMAT_RIBBON);
    assert_eq!(layout.block_slots(), 64);
    let upper = layout.upper_columns() as usize;
    let shards: Vec<RibbonShard> = (0..layout.num_shards())
        .map(|i| layout.shard(bytes, i).expect("shard"))
        .collect();
    let mut solution = Vec::new();
    let mut table = Vec::new();
    for shard in &shards {
        let (blocks, first_upper) = (shard.num_blocks as usize, shard.upper_start_block as usize);
        assert!(blocks % 2 == 0 && first_upper % 2 == 0, "{shard:?}");
        assert_eq!(solution.len(), shard.word_offset as usize * 8);
        let columns = |block: usize| upper - usize::from(block < first_upper);
        let mut at = shard.word_offset as usize * 8;
        let mut words64 = Vec::new();
        for block in 0..blocks {
            let len = columns(block) * 8;
            words64.push(&bytes[at..at + len]);
            at += len;
        }
        let word_offset = (solution.len() / 16) as u32;
        for pair in words64.chunks_exact(2) {
            for j in 0..pair[0].len() / 8 {
                solution.extend_from_slice(&pair[0][8 * j..8 * j + 8]);
                solution.extend_from_slice(&pair[1][8 * j..8 * j + 8]);
            }
        }
        table.extend_from_slice(&word_offset.to_le_bytes());
        table.extend_from_slice(&(shard.num_blocks / 2).to_le_bytes());
        table.extend_from_slice(&(shard.upper_start_block / 2).to_le_bytes());
        table.push(shard.seed);
    }
    let mut out = solution;
    let table_start = out.len();
    out.extend_from_slice(&table);
    out.extend_from_slice(&layout.num_shards().to_le_bytes());
    out.push(upper as u8);
    let crc = crc32fast::hash(&out[table_start..]);
    out.extend_from_slice(&crc.to_le_bytes());
    out.push(FORMAT_RIBBON_V3);
    out
}

/// Filters written in format 0x03 (128-slot blocks) are still read, through
/// the bounds-checked scalar query, and answer exactly as the same filter in
/// format 0x05 does, for every key, on every path, for column counts from 0
/// to 32 and through every decoder.
#[test]
fn format_0x03_filters_still_answer_exactly() {
    let mut cases: Vec<(Vec<u64>, Vec<u8>, String)> = Vec::new();
    for (p, policy) in [
        RibbonPolicy::new(10.0),                              // 7 / 6 columns
        RibbonPolicy::with_fp_rate(1.0 / 256.0).unwrap(),     // 8
        RibbonPolicy::with_fp_rate(2f64.powf(-8.5)).unwrap(), // 9 / 8
        RibbonPolicy::with_fp_rate(1e-12).unwrap(),           // 32
        RibbonPolicy::with_fp_rate(0.6).unwrap(),             // 1 / 0
    ]
    .into_iter()
    .enumerate()
    {
        for (n, knobs) in [
            (20_000u64, knobs_0x05()),
            (
                1_000,
                BuildKnobs {
                    shard_keys: 1,
                    ..knobs_0x05()
                },
            ),
        ] {
            let keys = hashes(n, 500 * p as u64 + n);
            let (bytes, outcome) = policy.build_with(&keys, knobs);
            assert!(!outcome.fell_back_to_bloom);
            cases.push((keys, bytes, format!("policy {p}, {n} keys")));
        }
    }
    let m = million();
    cases.push((m.keys.clone(), m.bytes.clone(), "1,000,000 keys".into()));
    let absent_keys = absent(50_000);
    for (keys, bytes, name) in &cases {
        let old = to_format_0x03(bytes);
        let layout = RibbonLayout::parse(bytes).expect("0x05");
        let old_layout = RibbonLayout::parse(&old).expect("0x03 parses");
        assert_eq!(old_layout.format_id(), FORMAT_RIBBON_V3, "{name}");
        assert_eq!(old_layout.block_slots(), 128, "{name}");
        assert_eq!(
            old_layout.num_slots(&old),
            layout.num_slots(bytes),
            "{name}"
        );
        assert_eq!(
            old_layout.expected_fp_rate(&old),
            layout.expected_fp_rate(bytes),
            "{name}"
        );
        assert!(
            !old_layout.uses_avx512() && !old_layout.uses_avx2(),
            "{name}"
        );
        let decoded = Filter::decode(&old);
        assert_eq!(decoded.format_name(), "ribbon", "{name}");
        let probes = keys.iter().step_by(7).chain(absent_keys.iter());
        let mut positives = 0;
        for &h in probes {
            let answer = layout.may_contain(bytes, h);
            positives += usize::from(answer);
            assert_eq!(old_layout.may_contain(&old, h), answer, "{name}");
            assert_eq!(old_layout.may_contain_portable(&old, h), answer, "{name}");
            assert_eq!(old_layout.may_contain_scalar(&old, h), answer, "{name}");
            for path in [
                old_layout.may_contain_avx2_path(&old, h),
                old_layout.may_contain_avx512_path(&old, h),
            ] {
                assert!(path.is_none_or(|a| a == answer), "{name}");
            }
            assert_eq!(decoded.may_contain(h), answer, "{name}");
            assert_eq!(filter::may_contain(&old, h), answer, "{name}");
        }
        assert!(positives >= keys.len() / 7, "{name}");
        // Truncated or damaged 0x03 bytes never panic nor lose keys.
        for cut in [old.len() - 1, old.len() / 2, 10] {
            assert!(RibbonLayout::parse(&old[..cut]).is_none());
            assert_no_false_negatives(&old[..cut], &keys[..20]);
        }
        let short = &old[..old.len() / 2];
        for &h in keys.iter().take(50) {
            assert!(old_layout.may_contain(short, h), "{name}: short bytes");
        }
    }
}

/// Found by review: below about 1.45 Bloom-equivalent bits per key the
/// Bloom rate is above 1/2, but a Ribbon filter keeps at least one result
/// bit per key, so its filters answered at 1/2 while `fp_rate` reported
/// the Bloom rate (0.632 at 1 bit per key; sieve-bench's `expected` column
/// takes it from there). `fp_rate` is now the rate the filters have.
#[test]
fn fp_rate_is_the_rate_built_at_low_bits_per_key() {
    let keys = hashes(50_000, 0);
    let probes = absent(200_000);
    let mut wrong = Vec::new();
    for bits in [1.0, 1.2, 1.3, 1.4, 1.5, 2.0, 3.0] {
        let policy = RibbonPolicy::try_new(bits).unwrap();
        assert!(policy.fp_rate() <= RibbonPolicy::MAX_FP_RATE, "{bits}");
        let f = Filter::decode(policy.build(&keys));
        let hits = probes.iter().filter(|&&h| f.may_contain(h)).count();
        let measured = hits as f64 / probes.len() as f64;
        let p = policy.fp_rate();
        let sigma = (p * (1.0 - p) / probes.len() as f64).sqrt();
        if (measured - p).abs() > 5.0 * sigma {
            wrong.push(format!(
                "bits {bits}: measured {measured:.4}, fp_rate {p:.4}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // The same cap for a rate asked for directly, and a fallback Bloom
    // filter no worse than it.
    let policy = RibbonPolicy::with_fp_rate(0.7).unwrap();
    assert_eq!(policy.fp_rate(), RibbonPolicy::MAX_FP_RATE);
    let bloom = BloomPolicy::new(policy.bloom_bits_per_key());
    assert!(
        bloom.expected_fp_rate() <= 0.5 + 1e-9,
        "{}",
        bloom.expected_fp_rate()
    );
    assert_eq!(
        RibbonPolicy::new(10.0).fp_rate(),
        BloomPolicy::new(10.0).expected_fp_rate()
    );
}
