//! An export backed by a Ceph RBD image (`rbd:POOL/IMAGE`), through librbd (rdmadisk-rbd).
//!
//! librbd completes each operation on a thread of its own; the completion goes to the ring of
//! the connection that started it, through the ring's mailbox (`ring.rs`), so that the
//! connection takes it in the same wait as its other completions: no thread per request and
//! no blocking call on the I/O path.
//!
//! Durability: the target connects with librbd's cache off (`rbd_cache = false`), so a write
//! is in the OSDs' journals when librbd completes it: FUA needs nothing more, and a flush
//! (still sent) has no dirty cache to write back.
//!
//! One writer per image: a read-write export takes the image's exclusive lock in exclusive
//! mode (librbd keeps it, and refuses to hand it to another client that asks). A second target
//! is refused while the first holds it. When the owner is dead or frozen, Ceph drops its watch
//! on the image after `osd_client_watch_timeout`, and librbd then breaks its lock as it
//! acquires; `break_lock` breaks it at once. Either way Ceph blocklists the old owner first, so
//! none of its writes can land afterwards. docs/design.md ("RBD exports") says how this fits
//! the session fences.
//!
//! Online resize: a watch on the image's header hears of `rbd resize`; a thread of the
//! backing's then reads the new size, which requests are checked against and every response
//! reports to the client (`features::RESIZE`).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use rdmadisk_rbd::{Cluster, Complete, Connect, Image};

use crate::backing::{Backing, Geometry, IoOp};
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

pub struct RbdBacking {
    image: Arc<Image>,
    cluster: Cluster,
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

impl RbdBacking {
    /// Connects, opens the image and, read-write, takes its exclusive lock.
    pub fn open(spec: &RbdSpec, read_only: bool) -> io::Result<RbdBacking> {
        let cluster = connect(spec)?;
        let pool = cluster.pool(&spec.pool)?;
        let image = Image::open(&pool, &spec.image, read_only)?;
        check_config(&image, spec)?;
        if !read_only {
            lock(&image, spec, &cluster)?;
        }
        let image = Arc::new(image);
        let capacity = Arc::new(AtomicU64::new(0));
        // Watching before the size is read: a resize in between is not missed.
        watch_size(&image, spec, &capacity)?;
        let size = image.size()?;
        // Unless the watch has seen a newer size meanwhile.
        let _ = capacity.compare_exchange(
            0,
            geometry(size).capacity,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        Ok(RbdBacking {
            geometry: geometry(size),
            image,
            cluster,
            spec: spec.clone(),
            capacity,
        })
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
        if !owners.is_empty() {
            notes.push(format!(
                "its exclusive lock is held by {}{}",
                owners.join(", "),
                if spec.break_lock {
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
/// its backings only as it exits.
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
        format!(
            "RBD image {}/{} as {}{}",
            self.spec.pool,
            self.spec.image,
            self.cluster.client(),
            if self.image.read_only() {
                ""
            } else {
                ", exclusive lock held"
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
        let img = &self.image;
        // A target that lost the image (another broke its lock: Ceph blocklisted it) writes
        // nothing more, whatever librbd would still try.
        if matches!(
            op,
            IoOp::Write { .. } | IoOp::PunchHole { .. } | IoOp::ZeroRange { .. }
        ) && !img.read_only()
            && !img.is_lock_owner()?
        {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "RBD image {}/{}: this target no longer holds its exclusive lock",
                    self.spec.pool, self.spec.image
                ),
            ));
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
        Ok(self.image.flush()?)
    }
}
