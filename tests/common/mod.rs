//! Helpers shared by the integration tests.
#![allow(dead_code)]
// Options are built by assigning fields to the defaults, on purpose.
#![allow(clippy::field_reassign_with_default)]

use std::sync::Arc;

use sievedb::filter::{BloomPolicy, FilterPolicy, NoFilter, RibbonPolicy};
use sievedb::Options;

/// Every built-in filter policy, at the usual settings.
pub fn policies() -> Vec<Arc<dyn FilterPolicy>> {
    vec![
        Arc::new(BloomPolicy::new(10.0)),
        Arc::new(RibbonPolicy::new(10.0)),
        Arc::new(NoFilter),
    ]
}

/// Options with small memtables and levels so flushes and compactions
/// happen constantly in tests.
pub fn small_options() -> Options {
    Options {
        memtable_bytes: 64 << 10,
        level1_bytes: 256 << 10,
        table_bytes: 64 << 10,
        level0_compaction_trigger: 4,
        level0_stop_writes: 12,
        ..Options::default()
    }
}

pub mod filters;
pub mod hooked_fs;

#[path = "../support/streams.rs"]
mod streams;

/// A deterministic pseudo-random generator for tests: the shared SplitMix64
/// of `tests/support/streams.rs`, with helpers for keys and values.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        let mut generator = streams::SplitMix64(self.0);
        let value = generator.next_u64();
        self.0 = generator.0;
        value
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }

    /// A key of 1 to `max_len` bytes from [`EDGE_BYTES`]: random keys of
    /// this kind have many neighbours such as `u`, `u ++ [0]` and
    /// `u ++ [ff]`, where scans and seeks go wrong first.
    pub fn edge_key(&mut self, max_len: u64) -> Vec<u8> {
        let len = 1 + self.below(max_len) as usize;
        (0..len)
            .map(|_| EDGE_BYTES[self.below(EDGE_BYTES.len() as u64) as usize])
            .collect()
    }

    /// A scan bound: none, or an [`edge_key`](Self::edge_key) included or
    /// excluded.
    pub fn edge_bound(&mut self, max_len: u64) -> std::ops::Bound<Vec<u8>> {
        match self.below(3) {
            0 => std::ops::Bound::Unbounded,
            1 => std::ops::Bound::Included(self.edge_key(max_len)),
            _ => std::ops::Bound::Excluded(self.edge_key(max_len)),
        }
    }
}

/// The entries of `model` between `lo` and `hi`, in key order: what a scan
/// with those bounds should yield. Filtered rather than `BTreeMap::range`,
/// which panics on an empty range written backward; a scan answers it with
/// nothing.
pub fn model_range(
    model: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
    lo: &std::ops::Bound<Vec<u8>>,
    hi: &std::ops::Bound<Vec<u8>>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    use std::ops::Bound;
    model
        .iter()
        .filter(|(k, _)| {
            let above = match lo {
                Bound::Unbounded => true,
                Bound::Included(l) => *k >= l,
                Bound::Excluded(l) => *k > l,
            };
            let below = match hi {
                Bound::Unbounded => true,
                Bound::Included(h) => *k <= h,
                Bound::Excluded(h) => *k < h,
            };
            above && below
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The bytes of [`Rng::edge_key`]: the extremes, their neighbours and one
/// ordinary byte.
pub const EDGE_BYTES: [u8; 5] = [0x00, 0x01, 0x7f, 0xfe, 0xff];

/// The key used by tests for index `i`: fixed width so order is numeric.
pub fn key(i: u64) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

/// A user policy that stores the exact set of hashes (sorted, deduplicated,
/// 8 bytes each, little endian), so that its answers (no false positives)
/// show that its own code ran. Bytes that are not whole hashes answer
/// "may contain".
pub struct ExactSet;

impl FilterPolicy for ExactSet {
    fn name(&self) -> &str {
        "user.ExactSet"
    }
    fn build(&self, key_hashes: &[u64]) -> Vec<u8> {
        let mut sorted = key_hashes.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        sorted.iter().flat_map(|h| h.to_le_bytes()).collect()
    }
    fn may_contain(&self, filter: &[u8], key_hash: u64) -> bool {
        if !filter.len().is_multiple_of(8) {
            return true;
        }
        filter.chunks_exact(8).any(|c| {
            u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) == key_hash
        })
    }
}

/// Number of table (`.sst`) files in `dir`.
pub fn table_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".sst")
        })
        .count()
}

/// A writer thread for point-in-time tests: round `r` writes the value `r`
/// to every key of `group` in one batch, plus 20 filler keys so memtables
/// fill and flush, until `stop` is set.
pub struct GroupWriter {
    /// Set to stop the writer.
    pub stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Rounds written so far.
    pub written: std::sync::Arc<std::sync::atomic::AtomicU64>,
    handle: std::thread::JoinHandle<u64>,
}

impl GroupWriter {
    pub fn spawn(db: &Arc<sievedb::Db>, group: &[Vec<u8>]) -> GroupWriter {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let stop = Arc::new(AtomicBool::new(false));
        let written = Arc::new(AtomicU64::new(0));
        let handle = {
            let (db, group, stop) = (Arc::clone(db), group.to_vec(), Arc::clone(&stop));
            let written = Arc::clone(&written);
            std::thread::spawn(move || {
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let mut batch = sievedb::WriteBatch::new();
                    for k in &group {
                        batch.put(k, round.to_le_bytes());
                    }
                    for f in 0..20 {
                        batch.put(key(round * 20 + f + 100_000), [0u8; 64]);
                    }
                    db.write(&batch).unwrap();
                    round += 1;
                    written.store(round, Ordering::Relaxed);
                }
                round
            })
        };
        GroupWriter {
            stop,
            written,
            handle,
        }
    }

    /// Rounds written so far.
    pub fn rounds(&self) -> u64 {
        self.written.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stops the writer; returns the rounds it wrote.
    pub fn finish(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.join().unwrap()
    }
}

/// Runs `f` on its own thread and returns its result, or panics with
/// `what` if it has not finished within `secs` seconds (a hang: the thread
/// is left behind).
pub fn within<T: Send + 'static>(
    secs: u64,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(f());
    });
    finished
        .recv_timeout(std::time::Duration::from_secs(secs))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// A write batch's log payload as docs/format.md describes it, puts only:
/// for crafting logs byte by byte.
pub fn batch_payload(first_seq: u64, puts: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&first_seq.to_le_bytes());
    out.extend_from_slice(&(puts.len() as u32).to_le_bytes());
    for (k, v) in puts {
        out.push(1);
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v);
    }
    out
}

/// A key or value for a failure message: whole if short, else its first
/// 24 bytes and its length.
pub fn show(k: &[u8]) -> String {
    if k.len() > 24 {
        format!("{:?}..(len {})", &k[..24], k.len())
    } else {
        format!("{k:?}")
    }
}

/// An entry for a failure message, as [`show`] gives its parts.
pub fn short_entry(e: &(Vec<u8>, Vec<u8>)) -> String {
    format!("({}, {})", show(&e.0), show(&e.1))
}

/// Reads `it` to its end from the front, the back or both at random
/// (one mode per call), checking every entry against `want`.
pub fn consume(mut it: sievedb::DbIterator, want: &[(Vec<u8>, Vec<u8>)], rng: &mut Rng, ctx: &str) {
    let mode = rng.below(3);
    let (mut f, mut b) = (0usize, want.len());
    loop {
        let back = match mode {
            0 => false,
            1 => true,
            _ => rng.below(2) == 0,
        };
        let got = if back { it.next_back() } else { it.next() };
        match got {
            Some(r) => {
                let item = r.unwrap_or_else(|e| panic!("{ctx}: scan error {e}"));
                if back {
                    assert!(b > f, "{ctx}: extra item from back {}", short_entry(&item));
                    b -= 1;
                    assert!(
                        item == want[b],
                        "{ctx} (mode {mode}): back item {} want {}",
                        short_entry(&item),
                        short_entry(&want[b])
                    );
                } else {
                    assert!(f < b, "{ctx}: extra item from front {}", short_entry(&item));
                    assert!(
                        item == want[f],
                        "{ctx} (mode {mode}): front item {} want {}",
                        short_entry(&item),
                        short_entry(&want[f])
                    );
                    f += 1;
                }
            }
            None => {
                assert!(
                    f == b,
                    "{ctx}: ended early (mode {mode}), {} entries missing, next wanted {}",
                    b - f,
                    short_entry(&want[f])
                );
                break;
            }
        }
    }
}
