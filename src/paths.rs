// SPDX-License-Identifier: GPL-2.0

//! A disk's targets ("paths"): the gateways that serve its export, each over RDMA and TCP,
//! one of them active at a time (docs/design.md, "Several gateways").
//!
//! The addresses are fixed at map time. Which one is active, and what each path has shown
//! (failures, latency), changes; only the session work moves the active path, so a connection
//! set is always connected to one path, named by its [`crate::host::ConnId`].

use core::net::{IpAddr, Ipv4Addr};
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU8, Ordering};

use crate::proto::options::{Targets, MAX_TARGETS};
use crate::rdma_conn::Peer;

/// Targets one disk names at most.
pub(crate) const MAX_PATHS: usize = MAX_TARGETS;

/// Where one target answers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct PathAddr {
    /// The rdma_cm endpoint.
    pub(crate) rdma: Peer,
    /// The TCP port, at the same address.
    pub(crate) tcp_port: u16,
}

impl PathAddr {
    pub(crate) fn tcp(&self) -> Peer {
        Peer {
            addr: self.rdma.addr,
            port: self.tcp_port,
        }
    }
}

/// What one path has shown.
struct PathSeen {
    /// Times the session gave the path up (failed over away from it).
    failures: AtomicU32,
    /// When it was last given up (ms, ktime; 0: never, or it served since).
    down_ms: AtomicI64,
    /// A set of this mapping was installed on it once.
    served: AtomicBool,
    /// Moving average of its requests' round trips (from hand-over to the connection to the
    /// response), in µs; 0: none answered yet (or telemetry off: the hand-over's time is the
    /// telemetry's).
    lat_us: AtomicU32,
}

impl PathSeen {
    const fn new() -> Self {
        Self {
            failures: AtomicU32::new(0),
            down_ms: AtomicI64::new(0),
            served: AtomicBool::new(false),
            lat_us: AtomicU32::new(0),
        }
    }
}

/// A disk's paths.
pub(crate) struct Paths {
    addrs: [PathAddr; MAX_PATHS],
    n: u8,
    active: AtomicU8,
    seen: [PathSeen; MAX_PATHS],
}

impl Paths {
    /// The paths of a `map_device` line, in its order: the first is the preferred one, which
    /// the disk fails back to.
    pub(crate) fn new(t: &Targets) -> Self {
        let unset = PathAddr {
            rdma: Peer {
                addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                port: 0,
            },
            tcp_port: 0,
        };
        let mut addrs = [unset; MAX_PATHS];
        for (a, t) in addrs.iter_mut().zip(t.iter()) {
            *a = PathAddr {
                rdma: Peer {
                    addr: t.addr,
                    port: t.port,
                },
                tcp_port: t.tcp_port,
            };
        }
        Self {
            addrs,
            n: t.len().min(MAX_PATHS) as u8,
            active: AtomicU8::new(0),
            seen: [const { PathSeen::new() }; MAX_PATHS],
        }
    }

    pub(crate) fn len(&self) -> usize {
        usize::from(self.n)
    }

    pub(crate) fn addrs(&self) -> &[PathAddr] {
        &self.addrs[..self.len()]
    }

    /// Path `i`'s address (the last one for an index out of range: never, in practice).
    pub(crate) fn addr(&self, i: u8) -> PathAddr {
        self.addrs[usize::from(i).min(self.len() - 1)]
    }

    pub(crate) fn active(&self) -> u8 {
        self.active.load(Ordering::Relaxed)
    }

    /// Makes path `i` the one new connection sets go to (the session work only).
    pub(crate) fn set_active(&self, i: u8) {
        if usize::from(i) < self.len() {
            self.active.store(i, Ordering::Relaxed);
        }
    }

    /// The session gave path `i` up at `now_ms` (ktime).
    pub(crate) fn note_down(&self, i: u8, now_ms: i64) {
        if let Some(s) = self.seen.get(usize::from(i)) {
            s.failures.fetch_add(1, Ordering::Relaxed);
            s.down_ms.store(now_ms.max(1), Ordering::Relaxed);
        }
    }

    /// A connection set on path `i` was installed: it serves.
    pub(crate) fn note_up(&self, i: u8) {
        if let Some(s) = self.seen.get(usize::from(i)) {
            s.down_ms.store(0, Ordering::Relaxed);
            s.served.store(true, Ordering::Relaxed);
        }
    }

    /// Whether a set of this mapping was ever installed on path `i`.
    pub(crate) fn served(&self, i: u8) -> bool {
        self.seen
            .get(usize::from(i))
            .is_some_and(|s| s.served.load(Ordering::Relaxed))
    }

    /// A request on path `i` was answered `rtt_ns` after it was handed to its connection.
    /// Any context; a lost update of the average is harmless.
    pub(crate) fn note_latency(&self, i: u8, rtt_ns: i64) {
        let Some(s) = self.seen.get(usize::from(i)) else {
            return;
        };
        let us = (rtt_ns / 1_000).clamp(1, i64::from(u32::MAX)) as u32;
        let old = s.lat_us.load(Ordering::Relaxed);
        // An average over about the last 8 requests: recent enough to show a path slowing.
        let new = if old == 0 {
            us
        } else {
            ((u64::from(old) * 7 + u64::from(us)) / 8) as u32
        };
        s.lat_us.store(new, Ordering::Relaxed);
    }

    /// Path `i`'s failures so far, when it was last given up (0: it serves, or never did
    /// fail), and its latency average (µs; 0: none yet).
    pub(crate) fn seen(&self, i: u8) -> (u32, i64, u32) {
        self.seen.get(usize::from(i)).map_or((0, 0, 0), |s| {
            (
                s.failures.load(Ordering::Relaxed),
                s.down_ms.load(Ordering::Relaxed),
                s.lat_us.load(Ordering::Relaxed),
            )
        })
    }
}
