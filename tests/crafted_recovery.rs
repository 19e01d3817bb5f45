//! Write-ahead logs and manifests whose checksums are valid but whose
//! contents are inconsistent with each other (found by review, sixteenth
//! session): each must give `Error::Corruption` (or a correct answer),
//! never a lost or resurrected write.
#![allow(clippy::field_reassign_with_default)]

mod common;

use std::path::{Path, PathBuf};

use common::batch_payload as batch;
use sievedb::fs::RealFs;
use sievedb::key::MAX_SEQUENCE;
use sievedb::manifest::Manifest;
use sievedb::verify::check_log_bytes;
use sievedb::wal::LogWriter;
use sievedb::{Db, Error, Options};

fn opts() -> Options {
    let mut o = Options::default();
    o.background_compaction = false;
    o
}

fn log_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.log"))
}

fn write_log(path: &Path, records: &[Vec<u8>]) -> Vec<u8> {
    let mut w = LogWriter::create(&RealFs, path).unwrap();
    for r in records {
        w.add_record(r).unwrap();
    }
    w.sync().unwrap();
    std::fs::read(path).unwrap()
}

fn is_corruption<T>(r: &sievedb::Result<T>) -> bool {
    matches!(r, Err(Error::Corruption { .. }))
}

/// Opens `dir` and reads `key`: the open (or read) must report
/// `Corruption`, or the key must read as `want`. `what` names the case.
fn assert_corruption_or_reads(dir: &Path, key: &[u8], want: &[u8], what: &str) {
    let r = Db::open(dir, opts()).and_then(|db| db.get(key));
    assert!(
        is_corruption(&r) || matches!(&r, Ok(Some(v)) if v == want),
        "{what}: get({key:?}) = {r:?}"
    );
}

/// The manifest says sequences 1..=2 are used (k=old@1 flushed, then
/// k=new@2 flushed). A log at or above the manifest's log number holding a
/// record that starts at sequence 1 again is inconsistent with it (a legit
/// oldest needed log starts at last_sequence + 1). Open replays it into a
/// level-0 table numbered above every other, which reads consult first:
/// the overwritten value comes back.
#[test]
fn a_log_reusing_sequences_the_manifest_recorded_does_not_resurrect_old_values() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.put(b"k", b"old").unwrap();
    db.flush().unwrap();
    db.put(b"k", b"new").unwrap();
    db.flush().unwrap();
    db.close().unwrap();

    let (state, _) = Manifest::recover(&RealFs, dir.path()).unwrap().unwrap();
    assert_eq!(state.last_sequence, 2);
    // Numbered at or above the manifest's log number: replayed.
    let n = state.next_file_number;
    assert!(n >= state.log_number);
    write_log(&log_path(dir.path(), n), &[batch(1, &[(b"k", b"old")])]);

    assert_corruption_or_reads(
        dir.path(),
        b"k",
        b"new",
        "a log record at sequence 1 (manifest last_sequence 2)",
    );
}

/// The oldest log the manifest still needs is gone while a later log is
/// there: its first record does not start at the manifest's
/// last_sequence + 1, which shows writes were lost; open succeeds anyway
/// and the first log's acknowledged write silently disappears.
#[test]
fn a_gap_between_the_manifest_and_the_first_replayed_log_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.put(b"a", b"1").unwrap(); // sequence 1, in the log the manifest names
    db.close().unwrap(); // the log is sealed (seal carries 2)

    let (state, _) = Manifest::recover(&RealFs, dir.path()).unwrap().unwrap();
    assert_eq!(state.last_sequence, 0);
    let first = state.log_number;
    assert!(log_path(dir.path(), first).exists());
    // The next log, as a memtable switch would have written it.
    let n = state.next_file_number;
    write_log(&log_path(dir.path(), n), &[batch(2, &[(b"b", b"2")])]);
    // The oldest needed log is lost.
    std::fs::remove_file(log_path(dir.path(), first)).unwrap();

    let r = Db::open(dir.path(), opts()).and_then(|db| db.get(b"a"));
    assert!(
        is_corruption(&r),
        "log {first} (sequence 1) missing, log {n} starting at 2: open gave get(a) = {r:?}"
    );
}

/// A manifest whose log number lies past its next file number (no log
/// can have that number yet): open treats every existing log as obsolete,
/// deletes it unread, and the writes in it are gone without an error.
#[test]
fn a_log_number_in_the_future_does_not_silently_drop_the_logs() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.put(b"a", b"1").unwrap();
    db.close().unwrap();

    let (mut state, _) = Manifest::recover(&RealFs, dir.path()).unwrap().unwrap();
    let number = state.next_file_number;
    state.next_file_number = number + 1;
    state.log_number = number + 1000;
    Manifest::create(&RealFs, dir.path(), number, &state).unwrap();

    assert_corruption_or_reads(
        dir.path(),
        b"a",
        b"1",
        &format!(
            "log_number {} > next_file_number {}",
            state.log_number, state.next_file_number
        ),
    );
}

/// `check_log_bytes` (public, "for fuzz targets and tools ... on arbitrary
/// input"): a seal carrying sequence 0 followed by a record makes the
/// chain's error message compute `want - 1` with `want == 0`: a panic in
/// a build with overflow checks (debug, cargo-fuzz), and a message naming
/// sequence 18446744073709551615 in release.
#[test]
fn check_log_bytes_after_a_seal_at_sequence_zero_neither_panics_nor_wraps() {
    let scratch = tempfile::tempdir().unwrap();
    let data = write_log(
        &scratch.path().join("seal0.log"),
        &[batch(0, &[]), batch(5, &[(b"k", b"v")])],
    );
    let report = std::panic::catch_unwind(|| check_log_bytes(&data, Path::new("x.log")))
        .expect("check_log_bytes panicked");
    assert!(!report.is_ok());
    for p in &report.problems {
        assert!(
            !p.reason.contains(&u64::MAX.to_string()),
            "wrapped sequence in: {}",
            p.reason
        );
    }
}

/// Open refuses a batch whose sequence numbers run past 2^56 - 1 (or start
/// at 0); `check_log_bytes`, which the docs call the same check `verify`
/// runs on logs, reports the same log as clean.
#[test]
fn check_log_bytes_reports_sequences_open_refuses() {
    for first_seq in [0u64, MAX_SEQUENCE] {
        let scratch = tempfile::tempdir().unwrap();
        let path = scratch.path().join("seqrange.log");
        let data = write_log(&path, &[batch(first_seq, &[(b"a", b"1"), (b"b", b"2")])]);

        // Open on a database holding just this log: Corruption.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(log_path(dir.path(), 1), &data).unwrap();
        let opened = Db::open(dir.path(), opts());
        assert!(is_corruption(&opened), "open: {opened:?}");

        let report = check_log_bytes(&data, &path);
        assert!(
            !report.is_ok(),
            "batch at sequences {first_seq}..={}: open refuses it, check_log_bytes finds nothing",
            first_seq + 1
        );
    }
}

/// Level-0 tables are read newest first by file number. A manifest that
/// gives the older flush's table the higher number (the two files and
/// records swapped; each record still describes its file exactly) is
/// accepted, and the overwritten value is read back.
#[test]
fn level0_tables_whose_numbers_contradict_their_sequences_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.put(b"k", b"old").unwrap();
    db.flush().unwrap();
    db.put(b"k", b"new").unwrap();
    db.flush().unwrap();
    db.close().unwrap();

    let (mut state, _) = Manifest::recover(&RealFs, dir.path()).unwrap().unwrap();
    assert_eq!(state.levels[0].len(), 2);
    let (a, b) = (state.levels[0][0].clone(), state.levels[0][1].clone());
    assert!(a.file_number < b.file_number && a.largest_seq < b.smallest_seq);
    let sst = |n: u64| dir.path().join(format!("{n:06}.sst"));
    let tmp = dir.path().join("swap.tmp");
    std::fs::rename(sst(a.file_number), &tmp).unwrap();
    std::fs::rename(sst(b.file_number), sst(a.file_number)).unwrap();
    std::fs::rename(&tmp, sst(b.file_number)).unwrap();
    let mut a2 = b.clone();
    a2.file_number = a.file_number;
    let mut b2 = a.clone();
    b2.file_number = b.file_number;
    state.levels[0] = vec![a2, b2];
    let number = state.next_file_number;
    state.next_file_number = number + 1;
    Manifest::create(&RealFs, dir.path(), number, &state).unwrap();

    assert_corruption_or_reads(
        dir.path(),
        b"k",
        b"new",
        "level-0 order contradicting sequences",
    );
}

/// A log record holding an empty key (no call can write one): replay put
/// it in the tables, where scans returned a key that `get` and `delete`
/// refuse, and `check_log_bytes` passed it.
#[test]
fn a_logged_empty_key_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let payload = batch(1, &[(b"", b"ghost"), (b"a", b"1")]);
    let bytes = write_log(&log_path(dir.path(), 1), &[payload]);
    assert!(
        !check_log_bytes(&bytes, Path::new("x.log")).is_ok(),
        "check_log_bytes passed a logged empty key"
    );
    let r = Db::open(dir.path(), opts()).and_then(|db| {
        db.scan::<&[u8], _>(..)?
            .collect::<sievedb::Result<Vec<(Vec<u8>, Vec<u8>)>>>()
    });
    assert!(is_corruption(&r), "open and scan gave {r:?}");
}

/// Sanity (expected to pass): hostile batch headers and CURRENT contents.
#[test]
fn sanity_hostile_batches_and_current() {
    // count = u32::MAX with a tiny payload; key length past the payload.
    let mut huge_count = 1u64.to_le_bytes().to_vec();
    huge_count.extend_from_slice(&u32::MAX.to_le_bytes());
    huge_count.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 0]);
    let mut long_key = batch(1, &[(b"a", b"1")]);
    long_key[13..17].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut long_val = batch(1, &[(b"a", b"1")]);
    long_val[18..22].copy_from_slice(&(u32::MAX - 3).to_le_bytes());
    for payload in [huge_count, long_key, long_val] {
        let dir = tempfile::tempdir().unwrap();
        write_log(&log_path(dir.path(), 1), &[payload]);
        let r = Db::open(dir.path(), opts());
        assert!(is_corruption(&r), "{r:?}");
    }
    for current in [
        &b"../x\n"[..],
        b"/etc/passwd\n",
        b"MANIFEST-000001/..\n",
        b"MANIFEST-000001\ngarbage",
        b"",
        b"MANIFEST-000009\n",
        b"MANIFEST-000001\n\n",
        b"MANIFEST-0000001\n",
    ] {
        let dir = tempfile::tempdir().unwrap();
        Db::open(dir.path(), opts()).unwrap().close().unwrap();
        std::fs::write(dir.path().join("CURRENT"), current).unwrap();
        let r = Db::open(dir.path(), opts());
        assert!(
            is_corruption(&r),
            "{:?}: {r:?}",
            String::from_utf8_lossy(current)
        );
    }
}
