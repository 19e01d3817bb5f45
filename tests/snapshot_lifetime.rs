//! A `Snapshot` owns what it reads and may outlive its `Db` handle: reads
//! through it after `close`, across a reopen of the same directory (or a
//! checkpoint restored in its place), on a poisoned database, with the
//! handle dropped on another thread; and what it must not do once the
//! handle is gone: delete files of whoever holds the directory now, or
//! keep more than its own moment alive. (Written by the review of that
//! change, twenty-ninth session; the restore and the pinning tests failed
//! before its fixes.)
//!
//! The tests of this file run one at a time: one counts the process's
//! mappings of deleted tables.
#![allow(clippy::field_reassign_with_default)]

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use sievedb::{Db, Options};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn opts() -> Options {
    Options {
        memtable_bytes: 4 << 10,
        background_compaction: false,
        ..Options::default()
    }
}

fn k(i: u32) -> String {
    format!("k{i:04}")
}

fn ssts(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".sst"))
        .collect();
    v.sort();
    v
}

/// Every read kind through `snap` sees `val` for all 300 keys.
fn check_snapshot(snap: &sievedb::Snapshot, val: &[u8]) {
    for i in (0..300).step_by(13) {
        assert_eq!(snap.get(k(i)).unwrap().as_deref(), Some(val));
        let (v, _cost) = snap.get_with_cost(k(i)).unwrap();
        assert_eq!(v.as_deref(), Some(val));
    }
    let keys: Vec<String> = (0..300).map(k).collect();
    assert!(snap
        .multi_get(&keys)
        .unwrap()
        .iter()
        .all(|v| v.as_deref() == Some(val)));
    let all: Vec<_> = snap.iter().unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(all.len(), 300);
    assert!(all.iter().all(|(_, v)| v == val));
    assert_eq!(snap.scan(k(10)..k(20)).unwrap().count(), 10);
    assert_eq!(snap.scan_prefix("k01").unwrap().count(), 100);
}

/// Puts `value` under all 300 keys.
fn put_all(db: &Db, value: &[u8]) {
    for i in 0..300 {
        db.put(k(i), value).unwrap();
    }
}

/// Writes "old" to every key, flushes, takes a snapshot, then overwrites
/// every key with "mid" (not flushed): the snapshot's moment is "old".
fn snapshot_of_old_then_mid(db: &Db) -> sievedb::Snapshot {
    put_all(db, b"old");
    db.flush().unwrap();
    let snap = db.snapshot().unwrap();
    put_all(db, b"mid");
    snap
}

/// (a)/(b): reopen in the same process, write/flush/compact/checkpoint,
/// old snapshot dropped at each of several moments.
#[test]
fn old_snapshot_across_reopen_at_every_drop_moment() {
    let _serial = serial();
    for moment in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let cp = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), opts()).unwrap();
        let snap = snapshot_of_old_then_mid(&db);
        db.flush().unwrap();
        db.compact_all().unwrap(); // the snapshot's tables are now obsolete
        db.close().unwrap();
        let mut snap = Some(snap);
        let db = Db::open(dir.path(), opts()).unwrap(); // open deletes them
        check_snapshot(snap.as_ref().unwrap(), b"old");
        if moment == 0 {
            drop(snap.take());
        }
        for i in 0..300 {
            db.put(k(i), b"new").unwrap();
        }
        db.flush().unwrap();
        if let Some(s) = &snap {
            check_snapshot(s, b"old");
        }
        if moment == 1 {
            drop(snap.take());
        }
        db.compact_all().unwrap();
        if moment == 2 {
            drop(snap.take());
        }
        db.checkpoint(cp.path().join("c")).unwrap();
        if let Some(s) = &snap {
            check_snapshot(s, b"old");
        }
        if moment == 3 {
            drop(snap.take());
        }
        db.close().unwrap();
        drop(snap.take()); // moment 4: after the new instance closed
        for d in [dir.path().to_path_buf(), cp.path().join("c")] {
            let db = Db::open(&d, opts()).unwrap();
            assert!(db.verify().unwrap().problems.is_empty(), "moment {moment}");
            assert_eq!(db.iter().unwrap().count(), 300);
            assert!(db.iter().unwrap().all(|r| r.unwrap().1 == b"new"));
        }
    }
}

/// A directory restored from a checkpoint (or wiped and recreated) while an
/// old snapshot lives: dropping the snapshot deletes a *live* table of the
/// new database, because the pinned obsolete table handle removes its file
/// by path and the restored database hands out the same file numbers again.
#[test]
fn an_old_snapshot_dropped_after_a_restore_in_place_deletes_nothing() {
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("db");
    let backup = root.path().join("backup");
    let db = Db::open(&dir, opts()).unwrap();
    db.put("seed", "x").unwrap();
    db.checkpoint(&backup).unwrap(); // small next file number
    let snap = snapshot_of_old_then_mid(&db);
    db.flush().unwrap();
    db.compact_all().unwrap(); // snapshot now pins obsolete tables
    db.close().unwrap();
    let pinned_before = ssts(&dir);

    // Restore the backup in place (close, replace the directory, reopen).
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::rename(&backup, &dir).unwrap();
    let db = Db::open(&dir, opts()).unwrap();
    for i in 0..30 {
        db.put(k(i), b"new").unwrap();
        db.flush().unwrap(); // one small table per key
    }
    let live = ssts(&dir);
    eprintln!("old instance's files {pinned_before:?}; restored db's live tables {live:?}");
    assert_eq!(snap.get(k(1)).unwrap().as_deref(), Some(&b"old"[..]));
    drop(snap); // deletes <dir>/<number>.sst of the OLD instance's obsolete tables
    let after = ssts(&dir);
    if std::env::var("SOFT").is_ok() {
        eprintln!("after drop: {after:?}");
    } else {
        assert_eq!(
            after, live,
            "the old snapshot's drop removed live tables of the restored db"
        );
    }
    db.close().unwrap();
    let db = Db::open(&dir, opts()).expect("reopen of the restored database");
    for i in 0..30 {
        assert_eq!(db.get(k(i)).unwrap().as_deref(), Some(&b"new"[..]));
    }
}

/// (d): an open that fails after taking the lock releases it.
#[test]
fn failed_open_releases_the_lock() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.put("a", "b").unwrap();
    db.flush().unwrap();
    db.close().unwrap();
    let current = dir.path().join("CURRENT");
    let saved = std::fs::read(&current).unwrap();
    std::fs::remove_file(&current).unwrap();
    assert!(Db::open(dir.path(), opts()).is_err());
    std::fs::write(&current, &saved).unwrap();
    let db = Db::open(dir.path(), opts()).expect("not Locked after a failed open");
    assert_eq!(db.get("a").unwrap().as_deref(), Some(&b"b"[..]));
}

/// (f): the Db dropped on another thread while snapshots read.
#[test]
fn db_dropped_on_another_thread_while_snapshots_read() {
    let _serial = serial();
    for _ in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), opts()).unwrap();
        put_all(&db, b"old");
        let snaps: Vec<_> = (0..3).map(|_| db.snapshot().unwrap()).collect();
        put_all(&db, b"new");
        let readers: Vec<_> = snaps
            .into_iter()
            .map(|s| {
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        check_snapshot(&s, b"old");
                    }
                })
            })
            .collect();
        let dropper = std::thread::spawn(move || {
            db.flush().unwrap();
            db.compact_all().unwrap();
            drop(db)
        });
        dropper.join().unwrap();
        let db2 = Db::open(dir.path(), opts()).unwrap();
        db2.compact_all().unwrap();
        for r in readers {
            r.join().unwrap();
        }
        drop(db2);
        let db3 = Db::open(dir.path(), opts()).unwrap();
        assert!(db3.verify().unwrap().problems.is_empty());
        assert!(db3.iter().unwrap().all(|r| r.unwrap().1 == b"new"));
    }
}

/// (c): a poisoned database with a live snapshot; the snapshot keeps
/// reading, the poisoned handle closes, the directory reopens (same
/// process) and the old snapshot still reads after the new one compacts.
#[test]
fn poisoned_database_with_a_live_snapshot() {
    let _serial = serial();
    use sievedb::fs::{FaultFs, FaultKind, FaultOp};
    use std::sync::Arc;
    for (op, nth) in [
        (FaultOp::Sync, 1),
        (FaultOp::Append, 1),
        (FaultOp::Create, 1),
        (FaultOp::SyncDir, 1),
        (FaultOp::Rename, 1),
        (FaultOp::Remove, 1),
        (FaultOp::Append, 3),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let fs = FaultFs::new();
        let o = || Options {
            fs: Arc::new(fs.clone()),
            ..opts()
        };
        let db = Db::open(dir.path(), o()).unwrap();
        let snap = snapshot_of_old_then_mid(&db);
        fs.fail_nth(Some(op), nth, FaultKind::Io).unwrap();
        let r = db.flush().and_then(|()| db.compact_all());
        let mid_ok = r.is_ok();
        check_snapshot(&snap, b"old");
        let _ = db.put("after", "x"); // refused when poisoned
        check_snapshot(&snap, b"old");
        let _ = db.close();
        fs.clear_faults();
        check_snapshot(&snap, b"old");
        let db = Db::open(dir.path(), o()).unwrap_or_else(|e| panic!("{op:?}: reopen: {e}"));
        check_snapshot(&snap, b"old");
        for i in 0..300 {
            db.put(k(i), b"new").unwrap();
        }
        db.flush().unwrap();
        db.compact_all().unwrap();
        check_snapshot(&snap, b"old");
        drop(snap);
        db.close().unwrap();
        let db = Db::open(dir.path(), o()).unwrap();
        assert!(db.verify().unwrap().problems.is_empty(), "{op:?} {mid_ok}");
        for i in 0..300 {
            assert_eq!(
                db.get(k(i)).unwrap().as_deref(),
                Some(&b"new"[..]),
                "{op:?}"
            );
        }
    }
}

fn mapped_deleted_ssts() -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let mut v: Vec<&str> = maps
        .lines()
        .filter(|l| l.contains(".sst") && l.ends_with("(deleted)"))
        .filter_map(|l| l.split_whitespace().nth(5))
        .collect();
    v.sort();
    v.dedup();
    v.len()
}

/// (e): after close a snapshot keeps the whole old engine alive, including
/// its *final* super version: files of tables written after the snapshot's
/// moment stay mapped (disk space not freed) while the snapshot lives.
#[test]
fn a_closed_snapshot_pins_only_its_moment() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.put("a", "1").unwrap();
    db.flush().unwrap();
    let snap = db.snapshot().unwrap(); // pins one table
    for i in 0..3000 {
        db.put(k(i), [7u8; 100]).unwrap();
    }
    db.flush().unwrap();
    let later_tables = ssts(dir.path()).len() - 1;
    db.close().unwrap();
    let before = mapped_deleted_ssts();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.compact_all().unwrap(); // deletes every old table (new instance's handles)
    db.close().unwrap();
    let pinned = mapped_deleted_ssts() - before;
    eprintln!("later tables {later_tables}, deleted-but-mapped by the old snapshot: {pinned}");
    assert!(
        pinned <= 1,
        "snapshot of one table keeps {pinned} deleted tables mapped"
    );
    drop(snap);
}
