//! `Options::wal_recovery`: a strict open refuses a write-ahead log damaged
//! anywhere but its torn tail; a point-in-time open keeps every write
//! before the first break, sets the damaged log and every later one aside
//! as `<name>.dropped`, and says so in `Db::recovery_report`. The logs here
//! are crafted (two logs, one damaged record) so every expectation is
//! exact; `tests/corruption.rs` (`damaged_log`) runs both modes over random
//! damage.
#![allow(clippy::field_reassign_with_default)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::batch_payload as batch;
use sievedb::fs::{FaultFs, RealFs};
use sievedb::manifest::Manifest;
use sievedb::wal::{scan_log, LogWriter};
use sievedb::{Db, Error, Options, WalRecovery};

fn opts(mode: WalRecovery) -> Options {
    let mut o = Options::default();
    o.background_compaction = false;
    o.wal_recovery = mode;
    o
}

fn log_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.log"))
}

fn dropped(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(".dropped");
    PathBuf::from(name)
}

/// Two logs and no tables: the first, written by the engine, holds `a`
/// (sequence 1), `b` (2) and the seal of a clean close; the second,
/// crafted as the next memtable's log, holds `c` (3) and `d` (4). Returns
/// the two logs' paths and the offset of `b`'s record in the first.
fn two_logs(dir: &Path) -> (PathBuf, PathBuf, u64) {
    let db = Db::open(dir, opts(WalRecovery::Strict)).unwrap();
    db.put(b"a", b"1").unwrap();
    db.put(b"b", b"2").unwrap();
    db.close().unwrap();
    let (state, _) = Manifest::recover(&RealFs, dir).unwrap().unwrap();
    assert_eq!(state.last_sequence, 0, "nothing flushed");
    let first = log_path(dir, state.log_number);
    let second = log_path(dir, state.next_file_number);
    let mut w = LogWriter::create(&RealFs, &second).unwrap();
    w.add_record(&batch(3, &[(b"c", b"3")])).unwrap();
    w.add_record(&batch(4, &[(b"d", b"4")])).unwrap();
    w.sync().unwrap();
    let scan = scan_log(&std::fs::read(&first).unwrap(), &first).unwrap();
    assert_eq!(scan.records.len(), 3, "a, b and the seal");
    (first, second, scan.records[1].offset)
}

/// Flips one payload byte of the record at `offset` (its checksum then
/// fails, and intact records follow it).
fn damage_record_at(log: &Path, offset: u64) {
    let mut bytes = std::fs::read(log).unwrap();
    bytes[offset as usize + 10] ^= 0x40;
    std::fs::write(log, bytes).unwrap();
}

fn reads(db: &Db) -> Vec<Option<Vec<u8>>> {
    [b"a", b"b", b"c", b"d", b"e"]
        .iter()
        .map(|k| db.get(k).unwrap())
        .collect()
}

fn some(v: &[u8]) -> Option<Vec<u8>> {
    Some(v.to_vec())
}

#[test]
fn both_modes_replay_intact_logs_whole() {
    let dir = tempfile::tempdir().unwrap();
    two_logs(dir.path());
    let db = Db::open(dir.path(), opts(WalRecovery::PointInTime)).unwrap();
    let want = vec![some(b"1"), some(b"2"), some(b"3"), some(b"4"), None];
    assert_eq!(reads(&db), want);
    let report = db.recovery_report();
    assert_eq!(report.logs_replayed, 2);
    assert_eq!(report.batches_replayed, 4);
    assert_eq!(report.writes_replayed, 4);
    assert_eq!(report.torn_tails, 0);
    assert_eq!(report.stopped, None);
}

#[test]
fn point_in_time_keeps_the_writes_before_the_damage_and_sets_the_rest_aside() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second, b_at) = two_logs(dir.path());
    damage_record_at(&first, b_at);
    let first_bytes = std::fs::read(&first).unwrap();
    let second_bytes = std::fs::read(&second).unwrap();

    // Strict (the default): refused, naming the log and the record, and
    // nothing on disk changes.
    match Db::open(dir.path(), opts(WalRecovery::Strict)) {
        Err(Error::Corruption { file, offset, .. }) => {
            assert_eq!(file, first);
            assert_eq!(offset, Some(b_at));
        }
        other => panic!("strict open of a damaged log: {other:?}"),
    }
    assert_eq!(std::fs::read(&first).unwrap(), first_bytes);
    assert!(!dropped(&first).exists());

    let db = Db::open(dir.path(), opts(WalRecovery::PointInTime)).unwrap();
    assert_eq!(reads(&db), vec![some(b"1"), None, None, None, None]);
    let report = db.recovery_report().clone();
    assert_eq!(report.logs_replayed, 1);
    assert_eq!(report.batches_replayed, 1);
    let stop = report.stopped.expect("the replay stopped");
    assert_eq!(stop.log, first);
    assert_eq!(stop.offset, b_at);
    assert!(stop.reason.contains("checksum"), "{}", stop.reason);
    assert_eq!(stop.set_aside, vec![dropped(&first), dropped(&second)]);
    assert_eq!(
        stop.bytes_dropped,
        (first_bytes.len() as u64 - b_at) + second_bytes.len() as u64
    );
    // The logs are gone, their bytes kept unchanged under the new names.
    assert!(!first.exists() && !second.exists());
    assert_eq!(std::fs::read(dropped(&first)).unwrap(), first_bytes);
    assert_eq!(std::fs::read(dropped(&second)).unwrap(), second_bytes);

    // New writes take numbers after the kept ones and survive a strict
    // reopen; the set-aside copies are neither read nor deleted.
    db.put(b"e", b"5").unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), opts(WalRecovery::Strict)).unwrap();
    assert_eq!(reads(&db), vec![some(b"1"), None, None, None, some(b"5")]);
    assert_eq!(db.recovery_report().stopped, None);
    assert!(db.verify().unwrap().is_ok());
    db.close().unwrap();
    assert!(dropped(&first).exists() && dropped(&second).exists());
}

#[test]
fn a_gap_between_logs_stops_point_in_time_replay_at_the_later_log() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second, _) = two_logs(dir.path());
    // Cut the first log just after `a`: the torn tail alone would be
    // dropped, but `b` (2) is missing before `c` (3) in the second log.
    let bytes = std::fs::read(&first).unwrap();
    let scan = scan_log(&bytes, &first).unwrap();
    let valid_len = scan.records[1].offset;
    let first_bytes = bytes[..valid_len as usize + 5].to_vec();
    std::fs::write(&first, &first_bytes).unwrap();
    let second_len = std::fs::metadata(&second).unwrap().len();

    let strict = Db::open(dir.path(), opts(WalRecovery::Strict));
    assert!(
        matches!(&strict, Err(Error::Corruption { file, .. }) if *file == second),
        "{strict:?}"
    );
    let db = Db::open(dir.path(), opts(WalRecovery::PointInTime)).unwrap();
    assert_eq!(reads(&db), vec![some(b"1"), None, None, None, None]);
    let report = db.recovery_report();
    assert_eq!(report.logs_replayed, 1);
    assert_eq!(report.torn_tails, 1);
    let stop = report.stopped.as_ref().expect("stopped at the gap");
    assert_eq!((stop.log.as_path(), stop.offset), (second.as_path(), 0));
    assert!(stop.reason.contains("lost"), "{}", stop.reason);
    // The first log's torn tail is what is left of the lost write: it is
    // set aside with the later log.
    assert_eq!(stop.set_aside, vec![dropped(&first), dropped(&second)]);
    assert_eq!(stop.bytes_dropped, 5 + second_len);
    assert_eq!(std::fs::read(dropped(&first)).unwrap(), first_bytes);
    assert!(!first.exists() && !second.exists());
}

#[test]
fn damage_at_the_first_record_counts_no_log_as_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let (first, _, _) = two_logs(dir.path());
    damage_record_at(&first, 0);
    let db = Db::open(dir.path(), opts(WalRecovery::PointInTime)).unwrap();
    assert_eq!(reads(&db), vec![None; 5]);
    let report = db.recovery_report();
    assert_eq!((report.logs_replayed, report.batches_replayed), (0, 0));
    let stop = report.stopped.as_ref().expect("stopped");
    assert_eq!((stop.log.as_path(), stop.offset), (first.as_path(), 0));
}

#[test]
fn a_missing_first_log_sets_every_log_aside_under_point_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second, _) = two_logs(dir.path());
    std::fs::remove_file(&first).unwrap();
    assert!(Db::open(dir.path(), opts(WalRecovery::Strict)).is_err());
    let db = Db::open(dir.path(), opts(WalRecovery::PointInTime)).unwrap();
    assert_eq!(reads(&db), vec![None; 5]);
    let report = db.recovery_report();
    assert_eq!((report.logs_replayed, report.batches_replayed), (0, 0));
    let stop = report.stopped.as_ref().expect("stopped");
    assert_eq!((stop.log.as_path(), stop.offset), (second.as_path(), 0));
    db.put(b"a", b"again").unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), opts(WalRecovery::Strict)).unwrap();
    assert_eq!(db.get(b"a").unwrap(), some(b"again"));
}

#[test]
fn a_torn_tail_is_dropped_alike_under_both_modes() {
    let dir = tempfile::tempdir().unwrap();
    let (_, second, _) = two_logs(dir.path());
    let bytes = std::fs::read(&second).unwrap();
    std::fs::write(&second, &bytes[..bytes.len() - 3]).unwrap();
    let work = tempfile::tempdir().unwrap();
    for mode in [WalRecovery::Strict, WalRecovery::PointInTime] {
        let copy = work.path().join(format!("{mode:?}"));
        std::fs::create_dir_all(&copy).unwrap();
        for e in std::fs::read_dir(dir.path()).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), copy.join(e.file_name())).unwrap();
        }
        let db = Db::open(&copy, opts(mode)).unwrap();
        assert_eq!(
            reads(&db),
            vec![some(b"1"), some(b"2"), some(b"3"), None, None],
            "{mode:?}"
        );
        let report = db.recovery_report();
        assert_eq!(
            (report.logs_replayed, report.torn_tails),
            (2, 1),
            "{mode:?}"
        );
        assert_eq!(report.stopped, None, "{mode:?}");
    }
}

/// A power cut at every filesystem call of a point-in-time open: whatever
/// the cut interrupts, the next point-in-time open reads exactly the writes
/// before the damage, and the set-aside copies hold the logs' bytes.
#[test]
fn power_cut_during_a_point_in_time_open_loses_nothing() {
    let base = tempfile::tempdir().unwrap();
    let start = base.path().join("start");
    std::fs::create_dir_all(&start).unwrap();
    let (first, second, b_at) = two_logs(&start);
    damage_record_at(&first, b_at);
    let first_bytes = std::fs::read(&first).unwrap();
    let second_bytes = std::fs::read(&second).unwrap();
    let copy_start = |to: &Path| {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(&start).unwrap() {
            let e = e.unwrap();
            if e.file_name() != "LOCK" {
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        }
    };
    let with_fs = |fs: &FaultFs| {
        let mut o = opts(WalRecovery::PointInTime);
        o.fs = Arc::new(fs.clone());
        o
    };
    // The calls one uninterrupted open makes.
    let probe = base.path().join("probe");
    copy_start(&probe);
    let probe_fs = FaultFs::new();
    drop(Db::open(&probe, with_fs(&probe_fs)).unwrap());
    let calls = probe_fs.counts().mutations;
    assert!(calls > 5, "{calls} calls");
    eprintln!("a point-in-time open makes {calls} filesystem calls");
    for j in 1..=calls + 1 {
        let dir = base.path().join(format!("cut{j}"));
        copy_start(&dir);
        let fs = FaultFs::new();
        fs.cut_power_at(j).unwrap();
        if let Err(e) = Db::open(&dir, with_fs(&fs)) {
            assert!(matches!(e, Error::Io { .. }), "cut {j}: {e}");
        }
        if fs.is_cut() {
            fs.reboot().unwrap();
        } else {
            fs.clear_faults();
        }
        let db = Db::open(&dir, with_fs(&fs)).unwrap_or_else(|e| panic!("cut {j}: {e}"));
        assert_eq!(
            reads(&db),
            vec![some(b"1"), None, None, None, None],
            "cut {j}"
        );
        drop(db);
        let name = |p: &Path| dir.join(p.file_name().unwrap());
        assert_eq!(
            std::fs::read(dropped(&name(&first))).ok(),
            Some(first_bytes.clone()),
            "cut {j}"
        );
        assert_eq!(
            std::fs::read(dropped(&name(&second))).ok(),
            Some(second_bytes.clone()),
            "cut {j}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// `WalRecovery::Auto` (the default) stops only at damaged bytes a power
/// cut can leave: in the last log, not sealed, written without
/// `sync_writes`. Everything else is refused, with a hint.
#[test]
fn auto_stops_only_where_a_power_cut_can_leave_a_hole() {
    let open = |dir: &Path, sync_writes: bool| {
        let mut o = opts(WalRecovery::Auto);
        o.sync_writes = sync_writes;
        Db::open(dir, o)
    };
    let refused = |r: sievedb::Result<Db>, log: &Path, what: &str| match r {
        Err(Error::Corruption { file, reason, .. }) => {
            assert_eq!(file, log, "{what}");
            assert!(reason.contains("PointInTime"), "{what}: {reason}");
        }
        other => panic!("{what}: {other:?}"),
    };
    assert_eq!(Options::default().wal_recovery, WalRecovery::Auto);

    // Damage in the last log, which has no seal: a hole.
    let dir = tempfile::tempdir().unwrap();
    let (_, second, _) = two_logs(dir.path());
    let d_at = {
        let bytes = std::fs::read(&second).unwrap();
        scan_log(&bytes, &second).unwrap().records[0].offset
    };
    damage_record_at(&second, d_at);
    // With `sync_writes` the hole cannot come from a power cut.
    refused(open(dir.path(), true), &second, "sync_writes");
    let db = open(dir.path(), false).unwrap();
    assert_eq!(
        reads(&db),
        vec![some(b"1"), some(b"2"), None, None, None],
        "c's record is damaged, d's after it is given up"
    );
    let stop = db.recovery_report().stopped.clone().expect("stopped");
    assert_eq!((stop.log, stop.offset), (second.clone(), d_at));
    assert_eq!(stop.set_aside, vec![dropped(&second)]);
    drop(db);

    // The same hole with an empty log after it, as an open that crashed
    // between creating its new log and writing its manifest leaves: still
    // the last log with data, still a hole.
    let dir = tempfile::tempdir().unwrap();
    let (_, second, _) = two_logs(dir.path());
    damage_record_at(&second, d_at);
    let n = |p: &Path| -> u64 { p.file_stem().unwrap().to_str().unwrap().parse().unwrap() };
    let empty = log_path(dir.path(), n(&second) + 1);
    std::fs::write(&empty, b"").unwrap();
    let db = open(dir.path(), false).unwrap();
    assert_eq!(
        reads(&db),
        vec![some(b"1"), some(b"2"), None, None, None],
        "an empty later log"
    );
    let stop = db.recovery_report().stopped.clone().expect("stopped");
    assert_eq!((stop.log, stop.offset), (second.clone(), d_at));
    assert_eq!(stop.set_aside, vec![dropped(&second), dropped(&empty)]);
    drop(db);
    // With a byte in the later log, the damaged log is an earlier one.
    let dir = tempfile::tempdir().unwrap();
    let (_, second, _) = two_logs(dir.path());
    damage_record_at(&second, d_at);
    std::fs::write(log_path(dir.path(), n(&second) + 1), b"x").unwrap();
    refused(open(dir.path(), false), &second, "a later log with data");

    // Damage in an earlier log (synced whole at the switch).
    let dir = tempfile::tempdir().unwrap();
    let (first, _, b_at) = two_logs(dir.path());
    damage_record_at(&first, b_at);
    refused(open(dir.path(), false), &first, "an earlier log");

    // Damage in the last log when it ends with its seal (a clean close).
    let dir = tempfile::tempdir().unwrap();
    let (first, second, b_at) = two_logs(dir.path());
    std::fs::remove_file(&second).unwrap();
    damage_record_at(&first, b_at);
    refused(open(dir.path(), false), &first, "a sealed log");
    // ... which point in time opens.
    let db = Db::open(dir.path(), opts(WalRecovery::PointInTime)).unwrap();
    assert_eq!(reads(&db), vec![some(b"1"), None, None, None, None]);
}

/// Regression (found by review, twenty-sixth session): whether a log ends
/// with a seal was read from its last 20 bytes, and a batch record ends with
/// its last value, so a value ending in the bytes of a seal record made an
/// unsealed log with a power-cut hole look sealed, and `Auto` refused it.
/// The seal is now found by reading the records after the damage to the
/// end. The crash is simulated by copying the live log before the database
/// closes (and seals it), then zeroing the middle record as a lost page.
#[test]
fn a_value_ending_in_the_bytes_of_a_seal_does_not_seal_a_log() {
    let tmp = tempfile::tempdir().unwrap();
    let seal_file = tmp.path().join("seal");
    let mut w = LogWriter::create(&RealFs, &seal_file).unwrap();
    w.add_record(&batch(1_000, &[])).unwrap();
    w.sync().unwrap();
    let seal = std::fs::read(&seal_file).unwrap();
    assert_eq!(seal.len(), 20, "a seal record");
    for forged in [false, true] {
        let dir = tmp.path().join(format!("db-{forged}"));
        let db = Db::open(&dir, opts(WalRecovery::Auto)).unwrap();
        db.put(b"a", b"1").unwrap();
        db.put(b"b", vec![7u8; 5000]).unwrap();
        let mut c = vec![9u8; 100];
        if forged {
            c.extend_from_slice(&seal);
        }
        db.put(b"c", &c).unwrap();
        let (state, _) = Manifest::recover(&RealFs, &dir).unwrap().unwrap();
        let live = log_path(&dir, state.log_number);
        let bytes = std::fs::read(&live).unwrap();
        drop(db);
        let scan = scan_log(&bytes, &live).unwrap();
        assert_eq!(scan.records.len(), 3, "a, b, c and no seal yet");
        assert_eq!(bytes.ends_with(&seal), forged);
        let b = &scan.records[1];
        let mut holed = bytes.clone();
        holed[b.offset as usize..b.payload.end].fill(0);
        std::fs::write(&live, &holed).unwrap();
        let db = Db::open(&dir, opts(WalRecovery::Auto))
            .unwrap_or_else(|e| panic!("forged = {forged}: {e}"));
        let stop = db.recovery_report().stopped.clone().expect("stopped");
        assert_eq!(
            (stop.log, stop.offset),
            (live.clone(), b.offset),
            "{forged}"
        );
        assert_eq!(db.get(b"a").unwrap(), some(b"1"));
        assert_eq!(db.get(b"b").unwrap(), None);
        assert_eq!(db.get(b"c").unwrap(), None);
    }
}
