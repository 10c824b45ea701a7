//! An export backed by a Ceph RBD image (`rbd:POOL/IMAGE`), through librbd (rdmadisk-rbd).
//!
//! librbd completes each operation on a thread of its own; the completion goes to the ring of
//! the connection that started it, through the ring's mailbox (`ring.rs`), so that the
//! connection takes it in the same wait as its other completions: no thread per request and
//! no blocking call on the I/O path.
//!
//! Durability: the target connects with librbd's cache off (`rbd_cache = false`), so a write
//! is in the OSDs' journals when librbd completes it: FUA needs nothing more, and a flush
//! (still sent, but for a gateway's image that has not taken the lock: see `start`) has no
//! dirty cache to write back.
//!
//! One writer per image: a read-write export takes the image's exclusive lock in exclusive
//! mode (librbd keeps it, and refuses to hand it to another client that asks). A second target
//! is refused while the first holds it. When the owner is dead or frozen, Ceph drops its watch
//! on the image after `osd_client_watch_timeout`, and librbd then breaks its lock as it
//! acquires; `break_lock` breaks it at once. Either way Ceph blocklists the old owner first, so
//! none of its writes can land afterwards. docs/design.md ("RBD exports") says how this fits
//! the session fences.
//!
//! Gateways (`gateway`): several targets serve one image, a client's disk naming them all and
//! failing over between them. Each opens the image read-write but takes no lock at start; a
//! read-write session attaching one makes it the writer: it breaks the lock of the gateway
//! that was (Ceph blocklists that one first) and takes it ([`Backing::take_over`]). A gateway
//! that was blocklisted so is of no use to the cluster any more: when a session comes back to
//! it, it connects afresh (a new client instance, which the blocklist does not name) and
//! reopens the image, which is why the image is replaceable here.
//!
//! Online resize: a watch on the image's header hears of `rbd resize`; a thread of the
//! backing's then reads the new size, which requests are checked against and every response
//! reports to the client (`features::RESIZE`).

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rdmadisk_rbd::{Cluster, Complete, Connect, Image};

use crate::backing::{Backing, FencedOut, Geometry, IoOp};
use crate::config::RbdSpec;
use crate::ring::{Mailbox, Ring};

impl Complete for Mailbox {
    fn complete(&self, tag: u64, result: i64) {
        self.post(
            tag,
            result.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
        );
    }
}

/// `RBD_FEATURE_EXCLUSIVE_LOCK`.
const FEATURE_EXCLUSIVE_LOCK: u64 = rdmadisk_rbd::sys::RBD_FEATURE_EXCLUSIVE_LOCK as u64;

/// How long a takeover retries taking the lock it has just broken (another gateway may be
/// taking it at the same moment): well within the client's 10 s to set a connection up.
const TAKEOVER_WAIT: Duration = Duration::from_secs(3);

/// A connection to the cluster and the image opened through it.
struct Opened {
    image: Arc<Image>,
    /// Dropped after the image (field order), which its pool's handle outlives anyway.
    cluster: Cluster,
    /// This connection's address (`IP:PORT/NONCE`): how librbd names it as a lock owner, and
    /// what Ceph's blocklist names.
    me: String,
    /// This image took the lock (at start, or in a takeover). Writes and flushes need it:
    /// librbd would otherwise take a free lock by itself for them, behind the takeover's
    /// back. Once set, not holding the lock means another gateway took it, and Ceph
    /// blocklisted this connection.
    locked: AtomicBool,
    /// Which connection of the backing this is: 1 at start, one more for each afresh.
    instance: u64,
}

pub struct RbdBacking {
    /// Replaced when a gateway connects afresh ([`RbdBacking::take_over`]). Operations
    /// started on the one before still complete: closing it waits for them.
    cur: Mutex<Arc<Opened>>,
    /// One takeover at a time: the Hellos of a session's connections come together, and only
    /// the first has anything to do.
    takeover: Mutex<()>,
    read_only: bool,
    spec: RbdSpec,
    geometry: Geometry,
    /// Usable bytes now: the image may be resized while it is served ([`watch_size`]).
    capacity: Arc<AtomicU64>,
}

/// The target's defaults for its librados client, which the conf may change.
const DEFAULTS: &[(&str, &str)] = &[
    // Reaching the monitors at start: fail in 30 s, not librados's 5 minutes.
    ("client_mount_timeout", "30"),
];

/// What the target sets on its librados client whatever the conf says.
const OPTIONS: &[(&str, &str)] = &[
    // A completed write is durable (see the module's comment).
    ("rbd_cache", "false"),
    // A discard reads back as zeroes (the wire's promise), partial objects included: librbd
    // would otherwise skip the parts of a discard that do not cover whole 64 KiB pieces.
    ("rbd_skip_partial_discard", "false"),
    // Breaking a lock blocklists its owner first (the fence the design rests on).
    ("rbd_blocklist_on_break_lock", "true"),
    // An operation is never given up on while it may still land: the session fences hold
    // a write's ticket until its completion, and a timed-out write could land after it.
    ("rados_osd_op_timeout", "0"),
];

fn connect(spec: &RbdSpec) -> io::Result<Cluster> {
    Ok(Cluster::connect(&Connect {
        conf: spec.conf.as_deref(),
        client: spec.client.as_deref(),
        keyring: spec.keyring.as_deref(),
        defaults: DEFAULTS,
        options: OPTIONS,
    })?)
}

fn geometry(size: u64) -> Geometry {
    // 512-byte blocks (librbd takes any byte range); 4 KiB physical, so that file systems
    // write whole 4 KiB pieces of the OSDs' objects.
    Geometry {
        capacity: size / 512 * 512,
        block_size: 512,
        physical_block_size: 4096,
    }
}

/// Connects and opens the image (read-write: one with the exclusive-lock feature), taking no
/// lock.
fn open_image(spec: &RbdSpec, read_only: bool, instance: u64) -> io::Result<Opened> {
    let cluster = connect(spec)?;
    let pool = cluster.pool(&spec.pool)?;
    let image = Image::open(&pool, &spec.image, read_only)?;
    check_config(&image, spec)?;
    if !read_only {
        require_lock_feature(&image, spec)?;
    }
    Ok(Opened {
        image: Arc::new(image),
        me: cluster.addrs()?,
        cluster,
        locked: AtomicBool::new(false),
        instance,
    })
}

impl RbdBacking {
    /// Connects, opens the image and, read-write, takes its exclusive lock (a gateway takes
    /// it only when a client attaches).
    pub fn open(spec: &RbdSpec, read_only: bool) -> io::Result<RbdBacking> {
        let o = open_image(spec, read_only, 1)?;
        let name = format!("{}/{}", spec.pool, spec.image);
        if !read_only && !spec.gateway {
            lock(&o.image, spec, &o.cluster)?;
            o.locked.store(true, Ordering::Relaxed);
        } else if !read_only {
            let owners = o.image.lock_owners().unwrap_or_default();
            log::info!(
                "RBD image {name}: gateway as {} ({}), standby: it takes the exclusive lock over \
                 when a client attaches read-write{}",
                o.cluster.client(),
                o.me,
                if owners.is_empty() {
                    String::new()
                } else {
                    format!(" (held by {} now)", owners.join(", "))
                }
            );
        }
        let capacity = Arc::new(AtomicU64::new(0));
        // Watching before the size is read: a resize in between is not missed.
        watch_size(&o.image, spec, &capacity)?;
        let size = o.image.size()?;
        // Unless the watch has seen a newer size meanwhile.
        let _ = capacity.compare_exchange(
            0,
            geometry(size).capacity,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        Ok(RbdBacking {
            geometry: geometry(size),
            cur: Mutex::new(Arc::new(o)),
            takeover: Mutex::new(()),
            read_only,
            spec: spec.clone(),
            capacity,
        })
    }

    fn current(&self) -> Arc<Opened> {
        self.cur
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A read-write export's image that has not taken the lock (a gateway's, at start or
    /// connected afresh): nothing was written through it, and librbd, whose automatic lock
    /// policy it still has, would take the lock by itself for a write or a flush.
    fn never_locked(&self, o: &Opened) -> bool {
        !self.read_only && !o.locked.load(Ordering::Relaxed)
    }

    fn name(&self) -> String {
        format!("{}/{}", self.spec.pool, self.spec.image)
    }

    /// Connects afresh and reopens the image, in place of `old`: this client was blocklisted
    /// (or is about to learn it), and a new one is not. The resize watch follows the new
    /// image.
    fn reopen(&self, old: &Opened) -> io::Result<Arc<Opened>> {
        let fresh = Arc::new(open_image(&self.spec, false, old.instance + 1)?);
        watch_size(&fresh.image, &self.spec, &self.capacity)?;
        // A resize while the old client was blocklisted was not heard.
        let size = fresh.image.size()?;
        self.capacity
            .store(geometry(size).capacity, Ordering::Relaxed);
        log::info!(
            "RBD image {}: connected afresh as {} ({}) in place of {} (gateway)",
            self.name(),
            fresh.cluster.client(),
            fresh.me,
            old.me
        );
        let gone = std::mem::replace(
            &mut *self.cur.lock().unwrap_or_else(PoisonError::into_inner),
            fresh.clone(),
        );
        // Closing the old image waits for its operations in flight (they fail, blocklisted)
        // and shutting its client down for the cluster: not on this thread, which a client
        // waits on. Connections that started an operation on it a moment ago hold it until
        // their start returns.
        let keep = gone.clone();
        if std::thread::Builder::new()
            .name("rbd-close".into())
            .spawn(move || drop(keep))
            .is_err()
        {
            log::warn!("RBD image {}: closing the old image here", self.name());
        }
        drop(gone);
        Ok(fresh)
    }

    /// For --check-config: reaches the cluster and opens the image (taking no lock), and says
    /// who holds its lock.
    pub fn inspect(spec: &RbdSpec, read_only: bool) -> io::Result<(Geometry, String)> {
        let cluster = connect(spec)?;
        let pool = cluster.pool(&spec.pool)?;
        // Read-write opens take no lock until a write (none here); only they can list the
        // lock's owners.
        let image = Image::open(&pool, &spec.image, read_only)?;
        check_config(&image, spec)?;
        let size = image.size()?;
        let mut notes = Vec::new();
        if !read_only {
            require_lock_feature(&image, spec)?;
        }
        let owners = if read_only {
            Vec::new()
        } else {
            image.lock_owners()?
        };
        if spec.gateway {
            notes.push("gateway: takes the lock over when a client attaches".to_string());
        }
        if !owners.is_empty() {
            notes.push(format!(
                "its exclusive lock is held by {}{}",
                owners.join(", "),
                if spec.gateway {
                    ""
                } else if spec.break_lock {
                    " (break_lock: it would be broken)"
                } else {
                    ""
                }
            ));
        }
        let what = format!(
            "RBD image {}/{} as {}{}",
            spec.pool,
            spec.image,
            cluster.client(),
            if notes.is_empty() {
                String::new()
            } else {
                format!("; {}", notes.join("; "))
            }
        );
        Ok((geometry(size), what))
    }
}

/// Keeps `capacity` at the image's size: librbd calls the watch after the image's header
/// changed (on its own thread, where librbd must not be called), and a thread of ours then
/// reads the size. It ends when the image closes: the watch, and the sender it holds, go then.
/// The thread holds the image only while it reads the size; should the backing be dropped
/// meanwhile, the image closes (and its lock goes) when that read returns. The target drops
/// a backing as it exits, or when a reload removed its export and its last connection ended.
fn watch_size(image: &Arc<Image>, spec: &RbdSpec, capacity: &Arc<AtomicU64>) -> io::Result<()> {
    let (tx, rx) = mpsc::channel::<()>();
    let (weak, capacity) = (Arc::downgrade(image), capacity.clone());
    let name = format!("{}/{}", spec.pool, spec.image);
    std::thread::Builder::new()
        .name("rbd-size".into())
        .spawn(move || {
            while rx.recv().is_ok() {
                // One look serves every update that came meanwhile.
                while rx.try_recv().is_ok() {}
                let Some(img) = weak.upgrade() else { break };
                match img.size() {
                    Ok(size) => {
                        let new = geometry(size).capacity;
                        let old = capacity.swap(new, Ordering::Relaxed);
                        if old != new {
                            log::info!(
                                "RBD image {name}: resized from {old} to {new} bytes{}",
                                if new < old {
                                    "; mapped disks keep their size, and requests beyond the \
                                     new end fail"
                                } else {
                                    "; mapped disks grow with their next response"
                                }
                            );
                        }
                    }
                    Err(e) => log::warn!("RBD image {name}: {e} (after its header changed)"),
                }
            }
        })?;
    image.watch_updates(move || {
        let _ = tx.send(());
    })?;
    Ok(())
}

/// The pool's or the image's own configuration (`rbd config pool|image set`) overrides the
/// client's: refuses an image where it undoes what `OPTIONS` promise.
fn check_config(image: &Image, spec: &RbdSpec) -> io::Result<()> {
    for &(k, want) in OPTIONS.iter().filter(|(k, _)| k.starts_with("rbd_")) {
        match image.config(k)? {
            Some(v) if v != want => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "image {}/{} has {k} = {v} in its pool's or its own configuration; \
                         the target needs {want} (rbd config image set {}/{} {k} {want})",
                        spec.pool, spec.image, spec.pool, spec.image
                    ),
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// A read-write export's image must have the exclusive-lock feature: it keeps it to one writer.
fn require_lock_feature(image: &Image, spec: &RbdSpec) -> io::Result<()> {
    if image.features()? & FEATURE_EXCLUSIVE_LOCK != 0 {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "image {}/{} lacks the exclusive-lock feature, which keeps it to one writer: \
             rbd feature enable {}/{} exclusive-lock (or export it read-only)",
            spec.pool, spec.image, spec.pool, spec.image
        ),
    ))
}

/// Takes the image's exclusive lock. With `break_lock`, another owner's lock is broken first.
/// Otherwise librbd waits for it: when the owner is gone or frozen, Ceph drops its watch on
/// the image after `osd_client_watch_timeout` (30 s by default), and librbd then breaks its
/// lock as it acquires. A live owner refuses (EROFS); that is retried for `lock_wait`.
fn lock(image: &Image, spec: &RbdSpec, cluster: &Cluster) -> io::Result<()> {
    require_lock_feature(image, spec)?;
    let name = format!("{}/{}", spec.pool, spec.image);
    if spec.break_lock {
        for o in image.lock_owners()? {
            log::warn!(
                "RBD image {name}: breaking {o}'s exclusive lock (break_lock); Ceph blocklists it"
            );
            match image.break_lock(&o) {
                // Released, or taken by another, since it was listed: the acquire below
                // sees which.
                Err(e) if matches!(e.errno, libc::ENOENT | libc::EBUSY) => {}
                r => r?,
            }
        }
    }
    let end = Instant::now() + spec.lock_wait;
    let mut said = false;
    loop {
        let err = match image.lock_exclusive() {
            Ok(()) => break,
            // Held by a live owner (EROFS, EBUSY) or in transition (EAGAIN): worth waiting.
            Err(e) if matches!(e.errno, libc::EROFS | libc::EBUSY | libc::EAGAIN) => e,
            Err(e) => return Err(e.into()),
        };
        let owners = image.lock_owners().unwrap_or_default();
        let who = if owners.is_empty() {
            String::new()
        } else {
            format!(" (held by {})", owners.join(", "))
        };
        if Instant::now() >= end {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!(
                    "{err}{who}: another client serves this image (waited {} s; break_lock \
                     takes it over from an owner known to be gone or frozen)",
                    spec.lock_wait.as_secs()
                ),
            ));
        }
        if !said {
            log::warn!(
                "RBD image {name}: its exclusive lock is held{who}; waiting up to {} s",
                spec.lock_wait.as_secs()
            );
            said = true;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    log::info!(
        "RBD image {name}: exclusive lock held by {} ({})",
        cluster.client(),
        cluster.addrs().unwrap_or_default()
    );
    Ok(())
}

impl Backing for RbdBacking {
    fn describe(&self) -> String {
        let o = self.current();
        format!(
            "RBD image {}/{} as {}{}",
            self.spec.pool,
            self.spec.image,
            o.cluster.client(),
            match (self.read_only, self.spec.gateway) {
                (true, false) => "",
                (true, true) => ", gateway",
                (false, false) => ", exclusive lock held",
                (false, true) => ", gateway: takes the exclusive lock over when a client attaches",
            }
        )
    }

    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn capacity(&self) -> u64 {
        self.capacity.load(Ordering::Relaxed)
    }

    fn resizable(&self) -> bool {
        true
    }

    unsafe fn start(
        &self,
        ring: &mut Ring,
        op: IoOp,
        buf: *mut u8,
        user_data: u64,
    ) -> io::Result<()> {
        let to: Arc<dyn Complete> = ring.mailbox()?;
        let o = self.current();
        let img = &o.image;
        // An image that has not taken the lock yet (a gateway's, at start or connected afresh)
        // still has librbd's automatic lock policy, which `lock_exclusive` ends: a flush, which
        // librbd orders behind the lock, would have it ask the owner for the lock, or break it
        // and take it, by itself; and a takeover meanwhile waits behind that (a second
        // blocklisting of the owner, a second or so at the monitor). It has nothing to do:
        // librbd's cache is off, so every write that completed, through any gateway, is
        // durable already. Answered done, not refused: a read-only session, which never takes
        // the lock, would otherwise be refused its flushes for good.
        if matches!(op, IoOp::Flush) && self.never_locked(&o) {
            to.complete(user_data, 0);
            ring.started_elsewhere();
            return Ok(());
        }
        // A target that lost the image (another broke its lock: Ceph blocklisted it) writes
        // nothing more, whatever librbd would still try; nor does a gateway's image that has
        // not taken the lock (librbd would take a free one for the write). librbd's own view
        // of the lock is enough here: once Ceph has blocklisted this client, nothing of its
        // lands whatever that view says.
        if matches!(
            op,
            IoOp::Write { .. } | IoOp::PunchHole { .. } | IoOp::ZeroRange { .. }
        ) && !self.read_only
        {
            // A blocklisted client cannot even ask.
            let lost = match img.is_lock_owner() {
                Ok(held) if held && o.locked.load(Ordering::Relaxed) => None,
                Ok(_) => Some(String::new()),
                Err(e) => Some(format!(" ({e})")),
            };
            if let Some(why) = lost {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    FencedOut(format!(
                        "RBD image {}: this target no longer holds its exclusive lock{}{why}",
                        self.name(),
                        if self.spec.gateway {
                            "; another gateway took it over"
                        } else {
                            ""
                        }
                    )),
                ));
            }
        }
        match op {
            // SAFETY: forwarded to the caller (`Backing::start`): `buf` stays valid and
            // untouched until the completion, which the mailbox delivers to the ring.
            IoOp::Read { off, len } => unsafe {
                img.aio_read(off, len as usize, buf, &to, user_data)
            },
            // FUA: librbd's cache is off, so a completed write is durable.
            // SAFETY: as for the read.
            IoOp::Write { off, len, fua: _ } => unsafe {
                img.aio_write(off, len as usize, buf, &to, user_data)
            },
            IoOp::Flush => img.aio_flush(&to, user_data),
            IoOp::PunchHole { off, len } => img.aio_discard(off, len, &to, user_data),
            IoOp::ZeroRange { off, len } => img.aio_write_zeroes(off, len, &to, user_data),
        }?;
        ring.started_elsewhere();
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        let o = self.current();
        // Nothing was written through an image that never took the lock, and librbd would
        // take the lock for the flush (see `start`).
        if self.never_locked(&o) {
            return Ok(());
        }
        Ok(o.image.flush()?)
    }

    fn gateway(&self) -> bool {
        self.spec.gateway
    }

    fn take_back(&self) {
        let o = self.current();
        // librbd's own view first: it costs no round trip, and every Hello asks.
        if self.read_only
            || self.spec.gateway
            || !o.locked.load(Ordering::Relaxed)
            || o.image.is_lock_owner().unwrap_or(true)
        {
            return;
        }
        let _one = self.takeover.lock().unwrap_or_else(PoisonError::into_inner);
        let name = self.name();
        // The OSDs' word: empty means nobody holds it (a blocklisted client cannot even ask).
        match o.image.lock_owners() {
            Ok(owners) if owners.contains(&o.me) => {}
            Ok(owners) if owners.is_empty() => match o.image.lock_exclusive() {
                Ok(()) => log::warn!(
                    "RBD image {name}: took its exclusive lock back ({}), which librbd had let go \
                     with nobody taking it",
                    o.me
                ),
                Err(e) => log::warn!("RBD image {name}: cannot take its exclusive lock back: {e}"),
            },
            Ok(owners) => log::warn!(
                "RBD image {name}: {} holds its exclusive lock: this target stays fenced out",
                owners.join(", ")
            ),
            Err(e) => log::warn!("RBD image {name}: cannot list its lock's owners: {e}"),
        }
    }

    fn take_over(&self) -> io::Result<bool> {
        if self.read_only || !self.spec.gateway {
            return Ok(false);
        }
        let _one = self.takeover.lock().unwrap_or_else(PoisonError::into_inner);
        let began = Instant::now();
        let name = self.name();
        let mut o = self.current();
        // The OSDs' word, not librbd's: its own view may still say this client holds the lock
        // after another gateway has had it blocklisted.
        let fresh = match o.image.lock_owners() {
            Ok(owners) if owners.contains(&o.me) && o.locked.load(Ordering::Relaxed) => {
                return Ok(false)
            }
            // Held once, and taken since: this client is blocklisted.
            Ok(_) => o.locked.load(Ordering::Relaxed),
            Err(e) => {
                log::warn!("RBD image {name}: {e}; connecting afresh (gateway)");
                true
            }
        };
        // How long each librbd step took, for the log: a slow takeover says which one waited.
        let mut steps = Vec::new();
        if fresh {
            let t = Instant::now();
            o = self.reopen(&o)?;
            steps.push(format!("reopen {} ms", t.elapsed().as_millis()));
        }
        let mut broken = Vec::new();
        // Every try's, the ones refused while another gateway held it included.
        let mut lock_ms = 0;
        let end = Instant::now() + TAKEOVER_WAIT;
        loop {
            for owner in o.image.lock_owners()? {
                if owner == o.me || broken.contains(&owner) {
                    continue;
                }
                log::warn!(
                    "RBD image {name}: taking the exclusive lock over from {owner} (gateway); \
                     Ceph blocklists it"
                );
                let t = Instant::now();
                match o.image.break_lock(&owner) {
                    // Released, or taken by another, since it was listed: the acquire below
                    // sees which.
                    Err(e) if matches!(e.errno, libc::ENOENT | libc::EBUSY) => {}
                    r => r?,
                }
                steps.push(format!("break_lock {} ms", t.elapsed().as_millis()));
                broken.push(owner);
            }
            let t = Instant::now();
            let r = o.image.lock_exclusive();
            lock_ms += t.elapsed().as_millis();
            match r {
                Ok(()) => break,
                // Another gateway took it in between: broken on the next turn.
                Err(e)
                    if matches!(e.errno, libc::EROFS | libc::EBUSY | libc::EAGAIN)
                        && Instant::now() < end =>
                {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(e.into()),
            }
        }
        steps.push(format!("lock_exclusive {lock_ms} ms"));
        o.locked.store(true, Ordering::Relaxed);
        log::info!(
            "RBD image {name}: exclusive lock held by {} ({}) after a takeover of {} ms \
             ({}; gateway{})",
            o.cluster.client(),
            o.me,
            began.elapsed().as_millis(),
            steps.join(", "),
            if broken.is_empty() {
                String::new()
            } else {
                format!("; from {}", broken.join(", "))
            }
        );
        Ok(true)
    }

    fn instance(&self) -> u64 {
        if self.spec.gateway {
            self.current().instance
        } else {
            0
        }
    }

    fn fenced_out(&self, errno: i32) -> bool {
        // Ceph's EBLOCKLISTED; EROFS: librbd could not take the lock back for a write.
        !self.read_only && matches!(errno, libc::ESHUTDOWN | libc::EROFS)
    }
}
