//! Snapshot files: `snapshot-<lsn 20 digits>.snap`, a checked header followed by an opaque payload
//! that holds the engine's whole state after applying every record with an LSN up to `lsn`.
//!
//! This module owns writing a snapshot atomically and durably, and verifying one when reading it.
//! It must never touch WAL segments, and it keeps no state: `write` runs on the snapshot thread
//! while the appender thread keeps logging, and the two share nothing but the directory. Which
//! snapshots to keep or delete is decided in `mod.rs`.
//!
//! Layout: `[magic 8][version u32][lsn u64][payload_len u64][payload crc32c u32][header crc32c u32]`
//! then the payload, all integers little-endian.

use std::path::{Path, PathBuf};

use super::wal::{parse_lsn_name, read_u64};
use super::{sync_directory, Fs, FsFile, StorageError, SNAPSHOT_PAYLOAD_BYTES_MAX};

const SNAPSHOT_MAGIC: [u8; 8] = *b"STKDSNP\0";
const SNAPSHOT_VERSION: u32 = 1;
const SNAPSHOT_HEADER_BYTES: usize = 36;

const SNAPSHOT_PREFIX: &str = "snapshot-";
const SNAPSHOT_SUFFIX: &str = ".snap";
/// A snapshot is written under this suffix and renamed only once complete and synced, so a file
/// with the final name is never half written. Leftovers are deleted by `Storage::open`.
pub(super) const TEMP_SUFFIX: &str = ".tmp";
/// A snapshot reaches the disk in pieces of this size, each synced before the next is written.
/// The log's fsyncs share the disk with it and queue behind whatever it has in flight: written
/// whole and synced once, a snapshot of a million holds (about 100 MB) held every fsync of the
/// log behind a flush of 100 ms or more, and the answers waiting on them. Here a 1 MiB sync
/// takes about 1 ms, 64 MiB at once 52 ms. Redis syncs its RDB files the same way
/// (`rdb-save-incremental-fsync`, every 32 MB).
const SYNC_EVERY_BYTES: usize = 1 << 20;

pub(super) fn snapshot_file_name(lsn: u64) -> String {
    format!("{SNAPSHOT_PREFIX}{lsn:020}{SNAPSHOT_SUFFIX}")
}

pub(super) fn parse_snapshot_file_name(name: &str) -> Option<u64> {
    parse_lsn_name(name, SNAPSHOT_PREFIX, SNAPSHOT_SUFFIX)
}

/// Whether `name` is a temporary snapshot file left by an interrupted `write`.
pub(super) fn is_temp_file_name(name: &str) -> bool {
    name.starts_with(SNAPSHOT_PREFIX) && name.ends_with(TEMP_SUFFIX)
}

fn encode_header(lsn: u64, payload: &[u8]) -> [u8; SNAPSHOT_HEADER_BYTES] {
    let mut header = [0u8; SNAPSHOT_HEADER_BYTES];
    header[0..8].copy_from_slice(&SNAPSHOT_MAGIC);
    header[8..12].copy_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
    header[12..20].copy_from_slice(&lsn.to_le_bytes());
    header[20..28].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    header[28..32].copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    let header_crc = crc32c::crc32c(&header[0..32]);
    header[32..36].copy_from_slice(&header_crc.to_le_bytes());
    header
}

/// Writes `snapshot-<lsn>.snap` durably: temp file, fsync, rename, fsync of the directory.
/// Returns the final path. Callers guarantee that at most one `write` runs per directory at a
/// time (the temp file name depends only on the LSN).
pub(super) fn write(
    fs: &dyn Fs,
    dir: &Path,
    lsn: u64,
    payload: &[u8],
) -> Result<PathBuf, StorageError> {
    if lsn == 0 {
        // LSN 0 means "no snapshot" in `Recovered`; a snapshot at 0 would cover nothing.
        return Err(StorageError::InvalidSnapshotLsn { lsn });
    }
    if payload.len() as u64 > SNAPSHOT_PAYLOAD_BYTES_MAX {
        return Err(StorageError::SnapshotTooLarge {
            len_bytes: payload.len() as u64,
            max_bytes: SNAPSHOT_PAYLOAD_BYTES_MAX,
        });
    }
    let final_path = dir.join(snapshot_file_name(lsn));
    let temp_path = dir.join(format!("{}{TEMP_SUFFIX}", snapshot_file_name(lsn)));
    let written = write_temp(fs, &temp_path, lsn, payload);
    if let Err(error) = written {
        // Best effort: a leftover is harmless (open removes it) and the write error matters more.
        let _ = fs.remove_file(&temp_path);
        return Err(error.into());
    }
    fs.rename(&temp_path, &final_path)?;
    // The rename lives in the directory, not in the file: without this fsync a crash could
    // forget the new name after the appender has already deleted the WAL segments it replaces.
    sync_directory(fs, dir)?;
    Ok(final_path)
}

fn write_temp(fs: &dyn Fs, temp_path: &Path, lsn: u64, payload: &[u8]) -> std::io::Result<()> {
    let mut file = fs.create_truncate(temp_path)?;
    file.write_all(&encode_header(lsn, payload))?;
    write_in_synced_pieces(&mut *file, payload, SYNC_EVERY_BYTES)?;
    // Full fsync before the rename: the rename must never become durable ahead of the content,
    // or a crash could leave a complete-looking name over missing data.
    file.sync_all()
}

/// Writes `bytes` in pieces of `piece` bytes, each synced (`fdatasync`) before the next.
fn write_in_synced_pieces(
    file: &mut dyn FsFile,
    bytes: &[u8],
    piece: usize,
) -> std::io::Result<()> {
    for piece in bytes.chunks(piece) {
        file.write_all(piece)?;
        file.sync_data()?;
    }
    Ok(())
}

/// Reads the snapshot at `path` (whose file name says `lsn`) and verifies it. `Ok(Err(reason))`
/// means the file is readable but not a valid snapshot; `Err` is an I/O failure.
pub(super) fn read_verified(
    fs: &dyn Fs,
    path: &Path,
    lsn: u64,
) -> Result<Result<Vec<u8>, String>, StorageError> {
    // One read of the whole file: its size is what the disk holds, so no damaged length field
    // can make this allocate more than the file.
    let mut bytes = fs.read(path)?;
    let file_len_bytes = bytes.len() as u64;
    if file_len_bytes < SNAPSHOT_HEADER_BYTES as u64 {
        return Ok(Err(format!(
            "file of {file_len_bytes} bytes is shorter than a header"
        )));
    }
    let mut header = [0u8; SNAPSHOT_HEADER_BYTES];
    header.copy_from_slice(&bytes[..SNAPSHOT_HEADER_BYTES]);
    if header[0..8] != SNAPSHOT_MAGIC {
        return Ok(Err("wrong magic".to_string()));
    }
    let header_crc = u32::from_le_bytes([header[32], header[33], header[34], header[35]]);
    if header_crc != crc32c::crc32c(&header[0..32]) {
        return Ok(Err("header checksum mismatch".to_string()));
    }
    let version = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
    if version != SNAPSHOT_VERSION {
        return Ok(Err(format!("format version {version} is not supported")));
    }
    let header_lsn = read_u64(&header, 12);
    if header_lsn != lsn {
        return Ok(Err(format!(
            "header says lsn {header_lsn}, file name says {lsn}"
        )));
    }
    let payload_len_bytes = read_u64(&header, 20);
    if payload_len_bytes > SNAPSHOT_PAYLOAD_BYTES_MAX
        || file_len_bytes != SNAPSHOT_HEADER_BYTES as u64 + payload_len_bytes
    {
        return Ok(Err(format!(
            "header says {payload_len_bytes} payload bytes, file holds {}",
            file_len_bytes.saturating_sub(SNAPSHOT_HEADER_BYTES as u64)
        )));
    }
    bytes.drain(..SNAPSHOT_HEADER_BYTES);
    let payload = bytes;
    let payload_crc = u32::from_le_bytes([header[28], header[29], header[30], header[31]]);
    if payload_crc != crc32c::crc32c(&payload) {
        return Ok(Err("payload checksum mismatch".to_string()));
    }
    Ok(Ok(payload))
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::super::RealFs;
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(snapshot_file_name(42), "snapshot-00000000000000000042.snap");
        assert_eq!(parse_snapshot_file_name(&snapshot_file_name(42)), Some(42));
        assert_eq!(
            parse_snapshot_file_name("snapshot-00000000000000000042.snap.tmp"),
            None
        );
        assert!(is_temp_file_name("snapshot-00000000000000000042.snap.tmp"));
        assert!(!is_temp_file_name("snapshot-00000000000000000042.snap"));
    }

    #[test]
    fn write_then_read_verifies_and_any_flipped_byte_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&RealFs, dir.path(), 9, b"state after nine").unwrap();
        assert_eq!(
            read_verified(&RealFs, &path, 9).unwrap(),
            Ok(b"state after nine".to_vec())
        );
        assert!(read_verified(&RealFs, &path, 10).unwrap().is_err());

        let original = fs::read(&path).unwrap();
        for index in 0..original.len() {
            let mut damaged = original.clone();
            damaged[index] ^= 0x10;
            fs::write(&path, &damaged).unwrap();
            assert!(
                read_verified(&RealFs, &path, 9).unwrap().is_err(),
                "flip at byte {index} undetected"
            );
        }
        fs::write(&path, &original[..original.len() - 1]).unwrap();
        assert!(read_verified(&RealFs, &path, 9).unwrap().is_err());
    }

    /// What a file was asked to do, in order.
    #[derive(Debug, Default)]
    struct Recorded(Vec<String>);

    impl FsFile for Recorded {
        fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
            self.0.push(format!("write {}", bytes.len()));
            Ok(())
        }
        fn write_all_at(&mut self, offset: u64, bytes: &[u8]) -> std::io::Result<()> {
            self.0.push(format!("write {} at {offset}", bytes.len()));
            Ok(())
        }
        fn set_len(&mut self, len_bytes: u64) -> std::io::Result<()> {
            self.0.push(format!("set_len {len_bytes}"));
            Ok(())
        }
        fn len_bytes(&mut self) -> std::io::Result<u64> {
            Ok(0)
        }
        fn sync_data(&mut self) -> std::io::Result<()> {
            self.0.push("sync_data".to_string());
            Ok(())
        }
        fn sync_all(&mut self) -> std::io::Result<()> {
            self.0.push("sync_all".to_string());
            Ok(())
        }
    }

    #[test]
    fn a_snapshot_reaches_the_disk_in_synced_pieces() {
        let mut file = Recorded::default();
        write_in_synced_pieces(&mut file, &[7; 25], 10).unwrap();
        assert_eq!(
            file.0,
            [
                "write 10",
                "sync_data",
                "write 10",
                "sync_data",
                "write 5",
                "sync_data"
            ]
        );
        let mut file = Recorded::default();
        write_in_synced_pieces(&mut file, &[7; 20], 10).unwrap();
        assert_eq!(file.0, ["write 10", "sync_data", "write 10", "sync_data"]);
        let mut file = Recorded::default();
        write_in_synced_pieces(&mut file, &[], 10).unwrap();
        assert!(file.0.is_empty());
    }

    #[test]
    fn lsn_zero_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let refused = write(&RealFs, dir.path(), 0, b"x");
        assert!(matches!(
            refused,
            Err(StorageError::InvalidSnapshotLsn { lsn: 0 })
        ));
    }
}
