// SPDX-License-Identifier: GPL-2.0

//! What both transports do the same way with a request: turn it into a protocol `Request`,
//! and, once its response is in, check the result and CRC and end or reissue it.

use core::sync::atomic::Ordering;
use kernel::prelude::*;

use crate::faults::Fault;
use crate::host::{DiskInfo, DiskRq};
use crate::kapi::blk_mq::{BlkStatus, ReqOp};
use crate::proto::crc32c::crc32c_append;
use crate::proto::wire::{req_flags, Opcode, RemoteBuf, ReqId, Request, Response, Status};
use crate::stats::Stats;
use crate::telemetry::{Op, Via};

/// How often a request is reissued after a CRC mismatch before it fails.
pub(crate) const MAX_CRC_RETRIES: u8 = 3;

/// CRC32C of a request's data.
pub(crate) fn data_crc(rq: &DiskRq) -> u32 {
    let mut crc = 0;
    rq.for_each_segment(|seg| crc = crc32c_append(crc, seg));
    crc
}

/// The protocol operation of `rq`; `None` for one the protocol does not carry.
pub(crate) fn opcode(rq: &DiskRq) -> Option<Opcode> {
    Some(match rq.op() {
        ReqOp::Read => Opcode::Read,
        ReqOp::Write => Opcode::Write,
        ReqOp::Flush => Opcode::Flush,
        ReqOp::Discard => Opcode::Discard,
        ReqOp::WriteZeroes => Opcode::WriteZeroes,
        ReqOp::Other(_) => return None,
    })
}

/// The protocol request for `rq` (of operation `op`) sent as `id` (its buffer left empty),
/// with the CRC of its data for a write.
pub(crate) fn request(rq: &DiskRq, op: Opcode, id: ReqId) -> Request {
    let data_crc = if op == Opcode::Write { data_crc(rq) } else { 0 };
    Request {
        opcode: op,
        flags: if rq.is_fua() { req_flags::FUA } else { 0 },
        credits: 0,
        tag: id.tag(),
        sector: rq.sector(),
        length: rq.bytes(),
        data_crc,
        buf: RemoteBuf::default(),
    }
}

/// Whether an injected data corruption may hit `rq` now: not on its last try. Injected
/// corruption stands for a transient fault, which the retry must absorb; with a deterministic
/// every-Nth switch and a steady queue, a reissued request can come round to the Nth place on
/// every try, and the injection alone would then fail it (seen in a soak). A fault that
/// persists is the target's to inject (its corrupt-read and fail-write-CRC switches).
fn may_corrupt(rq: &DiskRq) -> bool {
    rq.pdu().crc_retries.load(Ordering::Relaxed) < MAX_CRC_RETRIES
}

/// Fault injection: flips the write CRC of `req` (for `rq`), which is about to be sent, if its
/// turn has come. Drawn only here, where a request is committed to the wire: a request sent
/// back to blk-mq to wait (no credit, a connection resetting) is encoded again, and a draw per
/// encoding could line the every-Nth counter up with one request's every send.
pub(crate) fn inject_write_crc(info: &DiskInfo, rq: &DiskRq, req: &mut Request) {
    if req.opcode == Opcode::Write && may_corrupt(rq) && info.faults.hit(Fault::CorruptWriteCrc) {
        req.data_crc = !req.data_crc;
    }
}

/// Why a connection must be reset after a response.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Verdict {
    /// The request was ended or reissued; the connection is fine.
    Done,
    /// The target fenced the request: a newer connection set superseded this one. The request
    /// was requeued; the connection must go.
    Superseded,
}

/// Ends `rq` (an `op` whose exchange is over) by its response: checks the status and a read's
/// CRC, and reissues it after a CRC mismatch up to [`MAX_CRC_RETRIES`] times. The caller has
/// checked that the response's length is the request's.
pub(crate) fn finish(
    info: &DiskInfo,
    mut rq: DiskRq,
    op: Opcode,
    resp: &Response,
    via: Via,
    path: u8,
) -> Verdict {
    let stats = &info.stats;
    let bytes = u64::from(rq.bytes());
    let (dispatched_ns, posted_ns) = rq.pdu().times_ns();
    let record = |ok| {
        if let Some(t) = Op::of(op) {
            info.telemetry
                .record(via, t, ok, bytes, dispatched_ns, posted_ns);
        }
    };
    if resp.status != Status::Fenced {
        info.answered.fetch_add(1, Ordering::Relaxed);
        if posted_ns != 0 {
            info.paths
                .note_latency(path, crate::telemetry::now_ns() - posted_ns);
        }
    }
    let status = match resp.status {
        Status::Ok if op == Opcode::Read => {
            if may_corrupt(&rq) && info.faults.hit(Fault::CorruptRead) {
                // A flipped bit on the way in: the read is retried and rewrites the pages.
                let mut done = false;
                rq.for_each_segment_mut(|seg| {
                    if let (false, Some(b)) = (done, seg.first_mut()) {
                        *b ^= 0x01;
                        done = true;
                    }
                });
            }
            if data_crc(&rq) != resp.data_crc {
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
        Status::Fenced => {
            Stats::inc(&stats.fenced);
            Stats::inc(&stats.requeued);
            rq.requeue(true);
            return Verdict::Superseded;
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
                // Requests of blk-mq only: a NOP or a Close never carries one.
                Opcode::WriteZeroes | Opcode::Nop | Opcode::Close => (&stats.write_zeroes, None),
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
            record(true);
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
            record(false);
            pr_err!(
                "{}: {:?} of {} bytes at sector {} failed: {s}\n",
                info.name(),
                op,
                bytes,
                rq.sector()
            );
            rq.pdu().crc_retries.store(0, Ordering::Relaxed);
            rq.end(match s {
                Status::Unsupported => BlkStatus::NotSupp,
                // As nvme maps NVME_SC_READ_ONLY: a refusal of the medium, final (ENODATA).
                // BLK_STS_PROTECTION (EILSEQ) would say the data failed an integrity check,
                // and BLK_STS_IOERR is a path error that multipath would retry elsewhere.
                Status::ReadOnly => BlkStatus::Medium,
                _ => BlkStatus::IoErr,
            });
        }
    }
    Verdict::Done
}

/// Whether a successful response's length is what `op` of `len` bytes asked for: the data
/// operations move exactly their length, the others report their range or nothing. Anything
/// else is a target that does not follow the protocol.
pub(crate) fn length_ok(op: Opcode, len: u32, resp: &Response) -> bool {
    resp.status != Status::Ok || !op.has_data() || resp.length == len
}
