//! The benchmark's error type: every failure is typed and names its cause.

use std::path::PathBuf;

/// What can go wrong in a benchmark run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// sievedb returned an error.
    #[error("sievedb: {0}")]
    Db(#[from] sievedb::Error),
    /// A file or directory operation of the benchmark itself failed.
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A command-line argument was out of range or inconsistent.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// An engine answered wrongly (a present key missing, a wrong value, a
    /// missing key found, a scan out of order).
    #[error("{engine} gave a wrong answer: {what}")]
    WrongAnswer {
        /// The engine.
        engine: String,
        /// What was wrong.
        what: String,
    },
    /// A peer engine returned an error.
    #[cfg_attr(
        not(any(feature = "peer-rocksdb", feature = "peer-fjall")),
        allow(dead_code)
    )]
    #[error("{engine}: {message}")]
    Peer {
        /// The engine.
        engine: &'static str,
        /// Its error, as text.
        message: String,
    },
    /// The results could not be written as JSON or drawn as a chart.
    #[error("output {}: {message}", path.display())]
    Output {
        /// The output file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
}

/// Result of the benchmark's operations.
pub type BenchResult<T> = std::result::Result<T, BenchError>;

/// Wraps an I/O error with its path.
pub fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> BenchError {
    let path = path.into();
    move |source| BenchError::Io { path, source }
}
