// SPDX-License-Identifier: GPL-2.0

//! One mapped disk: its blk-mq hooks and its connections, one per hardware queue, on RDMA
//! ([`crate::rdma_queue`]) or TCP ([`crate::tcp_queue`]). The session work
//! ([`session`]) keeps them connected and moves them between transports; the knobs under
//! `/sys/block/rdmadiskN/rdmadisk/` are in [`knobs`].
//!
//! Recovery follows nvme-rdma's reset + reconnect: a failed queue (I/O timeout, CM event,
//! failed completion, hostile response) makes the disk reconnect every connection, requeue
//! the requests that were on them, and retry with exponential backoff. Requests wait
//! (`BLK_STS_RESOURCE`) meanwhile and fail only once the loss timeout has passed.

mod knobs;
mod session;

pub(crate) use knobs::ATTRS;

use core::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use kernel::{
    bindings as kb, new_condvar, new_mutex, new_spinlock, new_work,
    prelude::*,
    sync::{Arc, CondVar, Mutex, SpinLock},
    time::{msecs_to_jiffies, Ktime},
    workqueue::{self, impl_has_work, Work, WorkItem},
};

use crate::kapi::blk_mq::{BlkStatus, Disk, Driver, HwQueue, Rq, RqRef, TimeoutAction};
use crate::kapi::work;
use crate::map::DiskTable;
use crate::proto::credits::CreditSender;
use crate::proto::options::DeviceName;
use crate::proto::policy::{Policy, PolicyConfig, Transport};
use crate::proto::wire::{ExportName, HelloReply};
use crate::queue::Queue;
use crate::rdma_conn::{errno, Peer};
use crate::rdma_queue::QUEUE_DEPTH;
use crate::stats::Stats;

/// A request of an rdmadisk.
pub(crate) type DiskRq = Rq<DiskDev>;

/// Default blk-mq request timeout.
pub(crate) const DEFAULT_IO_TIMEOUT_MS: u32 = 30_000;
/// Default time requests wait for a lost connection to come back before failing.
pub(crate) const DEFAULT_LOSS_TIMEOUT_S: u32 = 60;
/// Default quiet time after which a connection is checked with a keepalive.
pub(crate) const DEFAULT_KEEPALIVE_MS: u32 = 10_000;
const BACKOFF_FIRST_MS: u32 = 100;
const BACKOFF_MAX_MS: u32 = 5_000;

/// Per-request driver data.
pub(crate) struct Pdu {
    /// Reissues after a CRC mismatch so far.
    pub(crate) crc_retries: AtomicU8,
}

/// Where a disk's connection stands.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Mapping: connecting for the first time.
    Connecting,
    /// Connected; I/O flows.
    Live,
    /// Reconnecting since `since_ms` (ktime, ms); requests wait until the loss timeout.
    Reconnecting { since_ms: i64 },
    /// The loss timeout passed: requests fail while reconnecting goes on.
    Failed,
    /// Being unmapped.
    Deleting { force: bool },
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Connecting => "connecting",
            State::Live => "live",
            State::Reconnecting { .. } => "reconnecting",
            State::Failed => "failed",
            State::Deleting { .. } => "deleting",
        }
    }
}

/// What a disk is, from its `map_device` line.
pub(crate) struct DiskParams {
    pub(crate) index: u32,
    pub(crate) name: DeviceName,
    pub(crate) export: ExportName,
    pub(crate) peer: Peer,
    /// The target's TCP port (same address as `peer`).
    pub(crate) tcp_port: u16,
    pub(crate) read_only: bool,
    pub(crate) nr_queues: u16,
}

/// A mapped disk.
#[pin_data]
pub(crate) struct DiskDev {
    pub(crate) index: u32,
    name: DeviceName,
    pub(crate) export: ExportName,
    pub(crate) peer: Peer,
    tcp_port: u16,
    pub(crate) read_only: bool,
    pub(crate) nr_queues: u16,
    pub(crate) stats: Stats,
    io_timeout_ms: AtomicU32,
    loss_timeout_s: AtomicU32,
    max_credits: AtomicU32,
    keepalive_ms: AtomicU32,
    table: Arc<DiskTable>,
    #[pin]
    state: SpinLock<State>,
    /// Which transport I/O should use, and when to switch.
    #[pin]
    policy: SpinLock<Policy>,
    #[pin]
    queues: SpinLock<KVec<Option<Queue>>>,
    /// The block device; taken out to delete it.
    #[pin]
    disk: Mutex<Option<Disk<DiskDev>>>,
    /// Set by events for the session work; a nap ends early when it is set.
    #[pin]
    kicked: SpinLock<bool>,
    #[pin]
    wake: CondVar,
    #[pin]
    work: Work<DiskDev>,
}

impl_has_work! {
    impl HasWork<Self> for DiskDev { self.work }
}

impl WorkItem for DiskDev {
    type Pointer = Arc<DiskDev>;

    fn run(this: Arc<DiskDev>) {
        this.run_session();
    }
}

pub(crate) fn now_ms() -> i64 {
    Ktime::ktime_get().to_ms()
}

impl DiskDev {
    pub(crate) fn new(p: DiskParams, table: Arc<DiskTable>) -> Result<Arc<Self>> {
        let mut queues = KVec::with_capacity(p.nr_queues.into(), GFP_KERNEL)?;
        for _ in 0..p.nr_queues {
            queues.push(None, GFP_KERNEL)?;
        }
        let policy = Policy::new(PolicyConfig::default(), now_ms() as u64);
        Arc::pin_init(
            pin_init!(Self {
                index: p.index,
                name: p.name,
                export: p.export,
                peer: p.peer,
                tcp_port: p.tcp_port,
                read_only: p.read_only,
                nr_queues: p.nr_queues,
                stats: Stats::default(),
                io_timeout_ms: AtomicU32::new(DEFAULT_IO_TIMEOUT_MS),
                loss_timeout_s: AtomicU32::new(DEFAULT_LOSS_TIMEOUT_S),
                max_credits: AtomicU32::new(u32::from(QUEUE_DEPTH)),
                keepalive_ms: AtomicU32::new(DEFAULT_KEEPALIVE_MS),
                table,
                state <- new_spinlock!(State::Connecting, "rdmadisk::disk::state"),
                policy <- new_spinlock!(policy, "rdmadisk::disk::policy"),
                queues <- new_spinlock!(queues, "rdmadisk::disk::queues"),
                disk <- new_mutex!(None, "rdmadisk::disk::disk"),
                kicked <- new_spinlock!(false, "rdmadisk::disk::kicked"),
                wake <- new_condvar!("rdmadisk::disk::wake"),
                work <- new_work!("rdmadisk::disk::work"),
            }),
            GFP_KERNEL,
        )
    }

    /// The mapping's name, for logs.
    pub(crate) fn name(&self) -> &str {
        self.name.as_str()
    }

    /// The target's TCP endpoint.
    pub(crate) fn tcp_peer(&self) -> Peer {
        Peer {
            addr: self.peer.addr,
            port: self.tcp_port,
        }
    }

    pub(crate) fn state(&self) -> State {
        *self.state.lock()
    }

    fn set_state(&self, s: State) {
        let mut st = self.state.lock();
        // Nothing leaves `Deleting`.
        if !matches!(*st, State::Deleting { .. }) {
            *st = s;
        }
    }

    /// 0: off.
    pub(crate) fn keepalive_ms(&self) -> u32 {
        self.keepalive_ms.load(Ordering::Relaxed)
    }

    pub(crate) fn io_timeout_ms(&self) -> u32 {
        self.io_timeout_ms.load(Ordering::Relaxed)
    }

    /// Whether a queue may send one more request: the target granted a credit, and the
    /// `max_credits` knob allows one more in flight.
    pub(crate) fn credit_ok(&self, c: &CreditSender) -> bool {
        c.available() > 0 && c.in_flight() < self.max_credits.load(Ordering::Relaxed)
    }

    /// Connects every queue on `t` (all or none); returns them with the first queue's Hello
    /// reply.
    fn connect_all(self: &Arc<Self>, t: Transport) -> Result<(KVec<Option<Queue>>, HelloReply)> {
        let mut qs = KVec::with_capacity(self.nr_queues.into(), GFP_KERNEL)?;
        let mut first = None;
        for qid in 0..self.nr_queues {
            match Queue::connect(self, qid, t) {
                Ok((q, reply)) => {
                    first.get_or_insert(reply);
                    // Cannot fail: the capacity is there.
                    let _ = qs.push(Some(q), GFP_KERNEL);
                }
                Err(e) => {
                    for q in qs.iter().flatten() {
                        q.shutdown(|rq| rq.end(BlkStatus::IoErr));
                    }
                    return Err(e);
                }
            }
        }
        Ok((qs, first.ok_or(EINVAL)?))
    }

    /// Connects every queue of a new mapping: on RDMA, or on TCP when RDMA cannot be had
    /// (no device, no path) and the target is there. Returns the first queue's Hello reply.
    pub(crate) fn connect_queues(self: &Arc<Self>) -> Result<HelloReply> {
        let (qs, reply) = match self.connect_all(Transport::Rdma) {
            Ok(r) => r,
            // The target answered and said no; it would over TCP too.
            Err(e) if e == errno(kb::ECONNREFUSED) => return Err(e),
            Err(e) => {
                pr_warn!("{}: no RDMA connection ({e:?}); trying TCP\n", self.name());
                let r = self.connect_all(Transport::Tcp).map_err(|_| e)?;
                // Probing from the start: RDMA may come (back) any time.
                let cfg = self.policy.lock().config();
                *self.policy.lock() = Policy::new_on_tcp(cfg, true, now_ms() as u64);
                r
            }
        };
        *self.queues.lock() = qs;
        Ok(reply)
    }

    /// Puts `fresh` in place of the current connections, then tears those down, handing
    /// their requests to `dispose`.
    fn replace_queues(&self, fresh: KVec<Option<Queue>>, mut dispose: impl FnMut(DiskRq)) {
        let old = core::mem::replace(&mut *self.queues.lock(), fresh);
        for q in old.iter().flatten() {
            q.shutdown(&mut dispose);
        }
    }

    /// Tears down every connection, handing their requests to `dispose`.
    fn shutdown_queues(&self, dispose: impl FnMut(DiskRq)) {
        self.shutdown_queues_if(|_| true, dispose);
    }

    /// Tears down the connections `pick` chooses, each taken out of its slot first, handing
    /// their requests to `dispose`.
    fn shutdown_queues_if(&self, pick: impl Fn(&Queue) -> bool, mut dispose: impl FnMut(DiskRq)) {
        for qid in 0..usize::from(self.nr_queues) {
            let q = match self.queues.lock().get_mut(qid) {
                Some(slot) if slot.as_ref().is_some_and(&pick) => slot.take(),
                _ => None,
            };
            if let Some(q) = q {
                q.shutdown(&mut dispose);
            }
        }
    }

    /// The transport every queue is connected on, if they all are and none has failed.
    fn healthy_transport(&self) -> Option<Transport> {
        let qs = self.queues.lock();
        let mut t = None;
        for q in qs.iter() {
            let q = q.as_ref().filter(|q| !q.is_failed())?;
            if t.is_some_and(|t| t != q.transport()) {
                return None;
            }
            t = Some(q.transport());
        }
        t
    }

    /// The queues are up: I/O may flow (adding the disk reads its partition table).
    pub(crate) fn go_live(self: &Arc<Self>) {
        self.set_state(State::Live);
        // A queue that failed while the disk was still connecting was not acted on then.
        if self.healthy_transport().is_none() {
            self.queue_failed(Transport::Rdma);
        }
    }

    /// Keeps the block device, once added.
    pub(crate) fn set_disk(&self, disk: Disk<DiskDev>) {
        *self.disk.lock() = Some(disk);
    }

    /// Tears down the connections of a disk that never got its block device.
    pub(crate) fn shutdown(&self) {
        *self.state.lock() = State::Deleting { force: true };
        self.shutdown_queues(|rq| rq.end(BlkStatus::IoErr));
    }

    pub(crate) fn state_name(&self) -> &'static str {
        self.state().name()
    }

    /// Marks queue `qid`'s connection on `t` failed (`failed`, its flag), once: logs `why`
    /// and starts the recovery. Any context.
    pub(crate) fn connection_failed(
        self: &Arc<Self>,
        failed: &mut bool,
        qid: u16,
        t: Transport,
        why: &str,
    ) {
        if !core::mem::replace(failed, true) {
            pr_err!(
                "{}: queue {qid} ({}): {why}; resetting the connection\n",
                self.name(),
                session::transport_name(t)
            );
            self.queue_failed(t);
        }
    }

    /// A queue on `t` failed: the disk stops issuing until it is reconnected, and the
    /// session work reconnects, or switches transport if the policy says so. Any context.
    pub(crate) fn queue_failed(self: &Arc<Self>, t: Transport) {
        let first = {
            let mut st = self.state.lock();
            match *st {
                State::Deleting { .. } | State::Connecting => return,
                State::Live => {
                    *st = State::Reconnecting { since_ms: now_ms() };
                    true
                }
                State::Reconnecting { .. } | State::Failed => false,
            }
        };
        // One failure per incident, however many queues report it.
        if first && t == Transport::Rdma {
            let _ = self.policy.lock().on_rdma_failure(now_ms() as u64);
        }
        self.kick();
    }

    /// Has the session work look at the disk again: queues it, or ends its nap.
    pub(crate) fn kick(self: &Arc<Self>) {
        let st = self.state.lock();
        if matches!(*st, State::Deleting { .. }) {
            return;
        }
        // Enqueued under the state lock, so `delete` (which sets `Deleting` under it, then
        // flushes the work) never misses an item.
        let _ = workqueue::system_long().enqueue(self.clone());
        drop(st);
        self.wake_session();
    }

    /// Ends the session work's nap.
    fn wake_session(&self) {
        *self.kicked.lock() = true;
        self.wake.notify_all();
    }

    fn requeue_or_fail(&self, rq: DiskRq, switch: bool) {
        if matches!(self.state(), State::Deleting { force: true }) {
            rq.end(BlkStatus::IoErr);
        } else {
            Stats::inc(&self.stats.requeued);
            if switch {
                Stats::inc(&self.stats.switch_requeued);
            }
            rq.requeue(true);
        }
    }

    fn deleting(&self) -> bool {
        matches!(self.state(), State::Deleting { .. })
    }

    /// Sleeps up to `ms`, less if kicked or the disk is being deleted. True if kicked.
    fn nap(&self, ms: u32) -> bool {
        let mut g = self.kicked.lock();
        if !*g && !self.deleting() {
            let _ = self
                .wake
                .wait_interruptible_timeout(&mut g, msecs_to_jiffies(ms));
        }
        core::mem::replace(&mut *g, false)
    }

    /// Lets I/O that waited for a connection go.
    fn restart_io(&self) {
        if let Some(d) = self.disk.lock().as_ref() {
            d.kick_requeue_list();
            d.run_queues();
        }
    }

    /// Removes the disk. `force` fails its I/O; otherwise an open disk is `EBUSY`.
    pub(crate) fn delete(self: &Arc<Self>, force: bool) -> Result {
        let Some(disk) = self.disk.lock().take() else {
            return Err(ENODEV);
        };
        if !force && disk.is_open() {
            *self.disk.lock() = Some(disk);
            return Err(EBUSY);
        }
        *self.state.lock() = State::Deleting { force };
        self.wake_session();
        work::flush(&self.work);
        if force {
            disk.mark_dead();
            self.shutdown_queues(|rq| rq.end(BlkStatus::IoErr));
        }
        drop(disk);
        self.shutdown_queues(|rq| rq.end(BlkStatus::IoErr));
        self.table.remove(self.index);
        pr_info!("{}: unmapped rdmadisk{}\n", self.name(), self.index);
        Ok(())
    }

    fn queue(&self, hw: u32) -> Option<Queue> {
        self.queues.lock().get(hw as usize).and_then(Clone::clone)
    }
}

impl Driver for DiskDev {
    type Pdu = Pdu;

    fn new_pdu() -> Pdu {
        Pdu {
            crc_retries: AtomicU8::new(0),
        }
    }

    fn queue_rq(
        &self,
        hctx: &HwQueue<'_>,
        rq: DiskRq,
        _last: bool,
    ) -> core::result::Result<(), (DiskRq, BlkStatus)> {
        let fail = |rq| {
            Stats::inc(&self.stats.io_errors);
            Err((rq, BlkStatus::IoErr))
        };
        match self.state() {
            State::Live => {}
            State::Connecting => return Err((rq, BlkStatus::Resource)),
            State::Reconnecting { since_ms } => {
                let loss_ms = i64::from(self.loss_timeout_s()) * 1000;
                return if now_ms() - since_ms > loss_ms {
                    fail(rq)
                } else {
                    Err((rq, BlkStatus::Resource))
                };
            }
            State::Failed | State::Deleting { .. } => return fail(rq),
        }
        match self.queue(hctx.index()) {
            Some(q) => q.submit(rq),
            None => Err((rq, BlkStatus::Resource)),
        }
    }

    fn timeout(&self, rq: &RqRef<'_, Self>) -> TimeoutAction {
        Stats::inc(&self.stats.timeouts);
        pr_warn!(
            "{}: request tag {} on queue {} timed out after {} ms\n",
            self.name(),
            rq.tag(),
            rq.hw_queue(),
            self.io_timeout_ms()
        );
        if let Some(q) = self.queue(rq.hw_queue()) {
            q.fail_timeout();
        }
        TimeoutAction::ResetTimer
    }
}
