//! `Filter::may_contain_batch`: the same answers as `Filter::may_contain`,
//! key by key, for every kind of filter and batch size, and a typed error
//! (nothing written, no panic) when the answer slice does not match the
//! input.

mod common;

use common::ExactSet;
use std::sync::Arc;

use sievedb::filter::bloom::build_v1;
use sievedb::filter::ribbon::{BuildKnobs, RibbonFormat};
use sievedb::filter::{
    key_hash, BloomPolicy, Filter, FilterPolicy, NoFilter, RibbonPolicy, Unfiltered,
    BATCH_PREFETCH_DISTANCE, FORMAT_BLOOM, FORMAT_BLOOM_V1, FORMAT_BLOOM_V2, FORMAT_RIBBON,
    FORMAT_RIBBON_V3,
};
use sievedb::Error;

fn hashes(tag: u64, n: u64) -> Vec<u64> {
    (0..n)
        .map(|i| key_hash(format!("batch-{tag}-{i}").as_bytes()))
        .collect()
}

/// Present and absent hashes interleaved, so a batch mixes both answers.
fn mixed(present: &[u64], absent: &[u64]) -> Vec<u64> {
    present
        .iter()
        .zip(absent)
        .flat_map(|(&p, &a)| [p, a])
        .collect()
}

/// Asserts that the batch answers of `filter` over `input` are its single
/// answers, whatever `out` held before.
fn assert_batch_matches(filter: &Filter, input: &[u64], what: &str) {
    let single: Vec<bool> = input.iter().map(|&h| filter.may_contain(h)).collect();
    for fill in [false, true] {
        let mut out = vec![fill; input.len()];
        filter
            .may_contain_batch(input, &mut out)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            out == single,
            "{what}: batch answers differ (out filled {fill})"
        );
    }
}

/// Every batch length from 0 to past the prefetch distance, at several
/// offsets, plus the whole input.
fn assert_batches_match(filter: &Filter, input: &[u64], what: &str) {
    for len in 0..=(3 * BATCH_PREFETCH_DISTANCE).min(input.len()) {
        for start in [0, 1, input.len() - len] {
            if start + len <= input.len() {
                let batch = &input[start..start + len];
                assert_batch_matches(filter, batch, &format!("{what}, [{start}..+{len}]"));
            }
        }
    }
    assert_batch_matches(filter, input, &format!("{what}, all {}", input.len()));
}

/// Filters of every built-in kind over `present`, with a name each: Bloom
/// at several probe counts and in both formats (on every query path this
/// CPU runs), Ribbon, no filter.
fn builtin_filters(present: &[u64]) -> Vec<(String, Filter)> {
    let mut filters = Vec::new();
    let mut blooms = Vec::new();
    for bits in [1.0, 6.0, 10.0, 16.0, 40.0] {
        blooms.push((
            format!("bloom {bits} bits/key"),
            BloomPolicy::new(bits).build(present),
        ));
    }
    blooms.push(("bloom v1 10 bits/key".into(), build_v1(present, 10.0)));
    blooms.push(("bloom v1 40 bits/key".into(), build_v1(present, 40.0)));
    for (name, bytes) in blooms {
        let filter = Filter::decode(&bytes);
        assert_eq!(filter.format_name(), "bloom", "{name}");
        for path in ["portable", "avx2", "avx512"] {
            if let Some(on_path) = filter.clone().with_bloom_path(path) {
                filters.push((format!("{name} on {path}"), on_path));
            }
        }
        filters.push((name, filter));
    }
    for bits in [7.0, 10.0, 16.0] {
        // (Over very few keys the Ribbon policy may write another format.)
        // The policy builds format 0x06; format 0x05 is still read, and
        // built when asked for.
        let policy = RibbonPolicy::new(bits);
        let rows128 = BuildKnobs {
            format: RibbonFormat::Rows128,
            ..BuildKnobs::default()
        };
        for (format, bytes) in [
            ("0x06", policy.build(present)),
            ("0x05", policy.build_with(present, rows128).0),
        ] {
            let filter = Filter::decode(bytes);
            let name = format!("ribbon {format} {bits} bits/key ({})", filter.format_name());
            filters.push((name, filter));
        }
    }
    let none = Filter::decode(NoFilter.build(present));
    assert_eq!(none.unfiltered(), Some(Unfiltered::NoFilter));
    filters.push(("no filter".into(), none));
    filters
}

#[test]
fn batch_answers_equal_single_answers_for_every_builtin_filter() {
    let present = hashes(1, 3_000);
    let absent = hashes(2, 3_000);
    let input = mixed(&present, &absent);
    let filters = builtin_filters(&present);
    assert!(filters.iter().any(|(_, f)| f.format_name() == "ribbon"));
    for (name, filter) in filters {
        assert_batches_match(&filter, &input, &name);
        // No false negative through the batch either.
        let mut out = vec![false; present.len()];
        filter.may_contain_batch(&present, &mut out).unwrap();
        assert!(out.iter().all(|&a| a), "{name}: false negative");
    }
}

#[test]
fn batch_answers_equal_single_answers_for_undecodable_bytes() {
    let present = hashes(3, 500);
    let input = mixed(&present, &hashes(4, 500));
    for last in [
        FORMAT_BLOOM,
        FORMAT_BLOOM_V2,
        FORMAT_BLOOM_V1,
        FORMAT_RIBBON,
        FORMAT_RIBBON_V3,
        0xee,
    ] {
        let bytes = vec![0x5a, 0x00, 0x01, last];
        let filter = Filter::decode(bytes);
        assert_eq!(filter.unfiltered(), Some(Unfiltered::Undecodable));
        assert_batches_match(&filter, &input, &format!("undecodable, id {last:#x}"));
        let mut out = vec![false; input.len()];
        filter.may_contain_batch(&input, &mut out).unwrap();
        assert!(out.iter().all(|&a| a));
    }
}

#[test]
fn batch_answers_equal_single_answers_for_a_custom_policy() {
    let custom: Arc<dyn FilterPolicy> = Arc::new(ExactSet);
    let present = hashes(5, 300);
    let absent = hashes(6, 300);
    let filter = Filter::for_policy("user.ExactSet", custom.build(&present), &custom);
    assert_eq!(filter.format_name(), "user.ExactSet");
    let input = mixed(&present, &absent);
    assert_batches_match(&filter, &input, "custom");
    let mut out = vec![false; input.len()];
    filter.may_contain_batch(&input, &mut out).unwrap();
    // Exact: present at even positions, absent at odd ones.
    for (i, &answer) in out.iter().enumerate() {
        assert_eq!(answer, i % 2 == 0, "custom, position {i}");
    }
}

#[test]
fn batch_of_filters_built_from_no_keys() {
    let input = hashes(7, 100);
    let filters = [
        ("bloom", Filter::decode(BloomPolicy::new(10.0).build(&[]))),
        ("bloom v1", Filter::decode(build_v1(&[], 10.0))),
        ("ribbon", Filter::decode(RibbonPolicy::new(10.0).build(&[]))),
        ("empty bytes", Filter::decode(Vec::new())),
    ];
    for (name, filter) in filters {
        assert_batches_match(&filter, &input, name);
    }
    // A Bloom filter of no keys has no lines and rejects everything.
    let bloom = Filter::decode(BloomPolicy::new(10.0).build(&[]));
    assert_eq!(bloom.format_name(), "bloom");
    let mut out = vec![true; input.len()];
    bloom.may_contain_batch(&input, &mut out).unwrap();
    assert!(out.iter().all(|&a| !a));
}

#[test]
fn empty_input_and_one_key() {
    let present = hashes(8, 1);
    let absent = hashes(9, 1);
    for (name, filter) in builtin_filters(&present) {
        let mut out: Vec<bool> = Vec::new();
        filter.may_contain_batch(&[], &mut out).unwrap();
        assert!(out.is_empty());
        for h in [present[0], absent[0]] {
            let mut out = [!filter.may_contain(h)];
            filter.may_contain_batch(&[h], &mut out).unwrap();
            assert_eq!(out[0], filter.may_contain(h), "{name}");
        }
        let mut out = [false];
        filter.may_contain_batch(&present, &mut out).unwrap();
        assert!(out[0], "{name}: false negative");
    }
}

#[test]
fn a_million_keys_in_one_batch() {
    const N: u64 = 1_000_000;
    let present = hashes(10, N);
    let absent = hashes(11, N);
    let filters = [
        (
            "bloom",
            Filter::decode(BloomPolicy::new(10.0).build(&present)),
        ),
        ("bloom v1", Filter::decode(build_v1(&present, 10.0))),
        (
            "ribbon",
            Filter::decode(RibbonPolicy::new(10.0).build(&present)),
        ),
    ];
    let mut out = vec![false; N as usize];
    for (name, filter) in filters {
        filter.may_contain_batch(&present, &mut out).unwrap();
        assert!(out.iter().all(|&a| a), "{name}: false negative");
        filter.may_contain_batch(&absent, &mut out).unwrap();
        for (i, (&h, &answer)) in absent.iter().zip(&out).enumerate() {
            assert_eq!(answer, filter.may_contain(h), "{name}, absent hash {i}");
        }
        let false_positives = out.iter().filter(|&&a| a).count();
        assert!(
            false_positives < N as usize / 50,
            "{name}: {false_positives}"
        );
    }
}

#[test]
fn mismatched_lengths_are_an_invalid_argument_and_write_nothing() {
    let present = hashes(12, 1_000);
    let input = hashes(13, 100);
    let mut filters = builtin_filters(&present);
    let custom: Arc<dyn FilterPolicy> = Arc::new(ExactSet);
    filters.push((
        "custom".into(),
        Filter::for_policy("user.ExactSet", custom.build(&present), &custom),
    ));
    for (name, filter) in filters {
        for (input_len, out_len) in [(100, 99), (100, 0), (99, 100), (0, 1), (1, 0), (10, 64)] {
            for fill in [false, true] {
                let mut out = vec![fill; out_len];
                let err = filter
                    .may_contain_batch(&input[..input_len], &mut out)
                    .expect_err("mismatched lengths");
                assert!(
                    matches!(err, Error::InvalidArgument(_)),
                    "{name}: {input_len} hashes, {out_len} slots: {err:?}"
                );
                assert!(
                    out.iter().all(|&a| a == fill),
                    "{name}: {input_len} hashes, {out_len} slots: out written"
                );
            }
        }
    }
}
