//! The sorted in-memory table that absorbs writes.
//!
//! A lock-free skip list (crossbeam-skiplist) of internal keys: writers insert
//! while readers look up and iterate, and neither blocks the other. Every
//! version of a key is kept (ordered newest first), so a reader at any
//! snapshot finds the version it should see. Once the memtable reaches
//! `Options::memtable_bytes` it is frozen and flushed to a level-0 table; its
//! write-ahead log (numbered `wal_number`) is deleted once that table is
//! recorded in the manifest.

use std::cmp::Ordering as KeyOrdering;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_skiplist::SkipMap;

use crate::error::Result;
use crate::iter::InternalIterator;
use crate::key::{
    compare_user_keys, decode_internal_key, encode_internal_key, SequenceNumber, ValueKind,
    TRAILER_LEN,
};

/// Bytes charged per entry on top of its key and value (the skip-list node
/// with its inline key buffer and tower, the value's allocation): keeps the
/// flush threshold honest for small entries.
const ENTRY_OVERHEAD: usize = 64;

/// What a memtable knows about a key at a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MemLookup {
    /// The newest visible version is a value.
    Value(Vec<u8>),
    /// The newest visible version is a tombstone.
    Deleted,
}

/// User keys of up to this many bytes are stored inside the skip-list node
/// (see [`MemKey`]).
const INLINE_KEY_BYTES: usize = 30;

/// A user key's bytes: inline when short, else on the heap.
#[derive(Clone)]
enum KeyBytes {
    /// A key of `len <= INLINE_KEY_BYTES` bytes, in the first `len` of `bytes`.
    Inline {
        len: u8,
        bytes: [u8; INLINE_KEY_BYTES],
    },
    /// A longer key.
    Heap(Box<[u8]>),
}

impl KeyBytes {
    fn new(key: &[u8]) -> KeyBytes {
        if key.len() <= INLINE_KEY_BYTES {
            let mut bytes = [0u8; INLINE_KEY_BYTES];
            bytes[..key.len()].copy_from_slice(key);
            KeyBytes::Inline {
                len: key.len() as u8,
                bytes,
            }
        } else {
            KeyBytes::Heap(key.into())
        }
    }

    #[inline]
    fn as_slice(&self) -> &[u8] {
        match self {
            KeyBytes::Inline { len, bytes } => &bytes[..usize::from(*len).min(INLINE_KEY_BYTES)],
            KeyBytes::Heap(bytes) => bytes,
        }
    }
}

/// The skip list's key: one version of a user key, ordered as internal keys
/// are (user key ascending, then sequence and kind descending: newest
/// first).
///
/// Why not [`InternalKey`](crate::key::InternalKey), whose user key is a
/// `Vec`: the skip list keeps its keys inside its nodes, so a short key
/// stored inline costs no allocation of its own (an insert allocates the
/// node and the value, two allocations where it took three) and a
/// comparison during a search reads the node it already loaded rather than
/// a second cache line elsewhere; a lookup's probe key allocates nothing.
/// Measured in docs/benchmarks.md, "Loads: the memtable's keys".
#[derive(Clone)]
struct MemKey {
    user_key: KeyBytes,
    seq: SequenceNumber,
    kind: ValueKind,
}

impl MemKey {
    fn new(user_key: &[u8], seq: SequenceNumber, kind: ValueKind) -> MemKey {
        MemKey {
            user_key: KeyBytes::new(user_key),
            seq,
            kind,
        }
    }

    #[inline]
    fn user_key(&self) -> &[u8] {
        self.user_key.as_slice()
    }

    /// The encoded internal key (`user_key ++ trailer`).
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.user_key().len() + TRAILER_LEN);
        encode_internal_key(&mut out, self.user_key(), self.seq, self.kind);
        out
    }
}

impl PartialEq for MemKey {
    fn eq(&self, other: &MemKey) -> bool {
        self.cmp(other) == KeyOrdering::Equal
    }
}

impl Eq for MemKey {}

impl Ord for MemKey {
    #[inline]
    fn cmp(&self, other: &MemKey) -> KeyOrdering {
        // As `InternalKey`'s order: (seq, kind) descending, for every
        // sequence number (not only those a packed trailer holds).
        compare_user_keys(self.user_key(), other.user_key())
            .then_with(|| (other.seq, other.kind as u8).cmp(&(self.seq, self.kind as u8)))
    }
}

impl PartialOrd for MemKey {
    fn partial_cmp(&self, other: &MemKey) -> Option<KeyOrdering> {
        Some(self.cmp(other))
    }
}

/// A sorted, concurrent in-memory table of internal keys.
pub(crate) struct Memtable {
    map: SkipMap<MemKey, Box<[u8]>>,
    approx_bytes: AtomicUsize,
    wal_number: u64,
}

impl Memtable {
    /// An empty memtable whose writes are logged in WAL `wal_number`.
    pub(crate) fn new(wal_number: u64) -> Memtable {
        Memtable {
            map: SkipMap::new(),
            approx_bytes: AtomicUsize::new(0),
            wal_number,
        }
    }

    /// The number of the write-ahead log holding this memtable's writes.
    pub(crate) fn wal_number(&self) -> u64 {
        self.wal_number
    }

    /// Inserts one version.
    pub(crate) fn insert(
        &self,
        user_key: &[u8],
        seq: SequenceNumber,
        kind: ValueKind,
        value: &[u8],
    ) {
        self.approx_bytes.fetch_add(
            user_key.len() + value.len() + ENTRY_OVERHEAD,
            Ordering::Relaxed,
        );
        self.map
            .insert(MemKey::new(user_key, seq, kind), value.into());
    }

    /// The newest version of `user_key` with sequence `<= snapshot`.
    pub(crate) fn get(&self, user_key: &[u8], snapshot: SequenceNumber) -> Option<MemLookup> {
        let probe = MemKey::new(user_key, snapshot, ValueKind::Put);
        let entry = self.map.lower_bound(Bound::Included(&probe))?;
        let key = entry.key();
        if !crate::key::same_user_key(key.user_key(), user_key) {
            return None;
        }
        Some(match key.kind {
            ValueKind::Put => MemLookup::Value(entry.value().to_vec()),
            ValueKind::Delete => MemLookup::Deleted,
        })
    }

    /// Approximate memory used by keys, values and nodes.
    pub(crate) fn approx_bytes(&self) -> usize {
        self.approx_bytes.load(Ordering::Relaxed)
    }

    /// Versions held (every version of every key).
    pub(crate) fn entries(&self) -> usize {
        self.map.len()
    }

    /// True when nothing was inserted.
    pub(crate) fn is_empty(&self) -> bool {
        // Every insert adds to the byte count first: one atomic load, no
        // skip-list epoch pinning on the read path.
        self.approx_bytes.load(Ordering::Relaxed) == 0
    }

    /// A cursor over the memtable's versions in internal-key order.
    pub(crate) fn iter(self: &Arc<Self>) -> MemtableIter {
        MemtableIter {
            mem: Arc::clone(self),
            buf: Vec::new(),
            pos: 0,
            lo: None,
            hi: None,
            fill: FIRST_FILL,
        }
    }

    /// Number of distinct `n`-byte prefixes among the memtable's keys (keys
    /// shorter than `n` have none): what a table written from it adds to
    /// its filter besides the keys, with a prefix length `n`.
    pub(crate) fn distinct_prefixes(&self, n: usize) -> u64 {
        let mut count = 0;
        let mut last: Option<Vec<u8>> = None;
        for entry in self.map.iter() {
            let key = entry.key().user_key();
            if key.len() >= n && last.as_deref() != Some(&key[..n]) {
                count += 1;
                last = Some(key[..n].to_vec());
            }
        }
        count
    }

    /// Calls `f` on every version in internal-key order (used by flushes).
    pub(crate) fn for_each(
        &self,
        mut f: impl FnMut(&[u8], SequenceNumber, ValueKind, &[u8]) -> Result<()>,
    ) -> Result<()> {
        for entry in self.map.iter() {
            let k = entry.key();
            f(k.user_key(), k.seq, k.kind, entry.value())?;
        }
        Ok(())
    }
}

/// Entries copied out of the skip list per refill, at most: amortises the
/// lookups while keeping the cursor independent of the skip list's borrows.
const REFILL: usize = 64;

/// Entries copied by the first fill after a seek; each refill (in either
/// direction) doubles it, up to [`REFILL`], and a seek starts over. A short scan copies little, and
/// a backward fill (each step back in the skip list is a search from its
/// head) pays for few entries it does not use.
const FIRST_FILL: usize = 8;

/// A cursor over a memtable. It copies entries out in small batches (a
/// window of the skip list, refilled forward or backward when the cursor
/// steps off either end), so it owns its data and sees inserts made after
/// it was created only if they sort outside its window (the engine filters
/// them out by sequence).
pub(crate) struct MemtableIter {
    mem: Arc<Memtable>,
    /// The window: encoded internal keys and values, in order.
    buf: Vec<(Vec<u8>, Vec<u8>)>,
    /// The current entry in `buf`; `buf.len()` when invalid.
    pos: usize,
    /// The skip-list key of the window's first entry when the skip list
    /// may hold entries before the window: where a backward refill starts.
    lo: Option<MemKey>,
    /// The skip-list key of the window's last entry when the skip list may
    /// hold entries after the window: where a forward refill starts.
    hi: Option<MemKey>,
    /// Entries the next fill copies at most.
    fill: usize,
}

impl MemtableIter {
    /// Fills the window with up to `self.fill` entries from `lower` on and
    /// moves to its first.
    fn fill_from(&mut self, lower: Bound<&MemKey>) {
        let limit = self.fill;
        self.buf.clear();
        self.lo = None;
        self.hi = None;
        let mut cursor = self.mem.map.lower_bound(lower);
        while let Some(entry) = cursor {
            self.buf
                .push((entry.key().encode(), entry.value().to_vec()));
            if self.buf.len() == 1 && !matches!(lower, Bound::Unbounded) {
                self.lo = Some(entry.key().clone());
            }
            if self.buf.len() == limit {
                self.hi = Some(entry.key().clone());
                break;
            }
            cursor = entry.next();
        }
        self.pos = 0;
    }

    /// Fills the window with up to `self.fill` entries up to `upper` and
    /// moves to its last.
    fn fill_back(&mut self, upper: Bound<&MemKey>) {
        let limit = self.fill;
        self.buf.clear();
        self.lo = None;
        self.hi = None;
        let mut cursor = self.mem.map.upper_bound(upper);
        while let Some(entry) = cursor {
            self.buf
                .push((entry.key().encode(), entry.value().to_vec()));
            if self.buf.len() == 1 && !matches!(upper, Bound::Unbounded) {
                self.hi = Some(entry.key().clone());
            }
            if self.buf.len() == limit {
                self.lo = Some(entry.key().clone());
                break;
            }
            cursor = entry.prev();
        }
        self.buf.reverse();
        self.pos = self.buf.len().saturating_sub(1);
    }
}

impl InternalIterator for MemtableIter {
    fn valid(&self) -> bool {
        self.pos < self.buf.len()
    }

    fn seek_to_first(&mut self) -> Result<()> {
        self.fill = FIRST_FILL;
        self.fill_from(Bound::Unbounded);
        Ok(())
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let probe = probe_key(target);
        self.fill = FIRST_FILL;
        self.fill_from(Bound::Included(&probe));
        Ok(())
    }

    fn next(&mut self) -> Result<()> {
        self.pos += 1;
        if self.pos >= self.buf.len() {
            if let Some(last) = self.hi.take() {
                self.fill = (self.fill * 2).min(REFILL);
                self.fill_from(Bound::Excluded(&last));
            } else {
                self.pos = self.buf.len();
            }
        }
        Ok(())
    }

    fn seek_to_last(&mut self) -> Result<()> {
        self.fill = FIRST_FILL;
        self.fill_back(Bound::Unbounded);
        Ok(())
    }

    fn prev(&mut self) -> Result<()> {
        if self.pos > 0 && self.pos < self.buf.len() {
            self.pos -= 1;
        } else if let Some(first) = self.lo.take() {
            self.fill = (self.fill * 2).min(REFILL);
            self.fill_back(Bound::Excluded(&first));
        } else {
            self.pos = self.buf.len();
        }
        Ok(())
    }

    fn seek_before(&mut self, target: &[u8]) -> Result<()> {
        let probe = probe_key(target);
        self.fill = FIRST_FILL;
        self.fill_back(Bound::Excluded(&probe));
        Ok(())
    }

    fn key(&self) -> &[u8] {
        &self.buf[self.pos].0
    }

    fn value(&self) -> &[u8] {
        &self.buf[self.pos].1
    }
}

/// The skip-list key a seek target stands for: the target itself when it
/// is an encoded internal key, otherwise the newest version of the target
/// taken as a user key.
fn probe_key(target: &[u8]) -> MemKey {
    match decode_internal_key(target) {
        Some((user, seq, kind)) => MemKey::new(user, seq, kind),
        None => MemKey::new(target, crate::key::MAX_SEQUENCE, ValueKind::Put),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::encode_internal_key;

    fn ikey(i: u32) -> Vec<u8> {
        let mut k = Vec::new();
        encode_internal_key(&mut k, format!("k{i:05}").as_bytes(), 1, ValueKind::Put);
        k
    }

    /// Keys on both sides of the inline limit (empty, 29 to 32 bytes,
    /// 100 bytes; shared prefixes; several versions each, puts and
    /// deletes): the memtable's order is the encoded internal keys' order,
    /// and `get` at every snapshot answers as a model of the versions.
    #[test]
    fn inline_and_heap_keys_order_and_answer_like_a_model() {
        let mut user_keys: Vec<Vec<u8>> = vec![Vec::new(), vec![0xff; 100], vec![0; 31]];
        for len in [1, 8, 29, 30, 31, 32, 100] {
            for fill in [0x00u8, 0x61, 0xff] {
                user_keys.push(vec![fill; len]);
                let mut k = vec![fill; len];
                k[len - 1] ^= 0x80;
                user_keys.push(k);
            }
        }
        let mem = Memtable::new(1);
        let mut versions = Vec::new();
        let mut seq = 0;
        for round in 0..3u8 {
            for (i, k) in user_keys.iter().enumerate() {
                seq += 1;
                let kind = if (i + usize::from(round)) % 3 == 0 {
                    ValueKind::Delete
                } else {
                    ValueKind::Put
                };
                let value = vec![round; i % 5];
                mem.insert(k, seq, kind, &value);
                versions.push((k.clone(), seq, kind, value));
            }
        }
        let mut expected: Vec<Vec<u8>> = versions
            .iter()
            .map(|(k, seq, kind, _)| {
                let mut e = Vec::new();
                encode_internal_key(&mut e, k, *seq, *kind);
                e
            })
            .collect();
        expected.sort_by(|a, b| crate::key::compare_internal(a, b));
        let mut seen = Vec::new();
        mem.for_each(|k, seq, kind, _| {
            let mut e = Vec::new();
            encode_internal_key(&mut e, k, seq, kind);
            seen.push(e);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, expected);
        for k in &user_keys {
            for snapshot in 0..=seq + 1 {
                let newest = versions
                    .iter()
                    .filter(|(vk, vseq, _, _)| vk == k && *vseq <= snapshot)
                    .max_by_key(|(_, vseq, _, _)| *vseq);
                let want = newest.map(|(_, _, kind, value)| match kind {
                    ValueKind::Put => MemLookup::Value(value.clone()),
                    ValueKind::Delete => MemLookup::Deleted,
                });
                assert_eq!(mem.get(k, snapshot), want, "{k:?} at {snapshot}");
            }
        }
    }

    /// The memtable orders versions as `InternalKey` does for every
    /// sequence number, including those above the 56 bits a packed trailer
    /// keeps (its order compares the full numbers), across the inline limit.
    #[test]
    fn order_is_the_internal_key_order_for_every_sequence_number() {
        use crate::key::{InternalKey, MAX_SEQUENCE};
        let mem = Memtable::new(1);
        let mut expected = Vec::new();
        let seqs = [
            0,
            1,
            255,
            256,
            MAX_SEQUENCE - 1,
            MAX_SEQUENCE,
            MAX_SEQUENCE + 1,
            u64::MAX,
        ];
        for len in [1usize, 29, 30, 31, 33] {
            for (i, &seq) in seqs.iter().enumerate() {
                let kind = if i % 2 == 0 {
                    ValueKind::Put
                } else {
                    ValueKind::Delete
                };
                let key = vec![0x80u8; len];
                mem.insert(&key, seq, kind, b"");
                expected.push(InternalKey::new(key, seq, kind));
            }
        }
        expected.sort();
        let mut seen = Vec::new();
        mem.for_each(|k, seq, kind, _| {
            seen.push(InternalKey::new(k, seq, kind));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, expected);
    }

    /// The cursor walks both ways from anywhere, across window refills in
    /// either direction (a forward window stepped back past its start, a
    /// backward window stepped forward past its end).
    #[test]
    fn cursor_walks_both_ways_across_windows() {
        let mem = Arc::new(Memtable::new(1));
        let n = 5 * REFILL as u32 + 7;
        for i in 0..n {
            mem.insert(
                format!("k{i:05}").as_bytes(),
                1,
                ValueKind::Put,
                &i.to_le_bytes(),
            );
        }
        let mut it = mem.iter();
        let at = |it: &MemtableIter, i: u32| {
            assert!(it.valid(), "entry {i}");
            assert_eq!(it.key(), ikey(i).as_slice());
            assert_eq!(it.value(), i.to_le_bytes());
        };
        // Forward from the middle, then back past the first window's start.
        it.seek(&ikey(100)).unwrap();
        for i in 100..250 {
            at(&it, i);
            it.next().unwrap();
        }
        for i in (0..=250).rev() {
            at(&it, i);
            it.prev().unwrap();
        }
        assert!(!it.valid());
        // Backward from the end, then forward past the window's end.
        it.seek_to_last().unwrap();
        for i in (100..n).rev() {
            at(&it, i);
            it.prev().unwrap();
        }
        for i in 99..n {
            at(&it, i);
            it.next().unwrap();
        }
        assert!(!it.valid());
        // seek_before: the last entry strictly before the target.
        it.seek_before(&ikey(200)).unwrap();
        at(&it, 199);
        it.seek_before(&ikey(0)).unwrap();
        assert!(!it.valid());
        it.seek_to_first().unwrap();
        at(&it, 0);
        it.prev().unwrap();
        assert!(!it.valid());
    }
}
