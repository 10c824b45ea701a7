// SPDX-License-Identifier: GPL-2.0

//! What a hardware queue's connection needs from its disk, and the one way it reports back
//! (docs/design.md, "Transports report, the session decides").
//!
//! A connection reads the disk's fixed facts, knobs, counters and fault switches
//! ([`DiskInfo`]) and reports a failure through [`QueueHost::queue_failed`]. It never changes
//! the disk's state itself: the disk's session work alone decides what a failure means
//! (reconnect, switch transport, give up). This module imports nothing of the disk, so the
//! transports do not either.

use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};
use kernel::sync::Arc;

use crate::faults::Faults;
use crate::kapi::blk_mq::Rq;
use crate::kapi::work::ReclaimQueue;
use crate::paths::Paths;
use crate::proto::auth::Secret;
use crate::proto::credits::CreditSender;
use crate::proto::options::DeviceName;
use crate::proto::policy::Transport;
use crate::proto::wire::ExportName;
use crate::rdma_conn::Peer;
use crate::stats::Stats;
use crate::telemetry::{Op, Telemetry, Via};

/// Now, in ms of the monotonic clock (ktime): the clock of every timeout and outage.
pub(crate) fn now_ms() -> i64 {
    kernel::time::Ktime::ktime_get().to_ms()
}
/// Per-request driver data. It lives as long as the tag, so [`Pdu::start`] resets it when
/// blk-mq hands the driver a new I/O (not a reissue of one).
pub(crate) struct Pdu {
    /// Reissues after a CRC mismatch so far.
    pub(crate) crc_retries: AtomicU8,
    /// When the I/O was first given to a connection (ms, ktime; 0: not yet). However often it
    /// is reissued, a request the target has not answered `loss_timeout_s` after that fails
    /// (docs/design.md, "When things go wrong"). Time spent waiting for a connection does not
    /// count: the disk's own loss timeout bounds that.
    sent_ms: AtomicI64,
    /// For the telemetry (ns, ktime; 0: not taken): the I/O's first dispatch, and its latest
    /// hand-over to a connection.
    dispatched_ns: AtomicI64,
    posted_ns: AtomicI64,
    /// The connection took the I/O but could not map its pages for the device: it waits,
    /// with its clock running (see [`Pdu::take_map_failed`]).
    map_failed: AtomicBool,
}

impl Pdu {
    pub(crate) const fn new() -> Self {
        Self {
            crc_retries: AtomicU8::new(0),
            sent_ms: AtomicI64::new(0),
            dispatched_ns: AtomicI64::new(0),
            posted_ns: AtomicI64::new(0),
            map_failed: AtomicBool::new(false),
        }
    }

    /// A new I/O on this tag, dispatched at `now_ns` (0: telemetry is off).
    pub(crate) fn start(&self, now_ns: i64) {
        self.crc_retries.store(0, Ordering::Relaxed);
        self.sent_ms.store(0, Ordering::Relaxed);
        self.dispatched_ns.store(now_ns, Ordering::Relaxed);
    }

    /// The I/O is handed to a connection at `now_ns` (0: telemetry is off).
    pub(crate) fn posting(&self, now_ns: i64) {
        self.posted_ns.store(now_ns, Ordering::Relaxed);
    }

    /// When the I/O was first dispatched, and last handed to a connection (ns; 0: unknown).
    pub(crate) fn times_ns(&self) -> (i64, i64) {
        (
            self.dispatched_ns.load(Ordering::Relaxed),
            self.posted_ns.load(Ordering::Relaxed),
        )
    }

    /// The I/O is being given to a connection at `now_ms`: starts its clock if this is the
    /// first time. True if it did (see [`Pdu::unsent`]).
    pub(crate) fn sending(&self, now_ms: i64) -> bool {
        self.sent_ms
            .compare_exchange(0, now_ms.max(1), Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// The connection did not take it after all (`sending` returned true).
    pub(crate) fn unsent(&self) {
        self.sent_ms.store(0, Ordering::Relaxed);
    }

    /// The connection could not map the I/O's pages for its device (it hands the I/O back to
    /// wait).
    pub(crate) fn note_map_failed(&self) {
        self.map_failed.store(true, Ordering::Relaxed);
    }

    /// Whether the connection handed the I/O back because its pages could not be mapped: a
    /// failure of the I/O, unlike a wait for a credit or a connection, so its clock keeps
    /// running and `loss_timeout_s` bounds the retries.
    pub(crate) fn take_map_failed(&self) -> bool {
        self.map_failed.swap(false, Ordering::Relaxed)
    }

    /// How long ago the I/O was first given to a connection, in ms (0 if never).
    pub(crate) fn age_ms(&self) -> i64 {
        match self.sent_ms.load(Ordering::Relaxed) {
            0 => 0,
            t => now_ms() - t,
        }
    }
}

/// A request of an rdmadisk.
pub(crate) type DiskRq = Rq<Pdu>;

/// At most one log line per interval, for a failure that can repeat every few ms; counts the
/// lines it held back.
pub(crate) struct RateLimit {
    /// When the last line went out (ms, ktime; 0: never).
    last_ms: AtomicI64,
    held: AtomicU32,
}

impl RateLimit {
    pub(crate) const fn new() -> Self {
        Self {
            last_ms: AtomicI64::new(0),
            held: AtomicU32::new(0),
        }
    }

    /// Whether a line may go out now (`interval_ms` after the last one); if so, how many were
    /// held back since.
    pub(crate) fn allow(&self, interval_ms: i64) -> Option<u32> {
        let now = now_ms().max(1);
        let last = self.last_ms.load(Ordering::Relaxed);
        let due = last == 0 || now - last >= interval_ms;
        if !due
            || self
                .last_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            self.held.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(self.held.swap(0, Ordering::Relaxed))
    }
}

/// A connection in log lines: its disk's name and its hardware queue.
#[derive(Clone, Copy)]
pub(crate) struct QueueName<'a>(pub(crate) &'a str, pub(crate) u16);

impl core::fmt::Display for QueueName<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}: queue {}", self.0, self.1)
    }
}

/// Which connection of which set: the hardware queue, and the epoch of the connection set it
/// belongs to (every reconnect or switch connects a new set, with the next epoch).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct ConnId {
    pub(crate) qid: u16,
    pub(crate) epoch: u32,
    /// The target it connects to: an index into the disk's [`DiskInfo::paths`].
    pub(crate) path: u8,
}

/// Knobs a connection reads at any time (`/sys/block/rdmadiskN/rdmadisk/`).
pub(crate) struct Knobs {
    pub(crate) io_timeout_ms: AtomicU32,
    pub(crate) keepalive_ms: AtomicU32,
    pub(crate) max_credits: AtomicU32,
    /// Largest write sent inline with its request over RDMA; a connection's Send buffers are
    /// sized for the value when it connects.
    pub(crate) inline_max: AtomicU32,
}

/// What a disk's connections read: fixed at map time, except the knobs and counters.
pub(crate) struct DiskInfo {
    pub(crate) name: DeviceName,
    pub(crate) export: ExportName,
    /// The targets that serve the export, and which one new connection sets go to.
    pub(crate) paths: Paths,
    /// Hardware queues, and so connections per set, the poll queues included.
    pub(crate) nr_queues: u16,
    /// The last this many queues are blk-mq poll queues: their completions are reaped by the
    /// task that polls for them (and by the health check), not by an interrupt.
    pub(crate) nr_poll_queues: u16,
    /// Ties the disk's connections together at the target (never 0: 0 is a probe's).
    /// Sessions are ordered at the target: a new mapping asked below the fence's session
    /// takes the one above it (`map_device` raises this before the disk is attached, never
    /// after; docs/design.md, "The fence invariant").
    pub(crate) session_id: AtomicU32,
    /// The session a Hello of this disk was last refused `Stale` at (0: never).
    pub(crate) stale_floor: AtomicU32,
    /// The disk has not attached yet: its Hellos open a session, which the target admits
    /// only above every session it has seen of this host and export.
    pub(crate) opening: AtomicBool,
    /// Mapped read-only: its Hellos say so (the target then takes no exclusive hold).
    pub(crate) read_only: bool,
    /// The key this host proves (`secret=`); with one, every connection insists on
    /// authenticating, both ways.
    pub(crate) secret: Option<Secret>,
    /// The key the target must prove, when not `secret` (`target_secret=`).
    pub(crate) target_secret: Option<Secret>,
    /// Largest request, once mapped (0 before): a connection that cannot carry it is refused.
    pub(crate) max_io_bytes: AtomicU32,
    pub(crate) knobs: Knobs,
    pub(crate) stats: Stats,
    pub(crate) telemetry: Telemetry,
    /// Responses that ended or reissued a request, or answered a keepalive (not stale or
    /// fenced ones): the proof that a new connection set is served, which ends an outage.
    pub(crate) answered: AtomicU64,
    /// The largest capacity (sectors) the target's responses have reported: the session
    /// grows the disk to it (docs/design.md, "Online resize").
    pub(crate) reported_capacity: AtomicU64,
    /// The installed set's target reports the export's capacity in its responses
    /// (`features::RESIZE`); without it the field is not read.
    pub(crate) resize: AtomicBool,
    pub(crate) faults: Arc<Faults>,
    /// Where the connections' own work (TCP send and receive) runs (reclaim-safe).
    pub(crate) io_wq: Arc<ReclaimQueue>,
}

impl DiskInfo {
    /// The mapping's name, for logs.
    pub(crate) fn name(&self) -> &str {
        self.name.as_str()
    }

    /// Whether hardware queue `qid` is a poll queue.
    pub(crate) fn is_poll_queue(&self, qid: u16) -> bool {
        qid >= self.nr_queues - self.nr_poll_queues
    }

    /// The disk's session at the target.
    pub(crate) fn session(&self) -> u32 {
        self.session_id.load(Ordering::Relaxed)
    }

    /// The keys its connections prove and expect.
    pub(crate) fn keys(&self) -> Option<crate::authn::Keys<'_>> {
        crate::authn::Keys::new(self.secret.as_ref(), self.target_secret.as_ref())
    }

    /// An accepted response reported the export's capacity, `sectors`: kept if the target
    /// has `features::RESIZE` and it is more than any before, and no more than a block device
    /// can have (a hostile target's value is dropped). The session work applies it at its
    /// next look. Any context; atomics only.
    pub(crate) fn note_capacity(&self, sectors: u64) {
        if self.resize.load(Ordering::Relaxed) && sectors <= MAX_CAPACITY_SECTORS {
            self.reported_capacity.fetch_max(sectors, Ordering::Relaxed);
        }
    }

    /// A Hello was refused `Stale`: the target's fence is at session `floor`.
    pub(crate) fn note_stale(&self, floor: u32) {
        self.stale_floor.store(floor, Ordering::Relaxed);
    }

    /// [`crate::proto::wire::Hello::flags`] of the disk's connections.
    pub(crate) fn hello_flags(&self) -> u16 {
        use crate::proto::wire::hello_flags::{NEW_SESSION, READ_ONLY};
        let ro = if self.read_only { READ_ONLY } else { 0 };
        let new = if self.opening.load(Ordering::Relaxed) {
            NEW_SESSION
        } else {
            0
        };
        ro | new
    }

    /// The active target's rdma_cm endpoint (the one new connection sets go to).
    pub(crate) fn peer(&self) -> Peer {
        self.paths.addr(self.paths.active()).rdma
    }

    pub(crate) fn io_timeout_ms(&self) -> u32 {
        self.knobs.io_timeout_ms.load(Ordering::Relaxed)
    }

    /// 0: off.
    pub(crate) fn keepalive_ms(&self) -> u32 {
        self.knobs.keepalive_ms.load(Ordering::Relaxed)
    }

    /// Whether a connection may send one more request: the target granted a credit, and the
    /// `max_credits` knob allows one more in flight. A wait is counted; `starved_ms` keeps
    /// since when requests have waited with no credit granted and none in flight (a target
    /// that stopped granting: nothing would ever complete to bring one back, so the health
    /// check fails such a connection).
    pub(crate) fn credit_ok(
        &self,
        c: &CreditSender,
        starved_ms: &mut Option<i64>,
        via: Via,
        op: Option<Op>,
    ) -> bool {
        if c.available() > 0 && c.in_flight() < self.knobs.max_credits.load(Ordering::Relaxed) {
            *starved_ms = None;
            return true;
        }
        Stats::inc(&self.stats.credit_waits);
        if let Some(op) = op {
            self.telemetry.credit_wait(via, op);
        }
        if c.available() == 0 && c.in_flight() == 0 {
            starved_ms.get_or_insert_with(now_ms);
        }
        false
    }
}

/// A disk, as its connections see it.
pub(crate) trait QueueHost: Send + Sync + 'static {
    fn info(&self) -> &DiskInfo;

    /// Connection `conn` on `transport` failed (`why`, already logged by the connection),
    /// and marked itself failed: it takes no new request. Any context; never sleeps. The
    /// disk ignores a connection that is not part of its current set: the session work
    /// looks at those itself.
    fn queue_failed(self: Arc<Self>, conn: ConnId, transport: Transport);
}

/// The most sectors a disk may have: its size in bytes must fit the kernel's `loff_t`.
pub(crate) const MAX_CAPACITY_SECTORS: u64 = (i64::MAX as u64) >> 9;

/// The name of a transport, for logs.
pub(crate) fn transport_name(t: Transport) -> &'static str {
    match t {
        Transport::Rdma => "RDMA",
        Transport::Tcp => "TCP",
    }
}
