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

use std::io;
use std::path::{Path, PathBuf};

use super::wal::{parse_lsn_name, read_u64};
use super::{
    sync_directory, Fs, FsFile, SnapshotPayload, StorageError, SNAPSHOT_PAYLOAD_BYTES_MAX,
};

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

fn encode_header(lsn: u64, payload_len: u64, payload_crc: u32) -> [u8; SNAPSHOT_HEADER_BYTES] {
    let mut header = [0u8; SNAPSHOT_HEADER_BYTES];
    header[0..8].copy_from_slice(&SNAPSHOT_MAGIC);
    header[8..12].copy_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
    header[12..20].copy_from_slice(&lsn.to_le_bytes());
    header[20..28].copy_from_slice(&payload_len.to_le_bytes());
    header[28..32].copy_from_slice(&payload_crc.to_le_bytes());
    let header_crc = crc32c::crc32c(&header[0..32]);
    header[32..36].copy_from_slice(&header_crc.to_le_bytes());
    header
}

/// Writes `snapshot-<lsn>.snap` durably: temp file, fsync, rename, fsync of the directory.
/// `fill` writes the payload as it encodes it: it reaches the file in synced pieces, and no
/// copy of the whole payload is ever held. Returns the final path and the payload's length.
/// Callers guarantee that at most one `write` runs per directory at a time (the temp file name
/// depends only on the LSN).
pub(super) fn write(
    fs: &dyn Fs,
    dir: &Path,
    lsn: u64,
    fill: &mut dyn FnMut(&mut dyn io::Write) -> io::Result<()>,
) -> Result<(PathBuf, u64), StorageError> {
    if lsn == 0 {
        // LSN 0 means "no snapshot" in `Recovered`; a snapshot at 0 would cover nothing.
        return Err(StorageError::InvalidSnapshotLsn { lsn });
    }
    let final_path = dir.join(snapshot_file_name(lsn));
    let temp_path = dir.join(format!("{}{TEMP_SUFFIX}", snapshot_file_name(lsn)));
    let written = write_temp(fs, &temp_path, lsn, fill);
    let len_bytes = match written {
        Ok(Ok(len_bytes)) => len_bytes,
        failed => {
            // Best effort: a leftover is harmless (open removes it) and the write error
            // matters more.
            let _ = fs.remove_file(&temp_path);
            return Err(match failed {
                Ok(Err(len_bytes)) => StorageError::SnapshotTooLarge {
                    len_bytes,
                    max_bytes: SNAPSHOT_PAYLOAD_BYTES_MAX,
                },
                Err(error) => error.into(),
                Ok(Ok(_)) => unreachable!("matched above"),
            });
        }
    };
    fs.rename(&temp_path, &final_path)?;
    // The rename lives in the directory, not in the file: without this fsync a crash could
    // forget the new name after the appender has already deleted the WAL segments it replaces.
    sync_directory(fs, dir)?;
    Ok((final_path, len_bytes))
}

/// The temp file: a blank header, the payload as `fill` writes it, then the real header.
/// `Ok(Err(len))`: the payload grew past [`SNAPSHOT_PAYLOAD_BYTES_MAX`] (`len` bytes so far).
fn write_temp(
    fs: &dyn Fs,
    temp_path: &Path,
    lsn: u64,
    fill: &mut dyn FnMut(&mut dyn io::Write) -> io::Result<()>,
) -> io::Result<Result<u64, u64>> {
    let mut file = fs.create_truncate(temp_path)?;
    file.write_all(&[0u8; SNAPSHOT_HEADER_BYTES])?;
    let mut payload = SyncedPieces::new(&mut *file, SYNC_EVERY_BYTES, SNAPSHOT_PAYLOAD_BYTES_MAX);
    let filled = fill(&mut payload).and_then(|()| payload.write_piece());
    if payload.too_large {
        return Ok(Err(payload.len_bytes));
    }
    // The file's own error, which an encoder may have replaced by one of its own.
    if let Some(error) = payload.failed.take() {
        return Err(error);
    }
    filled?;
    let (len_bytes, crc) = (payload.len_bytes, payload.crc);
    file.write_all_at(0, &encode_header(lsn, len_bytes, crc))?;
    // Full fsync before the rename: the rename must never become durable ahead of the content,
    // or a crash could leave a complete-looking name over missing data.
    file.sync_all()?;
    Ok(Ok(len_bytes))
}

/// The payload on its way to the file: gathered into pieces of `piece_bytes`
/// ([`SYNC_EVERY_BYTES`]), each written and synced (`fdatasync`) before the next, its length and
/// checksum kept as it goes; writes past `max_bytes` fail and set `too_large`. After a failure
/// every write fails: the payload is abandoned, and `failed` keeps the file's error.
struct SyncedPieces<'a> {
    file: &'a mut dyn FsFile,
    piece: Vec<u8>,
    piece_bytes: usize,
    max_bytes: u64,
    len_bytes: u64,
    crc: u32,
    too_large: bool,
    failed: Option<io::Error>,
}

impl<'a> SyncedPieces<'a> {
    fn new(file: &'a mut dyn FsFile, piece_bytes: usize, max_bytes: u64) -> Self {
        SyncedPieces {
            file,
            piece: Vec::with_capacity(piece_bytes),
            piece_bytes,
            max_bytes,
            len_bytes: 0,
            crc: 0,
            too_large: false,
            failed: None,
        }
    }

    /// Writes and syncs what is gathered (at the end, the last piece, shorter).
    fn write_piece(&mut self) -> io::Result<()> {
        if !self.piece.is_empty() {
            self.file.write_all(&self.piece)?;
            self.file.sync_data()?;
            self.crc = crc32c::crc32c_append(self.crc, &self.piece);
            self.piece.clear();
        }
        Ok(())
    }
}

impl io::Write for SyncedPieces<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        // Never `Interrupted` (which `write_all` would retry): a failed payload stays failed.
        if self.too_large || self.failed.is_some() {
            return Err(io::Error::other("the snapshot payload was abandoned"));
        }
        self.len_bytes += bytes.len() as u64;
        if self.len_bytes > self.max_bytes {
            self.too_large = true;
            return Err(io::Error::other("the snapshot payload is too large"));
        }
        let mut rest = bytes;
        while !rest.is_empty() {
            let room = self.piece_bytes - self.piece.len();
            let (now, later) = rest.split_at(room.min(rest.len()));
            self.piece.extend_from_slice(now);
            rest = later;
            if self.piece.len() == self.piece_bytes {
                if let Err(error) = self.write_piece() {
                    let failed = io::Error::other(error.to_string());
                    self.failed = Some(error);
                    return Err(failed);
                }
            }
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Reads the snapshot at `path` (whose file name says `lsn`) and verifies it. `Ok(Err(reason))`
/// means the file is readable but not a valid snapshot; `Err` is an I/O failure.
pub(super) fn read_verified(
    fs: &dyn Fs,
    path: &Path,
    lsn: u64,
) -> Result<Result<SnapshotPayload, String>, StorageError> {
    // The whole file at once (mapped, on a real disk): its size is what the disk holds, so no
    // damaged length field can make this allocate more than the file.
    let bytes = fs.read_whole(path)?;
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
    let payload_crc = u32::from_le_bytes([header[28], header[29], header[30], header[31]]);
    if payload_crc != crc32c::crc32c(&bytes[SNAPSHOT_HEADER_BYTES..]) {
        return Ok(Err("payload checksum mismatch".to_string()));
    }
    Ok(Ok(SnapshotPayload {
        file: bytes,
        start: SNAPSHOT_HEADER_BYTES,
    }))
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
        let (path, len) = write(&RealFs, dir.path(), 9, &mut |out| {
            out.write_all(b"state after")?;
            out.write_all(b" nine")
        })
        .unwrap();
        assert_eq!(len, 16);
        assert_eq!(
            read_verified(&RealFs, &path, 9).unwrap(),
            Ok(b"state after nine".to_vec().into())
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
    fn a_snapshot_reaches_the_disk_in_synced_pieces_whatever_the_writes() {
        use std::io::Write;
        let bytes: Vec<u8> = (0..25).collect();
        for cuts in [
            &[25][..],
            &[7, 7, 11],
            &[1; 25],
            &[10, 10, 5],
            &[0, 20, 0, 5],
        ] {
            let mut file = Recorded::default();
            let mut pieces = SyncedPieces::new(&mut file, 10, 100);
            let mut rest = &bytes[..];
            for &cut in cuts {
                let (now, later) = rest.split_at(cut);
                pieces.write_all(now).unwrap();
                rest = later;
            }
            pieces.write_piece().unwrap();
            assert_eq!((pieces.len_bytes, pieces.crc), (25, crc32c::crc32c(&bytes)));
            let synced = [
                "write 10",
                "sync_data",
                "write 10",
                "sync_data",
                "write 5",
                "sync_data",
            ];
            assert_eq!(file.0, synced, "writes of {cuts:?}");
        }
        let mut file = Recorded::default();
        let mut pieces = SyncedPieces::new(&mut file, 10, 100);
        pieces.write_all(&[7; 20]).unwrap();
        pieces.write_piece().unwrap();
        assert_eq!(file.0, ["write 10", "sync_data", "write 10", "sync_data"]);
        let mut file = Recorded::default();
        SyncedPieces::new(&mut file, 10, 100).write_piece().unwrap();
        assert!(file.0.is_empty());
    }

    #[test]
    fn a_failed_write_is_final_and_keeps_the_file_error() {
        use std::io::Write;
        #[derive(Debug)]
        struct Full;
        impl FsFile for Full {
            fn write_all(&mut self, _: &[u8]) -> std::io::Result<()> {
                Err(std::io::Error::from(std::io::ErrorKind::StorageFull))
            }
            fn write_all_at(&mut self, _: u64, _: &[u8]) -> std::io::Result<()> {
                Ok(())
            }
            fn set_len(&mut self, _: u64) -> std::io::Result<()> {
                Ok(())
            }
            fn len_bytes(&mut self) -> std::io::Result<u64> {
                Ok(0)
            }
            fn sync_data(&mut self) -> std::io::Result<()> {
                Ok(())
            }
            fn sync_all(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut file = Full;
        let mut pieces = SyncedPieces::new(&mut file, 10, 100);
        assert!(pieces.write_all(&[1; 15]).is_err());
        assert!(pieces.write_all(&[1]).is_err());
        assert_eq!(
            pieces.failed.map(|error| error.kind()),
            Some(std::io::ErrorKind::StorageFull)
        );
    }

    #[test]
    fn a_payload_past_the_limit_is_refused() {
        use std::io::Write;
        let mut file = Recorded::default();
        let mut pieces = SyncedPieces::new(&mut file, 10, 30);
        pieces.write_all(&[1; 30]).unwrap();
        assert!(!pieces.too_large);
        assert!(pieces.write_all(&[1]).is_err());
        assert!(pieces.too_large);
    }

    #[test]
    fn lsn_zero_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let refused = write(&RealFs, dir.path(), 0, &mut |out| out.write_all(b"x"));
        assert!(matches!(
            refused,
            Err(StorageError::InvalidSnapshotLsn { lsn: 0 })
        ));
    }
}
