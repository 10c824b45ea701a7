//! The buffer budget against the real target over TCP (userspace-tools/README.md, "Memory is
//! bounded"): requests take buffers of their own size, one short of a buffer is served as
//! soon as one comes back, and a connection's own buffers count in the budget.

mod common;

use std::time::{Duration, Instant};

use common::{pattern, write, Target};
use rdmadisk_net::client::TcpClient;
use rdmadisk_proto::wire::{HelloStatus, Opcode, Status};

/// Waits up to 10 s for counter `name` to reach `want`; its last value.
fn counter_reaches(t: &Target, name: &str, want: u64) -> u64 {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let v = t.counter(name);
        if v >= want || Instant::now() > until {
            return v;
        }
    }
}

/// Under the default budget (256 MiB, 1 MiB requests), buffers of the largest size would let
/// 256 requests hold data at once. 300 writes of 4 KiB, each held by the target for good
/// (`--stall-sector`), all get a buffer, without a wait.
#[test]
fn three_hundred_small_requests_hold_buffers_at_once_under_the_default_budget() {
    let t = Target::start(&["--credits", "512", "--stall-sector", "0"]);
    let mut c = t.connect();
    let data = pattern(1, 4096);
    for tag in 0..300u32 {
        let req = TcpClient::request(Opcode::Write, tag, 0, 4096, &data);
        c.send(&req, &data).unwrap();
    }
    let stalled = counter_reaches(&t, "stalled_requests", 300);
    let (held, own) = (
        t.counter_now("buffer_bytes"),
        t.counter_now("connection_buffer_bytes"),
    );
    println!(
        "300 writes of 4 KiB: {stalled} hold a buffer; data buffers {} bytes, waits {}",
        held - own,
        t.counter_now("buffer_waits")
    );
    assert_eq!(stalled, 300);
    assert_eq!(t.counter_now("buffer_waits"), 0);
    assert_eq!(held - own, 300 * 4096);
}

/// Room for one 64 KiB data buffer: A holds it (its write's last byte still to come) while B's
/// write waits for one. Once A's last byte comes, A is answered and gives its buffer back, and
/// B must be served at once, not at its connection's next tick (250 ms).
#[test]
fn a_request_short_of_a_buffer_is_served_as_soon_as_one_comes_back() {
    // Two connections' staging buffers (64 KiB each) and one data buffer.
    let t = Target::start(&["--max-io-bytes", "65536", "--buffer-memory", "196608"]);
    let mut a = t.connect();
    let mut b = t.connect();
    let mut gaps = Vec::new();
    for round in 0..10u32 {
        let x = pattern(round, 65536);
        let req = TcpClient::request(Opcode::Write, round, 0, 65536, &x);
        let mut frame = Vec::new();
        rdmadisk_net::framing::write_request(&mut frame, &req, &x).unwrap();
        let (most, last) = frame.split_at(frame.len() - 1);
        a.send_raw(most).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let y = pattern(100 + round, 65536);
        b.send(
            &TcpClient::request(Opcode::Write, round, 128, 65536, &y),
            &y,
        )
        .unwrap();
        // B's connection goes to sleep short of a buffer.
        std::thread::sleep(Duration::from_millis(50));
        a.send_raw(last).unwrap();
        let (ra, _) = a.recv(&mut [0u8; 16]).unwrap();
        let at = Instant::now();
        let (rb, _) = b.recv(&mut [0u8; 16]).unwrap();
        gaps.push(at.elapsed());
        assert_eq!((ra.status, rb.status), (Status::Ok, Status::Ok));
    }
    gaps.sort();
    let mean = gaps.iter().sum::<Duration>() / gaps.len() as u32;
    println!(
        "B answered after A gave its buffer back: median {:?}, mean {mean:?}, max {:?} (10 rounds)",
        gaps[gaps.len() / 2],
        gaps[gaps.len() - 1]
    );
    assert!(t.counter("buffer_waits") >= 10, "B did wait");
    assert!(gaps[gaps.len() / 2] < Duration::from_millis(60), "{gaps:?}");
}

/// A connection's own buffers (TCP: its 64 KiB staging buffer) count in buffer_memory, which
/// always keeps room for one request of max_io_bytes: one that does not fit is refused Busy
/// on accept, with a log line, and one fits again once another has gone.
#[test]
fn a_connection_whose_own_buffers_do_not_fit_is_refused_busy() {
    let mut t = Target::start(&["--max-io-bytes", "65536", "--buffer-memory", "196608"]);
    let mut one = t.connect();
    let mut two = t.connect();
    assert_eq!(t.refusal(&common::client("rw")), HelloStatus::Busy);
    t.wait_line("does not fit in buffer_memory");
    assert_eq!(t.counter("memory_refusals"), 1);
    assert_eq!(t.counter_now("connection_buffer_bytes"), 2 * 65536);
    // The two it took are served, within what is left.
    assert_eq!(write(&mut one, 1, 0, &pattern(1, 65536)), Status::Ok);
    assert_eq!(write(&mut two, 2, 128, &pattern(2, 65536)), Status::Ok);
    drop(one);
    let until = Instant::now() + Duration::from_secs(5);
    let mut three = loop {
        match TcpClient::connect(t.addr, &common::client("rw")) {
            Ok(c) => break c,
            Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(write(&mut three, 3, 256, &pattern(3, 4096)), Status::Ok);
}
