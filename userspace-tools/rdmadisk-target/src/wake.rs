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

    /// Makes the fd readable, for good (nothing reads it back).
    pub fn signal(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to an eventfd we own. It fails only when
        // the counter would overflow, which takes 2^64 signals.
        let _ = unsafe { libc::write(self.fd(), one.as_ptr().cast(), one.len()) };
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
    }
}
