//! An eventfd that one thread signals and others wait on, through their io_uring or poll(2):
//! how a sleeping thread learns of something that is not its own I/O (the target stopping,
//! its peer disconnecting), so that it need not wake periodically to look.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

pub struct Wake(OwnedFd);

impl Wake {
    pub fn new() -> io::Result<Wake> {
        // SAFETY: plain system call; the fd it returns is ours alone.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nobody else.
        Ok(Wake(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Makes the fd readable, for good unless [`Wake::clear`] reads it back.
    pub fn signal(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to an eventfd we own. It fails only when
        // the counter would overflow, which takes 2^64 signals.
        let _ = unsafe { libc::write(self.fd(), one.as_ptr().cast(), one.len()) };
    }

    /// Takes back the signals given so far, so that a wake used again and again (a
    /// connection's, see `conn::Core`) waits until the next one.
    pub fn clear(&self) {
        let mut n = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live buffer from an eventfd we own; it is
        // non-blocking, so an unsignalled one fails with EAGAIN, which is all right.
        let _ = unsafe { libc::read(self.fd(), n.as_mut_ptr().cast(), n.len()) };
    }
}

/// Connections waiting for something another thread will give back: each is woken once by
/// the next [`Waiters::wake_all`] after it asked, and asks again if it is still short.
///
/// All are woken, not one: what comes back (a buffer of some size, a flush's result) may be
/// what any of them waits for, and a connection woken for nothing only looks once more.
#[derive(Default)]
pub struct Waiters(std::sync::Mutex<Vec<std::sync::Weak<Wake>>>);

impl Waiters {
    /// `w` is woken by the next [`Waiters::wake_all`] (once, however often it asked).
    pub fn add(&self, w: &std::sync::Arc<Wake>) {
        let mut v = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let me = std::sync::Arc::downgrade(w);
        if !v.iter().any(|x| x.ptr_eq(&me)) {
            v.push(me);
        }
    }

    pub fn wake_all(&self) {
        let v = std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for w in v.iter().filter_map(std::sync::Weak::upgrade) {
            w.signal();
        }
    }
}

/// Waits up to `timeout` (None: for ever) for any of `fds` to become readable; returns which
/// are, as a bit mask by position (0 on timeout). A `None` entry is skipped.
pub fn readable(fds: &[Option<RawFd>], timeout: Option<Duration>) -> io::Result<u32> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.unwrap_or(-1),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
    loop {
        // SAFETY: `pfds` is a valid array of `pfds.len()` pollfds (a negative fd is ignored).
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(pfds
            .iter()
            .enumerate()
            .filter(|(_, p)| p.revents != 0)
            .fold(0, |m, (i, _)| m | 1 << i));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readable_once_signalled_and_for_good() {
        let w = Wake::new().unwrap();
        let other = Wake::new().unwrap();
        let fds = [Some(other.fd()), None, Some(w.fd())];
        assert_eq!(readable(&fds, Some(Duration::ZERO)).unwrap(), 0);
        w.signal();
        assert_eq!(readable(&fds, Some(Duration::ZERO)).unwrap(), 0b100);
        assert_eq!(readable(&fds, None).unwrap(), 0b100);
        w.clear();
        assert_eq!(readable(&fds, Some(Duration::ZERO)).unwrap(), 0);
    }

    #[test]
    fn waiters_are_woken_once_each() {
        let ws = Waiters::default();
        let a = std::sync::Arc::new(Wake::new().unwrap());
        let b = std::sync::Arc::new(Wake::new().unwrap());
        ws.add(&a);
        ws.add(&a);
        ws.add(&b);
        drop(b);
        ws.wake_all();
        let fds = [Some(a.fd())];
        assert_eq!(readable(&fds, Some(Duration::ZERO)).unwrap(), 1);
        a.clear();
        ws.wake_all();
        assert_eq!(
            readable(&fds, Some(Duration::ZERO)).unwrap(),
            0,
            "asked once"
        );
    }
}
