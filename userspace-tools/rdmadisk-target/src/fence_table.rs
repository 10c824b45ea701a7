//! The target's side of the fencing rule of `rdmadisk_proto::fence`: one [`Fence`] per client
//! address and export, consulted at attach and on every request (docs/design.md, "The fence
//! invariant").
//!
//! A fence is made only by a connection that has been admitted as its client and is trusted
//! (authenticated by a key, or up from a reserved port; `engine.rs`, `Core::confirm`): a
//! Hello, an authentication under way, or a connection that never establishes builds nothing
//! here. A connection admitted while the fence exists holds it from then on.
//! Since sessions are ordered, a fence is two numbers, whatever the history. It goes when the
//! client closes its session ([`wire::Opcode::Close`], a normal unmap: the client promises
//! that the mapping opens no connection of that session again) and no connection or request
//! uses it any more. Without a close (a client that crashed, a forced unmap), it stays
//! for the target's life: the target cannot know whether a session it superseded is still
//! alive somewhere, and forgetting the fence would let such a session write again. The
//! table's cap bounds that; a full table refuses new (address, export) pairs only.
//!
//! Requests are applied asynchronously (io_uring), so the rule cannot rest on a lock held
//! while a request applies. Instead each fence counts the requests applying under it, per
//! *generation* (the generation rises each time the fence moves). A request checks the fence
//! and, if it may apply, takes a [`Ticket`] of the current generation, which it holds until
//! its I/O has completed. Moving the fence raises the generation under the fence's lock (from
//! then on an older set's modifying request is `Fenced`), and a request of the current set
//! takes its ticket only once no other connection's ticket of an older generation is left:
//! the one that moved the fence, and the set's other connections alike. So once the first
//! request of a newer connection set has begun, no request of an older set is still being
//! applied, and none will be. Many requests
//! of the current set apply in parallel, and a stream of them never holds a move up: only older
//! generations are waited for.
//!
//! [`wire::Opcode::Close`]: rdmadisk_proto::wire::Opcode::Close

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::Duration;

use rdmadisk_proto::fence::{Fence, Verdict};

/// Fences the target keeps at most: one per (client address, export) pair whose client has
/// sent a request and not closed its session. A few dozen bytes each.
pub const FENCE_TABLE_CAP: usize = 65_536;

type Key = (IpAddr, Arc<str>);

/// One fence and the requests applying under it.
struct Gate {
    key: Key,
    table: Weak<FenceTable>,
    state: Mutex<GateState>,
    drained: Condvar,
}

#[derive(Default)]
struct GateState {
    fence: Fence,
    /// The fence's session has closed (a normal unmap): the fence goes once nothing uses it.
    closed: bool,
    generation: u64,
    /// Tickets out, by generation and connection (only those with tickets out have an entry).
    applying: BTreeMap<u64, BTreeMap<u64, u64>>,
    /// Requests waiting for older tickets (fence moves, and the other connections of the set
    /// that moved it): a ticket's end wakes them only when there are some (a wake is a system
    /// call, on every request otherwise).
    movers: usize,
    /// Those of them that have waited [`MOVE_WAIT_LOG`] or longer: an older set's I/O is
    /// stuck in the backing store. New Hellos for the fence are refused `Busy` meanwhile, so
    /// that client reconnects do not park a thread each here.
    stuck: usize,
}

/// Gives back one use of `gate` (a connection's or a ticket's). The last use of a closed
/// fence takes it out of the table: nothing can take the gate meanwhile, since gates are
/// handed out under the table's lock, which is held here.
fn release(gate: Arc<Gate>) {
    let Some(table) = gate.table.upgrade() else {
        return;
    };
    let mut map = table.entries.lock().unwrap_or_else(PoisonError::into_inner);
    let closed = gate
        .state
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .closed;
    // Two: the table's and ours.
    if closed && Arc::strong_count(&gate) == 2 {
        map.remove(&gate.key);
    }
}

/// Tells connections apart in a gate's counts.
static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

/// Every fence of the target.
pub struct FenceTable {
    entries: Mutex<HashMap<Key, Arc<Gate>>>,
    cap: usize,
}

/// Why [`FenceTable::admit`] refused a Hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A new (address, export) pair, and the table is full.
    Full,
    /// The Hello's epoch or session has been superseded; `current` is where the fence is.
    Stale { current: Option<(u32, u32)> },
    /// The fence is moving and an older set's I/O has kept it waiting for
    /// [`MOVE_WAIT_LOG`] or more (see `GateState::stuck`).
    Stuck,
}

/// One connection's place in the table: its fence and its (session, epoch).
pub struct ConnFence {
    table: Arc<FenceTable>,
    /// The fence, if there was one when the connection was admitted, or once the connection
    /// is trusted ([`ConnFence::join`]) or sends a request; `None` for ever for session 0,
    /// which is never fenced and moves nothing. Holding it keeps a closed fence from going:
    /// a connection admitted under it may still send a request.
    gate: Option<Arc<Gate>>,
    /// This connection, in the gate's counts.
    id: u64,
    pub ip: IpAddr,
    pub export: Arc<str>,
    pub session: u32,
    pub epoch: u32,
    fenced_seen: Cell<bool>,
}

impl Drop for ConnFence {
    fn drop(&mut self) {
        if let Some(g) = self.gate.take() {
            release(g);
        }
    }
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
        let Some(g) = self.gate.take() else {
            return;
        };
        {
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
        release(g);
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
    pub fn new(cap: usize) -> Arc<FenceTable> {
        Arc::new(FenceTable {
            entries: Mutex::new(HashMap::new()),
            cap,
        })
    }

    /// Fences in the table.
    pub fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether a Hello of `session`/`epoch` from `ip` for `export` may attach (`new`: it opens
    /// a session, see `Fence::admit_hello`), and the connection's place if so. Makes no fence:
    /// a connection's fence is made once it is trusted or sends a request. It joins the one
    /// there is, under the table's lock, so that a closed fence cannot go between this check
    /// and the connection's first request.
    pub fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        export: Arc<str>,
        session: u32,
        epoch: u32,
        new: bool,
    ) -> Result<ConnFence, Refusal> {
        let mut conn = self.conn(ip, export, session, epoch);
        if session == 0 {
            return Ok(conn);
        }
        let map = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(gate) = map.get(&(conn.ip, conn.export.clone())) else {
            return if map.len() >= self.cap {
                Err(Refusal::Full)
            } else {
                Ok(conn)
            };
        };
        let st = gate.state.lock().unwrap_or_else(PoisonError::into_inner);
        let f = st.fence;
        f.admit_hello(session, epoch, new)
            .map_err(|_| Refusal::Stale {
                current: f.current(),
            })?;
        if st.stuck > 0 {
            return Err(Refusal::Stuck);
        }
        drop(st);
        conn.gate = Some(gate.clone());
        // The `conn` dropped on a refusal above has no gate; this one's is released by its
        // drop, which takes the table's lock: let it go first.
        drop(map);
        Ok(conn)
    }

    /// The place of a connection outside any session (it moves no fence and is never fenced).
    pub fn unfenced(self: &Arc<Self>, ip: IpAddr, export: Arc<str>) -> ConnFence {
        self.conn(ip, export, 0, 0)
    }

    /// A connection's place for `session`/`epoch` from `ip` on `export`, with no fence yet (see
    /// [`FenceTable::admit`]).
    fn conn(self: &Arc<Self>, ip: IpAddr, export: Arc<str>, session: u32, epoch: u32) -> ConnFence {
        // The RDMA and TCP listeners may see one client as IPv4 and as IPv4-mapped IPv6; a
        // failover between them must find the same fence.
        ConnFence {
            table: self.clone(),
            gate: None,
            id: NEXT_CONN.fetch_add(1, Ordering::Relaxed),
            ip: ip.to_canonical(),
            export,
            session,
            epoch,
            fenced_seen: Cell::new(false),
        }
    }

    /// The gate of `key`, made if there is none (beyond the cap if need be: the cap is
    /// checked at attach, and only a connection admitted then gets here).
    fn gate(self: &Arc<Self>, key: &Key) -> Arc<Gate> {
        let mut map = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        map.entry(key.clone())
            .or_insert_with(|| {
                Arc::new(Gate {
                    key: key.clone(),
                    table: Arc::downgrade(self),
                    state: Mutex::new(GateState::default()),
                    drained: Condvar::new(),
                })
            })
            .clone()
    }
}

/// How long a fence move waits for an older set's requests before it logs that it is still
/// waiting, and the fence refuses new Hellos `Busy` (it keeps waiting: letting the newer set
/// apply first is what fencing forbids).
const MOVE_WAIT_LOG: Duration = Duration::from_secs(10);

impl ConnFence {
    /// The connection is trusted (authenticated, or established from a reserved port): it
    /// takes its fence now, made if there is none, so that the fence cannot go while the
    /// connection may still send a request.
    pub fn join(&mut self) {
        let _ = self.gate();
    }

    /// This connection's gate, made at its first use; `None` for session 0.
    fn gate(&mut self) -> Option<Arc<Gate>> {
        if self.session == 0 {
            return None;
        }
        if self.gate.is_none() {
            let key = (self.ip, self.export.clone());
            self.gate = Some(self.table.gate(&key));
        }
        self.gate.clone()
    }

    /// Checks the fence for one request of this connection: moves the fence first if this
    /// connection is newer (waiting for every request of older sets still applying), and
    /// refuses a `modifies` request if this connection has been superseded. The ticket must
    /// be held until the request's I/O has completed.
    pub fn begin(&mut self, modifies: bool) -> Result<Ticket, Fenced> {
        let Some(gate) = self.gate() else {
            return Ok(Ticket {
                gate: None,
                generation: 0,
                conn: self.id,
                moved: false,
            });
        };
        let mut moved = false;
        let mut st = gate.state.lock().unwrap_or_else(PoisonError::into_inner);
        let me = self.id;
        // Tickets of other connections from before the fence's last move. This connection's
        // own are not waited for: only this thread can take their completions, and they can
        // only be reads of a superseded set (its writes from before any earlier move were
        // waited for by that move), which cannot land old data.
        let others_older = |st: &GateState| {
            st.applying
                .range(..st.generation)
                .any(|(_, by_conn)| by_conn.keys().any(|&c| c != me))
        };
        let mut waited = Duration::ZERO;
        let end_wait = |st: &mut GateState, waited: Duration| {
            if !waited.is_zero() {
                st.stuck -= 1;
            }
        };
        loop {
            match st.fence.check(self.session, self.epoch) {
                Verdict::Fenced if modifies => {
                    end_wait(&mut st, waited);
                    return Err(Fenced { moved });
                }
                // The current set, whose requests apply once no older set's is still applying:
                // the connection that moved the fence waits for them, and so does every other
                // connection of its set, which finds the fence at its own set already.
                Verdict::Apply if others_older(&st) => {
                    st.movers += 1;
                    let (g, t) = gate
                        .drained
                        .wait_timeout(st, MOVE_WAIT_LOG)
                        .unwrap_or_else(PoisonError::into_inner);
                    st = g;
                    st.movers -= 1;
                    if t.timed_out() {
                        if waited.is_zero() {
                            st.stuck += 1;
                        }
                        waited += MOVE_WAIT_LOG;
                        log::warn!(
                            "fence {} {}: session {} epoch {} still waits for an older set's requests after {} s; new connections are refused Busy meanwhile",
                            self.ip, self.export, self.session, self.epoch, waited.as_secs()
                        );
                    }
                    // Check again: an even newer set may have moved it meanwhile.
                }
                Verdict::Apply | Verdict::Fenced => {
                    end_wait(&mut st, waited);
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
                    // A newer set: whoever closed before is not the fence's session any more.
                    st.closed = false;
                    // From now on an older set's modifying request is `Fenced`, and the new
                    // set's wait (above) for every request begun before the move.
                    st.generation += 1;
                }
            }
        }
    }

    /// The client closes its session on this connection (a normal unmap): the fence may go
    /// once nothing uses it. Only the fence's own session may close it: `Err` for a
    /// superseded one, whose close must not let the newer session's fence go. Call it under
    /// a ticket of [`ConnFence::begin`] (which moves the fence to this set first).
    pub fn close(&mut self) -> Result<(), Fenced> {
        let Some(gate) = self.gate() else {
            return Ok(());
        };
        let mut st = gate.state.lock().unwrap_or_else(PoisonError::into_inner);
        if st.fence.current() != Some((self.session, self.epoch)) {
            return Err(Fenced { moved: false });
        }
        st.closed = true;
        Ok(())
    }

    /// Runs `apply`, the execution of one request of this connection, under the fence (see
    /// [`ConnFence::begin`]), synchronously.
    #[cfg(test)]
    pub fn run<R>(&mut self, modifies: bool, apply: impl FnOnce() -> R) -> Outcome<R> {
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

    /// A Hello's check, then the connection's place, as the target does them.
    fn attach(
        t: &Arc<FenceTable>,
        ip: IpAddr,
        export: &str,
        session: u32,
        epoch: u32,
    ) -> Result<ConnFence, Refusal> {
        t.admit(ip, Arc::from(export), session, epoch, false)
    }

    #[test]
    fn attach_and_fence_per_address_and_export() {
        let t = FenceTable::new(16);
        let mut e1 = attach(&t, IP, "a", 7, 1).unwrap();
        let mut e2 = attach(&t, IP, "a", 7, 2).unwrap();
        assert_eq!(t.len(), 0, "a Hello makes no fence");
        assert_eq!(e1.run(true, || 1).applied, Some(1));
        assert_eq!(t.len(), 1, "the first request does");
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
            attach(&t, IP, "a", 7, 1).err(),
            Some(Refusal::Stale {
                current: Some((7, 2))
            })
        );
        // Another export, another address: other fences.
        let mut other = attach(&t, IP, "b", 7, 1).unwrap();
        assert_eq!(other.run(true, || 5).applied, Some(5));
        let v6 = "::ffff:192.0.2.1".parse::<IpAddr>().unwrap();
        assert!(
            attach(&t, v6, "a", 7, 1).is_err(),
            "IPv4-mapped is the same client"
        );
        let mut elsewhere = attach(&t, "192.0.2.9".parse().unwrap(), "a", 7, 1).unwrap();
        assert_eq!(elsewhere.run(true, || 6).applied, Some(6));
        // A higher session supersedes the lower ones for good.
        let mut s9 = attach(&t, IP, "a", 9, 1).unwrap();
        assert!(s9.run(true, || ()).moved);
        assert_eq!(e2.run(true, || 7).applied, None);
        assert!(attach(&t, IP, "a", 7, 3).is_err());
        assert!(
            attach(&t, IP, "a", 8, 0).is_err(),
            "below the fence's session"
        );
        assert!(attach(&t, IP, "a", 10, 0).is_ok());
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn session_zero_is_never_fenced_and_takes_no_entry() {
        let t = FenceTable::new(1);
        let mut s = attach(&t, IP, "a", 5, 5).unwrap();
        s.run(true, || ());
        let mut probe = attach(&t, IP, "a", 0, 0).unwrap();
        assert_eq!(
            probe.run(true, || 1),
            Outcome {
                applied: Some(1),
                moved: false
            }
        );
        assert_eq!(s.current(), Some((5, 5)));
        // Full: a new pair is refused, a known pair and probes are not.
        assert_eq!(attach(&t, IP, "b", 1, 1).err(), Some(Refusal::Full));
        assert!(attach(&t, IP, "b", 0, 0).is_ok());
        assert!(attach(&t, IP, "a", 5, 6).is_ok());
        assert_eq!(t.len(), 1);
    }

    /// Hellos with made-up sessions, from anyone the target let say Hello, change nothing: the
    /// table stays empty and the real session's fence stays where it was.
    #[test]
    fn hellos_make_no_fences() {
        let t = FenceTable::new(4);
        let mut real = attach(&t, IP, "a", 3, 1).unwrap();
        real.run(true, || ());
        for s in 1..10_000u32 {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(0xc000_0200 + (s % 200)));
            let c = attach(&t, ip, "a", s, s);
            drop(c);
        }
        assert_eq!(t.len(), 1);
        assert_eq!(real.current(), Some((3, 1)));
        assert_eq!(real.run(true, || 1).applied, Some(1));
    }

    /// A closed fence goes once nothing uses it; one nobody closed stays, and keeps every
    /// session it superseded out; a superseded session cannot close the newer one's fence.
    #[test]
    fn every_connection_of_the_new_set_waits_for_the_older_sets_requests() {
        // The reconnect's first request moves the fence on one queue; its other queues find
        // the fence at their own set already, and must wait all the same.
        let t = FenceTable::new(16);
        let mut old = attach(&t, IP, "a", 1, 1).unwrap();
        let old_write = old.begin(true).unwrap();
        let mut q1 = attach(&t, IP, "a", 1, 2).unwrap();
        let mut q2 = attach(&t, IP, "a", 1, 2).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let tx2 = tx.clone();
        thread::spawn(move || {
            let r = q1.begin(false).map(|t| t.moved);
            tx.send(("q1", r.is_ok())).unwrap();
        });
        thread::sleep(std::time::Duration::from_millis(200));
        thread::spawn(move || {
            let r = q2.begin(true);
            tx2.send(("q2", r.is_ok())).unwrap();
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(500))
                .is_err(),
            "no request of the new set may begin while the old write applies"
        );
        drop(old_write);
        let mut got = [
            rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap(),
            rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap(),
        ];
        got.sort();
        assert_eq!(got, [("q1", true), ("q2", true)]);
    }

    #[test]
    fn a_closed_fence_stays_while_a_connection_admitted_under_it_lives() {
        // The old mapping's set 3 is attached, its first write still on the way; its set 4
        // writes and closes. A new mapping that took session 1 again after the fence went
        // would be overwritten by that late write, then fenced by it.
        let t = FenceTable::new(16);
        let mut s3 = attach(&t, IP, "a", 1, 3).unwrap();
        s3.join();
        let mut s4 = attach(&t, IP, "a", 1, 4).unwrap();
        assert!(s4.run(true, || ()).applied.is_some());
        let tk = s4.begin(false).unwrap();
        assert!(s4.close().is_ok());
        drop(tk);
        drop(s4);
        assert_eq!(t.len(), 1, "set 3's connection still holds the fence");
        assert!(
            matches!(
                t.admit(IP, Arc::from("a"), 1, 1, true),
                Err(Refusal::Stale { .. })
            ),
            "a new mapping goes above the session"
        );
        assert_eq!(s3.run(true, || ()).applied, None, "set 3 is superseded");
        drop(s3);
        assert_eq!(t.len(), 0, "closed and unused: gone");
        // And admission alone, before any request or trust, holds an existing fence too.
        let mut a = attach(&t, IP, "a", 2, 1).unwrap();
        a.run(true, || ());
        let late = attach(&t, IP, "a", 2, 2).unwrap();
        let tk = a.begin(false).unwrap();
        assert!(a.close().is_ok());
        drop(tk);
        drop(a);
        assert_eq!(t.len(), 1, "a connection admitted under the fence holds it");
        drop(late);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn a_move_stuck_behind_an_older_set_refuses_new_hellos_busy() {
        let t = FenceTable::new(16);
        let mut old = attach(&t, IP, "a", 1, 1).unwrap();
        let stuck = old.begin(true).unwrap();
        let mut new = attach(&t, IP, "a", 2, 1).unwrap();
        let h = thread::spawn(move || new.begin(true).map(|t| t.moved));
        thread::sleep(MOVE_WAIT_LOG + std::time::Duration::from_millis(500));
        assert_eq!(
            t.admit(IP, Arc::from("a"), 2, 2, false).err(),
            Some(Refusal::Stuck)
        );
        drop(stuck);
        assert_eq!(h.join().unwrap(), Ok(true));
        assert!(
            t.admit(IP, Arc::from("a"), 2, 2, false).is_ok(),
            "no longer stuck"
        );
    }

    #[test]
    fn closed_fences_go_and_unclosed_ones_stay() {
        let t = FenceTable::new(4);
        let mut old = attach(&t, IP, "a", 1, 1).unwrap();
        old.run(true, || ());
        let mut new = attach(&t, IP, "a", 2, 1).unwrap();
        new.run(true, || ());
        // The superseded session's close is refused, and changes nothing.
        let held = old.begin(false).unwrap();
        assert!(old.close().is_err());
        drop(held);
        drop(old);
        assert_eq!(t.len(), 1);
        // The current session closes, but a request of it is still applying: the fence stays.
        let ticket = new.begin(false).unwrap();
        assert!(new.close().is_ok());
        drop(new);
        assert_eq!(t.len(), 1, "a ticket still uses it");
        assert!(attach(&t, IP, "a", 1, 9).is_err(), "still fenced meanwhile");
        drop(ticket);
        assert_eq!(t.len(), 0, "closed and unused: gone");
        // Without a close, the fence outlives its connections.
        let mut c = attach(&t, IP, "a", 5, 1).unwrap();
        c.run(true, || ());
        drop(c);
        assert_eq!(t.len(), 1);
        assert!(attach(&t, IP, "a", 4, 1).is_err());
        // A newer session's request reopens a closed fence: the close was the older one's.
        let mut a = attach(&t, IP, "a", 6, 1).unwrap();
        a.run(true, || ());
        assert!(a.close().is_ok());
        let mut b = attach(&t, IP, "a", 7, 1).unwrap();
        b.run(true, || ());
        drop(a);
        drop(b);
        assert_eq!(t.len(), 1, "session 7 did not close");
    }

    /// Old-epoch writers apply continuously; a newer epoch's first write moves the fence. Once
    /// that write has started applying, no old write may be applying or apply afterwards.
    #[test]
    fn no_old_write_applies_after_the_advance() {
        for round in 0..20u64 {
            let t = FenceTable::new(4);
            let new_started = Arc::new(AtomicBool::new(false));
            let old_applied = Arc::new(AtomicU64::new(0));
            let old_fenced = Arc::new(AtomicU64::new(0));
            let violations = Arc::new(AtomicU64::new(0));
            let old_ops = Arc::new(AtomicU64::new(0));
            let mut old = Vec::new();
            for _ in 0..3 {
                let mut c = attach(&t, IP, "a", 7, 1).unwrap();
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
            let mut newer = attach(&t, IP, "a", 7, 2).unwrap();
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

    /// A superseded connection's read still applying holds a newer session's move until it
    /// is done: a move waits for every request that began before it, reads included.
    #[test]
    fn a_move_waits_for_older_requests() {
        let t = FenceTable::new(16);
        let mut a = attach(&t, IP, "a", 1, 1).unwrap();
        let held = a.begin(false).expect("the first request moves the fence");
        let mut s2 = attach(&t, IP, "a", 2, 1).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            let r = s2.begin(true).map(|t| t.moved);
            tx.send(r).unwrap();
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(500))
                .is_err(),
            "session 2 must wait for the older request"
        );
        drop(held);
        assert_eq!(
            rx.recv_timeout(std::time::Duration::from_secs(5)),
            Ok(Ok(true))
        );
        assert_eq!(a.run(true, || ()).applied, None);
    }

    /// Two queues of the newer set race to move the fence: exactly one reports the move.
    #[test]
    fn one_mover_per_advance() {
        let t = FenceTable::new(4);
        attach(&t, IP, "a", 1, 1).unwrap().run(true, || ());
        let moves = Arc::new(AtomicU64::new(0));
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let mut c = attach(&t, IP, "a", 1, 2).unwrap();
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
