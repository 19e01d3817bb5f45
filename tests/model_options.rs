//! A differential test over the option space: random puts, deletes, write
//! batches (several operations on one key), gets, `multi_get`s (repeated
//! keys), scans forward, backward and from both ends with random bounds,
//! prefix scans, snapshots read much later, checkpoints opened and compared,
//! close and reopen with other options (another filter policy, Bloom, Ribbon
//! or none, and every other option re-drawn, `max_key_bytes` and
//! `max_value_bytes` included), all compared with a `BTreeMap` model.
//!
//! Unlike `tests/model.rs` (fixed small sizes, 1-5 byte keys), the options
//! are drawn across their extremes: memtables of 1 KiB, 64-byte blocks,
//! restart intervals up to 1024, a block cache of 0, 1 byte or more,
//! LZ4 on or off, prefix filter lengths, last-level filters on or off,
//! 2-16 levels with 1 KiB level 1 and multiplier 2, tiny tables and
//! manifests, background compaction on or off, custom filter policies
//! (whose filters only they can read) swapped with built-in ones; keys from 1 byte to
//! `max_key_bytes` (up to a few KiB), values empty to 100 KB, writes
//! and reads that break the current limits (refused, with nothing applied).
//! Scans are also opened and read much later (after a reopen too), and a
//! second thread reads a set of keys no one writes while the rest churns.
//!
//! Environment:
//! * `SIEVEDB_OPTMODEL_SEED=s`   first seed (default 0)
//! * `SIEVEDB_OPTMODEL_SEEDS=n`  seeds to run (default 12)
//! * `SIEVEDB_OPTMODEL_OPS=n`    operations per seed (default 3000)
//! * `SIEVEDB_OPTMODEL_VERBOSE=1` print each seed's options
//!
//! Written in the twenty-ninth session by a review that ran about 2,300
//! seeds (about 7.5 million operations) through it, with no difference
//! from the model.

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use common::{consume, model_range, show, Rng};
use sievedb::filter::{BloomPolicy, FilterPolicy, NoFilter, RibbonPolicy};
use sievedb::{CompactionPick, Compression, Db, Error, FilterBudget, Options, WriteBatch};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

/// A number in `lo..=hi`, log-uniform, so the small end is as likely as
/// the large one.
fn log_range(rng: &mut Rng, lo: u64, hi: u64) -> u64 {
    let (l, h) = ((lo as f64).ln(), (hi as f64).ln());
    let x = l + (h - l) * (rng.below(1 << 20) as f64 / (1u64 << 20) as f64);
    (x.exp() as u64).clamp(lo, hi)
}

fn pick<T: Clone>(rng: &mut Rng, xs: &[T]) -> T {
    xs[rng.below(xs.len() as u64) as usize].clone()
}

/// Options drawn across their extremes. `max_key` is the largest key the
/// test writes (the options' `max_key_bytes` is at least that unless
/// `shrink_keys`, which may lower it below keys already stored).
fn random_options(rng: &mut Rng, max_key: usize, shrink_keys: bool) -> Options {
    let policy: Arc<dyn FilterPolicy> = match rng.below(8) {
        0..=2 => Arc::new(BloomPolicy::new(pick(rng, &[1.0, 4.0, 10.0, 20.0]))),
        3..=5 => Arc::new(RibbonPolicy::new(pick(rng, &[1.0, 4.0, 10.0, 20.0]))),
        6 => Arc::new(NoFilter),
        _ => {
            if rng.below(2) == 0 {
                Arc::new(common::ExactSet)
            } else {
                Arc::new(Salted)
            }
        }
    };
    let max_key_bytes = if shrink_keys && rng.below(4) == 0 {
        1 + rng.below(max_key as u64) as usize
    } else {
        max_key + rng.below(3) as usize * 100
    };
    let trigger = 1 + rng.below(6) as usize;
    let background = rng.below(4) != 0;
    Options {
        filter_policy: policy,
        filter_budget: if rng.below(2) == 0 {
            FilterBudget::Monkey
        } else {
            FilterBudget::Uniform
        },
        prefix_filter_len: if rng.below(2) == 0 {
            None
        } else {
            Some(1 + rng.below(max_key_bytes.min(6) as u64) as usize)
        },
        last_level_filters: rng.below(2) == 0,
        memtable_bytes: log_range(rng, 1024, 256 << 10) as usize,
        max_immutable_memtables: 1 + rng.below(3) as usize,
        block_bytes: log_range(rng, 64, 16 << 10) as usize,
        restart_interval: pick(rng, &[1usize, 2, 3, 16, 100, 1024]),
        sync_writes: rng.below(8) == 0,
        max_key_bytes,
        max_value_bytes: pick(rng, &[0usize, 10, 1000, 200_000, 200_000, 200_000, 1 << 20]),
        num_levels: if rng.below(4) == 0 {
            2 + rng.below(15) as usize
        } else {
            2 + rng.below(6) as usize
        },
        level0_compaction_trigger: trigger,
        level0_stop_writes: if background {
            trigger + rng.below(10) as usize
        } else {
            trigger + 20
        },
        level1_bytes: log_range(rng, 1024, 1 << 20),
        level_size_multiplier: 2 + rng.below(9),
        table_bytes: log_range(rng, 1024, 1 << 20),
        compaction_pick: if rng.below(2) == 0 {
            CompactionPick::Rotation
        } else {
            CompactionPick::MostDropped
        },
        background_compaction: background,
        track_hot_keys: rng.below(2) == 0,
        block_cache_bytes: pick(rng, &[0usize, 0, 1, 100, 4096, 1 << 20]),
        compression: if rng.below(2) == 0 {
            Compression::Lz4
        } else {
            Compression::None
        },
        manifest_roll_bytes: log_range(rng, 1024, 1 << 20),
        ..Options::default()
    }
}

/// A user policy whose filters only it can read (the exact set of the key
/// hashes, each XORed with a salt): another policy asked about its bytes
/// would give false negatives, so the engine must not.
struct Salted;

const SALT: u64 = 0x9e37_79b9_7f4a_7c15;

impl FilterPolicy for Salted {
    fn name(&self) -> &str {
        "user.Salted"
    }
    fn build(&self, key_hashes: &[u64]) -> Vec<u8> {
        let mut v: Vec<u64> = key_hashes.iter().map(|h| h ^ SALT).collect();
        v.sort_unstable();
        v.dedup();
        v.iter().flat_map(|h| h.to_le_bytes()).collect()
    }
    fn may_contain(&self, filter: &[u8], key_hash: u64) -> bool {
        if !filter.len().is_multiple_of(8) {
            return true;
        }
        let want = key_hash ^ SALT;
        filter
            .chunks_exact(8)
            .any(|c| u64::from_le_bytes(c.try_into().unwrap()) == want)
    }
}

fn describe(o: &Options) -> String {
    format!("{o:?}")
}

/// Keys: a pool of keys seen so far (most operations reuse one, so
/// overwrites, deletes of live keys and neighbours are common), new ones of
/// every length up to `max_key`.
struct Keys {
    pool: Vec<Vec<u8>>,
    max_key: usize,
    pool_size: usize,
}

impl Keys {
    fn fresh(&mut self, rng: &mut Rng) -> Vec<u8> {
        let alphabet: &[u8] = &[0x00, 0x01, b'a', b'b', 0x7f, 0xfe, 0xff];
        let k = match rng.below(10) {
            // short keys from a small alphabet
            0..=4 => {
                let n = 1 + rng.below(4.min(self.max_key as u64)) as usize;
                (0..n).map(|_| pick(rng, alphabet)).collect()
            }
            // a neighbour of a pooled key
            5..=6 if !self.pool.is_empty() => {
                let mut k = pick(rng, &self.pool);
                match rng.below(4) {
                    0 if k.len() < self.max_key => k.push(pick(rng, &[0x00, 0xff, b'a'])),
                    1 if k.len() > 1 => {
                        let n = 1 + rng.below(k.len() as u64 - 1) as usize;
                        k.truncate(n);
                    }
                    2 => {
                        let i = rng.below(k.len() as u64) as usize;
                        k[i] = k[i].wrapping_add(1);
                    }
                    _ => {
                        let i = rng.below(k.len() as u64) as usize;
                        k[i] = k[i].wrapping_sub(1);
                    }
                }
                k
            }
            // long keys sharing a long prefix
            7..=8 => {
                let n = 1 + log_range(rng, 1, self.max_key as u64) as usize - 1;
                let n = n.clamp(1, self.max_key);
                let mut k = vec![b'p'; n];
                for _ in 0..3 {
                    let i = rng.below(n as u64) as usize;
                    k[i] = pick(rng, alphabet);
                }
                k
            }
            // exactly the limit
            _ => {
                let mut k = vec![0xffu8; self.max_key];
                let last = self.max_key - 1;
                k[last] = pick(rng, alphabet);
                k
            }
        };
        let mut k = k;
        if k.starts_with(FROZEN) {
            k[0] = b'a';
        }
        if self.pool.len() < self.pool_size {
            self.pool.push(k.clone());
        } else {
            let i = rng.below(self.pool.len() as u64) as usize;
            self.pool[i] = k.clone();
        }
        k
    }

    fn key(&mut self, rng: &mut Rng) -> Vec<u8> {
        if !self.pool.is_empty() && rng.below(10) < 7 {
            pick(rng, &self.pool)
        } else {
            self.fresh(rng)
        }
    }

    fn bound(&mut self, rng: &mut Rng) -> Bound<Vec<u8>> {
        match rng.below(4) {
            0 => Bound::Unbounded,
            1 | 2 => Bound::Included(self.key(rng)),
            _ => Bound::Excluded(self.key(rng)),
        }
    }

    fn prefix(&mut self, rng: &mut Rng) -> Vec<u8> {
        let k = self.key(rng);
        match rng.below(6) {
            0 => Vec::new(),
            1 => k,
            _ => {
                let n = 1 + rng.below(k.len().min(8) as u64) as usize;
                k[..n].to_vec()
            }
        }
    }
}

fn value(rng: &mut Rng) -> Vec<u8> {
    match rng.below(100) {
        0..=14 => Vec::new(),
        15..=74 => {
            let n = 1 + rng.below(30) as usize;
            rng.bytes(n)
        }
        75..=89 => {
            // compressible
            let n = rng.below(3000) as usize;
            let b = rng.below(256) as u8;
            vec![b; n]
        }
        90..=97 => {
            let n = rng.below(5000) as usize;
            rng.bytes(n)
        }
        _ => {
            let n = 100_000 + rng.below(2) as usize;
            let mut v = vec![0u8; n];
            let head = rng.bytes(64);
            v[..64].copy_from_slice(&head);
            v
        }
    }
}

fn prefix_entries(model: &Model, p: &[u8]) -> Entries {
    model
        .iter()
        .filter(|(k, _)| k.starts_with(p))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// `got` is the model's value of `k`.
fn assert_answer(k: &[u8], got: Option<&Vec<u8>>, model: &Model, what: &str) {
    assert!(
        got == model.get(k),
        "{what} {} = {:?}, want {:?}",
        show(k),
        got.map(|v| show(v)),
        model.get(k).map(|v| show(v))
    );
}

/// Answer `i` of `got` is the model's value of `ks[i]`.
fn assert_answers(ks: &[Vec<u8>], got: &[Option<Vec<u8>>], model: &Model, what: &str) {
    assert_eq!(got.len(), ks.len(), "{what}: answers");
    for (k, g) in ks.iter().zip(got) {
        assert_answer(k, g.as_ref(), model, what);
    }
}

fn is_invalid<T: std::fmt::Debug>(r: &sievedb::Result<T>) -> bool {
    matches!(r, Err(Error::InvalidArgument(_)))
}

/// Whether a write of these operations is within the limits.
fn write_ok(opts: &Options, ops: &[(Vec<u8>, Option<Vec<u8>>)]) -> bool {
    ops.iter().all(|(k, v)| {
        !k.is_empty()
            && k.len() <= opts.max_key_bytes
            && v.as_ref().is_none_or(|v| v.len() <= opts.max_value_bytes)
    })
}

/// Every key of the model, and some others, read back by `get` and
/// `multi_get`, and the whole key space by scan.
fn check_all(db: &Db, opts: &Options, model: &Model, keys: &mut Keys, rng: &mut Rng, ctx: &str) {
    let all: Entries = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    consume(db.iter().unwrap(), &all, rng, &format!("{ctx} full scan"));
    let mut ks: Vec<Vec<u8>> = model
        .keys()
        .filter(|k| k.len() <= opts.max_key_bytes)
        .cloned()
        .collect();
    for _ in 0..30 {
        let k = keys.key(rng);
        if k.len() <= opts.max_key_bytes {
            ks.push(k);
        }
    }
    let got = db.multi_get(&ks).unwrap();
    assert_answers(&ks, &got, model, &format!("{ctx}: multi_get"));
    for k in ks.iter().take(60) {
        let g = db.get(k).unwrap();
        assert_answer(k, g.as_ref(), model, &format!("{ctx}: get"));
    }
}

struct Run {
    seed: u64,
    ops: u64,
    base: std::path::PathBuf,
    verbose: bool,
}

struct State {
    seed: u64,
    ops: u64,
    verbose: bool,
    rng: Rng,
    keys: Keys,
    model: Model,
    opts: Options,
    max_key: usize,
    step: u64,
    checkpoints: u64,
    root: std::path::PathBuf,
    /// Scans opened earlier, read later (after more writes, flushes,
    /// compactions, even a reopen): what each should yield, and where it
    /// was opened.
    pending: Vec<(sievedb::DbIterator, Entries, String)>,
    /// The frozen keys ([`FROZEN`] prefix) and their values, in order.
    frozen: Entries,
}

/// Keys no operation of the main thread writes, read by a second thread
/// throughout each epoch while the main thread churns the rest.
const FROZEN: &[u8] = &[2, 3, 4];

/// [`epoch_ops`], with a reader thread checking the frozen keys meanwhile.
fn epoch(st: &mut State, db: &Db) -> bool {
    if st.frozen.is_empty() || st.opts.max_key_bytes < FROZEN.len() + 1 {
        return epoch_ops(st, db);
    }
    let frozen = st.frozen.clone();
    let seed = st.seed;
    let stop = AtomicBool::new(false);
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut rng = Rng(seed ^ 0xabcdef);
            let mut rounds = 0u64;
            while !stop.load(Ordering::Acquire) || rounds < 3 {
                rounds += 1;
                let ctx = format!("seed {seed} reader round {rounds}");
                let i = rng.below(frozen.len() as u64) as usize;
                let (k, v) = &frozen[i];
                assert!(db.get(k).unwrap().as_ref() == Some(v), "{ctx}: get {k:?}");
                let ks: Vec<&Vec<u8>> = (0..4)
                    .map(|_| &frozen[rng.below(frozen.len() as u64) as usize].0)
                    .collect();
                for (k, g) in ks.iter().zip(db.multi_get(&ks).unwrap()) {
                    let want = frozen.iter().find(|(fk, _)| fk == *k).map(|e| &e.1);
                    assert!(g.as_ref() == want, "{ctx}: multi_get {k:?}");
                }
                if rounds.is_multiple_of(8) {
                    consume(
                        db.scan_prefix(FROZEN).unwrap(),
                        &frozen,
                        &mut rng,
                        &format!("{ctx}: prefix"),
                    );
                    let lo = Bound::Included(frozen[i].0.clone());
                    let want: Entries = frozen[i..].to_vec();
                    consume(
                        db.scan((lo, Bound::Excluded(vec![2, 3, 5]))).unwrap(),
                        &want,
                        &mut rng,
                        &format!("{ctx}: scan from {i}"),
                    );
                }
            }
        });
        let _stop = StopOnDrop(&stop);
        let reopen = epoch_ops(st, db);
        stop.store(true, Ordering::Release);
        reader.join().expect("the reader thread failed");
        reopen
    })
}

/// One run of the database between opens: operations until a reopen is
/// drawn (returns true) or the run's operations are done (false).
/// Snapshots live within it, as they borrow the database.
fn epoch_ops(st: &mut State, db: &Db) -> bool {
    let seed = st.seed;
    let mut snaps: Vec<(sievedb::Snapshot, Model, u64)> = Vec::new();
    let State {
        rng,
        keys,
        model,
        opts,
        ..
    } = st;
    let rng: &mut Rng = rng;
    let keys: &mut Keys = keys;
    let model: &mut Model = model;
    let opts: &Options = opts;
    let mut reopen = false;
    while st.step < st.ops {
        let r = rng.below(1000);
        let ctx = format!("seed {seed} step {}", st.step);
        let step = st.step;
        st.step += 1;
        if r < 300 {
            let k = keys.key(rng);
            let v = value(rng);
            let res = db.put(&k, &v);
            if write_ok(opts, &[(k.clone(), Some(v.clone()))]) {
                res.unwrap_or_else(|e| panic!("{ctx}: put {}: {e}", show(&k)));
                model.insert(k, v);
            } else {
                assert!(is_invalid(&res), "{ctx}: put over the limits: {res:?}");
            }
        } else if r < 420 {
            let k = keys.key(rng);
            let res = db.delete(&k);
            if write_ok(opts, &[(k.clone(), None)]) {
                res.unwrap();
                model.remove(&k);
            } else {
                assert!(is_invalid(&res), "{ctx}: delete over the limit: {res:?}");
            }
        } else if r < 500 {
            let mut b = WriteBatch::new();
            let mut ops = Vec::new();
            let n = 1 + rng.below(8);
            let same = keys.key(rng);
            for _ in 0..n {
                let k = if rng.below(2) == 0 {
                    same.clone()
                } else {
                    keys.key(rng)
                };
                if rng.below(3) == 0 {
                    b.delete(&k);
                    ops.push((k, None));
                } else {
                    let v = if rng.below(5) == 0 {
                        value(rng)
                    } else {
                        let n = rng.below(10) as usize;
                        rng.bytes(n)
                    };
                    b.put(&k, &v);
                    ops.push((k, Some(v)));
                }
            }
            let res = db.write(&b);
            if write_ok(opts, &ops) {
                res.unwrap_or_else(|e| panic!("{ctx}: batch: {e}"));
                for (k, v) in ops {
                    match v {
                        Some(v) => model.insert(k, v),
                        None => model.remove(&k),
                    };
                }
            } else {
                assert!(is_invalid(&res), "{ctx}: batch over the limits: {res:?}");
            }
        } else if r < 600 {
            let k = keys.key(rng);
            let res = db.get(&k);
            if k.len() <= opts.max_key_bytes {
                let g = res.unwrap();
                assert_answer(&k, g.as_ref(), model, &format!("{ctx}: get"));
            } else {
                assert!(is_invalid(&res), "{ctx}: get over the limit: {res:?}");
            }
        } else if r < 650 {
            let n = 1 + rng.below(12);
            let mut ks: Vec<Vec<u8>> = (0..n).map(|_| keys.key(rng)).collect();
            if rng.below(2) == 0 {
                let d = ks[0].clone();
                ks.push(d);
            }
            let res = db.multi_get(&ks);
            if ks.iter().all(|k| k.len() <= opts.max_key_bytes) {
                let got = res.unwrap();
                assert_eq!(got.len(), ks.len());
                assert_answers(&ks, &got, model, &format!("{ctx}: multi_get"));
            } else {
                assert!(is_invalid(&res), "{ctx}: multi_get over the limit");
            }
        } else if r < 730 {
            let (lo, hi) = (keys.bound(rng), keys.bound(rng));
            let want = model_range(model, &lo, &hi);
            let it = db.scan((lo.clone(), hi.clone())).unwrap();
            let c = format!(
                "{ctx}: scan {:?}..{:?}",
                lo.as_ref().map(|k| show(k)),
                hi.as_ref().map(|k| show(k))
            );
            consume(it, &want, rng, &c);
        } else if r < 770 {
            let p = keys.prefix(rng);
            let want = prefix_entries(model, &p);
            let it = db.scan_prefix(&p).unwrap();
            consume(it, &want, rng, &format!("{ctx}: prefix {}", show(&p)));
        } else if r < 790 && snaps.len() < 4 {
            snaps.push((db.snapshot().unwrap(), model.clone(), step));
        } else if r < 850 && !snaps.is_empty() {
            let i = rng.below(snaps.len() as u64) as usize;
            let (snap, smodel, at) = &snaps[i];
            let c = format!("{ctx}: snapshot from step {at}");
            match rng.below(4) {
                0 => {
                    let k = keys.key(rng);
                    let res = snap.get(&k);
                    if k.len() <= opts.max_key_bytes {
                        assert!(
                            res.unwrap().as_ref() == smodel.get(&k),
                            "{c}: get {}",
                            show(&k)
                        );
                    } else {
                        assert!(is_invalid(&res));
                    }
                }
                1 => {
                    let ks: Vec<Vec<u8>> = (0..1 + rng.below(8)).map(|_| keys.key(rng)).collect();
                    let res = snap.multi_get(&ks);
                    if ks.iter().all(|k| k.len() <= opts.max_key_bytes) {
                        for (k, g) in ks.iter().zip(res.unwrap()) {
                            assert!(g.as_ref() == smodel.get(k), "{c}: multi_get {}", show(k));
                        }
                    } else {
                        assert!(is_invalid(&res));
                    }
                }
                2 => {
                    let (lo, hi) = (keys.bound(rng), keys.bound(rng));
                    let want = model_range(smodel, &lo, &hi);
                    let c = format!(
                        "{c}: scan {:?}..{:?}",
                        lo.as_ref().map(|k| show(k)),
                        hi.as_ref().map(|k| show(k))
                    );
                    consume(snap.scan((lo, hi)).unwrap(), &want, rng, &c);
                }
                _ => {
                    let p = keys.prefix(rng);
                    let want = prefix_entries(smodel, &p);
                    let c = format!("{c}: prefix {}", show(&p));
                    consume(snap.scan_prefix(&p).unwrap(), &want, rng, &c);
                }
            }
            if rng.below(3) == 0 {
                snaps.swap_remove(i);
            }
        } else if r < 880 {
            db.flush().unwrap();
        } else if r < 900 {
            db.compact().unwrap();
        } else if r < 910 {
            db.compact_all().unwrap();
        } else if r < 930 {
            db.wait_for_compactions().unwrap();
        } else if r < 940 {
            let report = db.verify().unwrap();
            assert!(
                report.problems.is_empty(),
                "{ctx}: verify {:?}",
                report.problems
            );
        } else if r < 955 {
            // Checkpoint, open it under other options, compare, write to
            // the copy: the source must not see it.
            st.checkpoints += 1;
            let cp = st.root.join(format!("cp{}", st.checkpoints));
            db.checkpoint(&cp).unwrap();
            let copts = random_options(rng, st.max_key, false);
            let c = format!("{ctx}: checkpoint {}", st.checkpoints);
            let mut copts = copts;
            let cdb = open_fitting(&cp, &mut copts, &c);
            let mut cmodel = model.clone();
            check_all(&cdb, &copts, &cmodel, keys, rng, &c);
            let k = keys.key(rng);
            let v = b"checkpoint-only"[..copts.max_value_bytes.min(15)].to_vec();
            if k.len() <= copts.max_key_bytes && k.len() <= opts.max_key_bytes {
                cdb.put(&k, &v).unwrap();
                cmodel.insert(k.clone(), v);
                cdb.compact_all().unwrap();
                check_all(&cdb, &copts, &cmodel, keys, rng, &c);
                assert!(db.get(&k).unwrap().as_ref() == model.get(&k), "{c}: leaked");
            }
            cdb.close().unwrap();
            std::fs::remove_dir_all(&cp).unwrap();
        } else if r < 958 {
            // open a scan now, read it later
            let (lo, hi) = (keys.bound(rng), keys.bound(rng));
            let c = format!(
                "{ctx}: pending scan {:?}..{:?}",
                lo.as_ref().map(|k| show(k)),
                hi.as_ref().map(|k| show(k))
            );
            if let (Some((snap, smodel, at)), true) = (snaps.first(), rng.below(2) == 0) {
                let want = model_range(smodel, &lo, &hi);
                let c = format!("{c} of snapshot from step {at}");
                st.pending.push((snap.scan((lo, hi)).unwrap(), want, c));
            } else {
                let want = model_range(model, &lo, &hi);
                st.pending.push((db.scan((lo, hi)).unwrap(), want, c));
            }
        } else if r < 961 && !st.pending.is_empty() {
            let i = rng.below(st.pending.len() as u64) as usize;
            let (it, want, c) = st.pending.swap_remove(i);
            consume(it, &want, rng, &format!("{c}, read at step {step}"));
        } else if r < 965 {
            reopen = true;
            break;
        } else if r < 985 {
            check_all(db, opts, model, keys, rng, &ctx);
        } else {
            // a burst of small puts, to churn the memtable and fill level 0
            for _ in 0..50 {
                let k = keys.key(rng);
                let n = rng.below(20) as usize;
                let v = rng.bytes(n);
                if write_ok(opts, &[(k.clone(), Some(v.clone()))]) {
                    db.put(&k, &v).unwrap();
                    model.insert(k, v);
                }
            }
        }
    }
    // Held snapshots read whole once more before they go.
    for (snap, smodel, at) in snaps.drain(..) {
        let want: Entries = smodel.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        consume(
            snap.iter().unwrap(),
            &want,
            rng,
            &format!(
                "seed {seed} step {}: snapshot from step {at}, last read",
                st.step
            ),
        );
    }
    reopen
}

/// Opens `dir` with `opts`; a tree deeper than `opts.num_levels` is
/// refused (as documented), and then opened with 16 levels.
fn open_fitting(dir: &std::path::Path, opts: &mut Options, ctx: &str) -> Db {
    match Db::open(dir, opts.clone()) {
        Ok(db) => db,
        Err(Error::InvalidArgument(m)) if m.contains("levels but num_levels") => {
            opts.num_levels = 16;
            Db::open(dir, opts.clone())
                .unwrap_or_else(|e| panic!("{ctx}: open: {e} with {}", describe(opts)))
        }
        Err(e) => panic!("{ctx}: open: {e} with {}", describe(opts)),
    }
}

fn run_seed(run: &Run) {
    let seed = run.seed;
    let mut rng = Rng(0x5eed_0000 + seed);
    let max_key = pick(&mut rng, &[1usize, 2, 8, 64, 300, 4096]);
    let pool_size = pick(&mut rng, &[30usize, 400, 400, 3000]);
    let root = tempfile::tempdir_in(&run.base).unwrap();
    let dir = root.path().join("db");
    let opts = random_options(&mut rng, max_key, false);
    if run.verbose {
        eprintln!("seed {seed}: max_key {max_key} opts {}", describe(&opts));
    }
    let mut st = State {
        seed,
        ops: run.ops,
        verbose: run.verbose,
        rng,
        keys: Keys {
            pool: Vec::new(),
            max_key,
            pool_size,
        },
        pending: Vec::new(),
        frozen: Vec::new(),
        model: Model::new(),
        opts,
        max_key,
        step: 0,
        checkpoints: 0,
        root: root.path().to_path_buf(),
    };
    let mut db = Db::open(&dir, st.opts.clone()).unwrap();
    if max_key > FROZEN.len() && st.opts.max_value_bytes >= 2000 {
        let mut b = WriteBatch::new();
        for i in 0..40u8 {
            let mut k = FROZEN.to_vec();
            k.push(i * 5);
            let n = st.rng.below(2000) as usize;
            let v = st.rng.bytes(n);
            b.put(&k, &v);
            st.model.insert(k.clone(), v.clone());
            st.frozen.push((k, v));
        }
        db.write(&b).unwrap();
    }
    while epoch(&mut st, &db) {
        let ctx = format!("seed {seed} step {}", st.step);
        if st.rng.below(2) == 0 {
            db.close().unwrap();
        } else {
            drop(db);
        }
        let mut next = random_options(&mut st.rng, max_key, true);
        db = open_fitting(&dir, &mut next, &ctx);
        st.opts = next;
        if st.verbose {
            eprintln!("{ctx}: reopened with {}", describe(&st.opts));
        }
        let State {
            rng,
            keys,
            model,
            opts,
            ..
        } = &mut st;
        check_all(&db, opts, model, keys, rng, &format!("{ctx} after reopen"));
    }
    let State {
        rng,
        keys,
        model,
        opts,
        pending,
        ..
    } = &mut st;
    for (it, want, c) in pending.drain(..) {
        consume(it, &want, rng, &format!("{c}, read at the end"));
    }
    check_all(&db, opts, model, keys, rng, &format!("seed {seed} end"));
    if run.verbose {
        let mut per_level = vec![0usize; opts.num_levels];
        for t in db.tables() {
            per_level[t.level] += 1;
        }
        eprintln!(
            "seed {seed}: {} keys, tables per level {per_level:?}",
            model.len()
        );
    }
    db.compact_all().unwrap();
    check_all(
        &db,
        opts,
        model,
        keys,
        rng,
        &format!("seed {seed} end compacted"),
    );
    db.close().unwrap();
}

#[test]
fn reads_match_a_model_across_option_extremes() {
    let first = env_u64("SIEVEDB_OPTMODEL_SEED").unwrap_or(0);
    let count = env_u64("SIEVEDB_OPTMODEL_SEEDS").unwrap_or(12);
    let ops = env_u64("SIEVEDB_OPTMODEL_OPS").unwrap_or(3000);
    let verbose = env_u64("SIEVEDB_OPTMODEL_VERBOSE").unwrap_or(0) != 0;
    let base = std::env::temp_dir();
    let start = Instant::now();
    let mut seed = first;
    let mut done = 0;
    while done < count {
        let t = Instant::now();
        run_seed(&Run {
            seed,
            ops,
            base: base.clone(),
            verbose,
        });
        if verbose {
            eprintln!("seed {seed} done in {:?}", t.elapsed());
        }
        seed += 1;
        done += 1;
    }
    eprintln!(
        "model_options: seeds {first}..{seed} ({done}), {ops} operations each, {:?}",
        start.elapsed()
    );
}
