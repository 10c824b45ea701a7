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
//! Safety rests on two ownership rules:
//! - A [`DmaRq`] owns the block request while its pages are mapped: the mapping cannot outlive
//!   the request, and the request cannot end while mapped.
//! - The MRs belong to the QP ([`MrPool`] lives in the `CmId`'s QP resources), so they are
//!   deregistered only after the QP is drained and destroyed, never under the device.

use core::{
    mem::ManuallyDrop,
    ptr,
    sync::atomic::{AtomicBool, AtomicU32, Ordering},
};
use kernel::{page::PAGE_SIZE, prelude::*, sync::Arc};

use super::bindings as b;
use super::blk_mq::{Driver, Rq};
use super::rdma_cm::{CmHandler, CmId};
use super::verbs::{DeviceRef, FrMr, Msg, MsgDir, MsgOwner, Pd, RemoteAccess};

/// A block request whose data pages are DMA-mapped on an RDMA device.
pub(crate) struct DmaRq<D: Driver> {
    rq: ManuallyDrop<Rq<D>>,
    dev: ManuallyDrop<DeviceRef>,
    /// Entries `map_sg` filled (what unmapping takes).
    nents: i32,
    /// Entries after DMA mapping (an IOMMU may merge some).
    mapped: i32,
    dir: b::dma_data_direction,
}

// SAFETY: The request token and the device reference are `Send`; the rest is plain data.
unsafe impl<D: Driver> Send for DmaRq<D> {}

impl<D: Driver> DmaRq<D> {
    /// Maps `rq`'s data for the access the peer gets: `Read` (the peer reads: a block write)
    /// or `Write` (the peer writes: a block read). On failure the request comes back.
    pub(crate) fn map(
        mut rq: Rq<D>,
        dev: &DeviceRef,
        access: RemoteAccess,
    ) -> core::result::Result<Self, (Rq<D>, Error)> {
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
        // SAFETY: `sg_ptr` holds `nents` entries just filled by `map_sg`, in the request's PDU,
        // which lives as long as the request; the device is registered (we hold a reference).
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

    /// The request (to read its op, tag, PDU).
    pub(crate) fn rq(&self) -> &Rq<D> {
        &self.rq
    }

    fn unmap_sg(&self) {
        // SAFETY: Mapped in `map` with these arguments; the request (and so its sg) is alive,
        // and the device no longer accesses the pages (the caller only unmaps once the MR is
        // invalidated or the QP drained).
        unsafe {
            b::rdmadisk_ib_dma_unmap_sg(self.dev.as_ptr(), self.rq.sg_ptr(), self.nents, self.dir)
        };
    }

    /// Unmaps the data and gives the request back, to complete or requeue it.
    pub(crate) fn unmap(self) -> Rq<D> {
        let mut this = ManuallyDrop::new(self);
        this.unmap_sg();
        // SAFETY: `this` is never dropped; each field is taken exactly once.
        unsafe {
            ManuallyDrop::drop(&mut this.dev);
            ManuallyDrop::take(&mut this.rq)
        }
    }
}

impl<D: Driver> Drop for DmaRq<D> {
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

#[repr(C)]
struct MrSlot {
    // The completion of a failed (unsignalled) REG_MR points here; see `reg_mr_failed`.
    cqe: b::ib_cqe,
    mr: FrMr,
    // Registered (or being registered) and not yet invalidated.
    busy: AtomicBool,
    // The key of the current registration, for readers that do not hold the claim.
    rkey: AtomicU32,
}

/// One fast-registration MR per tag of a QP.
pub(crate) struct MrPool {
    // Boxed, so each slot's CQE keeps its address for the QP's life.
    slots: KVec<KBox<MrSlot>>,
}

// SAFETY: The raw CQE holds only a function pointer; the MRs are `Send + Sync` and the busy
// flags atomic.
unsafe impl Send for MrPool {}
// SAFETY: See `Send`.
unsafe impl Sync for MrPool {}

impl MrPool {
    /// `count` MRs of up to `max_pages` pages each.
    pub(crate) fn new(pd: &Arc<Pd>, count: u32, max_pages: u32) -> Result<Self> {
        let mut slots = KVec::with_capacity(count as usize, GFP_KERNEL)?;
        for _ in 0..count {
            let slot = KBox::new(
                MrSlot {
                    cqe: b::ib_cqe {
                        done: Some(reg_mr_failed),
                    },
                    mr: FrMr::new(pd, max_pages)?,
                    busy: AtomicBool::new(false),
                    rkey: AtomicU32::new(0),
                },
                GFP_KERNEL,
            )?;
            slots.push(slot, GFP_KERNEL)?;
        }
        Ok(Self { slots })
    }

    fn slot(&self, tag: u32) -> Result<&MrSlot> {
        self.slots.get(tag as usize).map(|s| &**s).ok_or(EINVAL)
    }
}

unsafe extern "C" fn reg_mr_failed(_cq: *mut b::ib_cq, wc: *mut b::ib_wc) {
    // Unsignalled REG_MRs only complete when they fail; the QP is then in the error state and
    // the chained Send flushes, which is where the owner learns of it.
    // SAFETY: The IB core passes a valid completion.
    let status = unsafe { (*wc).status };
    // A flushed one only says the QP is already in the error state.
    if status != b::ib_wc_status_IB_WC_WR_FLUSH_ERR {
        pr_err!("REG_MR failed (status {status}); the queue's connection will be reset\n");
    }
}

impl<H: CmHandler> CmId<H> {
    fn pool(&self) -> Result<&MrPool> {
        self.qp_res()?.mrs.as_ref().ok_or(EINVAL)
    }

    /// Registers `data` on `tag`'s MR with a fresh key and posts the REG_MR chained to a
    /// signalled Send of `msg`, which `fill` writes knowing the registration. On failure the
    /// message comes back; if the REG_MR was posted and only the Send refused, the MR stays
    /// busy until the connection is torn down.
    pub(crate) fn post_reg_send<D: Driver, O: MsgOwner>(
        &self,
        tag: u32,
        data: &DmaRq<D>,
        access: RemoteAccess,
        mut msg: KBox<Msg<O>>,
        fill: impl FnOnce(&mut [u8], MrDesc),
    ) -> core::result::Result<MrDesc, (Error, KBox<Msg<O>>)> {
        let (qp, slot) = match self
            .qp_ptr()
            .and_then(|qp| Ok((qp, self.pool()?.slot(tag)?)))
        {
            Ok(v) => v,
            Err(e) => return Err((e, msg)),
        };
        if slot.busy.swap(true, Ordering::AcqRel) {
            return Err((EBUSY, msg));
        }
        let mr = slot.mr.as_ptr();
        // SAFETY: The MR is not busy (we just claimed it), so no registration uses it and only
        // the claimant touches its key; a new key makes a stale rkey of an earlier I/O useless.
        unsafe { b::rdmadisk_ib_update_fast_reg_key(mr, (slot.mr.rkey() as u8).wrapping_add(1)) };
        // SAFETY: `data` holds `mapped` DMA-mapped entries; the MR has room for the pool's
        // page count, and `ib_map_mr_sg` stops (returning fewer) rather than overrun it.
        let n = unsafe {
            b::ib_map_mr_sg(
                mr,
                data.rq().sg_ptr(),
                data.mapped,
                ptr::null_mut(),
                PAGE_SIZE as u32,
            )
        };
        if n != data.mapped {
            slot.busy.store(false, Ordering::Release);
            return Err((EINVAL, msg));
        }
        // SAFETY: `ib_map_mr_sg` set the MR's iova and length.
        let desc = unsafe {
            MrDesc {
                addr: (*mr).iova,
                rkey: (*mr).rkey,
                len: (*mr).length as u32,
            }
        };
        slot.rkey.store(desc.rkey, Ordering::Release);
        fill(msg.data_mut(), desc);
        let (raw, cqe, sge) = match Msg::into_posted(msg, MsgDir::Send) {
            Ok(v) => v,
            Err(msg) => {
                slot.busy.store(false, Ordering::Release);
                return Err((EINVAL, msg));
            }
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
        reg.wr.__bindgen_anon_1.wr_cqe = ptr::addr_of!(slot.cqe).cast_mut();
        reg.wr.opcode = b::ib_wr_opcode_IB_WR_REG_MR;
        reg.wr.next = &mut send;
        reg.mr = mr;
        reg.key = desc.rkey;
        reg.access = access.bits();
        let mut bad = ptr::null();
        // SAFETY: The QP is live; both work requests and the SGE are valid during the call
        // (the driver copies them); the CQEs stay valid until their completions (the message
        // until its handler takes it back, the slot until the QP is destroyed).
        let ret = unsafe { b::rdmadisk_ib_post_send(qp, &reg.wr, &mut bad) };
        if ret != 0 {
            if bad == ptr::addr_of!(reg.wr) {
                slot.busy.store(false, Ordering::Release);
            }
            // SAFETY: The Send (the chain's last request) was refused either way, so the
            // device never got the message.
            return Err((Error::from_errno(ret), unsafe { Msg::reclaim(raw) }));
        }
        Ok(desc)
    }

    /// Posts a signalled `IB_WR_LOCAL_INV` of `tag`'s MR, completing through `msg`'s handler
    /// (the message's buffer is not sent).
    pub(crate) fn post_local_inv<O: MsgOwner>(
        &self,
        tag: u32,
        msg: KBox<Msg<O>>,
    ) -> core::result::Result<(), (Error, KBox<Msg<O>>)> {
        let (qp, rkey) = match self
            .qp_ptr()
            .and_then(|qp| Ok((qp, self.pool()?.slot(tag)?.rkey.load(Ordering::Acquire))))
        {
            Ok(v) => v,
            Err(e) => return Err((e, msg)),
        };
        let (raw, cqe, _sge) = match Msg::into_posted(msg, MsgDir::Send) {
            Ok(v) => v,
            Err(msg) => return Err((EINVAL, msg)),
        };
        // SAFETY: All-zero is a valid `ib_send_wr`.
        let mut wr: b::ib_send_wr = unsafe { core::mem::zeroed() };
        wr.__bindgen_anon_1.wr_cqe = cqe;
        wr.opcode = b::ib_wr_opcode_IB_WR_LOCAL_INV;
        wr.send_flags = b::ib_send_flags_IB_SEND_SIGNALED as i32;
        wr.ex.invalidate_rkey = rkey;
        let mut bad = ptr::null();
        // SAFETY: As in `post_reg_send`; the request carries no SGE.
        let ret = unsafe { b::rdmadisk_ib_post_send(qp, &wr, &mut bad) };
        if ret != 0 {
            // SAFETY: The only work request was refused.
            return Err((Error::from_errno(ret), unsafe { Msg::reclaim(raw) }));
        }
        Ok(())
    }

    /// Marks `tag`'s MR free again once the peer's invalidation of `rkey` (or our LOCAL_INV)
    /// completed. `false` if `rkey` is not the key of its current registration.
    pub(crate) fn mr_invalidated(&self, tag: u32, rkey: u32) -> bool {
        match self.pool().and_then(|p| p.slot(tag)) {
            Ok(slot) if slot.rkey.load(Ordering::Acquire) == rkey => {
                slot.busy.store(false, Ordering::Release);
                true
            }
            _ => false,
        }
    }
}
