//! The record log: an append-only file of checksummed records, used for both
//! the write-ahead log (one record per write batch) and the manifest (one
//! record per version edit).
//!
//! # On-disk format
//!
//! A log file is a plain sequence of records with no file header, no padding
//! and no block structure (one append = one record, so a record is never
//! split):
//!
//! ```text
//! record := crc: u32 LE | length: u32 LE | payload: [u8; length]
//! crc     = CRC-32 (IEEE polynomial, as computed by `crc32fast`) over the
//!           4 length bytes followed by the payload bytes
//! length <= MAX_RECORD_PAYLOAD (1 GiB)
//! ```
//!
//! The checksum covers the length so that a damaged length is caught rather
//! than believed. Because the CRC of the four bytes `00 00 00 00` is not
//! zero, a run of zero bytes (what a filesystem may expose past the last
//! durable write after a crash) never parses as a valid record.
//!
//! # Reading and torn tails
//!
//! [`read_log`] / [`scan_log`] parse records from offset 0. The first record
//! that does not parse (short header, length above the maximum or running
//! past the end of the file, checksum mismatch) is the *damaged* record at
//! offset `p`. Whether it is a torn tail (a crash in the middle of the last
//! append, silently dropped) or corruption (an error) is decided by looking
//! for evidence that something was written after it:
//!
//! * if a complete record (length within the maximum, inside the file,
//!   valid checksum) starts at any offset after `p`, something was written
//!   after the damaged record, so it cannot be a torn tail: the log is corrupt
//!   at `p` ([`Error::Corruption`] with `offset = p`). The search starts at
//!   `p + 1`, not at the damaged record's declared end, because the length
//!   field may be the damaged byte, and trusting it could skip real records;
//! * if no such record exists, everything from `p` on is a torn tail:
//!   the records before `p` are returned, `valid_len = p`, `torn_tail = true`.
//!
//! The search costs one checksum per candidate offset whose length field is
//! plausible, and it only runs over the bytes after the first damaged record.
//!
//! A known, deliberate limit: if the final record is torn and the surviving
//! part of its payload itself contains a complete, correctly checksummed
//! record (a payload that embeds log bytes), that embedded record is taken as
//! evidence of later writes and the log is reported corrupt. That failure is
//! loud (an error the operator sees), never a silent loss of records; the
//! opposite choice would risk silently dropping acknowledged writes.
//!
//! # Durability
//!
//! [`LogWriter::add_record`] hands the whole record to the filesystem in one
//! `append` call; nothing is durable until [`LogWriter::sync`] returns `Ok`.
//! After any failed append or sync the writer refuses further records, since
//! the file may end in a partial record that a later append would turn into
//! mid-log corruption.

use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fs::{FileSystem, WritableFile};

/// Bytes of a record header (checksum + length).
pub const RECORD_HEADER_LEN: usize = 8;

/// Largest payload one record may carry (1 GiB).
pub const MAX_RECORD_PAYLOAD: usize = 1 << 30;

/// A writer's reusable record buffer is dropped after a record larger than
/// this, so one huge batch does not pin its memory for the log's lifetime.
const RETAINED_BUFFER_CAPACITY: usize = 4 << 20;

/// Checksum of a record: CRC-32 over the little-endian length and the payload.
fn record_crc(len_bytes: [u8; 4], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&len_bytes);
    hasher.update(payload);
    hasher.finalize()
}

/// Appends records to a log file.
pub struct LogWriter {
    file: Box<dyn WritableFile>,
    path: PathBuf,
    len: u64,
    /// Header and payload are assembled here so each record is one append.
    buf: Vec<u8>,
    /// Set after a failed append or sync: the file's tail is unknown.
    failed: bool,
}

impl std::fmt::Debug for LogWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogWriter")
            .field("path", &self.path)
            .field("len", &self.len)
            .field("failed", &self.failed)
            .finish()
    }
}

impl LogWriter {
    /// Creates (truncates) a new log at `path`.
    pub fn create(fs: &dyn FileSystem, path: &Path) -> Result<LogWriter> {
        let file = fs.create(path).map_err(|e| Error::io(path, e))?;
        Ok(LogWriter::new(file, path, 0))
    }

    /// Opens an existing log for appending after `valid_len` bytes.
    ///
    /// The caller must already have truncated any torn tail (via
    /// [`FileSystem::truncate`] to the `valid_len` that [`read_log`]
    /// returned), so the file is exactly `valid_len` bytes long; the writer
    /// counts from there.
    pub fn append_to(fs: &dyn FileSystem, path: &Path, valid_len: u64) -> Result<LogWriter> {
        let file = fs.open_append(path).map_err(|e| Error::io(path, e))?;
        Ok(LogWriter::new(file, path, valid_len))
    }

    fn new(file: Box<dyn WritableFile>, path: &Path, len: u64) -> LogWriter {
        LogWriter {
            file,
            path: path.to_path_buf(),
            len,
            buf: Vec::new(),
            failed: false,
        }
    }

    fn refuse_after_failure(&self) -> Result<()> {
        if self.failed {
            return Err(Error::io(
                &self.path,
                io::Error::other("an earlier append or sync on this log failed"),
            ));
        }
        Ok(())
    }

    /// Appends one record (one write or batch) with a single `append` call.
    ///
    /// A payload larger than [`MAX_RECORD_PAYLOAD`] is
    /// [`Error::InvalidArgument`] and writes nothing. I/O failures are
    /// [`Error::Io`] naming the log; after one, every later call fails too.
    pub fn add_record(&mut self, payload: &[u8]) -> Result<()> {
        if payload.len() > MAX_RECORD_PAYLOAD {
            return Err(Error::invalid(format!(
                "log record payload of {} bytes exceeds the maximum of {} bytes",
                payload.len(),
                MAX_RECORD_PAYLOAD
            )));
        }
        self.refuse_after_failure()?;
        // Cannot truncate: checked against MAX_RECORD_PAYLOAD (< 2^32) above.
        let len_bytes = (payload.len() as u32).to_le_bytes();
        let crc = record_crc(len_bytes, payload);
        self.buf.clear();
        self.buf.reserve(RECORD_HEADER_LEN + payload.len());
        self.buf.extend_from_slice(&crc.to_le_bytes());
        self.buf.extend_from_slice(&len_bytes);
        self.buf.extend_from_slice(payload);
        let result = self.file.append(&self.buf);
        if self.buf.capacity() > RETAINED_BUFFER_CAPACITY {
            self.buf = Vec::new();
        }
        match result {
            Ok(()) => {
                self.len += (RECORD_HEADER_LEN + payload.len()) as u64;
                Ok(())
            }
            Err(e) => {
                self.failed = true;
                Err(Error::io(&self.path, e))
            }
        }
    }

    /// Makes every record appended so far durable (fsync).
    pub fn sync(&mut self) -> Result<()> {
        self.refuse_after_failure()?;
        self.file.sync().map_err(|e| {
            // After a failed fsync the kernel may have dropped the dirty
            // pages; retrying could report success for lost data.
            self.failed = true;
            Error::io(&self.path, e)
        })
    }

    /// Bytes in the log so far (including any pre-existing valid prefix).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when the log holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Every complete record of a log, as returned by [`read_log`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogContents {
    /// The payloads of the complete records, in file order.
    pub records: Vec<Vec<u8>>,
    /// Length of the valid prefix: the offset just past the last complete
    /// record (where a torn tail starts, if there is one).
    pub valid_len: u64,
    /// True when bytes after `valid_len` were dropped as a torn tail.
    pub torn_tail: bool,
}

/// Where one record sits inside the bytes given to [`scan_log`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordSpan {
    /// File offset of the record's header.
    pub offset: u64,
    /// Byte range of the payload inside the scanned buffer.
    pub payload: Range<usize>,
}

/// The record layout of a log, as returned by [`scan_log`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogScan {
    /// The complete records, in file order.
    pub records: Vec<RecordSpan>,
    /// Length of the valid prefix (see [`LogContents::valid_len`]).
    pub valid_len: u64,
    /// True when a torn tail was dropped (see [`LogContents::torn_tail`]).
    pub torn_tail: bool,
}

/// Outcome of trying to parse a record at one offset.
enum Parsed {
    /// A complete record with a valid checksum.
    Valid { payload: Range<usize> },
    /// Fewer than [`RECORD_HEADER_LEN`] bytes remain.
    ShortHeader,
    /// The length is above the maximum or runs past the end of the data.
    BadLength { len: usize },
    /// The record fits, but its checksum does not match.
    BadChecksum,
}

fn parse_at(data: &[u8], pos: usize) -> Parsed {
    let Some(header) = data
        .get(pos..)
        .and_then(|rest| rest.get(..RECORD_HEADER_LEN))
    else {
        return Parsed::ShortHeader;
    };
    let mut crc_bytes = [0u8; 4];
    let mut len_bytes = [0u8; 4];
    crc_bytes.copy_from_slice(&header[..4]);
    len_bytes.copy_from_slice(&header[4..]);
    let len = u32::from_le_bytes(len_bytes) as usize;
    let start = pos + RECORD_HEADER_LEN;
    let payload = match start.checked_add(len) {
        Some(end) if len <= MAX_RECORD_PAYLOAD && end <= data.len() => start..end,
        _ => return Parsed::BadLength { len },
    };
    if record_crc(len_bytes, &data[payload.clone()]) != u32::from_le_bytes(crc_bytes) {
        return Parsed::BadChecksum;
    }
    Parsed::Valid { payload }
}

/// True when some offset in `from..` starts a complete, checksum-valid record.
fn any_valid_record_from(data: &[u8], from: usize) -> bool {
    let last_start = match data.len().checked_sub(RECORD_HEADER_LEN) {
        Some(last) => last,
        None => return false,
    };
    (from..=last_start).any(|pos| matches!(parse_at(data, pos), Parsed::Valid { .. }))
}

/// Splits the bytes of a log into records without copying payloads.
///
/// `path` only names the file in errors. See the module docs for how a torn
/// tail is told apart from corruption; corruption is [`Error::Corruption`]
/// with the damaged record's offset.
pub fn scan_log(data: &[u8], path: &Path) -> Result<LogScan> {
    let mut records = Vec::new();
    let mut pos = 0usize;
    while pos < data.len() {
        let reason = match parse_at(data, pos) {
            Parsed::Valid { payload } => {
                let next = payload.end;
                records.push(RecordSpan {
                    offset: pos as u64,
                    payload,
                });
                pos = next;
                continue;
            }
            Parsed::ShortHeader => {
                format!("record header cut short ({} bytes)", data.len() - pos)
            }
            Parsed::BadLength { len } => format!(
                "record length {len} exceeds the maximum or runs past the end of the file ({} bytes)",
                data.len()
            ),
            Parsed::BadChecksum => "record checksum mismatch".to_string(),
        };
        // Scanning starts right after the damaged header rather than at its
        // declared end: the length itself may be what is damaged, and
        // trusting it could skip real records and drop them silently.
        if any_valid_record_from(data, pos + 1) {
            return Err(Error::corruption(
                path,
                Some(pos as u64),
                format!("{reason}, and a valid record follows it"),
            ));
        }
        return Ok(LogScan {
            records,
            valid_len: pos as u64,
            torn_tail: true,
        });
    }
    Ok(LogScan {
        records,
        valid_len: pos as u64,
        torn_tail: false,
    })
}

/// Reads every complete record of the log at `path`.
///
/// A torn record at the tail (a crash mid-append: a short header, a length
/// running past the end of the file, a checksum mismatch on the last record,
/// or a tail of zeros or garbage with no valid record after it) is dropped
/// silently: `records` holds everything before it, `valid_len` is its offset
/// and `torn_tail` is true. A damaged record followed by a valid record is
/// [`Error::Corruption`] naming the file and the damaged record's offset.
/// Failing to read the file is [`Error::Io`].
pub fn read_log(fs: &dyn FileSystem, path: &Path) -> Result<LogContents> {
    let data = fs.read(path).map_err(|e| Error::io(path, e))?;
    let scan = scan_log(&data, path)?;
    Ok(LogContents {
        records: scan
            .records
            .iter()
            .map(|span| data[span.payload.clone()].to_vec())
            .collect(),
        valid_len: scan.valid_len,
        torn_tail: scan.torn_tail,
    })
}
