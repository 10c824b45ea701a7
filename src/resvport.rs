// SPDX-License-Identifier: GPL-2.0

//! Reserved source ports (docs/design.md, "Access control"). A target serves an export that
//! no key protects only to connections from a port below 1024, which only a privileged
//! process can bind (root, or the kernel): so a user process on this host cannot pose as one
//! of its disks, or as a probe. Every connection the module makes without a key comes from
//! one. There are 512 per transport (RDMA and TCP each), for every such connection of the host
//! at once (and sunrpc's, on TCP); a disk needs one per queue, and twice that while it switches
//! transports. A disk mapped with a key needs none: its proofs vouch for the host.

use core::sync::atomic::{AtomicU16, Ordering};
use kernel::{bindings as kb, prelude::*};

use crate::kapi::errno;

/// The ports tried, as sunrpc does for NFS: the upper half of the reserved range, so that the
/// well-known services below stay free.
const FIRST: u16 = 512;
const END: u16 = 1024;
/// Where the next search starts: connections made one after another do not all try the same
/// ports first.
static NEXT: AtomicU16 = AtomicU16::new(0);

/// Whether `e` says "this port is someone else's".
fn taken(e: Error) -> bool {
    e == errno(kb::EADDRINUSE) || e == errno(kb::EADDRNOTAVAIL)
}

/// Runs `f(port)` on reserved ports, from a rotating start, until one is not taken, and
/// returns what `f` returned for it. With every one taken (as many connections from this host
/// at once), `EADDRNOTAVAIL`, logged with `who`: an ordinary port would be refused by a target
/// that no key protects, and a key's proof must name the port.
pub(crate) fn with_reserved_port<T>(who: &str, mut f: impl FnMut(u16) -> Result<T>) -> Result<T> {
    let n = END - FIRST;
    let start = NEXT.fetch_add(1, Ordering::Relaxed) % n;
    for i in 0..n {
        match f(FIRST + (start + i) % n) {
            Err(e) if taken(e) => continue,
            r => return r,
        }
    }
    pr_err!(
        "{who}: every reserved port ({FIRST}-{}) is taken by other connections: cannot connect (disks mapped with a key, secret=, use any port)\n",
        END - 1
    );
    Err(errno(kb::EADDRNOTAVAIL))
}
