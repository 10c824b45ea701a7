// SPDX-License-Identifier: GPL-2.0

//! Setting up one RDMA connection to a target: bind a reserved port, resolve, create the PD, CQ
//! and QP, post the receives the Hello grants, connect with the [`Hello`] and check the
//! [`HelloReply`].
//!
//! `ctl/probe` and every hardware queue of a disk connect through [`connect`]. Until the
//! connection is established its CM events are waited for here; afterwards they go to the
//! owner's [`Watcher`], since any later event means the connection is failing or gone.

use core::{
    fmt,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::atomic::{AtomicU32, Ordering},
};
use kernel::{
    bindings as kb, new_condvar, new_mutex,
    prelude::*,
    sync::{Arc, CondVar, CondVarTimeoutResult, Mutex},
    time::{msecs_to_jiffies, Jiffies},
};

use crate::kapi::blk_mq::Rq;
use crate::kapi::errno;
use crate::kapi::frwr::{MrEvent, MrOwner};
use crate::kapi::rdma_cm::{CmEvent, CmHandler, CmId, ConnParams, QpCaps, REJ_NO_LISTENER};
use crate::kapi::verbs::{Cq, DeviceRef, Pd, PollCtx};
use crate::proto::auth::Endpoint;
use crate::proto::wire::{hello_caps, ExportName, Hello, HelloReply, HelloStatus};

/// What a connect gets when nothing listens for rdma_cm on the target's port (the CM's own
/// reject, with no target's reply in it): not a refusal of the export, so a map goes on to
/// TCP; a reconnect counts it as a refusal (`is_refusal`).
pub(crate) fn no_rdma_listener() -> Error {
    errno(kb::EPROTONOSUPPORT)
}

/// Whether a connect's error means the target's host answered and would not have it: the
/// target's refusing reply, or no listener at all.
pub(crate) fn is_refusal(e: Error) -> bool {
    e == errno(kb::ECONNREFUSED) || e == no_rdma_listener()
}

/// Address and route resolution each; shorter than any budget so that an unreachable host is
/// reported as such rather than as the budget running out.
const RESOLVE_MS: u32 = 3_000;
/// Local ACK timeout exponent: 4.096 us * 2^17, about 0.54 s: what rdma_cm gives a RoCE
/// connection that sets none (the peers') and what the target uses. Far above any
/// round trip, so a retransmission means a lost packet, and a lost tail of a transfer is sent
/// again after 0.54 s rather than stalling its I/O for 4.3 s (2^20, used until soft-RoCE's
/// retransmission of a REG_MR was fixed by the bed's patch 0004, selftests/kernel/patches).
/// Seven retries bound a dead peer at about 3.8 s.
const ACK_TIMEOUT_EXP: u8 = 17;
/// CM events kept until the connector reads them; a set-up sees a handful.
const MAX_EVENTS: usize = 8;

/// A target's rdma_cm (or TCP) address.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Peer {
    pub(crate) addr: IpAddr,
    pub(crate) port: u16,
}

/// `192.0.2.2:7700`, or `[fd00::2]:7700` (RFC 5952's short form): how sysfs and the log show
/// a target, and how `target=` takes one.
impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        SocketAddr::new(self.addr, self.port).fmt(f)
    }
}

/// Hears a connection's CM events once it is established, and its MRs' own completions.
pub(crate) trait Watcher: Send + Sync + 'static {
    /// The per-request data of the requests registered on the connection's MRs.
    type Pdu: Send + Sync + 'static;

    /// Any event after `ESTABLISHED` (a disconnect, the device going away, ...).
    fn event(&self, ev: &CmEvent);

    /// A LOCAL_INV or failed REG_MR completed (see [`MrOwner::mr_event`]).
    fn mr_event(&self, _ev: MrEvent) {}
}

struct Setup {
    events: [Option<CmEvent>; MAX_EVENTS],
    established: bool,
}

impl Setup {
    fn push(&mut self, ev: CmEvent) {
        // A full queue only happens with a misbehaving CM; the newest event is the one lost,
        // and the budget still bounds the wait.
        if let Some(slot) = self.events.iter_mut().find(|e| e.is_none()) {
            *slot = Some(ev);
        }
    }

    fn pop(&mut self) -> Option<CmEvent> {
        let first = self.events[0].take()?;
        self.events.rotate_left(1);
        Some(first)
    }
}

/// The CM handler of a connection: a queue of set-up events, then the owner's [`Watcher`].
#[pin_data]
pub(crate) struct ConnEvents<W: Watcher> {
    #[pin]
    setup: Mutex<Setup>,
    #[pin]
    cv: CondVar,
    watcher: W,
}

impl<W: Watcher> ConnEvents<W> {
    pub(crate) fn new(watcher: W) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                setup <- new_mutex!(
                    Setup { events: [None; MAX_EVENTS], established: false },
                    "rdmadisk::conn::setup"
                ),
                cv <- new_condvar!("rdmadisk::conn::cv"),
                watcher,
            }),
            GFP_KERNEL,
        )
    }

    fn next_event(&self, left: &mut Jiffies) -> Result<CmEvent> {
        let mut s = self.setup.lock();
        loop {
            if let Some(ev) = s.pop() {
                if matches!(ev, CmEvent::Established(_)) {
                    s.established = true;
                    // Whatever came after ESTABLISHED (a disconnect, say) is the watcher's,
                    // as every later event is.
                    while let Some(later) = s.pop() {
                        self.watcher.event(&later);
                    }
                }
                return Ok(ev);
            }
            match self.cv.wait_interruptible_timeout(&mut s, *left) {
                CondVarTimeoutResult::Timeout => {
                    *left = 0;
                    return Err(errno(kb::ETIMEDOUT));
                }
                CondVarTimeoutResult::Signal { .. } => return Err(EINTR),
                CondVarTimeoutResult::Woken { jiffies } => *left = jiffies,
            }
        }
    }
}

impl<W: Watcher> MrOwner for ConnEvents<W> {
    type Pdu = W::Pdu;

    fn mr_event(&self, ev: MrEvent) {
        self.watcher.mr_event(ev);
    }
}

impl<W: Watcher> CmHandler for ConnEvents<W> {
    fn event(&self, ev: CmEvent) {
        let mut s = self.setup.lock();
        if s.established {
            drop(s);
            self.watcher.event(&ev);
            return;
        }
        s.push(ev);
        drop(s);
        self.cv.notify_all();
    }
}

/// Logs an event that ended a set-up step and turns it into an errno. A refusal `Stale` (the
/// target's fence is past this session) is `ESTALE`, with the fence's session stored in
/// `floor`; unless the connection proves a key (`keyed`): a target with one says `Stale` only
/// after both proofs (`authn::check`).
pub(crate) fn fail(
    who: &str,
    peer: Peer,
    step: &str,
    ev: &CmEvent,
    floor: Option<&AtomicU32>,
    keyed: bool,
) -> Error {
    let status_or = |s: i32, dflt: Error| {
        if (-4095..0).contains(&s) {
            Error::from_errno(s)
        } else {
            dflt
        }
    };
    match *ev {
        CmEvent::AddrError(s) | CmEvent::RouteError(s) => {
            pr_err!("{who} {peer}: {step}: {} (status {s})\n", ev.name());
            status_or(s, errno(kb::EHOSTUNREACH))
        }
        CmEvent::Unreachable(s) => {
            pr_err!("{who} {peer}: {step}: UNREACHABLE (status {s})\n");
            if s == errno(kb::ETIMEDOUT).to_errno() {
                errno(kb::ETIMEDOUT)
            } else {
                errno(kb::EHOSTUNREACH)
            }
        }
        CmEvent::Rejected {
            status,
            consumer_data,
        } => {
            match consumer_data.map(|d| HelloReply::decode(d.as_bytes())) {
                Some(Ok(r)) if r.status == HelloStatus::Stale && keyed => {
                    return crate::authn::unproved_stale(
                        format_args!("{who} {peer}: {step}"),
                        r.session_floor,
                    );
                }
                Some(Ok(r)) if r.status == HelloStatus::Stale => {
                    pr_warn!(
                        "{who} {peer}: {step}: REJECTED by the target: Stale (its fence is at session {})\n",
                        r.session_floor
                    );
                    if let Some(f) = floor {
                        f.store(r.session_floor, Ordering::Relaxed);
                    }
                    return errno(kb::ESTALE);
                }
                Some(Ok(r)) => pr_err!(
                    "{who} {peer}: {step}: REJECTED by the target: {:?}{}\n",
                    r.status,
                    crate::authn::refusal_hint(keyed, r.status)
                ),
                Some(Err(e)) => pr_err!(
                    "{who} {peer}: {step}: REJECTED with undecodable private data ({e:?})\n"
                ),
                // The CM's own reject, no target's: nothing listens for rdma_cm on the port.
                // Not a refusal of the export: the target may serve TCP (started before its
                // RDMA device, or with --no-rdma), and a map tries it (docs/design.md,
                // "Mapping").
                None if status == REJ_NO_LISTENER => {
                    pr_warn!(
                        "{who} {peer}: {step}: REJECTED by the CM: no RDMA listener on the port\n"
                    );
                    return no_rdma_listener();
                }
                None => {
                    pr_err!("{who} {peer}: {step}: REJECTED (reason {status}; not our protocol)\n")
                }
            }
            errno(kb::ECONNREFUSED)
        }
        CmEvent::ConnectError(s) => {
            pr_err!("{who} {peer}: {step}: CONNECT_ERROR (status {s})\n");
            errno(kb::ECONNABORTED)
        }
        CmEvent::Disconnected | CmEvent::AddrChange => {
            pr_err!("{who} {peer}: {step}: {}\n", ev.name());
            errno(kb::ECONNRESET)
        }
        CmEvent::DeviceRemoval => {
            pr_err!("{who} {peer}: {step}: the RDMA device is going away\n");
            ENODEV
        }
        CmEvent::Other(n, s) => {
            pr_err!("{who} {peer}: {step}: unexpected CM event {n} (status {s})\n");
            errno(kb::EPROTO)
        }
        _ => {
            pr_err!("{who} {peer}: {step}: unexpected {}\n", ev.name());
            errno(kb::EPROTO)
        }
    }
}

/// What to connect to and with which resources.
pub(crate) struct ConnSpec<'a> {
    /// Log prefix ("probe", the disk's name).
    pub(crate) who: &'a str,
    pub(crate) peer: Peer,
    pub(crate) export: ExportName,
    pub(crate) queue_id: u16,
    pub(crate) queue_count: u16,
    /// The disk's session at the target (0: a probe, outside any session).
    pub(crate) session_id: u32,
    /// The connection set this connection belongs to.
    pub(crate) epoch: u32,
    /// [`Hello::flags`] (read-only, say).
    pub(crate) hello_flags: u16,
    /// What the connection needs; the device must offer at least that much.
    pub(crate) caps: QpCaps,
    pub(crate) cq_entries: u32,
    pub(crate) poll: PollCtx,
    /// The whole set-up, from resolving to the accept.
    pub(crate) budget_ms: u32,
    /// Where a refusal `Stale` leaves the fence's session (see [`fail`]).
    pub(crate) floor: Option<&'a AtomicU32>,
    /// The connection proves a key: a `Stale` is believed only after the proofs.
    pub(crate) keyed: bool,
}

impl ConnSpec<'_> {
    /// The Hello this connection sends, granting `recv_credits`.
    pub(crate) fn hello(&self, recv_credits: u16) -> Hello {
        Hello {
            flags: self.hello_flags,
            queue_id: self.queue_id,
            queue_count: self.queue_count,
            recv_credits,
            caps: hello_caps::IDENTITY,
            session_id: self.session_id,
            epoch: self.epoch,
            export: self.export,
        }
    }
}

/// RDMA Reads we let the target have outstanding on our pages, and we on the target's (none),
/// at most: the device may offer fewer.
const READ_DEPTH: u32 = 16;

/// An established connection.
pub(crate) struct Conn<W: Watcher> {
    // First, so that it is dropped (QP drained and destroyed) before the PD and CQ.
    pub(crate) cm: CmId<ConnEvents<W>>,
    pub(crate) pd: Arc<Pd>,
    /// The QP's CQ, for a poll queue's own polling ([`PollCtx::Direct`]).
    pub(crate) cq: Arc<Cq>,
    pub(crate) dev: DeviceRef,
    pub(crate) reply: HelloReply,
    /// The Hello it was opened with, which an authentication binds.
    pub(crate) hello: Hello,
    /// Both ends, as an authentication binds them.
    pub(crate) local: Endpoint,
    pub(crate) remote: Endpoint,
}

impl<W: Watcher> Conn<W> {
    /// Closes the connection (see [`CmId::close`]): every request registered on its MRs comes
    /// back through `each` once no rkey can reach it. May sleep.
    pub(crate) fn close(self, each: impl FnMut(Rq<W::Pdu>)) {
        self.cm.close(each);
    }
}

/// Checks `spec` against what `dev` offers; the error names the limit.
fn check_device(spec: &ConnSpec<'_>, dev: &DeviceRef) -> Result {
    let a = dev.attrs();
    let c = spec.caps;
    let short = if c.send_wr > a.max_qp_wr || c.recv_wr > a.max_qp_wr {
        Some((
            "work requests per queue",
            c.send_wr.max(c.recv_wr),
            a.max_qp_wr,
        ))
    } else if spec.cq_entries > a.max_cqe {
        Some(("completion queue entries", spec.cq_entries, a.max_cqe))
    } else if c.mrs > 0 && c.mr_pages > a.max_fast_reg_page_list_len {
        Some((
            "pages per memory region",
            c.mr_pages,
            a.max_fast_reg_page_list_len,
        ))
    } else {
        None
    };
    match short {
        Some((what, need, has)) => {
            pr_err!(
                "{} {}: RDMA device {} offers {has} {what}; the connection needs {need}\n",
                spec.who,
                spec.peer,
                dev.name()
            );
            Err(EINVAL)
        }
        None => Ok(()),
    }
}

/// Connects per `spec`. `prepare` runs once the QP exists and before the connect request:
/// it posts the receives and returns how many, which the Hello grants as credits.
pub(crate) fn connect<W: Watcher>(
    spec: &ConnSpec<'_>,
    events: Arc<ConnEvents<W>>,
    prepare: impl FnOnce(&CmId<ConnEvents<W>>, &Arc<Pd>) -> Result<u16>,
) -> Result<Conn<W>> {
    let (who, peer) = (spec.who, spec.peer);
    let mut left = msecs_to_jiffies(spec.budget_ms);
    let expect = |left: &mut Jiffies, step: &str, want: fn(&CmEvent) -> bool| {
        let ev = events.next_event(left).inspect_err(|e| {
            pr_err!(
                "{who} {peer}: {step}: no answer within the {} ms budget ({e:?})\n",
                spec.budget_ms
            )
        })?;
        if want(&ev) {
            Ok(ev)
        } else {
            Err(fail(who, peer, step, &ev, spec.floor, spec.keyed))
        }
    };

    let resolve_ms = RESOLVE_MS.min(spec.budget_ms.max(1));
    let mut cm = CmId::new(events.clone())?;
    // Without a key, from a reserved port: only the kernel or root can have one (docs/design.md,
    // "Access control"); the port stays through address resolution. With a key the proofs
    // vouch for the host, and rdma_cm picks any port.
    if !spec.keyed {
        crate::resvport::with_reserved_port(who, |p| cm.bind_port(p, peer.addr))?;
    }
    cm.resolve_addr(peer.addr, peer.port, resolve_ms)?;
    expect(&mut left, "resolving the address", |e| {
        matches!(e, CmEvent::AddrResolved)
    })?;
    cm.resolve_route(resolve_ms)?;
    expect(&mut left, "resolving the route", |e| {
        matches!(e, CmEvent::RouteResolved)
    })?;

    let dev = cm.device()?;
    check_device(spec, &dev)?;
    let attrs = dev.attrs();
    let pd = Pd::new(&dev)?;
    // Spread the queues over the device's interrupt vectors.
    let vector = u32::from(spec.queue_id) % attrs.num_comp_vectors.max(1);
    let cq = Cq::new(&dev, spec.cq_entries, vector, spec.poll)?;
    cm.create_qp(&pd, &cq, spec.caps)?;
    let recv_credits = prepare(&cm, &pd)?;
    cm.set_ack_timeout(ACK_TIMEOUT_EXP)?;

    let hello = spec.hello(recv_credits);
    cm.connect(
        &hello.to_bytes(),
        ConnParams {
            // The target reads our pages (writes); we never read the target's.
            responder_resources: READ_DEPTH.min(attrs.max_qp_rd_atom) as u8,
            initiator_depth: READ_DEPTH.min(attrs.max_qp_init_rd_atom) as u8,
            retry_count: 7,
            rnr_retry_count: 0,
        },
    )?;
    let CmEvent::Established(accept) = expect(&mut left, "connecting", |e| {
        matches!(e, CmEvent::Established(_))
    })?
    else {
        return Err(errno(kb::EPROTO));
    };
    let reply = HelloReply::decode(accept.as_bytes()).map_err(|e| {
        pr_err!("{who} {peer}: accepted with an undecodable HelloReply ({e:?})\n");
        cm.disconnect();
        errno(kb::EPROTO)
    })?;
    if reply.status != HelloStatus::Ok {
        pr_err!("{who} {peer}: accepted but refused: {:?}\n", reply.status);
        cm.disconnect();
        return Err(errno(kb::ECONNREFUSED));
    }
    // IPv4 and IPv6 are all `resolve_addr` asks for; an id without its addresses would only
    // fail its authentication.
    let unknown = (IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);
    let ((src, local_port), (dst, _)) = cm.addresses().unwrap_or((unknown, unknown));
    Ok(Conn {
        cm,
        pd,
        cq,
        dev,
        reply,
        hello,
        local: crate::authn::endpoint(src, local_port),
        remote: crate::authn::endpoint(dst, peer.port),
    })
}
