//! Target counters: atomics, printed as `key=value` lines.

use std::fmt::Write as _;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::hostile::Kind;

macro_rules! counters {
    ($($(#[$m:meta])* $name:ident,)*) => {
        /// Every counter of the target. All are monotonic except `connections_active`.
        #[derive(Default)]
        pub struct Stats {
            $($(#[$m])* pub $name: AtomicU64,)*
        }

        impl Stats {
            /// `key=value` lines, one per counter, in declaration order.
            pub fn render(&self) -> String {
                let mut s = String::new();
                $(let _ = writeln!(s, "{}={}", stringify!($name), self.$name.load(Ordering::Relaxed));)*
                s
            }
        }
    };
}

counters! {
    /// Requests received (both transports), valid or not.
    requests,
    reads,
    writes,
    flushes,
    discards,
    write_zeroes,
    nops,
    /// Bytes read from exports and sent to clients.
    bytes_read,
    /// Bytes received from clients and written to exports.
    bytes_written,
    /// RDMA Reads posted (write data pulled from the client).
    rdma_reads,
    /// Writes whose data came inline with the request (no RDMA Read).
    inline_writes,
    rdma_read_bytes,
    /// RDMA Writes posted (read data pushed to the client).
    rdma_writes,
    rdma_write_bytes,
    /// Responses posted as Send-with-Invalidate.
    send_with_inv,
    /// Responses posted as a plain Send (the request carried rkey 0).
    plain_sends,
    /// Write data whose CRC32C did not match (including injected failures).
    crc_failures,
    /// Requests refused by Request::validate (out of range, bad length, read-only, bad flags).
    bound_violations,
    /// Backing store errors.
    io_errors,
    /// Connections reset because of a malformed message, a protocol violation or a QP error.
    resets,
    /// RDMA work completions with an error status (other than flushes).
    rdma_errors,
    tcp_connections,
    rdma_connections,
    connections_active,
    /// Connections refused (allow-list, unknown export, bad hello).
    refused,
    /// Read data corrupted on purpose (--corrupt-read-every).
    injected_read_corruptions,
    /// Write CRCs failed on purpose (--fail-write-crc-every).
    injected_write_crc_failures,
    /// Times a response had to wait for a client credit.
    credit_waits,
    /// Hellos refused Stale: their epoch, or their session, has been superseded (fencing).
    stale_hellos,
    /// Modifying requests of a superseded connection, not applied and answered Fenced.
    fenced_requests,
    /// Times a connection's first request moved its (address, export) fence to a newer
    /// session or epoch.
    fence_moves,
    /// Hellos refused Busy because the fence table was full.
    fence_table_full,
    /// Fences in the table (a gauge, rewritten with the stats file).
    fences,
    /// Sessions closed by their client (a normal unmap): their fences go once unused.
    closes,
    /// Hellos refused NotAllowed because the connection came from an unreserved port (1024 or
    /// above: any user of the client host) to an export that no key protects.
    unreserved_port_refusals,
    /// RDMA connections accepted that never became established (rejected or unreachable at the
    /// client, or no answer within the Hello deadline): torn down, having built nothing.
    half_open_closes,
    /// Requests never answered on purpose (--stall-sector).
    stalled_requests,
    /// Connections refused because the caps were reached (per listener or per host).
    connections_over_cap,
    /// Hellos refused Busy: the export is held read-write by another host (exclusive).
    exclusive_refusals,
    /// Gateway exports (RBD `gateway`): times a read-write attach took the image's exclusive
    /// lock over (from another gateway, which Ceph blocklisted, or from nobody).
    gateway_takeovers,
    /// Read-write attaches of a gateway export refused because the takeover failed.
    gateway_takeover_failures,
    /// Writes, discards and write-zeroes refused because this target no longer holds the
    /// store's writer lock (another gateway took it over): none of them was applied.
    writes_refused_unlocked,
    /// TCP clients that did not send a whole Hello within the deadline.
    hello_timeouts,
    /// Connections closed after the idle timeout.
    idle_closes,
    /// Connections closed because a response could not be sent in time.
    send_timeouts,
    /// TCP connections closed because the rest of a started frame did not come in time.
    recv_timeouts,
    /// Requests beyond the credits granted (TCP; the connection is reset).
    credit_overruns,
    /// Authentications that failed (a wrong proof, or none where one was required).
    auth_failures,
    /// Times a request waited for a data buffer (the budget was spent).
    buffer_waits,
    /// Bytes counted against buffer_memory now (data buffers and connections' own buffers),
    /// and at most (gauges, rewritten with the stats file).
    buffer_bytes,
    buffer_bytes_peak,
    /// Of buffer_bytes, the connections' own buffers (RDMA receives and sends, TCP staging):
    /// a gauge.
    connection_buffer_bytes,
    /// Data buffers made (and registered with a device, for RDMA) so far; reused ones are not
    /// counted again.
    buffers_made,
    /// Connections refused Busy because their own buffers did not fit in buffer_memory.
    memory_refusals,
    /// Responses posted (RDMA) or queued (TCP), and the microseconds their requests spent in
    /// the target in all, from the transport handing the request over (its receive taken off
    /// the CQ, its frame parsed) to that point: `service_us / served` is the mean time a
    /// request spends here, wire time excluded.
    served,
    service_us,
    /// Backing operations completed, and the microseconds between their start and their
    /// completion in all.
    backing_ops,
    backing_us,
    /// RDMA, with `poll_us`: times a connection polled its CQs before arming them, those
    /// that found a completion (and so neither armed nor slept), and the microseconds spent
    /// polling in all.
    spins,
    spin_hits,
    spin_us,
    /// How the connections' io_uring rings are set up (a gauge): 3 with SINGLE_ISSUER and
    /// DEFER_TASKRUN, 2 with COOP_TASKRUN, 1 with neither (the kernel refused them); 0 before
    /// the first connection.
    ring_setup,
    /// Hostile acts (--hostile), all kinds; one counter per kind follows.
    hostile_acts,
    hostile_unknown_tag,
    hostile_dup_response,
    hostile_wrong_rkey,
    hostile_no_invalidate,
    hostile_bad_status,
    hostile_long_length,
    hostile_truncated,
    hostile_garbage,
    hostile_credit_overflow,
    hostile_late_write,
    /// late_write RDMA Writes refused by the client's HCA, as they must be (the connection is
    /// then reset and counted in hostile_resets, not in rdma_errors or resets).
    late_write_rejected,
    /// late_write RDMA Writes that completed: the client left an answered request's memory
    /// reachable, a client bug.
    late_write_succeeded,
    /// Connections reset because a hostile act broke them on purpose (a refused late_write).
    hostile_resets,
}

/// A duration in whole microseconds, for the time counters.
pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Stats {
    /// Adds `n` to a counter.
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds one to a counter.
    pub fn inc(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The per-kind counter of a hostile act.
    pub fn hostile(&self, k: Kind) -> &AtomicU64 {
        match k {
            Kind::UnknownTag => &self.hostile_unknown_tag,
            Kind::DupResponse => &self.hostile_dup_response,
            Kind::WrongRkey => &self.hostile_wrong_rkey,
            Kind::NoInvalidate => &self.hostile_no_invalidate,
            Kind::BadStatus => &self.hostile_bad_status,
            Kind::LongLength => &self.hostile_long_length,
            Kind::Truncated => &self.hostile_truncated,
            Kind::Garbage => &self.hostile_garbage,
            Kind::CreditOverflow => &self.hostile_credit_overflow,
            Kind::LateWrite => &self.hostile_late_write,
        }
    }

    /// Sets a gauge.
    pub fn set(c: &AtomicU64, v: u64) {
        c.store(v, Ordering::Relaxed);
    }

    /// Rewrites `path` atomically: a new file with a random name in the same directory
    /// (created exclusively, so a symlink planted there is never followed), then a rename over
    /// `path` (which replaces a symlink, never writes through it).
    pub fn write_file(&self, path: &Path) -> io::Result<()> {
        use std::io::Write as _;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        // Readable by monitoring that does not run as the target's user. Not fsynced: it is
        // rewritten every second, and a crash loses nothing the next start does not rebuild.
        let mut tmp = tempfile::Builder::new()
            .prefix(".rdmadisk-stats")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .tempfile_in(dir)?;
        tmp.write_all(self.render().as_bytes())?;
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hostile_kind_has_its_own_counter() {
        let s = Stats::default();
        for (i, k) in Kind::ALL.into_iter().enumerate() {
            Stats::add(s.hostile(k), i as u64 + 1);
        }
        let text = s.render();
        for (i, k) in Kind::ALL.into_iter().enumerate() {
            let line = format!("hostile_{}={}", k.name(), i + 1);
            assert!(text.lines().any(|l| l == line), "{line} in {text}");
        }
    }
}
