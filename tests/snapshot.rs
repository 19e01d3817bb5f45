//! `Db::snapshot`: reads through a snapshot see the database as of its
//! moment, through later writes, flushes and compactions, and the files it
//! pins are released when it drops.
#![allow(clippy::field_reassign_with_default)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{key, policies, small_options, table_files, GroupWriter, Rng};
use sievedb::{Db, Error};

/// Checks every read of `snap` against `model` for keys `0..universe`.
fn assert_matches(snap: &sievedb::Snapshot, model: &BTreeMap<Vec<u8>, Vec<u8>>, universe: u64) {
    let keys: Vec<Vec<u8>> = (0..universe).map(key).collect();
    for k in keys.iter().step_by(7) {
        assert_eq!(snap.get(k).unwrap().as_ref(), model.get(k), "get {k:?}");
    }
    let expected: Vec<Option<Vec<u8>>> = keys.iter().map(|k| model.get(k).cloned()).collect();
    assert_eq!(snap.multi_get(&keys).unwrap(), expected);
    let scanned: Vec<(Vec<u8>, Vec<u8>)> = snap.iter().unwrap().map(|r| r.unwrap()).collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(scanned, want);
    let (lo, hi) = (key(universe / 4), key(universe / 2));
    let ranged: Vec<Vec<u8>> = snap
        .scan(lo.as_slice()..hi.as_slice())
        .unwrap()
        .map(|r| r.unwrap().0)
        .collect();
    let want: Vec<Vec<u8>> = model.range(lo..hi).map(|(k, _)| k.clone()).collect();
    assert_eq!(ranged, want);
}

#[test]
fn snapshots_see_their_moment_through_flushes_and_compactions() {
    const UNIVERSE: u64 = 6_000;
    for policy in policies() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = small_options();
        opts.filter_policy = Arc::clone(&policy);
        let db = Db::open(dir.path(), opts).unwrap();
        let mut rng = Rng(23);
        let mut model = BTreeMap::new();
        let mut snapshots = Vec::new();
        for round in 0..5u64 {
            for _ in 0..6_000 {
                let k = key(rng.below(UNIVERSE));
                if rng.below(5) == 0 {
                    db.delete(&k).unwrap();
                    model.remove(&k);
                } else {
                    let v = format!("r{round}-{}", rng.next_u64()).into_bytes();
                    db.put(&k, &v).unwrap();
                    model.insert(k, v);
                }
            }
            // A snapshot whose data sits partly in the memtable, partly in
            // tables that later compactions rewrite.
            snapshots.push((db.snapshot().unwrap(), model.clone()));
            if round % 2 == 1 {
                db.flush().unwrap();
            }
        }
        // Overwrite and delete everything, then push it all down.
        for i in 0..UNIVERSE {
            if i % 2 == 0 {
                db.delete(key(i)).unwrap();
            } else {
                db.put(key(i), b"late").unwrap();
            }
        }
        db.flush().unwrap();
        db.compact_all().unwrap();
        assert!(db.stats().compactions > 0, "{}", policy.name());
        for (i, (snap, model)) in snapshots.iter().enumerate() {
            assert_matches(snap, model, UNIVERSE);
            if i > 0 {
                assert!(snap.sequence() > snapshots[i - 1].0.sequence());
            }
        }
        // The live database sees the late writes only.
        assert_eq!(db.get(key(0)).unwrap(), None);
        assert_eq!(db.get(key(1)).unwrap(), Some(b"late".to_vec()));
        // The snapshots pinned the tables compaction replaced; dropping
        // them deletes those files.
        let pinned = table_files(dir.path());
        let live = db.tables().len();
        assert!(pinned > live, "{pinned} files, {live} live tables");
        drop(snapshots);
        assert_eq!(table_files(dir.path()), live);
    }
}

#[test]
fn a_snapshot_sees_batches_whole_while_a_writer_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = small_options();
    opts.memtable_bytes = 16 << 10;
    let db = Arc::new(Db::open(dir.path(), opts).unwrap());
    let group: Vec<Vec<u8>> = (0..20).map(|i| key(i * 1_000)).collect();
    let writer = GroupWriter::spawn(&db, &group);
    let mut reads = 0;
    let mut seen = std::collections::HashSet::new();
    while reads < 1_000 || writer.rounds() < 500 {
        let snap = db.snapshot().unwrap();
        // Separate gets, with the writer running between them: each must
        // answer from the snapshot's moment.
        let first = snap.get(&group[0]).unwrap();
        for k in &group[1..] {
            assert_eq!(
                snap.get(k).unwrap(),
                first,
                "read {reads}: a batch half seen"
            );
        }
        let scanned: Vec<Vec<u8>> = snap
            .scan(group[0].as_slice()..=group[group.len() - 1].as_slice())
            .unwrap()
            .map(|r| r.unwrap())
            .filter(|(k, _)| group.contains(k))
            .map(|(_, v)| v)
            .collect();
        match &first {
            Some(v) => assert_eq!(scanned, vec![v.clone(); group.len()]),
            None => assert!(scanned.is_empty()),
        }
        seen.insert(first);
        reads += 1;
    }
    writer.finish();
    assert!(seen.len() > 1, "the snapshots overlapped the writes");
    assert!(db.stats().flushes > 0, "the group also lived in tables");
}

#[test]
fn snapshot_reads_validate_keys_and_count_like_db_reads() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_options()).unwrap();
    let empty = db.snapshot().unwrap();
    assert_eq!(empty.sequence(), 0);
    db.put(key(1), b"v").unwrap();
    let snap = db.snapshot().unwrap();
    assert!(snap.sequence() > empty.sequence());
    assert_eq!(
        db.snapshot().unwrap().sequence(),
        snap.sequence(),
        "no write in between"
    );
    db.reset_stats();
    let too_long = vec![b'k'; small_options().max_key_bytes + 1];
    for bad in [Vec::new(), too_long.clone()] {
        assert!(matches!(snap.get(&bad), Err(Error::InvalidArgument(_))));
        let err = snap.multi_get(&[key(1), bad]).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }
    assert_eq!(db.stats().gets, 0, "nothing read");
    assert_eq!(snap.get(key(1)).unwrap(), Some(b"v".to_vec()));
    assert_eq!(empty.get(key(1)).unwrap(), None);
    assert_eq!(
        snap.multi_get(&[key(1), key(2)]).unwrap(),
        vec![Some(b"v".to_vec()), None]
    );
    assert_eq!(db.stats().gets, 4);
    assert_eq!(empty.iter().unwrap().count(), 0);
    // An iterator outlives the snapshot it came from.
    let it = snap.iter().unwrap();
    drop(snap);
    db.delete(key(1)).unwrap();
    assert_eq!(it.map(|r| r.unwrap().0).collect::<Vec<_>>(), vec![key(1)]);
}

/// A snapshot owns what it reads: it moves to another thread, lives beside
/// an `Arc<Db>`, and reads its moment after the database was closed, while
/// the directory opens again (the `LOCK` goes with the `Db` handle).
#[test]
fn a_snapshot_outlives_its_handle_and_moves_between_threads() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || sievedb::Options {
        memtable_bytes: 4 << 10,
        ..sievedb::Options::default()
    };
    let db = std::sync::Arc::new(sievedb::Db::open(dir.path(), opts()).unwrap());
    for i in 0..500u32 {
        db.put(format!("k{i:04}"), b"old").unwrap();
    }
    let snap = db.snapshot().unwrap();
    for i in 0..500u32 {
        db.put(format!("k{i:04}"), b"new").unwrap();
    }
    db.flush().unwrap();
    db.compact_all().unwrap();
    // Into another thread, by value.
    let snap = std::thread::spawn(move || {
        assert_eq!(snap.get(b"k0007").unwrap().as_deref(), Some(&b"old"[..]));
        snap
    })
    .join()
    .unwrap();
    // Past close, and past a reopen of the same directory.
    std::sync::Arc::try_unwrap(db).unwrap().close().unwrap();
    let reopened = sievedb::Db::open(dir.path(), opts()).unwrap();
    reopened.put(b"k0001", b"newest").unwrap();
    let all: Vec<_> = snap.iter().unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(all.len(), 500);
    assert!(all.iter().all(|(_, v)| v == b"old"));
    assert_eq!(snap.get(b"k0001").unwrap().as_deref(), Some(&b"old"[..]));
    drop(snap);
    assert_eq!(
        reopened.get(b"k0001").unwrap().as_deref(),
        Some(&b"newest"[..])
    );
    assert_eq!(
        reopened.get(b"k0002").unwrap().as_deref(),
        Some(&b"new"[..])
    );
    reopened.close().unwrap();
    // Nothing the old snapshot pinned got in the way of the reopened
    // database's files.
    let db = sievedb::Db::open(dir.path(), opts()).unwrap();
    assert!(db.verify().unwrap().problems.is_empty());
    assert_eq!(db.iter().unwrap().count(), 500);
}
