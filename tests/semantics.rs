//! Read and write semantics at the edges the model tests do not reach
//! (written by a review, thirty-second session): a key several times in
//! one batch, degenerate scan bounds, typed errors for keys over the
//! limits, keys at the largest length, and a concurrent differential test
//! in which every read is checked against the exact state at its sequence
//! number: one writer (so write `i` has sequence `i + 1`), two readers
//! taking snapshots and reading them with gets, `multi_get`s and scans
//! mixed front and back, some long after, while a third thread flushes and
//! compacts. `SIEVEDB_SEMANTICS_SEEDS` (2) and `SIEVEDB_SEMANTICS_WRITES`
//! (20,000) make it longer.
#![allow(
    clippy::field_reassign_with_default,
    clippy::type_complexity,
    clippy::too_many_arguments
)]
use sievedb::{Db, Error, Options, WriteBatch};
mod common;

use std::ops::Bound;

fn small() -> Options {
    Options {
        memtable_bytes: 1024,
        level1_bytes: 4096,
        table_bytes: 1024,
        level_size_multiplier: 2,
        level0_compaction_trigger: 2,
        level0_stop_writes: 4,
        block_bytes: 64,
        restart_interval: 1,
        num_levels: 4,
        background_compaction: false,
        ..Options::default()
    }
}

fn all(db: &Db) -> Vec<(Vec<u8>, Vec<u8>)> {
    db.iter().unwrap().map(|r| r.unwrap()).collect()
}

#[test]
fn batch_last_op_wins_everywhere() {
    for stage in 0..4 {
        let dir = tempfile::tempdir().unwrap();
        let mut db = Db::open(dir.path(), small()).unwrap();
        db.put(b"k", b"0").unwrap();
        db.put(b"d", b"0").unwrap();
        db.flush().unwrap();
        let mut b = WriteBatch::new();
        b.put(b"k", b"1").delete(b"k").put(b"k", b"2");
        b.put(b"d", b"1").delete(b"d").put(b"d", b"2").delete(b"d");
        b.put(b"n", b"x").put(b"n", b"");
        db.write(&b).unwrap();
        match stage {
            0 => {}
            1 => db.flush().unwrap(),
            2 => db.compact_all().unwrap(),
            _ => {
                drop(db);
                db = Db::open(dir.path(), small()).unwrap();
            }
        }
        assert_eq!(
            db.get(b"k").unwrap().as_deref(),
            Some(&b"2"[..]),
            "stage {stage}"
        );
        assert_eq!(db.get(b"d").unwrap(), None, "stage {stage}");
        assert_eq!(
            db.get(b"n").unwrap().as_deref(),
            Some(&b""[..]),
            "stage {stage}"
        );
        assert_eq!(
            all(&db),
            vec![
                (b"k".to_vec(), b"2".to_vec()),
                (b"n".to_vec(), b"".to_vec())
            ],
            "stage {stage}"
        );
        let rev: Vec<_> = db.iter().unwrap().rev().map(|r| r.unwrap().0).collect();
        assert_eq!(rev, vec![b"n".to_vec(), b"k".to_vec()], "stage {stage}");
    }
}

#[test]
fn degenerate_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small()).unwrap();
    for k in [&b"\x00"[..], b"a", b"a\x00", b"b", b"\xff", b"\xff\xff"] {
        db.put(k, k).unwrap();
    }
    db.flush().unwrap();
    db.delete(b"a\x00").unwrap();
    let e: &[u8] = b"";
    let a: &[u8] = b"a";
    let b_: &[u8] = b"b";
    let cases: Vec<(Bound<&[u8]>, Bound<&[u8]>, usize)> = vec![
        (Bound::Included(a), Bound::Excluded(a), 0),
        (Bound::Excluded(a), Bound::Included(a), 0),
        (Bound::Excluded(a), Bound::Excluded(a), 0),
        (Bound::Included(a), Bound::Included(a), 1),
        (Bound::Included(b_), Bound::Included(a), 0),
        (Bound::Included(e), Bound::Unbounded, 5),
        (Bound::Excluded(e), Bound::Unbounded, 5),
        (Bound::Unbounded, Bound::Excluded(e), 0),
        (Bound::Unbounded, Bound::Included(e), 0),
        (Bound::Included(e), Bound::Included(e), 0),
        (Bound::Excluded(a), Bound::Included(b_), 1),
    ];
    for (lo, hi, n) in cases {
        let f = db.scan::<&[u8], _>((lo, hi)).unwrap().count();
        let r = db.scan::<&[u8], _>((lo, hi)).unwrap().rev().count();
        assert_eq!((f, r), (n, n), "{lo:?}..{hi:?}");
    }
}

#[test]
fn oversized_and_empty_keys_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = small();
    o.max_key_bytes = 4;
    let db = Db::open(dir.path(), o).unwrap();
    db.put(b"abcd", b"v").unwrap();
    let snap = db.snapshot().unwrap();
    assert!(matches!(db.get(b"abcde"), Err(Error::InvalidArgument(_))));
    assert!(matches!(db.get(b""), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        db.get_with_cost(b"abcde"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(snap.get(b"abcde"), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        snap.get_with_cost(b""),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        db.multi_get(&[&b"abcd"[..], b"abcde"]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        snap.multi_get(&[&b"abcd"[..], b""]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        db.put(b"abcde", b""),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(db.delete(b""), Err(Error::InvalidArgument(_))));
    let got = db.multi_get(&[&b"zz"[..], b"abcd", b"abcd", b"a"]).unwrap();
    assert_eq!(
        got,
        vec![None, Some(b"v".to_vec()), Some(b"v".to_vec()), None]
    );
    // scans take any bound
    let long = vec![b'a'; 100];
    assert_eq!(db.scan(long.as_slice()..).unwrap().count(), 1);
    assert_eq!(db.scan_prefix(&long).unwrap().count(), 0);
}

// ---------------------------------------------------------------------
// A concurrent differential test with exact sequence numbers.
//
// One writer thread applies random puts, deletes and batches (several
// operations on one key) over a small key universe; since it is the only
// writer, operation i (counting from 0) has sequence number i + 1, so the
// database's state at any sequence is known. Reader threads take
// snapshots (whose `sequence()` names their moment exactly) and read them
// with get, multi_get and scans mixed front/back, some read long after,
// while a third thread flushes, compacts and runs compact_all. Reads on the
// Db itself (no sequence exposed) are bracketed by two snapshots'
// sequences and must match the state at some sequence in between.
// ---------------------------------------------------------------------

mod conc {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    use crate::common::Rng;

    pub fn universe() -> Vec<Vec<u8>> {
        let bytes = [0x00u8, 0x01, b'a', 0xfe, 0xff];
        let mut keys = Vec::new();
        for a in bytes {
            keys.push(vec![a]);
            for b in bytes {
                keys.push(vec![a, b]);
            }
        }
        keys.push(vec![b'a', b'a', 0x00]);
        keys.push(vec![b'a', 0xff, 0xff]);
        keys.sort();
        keys
    }

    /// What a read saw: for each key, the value it must have at some
    /// sequence in `lo..=hi`.
    pub struct Obs {
        pub lo: u64,
        pub hi: u64,
        pub expect: Vec<(usize, Option<Vec<u8>>)>,
        pub what: String,
    }

    pub fn in_range(k: &[u8], lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
        let above = match lo {
            Bound::Unbounded => true,
            Bound::Included(l) => k >= l.as_slice(),
            Bound::Excluded(l) => k > l.as_slice(),
        };
        let below = match hi {
            Bound::Unbounded => true,
            Bound::Included(h) => k <= h.as_slice(),
            Bound::Excluded(h) => k < h.as_slice(),
        };
        above && below
    }

    /// Reads `it` with next/next_back mixed at random; checks order and
    /// uniqueness; returns the pairs in key order.
    pub fn drain(
        mut it: sievedb::DbIterator,
        rng: &mut Rng,
        what: &str,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut front: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut back: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mode = rng.below(3);
        loop {
            let from_back = match mode {
                0 => false,
                1 => true,
                _ => rng.below(2) == 0,
            };
            let item = if from_back { it.next_back() } else { it.next() };
            match item {
                None => break,
                Some(r) => {
                    let (k, v) = r.unwrap_or_else(|e| panic!("{what}: {e}"));
                    if from_back {
                        if let Some(last) = back.last() {
                            assert!(
                                k < last.0,
                                "{what}: back not descending {k:?} after {:?}",
                                last.0
                            );
                        }
                        back.push((k, v));
                    } else {
                        if let Some(last) = front.last() {
                            assert!(
                                k > last.0,
                                "{what}: front not ascending {k:?} after {:?}",
                                last.0
                            );
                        }
                        front.push((k, v));
                    }
                }
            }
        }
        back.reverse();
        if let (Some(f), Some(b)) = (front.last(), back.first()) {
            assert!(
                f.0 < b.0,
                "{what}: ends crossed: front {:?} back {:?}",
                f.0,
                b.0
            );
        }
        front.extend(back);
        front
    }

    pub fn scan_obs(
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
        uni: &[Vec<u8>],
        lo_b: &Bound<Vec<u8>>,
        hi_b: &Bound<Vec<u8>>,
        prefix: Option<&[u8]>,
        lo: u64,
        hi: u64,
        what: String,
    ) -> Obs {
        let got: BTreeMap<Vec<u8>, Vec<u8>> = pairs.iter().cloned().collect();
        for (k, _) in &pairs {
            assert!(uni.contains(k), "{what}: unknown key {k:?}");
            assert!(in_range(k, lo_b, hi_b), "{what}: key {k:?} out of range");
            if let Some(p) = prefix {
                assert!(k.starts_with(p), "{what}: key {k:?} without prefix");
            }
        }
        let expect = uni
            .iter()
            .enumerate()
            .filter(|(_, k)| in_range(k, lo_b, hi_b) && prefix.is_none_or(|p| k.starts_with(p)))
            .map(|(i, k)| (i, got.get(k).cloned()))
            .collect();
        Obs {
            lo,
            hi,
            expect,
            what,
        }
    }

    /// Op `i` (sequence i + 1): key index and new value (None: delete).
    pub type Ops = Vec<(usize, Option<Vec<u8>>)>;

    pub fn verify(ops: &Ops, nkeys: usize, mut obs: Vec<Obs>) {
        obs.sort_by_key(|o| o.lo);
        // State at sequence s = ops[0..s] applied.
        let mut state: Vec<Option<Vec<u8>>> = vec![None; nkeys];
        let mut at = 0u64; // state is at sequence `at`
        let mut checked = 0;
        for o in &obs {
            assert!(
                o.hi as usize <= ops.len(),
                "{}: sequence {} past the writes",
                o.what,
                o.hi
            );
            while at < o.lo {
                let (k, v) = &ops[at as usize];
                state[*k] = v.clone();
                at += 1;
            }
            // Count mismatches at `lo`, then step to `hi`.
            let mut local = state.clone();
            let want: BTreeMap<usize, &Option<Vec<u8>>> =
                o.expect.iter().map(|(k, v)| (*k, v)).collect();
            let mut bad = want.iter().filter(|(k, v)| local[**k] != ***v).count();
            let mut s = o.lo;
            let mut ok = bad == 0;
            while !ok && s < o.hi {
                let (k, v) = &ops[s as usize];
                if let Some(w) = want.get(k) {
                    let before = local[*k] != **w;
                    local[*k] = v.clone();
                    let after = local[*k] != **w;
                    bad = bad + after as usize - before as usize;
                } else {
                    local[*k] = v.clone();
                }
                s += 1;
                ok = bad == 0;
            }
            if !ok {
                let at_lo = state.clone();
                let diffs: Vec<_> = o
                    .expect
                    .iter()
                    .filter(|(k, v)| at_lo[*k] != *v)
                    .map(|(k, v)| (*k, v.clone(), at_lo[*k].clone()))
                    .take(5)
                    .collect();
                panic!(
                    "{}: no sequence in {}..={} matches; at {} (key idx, got, want): {:?}",
                    o.what, o.lo, o.hi, o.lo, diffs
                );
            }
            checked += 1;
        }
        eprintln!("verified {checked} observations over {} writes", ops.len());
    }

    pub fn run(seed: u64, writes: usize, opts: Options) {
        let uni = Arc::new(universe());
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Db::open(dir.path(), opts).unwrap());
        let ops: Arc<Mutex<Ops>> = Arc::new(Mutex::new(Vec::new()));
        let obs: Arc<Mutex<Vec<Obs>>> = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));

        let writer = {
            let (db, uni, ops, stop) = (db.clone(), uni.clone(), ops.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(seed);
                let mut n = 0u64;
                while (ops.lock().unwrap().len()) < writes {
                    let mut b = WriteBatch::new();
                    let mut these = Vec::new();
                    let len = if rng.below(4) == 0 {
                        1 + rng.below(6)
                    } else {
                        1
                    };
                    let same = rng.below(uni.len() as u64) as usize;
                    for _ in 0..len {
                        let k = if rng.below(2) == 0 {
                            same
                        } else {
                            rng.below(uni.len() as u64) as usize
                        };
                        n += 1;
                        if rng.below(3) == 0 {
                            b.delete(&uni[k]);
                            these.push((k, None));
                        } else {
                            let mut v = n.to_le_bytes().to_vec();
                            v.resize(8 + rng.below(40) as usize, 0xab);
                            b.put(&uni[k], &v);
                            these.push((k, Some(v)));
                        }
                    }
                    // Record before writing: a reader bracketing its read
                    // may see the write before it is recorded otherwise
                    // (verification happens at the end anyway).
                    let mut g = ops.lock().unwrap();
                    db.write(&b).unwrap();
                    g.extend(these);
                }
                stop.store(true, Ordering::Release);
            })
        };
        let maint = {
            let (db, stop) = (db.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(seed ^ 77);
                while !stop.load(Ordering::Acquire) {
                    match rng.below(10) {
                        0..=5 => db.flush().unwrap(),
                        6..=8 => db.compact().unwrap(),
                        _ => db.compact_all().unwrap(),
                    }
                    std::thread::sleep(std::time::Duration::from_millis(rng.below(5)));
                }
            })
        };
        let readers: Vec<_> = (0..2)
            .map(|r| {
                let (db, uni, obs, stop) = (db.clone(), uni.clone(), obs.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut rng = Rng(seed ^ (1000 + r));
                    let mut held: Vec<(
                        sievedb::Snapshot,
                        Vec<sievedb::DbIterator>,
                        Vec<(Bound<Vec<u8>>, Bound<Vec<u8>>)>,
                    )> = Vec::new();
                    let mut out = Vec::new();
                    let bound = |rng: &mut Rng| -> Bound<Vec<u8>> {
                        let k = uni[rng.below(uni.len() as u64) as usize].clone();
                        match rng.below(4) {
                            0 => Bound::Unbounded,
                            1 | 2 => Bound::Included(k),
                            _ => Bound::Excluded(k),
                        }
                    };
                    let mut i = 0u64;
                    while !stop.load(Ordering::Acquire) {
                        i += 1;
                        let what = format!("reader {r} read {i}");
                        match rng.below(10) {
                            // Db reads, bracketed
                            0..=3 => {
                                let lo = db.snapshot().unwrap().sequence();
                                let ks: Vec<usize> = (0..1 + rng.below(6))
                                    .map(|_| rng.below(uni.len() as u64) as usize)
                                    .collect();
                                match rng.below(3) {
                                    0 => {
                                        let keys: Vec<&[u8]> =
                                            ks.iter().map(|&k| uni[k].as_slice()).collect();
                                        let got = db.multi_get(&keys).unwrap();
                                        let hi = db.snapshot().unwrap().sequence();
                                        out.push(Obs {
                                            lo,
                                            hi,
                                            expect: ks.iter().copied().zip(got).collect(),
                                            what: format!("{what} multi_get"),
                                        });
                                    }
                                    1 => {
                                        let got = db.get(&uni[ks[0]]).unwrap();
                                        let hi = db.snapshot().unwrap().sequence();
                                        out.push(Obs {
                                            lo,
                                            hi,
                                            expect: vec![(ks[0], got)],
                                            what: format!("{what} get"),
                                        });
                                    }
                                    _ => {
                                        let (lb, hb) = (bound(&mut rng), bound(&mut rng));
                                        let it = db.scan((lb.clone(), hb.clone())).unwrap();
                                        let hi = db.snapshot().unwrap().sequence();
                                        let w = format!("{what} db scan {lb:?}..{hb:?}");
                                        let pairs = drain(it, &mut rng, &w);
                                        out.push(scan_obs(pairs, &uni, &lb, &hb, None, lo, hi, w));
                                    }
                                }
                            }
                            // take a snapshot, open scans on it to read later
                            4..=5 => {
                                if held.len() < 4 {
                                    let s = db.snapshot().unwrap();
                                    let mut its = Vec::new();
                                    let mut bs = Vec::new();
                                    for _ in 0..2 {
                                        let (lb, hb) = (bound(&mut rng), bound(&mut rng));
                                        its.push(s.scan((lb.clone(), hb.clone())).unwrap());
                                        bs.push((lb, hb));
                                    }
                                    held.push((s, its, bs));
                                }
                            }
                            // read a held snapshot (exact sequence)
                            _ => {
                                if held.is_empty() {
                                    continue;
                                }
                                let j = rng.below(held.len() as u64) as usize;
                                if rng.below(4) != 0 {
                                    // read it, keep it
                                    continue_snapshot(&held[j].0, &uni, &mut rng, &mut out, &what);
                                    continue;
                                }
                                // read its scans opened long ago, then drop it
                                let (s, its, bs) = held.swap_remove(j);
                                let seq = s.sequence();
                                for (it, (lb, hb)) in its.into_iter().zip(bs) {
                                    let w = format!(
                                        "{what} held scan of snapshot {seq} {lb:?}..{hb:?}"
                                    );
                                    let pairs = drain(it, &mut rng, &w);
                                    out.push(scan_obs(pairs, &uni, &lb, &hb, None, seq, seq, w));
                                }
                                continue_snapshot(&s, &uni, &mut rng, &mut out, &what);
                            }
                        }
                    }
                    for (s, its, bs) in held {
                        let seq = s.sequence();
                        for (it, (lb, hb)) in its.into_iter().zip(bs) {
                            let w = format!(
                                "reader {r} final held scan of snapshot {seq} {lb:?}..{hb:?}"
                            );
                            let pairs = drain(it, &mut rng, &w);
                            out.push(scan_obs(pairs, &uni, &lb, &hb, None, seq, seq, w));
                        }
                    }
                    obs.lock().unwrap().extend(out);
                })
            })
            .collect();
        writer.join().unwrap();
        maint.join().unwrap();
        for r in readers {
            r.join().unwrap();
        }
        let ops = Arc::try_unwrap(ops).ok().unwrap().into_inner().unwrap();
        let obs = Arc::try_unwrap(obs).ok().unwrap().into_inner().unwrap();
        verify(&ops, uni.len(), obs);
        // And the final state, after a reopen.
        let db = Arc::try_unwrap(db).unwrap();
        db.close().unwrap();
        let db = Db::open(dir.path(), small()).unwrap();
        let mut state: Vec<Option<Vec<u8>>> = vec![None; uni.len()];
        for (k, v) in &ops {
            state[*k] = v.clone();
        }
        let want: Vec<(Vec<u8>, Vec<u8>)> = uni
            .iter()
            .zip(&state)
            .filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v)))
            .collect();
        assert_eq!(all(&db), want, "after reopen");
    }

    fn continue_snapshot(
        s: &sievedb::Snapshot,
        uni: &[Vec<u8>],
        rng: &mut Rng,
        out: &mut Vec<Obs>,
        what: &str,
    ) {
        let seq = s.sequence();
        let ks: Vec<usize> = (0..1 + rng.below(8))
            .map(|_| rng.below(uni.len() as u64) as usize)
            .collect();
        let keys: Vec<&[u8]> = ks.iter().map(|&k| uni[k].as_slice()).collect();
        let got = s.multi_get(&keys).unwrap();
        out.push(Obs {
            lo: seq,
            hi: seq,
            expect: ks.iter().copied().zip(got).collect(),
            what: format!("{what} snapshot {seq} multi_get"),
        });
        let g = s.get(&uni[ks[0]]).unwrap();
        out.push(Obs {
            lo: seq,
            hi: seq,
            expect: vec![(ks[0], g)],
            what: format!("{what} snapshot {seq} get"),
        });
        let p = &uni[rng.below(uni.len() as u64) as usize];
        let p = &p[..1 + rng.below(p.len() as u64) as usize];
        let w = format!("{what} snapshot {seq} prefix {p:?}");
        let (lb, hb) = (Bound::Unbounded, Bound::Unbounded);
        let pairs = drain(s.scan_prefix(p).unwrap(), rng, &w);
        out.push(scan_obs(pairs, uni, &lb, &hb, Some(p), seq, seq, w));
    }
}

#[test]
fn concurrent_reads_match_the_state_at_their_sequence() {
    let seeds: u64 = std::env::var("SIEVEDB_SEMANTICS_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let writes: usize = std::env::var("SIEVEDB_SEMANTICS_WRITES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    for seed in 0..seeds {
        let mut o = small();
        o.background_compaction = seed % 2 == 0;
        o.level0_stop_writes = 8;
        o.prefix_filter_len = if seed % 3 == 0 { Some(1) } else { None };
        eprintln!("seed {seed}");
        conc::run(seed, writes, o);
    }
}

#[test]
fn keys_at_the_largest_allowed_length() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = small();
    o.max_key_bytes = 1 << 20;
    o.prefix_filter_len = Some(1 << 20);
    o.memtable_bytes = 8 << 20;
    let db = Db::open(dir.path(), o.clone()).unwrap();
    let mk = |last: u8| {
        let mut k = vec![0xffu8; 1 << 20];
        k[(1 << 20) - 1] = last;
        k
    };
    let (k1, k2, k3) = (mk(0), mk(1), mk(0xff));
    db.put(&k1, b"1").unwrap();
    db.put(&k2, b"2").unwrap();
    db.put(&k3, b"3").unwrap();
    db.flush().unwrap();
    db.delete(&k2).unwrap();
    db.put(b"a", b"a").unwrap();
    for stage in 0..3 {
        match stage {
            1 => db.flush().unwrap(),
            2 => db.compact_all().unwrap(),
            _ => {}
        }
        assert_eq!(db.get(&k1).unwrap().as_deref(), Some(&b"1"[..]));
        assert_eq!(db.get(&k2).unwrap(), None);
        assert_eq!(db.get(&k3).unwrap().as_deref(), Some(&b"3"[..]));
        let n = db.scan(k1.as_slice()..=k3.as_slice()).unwrap().count();
        assert_eq!(n, 2, "stage {stage}");
        let n = db
            .scan(k1.as_slice()..=k3.as_slice())
            .unwrap()
            .rev()
            .count();
        assert_eq!(n, 2, "stage {stage}");
        let n = db.scan_prefix(&k3).unwrap().count();
        assert_eq!(n, 1, "stage {stage}");
        let n = db.scan_prefix(&k3[..1000]).unwrap().rev().count();
        assert_eq!(n, 2, "stage {stage}");
        let mut over = k3.clone();
        over.push(0);
        assert!(matches!(db.get(&over), Err(Error::InvalidArgument(_))));
    }
    drop(db);
    let db = Db::open(dir.path(), o).unwrap();
    assert_eq!(db.iter().unwrap().count(), 3);
}
