//! Peer engines for side-by-side runs (`--features peers`, or one of
//! `peer-rocksdb` / `peer-fjall`): RocksDB through the `rocksdb` crate and
//! fjall. Both are configured like sievedb's
//! defaults where the knob exists: 4 KiB data blocks, no compression, 4 MiB
//! write buffer, writes not synced, the filter at `--bits-per-key`.

use std::path::{Path, PathBuf};

use crate::engine::{visit_keys, Engine, PolicyKind, ReadIo, Shape};
use crate::error::{BenchError, BenchResult};

/// fjall's Bloom filters take whole bits per key in `1..=20`: the bits
/// per key a Bloom run of fjall uses, or why it cannot. `plan` checks it
/// before any run, so a bad value fails at once rather than after the
/// sievedb runs (found by review).
#[cfg(feature = "peer-fjall")]
pub fn fjall_bloom_bits(bits_per_key: f64) -> BenchResult<u8> {
    if bits_per_key.fract() != 0.0 || !(1.0..=20.0).contains(&bits_per_key) {
        return Err(BenchError::Invalid(format!(
            "fjall takes whole bloom bits per key in 1..=20, got {bits_per_key}"
        )));
    }
    Ok(bits_per_key as u8)
}

fn peer_err(engine: &'static str) -> impl Fn(String) -> BenchError {
    move |message| BenchError::Peer { engine, message }
}

#[cfg(feature = "peer-rocksdb")]
/// RocksDB: block-based tables with its full-filter Bloom (`--bits-per-key`),
/// its Ribbon (`NewRibbonFilterPolicy(bits_per_key)`, the same
/// false-positive rate), or no filter.
pub struct RocksEngine {
    dir: PathBuf,
    opts: rocksdb::Options,
    db: Option<rocksdb::DB>,
}

#[cfg(feature = "peer-rocksdb")]
impl RocksEngine {
    /// Opens (creating) a RocksDB database in `dir`.
    pub fn open(dir: &Path, policy: PolicyKind, bits_per_key: f64) -> BenchResult<RocksEngine> {
        let mut table = rocksdb::BlockBasedOptions::default();
        table.set_block_size(4096);
        match policy {
            PolicyKind::Bloom => table.set_bloom_filter(bits_per_key, false),
            PolicyKind::Ribbon => table.set_ribbon_filter(bits_per_key),
            PolicyKind::None => {}
        }
        let mut opts = rocksdb::Options::default();
        opts.create_if_missing(true);
        opts.set_compression_type(rocksdb::DBCompressionType::None);
        opts.set_write_buffer_size(4 << 20);
        opts.set_block_based_table_factory(&table);
        let db = rocksdb::DB::open(&opts, dir).map_err(|e| peer_err("rocksdb")(e.to_string()))?;
        Ok(RocksEngine {
            dir: dir.to_path_buf(),
            opts,
            db: Some(db),
        })
    }

    fn db(&self) -> BenchResult<&rocksdb::DB> {
        self.db
            .as_ref()
            .ok_or_else(|| peer_err("rocksdb")("used after a failed reopen".into()))
    }
}

#[cfg(feature = "peer-rocksdb")]
impl Engine for RocksEngine {
    fn name(&self) -> &'static str {
        "rocksdb"
    }

    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        self.db()?
            .put(key, value)
            .map_err(|e| peer_err("rocksdb")(e.to_string()))
    }

    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        self.db()?
            .get(key)
            .map_err(|e| peer_err("rocksdb")(e.to_string()))
    }

    fn flush_compact(&self, _full: bool) -> BenchResult<()> {
        let db = self.db()?;
        db.flush().map_err(|e| peer_err("rocksdb")(e.to_string()))?;
        db.compact_range::<&[u8], &[u8]>(None, None);
        Ok(())
    }

    fn scan(&self, start: &[u8], limit: usize, visit: &mut dyn FnMut(&[u8])) -> BenchResult<usize> {
        let mode = rocksdb::IteratorMode::From(start, rocksdb::Direction::Forward);
        let entries = self.db()?.iterator(mode);
        visit_keys(entries, limit, visit, |e| {
            peer_err("rocksdb")(e.to_string())
        })
    }

    fn scan_rev(
        &self,
        end: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8]),
    ) -> BenchResult<usize> {
        // Reverse from a key: RocksDB seeks to the last key <= it.
        let mode = rocksdb::IteratorMode::From(end, rocksdb::Direction::Reverse);
        let entries = self.db()?.iterator(mode);
        visit_keys(entries, limit, visit, |e| {
            peer_err("rocksdb")(e.to_string())
        })
    }

    fn read_io(&self) -> Option<ReadIo> {
        None
    }

    fn shape(&self) -> Shape {
        let Some(db) = self.db.as_ref() else {
            return Shape::default();
        };
        let tables_per_level = (0..7)
            .map(|l| {
                db.property_int_value(&format!("rocksdb.num-files-at-level{l}"))
                    .ok()
                    .flatten()
                    .unwrap_or(0)
            })
            .collect();
        Shape {
            tables: Vec::new(),
            filter_bytes: 0,
            table_bytes: 0,
            tables_per_level,
        }
    }

    fn reopen_with(
        &mut self,
        between: &mut dyn FnMut(&Path) -> BenchResult<()>,
    ) -> BenchResult<()> {
        drop(self.db.take());
        between(&self.dir)?;
        self.db = Some(
            rocksdb::DB::open(&self.opts, &self.dir)
                .map_err(|e| peer_err("rocksdb")(e.to_string()))?,
        );
        Ok(())
    }
}

#[cfg(feature = "peer-fjall")]
/// fjall: one partition with its Bloom filter at `--bits-per-key` (whole
/// numbers up to 20), or none. fjall has no Ribbon filter.
pub struct FjallEngine {
    dir: PathBuf,
    bloom_bits: Option<u8>,
    handles: Option<(fjall::Keyspace, fjall::PartitionHandle)>,
}

#[cfg(feature = "peer-fjall")]
fn fjall_open(
    dir: &Path,
    bloom_bits: Option<u8>,
) -> BenchResult<(fjall::Keyspace, fjall::PartitionHandle)> {
    let e = peer_err("fjall");
    let keyspace = fjall::Config::new(dir)
        .open()
        .map_err(|err| e(err.to_string()))?;
    let opts = fjall::PartitionCreateOptions::default()
        .bloom_filter_bits(bloom_bits)
        .block_size(4096)
        .compression(fjall::CompressionType::None)
        .max_memtable_size(4 << 20);
    let part = keyspace
        .open_partition("bench", opts)
        .map_err(|err| e(err.to_string()))?;
    Ok((keyspace, part))
}

#[cfg(feature = "peer-fjall")]
impl FjallEngine {
    /// Opens (creating) a fjall keyspace in `dir`; `None` for Ribbon, which
    /// fjall does not have.
    pub fn open(
        dir: &Path,
        policy: PolicyKind,
        bits_per_key: f64,
    ) -> BenchResult<Option<FjallEngine>> {
        let bloom_bits = match policy {
            PolicyKind::Ribbon => return Ok(None),
            PolicyKind::None => None,
            PolicyKind::Bloom => Some(fjall_bloom_bits(bits_per_key)?),
        };
        Ok(Some(FjallEngine {
            dir: dir.to_path_buf(),
            bloom_bits,
            handles: Some(fjall_open(dir, bloom_bits)?),
        }))
    }

    fn part(&self) -> BenchResult<&fjall::PartitionHandle> {
        self.handles
            .as_ref()
            .map(|h| &h.1)
            .ok_or_else(|| peer_err("fjall")("used after a failed reopen".into()))
    }
}

#[cfg(feature = "peer-fjall")]
impl Engine for FjallEngine {
    fn name(&self) -> &'static str {
        "fjall"
    }

    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        self.part()?
            .insert(key, value)
            .map_err(|e| peer_err("fjall")(e.to_string()))
    }

    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        Ok(self
            .part()?
            .get(key)
            .map_err(|e| peer_err("fjall")(e.to_string()))?
            .map(|v| v.to_vec()))
    }

    fn flush_compact(&self, _full: bool) -> BenchResult<()> {
        let part = self.part()?;
        part.rotate_memtable_and_wait()
            .map_err(|e| peer_err("fjall")(e.to_string()))?;
        part.major_compact()
            .map_err(|e| peer_err("fjall")(e.to_string()))
    }

    fn scan(&self, start: &[u8], limit: usize, visit: &mut dyn FnMut(&[u8])) -> BenchResult<usize> {
        let entries = self.part()?.range(start..);
        visit_keys(entries, limit, visit, |e| peer_err("fjall")(e.to_string()))
    }

    fn scan_rev(
        &self,
        end: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8]),
    ) -> BenchResult<usize> {
        let entries = self.part()?.range(..=end).rev();
        visit_keys(entries, limit, visit, |e| peer_err("fjall")(e.to_string()))
    }

    fn read_io(&self) -> Option<ReadIo> {
        None
    }

    fn shape(&self) -> Shape {
        Shape {
            tables: Vec::new(),
            filter_bytes: 0,
            table_bytes: 0,
            tables_per_level: self
                .handles
                .as_ref()
                .map(|h| vec![h.1.segment_count() as u64])
                .unwrap_or_default(),
        }
    }

    fn reopen_with(
        &mut self,
        between: &mut dyn FnMut(&Path) -> BenchResult<()>,
    ) -> BenchResult<()> {
        if let Some((keyspace, part)) = self.handles.take() {
            keyspace
                .persist(fjall::PersistMode::SyncAll)
                .map_err(|e| peer_err("fjall")(e.to_string()))?;
            drop(part);
            drop(keyspace);
        }
        between(&self.dir)?;
        self.handles = Some(fjall_open(&self.dir, self.bloom_bits)?);
        Ok(())
    }
}
