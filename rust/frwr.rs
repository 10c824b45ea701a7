// SPDX-License-Identifier: GPL-2.0

//! Fast registration (FRWR) of a block request's pages: DMA-mapping the request, the per-tag
//! memory regions of a QP, the `IB_WR_REG_MR` chained to the request's Send, and the
//! `IB_WR_LOCAL_INV` fallback when the peer did not invalidate.
//!
//! The lifecycle follows drivers/nvme/host/rdma.c: map the scatterlist, `ib_map_mr_sg` it onto
//! the tag's MR with a fresh key, post REG_MR (unsignalled) + SEND in one call, and let the
//! target's Send-with-Invalidate (or our LOCAL_INV) end the remote access before the request
//! completes.
//!
//! The rule this file enforces (docs/design.md, "When things go wrong"): **a page goes back to
//! the block layer only when no rkey can reach it.** The types make it so:
//! - A [`DmaRq`] is a request whose pages are DMA-mapped but reachable through no MR; it can
//!   be unmapped and handed back at any time.
//! - Registering moves the [`DmaRq`] *into* its MR slot (`CmId::post_reg_send`). From then
//!   on nothing outside this file can reach the pages. The request comes back out only with a
//!   proof that the key is dead:
//!   - `CmId::remote_invalidated`: a receive completion ([`Wc`], which only the IB core's
//!     completions create) whose Send-with-Invalidate named exactly this registration's rkey;
//!   - `CmId::local_invalidated`: an [`InvToken`], which only the completion handler of a
//!     successful `IB_WR_LOCAL_INV` of this slot creates;
//!   - `CmId::close`: the QP moved to the error state and drained (every work request
//!     flushed), after which no remote access can happen.
//! - Every registration bumps the MR's key byte (`ib_update_fast_reg_key`), so an rkey of an
//!   earlier I/O never matches the region again.
//! - The MRs belong to the QP's resources, so they are deregistered only after the QP is
//!   drained and destroyed, never under the device.

use core::{
    mem::{offset_of, ManuallyDrop},
    ptr,
    sync::atomic::{AtomicU32, Ordering},
};
use kernel::{prelude::*, sync::Arc};

use super::bindings as b;
use super::blk_mq::Rq;
use super::verbs::{DeviceRef, FrMr, Msg, MsgDir, MsgOwner, Pd, RemoteAccess, Wc};

/// The page size of every registration: segments never cross it except at its edges (the
/// queue's virtual boundary is `MR_PAGE_SIZE - 1`), and `ib_map_mr_sg` maps in units of it.
pub(crate) const MR_PAGE_SIZE: u32 = 4096;

/// A block request whose data pages are DMA-mapped on an RDMA device and reachable through no
/// memory region.
pub(crate) struct DmaRq<P: Send + Sync> {
    rq: ManuallyDrop<Rq<P>>,
    dev: ManuallyDrop<DeviceRef>,
    /// Entries `map_sg` filled (what unmapping takes).
    nents: i32,
    /// Entries after DMA mapping (an IOMMU may merge some).
    mapped: i32,
    dir: b::dma_data_direction,
}

impl<P: Send + Sync> DmaRq<P> {
    /// Maps `rq`'s data for the access the peer gets: `Read` (the peer reads: a block write)
    /// or `Write` (the peer writes: a block read). On failure the request comes back.
    pub(crate) fn map(
        mut rq: Rq<P>,
        dev: &DeviceRef,
        access: RemoteAccess,
    ) -> core::result::Result<Self, (Rq<P>, Error)> {
        let nents = match rq.map_sg() {
            Ok(n) => n,
            Err(e) => return Err((rq, e)),
        };
        let Ok(nents) = i32::try_from(nents) else {
            return Err((rq, EINVAL));
        };
        let dir = match access {
            RemoteAccess::Read => b::dma_data_direction_DMA_TO_DEVICE,
            RemoteAccess::Write => b::dma_data_direction_DMA_FROM_DEVICE,
        };
        // SAFETY: `sg_ptr` holds `nents` entries just filled by `map_sg`, in the request's PDU
        // area, which lives as long as the request; the device is registered (we hold a
        // reference).
        let mapped = unsafe { b::rdmadisk_ib_dma_map_sg(dev.as_ptr(), rq.sg_ptr(), nents, dir) };
        if mapped <= 0 {
            return Err((rq, ENOMEM));
        }
        Ok(Self {
            rq: ManuallyDrop::new(rq),
            dev: ManuallyDrop::new(dev.clone()),
            nents,
            mapped,
            dir,
        })
    }

    fn unmap_sg(&self) {
        // SAFETY: Mapped in `map` with these arguments on this device; the request (and so its
        // scatterlist) is alive. No MR can reach the pages: a `DmaRq` outside an MR slot was
        // never registered or has been taken back out with a proof that its key is dead (see
        // the module documentation), so the device has finished with them.
        unsafe {
            b::rdmadisk_ib_dma_unmap_sg(self.dev.as_ptr(), self.rq.sg_ptr(), self.nents, self.dir)
        };
    }

    /// Unmaps the data and gives the request back, to complete or requeue it.
    pub(crate) fn unmap(self) -> Rq<P> {
        let mut this = ManuallyDrop::new(self);
        this.unmap_sg();
        // SAFETY: `this` is never dropped; each field is taken exactly once.
        unsafe {
            ManuallyDrop::drop(&mut this.dev);
            ManuallyDrop::take(&mut this.rq)
        }
    }
}

impl<P: Send + Sync> Drop for DmaRq<P> {
    fn drop(&mut self) {
        self.unmap_sg();
        // SAFETY: Dropped once, here, after unmapping (the request's own drop then fails it).
        unsafe {
            ManuallyDrop::drop(&mut self.dev);
            ManuallyDrop::drop(&mut self.rq);
        }
    }
}

/// Where the peer finds a registered request: the `{addr, rkey, len}` of the wire format.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MrDesc {
    /// I/O virtual address of the region.
    pub(crate) addr: u64,
    /// The key valid for this registration only.
    pub(crate) rkey: u32,
    /// Length in bytes.
    pub(crate) len: u32,
}

/// Whoever hears the MR slots' own completions: the connection's CM handler
/// (`rdma_cm::CmHandler` extends this).
pub(crate) trait MrOwner: Send + Sync + 'static {
    /// The per-request data of the block requests registered on the MRs.
    type Pdu: Send + Sync + 'static;

    /// A LOCAL_INV or a failed REG_MR of one of the MRs completed. Runs in the CQ's polling
    /// context, like any completion handler.
    fn mr_event(&self, _ev: MrEvent) {}
}

/// Proof that a LOCAL_INV of a slot's registration completed successfully: only the LOCAL_INV
/// completion handler makes one. Hand it to `CmId::local_invalidated`.
pub(crate) struct InvToken {
    tag: u32,
    rkey: u32,
}

impl InvToken {
    /// The slot whose registration was invalidated.
    pub(crate) fn tag(&self) -> u32 {
        self.tag
    }
}

/// What the MR slots' own completions report to the connection's owner, through
/// [`MrOwner::mr_event`]. Runs in the CQ's polling context.
pub(crate) enum MrEvent {
    /// A LOCAL_INV of slot `tag` completed: its registration is dead.
    Invalidated(InvToken),
    /// A LOCAL_INV failed (status); the registration may still be live. Only draining the QP
    /// (resetting the connection) gets the request back now.
    InvalidateFailed { tag: u32, status: u32 },
    /// A REG_MR failed (status); the chained Send flushes too.
    RegFailed { tag: u32, status: u32 },
}

/// Why `CmId::remote_invalidated` gave nothing back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InvError {
    /// The slot holds no registered request.
    NotRegistered,
    /// The completion carried no invalidation.
    NotInvalidated,
    /// The peer invalidated another key than this registration's.
    WrongKey { invalidated: u32, registered: u32 },
    /// A LOCAL_INV of the registration is in progress.
    Invalidating,
}

/// A slot's registration state.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RegState {
    /// No request registered.
    Free,
    /// A request's pages are registered under `rkey`; the peer may access them.
    Live { rkey: u32 },
    /// A LOCAL_INV of `rkey` is posted and not yet completed.
    Invalidating { rkey: u32 },
}

/// The part of a slot its completion handlers read, with the two CQEs a completion's
/// `wr_cqe` points at. Not generic, so the handlers find it by a fixed offset.
#[repr(C)]
struct SlotHead {
    /// Completion of a failed (unsignalled) REG_MR.
    reg_cqe: b::ib_cqe,
    /// Completion of a LOCAL_INV.
    inv_cqe: b::ib_cqe,
    tag: u32,
    /// The key the posted LOCAL_INV invalidates (a LOCAL_INV completion does not say).
    inv_rkey: AtomicU32,
    /// The `H` handler of the id the MR's QP belongs to; valid while the QP exists (the id
    /// drops its handler only after destroying the QP, see `rdma_cm.rs`).
    handler: *const core::ffi::c_void,
}

/// One tag's MR and the request registered on it.
#[repr(C)]
struct MrSlot<H: MrOwner> {
    // First, so that a pointer to the head is a pointer to the slot.
    head: SlotHead,
    mr: FrMr,
    state: RegState,
    /// The request whose pages the MR maps, while [`RegState::Live`] or `Invalidating`.
    data: Option<DmaRq<H::Pdu>>,
}

/// One fast-registration MR per tag of a QP, with the requests registered on them.
pub(crate) struct MrPool<H: MrOwner> {
    // Boxed, so each slot's CQEs keep their address for the QP's life.
    slots: KVec<KBox<MrSlot<H>>>,
}

// SAFETY: The raw CQEs hold function pointers; `handler` points at an `H: Sync` that outlives
// every completion; the MRs and the registered requests are `Send`. Everything but the atomic
// `inv_rkey` changes only through `&mut`.
unsafe impl<H: MrOwner> Send for MrPool<H> {}
// SAFETY: `&MrPool` only reads plain fields; see `Send`.
unsafe impl<H: MrOwner> Sync for MrPool<H> {}

impl<H: MrOwner> MrPool<H> {
    /// `count` MRs of up to `max_pages` pages each, reporting to `handler`.
    pub(super) fn new(pd: &Arc<Pd>, count: u32, max_pages: u32, handler: *const H) -> Result<Self> {
        let mut slots = KVec::with_capacity(count as usize, GFP_KERNEL)?;
        for tag in 0..count {
            let slot = KBox::new(
                MrSlot {
                    head: SlotHead {
                        reg_cqe: b::ib_cqe {
                            done: Some(reg_mr_done::<H>),
                        },
                        inv_cqe: b::ib_cqe {
                            done: Some(local_inv_done::<H>),
                        },
                        tag,
                        inv_rkey: AtomicU32::new(0),
                        handler: handler.cast(),
                    },
                    mr: FrMr::new(pd, max_pages)?,
                    state: RegState::Free,
                    data: None,
                },
                GFP_KERNEL,
            )?;
            slots.push(slot, GFP_KERNEL)?;
        }
        Ok(Self { slots })
    }

    fn slot(&mut self, tag: u32) -> Result<&mut MrSlot<H>> {
        self.slots
            .get_mut(tag as usize)
            .map(|s| &mut **s)
            .ok_or(EINVAL)
    }

    /// A local key that no memory region of the pool's PD carries: the first MR's with its
    /// key byte flipped (the MR index exists, the key cannot match), for fault injection.
    pub(super) fn bad_lkey(&self) -> Result<u32> {
        let mr = self.slots.first().ok_or(EINVAL)?;
        Ok(mr.mr.lkey() ^ 0xff)
    }

    /// Hands every registered request to `each`. Only for a QP that is drained and destroyed.
    pub(super) fn release_all(&mut self, mut each: impl FnMut(Rq<H::Pdu>)) {
        for s in self.slots.iter_mut() {
            s.state = RegState::Free;
            if let Some(d) = s.data.take() {
                each(d.unmap());
            }
        }
    }
}

/// The slot head a completion is for, and its handler.
///
/// # Safety
///
/// `wc` is a valid completion whose `wr_cqe` is the CQE at offset `off` of the [`SlotHead`]
/// of an `MrSlot<H>` of a live QP.
unsafe fn slot_of<'a, H: MrOwner>(wc: *const b::ib_wc, off: usize) -> (&'a SlotHead, &'a H) {
    // SAFETY: Per the contract the CQE lies `off` bytes into a slot head (the CQE was taken
    // with `addr_of_mut!` from a live slot, so stepping back within the same boxed slot stays
    // in its allocation). The boxed slots live as long as their pool. A pool whose QP exists
    // is released only after `CmId::destroy_qp` took it out of the id (`CmId`'s `Drop` runs
    // that too), which it does after `ib_drain_qp` returned, so every work request posted on
    // the QP (REG_MRs and LOCAL_INVs included) has completed and its handler has returned
    // (the drain's own completions follow them on the QP's one CQ), and after
    // `rdma_destroy_qp`, so nothing can be posted any more: no completion pointing into a
    // slot is pending or can be made once the pool may go. The CQ itself is shared
    // (`Arc<Cq>`) and may outlive the pool, holding no completion of this QP by then. The
    // handler outlives the QP (`CmId` drops it after `rdma_destroy_id`).
    unsafe {
        let cqe = (*wc).__bindgen_anon_1.wr_cqe.cast::<u8>();
        let head = &*cqe.sub(off).cast::<SlotHead>();
        (head, &*head.handler.cast::<H>())
    }
}

unsafe extern "C" fn reg_mr_done<H: MrOwner>(_cq: *mut b::ib_cq, wc: *mut b::ib_wc) {
    // SAFETY: Only REG_MRs of a slot carry `reg_cqe`.
    let (head, handler) = unsafe { slot_of::<H>(wc, offset_of!(SlotHead, reg_cqe)) };
    // SAFETY: The IB core passes a valid completion for the duration of the call.
    let wc = unsafe { Wc::from_raw(wc) };
    // Unsignalled REG_MRs complete only when they fail.
    handler.mr_event(MrEvent::RegFailed {
        tag: head.tag,
        status: wc.status(),
    });
}

unsafe extern "C" fn local_inv_done<H: MrOwner>(_cq: *mut b::ib_cq, wc: *mut b::ib_wc) {
    // SAFETY: Only LOCAL_INVs of a slot carry `inv_cqe`.
    let (head, handler) = unsafe { slot_of::<H>(wc, offset_of!(SlotHead, inv_cqe)) };
    // SAFETY: The IB core passes a valid completion for the duration of the call.
    let wc = unsafe { Wc::from_raw(wc) };
    handler.mr_event(if wc.is_ok() {
        MrEvent::Invalidated(InvToken {
            tag: head.tag,
            rkey: head.inv_rkey.load(Ordering::Acquire),
        })
    } else {
        MrEvent::InvalidateFailed {
            tag: head.tag,
            status: wc.status(),
        }
    });
}

impl<H: MrOwner> MrPool<H> {
    /// Registers `data` on `tag`'s MR with a fresh key and posts the REG_MR chained to a
    /// signalled Send of `msg`, which `fill` writes knowing the registration. On success the
    /// request stays in the slot until its key is proven dead (see the module documentation).
    /// On failure the request and the message come back; if the REG_MR was posted and only
    /// the Send refused, the request stays registered until the connection is closed.
    ///
    /// # Safety
    ///
    /// `qp` is a live QP, the one this pool's MRs were allocated for.
    #[allow(clippy::type_complexity)]
    pub(super) unsafe fn post_reg_send<O: MsgOwner>(
        &mut self,
        qp: *mut b::ib_qp,
        tag: u32,
        data: DmaRq<H::Pdu>,
        access: RemoteAccess,
        msg: KBox<Msg<O>>,
        fill: impl FnOnce(&mut [u8], MrDesc),
    ) -> core::result::Result<MrDesc, (Error, Option<DmaRq<H::Pdu>>, KBox<Msg<O>>)> {
        let slot = match self.slot(tag) {
            Ok(s) => s,
            Err(e) => return Err((e, Some(data), msg)),
        };
        post_reg_send_on(qp, slot, data, access, msg, fill)
    }

    /// Posts a signalled `IB_WR_LOCAL_INV` of `tag`'s live registration; its completion
    /// reports through [`MrOwner::mr_event`].
    ///
    /// # Safety
    ///
    /// `qp` is a live QP, the one this pool's MRs were allocated for.
    pub(super) unsafe fn post_local_inv(&mut self, qp: *mut b::ib_qp, tag: u32) -> Result {
        let slot = self.slot(tag)?;
        let RegState::Live { rkey } = slot.state else {
            return Err(EINVAL);
        };
        // SAFETY: All-zero is a valid `ib_send_wr`.
        let mut wr: b::ib_send_wr = unsafe { core::mem::zeroed() };
        slot.head.inv_rkey.store(rkey, Ordering::Release);
        wr.__bindgen_anon_1.wr_cqe = ptr::addr_of_mut!(slot.head.inv_cqe);
        wr.opcode = b::ib_wr_opcode_IB_WR_LOCAL_INV;
        wr.send_flags = b::ib_send_flags_IB_SEND_SIGNALED as i32;
        wr.ex.invalidate_rkey = rkey;
        let mut bad = ptr::null();
        // SAFETY: The QP is live (the caller's contract); the work request is read during the
        // call only; its CQE is in the boxed slot, which outlives the QP.
        let ret = unsafe { b::rdmadisk_ib_post_send(qp, &wr, &mut bad) };
        kernel::error::to_result(ret)?;
        slot.state = RegState::Invalidating { rkey };
        Ok(())
    }

    /// Takes `tag`'s request back after a receive completion `wc` that invalidated its key
    /// remotely (Send-with-Invalidate). Anything else leaves the request where it is.
    pub(super) fn remote_invalidated(
        &mut self,
        tag: u32,
        wc: &Wc,
    ) -> core::result::Result<Rq<H::Pdu>, InvError> {
        let slot = self.slot(tag).map_err(|_| InvError::NotRegistered)?;
        let registered = match slot.state {
            RegState::Live { rkey } => rkey,
            // A LOCAL_INV of this registration is posted: only its completion frees the
            // slot, so that it cannot be registered again while that work request refers to
            // the key.
            RegState::Invalidating { .. } => return Err(InvError::Invalidating),
            RegState::Free => return Err(InvError::NotRegistered),
        };
        let invalidated = match wc.invalidated_rkey() {
            Some(k) if wc.is_ok() => k,
            _ => return Err(InvError::NotInvalidated),
        };
        if invalidated != registered {
            return Err(InvError::WrongKey {
                invalidated,
                registered,
            });
        }
        slot.state = RegState::Free;
        slot.data
            .take()
            .map(DmaRq::unmap)
            .ok_or(InvError::NotRegistered)
    }

    /// Takes the request back whose registration a successful LOCAL_INV ended. `None` if the
    /// token is not for the slot's current registration (the connection was reset meanwhile).
    pub(super) fn local_invalidated(&mut self, token: InvToken) -> Option<Rq<H::Pdu>> {
        let slot = self.slot(token.tag).ok()?;
        if slot.state != (RegState::Invalidating { rkey: token.rkey }) {
            return None;
        }
        slot.state = RegState::Free;
        slot.data.take().map(DmaRq::unmap)
    }
}

fn post_reg_send_on<H: MrOwner, O: MsgOwner>(
    qp: *mut b::ib_qp,
    slot: &mut MrSlot<H>,
    data: DmaRq<H::Pdu>,
    access: RemoteAccess,
    mut msg: KBox<Msg<O>>,
    fill: impl FnOnce(&mut [u8], MrDesc),
) -> core::result::Result<MrDesc, (Error, Option<DmaRq<H::Pdu>>, KBox<Msg<O>>)> {
    if slot.state != RegState::Free {
        return Err((EBUSY, Some(data), msg));
    }
    let mr = slot.mr.as_ptr();
    // SAFETY: The slot is free (`&mut` on it, and no registration): its last registration was
    // ended by a remote invalidation, by a completed LOCAL_INV (a slot with one in progress is
    // `Invalidating`, never `Free`), or never happened, so nothing uses the MR and no posted
    // work request refers to its key; a new key makes a stale rkey of an earlier I/O useless.
    unsafe { b::rdmadisk_ib_update_fast_reg_key(mr, (slot.mr.rkey() as u8).wrapping_add(1)) };
    // SAFETY: `data` holds `mapped` DMA-mapped entries; the MR was allocated for at least as
    // many pages as the queue's limits allow a request (see the caller's QpCaps), and
    // `ib_map_mr_sg` stops (returning fewer) rather than overrun it.
    let n = unsafe {
        b::ib_map_mr_sg(
            mr,
            data.rq.sg_ptr(),
            data.mapped,
            ptr::null_mut(),
            MR_PAGE_SIZE,
        )
    };
    if n != data.mapped {
        return Err((EINVAL, Some(data), msg));
    }
    // SAFETY: `ib_map_mr_sg` set the MR's iova and length; the key was set above.
    let desc = unsafe {
        MrDesc {
            addr: (*mr).iova,
            rkey: (*mr).rkey,
            len: (*mr).length as u32,
        }
    };
    fill(msg.data_mut(), desc);
    let (raw, cqe, sge) = match Msg::into_posted(msg, MsgDir::Send) {
        Ok(v) => v,
        Err(msg) => return Err((EINVAL, Some(data), msg)),
    };
    // SAFETY: All-zero is a valid `ib_send_wr`.
    let mut send: b::ib_send_wr = unsafe { core::mem::zeroed() };
    send.__bindgen_anon_1.wr_cqe = cqe;
    send.sg_list = sge;
    send.num_sge = 1;
    send.opcode = b::ib_wr_opcode_IB_WR_SEND;
    send.send_flags = b::ib_send_flags_IB_SEND_SIGNALED as i32;
    // SAFETY: All-zero is a valid `ib_reg_wr`.
    let mut reg: b::ib_reg_wr = unsafe { core::mem::zeroed() };
    reg.wr.__bindgen_anon_1.wr_cqe = ptr::addr_of_mut!(slot.head.reg_cqe);
    reg.wr.opcode = b::ib_wr_opcode_IB_WR_REG_MR;
    reg.wr.next = &mut send;
    reg.mr = mr;
    reg.key = desc.rkey;
    reg.access = access.bits();
    let mut bad = ptr::null();
    // SAFETY: The QP is live; both work requests and the SGE are valid during the call (the
    // driver copies them); the CQEs stay valid until their completions (the message until its
    // handler takes it back, the slot until the QP is destroyed).
    let ret = unsafe { b::rdmadisk_ib_post_send(qp, &reg.wr, &mut bad) };
    if ret != 0 {
        // SAFETY: The Send (the chain's last request) was refused either way, so the device
        // never got the message.
        let msg = unsafe { Msg::reclaim(raw) };
        if bad == ptr::addr_of!(reg.wr) {
            // Nothing was posted: the MR maps the pages but no key of it went out.
            return Err((Error::from_errno(ret), Some(data), msg));
        }
        // The REG_MR went out: the pages stay registered until the connection is closed.
        slot.state = RegState::Live { rkey: desc.rkey };
        slot.data = Some(data);
        return Err((Error::from_errno(ret), None, msg));
    }
    slot.state = RegState::Live { rkey: desc.rkey };
    slot.data = Some(data);
    Ok(desc)
}
