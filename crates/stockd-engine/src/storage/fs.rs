//! The file system as storage sees it: the dozen operations the log and the snapshots use, behind
//! one small trait, so that the same storage code runs on the real disk in production and on the
//! simulated disk of the deterministic simulation (`crate::sim`, test builds only), which can
//! tear writes, lose what was not fsync'd, flip bits and fail any call.
//!
//! [`RealFs`] is std::fs, call for call what storage did before the trait existed. This module
//! must never add policy (retries, buffering, caching): every call is one system call's worth
//! of work, so that where the fsyncs are stays visible in `mod.rs` and `snapshot.rs`.

use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// A file opened for writing. Files opened in append mode write at their end; the others write
/// from offset 0 onwards.
pub trait FsFile: Send + Debug {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Writes `bytes` at `offset`, extending the file (with zeros up to `offset`) if it is
    /// shorter. Files opened in append mode must not use it.
    fn write_all_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()>;
    fn set_len(&mut self, len_bytes: u64) -> io::Result<()>;
    /// The file's length in bytes.
    fn len_bytes(&mut self) -> io::Result<u64>;
    /// `fdatasync`: the file's bytes and length survive a crash once this returns `Ok`.
    fn sync_data(&mut self) -> io::Result<()>;
    /// `fsync`: as `sync_data`, plus the rest of the file's metadata.
    fn sync_all(&mut self) -> io::Result<()>;
}

/// A whole file's bytes, as [`Fs::read_whole`] hands them: read into memory, or mapped.
pub enum FileBytes {
    Owned(Vec<u8>),
    /// The file's pages in the page cache, mapped read-only: no copy, and no fresh memory for
    /// the kernel to zero (a gigabyte of snapshot cost two seconds of that here).
    Mapped(memmap2::Mmap),
}

impl std::ops::Deref for FileBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            FileBytes::Owned(bytes) => bytes,
            FileBytes::Mapped(map) => map,
        }
    }
}

impl Debug for FileBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = match self {
            FileBytes::Owned(_) => "Owned",
            FileBytes::Mapped(_) => "Mapped",
        };
        write!(f, "FileBytes::{how}({} bytes)", self.len())
    }
}

/// An advisory lock, held until dropped.
pub trait FsLock: Send + Sync + Debug {}

/// The file system operations storage uses. Names in a directory are durable only after
/// [`Fs::sync_dir`] on it; bytes of a file only after a sync of the file.
pub trait Fs: Send + Sync + Debug + 'static {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Creates `path` if missing and takes an exclusive advisory lock on it without waiting:
    /// `Ok(Err(reason))` when someone else holds it.
    fn try_lock(&self, path: &Path) -> io::Result<Result<Box<dyn FsLock>, String>>;
    /// Names of the entries of `dir`; names that are not UTF-8 are left out (none is ours).
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// fsync of a directory: creations, renames and deletions in it survive a crash.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// The whole of a file that nobody changes while the bytes are held (a snapshot), to read
    /// once: `read`'s bytes unless the file system can map them.
    fn read_whole(&self, path: &Path) -> io::Result<FileBytes> {
        self.read(path).map(FileBytes::Owned)
    }
    /// Creates a file that must not exist yet, for writing at chosen offsets.
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn FsFile>>;
    /// Creates a file that must not exist yet, for appending.
    fn create_new_append(&self, path: &Path) -> io::Result<Box<dyn FsFile>>;
    /// Opens an existing file for appending.
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn FsFile>>;
    /// Creates a file, or empties an existing one, for writing from the start.
    fn create_truncate(&self, path: &Path) -> io::Result<Box<dyn FsFile>>;
    /// Opens an existing file for writing from the start (or for `set_len`).
    fn open_write(&self, path: &Path) -> io::Result<Box<dyn FsFile>>;
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
}

/// The real file system (std::fs).
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

impl FsFile for File {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        Write::write_all(self, bytes)
    }
    /// One `pwrite` (a seek and a write would be two syscalls, once per group commit).
    fn write_all_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, bytes, offset)
    }
    fn set_len(&mut self, len_bytes: u64) -> io::Result<()> {
        File::set_len(self, len_bytes)
    }
    fn len_bytes(&mut self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }
    fn sync_data(&mut self) -> io::Result<()> {
        File::sync_data(self)
    }
    fn sync_all(&mut self) -> io::Result<()> {
        File::sync_all(self)
    }
}

impl FsLock for File {}

impl Fs for RealFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn try_lock(&self, path: &Path) -> io::Result<Result<Box<dyn FsLock>, String>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        Ok(match file.try_lock() {
            Ok(()) => Ok(Box::new(file)),
            Err(error) => Err(error.to_string()),
        })
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }

    fn read_whole(&self, path: &Path) -> io::Result<FileBytes> {
        let file = File::open(path)?;
        // SAFETY: the map is read-only, and its bytes must not change while it lives. It is
        // made only for snapshot files, which stockd writes whole under a temporary name,
        // renames once synced, and never writes again; the directory's lock keeps other stockd
        // processes out. A snapshot deleted meanwhile stays readable through the map. Only
        // someone truncating the file by hand could break it (with SIGBUS, not a misread).
        let map = unsafe { memmap2::Mmap::map(&file)? };
        // Read once from start to end: a hint for the kernel's read-ahead, nothing more.
        let _ = map.advise(memmap2::Advice::Sequential);
        Ok(FileBytes::Mapped(map))
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        let file = OpenOptions::new().write(true).create_new(true).open(path)?;
        Ok(Box::new(file))
    }

    fn create_new_append(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(path)?;
        Ok(Box::new(file))
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        Ok(Box::new(OpenOptions::new().append(true).open(path)?))
    }

    fn create_truncate(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        Ok(Box::new(File::create(path)?))
    }

    fn open_write(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        Ok(Box::new(OpenOptions::new().write(true).open(path)?))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
}

/// Test builds: the real file system with a slow disk's `fdatasync` and `fsync`, each taking at
/// least `sync_takes`, for tests that time the log's syncs.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct SlowSyncFs {
    pub(crate) sync_takes: std::time::Duration,
}

#[cfg(test)]
#[derive(Debug)]
struct SlowSyncFile {
    file: Box<dyn FsFile>,
    sync_takes: std::time::Duration,
}

#[cfg(test)]
impl FsFile for SlowSyncFile {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes)
    }
    fn write_all_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all_at(offset, bytes)
    }
    fn set_len(&mut self, len_bytes: u64) -> io::Result<()> {
        self.file.set_len(len_bytes)
    }
    fn len_bytes(&mut self) -> io::Result<u64> {
        self.file.len_bytes()
    }
    fn sync_data(&mut self) -> io::Result<()> {
        std::thread::sleep(self.sync_takes);
        self.file.sync_data()
    }
    fn sync_all(&mut self) -> io::Result<()> {
        std::thread::sleep(self.sync_takes);
        self.file.sync_all()
    }
}

#[cfg(test)]
impl SlowSyncFs {
    fn slow(&self, file: io::Result<Box<dyn FsFile>>) -> io::Result<Box<dyn FsFile>> {
        let sync_takes = self.sync_takes;
        file.map(|file| Box::new(SlowSyncFile { file, sync_takes }) as Box<dyn FsFile>)
    }
}

#[cfg(test)]
impl Fs for SlowSyncFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        RealFs.create_dir_all(dir)
    }
    fn try_lock(&self, path: &Path) -> io::Result<Result<Box<dyn FsLock>, String>> {
        RealFs.try_lock(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        RealFs.list(dir)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        RealFs.sync_dir(dir)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        RealFs.read(path)
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        self.slow(RealFs.create_new(path))
    }
    fn create_new_append(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        self.slow(RealFs.create_new_append(path))
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        self.slow(RealFs.open_append(path))
    }
    fn create_truncate(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        self.slow(RealFs.create_truncate(path))
    }
    fn open_write(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        self.slow(RealFs.open_write(path))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        RealFs.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        RealFs.remove_file(path)
    }
}
