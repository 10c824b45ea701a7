//! rdmadisk-target: the userspace storage target.
//!
//! Serves exports (files or block devices) to rdmadisk clients over RDMA (rdma_cm, one RC QP per
//! queue; writes pulled with RDMA Read, reads pushed with RDMA Write, every response a
//! Send-with-Invalidate) and over TCP (the same messages, framed). One thread per connection.
//! SIGTERM/SIGINT: stop accepting, finish in-flight requests, fsync exports, print the
//! counters, exit 0. SIGUSR1: print the counters (and rewrite `--stats-file`).

mod config;
mod engine;
mod export;
mod fence_table;
mod hostile;
#[cfg(feature = "rdma")]
mod rdma;
mod stats;
mod tcp;

use std::io::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser;
use rdmadisk_net::allow::AllowList;
use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};

use config::{Args, Config};
use engine::{Limits, Target};
use export::Export;

fn main() -> ExitCode {
    let args = Args::parse();
    let cfg = match Config::load(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rdmadisk-target: {e}");
            return ExitCode::from(2);
        }
    };
    match run(cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdmadisk-target: {e}");
            ExitCode::FAILURE
        }
    }
}

fn say(msg: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "rdmadisk-target: {msg}");
    let _ = out.flush();
}

/// The start-up line of hostile mode: loud, because a target in this mode corrupts the
/// protocol on purpose.
fn hostile_warning(l: &Limits) -> String {
    let h = &l.hostile;
    let names = |f: &dyn Fn(hostile::Kind) -> bool| -> Vec<&str> {
        h.kinds
            .iter()
            .filter(|&&k| f(k))
            .map(|k| k.name())
            .collect()
    };
    let mut msg = format!(
        "WARNING: HOSTILE MODE, FOR TESTS ONLY: {} of each connection is deliberately broken ({}); never serve real clients like this",
        if h.every == 1 {
            "every response".to_string()
        } else {
            format!("one response in {}", h.every)
        },
        names(&|_| true).join(", ")
    );
    let rdma_only = names(&|k| !k.on_tcp());
    if !rdma_only.is_empty() {
        msg += &format!("; RDMA only: {}", rdma_only.join(", "));
    }
    if l.no_invalidate {
        let dead = names(&|k| {
            matches!(
                k,
                hostile::Kind::WrongRkey | hostile::Kind::NoInvalidate | hostile::Kind::LateWrite
            )
        });
        if !dead.is_empty() {
            msg += &format!(
                "; with --no-invalidate these never fire: {}",
                dead.join(", ")
            );
        }
    }
    msg
}

fn run(cfg: Config) -> Result<(), String> {
    let allow = AllowList::parse(&cfg.allow).map_err(|e| e.to_string())?;
    let mut exports = Vec::new();
    for e in &cfg.exports {
        let x = Export::open(&e.name, &e.path, e.read_only, cfg.direct)
            .map_err(|err| format!("export {}: {}: {err}", e.name, e.path.display()))?;
        say(&format!(
            "export {} = {} ({} sectors, {}{})",
            x.name,
            x.path.display(),
            x.capacity_sectors,
            if x.read_only {
                "read-only"
            } else {
                "read-write"
            },
            if x.is_direct() { ", O_DIRECT" } else { "" }
        ));
        exports.push(x);
    }
    let limits = Limits {
        max_io_bytes: cfg.max_io_bytes,
        queue_depth: cfg.queue_depth,
        credits: cfg.credits,
        corrupt_read_every: cfg.corrupt_read_every,
        fail_write_crc_every: cfg.fail_write_crc_every,
        no_invalidate: cfg.no_invalidate,
        hostile: cfg.hostile.clone(),
        refuse_rdma_file: cfg.refuse_rdma_file.clone(),
        stall_sector: cfg.stall_sector,
        grant_no_credits: cfg.grant_no_credits,
    };
    if limits.hostile.enabled() {
        say(&hostile_warning(&limits));
    }
    if allow.is_empty() {
        say("allow-list empty: every client may connect");
    } else {
        let list: Vec<String> = allow.entries().iter().map(|c| c.to_string()).collect();
        say(&format!("allow-list: {}", list.join(", ")));
    }
    let target = Arc::new(Target::new(exports, allow, limits));

    // Signals first, so a SIGTERM during start-up is not lost.
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGUSR1])
        .map_err(|e| format!("cannot install signal handlers: {e}"))?;

    let mut workers = Vec::new();
    if let Some(port) = cfg.tcp_port {
        let listener = TcpListener::bind(SocketAddr::new(cfg.listen, port))
            .map_err(|e| format!("tcp: cannot listen on {}:{port}: {e}", cfg.listen))?;
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        say(&format!("tcp listening on {local}"));
        let t = target.clone();
        workers.push(
            thread::Builder::new()
                .name("tcp-accept".into())
                .spawn(move || {
                    for h in tcp::serve(t, listener) {
                        let _ = h.join();
                    }
                })
                .map_err(|e| e.to_string())?,
        );
    }
    if let Some(port) = cfg.rdma_port {
        #[cfg(feature = "rdma")]
        {
            let addr = SocketAddr::new(cfg.listen, port);
            match rdma::Listener::bind(addr) {
                Ok(l) => {
                    say(&format!("rdma listening on {addr}"));
                    let t = target.clone();
                    workers.push(
                        thread::Builder::new()
                            .name("rdma-cm".into())
                            .spawn(move || l.serve(t))
                            .map_err(|e| e.to_string())?,
                    );
                }
                Err(e) if cfg.tcp_port.is_some() => say(&format!(
                    "rdma unavailable on {addr} ({e}); serving TCP only"
                )),
                Err(e) => return Err(format!("rdma: cannot listen on {addr}: {e}")),
            }
        }
        #[cfg(not(feature = "rdma"))]
        {
            say(&format!(
                "built without RDMA support; ignoring rdma port {port}"
            ));
            if cfg.tcp_port.is_none() {
                return Err("no transport to serve".into());
            }
        }
    }

    let mut last_write = Instant::now();
    let write_stats = |t: &Target| {
        if let Some(p) = &cfg.stats_file {
            if let Err(e) = t.stats.write_file(p) {
                eprintln!("rdmadisk-target: cannot write {}: {e}", p.display());
            }
        }
    };
    write_stats(&target);
    while !target.stopping() {
        for sig in signals.pending() {
            match sig {
                SIGUSR1 => {
                    print!("{}", target.stats.render());
                    let _ = std::io::stdout().flush();
                    write_stats(&target);
                }
                _ => {
                    say("shutting down: no new connections; finishing in-flight requests");
                    target.shutdown.store(true, Ordering::SeqCst);
                }
            }
        }
        if last_write.elapsed() >= Duration::from_secs(1) {
            write_stats(&target);
            last_write = Instant::now();
        }
        thread::sleep(Duration::from_millis(50));
    }
    for w in workers {
        let _ = w.join();
    }
    target.sync_all();
    say(&format!(
        "exports synced; {} connection(s) still open at exit",
        target.stats.connections_active.load(Ordering::Relaxed)
    ));
    print!("{}", target.stats.render());
    let _ = std::io::stdout().flush();
    write_stats(&target);
    Ok(())
}
