// SPDX-License-Identifier: GPL-2.0

//! Requests: the move-only token the driver ends or requeues, the borrowed view the timeout
//! handler gets, and the per-request area (the driver's PDU and a scatterlist) blk-mq
//! reserves after each `struct request`.

use core::{
    marker::PhantomData,
    mem::{self, MaybeUninit},
    ptr::{self, NonNull},
};
use kernel::prelude::*;

use super::super::bindings as b;

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
    /// The medium refused the operation for good (`BLK_STS_MEDIUM`, `ENODATA`): not retried,
    /// and not a path error, so multipath does not try it elsewhere.
    Medium,
}

impl BlkStatus {
    pub(super) fn to_raw(self) -> b::blk_status_t {
        match self {
            BlkStatus::Ok => b::RDMADISK_BLK_STS_OK,
            BlkStatus::IoErr => b::RDMADISK_BLK_STS_IOERR,
            BlkStatus::Resource => b::RDMADISK_BLK_STS_RESOURCE,
            BlkStatus::NotSupp => b::RDMADISK_BLK_STS_NOTSUPP,
            BlkStatus::Medium => b::RDMADISK_BLK_STS_MEDIUM,
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

/// What blk-mq reserves after each `struct request` for us (`cmd_size` bytes): this header,
/// then, at [`Area::SG_OFFSET`], an array of `sg_cap` scatterlist entries.
#[repr(C)]
pub(super) struct Area<P> {
    /// Entries of the scatterlist array.
    pub(super) sg_cap: u32,
    /// Entries filled by the last [`Rq::map_sg`].
    pub(super) sg_len: u32,
    pub(super) pdu: P,
}

impl<P> Area<P> {
    /// The PDU starts right after the `struct request` (`blk_mq_rq_to_pdu` is `rq + 1`), so it
    /// is only aligned to what the request is.
    const ALIGN_OK: () = assert!(
        mem::align_of::<Self>() <= mem::align_of::<b::request>(),
        "the driver's Pdu needs more alignment than a struct request gives"
    );

    /// Where the scatterlist array starts, from the start of the area.
    pub(super) const SG_OFFSET: usize = {
        let a = mem::align_of::<b::scatterlist>();
        (mem::size_of::<Self>() + a - 1) / a * a
    };

    /// `tag_set.cmd_size` for `sg_cap` scatterlist entries.
    pub(super) fn cmd_size(sg_cap: u16) -> Result<u32> {
        #[allow(clippy::let_unit_value)]
        let () = Self::ALIGN_OK;
        let size = Self::SG_OFFSET + usize::from(sg_cap) * mem::size_of::<b::scatterlist>();
        u32::try_from(size).map_err(|_| EINVAL)
    }

    /// # Safety
    ///
    /// `rq` must be a request of a tag set made by [`super::Disk::new`] for a driver whose
    /// PDU is `P`.
    pub(super) unsafe fn of(rq: *mut b::request) -> *mut Self {
        // SAFETY: By the caller's guarantee the request has `cmd_size` bytes of PDU.
        unsafe { b::rdmadisk_blk_mq_rq_to_pdu(rq) }.cast()
    }

    /// # Safety
    ///
    /// `area` must come from [`Area::of`].
    pub(super) unsafe fn sg(area: *mut Self) -> *mut b::scatterlist {
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
/// For all functions: `rq` is a request of a tag set whose PDU is `P` (where a function has
/// a `P`), allocated to an I/O (owned by
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

    pub(super) unsafe fn pdu<'a, P>(rq: *mut b::request) -> &'a P {
        // SAFETY: See the module's safety section: the PDU was written by `init_request` and
        // is dropped only by `exit_request`, after the request's last use. Only shared
        // references to it are ever made.
        unsafe { &*ptr::addr_of!((*Area::<P>::of(rq)).pdu) }
    }

    /// Calls `f` with each single-page data segment of the request (a `bio_vec` of one page),
    /// in order (`rq_for_each_segment`).
    ///
    /// # Safety
    ///
    /// As for the module; in addition the caller must own the request (its bios cannot
    /// complete under us).
    pub(super) unsafe fn for_each_bvec(rq: *mut b::request, mut f: impl FnMut(&mut b::bio_vec)) {
        // SAFETY: The caller owns the request, so its bios and their pages stay put; this is
        // `rq_for_each_segment` spelled out: for each bio, copy its iterator, and for each
        // single-page `bio_vec` it yields, call `f`, then advance. Discard and write-zeroes
        // bios carry a size but no pages, hence the `has_data` check.
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
                    f(&mut bv);
                    b::rdmadisk_bio_advance_iter_single(bio, &mut iter, len);
                }
                bio = (*bio).bi_next;
            }
        }
    }

    /// Calls `f(address, length)` for each single-page data segment of the request, mapped
    /// with `kmap_local`, in order.
    ///
    /// # Safety
    ///
    /// As for [`for_each_bvec`].
    pub(super) unsafe fn for_each_page(rq: *mut b::request, mut f: impl FnMut(*mut u8, usize)) {
        // SAFETY: The caller's promise, passed on; each `bio_vec` is one page of the request,
        // mapped for the duration of `f` and unmapped before the next.
        unsafe {
            for_each_bvec(rq, |bv| {
                let len = bv.bv_len;
                let addr = b::rdmadisk_bvec_kmap_local(bv).cast::<u8>();
                f(addr, len as usize);
                b::rdmadisk_kunmap_local(addr.cast());
            })
        }
    }
}

/// One single-page segment of a request's data, by page rather than by address: for handing
/// the page itself to the network stack (see `socket.rs`). It borrows the request that holds
/// the page, so it cannot outlive it.
pub(crate) struct DataPage<'a> {
    pub(in crate::kapi) bv: b::bio_vec,
    _rq: PhantomData<&'a ()>,
}

impl<'a> DataPage<'a> {
    /// Its length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.bv.bv_len as usize
    }

    /// Its first `n` bytes (all of it if it is shorter).
    pub(crate) fn prefix(&self, n: usize) -> DataPage<'a> {
        let mut bv = self.bv;
        bv.bv_len = bv.bv_len.min(u32::try_from(n).unwrap_or(u32::MAX));
        DataPage {
            bv,
            _rq: PhantomData,
        }
    }
}

/// A started request the driver owns: a move-only token. Exactly one of [`Rq::end`] and
/// [`Rq::requeue`] consumes it; dropping it otherwise ends the request with `BLK_STS_IOERR`
/// and warns (a bug, but never a hung request).
///
/// It may travel to any context (a completion workqueue, softirq) and be ended there.
pub(crate) struct Rq<P: Send + Sync> {
    pub(super) ptr: NonNull<b::request>,
    pub(super) _p: PhantomData<P>,
}

// SAFETY: The token is the only handle through which the request is ended or mutated, and the
// blk-mq calls it makes (`blk_mq_end_request`, `blk_mq_requeue_request`) may be made from any
// context; the PDU is `Send + Sync`.
unsafe impl<P: Send + Sync> Send for Rq<P> {}
// SAFETY: The `&self` methods read fields blk-mq fixed when it started the request (tag, op,
// position, length, flags), the `Sync` PDU, and the data pages as plain bytes (see
// `for_each_segment`); none of them writes anything, so calls from several threads at once
// cannot race with each other. Everything that writes (`map_sg`, `for_each_segment_mut`,
// ending) takes `&mut self` or `self`.
unsafe impl<P: Send + Sync> Sync for Rq<P> {}

impl<P: Send + Sync> Rq<P> {
    /// Gives up the token without ending the request.
    pub(super) fn into_raw(self) -> *mut b::request {
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

    /// True the first time the driver is handed this I/O; false when blk-mq hands it back
    /// after a [`Rq::requeue`]. The mark is blk-mq's `RQF_DONTPREP`, as nvme uses it: blk-mq
    /// clears it when it sets the request up for a new I/O, and keeps it across requeues
    /// (which then bypass the I/O scheduler, so a reissue is not merged with anything).
    pub(crate) fn first_dispatch(&mut self) -> bool {
        let rq = self.ptr.as_ptr();
        // SAFETY: We own the request, so it is allocated and started, and `&mut self` keeps
        // every other user of the token away. `rq_flags` is a plain word that blk-mq updates
        // with plain read-modify-writes, under no lock: `blk_mq_start_request` ran just before
        // `queue_rq` on this CPU (ordered before us), and the timeout work sets `RQF_TIMED_OUT`
        // before calling the driver's `timeout` and clears it after (`blk_add_timer`), only
        // for a request whose deadline has passed. `RQF_DONTPREP` itself only the driver sets,
        // and only a new allocation clears. So a reissue only reads (like `READ_ONCE`: an
        // aligned word, whose other bits may be changing, this one not). A first dispatch also
        // writes, as `nvme_setup_cmd` does; its timer was armed for `io_timeout_ms` (at least
        // 1 s) by `blk_mq_start_request` just before, so the timeout work meets the write only
        // if this task is held off the CPU that long in between. Nothing here rules that out
        // (nvme does not either); it would lose one flag bit's update, this one or blk-mq's,
        // never tear the word.
        unsafe {
            let flags = ptr::addr_of_mut!((*rq).rq_flags);
            let first = ptr::read_volatile(flags) & b::RDMADISK_RQF_DONTPREP == 0;
            if first {
                ptr::write_volatile(flags, ptr::read_volatile(flags) | b::RDMADISK_RQF_DONTPREP);
            }
            first
        }
    }

    /// The driver's per-request data.
    pub(crate) fn pdu(&self) -> &P {
        // SAFETY: We own the request.
        unsafe { raw::pdu::<P>(self.ptr.as_ptr()) }
    }

    /// Fills the request's scatterlist (`blk_rq_map_sg` into the array in the PDU area, sized
    /// at tag-set creation by [`Limits::max_segments`]) and returns the number of entries
    /// (> 0). `EINVAL` if the request has no data segments. The entries stay valid until the
    /// next `map_sg` or the end of the request; [`Rq::sg_ptr`] points at them.
    ///
    /// [`Limits::max_segments`]: super::Limits::max_segments
    pub(crate) fn map_sg(&mut self) -> Result<u32> {
        let rq = self.ptr.as_ptr();
        // SAFETY: We own the request (and `&mut self` keeps other users of the scatterlist
        // away); the area was set up by `init_request`, and only the owner touches `sg_len` and
        // the array.
        unsafe {
            let area = Area::<P>::of(rq);
            let segs = u32::from(b::rdmadisk_blk_rq_nr_phys_segments(rq));
            if segs == 0 || !raw::has_data(rq) || segs > (*area).sg_cap {
                return Err(EINVAL);
            }
            let sg = Area::<P>::sg(area);
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
    /// For a write: the data to send (page-cache pages are stable while the request is in
    /// flight, see [`Limits`]; a direct-I/O submitter's buffer is not). For a read: its data
    /// once its response is in.
    ///
    /// [`Limits`]: super::Limits
    pub(crate) fn for_each_segment(&self, mut f: impl FnMut(&[u8])) {
        // SAFETY: We own the request, so its bios and their pages stay put; each `(addr, len)`
        // is a live `kmap_local` mapping of `len` bytes of one of those pages, valid until `f`
        // returns. Nothing the driver controls writes the pages while a `&self` borrow of the
        // token exists: an RDMA device may write them only while they are registered, and
        // registering moves the token into its MR slot, from which it comes back only once the
        // key is dead (`frwr.rs`); the TCP receive writes them through `for_each_segment_mut`,
        // which takes `&mut self`. What ownership cannot stop is the submitter: a process doing
        // direct I/O may store into its own buffer while the request is in flight (page-cache
        // pages are stable, see `Limits`). A `&[u8]` over bytes another thread may change is a
        // data race in Rust's memory model; the kernel's tolerates it for plain bytes, and C
        // drivers that checksum or copy a bio's data in place (nvme-tcp's data digest) rely on
        // the same. Lengths and addresses come from the bio, never from the bytes; the bytes
        // only feed the data CRC and copies of the data (an inline write's Send), which the
        // target checks against that CRC: a torn buffer costs a retry or the request, never
        // memory.
        unsafe {
            raw::for_each_page(self.ptr.as_ptr(), |addr, len| {
                f(core::slice::from_raw_parts(addr, len))
            })
        };
    }

    /// Calls `f` with each single-page segment of the request's data as a [`DataPage`], in
    /// order: for sending the pages themselves. Same rules as [`Rq::for_each_segment`].
    pub(crate) fn for_each_data_page(&self, mut f: impl FnMut(&DataPage<'_>)) {
        // SAFETY: We own the request, so its bios and their pages stay put while `self` is
        // borrowed, which each `DataPage` is.
        unsafe {
            raw::for_each_bvec(self.ptr.as_ptr(), |bv| {
                f(&DataPage {
                    bv: *bv,
                    _rq: PhantomData,
                })
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
    ///
    /// [`Disk::kick_requeue_list`]: super::Disk::kick_requeue_list
    pub(crate) fn requeue(self, kick: bool) {
        let rq = self.into_raw();
        // SAFETY: We owned the (started) request and give it back, exactly once.
        unsafe { b::blk_mq_requeue_request(rq, kick) };
    }

    /// The scatterlist entries filled by the last [`Rq::map_sg`] (its return value says how
    /// many), for the DMA mapping in `verbs.rs`. Valid while the token is held.
    pub(in crate::kapi) fn sg_ptr(&self) -> *mut b::scatterlist {
        // SAFETY: We own the request; only the address is computed.
        unsafe { Area::<P>::sg(Area::<P>::of(self.ptr.as_ptr())) }
    }
}

impl<P: Send + Sync> Drop for Rq<P> {
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
pub(crate) struct RqRef<'a, P> {
    pub(super) ptr: NonNull<b::request>,
    pub(super) _p: PhantomData<&'a P>,
}

impl<P> RqRef<'_, P> {
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

    /// Whether the driver still owns the I/O (`MQ_RQ_IN_FLIGHT`): false once it was ended or
    /// requeued, for instance by a completion reaped since the timer expired.
    pub(crate) fn in_flight(&self) -> bool {
        // SAFETY: blk-mq pins the request for the duration of the borrow; its state is read
        // with `READ_ONCE`, as blk-mq reads it while the owner may change it.
        unsafe { b::rdmadisk_blk_mq_rq_in_flight(self.ptr.as_ptr()) }
    }
}
