// SPDX-License-Identifier: GPL-2.0

//! Fault injection, per disk, set at run time under
//! `/sys/kernel/debug/rdmadisk/rdmadiskN/`. Compiled in and off by default: every switch
//! starts at 0, and an off switch costs two relaxed loads where it is checked.
//!
//! Each fault has three files: `<fault>_every` (N: fire on every Nth chance; 0 off),
//! `<fault>_percent` (P, 0 to 100: fire with probability P% on each chance, when `_every` is
//! 0), and `<fault>_hits` (read-only: how often it fired). `delay_ms` is how long
//! `delay_response` holds a response (default 1000, at most 10000). A write outside a file's
//! range is refused (`EINVAL`, with a log line) and changes nothing.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use kernel::{c_str, str::CStr, sync::Arc};

use crate::kapi::debugfs::{Dir, File};
use crate::kapi::random;

/// The faults a disk can be made to suffer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(usize)]
pub(crate) enum Fault {
    /// A response is thrown away as if it never arrived (its request times out).
    DropResponse,
    /// A response is held for `delay_ms` before it is processed (not on poll queues, whose
    /// completions are handled where sleeping is not allowed).
    DelayResponse,
    /// A byte of a read's data is flipped before its CRC is checked (the read is retried).
    /// Never on a request's last try (`io::may_corrupt`).
    CorruptRead,
    /// A write goes out with a wrong data CRC (the target refuses it; it is retried). Never on
    /// a request's last try.
    CorruptWriteCrc,
    /// Mapping a request's pages for the RDMA device fails, where a real DMA-mapping failure
    /// does, and is handled as one (the request waits and is tried again).
    FailMrReg,
    /// A request's RDMA queue pair is moved to the error state right after it is posted.
    QpError,
    /// A TCP send fails (the connection is reset).
    FailTcpSend,
    /// A request frame sent from `queue_rq` stops halfway, as if the socket's send buffer
    /// were full: the send work writes the rest.
    ShortTcpSend,
    /// A connection attempt (either transport, and RDMA probes) fails at once.
    FailConnect,
}

const COUNT: usize = 9;

/// One fault's switches.
#[derive(Default)]
pub(crate) struct Switch {
    every: AtomicU32,
    percent: AtomicU32,
    chances: AtomicU32,
    hits: AtomicU64,
}

/// A disk's fault switches.
#[derive(Default)]
pub(crate) struct Faults {
    switches: [Switch; COUNT],
    delay_ms: AtomicU32,
}

/// Longest `delay_response` hold.
const MAX_DELAY_MS: u32 = 10_000;
const DEFAULT_DELAY_MS: u32 = 1_000;

impl Faults {
    pub(crate) fn new() -> Self {
        let f = Self::default();
        f.delay_ms.store(DEFAULT_DELAY_MS, Ordering::Relaxed);
        f
    }

    /// Whether `fault` fires at this chance (and counts it if so). Any context.
    pub(crate) fn hit(&self, fault: Fault) -> bool {
        let Some(s) = self.switches.get(fault as usize) else {
            return false;
        };
        let every = s.every.load(Ordering::Relaxed);
        let percent = s.percent.load(Ordering::Relaxed);
        let fire = if every > 0 {
            s.chances.fetch_add(1, Ordering::Relaxed).wrapping_add(1) % every == 0
        } else {
            percent > 0 && random::u32() % 100 < percent.min(100)
        };
        if fire {
            s.hits.fetch_add(1, Ordering::Relaxed);
        }
        fire
    }

    /// How long `delay_response` holds a response.
    pub(crate) fn delay_ms(&self) -> u32 {
        self.delay_ms.load(Ordering::Relaxed).min(MAX_DELAY_MS)
    }

    /// The disk's debugfs directory `name` under `root`, showing these switches.
    pub(crate) fn debugfs(this: &Arc<Self>, name: &CStr, root: &Dir<()>) -> Dir<Faults> {
        Dir::new(name, Some(root), Some(this.clone()), FILES)
    }
}

macro_rules! fault_files {
    ($($fault:ident: $every:literal, $percent:literal, $hits:literal;)*) => {
        &[
            $(
                File::U32(
                    c_str!($every),
                    |f| &f.switches[Fault::$fault as usize].every,
                    u32::MAX,
                ),
                File::U32(
                    c_str!($percent),
                    |f| &f.switches[Fault::$fault as usize].percent,
                    100,
                ),
                File::U64(c_str!($hits), |f| &f.switches[Fault::$fault as usize].hits),
            )*
            File::U32(c_str!("delay_ms"), |f| &f.delay_ms, MAX_DELAY_MS),
        ]
    };
}

static FILES: &[File<Faults>] = fault_files! {
    DropResponse: "drop_response_every", "drop_response_percent", "drop_response_hits";
    DelayResponse: "delay_response_every", "delay_response_percent", "delay_response_hits";
    CorruptRead: "corrupt_read_every", "corrupt_read_percent", "corrupt_read_hits";
    CorruptWriteCrc: "corrupt_write_crc_every", "corrupt_write_crc_percent", "corrupt_write_crc_hits";
    FailMrReg: "fail_mr_reg_every", "fail_mr_reg_percent", "fail_mr_reg_hits";
    QpError: "qp_error_every", "qp_error_percent", "qp_error_hits";
    FailTcpSend: "fail_tcp_send_every", "fail_tcp_send_percent", "fail_tcp_send_hits";
    ShortTcpSend: "short_tcp_send_every", "short_tcp_send_percent", "short_tcp_send_hits";
    FailConnect: "fail_connect_every", "fail_connect_percent", "fail_connect_hits";
};

const _: () = assert!(COUNT == Fault::FailConnect as usize + 1);
