//! Databases opened by a relative path. Its own test binary: the tests
//! change the process's working directory (one at a time: `CWD`).

use sievedb::fs::FaultFs;
use sievedb::{Db, Options};

/// Held by each test while it uses the working directory.
static CWD: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

/// Regression (found by review, fifteenth session): `Db::open("db")` syncs
/// `"."` to make the new directory durable, but `FaultFs` compared the
/// directory's parent, `""`, with `"."` and never counted it durable, so a
/// power cut deleted the whole database, synced writes included.
#[test]
fn a_relative_database_directory_synced_via_dot_survives_a_power_cut() {
    let _cwd = CWD.lock();
    let tmp = tempfile::tempdir().expect("tempdir");
    std::env::set_current_dir(tmp.path()).expect("chdir");
    let fs = FaultFs::new();
    let opts = Options {
        sync_writes: true,
        fs: std::sync::Arc::new(fs.clone()),
        ..Options::default()
    };
    let db = Db::open("db", opts.clone()).expect("open");
    db.put(b"k", b"v").expect("put (synced, acknowledged)");
    fs.power_cut();
    drop(db);
    fs.reboot().expect("reboot");
    assert!(
        std::path::Path::new("db").is_dir(),
        "the database directory vanished although its parent (.) was synced"
    );
    let db = Db::open("db", opts).expect("reopen");
    assert_eq!(db.get(b"k").expect("get").as_deref(), Some(&b"v"[..]));
}

/// Regression (found by review, sixteenth session): the engine joined every
/// file name to the relative path it was opened with, so after the process
/// changed its working directory new logs and tables went to another
/// directory (or failed): the manifest named tables that were not there,
/// and every write acknowledged after the change was lost. `Db::open` now
/// makes the path absolute.
#[test]
fn a_database_opened_by_a_relative_path_stays_put_after_a_chdir() {
    let _cwd = CWD.lock();
    let a = tempfile::tempdir().expect("tempdir");
    let b = tempfile::tempdir().expect("tempdir");
    // Another "db" directory where the working directory moves to.
    std::fs::create_dir(b.path().join("db")).expect("mkdir");
    std::env::set_current_dir(a.path()).expect("chdir");
    let opts = Options {
        sync_writes: true,
        memtable_bytes: 1024,
        ..Options::default()
    };
    let db = Db::open("db", opts.clone()).expect("open");
    db.put(b"before", b"1").expect("put");
    std::env::set_current_dir(b.path()).expect("chdir");
    for i in 0..100u32 {
        db.put(format!("k{i:04}"), [7u8; 100])
            .expect("put after the chdir");
    }
    db.flush().expect("flush");
    assert_eq!(db.path(), a.path().join("db"));
    drop(db);
    let stray: Vec<_> = std::fs::read_dir(b.path().join("db"))
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(stray.is_empty(), "files written elsewhere: {stray:?}");
    let db = Db::open(a.path().join("db"), opts).expect("reopen");
    assert_eq!(db.get(b"before").expect("get").as_deref(), Some(&b"1"[..]));
    for i in 0..100u32 {
        assert_eq!(
            db.get(format!("k{i:04}")).expect("get"),
            Some(vec![7u8; 100]),
            "acknowledged write {i}"
        );
    }
}
