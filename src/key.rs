//! Internal keys: a user key plus the sequence number and kind of one write.
//!
//! Every version of a user key that the engine stores is an *internal key*.
//! Internal keys order by user key ascending, then by sequence number
//! descending, so the newest version of a key comes first and a reader at
//! snapshot `s` takes the first version whose sequence is `<= s`.
//!
//! Encoded form (in tables): `user_key ++ trailer`, where the trailer is the
//! little-endian `u64` `(sequence << 8) | kind`.

use std::cmp::Ordering;

/// A write's position in the database's total order of writes.
pub type SequenceNumber = u64;

/// The largest sequence number that fits in a trailer (56 bits).
pub const MAX_SEQUENCE: SequenceNumber = (1 << 56) - 1;

/// Bytes of the trailer appended to a user key in its encoded form.
pub const TRAILER_LEN: usize = 8;

/// What a version of a key records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum ValueKind {
    /// A tombstone: the key was deleted at this sequence.
    Delete = 0,
    /// A value was written at this sequence.
    Put = 1,
}

impl ValueKind {
    /// Decodes a kind byte.
    pub fn from_u8(b: u8) -> Option<ValueKind> {
        match b {
            0 => Some(ValueKind::Delete),
            1 => Some(ValueKind::Put),
            _ => None,
        }
    }
}

/// Packs a sequence number and kind into a trailer value.
///
/// `seq` must be at most [`MAX_SEQUENCE`]: the trailer has 56 bits for it,
/// and higher bits are lost (a debug build panics). The engine never hands
/// out a larger number, and [`TableBuilder::add`](crate::sstable::TableBuilder::add)
/// refuses one with [`Error::InvalidArgument`](crate::Error::InvalidArgument).
#[inline]
pub fn pack_trailer(seq: SequenceNumber, kind: ValueKind) -> u64 {
    debug_assert!(seq <= MAX_SEQUENCE, "sequence {seq} over MAX_SEQUENCE");
    (seq << 8) | kind as u64
}

/// Splits a trailer into sequence number and kind (`None` for a bad kind).
#[inline]
pub fn unpack_trailer(trailer: u64) -> Option<(SequenceNumber, ValueKind)> {
    ValueKind::from_u8((trailer & 0xff) as u8).map(|k| (trailer >> 8, k))
}

/// Appends the encoded internal key to `out`. `seq` must be at most
/// [`MAX_SEQUENCE`] (see [`pack_trailer`]).
#[inline]
pub fn encode_internal_key(
    out: &mut Vec<u8>,
    user_key: &[u8],
    seq: SequenceNumber,
    kind: ValueKind,
) {
    out.extend_from_slice(user_key);
    out.extend_from_slice(&pack_trailer(seq, kind).to_le_bytes());
}

/// Splits an encoded internal key into (user key, sequence, kind).
#[inline]
pub fn decode_internal_key(encoded: &[u8]) -> Option<(&[u8], SequenceNumber, ValueKind)> {
    if encoded.len() < TRAILER_LEN {
        return None;
    }
    let (user, trailer) = encoded.split_at(encoded.len() - TRAILER_LEN);
    let trailer = u64::from_le_bytes(trailer.try_into().ok()?);
    let (seq, kind) = unpack_trailer(trailer)?;
    Some((user, seq, kind))
}

/// Keys whose common length is at most this many bytes compare inline in
/// [`compare_user_keys`]; longer ones go to the slice comparison (`memcmp`).
const INLINE_COMPARE_BYTES: usize = 32;

/// Byte-wise order of two user keys: the same answer as `a.cmp(b)`.
///
/// Short keys (the common case: 8 to 32 bytes) compare inline, eight bytes
/// at a time as big-endian words, instead of through a call to `memcmp`,
/// whose call and setup cost more than the comparison of a 16-byte key. Every
/// memtable insert and lookup makes about two dozen of these comparisons, and
/// every step of a compaction's merge one or more: docs/benchmarks.md, "Loads:
/// the memtable's keys".
#[inline]
pub fn compare_user_keys(a: &[u8], b: &[u8]) -> Ordering {
    let common = a.len().min(b.len());
    if common > INLINE_COMPARE_BYTES {
        return a.cmp(b);
    }
    let (a_head, b_head) = (&a[..common], &b[..common]);
    let mut a_words = a_head.chunks_exact(8);
    let mut b_words = b_head.chunks_exact(8);
    for (x, y) in a_words.by_ref().zip(b_words.by_ref()) {
        let (mut wx, mut wy) = ([0u8; 8], [0u8; 8]);
        wx.copy_from_slice(x);
        wy.copy_from_slice(y);
        if wx != wy {
            return u64::from_be_bytes(wx).cmp(&u64::from_be_bytes(wy));
        }
    }
    for (x, y) in a_words.remainder().iter().zip(b_words.remainder()) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

/// Whether two user keys are equal: `a == b`, without the call to `memcmp`
/// the slices' equality makes (see [`compare_user_keys`]). A point read
/// asks it of every entry its block search passes.
#[inline]
pub fn same_user_key(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && compare_user_keys(a, b).is_eq()
}

/// Compares two encoded internal keys: user key ascending, then trailer
/// (sequence, kind) descending. Keys too short to hold a trailer compare as
/// plain bytes (they never occur in valid data).
#[inline]
pub fn compare_internal(a: &[u8], b: &[u8]) -> Ordering {
    if a.len() < TRAILER_LEN || b.len() < TRAILER_LEN {
        return a.cmp(b);
    }
    let (ua, ta) = a.split_at(a.len() - TRAILER_LEN);
    let (ub, tb) = b.split_at(b.len() - TRAILER_LEN);
    compare_user_keys(ua, ub).then_with(|| {
        let ta = u64::from_le_bytes(ta.try_into().expect("8 bytes"));
        let tb = u64::from_le_bytes(tb.try_into().expect("8 bytes"));
        tb.cmp(&ta)
    })
}

/// An owned internal key, ordered as described in the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InternalKey {
    /// The user's key.
    pub user_key: Vec<u8>,
    /// The write's sequence number.
    pub seq: SequenceNumber,
    /// Put or delete.
    pub kind: ValueKind,
}

impl InternalKey {
    /// Builds an internal key. Its [`encode`](Self::encode)d form keeps
    /// `seq` only up to [`MAX_SEQUENCE`] (see [`pack_trailer`]).
    pub fn new(user_key: impl Into<Vec<u8>>, seq: SequenceNumber, kind: ValueKind) -> Self {
        InternalKey {
            user_key: user_key.into(),
            seq,
            kind,
        }
    }

    /// The encoded form (`user_key ++ trailer`).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.user_key.len() + TRAILER_LEN);
        encode_internal_key(&mut out, &self.user_key, self.seq, self.kind);
        out
    }
}

impl Ord for InternalKey {
    fn cmp(&self, other: &Self) -> Ordering {
        // (seq, kind) descending: the packed trailer's order for every
        // sequence number it can hold, and still consistent with `Eq` for
        // the ones it cannot (it keeps only 56 bits).
        compare_user_keys(&self.user_key, &other.user_key)
            .then_with(|| (other.seq, other.kind as u8).cmp(&(self.seq, self.kind as u8)))
    }
}

impl PartialOrd for InternalKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (found by review, sixteenth session): `Ord` compared
    /// packed trailers, which drop a sequence number's bits past 56, so two
    /// keys `Eq` told apart could compare `Equal`.
    #[test]
    fn internal_key_order_agrees_with_equality_and_the_encoding() {
        let k = |seq, kind| InternalKey::new(b"k".to_vec(), seq, kind);
        let past = k(MAX_SEQUENCE + 1, ValueKind::Put);
        assert_ne!(past.cmp(&k(0, ValueKind::Put)), Ordering::Equal);
        let keys = [
            k(0, ValueKind::Delete),
            k(0, ValueKind::Put),
            k(7, ValueKind::Delete),
            k(7, ValueKind::Put),
            k(MAX_SEQUENCE, ValueKind::Put),
        ];
        for a in &keys {
            for b in &keys {
                assert_eq!(a.cmp(b) == Ordering::Equal, a == b);
                assert_eq!(a.cmp(b), compare_internal(&a.encode(), &b.encode()));
            }
        }
    }

    /// The inline comparison agrees with the slice order on every pair of
    /// keys from a set with shared prefixes, every length from 0 to past
    /// the inline limit, and bytes that differ only in their top bit.
    #[test]
    fn user_key_order_is_the_slice_order() {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for len in 0..=INLINE_COMPARE_BYTES + 10 {
            for last in [0x00u8, 0x01, 0x7f, 0x80, 0xff] {
                let mut k = vec![0x61u8; len];
                if let Some(b) = k.last_mut() {
                    *b = last;
                }
                keys.push(k.clone());
                if len > 3 {
                    k[len / 2] = 0x80;
                    keys.push(k);
                }
            }
        }
        for a in &keys {
            for b in &keys {
                assert_eq!(compare_user_keys(a, b), a.cmp(b), "{a:?} against {b:?}");
                assert_eq!(same_user_key(a, b), a == b, "{a:?} against {b:?}");
            }
        }
    }

    #[test]
    fn order_newest_first() {
        let a = InternalKey::new(b"k".to_vec(), 5, ValueKind::Put);
        let b = InternalKey::new(b"k".to_vec(), 3, ValueKind::Put);
        let c = InternalKey::new(b"l".to_vec(), 9, ValueKind::Put);
        assert!(a < b && b < c);
        assert_eq!(compare_internal(&a.encode(), &b.encode()), Ordering::Less);
        assert_eq!(compare_internal(&b.encode(), &c.encode()), Ordering::Less);
        let enc = a.encode();
        let d = decode_internal_key(&enc).unwrap();
        assert_eq!(d, (&b"k"[..], 5, ValueKind::Put));
    }
}
