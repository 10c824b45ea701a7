//! Target counters: atomics, printed as `key=value` lines.

use std::fmt::Write as _;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

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

    /// Rewrites `path` atomically (write to a temp file, rename).
    pub fn write_file(&self, path: &Path) -> io::Result<()> {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, self.render())?;
        std::fs::rename(&tmp, path)
    }
}
