//! `Db::checkpoint`: a consistent copy of a live database that opens on its
//! own, holds every write acknowledged before the call, whole batches only,
//! shares table files by hard links, and survives a power cut once the call
//! returns.

mod reliab;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use reliab::{batch, check, churn_options};
use sievedb::fs::{FaultFs, FaultKind, FaultOp};
use sievedb::{Db, Error, Options};

fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn unsynced_churn() -> Options {
    Options {
        sync_writes: false,
        ..churn_options()
    }
}

#[test]
fn a_checkpoint_opens_with_the_writes_before_it_and_none_after() {
    let base = tempfile::tempdir().unwrap();
    let (src, dest) = (base.path().join("db"), base.path().join("backup/one"));
    // Compactions only when asked, so no table of the source is deleted
    // while the test compares the files.
    let quiet = Options {
        background_compaction: false,
        ..unsynced_churn()
    };
    let db = Db::open(&src, quiet).unwrap();
    for b in 1..=300 {
        db.write(&batch(b)).unwrap();
    }
    db.compact().unwrap();
    assert!(db.stats().compactions > 0, "tables on several levels");
    let flushes = db.stats().flushes;
    db.checkpoint(&dest).unwrap();
    assert!(
        db.stats().flushes > flushes,
        "the newest batches came from the memtable"
    );
    // The tables are shared, not copied: same inode under both names.
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let tables: Vec<String> = files(&dest)
            .into_iter()
            .filter(|n| n.ends_with(".sst"))
            .collect();
        assert!(!tables.is_empty());
        for name in &tables {
            let a = std::fs::metadata(src.join(name)).unwrap().ino();
            let b = std::fs::metadata(dest.join(name)).unwrap().ino();
            assert_eq!(a, b, "{name} was copied, not linked");
        }
    }
    assert!(!files(&dest).iter().any(|n| n.ends_with(".log")));
    // The source goes on: more batches, then everything rewritten, so the
    // source deletes the names it shared.
    for b in 301..=400 {
        db.write(&batch(b)).unwrap();
    }
    db.compact_all().unwrap();

    let copy = Db::open(&dest, unsynced_churn()).unwrap();
    let found = check(&copy, 300, 300).unwrap();
    assert_eq!(
        found.present.len(),
        300,
        "exactly the batches before the call"
    );
    // Independent: writes to the copy do not reach the source.
    copy.write(&batch(301)).unwrap();
    copy.delete("counter").unwrap();
    copy.compact_all().unwrap();
    drop(copy);
    let found = check(&db, 400, 400).unwrap();
    assert_eq!(found.present.len(), 400);
    drop(db);
    // Reopening both again changes nothing.
    let copy = Db::open(&dest, unsynced_churn()).unwrap();
    assert_eq!(copy.get("counter").unwrap(), None);
    assert_eq!(
        copy.get("m00000301").unwrap(),
        Some(301u64.to_le_bytes().to_vec())
    );
    assert_eq!(copy.get("m00000302").unwrap(), None);
}

#[test]
fn checkpoint_refuses_a_directory_that_is_not_empty() {
    let base = tempfile::tempdir().unwrap();
    let src = base.path().join("db");
    let db = Db::open(&src, unsynced_churn()).unwrap();
    db.write(&batch(1)).unwrap();
    let busy = base.path().join("busy");
    std::fs::create_dir(&busy).unwrap();
    std::fs::write(busy.join("keep.txt"), b"mine").unwrap();
    for dest in [busy.as_path(), src.as_path()] {
        let before = files(dest);
        let err = db.checkpoint(dest).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        assert_eq!(files(dest), before, "nothing written to {}", dest.display());
    }
    assert_eq!(std::fs::read(busy.join("keep.txt")).unwrap(), b"mine");
    // An existing empty directory is fine.
    let empty = base.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    db.checkpoint(&empty).unwrap();
    let copy = Db::open(&empty, unsynced_churn()).unwrap();
    assert_eq!(check(&copy, 1, 1).unwrap().present, vec![1]);
}

/// Regression: two concurrent checkpoints into one empty directory both
/// passed the emptiness check, and the one whose link then found the
/// other's file removed every file it meant to make, the other's included:
/// a checkpoint reported as written that did not open. Checkpoints of one
/// database now run one at a time, so the second finds the directory
/// taken.
#[test]
fn concurrent_checkpoints_into_one_directory_leave_one_whole_copy() {
    let base = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(base.path().join("db"), unsynced_churn()).unwrap());
    for b in 1..=300 {
        db.write(&batch(b)).unwrap();
    }
    let dest = base.path().join("copy");
    std::fs::create_dir(&dest).unwrap();
    let start = Arc::new(std::sync::Barrier::new(2));
    let callers: Vec<_> = (0..2)
        .map(|_| {
            let (db, dest, start) = (Arc::clone(&db), dest.clone(), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                db.checkpoint(&dest)
            })
        })
        .collect();
    let results: Vec<_> = callers.into_iter().map(|t| t.join().unwrap()).collect();
    let ok = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(ok, 1, "{results:?}");
    for r in &results {
        if let Err(e) = r {
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        }
    }
    let copy = Db::open(&dest, unsynced_churn()).unwrap();
    assert_eq!(check(&copy, 300, 300).unwrap().present.len(), 300);
}

#[test]
fn a_checkpoint_taken_under_a_writer_holds_a_prefix_of_whole_batches() {
    let base = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(base.path().join("db"), unsynced_churn()).unwrap());
    let acked = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (db, acked, stop) = (Arc::clone(&db), Arc::clone(&acked), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut b = 0;
            while !stop.load(Ordering::Relaxed) && b < 20_000 {
                b += 1;
                db.write(&batch(b)).unwrap();
                acked.store(b, Ordering::Release);
            }
        })
    };
    let mut taken = Vec::new();
    for i in 0..4 {
        while acked.load(Ordering::Acquire) < 200 * (i + 1) {
            std::thread::yield_now();
        }
        let before = acked.load(Ordering::Acquire);
        let dest = base.path().join(format!("cp{i}"));
        db.checkpoint(&dest).unwrap();
        let after = acked.load(Ordering::Acquire) + 1; // one may be in flight
        taken.push((dest, before, after));
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    for (dest, before, after) in taken {
        let copy = Db::open(&dest, unsynced_churn()).unwrap();
        // Every batch acknowledged before the call, whole; later ones whole
        // or absent, in order.
        let found =
            check(&copy, before, after).unwrap_or_else(|e| panic!("{}: {e}", dest.display()));
        assert!(found.present.len() as u64 >= before);
    }
}

#[test]
fn a_checkpoint_survives_a_power_cut_once_it_returns() {
    let base = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let opts = || Options {
        fs: Arc::new(fs.clone()),
        ..unsynced_churn()
    };
    let db = Db::open(base.path().join("db"), opts()).unwrap();
    for b in 1..=150 {
        db.write(&batch(b)).unwrap();
    }
    // Two directory levels that do not exist yet.
    let dest = base.path().join("new/nested");
    db.checkpoint(&dest).unwrap();
    fs.power_cut();
    drop(db);
    fs.reboot().unwrap();
    let copy = Db::open(&dest, opts()).unwrap();
    assert_eq!(check(&copy, 150, 150).unwrap().present.len(), 150);
}

#[test]
fn a_power_cut_during_a_checkpoint_leaves_no_current_or_a_whole_copy() {
    let base = tempfile::tempdir().unwrap();
    // Background compaction off: every run builds the same tree, so a
    // checkpoint makes the same filesystem calls each time.
    let setup = |name: String| {
        let fs = FaultFs::new();
        let (src, dest) = (
            base.path().join(format!("db-{name}")),
            base.path().join(format!("cp-{name}")),
        );
        let db = Db::open(&src, quiet(&fs)).unwrap();
        for b in 1..=120 {
            db.write(&batch(b)).unwrap();
        }
        db.flush().unwrap();
        (fs, db, src, dest)
    };
    let (fs, db, _, dest) = setup("clean".into());
    let before = fs.counts().mutations;
    db.checkpoint(&dest).unwrap();
    let total = fs.counts().mutations - before;
    assert!(total > 10, "{total} calls");
    // Cut points spread over every call of the checkpoint, the first and
    // last ones included.
    let points = 40.min(total);
    let mut complete = 0;
    let mut absent = 0;
    for i in 0..points {
        let at = 1 + i * (total - 1) / (points - 1);
        let (fs, db, src, dest) = setup(format!("{at}"));
        fs.cut_power_at(at).unwrap();
        let result = db.checkpoint(&dest);
        assert!(fs.is_cut() && result.is_err(), "cut at {at} of {total}");
        drop(db);
        fs.reboot().unwrap();
        // If it named a manifest, the copy is whole; otherwise there is no
        // CURRENT to mistake for one.
        if dest.join("CURRENT").exists() {
            let copy = Db::open(&dest, quiet(&fs)).unwrap();
            assert_eq!(
                check(&copy, 120, 120).unwrap().present.len(),
                120,
                "cut at {at}"
            );
            complete += 1;
        } else {
            absent += 1;
        }
        // The source keeps everything it had flushed.
        let db = Db::open(&src, quiet(&fs)).unwrap();
        assert_eq!(
            check(&db, 120, 120).unwrap().present.len(),
            120,
            "cut at {at}"
        );
    }
    // Under FaultFs a rename is undone unless its directory was synced, and
    // that sync is the checkpoint's last call: no cut inside the call leaves
    // a CURRENT (a real filesystem may keep the rename; the copy is then
    // whole, which the branch above checks).
    assert_eq!((complete, absent), (0, points), "{total} calls");
}

fn quiet(fs: &FaultFs) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        sync_writes: false,
        background_compaction: false,
        ..churn_options()
    }
}

// The next two tests came from a review; each failed before its fix.

/// Regression: an empty destination path listed as "not found" (taken for
/// an absent directory) and created as nothing, so the checkpoint went into
/// the working directory unchecked, and its cleanup could remove files
/// there that it had not made. It is now an `InvalidArgument`.
#[test]
fn checkpoint_to_an_empty_path_is_invalid_argument() {
    let base = tempfile::tempdir().unwrap();
    let db = Db::open(base.path().join("db"), unsynced_churn()).unwrap();
    db.write(&batch(1)).unwrap();
    let err = db.checkpoint("").unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(check(&db, 1, 1).is_ok());
}

#[test]
fn checkpoint_into_a_regular_file_is_invalid_argument() {
    let base = tempfile::tempdir().unwrap();
    let db = Db::open(base.path().join("db"), quiet(&FaultFs::new())).unwrap();
    db.write(&batch(1)).unwrap();
    let file = base.path().join("a_file");
    std::fs::write(&file, b"mine").unwrap();
    let err = db.checkpoint(&file).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "got {err:?}");
    assert_eq!(std::fs::read(&file).unwrap(), b"mine");
}

/// A checkpoint that fails on an I/O error leaves `dest` empty (no
/// `CURRENT` naming a removed manifest, no half-copied table), so a retry
/// into the same `dest` works.
#[test]
fn a_failed_checkpoint_leaves_dest_retryable() {
    let base = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut failed = 0;
    for op in [
        FaultOp::Create,
        FaultOp::Sync,
        FaultOp::Rename,
        FaultOp::SyncDir,
    ] {
        for n in 1..=6u64 {
            let fs = FaultFs::new();
            let src = base.path().join(format!("db-{op:?}-{n}"));
            let dest = base.path().join(format!("cp-{op:?}-{n}"));
            let db = Db::open(&src, quiet(&fs)).unwrap();
            for b in 1..=60 {
                db.write(&batch(b)).unwrap();
            }
            db.flush().unwrap(); // the checkpoint's own flush is a no-op
            fs.fail_nth(Some(op), n, FaultKind::Io).unwrap();
            let first = db.checkpoint(&dest);
            fs.clear_faults();
            if first.is_ok() {
                continue; // fewer than n such calls
            }
            failed += 1;
            let left: Vec<String> = std::fs::read_dir(&dest)
                .map(|d| {
                    d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            if !left.is_empty() {
                failures.push(format!("{op:?} #{n}: left {left:?}"));
            }
            match db.checkpoint(&dest) {
                Ok(()) => {
                    let copy = Db::open(&dest, quiet(&fs)).unwrap();
                    assert_eq!(check(&copy, 60, 60).unwrap().present.len(), 60);
                }
                Err(e) => failures.push(format!(
                    "{op:?} #{n}: first error {:?}; retry: {e}",
                    first.unwrap_err()
                )),
            }
        }
    }
    assert!(
        failed >= 8,
        "only {failed} injected failures hit a checkpoint"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Checkpoints taken before checkpoints wrote log number 0 carried their
/// source's log number and no log. The open's missing-log check applies
/// only when the manifest replay dropped a torn last edit, so such a copy
/// (one intact snapshot record) still opens with everything in it (found by
/// a reviewer: the first version of the check refused it).
#[test]
fn a_checkpoint_naming_its_sources_log_still_opens() {
    use sievedb::fs::RealFs;
    use sievedb::manifest::Manifest;
    let base = tempfile::tempdir().expect("tempdir");
    let src = base.path().join("src");
    let dest = base.path().join("ckpt");
    let db = Db::open(&src, churn_options()).expect("open");
    for b in 1..=50 {
        db.write(&batch(b)).expect("write");
    }
    db.checkpoint(&dest).expect("checkpoint");
    db.close().expect("close");
    // Rewrite the copy's manifest as the earlier code wrote it: the
    // source's log number, which names a log the copy does not have.
    let (src_state, _) = Manifest::recover(&RealFs, &src).unwrap().unwrap();
    let (mut state, old_number) = Manifest::recover(&RealFs, &dest).unwrap().unwrap();
    assert_eq!(state.log_number, 0);
    state.log_number = src_state.log_number;
    assert_ne!(state.log_number, 0);
    let number = state.next_file_number;
    state.next_file_number += 1;
    Manifest::create(&RealFs, &dest, number, &state).expect("manifest");
    std::fs::remove_file(dest.join(format!("MANIFEST-{old_number:06}"))).expect("old manifest");
    let db = Db::open(&dest, churn_options()).expect("a checkpoint of the earlier kind opens");
    check(&db, 50, 50).expect("every batch");
}

/// A destination through a missing directory and `..` (found by review):
/// it listed as absent, was created, and then named an existing directory.
/// Into another non-empty directory the checkpoint wrote its files; into
/// the database's own (`db/sub/..`) it replaced the live `CURRENT`, and the
/// writes that followed were gone at the next open.
#[test]
fn a_destination_through_a_new_directory_and_dotdot_is_checked_once_created() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("db");
    let db = Db::open(&dir, Options::default()).unwrap();
    db.put(b"before", b"1").unwrap();

    let other = base.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("precious.txt"), b"mine").unwrap();
    let into_other = db.checkpoint(other.join("missing").join(".."));
    assert!(
        matches!(into_other, Err(Error::InvalidArgument(_))),
        "{into_other:?}"
    );
    assert_eq!(files(&other), ["missing", "precious.txt"]);

    let into_self = db.checkpoint(dir.join("sub").join(".."));
    assert!(
        matches!(into_self, Err(Error::InvalidArgument(_))),
        "{into_self:?}"
    );
    for i in 0..300u32 {
        db.put(format!("k{i:05}"), b"v").unwrap();
    }
    db.flush().unwrap();
    db.close().unwrap();
    let db = Db::open(&dir, Options::default()).unwrap();
    assert_eq!(db.iter().unwrap().count(), 301);
}

/// A directory whose only entry has a name that is not UTF-8 listed as
/// empty (found by review), and a checkpoint wrote into it.
#[cfg(unix)]
#[test]
fn a_directory_holding_only_a_non_utf8_name_is_not_empty() {
    use std::os::unix::ffi::OsStrExt;
    let base = tempfile::tempdir().unwrap();
    let db = Db::open(base.path().join("db"), Options::default()).unwrap();
    db.put(b"k", b"v").unwrap();
    let dest = base.path().join("photos");
    std::fs::create_dir(&dest).unwrap();
    std::fs::write(
        dest.join(std::ffi::OsStr::from_bytes(b"holiday-\xff.jpg")),
        b"precious",
    )
    .unwrap();
    let r = db.checkpoint(&dest);
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    assert_eq!(std::fs::read_dir(&dest).unwrap().count(), 1, "written into");
}

/// The highest file number among the database files in `dir` (tables,
/// logs, manifests).
fn highest_file_number(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("read_dir")
        .filter_map(|e| {
            let name = e.expect("entry").file_name().into_string().ok()?;
            name.trim_start_matches("MANIFEST-")
                .get(..6)?
                .parse::<u64>()
                .ok()
        })
        .max()
        .expect("the database's files")
}

/// A checkpoint made inside the database directory under a name the engine
/// uses for its own files (or any directory so named) is not taken for a
/// log to replay or a file to delete: the database still opens, and
/// `verify` is clean (the open failed with "Is a directory"; found by
/// review, twenty-fifth session). A directory named `CURRENT.tmp` still
/// stops the open, with `Error::Io` naming it: the open must write a file
/// of that name.
/// Regression (found by review, twenty-sixth session): a directory named
/// like a file the engine has yet to create made that create fail. A
/// checkpoint inside the database under such a name is refused, and an
/// open counts such directories' numbers as used, so that later files
/// take numbers past them.
#[test]
fn directories_named_like_future_files_do_not_collide() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::default()).expect("open");
    db.put(b"k", b"v").expect("put");
    for name in [
        "000100.log",
        "000101.sst",
        "MANIFEST-000102",
        "000103.log.dropped",
    ] {
        match db.checkpoint(dir.path().join(name)) {
            Err(Error::InvalidArgument(why)) => {
                assert!(why.contains("choose another name"), "{why}")
            }
            other => panic!("{name}: {other:?}"),
        }
        assert!(!dir.path().join(name).exists(), "{name}: nothing created");
    }
    // Another name inside the database is still a checkpoint.
    db.checkpoint(dir.path().join("backup"))
        .expect("checkpoint");
    drop(db);
    // Directories named for the next file numbers, then an open and
    // enough flushes to pass them.
    let highest = highest_file_number(dir.path());
    for n in highest + 1..=highest + 12 {
        std::fs::create_dir(dir.path().join(format!("{n:06}.log"))).expect("mkdir");
        std::fs::create_dir(dir.path().join(format!("{n:06}.sst"))).expect("mkdir");
    }
    let db = Db::open(dir.path(), Options::default()).expect("reopen");
    for i in 0..20u32 {
        db.put(i.to_be_bytes(), b"v").expect("put");
        db.flush().expect("flush");
    }
    drop(db);
    let db = Db::open(dir.path(), Options::default()).expect("reopen");
    assert_eq!(db.get(b"k").expect("get"), Some(b"v".to_vec()));
    assert_eq!(
        db.get(19u32.to_be_bytes()).expect("get"),
        Some(b"v".to_vec())
    );
}

/// Regression (found by review, twenty-eighth session): the check above
/// looked only at the destination's own name, so `db/000009.log/cp` made a
/// directory `db/000009.log` on the way, and the memtable switch that
/// reached log 9 failed and poisoned the database; `db/CURRENT.tmp` made
/// the next open fail. Every directory a checkpoint would create inside
/// the database directory is now checked, and so are the names `CURRENT`,
/// `CURRENT.tmp` and `LOCK`; nothing is created when one is refused.
#[test]
fn no_directory_on_the_way_takes_an_engine_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::default()).expect("open");
    db.put(b"k", b"v").expect("put");
    db.flush().expect("flush");
    let highest = highest_file_number(dir.path());
    let mut refused = Vec::new();
    for n in highest + 1..=highest + 4 {
        for ext in ["log", "sst", "log.dropped"] {
            refused.push(dir.path().join(format!("{n:06}.{ext}")).join("cp"));
            refused.push(dir.path().join(format!("{n:06}.{ext}")).join("a").join("b"));
        }
        refused.push(dir.path().join(format!("MANIFEST-{n:06}")).join("cp"));
    }
    // (`CURRENT/cp` and `LOCK/cp` fail anyway: those are files.)
    for name in ["CURRENT", "CURRENT.tmp", "LOCK"] {
        refused.push(dir.path().join(name));
    }
    refused.push(dir.path().join("CURRENT.tmp").join("cp"));
    // Through a relative spelling of the database directory too.
    refused.push(dir.path().join("sub").join("..").join("CURRENT.tmp"));
    for dest in &refused {
        match db.checkpoint(dest) {
            Err(Error::InvalidArgument(why)) => {
                assert!(why.contains("choose another name"), "{why}")
            }
            other => panic!("{}: {other:?}", dest.display()),
        }
    }
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    for name in &names {
        assert!(
            !dir.path().join(name).is_dir(),
            "{name}: a refused checkpoint created a directory"
        );
    }
    // The database goes on: flushes past those numbers, a reopen.
    for i in 0..12u32 {
        db.put(i.to_be_bytes(), b"v").expect("put");
        db.flush().expect("flush");
    }
    // A name below a directory of another name is still a checkpoint.
    db.checkpoint(dir.path().join("backups").join("000001.log"))
        .expect("a numbered name below another directory");
    drop(db);
    let db = Db::open(dir.path(), Options::default()).expect("reopen");
    assert_eq!(db.get(b"k").expect("get"), Some(b"v".to_vec()));
    assert_eq!(
        db.get(11u32.to_be_bytes()).expect("get"),
        Some(b"v".to_vec())
    );
    let copy = Db::open(
        dir.path().join("backups").join("000001.log"),
        Options::default(),
    )
    .expect("open the checkpoint");
    assert_eq!(copy.get(b"k").expect("get"), Some(b"v".to_vec()));
}

#[test]
fn a_directory_named_like_an_engine_file_is_left_alone() {
    for name in [
        "000100.sst",
        "000100.log",
        "000001.log",
        "000100.log.dropped",
        "MANIFEST-000100",
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), Options::default()).expect("open");
        db.put(b"k", b"v").expect("put");
        // A checkpoint may not take such a name inside the database
        // (below); a directory made by other means is left alone.
        std::fs::create_dir(dir.path().join(name)).expect("mkdir");
        std::fs::write(dir.path().join(name).join("x"), b"x").expect("a file in it");
        drop(db);
        let db = Db::open(dir.path(), Options::default())
            .unwrap_or_else(|e| panic!("{name}: reopen: {e}"));
        assert_eq!(db.get(b"k").expect("get"), Some(b"v".to_vec()), "{name}");
        let report = db.verify().expect("verify");
        assert!(report.is_ok(), "{name}: {:?}", report.problems);
        drop(db);
        assert!(
            dir.path().join(name).is_dir(),
            "{name}: the directory is kept"
        );
    }
}
