//! Request ids with generations: which requests of a connection are in flight,
//! and whether a response answers one of them.
//!
//! A client issues each request from a slot (its blk-mq tag) and sends the slot
//! with the slot's current generation as the request's [`ReqId`]. A response is
//! accepted only for a slot that is in flight *and* carries that generation; it
//! then frees the slot. A response for a free slot, for a slot out of range, or
//! with an older generation is refused, so a duplicate, a replay or a late
//! answer to an earlier use of the slot can never complete the request that
//! uses the slot now. Both transports of the kernel module keep one
//! [`Tags`] per connection.

use super::wire::ReqId;

/// Why a response did not match a request in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagError {
    /// The slot is beyond the table.
    OutOfRange,
    /// The slot is in use: issuing it again before its answer.
    Busy,
    /// No request is in flight in that slot (a duplicate or unsolicited
    /// response).
    NotInFlight,
    /// The slot is in flight, but with another generation: the response
    /// answers an earlier use of the slot.
    Stale,
}

impl core::fmt::Display for TagError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            TagError::OutOfRange => "request id out of range",
            TagError::Busy => "slot already in flight",
            TagError::NotInFlight => "response for a request not in flight",
            TagError::Stale => "response for an earlier use of the slot",
        })
    }
}

/// The slots of one connection: `N` of them, each free or in flight with a
/// generation.
#[derive(Debug, Clone)]
pub struct Tags<const N: usize> {
    gen: [u16; N],
    busy: [bool; N],
    in_flight: usize,
}

impl<const N: usize> Default for Tags<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Tags<N> {
    const FITS: () = assert!(N <= 1 << 16, "slots must fit a u16");

    /// Every slot free, every generation 0.
    pub fn new() -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::FITS;
        Tags {
            gen: [0; N],
            busy: [false; N],
            in_flight: 0,
        }
    }

    /// Puts `slot` in flight with the next generation and returns the id to
    /// send.
    pub fn issue(&mut self, slot: u16) -> Result<ReqId, TagError> {
        let i = usize::from(slot);
        let (Some(gen), Some(busy)) = (self.gen.get_mut(i), self.busy.get_mut(i)) else {
            return Err(TagError::OutOfRange);
        };
        if *busy {
            return Err(TagError::Busy);
        }
        *gen = gen.wrapping_add(1);
        *busy = true;
        self.in_flight += 1;
        Ok(ReqId { slot, gen: *gen })
    }

    /// Whether `id` answers a request in flight, without changing anything.
    pub fn check(&self, id: ReqId) -> Result<(), TagError> {
        let i = usize::from(id.slot);
        match (self.gen.get(i), self.busy.get(i)) {
            (Some(_), Some(false)) => Err(TagError::NotInFlight),
            (Some(&g), Some(true)) if g == id.gen => Ok(()),
            (Some(_), Some(true)) => Err(TagError::Stale),
            _ => Err(TagError::OutOfRange),
        }
    }

    /// Takes the answer `id`: frees its slot if it answers the request in
    /// flight there, and says why not otherwise (nothing changes then).
    pub fn answer(&mut self, id: ReqId) -> Result<u16, TagError> {
        self.check(id)?;
        self.release(id.slot);
        Ok(id.slot)
    }

    /// Frees `slot` without an answer (its connection is gone, or the request
    /// was never sent). The next issue raises the generation again, so a late
    /// answer to the abandoned use is [`TagError::Stale`] or
    /// [`TagError::NotInFlight`].
    pub fn release(&mut self, slot: u16) {
        if let Some(b) = self.busy.get_mut(usize::from(slot)) {
            if core::mem::replace(b, false) {
                self.in_flight -= 1;
            }
        }
    }

    /// Whether `slot` is in flight.
    pub fn is_busy(&self, slot: u16) -> bool {
        self.busy.get(usize::from(slot)).copied().unwrap_or(false)
    }

    /// The generation `slot` was last issued with.
    pub fn generation(&self, slot: u16) -> Option<u16> {
        self.gen.get(usize::from(slot)).copied()
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn issue_answer_and_refusals() {
        let mut t = Tags::<4>::new();
        let a = t.issue(2).unwrap();
        assert_eq!(a, ReqId { slot: 2, gen: 1 });
        assert_eq!(t.issue(2), Err(TagError::Busy));
        assert_eq!(t.issue(4), Err(TagError::OutOfRange));
        assert_eq!(t.in_flight(), 1);
        assert_eq!(
            t.answer(ReqId { slot: 2, gen: 7 }),
            Err(TagError::Stale),
            "wrong generation"
        );
        assert_eq!(
            t.answer(ReqId { slot: 1, gen: 0 }),
            Err(TagError::NotInFlight)
        );
        assert_eq!(
            t.answer(ReqId { slot: 9, gen: 1 }),
            Err(TagError::OutOfRange)
        );
        assert_eq!(t.answer(a), Ok(2));
        assert_eq!(t.answer(a), Err(TagError::NotInFlight), "a duplicate");
        let b = t.issue(2).unwrap();
        assert_eq!(b.gen, 2);
        assert_eq!(
            t.answer(a),
            Err(TagError::Stale),
            "a replay of the first use"
        );
        assert_eq!(t.answer(b), Ok(2));
        assert_eq!(t.in_flight(), 0);
    }

    #[test]
    fn release_abandons_a_use() {
        let mut t = Tags::<2>::new();
        let a = t.issue(0).unwrap();
        t.release(0);
        t.release(0);
        assert_eq!(t.in_flight(), 0);
        assert_eq!(t.answer(a), Err(TagError::NotInFlight));
        let b = t.issue(0).unwrap();
        assert_ne!(a, b);
        assert_eq!(t.answer(a), Err(TagError::Stale));
    }

    #[test]
    fn generations_wrap() {
        let mut t = Tags::<1>::new();
        for _ in 0..70_000 {
            let id = t.issue(0).unwrap();
            assert_eq!(t.answer(id), Ok(0));
        }
        assert_eq!(t.generation(0), Some((70_000u32 % 65_536) as u16));
    }

    #[test]
    fn req_id_round_trips_through_the_tag() {
        let id = ReqId {
            slot: 0x1234,
            gen: 0xbeef,
        };
        assert_eq!(id.tag(), 0xbeef_1234);
        assert_eq!(ReqId::from_tag(id.tag()), id);
    }

    proptest! {
        /// Against a model: only the current use of an in-flight slot is ever
        /// answered, each use at most once, and the count stays exact.
        #[test]
        fn matches_a_model(ops in proptest::collection::vec((0u8..3, 0u16..10, any::<u16>()), 0..400)) {
            let mut t = Tags::<8>::new();
            let mut live: std::collections::HashMap<u16, u16> = Default::default();
            for (op, slot, gen) in ops {
                match op {
                    0 => match t.issue(slot) {
                        Ok(id) => {
                            prop_assert!(slot < 8 && !live.contains_key(&slot));
                            live.insert(slot, id.gen);
                        }
                        Err(_) => prop_assert!(slot >= 8 || live.contains_key(&slot)),
                    },
                    1 => {
                        let g = if gen % 2 == 0 { live.get(&slot).copied().unwrap_or(gen) } else { gen };
                        let want = live.get(&slot).is_some_and(|&cur| cur == g);
                        let got = t.answer(ReqId { slot, gen: g });
                        prop_assert_eq!(got.is_ok(), want);
                        if want { live.remove(&slot); }
                    }
                    _ => { t.release(slot); live.remove(&slot); }
                }
                prop_assert_eq!(t.in_flight(), live.len());
            }
        }
    }
}
