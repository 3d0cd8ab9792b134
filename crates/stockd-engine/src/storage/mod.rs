//! Durable storage for the embedded engine: a write-ahead log of opaque records split into
//! segment files, plus snapshots that let old segments be deleted. It owns the directory layout,
//! recovery after a crash (including cutting off a torn tail), and the fsync discipline that makes
//! an acknowledged record survive power loss.
//!
//! It must never interpret a payload: it knows nothing of pools, holds or commands, and it never
//! decides what a record means, only whether it is intact and in order. It also never drops a
//! record that may have been acknowledged: damage that is not a torn tail makes `open` fail.
//!
//! # Threads
//! - The **appender thread** (the engine's single writer) owns the [`Storage`] value and calls
//!   [`Storage::open`], [`Storage::append`], [`Storage::sync`], [`Storage::last_lsn`],
//!   [`Storage::durable_lsn`] and [`Storage::remove_obsolete`].
//! - The **snapshot thread** calls only [`Storage::write_snapshot`], an associated function that
//!   takes the directory and shares no state with the `Storage` value, so it needs no lock. At
//!   most one snapshot write may run at a time, and never during `open` on the same directory.
//! - Hand-off: once `write_snapshot(dir, lsn, ..)` has returned `Ok`, the snapshot thread tells
//!   the appender (for example over a channel), and the appender calls `remove_obsolete(lsn)`.
//!   Only the appender ever deletes files, and it only deletes what a durable snapshot covers.
//!
//! # Directory layout
//! `wal-<first_lsn>.log` segments (format in `wal.rs`) and `snapshot-<lsn>.snap` files (format
//! in `snapshot.rs`), LSNs written as 20 zero-padded digits so that name order is LSN order.

pub mod fs;
mod snapshot;
mod wal;

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use self::fs::{FileBytes, Fs, FsFile, FsLock, RealFs};

use self::wal::{SegmentHeader, FRAME_HEADER_BYTES, SEGMENT_HEADER_BYTES};

/// Default size at which the log moves on to a new segment file.
pub const SEGMENT_BYTES_MAX_DEFAULT: u64 = 64 << 20;
/// Accepted values of [`StorageConfig::segment_bytes_max`]: tiny segments would mean a file and
/// two fsyncs every few records; huge ones would make recovery read gigabytes per file.
pub const SEGMENT_BYTES_MAX_RANGE: RangeInclusive<u64> = 4 << 10..=1 << 30;
/// Largest payload of one record (one engine batch). Larger appends are refused: it bounds the
/// memory one record takes, and lets recovery reject a damaged length field outright.
pub const RECORD_PAYLOAD_BYTES_MAX: usize = 64 << 20;
/// Largest snapshot payload accepted, and read back, by this layer.
pub const SNAPSHOT_PAYLOAD_BYTES_MAX: u64 = 4 << 30;
/// Snapshots kept by [`Storage::remove_obsolete`], with the log needed to replay from the oldest
/// of them. Keeping the previous one means a newest snapshot damaged on disk still leaves a
/// complete recovery path, at the cost of one snapshot interval of extra log.
pub const SNAPSHOTS_RETAINED: usize = 2;
/// After a sync, a write buffer grown above this (by a very large record) is released rather
/// than kept for the life of the process.
const PENDING_CAPACITY_RETAINED_BYTES: usize = 4 << 20;

#[derive(Debug, Clone)]
pub struct StorageConfig {
    /// The file system the directory is on: [`RealFs`] except in the simulation.
    pub fs: Arc<dyn Fs>,
    pub dir: PathBuf,
    /// Roll to a new segment before a record would make the current one exceed this size (a
    /// single record larger than this gets a segment of its own). See [`SEGMENT_BYTES_MAX_RANGE`].
    pub segment_bytes_max: u64,
}

impl StorageConfig {
    pub fn new(dir: impl Into<PathBuf>) -> StorageConfig {
        StorageConfig {
            fs: Arc::new(RealFs),
            dir: dir.into(),
            segment_bytes_max: SEGMENT_BYTES_MAX_DEFAULT,
        }
    }
}

/// What [`Storage::open`] found on disk.
#[derive(Debug, PartialEq, Eq)]
pub struct Recovered {
    /// Payload of the newest snapshot that verifies, if any.
    pub snapshot: Option<SnapshotPayload>,
    /// LSN the snapshot covers (every record with `lsn <= snapshot_lsn` is inside it); 0 if none.
    pub snapshot_lsn: u64,
    /// `(lsn, payload)` of every valid record with `lsn > snapshot_lsn`, in LSN order, with no gap.
    pub records: Vec<(u64, Vec<u8>)>,
    /// Bytes of torn or damaged tail cut off the last segment (0 after a clean shutdown).
    pub truncated_tail_bytes: u64,
}

/// A snapshot file's payload: its bytes after the header, where the file system put them
/// (mapped, on a real disk).
#[derive(Debug)]
pub struct SnapshotPayload {
    file: FileBytes,
    start: usize,
}

impl From<Vec<u8>> for SnapshotPayload {
    fn from(payload: Vec<u8>) -> Self {
        SnapshotPayload {
            file: FileBytes::Owned(payload),
            start: 0,
        }
    }
}

/// Payloads are equal when their bytes are, wherever they are.
impl PartialEq for SnapshotPayload {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for SnapshotPayload {}

impl std::ops::Deref for SnapshotPayload {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.file[self.start..]
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("storage I/O failed: {0}")]
    Io(#[from] std::io::Error),
    #[error(
        "{}: corrupt at byte offset {offset}: {reason}; refusing to start because acknowledged \
         records would be lost",
        path.display()
    )]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    #[error("segment_bytes_max {segment_bytes_max} is outside {SEGMENT_BYTES_MAX_RANGE:?}")]
    SegmentBytesMaxOutOfRange { segment_bytes_max: u64 },
    #[error("record payload of {len_bytes} bytes exceeds the limit of {max_bytes} bytes")]
    RecordTooLarge { len_bytes: usize, max_bytes: usize },
    #[error("snapshot payload of {len_bytes} bytes exceeds the limit of {max_bytes} bytes")]
    SnapshotTooLarge { len_bytes: u64, max_bytes: u64 },
    #[error("a snapshot must cover at least lsn 1, got lsn {lsn}")]
    InvalidSnapshotLsn { lsn: u64 },
    #[error("snapshot lsn {snapshot_lsn} is beyond the last appended lsn {last_lsn}")]
    SnapshotBeyondLog { snapshot_lsn: u64, last_lsn: u64 },
    #[error("no snapshot file for lsn {lsn}: refusing to delete the log it would replace")]
    SnapshotMissing { lsn: u64 },
    #[error(
        "storage stopped after an earlier write or fsync failure; restart to recover from disk"
    )]
    Failed,
    #[error("data directory {dir} is in use by another process ({reason})")]
    Locked { dir: PathBuf, reason: String },
}

/// How far ahead of its records a segment's file is filled with zeros. Overwriting bytes the
/// file already has makes `fdatasync` a pure data flush; appending changes the file's length,
/// which every `fdatasync` then has to write to the inode too (measured on ext4: about twice the
/// time and CPU per sync). Extending by a chunk at a time costs one larger sync per chunk,
/// instead of a stall of writing a whole segment of zeros when it is created.
pub const PREFORMAT_BYTES: u64 = 1 << 20;

/// The file in the data directory that carries the advisory lock.
pub const LOCK_FILE_NAME: &str = "LOCK";

/// The write side of the log, owned by the appender thread (see the module docs).
#[derive(Debug)]
pub struct Storage {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    segment_bytes_max: u64,
    /// First LSN of every segment on disk, ascending; the last one is the segment appended to.
    segment_first_lsns: Vec<u64>,
    /// The current (last) segment, opened for writing at offsets.
    segment_file: Box<dyn FsFile>,
    /// Bytes of the current segment already handed to the file, header included: where the
    /// next frame goes.
    segment_written_bytes: u64,
    /// Length of the current segment's file: past `segment_written_bytes` it is preformatted
    /// with zeros (see [`PREFORMAT_BYTES`]).
    segment_file_bytes: u64,
    /// Framed records appended since the last write, all for the current segment.
    pending: Vec<u8>,
    last_lsn: u64,
    durable_lsn: u64,
    /// Set when a write or fsync failed. After a failed fsync, Linux may already have dropped the
    /// dirty pages and cleared the error, so a retry could report success for data that never
    /// reached the disk (PostgreSQL's "fsyncgate"). The only safe path is to stop writing and let
    /// a restart recover from what is really on disk.
    failed: bool,
    /// Holds the advisory lock on the directory for as long as this storage lives.
    _dir_lock: Box<dyn FsLock>,
}

impl Storage {
    /// Opens the directory (creating it if missing), recovers the newest valid snapshot and the
    /// log after it, cuts off a torn tail, and returns the storage ready to append after the last
    /// valid record. Appender thread; must not run while `write_snapshot` runs on the same dir.
    pub fn open(config: StorageConfig) -> Result<(Storage, Recovered), StorageError> {
        if !SEGMENT_BYTES_MAX_RANGE.contains(&config.segment_bytes_max) {
            return Err(StorageError::SegmentBytesMaxOutOfRange {
                segment_bytes_max: config.segment_bytes_max,
            });
        }
        let shared_fs = config.fs;
        let fs = &*shared_fs;
        let dir = config.dir;
        fs.create_dir_all(&dir)?;
        // The directory's own name lives in its parent: without this fsync a power loss can
        // take the whole directory, every acknowledged record with it, however well its files
        // were synced. Every time, not only when created here: an earlier start may have
        // crashed between creating it and this fsync.
        sync_directory(fs, parent_dir(&dir))?;
        // Two processes appending to one log would interleave records and corrupt it; the
        // advisory lock makes the second one fail fast instead. It is held until drop.
        let dir_lock = match fs.try_lock(&dir.join(LOCK_FILE_NAME))? {
            Ok(lock) => lock,
            Err(reason) => {
                return Err(StorageError::Locked {
                    dir: dir.clone(),
                    reason,
                })
            }
        };
        remove_temp_files(fs, &dir)?;
        let listing = list_directory(fs, &dir)?;
        // A crash may have come between creating a file and fsyncing the directory: the file is
        // visible now but its name might not survive a power loss. Records appended to it from
        // now on will be acknowledged, so make the names durable first.
        sync_directory(fs, &dir)?;

        let (snapshot_lsn, snapshot_payload) =
            load_newest_snapshot(fs, &dir, &listing.snapshot_lsns)?;
        let wal = recover_wal(fs, &dir, &listing.segment_first_lsns, snapshot_lsn)?;
        let last_lsn = snapshot_lsn.max(wal.end_lsn);

        let mut segment_first_lsns = listing.segment_first_lsns;
        let (segment_file, segment_written_bytes, segment_file_bytes) =
            if segment_first_lsns.is_empty() || wal.end_lsn < snapshot_lsn {
                // Either a fresh directory, or the snapshot is ahead of the log (it covered
                // records that were appended but never synced). The next record cannot follow
                // the last one in the existing segment without a gap inside that segment, so it
                // starts a new one.
                let first_lsn = last_lsn + 1;
                let file = create_segment(fs, &dir, first_lsn)?;
                segment_first_lsns.push(first_lsn);
                let header_bytes = SEGMENT_HEADER_BYTES as u64;
                (file, header_bytes, header_bytes)
            } else {
                let current_first_lsn = *segment_first_lsns.last().expect("checked non-empty");
                let mut file = fs.open_write(&segment_path(&dir, current_first_lsn))?;
                // The previous process may have written records without syncing them before it
                // died: we can read them from the page cache, and the engine will build on them,
                // so they must be on disk before anything new is acknowledged.
                file.sync_data()?;
                (
                    file,
                    wal.last_segment_len_bytes,
                    wal.last_segment_file_bytes,
                )
            };

        tracing::debug!(
            dir = %dir.display(),
            snapshot_lsn,
            records = wal.records.len(),
            last_lsn,
            truncated_tail_bytes = wal.truncated_tail_bytes,
            "storage recovered"
        );
        let storage = Storage {
            fs: shared_fs.clone(),
            dir,
            segment_bytes_max: config.segment_bytes_max,
            segment_first_lsns,
            segment_file,
            segment_written_bytes,
            segment_file_bytes,
            pending: Vec::new(),
            last_lsn,
            durable_lsn: last_lsn,
            failed: false,
            _dir_lock: dir_lock,
        };
        let recovered = Recovered {
            snapshot: snapshot_payload,
            snapshot_lsn,
            records: wal.records,
            truncated_tail_bytes: wal.truncated_tail_bytes,
        };
        Ok((storage, recovered))
    }

    /// Appends one record (one engine batch) to the in-memory buffer and returns its LSN (LSNs are
    /// consecutive from 1 and continue across restarts). Not durable until [`Storage::sync`]
    /// returns `Ok`; a record never synced is lost in a crash, which is fine because it was never
    /// acknowledged. No syscall except when the segment is full. Appender thread.
    pub fn append(&mut self, payload: &[u8]) -> Result<u64, StorageError> {
        self.ensure_not_failed()?;
        if payload.len() > RECORD_PAYLOAD_BYTES_MAX {
            return Err(StorageError::RecordTooLarge {
                len_bytes: payload.len(),
                max_bytes: RECORD_PAYLOAD_BYTES_MAX,
            });
        }
        let lsn = self.last_lsn + 1;
        let segment_bytes = self.segment_written_bytes + self.pending.len() as u64;
        let segment_has_records = segment_bytes > SEGMENT_HEADER_BYTES as u64;
        let frame_bytes = (FRAME_HEADER_BYTES + payload.len()) as u64;
        if segment_has_records && segment_bytes + frame_bytes > self.segment_bytes_max {
            self.roll_segment(lsn)?;
        }
        wal::encode_frame(&mut self.pending, lsn, payload);
        self.last_lsn = lsn;
        Ok(lsn)
    }

    /// Writes the buffered records with one `write` and makes them durable with one
    /// `fdatasync`. After `Ok`, every appended record survives a crash. Appender thread.
    ///
    /// `fdatasync` rather than `fsync`: it persists what reading the bytes back needs (the
    /// file's length when a preformatted chunk was added) but skips pure timestamp updates, which
    /// saves a metadata write on every call. Nothing is done when nothing was appended since the last sync.
    ///
    /// Answers how long the `fdatasync` itself took (`None` when nothing was synced), for
    /// `stockd_wal_fsync_duration_seconds`.
    pub fn sync(&mut self) -> Result<Option<Duration>, StorageError> {
        self.ensure_not_failed()?;
        if self.pending.is_empty() {
            return Ok(None);
        }
        self.write_pending_and_sync().map(Some)
    }

    /// Durably writes `snapshot-<lsn>.snap` in `dir`: the engine state after applying every record
    /// up to and including `lsn`. Temp file, fsync, rename, fsync of the directory; returns only once the
    /// snapshot survives a crash. Deletes nothing. Snapshot thread: it shares no state with the
    /// `Storage` value, so it can run while the appender keeps appending and syncing. At most one
    /// call at a time per directory.
    pub fn write_snapshot(
        fs: &dyn Fs,
        dir: &Path,
        lsn: u64,
        payload: &[u8],
    ) -> Result<(), StorageError> {
        Self::write_snapshot_with(fs, dir, lsn, &mut |out| out.write_all(payload))
    }

    /// [`Storage::write_snapshot`] of the payload `fill` writes as it encodes it, which reaches
    /// the file in synced pieces: no copy of the whole payload is held.
    pub fn write_snapshot_with(
        fs: &dyn Fs,
        dir: &Path,
        lsn: u64,
        fill: &mut dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()>,
    ) -> Result<(), StorageError> {
        let (path, bytes) = snapshot::write(fs, dir, lsn, fill)?;
        tracing::debug!(path = %path.display(), lsn, bytes, "snapshot written");
        Ok(())
    }

    /// Deletes what the durable snapshot at `snapshot_lsn` makes unnecessary: snapshots older than
    /// the [`SNAPSHOTS_RETAINED`] newest ones up to `snapshot_lsn`, and segments whose records are
    /// all covered by the oldest retained snapshot. Never deletes the current segment nor a
    /// snapshot newer than `snapshot_lsn`. Appender thread, after `write_snapshot(dir,
    /// snapshot_lsn, ..)` returned `Ok`; when the snapshot thread has already deleted the files
    /// ([`Storage::remove_obsolete_files`]), this only forgets the segments.
    ///
    /// The deletions are not fsynced: if a crash forgets one, the file comes back, and recovery
    /// skips records a snapshot covers anyway. Segments go oldest first, so a crash part way
    /// leaves a log without holes.
    pub fn remove_obsolete(&mut self, snapshot_lsn: u64) -> Result<(), StorageError> {
        if snapshot_lsn > self.last_lsn {
            return Err(StorageError::SnapshotBeyondLog {
                snapshot_lsn,
                last_lsn: self.last_lsn,
            });
        }
        let listing = list_directory(&*self.fs, &self.dir)?;
        let covered_lsn = covered_lsn(&listing, snapshot_lsn)?;
        for _ in 0..obsolete_segments(&self.segment_first_lsns, covered_lsn) {
            let path = segment_path(&self.dir, self.segment_first_lsns[0]);
            remove_file_if_present(&*self.fs, &path)?;
            tracing::debug!(path = %path.display(), "removed obsolete segment");
            self.segment_first_lsns.remove(0);
        }
        for path in obsolete_snapshots(&self.dir, &listing, covered_lsn) {
            remove_file_if_present(&*self.fs, &path)?;
            tracing::debug!(path = %path.display(), "removed obsolete snapshot");
        }
        Ok(())
    }

    /// What [`Storage::remove_obsolete`] deletes, deleted from the snapshot thread, which has just
    /// written the snapshot at `snapshot_lsn`, and a few megabytes at a time. Unlinking a file of
    /// 100 MB took 70-80 ms here, and the log's fsyncs on the same file system waited behind it
    /// (up to 34 ms); on the appender thread it stopped every answer for its whole length. A
    /// file that loses [`REMOVE_STEP_BYTES`] at a time, then its name, never holds the
    /// appender's fsyncs more than a few milliseconds.
    ///
    /// The appender never reads a segment this deletes (all its records are below the oldest
    /// retained snapshot: recovery does not read it either, whole or cut short) and never
    /// deletes what this one is deleting before this one is done (it acts on a snapshot only
    /// once the snapshot thread reports it); a file already gone is no error.
    pub fn remove_obsolete_files(
        fs: &dyn Fs,
        dir: &Path,
        snapshot_lsn: u64,
    ) -> Result<(), StorageError> {
        let listing = list_directory(fs, dir)?;
        let covered_lsn = covered_lsn(&listing, snapshot_lsn)?;
        let firsts = &listing.segment_first_lsns;
        // The segment being appended to is the last one, or was when listed: never obsolete.
        let segments = firsts[..obsolete_segments(firsts, covered_lsn)]
            .iter()
            .map(|&first_lsn| segment_path(dir, first_lsn));
        for path in segments.chain(obsolete_snapshots(dir, &listing, covered_lsn)) {
            remove_gradually(fs, &path)?;
            tracing::debug!(path = %path.display(), "removed obsolete file");
        }
        Ok(())
    }

    /// LSN of the last appended record (durable or not), or of the snapshot if that is newer.
    pub fn last_lsn(&self) -> u64 {
        self.last_lsn
    }

    /// LSN up to which records are known to be on disk.
    pub fn durable_lsn(&self) -> u64 {
        self.durable_lsn
    }

    /// The storage directory, for handing to the snapshot thread.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file system the directory is on, for handing to the snapshot thread.
    pub fn fs(&self) -> &Arc<dyn Fs> {
        &self.fs
    }

    fn ensure_not_failed(&self) -> Result<(), StorageError> {
        if self.failed {
            return Err(StorageError::Failed);
        }
        Ok(())
    }

    /// Writes the pending frames where the segment's records end, over its preformatted zeros,
    /// and syncs. When the frames reach past the zeros, the file is first extended by another
    /// [`PREFORMAT_BYTES`] of zeros, made durable by the same `fdatasync`. Answers how long the
    /// `fdatasync` took.
    fn write_pending_and_sync(&mut self) -> Result<Duration, StorageError> {
        let end = self.segment_written_bytes + self.pending.len() as u64;
        let mut file_bytes = self.segment_file_bytes;
        let written = self
            .segment_file
            .write_all_at(self.segment_written_bytes, &self.pending)
            .and_then(|()| {
                if end <= self.segment_file_bytes {
                    return Ok(());
                }
                let preformatted = (end + PREFORMAT_BYTES).min(self.segment_bytes_max.max(end));
                file_bytes = preformatted;
                let zeros = vec![0u8; (preformatted - end) as usize];
                self.segment_file.write_all_at(end, &zeros)
            })
            .and_then(|()| {
                // Timed alone, as etcd times its fsync: the writes before it only fill the page
                // cache, the fdatasync is where the log waits for the disk.
                let started = Instant::now();
                self.segment_file.sync_data().map(|()| started.elapsed())
            });
        let fdatasync = match written {
            Ok(took) => took,
            Err(error) => {
                self.failed = true;
                return Err(error.into());
            }
        };
        self.segment_written_bytes = end;
        self.segment_file_bytes = file_bytes.max(end);
        self.pending.clear();
        if self.pending.capacity() > PENDING_CAPACITY_RETAINED_BYTES {
            self.pending = Vec::new();
        }
        self.durable_lsn = self.last_lsn;
        Ok(fdatasync)
    }

    /// Closes the current segment and starts a new one whose first record will be `first_lsn`.
    fn roll_segment(&mut self, first_lsn: u64) -> Result<(), StorageError> {
        // The current segment is made complete and durable before the next one exists. Recovery
        // relies on this: only the last segment can ever have a torn tail, so damage anywhere
        // else is corruption of acknowledged data.
        self.write_pending_and_sync()?;
        let file =
            create_segment(&*self.fs, &self.dir, first_lsn).inspect_err(|_| self.failed = true)?;
        self.segment_file = file;
        self.segment_first_lsns.push(first_lsn);
        self.segment_written_bytes = SEGMENT_HEADER_BYTES as u64;
        self.segment_file_bytes = SEGMENT_HEADER_BYTES as u64;
        Ok(())
    }
}

fn segment_path(dir: &Path, first_lsn: u64) -> PathBuf {
    dir.join(wal::segment_file_name(first_lsn))
}

/// Creates a segment holding only its header, durably: the header is synced before any record
/// is written, so that a segment found with a missing header can be known to hold no record;
/// the directory is synced so that the new file's name survives a crash.
fn create_segment(
    fs: &dyn Fs,
    dir: &Path,
    first_lsn: u64,
) -> Result<Box<dyn FsFile>, StorageError> {
    let path = segment_path(dir, first_lsn);
    let mut file = fs.create_new(&path)?;
    file.write_all_at(0, &wal::encode_segment_header(first_lsn))?;
    file.sync_data()?;
    sync_directory(fs, dir)?;
    Ok(file)
}

/// The directory `dir` is an entry of ("." for a bare relative name).
fn parent_dir(dir: &Path) -> &Path {
    match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        Some(_) => Path::new("."),
        None => dir,
    }
}

/// fsync of a directory: makes file creations, renames and deletions in it durable. Without it
/// a file can be fully synced and still be missing after a power loss, because its name was not.
fn sync_directory(fs: &dyn Fs, dir: &Path) -> std::io::Result<()> {
    fs.sync_dir(dir)
}

/// The lsn the oldest retained snapshot covers, once the snapshot at `snapshot_lsn` is durable:
/// the [`SNAPSHOTS_RETAINED`] newest up to `snapshot_lsn` are kept (newer ones may be appearing
/// from the snapshot thread; they are left alone).
fn covered_lsn(listing: &Listing, snapshot_lsn: u64) -> Result<u64, StorageError> {
    let lsns: Vec<u64> = listing
        .snapshot_lsns
        .iter()
        .copied()
        .filter(|&lsn| lsn <= snapshot_lsn)
        .collect();
    if lsns.last() != Some(&snapshot_lsn) {
        return Err(StorageError::SnapshotMissing { lsn: snapshot_lsn });
    }
    Ok(lsns[lsns.len().saturating_sub(SNAPSHOTS_RETAINED)])
}

/// How many of the segments (by first lsn, ascending) hold only records up to `covered_lsn`:
/// segment i holds lsns `first_lsns[i] ..= first_lsns[i + 1] - 1`, so the last one, whose end
/// is not known, never counts.
fn obsolete_segments(first_lsns: &[u64], covered_lsn: u64) -> usize {
    first_lsns
        .windows(2)
        .take_while(|pair| pair[1] - 1 <= covered_lsn)
        .count()
}

/// The snapshots older than the oldest retained one, covering `covered_lsn`.
fn obsolete_snapshots<'a>(
    dir: &'a Path,
    listing: &'a Listing,
    covered_lsn: u64,
) -> impl Iterator<Item = PathBuf> + 'a {
    listing
        .snapshot_lsns
        .iter()
        .take_while(move |&&lsn| lsn < covered_lsn)
        .map(move |&lsn| dir.join(snapshot::snapshot_file_name(lsn)))
}

/// How many bytes a file being deleted loses at a time: about 2 ms of the file system's work
/// here, so the log's fsyncs never wait long behind it.
pub const REMOVE_STEP_BYTES: u64 = 8 << 20;

/// What a file being deleted is called until it is gone; `open` deletes leftovers.
const OBSOLETE_SUFFIX: &str = ".obsolete";

/// Deletes `path`: first its name (renamed to `*.obsolete`, so that no file under a log or
/// snapshot name is ever cut short), then its bytes, [`REMOVE_STEP_BYTES`] at a time from the
/// end, then the file. A file already gone is no error.
fn remove_gradually(fs: &dyn Fs, path: &Path) -> std::io::Result<()> {
    let mut doomed = path.as_os_str().to_owned();
    doomed.push(OBSOLETE_SUFFIX);
    let doomed = PathBuf::from(doomed);
    match fs.rename(path, &doomed) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        renamed => renamed?,
    }
    let mut file = fs.open_write(&doomed)?;
    let mut len = file.len_bytes()?;
    while len > 0 {
        len = len.saturating_sub(REMOVE_STEP_BYTES);
        file.set_len(len)?;
    }
    drop(file);
    remove_file_if_present(fs, &doomed)
}

fn remove_file_if_present(fs: &dyn Fs, path: &Path) -> std::io::Result<()> {
    match fs.remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

struct Listing {
    /// Ascending.
    segment_first_lsns: Vec<u64>,
    /// Ascending.
    snapshot_lsns: Vec<u64>,
}

/// Lists segments and snapshots, ignoring any other file (temporary snapshots included).
fn list_directory(fs: &dyn Fs, dir: &Path) -> Result<Listing, StorageError> {
    let mut listing = Listing {
        segment_first_lsns: Vec::new(),
        snapshot_lsns: Vec::new(),
    };
    for name in fs.list(dir)? {
        if let Some(first_lsn) = wal::parse_segment_file_name(&name) {
            listing.segment_first_lsns.push(first_lsn);
        } else if let Some(lsn) = snapshot::parse_snapshot_file_name(&name) {
            listing.snapshot_lsns.push(lsn);
        }
    }
    listing.segment_first_lsns.sort_unstable();
    listing.snapshot_lsns.sort_unstable();
    Ok(listing)
}

/// Deletes `snapshot-*.tmp` files left by a snapshot write that a crash interrupted, and
/// `*.obsolete` files left by a deletion it interrupted. Only safe while no snapshot write is
/// running, that is, during `open`.
fn remove_temp_files(fs: &dyn Fs, dir: &Path) -> Result<(), StorageError> {
    for name in fs.list(dir)? {
        if snapshot::is_temp_file_name(&name) {
            let path = dir.join(name);
            tracing::warn!(path = %path.display(), "removing leftover temporary snapshot");
            remove_file_if_present(fs, &path)?;
        } else if name.ends_with(OBSOLETE_SUFFIX) {
            let path = dir.join(name);
            tracing::info!(path = %path.display(), "removing a file whose deletion was cut short");
            remove_file_if_present(fs, &path)?;
        }
    }
    Ok(())
}

/// The newest snapshot that verifies, as `(lsn, Some(payload))`, or `(0, None)`. A snapshot that
/// fails verification is skipped with a warning: an older snapshot plus the log after it give
/// the same state, and if that log is gone, `recover_wal` reports the gap.
fn load_newest_snapshot(
    fs: &dyn Fs,
    dir: &Path,
    snapshot_lsns: &[u64],
) -> Result<(u64, Option<SnapshotPayload>), StorageError> {
    for &lsn in snapshot_lsns.iter().rev() {
        let path = dir.join(snapshot::snapshot_file_name(lsn));
        match snapshot::read_verified(fs, &path, lsn)? {
            Ok(payload) => return Ok((lsn, Some(payload))),
            Err(reason) => tracing::warn!(
                path = %path.display(),
                %reason,
                "ignoring snapshot that fails verification; falling back to an older one"
            ),
        }
    }
    Ok((0, None))
}

struct WalRecovery {
    records: Vec<(u64, Vec<u8>)>,
    truncated_tail_bytes: u64,
    /// LSN of the last valid record in the log (first LSN - 1 for an empty last segment, 0 when
    /// there is no segment).
    end_lsn: u64,
    /// Where the last segment's valid records end (after any truncation).
    last_segment_len_bytes: u64,
    /// Length of the last segment's file: past `last_segment_len_bytes`, preformatted zeros.
    last_segment_file_bytes: u64,
}

fn corrupt(path: &Path, offset: usize, reason: String) -> StorageError {
    StorageError::Corrupt {
        path: path.to_path_buf(),
        offset: offset as u64,
        reason,
    }
}

/// Reads the log after the snapshot, checking that the records from `snapshot_lsn + 1` on form
/// one unbroken sequence, and truncates a torn tail of the last segment.
///
/// Why refuse to start on damage in the middle: a record is acknowledged only after a sync that
/// also covered every record before it, so valid data after a bad record (or a later segment
/// after a bad one) means the bad record was once durable and acknowledged. Dropping it, and
/// everything after it, would silently undo sales the clients were told had happened. An
/// operator must look instead. A torn tail is different: it is the part of a write that a crash
/// interrupted before its sync returned, so nobody was told it happened.
fn recover_wal(
    fs: &dyn Fs,
    dir: &Path,
    segment_first_lsns: &[u64],
    snapshot_lsn: u64,
) -> Result<WalRecovery, StorageError> {
    let mut recovery = WalRecovery {
        records: Vec::new(),
        truncated_tail_bytes: 0,
        end_lsn: 0,
        last_segment_len_bytes: 0,
        last_segment_file_bytes: 0,
    };
    let Some(&oldest_first_lsn) = segment_first_lsns.first() else {
        return Ok(recovery);
    };
    if oldest_first_lsn > snapshot_lsn + 1 {
        let reason = format!(
            "the log starts at lsn {oldest_first_lsn} but the snapshot covers only up to lsn \
             {snapshot_lsn}: records {} to {} are missing",
            snapshot_lsn + 1,
            oldest_first_lsn - 1
        );
        return Err(corrupt(&segment_path(dir, oldest_first_lsn), 0, reason));
    }
    // Segments wholly covered by the snapshot are not read: a segment is wholly covered when the
    // next one starts at or before snapshot_lsn + 1.
    let start = segment_first_lsns
        .iter()
        .rposition(|&first_lsn| first_lsn <= snapshot_lsn + 1)
        .expect("the oldest segment starts at or before snapshot_lsn + 1");
    let mut next_lsn = segment_first_lsns[start];
    for (index, &first_lsn) in segment_first_lsns.iter().enumerate().skip(start) {
        let is_last = index + 1 == segment_first_lsns.len();
        let path = segment_path(dir, first_lsn);
        if first_lsn != next_lsn {
            let reason = format!(
                "segment starts at lsn {first_lsn} but the previous segment ends at lsn {}",
                next_lsn - 1
            );
            return Err(corrupt(&path, 0, reason));
        }
        let bytes = fs.read(&path)?;
        match wal::check_segment_header(&bytes, first_lsn) {
            SegmentHeader::Valid => {}
            // A damaged header on the last segment with no valid record anywhere after it is a
            // header whose sync never returned (records are written only after it): torn, not
            // corrupt. With a record after it, it is damage to acknowledged data.
            SegmentHeader::Damaged(reason)
                if is_last && !wal::valid_frame_follows(&bytes, 0, first_lsn) =>
            {
                tracing::warn!(
                    path = %path.display(),
                    bytes = bytes.len(),
                    %reason,
                    "rewriting the torn header of the last segment, which holds no record"
                );
                rewrite_segment_header(fs, &path, first_lsn)?;
                recovery.truncated_tail_bytes += bytes.len() as u64;
                recovery.last_segment_len_bytes = SEGMENT_HEADER_BYTES as u64;
                recovery.last_segment_file_bytes = SEGMENT_HEADER_BYTES as u64;
                continue;
            }
            SegmentHeader::Torn if is_last => {
                // Created but its header never reached the disk: no record was ever in it.
                tracing::warn!(
                    path = %path.display(),
                    bytes = bytes.len(),
                    "rewriting the torn header of the last segment"
                );
                rewrite_segment_header(fs, &path, first_lsn)?;
                recovery.truncated_tail_bytes += bytes.len() as u64;
                recovery.last_segment_len_bytes = SEGMENT_HEADER_BYTES as u64;
                recovery.last_segment_file_bytes = SEGMENT_HEADER_BYTES as u64;
                continue;
            }
            SegmentHeader::Torn => {
                let reason = "segment header is missing but later segments exist".to_string();
                return Err(corrupt(&path, 0, reason));
            }
            SegmentHeader::Damaged(reason) | SegmentHeader::Invalid(reason) => {
                return Err(corrupt(&path, 0, reason))
            }
        }

        let scan = wal::scan_segment(&bytes, first_lsn);
        for (lsn, payload) in scan.records {
            if lsn > snapshot_lsn {
                recovery.records.push((lsn, bytes[payload].to_vec()));
            }
        }
        next_lsn = scan.next_lsn;
        recovery.last_segment_len_bytes = bytes.len() as u64;
        recovery.last_segment_file_bytes = bytes.len() as u64;
        let Some(invalid) = scan.invalid else {
            continue;
        };
        // Zeros from the first invalid frame to the end of the file: the preformatted space
        // after the last record, in any segment. Not damage, nothing to cut. (Zeros where
        // acknowledged records were would end the segment early, which the next segment's
        // first lsn catches; in the last segment they look like a torn tail, as any damage to
        // the last frame does.)
        if bytes[invalid.offset..].iter().all(|&byte| byte == 0) {
            recovery.last_segment_len_bytes = invalid.offset as u64;
            continue;
        }
        if !is_last {
            let reason = format!(
                "{}; this segment was complete and synced before the next one was created",
                invalid.reason
            );
            return Err(corrupt(&path, invalid.offset, reason));
        }
        if wal::valid_frame_follows(&bytes, invalid.offset + 1, next_lsn) {
            let reason = format!(
                "{}; valid records follow it, so it is not a torn tail",
                invalid.reason
            );
            return Err(corrupt(&path, invalid.offset, reason));
        }
        let cut_bytes = (bytes.len() - invalid.offset) as u64;
        tracing::warn!(
            path = %path.display(),
            offset = invalid.offset,
            cut_bytes,
            reason = %invalid.reason,
            "truncating the torn tail of the log"
        );
        truncate_segment(fs, &path, invalid.offset as u64)?;
        recovery.truncated_tail_bytes += cut_bytes;
        recovery.last_segment_len_bytes = invalid.offset as u64;
        recovery.last_segment_file_bytes = invalid.offset as u64;
    }
    recovery.end_lsn = next_lsn - 1;
    Ok(recovery)
}

/// Reads, and changes nothing: the newest valid snapshot alone, as recovery would find it.
pub(crate) fn read_newest_snapshot(fs: &dyn Fs, dir: &Path) -> Result<Recovered, StorageError> {
    let listing = list_directory(fs, dir)?;
    let (snapshot_lsn, snapshot) = load_newest_snapshot(fs, dir, &listing.snapshot_lsns)?;
    Ok(Recovered {
        snapshot,
        snapshot_lsn,
        records: Vec::new(),
        truncated_tail_bytes: 0,
    })
}

/// Cuts the last segment at `len_bytes` and fsyncs. The cut must be durable before new records
/// are appended after it: otherwise a crash could bring the old tail back behind shorter new
/// records, where its stale frames could pass for the records that follow.
fn truncate_segment(fs: &dyn Fs, path: &Path, len_bytes: u64) -> std::io::Result<()> {
    let mut file = fs.open_write(path)?;
    file.set_len(len_bytes)?;
    file.sync_all()
}

fn rewrite_segment_header(fs: &dyn Fs, path: &Path, first_lsn: u64) -> std::io::Result<()> {
    // The file exists (it was just read): emptied, then given its header.
    let mut file = fs.create_truncate(path)?;
    file.write_all(&wal::encode_segment_header(first_lsn))?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    const SMALL_SEGMENT_BYTES: u64 = *SEGMENT_BYTES_MAX_RANGE.start();

    fn small_segments(dir: &Path) -> StorageConfig {
        StorageConfig {
            segment_bytes_max: SMALL_SEGMENT_BYTES,
            ..StorageConfig::new(dir)
        }
    }

    /// A deterministic payload of 10 to 89 bytes that differs for every LSN.
    fn payload(lsn: u64) -> Vec<u8> {
        let len = 10 + (lsn % 80) as usize;
        (0..len)
            .map(|index| (lsn as u8).wrapping_mul(31).wrapping_add(index as u8))
            .collect()
    }

    fn records(lsns: RangeInclusive<u64>) -> Vec<(u64, Vec<u8>)> {
        lsns.map(|lsn| (lsn, payload(lsn))).collect()
    }

    fn append_and_sync(storage: &mut Storage, lsns: RangeInclusive<u64>) {
        for lsn in lsns {
            assert_eq!(storage.append(&payload(lsn)).unwrap(), lsn);
        }
        storage.sync().unwrap();
    }

    fn file_names(dir: &Path, prefix: &str) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.starts_with(prefix))
            .collect();
        names.sort();
        names
    }

    fn last_segment_path(dir: &Path) -> PathBuf {
        dir.join(file_names(dir, "wal-").pop().unwrap())
    }

    /// Byte offset of the frame holding `lsn` in a segment whose records start at `first_lsn`.
    fn frame_offset(first_lsn: u64, lsn: u64) -> usize {
        let earlier: usize = (first_lsn..lsn)
            .map(|lsn| FRAME_HEADER_BYTES + payload(lsn).len())
            .sum();
        SEGMENT_HEADER_BYTES + earlier
    }

    fn flip_byte(path: &Path, offset: usize) {
        let mut bytes = fs::read(path).unwrap();
        bytes[offset] ^= 0x40;
        fs::write(path, bytes).unwrap();
    }

    /// A directory holding one segment with records 1..=5, cleanly synced.
    fn five_records() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let (mut storage, _) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        append_and_sync(&mut storage, 1..=5);
        dir
    }

    fn expect_corrupt(config: StorageConfig) -> (PathBuf, u64) {
        match Storage::open(config) {
            Err(StorageError::Corrupt { path, offset, .. }) => (path, offset),
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn records_round_trip_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (mut storage, recovered) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        assert_eq!(
            recovered,
            Recovered {
                snapshot: None,
                snapshot_lsn: 0,
                records: vec![],
                truncated_tail_bytes: 0
            }
        );
        assert_eq!(storage.last_lsn(), 0);
        append_and_sync(&mut storage, 1..=20);
        assert_eq!(storage.append(b"").unwrap(), 21);
        storage.sync().unwrap();
        assert_eq!(storage.durable_lsn(), 21);
        drop(storage);

        let (_storage, recovered) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        let mut expected = records(1..=20);
        expected.push((21, Vec::new()));
        assert_eq!(recovered.records, expected);
        assert_eq!(recovered.truncated_tail_bytes, 0);
    }

    /// A sync answers its fdatasync's duration, the log stage's one observation of it; a sync
    /// with nothing to write does no fdatasync and answers none, so none is counted.
    #[test]
    fn a_sync_answers_how_long_its_fdatasync_took_and_none_when_nothing_was_synced() {
        use super::fs::SlowSyncFs;

        let sync_takes = Duration::from_millis(5);
        let dir = tempfile::tempdir().unwrap();
        let (mut storage, _) = Storage::open(StorageConfig {
            fs: Arc::new(SlowSyncFs { sync_takes }),
            ..StorageConfig::new(dir.path())
        })
        .unwrap();
        assert_eq!(storage.sync().unwrap(), None);
        storage.append(&payload(1)).unwrap();
        let took = storage.sync().unwrap().expect("an fdatasync ran");
        assert!(took >= sync_takes, "{took:?}");
        assert_eq!(storage.sync().unwrap(), None);
    }

    #[test]
    fn lsns_continue_after_reopen_and_unsynced_records_are_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (mut storage, _) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        append_and_sync(&mut storage, 1..=3);
        storage.append(b"never synced").unwrap();
        drop(storage);

        let (mut storage, recovered) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        assert_eq!(recovered.records, records(1..=3));
        assert_eq!(storage.last_lsn(), 3);
        append_and_sync(&mut storage, 4..=6);
        drop(storage);

        let (storage, recovered) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        assert_eq!(recovered.records, records(1..=6));
        assert_eq!(storage.last_lsn(), 6);
    }

    #[test]
    fn segments_roll_and_recover_across_several_segments() {
        let dir = tempfile::tempdir().unwrap();
        let (mut storage, _) = Storage::open(small_segments(dir.path())).unwrap();
        // Sync only every 7 records, so that rolls also happen with records still buffered.
        for lsn in 1..=300 {
            storage.append(&payload(lsn)).unwrap();
            if lsn % 7 == 0 {
                storage.sync().unwrap();
            }
        }
        storage.sync().unwrap();
        drop(storage);

        let segments = file_names(dir.path(), "wal-");
        assert!(
            segments.len() >= 4,
            "expected several segments, got {segments:?}"
        );
        for name in &segments {
            let len_bytes = fs::metadata(dir.path().join(name)).unwrap().len();
            assert!(
                len_bytes <= SMALL_SEGMENT_BYTES,
                "{name} has {len_bytes} bytes"
            );
        }
        let (mut storage, recovered) = Storage::open(small_segments(dir.path())).unwrap();
        assert_eq!(recovered.records, records(1..=300));
        append_and_sync(&mut storage, 301..=400);
        drop(storage);

        let (_storage, recovered) = Storage::open(small_segments(dir.path())).unwrap();
        assert_eq!(recovered.records, records(1..=400));
    }

    #[test]
    fn snapshot_and_remove_obsolete_leave_only_later_records() {
        let dir = tempfile::tempdir().unwrap();
        let (mut storage, _) = Storage::open(small_segments(dir.path())).unwrap();
        append_and_sync(&mut storage, 1..=200);
        let segments_before = file_names(dir.path(), "wal-").len();
        Storage::write_snapshot(&RealFs, dir.path(), 150, b"state at 150").unwrap();
        storage.remove_obsolete(150).unwrap();
        let segments_after = file_names(dir.path(), "wal-");
        assert!(segments_after.len() < segments_before);
        let oldest_first_lsn = wal::parse_segment_file_name(&segments_after[0]).unwrap();
        assert!(oldest_first_lsn <= 151 && oldest_first_lsn > 1);
        append_and_sync(&mut storage, 201..=220);
        drop(storage);

        let (mut storage, recovered) = Storage::open(small_segments(dir.path())).unwrap();
        assert_eq!(recovered.snapshot.as_deref(), Some(&b"state at 150"[..]));
        assert_eq!(recovered.snapshot_lsn, 150);
        assert_eq!(recovered.records, records(151..=220));

        // Two more snapshots: the oldest one goes, the previous one stays as a fallback.
        Storage::write_snapshot(&RealFs, storage.dir(), 220, b"state at 220").unwrap();
        storage.remove_obsolete(220).unwrap();
        append_and_sync(&mut storage, 221..=300);
        Storage::write_snapshot(&RealFs, storage.dir(), 300, b"state at 300").unwrap();
        storage.remove_obsolete(300).unwrap();
        assert_eq!(
            file_names(dir.path(), "snapshot-"),
            vec![
                snapshot::snapshot_file_name(220),
                snapshot::snapshot_file_name(300)
            ]
        );
        let oldest_segment = &file_names(dir.path(), "wal-")[0];
        assert!(wal::parse_segment_file_name(oldest_segment).unwrap() <= 221);
        drop(storage);

        let (_storage, recovered) = Storage::open(small_segments(dir.path())).unwrap();
        assert_eq!(recovered.snapshot_lsn, 300);
        assert_eq!(recovered.records, vec![]);
    }

    /// The snapshot thread deletes what the appender would, the same files in all; the appender
    /// then only forgets them, and the log reads back whole.
    #[test]
    fn the_snapshot_thread_removes_what_the_appender_would() {
        let by_appender = tempfile::tempdir().unwrap();
        let by_snapshot_thread = tempfile::tempdir().unwrap();
        let mut storages = [by_appender.path(), by_snapshot_thread.path()]
            .map(|dir| Storage::open(small_segments(dir)).unwrap().0);
        for (round, lsn) in [150, 220, 300].into_iter().enumerate() {
            let from = [1, 151, 221][round];
            for (index, storage) in storages.iter_mut().enumerate() {
                append_and_sync(storage, from..=lsn);
                let state = format!("state at {lsn}");
                Storage::write_snapshot(&RealFs, storage.dir(), lsn, state.as_bytes()).unwrap();
                if index == 1 {
                    Storage::remove_obsolete_files(&RealFs, storage.dir(), lsn).unwrap();
                }
                storage.remove_obsolete(lsn).unwrap();
            }
            let [appender, snapshot_thread] =
                [by_appender.path(), by_snapshot_thread.path()].map(|dir| file_names(dir, ""));
            assert_eq!(appender, snapshot_thread, "after the snapshot at {lsn}");
            assert!(!appender.iter().any(|name| name.ends_with(OBSOLETE_SUFFIX)));
        }
        let segments = file_names(by_snapshot_thread.path(), "wal-");
        assert!(wal::parse_segment_file_name(&segments[0]).unwrap() > 151);
        assert_eq!(file_names(by_snapshot_thread.path(), "snapshot-").len(), 2);
        drop(storages);
        let (_storage, recovered) =
            Storage::open(small_segments(by_snapshot_thread.path())).unwrap();
        assert_eq!(recovered.snapshot_lsn, 300);
        assert_eq!(recovered.snapshot.as_deref(), Some(&b"state at 300"[..]));
    }

    /// A file goes whatever its length, at and around a step's edge, and one already gone is
    /// no error.
    #[test]
    fn a_file_removed_gradually_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        for len in [
            0,
            1,
            REMOVE_STEP_BYTES,
            REMOVE_STEP_BYTES + 1,
            3 * REMOVE_STEP_BYTES - 1,
        ] {
            let path = dir.path().join(format!("snapshot-{len}.snap"));
            // Sparse: the length is what matters, not the bytes.
            fs::File::create(&path).unwrap().set_len(len).unwrap();
            remove_gradually(&RealFs, &path).unwrap();
            assert_eq!(
                file_names(dir.path(), ""),
                Vec::<String>::new(),
                "length {len}"
            );
        }
        remove_gradually(&RealFs, &dir.path().join("never-there")).unwrap();
    }

    /// A deletion cut short by a crash leaves a renamed, shortened file: `open` deletes it and
    /// reads the log as before.
    #[test]
    fn leftover_obsolete_file_is_removed_on_open() {
        let dir = five_records();
        let leftover = dir.path().join("wal-00000000000000000001.log.obsolete");
        fs::write(&leftover, b"the start of a segment").unwrap();
        let (_storage, recovered) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        assert!(!leftover.exists());
        assert_eq!(recovered.records, records(1..=5));
    }

    #[test]
    fn remove_obsolete_refuses_a_snapshot_it_cannot_see() {
        let dir = tempfile::tempdir().unwrap();
        let (mut storage, _) = Storage::open(small_segments(dir.path())).unwrap();
        append_and_sync(&mut storage, 1..=100);
        assert!(matches!(
            storage.remove_obsolete(101),
            Err(StorageError::SnapshotBeyondLog {
                snapshot_lsn: 101,
                last_lsn: 100
            })
        ));
        assert!(matches!(
            storage.remove_obsolete(50),
            Err(StorageError::SnapshotMissing { lsn: 50 })
        ));
        drop(storage);
        let (_storage, recovered) = Storage::open(small_segments(dir.path())).unwrap();
        assert_eq!(recovered.records, records(1..=100));
    }

    #[test]
    fn snapshot_written_on_another_thread_while_appending() {
        let dir = tempfile::tempdir().unwrap();
        let (mut storage, _) = Storage::open(small_segments(dir.path())).unwrap();
        append_and_sync(&mut storage, 1..=100);
        let snapshot_dir = storage.dir().to_path_buf();
        std::thread::scope(|scope| {
            let writer = scope
                .spawn(|| Storage::write_snapshot(&RealFs, &snapshot_dir, 100, b"state at 100"));
            append_and_sync(&mut storage, 101..=200);
            writer.join().unwrap().unwrap();
        });
        storage.remove_obsolete(100).unwrap();
        drop(storage);

        let (_storage, recovered) = Storage::open(small_segments(dir.path())).unwrap();
        assert_eq!(recovered.snapshot_lsn, 100);
        assert_eq!(recovered.records, records(101..=200));
    }

    #[test]
    fn snapshot_ahead_of_the_durable_log_starts_a_new_segment() {
        let dir = tempfile::tempdir().unwrap();
        let (mut storage, _) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        append_and_sync(&mut storage, 1..=5);
        for lsn in 6..=10 {
            storage.append(&payload(lsn)).unwrap();
        }
        // The snapshot covers records 6..=10, which the log never made durable.
        Storage::write_snapshot(&RealFs, dir.path(), 10, b"state at 10").unwrap();
        drop(storage);

        let (mut storage, recovered) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        assert_eq!(recovered.snapshot_lsn, 10);
        assert_eq!(recovered.records, vec![]);
        assert_eq!(storage.last_lsn(), 10);
        assert_eq!(storage.append(&payload(11)).unwrap(), 11);
        storage.sync().unwrap();
        drop(storage);
        assert!(dir.path().join(wal::segment_file_name(11)).exists());

        let (_storage, recovered) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        assert_eq!(recovered.records, records(11..=11));
    }

    #[test]
    fn torn_tail_at_every_offset_of_the_last_record_is_cut() {
        let source = five_records();
        let segment_name = wal::segment_file_name(1);
        let file = fs::read(source.path().join(&segment_name)).unwrap();
        let last_offset = frame_offset(1, 5);
        // The records, then the preformatted zeros; cut within the records.
        let records_end = last_offset + FRAME_HEADER_BYTES + payload(5).len();
        assert!(file[records_end..].iter().all(|&byte| byte == 0));
        let bytes = &file[..records_end];

        for cut in last_offset..bytes.len() {
            let dir = tempfile::tempdir().unwrap();
            fs::write(dir.path().join(&segment_name), &bytes[..cut]).unwrap();
            let (mut storage, recovered) = Storage::open(StorageConfig::new(dir.path())).unwrap();
            assert_eq!(recovered.records, records(1..=4), "cut at {cut}");
            assert_eq!(recovered.truncated_tail_bytes, (cut - last_offset) as u64);
            assert_eq!(storage.append(b"after the cut").unwrap(), 5);
            storage.sync().unwrap();
            drop(storage);

            let (_storage, recovered) = Storage::open(StorageConfig::new(dir.path())).unwrap();
            assert_eq!(
                recovered.records[4],
                (5, b"after the cut".to_vec()),
                "cut at {cut}"
            );
            assert_eq!(recovered.truncated_tail_bytes, 0);
        }
    }

    #[test]
    fn bit_flip_in_the_last_record_is_cut_as_a_torn_tail() {
        let dir = five_records();
        let path = last_segment_path(dir.path());
        flip_byte(&path, frame_offset(1, 5) + FRAME_HEADER_BYTES + 3);

        let file_bytes = fs::metadata(&path).unwrap().len();
        let (mut storage, recovered) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        assert_eq!(recovered.records, records(1..=4));
        // The damaged frame and the preformatted zeros after it.
        assert_eq!(
            recovered.truncated_tail_bytes,
            file_bytes - frame_offset(1, 5) as u64
        );
        assert_eq!(storage.append(&payload(5)).unwrap(), 5);
        storage.sync().unwrap();
        drop(storage);
        let (_storage, recovered) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        assert_eq!(recovered.records, records(1..=5));
    }

    #[test]
    fn bit_flip_in_a_middle_record_refuses_to_open() {
        let dir = five_records();
        let path = last_segment_path(dir.path());
        let untouched = fs::read(&path).unwrap();
        flip_byte(&path, frame_offset(1, 3) + FRAME_HEADER_BYTES + 1);

        let (corrupt_path, offset) = expect_corrupt(StorageConfig::new(dir.path()));
        assert_eq!(corrupt_path, path);
        assert_eq!(offset, frame_offset(1, 3) as u64);
        // Nothing was truncated: the operator still has every byte to look at.
        assert_eq!(fs::read(&path).unwrap().len(), untouched.len());
    }

    #[test]
    fn damaged_length_in_a_middle_record_refuses_to_open() {
        // A huge length makes the frame "run past the end", like a torn tail; the valid records
        // after it show that it is not one.
        let dir = five_records();
        let path = last_segment_path(dir.path());
        flip_byte(&path, frame_offset(1, 2) + 3);
        let (_, offset) = expect_corrupt(StorageConfig::new(dir.path()));
        assert_eq!(offset, frame_offset(1, 2) as u64);
    }

    #[test]
    fn damage_in_a_segment_that_is_not_the_last_refuses_to_open() {
        let dir = tempfile::tempdir().unwrap();
        let (mut storage, _) = Storage::open(small_segments(dir.path())).unwrap();
        append_and_sync(&mut storage, 1..=200);
        drop(storage);
        let segments = file_names(dir.path(), "wal-");
        let first_segment = dir.path().join(&segments[0]);
        let len_bytes = fs::metadata(&first_segment).unwrap().len() as usize;
        // The last byte of the first segment belongs to its last record: a tail there would be
        // torn, but a later segment exists.
        flip_byte(&first_segment, len_bytes - 1);
        let (corrupt_path, _) = expect_corrupt(small_segments(dir.path()));
        assert_eq!(corrupt_path, first_segment);
    }

    #[test]
    fn corrupt_newest_snapshot_falls_back_to_the_older_one() {
        let dir = tempfile::tempdir().unwrap();
        let (mut storage, _) = Storage::open(small_segments(dir.path())).unwrap();
        append_and_sync(&mut storage, 1..=100);
        Storage::write_snapshot(&RealFs, dir.path(), 100, b"state at 100").unwrap();
        storage.remove_obsolete(100).unwrap();
        append_and_sync(&mut storage, 101..=200);
        Storage::write_snapshot(&RealFs, dir.path(), 200, b"state at 200").unwrap();
        storage.remove_obsolete(200).unwrap();
        append_and_sync(&mut storage, 201..=250);
        drop(storage);

        let newest = dir.path().join(snapshot::snapshot_file_name(200));
        let len_bytes = fs::metadata(&newest).unwrap().len() as usize;
        flip_byte(&newest, len_bytes - 2);
        let (_storage, recovered) = Storage::open(small_segments(dir.path())).unwrap();
        assert_eq!(recovered.snapshot.as_deref(), Some(&b"state at 100"[..]));
        assert_eq!(recovered.snapshot_lsn, 100);
        assert_eq!(recovered.records, records(101..=250));
    }

    #[test]
    fn no_usable_snapshot_and_a_deleted_log_prefix_refuses_to_open() {
        let dir = tempfile::tempdir().unwrap();
        let (mut storage, _) = Storage::open(small_segments(dir.path())).unwrap();
        for snapshot_lsn in [100, 200, 300] {
            append_and_sync(&mut storage, snapshot_lsn - 99..=snapshot_lsn);
            Storage::write_snapshot(&RealFs, dir.path(), snapshot_lsn, b"state").unwrap();
            storage.remove_obsolete(snapshot_lsn).unwrap();
        }
        drop(storage);
        for snapshot_lsn in [200, 300] {
            let path = dir.path().join(snapshot::snapshot_file_name(snapshot_lsn));
            flip_byte(&path, 12);
        }
        let (path, offset) = expect_corrupt(small_segments(dir.path()));
        assert_eq!(offset, 0);
        assert_eq!(path, dir.path().join(&file_names(dir.path(), "wal-")[0]));
    }

    #[test]
    fn segments_are_preformatted_with_zeros_and_their_records_written_over_them() {
        let dir = five_records();
        let path = last_segment_path(dir.path());
        let records_end = frame_offset(1, 6) as u64;
        assert_eq!(
            fs::metadata(&path).unwrap().len(),
            records_end + PREFORMAT_BYTES,
            "one chunk of zeros past the records"
        );
        // Reopened: the zeros are the end of the log, neither a record nor a cut.
        let (mut storage, recovered) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        assert_eq!(recovered.records, records(1..=5));
        assert_eq!(recovered.truncated_tail_bytes, 0);
        append_and_sync(&mut storage, 6..=6);
        drop(storage);
        // The next record went over the zeros, not after them.
        assert_eq!(
            fs::metadata(&path).unwrap().len(),
            records_end + PREFORMAT_BYTES
        );
        let (_storage, recovered) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        assert_eq!(recovered.records, records(1..=6));
        assert_eq!(recovered.truncated_tail_bytes, 0);
    }

    #[test]
    fn writes_that_cross_the_preformatted_end_extend_it_by_another_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let (mut storage, _) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        // 100 KiB records, synced one, three or five at a time: some writes end inside the
        // zeros, some cross their end, some start past where a whole chunk of them ended.
        let big = |lsn: u64| vec![lsn as u8 | 1; 100 << 10];
        let mut lsn = 0;
        for group in [1, 3, 5, 1, 5, 3, 5, 5, 1, 3] {
            for _ in 0..group {
                lsn += 1;
                assert_eq!(storage.append(&big(lsn)).unwrap(), lsn);
            }
            storage.sync().unwrap();
            let records_end = storage.segment_written_bytes;
            let file = fs::read(last_segment_path(dir.path())).unwrap();
            assert!(
                (file.len() as u64) > records_end
                    && (file.len() as u64) <= records_end + PREFORMAT_BYTES,
                "{} bytes of file for {records_end} of records",
                file.len()
            );
            assert!(file[records_end as usize..].iter().all(|&byte| byte == 0));
        }
        drop(storage);
        let (_storage, recovered) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        let expected: Vec<(u64, Vec<u8>)> = (1..=lsn).map(|lsn| (lsn, big(lsn))).collect();
        assert_eq!(recovered.records, expected);
        assert_eq!(recovered.truncated_tail_bytes, 0);
    }

    #[test]
    fn a_segment_that_is_not_the_last_and_ends_early_in_zeros_refuses_to_open() {
        let dir = tempfile::tempdir().unwrap();
        let (mut storage, _) = Storage::open(small_segments(dir.path())).unwrap();
        append_and_sync(&mut storage, 1..=300);
        drop(storage);
        let names = file_names(dir.path(), "wal-");
        assert!(names.len() >= 2, "{names:?}");
        // Zeros over the first segment's last record: it now seems to end one record early.
        let first = dir.path().join(&names[0]);
        let second_first_lsn = wal::parse_segment_file_name(&names[1]).unwrap();
        let mut bytes = fs::read(&first).unwrap();
        let last = frame_offset(1, second_first_lsn - 1);
        bytes[last..].iter_mut().for_each(|byte| *byte = 0);
        fs::write(&first, &bytes).unwrap();
        let (path, offset) = expect_corrupt(small_segments(dir.path()));
        assert_eq!(offset, 0);
        assert_eq!(path, dir.path().join(&names[1]));
    }

    #[test]
    fn half_written_record_followed_by_zeros_is_cut() {
        let dir = five_records();
        let path = last_segment_path(dir.path());
        let mut bytes = fs::read(&path).unwrap();
        let last_offset = frame_offset(1, 5);
        bytes.truncate(last_offset + FRAME_HEADER_BYTES + 4);
        bytes.resize(bytes.len() + 1000, 0);
        fs::write(&path, &bytes).unwrap();

        let (_storage, recovered) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        assert_eq!(recovered.records, records(1..=4));
        assert_eq!(
            recovered.truncated_tail_bytes,
            (bytes.len() - last_offset) as u64
        );
    }

    #[test]
    fn torn_header_of_the_last_segment_is_rewritten() {
        let dir = five_records();
        let torn = dir.path().join(wal::segment_file_name(6));
        fs::write(&torn, &wal::encode_segment_header(6)[..10]).unwrap();

        let (mut storage, recovered) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        assert_eq!(recovered.records, records(1..=5));
        assert_eq!(recovered.truncated_tail_bytes, 10);
        append_and_sync(&mut storage, 6..=7);
        drop(storage);
        let (_storage, recovered) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        assert_eq!(recovered.records, records(1..=7));
    }

    #[test]
    fn garbled_header_of_the_last_segment_without_records_is_rewritten() {
        // A crash while the header of a new segment was being written: half of it reached the
        // disk, the rest reads back as garbage. No record was ever written after it.
        let dir = five_records();
        let torn = dir.path().join(wal::segment_file_name(6));
        let mut bytes = wal::encode_segment_header(6).to_vec();
        bytes[16..].copy_from_slice(&[0xA5; 8]);
        bytes.extend_from_slice(&[0x5A; 40]);
        fs::write(&torn, &bytes).unwrap();

        let (mut storage, recovered) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        assert_eq!(recovered.records, records(1..=5));
        assert_eq!(recovered.truncated_tail_bytes, bytes.len() as u64);
        append_and_sync(&mut storage, 6..=7);
        drop(storage);
        let (_storage, recovered) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        assert_eq!(recovered.records, records(1..=7));
    }

    #[test]
    fn damaged_header_of_the_last_segment_with_records_refuses_to_open() {
        let dir = five_records();
        flip_byte(&last_segment_path(dir.path()), 14);
        let (_, offset) = expect_corrupt(StorageConfig::new(dir.path()));
        assert_eq!(offset, 0);
    }

    #[test]
    fn wrong_magic_in_a_segment_header_refuses_to_open() {
        let dir = five_records();
        flip_byte(&last_segment_path(dir.path()), 0);
        let (_, offset) = expect_corrupt(StorageConfig::new(dir.path()));
        assert_eq!(offset, 0);
    }

    #[test]
    fn leftover_temporary_snapshot_is_removed_on_open() {
        let dir = five_records();
        let temp = dir.path().join("snapshot-00000000000000000005.snap.tmp");
        fs::write(&temp, b"half a snapshot").unwrap();
        let (_storage, recovered) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        assert!(!temp.exists());
        assert!(recovered.snapshot.is_none());
        assert_eq!(recovered.records, records(1..=5));
    }

    #[test]
    fn segment_size_outside_its_range_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for segment_bytes_max in [SMALL_SEGMENT_BYTES - 1, *SEGMENT_BYTES_MAX_RANGE.end() + 1] {
            let config = StorageConfig {
                segment_bytes_max,
                ..StorageConfig::new(dir.path())
            };
            assert!(matches!(
                Storage::open(config),
                Err(StorageError::SegmentBytesMaxOutOfRange { .. })
            ));
        }
        Storage::open(small_segments(dir.path())).unwrap();
    }

    #[test]
    fn record_payload_limit_is_enforced_at_the_edge() {
        let dir = tempfile::tempdir().unwrap();
        let (mut storage, _) = Storage::open(StorageConfig::new(dir.path())).unwrap();
        let too_large = vec![0u8; RECORD_PAYLOAD_BYTES_MAX + 1];
        assert!(matches!(
            storage.append(&too_large),
            Err(StorageError::RecordTooLarge { len_bytes, .. }) if len_bytes == too_large.len()
        ));
        assert_eq!(storage.last_lsn(), 0);
        assert_eq!(storage.append(&too_large[1..]).unwrap(), 1);
    }
}
