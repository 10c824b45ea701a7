//! Command line and TOML configuration.
//!
//! A flag given on the command line wins over the same key in the file:
//!
//! - a value (a port, a size, a path) replaces the file's;
//! - a switch has a flag for each way (`--no-rdma` and `--rdma`, `--no-tcp` and `--tcp`,
//!   `--no-direct` and `--direct`, `--no-exclusive NAME` and `--exclusive NAME`), so the
//!   command line can turn a setting off or on whatever the file says; of two opposite flags
//!   the last given wins;
//! - who may attach is one setting: `--allow` (a list) or `--allow-any` on the command line
//!   replaces both the file's `allow` list and its `allow_any`;
//! - a list flag (`--allow`, `--hostile`) replaces the file's list;
//! - exports are not replaced but combined: `--export` and `--export-ro` add exports to the
//!   file's `[[export]]` tables, and a name may appear only once in all. (Replacing a file's
//!   export from the command line would silently drop its allow-list or secret.) Host keys
//!   combine the same way: `--host-key` adds to the file's `[[host]]` tables.
//!
//! Every problem is collected, not only the first ([`Problems`]), so that `--check-config`
//! and a failed start can list them all.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand};
use rdmadisk_net::allow::AllowList;
use rdmadisk_proto::auth::Secret;
use rdmadisk_proto::options::{DEFAULT_RDMA_PORT, DEFAULT_TCP_PORT};
use rdmadisk_proto::wire::SECTOR_SIZE;
use serde::Deserialize;

use crate::engine::{rdma_conn_bytes, HostKey, Keys, TCP_STAGING};
use crate::hostile::{Hostile, Kind};

/// rdmadisk storage target: serves block exports to rdmadisk clients over RDMA (rdma_cm, RC
/// queue pairs) and TCP.
#[derive(Parser, Debug, Default)]
#[command(
    version,
    about,
    args_conflicts_with_subcommands = true,
    after_help = "\
Access is denied by default: give an allow-list (--allow, or allow = [..] in the file), or
--allow-any. An export without a key is served only to connections from reserved ports
(below 1024: root on the client host) unless it is marked insecure; a key (a host's own,
--host-key, or the export's, --secret-file) is proven both ways on every connection.

A flag wins over the same key in the config file; opposite switches (--rdma/--no-rdma...)
let the command line turn a file's setting either way; exports from flags are added to the
file's (names must be unique).

EXAMPLES:
  rdmadisk-target --listen 192.0.2.2 --allow 192.0.2.0/24 --export disk0=/dev/nvme0n1
  rdmadisk-target --config /etc/rdmadisk/target.toml
  rdmadisk-target --check-config --config /etc/rdmadisk/target.toml
  rdmadisk-target stats --config /etc/rdmadisk/target.toml --json
  rdmadisk-target clients --config /etc/rdmadisk/target.toml
  kill -HUP $(pidof rdmadisk-target)    # re-read the config file (systemctl reload)

TOML keys: listen, rdma_port, tcp_port, no_rdma, no_tcp, allow = [..], allow_any,
max_io_bytes, queue_depth, credits, direct, buffer_memory, rdma_window, inline_max,
ack_timeout_exp, poll_us, max_connections, max_connections_per_host, hello_timeout_s,
idle_timeout_s, send_timeout_s, shutdown_timeout_s, stats_file, control_socket, metrics_listen,
metrics_file, log_level,
corrupt_read_every, fail_write_crc_every, hostile = [..], hostile_every, ceph_conf,
ceph_client, ceph_keyring, lock_wait_s, [[host]] tables with name, address, secret_file,
target_secret_file, and [[export]] tables with name, path (or rbd:POOL/IMAGE), read_only, allow = [..],
exclusive, secret_file, insecure, uuid, serial, ceph_conf, ceph_client, ceph_keyring, break_lock, gateway (RBD
only: one of several targets serving the image, which takes its lock over when a client attaches
read-write). See userspace-tools/README.md and rdmadisk-target.example.toml."
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// TOML configuration file.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Check the configuration (file and flags) and that every export can be opened as it
    /// will be served (without taking its exclusive hold), print what would be served, and
    /// exit: 0 if all is well, 1 with every problem found.
    #[arg(long)]
    pub check_config: bool,
    /// Address to listen on (both transports). Default 0.0.0.0. Who may attach is the
    /// allow-list's business (--allow or --allow-any), whatever the address.
    #[arg(long)]
    pub listen: Option<IpAddr>,
    /// rdma_cm port. Default 7700.
    #[arg(long)]
    pub rdma_port: Option<u16>,
    /// TCP port (0 = any free port, printed at start). Default 7701.
    #[arg(long)]
    pub tcp_port: Option<u16>,
    /// Do not listen on RDMA.
    #[arg(long, overrides_with = "rdma")]
    pub no_rdma: bool,
    /// Listen on RDMA (the default; overrides no_rdma = true in the file).
    #[arg(long, overrides_with = "no_rdma")]
    pub rdma: bool,
    /// Do not listen on TCP.
    #[arg(long, overrides_with = "tcp")]
    pub no_tcp: bool,
    /// Listen on TCP (the default; overrides no_tcp = true in the file).
    #[arg(long, overrides_with = "no_tcp")]
    pub tcp: bool,
    /// Export NAME=PATH (a file or block device, or rbd:POOL/IMAGE: a Ceph RBD image),
    /// read-write. Repeatable; added to the file's exports. `,uuid=UUID` and `,serial=SERIAL`
    /// after the path set the export's identity (default: made once and kept beside it).
    #[arg(long = "export", value_name = "NAME=PATH[,uuid=UUID][,serial=SERIAL]")]
    pub exports: Vec<String>,
    /// Export NAME=PATH read-only (the options of --export too). Repeatable; added to the
    /// file's exports.
    #[arg(
        long = "export-ro",
        value_name = "NAME=PATH[,uuid=UUID][,serial=SERIAL]"
    )]
    pub exports_ro: Vec<String>,
    /// Require the secret in PATH (hex, 16 to 64 bytes, not readable by others) from clients
    /// of export NAME (overrides the export's secret_file). Repeatable.
    #[arg(long = "secret-file", value_name = "NAME=PATH")]
    pub secret_files: Vec<String>,
    /// The client host at ADDR has its own key, in PATH (hex, 16 to 64 bytes, not readable by
    /// others): it proves it on every export, and the target proves it back. Repeatable;
    /// added to the file's [[host]] tables.
    #[arg(long = "host-key", value_name = "ADDR=PATH")]
    pub host_keys: Vec<String>,
    /// The key the target proves to the client host at ADDR, when it is not the host's own
    /// key (DH-HMAC-CHAP's controller key). Needs --host-key ADDR=.. too. Repeatable.
    #[arg(long = "host-target-key", value_name = "ADDR=PATH")]
    pub host_target_keys: Vec<String>,
    /// Serve export NAME, when no key protects a connection, to any port of an allowed host,
    /// not only to reserved ones (below 1024, which only root binds): any user of the host may
    /// then read and write it. Repeatable; overrides insecure = false.
    #[arg(long = "insecure", value_name = "NAME")]
    pub insecure: Vec<String>,
    /// Let several client hosts attach export NAME read-write at once (by default one host
    /// at a time; overrides exclusive = true). Repeatable.
    #[arg(long = "no-exclusive", value_name = "NAME")]
    pub no_exclusive: Vec<String>,
    /// Let one client host at a time attach export NAME read-write (the default; overrides
    /// exclusive = false in the file). Repeatable.
    #[arg(long = "exclusive", value_name = "NAME")]
    pub exclusive: Vec<String>,
    /// RBD exports: the ceph.conf to read (default: librados's search, /etc/ceph/ceph.conf).
    #[arg(long, value_name = "FILE")]
    pub ceph_conf: Option<PathBuf>,
    /// RBD exports: the Ceph client to connect as (default client.admin).
    #[arg(long, value_name = "NAME")]
    pub ceph_client: Option<String>,
    /// RBD exports: that client's keyring (default: what the ceph.conf names).
    #[arg(long, value_name = "PATH")]
    pub ceph_keyring: Option<PathBuf>,
    /// RBD export NAME: when another client holds the image's exclusive lock, break it (Ceph
    /// then blocklists that client, so no write of it lands afterwards) instead of refusing
    /// to start. Only for an owner known to be gone or frozen. Repeatable.
    #[arg(long = "break-lock", value_name = "NAME")]
    pub break_lock: Vec<String>,
    /// RBD export NAME is one of several gateways to its image (other targets serve it too):
    /// the target takes no lock at start, and takes the image's exclusive lock over (Ceph
    /// blocklists the previous owner) when a client attaches it read-write. Repeatable;
    /// overrides gateway = false.
    #[arg(long = "gateway", value_name = "NAME")]
    pub gateway: Vec<String>,
    /// RBD exports: how long to wait at start for an image's exclusive lock that another
    /// client holds. A dead owner's lock is broken once Ceph sees it gone (its watch on the
    /// image lapses: osd_client_watch_timeout, 30 s by default), so a target restarted after a
    /// crash waits that out. Default 45; 0: refuse at once.
    #[arg(long, value_name = "SECONDS")]
    pub lock_wait_s: Option<u64>,
    /// Allowed client address or CIDR block, for every export. Repeatable; replaces the
    /// file's allow list and allow_any.
    #[arg(long = "allow", value_name = "IP[/PREFIX]")]
    pub allow: Vec<String>,
    /// Let any client that reaches the target attach (no allow-list; replaces the file's
    /// allow list). Either this or --allow is needed.
    #[arg(long)]
    pub allow_any: bool,
    /// Largest I/O in bytes. Default 1 MiB.
    #[arg(long)]
    pub max_io_bytes: Option<u32>,
    /// Requests in flight per queue advertised to clients. Default = credits.
    #[arg(long)]
    pub queue_depth: Option<u16>,
    /// Request credits per connection: requests it may have in flight. Default 32.
    #[arg(long)]
    pub credits: Option<u16>,
    /// Serve through the page cache, not O_DIRECT.
    #[arg(long, overrides_with = "direct")]
    pub no_direct: bool,
    /// Serve with O_DIRECT (the default; overrides direct = false in the file).
    #[arg(long, overrides_with = "no_direct")]
    pub direct: bool,
    /// Bytes of data buffers all connections together may hold. Default 256 MiB.
    #[arg(long)]
    pub buffer_memory: Option<u64>,
    /// Bytes of RDMA Reads and Writes one connection may have on the wire at once (one
    /// request always goes, however large). Default 256 KiB.
    #[arg(long)]
    pub rdma_window: Option<u32>,
    /// Largest write, in bytes, an RDMA client may send inline with its request (a multiple of
    /// 512; 0: none). Each posted receive is this much larger. Default 4096.
    #[arg(long)]
    pub inline_max: Option<u32>,
    /// RDMA local ACK timeout of every connection, as the exponent N of 4.096 us * 2^N
    /// (14..=24): how long a transfer may see no progress before it is sent again. Default
    /// 17 (about 0.54 s).
    #[arg(long)]
    pub ack_timeout_exp: Option<u8>,
    /// RDMA: microseconds a connection polls its CQs for the next completion, without a
    /// system call, before it arms them and sleeps (0..=1000). Default 0: off. A spin takes a
    /// CPU the whole time: on a storage host with one CPU it starves soft-RoCE's own kernel
    /// workers, which must run for the completion to come at all.
    #[arg(long)]
    pub poll_us: Option<u32>,
    /// Connections at once. Default 256.
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Connections at once from one client address. Default 64.
    #[arg(long)]
    pub max_connections_per_host: Option<usize>,
    /// Seconds a TCP client has for its whole Hello (and any client for a secret's proof).
    /// Default 5.
    #[arg(long)]
    pub hello_timeout_s: Option<u64>,
    /// Seconds without a message (and nothing in flight) after which an RDMA connection is
    /// closed; 0: never. Default 120 (clients send keepalives well within it).
    #[arg(long)]
    pub idle_timeout_s: Option<u64>,
    /// Seconds a response may wait to be sent (a client that does not read, or grants no
    /// credits) before the connection is closed. Default 30.
    #[arg(long)]
    pub send_timeout_s: Option<u64>,
    /// Seconds SIGTERM waits for requests in flight before the target syncs and exits anyway.
    /// Default 10.
    #[arg(long)]
    pub shutdown_timeout_s: Option<u64>,
    /// Rewrite counters to this file every second, on SIGUSR1 and at exit (key=value lines;
    /// `rdmadisk-target stats` prints them).
    #[arg(long)]
    pub stats_file: Option<PathBuf>,
    /// Log level: off, error, warn, info, debug or trace. Default info.
    #[arg(long)]
    pub log_level: Option<String>,
    /// Test switch: corrupt one byte of read data after computing its CRC, on 1 in N reads.
    #[arg(long, value_name = "N")]
    pub corrupt_read_every: Option<u64>,
    /// Test switch: treat 1 in N write CRCs as mismatched.
    #[arg(long, value_name = "N")]
    pub fail_write_crc_every: Option<u64>,
    /// Diagnostic switch: answer with plain Sends, never Send-with-Invalidate (for clients that
    /// expose plain MR rkeys, which rxe refuses to invalidate).
    #[arg(long)]
    pub no_invalidate: bool,
    /// TEST ONLY: make every Nth response of each connection hostile, the kinds taking turns:
    /// unknown_tag, dup_response, wrong_rkey, no_invalidate, bad_status, long_length,
    /// truncated, garbage, credit_overflow, late_write. Comma-separated or repeated.
    #[arg(long, value_name = "KIND[,KIND...]", value_delimiter = ',')]
    pub hostile: Vec<String>,
    /// TEST ONLY: with --hostile, every how many responses of a connection one is hostile.
    /// Default 3.
    #[arg(long, value_name = "N")]
    pub hostile_every: Option<u64>,
    /// TEST ONLY: while this file exists, refuse (Busy) every RDMA connection of a client
    /// session, but still accept probes (session 0) and TCP: a failback that fails while its
    /// probes succeed.
    #[arg(long, value_name = "PATH")]
    pub refuse_rdma_file: Option<PathBuf>,
    /// TEST ONLY: never answer a read or write that covers this sector (a stuck region of the
    /// backing store); everything else, keepalives included, is answered as usual.
    #[arg(long, value_name = "SECTOR")]
    pub stall_sector: Option<u64>,
    /// TEST ONLY: while this file exists, every write, discard and write-zeroes is answered
    /// ReadOnly, as by an export that turned read-only under a client that attached it
    /// read-write.
    #[arg(long, value_name = "PATH")]
    pub refuse_writes_file: Option<PathBuf>,
    /// TEST ONLY: responses grant no credits back (the Hello reply still grants the initial
    /// ones), so a client runs out of credits with nothing in flight.
    #[arg(long)]
    pub grant_no_credits: bool,
    /// The unix socket `rdmadisk-target clients` asks (default
    /// /run/rdmadisk-target/control.sock, when that directory exists).
    #[arg(long, value_name = "PATH")]
    pub control_socket: Option<PathBuf>,
    /// Serve Prometheus metrics over HTTP at ADDR:PORT (e.g. 127.0.0.1:9464). Default: none.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics_listen: Option<SocketAddr>,
    /// Rewrite the Prometheus metrics to this file every second (node_exporter's textfile
    /// collector). Default: none.
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,
}

/// The control socket's path when none is configured (systemd's RuntimeDirectory).
pub const DEFAULT_CONTROL_SOCKET: &str = "/run/rdmadisk-target/control.sock";

/// Subcommands: tools that read what a running target leaves behind.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print a running target's counters from its stats file.
    Stats(StatsArgs),
    /// List the clients attached to a running target (asks its control socket).
    Clients(ClientsArgs),
    /// Print a shell completion script (make install installs them).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), or write every page to a directory.
    Man {
        /// Write rdmadisk-target.1 and one rdmadisk-target-COMMAND.1 per command into DIR.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// `rdmadisk-target clients`.
#[derive(clap::Args, Debug, Default)]
pub struct ClientsArgs {
    /// The target's control socket (its control_socket).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Or the target's TOML config, to take control_socket from.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// One JSON array, an object per connection.
    #[arg(long)]
    pub json: bool,
}

/// `rdmadisk-target stats`.
#[derive(clap::Args, Debug, Default)]
pub struct StatsArgs {
    /// The stats file (the target's --stats-file).
    #[arg(long, value_name = "PATH")]
    pub stats_file: Option<PathBuf>,
    /// Or the target's TOML config, to take stats_file from.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// One JSON object: the file, its age and every counter.
    #[arg(long)]
    pub json: bool,
}

/// One `[[export]]` table.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ExportConf {
    pub name: String,
    pub path: PathBuf,
    #[serde(default)]
    pub read_only: bool,
    /// Clients allowed on this export, besides the target-wide list.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Read-write attachment by one client host at a time (default true).
    pub exclusive: Option<bool>,
    /// A file holding the export's secret, in hex (16 to 64 bytes): clients must prove they
    /// know it.
    pub secret_file: Option<PathBuf>,
    /// Without a key, serve any port of an allowed host, not only reserved ones.
    pub insecure: Option<bool>,
    /// RBD exports (`path = "rbd:POOL/IMAGE"`): the ceph.conf, client and keyring, when not
    /// the target-wide ones.
    pub ceph_conf: Option<PathBuf>,
    pub ceph_client: Option<String>,
    pub ceph_keyring: Option<PathBuf>,
    /// RBD exports: break another client's exclusive lock at start (see --break-lock).
    pub break_lock: Option<bool>,
    /// RBD exports: one of several gateways to the image (see --gateway).
    pub gateway: Option<bool>,
    /// The export's UUID (identity.rs says what it is without one).
    pub uuid: Option<String>,
    /// The export's serial (default: from the UUID).
    pub serial: Option<String>,
}

/// One `[[host]]` table: a client host with a key of its own.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct HostConf {
    /// For logs.
    pub name: String,
    /// The address its connections come from.
    pub address: IpAddr,
    /// Its key, in hex (16 to 64 bytes), in a file others may not read.
    pub secret_file: PathBuf,
    /// The key the target proves to it, when not its own (same format).
    pub target_secret_file: Option<PathBuf>,
}

/// The TOML file.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct FileConf {
    pub listen: Option<IpAddr>,
    pub rdma_port: Option<u16>,
    pub tcp_port: Option<u16>,
    pub no_rdma: Option<bool>,
    pub no_tcp: Option<bool>,
    pub ceph_conf: Option<PathBuf>,
    pub ceph_client: Option<String>,
    pub ceph_keyring: Option<PathBuf>,
    pub lock_wait_s: Option<u64>,
    #[serde(default)]
    pub allow: Vec<String>,
    pub allow_any: Option<bool>,
    pub max_io_bytes: Option<u32>,
    pub queue_depth: Option<u16>,
    pub credits: Option<u16>,
    pub direct: Option<bool>,
    pub buffer_memory: Option<u64>,
    pub rdma_window: Option<u32>,
    pub inline_max: Option<u32>,
    pub ack_timeout_exp: Option<u8>,
    pub poll_us: Option<u32>,
    pub max_connections: Option<usize>,
    pub max_connections_per_host: Option<usize>,
    pub hello_timeout_s: Option<u64>,
    pub idle_timeout_s: Option<u64>,
    pub send_timeout_s: Option<u64>,
    pub shutdown_timeout_s: Option<u64>,
    pub stats_file: Option<PathBuf>,
    pub log_level: Option<String>,
    pub corrupt_read_every: Option<u64>,
    pub fail_write_crc_every: Option<u64>,
    #[serde(default)]
    pub hostile: Vec<String>,
    pub hostile_every: Option<u64>,
    #[serde(default)]
    pub host: Vec<HostConf>,
    #[serde(default)]
    pub export: Vec<ExportConf>,
    pub control_socket: Option<PathBuf>,
    pub metrics_listen: Option<SocketAddr>,
    pub metrics_file: Option<PathBuf>,
}

impl FileConf {
    /// Reads and parses a config file.
    pub fn read(p: &Path) -> Result<FileConf, String> {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        toml::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))
    }
}

/// A Ceph RBD image to serve, and how to reach its cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RbdSpec {
    pub pool: String,
    pub image: String,
    pub conf: Option<PathBuf>,
    pub client: Option<String>,
    pub keyring: Option<PathBuf>,
    /// Break another client's exclusive lock at start rather than refuse to start.
    pub break_lock: bool,
    /// How long to wait at start for a lock another client holds.
    pub lock_wait: Duration,
    /// Other targets serve the image too: no lock at start; a read-write attach takes it
    /// over (docs/design.md, "Several gateways").
    pub gateway: bool,
}

impl RbdSpec {
    /// `rbd:POOL/IMAGE` as (pool, image); `None` if `path` does not start with `rbd:`.
    pub fn parse_path(path: &Path) -> Option<Result<(String, String), String>> {
        let s = path.to_str()?;
        let rest = s.strip_prefix("rbd:")?;
        let bad = || format!("{s:?}: expected rbd:POOL/IMAGE");
        Some(match rest.split_once('/') {
            Some((pool, image))
                if !pool.is_empty() && !image.is_empty() && !image.contains(['/', '@']) =>
            {
                Ok((pool.to_string(), image.to_string()))
            }
            _ => Err(bad()),
        })
    }
}

/// One export, as configured.
#[derive(Debug, Clone)]
pub struct ExportSpec {
    pub name: String,
    /// The file or block device; for an RBD export, `rbd:POOL/IMAGE` (and `rbd` is set).
    pub path: PathBuf,
    pub rbd: Option<RbdSpec>,
    pub read_only: bool,
    pub allow: Vec<String>,
    pub exclusive: bool,
    pub secret: Option<Secret>,
    pub insecure: bool,
    /// Configured identity (identity.rs).
    pub uuid: Option<rdmadisk_proto::wire::Uuid>,
    pub serial: Option<rdmadisk_proto::wire::Serial>,
}

/// The merged configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it came from, if any.
    pub file: Option<PathBuf>,
    pub listen: IpAddr,
    pub rdma_port: Option<u16>,
    pub tcp_port: Option<u16>,
    pub allow: Vec<String>,
    /// No allow-list applies: everyone who can reach the target may attach.
    pub allow_any: bool,
    pub max_io_bytes: u32,
    pub queue_depth: u16,
    pub credits: u16,
    pub direct: bool,
    pub buffer_memory: u64,
    pub rdma_window: u32,
    pub inline_max: u32,
    pub ack_timeout_exp: u8,
    /// RDMA: how long a connection polls its CQs before it arms them and sleeps (0: not).
    pub poll_us: u32,
    pub max_connections: usize,
    pub max_connections_per_host: usize,
    pub hello_timeout: Duration,
    pub idle_timeout: Option<Duration>,
    pub send_timeout: Duration,
    pub shutdown_timeout: Duration,
    pub stats_file: Option<PathBuf>,
    pub log_level: log::LevelFilter,
    pub corrupt_read_every: u64,
    pub fail_write_crc_every: u64,
    pub no_invalidate: bool,
    pub hostile: Hostile,
    pub refuse_rdma_file: Option<PathBuf>,
    pub stall_sector: Option<u64>,
    pub refuse_writes_file: Option<PathBuf>,
    pub grant_no_credits: bool,
    pub hosts: Vec<HostKey>,
    pub exports: Vec<ExportSpec>,
    /// The unix socket `rdmadisk-target clients` asks; `None`: the default, if its
    /// directory exists.
    pub control_socket: Option<PathBuf>,
    /// Where Prometheus metrics are served, and the file they are rewritten to.
    pub metrics_listen: Option<SocketAddr>,
    pub metrics_file: Option<PathBuf>,
}

/// Everything found wrong with a configuration, one problem per entry.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Problems(pub Vec<String>);

impl Problems {
    pub fn add(&mut self, p: impl Into<String>) {
        self.0.push(p.into());
    }

    /// `r`'s value; or, noting its error, `fallback`, so that checking goes on.
    pub fn take<T>(&mut self, r: Result<T, String>, fallback: T) -> T {
        r.unwrap_or_else(|e| {
            self.add(e);
            fallback
        })
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether some problem mentions `needle`.
    #[cfg(test)]
    pub fn contains(&self, needle: &str) -> bool {
        self.0.iter().any(|p| p.contains(needle))
    }
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("\n"))
    }
}

fn parse_export(s: &str, flag: &str, read_only: bool) -> Result<ExportConf, String> {
    let bad = || format!("{flag} {s:?}: expected NAME=PATH[,uuid=UUID][,serial=SERIAL]");
    let (name, rest) = s.split_once('=').ok_or_else(bad)?;
    // Trailing `,uuid=` and `,serial=` options; a comma followed by anything else stays in
    // the path.
    let (mut path, mut uuid, mut serial) = (rest, None, None);
    while let Some((head, opt)) = path.rsplit_once(',') {
        match opt.split_once('=') {
            Some(("uuid", v)) if uuid.is_none() => uuid = Some(v.to_string()),
            Some(("serial", v)) if serial.is_none() => serial = Some(v.to_string()),
            _ => break,
        }
        path = head;
    }
    if name.is_empty() || path.is_empty() {
        return Err(bad());
    }
    Ok(ExportConf {
        name: name.to_string(),
        path: PathBuf::from(path),
        read_only,
        allow: Vec::new(),
        exclusive: None,
        secret_file: None,
        insecure: None,
        ceph_conf: None,
        ceph_client: None,
        ceph_keyring: None,
        break_lock: None,
        gateway: None,
        uuid,
        serial,
    })
}

/// Reads a key file: hex digits, whitespace around them ignored. It must not be readable by
/// others than its owner and group (it is a key). The text read is wiped once parsed.
/// `whose`: what the key is for, in messages ("export disk0", "host compute1").
pub fn read_secret(whose: &str, p: &Path) -> Result<Secret, String> {
    use std::os::unix::fs::PermissionsExt;
    let where_ = || format!("{whose}: key file {}", p.display());
    let meta = std::fs::metadata(p).map_err(|e| format!("{}: {e}", where_()))?;
    if meta.permissions().mode() & 0o004 != 0 {
        return Err(format!("{}: readable by everyone; chmod o-r it", where_()));
    }
    let mut text = std::fs::read(p).map_err(|e| format!("{}: {e}", where_()))?;
    rdmadisk_proto::auth::parse_then_wipe(&mut text, Secret::from_hex)
        .map_err(|e| format!("{}: {e}", where_()))
}

/// `ADDR=PATH` of `--host-key` and `--host-target-key`.
fn parse_host_flag(s: &str, flag: &str) -> Result<(IpAddr, PathBuf), String> {
    let bad = || format!("{flag} {s:?}: expected ADDR=PATH");
    let (a, p) = s.split_once('=').ok_or_else(bad)?;
    let addr = a.parse::<IpAddr>().map_err(|_| bad())?;
    if p.is_empty() {
        return Err(bad());
    }
    Ok((addr, PathBuf::from(p)))
}

/// The `[[host]]` tables and the `--host-key` flags, keys read: every problem noted.
fn hosts(args: &Args, file: &FileConf, p: &mut Problems) -> Vec<HostKey> {
    let mut confs = file.host.clone();
    for f in &args.host_keys {
        if let Some((addr, path)) = p.take(parse_host_flag(f, "--host-key").map(Some), None) {
            confs.push(HostConf {
                name: addr.to_string(),
                address: addr,
                secret_file: path,
                target_secret_file: None,
            });
        }
    }
    for f in &args.host_target_keys {
        let Some((addr, path)) = p.take(parse_host_flag(f, "--host-target-key").map(Some), None)
        else {
            continue;
        };
        match confs.iter_mut().find(|h| h.address == addr) {
            Some(h) => h.target_secret_file = Some(path),
            None => p.add(format!(
                "--host-target-key {f:?}: no --host-key or [[host]] for {addr}"
            )),
        }
    }
    let mut out: Vec<HostKey> = Vec::new();
    for h in confs {
        let addr = h.address.to_canonical();
        if out.iter().any(|o| o.addr == addr) {
            p.add(format!(
                "host {} ({addr}): the address has two keys",
                h.name
            ));
            continue;
        }
        let whose = format!("host {}", h.name);
        let Some(client) = p.take(read_secret(&whose, &h.secret_file).map(Some), None) else {
            continue;
        };
        let target = match &h.target_secret_file {
            Some(t) => match p.take(read_secret(&whose, t).map(Some), None) {
                Some(k) => k,
                None => continue,
            },
            None => client.clone(),
        };
        out.push(HostKey {
            name: h.name,
            addr,
            keys: Keys { client, target },
        });
    }
    out
}

/// The RDMA local ACK timeout exponent's default: 4.096 us * 2^17, about 0.54 s, what
/// rdma_cm gives a RoCE connection that sets none (nvmet-rdma's). With 2^20 (4.3 s) a lost
/// tail of a 128 KiB read's RDMA Write stalled it for 4.8 s; on the test bed 128 KiB reads at
/// depth 4 made 2.1-5.3 MB/s against 5.5-5.7 with 2^17 (userspace-tools/README.md).
pub const DEFAULT_ACK_TIMEOUT_EXP: u8 = 17;

fn range<T: PartialOrd + std::fmt::Display + Copy>(
    name: &str,
    v: T,
    lo: T,
    hi: T,
) -> Result<T, String> {
    if v < lo || v > hi {
        return Err(format!("{name} = {v}: must be {lo} to {hi}"));
    }
    Ok(v)
}

/// `inline_max`: a whole number of sectors, at most 64 KiB and at most the largest I/O.
fn inline_max(v: u32, max_io_bytes: u32) -> Result<u32, String> {
    let v = range("inline_max", v, 0, (64 << 10).min(max_io_bytes))?;
    if v % SECTOR_SIZE != 0 {
        return Err(format!(
            "inline_max = {v}: must be a multiple of {SECTOR_SIZE}"
        ));
    }
    Ok(v)
}

/// A pair of opposite switches (at most one is set: the last given wins, see `Args`), over
/// the file's value.
fn switch(on: bool, off: bool, file: Option<bool>) -> Option<bool> {
    if on {
        Some(true)
    } else if off {
        Some(false)
    } else {
        file
    }
}

impl Config {
    /// Bytes of one connection's own buffers, which count in `buffer_memory`: the larger of
    /// an RDMA connection's (receives and sends) and a TCP connection's (its receive staging),
    /// of the transports served.
    pub fn connection_bytes(&self) -> usize {
        let rdma = self
            .rdma_port
            .map(|_| rdma_conn_bytes(usize::from(self.credits), self.inline_max));
        let tcp = self.tcp_port.map(|_| TCP_STAGING);
        rdma.into_iter().chain(tcp).max().unwrap_or(0)
    }

    /// Merges the file (if any) and the flags, and checks the result: every problem found,
    /// or the configuration.
    pub fn load(args: &Args) -> Result<Config, Problems> {
        let (c, p) = Self::load_all(args);
        if p.is_empty() {
            Ok(c)
        } else {
            Err(p)
        }
    }

    /// Like [`Config::load`], but the configuration comes back with its problems: a setting
    /// that is wrong has its default in it, so that `--check-config` can go on and check the
    /// exports too.
    pub fn load_all(args: &Args) -> (Config, Problems) {
        let mut p = Problems::default();
        let file: FileConf = match &args.config {
            Some(path) => p.take(FileConf::read(path), FileConf::default()),
            None => FileConf::default(),
        };
        // A file that could not be read is one problem, not also every setting it lacks.
        let file_read = p.is_empty();
        let mut exports = file.export.clone();
        for e in &args.exports {
            if let Some(e) = p.take(parse_export(e, "--export", false).map(Some), None) {
                exports.push(e);
            }
        }
        for e in &args.exports_ro {
            if let Some(e) = p.take(parse_export(e, "--export-ro", true).map(Some), None) {
                exports.push(e);
            }
        }
        // Who may attach: the command line's choice, if it made one, else the file's.
        let (allow, allow_any) = if !args.allow.is_empty() || args.allow_any {
            (args.allow.clone(), args.allow_any)
        } else {
            (file.allow.clone(), file.allow_any.unwrap_or(false))
        };
        let credits = p.take(
            range(
                "credits",
                args.credits.or(file.credits).unwrap_or(32),
                1,
                1024,
            ),
            32,
        );
        let max_io_bytes = args.max_io_bytes.or(file.max_io_bytes).unwrap_or(1 << 20);
        let max_io_bytes =
            if max_io_bytes < 4096 || max_io_bytes % 4096 != 0 || max_io_bytes > 64 << 20 {
                p.add(format!(
                "max_io_bytes = {max_io_bytes}: must be a multiple of 4096 from 4096 to 67108864"
            ));
                1 << 20
            } else {
                max_io_bytes
            };
        let rdma_on = switch(args.rdma, args.no_rdma, file.no_rdma.map(|off| !off)).unwrap_or(true);
        let tcp_on = switch(args.tcp, args.no_tcp, file.no_tcp.map(|off| !off)).unwrap_or(true);
        let names = if args.hostile.is_empty() {
            &file.hostile
        } else {
            &args.hostile
        };
        let mut kinds = Vec::new();
        for n in names {
            if let Some(k) = p.take(Kind::parse(n).map(Some), None) {
                if !kinds.contains(&k) {
                    kinds.push(k);
                }
            }
        }
        let every = args.hostile_every.or(file.hostile_every).unwrap_or(3);
        if every == 0 {
            p.add("hostile_every must be at least 1");
        }
        let hostile = Hostile {
            kinds,
            every: every.max(1),
        };
        let listen = args
            .listen
            .or(file.listen)
            .unwrap_or(IpAddr::from([0, 0, 0, 0]));
        // Who may attach is never implied by where the target listens: a specific address is
        // still reachable from every host routed to it.
        if allow.is_empty() && !allow_any && file_read {
            p.add(
                "no allow-list: give --allow (or allow = [..]) with the clients' addresses, or --allow-any to let any client that reaches the target attach",
            );
        }
        if allow_any && !allow.is_empty() {
            p.add("allow_any and an allow-list exclude each other");
        }
        if let Err(e) = AllowList::parse(&allow) {
            p.add(format!("allow: {e}"));
        }
        let secs =
            |p: &mut Problems, name: &str, v: Option<u64>, default: u64, lo: u64, hi: u64| {
                Duration::from_secs(p.take(range(name, v.unwrap_or(default), lo, hi), default))
            };
        let idle = p.take(
            range(
                "idle_timeout_s",
                args.idle_timeout_s.or(file.idle_timeout_s).unwrap_or(120),
                0,
                86_400,
            ),
            120,
        );
        let level = args
            .log_level
            .clone()
            .or(file.log_level.clone())
            .unwrap_or_else(|| "info".into());
        let log_level = p.take(crate::logging::parse_level(&level), log::LevelFilter::Info);
        let lock_wait = Duration::from_secs(p.take(
            range(
                "lock_wait_s",
                args.lock_wait_s.or(file.lock_wait_s).unwrap_or(45),
                0,
                3600,
            ),
            45,
        ));
        let mut specs = Vec::new();
        for e in &exports {
            if rdmadisk_proto::wire::ExportName::new(e.name.as_bytes()).is_err() {
                p.add(format!(
                    "export name {:?}: 1-32 characters of [A-Za-z0-9._-]",
                    e.name
                ));
            }
            if let Err(err) = AllowList::parse(&e.allow) {
                p.add(format!("export {}: allow: {err}", e.name));
            }
            let flag = args
                .secret_files
                .iter()
                .filter_map(|s| s.split_once('='))
                .find(|(n, _)| *n == e.name)
                .map(|(_, p)| PathBuf::from(p));
            let secret = match flag.as_ref().or(e.secret_file.as_ref()) {
                Some(path) => p.take(
                    read_secret(&format!("export {}", e.name), path).map(Some),
                    None,
                ),
                None => None,
            };
            let exclusive = if args.exclusive.contains(&e.name) {
                true
            } else if args.no_exclusive.contains(&e.name) {
                false
            } else {
                e.exclusive.unwrap_or(true)
            };
            let rbd = match RbdSpec::parse_path(&e.path) {
                None => {
                    if args.break_lock.contains(&e.name) || e.break_lock.is_some() {
                        p.add(format!(
                            "export {}: break_lock is for RBD exports (rbd:POOL/IMAGE)",
                            e.name
                        ));
                    }
                    // Nothing would fence the other gateways' writes out of a local file.
                    if args.gateway.contains(&e.name) || e.gateway == Some(true) {
                        p.add(format!(
                            "export {}: gateway is for RBD exports (rbd:POOL/IMAGE): two \
                             gateways cannot share a local file or block device",
                            e.name
                        ));
                    }
                    None
                }
                Some(Err(err)) => {
                    p.add(format!("export {}: path {err}", e.name));
                    None
                }
                Some(Ok((pool, image))) => Some(RbdSpec {
                    pool,
                    image,
                    conf: e
                        .ceph_conf
                        .clone()
                        .or(args.ceph_conf.clone())
                        .or(file.ceph_conf.clone()),
                    client: e
                        .ceph_client
                        .clone()
                        .or(args.ceph_client.clone())
                        .or(file.ceph_client.clone()),
                    keyring: e
                        .ceph_keyring
                        .clone()
                        .or(args.ceph_keyring.clone())
                        .or(file.ceph_keyring.clone()),
                    break_lock: args.break_lock.contains(&e.name) || e.break_lock.unwrap_or(false),
                    lock_wait,
                    gateway: args.gateway.contains(&e.name) || e.gateway.unwrap_or(false),
                }),
            };
            specs.push(ExportSpec {
                name: e.name.clone(),
                path: e.path.clone(),
                rbd,
                read_only: e.read_only,
                allow: e.allow.clone(),
                exclusive,
                secret,
                insecure: args.insecure.contains(&e.name) || e.insecure.unwrap_or(false),
                uuid: e.uuid.as_ref().and_then(|u| {
                    p.take(
                        crate::identity::parse_uuid(&format!("export {}", e.name), u).map(Some),
                        None,
                    )
                }),
                serial: e.serial.as_ref().and_then(|v| {
                    p.take(
                        crate::identity::parse_serial(&format!("export {}", e.name), v).map(Some),
                        None,
                    )
                }),
            });
        }
        for (i, a) in specs.iter().enumerate() {
            if let Some(b) = specs[..i]
                .iter()
                .find(|b| a.uuid.is_some() && b.uuid == a.uuid)
            {
                p.add(format!(
                    "exports {} and {} have the same uuid",
                    b.name, a.name
                ));
            }
        }
        let buffer_memory = p.take(
            range(
                "buffer_memory",
                args.buffer_memory
                    .or(file.buffer_memory)
                    .unwrap_or(256 << 20),
                u64::from(max_io_bytes),
                1 << 40,
            ),
            256 << 20,
        );
        let c = Config {
            file: args.config.clone(),
            listen,
            rdma_port: rdma_on.then(|| {
                args.rdma_port
                    .or(file.rdma_port)
                    .unwrap_or(DEFAULT_RDMA_PORT)
            }),
            tcp_port: tcp_on.then(|| args.tcp_port.or(file.tcp_port).unwrap_or(DEFAULT_TCP_PORT)),
            allow,
            allow_any,
            max_io_bytes,
            queue_depth: args.queue_depth.or(file.queue_depth).unwrap_or(credits),
            credits,
            direct: switch(args.direct, args.no_direct, file.direct).unwrap_or(true),
            buffer_memory,
            rdma_window: p.take(
                range(
                    "rdma_window",
                    args.rdma_window.or(file.rdma_window).unwrap_or(256 << 10),
                    4096,
                    64 << 20,
                ),
                256 << 10,
            ),
            inline_max: p.take(
                inline_max(
                    args.inline_max.or(file.inline_max).unwrap_or(4096),
                    max_io_bytes,
                ),
                0,
            ),
            ack_timeout_exp: p.take(
                range(
                    "ack_timeout_exp",
                    args.ack_timeout_exp
                        .or(file.ack_timeout_exp)
                        .unwrap_or(DEFAULT_ACK_TIMEOUT_EXP),
                    14,
                    24,
                ),
                DEFAULT_ACK_TIMEOUT_EXP,
            ),
            poll_us: p.take(
                range(
                    "poll_us",
                    args.poll_us.or(file.poll_us).unwrap_or(0),
                    0,
                    1000,
                ),
                0,
            ),
            max_connections: p.take(
                range(
                    "max_connections",
                    args.max_connections.or(file.max_connections).unwrap_or(256),
                    1,
                    65_536,
                ),
                256,
            ),
            max_connections_per_host: p.take(
                range(
                    "max_connections_per_host",
                    args.max_connections_per_host
                        .or(file.max_connections_per_host)
                        .unwrap_or(64),
                    1,
                    65_536,
                ),
                64,
            ),
            hello_timeout: secs(
                &mut p,
                "hello_timeout_s",
                args.hello_timeout_s.or(file.hello_timeout_s),
                5,
                1,
                300,
            ),
            idle_timeout: (idle > 0).then(|| Duration::from_secs(idle)),
            send_timeout: secs(
                &mut p,
                "send_timeout_s",
                args.send_timeout_s.or(file.send_timeout_s),
                30,
                1,
                3600,
            ),
            shutdown_timeout: secs(
                &mut p,
                "shutdown_timeout_s",
                args.shutdown_timeout_s.or(file.shutdown_timeout_s),
                10,
                0,
                3600,
            ),
            stats_file: args.stats_file.clone().or(file.stats_file.clone()),
            log_level,
            corrupt_read_every: args
                .corrupt_read_every
                .or(file.corrupt_read_every)
                .unwrap_or(0),
            fail_write_crc_every: args
                .fail_write_crc_every
                .or(file.fail_write_crc_every)
                .unwrap_or(0),
            no_invalidate: args.no_invalidate,
            hostile,
            refuse_rdma_file: args.refuse_rdma_file.clone(),
            stall_sector: args.stall_sector,
            refuse_writes_file: args.refuse_writes_file.clone(),
            grant_no_credits: args.grant_no_credits,
            hosts: hosts(args, &file, &mut p),
            exports: specs,
            control_socket: args.control_socket.clone().or(file.control_socket.clone()),
            metrics_listen: args.metrics_listen.or(file.metrics_listen),
            metrics_file: args.metrics_file.clone().or(file.metrics_file.clone()),
        };
        if exports.is_empty() && file_read {
            p.add("no exports: give --export NAME=PATH or [[export]] in the config file");
        }
        let mut names: Vec<&str> = exports.iter().map(|e| e.name.as_str()).collect();
        names.sort_unstable();
        for w in names.windows(2).filter(|w| w[0] == w[1]) {
            p.add(format!("export {}: the name is used twice", w[0]));
        }
        for (flag, list) in [
            ("--no-exclusive", &args.no_exclusive),
            ("--exclusive", &args.exclusive),
            ("--insecure", &args.insecure),
            ("--break-lock", &args.break_lock),
            ("--gateway", &args.gateway),
        ] {
            for n in list
                .iter()
                .filter(|n| !c.exports.iter().any(|e| &e.name == *n))
            {
                p.add(format!("{flag} {n}: no such export"));
            }
        }
        for n in args
            .exclusive
            .iter()
            .filter(|n| args.no_exclusive.contains(n))
        {
            p.add(format!(
                "--exclusive {n} and --no-exclusive {n} contradict each other"
            ));
        }
        for f in &args.secret_files {
            match f.split_once('=') {
                Some((n, path)) if !path.is_empty() && c.exports.iter().any(|e| e.name == n) => {}
                _ => p.add(format!(
                    "--secret-file {f:?}: expected NAME=PATH of an export"
                )),
            }
        }
        if c.rdma_port.is_none() && c.tcp_port.is_none() {
            p.add("both transports disabled");
        }
        let own = c.connection_bytes();
        if c.buffer_memory < u64::from(c.max_io_bytes) + own as u64 {
            p.add(format!(
                "buffer_memory = {}: no connection could attach: one needs its own buffers ({own} bytes) and room for a request of max_io_bytes ({}) in it",
                c.buffer_memory, c.max_io_bytes
            ));
        }
        (c, p)
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
        walk(&<Args as clap::CommandFactory>::command(), &mut seen);
        assert!(seen >= 3, "only {seen} key options found");
    }

    fn base() -> Args {
        Args {
            listen: Some("127.0.0.1".parse().unwrap()),
            allow: vec!["127.0.0.1".into()],
            exports: vec!["a=/tmp/a.img".into()],
            ..Args::default()
        }
    }

    /// `rbd:POOL/IMAGE` paths, how the Ceph keys merge (the export's, then the flags', then
    /// the file's top level), and the RBD-only keys refused on a file export.
    #[test]
    fn rbd_exports() {
        let pp = |s: &str| RbdSpec::parse_path(Path::new(s));
        assert_eq!(pp("/dev/sda"), None);
        assert_eq!(pp("rbd:p/i"), Some(Ok(("p".into(), "i".into()))));
        for bad in [
            "rbd:",
            "rbd:p",
            "rbd:/i",
            "rbd:p/",
            "rbd:p/n/i",
            "rbd:p/i@snap",
        ] {
            assert!(matches!(pp(bad), Some(Err(_))), "{bad}");
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.toml");
        std::fs::write(
            &p,
            "ceph_conf = \"/f.conf\"\nceph_client = \"file\"\nlock_wait_s = 5\n\
             [[export]]\nname = \"v\"\npath = \"rbd:pool/img\"\nceph_client = \"own\"\n\
             [[export]]\nname = \"g\"\npath = \"rbd:pool/img\"\nread_only = true\n\
             gateway = true\n",
        )
        .unwrap();
        let c = Config::load(&Args {
            config: Some(p.clone()),
            ceph_conf: Some("/flag.conf".into()),
            break_lock: vec!["v".into()],
            ..base()
        })
        .unwrap();
        let v = c.exports.iter().find(|e| e.name == "v").unwrap();
        let r = v.rbd.as_ref().unwrap();
        assert_eq!((r.pool.as_str(), r.image.as_str()), ("pool", "img"));
        assert_eq!(r.conf.as_deref(), Some(Path::new("/flag.conf")));
        assert_eq!(r.client.as_deref(), Some("own"));
        assert_eq!(r.keyring, None);
        assert!(r.break_lock);
        assert_eq!(r.lock_wait, Duration::from_secs(5));
        assert!(!r.gateway);
        let g = c.exports.iter().find(|e| e.name == "g").unwrap();
        assert!(g.read_only && g.rbd.as_ref().unwrap().gateway);
        assert!(c
            .exports
            .iter()
            .find(|e| e.name == "a")
            .unwrap()
            .rbd
            .is_none());
        let problems = Config::load(&Args {
            break_lock: vec!["a".into()],
            gateway: vec!["a".into(), "nosuch".into()],
            exports: vec!["a=/tmp/a.img".into(), "b=rbd:nopool".into()],
            lock_wait_s: Some(4000),
            ..base()
        })
        .unwrap_err();
        for needle in [
            "export a: break_lock is for RBD exports",
            "export a: gateway is for RBD exports (rbd:POOL/IMAGE): two gateways cannot share a \
             local file",
            "--gateway nosuch: no such export",
            "export b: path \"rbd:nopool\": expected rbd:POOL/IMAGE",
            "lock_wait_s = 4000",
        ] {
            assert!(problems.contains(needle), "{needle:?} in\n{problems}");
        }
    }

    #[test]
    fn file_and_flags_merge() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.toml");
        std::fs::write(
            &p,
            r#"
listen = "127.0.0.1"
tcp_port = 9000
credits = 8
allow = ["10.0.0.0/8"]
idle_timeout_s = 0
poll_us = 50
[[export]]
name = "a"
path = "/tmp/a.img"
allow = ["10.1.0.0/16"]
exclusive = false
[[export]]
name = "b"
path = "/tmp/b.img"
read_only = true
"#,
        )
        .unwrap();
        let args = Args {
            config: Some(p),
            credits: Some(4),
            allow: vec!["127.0.0.2".into()],
            exports: vec!["c=/tmp/c.img".into()],
            ..Args::default()
        };
        let c = Config::load(&args).unwrap();
        assert_eq!(c.credits, 4);
        assert_eq!(c.queue_depth, 4);
        assert_eq!(c.tcp_port, Some(9000));
        assert_eq!(c.rdma_port, Some(7700));
        assert_eq!(
            c.allow,
            vec!["127.0.0.2".to_string()],
            "a list flag replaces the file's"
        );
        assert_eq!(c.exports.len(), 3);
        assert!(c.exports[1].read_only);
        assert_eq!(c.exports[0].allow, vec!["10.1.0.0/16".to_string()]);
        assert!(!c.exports[0].exclusive);
        assert!(c.exports[1].exclusive, "exclusive by default");
        assert_eq!(c.idle_timeout, None);
        assert_eq!(c.max_io_bytes, 1 << 20);
        assert!(!c.hostile.enabled());
        assert_eq!(c.poll_us, 50);
        let flag = Config::load(&Args {
            poll_us: Some(0),
            ..args
        })
        .unwrap();
        assert_eq!(flag.poll_us, 0, "the flag wins, and 0 turns it off");
    }

    #[test]
    fn access_is_denied_by_default() {
        let open = Args {
            exports: vec!["a=/tmp/a.img".into()],
            ..Args::default()
        };
        assert!(Config::load(&open).unwrap_err().contains("no allow-list"));
        let any = Args {
            listen: Some("0.0.0.0".parse().unwrap()),
            exports: vec!["a=/tmp/a.img".into()],
            ..Args::default()
        };
        assert!(Config::load(&any).is_err());
        let specific = Args {
            listen: Some("192.0.2.2".parse().unwrap()),
            exports: vec!["a=/tmp/a.img".into()],
            ..Args::default()
        };
        assert!(
            Config::load(&specific)
                .unwrap_err()
                .contains("no allow-list"),
            "a specific address admits nobody by itself: anyone routed to it would reach it"
        );
        let c = Config::load(&base()).unwrap();
        assert!(!c.allow_any);
        let c = Config::load(&Args {
            allow_any: true,
            allow: Vec::new(),
            listen: None,
            ..base()
        })
        .unwrap();
        assert!(c.allow_any);
        assert!(Config::load(&Args {
            allow_any: true,
            allow: vec!["10.0.0.1".into()],
            ..base()
        })
        .is_err());
    }

    #[test]
    fn secrets_come_from_private_files() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("k");
        std::fs::write(&key, "00112233445566778899aabbccddeeff\n").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let p = dir.path().join("t.toml");
        std::fs::write(
            &p,
            format!(
                "listen = \"127.0.0.1\"\nallow = [\"127.0.0.1\"]\n[[export]]\nname = \"a\"\npath = \"/tmp/a\"\nsecret_file = \"{}\"\n",
                key.display()
            ),
        )
        .unwrap();
        let a = Args {
            config: Some(p.clone()),
            ..Args::default()
        };
        assert!(Config::load(&a).unwrap().exports[0].secret.is_some());
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(Config::load(&a)
            .unwrap_err()
            .contains("readable by everyone"));
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&key, "abcd").unwrap();
        assert!(Config::load(&a).unwrap_err().contains("16 to 64 bytes"));
    }

    #[test]
    fn hostile_from_file_and_flags() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.toml");
        std::fs::write(
            &p,
            r#"
listen = "127.0.0.1"
allow = ["127.0.0.1"]
hostile = ["bad_status", "late-write", "bad_status"]
hostile_every = 5
[[export]]
name = "a"
path = "/tmp/a.img"
"#,
        )
        .unwrap();
        let file_only = Args {
            config: Some(p.clone()),
            ..Args::default()
        };
        let c = Config::load(&file_only).unwrap();
        assert_eq!(
            c.hostile,
            Hostile {
                kinds: vec![Kind::BadStatus, Kind::LateWrite],
                every: 5
            }
        );
        let flags = Args {
            config: Some(p.clone()),
            hostile: vec!["garbage".into()],
            hostile_every: Some(1),
            ..Args::default()
        };
        let c = Config::load(&flags).unwrap();
        assert_eq!(
            c.hostile,
            Hostile {
                kinds: vec![Kind::Garbage],
                every: 1
            }
        );
        let bad = Args {
            config: Some(p.clone()),
            hostile: vec!["nope".into()],
            ..Args::default()
        };
        assert!(Config::load(&bad)
            .unwrap_err()
            .contains("unknown hostile kind"));
        let zero = Args {
            config: Some(p),
            hostile_every: Some(0),
            ..Args::default()
        };
        assert!(Config::load(&zero).is_err());
        let parsed = Args::try_parse_from([
            "rdmadisk-target",
            "--hostile",
            "unknown_tag,dup_response",
            "--hostile",
            "garbage",
            "--hostile-every",
            "2",
        ])
        .unwrap();
        assert_eq!(
            parsed.hostile,
            vec!["unknown_tag", "dup_response", "garbage"]
        );
        assert_eq!(parsed.hostile_every, Some(2));
    }

    /// A config file in a temp dir, with `name = "a"` exported.
    fn file(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("t.toml");
        std::fs::write(
            &p,
            format!("{text}\n[[export]]\nname = \"a\"\npath = \"a.img\"\nexclusive = false\n"),
        )
        .unwrap();
        p
    }

    #[test]
    fn switches_override_the_file_both_ways() {
        let dir = tempfile::tempdir().unwrap();
        let off = file(
            dir.path(),
            "listen = \"127.0.0.1\"\nallow_any = true\nno_rdma = true\nno_tcp = true\ndirect = false",
        );
        let c = Config::load(&Args {
            config: Some(off.clone()),
            rdma: true,
            tcp: true,
            direct: true,
            exclusive: vec!["a".into()],
            ..Args::default()
        })
        .unwrap();
        assert_eq!((c.rdma_port, c.tcp_port), (Some(7700), Some(7701)));
        assert!(c.direct);
        assert!(
            c.exports[0].exclusive,
            "--exclusive wins over exclusive = false"
        );
        let on = file(
            dir.path(),
            "listen = \"127.0.0.1\"\nallow_any = true\ndirect = true",
        );
        let c = Config::load(&Args {
            config: Some(on),
            no_rdma: true,
            no_direct: true,
            ..Args::default()
        })
        .unwrap();
        assert_eq!((c.rdma_port, c.tcp_port), (None, Some(7701)));
        assert!(!c.direct);
        assert!(
            !c.exports[0].exclusive,
            "the file's exclusive = false stands"
        );
        // Of two opposite flags, the last wins.
        for (flags, rdma) in [
            (["--rdma", "--no-rdma"], false),
            (["--no-rdma", "--rdma"], true),
        ] {
            let a = Args::try_parse_from(["rdmadisk-target"].into_iter().chain(flags)).unwrap();
            assert_eq!((a.rdma, a.no_rdma), (rdma, !rdma), "{flags:?}");
        }
        assert!(Config::load(&Args {
            config: Some(off),
            exclusive: vec!["a".into()],
            no_exclusive: vec!["a".into()],
            ..Args::default()
        })
        .unwrap_err()
        .contains("contradict"));
    }

    #[test]
    fn access_on_the_command_line_replaces_the_file_s() {
        let dir = tempfile::tempdir().unwrap();
        let listed = file(dir.path(), "allow = [\"10.0.0.0/8\"]");
        let c = Config::load(&Args {
            config: Some(listed),
            allow_any: true,
            ..Args::default()
        })
        .unwrap();
        assert!(c.allow_any && c.allow.is_empty());
        let any = file(dir.path(), "allow_any = true");
        let c = Config::load(&Args {
            config: Some(any.clone()),
            allow: vec!["10.1.0.0/16".into()],
            ..Args::default()
        })
        .unwrap();
        assert!(!c.allow_any);
        assert_eq!(c.allow, vec!["10.1.0.0/16".to_string()]);
        assert!(
            Config::load(&Args {
                config: Some(any),
                ..Args::default()
            })
            .unwrap()
            .allow_any
        );
    }

    #[test]
    fn exports_from_flags_are_added_and_names_stay_unique() {
        let dir = tempfile::tempdir().unwrap();
        let f = file(dir.path(), "listen = \"127.0.0.1\"\nallow_any = true");
        let c = Config::load(&Args {
            config: Some(f.clone()),
            exports_ro: vec!["b=b.img".into()],
            ..Args::default()
        })
        .unwrap();
        let names: Vec<_> = c.exports.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert!(Config::load(&Args {
            config: Some(f),
            exports: vec!["a=other.img".into()],
            ..Args::default()
        })
        .unwrap_err()
        .contains("export a: the name is used twice"));
    }

    #[test]
    fn every_problem_is_reported() {
        let p = Config::load(&Args {
            exports: vec!["noequals".into(), "bad name=/a".into()],
            credits: Some(0),
            hello_timeout_s: Some(0),
            log_level: Some("loud".into()),
            hostile: vec!["nope".into()],
            allow: vec!["10.0.0.300".into()],
            ..Args::default()
        })
        .unwrap_err();
        for needle in [
            "--export \"noequals\"",
            "export name \"bad name\"",
            "credits = 0",
            "hello_timeout_s = 0",
            "log level \"loud\"",
            "unknown hostile kind",
            "allow:",
        ] {
            assert!(p.contains(needle), "{needle:?} in\n{p}");
        }
        assert_eq!(p.0.len(), 7, "{p}");
    }

    /// The keys serde knows for a table, from its complaint about one it does not.
    fn known_keys(toml_text: &str) -> Vec<String> {
        let err = toml::from_str::<FileConf>(toml_text)
            .unwrap_err()
            .to_string();
        let expected = err.split("expected one of").nth(1).expect(&err);
        expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn export_flag_takes_an_identity() {
        let e = parse_export(
            "a=/srv/a,b.img,serial=SN1,uuid=0123abcd-4567-89ef-0011-223344556677",
            "--export",
            false,
        )
        .unwrap();
        assert_eq!(e.path, PathBuf::from("/srv/a,b.img"));
        assert_eq!(e.serial.as_deref(), Some("SN1"));
        assert_eq!(
            e.uuid.as_deref(),
            Some("0123abcd-4567-89ef-0011-223344556677")
        );
        let plain = parse_export("a=/srv/a,uuid", "--export", false).unwrap();
        assert_eq!(plain.path, PathBuf::from("/srv/a,uuid"));
        assert_eq!(plain.uuid, None);
        assert!(parse_export("a=,uuid=x", "--export", false).is_err());
        let args = |exports: Vec<String>| Args {
            exports,
            allow_any: true,
            ..Args::default()
        };
        let (_, p) = Config::load_all(&args(vec![
            "a=/dev/null,uuid=nope,serial=a b".into(),
            "b=/dev/null,uuid=0123abcd-4567-89ef-0011-223344556677".into(),
            "c=/dev/null,uuid=0123ABCD-4567-89ef-0011-223344556677".into(),
        ]));
        assert!(p.contains("export a: uuid \"nope\""), "{p}");
        assert!(p.contains("export a: serial \"a b\""), "{p}");
        assert!(p.contains("exports b and c have the same uuid"), "{p}");
    }

    #[test]
    fn the_example_file_is_complete_and_valid() {
        let text = include_str!("../rdmadisk-target.example.toml");
        // Its commented-out settings ("#key = ...") too: they must be real keys.
        let all: String = text
            .lines()
            .map(|l| match l.strip_prefix('#') {
                Some(rest) if rest.starts_with(|c: char| c.is_ascii_lowercase()) => rest,
                _ => l,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let parsed: FileConf = toml::from_str(&all).unwrap();
        assert_eq!(parsed.export.len(), 3);
        assert_eq!(parsed.host.len(), 1);
        let top = known_keys("zzz = 1");
        let export = known_keys("[[export]]\nname = \"a\"\npath = \"p\"\nzzz = 1");
        let host = known_keys(
            "[[host]]\nname = \"a\"\naddress = \"192.0.2.1\"\nsecret_file = \"k\"\nzzz = 1",
        );
        assert!(
            top.len() > 20 && export.len() == 14 && host.len() == 4,
            "{top:?} {export:?} {host:?}"
        );
        for k in top.iter().chain(&export).chain(&host) {
            let set = |l: &str| {
                l.trim_start_matches('#').starts_with(&format!("{k} =")) || l == format!("[[{k}]]")
            };
            assert!(text.lines().any(set), "the example does not show {k}");
        }
        // Valid as a whole: only the key files, which are not on this host, are missing.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("example.toml");
        std::fs::write(&p, text).unwrap();
        match Config::load(&Args {
            config: Some(p),
            ..Args::default()
        }) {
            Ok(c) => assert!(c.exports[0].secret.is_some()),
            Err(problems) => {
                assert!(
                    problems.0.iter().all(|e| e.contains("key file")),
                    "{problems}"
                )
            }
        }
    }

    #[test]
    fn the_quickstart_file_is_valid() {
        // The README's quick start installs it as it is (test 96 runs it in the bed).
        let text = include_str!("../target.quickstart.toml");
        let parsed: FileConf = toml::from_str(text).unwrap();
        assert_eq!((parsed.export.len(), parsed.host.len()), (1, 1));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("target.toml");
        std::fs::write(&p, text).unwrap();
        let problems = Config::load(&Args {
            config: Some(p),
            ..Args::default()
        })
        .expect_err("its key file is not on this host");
        assert!(
            problems.0.iter().all(|e| e.contains("key file")),
            "{problems}"
        );
    }

    #[test]
    fn rejects_bad_config() {
        assert!(Config::load(&Args::default()).is_err());
        for bad in [
            Args {
                exports: vec!["noequals".into()],
                ..base()
            },
            Args {
                exports: vec!["x=/a".into(), "x=/b".into()],
                ..base()
            },
            Args {
                exports: vec!["bad name=/a".into()],
                ..base()
            },
            Args {
                credits: Some(0),
                ..base()
            },
            Args {
                max_io_bytes: Some(1000),
                ..base()
            },
            Args {
                no_rdma: true,
                no_tcp: true,
                ..base()
            },
            Args {
                hello_timeout_s: Some(0),
                ..base()
            },
            Args {
                buffer_memory: Some(4096),
                ..base()
            },
            Args {
                log_level: Some("loud".into()),
                ..base()
            },
            Args {
                poll_us: Some(1001),
                ..base()
            },
        ] {
            assert!(Config::load(&bad).is_err(), "{bad:?}");
        }
    }
}
