//! `FaultFs` with a database opened by a one-component relative path. Its
//! own test binary: the test changes the process's working directory.

use sievedb::fs::FaultFs;
use sievedb::{Db, Options};

/// Regression (found by review, fifteenth session): `Db::open("db")` syncs
/// `"."` to make the new directory durable, but `FaultFs` compared the
/// directory's parent, `""`, with `"."` and never counted it durable, so a
/// power cut deleted the whole database, synced writes included.
#[test]
fn a_relative_database_directory_synced_via_dot_survives_a_power_cut() {
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
