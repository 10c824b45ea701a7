// SPDX-License-Identifier: GPL-2.0

//! One hardware queue's TCP connection: the same messages as on RDMA, in frames
//! (DESIGN.md, "The TCP path"). A request frame carries the write data after it; a response
//! frame carries the read data. The CRC covers the data exactly as on RDMA and is checked,
//! and retried, by the same code ([`io::finish`]); credits are counted the same way.
//!
//! `queue_rq` must not sleep, so it only parks the request in its tag's slot and queues the
//! send work, which writes frames with blocking sends. The receive work runs when the socket
//! says data is there and reads without blocking, resuming a frame where it stopped. The two
//! run independently, so a send blocked on a full socket never keeps responses unread (the
//! target answers one request at a time and would wait for us).

use core::mem;
use kernel::{
    bindings as kb, new_mutex, new_spinlock, new_work,
    prelude::*,
    sync::{Arc, Mutex, SpinLock},
    workqueue::{self, impl_has_work, Work, WorkItem},
};

use crate::disk::{DiskDev, DiskRq};
use crate::io::{self, Via};
use crate::kapi::blk_mq::BlkStatus;
use crate::kapi::socket::{SockEvents, TcpSocket};
use crate::kapi::work;
use crate::proto::credits::CreditSender;
use crate::proto::policy::Transport;
use crate::proto::wire::{
    FrameHeader, FrameKind, Hello, HelloReply, HelloStatus, Opcode, Request, Response, Status,
    FRAME_HEADER_LEN, HELLO_LEN, HELLO_REPLY_LEN, REQUEST_LEN, RESPONSE_LEN,
};
use crate::rdma_conn::errno;
use crate::rdma_queue::QUEUE_DEPTH;
use crate::stats::Stats;

/// Set-up budget of one connection: TCP connect, then the Hello exchange.
const CONNECT_BUDGET_MS: u32 = 10_000;

type Socket = TcpSocket<TcpQueue>;

/// A request and the message that carries it.
struct Io {
    rq: DiskRq,
    req: Request,
}

/// Where a tag's request is.
#[derive(Default)]
enum Slot {
    #[default]
    Free,
    /// Waiting for the send work.
    Queued(Io),
    /// The send work is writing it.
    Sending,
    /// Sent; waiting for its response.
    Sent(Io),
    /// Its response is being read.
    Receiving,
}

/// Tags waiting for the send work, oldest first.
struct Ring {
    tags: [u32; QUEUE_DEPTH as usize],
    head: usize,
    len: usize,
}

impl Ring {
    fn push(&mut self, tag: u32) -> bool {
        if self.len == self.tags.len() {
            return false;
        }
        self.tags[(self.head + self.len) % self.tags.len()] = tag;
        self.len += 1;
        true
    }

    fn pop(&mut self) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let t = self.tags[self.head];
        self.head = (self.head + 1) % self.tags.len();
        self.len -= 1;
        Some(t)
    }
}

struct Inner {
    /// `None` once torn down.
    sock: Option<Arc<Socket>>,
    credits: CreditSender,
    slots: KVec<Slot>,
    pending: Ring,
    /// Set on the first error: no new requests; the disk is resetting the connection.
    failed: bool,
}

/// Where the receive work is within the byte stream.
enum Rx {
    /// Reading a frame header and response.
    Head {
        buf: [u8; FRAME_HEADER_LEN + RESPONSE_LEN],
        got: usize,
    },
    /// Reading the read data of `io` after `resp`.
    Data { io: Io, resp: Response, got: usize },
}

impl Rx {
    fn head() -> Rx {
        Rx::Head {
            buf: [0; FRAME_HEADER_LEN + RESPONSE_LEN],
            got: 0,
        }
    }
}

/// One hardware queue's TCP connection.
#[pin_data]
pub(crate) struct TcpQueue {
    disk: Arc<DiskDev>,
    qid: u16,
    #[pin]
    inner: SpinLock<Inner>,
    /// The receive work's position; only it (and `shutdown`, after flushing it) looks.
    #[pin]
    rx: Mutex<Rx>,
    #[pin]
    tx_work: Work<TcpQueue, 1>,
    #[pin]
    rx_work: Work<TcpQueue, 2>,
}

impl_has_work! {
    impl HasWork<Self, 1> for TcpQueue { self.tx_work }
    impl HasWork<Self, 2> for TcpQueue { self.rx_work }
}

impl WorkItem<1> for TcpQueue {
    type Pointer = Arc<TcpQueue>;

    fn run(this: Arc<TcpQueue>) {
        this.send_pending();
    }
}

impl WorkItem<2> for TcpQueue {
    type Pointer = Arc<TcpQueue>;

    fn run(this: Arc<TcpQueue>) {
        this.receive();
    }
}

impl SockEvents for TcpQueue {
    fn data_ready(this: &Arc<Self>) {
        kick_rx(this);
    }

    fn state_change(this: &Arc<Self>) {
        // A closed or reset connection reads as an end of stream or an error.
        kick_rx(this);
    }
}

/// Queues the receive work. Any context.
fn kick_rx(q: &Arc<TcpQueue>) {
    let _ = workqueue::system_unbound().enqueue::<_, 2>(q.clone());
}

/// Frame header + message, as one buffer.
fn frame<const N: usize>(kind: FrameKind, msg: &[u8], data_len: u32) -> [u8; N] {
    let mut out = [0; N];
    let hdr = FrameHeader {
        kind,
        flags: 0,
        data_len,
    };
    out[..FRAME_HEADER_LEN].copy_from_slice(&hdr.to_bytes());
    out[FRAME_HEADER_LEN..].copy_from_slice(msg);
    out
}

impl TcpQueue {
    /// Connects queue `qid` of `disk` to the target's TCP port; returns it with the target's
    /// Hello reply. May sleep.
    pub(crate) fn connect(disk: &Arc<DiskDev>, qid: u16) -> Result<(Arc<Self>, HelloReply)> {
        let mut slots = KVec::with_capacity(QUEUE_DEPTH.into(), GFP_KERNEL)?;
        for _ in 0..QUEUE_DEPTH {
            slots.push(Slot::Free, GFP_KERNEL)?;
        }
        let q = Arc::pin_init(
            pin_init!(Self {
                disk: disk.clone(),
                qid,
                inner <- new_spinlock!(Inner {
                    sock: None,
                    credits: CreditSender::new(0),
                    slots,
                    pending: Ring { tags: [0; QUEUE_DEPTH as usize], head: 0, len: 0 },
                    failed: false,
                }, "rdmadisk::tcp_queue"),
                rx <- new_mutex!(Rx::head(), "rdmadisk::tcp_queue::rx"),
                tx_work <- new_work!("rdmadisk::tcp_queue::tx"),
                rx_work <- new_work!("rdmadisk::tcp_queue::rx"),
            }),
            GFP_KERNEL,
        )?;
        let peer = disk.tcp_peer();
        let mut sock =
            Socket::connect(peer.addr, peer.port, CONNECT_BUDGET_MS).inspect_err(|e| {
                pr_err!(
                    "{}: queue {qid}: TCP connect to {peer} failed: {e:?}\n",
                    disk.name()
                )
            })?;
        let reply = q.hello(&sock)?;
        sock.set_timeout_ms(disk.io_timeout_ms());
        let ka = disk.keepalive_ms();
        if ka > 0 {
            sock.set_keepalive(ka.div_ceil(1000));
        }
        sock.hook(q.clone())?;
        let sock = Arc::new(sock, GFP_KERNEL)?;
        {
            let mut g = q.inner.lock();
            g.credits = CreditSender::new(reply.initial_credits);
            g.sock = Some(sock);
        }
        Stats::inc(&disk.stats.tcp_connects);
        // Anything that arrived before the hook was in place.
        kick_rx(&q);
        Ok((q, reply))
    }

    fn hello(&self, sock: &Socket) -> Result<HelloReply> {
        let d = &self.disk;
        let hello = Hello {
            flags: 0,
            queue_id: self.qid,
            queue_count: d.nr_queues,
            recv_credits: QUEUE_DEPTH,
            session_id: 0,
            export: d.export,
        };
        let out: [u8; FRAME_HEADER_LEN + HELLO_LEN] = frame(FrameKind::Hello, &hello.to_bytes(), 0);
        sock.send(&out, false)?;
        let mut buf = [0u8; FRAME_HEADER_LEN + HELLO_REPLY_LEN];
        let n = sock.recv(&mut buf, true)?;
        let parsed = match (n, FrameHeader::decode(&buf)) {
            (n, Ok(h)) if n == buf.len() && h.kind == FrameKind::HelloReply && h.data_len == 0 => {
                HelloReply::decode(&buf[FRAME_HEADER_LEN..]).ok()
            }
            _ => None,
        };
        let Some(reply) = parsed else {
            pr_err!(
                "{}: queue {}: no valid Hello reply over TCP from {}\n",
                d.name(),
                self.qid,
                d.tcp_peer()
            );
            return Err(errno(kb::EPROTO));
        };
        if reply.status != HelloStatus::Ok {
            pr_err!(
                "{}: queue {}: REJECTED over TCP by the target: {:?}\n",
                d.name(),
                self.qid,
                reply.status
            );
            return Err(errno(kb::ECONNREFUSED));
        }
        Ok(reply)
    }

    /// Queues `rq` for sending. `Err` gives it back with `Resource` when it must wait (no
    /// credit, the connection is resetting), or with the error blk-mq should end it with.
    pub(crate) fn submit(
        self: &Arc<Self>,
        rq: DiskRq,
    ) -> core::result::Result<(), (DiskRq, BlkStatus)> {
        let Some(mut req) = io::request(&rq) else {
            return Err((rq, BlkStatus::NotSupp));
        };
        // The data travels inline, with no remote buffer; `buf.len` still states its length,
        // so that the target checks requests on both transports by the same rules.
        if req.opcode.has_data() {
            req.buf.len = req.length;
        }
        let tag = req.tag as usize;
        {
            let mut guard = self.inner.lock();
            let g = &mut *guard;
            if g.failed || g.sock.is_none() {
                return Err((rq, BlkStatus::Resource));
            }
            if !self.disk.credit_ok(&g.credits) {
                Stats::inc(&self.disk.stats.credit_waits);
                return Err((rq, BlkStatus::Resource));
            }
            match g.slots.get_mut(tag) {
                Some(slot @ Slot::Free) if g.pending.push(req.tag) => {
                    *slot = Slot::Queued(Io { rq, req });
                }
                _ => return Err((rq, BlkStatus::Resource)),
            }
            g.credits.try_consume();
            let hw = u64::from(g.credits.high_water());
            self.disk
                .stats
                .max_outstanding
                .fetch_max(hw, core::sync::atomic::Ordering::Relaxed);
            // Queued under the lock, so that `shutdown` (which marks the queue failed under
            // it, then flushes the work) cannot miss it.
            let _ = workqueue::system_unbound().enqueue::<_, 1>(self.clone());
        }
        Ok(())
    }

    /// The send work: writes queued requests until none is left or the connection fails.
    fn send_pending(&self) {
        loop {
            let (sock, tag, io) = {
                let mut guard = self.inner.lock();
                let g = &mut *guard;
                let Some(sock) = g.sock.clone().filter(|_| !g.failed) else {
                    return;
                };
                let Some(tag) = g.pending.pop() else {
                    return;
                };
                let Some(slot) = g.slots.get_mut(tag as usize) else {
                    return;
                };
                match mem::replace(slot, Slot::Sending) {
                    Slot::Queued(io) => (sock, tag, io),
                    other => {
                        *slot = other;
                        continue;
                    }
                }
            };
            let res = self.send_one(&sock, &io);
            let mut g = self.inner.lock();
            if let Some(slot) = g.slots.get_mut(tag as usize) {
                *slot = Slot::Sent(io);
            }
            if let Err(e) = res {
                if !g.failed {
                    pr_err!(
                        "{}: queue {}: sending tag {tag} failed: {e:?}\n",
                        self.disk.name(),
                        self.qid
                    );
                }
                self.fail_locked(&mut g, "a send failed");
                return;
            }
        }
    }

    fn send_one(&self, sock: &Socket, io: &Io) -> Result {
        let data_len = if io.req.opcode == Opcode::Write {
            io.req.length
        } else {
            0
        };
        let head: [u8; FRAME_HEADER_LEN + REQUEST_LEN] =
            frame(FrameKind::Request, &io.req.to_bytes(), data_len);
        sock.send(&head, data_len > 0)?;
        if data_len == 0 {
            return Ok(());
        }
        let mut left = data_len as usize;
        let mut res = Ok(());
        io.rq.for_each_segment(|seg| {
            if res.is_ok() && left > 0 {
                let seg = &seg[..seg.len().min(left)];
                left -= seg.len();
                res = sock.send(seg, left > 0);
            }
        });
        res
    }

    /// The receive work: reads whatever the socket has, completing requests as their
    /// responses (and read data) arrive.
    fn receive(&self) {
        let sock = {
            let g = self.inner.lock();
            match &g.sock {
                Some(s) if !g.failed => s.clone(),
                _ => return,
            }
        };
        let mut rx = self.rx.lock();
        loop {
            let read = match &mut *rx {
                Rx::Head { buf, got } => match sock.recv(&mut buf[*got..], false) {
                    Ok(0) => Err("the target closed the connection"),
                    Ok(n) => {
                        *got += n;
                        if *got < buf.len() {
                            continue;
                        }
                        Ok(())
                    }
                    Err(e) if e == EAGAIN => return,
                    Err(_) => Err("receiving failed"),
                },
                Rx::Data { io, got, .. } => match recv_data(&sock, io, got) {
                    Ok(true) => Ok(()),
                    Ok(false) => return,
                    Err(why) => Err(why),
                },
            };
            if let Err(why) = read {
                // A request being read stays in `rx` for the reset to requeue.
                drop(rx);
                return self.fail(why);
            }
            match mem::replace(&mut *rx, Rx::head()) {
                Rx::Head { buf, .. } => match self.on_head(&buf) {
                    Ok(None) => {}
                    Ok(Some(data)) => *rx = data,
                    Err(why) => {
                        drop(rx);
                        return self.fail(why);
                    }
                },
                Rx::Data { io, resp, .. } => self.complete(io, &resp),
            }
        }
    }

    /// A whole frame header and response are in `buf`: checks them, and either completes
    /// the request or moves on to its read data.
    fn on_head(
        &self,
        buf: &[u8; FRAME_HEADER_LEN + RESPONSE_LEN],
    ) -> core::result::Result<Option<Rx>, &'static str> {
        let hdr = FrameHeader::decode(buf).map_err(|_| "undecodable frame header")?;
        if hdr.kind != FrameKind::Response || hdr.flags != 0 {
            return Err("unexpected frame");
        }
        let resp =
            Response::decode(&buf[FRAME_HEADER_LEN..]).map_err(|_| "undecodable response")?;
        Stats::inc(&self.disk.stats.responses);
        let mut g = self.inner.lock();
        g.credits.grant(resp.credits);
        let io = match g.slots.get_mut(resp.tag as usize) {
            Some(slot @ Slot::Sent(_)) => match mem::replace(slot, Slot::Receiving) {
                Slot::Sent(io) => io,
                _ => return Err("response for a tag not in flight"),
            },
            _ => return Err("response for a tag not in flight"),
        };
        // Read data follows exactly when the read succeeded, and is exactly its length.
        let expect = if io.req.opcode == Opcode::Read && resp.status == Status::Ok {
            io.req.length
        } else {
            0
        };
        if hdr.data_len != expect {
            pr_err!(
                "{}: queue {}: tag {}: response with {} data bytes, expected {expect}\n",
                self.disk.name(),
                self.qid,
                resp.tag,
                hdr.data_len
            );
            // Back in its slot, to be requeued by the reset.
            if let Some(slot) = g.slots.get_mut(resp.tag as usize) {
                *slot = Slot::Sent(io);
            }
            return Err("response with the wrong amount of data");
        }
        drop(g);
        if expect == 0 {
            self.complete(io, &resp);
            Ok(None)
        } else {
            Ok(Some(Rx::Data { io, resp, got: 0 }))
        }
    }

    /// Frees the tag's slot and credit, then ends or retries the request.
    fn complete(&self, io: Io, resp: &Response) {
        {
            let mut g = self.inner.lock();
            if let Some(slot) = g.slots.get_mut(io.req.tag as usize) {
                *slot = Slot::Free;
            }
            g.credits.complete();
        }
        io::finish(&self.disk, io.rq, io.req.opcode, resp, Via::Tcp);
    }

    fn fail(&self, why: &str) {
        self.fail_locked(&mut self.inner.lock(), why);
    }

    /// A request on this queue timed out.
    pub(crate) fn fail_timeout(&self) {
        self.fail("I/O timeout");
    }

    fn fail_locked(&self, g: &mut Inner, why: &str) {
        self.disk
            .connection_failed(&mut g.failed, self.qid, Transport::Tcp, why);
    }

    /// True if the connection failed or is gone.
    pub(crate) fn is_failed(&self) -> bool {
        self.inner.lock().failed
    }

    /// Closes the connection and hands every request that was on it to `dispose`; none of
    /// them can complete afterwards. May sleep.
    pub(crate) fn shutdown(&self, mut dispose: impl FnMut(DiskRq)) {
        let sock = {
            let mut g = self.inner.lock();
            g.failed = true;
            g.sock.take()
        };
        if let Some(s) = &sock {
            // Wakes a send blocked on a full socket.
            s.shutdown();
        }
        work::flush(&self.tx_work);
        work::flush(&self.rx_work);
        // The works are done with their references: this releases the socket and its hook.
        drop(sock);
        // A callback may have queued the receive work once more before the unhook.
        work::flush(&self.rx_work);
        if let Rx::Data { io, .. } = mem::replace(&mut *self.rx.lock(), Rx::head()) {
            dispose(io.rq);
        }
        loop {
            let io = self
                .inner
                .lock()
                .slots
                .iter_mut()
                .find_map(|s| match mem::take(s) {
                    Slot::Queued(io) | Slot::Sent(io) => Some(io),
                    _ => None,
                });
            match io {
                Some(io) => dispose(io.rq),
                None => break,
            }
        }
    }
}

/// Reads more of `io`'s read data, from byte `got` on, into its pages. `Ok(true)` once all of
/// it is in, `Ok(false)` when the socket has nothing more for now.
fn recv_data(
    sock: &Socket,
    io: &mut Io,
    got: &mut usize,
) -> core::result::Result<bool, &'static str> {
    let len = io.req.length as usize;
    let mut off = 0;
    let mut res = Ok(());
    io.rq.for_each_segment_mut(|seg| {
        let end = (off + seg.len()).min(len);
        while res.is_ok() && *got >= off && *got < end {
            res = match sock.recv(&mut seg[*got - off..end - off], false) {
                Ok(0) => Err(EPIPE),
                Ok(n) => {
                    *got += n;
                    Ok(())
                }
                Err(e) => Err(e),
            };
        }
        off += seg.len();
    });
    match res {
        Ok(()) => Ok(*got >= len),
        Err(e) if e == EAGAIN => Ok(false),
        Err(e) if e == EPIPE => Err("the target closed the connection"),
        Err(_) => Err("receiving read data failed"),
    }
}
