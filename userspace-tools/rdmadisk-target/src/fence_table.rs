//! The target's side of the fencing rule of `rdmadisk_proto::fence`: one [`Fence`] per client
//! address and export, consulted at attach and on every request.
//!
//! Each fence sits in an `RwLock`. A modifying request is checked and applied under the read
//! guard; moving the fence takes the write guard, which waits for every request applying
//! under a read guard to finish. So once the first request of a newer connection set has moved
//! the fence, no request of an older set is still being applied, and none will be: their
//! check now says `Fenced`. Many connections of the current set still apply in parallel.

use std::cell::Cell;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use rdmadisk_proto::fence::{Fence, Verdict};

/// Fences the target keeps at most. Entries live as long as the target (a fence must outlive
/// its connections, or an old epoch could attach again), so the table is bounded instead:
/// distinct (client address, export) pairs are few in any real deployment.
pub const FENCE_TABLE_CAP: usize = 4096;

type Key = (IpAddr, String);

/// Every fence of the target.
pub struct FenceTable {
    entries: Mutex<HashMap<Key, Arc<RwLock<Fence>>>>,
    cap: usize,
}

/// Why [`FenceTable::attach`] refused a Hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A new (address, export) pair, and the table is full.
    Full,
    /// The Hello's epoch or session has been superseded; `current` is where the fence is.
    Stale { current: Option<(u32, u32)> },
}

/// One connection's place in the table: its fence and its (session, epoch).
pub struct ConnFence {
    /// `None` for session 0, which is never fenced and moves nothing.
    fence: Option<Arc<RwLock<Fence>>>,
    pub ip: IpAddr,
    pub export: String,
    pub session: u32,
    pub epoch: u32,
    fenced_seen: Cell<bool>,
}

/// What [`ConnFence::run`] did.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome<R> {
    /// What the request returned; `None` when it was fenced and not run.
    pub applied: Option<R>,
    /// This request moved the fence to the connection's (session, epoch).
    pub moved: bool,
}

impl FenceTable {
    pub fn new(cap: usize) -> FenceTable {
        FenceTable {
            entries: Mutex::new(HashMap::new()),
            cap,
        }
    }

    /// Fences in the table.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// The fence of (`ip`, `export`) for a Hello of `session`/`epoch`, or why it may not attach.
    pub fn attach(
        &self,
        ip: IpAddr,
        export: &str,
        session: u32,
        epoch: u32,
    ) -> Result<ConnFence, Refusal> {
        // The RDMA and TCP listeners may see one client as IPv4 and as IPv4-mapped IPv6; a
        // failover between them must find the same fence.
        let ip = ip.to_canonical();
        let conn = |fence| ConnFence {
            fence,
            ip,
            export: export.to_string(),
            session,
            epoch,
            fenced_seen: Cell::new(false),
        };
        if session == 0 {
            return Ok(conn(None));
        }
        let fence = {
            let mut map = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            let key = (ip, export.to_string());
            match map.get(&key) {
                Some(f) => f.clone(),
                None if map.len() >= self.cap => return Err(Refusal::Full),
                None => map.entry(key).or_default().clone(),
            }
        };
        let f = *fence.read().unwrap_or_else(PoisonError::into_inner);
        if !f.admit_hello(session, epoch) {
            return Err(Refusal::Stale {
                current: f.current(),
            });
        }
        Ok(conn(Some(fence)))
    }
}

impl ConnFence {
    /// Runs `apply`, the execution of one request of this connection, under the fence:
    /// moves the fence first if this connection is newer, and skips a `modifies` request if
    /// this connection has been superseded.
    pub fn run<R>(&self, modifies: bool, apply: impl FnOnce() -> R) -> Outcome<R> {
        let Some(lock) = &self.fence else {
            return Outcome {
                applied: Some(apply()),
                moved: false,
            };
        };
        let mut moved = false;
        loop {
            let fence = lock.read().unwrap_or_else(PoisonError::into_inner);
            match fence.check(self.session, self.epoch) {
                // Applied while the read guard is held: that is what makes a later advance
                // wait for it.
                Verdict::Apply => {
                    let r = apply();
                    drop(fence);
                    return Outcome {
                        applied: Some(r),
                        moved,
                    };
                }
                Verdict::Fenced if modifies => {
                    return Outcome {
                        applied: None,
                        moved,
                    }
                }
                // A superseded set may still read, flush or ping: none of these changes the
                // export, so none can land an old write over a newer one. The client has
                // given these requests up and drops their answers, and refusing them would
                // only turn a harmless late read into a spurious error.
                Verdict::Fenced => {
                    drop(fence);
                    return Outcome {
                        applied: Some(apply()),
                        moved,
                    };
                }
                Verdict::Advance => {
                    drop(fence);
                    let mut w = lock.write().unwrap_or_else(PoisonError::into_inner);
                    let before = w.current();
                    w.advance(self.session, self.epoch);
                    moved |= w.current() != before;
                    // Loop: re-check under a read guard, since an even newer set may move the
                    // fence between this write guard and the next read guard.
                }
            }
        }
    }

    /// True the first time it is called: one log line per fenced connection is enough.
    pub fn first_fenced(&self) -> bool {
        !self.fenced_seen.replace(true)
    }

    /// Where the fence is now (for logs).
    pub fn current(&self) -> Option<(u32, u32)> {
        self.fence
            .as_ref()
            .and_then(|f| f.read().unwrap_or_else(PoisonError::into_inner).current())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::thread;

    const IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));

    #[test]
    fn attach_and_fence_per_address_and_export() {
        let t = FenceTable::new(16);
        let e1 = t.attach(IP, "a", 7, 1).unwrap();
        let e2 = t.attach(IP, "a", 7, 2).unwrap();
        assert_eq!(e1.run(true, || 1).applied, Some(1));
        // The newer epoch moves the fence with its first request, whatever the opcode.
        assert_eq!(
            e2.run(false, || 2),
            Outcome {
                applied: Some(2),
                moved: true
            }
        );
        assert_eq!(e2.current(), Some((7, 2)));
        assert_eq!(e1.run(true, || 3).applied, None);
        assert_eq!(e1.run(false, || 4).applied, Some(4), "reads are served");
        assert_eq!(
            t.attach(IP, "a", 7, 1).err(),
            Some(Refusal::Stale {
                current: Some((7, 2))
            })
        );
        // Another export, another address: other fences.
        let other = t.attach(IP, "b", 7, 1).unwrap();
        assert_eq!(other.run(true, || 5).applied, Some(5));
        let v6 = "::ffff:192.0.2.1".parse::<IpAddr>().unwrap();
        assert!(
            t.attach(v6, "a", 7, 1).is_err(),
            "IPv4-mapped is the same client"
        );
        let elsewhere = t.attach("192.0.2.9".parse().unwrap(), "a", 7, 1).unwrap();
        assert_eq!(elsewhere.run(true, || 6).applied, Some(6));
        // A new session retires the old one.
        let s9 = t.attach(IP, "a", 9, 1).unwrap();
        assert!(s9.run(true, || ()).moved);
        assert_eq!(e2.run(true, || 7).applied, None);
        assert!(t.attach(IP, "a", 7, 3).is_err());
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn session_zero_is_never_fenced_and_takes_no_entry() {
        let t = FenceTable::new(1);
        let s = t.attach(IP, "a", 5, 5).unwrap();
        s.run(true, || ());
        let probe = t.attach(IP, "a", 0, 0).unwrap();
        assert_eq!(
            probe.run(true, || 1),
            Outcome {
                applied: Some(1),
                moved: false
            }
        );
        assert_eq!(s.current(), Some((5, 5)));
        // Full: a new pair is refused, a known pair and probes are not.
        assert_eq!(t.attach(IP, "b", 1, 1).err(), Some(Refusal::Full));
        assert!(t.attach(IP, "b", 0, 0).is_ok());
        assert!(t.attach(IP, "a", 5, 6).is_ok());
        assert_eq!(t.len(), 1);
    }

    /// Old-epoch writers apply continuously; a newer epoch's first write moves the fence. Once
    /// that write has started applying, no old write may be applying or apply afterwards.
    #[test]
    fn no_old_write_applies_after_the_advance() {
        for round in 0..20u64 {
            let t = Arc::new(FenceTable::new(4));
            let new_started = Arc::new(AtomicBool::new(false));
            let old_applied = Arc::new(AtomicU64::new(0));
            let old_fenced = Arc::new(AtomicU64::new(0));
            let violations = Arc::new(AtomicU64::new(0));
            let mut old = Vec::new();
            for _ in 0..3 {
                let c = t.attach(IP, "a", 7, 1).unwrap();
                let (ns, ap, fe, vi) = (
                    new_started.clone(),
                    old_applied.clone(),
                    old_fenced.clone(),
                    violations.clone(),
                );
                old.push(thread::spawn(move || {
                    for _ in 0..2000 {
                        let out = c.run(true, || {
                            if ns.load(Ordering::SeqCst) {
                                vi.fetch_add(1, Ordering::SeqCst);
                            }
                            // Stretch the apply so the advance has to wait for it.
                            std::hint::spin_loop();
                            thread::yield_now();
                            if ns.load(Ordering::SeqCst) {
                                vi.fetch_add(1, Ordering::SeqCst);
                            }
                            ap.fetch_add(1, Ordering::SeqCst);
                        });
                        if out.applied.is_none() {
                            fe.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }));
            }
            // Advance mid-stream, while the old writers are busy.
            while old_applied.load(Ordering::SeqCst) < 50 + 20 * round {
                thread::yield_now();
            }
            let newer = t.attach(IP, "a", 7, 2).unwrap();
            let out = newer.run(true, || new_started.store(true, Ordering::SeqCst));
            assert!(out.moved && out.applied.is_some());
            let applied_at_advance = old_applied.load(Ordering::SeqCst);
            for h in old {
                h.join().unwrap();
            }
            assert_eq!(violations.load(Ordering::SeqCst), 0, "round {round}");
            assert_eq!(
                old_applied.load(Ordering::SeqCst),
                applied_at_advance,
                "an old write applied after the advance returned (round {round})"
            );
            assert_eq!(
                old_applied.load(Ordering::SeqCst) + old_fenced.load(Ordering::SeqCst),
                6000
            );
            assert!(
                old_fenced.load(Ordering::SeqCst) > 0,
                "the old writers ran past the advance (round {round})"
            );
        }
    }

    /// Two queues of the newer set race to move the fence: exactly one reports the move.
    #[test]
    fn one_mover_per_advance() {
        let t = Arc::new(FenceTable::new(4));
        t.attach(IP, "a", 1, 1).unwrap().run(true, || ());
        let moves = Arc::new(AtomicU64::new(0));
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let c = t.attach(IP, "a", 1, 2).unwrap();
                let m = moves.clone();
                thread::spawn(move || {
                    for _ in 0..100 {
                        let o = c.run(true, || ());
                        assert!(o.applied.is_some());
                        if o.moved {
                            m.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(moves.load(Ordering::SeqCst), 1);
    }
}
