//! The fencing rule: the target never applies a modifying request of a
//! connection set, or of a session, that a newer one has superseded
//! (docs/design.md, "The fence invariant").
//!
//! A client gives a request up when it tears down the connection it was sent
//! on (a reconnect, a transport switch) and reissues it on a new one. The old
//! copy may still be in flight: in a TCP socket buffer, in the target's receive
//! queue, or pulled by RDMA Read and not yet written. If it landed after the
//! reissued copy, and after a newer write to the same blocks, it would
//! overwrite newer data with older. And a mapping replaced by a newer mapping
//! of the same export must never write again.
//!
//! So every connection carries its client's session id and an epoch
//! ([`super::wire::Hello`]). Sessions are *ordered*: a new mapping takes an id
//! above every session the target has seen of that client and export (its
//! Hellos say they open a session, and the target tells it the floor when it
//! asks too low, [`Fence::admit_hello`]); it can never join an older session.
//! Within a session the client raises the epoch for each new connection set.
//! The target keeps one [`Fence`] per client and export: the newest
//! (session, epoch) that has sent a request.
//!
//! - the first request of a newer (session, epoch) moves the fence to it;
//! - from then on, a modifying request (write, discard, write-zeroes) of an
//!   older one is not applied and is answered [`super::wire::Status::Fenced`];
//! - a Hello of an older one is refused [`super::wire::HelloStatus::Stale`];
//! - session 0 (a probe) is never fenced and moves nothing.
//!
//! Because "older" is an order on two numbers, the fence remembers nothing but
//! its current (session, epoch): no list of sessions it has left, which a
//! long enough history would overflow. A session below the current one is
//! superseded however many sessions came between.
//!
//! The target moves the fence and applies requests so that no request of the
//! old set is still being applied once the new set's first request is: every
//! write the client reissues, and every later write, lands after anything of
//! the old set.

/// What the target does with a request of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Apply it: the connection is the newest, or unfenced.
    Apply,
    /// The connection is newer than the fence: move the fence
    /// ([`Fence::advance`]) and then apply it.
    Advance,
    /// The connection is superseded: do not apply a modifying request.
    Fenced,
}

/// Why a Hello may not attach: its (session, epoch) is older than the fence.
/// `floor` is the fence's session; a new mapping must take an id above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stale {
    pub floor: u32,
}

/// The newest connection set of one client on one export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fence {
    /// Session and epoch of the newest set that has sent a request; `None`
    /// until one has. The session is never 0.
    cur: Option<(u32, u32)>,
}

/// Whether epoch `a` is newer than `b`, in serial-number arithmetic (RFC 1982),
/// so a long-lived session's epoch may wrap.
pub fn epoch_newer(a: u32, b: u32) -> bool {
    a != b && a.wrapping_sub(b) < 1 << 31
}

/// Whether (session, epoch) `a` is newer than `b`: a higher session, or the
/// same session with a newer epoch. Sessions do not wrap: a client takes a new
/// one above the floor the target names, and u32 has room for billions of
/// mappings of one export by one client.
pub fn newer(a: (u32, u32), b: (u32, u32)) -> bool {
    a.0 > b.0 || (a.0 == b.0 && epoch_newer(a.1, b.1))
}

impl Fence {
    /// A fence no request has moved yet.
    pub fn new() -> Fence {
        Fence::default()
    }

    /// The (session, epoch) the fence is at, if a request has moved it.
    pub fn current(&self) -> Option<(u32, u32)> {
        self.cur
    }

    /// Whether a Hello of `session`/`epoch` may attach: a probe, a newer
    /// session, or the current session with its current or a newer epoch. A
    /// Hello that opens a session (`new`: the client's mapping has not attached
    /// yet) must be above the fence's session: equal would join an older
    /// mapping's session, whose stale writes the fence must keep out.
    pub fn admit_hello(&self, session: u32, epoch: u32, new: bool) -> Result<(), Stale> {
        match self.cur {
            _ if session == 0 => Ok(()),
            None => Ok(()),
            Some((cs, _)) if new && session > cs => Ok(()),
            Some((cs, ce))
                if !new && (session > cs || (session == cs && !epoch_newer(ce, epoch))) =>
            {
                Ok(())
            }
            Some((cs, _)) => Err(Stale { floor: cs }),
        }
    }

    /// What to do with a request of a connection of `session`/`epoch`.
    pub fn check(&self, session: u32, epoch: u32) -> Verdict {
        match self.cur {
            _ if session == 0 => Verdict::Apply,
            None => Verdict::Advance,
            Some(c) if c == (session, epoch) => Verdict::Apply,
            Some(c) if newer((session, epoch), c) => Verdict::Advance,
            Some(_) => Verdict::Fenced,
        }
    }

    /// Moves the fence to `session`/`epoch` if [`Fence::check`] says so.
    /// Returns the verdict for the request.
    pub fn advance(&mut self, session: u32, epoch: u32) -> Verdict {
        match self.check(session, epoch) {
            Verdict::Advance => {
                self.cur = Some((session, epoch));
                Verdict::Apply
            }
            v => v,
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    #[test]
    fn a_newer_epoch_fences_the_older_one() {
        let mut f = Fence::new();
        assert_eq!(f.check(7, 1), Verdict::Advance);
        assert_eq!(f.advance(7, 1), Verdict::Apply);
        assert_eq!(f.check(7, 1), Verdict::Apply);
        // A newer set attaches: nothing changes until it sends a request.
        assert_eq!(f.admit_hello(7, 2, false), Ok(()));
        assert_eq!(f.check(7, 1), Verdict::Apply);
        assert_eq!(f.check(7, 2), Verdict::Advance);
        assert_eq!(f.advance(7, 2), Verdict::Apply);
        assert_eq!(f.current(), Some((7, 2)));
        assert_eq!(f.check(7, 1), Verdict::Fenced);
        assert_eq!(
            f.admit_hello(7, 1, false),
            Err(Stale { floor: 7 }),
            "an older epoch may not attach again"
        );
        assert_eq!(f.admit_hello(7, 2, false), Ok(()));
        assert_eq!(f.admit_hello(7, 3, false), Ok(()));
    }

    #[test]
    fn a_higher_session_supersedes_every_lower_one() {
        let mut f = Fence::new();
        f.advance(7, 5);
        assert_eq!(f.check(9, 1), Verdict::Advance);
        f.advance(9, 1);
        assert_eq!(f.check(7, 5), Verdict::Fenced);
        assert_eq!(
            f.check(7, 6),
            Verdict::Fenced,
            "a superseded session stays out"
        );
        assert_eq!(f.admit_hello(7, 6, false), Err(Stale { floor: 9 }));
        assert_eq!(f.check(9, 1), Verdict::Apply);
        // A lower session that the fence never saw is superseded too.
        assert_eq!(f.check(8, 100), Verdict::Fenced);
        assert_eq!(f.admit_hello(8, 0, false), Err(Stale { floor: 9 }));
        assert_eq!(f.admit_hello(10, 0, false), Ok(()));
    }

    /// The hole this rule closes: a fence that remembered the last four sessions it left let
    /// the fifth-oldest back in. Here a hundred thousand session changes later, the first
    /// session is still out.
    #[test]
    fn no_history_is_long_enough_to_let_an_old_session_back() {
        let mut f = Fence::new();
        f.advance(1, 0);
        for s in 2..100_000u32 {
            assert_eq!(f.advance(s, s % 7), Verdict::Apply);
            assert_eq!(f.check(1, 0), Verdict::Fenced);
        }
        assert_eq!(f.advance(1, 0), Verdict::Fenced);
        assert_eq!(f.advance(1, 12345), Verdict::Fenced);
        assert!(f.admit_hello(1, 1, false).is_err());
        assert_eq!(f.current(), Some((99_999, 99_999 % 7)));
        // Sessions do not wrap as epochs do: one 2^31 or more above another is still newer,
        // and the lower one stays out.
        for (old, new) in [(1, 1 << 31), (1, u32::MAX), (5, (1 << 31) + 6)] {
            let mut f = Fence::new();
            f.advance(old, 0);
            assert_eq!(f.advance(new, 0), Verdict::Apply, "{new} after {old}");
            assert_eq!(f.advance(old, 0), Verdict::Fenced, "{old} after {new}");
            assert_eq!(f.admit_hello(old, 0, false), Err(Stale { floor: new }));
        }
    }

    #[test]
    fn probes_are_never_fenced() {
        let mut f = Fence::new();
        assert_eq!(f.check(0, 0), Verdict::Apply);
        f.advance(0, 0);
        assert_eq!(f.current(), None);
        f.advance(3, 3);
        assert_eq!(f.admit_hello(0, 0, false), Ok(()));
        assert_eq!(f.check(0, 99), Verdict::Apply);
        assert_eq!(f.current(), Some((3, 3)));
    }

    #[test]
    fn epochs_compare_across_the_wrap() {
        assert!(epoch_newer(1, 0));
        assert!(epoch_newer(0, u32::MAX));
        assert!(!epoch_newer(u32::MAX, 0));
        assert!(!epoch_newer(5, 5));
        let mut f = Fence::new();
        f.advance(1, u32::MAX);
        assert_eq!(f.check(1, 0), Verdict::Advance);
        f.advance(1, 0);
        assert_eq!(f.check(1, u32::MAX), Verdict::Fenced);
    }

    #[test]
    fn a_new_mapping_never_joins_an_old_session() {
        let mut f = Fence::new();
        f.advance(1, 1);
        // The same (session, epoch) as the fence: a reconnect may attach, a new mapping may not.
        assert_eq!(f.admit_hello(1, 1, false), Ok(()));
        assert_eq!(f.admit_hello(1, 1, true), Err(Stale { floor: 1 }));
        assert_eq!(f.admit_hello(1, 9, true), Err(Stale { floor: 1 }));
        assert_eq!(f.admit_hello(2, 1, true), Ok(()));
        assert_eq!(f.admit_hello(0, 0, true), Ok(()), "a probe");
        assert_eq!(Fence::new().admit_hello(1, 1, true), Ok(()));
    }

    /// One step of a history: a Hello (opening a session or not), or a request, of
    /// (session, epoch).
    #[derive(Debug, Clone, Copy)]
    enum Step {
        Hello(u32, u32, bool),
        Request(u32, u32),
    }

    /// Sessions from a wide range, so a history has as many distinct sessions as steps;
    /// epochs near each other so that they interleave and sometimes wrap.
    fn step() -> impl Strategy<Value = Step> {
        let pair = (
            prop_oneof![1 => Just(0u32), 8 => 1u32..64, 4 => any::<u32>()],
            prop_oneof![4 => 0u32..8, 1 => (u32::MAX - 4)..=u32::MAX],
        );
        (any::<bool>(), any::<bool>(), pair).prop_map(|(h, new, (s, e))| {
            if h {
                Step::Hello(s, e, new)
            } else {
                Step::Request(s, e)
            }
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// The invariant, against a model that remembers the whole history: once a
        /// (session, epoch) has been applied, nothing it supersedes is ever applied or
        /// admitted again (no older epoch of that session, no lower session), however many
        /// sessions and epochs come and go; and the newest is never refused.
        #[test]
        fn nothing_superseded_is_ever_applied(steps in proptest::collection::vec(step(), 0..400)) {
            let mut f = Fence::new();
            // Every (session, epoch) applied so far, in order.
            let mut applied: Vec<(u32, u32)> = Vec::new();
            let superseded = |applied: &Vec<(u32, u32)>, x: (u32, u32)| {
                applied.iter().any(|&a| newer(a, x))
            };
            for st in steps {
                match st {
                    Step::Hello(s, e, new) => {
                        let r = f.admit_hello(s, e, new);
                        // A new session may not join any session already applied.
                        let joins = new && applied.iter().any(|&(a, _)| a >= s);
                        if s == 0 {
                            prop_assert_eq!(r, Ok(()));
                        } else if superseded(&applied, (s, e)) || joins {
                            prop_assert!(r.is_err(), "admitted {:?} (new: {})", (s, e), new);
                        } else {
                            prop_assert_eq!(r, Ok(()));
                        }
                        if let Err(Stale { floor }) = r {
                            // The floor names the session to go above.
                            prop_assert_eq!(Some(floor), f.current().map(|c| c.0));
                            prop_assert!(f.admit_hello(floor.saturating_add(1), 0, true).is_ok() || floor == u32::MAX);
                        }
                    }
                    Step::Request(s, e) => {
                        let before = f.current();
                        let v = f.advance(s, e);
                        if s == 0 {
                            prop_assert_eq!(v, Verdict::Apply);
                            prop_assert_eq!(f.current(), before);
                            continue;
                        }
                        if superseded(&applied, (s, e)) {
                            prop_assert_eq!(v, Verdict::Fenced, "applied superseded {:?}", (s, e));
                            prop_assert_eq!(f.current(), before);
                        } else {
                            prop_assert_eq!(v, Verdict::Apply, "refused the newest {:?}", (s, e));
                            prop_assert_eq!(f.current(), Some((s, e)));
                            applied.push((s, e));
                        }
                    }
                }
            }
        }
    }
}
