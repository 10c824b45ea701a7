//! The RDMA transport: rdma_cm listener, one RC QP and one thread per connection.
//!
//! Per connection the target posts `credits` receives of one Request each (the HelloReply's
//! `initial_credits`) and reposts each as soon as its Request is decoded; every Response grants
//! one credit back. Responses spend the client's response credits (Hello.recv_credits plus the
//! `credits` field of each Request) and wait when none is left. WRITE data is pulled with RDMA
//! Read into a registered buffer, CRC-checked, then written; READ data is read, CRC'd and pushed
//! with RDMA Write chained before the Response. Every Response is a Send-with-Invalidate of the
//! request's `buf.rkey` (rkey 0: a plain Send). Every request runs under its connection's fence
//! (a write's check is at apply time, after its RDMA Read). A malformed message or a failed
//! work request resets that connection only. In hostile mode (tests only) the response may be
//! altered, accompanied by an extra Send (only with a spare response credit) or followed by a
//! late RDMA Write.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rdmadisk_net::rdma::{
    self, Access, CmEventKind, CmId, CompChannel, ConnParams, Cq, EventChannel, Mr, Pd, QpCaps,
    SendOp, SendWr,
};
use rdmadisk_proto::credits::CreditSender;
use rdmadisk_proto::wire::{Hello, HelloReply, HelloStatus, Opcode, Request, Status, RESPONSE_LEN};

use crate::engine::{ConnGuard, Target};
use crate::export::Export;
use crate::fence_table::ConnFence;
use crate::hostile::{self, Candidate, Chooser, Kind, Rng};
use crate::stats::Stats;

const TICK: Duration = Duration::from_millis(200);
/// Local ACK timeout exponent of every connection: 4.096 us * 2^20, about 4.3 s.
const ACK_TIMEOUT_EXP: u8 = 20;
/// Bytes per receive/send slot (a Request is 48 bytes, a Response 32).
const SLOT: usize = 64;
/// Data buffers per connection (one in use while the previous read's RDMA Write drains).
const DATA_BUFS: usize = 2;

const K_RECV: u64 = 1;
const K_SEND: u64 = 2;
const K_READ: u64 = 3;
/// A hostile late RDMA Write; it owns the read's data buffer until it completes.
const K_LATE: u64 = 4;

fn wr_id(kind: u64, data_buf: Option<usize>, slot: usize) -> u64 {
    (kind << 56) | ((data_buf.map_or(0, |b| b as u64 + 1)) << 24) | slot as u64
}

fn wr_kind(id: u64) -> u64 {
    id >> 56
}

fn wr_data_buf(id: u64) -> Option<usize> {
    let b = (id >> 24) & 0xffff;
    (b > 0).then(|| b as usize - 1)
}

fn wr_slot(id: u64) -> usize {
    (id & 0xff_ffff) as usize
}

struct Shared {
    disconnected: AtomicBool,
}

type ConnMap = Arc<Mutex<HashMap<usize, Arc<Shared>>>>;

/// The rdma_cm listener.
pub struct Listener {
    ch: Arc<EventChannel>,
    id: CmId,
}

impl Listener {
    /// Binds and listens on `addr` (fails where there is no RDMA device or rdma-core).
    pub fn bind(addr: SocketAddr) -> io::Result<Listener> {
        let ch = EventChannel::new()?;
        let id = CmId::new(&ch)?;
        id.bind(addr)?;
        id.listen(128)?;
        Ok(Listener { ch, id })
    }

    /// Handles rdma_cm events until shutdown and every connection has ended.
    pub fn serve(self, t: Arc<Target>) {
        let conns: ConnMap = Arc::new(Mutex::new(HashMap::new()));
        let mut threads: Vec<thread::JoinHandle<()>> = Vec::new();
        loop {
            threads.retain(|h| !h.is_finished());
            if t.stopping() && threads.is_empty() {
                break;
            }
            let mut ev = match self.ch.next_event(Some(TICK)) {
                Ok(Some(ev)) => ev,
                Ok(None) => continue,
                Err(e) => {
                    eprintln!("rdmadisk-target: rdma: rdma_get_cm_event failed: {e}");
                    thread::sleep(TICK);
                    continue;
                }
            };
            match ev.kind() {
                CmEventKind::ConnectRequest => {
                    let Some(id) = ev.take_request_id(&self.ch) else {
                        continue;
                    };
                    let private = ev.private_data().to_vec();
                    drop(ev); // ack before anything can destroy the new id
                    match setup(&t, id, &private) {
                        Ok(conn) => {
                            let shared = conn.shared.clone();
                            let key = conn.id.raw_id();
                            conns
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .insert(key, shared);
                            let map = conns.clone();
                            let tt = t.clone();
                            let name = format!("rdma-{}", conn.peer);
                            match thread::Builder::new().name(name).spawn(move || {
                                conn.run(&tt);
                                map.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
                            }) {
                                Ok(h) => threads.push(h),
                                Err(e) => eprintln!(
                                    "rdmadisk-target: rdma: cannot start a connection thread: {e}"
                                ),
                            }
                        }
                        Err(()) => Stats::inc(&t.stats.refused),
                    }
                }
                CmEventKind::Disconnected | CmEventKind::DeviceRemoval => {
                    let key = ev.raw_id();
                    if let Some(s) = conns.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
                        s.disconnected.store(true, Ordering::SeqCst);
                    }
                }
                CmEventKind::Established | CmEventKind::TimewaitExit => {}
                k => eprintln!(
                    "rdmadisk-target: rdma: cm event {k:?} (status {})",
                    ev.status()
                ),
            }
        }
        drop(self.id);
    }
}

fn refuse(id: &CmId, peer: &str, st: HelloStatus, why: &str) {
    eprintln!("rdmadisk-target: rdma: refused connection from {peer}: {why}");
    if let Err(e) = id.reject(&HelloReply::rejected(st).to_bytes()) {
        eprintln!("rdmadisk-target: rdma: rdma_reject failed: {e}");
    }
}

fn setup(t: &Arc<Target>, mut id: CmId, private: &[u8]) -> Result<Conn, ()> {
    let peer_addr = id.peer_addr();
    let peer = peer_addr.map_or_else(|| "?".to_string(), |a| a.to_string());
    let hello = match Hello::decode(private) {
        Ok(h) => h,
        Err(e) => {
            refuse(
                &id,
                &peer,
                e.hello_status(),
                &format!("bad Hello in connect private data ({e})"),
            );
            return Err(());
        }
    };
    if hello.session_id != 0
        && t.limits
            .refuse_rdma_file
            .as_ref()
            .is_some_and(|f| f.exists())
    {
        Stats::inc(&t.stats.refused);
        refuse(
            &id,
            &peer,
            HelloStatus::Busy,
            "RDMA refused for client sessions (--refuse-rdma-file is present)",
        );
        return Err(());
    }
    let (export, fence) = match t.attach(peer_addr, &hello) {
        Ok(a) => (a.export, a.fence),
        Err(st) => {
            let why = if st == HelloStatus::NotAllowed {
                "address not on the allow-list".to_string()
            } else {
                format!("export {:?}: {st:?}", hello.export.as_str())
            };
            // attach has logged a Stale refusal in detail already.
            if st == HelloStatus::Stale {
                if let Err(e) = id.reject(&HelloReply::rejected(st).to_bytes()) {
                    eprintln!("rdmadisk-target: rdma: rdma_reject failed: {e}");
                }
            } else {
                refuse(&id, &peer, st, &why);
            }
            return Err(());
        }
    };
    let credits = usize::from(t.limits.credits);
    let max_io = t.limits.max_io_bytes as usize;
    type Parts = (Arc<Pd>, Arc<CompChannel>, Arc<Cq>, Mr, Mr, Mr);
    let res = (|| -> io::Result<Parts> {
        let pd = id.alloc_pd()?;
        let comp = CompChannel::new(&pd)?;
        let send_wr = (credits * 2 + 4) as u32;
        let cq = Cq::new(&pd, send_wr + credits as u32 + 16, Some(&comp))?;
        id.create_qp(
            &pd,
            &cq,
            &cq,
            QpCaps {
                max_send_wr: send_wr,
                max_recv_wr: credits as u32,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
        )?;
        let recv_mr = Mr::new(&pd, credits * SLOT, Access::LOCAL_WRITE)?;
        let send_mr = Mr::new(&pd, credits * SLOT, Access::LOCAL_WRITE)?;
        let data_mr = Mr::new(&pd, DATA_BUFS * max_io, Access::LOCAL_WRITE)?;
        for slot in 0..credits {
            id.post_recv(wr_id(K_RECV, None, slot), &recv_mr, slot * SLOT, SLOT)?;
        }
        let reply = t.hello_reply(&export).to_bytes();
        // 4.3 s: well above the time a 1 MiB RDMA Read takes on a slow link (see
        // set_ack_timeout), still bounded (7 retries) for a peer that is really gone.
        id.set_ack_timeout(ACK_TIMEOUT_EXP)?;
        id.accept(&ConnParams {
            private_data: &reply,
            responder_resources: 0xff,
            initiator_depth: 0xff,
            retry_count: 7,
            rnr_retry_count: 0,
        })?;
        Ok((pd, comp, cq, recv_mr, send_mr, data_mr))
    })();
    let (pd, comp, cq, recv_mr, send_mr, data_mr) = match res {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rdmadisk-target: rdma: cannot set up a connection for {peer}: {e}");
            let _ = id.reject(&HelloReply::rejected(HelloStatus::Busy).to_bytes());
            return Err(());
        }
    };
    eprintln!(
        "rdmadisk-target: rdma: {peer} attached to export {} (queue {}/{}, {credits} credits, client recv credits {}, session {} epoch {})",
        export.name, hello.queue_id, hello.queue_count, hello.recv_credits, hello.session_id, hello.epoch
    );
    Stats::inc(&t.stats.rdma_connections);
    Ok(Conn {
        id,
        _comp: comp,
        cq,
        pd,
        recv_mr,
        send_mr,
        data_mr,
        export,
        fence,
        rng: Rng::new(u64::from(peer_addr.map_or(0, |a| a.port()))),
        chooser: Chooser::default(),
        late_rkeys: VecDeque::new(),
        hostile_reset: false,
        peer,
        max_io,
        send_slots: credits,
        send_free: (0..credits).rev().collect(),
        data_free: (0..DATA_BUFS).rev().collect(),
        pending: VecDeque::new(),
        resp_credits: CreditSender::new(hello.recv_credits),
        read_done: None,
        broken: None,
        shared: Arc::new(Shared {
            disconnected: AtomicBool::new(false),
        }),
    })
}

/// One RDMA connection. Field order is drop order: the QP (in `id`) goes first.
struct Conn {
    id: CmId,
    _comp: Arc<CompChannel>,
    cq: Arc<Cq>,
    pd: Arc<Pd>,
    recv_mr: Mr,
    send_mr: Mr,
    data_mr: Mr,
    export: Arc<Export>,
    fence: ConnFence,
    rng: Rng,
    chooser: Chooser,
    /// rkeys of the late writes in flight, oldest first (send completions come in order).
    late_rkeys: VecDeque<u32>,
    /// `broken` is the expected end of a hostile late write, not a fault.
    hostile_reset: bool,
    peer: String,
    max_io: usize,
    send_slots: usize,
    send_free: Vec<usize>,
    data_free: Vec<usize>,
    pending: VecDeque<Request>,
    resp_credits: CreditSender,
    read_done: Option<Result<(), ()>>,
    broken: Option<String>,
    shared: Arc<Shared>,
}

impl Conn {
    fn gone(&self) -> bool {
        self.broken.is_some() || self.shared.disconnected.load(Ordering::SeqCst)
    }

    fn run(mut self, t: &Target) {
        let _guard = ConnGuard::new(t);
        loop {
            if self.gone() {
                break;
            }
            match self.pending.pop_front() {
                Some(req) => self.process(t, req),
                None if t.stopping() => break,
                None => self.drive(t, Some(TICK)),
            }
        }
        // Let responses already posted reach the client before disconnecting.
        let deadline = Instant::now() + Duration::from_secs(2);
        while !self.gone()
            && (self.send_free.len() < self.send_slots || self.data_free.len() < DATA_BUFS)
            && Instant::now() < deadline
        {
            self.drive(t, Some(Duration::from_millis(50)));
        }
        // Pick up error completions that raced with a disconnect, for the log and the counters.
        if self.broken.is_none() {
            self.drive(t, Some(Duration::ZERO));
            if self.broken.as_deref() == Some("queue pair flushed") {
                self.broken = None;
            }
        }
        let events = self.pd.drain_async_events();
        if !events.is_empty() {
            eprintln!(
                "rdmadisk-target: rdma: {}: async events: {}",
                self.peer,
                events.join(", ")
            );
        }
        match &self.broken {
            Some(why) => {
                eprintln!(
                    "rdmadisk-target: rdma: {}: {why}; resetting this connection",
                    self.peer
                );
                Stats::inc(if self.hostile_reset {
                    &t.stats.hostile_resets
                } else {
                    &t.stats.resets
                });
            }
            None => eprintln!("rdmadisk-target: rdma: {} disconnected", self.peer),
        }
        let _ = self.id.disconnect();
    }

    /// Waits up to `timeout` for completions and applies them.
    fn drive(&mut self, t: &Target, timeout: Option<Duration>) {
        let wcs = match self.cq.wait(timeout) {
            Ok(w) => w,
            Err(e) => {
                self.broken.get_or_insert(format!("CQ wait failed: {e}"));
                return;
            }
        };
        for wc in wcs {
            let kind = wr_kind(wc.wr_id);
            if kind == K_LATE && wc.status != rdma::WC_WR_FLUSH_ERR {
                self.late_write_done(t, &wc);
                continue;
            }
            if !wc.ok() {
                if kind == K_READ {
                    self.read_done = Some(Err(()));
                }
                if wc.status == rdma::WC_WR_FLUSH_ERR {
                    self.broken
                        .get_or_insert_with(|| "queue pair flushed".into());
                } else {
                    Stats::inc(&t.stats.rdma_errors);
                    let what = match kind {
                        K_RECV => "receive",
                        K_READ => "RDMA Read",
                        _ => "RDMA Write/Send",
                    };
                    self.broken
                        .get_or_insert(format!("{what} failed: {}", wc.status_str()));
                }
                continue;
            }
            match kind {
                K_RECV => {
                    let slot = wr_slot(wc.wr_id);
                    let off = slot * SLOT;
                    let len = (wc.byte_len as usize).min(SLOT);
                    match Request::decode(&self.recv_mr[off..off + len]) {
                        Ok(req) => {
                            self.resp_credits.grant(req.credits);
                            self.pending.push_back(req);
                            if let Err(e) = self.id.post_recv(wc.wr_id, &self.recv_mr, off, SLOT) {
                                self.broken
                                    .get_or_insert(format!("cannot repost a receive: {e}"));
                            }
                        }
                        Err(e) => {
                            self.broken.get_or_insert(format!(
                                "malformed message ({e}, {} bytes)",
                                wc.byte_len
                            ));
                        }
                    }
                }
                K_SEND => {
                    self.send_free.push(wr_slot(wc.wr_id));
                    if let Some(b) = wr_data_buf(wc.wr_id) {
                        self.data_free.push(b);
                    }
                }
                K_READ => self.read_done = Some(Ok(())),
                _ => {}
            }
        }
    }

    /// Completion of a hostile late write: it must have been refused, since the response before
    /// it invalidated its rkey.
    fn late_write_done(&mut self, t: &Target, wc: &rdma::Completion) {
        let rkey = self.late_rkeys.pop_front().unwrap_or(0);
        if wc.ok() {
            if let Some(b) = wr_data_buf(wc.wr_id) {
                self.data_free.push(b);
            }
            Stats::inc(&t.stats.late_write_succeeded);
            eprintln!(
                "rdmadisk-target: rdma: {}: hostile late RDMA Write to rkey {rkey:#x} SUCCEEDED after the response that invalidated it: the client left that memory reachable",
                self.peer
            );
            return;
        }
        Stats::inc(&t.stats.late_write_rejected);
        eprintln!(
            "rdmadisk-target: rdma: {}: hostile late RDMA Write to invalidated rkey {rkey:#x} refused, as it must be: {} (status {})",
            self.peer,
            wc.status_str(),
            wc.status
        );
        // The QP is in the error state now; what follows is that, not a fault of the client.
        if self.broken.is_none() {
            self.hostile_reset = true;
            self.broken = Some(format!(
                "hostile late RDMA Write refused ({})",
                wc.status_str()
            ));
        }
    }

    fn acquire_data_buf(&mut self, t: &Target) -> Option<usize> {
        while self.data_free.is_empty() {
            if self.gone() {
                return None;
            }
            self.drive(t, Some(TICK));
        }
        self.data_free.pop()
    }

    fn process(&mut self, t: &Target, req: Request) {
        let export = self.export.clone();
        if let Err(st) = t.admit(&export, &req) {
            // Still checked: any request of a newer set moves the fence.
            let st = t.fenced(&self.fence, &req, || st).unwrap_or_else(|f| f);
            self.respond(t, &req, st, 0, None);
            return;
        }
        if t.stalls(&req) {
            return;
        }
        let n = req.length as usize;
        match req.opcode {
            Opcode::Read => {
                let Some(b) = self.acquire_data_buf(t) else {
                    return;
                };
                let off = b * self.max_io;
                let (st, crc) = t
                    .fenced(&self.fence, &req, || {
                        t.read(&export, &req, &mut self.data_mr[off..off + n])
                    })
                    .unwrap_or_else(|f| (f, 0));
                if st == Status::Ok {
                    self.respond(t, &req, st, crc, Some(b));
                } else {
                    self.data_free.push(b);
                    self.respond(t, &req, st, 0, None);
                }
            }
            Opcode::Write => {
                let Some(b) = self.acquire_data_buf(t) else {
                    return;
                };
                let off = b * self.max_io;
                self.read_done = None;
                let wr = SendWr {
                    wr_id: wr_id(K_READ, Some(b), 0),
                    op: SendOp::RdmaRead {
                        remote_addr: req.buf.addr,
                        rkey: req.buf.rkey,
                    },
                    local: Some((&self.data_mr, off, n)),
                    signaled: true,
                };
                if let Err(e) = self.id.post_send(&[wr]) {
                    self.broken
                        .get_or_insert(format!("cannot post an RDMA Read: {e}"));
                    return;
                }
                Stats::inc(&t.stats.rdma_reads);
                Stats::add(&t.stats.rdma_read_bytes, n as u64);
                while self.read_done.is_none() && !self.gone() {
                    self.drive(t, Some(TICK));
                }
                if self.read_done != Some(Ok(())) {
                    return;
                }
                // The fence is checked now, at apply time, not before the RDMA Read: a newer
                // set may have moved it while the data was in flight.
                let st = t
                    .fenced(&self.fence, &req, || {
                        t.write(&export, &req, &self.data_mr[off..off + n])
                    })
                    .unwrap_or_else(|f| f);
                self.data_free.push(b);
                self.respond(t, &req, st, 0, None);
            }
            _ => {
                let st = t
                    .fenced(&self.fence, &req, || t.no_data(&export, &req))
                    .unwrap_or_else(|f| f);
                self.respond(t, &req, st, 0, None);
            }
        }
    }

    /// Posts one extra hostile message as a plain Send. Like every Send it spends a response
    /// credit, so it is sent only if one is left (no RNR, ever), and a send slot. False if it
    /// was not sent.
    fn post_extra(&mut self, msg: &[u8; RESPONSE_LEN]) -> bool {
        if self.send_free.is_empty() || !self.resp_credits.try_consume() {
            return false;
        }
        let Some(slot) = self.send_free.pop() else {
            return false;
        };
        let off = slot * SLOT;
        self.send_mr[off..off + RESPONSE_LEN].copy_from_slice(msg);
        let send = SendWr {
            wr_id: wr_id(K_SEND, None, slot),
            op: SendOp::Send,
            local: Some((&self.send_mr, off, RESPONSE_LEN)),
            signaled: true,
        };
        if let Err(e) = self.id.post_send(&[send]) {
            self.send_free.push(slot);
            self.broken
                .get_or_insert(format!("cannot post a hostile extra message: {e}"));
            return false;
        }
        true
    }

    /// Posts the response (after the RDMA Write of `data_buf`, for reads).
    fn respond(
        &mut self,
        t: &Target,
        req: &Request,
        status: Status,
        crc: u32,
        data_buf: Option<usize>,
    ) {
        let mut waited = false;
        while !self.resp_credits.try_consume() {
            if !waited {
                Stats::inc(&t.stats.credit_waits);
                waited = true;
            }
            if self.gone() {
                return;
            }
            self.drive(t, Some(TICK));
        }
        while self.send_free.is_empty() {
            if self.gone() {
                return;
            }
            self.drive(t, Some(TICK));
        }
        let Some(slot) = self.send_free.pop() else {
            return;
        };
        let resp = t.response(req, status, crc);
        let invalidate = req.buf.rkey != 0 && !t.limits.no_invalidate;
        let hostile = self.chooser.pick(
            &t.limits.hostile,
            &t.hostile_turn,
            &Candidate {
                tcp: false,
                opcode: req.opcode,
                ok: status == Status::Ok,
                invalidates: invalidate,
                spare_send: self.resp_credits.available() > 0 && !self.send_free.is_empty(),
            },
        );
        if let Some(k) = hostile {
            t.count_hostile(k);
        }
        if hostile == Some(Kind::UnknownTag) {
            self.post_extra(&hostile::unknown_tag(&resp).to_bytes());
            if self.broken.is_some() {
                self.send_free.push(slot);
                if let Some(b) = data_buf {
                    self.data_free.push(b);
                }
                return;
            }
        }
        let mut msg = resp.to_bytes();
        let mut len = RESPONSE_LEN;
        let mut op = if invalidate {
            SendOp::SendInv { rkey: req.buf.rkey }
        } else {
            SendOp::Send
        };
        match hostile {
            // The response still names the request's rkey, so the client can see that the
            // invalidated one differs.
            Some(Kind::WrongRkey) => {
                op = SendOp::SendInv {
                    rkey: req.buf.rkey ^ hostile::WRONG_RKEY_XOR,
                }
            }
            Some(Kind::NoInvalidate) => op = SendOp::Send,
            Some(Kind::BadStatus) => msg = hostile::bad_status(&resp),
            Some(Kind::LongLength) => msg = hostile::long_length(&resp).to_bytes(),
            Some(Kind::CreditOverflow) => msg = hostile::credit_overflow(&resp).to_bytes(),
            Some(Kind::Truncated) => len = hostile::TRUNCATED_LEN,
            // Random bytes name no request and no rkey: nothing to invalidate.
            Some(Kind::Garbage) => {
                msg = hostile::garbage_response(&mut self.rng);
                op = SendOp::Send;
            }
            _ => {}
        }
        let invalidated = matches!(op, SendOp::SendInv { .. });
        // The late write reads the data buffer after the Send has completed, so it, not the
        // Send, gives the buffer back.
        let late = match (hostile, data_buf) {
            (Some(Kind::LateWrite), Some(b)) => Some(b),
            _ => None,
        };
        let off = slot * SLOT;
        self.send_mr[off..off + len].copy_from_slice(&msg[..len]);
        let send = SendWr {
            wr_id: wr_id(K_SEND, if late.is_some() { None } else { data_buf }, slot),
            op,
            local: Some((&self.send_mr, off, len)),
            signaled: true,
        };
        let n = req.length as usize;
        let mut wrs = Vec::with_capacity(3);
        if let Some(b) = data_buf {
            wrs.push(SendWr {
                wr_id: 0,
                op: SendOp::RdmaWrite {
                    remote_addr: req.buf.addr,
                    rkey: req.buf.rkey,
                },
                local: Some((&self.data_mr, b * self.max_io, n)),
                signaled: false,
            });
        }
        wrs.push(send);
        if let Some(b) = late {
            // The same bytes again, to the same place: if the client's HCA wrongly lets it in,
            // it rewrites data the client already has rather than corrupting it.
            wrs.push(SendWr {
                wr_id: wr_id(K_LATE, Some(b), 0),
                op: SendOp::RdmaWrite {
                    remote_addr: req.buf.addr,
                    rkey: req.buf.rkey,
                },
                local: Some((
                    &self.data_mr,
                    b * self.max_io,
                    hostile::LATE_WRITE_LEN.min(n),
                )),
                signaled: true,
            });
        }
        if let Err(e) = self.id.post_send(&wrs) {
            self.send_free.push(slot);
            if let Some(b) = data_buf {
                self.data_free.push(b);
            }
            self.broken
                .get_or_insert(format!("cannot post a response: {e}"));
            return;
        }
        if data_buf.is_some() {
            Stats::inc(&t.stats.rdma_writes);
            Stats::add(&t.stats.rdma_write_bytes, n as u64);
        }
        if late.is_some() {
            self.late_rkeys.push_back(req.buf.rkey);
        }
        Stats::inc(if invalidated {
            &t.stats.send_with_inv
        } else {
            &t.stats.plain_sends
        });
        if hostile == Some(Kind::DupResponse) {
            self.post_extra(&hostile::duplicate(&resp).to_bytes());
        }
    }
}
