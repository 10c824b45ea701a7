//! Which of a disk's targets (gateways) carries its I/O: failover to the next one when the
//! active one is lost, and failback to the preferred one, with hysteresis (docs/design.md,
//! "Several gateways").
//!
//! One path is active at a time (`path_policy` `failover`). The rules:
//!
//! - **Lost.** The active path is lost when its connection set breaks (a connection error,
//!   missed keepalives, a frozen target, a timeout) and no new set is up. The session keeps
//!   reconnecting to it, on RDMA and TCP, for `path_failover_ms`; then it moves to the next
//!   path in the map's order. Each attempt on a path it has just moved to gets the full set-up
//!   budget; a path it keeps retrying gets only what is left of `path_failover_ms` (at least
//!   [`MIN_ATTEMPT_MS`]), so a target that accepts connections but never answers (frozen)
//!   cannot hold the disk longer than that.
//! - **Refused.** A lost path that refuses the session's connects (nothing listens there: the
//!   target died or is restarting; or its Hello answered Busy, as for a lock takeover that
//!   failed on an export without a key) is left at once, without waiting out
//!   `path_failover_ms`, as nvme multipath leaves a path whose controller is gone. Unless the next path was itself given
//!   up within [`RECENTLY_DOWN_MS`]: with every target down, the session then moves on at the
//!   `path_failover_ms` pace (at least [`MIN_ATTEMPT_MS`]), not round and round.
//! - **The loss timeout** counts from the first loss, across paths: it means "no usable path
//!   for this long". This module does not see it.
//! - **Failback.** While a path other than the first (the preferred one) serves, the session
//!   probes the first at the probe interval, outside the disk's connections. After
//!   `failback_probes` good probes in a row it connects a set there while the serving one
//!   carries I/O, and swaps them only when the new set is up (make-before-break). A probe or a
//!   connect that fails leaves the serving path alone and starts the count again: a healthy
//!   path is never torn down for a failback that cannot complete.
//!
//! Pure logic: the caller passes the time (ms of a monotonic clock) and acts on the answers.

/// Least time a reconnect attempt on the path being retried gets, however close the failover
/// deadline: a set-up needs a few round trips.
pub const MIN_ATTEMPT_MS: u64 = 1_000;
/// `path_failover_ms` by default: seconds, well under the loss timeout.
pub const DEFAULT_FAILOVER_MS: u32 = 3_000;
/// More time the first connection of the first attempt on a target just moved to gets: its
/// Hello takes the store's lock over, which blocklists the old owner at the monitors, and may
/// first connect the gateway to the cluster afresh (0.1-1 s in the bed; about 11 s when the
/// new cluster client waited on an admin socket a frozen gateway held).
pub const TAKEOVER_MS: u64 = 30_000;
/// A target given up this recently is not new: an attempt on it gets only the failover time.
/// Moving back to a frozen one must not cost a full set-up budget.
pub const RECENTLY_DOWN_MS: u64 = 60_000;

/// A disk's choice of path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathSel {
    n: u8,
    active: u8,
    /// When the active path was lost (`None`: it serves, or nothing was tried yet).
    lost_ms: Option<u64>,
    /// No attempt was made on the active path since the session moved to it.
    fresh: bool,
    /// Good probes of the preferred path in a row.
    probes_ok: u32,
    /// When each path was last given up.
    down_ms: [Option<u64>; super::options::MAX_TARGETS],
    /// The last attempt was the first on a path just moved to, which may take a lock over.
    takeover: bool,
    /// The active path refused a connect since it was lost.
    refused: bool,
}

impl PathSel {
    /// `n` paths (at least one), the first active.
    pub fn new(n: u8) -> PathSel {
        PathSel {
            n: n.max(1),
            active: 0,
            lost_ms: None,
            fresh: true,
            probes_ok: 0,
            down_ms: [None; super::options::MAX_TARGETS],
            takeover: false,
            refused: false,
        }
    }

    pub fn len(&self) -> u8 {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// The path new connection sets go to.
    pub fn active(&self) -> u8 {
        self.active
    }

    /// When the active path was lost, if it is.
    pub fn lost_ms(&self) -> Option<u64> {
        self.lost_ms
    }

    /// The active path's set broke (or a reconnect began) at `now`: its failover clock starts,
    /// unless it runs already.
    pub fn on_lost(&mut self, now: u64) {
        self.lost_ms.get_or_insert(now);
    }

    /// A set on `path` was installed: it serves, and is the active path.
    pub fn on_installed(&mut self, path: u8) {
        if path < self.n {
            self.active = path;
            self.down_ms[usize::from(path)] = None;
        }
        self.lost_ms = None;
        self.fresh = false;
        self.takeover = false;
        self.refused = false;
        self.probes_ok = 0;
    }

    /// Whether the lost active path refused the last attempt ([`PathSel::on_attempt`]).
    pub fn refused(&self) -> bool {
        self.refused
    }

    /// An attempt on the lost active path failed; `refused`: every transport tried refused
    /// it (`ECONNREFUSED`), so it is gone, not slow, and [`PathSel::failover_due`] need not
    /// wait for it. Only the last attempt counts: one that hangs or times out again says the
    /// target may be coming back.
    pub fn on_attempt(&mut self, refused: bool) {
        self.refused = refused && self.lost_ms.is_some();
    }

    /// The budget of a connect attempt on the active path at `now`, given the `full` budget:
    /// for a path just moved to, the full one and [`TAKEOVER_MS`] more for its first connection
    /// ([`PathSel::takeover`]); for a path retried, or moved back to within
    /// [`RECENTLY_DOWN_MS`] of giving it up, what is left of the failover time, at least
    /// [`MIN_ATTEMPT_MS`]; for the only path, the full one. Counts as the attempt.
    pub fn attempt_budget_ms(&mut self, now: u64, full: u64, failover_ms: u32) -> u64 {
        let fresh = core::mem::replace(&mut self.fresh, false);
        self.takeover = false;
        let recently_down = self.down_ms[usize::from(self.active)]
            .is_some_and(|d| now.saturating_sub(d) < RECENTLY_DOWN_MS);
        match self.lost_ms {
            Some(lost) if self.n > 1 && (!fresh || recently_down) => {
                let left = (lost + u64::from(failover_ms)).saturating_sub(now);
                left.max(MIN_ATTEMPT_MS).min(full)
            }
            Some(_) if self.n > 1 => {
                self.takeover = true;
                full + TAKEOVER_MS
            }
            _ => full,
        }
    }

    /// Whether the last attempt was the first on a path just moved to: its first connection
    /// may take [`TAKEOVER_MS`] more than any other.
    pub fn takeover(&self) -> bool {
        self.takeover
    }

    /// Whether the session should leave the active path at `now`: there is another, and the
    /// active one has been lost for `failover_ms`, or refused the last attempt while the next
    /// one was not given up within [`RECENTLY_DOWN_MS`]. Moving to a path given up that
    /// recently waits at least [`MIN_ATTEMPT_MS`], whatever `failover_ms` (0 included): with
    /// every target down, the session must not go round them without a pause. Returns the
    /// path to try next.
    pub fn failover_due(&self, now: u64, failover_ms: u32) -> Option<u8> {
        let at = self.failover_at(now, failover_ms)?;
        (now >= at || (self.refused && self.next_up(now))).then_some(self.next())
    }

    /// When the lost active path is to be left at the latest (ms; `None`: not lost, or the
    /// only path), a refusal aside: [`PathSel::failover_due`]'s bound.
    pub fn failover_at(&self, now: u64, failover_ms: u32) -> Option<u64> {
        let lost = self.lost_ms.filter(|_| self.n > 1)?;
        let wait = if self.next_up(now) {
            u64::from(failover_ms)
        } else {
            u64::from(failover_ms).max(MIN_ATTEMPT_MS)
        };
        Some(lost.saturating_add(wait))
    }

    /// The path after the active one, in the map's order, round the end.
    fn next(&self) -> u8 {
        (self.active + 1) % self.n
    }

    /// The next path was not given up within [`RECENTLY_DOWN_MS`].
    fn next_up(&self, now: u64) -> bool {
        self.down_ms[usize::from(self.next())]
            .is_none_or(|d| now.saturating_sub(d) >= RECENTLY_DOWN_MS)
    }

    /// Moves to path `to` at `now` (after [`PathSel::failover_due`]): its own failover clock
    /// starts, and its first attempt gets the full budget.
    pub fn fail_over(&mut self, to: u8, now: u64) {
        self.down_ms[usize::from(self.active)] = Some(now);
        if to < self.n {
            self.active = to;
        }
        self.lost_ms = Some(now);
        self.fresh = true;
        self.takeover = false;
        self.refused = false;
        self.probes_ok = 0;
    }

    /// Whether the preferred path should be probed for a failback: another path serves.
    pub fn wants_failback_probe(&self) -> bool {
        self.active != 0 && self.lost_ms.is_none()
    }

    /// A probe of the preferred path ended `ok`; true when `failback_probes` in a row were
    /// good: the session should fail back now.
    pub fn on_probe(&mut self, ok: bool, failback_probes: u32) -> bool {
        if !self.wants_failback_probe() {
            self.probes_ok = 0;
            return false;
        }
        self.probes_ok = if ok { self.probes_ok + 1 } else { 0 };
        self.probes_ok >= failback_probes.max(1)
    }

    /// A failback begins: connection sets go to the first path until [`PathSel::on_installed`]
    /// says which serves (the first, or, after a failed connect, the one that served before:
    /// then [`PathSel::failback_failed`] too). The serving path is not lost: it is not given
    /// up, and its failover clock does not start.
    pub fn begin_failback(&mut self) {
        self.active = 0;
        self.takeover = false;
    }

    /// A failback's connect failed: the serving path stays, and the probes count again.
    pub fn failback_failed(&mut self) {
        self.probes_ok = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_path_never_fails_over() {
        let mut p = PathSel::new(1);
        p.on_lost(100);
        assert_eq!(p.failover_due(1_000_000, 0), None);
        assert_eq!(p.attempt_budget_ms(1_000_000, 10_000, 0), 10_000);
        assert!(!p.wants_failback_probe());
    }

    #[test]
    fn fails_over_after_the_bound_in_order_round_the_end() {
        let mut p = PathSel::new(3);
        p.on_installed(0);
        p.on_lost(1_000);
        p.on_lost(2_000); // the clock runs from the first loss
        assert_eq!(p.failover_due(3_999, 3_000), None);
        assert_eq!(p.failover_due(4_000, 3_000), Some(1));
        p.fail_over(1, 4_000);
        assert_eq!(p.active(), 1);
        assert_eq!(p.failover_due(6_999, 3_000), None);
        assert_eq!(p.failover_due(7_000, 3_000), Some(2));
        p.fail_over(2, 7_000);
        assert_eq!(p.failover_due(10_000, 3_000), Some(0));
    }

    #[test]
    fn a_retried_path_gets_what_is_left_a_new_one_the_full_budget() {
        let mut p = PathSel::new(2);
        p.on_installed(0);
        p.on_lost(1_000);
        // Retrying the path that was lost: bounded by the failover time.
        assert_eq!(p.attempt_budget_ms(1_500, 10_000, 3_000), 2_500);
        assert_eq!(p.attempt_budget_ms(3_900, 10_000, 3_000), MIN_ATTEMPT_MS);
        p.fail_over(1, 4_000);
        // The first attempt on the new path: the full budget, and time for a takeover there.
        assert_eq!(
            p.attempt_budget_ms(4_000, 10_000, 3_000),
            10_000 + TAKEOVER_MS
        );
        assert!(p.takeover());
        assert_eq!(p.attempt_budget_ms(5_000, 10_000, 3_000), 2_000);
        assert!(!p.takeover());
        // Never more than the full budget.
        assert_eq!(p.attempt_budget_ms(5_000, 500, 3_000), 500);
        // Back to the path given up a moment ago (frozen, say): only the failover time.
        p.fail_over(0, 8_000);
        assert_eq!(p.attempt_budget_ms(8_000, 10_000, 3_000), 3_000);
        assert!(!p.takeover());
        // Given up long ago, it is new again.
        p.fail_over(1, 8_000 + RECENTLY_DOWN_MS);
        p.fail_over(0, 9_000 + 2 * RECENTLY_DOWN_MS);
        assert_eq!(
            p.attempt_budget_ms(9_000 + 2 * RECENTLY_DOWN_MS, 10_000, 3_000),
            10_000 + TAKEOVER_MS
        );
    }

    #[test]
    fn a_refused_path_is_left_at_once_unless_the_next_went_down_lately() {
        let mut p = PathSel::new(2);
        p.on_installed(0);
        p.on_attempt(true); // not lost: nothing to leave
        p.on_lost(1_000);
        assert_eq!(p.failover_due(1_100, 3_000), None);
        p.on_attempt(true);
        assert_eq!(p.failover_due(1_100, 3_000), Some(1));
        // Only the last attempt counts: one that timed out says the target may come back.
        p.on_attempt(false);
        assert_eq!(p.failover_due(1_100, 3_000), None);
        p.on_attempt(true);
        p.fail_over(1, 1_100);
        // Target 1 refuses too: target 0 was given up 0.1 s ago, so the pace is the bound's.
        p.on_attempt(true);
        assert_eq!(p.failover_due(1_200, 3_000), None);
        assert_eq!(p.failover_due(4_100, 3_000), Some(0));
        // Once target 0 has been down long enough, a refusal moves on at once again.
        p.fail_over(0, 4_100);
        p.on_attempt(true);
        assert_eq!(p.failover_due(4_200, 3_000), None);
        assert_eq!(
            p.failover_due(4_100 + RECENTLY_DOWN_MS - 1, 1_000_000),
            None
        );
        assert_eq!(p.failover_due(4_100 + RECENTLY_DOWN_MS, 1_000_000), Some(1));
        // Serving again ends the refusal.
        p.on_installed(0);
        p.on_lost(200_000);
        assert_eq!(p.failover_due(200_100, 3_000), None);
    }

    #[test]
    fn with_every_target_down_a_zero_bound_still_paces_the_round() {
        let mut p = PathSel::new(2);
        p.on_installed(0);
        p.on_lost(1_000);
        assert_eq!(p.failover_due(1_000, 0), Some(1)); // target 1 was never down: at once
        p.fail_over(1, 1_000);
        assert_eq!(p.failover_due(1_999, 0), None); // target 0 was, just now
        assert_eq!(p.failover_at(1_999, 0), Some(2_000));
        assert_eq!(p.failover_due(2_000, 0), Some(0));
    }

    #[test]
    fn installing_ends_the_loss() {
        let mut p = PathSel::new(2);
        p.on_lost(0);
        p.fail_over(1, 5_000);
        p.on_installed(1);
        assert_eq!(p.lost_ms(), None);
        assert_eq!(p.failover_due(1_000_000, 0), None);
        assert!(p.wants_failback_probe());
    }

    #[test]
    fn failback_needs_probes_in_a_row() {
        let mut p = PathSel::new(2);
        p.on_installed(1);
        assert!(!p.on_probe(true, 3));
        assert!(!p.on_probe(true, 3));
        assert!(!p.on_probe(false, 3), "a bad probe starts the count again");
        assert!(!p.on_probe(true, 3));
        assert!(!p.on_probe(true, 3));
        assert!(p.on_probe(true, 3));
        p.failback_failed();
        assert!(!p.on_probe(true, 3), "a failed failback counts again");
        // A failback does not give the serving path up: should the first path be lost soon
        // after, moving back to it gets the full budget and the takeover's time.
        p.begin_failback();
        assert_eq!(p.active(), 0);
        p.on_installed(0);
        p.on_lost(100);
        p.fail_over(1, 3_100);
        assert_eq!(
            p.attempt_budget_ms(3_100, 10_000, 3_000),
            10_000 + TAKEOVER_MS
        );
    }

    #[test]
    fn no_failback_probe_while_lost_or_on_the_preferred_path() {
        let mut p = PathSel::new(2);
        p.on_installed(0);
        assert!(!p.wants_failback_probe());
        assert!(!p.on_probe(true, 1));
        p.on_installed(1);
        p.on_lost(10);
        assert!(!p.wants_failback_probe());
        assert!(!p.on_probe(true, 1));
    }

    #[test]
    fn out_of_range_paths_are_ignored() {
        let mut p = PathSel::new(2);
        p.on_installed(7);
        assert_eq!(p.active(), 0);
        p.fail_over(9, 0);
        assert_eq!(p.active(), 0);
    }
}
