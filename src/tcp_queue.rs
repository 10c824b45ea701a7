// SPDX-License-Identifier: GPL-2.0

//! One hardware queue's TCP connection: the same messages as on RDMA, in frames
//! (docs/design.md, "The TCP path"). A request frame carries the write data after it; a response
//! frame carries the read data. The CRC covers the data exactly as on RDMA and is checked,
//! and retried, by the same code ([`io::finish`]); credits are counted the same way.
//!
//! `queue_rq` parks the request in its tag's slot. When nothing is queued ahead of it, nobody
//! else is sending and the socket's send buffer has room for the whole frame, it writes the
//! frame itself without waiting (`MSG_DONTWAIT`), as nvme-tcp does (the tag set is
//! `BLK_MQ_F_BLOCKING`): that saves waking a worker for every request. Otherwise, and for
//! whatever of the frame the buffer would not take, the send work writes it, with blocking
//! sends. One sender at a time owns the socket's sending side (`Inner::sending`), so frames
//! never interleave. The receive work runs when the socket says data is there and reads
//! without blocking, resuming a frame where it stopped. Sending and receiving run
//! independently, so a send blocked on a full socket never keeps responses unread (the target
//! answers one request at a time and would wait for us).
//!
//! Responses are matched by request id as on RDMA; on TCP any mismatch resets the connection
//! (a stray response cannot be skipped without trusting its length), and so does any other
//! protocol violation. Both works run on the disk's reclaim-safe workqueue.

use core::{
    mem,
    sync::atomic::{AtomicBool, AtomicU32, Ordering},
};
use kernel::{
    bindings as kb, new_condvar, new_mutex, new_spinlock, new_work,
    prelude::*,
    sync::{Arc, CondVar, Mutex, SpinLock},
    workqueue::{impl_has_work, Work, WorkItem},
};

use crate::authn;
use crate::faults::Fault;
use crate::host::now_ms;
use crate::host::{ConnId, DiskInfo, DiskRq, QueueHost, QueueName};
use crate::io;
use crate::kapi::blk_mq::BlkStatus;
use crate::kapi::delay::sleep_ms;
use crate::kapi::errno;
use crate::kapi::socket::{SockEvents, TcpSocket};
use crate::kapi::work;
use crate::proto::credits::CreditSender;
use crate::proto::policy::Transport;
use crate::proto::tags::Tags;
use crate::proto::wire::{
    hello_caps, AuthReply, FrameHeader, FrameKind, Hello, HelloReply, HelloStatus, Opcode, ReqId,
    Request, Response, Status, AUTH_REPLY_LEN, AUTH_REQUEST_LEN, FRAME_HEADER_LEN, HELLO_LEN,
    HELLO_REPLY_LEN, HELLO_REPLY_MAX_LEN, IDENTITY_LEN, REQUEST_LEN, RESPONSE_LEN,
};
use crate::rdma_queue::QUEUE_DEPTH;
use crate::stats::Stats;
use crate::telemetry::{Op, Via};

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
    /// Waiting for a sender.
    Queued(Io),
    /// A sender is writing it.
    Sending,
    /// Sent; waiting for its response.
    Sent(Io),
    /// Its response is being read.
    Receiving,
}

/// Tags waiting for a sender, oldest first.
struct Ring {
    tags: [u16; QUEUE_DEPTH as usize],
    head: usize,
    len: usize,
}

impl Ring {
    fn push(&mut self, tag: u16) -> bool {
        if self.len == self.tags.len() {
            return false;
        }
        self.tags[(self.head + self.len) % self.tags.len()] = tag;
        self.len += 1;
        true
    }

    fn pop(&mut self) -> Option<u16> {
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
    tags: Tags<{ QUEUE_DEPTH as usize }>,
    slots: KVec<Slot>,
    /// When the last response arrived, or an idle connection was given a request (ms, ktime).
    last_rx_ms: i64,
    /// Since when requests have waited with no credit granted and none in flight (a target
    /// that stopped granting: nothing would ever complete to bring one back).
    starved_ms: Option<i64>,
    pending: Ring,
    /// Someone (the send work, or a `queue_rq` sending inline) owns the sending side. Before
    /// it lets go it sends until `pending` is empty (the work) or queues the send work if
    /// anything is left (an inline sender), so a request queued meanwhile needs no other
    /// kick.
    sending: bool,
    /// The receive work stopped at a response whose request is still being sent; the sender
    /// wakes it once it marks the request sent. Set and cleared under this lock, with the
    /// slot's state, so the wake-up cannot be missed.
    rx_parked: bool,
    /// A frame an inline sender began and the send buffer had no room for the rest of: its
    /// slot (back in `Queued`) and how many bytes went. Sent on before anything else.
    partial: Option<(u16, usize)>,
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
    host: Arc<dyn QueueHost>,
    id: ConnId,
    /// Set on the first error: no new requests; the disk is resetting the connection. Read
    /// without the lock (the disk checks it under its own).
    failed: AtomicBool,
    /// The CPU of the last submission, where the receive work runs: the request then ends,
    /// and its submitter wakes, on the submitter's CPU, with no cross-CPU wake-up (nvme-tcp
    /// keeps its `io_cpu` for the same reason).
    rx_cpu: AtomicU32,
    #[pin]
    inner: SpinLock<Inner>,
    /// Signalled when a sender lets go of a failed connection (`shutdown` waits for that).
    #[pin]
    sender_gone: CondVar,
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
        {
            let mut g = this.inner.lock();
            if g.sending {
                // The owner sends or hands on what is pending before it lets go.
                return;
            }
            g.sending = true;
        }
        this.send_pending(false);
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

/// Queues the send work. Any context.
fn kick_tx(q: &Arc<TcpQueue>) {
    let _ = q.host.info().io_wq.queue().enqueue::<_, 1>(q.clone());
}

/// Queues the receive work. Any context.
fn kick_rx(q: &Arc<TcpQueue>) {
    let cpu = q.rx_cpu.load(Ordering::Relaxed);
    let _ = q.host.info().io_wq.enqueue_on::<_, 2>(cpu, q.clone());
}

/// What a whole frame header and response lead to.
enum Head {
    /// The request is done (no data follows).
    Done,
    /// Read data follows.
    Data(Rx),
    /// The response's request is still being sent: keep the header for later.
    NotYet,
}

/// Whether the request `id` names is in its slot's `Sending` state.
fn g_is_sending(g: &Inner, id: ReqId) -> bool {
    matches!(g.slots.get(usize::from(id.slot)), Some(Slot::Sending))
}

/// The bytes of the frame that carries `req`: header, request, and a write's data.
fn frame_len(req: &Request) -> usize {
    let data = if req.opcode == Opcode::Write {
        req.length as usize
    } else {
        0
    };
    FRAME_HEADER_LEN + REQUEST_LEN + data
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

/// The Hello of connection `id` of the disk `d`.
fn hello_msg(d: &DiskInfo, id: ConnId) -> Hello {
    Hello {
        flags: d.hello_flags(),
        queue_id: id.qid,
        queue_count: d.nr_queues,
        recv_credits: QUEUE_DEPTH,
        caps: hello_caps::IDENTITY,
        session_id: d.session(),
        epoch: id.epoch,
        export: d.export,
    }
}

/// Connects to `d`'s target over TCP within `budget_ms`: without a key, from a reserved port
/// (docs/design.md, "Access control"; only the kernel or root can have one); with one, the
/// proofs vouch for the host, and any port does.
fn dial(d: &DiskInfo, path: u8, who: QueueName<'_>, budget_ms: u32) -> Result<Socket> {
    let peer = d.paths.addr(path).tcp();
    let budget_ms = budget_ms.max(1);
    if d.keys().is_some() {
        Socket::connect(peer.addr, peer.port, 0, budget_ms)
    } else {
        crate::resvport::with_reserved_port(d.name(), |from| {
            Socket::connect(peer.addr, peer.port, from, budget_ms)
        })
    }
    .inspect_err(|e| pr_err!("{who}: TCP connect to {peer} failed: {e:?}\n"))
}

/// Attaches connection `id` of `d` on `sock`: the Hello and its reply, then the
/// authentication, both ways, if either side has a key.
fn attach(d: &DiskInfo, id: ConnId, sock: &Socket) -> Result<HelloReply> {
    attach_as(d, id, sock, hello_msg(d, id))
}

/// As [`attach`], with `hello` (a probe's, of session 0).
fn attach_as(d: &DiskInfo, id: ConnId, sock: &Socket, hello: Hello) -> Result<HelloReply> {
    let who = QueueName(d.name(), id.qid);
    let out: [u8; FRAME_HEADER_LEN + HELLO_LEN] = frame(FrameKind::Hello, &hello.to_bytes(), 0);
    sock.send(&out, false, false)?;
    let mut buf = [0u8; FRAME_HEADER_LEN + HELLO_REPLY_MAX_LEN];
    let (head, tail) = buf.split_at_mut(FRAME_HEADER_LEN + HELLO_REPLY_LEN);
    let n = sock.recv(head, true)?;
    // The frame's data is the export's identity, when the reply has one (`features::IDENTITY`:
    // asked for in the Hello's caps); `decode` checks that it is there when the reply says so.
    let parsed = match (n, FrameHeader::decode(head)) {
        (n, Ok(h))
            if n == head.len()
                && h.kind == FrameKind::HelloReply
                && (h.data_len == 0 || h.data_len as usize == IDENTITY_LEN) =>
        {
            let more = h.data_len as usize;
            if more > 0 && sock.recv(tail, true)? != more {
                None
            } else {
                let len = HELLO_REPLY_LEN + more;
                HelloReply::decode(&buf[FRAME_HEADER_LEN..FRAME_HEADER_LEN + len]).ok()
            }
        }
        _ => None,
    };
    let Some(reply) = parsed else {
        pr_err!(
            "{who}: no valid Hello reply over TCP from {}\n",
            d.paths.addr(id.path).tcp()
        );
        return Err(errno(kb::EPROTO));
    };
    if reply.status == HelloStatus::Stale && d.keys().is_some() {
        return Err(authn::unproved_stale(who, reply.session_floor));
    }
    if reply.status == HelloStatus::Stale {
        pr_warn!(
            "{who}: REJECTED over TCP by the target: Stale (its fence is at session {})\n",
            reply.session_floor
        );
        d.note_stale(reply.session_floor);
        return Err(errno(kb::ESTALE));
    }
    if reply.status != HelloStatus::Ok {
        pr_err!(
            "{who}: REJECTED over TCP by the target: {:?}{}\n",
            reply.status,
            authn::refusal_hint(d.keys().is_some(), reply.status)
        );
        return Err(errno(kb::ECONNREFUSED));
    }
    if let Some(keys) = authn::needed(who, d.export, d.keys(), &reply)? {
        authenticate(d, id.path, who, sock, keys, &hello, &reply)?;
    }
    Ok(reply)
}

/// Proves the disk's key (the export asked, with `reply`'s challenge) before anything else
/// goes on the connection, and checks the target's proof of its own in the answer: `EACCES`
/// if the target denies our key or does not prove its own.
fn authenticate(
    d: &DiskInfo,
    path: u8,
    who: QueueName<'_>,
    sock: &Socket,
    keys: authn::Keys<'_>,
    hello: &Hello,
    reply: &HelloReply,
) -> Result {
    let (local_addr, local_port) = sock.local()?;
    let peer = d.paths.addr(path).tcp();
    let proof = authn::prove(
        keys,
        hello,
        reply,
        authn::endpoint(local_addr, local_port),
        authn::endpoint(peer.addr, peer.port),
        0,
        0,
    );
    let out: [u8; FRAME_HEADER_LEN + AUTH_REQUEST_LEN] =
        frame(FrameKind::Auth, &proof.request.to_bytes(), 0);
    sock.send(&out, false, false)?;
    let mut buf = [0u8; FRAME_HEADER_LEN + AUTH_REPLY_LEN];
    let n = sock.recv(&mut buf, true)?;
    let answer = match (n, FrameHeader::decode(&buf)) {
        (n, Ok(h)) if n == buf.len() && h.kind == FrameKind::AuthReply && h.data_len == 0 => {
            AuthReply::decode(&buf[FRAME_HEADER_LEN..]).ok()
        }
        _ => None,
    };
    let Some(answer) = answer else {
        pr_err!("{who}: no valid answer to the authentication over TCP\n");
        return Err(errno(kb::EPROTO));
    };
    authn::check(who, &proof, &answer, Some(&d.stale_floor))
}

/// Probes `d`'s target `path` over TCP within `budget_ms`: connects as a probe (session 0,
/// which no fence and no gateway's lock takes notice of), authenticating as the disk does, and
/// checks that a `Nop` is answered. May sleep.
pub(crate) fn probe(d: &DiskInfo, path: u8, budget_ms: u32) -> Result {
    let id = ConnId {
        qid: 0,
        epoch: 0,
        path,
    };
    let who = QueueName(d.name(), 0);
    let sock = dial(d, path, who, budget_ms)?;
    let hello = Hello {
        flags: 0,
        queue_id: 0,
        queue_count: 1,
        recv_credits: QUEUE_DEPTH,
        caps: hello_caps::IDENTITY,
        session_id: 0,
        epoch: 0,
        export: d.export,
    };
    attach_as(d, id, &sock, hello)?;
    request_once(who, &sock, Opcode::Nop)
}

/// Sends one data-less request `op` on `sock` and waits for its answer, which must be Ok.
fn request_once(who: QueueName<'_>, sock: &Socket, op: Opcode) -> Result {
    let req = Request::bare(op, 0);
    let out: [u8; FRAME_HEADER_LEN + REQUEST_LEN] = frame(FrameKind::Request, &req.to_bytes(), 0);
    sock.send(&out, false, false)?;
    let mut buf = [0u8; FRAME_HEADER_LEN + RESPONSE_LEN];
    let n = sock.recv(&mut buf, true)?;
    let resp = match (n, FrameHeader::decode(&buf)) {
        (n, Ok(h)) if n == buf.len() && h.kind == FrameKind::Response && h.data_len == 0 => {
            Response::decode(&buf[FRAME_HEADER_LEN..]).ok()
        }
        _ => None,
    };
    match resp {
        Some(r) if r.status == Status::Ok => Ok(()),
        Some(r) => {
            pr_warn!("{who}: {op:?} answered {}\n", r.status);
            Err(errno(kb::EPROTO))
        }
        None => Err(errno(kb::EPROTO)),
    }
}

/// A connection of `d`'s session, as connection set `epoch`, made for one data-less request
/// (`op`: the `Close` of a normal unmap), which must be answered Ok. May sleep.
pub(crate) fn one_shot(d: &DiskInfo, epoch: u32, op: Opcode, budget_ms: u32) -> Result {
    let path = d.paths.active();
    let id = ConnId {
        qid: 0,
        epoch,
        path,
    };
    let who = QueueName(d.name(), 0);
    let sock = dial(d, path, who, budget_ms)?;
    attach(d, id, &sock)?;
    request_once(who, &sock, op)
}

impl TcpQueue {
    /// Connects queue `id.qid` of `host`'s disk to the target's TCP port, as part of
    /// connection set `id.epoch`, within `budget_ms`; returns it with the target's Hello
    /// reply. May sleep.
    pub(crate) fn connect(
        host: &Arc<dyn QueueHost>,
        id: ConnId,
        budget_ms: u32,
    ) -> Result<(Arc<Self>, HelloReply)> {
        let disk = host.info();
        let qid = id.qid;
        if disk.faults.hit(Fault::FailConnect) {
            pr_warn!(
                "{}: queue {qid}: TCP connect failed (injected)\n",
                disk.name()
            );
            return Err(errno(kb::ETIMEDOUT));
        }
        let mut slots = KVec::with_capacity(QUEUE_DEPTH.into(), GFP_KERNEL)?;
        for _ in 0..QUEUE_DEPTH {
            slots.push(Slot::Free, GFP_KERNEL)?;
        }
        let q = Arc::pin_init(
            pin_init!(Self {
                host: host.clone(),
                id,
                failed: AtomicBool::new(false),
                rx_cpu: AtomicU32::new(work::ANY_CPU),
                inner <- new_spinlock!(Inner {
                    sock: None,
                    credits: CreditSender::new(0),
                    tags: Tags::new(),
                    slots,
                    last_rx_ms: now_ms(),
                    starved_ms: None,
                    pending: Ring { tags: [0; QUEUE_DEPTH as usize], head: 0, len: 0 },
                    sending: false,
                    rx_parked: false,
                    partial: None,
                }, "rdmadisk::tcp_queue"),
                sender_gone <- new_condvar!("rdmadisk::tcp_queue::sender_gone"),
                rx <- new_mutex!(Rx::head(), "rdmadisk::tcp_queue::rx"),
                tx_work <- new_work!("rdmadisk::tcp_queue::tx"),
                rx_work <- new_work!("rdmadisk::tcp_queue::rx"),
            }),
            GFP_KERNEL,
        )?;
        let mut sock = dial(disk, id.path, QueueName(disk.name(), qid), budget_ms)?;
        let reply = attach(disk, id, &sock)?;
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
        q.inner.lock().last_rx_ms = now_ms();
        // Anything that arrived before the hook was in place.
        kick_rx(&q);
        Ok((q, reply))
    }

    fn name(&self) -> &str {
        self.host.info().name()
    }

    fn stats(&self) -> &Stats {
        &self.host.info().stats
    }

    /// Queues `rq` for sending. `Err` gives it back with `Resource` when it must wait (no
    /// credit, the connection is resetting), or with the error blk-mq should end it with.
    pub(crate) fn submit(
        self: &Arc<Self>,
        rq: DiskRq,
    ) -> core::result::Result<(), (DiskRq, BlkStatus)> {
        let Some(op) = io::opcode(&rq) else {
            return Err((rq, BlkStatus::NotSupp));
        };
        let info = self.host.info();
        let mut req = io::request(&rq, op, ReqId::default());
        // The data travels inline, with no remote buffer; `buf.len` still states its length,
        // so that the target checks requests on both transports by the same rules.
        if op.has_data() {
            req.buf.len = req.length;
        }
        let slot = rq.tag() as u16;
        let cpu = work::this_cpu();
        if self.rx_cpu.load(Ordering::Relaxed) != cpu {
            self.rx_cpu.store(cpu, Ordering::Relaxed);
        }
        let mut guard = self.inner.lock();
        let g = &mut *guard;
        if self.is_failed() || g.sock.is_none() {
            return Err((rq, BlkStatus::Resource));
        }
        if !info.credit_ok(&g.credits, &mut g.starved_ms, Via::Tcp, Op::of(op)) {
            return Err((rq, BlkStatus::Resource));
        }
        if !matches!(g.slots.get(usize::from(slot)), Some(Slot::Free)) {
            return Err((rq, BlkStatus::Resource));
        }
        if g.tags.in_flight() == 0 {
            // An idle connection starts waiting for the target now, not at its last response
            // (TCP has no keepalive NOPs to keep that fresh).
            g.last_rx_ms = now_ms();
        }
        let Ok(id) = g.tags.issue(slot) else {
            return Err((rq, BlkStatus::Resource));
        };
        if !g.pending.push(slot) {
            g.tags.release(slot);
            return Err((rq, BlkStatus::Resource));
        }
        req.tag = id.tag();
        io::inject_write_crc(info, &rq, &mut req);
        let len = frame_len(&req);
        g.slots[usize::from(slot)] = Slot::Queued(Io { rq, req });
        g.credits.try_consume();
        let hw = u64::from(g.credits.high_water());
        self.stats()
            .max_outstanding
            .fetch_max(hw, core::sync::atomic::Ordering::Relaxed);
        // Queued under the lock, so that `shutdown` (which marks the queue failed under it,
        // then waits for the sender and flushes the work) cannot miss it.
        if g.sending {
            return Ok(());
        }
        let room = g.sock.as_ref().map_or(0, |s| s.send_room());
        if g.pending.len == 1 && g.partial.is_none() && len <= room {
            // Nothing ahead of it and no wait for room: send it from here.
            g.sending = true;
            drop(guard);
            self.send_pending(true);
        } else {
            kick_tx(self);
        }
        Ok(())
    }

    /// Writes queued requests until none is left or the connection fails. The caller owns
    /// the sending side (`Inner::sending`); this lets go of it. `inline` (in `queue_rq`):
    /// writes one frame only, and only what the send buffer takes at once, leaving the rest
    /// and any other request to the send work. The submitting task then never waits for the
    /// network, nor sends for others.
    fn send_pending(self: &Arc<Self>, inline: bool) {
        loop {
            let (sock, slot, io, from) = {
                let mut guard = self.inner.lock();
                let g = &mut *guard;
                let Some(sock) = g.sock.clone().filter(|_| !self.is_failed()) else {
                    self.release_sender(g);
                    return;
                };
                // A frame begun and not finished goes first: frames must not interleave.
                let next = g.partial.take().or_else(|| g.pending.pop().map(|t| (t, 0)));
                let Some((slot, from)) = next else {
                    self.release_sender(g);
                    return;
                };
                let io = match g.slots.get_mut(usize::from(slot)) {
                    Some(s) => match mem::replace(s, Slot::Sending) {
                        Slot::Queued(io) => Some(io),
                        other => {
                            *s = other;
                            None
                        }
                    },
                    None => None,
                };
                match io {
                    Some(io) => (sock, slot, io, from),
                    // Nothing else may start after half a frame: the stream is lost.
                    None if from > 0 => {
                        self.fail_locked(g, "a frame begun could not be finished");
                        self.release_sender(g);
                        return;
                    }
                    None => continue,
                }
            };
            let faults = &self.host.info().faults;
            let len = frame_len(&io.req);
            // The fault stops an inline send halfway, as a full send buffer would.
            let upto = if inline && faults.hit(Fault::ShortTcpSend) {
                from + (len - from) / 2
            } else {
                len
            };
            let res = if faults.hit(Fault::FailTcpSend) {
                Err(EPIPE)
            } else {
                self.send_frame(&sock, &io, from, upto, inline)
            };
            // Before letting go of the sending side: `shutdown` releases the socket once
            // nobody sends, and must hold the last reference then.
            drop(sock);
            let mut guard = self.inner.lock();
            let g = &mut *guard;
            // A blocking send writes all of the frame or fails: a short one means the request's
            // pages hold less than its length.
            let res = match res {
                Ok(sent) if !inline && from + sent < len => Err(EIO),
                res => res,
            };
            match res {
                Ok(sent) if from + sent < len => {
                    // The send buffer is full: the send work writes the rest.
                    g.slots[usize::from(slot)] = Slot::Queued(io);
                    g.partial = Some((slot, from + sent));
                    self.release_sender(g);
                    kick_tx(self);
                    return;
                }
                res => {
                    g.slots[usize::from(slot)] = Slot::Sent(io);
                    // Its response may have arrived while it was being sent (see `on_head`).
                    if mem::take(&mut g.rx_parked) {
                        kick_rx(self);
                    }
                    if let Err(e) = res {
                        if !self.is_failed() {
                            pr_err!(
                                "{}: queue {}: sending slot {slot} failed: {e:?}\n",
                                self.name(),
                                self.id.qid
                            );
                        }
                        self.fail_locked(g, "a send failed");
                        self.release_sender(g);
                        return;
                    }
                }
            }
            if inline {
                self.release_sender(g);
                if g.pending.len > 0 {
                    kick_tx(self);
                }
                return;
            }
        }
    }

    /// Lets go of the sending side; wakes `shutdown` if it waits for that.
    fn release_sender(&self, g: &mut Inner) {
        g.sending = false;
        if self.is_failed() {
            self.sender_gone.notify_all();
        }
    }

    /// Writes bytes `from..upto` of `io`'s frame; returns how many went: all of them unless
    /// `nowait`.
    fn send_frame(
        &self,
        sock: &Socket,
        io: &Io,
        from: usize,
        upto: usize,
        nowait: bool,
    ) -> Result<usize> {
        let len = frame_len(&io.req);
        let head: [u8; FRAME_HEADER_LEN + REQUEST_LEN] = frame(
            FrameKind::Request,
            &io.req.to_bytes(),
            (len - FRAME_HEADER_LEN - REQUEST_LEN) as u32,
        );
        let end = upto.min(len);
        // `pos`: how far the frame is out; `at`: the frame offset of the part at hand.
        let mut pos = from;
        if pos < head.len() {
            let stop = end.min(head.len());
            pos += sock.send(&head[pos..stop], stop < len, nowait)?;
            if pos < head.len() {
                return Ok(pos - from);
            }
        }
        let mut at = head.len();
        let mut res = Ok(());
        io.rq.for_each_data_page(|page| {
            if res.is_err() || pos < at || at >= end {
                // Failed, stopped short, or past the part to send.
                return;
            }
            let page = page.prefix(end - at);
            let next = at + page.len();
            if pos < next {
                match sock.send_page(&page, pos - at, next < len, nowait) {
                    Ok(n) => pos += n,
                    Err(e) => res = Err(e),
                }
            }
            at = next;
        });
        res.map(|()| pos - from)
    }

    /// The receive work: reads whatever the socket has, completing requests as their
    /// responses (and read data) arrive.
    fn receive(&self) {
        let sock = {
            let g = self.inner.lock();
            match &g.sock {
                Some(s) if !self.is_failed() => s.clone(),
                _ => return,
            }
        };
        let mut rx = self.rx.lock();
        loop {
            let read = match &mut *rx {
                // A whole header kept back for a request still being sent.
                Rx::Head { buf, got } if *got == buf.len() => Ok(()),
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
                Rx::Data { io, got, .. } => {
                    let before = *got;
                    let r = recv_data(&sock, io, got);
                    if *got > before {
                        // Read data streaming in is progress, for the health check.
                        self.inner.lock().last_rx_ms = now_ms();
                    }
                    match r {
                        Ok(true) => Ok(()),
                        Ok(false) => return,
                        Err(why) => Err(why),
                    }
                }
            };
            if let Err(why) = read {
                // A request being read stays in `rx` for the reset to requeue.
                drop(rx);
                return self.fail(why);
            }
            match mem::replace(&mut *rx, Rx::head()) {
                Rx::Head { buf, got } => match self.on_head(&buf) {
                    Ok(Head::Done) => {}
                    Ok(Head::Data(data)) => *rx = data,
                    Ok(Head::NotYet) => {
                        // The sender wakes us once the request is marked sent.
                        *rx = Rx::Head { buf, got };
                        return;
                    }
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
    ) -> core::result::Result<Head, &'static str> {
        let hdr = FrameHeader::decode(buf).map_err(|_| "undecodable frame header")?;
        if hdr.kind != FrameKind::Response || hdr.flags != 0 {
            return Err("unexpected frame");
        }
        let resp =
            Response::decode(&buf[FRAME_HEADER_LEN..]).map_err(|_| "undecodable response")?;
        let id = ReqId::from_tag(resp.tag);
        // The target may answer before the sender has marked the request sent (it runs
        // apart from this work): leave the response for then.
        {
            let mut g = self.inner.lock();
            if g_is_sending(&g, id) {
                g.rx_parked = true;
                return Ok(Head::NotYet);
            }
        }
        Stats::inc(&self.stats().responses);
        let faults = &self.host.info().faults;
        if faults.hit(Fault::DelayResponse) {
            // The receive work runs in process context.
            sleep_ms(faults.delay_ms());
        }
        let mut g = self.inner.lock();
        g.last_rx_ms = now_ms();
        g.credits.grant(resp.credits);
        if let Err(e) = g.tags.check(id) {
            Stats::inc(&self.stats().stale_responses);
            pr_err!(
                "{}: queue {}: response for slot {} generation {}: {e}\n",
                self.name(),
                self.id.qid,
                id.slot,
                id.gen
            );
            return Err("response for no request in flight");
        }
        let io = match g.slots.get_mut(usize::from(id.slot)) {
            Some(slot @ Slot::Sent(_)) => match mem::replace(slot, Slot::Receiving) {
                Slot::Sent(io) => io,
                _ => return Err("response for a request not sent"),
            },
            _ => return Err("response for a request not sent"),
        };
        // Read data follows exactly when the read succeeded, and is exactly its length.
        let expect = if io.req.opcode == Opcode::Read && resp.status == Status::Ok {
            io.req.length
        } else {
            0
        };
        if hdr.data_len != expect || !io::length_ok(io.req.opcode, io.req.length, &resp) {
            pr_err!(
                "{}: queue {}: slot {}: response of {} bytes with {} data bytes, expected {expect}\n",
                self.name(),
                self.id.qid,
                id.slot,
                resp.length,
                hdr.data_len
            );
            // Back in its slot, to be requeued by the reset.
            g.slots[usize::from(id.slot)] = Slot::Sent(io);
            return Err("response with the wrong amount of data");
        }
        let _ = g.tags.answer(id);
        drop(g);
        self.host.info().note_capacity(resp.capacity_sectors);
        if expect == 0 {
            self.complete(io, &resp);
            Ok(Head::Done)
        } else {
            Ok(Head::Data(Rx::Data { io, resp, got: 0 }))
        }
    }

    /// Frees the slot and credit, then ends or retries the request.
    fn complete(&self, io: Io, resp: &Response) {
        let slot = ReqId::from_tag(io.req.tag).slot;
        let mut g = self.inner.lock();
        if self.host.info().faults.hit(Fault::DropResponse) {
            // Lost on the way: the request stays in flight until its timeout resets the
            // connection, which requeues it.
            g.slots[usize::from(slot)] = Slot::Sent(io);
            let _ = g.tags.issue(slot);
            return;
        }
        if let Some(s) = g.slots.get_mut(usize::from(slot)) {
            *s = Slot::Free;
        }
        g.credits.complete();
        drop(g);
        if io::finish(
            self.host.info(),
            io.rq,
            io.req.opcode,
            resp,
            Via::Tcp,
            self.id.path,
        ) == io::Verdict::Superseded
        {
            self.fail("the target fenced this connection: a newer one superseded it");
        }
    }

    fn fail(&self, why: &str) {
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
        if g.sock.is_some() {
            pr_err!(
                "{}: queue {} (TCP, set {}): {why}; resetting the connection\n",
                self.name(),
                self.id.qid,
                self.id.epoch
            );
        }
        self.host.clone().queue_failed(self.id, Transport::Tcp);
    }

    /// The health check, run by the disk's session (see
    /// [`crate::queue::Queue::health_check`]): fails the connection when requests have waited
    /// an I/O timeout for a credit the target never grants, or, with keepalives on, when
    /// requests are in flight and nothing has arrived for twice `keepalive_ms`. The kernel's
    /// keepalive finds a dead peer; this finds a peer whose process stopped answering (its
    /// kernel still acknowledges).
    pub(crate) fn health_check(&self) {
        let info = self.host.info();
        let twice = 2 * i64::from(info.keepalive_ms());
        let starve = i64::from(info.io_timeout_ms());
        let mut guard = self.inner.lock();
        let g = &mut *guard;
        let now = now_ms();
        if self.is_failed() {
            return;
        }
        if g.starved_ms.is_some_and(|t| now - t > starve) {
            self.fail_locked(g, "the target grants no credits");
        } else if twice > 0 && g.tags.in_flight() > 0 && now - g.last_rx_ms > twice {
            self.fail_locked(g, "no response while requests are in flight");
        }
    }

    /// True if the connection failed or is gone.
    pub(crate) fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Requests on the connection now.
    pub(crate) fn in_flight(&self) -> u32 {
        self.inner.lock().tags.in_flight() as u32
    }

    /// Closes the connection and hands every request that was on it to `dispose`; none of
    /// them can complete afterwards. May sleep.
    pub(crate) fn shutdown(&self, mut dispose: impl FnMut(DiskRq)) {
        let sock = {
            let mut g = self.inner.lock();
            self.failed.store(true, Ordering::Release);
            g.sock.take()
        };
        if let Some(s) = &sock {
            // Wakes a send blocked on a full socket.
            s.shutdown();
        }
        // A `queue_rq` sending inline is no work item to flush: wait for it to put its
        // request back and drop its socket reference. It does not sleep in the send
        // (`MSG_DONTWAIT`); the send work's blocking send was just cut short.
        {
            let mut g = self.inner.lock();
            while g.sending {
                self.sender_gone.wait(&mut g);
            }
        }
        work::flush(&self.tx_work);
        work::flush(&self.rx_work);
        // The works are done with their references: this releases the socket (abortively)
        // and its hook.
        drop(sock);
        // A callback may have queued the receive work once more before the unhook.
        work::flush(&self.rx_work);
        if let Rx::Data { io, .. } = mem::replace(&mut *self.rx.lock(), Rx::head()) {
            dispose(io.rq);
        }
        loop {
            let io = {
                let mut g = self.inner.lock();
                g.tags = Tags::new();
                g.slots.iter_mut().find_map(|s| match mem::take(s) {
                    Slot::Queued(io) | Slot::Sent(io) => Some(io),
                    _ => None,
                })
            };
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
