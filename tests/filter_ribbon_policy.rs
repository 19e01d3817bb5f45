//! What `RibbonPolicy` builds by default (format 0x06), end to end: the
//! issue's requirements held against the filters the policy writes,
//! queried through `Filter::decode`, the generic
//! `sievedb::filter::may_contain`, `Ribbon64Layout::may_contain` and every
//! query path this CPU has (`on_path` and the `*_path` hooks), each compared
//! with the format's reference query
//! (`Ribbon64Table::may_contain_reference`).
//!
//! Crafted (not built) format 0x06 bytes are in `filter_ribbon64.rs`; the
//! build's own properties (lanes, solvers, shard sizes, duplicates) through
//! the reference query alone in `filter_ribbon64_build.rs`; format 0x05 in
//! `filter_ribbon.rs`.
//!
//! Damaged bytes: truncations and damage to the shard table or trailer
//! must decode as undecodable, which answers "may contain" (never a false
//! negative). Damage to the solution bits is not detectable from the filter
//! bytes: such filters must not panic, and may give false negatives (the
//! table's block checksum catches that damage before the filter is read).

mod common;

use common::filters::{absent, hashes, prop_no_false_negatives};
use std::sync::{Arc, OnceLock};

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use sievedb::filter::ribbon::{BuildKnobs, BuildOutcome, MAX_SEEDS, MIN_SLOTS};
use sievedb::filter::ribbon64::{
    overhead64_for_keys, shard_count_64, Ribbon64Layout, Ribbon64Table, SHARD_ENTRY_BYTES,
    SHARD_KEYS_64, TRAILER_BYTES,
};
use sievedb::filter::{
    self, BloomPolicy, Filter, FilterPolicy, RibbonPolicy, Unfiltered, FORMAT_BLOOM,
    FORMAT_RIBBON64,
};

/// Every named path of `Ribbon64Layout::on_path`.
const PATHS: [&str; 7] = Ribbon64Layout::PATHS;

/// Standard deviations a measured false-positive rate may differ from the
/// expected one (a two-sided binomial bound; about 1 in 1.7 million runs
/// fails by chance, and the key sets here are fixed, so a run that passes
/// always passes).
const SIGMAS: f64 = 5.0;

/// The policy's default bytes and what the build did.
fn build(policy: &RibbonPolicy, keys: &[u64]) -> (Vec<u8>, BuildOutcome) {
    let built = policy.build_with(keys, BuildKnobs::default());
    assert!(
        built.0 == policy.build(keys),
        "build and build_with(default knobs) differ"
    );
    built
}

/// One 1,000,000-key filter of `RibbonPolicy::default()`, shared by the
/// tests that need it.
struct Million {
    keys: Vec<u64>,
    bytes: Vec<u8>,
}

fn million() -> &'static Million {
    static M: OnceLock<Million> = OnceLock::new();
    M.get_or_init(|| {
        let keys = hashes(1_000_000, 0);
        let bytes = RibbonPolicy::default().build(&keys);
        Million { keys, bytes }
    })
}

/// `layout` moved onto every path this CPU runs, by name. Fails if a path
/// the CPU has the features for is missing (so no path is skipped
/// silently).
fn paths_of(layout: &Ribbon64Layout) -> Vec<(&'static str, Ribbon64Layout)> {
    let paths: Vec<(&str, Ribbon64Layout)> = PATHS
        .iter()
        .filter_map(|&p| layout.clone().on_path(p).map(|l| (p, l)))
        .collect();
    let has = |name: &str| paths.iter().any(|(p, _)| *p == name);
    assert!(has("portable"));
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as cpu;
        let avx512 = cpu!("avx512f")
            && cpu!("avx512vl")
            && cpu!("avx512vbmi2")
            && cpu!("avx512vpopcntdq")
            && cpu!("bmi2");
        assert_eq!(has("avx512"), avx512);
        assert_eq!(has("avx512-general"), avx512);
        assert_eq!(layout.uses_avx512(), avx512);
        assert_eq!(has("avx2"), cpu!("avx2"));
        assert_eq!(has("avx2-general"), cpu!("avx2"));
        assert_eq!(has("popcnt"), cpu!("popcnt"));
        assert_eq!(has("popcnt-narrow"), cpu!("popcnt"));
    }
    paths
}

/// Holds every query of built format 0x06 `bytes` against the reference:
/// each key of `present` must be found by the reference, and every way to
/// query (the decoded `Filter`, its batch query, the generic
/// `filter::may_contain` on every `generic_every`-th key, the layout, the
/// scalar and portable loops, each `on_path` path and each `*_path` hook the
/// CPU has) must give the reference's answer for every key of `present`
/// and `absent`. Returns how many absent keys the reference passes.
fn assert_every_path_is_the_reference(
    bytes: &[u8],
    present: &[u64],
    absent: &[u64],
    generic_every: usize,
    name: &str,
) -> usize {
    assert_eq!(bytes.last(), Some(&FORMAT_RIBBON64), "{name}");
    let table = Ribbon64Table::parse(bytes).expect("built bytes parse");
    let layout = Ribbon64Layout::parse(bytes).expect("built bytes parse");
    let paths = paths_of(&layout);
    let decoded = Filter::decode(bytes);
    assert_eq!(decoded.format_name(), "ribbon", "{name}");
    assert!(decoded.unfiltered().is_none(), "{name}");
    let probes: Vec<u64> = present.iter().chain(absent).copied().collect();
    let mut batch = vec![false; probes.len()];
    decoded
        .may_contain_batch(&probes, &mut batch)
        .expect("batch");
    let mut absent_passed = 0;
    for (i, &h) in probes.iter().enumerate() {
        let want = table.may_contain_reference(bytes, h);
        let is_present = i < present.len();
        if is_present {
            assert!(want, "{name}: reference false negative");
        } else {
            absent_passed += usize::from(want);
        }
        assert_eq!(decoded.may_contain(h), want, "{name}: Filter::decode");
        assert_eq!(batch[i], want, "{name}: may_contain_batch");
        if i % generic_every == 0 {
            assert_eq!(filter::may_contain(bytes, h), want, "{name}: generic");
        }
        assert_eq!(layout.may_contain(bytes, h), want, "{name}: layout");
        assert_eq!(layout.may_contain_scalar(bytes, h), want, "{name}: scalar");
        assert_eq!(
            layout.may_contain_portable(bytes, h),
            want,
            "{name}: portable"
        );
        for (hook, answer) in [
            ("narrow", layout.may_contain_avx512_narrow_path(bytes, h)),
            ("general", layout.may_contain_avx512_general_path(bytes, h)),
            ("avx2", layout.may_contain_avx2_path(bytes, h)),
            ("avx2 narrow", layout.may_contain_avx2_narrow_path(bytes, h)),
        ] {
            assert!(answer.is_none_or(|a| a == want), "{name}: {hook} hook");
        }
        for (p, l) in &paths {
            assert_eq!(l.may_contain(bytes, h), want, "{name}: on_path({p})");
        }
    }
    absent_passed
}

/// No false negative through `Filter::decode` and the generic query, for
/// any kind of bytes the policy writes (Ribbon, or the Bloom fallback).
fn assert_no_false_negatives(bytes: &[u8], keys: &[u64], name: &str) {
    let decoded = Filter::decode(bytes);
    for &h in keys {
        assert!(decoded.may_contain(h), "{name}: Filter::decode");
        assert!(filter::may_contain(bytes, h), "{name}: generic");
    }
}

/// The fewest keys for which the policy builds format 0x06 rather than a
/// Bloom filter: the first count whose slots (keys plus the overhead for
/// that many keys, `overhead64_for_keys`) reach `MIN_SLOTS`.
fn fewest_ribbon_keys() -> u64 {
    (1..)
        .find(|&n: &u64| n as f64 * (1.0 + overhead64_for_keys(n as usize)) >= MIN_SLOTS as f64)
        .unwrap()
}

#[test]
fn no_false_negatives_at_every_size_on_every_path() {
    let policy = RibbonPolicy::default();
    let threshold = fewest_ribbon_keys();
    for n in [0u64, 1, 2, 100, 10_000] {
        let keys = hashes(n, 7 + n);
        let (bytes, _) = build(&policy, &keys);
        let name = format!("{n} keys");
        assert_no_false_negatives(&bytes, &keys, &name);
        if n >= threshold {
            assert_every_path_is_the_reference(&bytes, &keys, &[], 1, &name);
        } else {
            assert_eq!(bytes.last(), Some(&FORMAT_BLOOM), "{name}");
        }
    }
    let m = million();
    assert_no_false_negatives(&m.bytes, &m.keys, "1,000,000 keys");
    assert_every_path_is_the_reference(&m.bytes, &m.keys, &[], 1_000, "1,000,000 keys");
}

/// Several rates: whole and fractional result bits, 6 to 20 columns (more
/// than 8 takes the general AVX-512 path, at most 8 the narrow one), and a
/// filter with many shards.
#[test]
fn every_path_gives_the_reference_answer_at_several_rates() {
    let absent_keys = absent(30_000);
    let policies = [
        RibbonPolicy::new(6.0),
        RibbonPolicy::new(10.0),
        RibbonPolicy::new(16.0),
        RibbonPolicy::new(20.0),
        RibbonPolicy::with_fp_rate(1.0 / 256.0).unwrap(),
        RibbonPolicy::with_fp_rate(1e-6).unwrap(),
    ];
    let mut upper_columns = Vec::new();
    for (p, policy) in policies.iter().enumerate() {
        let keys = hashes(30_000, 100_000 * p as u64);
        let (bytes, outcome) = build(policy, &keys);
        assert!(!outcome.fell_back_to_bloom, "{policy:?}");
        let name = format!("{policy:?}");
        let layout = Ribbon64Layout::parse(&bytes).unwrap();
        // The layout's columns give the policy's rate (whole bits:
        // `upper` columns everywhere).
        let rate = policy.fp_rate();
        assert_eq!(
            layout.upper_columns(),
            (-rate.log2()).ceil() as u32,
            "{name}"
        );
        if layout.upper_columns() as f64 == -rate.log2() {
            assert_eq!(layout.lower_shards(), 0, "{name}");
        }
        assert_eq!(
            layout.uses_avx512_narrow(),
            layout.uses_avx512() && layout.upper_columns() <= 8
        );
        upper_columns.push(layout.upper_columns());
        let passed = assert_every_path_is_the_reference(&bytes, &keys, &absent_keys, 1, &name);
        // Sanity: the absent keys pass at about the layout's rate.
        let expected = layout.expected_fp_rate() * absent_keys.len() as f64;
        let sigma = (expected * (1.0 - layout.expected_fp_rate())).sqrt();
        assert!(
            (passed as f64 - expected).abs() <= SIGMAS * sigma + 1.0,
            "{name}: {passed} absent keys passed, expected {expected}"
        );
    }
    // Both AVX-512 variants were exercised.
    assert!(upper_columns.iter().any(|&c| c <= 8));
    assert!(upper_columns.iter().any(|&c| c > 8));
    // The shared million-key filter, with absent keys too.
    let m = million();
    assert_every_path_is_the_reference(
        &m.bytes,
        &m.keys[..100_000],
        &absent(200_000),
        1_000,
        "1,000,000 keys",
    );
}

/// The targets at 1,000,000 keys: the measured false-positive rate
/// through `Filter` is the layout's within sampling error, the layout's rate
/// is the policy's within 1%, and the filter takes at most 7.0 bits/key.
#[test]
fn fp_rate_and_size_at_a_million_keys() {
    let m = million();
    let policy = RibbonPolicy::default();
    let layout = Ribbon64Layout::parse(&m.bytes).expect("a format 0x06 filter");
    // 1,024 shards of about 977 keys: a power of two, found by a shift.
    assert_eq!(
        layout.num_shards() as usize,
        shard_count_64(m.keys.len(), SHARD_KEYS_64, false)
    );
    assert_eq!(layout.num_shards(), 1_024);
    assert!(layout.shards_by_shift());
    // Fractional result bits: both column counts are used.
    assert!(layout.lower_shards() > 0 && layout.lower_shards() < layout.num_shards());
    let expected = layout.expected_fp_rate();
    assert!(
        (expected - policy.fp_rate()).abs() <= 0.01 * policy.fp_rate(),
        "layout {expected} vs policy {}",
        policy.fp_rate()
    );
    let decoded = Filter::decode(&m.bytes);
    let probes = 1_000_000u64;
    let hits = absent(probes)
        .into_iter()
        .filter(|&h| decoded.may_contain(h))
        .count();
    let measured = hits as f64 / probes as f64;
    let sigma = (expected * (1.0 - expected) / probes as f64).sqrt();
    assert!(
        (measured - expected).abs() <= SIGMAS * sigma,
        "measured {measured}, expected {expected} (sigma {sigma})"
    );
    let bits_per_key = m.bytes.len() as f64 * 8.0 / m.keys.len() as f64;
    assert!(bits_per_key <= 7.0, "{bits_per_key} bits/key");
}

/// Below the size at which a Ribbon filter pays off the policy builds the
/// blocked Bloom filter of its Bloom-equivalent bits per key; from there
/// on, format 0x06.
#[test]
fn small_sets_fall_back_to_bloom_and_large_ones_do_not() {
    let policy = RibbonPolicy::default();
    let threshold = fewest_ribbon_keys();
    for n in [1, threshold / 2, threshold - 1] {
        let keys = hashes(n, 3);
        let (bytes, outcome) = build(&policy, &keys);
        assert!(outcome.fell_back_to_bloom, "{n} keys: {outcome:?}");
        assert_eq!(outcome.shards, 0, "{n} keys");
        assert_eq!(bytes, BloomPolicy::new(10.0).build(&keys), "{n} keys");
        assert_eq!(Filter::decode(&bytes).format_name(), "bloom");
        assert_no_false_negatives(&bytes, &keys, &format!("{n} keys"));
    }
    for n in [threshold, 5_000, 100_000] {
        let keys = hashes(n, 3);
        let (bytes, outcome) = build(&policy, &keys);
        assert!(!outcome.fell_back_to_bloom, "{n} keys: {outcome:?}");
        assert_eq!(bytes.last(), Some(&FORMAT_RIBBON64), "{n} keys");
        assert_eq!(
            outcome.shards as usize,
            shard_count_64(n as usize, SHARD_KEYS_64, false),
            "{n} keys"
        );
        assert_eq!(Filter::decode(&bytes).format_name(), "ribbon");
        assert_every_path_is_the_reference(&bytes, &keys, &absent(2_000), 1, &format!("{n} keys"));
    }
    // No keys: a Bloom filter that rejects everything.
    let bytes = policy.build(&[]);
    let decoded = Filter::decode(&bytes);
    assert_eq!(decoded.format_name(), "bloom");
    assert!(absent(1_000).iter().all(|&h| !decoded.may_contain(h)));
}

/// Builds forced to fail: too few slots for any seed (the Bloom fallback),
/// and no overhead at all (failed seeds, retried). Either way a filter with
/// no false negative through `Filter`.
#[test]
fn forced_failures_still_give_filters_without_false_negatives() {
    let policy = RibbonPolicy::default();
    let keys = hashes(20_000, 17);
    let (bytes, outcome) = policy.build_with(
        &keys,
        BuildKnobs {
            overhead: Some(-0.05),
            ..BuildKnobs::default()
        },
    );
    assert!(outcome.fell_back_to_bloom, "{outcome:?}");
    assert_eq!(outcome.failed_seeds, MAX_SEEDS, "{outcome:?}");
    assert_eq!(bytes, BloomPolicy::new(10.0).build(&keys));
    assert_eq!(Filter::decode(&bytes).format_name(), "bloom");
    assert_no_false_negatives(&bytes, &keys, "overhead -5%");

    let (bytes, outcome) = policy.build_with(
        &keys,
        BuildKnobs {
            overhead: Some(0.0),
            ..BuildKnobs::default()
        },
    );
    assert!(outcome.failed_seeds > 0, "{outcome:?}");
    assert_no_false_negatives(&bytes, &keys, "overhead 0");
    if !outcome.fell_back_to_bloom {
        // Retried shards record the seed that solved them.
        let table = Ribbon64Table::parse(&bytes).unwrap();
        let seeds: u32 = table.shards.iter().map(|s| s.seed as u32).sum();
        assert_eq!(seeds, outcome.failed_seeds, "seed i means i failures");
        assert_every_path_is_the_reference(&bytes, &keys, &absent(5_000), 1, "overhead 0");
    }
}

/// A small filter of several shards (lower and upper ones): 3,072 keys in
/// 4 shards.
fn small_ribbon() -> (Vec<u64>, Vec<u8>) {
    let keys = hashes(3 * SHARD_KEYS_64 as u64, 21);
    let bytes = RibbonPolicy::default().build(&keys);
    let table = Ribbon64Table::parse(&bytes).expect("a format 0x06 filter");
    assert_eq!(table.shards.len(), 4);
    assert!(table.lower_shards > 0 && (table.lower_shards as usize) < table.shards.len());
    (keys, bytes)
}

/// Damaged bytes that must not be read as a filter: no layout parses, the
/// decoded filter is undecodable (an empty slice: no filter), and every key
/// may be contained, through every decoder.
fn assert_undecodable(bytes: &[u8], keys: &[u64], name: &str) {
    assert!(Ribbon64Table::parse(bytes).is_none(), "{name}");
    assert!(Ribbon64Layout::parse(bytes).is_none(), "{name}");
    let decoded = Filter::decode(bytes);
    let reason = if bytes.is_empty() {
        Unfiltered::NoFilter
    } else {
        Unfiltered::Undecodable
    };
    assert_eq!(decoded.unfiltered(), Some(reason), "{name}");
    let current: Arc<dyn FilterPolicy> = Arc::new(RibbonPolicy::default());
    let by_name = Filter::for_policy(RibbonPolicy::NAME, bytes, &current);
    assert_eq!(by_name.unfiltered(), Some(reason), "{name}");
    for &h in keys {
        assert!(decoded.may_contain(h), "{name}: Filter::decode");
        assert!(by_name.may_contain(h), "{name}: for_policy");
        assert!(filter::may_contain(bytes, h), "{name}: generic");
    }
}

#[test]
fn truncated_bytes_never_panic_nor_lose_keys() {
    let (keys, bytes) = small_ribbon();
    let probe_keys: Vec<u64> = keys.iter().step_by(61).copied().collect();
    for len in 0..bytes.len() {
        assert_undecodable(&bytes[..len], &probe_keys, &format!("length {len}"));
    }
    // A byte more in front is as inconsistent as one missing.
    let mut longer = vec![0u8];
    longer.extend_from_slice(&bytes);
    assert_undecodable(&longer, &probe_keys, "one byte more");
}

#[test]
fn every_single_bit_flip_in_the_shard_table_and_trailer_is_detected() {
    let (keys, bytes) = small_ribbon();
    let many = hashes(10 * SHARD_KEYS_64 as u64, 22);
    let many_bytes = RibbonPolicy::default().build(&many);
    for (keys, bytes) in [(keys, bytes), (many, many_bytes)] {
        let shards = Ribbon64Table::parse(&bytes).unwrap().shards.len();
        let table_start = bytes.len() - TRAILER_BYTES - shards * SHARD_ENTRY_BYTES;
        let probe_keys: Vec<u64> = keys.iter().step_by(41).copied().collect();
        for at in table_start..bytes.len() {
            for bit in 0..8 {
                let mut damaged = bytes.clone();
                damaged[at] ^= 1 << bit;
                let name = format!("{shards} shards, byte {at} bit {bit}");
                assert_undecodable(&damaged, &probe_keys, &name);
            }
        }
    }
}

#[test]
fn random_trailer_damage_never_panics_nor_loses_keys() {
    let (keys, bytes) = small_ribbon();
    let probe_keys: Vec<u64> = keys.iter().step_by(97).copied().collect();
    let shards = Ribbon64Table::parse(&bytes).unwrap().shards.len();
    let table_start = bytes.len() - TRAILER_BYTES - shards * SHARD_ENTRY_BYTES;
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut damaged_count = 0;
    for round in 0..2_000 {
        let mut damaged = bytes.clone();
        for _ in 0..rng.gen_range(1..=12) {
            let at = rng.gen_range(table_start..bytes.len());
            damaged[at] ^= 1 << rng.gen_range(0..8);
        }
        if damaged == bytes {
            continue; // the flips cancelled out
        }
        damaged_count += 1;
        assert_undecodable(&damaged, &probe_keys, &format!("round {round}"));
    }
    assert!(damaged_count > 1_000);
}

/// Flips in the solution leave a consistent filter (nothing in the filter
/// bytes covers the solution: the table's block checksum does, before the
/// filter is read), whose answers may be wrong, false negatives included.
/// Nothing may panic or read out of bounds, and every path still gives the
/// reference's answer on the damaged bytes.
#[test]
fn solution_bit_flips_never_panic() {
    let (keys, bytes) = small_ribbon();
    let table_start = Ribbon64Layout::parse(&bytes).unwrap().solution_bytes();
    let probe_keys: Vec<u64> = keys.iter().step_by(7).copied().collect();
    let absent_keys = absent(300);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for _ in 0..100 {
        let mut damaged = bytes.clone();
        for _ in 0..rng.gen_range(1..=64) {
            let at = rng.gen_range(0..table_start);
            damaged[at] ^= 1 << rng.gen_range(0..8);
        }
        let table = Ribbon64Table::parse(&damaged).expect("still consistent");
        let layout = Ribbon64Layout::parse(&damaged).expect("still consistent");
        let paths = paths_of(&layout);
        let decoded = Filter::decode(&damaged);
        assert_eq!(decoded.format_name(), "ribbon");
        for &h in probe_keys.iter().chain(&absent_keys) {
            let want = table.may_contain_reference(&damaged, h);
            assert_eq!(decoded.may_contain(h), want);
            assert_eq!(filter::may_contain(&damaged, h), want);
            for (p, l) in &paths {
                assert_eq!(l.may_contain(&damaged, h), want, "{p}");
            }
        }
    }
}

/// A table whose properties record `sievedb.Ribbon` decodes its filter from
/// the bytes, whatever the database's current policy: the same answers as
/// `Filter::decode`, every key found, and absent keys passing at about the
/// layout's rate.
#[test]
fn tables_recording_the_ribbon_name_decode_from_bytes() {
    let keys = hashes(20_000, 31);
    let bytes = RibbonPolicy::default().build(&keys);
    assert_eq!(bytes.last(), Some(&FORMAT_RIBBON64));
    let expected = Ribbon64Layout::parse(&bytes).unwrap().expected_fp_rate();
    for current in [
        Arc::new(BloomPolicy::new(10.0)) as Arc<dyn FilterPolicy>,
        Arc::new(RibbonPolicy::new(20.0)),
        Arc::new(filter::NoFilter),
    ] {
        let decoded = Filter::for_policy(RibbonPolicy::NAME, bytes.clone(), &current);
        assert_eq!(decoded.format_name(), "ribbon");
        assert!(decoded.unfiltered().is_none());
        assert_eq!(decoded.len_bytes(), bytes.len());
        assert!(format!("{decoded:?}").contains("ribbon"));
        assert!(keys.iter().all(|&h| decoded.may_contain(h)));
        let direct = Filter::decode(&bytes);
        let probes = absent(20_000);
        let mut passed = 0usize;
        for &h in &probes {
            let answer = decoded.may_contain(h);
            assert_eq!(answer, direct.may_contain(h));
            passed += usize::from(answer);
        }
        let mean = expected * probes.len() as f64;
        let sigma = (mean * (1.0 - expected)).sqrt();
        assert!(
            (passed as f64 - mean).abs() <= SIGMAS * sigma + 1.0,
            "{passed} of {} absent keys passed, expected {mean}",
            probes.len()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random key sets, with duplicates, at random rates: never a false
    /// negative through `Filter` or the generic query, and for format 0x06
    /// bytes every path is the reference.
    #[test]
    fn proptest_no_false_negatives_on_every_path(
        keys in prop::collection::vec(any::<u64>(), 0..6_000),
        dup_every in 1usize..50,
        bits in 1.0f64..40.0,
    ) {
        let mut all = keys.clone();
        all.extend(keys.iter().step_by(dup_every).copied());
        let policy = RibbonPolicy::new(bits);
        let bytes = policy.build(&all);
        let decoded = Filter::decode(&bytes);
        prop_assert!(decoded.unfiltered().is_none());
        prop_no_false_negatives(&decoded, &bytes, &all)?;
        if bytes.last() == Some(&FORMAT_RIBBON64) {
            let absent: Vec<u64> = all.iter().map(|h| h ^ 0x5555_5555_5555_5555).collect();
            assert_every_path_is_the_reference(&bytes, &all, &absent, 16, "proptest");
        }
    }
}
