// SPDX-License-Identifier: GPL-2.0

//! One hardware queue's RDMA connection and the life of a request on it.
//!
//! Per tag the queue keeps a Send buffer and (in the QP) a fast-registration MR; a ring of
//! receives takes the responses. A request goes (docs/design.md, "One I/O on the RDMA
//! path"): take a send credit, map and register its pages, post REG_MR + SEND; the target
//! moves the data and answers with Send-with-Invalidate. The request completes once its Send
//! has completed, its response has arrived, and its pages are out of the MR again, which
//! `rust/frwr.rs` allows only with proof that the key is dead: the response's
//! invalidation of exactly that key, a completed LOCAL_INV, or the QP drained.
//!
//! Responses are matched by request id ([`ReqId`]: slot and generation): one that names no
//! request in flight (a duplicate, a replay, a stranger) is dropped and counted, unless it
//! invalidated a key, which means the target is confused about our memory: the connection
//! is reset. Every other protocol violation resets the connection too; its requests are
//! requeued by the disk's session.
//!
//! Everything the completion handlers and `queue_rq` share is under one spinlock; handlers
//! run on the IB completion workqueue (process context), or, on a poll queue, in the task
//! that polls (blk-mq's poll, under RCU), so nothing here sleeps under it, and `queue_rq`
//! (allowed to sleep for the TCP queues' sake) never does here. Requests are ended outside
//! the lock.

use core::{
    mem,
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
};
use kernel::{new_spinlock, prelude::*, sync::Arc, sync::SpinLock};

use crate::authn;
use crate::faults::Fault;
use crate::host::{now_ms, ConnId, DiskRq, Pdu, QueueHost, QueueName, RateLimit};
use crate::io;
use crate::kapi::blk_mq::BlkStatus;
use crate::kapi::delay::sleep_ms;
use crate::kapi::frwr::{DmaRq, InvError, InvToken, MrEvent};
use crate::kapi::rdma_cm::{CmEvent, QpCaps};
use crate::kapi::verbs::{Cq, DeviceId, Msg, MsgDir, MsgOwner, PollCtx, RemoteAccess, Wc};
use crate::proto::auth::{ClientProof, Endpoint};
use crate::proto::credits::{CreditReceiver, CreditSender};
use crate::proto::policy::Transport;
use crate::proto::tags::Tags;
use crate::proto::wire::{
    req_flags, AuthReply, Hello, HelloReply, Opcode, RemoteBuf, ReqId, Request, Response,
    AUTH_REPLY_LEN, AUTH_REQUEST_LEN, REQUEST_LEN, RESPONSE_LEN,
};
use crate::rdma_conn::{self, Conn, ConnEvents, ConnSpec, Watcher};
use crate::stats::Stats;
use crate::telemetry::{Op, Via};

/// Least time between two log lines about requests whose pages could not be mapped.
const MAP_WARN_INTERVAL_MS: i64 = 5_000;
/// Tags per hardware queue (and so Send buffers, MRs and receives per connection).
pub(crate) const QUEUE_DEPTH: u16 = crate::proto::knobs::QUEUE_DEPTH;
/// Most completions one poll of a poll queue handles: the handlers run with a spinlock held
/// (read CRCs included), and other pollers of the queue wait; the poller comes back for more.
const REAP_BUDGET: u32 = 16;
/// Pages one MR maps: 1 MiB plus one page for an unaligned start.
pub(crate) const MR_PAGES: u32 = 257;
/// Largest request, from the MR size.
pub(crate) const MAX_IO_BYTES: u32 = (MR_PAGES - 1) * crate::kapi::frwr::MR_PAGE_SIZE;
/// Largest `inline_max` knob: every tag's Send buffer has room for this much data after the
/// request. 4 KiB carries the small writes whose RDMA Read round trip costs most.
pub(crate) const INLINE_CAP: u32 = crate::proto::knobs::INLINE_CAP;
/// The `inline_max` knob's default.
pub(crate) const DEFAULT_INLINE_MAX: u32 = 4096;
/// The slot of keepalive NOPs, after blk-mq's tags; the authentication, before any of them,
/// uses it too.
const KEEPALIVE_SLOT: u16 = QUEUE_DEPTH;
/// Slots: blk-mq's tags and the keepalive's.
const SLOTS: usize = QUEUE_DEPTH as usize + 1;
/// Send queue: REG_MR, SEND and LOCAL_INV per tag, the keepalive's SEND, an injected fault's
/// work request, and the drain's.
const SEND_WR: u32 = 3 * QUEUE_DEPTH as u32 + 3;
/// Receive queue: a receive per tag, and the drain's.
const RECV_WR: u32 = QUEUE_DEPTH as u32 + 1;
/// Bytes per receive: a response, or the answer to an authentication.
const RECV_LEN: usize = if AUTH_REPLY_LEN > RESPONSE_LEN {
    AUTH_REPLY_LEN
} else {
    RESPONSE_LEN
};
/// Bytes of the keepalive slot's Send buffer: a NOP, or an authentication.
const CONTROL_LEN: usize = if AUTH_REQUEST_LEN > REQUEST_LEN {
    AUTH_REQUEST_LEN
} else {
    REQUEST_LEN
};

/// A request on the wire.
struct Inflight {
    /// The request, while it is not registered on an MR (a data-less one, or one whose pages
    /// came back out). `None` while the MR holds it.
    rq: Option<DiskRq>,
    op: Opcode,
    /// Bytes it moves (or the range it covers).
    len: u32,
    /// Its pages were registered (the MR holds it until its key is proven dead).
    registered: bool,
    /// The Send has completed (its buffer is back).
    send_done: bool,
    resp: Option<Response>,
}

impl Inflight {
    /// Whether the exchange is over: the Send is back, the response is in, and the pages are
    /// out of the MR.
    fn is_done(&self) -> bool {
        self.send_done && self.resp.is_some() && !self.registered
    }
}

#[derive(Default)]
struct Slot {
    /// The tag's Send buffer, when not posted.
    send: Option<KBox<Msg<SendCtx>>>,
    io: Option<Inflight>,
}

struct Inner {
    /// `None` once torn down.
    conn: Option<Conn<QueueWatch>>,
    send_credits: CreditSender,
    recv_credits: CreditReceiver,
    tags: Tags<SLOTS>,
    slots: KVec<Slot>,
    /// When the last response arrived, or an idle connection was given a request (ms,
    /// ktime); and when an unanswered keepalive was sent.
    last_rx_ms: i64,
    keepalive_sent_ms: Option<i64>,
    /// Since when requests have waited with no credit granted and none in flight (a target
    /// that stopped granting: nothing would ever complete to bring one back).
    starved_ms: Option<i64>,
    /// Where the connection's authentication stands (an export with a secret).
    auth: Auth,
    /// Largest write sent inline: the target's `max_inline`, within the room the Send
    /// buffers were given at connect (0: none).
    inline_max: u32,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Auth {
    /// Not asked for, or done.
    None,
    /// Sent; its answer is awaited.
    Pending,
    /// Its answer, if it was one (an [`AuthReply`]); the waiter checks it.
    Answered(Option<AuthReply>),
}

/// One hardware queue's connection.
#[pin_data]
pub(crate) struct RdmaQueue {
    host: Arc<dyn QueueHost>,
    id: ConnId,
    /// Set on the first error: no new requests; the disk is resetting the connection. Read
    /// without the lock (the disk checks it under its own).
    failed: AtomicBool,
    /// The RDMA device the connection is on, once connected (0 before); fixed afterwards.
    dev: AtomicUsize,
    /// A poll queue: its CQ is polled only by [`Self::poll`], and its handlers run there
    /// (where they must not sleep), not on the IB completion workqueue.
    polled: bool,
    /// A poll queue's CQ while connected. Held while polling, so that `shutdown` takes it
    /// away only between polls: the CQ is freed in process context, never by a poller.
    #[pin]
    reap_cq: SpinLock<Option<Arc<Cq>>>,
    #[pin]
    inner: SpinLock<Inner>,
    /// A request whose mapping fails is tried again every few ms (blk-mq's resource delay).
    map_warn: RateLimit,
}

/// Hears the connection's CM events (each means it is failing) and its MRs' completions.
pub(crate) struct QueueWatch {
    queue: Arc<RdmaQueue>,
}

impl Watcher for QueueWatch {
    type Pdu = Pdu;

    fn event(&self, ev: &CmEvent) {
        if !matches!(ev, CmEvent::TimewaitExit) {
            self.queue.fail(ev.name());
        }
    }

    fn mr_event(&self, ev: MrEvent) {
        self.queue.on_mr_event(ev);
    }
}

struct SendCtx {
    queue: Arc<RdmaQueue>,
    slot: u16,
}

impl MsgOwner for SendCtx {
    fn done(msg: KBox<Msg<Self>>, wc: &Wc) {
        let q = msg.owner().queue.clone();
        q.on_send(msg, wc);
    }
}

struct RecvCtx {
    queue: Arc<RdmaQueue>,
}

impl MsgOwner for RecvCtx {
    fn done(msg: KBox<Msg<Self>>, wc: &Wc) {
        let q = msg.owner().queue.clone();
        q.on_recv(msg, wc);
    }
}

/// What a finished exchange hands to be completed outside the lock.
struct Done {
    rq: DiskRq,
    op: Opcode,
    resp: Response,
}

impl RdmaQueue {
    /// Connects queue `id.qid` of `host`'s disk as part of connection set `id.epoch`, within
    /// `budget_ms`; returns it with the target's Hello reply. May sleep.
    pub(crate) fn connect(
        host: &Arc<dyn QueueHost>,
        id: ConnId,
        budget_ms: u32,
    ) -> Result<(Arc<Self>, HelloReply)> {
        let info = host.info();
        if info.faults.hit(Fault::FailConnect) {
            pr_warn!(
                "{}: queue {}: RDMA connect failed (injected)\n",
                info.name(),
                id.qid
            );
            return Err(crate::kapi::errno(kernel::bindings::ETIMEDOUT));
        }
        let q = Arc::pin_init(
            pin_init!(Self {
                host: host.clone(),
                id,
                failed: AtomicBool::new(false),
                dev: AtomicUsize::new(DeviceId::NONE.to_bits()),
                polled: info.is_poll_queue(id.qid),
                reap_cq <- new_spinlock!(None, "rdmadisk::rdma_queue::reap_cq"),
                inner <- new_spinlock!(Inner {
                    conn: None,
                    send_credits: CreditSender::new(0),
                    recv_credits: CreditReceiver::new(),
                    tags: Tags::new(),
                    slots: KVec::new(),
                    last_rx_ms: now_ms(),
                    keepalive_sent_ms: None,
                    starved_ms: None,
                    auth: Auth::None,
                    inline_max: 0,
                }, "rdmadisk::rdma_queue"),
                map_warn: RateLimit::new(),
            }),
            GFP_KERNEL,
        )?;
        let depth = u32::from(QUEUE_DEPTH);
        let spec = ConnSpec {
            who: info.name(),
            peer: info.paths.addr(id.path).rdma,
            export: info.export,
            queue_id: id.qid,
            queue_count: info.nr_queues,
            session_id: info.session(),
            epoch: id.epoch,
            hello_flags: info.hello_flags(),
            caps: QpCaps {
                // REG_MR, SEND and a LOCAL_INV per tag, the keepalive's SEND, an injected
                // fault's, and the drain's (`ib_drain_qp` posts one to each queue).
                send_wr: SEND_WR,
                recv_wr: RECV_WR,
                mrs: depth,
                mr_pages: MR_PAGES,
            },
            // Every work request may complete (unsignalled ones do when flushed), the drain's too.
            cq_entries: SEND_WR + RECV_WR + 2,
            poll: if q.polled {
                PollCtx::Direct
            } else {
                PollCtx::Workqueue
            },
            budget_ms,
            floor: Some(&info.stale_floor),
            keyed: info.keys().is_some(),
        };
        let watch = QueueWatch { queue: q.clone() };
        // Room for inline data after the request in each tag's Send buffer (the keepalive's
        // carries none): the knob as it is now.
        let room = info
            .knobs
            .inline_max
            .load(Ordering::Relaxed)
            .min(INLINE_CAP);
        let t0 = now_ms();
        let res = rdma_conn::connect(&spec, ConnEvents::new(watch)?, |cm, pd| {
            let mut slots = KVec::with_capacity(SLOTS, GFP_KERNEL)?;
            for slot in 0..SLOTS as u16 {
                let ctx = SendCtx {
                    queue: q.clone(),
                    slot,
                };
                let len = if slot == KEEPALIVE_SLOT {
                    CONTROL_LEN
                } else {
                    REQUEST_LEN + room as usize
                };
                let send = Msg::new(pd, len, MsgDir::Send, ctx)?;
                slots.push(
                    Slot {
                        send: Some(send),
                        io: None,
                    },
                    GFP_KERNEL,
                )?;
            }
            let mut g = q.inner.lock();
            g.slots = slots;
            for _ in 0..depth {
                drop(g);
                let msg = Msg::new(pd, RECV_LEN, MsgDir::Recv, RecvCtx { queue: q.clone() })?;
                cm.post_recv(msg)?;
                g = q.inner.lock();
                g.recv_credits.on_recv_posted();
            }
            Ok(g.recv_credits.take_grant())
        });
        let res = res.and_then(|conn| {
            let (reply, hello) = (conn.reply, conn.hello);
            let (local, remote) = (conn.local, conn.remote);
            q.dev.store(conn.dev.id().to_bits(), Ordering::Release);
            let mut g = q.inner.lock();
            g.send_credits = CreditSender::new(reply.initial_credits);
            g.inline_max = reply.max_inline.min(room);
            let cq = conn.cq.clone();
            g.conn = Some(conn);
            drop(g);
            if q.polled {
                *q.reap_cq.lock() = Some(cq);
            }
            let who = QueueName(info.name(), id.qid);
            if let Some(keys) = authn::needed(who, info.export, info.keys(), &reply)? {
                let left = i64::from(budget_ms) - (now_ms() - t0);
                q.authenticate(keys, &hello, &reply, (local, remote), left.max(1000))?;
            }
            Ok(reply)
        });
        match res {
            Ok(reply) => Ok((q, reply)),
            Err(e) => {
                // The posted receives were flushed when the id was dropped; the Send buffers
                // refer to the queue and must go for it to be freed.
                q.shutdown(|rq| rq.end(BlkStatus::IoErr));
                Err(e)
            }
        }
    }

    fn stats(&self) -> &Stats {
        &self.host.info().stats
    }

    /// Proves the disk's key on this new connection (its export asked, with `reply`'s
    /// challenge), and checks the target's proof of its own in the answer, which it waits up
    /// to `budget_ms` for; nothing else goes on the connection before. `EACCES` if the target
    /// denies our key or does not prove its own. May sleep.
    fn authenticate(
        &self,
        keys: authn::Keys<'_>,
        hello: &Hello,
        reply: &HelloReply,
        (local, remote): (Endpoint, Endpoint),
        budget_ms: i64,
    ) -> Result {
        let who = QueueName(self.name(), self.id.qid);
        let proof: ClientProof;
        {
            let mut guard = self.inner.lock();
            let g = &mut *guard;
            let Some(mut msg) = g
                .slots
                .get_mut(usize::from(KEEPALIVE_SLOT))
                .and_then(|s| s.send.take())
            else {
                return Err(EBUSY);
            };
            let id = match g.tags.issue(KEEPALIVE_SLOT) {
                Ok(id) => id,
                Err(_) => {
                    g.slots[usize::from(KEEPALIVE_SLOT)].send = Some(msg);
                    return Err(EBUSY);
                }
            };
            if !g.send_credits.try_consume() {
                pr_err!("{who}: the target granted no credit for the authentication\n");
                g.tags.release(KEEPALIVE_SLOT);
                g.slots[usize::from(KEEPALIVE_SLOT)].send = Some(msg);
                return Err(crate::kapi::errno(kernel::bindings::EPROTO));
            }
            let credits = g.recv_credits.take_grant();
            proof = authn::prove(keys, hello, reply, local, remote, id.tag(), credits);
            if let Some(out) = msg.data_mut().first_chunk_mut() {
                proof.request.encode(out);
            }
            g.auth = Auth::Pending;
            let Some(conn) = g.conn.as_ref() else {
                return Err(ENODEV);
            };
            if let Err((e, msg)) = conn.cm.post_send(msg) {
                g.slots[usize::from(KEEPALIVE_SLOT)].send = Some(msg);
                return Err(e);
            }
        }
        // The answer comes through `on_recv`; the connection is ours alone until this returns,
        // so a short poll costs nothing.
        let deadline = now_ms() + budget_ms;
        loop {
            let state = self.inner.lock().auth;
            match state {
                Auth::Answered(answer) => {
                    self.inner.lock().auth = Auth::None;
                    let Some(answer) = answer else {
                        pr_err!("{who}: the answer to the authentication is not one\n");
                        return Err(crate::kapi::errno(kernel::bindings::EPROTO));
                    };
                    return authn::check(who, &proof, &answer, Some(&self.host.info().stale_floor));
                }
                Auth::None | Auth::Pending => {}
            }
            if self.is_failed() {
                return Err(crate::kapi::errno(kernel::bindings::ECONNRESET));
            }
            if now_ms() > deadline {
                pr_err!("{who}: no answer to the authentication within {budget_ms} ms\n");
                return Err(crate::kapi::errno(kernel::bindings::ETIMEDOUT));
            }
            // A poll queue's answer is reaped by its poller: until the disk is live, us.
            self.poll();
            sleep_ms(5);
        }
    }

    /// Reaps a poll queue's completions, running their handlers here; returns how many (0 on
    /// an interrupt-driven queue). Called by blk-mq's poll (under the RCU read lock), the
    /// health check and the authentication's wait; never sleeps.
    pub(crate) fn poll(&self) -> u32 {
        if !self.polled {
            return 0;
        }
        let cq = self.reap_cq.lock();
        let n = cq.as_ref().map_or(0, |cq| cq.process_direct(REAP_BUDGET));
        drop(cq);
        if n > 0 {
            Stats::add(&self.stats().polled_completions, u64::from(n));
        }
        n
    }

    /// Reaps a poll queue until its CQ is empty (or a CQ's worth was handled); returns how
    /// many. For the timeout handler, which must know whether a request's answer is in.
    pub(crate) fn reap_all(&self) -> u32 {
        let mut n = 0;
        while n < SEND_WR + RECV_WR + 2 {
            let k = self.poll();
            n += k;
            if k < REAP_BUDGET {
                break;
            }
        }
        n
    }

    fn name(&self) -> &str {
        self.host.info().name()
    }

    /// Sends `rq`. `Err` gives it back with `Resource` when it must wait (no credit, the
    /// connection is resetting), or with the error blk-mq should end it with.
    pub(crate) fn submit(
        self: &Arc<Self>,
        rq: DiskRq,
    ) -> core::result::Result<(), (DiskRq, BlkStatus)> {
        let Some(op) = io::opcode(&rq) else {
            return Err((rq, BlkStatus::NotSupp));
        };
        let info = self.host.info();
        let access = match op {
            Opcode::Read => Some(RemoteAccess::Write),
            Opcode::Write => Some(RemoteAccess::Read),
            _ => None,
        }
        .filter(|_| rq.bytes() > 0);
        let slot = rq.tag() as u16;
        let len = rq.bytes();
        // The write's CRC is computed before the lock is taken; the id is known only under it.
        let mut req = io::request(&rq, op, ReqId::default());
        let mut guard = self.inner.lock();
        let g = &mut *guard;
        if self.is_failed() || g.conn.is_none() {
            return Err((rq, BlkStatus::Resource));
        }
        if !info.credit_ok(&g.send_credits, &mut g.starved_ms, Via::Rdma, Op::of(op)) {
            return Err((rq, BlkStatus::Resource));
        }
        let Some(msg) = g
            .slots
            .get_mut(usize::from(slot))
            .and_then(|s| s.send.take())
        else {
            // The tag's previous exchange has not given its Send buffer back yet.
            return Err((rq, BlkStatus::Resource));
        };
        if g.tags.in_flight() == 0 {
            // An idle connection starts waiting for the target now, not at its last response.
            g.last_rx_ms = now_ms();
        }
        let id = match g.tags.issue(slot) {
            Ok(id) => id,
            Err(_) => {
                g.slots[usize::from(slot)].send = Some(msg);
                return Err((rq, BlkStatus::Resource));
            }
        };
        req.tag = id.tag();
        io::inject_write_crc(info, &rq, &mut req);
        req.credits = g.recv_credits.take_grant();
        // A small write goes in the Send itself: no registration, and no RDMA Read round trip
        // before the target can write it.
        let inline = op == Opcode::Write
            && len > 0
            && len
                <= g.inline_max
                    .min(info.knobs.inline_max.load(Ordering::Relaxed));
        let Some(conn) = g.conn.as_mut() else {
            g.slots[usize::from(slot)].send = Some(msg);
            g.recv_credits.return_grant(req.credits);
            g.tags.release(slot);
            return Err((rq, BlkStatus::Resource));
        };
        let posted = match access {
            Some(access) if !inline => {
                Self::post_data(info, &self.map_warn, conn, slot, rq, access, msg, &mut req)
            }
            _ => Self::post_plain(conn, rq, msg, &mut req, inline),
        };
        if inline && posted.is_ok() {
            Stats::inc(&self.stats().inline_writes);
        }
        match posted {
            Ok(rq) => {
                g.send_credits.try_consume();
                g.slots[usize::from(slot)].io = Some(Inflight {
                    registered: rq.is_none(),
                    rq,
                    op,
                    len,
                    send_done: false,
                    resp: None,
                });
                let hw = u64::from(g.send_credits.high_water());
                self.stats()
                    .max_outstanding
                    .fetch_max(hw, Ordering::Relaxed);
                if info.faults.hit(Fault::QpError) {
                    if let Some(c) = g.conn.as_ref() {
                        let _ = c.cm.inject_error();
                    }
                }
                Ok(())
            }
            Err((e, rq, msg, stuck)) => {
                g.slots[usize::from(slot)].send = Some(msg);
                g.recv_credits.return_grant(req.credits);
                if stuck {
                    // The REG_MR went out but not the Send: the MR holds the request until
                    // the connection is closed, so it is in flight as far as blk-mq knows.
                    g.slots[usize::from(slot)].io = Some(Inflight {
                        rq: None,
                        op,
                        len,
                        registered: true,
                        send_done: true,
                        resp: None,
                    });
                } else {
                    g.tags.release(slot);
                }
                // A request left in its MR must wait for the connection to be closed; any other
                // failure but a deliberate wait (EAGAIN) is the QP's.
                if stuck || e != EAGAIN {
                    pr_err!(
                        "{}: queue {}: posting a request failed: {e:?}\n",
                        self.name(),
                        self.id.qid
                    );
                    self.fail_locked(g, "a post failed");
                }
                drop(guard);
                match rq {
                    Some(rq) => Err((rq, BlkStatus::Resource)),
                    None => Ok(()),
                }
            }
        }
    }

    /// Posts `req` alone in a Send, or with `rq`'s data after it (`inline`, which the caller
    /// checked fits the buffer). `Ok(Some(rq))`: the slot keeps the request. On error: as
    /// [`Self::post_data`].
    #[allow(clippy::type_complexity)]
    fn post_plain(
        conn: &mut Conn<QueueWatch>,
        rq: DiskRq,
        mut msg: KBox<Msg<SendCtx>>,
        req: &mut Request,
        inline: bool,
    ) -> core::result::Result<Option<DiskRq>, (Error, Option<DiskRq>, KBox<Msg<SendCtx>>, bool)>
    {
        let mut end = REQUEST_LEN;
        if inline {
            req.flags |= req_flags::INLINE;
            req.buf = RemoteBuf {
                addr: 0,
                rkey: 0,
                len: req.length,
            };
            let buf = msg.data_mut();
            rq.for_each_segment(|seg| {
                if let Some(to) = buf.get_mut(end..end + seg.len()) {
                    to.copy_from_slice(seg);
                }
                end += seg.len();
            });
        }
        if let Some(out) = msg.data_mut().first_chunk_mut() {
            req.encode(out);
        }
        // Past the buffer (which the caller's check rules out) this fails, and nothing is sent.
        if let Err(e) = msg.set_len(end) {
            return Err((e, Some(rq), msg, false));
        }
        match conn.cm.post_send(msg) {
            Ok(()) => Ok(Some(rq)),
            Err((e, msg)) => Err((e, Some(rq), msg, false)),
        }
    }

    /// Maps and registers `rq`'s pages and posts REG_MR + SEND. `Ok(None)`: the MR holds the
    /// request. On error: the error, the request if it came back, the message, and whether the
    /// REG_MR went out without its Send (the request is then stuck in the MR).
    #[allow(clippy::type_complexity, clippy::too_many_arguments)]
    fn post_data(
        info: &crate::host::DiskInfo,
        map_warn: &RateLimit,
        conn: &mut Conn<QueueWatch>,
        slot: u16,
        rq: DiskRq,
        access: RemoteAccess,
        msg: KBox<Msg<SendCtx>>,
        req: &mut Request,
    ) -> core::result::Result<Option<DiskRq>, (Error, Option<DiskRq>, KBox<Msg<SendCtx>>, bool)>
    {
        let mut msg = msg;
        // The buffer may have room for inline data; this Send carries the request only.
        if let Err(e) = msg.set_len(REQUEST_LEN) {
            return Err((e, Some(rq), msg, false));
        }
        let mapped = if info.faults.hit(Fault::FailMrReg) {
            Err((rq, ENOMEM))
        } else {
            DmaRq::map(rq, &conn.dev, access)
        };
        let data = match mapped {
            Ok(d) => d,
            Err((rq, e)) => {
                // blk-mq tries it again within milliseconds, for as long as the mapping fails:
                // one line per interval, and the disk keeps the request's clock running.
                rq.pdu().note_map_failed();
                if let Some(held) = map_warn.allow(MAP_WARN_INTERVAL_MS) {
                    pr_warn!(
                        "{}: mapping a request's pages for the device failed: {e:?}; it waits and is tried again ({held} more such failures since the last line)\n",
                        info.name()
                    );
                }
                return Err((EAGAIN, Some(rq), msg, false));
            }
        };
        let res = conn
            .cm
            .post_reg_send(u32::from(slot), data, access, msg, |buf, mr| {
                req.buf = RemoteBuf {
                    addr: mr.addr,
                    rkey: mr.rkey,
                    len: mr.len,
                };
                if let Some(out) = buf.first_chunk_mut() {
                    req.encode(out);
                }
            });
        match res {
            Ok(_) => Ok(None),
            Err((e, Some(data), msg)) => Err((e, Some(data.unmap()), msg, false)),
            Err((e, None, msg)) => Err((e, None, msg, true)),
        }
    }

    /// Marks the connection failed (once) and tells the disk.
    pub(crate) fn fail(&self, why: &str) {
        self.fail_locked(&mut self.inner.lock(), why);
    }

    /// A request on this queue timed out.
    pub(crate) fn fail_timeout(&self) {
        self.fail("I/O timeout");
    }

    fn fail_locked(&self, g: &mut Inner, why: &str) {
        if self.failed.swap(true, Ordering::AcqRel) {
            return;
        }
        if g.conn.is_some() {
            pr_err!(
                "{}: queue {} (RDMA, set {}): {why}; resetting the connection\n",
                self.name(),
                self.id.qid,
                self.id.epoch
            );
        }
        self.host.clone().queue_failed(self.id, Transport::Rdma);
    }

    fn on_send(&self, msg: KBox<Msg<SendCtx>>, wc: &Wc) {
        let slot = msg.owner().slot;
        let mut guard = self.inner.lock();
        let g = &mut *guard;
        if !wc.is_ok() {
            // A flush we did not cause (our teardown takes the connection first) means the
            // QP went to the error state on its own, e.g. after a responder error: the
            // requests on it will never complete, so reset now rather than wait for timeouts.
            if !wc.is_flush() && g.conn.is_some() {
                pr_err!(
                    "{}: queue {}: Send of slot {slot} failed: {} (status {}, vendor {:#x})\n",
                    self.name(),
                    self.id.qid,
                    wc.status_str(),
                    wc.status(),
                    wc.vendor_err()
                );
            }
            return self.fail_locked(g, "a Send failed or was flushed");
        }
        let Some(s) = g.slots.get_mut(usize::from(slot)) else {
            return;
        };
        s.send = Some(msg);
        if slot == KEEPALIVE_SLOT {
            return;
        }
        if let Some(io) = s.io.as_mut() {
            io.send_done = true;
        }
        let done = Self::take_done(g, slot);
        drop(guard);
        self.complete(done);
    }

    fn on_recv(&self, msg: KBox<Msg<RecvCtx>>, wc: &Wc) {
        if !wc.is_ok() {
            if !wc.is_flush() {
                pr_err!(
                    "{}: queue {}: a Receive failed: {} (status {}, vendor {:#x})\n",
                    self.name(),
                    self.id.qid,
                    wc.status_str(),
                    wc.status(),
                    wc.vendor_err()
                );
            }
            // As for Sends: a flush we did not cause means the QP is in the error state.
            return self.fail("a Receive failed or was flushed");
        }
        let faults = &self.host.info().faults;
        let dropped = faults.hit(Fault::DropResponse);
        if !dropped && !self.polled && faults.hit(Fault::DelayResponse) {
            // Completion handlers run in process context (IB_POLL_WORKQUEUE), except a poll
            // queue's.
            sleep_ms(faults.delay_ms());
        }
        let n = (wc.byte_len() as usize).min(RESPONSE_LEN);
        let resp = Response::decode(&msg.data()[..n]);
        // Only an authentication's answer is that long; it begins as a response does.
        let auth_reply = (wc.byte_len() as usize == AUTH_REPLY_LEN)
            .then(|| AuthReply::decode(msg.data()).ok())
            .flatten();
        let mut guard = self.inner.lock();
        let g = &mut *guard;
        if g.conn.is_none() {
            return;
        }
        if g.recv_credits.on_message_received().is_err() {
            return self.fail_locked(g, "the target sent without a credit");
        }
        let reposted = g.conn.as_ref().map(|c| c.cm.post_recv(msg));
        if !matches!(reposted, Some(Ok(()))) {
            return self.fail_locked(g, "re-posting a receive failed");
        }
        g.recv_credits.on_recv_posted();
        g.last_rx_ms = now_ms();
        let resp = match resp {
            Ok(r) => r,
            Err(e) => {
                pr_err!(
                    "{}: queue {}: undecodable response: {e:?}\n",
                    self.name(),
                    self.id.qid
                );
                return self.fail_locked(g, "undecodable response");
            }
        };
        Stats::inc(&self.stats().responses);
        if dropped {
            // Lost on the way, as far as the request knows: the credits it carried are not.
            g.send_credits.grant(resp.credits);
            return;
        }
        g.send_credits.grant(resp.credits);
        let id = ReqId::from_tag(resp.tag);
        if let Err(e) = g.tags.check(id) {
            let n = self.stats().stale_responses.fetch_add(1, Ordering::Relaxed) + 1;
            if wc.invalidated_rkey().is_some() {
                return self
                    .fail_locked(g, "a response for no request in flight invalidated a key");
            }
            // A broken target may send many: log the first few, then every power of two.
            if n > 8 && !n.is_power_of_two() {
                return;
            }
            pr_warn!(
                "{}: queue {}: dropped a response (slot {} generation {}): {e}\n",
                self.name(),
                self.id.qid,
                id.slot,
                id.gen
            );
            return;
        }
        let _ = g.tags.answer(id);
        if id.slot == KEEPALIVE_SLOT && g.auth == Auth::Pending {
            if wc.invalidated_rkey().is_some() {
                return self.fail_locked(g, "the authentication's answer invalidated a key");
            }
            g.send_credits.complete();
            g.auth = Auth::Answered(auth_reply);
            return;
        }
        // Only now: an authentication's answer decodes as a response too, with proof bytes
        // where the capacity would be.
        self.host.info().note_capacity(resp.capacity_sectors);
        if id.slot == KEEPALIVE_SLOT {
            if g.keepalive_sent_ms.take().is_none() || wc.invalidated_rkey().is_some() {
                return self.fail_locked(g, "unexpected keepalive response");
            }
            g.send_credits.complete();
            // The target serves this connection: that ends an outage (an idle disk has no
            // other answers); one request it never answers is bounded on its own.
            self.host.info().answered.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Some(io) = g
            .slots
            .get_mut(usize::from(id.slot))
            .and_then(|s| s.io.as_mut())
        else {
            return self.fail_locked(g, "response for a slot with no request");
        };
        if !io::length_ok(io.op, io.len, &resp) {
            return self.fail_locked(g, "response length differs from the request's");
        }
        let registered = io.registered;
        io.resp = Some(resp);
        // Answered: the target holds it no longer, though its Send completion and the key's
        // invalidation may still be to come. `max_credits` and the in-flight count are about
        // what the target holds.
        g.send_credits.complete();
        if registered {
            let Some(conn) = g.conn.as_mut() else {
                return;
            };
            match conn.cm.remote_invalidated(u32::from(id.slot), wc) {
                Ok(rq) => {
                    Stats::inc(&self.stats().remote_invalidations);
                    if let Some(io) = g.slots[usize::from(id.slot)].io.as_mut() {
                        io.rq = Some(rq);
                        io.registered = false;
                    }
                }
                Err(InvError::NotInvalidated) => {
                    // The target left the key valid: invalidate it ourselves before the pages
                    // go back (its completion comes as an `MrEvent`).
                    Stats::inc(&self.stats().local_invalidations);
                    if conn.cm.post_local_inv(u32::from(id.slot)).is_err() {
                        return self.fail_locked(g, "posting a LOCAL_INV failed");
                    }
                }
                Err(InvError::WrongKey {
                    invalidated,
                    registered,
                }) => {
                    Stats::inc(&self.stats().rkey_mismatches);
                    pr_err!(
                        "{}: queue {}: slot {}: the target invalidated rkey {invalidated:#x}, not {registered:#x}\n",
                        self.name(),
                        self.id.qid,
                        id.slot
                    );
                    return self.fail_locked(g, "wrong rkey invalidated");
                }
                Err(InvError::NotRegistered | InvError::Invalidating) => {
                    return self.fail_locked(g, "response for a request not registered");
                }
            }
        } else if wc.invalidated_rkey().is_some() {
            Stats::inc(&self.stats().rkey_mismatches);
            return self.fail_locked(g, "a response for a request without data invalidated a key");
        }
        let done = Self::take_done(g, id.slot);
        drop(guard);
        self.complete(done);
    }

    fn on_mr_event(&self, ev: MrEvent) {
        let (what, slot, status) = match ev {
            MrEvent::Invalidated(token) => return self.on_local_inv(token),
            MrEvent::InvalidateFailed { tag, status } => ("LOCAL_INV", tag, status),
            MrEvent::RegFailed { tag, status } => ("REG_MR", tag, status),
        };
        // A flush only says the QP is in the error state already: that failure is reported
        // where it happened.
        if status != Wc::FLUSH {
            pr_err!(
                "{}: queue {}: {what} of slot {slot} failed (status {status})\n",
                self.name(),
                self.id.qid
            );
        }
        self.fail(if what == "REG_MR" {
            "a REG_MR failed"
        } else {
            "a LOCAL_INV failed"
        });
    }

    fn on_local_inv(&self, token: InvToken) {
        let slot = token.tag() as u16;
        let mut guard = self.inner.lock();
        let g = &mut *guard;
        let Some(rq) = g.conn.as_mut().and_then(|c| c.cm.local_invalidated(token)) else {
            return;
        };
        match g
            .slots
            .get_mut(usize::from(slot))
            .and_then(|s| s.io.as_mut())
        {
            Some(io) => {
                io.rq = Some(rq);
                io.registered = false;
            }
            None => {
                // Cannot happen: a registered request is always in flight. Requeue it rather
                // than drop it.
                drop(guard);
                rq.requeue(true);
                return;
            }
        }
        let done = Self::take_done(g, slot);
        drop(guard);
        self.complete(done);
    }

    /// Takes `slot`'s exchange out if it is over.
    fn take_done(g: &mut Inner, slot: u16) -> Option<Done> {
        let s = g.slots.get_mut(usize::from(slot))?;
        if !s.io.as_ref().is_some_and(Inflight::is_done) {
            return None;
        }
        let io = s.io.take()?;
        Some(Done {
            rq: io.rq?,
            op: io.op,
            resp: io.resp?,
        })
    }

    /// Ends or reissues a finished exchange's request (outside the lock).
    fn complete(&self, done: Option<Done>) {
        let Some(d) = done else {
            return;
        };
        if io::finish(
            self.host.info(),
            d.rq,
            d.op,
            &d.resp,
            Via::Rdma,
            self.id.path,
        ) == io::Verdict::Superseded
        {
            self.fail("the target fenced this connection: a newer one superseded it");
        }
    }

    /// Tears the connection down (waiting for the QP to drain) and hands every request that
    /// was on it to `dispose`. May sleep.
    pub(crate) fn shutdown(&self, mut dispose: impl FnMut(DiskRq)) {
        // Waits for a poll in progress; the drain below polls the CQ itself.
        let cq = self.reap_cq.lock().take();
        drop(cq);
        let conn = {
            let mut g = self.inner.lock();
            self.failed.store(true, Ordering::Release);
            g.conn.take()
        };
        // Closing drains the QP: the registered requests come back only then.
        if let Some(conn) = conn {
            conn.close(&mut dispose);
        }
        loop {
            let io = {
                let mut g = self.inner.lock();
                let io = g.slots.iter_mut().find_map(|s| s.io.take());
                g.tags = Tags::new();
                io
            };
            match io {
                Some(io) => {
                    if let Some(rq) = io.rq {
                        dispose(rq);
                    }
                }
                None => break,
            }
        }
        // The Send buffers refer back to the queue.
        let slots = mem::take(&mut self.inner.lock().slots);
        drop(slots);
    }

    /// The health check of a connection, run by the disk's session (see
    /// [`crate::queue::Queue::health_check`]). Fails the connection if requests have waited
    /// an I/O timeout for a credit the target never grants. With keepalives on: sends a NOP
    /// if nothing arrived for `keepalive_ms` (a credit allowing), and fails the connection if
    /// an unanswered NOP, or requests in flight, have seen nothing arrive for twice that. A
    /// dead path or a frozen target is then found without waiting for the I/O timeout, even
    /// when every credit is in use.
    pub(crate) fn health_check(&self) {
        // A poll queue nobody polls (no polled I/O in flight) still has its keepalive's answer
        // to reap, and its credits.
        self.poll();
        let now = now_ms();
        let info = self.host.info();
        let interval = i64::from(info.keepalive_ms());
        let mut guard = self.inner.lock();
        let g = &mut *guard;
        if self.is_failed() || g.conn.is_none() {
            return;
        }
        if g.starved_ms
            .is_some_and(|t| now - t > i64::from(info.io_timeout_ms()))
        {
            return self.fail_locked(g, "the target grants no credits");
        }
        if interval == 0 {
            return;
        }
        let quiet = now - g.last_rx_ms;
        if let Some(sent) = g.keepalive_sent_ms {
            if now - sent.max(g.last_rx_ms) > interval {
                self.fail_locked(g, "keepalive unanswered");
            }
            return;
        }
        if g.tags.in_flight() > 0 && quiet > 2 * interval {
            return self.fail_locked(g, "no response while requests are in flight");
        }
        if quiet < interval || g.send_credits.available() == 0 {
            return;
        }
        let Some(mut msg) = g
            .slots
            .get_mut(usize::from(KEEPALIVE_SLOT))
            .and_then(|s| s.send.take())
        else {
            return;
        };
        let Ok(id) = g.tags.issue(KEEPALIVE_SLOT) else {
            g.slots[usize::from(KEEPALIVE_SLOT)].send = Some(msg);
            return;
        };
        let req = Request {
            opcode: Opcode::Nop,
            flags: 0,
            credits: g.recv_credits.take_grant(),
            tag: id.tag(),
            sector: 0,
            length: 0,
            data_crc: 0,
            buf: RemoteBuf::default(),
        };
        if let Some(out) = msg.data_mut().first_chunk_mut() {
            req.encode(out);
        }
        let Some(conn) = g.conn.as_ref() else {
            return;
        };
        match conn.cm.post_send(msg) {
            Ok(()) => {
                g.send_credits.try_consume();
                g.keepalive_sent_ms = Some(now);
                Stats::inc(&self.stats().keepalives);
            }
            Err((_, msg)) => {
                g.recv_credits.return_grant(req.credits);
                g.tags.release(KEEPALIVE_SLOT);
                g.slots[usize::from(KEEPALIVE_SLOT)].send = Some(msg);
                self.fail_locked(g, "posting a keepalive failed");
            }
        }
    }

    /// Whether the connection is on the RDMA device `dev`.
    pub(crate) fn on_device(&self, dev: DeviceId) -> bool {
        DeviceId::from_bits(self.dev.load(Ordering::Acquire)) == dev
    }

    /// Largest request this connection's MRs can map.
    pub(crate) fn max_io_bytes(&self) -> u32 {
        MAX_IO_BYTES
    }

    /// True if the connection failed or is gone.
    pub(crate) fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Requests on the connection now.
    pub(crate) fn in_flight(&self) -> u32 {
        self.inner.lock().tags.in_flight() as u32
    }
}
