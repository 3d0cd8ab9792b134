//! The `stockd` binary: `stockd serve` runs the service; the other subcommands are an admin and
//! client command line over its HTTP API.

mod bench;
mod cli;
mod connection;
mod help;
mod logging;
mod serve;
mod settings;
mod signals;
mod sink;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// mimalloc instead of the system allocator: the request path makes many small, short-lived
/// allocations, and glibc's free-list consolidation showed up as a quarter of the profile.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc.h (v3, the version Cargo.lock pins): how many
/// milliseconds freed memory stays with the process before mimalloc gives it back to the OS
/// (1,000 by default; -1: never).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// The purge delay [`keep_freed_memory`] sets: a year, which is never for a running server,
/// rather than -1 (never at all), under which mimalloc does not even note what was freed and
/// [`give_back_freed_memory`] would find nothing to give back.
const KEEP_FREED_MS: std::ffi::c_long = 365 * 24 * 3_600 * 1_000;

/// Keeps the memory the process frees rather than giving it back to the OS a second later,
/// unless the operator set MIMALLOC_PURGE_DELAY. Under load, memory given back was soon needed
/// again and came back through page faults, each zeroing a fresh huge page, about nine in ten
/// of the server's page faults, on the writer thread too (docs/benchmarks.md, "What was
/// tried"). The retained state only grows until retention trims it, so what this keeps is
/// the transient buffers' high-water mark (docs/operations.md).
fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one of mimalloc's options, a plain integer it reads when it decides
        // whether to purge; called first thing in main, before any other thread exists.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, KEEP_FREED_MS) };
    }
}

/// Gives the OS back the memory freed so far: once, on the thread where the embedded engine
/// recovered, whose transient buffers (the snapshot file's bytes, the decoding's and the index
/// build's scratch) are not needed again and would otherwise stay with the process for good.
/// mimalloc collects the calling thread's heap and purges what every thread has freed to its
/// arenas.
pub(crate) fn give_back_freed_memory() {
    // SAFETY: asks mimalloc to collect and purge what is free now; thread-safe, any time.
    unsafe { libmimalloc_sys::mi_collect(true) };
}

#[derive(Debug, Parser)]
#[command(
    name = "stockd",
    version,
    about = "Oversell-proof stock reservation service",
    after_help = "Exit codes of the client commands (pool, hold, lock, batch, events): 0 done, \
                  2 bad usage (nothing was sent), 3 no usable answer, 4 refused by the server \
                  (4xx), 5 server error (5xx). See docs/cli.md."
)]
struct Cli {
    /// Print the server's JSON answer exactly as received (the client commands: pool, hold,
    /// lock, batch, events; the flag may also come anywhere after the command).
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the stockd server (embedded engine by default, or --backend redis://...).
    Serve(serve::ServeArgs),
    /// Operate the Redis dataset behind a fleet of servers.
    Redis {
        #[command(subcommand)]
        command: serve::RedisCommand,
    },
    /// Create, read, restock, list and delete pools over HTTP.
    Pool {
        #[command(flatten)]
        client: cli::ClientArgs,
        #[command(subcommand)]
        command: cli::PoolCommand,
    },
    /// Reserve, confirm, release, refund, extend and read holds over HTTP.
    Hold {
        #[command(flatten)]
        client: cli::ClientArgs,
        #[command(subcommand)]
        command: cli::HoldCommand,
    },
    /// Acquire, renew and release lease locks with fencing tokens over HTTP.
    Lock {
        #[command(flatten)]
        client: cli::ClientArgs,
        #[command(subcommand)]
        command: cli::LockCommand,
    },
    /// Send many hold operations in one request, from a JSON file or standard input.
    Batch {
        #[command(flatten)]
        client: cli::ClientArgs,
        #[command(flatten)]
        batch: cli::BatchArgs,
    },
    /// Print and follow the event feed over HTTP.
    Events {
        #[command(flatten)]
        client: cli::ClientArgs,
        #[command(subcommand)]
        command: cli::EventsCommand,
    },
    /// Measure: load a running stockd and check its numbers (run), the oversell lab (lab),
    /// stockd beside the seeds' own stack (compare).
    Bench {
        #[command(subcommand)]
        command: bench::BenchCommand,
    },
    /// Carry the event feed into a database, exactly once (docs/sink.md).
    Sink {
        #[command(subcommand)]
        command: sink::SinkCommand,
    },
    /// Compare stockd's pools and holds with the sink's tables; list every difference.
    Reconcile(sink::ReconcileArgs),
}

impl Cli {
    /// The command line as clap parses it and as its help shows ([`help::shaped`]).
    fn shaped_command() -> clap::Command {
        help::shaped(Cli::command())
    }

    /// Parses a command line; a mistyped subcommand gets the ones it looks like.
    fn read_from<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
        let command = Cli::shaped_command();
        let matches = command
            .clone()
            .try_get_matches_from(&args)
            .map_err(|error| help::with_suggestions(error, &command, &args))?;
        Cli::from_arg_matches(&matches)
    }
}

impl Command {
    /// The commands that talk to a running server through `stockd-client`.
    fn is_client(&self) -> bool {
        matches!(
            self,
            Command::Pool { .. }
                | Command::Hold { .. }
                | Command::Lock { .. }
                | Command::Batch { .. }
                | Command::Events { .. }
        )
    }
}

/// Runs the tasks that I/O woke in the order they were woken.
///
/// tokio's multi-threaded scheduler puts the task woken last into a LIFO slot that runs before
/// everything already queued. When a crowd's requests arrive together, the I/O driver wakes
/// their connections in arrival order, and the LIFO slot then lets the latest of them reach the
/// writer first: a buyer who came later wins the race. `stockd bench`'s team race measures it
/// (`race_order`; docs/benchmarks.md, "Arrival order"): with the slot, some loser was overtaken by
/// a later winner in 28 of 42 races; with it off in the server, in 6 of 42. Only `serve` turns
/// it off: the load generator's own scheduling is not what it measures, and off there it gave
/// the race a worse tail. The switch is one of tokio's unstable settings, so the workspace
/// builds with `--cfg tokio_unstable` (`.cargo/config.toml`), and a build without it fails.
fn keep_arrival_order(runtime: &mut tokio::runtime::Builder) {
    // Without the flag the build stops at the `compile_error!` below, with its one message.
    #[cfg(tokio_unstable)]
    runtime.disable_lifo_slot();
    #[cfg(not(tokio_unstable))]
    let _ = runtime;
}

// A build that lost the flag (RUSTFLAGS set, which replaces `.cargo/config.toml`'s; a build from
// outside the repository) would serve a crowd out of arrival order without a word: refuse it.
#[cfg(not(tokio_unstable))]
compile_error!(
    "stockd must be built with `--cfg tokio_unstable` (it keeps a crowd's requests in arrival \
     order): build from the repository, whose .cargo/config.toml sets it, or add \
     `--cfg tokio_unstable` to RUSTFLAGS when you set them"
);

/// A command line ready to run: `serve` with its settings read (before its runtime starts, as
/// its worker threads are one of them), or another command.
enum Ready {
    Serve(serve::Settings),
    Other(Command),
}

impl Ready {
    /// Reads `serve`'s settings; a bad one is a usage error, said before anything starts.
    fn from(command: Command) -> Result<Ready, String> {
        match command {
            Command::Serve(args) => Ok(Ready::Serve(args.settings()?)),
            command => Ok(Ready::Other(command)),
        }
    }
}

/// The async runtime `ready` runs on. Worker threads: one per core by default; `serve` takes
/// its setting (--worker-threads, STOCKD_WORKER_THREADS or the config file's, else it leaves the
/// writer its core: [`settings::serve_worker_threads`]), and the other commands honour the
/// variable when it is a number above 0, as they always did. `serve` alone keeps arrival order
/// ([`keep_arrival_order`]).
fn runtime_for(ready: &Ready) -> tokio::runtime::Builder {
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    let worker_threads = match ready {
        Ready::Serve(settings) => Some(settings.worker_threads),
        Ready::Other(_) => std::env::var("STOCKD_WORKER_THREADS")
            .ok()
            .and_then(|value| value.parse::<usize>().ok())
            .filter(|&threads| threads > 0),
    };
    if let Some(threads) = worker_threads {
        runtime.worker_threads(threads);
    }
    if matches!(ready, Ready::Serve(_)) {
        keep_arrival_order(&mut runtime);
    }
    runtime
}

fn main() -> ExitCode {
    keep_freed_memory();
    let cli = Cli::read_from(std::env::args_os()).unwrap_or_else(|error| error.exit());
    if cli.json && !cli.command.is_client() {
        eprintln!(
            "error: --json before the command applies to the client commands (pool, hold, lock, batch, \
             events); \
             `stockd bench` takes its own --json FILE after `run`, `lab` or `compare`"
        );
        return cli::Exit::Usage.into();
    }
    if let Err(why) = logging::init() {
        eprintln!("error: {why}");
        return cli::Exit::Usage.into();
    }
    let ready = match Ready::from(cli.command) {
        Ok(ready) => ready,
        Err(why) => {
            eprintln!("error: {why}");
            return cli::Exit::Usage.into();
        }
    };
    let mut runtime = runtime_for(&ready);
    let runtime = match runtime.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let command = match ready {
        Ready::Serve(settings) => return runtime.block_on(serve::run(settings)),
        Ready::Other(command) => command,
    };
    runtime.block_on(async {
        match command {
            Command::Serve(_) => unreachable!("serve is Ready::Serve"),
            Command::Redis { command } => serve::run_redis(command).await,
            Command::Bench { command } => bench::run(command).await,
            Command::Sink { command } => sink::run(command).await,
            Command::Reconcile(args) => sink::reconcile(args).await,
            Command::Pool { client, command } => {
                cli::run(&client.json_if(cli.json), cli::Group::Pool(command)).await
            }
            Command::Hold { client, command } => {
                cli::run(&client.json_if(cli.json), cli::Group::Hold(command)).await
            }
            Command::Lock { client, command } => {
                cli::run(&client.json_if(cli.json), cli::Group::Lock(command)).await
            }
            Command::Batch { client, batch } => {
                cli::run(&client.json_if(cli.json), cli::Group::Batch(batch)).await
            }
            Command::Events { client, command } => {
                cli::run(&client.json_if(cli.json), cli::Group::Events(command)).await
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::serve_worker_threads;

    #[test]
    fn freed_memory_is_kept_and_the_option_is_mimallocs_purge_delay() {
        // SAFETY: reads an option (a plain integer).
        let get = || unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        // Only purge_delay has this default: the constant names the option it should.
        assert_eq!(
            get(),
            1_000,
            "not mimalloc's purge_delay (or MIMALLOC_PURGE_DELAY is set)"
        );
        keep_freed_memory();
        assert_eq!(get(), KEEP_FREED_MS);
    }

    /// The order in which three tasks, woken one after another on a worker of `runtime`'s
    /// (given one worker), run.
    fn order_of_three_woken(mut runtime: tokio::runtime::Builder) -> Vec<u32> {
        let runtime = runtime.worker_threads(1).build().unwrap();
        runtime.block_on(async {
            // Spawned from a task on the worker, so that the three are scheduled locally, as
            // the I/O driver schedules the connections it wakes.
            tokio::spawn(async {
                let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
                let tasks: Vec<_> = (0..3)
                    .map(|n| {
                        let order = order.clone();
                        tokio::spawn(async move { order.lock().unwrap().push(n) })
                    })
                    .collect();
                for task in tasks {
                    task.await.unwrap();
                }
                let order = order.lock().unwrap().clone();
                order
            })
            .await
            .unwrap()
        })
    }

    fn ready(args: &[&str]) -> Ready {
        let cli = Cli::read_from(std::iter::once("stockd").chain(args.iter().copied())).unwrap();
        Ready::from(cli.command).unwrap()
    }

    /// `serve` runs three tasks woken one after another in that order. With tokio's LIFO slot
    /// the last one runs first: so it does in `stockd bench`, which keeps tokio's default.
    #[test]
    fn serve_runs_woken_tasks_in_the_order_they_were_woken() {
        assert_eq!(
            order_of_three_woken(runtime_for(&ready(&["serve"]))),
            [0, 1, 2],
            "woken tasks ran out of order: serve's runtime has tokio's LIFO slot on"
        );
        assert_eq!(
            order_of_three_woken(runtime_for(&ready(&["bench", "run", "--scenario", "team"]))),
            [2, 0, 1]
        );
    }

    /// `serve` leaves the writer a core unless told otherwise; a machine of one core still gets
    /// a worker. The other commands keep tokio's one per core.
    #[test]
    fn serve_leaves_the_writer_a_core() {
        assert_eq!(serve_worker_threads(0), 1);
        assert_eq!(serve_worker_threads(1), 1);
        assert_eq!(serve_worker_threads(2), 1);
        assert_eq!(serve_worker_threads(16), 15);
        let workers = |args: &[&str]| {
            let runtime = runtime_for(&ready(args)).build().unwrap();
            runtime.metrics().num_workers()
        };
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(workers(&["serve"]), serve_worker_threads(cores));
        assert_eq!(workers(&["serve", "--worker-threads", "3"]), 3);
        assert_eq!(workers(&["bench", "run", "--scenario", "team"]), cores);
    }

    /// Every argument of every command, and every command, says what it is for in --help.
    #[test]
    fn every_argument_and_command_has_help() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for argument in command.get_arguments() {
                let id = argument.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                if argument.get_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in command.get_subcommands() {
                let sub_path = format!("{path} {}", sub.get_name());
                if sub.get_about().is_none() && sub.get_name() != "help" {
                    missing.push(format!("{sub_path} (the command)"));
                }
                walk(sub, &sub_path, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "stockd", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }
}
