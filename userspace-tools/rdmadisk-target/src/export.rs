//! Exports: a name, a [`Backing`], who may attach, and what has gone wrong with it.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use rdmadisk_net::allow::AllowList;
use rdmadisk_proto::auth::Secret;
use rdmadisk_proto::wire::Identity;

use crate::backing::{Backing, Geometry};
use crate::registry::{ClientTotals, Counters};
use crate::wake::{Waiters, Wake};

/// One export.
pub struct Export {
    pub name: String,
    pub read_only: bool,
    pub backing: Box<dyn Backing>,
    pub geometry: Geometry,
    /// Clients allowed on this export (besides the target-wide list); `None`: any the
    /// target admits. A reload may change it ([`Export::set_allow`]).
    allow: RwLock<Option<AllowList>>,
    /// A client must prove it knows this secret before anything is served (unless its host
    /// has a key of its own, which it proves instead).
    pub secret: Option<Secret>,
    /// Without a key, a client may attach from any port, not only a reserved one (NFS's
    /// `insecure`): any process of an allowed host may then read, write and fence the export.
    pub insecure: bool,
    /// Read-write attachment is exclusive to one client host at a time.
    pub exclusive: bool,
    /// Its UUID and serial (identity.rs), sent to clients that ask.
    pub identity: Identity,
    /// The host holding the export read-write, and its connections (exclusive exports).
    owner: Mutex<Option<(IpAddr, usize)>>,
    /// The first writeback error (an errno), sticky: once a write or flush has failed, every
    /// later Flush and FUA write fails too, so no client is told its data is durable after
    /// the store lost some.
    error: AtomicI32,
    /// The flushes and FUA writes in flight, and the connections whose successful ones wait
    /// for them ([`SyncToken`]).
    syncs: Mutex<Syncs>,
    settle_waiters: Waiters,
    /// Its requests, all connections together; and its clients', by address.
    pub counters: Arc<Counters>,
    pub client_totals: Arc<ClientTotals>,
    /// A reload removed it: its connections end.
    retired: AtomicBool,
}

/// Flushes and FUA writes begun on an export and not yet ended, by sequence number.
///
/// Every connection shares the export's one open file, and the kernel reports a writeback
/// error (errseq) to one fdatasync, or one RWF_DSYNC write, per open file description: the
/// first to check after the error. Another that checks a moment later succeeds, though the
/// data it should make durable may be lost. So one that succeeded answers only once every
/// one begun before its completion was seen has ended, having recorded its error: the one
/// that took the error began before it checked, and so before that completion.
#[derive(Default)]
struct Syncs {
    next: u64,
    open: BTreeSet<u64>,
}

/// A flush or FUA write in flight on an export, begun before its operation is submitted.
/// Its end records the error it saw, if any, then lets the successful ones waiting for it
/// answer. One dropped without an end (its result will never be known) counts as failed.
pub struct SyncToken {
    export: Arc<Export>,
    seq: u64,
    ended: bool,
}

impl SyncToken {
    /// The operation is over: `errno` is what it lost (see `conn::sticky`), `None` if
    /// nothing.
    pub fn end(mut self, errno: Option<i32>) {
        self.finish(errno);
    }

    fn finish(&mut self, errno: Option<i32>) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        if let Some(e) = errno {
            self.export.record_error(e);
        }
        self.export
            .syncs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .open
            .remove(&self.seq);
        self.export.settle_waiters.wake_all();
    }
}

impl Drop for SyncToken {
    fn drop(&mut self) {
        self.finish(Some(libc::EIO));
    }
}

/// A read-write attachment of an exclusive export; dropping it lets the export go.
pub struct Hold {
    pub export: Arc<Export>,
    host: Option<IpAddr>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        let Some(host) = self.host else {
            return;
        };
        let mut o = self
            .export
            .owner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((h, n)) = o.as_mut() {
            if *h == host {
                *n -= 1;
                if *n == 0 {
                    *o = None;
                }
            }
        }
    }
}

impl Export {
    pub fn new(
        name: &str,
        backing: Box<dyn Backing>,
        read_only: bool,
        allow: Option<AllowList>,
        secret: Option<Secret>,
        insecure: bool,
        exclusive: bool,
    ) -> Export {
        let geometry = backing.geometry();
        Export {
            name: name.to_string(),
            read_only,
            backing,
            geometry,
            allow: RwLock::new(allow),
            secret,
            insecure,
            exclusive,
            identity: Identity {
                uuid: crate::identity::derived(&format!("name:{name}")),
                serial: crate::identity::derived(&format!("name:{name}")).default_serial(),
            },
            owner: Mutex::new(None),
            error: AtomicI32::new(0),
            syncs: Mutex::new(Syncs::default()),
            settle_waiters: Waiters::default(),
            counters: Arc::default(),
            client_totals: Arc::default(),
            retired: AtomicBool::new(false),
        }
    }

    /// A reload removed it: no new connection finds it, and those it has end.
    pub fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
    }

    pub fn retired(&self) -> bool {
        self.retired.load(Ordering::Relaxed)
    }

    /// Replaces its allow-list (a reload).
    pub fn set_allow(&self, allow: Option<AllowList>) {
        *self.allow.write().unwrap_or_else(PoisonError::into_inner) = allow;
    }

    /// The export with `id` as its identity, in place of one derived from its name.
    pub fn with_identity(mut self, id: Identity) -> Export {
        self.identity = id;
        self
    }

    /// The name, as the fence table keys it.
    pub fn name_arc(&self) -> Arc<str> {
        Arc::from(self.name.as_str())
    }

    /// Capacity in 512-byte sectors, now (it may change while served: [`Backing::capacity`]).
    pub fn capacity_sectors(&self) -> u64 {
        self.backing.capacity() >> rdmadisk_proto::wire::SECTOR_SHIFT
    }

    /// Whether this export lets `ip` in (its own list; the target's is checked apart).
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.allow
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_none_or(|a| a.allows(ip))
    }

    /// Takes the export for a read-write connection from `host` (exclusive exports admit one
    /// host at a time; its sessions may come and go); `None` if another host holds it.
    /// Read-only connections, and probes (`writes` false), take nothing.
    pub fn hold(self: &Arc<Self>, host: IpAddr, writes: bool) -> Option<Hold> {
        if !self.exclusive || !writes || self.read_only {
            return Some(Hold {
                export: self.clone(),
                host: None,
            });
        }
        let host = host.to_canonical();
        let mut o = self.owner.lock().unwrap_or_else(PoisonError::into_inner);
        match o.as_mut() {
            None => *o = Some((host, 1)),
            Some((h, n)) if *h == host => *n += 1,
            Some(_) => return None,
        }
        Some(Hold {
            export: self.clone(),
            host: Some(host),
        })
    }

    /// Whether [`Export::hold`] would give `host` the export now (taking nothing). A
    /// connection that must still authenticate is checked with this, and holds the export
    /// only once it has: an unauthenticated client must not keep the owner out.
    pub fn may_hold(&self, host: IpAddr, writes: bool) -> bool {
        if !self.exclusive || !writes || self.read_only {
            return true;
        }
        let host = host.to_canonical();
        self.owner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none_or(|(h, _)| h == host)
    }

    /// Who holds it read-write now.
    pub fn holder(&self) -> Option<IpAddr> {
        self.owner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .map(|(h, _)| h)
    }

    /// Records a write or flush failure (the first one sticks).
    pub fn record_error(&self, errno: i32) {
        let _ = self
            .error
            .compare_exchange(0, errno.max(1), Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The sticky error, if any.
    pub fn error(&self) -> Option<i32> {
        match self.error.load(Ordering::Relaxed) {
            0 => None,
            e => Some(e),
        }
    }

    /// A flush or FUA write begins (before its operation is submitted: it may take a
    /// writeback error from then on).
    pub fn sync_begin(self: &Arc<Self>) -> SyncToken {
        let mut s = self.syncs.lock().unwrap_or_else(PoisonError::into_inner);
        let seq = s.next;
        s.next += 1;
        s.open.insert(seq);
        SyncToken {
            export: self.clone(),
            seq,
            ended: false,
        }
    }

    /// Where a flush or FUA write that just succeeded must wait for: every one begun so far.
    pub fn sync_mark(&self) -> u64 {
        self.syncs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .next
    }

    /// Whether every flush and FUA write begun before `mark` has ended, its error recorded;
    /// if not, `w` is woken when one ends.
    pub fn settled(&self, mark: u64, w: Option<&Arc<Wake>>) -> bool {
        let s = self.syncs.lock().unwrap_or_else(PoisonError::into_inner);
        if s.open.first().is_none_or(|&oldest| oldest >= mark) {
            return true;
        }
        // Under the lock: an end after this check finds the waiter.
        if let Some(w) = w {
            self.settle_waiters.add(w);
        }
        false
    }
}

/// The target's exports by name.
pub type Exports = HashMap<String, Arc<Export>>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backing::IoOp;
    use crate::ring::Ring;
    use std::io;
    use std::time::Duration;

    struct Null;
    impl Backing for Null {
        fn describe(&self) -> String {
            "null".into()
        }
        fn geometry(&self) -> Geometry {
            Geometry {
                capacity: 1 << 20,
                block_size: 512,
                physical_block_size: 4096,
            }
        }
        unsafe fn start(&self, _: &mut Ring, _: IoOp, _: *mut u8, _: u64) -> io::Result<()> {
            Ok(())
        }
        fn sync(&self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A read-write export of no data, with no allow-list or key.
    fn null_export(name: &str, exclusive: bool) -> Arc<Export> {
        Arc::new(Export::new(
            name,
            Box::new(Null),
            false,
            None,
            None,
            false,
            exclusive,
        ))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn exclusive_read_write_is_one_host_at_a_time() {
        let e = null_export("e", true);
        let a1 = e.hold(ip("10.0.0.1"), true).unwrap();
        let a2 = e.hold(ip("::ffff:10.0.0.1"), true).unwrap();
        assert!(e.hold(ip("10.0.0.2"), true).is_none());
        assert!(!e.may_hold(ip("10.0.0.2"), true));
        assert!(e.may_hold(ip("10.0.0.1"), true));
        assert!(
            e.hold(ip("10.0.0.2"), false).is_some(),
            "read-only is shared"
        );
        assert_eq!(e.holder(), Some(ip("10.0.0.1")));
        drop(a1);
        assert!(e.hold(ip("10.0.0.2"), true).is_none());
        drop(a2);
        assert_eq!(e.holder(), None);
        assert!(e.hold(ip("10.0.0.2"), true).is_some());
        let shared = null_export("s", false);
        let _x = shared.hold(ip("10.0.0.1"), true).unwrap();
        assert!(shared.hold(ip("10.0.0.2"), true).is_some());
    }

    #[test]
    fn a_sync_settles_once_every_earlier_one_has_ended() {
        let e = null_export("e", true);
        let w = Arc::new(Wake::new().unwrap());
        let a = e.sync_begin();
        let b = e.sync_begin();
        b.end(None);
        let mark = e.sync_mark();
        assert!(!e.settled(mark, Some(&w)), "a began before b's completion");
        let later = e.sync_begin();
        a.end(Some(libc::EIO));
        assert_eq!(
            crate::wake::readable(&[Some(w.fd())], Some(Duration::ZERO)).unwrap(),
            1
        );
        assert!(
            e.settled(mark, None),
            "one begun after the mark is not waited for"
        );
        assert_eq!(e.error(), Some(libc::EIO), "recorded before b may answer");
        // One whose result is never known counts as failed.
        let f = null_export("f", true);
        drop(f.sync_begin());
        assert_eq!(f.error(), Some(libc::EIO));
        drop(later);
    }

    #[test]
    fn errors_stick() {
        let e = null_export("e", true);
        assert_eq!(e.error(), None);
        e.record_error(libc::EIO);
        e.record_error(libc::ENOSPC);
        assert_eq!(e.error(), Some(libc::EIO));
    }
}
