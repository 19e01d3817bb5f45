//! The generic decoder: filters built by every policy read back from their
//! bytes alone; damaged or unknown bytes never panic, answer "may contain"
//! and are counted; custom policies decode by name.

#![allow(clippy::field_reassign_with_default)]

mod common;

use common::ExactSet;
use std::sync::{Arc, Mutex, MutexGuard};

use sievedb::filter::bloom::TRAILER_BYTES;
use sievedb::filter::{
    key_hash, may_contain, undecodable_filters, BloomPolicy, Filter, FilterPolicy, NoFilter,
    RibbonPolicy, Unfiltered, FORMAT_BLOOM, FORMAT_BLOOM_V1, FORMAT_BLOOM_V2, FORMAT_RIBBON,
};

/// Every built-in policy under test. Adding a policy is one line here.
fn policies() -> Vec<Arc<dyn FilterPolicy>> {
    vec![
        Arc::new(BloomPolicy::new(6.0)),
        Arc::new(BloomPolicy::new(10.0)),
        Arc::new(BloomPolicy::new(16.0)),
        Arc::new(BloomPolicy::new(1.0)),
        Arc::new(RibbonPolicy::new(10.0)),
        Arc::new(RibbonPolicy::new(16.0)),
        Arc::new(NoFilter),
    ]
}

/// `undecodable_filters()` is process-wide; tests that assert exact changes
/// of it take this lock so that they do not see each other's decodes. Tests
/// that only decode valid bytes never change it.
static COUNTER: Mutex<()> = Mutex::new(());

fn counter_lock() -> MutexGuard<'static, ()> {
    COUNTER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn hashes(tag: u64, n: u64) -> Vec<u64> {
    (0..n)
        .map(|i| key_hash(format!("key-{tag}-{i}").as_bytes()))
        .collect()
}

#[test]
fn every_policy_reads_back_through_the_generic_decoder() {
    let present = hashes(1, 5000);
    let absent = hashes(2, 20_000);
    for policy in policies() {
        let name = policy.name().to_string();
        let bytes = policy.build(&present);
        let decoded = Filter::decode(bytes.clone());
        let by_name = Filter::for_policy(&name, bytes.clone(), &policy);
        assert_eq!(decoded.len_bytes(), bytes.len());
        assert_ne!(
            decoded.unfiltered(),
            Some(Unfiltered::Undecodable),
            "{name}"
        );
        for &h in &present {
            assert!(decoded.may_contain(h), "{name}: false negative");
            assert!(by_name.may_contain(h), "{name}: false negative");
            assert!(may_contain(&bytes, h), "{name}: false negative");
            assert!(policy.may_contain(&bytes, h), "{name}: false negative");
        }
        // All readers give the policy's own answer for absent keys too.
        let mut negatives = 0;
        for &h in &absent {
            let own = policy.may_contain(&bytes, h);
            assert_eq!(decoded.may_contain(h), own, "{name}");
            assert_eq!(by_name.may_contain(h), own, "{name}");
            assert_eq!(may_contain(&bytes, h), own, "{name}");
            negatives += usize::from(!own);
        }
        if bytes.is_empty() {
            assert_eq!(decoded.unfiltered(), Some(Unfiltered::NoFilter));
            assert_eq!(decoded.format_name(), "none");
            assert_eq!(negatives, 0, "{name}");
        } else {
            assert_eq!(decoded.unfiltered(), None, "{name}");
            // A real filter rejects many absent keys (even 1 bit/key
            // rejects over a third: fp ~ 1 - 1/e).
            assert!(negatives > absent.len() / 4, "{name}: {negatives}");
        }
    }
}

#[test]
fn bloom_bytes_decode_as_bloom() {
    let bytes = BloomPolicy::default().build(&hashes(3, 100));
    assert_eq!(Filter::decode(bytes).format_name(), "bloom");
}

/// Asserts that `bytes` decode, both ways, to "may contain" for every key.
fn assert_unfiltered(bytes: &[u8], what: &str) {
    let filter = Filter::decode(bytes);
    assert_eq!(filter.unfiltered(), Some(Unfiltered::Undecodable), "{what}");
    assert_eq!(filter.format_name(), "undecodable", "{what}");
    for h in [0u64, 1, u64::MAX, 0x1234_5678_9abc_def0] {
        assert!(filter.may_contain(h), "{what}");
        assert!(may_contain(bytes, h), "{what}");
    }
}

#[test]
fn truncated_filters_may_contain_everything_and_are_counted() {
    let _guard = counter_lock();
    for policy in policies() {
        let bytes = policy.build(&hashes(4, 100));
        let before = undecodable_filters();
        let mut damaged = 0u64;
        for len in 1..bytes.len() {
            assert_unfiltered(&bytes[..len], &format!("{} cut to {len}", policy.name()));
            damaged += 1;
        }
        // Each damaged filter was decoded once by Filter::decode and once
        // per key (4) by the free function.
        assert_eq!(
            undecodable_filters() - before,
            damaged * 5,
            "{}",
            policy.name()
        );
    }
    // Empty bytes are "no filter", not damage: not counted.
    let before = undecodable_filters();
    let none = Filter::decode(Vec::new());
    assert_eq!(none.unfiltered(), Some(Unfiltered::NoFilter));
    assert!(none.may_contain(42) && may_contain(&[], 42));
    assert_eq!(undecodable_filters(), before);
}

#[test]
fn damaged_trailer_or_unknown_format_may_contain_everything_and_is_counted() {
    let _guard = counter_lock();
    let good = BloomPolicy::new(10.0).build(&hashes(5, 300));
    let n = good.len();
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    // Any change to num_lines no longer matches the length.
    for byte in n - TRAILER_BYTES..n - 2 {
        for bit in 0..8 {
            let mut b = good.clone();
            b[byte] ^= 1 << bit;
            cases.push((format!("num_lines byte {byte} bit {bit}"), b));
        }
    }
    for probes in [0u8, 31, 64, 200, 255] {
        let mut b = good.clone();
        b[n - 2] = probes;
        cases.push((format!("probes {probes}"), b));
    }
    for id in 0..=u8::MAX {
        // The three Bloom ids share one layout and trailer, so flipping one
        // into another leaves a well-formed filter (with other probes: the
        // block checksum, not the decoder, catches such damage on disk).
        if id == FORMAT_BLOOM
            || id == FORMAT_BLOOM_V2
            || id == FORMAT_BLOOM_V1
            || id == FORMAT_RIBBON
        {
            continue;
        }
        let mut b = good.clone();
        b[n - 1] = id;
        cases.push((format!("format id {id:#04x}"), b));
    }
    // Extra bytes in front of a valid trailer.
    let mut grown = vec![0xAAu8; 7];
    grown.extend_from_slice(&good);
    cases.push(("7 bytes prepended".into(), grown));
    // A trailer alone that claims lines it does not have.
    cases.push(("trailer only".into(), vec![1, 0, 0, 0, 6, FORMAT_BLOOM]));
    cases.push((
        "huge num_lines".into(),
        vec![0xff, 0xff, 0xff, 0xff, 6, FORMAT_BLOOM],
    ));
    cases.push(("single id byte".into(), vec![FORMAT_BLOOM]));

    let before = undecodable_filters();
    for (what, bytes) in &cases {
        assert_unfiltered(bytes, what);
    }
    assert_eq!(undecodable_filters() - before, cases.len() as u64 * 5);
}

#[test]
fn custom_policy_decodes_by_name() {
    let custom: Arc<dyn FilterPolicy> = Arc::new(ExactSet);
    let present = hashes(6, 200);
    let absent = hashes(7, 200);
    let bytes = custom.build(&present);
    let filter = Filter::for_policy("user.ExactSet", bytes.clone(), &custom);
    assert_eq!(filter.format_name(), "user.ExactSet");
    assert_eq!(filter.unfiltered(), None);
    assert!(present.iter().all(|&h| filter.may_contain(h)));
    // The exact set has no false positives: the custom code really ran.
    assert!(absent.iter().all(|&h| !filter.may_contain(h)));

    // A table written under a built-in policy stays readable after the
    // database switched to the custom one.
    let bloom_bytes = BloomPolicy::default().build(&present);
    let old = Filter::for_policy(BloomPolicy::NAME, bloom_bytes, &custom);
    assert_eq!(old.format_name(), "bloom");
    assert!(present.iter().all(|&h| old.may_contain(h)));
    assert!(absent.iter().filter(|&&h| !old.may_contain(h)).count() > 150);
}

#[test]
fn unknown_custom_name_may_contain_everything_and_is_counted() {
    let _guard = counter_lock();
    let custom_bytes = ExactSet.build(&hashes(8, 50));
    let current: Arc<dyn FilterPolicy> = Arc::new(BloomPolicy::default());
    let before = undecodable_filters();
    let filter = Filter::for_policy("user.ExactSet", custom_bytes, &current);
    assert_eq!(undecodable_filters() - before, 1);
    assert_eq!(filter.unfiltered(), Some(Unfiltered::Undecodable));
    assert!(hashes(9, 1000).into_iter().all(|h| filter.may_contain(h)));
}

/// Tables built by a custom policy, opened under a policy of another name,
/// read correctly but unfiltered; `Stats::undecodable_filter_tables` (and
/// the level's count) says how many, and compaction under the configured
/// policy brings it back to 0.
#[test]
fn custom_tables_under_another_policy_are_counted_until_rewritten() {
    let _counter = counter_lock(); // opening those tables moves `undecodable_filters()`
    let dir = tempfile::tempdir().unwrap();
    let mut opts = sievedb::Options::default();
    opts.background_compaction = false;
    opts.filter_policy = Arc::new(ExactSet);
    let db = sievedb::Db::open(dir.path(), opts).unwrap();
    for round in 0..2u32 {
        for i in 0..200u32 {
            db.put(format!("k{:04}", i * 2 + round), b"v").unwrap();
        }
        db.flush().unwrap();
    }
    assert_eq!(db.stats().undecodable_filter_tables, 0);
    db.close().unwrap();

    let mut opts = sievedb::Options::default();
    opts.background_compaction = false;
    let db = sievedb::Db::open(dir.path(), opts).unwrap();
    let stats = db.stats();
    assert_eq!(stats.undecodable_filter_tables, 2);
    assert_eq!(stats.levels[0].undecodable_filter_tables, 2);
    db.reset_stats();
    // Absent keys inside both tables' ranges (k0000-k0398 even, k0001-k0399
    // odd): every table costs a block.
    for i in 1..=100u32 {
        assert_eq!(db.get(format!("k{:04}x", i)).unwrap(), None);
    }
    let stats = db.stats();
    assert_eq!(stats.filter_negatives, 0);
    assert_eq!(stats.data_block_reads, 200);
    for i in 0..400u32 {
        assert!(db.get(format!("k{i:04}")).unwrap().is_some());
    }

    db.compact_all().unwrap();
    let stats = db.stats();
    assert_eq!(stats.undecodable_filter_tables, 0);
    assert!(stats
        .levels
        .iter()
        .all(|l| l.undecodable_filter_tables == 0));
    db.reset_stats();
    for i in 0..100u32 {
        assert_eq!(db.get(format!("k{:04}x", i)).unwrap(), None);
    }
    assert!(db.stats().filter_negatives > 90, "{:?}", db.stats());
}
