// SPDX-License-Identifier: GPL-2.0

//! rdma_cm: the active side of an RC connection (resolve, create the QP, connect with private
//! data, disconnect), with events delivered to a Rust handler.
//!
//! The CM calls the handler from its own work items, in process context, serialised per id.
//! The handler only sees a [`CmEvent`] (private data copied out, since the CM's buffer is gone
//! when the handler returns) and never the id, so it cannot destroy the id from inside the
//! callback, which the CM forbids. The owner acts on events from its own context.
//!
//! Teardown follows drivers/nvme/host/rdma.c: disconnect, drain the QP (every posted buffer
//! comes back through its completion), destroy the QP, free the CQ, destroy the id. Dropping a
//! [`CmId`] does the last four; [`CmId::disconnect`] is the owner's call, since it is also how
//! a live connection is closed while the QP is kept for draining.

use core::{
    net::IpAddr,
    ptr::{self, NonNull},
};
use kernel::{ffi, prelude::*, sync::Arc};

use super::bindings as b;
use super::blk_mq::Rq;
use super::frwr::{DmaRq, InvError, InvToken, MrDesc, MrOwner, MrPool};
use super::inet::{self, SockAddr};
use super::verbs::{Cq, DeviceRef, Msg, MsgDir, MsgOwner, Pd, RemoteAccess, Wc};

/// Largest private data rdma_cm carries (an IB CM REP: 196 bytes; a REQ carries 56).
pub(crate) const PRIVATE_DATA_MAX: usize = 196;

/// Private data copied out of a CM event.
#[derive(Clone, Copy)]
pub(crate) struct PrivateData {
    bytes: [u8; PRIVATE_DATA_MAX],
    len: u8,
}

impl PrivateData {
    /// # Safety
    ///
    /// `p` must be null or valid for reads of `len` bytes.
    unsafe fn copy(p: *const ffi::c_void, len: u8) -> Self {
        let mut out = Self {
            bytes: [0; PRIVATE_DATA_MAX],
            len: 0,
        };
        if !p.is_null() {
            let n = usize::from(len).min(PRIVATE_DATA_MAX);
            // SAFETY: The caller guarantees `len` readable bytes; we copy at most that many.
            let src = unsafe { core::slice::from_raw_parts(p.cast::<u8>(), n) };
            out.bytes[..n].copy_from_slice(src);
            out.len = n as u8;
        }
        out
    }

    /// The bytes the peer sent (possibly padded by the transport).
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// The IB CM's reject reason when no listener matches the request's service ID (the port):
/// `IB_CM_REJ_INVALID_SERVICE_ID` of `include/rdma/ib_cm.h`.
pub(crate) const REJ_NO_LISTENER: i32 = 8;

/// An rdma_cm event, as the handler sees it.
#[derive(Clone, Copy)]
pub(crate) enum CmEvent {
    /// `resolve_addr` finished: the id is bound to a local RDMA device.
    AddrResolved,
    /// `resolve_addr` failed, with this errno (negative).
    AddrError(i32),
    /// `resolve_route` finished.
    RouteResolved,
    /// `resolve_route` failed, with this errno (negative).
    RouteError(i32),
    /// The connection is up; the peer's accept private data.
    Established(PrivateData),
    /// The peer (or the CM on its behalf) refused. `status` is the IB CM reject reason;
    /// `consumer_data` is the peer application's reject private data, when it sent any.
    Rejected {
        /// IB CM reject reason (28 is "consumer defined", [`REJ_NO_LISTENER`]: no listener).
        status: i32,
        /// The private data the peer's application rejected with.
        consumer_data: Option<PrivateData>,
    },
    /// The peer did not answer the CM (negative errno, usually `-ETIMEDOUT`).
    Unreachable(i32),
    /// The connection could not be set up locally (negative errno).
    ConnectError(i32),
    /// The connection is gone (peer disconnect, or ours completing).
    Disconnected,
    /// The RDMA device is being removed; the owner must drop the [`CmId`] promptly, since the
    /// removal waits for it.
    DeviceRemoval,
    /// The QP left timewait; its number may be reused.
    TimewaitExit,
    /// The local address moved to another device; the connection should be rebuilt.
    AddrChange,
    /// Any other event (number, status), for the log.
    Other(u32, i32),
}

impl CmEvent {
    /// The event's name, for logs.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            CmEvent::AddrResolved => "ADDR_RESOLVED",
            CmEvent::AddrError(_) => "ADDR_ERROR",
            CmEvent::RouteResolved => "ROUTE_RESOLVED",
            CmEvent::RouteError(_) => "ROUTE_ERROR",
            CmEvent::Established(_) => "ESTABLISHED",
            CmEvent::Rejected { .. } => "REJECTED",
            CmEvent::Unreachable(_) => "UNREACHABLE",
            CmEvent::ConnectError(_) => "CONNECT_ERROR",
            CmEvent::Disconnected => "DISCONNECTED",
            CmEvent::DeviceRemoval => "DEVICE_REMOVAL",
            CmEvent::TimewaitExit => "TIMEWAIT_EXIT",
            CmEvent::AddrChange => "ADDR_CHANGE",
            CmEvent::Other(..) => "other",
        }
    }
}

/// Receives the events of one [`CmId`], and (as an [`MrOwner`]) the completions of its MRs'
/// own work requests.
pub(crate) trait CmHandler: MrOwner {
    /// Called in process context, one event at a time per id. May sleep briefly (take a
    /// mutex, allocate), but must not wait for the owner's actions on this id (destroying or
    /// connecting it), which wait for the handler.
    fn event(&self, ev: CmEvent);
}

/// Sizes of a QP.
#[derive(Clone, Copy)]
pub(crate) struct QpCaps {
    /// Send queue depth (Sends plus, later, REG_MR and LOCAL_INV).
    pub(crate) send_wr: u32,
    /// Receive queue depth.
    pub(crate) recv_wr: u32,
    /// Fast-registration MRs to allocate with the QP, one per tag (0 for none).
    pub(crate) mrs: u32,
    /// Pages each MR maps.
    pub(crate) mr_pages: u32,
}

/// Parameters of [`CmId::connect`].
#[derive(Clone, Copy)]
pub(crate) struct ConnParams {
    /// RDMA Reads the peer may have outstanding against us.
    pub(crate) responder_resources: u8,
    /// RDMA Reads we may have outstanding against the peer.
    pub(crate) initiator_depth: u8,
    /// Transport retries (0..=7).
    pub(crate) retry_count: u8,
    /// RNR retries; 0 so that a credit bug is an error, not a silent stall.
    pub(crate) rnr_retry_count: u8,
}

pub(super) struct QpRes<H: CmHandler> {
    qp: NonNull<b::ib_qp>,
    // Deregistered after the QP is destroyed (see `Drop`), so never under a registration.
    pub(super) mrs: Option<MrPool<H>>,
    // Dropped after the QP is destroyed (see `Drop`).
    cq: Arc<Cq>,
    _pd: Arc<Pd>,
}

/// An rdma_cm id on the active side, RC, in the initial network namespace (where rxe and
/// hardware RoCE devices live), with its QP once created.
pub(crate) struct CmId<H: CmHandler> {
    id: NonNull<b::rdma_cm_id>,
    qp: Option<QpRes<H>>,
    // The id's context points here, and so do the MR slots'; kept alive until the id (and so
    // its QP) is destroyed.
    _handler: Arc<H>,
}

// SAFETY: rdma_cm and the verbs it hands out lock internally; `&mut self` guards QP creation
// and `Drop`.
unsafe impl<H: CmHandler> Send for CmId<H> {}
// SAFETY: The `&self` methods call rdma_cm/verbs entry points that are safe to call
// concurrently (each takes the id's or the QP's locks).
unsafe impl<H: CmHandler> Sync for CmId<H> {}

impl<H: CmHandler> CmId<H> {
    /// Creates the id; `handler` receives its events until it is dropped.
    pub(crate) fn new(handler: Arc<H>) -> Result<Self> {
        let ctx = ptr::from_ref::<H>(&handler)
            .cast_mut()
            .cast::<ffi::c_void>();
        // SAFETY: `init_net` lives forever; `cm_handler::<H>` interprets `ctx` as `*const H`,
        // which it is, and `handler` outlives the id (`Drop` destroys the id first). The
        // caller name is static.
        let raw = unsafe {
            b::__rdma_create_kernel_id(
                ptr::addr_of_mut!(b::init_net),
                Some(cm_handler::<H>),
                ctx,
                b::rdma_ucm_port_space_RDMA_PS_TCP,
                b::ib_qp_type_IB_QPT_RC,
                kernel::c_str!("rdmadisk").as_char_ptr(),
            )
        };
        let id = NonNull::new(kernel::error::from_err_ptr(raw)?).ok_or(ENOMEM)?;
        Ok(Self {
            id,
            qp: None,
            _handler: handler,
        })
    }

    /// Binds the id to local port `port` of any local address of `to`'s family (the family
    /// of the address [`CmId::resolve_addr`] will resolve: rdma_cm refuses another), before
    /// that call, which then keeps the port. Fails with `EADDRINUSE` or `EADDRNOTAVAIL` when
    /// another id has the port; a port below 1024 needs `CAP_NET_BIND_SERVICE` (the kernel's
    /// own threads and root have it).
    pub(crate) fn bind_port(&self, port: u16, to: IpAddr) -> Result {
        let mut src = SockAddr::any(to, port);
        // SAFETY: `id` is live; the CM copies `src` (a valid socket address of its family)
        // before returning.
        kernel::error::to_result(unsafe { b::rdma_bind_addr(self.id.as_ptr(), src.as_mut_ptr()) })
    }

    /// The local and the remote address and port of the connection, from the addresses
    /// rdma_cm resolved it with (`route.addr`), whatever the link layer: a GID is the IP
    /// address only on RoCE. The local port is the one bound, or the one rdma_cm picked while
    /// resolving. `None` before [`CmEvent::AddrResolved`], or for an id that is neither IPv4
    /// nor IPv6 (an IB address).
    pub(crate) fn addresses(&self) -> Option<((IpAddr, u16), (IpAddr, u16))> {
        // SAFETY: `id` is live. rdma_cm writes `route.addr` while it resolves the address and
        // the route, which are done before a connection is asked for, and not after; each
        // `sockaddr_storage` is copied as it is, any bytes being a valid one.
        let (src, dst) = unsafe {
            let a = ptr::addr_of!((*self.id.as_ptr()).route.addr);
            (
                ptr::read(ptr::addr_of!((*a).src_addr)),
                ptr::read(ptr::addr_of!((*a).dst_addr)),
            )
        };
        Some((inet::decode(&src)?, inet::decode(&dst)?))
    }

    /// Starts resolving `addr:port` (IPv4 or IPv6) to a local RDMA device and a destination;
    /// [`CmEvent::AddrResolved`] or [`CmEvent::AddrError`] follows within about `timeout_ms`.
    pub(crate) fn resolve_addr(&self, addr: IpAddr, port: u16, timeout_ms: u32) -> Result {
        let mut dst = SockAddr::new(addr, port);
        // SAFETY: `id` is live; the CM copies `dst` (a valid socket address of its family)
        // before returning; a null source lets it pick the local address from the route
        // (keeping a port `bind_port` chose).
        let ret = unsafe {
            b::rdma_resolve_addr(
                self.id.as_ptr(),
                ptr::null_mut(),
                dst.as_mut_ptr(),
                timeout_ms as ffi::c_ulong,
            )
        };
        kernel::error::to_result(ret)
    }

    /// Starts resolving the route; [`CmEvent::RouteResolved`] or [`CmEvent::RouteError`]
    /// follows. Only after [`CmEvent::AddrResolved`].
    pub(crate) fn resolve_route(&self, timeout_ms: u32) -> Result {
        // SAFETY: `id` is live.
        kernel::error::to_result(unsafe {
            b::rdma_resolve_route(self.id.as_ptr(), timeout_ms as ffi::c_ulong)
        })
    }

    /// The RDMA device the id is bound to; `ENODEV` before [`CmEvent::AddrResolved`].
    pub(crate) fn device(&self) -> Result<DeviceRef> {
        // SAFETY: `id` is live. The CM sets `device` once, during address resolution, and the
        // owner calls this after that event was delivered, which orders the write before this
        // read. The device stays valid while the id is bound to it.
        unsafe {
            let dev = ptr::read_volatile(ptr::addr_of!((*self.id.as_ptr()).device));
            DeviceRef::try_get(dev)
        }
    }

    /// Creates the RC QP on the id: both queues on `cq`, in `pd`, signalled per work request.
    /// Only after [`CmEvent::RouteResolved`] (or [`CmEvent::AddrResolved`]), once.
    pub(crate) fn create_qp(&mut self, pd: &Arc<Pd>, cq: &Arc<Cq>, caps: QpCaps) -> Result {
        if self.qp.is_some() {
            return Err(EBUSY);
        }
        // SAFETY: All-zero is a valid `ib_qp_init_attr` (no event handler, no SRQ/XRC).
        let mut attr: b::ib_qp_init_attr = unsafe { core::mem::zeroed() };
        attr.send_cq = cq.as_ptr();
        attr.recv_cq = cq.as_ptr();
        attr.cap.max_send_wr = caps.send_wr;
        attr.cap.max_recv_wr = caps.recv_wr;
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_sge = 1;
        attr.sq_sig_type = b::ib_sig_type_IB_SIGNAL_REQ_WR;
        attr.event_handler = Some(qp_event);
        attr.qp_type = b::ib_qp_type_IB_QPT_RC;
        let handler: *const H = &*self._handler;
        let mrs = match caps.mrs {
            0 => None,
            n => Some(MrPool::new(pd, n, caps.mr_pages, handler)?),
        };
        // SAFETY: `id` is live, and bound to a device by address resolution (the owner calls
        // this after `AddrResolved`, as documented); `pd` and `cq` are live objects of that
        // device, which we hold references on for the QP's life (`QpRes`); the CM checks that
        // they belong to the id's device and fails with EINVAL otherwise. `attr` is read during
        // the call only.
        let ret = unsafe { b::rdma_create_qp(self.id.as_ptr(), pd.as_ptr(), &mut attr) };
        kernel::error::to_result(ret)?;
        // SAFETY: `rdma_create_qp` succeeded, so `id->qp` is set and stays until
        // `rdma_destroy_qp`.
        let qp = unsafe { (*self.id.as_ptr()).qp };
        self.qp = Some(QpRes {
            qp: NonNull::new(qp).ok_or(EINVAL)?,
            mrs,
            cq: cq.clone(),
            _pd: pd.clone(),
        });
        Ok(())
    }

    /// Sets the QP's local ACK timeout to 4.096 us * 2^`exp` (before [`CmId::connect`]).
    pub(crate) fn set_ack_timeout(&self, exp: u8) -> Result {
        // SAFETY: `id` is live; the value is plain data.
        kernel::error::to_result(unsafe { b::rdma_set_ack_timeout(self.id.as_ptr(), exp) })
    }

    /// Sends a connect request carrying `private_data` (at most 56 bytes on IB/RoCE);
    /// [`CmEvent::Established`], [`CmEvent::Rejected`], [`CmEvent::Unreachable`] or
    /// [`CmEvent::ConnectError`] follows. Needs the QP.
    pub(crate) fn connect(&self, private_data: &[u8], p: ConnParams) -> Result {
        if self.qp.is_none() {
            return Err(EINVAL);
        }
        let len = u8::try_from(private_data.len()).map_err(|_| EINVAL)?;
        // SAFETY: All-zero is a valid `rdma_conn_param`.
        let mut param: b::rdma_conn_param = unsafe { core::mem::zeroed() };
        param.private_data = private_data.as_ptr().cast();
        param.private_data_len = len;
        param.responder_resources = p.responder_resources;
        param.initiator_depth = p.initiator_depth;
        param.flow_control = 1;
        param.retry_count = p.retry_count.min(7);
        param.rnr_retry_count = p.rnr_retry_count.min(7);
        // SAFETY: `id` is live with a QP; the CM copies the private data into the request
        // before returning.
        kernel::error::to_result(unsafe { b::rdma_connect(self.id.as_ptr(), &mut param) })
    }

    /// Starts closing the connection (and moves the QP to the error state, flushing posted
    /// work); [`CmEvent::Disconnected`] follows. Harmless when not connected.
    pub(crate) fn disconnect(&self) {
        // SAFETY: `id` is live. An id that never connected returns an error, which means
        // there was nothing to close.
        let _ = unsafe { b::rdma_disconnect(self.id.as_ptr()) };
    }

    pub(super) fn qp_res(&self) -> Result<&QpRes<H>> {
        self.qp.as_ref().ok_or(EINVAL)
    }

    fn pool(&mut self) -> Result<&mut MrPool<H>> {
        self.qp.as_mut().and_then(|r| r.mrs.as_mut()).ok_or(EINVAL)
    }

    /// Registers `data` on `tag`'s MR with a fresh key and posts the REG_MR chained to a
    /// signalled Send of `msg`, which `fill` writes knowing the registration. On success the
    /// request stays in the MR's slot until its key is proven dead (`rust/frwr.rs`). On
    /// failure the request and the message come back; if the REG_MR was posted and only the
    /// Send refused, the request stays registered until the connection is closed.
    #[allow(clippy::type_complexity)]
    pub(crate) fn post_reg_send<O: MsgOwner>(
        &mut self,
        tag: u32,
        data: DmaRq<H::Pdu>,
        access: RemoteAccess,
        msg: KBox<Msg<O>>,
        fill: impl FnOnce(&mut [u8], MrDesc),
    ) -> core::result::Result<MrDesc, (Error, Option<DmaRq<H::Pdu>>, KBox<Msg<O>>)> {
        let qp = match self.qp_ptr() {
            Ok(qp) => qp,
            Err(e) => return Err((e, Some(data), msg)),
        };
        let pool = match self.pool() {
            Ok(p) => p,
            Err(e) => return Err((e, Some(data), msg)),
        };
        // SAFETY: `qp` is this id's live QP, the one the pool's MRs were allocated for.
        unsafe { pool.post_reg_send(qp, tag, data, access, msg, fill) }
    }

    /// Posts a signalled `IB_WR_LOCAL_INV` of `tag`'s live registration; its completion
    /// reports through [`MrOwner::mr_event`].
    pub(crate) fn post_local_inv(&mut self, tag: u32) -> Result {
        let qp = self.qp_ptr()?;
        // SAFETY: `qp` is this id's live QP, the one the pool's MRs were allocated for.
        unsafe { self.pool()?.post_local_inv(qp, tag) }
    }

    /// Takes `tag`'s request back after a receive completion `wc` that invalidated its key
    /// remotely (Send-with-Invalidate); anything else leaves the request where it is.
    pub(crate) fn remote_invalidated(
        &mut self,
        tag: u32,
        wc: &Wc,
    ) -> core::result::Result<Rq<H::Pdu>, InvError> {
        self.pool()
            .map_err(|_| InvError::NotRegistered)?
            .remote_invalidated(tag, wc)
    }

    /// Takes the request back whose registration a successful LOCAL_INV ended (`token`).
    pub(crate) fn local_invalidated(&mut self, token: InvToken) -> Option<Rq<H::Pdu>> {
        self.pool().ok()?.local_invalidated(token)
    }

    /// Makes the QP fail as a broken work request would, for fault injection: posts a Send
    /// whose buffer has a key no memory region of ours carries, which the device refuses with
    /// a local protection error, moving the QP to the error state (every posted work request
    /// then flushes). Posting does not sleep, so this may be called under a spinlock, unlike
    /// `ib_modify_qp`, which may sleep in some drivers.
    pub(crate) fn inject_error(&self) -> Result {
        let qp = self.qp_ptr()?;
        let lkey = self.qp_res()?.mrs.as_ref().ok_or(EINVAL)?.bad_lkey()?;
        let mut sge = b::ib_sge {
            addr: 0,
            length: 1,
            lkey,
        };
        // SAFETY: All-zero is a valid `ib_send_wr`.
        let mut wr: b::ib_send_wr = unsafe { core::mem::zeroed() };
        wr.__bindgen_anon_1.wr_cqe = ptr::addr_of!(FAULT_CQE.0).cast_mut();
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = b::ib_wr_opcode_IB_WR_SEND;
        wr.send_flags = b::ib_send_flags_IB_SEND_SIGNALED as i32;
        let mut bad = ptr::null();
        // SAFETY: The QP is live; the work request and its SGE are read during the call only
        // (the device copies them, and never reads address 0 through an invalid key); the CQE
        // is static, and its handler only reads the completion.
        kernel::error::to_result(unsafe { b::rdmadisk_ib_post_send(qp, &wr, &mut bad) })
    }

    /// Closes the connection: disconnects, moves the QP to the error state and drains it
    /// (every posted work request has completed and its handler has run), destroys it, and
    /// then hands every request still registered on its MRs to `each`: no rkey can reach
    /// their pages any more. May sleep.
    pub(crate) fn close(mut self, each: impl FnMut(Rq<H::Pdu>)) {
        self.disconnect();
        if let Some(mut mrs) = self.destroy_qp() {
            mrs.release_all(each);
        }
        // `Drop` destroys the id.
    }

    /// Drains and destroys the QP, if there is one, and returns its MRs (registered requests
    /// included), to release after.
    fn destroy_qp(&mut self) -> Option<MrPool<H>> {
        let res = self.qp.take()?;
        // A direct CQ's user may be reaping it: from now on only the drain does.
        res.cq.stop_direct();
        // SAFETY: The QP is live. Draining moves it to the error state and waits until every
        // posted work request has completed (flushed) and its handler has run, so every `Msg`
        // has been handed back and no completion will touch an MR slot again. It polls a
        // direct CQ itself, which nobody else reaps any more (`stop_direct`).
        unsafe { b::ib_drain_qp(res.qp.as_ptr()) };
        // SAFETY: Nothing is posted any more; destroying the QP detaches it from the id. With
        // the only QP of the PD gone, no remote access through any of its MRs can happen.
        unsafe { b::rdma_destroy_qp(self.id.as_ptr()) };
        let QpRes { mrs, cq, .. } = res;
        drop(cq);
        mrs
    }

    pub(super) fn qp_ptr(&self) -> Result<*mut b::ib_qp> {
        Ok(self.qp_res()?.qp.as_ptr())
    }

    /// Posts `msg` as a Receive.
    pub(crate) fn post_recv<O: MsgOwner>(&self, msg: KBox<Msg<O>>) -> Result {
        let qp = self.qp.as_ref().ok_or(EINVAL)?.qp;
        let (raw, cqe, sge) = Msg::into_posted(msg, MsgDir::Recv).map_err(|_| EINVAL)?;
        let wr = b::ib_recv_wr {
            next: ptr::null_mut(),
            __bindgen_anon_1: b::ib_recv_wr__bindgen_ty_1 { wr_cqe: cqe },
            sg_list: sge,
            num_sge: 1,
        };
        let mut bad = ptr::null();
        // SAFETY: `qp` is live (owned by the id); `wr` and the SGE it points to are valid
        // during the call (the driver copies them); the CQE stays valid until the completion
        // hands the box back.
        let ret = unsafe { b::rdmadisk_ib_post_recv(qp.as_ptr(), &wr, &mut bad) };
        if ret != 0 {
            // SAFETY: The only work request was refused, so the device never got the buffer.
            drop(unsafe { Msg::reclaim(raw) });
            return Err(Error::from_errno(ret));
        }
        Ok(())
    }

    /// Posts `msg` with a signalled Send; on failure the message comes back.
    pub(crate) fn post_send<O: MsgOwner>(
        &self,
        msg: KBox<Msg<O>>,
    ) -> core::result::Result<(), (Error, KBox<Msg<O>>)> {
        let qp = match self.qp_ptr() {
            Ok(qp) => qp,
            Err(e) => return Err((e, msg)),
        };
        let (raw, cqe, sge) = Msg::into_posted(msg, MsgDir::Send).map_err(|m| (EINVAL, m))?;
        // SAFETY: All-zero is a valid `ib_send_wr`; the fields that matter are set below.
        let mut wr: b::ib_send_wr = unsafe { core::mem::zeroed() };
        wr.__bindgen_anon_1.wr_cqe = cqe;
        wr.sg_list = sge;
        wr.num_sge = 1;
        wr.opcode = b::ib_wr_opcode_IB_WR_SEND;
        wr.send_flags = b::ib_send_flags_IB_SEND_SIGNALED as i32;
        let mut bad = ptr::null();
        // SAFETY: As in `post_recv`.
        let ret = unsafe { b::rdmadisk_ib_post_send(qp, &wr, &mut bad) };
        if ret != 0 {
            // SAFETY: The only work request was refused, so the device never got the buffer.
            return Err((Error::from_errno(ret), unsafe { Msg::reclaim(raw) }));
        }
        Ok(())
    }
}

impl<H: CmHandler> Drop for CmId<H> {
    fn drop(&mut self) {
        // Requests still registered here fail (their tokens end them with an error and a
        // warning): the owner should have closed the id with `close` to get them back.
        drop(self.destroy_qp());
        // SAFETY: The id is ours. `rdma_destroy_id` waits for a running handler and
        // delivers no events afterwards, so `_handler` may go after it.
        unsafe { b::rdma_destroy_id(self.id.as_ptr()) };
    }
}

/// The CQE of an injected broken work request (`CmId::inject_error`): `repr(transparent)`
/// so it can be a `static`; the IB core only reads its `done` pointer.
#[repr(transparent)]
struct StaticCqe(b::ib_cqe);

// SAFETY: Never written; its only field is a function pointer.
unsafe impl Sync for StaticCqe {}

static FAULT_CQE: StaticCqe = StaticCqe(b::ib_cqe {
    done: Some(fault_done),
});

/// The injected work request failed, as it was meant to: the QP is in the error state, and
/// the owner learns of it from its own work requests, which all flush now.
unsafe extern "C" fn fault_done(_cq: *mut b::ib_cq, _wc: *mut b::ib_wc) {}

/// Logs a QP's asynchronous events (a fatal error, a path migration). The owner learns of a
/// fatal error from the completions, which all flush once the QP is in the error state; this
/// line says why. May run in atomic context, so it only logs.
unsafe extern "C" fn qp_event(ev: *mut b::ib_event, _ctx: *mut ffi::c_void) {
    // SAFETY: The IB core passes a valid event for the duration of the call.
    let (kind, dev) = unsafe { ((*ev).event, (*ev).device) };
    // SAFETY: The device of a live QP's event is valid during the call, and so its name.
    let name = unsafe { kernel::str::CStr::from_char_ptr(b::rdmadisk_ib_device_name(dev)) };
    pr_warn!("{name}: QP event {kind}\n");
}

unsafe extern "C" fn cm_handler<H: CmHandler>(
    id: *mut b::rdma_cm_id,
    ev: *mut b::rdma_cm_event,
) -> ffi::c_int {
    // SAFETY: The CM passes a live id and event for the duration of the call. Our ids carry a
    // `*const H` context that outlives them (see `CmId::new`); a child id of a listener would
    // inherit it, but we never listen.
    let (handler, event, status) =
        unsafe { (&*(*id).context.cast::<H>(), (*ev).event, (*ev).status) };
    let conn_pd = || {
        // SAFETY: For ESTABLISHED the `conn` member is the valid one; its private data (when
        // present) is readable for its length during the callback.
        unsafe {
            let c = &(*ev).param.conn;
            PrivateData::copy(c.private_data, c.private_data_len)
        }
    };
    let e = match event {
        b::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_RESOLVED => CmEvent::AddrResolved,
        b::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_ERROR => CmEvent::AddrError(status),
        b::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_RESOLVED => CmEvent::RouteResolved,
        b::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_ERROR => CmEvent::RouteError(status),
        b::rdma_cm_event_type_RDMA_CM_EVENT_ESTABLISHED => CmEvent::Established(conn_pd()),
        b::rdma_cm_event_type_RDMA_CM_EVENT_REJECTED => {
            let mut len = 0u8;
            // SAFETY: A REJECTED event for this id; the returned data (if any) is readable
            // for `len` bytes during the callback.
            let consumer = unsafe {
                let p = b::rdma_consumer_reject_data(id, ev, &mut len);
                (!p.is_null()).then(|| PrivateData::copy(p, len))
            };
            CmEvent::Rejected {
                status,
                consumer_data: consumer,
            }
        }
        b::rdma_cm_event_type_RDMA_CM_EVENT_UNREACHABLE => CmEvent::Unreachable(status),
        b::rdma_cm_event_type_RDMA_CM_EVENT_CONNECT_ERROR => CmEvent::ConnectError(status),
        b::rdma_cm_event_type_RDMA_CM_EVENT_DISCONNECTED => CmEvent::Disconnected,
        b::rdma_cm_event_type_RDMA_CM_EVENT_DEVICE_REMOVAL => CmEvent::DeviceRemoval,
        b::rdma_cm_event_type_RDMA_CM_EVENT_TIMEWAIT_EXIT => CmEvent::TimewaitExit,
        b::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_CHANGE => CmEvent::AddrChange,
        // A connect request would be a child id we never asked for: a non-zero return makes
        // the CM destroy it.
        b::rdma_cm_event_type_RDMA_CM_EVENT_CONNECT_REQUEST => return -1,
        other => CmEvent::Other(other, status),
    };
    handler.event(e);
    0
}
