//! Who is attached to what: every connection that passed its Hello, with its own counters,
//! and the per-export and per-client counters they add to (docs/design.md, "The target").
//!
//! `rdmadisk-target clients` lists the connections (`control.rs`), the metrics endpoint
//! breaks the counters out per export, per client and per transport (`metrics.rs`), and a
//! reload ends the connections of an export it removes or of a client it no longer admits
//! ([`Registry::evict`]).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::SystemTime;

use rdmadisk_proto::wire::{Opcode, Status};

use crate::wake::Wake;

/// The transport of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Transport {
    Rdma,
    Tcp,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Rdma => "rdma",
            Transport::Tcp => "tcp",
        }
    }
}

macro_rules! op_counters {
    ($($(#[$m:meta])* $name:ident,)*) => {
        /// Request counters of one connection, one client or one export.
        #[derive(Default, Debug)]
        pub struct Counters {
            $($(#[$m])* pub $name: AtomicU64,)*
        }

        /// A [`Counters`]' values at one moment.
        #[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
        pub struct Snapshot {
            $(pub $name: u64,)*
        }

        impl Counters {
            pub fn snapshot(&self) -> Snapshot {
                Snapshot { $($name: self.$name.load(Ordering::Relaxed),)* }
            }
        }

        impl Snapshot {
            /// Every counter by name, in declaration order.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }

            pub fn plus(mut self, o: &Snapshot) -> Snapshot {
                $(self.$name += o.$name;)*
                self
            }
        }
    };
}

op_counters! {
    /// Requests received, whatever their kind or fate.
    requests,
    reads,
    writes,
    flushes,
    /// Discards and write-zeroes.
    discards,
    /// Bytes read from the export and sent.
    bytes_read,
    /// Bytes received and written to the export.
    bytes_written,
    /// Requests answered with another status than Ok (refused, failed, fenced).
    errors,
}

impl Counters {
    /// A request arrived.
    pub fn request(&self, op: Opcode) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        match op {
            Opcode::Read => &self.reads,
            Opcode::Write => &self.writes,
            Opcode::Flush => &self.flushes,
            Opcode::Discard | Opcode::WriteZeroes => &self.discards,
            Opcode::Nop | Opcode::Close => return,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    /// A request was answered `st`.
    pub fn answered(&self, st: Status) {
        if st != Status::Ok {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// One attached connection.
pub struct Client {
    pub id: u64,
    /// What it told the registry of itself.
    pub conn: Attach,
    pub since: SystemTime,
    pub counters: Arc<Counters>,
    /// Why the target ends it (a reload removed its export, or no longer admits it).
    evicted: Mutex<Option<String>>,
    evicting: AtomicBool,
    /// Signalled to wake the connection's thread for the eviction.
    kick: Option<Arc<Wake>>,
    /// Its export's per-client totals, which it joins as it goes.
    totals: Weak<ClientTotals>,
}

impl Client {
    /// Why the target ends this connection, once it does.
    pub fn evicted(&self) -> Option<String> {
        if !self.evicting.load(Ordering::Relaxed) {
            return None;
        }
        self.evicted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn evict(&self, why: &str) {
        *self.evicted.lock().unwrap_or_else(PoisonError::into_inner) = Some(why.to_string());
        self.evicting.store(true, Ordering::SeqCst);
        if let Some(k) = &self.kick {
            k.signal();
        }
    }

    pub fn ip(&self) -> Option<IpAddr> {
        self.conn.peer.map(|p| p.ip().to_canonical())
    }
}

/// An export's counters of clients gone, by client address and transport, so that a
/// client's counters do not drop when its connections come and go (a reconnect). Bounded:
/// past [`ClientTotals::CAP`] entries, the oldest address's are folded into one "other".
#[derive(Default)]
pub struct ClientTotals {
    by: Mutex<HashMap<(Option<IpAddr>, Transport), Snapshot>>,
}

impl ClientTotals {
    const CAP: usize = 1024;

    fn add(&self, ip: Option<IpAddr>, tr: Transport, s: &Snapshot) {
        let mut m = self.by.lock().unwrap_or_else(PoisonError::into_inner);
        if m.len() >= Self::CAP && !m.contains_key(&(ip, tr)) {
            // Past the cap, clients without an entry share the unknown one.
            let e = m.entry((None, tr)).or_default();
            *e = e.plus(s);
            return;
        }
        let e = m.entry((ip, tr)).or_default();
        *e = e.plus(s);
    }

    pub fn all(&self) -> Vec<((Option<IpAddr>, Transport), Snapshot)> {
        self.by
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect()
    }
}

/// Every attached connection, by id.
#[derive(Default)]
pub struct Registry {
    next: AtomicU64,
    live: Mutex<BTreeMap<u64, Arc<Client>>>,
}

/// What a connection tells the registry about itself.
pub struct Attach {
    pub export: String,
    pub peer: Option<SocketAddr>,
    pub transport: Transport,
    pub session: u32,
    pub epoch: u32,
    pub queue: u16,
    pub queues: u16,
    /// It may modify the export.
    pub read_write: bool,
}

/// A connection's place in the registry; dropping it takes it out, its counters joining its
/// export's per-client totals.
pub struct Registered {
    reg: Weak<Registry>,
    pub client: Arc<Client>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let c = &self.client;
        let reg = self.reg.upgrade();
        // Out of the live ones and into the totals under the registry's lock, so that a
        // scrape ([`Registry::consistent`]) never sees the client's counters twice or not at
        // all: a counter that went down would look like a restart.
        let _live = reg.as_ref().map(|r| {
            let mut m = r.live.lock().unwrap_or_else(PoisonError::into_inner);
            m.remove(&c.id);
            m
        });
        if let Some(t) = c.totals.upgrade() {
            t.add(c.ip(), c.conn.transport, &c.counters.snapshot());
        }
    }
}

impl Registry {
    pub fn new() -> Arc<Registry> {
        Arc::new(Registry::default())
    }

    /// Adds a connection. `counters`: its own (which its requests count in), `totals`: its
    /// export's per-client ones, `kick`: what wakes its thread.
    pub fn add(
        self: &Arc<Self>,
        a: Attach,
        counters: Arc<Counters>,
        totals: &Arc<ClientTotals>,
        kick: Option<Arc<Wake>>,
    ) -> Registered {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let client = Arc::new(Client {
            id,
            conn: a,
            since: SystemTime::now(),
            counters,
            evicted: Mutex::new(None),
            evicting: AtomicBool::new(false),
            kick,
            totals: Arc::downgrade(totals),
        });
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, client.clone());
        Registered {
            reg: Arc::downgrade(self),
            client,
        }
    }

    /// The connections now, oldest first.
    pub fn clients(&self) -> Vec<Arc<Client>> {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// The connections now and, for each export of `exports`, its gone clients' totals, at
    /// one moment (see `Registered`'s drop).
    #[allow(clippy::type_complexity)]
    pub fn consistent(
        &self,
        exports: &[Arc<crate::export::Export>],
    ) -> (
        Vec<Arc<Client>>,
        Vec<Vec<((Option<IpAddr>, Transport), Snapshot)>>,
    ) {
        let m = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        let totals = exports.iter().map(|e| e.client_totals.all()).collect();
        (m.values().cloned().collect(), totals)
    }

    /// Ends every connection `which` picks (waking its thread: it finishes what it has in
    /// flight, then closes); the ones it ends.
    pub fn evict(&self, which: impl Fn(&Client) -> bool, why: &str) -> Vec<Arc<Client>> {
        let out: Vec<_> = self.clients().into_iter().filter(|c| which(c)).collect();
        for c in &out {
            c.evict(why);
        }
        out
    }
}

/// The clients as one JSON array (`rdmadisk-target clients --json`).
pub fn to_json(clients: &[Arc<Client>], now: SystemTime) -> String {
    let mut s = String::from("[");
    for (i, c) in clients.iter().enumerate() {
        let since = c
            .since
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let age = now.duration_since(c.since).map_or(0, |d| d.as_secs());
        let _ = write!(
            s,
            "{}{{\"id\":{},\"export\":\"{}\",\"peer\":{},\"transport\":\"{}\",\"session\":{},\"epoch\":{},\"queue\":{},\"queues\":{},\"mode\":\"{}\",\"since\":{since},\"seconds\":{age},\"counters\":{{",
            if i > 0 { "," } else { "" },
            c.id,
            c.conn.export,
            c.conn.peer.map_or("null".to_string(), |p| format!("\"{p}\"")),
            c.conn.transport.name(),
            c.conn.session,
            c.conn.epoch,
            c.conn.queue,
            c.conn.queues,
            if c.conn.read_write { "read-write" } else { "read-only" },
        );
        for (j, (k, v)) in c.counters.snapshot().fields().into_iter().enumerate() {
            let _ = write!(s, "{}\"{k}\":{v}", if j > 0 { "," } else { "" });
        }
        s += "}}";
    }
    s += "]\n";
    s
}

/// The clients as a table, one line each.
pub fn to_table(clients: &[Arc<Client>], now: SystemTime) -> String {
    let mut s = String::from(
        "EXPORT           PEER                    TRANSPORT  SESSION     QUEUE  MODE        SECONDS  REQUESTS  BYTES_READ  BYTES_WRITTEN  ERRORS\n",
    );
    for c in clients {
        let n = c.counters.snapshot();
        let _ = writeln!(
            s,
            "{:<16} {:<23} {:<10} {:<11} {:<6} {:<11} {:>7}  {:>8}  {:>10}  {:>13}  {:>6}",
            c.conn.export,
            c.conn.peer.map_or("?".to_string(), |p| p.to_string()),
            c.conn.transport.name(),
            c.conn.session,
            format!("{}/{}", c.conn.queue, c.conn.queues),
            if c.conn.read_write {
                "read-write"
            } else {
                "read-only"
            },
            now.duration_since(c.since).map_or(0, |d| d.as_secs()),
            n.requests,
            n.bytes_read,
            n.bytes_written,
            n.errors
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attach(reg: &Arc<Registry>, totals: &Arc<ClientTotals>, export: &str) -> Registered {
        reg.add(
            Attach {
                export: export.to_string(),
                peer: Some("192.0.2.1:1000".parse().unwrap()),
                transport: Transport::Tcp,
                session: 7,
                epoch: 1,
                queue: 0,
                queues: 2,
                read_write: true,
            },
            Arc::new(Counters::default()),
            totals,
            None,
        )
    }

    #[test]
    fn a_client_s_counters_outlive_its_connection() {
        let reg = Registry::new();
        let totals = Arc::new(ClientTotals::default());
        let r = attach(&reg, &totals, "a");
        r.client.counters.request(Opcode::Write);
        r.client.counters.answered(Status::IoError);
        assert_eq!(reg.clients().len(), 1);
        drop(r);
        assert!(reg.clients().is_empty());
        let all = totals.all();
        assert_eq!(all.len(), 1);
        let (k, s) = all[0];
        assert_eq!(k, (Some("192.0.2.1".parse().unwrap()), Transport::Tcp));
        assert_eq!((s.requests, s.writes, s.errors, s.reads), (1, 1, 1, 0));
    }

    #[test]
    fn eviction_picks_and_says_why() {
        let reg = Registry::new();
        let totals = Arc::new(ClientTotals::default());
        let a = attach(&reg, &totals, "a");
        let b = attach(&reg, &totals, "b");
        let gone = reg.evict(|c| c.conn.export == "b", "export b removed");
        assert_eq!(gone.len(), 1);
        assert_eq!(a.client.evicted(), None);
        assert_eq!(b.client.evicted().as_deref(), Some("export b removed"));
    }

    #[test]
    fn json_lists_every_field() {
        let reg = Registry::new();
        let totals = Arc::new(ClientTotals::default());
        let a = attach(&reg, &totals, "a");
        a.client.counters.request(Opcode::Read);
        let j = to_json(&reg.clients(), SystemTime::now());
        for needle in [
            "\"export\":\"a\"",
            "\"peer\":\"192.0.2.1:1000\"",
            "\"transport\":\"tcp\"",
            "\"session\":7",
            "\"mode\":\"read-write\"",
            "\"reads\":1",
        ] {
            assert!(j.contains(needle), "{needle} in {j}");
        }
        assert!(j.starts_with("[{") && j.ends_with("}]\n"));
        assert_eq!(to_json(&[], SystemTime::now()), "[]\n");
        assert!(to_table(&reg.clients(), SystemTime::now()).contains("192.0.2.1:1000"));
    }
}
