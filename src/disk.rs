// SPDX-License-Identifier: GPL-2.0

//! One mapped disk: its blk-mq hooks, its connection set (one connection per hardware queue,
//! all on RDMA ([`crate::rdma_queue`]) or all on TCP ([`crate::tcp_queue`])), and where it
//! stands ([`State`]).
//!
//! Only the session work ([`session`]) changes the connection set or the state, with two
//! exceptions that must act at once and only ever take connections away: the removal of an
//! RDMA device (its resources must be released before the removal returns), and unmapping.
//! Connections report failures through [`QueueHost`]; the disk records them and wakes the
//! session (docs/design.md, "Transports report, the session decides").

mod knobs;
mod session;

pub(crate) use knobs::ATTRS;

use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use kernel::{
    new_condvar, new_mutex, new_spinlock, new_work,
    prelude::*,
    str::CStr,
    sync::{Arc, CondVar, CondVarTimeoutResult, Mutex, SpinLock},
    time::msecs_to_jiffies,
    workqueue::{impl_has_work, Work, WorkItem},
};

use crate::faults::Faults;
use crate::host::{now_ms, ConnId, DiskInfo, DiskRq, Knobs, Pdu, QueueHost};
use crate::kapi::blk_mq::{BlkStatus, DevAttr, Disk, Driver, HwQueue, RqRef, TimeoutAction};
use crate::kapi::debugfs;
use crate::kapi::verbs::DeviceId;
use crate::kapi::work::{self, ReclaimQueue};
use crate::paths::Paths;
use crate::proto::options::DeviceName;
use crate::proto::paths::PathSel;
use crate::proto::policy::{Policy, PolicyConfig, SwitchReason, Transport};
use crate::proto::wire::{ExportName, HelloReply, Opcode};
use crate::queue::Queue;
use crate::rdma_conn::Peer;
use crate::rdma_queue::QUEUE_DEPTH;
use crate::stats::Stats;
use crate::telemetry::{self, Telemetry};

/// Default blk-mq request timeout.
pub(crate) const DEFAULT_IO_TIMEOUT_MS: u32 = 30_000;
/// Default time requests wait for a lost connection to come back before the disk fails.
pub(crate) const DEFAULT_LOSS_TIMEOUT_S: u32 = 60;
/// Default quiet time after which a connection is checked with a keepalive.
pub(crate) const DEFAULT_KEEPALIVE_MS: u32 = 10_000;
/// `fast_io_fail_s` when off (the default).
pub(crate) const FAST_IO_FAIL_OFF: u32 = u32::MAX;
/// `loss_timeout_s` when `never` (nvme's `ctrl_loss_tmo=-1`): 0 is a deadline like any other,
/// the first loss of the connections.
pub(crate) const LOSS_TIMEOUT_NEVER: u32 = u32::MAX;
/// What a normal unmap waits, at most, for the target to take the session's `Close`.
const CLOSE_BUDGET_MS: u32 = 3_000;

/// Where a disk's connection stands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum State {
    /// Mapping: connecting for the first time.
    Connecting,
    /// Connected; I/O flows.
    Live,
    /// No usable connection since `since_ms` (ktime, ms); requests wait (until
    /// `fast_io_fail_s`, if set) while the session reconnects, until `loss_timeout_s`.
    Reconnecting { since_ms: i64 },
    /// The loss timeout passed, or mapping failed: every request fails, nothing reconnects.
    /// Only unmapping is left.
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

/// The table a disk is mapped in, as the disk sees it: the disk leaves it when unmapped.
pub(crate) trait Registry: Send + Sync {
    fn remove(&self, index: u32);
}

/// What a disk is, from its `map_device` line.
pub(crate) struct DiskParams {
    pub(crate) index: u32,
    pub(crate) name: DeviceName,
    pub(crate) export: ExportName,
    /// The targets, in the map's order (the first is preferred).
    pub(crate) paths: Paths,
    pub(crate) read_only: bool,
    /// Hardware queues in all; the last `nr_poll_queues` of them are poll queues.
    pub(crate) nr_queues: u16,
    pub(crate) nr_poll_queues: u16,
    pub(crate) secret: Option<crate::proto::auth::Secret>,
    pub(crate) target_secret: Option<crate::proto::auth::Secret>,
}

/// The mapping's first connection set, as `map_device` needs it to add the block device.
#[derive(Clone, Copy)]
pub(crate) struct Attached {
    /// The first queue's Hello reply.
    pub(crate) reply: HelloReply,
    /// Largest request every connection of the set can carry.
    pub(crate) max_io_bytes: u32,
}

/// The connection set and the state, changed together.
struct Ctrl {
    state: State,
    /// Epoch of the installed set (0: none yet). Failures of other sets are not this disk's
    /// concern: the session checks a set it installs itself.
    epoch: u32,
    queues: KVec<Option<Queue>>,
    /// `fast_io_fail_s` has passed in this outage: waiting requests fail.
    fast_fail: bool,
    /// When the current outage began (ms, ktime): the first failure after the disk last made
    /// progress. A new set ends the outage only once it answers a request (or stays up for
    /// twice the I/O timeout), so a target that accepts connections but answers nothing still
    /// meets the loss timeout.
    outage_since: Option<i64>,
    /// The `answered` count when the current set was installed, and when.
    installed_answered: u64,
    installed_ms: i64,
    /// The last transport switch that completed: to what, why, and when (ms, ktime).
    last_switch: Option<(Transport, SwitchReason, i64)>,
}

impl Ctrl {
    /// Enters `Reconnecting` (from `Live`), continuing the outage in progress if there is one.
    fn enter_reconnecting(&mut self) {
        if self.state == State::Live {
            let since_ms = *self.outage_since.get_or_insert_with(now_ms);
            self.state = State::Reconnecting { since_ms };
        }
    }
}

/// A mapped disk.
#[pin_data]
pub(crate) struct DiskDev {
    pub(crate) index: u32,
    pub(crate) read_only: bool,
    info: DiskInfo,
    loss_timeout_s: AtomicU32,
    fast_io_fail_s: AtomicU32,
    registry: Arc<dyn Registry>,
    /// Where the session work runs.
    session_wq: Arc<ReclaimQueue>,
    #[pin]
    ctrl: SpinLock<Ctrl>,
    /// Which transport I/O should use, and when to switch.
    #[pin]
    policy: SpinLock<Policy>,
    /// Which target (path) I/O should use, and when to move (several targets).
    #[pin]
    pathsel: SpinLock<PathSel>,
    /// `path_failover_ms`.
    path_failover_ms: AtomicU32,
    /// When the next failback probe of the first target is due (ms, ktime).
    failback_next_ms: AtomicI64,
    /// The block device; taken out to delete it.
    #[pin]
    disk: Mutex<Option<Disk<DiskDev>>>,
    /// The outcome of the first connection set, for the `map_device` writer.
    #[pin]
    attach: Mutex<Option<Result<Attached>>>,
    #[pin]
    attach_cv: CondVar,
    /// Set by events for the session work; a nap ends early when it is set.
    #[pin]
    kicked: SpinLock<bool>,
    #[pin]
    wake: CondVar,
    #[pin]
    work: Work<DiskDev>,
    /// The fault switches' debugfs directory.
    #[pin]
    debugfs: Mutex<Option<debugfs::Dir<Faults>>>,
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

impl DiskDev {
    pub(crate) fn new(
        p: DiskParams,
        registry: Arc<dyn Registry>,
        session_wq: Arc<ReclaimQueue>,
        io_wq: Arc<ReclaimQueue>,
    ) -> Result<Arc<Self>> {
        let mut queues = KVec::with_capacity(p.nr_queues.into(), GFP_KERNEL)?;
        for _ in 0..p.nr_queues {
            queues.push(None, GFP_KERNEL)?;
        }
        let policy = Policy::new(PolicyConfig::default(), now_ms() as u64);
        let pathsel = PathSel::new(p.paths.len() as u8);
        let faults = Arc::new(Faults::new(), GFP_KERNEL)?;
        Arc::pin_init(
            pin_init!(Self {
                index: p.index,
                read_only: p.read_only,
                info: DiskInfo {
                    name: p.name,
                    export: p.export,
                    paths: p.paths,
                    nr_queues: p.nr_queues,
                    nr_poll_queues: p.nr_poll_queues,
                    // Never 0, which is a probe's. A target that has seen this host map the
                    // export before names a floor to go above (`raise_session`).
                    session_id: AtomicU32::new(1),
                    stale_floor: AtomicU32::new(0),
                    opening: AtomicBool::new(true),
                    read_only: p.read_only,
                    secret: p.secret,
                    target_secret: p.target_secret,
                    max_io_bytes: AtomicU32::new(0),
                    knobs: Knobs {
                        io_timeout_ms: AtomicU32::new(DEFAULT_IO_TIMEOUT_MS),
                        keepalive_ms: AtomicU32::new(DEFAULT_KEEPALIVE_MS),
                        max_credits: AtomicU32::new(u32::from(QUEUE_DEPTH)),
                        inline_max: AtomicU32::new(crate::rdma_queue::DEFAULT_INLINE_MAX),
                    },
                    stats: Stats::default(),
                    telemetry: Telemetry::default(),
                    answered: AtomicU64::new(0),
                    reported_capacity: AtomicU64::new(0),
                    resize: AtomicBool::new(false),
                    faults,
                    io_wq,
                },
                session_wq,
                loss_timeout_s: AtomicU32::new(DEFAULT_LOSS_TIMEOUT_S),
                fast_io_fail_s: AtomicU32::new(FAST_IO_FAIL_OFF),
                registry,
                ctrl <- new_spinlock!(
                    Ctrl {
                        state: State::Connecting,
                        epoch: 0,
                        queues,
                        fast_fail: false,
                        outage_since: None,
                        installed_answered: 0,
                        installed_ms: 0,
                        last_switch: None,
                    },
                    "rdmadisk::disk::ctrl"
                ),
                policy <- new_spinlock!(policy, "rdmadisk::disk::policy"),
                pathsel <- new_spinlock!(pathsel, "rdmadisk::disk::pathsel"),
                path_failover_ms: AtomicU32::new(crate::proto::paths::DEFAULT_FAILOVER_MS),
                failback_next_ms: AtomicI64::new(0),
                disk <- new_mutex!(None, "rdmadisk::disk::disk"),
                attach <- new_mutex!(None, "rdmadisk::disk::attach"),
                attach_cv <- new_condvar!("rdmadisk::disk::attach_cv"),
                kicked <- new_spinlock!(false, "rdmadisk::disk::kicked"),
                wake <- new_condvar!("rdmadisk::disk::wake"),
                work <- new_work!("rdmadisk::disk::work"),
                debugfs <- new_mutex!(None, "rdmadisk::disk::debugfs"),
            }),
            GFP_KERNEL,
        )
    }

    /// The mapping's name, for logs.
    pub(crate) fn name(&self) -> &str {
        self.info.name()
    }

    pub(crate) fn export(&self) -> ExportName {
        self.info.export
    }

    /// The active target.
    pub(crate) fn peer(&self) -> Peer {
        self.info.peer()
    }

    pub(crate) fn paths(&self) -> &Paths {
        &self.info.paths
    }

    pub(crate) fn nr_queues(&self) -> u16 {
        self.info.nr_queues
    }

    pub(crate) fn nr_poll_queues(&self) -> u16 {
        self.info.nr_poll_queues
    }

    pub(crate) fn io_timeout_ms(&self) -> u32 {
        self.info.io_timeout_ms()
    }

    pub(crate) fn state(&self) -> State {
        self.ctrl.lock().state
    }

    pub(crate) fn state_name(&self) -> &'static str {
        self.state().name()
    }

    /// The disk's largest request, once its block device limits are known: later
    /// connections must carry it.
    pub(crate) fn set_max_io_bytes(&self, n: u32) {
        self.info.max_io_bytes.store(n, Ordering::Relaxed);
    }

    pub(crate) fn loss_timeout_s(&self) -> u32 {
        self.loss_timeout_s.load(Ordering::Relaxed)
    }

    /// The loss timeout in ms; `None` when it is `never`.
    pub(crate) fn loss_ms(&self) -> Option<i64> {
        match self.loss_timeout_s() {
            LOSS_TIMEOUT_NEVER => None,
            s => Some(i64::from(s) * 1000),
        }
    }

    fn deleting(&self) -> bool {
        matches!(self.state(), State::Deleting { .. })
    }

    /// Starts mapping: the session connects the first set (RDMA, or TCP when RDMA cannot be
    /// had and the target answers there), and the debugfs directory appears under `dbg_root`.
    /// [`DiskDev::wait_attached`] returns the outcome.
    pub(crate) fn start(self: &Arc<Self>, name: &CStr, dbg_root: &debugfs::Dir<()>) {
        *self.debugfs.lock() = Some(Faults::debugfs(&self.info.faults, name, dbg_root));
        self.kick();
    }

    /// Waits for the first connection set; `EINTR` if the writer is interrupted (the caller
    /// then unmaps the disk, which stops the session).
    pub(crate) fn wait_attached(&self) -> Result<Attached> {
        let mut g = self.attach.lock();
        loop {
            if let Some(r) = g.as_ref() {
                return r.as_ref().map(|a| *a).map_err(|e| *e);
            }
            // Long enough for any set-up budget; the session bounds its own attempts.
            match self
                .attach_cv
                .wait_interruptible_timeout(&mut g, msecs_to_jiffies(5_000))
            {
                CondVarTimeoutResult::Signal { .. } => return Err(EINTR),
                _ => continue,
            }
        }
    }

    /// Keeps the block device, once added, and lets I/O that waited for it go.
    pub(crate) fn set_disk(&self, disk: Disk<DiskDev>) {
        let mut slot = self.disk.lock();
        // The disk's files are up from inside `device_add_disk` on: an `io_timeout_ms` written
        // since then found no disk to apply to.
        disk.set_timeout_ms(self.io_timeout_ms());
        *slot = Some(disk);
        drop(slot);
        self.restart_io();
    }

    /// Has the session work look at the disk again: queues it, or ends its nap.
    pub(crate) fn kick(self: &Arc<Self>) {
        let c = self.ctrl.lock();
        if matches!(c.state, State::Deleting { .. }) {
            return;
        }
        // Enqueued under the lock, so `delete` (which sets `Deleting` under it, then flushes
        // the work) never misses an item.
        let _ = self.session_wq.queue().enqueue(self.clone());
        drop(c);
        self.wake_session();
    }

    /// Ends the session work's nap.
    fn wake_session(&self) {
        *self.kicked.lock() = true;
        self.wake.notify_all();
    }

    /// Lets I/O that waited for a connection go.
    fn restart_io(&self) {
        if let Some(d) = self.disk.lock().as_ref() {
            d.kick_requeue_list();
            d.run_queues();
        }
    }

    /// Whether `rq` was first given to a connection more than `loss_timeout_s` ago.
    fn overdue(&self, rq: &DiskRq) -> bool {
        self.loss_ms().is_some_and(|loss| rq.pdu().age_ms() > loss)
    }

    fn fail_rq(&self, rq: DiskRq) -> core::result::Result<(), (DiskRq, BlkStatus)> {
        Stats::inc(&self.info.stats.io_errors);
        Err((rq, BlkStatus::IoErr))
    }

    /// Hands a request taken off a connection back to blk-mq to be reissued, or fails it if
    /// the disk is failing its I/O. A request taken off a failed connection (not moved by a
    /// planned `switch`) that was first sent more than `loss_timeout_s` ago fails too: a
    /// target that answers everything but this request (or only keepalives) must not keep it
    /// going round timeouts and reconnects for ever (nvme bounds its retries the same way).
    fn requeue_or_fail(&self, rq: DiskRq, switch: bool) {
        let fail = {
            let c = self.ctrl.lock();
            matches!(c.state, State::Deleting { force: true } | State::Failed)
        };
        let overdue = !fail && !switch && self.overdue(&rq);
        if overdue {
            pr_err!(
                "{}: a request of {} bytes at sector {} is still unanswered {} ms after it was first sent (loss_timeout_s): failing it\n",
                self.name(),
                rq.bytes(),
                rq.sector(),
                rq.pdu().age_ms()
            );
        }
        if fail || overdue {
            Stats::inc(&self.info.stats.io_errors);
            rq.end(BlkStatus::IoErr);
        } else {
            Stats::inc(&self.info.stats.requeued);
            if switch {
                Stats::inc(&self.info.stats.switch_requeued);
            }
            rq.requeue(true);
        }
    }

    /// Takes every connection out of the set and tears it down, handing its requests to
    /// `dispose`. May sleep.
    fn teardown_all(&self, mut dispose: impl FnMut(DiskRq)) {
        for qid in 0..usize::from(self.info.nr_queues) {
            let q = self.ctrl.lock().queues.get_mut(qid).and_then(Option::take);
            if let Some(q) = q {
                q.shutdown(&mut dispose);
            }
        }
    }

    /// The RDMA device `dev` is going away (`others`: other RDMA devices remain). Connections
    /// on it are torn down before this returns, so the device can go; their requests wait for
    /// the session to reconnect (on TCP). May sleep.
    pub(crate) fn rdma_device_removed(self: &Arc<Self>, dev: DeviceId, name: &CStr, others: bool) {
        let (uses, healthy_rdma) = {
            let c = self.ctrl.lock();
            let uses = c.queues.iter().flatten().any(|q| q.on_device(dev));
            let rdma = c.queues.iter().all(|q| {
                q.as_ref()
                    .is_some_and(|q| q.transport() == Transport::Rdma && !q.is_failed())
            });
            (uses, rdma)
        };
        // Healthy RDMA connections on another device do not care. Otherwise (on TCP, or
        // between connections) this may be the device RDMA would use: RDMA is out of reach
        // only if it was the last one. With others left, probes and reconnects go on, and
        // find out whether one of them reaches the target.
        if uses || (!healthy_rdma && !others) {
            let _ = self
                .policy
                .lock()
                .on_device_removed(!others, now_ms() as u64);
        }
        if uses {
            pr_info!(
                "{}: RDMA device {name} is going away: moving I/O to TCP\n",
                self.name()
            );
            for qid in 0..usize::from(self.info.nr_queues) {
                let q = {
                    let mut c = self.ctrl.lock();
                    let q = match c.queues.get_mut(qid) {
                        Some(slot) if slot.as_ref().is_some_and(|q| q.on_device(dev)) => {
                            slot.take()
                        }
                        _ => None,
                    };
                    // Only a connection taken away makes the disk reconnect: the session may
                    // have installed a new set (on TCP) between two of these iterations.
                    if q.is_some() {
                        c.enter_reconnecting();
                    }
                    q
                };
                if let Some(q) = q {
                    q.shutdown(|rq| self.requeue_or_fail(rq, true));
                }
            }
        }
        self.kick();
    }

    /// An RDMA device appeared: the end of NIC servicing, typically.
    pub(crate) fn rdma_device_added(self: &Arc<Self>) {
        if self.policy.lock().on_device_added(now_ms() as u64)
            == crate::proto::policy::Action::DrainToRdma
        {
            pr_info!(
                "{}: an RDMA device appeared: switching back to RDMA\n",
                self.name()
            );
        }
        self.kick();
    }

    /// Stops the session work for good and tears every connection down, failing their
    /// requests.
    fn stop(&self, force: bool) {
        {
            let mut c = self.ctrl.lock();
            c.state = State::Deleting { force };
        }
        self.wake_session();
        {
            // A writer still waiting for the first set gets an answer.
            let mut a = self.attach.lock();
            a.get_or_insert(Err(ENODEV));
            self.attach_cv.notify_all();
        }
        work::flush(&self.work);
        self.teardown_all(|rq| self.requeue_or_fail(rq, false));
    }

    /// Unmaps a disk whose mapping failed before its block device was added.
    pub(crate) fn abort(&self) {
        self.stop(true);
        drop(self.debugfs.lock().take());
        self.registry.remove(self.index);
    }

    /// Removes the disk. `force` fails its I/O; otherwise an open disk is `EBUSY`, and dirty
    /// data is written back first over the live connection (the session keeps it up, or the
    /// loss timeout fails it).
    pub(crate) fn delete(self: &Arc<Self>, force: bool) -> Result {
        let Some(disk) = self.disk.lock().take() else {
            return Err(ENODEV);
        };
        if !force && disk.is_open() {
            *self.disk.lock() = Some(disk);
            return Err(EBUSY);
        }
        if force {
            disk.mark_dead();
            // Requests in flight end with an error before `del_gendisk` waits for them.
            self.stop(true);
            drop(disk);
        } else {
            drop(disk);
            self.close_session();
            self.stop(false);
        }
        drop(self.debugfs.lock().take());
        self.registry.remove(self.index);
        pr_info!("{}: unmapped rdmadisk{}\n", self.name(), self.index);
        Ok(())
    }

    /// A normal unmap, with every request written back: tells the target the session ends
    /// (`Close`), so that it may forget the session's fence once its connections are gone
    /// (docs/design.md, "The fence invariant"). A connection of its own, on the transport of
    /// the installed set and as that set; a failure only leaves the fence in place until this
    /// host next maps the export, and is logged. Read-only disks have no fence.
    fn close_session(&self) {
        let (epoch, t) = {
            let c = self.ctrl.lock();
            let t = c.queues.iter().flatten().next().map(Queue::transport);
            (c.epoch, t)
        };
        let (Some(t), false) = (t, self.read_only || epoch == 0) else {
            return;
        };
        let res = match t {
            Transport::Rdma => crate::probe::one_shot(
                &crate::probe::OneShot {
                    who: self.name(),
                    peer: self.info.peer(),
                    export: self.info.export,
                    keys: self.info.keys(),
                    session_id: self.info.session(),
                    epoch,
                    hello_flags: self.info.hello_flags(),
                    op: Opcode::Close,
                    budget_ms: CLOSE_BUDGET_MS,
                },
                false,
            ),
            Transport::Tcp => {
                crate::tcp_queue::one_shot(&self.info, epoch, Opcode::Close, CLOSE_BUDGET_MS)
            }
        };
        match res {
            Ok(()) => pr_info!(
                "{}: closed session {} at the target\n",
                self.name(),
                self.info.session()
            ),
            Err(e) => pr_info!(
                "{}: could not close session {} at the target ({e:?}): its fence stays there until this host maps export {} again\n",
                self.name(),
                self.info.session(),
                self.info.export
            ),
        }
    }

    fn queue(&self, hw: u32) -> Option<Queue> {
        self.ctrl
            .lock()
            .queues
            .get(hw as usize)
            .and_then(Clone::clone)
    }
}

impl QueueHost for DiskDev {
    fn info(&self) -> &DiskInfo {
        &self.info
    }

    fn queue_failed(self: Arc<Self>, conn: ConnId, transport: Transport) {
        let first = {
            let mut c = self.ctrl.lock();
            if c.epoch != conn.epoch {
                return;
            }
            match c.state {
                State::Live => {
                    c.enter_reconnecting();
                    true
                }
                State::Connecting | State::Reconnecting { .. } => false,
                State::Failed | State::Deleting { .. } => return,
            }
        };
        // One failure per incident, however many connections report it.
        if first && transport == Transport::Rdma {
            let _ = self.policy.lock().on_rdma_failure(now_ms() as u64);
        }
        self.kick();
    }
}

impl Driver for DiskDev {
    type Pdu = Pdu;

    fn dev_attrs() -> &'static [&'static DevAttr<Self>] {
        knobs::DEV_ATTRS
    }

    fn new_pdu() -> Pdu {
        Pdu::new()
    }

    fn queue_rq(
        &self,
        hctx: &HwQueue<'_>,
        mut rq: DiskRq,
        _last: bool,
    ) -> core::result::Result<(), (DiskRq, BlkStatus)> {
        // One clock read serves the loss-timeout clock and the telemetry's stamps.
        let now_ns = telemetry::now_ns();
        let stamp = if self.info.telemetry.is_on() {
            now_ns
        } else {
            0
        };
        if rq.first_dispatch() {
            rq.pdu().start(stamp);
        }
        let q = {
            let c = self.ctrl.lock();
            match c.state {
                State::Live => c.queues.get(hctx.index() as usize).and_then(Clone::clone),
                State::Connecting => None,
                State::Reconnecting { since_ms } => {
                    if c.fast_fail || self.loss_expired(since_ms) || self.fast_fail_due(since_ms) {
                        drop(c);
                        return self.fail_rq(rq);
                    }
                    None
                }
                State::Failed | State::Deleting { .. } => {
                    drop(c);
                    return self.fail_rq(rq);
                }
            }
        };
        match q {
            Some(q) => {
                rq.pdu().posting(stamp);
                let first = rq.pdu().sending(now_ns / 1_000_000);
                q.submit(rq).or_else(|(rq, st)| {
                    if !rq.pdu().take_map_failed() {
                        // A wait (a credit, a connection resetting) is no try.
                        if first {
                            rq.pdu().unsent();
                        }
                    } else if self.overdue(&rq) {
                        pr_err!(
                            "{}: a request of {} bytes at sector {} could not be mapped for the device for {} ms (loss_timeout_s): failing it\n",
                            self.name(),
                            rq.bytes(),
                            rq.sector(),
                            rq.pdu().age_ms()
                        );
                        return self.fail_rq(rq);
                    }
                    Err((rq, st))
                })
            }
            None => Err((rq, BlkStatus::Resource)),
        }
    }

    fn timeout(&self, rq: &RqRef<'_, Pdu>) -> TimeoutAction {
        let q = self.queue(rq.hw_queue());
        // A poll queue nobody polls may hold the answer already (the health check reaps only
        // a settled connection set): reap it. Only a reap that ended this very request spares
        // its connection; other requests' completions say nothing about it, and while polled
        // I/O flows there nearly always are some.
        if let Some(q) = q.as_ref() {
            q.reap_all();
        }
        if !rq.in_flight() {
            return TimeoutAction::Done;
        }
        Stats::inc(&self.info.stats.timeouts);
        pr_warn!(
            "{}: request tag {} on queue {} timed out after {} ms\n",
            self.name(),
            rq.tag(),
            rq.hw_queue(),
            self.io_timeout_ms()
        );
        if let Some(q) = q {
            q.fail_timeout();
        }
        TimeoutAction::ResetTimer
    }

    fn poll(&self, hctx: &HwQueue<'_>) -> u32 {
        self.queue(hctx.index()).map_or(0, |q| q.poll())
    }
}
