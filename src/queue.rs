// SPDX-License-Identifier: GPL-2.0

//! A hardware queue's connection on either transport.

use kernel::{prelude::*, sync::Arc};

use crate::host::{ConnId, DiskRq, QueueHost};
use crate::kapi::blk_mq::BlkStatus;
use crate::kapi::verbs::DeviceId;
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
    /// Connects queue `id.qid` of `host`'s disk on `t`, as part of connection set `id.epoch`,
    /// within `budget_ms`; returns it with the target's Hello reply. May sleep.
    pub(crate) fn connect(
        host: &Arc<dyn QueueHost>,
        id: ConnId,
        t: Transport,
        budget_ms: u32,
    ) -> Result<(Queue, HelloReply)> {
        Ok(match t {
            Transport::Rdma => {
                let (q, r) = RdmaQueue::connect(host, id, budget_ms)?;
                (Queue::Rdma(q), r)
            }
            Transport::Tcp => {
                let (q, r) = TcpQueue::connect(host, id, budget_ms)?;
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

    /// Reaps a poll queue's completions for blk-mq's poll; returns how many. TCP's arrive
    /// through the socket's own work: nothing to reap here.
    pub(crate) fn poll(&self) -> u32 {
        match self {
            Queue::Rdma(q) => q.poll(),
            Queue::Tcp(_) => 0,
        }
    }

    /// Reaps a poll queue's CQ empty; returns how many completions that took (0 on TCP and on
    /// interrupt-driven queues, whose completions need no reaping).
    pub(crate) fn reap_all(&self) -> u32 {
        match self {
            Queue::Rdma(q) => q.reap_all(),
            Queue::Tcp(_) => 0,
        }
    }

    pub(crate) fn fail_timeout(&self) {
        match self {
            Queue::Rdma(q) => q.fail_timeout(),
            Queue::Tcp(q) => q.fail_timeout(),
        }
    }

    /// The connection's health check: credit starvation always, keepalives and a frozen
    /// target when `keepalive_ms` is on. The session runs it every half keepalive interval,
    /// or every half I/O timeout with keepalives off.
    pub(crate) fn health_check(&self) {
        match self {
            Queue::Rdma(q) => q.health_check(),
            Queue::Tcp(q) => q.health_check(),
        }
    }

    pub(crate) fn is_failed(&self) -> bool {
        match self {
            Queue::Rdma(q) => q.is_failed(),
            Queue::Tcp(q) => q.is_failed(),
        }
    }

    /// Requests on the connection now.
    pub(crate) fn in_flight(&self) -> u32 {
        match self {
            Queue::Rdma(q) => q.in_flight(),
            Queue::Tcp(q) => q.in_flight(),
        }
    }

    /// Largest request the connection can carry (RDMA: what its MRs map).
    pub(crate) fn max_io_bytes(&self) -> u32 {
        match self {
            Queue::Rdma(q) => q.max_io_bytes(),
            Queue::Tcp(_) => u32::MAX,
        }
    }

    /// Whether this is an RDMA connection on the device `dev`.
    pub(crate) fn on_device(&self, dev: DeviceId) -> bool {
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
