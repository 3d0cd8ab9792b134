//! The simulated disk: an in-memory file system behind [`Fs`] whose every decision (which call
//! fails, how a crash tears what was not synced, which bit flips) comes from the simulation's
//! seed, so that a run replays exactly.
//!
//! What it models, pessimistically, of a Linux file system:
//! - a file has the bytes programs read (`current`, the page cache) and the bytes a power loss
//!   keeps (`durable`); a sync of the file makes them equal;
//! - a directory has the names programs see and the names a power loss keeps; changes to names
//!   (create, rename, remove, mkdir) become durable with an fsync of that directory; a power
//!   loss keeps a prefix of the changes made since (ext4 and XFS journal them in order) or, on
//!   seeds that say so, any subset of them (all POSIX promises);
//! - a power loss keeps, of each file's unsynced bytes, nothing, everything, or a torn mix:
//!   per sector the old bytes or the new ones (garbage where nothing was ever synced), and any
//!   length between the two;
//! - a process crash (the engine dies, the machine does not) keeps everything;
//! - any call may fail (EIO; ENOSPC for writes), a failed write may have written a prefix;
//! - a crash can be armed to strike in the middle of the n-th next call;
//! - a bit can flip in the durable bytes of a file (media damage).
//!
//! It must never be used outside tests: nothing of it is compiled into the engine.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::storage::{Fs, FsFile, FsLock};

/// SplitMix64: tiny, fast, and the same on every platform and in every version of this code,
/// which a seed that must replay exactly needs more than statistical quality.
#[derive(Debug, Clone)]
pub struct SimRng(u64);

impl SimRng {
    pub fn new(seed: u64) -> Self {
        SimRng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        self.next_u64() % n
    }

    /// True with probability `per_million` / 1,000,000.
    pub fn chance(&mut self, per_million: u64) -> bool {
        self.below(1_000_000) < per_million
    }
}

/// How often each kind of call fails, per million calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct FaultRates {
    pub write_per_million: u64,
    pub sync_per_million: u64,
    pub read_per_million: u64,
    /// Creating, opening, renaming, removing, listing, fsync of a directory.
    pub metadata_per_million: u64,
}

/// What the disk did, for the run's totals.
#[derive(Debug, Clone, Copy, Default)]
pub struct DiskCounts {
    pub calls: u64,
    /// Calls that returned an error: injected failures, and every call once a crash struck.
    pub failed_calls: u64,
    /// Failures injected: random ones and armed crashes that struck.
    pub faults: u64,
    pub torn_files: u64,
    pub bit_flips: u64,
}

/// A bit flipped in durable bytes, as the simulation needs to judge what recovery did.
#[derive(Debug, Clone)]
pub struct Flip {
    pub path: PathBuf,
    pub offset: u64,
    pub len_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    File(u64),
    Dir,
}

#[derive(Debug, Clone)]
enum DirChange {
    Insert(String, Node),
    Remove(String),
    Rename(String, String),
}

impl DirChange {
    fn apply(&self, entries: &mut BTreeMap<String, Node>) {
        match self {
            DirChange::Insert(name, node) => {
                entries.insert(name.clone(), *node);
            }
            DirChange::Remove(name) => {
                entries.remove(name);
            }
            DirChange::Rename(from, to) => {
                if let Some(node) = entries.remove(from) {
                    entries.insert(to.clone(), node);
                }
            }
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Dir {
    current: BTreeMap<String, Node>,
    durable: BTreeMap<String, Node>,
    /// Changes since the last fsync of the directory, in order.
    unsynced: Vec<DirChange>,
}

#[derive(Debug, Clone, Default)]
struct Inode {
    current: Vec<u8>,
    durable: Vec<u8>,
}

#[derive(Debug, Clone, Copy)]
enum CallKind {
    Write,
    Sync,
    Read,
    Metadata,
}

#[derive(Debug)]
struct Disk {
    rng: SimRng,
    rates: FaultRates,
    faults_enabled: bool,
    /// A crash strikes in the middle of the call this many calls from now.
    crash_in_calls: Option<u64>,
    /// Set once an armed crash struck: every call fails until the simulation crashes the machine.
    dead: bool,
    /// Bytes a torn sector spans.
    sector_bytes: usize,
    /// Whether a power loss keeps a prefix of a directory's unsynced changes (else any subset).
    ordered_metadata: bool,
    /// Files a program removed since the last power loss.
    removed: BTreeSet<PathBuf>,
    inodes: BTreeMap<u64, Inode>,
    next_inode: u64,
    /// Every directory, by path; the root exists from the start, durably.
    dirs: BTreeMap<PathBuf, Dir>,
    locks: BTreeSet<PathBuf>,
    counts: DiskCounts,
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file", path.display()),
    )
}

fn split(path: &Path) -> io::Result<(PathBuf, String)> {
    let parent = path.parent().ok_or_else(|| not_found(path))?;
    let name = path
        .file_name()
        .and_then(|name| name.to_str())
        .ok_or_else(|| not_found(path))?;
    Ok((parent.to_path_buf(), name.to_string()))
}

impl Disk {
    /// The fault, if any, of the call about to run: a crash armed to strike now, a disk already
    /// dead, or a random failure of this kind of call.
    fn call(&mut self, kind: CallKind) -> io::Result<()> {
        self.counts.calls += 1;
        let result = self.fault(kind);
        if result.is_err() {
            self.counts.failed_calls += 1;
        }
        result
    }

    fn fault(&mut self, kind: CallKind) -> io::Result<()> {
        if self.dead {
            return Err(io::Error::other("simulated crash: the disk is gone"));
        }
        if let Some(calls) = self.crash_in_calls.as_mut() {
            if *calls == 0 {
                self.crash_in_calls = None;
                self.dead = true;
                self.counts.faults += 1;
                return Err(io::Error::other("simulated crash in the middle of a call"));
            }
            *calls -= 1;
        }
        if !self.faults_enabled {
            return Ok(());
        }
        let rate = match kind {
            CallKind::Write => self.rates.write_per_million,
            CallKind::Sync => self.rates.sync_per_million,
            CallKind::Read => self.rates.read_per_million,
            CallKind::Metadata => self.rates.metadata_per_million,
        };
        if !self.rng.chance(rate) {
            return Ok(());
        }
        self.counts.faults += 1;
        if matches!(kind, CallKind::Write) && self.rng.below(2) == 0 {
            return Err(io::Error::from(io::ErrorKind::StorageFull));
        }
        Err(io::Error::other("simulated EIO"))
    }

    fn dir(&self, path: &Path) -> io::Result<&Dir> {
        self.dirs.get(path).ok_or_else(|| not_found(path))
    }

    fn dir_mut(&mut self, path: &Path) -> io::Result<&mut Dir> {
        self.dirs.get_mut(path).ok_or_else(|| not_found(path))
    }

    fn change(&mut self, dir: &Path, change: DirChange) -> io::Result<()> {
        let dir = self.dir_mut(dir)?;
        change.apply(&mut dir.current);
        dir.unsynced.push(change);
        Ok(())
    }

    fn lookup(&self, path: &Path) -> io::Result<u64> {
        let (parent, name) = split(path)?;
        match self.dir(&parent)?.current.get(&name) {
            Some(Node::File(inode)) => Ok(*inode),
            Some(Node::Dir) => Err(io::Error::other("is a directory")),
            None => Err(not_found(path)),
        }
    }

    fn create(&mut self, path: &Path) -> io::Result<u64> {
        let (parent, name) = split(path)?;
        let inode = self.next_inode;
        self.next_inode += 1;
        self.inodes.insert(inode, Inode::default());
        self.change(&parent, DirChange::Insert(name, Node::File(inode)))?;
        Ok(inode)
    }

    /// The machine loses power: names keep a prefix of their unsynced changes, bytes keep what
    /// the seed says of what was not synced. Afterwards what is read is what is durable.
    fn power_loss(&mut self) {
        self.removed.clear();
        for dir in self.dirs.values_mut() {
            let kept = self.rng.below(dir.unsynced.len() as u64 + 1) as usize;
            for (index, change) in dir.unsynced.iter().enumerate() {
                let keep = if self.ordered_metadata {
                    index < kept
                } else {
                    self.rng.below(2) == 0
                };
                if keep {
                    change.apply(&mut dir.durable);
                }
            }
            dir.unsynced.clear();
            dir.current = dir.durable.clone();
        }
        // A directory whose own name did not survive is gone with everything in it.
        let paths: Vec<PathBuf> = self.dirs.keys().cloned().collect();
        for path in paths {
            let reachable =
                path.ancestors()
                    .zip(path.ancestors().skip(1))
                    .all(|(child, parent)| {
                        let name = child.file_name().and_then(|name| name.to_str());
                        self.dirs.get(parent).is_some_and(|dir| {
                            name.is_some_and(|name| dir.current.get(name) == Some(&Node::Dir))
                        })
                    });
            if !reachable {
                self.dirs.remove(&path);
            }
        }
        let sector_bytes = self.sector_bytes;
        for inode in self.inodes.values_mut() {
            if inode.current != inode.durable {
                let kept = crash_bytes(&mut self.rng, &inode.durable, &inode.current, sector_bytes);
                if kept != inode.durable && kept != inode.current {
                    self.counts.torn_files += 1;
                }
                inode.durable = kept;
            }
            inode.current = inode.durable.clone();
        }
    }

    /// Flips one bit of the durable bytes of a file that `eligible` accepts, if any has bytes.
    fn flip_bit(&mut self, eligible: &dyn Fn(&str) -> bool) -> Option<Flip> {
        let mut files = Vec::new();
        for (dir_path, dir) in &self.dirs {
            for (name, node) in &dir.durable {
                if let Node::File(inode) = node {
                    let len_bytes = self.inodes[inode].durable.len();
                    if eligible(name) && len_bytes > 0 {
                        files.push((dir_path.join(name), *inode, len_bytes));
                    }
                }
            }
        }
        if files.is_empty() {
            return None;
        }
        let (path, inode, len_bytes) = files[self.rng.below(files.len() as u64) as usize].clone();
        let offset = self.rng.below(len_bytes as u64) as usize;
        let bit = 1u8 << self.rng.below(8);
        let inode = self.inodes.get_mut(&inode).expect("listed inode");
        inode.durable[offset] ^= bit;
        // The file may have been cut short since its last sync (a deletion under way).
        if let Some(byte) = inode.current.get_mut(offset) {
            *byte ^= bit;
        }
        self.counts.bit_flips += 1;
        Some(Flip {
            path,
            offset: offset as u64,
            len_bytes: len_bytes as u64,
        })
    }
}

/// What a power loss leaves of a file whose synced bytes are `durable` and whose latest bytes
/// are `current`. Draws the same number of random values whatever the bytes are, so that the
/// rest of a run does not depend on them.
fn crash_bytes(rng: &mut SimRng, durable: &[u8], current: &[u8], sector_bytes: usize) -> Vec<u8> {
    let choice = rng.below(4);
    let short = durable.len().min(current.len()) as u64;
    let long = durable.len().max(current.len()) as u64;
    let len_bytes = match rng.below(3) {
        0 => current.len(),
        1 => durable.len(),
        _ => (short + rng.below(long - short + 1)) as usize,
    };
    match choice {
        0 => return durable.to_vec(),
        1 => return current.to_vec(),
        _ => {}
    }
    let byte_at = |bytes: &[u8], index: usize| bytes.get(index).copied().unwrap_or(0);
    let mut kept = Vec::with_capacity(len_bytes);
    let mut start = 0;
    while start < len_bytes {
        let end = (start + sector_bytes).min(len_bytes);
        let pick = rng.below(8);
        let garbage = rng.next_u64();
        // A sector is written whole or not at all (drives promise that much); one that held
        // no synced byte may instead read back as garbage.
        let never_synced = start >= durable.len();
        for index in start..end {
            kept.push(match pick {
                0..=3 => byte_at(current, index),
                7 if never_synced => (garbage >> ((index % 8) * 8)) as u8,
                _ => byte_at(durable, index),
            });
        }
        start = end;
    }
    kept
}

/// The simulated file system: a handle on one shared disk.
#[derive(Debug, Clone)]
pub struct SimFs {
    disk: Arc<Mutex<Disk>>,
}

impl SimFs {
    /// An empty disk with `root` as a durable, empty directory.
    pub fn new(
        seed: u64,
        root: &Path,
        rates: FaultRates,
        sector_bytes: usize,
        ordered_metadata: bool,
    ) -> SimFs {
        let mut dirs: BTreeMap<PathBuf, Dir> = BTreeMap::new();
        for ancestor in root.ancestors() {
            dirs.entry(ancestor.to_path_buf()).or_default();
        }
        for ancestor in root.ancestors() {
            if let (Some(parent), Some(name)) = (ancestor.parent(), ancestor.file_name()) {
                let name = name.to_str().expect("UTF-8 root").to_string();
                let parent = dirs.get_mut(parent).expect("inserted above");
                parent.current.insert(name.clone(), Node::Dir);
                parent.durable.insert(name, Node::Dir);
            }
        }
        SimFs {
            disk: Arc::new(Mutex::new(Disk {
                rng: SimRng::new(seed),
                rates,
                faults_enabled: true,
                crash_in_calls: None,
                dead: false,
                sector_bytes: sector_bytes.max(1),
                ordered_metadata,
                removed: BTreeSet::new(),
                inodes: BTreeMap::new(),
                next_inode: 1,
                dirs,
                locks: BTreeSet::new(),
                counts: DiskCounts::default(),
            })),
        }
    }

    fn disk(&self) -> MutexGuard<'_, Disk> {
        // A panic under this lock is a failed run, reported as such; the disk is not used after.
        self.disk.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_faults_enabled(&self, enabled: bool) {
        self.disk().faults_enabled = enabled;
    }

    /// A crash will strike in the middle of the call `calls` calls from now.
    pub fn arm_crash(&self, calls: u64) {
        self.disk().crash_in_calls = Some(calls);
    }

    /// Whether an armed crash struck.
    pub fn is_dead(&self) -> bool {
        self.disk().dead
    }

    pub fn counts(&self) -> DiskCounts {
        self.disk().counts
    }

    /// The machine loses power (see the module docs). Disarms any armed crash.
    pub fn power_loss(&self) {
        let mut disk = self.disk();
        disk.crash_in_calls = None;
        disk.dead = false;
        disk.power_loss();
    }

    /// The process dies and the machine does not: the page cache keeps everything.
    pub fn process_crash(&self) {
        let mut disk = self.disk();
        disk.crash_in_calls = None;
        disk.dead = false;
    }

    /// Flips one bit in the durable bytes of a file whose name `eligible` accepts.
    pub fn flip_bit(&self, eligible: &dyn Fn(&str) -> bool) -> Option<Flip> {
        self.disk().flip_bit(eligible)
    }

    /// Names of the files in `dir` a power loss would keep, ascending.
    pub fn durable_names(&self, dir: &Path) -> Vec<String> {
        self.disk()
            .dirs
            .get(dir)
            .map(|dir| dir.durable.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The bytes of `path` as programs read them, if it exists; not a call (no fault).
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let disk = self.disk();
        let inode = disk.lookup(path).ok()?;
        Some(disk.inodes[&inode].current.clone())
    }

    /// Whether a program removed `path` since the last power loss.
    pub fn was_removed(&self, path: &Path) -> bool {
        self.disk().removed.contains(path)
    }

    /// Length of the file at `path` as programs read it, if it exists.
    pub fn len_bytes(&self, path: &Path) -> Option<u64> {
        let disk = self.disk();
        let inode = disk.lookup(path).ok()?;
        Some(disk.inodes[&inode].current.len() as u64)
    }

    /// A file that must not exist yet, opened for appending or for positional writes.
    fn create_new_file(&self, path: &Path, append: bool) -> io::Result<Box<dyn FsFile>> {
        let inode = {
            let mut disk = self.disk();
            disk.call(CallKind::Metadata)?;
            if disk.lookup(path).is_ok() {
                return Err(io::Error::from(io::ErrorKind::AlreadyExists));
            }
            disk.create(path)?
        };
        Ok(self.file(inode, append))
    }

    fn file(&self, inode: u64, append: bool) -> Box<dyn FsFile> {
        Box::new(SimFile {
            disk: self.disk.clone(),
            inode,
            append,
            position: 0,
        })
    }
}

impl Fs for SimFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut disk = self.disk();
        disk.call(CallKind::Metadata)?;
        let missing: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|ancestor| !disk.dirs.contains_key(*ancestor))
            .map(Path::to_path_buf)
            .collect();
        for path in missing.into_iter().rev() {
            let (parent, name) = split(&path)?;
            disk.change(&parent, DirChange::Insert(name, Node::Dir))?;
            disk.dirs.insert(path, Dir::default());
        }
        Ok(())
    }

    fn try_lock(&self, path: &Path) -> io::Result<Result<Box<dyn FsLock>, String>> {
        let mut disk = self.disk();
        disk.call(CallKind::Metadata)?;
        if disk.lookup(path).is_err() {
            disk.create(path)?;
        }
        if !disk.locks.insert(path.to_path_buf()) {
            return Ok(Err("locked by another holder".to_string()));
        }
        Ok(Ok(Box::new(SimLock {
            disk: self.disk.clone(),
            path: path.to_path_buf(),
        })))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut disk = self.disk();
        disk.call(CallKind::Metadata)?;
        Ok(disk.dir(dir)?.current.keys().cloned().collect())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut disk = self.disk();
        disk.call(CallKind::Sync)?;
        let dir = disk.dir_mut(dir)?;
        dir.durable = dir.current.clone();
        dir.unsynced.clear();
        Ok(())
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let mut disk = self.disk();
        disk.call(CallKind::Read)?;
        let inode = disk.lookup(path)?;
        Ok(disk.inodes[&inode].current.clone())
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        self.create_new_file(path, false)
    }

    fn create_new_append(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        self.create_new_file(path, true)
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        let inode = {
            let mut disk = self.disk();
            disk.call(CallKind::Metadata)?;
            disk.lookup(path)?
        };
        Ok(self.file(inode, true))
    }

    fn create_truncate(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        let inode = {
            let mut disk = self.disk();
            disk.call(CallKind::Metadata)?;
            match disk.lookup(path) {
                Ok(inode) => {
                    disk.inodes
                        .get_mut(&inode)
                        .expect("looked up")
                        .current
                        .clear();
                    inode
                }
                Err(_) => disk.create(path)?,
            }
        };
        Ok(self.file(inode, false))
    }

    fn open_write(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        let inode = {
            let mut disk = self.disk();
            disk.call(CallKind::Metadata)?;
            disk.lookup(path)?
        };
        Ok(self.file(inode, false))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut disk = self.disk();
        disk.call(CallKind::Metadata)?;
        disk.lookup(from)?;
        let (from_dir, from_name) = split(from)?;
        let (to_dir, to_name) = split(to)?;
        if from_dir != to_dir {
            return Err(io::Error::other(
                "renames across directories are not simulated",
            ));
        }
        disk.change(&from_dir, DirChange::Rename(from_name, to_name))?;
        // The engine took that name away itself, as a removal would.
        disk.removed.insert(from.to_path_buf());
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.disk();
        disk.call(CallKind::Metadata)?;
        disk.lookup(path)?;
        let (dir, name) = split(path)?;
        disk.change(&dir, DirChange::Remove(name))?;
        disk.removed.insert(path.to_path_buf());
        Ok(())
    }
}

#[derive(Debug)]
struct SimLock {
    disk: Arc<Mutex<Disk>>,
    path: PathBuf,
}

impl FsLock for SimLock {}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut disk = self.disk.lock().unwrap_or_else(|e| e.into_inner());
        disk.locks.remove(&self.path);
    }
}

#[derive(Debug)]
struct SimFile {
    disk: Arc<Mutex<Disk>>,
    inode: u64,
    append: bool,
    position: usize,
}

impl SimFile {
    fn disk(&self) -> MutexGuard<'_, Disk> {
        self.disk.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn lock(disk: &Mutex<Disk>) -> MutexGuard<'_, Disk> {
    disk.lock().unwrap_or_else(|e| e.into_inner())
}

impl FsFile for SimFile {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut disk = lock(&self.disk);
        let fault = disk.call(CallKind::Write);
        // A failed write may still have written a prefix of its bytes.
        let written = match fault {
            Ok(()) => bytes.len(),
            Err(_) => disk.rng.below(bytes.len() as u64 + 1) as usize,
        };
        let inode = disk.inodes.get_mut(&self.inode).expect("open file");
        if self.append {
            self.position = inode.current.len();
        }
        let end = self.position + written;
        if inode.current.len() < end {
            inode.current.resize(end, 0);
        }
        inode.current[self.position..end].copy_from_slice(&bytes[..written]);
        self.position = end;
        fault
    }

    fn write_all_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        assert!(
            !self.append,
            "positional write on a file opened for appending"
        );
        self.position = offset as usize;
        self.write_all(bytes)
    }

    fn set_len(&mut self, len_bytes: u64) -> io::Result<()> {
        let mut disk = self.disk();
        disk.call(CallKind::Metadata)?;
        let inode = disk.inodes.get_mut(&self.inode).expect("open file");
        inode.current.resize(len_bytes as usize, 0);
        Ok(())
    }

    fn len_bytes(&mut self) -> io::Result<u64> {
        let mut disk = self.disk();
        disk.call(CallKind::Metadata)?;
        let inode = disk.inodes.get_mut(&self.inode).expect("open file");
        Ok(inode.current.len() as u64)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        let mut disk = self.disk();
        disk.call(CallKind::Sync)?;
        let inode = disk.inodes.get_mut(&self.inode).expect("open file");
        inode.durable = inode.current.clone();
        Ok(())
    }

    fn sync_all(&mut self) -> io::Result<()> {
        self.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fs(seed: u64) -> SimFs {
        SimFs::new(
            seed,
            Path::new("/sim"),
            FaultRates::default(),
            16,
            seed.is_multiple_of(2),
        )
    }

    fn append(fs: &SimFs, path: &Path, bytes: &[u8], sync: bool) {
        let mut file = fs.open_append(path).unwrap();
        file.write_all(bytes).unwrap();
        if sync {
            file.sync_data().unwrap();
        }
    }

    #[test]
    fn synced_bytes_and_names_survive_a_power_loss() {
        for seed in 0..200 {
            let fs = fs(seed);
            let dir = Path::new("/sim/data");
            fs.create_dir_all(dir).unwrap();
            fs.sync_dir(Path::new("/sim")).unwrap();
            let path = dir.join("a");
            let mut file = fs.create_new_append(&path).unwrap();
            file.write_all(b"synced").unwrap();
            file.sync_data().unwrap();
            fs.sync_dir(dir).unwrap();
            append(&fs, &path, b" and not", false);
            fs.power_loss();
            let kept = fs.read(&path).unwrap();
            assert!(kept.starts_with(b"synced"), "seed {seed}: {kept:?}");
            assert!(kept.len() <= b"synced and not".len());
        }
    }

    #[test]
    fn unsynced_names_and_bytes_may_go_and_tear() {
        let mut lost_name = false;
        let mut torn = false;
        let mut kept_all = false;
        for seed in 0..200 {
            let fs = fs(seed);
            let dir = Path::new("/sim");
            let path = dir.join("a");
            let mut file = fs.create_new_append(&path).unwrap();
            file.write_all(&[7u8; 64]).unwrap();
            fs.power_loss();
            match fs.read(&path) {
                Err(error) => {
                    assert_eq!(error.kind(), io::ErrorKind::NotFound);
                    lost_name = true;
                }
                Ok(bytes) if bytes == [7u8; 64] => kept_all = true,
                Ok(bytes) if !bytes.is_empty() => torn = true,
                Ok(_) => {}
            }
        }
        assert!(lost_name && torn && kept_all);
    }

    #[test]
    fn a_process_crash_keeps_everything_and_an_armed_crash_kills_the_disk() {
        let fs = fs(1);
        let path = Path::new("/sim/a");
        fs.create_new_append(path).unwrap();
        append(&fs, path, b"unsynced", false);
        fs.process_crash();
        assert_eq!(fs.read(path).unwrap(), b"unsynced");
        fs.arm_crash(1);
        assert!(fs.read(path).is_ok());
        assert!(fs.read(path).is_err());
        assert!(fs.is_dead());
        assert!(fs.read(path).is_err());
        fs.power_loss();
        assert!(!fs.is_dead());
    }

    #[test]
    fn a_lock_is_exclusive_until_dropped() {
        let fs = fs(1);
        let path = Path::new("/sim/LOCK");
        let lock = fs.try_lock(path).unwrap().unwrap();
        assert!(fs.try_lock(path).unwrap().is_err());
        drop(lock);
        assert!(fs.try_lock(path).unwrap().is_ok());
    }
}
