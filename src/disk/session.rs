// SPDX-License-Identifier: GPL-2.0

//! The session work of a disk: the one place that changes its connection set and its state
//! (docs/design.md, "Transport switching" and "When things go wrong").
//!
//! One work item per disk runs whenever something happened (a connection failed, a knob, an
//! RDMA device came or went) and stays while there is something to do:
//!
//! - **Mapping** (`Connecting`): connect the first set on RDMA, or on TCP when RDMA cannot be
//!   had and the target answers there; report the outcome to the `map_device` writer.
//! - **A broken set** (a connection failed, or a device removal took some away): tear the
//!   whole set down at once, handing its requests back to blk-mq, where they wait while the
//!   disk is `Reconnecting`. Then connect a new set on the transport the policy wants; if that
//!   fails and the policy allows (mode `auto`), the other transport at once, so an outage
//!   passes on whichever transport comes back first; then back off (100 ms doubling to 5 s)
//!   and try again. Every failed attempt is counted; RDMA ones also by the policy.
//! - **Deadlines** while reconnecting: past `fast_io_fail_s` (if set) waiting I/O fails while
//!   reconnecting goes on; past `loss_timeout_s` the disk fails for good: every request ends
//!   with an error, the block device is marked dead, and nothing reconnects.
//! - **A planned switch** (the policy drains to the other transport, e.g. failback after good
//!   probes): make-before-break. The new set is connected while the old one carries I/O, then
//!   swapped in, then the old one is torn down and its requests reissued. A failed attempt
//!   leaves the serving set alone.
//! - **While healthy**: RDMA probes from TCP, and the connections' health checks; the latter
//!   also while a switch to the other transport keeps failing and the old set serves on.
//!
//! Every new set gets the next epoch; the target fences older sets, so nothing a torn-down
//! connection still had in flight is applied after its reissued copy (docs/design.md, the
//! fencing rule).

use kernel::{prelude::*, sync::Arc};

use super::{Attached, DiskDev, State, FAST_IO_FAIL_OFF};
use crate::faults::Fault;
use crate::host::{now_ms, transport_name, ConnId, QueueHost};
use crate::kapi::errno;
use crate::kapi::work::NoIo;
use crate::probe;
use crate::proto::policy::{self, Action, Policy, State as PState, SwitchReason, Transport};
use crate::proto::wire::{features, HelloReply};
use crate::queue::Queue;
use crate::rdma_conn::{is_refusal, no_rdma_listener};
use crate::stats::Stats;

const BACKOFF_FIRST_MS: u32 = 100;
const BACKOFF_MAX_MS: u32 = 5_000;
/// Set-up budget per connection; a set of N connections may take N times this.
pub(crate) const CONNECT_BUDGET_MS: u32 = 10_000;
/// Least time a reconnect attempt gets, even close to the loss deadline.
const CONNECT_BUDGET_MIN_MS: u32 = 1_000;
/// How often a disk whose new set has not proven itself yet is looked at (keepalives off).
const OUTAGE_WATCH_MS: u32 = 1_000;
/// How long a probe may take: the probe interval, within these bounds. A loaded host takes a
/// while to set up a queue pair; a slow probe that succeeds still counts.
const PROBE_BUDGET_MIN_MS: u64 = 5_000;
const PROBE_BUDGET_MAX_MS: u64 = 10_000;

fn other(t: Transport) -> Transport {
    match t {
        Transport::Rdma => Transport::Tcp,
        Transport::Tcp => Transport::Rdma,
    }
}

/// A connected set, not yet installed.
struct Set {
    /// The target it is connected to.
    path: u8,
    queues: KVec<Option<Queue>>,
    reply: HelloReply,
    max_io_bytes: u32,
}

impl DiskDev {
    pub(super) fn run_session(self: &Arc<Self>) {
        // Allocations here (connection set-up) must not recurse into I/O on this very disk.
        let _noio = NoIo::enter();
        let mut backoff = BACKOFF_FIRST_MS;
        loop {
            match self.state() {
                State::Deleting { .. } | State::Failed => return,
                State::Connecting => {
                    self.attach_first_set();
                    continue;
                }
                State::Reconnecting { since_ms } => {
                    if self.loss_expired(since_ms) {
                        self.give_up();
                        return;
                    }
                    self.check_fast_fail(since_ms);
                }
                State::Live => self.check_outage_over(),
            }
            self.drop_broken_set();
            let want = self.wanted();
            match self.installed() {
                Some(t) if t == want => {
                    backoff = BACKOFF_FIRST_MS;
                    self.settle_live();
                    // Read first: the arms sleep, and must not hold the lock.
                    let pstate = self.policy.lock().state();
                    if let PState::Draining { .. } = pstate {
                        // Already there (the knob flipped back, say): the drain is trivially
                        // done.
                        self.drained();
                        continue;
                    }
                    self.apply_capacity();
                    self.check_connections();
                    let check_ms = self.check_interval_ms();
                    if self.failback_tick(t) {
                        continue;
                    }
                    if pstate == PState::Probing {
                        self.probe_tick(check_ms);
                    } else if self.outage_open() {
                        // An outage in progress is watched until the new set proves itself.
                        self.nap(check_ms.min(OUTAGE_WATCH_MS));
                    } else {
                        self.nap(check_ms);
                    }
                }
                installed => {
                    if installed.is_none() {
                        self.pathsel.lock().on_lost(now_ms() as u64);
                    }
                    let mut gone = match self.bring_up(want) {
                        Ok(()) => {
                            backoff = BACKOFF_FIRST_MS;
                            continue;
                        }
                        // Superseded: the disk failed for good; nothing is tried any more.
                        Err(e) if e == errno(kernel::bindings::ESTALE) => continue,
                        Err(e) => is_refusal(e),
                    };
                    if installed.is_none() {
                        match self.fall_back(want) {
                            Ok(()) => {
                                backoff = BACKOFF_FIRST_MS;
                                continue;
                            }
                            Err(e) if e == errno(kernel::bindings::ESTALE) => continue,
                            // Not tried: counts as refused only if the policy keeps to `want`
                            // (a mode that pins it); one that just turned to the other
                            // transport tries it next, on this target.
                            Err(e) if e == errno(kernel::bindings::EOPNOTSUPP) => {
                                gone &= self.wanted() == want
                            }
                            Err(e) => gone &= is_refusal(e),
                        }
                        // Refused on every transport tried this time: the lost target is
                        // gone, not slow.
                        self.pathsel.lock().on_attempt(gone);
                    }
                    // Several targets: one lost for `path_failover_ms` is left for the next,
                    // which is tried at once.
                    if installed.is_none() && self.fail_over_path() {
                        backoff = BACKOFF_FIRST_MS;
                        continue;
                    }
                    // The set that still serves (a switch to the other transport keeps
                    // failing) is checked as any: a target frozen meanwhile must be found
                    // within the keepalive bound, not at the I/O timeout.
                    let kicked = if installed.is_some() {
                        self.nap_checking(backoff)
                    } else {
                        // Not past the moment the lost target is to be left.
                        self.nap(backoff.min(self.failover_in_ms()))
                    };
                    if !kicked {
                        backoff = (backoff * 2).min(BACKOFF_MAX_MS);
                    }
                }
            }
        }
    }

    /// The transport the policy wants I/O on.
    fn wanted(&self) -> Transport {
        let state = self.policy.lock().state();
        match state {
            PState::Rdma => Transport::Rdma,
            PState::Draining { to } => to,
            PState::Tcp | PState::Probing => Transport::Tcp,
        }
    }

    /// The transport of the installed set, if it is complete and none of it has failed.
    pub(super) fn installed(&self) -> Option<Transport> {
        let c = self.ctrl.lock();
        let mut t = None;
        for q in c.queues.iter() {
            let q = q.as_ref().filter(|q| !q.is_failed())?;
            if t.is_some_and(|t| t != q.transport()) {
                return None;
            }
            t = Some(q.transport());
        }
        t
    }

    /// Whether the loss timeout has run out, `since_ms` the loss ([`policy::loss_expired`]).
    pub(super) fn loss_expired(&self, since_ms: i64) -> bool {
        policy::loss_expired(self.loss_ms(), now_ms() - since_ms)
    }

    /// Tears down an installed set that is incomplete or has a failed connection: its
    /// requests go back to blk-mq and wait there (or fail, per the deadlines), rather than
    /// sit on a dead connection until a new set is up.
    fn drop_broken_set(&self) {
        let broken = {
            let mut c = self.ctrl.lock();
            let present = c.queues.iter().flatten().count();
            let failed = c.queues.iter().flatten().any(Queue::is_failed);
            let broken = present > 0 && (failed || present < c.queues.len());
            if broken {
                c.enter_reconnecting();
            }
            broken
        };
        if broken {
            let mut moved = 0u32;
            self.teardown_all(|rq| {
                moved += 1;
                self.requeue_or_fail(rq, false)
            });
            pr_info!(
                "{}: connections torn down; {moved} requests on them wait for a new connection\n",
                self.name()
            );
        }
    }

    /// The epoch of the next set: never 0, which means "none".
    fn next_epoch(&self) -> u32 {
        match self.ctrl.lock().epoch.wrapping_add(1) {
            0 => 1,
            e => e,
        }
    }

    /// Connects a whole set on `t` as `epoch` within `budget_ms` (all or none).
    fn connect_set(self: &Arc<Self>, t: Transport, epoch: u32, budget_ms: u32) -> Result<Set> {
        let host: Arc<dyn QueueHost> = self.clone();
        let (path, takeover) = {
            let p = self.pathsel.lock();
            (p.active(), p.takeover())
        };
        let deadline = now_ms() + i64::from(budget_ms);
        let n = usize::from(self.info.nr_queues);
        let mut queues = KVec::with_capacity(n, GFP_KERNEL)?;
        let mut first: Option<HelloReply> = None;
        let mut max_io = u32::MAX;
        let res = (|| -> Result {
            for qid in 0..self.info.nr_queues {
                let left = deadline - now_ms();
                if left <= 0 || self.deleting() {
                    return Err(errno(kernel::bindings::ETIMEDOUT));
                }
                // One connection never takes more than its own budget: a target that accepts
                // but never answers must not hold the session for the whole set's. The first
                // on a gateway just moved to may take the store's lock over from a frozen one.
                let cap = if qid == 0 && takeover {
                    u64::from(CONNECT_BUDGET_MS) + crate::proto::paths::TAKEOVER_MS
                } else {
                    u64::from(CONNECT_BUDGET_MS)
                };
                let budget = left.min(cap as i64) as u32;
                let (q, reply) = Queue::connect(&host, ConnId { qid, epoch, path }, t, budget)?;
                max_io = max_io.min(q.max_io_bytes());
                // Room for `n` was reserved above.
                if let Err(e) = queues.push(Some(q.clone()), GFP_KERNEL) {
                    q.shutdown(|rq| self.requeue_or_fail(rq, false));
                    return Err(e.into());
                }
                first.get_or_insert(reply);
            }
            Ok(())
        })();
        let checked = res.and_then(|()| {
            let reply = first.ok_or(EINVAL)?;
            self.check_gateway(&reply, path)?;
            self.check_reply(&reply, max_io)?;
            Ok(reply)
        });
        match checked {
            Ok(reply) => Ok(Set {
                path,
                queues,
                reply,
                max_io_bytes: max_io,
            }),
            Err(e) => {
                for q in queues.iter().flatten() {
                    q.shutdown(|rq| self.requeue_or_fail(rq, false));
                }
                Stats::inc(&self.info.stats.connect_failures);
                Err(e)
            }
        }
    }

    /// Whether a reconnected set serves the disk that was mapped. The block device was built
    /// from the first set's reply (`map.rs`), and what is queued against it must mean the same
    /// on the new set: connections that cannot carry the disk's largest request are refused,
    /// and so is a target that now reports another capacity, other block sizes, another
    /// read-only flag, a smaller largest request, or another export UUID. One exception: an
    /// export that may grow while served (`features::RESIZE`, an RBD image) may have grown
    /// while the disk was away, and the disk grows to it once the set is installed. A file
    /// that changed size across a target restart is still refused: it is more likely the wrong
    /// file than a resize. The session keeps trying; the loss timeout bounds it.
    fn check_reply(&self, reply: &HelloReply, max_io: u32) -> Result {
        let need = self
            .info
            .max_io_bytes
            .load(core::sync::atomic::Ordering::Relaxed);
        if max_io < need {
            pr_err!(
                "{}: the new connections carry at most {max_io} bytes per request; the disk needs {need}\n",
                self.name()
            );
            return Err(EINVAL);
        }
        let built = match self.attach.lock().as_ref() {
            Some(Ok(a)) => a.reply,
            // Mapping: this is the reply the disk will be built from.
            _ => {
                self.note_resize(reply, true);
                return Ok(());
            }
        };
        let (who, export) = (self.name(), self.info.export);
        let mut same = true;
        let resizes = reply.features & features::RESIZE != 0;
        let grown = resizes && reply.capacity_sectors > built.capacity_sectors;
        if reply.capacity_sectors != built.capacity_sectors && !grown {
            pr_err!(
                "{who}: the target now reports {} sectors for export {export}, not the {} the disk was mapped with: refusing the connection ({}: unmap it and map it again)\n",
                reply.capacity_sectors,
                built.capacity_sectors,
                if resizes {
                    "a disk does not shrink online"
                } else {
                    "the export does not resize online"
                }
            );
            same = false;
        }
        let pbs = |r: &HelloReply| r.physical_block_size.max(r.logical_block_size);
        if reply.logical_block_size != built.logical_block_size || pbs(reply) != pbs(&built) {
            pr_err!(
                "{who}: the target now reports block sizes {}/{} (logical/physical) for export {export}, not the {}/{} the disk was mapped with: refusing the connection\n",
                reply.logical_block_size,
                pbs(reply),
                built.logical_block_size,
                pbs(&built)
            );
            same = false;
        }
        let ro = |r: &HelloReply| r.features & features::READ_ONLY != 0;
        if ro(reply) != ro(&built) {
            let name = |ro| if ro { "read-only" } else { "read-write" };
            pr_err!(
                "{who}: the target now serves export {export} {}, not {} as when the disk was mapped: refusing the connection\n",
                name(ro(reply)),
                name(ro(&built))
            );
            same = false;
        }
        if reply.max_io_bytes < need {
            pr_err!(
                "{who}: the target now takes requests of at most {} bytes for export {export}; the disk issues up to {need}: refusing the connection\n",
                reply.max_io_bytes
            );
            same = false;
        }
        // Another UUID is another export, whatever its name (docs/design.md, "Identity"). A
        // target that sends none (an older one) is not held against the disk.
        if let (Some(now), Some(was)) = (reply.identity, built.identity) {
            if now.uuid != was.uuid {
                pr_err!(
                    "{who}: the target now serves export {export} with uuid {}, not the {} the disk was mapped with: refusing the connection\n",
                    now.uuid,
                    was.uuid
                );
                same = false;
            }
        }
        if same {
            self.note_resize(reply, false);
            Ok(())
        } else {
            Err(EINVAL)
        }
    }

    /// A set answered `reply` and is taken: whether its responses' capacity counts
    /// (`features::RESIZE`), and the capacity it reports (`first`: the one the disk is built
    /// from, so no resize follows).
    fn note_resize(&self, reply: &HelloReply, first: bool) {
        use core::sync::atomic::Ordering::Relaxed;
        let on = reply.features & features::RESIZE != 0;
        self.info.resize.store(on, Relaxed);
        if first {
            self.info
                .reported_capacity
                .store(reply.capacity_sectors, Relaxed);
        } else {
            self.info.note_capacity(reply.capacity_sectors);
        }
    }

    /// Puts `set` (of epoch `epoch`) in place of the installed one, then tears the old one
    /// down, reissuing its requests (make-before-break). Returns whether the set is live.
    fn install(&self, set: Set, epoch: u32, t: Transport) -> bool {
        let set_path = set.path;
        let (old_set, was) = {
            let mut c = self.ctrl.lock();
            if matches!(c.state, State::Deleting { .. } | State::Failed) {
                (Some(set.queues), None)
            } else {
                let old = core::mem::replace(&mut c.queues, set.queues);
                c.epoch = epoch;
                self.pathsel.lock().on_installed(set.path);
                self.info.paths.set_active(set.path);
                self.info.paths.note_up(set.path);
                let was = c.state;
                c.state = State::Live;
                c.fast_fail = false;
                c.installed_ms = now_ms();
                c.installed_answered = self
                    .info
                    .answered
                    .load(core::sync::atomic::Ordering::Relaxed);
                (Some(old), Some(was))
            }
        };
        let Some(was) = was else {
            // Unmapped meanwhile: the new set goes again.
            for q in old_set.iter().flatten().flatten() {
                q.shutdown(|rq| self.requeue_or_fail(rq, false));
            }
            return false;
        };
        let mut moved = 0u32;
        let mut switched = false;
        for q in old_set.iter().flatten().flatten() {
            switched |= q.transport() != t;
            q.shutdown(|rq| {
                moved += 1;
                self.requeue_or_fail(rq, q.transport() != t)
            });
        }
        // Connections of this set that failed while it was being connected were not acted on
        // then (the set was not current): act now.
        if self.installed() != Some(t) {
            self.ctrl.lock().enter_reconnecting();
        }
        // Only a set on the drain's own transport ends the drain: a reconnect on the old
        // transport, while the policy already wants the other, does not.
        let drain_to = match self.policy.lock().state() {
            PState::Draining { to } => Some(to),
            _ => None,
        };
        if drain_to != Some(t) || !self.drained() {
            if let State::Reconnecting { since_ms } = was {
                Stats::inc(&self.info.stats.reconnects);
                pr_info!(
                    "{}: reconnected to {} over {} after {} ms\n",
                    self.name(),
                    self.info.paths.addr(set_path).rdma,
                    transport_name(t),
                    now_ms() - since_ms
                );
            }
        } else if switched || moved > 0 {
            pr_info!(
                "{}: {moved} requests in flight on the old connections reissued\n",
                self.name()
            );
        }
        self.restart_io();
        true
    }

    /// A connect attempt's budget: a connection's budget per queue, but not past the loss
    /// deadline while reconnecting.
    fn budget_ms(&self) -> u32 {
        let full = CONNECT_BUDGET_MS.saturating_mul(u32::from(self.info.nr_queues));
        // With several targets, a lost one is retried only until `path_failover_ms`.
        let full = self.pathsel.lock().attempt_budget_ms(
            now_ms() as u64,
            u64::from(full),
            self.path_failover_ms(),
        ) as u32;
        match self.state() {
            State::Reconnecting { since_ms } => match self.loss_ms() {
                Some(loss_ms) => {
                    let left = since_ms + loss_ms - now_ms();
                    (left.clamp(0, i64::from(full)) as u32).max(CONNECT_BUDGET_MIN_MS)
                }
                None => full,
            },
            _ => full,
        }
    }

    /// Connects a set on `want` and installs it. A failed RDMA attempt counts as an RDMA
    /// failure. A refusal `Stale` means a newer mapping of the export from this host took over
    /// at the target: the disk fails for good.
    fn bring_up(self: &Arc<Self>, want: Transport) -> Result {
        let epoch = self.next_epoch();
        match self.connect_set(want, epoch, self.budget_ms()) {
            Ok(set) => {
                self.install(set, epoch, want);
                Ok(())
            }
            Err(e) if e == errno(kernel::bindings::ESTALE) => {
                // A gateway this mapping never served through may hold the fence of an
                // earlier mapping of this host (it was not told the session ended): the floor
                // it named is older than this mapping, and a session above it is this one's
                // to take; every gateway orders it after both.
                let path = self.pathsel.lock().active();
                if self.info.paths.len() > 1
                    && !self.info.paths.served(path)
                    && self.raise_session()
                {
                    return Err(errno(kernel::bindings::EAGAIN));
                }
                self.superseded();
                Err(e)
            }
            Err(e) => {
                if want == Transport::Rdma {
                    let _ = self.policy.lock().on_rdma_failure(now_ms() as u64);
                }
                pr_warn!(
                    "{}: connecting over {} failed ({e:?}); trying again\n",
                    self.name(),
                    transport_name(want)
                );
                Err(e)
            }
        }
    }

    /// With no connection and `want` out of reach: tries the other transport at once, if the
    /// policy allows (mode `auto`; `EOPNOTSUPP` if not).
    fn fall_back(self: &Arc<Self>, want: Transport) -> Result {
        let t = other(want);
        if self.policy.lock().on_fallback(t, now_ms() as u64) == Action::None {
            return Err(errno(kernel::bindings::EOPNOTSUPP));
        }
        pr_info!(
            "{}: no connection over {}; trying {}\n",
            self.name(),
            transport_name(want),
            transport_name(t)
        );
        self.bring_up(t)
    }

    /// Mapping: the first set, on RDMA, or on TCP when RDMA cannot be had (no device, no
    /// path, no answer, no RDMA listener on the port: a target started before its RDMA device
    /// or without RDMA) and the target answers there. The target's refusal (`ECONNREFUSED`:
    /// its refusing reply) is final. If TCP fails too, the RDMA attempt's error is the map's
    /// (TCP's when nothing listened on RDMA: it says more), unless the target's fence refused
    /// the session there (`ESTALE`, after asking above it once).
    fn attach_first_set(self: &Arc<Self>) {
        let epoch = self.next_epoch();
        let budget = self.budget_ms();
        let estale = errno(kernel::bindings::ESTALE);
        // Asked below the target's fence (an earlier mapping of this export by this host):
        // ask again above it, once, on whichever transport was told. Nothing of this disk has
        // attached yet, so no connection of the session so far can be told apart from the
        // new one.
        let connect = |t: Transport| {
            let mut r = self.connect_set(t, epoch, budget);
            if r.as_ref().is_err_and(|e| *e == estale) && self.raise_session() {
                r = self.connect_set(t, epoch, budget);
            }
            r
        };
        let on_path = || match connect(Transport::Rdma) {
            Ok(set) => Ok((set, Transport::Rdma)),
            Err(e) if e == errno(kernel::bindings::ECONNREFUSED) || e == estale => Err(e),
            Err(e) => {
                pr_warn!("{}: no RDMA connection ({e:?}); trying TCP\n", self.name());
                match connect(Transport::Tcp) {
                    Ok(set) => {
                        // Probing from the start: RDMA may come (back) any time.
                        let mut p = self.policy.lock();
                        let cfg = p.config();
                        *p = Policy::new_on_tcp(cfg, true, now_ms() as u64);
                        Ok((set, Transport::Tcp))
                    }
                    // Refused by the fence there: that is the map's answer, not RDMA's.
                    Err(t) if t == estale => Err(t),
                    // Nothing listened on RDMA: TCP's answer is the map's (a refusal, a
                    // wrong key, a target that is no gateway...).
                    Err(t) if e == no_rdma_listener() => Err(t),
                    Err(_) => Err(e),
                }
            }
        };
        // Several targets: the first that attaches serves; the map fails with the first
        // target's error only if none does. A refusal is final only for that target: another
        // gateway may serve. A target that is not a gateway of a shared store is final for the
        // map (`EINVAL`), as is a fence that refuses the session (`ESTALE`).
        let n = self.info.paths.len() as u8;
        let mut res = on_path();
        let first_err = res.as_ref().err().copied();
        for path in 1..n {
            match res {
                Err(e) if e != estale && e != EINVAL && !self.deleting() => {
                    pr_warn!(
                        "{}: target {} did not attach ({e:?}); trying {}\n",
                        self.name(),
                        self.info.paths.addr(path - 1).rdma,
                        self.info.paths.addr(path).rdma
                    );
                    self.pathsel.lock().fail_over(path, now_ms() as u64);
                    self.info.paths.note_down(path - 1, now_ms());
                    res = on_path();
                }
                _ => break,
            }
        }
        // None attached: the first target's error, unless a later one's is final (a fence, a
        // target that is no gateway), which says more.
        let res = res.map_err(|e| match first_err {
            Some(f) if e != estale && e != EINVAL => f,
            _ => e,
        });
        let outcome = res.and_then(|(set, t)| {
            // Attached: from now on the disk's Hellos continue its session.
            self.info
                .opening
                .store(false, core::sync::atomic::Ordering::Relaxed);
            let attached = Attached {
                reply: set.reply,
                max_io_bytes: set.max_io_bytes,
            };
            if self.install(set, epoch, t) {
                Ok(attached)
            } else {
                Err(ENODEV)
            }
        });
        if outcome.is_err() {
            let mut c = self.ctrl.lock();
            if c.state == State::Connecting {
                c.state = State::Failed;
            }
        }
        let mut a = self.attach.lock();
        a.get_or_insert(outcome);
        self.attach_cv.notify_all();
    }

    /// Takes the session above the one the target's fence named (a Hello of this disk was
    /// refused `Stale`), before the disk first attaches; false if there is none above it.
    fn raise_session(&self) -> bool {
        let floor = self
            .info
            .stale_floor
            .load(core::sync::atomic::Ordering::Relaxed);
        let Some(next) = floor.checked_add(1) else {
            pr_err!(
                "{}: the target's fence for this host and export is at the last session there is\n",
                self.name()
            );
            return false;
        };
        pr_info!(
            "{}: the target's fence for this host and export is at session {floor}: mapping as session {next}\n",
            self.name()
        );
        self.info
            .session_id
            .store(next, core::sync::atomic::Ordering::Relaxed);
        true
    }

    /// The target refused a reconnect `Stale`: a newer mapping of the export from this host
    /// has taken over there, and this session may never write again (docs/design.md, "The
    /// fence invariant"). The disk fails for good, as at the loss timeout.
    fn superseded(&self) {
        {
            let mut c = self.ctrl.lock();
            if !matches!(c.state, State::Reconnecting { .. } | State::Live) {
                return;
            }
            c.state = State::Failed;
        }
        pr_err!(
            "{}: session {} was superseded at the target by a newer mapping of export {} from this host: failing all I/O; the disk stays failed until it is unmapped\n",
            self.name(),
            self.info.session(),
            self.info.export
        );
        self.teardown_all(|rq| self.requeue_or_fail(rq, false));
        if let Some(d) = self.disk.lock().as_ref() {
            d.mark_dead();
        }
        self.restart_io();
    }

    /// Whether `fast_io_fail_s` (if set) has passed in an outage that began at `since_ms`.
    pub(super) fn fast_fail_due(&self, since_ms: i64) -> bool {
        let secs = self
            .fast_io_fail_s
            .load(core::sync::atomic::Ordering::Relaxed);
        secs != FAST_IO_FAIL_OFF && now_ms() - since_ms >= i64::from(secs) * 1000
    }

    /// Past `fast_io_fail_s` of an outage: waiting and new I/O fails while reconnecting goes
    /// on (nvme-tcp's `fast_io_fail_tmo`).
    fn check_fast_fail(&self, since_ms: i64) {
        let secs = self
            .fast_io_fail_s
            .load(core::sync::atomic::Ordering::Relaxed);
        if !self.fast_fail_due(since_ms) {
            return;
        }
        {
            let mut c = self.ctrl.lock();
            if c.fast_fail {
                return;
            }
            c.fast_fail = true;
        }
        Stats::inc(&self.info.stats.fast_io_fails);
        pr_err!(
            "{}: no connection for {secs} s (fast_io_fail_s): failing I/O while reconnecting\n",
            self.name()
        );
        self.restart_io();
    }

    /// Past `loss_timeout_s` of an outage: the disk fails for good (nvme's `ctrl_loss_tmo`).
    /// Every request ends with an error, whatever the connections' state, new I/O fails at
    /// submission, and nothing reconnects any more.
    fn give_up(&self) {
        {
            let mut c = self.ctrl.lock();
            if !matches!(c.state, State::Reconnecting { .. }) {
                return;
            }
            c.state = State::Failed;
        }
        pr_err!(
            "{}: no connection for {} s (loss_timeout_s): failing all I/O; the disk stays failed until it is unmapped\n",
            self.name(),
            self.loss_timeout_s()
        );
        self.teardown_all(|rq| self.requeue_or_fail(rq, false));
        if let Some(d) = self.disk.lock().as_ref() {
            d.mark_dead();
        }
        self.restart_io();
    }

    /// Sleeps up to `ms`, less if kicked, the disk is being deleted, or a deadline of the
    /// outage comes first. True if kicked.
    pub(super) fn nap(&self, ms: u32) -> bool {
        let mut ms = i64::from(ms);
        if let State::Reconnecting { since_ms } = self.state() {
            let now = now_ms();
            if let Some(loss_ms) = self.loss_ms() {
                ms = ms.min((since_ms + loss_ms - now).max(0) + 1);
            }
            let fast = self
                .fast_io_fail_s
                .load(core::sync::atomic::Ordering::Relaxed);
            if fast != FAST_IO_FAIL_OFF {
                let left = since_ms + i64::from(fast) * 1000 - now;
                if left >= 0 {
                    ms = ms.min(left + 1);
                }
            }
        }
        let mut g = self.kicked.lock();
        if !*g && !self.deleting() {
            let _ = self.wake.wait_interruptible_timeout(
                &mut g,
                kernel::time::msecs_to_jiffies(ms.clamp(1, i64::from(u32::MAX)) as u32),
            );
        }
        core::mem::replace(&mut *g, false)
    }

    /// As [`Self::nap`], running the connections' health checks at their interval meanwhile.
    fn nap_checking(&self, ms: u32) -> bool {
        let end = now_ms() + i64::from(ms);
        loop {
            self.check_connections();
            let left = end - now_ms();
            // `nap` does not sleep for a disk being deleted: the caller's loop ends it.
            if left <= 0 || self.deleting() {
                return false;
            }
            if self.nap((left.min(i64::from(u32::MAX)) as u32).min(self.check_interval_ms())) {
                return true;
            }
        }
    }

    /// Grows the disk to the capacity the target last reported, if larger (online resize:
    /// docs/design.md, "Online resize"), in whole logical blocks. A smaller one never gets
    /// here ([`DiskInfo::note_capacity`] keeps the largest): a disk does not shrink under its
    /// users; requests beyond the export's new end fail at the target. Runs at every look
    /// of the session work at a live disk: within half a keepalive interval of the response.
    ///
    /// [`DiskInfo::note_capacity`]: crate::host::DiskInfo::note_capacity
    fn apply_capacity(&self) {
        let reported = self
            .info
            .reported_capacity
            .load(core::sync::atomic::Ordering::Relaxed);
        let (have, want) = match self.attach.lock().as_ref() {
            Some(Ok(a)) => {
                let per_block = u64::from(a.reply.logical_block_size >> 9);
                let partial = reported.checked_rem(per_block).unwrap_or(0);
                (a.reply.capacity_sectors, reported.saturating_sub(partial))
            }
            _ => return,
        };
        if want <= have {
            return;
        }
        match self.disk.lock().as_ref() {
            Some(d) if d.resize(want) => {}
            // Not added yet (the next look), or marked dead.
            _ => return,
        }
        // Only this work changes it once the disk is attached; reconnects compare with it.
        if let Some(Ok(a)) = self.attach.lock().as_mut() {
            a.reply.capacity_sectors = want;
        }
        Stats::inc(&self.info.stats.resizes);
        pr_info!(
            "{}: export {} grew from {have} to {want} sectors; so does the disk\n",
            self.name(),
            self.info.export
        );
    }

    /// Runs every connection's health check (keepalive NOPs, a frozen peer, no credits).
    fn check_connections(&self) {
        for qid in 0..self.info.nr_queues {
            // Nothing here sleeps: a keepalive only posts a Send.
            if let Some(q) = self.queue(u32::from(qid)) {
                q.health_check();
            }
        }
    }

    /// How often the connections' health checks run: twice per keepalive interval, or, with
    /// keepalives off, twice per I/O timeout (a target that stops granting credits leaves
    /// requests waiting with no timer running: only this check finds it).
    fn check_interval_ms(&self) -> u32 {
        match self.info.keepalive_ms() {
            0 => self.info.io_timeout_ms() / 2,
            ka => ka / 2,
        }
        .max(1)
    }

    /// A complete, healthy set is installed: the disk is live (a reconnect state left by a
    /// report that raced the install does not stand).
    fn settle_live(&self) {
        let mut c = self.ctrl.lock();
        if matches!(c.state, State::Reconnecting { .. }) {
            c.state = State::Live;
            c.fast_fail = false;
            drop(c);
            self.restart_io();
        }
    }

    /// Whether an outage is still open (a new set has not proven itself yet).
    fn outage_open(&self) -> bool {
        self.ctrl.lock().outage_since.is_some()
    }

    /// Ends the outage once the installed set has answered a request or a keepalive, or
    /// stayed up for twice the I/O timeout. (A target that answers keepalives but not some
    /// request cannot keep that request alive: it fails once `loss_timeout_s` old.)
    fn check_outage_over(&self) {
        let answered = self
            .info
            .answered
            .load(core::sync::atomic::Ordering::Relaxed);
        let hold = 2 * i64::from(self.info.io_timeout_ms());
        let mut c = self.ctrl.lock();
        if c.outage_since.is_some()
            && c.state == State::Live
            && (answered > c.installed_answered || now_ms() - c.installed_ms > hold)
        {
            c.outage_since = None;
        }
    }

    /// Tells the policy a drain is over; true if one was (a failover or failback done).
    fn drained(&self) -> bool {
        let (action, why) = {
            let mut p = self.policy.lock();
            (p.on_drained(now_ms() as u64), p.drain_reason())
        };
        let (counter, to) = match action {
            Action::UseTcp => (&self.info.stats.failovers, Transport::Tcp),
            Action::UseRdma => (&self.info.stats.failbacks, Transport::Rdma),
            _ => return false,
        };
        Stats::inc(counter);
        // Every drain is started with a reason; NoConnection stands in should one not be.
        let why = why.unwrap_or(SwitchReason::NoConnection);
        Stats::inc(self.info.stats.switch_reason(why));
        self.ctrl.lock().last_switch = Some((to, why, now_ms()));
        pr_info!(
            "{}: I/O now runs over {} (switch reason: {})\n",
            self.name(),
            transport_name(to),
            why.name()
        );
        true
    }

    /// How long until the active target, lost, is to be left for the next (`u32::MAX`: it is
    /// not lost, or it is the only one).
    fn failover_in_ms(&self) -> u32 {
        let now = now_ms() as u64;
        let bound = self.path_failover_ms();
        let at = self.pathsel.lock().failover_at(now, bound);
        match at {
            Some(at) => at.saturating_sub(now).clamp(1, u64::from(u32::MAX)) as u32,
            None => u32::MAX,
        }
    }

    /// `path_failover_ms`.
    pub(super) fn path_failover_ms(&self) -> u32 {
        self.path_failover_ms
            .load(core::sync::atomic::Ordering::Relaxed)
    }

    /// A disk with several targets writes through gateways of one shared store (docs/design.md,
    /// "Several gateways"): a read-write mapping needs every target to say it is one
    /// (`features::GATEWAY`: it takes the store's writer lock over, fencing the previous
    /// gateway). Two targets of a local file would be two stores; read-only, the user vouches
    /// that they serve the same data, and the capacity and block sizes are checked as for any
    /// reconnect.
    fn check_gateway(&self, reply: &HelloReply, path: u8) -> Result {
        if self.info.paths.len() < 2 || self.read_only || reply.features & features::GATEWAY != 0 {
            return Ok(());
        }
        pr_err!(
            "{}: target {} does not serve export {} as a gateway of a shared store (features {:#x}): several targets may map it only read-only (two gateways cannot share a local file; an RBD export needs gateway = true at every target)\n",
            self.name(),
            self.info.paths.addr(path).rdma,
            self.info.export,
            reply.features
        );
        Err(EINVAL)
    }

    /// With several targets and the active one lost for `path_failover_ms`, or refusing every
    /// connect: moves to the next one (docs/design.md, "Several gateways"). True if it did.
    /// The requests wait in blk-mq meanwhile, as for any reconnect; the loss timeout runs on
    /// from the first loss.
    fn fail_over_path(&self) -> bool {
        let now = now_ms() as u64;
        let (from, to, lost_ms, refused) = {
            let mut p = self.pathsel.lock();
            let Some(to) = p.failover_due(now, self.path_failover_ms()) else {
                return false;
            };
            let (from, lost, refused) = (p.active(), p.lost_ms().unwrap_or(now), p.refused());
            p.fail_over(to, now);
            (from, to, now.saturating_sub(lost), refused)
        };
        self.info.paths.note_down(from, now as i64);
        self.info.paths.set_active(to);
        self.policy.lock().on_new_target(now);
        Stats::inc(&self.info.stats.path_failovers);
        pr_warn!(
            "{}: target {} lost for {lost_ms} ms ({}): moving to target {}\n",
            self.name(),
            self.info.paths.addr(from).rdma,
            if refused && lost_ms < u64::from(self.path_failover_ms()) {
                "it refuses connections"
            } else {
                "path_failover_ms"
            },
            self.info.paths.addr(to).rdma
        );
        true
    }

    /// While a target other than the first serves: probes the first at the probe interval
    /// (a connection of its own, session 0: never fenced, and no gateway takes a lock for it),
    /// and after `failback_probes` good ones in a row connects a set there on `t` while the
    /// serving set carries I/O, then swaps (make-before-break). True if the disk failed back.
    /// A failed connect leaves the serving set alone: a healthy path is never reset for a
    /// failback that cannot complete.
    fn failback_tick(self: &Arc<Self>, t: Transport) -> bool {
        let cfg = self.policy.lock().config();
        let now = now_ms();
        {
            let p = self.pathsel.lock();
            if !p.wants_failback_probe() {
                return false;
            }
        }
        if now
            < self
                .failback_next_ms
                .load(core::sync::atomic::Ordering::Relaxed)
        {
            return false;
        }
        self.failback_next_ms.store(
            now + cfg.probe_interval_ms as i64,
            core::sync::atomic::Ordering::Relaxed,
        );
        let budget = cfg
            .probe_interval_ms
            .clamp(PROBE_BUDGET_MIN_MS, PROBE_BUDGET_MAX_MS) as u32;
        let first = self.info.paths.addr(0);
        let ok = match t {
            Transport::Rdma => probe::run(
                self.name(),
                first.rdma,
                self.info.export,
                self.info.keys(),
                budget,
                false,
            )
            .is_ok(),
            Transport::Tcp => crate::tcp_queue::probe(&self.info, 0, budget).is_ok(),
        };
        Stats::inc(&self.info.stats.path_probes);
        if !ok {
            Stats::inc(&self.info.stats.path_probe_failures);
        }
        if !self.pathsel.lock().on_probe(ok, cfg.failback_probes) {
            return false;
        }
        let from = self.pathsel.lock().active();
        pr_info!(
            "{}: target {} answered {} probes in a row: failing back to it from {}\n",
            self.name(),
            first.rdma,
            cfg.failback_probes,
            self.info.paths.addr(from).rdma
        );
        let epoch = self.next_epoch();
        // The set goes to the first target; the serving one stays active until it is swapped.
        let res = {
            self.pathsel.lock().begin_failback();
            // One connection's budget for the whole set: the serving set waits on this work
            // for its health checks meanwhile.
            let r = self.connect_set(t, epoch, CONNECT_BUDGET_MS);
            if r.is_err() {
                let mut p = self.pathsel.lock();
                p.on_installed(from);
                p.failback_failed();
            }
            r
        };
        match res {
            Ok(set) => {
                if self.install(set, epoch, t) {
                    Stats::inc(&self.info.stats.path_failbacks);
                    pr_info!("{}: failed back to target {}\n", self.name(), first.rdma);
                }
                true
            }
            Err(e) => {
                pr_warn!(
                    "{}: failing back to target {} failed ({e:?}); target {} serves on\n",
                    self.name(),
                    first.rdma,
                    self.info.paths.addr(from).rdma
                );
                false
            }
        }
    }

    /// On TCP with RDMA possible: waits for the next probe, sends it, reports the result. The
    /// probe is a connection of its own, outside the disk's set, so whatever happens to it
    /// leaves the serving connections alone.
    fn probe_tick(&self, check_ms: u32) {
        let interval = self.policy.lock().config().probe_interval_ms;
        if self.policy.lock().on_tick(now_ms() as u64) != Action::SendProbe {
            // The connections' health checks run between probes too.
            self.nap(interval.min(u64::from(check_ms)) as u32);
            return;
        }
        let budget = interval.clamp(PROBE_BUDGET_MIN_MS, PROBE_BUDGET_MAX_MS) as u32;
        let ok = !self.info.faults.hit(Fault::FailConnect)
            && probe::run(
                self.name(),
                self.info.peer(),
                self.info.export,
                self.info.keys(),
                budget,
                false,
            )
            .is_ok();
        // Counted when done, so that probes - probe_failures is the successes so far.
        Stats::inc(&self.info.stats.probes);
        if !ok {
            Stats::inc(&self.info.stats.probe_failures);
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
}
