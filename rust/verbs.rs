// SPDX-License-Identifier: GPL-2.0

//! RDMA verbs: device references, protection domains, completion queues, DMA-mapped message
//! buffers with their completions, and fast-registration memory regions.
//!
//! Ownership is what keeps this safe without `unsafe` in the driver:
//! - Every object holds what it was created from ([`Pd`] and [`Cq`] hold a [`DeviceRef`], a
//!   [`Msg`] or [`FrMr`] holds an `Arc<Pd>`), so nothing is freed under a user.
//! - A [`DeviceRef`] is a registration reference on the `ib_device`: the device's
//!   unregistration (`rdma link delete`, NIC driver unload) waits until every reference is gone,
//!   so the driver must drop its objects from `ib_client.remove` or on the rdma_cm
//!   `DEVICE_REMOVAL` event. Forgetting to is a hang, never a use-after-free.
//! - Posting a [`Msg`] moves its box into the work request; the completion handler gets the
//!   box back ([`MsgOwner::done`]). Every posted work request completes, with an error when
//!   flushed, once the QP is drained, which the QP's owner does before destroying it (see
//!   `rdma_cm.rs`), so no buffer is leaked or freed while the device may still touch it.

use core::ptr::{self, NonNull};
use kernel::{new_spinlock, prelude::*, str::CStr, sync::Arc, sync::SpinLock};

use super::bindings as b;

/// Name the IB core records as the creator of our PDs and CQs (what `KBUILD_MODNAME` gives C).
const CALLER: &CStr = kernel::c_str!("rdmadisk");

/// A counted reference on a registered RDMA device.
pub(crate) struct DeviceRef {
    ptr: NonNull<b::ib_device>,
}

// SAFETY: An `ib_device` is shared by all its users and does its own locking; the reference
// count is atomic.
unsafe impl Send for DeviceRef {}
// SAFETY: See `Send`.
unsafe impl Sync for DeviceRef {}

impl DeviceRef {
    /// Takes a reference on `ptr`; `ENODEV` if the device is already being unregistered.
    ///
    /// # Safety
    ///
    /// `ptr` must point to an `ib_device` whose memory stays valid for the duration of the
    /// call (for example the device of a live `rdma_cm_id`).
    pub(super) unsafe fn try_get(ptr: *mut b::ib_device) -> Result<Self> {
        let ptr = NonNull::new(ptr).ok_or(ENODEV)?;
        // SAFETY: The caller guarantees that the device is valid now.
        if unsafe { b::rdmadisk_ib_device_try_get(ptr.as_ptr()) } {
            Ok(Self { ptr })
        } else {
            Err(ENODEV)
        }
    }

    pub(super) fn as_ptr(&self) -> *mut b::ib_device {
        self.ptr.as_ptr()
    }

    /// Which device this is, to compare with another reference or an `ib_client` device.
    pub(crate) fn id(&self) -> DeviceId {
        DeviceId(self.ptr.as_ptr() as usize)
    }

    /// The limits a connection must respect on this device.
    pub(crate) fn attrs(&self) -> DeviceAttrs {
        // SAFETY: We hold a registration reference, so the device is live; `attrs` and
        // `num_comp_vectors` are set before the device is registered and never change after.
        unsafe {
            let d = self.ptr.as_ptr();
            let a = &(*d).attrs;
            DeviceAttrs {
                max_qp_wr: a.max_qp_wr.max(0) as u32,
                max_cqe: a.max_cqe.max(0) as u32,
                max_qp_rd_atom: a.max_qp_rd_atom.max(0) as u32,
                max_qp_init_rd_atom: a.max_qp_init_rd_atom.max(0) as u32,
                max_fast_reg_page_list_len: a.max_fast_reg_page_list_len,
                num_comp_vectors: (*d).num_comp_vectors.max(0) as u32,
            }
        }
    }

    /// The device's name, e.g. `rxe0`.
    pub(crate) fn name(&self) -> &CStr {
        // SAFETY: We hold a registration reference, so the device and its name (a
        // NUL-terminated string owned by the device) live as long as `self`.
        unsafe { CStr::from_char_ptr(b::rdmadisk_ib_device_name(self.ptr.as_ptr())) }
    }
}

/// The identity of an RDMA device (its address), comparable without a reference on it. Two
/// devices alive at once never share one; a name may be reused by a later device.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct DeviceId(pub(super) usize);

impl DeviceId {
    /// No device.
    pub(crate) const NONE: DeviceId = DeviceId(0);

    /// The identity as a number, to keep in an atomic.
    pub(crate) fn to_bits(self) -> usize {
        self.0
    }

    /// An identity kept with [`DeviceId::to_bits`].
    pub(crate) fn from_bits(v: usize) -> Self {
        DeviceId(v)
    }
}

/// A device's limits (`struct ib_device_attr`) that a connection's sizes must respect.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DeviceAttrs {
    /// Work requests per send or receive queue.
    pub(crate) max_qp_wr: u32,
    /// Entries per completion queue.
    pub(crate) max_cqe: u32,
    /// RDMA Reads a QP may have outstanding as the responder (`responder_resources`).
    pub(crate) max_qp_rd_atom: u32,
    /// RDMA Reads a QP may have outstanding as the initiator (`initiator_depth`).
    pub(crate) max_qp_init_rd_atom: u32,
    /// Pages one fast-registration MR maps.
    pub(crate) max_fast_reg_page_list_len: u32,
    /// Completion vectors (interrupts) the device has.
    pub(crate) num_comp_vectors: u32,
}

impl Clone for DeviceRef {
    fn clone(&self) -> Self {
        // SAFETY: `self` keeps the device alive, and the count is non-zero while we hold a
        // reference, so taking another one cannot fail.
        let ok = unsafe { b::rdmadisk_ib_device_try_get(self.ptr.as_ptr()) };
        debug_assert!(ok);
        Self { ptr: self.ptr }
    }
}

impl Drop for DeviceRef {
    fn drop(&mut self) {
        // SAFETY: Releases the reference taken in `try_get` or `clone`.
        unsafe { b::ib_device_put(self.ptr.as_ptr()) };
    }
}

/// A protection domain. Shared (`Arc<Pd>`) by the QPs, buffers and MRs created in it, so it
/// is deallocated only after all of them.
pub(crate) struct Pd {
    ptr: NonNull<b::ib_pd>,
    dev: DeviceRef,
}

// SAFETY: The IB core serialises PD use internally; we only read `local_dma_lkey`, which is
// fixed at allocation.
unsafe impl Send for Pd {}
// SAFETY: See `Send`.
unsafe impl Sync for Pd {}

impl Pd {
    /// Allocates a PD on `dev` (no flags: no global rkey, ever).
    pub(crate) fn new(dev: &DeviceRef) -> Result<Arc<Self>> {
        // SAFETY: `dev` is a registered device we hold a reference on; `CALLER` is static.
        let raw = unsafe { b::__ib_alloc_pd(dev.as_ptr(), 0, CALLER.as_char_ptr()) };
        let ptr = NonNull::new(kernel::error::from_err_ptr(raw)?).ok_or(ENOMEM)?;
        Arc::new(
            Self {
                ptr,
                dev: dev.clone(),
            },
            GFP_KERNEL,
        )
        .map_err(|e| {
            // SAFETY: Just allocated, nothing uses it.
            unsafe { b::ib_dealloc_pd_user(ptr.as_ptr(), ptr::null_mut()) };
            e.into()
        })
    }

    /// The device the PD belongs to.
    pub(crate) fn device(&self) -> &DeviceRef {
        &self.dev
    }

    pub(super) fn as_ptr(&self) -> *mut b::ib_pd {
        self.ptr.as_ptr()
    }

    fn local_dma_lkey(&self) -> u32 {
        // SAFETY: `ptr` is a live PD; `local_dma_lkey` is set at allocation and never changes.
        unsafe { (*self.ptr.as_ptr()).local_dma_lkey }
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: Every QP, MR and buffer of this PD holds an `Arc<Pd>`, so none is left.
        // Kernel PDs have no udata. The return value only reports driver bugs (the core warns).
        unsafe { b::ib_dealloc_pd_user(self.ptr.as_ptr(), ptr::null_mut()) };
    }
}

/// Where completion handlers run.
#[derive(Clone, Copy)]
pub(crate) enum PollCtx {
    /// In softirq context: fastest; handlers must not sleep.
    #[allow(
        dead_code,
        reason = "the data path polls on the workqueue, see rdma_queue.rs"
    )]
    Softirq,
    /// On the IB completion workqueue: handlers may sleep.
    Workqueue,
    /// Only where [`Cq::process_direct`] is called (blk-mq's poll, a drain): handlers must
    /// not sleep, and may run on several CPUs at once.
    Direct,
}

/// A completion queue polled by the IB core, which calls each work request's handler; a
/// [`PollCtx::Direct`] one is polled by its user ([`Cq::process_direct`]) and serves one QP.
#[pin_data(PinnedDrop)]
pub(crate) struct Cq {
    ptr: NonNull<b::ib_cq>,
    direct: bool,
    /// Held while a direct CQ is reaped; true once [`Cq::stop_direct`] ran, after which
    /// only the drain of its QP polls it.
    #[pin]
    stopped: SpinLock<bool>,
    _dev: DeviceRef,
}

// SAFETY: The IB core owns the polling; we only pass the pointer back to it.
unsafe impl Send for Cq {}
// SAFETY: See `Send`.
unsafe impl Sync for Cq {}

impl Cq {
    /// Allocates a CQ of `entries` entries on completion vector `comp_vector`.
    pub(crate) fn new(
        dev: &DeviceRef,
        entries: u32,
        comp_vector: u32,
        poll: PollCtx,
    ) -> Result<Arc<Self>> {
        let ctx = match poll {
            PollCtx::Softirq => b::ib_poll_context_IB_POLL_SOFTIRQ,
            PollCtx::Workqueue => b::ib_poll_context_IB_POLL_WORKQUEUE,
            PollCtx::Direct => b::ib_poll_context_IB_POLL_DIRECT,
        };
        let entries = i32::try_from(entries).map_err(|_| EINVAL)?;
        let vector = i32::try_from(comp_vector).map_err(|_| EINVAL)?;
        // SAFETY: `dev` is a registered device we hold a reference on; `CALLER` is static.
        let raw = unsafe {
            b::__ib_alloc_cq(
                dev.as_ptr(),
                ptr::null_mut(),
                entries,
                vector,
                ctx,
                CALLER.as_char_ptr(),
            )
        };
        let ptr = NonNull::new(kernel::error::from_err_ptr(raw)?).ok_or(ENOMEM)?;
        Arc::pin_init(
            pin_init!(Self {
                ptr,
                direct: matches!(poll, PollCtx::Direct),
                stopped <- new_spinlock!(false, "rdmadisk::verbs::Cq::stopped"),
                _dev: dev.clone(),
            }),
            GFP_KERNEL,
        )
        .inspect_err(|_| {
            // SAFETY: Just allocated, no QP uses it.
            unsafe { b::ib_free_cq(ptr.as_ptr()) };
        })
    }

    pub(super) fn as_ptr(&self) -> *mut b::ib_cq {
        self.ptr.as_ptr()
    }

    /// Takes up to `budget` completions of a [`PollCtx::Direct`] CQ and runs their handlers
    /// here; returns how many. A CQ the IB core polls itself is left to it, and a stopped one
    /// to its QP's drain (0). Callers on several CPUs take turns. Never sleeps.
    pub(crate) fn process_direct(&self, budget: u32) -> u32 {
        if !self.direct {
            return 0;
        }
        let stopped = self.stopped.lock();
        if *stopped {
            return 0;
        }
        let budget = i32::try_from(budget).unwrap_or(i32::MAX);
        // SAFETY: The CQ is live (we own it until `drop`) and of the direct kind, which the
        // IB core polls only in `ib_drain_qp`. That runs after `stop_direct`, which waits for
        // this call (the lock) and keeps later ones out: no handler runs here for a work
        // request of a QP being drained or destroyed.
        let n = unsafe { b::ib_process_cq_direct(self.ptr.as_ptr(), budget) };
        drop(stopped);
        u32::try_from(n).unwrap_or(0)
    }

    /// Ends reaping by [`Cq::process_direct`]: waits for a reap in progress; later ones find
    /// nothing. Called before the CQ's QP is drained.
    pub(super) fn stop_direct(&self) {
        *self.stopped.lock() = true;
    }
}

#[pinned_drop]
impl PinnedDrop for Cq {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: QPs hold an `Arc<Cq>` until they are destroyed, so none uses it any more.
        // `ib_free_cq` stops the IB core's polling and waits for running handlers; nobody
        // reaps a direct CQ any more (`process_direct` borrows it).
        unsafe { b::ib_free_cq(self.ptr.as_ptr()) };
    }
}

/// What a work completion reports. Only the IB core's completions make one (the fields are
/// private), so a `Wc` is evidence of what the device did: [`super::frwr`] takes a receive
/// completion's invalidated key as proof that a registration is dead.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Wc {
    status: u32,
    vendor_err: u32,
    byte_len: u32,
    invalidated_rkey: Option<u32>,
}

impl Wc {
    /// The status of a work request flushed because its QP went to the error state.
    pub(crate) const FLUSH: u32 = b::ib_wc_status_IB_WC_WR_FLUSH_ERR;

    /// True for a successful completion.
    pub(crate) fn is_ok(&self) -> bool {
        self.status == b::ib_wc_status_IB_WC_SUCCESS
    }

    /// True when the work request was flushed because the QP went to the error state (a
    /// disconnect or drain), as opposed to failing on its own.
    pub(crate) fn is_flush(&self) -> bool {
        self.status == Self::FLUSH
    }

    /// `IB_WC_*` status; 0 is success.
    pub(crate) fn status(&self) -> u32 {
        self.status
    }

    /// Driver-specific detail of an error status.
    pub(crate) fn vendor_err(&self) -> u32 {
        self.vendor_err
    }

    /// Bytes received (receive completions only).
    pub(crate) fn byte_len(&self) -> u32 {
        self.byte_len
    }

    /// The rkey the peer invalidated with Send-with-Invalidate, if it did.
    pub(crate) fn invalidated_rkey(&self) -> Option<u32> {
        self.invalidated_rkey
    }

    /// A short name of the status, for logs.
    pub(crate) fn status_str(&self) -> &'static str {
        match self.status {
            b::ib_wc_status_IB_WC_SUCCESS => "success",
            b::ib_wc_status_IB_WC_LOC_LEN_ERR => "local length error",
            b::ib_wc_status_IB_WC_LOC_QP_OP_ERR => "local QP operation error",
            b::ib_wc_status_IB_WC_LOC_PROT_ERR => "local protection error",
            b::ib_wc_status_IB_WC_WR_FLUSH_ERR => "flushed",
            b::ib_wc_status_IB_WC_REM_ACCESS_ERR => "remote access error",
            b::ib_wc_status_IB_WC_REM_OP_ERR => "remote operation error",
            b::ib_wc_status_IB_WC_RETRY_EXC_ERR => "transport retry exceeded",
            b::ib_wc_status_IB_WC_RNR_RETRY_EXC_ERR => "RNR retry exceeded",
            _ => "error",
        }
    }

    /// # Safety
    ///
    /// `wc` must point to a valid work completion.
    pub(super) unsafe fn from_raw(wc: *const b::ib_wc) -> Self {
        // SAFETY: The caller guarantees `wc` is valid; the union member `invalidate_rkey` is
        // the one the driver sets when `IB_WC_WITH_INVALIDATE` is set.
        unsafe {
            let wc = &*wc;
            let inv = wc.wc_flags & (b::ib_wc_flags_IB_WC_WITH_INVALIDATE as i32) != 0;
            Self {
                status: wc.status,
                vendor_err: wc.vendor_err,
                byte_len: wc.byte_len,
                invalidated_rkey: inv.then(|| wc.ex.invalidate_rkey),
            }
        }
    }
}

/// Which way a [`Msg`] goes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum MsgDir {
    /// Posted with a Send; the device reads it.
    Send,
    /// Posted as a Receive; the device writes it.
    Recv,
}

/// The owner of a posted [`Msg`]: gets the message back when its work request completes.
pub(crate) trait MsgOwner: Send + Sized + 'static {
    /// The work request completed (successfully or not, `wc` says). Runs in the CQ's
    /// [`PollCtx`]; it must not block on anything that waits for this CQ (such as a drain).
    /// Dropping `msg` here unmaps and frees it.
    fn done(msg: KBox<Msg<Self>>, wc: &Wc);
}

/// A DMA-mapped message buffer for Sends and Receives, with its completion entry.
#[repr(C)]
pub(crate) struct Msg<O: MsgOwner> {
    // First, so that the `ib_cqe` pointer in a completion is also the `Msg` pointer.
    cqe: b::ib_cqe,
    sge: b::ib_sge,
    dir: MsgDir,
    // A separate allocation: the device writes received data, and sharing its cache lines
    // with CPU-written fields breaks on non-coherent platforms.
    buf: KVec<u8>,
    pd: Arc<Pd>,
    owner: O,
}

// SAFETY: The raw fields are plain data (the CQE's function pointer, the SGE's numbers); the
// buffer, the PD and `O` are `Send`.
unsafe impl<O: MsgOwner> Send for Msg<O> {}

impl<O: MsgOwner> Msg<O> {
    /// Allocates and DMA-maps a `len`-byte buffer in `pd`.
    pub(crate) fn new(pd: &Arc<Pd>, len: usize, dir: MsgDir, owner: O) -> Result<KBox<Self>> {
        let len32 = u32::try_from(len).map_err(|_| EINVAL)?;
        let mut buf = KVec::from_elem(0u8, len, GFP_KERNEL)?;
        let dev = pd.device().as_ptr();
        // SAFETY: `buf` is kmalloc memory of `len` bytes, which stays put (and mapped) until
        // `drop` unmaps it; `dev` is alive while `pd` is.
        let addr = unsafe {
            b::rdmadisk_ib_dma_map_single(dev, buf.as_mut_ptr().cast(), len, dma_dir(dir))
        };
        // SAFETY: `addr` was just returned by the mapping call on `dev`.
        if unsafe { b::rdmadisk_ib_dma_mapping_error(dev, addr) } != 0 {
            return Err(ENOMEM);
        }
        let msg = KBox::new(
            Self {
                cqe: b::ib_cqe {
                    done: Some(msg_done::<O>),
                },
                sge: b::ib_sge {
                    addr,
                    length: len32,
                    lkey: pd.local_dma_lkey(),
                },
                dir,
                buf,
                pd: pd.clone(),
                owner,
            },
            GFP_KERNEL,
        );
        // On allocation failure the `Msg` was never built, so unmap by hand.
        msg.inspect_err(|_| {
            // SAFETY: Mapped above, never posted.
            unsafe { b::rdmadisk_ib_dma_unmap_single(dev, addr, len, dma_dir(dir)) };
        })
        .map_err(Into::into)
    }

    /// The whole buffer. For a received message, valid after its completion.
    pub(crate) fn data(&self) -> &[u8] {
        &self.buf
    }

    /// The whole buffer, to fill before a Send.
    pub(crate) fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    /// Makes a Send carry only the buffer's first `len` bytes (all of it until set): a buffer
    /// sized for the largest message often carries a small one, and the peer's receive may
    /// be no larger than that. `EINVAL` past the buffer's end.
    pub(crate) fn set_len(&mut self, len: usize) -> Result {
        if len > self.buf.len() {
            return Err(EINVAL);
        }
        self.sge.length = u32::try_from(len).map_err(|_| EINVAL)?;
        Ok(())
    }

    /// Whoever the completion is for.
    pub(crate) fn owner(&self) -> &O {
        &self.owner
    }

    /// Gives the buffer to the device: syncs it, and turns the box into the raw pointer a work
    /// request carries. Returns the CQE and SGE pointers to put in the work request, or the
    /// message if it goes the other way.
    pub(super) fn into_posted(
        mut msg: KBox<Self>,
        want: MsgDir,
    ) -> core::result::Result<(*mut Self, *mut b::ib_cqe, *mut b::ib_sge), KBox<Self>> {
        if msg.dir != want {
            return Err(msg);
        }
        // Both ways: a Send's bytes must reach the device; a Receive's buffer, which the CPU
        // read after its last completion (synced for the CPU then), goes back to the device,
        // and on a non-coherent platform its cache lines must not be written back over what
        // the device writes next.
        // Only what the work request names: a Receive's SGE is always the whole buffer.
        // SAFETY: The mapping is live; the CPU is done with the buffer until its completion;
        // `sge.length` is at most the mapped length (`new`, `set_len`).
        unsafe {
            b::rdmadisk_ib_dma_sync_single_for_device(
                msg.pd.device().as_ptr(),
                msg.sge.addr,
                msg.sge.length as usize,
                dma_dir(msg.dir),
            )
        };
        let cqe = ptr::addr_of_mut!(msg.cqe);
        let sge = ptr::addr_of_mut!(msg.sge);
        Ok((KBox::into_raw(msg), cqe, sge))
    }

    /// Takes back a message whose post failed.
    ///
    /// # Safety
    ///
    /// `raw` must come from [`Msg::into_posted`] and its work request must not have been
    /// accepted by the device.
    pub(super) unsafe fn reclaim(raw: *mut Self) -> KBox<Self> {
        // SAFETY: Per the contract, we are again the only owner of the box.
        unsafe { KBox::from_raw(raw) }
    }
}

impl<O: MsgOwner> Drop for Msg<O> {
    fn drop(&mut self) {
        // SAFETY: The mapping was made in `new` on this device, which `pd` keeps alive; a
        // `Msg` is only dropped while not posted.
        unsafe {
            b::rdmadisk_ib_dma_unmap_single(
                self.pd.device().as_ptr(),
                self.sge.addr,
                self.buf.len(),
                dma_dir(self.dir),
            )
        };
    }
}

fn dma_dir(dir: MsgDir) -> b::dma_data_direction {
    match dir {
        MsgDir::Send => b::dma_data_direction_DMA_TO_DEVICE,
        MsgDir::Recv => b::dma_data_direction_DMA_FROM_DEVICE,
    }
}

unsafe extern "C" fn msg_done<O: MsgOwner>(_cq: *mut b::ib_cq, wc: *mut b::ib_wc) {
    // SAFETY: The IB core passes a valid completion whose `wr_cqe` is the CQE of a `Msg<O>`
    // posted by `into_posted` (only those carry `msg_done::<O>`); `cqe` is its first field of a
    // `repr(C)` struct, so the pointers coincide, and the completion ends the device's use of
    // the buffer, giving the box back to us.
    let (msg, wc) = unsafe {
        let raw = (*wc).__bindgen_anon_1.wr_cqe.cast::<Msg<O>>();
        (KBox::from_raw(raw), Wc::from_raw(wc))
    };
    if msg.dir == MsgDir::Recv {
        // SAFETY: The mapping is live and the device has finished writing.
        unsafe {
            b::rdmadisk_ib_dma_sync_single_for_cpu(
                msg.pd.device().as_ptr(),
                msg.sge.addr,
                msg.buf.len(),
                dma_dir(msg.dir),
            )
        };
    }
    O::done(msg, &wc);
}

/// Access a fast-registration MR grants the peer. One of the two, never both (see the design:
/// a write's buffer is only read remotely, a read's only written).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum RemoteAccess {
    /// The peer may RDMA Read the region (client writes).
    Read,
    /// The peer may RDMA Write the region (client reads).
    Write,
}

impl RemoteAccess {
    /// The `IB_ACCESS_*` bits for an `IB_WR_REG_MR` of this access.
    pub(crate) fn bits(self) -> i32 {
        let remote = match self {
            RemoteAccess::Read => b::ib_access_flags_IB_ACCESS_REMOTE_READ,
            RemoteAccess::Write => b::ib_access_flags_IB_ACCESS_REMOTE_WRITE,
        };
        (b::ib_access_flags_IB_ACCESS_LOCAL_WRITE | remote) as i32
    }
}

/// A fast-registration memory region (`IB_MR_TYPE_MEM_REG`), re-registered per I/O with a
/// fresh key by [`super::frwr`], which owns every use of it.
pub(crate) struct FrMr {
    ptr: NonNull<b::ib_mr>,
    _pd: Arc<Pd>,
}

// SAFETY: An MR is used by one request at a time; its key is changed only through the `&mut`
// slot that owns it (rust/frwr.rs), and the rest by the IB core under its own rules.
unsafe impl Send for FrMr {}
// SAFETY: `&FrMr` only reads, and the key only by the claim's holder (see `rkey`).
unsafe impl Sync for FrMr {}

impl FrMr {
    /// Allocates an MR for up to `max_pages` pages.
    pub(crate) fn new(pd: &Arc<Pd>, max_pages: u32) -> Result<Self> {
        // SAFETY: `pd` is a live PD.
        let raw =
            unsafe { b::ib_alloc_mr(pd.as_ptr(), b::ib_mr_type_IB_MR_TYPE_MEM_REG, max_pages) };
        let ptr = NonNull::new(kernel::error::from_err_ptr(raw)?).ok_or(ENOMEM)?;
        Ok(Self {
            ptr,
            _pd: pd.clone(),
        })
    }

    pub(super) fn as_ptr(&self) -> *mut b::ib_mr {
        self.ptr.as_ptr()
    }

    /// The local key now, for a key that must *not* match (`MrPool::bad_lkey`). The owner of
    /// the MR's slot changes it only under the same lock its callers hold.
    pub(super) fn lkey(&self) -> u32 {
        // SAFETY: Live MR; the key is a plain word, changed only on registration by the slot's
        // owner, who is the caller or serialised with it.
        unsafe { ptr::read_volatile(ptr::addr_of!((*self.ptr.as_ptr()).lkey)) }
    }

    /// The key the peer uses now. Only for the owner of the MR's slot (rust/frwr.rs), who is
    /// the only one to change it, so the read never races an update.
    pub(super) fn rkey(&self) -> u32 {
        // SAFETY: Live MR; per the contract no one changes the key concurrently.
        unsafe { (*self.ptr.as_ptr()).rkey }
    }
}

impl Drop for FrMr {
    fn drop(&mut self) {
        // SAFETY: The MR's QP has been drained (its owner drains before dropping MRs), so no
        // registration or remote access is in flight. Kernel MRs have no udata.
        unsafe { b::ib_dereg_mr_user(self.ptr.as_ptr(), ptr::null_mut()) };
    }
}
