//! `get_with_cost` with frozen memtables held back from flushing: their
//! values and tombstones answer from the memtable at no cost, through the
//! database and a snapshot alike.
#![allow(clippy::field_reassign_with_default)]
mod common;

use std::io;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};

use common::hooked_fs::{FsHooks, Hooked};
use sievedb::fs::{FileSystem as _, RealFs, WritableFile};
use sievedb::{Db, Options, ReadCost, ReadSource};

#[derive(Debug, Default)]
struct Gate {
    closed: Mutex<bool>,
    cv: Condvar,
}

impl FsHooks for Gate {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        if path.extension().is_some_and(|e| e == "sst") {
            let mut g = self.closed.lock().unwrap();
            while *g {
                g = self.cv.wait(g).unwrap();
            }
        }
        RealFs.create(path)
    }
}

#[test]
fn frozen_memtables_answer_with_no_cost() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Hooked(Gate::default()));
    let mut opts = Options::default();
    opts.background_compaction = false;
    opts.memtable_bytes = 1024;
    opts.max_immutable_memtables = 8;
    opts.fs = gate.clone();
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 0..50u32 {
        db.put(format!("t{i:03}"), b"table").unwrap();
    }
    db.flush().unwrap();
    let tables = db.tables();
    *gate.0.closed.lock().unwrap() = true;
    // Fill several memtables: they freeze and wait at the gate.
    for i in 0..40u32 {
        db.put(format!("t{i:03}"), vec![b'm'; 100]).unwrap();
    }
    db.delete("t045").unwrap();
    // 40 writes of ~110 bytes into 1 KiB memtables: several froze, none
    // reached a table.
    assert_eq!(db.tables(), tables);
    let snap = db.snapshot().unwrap();
    let before = db.stats();
    for i in 0..50u32 {
        let k = format!("t{i:03}");
        let (v, cost) = db.get_with_cost(&k).unwrap();
        let (sv, scost) = snap.get_with_cost(&k).unwrap();
        assert_eq!((v.clone(), cost), (sv, scost));
        if i < 40 {
            assert_eq!(v.as_deref(), Some(&[b'm'; 100][..]));
            let mut want = ReadCost::default();
            want.source = ReadSource::Memtable;
            assert_eq!(cost, want, "{k}");
        } else if i == 45 {
            assert_eq!(v, None);
            assert_eq!(cost.source, ReadSource::Memtable);
            assert_eq!(cost.filter_checks, 0);
        } else {
            assert_eq!(v.as_deref(), Some(&b"table"[..]));
            assert!(
                matches!(cost.source, ReadSource::Table { level: 0, .. }),
                "{cost:?}"
            );
        }
    }
    let after = db.stats();
    assert_eq!(after.gets - before.gets, 100);
    assert_eq!(after.filter_checks - before.filter_checks, 2 * 9);
    drop(snap);
    *gate.0.closed.lock().unwrap() = false;
    gate.0.cv.notify_all();
    db.flush().unwrap();
    assert_eq!(db.get("t000").unwrap().as_deref(), Some(&[b'm'; 100][..]));
}
