//! A small wrapper over RDMA verbs and rdma_cm for the userspace target and test client.
//!
//! Everything `unsafe` in the userspace tools lives in this module. It calls libibverbs and
//! librdmacm through `rdma-mummy-sys`, the FFI layer the `sideway` crate is built on; the
//! libraries are `dlopen()`ed at run time, so a binary built with this module still starts (and
//! serves TCP) on a host without rdma-core: every call then fails with `EOPNOTSUPP`.
//!
//! Why not `sideway` itself: its 0.4.x safe API has no connect/accept/reject private data,
//! no `rdma_reject`, no Send-with-Invalidate or bind-MW work requests, no memory windows, and no
//! accessor for the raw QP or `rdma_cm_id` that would let us add them. The protocol needs all of
//! those, so we go one layer down and keep that layer small.
//!
//! Ownership and teardown order are encoded in the types:
//! - [`Pd`], [`Cq`] and [`CompChannel`] are reference counted (`Arc`);
//! - [`Mr`] owns its buffer and keeps its `Pd` alive; [`Mw`] keeps its `Pd` alive;
//! - a [`CmId`] with a QP keeps the QP's `Pd` and `Cq`s alive and destroys the QP before the
//!   id. Drop the `CmId` (the QP) before the `Mr`s whose memory is posted on it.
//!
//! Posting takes ranges of an [`Mr`], bounds-checked, so a work request can never point outside
//! registered memory. As with any RDMA API, the caller must not read or write a range while a
//! work request that uses it is outstanding.

use std::ffi::c_void;
use std::io;
use std::mem::{self, MaybeUninit};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::time::Duration;

use rdma_mummy_sys as sys;

pub use crate::buf::AlignedBuf;

/// `errno` as an `io::Error`, or `EOPNOTSUPP` when the call did not set one (for example when
/// rdma-core is not installed and the wrapper could not load the function).
fn last_err() -> io::Error {
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(0) {
        io::Error::from_raw_os_error(libc::EOPNOTSUPP)
    } else {
        e
    }
}

fn check(ret: i32) -> io::Result<()> {
    if ret == 0 {
        Ok(())
    } else if ret > 0 {
        // Verbs calls return a positive errno.
        Err(io::Error::from_raw_os_error(ret))
    } else {
        Err(last_err())
    }
}

// ---------------------------------------------------------------------------------------------
// rdma_cm
// ---------------------------------------------------------------------------------------------

/// An rdma_cm event channel.
pub struct EventChannel {
    raw: NonNull<sys::rdma_event_channel>,
}

// SAFETY: librdmacm event channels may be used from any thread.
unsafe impl Send for EventChannel {}
// SAFETY: rdma_get_cm_event is thread-safe; the struct is only read.
unsafe impl Sync for EventChannel {}

impl EventChannel {
    /// Creates a channel. Fails (EOPNOTSUPP/ENODEV) where rdma-core or RDMA devices are absent.
    pub fn new() -> io::Result<Arc<EventChannel>> {
        // SAFETY: plain constructor call; the result is checked for NULL.
        let raw = unsafe { sys::rdma_create_event_channel() };
        NonNull::new(raw)
            .map(|raw| Arc::new(EventChannel { raw }))
            .ok_or_else(last_err)
    }

    /// The channel's file descriptor (readable when an event is pending).
    pub fn fd(&self) -> RawFd {
        // SAFETY: raw is a live channel; fd is a plain field.
        unsafe { (*self.raw.as_ptr()).fd }
    }

    /// Waits up to `timeout` for the next event; `Ok(None)` on timeout.
    pub fn next_event(&self, timeout: Option<Duration>) -> io::Result<Option<CmEvent>> {
        if !poll_fd(self.fd(), timeout)? {
            return Ok(None);
        }
        let mut ev: *mut sys::rdma_cm_event = ptr::null_mut();
        // SAFETY: raw is live; ev is a valid out-pointer.
        check(unsafe { sys::rdma_get_cm_event(self.raw.as_ptr(), &mut ev) })?;
        NonNull::new(ev)
            .map(|raw| Some(CmEvent { raw, taken: false }))
            .ok_or_else(last_err)
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: every CmId holds an Arc of its channel, so none is left when this runs.
        unsafe { sys::rdma_destroy_event_channel(self.raw.as_ptr()) }
    }
}

/// Waits for `fd` to become readable. `Ok(false)` on timeout.
pub fn poll_fd(fd: RawFd, timeout: Option<Duration>) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
    loop {
        // SAFETY: pfd is a valid pollfd array of length 1.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(n > 0);
    }
}

/// The kinds of rdma_cm event this crate acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmEventKind {
    AddrResolved,
    AddrError,
    RouteResolved,
    RouteError,
    ConnectRequest,
    ConnectResponse,
    ConnectError,
    Unreachable,
    Rejected,
    Established,
    Disconnected,
    DeviceRemoval,
    TimewaitExit,
    Other(u32),
}

/// One rdma_cm event; acknowledged when dropped.
pub struct CmEvent {
    raw: NonNull<sys::rdma_cm_event>,
    taken: bool,
}

// SAFETY: an event is a heap object owned by this handle until acked.
unsafe impl Send for CmEvent {}

impl CmEvent {
    fn ev(&self) -> &sys::rdma_cm_event {
        // SAFETY: raw is live until drop (ack).
        unsafe { self.raw.as_ref() }
    }

    /// What happened.
    pub fn kind(&self) -> CmEventKind {
        use sys::rdma_cm_event_type as t;
        match self.ev().event {
            t::RDMA_CM_EVENT_ADDR_RESOLVED => CmEventKind::AddrResolved,
            t::RDMA_CM_EVENT_ADDR_ERROR => CmEventKind::AddrError,
            t::RDMA_CM_EVENT_ROUTE_RESOLVED => CmEventKind::RouteResolved,
            t::RDMA_CM_EVENT_ROUTE_ERROR => CmEventKind::RouteError,
            t::RDMA_CM_EVENT_CONNECT_REQUEST => CmEventKind::ConnectRequest,
            t::RDMA_CM_EVENT_CONNECT_RESPONSE => CmEventKind::ConnectResponse,
            t::RDMA_CM_EVENT_CONNECT_ERROR => CmEventKind::ConnectError,
            t::RDMA_CM_EVENT_UNREACHABLE => CmEventKind::Unreachable,
            t::RDMA_CM_EVENT_REJECTED => CmEventKind::Rejected,
            t::RDMA_CM_EVENT_ESTABLISHED => CmEventKind::Established,
            t::RDMA_CM_EVENT_DISCONNECTED => CmEventKind::Disconnected,
            t::RDMA_CM_EVENT_DEVICE_REMOVAL => CmEventKind::DeviceRemoval,
            t::RDMA_CM_EVENT_TIMEWAIT_EXIT => CmEventKind::TimewaitExit,
            other => CmEventKind::Other(other),
        }
    }

    /// The event's status (for `Rejected`, the CM reject reason).
    pub fn status(&self) -> i32 {
        self.ev().status
    }

    /// The private data of a connect request, connect response (accept) or reject.
    pub fn private_data(&self) -> &[u8] {
        // SAFETY: for connection events param.conn is the active union member; the data pointer
        // and length are set by librdmacm and stay valid until the event is acked.
        unsafe {
            let conn = &self.ev().param.conn;
            if conn.private_data.is_null() || conn.private_data_len == 0 {
                return &[];
            }
            std::slice::from_raw_parts(
                conn.private_data as *const u8,
                usize::from(conn.private_data_len),
            )
        }
    }

    /// Raw id of the event (for matching against [`CmId::raw_id`]).
    pub fn raw_id(&self) -> usize {
        self.ev().id as usize
    }

    /// For a connect request: takes ownership of the new connection's id. Only the first call
    /// returns it. Drop (ack) the event before dropping the id: `rdma_destroy_id` waits for
    /// every event of the id to be acked.
    pub fn take_request_id(&mut self, channel: &Arc<EventChannel>) -> Option<CmId> {
        if self.kind() != CmEventKind::ConnectRequest || self.taken {
            return None;
        }
        let raw = NonNull::new(self.ev().id)?;
        self.taken = true;
        Some(CmId {
            raw,
            channel: channel.clone(),
            qp: None,
        })
    }
}

impl Drop for CmEvent {
    fn drop(&mut self) {
        // SAFETY: each event is acked exactly once, here.
        unsafe { sys::rdma_ack_cm_event(self.raw.as_ptr()) };
    }
}

fn to_sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage, which is suitably aligned.
            unsafe { ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
            (ss, mem::size_of::<libc::sockaddr_in>() as libc::socklen_t)
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage, which is suitably aligned.
            unsafe { ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
            (ss, mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t)
        }
    }
}

/// # Safety
/// `sa` must point to a valid sockaddr whose family tells its real size.
unsafe fn from_sockaddr(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    // SAFETY: the caller guarantees sa is valid for its family's struct.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let sin = &*(sa as *const libc::sockaddr_in);
                let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                Some(SocketAddr::V4(SocketAddrV4::new(
                    ip,
                    u16::from_be(sin.sin_port),
                )))
            }
            libc::AF_INET6 => {
                let sin6 = &*(sa as *const libc::sockaddr_in6);
                let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                Some(SocketAddr::V6(SocketAddrV6::new(
                    ip,
                    u16::from_be(sin6.sin6_port),
                    sin6.sin6_flowinfo,
                    sin6.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// Connection parameters for connect/accept.
#[derive(Clone, Copy, Debug)]
pub struct ConnParams<'a> {
    /// Private data (Hello on connect, HelloReply on accept).
    pub private_data: &'a [u8],
    /// RDMA Reads this side accepts in flight as responder (0xff: the device maximum).
    pub responder_resources: u8,
    /// RDMA Reads this side issues in flight as initiator (0xff: the device maximum).
    pub initiator_depth: u8,
    /// Transport retries.
    pub retry_count: u8,
    /// RNR retries (0 = a Send that meets no Receive is an error: credits must prevent it).
    pub rnr_retry_count: u8,
}

impl ConnParams<'_> {
    fn raw(&self) -> io::Result<sys::rdma_conn_param> {
        let len = u8::try_from(self.private_data.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "private data too long"))?;
        Ok(sys::rdma_conn_param {
            private_data: if len == 0 {
                ptr::null()
            } else {
                self.private_data.as_ptr() as *const c_void
            },
            private_data_len: len,
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            flow_control: 0,
            retry_count: self.retry_count,
            rnr_retry_count: self.rnr_retry_count,
            srq: 0,
            qp_num: 0,
        })
    }
}

/// Queue pair sizes.
#[derive(Clone, Copy, Debug)]
pub struct QpCaps {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

struct QpOwned {
    raw: NonNull<sys::ibv_qp>,
    _pd: Arc<Pd>,
    _send_cq: Arc<Cq>,
    _recv_cq: Arc<Cq>,
}

/// An rdma_cm identifier: a listener, or one connection with (after [`CmId::create_qp`]) its
/// RC queue pair.
pub struct CmId {
    raw: NonNull<sys::rdma_cm_id>,
    channel: Arc<EventChannel>,
    qp: Option<QpOwned>,
}

// SAFETY: rdma_cm ids and verbs objects may be used from any thread; this handle is the owner.
unsafe impl Send for CmId {}
// SAFETY: every &self method either reads immutable fields or calls a thread-safe verb.
unsafe impl Sync for CmId {}

impl CmId {
    /// A new TCP-port-space (RC) id on `channel`.
    pub fn new(channel: &Arc<EventChannel>) -> io::Result<CmId> {
        let mut raw: *mut sys::rdma_cm_id = ptr::null_mut();
        // SAFETY: channel is live; raw is a valid out-pointer.
        check(unsafe {
            sys::rdma_create_id(
                channel.raw.as_ptr(),
                &mut raw,
                ptr::null_mut(),
                sys::rdma_port_space::RDMA_PS_TCP,
            )
        })?;
        let raw = NonNull::new(raw).ok_or_else(last_err)?;
        Ok(CmId {
            raw,
            channel: channel.clone(),
            qp: None,
        })
    }

    /// The id's address, for matching events with [`CmEvent::raw_id`].
    pub fn raw_id(&self) -> usize {
        self.raw.as_ptr() as usize
    }

    /// Binds to a local address (port 0 = any).
    pub fn bind(&self, addr: SocketAddr) -> io::Result<()> {
        let (mut ss, _) = to_sockaddr(addr);
        // SAFETY: raw is live; ss is a valid sockaddr for the call's duration.
        check(unsafe {
            sys::rdma_bind_addr(self.raw.as_ptr(), &mut ss as *mut _ as *mut libc::sockaddr)
        })
    }

    /// Starts listening.
    pub fn listen(&self, backlog: i32) -> io::Result<()> {
        // SAFETY: raw is live.
        check(unsafe { sys::rdma_listen(self.raw.as_ptr(), backlog) })
    }

    /// Starts address resolution (completes with an AddrResolved event).
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> io::Result<()> {
        let (mut d, _) = to_sockaddr(dst);
        let mut s = src.map(|s| to_sockaddr(s).0);
        let sp = s
            .as_mut()
            .map_or(ptr::null_mut(), |s| s as *mut _ as *mut libc::sockaddr);
        // SAFETY: raw is live; the sockaddrs are valid for the call's duration.
        check(unsafe {
            sys::rdma_resolve_addr(
                self.raw.as_ptr(),
                sp,
                &mut d as *mut _ as *mut libc::sockaddr,
                timeout.as_millis().min(i32::MAX as u128) as i32,
            )
        })
    }

    /// Starts route resolution (completes with a RouteResolved event).
    pub fn resolve_route(&self, timeout: Duration) -> io::Result<()> {
        // SAFETY: raw is live.
        check(unsafe {
            sys::rdma_resolve_route(
                self.raw.as_ptr(),
                timeout.as_millis().min(i32::MAX as u128) as i32,
            )
        })
    }

    /// The peer's address, once known.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: raw is live; librdmacm stores a full sockaddr_storage there.
        unsafe { from_sockaddr(sys::rdma_get_peer_addr(self.raw.as_ref())) }
    }

    /// The local address, once bound.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: as in peer_addr.
        unsafe { from_sockaddr(sys::rdma_get_local_addr(self.raw.as_ref())) }
    }

    /// Identifies this id's device (its verbs context), once it has one: ids on one device
    /// may share a protection domain, and buffers registered in it.
    pub fn device_key(&self) -> Option<usize> {
        // SAFETY: raw is live; verbs is a plain field.
        let ctx = unsafe { (*self.raw.as_ptr()).verbs };
        (!ctx.is_null()).then_some(ctx as usize)
    }

    /// Allocates a protection domain on this id's device (after bind/resolve or on a request).
    pub fn alloc_pd(&self) -> io::Result<Arc<Pd>> {
        // SAFETY: raw is live; verbs is either NULL or a context owned by librdmacm for its life.
        let ctx = unsafe { (*self.raw.as_ptr()).verbs };
        if ctx.is_null() {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "rdma_cm id has no device yet",
            ));
        }
        // SAFETY: ctx is a live device context.
        let pd = unsafe { sys::ibv_alloc_pd(ctx) };
        NonNull::new(pd)
            .map(|raw| Arc::new(Pd { raw, ctx }))
            .ok_or_else(last_err)
    }

    /// Creates the RC QP of this connection (rdma_cm moves it through its states).
    pub fn create_qp(
        &mut self,
        pd: &Arc<Pd>,
        send_cq: &Arc<Cq>,
        recv_cq: &Arc<Cq>,
        caps: QpCaps,
    ) -> io::Result<()> {
        if self.qp.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "QP already created",
            ));
        }
        let mut attr = sys::ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: send_cq.raw.as_ptr(),
            recv_cq: recv_cq.raw.as_ptr(),
            srq: ptr::null_mut(),
            cap: sys::ibv_qp_cap {
                max_send_wr: caps.max_send_wr,
                max_recv_wr: caps.max_recv_wr,
                max_send_sge: caps.max_send_sge,
                max_recv_sge: caps.max_recv_sge,
                max_inline_data: caps.max_inline_data,
            },
            qp_type: sys::ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: raw, pd and the CQs are live; attr is valid for the call.
        check(unsafe { sys::rdma_create_qp(self.raw.as_ptr(), pd.raw.as_ptr(), &mut attr) })?;
        // SAFETY: on success librdmacm stored the new QP in the id.
        let qp = unsafe { (*self.raw.as_ptr()).qp };
        let raw = NonNull::new(qp).ok_or_else(last_err)?;
        self.qp = Some(QpOwned {
            raw,
            _pd: pd.clone(),
            _send_cq: send_cq.clone(),
            _recv_cq: recv_cq.clone(),
        });
        Ok(())
    }

    fn qp(&self) -> io::Result<*mut sys::ibv_qp> {
        self.qp
            .as_ref()
            .map(|q| q.raw.as_ptr())
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "no QP"))
    }

    /// Sends a connect request carrying `params.private_data`.
    pub fn connect(&self, params: &ConnParams<'_>) -> io::Result<()> {
        let mut p = params.raw()?;
        // SAFETY: raw is live; p and its private data outlive the call (librdmacm copies it).
        check(unsafe { sys::rdma_connect(self.raw.as_ptr(), &mut p) })
    }

    /// Accepts a connect request, carrying `params.private_data` back.
    pub fn accept(&self, params: &ConnParams<'_>) -> io::Result<()> {
        let mut p = params.raw()?;
        // SAFETY: as in connect.
        check(unsafe { sys::rdma_accept(self.raw.as_ptr(), &mut p) })
    }

    /// Sets the QP's local ACK timeout, 4.096 us * 2^`exp`, before `connect` or `accept`.
    /// A timeout shorter than the time a large RDMA Read response takes makes the requester
    /// retransmit the Read while the first response is still streaming, which on soft-RoCE
    /// can race the peer's invalidation of the region.
    pub fn set_ack_timeout(&self, exp: u8) -> io::Result<()> {
        // From <rdma/rdma_cma.h>; the generated bindings leave these anonymous enums out.
        const RDMA_OPTION_ID: i32 = 0;
        const RDMA_OPTION_ID_ACK_TIMEOUT: i32 = 3;
        let mut v = exp;
        // SAFETY: raw is live; the option is one u8 read during the call.
        check(unsafe {
            sys::rdma_set_option(
                self.raw.as_ptr(),
                RDMA_OPTION_ID,
                RDMA_OPTION_ID_ACK_TIMEOUT,
                (&mut v as *mut u8).cast(),
                1,
            )
        })
    }

    /// Rejects a connect request with private data.
    pub fn reject(&self, private_data: &[u8]) -> io::Result<()> {
        let len = u8::try_from(private_data.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "private data too long"))?;
        // SAFETY: raw is live; the data is valid for the call (librdmacm copies it).
        check(unsafe {
            sys::rdma_reject(
                self.raw.as_ptr(),
                private_data.as_ptr() as *const c_void,
                len,
            )
        })
    }

    /// Starts a disconnect (both sides get a Disconnected event).
    pub fn disconnect(&self) -> io::Result<()> {
        // SAFETY: raw is live.
        check(unsafe { sys::rdma_disconnect(self.raw.as_ptr()) })
    }

    /// Posts one receive of `len` bytes at `off` in `mr`.
    pub fn post_recv(&self, wr_id: u64, mr: &Mr, off: usize, len: usize) -> io::Result<()> {
        let qp = self.qp()?;
        let mut sge = mr.sge(off, len)?;
        let mut wr = sys::ibv_recv_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad: *mut sys::ibv_recv_wr = ptr::null_mut();
        // SAFETY: qp is live; wr/sge are valid for the call; the sge lies inside a registered MR.
        check(unsafe { sys::ibv_post_recv(qp, &mut wr, &mut bad) })
    }

    /// Posts a chain of send-queue work requests with one doorbell.
    pub fn post_send(&self, wrs: &[SendWr<'_>]) -> io::Result<()> {
        let qp = self.qp()?;
        if wrs.is_empty() {
            return Ok(());
        }
        let mut sges: Vec<sys::ibv_sge> = Vec::with_capacity(wrs.len());
        for w in wrs {
            sges.push(match w.local {
                Some((mr, off, len)) => mr.sge(off, len)?,
                None => sys::ibv_sge {
                    addr: 0,
                    length: 0,
                    lkey: 0,
                },
            });
        }
        let mut raw: Vec<sys::ibv_send_wr> = Vec::with_capacity(wrs.len());
        for (i, w) in wrs.iter().enumerate() {
            // SAFETY: ibv_send_wr is plain old data (pointers, integers, unions of those).
            let mut r: sys::ibv_send_wr = unsafe { mem::zeroed() };
            r.wr_id = w.wr_id;
            r.send_flags = if w.signaled {
                sys::ibv_send_flags::IBV_SEND_SIGNALED.0
            } else {
                0
            };
            if w.local.is_some() {
                r.sg_list = &mut sges[i];
                r.num_sge = 1;
            }
            match w.op {
                SendOp::Send => r.opcode = sys::ibv_wr_opcode::IBV_WR_SEND,
                SendOp::SendInv { rkey } => {
                    r.opcode = sys::ibv_wr_opcode::IBV_WR_SEND_WITH_INV;
                    r.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
                }
                SendOp::RdmaRead { remote_addr, rkey } => {
                    r.opcode = sys::ibv_wr_opcode::IBV_WR_RDMA_READ;
                    r.wr.rdma = sys::rdma_t { remote_addr, rkey };
                }
                SendOp::RdmaWrite { remote_addr, rkey } => {
                    r.opcode = sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE;
                    r.wr.rdma = sys::rdma_t { remote_addr, rkey };
                }
                SendOp::BindMw {
                    mw,
                    new_rkey,
                    mr,
                    off,
                    len,
                    access,
                } => {
                    if off.checked_add(len).is_none_or(|end| end > mr.len()) {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            "MW bind outside its MR",
                        ));
                    }
                    r.opcode = sys::ibv_wr_opcode::IBV_WR_BIND_MW;
                    r.bind_mw_tso_union.bind_mw = sys::bind_mw_t {
                        mw: mw.raw.as_ptr(),
                        rkey: new_rkey,
                        bind_info: sys::ibv_mw_bind_info {
                            mr: mr.raw.as_ptr(),
                            addr: mr.addr() + off as u64,
                            length: len as u64,
                            mw_access_flags: access.bits(),
                        },
                    };
                }
            }
            raw.push(r);
        }
        for i in 0..raw.len().saturating_sub(1) {
            let next: *mut sys::ibv_send_wr = &mut raw[i + 1];
            raw[i].next = next;
        }
        let mut bad: *mut sys::ibv_send_wr = ptr::null_mut();
        // SAFETY: qp is live; the chain, its sges and the MR/MW handles are valid for the call;
        // every sge and bind range was bounds-checked against its MR above.
        check(unsafe { sys::ibv_post_send(qp, raw.as_mut_ptr(), &mut bad) })?;
        for w in wrs {
            if let SendOp::BindMw { mw, new_rkey, .. } = w.op {
                // The provider names the window by `ibv_mw.rkey` (the kernel checks it against
                // the window's current key), so after a bind it must carry the new key.
                // SAFETY: the ibv_mw struct is owned by libibverbs and live while `mw` is; only
                // this thread posts binds of this window, and nothing in Rust aliases the field.
                unsafe { (*mw.raw.as_ptr()).rkey = new_rkey };
            }
        }
        Ok(())
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        if self.qp.take().is_some() {
            // SAFETY: the QP was created by rdma_create_qp on this id and is destroyed once.
            unsafe { sys::rdma_destroy_qp(self.raw.as_ptr()) };
        }
        // SAFETY: the id is owned by this handle and destroyed once; its events were acked
        // (rdma_destroy_id blocks until they are, so events must not outlive the id).
        unsafe { sys::rdma_destroy_id(self.raw.as_ptr()) };
        let _ = &self.channel;
    }
}

// ---------------------------------------------------------------------------------------------
// verbs
// ---------------------------------------------------------------------------------------------

/// A protection domain.
pub struct Pd {
    raw: NonNull<sys::ibv_pd>,
    ctx: *mut sys::ibv_context,
}

// SAFETY: verbs objects may be used from any thread.
unsafe impl Send for Pd {}
// SAFETY: verbs on a PD are thread-safe.
unsafe impl Sync for Pd {}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: every user of the PD (MR, MW, QP) holds an Arc, so none is left.
        unsafe { sys::ibv_dealloc_pd(self.raw.as_ptr()) };
    }
}

impl Pd {
    /// How many completion vectors the device has (interrupt queues a CQ can be bound to).
    pub fn num_comp_vectors(&self) -> i32 {
        // SAFETY: ctx is a live device context; num_comp_vectors is a plain field.
        unsafe { (*self.ctx).num_comp_vectors }
    }

    /// Asynchronous events pending on the device (QP fatal, access errors, port changes), as
    /// text, without blocking. For diagnostics when a QP dies without an error completion.
    pub fn drain_async_events(&self) -> Vec<String> {
        let mut out = Vec::new();
        // SAFETY: ctx is a live device context; async_fd is a plain field.
        let fd = unsafe { (*self.ctx).async_fd };
        while poll_fd(fd, Some(Duration::ZERO)).unwrap_or(false) {
            let mut ev = MaybeUninit::<sys::ibv_async_event>::zeroed();
            // SAFETY: ctx is live and its async fd readable; ev is a valid out-pointer.
            if unsafe { sys::ibv_get_async_event(self.ctx, ev.as_mut_ptr()) } != 0 {
                break;
            }
            // SAFETY: filled by the successful call.
            let ev_ref = unsafe { &mut *ev.as_mut_ptr() };
            let ty = ev_ref.event_type;
            // SAFETY: ibv_event_type_str returns a static string or NULL.
            let p = unsafe { sys::ibv_event_type_str(ty) };
            let name = if p.is_null() {
                format!("event {}", ty as u32)
            } else {
                // SAFETY: p is a NUL-terminated static string.
                unsafe { std::ffi::CStr::from_ptr(p) }
                    .to_string_lossy()
                    .into_owned()
            };
            out.push(name);
            // SAFETY: each event obtained is acked exactly once.
            unsafe { sys::ibv_ack_async_event(ev_ref) };
        }
        out
    }
}

/// The largest number of outstanding RDMA Reads a QP on this device may issue.
pub fn max_qp_rd_atom(pd: &Pd) -> io::Result<u32> {
    let mut attr = MaybeUninit::<sys::ibv_device_attr>::zeroed();
    // SAFETY: ctx is a live device context; attr is a valid out-pointer.
    check(unsafe { sys::ibv_query_device(pd.ctx, attr.as_mut_ptr()) })?;
    // SAFETY: initialised by the successful query (and zeroed before).
    let attr = unsafe { attr.assume_init() };
    Ok(attr.max_qp_init_rd_atom.max(0) as u32)
}

/// What a device allows, for sizing a connection's queues against it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    pub max_qp_wr: u32,
    pub max_cqe: u32,
    pub max_qp_init_rd_atom: u32,
    pub max_mr_size: u64,
}

/// The device's limits.
pub fn device_limits(pd: &Pd) -> io::Result<DeviceLimits> {
    let mut attr = MaybeUninit::<sys::ibv_device_attr>::zeroed();
    // SAFETY: ctx is a live device context; attr is a valid out-pointer.
    check(unsafe { sys::ibv_query_device(pd.ctx, attr.as_mut_ptr()) })?;
    // SAFETY: initialised by the successful query (and zeroed before).
    let a = unsafe { attr.assume_init() };
    Ok(DeviceLimits {
        max_qp_wr: a.max_qp_wr.max(0) as u32,
        max_cqe: a.max_cqe.max(0) as u32,
        max_qp_init_rd_atom: a.max_qp_init_rd_atom.max(0) as u32,
        max_mr_size: a.max_mr_size,
    })
}

/// Access flags for memory regions and windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access(u32);

impl Access {
    pub const LOCAL_WRITE: Access = Access(sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0);
    pub const REMOTE_WRITE: Access = Access(sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0);
    pub const REMOTE_READ: Access = Access(sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0);
    pub const MW_BIND: Access = Access(sys::ibv_access_flags::IBV_ACCESS_MW_BIND.0);

    /// The raw bits.
    pub fn bits(self) -> u32 {
        self.0
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
}

/// A registered memory region that owns its (page-aligned) buffer.
pub struct Mr {
    raw: NonNull<sys::ibv_mr>,
    buf: AlignedBuf,
    _pd: Arc<Pd>,
}

// SAFETY: an MR and its buffer are owned by this handle.
unsafe impl Send for Mr {}
// SAFETY: shared access only reads keys or hands out `&[u8]`.
unsafe impl Sync for Mr {}

impl Mr {
    /// Allocates and registers `len` zeroed bytes.
    pub fn new(pd: &Arc<Pd>, len: usize, access: Access) -> io::Result<Mr> {
        let mut buf = AlignedBuf::new(len);
        // SAFETY: pd is live; buf is a valid allocation of len bytes that the Mr owns and frees
        // only after deregistration (Drop order: raw deregistered first, then buf).
        let raw = unsafe {
            sys::ibv_reg_mr(
                pd.raw.as_ptr(),
                buf.as_mut_ptr() as *mut c_void,
                len,
                access.0 as i32,
            )
        };
        let raw = NonNull::new(raw).ok_or_else(last_err)?;
        Ok(Mr {
            raw,
            buf,
            _pd: pd.clone(),
        })
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: raw is live.
        unsafe { (*self.raw.as_ptr()).lkey }
    }

    /// Remote key of the MR itself (unused by this project: access goes through MWs).
    pub fn rkey(&self) -> u32 {
        // SAFETY: raw is live.
        unsafe { (*self.raw.as_ptr()).rkey }
    }

    /// Start address (the address remote peers use).
    pub fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    fn sge(&self, off: usize, len: usize) -> io::Result<sys::ibv_sge> {
        match off.checked_add(len) {
            Some(end) if end <= self.len() && len <= u32::MAX as usize => Ok(sys::ibv_sge {
                addr: self.addr() + off as u64,
                length: len as u32,
                lkey: self.lkey(),
            }),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "SGE outside its MR",
            )),
        }
    }
}

impl std::ops::Deref for Mr {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf
    }
}

impl std::ops::DerefMut for Mr {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered in `new`, deregistered once, before `buf` is freed.
        unsafe { sys::ibv_dereg_mr(self.raw.as_ptr()) };
    }
}

/// A type-2 memory window: bound to a range of an MR by a work request, invalidated by the
/// peer's Send-with-Invalidate (or a local invalidate), then free to bind again.
pub struct Mw {
    raw: NonNull<sys::ibv_mw>,
    rkey: u32,
    _pd: Arc<Pd>,
}

// SAFETY: owned handle; verbs are thread-safe.
unsafe impl Send for Mw {}
// SAFETY: &self only reads.
unsafe impl Sync for Mw {}

impl Mw {
    /// Allocates a type-2 window.
    pub fn new_type2(pd: &Arc<Pd>) -> io::Result<Mw> {
        // SAFETY: pd is live.
        let raw = unsafe { sys::ibv_alloc_mw(pd.raw.as_ptr(), sys::ibv_mw_type::IBV_MW_TYPE_2) };
        let raw = NonNull::new(raw).ok_or_else(last_err)?;
        // SAFETY: raw is live.
        let rkey = unsafe { (*raw.as_ptr()).rkey };
        Ok(Mw {
            raw,
            rkey,
            _pd: pd.clone(),
        })
    }

    /// The rkey of the last bind (or the initial one).
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// Picks the rkey for the next bind: same index, next 8-bit key (what `ibv_inc_rkey` does).
    pub fn next_rkey(&mut self) -> u32 {
        let key = (self.rkey as u8).wrapping_add(1);
        self.rkey = (self.rkey & !0xff) | u32::from(key);
        self.rkey
    }
}

impl Drop for Mw {
    fn drop(&mut self) {
        // SAFETY: allocated in new_type2, freed once.
        unsafe { sys::ibv_dealloc_mw(self.raw.as_ptr()) };
    }
}

/// A send-queue operation.
pub enum SendOp<'a> {
    /// Plain Send of the local buffer.
    Send,
    /// Send, and invalidate `rkey` at the receiver.
    SendInv { rkey: u32 },
    /// Read remote memory into the local buffer.
    RdmaRead { remote_addr: u64, rkey: u32 },
    /// Write the local buffer into remote memory.
    RdmaWrite { remote_addr: u64, rkey: u32 },
    /// Bind a type-2 MW to `len` bytes at `off` of `mr` with `access`, under `new_rkey`.
    BindMw {
        mw: &'a Mw,
        new_rkey: u32,
        mr: &'a Mr,
        off: usize,
        len: usize,
        access: Access,
    },
}

/// One send-queue work request.
pub struct SendWr<'a> {
    pub wr_id: u64,
    pub op: SendOp<'a>,
    /// Local buffer: (MR, offset, length).
    pub local: Option<(&'a Mr, usize, usize)>,
    pub signaled: bool,
}

/// A completion channel (an fd that becomes readable when an armed CQ has a completion).
pub struct CompChannel {
    raw: NonNull<sys::ibv_comp_channel>,
}

// SAFETY: owned handle.
unsafe impl Send for CompChannel {}
// SAFETY: &self only reads the fd or calls thread-safe verbs.
unsafe impl Sync for CompChannel {}

impl CompChannel {
    /// Creates a channel on the PD's device.
    pub fn new(pd: &Pd) -> io::Result<Arc<CompChannel>> {
        // SAFETY: ctx is live.
        let raw = unsafe { sys::ibv_create_comp_channel(pd.ctx) };
        NonNull::new(raw)
            .map(|raw| Arc::new(CompChannel { raw }))
            .ok_or_else(last_err)
    }

    fn fd(&self) -> RawFd {
        // SAFETY: raw is live.
        unsafe { (*self.raw.as_ptr()).fd }
    }
}

impl Drop for CompChannel {
    fn drop(&mut self) {
        // SAFETY: every CQ on this channel holds an Arc of it, so none is left.
        unsafe { sys::ibv_destroy_comp_channel(self.raw.as_ptr()) };
    }
}

/// A completion, copied out of the CQ.
#[derive(Clone, Copy, Debug)]
pub struct Completion {
    pub wr_id: u64,
    /// `IBV_WC_*` status (0 = success).
    pub status: u32,
    /// `IBV_WC_*` opcode.
    pub opcode: u32,
    pub byte_len: u32,
    /// The raw `wc_flags`.
    pub wc_flags: u32,
    /// The completion carried IBV_WC_WITH_INV (`wc_flags` bit 3, the libibverbs ABI value).
    pub with_inv: bool,
    /// The invalidated rkey (valid when `with_inv`).
    pub invalidated_rkey: u32,
}

impl Completion {
    /// Success?
    pub fn ok(&self) -> bool {
        self.status == sys::ibv_wc_status::IBV_WC_SUCCESS
    }

    /// A receive completion?
    pub fn is_recv(&self) -> bool {
        self.opcode & sys::ibv_wc_opcode::IBV_WC_RECV != 0
    }

    /// The status as text.
    pub fn status_str(&self) -> String {
        wc_status_str(self.status)
    }
}

/// Text for an `IBV_WC_*` status.
pub fn wc_status_str(status: u32) -> String {
    // SAFETY: ibv_wc_status_str returns a static string (or NULL if unloaded).
    let p = unsafe { sys::ibv_wc_status_str(status) };
    if p.is_null() {
        return format!("status {status}");
    }
    // SAFETY: p is a NUL-terminated static string.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

/// `wc_flags` bit that Linux's rxe (through at least 6.12) sets for a Send-with-Invalidate on a
/// *user* CQ: it copies the kernel's `IB_WC_WITH_INVALIDATE` (1 << 2) into the uverbs completion
/// instead of the ABI's `IBV_WC_WITH_INV` (1 << 3); see `do_complete()` in `rxe_resp.c`. The
/// invalidated rkey itself is reported correctly.
pub const WC_FLAG_RXE_KERNEL_WITH_INV: u32 = 1 << 2;

/// `IBV_WC_WR_FLUSH_ERR`: work flushed because the QP went to the error state.
pub const WC_WR_FLUSH_ERR: u32 = sys::ibv_wc_status::IBV_WC_WR_FLUSH_ERR;
/// `IBV_WC_REM_ACCESS_ERR`: the peer refused the rkey or range.
pub const WC_REM_ACCESS_ERR: u32 = sys::ibv_wc_status::IBV_WC_REM_ACCESS_ERR;
/// `IBV_WC_RDMA_READ` opcode.
pub const WC_OP_RDMA_READ: u32 = sys::ibv_wc_opcode::IBV_WC_RDMA_READ;
/// `IBV_WC_RDMA_WRITE` opcode.
pub const WC_OP_RDMA_WRITE: u32 = sys::ibv_wc_opcode::IBV_WC_RDMA_WRITE;
/// `IBV_WC_SEND` opcode.
pub const WC_OP_SEND: u32 = sys::ibv_wc_opcode::IBV_WC_SEND;
/// `IBV_WC_BIND_MW` opcode.
pub const WC_OP_BIND_MW: u32 = sys::ibv_wc_opcode::IBV_WC_BIND_MW;

/// A completion queue with an optional completion channel for blocking waits.
pub struct Cq {
    raw: NonNull<sys::ibv_cq>,
    channel: Option<Arc<CompChannel>>,
    unacked: std::sync::atomic::AtomicU32,
}

// SAFETY: owned handle; ibv_poll_cq is thread-safe in libibverbs providers.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Cq {
    /// A CQ of `entries` entries on the PD's device, with `channel` for blocking waits, on
    /// the device's first completion vector.
    pub fn new(pd: &Pd, entries: u32, channel: Option<&Arc<CompChannel>>) -> io::Result<Arc<Cq>> {
        Cq::on_vector(pd, entries, channel, 0)
    }

    /// [`Cq::new`], with its completion events on `comp_vector` (below
    /// [`Pd::num_comp_vectors`]).
    pub fn on_vector(
        pd: &Pd,
        entries: u32,
        channel: Option<&Arc<CompChannel>>,
        comp_vector: i32,
    ) -> io::Result<Arc<Cq>> {
        let ch = channel.map_or(ptr::null_mut(), |c| c.raw.as_ptr());
        // SAFETY: ctx and channel are live.
        let raw =
            unsafe { sys::ibv_create_cq(pd.ctx, entries as i32, ptr::null_mut(), ch, comp_vector) };
        let raw = NonNull::new(raw).ok_or_else(last_err)?;
        Ok(Arc::new(Cq {
            raw,
            channel: channel.cloned(),
            unacked: 0.into(),
        }))
    }

    /// Polls up to `out.len()` completions without blocking.
    pub fn poll(&self, out: &mut Vec<Completion>, max: usize) -> io::Result<usize> {
        // SAFETY: ibv_wc is plain old data.
        let mut wcs: [sys::ibv_wc; 16] = unsafe { mem::zeroed() };
        let want = max.min(wcs.len()) as i32;
        // SAFETY: raw is live; wcs has room for `want` entries.
        let n = unsafe { sys::ibv_poll_cq(self.raw.as_ptr(), want, wcs.as_mut_ptr()) };
        if n < 0 {
            return Err(io::Error::other("ibv_poll_cq failed"));
        }
        for wc in &wcs[..n as usize] {
            let with_inv = wc.wc_flags & sys::ibv_wc_flags::IBV_WC_WITH_INV.0 != 0;
            out.push(Completion {
                wc_flags: wc.wc_flags,
                wr_id: wc.wr_id,
                status: wc.status,
                opcode: wc.opcode,
                byte_len: wc.byte_len,
                with_inv,
                // SAFETY: reading a u32 union field; both members are u32.
                invalidated_rkey: unsafe { wc.imm_data_invalidated_rkey_union.invalidated_rkey },
            });
        }
        Ok(n as usize)
    }

    /// Returns at least one completion, waiting up to `timeout` (None: forever) on the channel.
    /// Returns an empty vector on timeout.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<Vec<Completion>> {
        let mut out = Vec::new();
        loop {
            self.poll(&mut out, 16)?;
            if !out.is_empty() {
                return Ok(out);
            }
            let Some(ch) = &self.channel else {
                std::thread::yield_now();
                continue;
            };
            // Arm, then re-poll to close the race with a completion that arrived before arming.
            // SAFETY: raw is live.
            check(unsafe { sys::ibv_req_notify_cq(self.raw.as_ptr(), 0) })?;
            self.poll(&mut out, 16)?;
            if !out.is_empty() {
                return Ok(out);
            }
            if !poll_fd(ch.fd(), timeout)? {
                return Ok(out);
            }
            let mut cq: *mut sys::ibv_cq = ptr::null_mut();
            let mut ctx: *mut c_void = ptr::null_mut();
            // SAFETY: the channel is live and readable; out-pointers are valid.
            check(unsafe { sys::ibv_get_cq_event(ch.raw.as_ptr(), &mut cq, &mut ctx) })?;
            let n = self
                .unacked
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                + 1;
            if n >= 64 {
                self.unacked.store(0, std::sync::atomic::Ordering::Relaxed);
                // SAFETY: acking events obtained from this CQ's channel.
                unsafe { sys::ibv_ack_cq_events(cq, n) };
            }
        }
    }
}

impl Cq {
    /// Arms the CQ: its channel becomes readable at the next completion. Poll once more
    /// after arming (a completion may have come in between).
    pub fn arm(&self) -> io::Result<()> {
        // SAFETY: raw is live.
        check(unsafe { sys::ibv_req_notify_cq(self.raw.as_ptr(), 0) })
    }

    /// The channel's fd, to wait on with poll or io_uring.
    pub fn channel_fd(&self) -> Option<RawFd> {
        self.channel.as_ref().map(|c| c.fd())
    }

    /// Makes [`Cq::take_event`] never block: it then says `false` when the channel has no
    /// event (a wake-up that was not one). For every CQ of the channel.
    pub fn events_nonblocking(&self) -> io::Result<()> {
        let Some(fd) = self.channel_fd() else {
            return Ok(());
        };
        // SAFETY: fcntl on the channel's fd, which is live while its CQ is.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Takes the event that made the channel readable, through `ibv_get_cq_event` (whose
    /// provider hook some devices need: mlx4 and mlx5 count events to arm again), and
    /// acknowledges events in batches. `Ok(false)`: the channel had none, which only a
    /// non-blocking channel says ([`Cq::events_nonblocking`]); a blocking one blocks until
    /// there is one, so call it only when the channel is readable.
    pub fn take_event(&self) -> io::Result<bool> {
        let Some(ch) = &self.channel else {
            return Ok(false);
        };
        let mut cq: *mut sys::ibv_cq = ptr::null_mut();
        let mut ctx: *mut c_void = ptr::null_mut();
        // SAFETY: the channel is live; out-pointers are valid.
        match check(unsafe { sys::ibv_get_cq_event(ch.raw.as_ptr(), &mut cq, &mut ctx) }) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(e),
        }
        let n = self
            .unacked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        if n >= 64 {
            self.unacked.store(0, std::sync::atomic::Ordering::Relaxed);
            // SAFETY: acking events obtained from this CQ's channel.
            unsafe { sys::ibv_ack_cq_events(cq, n) };
        }
        Ok(true)
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        let n = self.unacked.load(std::sync::atomic::Ordering::Relaxed);
        // SAFETY: every QP using the CQ holds an Arc, so none is left; all events are acked first.
        unsafe {
            if n > 0 {
                sys::ibv_ack_cq_events(self.raw.as_ptr(), n);
            }
            sys::ibv_destroy_cq(self.raw.as_ptr());
        }
        let _ = &self.channel;
    }
}

/// Whether `ip` can be used with rdma_cm at all on this host (a cheap probe: an event channel).
pub fn rdma_available() -> bool {
    EventChannel::new().is_ok()
}

/// The IP of a socket address, for allow-list checks.
pub fn ip_of(addr: Option<SocketAddr>) -> Option<IpAddr> {
    addr.map(|a| a.ip())
}
