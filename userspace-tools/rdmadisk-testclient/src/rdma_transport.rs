//! The RDMA transport: rdma_cm connect with the Hello as private data, one RC QP, one type-2
//! memory window per slot.
//!
//! Userspace has no fast-registration MRs, and rxe only honours Send-with-Invalidate for FRWR
//! MRs and type-2 windows, so each data request binds its slot's window (Bind-MW work request
//! chained before the Send) over the slot's buffer with exactly the access the target needs:
//! REMOTE_READ for a write, REMOTE_WRITE for a read. The MR itself grants no remote access.
//!
//! Checks made here:
//! - every response to a request with an rkey arrives with IBV_WC_WITH_INV and
//!   `invalidated_rkey` equal to that request's rkey (requests without data carry rkey 0 and must
//!   arrive as a plain Send);
//! - every rebind of a window succeeds. A type-2 window can be bound only in the Free state
//!   (IBA o10-37.2.30, enforced by rxe), which it re-enters only when invalidated, so each
//!   successful rebind proves the previous rkey was invalidated;
//! - optionally (`probe_dead_rkey`), the target is asked to RDMA-Write to an rkey already
//!   invalidated; the access must be refused (the connection then fails, by design).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdmadisk_net::client::{check_auth_asked, ConnectError, ConnectOptions, Proving};
use rdmadisk_net::rdma::{
    self, Access, CmEventKind, CmId, CompChannel, ConnParams, Cq, EventChannel, Mr, Mw, Pd, QpCaps,
    SendOp, SendWr,
};
use rdmadisk_net::resvport;
use rdmadisk_proto::auth::Secret;
use rdmadisk_proto::credits::{CreditReceiver, CreditSender};
use rdmadisk_proto::wire::{
    features, AuthReply, ExportName, Hello, HelloReply, HelloStatus, Opcode, RemoteBuf, Request,
    Response, REQUEST_LEN,
};

use crate::transport::{Done, Transport};

const SLOT: usize = 64;
const K_RECV: u64 = 1;
const K_SEND: u64 = 2;
const K_BIND: u64 = 3;

/// Connection options.
pub struct RdmaOptions {
    pub export: String,
    pub slots: usize,
    pub max_io: usize,
    pub recv_credits: u16,
    pub bind: Option<IpAddr>,
    pub timeout: Duration,
    /// Hello.session_id and Hello.epoch.
    pub session_id: u32,
    pub epoch: u32,
    /// Diagnostic: expose the data MR's own rkey (MR registered with remote access) instead of
    /// binding memory windows; pair with a target run with `--no-invalidate`.
    pub mr_rkey: bool,
    /// The key this client proves; with one, a target that does not authenticate is refused.
    pub secret: Option<Secret>,
    /// The key the target must prove, if not `secret`.
    pub target_secret: Option<Secret>,
    /// Connect from a reserved port (below 1024) when the process may bind one.
    pub reserved_port: bool,
    /// The Hello opens a session (`hello_flags::NEW_SESSION`).
    pub new_session: bool,
}

struct Inflight {
    slot: usize,
    rkey: u32,
}

/// Field order is drop order: the windows first (rxe holds a QP reference for every bound
/// type-2 window, and destroying the QP while one is bound makes rxe's QP cleanup time out
/// with a kernel WARNING), then the QP (in `id`), then the MRs.
pub struct Rdma {
    mws: Vec<Mw>,
    id: CmId,
    ch: Arc<EventChannel>,
    bound_before: Vec<bool>,
    cq: Arc<Cq>,
    _comp: Arc<CompChannel>,
    pd: Arc<Pd>,
    recv_mr: Mr,
    send_mr: Mr,
    data_mr: Mr,
    max_io: usize,
    slots: usize,
    mr_rkey: bool,
    reply: HelloReply,
    sender: CreditSender,
    receiver: CreditReceiver,
    inflight: HashMap<u32, Inflight>,
    ready: VecDeque<Done>,
    timeout: Duration,
    /// Signaled send-queue work requests (binds and sends) not yet completed.
    sq_outstanding: usize,
    /// Times a bind waited for the send queue to drain (the rxe workaround below).
    bind_drain_waits: u64,
    // Checks.
    inv_ok: u64,
    inv_flag_abi: u64,
    inv_flag_rxe_bit2: u64,
    recv_wc_flags_seen: u32,
    responses: u64,
    inv_missing: u64,
    inv_wrong_rkey: u64,
    plain_ok: u64,
    plain_unexpected_inv: u64,
    rkey_echo_mismatches: u64,
    binds: u64,
    rebinds_after_invalidation: u64,
    credit_violations: u64,
    last_invalidated: Option<(usize, u32)>,
    /// The bytes of the last message received (an authentication's answer is read from it).
    last_raw: [u8; SLOT],
}

/// Binds `id` to a reserved port of `ip` (any address of `to`'s family if none), when the
/// process may: the target serves an export without a key only to those. rdma_cm resolves
/// only to an address of the family the id is bound in.
fn bind_reserved(id: &CmId, ip: Option<IpAddr>, to: SocketAddr) -> io::Result<()> {
    let ip = ip.unwrap_or(if to.is_ipv4() {
        IpAddr::from([0, 0, 0, 0])
    } else {
        IpAddr::from([0u16; 8])
    });
    for port in resvport::candidates() {
        match id.bind(SocketAddr::new(ip, port)) {
            Ok(()) => return Ok(()),
            Err(e) if resvport::taken(&e) => continue,
            Err(e) if resvport::refused(&e) => break,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn wait_event(ch: &EventChannel, timeout: Duration) -> io::Result<rdma::CmEvent> {
    ch.next_event(Some(timeout))?.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::TimedOut,
            "timed out waiting for an rdma_cm event",
        )
    })
}

/// Resolves `addr` (from `src`, if given) and the route to it, each within `timeout`.
fn resolve(
    ch: &EventChannel,
    id: &mut CmId,
    src: Option<SocketAddr>,
    addr: SocketAddr,
    timeout: Duration,
) -> io::Result<()> {
    id.resolve_addr(src, addr, timeout)?;
    expect(
        &wait_event(ch, timeout)?,
        CmEventKind::AddrResolved,
        "resolving the target's address",
    )?;
    id.resolve_route(timeout)?;
    expect(
        &wait_event(ch, timeout)?,
        CmEventKind::RouteResolved,
        "resolving the route",
    )
}

fn expect(ev: &rdma::CmEvent, want: CmEventKind, what: &str) -> io::Result<()> {
    if ev.kind() == want {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{what}: got rdma_cm event {:?} (status {})",
            ev.kind(),
            ev.status()
        )))
    }
}

impl Rdma {
    pub fn connect(addr: SocketAddr, o: &RdmaOptions) -> Result<Rdma, ConnectError> {
        let ch = EventChannel::new()?;
        let mut id = CmId::new(&ch)?;
        if o.reserved_port {
            bind_reserved(&id, o.bind, addr)?;
        }
        // A bound id resolves from the address it is bound to.
        let src = (id.local_addr().is_none_or(|a| a.port() == 0))
            .then(|| o.bind.map(|ip| SocketAddr::new(ip, 0)))
            .flatten();
        resolve(&ch, &mut id, src, addr, o.timeout)?;

        let pd = id.alloc_pd()?;
        let comp = CompChannel::new(&pd)?;
        let r = usize::from(o.recv_credits);
        let send_wr = (o.slots * 4 + 16) as u32;
        let cq = Cq::new(&pd, send_wr + r as u32 + 16, Some(&comp))?;
        id.create_qp(
            &pd,
            &cq,
            &cq,
            QpCaps {
                max_send_wr: send_wr,
                // At least one (a QP, or an MR, of size 0 is refused), even where none is
                // posted (`--recv-credits 0`).
                max_recv_wr: r.max(1) as u32,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
        )?;
        let recv_mr = Mr::new(&pd, r.max(1) * SLOT, Access::LOCAL_WRITE)?;
        let mut receiver = CreditReceiver::with_cap(u32::from(o.recv_credits));
        for s in 0..r {
            id.post_recv((K_RECV << 56) | s as u64, &recv_mr, s * SLOT, SLOT)?;
            receiver.on_recv_posted();
        }
        let export = ExportName::new(o.export.as_bytes())
            .map_err(|e| ConnectError::Protocol(e.to_string()))?;
        let hello = Hello {
            flags: if o.new_session {
                rdmadisk_proto::wire::hello_flags::NEW_SESSION
            } else {
                0
            },
            queue_id: 0,
            queue_count: 1,
            recv_credits: receiver.take_grant(),
            caps: 0,
            session_id: o.session_id,
            epoch: o.epoch,
            export,
        };
        id.connect(&ConnParams {
            private_data: &hello.to_bytes(),
            responder_resources: 0xff,
            initiator_depth: 0xff,
            retry_count: 7,
            rnr_retry_count: 0,
        })?;
        let ev = wait_event(&ch, o.timeout)?;
        let reply = match ev.kind() {
            CmEventKind::Established => HelloReply::decode(ev.private_data()).map_err(|e| {
                ConnectError::Protocol(format!("bad HelloReply in accept private data: {e}"))
            })?,
            CmEventKind::Rejected => {
                return Err(match HelloReply::decode(ev.private_data()) {
                    // A target with a key says Stale only after both proofs.
                    Ok(r) if r.status == HelloStatus::Stale && o.secret.is_some() => {
                        ConnectError::Protocol(
                            "the target answered Stale before authenticating: not believed".into(),
                        )
                    }
                    Ok(r) if r.status == HelloStatus::Stale => ConnectError::Stale(r.session_floor),
                    Ok(r) => ConnectError::Refused(r.status),
                    Err(_) => ConnectError::Protocol(format!(
                        "connection rejected without a HelloReply (status {})",
                        ev.status()
                    )),
                });
            }
            k => {
                return Err(ConnectError::Protocol(format!(
                    "connect: rdma_cm event {k:?} (status {})",
                    ev.status()
                )))
            }
        };
        drop(ev);
        if reply.status != HelloStatus::Ok {
            return Err(ConnectError::Refused(reply.status));
        }
        let max_io = o.max_io.min(reply.max_io_bytes as usize);
        let data_access = if o.mr_rkey {
            Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE
        } else {
            Access::LOCAL_WRITE | Access::MW_BIND
        };
        let data_mr = Mr::new(&pd, o.slots * max_io, data_access)?;
        let send_mr = Mr::new(&pd, o.slots * SLOT, Access::LOCAL_WRITE)?;
        let mws = (0..o.slots)
            .map(|_| Mw::new_type2(&pd))
            .collect::<io::Result<Vec<_>>>()?;
        let mut r = Rdma {
            id,
            ch,
            bound_before: vec![false; mws.len()],
            mws,
            cq,
            _comp: comp,
            pd,
            recv_mr,
            send_mr,
            data_mr,
            max_io,
            slots: o.slots,
            mr_rkey: o.mr_rkey,
            sender: CreditSender::new(reply.initial_credits),
            reply,
            receiver,
            inflight: HashMap::new(),
            ready: VecDeque::new(),
            timeout: o.timeout,
            sq_outstanding: 0,
            bind_drain_waits: 0,
            inv_ok: 0,
            inv_flag_abi: 0,
            inv_flag_rxe_bit2: 0,
            recv_wc_flags_seen: 0,
            responses: 0,
            inv_missing: 0,
            inv_wrong_rkey: 0,
            plain_ok: 0,
            plain_unexpected_inv: 0,
            rkey_echo_mismatches: 0,
            binds: 0,
            rebinds_after_invalidation: 0,
            credit_violations: 0,
            last_invalidated: None,
            last_raw: [0; SLOT],
        };
        let keys = ConnectOptions {
            secret: o.secret.clone(),
            target_secret: o.target_secret.clone(),
            ..ConnectOptions::new(&o.export)
        };
        check_auth_asked(&keys, &r.reply)?;
        if r.reply.features & features::AUTH != 0 {
            let (local, peer) = match (r.id.local_addr(), r.id.peer_addr()) {
                (Some(l), Some(p)) => (l, p),
                _ => {
                    return Err(ConnectError::Protocol(
                        "the connection's addresses are unknown".into(),
                    ))
                }
            };
            let p = Proving::new(&keys, &hello, &r.reply, local, peer, 0xa0a0_0001, 0)?;
            r.call_raw(p.request().tag, &p.request().to_bytes())
                .map_err(ConnectError::Io)?;
            let a = AuthReply::decode(&r.last_raw)
                .map_err(|e| ConnectError::Protocol(format!("bad authentication answer: {e}")))?;
            p.check(&a)?;
        }
        Ok(r)
    }

    /// Hostile: sends a connect request and abandons it at once, before the target's answer:
    /// the id goes with its QP, and the client's CM rejects the target's accept.
    pub fn abandon(addr: SocketAddr, o: &RdmaOptions) -> io::Result<()> {
        let ch = EventChannel::new()?;
        let mut id = CmId::new(&ch)?;
        if o.reserved_port {
            bind_reserved(&id, o.bind, addr)?;
        }
        resolve(&ch, &mut id, None, addr, o.timeout)?;
        let pd = id.alloc_pd()?;
        let cq = Cq::new(&pd, 8, None)?;
        id.create_qp(
            &pd,
            &cq,
            &cq,
            QpCaps {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
        )?;
        let hello = Hello {
            flags: 0,
            queue_id: 0,
            queue_count: 1,
            recv_credits: 0,
            caps: 0,
            session_id: o.session_id,
            epoch: o.epoch,
            export: ExportName::new(o.export.as_bytes())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?,
        };
        id.connect(&ConnParams {
            private_data: &hello.to_bytes(),
            responder_resources: 0xff,
            initiator_depth: 0xff,
            retry_count: 7,
            rnr_retry_count: 0,
        })
    }

    /// Sends a NOP and waits for its answer.
    pub fn nop(&mut self) -> io::Result<()> {
        let req = Request {
            opcode: Opcode::Nop,
            flags: 0,
            // The Hello granted the receives this needs.
            credits: 0,
            tag: 0x0a0a_0001,
            sector: 0,
            length: 0,
            data_crc: 0,
            buf: RemoteBuf::default(),
        };
        self.call_raw(req.tag, &req.to_bytes()).map(|_| ())
    }

    /// Sends one message (a request or an authentication) as it is, with a credit, from slot
    /// 0, and waits for the response with `tag` (its bytes stay in `last_raw`).
    fn call_raw(&mut self, tag: u32, bytes: &[u8]) -> io::Result<Response> {
        if !self.sender.try_consume() {
            return Err(io::Error::other("no credit"));
        }
        self.send_mr[..bytes.len()].copy_from_slice(bytes);
        self.id.post_send(&[SendWr {
            wr_id: K_SEND << 56,
            op: SendOp::Send,
            local: Some((&self.send_mr, 0, bytes.len())),
            signaled: true,
        }])?;
        self.sq_outstanding += 1;
        self.inflight.insert(tag, Inflight { slot: 0, rkey: 0 });
        let d = self.complete()?;
        if d.resp.tag != tag {
            return Err(io::Error::other("a response for another tag"));
        }
        Ok(d.resp)
    }

    /// Hostile: sends `n` NOPs back to back, ignoring the credits the target granted. The
    /// target has posted a receive only per credit, so the extra ones meet none (an RNR error;
    /// this side does not retry): `Ok` says how the connection ended.
    pub fn overrun_credits(&mut self, n: u32) -> Result<String, String> {
        // A full send queue is not the target's doing: it only ends the posting, and the
        // connection must still fail (or be closed) for the overrun to count as cut off.
        let mut posted = String::new();
        for i in 0..n {
            let req = Request {
                opcode: Opcode::Nop,
                flags: 0,
                credits: 0,
                tag: 0x0e00_0000 + i,
                sector: 0,
                length: 0,
                data_crc: 0,
                buf: RemoteBuf::default(),
            };
            let slot = (i as usize) % self.slots;
            self.send_mr[slot * SLOT..slot * SLOT + REQUEST_LEN].copy_from_slice(&req.to_bytes());
            if let Err(e) = self.id.post_send(&[SendWr {
                wr_id: (K_SEND << 56) | slot as u64,
                op: SendOp::Send,
                local: Some((&self.send_mr, slot * SLOT, REQUEST_LEN)),
                signaled: true,
            }]) {
                posted = format!("posting stopped after {i} sends ({e}); ");
                break;
            }
            self.sq_outstanding += 1;
            self.inflight.insert(req.tag, Inflight { slot, rkey: 0 });
        }
        let deadline = Instant::now() + self.timeout;
        while Instant::now() < deadline {
            match self.poll_once(Duration::from_millis(200)) {
                Ok(_) => {}
                Err(e) => {
                    return Ok(format!(
                        "{posted}the connection failed after {} responses: {e}",
                        self.responses
                    ))
                }
            }
            if let Ok(Some(ev)) = self.ch.next_event(Some(Duration::ZERO)) {
                if ev.kind() == CmEventKind::Disconnected {
                    return Ok(format!("{posted}the target disconnected"));
                }
            }
        }
        Err(format!(
            "{posted}sends against {} credits: {} answered, and nothing stopped them",
            self.reply.initial_credits, self.responses
        ))
    }

    /// Hostile: optionally sends one NOP (`send`), then waits for the target to end the
    /// connection (an idle client, or one that grants no response credits), up to the
    /// timeout. `Ok` says after how long.
    pub fn wait_cut_off(&mut self, send: bool) -> Result<String, String> {
        let t0 = Instant::now();
        if send {
            let req = Request {
                opcode: Opcode::Nop,
                flags: 0,
                credits: 0,
                tag: 0x0f00_0001,
                sector: 0,
                length: 0,
                data_crc: 0,
                buf: RemoteBuf::default(),
            };
            self.post(0, req, None).map_err(|e| e.to_string())?;
        }
        while t0.elapsed() < self.timeout {
            if let Err(e) = self.poll_once(Duration::from_millis(200)) {
                return Ok(format!(
                    "the connection failed after {:?}: {e}",
                    t0.elapsed()
                ));
            }
            if !self.ready.is_empty() && send {
                return Err("the target answered although this client granted no credit".into());
            }
            if let Ok(Some(ev)) = self.ch.next_event(Some(Duration::ZERO)) {
                if ev.kind() == CmEventKind::Disconnected {
                    return Ok(format!("the target disconnected after {:?}", t0.elapsed()));
                }
            }
        }
        Err(format!("still connected after {:?}", self.timeout))
    }

    fn post(
        &mut self,
        slot: usize,
        mut req: Request,
        rkey_override: Option<u32>,
    ) -> io::Result<()> {
        let will_bind = rkey_override.is_none() && !self.mr_rkey && req.opcode.has_data();
        if will_bind && self.sq_outstanding > 0 {
            // rxe workaround: after a retransmission timeout rxe's requester restarts at the
            // oldest unacknowledged WQE and re-executes every local operation after it, so a
            // Bind-MW that already ran behind a still-unacknowledged Send is run again, fails
            // (the window's key has moved on), and takes the QP to the error state with only
            // flush completions. Binding only on an empty send queue (and signaling the bind, so
            // it is retired at once) keeps every bind out of any retransmission's way. (The test
            // bed's kernel no longer does this, selftests/kernel/patches/0004; rxe elsewhere does.)
            self.bind_drain_waits += 1;
            let deadline = Instant::now() + self.timeout;
            while self.sq_outstanding > 0 {
                if Instant::now() > deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "send queue did not drain",
                    ));
                }
                self.poll_once(Duration::from_millis(200))?;
            }
        }
        req.credits = self.receiver.take_grant();
        let off = slot * SLOT;
        let data_off = slot * self.max_io;
        let mut wrs = Vec::with_capacity(2);
        let mut bind_rkey = None;
        let rkey_override =
            rkey_override.or((self.mr_rkey && req.opcode.has_data()).then(|| self.data_mr.rkey()));
        if let Some(rkey) = rkey_override {
            req.buf = RemoteBuf {
                addr: self.data_mr.addr() + data_off as u64,
                rkey,
                len: req.length,
            };
        } else if req.opcode.has_data() {
            let rkey = self.mws[slot].next_rkey();
            bind_rkey = Some(rkey);
            req.buf = RemoteBuf {
                addr: self.data_mr.addr() + data_off as u64,
                rkey,
                len: req.length,
            };
        } else {
            req.buf = RemoteBuf::default();
        }
        self.send_mr[off..off + REQUEST_LEN].copy_from_slice(&req.to_bytes());
        if let Some(rkey) = bind_rkey {
            let access = if req.opcode == Opcode::Write {
                Access::REMOTE_READ
            } else {
                Access::REMOTE_WRITE
            };
            wrs.push(SendWr {
                wr_id: (K_BIND << 56) | slot as u64,
                op: SendOp::BindMw {
                    mw: &self.mws[slot],
                    new_rkey: rkey,
                    mr: &self.data_mr,
                    off: data_off,
                    // Clamped to the slot: oversized requests are refused before any access.
                    len: (req.length as usize).min(self.max_io),
                    access,
                },
                local: None,
                signaled: true,
            });
        }
        wrs.push(SendWr {
            wr_id: (K_SEND << 56) | slot as u64,
            op: SendOp::Send,
            local: Some((&self.send_mr, off, REQUEST_LEN)),
            signaled: true,
        });
        let signaled = wrs.iter().filter(|w| w.signaled).count();
        self.id.post_send(&wrs)?;
        self.sq_outstanding += signaled;
        if bind_rkey.is_some() {
            self.binds += 1;
            if self.bound_before[slot] {
                self.rebinds_after_invalidation += 1;
            }
            self.bound_before[slot] = true;
        }
        self.inflight.insert(
            req.tag,
            Inflight {
                slot,
                rkey: req.buf.rkey,
            },
        );
        Ok(())
    }

    fn poll_once(&mut self, timeout: Duration) -> io::Result<bool> {
        let wcs = self.cq.wait(Some(timeout))?;
        if wcs.is_empty() {
            return Ok(false);
        }
        // Report the first real error of the batch, not the flushes it caused.
        let first_bad = wcs
            .iter()
            .find(|w| !w.ok() && w.status != rdma::WC_WR_FLUSH_ERR)
            .or_else(|| wcs.iter().find(|w| !w.ok()));
        if let Some(bad) = first_bad {
            let what = match bad.wr_id >> 56 {
                K_RECV => "receive",
                K_BIND => "memory window bind",
                _ => "send",
            };
            let events = self.pd.drain_async_events();
            return Err(io::Error::other(format!(
                "{what} (slot {}) completed with {} after {} good responses; async events: [{}]",
                bad.wr_id & 0xffff_ffff,
                bad.status_str(),
                self.responses,
                events.join(", ")
            )));
        }
        for wc in wcs {
            let kind = wc.wr_id >> 56;
            if kind != K_RECV {
                self.sq_outstanding = self.sq_outstanding.saturating_sub(1);
                continue;
            }
            self.responses += 1;
            self.recv_wc_flags_seen |= wc.wc_flags;
            let rslot = (wc.wr_id & 0xffff_ffff) as usize;
            let off = rslot * SLOT;
            self.last_raw = [0; SLOT];
            let n = (wc.byte_len as usize).min(SLOT);
            self.last_raw[..n].copy_from_slice(&self.recv_mr[off..off + n]);
            let resp = Response::decode(&self.recv_mr[off..off + n]).map_err(|e| {
                io::Error::new(io::ErrorKind::InvalidData, format!("bad response: {e}"))
            })?;
            if self.receiver.on_message_received().is_err() {
                self.credit_violations += 1;
            }
            self.id.post_recv(wc.wr_id, &self.recv_mr, off, SLOT)?;
            self.receiver.on_recv_posted();
            self.sender.grant(resp.credits);
            self.sender.complete();
            let f = self.inflight.remove(&resp.tag).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("response for unknown tag {}", resp.tag),
                )
            })?;
            if resp.rkey != f.rkey {
                self.rkey_echo_mismatches += 1;
            }
            let rxe_bit2 = wc.wc_flags & rdma::WC_FLAG_RXE_KERNEL_WITH_INV != 0;
            if wc.with_inv {
                self.inv_flag_abi += 1;
            } else if rxe_bit2 {
                self.inv_flag_rxe_bit2 += 1;
            }
            let with_inv = wc.with_inv || rxe_bit2;
            if self.mr_rkey {
                // Diagnostic mode: plain MR rkeys, nothing is invalidated.
            } else if f.rkey != 0 {
                if !with_inv {
                    self.inv_missing += 1;
                } else if wc.invalidated_rkey != f.rkey {
                    self.inv_wrong_rkey += 1;
                } else {
                    self.inv_ok += 1;
                    self.last_invalidated = Some((f.slot, f.rkey));
                }
            } else if with_inv {
                self.plain_unexpected_inv += 1;
            } else {
                self.plain_ok += 1;
            }
            self.ready.push_back(Done { slot: f.slot, resp });
        }
        Ok(true)
    }

    /// Asks the target to RDMA-Write to an rkey that was already invalidated. Returns a
    /// description of what happened; `Ok` means the access was refused as it must be.
    pub fn probe_dead_rkey(&mut self, tag: u32) -> Result<String, String> {
        let Some((slot, rkey)) = self.last_invalidated else {
            return Err("no invalidated rkey to probe (no data request completed)".into());
        };
        let len = 4096.min(self.max_io) as u32;
        let req = Request {
            opcode: Opcode::Read,
            flags: 0,
            credits: 0,
            tag,
            sector: 0,
            length: len,
            data_crc: 0,
            buf: RemoteBuf::default(),
        };
        if !self.sender.try_consume() {
            return Err("no credit left for the probe".into());
        }
        self.post(slot, req, Some(rkey))
            .map_err(|e| format!("cannot post the probe: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if Instant::now() > deadline {
                return Err("no response and no error within 20 s".into());
            }
            match self.poll_once(Duration::from_millis(200)) {
                Ok(_) => {
                    if let Some(d) = self.ready.pop_front() {
                        if d.resp.tag == tag {
                            return Err(format!(
                                "the target answered {:?}: the write to invalidated rkey {rkey:#x} was not refused",
                                d.resp.status
                            ));
                        }
                    }
                }
                Err(e) => {
                    return Ok(format!(
                        "target's RDMA Write to invalidated rkey {rkey:#x} was refused; the queue pair failed ({e})"
                    ))
                }
            }
            if let Ok(Some(ev)) = self.ch.next_event(Some(Duration::ZERO)) {
                if ev.kind() == CmEventKind::Disconnected {
                    return Ok(format!(
                        "target's RDMA Write to invalidated rkey {rkey:#x} was refused; the target reset the connection"
                    ));
                }
            }
        }
    }

    /// Disconnects cleanly.
    pub fn close(&mut self) {
        let _ = self.id.disconnect();
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            match self.ch.next_event(Some(Duration::from_millis(200))) {
                Ok(Some(ev)) if ev.kind() == CmEventKind::Disconnected => break,
                Ok(_) => {}
                Err(_) => break,
            }
        }
    }
}

impl Transport for Rdma {
    fn reply(&self) -> &HelloReply {
        &self.reply
    }

    fn slots(&self) -> usize {
        self.slots
    }

    fn buf(&mut self, slot: usize) -> &mut [u8] {
        let off = slot * self.max_io;
        let n = self.max_io;
        &mut self.data_mr[off..off + n]
    }

    fn submit(&mut self, slot: usize, req: Request) -> io::Result<bool> {
        if !self.sender.try_consume() {
            return Ok(false);
        }
        self.post(slot, req, None)?;
        Ok(true)
    }

    fn complete(&mut self) -> io::Result<Done> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(d) = self.ready.pop_front() {
                return Ok(d);
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "timed out waiting for a response",
                ));
            }
            self.poll_once(Duration::from_millis(500))?;
        }
    }

    fn credit_report(&self) -> (u32, u16) {
        (self.sender.high_water(), self.reply.initial_credits)
    }

    fn checks(&self) -> Vec<(String, u64, bool)> {
        vec![
            ("responses_with_inv_ok".into(), self.inv_ok, false),
            (
                "inv_flag_as_IBV_WC_WITH_INV".into(),
                self.inv_flag_abi,
                false,
            ),
            (
                "inv_flag_as_rxe_kernel_bit2".into(),
                self.inv_flag_rxe_bit2,
                false,
            ),
            (
                "recv_wc_flags_seen".into(),
                u64::from(self.recv_wc_flags_seen),
                false,
            ),
            ("responses_missing_inv".into(), self.inv_missing, true),
            (
                "responses_wrong_invalidated_rkey".into(),
                self.inv_wrong_rkey,
                true,
            ),
            ("plain_responses_ok".into(), self.plain_ok, false),
            (
                "plain_responses_with_unexpected_inv".into(),
                self.plain_unexpected_inv,
                true,
            ),
            (
                "rkey_echo_mismatches".into(),
                self.rkey_echo_mismatches,
                true,
            ),
            ("mw_binds".into(), self.binds, false),
            (
                "binds_after_send_queue_drain".into(),
                self.bind_drain_waits,
                false,
            ),
            (
                "mw_rebinds_after_invalidation".into(),
                self.rebinds_after_invalidation,
                false,
            ),
            (
                "recv_credit_violations".into(),
                self.credit_violations,
                true,
            ),
        ]
    }
}
