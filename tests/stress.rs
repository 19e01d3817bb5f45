//! Concurrency stress: 8 threads share one `Arc<Db>` and, for a bounded
//! time, mix puts, deletes, batches, point reads, prefix scans, flushes and
//! compactions. Each thread owns a key prefix and checks every read and
//! scan against what it knows it wrote; at the end a reopen must show every
//! thread's final state.
//!
//! `SIEVEDB_STRESS_SECS` (default 3) sets how long the threads run.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{small_options, Rng};
use sievedb::{Db, Options, WriteBatch};

const THREADS: usize = 8;
const KEYS_PER_THREAD: u64 = 300;

fn options() -> Options {
    let mut opts = small_options();
    opts.memtable_bytes = 16 << 10;
    opts.table_bytes = 16 << 10;
    opts.level1_bytes = 64 << 10;
    opts.block_bytes = 512;
    opts
}

fn key(t: usize, k: u64) -> Vec<u8> {
    format!("t{t}/{k:05}").into_bytes()
}

fn value(t: usize, k: u64, version: u64) -> Vec<u8> {
    let mut v = format!("{t}:{k}:{version}:").into_bytes();
    v.resize(v.len() + (version % 64) as usize, b'x');
    v
}

#[derive(Default)]
struct Counts {
    ops: u64,
    reads: u64,
    scans: u64,
    flushes: u64,
    compactions: u64,
}

fn worker(db: Arc<Db>, t: usize, until: Instant) -> (BTreeMap<Vec<u8>, Vec<u8>>, Counts) {
    let mut rng = Rng(0x57e55 + t as u64);
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut c = Counts::default();
    let mut version = 0u64;
    while Instant::now() < until {
        c.ops += 1;
        version += 1;
        let k = rng.below(KEYS_PER_THREAD);
        match rng.below(100) {
            0..=34 => {
                let v = value(t, k, version);
                db.put(key(t, k), &v).expect("put");
                model.insert(key(t, k), v);
            }
            35..=44 => {
                db.delete(key(t, k)).expect("delete");
                model.remove(&key(t, k));
            }
            45..=54 => {
                let mut b = WriteBatch::new();
                for i in 0..1 + rng.below(8) {
                    let k = (k + i * 17) % KEYS_PER_THREAD;
                    if rng.below(4) == 0 {
                        b.delete(key(t, k));
                        model.remove(&key(t, k));
                    } else {
                        let v = value(t, k, version);
                        b.put(key(t, k), &v);
                        model.insert(key(t, k), v);
                    }
                }
                db.write(&b).expect("batch");
            }
            55..=89 => {
                c.reads += 1;
                let got = db.get(key(t, k)).expect("get");
                assert_eq!(got.as_ref(), model.get(&key(t, k)), "thread {t} key {k}");
            }
            90..=97 => {
                c.scans += 1;
                let lo = key(t, k);
                let hi = key(t, (k + 40).min(KEYS_PER_THREAD));
                let got: Vec<(Vec<u8>, Vec<u8>)> = db
                    .scan(lo.as_slice()..hi.as_slice())
                    .expect("scan")
                    .collect::<Result<_, _>>()
                    .expect("scan item");
                let want: Vec<(Vec<u8>, Vec<u8>)> = model
                    .range(lo..hi)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(got, want, "thread {t} scan from {k}");
            }
            98 => {
                c.flushes += 1;
                db.flush().expect("flush");
            }
            _ => {
                c.compactions += 1;
                db.compact().expect("compact");
            }
        }
    }
    (model, c)
}

#[test]
fn eight_threads_mixed_workload() {
    let secs: u64 = std::env::var("SIEVEDB_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Arc::new(Db::open(dir.path(), options()).expect("open"));
    let until = Instant::now() + Duration::from_secs(secs);
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let db = Arc::clone(&db);
            std::thread::spawn(move || worker(db, t, until))
        })
        .collect();
    let results: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().expect("worker panicked"))
        .collect();
    let stats = db.stats();
    let report = db.verify().expect("verify");
    assert!(report.is_ok(), "{:?}", report.problems);
    let db = Arc::into_inner(db).expect("sole owner");
    db.close().expect("close");
    let db = Db::open(dir.path(), options()).expect("reopen");
    let mut all = BTreeMap::new();
    for (model, _) in &results {
        all.extend(model.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    let got: BTreeMap<Vec<u8>, Vec<u8>> = db
        .iter()
        .expect("iter")
        .collect::<Result<_, _>>()
        .expect("scan after reopen");
    assert_eq!(got.len(), all.len());
    assert!(
        got == all,
        "state after reopen differs from the threads' models"
    );
    let ops: u64 = results.iter().map(|(_, c)| c.ops).sum();
    let reads: u64 = results.iter().map(|(_, c)| c.reads).sum();
    let scans: u64 = results.iter().map(|(_, c)| c.scans).sum();
    let flushes: u64 = results.iter().map(|(_, c)| c.flushes).sum();
    let compactions: u64 = results.iter().map(|(_, c)| c.compactions).sum();
    assert!(stats.flushes > 0, "the run never flushed");
    eprintln!(
        "stress: {ops} ops ({reads} checked reads, {scans} checked scans, {flushes} flush calls, \
         {compactions} compact calls); engine: {} flushes, {} compactions",
        stats.flushes, stats.compactions
    );
}
