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

/// One write of a test: a put (`Some(value)`) or a deletion (`None`).
type Write<'a> = (&'a [u8], Option<&'a [u8]>);

/// Flushes each group of writes into its own level-0 table, closes, and
/// returns the manifest's state (tables in flush order at level 0).
fn flushed_tables(dir: &Path, groups: &[&[Write]]) -> sievedb::manifest::ManifestState {
    let db = Db::open(dir, opts()).unwrap();
    for group in groups {
        for (key, value) in group.iter() {
            match value {
                Some(v) => db.put(key, v).unwrap(),
                None => db.delete(key).unwrap(),
            }
        }
        db.flush().unwrap();
    }
    db.close().unwrap();
    let (state, _) = Manifest::recover(&RealFs, dir).unwrap().unwrap();
    assert_eq!(state.levels[0].len(), groups.len());
    state
}

/// Writes `state` as a new manifest (valid checksums, every record exact).
fn install(dir: &Path, mut state: sievedb::manifest::ManifestState) {
    let number = state.next_file_number;
    state.next_file_number = number + 1;
    Manifest::create(&RealFs, dir, number, &state).unwrap();
}

/// Moves table `i` of level 0 to `level`.
fn move_down(state: &mut sievedb::manifest::ManifestState, i: usize, level: usize) {
    let mut t = state.levels[0].remove(i);
    t.level = level as u32;
    if state.levels.len() <= level {
        state.levels.resize(level + 1, Vec::new());
    }
    state.levels[level].push(t);
}

/// The problems `verify` reports about the order of a key's versions.
fn order_problems(dir: &Path) -> Vec<String> {
    let db = Db::open(dir, opts()).unwrap();
    let report = db.verify().unwrap();
    db.close().unwrap();
    report
        .problems
        .iter()
        .map(|p| p.reason.clone())
        .filter(|r| r.starts_with("key "))
        .collect()
}

/// A manifest that puts a newer table below an older one of the same key
/// (every file and record intact): gets consult the older table first and
/// returned the overwritten value while scans returned the new one, and
/// `verify` reported nothing (found by review, thirty-first session).
#[test]
fn verify_reports_a_newer_version_below_an_older_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut state = flushed_tables(
        dir.path(),
        &[&[(b"k", Some(b"old"))], &[(b"k", Some(b"new"))]],
    );
    let (older, newer) = (
        state.levels[0][0].file_number,
        state.levels[0][1].file_number,
    );
    move_down(&mut state, 1, 1);
    install(dir.path(), state);
    let problems = order_problems(dir.path());
    assert_eq!(problems.len(), 1, "{problems:?}");
    let p = &problems[0];
    assert!(
        p.contains("\"k\"")
            && p.contains(&format!("table {older} (level 0)"))
            && p.contains(&format!("table {newer} (level 1)")),
        "{p}"
    );
}

/// The same with a deletion: the tombstone moved below the put it deletes
/// would bring the key back for gets.
#[test]
fn verify_reports_a_deletion_below_the_value_it_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let mut state = flushed_tables(
        dir.path(),
        &[&[(b"a", Some(b"1")), (b"k", Some(b"v"))], &[(b"k", None)]],
    );
    move_down(&mut state, 1, 2);
    install(dir.path(), state);
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(
        db.get(b"k").unwrap(),
        Some(b"v".to_vec()),
        "the state the test builds"
    );
    db.close().unwrap();
    assert_eq!(order_problems(dir.path()).len(), 1);
}

/// The same version in two tables (a table file copied under another
/// number and listed at another level).
#[test]
fn verify_reports_one_version_in_two_tables() {
    let dir = tempfile::tempdir().unwrap();
    let mut state = flushed_tables(dir.path(), &[&[(b"k", Some(b"v"))]]);
    let mut copy = state.levels[0][0].clone();
    let number = state.next_file_number;
    state.next_file_number += 1;
    let sst = |n: u64| dir.path().join(format!("{n:06}.sst"));
    std::fs::copy(sst(copy.file_number), sst(number)).unwrap();
    copy.file_number = number;
    copy.level = 1;
    state.levels.resize(state.levels.len().max(2), Vec::new());
    state.levels[1].push(copy);
    install(dir.path(), state);
    let problems = order_problems(dir.path());
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("both hold its version"),
        "{}",
        problems[0]
    );
}

/// What compaction legitimately leaves: a deeper table newer than a
/// shallower one whose key range covers it, with no key in common. Not a
/// problem, and reads answer from the right tables.
#[test]
fn verify_accepts_interleaved_sequences_without_a_shared_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut state = flushed_tables(
        dir.path(),
        &[
            &[(b"a", Some(b"1")), (b"z", Some(b"1"))],
            &[(b"m", Some(b"2"))],
            &[(b"a", Some(b"3")), (b"b", None)],
        ],
    );
    // Level 0: the newest {a, b}; level 1: the oldest {a, z}; level 2:
    // {m}, newer than level 1's table and inside its key range.
    move_down(&mut state, 1, 2);
    move_down(&mut state, 0, 1);
    install(dir.path(), state);
    assert_eq!(order_problems(dir.path()), Vec::<String>::new());
    let db = Db::open(dir.path(), opts()).unwrap();
    assert!(db.verify().unwrap().is_ok());
    for (key, want) in [
        (b"a", Some(b"3")),
        (b"m", Some(b"2")),
        (b"z", Some(b"1")),
        (b"b", None),
    ] {
        assert_eq!(db.get(key).unwrap(), want.map(|w| w.to_vec()));
    }
}

/// Many keys out of order are reported one by one up to a limit, then
/// counted, each key once however many of its versions are misplaced
/// (the count was of misplaced pairs of versions; found by review,
/// thirty-first session).
#[test]
fn verify_counts_keys_out_of_order_past_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let keys: Vec<Vec<u8>> = (0..20u32)
        .map(|i| format!("key{i:03}").into_bytes())
        .collect();
    let versions =
        |v: &'static [u8]| -> Vec<Write> { keys.iter().map(|k| (k.as_slice(), Some(v))).collect() };
    let (v1, v2, v3) = (versions(b"v1"), versions(b"v2"), versions(b"v3"));
    let mut state = flushed_tables(dir.path(), &[&v1, &v2, &v3]);
    // Gets meet the oldest (level 0), then the middle (level 1), then the
    // newest (level 2): two misplaced versions a key.
    move_down(&mut state, 2, 2);
    move_down(&mut state, 1, 1);
    install(dir.path(), state);
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.get(b"key000").unwrap().as_deref(), Some(&b"v1"[..]));
    let reasons: Vec<String> = db
        .verify()
        .unwrap()
        .problems
        .into_iter()
        .map(|p| p.reason)
        .collect();
    assert_eq!(reasons.len(), 17, "{reasons:?}");
    let mut named: Vec<&str> = reasons[..16]
        .iter()
        .map(|r| r.split(':').next().unwrap())
        .collect();
    named.dedup();
    assert_eq!(named.len(), 16, "{reasons:?}");
    assert!(reasons[16].starts_with("4 more keys"), "{}", reasons[16]);
}
