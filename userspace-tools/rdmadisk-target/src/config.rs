//! Command line and TOML configuration. Flags override the file.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::Parser;
use rdmadisk_proto::options::DEFAULT_TCP_PORT;
use serde::Deserialize;

use crate::hostile::{Hostile, Kind};

/// rdmadisk storage target: serves block exports to rdmadisk clients over RDMA (rdma_cm, RC
/// queue pairs) and TCP.
#[derive(Parser, Debug, Default)]
#[command(
    version,
    about,
    after_help = "\
EXAMPLES:
  rdmadisk-target --export disk0=/var/lib/rdmadisk/disk0.img --allow 192.0.2.0/24
  rdmadisk-target --config /etc/rdmadisk/target.toml --stats-file /run/rdmadisk.stats

TOML keys: listen, rdma_port, tcp_port, no_rdma, no_tcp, allow = [..], max_io_bytes,
queue_depth, credits, direct, stats_file, corrupt_read_every, fail_write_crc_every,
hostile = [..], hostile_every, and [[export]] tables with name, path, read_only."
)]
pub struct Args {
    /// TOML configuration file.
    #[arg(long, short = 'c')]
    pub config: Option<PathBuf>,
    /// Address to listen on (both transports). Default 0.0.0.0.
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
    /// Allowed client address or CIDR block. Repeatable; none = allow every client.
    #[arg(long = "allow", value_name = "IP[/PREFIX]")]
    pub allow: Vec<String>,
    /// Largest I/O in bytes. Default 1 MiB.
    #[arg(long)]
    pub max_io_bytes: Option<u32>,
    /// Requests in flight per queue advertised to clients. Default = credits.
    #[arg(long)]
    pub queue_depth: Option<u16>,
    /// Receives posted per connection, i.e. request credits. Default 32.
    #[arg(long)]
    pub credits: Option<u16>,
    /// Do not use O_DIRECT on backing files.
    #[arg(long)]
    pub no_direct: bool,
    /// Rewrite counters to this file every second and on SIGUSR1 (key=value lines).
    #[arg(long)]
    pub stats_file: Option<PathBuf>,
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
    pub max_io_bytes: Option<u32>,
    pub queue_depth: Option<u16>,
    pub credits: Option<u16>,
    pub direct: Option<bool>,
    pub stats_file: Option<PathBuf>,
    pub corrupt_read_every: Option<u64>,
    pub fail_write_crc_every: Option<u64>,
    #[serde(default)]
    pub hostile: Vec<String>,
    pub hostile_every: Option<u64>,
    #[serde(default)]
    pub export: Vec<ExportConf>,
}

/// The merged configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: IpAddr,
    pub rdma_port: Option<u16>,
    pub tcp_port: Option<u16>,
    pub allow: Vec<String>,
    pub max_io_bytes: u32,
    pub queue_depth: u16,
    pub credits: u16,
    pub direct: bool,
    pub stats_file: Option<PathBuf>,
    pub corrupt_read_every: u64,
    pub fail_write_crc_every: u64,
    pub no_invalidate: bool,
    pub hostile: Hostile,
    pub refuse_rdma_file: Option<PathBuf>,
    pub stall_sector: Option<u64>,
    pub grant_no_credits: bool,
    pub exports: Vec<ExportConf>,
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
    })
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
        let mut allow = file.allow.clone();
        allow.extend(args.allow.iter().cloned());
        let credits = args.credits.or(file.credits).unwrap_or(32);
        let max_io_bytes = args.max_io_bytes.or(file.max_io_bytes).unwrap_or(1 << 20);
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
        let c = Config {
            listen: args
                .listen
                .or(file.listen)
                .unwrap_or(IpAddr::from([0, 0, 0, 0])),
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
            max_io_bytes,
            queue_depth: args.queue_depth.or(file.queue_depth).unwrap_or(credits),
            credits,
            direct: !args.no_direct && file.direct.unwrap_or(true),
            stats_file: args.stats_file.clone().or(file.stats_file),
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
            exports,
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
        for e in &c.exports {
            rdmadisk_proto::wire::ExportName::new(e.name.as_bytes()).map_err(|_| {
                format!(
                    "export name {:?}: 1-32 characters of [A-Za-z0-9._-]",
                    e.name
                )
            })?;
        }
        if c.credits == 0 || c.credits > 4096 {
            return Err("credits must be 1..=4096".into());
        }
        if c.max_io_bytes < 4096 || c.max_io_bytes % 4096 != 0 || c.max_io_bytes > 64 << 20 {
            return Err("max_io_bytes must be a multiple of 4096 between 4 KiB and 64 MiB".into());
        }
        if c.hostile.every == 0 {
            return Err("hostile_every must be at least 1".into());
        }
        if c.rdma_port.is_none() && c.tcp_port.is_none() {
            return Err("both transports disabled".into());
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
[[export]]
name = "a"
path = "/tmp/a.img"
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
            vec!["10.0.0.0/8".to_string(), "127.0.0.2".to_string()]
        );
        assert_eq!(c.exports.len(), 3);
        assert!(c.exports[1].read_only);
        assert_eq!(c.max_io_bytes, 1 << 20);
        assert!(!c.hostile.enabled());
    }

    #[test]
    fn hostile_from_file_and_flags() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.toml");
        std::fs::write(
            &p,
            r#"
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
        let a = Args {
            exports: vec!["noequals".into()],
            ..Args::default()
        };
        assert!(Config::load(&a).is_err());
        let a = Args {
            exports: vec!["x=/a".into(), "x=/b".into()],
            ..Args::default()
        };
        assert!(Config::load(&a).is_err());
        let a = Args {
            exports: vec!["bad name=/a".into()],
            ..Args::default()
        };
        assert!(Config::load(&a).is_err());
    }
}
