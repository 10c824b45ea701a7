// SPDX-License-Identifier: GPL-2.0

//! One mapped disk: its blk-mq hooks, its connections (one [`RdmaQueue`] per hardware
//! queue), connection recovery, and `/sys/block/rdmadiskN/rdmadisk/`.
//!
//! Recovery follows nvme-rdma's reset + reconnect: a failed queue (I/O timeout, CM event,
//! failed completion, hostile response) makes the disk tear down every connection, requeue
//! the requests that were on them, and reconnect with exponential backoff. Requests wait
//! (`BLK_STS_RESOURCE`) meanwhile and fail only once the loss timeout has passed.

use core::{
    fmt::Write,
    sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering},
};
use kernel::{
    c_str, new_condvar, new_mutex, new_spinlock, new_work,
    prelude::*,
    sync::{Arc, CondVar, Mutex, SpinLock},
    time::{msecs_to_jiffies, Ktime},
    workqueue::{self, impl_has_work, Work, WorkItem},
};

use crate::kapi::blk_mq::{
    BlkStatus, Disk, DiskAttr, DiskAttrs, Driver, HwQueue, Rq, RqRef, TimeoutAction,
};
use crate::kapi::sysfs::ShowBuf;
use crate::kapi::work;
use crate::map::DiskTable;
use crate::proto::options::DeviceName;
use crate::proto::wire::ExportName;
use crate::rdma_conn::Peer;
use crate::rdma_queue::RdmaQueue;
use crate::stats::Stats;

/// A request of an rdmadisk.
pub(crate) type DiskRq = Rq<DiskDev>;

/// Default blk-mq request timeout.
pub(crate) const DEFAULT_IO_TIMEOUT_MS: u32 = 30_000;
/// Default time requests wait for a lost connection to come back before failing.
pub(crate) const DEFAULT_LOSS_TIMEOUT_S: u32 = 60;
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
    pub(crate) read_only: bool,
    pub(crate) nr_queues: u16,
    pub(crate) stats: Stats,
    io_timeout_ms: AtomicU32,
    loss_timeout_s: AtomicU32,
    table: Arc<DiskTable>,
    #[pin]
    state: SpinLock<State>,
    /// A recovery is queued or running.
    recovering: AtomicBool,
    #[pin]
    queues: SpinLock<KVec<Option<Arc<RdmaQueue>>>>,
    /// The block device; taken out to delete it.
    #[pin]
    disk: Mutex<Option<Disk<DiskDev>>>,
    #[pin]
    nap: Mutex<()>,
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
        this.recover();
    }
}

fn now_ms() -> i64 {
    Ktime::ktime_get().to_ms()
}

impl DiskDev {
    pub(crate) fn new(p: DiskParams, table: Arc<DiskTable>) -> Result<Arc<Self>> {
        let mut queues = KVec::with_capacity(p.nr_queues.into(), GFP_KERNEL)?;
        for _ in 0..p.nr_queues {
            queues.push(None, GFP_KERNEL)?;
        }
        Arc::pin_init(
            pin_init!(Self {
                index: p.index,
                name: p.name,
                export: p.export,
                peer: p.peer,
                read_only: p.read_only,
                nr_queues: p.nr_queues,
                stats: Stats::default(),
                io_timeout_ms: AtomicU32::new(DEFAULT_IO_TIMEOUT_MS),
                loss_timeout_s: AtomicU32::new(DEFAULT_LOSS_TIMEOUT_S),
                table,
                state <- new_spinlock!(State::Connecting, "rdmadisk::disk::state"),
                recovering: AtomicBool::new(false),
                queues <- new_spinlock!(queues, "rdmadisk::disk::queues"),
                disk <- new_mutex!(None, "rdmadisk::disk::disk"),
                nap <- new_mutex!((), "rdmadisk::disk::nap"),
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

    pub(crate) fn io_timeout_ms(&self) -> u32 {
        self.io_timeout_ms.load(Ordering::Relaxed)
    }

    /// Connects every queue (all or none); returns the first queue's Hello reply.
    pub(crate) fn connect_queues(self: &Arc<Self>) -> Result<crate::proto::wire::HelloReply> {
        let mut first = None;
        for qid in 0..self.nr_queues {
            match RdmaQueue::connect(self, qid) {
                Ok((q, reply)) => {
                    first.get_or_insert(reply);
                    if let Some(slot) = self.queues.lock().get_mut(usize::from(qid)) {
                        *slot = Some(q);
                    }
                }
                Err(e) => {
                    self.shutdown_queues(|rq| rq.end(BlkStatus::IoErr));
                    return Err(e);
                }
            }
        }
        first.ok_or(EINVAL)
    }

    /// Tears down every connection, handing their requests to `dispose`.
    fn shutdown_queues(&self, mut dispose: impl FnMut(DiskRq)) {
        for qid in 0..usize::from(self.nr_queues) {
            let q = self.queues.lock().get_mut(qid).and_then(Option::take);
            if let Some(q) = q {
                q.shutdown(&mut dispose);
            }
        }
    }

    /// The queues are up: I/O may flow (adding the disk reads its partition table).
    pub(crate) fn go_live(self: &Arc<Self>) {
        self.set_state(State::Live);
        // A queue that failed while the disk was still connecting was not acted on then.
        self.recover_failed_queues();
    }

    /// Starts a recovery if a connection failed without one being started.
    fn recover_failed_queues(self: &Arc<Self>) {
        let failed = self.queues.lock().iter().flatten().any(|q| q.is_failed());
        if failed {
            self.queue_failed();
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

    /// A queue failed: start a recovery unless one is under way or the disk is going.
    pub(crate) fn queue_failed(self: &Arc<Self>) {
        let st = self.state.lock();
        if matches!(*st, State::Deleting { .. } | State::Connecting) {
            return;
        }
        if !self.recovering.swap(true, Ordering::AcqRel) {
            // Enqueued under the state lock, so `delete` (which sets `Deleting` under it, then
            // flushes the work) never misses an item.
            let _ = workqueue::system_long().enqueue(self.clone());
        }
        drop(st);
    }

    fn requeue_or_fail(&self, rq: DiskRq) {
        if matches!(self.state(), State::Deleting { force: true }) {
            rq.end(BlkStatus::IoErr);
        } else {
            Stats::inc(&self.stats.requeued);
            rq.requeue(true);
        }
    }

    fn deleting(&self) -> bool {
        matches!(self.state(), State::Deleting { .. })
    }

    /// Sleeps up to `ms`, or less when the disk is being deleted.
    fn nap(&self, ms: u32) {
        let mut g = self.nap.lock();
        if !self.deleting() {
            let _ = self
                .wake
                .wait_interruptible_timeout(&mut g, msecs_to_jiffies(ms));
        }
    }

    fn recover(self: &Arc<Self>) {
        {
            let mut st = self.state.lock();
            match *st {
                State::Deleting { .. } => {
                    drop(st);
                    self.recovering.store(false, Ordering::Release);
                    return;
                }
                State::Live | State::Connecting => *st = State::Reconnecting { since_ms: now_ms() },
                State::Reconnecting { .. } | State::Failed => {}
            }
        }
        pr_warn!("{}: resetting the connection\n", self.name());
        self.shutdown_queues(|rq| self.requeue_or_fail(rq));
        let mut backoff = BACKOFF_FIRST_MS;
        while !self.deleting() {
            match self.connect_queues() {
                Ok(_) => {
                    Stats::inc(&self.stats.reconnects);
                    pr_info!("{}: reconnected to {}\n", self.name(), self.peer);
                    self.set_state(State::Live);
                    break;
                }
                Err(e) => {
                    let loss_ms = i64::from(self.loss_timeout_s.load(Ordering::Relaxed)) * 1000;
                    if let State::Reconnecting { since_ms } = self.state() {
                        if now_ms() - since_ms > loss_ms {
                            pr_err!(
                                "{}: no connection for {} s: failing I/O, still reconnecting\n",
                                self.name(),
                                loss_ms / 1000
                            );
                            self.set_state(State::Failed);
                        }
                    }
                    pr_warn!(
                        "{}: reconnecting failed ({e:?}); next try in {backoff} ms\n",
                        self.name()
                    );
                    self.nap(backoff);
                    backoff = (backoff * 2).min(BACKOFF_MAX_MS);
                }
            }
        }
        self.recovering.store(false, Ordering::Release);
        // A new connection may have failed before the flag was clear; its report was dropped.
        self.recover_failed_queues();
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
        {
            let _g = self.nap.lock();
            self.wake.notify_all();
        }
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

    fn queue(&self, hw: u32) -> Option<Arc<RdmaQueue>> {
        self.queues.lock().get(hw as usize).and_then(Clone::clone)
    }

    fn show_name(&self, out: &mut ShowBuf<'_>) -> Result {
        writeln!(out, "{}", self.name()).map_err(|_| EFBIG)
    }

    fn show_export(&self, out: &mut ShowBuf<'_>) -> Result {
        writeln!(out, "{}", self.export).map_err(|_| EFBIG)
    }

    fn show_address(&self, out: &mut ShowBuf<'_>) -> Result {
        writeln!(out, "{}", self.peer).map_err(|_| EFBIG)
    }

    fn show_state(&self, out: &mut ShowBuf<'_>) -> Result {
        writeln!(out, "{}", self.state_name()).map_err(|_| EFBIG)
    }

    fn show_stats(&self, out: &mut ShowBuf<'_>) -> Result {
        self.stats.show(out)
    }

    fn store_unmap(&self, input: &[u8]) -> Result {
        let force = match input.trim_ascii() {
            b"normal" => false,
            b"force" => true,
            _ => {
                pr_err!("{}: unmap: expected 'normal' or 'force'\n", self.name());
                return Err(EINVAL);
            }
        };
        // The table holds the disk's `Arc`; deleting through it keeps the disk alive for
        // the call.
        self.table.delete(self.index, force)
    }

    fn show_io_timeout(&self, out: &mut ShowBuf<'_>) -> Result {
        writeln!(out, "{}", self.io_timeout_ms()).map_err(|_| EFBIG)
    }

    fn store_io_timeout(&self, input: &[u8]) -> Result {
        let ms = parse_knob(self.name(), "io_timeout_ms", input, 1_000, 600_000)?;
        if let Some(d) = self.disk.lock().as_ref() {
            d.set_timeout_ms(ms);
        }
        self.io_timeout_ms.store(ms, Ordering::Relaxed);
        Ok(())
    }

    fn show_loss_timeout(&self, out: &mut ShowBuf<'_>) -> Result {
        writeln!(out, "{}", self.loss_timeout_s.load(Ordering::Relaxed)).map_err(|_| EFBIG)
    }

    fn store_loss_timeout(&self, input: &[u8]) -> Result {
        let s = parse_knob(self.name(), "loss_timeout_s", input, 0, 86_400)?;
        self.loss_timeout_s.store(s, Ordering::Relaxed);
        Ok(())
    }
}

/// Parses a decimal knob value in `min..=max`; `EINVAL` with a log line otherwise.
fn parse_knob(who: &str, knob: &str, input: &[u8], min: u32, max: u32) -> Result<u32> {
    let v = core::str::from_utf8(input.trim_ascii())
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .filter(|v| (min..=max).contains(v));
    v.ok_or_else(|| {
        pr_err!("{who}: {knob}: expected a whole number from {min} to {max}\n");
        EINVAL
    })
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
                let loss_ms = i64::from(self.loss_timeout_s.load(Ordering::Relaxed)) * 1000;
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

static NAME: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("name"), DiskDev::show_name);
static EXPORT: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("export"), DiskDev::show_export);
static ADDRESS: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("address"), DiskDev::show_address);
static STATE: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("state"), DiskDev::show_state);
static STATS: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("stats"), DiskDev::show_stats);
static UNMAP: DiskAttr<DiskDev> = DiskAttr::wo_self_remove(c_str!("unmap"), DiskDev::store_unmap);
static IO_TIMEOUT: DiskAttr<DiskDev> = DiskAttr::rw(
    c_str!("io_timeout_ms"),
    DiskDev::show_io_timeout,
    DiskDev::store_io_timeout,
);
static LOSS_TIMEOUT: DiskAttr<DiskDev> = DiskAttr::rw(
    c_str!("loss_timeout_s"),
    DiskDev::show_loss_timeout,
    DiskDev::store_loss_timeout,
);

/// `/sys/block/rdmadiskN/rdmadisk/`.
pub(crate) static ATTRS: &DiskAttrs<DiskDev> = &[
    &NAME,
    &EXPORT,
    &ADDRESS,
    &STATE,
    &STATS,
    &UNMAP,
    &IO_TIMEOUT,
    &LOSS_TIMEOUT,
];
