// SPDX-License-Identifier: GPL-2.0

//! Socket addresses, IPv4 (`sockaddr_in`) or IPv6 (`sockaddr_in6`), made from and read back
//! into `core::net` addresses, for the TCP sockets and the rdma_cm ids.

use core::{
    mem,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    ptr,
};
use kernel::ffi;

use super::bindings as b;

/// An IPv4 or IPv6 socket address as the kernel takes it: a `sockaddr_storage`, which has
/// room for either, holding one whose family says which.
pub(crate) struct SockAddr {
    ss: b::__kernel_sockaddr_storage,
    len: usize,
}

impl SockAddr {
    /// `addr`, port `port` (host order). An IPv6 address carries no scope: link-local ones
    /// are refused earlier, by the option parser.
    pub(crate) fn new(addr: IpAddr, port: u16) -> Self {
        // SAFETY: All-zero is a valid `sockaddr_storage` (family 0, no address).
        let mut ss: b::__kernel_sockaddr_storage = unsafe { mem::zeroed() };
        let len = match addr {
            IpAddr::V4(a) => {
                let sin = b::sockaddr_in {
                    sin_family: b::AF_INET as _,
                    sin_port: port.to_be(),
                    sin_addr: b::in_addr {
                        s_addr: u32::from_ne_bytes(a.octets()),
                    },
                    ..Default::default()
                };
                // SAFETY: A `sockaddr_storage` is larger than a `sockaddr_in` and aligned for
                // it (the kernel's definition guarantees both).
                unsafe { ptr::write(ptr::from_mut(&mut ss).cast(), sin) };
                mem::size_of::<b::sockaddr_in>()
            }
            IpAddr::V6(a) => {
                let mut sin6 = b::sockaddr_in6 {
                    sin6_family: b::AF_INET6 as _,
                    sin6_port: port.to_be(),
                    ..Default::default()
                };
                sin6.sin6_addr.in6_u.u6_addr8 = a.octets();
                // SAFETY: As for `sockaddr_in`: a `sockaddr_storage` holds any socket address.
                unsafe { ptr::write(ptr::from_mut(&mut ss).cast(), sin6) };
                mem::size_of::<b::sockaddr_in6>()
            }
        };
        Self { ss, len }
    }

    /// Any local address of `like`'s family, port `port`: a bind that keeps only the port.
    pub(crate) fn any(like: IpAddr, port: u16) -> Self {
        let any = match like {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        Self::new(any, port)
    }

    /// Room for an address the kernel writes (`kernel_getsockname`), read with
    /// [`SockAddr::get`].
    pub(crate) fn empty() -> Self {
        Self {
            // SAFETY: All-zero is a valid `sockaddr_storage`.
            ss: unsafe { mem::zeroed() },
            len: mem::size_of::<b::__kernel_sockaddr_storage>(),
        }
    }

    /// The address for a call that reads it (or, from [`SockAddr::empty`], writes at most
    /// [`SockAddr::len`] bytes): valid while `self` is.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut b::sockaddr {
        ptr::from_mut(&mut self.ss).cast()
    }

    /// The length of the family's own struct, as the socket calls take it.
    pub(crate) fn len(&self) -> ffi::c_int {
        self.len as ffi::c_int
    }

    /// The address and port (host order); `None` for a family other than IPv4 and IPv6.
    pub(crate) fn get(&self) -> Option<(IpAddr, u16)> {
        decode(&self.ss)
    }
}

/// The address and port (host order) in `ss`; `None` for a family other than IPv4 and IPv6.
pub(crate) fn decode(ss: &b::__kernel_sockaddr_storage) -> Option<(IpAddr, u16)> {
    let storage = ptr::from_ref(ss);
    // SAFETY: Every `sockaddr` starts with its family; any bits are a valid `u16`.
    let family = unsafe { ptr::read(storage.cast::<u16>()) };
    match u32::from(family) {
        b::AF_INET => {
            // SAFETY: A `sockaddr_storage` is larger than a `sockaddr_in` and aligned for it,
            // and any bytes are a valid `sockaddr_in`.
            let sin: b::sockaddr_in = unsafe { ptr::read(storage.cast()) };
            Some((
                IpAddr::V4(Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes())),
                u16::from_be(sin.sin_port),
            ))
        }
        b::AF_INET6 => {
            // SAFETY: As for `sockaddr_in`; the union's three views are the same 16 bytes.
            let (octets, port) = unsafe {
                let sin6: b::sockaddr_in6 = ptr::read(storage.cast());
                (sin6.sin6_addr.in6_u.u6_addr8, sin6.sin6_port)
            };
            Some((IpAddr::V6(Ipv6Addr::from(octets)), u16::from_be(port)))
        }
        _ => None,
    }
}
