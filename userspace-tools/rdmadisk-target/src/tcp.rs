//! The TCP transport: frames as in `rdmadisk_net::framing`, one thread per connection running
//! the connection's io_uring (socket receives and sends, and the backing I/O of its requests).
//!
//! Before anything is read, an accepted connection must come from an address the target
//! admits, and fit the connection caps; its whole Hello must then arrive within the Hello
//! deadline. Once attached, requests are read as they come, up to the credits granted: a
//! request beyond them is a protocol violation and resets the connection, so a client cannot
//! make the target buffer more than it granted. Responses go out in the order they are ready.

use std::collections::VecDeque;
use std::io::{self, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rdmadisk_net::framing;
use rdmadisk_proto::wire::{
    AuthRequest, FrameHeader, FrameKind, Hello, HelloReply, HelloStatus, Opcode, Request, Response,
    AUTH_REQUEST_LEN, FRAME_HEADER_LEN, HELLO_LEN, REQUEST_LEN,
};

use crate::conn::{Core, Stage, TICK, UD_KIND, UD_RECV, UD_SEND};
use crate::engine::{Challenge, Slot as CapSlot, Target, TCP_STAGING};
use crate::hostile::{self, Candidate, Chooser, Kind, Rng};
use crate::logging;
use crate::pool::{Buf, Pool, Reservation, Take};
use crate::ring::{Done, Setup};
use crate::stats::Stats;

/// Write data larger than max_io_bytes up to this size is drained and answered with an error;
/// anything larger is a malformed frame.
const DRAIN_MAX: u32 = 64 << 20;

/// A send of at most this many bytes is made whole by the ring (`Ring::sendmsg`).
const WHOLE: usize = 64 << 10;

/// Most responses one sendmsg carries (each is at most 5 iovecs, far below IOV_MAX).
const BATCH: usize = 64;

/// Accepts connections until shutdown; returns the connection threads to join.
pub fn serve(
    t: Arc<Target>,
    listener: TcpListener,
    pool: Arc<Pool>,
) -> Vec<thread::JoinHandle<()>> {
    let mut threads = Vec::new();
    if let Err(e) = listener.set_nonblocking(true) {
        log::error!("tcp: cannot poll the listener: {e}");
        return threads;
    }
    while !t.stopping() {
        threads.retain(|h: &thread::JoinHandle<()>| !h.is_finished());
        match listener.accept() {
            Ok((stream, peer)) => {
                // Checked before a byte is read: an address the target does not admit, or one
                // over the caps, costs nothing but this.
                if !t.admits(peer.ip()) {
                    Stats::inc(&t.stats.refused);
                    log::warn!(
                        "tcp: refused connection from {peer}: address not on the allow-list"
                    );
                    refuse_early(stream, HelloStatus::NotAllowed);
                    continue;
                }
                let Some(cap) = t.connection_slot(peer.ip()) else {
                    Stats::inc(&t.stats.refused);
                    log::warn!("tcp: refused connection from {peer}: too many connections");
                    refuse_early(stream, HelloStatus::Busy);
                    continue;
                };
                let Some(mem) = t.budget.reserve(TCP_STAGING) else {
                    Stats::inc(&t.stats.refused);
                    Stats::inc(&t.stats.memory_refusals);
                    let (used, _) = t.budget.used();
                    log::warn!(
                        "tcp: refused connection from {peer}: its receive buffer ({TCP_STAGING} bytes) does not fit in buffer_memory ({used} of {} bytes held, {} by connections)",
                        t.budget.max(),
                        t.budget.fixed()
                    );
                    refuse_early(stream, HelloStatus::Busy);
                    continue;
                };
                let tt = t.clone();
                let p = pool.clone();
                match thread::Builder::new()
                    .name(format!("tcp-{peer}"))
                    .spawn(move || {
                        crate::conn::serve(move || connection(tt, stream, peer, p, cap, mem))
                    }) {
                    Ok(h) => threads.push(h),
                    Err(e) => log::error!("tcp: cannot start a thread for {peer}: {e}"),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // Woken at once by a connection or the stop.
                let fds = [Some(listener.as_raw_fd()), t.stop_fd()];
                if let Err(e) = crate::wake::readable(&fds, Some(t.idle_wait())) {
                    log::error!("tcp: cannot poll the listener: {e}");
                    thread::sleep(TICK);
                }
            }
            Err(e) => {
                log::error!("tcp: accept failed: {e}");
                thread::sleep(TICK);
            }
        }
    }
    threads
}

/// Answers a connection refused on accept with its HelloReply, without reading anything
/// (the client reads it after sending its Hello), and closes it. Non-blocking: a client that
/// does not read gets nothing.
fn refuse_early(mut s: TcpStream, st: HelloStatus) {
    let _ = s.set_nonblocking(true);
    let mut b = Vec::new();
    let _ = framing::write_hello_reply(&mut b, &HelloReply::rejected(st));
    let _ = s.write(&b);
    let _ = s.shutdown(std::net::Shutdown::Write);
}

/// Closes with a reset: the peer learns at once, and no TIME_WAIT is left behind.
fn reset(s: &TcpStream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket we own with a valid linger struct.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &l as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// TCP keepalive: a dead peer (host gone, cable cut) is found within about a minute.
fn keepalive(s: &TcpStream) {
    let set = |level: i32, opt: i32, v: i32| {
        // SAFETY: setsockopt on a socket we own with an int option.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                level,
                opt,
                &v as *const _ as *const libc::c_void,
                std::mem::size_of::<i32>() as libc::socklen_t,
            );
        }
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 30);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 10);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3);
}

/// Reads exactly `buf.len()` bytes before `deadline`.
fn read_by(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(io::ErrorKind::TimedOut.into())
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The whole Hello, within the deadline.
fn read_hello(s: &mut TcpStream, deadline: Instant) -> Result<Hello, (HelloStatus, String)> {
    let mut b = [0u8; FRAME_HEADER_LEN + HELLO_LEN];
    read_by(s, &mut b, deadline).map_err(|e| {
        let why = if e.kind() == io::ErrorKind::TimedOut {
            "no complete Hello within the deadline".to_string()
        } else {
            format!("reading the Hello: {e}")
        };
        (HelloStatus::Invalid, why)
    })?;
    let h =
        FrameHeader::decode(&b).map_err(|e| (HelloStatus::Invalid, format!("bad frame: {e}")))?;
    if h.kind != FrameKind::Hello || h.flags != 0 || h.data_len != 0 {
        return Err((
            HelloStatus::Invalid,
            format!("expected a Hello, got {:?}", h.kind),
        ));
    }
    Hello::decode(&b[FRAME_HEADER_LEN..])
        .map_err(|e| (e.hello_status(), format!("bad Hello ({e})")))
}

fn connection(
    t: Arc<Target>,
    mut s: TcpStream,
    peer: SocketAddr,
    pool: Arc<Pool>,
    _cap: CapSlot,
    mem: Reservation,
) {
    Stats::inc(&t.stats.tcp_connections);
    let _ = s.set_nodelay(true);
    keepalive(&s);
    let deadline = Instant::now() + t.limits.hello_timeout;
    let hello = match read_hello(&mut s, deadline) {
        Ok(h) => h,
        Err((st, why)) => {
            Stats::inc(&t.stats.refused);
            if why.contains("deadline") {
                Stats::inc(&t.stats.hello_timeouts);
            }
            log::warn!("tcp {peer}: {why}; closing");
            let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = framing::write_hello_reply(&mut s, &HelloReply::rejected(st));
            reset(&s);
            return;
        }
    };
    let a = match t.attach(Some(peer), s.local_addr().ok(), &hello) {
        Ok(a) => a,
        Err(r) => {
            Stats::inc(&t.stats.refused);
            if r.status == HelloStatus::Stale {
                log::warn!(
                    "tcp: stale hello from {peer} for export {}: {}",
                    hello.export,
                    r.why
                );
            } else {
                log::warn!(
                    "tcp: refused {peer} for export {:?}: {}",
                    hello.export.as_str(),
                    r.why
                );
            }
            let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = framing::write_hello_reply(&mut s, &r.reply());
            return;
        }
    };
    // With a key, after the proof (`authenticate`).
    if a.challenge.is_none() && t.claim(&a.export, a.writes, &peer.to_string()).is_err() {
        Stats::inc(&t.stats.refused);
        let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
        let _ = framing::write_hello_reply(&mut s, &HelloReply::rejected(HelloStatus::Busy));
        return;
    }
    let _ = s.set_write_timeout(Some(t.limits.send_timeout));
    if framing::write_hello_reply(&mut s, &a.reply(&t)).is_err() {
        return;
    }
    log::info!(
        "tcp: {peer} attached to export {} (queue {}/{}, session {} epoch {})",
        a.export.name,
        hello.queue_id,
        hello.queue_count,
        hello.session_id,
        hello.epoch
    );
    let credits = usize::from(t.limits.credits);
    let mut core = match Core::new(t.clone(), a.export, a.fence, a.writes, pool, 2 * credits) {
        Ok(c) => c,
        Err(e) => {
            log::error!("tcp {peer}: cannot set up the connection's ring: {e}");
            return;
        }
    };
    core.register(crate::registry::Attach {
        export: core.export.name.clone(),
        peer: Some(peer),
        transport: crate::registry::Transport::Tcp,
        session: hello.session_id,
        epoch: hello.epoch,
        queue: hello.queue_id,
        queues: hello.queue_count,
        read_write: core.writes,
    });
    let mut c = Conn {
        core,
        staging: vec![0u8; TCP_STAGING],
        _mem: mem,
        s,
        peer,
        start: 0,
        end: 0,
        recv_posted: false,
        parse: Parse::Head,
        credits_used: 0,
        credits,
        out: VecDeque::new(),
        sending: None,
        send_queued: false,
        chooser: Chooser::default(),
        rng: Rng::new(u64::from(peer.port())),
        closing: None,
        eof: false,
        auth: a.challenge,
        auth_deadline: deadline,
        stalled_since: None,
    };
    // With no key, the client (from a reserved port) is trusted at once: the connection is
    // up, and it takes its hold and its fence before its first request.
    let confirmed = if c.auth.is_none() {
        c.core.confirm()
    } else {
        Ok(())
    };
    let end = match confirmed {
        Ok(()) => c.run(),
        Err(why) => End::Reset(why.to_string()),
    };
    match end {
        End::Closed => log::info!("tcp {peer}: closed"),
        End::Ended(why) => log::info!("tcp {peer}: {why}; closing this connection"),
        End::Reset(why) => {
            // A hostile act of our own is counted apart (hostile_resets), and so is a failed
            // authentication (auth_failures).
            if !why.starts_with("a hostile act") && why != "authentication failed" {
                Stats::inc(&t.stats.resets);
            }
            log::warn!("tcp {peer}: {why}; resetting this connection");
        }
    }
    let _ = c.s.shutdown(std::net::Shutdown::Both);
}

/// How a connection ended.
enum End {
    /// The client closed it, or the target shut down with nothing left to do.
    Closed,
    /// A deadline (idle, a client that does not read, the shutdown timeout) closed it.
    Ended(String),
    /// A protocol violation or a transport failure reset it.
    Reset(String),
}

/// Where the reader is in the byte stream.
enum Parse {
    /// Waiting for a frame header and its request.
    Head,
    /// Receiving `req`'s write data into `buf` (slot `slot`), `got` bytes so far.
    Data {
        slot: usize,
        req: Request,
        buf: Buf,
        got: usize,
    },
    /// A write needs a buffer and none is free: reading stops until one is (`waited`: the
    /// wait is counted).
    NeedBuf {
        slot: usize,
        req: Request,
        waited: bool,
    },
    /// Throwing away `left` bytes of write data of a request refused as too large; then
    /// slot `slot` is answered.
    Skip {
        slot: usize,
        req: Request,
        left: u32,
    },
}

/// Part of what goes out on the socket.
enum Part {
    Owned(Vec<u8>),
    /// The read data of a slot.
    Data(usize, usize),
}

/// One response (or hostile act) to send; `slot` is released when it has gone out.
struct Out {
    parts: Vec<Part>,
    slot: Option<usize>,
    /// Close the connection once it is sent.
    then_close: bool,
}

/// What one sendmsg carries: the responses queued when it started, in order (up to
/// [`BATCH`] of them, and none after one that closes the stream).
struct Sending {
    outs: Vec<Out>,
    /// Bytes of `outs` sent so far.
    done: usize,
    iov: Vec<libc::iovec>,
    msg: libc::msghdr,
    since: Instant,
}

// Teardown (`Drop`) waits for the socket's ring operations before any buffer they name goes
// (and keeps those buffers for good if it cannot); `core` then waits for the backing I/O.
struct Conn {
    core: Core,
    staging: Vec<u8>,
    s: TcpStream,
    peer: SocketAddr,
    /// Unparsed bytes are staging[start..end].
    start: usize,
    end: usize,
    recv_posted: bool,
    parse: Parse,
    /// Requests read whose response has not been queued yet (the credits in use).
    credits_used: usize,
    credits: usize,
    out: VecDeque<Out>,
    sending: Option<Box<Sending>>,
    /// A send of a whole response was queued in this pass (not yet submitted); see `run`.
    send_queued: bool,
    chooser: Chooser,
    rng: Rng,
    /// Why the connection is ending, once it is: responses queued are still sent.
    closing: Option<String>,
    eof: bool,
    /// The client has yet to answer this challenge; nothing else is served until it has.
    auth: Option<Challenge>,
    auth_deadline: Instant,
    /// Since when the client owes the rest of a frame it started, without sending a byte:
    /// a frame is finished within the send timeout, so a stalled client cannot keep a data
    /// buffer (or its slot) for ever.
    stalled_since: Option<Instant>,
    /// `staging`'s share of the buffer budget.
    _mem: Reservation,
}

impl Conn {
    /// Runs the connection until it ends.
    fn run(&mut self) -> End {
        let t = self.core.t.clone();
        let mut other = Vec::new();
        let mut stop_at: Option<Instant> = None;
        loop {
            if let Err(why) = self.pump() {
                self.closing.get_or_insert(why);
            }
            if self.closing.is_some() && self.sending.is_none() && self.out.is_empty() {
                break;
            }
            if self.eof && self.core.working() == 0 && self.sending.is_none() && self.out.is_empty()
            {
                return End::Closed;
            }
            // Deadlines.
            let now = Instant::now();
            if self.core.leaving() {
                let at = *stop_at.get_or_insert(now + t.limits.shutdown_timeout);
                if self.core.working() == 0 && self.sending.is_none() && self.out.is_empty() {
                    return match self.core.evicted() {
                        Some(why) => End::Ended(why),
                        None => End::Closed,
                    };
                }
                if now >= at {
                    return End::Ended("still busy at the end of the shutdown timeout".into());
                }
            }
            if let Some(s) = &self.sending {
                if now.duration_since(s.since) > t.limits.send_timeout {
                    Stats::inc(&t.stats.send_timeouts);
                    return End::Ended(format!(
                        "a response could not be sent for {} s (the client does not read)",
                        t.limits.send_timeout.as_secs()
                    ));
                }
            }
            if self.auth.is_some() && now > self.auth_deadline {
                Stats::inc(&t.stats.hello_timeouts);
                return End::Ended("no authentication within the deadline".into());
            }
            // A started frame (part of a header, or write data; not a write waiting for a buffer
            // of ours) must keep coming.
            let owes = match self.parse {
                Parse::Data { .. } | Parse::Skip { .. } => true,
                Parse::NeedBuf { .. } => false,
                Parse::Head => self.end > self.start,
            };
            if !owes {
                self.stalled_since = None;
            } else if now.duration_since(*self.stalled_since.get_or_insert(now))
                > t.limits.send_timeout
            {
                Stats::inc(&t.stats.recv_timeouts);
                return End::Ended(format!(
                    "the rest of a frame did not come for {} s",
                    t.limits.send_timeout.as_secs()
                ));
            }
            // No idle close on TCP: the kernel client sends no keepalive messages there, and
            // TCP keepalive (30 s, then 3 probes 10 s apart) finds a peer that is gone.
            other.clear();
            // A tick while anything is under way; else until the socket, the stop, or the
            // backing I/O has news (its receive is always on the ring).
            let wait = if owes
                || matches!(self.parse, Parse::NeedBuf { .. })
                || self.core.leaving()
                || self.core.busy() > 0
                || self.sending.is_some()
                || !self.out.is_empty()
                || self.auth.is_some()
                || self.closing.is_some()
            {
                TICK
            } else {
                self.core.idle_wait()
            };
            // A response sent whole that nothing waits for (no response queued behind it, no
            // request here or on another connection short of the buffer its end gives back,
            // no end to reach) does not end the wait by itself: on a socket with room it
            // completes within the submission, and the thread sleeps on until the next request
            // or completion, one system call for both. (At worst, on a full socket, its
            // completion waits for the next one or the tick, as an RDMA response's does.)
            let quiet = std::mem::take(&mut self.send_queued)
                && self.out.is_empty()
                && self
                    .sending
                    .as_ref()
                    .is_some_and(|sn| sn.outs.last().is_some_and(|o| !o.then_close))
                && !matches!(self.parse, Parse::NeedBuf { .. })
                && !self.core.waits_for_buffers()
                && !t.starved()
                && self.closing.is_none()
                && !self.eof
                && !self.core.leaving();
            if let Err(e) = self
                .core
                .turn_for(Some(wait), 1 + usize::from(quiet), &mut other)
            {
                return End::Reset(format!("ring: {e}"));
            }
            for d in other.drain(..) {
                match d.user_data & UD_KIND {
                    UD_RECV => self.received(d),
                    UD_SEND => self.sent(d),
                    _ => {}
                }
            }
        }
        match self.closing.take() {
            Some(why) => End::Reset(why),
            None => End::Closed,
        }
    }

    /// Moves everything along that can move without waiting: parses what was received,
    /// queues ready responses, starts a send and a receive.
    fn pump(&mut self) -> Result<(), String> {
        self.core.poll_waiting();
        if self.closing.is_none() {
            self.parse()?;
        }
        while let Some(i) = self.core.to_answer.pop_front() {
            self.queue_response(i);
        }
        // TCP write data comes with the request: nothing to fetch.
        debug_assert!(self.core.to_fetch.is_empty());
        self.start_send()?;
        if self.closing.is_none() && !self.recv_posted && !self.eof && self.wants_bytes() {
            if self.start > 0 && self.start == self.end {
                self.start = 0;
                self.end = 0;
            }
            if self.end == self.staging.len() {
                self.staging.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            let free = &mut self.staging[self.end..];
            // SAFETY: `staging` belongs to this connection; nothing touches staging[end..]
            // until this receive completes (`recv_posted`), and teardown (`Conn`'s drop) waits
            // for that, or keeps `staging` for good if it cannot.
            unsafe {
                self.core.ring.recv(
                    self.s.as_raw_fd(),
                    free.as_mut_ptr(),
                    free.len() as u32,
                    UD_RECV,
                )
            }
            .map_err(|e| format!("cannot receive: {e}"))?;
            self.recv_posted = true;
        }
        Ok(())
    }

    /// Whether the parser can use more bytes now.
    fn wants_bytes(&self) -> bool {
        !matches!(self.parse, Parse::NeedBuf { .. }) && !self.core.leaving()
    }

    fn received(&mut self, d: Done) {
        self.recv_posted = false;
        match d.result {
            0 => self.eof = true,
            n if n > 0 => {
                self.end += n as usize;
                self.stalled_since = None;
            }
            e if -e == libc::EINTR || -e == libc::EAGAIN => {}
            e => {
                self.closing.get_or_insert(format!(
                    "receive failed: {}",
                    io::Error::from_raw_os_error(-e)
                ));
            }
        }
    }

    /// Parses frames from the staging bytes.
    fn parse(&mut self) -> Result<(), String> {
        loop {
            let avail = self.end - self.start;
            match &mut self.parse {
                Parse::Head => {
                    if avail < FRAME_HEADER_LEN || self.core.leaving() {
                        return Ok(());
                    }
                    // The header alone says whether this is a frame at all: garbage resets the
                    // connection without waiting for more of it.
                    let b = &self.staging[self.start..self.end];
                    let h = FrameHeader::decode(b).map_err(|e| format!("malformed frame ({e})"))?;
                    if h.flags != 0 {
                        return Err(format!("a {:?} frame with flags {:#x}", h.kind, h.flags));
                    }
                    match (h.kind, self.auth.is_some()) {
                        (FrameKind::Request, false) => {}
                        (FrameKind::Request, true) => {
                            Stats::inc(&self.core.t.stats.auth_failures);
                            return Err("a request before authentication".into());
                        }
                        (FrameKind::Auth, false) => {
                            return Err("an authentication nobody asked for".into())
                        }
                        (FrameKind::Auth, true) => {
                            if h.data_len != 0 {
                                return Err("an authentication with data".into());
                            }
                            if avail < FRAME_HEADER_LEN + AUTH_REQUEST_LEN {
                                return Ok(());
                            }
                            let a = AuthRequest::decode(&b[FRAME_HEADER_LEN..])
                                .map_err(|e| format!("malformed authentication ({e})"))?;
                            self.start += FRAME_HEADER_LEN + AUTH_REQUEST_LEN;
                            if self.authenticate(&a)? {
                                continue;
                            }
                            // Nothing more is read; the answer goes out, then the connection.
                            return Ok(());
                        }
                        (k, _) => return Err(format!("unexpected {k:?} frame")),
                    }
                    if avail < FRAME_HEADER_LEN + REQUEST_LEN {
                        return Ok(());
                    }
                    let req = Request::decode(&b[FRAME_HEADER_LEN..])
                        .map_err(|e| format!("malformed request ({e})"))?;
                    let expect = if req.opcode == Opcode::Write {
                        req.length
                    } else {
                        0
                    };
                    if h.data_len != expect {
                        return Err(format!(
                            "{:?} tag {} carries {} data bytes, expected {expect}",
                            req.opcode, req.tag, h.data_len
                        ));
                    }
                    if h.data_len > DRAIN_MAX {
                        return Err(format!("a frame of {} data bytes", h.data_len));
                    }
                    if self.credits_used >= self.credits {
                        Stats::inc(&self.core.t.stats.credit_overruns);
                        return Err(format!(
                            "a request beyond the {} credits granted",
                            self.credits
                        ));
                    }
                    let Some(slot) = self.core.free_slot() else {
                        Stats::inc(&self.core.t.stats.credit_overruns);
                        return Err("no slot for a request within the credits".into());
                    };
                    self.start += FRAME_HEADER_LEN + REQUEST_LEN;
                    self.credits_used += 1;
                    self.parse = if h.data_len == 0 {
                        self.core.start(slot, req, None)?;
                        Parse::Head
                    } else if h.data_len as usize > self.core.pool.max_len() {
                        Parse::Skip {
                            slot,
                            req,
                            left: h.data_len,
                        }
                    } else {
                        Parse::NeedBuf {
                            slot,
                            req,
                            waited: false,
                        }
                    };
                }
                Parse::NeedBuf { slot, req, waited } => {
                    let (slot, req) = (*slot, *req);
                    // (TCP's buffers are made on the spot: no demand to keep.)
                    let c = &self.core;
                    match c.pool.get(req.length as usize, c.kick.as_ref(), &mut None) {
                        Ok(Take::Got(buf)) => {
                            self.parse = Parse::Data {
                                slot,
                                req,
                                buf,
                                got: 0,
                            }
                        }
                        Ok(_) => {
                            if !*waited {
                                *waited = true;
                                Stats::inc(&self.core.t.stats.buffer_waits);
                            }
                            return Ok(());
                        }
                        Err(e) => return Err(format!("cannot make a data buffer: {e}")),
                    }
                }
                Parse::Data { req, buf, got, .. } => {
                    let want = req.length as usize - *got;
                    let n = want.min(avail);
                    buf.as_mut_slice()[*got..*got + n]
                        .copy_from_slice(&self.staging[self.start..self.start + n]);
                    *got += n;
                    self.start += n;
                    if *got < req.length as usize {
                        return Ok(());
                    }
                    let Parse::Data { slot, req, buf, .. } =
                        std::mem::replace(&mut self.parse, Parse::Head)
                    else {
                        unreachable!()
                    };
                    self.core.start(slot, req, Some(buf))?;
                }
                Parse::Skip { slot, req, left } => {
                    let n = (*left as usize).min(avail);
                    *left -= n as u32;
                    self.start += n;
                    if *left > 0 {
                        return Ok(());
                    }
                    let (slot, req) = (*slot, *req);
                    self.parse = Parse::Head;
                    // Refused by admission (too long): answered without data.
                    self.core.start(slot, req, None)?;
                }
            }
        }
    }

    /// Answers the client's authentication with the target's own proof (true: the connection
    /// serves from now on) or with Denied (false: nothing more is read; the answer goes out,
    /// then the connection).
    fn authenticate(&mut self, a: &AuthRequest) -> Result<bool, String> {
        let Some(ch) = self.auth.take() else {
            return Err("an authentication nobody asked for".into());
        };
        let (ok, reply) = ch.answer(&self.core.t, a);
        if ok {
            // Another host may have attached read-write meanwhile: its next Hello is answered
            // Busy.
            self.core.confirm()?;
            // No answer then: the client sees its connect fail, and may try another gateway.
            self.core
                .t
                .claim(&self.core.export, self.core.writes, &self.peer.to_string())?;
            self.core.instance = self.core.export.backing.instance();
        }
        let mut v = FrameHeader {
            kind: FrameKind::AuthReply,
            flags: 0,
            data_len: 0,
        }
        .to_bytes()
        .to_vec();
        v.extend_from_slice(&reply.to_bytes());
        self.out.push_back(Out {
            parts: vec![Part::Owned(v)],
            slot: None,
            then_close: !ok,
        });
        if ok {
            log::info!("tcp {}: authenticated", self.peer);
            return Ok(true);
        }
        if reply.status == rdmadisk_proto::wire::Status::Fenced {
            self.closing = Some(format!(
                "authenticated, and refused: superseded session (the fence is at session {})",
                reply.session_floor
            ));
            return Ok(false);
        }
        log::warn!(
            "tcp {}: authentication failed for export {}: wrong proof",
            self.peer,
            self.core.export.name
        );
        self.closing = Some("authentication failed".into());
        Ok(false)
    }

    /// Queues the response of slot `i` (its credit goes back with it).
    fn queue_response(&mut self, i: usize) {
        self.credits_used = self.credits_used.saturating_sub(1);
        let t = self.core.t.clone();
        let s = &self.core.slots[i];
        let resp = t.response(&self.core.export, &s.req, s.status, s.crc);
        let n = s.out_len();
        let hostile = self.chooser.pick(
            &t.limits.hostile,
            &t.hostile_turn,
            &Candidate {
                tcp: true,
                opcode: s.req.opcode,
                ok: s.status == rdmadisk_proto::wire::Status::Ok,
                invalidates: false,
                spare_send: true,
            },
        );
        let frame = |r: &Response, data: usize| -> Vec<u8> {
            let mut v = FrameHeader {
                kind: FrameKind::Response,
                flags: 0,
                data_len: data as u32,
            }
            .to_bytes()
            .to_vec();
            v.extend_from_slice(&r.to_bytes());
            v
        };
        let data = |parts: &mut Vec<Part>| {
            if n > 0 {
                parts.push(Part::Data(i, n));
            }
        };
        let mut parts = Vec::new();
        let mut then_close = false;
        match hostile {
            None => {
                parts.push(Part::Owned(frame(&resp, n)));
                data(&mut parts);
            }
            Some(k) => {
                t.count_hostile(k);
                // One line per act, naming the connection: a test pairs them with how each
                // connection ended, and with the client's reasons for resetting it, so the
                // rate limit must drop none (this mode is for tests only).
                logging::unthrottled(
                    log::Level::Info,
                    &format!("tcp {}: hostile {} sent", self.peer, k.name()),
                );
                match k {
                    Kind::UnknownTag => {
                        parts.push(Part::Owned(frame(&hostile::unknown_tag(&resp), 0)));
                        parts.push(Part::Owned(frame(&resp, n)));
                        data(&mut parts);
                    }
                    Kind::DupResponse => {
                        parts.push(Part::Owned(frame(&resp, n)));
                        data(&mut parts);
                        parts.push(Part::Owned(frame(&hostile::duplicate(&resp), n)));
                        data(&mut parts);
                    }
                    Kind::BadStatus => {
                        let mut v = frame(&resp, n);
                        v[FRAME_HEADER_LEN..].copy_from_slice(&hostile::bad_status(&resp));
                        parts.push(Part::Owned(v));
                        data(&mut parts);
                    }
                    Kind::LongLength => {
                        // Zeroes, never more of the export: the extra must not leak anything.
                        let extra = hostile::LONG_EXTRA as usize;
                        parts.push(Part::Owned(frame(&hostile::long_length(&resp), n + extra)));
                        data(&mut parts);
                        parts.push(Part::Owned(vec![0u8; extra]));
                    }
                    Kind::Truncated => {
                        parts.push(Part::Owned(hostile::truncated_frame(&resp, n as u32)));
                        then_close = true;
                        log::warn!(
                            "tcp {}: hostile truncated response sent; closing this connection",
                            self.peer
                        );
                    }
                    Kind::Garbage => {
                        parts.push(Part::Owned(hostile::garbage_frame(&mut self.rng).to_vec()))
                    }
                    Kind::CreditOverflow => {
                        parts.push(Part::Owned(frame(&hostile::credit_overflow(&resp), n)));
                        data(&mut parts);
                    }
                    // Never chosen on TCP (Kind::fits); answered normally should that change.
                    Kind::WrongRkey | Kind::NoInvalidate | Kind::LateWrite => {
                        parts.push(Part::Owned(frame(&resp, n)));
                        data(&mut parts);
                    }
                }
            }
        }
        self.core.responded(i);
        self.out.push_back(Out {
            parts,
            slot: Some(i),
            then_close,
        });
    }

    /// Starts sending the queued responses if none is being sent: all of them (up to
    /// [`BATCH`]) in one sendmsg, so that a connection with many requests in flight does not
    /// need a ring completion, and a system call, per response. A response that closes the
    /// stream is the last of its send.
    fn start_send(&mut self) -> Result<(), String> {
        if self.sending.is_some() || self.out.is_empty() {
            return Ok(());
        }
        let mut outs = Vec::new();
        while outs.len() < BATCH {
            let Some(out) = self.out.pop_front() else {
                break;
            };
            let last = out.then_close;
            outs.push(out);
            if last {
                break;
            }
        }
        let mut sn = Box::new(Sending {
            outs,
            done: 0,
            iov: Vec::new(),
            // SAFETY: msghdr is plain data; all-zero is an empty message.
            msg: unsafe { std::mem::zeroed() },
            since: Instant::now(),
        });
        if let Err(why) = self.post_send(&mut sn) {
            self.release_all(&sn);
            return Err(why);
        }
        self.sending = Some(sn);
        Ok(())
    }

    /// The slots of the responses of `sn`, released (sent, or never to be).
    fn release_all(&mut self, sn: &Sending) {
        for o in &sn.outs {
            if let Some(i) = o.slot {
                self.core.release(i);
            }
        }
    }

    /// (Re)builds the iovecs of what is left of `sn` and posts one sendmsg.
    fn post_send(&mut self, sn: &mut Sending) -> Result<(), String> {
        sn.iov.clear();
        let mut skip = sn.done;
        for p in sn.outs.iter().flat_map(|o| &o.parts) {
            let bytes: &[u8] = match p {
                Part::Owned(v) => v,
                Part::Data(i, n) => match &self.core.slots[*i].buf {
                    Some(b) => &b.as_slice()[..*n],
                    None => &[],
                },
            };
            if skip >= bytes.len() {
                skip -= bytes.len();
                continue;
            }
            sn.iov.push(libc::iovec {
                iov_base: bytes[skip..].as_ptr() as *mut libc::c_void,
                iov_len: bytes.len() - skip,
            });
            skip = 0;
        }
        sn.msg.msg_iov = sn.iov.as_mut_ptr();
        sn.msg.msg_iovlen = sn.iov.len() as _;
        // At most WHOLE bytes are sent whole: the ring sends the rest itself if the socket
        // takes only part (`run` counts on one completion for them). More complete part by
        // part, so that the send timeout starts again with each.
        let left: usize = sn.iov.iter().map(|v| v.iov_len).sum();
        let whole = left <= WHOLE && self.core.ring.setup() == Setup::Deferred;
        // SAFETY: the message, its iovec array and the bytes they name (the `Out`s' own parts,
        // and the buffers of slots in `Answer`, which are not released or reused until this
        // send completes) live in `self.sending`/`self.core` until the completion is taken in
        // `sent`; teardown (`Conn`'s drop) waits for the send first, and if it cannot, keeps
        // the message and the iovecs for good and the slots' buffers with the ring (`Core`).
        unsafe {
            self.core
                .ring
                .sendmsg(self.s.as_raw_fd(), &sn.msg, whole, UD_SEND)
        }
        .map_err(|e| format!("cannot send: {e}"))?;
        self.send_queued = whole;
        Ok(())
    }

    /// Posts the rest of a send; if that fails, the connection ends (nothing is in flight for
    /// it then, so nothing is left waiting for the send timeout).
    fn resend(&mut self, mut sn: Box<Sending>) {
        match self.post_send(&mut sn) {
            Ok(()) => self.sending = Some(sn),
            Err(why) => {
                self.closing.get_or_insert(why);
                self.release_all(&sn);
            }
        }
    }

    fn sent(&mut self, d: Done) {
        let Some(mut sn) = self.sending.take() else {
            return;
        };
        if d.result < 0 {
            let e = -d.result;
            if e == libc::EINTR || e == libc::EAGAIN {
                return self.resend(sn);
            }
            self.closing
                .get_or_insert(format!("send failed: {}", io::Error::from_raw_os_error(e)));
            self.release_all(&sn);
            return;
        }
        sn.done += d.result as usize;
        let total: usize = sn
            .outs
            .iter()
            .flat_map(|o| &o.parts)
            .map(|p| match p {
                Part::Owned(v) => v.len(),
                Part::Data(_, n) => *n,
            })
            .sum();
        if sn.done < total {
            // Progress: the send timeout is for a client that reads nothing, not a slow one.
            sn.since = Instant::now();
            return self.resend(sn);
        }
        for o in &sn.outs {
            if let Some(i) = o.slot {
                debug_assert_eq!(self.core.slots[i].stage, Stage::Answer);
            }
        }
        self.release_all(&sn);
        if let Some(last) = sn.outs.last().filter(|o| o.then_close) {
            // The stream ends here: what was queued behind it is not sent.
            for o in self.out.drain(..) {
                if let Some(i) = o.slot {
                    self.core.release(i);
                }
            }
            if last.slot.is_some() {
                self.closing
                    .get_or_insert("a hostile act ended the stream (truncated response)".into());
                Stats::inc(&self.core.t.stats.hostile_resets);
            }
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Ends the socket's own ring operations, so that the drain does not wait for a
        // receive that would never come.
        let _ = self.s.shutdown(std::net::Shutdown::Both);
        let _ = self.s.flush();
        for d in self.core.drain() {
            match d.user_data & UD_KIND {
                UD_RECV => self.recv_posted = false,
                UD_SEND => self.sending = None,
                _ => {}
            }
        }
        // A receive or send still in flight (the drain gave up: the ring is stuck) may still
        // use the staging buffer or the send's iovecs: kept for good rather than freed. The
        // slots' buffers the send names stay with the ring (`Core`'s drop).
        if self.recv_posted {
            std::mem::forget(std::mem::take(&mut self.staging));
        }
        if let Some(sn) = self.sending.take() {
            std::mem::forget(sn);
        }
    }
}
