//! Table writer and reader: round trips, iteration, snapshots, filter
//! accounting and input validation.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sievedb::filter::{key_hash, BloomPolicy, FilterPolicy, NoFilter, RibbonPolicy};
use sievedb::fs::RealFs;
use sievedb::iter::InternalIterator;
use sievedb::key::{
    compare_internal, decode_internal_key, encode_internal_key, InternalKey, ValueKind,
    MAX_SEQUENCE,
};
use sievedb::sstable::{Found, Table, TableBuilder, TableMeta, TableOptions};
use sievedb::stats::{ReadCounters, Stats};
use sievedb::Error;

/// Every filter policy a table can be written with.
fn policies() -> Vec<Arc<dyn FilterPolicy>> {
    vec![
        Arc::new(BloomPolicy::new(10.0)),
        Arc::new(RibbonPolicy::new(10.0)),
        Arc::new(NoFilter),
    ]
}

fn opts(policy: &Arc<dyn FilterPolicy>) -> TableOptions {
    TableOptions {
        filter_policy: Arc::clone(policy),
        ..TableOptions::default()
    }
}

/// One entry as the tests model it.
type Entry = (InternalKey, Vec<u8>);
/// One version of a user key: sequence, kind, value.
type Version = (u64, ValueKind, Vec<u8>);

/// Builds a table of `entries` at `path`, replacing any earlier one (the
/// builder itself creates its file exclusively).
fn write(path: &Path, entries: &[Entry], opts: TableOptions) -> TableMeta {
    let _ = std::fs::remove_file(path);
    let mut b = TableBuilder::new(&RealFs, path, 7, opts).unwrap();
    for (k, v) in entries {
        b.add(&k.user_key, k.seq, k.kind, v).unwrap();
    }
    assert_eq!(b.entries(), entries.len() as u64);
    b.finish().unwrap()
}

fn open(path: &Path, policy: &Arc<dyn FilterPolicy>) -> (Arc<Table>, Arc<ReadCounters>) {
    let counters = Arc::new(ReadCounters::default());
    let t = Table::open(path, 7, policy, Arc::clone(&counters)).unwrap();
    (Arc::new(t), counters)
}

fn stats(c: &ReadCounters) -> Stats {
    let mut s = Stats::default();
    c.snapshot_into(&mut s);
    s
}

/// Random binary keys of 1 to 2,048 bytes (mostly short, so 100,000 of them
/// stay a few MB) and values of 0 bytes to 256 KiB (mostly small, a handful
/// large).
fn random_entries(rng: &mut StdRng, n: usize) -> Vec<Entry> {
    let mut keys = BTreeSet::new();
    while keys.len() < n {
        let len = if rng.gen_bool(0.01) {
            rng.gen_range(1..=2048)
        } else {
            rng.gen_range(1..=24)
        };
        let key: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        keys.insert(key);
    }
    keys.into_iter()
        .map(|k| {
            let vlen = if rng.gen_bool(0.0002) {
                rng.gen_range(64 << 10..=256 << 10)
            } else {
                rng.gen_range(0..=40)
            };
            let v: Vec<u8> = (0..vlen).map(|_| rng.gen()).collect();
            let seq = rng.gen_range(1..=MAX_SEQUENCE);
            (InternalKey::new(k, seq, ValueKind::Put), v)
        })
        .collect()
}

fn absent_keys(rng: &mut StdRng, present: &BTreeSet<Vec<u8>>, n: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let len = rng.gen_range(1..=24);
        let k: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        if !present.contains(&k) {
            out.push(k);
        }
    }
    out
}

fn scan_all(t: &Arc<Table>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut it = t.iter();
    it.seek_to_first().unwrap();
    let mut out = Vec::new();
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        it.next().unwrap();
    }
    out
}

fn check_round_trip(n: usize, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let entries = random_entries(&mut rng, n);
    let present: BTreeSet<Vec<u8>> = entries.iter().map(|(k, _)| k.user_key.clone()).collect();
    let absent = absent_keys(&mut rng, &present, n.clamp(100, 20_000));
    for (pi, policy) in policies().iter().enumerate() {
        let path = dir.path().join(format!("{n}-{pi}.sst"));
        let meta = write(&path, &entries, opts(policy));
        let (t, counters) = open(&path, policy);
        assert_eq!(t.meta(), &meta, "meta rebuilt from properties");
        assert_eq!(meta.entries, n as u64);
        assert_eq!(meta.distinct_keys, n as u64);
        assert_eq!(meta.filter_policy, policy.name());
        assert_eq!(meta.file_size, std::fs::metadata(&path).unwrap().len());
        if n > 0 {
            assert_eq!(meta.smallest, entries[0].0.user_key);
            assert_eq!(meta.largest, entries[n - 1].0.user_key);
        }
        for (k, v) in &entries {
            let h = key_hash(&k.user_key);
            let got = t.get(&k.user_key, h, MAX_SEQUENCE).unwrap();
            assert_eq!(
                got,
                Some(Found {
                    seq: k.seq,
                    kind: ValueKind::Put,
                    value: v.clone()
                })
            );
        }
        for k in &absent {
            assert_eq!(t.get(k, key_hash(k), MAX_SEQUENCE).unwrap(), None);
        }
        let scanned = scan_all(&t);
        assert_eq!(scanned.len(), n);
        for ((k, v), (sk, sv)) in entries.iter().zip(&scanned) {
            assert_eq!(&k.encode(), sk);
            assert_eq!(v, sv);
        }
        let s = stats(&counters);
        assert_eq!(
            s.filter_true_positives, n as u64,
            "every present key is a true positive"
        );
    }
}

#[test]
fn round_trip_0_entries() {
    check_round_trip(0, 1);
}

#[test]
fn round_trip_1_entry() {
    check_round_trip(1, 2);
}

#[test]
fn round_trip_17_entries() {
    check_round_trip(17, 3);
}

#[test]
fn round_trip_100k_entries() {
    check_round_trip(100_000, 4);
}

/// Tables without entries are allowed: every read answers "absent" without
/// touching a counter, and a scan is empty.
#[test]
fn empty_table_is_valid_and_reads_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for policy in policies() {
        let path = dir.path().join("empty.sst");
        let meta = write(&path, &[], opts(&policy));
        assert_eq!(meta.entries, 0);
        assert_eq!((meta.smallest_seq, meta.largest_seq), (0, 0));
        let (t, counters) = open(&path, &policy);
        assert_eq!(t.data_blocks(), 0);
        assert_eq!(t.get(b"", key_hash(b""), MAX_SEQUENCE).unwrap(), None);
        assert_eq!(t.get(b"x", key_hash(b"x"), MAX_SEQUENCE).unwrap(), None);
        assert_eq!(stats(&counters), Stats::default());
        let mut it = t.iter();
        it.seek_to_first().unwrap();
        assert!(!it.valid());
        it.seek(&InternalKey::new(b"a".to_vec(), 1, ValueKind::Put).encode())
            .unwrap();
        assert!(!it.valid());
    }
}

/// Keys with several versions and tombstones, in small blocks so versions of
/// one key straddle block boundaries.
fn versioned_entries() -> Vec<Entry> {
    let mut rng = StdRng::seed_from_u64(9);
    let mut model = BTreeMap::new();
    for i in 0..300u32 {
        let user = format!("key{:05}", i * 3).into_bytes();
        let versions = rng.gen_range(1..=5);
        let mut seqs: Vec<u64> = (0..versions).map(|_| rng.gen_range(1..1000)).collect();
        seqs.sort_unstable();
        seqs.dedup();
        for s in seqs {
            let kind = if rng.gen_bool(0.25) {
                ValueKind::Delete
            } else {
                ValueKind::Put
            };
            let value = match kind {
                ValueKind::Put => format!("v{i}@{s}").into_bytes(),
                ValueKind::Delete => Vec::new(),
            };
            model.insert(InternalKey::new(user.clone(), s, kind), value);
        }
    }
    model.into_iter().collect()
}

fn small_block_opts(policy: &Arc<dyn FilterPolicy>) -> TableOptions {
    TableOptions {
        block_bytes: 128,
        restart_interval: 3,
        filter_policy: Arc::clone(policy),
        prefix_len: None,
        ..Default::default()
    }
}

#[test]
fn iterator_order_and_seek() {
    let dir = tempfile::tempdir().unwrap();
    let entries = versioned_entries();
    for policy in policies() {
        let path = dir.path().join("v.sst");
        let meta = write(&path, &entries, small_block_opts(&policy));
        assert_eq!(
            meta.tombstones,
            entries
                .iter()
                .filter(|(k, _)| k.kind == ValueKind::Delete)
                .count() as u64
        );
        let (t, counters) = open(&path, &policy);
        assert!(t.data_blocks() > 50, "small blocks: {}", t.data_blocks());

        // Full scan: internal-key order, versions newest first, tombstones
        // included; each block read once.
        let scanned = scan_all(&t);
        let want: Vec<(Vec<u8>, Vec<u8>)> = entries
            .iter()
            .map(|(k, v)| (k.encode(), v.clone()))
            .collect();
        assert_eq!(scanned, want);
        let s = stats(&counters);
        assert_eq!(s.data_block_reads, t.data_blocks() as u64);
        assert_eq!(s.get_data_block_reads, 0);

        let encoded: Vec<Vec<u8>> = entries.iter().map(|(k, _)| k.encode()).collect();
        let mut it = t.iter();
        // Seek to every present key, then to a point between each pair.
        for (i, e) in encoded.iter().enumerate() {
            it.seek(e).unwrap();
            assert!(it.valid());
            assert_eq!(it.key(), e.as_slice());
            assert_eq!(it.value(), entries[i].1.as_slice());
        }
        for i in 0..300u32 {
            // Absent user key between key{3i} and key{3i+3}.
            let absent =
                InternalKey::new(format!("key{:05}", i * 3 + 1), MAX_SEQUENCE, ValueKind::Put);
            it.seek(&absent.encode()).unwrap();
            let next_user = format!("key{:05}", i * 3 + 3).into_bytes();
            if i == 299 {
                assert!(!it.valid(), "past the last key");
            } else {
                assert!(it.valid());
                let (u, _, _) = decode_internal_key(it.key()).unwrap();
                assert_eq!(u, next_user.as_slice());
                // The first (newest) version of the next key.
                let first = entries
                    .iter()
                    .find(|(k, _)| k.user_key == next_user)
                    .unwrap();
                assert_eq!(it.key(), first.0.encode().as_slice());
            }
        }
        // Seek before the first key and to the very first key.
        it.seek(&InternalKey::new(Vec::new(), 5, ValueKind::Put).encode())
            .unwrap();
        assert_eq!(it.key(), encoded[0].as_slice());
        it.seek(&encoded[0]).unwrap();
        assert_eq!(it.key(), encoded[0].as_slice());
        // Seek just past the last entry (same user key, older than any
        // version: sequence 0 sorts last).
        let last = &entries.last().unwrap().0;
        it.seek(&InternalKey::new(last.user_key.clone(), 0, ValueKind::Delete).encode())
            .unwrap();
        assert!(!it.valid());
        // Seek into the middle of a key's versions: the first version with
        // seq <= target seq, then next continues in order.
        let mid = encoded.len() / 2;
        let (u, s, _) = decode_internal_key(&encoded[mid]).unwrap();
        it.seek(&InternalKey::new(u.to_vec(), s, ValueKind::Put).encode())
            .unwrap();
        let mut got = Vec::new();
        while it.valid() {
            got.push(it.key().to_vec());
            it.next().unwrap();
        }
        assert_eq!(got.as_slice(), &encoded[mid..]);
        // A target too short to be an internal key is refused.
        assert!(matches!(it.seek(b"abc"), Err(Error::InvalidArgument(_))));
        assert!(!it.valid());
    }
}

#[test]
fn get_at_snapshots_returns_the_right_version() {
    let dir = tempfile::tempdir().unwrap();
    let entries = versioned_entries();
    let mut by_user: BTreeMap<Vec<u8>, Vec<Version>> = BTreeMap::new();
    for (k, v) in &entries {
        by_user
            .entry(k.user_key.clone())
            .or_default()
            .push((k.seq, k.kind, v.clone()));
    }
    for policy in policies() {
        let path = dir.path().join("snap.sst");
        write(&path, &entries, small_block_opts(&policy));
        let (t, counters) = open(&path, &policy);
        let mut expect_tp = 0;
        for (user, versions) in &by_user {
            let h = key_hash(user);
            let oldest = versions.iter().map(|v| v.0).min().unwrap();
            let mut snaps = vec![0, oldest - 1, oldest, 500, 999, MAX_SEQUENCE, u64::MAX];
            snaps.extend(versions.iter().flat_map(|v| [v.0, v.0 + 1, v.0 - 1]));
            for snap in snaps {
                // Versions are newest first: the first with seq <= snap.
                let want = versions.iter().find(|v| v.0 <= snap.min(MAX_SEQUENCE)).map(
                    |(seq, kind, value)| Found {
                        seq: *seq,
                        kind: *kind,
                        value: value.clone(),
                    },
                );
                assert_eq!(t.get(user, h, snap).unwrap(), want, "snapshot {snap}");
                expect_tp += 1;
            }
        }
        let s = stats(&counters);
        // Even when every version is newer than the snapshot, the table holds
        // the key: a true positive, never a false one.
        assert_eq!(s.filter_true_positives, expect_tp);
        assert_eq!(s.filter_false_positives, 0);
        assert_eq!(s.filter_negatives, 0);
    }
}

/// On 100,000 keys and 100,000 absent probes: the filter spares every data
/// block read except its false positives; without a filter every in-range
/// probe reads a block and only out-of-range probes are free.
#[test]
fn absent_probes_read_blocks_only_on_false_positives() {
    let dir = tempfile::tempdir().unwrap();
    let n = 100_000u64;
    // Keys "k" + even numbers; probes are the odd numbers in range, plus
    // some below and above the range.
    let entries: Vec<Entry> = (0..n)
        .map(|i| {
            (
                InternalKey::new(format!("k{:010}", i * 2), i + 1, ValueKind::Put),
                vec![b'v'; 20],
            )
        })
        .collect();
    let mut probes: Vec<Vec<u8>> = (0..n - 1_000)
        .map(|i| format!("k{:010}", i * 2 + 1).into_bytes())
        .collect();
    let in_range = probes.len() as u64;
    probes.extend((0..500).map(|i| format!("a{i}").into_bytes()));
    probes.extend((0..500).map(|i| format!("z{i}").into_bytes()));
    assert_eq!(probes.len() as u64, n);

    for policy in policies() {
        let path = dir.path().join("probe.sst");
        write(&path, &entries, opts(&policy));
        let (t, counters) = open(&path, &policy);
        for p in &probes {
            assert_eq!(t.get(p, key_hash(p), MAX_SEQUENCE).unwrap(), None);
        }
        let s = stats(&counters);
        assert_eq!(
            s.filter_checks, in_range,
            "out-of-range probes ask no filter"
        );
        assert_eq!(s.filter_true_positives, 0);
        assert_eq!(s.filter_negatives + s.filter_false_positives, in_range);
        assert_eq!(s.data_block_reads, s.filter_false_positives);
        assert_eq!(s.get_data_block_reads, s.filter_false_positives);
        if policy.name() == NoFilter::NAME {
            assert_eq!(s.filter_false_positives, in_range);
        } else {
            let fpr = s.filter_false_positives as f64 / in_range as f64;
            assert!(fpr < 0.02, "bloom 10 bits/key false-positive rate {fpr}");
            assert!(s.filter_false_positives > 0);
        }
        let block_len = t.meta().file_size / t.data_blocks() as u64;
        assert!(s.bytes_read <= s.data_block_reads * block_len * 2);

        // Present keys: exactly one block each.
        counters.reset();
        for (k, _) in entries.iter().step_by(97) {
            assert!(t
                .get(&k.user_key, key_hash(&k.user_key), MAX_SEQUENCE)
                .unwrap()
                .is_some());
        }
        let s = stats(&counters);
        assert_eq!(s.get_data_block_reads, s.filter_true_positives);
        assert_eq!(
            s.filter_true_positives,
            entries.iter().step_by(97).count() as u64
        );
    }
}

#[test]
fn out_of_order_add_is_rejected_and_not_added() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("order.sst");
    let mut b = TableBuilder::new(&RealFs, &path, 1, TableOptions::default()).unwrap();
    b.add(b"b", 10, ValueKind::Put, b"1").unwrap();
    let bad: [(&[u8], u64, ValueKind); 4] = [
        (b"a", 20, ValueKind::Put),    // smaller user key
        (b"b", 10, ValueKind::Put),    // duplicate
        (b"b", 11, ValueKind::Put),    // newer version after an older one
        (b"b", 10, ValueKind::Delete), // valid: (10, Delete) sorts after (10, Put)
    ];
    for (k, s, kind) in &bad[..3] {
        let err = b.add(k, *s, *kind, b"").unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }
    // Same sequence, lower kind sorts after: accepted.
    b.add(bad[3].0, bad[3].1, bad[3].2, b"").unwrap();
    b.add(b"b", 9, ValueKind::Put, b"2").unwrap();
    assert!(matches!(
        b.add(b"b", 9, ValueKind::Put, b"x"),
        Err(Error::InvalidArgument(_))
    ));
    b.add(b"c", 1, ValueKind::Put, b"3").unwrap();
    // A tombstone with a value and an out-of-range sequence are refused.
    assert!(matches!(
        b.add(b"d", 1, ValueKind::Delete, b"x"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        b.add(b"d", MAX_SEQUENCE + 1, ValueKind::Put, b""),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(b.entries(), 4);
    assert_eq!(b.key_hashes(), &[key_hash(b"b"), key_hash(b"c")]);
    let meta = b.finish().unwrap();
    assert_eq!(meta.entries, 4);
    assert_eq!(meta.distinct_keys, 2);
    assert_eq!(meta.tombstones, 1);
    assert_eq!((meta.smallest_seq, meta.largest_seq), (1, 10));

    let policy: Arc<dyn FilterPolicy> = Arc::new(BloomPolicy::default());
    let (t, _) = open(&path, &policy);
    let keys: Vec<Vec<u8>> = scan_all(&t).into_iter().map(|(k, _)| k).collect();
    let want: Vec<Vec<u8>> = [
        (b"b", 10, ValueKind::Put),
        (b"b", 10, ValueKind::Delete),
        (b"b", 9, ValueKind::Put),
        (b"c", 1, ValueKind::Put),
    ]
    .iter()
    .map(|(k, s, kind)| InternalKey::new(k.to_vec(), *s, *kind).encode())
    .collect();
    assert_eq!(keys, want);
}

#[test]
fn properties_round_trip_and_reserved_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("props.sst");
    let mut b = TableBuilder::new(&RealFs, &path, 3, TableOptions::default()).unwrap();
    b.add(b"k", 1, ValueKind::Put, b"v").unwrap();
    b.set_property("sievedb.hll", vec![1, 2, 3]);
    b.set_property("user.empty", Vec::new());
    b.finish().unwrap();
    let policy: Arc<dyn FilterPolicy> = Arc::new(BloomPolicy::default());
    let (t, _) = open(&path, &policy);
    assert_eq!(t.property("sievedb.hll"), Some(&[1u8, 2, 3][..]));
    assert_eq!(t.property("user.empty"), Some(&[][..]));
    assert_eq!(t.property("absent"), None);
    assert_eq!(
        t.property("sievedb.table.filter_policy"),
        Some(BloomPolicy::NAME.as_bytes())
    );
    assert_eq!(t.filter().format_name(), "bloom");
    assert_eq!(t.path(), path.as_path());

    let path = dir.path().join("reserved.sst");
    let mut b = TableBuilder::new(&RealFs, &path, 3, TableOptions::default()).unwrap();
    b.add(b"k", 1, ValueKind::Put, b"v").unwrap();
    b.set_property("sievedb.table.entries", vec![0]);
    assert!(matches!(b.finish(), Err(Error::InvalidArgument(_))));
}

#[test]
fn bad_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("opts.sst");
    for (block_bytes, restart_interval) in [(0, 16), (4096, 0), (1 << 40, 16), (4096, 1 << 20)] {
        let o = TableOptions {
            block_bytes,
            restart_interval,
            ..TableOptions::default()
        };
        assert!(matches!(
            TableBuilder::new(&RealFs, &path, 1, o),
            Err(Error::InvalidArgument(_))
        ));
    }
    let missing: PathBuf = dir.path().join("no/such/dir/x.sst");
    assert!(matches!(
        TableBuilder::new(&RealFs, &missing, 1, TableOptions::default()),
        Err(Error::Io { .. })
    ));
    let policy: Arc<dyn FilterPolicy> = Arc::new(NoFilter);
    assert!(matches!(
        Table::open(&missing, 1, &policy, Arc::default()),
        Err(Error::Io { .. })
    ));
}

/// A filter recorded under a custom policy name is decoded by the current
/// policy of that name, and by nothing else (then it filters nothing, but
/// reads stay correct).
#[test]
fn custom_policy_filters_are_decoded_by_name() {
    /// Keeps the hashes verbatim: exact membership.
    struct Exact;
    impl FilterPolicy for Exact {
        fn name(&self) -> &str {
            "test.Exact"
        }
        fn build(&self, hashes: &[u64]) -> Vec<u8> {
            hashes.iter().flat_map(|h| h.to_le_bytes()).collect()
        }
        fn may_contain(&self, filter: &[u8], h: u64) -> bool {
            filter.chunks_exact(8).any(|c| c == h.to_le_bytes())
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("custom.sst");
    let exact: Arc<dyn FilterPolicy> = Arc::new(Exact);
    let entries: Vec<Entry> = (0..100u32)
        .map(|i| {
            (
                InternalKey::new(format!("k{i:03}"), 1, ValueKind::Put),
                vec![1],
            )
        })
        .collect();
    write(&path, &entries, opts(&exact));
    let (t, counters) = open(&path, &exact);
    assert_eq!(t.filter().format_name(), "test.Exact");
    assert_eq!(t.get(b"k0505", key_hash(b"k0505"), 5).unwrap(), None);
    assert_eq!(stats(&counters).filter_negatives, 1);

    let other: Arc<dyn FilterPolicy> = Arc::new(BloomPolicy::default());
    let (t, counters) = open(&path, &other);
    assert_eq!(t.filter().format_name(), "undecodable");
    assert_eq!(t.get(b"k0505", key_hash(b"k0505"), 5).unwrap(), None);
    assert_eq!(
        t.get(b"k050", key_hash(b"k050"), 5).unwrap().unwrap().value,
        vec![1]
    );
    let s = stats(&counters);
    assert_eq!((s.filter_negatives, s.filter_false_positives), (0, 1));
}

#[test]
fn iterator_outlives_other_handles_and_counts_per_block() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("own.sst");
    let entries = versioned_entries();
    let policy: Arc<dyn FilterPolicy> = Arc::new(BloomPolicy::default());
    write(&path, &entries, small_block_opts(&policy));
    let (t, counters) = open(&path, &policy);
    let blocks = t.data_blocks() as u64;
    let mut it = t.iter();
    drop(t);
    it.seek_to_first().unwrap();
    let mut n = 0;
    while it.valid() {
        n += 1;
        it.next().unwrap();
    }
    assert_eq!(n, entries.len());
    let s = stats(&counters);
    assert_eq!(s.data_block_reads, blocks);
    assert!(s.bytes_read > 0);
    assert!(matches!(it.next(), Err(Error::InvalidArgument(_))));
    assert_eq!(counters.filter_checks.load(Ordering::Relaxed), 0);
}

#[test]
fn tables_and_iterators_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Table>();
    send::<sievedb::sstable::TableIter>();
    send::<TableBuilder>();
}

/// A xorshift generator for the walk.
struct R(u64);
impl R {
    fn n(&mut self, m: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % m
    }
}

/// A table cursor driven by 20,000 random seeks, `seek_before`s, nexts and
/// prevs per setup (restart intervals 1-100, blocks of 64 bytes to 8 KiB,
/// three versions per key) agrees with a model at every step: no stale
/// entry from the interval a step back keeps (written by a reviewer of the
/// reverse-scan change).
#[test]
fn table_cursor_random_walk() {
    for (ri, bb) in [
        (1usize, 64usize),
        (2, 100),
        (3, 200),
        (16, 300),
        (16, 4096),
        (5, 64),
        (100, 8192),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sst");
        let policy: Arc<dyn FilterPolicy> = Arc::new(NoFilter);
        let opts = TableOptions {
            block_bytes: bb,
            restart_interval: ri,
            filter_policy: Arc::clone(&policy),
            ..TableOptions::default()
        };
        let mut entries: Vec<(Vec<u8>, u64, Vec<u8>)> = Vec::new();
        let mut r = R(0x9E3779B97F4A7C15 ^ ri as u64 ^ bb as u64);
        for i in 0..400u64 {
            let user = format!("k{:04}", i / 3).into_bytes();
            let seq = 1000 - (i % 3);
            let vlen = r.n(20) as usize;
            entries.push((user, seq, vec![i as u8; vlen]));
        }
        let mut b = TableBuilder::new(&RealFs, &path, 7, opts).unwrap();
        for (u, s, v) in &entries {
            b.add(u, *s, ValueKind::Put, v).unwrap();
        }
        b.finish().unwrap();
        let t =
            Arc::new(Table::open(&path, 7, &policy, Arc::new(ReadCounters::default())).unwrap());
        let enc: Vec<Vec<u8>> = entries
            .iter()
            .map(|(u, s, _)| {
                let mut k = Vec::new();
                encode_internal_key(&mut k, u, *s, ValueKind::Put);
                k
            })
            .collect();
        let mut it = t.iter();
        let mut pos: Option<usize> = None; // model
        let mut log = Vec::new();
        for step in 0..20000 {
            let op = r.n(8);
            match op {
                0 => {
                    it.seek_to_first().unwrap();
                    pos = Some(0);
                    log.push("first".to_string());
                }
                1 => {
                    it.seek_to_last().unwrap();
                    pos = Some(enc.len() - 1);
                    log.push("last".into());
                }
                2 | 3 => {
                    // An entry's own key, or one past every entry.
                    let j = r.n(enc.len() as u64 + 1) as usize;
                    let target = enc.get(j).cloned().unwrap_or_else(|| {
                        let mut k = Vec::new();
                        encode_internal_key(&mut k, b"z", 5, ValueKind::Put);
                        k
                    });
                    if op == 2 {
                        it.seek(&target).unwrap();
                        pos = enc
                            .iter()
                            .position(|k| compare_internal(k, &target).is_ge());
                        log.push(format!("seek {j}"));
                    } else {
                        it.seek_before(&target).unwrap();
                        pos = enc
                            .iter()
                            .rposition(|k| compare_internal(k, &target).is_lt());
                        log.push(format!("seek_before {j}"));
                    }
                }
                4 | 5 => {
                    if let Some(p) = pos {
                        it.next().unwrap();
                        pos = if p + 1 < enc.len() { Some(p + 1) } else { None };
                        log.push("next".into());
                    }
                }
                _ => {
                    if let Some(p) = pos {
                        it.prev().unwrap();
                        pos = p.checked_sub(1);
                        log.push("prev".into());
                    }
                }
            }
            match pos {
                Some(p) => {
                    assert!(
                        it.valid(),
                        "ri {ri} bb {bb} step {step}: want {p}, invalid; last ops {:?}",
                        &log[log.len().saturating_sub(8)..]
                    );
                    assert_eq!(
                        it.key(),
                        enc[p].as_slice(),
                        "ri {ri} bb {bb} step {step} key at {p}; last ops {:?}",
                        &log[log.len().saturating_sub(8)..]
                    );
                    assert_eq!(
                        it.value(),
                        entries[p].2.as_slice(),
                        "ri {ri} bb {bb} step {step} value at {p}"
                    );
                }
                None => assert!(!it.valid(), "ri {ri} bb {bb} step {step}: want invalid"),
            }
        }
    }
}
