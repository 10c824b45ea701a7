// SPDX-License-Identifier: GPL-2.0

//! What both transports do the same way with a request: turn it into a protocol `Request`,
//! and, once its response is in, check the result and CRC and end or reissue it.

use core::sync::atomic::Ordering;
use kernel::prelude::*;

use crate::disk::{DiskDev, DiskRq};
use crate::kapi::blk_mq::{BlkStatus, ReqOp};
use crate::proto::crc32c::crc32c_append;
use crate::proto::wire::{req_flags, Opcode, RemoteBuf, Request, Response, Status};
use crate::stats::Stats;

/// How often a request is reissued after a CRC mismatch before it fails.
pub(crate) const MAX_CRC_RETRIES: u8 = 3;

/// The transport a request ran on, for the per-transport counters.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    Rdma,
    Tcp,
}

/// CRC32C of a request's data.
pub(crate) fn data_crc(rq: &DiskRq) -> u32 {
    let mut crc = 0;
    rq.for_each_segment(|seg| crc = crc32c_append(crc, seg));
    crc
}

/// The protocol request for `rq` (its buffer left empty), with the CRC of its data for a
/// write; `None` for an operation the protocol does not carry.
pub(crate) fn request(rq: &DiskRq) -> Option<Request> {
    let opcode = match rq.op() {
        ReqOp::Read => Opcode::Read,
        ReqOp::Write => Opcode::Write,
        ReqOp::Flush => Opcode::Flush,
        ReqOp::Discard => Opcode::Discard,
        ReqOp::WriteZeroes => Opcode::WriteZeroes,
        ReqOp::Other(_) => return None,
    };
    Some(Request {
        opcode,
        flags: if rq.is_fua() { req_flags::FUA } else { 0 },
        credits: 0,
        tag: rq.tag(),
        sector: rq.sector(),
        length: rq.bytes(),
        data_crc: if opcode == Opcode::Write {
            data_crc(rq)
        } else {
            0
        },
        buf: RemoteBuf::default(),
    })
}

/// Ends `rq` (an `op` whose exchange is over) by its response: checks the status and a read's
/// CRC, and reissues it after a CRC mismatch up to [`MAX_CRC_RETRIES`] times.
pub(crate) fn finish(disk: &DiskDev, rq: DiskRq, op: Opcode, resp: &Response, via: Via) {
    let stats = &disk.stats;
    let bytes = u64::from(rq.bytes());
    let status = match resp.status {
        Status::Ok if op == Opcode::Read => {
            if resp.length != rq.bytes() || data_crc(&rq) != resp.data_crc {
                Stats::inc(&stats.crc_read_errors);
                Err(Status::CrcMismatch)
            } else {
                Ok(())
            }
        }
        Status::Ok => Ok(()),
        Status::CrcMismatch => {
            Stats::inc(&stats.crc_write_errors);
            Err(Status::CrcMismatch)
        }
        s => Err(s),
    };
    match status {
        Ok(()) => {
            rq.pdu().crc_retries.store(0, Ordering::Relaxed);
            let (count, byte_count) = match op {
                Opcode::Read => (&stats.reads, Some(&stats.read_bytes)),
                Opcode::Write => (&stats.writes, Some(&stats.write_bytes)),
                Opcode::Flush => (&stats.flushes, None),
                Opcode::Discard => (&stats.discards, None),
                Opcode::WriteZeroes | Opcode::Nop => (&stats.write_zeroes, None),
            };
            Stats::inc(count);
            if let Some(b) = byte_count {
                Stats::add(b, bytes);
            }
            let (ios, io_bytes) = match via {
                Via::Rdma => (&stats.rdma_ios, &stats.rdma_bytes),
                Via::Tcp => (&stats.tcp_ios, &stats.tcp_bytes),
            };
            Stats::inc(ios);
            Stats::add(io_bytes, bytes);
            rq.end(BlkStatus::Ok);
        }
        Err(Status::CrcMismatch)
            if rq.pdu().crc_retries.fetch_add(1, Ordering::Relaxed) < MAX_CRC_RETRIES =>
        {
            Stats::inc(&stats.crc_retries);
            rq.requeue(true);
        }
        Err(s) => {
            Stats::inc(&stats.io_errors);
            pr_err!(
                "{}: {:?} of {} bytes at sector {} failed: {s}\n",
                disk.name(),
                op,
                bytes,
                rq.sector()
            );
            rq.pdu().crc_retries.store(0, Ordering::Relaxed);
            rq.end(match s {
                Status::Unsupported => BlkStatus::NotSupp,
                Status::ReadOnly => BlkStatus::Protection,
                _ => BlkStatus::IoErr,
            });
        }
    }
}
