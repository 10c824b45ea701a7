// SPDX-License-Identifier: GPL-2.0

//! Per-disk telemetry, per transport and per operation: I/O counts, bytes, errors, credit
//! waits, and two latency histograms, shown in `/sys/block/rdmadiskN/rdmadisk/telemetry_*`
//! (docs/design.md, "Telemetry").
//!
//! `lat_us` runs from the request's first dispatch to its end, so it holds every reissue and
//! every wait for a connection; `wire_us` from its last send to the response, the part the
//! link and the target own. Their buckets are the shared histogram's
//! ([`crate::proto::histogram`]). Recording costs a clock read at dispatch and a few relaxed
//! atomic adds at the end, so it stays on; the `telemetry` knob turns it off.

use core::{
    fmt::Write,
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
};
use kernel::prelude::*;

use crate::kapi::sysfs::ShowBuf;
use crate::proto::histogram::{bucket_of, write_sparse, BUCKETS};
use crate::proto::wire::Opcode;

/// The transport a request ran on, for the per-transport counters.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub(crate) enum Via {
    Rdma,
    Tcp,
}

/// The operations counted apart, in the order of their files.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Op {
    Read,
    Write,
    Flush,
    Discard,
    WriteZeroes,
}

const OPS: usize = 5;

impl Op {
    /// The telemetry operation of a protocol one; `None` for a keepalive or a close (not
    /// I/O).
    pub(crate) fn of(op: Opcode) -> Option<Op> {
        Some(match op {
            Opcode::Read => Op::Read,
            Opcode::Write => Op::Write,
            Opcode::Flush => Op::Flush,
            Opcode::Discard => Op::Discard,
            Opcode::WriteZeroes => Op::WriteZeroes,
            Opcode::Nop | Opcode::Close => return None,
        })
    }
}

/// A histogram, and the sum of what it counts (for the mean, which the buckets are too coarse
/// to give).
#[derive(Default)]
struct Histogram {
    buckets: [AtomicU64; BUCKETS],
    sum_us: AtomicU64,
}

impl Histogram {
    fn add_ns(&self, ns: i64) {
        let us = u64::try_from(ns).unwrap_or(0) / 1000;
        self.buckets[bucket_of(us)].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    fn show(&self, out: &mut ShowBuf<'_>) -> core::fmt::Result {
        let mut counts = [0u64; BUCKETS];
        for (c, a) in counts.iter_mut().zip(&self.buckets) {
            *c = a.load(Ordering::Relaxed);
        }
        write_sparse(out, &counts)
    }

    fn reset(&self) {
        for a in &self.buckets {
            a.store(0, Ordering::Relaxed);
        }
        self.sum_us.store(0, Ordering::Relaxed);
    }
}

/// One transport's figures for one operation.
#[derive(Default)]
struct OpFigures {
    ios: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    credit_waits: AtomicU64,
    lat: Histogram,
    wire: Histogram,
}

/// The telemetry of one disk.
pub(crate) struct Telemetry {
    on: AtomicBool,
    figures: [[OpFigures; OPS]; 2],
}

impl Default for Telemetry {
    fn default() -> Self {
        Self {
            on: AtomicBool::new(true),
            figures: Default::default(),
        }
    }
}

/// Now, in ns of the monotonic clock: what a request's timestamps are taken in.
pub(crate) fn now_ns() -> i64 {
    kernel::time::Ktime::ktime_get().to_ns()
}

impl Telemetry {
    fn of(&self, via: Via, op: Op) -> &OpFigures {
        &self.figures[via as usize][op as usize]
    }

    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    pub(crate) fn set_on(&self, on: bool) {
        self.on.store(on, Ordering::Relaxed);
    }

    /// A request ended on `via`: `ok` or not, its bytes, and its timestamps (ns; 0: not
    /// taken, as when telemetry was off at its dispatch).
    pub(crate) fn record(
        &self,
        via: Via,
        op: Op,
        ok: bool,
        bytes: u64,
        dispatched_ns: i64,
        sent_ns: i64,
    ) {
        if !self.is_on() {
            return;
        }
        let f = self.of(via, op);
        if !ok {
            f.errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
        f.ios.fetch_add(1, Ordering::Relaxed);
        f.bytes.fetch_add(bytes, Ordering::Relaxed);
        if dispatched_ns == 0 || sent_ns == 0 {
            return;
        }
        let now = now_ns();
        f.lat.add_ns(now - dispatched_ns);
        f.wire.add_ns(now - sent_ns);
    }

    /// A request of `op` waited on `via` for a send credit.
    pub(crate) fn credit_wait(&self, via: Via, op: Op) {
        if self.is_on() {
            self.of(via, op)
                .credit_waits
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Zeroes every figure (the knob stays as it is). A request ending meanwhile may be
    /// counted either side of it.
    pub(crate) fn reset(&self) {
        for f in self.figures.iter().flatten() {
            for a in [&f.ios, &f.bytes, &f.errors, &f.credit_waits] {
                a.store(0, Ordering::Relaxed);
            }
            f.lat.reset();
            f.wire.reset();
        }
    }

    /// `telemetry_<via>_<op>`: `key=value` lines, the histograms in the shared text form, and
    /// the sums of the latencies they count.
    pub(crate) fn show(&self, via: Via, op: Op, out: &mut ShowBuf<'_>) -> Result {
        let f = self.of(via, op);
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        (|| -> core::fmt::Result {
            writeln!(out, "ios={}", load(&f.ios))?;
            writeln!(out, "bytes={}", load(&f.bytes))?;
            writeln!(out, "errors={}", load(&f.errors))?;
            writeln!(out, "credit_waits={}", load(&f.credit_waits))?;
            writeln!(out, "lat_us_sum={}", load(&f.lat.sum_us))?;
            writeln!(out, "wire_us_sum={}", load(&f.wire.sum_us))?;
            out.write_str("lat_us=")?;
            f.lat.show(out)?;
            out.write_str("\nwire_us=")?;
            f.wire.show(out)?;
            out.write_char('\n')
        })()
        .map_err(|_| EFBIG)
    }
}
