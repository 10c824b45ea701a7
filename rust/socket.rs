// SPDX-License-Identifier: GPL-2.0

//! Kernel TCP sockets (`sock_create_kern`), for the TCP transport.
//!
//! A [`TcpSocket`] is an IPv4 or IPv6 TCP connection in the initial network namespace. Set-up is
//! blocking and bounded by the socket timeouts; afterwards the owner sends blocking (bounded by
//! the send timeout) or without waiting for room, and receives without blocking, woken by the
//! socket's `sk_data_ready` / `sk_state_change` callbacks, which [`TcpSocket::hook`] forwards
//! to a [`SockEvents`] (as nvme-tcp does, under `sk_callback_lock`).
//!
//! Headers are copied into the socket (`kernel_sendmsg` with a `kvec`). A write's data pages
//! are spliced (`MSG_SPLICE_PAGES`, as nvme-tcp does): TCP takes its own page references and
//! sends from the pages, with no copy. That is safe after the request ends: the target answers
//! a write only once it has received all of its data, so by then TCP has had to retransmit
//! nothing more, and a spurious retransmission the target's TCP drops as a duplicate whatever
//! the page holds then. Pages TCP may not take a reference to (slab memory, `sendpages_ok`)
//! are copied from the same iterator instead.
//!
//! Sockets are reclaim-safe (GFP_NOIO, `sk_set_memalloc`) and close abortively.

use core::{
    ffi::c_void,
    marker::PhantomData,
    mem,
    net::IpAddr,
    ptr::{self, NonNull},
    sync::atomic::{AtomicBool, Ordering},
};
use kernel::{ffi, prelude::*, sync::Arc, time::msecs_to_jiffies};

use super::bindings as b;
use super::blk_mq::DataPage;
use super::inet::SockAddr;

/// What a hooked socket reports. Both run in atomic context (softirq, under the socket's
/// callback lock): they must not sleep, and typically queue a work item.
pub(crate) trait SockEvents: Send + Sync + 'static {
    /// Data arrived.
    fn data_ready(this: &Arc<Self>);
    /// The connection changed state (e.g. the peer closed or reset it).
    fn state_change(this: &Arc<Self>);
}

/// What `sk_user_data` points to while hooked: the owner, and the callbacks to restore.
struct Hook<T: SockEvents> {
    owner: Arc<T>,
    data_ready: Option<unsafe extern "C" fn(*mut b::sock)>,
    state_change: Option<unsafe extern "C" fn(*mut b::sock)>,
}

/// A connected kernel TCP socket. Dropping it shuts it down, unhooks it and releases it.
pub(crate) struct TcpSocket<T: SockEvents> {
    sock: NonNull<b::socket>,
    hooked: bool,
    _owner: PhantomData<Arc<T>>,
}

// SAFETY: The socket layer serialises its users itself (`lock_sock`); concurrent send and
// receive from different threads is what kernel sockets support. The hook is only installed
// and removed through `&mut self`.
unsafe impl<T: SockEvents> Send for TcpSocket<T> {}
// SAFETY: See `Send`; the `&self` methods are `kernel_sendmsg`, `sock_sendmsg`,
// `kernel_recvmsg` and `kernel_sock_shutdown`, which may run concurrently.
unsafe impl<T: SockEvents> Sync for TcpSocket<T> {}

fn check(ret: ffi::c_int) -> Result<usize> {
    if ret < 0 {
        Err(Error::from_errno(ret))
    } else {
        Ok(ret as usize)
    }
}

/// The flags every send of [`TcpSocket::send`] and [`TcpSocket::send_page`] carries: no
/// SIGPIPE, `MSG_MORE` when more follows at once, `MSG_DONTWAIT` when it must not wait.
fn send_flags(more: bool, nowait: bool) -> u32 {
    b::MSG_NOSIGNAL | if more { b::MSG_MORE } else { 0 } | if nowait { b::MSG_DONTWAIT } else { 0 }
}

impl<T: SockEvents> TcpSocket<T> {
    /// Connects to `addr:port` from local port `from` (0: any), waiting at most `timeout_ms`,
    /// which also becomes the send and receive timeout. A `from` port another socket holds
    /// fails with `EADDRINUSE` or `EADDRNOTAVAIL`; one below 1024 needs
    /// `CAP_NET_BIND_SERVICE` (the kernel's own threads and root have it). May sleep.
    pub(crate) fn connect(addr: IpAddr, port: u16, from: u16, timeout_ms: u32) -> Result<Self> {
        let family = match addr {
            IpAddr::V4(_) => b::AF_INET,
            IpAddr::V6(_) => b::AF_INET6,
        };
        let mut raw: *mut b::socket = ptr::null_mut();
        // SAFETY: `init_net` lives as long as the kernel; `raw` is valid for the result.
        check(unsafe {
            b::sock_create_kern(
                ptr::addr_of_mut!(b::init_net),
                family as ffi::c_int,
                b::sock_type_SOCK_STREAM as ffi::c_int,
                b::IPPROTO_TCP as ffi::c_int,
                &mut raw,
            )
        })?;
        let s = Self {
            sock: NonNull::new(raw).ok_or(ENOMEM)?,
            hooked: false,
            _owner: PhantomData,
        };
        let sk = s.sk();
        MemallocSocksHold::ensure();
        // SAFETY: `sk` is the new socket's `struct sock`, not yet shared with anyone. A block
        // driver's socket must not recurse into I/O to allocate (GFP_NOIO), nor use the
        // current task's page fragment, which belongs to whichever task we run in (nvme-tcp
        // does the same). It may dip into the emergency reserves, since writeback to the disk
        // it carries is what frees memory (as nbd does; undone in `drop`). It closes
        // abortively (linger 0: a reset, no FIN after queued data): once the driver gives a
        // connection up and reissues its requests elsewhere, nothing still queued on it should
        // reach the target (docs/design.md, the fencing rule, is what guarantees it; this only
        // narrows the window).
        unsafe {
            (*sk).sk_allocation = b::RDMADISK_GFP_NOIO;
            (*sk).sk_use_task_frag = false;
            b::tcp_sock_set_nodelay(sk);
            b::sk_set_memalloc(sk);
            b::sock_no_linger(sk);
        }
        s.set_timeout_ms(timeout_ms);
        if from != 0 {
            let mut local = SockAddr::any(addr, from);
            // SAFETY: `local` is a valid socket address of the socket's family and of the
            // given length, read during the call; the socket is ours and not yet connected.
            check(unsafe { b::kernel_bind(s.sock.as_ptr(), local.as_mut_ptr(), local.len()) })?;
        }
        let mut dst = SockAddr::new(addr, port);
        // SAFETY: `dst` is a valid socket address of the socket's family and of the given
        // length, read during the call.
        check(unsafe { b::kernel_connect(s.sock.as_ptr(), dst.as_mut_ptr(), dst.len(), 0) })?;
        Ok(s)
    }

    /// The socket's own address and port.
    pub(crate) fn local(&self) -> Result<(IpAddr, u16)> {
        let mut local = SockAddr::empty();
        // SAFETY: `local` is valid for writes of a `sockaddr_storage`, more than the socket's
        // family writes; the socket is live.
        check(unsafe { b::kernel_getsockname(self.sock.as_ptr(), local.as_mut_ptr()) })?;
        local.get().ok_or(EINVAL)
    }

    fn sk(&self) -> *mut b::sock {
        // SAFETY: `sock` is a live socket we own; its `sk` is set for its whole life.
        unsafe { (*self.sock.as_ptr()).sk }
    }

    /// Turns on TCP keepalive: after `secs` without traffic, a probe every `secs`; the
    /// connection fails after three unanswered ones.
    pub(crate) fn set_keepalive(&self, secs: u32) {
        let secs = secs.clamp(1, 32_767) as ffi::c_int;
        let sk = self.sk();
        // SAFETY: `sk` is live; these take the socket lock themselves. They only fail for
        // out-of-range values, which the clamp excludes.
        unsafe {
            b::sock_set_keepalive(sk);
            b::tcp_sock_set_keepidle(sk, secs);
            b::tcp_sock_set_keepintvl(sk, secs);
            b::tcp_sock_set_keepcnt(sk, 3);
        }
    }

    /// Sets how long a blocking send or receive may wait.
    pub(crate) fn set_timeout_ms(&self, ms: u32) {
        let j = msecs_to_jiffies(ms) as ffi::c_long;
        let sk = self.sk();
        // SAFETY: `sk` is live. The timeouts are plain words read at the start of each
        // blocking call; a volatile store of a word cannot tear, and a call already blocked
        // keeps the value it read (as with `setsockopt`, which takes the socket lock only to
        // serialise writers, of which this owner is the only one).
        unsafe {
            ptr::addr_of_mut!((*sk).sk_sndtimeo).write_volatile(j);
            ptr::addr_of_mut!((*sk).sk_rcvtimeo).write_volatile(j);
        }
    }

    /// Bytes the send buffer takes now without waiting (`sk_stream_wspace`). Advisory: TCP
    /// may still wait for memory, within the send timeout.
    pub(crate) fn send_room(&self) -> usize {
        // SAFETY: `sk` is live; the helper only reads two words with `READ_ONCE`.
        let room = unsafe { b::rdmadisk_sk_stream_wspace(self.sk()) };
        usize::try_from(room).unwrap_or(0)
    }

    /// Sends `buf`; returns how many bytes went. Blocking (`nowait` false): all of them, or an
    /// error after the send timeout. With `nowait` (`MSG_DONTWAIT`): what the send buffer
    /// takes now, which may be fewer, even none; it never sleeps for room, so a signal
    /// pending for the calling task cannot interrupt it. `more` says more data follows at
    /// once (`MSG_MORE`), so TCP may hold a partial segment back.
    pub(crate) fn send(&self, buf: &[u8], more: bool, nowait: bool) -> Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            let rest = &buf[done..];
            let mut iov = b::kvec {
                iov_base: rest.as_ptr().cast_mut().cast(),
                iov_len: rest.len(),
            };
            // SAFETY: An all-zero `msghdr` is the empty message `kernel_sendmsg` expects
            // (it sets up the iterator from `iov` itself).
            let mut msg: b::msghdr = unsafe { mem::zeroed() };
            msg.msg_flags = send_flags(more, nowait) as _;
            // SAFETY: `iov` describes `rest`, which is readable for the call; `msg` is valid.
            let n = match check(unsafe {
                b::kernel_sendmsg(self.sock.as_ptr(), &mut msg, &mut iov, 1, rest.len())
            }) {
                Err(e) if nowait && e == EAGAIN => return Ok(done),
                r => r?,
            };
            if n == 0 {
                return Err(EPIPE);
            }
            done += n.min(rest.len());
        }
        Ok(done)
    }

    /// Sends the bytes of `page` from byte `from` on, without copying them where the kernel
    /// allows (see the module's comment); returns how many went. `more` and `nowait` as for
    /// [`TcpSocket::send`].
    pub(crate) fn send_page(
        &self,
        page: &DataPage<'_>,
        from: usize,
        more: bool,
        nowait: bool,
    ) -> Result<usize> {
        let len = page.len();
        let mut done = from.min(len);
        while done < len {
            let mut bv = page.bv;
            bv.bv_offset += done as u32;
            bv.bv_len -= done as u32;
            // SAFETY: A pure check of the page's flags and count; the page is live (its request
            // holds it while `page` is borrowed).
            let splice = unsafe {
                b::rdmadisk_sendpages_ok(bv.bv_page, bv.bv_len as usize, bv.bv_offset as usize)
            };
            // SAFETY: As in `send`; `msg_iter` is set up below.
            let mut msg: b::msghdr = unsafe { mem::zeroed() };
            msg.msg_flags =
                (send_flags(more, nowait) | if splice { b::MSG_SPLICE_PAGES } else { 0 }) as _;
            // SAFETY: `bv` is one live `bio_vec` of `bv_len` bytes within one page, which
            // outlives the call; the iterator only reads it (ITER_SOURCE).
            unsafe {
                b::iov_iter_bvec(
                    &mut msg.msg_iter,
                    b::ITER_SOURCE,
                    &bv,
                    1,
                    bv.bv_len as usize,
                )
            };
            // SAFETY: The socket is ours and connected; `msg` describes the page's bytes.
            // With `MSG_SPLICE_PAGES` TCP takes its own references to the page before
            // returning, so the page may be handed back afterwards.
            let n = match check(unsafe { b::sock_sendmsg(self.sock.as_ptr(), &mut msg) }) {
                Err(e) if nowait && e == EAGAIN => break,
                r => r?,
            };
            if n == 0 {
                return Err(EPIPE);
            }
            done += n;
        }
        Ok(done - from.min(len))
    }

    /// Receives into `buf`. Without `wait`, returns what is there now, or `EAGAIN`; with it,
    /// fills all of `buf` or fails after the receive timeout (`EAGAIN`). `Ok(0)`: the peer
    /// closed the connection.
    pub(crate) fn recv(&self, buf: &mut [u8], wait: bool) -> Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut iov = b::kvec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: As in `send`.
        let mut msg: b::msghdr = unsafe { mem::zeroed() };
        let flags = if wait {
            b::MSG_WAITALL
        } else {
            b::MSG_DONTWAIT
        };
        // SAFETY: `iov` describes `buf`, writable for the call; `msg` is valid.
        check(unsafe {
            b::kernel_recvmsg(
                self.sock.as_ptr(),
                &mut msg,
                &mut iov,
                1,
                buf.len(),
                flags as ffi::c_int,
            )
        })
    }

    /// Shuts both directions down: blocked senders and receivers return, the peer sees the end.
    pub(crate) fn shutdown(&self) {
        // SAFETY: `sock` is live; shutting down twice is harmless.
        unsafe { b::kernel_sock_shutdown(self.sock.as_ptr(), b::sock_shutdown_cmd_SHUT_RDWR) };
    }

    /// Forwards the socket's data-ready and state-change callbacks to `owner` until dropped.
    pub(crate) fn hook(&mut self, owner: Arc<T>) -> Result {
        if self.hooked {
            return Err(EBUSY);
        }
        let hook = KBox::new(
            Hook {
                owner,
                data_ready: None,
                state_change: None,
            },
            GFP_KERNEL,
        )?;
        let hook = KBox::into_raw(hook);
        let sk = self.sk();
        // SAFETY: `sk` is live; the callbacks and `sk_user_data` are changed under the write
        // side of `sk_callback_lock`, which the socket's callbacks hold for reading. `hook`
        // stays valid until `unhook` takes it back under the same lock.
        unsafe {
            b::rdmadisk_write_lock_bh(ptr::addr_of_mut!((*sk).sk_callback_lock));
            (*hook).data_ready = (*sk).sk_data_ready;
            (*hook).state_change = (*sk).sk_state_change;
            (*sk).sk_user_data = hook.cast::<c_void>();
            (*sk).sk_data_ready = Some(data_ready::<T>);
            (*sk).sk_state_change = Some(state_change::<T>);
            b::rdmadisk_write_unlock_bh(ptr::addr_of_mut!((*sk).sk_callback_lock));
        }
        self.hooked = true;
        Ok(())
    }

    fn unhook(&mut self) {
        if !mem::replace(&mut self.hooked, false) {
            return;
        }
        let sk = self.sk();
        // SAFETY: `hooked` says `sk_user_data` is the `Hook<T>` from `hook`. Once the
        // callbacks are restored under the write lock, no callback can be using it (they hold
        // the read lock while they do), so it may be freed.
        unsafe {
            b::rdmadisk_write_lock_bh(ptr::addr_of_mut!((*sk).sk_callback_lock));
            let hook = (*sk).sk_user_data.cast::<Hook<T>>();
            (*sk).sk_data_ready = (*hook).data_ready;
            (*sk).sk_state_change = (*hook).state_change;
            (*sk).sk_user_data = ptr::null_mut();
            b::rdmadisk_write_unlock_bh(ptr::addr_of_mut!((*sk).sk_callback_lock));
            drop(KBox::from_raw(hook));
        }
    }
}

/// Whether the module holds its count of `sk_memalloc_socks()` (see [`MemallocSocksHold`]).
static MEMALLOC_HELD: AtomicBool = AtomicBool::new(false);

/// The module's count of `sk_memalloc_socks()`: taken by the first TCP connect, given back
/// when this drops (at unload, after every socket).
///
/// `sk_set_memalloc` and the count's release in [`TcpSocket`]'s drop move a static key: at
/// zero, each one patches kernel text on every CPU. A disk's connections come and go many times
/// a second when a target misbehaves, and patching that often brought down a test VM (an int3
/// left in the receive path, `Oops: int3` in `netif_receive_skb_list_internal`). With this hold
/// the count never falls to zero once the module has made a TCP connection, so the key flips
/// at most once per load. It is taken lazily so that a load and unload with no TCP disk
/// patches nothing. The cost is the pfmemalloc check in the receive path meanwhile, as with
/// any connected nbd or iSCSI disk.
pub(crate) struct MemallocSocksHold(());

impl MemallocSocksHold {
    pub(crate) fn new() -> Self {
        Self(())
    }

    /// Takes the module's count if it is not taken yet. May sleep (the key's mutex).
    fn ensure() {
        if MEMALLOC_HELD
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            // SAFETY: Taken once per load (the exchange above); `drop` gives it back.
            unsafe { b::rdmadisk_memalloc_socks_inc() };
        }
    }
}

impl Drop for MemallocSocksHold {
    fn drop(&mut self) {
        if MEMALLOC_HELD.swap(false, Ordering::AcqRel) {
            // SAFETY: Gives back the count `ensure` took; the module owns the only
            // `MemallocSocksHold` and drops it after every socket.
            unsafe { b::rdmadisk_memalloc_socks_dec() };
        }
    }
}

impl<T: SockEvents> Drop for TcpSocket<T> {
    fn drop(&mut self) {
        self.shutdown();
        self.unhook();
        // `sk_clear_memalloc` is not called: clearing `SOCK_MEMALLOC` while an skb from the
        // reserves may still sit in the backlog would hit the BUG_ON in `__sk_backlog_rcv`
        // when `sock_release` processes that backlog (nbd and iscsi_tcp never clear it).
        // SAFETY: We own the socket and nothing else refers to it any more.
        unsafe { b::sock_release(self.sock.as_ptr()) };
        // SAFETY: Balances the `sk_set_memalloc` of `connect`, once the socket is released.
        // `connect` took the module's `MemallocSocksHold` count first, so this moves no key.
        unsafe { b::rdmadisk_memalloc_socks_dec() };
    }
}

/// Calls `f` with the hook of `sk`, if it is still hooked, under the read side of its
/// callback lock.
///
/// # Safety
///
/// `sk` is a live socket, and if its `sk_user_data` is non-null it is a `Hook<T>`.
unsafe fn with_hook<T: SockEvents, R>(
    sk: *mut b::sock,
    f: impl FnOnce(&Hook<T>) -> R,
) -> Option<R> {
    // SAFETY: Per the function's contract; the hook cannot be freed while the read lock is held.
    unsafe {
        let lock = ptr::addr_of_mut!((*sk).sk_callback_lock);
        b::rdmadisk_read_lock_bh(lock);
        let hook = (*sk).sk_user_data.cast::<Hook<T>>().cast_const();
        let r = hook.as_ref().map(f);
        b::rdmadisk_read_unlock_bh(lock);
        r
    }
}

unsafe extern "C" fn data_ready<T: SockEvents>(sk: *mut b::sock) {
    // SAFETY: The socket layer calls this only for a live socket, which `hook` installed it on
    // with a `Hook<T>` as `sk_user_data` (or null, once unhooked).
    unsafe { with_hook::<T, _>(sk, |h| T::data_ready(&h.owner)) };
}

unsafe extern "C" fn state_change<T: SockEvents>(sk: *mut b::sock) {
    // SAFETY: As for `data_ready`.
    let orig = unsafe {
        with_hook::<T, _>(sk, |h| {
            T::state_change(&h.owner);
            h.state_change
        })
    };
    // The socket's own state-change callback wakes its waiters (a blocked connect or send).
    if let Some(Some(f)) = orig {
        // SAFETY: `f` is the callback the socket had before `hook`, for this socket.
        unsafe { f(sk) };
    }
}
