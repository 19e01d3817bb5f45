//! The manifest: the durable record of which tables make up the tree.
//!
//! The set of live tables changes through [`VersionEdit`]s (tables added and
//! removed, plus counters). Each edit is appended as one record of a record
//! log (see [`crate::wal`] for the record framing) in a file named
//! `MANIFEST-{number:06}`; replaying the edits in order from an empty
//! [`ManifestState`] rebuilds the tree's shape. A small file `CURRENT` names
//! the manifest in use.
//!
//! # Edit encoding (the payload of one manifest record)
//!
//! An edit is a sequence of tagged fields. Integers are unsigned LEB128
//! varints (7 bits per byte, low bits first, high bit = "more bytes follow",
//! at most 10 bytes for a `u64`); byte strings are a varint length followed by
//! the bytes.
//!
//! ```text
//! edit  := field*
//! field := tag: varint, then by tag:
//!   1 NEXT_FILE_NUMBER  next_file_number: varint
//!   2 LAST_SEQUENCE     last_sequence: varint            (<= 2^56 - 1)
//!   3 LOG_NUMBER        log_number: varint
//!   4 REMOVED_TABLE     level: varint, file_number: varint
//!   5 ADDED_TABLE       level: varint, file_number: varint, file_size: varint,
//!                       smallest: bytes, largest: bytes,  (user keys)
//!                       smallest_seq: varint, largest_seq: varint
//! ```
//!
//! The encoder writes tags 1–3 (each at most once, only when set), then every
//! removed table, then every added table. The decoder accepts fields in any
//! order but rejects, as corruption: an unknown tag, a repeated tag 1–3, a
//! varint longer than 10 bytes or overflowing 64 bits, a byte string running
//! past the end, a level `>= MAX_LEVELS` (64), a sequence above `2^56 - 1`,
//! `smallest > largest` (bytewise) and `smallest_seq > largest_seq`.
//! Applying an edit removes tables first, then adds (so one edit can move a
//! table between levels); removing a table that is not at that level, or
//! adding a file number that is already live, is corruption.
//!
//! A manifest file's first record is a *snapshot*: an edit that sets all
//! three counters and adds every live table. Later records are incremental.
//!
//! A snapshot too large for one record (the record limit is 1 GiB, and a
//! table's entry holds its smallest and largest keys) is split: its first
//! record sets the counters, adds the first tables and carries one more
//! field, `6 SNAPSHOT_RECORDS n: varint` (n >= 2: the records the snapshot
//! takes, this one included); the next n - 1 records only add tables. Tag 6
//! is valid only there. [`Manifest::create`] syncs all n records before
//! `CURRENT` names the file, so recovery requires all n: a snapshot cut
//! short (even as a torn tail) is corruption, never a silently smaller
//! table set. A snapshot that fits one record is written as before, without
//! tag 6.
//!
//! # CURRENT
//!
//! `CURRENT` holds the manifest's file name followed by a newline, e.g.
//! `MANIFEST-000007\n`. It is replaced atomically: write `CURRENT.tmp`, fsync
//! it, rename it over `CURRENT`, fsync the directory. A missing `CURRENT`
//! means "no database here yet"; a `CURRENT` whose content is not a manifest
//! name, or that names a missing file, is corruption.
//!
//! # Durability
//!
//! [`Manifest::create`] fsyncs the new manifest (with its snapshot) and the
//! directory (its entry) before `CURRENT` can point at it, and fsyncs the
//! directory again after the rename that replaces `CURRENT`.
//! [`Manifest::log_edit`] fsyncs each edit before returning. On recovery a
//! torn last record (a crash during `log_edit`) is dropped — that edit was
//! never acknowledged — while damage followed by intact records is
//! corruption. A reopening engine then writes a fresh manifest
//! (`Manifest::create` with the next file number) instead of appending to
//! the old one, so it never appends after a torn tail.
//!
//! # Rolling
//!
//! An engine that stays open appends one edit per flush and compaction. Once
//! the file passes `Options::manifest_roll_bytes` (and twice its snapshot,
//! [`Manifest::should_roll`]), the engine replaces it *before* logging the
//! next edit: [`Manifest::create`] writes a new file whose snapshot is the
//! live state, syncs it, and moves `CURRENT` to it; only then is the old
//! file deleted. Both files describe the same state, so a crash at any
//! point of the roll reopens that state from whichever file `CURRENT`
//! names. A roll that fails poisons the engine like any failed edit: after
//! a failed rename or directory sync nobody can say which file `CURRENT`
//! names on disk, so neither may receive another edit.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::key::MAX_SEQUENCE;
use crate::sstable::format::put_varint64;
use crate::sstable::TableMeta;
use crate::wal::{scan_log, LogWriter, MAX_RECORD_PAYLOAD};

/// Levels a manifest can describe (levels `0..MAX_LEVELS`).
pub const MAX_LEVELS: u32 = 64;

/// Name of the file that points at the manifest in use.
pub const CURRENT_FILE_NAME: &str = "CURRENT";

/// Temporary name `CURRENT` is written under before being renamed into place.
pub const CURRENT_TEMP_FILE_NAME: &str = "CURRENT.tmp";

const MANIFEST_PREFIX: &str = "MANIFEST-";

const TAG_NEXT_FILE_NUMBER: u64 = 1;
const TAG_LAST_SEQUENCE: u64 = 2;
const TAG_LOG_NUMBER: u64 = 3;
const TAG_REMOVED_TABLE: u64 = 4;
const TAG_ADDED_TABLE: u64 = 5;
/// Only in a manifest's first record, and only when the snapshot did not
/// fit one record: how many records (this one included) the snapshot takes.
const TAG_SNAPSHOT_RECORDS: u64 = 6;
/// Room kept in a snapshot's first record for its record count field.
const SNAPSHOT_RECORDS_FIELD_MAX: usize = 1 + 10;

/// The file name of manifest `number`: `MANIFEST-000123`.
pub fn manifest_file_name(number: u64) -> String {
    format!("{MANIFEST_PREFIX}{number:06}")
}

/// The manifest number in a file name written by [`manifest_file_name`], or
/// `None` if `name` is not one (e.g. to find old manifests to delete).
pub fn parse_manifest_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(MANIFEST_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let number: u64 = digits.parse().ok()?;
    // Only the canonical spelling, so one number has exactly one file name.
    (manifest_file_name(number) == name).then_some(number)
}

/// A table as recorded in the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRecord {
    /// The level the table lives in.
    pub level: u32,
    /// The table's file number (names its file).
    pub file_number: u64,
    /// The table file's size in bytes.
    pub file_size: u64,
    /// The smallest user key in the table.
    pub smallest: Vec<u8>,
    /// The largest user key in the table.
    pub largest: Vec<u8>,
    /// The smallest sequence number in the table.
    pub smallest_seq: u64,
    /// The largest sequence number in the table.
    pub largest_seq: u64,
}

impl TableRecord {
    /// The record of the table `meta` describes, in `level`: what a flush
    /// or compaction adds to the manifest, and what open compares the
    /// opened table with.
    pub fn describing(level: u32, meta: &TableMeta) -> TableRecord {
        TableRecord {
            level,
            file_number: meta.file_number,
            file_size: meta.file_size,
            smallest: meta.smallest.clone(),
            largest: meta.largest.clone(),
            smallest_seq: meta.smallest_seq,
            largest_seq: meta.largest_seq,
        }
    }
}

/// One change to the set of live tables and the engine's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionEdit {
    /// Tables that become live.
    pub added: Vec<TableRecord>,
    /// Tables that stop being live, as `(level, file_number)`.
    pub removed: Vec<(u32, u64)>,
    /// The next file number to allocate, if it changed.
    pub next_file_number: Option<u64>,
    /// The last sequence number used, if it changed.
    pub last_sequence: Option<u64>,
    /// WAL files numbered below this are fully flushed (obsolete).
    pub log_number: Option<u64>,
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint64(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Reads the fields of one encoded edit, reporting damage with file offsets.
struct EditDecoder<'a> {
    bytes: &'a [u8],
    pos: usize,
    file: &'a Path,
    base_offset: u64,
}

impl EditDecoder<'_> {
    fn corrupt(&self, at: usize, reason: impl Into<String>) -> Error {
        Error::corruption(
            self.file,
            Some(self.base_offset.saturating_add(at as u64)),
            format!("bad version edit: {}", reason.into()),
        )
    }

    fn varint(&mut self, what: &str) -> Result<u64> {
        let start = self.pos;
        let mut value = 0u64;
        for i in 0..10u32 {
            let Some(&byte) = self.bytes.get(self.pos) else {
                return Err(self.corrupt(start, format!("{what} is cut short")));
            };
            self.pos += 1;
            let bits = u64::from(byte & 0x7f);
            // The 10th byte may carry only the top bit of a u64.
            if i == 9 && bits > 1 {
                return Err(self.corrupt(start, format!("{what} overflows 64 bits")));
            }
            value |= bits << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.corrupt(start, format!("{what} is longer than 10 bytes")))
    }

    fn level(&mut self) -> Result<u32> {
        let start = self.pos;
        let level = self.varint("level")?;
        if level >= u64::from(MAX_LEVELS) {
            return Err(self.corrupt(start, format!("level {level} is not below {MAX_LEVELS}")));
        }
        Ok(level as u32)
    }

    fn sequence(&mut self, what: &str) -> Result<u64> {
        let start = self.pos;
        let seq = self.varint(what)?;
        if seq > MAX_SEQUENCE {
            return Err(self.corrupt(start, format!("{what} {seq} exceeds 2^56 - 1")));
        }
        Ok(seq)
    }

    fn bytes(&mut self, what: &str) -> Result<Vec<u8>> {
        let start = self.pos;
        let len = self.varint(what)?;
        let remaining = self.bytes.len() - self.pos;
        if len > remaining as u64 {
            return Err(self.corrupt(
                start,
                format!("{what} of {len} bytes runs past the end ({remaining} left)"),
            ));
        }
        let end = self.pos + len as usize;
        let out = self.bytes[self.pos..end].to_vec();
        self.pos = end;
        Ok(out)
    }

    fn table(&mut self) -> Result<TableRecord> {
        let start = self.pos;
        let table = TableRecord {
            level: self.level()?,
            file_number: self.varint("file number")?,
            file_size: self.varint("file size")?,
            smallest: self.bytes("smallest key")?,
            largest: self.bytes("largest key")?,
            smallest_seq: self.sequence("smallest sequence")?,
            largest_seq: self.sequence("largest sequence")?,
        };
        if let Some(reason) = table_range_problem(&table) {
            return Err(self.corrupt(start, reason));
        }
        Ok(table)
    }
}

/// Why a table's key or sequence range is impossible, if it is.
fn table_range_problem(table: &TableRecord) -> Option<String> {
    if table.smallest > table.largest {
        return Some(format!(
            "table {} has smallest key > largest key",
            table.file_number
        ));
    }
    if table.smallest_seq > table.largest_seq {
        return Some(format!(
            "table {} has smallest sequence {} > largest sequence {}",
            table.file_number, table.smallest_seq, table.largest_seq
        ));
    }
    None
}

impl VersionEdit {
    /// Encodes the edit (format in the module docs).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (tag, value) in [
            (TAG_NEXT_FILE_NUMBER, self.next_file_number),
            (TAG_LAST_SEQUENCE, self.last_sequence),
            (TAG_LOG_NUMBER, self.log_number),
        ] {
            if let Some(v) = value {
                put_varint64(&mut out, tag);
                put_varint64(&mut out, v);
            }
        }
        for &(level, file_number) in &self.removed {
            put_varint64(&mut out, TAG_REMOVED_TABLE);
            put_varint64(&mut out, u64::from(level));
            put_varint64(&mut out, file_number);
        }
        for t in &self.added {
            put_varint64(&mut out, TAG_ADDED_TABLE);
            put_varint64(&mut out, u64::from(t.level));
            put_varint64(&mut out, t.file_number);
            put_varint64(&mut out, t.file_size);
            put_bytes(&mut out, &t.smallest);
            put_bytes(&mut out, &t.largest);
            put_varint64(&mut out, t.smallest_seq);
            put_varint64(&mut out, t.largest_seq);
        }
        out
    }

    /// Decodes an edit written by [`encode`](Self::encode).
    ///
    /// `file` and `offset` (the file offset at which `bytes` start) only name
    /// the place in errors. Anything the encoder would not produce is
    /// [`Error::Corruption`] at the offending field's offset.
    pub fn decode(bytes: &[u8], file: &Path, offset: u64) -> Result<VersionEdit> {
        Ok(VersionEdit::decode_fields(bytes, file, offset, false)?.0)
    }

    /// [`decode`](Self::decode), also accepting (when `first_record`) the
    /// snapshot record count of a manifest's first record, returned beside
    /// the edit.
    fn decode_fields(
        bytes: &[u8],
        file: &Path,
        offset: u64,
        first_record: bool,
    ) -> Result<(VersionEdit, Option<u64>)> {
        let mut snapshot_records = None;
        let mut d = EditDecoder {
            bytes,
            pos: 0,
            file,
            base_offset: offset,
        };
        let mut edit = VersionEdit::default();
        while d.pos < bytes.len() {
            let tag_at = d.pos;
            let tag = d.varint("tag")?;
            let scalar = match tag {
                TAG_NEXT_FILE_NUMBER => Some((&mut edit.next_file_number, "next file number")),
                TAG_LAST_SEQUENCE => Some((&mut edit.last_sequence, "last sequence")),
                TAG_LOG_NUMBER => Some((&mut edit.log_number, "log number")),
                _ => None,
            };
            if let Some((slot, what)) = scalar {
                if slot.is_some() {
                    return Err(d.corrupt(tag_at, format!("{what} appears twice")));
                }
                let value = if tag == TAG_LAST_SEQUENCE {
                    d.sequence(what)?
                } else {
                    d.varint(what)?
                };
                *slot = Some(value);
                continue;
            }
            match tag {
                TAG_REMOVED_TABLE => {
                    let level = d.level()?;
                    let file_number = d.varint("file number")?;
                    edit.removed.push((level, file_number));
                }
                TAG_ADDED_TABLE => edit.added.push(d.table()?),
                TAG_SNAPSHOT_RECORDS if first_record && snapshot_records.is_none() => {
                    let n = d.varint("snapshot record count")?;
                    if n < 2 {
                        return Err(d.corrupt(tag_at, format!("snapshot record count {n}")));
                    }
                    snapshot_records = Some(n);
                }
                TAG_SNAPSHOT_RECORDS => {
                    return Err(d.corrupt(
                        tag_at,
                        "snapshot record count outside a manifest's first record, or twice",
                    ))
                }
                other => return Err(d.corrupt(tag_at, format!("unknown tag {other}"))),
            }
        }
        Ok((edit, snapshot_records))
    }

    /// Checks that the edit can be written and read back: levels below
    /// [`MAX_LEVELS`], sequences at most 2^56 - 1, ordered key and sequence
    /// ranges, and an encoding within the log's record limit. Problems are
    /// [`Error::InvalidArgument`].
    pub fn validate(&self) -> Result<()> {
        let levels = self
            .removed
            .iter()
            .map(|&(level, _)| level)
            .chain(self.added.iter().map(|t| t.level));
        for level in levels {
            if level >= MAX_LEVELS {
                return Err(Error::invalid(format!(
                    "level {level} is not below {MAX_LEVELS}"
                )));
            }
        }
        let sequences = self.last_sequence.iter().chain(
            self.added
                .iter()
                .flat_map(|t| [&t.smallest_seq, &t.largest_seq]),
        );
        for &seq in sequences {
            if seq > MAX_SEQUENCE {
                return Err(Error::invalid(format!("sequence {seq} exceeds 2^56 - 1")));
            }
        }
        if let Some(reason) = self.added.iter().find_map(table_range_problem) {
            return Err(Error::invalid(reason));
        }
        Ok(())
    }

    fn is_snapshot(&self) -> bool {
        self.next_file_number.is_some() && self.last_sequence.is_some() && self.log_number.is_some()
    }

    /// This edit, a snapshot, as the payloads of the records it takes in a
    /// manifest whose records hold at most `record_limit` bytes: one record
    /// when it fits, else a first record with the counters, the record
    /// count and the first tables, then records adding the rest (see the
    /// module docs). A table whose entry alone does not fit is
    /// [`Error::InvalidArgument`].
    fn snapshot_records(&self, record_limit: usize) -> Result<Vec<Vec<u8>>> {
        let whole = self.encode();
        if whole.len() <= record_limit {
            return Ok(vec![whole]);
        }
        let counters = VersionEdit {
            added: Vec::new(),
            ..self.clone()
        }
        .encode();
        // Tables per record, greedily; the first record also holds the
        // counters and the count.
        let mut parts: Vec<Vec<TableRecord>> = vec![Vec::new()];
        let mut room = record_limit.saturating_sub(counters.len() + SNAPSHOT_RECORDS_FIELD_MAX);
        for table in &self.added {
            let len = VersionEdit {
                added: vec![table.clone()],
                ..VersionEdit::default()
            }
            .encode()
            .len();
            if len > room {
                if len > record_limit {
                    return Err(Error::invalid(format!(
                        "table {} alone takes {len} bytes of manifest, over the record limit",
                        table.file_number
                    )));
                }
                parts.push(Vec::new());
                room = record_limit;
            }
            room -= len;
            parts
                .last_mut()
                .expect("one part at least")
                .push(table.clone());
        }
        let n = parts.len() as u64;
        let mut records = Vec::with_capacity(parts.len());
        for (i, added) in parts.into_iter().enumerate() {
            let mut payload = if i == 0 { counters.clone() } else { Vec::new() };
            if i == 0 {
                put_varint64(&mut payload, TAG_SNAPSHOT_RECORDS);
                put_varint64(&mut payload, n);
            }
            payload.extend(
                VersionEdit {
                    added,
                    ..VersionEdit::default()
                }
                .encode(),
            );
            records.push(payload);
        }
        Ok(records)
    }
}

/// Replays the records of a manifest: `payloads` yields each record's
/// payload with its file offset (of the record header) and the offset of
/// the payload. The first must be a snapshot, and a snapshot split over
/// several records must have all of them, the later ones only adding
/// tables. Problems are [`Error::Corruption`] naming `path`.
pub(crate) fn replay_manifest_records<'a>(
    payloads: impl Iterator<Item = (&'a [u8], u64, u64)>,
    path: &Path,
) -> Result<ManifestState> {
    let mut state = ManifestState::default();
    let mut snapshot_records = 1u64;
    let mut seen = 0u64;
    for (i, (payload, record_offset, payload_offset)) in payloads.enumerate() {
        let (edit, parts) = VersionEdit::decode_fields(payload, path, payload_offset, i == 0)?;
        if i == 0 {
            if !edit.is_snapshot() {
                return Err(Error::corruption(
                    path,
                    Some(record_offset),
                    "first manifest record is not a snapshot (it does not set all counters)",
                ));
            }
            snapshot_records = parts.unwrap_or(1);
        } else if (i as u64) < snapshot_records
            && (edit.next_file_number.is_some()
                || edit.last_sequence.is_some()
                || edit.log_number.is_some()
                || !edit.removed.is_empty())
        {
            return Err(Error::corruption(
                path,
                Some(record_offset),
                format!("record {i} of the snapshot does more than add tables"),
            ));
        }
        state.apply_at(&edit, path, Some(record_offset))?;
        seen += 1;
    }
    if seen == 0 {
        // Create syncs the snapshot before CURRENT names the file, so a
        // manifest without it was damaged after the fact.
        return Err(Error::corruption(
            path,
            Some(0),
            "manifest holds no complete snapshot record",
        ));
    }
    if seen < snapshot_records {
        return Err(Error::corruption(
            path,
            None,
            format!(
                "the snapshot takes {snapshot_records} records but only {seen} are complete \
                 (create syncs them all before CURRENT names the file)"
            ),
        ));
    }
    Ok(state)
}

/// State rebuilt by replaying a manifest.
///
/// Equality ignores trailing empty levels: a snapshot records tables, not how
/// many empty levels follow the last non-empty one.
#[derive(Debug, Clone, Default)]
pub struct ManifestState {
    /// Live tables per level (index = level), in the order they were added.
    pub levels: Vec<Vec<TableRecord>>,
    /// The next file number to allocate.
    pub next_file_number: u64,
    /// The last sequence number used.
    pub last_sequence: u64,
    /// WAL files numbered below this are fully flushed (obsolete).
    pub log_number: u64,
}

impl PartialEq for ManifestState {
    fn eq(&self, other: &Self) -> bool {
        fn non_empty(levels: &[Vec<TableRecord>]) -> &[Vec<TableRecord>] {
            let keep = levels
                .iter()
                .rposition(|l| !l.is_empty())
                .map_or(0, |i| i + 1);
            &levels[..keep]
        }
        non_empty(&self.levels) == non_empty(&other.levels)
            && self.next_file_number == other.next_file_number
            && self.last_sequence == other.last_sequence
            && self.log_number == other.log_number
    }
}

impl Eq for ManifestState {}

impl ManifestState {
    /// The tables of `level` (empty for a level beyond `levels`).
    pub fn level(&self, level: u32) -> &[TableRecord] {
        self.levels.get(level as usize).map_or(&[], Vec::as_slice)
    }

    /// Number of live tables over all levels.
    pub fn table_count(&self) -> usize {
        self.levels.iter().map(Vec::len).sum()
    }

    /// Applies `edit`: removals first, then additions, then the counters that
    /// the edit sets.
    ///
    /// Removing a table that is not live at the given level, adding a file
    /// number that is already live (or twice), or a level `>= MAX_LEVELS`
    /// is [`Error::Corruption`] naming `file` (the manifest the edit came
    /// from). On error the state is unchanged.
    pub fn apply(&mut self, edit: &VersionEdit, file: &Path) -> Result<()> {
        self.apply_at(edit, file, None)
    }

    fn apply_at(&mut self, edit: &VersionEdit, file: &Path, offset: Option<u64>) -> Result<()> {
        let corrupt = |reason: String| Error::corruption(file, offset, reason);
        // Validate everything before changing anything, so a failed apply
        // leaves the state as it was.
        let mut live: HashSet<u64> = self
            .levels
            .iter()
            .flatten()
            .map(|t| t.file_number)
            .collect();
        for &(level, file_number) in &edit.removed {
            let present = self
                .level(level)
                .iter()
                .any(|t| t.file_number == file_number);
            if !present || !live.remove(&file_number) {
                return Err(corrupt(format!(
                    "edit removes table {file_number} which is not live at level {level}"
                )));
            }
        }
        for t in &edit.added {
            if t.level >= MAX_LEVELS {
                return Err(corrupt(format!(
                    "edit adds table {} at level {} (not below {MAX_LEVELS})",
                    t.file_number, t.level
                )));
            }
            if !live.insert(t.file_number) {
                return Err(corrupt(format!(
                    "edit adds table {} which is already live",
                    t.file_number
                )));
            }
        }

        for &(level, file_number) in &edit.removed {
            if let Some(tables) = self.levels.get_mut(level as usize) {
                tables.retain(|t| t.file_number != file_number);
            }
        }
        for t in &edit.added {
            let level = t.level as usize;
            if self.levels.len() <= level {
                self.levels.resize_with(level + 1, Vec::new);
            }
            self.levels[level].push(t.clone());
        }
        if let Some(n) = edit.next_file_number {
            self.next_file_number = n;
        }
        if let Some(s) = edit.last_sequence {
            self.last_sequence = s;
        }
        if let Some(l) = edit.log_number {
            self.log_number = l;
        }
        Ok(())
    }

    /// An edit that, applied to an empty state, rebuilds this state: every
    /// table (level by level, in insertion order) and all three counters.
    pub fn snapshot_edit(&self) -> VersionEdit {
        VersionEdit {
            added: self.levels.iter().flatten().cloned().collect(),
            removed: Vec::new(),
            next_file_number: Some(self.next_file_number),
            last_sequence: Some(self.last_sequence),
            log_number: Some(self.log_number),
        }
    }
}

/// An open manifest log.
#[derive(Debug)]
pub struct Manifest {
    writer: LogWriter,
    number: u64,
    /// Bytes of the snapshot record the file starts with (framing
    /// included), for [`should_roll`](Manifest::should_roll).
    snapshot_len: u64,
}

fn write_current(fs: &dyn FileSystem, dir: &Path, manifest_name: &str) -> Result<()> {
    let tmp = dir.join(CURRENT_TEMP_FILE_NAME);
    let current = dir.join(CURRENT_FILE_NAME);
    let contents = format!("{manifest_name}\n");
    let written = fs.create(&tmp).and_then(|mut f| {
        f.append(contents.as_bytes())?;
        f.sync()
    });
    if let Err(e) = written {
        // Best effort: a stray CURRENT.tmp is harmless (recovery ignores it)
        // but untidy; the original error is what matters.
        let _ = fs.remove_file(&tmp);
        return Err(Error::io(&tmp, e));
    }
    fs.rename(&tmp, &current)
        .map_err(|e| Error::io(&current, e))?;
    fs.sync_dir(dir).map_err(|e| Error::io(dir, e))
}

/// The manifest number `CURRENT` names, `None` without a `CURRENT` file.
pub(crate) fn current_manifest_number(fs: &dyn FileSystem, dir: &Path) -> Result<Option<u64>> {
    let current = dir.join(CURRENT_FILE_NAME);
    let raw = match fs.read(&current) {
        Ok(raw) => raw,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&current, e)),
    };
    let name = std::str::from_utf8(&raw)
        .ok()
        .map(|s| s.strip_suffix('\n').unwrap_or(s));
    match name.and_then(parse_manifest_file_name) {
        Some(number) => Ok(Some(number)),
        None => Err(Error::corruption(
            &current,
            Some(0),
            format!(
                "CURRENT does not name a manifest (content: {:?})",
                String::from_utf8_lossy(&raw[..raw.len().min(64)])
            ),
        )),
    }
}

impl Manifest {
    /// Creates a new manifest file `MANIFEST-{number:06}` in `dir` whose first
    /// record is a snapshot edit of `state` (split over several records when
    /// it does not fit one, see the module docs), syncs it (and the directory),
    /// then points `CURRENT` at it (write `CURRENT.tmp`, sync, rename to
    /// `CURRENT`, sync the directory).
    ///
    /// A `state` that could not be recovered (duplicate file numbers, a level
    /// `>= MAX_LEVELS`, impossible key or sequence ranges), or a `number`
    /// equal to the manifest `CURRENT` names, is [`Error::InvalidArgument`]
    /// and nothing is written; any other existing file of the new name is
    /// left alone (the create is exclusive) and gives [`Error::Io`].
    /// A damaged `CURRENT` is [`Error::Corruption`].
    pub fn create(
        fs: &dyn FileSystem,
        dir: &Path,
        number: u64,
        state: &ManifestState,
    ) -> Result<Manifest> {
        Manifest::create_with_record_limit(fs, dir, number, state, MAX_RECORD_PAYLOAD)
    }

    /// [`create`](Self::create) with the snapshot split into records of at
    /// most `record_limit` bytes (tests lower it to split small snapshots).
    pub(crate) fn create_with_record_limit(
        fs: &dyn FileSystem,
        dir: &Path,
        number: u64,
        state: &ManifestState,
        record_limit: usize,
    ) -> Result<Manifest> {
        let snapshot = state.snapshot_edit();
        snapshot.validate()?;
        let name = manifest_file_name(number);
        let path = dir.join(&name);
        ManifestState::default()
            .apply(&snapshot, &path)
            .map_err(|e| Error::invalid(format!("state cannot be snapshotted: {e}")))?;
        let records = snapshot.snapshot_records(record_limit)?;
        // The number of the manifest CURRENT names is a caller's mistake,
        // reported as such (the exclusive create below would also refuse
        // it, as an I/O error).
        if current_manifest_number(fs, dir)? == Some(number) {
            return Err(Error::invalid(format!(
                "{name} is the current manifest; a new manifest needs a new number"
            )));
        }
        let mut writer = LogWriter::create(fs, &path)?;
        for record in &records {
            writer.add_record(record)?;
        }
        writer.sync()?;
        // The new file's directory entry must be durable before CURRENT can
        // name it; POSIX does not order a create before a later rename.
        fs.sync_dir(dir).map_err(|e| Error::io(dir, e))?;
        let snapshot_len = writer.len();
        write_current(fs, dir, &name)?;
        Ok(Manifest {
            writer,
            number,
            snapshot_len,
        })
    }

    /// Reads `CURRENT` (`None` if the database is new: no `CURRENT` file),
    /// replays the manifest it names and returns the state and the
    /// manifest's file number.
    ///
    /// A torn last record is dropped as in [`read_log`](crate::wal::read_log).
    /// Any other damage — `CURRENT` not naming a manifest, a missing manifest,
    /// a damaged record followed by intact ones, an undecodable edit, an edit
    /// that does not apply, a first record that is not a snapshot — is
    /// [`Error::Corruption`] naming the file.
    pub fn recover(fs: &dyn FileSystem, dir: &Path) -> Result<Option<(ManifestState, u64)>> {
        Ok(Manifest::recover_noting_tail(fs, dir)?.map(|(state, number, _)| (state, number)))
    }

    /// [`recover`](Self::recover), also saying whether a torn last record
    /// was dropped (the one way an edit can go missing without an error).
    pub(crate) fn recover_noting_tail(
        fs: &dyn FileSystem,
        dir: &Path,
    ) -> Result<Option<(ManifestState, u64, bool)>> {
        let current = dir.join(CURRENT_FILE_NAME);
        let Some(number) = current_manifest_number(fs, dir)? else {
            return Ok(None);
        };
        let path: PathBuf = dir.join(manifest_file_name(number));
        let data = match fs.read(&path) {
            Ok(data) => data,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(Error::corruption(
                    &current,
                    None,
                    format!("CURRENT names {} which does not exist", path.display()),
                ))
            }
            Err(e) => return Err(Error::io(&path, e)),
        };
        let scan = scan_log(&data, &path)?;
        let payloads = scan.records.iter().map(|span| {
            let payload_offset = span.offset + crate::wal::RECORD_HEADER_LEN as u64;
            (&data[span.payload.clone()], span.offset, payload_offset)
        });
        let state = replay_manifest_records(payloads, &path)?;
        Ok(Some((state, number, scan.torn_tail)))
    }

    /// Appends one edit and syncs it before returning (durable when `Ok`).
    ///
    /// An edit that fails [`VersionEdit::validate`] is
    /// [`Error::InvalidArgument`] and nothing is written; I/O failures are
    /// [`Error::Io`], after which the manifest refuses further edits (the
    /// engine should write a fresh manifest).
    pub fn log_edit(&mut self, edit: &VersionEdit) -> Result<()> {
        edit.validate()?;
        self.writer.add_record(&edit.encode())?;
        self.writer.sync()
    }

    /// Whether this manifest has grown enough to be replaced by a fresh one
    /// holding one snapshot: past `roll_bytes`, and past twice the snapshot
    /// it started with (so a table set whose snapshot alone exceeds
    /// `roll_bytes` is not rewritten on every edit).
    pub fn should_roll(&self, roll_bytes: u64) -> bool {
        let size = self.file_size();
        size >= roll_bytes && size >= self.snapshot_len.saturating_mul(2)
    }

    /// This manifest's file number.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// Bytes in the manifest file so far.
    pub fn file_size(&self) -> u64 {
        self.writer.len()
    }

    /// Path of the manifest file.
    pub fn path(&self) -> &Path {
        self.writer.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::RealFs;
    use crate::wal::scan_log;

    /// A state of `n` level-1 tables with 40-byte keys.
    fn state(n: u64) -> ManifestState {
        let mut s = ManifestState {
            levels: vec![Vec::new(), Vec::new()],
            next_file_number: 10 + n,
            last_sequence: 1000,
            log_number: 5,
        };
        for i in 0..n {
            s.levels[1].push(TableRecord {
                level: 1,
                file_number: 10 + i,
                file_size: 4096,
                smallest: format!("{:020}{:020}", 2 * i, 0).into_bytes(),
                largest: format!("{:020}{:020}", 2 * i + 1, 0).into_bytes(),
                smallest_seq: 1,
                largest_seq: 1000,
            });
        }
        s
    }

    fn records(path: &Path) -> Vec<Vec<u8>> {
        let data = std::fs::read(path).unwrap();
        let scan = scan_log(&data, path).unwrap();
        scan.records
            .iter()
            .map(|r| data[r.payload.clone()].to_vec())
            .collect()
    }

    #[test]
    fn a_snapshot_too_large_for_one_record_is_split_and_recovered_whole() {
        let dir = tempfile::tempdir().unwrap();
        let want = state(40);
        let mut m = Manifest::create_with_record_limit(&RealFs, dir.path(), 3, &want, 600).unwrap();
        let path = dir.path().join(manifest_file_name(3));
        let parts = records(&path);
        assert!(parts.len() >= 5, "{} records", parts.len());
        assert!(parts.iter().all(|p| p.len() <= 600));
        // An edit after the snapshot is replayed too.
        let edit = VersionEdit {
            removed: vec![(1, 10)],
            ..VersionEdit::default()
        };
        m.log_edit(&edit).unwrap();
        let mut after = want.clone();
        after.apply(&edit, &path).unwrap();
        let (got, number) = Manifest::recover(&RealFs, dir.path()).unwrap().unwrap();
        assert_eq!((got, number), (after.clone(), 3));
        let (report, checked) =
            crate::verify::check_manifest_bytes(&std::fs::read(&path).unwrap(), &path);
        assert!(report.is_ok(), "{:?}", report.problems);
        assert_eq!(checked, Some(after));
        assert_eq!(report.manifest_records, parts.len() as u64 + 1);
        // A snapshot that fits is one record, without the count.
        let dir = tempfile::tempdir().unwrap();
        Manifest::create(&RealFs, dir.path(), 3, &want).unwrap();
        let one = records(&dir.path().join(manifest_file_name(3)));
        assert_eq!(one, vec![want.snapshot_edit().encode()]);
    }

    #[test]
    fn a_split_snapshot_cut_short_is_corruption_not_fewer_tables() {
        let dir = tempfile::tempdir().unwrap();
        Manifest::create_with_record_limit(&RealFs, dir.path(), 3, &state(40), 600).unwrap();
        let path = dir.path().join(manifest_file_name(3));
        let data = std::fs::read(&path).unwrap();
        let scan = scan_log(&data, &path).unwrap();
        // The last part torn (a torn tail the log reader drops silently),
        // then the last part missing whole.
        let last = scan.records.last().unwrap().offset as usize;
        for cut in [data.len() - 3, last] {
            std::fs::write(&path, &data[..cut]).unwrap();
            match Manifest::recover(&RealFs, dir.path()) {
                Err(Error::Corruption { reason, .. }) => {
                    assert!(reason.contains("snapshot takes"), "{reason}")
                }
                other => panic!("cut at {cut}: {other:?}"),
            }
            let (report, state) = crate::verify::check_manifest_bytes(&data[..cut], &path);
            assert!(state.is_none() && !report.is_ok(), "cut at {cut}");
        }
    }

    #[test]
    fn the_snapshot_record_count_is_refused_outside_the_first_record() {
        let path = Path::new("MANIFEST-000001");
        let mut payload = Vec::new();
        put_varint64(&mut payload, TAG_SNAPSHOT_RECORDS);
        put_varint64(&mut payload, 3);
        // In a later record (what `decode` reads), and in a first record
        // with a count below 2 or twice.
        assert!(VersionEdit::decode(&payload, path, 0).is_err());
        assert!(VersionEdit::decode_fields(&payload, path, 0, true).is_ok());
        let mut twice = payload.clone();
        twice.extend_from_slice(&payload);
        assert!(VersionEdit::decode_fields(&twice, path, 0, true).is_err());
        let mut one = Vec::new();
        put_varint64(&mut one, TAG_SNAPSHOT_RECORDS);
        put_varint64(&mut one, 1);
        assert!(VersionEdit::decode_fields(&one, path, 0, true).is_err());
        // A later part of a split snapshot that sets a counter.
        let first = {
            let mut p = VersionEdit {
                next_file_number: Some(9),
                last_sequence: Some(1),
                log_number: Some(1),
                ..VersionEdit::default()
            }
            .encode();
            put_varint64(&mut p, TAG_SNAPSHOT_RECORDS);
            put_varint64(&mut p, 2);
            p
        };
        let second = VersionEdit {
            log_number: Some(2),
            ..VersionEdit::default()
        }
        .encode();
        let records = [(&first[..], 0, 8), (&second[..], 100, 108)];
        assert!(replay_manifest_records(records.into_iter(), path).is_err());
    }

    #[test]
    fn a_table_larger_than_the_record_limit_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let r = Manifest::create_with_record_limit(&RealFs, dir.path(), 3, &state(4), 60);
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    }
}
