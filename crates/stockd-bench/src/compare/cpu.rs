//! CPU time around a load, per process: the HTTP server's (`/proc/PID/stat`, all its threads),
//! its Redis's (`INFO cpu`), the load generator's (this process) and the whole machine's
//! (`/proc/stat`). What the machine's processes spent beyond those three is "other", which is
//! how a run disturbed by another process (a build) is recognised; the kernel's interrupt and
//! softirq time (on loopback, much of it is the network work of the run's own requests and
//! answers, charged to no process) is counted apart. Linux only; elsewhere a sample fails with
//! the reason and the comparison runs without CPU figures.

use serde::Serialize;
use tokio::time::Instant;

/// `/proc` counts CPU time in USER_HZ ticks, 100 a second on every architecture Linux exposes
/// it on (the kernel converts from its own HZ).
const TICKS_PER_S: f64 = 100.0;

/// CPU seconds used so far, read at one instant.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    at: Instant,
    server_s: f64,
    redis_s: Option<f64>,
    generator_s: f64,
    machine: Machine,
}

/// CPU per request of one run, in microseconds, and the rest of the machine's load in cores.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct CpuPerRequest {
    /// The HTTP server process, all its threads (stockd's writer included).
    pub server_us: f64,
    /// Its Redis (`None`: the embedded engine has none).
    pub redis_us: Option<f64>,
    /// Server and Redis together: what the stack costs per request.
    pub stack_us: f64,
    /// `stockd bench` itself.
    pub load_generator_us: f64,
    /// The kernel's interrupts and softirqs, machine-wide (mostly the loopback traffic of the
    /// run: HTTP, and Redis's round trips), charged to no process.
    pub interrupts_us: f64,
    /// Cores the machine's other processes used meanwhile, on average: near 0 in a quiet run.
    pub other_cores: f64,
}

impl Sample {
    /// Reads the counters now. `redis` is a connection to the stack's Redis, if it has one.
    pub async fn take(
        server_pid: u32,
        redis: Option<&mut redis::aio::MultiplexedConnection>,
    ) -> Result<Sample, String> {
        let redis_s = match redis {
            Some(connection) => Some(redis_cpu_s(connection).await?),
            None => None,
        };
        Ok(Sample {
            at: Instant::now(),
            server_s: process_cpu_s(&format!("/proc/{server_pid}/stat"))?,
            redis_s,
            generator_s: process_cpu_s("/proc/self/stat")?,
            machine: machine_cpu()?,
        })
    }

    /// What was used from `self` to `later`, over `requests` requests.
    pub fn per_request(&self, later: &Sample, requests: u64) -> CpuPerRequest {
        let per = |seconds: f64| seconds * 1e6 / requests.max(1) as f64;
        let server_s = later.server_s - self.server_s;
        let redis_s = later.redis_s.zip(self.redis_s).map(|(b, a)| b - a);
        let generator_s = later.generator_s - self.generator_s;
        let ours_s = server_s + redis_s.unwrap_or(0.0) + generator_s;
        let wall_s = (later.at - self.at).as_secs_f64().max(1e-9);
        CpuPerRequest {
            server_us: per(server_s),
            redis_us: redis_s.map(per),
            stack_us: per(server_s + redis_s.unwrap_or(0.0)),
            load_generator_us: per(generator_s),
            interrupts_us: per(later.machine.interrupts_s - self.machine.interrupts_s),
            other_cores: ((later.machine.processes_s - self.machine.processes_s - ours_s) / wall_s)
                .max(0.0),
        }
    }
}

/// utime + stime of the process whose `stat` file is at `path`, in seconds.
fn process_cpu_s(path: &str) -> Result<f64, String> {
    let text =
        std::fs::read_to_string(path).map_err(|error| format!("cannot read {path}: {error}"))?;
    parse_process_stat(&text).ok_or_else(|| format!("{path}: not a stat line: {text:?}"))
}

/// The command name (field 2) is in parentheses and may hold spaces and `)`: the fields are
/// counted from after its last `)`, where field 3 (the state) starts; utime and stime are
/// fields 14 and 15.
fn parse_process_stat(text: &str) -> Option<f64> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / TICKS_PER_S)
}

/// The machine's CPU seconds from `/proc/stat`'s `cpu` line, all cores: what processes ran
/// (user, nice, system) and what interrupts and softirqs took (irq, softirq). Idle, iowait and
/// steal (time the hypervisor gave to someone else) are neither.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Machine {
    processes_s: f64,
    interrupts_s: f64,
}

fn machine_cpu() -> Result<Machine, String> {
    let text = std::fs::read_to_string("/proc/stat")
        .map_err(|error| format!("cannot read /proc/stat: {error}"))?;
    parse_machine_stat(&text).ok_or_else(|| "/proc/stat has no cpu line".to_string())
}

fn parse_machine_stat(text: &str) -> Option<Machine> {
    let line = text.lines().find(|line| line.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|field| field.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal (guest time is inside user already).
    let [user, nice, system, _idle, _iowait, irq, softirq, ..] = fields[..] else {
        return None;
    };
    Some(Machine {
        processes_s: (user + nice + system) as f64 / TICKS_PER_S,
        interrupts_s: (irq + softirq) as f64 / TICKS_PER_S,
    })
}

/// Redis's own CPU seconds (`used_cpu_sys + used_cpu_user`: every thread of redis-server, not
/// its children).
async fn redis_cpu_s(connection: &mut redis::aio::MultiplexedConnection) -> Result<f64, String> {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(connection)
        .await
        .map_err(|error| format!("INFO cpu: {error}"))?;
    parse_redis_cpu(&info).ok_or_else(|| format!("INFO cpu without used_cpu_*: {info:?}"))
}

fn parse_redis_cpu(info: &str) -> Option<f64> {
    let field = |name: &str| -> Option<f64> {
        info.lines()
            .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))?
            .trim()
            .parse()
            .ok()
    };
    Some(field("used_cpu_sys")? + field("used_cpu_user")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_stat_line_gives_user_plus_system_time() {
        // A command name with a space and a parenthesis in it.
        let line = "4242 (stockd (x) y) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 130 0 0 20 0 \
                    3 0 98765 123456789 4567 18446744073709551615";
        assert_eq!(parse_process_stat(line), Some(3.8));
        assert_eq!(parse_process_stat("4242 (stockd) S 1"), None);
    }

    #[test]
    fn the_machine_line_splits_processes_from_interrupts_and_leaves_out_idle_and_steal() {
        let text = "cpu  100 5 50 9000 40 3 7 500 0 0\ncpu0 50 2 25 4500 20 1 3 250 0 0\n";
        // user 100 + nice 5 + system 50 ticks; irq 3 + softirq 7 ticks.
        let machine = parse_machine_stat(text).unwrap();
        assert_eq!(machine.processes_s, 1.55);
        assert_eq!(machine.interrupts_s, 0.1);
        assert_eq!(parse_machine_stat("cpu  1 2 3\n"), None);
    }

    #[test]
    fn redis_cpu_is_system_plus_user_of_the_server_alone() {
        let info = "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:2.500000\r\n\
                    used_cpu_sys_children:9.0\r\nused_cpu_user_children:9.0\r\n";
        assert_eq!(parse_redis_cpu(info), Some(3.75));
    }

    #[test]
    fn this_process_and_the_machine_can_be_read() {
        let own = process_cpu_s("/proc/self/stat").unwrap();
        let machine = machine_cpu().unwrap();
        assert!(
            own >= 0.0 && machine.processes_s >= own,
            "{own} {machine:?}"
        );
    }
}
