//! Who may attach, write and supersede, on the real target over TCP (docs/design.md, "The
//! fence invariant" and "Access control"): reserved ports for exports without a key; no state
//! for anyone untrusted; mutual authentication bound to the Hello, both nonces and both
//! endpoints; ordered sessions that no history lets back; fences that go on a close.

mod common;

use std::io::Write as _;
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::{pattern, read, simple, write, Target};
use rdmadisk_net::client::{ConnectError, ConnectOptions, TcpClient};
use rdmadisk_net::framing::{self, Frame};
use rdmadisk_proto::auth::{self, Endpoint, Secret, Side, Transcript};
use rdmadisk_proto::wire::{
    hello_flags, AuthRequest, ExportName, Hello, HelloStatus, Opcode, Request, Status,
    CHALLENGE_LEN,
};

const KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const OTHER: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

fn key_file(dir: &std::path::Path, name: &str, hex: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, hex).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p.display().to_string()
}

fn session(s: u32, e: u32) -> ConnectOptions {
    ConnectOptions {
        session_id: s,
        epoch: e,
        ..ConnectOptions::new("rw")
    }
}

fn keyed(s: u32, hex: Option<&str>, target_hex: Option<&str>) -> ConnectOptions {
    ConnectOptions {
        secret: hex.map(|h| Secret::from_hex(h.as_bytes()).unwrap()),
        target_secret: target_hex.map(|h| Secret::from_hex(h.as_bytes()).unwrap()),
        ..session(s, 0)
    }
}

/// The `fences` gauge as the stats file shows it, waited for (the file is rewritten every
/// second).
fn fences_become(t: &Target, want: u64) -> bool {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        if t.counter("fences") == want {
            return true;
        }
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn without_a_key_only_reserved_ports_attach() {
    let t = Target::start(&[]);
    let anyone = ConnectOptions {
        reserved_port: false,
        ..session(1, 0)
    };
    assert_eq!(t.refusal(&anyone), HelloStatus::NotAllowed);
    assert_eq!(
        t.refusal(&ConnectOptions {
            reserved_port: false,
            ..ConnectOptions::new("ro")
        }),
        HelloStatus::NotAllowed,
        "reads and probes too: the export's data is root's on the client host"
    );
    assert_eq!(t.counter("unreserved_port_refusals"), 2);
    let mut root = t.connect_with(&session(1, 0));
    assert_eq!(write(&mut root, 1, 0, &pattern(1, 4096)), Status::Ok);
    drop(t);

    let t = Target::start(&["--insecure", "rw"]);
    let mut c = t.connect_with(&anyone);
    assert_eq!(write(&mut c, 1, 0, &pattern(1, 4096)), Status::Ok);
    assert_eq!(t.counter("unreserved_port_refusals"), 0);
}

/// An attacker on the client host (no key, an ordinary port) sends Hellos with made-up
/// sessions and raw NOPs: it is refused, builds no fence, and the real disk goes on writing.
/// Half the attempts come from the real client's address (whose fence they must not move),
/// half from another one, which has no fence yet for them to build (the export is not
/// exclusive, so only the key keeps that address out).
#[test]
fn made_up_sessions_build_nothing_and_stop_no_one() {
    let other: std::net::IpAddr = "127.0.0.2".parse().unwrap();
    let from = |s: u32| (s % 2 == 1).then_some(other);
    let dir = tempfile::tempdir().unwrap();
    let k = key_file(dir.path(), "rw.key", KEY);
    let t = Target::start(&["--secret-file", &format!("rw={k}"), "--no-exclusive", "rw"]);
    let mut real = t.connect_with(&keyed(40, Some(KEY), None));
    assert_eq!(write(&mut real, 1, 0, &pattern(1, 4096)), Status::Ok);
    assert!(fences_become(&t, 1));
    for s in 0..60u32 {
        let h = Hello {
            flags: 0,
            queue_id: 0,
            queue_count: 1,
            recv_credits: 8,
            caps: 0,
            session_id: 1_000 + s * 7919,
            epoch: s,
            export: ExportName::new(b"rw").unwrap(),
        };
        let mut raw =
            rdmadisk_net::client::dial(t.addr, from(s), false, Duration::from_secs(5)).unwrap();
        framing::write_hello(&mut raw, &h).unwrap();
        // A NOP right behind the Hello, without the proof the reply asks for.
        let nop = TcpClient::request(Opcode::Nop, 1, 0, 0, &[]);
        let _ = framing::write_request(&mut raw, &nop, &[]);
        let _ = raw.flush();
        match framing::read_frame(&mut raw, 0) {
            Ok(Frame::HelloReply(r)) => assert_eq!(r.status, HelloStatus::Ok, "challenged"),
            other => panic!("{other:?}"),
        }
        // Then nothing but the end of the connection.
        assert!(
            !matches!(framing::read_frame(&mut raw, 0), Ok(Frame::Response(..))),
            "a request served before authentication"
        );
    }
    // And with the key's attempts made through the client, without the key.
    for s in 0..10 {
        assert!(matches!(
            TcpClient::connect(
                t.addr,
                &ConnectOptions {
                    bind: from(s),
                    ..keyed(2_000 + s, None, None)
                }
            ),
            Err(ConnectError::Denied(_))
        ));
    }
    assert!(fences_become(&t, 1), "an untrusted client built a fence");
    assert!(t.counter("auth_failures") >= 60);
    assert_eq!(t.counter("fence_moves"), 1);
    assert_eq!(write(&mut real, 2, 8, &pattern(2, 4096)), Status::Ok);
    let mut next = t.connect_with(&ConnectOptions {
        epoch: 1,
        ..keyed(40, Some(KEY), None)
    });
    assert_eq!(write(&mut next, 3, 16, &pattern(3, 4096)), Status::Ok);
}

#[test]
fn a_client_with_a_key_insists_that_the_target_proves_one() {
    let dir = tempfile::tempdir().unwrap();
    // No key at the target: a client with one refuses it.
    let t = Target::start(&[]);
    match TcpClient::connect(t.addr, &keyed(1, Some(KEY), None)) {
        Err(ConnectError::Denied(why)) => assert!(why.contains("does not authenticate"), "{why}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
    drop(t);
    // The target proves the export's key; a client that expects another refuses it.
    let k = key_file(dir.path(), "rw.key", KEY);
    let t = Target::start(&["--secret-file", &format!("rw={k}")]);
    match TcpClient::connect(t.addr, &keyed(1, Some(KEY), Some(OTHER))) {
        Err(ConnectError::Denied(why)) => assert!(why.contains("did not prove"), "{why}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
    let mut ok = t.connect_with(&keyed(1, Some(KEY), Some(KEY)));
    assert_eq!(write(&mut ok, 1, 0, &pattern(1, 4096)), Status::Ok);
}

/// A host key of its own, and a different key the target proves to it: the host proves its
/// key on every export, the export's shared secret is not enough for it, and the target's
/// answer carries the other key's proof.
#[test]
fn host_keys_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let host = key_file(dir.path(), "host.key", KEY);
    let target = key_file(dir.path(), "target.key", OTHER);
    let shared = key_file(dir.path(), "rw.key", &"a5".repeat(16));
    let t = Target::start(&[
        "--host-key",
        &format!("127.0.0.1={host}"),
        "--host-target-key",
        &format!("127.0.0.1={target}"),
        "--secret-file",
        &format!("rw={shared}"),
    ]);
    let mut c = t.connect_with(&keyed(1, Some(KEY), Some(OTHER)));
    assert_eq!(write(&mut c, 1, 0, &pattern(1, 4096)), Status::Ok);
    // The read-only export has no key of its own: the host still proves its own.
    let ro = ConnectOptions {
        secret: Some(Secret::from_hex(KEY.as_bytes()).unwrap()),
        target_secret: Some(Secret::from_hex(OTHER.as_bytes()).unwrap()),
        reserved_port: false,
        ..ConnectOptions::new("ro")
    };
    let mut r = t.connect_with(&ro);
    assert_eq!(read(&mut r, 1, 0, 512).0, Status::Ok);
    for wrong in [
        keyed(2, Some(&"a5".repeat(16)), None),
        keyed(2, Some(KEY), None),
    ] {
        assert!(matches!(
            TcpClient::connect(t.addr, &wrong),
            Err(ConnectError::Denied(_))
        ));
    }
}

/// A proof made for other endpoints (a relay's, forwarding a client's exchange from its own
/// address) is refused, and so is one for another Hello.
#[test]
fn proofs_are_bound_to_the_endpoints_and_the_hello() {
    let dir = tempfile::tempdir().unwrap();
    let k = key_file(dir.path(), "rw.key", KEY);
    let t = Target::start(&["--secret-file", &format!("rw={k}")]);
    let key = Secret::from_hex(KEY.as_bytes()).unwrap();
    let hello = Hello {
        flags: 0,
        queue_id: 0,
        queue_count: 1,
        recv_credits: 8,
        caps: 0,
        session_id: 9,
        epoch: 0,
        export: ExportName::new(b"rw").unwrap(),
    };
    let attempt = |tamper: &dyn Fn(&mut Transcript)| -> Status {
        let mut s = TcpStream::connect(t.addr).unwrap();
        framing::write_hello(&mut s, &hello).unwrap();
        let Ok(Frame::HelloReply(r)) = framing::read_frame(&mut s, 0) else {
            panic!("no HelloReply");
        };
        let ep = |a: std::net::SocketAddr| match a.ip() {
            std::net::IpAddr::V4(v4) => Endpoint::v4(v4.octets(), a.port()),
            std::net::IpAddr::V6(v6) => Endpoint::v6(v6.octets(), a.port()),
        };
        let nonce = [7u8; CHALLENGE_LEN];
        let mut tr = Transcript::new(
            &hello,
            r.challenge,
            nonce,
            ep(s.local_addr().unwrap()),
            ep(s.peer_addr().unwrap()),
        );
        tamper(&mut tr);
        let a = AuthRequest {
            credits: 0,
            tag: 1,
            nonce,
            proof: auth::proof(key.as_bytes(), Side::Client, &tr),
        };
        framing::write_auth(&mut s, &a).unwrap();
        match framing::read_frame(&mut s, 0) {
            Ok(Frame::AuthReply(a)) => a.status,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(attempt(&|_| {}), Status::Ok);
    assert_eq!(attempt(&|t| t.client.port ^= 1), Status::Denied);
    assert_eq!(
        attempt(&|t| t.client = Endpoint::v4([127, 0, 0, 9], t.client.port)),
        Status::Denied
    );
    assert_eq!(attempt(&|t| t.target.port ^= 1), Status::Denied);
    assert_eq!(
        attempt(&|t| t.hello[16] ^= 1),
        Status::Denied,
        "another session"
    );
    assert_eq!(
        attempt(&|t| t.hello[6] = 1),
        Status::Denied,
        "other Hello flags"
    );
}

/// The hole of a fence that remembered four sessions: after a dozen newer sessions, the first
/// one still cannot write, nor attach again, and a new mapping asked too low is told where to
/// go.
#[test]
fn no_history_lets_a_superseded_session_back() {
    let t = Target::start(&["--no-exclusive", "rw"]);
    let mut first = t.connect_with(&session(1, 0));
    assert_eq!(write(&mut first, 1, 0, &pattern(1, 4096)), Status::Ok);
    for s in 2..=13 {
        let mut c = t.connect_with(&session(s, 0));
        assert_eq!(write(&mut c, s, 0, &pattern(s, 4096)), Status::Ok);
    }
    assert_eq!(write(&mut first, 99, 0, &pattern(1, 4096)), Status::Fenced);
    assert_eq!(t.refusal(&session(1, 5)), HelloStatus::Stale);
    assert_eq!(t.refusal(&session(12, 0)), HelloStatus::Stale);
    let mut c = t.connect_with(&session(13, 0));
    assert_eq!(read(&mut c, 1, 0, 4096), (Status::Ok, pattern(13, 4096)));
    // A new mapping never joins the fence's session, not even with its very (session,
    // epoch), which a reconnect of that session may use: a forced unmap's stale writes would
    // then pass as the new mapping's.
    let opening = ConnectOptions {
        flags: hello_flags::NEW_SESSION,
        ..session(13, 0)
    };
    assert_eq!(t.refusal(&opening), HelloStatus::Stale);
    assert!(TcpClient::connect(t.addr, &session(13, 0)).is_ok());
    // A new mapping that asks with a session at or below the fence's goes above it.
    let fresh = t.connect_with(&ConnectOptions {
        new_session: true,
        ..session(1, 0)
    });
    assert_eq!(fresh.session(), 14);
}

/// A session's Close lets its fence go once its connections are gone; without one the fence
/// stays; a superseded session's Close is refused and changes nothing.
#[test]
fn a_closed_session_leaves_no_fence() {
    let t = Target::start(&["--no-exclusive", "rw"]);
    let mut a = t.connect_with(&session(3, 0));
    assert_eq!(write(&mut a, 1, 0, &pattern(1, 4096)), Status::Ok);
    assert!(fences_become(&t, 1));
    assert_eq!(simple(&mut a, Opcode::Close, 2, 0, 0), Status::Ok);
    assert!(fences_become(&t, 1), "the connection still uses it");
    drop(a);
    assert!(fences_become(&t, 0), "closed and unused: gone");
    assert_eq!(t.counter("closes"), 1);

    let mut b = t.connect_with(&session(5, 0));
    assert_eq!(write(&mut b, 1, 0, &pattern(1, 4096)), Status::Ok);
    let mut c = t.connect_with(&session(6, 0));
    assert_eq!(write(&mut c, 1, 0, &pattern(1, 4096)), Status::Ok);
    assert_eq!(simple(&mut b, Opcode::Close, 2, 0, 0), Status::Fenced);
    drop(b);
    drop(c);
    std::thread::sleep(Duration::from_millis(500));
    assert!(fences_become(&t, 1), "nobody closed session 6");
    assert_eq!(t.refusal(&session(5, 1)), HelloStatus::Stale);
    // A Close carries no data and no range.
    let mut d = t.connect_with(&session(7, 0));
    let mut bad = TcpClient::request(Opcode::Close, 3, 0, 0, &[]);
    bad.length = 512;
    let bad: Request = bad;
    let (resp, _) = d.call(&bad, &[], &mut [0u8; 16]).unwrap();
    assert_eq!(resp.status, Status::Invalid);
}

/// A connection holds its session's fence from the moment it is trusted (for an export
/// without a key: connected from a reserved port), before its first request: a Close on
/// another connection of the session does not let the fence go while it may still write,
/// and a new mapping goes above the session meanwhile.
#[test]
fn a_trusted_connection_holds_the_fence_before_its_first_request() {
    let t = Target::start(&["--no-exclusive", "rw"]);
    // Attached before there is any fence, and nothing sent yet.
    let mut quiet = t.connect_with(&session(3, 1));
    let mut a = t.connect_with(&session(3, 1));
    assert_eq!(write(&mut a, 1, 0, &pattern(1, 4096)), Status::Ok);
    assert_eq!(simple(&mut a, Opcode::Close, 2, 0, 0), Status::Ok);
    drop(a);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        t.counter("fences"),
        1,
        "the quiet connection still holds it"
    );
    let mut fresh = t.connect_with(&ConnectOptions {
        new_session: true,
        ..session(3, 1)
    });
    assert_eq!(
        fresh.session(),
        4,
        "a new mapping goes above the closed session"
    );
    assert_eq!(write(&mut fresh, 1, 0, &pattern(3, 4096)), Status::Ok);
    drop(fresh);
    // The quiet connection's write is that of a superseded session now.
    assert_eq!(write(&mut quiet, 1, 0, &pattern(2, 4096)), Status::Fenced);
    drop(quiet);
    assert!(fences_become(&t, 1), "session 4 did not close");
}

/// With a key, the target says a session is superseded only after both proofs, in an answer
/// proved with its key (AuthReply `Fenced`, the floor covered): a HelloReply `Stale` could
/// come from anyone on the path, and a client with a key believes none.
#[test]
fn with_a_key_only_a_proved_answer_says_superseded() {
    let dir = tempfile::tempdir().unwrap();
    let k = key_file(dir.path(), "rw.key", KEY);
    let t = Target::start(&["--secret-file", &format!("rw={k}")]);
    let mut a = t.connect_with(&keyed(5, Some(KEY), None));
    assert_eq!(write(&mut a, 1, 0, &pattern(1, 4096)), Status::Ok);

    // Session 2 is below the fence: the Hello is answered Ok with a challenge, nothing said.
    let opts = keyed(2, Some(KEY), None);
    let hello = Hello {
        flags: hello_flags::NEW_SESSION,
        queue_id: 0,
        queue_count: 1,
        recv_credits: 8,
        caps: 0,
        session_id: 2,
        epoch: 0,
        export: ExportName::new(b"rw").unwrap(),
    };
    let mut s = TcpStream::connect(t.addr).unwrap();
    framing::write_hello(&mut s, &hello).unwrap();
    let Ok(Frame::HelloReply(r)) = framing::read_frame(&mut s, 0) else {
        panic!("no HelloReply")
    };
    assert_eq!(r.status, HelloStatus::Ok);
    assert_eq!(r.session_floor, 0, "no floor told before the proofs");
    let p = rdmadisk_net::client::Proving::new(
        &opts,
        &hello,
        &r,
        s.local_addr().unwrap(),
        s.peer_addr().unwrap(),
        1,
        0,
    )
    .unwrap();
    framing::write_auth(&mut s, p.request()).unwrap();
    let Ok(Frame::AuthReply(ar)) = framing::read_frame(&mut s, 0) else {
        panic!("no AuthReply")
    };
    assert_eq!(ar.status, Status::Fenced);
    assert!(matches!(p.check(&ar), Err(ConnectError::Stale(5))));
    drop(s);
    // A wrong key learns nothing of the session: Denied.
    let wrong = keyed(2, Some(OTHER), None);
    assert!(matches!(
        TcpClient::connect(t.addr, &wrong),
        Err(ConnectError::Denied(_))
    ));
    // A new mapping goes above the floor, told by the proved answer.
    let mut fresh = t.connect_with(&ConnectOptions {
        new_session: true,
        ..keyed(1, Some(KEY), None)
    });
    assert_eq!(fresh.session(), 6);
    assert_eq!(write(&mut fresh, 1, 0, &pattern(2, 4096)), Status::Ok);
    drop(t);

    // Something on the path that answers Stale: not believed by a client with a key.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let fake = std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        let _ = framing::read_frame(&mut c, 0);
        let mut r = rdmadisk_proto::wire::HelloReply::rejected(HelloStatus::Stale);
        r.session_floor = u32::MAX - 1;
        framing::write_hello_reply(&mut c, &r).unwrap();
    });
    let opts = ConnectOptions {
        new_session: true,
        reserved_port: false,
        ..keyed(1, Some(KEY), None)
    };
    match TcpClient::connect(addr, &opts) {
        Err(ConnectError::Protocol(why)) => assert!(why.contains("not believed"), "{why}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
    fake.join().unwrap();
}
