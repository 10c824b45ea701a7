//! Credit accounting in the style of SMB Direct, so that a Send never meets a
//! missing Receive (no RNR NAK, ever).
//!
//! Each direction of a queue has a sender and a receiver. The receiver grants
//! one credit per receive it has posted and not yet promised; the grant rides
//! on a message going the other way (`Request::credits`,
//! `Response::credits`, `Hello::recv_credits`, `HelloReply::initial_credits`).
//! The sender spends one credit per message. Both halves are pure state
//! machines: the transports call them and act on what they return.

use core::fmt;

/// A peer broke the credit protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreditError {
    /// A message arrived although every credit granted had been used: the
    /// peer sent without a credit. The connection must be torn down.
    NoCredit,
}

impl fmt::Display for CreditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CreditError::NoCredit => f.write_str("message received without a credit"),
        }
    }
}

/// Send side: how many messages may be sent now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CreditSender {
    available: u32,
    in_flight: u32,
    high_water: u32,
}

impl CreditSender {
    /// A sender holding `initial` credits (from the hello exchange).
    pub fn new(initial: u16) -> CreditSender {
        CreditSender {
            available: u32::from(initial),
            in_flight: 0,
            high_water: 0,
        }
    }

    /// Spends a credit for one message. `false` means wait: nothing may be
    /// sent until [`CreditSender::grant`] adds credits (blk-mq returns
    /// `BLK_STS_RESOURCE` and reruns the queue then).
    pub fn try_consume(&mut self) -> bool {
        match self.available.checked_sub(1) {
            Some(left) => {
                self.available = left;
                self.in_flight = self.in_flight.saturating_add(1);
                self.high_water = self.high_water.max(self.in_flight);
                true
            }
            None => false,
        }
    }

    /// Adds the credits the peer granted in a message it sent.
    pub fn grant(&mut self, n: u16) {
        // The peer cannot legitimately grant more than its receive queue, so
        // saturation is only reached by a broken peer, which then merely
        // keeps a huge budget instead of wrapping to none.
        self.available = self.available.saturating_add(u32::from(n));
    }

    /// Records that a message sent earlier has been answered, for the
    /// in-flight statistics only; credits come back only through `grant`.
    pub fn complete(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// Credits available now.
    pub fn available(&self) -> u32 {
        self.available
    }

    /// Messages sent and not yet completed.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Largest `in_flight` seen: how deep the queue actually ran.
    pub fn high_water(&self) -> u32 {
        self.high_water
    }

    /// Forgets everything, for a new connection.
    pub fn reset(&mut self, initial: u16) {
        *self = CreditSender::new(initial);
    }
}

/// Receive side: which receives are posted, and how many of them the peer
/// has been promised.
///
/// Invariant: `outstanding <= posted`. Every credit granted is backed by a
/// posted receive that no other credit claims, so the peer can never send a
/// message that finds no receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditReceiver {
    posted: u32,
    outstanding: u32,
    max_outstanding: u32,
}

impl Default for CreditReceiver {
    fn default() -> Self {
        CreditReceiver::new()
    }
}

impl CreditReceiver {
    /// A receiver with nothing posted and no cap on outstanding credits.
    pub fn new() -> CreditReceiver {
        CreditReceiver::with_cap(u32::MAX)
    }

    /// A receiver that never lets more than `max_outstanding` credits be
    /// outstanding at once: the window the peer may fill, e.g. the queue
    /// depth, even when more receives are posted.
    pub fn with_cap(max_outstanding: u32) -> CreditReceiver {
        CreditReceiver {
            posted: 0,
            outstanding: 0,
            max_outstanding,
        }
    }

    /// Records one more posted receive.
    pub fn on_recv_posted(&mut self) {
        self.posted = self.posted.saturating_add(1);
    }

    /// Records that a message consumed a posted receive. A message for which
    /// no credit was outstanding is a protocol violation.
    pub fn on_message_received(&mut self) -> Result<(), CreditError> {
        // outstanding <= posted, so a present credit implies a receive.
        match (self.outstanding.checked_sub(1), self.posted.checked_sub(1)) {
            (Some(outstanding), Some(posted)) => {
                self.outstanding = outstanding;
                self.posted = posted;
                Ok(())
            }
            _ => Err(CreditError::NoCredit),
        }
    }

    /// Credits that may be granted now, and records them as outstanding:
    /// posted receives not yet promised, within the cap and a `u16` field.
    /// The caller must put the result in the next message it sends.
    pub fn take_grant(&mut self) -> u16 {
        self.take_grant_capped(u16::MAX)
    }

    /// Like [`CreditReceiver::take_grant`], granting at most `max` now (to
    /// hand out credits gradually).
    pub fn take_grant_capped(&mut self, max: u16) -> u16 {
        let unpromised = self.posted.saturating_sub(self.outstanding);
        let room = self.max_outstanding.saturating_sub(self.outstanding);
        let n = unpromised.min(room).min(u32::from(max));
        // n <= max <= u16::MAX, so the conversion cannot fail.
        let n = u16::try_from(n).unwrap_or(0);
        self.outstanding = self.outstanding.saturating_add(u32::from(n));
        n
    }

    /// Puts back a grant taken with `take_grant` whose message was never
    /// sent, so the credits are offered again.
    pub fn return_grant(&mut self, n: u16) {
        self.outstanding = self.outstanding.saturating_sub(u32::from(n));
    }

    /// Receives posted and not yet consumed.
    pub fn posted(&self) -> u32 {
        self.posted
    }

    /// Credits granted to the peer and not yet used by it.
    pub fn outstanding(&self) -> u32 {
        self.outstanding
    }

    /// Forgets everything (the receive queue was flushed), keeping the cap.
    pub fn reset(&mut self) {
        *self = CreditReceiver::with_cap(self.max_outstanding);
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;
    use std::vec::Vec;

    #[test]
    fn sender_spends_and_regains() {
        let mut s = CreditSender::new(2);
        assert!(s.try_consume());
        assert!(s.try_consume());
        assert!(!s.try_consume());
        assert_eq!(s.available(), 0);
        assert_eq!(s.in_flight(), 2);
        s.grant(1);
        s.complete();
        assert!(s.try_consume());
        assert_eq!(s.high_water(), 2);
        s.grant(u16::MAX);
        s.grant(u16::MAX);
        assert_eq!(s.available(), 2 * u32::from(u16::MAX));
        s.reset(0);
        assert_eq!(s, CreditSender::new(0));
        s.complete();
        assert_eq!(s.in_flight(), 0);
    }

    #[test]
    fn receiver_grants_only_posted_receives() {
        let mut r = CreditReceiver::new();
        assert_eq!(r.take_grant(), 0);
        assert_eq!(r.on_message_received(), Err(CreditError::NoCredit));
        for _ in 0..3 {
            r.on_recv_posted();
        }
        assert_eq!(r.take_grant_capped(2), 2);
        assert_eq!(r.take_grant(), 1);
        assert_eq!(r.take_grant(), 0);
        assert_eq!(r.outstanding(), 3);
        r.on_message_received().unwrap();
        // The consumed receive is gone until it is re-posted.
        assert_eq!(r.take_grant(), 0);
        r.on_recv_posted();
        assert_eq!(r.take_grant(), 1);
        r.return_grant(1);
        assert_eq!(r.take_grant(), 1);
        assert_eq!((r.posted(), r.outstanding()), (3, 3));
        r.reset();
        assert_eq!((r.posted(), r.outstanding()), (0, 0));
        assert_eq!(r.on_message_received(), Err(CreditError::NoCredit));
        assert_eq!(
            std::format!("{}", CreditError::NoCredit),
            "message received without a credit"
        );
    }

    #[test]
    fn receiver_cap_bounds_the_window() {
        let mut r = CreditReceiver::with_cap(2);
        for _ in 0..5 {
            r.on_recv_posted();
        }
        assert_eq!(r.take_grant(), 2);
        assert_eq!(r.take_grant(), 0);
        r.on_message_received().unwrap();
        assert_eq!(r.take_grant(), 1);
        r.reset();
        for _ in 0..5 {
            r.on_recv_posted();
        }
        assert_eq!(r.take_grant(), 2);
    }

    #[test]
    fn grant_larger_than_u16_is_split() {
        let mut r = CreditReceiver::new();
        for _ in 0..70_000 {
            r.on_recv_posted();
        }
        assert_eq!(r.take_grant(), u16::MAX);
        assert_eq!(u32::from(r.take_grant()), 70_000 - u32::from(u16::MAX));
    }

    #[derive(Debug, Clone)]
    enum Ev {
        /// The receiver posts a receive.
        Post,
        /// The receiver sends a message carrying a grant (capped).
        SendGrant(u16),
        /// The grant message reaches the sender.
        DeliverGrant,
        /// The sender tries to send a message.
        Send,
        /// The oldest message in flight reaches the receiver's NIC.
        Deliver,
        /// The grant message is lost before sending; the grant is returned.
        DropGrant(u16),
    }

    fn ev() -> impl Strategy<Value = Ev> {
        prop_oneof![
            3 => Just(Ev::Post),
            2 => (0u16..8).prop_map(Ev::SendGrant),
            2 => Just(Ev::DeliverGrant),
            4 => Just(Ev::Send),
            3 => Just(Ev::Deliver),
            1 => (0u16..8).prop_map(Ev::DropGrant),
        ]
    }

    proptest! {
        /// A sender fed only by the receiver's grants never sends a message
        /// that finds no posted receive, and never sends more than granted.
        #[test]
        fn no_rnr_under_any_interleaving(events in proptest::collection::vec(ev(), 0..400), cap in 1u32..64) {
            let mut rx = CreditReceiver::with_cap(cap);
            let mut tx = CreditSender::new(0);
            // What the hardware holds: posted receives, and messages in the
            // wire in both directions.
            let mut nic_posted: u64 = 0;
            let mut grants: VecDeque<u16> = VecDeque::new();
            let mut msgs: u64 = 0;
            let mut granted_total: u64 = 0;
            let mut sent_total: u64 = 0;
            for e in events {
                match e {
                    Ev::Post => { rx.on_recv_posted(); nic_posted += 1; }
                    Ev::SendGrant(max) => {
                        let n = rx.take_grant_capped(max);
                        grants.push_back(n);
                    }
                    Ev::DropGrant(max) => {
                        let n = rx.take_grant_capped(max);
                        rx.return_grant(n);
                    }
                    Ev::DeliverGrant => if let Some(n) = grants.pop_front() {
                        tx.grant(n);
                        granted_total += u64::from(n);
                    },
                    Ev::Send => if tx.try_consume() {
                        sent_total += 1;
                        msgs += 1;
                    },
                    Ev::Deliver => if msgs > 0 {
                        msgs -= 1;
                        // No RNR: a receive must be there for this message.
                        prop_assert!(nic_posted > 0, "RNR: message found no receive");
                        nic_posted -= 1;
                        prop_assert_eq!(rx.on_message_received(), Ok(()));
                        tx.complete();
                    },
                }
                prop_assert!(sent_total <= granted_total);
                prop_assert!(rx.outstanding() <= rx.posted());
                prop_assert!(rx.outstanding() <= cap);
                prop_assert_eq!(u64::from(rx.posted()), nic_posted);
                // Credits held, in transit or in use never exceed the
                // receives posted: the invariant that rules out RNR.
                let in_transit: u64 = grants.iter().map(|&n| u64::from(n)).sum();
                prop_assert!(u64::from(tx.available()) + in_transit + msgs <= nic_posted);
                prop_assert!(tx.in_flight() as u64 == msgs);
            }
        }

        /// Arbitrary calls never panic and keep `outstanding <= posted`.
        #[test]
        fn receiver_never_breaks_invariant(ops in proptest::collection::vec((0u8..4, any::<u16>()), 0..300)) {
            let mut r = CreditReceiver::new();
            let mut errors = Vec::new();
            for (op, n) in ops {
                match op {
                    0 => r.on_recv_posted(),
                    1 => { let _ = r.take_grant_capped(n); }
                    2 => if let Err(e) = r.on_message_received() { errors.push(e) },
                    _ => r.return_grant(n),
                }
                prop_assert!(r.outstanding() <= r.posted());
            }
        }
    }
}
