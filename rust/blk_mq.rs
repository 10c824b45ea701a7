// SPDX-License-Identifier: GPL-2.0

//! blk-mq block devices: a tag set whose requests carry the driver's per-request data and a
//! scatterlist, a gendisk with queue limits, request tokens that the driver ends or requeues,
//! a timeout hook, and the disk's own sysfs directory `/sys/block/<disk>/rdmadisk/`.
//!
//! What 6.12's `kernel::block::mq` lacks and this adds: per-request data (`cmd_size`), sector,
//! length and operation accessors, error completion and requeue, the timeout callback, queue
//! limits, and per-disk attributes.
//!
//! Ownership is what keeps this safe without `unsafe` in the driver:
//! - blk-mq hands a started request to [`Driver::queue_rq`] as an [`Rq`], a move-only token.
//!   Whoever holds the token owns the request; [`Rq::end`] and [`Rq::requeue`] consume it, so a
//!   request is given back exactly once. Dropping a token that was neither ends the request
//!   with `BLK_STS_IOERR` and warns, so a driver bug fails one I/O instead of hanging it.
//! - The timeout handler only borrows the request ([`RqRef`]): blk-mq holds a reference on it
//!   for the duration of the call, and the token stays where it is.
//! - The driver state `D` is shared (`Arc<D>`): one reference is the tag set's `driver_data`
//!   and the queue's `queuedata` (every blk-mq callback reaches `D` through it), one is kept by
//!   the [`Disk`] for [`Disk::driver`], and one by the sysfs directory. The tag set's reference
//!   is released only after the tag set is freed, when no callback can run any more.
//! - The disk's sysfs directory is a kobject of our own (RNBD style) whose memory, and `Arc<D>`,
//!   live until the last kobject reference is gone, so an attribute callback always sees `D`.

// The driver uses most of this module; what it does not use yet (quiescing, rerunning and
// kicking queues, copying into a request's segments, some statuses and accessors) is for the
// TCP path and the transport switch, which reuse the same disk.

use core::{
    marker::PhantomData,
    mem::{self, MaybeUninit},
    ptr::{self, NonNull},
    sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering},
};
use kernel::{
    ffi,
    page::PAGE_SIZE,
    prelude::*,
    str::{CStr, CString},
    sync::Arc,
    task::Task,
    types::{ForeignOwnable, Opaque},
};

use super::bindings as b;
use super::sysfs::ShowBuf;

/// The `blk_status_t` values the driver uses.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum BlkStatus {
    /// Success.
    Ok,
    /// I/O error (`BLK_STS_IOERR`).
    IoErr,
    /// Out of a resource shared by the queue (credits, tags): blk-mq retries the request when
    /// the queue is rerun, or after a short delay if no request is in flight.
    Resource,
    /// The operation is not supported (`BLK_STS_NOTSUPP`).
    NotSupp,
    /// Data integrity failure (`BLK_STS_PROTECTION`), e.g. a CRC mismatch that persists.
    Protection,
}

impl BlkStatus {
    fn to_raw(self) -> b::blk_status_t {
        match self {
            BlkStatus::Ok => b::RDMADISK_BLK_STS_OK,
            BlkStatus::IoErr => b::RDMADISK_BLK_STS_IOERR,
            BlkStatus::Resource => b::RDMADISK_BLK_STS_RESOURCE,
            BlkStatus::NotSupp => b::RDMADISK_BLK_STS_NOTSUPP,
            BlkStatus::Protection => b::RDMADISK_BLK_STS_PROTECTION,
        }
    }
}

/// The operation of a request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ReqOp {
    /// `REQ_OP_READ`.
    Read,
    /// `REQ_OP_WRITE`.
    Write,
    /// `REQ_OP_FLUSH`: no data; make earlier completed writes durable.
    Flush,
    /// `REQ_OP_DISCARD`: no data; [`Rq::sector`] and [`Rq::bytes`] give the range.
    Discard,
    /// `REQ_OP_WRITE_ZEROES`: no data; [`Rq::sector`] and [`Rq::bytes`] give the range.
    WriteZeroes,
    /// Any other `REQ_OP_*` (the raw number).
    Other(u32),
}

impl ReqOp {
    fn from_raw(op: u32) -> Self {
        match op {
            b::req_op_REQ_OP_READ => ReqOp::Read,
            b::req_op_REQ_OP_WRITE => ReqOp::Write,
            b::req_op_REQ_OP_FLUSH => ReqOp::Flush,
            b::req_op_REQ_OP_DISCARD => ReqOp::Discard,
            b::req_op_REQ_OP_WRITE_ZEROES => ReqOp::WriteZeroes,
            other => ReqOp::Other(other),
        }
    }
}

/// What the timeout handler wants blk-mq to do with the request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum TimeoutAction {
    /// Re-arm the request's timer (`BLK_EH_RESET_TIMER`): the driver still expects it to finish.
    ResetTimer,
}

/// The driver's hooks. One `Arc<Self>` is the tag set's driver data and the queue's queuedata.
pub(crate) trait Driver: Send + Sync + Sized + 'static {
    /// Per-request driver data, stored in the request's PDU (`tag_set.cmd_size`), created in
    /// `init_request` (when the tag set or a hardware queue is set up) and dropped in
    /// `exit_request` (when it is torn down). It lives as long as the request slot, across
    /// all the I/Os that reuse that tag, and is shared with the timeout handler, hence `Sync`.
    type Pdu: Send + Sync;

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
    /// Runs under the RCU read lock (the tag set is not `BLK_MQ_F_BLOCKING`) and often with
    /// preemption disabled: it must not sleep (no mutexes, no `GFP_KERNEL` allocation, no
    /// waiting for a transport), and should return quickly. `last` is false when more requests
    /// follow at once; the driver may then defer a doorbell until [`Driver::commit_rqs`] or a
    /// call with `last == true`.
    fn queue_rq(
        &self,
        hctx: &HwQueue<'_>,
        rq: Rq<Self>,
        last: bool,
    ) -> Result<(), (Rq<Self>, BlkStatus)>;

    /// blk-mq stopped queueing a batch early (after some `queue_rq` with `last == false`):
    /// ring any deferred doorbell. Same context rules as `queue_rq`.
    fn commit_rqs(&self, _hctx: &HwQueue<'_>) {}

    /// The request's timer expired while the driver owns it. The driver does not have the token
    /// here and must not assume ownership; it may end or requeue the request through the token
    /// it holds elsewhere (before or after returning [`TimeoutAction::Done`]). Runs in process
    /// context (the queue's timeout work) and may sleep briefly.
    fn timeout(&self, rq: &RqRef<'_, Self>) -> TimeoutAction;
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

/// What blk-mq reserves after each `struct request` for us (`cmd_size` bytes): this header,
/// then, at [`Area::SG_OFFSET`], an array of `sg_cap` scatterlist entries.
#[repr(C)]
struct Area<D: Driver> {
    /// Entries of the scatterlist array.
    sg_cap: u32,
    /// Entries filled by the last [`Rq::map_sg`].
    sg_len: u32,
    pdu: D::Pdu,
}

impl<D: Driver> Area<D> {
    /// The PDU starts right after the `struct request` (`blk_mq_rq_to_pdu` is `rq + 1`), so it
    /// is only aligned to what the request is.
    const ALIGN_OK: () = assert!(
        mem::align_of::<Self>() <= mem::align_of::<b::request>(),
        "the driver's Pdu needs more alignment than a struct request gives"
    );

    /// Where the scatterlist array starts, from the start of the area.
    const SG_OFFSET: usize = {
        let a = mem::align_of::<b::scatterlist>();
        (mem::size_of::<Self>() + a - 1) / a * a
    };

    /// `tag_set.cmd_size` for `sg_cap` scatterlist entries.
    fn cmd_size(sg_cap: u16) -> Result<u32> {
        #[allow(clippy::let_unit_value)]
        let () = Self::ALIGN_OK;
        let size = Self::SG_OFFSET + usize::from(sg_cap) * mem::size_of::<b::scatterlist>();
        u32::try_from(size).map_err(|_| EINVAL)
    }

    /// # Safety
    ///
    /// `rq` must be a request of a tag set made by [`Disk::new`] for `D`.
    unsafe fn of(rq: *mut b::request) -> *mut Self {
        // SAFETY: By the caller's guarantee the request has `cmd_size` bytes of PDU.
        unsafe { b::rdmadisk_blk_mq_rq_to_pdu(rq) }.cast()
    }

    /// # Safety
    ///
    /// `area` must come from [`Area::of`].
    unsafe fn sg(area: *mut Self) -> *mut b::scatterlist {
        // SAFETY: The array lies within the request's `cmd_size` bytes (see `cmd_size`), and
        // `SG_OFFSET` keeps it aligned (the area is at least as aligned as a scatterlist entry,
        // both being pointer-aligned).
        unsafe { area.cast::<u8>().add(Self::SG_OFFSET).cast() }
    }
}

/// Accessors shared by [`Rq`] and [`RqRef`].
///
/// # Safety
///
/// For all functions: `rq` is a request of a `D` tag set that is allocated to an I/O (owned by
/// the driver, or pinned by blk-mq's timeout handler) for the duration of the call, and its
/// area was initialised by `init_request`.
mod raw {
    use super::*;

    pub(super) unsafe fn tag(rq: *mut b::request) -> u32 {
        // SAFETY: See the module's safety section.
        unsafe { (*rq).tag as u32 }
    }

    pub(super) unsafe fn hw_queue(rq: *mut b::request) -> u32 {
        // SAFETY: See the module's safety section; `mq_hctx` is set while the request is
        // allocated, and hardware contexts outlive their requests.
        unsafe { (*(*rq).mq_hctx).queue_num }
    }

    pub(super) unsafe fn op(rq: *mut b::request) -> ReqOp {
        // SAFETY: See the module's safety section.
        ReqOp::from_raw(unsafe { b::rdmadisk_req_op(rq) })
    }

    pub(super) unsafe fn sector(rq: *mut b::request) -> u64 {
        // SAFETY: See the module's safety section.
        unsafe { b::rdmadisk_blk_rq_pos(rq) }
    }

    pub(super) unsafe fn bytes(rq: *mut b::request) -> u32 {
        // SAFETY: See the module's safety section.
        unsafe { b::rdmadisk_blk_rq_bytes(rq) }
    }

    pub(super) unsafe fn is_fua(rq: *mut b::request) -> bool {
        // SAFETY: See the module's safety section.
        unsafe { (*rq).cmd_flags & b::RDMADISK_REQ_FUA != 0 }
    }

    pub(super) unsafe fn has_data(rq: *mut b::request) -> bool {
        // SAFETY: See the module's safety section; the bio chain is the request's while it is
        // allocated, and `bio_has_data` only reads the first bio.
        unsafe {
            let bio = (*rq).bio;
            !bio.is_null() && b::rdmadisk_bio_has_data(bio)
        }
    }

    pub(super) unsafe fn pdu<'a, D: Driver>(rq: *mut b::request) -> &'a D::Pdu {
        // SAFETY: See the module's safety section: the PDU was written by `init_request` and
        // is dropped only by `exit_request`, after the request's last use. Only shared
        // references to it are ever made.
        unsafe { &*ptr::addr_of!((*Area::<D>::of(rq)).pdu) }
    }

    /// Calls `f(address, length)` for each single-page data segment of the request, mapped
    /// with `kmap_local`, in order (`rq_for_each_segment`).
    ///
    /// # Safety
    ///
    /// As for the module; in addition the caller must own the request (its bios cannot
    /// complete under us).
    pub(super) unsafe fn for_each_page(rq: *mut b::request, mut f: impl FnMut(*mut u8, usize)) {
        // SAFETY: The caller owns the request, so its bios and their pages stay put; this is
        // `rq_for_each_segment` spelled out: for each bio, copy its iterator, and for each
        // single-page `bio_vec` it yields, map the page, call `f`, unmap, advance. Discard and
        // write-zeroes bios carry a size but no pages, hence the `has_data` check.
        unsafe {
            if !has_data(rq) {
                return;
            }
            let mut bio = (*rq).bio;
            while !bio.is_null() {
                let mut iter: b::bvec_iter = (*bio).bi_iter;
                while iter.bi_size != 0 {
                    let mut bv = MaybeUninit::<b::bio_vec>::uninit();
                    b::rdmadisk_bio_iter_iovec(bio, &iter, bv.as_mut_ptr());
                    let mut bv = bv.assume_init();
                    let len = bv.bv_len;
                    let addr = b::rdmadisk_bvec_kmap_local(&mut bv).cast::<u8>();
                    f(addr, len as usize);
                    b::rdmadisk_kunmap_local(addr.cast());
                    b::rdmadisk_bio_advance_iter_single(bio, &mut iter, len);
                }
                bio = (*bio).bi_next;
            }
        }
    }
}

/// A started request the driver owns: a move-only token. Exactly one of [`Rq::end`] and
/// [`Rq::requeue`] consumes it; dropping it otherwise ends the request with `BLK_STS_IOERR`
/// and warns (a bug, but never a hung request).
///
/// It may travel to any context (a completion workqueue, softirq) and be ended there.
pub(crate) struct Rq<D: Driver> {
    ptr: NonNull<b::request>,
    _p: PhantomData<D>,
}

// SAFETY: The token is the only handle through which the request is ended or mutated, and the
// blk-mq calls it makes (`blk_mq_end_request`, `blk_mq_requeue_request`) may be made from any
// context; the PDU is `Send + Sync`.
unsafe impl<D: Driver> Send for Rq<D> {}
// SAFETY: `&Rq` only reads the request, its data pages and the `Sync` PDU.
unsafe impl<D: Driver> Sync for Rq<D> {}

impl<D: Driver> Rq<D> {
    /// Gives up the token without ending the request.
    fn into_raw(self) -> *mut b::request {
        let ptr = self.ptr.as_ptr();
        mem::forget(self);
        ptr
    }

    /// The request's tag, unique among the tag set's requests in flight.
    pub(crate) fn tag(&self) -> u32 {
        // SAFETY: We own the request.
        unsafe { raw::tag(self.ptr.as_ptr()) }
    }

    /// The operation.
    pub(crate) fn op(&self) -> ReqOp {
        // SAFETY: We own the request.
        unsafe { raw::op(self.ptr.as_ptr()) }
    }

    /// The first sector, in 512-byte units (`blk_rq_pos`). Meaningless for a
    /// [`ReqOp::Flush`] (blk-mq's flush requests carry `u64::MAX`).
    pub(crate) fn sector(&self) -> u64 {
        // SAFETY: We own the request.
        unsafe { raw::sector(self.ptr.as_ptr()) }
    }

    /// The length in bytes (`blk_rq_bytes`): the payload, or for a discard or write-zeroes the
    /// range; 0 for a flush.
    pub(crate) fn bytes(&self) -> u32 {
        // SAFETY: We own the request.
        unsafe { raw::bytes(self.ptr.as_ptr()) }
    }

    /// Whether the write must be durable when it completes (`REQ_FUA`).
    pub(crate) fn is_fua(&self) -> bool {
        // SAFETY: We own the request.
        unsafe { raw::is_fua(self.ptr.as_ptr()) }
    }

    /// The driver's per-request data.
    pub(crate) fn pdu(&self) -> &D::Pdu {
        // SAFETY: We own the request.
        unsafe { raw::pdu::<D>(self.ptr.as_ptr()) }
    }

    /// Fills the request's scatterlist (`blk_rq_map_sg` into the array in the PDU area, sized
    /// at tag-set creation by [`Limits::max_segments`]) and returns the number of entries
    /// (> 0). `EINVAL` if the request has no data segments. The entries stay valid until the
    /// next `map_sg` or the end of the request; [`Rq::sg_ptr`] points at them.
    pub(crate) fn map_sg(&mut self) -> Result<u32> {
        let rq = self.ptr.as_ptr();
        // SAFETY: We own the request (and `&mut self` keeps other users of the scatterlist
        // away); the area was set up by `init_request`, and only the owner touches `sg_len` and
        // the array.
        unsafe {
            let area = Area::<D>::of(rq);
            let segs = u32::from(b::rdmadisk_blk_rq_nr_phys_segments(rq));
            if segs == 0 || !raw::has_data(rq) || segs > (*area).sg_cap {
                return Err(EINVAL);
            }
            let sg = Area::<D>::sg(area);
            // `blk_rq_map_sg` fills at most `blk_rq_nr_phys_segments` entries of an
            // initialised table and marks the last one.
            b::sg_init_table(sg, segs);
            let n = b::rdmadisk_blk_rq_map_sg((*rq).q, rq, sg);
            if n <= 0 {
                return Err(EINVAL);
            }
            (*area).sg_len = n as u32;
            Ok(n as u32)
        }
    }

    /// Calls `f` with each data segment as a byte slice, in order: the request's bio vectors
    /// (`rq_for_each_segment`), each page mapped with `kmap_local` and a segment that spans
    /// pages split per page. Independent of [`Rq::map_sg`] (it does not need or touch the
    /// scatterlist). Nothing for a request without data. Any context; `f` may sleep where the
    /// caller may (a `kmap_local` mapping survives a context switch), e.g. in a socket call.
    ///
    /// For a write: the data to send (stable while the request is in flight, see [`Limits`]).
    /// For a read: only once the data is in place, never while a device may still be writing
    /// the pages (an RDMA Write in progress).
    pub(crate) fn for_each_segment(&self, mut f: impl FnMut(&[u8])) {
        // SAFETY: We own the request; each `(addr, len)` is a live mapping of `len` bytes of a
        // page of the request, valid until `f` returns. Nothing writes the pages meanwhile:
        // the submitter waits for the request, and `&self` excludes our own writers.
        unsafe {
            raw::for_each_page(self.ptr.as_ptr(), |addr, len| {
                f(core::slice::from_raw_parts(addr, len))
            })
        };
    }

    /// Like [`Rq::for_each_segment`], with writable slices: for filling a read's pages.
    pub(crate) fn for_each_segment_mut(&mut self, mut f: impl FnMut(&mut [u8])) {
        // SAFETY: As in `for_each_segment`; `&mut self` makes us the only user of the pages
        // (the submitter does not look at them before the request ends), and the slices are
        // handed out one at a time.
        unsafe {
            raw::for_each_page(self.ptr.as_ptr(), |addr, len| {
                f(core::slice::from_raw_parts_mut(addr, len))
            })
        };
    }

    /// Ends the request with `st` (`blk_mq_end_request`). Callable from process, softirq or
    /// hard interrupt context.
    pub(crate) fn end(self, st: BlkStatus) {
        let rq = self.into_raw();
        // SAFETY: We owned the request and give it back, exactly once.
        unsafe { b::blk_mq_end_request(rq, st.to_raw()) };
    }

    /// Gives the request back to blk-mq to be queued again later (`blk_mq_requeue_request`);
    /// with `kick`, the requeue list is run at once, otherwise at the next
    /// [`Disk::kick_requeue_list`]. Any context.
    pub(crate) fn requeue(self, kick: bool) {
        let rq = self.into_raw();
        // SAFETY: We owned the (started) request and give it back, exactly once.
        unsafe { b::blk_mq_requeue_request(rq, kick) };
    }

    /// The scatterlist entries filled by the last [`Rq::map_sg`] (its return value says how
    /// many), for the DMA mapping in `verbs.rs`. Valid while the token is held.
    #[allow(
        dead_code,
        reason = "for the RDMA data path (verbs.rs), which lands next"
    )]
    pub(super) fn sg_ptr(&self) -> *mut b::scatterlist {
        // SAFETY: We own the request; only the address is computed.
        unsafe { Area::<D>::sg(Area::<D>::of(self.ptr.as_ptr())) }
    }
}

impl<D: Driver> Drop for Rq<D> {
    fn drop(&mut self) {
        pr_warn!(
            "request tag {} dropped without being ended or requeued; failing it\n",
            self.tag()
        );
        // SAFETY: We own the request and give it back, exactly once (the consuming methods
        // forget `self`, so this runs only for tokens nobody ended).
        unsafe { b::blk_mq_end_request(self.ptr.as_ptr(), BlkStatus::IoErr.to_raw()) };
    }
}

/// A borrowed view of a request the driver does not own here (the timeout handler's): blk-mq
/// keeps it allocated for the call, even if its owner ends it concurrently.
pub(crate) struct RqRef<'a, D: Driver> {
    ptr: NonNull<b::request>,
    _p: PhantomData<&'a D>,
}

impl<D: Driver> RqRef<'_, D> {
    /// See [`Rq::tag`].
    pub(crate) fn tag(&self) -> u32 {
        // SAFETY: blk-mq pins the request for the duration of the borrow.
        unsafe { raw::tag(self.ptr.as_ptr()) }
    }

    /// The hardware queue it was queued on (`rq->mq_hctx->queue_num`).
    pub(crate) fn hw_queue(&self) -> u32 {
        // SAFETY: blk-mq pins the request for the duration of the borrow.
        unsafe { raw::hw_queue(self.ptr.as_ptr()) }
    }
}

/// The `D` behind a queue's `queuedata`.
///
/// # Safety
///
/// `q` must be the queue of a [`Disk<D>`] that is not yet dropped (true in every blk-mq
/// callback: the disk's `Drop` frees the tag set, after which none runs, before releasing the
/// reference).
unsafe fn driver_of<'a, D: Driver>(q: *mut b::request_queue) -> &'a D {
    // SAFETY: `queuedata` is the `Arc<D>` that `Disk::new` turned into a foreign pointer;
    // per the caller's guarantee it outlives this call, and so the reference does.
    unsafe {
        let arc = <Arc<D> as ForeignOwnable>::borrow((*q).queuedata);
        &*ptr::from_ref::<D>(&*arc)
    }
}

/// The blk-mq callbacks for `D`.
struct Ops<D: Driver>(PhantomData<D>);

impl<D: Driver> Ops<D> {
    const VTABLE: b::blk_mq_ops = b::blk_mq_ops {
        queue_rq: Some(Self::queue_rq),
        commit_rqs: Some(Self::commit_rqs),
        timeout: Some(Self::timeout),
        init_request: Some(Self::init_request),
        exit_request: Some(Self::exit_request),
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
            let rq = Rq::<D> {
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
    /// Called by blk-mq only, with a started request of a `D` queue that it holds a reference
    /// on for the duration of the call.
    unsafe extern "C" fn timeout(rq: *mut b::request) -> b::blk_eh_timer_return {
        // SAFETY: See above; the request's queue is a `D` queue.
        let driver = unsafe { driver_of::<D>((*rq).q) };
        let r = RqRef::<D> {
            // SAFETY: blk-mq passes a non-null request.
            ptr: unsafe { NonNull::new_unchecked(rq) },
            _p: PhantomData,
        };
        match driver.timeout(&r) {
            TimeoutAction::ResetTimer => b::blk_eh_timer_return_BLK_EH_RESET_TIMER,
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
            let sg_cap = (cmd_size - Area::<D>::SG_OFFSET) / mem::size_of::<b::scatterlist>();
            Area::<D>::of(rq).write(Area {
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
        unsafe { ptr::drop_in_place(Area::<D>::of(rq)) };
    }
}

/// Queue limits of a disk (`struct queue_limits`); 0 means the block layer's default.
///
/// Every disk also asks for stable pages (`BLK_FEAT_STABLE_WRITES`): the page cache does not
/// modify a page while a write of it is in flight, so a checksum of the write data taken in
/// `queue_rq` still matches what the target reads. (An `O_DIRECT` writer that changes its
/// buffer during the write gets a mismatch, as with any checksumming device.)
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Smallest addressable unit: a power of two from 512 to `PAGE_SIZE`.
    pub(crate) logical_block_size: u32,
    /// Smallest unit written atomically (at least the logical block size).
    pub(crate) physical_block_size: u32,
    /// Largest request, in 512-byte sectors (0: the block layer's default; else at least 8).
    pub(crate) max_hw_sectors: u32,
    /// Most data segments per request; also the size of each request's scatterlist array.
    /// Must not be 0.
    pub(crate) max_segments: u16,
    /// Largest segment in bytes (0: default). With a `virt_boundary_mask` the block layer
    /// allows 0 (unlimited) or any value; without one, at least `PAGE_SIZE`.
    pub(crate) max_segment_size: u32,
    /// Segments may not cross this boundary except at its edges (4095 for FRWR page lists);
    /// 0 for none.
    pub(crate) virt_boundary_mask: u64,
    /// The device has a volatile write cache: the block layer sends flushes
    /// ([`ReqOp::Flush`]).
    pub(crate) write_cache: bool,
    /// The device honours FUA writes ([`Rq::is_fua`]); only with `write_cache`.
    pub(crate) fua: bool,
    /// Largest discard, in sectors; 0: no discard.
    pub(crate) max_discard_sectors: u32,
    /// Largest write-zeroes, in sectors; 0: no write-zeroes.
    pub(crate) max_write_zeroes_sectors: u32,
}

impl Limits {
    fn validate(&self) -> Result {
        let lbs = self.logical_block_size;
        let pbs = self.physical_block_size;
        // Checked here so that a bad value is an `EINVAL`, not a block-layer WARN.
        if !(512..=PAGE_SIZE as u32).contains(&lbs) || !lbs.is_power_of_two() {
            return Err(EINVAL);
        }
        if pbs != 0 && !pbs.is_power_of_two() {
            return Err(EINVAL);
        }
        if self.max_hw_sectors != 0
            && (self.max_hw_sectors < (PAGE_SIZE / 512) as u32 || self.max_hw_sectors < lbs / 512)
        {
            return Err(EINVAL);
        }
        if self.max_segments == 0 {
            return Err(EINVAL);
        }
        if self.virt_boundary_mask == 0
            && self.max_segment_size != 0
            && self.max_segment_size < PAGE_SIZE as u32
        {
            return Err(EINVAL);
        }
        if self.fua && !self.write_cache {
            return Err(EINVAL);
        }
        Ok(())
    }

    fn to_raw(self) -> b::queue_limits {
        // SAFETY: All-zero is a valid `queue_limits`: every member is a number (0: default).
        let mut lim: b::queue_limits = unsafe { mem::zeroed() };
        lim.logical_block_size = self.logical_block_size;
        lim.physical_block_size = self.physical_block_size;
        lim.max_hw_sectors = self.max_hw_sectors;
        lim.max_segments = self.max_segments;
        lim.max_segment_size = self.max_segment_size;
        lim.virt_boundary_mask = self.virt_boundary_mask as ffi::c_ulong;
        if self.write_cache {
            lim.features |= b::RDMADISK_BLK_FEAT_WRITE_CACHE;
        }
        if self.fua {
            lim.features |= b::RDMADISK_BLK_FEAT_FUA;
        }
        // Write data is checksummed (CRC32C) before it goes out, so its pages must not change
        // while a write is in flight: writers to the page cache wait for the write to end.
        lim.features |= b::RDMADISK_BLK_FEAT_STABLE_WRITES;
        lim.max_hw_discard_sectors = self.max_discard_sectors;
        lim.max_write_zeroes_sectors = self.max_write_zeroes_sectors;
        lim
    }
}

/// How to create a [`Disk`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct DiskConfig {
    /// The disk is `rdmadisk{index}` (`/dev/rdmadisk{index}`).
    pub(crate) index: u32,
    /// Hardware queues (at least 1).
    pub(crate) nr_hw_queues: u32,
    /// Tags per hardware queue (at least 1).
    pub(crate) queue_depth: u32,
    /// blk-mq's request timeout in milliseconds ([`Driver::timeout`] runs after it); 0: the
    /// block layer's default (30 s).
    pub(crate) timeout_ms: u32,
    /// Size in 512-byte sectors.
    pub(crate) capacity_sectors: u64,
    /// Read-only (`set_disk_ro`).
    pub(crate) read_only: bool,
    /// Queue limits.
    pub(crate) limits: Limits,
    /// NUMA node for the tag set's memory, or `NUMA_NO_NODE`.
    pub(crate) numa_node: i32,
}

/// `struct block_device_operations` holding raw pointers, shareable because it is immutable.
#[repr(transparent)]
struct Fops(b::block_device_operations);

// SAFETY: Never written after initialisation; the pointers in it point to static data.
unsafe impl Sync for Fops {}

/// The disk's operations: none beyond blk-mq's, and the module as owner, so that an opened
/// disk pins the module.
static FOPS: Fops = Fops(b::block_device_operations {
    owner: ptr::addr_of!(b::__this_module).cast_mut(),
    // SAFETY: All-zero is "no callback" / null for every other member.
    ..unsafe { mem::zeroed() }
});

/// A blk-mq tag set for `D`, with the foreign `Arc<D>` in its `driver_data`.
struct TagSet<D: Driver> {
    raw: KBox<Opaque<b::blk_mq_tag_set>>,
    _p: PhantomData<Arc<D>>,
}

impl<D: Driver> TagSet<D> {
    fn new(cfg: &DiskConfig, driver: Arc<D>) -> Result<Self> {
        if cfg.nr_hw_queues == 0 || cfg.queue_depth == 0 {
            return Err(EINVAL);
        }
        let cmd_size = Area::<D>::cmd_size(cfg.limits.max_segments)?;
        // SAFETY: All-zero is a valid, empty `blk_mq_tag_set` (numbers and null pointers).
        let mut set: b::blk_mq_tag_set = unsafe { mem::zeroed() };
        set.ops = &Ops::<D>::VTABLE;
        set.nr_hw_queues = cfg.nr_hw_queues;
        set.queue_depth = cfg.queue_depth;
        set.cmd_size = cmd_size;
        set.numa_node = cfg.numa_node;
        set.nr_maps = 1;
        set.flags = b::RDMADISK_BLK_MQ_F_SHOULD_MERGE;
        if cfg.timeout_ms != 0 {
            // SAFETY: A pure conversion.
            let j = unsafe { b::rdmadisk_msecs_to_jiffies(cfg.timeout_ms) };
            set.timeout = u32::try_from(j).unwrap_or(u32::MAX);
        }
        let raw = KBox::new(Opaque::new(set), GFP_KERNEL)?;
        // SAFETY: Filled in above; not set up yet, so nothing else looks at it.
        unsafe { (*raw.get()).driver_data = driver.into_foreign().cast_mut() };
        // SAFETY: `raw` is a filled-in tag set at a fixed heap address (the box is never
        // moved out of), as `blk_mq_alloc_tag_set` requires (it links it into lists).
        let ret = unsafe { b::blk_mq_alloc_tag_set(raw.get()) };
        if ret != 0 {
            // SAFETY: The set was not set up, so only we hold the `Arc` we put in it.
            drop(unsafe { Arc::<D>::from_foreign((*raw.get()).driver_data) });
            return Err(Error::from_errno(ret));
        }
        Ok(Self {
            raw,
            _p: PhantomData,
        })
    }

    fn as_ptr(&self) -> *mut b::blk_mq_tag_set {
        self.raw.get()
    }
}

impl<D: Driver> Drop for TagSet<D> {
    fn drop(&mut self) {
        // SAFETY: Set up in `new`; every queue of the set is gone (the disk, dropped first,
        // owned the only one), so this frees the requests (`exit_request` drops the PDUs) and
        // no callback runs afterwards.
        unsafe { b::blk_mq_free_tag_set(self.as_ptr()) };
        // SAFETY: The `Arc` from `new`; nothing uses `driver_data` any more.
        drop(unsafe { Arc::<D>::from_foreign((*self.as_ptr()).driver_data) });
    }
}

/// A gendisk and its queue; `added` once `device_add_disk` succeeded.
struct GenDisk {
    ptr: NonNull<b::gendisk>,
    added: bool,
}

impl GenDisk {
    fn queue(&self) -> *mut b::request_queue {
        // SAFETY: The disk is live while `self` is; `queue` is fixed at allocation.
        unsafe { (*self.ptr.as_ptr()).queue }
    }
}

impl Drop for GenDisk {
    fn drop(&mut self) {
        let disk = self.ptr.as_ptr();
        if self.added {
            // SAFETY: Added by `device_add_disk`; deleting it waits for openers to go away
            // and for every request to end (see `Disk`'s `Drop`).
            unsafe { b::del_gendisk(disk) };
        }
        // SAFETY: Our reference from `__blk_mq_alloc_disk`; after `del_gendisk` (or for a disk
        // never added) this is the documented release, and it also frees the queue.
        unsafe { b::put_disk(disk) };
    }
}

/// A registered disk: a tag set, and a gendisk added with `device_add_disk`, with its sysfs
/// directory `/sys/block/rdmadisk{index}/rdmadisk/`.
///
/// # Teardown
///
/// Dropping it (process context; it sleeps) removes the sysfs directory, then `del_gendisk`:
/// the disk is marked dead (new I/O fails
/// with an error at submission), dirty data is written back unless [`Disk::mark_dead`] came
/// first, and it **waits until every request has ended**. Only then are the gendisk, the queue
/// and the tag set freed, and the driver's references released.
///
/// So the driver must end (or fail) every request it owns, before or concurrently with the
/// drop, from another context: requests it holds tokens for, and also requests it requeues
/// (blk-mq dispatches them to [`Driver::queue_rq`] again while the drop waits, and they must
/// then be ended, e.g. with [`BlkStatus::IoErr`], not requeued again).
/// A driver that keeps a token, or keeps requeueing, hangs the drop; it never frees a request
/// under a token. Never drop a `Disk` from `queue_rq`, from a path that ends the disk's
/// requests (a completion handler of its transport), or from an attribute callback other
/// than a [`DiskAttr::wo_self_remove`] one.
pub(crate) struct Disk<D: Driver> {
    // Field order is teardown order (after `Drop::drop` has removed the directory):
    // `del_gendisk` and `put_disk`, then the tag set, then our `Arc`.
    gd: GenDisk,
    _set: TagSet<D>,
    driver: Arc<D>,
    dir: Option<DiskDir<D>>,
    /// `mark_dead` was called.
    dead: AtomicBool,
}

// SAFETY: The gendisk and queue are used only through block-layer entry points that lock
// internally; the tag set is only freed in `Drop`; `D` is `Send + Sync`.
unsafe impl<D: Driver> Send for Disk<D> {}
// SAFETY: See `Send`; the `&self` methods are safe to call concurrently.
unsafe impl<D: Driver> Sync for Disk<D> {}

impl<D: Driver> Disk<D> {
    /// Creates the tag set (`cmd_size` = PDU + scatterlist array, `BLK_MQ_F_SHOULD_MERGE`),
    /// the disk with `cfg`'s limits, name, capacity and read-only flag, adds it, and creates
    /// its directory `/sys/block/rdmadisk{index}/rdmadisk/` with `attrs`.
    pub(crate) fn new(
        cfg: &DiskConfig,
        driver: Arc<D>,
        attrs: &'static DiskAttrs<D>,
    ) -> Result<Self> {
        cfg.limits.validate()?;
        if attrs.len() > MAX_DISK_ATTRS {
            return Err(EINVAL);
        }
        let name = CString::try_from_fmt(kernel::fmt!("rdmadisk{}", cfg.index))?;
        let set = TagSet::<D>::new(cfg, driver.clone())?;
        let mut lim = cfg.limits.to_raw();
        // `LockClassKey` is a transparent wrapper of the C key (its own `as_ptr` is private to
        // the kernel crate).
        let lock_key = ptr::from_ref(kernel::static_lock_class!()).cast::<b::lock_class_key>();
        // SAFETY: `set` is set up; `lim` is a valid `queue_limits` (validated and completed by
        // the block layer); the queuedata is the tag set's `Arc<D>`, which outlives the queue
        // (the disk is dropped before the set); the lock class key is static (lockdep wants
        // one per call site, as the `blk_mq_alloc_disk` macro makes).
        let raw = unsafe {
            b::__blk_mq_alloc_disk(
                set.as_ptr(),
                &mut lim,
                (*set.as_ptr()).driver_data,
                lock_key.cast_mut(),
            )
        };
        let ptr = NonNull::new(kernel::error::from_err_ptr(raw)?).ok_or(ENOMEM)?;
        // Dropped before `set` on the error paths below (reverse declaration order).
        let mut gd = GenDisk { ptr, added: false };
        let disk = ptr.as_ptr();
        let bytes = name.as_bytes_with_nul();
        // SAFETY: The disk is not added yet, so it is ours alone.
        let dst = unsafe { &mut (*disk).disk_name };
        if bytes.len() > dst.len() {
            return Err(EINVAL);
        }
        for (d, s) in dst.iter_mut().zip(bytes) {
            *d = *s as ffi::c_char;
        }
        // SAFETY: As above; `FOPS` is static.
        unsafe {
            (*disk).fops = &FOPS.0;
            b::set_capacity(disk, cfg.capacity_sectors);
            b::set_disk_ro(disk, cfg.read_only);
        }
        // SAFETY: A fully set up disk of a blk-mq queue; no parent device, no extra groups.
        kernel::error::to_result(unsafe {
            b::device_add_disk(ptr::null_mut(), disk, ptr::null_mut())
        })?;
        gd.added = true;
        let mut this = Self {
            gd,
            _set: set,
            driver,
            dir: None,
            dead: AtomicBool::new(false),
        };
        // On failure, dropping `this` deletes the disk again.
        this.dir = Some(DiskDir::new(disk, this.driver.clone(), attrs)?);
        Ok(this)
    }

    /// Reruns every hardware queue, asynchronously (`blk_mq_run_hw_queues(q, true)`): after
    /// resources that made `queue_rq` return [`BlkStatus::Resource`] came back. Any context.
    pub(crate) fn run_queues(&self) {
        // SAFETY: The queue lives as long as `self`.
        unsafe { b::blk_mq_run_hw_queues(self.gd.queue(), true) };
    }

    /// Runs the requeue list now (`blk_mq_kick_requeue_list`), after [`Rq::requeue`]s without
    /// `kick`. Any context.
    pub(crate) fn kick_requeue_list(&self) {
        // SAFETY: The queue lives as long as `self`.
        unsafe { b::blk_mq_kick_requeue_list(self.gd.queue()) };
    }

    /// Marks the disk dead (`blk_mark_disk_dead`), for a force-unmap or a target that is gone:
    /// new I/O fails at submission, filesystems are told of the surprise removal, and its
    /// capacity reads 0. Requests already queued still reach `queue_rq` (end them with an
    /// error). Irreversible; later calls do nothing. Process context.
    pub(crate) fn mark_dead(&self) {
        if !self.dead.swap(true, Ordering::AcqRel) {
            // SAFETY: The disk is added and lives as long as `self`.
            unsafe { b::blk_mark_disk_dead(self.gd.ptr.as_ptr()) };
        }
    }

    /// Whether the disk (or one of its partitions) is open now: by a process or a mounted
    /// filesystem (`disk_openers`). A snapshot: it may be opened right after, which a
    /// following drop still handles (the opener's I/O fails).
    pub(crate) fn is_open(&self) -> bool {
        // SAFETY: The disk is added and lives as long as `self`; this reads an atomic count.
        unsafe { b::rdmadisk_disk_openers(self.gd.ptr.as_ptr()) != 0 }
    }

    /// Changes blk-mq's request timeout ([`DiskConfig::timeout_ms`]) for requests started from
    /// now on (`blk_queue_rq_timeout`); 0 is ignored.
    pub(crate) fn set_timeout_ms(&self, ms: u32) {
        if ms == 0 {
            return;
        }
        // SAFETY: A pure conversion.
        let j = unsafe { b::rdmadisk_msecs_to_jiffies(ms) };
        // SAFETY: The queue lives as long as `self`; the timeout is a plain store.
        unsafe { b::blk_queue_rq_timeout(self.gd.queue(), u32::try_from(j).unwrap_or(u32::MAX)) };
    }
}

impl<D: Driver> Drop for Disk<D> {
    fn drop(&mut self) {
        // The directory first: its attributes may use the driver while they run, and it goes
        // away with the disk's device anyway. Waits for running callbacks, except the
        // self-removing one that may be dropping us (see `DiskDir`).
        drop(self.dir.take());
        // The fields now drop in order: `del_gendisk` + `put_disk`, the tag set, the `Arc`.
    }
}

type ShowFn<D> = fn(&D, &mut ShowBuf<'_>) -> Result;
type StoreFn<D> = fn(&D, &[u8]) -> Result;

/// One attribute file in a disk's `rdmadisk/` directory, typed by the driver state `D`.
#[repr(C)]
pub(crate) struct DiskAttr<D> {
    // First, so that the `kobj_attribute` pointer sysfs passes is also the `DiskAttr` pointer.
    raw: b::kobj_attribute,
    show: Option<ShowFn<D>>,
    store: Option<StoreFn<D>>,
    self_remove: bool,
}

// SAFETY: After construction a `DiskAttr` is immutable; the raw pointers in it point at
// `'static` data (the name) and the callbacks are plain functions.
unsafe impl<D> Sync for DiskAttr<D> {}

/// The attributes of a disk's directory: a static list, e.g.
/// `static ATTRS: &DiskAttrs<Dev> = &[&STATE, &UNMAP];`.
pub(crate) type DiskAttrs<D> = [&'static DiskAttr<D>];

/// Most attributes in a disk's directory.
const MAX_DISK_ATTRS: usize = 32;

impl<D: Send + Sync + 'static> DiskAttr<D> {
    const fn new(
        name: &'static CStr,
        mode: u16,
        show: Option<ShowFn<D>>,
        store: Option<StoreFn<D>>,
        self_remove: bool,
    ) -> Self {
        // SAFETY: All-zero is a valid `kobj_attribute` (null name and callbacks, no lockdep
        // key: static attributes need none).
        let mut raw: b::kobj_attribute = unsafe { mem::zeroed() };
        raw.attr.name = name.as_char_ptr();
        raw.attr.mode = mode;
        if show.is_some() {
            raw.show = Some(attr_show::<D>);
        }
        if store.is_some() {
            raw.store = Some(attr_store::<D>);
        }
        Self {
            raw,
            show,
            store,
            self_remove,
        }
    }

    /// A read-only (0444) attribute.
    pub(crate) const fn ro(name: &'static CStr, show: ShowFn<D>) -> Self {
        Self::new(name, 0o444, Some(show), None, false)
    }

    /// A read-write (0644) attribute. `Err(e)` from `store` fails the write with `e`.
    ///
    /// `store` must not drop the [`Disk`] this directory belongs to (that waits for the store
    /// to finish: a deadlock); use [`DiskAttr::wo_self_remove`] for that.
    pub(crate) const fn rw(name: &'static CStr, show: ShowFn<D>, store: StoreFn<D>) -> Self {
        Self::new(name, 0o644, Some(show), Some(store), false)
    }

    /// A write-only (0200) attribute whose `store` may drop the [`Disk`] (an `unmap`),
    /// synchronously, in the writer's task.
    ///
    /// If `store` drops the disk, the disk's teardown first removes this very file with
    /// `sysfs_remove_file_self` (as RNBD's `unmap_device` does), so that deleting the directory
    /// does not wait for the write in progress. If `store` does not (it refuses, e.g. the disk
    /// is open), the file stays, and the write fails with its error. While such a store runs,
    /// the module cannot be unloaded, and another self-removing write to the same directory
    /// fails with `EBUSY`.
    pub(crate) const fn wo_self_remove(name: &'static CStr, store: StoreFn<D>) -> Self {
        Self::new(name, 0o200, None, Some(store), true)
    }
}

/// The part of the directory's kobject container that does not depend on `D` (the static
/// `kobj_type` only knows this).
#[repr(C)]
struct KobjHead {
    // First, so that the kobject pointer is also the container pointer.
    kobj: Opaque<b::kobject>,
    /// Frees the whole container (a `DirKobj<D>`).
    free: unsafe fn(*mut KobjHead),
    /// The task running a self-removing store on this directory (as an address), or 0.
    remover: AtomicUsize,
    /// That store's attribute.
    remover_attr: AtomicPtr<b::attribute>,
}

/// The kobject of a disk's directory, with what its attribute callbacks need. Allocated in
/// `DiskDir::new`, freed by the kobject's release when its last reference goes.
#[repr(C)]
struct DirKobj<D> {
    head: KobjHead,
    driver: Arc<D>,
    attrs: [*mut b::attribute; MAX_DISK_ATTRS + 1],
    group: b::attribute_group,
}

/// `struct kobj_type` holding raw pointers, shareable because it is immutable.
#[repr(transparent)]
struct KobjType(b::kobj_type);

// SAFETY: Never written after initialisation; the pointers point to static data and functions.
unsafe impl Sync for KobjType {}

/// The type of every disk directory: attribute files through `kobj_sysfs_ops` (which calls the
/// `kobj_attribute` callbacks), freed through `KobjHead::free`.
static DIR_KTYPE: KobjType = KobjType(b::kobj_type {
    release: Some(dir_release),
    sysfs_ops: ptr::addr_of!(b::kobj_sysfs_ops),
    default_groups: ptr::null_mut(),
    child_ns_type: None,
    namespace: None,
    get_ownership: None,
});

/// The kobject's release: its last reference is gone.
///
/// # Safety
///
/// Called by the kobject core only, for a kobject of `DIR_KTYPE`.
unsafe extern "C" fn dir_release(kobj: *mut b::kobject) {
    let head = kobj.cast::<KobjHead>();
    // SAFETY: Every `DIR_KTYPE` kobject is the first field of a `KobjHead` (`repr(C)`), with
    // `free` set for its container; nobody uses it any more.
    unsafe { ((*head).free)(head) };
}

/// # Safety
///
/// `head` must be the head of a `DirKobj<D>` from `KBox::into_raw` that nobody uses any more.
unsafe fn dir_free<D>(head: *mut KobjHead) {
    // SAFETY: `DirKobj<D>` is `repr(C)` with `head` first; see the function's contract.
    drop(unsafe { KBox::from_raw(head.cast::<DirKobj<D>>()) });
}

fn current_task() -> usize {
    ptr::from_ref::<Task>(kernel::current!()) as usize
}

/// The attribute and the driver state of a callback.
///
/// # Safety
///
/// `kobj` must be a `DirKobj<D>`'s kobject whose attribute callback is running (sysfs then
/// holds the file active, so the directory and the container are still there), and `attr` one
/// of its attributes, a `DiskAttr<D>`.
unsafe fn attr_args<'a, D>(
    kobj: *mut b::kobject,
    attr: *mut b::kobj_attribute,
) -> (&'static DiskAttr<D>, &'a DirKobj<D>) {
    // SAFETY: `DiskAttr<D>` is `repr(C)` with `raw` first, and the attributes are statics; the
    // container outlives the callback (see the contract), and is only read.
    unsafe { (&*attr.cast::<DiskAttr<D>>(), &*kobj.cast::<DirKobj<D>>()) }
}

unsafe extern "C" fn attr_show<D: Send + Sync + 'static>(
    kobj: *mut b::kobject,
    attr: *mut b::kobj_attribute,
    buf: *mut ffi::c_char,
) -> isize {
    // SAFETY: Installed only on attributes of `DirKobj<D>` directories (`DiskDir::new`).
    let (attr, dir) = unsafe { attr_args::<D>(kobj, attr) };
    // SAFETY: sysfs hands `show` a zeroed buffer of one page, ours until we return.
    let page = unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), PAGE_SIZE) };
    let mut out = ShowBuf::new(page);
    let Some(show) = attr.show else {
        return EIO.to_errno() as isize;
    };
    match show(&dir.driver, &mut out) {
        Ok(()) => out.len() as isize,
        Err(e) => e.to_errno() as isize,
    }
}

unsafe extern "C" fn attr_store<D: Send + Sync + 'static>(
    kobj: *mut b::kobject,
    attr: *mut b::kobj_attribute,
    buf: *const ffi::c_char,
    count: usize,
) -> isize {
    // SAFETY: Installed only on attributes of `DirKobj<D>` directories (`DiskDir::new`).
    let (attr, dir) = unsafe { attr_args::<D>(kobj, attr) };
    // SAFETY: sysfs passes `count` valid bytes at `buf` for the duration of the call.
    let input = unsafe { core::slice::from_raw_parts(buf.cast::<u8>(), count) };
    let Some(store) = attr.store else {
        return EIO.to_errno() as isize;
    };
    let ret = if attr.self_remove {
        // SAFETY: The callback's contract (`attr_args`) holds.
        unsafe { store_self_removing(kobj, attr, dir, store, input) }
    } else {
        store(&dir.driver, input)
    };
    match ret {
        Ok(()) => count as isize,
        Err(e) => e.to_errno() as isize,
    }
}

/// A store that may drop the disk, and with it delete this directory, from inside the write.
///
/// # Safety
///
/// As for `attr_args`, with `dir` the container of `kobj` and `attr` the attribute written.
unsafe fn store_self_removing<D>(
    kobj: *mut b::kobject,
    attr: &'static DiskAttr<D>,
    dir: &DirKobj<D>,
    store: StoreFn<D>,
    input: &[u8],
) -> Result {
    // Once the disk's teardown has removed our file (see `DiskDir::drop`), nothing waits for
    // this write any more: module unload could go ahead (hence the module reference), and the
    // directory's kobject could be released (hence the kobject reference, which keeps `dir`,
    // the `Arc<D>` in it and the marker below alive until we are done).
    // SAFETY: `__this_module` is this module, live while its code runs.
    if !unsafe { b::try_module_get(ptr::addr_of_mut!(b::__this_module)) } {
        return Err(ENODEV);
    }
    // SAFETY: The kobject is live (its file is active).
    unsafe { b::kobject_get(kobj) };
    let head = &dir.head;
    let me = current_task();
    let ret = if head
        .remover
        .compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        head.remover_attr
            .store(ptr::from_ref(&attr.raw.attr).cast_mut(), Ordering::Release);
        let ret = store(&dir.driver, input);
        head.remover.store(0, Ordering::Release);
        ret
    } else {
        Err(EBUSY)
    };
    // SAFETY: The reference taken above; this may free `dir` (nothing uses it afterwards).
    unsafe { b::kobject_put(kobj) };
    // SAFETY: The reference taken above. Returning to the caller after this is the usual
    // (RNBD) pattern: unloading first waits for the disks, which are dropped before it.
    unsafe { b::module_put(ptr::addr_of_mut!(b::__this_module)) };
    ret
}

/// A disk's sysfs directory `rdmadisk/`: a kobject under the disk's device, with the
/// attributes as a group.
struct DiskDir<D> {
    head: NonNull<KobjHead>,
    _p: PhantomData<Arc<D>>,
}

impl<D: Send + Sync + 'static> DiskDir<D> {
    fn new(disk: *mut b::gendisk, driver: Arc<D>, attrs: &'static DiskAttrs<D>) -> Result<Self> {
        if attrs.len() > MAX_DISK_ATTRS {
            return Err(EINVAL);
        }
        let dir = KBox::new(
            DirKobj {
                head: KobjHead {
                    // SAFETY: `kobject_init` wants a zeroed kobject.
                    kobj: Opaque::new(unsafe { mem::zeroed() }),
                    free: dir_free::<D>,
                    remover: AtomicUsize::new(0),
                    remover_attr: AtomicPtr::new(ptr::null_mut()),
                },
                driver,
                attrs: [ptr::null_mut(); MAX_DISK_ATTRS + 1],
                // SAFETY: All-zero is an empty, unnamed `attribute_group`.
                group: unsafe { mem::zeroed() },
            },
            GFP_KERNEL,
        )?;
        let raw = KBox::into_raw(dir);
        // SAFETY: `raw` is ours and stays at this address until the kobject's release frees
        // it. The group's pointers into it (a NUL-terminated array of `'static` attributes)
        // stay valid as long as the files exist, which end at `kobject_del` at the latest.
        // `disk` is added, so its device kobject is there to be the parent.
        let kobj = unsafe {
            for (slot, attr) in (*raw).attrs.iter_mut().zip(attrs.iter()) {
                *slot = ptr::from_ref(&attr.raw.attr).cast_mut();
            }
            (*raw).group.attrs = ptr::addr_of_mut!((*raw).attrs).cast();
            let kobj = (*raw).head.kobj.get();
            let ret = b::kobject_init_and_add(
                kobj,
                &DIR_KTYPE.0,
                b::rdmadisk_disk_kobj(disk),
                c"%s".as_ptr().cast::<ffi::c_char>(),
                c"rdmadisk".as_ptr().cast::<ffi::c_char>(),
            );
            if ret != 0 {
                // The documented cleanup of a failed `kobject_init_and_add`: the release
                // frees the container.
                b::kobject_put(kobj);
                return Err(Error::from_errno(ret));
            }
            let ret = b::sysfs_create_group(kobj, ptr::addr_of!((*raw).group));
            if ret != 0 {
                b::kobject_del(kobj);
                b::kobject_put(kobj);
                return Err(Error::from_errno(ret));
            }
            kobj
        };
        Ok(Self {
            head: NonNull::new(kobj.cast::<KobjHead>()).ok_or(EINVAL)?,
            _p: PhantomData,
        })
    }
}

impl<D> Drop for DiskDir<D> {
    fn drop(&mut self) {
        let head = self.head.as_ptr();
        // SAFETY: We hold the kobject's initial reference, so the container is live.
        let kobj = unsafe { (*head).kobj.get() };
        // SAFETY: As above.
        let (remover, attr) = unsafe {
            (
                (*head).remover.load(Ordering::Acquire),
                (*head).remover_attr.load(Ordering::Acquire),
            )
        };
        if remover == current_task() {
            // We are dropped from inside a self-removing store on this directory (only that
            // task can see its own address here): remove its file first, so that deleting the
            // directory does not wait for the write we are part of.
            // SAFETY: `attr` is the attribute of the store this task is running on `kobj`.
            unsafe { b::sysfs_remove_file_self(kobj, attr) };
        }
        // SAFETY: Removes the directory, waiting for the other running callbacks, then drops
        // our reference; the container is freed by the release when the last one goes (a
        // running self-removing store holds one).
        unsafe {
            b::kobject_del(kobj);
            b::kobject_put(kobj);
        }
    }
}
