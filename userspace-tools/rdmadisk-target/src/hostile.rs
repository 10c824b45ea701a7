//! Test-only hostile mode (`--hostile`): every Nth response of a connection is deliberately
//! wrong in one of a few ways, so that a client's defences can be tested against a real target.
//!
//! This module holds the pure part: the kinds, which response gets which act, and the bytes of
//! the hostile messages. The transports send them. Every hostile message still respects the
//! target's own rules: it never reads past a buffer, never grants request credits the target
//! has no receive for (extra messages grant 0), and on RDMA never sends without a response
//! credit.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use rdmadisk_proto::wire::{
    response_off, FrameHeader, FrameKind, Opcode, ReqId, Response, FRAME_HEADER_LEN, FRAME_MAGIC,
    RESPONSE_LEN,
};

/// One kind of hostile act.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// An extra response, before the real one, whose tag names no request.
    UnknownTag,
    /// The response, then the same response again.
    DupResponse,
    /// RDMA: Send-with-Invalidate of another rkey than the request's.
    WrongRkey,
    /// RDMA: a data response as a plain Send, leaving the request's rkey valid.
    NoInvalidate,
    /// A status field out of range.
    BadStatus,
    /// A read response claiming (TCP: carrying) 4 KiB more than asked.
    LongLength,
    /// RDMA: a 16-byte response. TCP: a frame cut short, then the connection closed.
    Truncated,
    /// Random bytes where a response (RDMA) or a frame (TCP) should be.
    Garbage,
    /// A response granting 0xffff request credits.
    CreditOverflow,
    /// RDMA: after a read's response, one more RDMA Write to its (now invalidated) rkey.
    LateWrite,
}

impl Kind {
    pub const ALL: [Kind; 10] = [
        Kind::UnknownTag,
        Kind::DupResponse,
        Kind::WrongRkey,
        Kind::NoInvalidate,
        Kind::BadStatus,
        Kind::LongLength,
        Kind::Truncated,
        Kind::Garbage,
        Kind::CreditOverflow,
        Kind::LateWrite,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::UnknownTag => "unknown_tag",
            Kind::DupResponse => "dup_response",
            Kind::WrongRkey => "wrong_rkey",
            Kind::NoInvalidate => "no_invalidate",
            Kind::BadStatus => "bad_status",
            Kind::LongLength => "long_length",
            Kind::Truncated => "truncated",
            Kind::Garbage => "garbage",
            Kind::CreditOverflow => "credit_overflow",
            Kind::LateWrite => "late_write",
        }
    }

    pub fn parse(s: &str) -> Result<Kind, String> {
        let s = s.trim();
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == s || k.name().replace('_', "-") == s)
            .ok_or_else(|| {
                let all: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown hostile kind {s:?} (kinds: {})", all.join(", "))
            })
    }

    /// Whether the kind means anything on TCP: there is no rkey to invalidate or write to.
    pub fn on_tcp(self) -> bool {
        !matches!(self, Kind::WrongRkey | Kind::NoInvalidate | Kind::LateWrite)
    }

    /// Whether the kind can be applied to the response described by `c`.
    pub fn fits(self, c: &Candidate) -> bool {
        match self {
            Kind::UnknownTag | Kind::DupResponse => c.tcp || c.spare_send,
            Kind::WrongRkey | Kind::NoInvalidate => !c.tcp && c.invalidates && c.opcode.has_data(),
            Kind::LongLength => c.opcode == Opcode::Read && c.ok,
            Kind::LateWrite => !c.tcp && c.opcode == Opcode::Read && c.ok && c.invalidates,
            Kind::BadStatus | Kind::Truncated | Kind::Garbage | Kind::CreditOverflow => true,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The hostile settings of the target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hostile {
    /// Kinds in the order they take turns; empty: hostile mode off.
    pub kinds: Vec<Kind>,
    /// Every how many responses of a connection one is hostile (at least 1).
    pub every: u64,
}

impl Hostile {
    pub fn enabled(&self) -> bool {
        !self.kinds.is_empty() && self.every > 0
    }
}

/// What the chooser needs to know about the response about to be sent.
#[derive(Clone, Copy, Debug)]
pub struct Candidate {
    pub tcp: bool,
    pub opcode: Opcode,
    /// The status is Ok.
    pub ok: bool,
    /// RDMA: the response would be a Send-with-Invalidate.
    pub invalidates: bool,
    /// RDMA: a response credit and a send slot are free for one extra message.
    pub spare_send: bool,
}

/// Per-connection state: which response is hostile and which kind it gets.
///
/// Every `every`th response of the connection becomes due. A due act goes to the first kind,
/// in turn after the last one used *by any connection* (`turn`, shared by the target), that
/// fits the response; when none fits (say `long_length` and the response answers a write) the
/// act stays due for the next response, so a test can count on it. The turn is shared because
/// several kinds end the connection they act on: with a turn per connection, the kinds after
/// the first such one would never be reached.
#[derive(Clone, Debug, Default)]
pub struct Chooser {
    seen: u64,
    due: bool,
}

impl Chooser {
    pub fn pick(&mut self, h: &Hostile, turn: &AtomicUsize, c: &Candidate) -> Option<Kind> {
        if !h.enabled() {
            return None;
        }
        self.seen += 1;
        if self.seen % h.every == 0 {
            self.due = true;
        }
        if !self.due {
            return None;
        }
        let n = h.kinds.len();
        let next = turn.load(Ordering::Relaxed);
        let i = (0..n)
            .map(|i| (next + i) % n)
            .find(|&i| h.kinds[i].fits(c))?;
        turn.store((i + 1) % n, Ordering::Relaxed);
        self.due = false;
        Some(h.kinds[i])
    }
}

/// The request id of an `unknown_tag` response: slot 0xfff0 is far beyond any client's slot
/// table (queue depths are at most a few thousand), so it cannot name a request in flight.
pub const UNKNOWN_SLOT: u16 = 0xfff0;
/// Bytes a `long_length` response claims (and on TCP sends) beyond the request's length.
pub const LONG_EXTRA: u32 = 4096;
/// Bytes of an RDMA `truncated` response, and of the message part of a TCP one.
pub const TRUNCATED_LEN: usize = 16;
/// Bytes of a TCP `garbage` frame.
pub const GARBAGE_FRAME_LEN: usize = 40;
/// Status written by `bad_status`; statuses end at 7.
pub const BAD_STATUS: u16 = 0x7fff;
/// Bytes of a `late_write`.
#[cfg_attr(not(feature = "rdma"), allow(dead_code))]
pub const LATE_WRITE_LEN: usize = 8;
/// What `wrong_rkey` does to the rkey: another key byte of the same MR or window index, so
/// the client finds the object but not the key.
#[cfg_attr(not(feature = "rdma"), allow(dead_code))]
pub const WRONG_RKEY_XOR: u32 = 0x80;

/// Extra messages grant no credits: the target has no receive to back them.
pub fn unknown_tag(resp: &Response) -> Response {
    Response {
        tag: ReqId {
            slot: UNKNOWN_SLOT,
            gen: ReqId::from_tag(resp.tag).gen,
        }
        .tag(),
        credits: 0,
        data_crc: 0,
        length: 0,
        rkey: 0,
        ..*resp
    }
}

/// The copy of a response sent a second time; it grants nothing (see [`unknown_tag`]).
pub fn duplicate(resp: &Response) -> Response {
    Response {
        credits: 0,
        ..*resp
    }
}

pub fn credit_overflow(resp: &Response) -> Response {
    Response {
        credits: 0xffff,
        ..*resp
    }
}

pub fn long_length(resp: &Response) -> Response {
    Response {
        length: resp.length.saturating_add(LONG_EXTRA),
        ..*resp
    }
}

/// The response with an out-of-range status, which `Response::encode` cannot produce.
pub fn bad_status(resp: &Response) -> [u8; RESPONSE_LEN] {
    let mut b = resp.to_bytes();
    b[response_off::STATUS..response_off::STATUS + 2].copy_from_slice(&BAD_STATUS.to_le_bytes());
    b
}

/// A TCP frame header announcing `resp` with `data_len` bytes of data, then only the first
/// [`TRUNCATED_LEN`] bytes of the message.
pub fn truncated_frame(resp: &Response, data_len: u32) -> Vec<u8> {
    let mut v = FrameHeader {
        kind: FrameKind::Response,
        flags: 0,
        data_len,
    }
    .to_bytes()
    .to_vec();
    v.extend_from_slice(&resp.to_bytes()[..TRUNCATED_LEN]);
    v
}

/// A small xorshift generator: garbage needs to look random, not to be unpredictable.
pub struct Rng(u64);

impl Rng {
    pub fn new(salt: u64) -> Rng {
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Rng((t ^ salt.rotate_left(32)) | 1)
    }

    pub fn fill(&mut self, out: &mut [u8]) {
        for b in out {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            *b = (self.0 >> 24) as u8;
        }
    }
}

/// RDMA garbage: random bytes, with the status forced out of range so that the garbage can
/// never pass for a valid response by chance.
#[cfg_attr(not(feature = "rdma"), allow(dead_code))]
pub fn garbage_response(rng: &mut Rng) -> [u8; RESPONSE_LEN] {
    let mut b = [0u8; RESPONSE_LEN];
    rng.fill(&mut b);
    b[response_off::STATUS + 1] |= 0x80;
    b
}

/// TCP garbage: random bytes whose first byte is not the frame magic's, so that they can never
/// pass for a frame header by chance.
pub fn garbage_frame(rng: &mut Rng) -> [u8; GARBAGE_FRAME_LEN] {
    let mut b = [0u8; GARBAGE_FRAME_LEN];
    rng.fill(&mut b);
    let magic0 = FRAME_MAGIC.to_le_bytes()[0];
    if b[0] == magic0 {
        b[0] = !magic0;
    }
    const _: () = assert!(GARBAGE_FRAME_LEN > FRAME_HEADER_LEN);
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmadisk_proto::wire::{DecodeError, Status};

    fn resp() -> Response {
        Response {
            tag: ReqId { slot: 3, gen: 9 }.tag(),
            status: Status::Ok,
            credits: 1,
            data_crc: 0x1234_5678,
            length: 4096,
            rkey: 0xabcd_0102,
            capacity_sectors: 1 << 17,
        }
    }

    fn cand(tcp: bool, opcode: Opcode) -> Candidate {
        Candidate {
            tcp,
            opcode,
            ok: true,
            invalidates: !tcp,
            spare_send: true,
        }
    }

    fn h(kinds: &[Kind], every: u64) -> Hostile {
        Hostile {
            kinds: kinds.to_vec(),
            every,
        }
    }

    #[test]
    fn names_parse_back() {
        for k in Kind::ALL {
            assert_eq!(Kind::parse(k.name()), Ok(k));
            assert_eq!(Kind::parse(&k.name().replace('_', "-")), Ok(k));
        }
        assert!(Kind::parse("nope").unwrap_err().contains("late_write"));
    }

    #[test]
    fn every_nth_response_is_hostile() {
        let cfg = h(&[Kind::BadStatus], 3);
        let mut c = Chooser::default();
        let turn = AtomicUsize::new(0);
        let picks: Vec<bool> = (0..9)
            .map(|_| c.pick(&cfg, &turn, &cand(true, Opcode::Write)).is_some())
            .collect();
        assert_eq!(
            picks,
            [false, false, true, false, false, true, false, false, true]
        );
        let mut c = Chooser::default();
        let turn = AtomicUsize::new(0);
        let all = h(&[Kind::BadStatus], 1);
        assert!((0..5).all(|_| c.pick(&all, &turn, &cand(true, Opcode::Nop)).is_some()));
        let mut c = Chooser::default();
        let turn = AtomicUsize::new(0);
        assert!((0..5).all(|_| c
            .pick(&Hostile::default(), &turn, &cand(true, Opcode::Nop))
            .is_none()));
    }

    #[test]
    fn a_due_act_waits_for_a_response_it_fits() {
        let cfg = h(&[Kind::LongLength], 2);
        let mut c = Chooser::default();
        let turn = AtomicUsize::new(0);
        let w = cand(true, Opcode::Write);
        let r = cand(true, Opcode::Read);
        assert_eq!(c.pick(&cfg, &turn, &w), None);
        assert_eq!(
            c.pick(&cfg, &turn, &w),
            None,
            "due, but a write has no length"
        );
        assert_eq!(c.pick(&cfg, &turn, &w), None);
        assert_eq!(c.pick(&cfg, &turn, &r), Some(Kind::LongLength));
        assert_eq!(c.pick(&cfg, &turn, &r), None, "not due again until the 6th");
        // RDMA-only kinds never fire on TCP.
        let cfg = h(&[Kind::WrongRkey, Kind::LateWrite, Kind::NoInvalidate], 1);
        let mut c = Chooser::default();
        let turn = AtomicUsize::new(0);
        assert!((0..4).all(|_| c.pick(&cfg, &turn, &r).is_none()));
        assert_eq!(
            c.pick(&cfg, &turn, &cand(false, Opcode::Read)),
            Some(Kind::WrongRkey)
        );
        // An extra message needs a spare credit on RDMA.
        let cfg = h(&[Kind::UnknownTag], 1);
        let mut c = Chooser::default();
        let turn = AtomicUsize::new(0);
        let mut tight = cand(false, Opcode::Nop);
        tight.spare_send = false;
        assert_eq!(c.pick(&cfg, &turn, &tight), None);
        assert_eq!(
            c.pick(&cfg, &turn, &cand(false, Opcode::Nop)),
            Some(Kind::UnknownTag)
        );
    }

    #[test]
    fn kinds_take_turns() {
        let cfg = h(&[Kind::BadStatus, Kind::LongLength, Kind::Garbage], 1);
        let mut c = Chooser::default();
        let turn = AtomicUsize::new(0);
        let r = cand(true, Opcode::Read);
        let w = cand(true, Opcode::Write);
        assert_eq!(c.pick(&cfg, &turn, &r), Some(Kind::BadStatus));
        // long_length does not fit a write: garbage, the next that fits, takes the turn.
        assert_eq!(c.pick(&cfg, &turn, &w), Some(Kind::Garbage));
        assert_eq!(c.pick(&cfg, &turn, &r), Some(Kind::BadStatus));
        assert_eq!(c.pick(&cfg, &turn, &r), Some(Kind::LongLength));
    }

    #[test]
    fn hostile_encodings() {
        let r = resp();
        let b = bad_status(&r);
        assert_eq!(
            Response::decode(&b),
            Err(DecodeError::BadStatus(BAD_STATUS))
        );
        let mut fixed = b;
        fixed[4..6].copy_from_slice(&[0, 0]);
        assert_eq!(Response::decode(&fixed), Ok(r), "only the status differs");

        let u = unknown_tag(&r);
        assert_eq!(
            ReqId::from_tag(u.tag),
            ReqId {
                slot: UNKNOWN_SLOT,
                gen: 9
            }
        );
        assert_eq!((u.credits, u.length, u.rkey), (0, 0, 0));
        assert_eq!(duplicate(&r), Response { credits: 0, ..r });
        assert_eq!(credit_overflow(&r).credits, 0xffff);
        assert_eq!(long_length(&r).length, 4096 + LONG_EXTRA);

        let t = truncated_frame(&r, 4096);
        assert_eq!(t.len(), FRAME_HEADER_LEN + TRUNCATED_LEN);
        let hdr = FrameHeader::decode(&t).unwrap();
        assert_eq!((hdr.kind, hdr.data_len), (FrameKind::Response, 4096));
        assert_eq!(&t[FRAME_HEADER_LEN..], &r.to_bytes()[..TRUNCATED_LEN]);

        let mut rng = Rng::new(1);
        for _ in 0..1000 {
            let g = garbage_frame(&mut rng);
            assert!(FrameHeader::decode(&g).is_err());
            let g = garbage_response(&mut rng);
            assert!(matches!(
                Response::decode(&g),
                Err(DecodeError::BadStatus(_))
            ));
        }
        let (a, b) = (garbage_frame(&mut rng), garbage_frame(&mut rng));
        assert_ne!(a, b);
    }
}
