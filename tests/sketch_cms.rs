//! Count-min sketch and heavy hitters: the upper-bound guarantee, the
//! epsilon*N bound, conservative update, aging, merging, serialization and
//! finding the top keys of a Zipf stream.

#[path = "support/streams.rs"]
mod streams;

use proptest::prelude::*;
use sievedb::filter::key_hash;
use sievedb::sketch::{CountMinSketch, HeavyHitters, UpdateMode};
use sievedb::Error;
use streams::{rank_key, zipf_stream};

/// Zipf(1.1) over 20,000 keys, 200,000 events: (stream of ranks, true counts).
fn small_zipf() -> (Vec<u32>, Vec<u64>) {
    zipf_stream(20_000, 1.1, 200_000, 7)
}

fn feed(sketch: &mut CountMinSketch, stream: &[u32]) {
    for &rank in stream {
        sketch.add(&rank_key(rank as usize), 1);
    }
}

/// Per key: estimate minus true count (asserting it is never negative).
fn overcounts(sketch: &CountMinSketch, counts: &[u64]) -> Vec<u64> {
    counts
        .iter()
        .enumerate()
        .map(|(rank, &truth)| {
            let estimate = sketch.estimate(&rank_key(rank));
            assert!(
                estimate >= truth,
                "rank {rank}: estimate {estimate} < true {truth}"
            );
            estimate - truth
        })
        .collect()
}

#[test]
fn never_underestimates_in_either_mode() {
    let (stream, counts) = small_zipf();
    for mode in [UpdateMode::Plain, UpdateMode::Conservative] {
        let mut sketch = CountMinSketch::with_error(0.001, 0.01)
            .unwrap()
            .with_mode(mode);
        feed(&mut sketch, &stream);
        overcounts(&sketch, &counts);
        assert_eq!(sketch.total(), stream.len() as u64);
    }
    // Weighted additions too.
    let mut sketch = CountMinSketch::new(64, 4).unwrap();
    for i in 0..1_000u64 {
        sketch.add(&i.to_le_bytes(), i % 17 + 1);
    }
    for i in 0..1_000u64 {
        assert!(sketch.estimate(&i.to_le_bytes()) > i % 17);
    }
}

#[test]
fn epsilon_n_bound_holds_for_at_least_one_minus_delta_of_queries() {
    let (stream, counts) = small_zipf();
    let (epsilon, delta) = (0.01, 0.05);
    for mode in [UpdateMode::Plain, UpdateMode::Conservative] {
        let mut sketch = CountMinSketch::with_error(epsilon, delta)
            .unwrap()
            .with_mode(mode);
        assert_eq!((sketch.width(), sketch.depth()), (272, 3));
        feed(&mut sketch, &stream);
        let bound = epsilon * stream.len() as f64;
        let over = overcounts(&sketch, &counts);
        let violations = over.iter().filter(|&&o| o as f64 > bound).count();
        let rate = violations as f64 / counts.len() as f64;
        eprintln!(
            "{mode:?}: {violations} of {} queries over eps*N",
            counts.len()
        );
        assert!(rate <= delta, "{mode:?}: {rate} of queries exceed eps*N");
    }
}

#[test]
fn conservative_update_lowers_the_mean_overcount_on_a_zipf_stream() {
    let (stream, counts) = small_zipf();
    let mean_overcount = |mode| {
        let mut sketch = CountMinSketch::new(2_000, 4).unwrap().with_mode(mode);
        feed(&mut sketch, &stream);
        let over = overcounts(&sketch, &counts);
        over.iter().sum::<u64>() as f64 / over.len() as f64
    };
    let plain = mean_overcount(UpdateMode::Plain);
    let conservative = mean_overcount(UpdateMode::Conservative);
    eprintln!("mean overcount: plain {plain:.2}, conservative {conservative:.2}");
    assert!(
        conservative < 0.75 * plain,
        "conservative {conservative} vs plain {plain}"
    );
}

#[test]
fn aging_halves_every_counter_each_period() {
    let (stream, counts) = small_zipf();
    let period = 1_000u64;
    let mut aged = CountMinSketch::new(500, 4)
        .unwrap()
        .with_aging(Some(period))
        .unwrap();
    let mut unaged = CountMinSketch::new(500, 4).unwrap();
    let probe_keys: Vec<Vec<u8>> = (0..200).map(rank_key).collect();
    for &rank in &stream[..period as usize - 1] {
        aged.add(&rank_key(rank as usize), 1);
        unaged.add(&rank_key(rank as usize), 1);
    }
    // Up to the period, aging changes nothing.
    for key in &probe_keys {
        assert_eq!(aged.estimate(key), unaged.estimate(key));
    }
    let last = rank_key(stream[period as usize - 1] as usize);
    aged.add(&last, 1);
    unaged.add(&last, 1);
    for key in &probe_keys {
        assert_eq!(aged.estimate(key), unaged.estimate(key) / 2, "{key:?}");
    }
    assert_eq!(aged.total(), period / 2);
    // Over many periods the estimate stays above the aged true count.
    let mut aged_truth = vec![0u64; counts.len()];
    let mut sketch = CountMinSketch::with_error(0.001, 0.01)
        .unwrap()
        .with_aging(Some(period))
        .unwrap();
    for (i, &rank) in stream.iter().enumerate() {
        sketch.add(&rank_key(rank as usize), 1);
        aged_truth[rank as usize] += 1;
        if (i as u64 + 1).is_multiple_of(period) {
            aged_truth.iter_mut().for_each(|c| *c /= 2);
        }
    }
    overcounts(&sketch, &aged_truth);
    // Aged counts follow recent traffic: the top key's estimate is bounded
    // by about twice one period's worth of events.
    assert!(sketch.estimate(&rank_key(0)) < 2 * period);
}

#[test]
fn merge_equals_the_sketch_of_the_concatenated_stream() {
    let (stream, _) = small_zipf();
    let (first, second) = stream.split_at(stream.len() / 3);
    let make = || {
        CountMinSketch::with_error(0.005, 0.01)
            .unwrap()
            .with_seed(42)
            .unwrap()
    };
    let mut whole = make();
    feed(&mut whole, &stream);
    let mut a = make();
    feed(&mut a, first);
    let mut b = make();
    feed(&mut b, second);
    a.merge(&b).unwrap();
    assert_eq!(a, whole);
    assert_eq!(a.to_bytes(), whole.to_bytes());
}

#[test]
fn merge_rejects_different_shapes_seeds_and_modes() {
    let base = CountMinSketch::new(100, 4).unwrap();
    for other in [
        CountMinSketch::new(101, 4).unwrap(),
        CountMinSketch::new(100, 5).unwrap(),
        CountMinSketch::new(100, 4).unwrap().with_seed(1).unwrap(),
        CountMinSketch::new(100, 4)
            .unwrap()
            .with_mode(UpdateMode::Conservative),
    ] {
        let mut mine = base.clone();
        assert!(matches!(mine.merge(&other), Err(Error::InvalidArgument(_))));
        assert_eq!(mine, base, "a failed merge changes nothing");
    }
}

#[test]
fn merged_conservative_sketches_remain_upper_bounds() {
    let (stream, counts) = small_zipf();
    let (first, second) = stream.split_at(stream.len() / 2);
    let make = || {
        CountMinSketch::new(1_000, 4)
            .unwrap()
            .with_mode(UpdateMode::Conservative)
    };
    let mut a = make();
    feed(&mut a, first);
    let mut b = make();
    feed(&mut b, second);
    a.merge(&b).unwrap();
    overcounts(&a, &counts);
}

#[test]
fn sizes_are_validated() {
    for (w, d) in [(0, 4), (4, 0), (0, 0), (10, 33), (1 << 27, 4)] {
        assert!(
            matches!(CountMinSketch::new(w, d), Err(Error::InvalidArgument(_))),
            "{w}x{d}"
        );
    }
    for (e, d) in [
        (0.0, 0.1),
        (1.0, 0.1),
        (0.1, 0.0),
        (-0.5, 0.1),
        (f64::NAN, 0.1),
    ] {
        assert!(CountMinSketch::with_error(e, d).is_err(), "{e} {d}");
    }
    let sketch = CountMinSketch::with_error(0.01, 0.01).unwrap();
    assert_eq!((sketch.width(), sketch.depth()), (272, 5));
    assert!(CountMinSketch::new(1, 1)
        .unwrap()
        .with_aging(Some(0))
        .is_err());
}

#[test]
fn counters_saturate_instead_of_wrapping() {
    for mode in [UpdateMode::Plain, UpdateMode::Conservative] {
        let mut sketch = CountMinSketch::new(8, 2).unwrap().with_mode(mode);
        sketch.add(b"x", u64::MAX - 1);
        sketch.add(b"x", 5);
        assert_eq!(sketch.estimate(b"x"), u64::MAX);
        assert_eq!(sketch.total(), u64::MAX);
    }
}

#[test]
fn add_equals_add_hash_and_clear_resets() {
    let mut by_item = CountMinSketch::new(300, 3).unwrap();
    let mut by_hash = CountMinSketch::new(300, 3).unwrap();
    for i in 0..5_000u32 {
        let key = (i % 700).to_le_bytes();
        by_item.add(&key, 2);
        by_hash.add_hash(key_hash(&key), 2);
    }
    assert_eq!(by_item, by_hash);
    assert_eq!(
        by_item.estimate_hash(key_hash(b"nope")),
        by_item.estimate(b"nope")
    );
    by_item.clear();
    assert_eq!(by_item, CountMinSketch::new(300, 3).unwrap());
}

#[test]
fn bytes_round_trip_and_damage_is_reported() {
    let (stream, _) = small_zipf();
    let mut sketch = CountMinSketch::new(97, 3)
        .unwrap()
        .with_seed(9)
        .unwrap()
        .with_mode(UpdateMode::Conservative)
        .with_aging(Some(70_001))
        .unwrap();
    feed(&mut sketch, &stream[..100_000]);
    let bytes = sketch.to_bytes();
    let back = CountMinSketch::from_bytes(&bytes).unwrap();
    assert_eq!(back, sketch);
    assert_eq!(back.aging_period(), Some(70_001));
    assert_eq!(bytes.len(), 48 + 97 * 3 * 8 + 4);
    for cut in [0, 1, 47, 52, bytes.len() - 1] {
        assert!(CountMinSketch::from_bytes(&bytes[..cut])
            .unwrap_err()
            .is_corruption());
    }
    for bit in (0..bytes.len() * 8).step_by(7) {
        let mut bad = bytes.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        assert!(
            CountMinSketch::from_bytes(&bad)
                .unwrap_err()
                .is_corruption(),
            "bit {bit}"
        );
    }
}

fn with_fresh_crc(mut body: Vec<u8>) -> Vec<u8> {
    let crc = crc32fast::hash(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    body
}

#[test]
fn invalid_headers_behind_a_valid_checksum_are_rejected() {
    let bytes = CountMinSketch::new(10, 2)
        .unwrap()
        .with_aging(Some(5))
        .unwrap()
        .to_bytes();
    let body = &bytes[..bytes.len() - 4];
    let patch = |at: usize, value: &[u8]| {
        let mut b = body.to_vec();
        b[at..at + value.len()].copy_from_slice(value);
        with_fresh_crc(b)
    };
    for (at, value, what) in [
        (0, &b"XMS1"[..], "magic"),
        (4, &[2][..], "version"),
        (5, &[2][..], "flags"),
        (6, &[1][..], "reserved"),
        (8, &0u32.to_le_bytes()[..], "zero width"),
        (8, &11u32.to_le_bytes()[..], "width vs length"),
        (12, &40u32.to_le_bytes()[..], "depth"),
        // A header claiming 2^28 counters must not allocate 2 GiB.
        (8, &(1u32 << 27).to_le_bytes()[..], "huge width"),
        (32, &5u64.to_le_bytes()[..], "aging clock"),
        // Width and depth at u32::MAX: their product times 8 passes
        // u64::MAX (an overflow panic in a debug build before the fix).
        (8, &[0xff; 8][..], "width x depth overflow"),
    ] {
        let err = CountMinSketch::from_bytes(&patch(at, value)).unwrap_err();
        assert!(err.is_corruption(), "{what}: {err}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = CountMinSketch::from_bytes(&bytes);
        if let Ok(sketch) = CountMinSketch::from_bytes(&with_fresh_crc(bytes.clone())) {
            prop_assert_eq!(sketch.to_bytes(), with_fresh_crc(bytes));
        }
    }

    #[test]
    fn mutated_sketches_never_panic(
        edits in proptest::collection::vec((0usize..48 + 5 * 3 * 8, any::<u8>()), 1..4),
    ) {
        let mut sketch = CountMinSketch::new(5, 3).unwrap();
        sketch.add(b"a", 3);
        let bytes = sketch.to_bytes();
        let mut body = bytes[..bytes.len() - 4].to_vec();
        for (at, value) in edits {
            body[at] = value;
        }
        let candidate = with_fresh_crc(body);
        if let Ok(back) = CountMinSketch::from_bytes(&candidate) {
            prop_assert_eq!(back.to_bytes(), candidate);
            let _ = back.estimate(b"a");
        }
    }
}

#[test]
fn heavy_hitters_find_the_true_top_ten_of_a_zipf_stream() {
    let (stream, counts) = zipf_stream(100_000, 1.1, 1_000_000, 11);
    let mut true_order: Vec<usize> = (0..counts.len()).collect();
    true_order.sort_by(|&a, &b| counts[b].cmp(&counts[a]).then(a.cmp(&b)));
    let true_top: Vec<Vec<u8>> = true_order[..10].iter().map(|&r| rank_key(r)).collect();

    let mut hh = HeavyHitters::new(10, 0.001, 0.01).unwrap();
    let keys: Vec<Vec<u8>> = (0..counts.len()).map(rank_key).collect();
    for &rank in &stream {
        let key = &keys[rank as usize];
        hh.observe_hash(key, key_hash(key));
    }
    assert_eq!(hh.total(), 1_000_000);
    let top = hh.top();
    assert_eq!(top.len(), 10);
    let found: Vec<Vec<u8>> = top.iter().map(|(k, _)| k.clone()).collect();
    let mut expected_set = true_top.clone();
    expected_set.sort();
    let mut found_set = found.clone();
    found_set.sort();
    assert_eq!(found_set, expected_set, "top {top:?}");
    for window in top.windows(2) {
        assert!(window[0].1 >= window[1].1, "not sorted: {top:?}");
    }
    for (key, estimate) in &top {
        let rank = keys.iter().position(|k| k == key).unwrap();
        assert!(
            *estimate >= counts[rank],
            "{key:?}: {estimate} < {}",
            counts[rank]
        );
    }
}

#[test]
fn heavy_hitters_observe_equals_observe_hash_and_clear_resets() {
    let (stream, _) = small_zipf();
    let mut by_item = HeavyHitters::new(5, 0.01, 0.01).unwrap();
    let mut by_hash = HeavyHitters::new(5, 0.01, 0.01).unwrap();
    for &rank in &stream[..50_000] {
        let key = rank_key(rank as usize);
        by_item.observe(&key);
        by_hash.observe_hash(&key, key_hash(&key));
    }
    assert_eq!(by_item.top(), by_hash.top());
    assert_eq!(by_item.top()[0].0, rank_key(0));
    by_item.clear();
    assert!(by_item.top().is_empty());
    assert_eq!(by_item.total(), 0);
    assert_eq!(by_item.estimate(&rank_key(0)), 0);
}

/// `observe_hash_n(k, h, n)` is `n` calls of `observe_hash` (no aging):
/// the same top list, counts and total; `n = 0` records nothing.
#[test]
fn heavy_hitters_observe_n_equals_n_observations() {
    let (stream, _) = small_zipf();
    let mut one_by_one = HeavyHitters::new(5, 0.01, 0.01).unwrap();
    let mut in_runs = HeavyHitters::new(5, 0.01, 0.01).unwrap();
    let mut occurrences = 0;
    for (i, &rank) in stream[..20_000].iter().enumerate() {
        let key = rank_key(rank as usize);
        let hash = key_hash(&key);
        let n = 1 + (i as u64 * 7) % 5;
        for _ in 0..n {
            one_by_one.observe_hash(&key, hash);
        }
        in_runs.observe_hash_n(&key, hash, n);
        in_runs.observe_hash_n(&key, hash, 0);
        occurrences += n;
    }
    assert_eq!(one_by_one.top(), in_runs.top());
    assert_eq!(one_by_one.total(), in_runs.total());
    assert_eq!(in_runs.total(), occurrences);
}

#[test]
fn heavy_hitters_with_aging_follow_a_shift_in_traffic() {
    let mut hh = HeavyHitters::new(3, 0.001, 0.01)
        .unwrap()
        .with_aging(Some(10_000))
        .unwrap();
    let (old_stream, _) = zipf_stream(10_000, 1.1, 200_000, 3);
    for &rank in &old_stream {
        hh.observe(&rank_key(rank as usize));
    }
    assert_eq!(hh.top()[0].0, rank_key(0));
    // New traffic: ranks shifted by 5,000, so yesterday's hot keys go cold.
    let (new_stream, _) = zipf_stream(10_000, 1.1, 100_000, 4);
    for &rank in &new_stream {
        hh.observe(&rank_key(rank as usize + 5_000));
    }
    let top: Vec<Vec<u8>> = hh.top().into_iter().map(|(k, _)| k).collect();
    assert_eq!(top, vec![rank_key(5_000), rank_key(5_001), rank_key(5_002)]);

    // Without aging the all-time counts keep the old keys on top.
    let mut all_time = HeavyHitters::new(3, 0.001, 0.01).unwrap();
    for &rank in &old_stream {
        all_time.observe(&rank_key(rank as usize));
    }
    for &rank in &new_stream {
        all_time.observe(&rank_key(rank as usize + 5_000));
    }
    assert_eq!(all_time.top()[0].0, rank_key(0));
}

/// A seed changed under counts would send every item to other counters
/// and read estimates below the true counts: refused (found by review).
#[test]
fn with_seed_refuses_a_sketch_that_holds_counts() {
    let mut sketch = CountMinSketch::new(1000, 4).unwrap();
    sketch.add(b"hot", 100);
    assert!(matches!(
        sketch.clone().with_seed(42),
        Err(Error::InvalidArgument(_))
    ));
    // Emptied, it takes a seed again; counts added after it are found.
    sketch.clear();
    let mut reseeded = sketch.with_seed(42).unwrap();
    reseeded.add(b"hot", 100);
    assert!(reseeded.estimate(b"hot") >= 100);
}

/// No add, halving or merge makes a counter exceed the total, so bytes
/// in which one does are damage, even with a valid checksum.
#[test]
fn from_bytes_refuses_a_counter_above_the_total() {
    let mut sketch = CountMinSketch::new(8, 2).unwrap();
    sketch.add(b"a", 3);
    let good = sketch.to_bytes();
    assert_eq!(CountMinSketch::from_bytes(&good).unwrap(), sketch);
    for (value, accepted) in [(3u64, true), (4, false), (1_000_000, false)] {
        let mut bytes = good.clone();
        let body = bytes.len() - 4;
        bytes[48..56].copy_from_slice(&value.to_le_bytes());
        let crc = crc32fast::hash(&bytes[..body]);
        bytes[body..].copy_from_slice(&crc.to_le_bytes());
        let decoded = CountMinSketch::from_bytes(&bytes);
        assert_eq!(
            decoded.is_ok(),
            accepted,
            "counter {value}, total 3: {decoded:?}"
        );
        if let Err(e) = decoded {
            assert!(matches!(e, Error::Corruption { .. }), "{e:?}");
        }
    }
}
