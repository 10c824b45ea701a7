// SPDX-License-Identifier: GPL-2.0

//! blk-mq block devices: a tag set whose requests carry the driver's per-request data and a
//! scatterlist, a gendisk with queue limits, request tokens that the driver ends or requeues,
//! a timeout hook, and the disk's own sysfs directory `/sys/block/<disk>/rdmadisk/`.
//!
//! What 6.12's `kernel::block::mq` lacks and this adds: per-request data (`cmd_size`), sector,
//! length and operation accessors, error completion and requeue, the timeout callback, poll
//! queues and their `poll` callback, queue limits, and per-disk attributes.
//!
//! Ownership is what keeps this safe without `unsafe` in the driver:
//! - blk-mq hands a started request to [`Driver::queue_rq`] as an [`Rq`], a move-only token.
//!   Whoever holds the token owns the request; [`Rq::end`] and [`Rq::requeue`] consume it, so a
//!   request is given back exactly once. Dropping a token that was neither ends the request
//!   with `BLK_STS_IOERR` and warns, so a driver bug fails one I/O instead of hanging it.
//! - The timeout handler only borrows the request ([`RqRef`]): blk-mq holds a reference on it
//!   for the duration of the call, and the token stays where it is.
//! - The driver state `D` is shared (`Arc<D>`): one reference is the tag set's `driver_data`
//!   and the queue's `queuedata` (every blk-mq callback reaches `D` through it), one is held by
//!   the [`Disk`] itself (released last, after the tag set), and one by the sysfs directory.
//!   The tag set's reference is released only after the tag set is freed, when no callback can
//!   run any more.
//! - The disk's sysfs directory is a kobject of our own (RNBD style) whose memory, and `Arc<D>`,
//!   live until the last kobject reference is gone, so an attribute callback always sees `D`.
//!   Dropping the [`Disk`] removes the directory first and waits for the callbacks running in
//!   it, except a self-removing store ([`DiskAttr::wo_self_remove`]) that is dropping it.

mod attrs;
mod disk;
mod driver;
mod early_dir;
mod request;

pub(crate) use attrs::{DevAttr, DiskAttr, DiskAttrs};
pub(crate) use disk::{Disk, DiskConfig, Limits};
pub(crate) use driver::{Driver, HwQueue, TimeoutAction};
pub(crate) use request::{BlkStatus, DataPage, ReqOp, Rq, RqRef};
