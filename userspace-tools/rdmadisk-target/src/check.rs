//! `--check-config`: the configuration (file and flags) and its exports checked the way a
//! start would use them, without serving and without taking any export's exclusive hold, so
//! that it can run before a start (the systemd unit's `ExecStartPre`) and beside a running
//! target (a changed file, before the restart that applies it).
//!
//! Every problem is reported, not only the first. What it cannot know without taking a hold
//! or a port: whether another program holds an export (a mounted device, another target's
//! lock) and whether the ports are free; a start finds those.

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener};

use crate::config::{Config, Problems};

/// What `--check-config` found: the summary of what would be served, and the problems.
pub struct Report {
    pub summary: String,
    pub problems: Problems,
}

/// Checks `cfg`, whose own problems (from [`Config::load_all`]) are `problems`.
pub fn check(cfg: &Config, mut problems: Problems) -> Report {
    let mut s = String::new();
    let mut line = |l: String| {
        let _ = writeln!(s, "  {l}");
    };
    if let Some(f) = &cfg.file {
        line(format!("config file: {}", f.display()));
    }
    let port = |p: Option<u16>| p.map_or_else(|| "off".to_string(), |p| p.to_string());
    line(format!(
        "listen: {}, rdma port {}, tcp port {}",
        cfg.listen,
        port(cfg.rdma_port),
        port(cfg.tcp_port)
    ));
    if !cfg!(feature = "rdma") && cfg.rdma_port.is_some() {
        line("built without RDMA support: the rdma port is ignored".into());
        if cfg.tcp_port.is_none() {
            problems.add("built without RDMA support and TCP is off: no transport to serve");
        }
    }
    // The address must be this host's: a bind to it (any port) says so, and takes no port
    // a running target holds.
    if !cfg.listen.is_unspecified() {
        if let Err(e) = TcpListener::bind(SocketAddr::new(cfg.listen, 0)) {
            problems.add(format!(
                "listen = {}: cannot bind to it ({e}): not an address of this host?",
                cfg.listen
            ));
        }
    }
    line(if cfg.allow_any {
        format!("access: any client that reaches {}", cfg.listen)
    } else {
        format!("access: allow-list {}", cfg.allow.join(", "))
    });
    for h in &cfg.hosts {
        line(format!("host {} ({}): a key of its own", h.name, h.addr));
    }
    for e in &cfg.exports {
        match crate::backing::inspect(e, cfg.direct) {
            Ok((g, describe)) => {
                if g.capacity == 0 {
                    problems.add(format!("export {}: {} is empty", e.name, e.path.display()));
                }
                let mut what = vec![if e.read_only {
                    "read-only"
                } else {
                    "read-write"
                }];
                if e.exclusive && !e.read_only {
                    what.push("exclusive");
                }
                let own_allow = format!("own allow-list {}", e.allow.join(", "));
                if !e.allow.is_empty() {
                    what.push(&own_allow);
                }
                if e.secret.is_some() {
                    what.push("secret required");
                } else if e.insecure {
                    what.push("insecure (no key: any port of an allowed host)");
                } else {
                    what.push("no key: reserved ports only");
                }
                line(format!(
                    "export {}: {}, {} bytes ({} sectors of 512), block size {}, {}",
                    e.name,
                    describe,
                    g.capacity,
                    g.capacity >> 9,
                    g.block_size,
                    what.join(", ")
                ));
            }
            Err(err) => problems.add(format!("export {}: {}: {err}", e.name, e.path.display())),
        }
    }
    line(format!(
        "limits: credits {}, queue depth {}, max I/O {} bytes, buffer memory {} bytes (a connection's own buffers take up to {} of it), RDMA window {} bytes, inline_max {}, ack_timeout_exp {}, poll_us {}, connections {} ({} per host)",
        cfg.credits,
        cfg.queue_depth,
        cfg.max_io_bytes,
        cfg.buffer_memory,
        cfg.connection_bytes(),
        cfg.rdma_window,
        cfg.inline_max,
        cfg.ack_timeout_exp,
        cfg.poll_us,
        cfg.max_connections,
        cfg.max_connections_per_host
    ));
    line(format!(
        "timeouts: hello {} s, idle {}, send {} s, shutdown {} s",
        cfg.hello_timeout.as_secs(),
        cfg.idle_timeout
            .map_or_else(|| "never".to_string(), |d| format!("{} s", d.as_secs())),
        cfg.send_timeout.as_secs(),
        cfg.shutdown_timeout.as_secs()
    ));
    if !cfg.direct {
        line("I/O through the page cache (direct = false)".into());
    }
    match &cfg.stats_file {
        Some(p) => {
            line(format!("stats file: {}", p.display()));
            let dir = match p.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => std::path::Path::new("."),
            };
            if !dir.is_dir() {
                problems.add(format!(
                    "stats_file = {}: its directory {} does not exist",
                    p.display(),
                    dir.display()
                ));
            }
        }
        None => line("stats file: none".into()),
    }
    line(format!(
        "log level: {}",
        cfg.log_level.to_string().to_lowercase()
    ));
    let mut tests = Vec::new();
    if cfg.hostile.enabled() {
        tests.push("hostile".to_string());
    }
    for (on, name) in [
        (cfg.corrupt_read_every > 0, "corrupt_read_every"),
        (cfg.fail_write_crc_every > 0, "fail_write_crc_every"),
        (cfg.no_invalidate, "no_invalidate"),
        (cfg.refuse_rdma_file.is_some(), "refuse_rdma_file"),
        (cfg.stall_sector.is_some(), "stall_sector"),
        (cfg.refuse_writes_file.is_some(), "refuse_writes_file"),
        (cfg.grant_no_credits, "grant_no_credits"),
    ] {
        if on {
            tests.push(name.to_string());
        }
    }
    if !tests.is_empty() {
        line(format!(
            "TEST SWITCHES ON (never serve real clients like this): {}",
            tests.join(", ")
        ));
    }
    Report {
        summary: s,
        problems,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Args;

    fn args(dir: &std::path::Path) -> Args {
        Args {
            listen: Some("127.0.0.1".parse().unwrap()),
            allow: vec!["127.0.0.1".into()],
            exports: vec![format!("a={}", dir.join("a.img").display())],
            no_rdma: true,
            // tmpfs and others may refuse O_DIRECT; that is checked where it is supported.
            no_direct: true,
            ..Args::default()
        }
    }

    #[test]
    fn a_good_config_is_summed_up() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.img"), vec![0u8; 1 << 20]).unwrap();
        let (cfg, p) = Config::load_all(&args(dir.path()));
        let r = check(&cfg, p);
        assert!(r.problems.is_empty(), "{}", r.problems);
        assert!(r
            .summary
            .contains("listen: 127.0.0.1, rdma port off, tcp port 7701"));
        assert!(r.summary.contains(&format!(
            "export a: file {}, 1048576 bytes (2048 sectors of 512), block size 512, read-write, exclusive, no key: reserved ports only",
            dir.path().join("a.img").display()
        )));
    }

    #[test]
    fn every_problem_is_found() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("empty.img"), b"").unwrap();
        let a = Args {
            credits: Some(0),
            exports_ro: vec![format!("e={}", dir.path().join("empty.img").display())],
            stats_file: Some(dir.path().join("no/such/dir/stats")),
            ..args(dir.path())
        };
        let (cfg, p) = Config::load_all(&a);
        let r = check(&cfg, p);
        for needle in [
            "credits = 0",
            "export a:",
            "No such file",
            "export e:",
            "is empty",
            "does not exist",
        ] {
            assert!(r.problems.contains(needle), "{needle} in {}", r.problems);
        }
        // A good export beside bad ones is still summed up.
        std::fs::write(dir.path().join("a.img"), vec![0u8; 4096]).unwrap();
        let r = check(&cfg, Problems::default());
        assert!(r.summary.contains("export a: file"), "{}", r.summary);
    }

    #[test]
    fn the_listen_address_must_be_this_host_s() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.img"), vec![0u8; 4096]).unwrap();
        let a = Args {
            // TEST-NET-3: never configured here.
            listen: Some("203.0.113.7".parse().unwrap()),
            ..args(dir.path())
        };
        let (cfg, p) = Config::load_all(&a);
        assert!(p.is_empty(), "{p}");
        assert!(check(&cfg, p).problems.contains("listen = 203.0.113.7"));
    }
}
