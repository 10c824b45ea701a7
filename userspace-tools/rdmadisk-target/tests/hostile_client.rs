//! Clients that misbehave, against the real target over TCP: a credit overrun, a slowloris
//! Hello, a connection flood, a client that never reads its responses, an idle client (kept:
//! the idle timeout is RDMA's), an unauthenticated client and a wrong secret. Each is cut off (or refused) within its bound,
//! good clients keep being served, the target's memory stays bounded (its peak RSS is
//! printed), and SIGTERM still finishes in time.

mod common;

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::{pattern, read, simple, write, Target, MIB};
use rdmadisk_net::client::{ConnectError, ConnectOptions, TcpClient};
use rdmadisk_proto::auth::Secret;
use rdmadisk_proto::wire::{HelloStatus, Opcode, Status};

/// Peak resident memory of the target so far, in KiB (VmHWM).
fn peak_rss_kib(t: &Target) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{}/status", t.pid())).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// Whether the peer closed (EOF or reset) within `wait`.
fn closed_within(s: &mut TcpStream, wait: Duration) -> bool {
    let end = Instant::now() + wait;
    let mut b = [0u8; 4096];
    while Instant::now() < end {
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn credit_overrun_resets_that_connection_and_memory_stays_bounded() {
    // Requests covering sector 0 are never answered (--stall-sector), so the ones the client
    // sends there keep their credits: the 5th request in flight is beyond the 4 granted.
    let t = Target::start(&[
        "--credits",
        "4",
        "--buffer-memory",
        "8388608",
        "--stall-sector",
        "0",
    ]);
    let mut good = t.connect();
    let mut bad = t.connect();
    let data = pattern(1, 512 * 1024);
    let mut sent = 0;
    for i in 0..64u32 {
        let req = TcpClient::request(Opcode::Write, i, 0, data.len() as u32, &data);
        if bad.send(&req, &data).is_err() {
            break;
        }
        sent += 1;
    }
    assert!(
        bad.is_closed(Duration::from_secs(10)),
        "the overrun must reset the connection"
    );
    assert!(t.counter("credit_overruns") >= 1);
    // Memory: the budget (8 MiB of buffers) bounds what the flood could make it hold.
    let rss = peak_rss_kib(&t);
    println!("credit overrun: {sent} writes of 512 KiB sent against 4 credits; target peak RSS {rss} KiB");
    assert!(rss < 64 * 1024, "peak RSS {rss} KiB");
    assert_eq!(write(&mut good, 1, 2048, &pattern(2, 4096)), Status::Ok);
}

/// The credit check alone: with 4 credits, 4 requests in flight are within them and the
/// connection stays; the 5th is one beyond, and resets it at once, though the connection has
/// slots to spare (twice the credits), so nothing else would refuse it.
#[test]
fn the_request_beyond_the_credits_resets_the_connection() {
    let t = Target::start(&["--credits", "4", "--stall-sector", "0"]);
    let mut c = t.connect();
    let data = pattern(1, 4096);
    let stalled = |tag| TcpClient::request(Opcode::Write, tag, 0, 4096, &data);
    for tag in 0..4 {
        c.send(&stalled(tag), &data).unwrap();
    }
    assert!(
        !c.is_closed(Duration::from_secs(1)),
        "4 requests of 4 credits"
    );
    assert_eq!(t.counter("stalled_requests"), 4);
    c.send(&stalled(4), &data).unwrap();
    assert!(
        c.is_closed(Duration::from_secs(5)),
        "a 5th request on 4 credits must reset the connection"
    );
    assert_eq!(t.counter("credit_overruns"), 1);
    assert_eq!(
        t.counter_now("stalled_requests"),
        4,
        "the 5th was not taken"
    );
}

/// Each connection cap on its own. `max_connections`: connections from three hosts fill it,
/// and a fourth host's, far below the per-host cap, is refused on accept.
#[test]
fn max_connections_alone_refuses_the_connection_over_it() {
    let t = Target::start(&["--max-connections", "3"]);
    let from = |ip: &str| ConnectOptions {
        bind: Some(ip.parse().unwrap()),
        ..common::client("ro")
    };
    let held: Vec<TcpClient> = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
        .iter()
        .map(|ip| t.connect_with(&from(ip)))
        .collect();
    assert_eq!(t.refusal(&from("127.0.0.4")), HelloStatus::Busy);
    assert_eq!(t.counter("connections_over_cap"), 1);
    drop(held);
    std::thread::sleep(Duration::from_millis(500));
    let mut c = t.connect_with(&from("127.0.0.4"));
    assert_eq!(simple(&mut c, Opcode::Nop, 1, 0, 0), Status::Ok);
}

/// `max_connections_per_host`: two connections from one host fill it; its third is refused
/// on accept, far below the target-wide cap, while another host still attaches.
#[test]
fn max_connections_per_host_alone_refuses_the_connection_over_it() {
    let t = Target::start(&["--max-connections-per-host", "2"]);
    let from = |ip: &str| ConnectOptions {
        bind: Some(ip.parse().unwrap()),
        ..common::client("ro")
    };
    let _a = t.connect_with(&from("127.0.0.1"));
    let _b = t.connect_with(&from("127.0.0.1"));
    assert_eq!(t.refusal(&from("127.0.0.1")), HelloStatus::Busy);
    assert_eq!(t.counter("connections_over_cap"), 1);
    let mut other = t.connect_with(&from("127.0.0.2"));
    assert_eq!(simple(&mut other, Opcode::Nop, 1, 0, 0), Status::Ok);
}

/// The shutdown timeout on its own: a client that never reads keeps a response from going
/// out, and the send timeout (60 s) is far off; SIGTERM must end that connection at the
/// shutdown timeout (1 s), well before the target's own last resort (that timeout plus 5 s).
#[test]
fn sigterm_ends_a_stuck_connection_at_the_shutdown_timeout() {
    let t = Target::start(&["--send-timeout-s", "60", "--shutdown-timeout-s", "1"]);
    let mut lazy = t.connect();
    for i in 0..32u32 {
        let req = TcpClient::request(Opcode::Read, i, 0, MIB as u32, &[]);
        if lazy.send(&req, &[]).is_err() {
            break;
        }
    }
    // Long enough for the socket buffers to fill and a send to stall.
    std::thread::sleep(Duration::from_secs(1));
    let t0 = Instant::now();
    let (ok, lines) = t.stop();
    let took = t0.elapsed();
    println!("SIGTERM with a response that cannot go out: exited in {took:?}");
    assert!(ok, "{lines:#?}");
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert!(lines
        .iter()
        .any(|l| l.contains("still busy at the end of the shutdown timeout")));
    assert!(lines.iter().any(|l| l.contains("exports synced")));
}

#[test]
fn slowloris_hello_is_cut_off_and_good_clients_attach() {
    let t = Target::start(&["--hello-timeout-s", "1"]);
    let mut slow = TcpStream::connect(t.addr).unwrap();
    slow.write_all(&[0x44]).unwrap();
    let t0 = Instant::now();
    let mut c = t.connect();
    assert_eq!(simple(&mut c, Opcode::Nop, 1, 0, 0), Status::Ok);
    assert!(closed_within(&mut slow, Duration::from_secs(5)));
    let took = t0.elapsed();
    println!("slowloris: closed after {took:?} (hello timeout 1 s)");
    assert!(took < Duration::from_secs(4));
    assert!(t.counter("hello_timeouts") >= 1);
}

#[test]
fn connection_flood_is_capped_and_memory_stays_bounded() {
    let t = Target::start(&[
        "--max-connections",
        "32",
        "--max-connections-per-host",
        "16",
        "--hello-timeout-s",
        // Longer than the flood takes on a loaded machine: its first connections must still
        // hold the cap when the refusal is checked.
        "6",
    ]);
    // A thousand sockets, and the test's own: raise the soft limit on open files.
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 {
            l.rlim_cur = l.rlim_max.min(8192);
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
    let mut flood = Vec::new();
    let addr = t.addr.to_socket_addrs().unwrap().next().unwrap();
    for _ in 0..1000 {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(s) => flood.push(s),
            Err(_) => break,
        }
    }
    let opened = flood.len();
    // Over the cap: refused on accept (a Busy answer, then closed).
    let busy = t.refusal_after_flood(&ConnectOptions::new("rw"));
    assert_eq!(busy, HelloStatus::Busy);
    let over = t.counter("connections_over_cap");
    let rss = peak_rss_kib(&t);
    println!("flood: {opened} connections opened; {over} refused over the caps; target peak RSS {rss} KiB");
    assert!(over >= 900, "{over} refused");
    assert!(rss < 64 * 1024, "peak RSS {rss} KiB");
    // The flood's own connections die at the Hello deadline; the target serves again.
    std::thread::sleep(Duration::from_secs(7));
    drop(flood);
    std::thread::sleep(Duration::from_millis(500));
    let mut c = t.connect();
    assert_eq!(write(&mut c, 1, 0, &pattern(3, 4096)), Status::Ok);
}

#[test]
fn a_client_that_never_reads_is_cut_off_and_sigterm_stays_bounded() {
    let t = Target::start(&["--send-timeout-s", "2", "--shutdown-timeout-s", "2"]);
    let mut c = t.connect();
    assert_eq!(write(&mut c, 1, 0, &pattern(4, MIB)), Status::Ok);
    // Reads of 1 MiB, never read back: the socket buffers fill and the sends stall.
    let mut lazy = t.connect();
    for i in 0..32u32 {
        let req = TcpClient::request(Opcode::Read, i, 0, MIB as u32, &[]);
        if lazy.send(&req, &[]).is_err() {
            break;
        }
    }
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        t.counter("send_timeouts") >= 1,
        "the stalled connection must be closed"
    );
    // And SIGTERM finishes within its bound while another one misbehaves the same way.
    let mut lazy2 = t.connect();
    for i in 0..32u32 {
        let req = TcpClient::request(Opcode::Read, i, 0, MIB as u32, &[]);
        if lazy2.send(&req, &[]).is_err() {
            break;
        }
    }
    let t0 = Instant::now();
    let (ok, lines) = t.stop();
    let took = t0.elapsed();
    println!("SIGTERM with a client that does not read: exited in {took:?}");
    assert!(ok, "{lines:#?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(lines.iter().any(|l| l.contains("exports synced")));
}

#[test]
fn an_idle_tcp_client_is_kept() {
    // The kernel client sends no keepalive messages on TCP (an idle disk on TCP sends nothing
    // at all), so the idle timeout is RDMA's alone: an idle TCP connection stays, and TCP
    // keepalive finds a peer that is gone.
    let t = Target::start(&["--idle-timeout-s", "1"]);
    let mut c = t.connect();
    assert_eq!(simple(&mut c, Opcode::Nop, 1, 0, 0), Status::Ok);
    assert!(!c.is_closed(Duration::from_secs(3)));
    assert_eq!(simple(&mut c, Opcode::Nop, 2, 0, 0), Status::Ok);
    assert_eq!(t.counter("idle_closes"), 0);
}

#[test]
fn a_client_gone_in_the_middle_of_write_data_gives_its_buffer_back() {
    // Room for four 1 MiB buffers: four clients that each send all but the last 4 KiB of a
    // 1 MiB write and go would take every one of them, if a buffer dropped with its
    // connection were not given back.
    let t = Target::start(&["--buffer-memory", "4194304"]);
    for i in 0..6u32 {
        let mut c = t.connect();
        let data = pattern(i, MIB);
        let req = TcpClient::request(Opcode::Write, i, 0, MIB as u32, &data);
        let mut v = Vec::new();
        rdmadisk_net::framing::write_request(&mut v, &req, &data).unwrap();
        v.truncate(v.len() - 4096);
        c.send_raw(&v).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        drop(c);
    }
    assert_eq!(
        t.counter_settles("buffer_bytes", 0, Duration::from_secs(5)),
        0
    );
    let mut g = t.connect();
    let data = pattern(9, MIB);
    assert_eq!(write(&mut g, 10, 0, &data), Status::Ok);
    assert_eq!(read(&mut g, 11, 0, MIB), (Status::Ok, data));
}

#[test]
fn a_client_that_stalls_in_the_middle_of_a_frame_is_cut_off() {
    let t = Target::start(&["--send-timeout-s", "1"]);
    // Half a header, then nothing; and most of a write's data, then nothing.
    let mut half = t.connect();
    let data = pattern(1, 65536);
    let req = TcpClient::request(Opcode::Write, 1, 0, 65536, &data);
    let mut v = Vec::new();
    rdmadisk_net::framing::write_request(&mut v, &req, &data).unwrap();
    half.send_raw(&v[..4]).unwrap();
    let mut most = t.connect();
    most.send_raw(&v[..v.len() - 100]).unwrap();
    assert!(half.is_closed(Duration::from_secs(5)));
    assert!(most.is_closed(Duration::from_secs(5)));
    assert!(t.counter("recv_timeouts") >= 2);
    assert_eq!(
        t.counter_settles("buffer_bytes", 0, Duration::from_secs(5)),
        0,
        "the write's buffer was given back"
    );
    // A client that is merely idle between frames stays.
    let mut idle = t.connect();
    assert!(!idle.is_closed(Duration::from_secs(2)));
    assert_eq!(simple(&mut idle, Opcode::Nop, 2, 0, 0), Status::Ok);
}

#[test]
fn an_unauthenticated_client_does_not_hold_the_export() {
    let dir = tempfile::tempdir().unwrap();
    let hex = "00112233445566778899aabbccddeeff";
    let arg = secret_file(dir.path(), hex);
    let t = Target::start(&[
        "--secret-file",
        &arg,
        "--allow",
        "127.0.0.1",
        "--allow",
        "127.0.0.2",
    ]);
    let from = |ip: &str, secret: Option<&str>| ConnectOptions {
        bind: Some(ip.parse().unwrap()),
        secret: secret.map(|h| Secret::from_hex(h.as_bytes()).unwrap()),
        ..common::client("rw")
    };
    // 127.0.0.1 has no secret: its Hellos are answered with a challenge it never meets, and
    // it keeps those connections open for as long as it may.
    let squatters: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(t.addr).unwrap();
            rdmadisk_net::framing::write_hello(
                &mut s,
                &rdmadisk_proto::wire::Hello {
                    flags: 0,
                    queue_id: 0,
                    queue_count: 1,
                    recv_credits: 8,
                    caps: 0,
                    session_id: 5,
                    epoch: 0,
                    export: rdmadisk_proto::wire::ExportName::new(b"rw").unwrap(),
                },
            )
            .unwrap();
            match rdmadisk_net::framing::read_frame(&mut s, 0) {
                Ok(rdmadisk_net::framing::Frame::HelloReply(r)) => {
                    assert_eq!(r.status, HelloStatus::Ok)
                }
                other => panic!("expected a HelloReply, got {other:?}"),
            }
            s
        })
        .collect();
    // The owner, with the secret, attaches meanwhile, and then holds the export.
    let mut a = TcpClient::connect(t.addr, &from("127.0.0.2", Some(hex))).unwrap();
    assert_eq!(write(&mut a, 1, 0, &pattern(3, 4096)), Status::Ok);
    assert_eq!(t.refusal(&from("127.0.0.1", Some(hex))), HelloStatus::Busy);
    drop(squatters);
}

fn secret_file(dir: &std::path::Path, hex: &str) -> String {
    let p = dir.join("secret");
    std::fs::write(&p, hex).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    format!("rw={}", p.display())
}

#[test]
fn a_secret_is_required_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    let arg = secret_file(dir.path(), hex);
    let mut t = Target::start(&["--secret-file", &arg, "--hello-timeout-s", "2"]);
    let with = |s: Option<&str>| ConnectOptions {
        secret: s.map(|h| Secret::from_hex(h.as_bytes()).unwrap()),
        ..common::client("rw")
    };
    // No secret: the Hello is answered (with a challenge), nothing is served.
    match TcpClient::connect(t.addr, &with(None)) {
        Err(ConnectError::Denied(_)) => {}
        other => panic!(
            "expected a demand for a secret, got {:?}",
            other.map(|_| ())
        ),
    }
    // The wrong secret: denied, and the connection goes.
    let wrong = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";
    match TcpClient::connect(t.addr, &with(Some(wrong))) {
        Err(ConnectError::Denied(_)) => {}
        other => panic!("expected Denied, got {:?}", other.map(|_| ())),
    }
    t.wait_line("authentication failed for export rw");
    // An unauthenticated request: the connection is reset, nothing is served.
    let mut raw = TcpStream::connect(t.addr).unwrap();
    let mut hello = Vec::new();
    rdmadisk_net::framing::write_hello(
        &mut hello,
        &rdmadisk_proto::wire::Hello {
            flags: 0,
            queue_id: 0,
            queue_count: 1,
            recv_credits: 8,
            caps: 0,
            session_id: 0,
            epoch: 0,
            export: rdmadisk_proto::wire::ExportName::new(b"rw").unwrap(),
        },
    )
    .unwrap();
    raw.write_all(&hello).unwrap();
    let mut frame = Vec::new();
    rdmadisk_net::framing::write_request(
        &mut frame,
        &TcpClient::request(Opcode::Read, 1, 0, 4096, &[]),
        &[],
    )
    .unwrap();
    raw.write_all(&frame).unwrap();
    let mut got = Vec::new();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = raw.read_to_end(&mut got);
    // The HelloReply came (with the challenge), then nothing but the close: no read data.
    assert!(
        got.len() < 8 + 64 + 8 + 32 + 4096,
        "{} bytes came back",
        got.len()
    );
    // The right secret works, on every request after.
    let mut c = TcpClient::connect(t.addr, &with(Some(hex))).unwrap();
    let data = pattern(5, 8192);
    assert_eq!(write(&mut c, 1, 8, &data), Status::Ok);
    assert_eq!(read(&mut c, 2, 8, 8192), (Status::Ok, data));
    assert!(t.counter("auth_failures") >= 2);
}

#[test]
fn access_is_per_export_and_exclusive_per_host() {
    let t = Target::start(&["--allow", "127.0.0.1", "--allow", "127.0.0.2"]);
    let from = |ip: &str| ConnectOptions {
        bind: Some(ip.parse().unwrap()),
        session_id: 7,
        epoch: 1,
        ..common::client("rw")
    };
    // One host holds rw; another host is refused read-write while it does, but may read.
    let mut a = TcpClient::connect(t.addr, &from("127.0.0.1")).unwrap();
    assert_eq!(write(&mut a, 1, 0, &pattern(6, 4096)), Status::Ok);
    assert_eq!(t.refusal(&from("127.0.0.2")), HelloStatus::Busy);
    let ro = ConnectOptions {
        flags: rdmadisk_proto::wire::hello_flags::READ_ONLY,
        ..from("127.0.0.2")
    };
    let mut r = TcpClient::connect(t.addr, &ro).unwrap();
    assert_eq!(read(&mut r, 2, 0, 4096).0, Status::Ok);
    // ... and only read: neither a read-only Hello nor a probe's (session 0) may write.
    assert_eq!(write(&mut r, 5, 0, &pattern(7, 4096)), Status::ReadOnly);
    let mut p = TcpClient::connect(
        t.addr,
        &ConnectOptions {
            session_id: 0,
            ..from("127.0.0.2")
        },
    )
    .unwrap();
    assert_eq!(write(&mut p, 6, 8, &pattern(8, 4096)), Status::ReadOnly);
    assert_eq!(read(&mut a, 7, 0, 4096), (Status::Ok, pattern(6, 4096)));
    // A second session of the same host is the same host (a remap after a crash, say).
    let mut a2 = TcpClient::connect(
        t.addr,
        &ConnectOptions {
            session_id: 8,
            ..from("127.0.0.1")
        },
    )
    .unwrap();
    assert_eq!(simple(&mut a2, Opcode::Nop, 3, 0, 0), Status::Ok);
    drop(a);
    drop(a2);
    std::thread::sleep(Duration::from_millis(500));
    let mut b = TcpClient::connect(t.addr, &from("127.0.0.2")).unwrap();
    assert_eq!(simple(&mut b, Opcode::Nop, 4, 0, 0), Status::Ok);
    assert!(t.counter("exclusive_refusals") >= 1);
}
