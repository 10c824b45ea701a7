//! The RDMA transport: an rdma_cm listener, and per connection one RC QP and one thread running
//! the connection's io_uring, which waits on the QP's completions and the backing I/O at once.
//!
//! A connection posts `credits` receives (the HelloReply's `initial_credits`). A receive is
//! reposted only when its request is done, just before the response that grants its credit
//! back, so a client can never have more requests at the target than it has credits: one
//! that sends more finds no receive (an RNR error on its side), and nothing is buffered.
//! Write data is pulled with RDMA Read, read data pushed with RDMA Write chained before the
//! response; every response is a Send-with-Invalidate of the request's rkey (rkey 0: a plain
//! Send). Responses spend the client's response credits (Hello.recv_credits plus the `credits`
//! of each Request) and wait when none is left. Many requests are in flight at once; their
//! completions, not their arrival order, drive the responses. In hostile mode (tests only) a
//! response may be altered, accompanied by an extra Send, or followed by a late RDMA Write.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use rdmadisk_net::rdma::{
    self, Access, CmEventKind, CmId, CompChannel, ConnParams, Cq, EventChannel, Mr, Pd, QpCaps,
    SendOp, SendWr,
};
use rdmadisk_proto::credits::CreditSender;
use rdmadisk_proto::wire::{
    ClientMsg, Hello, HelloReply, HelloStatus, Status, AUTH_REPLY_LEN, REQUEST_LEN, RESPONSE_LEN,
};

use crate::conn::{Core, Stage, TICK, UD_CQ, UD_KIND, UD_SCQ, UD_WAKE};
use crate::engine::{
    rdma_conn_bytes, rdma_recv_slot, Challenge, Slot as CapSlot, Target, RDMA_SLOT, RDMA_SPARE,
};
use crate::hostile::{self, Candidate, Chooser, Kind, Rng};
use crate::pool::{Budget, Pool, Reservation};
use crate::ring::Done;
use crate::stats::Stats;
use crate::wake::Wake;

/// CQ entries beyond the work requests that can complete on it.
const CQ_SPARE: u32 = 8;

/// Largest RDMA Read a write's data is pulled with. A read whose responses show a gap waits
/// for the ACK timeout before it asks again for the rest, while a later read's response
/// exposes the gap at once; and every retry of a read resends its whole rest.
const READ_CHUNK: usize = 64 << 10;
/// (The sizes of a connection's own buffers are the engine's: they count in the budget,
/// which `--check-config` checks without RDMA.)
const SLOT: usize = RDMA_SLOT;
const SPARE: usize = RDMA_SPARE;
const _: () = assert!(AUTH_REPLY_LEN <= SLOT && rdmadisk_proto::wire::AUTH_REQUEST_LEN <= SLOT);

const K_RECV: u64 = 1;
const K_SEND: u64 = 2;
const K_READ: u64 = 3;
/// A hostile late RDMA Write; the slot's buffer is in use until it completes.
const K_LATE: u64 = 4;
/// A hostile extra message, from a spare send buffer.
const K_EXTRA: u64 = 5;

fn wr_id(kind: u64, index: usize) -> u64 {
    (kind << 56) | index as u64
}

fn wr_kind(id: u64) -> u64 {
    id >> 56
}

fn wr_index(id: u64) -> usize {
    (id & 0xffff_ffff) as usize
}

struct Shared {
    disconnected: AtomicBool,
    /// rdma_cm said the connection is established (the client's RTU came).
    established: AtomicBool,
    /// Signalled with `disconnected`, to wake the connection's thread (None: it ticks, see
    /// `Conn::wait_limit`).
    wake: Option<Wake>,
}

type ConnMap = Arc<Mutex<HashMap<usize, Arc<Shared>>>>;

/// What connections on one device share: its protection domain, and the data buffers
/// registered in it.
struct Device {
    pd: Arc<Pd>,
    pool: Arc<Pool>,
    limits: rdma::DeviceLimits,
    /// The device's completion vectors, and how many connections' CQs were put on them.
    vectors: i32,
    cqs: AtomicUsize,
}

impl Device {
    /// The completion vector for the next connection's CQs.
    fn next_vector(&self) -> i32 {
        comp_vector(self.cqs.fetch_add(1, Ordering::Relaxed), self.vectors)
    }
}

/// The completion vector of a device's `turn`-th connection: round-robin over its `vectors`,
/// so that the connections' completion interrupts spread over the CPUs those are bound to,
/// rather than all land on the first. A device that reports none gets 0.
fn comp_vector(turn: usize, vectors: i32) -> i32 {
    match usize::try_from(vectors) {
        Ok(n) if n > 0 => (turn % n) as i32,
        _ => 0,
    }
}

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
    pub fn serve(self, t: Arc<Target>, budget: Arc<Budget>) {
        let conns: ConnMap = Arc::new(Mutex::new(HashMap::new()));
        let mut devices: HashMap<usize, Arc<Device>> = HashMap::new();
        let mut threads: Vec<thread::JoinHandle<()>> = Vec::new();
        loop {
            threads.retain(|h| !h.is_finished());
            if t.stopping() && threads.is_empty() {
                break;
            }
            // Woken by a cm event or the stop (then a tick at a time, until the connections
            // are gone).
            let stop = if t.stopping() { None } else { t.stop_fd() };
            match crate::wake::readable(&[Some(self.ch.fd()), stop], Some(t.idle_wait())) {
                Ok(m) if m & 1 == 0 => continue,
                _ => {}
            }
            let mut ev = match self.ch.next_event(Some(Duration::ZERO)) {
                Ok(Some(ev)) => ev,
                Ok(None) => continue,
                Err(e) => {
                    log::error!("rdma: rdma_get_cm_event failed: {e}");
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
                    match setup(&t, id, &private, &mut devices, &budget) {
                        Ok(conn) => {
                            let shared = conn.shared.clone();
                            let key = conn.id.raw_id();
                            conns
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .insert(key, shared);
                            let map = conns.clone();
                            let name = format!("rdma-{}", conn.peer);
                            match thread::Builder::new().name(name).spawn(move || {
                                crate::conn::serve(move || {
                                    // Out of the map before the id is destroyed: a new id may
                                    // get the same address, and its events must find its own
                                    // entry.
                                    conn.run(move || {
                                        map.lock()
                                            .unwrap_or_else(PoisonError::into_inner)
                                            .remove(&key);
                                    });
                                })
                            }) {
                                Ok(h) => threads.push(h),
                                Err(e) => {
                                    // The connection went with the closure: its entry too.
                                    conns
                                        .lock()
                                        .unwrap_or_else(PoisonError::into_inner)
                                        .remove(&key);
                                    log::error!("rdma: cannot start a connection thread: {e}")
                                }
                            }
                        }
                        Err(()) => Stats::inc(&t.stats.refused),
                    }
                }
                // A connection accepted but never established (the client gave up, or its
                // RTU never came: rdma_cm reports the REP's retries running out) ends like a
                // disconnected one: it has built nothing yet, and keeps nothing.
                k @ (CmEventKind::Disconnected
                | CmEventKind::DeviceRemoval
                | CmEventKind::ConnectError
                | CmEventKind::Unreachable
                | CmEventKind::Rejected) => {
                    let key = ev.raw_id();
                    if let Some(s) = conns
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .get(&key)
                    {
                        if !matches!(k, CmEventKind::Disconnected | CmEventKind::DeviceRemoval) {
                            log::warn!(
                                "rdma: a connection did not establish: cm event {k:?} (status {})",
                                ev.status()
                            );
                        }
                        s.disconnected.store(true, Ordering::SeqCst);
                        if let Some(w) = &s.wake {
                            w.signal();
                        }
                    }
                }
                CmEventKind::Established => {
                    if let Some(s) = conns
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .get(&ev.raw_id())
                    {
                        s.established.store(true, Ordering::SeqCst);
                    }
                }
                CmEventKind::TimewaitExit => {}
                k => log::info!("rdma: cm event {k:?} (status {})", ev.status()),
            }
        }
        drop(self.id);
    }
}

fn refuse(id: &CmId, peer: &str, st: HelloStatus, why: &str) {
    refuse_with(id, peer, &HelloReply::rejected(st), why);
}

fn refuse_with(id: &CmId, peer: &str, reply: &HelloReply, why: &str) {
    log::warn!("rdma: refused connection from {peer}: {why}");
    if let Err(e) = id.reject(reply.to_bytes().as_bytes()) {
        log::warn!("rdma: rdma_reject failed: {e}");
    }
}

/// The device of `id`, its PD and buffer pool made on first use.
fn device_of(
    t: &Target,
    id: &CmId,
    devices: &mut HashMap<usize, Arc<Device>>,
    budget: &Arc<Budget>,
) -> io::Result<Arc<Device>> {
    let key = id
        .device_key()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "no device"))?;
    if let Some(d) = devices.get(&key) {
        return Ok(d.clone());
    }
    let pd = id.alloc_pd()?;
    let limits = rdma::device_limits(&pd)?;
    let pool = Pool::registered(t.limits.max_io_bytes as usize, &pd, budget);
    let vectors = pd.num_comp_vectors();
    let d = Arc::new(Device {
        pd,
        pool,
        limits,
        vectors,
        cqs: AtomicUsize::new(0),
    });
    devices.insert(key, d.clone());
    Ok(d)
}

fn setup(
    t: &Arc<Target>,
    mut id: CmId,
    private: &[u8],
    devices: &mut HashMap<usize, Arc<Device>>,
    budget: &Arc<Budget>,
) -> Result<Conn, ()> {
    let peer_addr = id.peer_addr();
    let peer = peer_addr.map_or_else(|| "?".to_string(), |a| a.to_string());
    // The address first, before the Hello is even looked at.
    if let Some(a) = peer_addr {
        if !t.admits(a.ip()) {
            refuse(
                &id,
                &peer,
                HelloStatus::NotAllowed,
                "address not on the allow-list",
            );
            return Err(());
        }
    }
    let cap = match peer_addr {
        Some(a) => t.connection_slot(a.ip()),
        None => t.connection_slot(std::net::Ipv4Addr::UNSPECIFIED.into()),
    };
    let Some(cap) = cap else {
        refuse(&id, &peer, HelloStatus::Busy, "too many connections");
        return Err(());
    };
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
        refuse(
            &id,
            &peer,
            HelloStatus::Busy,
            "RDMA refused for client sessions (--refuse-rdma-file is present)",
        );
        return Err(());
    }
    let a = match t.attach(peer_addr, id.local_addr(), &hello) {
        Ok(a) => a,
        Err(r) if r.status == HelloStatus::Stale => {
            refuse_with(
                &id,
                &peer,
                &r.reply(),
                &format!(
                    "stale hello from {peer} for export {}: {}",
                    hello.export, r.why
                ),
            );
            return Err(());
        }
        Err(r) => {
            refuse_with(
                &id,
                &peer,
                &r.reply(),
                &format!("export {:?}: {}", hello.export.as_str(), r.why),
            );
            return Err(());
        }
    };
    // With a key, after the proof (`Conn::authenticate`, on the connection's thread). Here it
    // blocks the listener's thread, and so every other connect, for as long as a takeover
    // takes (a second or two; the other connections of the session then find the lock held,
    // which asks the OSDs once): connection set-up happens on this thread, and the
    // connection's own thread only starts once its id is accepted.
    if a.challenge.is_none() {
        if let Err(why) = t.claim(&a.export, a.writes, &peer) {
            refuse(&id, &peer, HelloStatus::Busy, &why);
            return Err(());
        }
    }
    let credits = usize::from(t.limits.credits);
    // The connection's own buffers count in the budget like its requests' data: at the
    // largest settings they pin about 64 MiB.
    let bytes = rdma_conn_bytes(credits, t.limits.inline_max);
    let Some(mem) = t.budget.reserve(bytes) else {
        Stats::inc(&t.stats.memory_refusals);
        let (used, _) = t.budget.used();
        refuse(
            &id,
            &peer,
            HelloStatus::Busy,
            &format!(
                "its receive and send buffers ({bytes} bytes) do not fit in buffer_memory ({used} of {} bytes held, {} by connections)",
                t.budget.max(),
                t.budget.fixed()
            ),
        );
        return Err(());
    };
    let slots = 2 * credits;
    let send_bufs = slots + SPARE;
    // Per slot at most an RDMA Write, a Send and a late write, or the last part of its RDMA
    // Reads; the whole reads of a window; extras.
    let window = t.limits.rdma_window.max(t.limits.max_io_bytes as usize);
    let send_wr = (slots * 3 + SPARE + window.div_ceil(READ_CHUNK)) as u32;
    let recv_wr = credits as u32;
    let fail = |id: CmId, why: String| {
        log::error!("rdma: cannot set up a connection for {peer}: {why}");
        let _ = id.reject(
            HelloReply::rejected(HelloStatus::Busy)
                .to_bytes()
                .as_bytes(),
        );
        // `id` (and a QP made on it) goes here, before the buffers its receives named.
        drop(id);
        Err(())
    };
    let dev = match device_of(t, &id, devices, budget) {
        Ok(d) => d,
        Err(e) => return fail(id, e.to_string()),
    };
    let l = dev.limits;
    if send_wr > l.max_qp_wr || send_wr.max(recv_wr) + CQ_SPARE > l.max_cqe {
        return fail(
            id,
            format!(
                "credits={credits} needs {send_wr} send work requests and a CQ of {} entries; the device allows {} and {}: lower --credits or --rdma-window",
                send_wr.max(recv_wr) + CQ_SPARE,
                l.max_qp_wr,
                l.max_cqe
            ),
        );
    }
    let rslot = rdma_recv_slot(t.limits.inline_max);
    let mrs = Mr::new(&dev.pd, credits * rslot, Access::LOCAL_WRITE)
        .and_then(|r| Ok((r, Mr::new(&dev.pd, send_bufs * SLOT, Access::LOCAL_WRITE)?)));
    let (recv_mr, send_mr) = match mrs {
        Ok(m) => m,
        Err(e) => return fail(id, e.to_string()),
    };
    // Two CQs, each with its own channel: receives wake the connection always, but the
    // completions of response Sends only when something waits for them (`Conn::need_sends`).
    // At queue depth 1 that halves the wake-ups: the Send's completion is reaped with the next
    // request instead of waking the thread on its own (docs/design.md, "The target").
    // Both on one completion vector (one thread waits on both), each connection on the next.
    let vector = dev.next_vector();
    let res = (|| -> io::Result<(Arc<Cq>, Arc<Cq>)> {
        let cq = Cq::on_vector(
            &dev.pd,
            recv_wr + CQ_SPARE,
            Some(&CompChannel::new(&dev.pd)?),
            vector,
        )?;
        let scq = Cq::on_vector(
            &dev.pd,
            send_wr + CQ_SPARE,
            Some(&CompChannel::new(&dev.pd)?),
            vector,
        )?;
        // A poll of a channel says it is readable; if ever it said so without an event, taking
        // one must not block the thread.
        cq.events_nonblocking()?;
        scq.events_nonblocking()?;
        id.create_qp(
            &dev.pd,
            &scq,
            &cq,
            QpCaps {
                max_send_wr: send_wr,
                max_recv_wr: recv_wr,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
        )?;
        for r in 0..credits {
            id.post_recv(wr_id(K_RECV, r), &recv_mr, r * rslot, rslot)?;
        }
        let reply = HelloReply {
            max_inline: t.limits.inline_max,
            ..a.reply(t)
        }
        .to_bytes();
        // `ack_timeout_exp` (config.rs, DEFAULT_ACK_TIMEOUT_EXP says why 0.54 s): how long an
        // RDMA Read or Write may make no progress before it is sent again; 7 retries of it
        // bound a peer that is really gone.
        id.set_ack_timeout(t.limits.ack_timeout_exp)?;
        id.accept(&ConnParams {
            private_data: reply.as_bytes(),
            responder_resources: 0xff,
            initiator_depth: l.max_qp_init_rd_atom.min(0xff) as u8,
            retry_count: 7,
            rnr_retry_count: 0,
        })?;
        Ok((cq, scq))
    })();
    let (cq, scq) = match res {
        Ok(p) => p,
        Err(e) => return fail(id, e.to_string()),
    };
    let challenge = a.challenge;
    let mut core = match Core::new(
        t.clone(),
        a.export,
        a.fence,
        a.writes,
        dev.pool.clone(),
        slots,
    ) {
        Ok(c) => c,
        Err(e) => {
            log::error!("rdma: cannot set up the ring of a connection for {peer}: {e}");
            let _ = id.disconnect();
            drop(id);
            return Err(());
        }
    };
    log::info!(
        "rdma: {peer} attached to export {} (queue {}/{}, {credits} credits, client recv credits {}, session {} epoch {}, CQs on completion vector {vector} of {})",
        core.export.name, hello.queue_id, hello.queue_count, hello.recv_credits, hello.session_id, hello.epoch, dev.vectors.max(1)
    );
    Stats::inc(&t.stats.rdma_connections);
    core.register(crate::registry::Attach {
        export: core.export.name.clone(),
        peer: peer_addr,
        transport: crate::registry::Transport::Rdma,
        session: hello.session_id,
        epoch: hello.epoch,
        queue: hello.queue_id,
        queues: hello.queue_count,
        read_write: core.writes,
    });
    Ok(Conn {
        id,
        core,
        recv_mr,
        rslot,
        send_mr,
        _mem: mem,
        cq,
        scq,
        _dev: dev,
        _cap: cap,
        peer,
        recv_of: vec![None; slots],
        backlog: VecDeque::new(),
        pending: vec![0; slots],
        wire: 0,
        wire_of: vec![0; slots],
        spare_free: (0..SPARE).collect(),
        resp_credits: CreditSender::new(hello.recv_credits),
        waiting_since: None,
        chooser: Chooser::default(),
        rng: Rng::new(u64::from(peer_addr.map_or(0, |a| a.port()))),
        late_rkeys: VecDeque::new(),
        batch: Vec::new(),
        armed: false,
        sarmed: false,
        polled: false,
        spolled: false,
        multishot: true,
        early: Early::default(),
        reads_out: 0,
        last_rx: Instant::now(),
        broken: None,
        hostile_reset: false,
        keyed: challenge.is_some(),
        auth: challenge,
        auth_deadline: Instant::now() + t.limits.hello_timeout,
        denied: None,
        heard: false,
        shared: Arc::new(Shared {
            disconnected: AtomicBool::new(false),
            established: AtomicBool::new(false),
            wake: Wake::new().ok(),
        }),
    })
}

/// A work request of the send queue, planned by `Conn::fetch` (RDMA Reads) or `Conn::respond`
/// (RDMA Writes and Sends) and posted by `Conn::post_batch` with the others of the same pass.
#[derive(Clone, Copy)]
struct WrPlan {
    wr_id: u64,
    op: PlanOp,
    /// The local buffer: which, offset, length.
    local: (Local, usize, usize),
    signaled: bool,
}

#[derive(Clone, Copy)]
enum PlanOp {
    Send,
    SendInv(u32),
    /// RDMA Write to (remote address, rkey).
    Write(u64, u32),
    /// RDMA Read from (remote address, rkey): a write's data.
    Read(u64, u32),
}

#[derive(Clone, Copy)]
enum Local {
    /// The connection's send buffer.
    Send,
    /// Slot `j`'s data buffer.
    Data(usize),
}

/// Whether a pass submits the backing I/O it queued ahead of its wait (an `io_uring_enter`
/// of its own, before the CQs are armed), or leaves it to the wait's submit-and-wait (one
/// system call for both). Ahead pays when the submission brings completions back: a store
/// that completes within it (a RAM disk, the page cache) gets its response posted in the same
/// pass, before the arming and the wait. After [`Early::MISSES`] submissions in a row that
/// brought none (a store that takes its time, where ahead only costs a system call), I/O
/// goes with the wait, but for one pass in [`Early::PROBE`], which looks again.
#[derive(Default)]
struct Early {
    /// Submissions ahead in a row that brought no completion back.
    misses: u32,
    /// Passes that left their I/O to the wait since the last look.
    folded: u32,
}

impl Early {
    const MISSES: u32 = 4;
    const PROBE: u32 = 64;

    /// Whether to submit ahead now (queued I/O is waiting).
    fn now(&mut self) -> bool {
        if self.misses < Self::MISSES {
            return true;
        }
        self.folded += 1;
        if self.folded >= Self::PROBE {
            self.folded = 0;
            return true;
        }
        false
    }

    /// A submission ahead brought `n` backing completions back.
    fn came(&mut self, n: usize) {
        if n > 0 {
            self.misses = 0;
        } else {
            self.misses = self.misses.saturating_add(1);
        }
    }
}

/// One RDMA connection. Field order is drop order: the QP (in `id`) goes first, so that no
/// work request can touch memory after it; then `core`, which drains its ring and gives the
/// data buffers back; then the message buffers.
struct Conn {
    id: CmId,
    core: Core,
    recv_mr: Mr,
    /// Bytes per receive ([`rdma_recv_slot`]).
    rslot: usize,
    send_mr: Mr,
    /// The message buffers' share of the buffer budget.
    _mem: Reservation,
    /// Receives.
    cq: Arc<Cq>,
    /// Send-queue work: RDMA Reads, response Sends (with their RDMA Writes), extras.
    scq: Arc<Cq>,
    _dev: Arc<Device>,
    _cap: CapSlot,
    peer: String,
    /// The receive each request slot came in on, reposted with its response.
    recv_of: Vec<Option<usize>>,
    /// Requests that came while every slot was taken (their responses' Sends not yet
    /// acknowledged): started as slots free up. Their receives are not reposted meanwhile, so
    /// this never holds more than the credits.
    backlog: VecDeque<(usize, rdmadisk_proto::wire::Request)>,
    /// Work requests of each slot still to complete before it is released.
    pending: Vec<u32>,
    /// Bytes of RDMA Reads and Writes posted and not yet completed (`Limits::rdma_window`),
    /// and each slot's share of them.
    wire: usize,
    wire_of: Vec<usize>,
    spare_free: Vec<usize>,
    resp_credits: CreditSender,
    /// Since when a response has waited for a response credit.
    waiting_since: Option<Instant>,
    chooser: Chooser,
    rng: Rng,
    /// rkeys of the late writes in flight, oldest first.
    late_rkeys: VecDeque<u32>,
    /// The responses of this pass, not yet posted.
    batch: Vec<WrPlan>,
    /// The receive CQ is armed: its channel gets an event at its next completion, which has
    /// not been taken yet. It is armed again only once it has (an arm per event).
    armed: bool,
    /// The same for the send CQ.
    sarmed: bool,
    /// A poll of the receive CQ's channel is on the ring: multishot, so it stays there and
    /// completes at each event, unless the kernel has none (then one shot per event).
    polled: bool,
    /// The same for the send CQ.
    spolled: bool,
    /// The kernel takes multishot polls (false after one was refused).
    multishot: bool,
    /// Whether backing I/O is submitted ahead of the wait (see [`Early`]).
    early: Early,
    /// Slots whose RDMA Reads are posted and not yet complete.
    reads_out: usize,
    last_rx: Instant,
    broken: Option<String>,
    /// `broken` is the expected end of a hostile late write, not a fault.
    hostile_reset: bool,
    /// The client has yet to answer this challenge; nothing else is served until it has.
    auth: Option<Challenge>,
    auth_deadline: Instant,
    /// The spare buffer carrying a Denied answer: the connection goes once it is sent.
    denied: Option<usize>,
    /// The connection must authenticate (it is trusted once it has); otherwise it is
    /// trusted once it is up.
    keyed: bool,
    /// Something came from the client: the connection is up, whatever rdma_cm has said yet.
    heard: bool,
    shared: Arc<Shared>,
}

impl Conn {
    fn gone(&self) -> bool {
        self.broken.is_some() || self.shared.disconnected.load(Ordering::SeqCst)
    }

    fn run(mut self, unmap: impl FnOnce()) {
        let t = self.core.t.clone();
        let mut wake_polled = false;
        if let Some(fd) = self.shared.wake.as_ref().map(Wake::fd) {
            wake_polled = self.core.ring.poll_in(fd, UD_WAKE).is_ok();
        }
        let mut other = Vec::new();
        let mut stop_at = None;
        let end: Option<String> = loop {
            self.pump();
            if self.gone() {
                // A rejected or unanswered accept flushes the QP too: that is no failure of
                // its own.
                let flushed = matches!(self.broken.as_deref(), None | Some("queue pair flushed"));
                if flushed && !self.heard && !self.shared.established.load(Ordering::SeqCst) {
                    self.broken = None;
                    Stats::inc(&t.stats.half_open_closes);
                    break Some(
                        "never established (the client rejected or did not answer the accept)"
                            .to_string(),
                    );
                }
                break None;
            }
            let now = Instant::now();
            if self.core.leaving() {
                let at = *stop_at.get_or_insert(now + t.limits.shutdown_timeout);
                if self.core.working() == 0 {
                    break self.core.evicted();
                }
                if now >= at {
                    break Some("still busy at the end of the shutdown timeout".to_string());
                }
            }
            if let Some(since) = self.waiting_since {
                if now.duration_since(since) > t.limits.send_timeout {
                    Stats::inc(&t.stats.send_timeouts);
                    break Some(format!(
                        "no response credit from the client for {} s",
                        t.limits.send_timeout.as_secs()
                    ));
                }
            }
            // A connection the client never completes (its RTU lost, the client gone before
            // it) goes at the Hello deadline, like a TCP client that never sends its Hello.
            let up = self.heard || self.shared.established.load(Ordering::SeqCst);
            if !up && now > self.auth_deadline {
                Stats::inc(&t.stats.half_open_closes);
                break Some("never established within the Hello deadline".to_string());
            }
            // With no key, a connection from a reserved port is trusted once it is up: it
            // takes its hold and its fence before its first request can come.
            if up && !self.keyed {
                if let Err(why) = self.core.confirm() {
                    break Some(why.to_string());
                }
            }
            if self.auth.is_some() && now > self.auth_deadline {
                Stats::inc(&t.stats.hello_timeouts);
                break Some("no authentication within the deadline".to_string());
            }
            if let Some(idle) = t.limits.idle_timeout {
                if self.core.busy() == 0 && now.duration_since(self.last_rx) > idle {
                    Stats::inc(&t.stats.idle_closes);
                    break Some(format!("idle for {} s (no keepalive)", idle.as_secs()));
                }
            }
            other.clear();
            let wait = self.wait_limit(now);
            if let Err(e) = self.core.turn(Some(wait), &mut other) {
                break Some(format!("ring: {e}"));
            }
            self.channel_events(&mut other);
        };
        if let Some(why) = end {
            self.broken.get_or_insert(why);
        }
        // Pick up error completions that raced with a disconnect, for the log and the counters.
        self.poll_cq();
        if self.broken.as_deref() == Some("queue pair flushed") {
            self.broken = None;
        }
        let events = self._dev.pd.drain_async_events();
        if !events.is_empty() {
            log::warn!("rdma: {}: async events: {}", self.peer, events.join(", "));
        }
        let evicted = self.core.evicted();
        match &self.broken {
            Some(why) if evicted.as_ref() == Some(why) => {
                log::info!("rdma: {}: {why}; disconnecting it", self.peer);
            }
            Some(why) => {
                log::warn!("rdma: {}: {why}; resetting this connection", self.peer);
                if self.hostile_reset {
                    Stats::inc(&t.stats.hostile_resets);
                } else if self.denied.is_none() {
                    // (A failed authentication is counted in auth_failures.)
                    Stats::inc(&t.stats.resets);
                }
            }
            None => log::info!("rdma: {} disconnected", self.peer),
        }
        let _ = self.id.disconnect();
        // The polls of the CQs' channels would never end once the QP and CQs are gone: cancel
        // them, so that the ring drains (dropping `core`) without waiting for them.
        if self.polled {
            let _ = self.core.ring.cancel(UD_CQ);
        }
        if self.spolled {
            let _ = self.core.ring.cancel(UD_SCQ);
        }
        if wake_polled && !self.shared.disconnected.load(Ordering::SeqCst) {
            let _ = self.core.ring.cancel(UD_WAKE);
        }
        unmap();
    }

    /// How long the connection may sleep: a tick while anything is under way or has a
    /// deadline; otherwise until its own events (a request, the peer going: its receives
    /// are flushed), the target's stop, or its idle deadline.
    fn wait_limit(&self, now: Instant) -> Duration {
        let t = &self.core.t;
        if self.core.busy() > 0
            || !self.backlog.is_empty()
            || self.waiting_since.is_some()
            || self.auth.is_some()
            || self.gone()
            || self.core.leaving()
            || self.shared.wake.is_none()
            || t.starved()
        {
            return TICK;
        }
        let wait = self.core.idle_wait();
        match t.limits.idle_timeout {
            Some(idle) => wait.min(
                idle.saturating_sub(now.duration_since(self.last_rx)) + Duration::from_millis(10),
            ),
            None => wait,
        }
    }

    /// Takes the events of the CQ channels whose polls completed on the ring.
    fn channel_events(&mut self, other: &mut Vec<Done>) {
        for d in other.drain(..) {
            let (cq, armed, polled) = match d.user_data & UD_KIND {
                UD_CQ => (&self.cq, &mut self.armed, &mut self.polled),
                UD_SCQ => (&self.scq, &mut self.sarmed, &mut self.spolled),
                _ => continue,
            };
            if !d.more {
                *polled = false;
            }
            if d.result == -libc::EINVAL && self.multishot {
                // A kernel without multishot polls (before 5.13): one shot per event from now
                // on, the first added at once (`add_polls`).
                self.multishot = false;
                continue;
            }
            if d.result < 0 || d.result & i32::from(libc::POLLIN) == 0 {
                // An error on the channel (the device going away, say): the connection is over.
                self.broken
                    .get_or_insert(format!("the CQ channel failed (poll {})", d.result));
                continue;
            }
            match cq.take_event() {
                Ok(true) => *armed = false,
                // Not an event (the channel does not block): still armed.
                Ok(false) => {}
                Err(e) => {
                    self.broken.get_or_insert(format!("CQ event: {e}"));
                }
            }
        }
    }

    /// Polls the CQs for up to `poll_us` (`Limits::poll`) before the pass arms them and
    /// sleeps, without a system call: a completion that comes meanwhile (at queue depth 1,
    /// the client's next request) then costs no arm, no wait and no event to take. Ends early
    /// when the ring has something (the wait would return at once). True if it found a
    /// completion (taken, as by `poll_cq`).
    ///
    /// Off by default: a spin holds the CPU the whole time, and on a storage host with one
    /// CPU, with soft-RoCE, the completion it waits for comes from a kernel worker that
    /// cannot run while it spins.
    fn spin(&mut self) -> bool {
        let limit = self.core.t.limits.poll;
        if limit.is_zero() {
            return false;
        }
        let t0 = Instant::now();
        let mut turns = 0u32;
        let found = loop {
            if self.poll_cq() > 0 {
                break true;
            }
            if self.gone() || self.core.ring.pending() {
                break false;
            }
            turns = turns.wrapping_add(1);
            // The clock every few polls: a CQ poll is cheaper than reading it.
            if turns % 16 == 0 && t0.elapsed() >= limit {
                break false;
            }
            std::hint::spin_loop();
        };
        let st = &self.core.t.stats;
        Stats::inc(&st.spins);
        Stats::add(&st.spin_us, crate::stats::micros(t0.elapsed()));
        if found {
            Stats::inc(&st.spin_hits);
        }
        found
    }

    /// Puts a poll of each armed CQ's channel on the ring, where there is none yet: then an
    /// event wakes the thread.
    fn add_polls(&mut self) -> Result<(), String> {
        let multishot = self.multishot;
        for (cq, ud, armed, polled) in [
            (&self.cq, UD_CQ, self.armed, &mut self.polled),
            (&self.scq, UD_SCQ, self.sarmed, &mut self.spolled),
        ] {
            if !armed || *polled {
                continue;
            }
            let Some(fd) = cq.channel_fd() else {
                continue;
            };
            let r = if multishot {
                self.core.ring.poll_in_multi(fd, ud)
            } else {
                self.core.ring.poll_in(fd, ud)
            };
            r.map_err(|e| format!("cannot wait for the CQ: {e}"))?;
            *polled = true;
        }
        Ok(())
    }

    /// Applies completions and moves every request along that can move.
    fn pump(&mut self) {
        // Submissions ahead of the wait, per pass (a ring that cannot take them now, its
        // completion queue full, gets them at the wait instead).
        let mut early = 8;
        // The pass took completions off the CQs: more may follow soon (see `spin`).
        let mut busy = false;
        loop {
            busy |= self.poll_cq() > 0;
            self.core.poll_waiting();
            self.fetch();
            self.answer();
            if self.gone() {
                return;
            }
            // Backing I/O just queued goes now, before the CQs are armed, where that pays: a
            // fast store (a RAM disk, the page cache) completes it within the submission, and
            // its response is then posted in this same pass. With a store that takes its time
            // it goes with the wait instead, one system call for both.
            if early > 0 && self.core.ring.unsubmitted() && self.early.now() {
                early -= 1;
                let mut other = Vec::new();
                match self.core.turn(None, &mut other) {
                    Ok(n) => self.early.came(n),
                    Err(e) => {
                        self.broken.get_or_insert(format!("ring: {e}"));
                        return;
                    }
                }
                self.channel_events(&mut other);
                continue;
            }
            // Arm (once per event), then look once more: a completion may have come in
            // between (its event, if one follows, is taken when it comes).
            let arm_recv = !self.armed;
            let arm_send = !self.sarmed && self.need_sends();
            if arm_recv || arm_send {
                if busy && self.spin() {
                    continue;
                }
                for (cq, arm, armed) in [
                    (&self.cq, arm_recv, &mut self.armed),
                    (&self.scq, arm_send, &mut self.sarmed),
                ] {
                    if arm {
                        if let Err(e) = cq.arm() {
                            self.broken.get_or_insert(format!("cannot arm the CQ: {e}"));
                            return;
                        }
                        *armed = true;
                    }
                }
                if self.poll_cq() > 0 {
                    continue;
                }
            }
            if let Err(e) = self.add_polls() {
                self.broken.get_or_insert(e);
            }
            return;
        }
    }

    /// Whether anything waits for a completion of the send queue. Only then does the send CQ
    /// wake the connection; otherwise its completions (of response Sends, at rest) are reaped
    /// with the next receive, or at the next tick ([`crate::conn::TICK`]).
    fn need_sends(&self) -> bool {
        self.reads_out > 0
            || !self.backlog.is_empty()
            || self.core.waits_for_buffers()
            || self.core.t.starved()
            || !self.core.to_fetch.is_empty()
            || !self.core.to_answer.is_empty()
            || self.core.leaving()
            || self.denied.is_some()
            || !self.late_rkeys.is_empty()
            || self.spare_free.len() < SPARE
    }

    /// Takes every completion of both CQs, the send CQ's first (they free slots that the
    /// requests just received may need); returns how many.
    fn poll_cq(&mut self) -> usize {
        let mut wcs = Vec::new();
        let mut total = 0;
        for send in [true, false] {
            loop {
                wcs.clear();
                let cq = if send { &self.scq } else { &self.cq };
                match cq.poll(&mut wcs, 16) {
                    Ok(0) => break,
                    Ok(n) => total += n,
                    Err(e) => {
                        self.broken.get_or_insert(format!("CQ poll failed: {e}"));
                        return total;
                    }
                }
                for wc in &wcs {
                    self.completion(wc);
                }
            }
        }
        total
    }

    fn completion(&mut self, wc: &rdma::Completion) {
        let t = self.core.t.clone();
        let kind = wr_kind(wc.wr_id);
        let i = wr_index(wc.wr_id);
        if kind == K_LATE && wc.status != rdma::WC_WR_FLUSH_ERR {
            return self.late_write_done(wc, i);
        }
        if !wc.ok() {
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
            return;
        }
        match kind {
            K_RECV => self.received(wc, i),
            K_READ => {
                self.reads_out = self.reads_out.saturating_sub(1);
                self.off_wire(i);
                Stats::inc(&t.stats.rdma_reads);
                Stats::add(
                    &t.stats.rdma_read_bytes,
                    u64::from(self.core.slots[i].req.length),
                );
                self.core.data_in(i);
            }
            K_SEND | K_LATE => {
                // The Send follows the slot's RDMA Write on the queue: its completion is the
                // Write's too.
                if kind == K_SEND {
                    self.off_wire(i);
                }
                self.wr_done(i)
            }
            K_EXTRA => {
                self.spare_free.push(i);
                if self.denied == Some(i) {
                    self.broken.get_or_insert("authentication failed".into());
                }
            }
            _ => {}
        }
    }

    fn received(&mut self, wc: &rdma::Completion, r: usize) {
        self.last_rx = Instant::now();
        self.heard = true;
        let off = r * self.rslot;
        let len = (wc.byte_len as usize).min(self.rslot);
        let msg = match ClientMsg::decode(&self.recv_mr[off..off + len]) {
            Ok(m) => m,
            Err(e) => {
                self.broken
                    .get_or_insert(format!("malformed message ({e}, {} bytes)", wc.byte_len));
                return;
            }
        };
        if self.denied.is_some() {
            // Denied: nothing it sends now is served; the connection is on its way out.
            return;
        }
        let req = match msg {
            ClientMsg::Request(_) if self.auth.is_some() => {
                Stats::inc(&self.core.t.stats.auth_failures);
                self.broken
                    .get_or_insert("a request before authentication".into());
                return;
            }
            ClientMsg::Request(req) => req,
            ClientMsg::Auth(a) => return self.authenticate(r, &a),
        };
        // An inline write's data is what the Send carried after the request, all of it: the
        // receive is sized for `inline_max`, so a longer one could not have arrived whole.
        // (INLINE on anything else is refused with `Invalid` at admission.)
        if req.is_inline()
            && req.opcode == rdmadisk_proto::wire::Opcode::Write
            && (req.length > self.core.t.limits.inline_max
                || wc.byte_len as usize != REQUEST_LEN + req.length as usize)
        {
            self.broken.get_or_insert(format!(
                "malformed inline write ({} bytes of data announced, {} bytes received, at most {} inline)",
                req.length, wc.byte_len, self.core.t.limits.inline_max
            ));
            return;
        }
        self.resp_credits.grant(req.credits);
        if self.core.leaving() {
            // Shutting down: nothing new is started (the receive is not reposted either).
            return;
        }
        self.backlog.push_back((r, req));
        self.start_backlog();
    }

    /// Starts the requests that arrived, as far as free slots go.
    fn start_backlog(&mut self) {
        while !self.backlog.is_empty() {
            let Some(j) = self.core.free_slot() else {
                return;
            };
            let Some((r, req)) = self.backlog.pop_front() else {
                return;
            };
            self.recv_of[j] = Some(r);
            if let Err(why) = self.core.start(j, req, None) {
                self.recv_of[j] = None;
                self.broken.get_or_insert(why.into());
                return;
            }
        }
    }

    /// Answers the client's authentication (received on receive `r`) with the target's own
    /// proof, and the connection serves from now on; or with Denied, and it goes once that is
    /// sent.
    fn authenticate(&mut self, r: usize, a: &rdmadisk_proto::wire::AuthRequest) {
        let t = self.core.t.clone();
        self.resp_credits.grant(a.credits);
        let Some(ch) = self.auth.take() else {
            self.broken
                .get_or_insert("an authentication nobody asked for".into());
            return;
        };
        let (ok, reply) = ch.answer(&t, a);
        if ok {
            if let Err(why) = self.core.confirm() {
                self.broken.get_or_insert(why.into());
                return;
            }
            // No answer then: the client sees its connect fail, and may try another gateway.
            if let Err(why) = t.claim(&self.core.export, self.core.writes, &self.peer) {
                self.broken.get_or_insert(why);
                return;
            }
            self.core.instance = self.core.export.backing.instance();
        }
        if !self.repost(r) {
            return;
        }
        let Some(k) = self.spare_free.pop() else {
            self.broken
                .get_or_insert("no buffer to answer the authentication".into());
            return;
        };
        if !self.resp_credits.try_consume() {
            self.spare_free.push(k);
            self.broken
                .get_or_insert("no response credit to answer the authentication".into());
            return;
        }
        if let Err(e) = self.send_spare(k, &reply.to_bytes()) {
            self.broken
                .get_or_insert(format!("cannot answer the authentication: {e}"));
            return;
        }
        if ok {
            log::info!("rdma: {}: authenticated", self.peer);
            return;
        }
        if reply.status == Status::Fenced {
            log::info!(
                "rdma: {}: authenticated, and refused: superseded session (the fence is at session {})",
                self.peer,
                reply.session_floor
            );
        } else {
            log::warn!(
                "rdma: {}: authentication failed for export {}: wrong proof",
                self.peer,
                self.core.export.name
            );
        }
        self.denied = Some(k);
    }

    /// Whether `n` more bytes of RDMA data may go on the wire now; one transfer always may,
    /// and so may nothing.
    fn wire_room(&self, n: usize) -> bool {
        n == 0 || self.wire == 0 || self.wire + n <= self.core.t.limits.rdma_window
    }

    fn on_wire(&mut self, j: usize, n: usize) {
        self.wire += n;
        self.wire_of[j] = n;
    }

    fn off_wire(&mut self, j: usize) {
        if let Some(n) = self.wire_of.get_mut(j) {
            self.wire -= std::mem::take(n);
        }
    }

    /// Plans the RDMA Reads of the writes whose data is wanted, as far as the window goes: each
    /// in parts of `READ_CHUNK`, only the last signaled (an RC queue completes in order). They
    /// go with the pass's responses, in one `ibv_post_send` (`post_batch`).
    fn fetch(&mut self) {
        // Inline writes need no window: they go first, wherever they wait, so that none waits
        // behind a large write's RDMA Read.
        let slots = &self.core.slots;
        if self.core.to_fetch.iter().any(|&j| slots[j].req.is_inline()) {
            let inline: Vec<usize> = self
                .core
                .to_fetch
                .iter()
                .copied()
                .filter(|&j| slots[j].req.is_inline())
                .collect();
            self.core.to_fetch.retain(|&j| !slots[j].req.is_inline());
            for j in inline {
                self.inline_in(j);
            }
        }
        // Every write the window lets in.
        while let Some(&j) = self.core.to_fetch.front() {
            let n = self.core.slots[j].req.length as usize;
            if !self.wire_room(n) {
                break;
            }
            self.core.to_fetch.pop_front();
            self.on_wire(j, n);
            let req = self.core.slots[j].req;
            self.batch
                .extend((0..n.div_ceil(READ_CHUNK).max(1)).map(|k| {
                    let off = k * READ_CHUNK;
                    let last = off + READ_CHUNK >= n;
                    WrPlan {
                        wr_id: if last { wr_id(K_READ, j) } else { 0 },
                        op: PlanOp::Read(req.buf.addr + off as u64, req.buf.rkey),
                        local: (Local::Data(j), off, (n - off).min(READ_CHUNK)),
                        signaled: last,
                    }
                }));
        }
    }

    /// Slot `j`'s inline write data: copied from the receive its request came in on (checked
    /// in `received`), which is reposted only with the response.
    fn inline_in(&mut self, j: usize) {
        let n = self.core.slots[j].req.length as usize;
        let src = self.recv_of[j].and_then(|r| {
            let off = r * self.rslot + REQUEST_LEN;
            self.recv_mr.get(off..off + n)
        });
        let dst = self.core.slots[j]
            .buf
            .as_mut()
            .and_then(|b| b.as_mut_slice().get_mut(..n));
        let (Some(src), Some(dst)) = (src, dst) else {
            self.broken
                .get_or_insert("an inline write without its receive or buffer".into());
            return;
        };
        dst.copy_from_slice(src);
        Stats::inc(&self.core.t.stats.inline_writes);
        self.core.data_in(j);
    }

    /// Sends the responses that are ready, as far as response credits go.
    fn answer(&mut self) {
        while let Some(&j) = self.core.to_answer.front() {
            if self.gone() || !self.wire_room(self.core.slots[j].out_len()) {
                break;
            }
            if !self.resp_credits.try_consume() {
                if self.waiting_since.is_none() {
                    Stats::inc(&self.core.t.stats.credit_waits);
                    self.waiting_since = Some(Instant::now());
                }
                break;
            }
            self.waiting_since = None;
            self.core.to_answer.pop_front();
            self.respond(j);
        }
        self.post_batch();
    }

    /// Posts receive `r` again (a credit the next response grants back); false, with the
    /// connection broken, if that fails.
    fn repost(&mut self, r: usize) -> bool {
        match self
            .id
            .post_recv(wr_id(K_RECV, r), &self.recv_mr, r * self.rslot, self.rslot)
        {
            Ok(()) => true,
            Err(e) => {
                self.broken
                    .get_or_insert(format!("cannot repost a receive: {e}"));
                false
            }
        }
    }

    /// Posts the response of slot `j` (after the RDMA Write of its read data), reposting the
    /// receive its request came in on first: the response grants that receive back as a
    /// credit.
    fn respond(&mut self, j: usize) {
        let t = self.core.t.clone();
        if let Some(r) = self.recv_of[j].take() {
            if !self.repost(r) {
                return;
            }
        }
        let s = &self.core.slots[j];
        let req = s.req;
        let resp = t.response(&self.core.export, &req, s.status, s.crc);
        let n = s.out_len();
        let invalidate = req.buf.rkey != 0 && !t.limits.no_invalidate;
        let hostile = self.chooser.pick(
            &t.limits.hostile,
            &t.hostile_turn,
            &Candidate {
                tcp: false,
                opcode: req.opcode,
                ok: s.status == Status::Ok,
                invalidates: invalidate,
                spare_send: self.resp_credits.available() > 0 && !self.spare_free.is_empty(),
            },
        );
        if let Some(k) = hostile {
            t.count_hostile(k);
        }
        if hostile == Some(Kind::UnknownTag) {
            self.post_extra(&hostile::unknown_tag(&resp).to_bytes());
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
        let off = j * SLOT;
        self.send_mr[off..off + len].copy_from_slice(&msg[..len]);
        let late = hostile == Some(Kind::LateWrite) && n > 0;
        // (`post_batch` finds the data buffer's registration, or breaks the connection.)
        let write = WrPlan {
            wr_id: 0,
            op: PlanOp::Write(req.buf.addr, req.buf.rkey),
            local: (Local::Data(j), 0, n),
            signaled: false,
        };
        if n > 0 {
            self.batch.push(write);
        }
        self.batch.push(WrPlan {
            wr_id: wr_id(K_SEND, j),
            op: match op {
                SendOp::SendInv { rkey } => PlanOp::SendInv(rkey),
                _ => PlanOp::Send,
            },
            local: (Local::Send, off, len),
            signaled: true,
        });
        if late {
            // The same bytes again, to the same place: if the client's HCA wrongly lets it in,
            // it rewrites data the client already has rather than corrupting it.
            self.batch.push(WrPlan {
                wr_id: wr_id(K_LATE, j),
                local: (Local::Data(j), 0, hostile::LATE_WRITE_LEN.min(n)),
                signaled: true,
                ..write
            });
        }
        self.pending[j] = 1 + u32::from(late);
        self.on_wire(j, n);
        if n > 0 {
            Stats::inc(&t.stats.rdma_writes);
            Stats::add(&t.stats.rdma_write_bytes, n as u64);
        }
        if late {
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

    /// Posts the work planned so far (the pass's RDMA Reads, then its responses: RDMA Writes
    /// and Sends) with one `ibv_post_send`: one doorbell, and one run of the provider's send
    /// task, for a whole pass instead of one each (with soft-RoCE, each doorbell is a system
    /// call and wakes a kernel worker that preempts this thread). Signalled are only the work
    /// requests whose completion something waits for: the last part of each RDMA Read (the
    /// write's data is in), and each Send (its slot, and the data buffer its RDMA Write
    /// reads, are free again); an RDMA Write completes with the Send after it.
    fn post_batch(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.batch);
        let res = {
            let wrs: Option<Vec<SendWr>> = batch
                .iter()
                .map(|p| {
                    let (which, off, len) = p.local;
                    let mr = match which {
                        Local::Send => Some(&self.send_mr),
                        Local::Data(j) => self.core.slots[j].buf.as_ref().and_then(|b| b.mr()),
                    }?;
                    Some(SendWr {
                        wr_id: p.wr_id,
                        op: match p.op {
                            PlanOp::Send => SendOp::Send,
                            PlanOp::SendInv(rkey) => SendOp::SendInv { rkey },
                            PlanOp::Write(remote_addr, rkey) => {
                                SendOp::RdmaWrite { remote_addr, rkey }
                            }
                            PlanOp::Read(remote_addr, rkey) => {
                                SendOp::RdmaRead { remote_addr, rkey }
                            }
                        },
                        local: Some((mr, off, len)),
                        signaled: p.signaled,
                    })
                })
                .collect();
            match wrs {
                Some(w) => self.id.post_send(&w).map_err(|e| e.to_string()),
                None => Err("a data buffer is not registered".into()),
            }
        };
        match res {
            Ok(()) => {
                for p in &batch {
                    match wr_kind(p.wr_id) {
                        // The requests' time in the target ends with their responses posted.
                        K_SEND => self.core.responded(wr_index(p.wr_id)),
                        K_READ => self.reads_out += 1,
                        _ => {}
                    }
                }
            }
            Err(e) => {
                self.broken
                    .get_or_insert(format!("cannot post a response or an RDMA Read: {e}"));
            }
        }
        self.batch = batch;
        self.batch.clear();
    }

    /// Posts one extra hostile message as a plain Send. Like every Send it spends a response
    /// credit, so it is sent only if one is left (no RNR, ever), and a spare buffer.
    fn post_extra(&mut self, msg: &[u8; RESPONSE_LEN]) {
        // After the responses planned before it, as the hostile act means.
        self.post_batch();
        if self.spare_free.is_empty() || !self.resp_credits.try_consume() {
            return;
        }
        let Some(k) = self.spare_free.pop() else {
            return;
        };
        if let Err(e) = self.send_spare(k, msg) {
            self.spare_free.push(k);
            self.broken
                .get_or_insert(format!("cannot post a hostile extra message: {e}"));
        }
    }

    /// Sends `msg` (at most [`SLOT`] bytes) from spare send buffer `k` (taken, with its
    /// response credit, by the caller); its completion (`K_EXTRA`) gives the buffer back.
    fn send_spare(&mut self, k: usize, msg: &[u8]) -> io::Result<()> {
        let off = (self.recv_of.len() + k) * SLOT;
        self.send_mr[off..off + msg.len()].copy_from_slice(msg);
        self.id.post_send(&[SendWr {
            wr_id: wr_id(K_EXTRA, k),
            op: SendOp::Send,
            local: Some((&self.send_mr, off, msg.len())),
            signaled: true,
        }])
    }

    /// One of slot `j`'s last work requests completed.
    fn wr_done(&mut self, j: usize) {
        if let Some(p) = self.pending.get_mut(j) {
            *p = p.saturating_sub(1);
            if *p == 0 && self.core.slots[j].stage == Stage::Answer {
                self.core.release(j);
                self.start_backlog();
            }
        }
    }

    /// Completion of a hostile late write: it must have been refused, since the response before
    /// it invalidated its rkey.
    fn late_write_done(&mut self, wc: &rdma::Completion, j: usize) {
        let t = self.core.t.clone();
        let rkey = self.late_rkeys.pop_front().unwrap_or(0);
        self.wr_done(j);
        if wc.ok() {
            Stats::inc(&t.stats.late_write_succeeded);
            log::error!(
                "rdma: {}: hostile late RDMA Write to rkey {rkey:#x} SUCCEEDED after the response that invalidated it: the client left that memory reachable",
                self.peer
            );
            return;
        }
        Stats::inc(&t.stats.late_write_rejected);
        log::warn!(
            "rdma: {}: hostile late RDMA Write to invalidated rkey {rkey:#x} refused, as it must be: {} (status {})",
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Backing I/O is submitted ahead of the wait while submissions bring completions back;
    /// with a store that takes its time it goes with the wait, but for a look now and then.
    #[test]
    fn backing_io_goes_ahead_of_the_wait_only_while_that_pays() {
        let mut e = Early::default();
        for _ in 0..10 {
            assert!(e.now());
            e.came(1);
        }
        for _ in 0..Early::MISSES {
            assert!(e.now());
            e.came(0);
        }
        let ahead = (0..3 * Early::PROBE).filter(|_| e.now()).count();
        assert_eq!(ahead, 3);
        // A look finds the store fast again.
        e.came(2);
        assert!((0..5).all(|_| e.now()));
    }

    #[test]
    fn connections_take_the_completion_vectors_in_turn() {
        let four: Vec<i32> = (0..9).map(|turn| comp_vector(turn, 4)).collect();
        assert_eq!(four, [0, 1, 2, 3, 0, 1, 2, 3, 0]);
        // One vector (soft-RoCE on a one-CPU host), or a device that reports none.
        for n in [1, 0, -1] {
            assert!((0..5).all(|turn| comp_vector(turn, n) == 0), "{n}");
        }
        assert_eq!(comp_vector(usize::MAX, 3), (usize::MAX % 3) as i32);
    }
}
