//! Command line and TOML configuration.
//!
//! A flag given on the command line wins over the same key in the file: for a value (a port, a
//! size) the flag's value is used; a list flag (`--allow`, `--hostile`) replaces the file's
//! list; a switch (`--no-rdma`, `--allow-any`...) turns the setting on whatever the file says
//! (a switch cannot turn off what the file turned on). Exports from flags are added to the
//! file's.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use rdmadisk_proto::auth::Secret;
use rdmadisk_proto::options::DEFAULT_TCP_PORT;
use rdmadisk_proto::wire::SECTOR_SIZE;
use serde::Deserialize;

use crate::hostile::{Hostile, Kind};

/// rdmadisk storage target: serves block exports to rdmadisk clients over RDMA (rdma_cm, RC
/// queue pairs) and TCP.
#[derive(Parser, Debug, Default)]
#[command(
    version,
    about,
    after_help = "\
Access is denied by default: give an allow-list (--allow, or allow = [..] in the file), or
--listen with a specific address (everyone who can reach it may attach), or --allow-any.

EXAMPLES:
  rdmadisk-target --listen 192.0.2.2 --allow 192.0.2.0/24 --export disk0=/dev/nvme0n1
  rdmadisk-target --config /etc/rdmadisk/target.toml --stats-file /run/rdmadisk-target.stats

TOML keys: listen, rdma_port, tcp_port, no_rdma, no_tcp, allow = [..], allow_any,
max_io_bytes, queue_depth, credits, direct, buffer_memory, rdma_window, inline_max,
ack_timeout_exp, max_connections,
max_connections_per_host, hello_timeout_s, idle_timeout_s, send_timeout_s,
shutdown_timeout_s, stats_file, log_level, corrupt_read_every, fail_write_crc_every,
hostile = [..], hostile_every, and [[export]] tables with name, path, read_only, allow = [..],
exclusive, secret_file. See userspace-tools/README.md."
)]
pub struct Args {
    /// TOML configuration file.
    #[arg(long, short = 'c')]
    pub config: Option<PathBuf>,
    /// Check the configuration and the exports (open them), print what would be served, exit.
    #[arg(long)]
    pub check_config: bool,
    /// Address to listen on (both transports). Default 0.0.0.0, which needs an allow-list or
    /// --allow-any.
    #[arg(long)]
    pub listen: Option<IpAddr>,
    /// rdma_cm port. Default 7700.
    #[arg(long)]
    pub rdma_port: Option<u16>,
    /// TCP port (0 = any free port, printed at start). Default 7701.
    #[arg(long)]
    pub tcp_port: Option<u16>,
    /// Do not listen on RDMA.
    #[arg(long)]
    pub no_rdma: bool,
    /// Do not listen on TCP.
    #[arg(long)]
    pub no_tcp: bool,
    /// Export NAME=PATH (a file or block device), read-write. Repeatable.
    #[arg(long = "export", value_name = "NAME=PATH")]
    pub exports: Vec<String>,
    /// Export NAME=PATH read-only. Repeatable.
    #[arg(long = "export-ro", value_name = "NAME=PATH")]
    pub exports_ro: Vec<String>,
    /// Require the secret in PATH (hex, 16 to 64 bytes, not readable by others) from clients
    /// of export NAME. Repeatable.
    #[arg(long = "secret-file", value_name = "NAME=PATH")]
    pub secret_files: Vec<String>,
    /// Let several client hosts attach export NAME read-write at once (by default one host
    /// at a time). Repeatable.
    #[arg(long = "no-exclusive", value_name = "NAME")]
    pub no_exclusive: Vec<String>,
    /// Allowed client address or CIDR block, for every export. Repeatable.
    #[arg(long = "allow", value_name = "IP[/PREFIX]")]
    pub allow: Vec<String>,
    /// Let any client attach (no allow-list). Needed when none is given and --listen is not a
    /// specific address.
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
    #[arg(long)]
    pub no_direct: bool,
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
    /// Connections at once. Default 256.
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Connections at once from one client address. Default 64.
    #[arg(long)]
    pub max_connections_per_host: Option<usize>,
    /// Seconds a TCP client has for its whole Hello. Default 5.
    #[arg(long)]
    pub hello_timeout_s: Option<u64>,
    /// Seconds without a message (and nothing in flight) after which a connection is closed;
    /// 0: never. Default 120 (clients send keepalives well within it).
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
    /// Rewrite counters to this file every second and on SIGUSR1 (key=value lines).
    #[arg(long)]
    pub stats_file: Option<PathBuf>,
    /// Log level: error, warn, info, debug or trace. Default info.
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
    /// TEST ONLY: responses grant no credits back (the Hello reply still grants the initial
    /// ones), so a client runs out of credits with nothing in flight.
    #[arg(long)]
    pub grant_no_credits: bool,
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
    pub export: Vec<ExportConf>,
}

/// One export, as configured.
#[derive(Debug, Clone)]
pub struct ExportSpec {
    pub name: String,
    pub path: PathBuf,
    pub read_only: bool,
    pub allow: Vec<String>,
    pub exclusive: bool,
    pub secret: Option<Secret>,
}

/// The merged configuration.
#[derive(Debug, Clone)]
pub struct Config {
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
    pub grant_no_credits: bool,
    pub exports: Vec<ExportSpec>,
    pub check_only: bool,
}

fn parse_export(s: &str, read_only: bool) -> Result<ExportConf, String> {
    let (name, path) = s
        .split_once('=')
        .ok_or_else(|| format!("--export {s:?}: expected NAME=PATH"))?;
    if name.is_empty() || path.is_empty() {
        return Err(format!("--export {s:?}: expected NAME=PATH"));
    }
    Ok(ExportConf {
        name: name.to_string(),
        path: PathBuf::from(path),
        read_only,
        allow: Vec::new(),
        exclusive: None,
        secret_file: None,
    })
}

/// Reads a secret file: hex digits, whitespace around them ignored. It must not be readable
/// by others than its owner and group (it is a key).
fn read_secret(export: &str, p: &std::path::Path) -> Result<Secret, String> {
    use std::os::unix::fs::PermissionsExt;
    let where_ = || format!("export {export}: secret file {}", p.display());
    let meta = std::fs::metadata(p).map_err(|e| format!("{}: {e}", where_()))?;
    if meta.permissions().mode() & 0o004 != 0 {
        return Err(format!("{}: readable by everyone; chmod o-r it", where_()));
    }
    let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", where_()))?;
    Secret::from_hex(text.trim().as_bytes()).map_err(|e| format!("{}: {e}", where_()))
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

impl Config {
    /// Merges the file (if any) and the flags, and checks the result.
    pub fn load(args: &Args) -> Result<Config, String> {
        let file: FileConf = match &args.config {
            Some(p) => {
                let text =
                    std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
                toml::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?
            }
            None => FileConf::default(),
        };
        let mut exports = file.export.clone();
        for e in &args.exports {
            exports.push(parse_export(e, false)?);
        }
        for e in &args.exports_ro {
            exports.push(parse_export(e, true)?);
        }
        let allow = if args.allow.is_empty() {
            file.allow.clone()
        } else {
            args.allow.clone()
        };
        let credits = range(
            "credits",
            args.credits.or(file.credits).unwrap_or(32),
            1,
            1024,
        )?;
        let max_io_bytes = args.max_io_bytes.or(file.max_io_bytes).unwrap_or(1 << 20);
        if max_io_bytes < 4096 || max_io_bytes % 4096 != 0 || max_io_bytes > 64 << 20 {
            return Err(format!(
                "max_io_bytes = {max_io_bytes}: must be a multiple of 4096 from 4096 to 67108864"
            ));
        }
        let no_rdma = args.no_rdma || file.no_rdma.unwrap_or(false);
        let no_tcp = args.no_tcp || file.no_tcp.unwrap_or(false);
        let names = if args.hostile.is_empty() {
            &file.hostile
        } else {
            &args.hostile
        };
        let mut kinds = Vec::new();
        for n in names {
            let k = Kind::parse(n)?;
            if !kinds.contains(&k) {
                kinds.push(k);
            }
        }
        let hostile = Hostile {
            kinds,
            every: args.hostile_every.or(file.hostile_every).unwrap_or(3),
        };
        if hostile.every == 0 {
            return Err("hostile_every must be at least 1".into());
        }
        let listen_given = args.listen.or(file.listen);
        let listen = listen_given.unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let mut allow_any = args.allow_any || file.allow_any.unwrap_or(false);
        if allow.is_empty() && !allow_any {
            match listen_given {
                // A specific address: the operator chose who can reach it.
                Some(a) if !a.is_unspecified() => allow_any = true,
                _ => {
                    return Err(
                        "no allow-list: give --allow (or allow = [..]), --listen with a specific address, or --allow-any to let any client attach"
                            .into(),
                    )
                }
            }
        }
        if allow_any && !allow.is_empty() {
            return Err("allow_any and an allow-list exclude each other".into());
        }
        let secs = |name: &str, v: Option<u64>, default: u64, lo: u64, hi: u64| {
            range(name, v.unwrap_or(default), lo, hi).map(Duration::from_secs)
        };
        let idle = range(
            "idle_timeout_s",
            args.idle_timeout_s.or(file.idle_timeout_s).unwrap_or(120),
            0,
            86_400,
        )?;
        let level = args
            .log_level
            .clone()
            .or(file.log_level.clone())
            .unwrap_or_else(|| "info".into());
        let mut specs = Vec::new();
        for e in &exports {
            rdmadisk_proto::wire::ExportName::new(e.name.as_bytes()).map_err(|_| {
                format!(
                    "export name {:?}: 1-32 characters of [A-Za-z0-9._-]",
                    e.name
                )
            })?;
            let flag = args
                .secret_files
                .iter()
                .filter_map(|s| s.split_once('='))
                .find(|(n, _)| *n == e.name)
                .map(|(_, p)| PathBuf::from(p));
            let secret = match flag.as_ref().or(e.secret_file.as_ref()) {
                Some(p) => Some(read_secret(&e.name, p)?),
                None => None,
            };
            specs.push(ExportSpec {
                name: e.name.clone(),
                path: e.path.clone(),
                read_only: e.read_only,
                allow: e.allow.clone(),
                exclusive: e.exclusive.unwrap_or(true) && !args.no_exclusive.contains(&e.name),
                secret,
            });
        }
        let c = Config {
            listen,
            rdma_port: if no_rdma {
                None
            } else {
                Some(args.rdma_port.or(file.rdma_port).unwrap_or(7700))
            },
            tcp_port: if no_tcp {
                None
            } else {
                Some(args.tcp_port.or(file.tcp_port).unwrap_or(DEFAULT_TCP_PORT))
            },
            allow,
            allow_any,
            max_io_bytes,
            queue_depth: args.queue_depth.or(file.queue_depth).unwrap_or(credits),
            credits,
            direct: !args.no_direct && file.direct.unwrap_or(true),
            buffer_memory: range(
                "buffer_memory",
                args.buffer_memory
                    .or(file.buffer_memory)
                    .unwrap_or(256 << 20),
                u64::from(max_io_bytes),
                1 << 40,
            )?,
            rdma_window: range(
                "rdma_window",
                args.rdma_window.or(file.rdma_window).unwrap_or(256 << 10),
                4096,
                64 << 20,
            )?,
            inline_max: inline_max(
                args.inline_max.or(file.inline_max).unwrap_or(4096),
                max_io_bytes,
            )?,
            ack_timeout_exp: range(
                "ack_timeout_exp",
                args.ack_timeout_exp
                    .or(file.ack_timeout_exp)
                    .unwrap_or(DEFAULT_ACK_TIMEOUT_EXP),
                14,
                24,
            )?,
            max_connections: range(
                "max_connections",
                args.max_connections.or(file.max_connections).unwrap_or(256),
                1,
                65_536,
            )?,
            max_connections_per_host: range(
                "max_connections_per_host",
                args.max_connections_per_host
                    .or(file.max_connections_per_host)
                    .unwrap_or(64),
                1,
                65_536,
            )?,
            hello_timeout: secs(
                "hello_timeout_s",
                args.hello_timeout_s.or(file.hello_timeout_s),
                5,
                1,
                300,
            )?,
            idle_timeout: (idle > 0).then(|| Duration::from_secs(idle)),
            send_timeout: secs(
                "send_timeout_s",
                args.send_timeout_s.or(file.send_timeout_s),
                30,
                1,
                3600,
            )?,
            shutdown_timeout: secs(
                "shutdown_timeout_s",
                args.shutdown_timeout_s.or(file.shutdown_timeout_s),
                10,
                0,
                3600,
            )?,
            stats_file: args.stats_file.clone().or(file.stats_file),
            log_level: crate::logging::parse_level(&level)?,
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
            grant_no_credits: args.grant_no_credits,
            exports: specs,
            check_only: args.check_config,
        };
        if c.exports.is_empty() {
            return Err(
                "no exports: give --export NAME=PATH or [[export]] in the config file".into(),
            );
        }
        let mut names: Vec<&str> = c.exports.iter().map(|e| e.name.as_str()).collect();
        names.sort_unstable();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return Err("duplicate export name".into());
        }
        if let Some(n) = args
            .no_exclusive
            .iter()
            .find(|n| !c.exports.iter().any(|e| &e.name == *n))
        {
            return Err(format!("--no-exclusive {n}: no such export"));
        }
        for f in &args.secret_files {
            match f.split_once('=') {
                Some((n, p)) if !p.is_empty() && c.exports.iter().any(|e| e.name == n) => {}
                _ => {
                    return Err(format!(
                        "--secret-file {f:?}: expected NAME=PATH of an export"
                    ))
                }
            }
        }
        if c.rdma_port.is_none() && c.tcp_port.is_none() {
            return Err("both transports disabled".into());
        }
        if u64::from(c.max_io_bytes) > c.buffer_memory {
            return Err("buffer_memory must hold at least one max_io_bytes buffer".into());
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Args {
        Args {
            listen: Some("127.0.0.1".parse().unwrap()),
            exports: vec!["a=/tmp/a.img".into()],
            ..Args::default()
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
        assert!(
            Config::load(&any).is_err(),
            "0.0.0.0 is not a specific address"
        );
        let c = Config::load(&base()).unwrap();
        assert!(c.allow_any, "a specific address admits whoever reaches it");
        let c = Config::load(&Args {
            allow_any: true,
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
                "listen = \"127.0.0.1\"\n[[export]]\nname = \"a\"\npath = \"/tmp/a\"\nsecret_file = \"{}\"\n",
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
        ] {
            assert!(Config::load(&bad).is_err(), "{bad:?}");
        }
    }
}
