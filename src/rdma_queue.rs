// SPDX-License-Identifier: GPL-2.0

//! One hardware queue's RDMA connection and the life of a request on it.
//!
//! Per tag the queue keeps a Send buffer and (in the QP) a fast-registration MR; a ring of
//! receives takes the responses. A request goes (DESIGN.md, "One I/O on the RDMA path"):
//! take a send credit, map and register its pages, post REG_MR + SEND; the target moves the
//! data and answers with Send-with-Invalidate. The request completes once both its Send has
//! completed and its response has arrived with its own rkey invalidated; without an
//! invalidation a LOCAL_INV is posted first, with a wrong one the connection is reset.
//!
//! Everything the completion handlers and `queue_rq` share is under one spinlock; handlers
//! run on the IB completion workqueue (process context), `queue_rq` under RCU, so nothing
//! here sleeps. Requests are ended outside the lock.

use core::{mem, sync::atomic::Ordering};
use kernel::{new_spinlock, prelude::*, str::CStr, sync::Arc, sync::SpinLock};

use crate::disk::{now_ms, DiskDev, DiskRq};
use crate::io::{self, Via};
use crate::kapi::blk_mq::BlkStatus;
use crate::kapi::frwr::DmaRq;
use crate::kapi::rdma_cm::{CmEvent, QpCaps};
use crate::kapi::verbs::{DeviceRef, Msg, MsgDir, MsgOwner, PollCtx, RemoteAccess, Wc};
use crate::proto::credits::{CreditReceiver, CreditSender};
use crate::proto::policy::Transport;
use crate::proto::wire::{
    HelloReply, Opcode, RemoteBuf, Request, Response, REQUEST_LEN, RESPONSE_LEN,
};
use crate::rdma_conn::{self, Conn, ConnEvents, ConnSpec, Watcher};
use crate::stats::Stats;

/// Tags per hardware queue (and so Send buffers, MRs and receives per connection).
pub(crate) const QUEUE_DEPTH: u16 = 64;
/// Pages one MR maps: 1 MiB plus one page for an unaligned start.
pub(crate) const MR_PAGES: u32 = 257;
/// Largest request, from the MR size.
pub(crate) const MAX_IO_BYTES: u32 = (MR_PAGES - 1) * 4096;
/// Set-up budget of one connection.
const CONNECT_BUDGET_MS: u32 = 10_000;
/// The tag of keepalive NOPs, after blk-mq's tags.
const KEEPALIVE_TAG: u32 = QUEUE_DEPTH as u32;

/// A request's data, mapped when it has any.
enum Data {
    None(DiskRq),
    Mapped(DmaRq<DiskDev>),
}

impl Data {
    /// Unmaps (the device is done with the pages) and gives the request back.
    fn into_rq(self) -> DiskRq {
        match self {
            Data::None(rq) => rq,
            Data::Mapped(d) => d.unmap(),
        }
    }
}

/// A request on the wire.
struct Inflight {
    data: Data,
    op: Opcode,
    /// The key registered for it, if it has data.
    rkey: Option<u32>,
    /// Its rkey is no longer valid (invalidated by the target or by our LOCAL_INV).
    invalidated: bool,
    /// The Send (or, after it, our LOCAL_INV) has completed.
    send_done: bool,
    /// A LOCAL_INV is posted and not yet completed.
    local_inv: bool,
    resp: Option<Response>,
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
    slots: KVec<Slot>,
    /// Set on the first error: no new requests; the disk is resetting the connection.
    failed: bool,
    /// When the last response arrived (ms, ktime), and when an unanswered keepalive was sent.
    last_rx_ms: i64,
    keepalive_sent_ms: Option<i64>,
}

/// One hardware queue's connection.
#[pin_data]
pub(crate) struct RdmaQueue {
    disk: Arc<DiskDev>,
    qid: u16,
    #[pin]
    inner: SpinLock<Inner>,
}

/// Reports the connection's CM events after it is established: each means it is failing.
pub(crate) struct QueueWatch {
    disk: Arc<DiskDev>,
    qid: u16,
}

impl Watcher for QueueWatch {
    fn event(&self, ev: &CmEvent) {
        if !matches!(ev, CmEvent::TimewaitExit) {
            pr_warn!(
                "{}: queue {}: CM event {}\n",
                self.disk.name(),
                self.qid,
                ev.name()
            );
            self.disk.queue_failed(Transport::Rdma);
        }
    }
}

struct SendCtx {
    queue: Arc<RdmaQueue>,
    tag: u32,
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

impl RdmaQueue {
    /// Connects queue `qid` of `disk`; returns it with the target's Hello reply.
    pub(crate) fn connect(disk: &Arc<DiskDev>, qid: u16) -> Result<(Arc<Self>, HelloReply)> {
        let q = Arc::pin_init(
            pin_init!(Self {
                disk: disk.clone(),
                qid,
                inner <- new_spinlock!(Inner {
                    conn: None,
                    send_credits: CreditSender::new(0),
                    recv_credits: CreditReceiver::new(),
                    slots: KVec::new(),
                    failed: false,
                    last_rx_ms: now_ms(),
                    keepalive_sent_ms: None,
                }, "rdmadisk::queue"),
            }),
            GFP_KERNEL,
        )?;
        let depth = u32::from(QUEUE_DEPTH);
        let spec = ConnSpec {
            who: disk.name(),
            peer: disk.peer,
            export: disk.export,
            queue_id: qid,
            queue_count: disk.nr_queues,
            caps: QpCaps {
                // REG_MR, SEND and a LOCAL_INV per tag.
                send_wr: 3 * depth + 1,
                recv_wr: depth + 1,
                mrs: depth,
                mr_pages: MR_PAGES,
            },
            cq_entries: 4 * depth + 2,
            poll: PollCtx::Workqueue,
            budget_ms: CONNECT_BUDGET_MS,
        };
        let watch = QueueWatch {
            disk: disk.clone(),
            qid,
        };
        let res = rdma_conn::connect(&spec, ConnEvents::new(watch)?, |cm, pd| {
            let mut slots = KVec::with_capacity(QUEUE_DEPTH.into(), GFP_KERNEL)?;
            // One more Send buffer than tags, for keepalives.
            for tag in 0..=KEEPALIVE_TAG {
                let ctx = SendCtx {
                    queue: q.clone(),
                    tag,
                };
                let send = Msg::new(pd, REQUEST_LEN, MsgDir::Send, ctx)?;
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
                let msg = Msg::new(pd, RESPONSE_LEN, MsgDir::Recv, RecvCtx { queue: q.clone() })?;
                cm.post_recv(msg)?;
                g = q.inner.lock();
                g.recv_credits.on_recv_posted();
            }
            Ok(g.recv_credits.take_grant())
        });
        match res {
            Ok(conn) => {
                let reply = conn.reply;
                let mut g = q.inner.lock();
                g.send_credits = CreditSender::new(reply.initial_credits);
                g.conn = Some(conn);
                drop(g);
                Ok((q, reply))
            }
            Err(e) => {
                // The posted receives were flushed when the id was dropped; the Send buffers
                // refer to the queue and must go for it to be freed.
                q.shutdown(|rq| rq.end(BlkStatus::IoErr));
                Err(e)
            }
        }
    }

    fn stats(&self) -> &Stats {
        &self.disk.stats
    }

    /// Sends `rq`. `Err` gives it back with `Resource` when it must wait (no credit, the
    /// connection is resetting), or with the error blk-mq should end it with.
    pub(crate) fn submit(
        self: &Arc<Self>,
        rq: DiskRq,
    ) -> core::result::Result<(), (DiskRq, BlkStatus)> {
        let Some(mut req) = io::request(&rq) else {
            return Err((rq, BlkStatus::NotSupp));
        };
        let op = req.opcode;
        let access = match op {
            Opcode::Read => Some(RemoteAccess::Write),
            Opcode::Write => Some(RemoteAccess::Read),
            _ => None,
        };
        let dev: DeviceRef = {
            let g = self.inner.lock();
            match &g.conn {
                Some(c) if !g.failed && self.disk.credit_ok(&g.send_credits) => c.dev.clone(),
                Some(_) if !g.failed => {
                    Stats::inc(&self.stats().credit_waits);
                    return Err((rq, BlkStatus::Resource));
                }
                _ => return Err((rq, BlkStatus::Resource)),
            }
        };
        let data = match access {
            Some(a) if rq.bytes() > 0 => match DmaRq::map(rq, &dev, a) {
                Ok(d) => Data::Mapped(d),
                Err((rq, e)) => {
                    pr_warn!("{}: mapping a request failed: {e:?}\n", self.disk.name());
                    return Err((rq, BlkStatus::Resource));
                }
            },
            _ => Data::None(rq),
        };
        let tag = req.tag;

        let mut guard = self.inner.lock();
        let g = &mut *guard;
        let ready = !g.failed && g.conn.is_some() && self.disk.credit_ok(&g.send_credits);
        let msg = match g.slots.get_mut(tag as usize) {
            Some(slot) if ready && slot.io.is_none() => slot.send.take(),
            _ => None,
        };
        let (Some(msg), Some(conn)) = (msg, g.conn.as_ref()) else {
            return Err((data.into_rq(), BlkStatus::Resource));
        };
        g.send_credits.try_consume();
        req.credits = g.recv_credits.take_grant();
        let posted = match (&data, access) {
            (Data::Mapped(d), Some(a)) => conn
                .cm
                .post_reg_send(tag, d, a, msg, |buf, mr| {
                    req.buf = RemoteBuf {
                        addr: mr.addr,
                        rkey: mr.rkey,
                        len: mr.len,
                    };
                    if let Some(out) = buf.first_chunk_mut() {
                        req.encode(out);
                    }
                })
                .map(|mr| Some(mr.rkey)),
            _ => {
                let mut msg = msg;
                if let Some(out) = msg.data_mut().first_chunk_mut() {
                    req.encode(out);
                }
                conn.cm.post_send(msg).map(|()| None)
            }
        };
        let slot = &mut g.slots[tag as usize];
        match posted {
            Ok(rkey) => {
                slot.io = Some(Inflight {
                    data,
                    op,
                    rkey,
                    invalidated: false,
                    send_done: false,
                    local_inv: false,
                    resp: None,
                });
                let hw = u64::from(g.send_credits.high_water());
                self.stats()
                    .max_outstanding
                    .fetch_max(hw, Ordering::Relaxed);
                Ok(())
            }
            Err((e, msg)) => {
                slot.send = Some(msg);
                g.recv_credits.return_grant(req.credits);
                pr_err!(
                    "{}: queue {}: posting a request failed: {e:?}\n",
                    self.disk.name(),
                    self.qid
                );
                self.fail_locked(g, "a post failed");
                drop(guard);
                Err((data.into_rq(), BlkStatus::Resource))
            }
        }
    }

    /// Marks the connection failed (once) and asks the disk to reset it.
    fn fail(&self, why: &str) {
        self.fail_locked(&mut self.inner.lock(), why);
    }

    /// A request on this queue timed out.
    pub(crate) fn fail_timeout(&self) {
        self.fail("I/O timeout");
    }

    fn fail_locked(&self, g: &mut Inner, why: &str) {
        self.disk
            .connection_failed(&mut g.failed, self.qid, Transport::Rdma, why);
    }

    fn on_send(&self, msg: KBox<Msg<SendCtx>>, wc: &Wc) {
        let tag = msg.owner().tag;
        if !wc.is_ok() {
            // A flush outside our own teardown (which marks the queue failed first, making
            // this quiet) means the QP went to the error state on its own, e.g. after a
            // responder error: the requests on it will never complete, so reset now rather
            // than wait for their timeouts.
            if !wc.is_flush() {
                pr_err!(
                    "{}: queue {}: Send of tag {tag} failed: {} (status {}, vendor {:#x})\n",
                    self.disk.name(),
                    self.qid,
                    wc.status_str(),
                    wc.status,
                    wc.vendor_err
                );
            }
            self.fail("a Send failed or was flushed");
            return;
        }
        let mut guard = self.inner.lock();
        let g = &mut *guard;
        let Some(slot) = g.slots.get_mut(tag as usize) else {
            return;
        };
        slot.send = Some(msg);
        let Some(io) = slot.io.as_mut() else {
            return;
        };
        if io.local_inv {
            io.local_inv = false;
            if let (Some(conn), Some(rkey)) = (&g.conn, io.rkey) {
                io.invalidated = conn.cm.mr_invalidated(tag, rkey);
            }
        }
        io.send_done = true;
        if io.resp.is_none() {
            return;
        }
        let done = self.advance(g, tag);
        drop(guard);
        if let Some(done) = done {
            done.complete(&self.disk);
        }
    }

    fn on_recv(&self, msg: KBox<Msg<RecvCtx>>, wc: &Wc) {
        if !wc.is_ok() {
            if !wc.is_flush() {
                pr_err!(
                    "{}: queue {}: a Receive failed: {} (status {}, vendor {:#x})\n",
                    self.disk.name(),
                    self.qid,
                    wc.status_str(),
                    wc.status,
                    wc.vendor_err
                );
            }
            // As for Sends: a flush we did not cause means the QP is in the error state.
            self.fail("a Receive failed or was flushed");
            return;
        }
        let n = (wc.byte_len as usize).min(RESPONSE_LEN);
        let resp = match Response::decode(&msg.data()[..n]) {
            Ok(r) => r,
            Err(e) => {
                pr_err!("{}: undecodable response: {e:?}\n", self.disk.name());
                return self.fail("undecodable response");
            }
        };
        Stats::inc(&self.stats().responses);
        let mut guard = self.inner.lock();
        let g = &mut *guard;
        if g.recv_credits.on_message_received().is_err() {
            return self.fail_locked(g, "the target sent without a credit");
        }
        g.send_credits.grant(resp.credits);
        let Some(conn) = g.conn.as_ref() else {
            return;
        };
        if conn.cm.post_recv(msg).is_err() {
            return self.fail_locked(g, "re-posting a receive failed");
        }
        g.recv_credits.on_recv_posted();
        g.last_rx_ms = now_ms();
        let tag = resp.tag;
        if tag == KEEPALIVE_TAG {
            if g.keepalive_sent_ms.take().is_none() || wc.invalidated_rkey.is_some() {
                return self.fail_locked(g, "unexpected keepalive response");
            }
            g.send_credits.complete();
            return;
        }
        let Some(io) = g.slots.get_mut(tag as usize).and_then(|s| s.io.as_mut()) else {
            return self.fail_locked(g, "response for a tag not in flight");
        };
        if io.resp.is_some() {
            return self.fail_locked(g, "second response for a tag");
        }
        match (io.rkey, wc.invalidated_rkey) {
            (Some(k), Some(inv)) if k == inv && conn.cm.mr_invalidated(tag, k) => {
                io.invalidated = true;
                Stats::inc(&self.stats().remote_invalidations);
            }
            (_, Some(inv)) => {
                Stats::inc(&self.stats().rkey_mismatches);
                pr_err!(
                    "{}: queue {}: tag {tag}: the target invalidated rkey {inv:#x}, not {:#x?}\n",
                    self.disk.name(),
                    self.qid,
                    io.rkey
                );
                return self.fail_locked(g, "wrong rkey invalidated");
            }
            (_, None) => {}
        }
        io.resp = Some(resp);
        if !io.send_done {
            return;
        }
        let done = self.advance(g, tag);
        drop(guard);
        if let Some(done) = done {
            done.complete(&self.disk);
        }
    }

    /// Moves a tag whose Send and response are both in: a LOCAL_INV if its key is still
    /// valid, else it is done and returned, to be completed after the lock is dropped.
    fn advance(&self, g: &mut Inner, tag: u32) -> Option<Inflight> {
        let slot = g.slots.get_mut(tag as usize)?;
        let io = slot.io.as_mut()?;
        if io.rkey.is_some() && !io.invalidated {
            let conn = g.conn.as_ref()?;
            let msg = slot.send.take()?;
            io.local_inv = true;
            io.send_done = false;
            match conn.cm.post_local_inv(tag, msg) {
                Ok(()) => Stats::inc(&self.stats().local_invalidations),
                Err((_, msg)) => {
                    slot.send = Some(msg);
                    self.fail_locked(g, "posting a LOCAL_INV failed");
                }
            }
            return None;
        }
        let io = slot.io.take()?;
        g.send_credits.complete();
        Some(io)
    }

    /// Tears the connection down (waiting for the QP to drain) and hands every request that
    /// was on it to `dispose`. May sleep.
    pub(crate) fn shutdown(&self, mut dispose: impl FnMut(DiskRq)) {
        let conn = {
            let mut g = self.inner.lock();
            g.failed = true;
            g.conn.take()
        };
        if let Some(conn) = conn {
            conn.cm.disconnect();
            drop(conn);
        }
        loop {
            let io = self.inner.lock().slots.iter_mut().find_map(|s| s.io.take());
            match io {
                Some(io) => dispose(io.data.into_rq()),
                None => break,
            }
        }
        // The Send buffers refer back to the queue.
        let slots = mem::take(&mut self.inner.lock().slots);
        drop(slots);
    }

    /// Sends a NOP if nothing arrived for `interval_ms`; fails the connection if the last one
    /// got no answer, and nothing else arrived, for `interval_ms`. A dead path is then found
    /// while the disk is idle, not only when I/O times out.
    pub(crate) fn keepalive(&self, interval_ms: u32) {
        let now = now_ms();
        let interval = i64::from(interval_ms);
        let mut guard = self.inner.lock();
        let g = &mut *guard;
        if g.failed {
            return;
        }
        if let Some(sent) = g.keepalive_sent_ms {
            if now - sent.max(g.last_rx_ms) > interval {
                self.fail_locked(g, "keepalive unanswered");
            }
            return;
        }
        if now - g.last_rx_ms < interval || g.send_credits.available() == 0 {
            return;
        }
        let Some(conn) = g.conn.as_ref() else {
            return;
        };
        let Some(mut msg) = g
            .slots
            .get_mut(KEEPALIVE_TAG as usize)
            .and_then(|s| s.send.take())
        else {
            return;
        };
        let req = Request {
            opcode: Opcode::Nop,
            flags: 0,
            credits: g.recv_credits.take_grant(),
            tag: KEEPALIVE_TAG,
            sector: 0,
            length: 0,
            data_crc: 0,
            buf: RemoteBuf::default(),
        };
        if let Some(out) = msg.data_mut().first_chunk_mut() {
            req.encode(out);
        }
        match conn.cm.post_send(msg) {
            Ok(()) => {
                g.send_credits.try_consume();
                g.keepalive_sent_ms = Some(now);
                Stats::inc(&self.stats().keepalives);
            }
            Err((_, msg)) => {
                g.recv_credits.return_grant(req.credits);
                if let Some(slot) = g.slots.get_mut(KEEPALIVE_TAG as usize) {
                    slot.send = Some(msg);
                }
                self.fail_locked(g, "posting a keepalive failed");
            }
        }
    }

    /// Whether the connection is on the RDMA device named `dev`.
    pub(crate) fn on_device(&self, dev: &CStr) -> bool {
        let g = self.inner.lock();
        g.conn
            .as_ref()
            .is_some_and(|c| c.dev.name().as_bytes() == dev.as_bytes())
    }

    /// True if the connection failed or is gone.
    pub(crate) fn is_failed(&self) -> bool {
        self.inner.lock().failed
    }
}

impl Inflight {
    /// Once its exchange is over: unmaps, and ends or retries the request by its response.
    fn complete(self, disk: &DiskDev) {
        let rq = self.data.into_rq();
        match self.resp {
            Some(resp) => io::finish(disk, rq, self.op, &resp, Via::Rdma),
            None => rq.requeue(true),
        }
    }
}
