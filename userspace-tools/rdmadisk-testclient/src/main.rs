//! rdmadisk-testclient: drives an rdmadisk target over TCP or RDMA with verified random I/O,
//! before (and independently of) the kernel client.

#[cfg(feature = "rdma")]
mod rdma_transport;
mod transport;
mod workload;

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use rdmadisk_net::client::{ConnectError, ConnectOptions};
use rdmadisk_proto::auth::Secret;

use transport::Transport;
use workload::{Params, Report};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Kind {
    Tcp,
    Rdma,
}

/// Verified random I/O against an rdmadisk target.
#[derive(Parser, Debug)]
#[command(
    version,
    about,
    after_help = "\
EXAMPLES:
  rdmadisk-testclient --transport rdma --target 192.0.2.2:7700 --export disk0 --count 1000
  rdmadisk-testclient --transport tcp --target 127.0.0.1:7701 --export disk0 --negative
  rdmadisk-testclient --transport tcp --target 127.0.0.1:7701 --export disk0 --expect-refused not-allowed

Prints counters, the transport's checks and a final 'RESULT: N passed, N failed' line; exits 1
on any failure."
)]
struct Args {
    /// Transport.
    #[arg(long, value_enum, default_value = "tcp")]
    transport: Kind,
    /// Target HOST:PORT (the rdma_cm port for rdma, the TCP port for tcp).
    #[arg(long)]
    target: String,
    /// Export name.
    #[arg(long, default_value = "disk0")]
    export: String,
    /// Local address to connect from.
    #[arg(long)]
    bind: Option<IpAddr>,
    /// Number of I/Os.
    #[arg(long, default_value_t = 1000)]
    count: u64,
    /// Requests in flight (also bounded by the target's credits).
    #[arg(long, default_value_t = 8)]
    queue_depth: usize,
    /// Smallest I/O in bytes (multiple of 4096).
    #[arg(long, default_value_t = 4096)]
    min_size: u32,
    /// Largest I/O in bytes (multiple of 4096).
    #[arg(long, default_value_t = 1 << 20)]
    max_size: u32,
    /// Percentage of reads among reads and writes.
    #[arg(long, default_value_t = 50)]
    read_pct: u32,
    /// Use only the first N MiB of the export.
    #[arg(long, default_value_t = 32)]
    span_mib: u64,
    /// Every Nth I/O is a flush (0 = never).
    #[arg(long, default_value_t = 50)]
    flush_every: u64,
    /// Every Nth I/O is a discard (0 = never).
    #[arg(long, default_value_t = 97)]
    discard_every: u64,
    /// Every Nth I/O is a write-zeroes (0 = never).
    #[arg(long, default_value_t = 89)]
    write_zeroes_every: u64,
    /// Every Nth I/O, if a write, carries FUA (0 = never).
    #[arg(long, default_value_t = 10)]
    fua_every: u64,
    /// PRNG seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Receives posted for responses (Hello.recv_credits).
    #[arg(long, default_value_t = 32)]
    recv_credits: u16,
    /// Seconds to wait for a connection or a response.
    #[arg(long, default_value_t = 60)]
    timeout_secs: u64,
    /// After the workload, check that bad requests get error statuses on a live connection.
    #[arg(long)]
    negative: bool,
    /// RDMA only, at the end: ask the target to RDMA-Write to an already invalidated rkey; it
    /// must be refused (this deliberately breaks the connection).
    #[arg(long)]
    probe_dead_rkey: bool,
    /// RDMA diagnostic: expose the data MR's own rkey instead of per-request memory windows
    /// (run the target with --no-invalidate).
    #[arg(long)]
    mr_rkey: bool,
    /// Hello session id. Default: a new session, above any the target's fence has seen of
    /// this client and export (the target names the floor when asked too low); 0 would make
    /// it an unfenced probe.
    #[arg(long)]
    session_id: Option<u32>,
    /// Hello epoch (connection set within the session).
    #[arg(long, default_value_t = 1)]
    epoch: u32,
    /// Expect the target to refuse the connection with this status; exit 0 only if it does.
    #[arg(long, value_name = "STATUS", value_parser = ["not-allowed", "no-such-export", "busy", "invalid", "bad-version", "stale"])]
    expect_refused: Option<String>,
    /// A file holding the key this client proves (hex, 16 to 64 bytes); with one, a target
    /// that does not ask for it and prove a key back is refused.
    #[arg(long, value_name = "PATH")]
    secret_file: Option<std::path::PathBuf>,
    /// A file holding the key the target must prove, when not --secret-file's.
    #[arg(long, value_name = "PATH", requires = "secret_file")]
    target_secret_file: Option<std::path::PathBuf>,
    /// Connect from an ordinary port even when root (as any user of the host would); by
    /// default the client binds a reserved port (below 1024) when it may.
    #[arg(long)]
    unreserved_port: bool,
    /// Misbehave instead of running the workload (tests of the target): ignore-credits (send
    /// --count NOPs without regard to credits; the target must cut the connection off), idle
    /// (attach and do nothing; the target must close it), no-credits (grant the target no
    /// response credit and send one request; it must close it), flood (open --count
    /// connections and hold them --hold-secs; the target must refuse those over its caps),
    /// half-open (send --count connect requests and abandon each at once; the target must
    /// release what it set up for them). RDMA only.
    #[arg(long, value_parser = ["ignore-credits", "idle", "no-credits", "flood", "half-open"])]
    hostile: Option<String>,
    /// Instead of the workload: try N attaches with made-up sessions and epochs, each
    /// followed by a NOP if it is let in, as any process on a client host could; print how
    /// they were refused. Exits 0 only if none was let in.
    #[arg(long, value_name = "N")]
    made_up_sessions: Option<u32>,
    /// With --hostile flood: seconds to hold the connections.
    #[arg(long, default_value_t = 5)]
    hold_secs: u64,
    /// Take a `Fenced` answer as "not applied" (counted, not failed): for a target whose
    /// store may fence it transiently, as a kernel client would reissue the request.
    #[arg(long)]
    fenced_ok: bool,
    /// Print every request.
    #[arg(long, short)]
    verbose: bool,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let addr: SocketAddr = match a.target.to_socket_addrs().ok().and_then(|mut i| i.next()) {
        Some(x) => x,
        None => {
            eprintln!("rdmadisk-testclient: cannot resolve {:?}", a.target);
            return ExitCode::from(2);
        }
    };
    let timeout = Duration::from_secs(a.timeout_secs);
    let key = |flag: &str, p: &Option<std::path::PathBuf>| -> Result<Option<Secret>, ExitCode> {
        let Some(p) = p else { return Ok(None) };
        let mut raw = std::fs::read(p).map_err(|e| {
            eprintln!("rdmadisk-testclient: {flag} {}: {e}", p.display());
            ExitCode::from(2)
        })?;
        let s = Secret::from_hex(raw.trim_ascii());
        rdmadisk_proto::auth::wipe(&mut raw);
        s.map(Some).map_err(|e| {
            eprintln!("rdmadisk-testclient: {flag} {}: {e}", p.display());
            ExitCode::from(2)
        })
    };
    let (secret, target_secret) = match (
        key("--secret-file", &a.secret_file),
        key("--target-secret-file", &a.target_secret_file),
    ) {
        (Ok(s), Ok(t)) => (s, t),
        (Err(c), _) | (_, Err(c)) => return c,
    };
    // A new session unless one was given: asked as 1, and above the target's floor if that
    // is refused Stale.
    let new_session = a.session_id.is_none();
    let session_id = a.session_id.unwrap_or(1);
    let slots = a.queue_depth.max(1);
    let max_io = a.max_size as usize;
    println!(
        "rdmadisk-testclient: {:?} to {addr}, export {}, {} I/Os, queue depth {slots}, sizes {}..{} bytes",
        a.transport, a.export, a.count, a.min_size, a.max_size
    );
    if let Some(n) = a.made_up_sessions {
        return made_up_sessions(n, addr, &a, timeout, secret);
    }
    match a.transport {
        Kind::Tcp => {
            let opts = ConnectOptions {
                recv_credits: a.recv_credits,
                bind: a.bind,
                timeout,
                session_id,
                epoch: a.epoch,
                secret,
                target_secret,
                reserved_port: !a.unreserved_port,
                new_session,
                ..ConnectOptions::new(&a.export)
            };
            let c = transport::Tcp::connect(addr, &opts, slots, max_io);
            finish(&a, c, |_| Ok(None))
        }
        #[cfg(not(feature = "rdma"))]
        Kind::Rdma => {
            eprintln!("rdmadisk-testclient: built without RDMA support");
            ExitCode::from(2)
        }
        #[cfg(feature = "rdma")]
        Kind::Rdma => {
            let mut opts = rdma_transport::RdmaOptions {
                export: a.export.clone(),
                slots,
                max_io,
                recv_credits: a.recv_credits,
                bind: a.bind,
                timeout,
                session_id,
                epoch: a.epoch,
                mr_rkey: a.mr_rkey,
                secret,
                target_secret,
                reserved_port: !a.unreserved_port,
                new_session,
            };
            if let Some(mode) = a.hostile.as_deref() {
                return hostile(mode, addr, &mut opts, &a);
            }
            let c = connect_rdma(addr, &mut opts).map_err(|e| match e {
                ConnectError::Stale(_) => {
                    ConnectError::Refused(rdmadisk_proto::wire::HelloStatus::Stale)
                }
                e => e,
            });
            let probe = a.probe_dead_rkey;
            finish(&a, c, move |t: &mut rdma_transport::Rdma| {
                let r = if probe {
                    Some(t.probe_dead_rkey(0xdead_0001))
                } else {
                    None
                };
                if r.is_none() {
                    t.close();
                }
                Ok(r)
            })
        }
    }
}

/// `--made-up-sessions N`: attaches with random sessions and epochs, as a process on a client
/// host that is not the kernel client could try (to supersede a mapped disk's session, or to
/// fill the target's fences). Each that is let in sends a NOP.
fn made_up_sessions(
    n: u32,
    addr: SocketAddr,
    a: &Args,
    timeout: Duration,
    secret: Option<Secret>,
) -> ExitCode {
    let mut x = a.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (mut attached, mut kinds) = (0u32, std::collections::BTreeMap::<String, u32>::new());
    for _ in 0..n {
        let r = next();
        let (session_id, epoch) = ((r as u32).max(1), (r >> 32) as u32);
        let res: Result<(), ConnectError> = match a.transport {
            Kind::Tcp => {
                let opts = ConnectOptions {
                    bind: a.bind,
                    timeout,
                    session_id,
                    epoch,
                    secret: secret.clone(),
                    reserved_port: !a.unreserved_port,
                    ..ConnectOptions::new(&a.export)
                };
                rdmadisk_net::client::TcpClient::connect(addr, &opts).and_then(|mut c| {
                    let nop = rdmadisk_net::client::TcpClient::request(
                        rdmadisk_proto::wire::Opcode::Nop,
                        1,
                        0,
                        0,
                        &[],
                    );
                    c.call(&nop, &[], &mut [0u8; 16])
                        .map(|_| ())
                        .map_err(ConnectError::Io)
                })
            }
            #[cfg(feature = "rdma")]
            Kind::Rdma => {
                let opts = rdma_transport::RdmaOptions {
                    export: a.export.clone(),
                    slots: 1,
                    max_io: 4096,
                    recv_credits: a.recv_credits,
                    bind: a.bind,
                    timeout,
                    session_id,
                    epoch,
                    mr_rkey: false,
                    secret: secret.clone(),
                    target_secret: None,
                    reserved_port: !a.unreserved_port,
                    new_session: false,
                };
                rdma_transport::Rdma::connect(addr, &opts).and_then(|mut c| {
                    let r = c.nop().map_err(ConnectError::Io);
                    c.close();
                    r
                })
            }
            #[cfg(not(feature = "rdma"))]
            Kind::Rdma => Err(ConnectError::Protocol("built without RDMA".into())),
        };
        match res {
            Ok(()) => attached += 1,
            Err(e) => {
                let kind = match &e {
                    ConnectError::Denied(_) => "denied".to_string(),
                    ConnectError::Stale(_) => "stale".to_string(),
                    e => refused_name(e).map_or_else(|| format!("other ({e})"), str::to_string),
                };
                *kinds.entry(kind).or_default() += 1;
            }
        }
    }
    let refused: Vec<String> = kinds.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!(
        "made-up sessions: attempts={n} attached={attached} refused: {}",
        refused.join(" ")
    );
    if attached == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Attaches as the kernel client does: a new session is asked at `opts.session_id` and, if the
/// target has seen that one already (`Stale`), above the floor it names; once attached, further
/// connections join the session (the NEW_SESSION flag is cleared).
#[cfg(feature = "rdma")]
fn connect_rdma(
    addr: SocketAddr,
    opts: &mut rdma_transport::RdmaOptions,
) -> Result<rdma_transport::Rdma, ConnectError> {
    let mut c = rdma_transport::Rdma::connect(addr, opts);
    if let (true, Err(ConnectError::Stale(floor))) = (opts.new_session, &c) {
        opts.session_id = floor.saturating_add(1);
        c = rdma_transport::Rdma::connect(addr, opts);
    }
    if c.is_ok() {
        opts.new_session = false;
    }
    c
}

/// `--hostile MODE` over RDMA: one misbehaviour, and whether the target dealt with it.
#[cfg(feature = "rdma")]
fn hostile(
    mode: &str,
    addr: SocketAddr,
    opts: &mut rdma_transport::RdmaOptions,
    a: &Args,
) -> ExitCode {
    let outcome = match mode {
        "flood" => {
            let (mut held, mut busy, mut other) = (Vec::new(), 0u64, 0u64);
            for _ in 0..a.count {
                match connect_rdma(addr, opts) {
                    Ok(c) => held.push(c),
                    Err(ConnectError::Refused(rdmadisk_proto::wire::HelloStatus::Busy)) => {
                        busy += 1
                    }
                    Err(e) => {
                        other += 1;
                        if other <= 3 {
                            println!("# connect failed: {e}");
                        }
                    }
                }
            }
            println!(
                "flood: {} of {} connections accepted, {busy} refused Busy, {other} failed otherwise",
                held.len(),
                a.count
            );
            std::thread::sleep(Duration::from_secs(a.hold_secs));
            for c in &mut held {
                c.close();
            }
            if busy > 0 {
                Ok(format!("{busy} connections over the caps were refused"))
            } else {
                Err("no connection was refused".to_string())
            }
        }
        "half-open" => {
            let mut sent = 0u64;
            for _ in 0..a.count {
                match rdma_transport::Rdma::abandon(addr, opts) {
                    Ok(()) => sent += 1,
                    Err(e) => println!("# connect request failed: {e}"),
                }
            }
            if sent > 0 {
                Ok(format!(
                    "{sent} connect requests sent and abandoned at once"
                ))
            } else {
                Err("no connect request could be sent".to_string())
            }
        }
        _ => match connect_rdma(addr, opts) {
            Err(e) => Err(format!("cannot attach: {e}")),
            Ok(mut c) => match mode {
                "ignore-credits" => c.overrun_credits(a.count.min(100_000) as u32),
                "idle" => c.wait_cut_off(false),
                _ => c.wait_cut_off(true),
            },
        },
    };
    match outcome {
        Ok(msg) => {
            println!("ok - hostile {mode}: {msg}");
            println!("RESULT: 1 passed, 0 failed");
            ExitCode::SUCCESS
        }
        Err(msg) => {
            println!("not ok - hostile {mode}: {msg}");
            println!("RESULT: 0 passed, 1 failed");
            ExitCode::FAILURE
        }
    }
}

fn refused_name(e: &ConnectError) -> Option<&'static str> {
    use rdmadisk_proto::wire::HelloStatus as H;
    match e {
        ConnectError::Refused(H::NotAllowed) => Some("not-allowed"),
        ConnectError::Refused(H::NoSuchExport) => Some("no-such-export"),
        ConnectError::Refused(H::Busy) => Some("busy"),
        ConnectError::Refused(H::Invalid) => Some("invalid"),
        ConnectError::Refused(H::BadVersion) => Some("bad-version"),
        ConnectError::Refused(H::Stale) => Some("stale"),
        _ => None,
    }
}

fn finish<T: Transport, F>(a: &Args, conn: Result<T, ConnectError>, after: F) -> ExitCode
where
    F: FnOnce(&mut T) -> std::io::Result<Option<Result<String, String>>>,
{
    let mut t = match (conn, &a.expect_refused) {
        (Err(e), Some(want)) => {
            let got = refused_name(&e);
            return if got == Some(want.as_str()) {
                println!("ok - connection refused as expected: {e}");
                println!("RESULT: 1 passed, 0 failed");
                ExitCode::SUCCESS
            } else {
                println!("not ok - expected refusal {want}, got: {e}");
                println!("RESULT: 0 passed, 1 failed");
                ExitCode::FAILURE
            };
        }
        (Err(e), None) => {
            eprintln!("rdmadisk-testclient: cannot attach: {e}");
            println!("RESULT: 0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
        (Ok(_), Some(want)) => {
            println!("not ok - expected refusal {want}, but the target accepted the connection");
            println!("RESULT: 0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
        (Ok(t), None) => t,
    };
    let hr = *t.reply();
    println!(
        "attached: capacity {} sectors, max_io {} bytes, queue_depth {}, initial_credits {}, features {:#x}",
        hr.capacity_sectors, hr.max_io_bytes, hr.queue_depth, hr.initial_credits, hr.features
    );
    let p = Params {
        count: a.count,
        queue_depth: a.queue_depth.max(1),
        read_pct: a.read_pct.min(100),
        min_size: a.min_size.max(4096) / 4096 * 4096,
        max_size: a.max_size.max(4096) / 4096 * 4096,
        span_bytes: a.span_mib << 20,
        flush_every: a.flush_every,
        discard_every: a.discard_every,
        zeroes_every: a.write_zeroes_every,
        fua_every: a.fua_every,
        seed: a.seed,
        fenced_ok: a.fenced_ok,
        verbose: a.verbose,
    };
    let mut failed_extra = 0u64;
    let mut report = match workload::run(&mut t, &p) {
        Ok(r) => r,
        Err(e) => {
            println!("not ok - workload aborted: {e}");
            failed_extra += 1;
            Report::default()
        }
    };
    if a.negative && failed_extra == 0 {
        if let Err(e) = workload::negative(&mut t, &mut report, 0x4e45_0000) {
            println!("not ok - negative tests aborted: {e}");
            failed_extra += 1;
        }
    }
    let r = &report;
    println!(
        "ops: reads={} writes={} flushes={} discards={} write_zeroes={}",
        r.reads, r.writes, r.flushes, r.discards, r.write_zeroes
    );
    println!(
        "bytes: read={} written={} in {:.1} s ({:.2} MB/s)",
        r.bytes_read,
        r.bytes_written,
        r.seconds,
        (r.bytes_read + r.bytes_written) as f64 / r.seconds.max(1e-9) / 1e6
    );
    println!(
        "verify: reads_verified={} sectors_compared={} data_mismatches={} read_crc_mismatches={} status_errors={} fenced={}",
        r.reads_verified, r.sectors_compared, r.data_mismatches, r.read_crc_mismatches, r.status_errors, r.fenced
    );
    println!(
        "capacity: attached={} first_response={} last_response={}",
        t.reply().capacity_sectors,
        r.capacity_first,
        r.capacity_last
    );
    let (high, initial) = t.credit_report();
    let exceeded = high > u32::from(initial);
    println!(
        "credits: initial={initial} max_in_flight={high} exceeded={}",
        if exceeded { "yes" } else { "no" }
    );
    if exceeded {
        failed_extra += 1;
    }
    for (name, v, is_failure) in t.checks() {
        println!("check: {name}={v}");
        if is_failure && v > 0 {
            failed_extra += 1;
        }
    }
    match after(&mut t) {
        Ok(Some(Ok(msg))) => {
            println!("ok - dead rkey probe: {msg}");
            report.passed += 1;
        }
        Ok(Some(Err(msg))) => {
            println!("not ok - dead rkey probe: {msg}");
            failed_extra += 1;
        }
        Ok(None) => {}
        Err(e) => {
            println!("not ok - {e}");
            failed_extra += 1;
        }
    }
    let failed = report.failed + failed_extra;
    println!("RESULT: {} passed, {} failed", report.passed, failed);
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
