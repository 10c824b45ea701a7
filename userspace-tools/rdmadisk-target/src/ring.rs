//! One connection's io_uring: the backing I/O of its requests, and (TCP) its socket I/O, all
//! completing in one place, so that a connection thread can have many requests in flight and
//! wait for whichever finishes first.
//!
//! Every operation names memory the kernel reads or writes until the operation completes. The
//! submitting functions are therefore `unsafe`, with one contract: the memory stays allocated
//! and untouched by the program until the completion carrying the operation's `user_data` has
//! been taken from [`Ring::wait`]. The connection code keeps it by construction (a request's
//! buffer belongs to its slot, which does nothing else until its completion arrives), and
//! [`Ring::drain`] waits for every operation before the memory may go.
//!
//! A ring belongs to one thread: the first that submits to it or waits on it (it may be made
//! elsewhere, as an RDMA connection's is, by the listener). Where the kernel has them (Linux
//! 6.1), rings are made with `IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN`: the
//! work that turns finished I/O into completions then runs only when that thread asks for
//! completions, never interrupting it mid-pass, and the ring takes no locks for other
//! submitters. Only that thread may then submit, wait or register on it, so it is made
//! disabled (`IORING_SETUP_R_DISABLED`) and enabled by its first user. Failing that (EINVAL),
//! `IORING_SETUP_COOP_TASKRUN` (Linux 5.19: no interrupt, the work waits for the thread's next
//! system call), failing that no flag ([`Setup`]).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types, EnterFlags, IoUring};

/// A completion: the `user_data` given at submission and the result (bytes, or `-errno`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    pub user_data: u64,
    pub result: i32,
    /// The operation goes on (a multishot poll, [`Ring::poll_in_multi`]): more completions
    /// will come for it. Its last says `false`.
    pub more: bool,
}

/// How a ring was set up: the first of these, in this order, that the kernel takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setup {
    /// `IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_TASKRUN_FLAG`
    /// (with `IORING_SETUP_R_DISABLED` until its thread enables it).
    Deferred,
    /// `IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG`.
    Cooperative,
    /// No flag.
    Plain,
}

impl Setup {
    const ALL: [Setup; 3] = [Setup::Deferred, Setup::Cooperative, Setup::Plain];

    /// For the log.
    pub fn name(self) -> &'static str {
        match self {
            Setup::Deferred => "SINGLE_ISSUER|DEFER_TASKRUN|TASKRUN_FLAG",
            Setup::Cooperative => "COOP_TASKRUN|TASKRUN_FLAG",
            Setup::Plain => "no flags",
        }
    }

    /// The `ring_setup` gauge of the stats: 3, 2 or 1 (0: no ring made yet).
    pub fn gauge(self) -> u64 {
        match self {
            Setup::Deferred => 3,
            Setup::Cooperative => 2,
            Setup::Plain => 1,
        }
    }
}

/// The first of [`Setup::ALL`] worth trying: the ones before it were refused.
static FIRST_SETUP: AtomicU8 = AtomicU8::new(0);
/// 1 + the index of the set-up last logged (0: none yet).
static LOGGED_SETUP: AtomicU8 = AtomicU8::new(0);

/// The `user_data` of the ring's own poll of its mailbox's eventfd (the top byte: not a kind
/// the connections use, `conn.rs`).
const UD_MAIL: u64 = 0xfe << 56;

/// Completions that other threads deliver to a ring: a backing store that completes on threads
/// of its own (librbd's) posts them here, and the eventfd it writes wakes the ring's thread,
/// whose wait takes them as it takes the kernel's ([`Ring::mailbox`]).
pub struct Mailbox {
    queue: Mutex<Vec<Done>>,
    efd: OwnedFd,
}

impl Mailbox {
    fn new() -> io::Result<Mailbox> {
        // SAFETY: no pointer; the fd returned is checked, then owned here.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Mailbox {
            queue: Mutex::new(Vec::new()),
            // SAFETY: a new fd that nothing else owns.
            efd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Delivers the completion of an operation started with [`Ring::started_elsewhere`]. Any
    /// thread; never blocks but on the queue's lock, held only to push or take.
    pub fn post(&self, user_data: u64, result: i32) {
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Done {
                user_data,
                result,
                more: false,
            });
        let one = 1u64;
        // SAFETY: writes 8 bytes from a local to an eventfd this owns. It cannot fail but with
        // a full counter (EAGAIN), which leaves the fd readable: all the wake-up needs.
        let _ = unsafe { libc::write(self.efd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn waiting(&self) -> bool {
        !self
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    /// Moves the posted completions to `out`; how many.
    fn take(&self, out: &mut Vec<Done>) -> usize {
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let n = q.len();
        out.append(&mut q);
        n
    }

    /// Resets the eventfd's counter, so that the next poll waits for the next post.
    fn reset(&self) {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into a local from our non-blocking eventfd (EAGAIN when 0).
        let _ = unsafe { libc::read(self.efd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

pub struct Ring {
    ring: IoUring,
    /// Operations submitted and not yet completed, the mailbox's included
    /// ([`Ring::started_elsewhere`]); not the ring's own poll of its mailbox.
    inflight: usize,
    mail: Option<Arc<Mailbox>>,
    /// A poll of the mailbox's eventfd is on the ring.
    mail_polled: bool,
    setup: Setup,
    /// A [`Setup::Deferred`] ring is made disabled, and enabled by the thread that first
    /// submits or waits: the one thread that may use it from then on.
    enabled: bool,
    /// The fd registered as the ring's fixed file 0 ([`Ring::register_file`]).
    fixed: Option<RawFd>,
}

/// Builds an entry on `$fd` given by `$ring`'s fixed file when it is that fd, by its number
/// otherwise: `$build` is called with a `types::Fixed` or a `types::Fd`.
macro_rules! on_fd {
    ($ring:expr, $fd:expr, |$f:ident| $build:expr) => {
        match $ring.fixed {
            Some(x) if x == $fd => {
                let $f = types::Fixed(0);
                $build
            }
            _ => {
                let $f = types::Fd($fd);
                $build
            }
        }
    };
}

impl Ring {
    /// A ring for about `depth` operations in flight.
    pub fn new(depth: u32) -> io::Result<Ring> {
        let mut first = usize::from(FIRST_SETUP.load(Ordering::Relaxed));
        loop {
            let setup = Setup::ALL[first.min(Setup::ALL.len() - 1)];
            match Ring::with_setup(depth, setup) {
                Ok(ring) => {
                    let n = first as u8 + 1;
                    if LOGGED_SETUP.swap(n, Ordering::Relaxed) != n {
                        log::info!("io_uring: connections' rings set up with {}", setup.name());
                    }
                    return Ok(ring);
                }
                // A kernel that does not know a flag refuses it so: the next set, and for the
                // rings that follow too.
                Err(e)
                    if e.raw_os_error() == Some(libc::EINVAL) && first + 1 < Setup::ALL.len() =>
                {
                    first += 1;
                    FIRST_SETUP.fetch_max(first as u8, Ordering::Relaxed);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A ring set up with `setup`, or the kernel's refusal.
    fn with_setup(depth: u32, setup: Setup) -> io::Result<Ring> {
        let entries = depth.clamp(8, 4096).next_power_of_two();
        let mut b = IoUring::builder();
        b.setup_cqsize(entries * 2);
        match setup {
            Setup::Deferred => {
                b.setup_single_issuer()
                    .setup_defer_taskrun()
                    .setup_taskrun_flag()
                    .setup_r_disabled();
            }
            Setup::Cooperative => {
                b.setup_coop_taskrun().setup_taskrun_flag();
            }
            Setup::Plain => {}
        }
        Ok(Ring {
            ring: b.build(entries)?,
            inflight: 0,
            setup,
            enabled: setup != Setup::Deferred,
            fixed: None,
            mail: None,
            mail_polled: false,
        })
    }

    /// The ring's mailbox (made on first use): where operations that complete on other threads
    /// deliver their completions. Each such operation is counted with
    /// [`Ring::started_elsewhere`] when it starts, so that [`Ring::drain`] waits for it too.
    pub fn mailbox(&mut self) -> io::Result<Arc<Mailbox>> {
        if let Some(m) = &self.mail {
            return Ok(m.clone());
        }
        let m = Arc::new(Mailbox::new()?);
        self.mail = Some(m.clone());
        Ok(m)
    }

    /// Counts an operation whose completion will come through the mailbox.
    pub fn started_elsewhere(&mut self) {
        self.inflight += 1;
    }

    /// Registers `fd` (the export's file) as the ring's fixed file (`IORING_REGISTER_FILES`):
    /// the operations on it name it by index, and the kernel no longer looks the fd up and
    /// takes a reference on the file for each. Before the ring is used (another thread's ring
    /// refuses it). The ring holds the file until it is dropped; `fd` itself must stay open
    /// as long as the ring is used, or its number could name another file (an export's file
    /// outlives its connections' rings: they hold the export).
    pub fn register_file(&mut self, fd: RawFd) -> io::Result<()> {
        self.ring.submitter().register_files(&[fd])?;
        self.fixed = Some(fd);
        Ok(())
    }

    /// How this ring was set up.
    pub fn setup(&self) -> Setup {
        self.setup
    }

    /// Makes the ring this thread's, if it is no one's yet (see [`Setup::Deferred`]); before any
    /// submission or wait.
    fn own(&mut self) -> io::Result<()> {
        if !self.enabled {
            self.ring.submitter().register_enable_rings()?;
            self.enabled = true;
        }
        Ok(())
    }

    pub fn inflight(&self) -> usize {
        self.inflight
    }

    /// Completions are there to take, or the kernel has work to turn into some (which needs
    /// a system call asking for completions; known only with `TASKRUN_FLAG`, [`Setup`]).
    pub fn pending(&mut self) -> bool {
        if !self.ring.completion().is_empty() || self.mail.as_ref().is_some_and(|m| m.waiting()) {
            return true;
        }
        let sq = self.ring.submission();
        sq.taskrun() || sq.cq_overflow()
    }

    /// Entries are queued and not yet submitted.
    pub fn unsubmitted(&mut self) -> bool {
        !self.ring.submission().is_empty()
    }

    /// Queues one entry, making room by submitting what is queued if the ring is full.
    ///
    /// # Safety
    ///
    /// Whatever memory `e` names must stay allocated, and must not be accessed by the program,
    /// until its completion has been returned by [`Ring::wait`].
    unsafe fn push(&mut self, e: squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: the caller's contract covers the memory `e` names.
            if unsafe { self.ring.submission().push(&e) }.is_ok() {
                self.inflight += 1;
                return Ok(());
            }
            self.own()?;
            self.ring.submit()?;
        }
    }

    /// Reads `len` bytes at `off` of `fd` into `buf`.
    ///
    /// # Safety
    ///
    /// See [`Ring::push`]: `buf` is valid for `len` bytes until the completion.
    pub unsafe fn read(
        &mut self,
        fd: RawFd,
        buf: *mut u8,
        len: u32,
        off: u64,
        user_data: u64,
    ) -> io::Result<()> {
        let e = on_fd!(self, fd, |f| opcode::Read::new(f, buf, len)
            .offset(off)
            .build()
            .user_data(user_data));
        // SAFETY: forwarded to the caller.
        unsafe { self.push(e) }
    }

    /// Writes `len` bytes of `buf` at `off` of `fd`; `dsync` makes the data durable before the
    /// completion (RWF_DSYNC: the FUA of a write).
    ///
    /// # Safety
    ///
    /// See [`Ring::push`].
    pub unsafe fn write(
        &mut self,
        fd: RawFd,
        buf: *const u8,
        len: u32,
        off: u64,
        dsync: bool,
        user_data: u64,
    ) -> io::Result<()> {
        let e = on_fd!(self, fd, |f| opcode::Write::new(f, buf, len)
            .offset(off)
            .rw_flags(if dsync { libc::RWF_DSYNC } else { 0 })
            .build()
            .user_data(user_data));
        // SAFETY: forwarded to the caller.
        unsafe { self.push(e) }
    }

    /// fdatasync(2) of `fd`.
    pub fn fdatasync(&mut self, fd: RawFd, user_data: u64) -> io::Result<()> {
        let e = on_fd!(self, fd, |f| opcode::Fsync::new(f)
            .flags(types::FsyncFlags::DATASYNC)
            .build()
            .user_data(user_data));
        // SAFETY: names no memory.
        unsafe { self.push(e) }
    }

    /// fallocate(2) of `fd` with `mode` over `len` bytes at `off`.
    pub fn fallocate(
        &mut self,
        fd: RawFd,
        mode: i32,
        off: u64,
        len: u64,
        user_data: u64,
    ) -> io::Result<()> {
        let e = on_fd!(self, fd, |f| opcode::Fallocate::new(f, len)
            .offset(off)
            .mode(mode)
            .build()
            .user_data(user_data));
        // SAFETY: names no memory.
        unsafe { self.push(e) }
    }

    /// Cancels the operation submitted with `user_data` (its completion then says
    /// `-ECANCELED`); the cancel completes too, with `user_data` 0.
    pub fn cancel(&mut self, user_data: u64) -> io::Result<()> {
        let e = opcode::AsyncCancel::new(user_data).build().user_data(0);
        // SAFETY: names no memory.
        unsafe { self.push(e) }
    }

    /// Completes once `fd` is readable (one shot).
    pub fn poll_in(&mut self, fd: RawFd, user_data: u64) -> io::Result<()> {
        let e = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
            .build()
            .user_data(user_data);
        // SAFETY: names no memory.
        unsafe { self.push(e) }
    }

    /// Completes each time `fd` becomes readable, without being submitted again (a multishot
    /// poll, Linux 5.13; an older kernel fails it with EINVAL), until it is cancelled or the
    /// kernel ends it: its last completion says `more: false`.
    pub fn poll_in_multi(&mut self, fd: RawFd, user_data: u64) -> io::Result<()> {
        let e = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
            .multi(true)
            .build()
            .user_data(user_data);
        // SAFETY: names no memory.
        unsafe { self.push(e) }
    }

    /// recv(2) of up to `len` bytes into `buf`.
    ///
    /// # Safety
    ///
    /// See [`Ring::push`].
    pub unsafe fn recv(
        &mut self,
        fd: RawFd,
        buf: *mut u8,
        len: u32,
        user_data: u64,
    ) -> io::Result<()> {
        let e = opcode::Recv::new(types::Fd(fd), buf, len)
            .build()
            .user_data(user_data);
        // SAFETY: forwarded to the caller.
        unsafe { self.push(e) }
    }

    /// sendmsg(2) of `msg` to the socket `fd` (no signal on a closed peer). `whole`: the
    /// operation completes only once every byte has gone, or on an error (`MSG_WAITALL`: the
    /// ring sends the rest itself as the socket takes it), not after a part.
    ///
    /// # Safety
    ///
    /// See [`Ring::push`]: the message, its iovec array and every buffer it names.
    pub unsafe fn sendmsg(
        &mut self,
        fd: RawFd,
        msg: *const libc::msghdr,
        whole: bool,
        user_data: u64,
    ) -> io::Result<()> {
        let waitall = if whole { libc::MSG_WAITALL } else { 0 };
        let e = opcode::SendMsg::new(types::Fd(fd), msg)
            .flags((libc::MSG_NOSIGNAL | waitall) as u32)
            .build()
            .user_data(user_data);
        // SAFETY: forwarded to the caller.
        unsafe { self.push(e) }
    }

    /// Submits what is queued and returns the completions that are there after waiting up to
    /// `timeout` for at least one (none: returns at once, with those that completed within the
    /// submission).
    pub fn wait(&mut self, timeout: Option<Duration>, out: &mut Vec<Done>) -> io::Result<()> {
        self.wait_for(timeout, 1, out)
    }

    /// [`Ring::wait`], for at least `want` completions (counting those that complete within
    /// the submission) rather than one.
    pub fn wait_for(
        &mut self,
        timeout: Option<Duration>,
        want: usize,
        out: &mut Vec<Done>,
    ) -> io::Result<()> {
        self.own()?;
        let mail = self.mail.as_ref().is_some_and(|m| m.waiting());
        let unpolled = self.mail.as_ref().filter(|_| !self.mail_polled && !mail);
        if let Some(fd) = unpolled.map(|m| m.efd.as_raw_fd()) {
            let e = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
                .build()
                .user_data(UD_MAIL);
            // SAFETY: names no memory (the eventfd lives as long as the ring: it holds it).
            unsafe { self.push(e) }?;
            // The ring's own: not an operation anyone waits for (`drain`).
            self.inflight -= 1;
            self.mail_polled = true;
        }
        let want = if timeout.is_some() && self.ring.completion().is_empty() && !mail {
            want
        } else {
            0
        };
        let r = match timeout {
            Some(t) if want > 0 => {
                let ts = types::Timespec::from(t);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(want, &args)
            }
            _ => self.flush(),
        };
        match r {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
            Err(e) => return Err(e),
        }
        for c in self.ring.completion() {
            if c.user_data() == UD_MAIL {
                self.mail_polled = false;
                if let Some(m) = &self.mail {
                    m.reset();
                }
                continue;
            }
            let more = io_uring::cqueue::more(c.flags());
            if !more {
                self.inflight = self.inflight.saturating_sub(1);
            }
            out.push(Done {
                user_data: c.user_data(),
                result: c.result(),
                more,
            });
        }
        if let Some(m) = &self.mail {
            let n = m.take(out);
            debug_assert!(
                n <= self.inflight,
                "mailbox completions not counted in flight"
            );
            self.inflight = self.inflight.saturating_sub(n);
        }
        Ok(())
    }

    /// Submits what is queued, without waiting, and makes completions of whatever finished
    /// (within the submission, or before it) visible: with `DEFER_TASKRUN` those wait for an
    /// `io_uring_enter` that asks for completions (`IORING_ENTER_GETEVENTS`), so this one does,
    /// with a minimum of none. No system call when there is nothing to submit and no such work.
    fn flush(&mut self) -> io::Result<usize> {
        let (queued, pending) = {
            let sq = self.ring.submission();
            (sq.len(), sq.taskrun() || sq.cq_overflow())
        };
        if queued == 0 && !pending {
            return Ok(0);
        }
        // SAFETY: no argument (a null pointer), and only entries already queued (under the
        // contract of `push`) are submitted.
        unsafe {
            self.ring.submitter().enter::<libc::sigset_t>(
                queued as u32,
                0,
                EnterFlags::GETEVENTS.bits(),
                None,
            )
        }
    }

    /// Waits until every operation has completed, or `limit` has passed; returns the
    /// completions. True if none is left in flight (only then may the memory of the
    /// operations go).
    pub fn drain(&mut self, limit: Duration, out: &mut Vec<Done>) -> bool {
        let end = Instant::now() + limit;
        while self.inflight > 0 {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            if self
                .wait(Some(left.min(Duration::from_millis(100))), out)
                .is_err()
            {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// A ring may be made on one thread (an RDMA connection's is made by the listener) and
    /// used on another: the first to submit or wait makes it its own. Where the kernel took
    /// `SINGLE_ISSUER`, another thread's wait is then refused (EEXIST), which is why the
    /// operations a connection leaves in flight are waited for on its own thread.
    #[test]
    fn a_ring_belongs_to_the_thread_that_first_uses_it() {
        let mut r = Ring::new(8).unwrap();
        let (rfd, wfd) = {
            let mut fds = [0; 2];
            // SAFETY: pipe2 fills two fds; they are closed at the end of the test.
            assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
            (fds[0], fds[1])
        };
        r.poll_in(rfd, 5).unwrap();
        let (setup, mut r) = std::thread::spawn(move || {
            let mut out = Vec::new();
            r.wait(Some(Duration::from_millis(1)), &mut out).unwrap();
            assert!(out.is_empty());
            // SAFETY: a one-byte write from a valid buffer to our pipe.
            assert_eq!(unsafe { libc::write(wfd, [1u8].as_ptr().cast(), 1) }, 1);
            while out.is_empty() {
                r.wait(Some(Duration::from_secs(5)), &mut out).unwrap();
            }
            assert_eq!(out[0].user_data, 5);
            (r.setup(), r)
        })
        .join()
        .unwrap();
        let mut out = Vec::new();
        let here = r.wait(Some(Duration::from_millis(1)), &mut out);
        if setup == Setup::Deferred {
            assert_eq!(here.map_err(|e| e.raw_os_error()), Err(Some(libc::EEXIST)));
        }
        // SAFETY: closing the pipe made above.
        unsafe {
            libc::close(rfd);
            libc::close(wfd);
        }
    }

    /// A multishot poll completes each time its fd becomes readable, counts as one operation
    /// in flight until its last completion, and ends when cancelled.
    #[test]
    fn a_multishot_poll_completes_again_until_cancelled() {
        for setup in Setup::ALL {
            if let Ok(r) = Ring::with_setup(8, setup) {
                multishot(r);
            }
        }
    }

    fn multishot(mut r: Ring) {
        let (rfd, wfd) = {
            let mut fds = [0; 2];
            // SAFETY: pipe2 fills two fds; they are closed at the end of the test.
            assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
            (fds[0], fds[1])
        };
        r.poll_in_multi(rfd, 9).unwrap();
        let mut out = Vec::new();
        for _ in 0..3 {
            // SAFETY: one-byte writes and reads of our pipe, from and to valid buffers.
            assert_eq!(unsafe { libc::write(wfd, [1u8].as_ptr().cast(), 1) }, 1);
            out.clear();
            while out.is_empty() {
                r.wait(Some(Duration::from_secs(5)), &mut out).unwrap();
            }
            assert_eq!(out.len(), 1);
            assert_eq!(out[0].user_data, 9);
            assert!(out[0].result & i32::from(libc::POLLIN) != 0 && out[0].more);
            assert_eq!(r.inflight(), 1);
            // SAFETY: as above.
            assert_eq!(unsafe { libc::read(rfd, [0u8].as_mut_ptr().cast(), 1) }, 1);
        }
        r.cancel(9).unwrap();
        out.clear();
        assert!(r.drain(Duration::from_secs(5), &mut out));
        let last = out.iter().find(|d| d.user_data == 9).unwrap();
        assert_eq!((last.result, last.more), (-libc::ECANCELED, false));
        // SAFETY: closing the pipe made above.
        unsafe {
            libc::close(rfd);
            libc::close(wfd);
        }
    }

    /// A wait for two completions counts one that completes within the submission, and sleeps
    /// on until the second (or the timeout): what lets a TCP response that completes at once
    /// share the system call of the wait for the next request.
    #[test]
    fn a_wait_for_two_counts_what_completes_within_the_submission() {
        let pipe = || {
            let mut fds = [0; 2];
            // SAFETY: pipe2 fills two fds; they are closed at the end of the test.
            assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
            (fds[0], fds[1])
        };
        let ((ar, aw), (br, bw)) = (pipe(), pipe());
        // SAFETY: a one-byte write from a valid buffer to our pipe.
        assert_eq!(unsafe { libc::write(aw, [1u8].as_ptr().cast(), 1) }, 1);
        let mut r = Ring::new(8).unwrap();
        r.poll_in(ar, 1).unwrap();
        r.poll_in(br, 2).unwrap();
        let mut out = Vec::new();
        let t0 = Instant::now();
        r.wait_for(Some(Duration::from_millis(200)), 2, &mut out)
            .unwrap();
        assert!(
            t0.elapsed() >= Duration::from_millis(150),
            "{:?}",
            t0.elapsed()
        );
        assert_eq!(out.iter().map(|d| d.user_data).collect::<Vec<_>>(), [1]);
        // The second comes 20 ms into the next wait, and ends it.
        r.poll_in(ar, 3).unwrap();
        let t0 = Instant::now();
        let w = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            // SAFETY: as above.
            assert_eq!(unsafe { libc::write(bw, [1u8].as_ptr().cast(), 1) }, 1);
        });
        out.clear();
        r.wait_for(Some(Duration::from_secs(5)), 2, &mut out)
            .unwrap();
        w.join().unwrap();
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        let mut got: Vec<u64> = out.iter().map(|d| d.user_data).collect();
        got.sort();
        assert_eq!(got, [2, 3]);
        // SAFETY: closing the pipes made above.
        unsafe {
            for fd in [ar, aw, br, bw] {
                libc::close(fd);
            }
        }
    }

    /// With each set-up the kernel takes (the first is what a current kernel gives; the
    /// others are what older ones fall back to).
    #[test]
    fn file_io_completes_with_its_user_data() {
        for setup in Setup::ALL {
            match Ring::with_setup(8, setup) {
                Ok(r) => file_io(r),
                Err(e) => println!("{setup:?}: refused here ({e})"),
            }
        }
    }

    fn file_io(mut r: Ring) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        f.set_len(8192).unwrap();
        // Through the fixed file, as a connection's ring does the export's.
        r.register_file(f.as_raw_fd()).unwrap();
        let data = vec![0x5au8; 4096];
        let mut back = vec![0u8; 4096];
        // SAFETY: `data` lives and is untouched until the completion is taken below.
        unsafe { r.write(f.as_raw_fd(), data.as_ptr(), 4096, 4096, true, 7) }.unwrap();
        let mut out = Vec::new();
        while out.is_empty() {
            r.wait(Some(Duration::from_secs(5)), &mut out).unwrap();
        }
        assert_eq!(
            out,
            [Done {
                user_data: 7,
                result: 4096,
                more: false
            }]
        );
        r.fdatasync(f.as_raw_fd(), 8).unwrap();
        // SAFETY: `back` lives and is untouched until the drain below.
        unsafe { r.read(f.as_raw_fd(), back.as_mut_ptr(), 4096, 4096, 9) }.unwrap();
        out.clear();
        assert!(r.drain(Duration::from_secs(5), &mut out));
        out.sort_by_key(|d| d.user_data);
        assert_eq!(out.iter().map(|d| d.user_data).collect::<Vec<_>>(), [8, 9]);
        assert_eq!(out[1].result, 4096);
        assert_eq!(back, data);
        assert_eq!(r.inflight(), 0);
    }

    /// Completions posted to the mailbox by other threads come out of the ring's wait like the
    /// kernel's, a wait blocks until one is posted, and drain waits for every one counted.
    #[test]
    fn the_mailbox_delivers_other_threads_completions() {
        let mut r = Ring::new(8).unwrap();
        let m = r.mailbox().unwrap();
        for _ in 0..3 {
            r.started_elsewhere();
        }
        assert_eq!(r.inflight(), 3);
        let mut out = Vec::new();
        // Nothing posted yet: the wait times out empty.
        r.wait(Some(Duration::from_millis(20)), &mut out).unwrap();
        assert!(out.is_empty());
        let poster = {
            let m = m.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                m.post(1, 10);
            })
        };
        // Blocks until the post wakes it.
        while out.is_empty() {
            r.wait(Some(Duration::from_secs(5)), &mut out).unwrap();
        }
        poster.join().unwrap();
        assert_eq!(
            out,
            [Done {
                user_data: 1,
                result: 10,
                more: false
            }]
        );
        assert_eq!(r.inflight(), 2);
        let late = std::thread::spawn(move || {
            m.post(2, -libc::EIO);
            std::thread::sleep(Duration::from_millis(50));
            m.post(3, 0);
        });
        out.clear();
        assert!(r.drain(Duration::from_secs(5), &mut out));
        late.join().unwrap();
        assert_eq!(
            out.iter()
                .map(|d| (d.user_data, d.result))
                .collect::<Vec<_>>(),
            [(2, -libc::EIO), (3, 0)]
        );
        assert_eq!(r.inflight(), 0);
    }
}
