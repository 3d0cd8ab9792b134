//! The one launcher of every child process the suites start: `redis-server` (alone or as a Redis
//! Cluster's node) and `stockd serve`. [`Process`] spawns a command with its output appended to a
//! log file, says whether it is still running, reports the log since its last start for a
//! failure message, and SIGKILLs it on drop, so no child outlives its test.
//!
//! Readiness is the caller's probe (PING, `GET /healthz`): between probes the caller asks
//! [`Process::not_ready`], which fails once the process has exited or [`READY_TIMEOUT`] has
//! passed. It never picks ports or arguments; the servers' modules do.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a fresh process may take to answer its readiness probe.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Start attempts when the chosen port turns out to be taken (another test grabbed it between our
/// probe and the server's bind).
pub const START_ATTEMPTS: usize = 5;
/// How much of a log a failure message shows.
const LOG_SHOWN_BYTES: u64 = 16 * 1024;

/// One child process (restartable: [`Process::spawn`] again after [`Process::kill`]), its output
/// in one log file across restarts. SIGKILL on drop.
pub struct Process {
    /// The program's name, for messages.
    name: &'static str,
    log_path: PathBuf,
    /// A mutex, not `&mut self`: a Redis Cluster's nodes are shared by the servers using them, and
    /// a test kills and restarts a node through a shared reference.
    child: Mutex<Option<Started>>,
}

struct Started {
    child: Child,
    at: Instant,
    /// Where this start's output begins in the log.
    log_start: u64,
}

impl Process {
    /// A process not started yet, logging to `log_path`.
    pub fn new(name: &'static str, log_path: PathBuf) -> Process {
        Process {
            name,
            log_path,
            child: Mutex::new(None),
        }
    }

    /// Spawns `command` (stdin null, stdout and stderr appended to the log). Panics when a child
    /// is still held: [`Process::kill`] first.
    pub fn spawn(&self, mut command: Command) -> Result<(), String> {
        let mut slot = self.child.lock().expect("process lock");
        assert!(slot.is_none(), "{} already running", self.name);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .expect("open the process log");
        let log_start = log.metadata().map(|meta| meta.len()).unwrap_or(0);
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().expect("clone log handle")))
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|error| format!("spawn {}: {error}", self.name))?;
        *slot = Some(Started {
            child,
            at: Instant::now(),
            log_start,
        });
        Ok(())
    }

    /// Whether the process is running (started, not killed, not exited).
    pub fn is_running(&self) -> bool {
        match self.child.lock().expect("process lock").as_mut() {
            Some(started) => started
                .child
                .try_wait()
                .map(|s| s.is_none())
                .unwrap_or(false),
            None => false,
        }
    }

    /// The process id while a child is held (running or exited, not yet reaped).
    pub fn pid(&self) -> Option<u32> {
        self.child
            .lock()
            .expect("process lock")
            .as_ref()
            .map(|started| started.child.id())
    }

    /// SIGKILL and reap; a no-op when already stopped.
    pub fn kill(&self) {
        if let Some(mut started) = self.take() {
            let _ = started.kill();
            let _ = started.wait();
        }
    }

    /// The child, handed over (for a graceful stop the caller signals and waits for itself).
    pub fn take(&self) -> Option<Child> {
        self.child
            .lock()
            .expect("process lock")
            .take()
            .map(|started| started.child)
    }

    /// Between readiness probes: an error, with the log of this start, once the process has
    /// exited (it is reaped) or [`READY_TIMEOUT`] has passed since it was spawned (it is killed).
    pub fn not_ready(&self) -> Result<(), String> {
        let mut slot = self.child.lock().expect("process lock");
        let started = slot.as_mut().expect("not_ready on a process not started");
        let log_start = started.log_start;
        if let Ok(Some(status)) = started.child.try_wait() {
            *slot = None;
            return Err(format!(
                "{} exited before ready ({status}):\n{}",
                self.name,
                self.log_from(log_start)
            ));
        }
        if started.at.elapsed() > READY_TIMEOUT {
            drop(slot);
            self.kill();
            return Err(format!(
                "{} not ready within {READY_TIMEOUT:?}:\n{}",
                self.name,
                self.log_from(log_start)
            ));
        }
        Ok(())
    }

    /// The last `max_bytes` of the log, framed for a failure message.
    pub fn log_tail(&self, max_bytes: u64) -> String {
        let len = std::fs::metadata(&self.log_path)
            .map(|meta| meta.len())
            .unwrap_or(0);
        self.log_from(len.saturating_sub(max_bytes))
    }

    /// The log from byte `offset`, at most its last 16 KiB, framed for a failure message.
    fn log_from(&self, offset: u64) -> String {
        format!(
            "---- {} log ----\n{}\n---- end of log ----",
            self.name,
            read_from(&self.log_path, offset, LOG_SHOWN_BYTES)
        )
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The text of `path` from byte `offset`, cut to its last `max_bytes` (on a char boundary).
fn read_from(path: &Path, offset: u64, max_bytes: u64) -> String {
    let mut text = String::new();
    if let Ok(mut file) = File::open(path) {
        let _ = file.seek(SeekFrom::Start(offset));
        let mut bytes = Vec::new();
        let _ = file.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    let max = max_bytes as usize;
    if text.len() > max {
        let cut = text.len() - max;
        let cut = (cut..text.len())
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        text = format!("...{}", &text[cut..]);
    }
    text
}

/// Whether process `pid` holds the socket listening on `port` (read from `/proc/net/tcp`,
/// `/proc/net/tcp6` and the process's descriptors). Two tests may be handed the same free
/// port: the second server then fails to bind and exits, but until it does, the first one
/// answers its readiness probes. A server is ready only once it is seen listening itself.
pub fn listens_on(pid: u32, port: u16) -> bool {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let listening_here = local
                .rsplit_once(':')
                .and_then(|(_, hex)| u16::from_str_radix(hex, 16).ok())
                == Some(port)
                && *state == "0A";
            if listening_here {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| {
            inodes
                .iter()
                .any(|inode| target.as_os_str() == inode.as_str())
        })
    })
}

/// A port that was free a moment ago: bind port 0, read it, drop the listener.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}
