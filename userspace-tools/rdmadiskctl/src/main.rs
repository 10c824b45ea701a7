//! rdmadiskctl: map, inspect and tune the disks of the rdmadisk kernel module through its
//! sysfs files. This file holds the command line and sends each command to its module.

mod conf;
mod disk;
mod error;
mod knobs;
mod list;
mod map;
mod rates;
mod show;
mod stats;
mod sysfs;
mod table;
mod telemetry;
mod top;

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::sysfs::Sysfs;

const DISK_HELP: &str = "rdmadiskN, /dev/rdmadiskN, or the name given at map time";

const AFTER_HELP: &str = "\
Environment:
  RDMADISK_SYSFS       the sysfs root to use instead of /sys (for tests against a fake tree)
  RDMADISK_DISKS_CONF  the file map-all and unmap-all read, instead of /etc/rdmadisk/disks.conf

Exit status:
  0  success
  1  a read or write failed otherwise, or a file could not be parsed
  2  bad usage, or a value refused before it was written
  3  the rdmadisk module is not loaded
  4  no such disk is mapped (or it has no block device yet)
  5  permission denied: run as root
  6  the kernel refused the write (its reason is in `dmesg | tail`)
  7  failover --wait timed out
  map-all and unmap-all exit with the status of their first failure, after trying every disk;
  a bad line in the file is status 2, and nothing is mapped or unmapped.";

const STATS_JSON_HELP: &str = r#"JSON (--json):
  {"disk": "rdmadisk0", "name": "d1",
   "counters": {"reads": 400, ...},
   "telemetry": {"rdma": {"read": {"ios": 400, "bytes": 1638400, "errors": 0, "credit_waits": 0,
       "lat_us": {"buckets": [[12, 3], [13, 390]],
                  "p50": {"bucket": 13, "low_us": 8192, "high_us": 16383},
                  "p90": {..}, "p99": {..}, "p99.9": {..}},
       "wire_us": {..}}}}}
  counters: every line of the disk's stats file. telemetry: by transport (rdma, tcp), then
  operation (read, write, flush, discard, write_zeroes), leaving out those with no I/O and no
  error. lat_us is dispatch to completion, wire_us request sent to response received, in log2
  buckets of microseconds: buckets lists the non-empty ones as [index, count]; a percentile is
  the bucket holding it and its bounds (high_us is null for the last bucket), null when the
  histogram is empty."#;

#[derive(Debug, Parser)]
#[command(
    name = "rdmadiskctl",
    version,
    about = "Map, inspect and tune rdmadisk disks (RDMA block devices with TCP failover)",
    after_help = AFTER_HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Map a target's export as a new /dev/rdmadiskN, and print its path
    Map(MapArgs),
    /// Map every disk of disks.conf that is not mapped yet (rdmadisk.service's ExecStart)
    #[command(after_help = DISKS_CONF_HELP)]
    MapAll {
        #[command(flatten)]
        conf: ConfArg,
        /// Check the file and read its key files, but map nothing
        #[arg(long)]
        check: bool,
    },
    /// Unmap the disks of disks.conf that are mapped (rdmadisk.service's ExecStop)
    #[command(after_help = DISKS_CONF_HELP)]
    UnmapAll {
        #[command(flatten)]
        conf: ConfArg,
        /// Unmap even disks that are open: their outstanding and future I/O fail
        #[arg(long)]
        force: bool,
    },
    /// Unmap a disk
    Unmap {
        #[arg(help = DISK_HELP)]
        disk: String,
        /// Unmap even while the disk is open: its outstanding and future I/O fail
        #[arg(long)]
        force: bool,
    },
    /// List the mapped disks
    List {
        /// Print JSON: {"disks":[{"device","path","name","address","export","state","active_transport"}]}
        #[arg(long)]
        json: bool,
    },
    /// Show what a disk is, how it is doing, and its knobs
    Show {
        #[arg(help = DISK_HELP)]
        disk: String,
        /// Print JSON: {"disk","identity":{..},"status":{..},"knobs":{..},"other":{..}}
        #[arg(long)]
        json: bool,
    },
    /// Show a disk's counters and its per-transport, per-operation latency percentiles
    #[command(after_long_help = STATS_JSON_HELP)]
    Stats {
        #[arg(help = DISK_HELP)]
        disk: String,
        /// Print JSON (its shape is under --help)
        #[arg(long)]
        json: bool,
        /// Zero the telemetry after printing it
        #[arg(long)]
        reset: bool,
    },
    /// Set one of a disk's knobs (run with an unknown knob to list them)
    Set {
        #[arg(help = DISK_HELP)]
        disk: String,
        /// The knob, e.g. max_credits, io_timeout_ms, transport
        knob: String,
        /// The new value; it is checked against the knob's range first (-1 is a value:
        /// loss_timeout_s takes it for never)
        #[arg(allow_hyphen_values = true)]
        value: String,
    },
    /// Switch a disk's transport, optionally waiting until I/O runs on it
    Failover {
        #[arg(help = DISK_HELP)]
        disk: String,
        /// The transport to use
        #[arg(long, value_enum)]
        to: knobs::Target,
        /// Wait up to SECS seconds for active_transport to become the one asked for
        #[arg(long, value_name = "SECS")]
        wait: Option<u64>,
    },
    /// Live table of every disk: IOPS, MB/s, latency and requests in flight
    Top {
        /// Milliseconds between refreshes
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
        interval_ms: u64,
        /// Exit after this many refreshes
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        iterations: Option<u64>,
    },
    /// Print a shell completion script
    Completions {
        #[arg(value_enum)]
        shell: CompletionShell,
    },
    /// Print the man page (roff), or write every page to a directory
    Man {
        /// Write rdmadiskctl.1 and one rdmadiskctl-COMMAND.1 per command into DIR
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
}

const DISKS_CONF_HELP: &str = "\
disks.conf holds one disk a line, its name then the keys of `map`:
  # NAME  KEY=VALUE ...
  vol0    addr=192.0.2.2 export=vol0
  db      target=192.0.2.2,192.0.2.3:7710:7711 export=db queues=4 secret_file=db.key ro
Keys: addr or target, export, port, tcp_port, queues, poll_queues, ro, secret_file,
target_secret_file (a relative key file path is taken from the file's directory). '#' starts a
comment; blank lines are skipped. The whole file is checked, key files read, before anything is
mapped: a bad line is named as FILE:LINE and nothing is mapped.

map-all skips a disk whose name is mapped already (to the same export), so running it twice maps
nothing twice. unmap-all unmaps only the file's disks, last line first; disks mapped by hand are
left alone, and with the module not loaded there is nothing to do.";

/// Where map-all and unmap-all read their disks.
#[derive(Debug, clap::Args)]
struct ConfArg {
    /// The persistent maps file
    #[arg(long, value_name = "PATH", env = conf::PATH_ENV, default_value = conf::DEFAULT_PATH)]
    config: std::path::PathBuf,
}

#[derive(Debug, clap::Args)]
struct MapArgs {
    /// Name of the disk (shown in `list`, usable instead of rdmadiskN)
    #[arg(long)]
    name: String,
    /// The target's IPv4 or IPv6 address
    #[arg(long, value_name = "IP", required_unless_present = "target")]
    addr: Option<String>,
    /// Instead of --addr: 1 to 4 targets (gateways of a shared store) as
    /// ADDR[:PORT[:TCP_PORT]],... (an IPv6 ADDR in brackets) in order of preference; the disk
    /// fails over between them
    #[arg(long, value_name = "LIST", conflicts_with = "addr")]
    target: Option<String>,
    /// The export to attach
    #[arg(long)]
    export: String,
    /// The target's RDMA (rdma_cm) port [module default: 7700]
    #[arg(long, value_name = "PORT")]
    port: Option<String>,
    /// The target's TCP port, used when RDMA fails [module default: 7701]
    #[arg(long, value_name = "PORT")]
    tcp_port: Option<String>,
    /// Interrupt-driven hardware queues [module default: 1]
    #[arg(long, value_name = "N")]
    queues: Option<String>,
    /// Polled hardware queues, in addition to --queues [module default: 0]
    #[arg(long, value_name = "N")]
    poll_queues: Option<String>,
    /// Map read-only
    #[arg(long)]
    ro: bool,
    /// A file holding the key this host proves (its own, or the export's secret), in hex;
    /// others may not read it. The target must then prove a key too.
    #[arg(long, value_name = "PATH")]
    secret_file: Option<std::path::PathBuf>,
    /// A file holding the key the target must prove, when it is not --secret-file's
    #[arg(long, value_name = "PATH", requires = "secret_file")]
    target_secret_file: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

impl From<CompletionShell> for clap_complete::Shell {
    fn from(s: CompletionShell) -> Self {
        match s {
            CompletionShell::Bash => clap_complete::Shell::Bash,
            CompletionShell::Zsh => clap_complete::Shell::Zsh,
            CompletionShell::Fish => clap_complete::Shell::Fish,
        }
    }
}

/// Writes to standard output; a reader that went away (`| head`) is not an error.
fn emit(text: &str) -> Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(Error::Io {
            action: "write",
            path: "standard output".into(),
            err: e,
        }),
        _ => Ok(()),
    }
}

fn emit_line(text: &str) -> Result<()> {
    emit(&format!("{text}\n"))
}

fn emit_json(v: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(v).expect("plain maps and numbers always serialize");
    emit_line(&text)
}

fn emit_bytes(f: impl FnOnce(&mut Vec<u8>) -> io::Result<()>) -> Result<()> {
    let mut buf = Vec::new();
    f(&mut buf).map_err(|err| Error::Io {
        action: "render",
        path: "the output".into(),
        err,
    })?;
    emit(&String::from_utf8_lossy(&buf))
}

fn run(cli: Cli) -> Result<()> {
    let sysfs = Sysfs::from_env();
    match cli.command {
        Command::Map(a) => {
            let req = map::MapRequest {
                name: a.name,
                addr: a.addr.unwrap_or_default(),
                target: a.target,
                export: a.export,
                port: a.port,
                tcp_port: a.tcp_port,
                queues: a.queues,
                poll_queues: a.poll_queues,
                ro: a.ro,
                secret: a
                    .secret_file
                    .as_deref()
                    .map(|p| map::read_key("--secret-file", p))
                    .transpose()?,
                target_secret: a
                    .target_secret_file
                    .as_deref()
                    .map(|p| map::read_key("--target-secret-file", p))
                    .transpose()?,
            };
            emit_line(&map::map(&sysfs, &req)?)
        }
        Command::MapAll { conf, check } => {
            let entries = conf::load(&conf.config, true)?;
            if check {
                return emit_line(&format!(
                    "{}: {} disks, every line valid",
                    conf.config.display(),
                    entries.len()
                ));
            }
            report("map-all", conf::map_all(&sysfs, &entries)?)
        }
        Command::UnmapAll { conf, force } => {
            let entries = conf::load(&conf.config, false)?;
            report("unmap-all", conf::unmap_all(&sysfs, &entries, force)?)
        }
        Command::Unmap { disk, force } => emit_line(&map::unmap(&sysfs, &disk, force)?),
        Command::List { json } => {
            let l = list::listing(&sysfs)?;
            if json {
                emit_json(&l)
            } else {
                emit(&list::text(&l))
            }
        }
        Command::Show { disk, json } => {
            let s = show::show(&disk::Disk::open(&sysfs, &disk)?)?;
            if json {
                emit_json(&s)
            } else {
                emit(&show::text(&s))
            }
        }
        Command::Stats { disk, json, reset } => {
            let d = disk::Disk::open(&sysfs, &disk)?;
            let r = stats::report(&d)?;
            if json {
                emit_json(&stats::json(&r))?;
            } else {
                emit(&stats::text(&r))?;
            }
            if reset {
                stats::reset(&d)?;
            }
            Ok(())
        }
        Command::Set { disk, knob, value } => emit_line(&knobs::set(&sysfs, &disk, &knob, &value)?),
        Command::Failover { disk, to, wait } => emit_line(&knobs::failover(
            &sysfs,
            &disk,
            to,
            wait.map(Duration::from_secs),
        )?),
        Command::Top {
            interval_ms,
            iterations,
        } => top::run(&sysfs, Duration::from_millis(interval_ms), iterations),
        Command::Completions { shell } => emit_bytes(|buf| {
            let shell: clap_complete::Shell = shell.into();
            clap_complete::generate(shell, &mut command(), "rdmadiskctl", buf);
            Ok(())
        }),
        Command::Man { dir: None } => {
            emit_bytes(|buf| clap_mangen::Man::new(man_command()).render(buf))
        }
        Command::Man { dir: Some(dir) } => {
            clap_mangen::generate_to(man_command(), &dir).map_err(|err| Error::Io {
                action: "write man pages to",
                path: dir,
                err,
            })
        }
    }
}

/// Prints what a `*-all` command did, each failure on standard error; fails with the first
/// failure's status.
fn report(cmd: &str, o: conf::Outcome) -> Result<()> {
    for line in &o.done {
        emit_line(line)?;
    }
    for (msg, _) in &o.failed {
        eprintln!("rdmadiskctl: {cmd}: {msg}");
    }
    match o.failed.first() {
        None => Ok(()),
        Some(&(_, code)) => Err(Error::Failed {
            what: format!("{cmd}: {} of the disks failed", o.failed.len()),
            code,
        }),
    }
}

/// The command line, with the knob table (which lives in the module's shared code, not in
/// a string here) added to `set --help`.
fn command() -> clap::Command {
    Cli::command().mut_subcommand("set", |c| {
        c.after_help(format!("Knobs:\n{}", knobs::knob_table()))
    })
}

/// The pages leave out `help`, which has no page of its own; the main page names the
/// others as rdmadiskctl-COMMAND(1), which `man --dir` writes.
fn man_command() -> clap::Command {
    command().disable_help_subcommand(true)
}

fn main() -> ExitCode {
    let cli = match Cli::from_arg_matches(&command().get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdmadiskctl: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys come from files, never from the command line, where every user's `ps` sees them:
    /// every option that names a secret or a key takes a path.
    #[test]
    fn keys_are_taken_only_as_files() {
        fn walk(c: &clap::Command, seen: &mut usize) {
            for a in c.get_arguments() {
                let long = a.get_long().unwrap_or_default();
                if long.contains("secret") || long.contains("key") {
                    *seen += 1;
                    let names = a.get_value_names().unwrap_or_default();
                    assert!(
                        names.iter().any(|n| n.ends_with("PATH")),
                        "--{long} takes {names:?}, not a file"
                    );
                }
            }
            for s in c.get_subcommands() {
                walk(s, seen);
            }
        }
        let mut seen = 0;
        walk(&command(), &mut seen);
        assert!(seen >= 2, "only {seen} key options found");
    }

    #[test]
    fn the_command_line_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn the_documented_exit_statuses_are_the_ones_returned() {
        use crate::error::exit;
        for (code, words) in [
            (exit::FAILURE, "a read or write failed"),
            (exit::INVALID, "bad usage"),
            (exit::NOT_LOADED, "not loaded"),
            (exit::NO_DISK, "no such disk"),
            (exit::PERMISSION, "permission denied"),
            (exit::REFUSED, "the kernel refused"),
            (exit::TIMEOUT, "timed out"),
        ] {
            let line = AFTER_HELP.lines().find(|l| l.contains(words)).unwrap();
            assert!(line.starts_with(&format!("  {code}  ")), "{line}");
        }
    }

    #[test]
    fn disks_and_flags_parse() {
        let cli = Cli::try_parse_from([
            "rdmadiskctl",
            "failover",
            "/dev/rdmadisk0",
            "--to",
            "tcp",
            "--wait",
            "5",
        ])
        .unwrap();
        match cli.command {
            Command::Failover { disk, to, wait } => {
                assert_eq!(
                    (disk.as_str(), to, wait),
                    ("/dev/rdmadisk0", knobs::Target::Tcp, Some(5))
                );
            }
            c => panic!("{c:?}"),
        }
        let cli =
            Cli::try_parse_from(["rdmadiskctl", "set", "d0", "loss_timeout_s", "-1"]).unwrap();
        match cli.command {
            Command::Set { disk, knob, value } => {
                assert_eq!(
                    (disk.as_str(), knob.as_str(), value.as_str()),
                    ("d0", "loss_timeout_s", "-1")
                );
            }
            c => panic!("{c:?}"),
        }
        assert!(Cli::try_parse_from(["rdmadiskctl", "top", "--interval-ms", "10"]).is_err());
        assert!(Cli::try_parse_from(["rdmadiskctl", "completions", "powershell"]).is_err());
    }
}
