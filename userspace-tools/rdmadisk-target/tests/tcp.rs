//! End-to-end tests of the real target binary over TCP on temp files.

mod common;

use std::net::IpAddr;
use std::time::Duration;

use common::{pattern, read, simple, write, Target, MIB};
use rdmadisk_net::client::{ConnectError, ConnectOptions, TcpClient};
use rdmadisk_proto::crc32c::crc32c;
use rdmadisk_proto::wire::{req_flags, HelloStatus, Opcode, Status};

#[test]
fn write_read_flush_discard_zeroes() {
    let t = Target::start(&[]);
    let mut c = t.connect_to("rw");
    let r = *c.reply();
    assert_eq!(r.status, HelloStatus::Ok);
    assert_eq!(r.capacity_sectors, (16 * MIB / 512) as u64);
    assert_eq!(r.max_io_bytes, MIB as u32);
    assert_eq!(r.initial_credits, 32);

    for (i, &(sector, len)) in [
        (0u64, 4096usize),
        (8, 512),
        (100, 65536),
        (2048, MIB),
        (32760, 4096),
    ]
    .iter()
    .enumerate()
    {
        let data = pattern(i as u32 + 1, len);
        assert_eq!(write(&mut c, i as u32, sector, &data), Status::Ok);
        let (st, back) = read(&mut c, 100 + i as u32, sector, len);
        assert_eq!(st, Status::Ok);
        assert!(back == data, "read back differs at sector {sector}");
    }
    // FUA write.
    let data = pattern(99, 8192);
    let mut req = TcpClient::request(Opcode::Write, 7, 64, 8192, &data);
    req.flags = req_flags::FUA;
    let (resp, _) = c.call(&req, &data, &mut [0u8; 16]).unwrap();
    assert_eq!(resp.status, Status::Ok);
    assert_eq!(simple(&mut c, Opcode::Flush, 8, 0, 0), Status::Ok);
    assert_eq!(simple(&mut c, Opcode::Nop, 9, 0, 0), Status::Ok);
    // Discard and write-zeroes read back as zeroes.
    assert_eq!(simple(&mut c, Opcode::Discard, 10, 2048, 65536), Status::Ok);
    assert_eq!(
        simple(&mut c, Opcode::WriteZeroes, 11, 2048 + 128, 65536),
        Status::Ok
    );
    let (st, back) = read(&mut c, 12, 2048, 131072);
    assert_eq!(st, Status::Ok);
    assert!(back.iter().all(|&b| b == 0));
    // The rest of that 1 MiB write is intact.
    let (_, back) = read(&mut c, 13, 2048 + 256, MIB - 131072);
    assert!(back == pattern(4, MIB)[131072..]);

    // Pipelined requests (queue depth 8) each complete once, with the right tags. Not
    // necessarily in order: the target serves them at once, and their backing completions,
    // not their arrival, order the responses.
    for tag in 0..8u32 {
        let d = pattern(1000 + tag, 4096);
        c.send(
            &TcpClient::request(Opcode::Write, 500 + tag, 4096 + 8 * tag as u64, 4096, &d),
            &d,
        )
        .unwrap();
    }
    let mut tags = Vec::new();
    for _ in 0..8u32 {
        let (resp, _) = c.recv(&mut [0u8; 16]).unwrap();
        assert_eq!(
            (resp.status, resp.credits),
            (Status::Ok, 1),
            "tag {}",
            resp.tag
        );
        tags.push(resp.tag);
    }
    tags.sort_unstable();
    assert_eq!(tags, (500..508).collect::<Vec<u32>>());
    assert_eq!(t.counter("writes"), 5 + 1 + 8);
    let (ok, lines) = t.stop();
    assert!(ok, "target exit status");
    assert!(
        lines.iter().any(|l| l == "crc_failures=0"),
        "counters printed at exit: {lines:?}"
    );
}

#[test]
fn service_time_counters_count_every_answered_request() {
    let t = Target::start(&[]);
    let mut c = t.connect_to("rw");
    let data = pattern(5, 65536);
    for i in 0..4u32 {
        assert_eq!(write(&mut c, i, u64::from(i) * 128, &data), Status::Ok);
        assert_eq!(
            read(&mut c, 10 + i, u64::from(i) * 128, 65536).0,
            Status::Ok
        );
    }
    assert_eq!(simple(&mut c, Opcode::Nop, 20, 0, 0), Status::Ok);
    // 8 backing operations, 9 answers (the NOP's has none); every answer took some time,
    // and the backing's share of it cannot exceed the whole.
    assert_eq!(t.counter("served"), 9);
    assert_eq!(t.counter_now("backing_ops"), 8);
    let (service, backing) = (t.counter_now("service_us"), t.counter_now("backing_us"));
    assert!(service > 0, "service_us={service}");
    assert!(
        backing <= service,
        "backing_us={backing} > service_us={service}"
    );
}

#[test]
fn bounds_errors_keep_the_connection() {
    let t = Target::start(&[]);
    let mut c = t.connect_to("rw");
    let cap = c.reply().capacity_sectors;
    assert_eq!(read(&mut c, 1, cap, 4096).0, Status::OutOfRange);
    assert_eq!(read(&mut c, 2, cap - 4, 4096).0, Status::OutOfRange);
    assert_eq!(read(&mut c, 3, u64::MAX - 1, 4096).0, Status::OutOfRange);
    assert_eq!(
        write(&mut c, 4, cap - 1, &pattern(1, 1024)),
        Status::OutOfRange
    );
    assert_eq!(
        simple(&mut c, Opcode::Discard, 5, cap, 4096),
        Status::OutOfRange
    );
    // Bad lengths.
    assert_eq!(read(&mut c, 6, 0, 1000).0, Status::Invalid);
    assert_eq!(read(&mut c, 7, 0, 2 * MIB).0, Status::Invalid);
    assert_eq!(write(&mut c, 8, 0, &pattern(2, 2 * MIB)), Status::Invalid);
    assert_eq!(simple(&mut c, Opcode::Flush, 9, 0, 512), Status::Invalid);
    // Bad write CRC: nothing written.
    let data = pattern(3, 4096);
    let mut req = TcpClient::request(Opcode::Write, 10, 0, 4096, &data);
    req.data_crc ^= 1;
    let (resp, _) = c.call(&req, &data, &mut [0u8; 16]).unwrap();
    assert_eq!(resp.status, Status::CrcMismatch);
    assert!(read(&mut c, 11, 0, 4096).1.iter().all(|&b| b == 0));
    // Still usable.
    assert_eq!(write(&mut c, 12, 0, &data), Status::Ok);
    assert_eq!(read(&mut c, 13, 0, 4096).1, data);
    assert_eq!(t.counter("bound_violations"), 9);
    assert_eq!(t.counter_now("crc_failures"), 1);
    assert_eq!(t.counter_now("resets"), 0);
}

#[test]
fn read_only_export_and_unknown_export() {
    let t = Target::start(&[]);
    let mut c = t.connect_to("ro");
    assert_ne!(
        c.reply().features & rdmadisk_proto::wire::features::READ_ONLY,
        0
    );
    assert_eq!(write(&mut c, 1, 0, &pattern(1, 4096)), Status::ReadOnly);
    assert_eq!(
        simple(&mut c, Opcode::Discard, 2, 0, 4096),
        Status::ReadOnly
    );
    assert_eq!(
        simple(&mut c, Opcode::WriteZeroes, 3, 0, 4096),
        Status::ReadOnly
    );
    let (st, back) = read(&mut c, 4, 0, 4096);
    assert_eq!(st, Status::Ok);
    assert!(back.iter().all(|&b| b == 0x42));
    assert_eq!(simple(&mut c, Opcode::Flush, 5, 0, 0), Status::Ok);
    match TcpClient::connect(t.addr, &ConnectOptions::new("nope")) {
        Err(ConnectError::Refused(HelloStatus::NoSuchExport)) => {}
        other => panic!("expected NoSuchExport, got {:?}", other.map(|_| ())),
    }
    let unknown = ConnectOptions {
        flags: 0x8000,
        ..ConnectOptions::new("rw")
    };
    match TcpClient::connect(t.addr, &unknown) {
        Err(ConnectError::Refused(HelloStatus::Invalid)) => {}
        other => panic!("expected Invalid, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn garbage_resets_only_that_connection() {
    let t = Target::start(&[]);
    let mut bad = t.connect_to("rw");
    let mut good = t.connect_to("rw");
    let data = pattern(7, 4096);
    assert_eq!(write(&mut good, 1, 0, &data), Status::Ok);
    bad.send_raw(b"this is not a frame header, nor anything else")
        .unwrap();
    assert!(
        bad.is_closed(Duration::from_secs(5)),
        "garbage must reset that connection"
    );
    // A frame with a valid header but an unknown opcode also resets.
    let mut bad2 = t.connect_to("rw");
    let mut frame = rdmadisk_proto::wire::FrameHeader {
        kind: rdmadisk_proto::wire::FrameKind::Request,
        flags: 0,
        data_len: 0,
    }
    .to_bytes()
    .to_vec();
    frame.extend_from_slice(&[0xee; 48]);
    bad2.send_raw(&frame).unwrap();
    assert!(bad2.is_closed(Duration::from_secs(5)));
    // The other client keeps working.
    assert_eq!(read(&mut good, 2, 0, 4096).1, data);
    assert_eq!(write(&mut good, 3, 8, &data), Status::Ok);
    assert_eq!(t.counter("resets"), 2);
    // And new clients still connect.
    let mut again = t.connect_to("rw");
    assert_eq!(read(&mut again, 4, 8, 4096).1, data);
}

#[test]
fn allow_list_refuses_other_addresses() {
    let t = Target::start(&["--allow", "127.0.0.2"]);
    let opts = |ip: &str| ConnectOptions {
        bind: Some(ip.parse::<IpAddr>().unwrap()),
        ..common::client("rw")
    };
    match TcpClient::connect(t.addr, &opts("127.0.0.3")) {
        Err(ConnectError::Refused(HelloStatus::NotAllowed)) => {}
        other => panic!("expected NotAllowed, got {:?}", other.map(|_| ())),
    }
    match TcpClient::connect(t.addr, &ConnectOptions::new("rw")) {
        Err(ConnectError::Refused(HelloStatus::NotAllowed)) => {}
        other => panic!(
            "127.0.0.1 is not allowed either, got {:?}",
            other.map(|_| ())
        ),
    }
    let mut c = TcpClient::connect(t.addr, &opts("127.0.0.2")).unwrap();
    assert_eq!(simple(&mut c, Opcode::Nop, 1, 0, 0), Status::Ok);
    assert_eq!(t.counter("refused"), 2);
}

/// The target-wide allow-list is checked on accept, before a byte is read: a client from
/// elsewhere that sends nothing at all is answered NotAllowed and closed at once, not left to
/// the Hello deadline.
#[test]
fn the_allow_list_refuses_on_accept_before_reading() {
    let t = Target::start(&["--allow", "127.0.0.2", "--hello-timeout-s", "30"]);
    let mut s = rdmadisk_net::client::dial(
        t.addr,
        Some("127.0.0.3".parse().unwrap()),
        false,
        Duration::from_secs(5),
    )
    .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    match rdmadisk_net::framing::read_frame(&mut s, 0) {
        Ok(rdmadisk_net::framing::Frame::HelloReply(r)) => {
            assert_eq!(r.status, HelloStatus::NotAllowed)
        }
        other => panic!("expected a refusal before sending anything, got {other:?}"),
    }
    let mut rest = Vec::new();
    assert_eq!(std::io::Read::read_to_end(&mut s, &mut rest).unwrap(), 0);
    assert_eq!(t.counter("refused"), 1);
    assert_eq!(
        t.counter_now("tcp_connections"),
        0,
        "no connection was started"
    );
    assert_eq!(t.counter_now("hello_timeouts"), 0);
}

/// An export's own allow-list, at run time: a client the target-wide list admits is refused
/// on the export whose list does not name it (and served on the others), and the one it names
/// is served.
#[test]
fn an_export_allow_list_refuses_clients_it_does_not_name() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("guarded.img");
    std::fs::write(&img, vec![0u8; MIB]).unwrap();
    let conf = dir.path().join("target.toml");
    std::fs::write(
        &conf,
        format!(
            "[[export]]\nname = \"guarded\"\npath = \"{}\"\nallow = [\"127.0.0.2\"]\n",
            img.display()
        ),
    )
    .unwrap();
    let t = Target::start(&["--config", conf.to_str().unwrap()]);
    let from = |ip: &str, export: &str| ConnectOptions {
        bind: Some(ip.parse::<IpAddr>().unwrap()),
        ..common::client(export)
    };
    match TcpClient::connect(t.addr, &from("127.0.0.3", "guarded")) {
        Err(ConnectError::Refused(HelloStatus::NotAllowed)) => {}
        other => panic!("expected NotAllowed, got {:?}", other.map(|_| ())),
    }
    let mut ro = TcpClient::connect(t.addr, &from("127.0.0.3", "ro")).unwrap();
    assert_eq!(read(&mut ro, 1, 0, 512).0, Status::Ok);
    let mut ok = TcpClient::connect(t.addr, &from("127.0.0.2", "guarded")).unwrap();
    assert_eq!(write(&mut ok, 1, 0, &pattern(1, 4096)), Status::Ok);
    assert_eq!(t.counter("refused"), 1);
}

/// Write and flush errors are sticky per export, end to end. The target runs with a file
/// size limit (RLIMIT_FSIZE, SIGXFSZ ignored) of half the export: a write past it fails in
/// the kernel (EFBIG) like a failing store. From then on every Flush and FUA write of the
/// export, on any connection, is answered IoError; plain writes and reads still go on.
#[test]
fn a_failed_write_fails_every_later_flush_and_fua_write() {
    use std::os::unix::process::CommandExt;
    let t = Target::start_with(&[], |cmd| {
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let half = libc::rlimit {
                    rlim_cur: 8 << 20,
                    rlim_max: 8 << 20,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &half) != 0
                    || libc::signal(libc::SIGXFSZ, libc::SIG_IGN) == libc::SIG_ERR
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    let mut a = t.connect_with(&ConnectOptions {
        queue_count: 2,
        ..common::client("rw")
    });
    let mut b = t.connect_with(&ConnectOptions {
        queue_id: 1,
        queue_count: 2,
        ..common::client("rw")
    });
    let fua = |c: &mut TcpClient, tag, sector| {
        let data = pattern(tag, 4096);
        let mut req = TcpClient::request(Opcode::Write, tag, sector, 4096, &data);
        req.flags = req_flags::FUA;
        c.call(&req, &data, &mut [0u8; 16]).unwrap().0.status
    };
    assert_eq!(write(&mut a, 1, 0, &pattern(1, 4096)), Status::Ok);
    assert_eq!(simple(&mut a, Opcode::Flush, 2, 0, 0), Status::Ok);
    assert_eq!(fua(&mut a, 3, 8), Status::Ok);
    // Past the limit: the store "fails".
    assert_eq!(write(&mut a, 4, 16384, &pattern(4, 4096)), Status::IoError);
    assert_eq!(simple(&mut a, Opcode::Flush, 5, 0, 0), Status::IoError);
    assert_eq!(fua(&mut a, 6, 8), Status::IoError);
    // The other connection of the export too.
    assert_eq!(simple(&mut b, Opcode::Flush, 7, 0, 0), Status::IoError);
    assert_eq!(fua(&mut b, 8, 16), Status::IoError);
    // Not a refusal to serve: plain writes and reads go on.
    assert_eq!(write(&mut b, 9, 24, &pattern(9, 4096)), Status::Ok);
    assert_eq!(read(&mut b, 10, 24, 4096), (Status::Ok, pattern(9, 4096)));
    assert_eq!(t.counter("io_errors"), 1);
}

#[test]
fn fault_injection_switches() {
    let t = Target::start(&["--corrupt-read-every", "2", "--fail-write-crc-every", "3"]);
    let mut c = t.connect_to("rw");
    let data = pattern(5, 4096);
    let results: Vec<Status> = (0..3).map(|i| write(&mut c, i, 0, &data)).collect();
    assert_eq!(results, vec![Status::Ok, Status::Ok, Status::CrcMismatch]);
    let mut bad_crc = 0;
    for i in 0..4 {
        let req = TcpClient::request(Opcode::Read, 10 + i, 0, 4096, &[]);
        let mut buf = vec![0u8; 4096];
        let (resp, n) = c.call(&req, &[], &mut buf).unwrap();
        assert_eq!((resp.status, n), (Status::Ok, 4096));
        if crc32c(&buf) != resp.data_crc {
            bad_crc += 1;
        }
    }
    assert_eq!(bad_crc, 2);
    assert_eq!(t.counter("injected_read_corruptions"), 2);
    assert_eq!(t.counter_now("injected_write_crc_failures"), 1);
}

#[test]
fn sigterm_finishes_and_syncs() {
    let t = Target::start(&[]);
    let mut c = t.connect_to("rw");
    let data = pattern(11, 65536);
    assert_eq!(write(&mut c, 1, 0, &data), Status::Ok);
    let (ok, lines) = t.stop();
    assert!(ok);
    assert!(
        lines.iter().any(|l| l.contains("exports synced")),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l == "writes=1"), "{lines:?}");
    assert!(c.is_closed(Duration::from_secs(5)));
}
