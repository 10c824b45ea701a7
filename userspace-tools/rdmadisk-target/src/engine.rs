//! What every connection shares: the exports, who may attach, the keys, the fences, the buffer
//! budget, the limits, the counters; and the transport-independent handling of a Hello, of an
//! authentication and of a request's admission.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use rdmadisk_net::allow::AllowList;
use rdmadisk_proto::auth::{self, Endpoint, Secret, Side, Transcript};
use rdmadisk_proto::wire::{
    features, hello_caps, hello_flags, AuthReply, AuthRequest, Hello, HelloReply, HelloStatus,
    Opcode, Request, Response, Status, CHALLENGE_LEN, SECTOR_SHIFT, SECTOR_SIZE,
};

use crate::export::{Export, Exports};
use crate::fence_table::{ConnFence, FenceTable, Refusal, FENCE_TABLE_CAP};
use crate::hostile::{Hostile, Kind};
use crate::pool::Budget;
use crate::stats::Stats;
use crate::wake::Wake;

/// Bytes of a TCP connection's receive staging buffer.
pub const TCP_STAGING: usize = 64 << 10;
/// Bytes per RDMA send buffer (a Response is 32 bytes, an AuthReply 64), and per receive
/// without inline data (a Request is 48 bytes, an AuthRequest 64).
pub const RDMA_SLOT: usize = 64;
/// RDMA send buffers beyond one per request slot, for hostile extra messages and the answer
/// to an authentication.
pub const RDMA_SPARE: usize = 8;

/// Bytes per RDMA receive: a request and, for an inline write, up to `inline_max` bytes of
/// data.
pub fn rdma_recv_slot(inline_max: u32) -> usize {
    (rdmadisk_proto::wire::REQUEST_LEN + inline_max as usize).next_multiple_of(RDMA_SLOT)
}

/// Bytes of an RDMA connection's own registered buffers, which count against
/// `buffer_memory`: one receive per credit, and one send buffer per request slot (two per
/// credit) and per spare.
pub fn rdma_conn_bytes(credits: usize, inline_max: u32) -> usize {
    credits * rdma_recv_slot(inline_max) + (2 * credits + RDMA_SPARE) * RDMA_SLOT
}

/// Settings that shape every connection.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_io_bytes: u32,
    pub queue_depth: u16,
    /// Requests a connection may have in flight = receives posted (RDMA) = request credits
    /// granted at attach.
    pub credits: u16,
    /// Bytes of RDMA Reads and Writes a connection may have posted and not completed. The
    /// hardware bounds only the number of Reads; a burst of every credit's data at once
    /// overflows a switch's (or soft-RoCE's) buffers, and RC retransmits go-back-N, so a
    /// loss costs the whole burst again (see userspace-tools/README.md).
    pub rdma_window: usize,
    /// Largest inline write (`HelloReply::max_inline`) an RDMA connection accepts; its
    /// receives are sized for it.
    pub inline_max: u32,
    /// Local ACK timeout exponent of every RDMA connection (4.096 us * 2^N).
    pub ack_timeout_exp: u8,
    /// RDMA: how long a connection polls its CQs before it arms them and sleeps (`poll_us`;
    /// zero: not at all).
    pub poll: Duration,
    /// Connections at once, per listener and per client host.
    pub max_connections: usize,
    pub max_connections_per_host: usize,
    /// Time a client has for its whole Hello (TCP), from accept.
    pub hello_timeout: Duration,
    /// A connection with nothing in flight and nothing received for this long is closed
    /// (the kernel client sends keepalives well within it); None: never.
    pub idle_timeout: Option<Duration>,
    /// A response that cannot be sent for this long (a client that does not read, or grants
    /// no credits) closes the connection.
    pub send_timeout: Duration,
    /// How long SIGTERM waits for requests in flight before the target exits anyway.
    pub shutdown_timeout: Duration,
    /// Corrupt one byte of read data after computing its CRC on 1 in N reads (0 = never).
    pub corrupt_read_every: u64,
    /// Treat 1 in N write CRCs as mismatched (0 = never).
    pub fail_write_crc_every: u64,
    /// Never Send-with-Invalidate (diagnostic).
    pub no_invalidate: bool,
    /// Test-only hostile responses (off when `kinds` is empty).
    pub hostile: Hostile,
    /// Test only: while this file exists, RDMA connections of client sessions are refused.
    pub refuse_rdma_file: Option<std::path::PathBuf>,
    /// Test only: reads and writes covering this sector are never answered.
    pub stall_sector: Option<u64>,
    /// Test only: while this file exists, modifying requests are answered `ReadOnly`.
    pub refuse_writes_file: Option<std::path::PathBuf>,
    /// Test only: responses grant no credits back.
    pub grant_no_credits: bool,
}

/// The keys of a connection that must authenticate: the client proves `client`, the target
/// proves `target` (the same key unless a separate one is configured, as DH-HMAC-CHAP's
/// controller key).
#[derive(Clone, Debug)]
pub struct Keys {
    pub client: Secret,
    pub target: Secret,
}

/// A client host with a key of its own (`[[host]]`): it authenticates with it on every
/// export, whatever the export's own secret.
#[derive(Clone, Debug)]
pub struct HostKey {
    pub name: String,
    pub addr: IpAddr,
    pub keys: Keys,
}

/// What a connection gets from a successful attach. Nothing in it holds anything of the
/// target's shared state yet: the exclusive hold and the fence are taken once the client is
/// trusted (`Core::confirm`, and the first request).
pub struct Attached {
    pub export: Arc<Export>,
    pub fence: ConnFence,
    /// The connection may modify the export: a client session (not a probe, session 0, which
    /// is never fenced) that did not ask for read-only, on a writable export.
    pub writes: bool,
    /// A key protects the connection: it serves nothing until the client answers this
    /// challenge (sent in the HelloReply).
    pub challenge: Option<Challenge>,
    /// The client takes the export's identity in the reply (`hello_caps::IDENTITY`).
    pub identity: bool,
}

impl Attached {
    /// The HelloReply for this attachment: the export's identity only to a client that asked
    /// for it (an older one would not read the longer reply).
    pub fn reply(&self, t: &Target) -> HelloReply {
        let r = t.hello_reply(&self.export, self.challenge.as_ref());
        HelloReply {
            identity: r.identity.filter(|_| self.identity),
            ..r
        }
    }
}

/// What a client must prove on a connection that a key protects, and what the target proves
/// back.
pub struct Challenge {
    pub nonce: [u8; CHALLENGE_LEN],
    keys: Keys,
    hello: Hello,
    client: Endpoint,
    target: Endpoint,
    /// The Hello's session is not admitted (the fence is at this session): the answer to a
    /// good proof is `Fenced`, proved, and the connection goes. A target with a key says
    /// `Stale` only this way, so that nobody without the key can tell a client it has been
    /// superseded (docs/design.md, "Access control").
    fenced: Option<u32>,
}

impl Challenge {
    /// Checks `a`'s proof; on success, the reply carrying the target's own proof (true: the
    /// connection serves from now on), or the proved `Fenced` one (false); else the Denied
    /// one (counted; false).
    pub fn answer(&self, t: &Target, a: &AuthRequest) -> (bool, AuthReply) {
        let tr = Transcript::new(&self.hello, self.nonce, a.nonce, self.client, self.target);
        let want = auth::proof(self.keys.client.as_bytes(), Side::Client, &tr);
        let ok = auth::proofs_equal(&want, &a.proof);
        let mut reply = AuthReply {
            tag: a.tag,
            status: Status::Denied,
            credits: 1,
            proof: [0; auth::MAC_LEN],
            session_floor: 0,
        };
        if !ok {
            Stats::inc(&t.stats.auth_failures);
            return (false, reply);
        }
        if let Some(floor) = self.fenced {
            let key = auth::proof(self.keys.target.as_bytes(), Side::TargetFenced, &tr);
            reply.status = Status::Fenced;
            reply.proof = auth::fenced_proof(&key, floor);
            reply.session_floor = floor;
            return (false, reply);
        }
        reply.status = Status::Ok;
        reply.proof = auth::proof(self.keys.target.as_bytes(), Side::Target, &tr);
        (true, reply)
    }
}

/// One end of a connection as the proofs see it.
pub fn endpoint(a: SocketAddr) -> Endpoint {
    match a.ip().to_canonical() {
        IpAddr::V4(v4) => Endpoint::v4(v4.octets(), a.port()),
        IpAddr::V6(v6) => Endpoint::v6(v6.octets(), a.port()),
    }
}

/// Why a Hello was refused: the reply's status (with the fence's session for `Stale`) and a
/// line for the log.
#[derive(Debug)]
pub struct Refused {
    pub status: HelloStatus,
    pub floor: u32,
    pub why: String,
}

impl Refused {
    fn new(status: HelloStatus, why: impl Into<String>) -> Refused {
        Refused {
            status,
            floor: 0,
            why: why.into(),
        }
    }

    /// The HelloReply that carries the refusal.
    pub fn reply(&self) -> HelloReply {
        HelloReply {
            session_floor: self.floor,
            ..HelloReply::rejected(self.status)
        }
    }
}

/// Ports below this one only a privileged process may bind (Linux's
/// `net.ipv4.ip_unprivileged_port_start`, and rdma_cm's fixed `PROT_SOCK`): a connection
/// from one comes from root on its host, as NFS's `secure` export option has it.
pub const RESERVED_PORT_END: u16 = 1024;

/// Random bytes from the kernel (a challenge must not be guessable).
fn random_nonce() -> [u8; CHALLENGE_LEN] {
    let mut b = [0u8; CHALLENGE_LEN];
    let mut got = 0;
    while got < b.len() {
        // SAFETY: getrandom writes at most the given length into the buffer we own.
        let n = unsafe {
            libc::getrandom(b[got..].as_mut_ptr() as *mut libc::c_void, b.len() - got, 0)
        };
        if n > 0 {
            got += n as usize;
        } else if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // Never serve a predictable challenge: fail closed.
            panic!("getrandom failed: {}", std::io::Error::last_os_error());
        }
    }
    b
}

/// A client host's share of the connection cap, released on drop.
pub struct Slot {
    t: Arc<Target>,
    ip: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut m = self
            .t
            .per_host
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
        self.t.connections.fetch_sub(1, Ordering::Relaxed);
        self.t
            .stats
            .connections_active
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// The longest an idle thread sleeps (it wakes at once for its own events and for a stop).
pub const IDLE_WAIT: Duration = Duration::from_secs(10);

fn stop_wake() -> Option<Wake> {
    Wake::new()
        .inspect_err(|e| {
            log::warn!(
                "cannot make an eventfd ({e}): idle threads will wake every {} ms",
                crate::conn::TICK.as_millis()
            )
        })
        .ok()
}

/// State shared by every connection thread.
pub struct Target {
    /// The exports by name; a reload adds and removes some (`reload.rs`).
    exports: RwLock<Exports>,
    /// Target-wide allow-list, checked before anything is read from a client; and whether
    /// no allow-list at all was configured, and that was meant (`allow_any`). A reload may
    /// change both.
    access: RwLock<(AllowList, bool)>,
    /// The attached connections.
    pub registry: Arc<crate::registry::Registry>,
    pub limits: Limits,
    pub stats: Stats,
    pub budget: Arc<Budget>,
    pub shutdown: AtomicBool,
    /// Client hosts with keys of their own, by address.
    hosts: HashMap<IpAddr, HostKey>,
    /// Readable once the target stops (an eventfd): every thread that waits includes it, so
    /// that an idle one can sleep until something happens rather than wake to look.
    stop: Option<Wake>,
    pub fences: Arc<FenceTable>,
    connections: AtomicUsize,
    per_host: Mutex<HashMap<IpAddr, usize>>,
    /// Which hostile kind acts next, across connections (see `hostile::Chooser`).
    pub hostile_turn: AtomicUsize,
    read_seq: AtomicU64,
    write_seq: AtomicU64,
}

impl Target {
    pub fn new(
        exports: Vec<Export>,
        hosts: Vec<HostKey>,
        allow: AllowList,
        allow_any: bool,
        limits: Limits,
        budget: Arc<Budget>,
    ) -> Target {
        Target {
            exports: RwLock::new(
                exports
                    .into_iter()
                    .map(|e| (e.name.clone(), Arc::new(e)))
                    .collect(),
            ),
            access: RwLock::new((allow, allow_any)),
            registry: crate::registry::Registry::new(),
            limits,
            stats: Stats::default(),
            budget,
            shutdown: AtomicBool::new(false),
            hosts: hosts
                .into_iter()
                .map(|h| (h.addr.to_canonical(), h))
                .collect(),
            stop: stop_wake(),
            fences: FenceTable::new(FENCE_TABLE_CAP),
            connections: AtomicUsize::new(0),
            per_host: Mutex::new(HashMap::new()),
            hostile_turn: AtomicUsize::new(0),
            read_seq: AtomicU64::new(0),
            write_seq: AtomicU64::new(0),
        }
    }

    /// Whether SIGTERM asked us to stop.
    pub fn stopping(&self) -> bool {
        self.shutdown.load(Ordering::Relaxed)
    }

    /// Some request went short of a data buffer lately: whoever holds one gives it back as
    /// soon as it can.
    pub fn starved(&self) -> bool {
        self.budget.short_recently()
    }

    /// Stops the target: no new connections, in-flight requests finish. Wakes every waiting
    /// thread.
    pub fn stop(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        if let Some(w) = &self.stop {
            w.signal();
        }
    }

    /// The fd that becomes readable when the target stops; None if none could be made (then
    /// waits fall back to [`crate::conn::TICK`]).
    pub fn stop_fd(&self) -> Option<RawFd> {
        self.stop.as_ref().map(Wake::fd)
    }

    /// How long a thread with nothing to do may sleep: it wakes for its own events, and for
    /// the stop through [`Target::stop_fd`].
    pub fn idle_wait(&self) -> Duration {
        if self.stop.is_some() && !self.stopping() {
            IDLE_WAIT
        } else {
            crate::conn::TICK
        }
    }

    /// Whether the target-wide list lets `ip` in (checked on accept, before reading).
    pub fn admits(&self, ip: IpAddr) -> bool {
        let a = self.access.read().unwrap_or_else(PoisonError::into_inner);
        a.1 || a.0.allows(ip)
    }

    /// Whether no allow-list applies (`allow_any`).
    pub fn allow_any(&self) -> bool {
        self.access.read().unwrap_or_else(PoisonError::into_inner).1
    }

    /// Replaces the target-wide allow-list (a reload).
    pub fn set_access(&self, allow: AllowList, allow_any: bool) {
        *self.access.write().unwrap_or_else(PoisonError::into_inner) = (allow, allow_any);
    }

    /// The export called `name`, now.
    pub fn export(&self, name: &str) -> Option<Arc<Export>> {
        self.exports
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    /// Every export now, by name.
    pub fn exports(&self) -> Vec<Arc<Export>> {
        let mut v: Vec<_> = self
            .exports
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Adds `add` and takes out the exports named in `remove` (a reload): new Hellos find
    /// the one and not the others; connections already attached keep their export until
    /// they end (see [`crate::registry::Registry::evict`]).
    pub fn change_exports(&self, add: Vec<Export>, remove: &[String]) {
        let mut m = self.exports.write().unwrap_or_else(PoisonError::into_inner);
        // Dropped after the lock: the last reference to an RBD export closes its image, a
        // network round trip that every Hello's lookup would otherwise wait for.
        let gone: Vec<Arc<Export>> = remove.iter().filter_map(|n| m.remove(n)).collect();
        for e in add {
            m.insert(e.name.clone(), Arc::new(e));
        }
        drop(m);
        drop(gone);
    }

    /// A place for one more connection from `ip` under the caps, or `None` (counted).
    pub fn connection_slot(self: &Arc<Self>, ip: IpAddr) -> Option<Slot> {
        let ip = ip.to_canonical();
        let mut m = self.per_host.lock().unwrap_or_else(PoisonError::into_inner);
        let total = self.connections.load(Ordering::Relaxed);
        let mine = m.get(&ip).copied().unwrap_or(0);
        if total >= self.limits.max_connections || mine >= self.limits.max_connections_per_host {
            Stats::inc(&self.stats.connections_over_cap);
            return None;
        }
        *m.entry(ip).or_insert(0) += 1;
        self.connections.fetch_add(1, Ordering::Relaxed);
        Stats::inc(&self.stats.connections_active);
        Some(Slot {
            t: self.clone(),
            ip,
        })
    }

    /// The keys that protect a connection from `ip` to `e`: the host's own, if it has one,
    /// else the export's shared secret; `None` if neither.
    fn keys_for(&self, ip: Option<IpAddr>, e: &Export) -> Option<Keys> {
        if let Some(h) = ip.and_then(|ip| self.hosts.get(&ip.to_canonical())) {
            return Some(h.keys.clone());
        }
        e.secret.as_ref().map(|s| Keys {
            client: s.clone(),
            target: s.clone(),
        })
    }

    /// Decides on a Hello from `peer` (reached at `local`): the export to serve and the
    /// connection's place in its fence, or the refusal. Builds nothing that outlives a
    /// refused or abandoned connection: the client is not trusted yet (a key's proof is still
    /// to come, or, for an export without a key, its first request has not shown that the
    /// connection is up).
    pub fn attach(
        &self,
        peer: Option<SocketAddr>,
        local: Option<SocketAddr>,
        hello: &Hello,
    ) -> Result<Attached, Refused> {
        let ip = peer.map(|p| p.ip().to_canonical());
        match ip {
            Some(ip) if self.admits(ip) => {}
            None if self.allow_any() => {}
            _ => {
                return Err(Refused::new(
                    HelloStatus::NotAllowed,
                    "address not on the allow-list",
                ))
            }
        }
        if self.stopping() {
            return Err(Refused::new(
                HelloStatus::Busy,
                "the target is shutting down",
            ));
        }
        if hello.flags & !hello_flags::ALL != 0 {
            return Err(Refused::new(HelloStatus::Invalid, "unknown Hello flags"));
        }
        if hello.queue_count == 0 || hello.queue_id >= hello.queue_count {
            return Err(Refused::new(HelloStatus::Invalid, "bad queue numbers"));
        }
        let export = self
            .export(hello.export.as_str())
            .ok_or(Refused::new(HelloStatus::NoSuchExport, "no such export"))?;
        if let Some(ip) = ip {
            if !export.allows(ip) {
                return Err(Refused::new(
                    HelloStatus::NotAllowed,
                    format!("address not on the allow-list of export {}", export.name),
                ));
            }
        }
        let keys = self.keys_for(ip, &export);
        if keys.is_none() && !export.insecure {
            // No key: the client host's root is the one to trust, and only root binds a
            // reserved port. Anyone else on that host is refused here, before anything is
            // built, whatever session it claims.
            match peer.map(|p| p.port()) {
                Some(port) if port < RESERVED_PORT_END => {}
                port => {
                    Stats::inc(&self.stats.unreserved_port_refusals);
                    return Err(Refused::new(
                        HelloStatus::NotAllowed,
                        format!(
                            "export {} has no key, and the connection comes from {}: only a privileged process (a port below {RESERVED_PORT_END}) may attach it",
                            export.name,
                            port.map_or("an unknown port".into(), |p| format!("port {p}"))
                        ),
                    ));
                }
            }
        }
        // Peers whose address could not be told share one fence (and one hold): they may then
        // fence each other (failed writes, reported), where not fencing them could let an old
        // write land over a newer one (silent corruption).
        let ip = ip.unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let writes =
            hello.session_id != 0 && hello.flags & hello_flags::READ_ONLY == 0 && !export.read_only;
        if !export.may_hold(ip, writes) {
            Stats::inc(&self.stats.exclusive_refusals);
            return Err(Refused::new(
                HelloStatus::Busy,
                format!(
                    "export {} is attached read-write by {} (exclusive)",
                    export.name,
                    export.holder().map_or("?".into(), |h| h.to_string())
                ),
            ));
        }
        // Only writers are fenced: a read-only session, like a probe, can land nothing.
        let (session, epoch) = if writes {
            (hello.session_id, hello.epoch)
        } else {
            (0, 0)
        };
        let new = hello.flags & hello_flags::NEW_SESSION != 0;
        let (fence, fenced) = match self
            .fences
            .admit(ip, export.name_arc(), session, epoch, new)
        {
            Ok(f) => (f, None),
            Err(Refusal::Full) => {
                Stats::inc(&self.stats.fence_table_full);
                return Err(Refused::new(
                    HelloStatus::Busy,
                    format!("the fence table is full ({FENCE_TABLE_CAP} address/export pairs)"),
                ));
            }
            Err(Refusal::Stale { current }) => {
                Stats::inc(&self.stats.stale_hellos);
                let (cs, ce) = current.unwrap_or((0, 0));
                let why = format!(
                    "stale hello: session {session} epoch {epoch}, but the fence is at session {cs} epoch {ce}"
                );
                if keys.is_none() {
                    return Err(Refused {
                        status: HelloStatus::Stale,
                        floor: cs,
                        why,
                    });
                }
                // With a key, the refusal waits for both proofs (`Challenge::fenced`); the
                // connection serves nothing, holds nothing and moves no fence meanwhile.
                log::warn!(
                    "{}: {why}; refusing it after the authentication",
                    peer.map_or("?".into(), |p| p.to_string())
                );
                (self.fences.unfenced(ip, export.name_arc()), Some(cs))
            }
            Err(Refusal::Stuck) => {
                return Err(Refused::new(
                    HelloStatus::Busy,
                    "the fence is moving and waits for an older connection's I/O stuck in the backing store".to_string(),
                ));
            }
        };
        let challenge = keys.map(|keys| Challenge {
            nonce: random_nonce(),
            keys,
            hello: *hello,
            client: peer.map(endpoint).unwrap_or_default(),
            target: local.map(endpoint).unwrap_or_default(),
            fenced,
        });
        Ok(Attached {
            export,
            fence,
            writes: writes && fenced.is_none(),
            challenge,
            identity: hello.caps & hello_caps::IDENTITY != 0,
        })
    }

    /// Before a read-write session of a gateway export is answered Ok (the Hello, or the
    /// authentication where a key protects the export: nobody unproven may fence a gateway
    /// out): makes this target the store's writer, taking it over from another gateway. On
    /// the connection's own thread where it has one; the refusal, if it fails, is one the
    /// client takes as a failed connect (not Stale): it may try another gateway.
    pub fn claim(&self, e: &Export, writes: bool, peer: &str) -> Result<(), String> {
        if !writes {
            return Ok(());
        }
        if !e.backing.gateway() {
            e.backing.take_back();
            return Ok(());
        }
        match e.backing.take_over() {
            Ok(took) => {
                if took {
                    Stats::inc(&self.stats.gateway_takeovers);
                }
                Ok(())
            }
            Err(err) => {
                Stats::inc(&self.stats.gateway_takeover_failures);
                let why = format!(
                    "export {}: cannot take the store over for {peer}'s read-write session: {err}",
                    e.name
                );
                log::error!("{why}");
                Err(why)
            }
        }
    }

    /// Counts one hostile act.
    pub fn count_hostile(&self, k: Kind) {
        Stats::inc(&self.stats.hostile_acts);
        Stats::inc(self.stats.hostile(k));
    }

    /// The HelloReply for an attached export (with the challenge if it has a secret).
    pub fn hello_reply(&self, e: &Export, challenge: Option<&Challenge>) -> HelloReply {
        let mut f = features::FLUSH | features::FUA | features::DISCARD | features::WRITE_ZEROES;
        if e.backing.resizable() {
            f |= features::RESIZE;
        }
        if e.read_only {
            f |= features::READ_ONLY;
        }
        if challenge.is_some() {
            f |= features::AUTH;
        }
        if e.backing.gateway() {
            f |= features::GATEWAY;
        }
        HelloReply {
            status: HelloStatus::Ok,
            capacity_sectors: e.capacity_sectors(),
            logical_block_size: e.geometry.block_size,
            physical_block_size: e.geometry.physical_block_size,
            max_io_bytes: self.limits.max_io_bytes,
            max_segments: 256,
            queue_depth: self.limits.queue_depth,
            initial_credits: self.limits.credits,
            features: f,
            max_discard_sectors: self.limits.max_io_bytes / SECTOR_SIZE,
            challenge: challenge.map_or([0; CHALLENGE_LEN], |c| c.nonce),
            // Set by the RDMA transport, which sizes its receives for it.
            max_inline: 0,
            session_floor: 0,
            identity: Some(e.identity),
        }
    }

    /// Counts a request and checks it (Request::validate, and the export's block size). On
    /// failure the error status is the response.
    /// `read_only`: the connection may not modify the export (see [`Attached::writes`]).
    pub fn admit(&self, e: &Export, req: &Request, read_only: bool) -> Result<(), Status> {
        let s = &self.stats;
        Stats::inc(&s.requests);
        Stats::inc(match req.opcode {
            Opcode::Read => &s.reads,
            Opcode::Write => &s.writes,
            Opcode::Flush => &s.flushes,
            Opcode::Discard => &s.discards,
            Opcode::WriteZeroes => &s.write_zeroes,
            Opcode::Nop => &s.nops,
            Opcode::Close => &s.closes,
        });
        let bs = u64::from(e.geometry.block_size);
        let aligned = matches!(req.opcode, Opcode::Flush | Opcode::Nop | Opcode::Close)
            || ((req.sector << SECTOR_SHIFT) % bs == 0 && u64::from(req.length) % bs == 0);
        let read_only = read_only
            || (req.opcode.modifies()
                && self
                    .limits
                    .refuse_writes_file
                    .as_ref()
                    .is_some_and(|f| f.exists()));
        req.validate(e.capacity_sectors(), self.limits.max_io_bytes, read_only)
            .and(if aligned {
                Ok(())
            } else {
                Err(Status::Invalid)
            })
            .inspect_err(|_| {
                Stats::inc(&s.bound_violations);
            })
    }

    /// Test only (`--stall-sector`): whether `req` is a read or write this target never
    /// answers. Counted.
    pub fn stalls(&self, req: &Request) -> bool {
        let Some(s) = self.limits.stall_sector else {
            return false;
        };
        let len = u64::from(req.length) >> SECTOR_SHIFT;
        let hit = matches!(req.opcode, Opcode::Read | Opcode::Write)
            && req.sector <= s
            && s < req.sector.saturating_add(len.max(1));
        if hit {
            Stats::inc(&self.stats.stalled_requests);
        }
        hit
    }

    /// Fault injection on read data (`--corrupt-read-every`), after its CRC was taken.
    pub fn maybe_corrupt_read(&self, data: &mut [u8]) {
        let every = self.limits.corrupt_read_every;
        if every > 0 && (self.read_seq.fetch_add(1, Ordering::Relaxed) + 1) % every == 0 {
            if let Some(b) = data.first_mut() {
                *b ^= 0xff;
            }
            Stats::inc(&self.stats.injected_read_corruptions);
        }
    }

    /// Whether a write's data matches its CRC (`--fail-write-crc-every` may say no).
    pub fn write_crc_ok(&self, req: &Request, data: &[u8]) -> bool {
        let every = self.limits.fail_write_crc_every;
        let injected =
            every > 0 && (self.write_seq.fetch_add(1, Ordering::Relaxed) + 1) % every == 0;
        if injected {
            Stats::inc(&self.stats.injected_write_crc_failures);
        }
        if injected || rdmadisk_proto::crc32c::crc32c(data) != req.data_crc {
            Stats::inc(&self.stats.crc_failures);
            return false;
        }
        true
    }

    /// The response to `req` on export `e`, the same on every transport: it echoes the tag
    /// and the rkey, reports the length only on success, grants back the credit the request
    /// used, and tells the export's capacity now if it may change (a resize reaches the client
    /// so).
    pub fn response(&self, e: &Export, req: &Request, status: Status, data_crc: u32) -> Response {
        Response {
            tag: req.tag,
            status,
            credits: u16::from(!self.limits.grant_no_credits),
            data_crc,
            length: if status == Status::Ok { req.length } else { 0 },
            rkey: req.buf.rkey,
            capacity_sectors: if e.backing.resizable() {
                e.capacity_sectors()
            } else {
                0
            },
        }
    }

    /// fsyncs every writable export (at shutdown). Like a Flush, it may take a writeback
    /// error another connection's Flush (one still running past the shutdown timeout) should
    /// report: it takes its place among them (`export::Syncs`).
    pub fn sync_all(&self) {
        for e in self.exports().iter().filter(|e| !e.read_only) {
            let sync = e.sync_begin();
            let r = e.backing.sync();
            sync.end(
                r.as_ref()
                    .err()
                    .map(|err| err.raw_os_error().unwrap_or(libc::EIO)),
            );
            if let Err(err) = r {
                log::error!("export {}: fsync at shutdown failed: {err}", e.name);
            }
        }
    }
}
