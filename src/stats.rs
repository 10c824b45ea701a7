// SPDX-License-Identifier: GPL-2.0

//! Per-disk counters, shown as `key=value` lines in `/sys/block/rdmadiskN/rdmadisk/stats`.

use core::{
    fmt::Write,
    sync::atomic::{AtomicU64, Ordering},
};
use kernel::prelude::*;

use crate::kapi::sysfs::ShowBuf;
use crate::proto::policy::SwitchReason;

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// The counters of one disk. Relaxed atomics: each is exact, their sum is a snapshot.
        #[derive(Default)]
        pub(crate) struct Stats {
            $($(#[$doc])* pub(crate) $name: AtomicU64,)*
        }

        impl Stats {
            pub(crate) fn show(&self, out: &mut ShowBuf<'_>) -> Result {
                $(writeln!(out, concat!(stringify!($name), "={}"), self.$name.load(Ordering::Relaxed))
                    .map_err(|_| EFBIG)?;)*
                Ok(())
            }
        }
    };
}

counters! {
    /// Read requests completed successfully.
    reads,
    /// Write requests completed successfully.
    writes,
    read_bytes,
    write_bytes,
    flushes,
    discards,
    write_zeroes,
    /// Responses received.
    responses,
    /// Responses that arrived with the request's rkey invalidated by the target.
    remote_invalidations,
    /// Writes sent inline with their request (no registration, no RDMA Read).
    inline_writes,
    /// Work completions of poll queues (`poll_queues=`) reaped by polling: blk-mq's poll,
    /// and the health check's and the timeout handler's, which reap an idle queue.
    polled_completions,
    /// Registrations we had to invalidate ourselves (the response carried no invalidation).
    local_invalidations,
    /// Responses that invalidated another key than the request's (connection reset).
    rkey_mismatches,
    /// Read data whose CRC32C did not match the response's.
    crc_read_errors,
    /// Writes the target refused because the data's CRC32C did not match.
    crc_write_errors,
    /// Requests reissued after a CRC mismatch.
    crc_retries,
    /// Requests completed with an error.
    io_errors,
    /// Times a request waited because no send credit was left.
    credit_waits,
    /// Most requests outstanding on one queue at once.
    max_outstanding,
    /// Requests whose timer expired.
    timeouts,
    /// Connections re-established after a failure.
    reconnects,
    /// Requests handed back to blk-mq by a connection reset or a transport switch.
    requeued,
    /// Requests completed over RDMA, and their bytes.
    rdma_ios,
    rdma_bytes,
    /// Requests completed over TCP, and their bytes.
    tcp_ios,
    tcp_bytes,
    /// Switches from RDMA to TCP.
    failovers,
    /// Switches from TCP back to RDMA.
    failbacks,
    /// Switches (either way) by their reason: RDMA failures over the threshold, the RDMA
    /// device removed or back, good probes, the `transport` knob, no connection possible on
    /// the transport in use.
    switches_rdma_failures,
    switches_device_removed,
    switches_device_added,
    switches_probes,
    switches_manual,
    switches_no_connection,
    /// Requests handed back to blk-mq by a transport switch (also counted in `requeued`).
    switch_requeued,
    /// RDMA probes done while on TCP, and how many of them failed.
    probes,
    probe_failures,
    /// TCP connections set up.
    tcp_connects,
    /// Keepalive NOPs sent on a quiet RDMA connection.
    keepalives,
    /// Responses dropped because their request id named no request in flight: a duplicate, a
    /// replay, a stranger, or an earlier use of a reissued slot.
    stale_responses,
    /// Requests the target refused as fenced (a newer connection set superseded theirs).
    fenced,
    /// Connection attempts that failed, either transport.
    connect_failures,
    /// Times a disk with no connection failed its waiting I/O at `fast_io_fail_s`.
    fast_io_fails,
    /// Times the disk grew to a capacity the target reported (online resize).
    resizes,
    /// Times the disk moved from a lost target to the next (several targets).
    path_failovers,
    /// Times it moved back to the first target once that answered again.
    path_failbacks,
    /// Probes of the first target while another served, and those that failed.
    path_probes,
    path_probe_failures,
}

impl Stats {
    /// Adds one to a counter.
    pub(crate) fn inc(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The counter of switches for `why`.
    pub(crate) fn switch_reason(&self, why: SwitchReason) -> &AtomicU64 {
        match why {
            SwitchReason::RdmaFailures => &self.switches_rdma_failures,
            SwitchReason::DeviceRemoved => &self.switches_device_removed,
            SwitchReason::DeviceAdded => &self.switches_device_added,
            SwitchReason::Probes => &self.switches_probes,
            SwitchReason::Manual => &self.switches_manual,
            SwitchReason::NoConnection => &self.switches_no_connection,
        }
    }

    /// Adds `n` to a counter.
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}
