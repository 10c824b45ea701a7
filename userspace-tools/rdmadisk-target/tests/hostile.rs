//! The hostile test mode over TCP: a raw client checks that each hostile response is exactly
//! what the README promises, and that the target counts it.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::time::Duration;

use common::{pattern, Target};
use rdmadisk_net::client::TcpClient;
use rdmadisk_proto::wire::{
    response_off, DecodeError, FrameHeader, FrameKind, Opcode, ReqId, Response, Status,
    FRAME_HEADER_LEN, RESPONSE_LEN,
};

fn tag(slot: u16) -> u32 {
    ReqId { slot, gen: 0x5a }.tag()
}

/// Starts a target whose every 2nd response is hostile with `kinds`, and connects to it.
fn start(kinds: &str, every: &str) -> (Target, TcpClient) {
    let mut t = Target::start(&["--hostile", kinds, "--hostile-every", every]);
    let warning = t.wait_line("WARNING: HOSTILE MODE, FOR TESTS ONLY");
    assert!(
        warning.contains(kinds.split(',').next().unwrap()),
        "{warning}"
    );
    let mut c = t.connect();
    c.stream()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    (t, c)
}

/// One raw frame: header, the 32 message bytes, the data.
fn frame(s: &mut TcpStream) -> (FrameHeader, [u8; RESPONSE_LEN], Vec<u8>) {
    let mut h = [0u8; FRAME_HEADER_LEN];
    s.read_exact(&mut h).unwrap();
    let hdr = FrameHeader::decode(&h).unwrap();
    assert_eq!(hdr.kind, FrameKind::Response);
    let mut m = [0u8; RESPONSE_LEN];
    s.read_exact(&mut m).unwrap();
    let mut d = vec![0u8; hdr.data_len as usize];
    s.read_exact(&mut d).unwrap();
    (hdr, m, d)
}

fn response(s: &mut TcpStream) -> (Response, Vec<u8>) {
    let (hdr, m, d) = frame(s);
    let r = Response::decode(&m).unwrap();
    assert_eq!(hdr.data_len as usize, d.len());
    (r, d)
}

fn send(c: &mut TcpClient, op: Opcode, slot: u16, sector: u64, data: &[u8], len: u32) {
    let req = TcpClient::request(op, tag(slot), sector, len, data);
    c.send(&req, data).unwrap();
}

fn nop(c: &mut TcpClient, slot: u16) {
    send(c, Opcode::Nop, slot, 0, &[], 0);
}

fn expect_ok(c: &mut TcpClient, slot: u16) -> (Response, Vec<u8>) {
    let (r, d) = response(c.stream());
    assert_eq!((r.tag, r.status, r.credits), (tag(slot), Status::Ok, 1));
    (r, d)
}

#[test]
fn unknown_tag() {
    let (t, mut c) = start("unknown_tag", "2");
    nop(&mut c, 1);
    expect_ok(&mut c, 1);
    nop(&mut c, 2);
    let (extra, d) = response(c.stream());
    assert_eq!(
        ReqId::from_tag(extra.tag),
        ReqId {
            slot: 0xfff0,
            gen: 0x5a
        }
    );
    assert_eq!((extra.credits, extra.length, d.len()), (0, 0, 0));
    expect_ok(&mut c, 2);
    nop(&mut c, 3);
    expect_ok(&mut c, 3);
    assert_eq!(t.counter("hostile_unknown_tag"), 1);
    assert_eq!(t.counter_now("hostile_acts"), 1);
}

#[test]
fn dup_response() {
    let (t, mut c) = start("dup_response", "2");
    let data = pattern(3, 4096);
    send(&mut c, Opcode::Write, 1, 0, &data, 4096);
    expect_ok(&mut c, 1);
    send(&mut c, Opcode::Read, 2, 0, &[], 4096);
    let (first, d1) = expect_ok(&mut c, 2);
    let (second, d2) = response(c.stream());
    assert_eq!(
        second,
        Response {
            credits: 0,
            ..first
        }
    );
    assert!(d1 == data && d2 == data);
    nop(&mut c, 3);
    expect_ok(&mut c, 3);
    assert_eq!(t.counter("hostile_dup_response"), 1);
}

#[test]
fn bad_status() {
    let (t, mut c) = start("bad_status", "2");
    nop(&mut c, 1);
    expect_ok(&mut c, 1);
    nop(&mut c, 2);
    let (hdr, m, _) = frame(c.stream());
    assert_eq!(hdr.data_len, 0);
    assert_eq!(
        &m[response_off::STATUS..response_off::STATUS + 2],
        &0x7fffu16.to_le_bytes()
    );
    assert_eq!(Response::decode(&m), Err(DecodeError::BadStatus(0x7fff)));
    assert_eq!(&m[..4], &tag(2).to_le_bytes());
    nop(&mut c, 3);
    expect_ok(&mut c, 3);
    assert_eq!(t.counter("hostile_bad_status"), 1);
}

#[test]
fn long_length_waits_for_a_read() {
    let (t, mut c) = start("long_length", "3");
    let data = pattern(4, 4096);
    send(&mut c, Opcode::Write, 1, 0, &data, 4096);
    expect_ok(&mut c, 1);
    send(&mut c, Opcode::Read, 2, 0, &[], 4096);
    let (r, d) = expect_ok(&mut c, 2);
    assert_eq!((r.length, d.len()), (4096, 4096), "not due yet");
    // Due on this 3rd response, but a write response has no data: the act waits.
    send(&mut c, Opcode::Write, 3, 8, &data, 4096);
    expect_ok(&mut c, 3);
    send(&mut c, Opcode::Read, 4, 0, &[], 4096);
    let (r, d) = response(c.stream());
    assert_eq!(
        (r.tag, r.status, r.length),
        (tag(4), Status::Ok, 4096 + 4096)
    );
    assert_eq!(d.len(), 8192, "the frame carries the extra bytes too");
    assert!(d[..4096] == data[..], "the asked-for data comes first");
    assert!(d[4096..].iter().all(|&b| b == 0), "the extra is zeroes");
    send(&mut c, Opcode::Read, 5, 0, &[], 4096);
    let (r, d) = expect_ok(&mut c, 5);
    assert_eq!((r.length, d.len()), (4096, 4096));
    assert_eq!(t.counter("hostile_long_length"), 1);
}

#[test]
fn truncated_then_closed() {
    let (t, mut c) = start("truncated", "2");
    nop(&mut c, 1);
    expect_ok(&mut c, 1);
    send(&mut c, Opcode::Read, 2, 0, &[], 4096);
    let mut rest = Vec::new();
    c.stream().read_to_end(&mut rest).unwrap();
    assert_eq!(
        rest.len(),
        FRAME_HEADER_LEN + 16,
        "header, 16 message bytes, EOF"
    );
    let hdr = FrameHeader::decode(&rest).unwrap();
    assert_eq!((hdr.kind, hdr.data_len), (FrameKind::Response, 4096));
    assert_eq!(
        &rest[FRAME_HEADER_LEN..FRAME_HEADER_LEN + 4],
        &tag(2).to_le_bytes()
    );
    assert_eq!(t.counter("hostile_truncated"), 1);
    assert_eq!(t.counter_now("resets"), 0);
}

#[test]
fn garbage_instead_of_a_frame() {
    let (t, mut c) = start("garbage", "2");
    nop(&mut c, 1);
    expect_ok(&mut c, 1);
    nop(&mut c, 2);
    let mut g = [0u8; 40];
    c.stream().read_exact(&mut g).unwrap();
    assert!(FrameHeader::decode(&g).is_err(), "{g:?}");
    // Exactly 40 bytes: the next frame follows right after them.
    nop(&mut c, 3);
    expect_ok(&mut c, 3);
    assert_eq!(t.counter("hostile_garbage"), 1);
}

#[test]
fn credit_overflow() {
    let (t, mut c) = start("credit_overflow", "2");
    nop(&mut c, 1);
    expect_ok(&mut c, 1);
    nop(&mut c, 2);
    let (r, _) = response(c.stream());
    assert_eq!((r.tag, r.status, r.credits), (tag(2), Status::Ok, 0xffff));
    assert_eq!(t.counter("hostile_credit_overflow"), 1);
}

#[test]
fn kinds_take_turns_every_response() {
    let (t, mut c) = start("bad_status,credit_overflow", "1");
    for slot in 1..=4u16 {
        nop(&mut c, slot);
        let (_, m, _) = frame(c.stream());
        if slot % 2 == 1 {
            assert_eq!(Response::decode(&m), Err(DecodeError::BadStatus(0x7fff)));
        } else {
            assert_eq!(Response::decode(&m).unwrap().credits, 0xffff);
        }
    }
    assert_eq!(t.counter("hostile_acts"), 4);
    assert_eq!(t.counter_now("hostile_bad_status"), 2);
    assert_eq!(t.counter_now("hostile_credit_overflow"), 2);
}

#[test]
fn rdma_only_kinds_leave_tcp_alone() {
    let (mut t, mut c) = start("wrong_rkey,no_invalidate,late_write", "1");
    t.wait_line("RDMA only: wrong_rkey, no_invalidate, late_write");
    let data = pattern(5, 4096);
    send(&mut c, Opcode::Write, 1, 0, &data, 4096);
    expect_ok(&mut c, 1);
    send(&mut c, Opcode::Read, 2, 0, &[], 4096);
    let (_, d) = expect_ok(&mut c, 2);
    assert!(d == data);
    assert_eq!(t.counter("hostile_acts"), 0);
}
