//! Atomic write batches and their encoding in the write-ahead log.
//!
//! A batch is applied all or nothing: it is one log record, it takes
//! consecutive sequence numbers, and readers see either none or all of it.
//!
//! Log payload of a batch (little endian):
//!
//! ```text
//! first_seq: u64 | count: u32 | count x op
//! op = kind: u8 (0 delete, 1 put) | key_len: u32 | key | [value_len: u32 | value]   (value only for put)
//! ```
//!
//! The writer gives batches consecutive sequence numbers in log order, and a
//! log's seal (an empty batch, `Db`'s `seal_log`) carries the next unused
//! number without taking it. So the records of the logs a recovery replays,
//! in order, form one unbroken chain ([`SequenceChain`]): a record that
//! does not start where the previous one ended means records between them
//! were lost, such as the last write of an earlier log together with its
//! seal (which a torn-tail scan cannot tell from a crash's torn write).

use crate::error::{Error, Result};
use crate::key::{SequenceNumber, ValueKind, MAX_SEQUENCE};

/// A batch record's header: first sequence number (8) and count (4).
pub(crate) const BATCH_HEADER_BYTES: usize = 12;

/// A record holding one put, less its key and value: the header, the kind
/// byte and the two 4-byte lengths.
pub(crate) const ONE_PUT_RECORD_OVERHEAD: usize = BATCH_HEADER_BYTES + 9;

/// A group of puts and deletes applied atomically by
/// [`Db::write`](crate::Db::write).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    ops: Vec<BatchOp>,
    bytes: usize,
}

/// One operation of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BatchOp {
    pub(crate) kind: ValueKind,
    pub(crate) key: Vec<u8>,
    pub(crate) value: Vec<u8>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }

    /// Adds a put of `key` to `value`.
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> &mut Self {
        let (key, value) = (key.as_ref().to_vec(), value.as_ref().to_vec());
        self.bytes += key.len() + value.len();
        self.ops.push(BatchOp {
            kind: ValueKind::Put,
            key,
            value,
        });
        self
    }

    /// Adds a delete of `key`.
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> &mut Self {
        let key = key.as_ref().to_vec();
        self.bytes += key.len();
        self.ops.push(BatchOp {
            kind: ValueKind::Delete,
            key,
            value: Vec::new(),
        });
        self
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when the batch holds no operation.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Removes every operation.
    pub fn clear(&mut self) {
        self.ops.clear();
        self.bytes = 0;
    }

    /// Bytes of keys and values in the batch.
    pub fn data_bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn ops(&self) -> &[BatchOp] {
        &self.ops
    }

    /// Bytes of [`encode`](Self::encode)'s payload.
    pub(crate) fn encoded_len(&self) -> usize {
        let puts = self
            .ops
            .iter()
            .filter(|op| op.kind == ValueKind::Put)
            .count();
        BATCH_HEADER_BYTES + self.bytes + 5 * self.ops.len() + 4 * puts
    }

    /// Encodes the batch as a log payload starting at `first_seq`.
    pub(crate) fn encode(&self, first_seq: SequenceNumber) -> Vec<u8> {
        let mut out = Vec::with_capacity(12 + self.bytes + 9 * self.ops.len());
        out.extend_from_slice(&first_seq.to_le_bytes());
        out.extend_from_slice(&(self.ops.len() as u32).to_le_bytes());
        for op in &self.ops {
            out.push(op.kind as u8);
            out.extend_from_slice(&(op.key.len() as u32).to_le_bytes());
            out.extend_from_slice(&op.key);
            if op.kind == ValueKind::Put {
                out.extend_from_slice(&(op.value.len() as u32).to_le_bytes());
                out.extend_from_slice(&op.value);
            }
        }
        out
    }

    /// Decodes a log payload into its first sequence number and batch.
    /// `corrupt` builds the error for a malformed payload.
    pub(crate) fn decode(
        payload: &[u8],
        corrupt: impl Fn(&str) -> Error,
    ) -> Result<(SequenceNumber, WriteBatch)> {
        let (first_seq, ops) = read_payload(payload).map_err(&corrupt)?;
        let mut batch = WriteBatch::new();
        for op in ops {
            let op = op.map_err(&corrupt)?;
            match op.kind {
                ValueKind::Put => batch.put(op.key, op.value),
                ValueKind::Delete => batch.delete(op.key),
            };
        }
        Ok((first_seq, batch))
    }
}

/// Sets the first sequence number of an encoded batch: a write is encoded
/// by its own thread before it joins a write group, and the group's leader
/// numbers it (see [`crate::write_group`]).
///
/// `payload` must come from [`WriteBatch::encode`] (it starts with the
/// 8-byte number); a shorter one is left as it is.
pub(crate) fn set_first_seq(payload: &mut [u8], first_seq: SequenceNumber) {
    if let Some(head) = payload.get_mut(..8) {
        head.copy_from_slice(&first_seq.to_le_bytes());
    }
}

/// One payload holding the operations of `payloads` in order, under the
/// first one's sequence number: how a write group goes to the log, as one
/// record (LevelDB merges a group's batches the same way). The payloads
/// must come from [`WriteBatch::encode`] with consecutive numbers (each
/// starting where the one before ends), so the merged batch numbers every
/// operation as its own batch did, and recovery, which replays a record
/// all or nothing, can never find half a group: a power cut before the
/// group's fsync leaves at most one torn record at the log's end, where
/// separate records could leave a lost page with intact records after it,
/// which a synced log reports as corruption. `None` if the operations
/// overflow a batch's 32-bit count.
pub(crate) fn merge_payloads<'a>(
    payloads: impl Iterator<Item = &'a [u8]> + Clone,
) -> Option<Vec<u8>> {
    let mut count = 0u32;
    let mut len = BATCH_HEADER_BYTES;
    let mut first_seq = None;
    for payload in payloads.clone() {
        let header = payload.get(..BATCH_HEADER_BYTES)?;
        first_seq.get_or_insert_with(|| header[..8].to_vec());
        count = count.checked_add(u32::from_le_bytes(header[8..12].try_into().ok()?))?;
        len += payload.len() - BATCH_HEADER_BYTES;
    }
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&first_seq?);
    out.extend_from_slice(&count.to_le_bytes());
    for payload in payloads {
        out.extend_from_slice(&payload[BATCH_HEADER_BYTES..]);
    }
    Some(out)
}

/// One operation of an encoded batch, borrowed from the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PayloadOp<'a> {
    pub(crate) kind: ValueKind,
    pub(crate) key: &'a [u8],
    /// Empty for a delete.
    pub(crate) value: &'a [u8],
}

/// Reads an encoded batch in place: its first sequence number and an
/// iterator over its operations, which copies nothing (a write group's
/// leader inserts the group's operations into the memtable straight from
/// its log record). An `Err` says why the payload is malformed; the
/// iterator yields at most one `Err`, then ends.
pub(crate) fn read_payload(
    payload: &[u8],
) -> std::result::Result<(SequenceNumber, PayloadOps<'_>), &'static str> {
    let mut reader = Reader { buf: payload };
    let first_seq = u64::from_le_bytes(reader.array::<8>().ok_or("short batch header")?);
    let remaining = u32::from_le_bytes(reader.array::<4>().ok_or("short batch header")?);
    Ok((
        first_seq,
        PayloadOps {
            reader,
            remaining,
            failed: false,
        },
    ))
}

/// The operations of an encoded batch ([`read_payload`]).
pub(crate) struct PayloadOps<'a> {
    reader: Reader<'a>,
    remaining: u32,
    failed: bool,
}

impl<'a> PayloadOps<'a> {
    fn next_op(&mut self) -> std::result::Result<PayloadOp<'a>, &'static str> {
        let r = &mut self.reader;
        let kind = r
            .array::<1>()
            .and_then(|b| ValueKind::from_u8(b[0]))
            .ok_or("bad operation kind in batch")?;
        let key = r.slice().ok_or("truncated key in batch")?;
        // No write can log an empty key (`put`, `delete` and `write`
        // refuse it), and one replayed into the tables would show in
        // scans as a key no call can read or delete.
        if key.is_empty() {
            return Err("empty key in batch");
        }
        let value = match kind {
            ValueKind::Put => r.slice().ok_or("truncated value in batch")?,
            ValueKind::Delete => &[],
        };
        Ok(PayloadOp { kind, key, value })
    }
}

impl<'a> Iterator for PayloadOps<'a> {
    type Item = std::result::Result<PayloadOp<'a>, &'static str>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = if self.remaining == 0 {
            if self.reader.buf.is_empty() {
                return None;
            }
            Err("trailing bytes after batch")
        } else {
            self.remaining -= 1;
            self.next_op()
        };
        self.failed = item.is_err();
        Some(item)
    }
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        if self.buf.len() < N {
            return None;
        }
        let (head, rest) = self.buf.split_at(N);
        self.buf = rest;
        head.try_into().ok()
    }

    fn slice(&mut self) -> Option<&'a [u8]> {
        let len = u32::from_le_bytes(self.array::<4>()?) as usize;
        if self.buf.len() < len {
            return None;
        }
        let (head, rest) = self.buf.split_at(len);
        self.buf = rest;
        Some(head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let mut b = WriteBatch::new();
        b.put(b"a", b"1").delete(b"b").put(b"c", b"");
        let enc = b.encode(42);
        let corrupt = |m: &str| Error::invalid(m.to_string());
        let (seq, back) = WriteBatch::decode(&enc, corrupt).unwrap();
        assert_eq!(seq, 42);
        assert_eq!(back, b);
        for cut in 0..enc.len() {
            assert!(WriteBatch::decode(&enc[..cut], corrupt).is_err());
        }
        // No write logs an empty key: one in a record is damage.
        let mut empty = WriteBatch::new();
        empty.put(b"", b"v");
        assert!(WriteBatch::decode(&empty.encode(1), corrupt).is_err());
    }

    /// A merged group reads back as the members' operations in order,
    /// numbered from the first member's number.
    #[test]
    fn merged_payloads_are_one_batch_of_the_members_in_order() {
        let mut a = WriteBatch::new();
        a.put(b"a", b"1").delete(b"b");
        let mut b = WriteBatch::new();
        b.put(b"c", b"3");
        let (pa, pb) = (a.encode(7), b.encode(9));
        let merged = merge_payloads([pa.as_slice(), pb.as_slice()].into_iter()).unwrap();
        let corrupt = |m: &str| Error::invalid(m.to_string());
        let (seq, back) = WriteBatch::decode(&merged, corrupt).unwrap();
        let mut both = a.clone();
        both.put(b"c", b"3");
        assert_eq!((seq, back), (7, both));
        assert_eq!(merged.len(), pa.len() + pb.len() - BATCH_HEADER_BYTES);
        // One member merges to itself; a short payload or no payload, to
        // nothing.
        assert_eq!(
            merge_payloads([pa.as_slice()].into_iter()),
            Some(pa.clone())
        );
        assert_eq!(merge_payloads([&pa[..5]].into_iter()), None);
        assert_eq!(merge_payloads(std::iter::empty()), None);
    }

    /// `Options::validate` bounds `max_key_bytes + max_value_bytes` by the
    /// record limit less this overhead: it must be what a one-put batch
    /// costs.
    #[test]
    fn one_put_costs_its_key_value_and_the_stated_overhead() {
        for (k, v) in [(1, 0), (3, 1000), (64 << 10, 5)] {
            let mut b = WriteBatch::new();
            b.put(vec![1u8; k], vec![2u8; v]);
            assert_eq!(b.encoded_len(), ONE_PUT_RECORD_OVERHEAD + k + v);
            assert_eq!(b.encode(1).len(), b.encoded_len());
        }
    }
}

/// Checks that log records continue one another's sequence numbers (module
/// documentation): each batch starts right after the previous batch's last
/// number, and a seal carries that next number. A default chain's first
/// record starts it anywhere; at open it starts after the manifest's last
/// sequence ([`starting_at`](Self::starting_at)). Every record's numbers
/// must lie in `1..=MAX_SEQUENCE`.
#[derive(Debug, Clone, Default)]
pub(crate) struct SequenceChain {
    /// The number the next record must start at, once one was seen.
    next: Option<SequenceNumber>,
}

impl SequenceChain {
    /// Takes the next record, a batch of `ops` operations from `first_seq`
    /// (`ops == 0`: a seal). `Err` says why it does not continue the chain;
    /// the chain then restarts from this record.
    pub(crate) fn take(
        &mut self,
        first_seq: SequenceNumber,
        ops: usize,
    ) -> std::result::Result<(), String> {
        // A record with a valid checksum can still carry numbers no write
        // was given (damage the checksum missed, or a crafted log).
        let last = (ops as u64)
            .checked_sub(1)
            .map_or(Some(first_seq), |n| first_seq.checked_add(n));
        if first_seq == 0 || last.is_none_or(|last| last > MAX_SEQUENCE) {
            self.next = None;
            return Err(format!(
                "record with {ops} operations from sequence {first_seq}: past the \
                 sequence numbers writes are given (1..={MAX_SEQUENCE})"
            ));
        }
        let Some(want) = self.next else {
            self.next = Some(first_seq.saturating_add(ops as u64));
            return Ok(());
        };
        // A seal carries `min(last + 1, MAX_SEQUENCE)` and takes no number.
        let (starts_at, next) = if ops == 0 {
            (want.min(MAX_SEQUENCE), want)
        } else {
            (want, first_seq.saturating_add(ops as u64))
        };
        if first_seq == starts_at {
            self.next = Some(next);
            return Ok(());
        }
        // Restart the chain from this record.
        self.next = Some(first_seq.saturating_add(ops as u64));
        Err(if first_seq > want {
            format!(
                "record starts at sequence {first_seq}, but the records before it end at \
                 {}: the writes {want}..{first_seq} were lost (a damaged log record, \
                 possibly the end of an earlier log)",
                want.saturating_sub(1)
            )
        } else {
            format!(
                "record starts at sequence {first_seq}, but the records before it already \
                 reached {}",
                want.saturating_sub(1)
            )
        })
    }

    /// A chain whose first record must start at `next` (the manifest's
    /// last sequence + 1 at open).
    pub(crate) fn starting_at(next: SequenceNumber) -> SequenceChain {
        SequenceChain { next: Some(next) }
    }

    /// Forgets the chain: the next record starts a new one (a log that
    /// vanished between listing and reading, in `Db::verify`).
    pub(crate) fn restart(&mut self) {
        self.next = None;
    }
}
