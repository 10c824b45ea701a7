//! Reserved source ports. A target serves an export that no key protects only to connections
//! from ports below 1024, which only a privileged process can bind (for TCP, Linux's
//! `net.ipv4.ip_unprivileged_port_start`; for rdma_cm, a fixed `PROT_SOCK` and
//! `CAP_NET_BIND_SERVICE`): root on the client host, as NFS's `secure` export option has it.
//! The kernel module binds one for every connection; so do the userspace clients, when they
//! may.

use std::io;

/// The reserved ports a client tries, as sunrpc does for NFS: the upper half, so that the
/// well-known services below stay free.
pub const RESERVED_PORTS: std::ops::Range<u16> = 512..1024;

/// Every reserved port once, from a random one on, so that clients starting together do not
/// all try the same ports in the same order.
pub fn candidates() -> impl Iterator<Item = u16> {
    let n = RESERVED_PORTS.end - RESERVED_PORTS.start;
    let mut r = [0u8; 2];
    // SAFETY: getrandom writes at most 2 bytes into the array we own.
    let got = unsafe { libc::getrandom(r.as_mut_ptr().cast(), r.len(), libc::GRND_NONBLOCK) };
    let start = if got == 2 {
        u16::from_ne_bytes(r) % n
    } else {
        0
    };
    (0..n).map(move |i| RESERVED_PORTS.start + (start + i) % n)
}

/// Whether a bind or connect error means "this port is taken, try another".
pub fn taken(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EADDRINUSE) | Some(libc::EADDRNOTAVAIL)
    )
}

/// Whether a bind error means "not privileged": no reserved port will do.
pub fn refused(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reserved_port_once() {
        let mut v: Vec<u16> = candidates().collect();
        assert_eq!(v.len(), 512);
        v.sort_unstable();
        v.dedup();
        assert_eq!(v.len(), 512);
        assert_eq!(v[0], 512);
        assert_eq!(v[511], 1023);
    }
}
