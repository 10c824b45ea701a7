//! Request ids and the fencing rule, driven by random event sequences.
//!
//! Tags: every third input byte picks an operation (issue a slot, answer an id
//! built from the input, abandon a slot). A model records which use of each
//! slot is in flight; the table must answer exactly the current use of an
//! in-flight slot, each use once, never a replay, a duplicate or a stranger.
//!
//! Fence: pairs of bytes are (session, epoch) of a request. Whatever the
//! order, nothing superseded is applied: no older epoch of a session the fence
//! has seen a newer one of, and no session the fence has moved away from.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use rdmadisk_proto::fence::{epoch_newer, Fence, Verdict, RETIRED_SESSIONS};
use rdmadisk_proto::tags::{TagError, Tags};
use rdmadisk_proto::wire::ReqId;

const SLOTS: usize = 9;

fn tags(data: &[u8]) {
    let mut t = Tags::<SLOTS>::new();
    let mut live: HashMap<u16, u16> = HashMap::new();
    let mut answered: Vec<ReqId> = Vec::new();
    for op in data.chunks_exact(3) {
        let slot = u16::from(op[1] % (SLOTS as u8 + 2));
        match op[0] % 3 {
            0 => match t.issue(slot) {
                Ok(id) => {
                    assert!(usize::from(slot) < SLOTS && !live.contains_key(&slot));
                    assert_eq!(id.slot, slot);
                    assert!(!answered.contains(&id), "a generation reused");
                    live.insert(slot, id.gen);
                }
                Err(e) => assert!(
                    (e == TagError::OutOfRange && usize::from(slot) >= SLOTS)
                        || (e == TagError::Busy && live.contains_key(&slot))
                ),
            },
            1 => {
                // Half the time the current generation, else one from the input.
                let gen = match (op[2] & 1, live.get(&slot)) {
                    (0, Some(&g)) => g,
                    _ => u16::from(op[2]) << 4,
                };
                let id = ReqId::from_tag(ReqId { slot, gen }.tag());
                let want = live.get(&slot) == Some(&gen);
                match t.answer(id) {
                    Ok(s) => {
                        assert!(want, "answered {id:?} that is not in flight");
                        assert_eq!(s, slot);
                        live.remove(&slot);
                        answered.push(id);
                    }
                    Err(_) => assert!(!want, "refused the answer to {id:?}"),
                }
            }
            _ => {
                t.release(slot);
                live.remove(&slot);
            }
        }
        assert_eq!(t.in_flight(), live.len());
        // Replaying any earlier answer is refused.
        if let Some(&old) = answered.last() {
            assert!(t.check(old).is_err() || live.get(&old.slot) == Some(&old.gen));
        }
    }
}

fn fences(data: &[u8]) {
    let mut f = Fence::new();
    let mut max_epoch: HashMap<u32, u32> = HashMap::new();
    let mut left: Vec<u32> = Vec::new();
    for p in data.chunks_exact(2) {
        let (s, e) = (u32::from(p[0] % 6), u32::from(p[1]).wrapping_sub(128));
        let before = f.current();
        let hello_ok = f.admit_hello(s, e);
        let v = f.advance(s, e);
        if s == 0 {
            assert!(hello_ok && v == Verdict::Apply && f.current() == before);
            continue;
        }
        if v == Verdict::Apply {
            assert!(hello_ok, "applied a request of a set whose Hello is refused");
            assert!(!left.contains(&s) || left.len() > RETIRED_SESSIONS);
            if let Some(&m) = max_epoch.get(&s) {
                assert!(!epoch_newer(m, e));
            }
            max_epoch.insert(s, e);
            if let Some((ps, _)) = before {
                if ps != s {
                    left.push(ps);
                }
            }
            assert_eq!(f.current(), Some((s, e)));
        } else {
            assert_eq!(v, Verdict::Fenced);
            assert_eq!(f.current(), before);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let (a, b) = data.split_at(data.len() / 2);
    tags(a);
    fences(b);
});
