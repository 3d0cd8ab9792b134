//! The `storage_recovery` target: arbitrary bytes as the history of an engine data directory,
//! then damage to its files, then recovery (`stockd_engine::storage::Storage::open`).
//!
//! The first part of the input drives the storage's own writer (records of chosen sizes across
//! segments, snapshots, removal of what a snapshot makes obsolete), so that every checksum is
//! right and the fuzzer reaches the recovery logic instead of stopping at the first CRC. The
//! second part damages the files the way disks and crashes do: truncation (a torn tail when it
//! hits the last segment), flipped bytes, zeroed ranges, garbage appended, a file deleted.
//!
//! Oracles: recovery never panics; when it succeeds, the snapshot it returns is one that was
//! written for that LSN and its records are the very records written, consecutive from the
//! snapshot on (damage may cost a torn tail, never change or reorder a record); with no damage
//! it returns everything; damage that only truncates the last segment (what a crash does) is
//! never refused; a record recovery leaves out is not intact anywhere in the log (dropping one
//! that is would undo an acknowledged write: only a torn tail may go); recovering twice gives the
//! same answer; and the recovered log takes a new record that the next recovery returns.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use stockd_engine::storage::{RealFs, Recovered, Storage, StorageConfig, LOCK_FILE_NAME};

/// Records written per input at most.
const RECORDS_MAX: usize = 24;
/// Damage operations per input at most.
const DAMAGES_MAX: usize = 3;

struct Input<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let byte = self.bytes.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        byte
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    fn pick<T: Copy>(&mut self, table: &[T]) -> T {
        table[usize::from(self.byte()) % table.len()]
    }
}

/// `STOCKD_FUZZ_TRACE=1` prints what was written, the damage and what recovery answered.
fn trace() -> bool {
    std::env::var_os("STOCKD_FUZZ_TRACE").is_some_and(|value| value == "1")
}

/// Where the temporary data directories go: memory when there is a tmpfs, so that fsyncs cost
/// nothing.
fn scratch_root() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// What was written: every record by LSN, every snapshot by LSN.
#[derive(Default)]
struct Written {
    records: BTreeMap<u64, Vec<u8>>,
    snapshots: BTreeMap<u64, Vec<u8>>,
}

fn storage_config(dir: &Path, segment_bytes_max: u64) -> StorageConfig {
    StorageConfig {
        fs: Arc::new(RealFs),
        dir: dir.to_path_buf(),
        segment_bytes_max,
    }
}

/// Runs one fuzz input.
pub fn run(data: &[u8]) {
    let mut input = Input { bytes: data, at: 0 };
    let root = tempfile::Builder::new()
        .prefix("stockd-fuzz-storage-")
        .tempdir_in(scratch_root())
        .expect("a scratch directory");
    let dir = root.path().join("data");
    let segment_bytes_max = input.pick(&[4_096u64, 8_192, 65_536]);
    let written = write_history(&mut input, &dir, segment_bytes_max);

    let segments_written = read_segments(&dir);
    let damages = input.byte() as usize % (DAMAGES_MAX + 1);
    let mut torn_tail_only = true;
    for _ in 0..damages {
        torn_tail_only &= damage(&mut input, &dir);
    }

    let segments_on_disk = read_segments(&dir);
    let opened = Storage::open(storage_config(&dir, segment_bytes_max));
    if trace() {
        let records: Vec<(u64, usize)> = written
            .records
            .iter()
            .map(|(lsn, payload)| (*lsn, payload.len()))
            .collect();
        let snapshots: Vec<u64> = written.snapshots.keys().copied().collect();
        let files: Vec<(String, usize)> = segments_on_disk
            .iter()
            .map(|(path, bytes)| (path.display().to_string(), bytes.len()))
            .collect();
        eprintln!("records (lsn, bytes): {records:?}\nsnapshots: {snapshots:?}");
        eprintln!("segments after {damages} damages: {files:?}");
        match &opened {
            Ok((_, recovered)) => eprintln!(
                "recovered: snapshot {} and lsns {:?}, {} tail bytes cut",
                recovered.snapshot_lsn,
                recovered
                    .records
                    .iter()
                    .map(|(lsn, _)| *lsn)
                    .collect::<Vec<_>>(),
                recovered.truncated_tail_bytes
            ),
            Err(error) => eprintln!("refused: {error}"),
        }
    }
    let (storage, recovered) = match opened {
        Ok(opened) => opened,
        Err(error) => {
            assert!(
                damages > 0,
                "recovery refused an undamaged directory: {error}"
            );
            assert!(
                !torn_tail_only,
                "recovery refused a log whose last segment was only truncated: {error}"
            );
            return;
        }
    };
    check_recovered(&recovered, &written);
    check_nothing_intact_was_dropped(&recovered, &written, &segments_written, &segments_on_disk);
    if damages == 0 {
        let newest_snapshot = written.snapshots.keys().next_back().copied().unwrap_or(0);
        assert_eq!(
            recovered.snapshot_lsn, newest_snapshot,
            "the newest snapshot"
        );
        let last = written.records.keys().next_back().copied().unwrap_or(0);
        let recovered_last = recovered
            .records
            .last()
            .map_or(recovered.snapshot_lsn, |r| r.0);
        assert_eq!(
            recovered_last,
            last.max(newest_snapshot),
            "records were lost"
        );
        assert_eq!(recovered.truncated_tail_bytes, 0, "a tail was cut off");
    }
    let last_lsn = storage.last_lsn();
    drop(storage);

    // Recovery again: nothing left to cut, the same answer.
    let (mut storage, again) = Storage::open(storage_config(&dir, segment_bytes_max))
        .unwrap_or_else(|error| panic!("a recovered directory fails to open again: {error}"));
    assert_eq!(
        again.truncated_tail_bytes, 0,
        "the second recovery cut more"
    );
    assert_eq!(again.snapshot, recovered.snapshot);
    assert_eq!(again.records, recovered.records);

    // The log goes on from where recovery left it.
    let payload = b"after recovery".to_vec();
    let lsn = storage.append(&payload).expect("append after recovery");
    assert_eq!(lsn, last_lsn + 1, "the next lsn");
    storage.sync().expect("sync after recovery");
    drop(storage);
    let (_, last) = Storage::open(storage_config(&dir, segment_bytes_max))
        .unwrap_or_else(|error| panic!("the log with one more record fails to open: {error}"));
    assert_eq!(last.records.last(), Some(&(lsn, payload)));
    assert_eq!(
        &last.records[..last.records.len() - 1],
        &recovered.records[..]
    );
}

/// Writes records (and snapshots) through the storage itself; everything ends up synced.
fn write_history(input: &mut Input, dir: &Path, segment_bytes_max: u64) -> Written {
    let mut written = Written::default();
    let (mut storage, _) =
        Storage::open(storage_config(dir, segment_bytes_max)).expect("a fresh directory opens");
    let records = usize::from(input.byte()) % (RECORDS_MAX + 1);
    for _ in 0..records {
        let len = input.pick(&[0usize, 1, 3, 8, 16, 64, 300, 1_500, 4_000]);
        let fill = input.byte();
        let mut payload = vec![fill; len];
        for (index, byte) in payload.iter_mut().take(4).enumerate() {
            *byte = fill.wrapping_add(index as u8);
        }
        let lsn = storage.append(&payload).expect("append");
        written.records.insert(lsn, payload);
        let control = input.byte();
        if control.is_multiple_of(4) {
            storage.sync().expect("sync");
        }
        if control % 8 == 1 {
            storage.sync().expect("sync");
            let snapshot = format!("snapshot at {lsn} ({control})").into_bytes();
            Storage::write_snapshot(&RealFs, dir, lsn, &snapshot).expect("write a snapshot");
            written.snapshots.insert(lsn, snapshot);
            if control % 16 == 9 {
                storage
                    .remove_obsolete(lsn)
                    .expect("remove what the snapshot covers");
            }
        }
    }
    storage.sync().expect("sync");
    written
}

/// One damage to one file of the directory. Returns whether it only truncated the last segment
/// (what a crash during an append does).
fn damage(input: &mut Input, dir: &Path) -> bool {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .expect("list the data directory")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.file_name().is_some_and(|name| name != LOCK_FILE_NAME))
        .collect();
    files.sort();
    let last_segment = files
        .iter()
        .rfind(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("wal-"))
        })
        .cloned();
    let kind = input.byte() % 6;
    // Kind 5 truncates the last segment; the others pick any file.
    let path = match (kind, &last_segment) {
        (5, Some(last)) => last.clone(),
        _ if files.is_empty() => return true,
        _ => files[usize::from(input.byte()) % files.len()].clone(),
    };
    let mut bytes = fs::read(&path).expect("read a file to damage");
    if trace() {
        eprintln!("damage {kind} to {}", path.display());
    }
    let len = bytes.len();
    let at = if len == 0 {
        0
    } else {
        usize::from(input.u16()) % len
    };
    match kind {
        0 | 5 => bytes.truncate(at),
        1 if len > 0 => bytes[at] ^= input.byte() | 1,
        2 => {
            let end = (at + usize::from(input.byte())).min(len);
            bytes[at..end].fill(0);
        }
        3 => {
            let count = usize::from(input.byte() % 64);
            bytes.extend((0..count).map(|_| input.byte()));
        }
        4 => {
            fs::remove_file(&path).expect("delete a file");
            return false;
        }
        _ => {}
    }
    fs::write(&path, &bytes).expect("write the damaged file");
    matches!(kind, 0 | 5) && Some(&path) == last_segment.as_ref()
}

/// What recovery returned is what was written: a snapshot of that LSN, then the records after
/// it, consecutive and unchanged.
fn check_recovered(recovered: &Recovered, written: &Written) {
    match &recovered.snapshot {
        Some(payload) => assert_eq!(
            written
                .snapshots
                .get(&recovered.snapshot_lsn)
                .map(|bytes| &bytes[..]),
            Some(&payload[..]),
            "recovery returned a snapshot that was never written at lsn {}",
            recovered.snapshot_lsn
        ),
        None => assert_eq!(
            recovered.snapshot_lsn, 0,
            "a snapshot lsn without a snapshot"
        ),
    }
    let expected_lsns = recovered.snapshot_lsn + 1..;
    for (expected_lsn, (lsn, payload)) in expected_lsns.zip(&recovered.records) {
        assert_eq!(
            *lsn, expected_lsn,
            "records are not consecutive from the snapshot"
        );
        assert_eq!(
            written.records.get(lsn),
            Some(payload),
            "record {lsn} differs from what was written"
        );
    }
}

/// The bytes of every log segment, as recovery is about to find them.
fn read_segments(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut segments: Vec<(PathBuf, Vec<u8>)> = fs::read_dir(dir)
        .expect("list the data directory")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("wal-") && name.ends_with(".log"))
        })
        .map(|path| {
            let bytes = fs::read(&path).expect("read a segment");
            (path, bytes)
        })
        .collect();
    segments.sort();
    segments
}

/// A record as the log frames it, from the layout documented in the engine's `wal.rs`:
/// `[u32 LE payload_len][u32 LE crc32c(lsn u64 LE ++ payload)][u64 LE lsn][payload]`.
fn frame(lsn: u64, payload: &[u8]) -> Vec<u8> {
    let crc = crc32c::crc32c_append(crc32c::crc32c(&lsn.to_le_bytes()), payload);
    let mut frame = Vec::with_capacity(16 + payload.len());
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(&crc.to_le_bytes());
    frame.extend_from_slice(&lsn.to_le_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// Records after the recovered end were dropped; each must be damaged or gone, never still
/// intact where it was written: an intact frame after the damage means the damage is not a torn
/// tail. (Only frames in place count: damage may write bytes that happen to form a frame, far
/// from where any record was.)
fn check_nothing_intact_was_dropped(
    recovered: &Recovered,
    written: &Written,
    before_damage: &[(PathBuf, Vec<u8>)],
    after_damage: &[(PathBuf, Vec<u8>)],
) {
    let end = recovered
        .records
        .last()
        .map_or(recovered.snapshot_lsn, |(lsn, _)| *lsn);
    for (lsn, payload) in written.records.range(end + 1..) {
        let frame = frame(*lsn, payload);
        for (path, bytes) in before_damage {
            let Some(at) = bytes
                .windows(frame.len())
                .position(|window| window == frame.as_slice())
            else {
                continue;
            };
            let still_there = after_damage.iter().any(|(damaged_path, damaged)| {
                damaged_path == path && damaged.get(at..at + frame.len()) == Some(frame.as_slice())
            });
            assert!(
                !still_there,
                "recovery dropped record {lsn}, whose frame is intact at byte {at} of {}",
                path.display()
            );
        }
    }
}
