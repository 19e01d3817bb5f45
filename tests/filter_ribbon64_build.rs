//! Format 0x06 build (64-bit rows): no false negatives through the
//! reference query of the specification, fallbacks, the measured
//! false-positive rate against the rate the shards' columns give,
//! duplicates and deterministic bytes.

mod common;

use common::filters::{assert_fp_rate_near, hashes};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use sievedb::filter::ribbon::{
    BuildKnobs, BuildOutcome, RibbonFormat, RowPrep, SolvePath, MAX_SEEDS, MIN_SLOTS,
};
use sievedb::filter::ribbon64::{
    overhead64_for_keys, shard_count_64, Ribbon64Layout, Ribbon64Table, SHARD_KEYS_64,
};
use sievedb::filter::{
    self, FilterPolicy, RibbonPolicy, FORMAT_BLOOM, FORMAT_RIBBON, FORMAT_RIBBON64,
};

fn rows64() -> BuildKnobs {
    BuildKnobs {
        format: RibbonFormat::Rows64,
        ..BuildKnobs::default()
    }
}

fn build(keys: &[u64], knobs: BuildKnobs) -> (Vec<u8>, BuildOutcome) {
    RibbonPolicy::new(10.0).build_with(keys, knobs)
}

/// Whether `bytes` may contain `h`: the reference query for format 0x06,
/// the generic query for the Bloom fallback.
fn may_contain(bytes: &[u8], h: u64) -> bool {
    match bytes.last() {
        Some(&FORMAT_RIBBON64) => Ribbon64Table::parse(bytes)
            .expect("consistent format 0x06 bytes")
            .may_contain_reference(bytes, h),
        _ => filter::may_contain(bytes, h),
    }
}

fn assert_no_false_negatives(bytes: &[u8], keys: &[u64]) {
    if bytes.last() == Some(&FORMAT_RIBBON64) {
        let table = Ribbon64Table::parse(bytes).expect("consistent format 0x06 bytes");
        for &h in keys {
            assert!(table.may_contain_reference(bytes, h), "false negative");
        }
    } else {
        for &h in keys {
            assert!(filter::may_contain(bytes, h), "false negative (fallback)");
        }
    }
}

#[test]
fn no_false_negatives_at_every_size() {
    for n in [0u64, 1, 2, 100, 1_000, 1_100, 10_000, 1_000_000] {
        let keys = hashes(n, n);
        let (bytes, outcome) = build(&keys, rows64());
        // Ribbon from `MIN_SLOTS` slots on (1,000 keys: Bloom; 1,100 and
        // more: Ribbon).
        let slots = n as f64 * (1.0 + overhead64_for_keys(n as usize));
        let expect_ribbon = slots >= MIN_SLOTS as f64;
        assert_eq!(expect_ribbon, n >= 1_100, "{n}: {slots} slots");
        assert_eq!(
            !outcome.fell_back_to_bloom, expect_ribbon,
            "{n}: {outcome:?}"
        );
        let format = *bytes.last().unwrap();
        assert_eq!(
            format,
            if expect_ribbon {
                FORMAT_RIBBON64
            } else {
                FORMAT_BLOOM
            },
            "{n}"
        );
        if expect_ribbon {
            let table = Ribbon64Table::parse(&bytes).unwrap();
            let shards = shard_count_64(n as usize, SHARD_KEYS_64, false);
            assert!(shards.is_power_of_two(), "{n}: {shards}");
            assert_eq!(table.shards.len(), shards);
            assert_eq!(table.shards.len() as u32, outcome.shards);
            assert_eq!(table.upper_columns, 7);
        }
        assert_no_false_negatives(&bytes, &keys);
    }
}

/// The policy builds format 0x06 by default: `build` writes the bytes of
/// the 0x06 knobs; format 0x05 is still built when asked for.
#[test]
fn default_knobs_build_format_0x06() {
    assert_eq!(BuildKnobs::default().format, RibbonFormat::Rows64);
    let keys = hashes(20_000, 3);
    let policy = RibbonPolicy::new(10.0);
    let bytes = policy.build(&keys);
    assert_eq!(bytes.last(), Some(&FORMAT_RIBBON64));
    assert!(bytes == build(&keys, rows64()).0);
    let (old, outcome) = policy.build_with(
        &keys,
        BuildKnobs {
            format: RibbonFormat::Rows128,
            ..BuildKnobs::default()
        },
    );
    assert!(!outcome.fell_back_to_bloom, "{outcome:?}");
    assert_eq!(old.last(), Some(&FORMAT_RIBBON));
}

#[test]
fn bits_per_key_at_a_million_keys() {
    let keys = hashes(1_000_000, 11);
    let (bytes, outcome) = build(&keys, rows64());
    assert!(!outcome.fell_back_to_bloom);
    let bits = bytes.len() as f64 * 8.0 / keys.len() as f64;
    assert!(bits <= 6.96, "{bits} bits/key");
}

#[test]
fn measured_false_positive_rate_matches_the_columns() {
    let n = 1_000_000u64;
    let keys = hashes(n, 0);
    let policy = RibbonPolicy::new(10.0);
    let (bytes, _) = policy.build_with(&keys, rows64());
    let table = Ribbon64Table::parse(&bytes).unwrap();
    // An absent key lands in shard i with probability 1 / num_shards and
    // then matches with probability 2^-columns(i).
    let shards = table.shards.len();
    let expected = (0..shards)
        .map(|i| 0.5f64.powi(table.columns(i) as i32))
        .sum::<f64>()
        / shards as f64;
    // The shards' column mix is rounded to whole shards: close to the
    // policy's rate.
    assert!(
        (expected - policy.fp_rate()).abs() < 0.01 * policy.fp_rate(),
        "{expected} vs {}",
        policy.fp_rate()
    );
    let probes = 1_000_000u64;
    let absent = hashes(probes, 1 << 50);
    let hits = absent
        .iter()
        .filter(|&&h| table.may_contain_reference(&bytes, h))
        .count();
    assert_fp_rate_near(hits, probes, expected);
}

#[test]
fn forced_failures_still_give_a_correct_filter() {
    let keys = hashes(5_000, 77);
    // Fewer slots than keys: every seed fails, the first shard exhausts
    // them and the build falls back to Bloom.
    let (bytes, outcome) = build(
        &keys,
        BuildKnobs {
            overhead: Some(-0.05),
            ..rows64()
        },
    );
    assert!(outcome.fell_back_to_bloom, "{outcome:?}");
    assert_eq!(outcome.failed_seeds, MAX_SEEDS);
    assert_eq!(bytes.last(), Some(&FORMAT_BLOOM));
    assert_no_false_negatives(&bytes, &keys);
    // No overhead at all: many seeds fail, some shards may still solve.
    let (bytes, outcome) = build(
        &keys,
        BuildKnobs {
            overhead: Some(0.0),
            max_seeds: 8,
            ..rows64()
        },
    );
    assert!(outcome.failed_seeds > 0, "{outcome:?}");
    assert_no_false_negatives(&bytes, &keys);
    // Tight: retries that succeed (about one seed in four fails at 0.5%
    // overhead; 20 shards).
    let many = hashes(20_000, 78);
    let (bytes, outcome) = build(
        &many,
        BuildKnobs {
            overhead: Some(0.005),
            ..rows64()
        },
    );
    assert!(
        !outcome.fell_back_to_bloom && outcome.failed_seeds > 0,
        "{outcome:?}"
    );
    assert_no_false_negatives(&bytes, &many);
    // No seeds to try, and absurd overheads.
    for overhead in [f64::NAN, f64::INFINITY, -1e9, 1e9] {
        let (bytes, _) = build(
            &keys,
            BuildKnobs {
                overhead: Some(overhead),
                ..rows64()
            },
        );
        assert_no_false_negatives(&bytes, &keys);
    }
    let (bytes, outcome) = build(
        &keys,
        BuildKnobs {
            max_seeds: 0,
            ..rows64()
        },
    );
    assert!(outcome.fell_back_to_bloom);
    assert_no_false_negatives(&bytes, &keys);
}

#[test]
fn duplicate_hashes_are_harmless() {
    let unique = hashes(30_000, 5);
    let mut keys = unique.clone();
    keys.extend_from_slice(&unique[..10_000]);
    keys.extend_from_slice(&unique[..10_000]);
    let (bytes, outcome) = build(&keys, rows64());
    assert!(!outcome.fell_back_to_bloom, "{outcome:?}");
    assert_no_false_negatives(&bytes, &unique);
    // All the same key: every copy lands in one shard, far more keys than
    // its 65,535 slots, all redundant.
    for copies in [5_000, 300_000] {
        let same = vec![unique[0]; copies];
        let (bytes, outcome) = build(&same, rows64());
        assert!(!outcome.fell_back_to_bloom, "{outcome:?}");
        assert_no_false_negatives(&bytes, &same);
    }
}

#[test]
fn bytes_are_deterministic_across_lanes_and_solvers() {
    let keys = hashes(50_000, 9);
    let (first, _) = build(&keys, rows64());
    assert_eq!(first.last(), Some(&FORMAT_RIBBON64));
    for lanes_64 in 1..=4 {
        for solve_path in [SolvePath::Fastest, SolvePath::Scalar, SolvePath::Portable] {
            for (band_baseline, rows) in [
                (false, RowPrep::Detect),
                (true, RowPrep::Detect),
                (false, RowPrep::OneAtATime),
                (false, RowPrep::EightAtATime),
            ] {
                let (bytes, _) = build(
                    &keys,
                    BuildKnobs {
                        lanes_64,
                        solve_path,
                        band_baseline,
                        rows,
                        ..rows64()
                    },
                );
                assert!(
                    bytes == first,
                    "{lanes_64} lanes, {solve_path:?}, baseline band {band_baseline}, rows {rows:?}"
                );
            }
        }
    }
    // Many failed seeds, shards of very different lengths and failing
    // lanes: still the same bytes whatever the lanes.
    let tight = BuildKnobs {
        overhead: Some(0.005),
        shard_keys_64: 300,
        ..rows64()
    };
    let (first, outcome) = build(&keys, tight);
    assert!(outcome.failed_seeds > 0);
    for lanes_64 in 1..=4 {
        for (band_baseline, rows) in [
            (false, RowPrep::Detect),
            (true, RowPrep::Detect),
            (false, RowPrep::OneAtATime),
            (false, RowPrep::EightAtATime),
        ] {
            let knobs = BuildKnobs {
                lanes_64,
                band_baseline,
                rows,
                ..tight
            };
            let (bytes, _) = build(&keys, knobs);
            assert!(
                bytes == first,
                "{lanes_64} lanes, tight, baseline band {band_baseline}, rows {rows:?}"
            );
        }
    }
}

#[test]
fn every_rate_and_shard_size_builds_correct_filters() {
    let keys = hashes(20_000, 21);
    for bits in [1.0, 2.0, 3.5, 10.0, 16.0, 30.0, 100.0] {
        for shard_keys_64 in [1, 64, 700, 5_000, usize::MAX] {
            let knobs = BuildKnobs {
                shard_keys_64,
                ..rows64()
            };
            let (bytes, _) = RibbonPolicy::new(bits).build_with(&keys, knobs);
            assert_no_false_negatives(&bytes, &keys);
        }
    }
    let (bytes, outcome) = RibbonPolicy::with_fp_rate(1e-12)
        .unwrap()
        .build_with(&keys, rows64());
    assert!(!outcome.fell_back_to_bloom);
    assert_eq!(Ribbon64Table::parse(&bytes).unwrap().upper_columns, 32);
    assert_no_false_negatives(&bytes, &keys);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn no_false_negatives_for_random_small_sets(
        seed in any::<u64>(),
        n in 0usize..4_000,
        duplicates in 0usize..200,
        shard_keys_64 in 1usize..3_000,
        bits in 1.0f64..40.0,
    ) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut keys: Vec<u64> = (0..n).map(|_| rng.gen()).collect();
        for _ in 0..duplicates.min(n) {
            let k = keys[rng.gen_range(0..n)];
            keys.push(k);
        }
        let knobs = BuildKnobs { shard_keys_64, ..rows64() };
        let (bytes, _) = RibbonPolicy::new(bits).build_with(&keys, knobs);
        for &h in &keys {
            prop_assert!(may_contain(&bytes, h));
        }
    }
}

/// `fastrange64(h, n)`: the shard of key hash `h` among `n` shards.
fn shard_of(h: u64, n: u64) -> u64 {
    ((h as u128 * n as u128) >> 64) as u64
}

/// `count` distinct random key hashes whose shard among `num_shards` is
/// accepted by `keep`.
fn hashes_in_shards(
    seed: u64,
    count: usize,
    num_shards: u64,
    keep: impl Fn(u64) -> bool,
) -> Vec<u64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let h: u64 = rng.gen();
        if keep(shard_of(h, num_shards)) && seen.insert(h) {
            out.push(h);
        }
    }
    out
}

/// Every query path of built format 0x06 bytes (decoded filter, layout,
/// each named path) answers as the reference, and no built key is absent.
fn assert_paths_agree(bytes: &[u8], keys: &[u64], absent: &[u64]) {
    assert_no_false_negatives(bytes, keys);
    if bytes.last() != Some(&FORMAT_RIBBON64) {
        return;
    }
    let table = Ribbon64Table::parse(bytes).unwrap();
    let layout = Ribbon64Layout::parse(bytes).unwrap();
    let decoded = filter::Filter::decode(bytes);
    let paths: Vec<Ribbon64Layout> = Ribbon64Layout::PATHS
        .iter()
        .filter_map(|&p| layout.clone().on_path(p))
        .collect();
    for &h in keys.iter().chain(absent) {
        let want = table.may_contain_reference(bytes, h);
        assert_eq!(decoded.may_contain(h), want);
        for l in &paths {
            assert_eq!(l.may_contain(bytes, h), want);
        }
    }
}

/// Adversarial key sets for the shard partition: every key in one shard
/// (far more keys than the 65,535 slots a shard may have: every seed
/// fails, Bloom fallback), a shard filled up to the slot cap, and shards
/// that get no key at all (64 zero slots, seed 0). No panic, no false
/// negative, every query path as the reference. Both with the exact shard
/// count (`fastrange64` queries) and the default power of two (queries by
/// a shift).
#[test]
fn adversarial_shard_partitions() {
    let absent: Vec<u64> = {
        let mut rng = rand::rngs::StdRng::seed_from_u64(99);
        (0..20_000).map(|_| rng.gen()).collect()
    };
    for exact in [true, false] {
        let knobs = BuildKnobs {
            exact_shard_count_64: exact,
            ..rows64()
        };
        let shards_for = |n: usize| shard_count_64(n, SHARD_KEYS_64, exact) as u64;
        // 100,000 distinct keys, all in shard 0 (of 98, or 128): more rows
        // than slots.
        let n = 100_000usize;
        let keys = hashes_in_shards(1, n, shards_for(n), |s| s == 0);
        let (bytes, outcome) = build(
            &keys,
            BuildKnobs {
                max_seeds: 8,
                ..knobs
            },
        );
        assert!(outcome.fell_back_to_bloom, "{outcome:?}");
        assert_eq!(outcome.failed_seeds, 8, "{outcome:?}");
        assert_paths_agree(&bytes, &keys, &absent);

        // 64,000 distinct keys in shard 40 (of 63, or 64): its slots clamp
        // to 65,535 (2.4% overhead, every seed fails at that shard size:
        // Bloom), every other shard is empty.
        let n = 64_000usize;
        let keys = hashes_in_shards(2, n, shards_for(n), |s| s == 40);
        let (bytes, _) = build(&keys, knobs);
        assert_paths_agree(&bytes, &keys, &absent);
        // 40,000 distinct keys, each twice, in shard 50 (of 79, or 64):
        // clamped to 65,535 slots for 40,000 independent rows, which
        // solve. The largest shard, back-substituted across its region's
        // blocks.
        let shards = shards_for(80_000);
        assert_eq!(shards, if exact { 79 } else { 64 });
        let distinct = hashes_in_shards(4, 40_000, shards, |s| s == 50);
        let mut keys = distinct.clone();
        keys.extend_from_slice(&distinct);
        let (bytes, outcome) = build(&keys, knobs);
        assert!(!outcome.fell_back_to_bloom, "{outcome:?}");
        let table = Ribbon64Table::parse(&bytes).unwrap();
        assert_eq!(table.shards.len() as u64, shards);
        for (i, s) in table.shards.iter().enumerate() {
            let want = if i == 50 { u16::MAX } else { 64 };
            assert_eq!(s.num_slots, want, "shard {i}");
        }
        assert_paths_agree(&bytes, &keys, &absent);

        // Keys in odd shards only (of 10, or 8): the even ones (lower and
        // upper) are empty.
        for bits in [10.0, 13.0] {
            let n = 10 * SHARD_KEYS_64;
            let shards = shards_for(n);
            let keys = hashes_in_shards(3, n, shards, |s| s % 2 == 1);
            let (bytes, outcome) = RibbonPolicy::new(bits).build_with(&keys, knobs);
            assert!(!outcome.fell_back_to_bloom, "{outcome:?}");
            let table = Ribbon64Table::parse(&bytes).unwrap();
            assert_eq!(table.shards.len() as u64, shards);
            for (i, s) in table.shards.iter().enumerate().step_by(2) {
                assert_eq!((s.num_slots, s.seed), (64, 0), "shard {i}");
            }
            assert_paths_agree(&bytes, &keys, &absent);
            // An empty shard's slots are all zero: a key there passes only
            // if its low result bits are zero.
            let passed = absent
                .iter()
                .filter(|&&h| shard_of(h, shards).is_multiple_of(2))
                .filter(|&&h| table.may_contain_reference(&bytes, h))
                .count();
            assert!(passed < absent.len() / 50, "{passed}");
        }
    }
}

/// The shard count: the power of two nearest `ceil(keys / 1,024)` on a log
/// scale by default (so the queries find a shard by a shift), exactly that
/// with the knob; the layout knows which form its queries take.
#[test]
fn shard_counts_are_powers_of_two_unless_asked_for_exact() {
    for (n, want) in [
        (0usize, 1usize),
        (1, 1),
        (1_024, 1),
        (1_025, 2),
        (3_000, 4),     // 3: nearer 4 than 2
        (5_121, 8),     // 6: 6 / 4 > 8 / 6
        (10_000, 8),    // 10: 10 / 8 < 16 / 10
        (100_000, 128), // 98
        (700_000, 512), // 684
        (1_000_000, 1_024),
    ] {
        let got = shard_count_64(n, SHARD_KEYS_64, false);
        let exact = shard_count_64(n, SHARD_KEYS_64, true);
        assert_eq!(got, want, "{n}");
        assert_eq!(exact, n.div_ceil(SHARD_KEYS_64).max(1), "{n}");
        // Nearest on a log scale: within a factor sqrt(2) of the exact
        // count.
        let ratio = got as f64 / exact as f64;
        assert!(
            (0.5f64.sqrt()..=2f64.sqrt()).contains(&ratio),
            "{n}: {got} for {exact}"
        );
    }
    // A shard of at most 60,000 keys on average whatever the rounding.
    assert_eq!(shard_count_64(90_000, 60_000, false), 2);
    for n in [10_000u64, 1_000_000] {
        let keys = hashes(n, 5);
        for exact in [true, false] {
            let knobs = BuildKnobs {
                exact_shard_count_64: exact,
                ..rows64()
            };
            let (bytes, outcome) = build(&keys, knobs);
            let layout = Ribbon64Layout::parse(&bytes).unwrap();
            let count = shard_count_64(n as usize, SHARD_KEYS_64, exact);
            assert_eq!(layout.num_shards() as usize, count, "{n}");
            assert_eq!(outcome.shards as usize, count, "{n}");
            assert_eq!(
                layout.shards_by_shift(),
                count.is_power_of_two() && count > 1
            );
            assert_paths_agree(&bytes, &keys[..10_000], &hashes(10_000, 6));
        }
    }
}

/// A build reuses the bands its thread's previous build left (different
/// key counts, shard sizes and strides in turn, including bands too large
/// to keep): its bytes must be those of a build on a fresh thread.
#[test]
fn builds_on_one_thread_give_the_bytes_of_fresh_threads() {
    let cases: Vec<(u64, usize)> = vec![
        (10_000, SHARD_KEYS_64),
        (300, SHARD_KEYS_64),
        (60_000, 40_000),
        (10_000, SHARD_KEYS_64),
        (5_000, 700),
        (20_000, 3_000),
        (300, SHARD_KEYS_64),
    ];
    let knobs = |shard_keys_64| BuildKnobs {
        shard_keys_64,
        ..rows64()
    };
    let in_turn: Vec<Vec<u8>> = cases
        .iter()
        .map(|&(n, shard_keys)| build(&hashes(n, n), knobs(shard_keys)).0)
        .collect();
    for (i, &(n, shard_keys)) in cases.iter().enumerate() {
        let fresh = std::thread::spawn(move || build(&hashes(n, n), knobs(shard_keys)).0)
            .join()
            .expect("build thread");
        assert!(
            fresh == in_turn[i],
            "case {i}: {n} keys, shards of {shard_keys}"
        );
        if n >= 1_000 {
            assert_eq!(fresh.last(), Some(&FORMAT_RIBBON64), "case {i}");
        }
    }
}

/// Environment variable that makes
/// `builds_in_a_thread_local_destructor` run its builds (in a child
/// process: a panic in a thread-local destructor aborts the process).
const TLS_DESTRUCTOR_CHILD: &str = "SIEVEDB_TEST_BUILD_IN_TLS_DESTRUCTOR";

/// A build from another thread-local's destructor, after the thread's
/// spare bands may already be gone, must build the usual bytes and not
/// panic (which aborts the process there). Two destructors, one
/// registered before the spare bands and one after, so that one of them
/// runs after the spare bands' whatever the platform's destructor order.
#[test]
fn builds_in_a_thread_local_destructor() {
    fn keys() -> Vec<u64> {
        hashes(5_000, 91)
    }
    struct BuildOnDrop(Vec<u8>);
    impl Drop for BuildOnDrop {
        fn drop(&mut self) {
            let (bytes, _) = build(&keys(), rows64());
            assert!(bytes == self.0, "bytes built in a destructor differ");
            eprintln!("built in a thread-local destructor");
        }
    }
    thread_local! {
        static BEFORE: std::cell::RefCell<Option<BuildOnDrop>> =
            const { std::cell::RefCell::new(None) };
        static AFTER: std::cell::RefCell<Option<BuildOnDrop>> =
            const { std::cell::RefCell::new(None) };
    }
    let expected = build(&keys(), rows64()).0;
    assert_eq!(expected.last(), Some(&FORMAT_RIBBON64));
    if std::env::var_os(TLS_DESTRUCTOR_CHILD).is_some() {
        std::thread::spawn(move || {
            BEFORE.with(|b| *b.borrow_mut() = Some(BuildOnDrop(expected.clone())));
            // Takes the spare bands (registering their destructor).
            assert!(build(&keys(), rows64()).0 == expected);
            AFTER.with(|b| *b.borrow_mut() = Some(BuildOnDrop(expected)));
        })
        .join()
        .expect("build thread");
        return;
    }
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "builds_in_a_thread_local_destructor",
            "--nocapture",
        ])
        .env(TLS_DESTRUCTOR_CHILD, "1")
        .output()
        .expect("child test process");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "child failed: {stderr}");
    assert_eq!(
        stderr.matches("built in a thread-local destructor").count(),
        2,
        "{stderr}"
    );
}
