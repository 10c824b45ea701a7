//! rdmadisk-target: the userspace storage target.
//!
//! Serves exports (files or block devices) to rdmadisk clients over RDMA (rdma_cm, one RC QP per
//! queue; writes pulled with RDMA Read, reads pushed with RDMA Write, every response a
//! Send-with-Invalidate) and over TCP (the same messages, framed). One thread per connection,
//! each with many requests in flight through its io_uring (docs/design.md, "The target").
//! SIGTERM/SIGINT: stop accepting, finish in-flight requests (bounded by the shutdown
//! timeout), fsync exports, print the counters, exit. SIGUSR1: print the counters (and rewrite
//! `--stats-file`). SIGHUP: read the configuration file again and apply what can change live
//! (`reload.rs`).
//!
//! `--check-config` checks the configuration and the exports without serving (`check.rs`);
//! `rdmadisk-target stats` prints a running target's counters from its stats file
//! (`stats_cmd.rs`); `rdmadisk-target clients` lists who is attached, asking the target's
//! control socket (`control.rs`, `registry.rs`). Prometheus metrics: `metrics.rs`. Under
//! systemd (`Type=notify`) the target says when it is ready, which transports are up, and
//! when it stops (`notify.rs`). Without an RDMA device at start it serves TCP and keeps
//! trying to listen on RDMA.

mod backing;
#[cfg(feature = "rbd")]
mod backing_rbd;
mod check;
mod config;
mod conn;
mod control;
mod engine;
mod export;
mod fence_table;
mod hostile;
mod identity;
mod logging;
mod metrics;
mod notify;
mod pool;
#[cfg(feature = "rdma")]
mod rdma;
mod registry;
mod reload;
mod ring;
mod stats;
mod stats_cmd;
mod tcp;
#[cfg(test)]
mod testkit;
mod wake;

use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser;
use rdmadisk_net::allow::AllowList;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};

use config::{Args, Command, Config, ExportSpec};
use engine::{Limits, Target};
use export::Export;
use pool::{Budget, Pool};

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(Command::Stats(a)) = &args.command {
        logging::init(log::LevelFilter::Warn);
        return stats_cmd::run(a);
    }
    if let Some(Command::Clients(a)) = &args.command {
        logging::init(log::LevelFilter::Warn);
        return control::run(a);
    }
    if let Some(Command::Completions { shell }) = &args.command {
        let mut cmd = <Args as clap::CommandFactory>::command();
        clap_complete::generate(*shell, &mut cmd, "rdmadisk-target", &mut std::io::stdout());
        return ExitCode::SUCCESS;
    }
    if let Some(Command::Man { dir }) = &args.command {
        let cmd = <Args as clap::CommandFactory>::command().disable_help_subcommand(true);
        let r = match dir {
            Some(d) => clap_mangen::generate_to(cmd, d),
            None => clap_mangen::Man::new(cmd).render(&mut std::io::stdout()),
        };
        return match r {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("rdmadisk-target: cannot write the man page: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if args.check_config {
        return check_config(&args);
    }
    let cfg = match Config::load(&args) {
        Ok(c) => c,
        Err(problems) => {
            logging::init(log::LevelFilter::Info);
            // Each of them: a start-up problem must not hide behind the rate limit.
            for p in &problems.0 {
                logging::error_line(p);
            }
            return ExitCode::from(2);
        }
    };
    logging::init(cfg.log_level);
    match run(cfg, &args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// `--check-config`: the summary on standard output, every problem on standard error; 0 if
/// there is none, 1 otherwise.
fn check_config(args: &Args) -> ExitCode {
    let (cfg, problems) = Config::load_all(args);
    logging::init(cfg.log_level);
    let r = check::check(&cfg, problems);
    if r.problems.is_empty() {
        say("configuration ok; it would serve:");
        logging::out(&r.summary);
        return ExitCode::SUCCESS;
    }
    say("configuration has problems (below); what could be checked:");
    logging::out(&r.summary);
    for p in &r.problems.0 {
        logging::error_line(p);
    }
    logging::error_line(&format!(
        "the configuration has {} problem(s)",
        r.problems.0.len()
    ));
    ExitCode::FAILURE
}

/// A line on standard output (the start-up and shutdown story, the counters).
fn say(msg: &str) {
    logging::out(&format!("rdmadisk-target: {msg}\n"));
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

fn open_exports(cfg: &Config) -> Result<Vec<Export>, String> {
    cfg.exports
        .iter()
        .map(|e| open_export(e, cfg.direct))
        .collect()
}

/// Opens one export to serve (at start, or added by a reload), saying so.
pub(crate) fn open_export(e: &ExportSpec, direct: bool) -> Result<Export, String> {
    {
        let b = backing::open(e, direct)
            .map_err(|err| format!("export {}: {}: {err}", e.name, e.path.display()))?;
        let allow = if e.allow.is_empty() {
            None
        } else {
            Some(AllowList::parse(&e.allow).map_err(|err| format!("export {}: {err}", e.name))?)
        };
        let g = b.geometry();
        say(&format!(
            "export {} = {} ({} sectors of 512 bytes, block size {}, {}{}{}{})",
            e.name,
            b.describe(),
            g.capacity >> 9,
            g.block_size,
            if e.read_only {
                "read-only"
            } else {
                "read-write"
            },
            if e.exclusive && !e.read_only {
                ", exclusive"
            } else {
                ""
            },
            if allow.is_some() {
                ", own allow-list"
            } else {
                ""
            },
            if e.secret.is_some() {
                ", secret required"
            } else if e.insecure {
                ", insecure (no key: any port of an allowed host)"
            } else {
                ""
            },
        ));
        if g.capacity == 0 {
            return Err(format!("export {}: {} is empty", e.name, e.path.display()));
        }
        let block_device = e.rbd.is_none()
            && std::fs::metadata(&e.path)
                .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_block_device(&m.file_type()));
        let (id, from) = identity::resolve(e, block_device)
            .map_err(|err| format!("export {}: {err}", e.name))?;
        say(&format!(
            "export {}: uuid {} ({from}), serial {}",
            e.name, id.uuid, id.serial
        ));
        Ok(Export::new(
            &e.name,
            b,
            e.read_only,
            allow,
            e.secret.clone(),
            e.insecure,
            e.exclusive,
        )
        .with_identity(id))
    }
}

/// Brings the target's gauges up to date (before the stats file or the metrics are written).
pub(crate) fn refresh_gauges(t: &Target) {
    let (used, peak) = t.budget.used();
    stats::Stats::set(&t.stats.buffer_bytes, used as u64);
    stats::Stats::set(&t.stats.buffer_bytes_peak, peak as u64);
    stats::Stats::set(&t.stats.connection_buffer_bytes, t.budget.fixed() as u64);
    stats::Stats::set(&t.stats.buffers_made, t.budget.made());
    stats::Stats::set(&t.stats.fences, t.fences.len() as u64);
}

/// What the service manager is told the target does.
fn status(cfg: &Config, up: &metrics::Up) -> String {
    format!(
        "STATUS=serving {} export(s) over {}",
        cfg.exports.len(),
        up.describe(cfg.rdma_port.is_some())
    )
}

/// Listens on RDMA at `addr` once it can: every second until the target stops. An RDMA
/// device (soft-RoCE's, or a NIC whose driver loads late) may come after the target.
#[cfg(feature = "rdma")]
fn rdma_retry(
    t: Arc<Target>,
    budget: Arc<Budget>,
    addr: SocketAddr,
    up: Arc<metrics::Up>,
    exports: usize,
) {
    let mut last = String::new();
    while !t.stopping() {
        match rdma::Listener::bind(addr) {
            Ok(l) => {
                up.rdma.store(true, Ordering::Relaxed);
                say(&format!(
                    "rdma listening on {addr} (the RDMA device came); serving {}",
                    up.describe(true)
                ));
                notify::notify(&format!(
                    "STATUS=serving {exports} export(s) over {}",
                    up.describe(true)
                ));
                l.serve(t, budget);
                return;
            }
            Err(e) => {
                let now = e.to_string();
                if now != last {
                    log::info!("rdma: still cannot listen on {addr} ({now}); trying every second");
                    last = now;
                }
            }
        }
        let _ = wake::readable(&[t.stop_fd()], Some(Duration::from_secs(1)));
    }
}

fn run(mut cfg: Config, args: &Args) -> Result<(), String> {
    let allow = AllowList::parse(&cfg.allow).map_err(|e| e.to_string())?;
    let exports = open_exports(&cfg)?;
    let limits = Limits {
        max_io_bytes: cfg.max_io_bytes,
        queue_depth: cfg.queue_depth,
        credits: cfg.credits,
        max_connections: cfg.max_connections,
        max_connections_per_host: cfg.max_connections_per_host,
        hello_timeout: cfg.hello_timeout,
        idle_timeout: cfg.idle_timeout,
        rdma_window: cfg.rdma_window as usize,
        inline_max: cfg.inline_max,
        ack_timeout_exp: cfg.ack_timeout_exp,
        poll: Duration::from_micros(u64::from(cfg.poll_us)),
        send_timeout: cfg.send_timeout,
        shutdown_timeout: cfg.shutdown_timeout,
        corrupt_read_every: cfg.corrupt_read_every,
        fail_write_crc_every: cfg.fail_write_crc_every,
        no_invalidate: cfg.no_invalidate,
        hostile: cfg.hostile.clone(),
        refuse_rdma_file: cfg.refuse_rdma_file.clone(),
        stall_sector: cfg.stall_sector,
        refuse_writes_file: cfg.refuse_writes_file.clone(),
        grant_no_credits: cfg.grant_no_credits,
    };
    if limits.hostile.enabled() {
        say(&hostile_warning(&limits));
    }
    if cfg.allow_any {
        say(&format!(
            "no allow-list: every client that reaches {} may attach",
            cfg.listen
        ));
    } else {
        let list: Vec<String> = allow.entries().iter().map(|c| c.to_string()).collect();
        say(&format!("allow-list: {}", list.join(", ")));
    }
    let budget = Budget::new(cfg.buffer_memory as usize, cfg.max_io_bytes as usize);
    for h in &cfg.hosts {
        say(&format!(
            "host {} ({}) has a key of its own{}",
            h.name,
            h.addr,
            if h.keys.target.as_bytes() == h.keys.client.as_bytes() {
                ""
            } else {
                ", and the target proves another"
            }
        ));
    }
    let target = Arc::new(Target::new(
        exports,
        cfg.hosts.clone(),
        allow,
        cfg.allow_any,
        limits,
        budget.clone(),
    ));

    // Signals first, so a SIGTERM during start-up is not lost.
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGUSR1, SIGHUP])
        .map_err(|e| format!("cannot install signal handlers: {e}"))?;
    // The same signals also write a byte here, so that the loop below sleeps until a signal
    // or its next stats write, not a tick at a time.
    let (sig_rx, sig_tx) =
        UnixStream::pair().map_err(|e| format!("cannot make a signal pipe: {e}"))?;
    sig_rx
        .set_nonblocking(true)
        .map_err(|e| format!("cannot make a signal pipe: {e}"))?;
    for sig in [SIGTERM, SIGINT, SIGUSR1, SIGHUP] {
        let tx = sig_tx
            .try_clone()
            .map_err(|e| format!("cannot make a signal pipe: {e}"))?;
        signal_hook::low_level::pipe::register(sig, tx)
            .map_err(|e| format!("cannot install signal handlers: {e}"))?;
    }

    let up = Arc::new(metrics::Up::default());
    let mut workers = Vec::new();
    if let Some(port) = cfg.tcp_port {
        let listener = TcpListener::bind(SocketAddr::new(cfg.listen, port))
            .map_err(|e| format!("tcp: cannot listen on {}:{port}: {e}", cfg.listen))?;
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        say(&format!("tcp listening on {local}"));
        up.tcp.store(true, Ordering::Relaxed);
        let t = target.clone();
        let pool = Pool::plain(cfg.max_io_bytes as usize, &budget);
        workers.push(
            thread::Builder::new()
                .name("tcp-accept".into())
                .spawn(move || {
                    for h in tcp::serve(t, listener, pool) {
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
                    up.rdma.store(true, Ordering::Relaxed);
                    let t = target.clone();
                    let b = budget.clone();
                    workers.push(
                        thread::Builder::new()
                            .name("rdma-cm".into())
                            .spawn(move || l.serve(t, b))
                            .map_err(|e| e.to_string())?,
                    );
                }
                Err(e) if cfg.tcp_port.is_some() => {
                    say(&format!(
                        "rdma unavailable on {addr} ({e}); serving TCP, and trying RDMA every second"
                    ));
                    let (t, b, u, n) = (
                        target.clone(),
                        budget.clone(),
                        up.clone(),
                        cfg.exports.len(),
                    );
                    workers.push(
                        thread::Builder::new()
                            .name("rdma-retry".into())
                            .spawn(move || rdma_retry(t, b, addr, u, n))
                            .map_err(|e| e.to_string())?,
                    );
                }
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

    // The control socket: the configured one, else the default where its directory is.
    let control = cfg.control_socket.clone().or_else(|| {
        let p = std::path::PathBuf::from(config::DEFAULT_CONTROL_SOCKET);
        p.parent().is_some_and(|d| d.is_dir()).then_some(p)
    });
    if let Some(p) = control {
        match control::bind(&p) {
            Ok(l) => {
                say(&format!("control socket {}", p.display()));
                let t = target.clone();
                workers.push(
                    thread::Builder::new()
                        .name("control".into())
                        .spawn(move || control::serve(t, l, p))
                        .map_err(|e| e.to_string())?,
                );
            }
            Err(e) => log::warn!(
                "control socket {}: {e}; `rdmadisk-target clients` cannot ask this target",
                p.display()
            ),
        }
    }
    if let Some(addr) = cfg.metrics_listen {
        let l = TcpListener::bind(addr)
            .map_err(|e| format!("metrics: cannot listen on {addr}: {e}"))?;
        say(&format!(
            "metrics (Prometheus) on http://{}/metrics",
            l.local_addr().map_err(|e| e.to_string())?
        ));
        let (t, u) = (target.clone(), up.clone());
        workers.push(
            thread::Builder::new()
                .name("metrics".into())
                .spawn(move || metrics::serve(t, u, l))
                .map_err(|e| e.to_string())?,
        );
    }

    let mut last_write = Instant::now();
    let write_stats = |t: &Target, cfg: &Config| {
        refresh_gauges(t);
        if let Some(p) = &cfg.stats_file {
            if let Err(e) = t.stats.write_file(p) {
                log::warn!("cannot write {}: {e}", p.display());
            }
        }
        if let Some(p) = &cfg.metrics_file {
            if let Err(e) = metrics::write_file(t, &up, p) {
                log::warn!("cannot write {}: {e}", p.display());
            }
        }
    };
    write_stats(&target, &cfg);
    say(&format!("serving {}", up.describe(cfg.rdma_port.is_some())));
    notify::notify(&format!("READY=1\n{}", status(&cfg, &up)));
    while !target.stopping() {
        for sig in signals.pending() {
            match sig {
                SIGUSR1 => {
                    logging::out(&target.stats.render());
                    write_stats(&target, &cfg);
                }
                SIGHUP => {
                    notify::notify("RELOADING=1");
                    cfg = reload(&target, cfg, args);
                    notify::notify(&format!("READY=1\n{}", status(&cfg, &up)));
                }
                _ => {
                    say("shutting down: no new connections; finishing in-flight requests");
                    notify::notify("STOPPING=1\nSTATUS=finishing in-flight requests");
                    target.stop();
                }
            }
        }
        if last_write.elapsed() >= Duration::from_secs(1) {
            write_stats(&target, &cfg);
            logging::flush_dropped();
            last_write = Instant::now();
        }
        let next = Duration::from_secs(1).saturating_sub(last_write.elapsed());
        if wake::readable(&[Some(sig_rx.as_raw_fd())], Some(next)).is_err() {
            thread::sleep(conn::TICK);
        }
        while (&sig_rx).read(&mut [0u8; 64]).is_ok_and(|n| n > 0) {}
    }
    // Bounded: connections finish within the shutdown timeout (then close whatever they
    // still have); a few seconds more for the listeners to notice.
    let deadline = Instant::now() + cfg.shutdown_timeout + Duration::from_secs(5);
    for w in workers {
        while !w.is_finished() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
        if w.is_finished() {
            let _ = w.join();
        }
    }
    let open = target.stats.connections_active.load(Ordering::Relaxed);
    // The final fsync, bounded too: a store that hangs must not hold the exit for ever.
    let t = target.clone();
    let sync = thread::spawn(move || t.sync_all());
    let sync_deadline = Instant::now() + Duration::from_secs(30);
    while !sync.is_finished() && Instant::now() < sync_deadline {
        thread::sleep(Duration::from_millis(20));
    }
    if sync.is_finished() {
        say(&format!(
            "exports synced; {open} connection(s) still open at exit"
        ));
    } else {
        log::error!("the final fsync did not finish within 30 s; exiting without it");
    }
    logging::out(&target.stats.render());
    write_stats(&target, &cfg);
    Ok(())
}

/// SIGHUP: the configuration in force afterwards (the old one if the new one is refused).
fn reload(t: &Target, cfg: Config, args: &Args) -> Config {
    let Some(file) = &args.config else {
        log::warn!("reload (SIGHUP): the target was started without --config: nothing to read");
        return cfg;
    };
    say(&format!("reload (SIGHUP): reading {}", file.display()));
    let new = match Config::load(args) {
        Ok(c) => c,
        Err(problems) => {
            for p in &problems.0 {
                log::error!("reload: {p}");
            }
            log::error!(
                "reload: {} refused ({} problem(s)); the running configuration stays",
                file.display(),
                problems.0.len()
            );
            return cfg;
        }
    };
    match reload::apply(t, &cfg, &new) {
        Ok(c) => {
            say(&format!(
                "reload done: serving {} export(s): {}",
                c.exports.len(),
                c.exports
                    .iter()
                    .map(|e| e.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            c
        }
        Err(e) => {
            log::error!("reload: {e}; nothing applied, the running configuration stays");
            cfg
        }
    }
}
