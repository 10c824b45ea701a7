// SPDX-License-Identifier: GPL-2.0

//! The session work of a disk: keeps its queues connected on the transport the policy
//! (`proto::policy`, DESIGN.md "Transport switching") asks for, and carries out the
//! policy's switches.
//!
//! One work item per disk runs whenever something happened (a queue failed, the `transport`
//! knob, an RDMA device came or went) and stays while there is work: reconnecting with
//! backoff, or probing RDMA from TCP. Switches are make-before-break: the new transport's
//! queues are connected while the old ones still carry I/O, swapped in, and then the old ones
//! are torn down; their requests in flight are requeued and reissued on the new transport.
//! Only the loss of the device in use breaks first, because its resources must go at once.

use kernel::{prelude::*, str::CStr, sync::Arc};

use super::{now_ms, DiskDev, State, BACKOFF_FIRST_MS, BACKOFF_MAX_MS};
use crate::probe;
use crate::proto::policy::{Action, State as PState, Transport};
use crate::stats::Stats;

/// How long a probe may take: the probe interval, within these bounds. A loaded host takes a
/// while to set up a queue pair; a slow probe that succeeds still counts.
const PROBE_BUDGET_MIN_MS: u64 = 5_000;
const PROBE_BUDGET_MAX_MS: u64 = 10_000;

pub(crate) fn transport_name(t: Transport) -> &'static str {
    match t {
        Transport::Rdma => "RDMA",
        Transport::Tcp => "TCP",
    }
}

impl DiskDev {
    pub(super) fn run_session(self: &Arc<Self>) {
        let mut backoff = BACKOFF_FIRST_MS;
        while !self.deleting() {
            let state = self.policy.lock().state();
            let want = match state {
                PState::Rdma => Transport::Rdma,
                PState::Draining { to } => to,
                PState::Tcp | PState::Probing => Transport::Tcp,
            };
            if self.healthy_transport() != Some(want) {
                if self.switch_to(want).is_ok() {
                    backoff = BACKOFF_FIRST_MS;
                } else if self.policy.lock().state() == state && !self.nap(backoff) {
                    backoff = (backoff * 2).min(BACKOFF_MAX_MS);
                }
                continue;
            }
            match state {
                // Already there (the knob flipped back, say): the drain is trivially done.
                PState::Draining { .. } => {
                    self.drained();
                }
                PState::Probing => self.probe_tick(),
                PState::Rdma if self.keepalive_ms() > 0 => self.keepalive_tick(),
                PState::Rdma | PState::Tcp => break,
            }
        }
    }

    /// Connects every queue on `want`, swaps them in and tears down the old ones.
    fn switch_to(self: &Arc<Self>, want: Transport) -> Result {
        let from = self
            .queues
            .lock()
            .iter()
            .flatten()
            .next()
            .map(|q| q.transport());
        match self.connect_all(want) {
            Ok((fresh, _)) => {
                let switch = from.is_some_and(|f| f != want);
                let mut moved = 0u32;
                self.replace_queues(fresh, |rq| {
                    moved += 1;
                    self.requeue_or_fail(rq, switch)
                });
                if !self.drained() {
                    Stats::inc(&self.stats.reconnects);
                    pr_info!(
                        "{}: reconnected to {} over {} ({moved} requests reissued)\n",
                        self.name(),
                        self.peer,
                        transport_name(want)
                    );
                } else {
                    pr_info!(
                        "{}: {moved} requests in flight on the old connections reissued\n",
                        self.name()
                    );
                }
                self.set_state(State::Live);
                self.restart_io();
                Ok(())
            }
            Err(e) => {
                if want == Transport::Rdma {
                    let _ = self.policy.lock().on_rdma_failure(now_ms() as u64);
                }
                self.check_loss_timeout();
                pr_warn!(
                    "{}: connecting over {} failed ({e:?}); trying again\n",
                    self.name(),
                    transport_name(want)
                );
                Err(e)
            }
        }
    }

    /// On RDMA with keepalives on: checks every queue, twice per interval.
    fn keepalive_tick(&self) {
        let ms = self.keepalive_ms();
        // Nothing here sleeps: a keepalive only posts a Send.
        for q in self.queues.lock().iter().flatten() {
            q.keepalive(ms);
        }
        self.nap(ms / 2);
    }

    /// Tells the policy a drain is over; true if one was (a failover or failback done).
    fn drained(&self) -> bool {
        let action = self.policy.lock().on_drained(now_ms() as u64);
        let (counter, to) = match action {
            Action::UseTcp => (&self.stats.failovers, Transport::Tcp),
            Action::UseRdma => (&self.stats.failbacks, Transport::Rdma),
            _ => return false,
        };
        Stats::inc(counter);
        pr_info!(
            "{}: I/O now runs over {}\n",
            self.name(),
            transport_name(to)
        );
        true
    }

    /// Fails waiting I/O once the connection has been lost for longer than the loss timeout.
    fn check_loss_timeout(&self) {
        let loss_ms = i64::from(self.loss_timeout_s()) * 1000;
        if let State::Reconnecting { since_ms } = self.state() {
            if now_ms() - since_ms > loss_ms {
                pr_err!(
                    "{}: no connection for {} s: failing I/O, still reconnecting\n",
                    self.name(),
                    loss_ms / 1000
                );
                self.set_state(State::Failed);
            }
        }
    }

    /// On TCP with RDMA possible: waits for the next probe, sends it, reports the result.
    fn probe_tick(self: &Arc<Self>) {
        let interval = self.policy.lock().config().probe_interval_ms;
        if self.policy.lock().on_tick(now_ms() as u64) != Action::SendProbe {
            self.nap(interval.min(u64::from(u32::MAX)) as u32);
            return;
        }
        let budget = interval.clamp(PROBE_BUDGET_MIN_MS, PROBE_BUDGET_MAX_MS) as u32;
        let ok = probe::run(self.name(), self.peer, self.export, budget, false).is_ok();
        // Counted when done, so that probes - probe_failures is the successes so far.
        Stats::inc(&self.stats.probes);
        if !ok {
            Stats::inc(&self.stats.probe_failures);
        }
        let mut p = self.policy.lock();
        if p.on_probe_result(ok, now_ms() as u64) == Action::DrainToRdma {
            drop(p);
            pr_info!(
                "{}: RDMA probes succeeded: switching back to RDMA\n",
                self.name()
            );
        }
    }

    /// The RDMA device `dev` is going away. Connections on it are torn down before this
    /// returns, so the device can go; their requests wait for the switch to TCP. May sleep.
    pub(crate) fn rdma_device_removed(self: &Arc<Self>, dev: &CStr) {
        let uses = self
            .queues
            .lock()
            .iter()
            .flatten()
            .any(|q| q.on_device(dev));
        // Healthy RDMA queues on another device do not care; otherwise (on TCP, or between
        // connections) this may well be the device RDMA would use.
        if uses || self.healthy_transport() != Some(Transport::Rdma) {
            let _ = self.policy.lock().on_device_removed(now_ms() as u64);
        }
        if uses {
            pr_info!(
                "{}: RDMA device {dev} is going away: moving I/O to TCP\n",
                self.name()
            );
            {
                let mut st = self.state.lock();
                if *st == State::Live {
                    *st = State::Reconnecting { since_ms: now_ms() };
                }
            }
            self.shutdown_queues_if(|q| q.on_device(dev), |rq| self.requeue_or_fail(rq, true));
        }
        self.kick();
    }

    /// An RDMA device appeared: the end of NIC servicing, typically.
    pub(crate) fn rdma_device_added(self: &Arc<Self>) {
        if self.policy.lock().on_device_added(now_ms() as u64) == Action::DrainToRdma {
            pr_info!(
                "{}: an RDMA device appeared: switching back to RDMA\n",
                self.name()
            );
        }
        self.kick();
    }
}
