//! Request ids and the fencing rule, driven by random event sequences.
//!
//! Tags: every third input byte picks an operation (issue a slot, answer an id
//! built from the input, abandon a slot). A model records which use of each
//! slot is in flight; the table must answer exactly the current use of an
//! in-flight slot, each use once, never a replay, a duplicate or a stranger.
//!
//! Fence: triples of bytes are a Hello or a request of (session, epoch).
//! Whatever the order and however many sessions come and go, nothing
//! superseded is admitted or applied: no older epoch of a session the fence
//! has applied a newer one of, and no session below one it has applied.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use rdmadisk_proto::fence::{newer, Fence, Verdict};
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
    let mut applied: Vec<(u32, u32)> = Vec::new();
    for p in data.chunks_exact(3) {
        // Sessions from a small range so that they repeat; epochs around 0 so that they wrap.
        let (s, e) = (u32::from(p[0] % 24), u32::from(p[1]).wrapping_sub(128));
        let superseded = applied.iter().any(|&a| newer(a, (s, e)));
        let before = f.current();
        if p[2] & 1 == 0 {
            let new = p[2] & 2 != 0;
            let joins = new && applied.iter().any(|&(a, _)| a >= s);
            let r = f.admit_hello(s, e, new);
            assert_eq!(r.is_err(), s != 0 && (superseded || joins), "hello {s}/{e}: {r:?}");
            continue;
        }
        let v = f.advance(s, e);
        if s == 0 {
            assert!(v == Verdict::Apply && f.current() == before);
        } else if superseded {
            assert_eq!(v, Verdict::Fenced, "applied superseded {s}/{e}");
            assert_eq!(f.current(), before);
        } else {
            assert_eq!(v, Verdict::Apply);
            assert_eq!(f.current(), Some((s, e)));
            applied.push((s, e));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let (a, b) = data.split_at(data.len() / 2);
    tags(a);
    fences(b);
});
