//! The fencing rule: the target never applies a modifying request that its
//! client has given up on.
//!
//! A client gives a request up when it tears down the connection it was sent
//! on (a reconnect, a transport switch) and reissues it on a new one, or when
//! it fails it. The old copy may still be in flight: in a TCP socket buffer,
//! in the target's receive queue, or pulled by RDMA Read and not yet written.
//! If it landed after the reissued copy, and after a newer write to the same
//! blocks, it would overwrite newer data with older.
//!
//! So every connection carries its client's session id and an epoch
//! ([`super::wire::Hello`]); a client raises the epoch for each new connection
//! set, and a new mapping of an export gets a new session id. The target keeps
//! one [`Fence`] per client address and export, which records the newest
//! (session, epoch) that has sent a request:
//!
//! - the first request of a newer epoch of the same session, or of another
//!   session, moves the fence to it;
//! - from then on, a modifying request (write, discard, write-zeroes) of an
//!   older epoch, or of a session the fence has left, is not applied and is
//!   answered [`super::wire::Status::Fenced`];
//! - a Hello of an older epoch, or of a session the fence has left, is refused
//!   [`super::wire::HelloStatus::Stale`];
//! - session 0 (a probe) is never fenced and moves nothing.
//!
//! The target moves the fence and applies requests under one lock taken shared
//! for applying and exclusively for moving, so no request of the old set is
//! still being applied once the new set's first request is: every write the
//! client reissues, and every later write, lands after anything of the old set.
//! A client that has *failed* a write (EIO) gets the same guarantee once it, or
//! its next mapping, sends anything again.

/// Sessions a fence remembers having left, so that they cannot come back.
pub const RETIRED_SESSIONS: usize = 4;

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

/// The newest connection set of one client address on one export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fence {
    /// Session and epoch of the newest set that has sent a request; session 0
    /// until one has.
    session: u32,
    epoch: u32,
    retired: [u32; RETIRED_SESSIONS],
    next_retired: usize,
}

/// Whether epoch `a` is newer than `b`, in serial-number arithmetic (RFC 1982),
/// so a long-lived session's epoch may wrap.
pub fn epoch_newer(a: u32, b: u32) -> bool {
    a != b && a.wrapping_sub(b) < 1 << 31
}

impl Fence {
    /// A fence no request has moved yet.
    pub fn new() -> Fence {
        Fence::default()
    }

    /// The (session, epoch) the fence is at, if a request has moved it.
    pub fn current(&self) -> Option<(u32, u32)> {
        (self.session != 0).then_some((self.session, self.epoch))
    }

    fn is_retired(&self, session: u32) -> bool {
        session != 0 && self.retired.contains(&session)
    }

    /// Whether a Hello of `session`/`epoch` may attach.
    pub fn admit_hello(&self, session: u32, epoch: u32) -> bool {
        if session == 0 {
            return true;
        }
        if self.is_retired(session) {
            return false;
        }
        !(session == self.session && epoch_newer(self.epoch, epoch))
    }

    /// What to do with a request of a connection of `session`/`epoch`.
    pub fn check(&self, session: u32, epoch: u32) -> Verdict {
        if session == 0 {
            return Verdict::Apply;
        }
        if self.is_retired(session) {
            return Verdict::Fenced;
        }
        if self.session == 0 || session != self.session || epoch_newer(epoch, self.epoch) {
            return Verdict::Advance;
        }
        if epoch == self.epoch {
            Verdict::Apply
        } else {
            Verdict::Fenced
        }
    }

    /// Moves the fence to `session`/`epoch` if [`Fence::check`] says so; the
    /// session it leaves is retired. Returns the new verdict for the request.
    pub fn advance(&mut self, session: u32, epoch: u32) -> Verdict {
        if self.check(session, epoch) != Verdict::Advance {
            return self.check(session, epoch);
        }
        if self.session != 0 && self.session != session {
            self.retired[self.next_retired] = self.session;
            self.next_retired = (self.next_retired + 1) % RETIRED_SESSIONS;
        }
        self.session = session;
        self.epoch = epoch;
        Verdict::Apply
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_newer_epoch_fences_the_older_one() {
        let mut f = Fence::new();
        assert_eq!(f.check(7, 1), Verdict::Advance);
        assert_eq!(f.advance(7, 1), Verdict::Apply);
        assert_eq!(f.check(7, 1), Verdict::Apply);
        // A newer set attaches: nothing changes until it sends a request.
        assert!(f.admit_hello(7, 2));
        assert_eq!(f.check(7, 1), Verdict::Apply);
        assert_eq!(f.check(7, 2), Verdict::Advance);
        assert_eq!(f.advance(7, 2), Verdict::Apply);
        assert_eq!(f.current(), Some((7, 2)));
        assert_eq!(f.check(7, 1), Verdict::Fenced);
        assert!(!f.admit_hello(7, 1), "an older epoch may not attach again");
        assert!(f.admit_hello(7, 2));
        assert!(f.admit_hello(7, 3));
    }

    #[test]
    fn a_new_session_retires_the_old_one() {
        let mut f = Fence::new();
        f.advance(7, 5);
        assert_eq!(f.check(9, 1), Verdict::Advance);
        f.advance(9, 1);
        assert_eq!(f.check(7, 5), Verdict::Fenced);
        assert_eq!(
            f.check(7, 6),
            Verdict::Fenced,
            "a retired session stays out"
        );
        assert!(!f.admit_hello(7, 6));
        assert_eq!(f.check(9, 1), Verdict::Apply);
    }

    #[test]
    fn probes_are_never_fenced() {
        let mut f = Fence::new();
        assert_eq!(f.check(0, 0), Verdict::Apply);
        f.advance(0, 0);
        assert_eq!(f.current(), None);
        f.advance(3, 3);
        assert!(f.admit_hello(0, 0));
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

    proptest! {
        /// Once a newer (session, epoch) has moved the fence, nothing older of
        /// that session, and nothing of a session it left, is applied again.
        #[test]
        fn nothing_superseded_is_applied(ops in proptest::collection::vec((1u32..4, 0u32..6), 0..200)) {
            let mut f = Fence::new();
            let mut max_epoch: std::collections::HashMap<u32, u32> = Default::default();
            let mut left: std::vec::Vec<u32> = std::vec::Vec::new();
            for (s, e) in ops {
                let before = f.current();
                let v = f.advance(s, e);
                if v == Verdict::Apply {
                    prop_assert!(!left.contains(&s), "session {} was left", s);
                    if let Some(&m) = max_epoch.get(&s) {
                        prop_assert!(!epoch_newer(m, e), "epoch {} older than {}", e, m);
                    }
                    max_epoch.insert(s, e);
                    if let Some((ps, _)) = before {
                        if ps != s { left.push(ps); }
                    }
                    prop_assert_eq!(f.current(), Some((s, e)));
                } else {
                    prop_assert_eq!(v, Verdict::Fenced);
                    prop_assert_eq!(f.current(), before);
                }
            }
        }
    }
}
