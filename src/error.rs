//! Error and result types shared by every module of the crate.
//!
//! Every failure a caller can see is one of a few typed variants: bad input is
//! [`Error::InvalidArgument`], damaged bytes on disk are [`Error::Corruption`]
//! (naming the file and, where known, the byte offset), and failures of the
//! operating system are [`Error::Io`] (naming the path involved).
//!
//! `Error` has no `From<std::io::Error>`: every `Io` error names its path,
//! which a bare `io::Error` does not carry. Application code that mixes
//! sievedb calls with `std::io` returns `Box<dyn std::error::Error + Send +
//! Sync>` (or an error type of its own), into which `?` converts both.

use std::fmt;
use std::path::PathBuf;

/// The result type used throughout sievedb.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every error sievedb reports.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The caller passed something sievedb cannot accept (a key that is too
    /// long, an option out of range, bytes that are not a sketch, ...).
    /// Nothing was written.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// Bytes read back from a file are not what was written: a checksum
    /// mismatch, a truncated file, a bad magic number or an impossible length.
    #[error("corruption in {}{}: {reason}", file.display(), OffsetSuffix(*offset))]
    Corruption {
        /// The damaged file.
        file: PathBuf,
        /// Byte offset of the damaged region inside `file`, when known.
        offset: Option<u64>,
        /// What was wrong.
        reason: String,
    },

    /// An operating-system I/O call failed.
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        /// The file or directory the failed call was about.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// The database directory is already open (its `LOCK` file is held by
    /// another [`Db`](crate::Db) in this or another process).
    #[error("database at {} is already open elsewhere (LOCK held)", .0.display())]
    Locked(PathBuf),

    /// An earlier write, sync, flush or compaction failed (an I/O error, a
    /// table found corrupt while compacting, or any other error of a
    /// background job), or a flush or compaction panicked (e.g. in a custom
    /// filter policy), so the in-memory state may no longer match the disk.
    /// The string is that first failure. The database refuses further
    /// writes, flushes and compactions until it is reopened, which recovers
    /// from the files.
    #[error("database refuses writes after an earlier failure (reopen to recover): {0}")]
    Poisoned(String),

    /// The database has been closed.
    #[error("database is closed")]
    Closed,
}

struct OffsetSuffix(Option<u64>);

impl fmt::Display for OffsetSuffix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(off) => write!(f, " at offset {off}"),
            None => Ok(()),
        }
    }
}

#[allow(dead_code)]
impl Error {
    /// Builds an [`Error::Io`] for `path`.
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// Builds an [`Error::Corruption`] for `file` at `offset`.
    pub(crate) fn corruption(
        file: impl Into<PathBuf>,
        offset: Option<u64>,
        reason: impl Into<String>,
    ) -> Self {
        Error::Corruption {
            file: file.into(),
            offset,
            reason: reason.into(),
        }
    }

    /// Builds an [`Error::InvalidArgument`].
    pub(crate) fn invalid(reason: impl Into<String>) -> Self {
        Error::InvalidArgument(reason.into())
    }

    /// An error equal to this one for its caller: what each writer of a
    /// write group gets when the group's log append fails (an
    /// `std::io::Error` cannot be cloned: its OS error code is, or else its
    /// kind and message).
    pub(crate) fn duplicate(&self) -> Self {
        match self {
            Error::InvalidArgument(reason) => Error::InvalidArgument(reason.clone()),
            Error::Corruption {
                file,
                offset,
                reason,
            } => Error::Corruption {
                file: file.clone(),
                offset: *offset,
                reason: reason.clone(),
            },
            Error::Io { path, source } => Error::Io {
                path: path.clone(),
                source: match source.raw_os_error() {
                    Some(code) => std::io::Error::from_raw_os_error(code),
                    None => std::io::Error::new(source.kind(), source.to_string()),
                },
            },
            Error::Locked(path) => Error::Locked(path.clone()),
            Error::Poisoned(reason) => Error::Poisoned(reason.clone()),
            Error::Closed => Error::Closed,
        }
    }

    /// True for [`Error::Corruption`].
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }
}
