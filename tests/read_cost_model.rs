//! `get_with_cost` checked systematically: a randomized single-threaded
//! workload over many option combinations, where every costed read is
//! compared with
//!
//! * the database-wide counters' movement around it (totals and per level),
//! * an oracle: the tables of the read's version opened on their own with
//!   `Table::open` (fresh counters, no block cache) and asked in lookup
//!   order, which says which tables the read must ask, what each must
//!   count, and which one must answer (`source`),
//! * a model of every write's value and sequence number (the answer).
//!
//! Seeds: `SIEVEDB_READ_COST_SEEDS` (default 24), first seed
//! `SIEVEDB_READ_COST_SEED0`. Written by a review (twenty-ninth session)
//! that ran 1,900 seeds, 486,093 costed reads, through it: no difference.
#![allow(clippy::field_reassign_with_default)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sievedb::filter::{key_hash, BloomPolicy, FilterPolicy, NoFilter, RibbonPolicy};
use sievedb::iter::InternalIterator;
use sievedb::key::unpack_trailer;
use sievedb::sstable::Table;
use sievedb::stats::ReadCounters;
use sievedb::{
    Compression, Db, FilterBudget, Options, ReadCost, ReadSource, Snapshot, Stats, TableInfo,
};

/// A custom policy: 256 bits indexed by the hash's low byte. Bytes of
/// another length answer "maybe".
#[derive(Debug)]
struct Mod256;

impl FilterPolicy for Mod256 {
    fn name(&self) -> &str {
        "test.mod256"
    }
    fn build(&self, key_hashes: &[u64]) -> Vec<u8> {
        let mut bits = vec![0u8; 32];
        for h in key_hashes {
            let b = (*h & 255) as usize;
            bits[b / 8] |= 1 << (b % 8);
        }
        bits
    }
    fn may_contain(&self, filter: &[u8], key_hash: u64) -> bool {
        if filter.len() != 32 {
            return true;
        }
        let b = (key_hash & 255) as usize;
        filter[b / 8] & (1 << (b % 8)) != 0
    }
}

fn random_policy(rng: &mut StdRng) -> Arc<dyn FilterPolicy> {
    match rng.gen_range(0..6) {
        0 => Arc::new(NoFilter),
        1 => Arc::new(Mod256),
        2 => Arc::new(RibbonPolicy::new(rng.gen_range(3.0..12.0))),
        _ => Arc::new(BloomPolicy::new(rng.gen_range(1.0..12.0))),
    }
}

fn random_options(rng: &mut StdRng) -> Options {
    let mut o = Options::default();
    o.background_compaction = false;
    o.filter_policy = random_policy(rng);
    o.memtable_bytes = if rng.gen_bool(0.3) {
        rng.gen_range(1024..8192) // frozen memtables, flushed in the background
    } else {
        64 << 20 // flushed only when the test says
    };
    o.max_immutable_memtables = rng.gen_range(1..4);
    o.block_bytes = [64, 128, 256, 1024, 4096][rng.gen_range(0..5)];
    o.restart_interval = rng.gen_range(1..17);
    o.num_levels = rng.gen_range(2..6);
    o.level0_compaction_trigger = rng.gen_range(1..6);
    o.level0_stop_writes = o.level0_compaction_trigger + 8;
    o.level1_bytes = rng.gen_range(1024..16384);
    o.level_size_multiplier = rng.gen_range(2..5);
    o.table_bytes = rng.gen_range(1024..8192);
    o.filter_budget = if rng.gen_bool(0.5) {
        FilterBudget::Monkey
    } else {
        FilterBudget::Uniform
    };
    o.prefix_filter_len = if rng.gen_bool(0.3) {
        Some(rng.gen_range(1..5))
    } else {
        None
    };
    o.last_level_filters = rng.gen_bool(0.6);
    o.block_cache_bytes = match rng.gen_range(0..4) {
        0 => 0,
        1 => rng.gen_range(1..400), // tiny: holds no block
        2 => rng.gen_range(400..4096),
        _ => 4 << 20,
    };
    o.compression = if rng.gen_bool(0.5) {
        Compression::Lz4
    } else {
        Compression::None
    };
    o.track_hot_keys = rng.gen_bool(0.5);
    o
}

/// Every write: key -> [(sequence, value or tombstone)], ascending.
type Model = BTreeMap<Vec<u8>, Vec<(u64, Option<Vec<u8>>)>>;

fn model_at(model: &Model, key: &[u8], seq: u64) -> Option<(u64, Option<Vec<u8>>)> {
    model
        .get(key)?
        .iter()
        .rev()
        .find(|(s, _)| *s <= seq)
        .cloned()
}

fn key_of(i: u32) -> Vec<u8> {
    format!("k{i:03}").into_bytes()
}

fn random_read_key(rng: &mut StdRng, tables: &[TableInfo]) -> Vec<u8> {
    match rng.gen_range(0..10) {
        0 => b"a".to_vec(),
        1 => b"zz".to_vec(),
        2 => {
            let mut k = key_of(rng.gen_range(0..120));
            k.push(b'x'); // between keys: absent, inside ranges
            k
        }
        3 | 4 if !tables.is_empty() => {
            let t = &tables[rng.gen_range(0..tables.len())];
            if rng.gen_bool(0.5) {
                t.smallest.clone()
            } else {
                t.largest.clone()
            }
        }
        _ => key_of(rng.gen_range(0..120)),
    }
}

fn value_of(rng: &mut StdRng) -> Vec<u8> {
    let len = match rng.gen_range(0..4) {
        0 => 0,
        1 => rng.gen_range(1..8),
        2 => rng.gen_range(8..100),
        _ => rng.gen_range(100..600),
    };
    let c = b'a' + rng.gen_range(0..26u8);
    let mut v = vec![c; len];
    for b in v.iter_mut().step_by(7) {
        *b = rng.gen();
    }
    v
}

/// The tables opened on their own, by file number.
struct Oracle {
    dir: std::path::PathBuf,
    policy: Arc<dyn FilterPolicy>,
    tables: HashMap<u64, (Arc<Table>, Arc<ReadCounters>)>,
    /// Each table's entries, read once with a cursor: user key ->
    /// sequences, newest first.
    contents: HashMap<u64, BTreeMap<Vec<u8>, Vec<u64>>>,
}

impl Oracle {
    fn table(&mut self, number: u64) -> (Arc<Table>, Arc<ReadCounters>) {
        let dir = &self.dir;
        let policy = &self.policy;
        self.tables
            .entry(number)
            .or_insert_with(|| {
                let counters = Arc::new(ReadCounters::default());
                let t = Table::open(
                    &dir.join(format!("{number:06}.sst")),
                    number,
                    policy,
                    Arc::clone(&counters),
                )
                .expect("oracle opens the table");
                (Arc::new(t), counters)
            })
            .clone()
    }

    fn contents(&mut self, number: u64) -> &BTreeMap<Vec<u8>, Vec<u64>> {
        let (table, _) = self.table(number);
        self.contents.entry(number).or_insert_with(|| {
            let mut map: BTreeMap<Vec<u8>, Vec<u64>> = BTreeMap::new();
            let mut it = table.iter();
            it.seek_to_first().unwrap();
            while it.valid() {
                let k = it.key();
                let (user, trailer) = k.split_at(k.len() - 8);
                let (seq, _) =
                    unpack_trailer(u64::from_le_bytes(trailer.try_into().unwrap())).expect("kind");
                map.entry(user.to_vec()).or_default().push(seq);
                it.next().unwrap();
            }
            map
        })
    }

    /// Opens every table of `tables` now (while its file exists).
    fn pin(&mut self, tables: &[TableInfo]) {
        for t in tables {
            self.contents(t.file_number);
        }
    }
}

/// The read counters of `Stats` or of one level, as a vector.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct C {
    checks: u64,
    negatives: u64,
    fps: u64,
    tps: u64,
    blocks: u64,
    get_blocks: u64,
    hits: u64,
    misses: u64,
    bytes: u64,
}

/// The read counters of a `Stats` or a `LevelStats` (same field names).
macro_rules! counters_of {
    ($s:expr) => {{
        let s = $s;
        C {
            checks: s.filter_checks,
            negatives: s.filter_negatives,
            fps: s.filter_false_positives,
            tps: s.filter_true_positives,
            blocks: s.data_block_reads,
            get_blocks: s.get_data_block_reads,
            hits: s.block_cache_hits,
            misses: s.block_cache_misses,
            bytes: s.bytes_read,
        }
    }};
}

impl C {
    fn of_stats(s: &Stats) -> C {
        counters_of!(s)
    }
    fn of_level(s: &Stats, l: usize) -> C {
        counters_of!(&s.levels[l])
    }
    fn of_counters(r: &ReadCounters) -> C {
        use std::sync::atomic::Ordering::Relaxed;
        C {
            checks: r.filter_checks.load(Relaxed),
            negatives: r.filter_negatives.load(Relaxed),
            fps: r.filter_false_positives.load(Relaxed),
            tps: r.filter_true_positives.load(Relaxed),
            blocks: r.data_block_reads.load(Relaxed),
            get_blocks: r.get_data_block_reads.load(Relaxed),
            hits: r.block_cache_hits.load(Relaxed),
            misses: r.block_cache_misses.load(Relaxed),
            bytes: r.bytes_read.load(Relaxed),
        }
    }
    fn of_cost(c: &ReadCost) -> C {
        C {
            checks: c.filter_checks,
            negatives: c.filter_negatives,
            fps: c.filter_false_positives,
            tps: c.filter_true_positives,
            blocks: c.data_block_reads,
            get_blocks: c.data_block_reads,
            hits: c.block_cache_hits,
            misses: c.block_cache_misses,
            bytes: c.bytes_read,
        }
    }
    fn minus(self, o: C) -> C {
        C {
            checks: self.checks - o.checks,
            negatives: self.negatives - o.negatives,
            fps: self.fps - o.fps,
            tps: self.tps - o.tps,
            blocks: self.blocks - o.blocks,
            get_blocks: self.get_blocks - o.get_blocks,
            hits: self.hits - o.hits,
            misses: self.misses - o.misses,
            bytes: self.bytes - o.bytes,
        }
    }
    fn plus(self, o: C) -> C {
        C {
            checks: self.checks + o.checks,
            negatives: self.negatives + o.negatives,
            fps: self.fps + o.fps,
            tps: self.tps + o.tps,
            blocks: self.blocks + o.blocks,
            get_blocks: self.get_blocks + o.get_blocks,
            hits: self.hits + o.hits,
            misses: self.misses + o.misses,
            bytes: self.bytes + o.bytes,
        }
    }
    /// Without the block cache's share (the oracle has no cache).
    fn uncached(self) -> C {
        C {
            hits: 0,
            misses: 0,
            ..self
        }
    }
}

/// What the oracle says one read at `seq` of `key` in a version holding
/// `tables` must do.
struct Expected {
    per_level: Vec<C>,
    found: Option<(usize, u64, u64)>, // level, file number, sequence
}

fn expected(
    oracle: &mut Oracle,
    tables: &[TableInfo],
    num_levels: usize,
    key: &[u8],
    seq: u64,
) -> Expected {
    let mut order: Vec<&TableInfo> = tables
        .iter()
        .filter(|t| t.level == 0 && t.smallest.as_slice() <= key && key <= t.largest.as_slice())
        .collect();
    order.sort_by_key(|t| std::cmp::Reverse(t.file_number));
    for level in 1..num_levels {
        let covering: Vec<&TableInfo> = tables
            .iter()
            .filter(|t| {
                t.level == level && t.smallest.as_slice() <= key && key <= t.largest.as_slice()
            })
            .collect();
        assert!(covering.len() <= 1, "level {level}: overlapping tables");
        order.extend(covering);
    }
    let mut per_level = vec![C::default(); num_levels];
    let hash = key_hash(key);
    for t in order {
        // Independently of `Table::get`: what the table must count.
        let versions = oracle
            .contents(t.file_number)
            .get(key)
            .cloned()
            .unwrap_or_default();
        let (table, counters) = oracle.table(t.file_number);
        let mut want = C {
            checks: 1,
            ..C::default()
        };
        if !table.filter().may_contain(hash) {
            assert!(
                versions.is_empty(),
                "false negative in table {}",
                t.file_number
            );
            want.negatives = 1;
        } else if versions.is_empty() {
            want.fps = 1;
            want.blocks = 1;
        } else {
            want.tps = 1;
            // No block read only when every entry of the table sorts
            // before (key, seq): the key is the largest, all its versions newer.
            let all_newer = versions.iter().all(|&s| s > seq);
            want.blocks = u64::from(!(all_newer && key == t.largest.as_slice()));
        }
        want.get_blocks = want.blocks;
        let before = C::of_counters(&counters);
        let found = table.get(key, hash, seq).expect("oracle get");
        let d = C::of_counters(&counters).minus(before);
        assert_eq!(
            C { bytes: 0, ..d },
            want,
            "table {} key {:?} seq {seq} versions {versions:?}",
            t.file_number,
            String::from_utf8_lossy(key)
        );
        assert_eq!(
            found.as_ref().map(|f| f.seq),
            versions.iter().copied().find(|&s| s <= seq),
            "table {} found",
            t.file_number
        );
        per_level[t.level] = per_level[t.level].plus(d);
        if let Some(found) = found {
            return Expected {
                per_level,
                found: Some((t.level, t.file_number, found.seq)),
            };
        }
    }
    Expected {
        per_level,
        found: None,
    }
}

struct Snap {
    snap: Snapshot,
    seq: u64,
    tables: Option<Vec<TableInfo>>, // None: the version is not known exactly
}

struct Run {
    seed: u64,
    costed_reads: u64,
    sources: [u64; 3],
    by_level: [u64; 8],
    formats: BTreeMap<String, u64>,
}

/// One costed read, checked. `tables`: the read's version when known.
#[allow(clippy::too_many_arguments)]
fn check_read(
    what: &str,
    oracle: &mut Oracle,
    model: &Model,
    num_levels: usize,
    tables: Option<&[TableInfo]>,
    seq: u64,
    key: &[u8],
    value: Option<Vec<u8>>,
    cost: ReadCost,
    before: &Stats,
    after: &Stats,
    has_cache: bool,
    run: &mut Run,
) {
    let ctx = format!(
        "seed {} {what} key {:?} seq {seq} cost {cost:?}",
        run.seed,
        String::from_utf8_lossy(key)
    );
    run.costed_reads += 1;
    // The answer.
    let newest = model_at(model, key, seq);
    let want_value = newest.as_ref().and_then(|(_, v)| v.clone());
    assert_eq!(value, want_value, "{ctx}: value");

    // The cost equals the counters' movement, in total ...
    let total = C::of_stats(after).minus(C::of_stats(before));
    assert_eq!(after.gets - before.gets, 1, "{ctx}: gets");
    assert_eq!(C::of_cost(&cost), total, "{ctx}: cost vs stats delta");
    // ... and the levels add up to it.
    let mut levels = C::default();
    for l in 0..after.levels.len() {
        levels = levels.plus(C::of_level(after, l).minus(C::of_level(before, l)));
    }
    assert_eq!(levels, total, "{ctx}: levels vs totals");

    // The rustdoc's invariants.
    assert_eq!(
        cost.filter_checks,
        cost.filter_negatives + cost.filter_false_positives + cost.filter_true_positives,
        "{ctx}: checks"
    );
    if has_cache {
        assert_eq!(
            cost.data_block_reads,
            cost.block_cache_hits + cost.block_cache_misses,
            "{ctx}: cache share"
        );
    } else {
        assert_eq!(
            (cost.block_cache_hits, cost.block_cache_misses),
            (0, 0),
            "{ctx}: no cache"
        );
    }
    assert!(
        cost.data_block_reads <= cost.filter_checks - cost.filter_negatives,
        "{ctx}"
    );
    if cost.data_block_reads == 0 {
        assert_eq!(cost.bytes_read, 0, "{ctx}");
    } else {
        assert!(cost.bytes_read > 0, "{ctx}");
    }
    match cost.source {
        ReadSource::Memtable => {
            run.sources[0] += 1;
            assert_eq!(C::of_cost(&cost), C::default(), "{ctx}: memtable answer");
            assert!(newest.is_some(), "{ctx}: memtable answer, no version");
        }
        ReadSource::Table { level, file_number } => {
            run.sources[1] += 1;
            run.by_level[level] += 1;
            if let Some(t) = tables.and_then(|ts| ts.iter().find(|t| t.file_number == file_number))
            {
                *run.formats.entry(t.filter_format.clone()).or_default() += 1;
            }
            assert!(newest.is_some(), "{ctx}: table answer, no version");
            assert!(cost.filter_checks >= 1, "{ctx}");
        }
        ReadSource::Nowhere => {
            run.sources[2] += 1;
            assert_eq!(value, None, "{ctx}");
        }
    }

    // Against the oracle, when the read's version is known.
    let Some(tables) = tables else { return };
    let exp = expected(oracle, tables, num_levels, key, seq);
    let oracle_found_newest = match (&exp.found, &newest) {
        (Some((_, _, fs)), Some((ms, _))) => {
            assert!(fs <= ms, "{ctx}: a table holds a version the model lacks");
            fs == ms
        }
        (Some(_), None) => panic!("{ctx}: a table holds a version the model lacks"),
        (None, _) => false,
    };
    let want_source = if oracle_found_newest {
        let (level, file_number, _) = exp.found.unwrap();
        Some(ReadSource::Table { level, file_number })
    } else {
        match &newest {
            // The newest visible version is in no table: in a memtable,
            // or a tombstone compaction dropped at the bottom.
            Some((_, None)) if exp.found.is_none() => None,
            Some(_) => Some(ReadSource::Memtable),
            None => Some(ReadSource::Nowhere),
        }
    };
    match want_source {
        Some(s) => assert_eq!(cost.source, s, "{ctx}: source (tables {tables:?})"),
        None => assert!(
            matches!(cost.source, ReadSource::Memtable | ReadSource::Nowhere),
            "{ctx}: source"
        ),
    }
    if cost.source != ReadSource::Memtable {
        for l in 0..num_levels {
            let got = C::of_level(after, l).minus(C::of_level(before, l));
            assert_eq!(
                got.uncached(),
                exp.per_level[l].uncached(),
                "{ctx}: level {l} vs oracle (tables {tables:?})"
            );
        }
    }
}

fn run_seed(seed: u64) -> Run {
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut model: Model = BTreeMap::new();
    let mut run = Run {
        seed,
        costed_reads: 0,
        sources: [0; 3],
        by_level: [0; 8],
        formats: BTreeMap::new(),
    };
    let mut opts = random_options(&mut rng);
    let epochs = rng.gen_range(1..4);
    for epoch in 0..epochs {
        if epoch > 0 {
            // Reopen with other options: tables of a custom policy become
            // undecodable under another one, the cache changes, ...
            let keep_fs = Arc::clone(&opts.fs);
            opts = random_options(&mut rng);
            opts.fs = keep_fs;
        }
        let db = match Db::open(dir.path(), opts.clone()) {
            Ok(db) => db,
            Err(e) => {
                // Fewer levels than the tables use: keep the old count.
                assert!(matches!(e, sievedb::Error::InvalidArgument(_)), "{e}");
                opts.num_levels = 6;
                Db::open(dir.path(), opts.clone()).unwrap()
            }
        };
        let num_levels = opts.num_levels;
        let has_cache = opts.block_cache_bytes > 0;
        let mut oracle = Oracle {
            dir: dir.path().to_path_buf(),
            policy: Arc::clone(&opts.filter_policy),
            tables: HashMap::new(),
            contents: HashMap::new(),
        };
        let mut snaps: Vec<Snap> = Vec::new();
        let ops = rng.gen_range(150..500);
        for _ in 0..ops {
            match rng.gen_range(0..100) {
                0..=29 => {
                    let k = key_of(rng.gen_range(0..100));
                    let v = value_of(&mut rng);
                    db.put(&k, &v).unwrap();
                    let seq = db.snapshot().unwrap().sequence();
                    model.entry(k).or_default().push((seq, Some(v)));
                }
                30..=37 => {
                    let k = key_of(rng.gen_range(0..100));
                    db.delete(&k).unwrap();
                    let seq = db.snapshot().unwrap().sequence();
                    model.entry(k).or_default().push((seq, None));
                }
                38..=42 => db.flush().unwrap(),
                43..=44 => db.compact().unwrap(),
                45 => db.compact_all().unwrap(),
                46..=48 => {
                    let t0 = db.tables();
                    let snap = db.snapshot().unwrap();
                    let t1 = db.tables();
                    let seq = snap.sequence();
                    let tables = if t0 == t1 {
                        oracle.pin(&t1);
                        Some(t1)
                    } else {
                        None
                    };
                    snaps.push(Snap { snap, seq, tables });
                    if snaps.len() > 3 {
                        snaps.remove(rng.gen_range(0..snaps.len()));
                    }
                }
                49 if !snaps.is_empty() => {
                    snaps.remove(rng.gen_range(0..snaps.len()));
                }
                50..=54 => {
                    // Behaviour: multi_get and scans agree with the model.
                    let seq = db.snapshot().unwrap().sequence();
                    let keys: Vec<Vec<u8>> =
                        (0..8).map(|_| random_read_key(&mut rng, &[])).collect();
                    let t0 = db.tables();
                    let got = db.multi_get(&keys).unwrap();
                    if db.tables() == t0 && db.snapshot().unwrap().sequence() == seq {
                        for (k, v) in keys.iter().zip(got) {
                            let want = model_at(&model, k, seq).and_then(|(_, v)| v);
                            assert_eq!(v, want, "seed {seed} multi_get {k:?}");
                        }
                    }
                    let want: Vec<(Vec<u8>, Vec<u8>)> = model
                        .keys()
                        .filter_map(|k| {
                            model_at(&model, k, seq)
                                .and_then(|(_, v)| v)
                                .map(|v| (k.clone(), v))
                        })
                        .collect();
                    let got: Vec<_> = db.iter().unwrap().map(|r| r.unwrap()).collect();
                    assert_eq!(got, want, "seed {seed} scan");
                    if let Some(s) = snaps.last() {
                        let want: Vec<(Vec<u8>, Vec<u8>)> = model
                            .keys()
                            .filter_map(|k| {
                                model_at(&model, k, s.seq)
                                    .and_then(|(_, v)| v)
                                    .map(|v| (k.clone(), v))
                            })
                            .collect();
                        let got: Vec<_> = s.snap.iter().unwrap().map(|r| r.unwrap()).collect();
                        assert_eq!(got, want, "seed {seed} snapshot scan");
                        let got: Vec<_> =
                            s.snap.iter().unwrap().rev().map(|r| r.unwrap()).collect();
                        let mut want = want;
                        want.reverse();
                        assert_eq!(got, want, "seed {seed} snapshot reverse scan");
                    }
                }
                55..=62 if !snaps.is_empty() => {
                    let i = rng.gen_range(0..snaps.len());
                    let s = &snaps[i];
                    let key = random_read_key(&mut rng, s.tables.as_deref().unwrap_or(&[]));
                    let before = db.stats();
                    let (value, cost) = s.snap.get_with_cost(&key).unwrap();
                    let after = db.stats();
                    check_read(
                        "snapshot",
                        &mut oracle,
                        &model,
                        num_levels,
                        s.tables.as_deref(),
                        s.seq,
                        &key,
                        value,
                        cost,
                        &before,
                        &after,
                        has_cache,
                        &mut run,
                    );
                }
                63..=67 => {
                    // A plain get moves the counters as the oracle says.
                    let t0 = db.tables();
                    oracle.pin(&t0);
                    let seq = db.snapshot().unwrap().sequence();
                    let key = random_read_key(&mut rng, &t0);
                    let before = db.stats();
                    let value = db.get(&key).unwrap();
                    let after = db.stats();
                    let want = model_at(&model, &key, seq).and_then(|(_, v)| v);
                    assert_eq!(value, want, "seed {seed} get");
                    if db.tables() == t0 {
                        let exp = expected(&mut oracle, &t0, num_levels, &key, seq);
                        let newest = model_at(&model, &key, seq);
                        let total = C::of_stats(&after).minus(C::of_stats(&before));
                        let memtable = match (&exp.found, &newest) {
                            (Some((_, _, fs)), Some((ms, _))) => fs < ms,
                            (None, Some((_, Some(_)))) => true,
                            (None, Some((_, None))) => total == C::default(),
                            _ => false,
                        };
                        if memtable {
                            assert_eq!(total, C::default(), "seed {seed} get {key:?}");
                        } else {
                            for l in 0..num_levels {
                                let got = C::of_level(&after, l).minus(C::of_level(&before, l));
                                assert_eq!(
                                    got.uncached(),
                                    exp.per_level[l].uncached(),
                                    "seed {seed} get {key:?} level {l}"
                                );
                            }
                        }
                    }
                }
                _ => {
                    let t0 = db.tables();
                    oracle.pin(&t0);
                    let key = random_read_key(&mut rng, &t0);
                    let before = db.stats();
                    let seq = db.snapshot().unwrap().sequence();
                    let (value, cost) = db.get_with_cost(&key).unwrap();
                    let after = db.stats();
                    let known = db.tables() == t0;
                    check_read(
                        "db",
                        &mut oracle,
                        &model,
                        num_levels,
                        known.then_some(t0.as_slice()),
                        seq,
                        &key,
                        value,
                        cost,
                        &before,
                        &after,
                        has_cache,
                        &mut run,
                    );
                }
            }
        }
        drop(snaps);
        db.close().unwrap();
    }
    run
}

fn seeds() -> std::ops::Range<u64> {
    let n: u64 = std::env::var("SIEVEDB_READ_COST_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24);
    let first: u64 = std::env::var("SIEVEDB_READ_COST_SEED0")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    first..first + n
}

#[test]
fn every_costed_read_matches_the_counters_and_the_oracle() {
    let mut reads = 0;
    let mut sources = [0u64; 3];
    let mut by_level = [0u64; 8];
    let mut formats: BTreeMap<String, u64> = BTreeMap::new();
    for seed in seeds() {
        let run = run_seed(seed);
        reads += run.costed_reads;
        for (total, n) in sources.iter_mut().zip(run.sources) {
            *total += n;
        }
        for (total, n) in by_level.iter_mut().zip(run.by_level) {
            *total += n;
        }
        for (f, n) in run.formats {
            *formats.entry(f).or_default() += n;
        }
    }
    eprintln!("costed reads {reads}, memtable/table/nowhere {sources:?}, table answers by level {by_level:?}, by filter format {formats:?}");
    assert!(reads > 0);
}
