// SPDX-License-Identifier: GPL-2.0

//! A hardware queue's connection on either transport.

use kernel::{prelude::*, str::CStr, sync::Arc};

use crate::disk::{DiskDev, DiskRq};
use crate::kapi::blk_mq::BlkStatus;
use crate::proto::policy::Transport;
use crate::proto::wire::HelloReply;
use crate::rdma_queue::RdmaQueue;
use crate::tcp_queue::TcpQueue;

#[derive(Clone)]
pub(crate) enum Queue {
    Rdma(Arc<RdmaQueue>),
    Tcp(Arc<TcpQueue>),
}

impl Queue {
    /// Connects queue `qid` of `disk` on `t`; returns it with the target's Hello reply.
    pub(crate) fn connect(
        disk: &Arc<DiskDev>,
        qid: u16,
        t: Transport,
    ) -> Result<(Queue, HelloReply)> {
        Ok(match t {
            Transport::Rdma => {
                let (q, r) = RdmaQueue::connect(disk, qid)?;
                (Queue::Rdma(q), r)
            }
            Transport::Tcp => {
                let (q, r) = TcpQueue::connect(disk, qid)?;
                (Queue::Tcp(q), r)
            }
        })
    }

    pub(crate) fn transport(&self) -> Transport {
        match self {
            Queue::Rdma(_) => Transport::Rdma,
            Queue::Tcp(_) => Transport::Tcp,
        }
    }

    pub(crate) fn submit(&self, rq: DiskRq) -> core::result::Result<(), (DiskRq, BlkStatus)> {
        match self {
            Queue::Rdma(q) => q.submit(rq),
            Queue::Tcp(q) => q.submit(rq),
        }
    }

    pub(crate) fn fail_timeout(&self) {
        match self {
            Queue::Rdma(q) => q.fail_timeout(),
            Queue::Tcp(q) => q.fail_timeout(),
        }
    }

    /// Checks a quiet RDMA connection with a NOP (TCP has the kernel's own keepalive).
    pub(crate) fn keepalive(&self, interval_ms: u32) {
        if let Queue::Rdma(q) = self {
            q.keepalive(interval_ms);
        }
    }

    pub(crate) fn is_failed(&self) -> bool {
        match self {
            Queue::Rdma(q) => q.is_failed(),
            Queue::Tcp(q) => q.is_failed(),
        }
    }

    /// Whether this is an RDMA connection on the device named `dev`.
    pub(crate) fn on_device(&self, dev: &CStr) -> bool {
        match self {
            Queue::Rdma(q) => q.on_device(dev),
            Queue::Tcp(_) => false,
        }
    }

    /// Tears the connection down and hands every request that was on it to `dispose`. May
    /// sleep.
    pub(crate) fn shutdown(&self, dispose: impl FnMut(DiskRq)) {
        match self {
            Queue::Rdma(q) => q.shutdown(dispose),
            Queue::Tcp(q) => q.shutdown(dispose),
        }
    }
}
