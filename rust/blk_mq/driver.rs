// SPDX-License-Identifier: GPL-2.0

//! The driver's blk-mq hooks and the C callbacks that reach them.

use core::{
    marker::PhantomData,
    mem,
    ptr::{self, NonNull},
};
use kernel::{ffi, prelude::*, sync::Arc, types::ForeignOwnable};

use super::super::bindings as b;
use super::disk::RawTagSet;
use super::request::{Area, BlkStatus, Rq, RqRef};

/// What the timeout handler wants blk-mq to do with the request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum TimeoutAction {
    /// Re-arm the request's timer (`BLK_EH_RESET_TIMER`): the driver still expects it to finish.
    ResetTimer,
    /// The request is no longer the driver's (`BLK_EH_DONE`): it ended or was requeued while
    /// the timer expired, so no timer is left to re-arm (a requeued request gets a new one
    /// when it is dispatched again).
    Done,
}

/// The driver's hooks. One `Arc<Self>` is the tag set's driver data and the queue's queuedata.
pub(crate) trait Driver: Send + Sync + Sized + 'static {
    /// Per-request driver data, stored in the request's PDU (`tag_set.cmd_size`), created in
    /// `init_request` (when the tag set or a hardware queue is set up) and dropped in
    /// `exit_request` (when it is torn down). It lives as long as the request slot, across
    /// all the I/Os that reuse that tag, and is shared with the timeout handler, hence `Sync`.
    type Pdu: Send + Sync + 'static;

    /// Read-only attributes of the disk's device itself (`/sys/block/<disk>/<name>`), there
    /// before its add uevent ([`DevAttr`]); at most 8. None by default.
    ///
    /// [`DevAttr`]: super::DevAttr
    fn dev_attrs() -> &'static [&'static super::DevAttr<Self>] {
        &[]
    }

    /// A fresh [`Self::Pdu`]. Must not fail or allocate (plain data and atomics).
    fn new_pdu() -> Self::Pdu;

    /// blk-mq hands over a request, already started (`blk_mq_start_request`: its timer runs).
    ///
    /// `Ok(())`: the driver now owns `rq` and keeps the token until it ends or requeues it.
    /// `Err((rq, st))`: the driver gives it back and blk-mq gets `st`: with
    /// [`BlkStatus::Resource`] blk-mq retries it later (rerun the
    /// queue with [`Disk::run_queues`] once the resource is back); with any other status blk-mq
    /// fails it with that status. `Err` with [`BlkStatus::Ok`] is a bug and fails it with
    /// `BLK_STS_IOERR`.
    ///
    /// Without [`DiskConfig::blocking`] it runs under the RCU read lock and often with
    /// preemption disabled: it must not sleep (no mutexes, no `GFP_KERNEL` allocation, no
    /// waiting for a transport). With it, it runs in process context under the tag set's SRCU
    /// and may sleep briefly. Either way it should return quickly. `last` is false when more
    /// requests follow at once; the driver may then defer a doorbell until
    /// [`Driver::commit_rqs`] or a call with `last == true`.
    ///
    /// [`Disk::run_queues`]: super::Disk::run_queues
    /// [`DiskConfig::blocking`]: super::DiskConfig::blocking
    fn queue_rq(
        &self,
        hctx: &HwQueue<'_>,
        rq: Rq<Self::Pdu>,
        last: bool,
    ) -> Result<(), (Rq<Self::Pdu>, BlkStatus)>;

    /// blk-mq stopped queueing a batch early (after some `queue_rq` with `last == false`):
    /// ring any deferred doorbell. Same context rules as `queue_rq`.
    fn commit_rqs(&self, _hctx: &HwQueue<'_>) {}

    /// The request's timer expired while the driver owns it. The driver does not have the token
    /// here and must not assume ownership; it may end or requeue the request through the token
    /// it holds elsewhere (for instance by resetting the connection the request is on). Runs
    /// in process context (the queue's timeout work) and may sleep briefly.
    fn timeout(&self, rq: &RqRef<'_, Self::Pdu>) -> TimeoutAction;

    /// Reaps the completions of poll queue `hctx` (a task waiting for its `REQ_POLLED` I/O,
    /// io_uring's `IORING_SETUP_IOPOLL` say); returns how many it found. Called only for the
    /// tag set's poll queues ([`super::DiskConfig::nr_poll_queues`]), often under the RCU
    /// read lock (`iocb_bio_iopoll`): it must not sleep. It may run on several CPUs at once.
    fn poll(&self, _hctx: &HwQueue<'_>) -> u32 {
        0
    }
}

/// A hardware queue, as seen in [`Driver::queue_rq`] and [`Driver::commit_rqs`].
pub(crate) struct HwQueue<'a> {
    ptr: NonNull<b::blk_mq_hw_ctx>,
    _p: PhantomData<&'a b::blk_mq_hw_ctx>,
}

impl HwQueue<'_> {
    /// The queue's index, `0..nr_hw_queues`.
    pub(crate) fn index(&self) -> u32 {
        // SAFETY: blk-mq passes a live hardware context for the duration of the callback;
        // `queue_num` is fixed when it is set up.
        unsafe { (*self.ptr.as_ptr()).queue_num }
    }
}

/// The `D` behind a queue's `queuedata`.
///
/// # Safety
///
/// `q` must be the queue of a [`Disk<D>`] that is not yet dropped (true in every blk-mq
/// callback: the disk's `Drop` frees the tag set, after which none runs, before releasing the
/// reference).
///
/// [`Disk<D>`]: super::Disk
pub(super) unsafe fn driver_of<'a, D: Driver>(q: *mut b::request_queue) -> &'a D {
    // SAFETY: `queuedata` is the `Arc<D>` that `Disk::new` turned into a foreign pointer;
    // per the caller's guarantee it outlives this call, and so the reference does.
    unsafe {
        let arc = <Arc<D> as ForeignOwnable>::borrow((*q).queuedata);
        &*ptr::from_ref::<D>(&*arc)
    }
}

/// The blk-mq callbacks for `D`.
pub(super) struct Ops<D: Driver>(PhantomData<D>);

impl<D: Driver> Ops<D> {
    pub(super) const VTABLE: b::blk_mq_ops = b::blk_mq_ops {
        queue_rq: Some(Self::queue_rq),
        commit_rqs: Some(Self::commit_rqs),
        timeout: Some(Self::timeout),
        init_request: Some(Self::init_request),
        exit_request: Some(Self::exit_request),
        map_queues: Some(Self::map_queues),
        poll: Some(Self::poll),
        // SAFETY: All-zero is "no callback" for every other member.
        ..unsafe { mem::zeroed() }
    };

    /// # Safety
    ///
    /// Called by blk-mq only, with a live hardware context of a `D` queue and a request it
    /// hands over to the driver.
    unsafe extern "C" fn queue_rq(
        hctx: *mut b::blk_mq_hw_ctx,
        bd: *const b::blk_mq_queue_data,
    ) -> b::blk_status_t {
        // SAFETY: blk-mq passes valid `hctx` and `bd`; the queue is a `D` queue. The request
        // is now ours: starting it and wrapping it in the (single) token is what `queue_rq`
        // is for.
        let (driver, rq, raw, last) = unsafe {
            let raw = (*bd).rq;
            b::blk_mq_start_request(raw);
            let rq = Rq::<D::Pdu> {
                ptr: NonNull::new_unchecked(raw),
                _p: PhantomData,
            };
            (driver_of::<D>((*hctx).queue), rq, raw, (*bd).last)
        };
        let hw = HwQueue {
            // SAFETY: blk-mq passes a non-null, live context.
            ptr: unsafe { NonNull::new_unchecked(hctx) },
            _p: PhantomData,
        };
        match driver.queue_rq(&hw, rq, last) {
            Ok(()) => b::RDMADISK_BLK_STS_OK,
            Err((rq, st)) => {
                if rq.ptr.as_ptr() != raw {
                    // The driver gave back some other request it owned and kept this one (or
                    // dropped it, which ended it). The returned one can only be failed here.
                    pr_err!("queue_rq returned another request than it was given\n");
                    drop(rq);
                    return b::RDMADISK_BLK_STS_OK;
                }
                // blk-mq takes it back with the status (and ends or retries it itself).
                rq.into_raw();
                if st == BlkStatus::Ok {
                    pr_warn!("queue_rq refused a request with status Ok; failing it\n");
                    return b::RDMADISK_BLK_STS_IOERR;
                }
                st.to_raw()
            }
        }
    }

    /// # Safety
    ///
    /// Called by blk-mq only, with a live hardware context of a `D` queue.
    unsafe extern "C" fn commit_rqs(hctx: *mut b::blk_mq_hw_ctx) {
        // SAFETY: blk-mq passes a live context of a `D` queue.
        let driver = unsafe { driver_of::<D>((*hctx).queue) };
        let hw = HwQueue {
            // SAFETY: blk-mq passes a non-null, live context.
            ptr: unsafe { NonNull::new_unchecked(hctx) },
            _p: PhantomData,
        };
        driver.commit_rqs(&hw);
    }

    /// # Safety
    ///
    /// Called by blk-mq only, with a tag set made by `TagSet::new` (these ops are no other
    /// set's), which it is setting up or updating.
    unsafe extern "C" fn map_queues(set: *mut b::blk_mq_tag_set) {
        // SAFETY: `TagSet::new` made the set as the first field of a `repr(C)` `RawTagSet`;
        // blk-mq holds it exclusively while it maps the queues.
        let raw = unsafe { &mut *set.cast::<RawTagSet>() };
        raw.map_queues();
    }

    /// # Safety
    ///
    /// Called by blk-mq only, with a live hardware context of a `D` queue.
    unsafe extern "C" fn poll(
        hctx: *mut b::blk_mq_hw_ctx,
        _iob: *mut b::io_comp_batch,
    ) -> ffi::c_int {
        // SAFETY: blk-mq passes a live context of a `D` queue.
        let driver = unsafe { driver_of::<D>((*hctx).queue) };
        let hw = HwQueue {
            // SAFETY: blk-mq passes a non-null, live context.
            ptr: unsafe { NonNull::new_unchecked(hctx) },
            _p: PhantomData,
        };
        ffi::c_int::try_from(driver.poll(&hw)).unwrap_or(ffi::c_int::MAX)
    }

    /// # Safety
    ///
    /// Called by blk-mq only, with a started request of a `D` queue that it holds a reference
    /// on for the duration of the call.
    unsafe extern "C" fn timeout(rq: *mut b::request) -> b::blk_eh_timer_return {
        // SAFETY: See above; the request's queue is a `D` queue.
        let driver = unsafe { driver_of::<D>((*rq).q) };
        let r = RqRef::<D::Pdu> {
            // SAFETY: blk-mq passes a non-null request.
            ptr: unsafe { NonNull::new_unchecked(rq) },
            _p: PhantomData,
        };
        match driver.timeout(&r) {
            TimeoutAction::ResetTimer => b::blk_eh_timer_return_BLK_EH_RESET_TIMER,
            TimeoutAction::Done => b::blk_eh_timer_return_BLK_EH_DONE,
        }
    }

    /// # Safety
    ///
    /// Called by blk-mq only, for a request (or a hardware queue's flush request) of the tag
    /// set `set` made by `Disk::new` for `D`, whose PDU is uninitialised.
    unsafe extern "C" fn init_request(
        set: *mut b::blk_mq_tag_set,
        rq: *mut b::request,
        _hctx_idx: ffi::c_uint,
        _numa_node: ffi::c_uint,
    ) -> ffi::c_int {
        // SAFETY: The request has `cmd_size` bytes of PDU, `Area::cmd_size(sg_cap)` of them,
        // so the array holds `sg_cap` entries; the area is uninitialised, so we write it whole.
        unsafe {
            let cmd_size = (*set).cmd_size as usize;
            let sg_cap = (cmd_size - Area::<D::Pdu>::SG_OFFSET) / mem::size_of::<b::scatterlist>();
            Area::<D::Pdu>::of(rq).write(Area {
                sg_cap: sg_cap as u32,
                sg_len: 0,
                pdu: D::new_pdu(),
            });
        }
        0
    }

    /// # Safety
    ///
    /// Called by blk-mq only, once for each request `init_request` set up, when no I/O uses it.
    unsafe extern "C" fn exit_request(
        _set: *mut b::blk_mq_tag_set,
        rq: *mut b::request,
        _hctx_idx: ffi::c_uint,
    ) {
        // SAFETY: The area was written by `init_request` and is not used any more.
        unsafe { ptr::drop_in_place(Area::<D::Pdu>::of(rq)) };
    }
}
