//! A model of one disk served by several gateways (targets in front of one RBD
//! image), checking the cross-gateway invariant of docs/design.md, "Several
//! gateways": per block, the writes that land at the store never go backwards:
//! a write sent through an abandoned path never lands after its retry through
//! the new one, nor after any later write.
//!
//! Test-only: the model uses `std` and is not part of the kernel's build. Each
//! gateway's fence is the real [`Fence`].
//!
//! What is modelled:
//! - **Client.** One mapping at a time, one connection set at a time. Each new
//!   set takes the next epoch of the disk's one counter, whichever gateway it
//!   opens on; a set has [`QUEUES`] connections, each sending its own Hello, and
//!   is usable once one of them is admitted. Then every write not yet completed
//!   is reissued on it (same id). A block gets a new write only once the last
//!   one completed. A remap is a new mapping (after a crash: the old one's
//!   writes are never completed nor reissued) with a session id above the
//!   last mapping's, which its first Hellos must take above the floor the
//!   gateway they reach names. (A mapping that took the session of an older
//!   one, or a lower one, is not covered: at one target whose fence has not
//!   yet seen the older mapping's requests, their sets would not be ordered.
//!   That is the single-target fence's assumption, not the gateways'.)
//! - **Gateway.** Its own fence, lost on restart, with the target's tickets
//!   (a write is submitted only when none of this gateway's writes submitted
//!   under another fence position is still in flight). Messages wait in its
//!   inbox, taken in any order, for as long as it is frozen or slow. Every
//!   read-write Hello it admits takes the image's lock (if it does not hold
//!   it), first reconnecting as a fresh Ceph instance if its own was
//!   blocklisted. A connection belongs to the instance it was admitted under.
//!   The gateway submits a write only if the fence allows, it believes it holds
//!   the lock, and the write's connection belongs to its current instance; the
//!   store then applies it unless that instance is blocklisted by then.
//! - **Ceph.** One lock owner (a client instance). Breaking the lock
//!   blocklists the owner; the store refuses every op of a blocklisted
//!   instance whenever the op arrives. Submitted ops land in any order, at any
//!   time, also while their gateway is frozen or after it died. A gateway
//!   notices a lost lock only when it gets to run.

extern crate std;

use super::fence::{Fence, Stale, Verdict};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestError, TestRunner};
use std::collections::BTreeSet;
use std::format;
use std::string::String;
use std::vec::Vec;

/// Blocks of the disk.
const BLOCKS: usize = 2;
/// Connections (so Hellos) per connection set.
const QUEUES: usize = 2;

/// Which of the rules the gateways and Ceph follow; [`Rules::ALL`] is the design.
#[derive(Debug, Clone, Copy)]
struct Rules {
    /// Breaking the lock blocklists the old owner's instance.
    blocklist: bool,
    /// A gateway that reconnected as a fresh instance applies nothing that
    /// came on a connection admitted under its old one: the old instance's
    /// connections go with it. Without this, a write queued at the gateway
    /// before it lost the lock is sent through the fresh instance.
    old_connections_refused: bool,
}

impl Rules {
    const ALL: Rules = Rules {
        blocklist: true,
        old_connections_refused: true,
    };
}

#[derive(Debug, Clone, Copy)]
enum Msg {
    Hello {
        s: u32,
        e: u32,
        new: bool,
        conn: u32,
    },
    Write {
        s: u32,
        e: u32,
        block: usize,
        id: u64,
        conn: u32,
    },
}

struct Gateway {
    fence: Fence,
    /// Bumped by a restart; messages of connections to an older incarnation
    /// are lost.
    incarnation: u32,
    /// The Ceph client instance it uses now.
    instance: u32,
    believes_lock: bool,
    frozen: bool,
    inbox: Vec<Msg>,
    /// Admitted connections and the instance each was admitted under.
    conns: Vec<(u32, u32)>,
}

/// A write submitted to the store, not yet landed.
struct Op {
    gw: usize,
    incarnation: u32,
    instance: u32,
    /// The fence position it was submitted under (its ticket).
    gen: (u32, u32),
    set: (u32, u32),
    conn: u32,
    block: usize,
    id: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Set {
    gw: usize,
    incarnation: u32,
    s: u32,
    e: u32,
    /// Its connections are `first_conn..first_conn + QUEUES`.
    first_conn: u32,
    /// Connections admitted, the first `active` of them.
    conns: [u32; QUEUES],
    active: usize,
}

impl Set {
    /// The connection a request goes on.
    fn conn(&self, id: u64) -> u32 {
        self.conns[id as usize % self.active]
    }
}

struct Client {
    session: u32,
    next_epoch: u32,
    /// A Hello of this mapping has been admitted: later Hellos are not `new`.
    attached: bool,
    /// Told Stale after attaching: superseded, only a remap goes on.
    failed: bool,
    set: Option<Set>,
    /// Per block, the write issued and not yet completed.
    outstanding: [Option<u64>; BLOCKS],
}

/// One step of a history. Indices are taken modulo what exists.
#[derive(Debug, Clone, Copy)]
enum Action {
    /// The client issues a write to this block on its set.
    Write(usize),
    /// The client abandons its set and opens one on this gateway.
    Failover(usize),
    /// A new mapping opens on this gateway, with a session id this much above
    /// the last mapping's.
    Remap(usize, u32),
    /// The gateway takes this message from its inbox.
    Process(usize, usize),
    /// The gateway of the client's set takes this message from its inbox (so
    /// that histories make progress as well as mess).
    Serve(usize),
    /// This submitted op reaches the store.
    Land(usize),
    Freeze(usize),
    Thaw(usize),
    Restart(usize),
    /// The gateway learns whether it still holds the lock.
    Notice(usize),
}

struct World {
    rules: Rules,
    gws: Vec<Gateway>,
    ops: Vec<Op>,
    owner: Option<u32>,
    blocklisted: BTreeSet<u32>,
    next_instance: u32,
    next_id: u64,
    next_conn: u32,
    client: Client,
    /// Per block, the newest write id landed.
    landed: [Option<u64>; BLOCKS],
    /// Writes landed, for the checks that the histories do something.
    landings: usize,
}

impl World {
    fn new(rules: Rules, gateways: usize) -> World {
        let gws = (0..gateways)
            .map(|i| Gateway {
                fence: Fence::new(),
                incarnation: 0,
                instance: i as u32,
                believes_lock: false,
                frozen: false,
                inbox: Vec::new(),
                conns: Vec::new(),
            })
            .collect();
        World {
            rules,
            gws,
            ops: Vec::new(),
            owner: None,
            blocklisted: BTreeSet::new(),
            next_instance: gateways as u32,
            next_id: 0,
            next_conn: 0,
            client: Client {
                session: 0,
                next_epoch: 1,
                attached: false,
                failed: true,
                set: None,
                outstanding: [None; BLOCKS],
            },
            landed: [None; BLOCKS],
            landings: 0,
        }
    }

    fn fresh_instance(&mut self) -> u32 {
        self.next_instance += 1;
        self.next_instance
    }

    /// Sends on a connection to `gw` made in `incarnation`: lost if it restarted since.
    fn send(&mut self, gw: usize, incarnation: u32, m: Msg) {
        let g = &mut self.gws[gw];
        if g.incarnation == incarnation {
            g.inbox.push(m);
        }
    }

    fn open_set(&mut self, gw: usize) {
        let c = &mut self.client;
        let set = Set {
            gw,
            incarnation: self.gws[gw].incarnation,
            s: c.session,
            e: c.next_epoch,
            first_conn: self.next_conn + 1,
            conns: [0; QUEUES],
            active: 0,
        };
        c.next_epoch += 1;
        c.set = Some(set);
        let new = !c.attached;
        for _ in 0..QUEUES {
            self.next_conn += 1;
            let conn = self.next_conn;
            self.send(
                gw,
                set.incarnation,
                Msg::Hello {
                    s: set.s,
                    e: set.e,
                    new,
                    conn,
                },
            );
        }
    }

    /// The client's set, if `conn` is one of its connections: what comes
    /// back on another is lost (the client closed it).
    fn client_set(&self, conn: u32) -> Option<Set> {
        self.client
            .set
            .filter(|c| (c.first_conn..c.first_conn + QUEUES as u32).contains(&conn))
    }

    /// Takes the image's lock for `gw`: reconnects first if its instance was
    /// blocklisted, breaks the owner's lock (blocklisting it).
    fn take_lock(&mut self, gw: usize) {
        if self.blocklisted.contains(&self.gws[gw].instance) {
            self.gws[gw].instance = self.fresh_instance();
        }
        let me = self.gws[gw].instance;
        if self.owner != Some(me) {
            if let Some(old) = self.owner.filter(|_| self.rules.blocklist) {
                self.blocklisted.insert(old);
            }
            self.owner = Some(me);
        }
        self.gws[gw].believes_lock = true;
    }

    fn step(&mut self, a: Action) -> Result<(), String> {
        let n = self.gws.len();
        match a {
            Action::Write(b) => {
                let b = b % BLOCKS;
                let c = &mut self.client;
                if let Some(set) = c.set.filter(|s| s.active > 0 && !c.failed) {
                    if c.outstanding[b].is_none() {
                        let id = self.next_id;
                        self.next_id += 1;
                        c.outstanding[b] = Some(id);
                        let m = Msg::Write {
                            s: set.s,
                            e: set.e,
                            block: b,
                            id,
                            conn: set.conn(id),
                        };
                        self.send(set.gw, set.incarnation, m);
                    }
                }
            }
            Action::Failover(g) => {
                if !self.client.failed {
                    self.open_set(g % n);
                }
            }
            Action::Remap(g, s) => {
                self.client = Client {
                    session: self.client.session + s.max(1),
                    next_epoch: 1,
                    attached: false,
                    failed: false,
                    set: None,
                    outstanding: [None; BLOCKS],
                };
                self.open_set(g % n);
            }
            Action::Process(g, k) => self.process(g % n, k)?,
            Action::Serve(k) => {
                if let Some(set) = self.client.set {
                    self.process(set.gw, k)?;
                }
            }
            Action::Land(k) => {
                if !self.ops.is_empty() {
                    let op = self.ops.remove(k % self.ops.len());
                    self.land(op)?;
                }
            }
            Action::Freeze(g) => self.gws[g % n].frozen = true,
            Action::Thaw(g) => self.gws[g % n].frozen = false,
            Action::Restart(g) => {
                let instance = self.fresh_instance();
                let gw = &mut self.gws[g % n];
                *gw = Gateway {
                    fence: Fence::new(),
                    incarnation: gw.incarnation + 1,
                    instance,
                    believes_lock: false,
                    frozen: false,
                    inbox: Vec::new(),
                    conns: Vec::new(),
                };
            }
            Action::Notice(g) => {
                let gw = &mut self.gws[g % n];
                if !gw.frozen {
                    gw.believes_lock =
                        self.owner == Some(gw.instance) && !self.blocklisted.contains(&gw.instance);
                }
            }
        }
        Ok(())
    }

    fn process(&mut self, g: usize, k: usize) -> Result<(), String> {
        let gw = &self.gws[g];
        if gw.frozen || gw.inbox.is_empty() {
            return Ok(());
        }
        let k = k % gw.inbox.len();
        let inc = gw.incarnation;
        match gw.inbox[k] {
            Msg::Hello { s, e, new, conn } => {
                self.gws[g].inbox.remove(k);
                match self.gws[g].fence.admit_hello(s, e, new) {
                    Err(Stale { floor }) => {
                        if self.client_set(conn).is_some_and(|c| c.active == 0) {
                            if new {
                                // A new mapping goes above the floor, once.
                                self.client.session = floor + 1;
                                self.open_set(g);
                            } else {
                                self.client.failed = true;
                                self.client.set = None;
                            }
                        }
                    }
                    Ok(()) => {
                        self.take_lock(g);
                        let gw = &mut self.gws[g];
                        gw.conns.push((conn, gw.instance));
                        if let Some(mut set) = self.client_set(conn) {
                            set.conns[set.active] = conn;
                            set.active += 1;
                            self.client.set = Some(set);
                            self.client.attached = true;
                            if set.active == 1 {
                                // The set is up: reissue what has not completed.
                                for b in 0..BLOCKS {
                                    if let Some(id) = self.client.outstanding[b] {
                                        let conn = set.conn(id);
                                        let m = Msg::Write {
                                            s,
                                            e,
                                            block: b,
                                            id,
                                            conn,
                                        };
                                        self.send(g, inc, m);
                                    }
                                }
                            }
                        }
                    }
                }
            }
            Msg::Write {
                s,
                e,
                block,
                id,
                conn,
            } => {
                let gw = &mut self.gws[g];
                let old_conn = !gw.conns.contains(&(conn, gw.instance));
                if gw.fence.check(s, e) == Verdict::Fenced
                    || !gw.believes_lock
                    || (old_conn && self.rules.old_connections_refused)
                {
                    // Refused: the client reissues it on its next set.
                    gw.inbox.remove(k);
                    return Ok(());
                }
                gw.fence.advance(s, e);
                let gen = gw.fence.current().expect("moved by the write");
                // The ticket: wait for every write submitted under an older fence.
                if self
                    .ops
                    .iter()
                    .any(|o| o.gw == g && o.incarnation == inc && o.gen != gen)
                {
                    return Ok(());
                }
                gw.inbox.remove(k);
                self.ops.push(Op {
                    gw: g,
                    incarnation: inc,
                    instance: gw.instance,
                    gen,
                    set: (s, e),
                    conn,
                    block,
                    id,
                });
            }
        }
        Ok(())
    }

    fn land(&mut self, op: Op) -> Result<(), String> {
        if self.rules.blocklist && self.blocklisted.contains(&op.instance) {
            return Ok(());
        }
        if let Some(last) = self.landed[op.block].filter(|&l| l > op.id) {
            return Err(format!(
                "block {}: write {} (gateway {}, set {:?}) landed after write {last}",
                op.block, op.id, op.gw, op.set
            ));
        }
        self.landed[op.block] = Some(op.id);
        self.landings += 1;
        if self.client_set(op.conn).is_some() && self.client.outstanding[op.block] == Some(op.id) {
            self.client.outstanding[op.block] = None;
        }
        Ok(())
    }
}

/// Runs `actions` on `gateways` gateways; the first violation, if any.
fn run(rules: Rules, gateways: usize, actions: &[Action]) -> Result<World, String> {
    let mut w = World::new(rules, gateways);
    for (i, &a) in actions.iter().enumerate() {
        w.step(a).map_err(|e| format!("step {i} ({a:?}): {e}"))?;
    }
    Ok(w)
}

fn action() -> impl Strategy<Value = Action> {
    let gw = 0usize..4;
    prop_oneof![
        8 => (0..BLOCKS).prop_map(Action::Write),
        2 => gw.clone().prop_map(Action::Failover),
        1 => (gw.clone(), 1u32..4).prop_map(|(g, s)| Action::Remap(g, s)),
        6 => (gw.clone(), 0usize..8).prop_map(|(g, k)| Action::Process(g, k)),
        10 => (0usize..8).prop_map(Action::Serve),
        8 => (0usize..8).prop_map(Action::Land),
        1 => gw.clone().prop_map(Action::Freeze),
        3 => gw.clone().prop_map(Action::Thaw),
        1 => gw.clone().prop_map(Action::Restart),
        1 => gw.prop_map(Action::Notice),
    ]
}

/// 2 to 4 gateways and a history that starts with a mapping.
fn history() -> impl Strategy<Value = (usize, Vec<Action>)> {
    (
        2usize..=4,
        0usize..4,
        proptest::collection::vec(action(), 1..300),
    )
        .prop_map(|(n, g, mut v)| {
            v.insert(0, Action::Remap(g, 1));
            (n, v)
        })
}

const CASES: u32 = 3000;

proptest! {
    #![proptest_config(ProptestConfig {
        cases: CASES,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// The invariant, with every rule: per block, landed write ids never go
    /// backwards, across failovers between gateways, remaps, frozen, slow and
    /// restarted gateways, and late Hellos and writes.
    #[test]
    fn no_write_lands_behind_a_newer_one((n, actions) in history()) {
        if let Err(e) = run(Rules::ALL, n, &actions) {
            prop_assert!(false, "{}", e);
        }
    }
}

/// Searches histories under `rules` with a fixed seed; the violation found, if any.
fn search(rules: Rules) -> Option<String> {
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: CASES,
            failure_persistence: None,
            ..Config::default()
        },
        proptest::test_runner::TestRng::deterministic_rng(
            proptest::test_runner::RngAlgorithm::ChaCha,
        ),
    );
    match runner.run(&history(), |(n, actions)| {
        run(rules, n, &actions)
            .map(|_| ())
            .map_err(TestCaseError::fail)
    }) {
        Ok(()) => None,
        Err(TestError::Fail(why, (n, actions))) => {
            Some(format!("{n} gateways, {actions:?}: {why}"))
        }
        Err(e) => panic!("{e}"),
    }
}

/// The histories reach the interesting states: writes land through more than
/// one gateway, takeovers happen, so the passing property is not vacuous.
#[test]
fn histories_do_land_writes() {
    let mut runner = TestRunner::deterministic();
    let mut landings = 0;
    let mut takeovers = 0;
    for _ in 0..200 {
        let (n, actions) = history().new_tree(&mut runner).unwrap().current();
        let w = run(Rules::ALL, n, &actions).unwrap();
        landings += w.landings;
        takeovers += w.blocklisted.len();
    }
    assert!(landings > 600 && takeovers > 200, "{landings} {takeovers}");
}

/// Without the blocklist the search finds a write landing behind a newer one:
/// the test has teeth.
#[test]
fn without_the_blocklist_a_write_lands_late() {
    let found = search(Rules {
        blocklist: false,
        ..Rules::ALL
    });
    assert!(found.is_some(), "no counterexample without the blocklist");
}

use Action::*;

/// The client maps on gateway 0 and writes block 0 (write 0), which gateway 0
/// receives and sits on (frozen). The client fails over to gateway 1: the
/// takeover breaks gateway 0's lock, write 0 is reissued and lands, and write 1
/// follows it. Gateway 0 thaws before it has noticed the lost lock.
const TAKEN_OVER_WHILE_FROZEN: &[Action] = &[
    Remap(0, 1),
    Process(0, 0),
    Process(0, 0),
    Write(0),
    Freeze(0),
    Failover(1),
    Process(1, 0),
    Process(1, 0),
    Process(1, 0),
    Land(0),
    Write(0),
    Process(1, 0),
    Land(0),
    Thaw(0),
];

/// After [`TAKEN_OVER_WHILE_FROZEN`], the thawed gateway 0 sends write 0 on.
fn stale_owner() -> Vec<Action> {
    [TAKEN_OVER_WHILE_FROZEN, &[Process(0, 0), Land(0)]].concat()
}

/// `actions` keep every write in order with all the rules (write 0, reissued,
/// lands once, then write 1), and without those `off` leaves out write 0 lands
/// after write 1.
fn needs(off: Rules, actions: &[Action], why: &str) {
    let w = run(Rules::ALL, 2, actions).unwrap();
    assert_eq!(w.landed[0], Some(1));
    assert_eq!(w.landings, 2, "the old write 0 was refused");
    let e = run(off, 2, actions).err().expect(why);
    assert!(e.contains("write 0") && e.contains("after write 1"), "{e}");
}

#[test]
fn a_thawed_old_owner_is_refused_by_the_blocklist() {
    needs(
        Rules {
            blocklist: false,
            ..Rules::ALL
        },
        &stale_owner(),
        "without the blocklist write 0 lands after write 1",
    );
}

/// As [`stale_owner`], but the client then comes back to gateway 0 with a
/// newer set. Gateway 0 was blocklisted, so it reconnects as a fresh instance
/// and takes the lock back; write 0 of the old set still waits in its inbox,
/// and gateway 0's fence has never seen the newer sets of gateway 1. The fresh
/// instance is not blocklisted: only the rule that a fresh instance serves no
/// connection of the old one keeps write 0 out.
fn back_to_the_old_gateway() -> Vec<Action> {
    [
        TAKEN_OVER_WHILE_FROZEN,
        &[
            Failover(0),
            // Gateway 0's inbox: write 0, then the new set's two Hellos.
            Process(0, 1),
            Process(0, 0),
            Land(0),
        ],
    ]
    .concat()
}

#[test]
fn a_fresh_instance_serves_no_old_connection() {
    needs(
        Rules {
            old_connections_refused: false,
            ..Rules::ALL
        },
        &back_to_the_old_gateway(),
        "write 0 through the fresh instance lands after write 1",
    );
}

/// The client maps on gateway 0, whose first Hello is admitted (the set's
/// second connection's Hello waits), and writes block 0 there. It fails over
/// to gateway 1 (write 0 reissued and landed, write 1 landed). Then gateway 0
/// takes the old set's second Hello: it takes the lock back (blocklisting
/// gateway 1, which the client then leaves), but write 0 came on the first
/// connection, admitted under the old instance, and is refused.
const LATE_HELLO: &[Action] = &[
    Remap(0, 1),
    Process(0, 0),
    Write(0),
    Failover(1),
    Process(1, 0),
    Process(1, 0),
    Process(1, 0),
    Land(0),
    Write(0),
    Process(1, 0),
    Land(0),
    // Gateway 0's inbox: the old set's second Hello, then write 0.
    Process(0, 0),
    Process(0, 0),
    Land(0),
];

#[test]
fn a_late_hello_of_an_abandoned_set_lets_no_old_write_in() {
    needs(
        Rules {
            old_connections_refused: false,
            ..Rules::ALL
        },
        LATE_HELLO,
        "write 0 through the fresh instance lands after write 1",
    );
}

/// The search finds that rule missing by itself too.
#[test]
fn without_the_fresh_instance_rule_a_write_lands_late() {
    let found = search(Rules {
        old_connections_refused: false,
        ..Rules::ALL
    });
    assert!(
        found.is_some(),
        "no counterexample with old connections served"
    );
}
