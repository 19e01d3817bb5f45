//! Power cuts and I/O errors over a workload of overwrites and deletes of
//! 48 keys, so that tombstone dropping, flush, compaction and the manifest
//! roll are checked for resurrected deletes and lost overwrites (the sweeps
//! of `tests/fault.rs` and `tests/crash.rs` put fresh keys only). Written
//! by a review in the twenty-fifth session; it found no bug.
//!
//! After every cut or fault and a reopen, the database must hold exactly
//! the model after the last acknowledged batch or after the attempted one
//! (with `sync_writes = false`: after some batch from the last flush on),
//! and `verify` must find nothing. Snapshots taken under constant flushes
//! and compactions must equal the model at their sequence number.
//!
//! `SIEVEDB_FAULT_POINTS` (default 60) sets the points per sweep,
//! `SIEVEDB_STRESS_SECS` (default 3) the snapshot test's length.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::Rng;
use sievedb::fs::{FaultCounts, FaultFs, FaultKind, FaultOp, Writeback};
use sievedb::{Db, Options, WriteBatch};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const OPS: usize = 500;
const KEYS: u64 = 48;

fn options(fs: &FaultFs, background: bool) -> Options {
    Options {
        sync_writes: true,
        memtable_bytes: 4 << 10,
        table_bytes: 2 << 10,
        level1_bytes: 4 << 10,
        level_size_multiplier: 2,
        num_levels: 4,
        level0_compaction_trigger: 2,
        level0_stop_writes: 4,
        block_bytes: 256,
        manifest_roll_bytes: 1024,
        background_compaction: background,
        fs: Arc::new(fs.clone()),
        ..Options::default()
    }
}

fn key(k: u64) -> Vec<u8> {
    format!("k{k:03}").into_bytes()
}

/// The batches, and the model state after each (states[0] is empty).
fn workload(seed: u64) -> (Vec<WriteBatch>, Vec<Model>) {
    let mut rng = Rng(seed);
    let mut states = vec![Model::new()];
    let mut batches = Vec::new();
    for i in 0..OPS {
        let mut m = states.last().unwrap().clone();
        let mut b = WriteBatch::new();
        for _ in 0..1 + rng.below(3) {
            let k = rng.below(KEYS);
            if rng.below(3) == 0 {
                b.delete(key(k));
                m.remove(&key(k));
            } else {
                let mut v = format!("v{i}-{k}-").into_bytes();
                v.resize(v.len() + rng.below(120) as usize, b'x');
                b.put(key(k), &v);
                m.insert(key(k), v);
            }
        }
        batches.push(b);
        states.push(m);
    }
    (batches, states)
}

/// Runs the batches until one call fails: (acked, attempted).
fn run(db: &Db, batches: &[WriteBatch]) -> (usize, usize, Option<sievedb::Error>) {
    for (i, b) in batches.iter().enumerate() {
        if let Err(e) = db.write(b) {
            return (i, i + 1, Some(e));
        }
        if i % 53 == 52 {
            if let Err(e) = db.flush() {
                return (i + 1, i + 1, Some(e));
            }
        }
        if i % 131 == 130 {
            if let Err(e) = db.compact() {
                return (i + 1, i + 1, Some(e));
            }
        }
    }
    (batches.len(), batches.len(), None)
}

fn contents(db: &Db) -> Result<Model, String> {
    let mut seen = Model::new();
    for item in db.iter().map_err(|e| format!("iter: {e}"))? {
        let (k, v) = item.map_err(|e| format!("scan: {e}"))?;
        seen.insert(k, v);
    }
    for k in 0..KEYS {
        let got = db.get(key(k)).map_err(|e| format!("get: {e}"))?;
        if got.as_ref() != seen.get(&key(k)) {
            return Err(format!("get(k{k}) disagrees with the scan"));
        }
    }
    Ok(seen)
}

fn check(db: &Db, states: &[Model], acked: usize, attempted: usize, what: &str) {
    let seen = contents(db).unwrap_or_else(|e| panic!("{what}: {e}"));
    if seen != states[acked] && seen != states[attempted] {
        let diff: Vec<String> = (0..KEYS)
            .filter(|&k| seen.get(&key(k)) != states[acked].get(&key(k)))
            .map(|k| {
                format!(
                    "k{k:03}: got {:?} want {:?}",
                    seen.get(&key(k))
                        .map(|v| String::from_utf8_lossy(&v[..v.len().min(12)]).into_owned()),
                    states[acked]
                        .get(&key(k))
                        .map(|v| String::from_utf8_lossy(&v[..v.len().min(12)]).into_owned())
                )
            })
            .collect();
        panic!("{what}: state is neither after op {acked} nor {attempted}: {diff:?}");
    }
}

fn total_calls(dir: &Path, batches: &[WriteBatch], background: bool) -> sievedb::fs::FaultCounts {
    let fs = FaultFs::new();
    let db = Db::open(dir, options(&fs, background)).expect("open");
    let (acked, _, err) = run(&db, batches);
    assert!(err.is_none() && acked == batches.len());
    let s = db.stats();
    assert!(s.compactions >= 2 && s.flushes >= 10, "{s:?}");
    db.close().expect("close");
    fs.counts()
}

fn points() -> u64 {
    std::env::var("SIEVEDB_FAULT_POINTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60)
}

/// The kinds of call a fault is aimed at in turn, each with how many such
/// calls the clean run `clean` made: any call, then appends, syncs,
/// directory syncs, renames, creates and removes.
fn call_kinds(clean: &FaultCounts) -> [(Option<FaultOp>, u64); 7] {
    [
        (None, clean.mutations),
        (Some(FaultOp::Append), clean.appends),
        (Some(FaultOp::Sync), clean.syncs),
        (Some(FaultOp::SyncDir), clean.dir_syncs),
        (Some(FaultOp::Rename), clean.renames),
        (Some(FaultOp::Create), clean.creates),
        (Some(FaultOp::Remove), clean.removes),
    ]
}

/// Opens `dir` and runs `batches` until a call fails: (acked, attempted),
/// (0, 0) if the open itself failed. With `read_after`, the database must
/// still answer reads afterwards (a poisoned one does).
fn open_and_run(
    dir: &Path,
    opts: Options,
    batches: &[WriteBatch],
    read_after: bool,
    what: &str,
) -> (usize, usize) {
    match Db::open(dir, opts) {
        Ok(db) => {
            let (acked, attempted, _) = run(&db, batches);
            if read_after {
                contents(&db).unwrap_or_else(|e| panic!("{what}: read after the fault: {e}"));
            }
            (acked, attempted)
        }
        Err(_) => (0, 0),
    }
}

/// Reopens `dir` after a cut or fault and checks it: the model after batch
/// `acked` or `attempted`, and `verify` clean. Removes `dir` afterwards.
fn reopen_and_check(
    dir: &Path,
    opts: Options,
    states: &[Model],
    (acked, attempted): (usize, usize),
    what: &str,
) {
    let db = Db::open(dir, opts).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    check(&db, states, acked, attempted, what);
    let report = db.verify().expect("verify");
    assert!(report.is_ok(), "{what}: {:?}", report.problems);
    drop(db);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn power_cuts_with_deletes() {
    for background in [false, true] {
        let base = tempfile::tempdir().expect("tempdir");
        let (batches, states) = workload(7 + background as u64);
        let total = total_calls(&base.path().join("clean"), &batches, background).mutations;
        let n = points();
        for i in 0..n {
            let at = 1 + (total * i) / n + i % 3;
            let dir = base.path().join(format!("cut{i}"));
            let fs = FaultFs::new();
            fs.cut_power_at(at).expect("cut");
            let what = format!("bg={background} cut at {at} of {total}");
            let (acked, attempted) =
                open_and_run(&dir, options(&fs, background), &batches, false, &what);
            fs.reboot().expect("reboot");
            let opts = options(&fs, background);
            reopen_and_check(&dir, opts, &states, (acked, attempted), &what);
        }
    }
}

#[test]
fn io_errors_with_deletes() {
    for background in [false, true] {
        let base = tempfile::tempdir().expect("tempdir");
        let (batches, states) = workload(11 + background as u64);
        let clean = total_calls(&base.path().join("clean"), &batches, background);
        let n = points();
        for i in 0..n {
            let kind = if i % 2 == 0 {
                FaultKind::DiskFull
            } else {
                FaultKind::Io
            };
            let (op, of) = call_kinds(&clean)[i as usize % 7];
            let at = 1 + ((of * i) / n + i % 5) % of.max(1);
            let dir = base.path().join(format!("err{i}"));
            let fs = FaultFs::new();
            fs.fail_nth(op, at, kind).expect("plan");
            let what = format!("bg={background} {kind:?} on {op:?} {at} of {of}");
            let (acked, attempted) =
                open_and_run(&dir, options(&fs, background), &batches, true, &what);
            if i % 3 == 2 {
                fs.power_cut();
                fs.reboot().expect("reboot");
            }
            fs.clear_faults();
            let opts = options(&fs, background);
            reopen_and_check(&dir, opts, &states, (acked, attempted), &what);
        }
    }
}

/// Snapshots taken while one writer overwrites and deletes under constant
/// flushes and background compactions must equal the model at their
/// sequence number, also when read again after more churn.
#[test]
fn snapshots_under_background_churn_with_deletes() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::RwLock;
    let base = tempfile::tempdir().expect("tempdir");
    let mut opts = options(&FaultFs::new(), true);
    opts.sync_writes = false;
    opts.fs = Arc::new(sievedb::fs::RealFs);
    let db = Db::open(base.path().join("db"), opts).expect("open");
    let (batches, states) = workload(99);
    let secs: u64 = std::env::var("SIEVEDB_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    // Sequence number -> index of the model state, filled in by the writer
    // as it goes.
    let by_seq: RwLock<BTreeMap<u64, usize>> = RwLock::new(BTreeMap::from([(0, 0)]));
    let stop = AtomicBool::new(false);
    let (rounds, checked) = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut seq = 0u64;
            let mut rounds = 0u64;
            let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
            // Repeat the workload; a pass deleting every key brings back
            // state 0, so the states repeat by construction.
            while std::time::Instant::now() < until {
                for (i, b) in batches.iter().enumerate() {
                    db.write(b).expect("write");
                    seq += b.len() as u64;
                    by_seq.write().unwrap().insert(seq, i + 1);
                    if i % 97 == 96 {
                        db.flush().expect("flush");
                    }
                }
                let mut wipe = WriteBatch::new();
                for k in 0..KEYS {
                    wipe.delete(key(k));
                }
                db.write(&wipe).expect("wipe");
                seq += KEYS;
                by_seq.write().unwrap().insert(seq, 0);
                rounds += 1;
            }
            stop.store(true, Ordering::SeqCst);
            rounds
        });
        let readers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let mut checked = 0u64;
                    let mut held = Vec::new();
                    while !stop.load(Ordering::SeqCst) {
                        let snap = db.snapshot().expect("snapshot");
                        let seq = snap.sequence();
                        while by_seq
                            .read()
                            .unwrap()
                            .keys()
                            .next_back()
                            .copied()
                            .unwrap_or(0)
                            < seq
                        {
                            std::thread::yield_now();
                        }
                        let idx = *by_seq.read().unwrap().get(&seq).unwrap_or_else(|| {
                            panic!("snapshot sequence {seq} is not a batch boundary")
                        });
                        let mut got = Model::new();
                        for item in snap.iter().expect("iter") {
                            let (k, v) = item.expect("scan");
                            got.insert(k, v);
                        }
                        assert_eq!(got, states[idx], "snapshot at {seq} (state {idx}) scan");
                        held.push((snap, idx));
                        if held.len() > 4 {
                            let (old, idx) = held.remove(0);
                            for k in 0..KEYS {
                                assert_eq!(
                                    old.get(key(k)).expect("get").as_ref(),
                                    states[idx].get(&key(k)),
                                    "old snapshot at {} (state {idx}) get k{k}",
                                    old.sequence()
                                );
                            }
                            let mut got = Model::new();
                            for item in old.iter().expect("iter") {
                                let (k, v) = item.expect("scan");
                                got.insert(k, v);
                            }
                            assert_eq!(got, states[idx], "old snapshot rescan");
                        }
                        checked += 1;
                    }
                    checked
                })
            })
            .collect();
        let rounds = writer.join().expect("writer");
        let checked: u64 = readers.into_iter().map(|r| r.join().expect("reader")).sum();
        (rounds, checked)
    });
    let stats = db.stats();
    eprintln!(
        "{rounds} rounds, {checked} snapshots checked, {} flushes, {} compactions",
        stats.flushes, stats.compactions
    );
    assert!(
        checked > 0 && stats.compactions > 0,
        "the test checked nothing"
    );
}

fn variant(opts: &mut Options, v: u64) {
    match v % 4 {
        0 => {}
        1 => {
            opts.max_immutable_memtables = 1;
            opts.compaction_pick = sievedb::CompactionPick::MostDropped;
        }
        2 => {
            opts.num_levels = 2;
            opts.max_immutable_memtables = 3;
        }
        _ => {
            opts.last_level_filters = false;
            opts.prefix_filter_len = Some(2);
            opts.level0_compaction_trigger = 1;
            opts.level0_stop_writes = 1;
        }
    }
}

/// Unsynced writes: after a power cut (half of them with the log's pages
/// written back out of order) the state is the model after some batch
/// between the last flush and the last attempted one.
#[test]
fn unsynced_power_cuts_with_deletes_keep_a_prefix() {
    for v in 0..4u64 {
        for background in [false, true] {
            let base = tempfile::tempdir().expect("tempdir");
            let (batches, states) = workload(1000 + v);
            let mk = |fs: &FaultFs| {
                let mut o = options(fs, background);
                o.sync_writes = false;
                variant(&mut o, v);
                o
            };
            let run_unsynced = |db: &Db| -> (usize, usize) {
                let mut durable = 0;
                for (i, b) in batches.iter().enumerate() {
                    if db.write(b).is_err() {
                        return (durable, i + 1);
                    }
                    if i % 53 == 52 {
                        if db.flush().is_err() {
                            return (durable, i + 1);
                        }
                        durable = i + 1;
                    }
                    if i % 131 == 130 && db.compact().is_err() {
                        return (durable, i + 1);
                    }
                }
                (durable, batches.len())
            };
            let total = {
                let fs = FaultFs::new();
                let db = Db::open(base.path().join("clean"), mk(&fs)).expect("open");
                run_unsynced(&db);
                drop(db);
                fs.counts().mutations
            };
            let n = points();
            for i in 0..n {
                let at = 1 + (total * i) / n + i % 3;
                let dir = base.path().join(format!("cut{i}"));
                let fs = FaultFs::new();
                fs.cut_power_at(at).expect("cut");
                // Every other cut writes back the log's dirty pages out of order:
                // holes, which the default `WalRecovery::Auto` opens at.
                if i % 2 == 1 {
                    fs.set_writeback(Writeback::RandomPages { seed: i });
                }
                let what = format!("variant {v} bg={background} cut at {at} of {total}");
                let (durable, attempted) = match Db::open(&dir, mk(&fs)) {
                    Ok(db) => {
                        let r = run_unsynced(&db);
                        drop(db);
                        r
                    }
                    Err(_) => (0, 0),
                };
                let cut = fs.is_cut();
                fs.reboot().expect("reboot");
                let db = Db::open(&dir, mk(&fs)).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
                let seen = contents(&db).unwrap_or_else(|e| panic!("{what}: {e}"));
                let lo = if cut { durable } else { attempted };
                assert!(
                    (lo..=attempted).any(|j| seen == states[j]),
                    "{what}: state is not the model after any batch in {lo}..={attempted}"
                );
                let report = db.verify().expect("verify");
                assert!(report.is_ok(), "{what}: {:?}", report.problems);
                drop(db);
                std::fs::remove_dir_all(&dir).ok();
            }
        }
    }
}

#[test]
fn variant_sweeps_with_deletes() {
    for v in 1..4u64 {
        for background in [false, true] {
            let base = tempfile::tempdir().expect("tempdir");
            let (batches, states) = workload(2000 + v);
            let mk = |fs: &FaultFs| {
                let mut o = options(fs, background);
                variant(&mut o, v);
                o
            };
            let clean = {
                let fs = FaultFs::new();
                let db = Db::open(base.path().join("clean"), mk(&fs)).expect("open");
                let (a, _, e) = run(&db, &batches);
                assert!(e.is_none() && a == batches.len(), "{e:?}");
                drop(db);
                fs.counts()
            };
            let n = points();
            for i in 0..n {
                let dir = base.path().join(format!("p{i}"));
                let fs = FaultFs::new();
                let what = if i % 2 == 0 {
                    let at = 1 + (clean.mutations * i) / n + i % 3;
                    fs.cut_power_at(at).expect("cut");
                    format!("variant {v} bg={background} cut at {at}")
                } else {
                    let kind = if i % 4 == 1 {
                        FaultKind::DiskFull
                    } else {
                        FaultKind::Io
                    };
                    // The first six kinds (not removes).
                    let (op, of) = call_kinds(&clean)[(i / 2) as usize % 6];
                    let at = 1 + ((of * i) / n + i % 5) % of.max(1);
                    fs.fail_nth(op, at, kind).expect("plan");
                    format!("variant {v} bg={background} {kind:?} {op:?} {at} of {of}")
                };
                let (acked, attempted) = open_and_run(&dir, mk(&fs), &batches, true, &what);
                if fs.is_cut() || i % 6 == 5 {
                    fs.power_cut();
                    fs.reboot().expect("reboot");
                }
                fs.clear_faults();
                reopen_and_check(&dir, mk(&fs), &states, (acked, attempted), &what);
            }
        }
    }
}
