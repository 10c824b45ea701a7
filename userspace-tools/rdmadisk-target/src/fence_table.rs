//! The target's side of the fencing rule of `rdmadisk_proto::fence`: one [`Fence`] per client
//! address and export, consulted at attach and on every request.
//!
//! Requests are applied asynchronously (io_uring), so the rule cannot rest on a lock held
//! while a request applies. Instead each fence counts the requests applying under it, per
//! *generation* (the generation rises each time the fence moves). A request checks the fence
//! and, if it may apply, takes a [`Ticket`] of the current generation, which it holds until
//! its I/O has completed. Moving the fence raises the generation under the fence's lock (from
//! then on an older set's modifying request is `Fenced`) and then waits until no ticket of an
//! older generation is left. So once the first request of a newer connection set has moved the
//! fence, no request of an older set is still being applied, and none will be. Many requests
//! of the current set apply in parallel, and a stream of them never holds a move up: only older
//! generations are waited for.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use rdmadisk_proto::fence::{Fence, Verdict};

/// Fences the target keeps at most. Entries live as long as the target (a fence must outlive
/// its connections, or an old epoch could attach again), so the table is bounded instead:
/// distinct (client address, export) pairs are few in any real deployment.
pub const FENCE_TABLE_CAP: usize = 4096;

type Key = (IpAddr, String);

/// One fence and the requests applying under it.
#[derive(Default)]
struct Gate {
    state: Mutex<GateState>,
    drained: Condvar,
}

#[derive(Default)]
struct GateState {
    fence: Fence,
    generation: u64,
    /// Tickets out, by generation and connection (only those with tickets out have an entry).
    applying: BTreeMap<u64, BTreeMap<u64, u64>>,
    /// Fence moves waiting for older tickets: a ticket's end wakes them only when there are
    /// some (a wake is a system call, on every request otherwise).
    movers: usize,
}

/// Tells connections apart in a gate's counts.
static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

/// Every fence of the target.
pub struct FenceTable {
    entries: Mutex<HashMap<Key, Arc<Gate>>>,
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
    gate: Option<Arc<Gate>>,
    /// This connection, in the gate's counts.
    id: u64,
    pub ip: IpAddr,
    pub export: String,
    pub session: u32,
    pub epoch: u32,
    fenced_seen: Cell<bool>,
}

/// What [`ConnFence::run`] did.
#[cfg(test)]
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome<R> {
    /// What the request returned; `None` when it was fenced and not run.
    pub applied: Option<R>,
    /// This request moved the fence to the connection's (session, epoch).
    pub moved: bool,
}

/// Leave to apply one request: held until its I/O has completed, then dropped. A fence move
/// waits for every ticket of an older generation.
#[must_use = "a ticket must be held until the request's I/O has completed"]
pub struct Ticket {
    gate: Option<Arc<Gate>>,
    generation: u64,
    conn: u64,
    /// This request moved the fence.
    pub moved: bool,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let Some(g) = &self.gate else {
            return;
        };
        let mut st = g.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(by_conn) = st.applying.get_mut(&self.generation) {
            if let Some(n) = by_conn.get_mut(&self.conn) {
                *n -= 1;
                if *n == 0 {
                    by_conn.remove(&self.conn);
                }
            }
            if by_conn.is_empty() {
                st.applying.remove(&self.generation);
            }
            if st.movers > 0 {
                g.drained.notify_all();
            }
        }
    }
}

/// A modifying request of a superseded connection set: not applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fenced {
    /// This request moved the fence before finding itself superseded (an even newer set moved
    /// it meanwhile).
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
        let conn = |gate| ConnFence {
            gate,
            id: NEXT_CONN.fetch_add(1, Ordering::Relaxed),
            ip,
            export: export.to_string(),
            session,
            epoch,
            fenced_seen: Cell::new(false),
        };
        if session == 0 {
            return Ok(conn(None));
        }
        let gate = {
            let mut map = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            let key = (ip, export.to_string());
            match map.get(&key) {
                Some(f) => f.clone(),
                None if map.len() >= self.cap => return Err(Refusal::Full),
                None => map.entry(key).or_default().clone(),
            }
        };
        let f = gate
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .fence;
        if !f.admit_hello(session, epoch) {
            return Err(Refusal::Stale {
                current: f.current(),
            });
        }
        Ok(conn(Some(gate)))
    }
}

/// How long a fence move waits for an older set's requests before it logs that it is still
/// waiting (it keeps waiting: letting the newer set apply first is what fencing forbids).
const MOVE_WAIT_LOG: Duration = Duration::from_secs(10);

impl ConnFence {
    /// Checks the fence for one request of this connection: moves the fence first if this
    /// connection is newer (waiting for every request of older sets still applying), and
    /// refuses a `modifies` request if this connection has been superseded. The ticket must
    /// be held until the request's I/O has completed.
    pub fn begin(&self, modifies: bool) -> Result<Ticket, Fenced> {
        let Some(gate) = &self.gate else {
            return Ok(Ticket {
                gate: None,
                generation: 0,
                conn: self.id,
                moved: false,
            });
        };
        let mut moved = false;
        let mut st = gate.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match st.fence.check(self.session, self.epoch) {
                Verdict::Fenced if modifies => return Err(Fenced { moved }),
                Verdict::Apply | Verdict::Fenced => {
                    // Applied under the current generation: a later move waits for it. A
                    // superseded set may still read, flush or ping: none of these changes the
                    // export, so none can land an old write over a newer one; the client has
                    // given these requests up and drops their answers, and refusing them would
                    // only turn a harmless late read into a spurious error.
                    let generation = st.generation;
                    *st.applying
                        .entry(generation)
                        .or_default()
                        .entry(self.id)
                        .or_insert(0) += 1;
                    return Ok(Ticket {
                        gate: Some(gate.clone()),
                        generation,
                        conn: self.id,
                        moved,
                    });
                }
                Verdict::Advance => {
                    let before = st.fence.current();
                    st.fence.advance(self.session, self.epoch);
                    moved |= st.fence.current() != before;
                    st.generation += 1;
                    let newest = st.generation;
                    // Every request that began before the move must finish first, except this
                    // connection's own: only this thread can take their completions, and they
                    // can only be reads of a superseded set (its writes from before any earlier
                    // move were waited for by that move), which cannot land old data.
                    let me = self.id;
                    let others_older = |st: &GateState| {
                        st.applying
                            .range(..newest)
                            .any(|(_, by_conn)| by_conn.keys().any(|&c| c != me))
                    };
                    let mut waited = Duration::ZERO;
                    st.movers += 1;
                    while others_older(&st) {
                        let (g, t) = gate
                            .drained
                            .wait_timeout(st, MOVE_WAIT_LOG)
                            .unwrap_or_else(PoisonError::into_inner);
                        st = g;
                        if t.timed_out() {
                            waited += MOVE_WAIT_LOG;
                            log::warn!(
                                "fence {} {}: moving to session {} epoch {} still waits for an older set's requests after {} s",
                                self.ip, self.export, self.session, self.epoch, waited.as_secs()
                            );
                        }
                    }
                    st.movers -= 1;
                    // Check again: an even newer set may have moved it meanwhile.
                }
            }
        }
    }

    /// Runs `apply`, the execution of one request of this connection, under the fence (see
    /// [`ConnFence::begin`]), synchronously.
    #[cfg(test)]
    pub fn run<R>(&self, modifies: bool, apply: impl FnOnce() -> R) -> Outcome<R> {
        match self.begin(modifies) {
            Ok(t) => {
                let r = apply();
                let moved = t.moved;
                drop(t);
                Outcome {
                    applied: Some(r),
                    moved,
                }
            }
            Err(f) => Outcome {
                applied: None,
                moved: f.moved,
            },
        }
    }

    /// True the first time it is called: one log line per fenced connection is enough.
    pub fn first_fenced(&self) -> bool {
        !self.fenced_seen.replace(true)
    }

    /// Where the fence is now (for logs).
    pub fn current(&self) -> Option<(u32, u32)> {
        self.gate.as_ref().and_then(|g| {
            g.state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .fence
                .current()
        })
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
            let old_ops = Arc::new(AtomicU64::new(0));
            let mut old = Vec::new();
            for _ in 0..3 {
                let c = t.attach(IP, "a", 7, 1).unwrap();
                let (ns, ap, fe, vi, ops) = (
                    new_started.clone(),
                    old_applied.clone(),
                    old_fenced.clone(),
                    violations.clone(),
                    old_ops.clone(),
                );
                old.push(thread::spawn(move || {
                    // Until this writer has been fenced a few times: the advance must come
                    // mid-stream however the threads are scheduled (a fixed count could all
                    // be done before it on a loaded machine).
                    let mut fenced_here = 0;
                    for _ in 0..1_000_000 {
                        if fenced_here >= 20 {
                            break;
                        }
                        ops.fetch_add(1, Ordering::SeqCst);
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
                            fenced_here += 1;
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
                old_ops.load(Ordering::SeqCst)
            );
            assert!(
                old_fenced.load(Ordering::SeqCst) > 0,
                "the old writers ran past the advance (round {round})"
            );
        }
    }

    /// A superseded connection keeps a read in flight while newer sessions move the fence
    /// until the fence forgets its session; its next request then moves the fence itself. It
    /// must not wait for its own read (only its thread can complete it), while the newer
    /// mover, which is waiting for that read, still waits until it is done.
    #[test]
    fn a_mover_does_not_wait_for_its_own_tickets() {
        let t = Arc::new(FenceTable::new(16));
        let a = t.attach(IP, "a", 1, 1).unwrap();
        drop(a.begin(true).unwrap());
        for s in 2..=5 {
            drop(t.attach(IP, "a", s, 1).unwrap().begin(true).unwrap());
        }
        // Session 1 is retired, not forgotten: its read is served, under the current
        // generation.
        let held = a.begin(false).expect("a superseded read is served");
        // Session 6 moves the fence (forgetting session 1) and waits for that read.
        let s6 = t.attach(IP, "a", 6, 1).unwrap();
        let (tx6, rx6) = std::sync::mpsc::channel();
        thread::spawn(move || {
            let r = s6.begin(true).map(|t| t.moved);
            tx6.send(r).unwrap();
        });
        assert!(
            rx6.recv_timeout(std::time::Duration::from_millis(500))
                .is_err(),
            "session 6 must wait for the old read"
        );
        // Session 1's next request: a move of its own, not a wait for itself.
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            let r = a.begin(false).map(|t| t.moved);
            tx.send(r.is_ok()).unwrap();
            drop(held);
        });
        let done = rx.recv_timeout(std::time::Duration::from_secs(5));
        assert_eq!(done, Ok(true), "the mover waited for its own ticket");
        // The read is done now: session 6 goes on.
        assert!(rx6.recv_timeout(std::time::Duration::from_secs(5)).is_ok());
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
