//! Cold-cache support: evicting a database's files from the OS page cache,
//! and the device bytes this process read (`/proc/self/io`).

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use crate::error::{io_err, BenchResult};

/// Syncs every file in `dir` and asks the kernel to drop its cached pages,
/// so the next reads go to the device. Pages still mapped by a process are
/// not dropped (the kernel skips them), which is why callers close the
/// engine first.
pub fn evict_dir(dir: &Path) -> BenchResult<()> {
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let path = entry.path();
        if entry.file_type().map_err(io_err(&path))?.is_dir() {
            evict_dir(&path)?;
            continue;
        }
        // Not the lock file: closing a descriptor of it would drop the
        // engine's POSIX record lock, which belongs to this process, and
        // the open database would be unlocked (found by review).
        if entry.file_name() == "LOCK" {
            continue;
        }
        let file = File::open(&path).map_err(io_err(&path))?;
        // Dirty pages are not dropped by DONTNEED: write them out first.
        file.sync_all().map_err(io_err(&path))?;
        // SAFETY: `file` is an open descriptor owned by this function for
        // the whole call; posix_fadvise only reads its arguments and has no
        // memory-safety preconditions. (The call is `unsafe` only because it
        // is FFI; there is no safe wrapper in std or the dependencies.)
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            return Err(io_err(&path)(std::io::Error::from_raw_os_error(rc)));
        }
    }
    Ok(())
}

/// Bytes this process has caused to be fetched from the storage device
/// (`read_bytes` of `/proc/self/io`), or `None` where the kernel does not
/// provide it (no procfs, or task I/O accounting off).
pub fn device_read_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/io").ok()?;
    parse_read_bytes(&text)
}

fn parse_read_bytes(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("read_bytes:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_io() {
        let text = "rchar: 10\nwchar: 5\nsyscr: 1\nsyscw: 1\nread_bytes: 4096\nwrite_bytes: 0\ncancelled_write_bytes: 0\n";
        assert_eq!(parse_read_bytes(text), Some(4096));
        assert_eq!(parse_read_bytes("rchar: 1\n"), None);
        assert_eq!(parse_read_bytes("read_bytes: x\n"), None);
    }

    #[test]
    fn evicts_every_file_of_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), vec![1u8; 100_000]).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b"), b"x").unwrap();
        evict_dir(dir.path()).unwrap();
        // The files are intact after eviction.
        assert_eq!(std::fs::read(dir.path().join("a")).unwrap().len(), 100_000);
        assert!(matches!(
            evict_dir(&dir.path().join("nope")),
            Err(crate::error::BenchError::Io { .. })
        ));
    }
}
