//! Blocks of prefix-compressed sorted entries with restart points: the
//! builder used for data and index blocks, and a zero-copy reader.
//!
//! # Layout
//!
//! ```text
//! entry*  restart_offset: u32 LE * num_restarts  num_restarts: u32 LE
//! entry = shared: varint32 | unshared: varint32 | value_len: varint32
//!         | key[shared..] (unshared bytes) | value (value_len bytes)
//! ```
//!
//! `shared` is the length of the prefix the key has in common with the
//! previous key of the block. Every `restart_interval`-th entry is a *restart
//! point*: it stores its whole key (`shared == 0`) and its offset is listed
//! in the restart array, so a reader binary-searches the restart points and
//! then decodes at most `restart_interval` entries. Keys are encoded internal
//! keys (`user_key ++ 8-byte trailer`, see [`crate::key`]).
//!
//! An empty block (no entries, `num_restarts == 0`) is only written as the
//! index block of a table without entries.

use std::cmp::Ordering;
use std::ops::Range;

use super::format::{get_varint32, put_varint64};
use crate::key::TRAILER_LEN;

/// Accumulates sorted entries into one block.
#[derive(Debug)]
pub(crate) struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    restart_interval: usize,
    since_restart: usize,
    last_key: Vec<u8>,
    entries: usize,
    /// Largest size the finished block may reach: `u32::MAX`, what its
    /// restart offsets address (lowered by tests).
    limit: usize,
}

/// Bytes an entry can add to a block besides its key and value: three
/// varints of at most 5 bytes (lengths below 4 GiB) and one restart offset.
const ENTRY_OVERHEAD_BOUND: usize = 3 * 5 + 4;

impl BlockBuilder {
    /// A builder that places a restart point every `restart_interval`
    /// entries (at least 1).
    pub(crate) fn new(restart_interval: usize) -> BlockBuilder {
        BlockBuilder {
            buf: Vec::new(),
            restarts: Vec::new(),
            restart_interval: restart_interval.max(1),
            since_restart: 0,
            last_key: Vec::new(),
            entries: 0,
            limit: u32::MAX as usize,
        }
    }

    /// The same builder with a lower size limit, so tests can reach it.
    #[cfg(test)]
    pub(crate) fn with_limit(mut self, limit: usize) -> BlockBuilder {
        self.limit = limit.min(u32::MAX as usize);
        self
    }

    /// True when an entry with a `key_len`-byte key and a `value_len`-byte
    /// value certainly keeps the finished block within the 4 GiB its `u32`
    /// restart offsets address. Conservative: counts the whole key even if
    /// it shares a prefix with the previous one.
    pub(crate) fn has_room_for(&self, key_len: usize, value_len: usize) -> bool {
        self.estimated_size()
            .saturating_add(key_len)
            .saturating_add(value_len)
            .saturating_add(ENTRY_OVERHEAD_BOUND)
            <= self.limit
    }

    /// Appends an entry. The caller guarantees keys arrive in order and that
    /// the block stays below 4 GiB (restart offsets are `u32`; see
    /// [`has_room_for`](Self::has_room_for)).
    pub(crate) fn add(&mut self, key: &[u8], value: &[u8]) {
        let shared = if self.entries == 0 || self.since_restart >= self.restart_interval {
            self.restarts.push(self.buf.len() as u32);
            self.since_restart = 0;
            0
        } else {
            common_prefix_len(&self.last_key, key)
        };
        let unshared = &key[shared..];
        put_varint64(&mut self.buf, shared as u64);
        put_varint64(&mut self.buf, unshared.len() as u64);
        put_varint64(&mut self.buf, value.len() as u64);
        self.buf.extend_from_slice(unshared);
        self.buf.extend_from_slice(value);
        self.last_key.truncate(shared);
        self.last_key.extend_from_slice(unshared);
        self.since_restart += 1;
        self.entries += 1;
    }

    /// Size of the block if it were finished now.
    pub(crate) fn estimated_size(&self) -> usize {
        self.buf.len() + self.restarts.len() * 4 + 4
    }

    /// True when no entry has been added since the last reset.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// The last key added.
    pub(crate) fn last_key(&self) -> &[u8] {
        &self.last_key
    }

    /// Appends the restart array and returns the finished block contents.
    /// Call [`reset`](Self::reset) before adding to the next block.
    pub(crate) fn finish(&mut self) -> &[u8] {
        for r in &self.restarts {
            self.buf.extend_from_slice(&r.to_le_bytes());
        }
        self.buf
            .extend_from_slice(&(self.restarts.len() as u32).to_le_bytes());
        &self.buf
    }

    /// Empties the builder, keeping its allocations.
    pub(crate) fn reset(&mut self) {
        self.buf.clear();
        self.restarts.clear();
        self.since_restart = 0;
        self.last_key.clear();
        self.entries = 0;
    }
}

/// Damage found while decoding a block: the file offset of the bad bytes
/// and what was wrong. The table turns it into [`crate::Error::Corruption`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlockCorruption {
    pub(crate) offset: u64,
    pub(crate) reason: &'static str,
}

/// One decoded entry header.
#[derive(Debug, Clone)]
pub(crate) struct EntryRef<'a> {
    /// Bytes shared with the previous key.
    pub(crate) shared: usize,
    /// The rest of the key.
    pub(crate) delta: &'a [u8],
    /// The value, as a range inside the block contents.
    pub(crate) value: Range<usize>,
    /// Offset of the next entry.
    pub(crate) next: usize,
}

/// Result of [`BlockView::seek`].
#[derive(Debug, Clone)]
pub(crate) struct SeekResult {
    /// The first entry `>= target`: (value range, offset of the next entry).
    /// Its key is left in the caller's key buffer. `None` if every entry of
    /// the block is smaller than the target.
    pub(crate) hit: Option<(Range<usize>, usize)>,
    /// Offset of the hit's entry in the block (0 without a hit): where a
    /// cursor steps back from.
    pub(crate) hit_start: usize,
    /// True when the entry just before the hit (or the last entry, if there
    /// is no hit) lies in this block and has the target's user key.
    pub(crate) prev_same_user: bool,
    /// True when the hit is the block's first entry, so the entry before it
    /// (if any) is in the previous block.
    pub(crate) hit_is_first: bool,
}

/// Compares an encoded internal key with `(user_key, trailer)` in
/// internal-key order (user key ascending, trailer descending). `key` must
/// hold at least [`TRAILER_LEN`] bytes.
/// The length of the longest common prefix of `a` and `b`.
///
/// Eight bytes at a time: the first differing byte of two little-endian
/// words is the lowest set byte of their XOR. Keys of a block share long
/// prefixes (a table's keys are sorted), and the byte-at-a-time loop this
/// replaced was a tenth of a compaction's block building.
#[inline]
pub(crate) fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut done = 0;
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        let (mut wx, mut wy) = ([0u8; 8], [0u8; 8]);
        wx.copy_from_slice(x);
        wy.copy_from_slice(y);
        let diff = u64::from_le_bytes(wx) ^ u64::from_le_bytes(wy);
        if diff != 0 {
            return done + (diff.trailing_zeros() / 8) as usize;
        }
        done += 8;
    }
    done + a[done..]
        .iter()
        .zip(&b[done..])
        .take_while(|(x, y)| x == y)
        .count()
}

#[inline]
pub(crate) fn cmp_internal_parts(key: &[u8], user_key: &[u8], trailer: u64) -> Ordering {
    let split = key.len().saturating_sub(TRAILER_LEN);
    let (ku, kt) = key.split_at(split);
    match crate::key::compare_user_keys(ku, user_key) {
        Ordering::Equal => {
            let mut t = [0u8; TRAILER_LEN];
            if kt.len() == TRAILER_LEN {
                t.copy_from_slice(kt);
            }
            trailer.cmp(&u64::from_le_bytes(t))
        }
        other => other,
    }
}

/// The user-key part of an encoded internal key (at least 8 bytes long).
#[inline]
pub(crate) fn user_part(key: &[u8]) -> &[u8] {
    &key[..key.len().saturating_sub(TRAILER_LEN)]
}

/// A validated, borrowed view of one block's contents.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockView<'a> {
    contents: &'a [u8],
    entries_end: usize,
    num_restarts: usize,
    base: u64,
}

impl<'a> BlockView<'a> {
    /// Checks the restart array of `contents`. `base` is the file offset of
    /// the block, used to report where damage lies.
    pub(crate) fn parse(contents: &'a [u8], base: u64) -> Result<BlockView<'a>, BlockCorruption> {
        let corrupt = |at: usize, reason| BlockCorruption {
            offset: base + at as u64,
            reason,
        };
        let len = contents.len();
        let Some(count_at) = len.checked_sub(4) else {
            return Err(corrupt(0, "block shorter than its restart count"));
        };
        let mut w = [0u8; 4];
        w.copy_from_slice(&contents[count_at..]);
        let num_restarts = u32::from_le_bytes(w) as usize;
        let Some(entries_end) = num_restarts
            .checked_mul(4)
            .and_then(|r| count_at.checked_sub(r))
        else {
            return Err(corrupt(count_at, "restart count larger than the block"));
        };
        if (num_restarts == 0) != (entries_end == 0) {
            return Err(corrupt(count_at, "restart count does not match entries"));
        }
        let view = BlockView {
            contents,
            entries_end,
            num_restarts,
            base,
        };
        if num_restarts > 0 && view.restart(0)? != 0 {
            return Err(corrupt(
                entries_end,
                "first restart point is not at offset 0",
            ));
        }
        Ok(view)
    }

    fn corrupt(&self, at: usize, reason: &'static str) -> BlockCorruption {
        BlockCorruption {
            offset: self.base + at as u64,
            reason,
        }
    }

    /// Offset one past the last entry.
    pub(crate) fn entries_end(&self) -> usize {
        self.entries_end
    }

    /// The block contents this view reads.
    pub(crate) fn contents(&self) -> &'a [u8] {
        self.contents
    }

    fn restart(&self, i: usize) -> Result<usize, BlockCorruption> {
        let at = self.entries_end + i * 4;
        let mut w = [0u8; 4];
        match self.contents.get(at..at + 4) {
            Some(b) => w.copy_from_slice(b),
            None => return Err(self.corrupt(at, "restart index out of range")),
        }
        let off = u32::from_le_bytes(w) as usize;
        if off >= self.entries_end {
            return Err(self.corrupt(at, "restart point past the entries"));
        }
        Ok(off)
    }

    /// Decodes every entry and checks what [`parse`](Self::parse) takes on
    /// trust because a read cannot afford it: each restart point is the
    /// start of an entry that shares nothing with the key before it, and
    /// the restart points increase. (A restart offset inside a value, its
    /// checksum valid, would let a seek decode the value's bytes as
    /// entries.) Returns the block's last key (empty for an empty block).
    pub(crate) fn check_entries(&self) -> Result<Vec<u8>, BlockCorruption> {
        let mut key = Vec::new();
        let mut pos = 0;
        let mut next_restart = 0;
        let mut restart = if self.num_restarts > 0 {
            Some(self.restart(0)?)
        } else {
            None
        };
        while pos < self.entries_end {
            let e = self.entry(pos, key.len())?;
            if restart == Some(pos) {
                if e.shared != 0 {
                    return Err(self.corrupt(pos, "entry at a restart point shares a prefix"));
                }
                next_restart += 1;
                restart = if next_restart < self.num_restarts {
                    let r = self.restart(next_restart)?;
                    if r <= pos {
                        return Err(self.corrupt(
                            self.entries_end + next_restart * 4,
                            "restart points do not increase",
                        ));
                    }
                    Some(r)
                } else {
                    None
                };
            } else if restart.is_some_and(|r| r < pos) {
                return Err(self.corrupt(
                    self.entries_end + next_restart * 4,
                    "restart point inside an entry",
                ));
            }
            key.truncate(e.shared);
            key.extend_from_slice(e.delta);
            pos = e.next;
        }
        if restart.is_some() {
            return Err(self.corrupt(
                self.entries_end + next_restart * 4,
                "restart point inside an entry",
            ));
        }
        Ok(key)
    }

    /// Decodes the entry header at `pos`; `prev_key_len` is the length of
    /// the previous key (0 at a restart point).
    #[inline]
    pub(crate) fn entry(
        &self,
        pos: usize,
        prev_key_len: usize,
    ) -> Result<EntryRef<'a>, BlockCorruption> {
        let entries = &self.contents[..self.entries_end];
        let bad_header = || self.corrupt(pos, "bad entry header");
        let (shared, p) = get_varint32(entries, pos).ok_or_else(bad_header)?;
        let (unshared, p) = get_varint32(entries, p).ok_or_else(bad_header)?;
        let (value_len, p) = get_varint32(entries, p).ok_or_else(bad_header)?;
        if shared > prev_key_len {
            return Err(self.corrupt(pos, "shared key prefix longer than the previous key"));
        }
        let Some(delta) = p.checked_add(unshared).and_then(|end| entries.get(p..end)) else {
            return Err(self.corrupt(pos, "entry key runs past the block"));
        };
        let key_end = p + unshared;
        let value_end = key_end.saturating_add(value_len);
        if value_end > self.entries_end {
            return Err(self.corrupt(pos, "entry value runs past the block"));
        }
        if shared + unshared < TRAILER_LEN {
            return Err(self.corrupt(pos, "entry key shorter than its trailer"));
        }
        Ok(EntryRef {
            shared,
            delta,
            value: key_end..value_end,
            next: value_end,
        })
    }

    /// Decodes the entry at `pos` into `key` (which holds the previous key)
    /// and returns (value range, offset of the next entry).
    #[inline]
    pub(crate) fn next_into(
        &self,
        pos: usize,
        key: &mut Vec<u8>,
    ) -> Result<(Range<usize>, usize), BlockCorruption> {
        let e = self.entry(pos, key.len())?;
        key.truncate(e.shared);
        key.extend_from_slice(e.delta);
        Ok((e.value, e.next))
    }

    /// Finds the first entry whose key is `>= (user_key, trailer)`: a binary
    /// search over the restart points comparing user-key bytes in place,
    /// then a scan of at most one restart interval. `key` receives the hit's
    /// key.
    pub(crate) fn seek(
        &self,
        user_key: &[u8],
        trailer: u64,
        key: &mut Vec<u8>,
    ) -> Result<SeekResult, BlockCorruption> {
        key.clear();
        if self.num_restarts == 0 {
            return Ok(SeekResult {
                hit: None,
                hit_start: 0,
                prev_same_user: false,
                hit_is_first: false,
            });
        }
        // Invariant: restart `lo` is the first one, or its key is < target.
        let (mut lo, mut hi) = (0usize, self.num_restarts - 1);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            let off = self.restart(mid)?;
            let e = self.entry(off, 0)?;
            if cmp_internal_parts(e.delta, user_key, trailer) == Ordering::Less {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        let mut pos = self.restart(lo)?;
        let mut first = lo == 0;
        let mut prev_same_user = false;
        while pos < self.entries_end {
            let (value, next) = self.next_into(pos, key)?;
            if cmp_internal_parts(key, user_key, trailer) != Ordering::Less {
                return Ok(SeekResult {
                    hit: Some((value, next)),
                    hit_start: pos,
                    prev_same_user,
                    hit_is_first: first,
                });
            }
            prev_same_user = crate::key::same_user_key(user_part(key), user_key);
            first = false;
            pos = next;
        }
        Ok(SeekResult {
            hit: None,
            hit_start: 0,
            prev_same_user,
            hit_is_first: false,
        })
    }

    /// Decodes, in order, the entries from the last restart point before
    /// `pos` up to the entry that ends at `pos`, calling `visit(offset, key,
    /// value range, offset of the next entry)` on each; `key` ends holding
    /// the last one's key. Nothing is visited when `pos` is 0.
    ///
    /// Keys are prefix-compressed, so stepping back means decoding forward
    /// from a restart point (found by binary search): at most one restart
    /// interval. A cursor walking backward keeps what this visits and
    /// steps through the interval without decoding it again.
    pub(crate) fn entries_before(
        &self,
        pos: usize,
        key: &mut Vec<u8>,
        mut visit: impl FnMut(usize, &[u8], Range<usize>, usize),
    ) -> Result<(), BlockCorruption> {
        if pos == 0 || self.num_restarts == 0 {
            return Ok(());
        }
        if pos > self.entries_end {
            return Err(self.corrupt(pos, "entry offset past the entries"));
        }
        // Invariant: restart `lo` is the first one (at offset 0 < pos), or
        // its offset is < pos.
        let (mut lo, mut hi) = (0usize, self.num_restarts - 1);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if self.restart(mid)? < pos {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        let mut at = self.restart(lo)?;
        key.clear();
        loop {
            let (value, next) = self.next_into(at, key)?;
            if next > pos {
                // Entries decoded from the restart point step over `pos`:
                // it is not an entry boundary (damaged restart array).
                return Err(self.corrupt(at, "entries do not line up with the restart points"));
            }
            visit(at, key, value, next);
            if next == pos {
                return Ok(());
            }
            at = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-at-a-time prefix length agrees with a byte loop for every
    /// split point of keys of 0 to 40 bytes, whichever is shorter.
    #[test]
    fn common_prefix_len_agrees_with_a_byte_loop() {
        let naive = |a: &[u8], b: &[u8]| a.iter().zip(b).take_while(|(x, y)| x == y).count();
        for len in 0..=40usize {
            let a: Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(37)).collect();
            for other_len in [0, len / 2, len, len + 3] {
                for split in 0..=len.min(other_len) {
                    let mut b: Vec<u8> = (0..other_len as u8).map(|i| i.wrapping_mul(37)).collect();
                    if split < b.len() {
                        b[split] ^= 0x40;
                    }
                    assert_eq!(common_prefix_len(&a, &b), naive(&a, &b), "{a:?} {b:?}");
                    assert_eq!(common_prefix_len(&b, &a), naive(&b, &a));
                }
            }
        }
    }
    use crate::key::{encode_internal_key, pack_trailer, ValueKind};

    /// The entry that ends at `pos` (the last one `entries_before`
    /// visits): (offset, value range, offset of the next entry).
    fn entry_before(
        view: &BlockView<'_>,
        pos: usize,
        key: &mut Vec<u8>,
    ) -> Result<Option<(usize, Range<usize>, usize)>, BlockCorruption> {
        let mut last = None;
        view.entries_before(pos, key, |start, _, value, next| {
            last = Some((start, value, next));
        })?;
        Ok(last)
    }

    fn ikey(user: &[u8], seq: u64) -> Vec<u8> {
        let mut k = Vec::new();
        encode_internal_key(&mut k, user, seq, ValueKind::Put);
        k
    }

    #[test]
    fn build_and_seek() {
        let mut b = BlockBuilder::new(4);
        let keys: Vec<Vec<u8>> = (0..50u32)
            .map(|i| ikey(format!("key{:04}", i * 2).as_bytes(), 7))
            .collect();
        for (i, k) in keys.iter().enumerate() {
            b.add(k, format!("v{i}").as_bytes());
        }
        let contents = b.finish().to_vec();
        let view = BlockView::parse(&contents, 0).unwrap();
        let mut key = Vec::new();
        for i in 0..100u32 {
            let user = format!("key{:04}", i);
            let r = view
                .seek(user.as_bytes(), pack_trailer(7, ValueKind::Put), &mut key)
                .unwrap();
            let want = i.div_ceil(2) as usize;
            match r.hit {
                Some((v, _)) => {
                    assert_eq!(key, keys[want]);
                    assert_eq!(&contents[v], format!("v{want}").as_bytes());
                }
                None => assert_eq!(want, 50),
            }
        }
        // Walk all entries.
        key.clear();
        let (mut pos, mut n) = (0, 0);
        while pos < view.entries_end() {
            let (_, next) = view.next_into(pos, &mut key).unwrap();
            assert_eq!(key, keys[n]);
            n += 1;
            pos = next;
        }
        assert_eq!(n, 50);
    }

    /// Walking backward with `entry_before` from the end visits every
    /// entry in reverse, with its value and offsets, for every restart
    /// interval (1 = every entry a restart point).
    #[test]
    fn entry_before_walks_backward() {
        for interval in [1, 2, 3, 4, 16, 100] {
            let mut b = BlockBuilder::new(interval);
            let keys: Vec<Vec<u8>> = (0..37u32)
                .map(|i| ikey(format!("key{:04}", i * 3).as_bytes(), 5))
                .collect();
            for (i, k) in keys.iter().enumerate() {
                b.add(k, format!("v{i}").as_bytes());
            }
            let contents = b.finish().to_vec();
            let view = BlockView::parse(&contents, 0).unwrap();
            let mut key = Vec::new();
            let mut pos = view.entries_end();
            for want in (0..keys.len()).rev() {
                let (start, value, next) = entry_before(&view, pos, &mut key).unwrap().unwrap();
                assert_eq!(next, pos, "interval {interval}");
                assert_eq!(key, keys[want], "interval {interval}");
                assert_eq!(&contents[value], format!("v{want}").as_bytes());
                pos = start;
            }
            assert_eq!(pos, 0);
            assert!(entry_before(&view, 0, &mut key).unwrap().is_none());
            // From a seek hit, one step back is the entry before it.
            let r = view
                .seek(b"key0030", pack_trailer(5, ValueKind::Put), &mut key)
                .unwrap();
            assert_eq!(key, keys[10]);
            entry_before(&view, r.hit_start, &mut key).unwrap().unwrap();
            assert_eq!(key, keys[9]);
            // An offset inside an entry is damage, not an answer.
            assert!(entry_before(&view, r.hit_start + 1, &mut key).is_err());
            assert!(entry_before(&view, view.entries_end() + 1, &mut key).is_err());
        }
    }

    /// Arbitrary damage inside a block (as if its checksum had been
    /// bypassed) yields errors or some entries, never a panic.
    #[test]
    fn damaged_blocks_never_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let mut b = BlockBuilder::new(3);
        for i in 0..40u32 {
            b.add(&ikey(format!("k{i:03}").as_bytes(), 9), &[7; 5]);
        }
        let good = b.finish().to_vec();
        let mut key = Vec::new();
        for round in 0..3000 {
            let mut bad = good.clone();
            for _ in 0..1 + round % 4 {
                let at = rng.gen_range(0..bad.len());
                bad[at] = rng.gen();
            }
            if round % 5 == 0 {
                bad.truncate(rng.gen_range(0..bad.len()));
            }
            let Ok(view) = BlockView::parse(&bad, 0) else {
                continue;
            };
            let _ = view.seek(b"k020", pack_trailer(9, ValueKind::Put), &mut key);
            key.clear();
            let mut pos = 0;
            while pos < view.entries_end() {
                match view.next_into(pos, &mut key) {
                    Ok((v, next)) => {
                        assert!(bad.get(v).is_some());
                        pos = next;
                    }
                    Err(_) => break,
                }
            }
            let mut pos = view.entries_end();
            while let Ok(Some((start, v, _))) = entry_before(&view, pos, &mut key) {
                assert!(bad.get(v).is_some());
                assert!(start < pos);
                pos = start;
            }
        }
    }

    #[test]
    fn rejects_bad_restart_arrays() {
        assert!(BlockView::parse(&[1, 0, 0], 0).is_err());
        assert!(BlockView::parse(&[0xff, 0, 0, 0], 0).is_err());
        assert!(BlockView::parse(&[0, 0, 0, 0], 0).is_ok());
        // One restart pointing past the (empty) entries.
        assert!(BlockView::parse(&[9, 0, 0, 0, 1, 0, 0, 0], 0).is_err());
    }
}
