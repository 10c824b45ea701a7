// SPDX-License-Identifier: GPL-2.0

//! A disk: its tag set, gendisk and queue limits, and the teardown that waits for its
//! requests.

use core::{
    marker::PhantomData,
    mem,
    pin::Pin,
    ptr::{self, NonNull},
    sync::atomic::{AtomicBool, Ordering},
};
use kernel::{
    ffi,
    page::PAGE_SIZE,
    prelude::*,
    str::CString,
    sync::Arc,
    types::{ForeignOwnable, Opaque},
};

use super::super::bindings as b;
use super::super::sysfs::AttrGroups;
use super::attrs::{DiskAttrs, DiskDir, MAX_DISK_ATTRS};
use super::driver::{Driver, Ops};
use super::early_dir::EarlyDir;
use super::request::Area;

/// Queue limits of a disk (`struct queue_limits`); 0 means the block layer's default.
///
/// Every disk also asks for stable pages (`BLK_FEAT_STABLE_WRITES`): the page cache does not
/// modify a page while a write of it is in flight, so a checksum of the write data taken in
/// `queue_rq` still matches what the target reads. (An `O_DIRECT` writer that changes its
/// buffer during the write gets a mismatch, as with any checksumming device.)
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Smallest addressable unit: a power of two from 512 to `PAGE_SIZE`.
    pub(crate) logical_block_size: u32,
    /// Smallest unit written atomically (at least the logical block size).
    pub(crate) physical_block_size: u32,
    /// Largest request, in 512-byte sectors (0: the block layer's default; else at least 8).
    pub(crate) max_hw_sectors: u32,
    /// Most data segments per request; also the size of each request's scatterlist array.
    /// Must not be 0.
    pub(crate) max_segments: u16,
    /// Largest segment in bytes (0: default). With a `virt_boundary_mask` the block layer
    /// allows 0 (unlimited) or any value; without one, at least `PAGE_SIZE`.
    pub(crate) max_segment_size: u32,
    /// Segments may not cross this boundary except at its edges (4095 for FRWR page lists);
    /// 0 for none.
    pub(crate) virt_boundary_mask: u64,
    /// The device has a volatile write cache: the block layer sends flushes
    /// ([`ReqOp::Flush`]).
    ///
    /// [`ReqOp::Flush`]: super::ReqOp::Flush
    pub(crate) write_cache: bool,
    /// The device honours FUA writes ([`Rq::is_fua`]); only with `write_cache`.
    ///
    /// [`Rq::is_fua`]: super::Rq::is_fua
    pub(crate) fua: bool,
    /// Largest discard, in sectors; 0: no discard.
    pub(crate) max_discard_sectors: u32,
    /// Largest write-zeroes, in sectors; 0: no write-zeroes.
    pub(crate) max_write_zeroes_sectors: u32,
}

impl Limits {
    fn validate(&self) -> Result {
        let lbs = self.logical_block_size;
        let pbs = self.physical_block_size;
        // Checked here so that a bad value is an `EINVAL`, not a block-layer WARN.
        if !(512..=PAGE_SIZE as u32).contains(&lbs) || !lbs.is_power_of_two() {
            return Err(EINVAL);
        }
        if pbs != 0 && !pbs.is_power_of_two() {
            return Err(EINVAL);
        }
        if self.max_hw_sectors != 0
            && (self.max_hw_sectors < (PAGE_SIZE / 512) as u32 || self.max_hw_sectors < lbs / 512)
        {
            return Err(EINVAL);
        }
        if self.max_segments == 0 {
            return Err(EINVAL);
        }
        if self.virt_boundary_mask == 0
            && self.max_segment_size != 0
            && self.max_segment_size < PAGE_SIZE as u32
        {
            return Err(EINVAL);
        }
        if self.fua && !self.write_cache {
            return Err(EINVAL);
        }
        Ok(())
    }

    fn to_raw(self) -> b::queue_limits {
        // SAFETY: All-zero is a valid `queue_limits`: every member is a number (0: default).
        let mut lim: b::queue_limits = unsafe { mem::zeroed() };
        lim.logical_block_size = self.logical_block_size;
        lim.physical_block_size = self.physical_block_size;
        lim.max_hw_sectors = self.max_hw_sectors;
        lim.max_segments = self.max_segments;
        lim.max_segment_size = self.max_segment_size;
        lim.virt_boundary_mask = self.virt_boundary_mask as ffi::c_ulong;
        if self.write_cache {
            lim.features |= b::RDMADISK_BLK_FEAT_WRITE_CACHE;
        }
        if self.fua {
            lim.features |= b::RDMADISK_BLK_FEAT_FUA;
        }
        // Write data is checksummed (CRC32C) before it goes out, so its pages must not change
        // while a write is in flight: writers to the page cache wait for the write to end.
        lim.features |= b::RDMADISK_BLK_FEAT_STABLE_WRITES;
        lim.max_hw_discard_sectors = self.max_discard_sectors;
        lim.max_write_zeroes_sectors = self.max_write_zeroes_sectors;
        lim
    }
}

/// How to create a [`Disk`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct DiskConfig {
    /// The disk is `rdmadisk{index}` (`/dev/rdmadisk{index}`).
    pub(crate) index: u32,
    /// Hardware queues (at least 1), the polled ones included.
    pub(crate) nr_hw_queues: u32,
    /// The last this many hardware queues are poll queues (`HCTX_TYPE_POLL`, for `REQ_POLLED`
    /// I/O, reaped by [`Driver::poll`]); fewer than `nr_hw_queues`.
    pub(crate) nr_poll_queues: u32,
    /// Tags per hardware queue (at least 1).
    pub(crate) queue_depth: u32,
    /// blk-mq's request timeout in milliseconds ([`Driver::timeout`] runs after it); 0: the
    /// block layer's default (30 s).
    pub(crate) timeout_ms: u32,
    /// Size in 512-byte sectors.
    pub(crate) capacity_sectors: u64,
    /// Read-only (`set_disk_ro`).
    pub(crate) read_only: bool,
    /// Queue limits.
    pub(crate) limits: Limits,
    /// NUMA node for the tag set's memory, or `NUMA_NO_NODE`.
    pub(crate) numa_node: i32,
    /// `BLK_MQ_F_BLOCKING`: [`Driver::queue_rq`] runs under the tag set's SRCU instead of the
    /// RCU read lock, and may sleep.
    pub(crate) blocking: bool,
}

/// `struct block_device_operations` holding raw pointers, shareable because it is immutable.
#[repr(transparent)]
struct Fops(b::block_device_operations);

// SAFETY: Never written after initialisation; the pointers in it point to static data.
unsafe impl Sync for Fops {}

/// The disk's operations: none beyond blk-mq's, and the module as owner, so that an opened
/// disk pins the module.
static FOPS: Fops = Fops(b::block_device_operations {
    owner: ptr::addr_of!(b::__this_module).cast_mut(),
    // SAFETY: All-zero is "no callback" / null for every other member.
    ..unsafe { mem::zeroed() }
});

/// A `blk_mq_tag_set` and what `map_queues` needs that it does not hold: blk-mq sets every
/// map's size to `nr_hw_queues` when it allocates the set, so the split is kept here.
#[repr(C)]
pub(super) struct RawTagSet {
    // First: a pointer to the set is a pointer to this (`Ops::map_queues`).
    set: b::blk_mq_tag_set,
    nr_poll_queues: u32,
}

impl RawTagSet {
    /// Splits the hardware queues into blk-mq's maps and spreads the CPUs over each.
    pub(super) fn map_queues(&mut self) {
        let set = &mut self.set;
        if set.nr_maps <= b::RDMADISK_HCTX_TYPE_POLL || self.nr_poll_queues == 0 {
            // SAFETY: blk-mq allocated the map's CPU table and set its size.
            unsafe { b::blk_mq_map_queues(&mut set.map[b::RDMADISK_HCTX_TYPE_DEFAULT as usize]) };
            return;
        }
        // As nvme-fabrics does: reads share the default queues, the poll queues follow them.
        let plain = set.nr_hw_queues - self.nr_poll_queues;
        for (ty, nr, offset) in [
            (b::RDMADISK_HCTX_TYPE_DEFAULT, plain, 0),
            (b::RDMADISK_HCTX_TYPE_READ, plain, 0),
            (b::RDMADISK_HCTX_TYPE_POLL, self.nr_poll_queues, plain),
        ] {
            let map = &mut set.map[ty as usize];
            map.nr_queues = nr;
            map.queue_offset = offset;
            // SAFETY: blk-mq allocated the map's CPU table (one entry per possible CPU).
            unsafe { b::blk_mq_map_queues(map) };
        }
    }
}

/// A blk-mq tag set for `D`, with the foreign `Arc<D>` in its `driver_data`.
struct TagSet<D: Driver> {
    raw: KBox<Opaque<RawTagSet>>,
    _p: PhantomData<Arc<D>>,
}

impl<D: Driver> TagSet<D> {
    fn new(cfg: &DiskConfig, driver: Arc<D>) -> Result<Self> {
        if cfg.nr_hw_queues == 0 || cfg.queue_depth == 0 || cfg.nr_poll_queues >= cfg.nr_hw_queues {
            return Err(EINVAL);
        }
        let cmd_size = Area::<D::Pdu>::cmd_size(cfg.limits.max_segments)?;
        // SAFETY: All-zero is a valid, empty `blk_mq_tag_set` (numbers and null pointers).
        let mut set: b::blk_mq_tag_set = unsafe { mem::zeroed() };
        set.ops = &Ops::<D>::VTABLE;
        set.nr_hw_queues = cfg.nr_hw_queues;
        set.queue_depth = cfg.queue_depth;
        set.cmd_size = cmd_size;
        set.numa_node = cfg.numa_node;
        // Poll queues need blk-mq's three maps (`RawTagSet::map_queues` splits them).
        set.nr_maps = if cfg.nr_poll_queues > 0 {
            b::RDMADISK_HCTX_MAX_TYPES
        } else {
            1
        };
        set.flags = b::RDMADISK_BLK_MQ_F_SHOULD_MERGE;
        if cfg.blocking {
            set.flags |= b::RDMADISK_BLK_MQ_F_BLOCKING;
        }
        if cfg.timeout_ms != 0 {
            // SAFETY: A pure conversion.
            let j = unsafe { b::rdmadisk_msecs_to_jiffies(cfg.timeout_ms) };
            set.timeout = u32::try_from(j).unwrap_or(u32::MAX);
        }
        let raw = KBox::new(
            Opaque::new(RawTagSet {
                set,
                nr_poll_queues: cfg.nr_poll_queues,
            }),
            GFP_KERNEL,
        )?;
        // `set` is the first field of the `repr(C)` struct.
        let ptr = raw.get().cast::<b::blk_mq_tag_set>();
        // SAFETY: Filled in above; not set up yet, so nothing else looks at it.
        unsafe { (*ptr).driver_data = driver.into_foreign().cast_mut() };
        // SAFETY: `raw` is a filled-in tag set at a fixed heap address (the box is never
        // moved out of), as `blk_mq_alloc_tag_set` requires (it links it into lists).
        let ret = unsafe { b::blk_mq_alloc_tag_set(ptr) };
        if ret != 0 {
            // SAFETY: The set was not set up, so only we hold the `Arc` we put in it.
            drop(unsafe { Arc::<D>::from_foreign((*ptr).driver_data) });
            return Err(Error::from_errno(ret));
        }
        Ok(Self {
            raw,
            _p: PhantomData,
        })
    }

    fn as_ptr(&self) -> *mut b::blk_mq_tag_set {
        // `set` is the first field of the `repr(C)` struct.
        self.raw.get().cast()
    }
}

impl<D: Driver> Drop for TagSet<D> {
    fn drop(&mut self) {
        // SAFETY: Set up in `new`; every queue of the set is gone (the disk, dropped first,
        // owned the only one), so this frees the requests (`exit_request` drops the PDUs) and
        // no callback runs afterwards.
        unsafe { b::blk_mq_free_tag_set(self.as_ptr()) };
        // SAFETY: The `Arc` from `new`; nothing uses `driver_data` any more.
        drop(unsafe { Arc::<D>::from_foreign((*self.as_ptr()).driver_data) });
    }
}

/// Most [`Driver::dev_attrs`]: `device_add_disk` creates them with the disk's device, from a
/// group that must stay put until `del_gendisk` has removed the files.
const MAX_DEV_ATTRS: usize = 8;

/// A gendisk and its queue; `added` once `device_add_disk` succeeded.
struct GenDisk {
    ptr: NonNull<b::gendisk>,
    added: bool,
}

impl GenDisk {
    fn queue(&self) -> *mut b::request_queue {
        // SAFETY: The disk is live while `self` is; `queue` is fixed at allocation.
        unsafe { (*self.ptr.as_ptr()).queue }
    }
}

impl Drop for GenDisk {
    fn drop(&mut self) {
        let disk = self.ptr.as_ptr();
        if self.added {
            // SAFETY: Added by `device_add_disk`; deleting it waits for openers to go away
            // and for every request to end (see `Disk`'s `Drop`).
            unsafe { b::del_gendisk(disk) };
        }
        // SAFETY: Our reference from `__blk_mq_alloc_disk`; after `del_gendisk` (or for a disk
        // never added) this is the documented release, and it also frees the queue.
        unsafe { b::put_disk(disk) };
    }
}

/// A registered disk: a tag set, and a gendisk added with `device_add_disk`, with its sysfs
/// directory `/sys/block/rdmadisk{index}/rdmadisk/`.
///
/// # Teardown
///
/// Dropping it (process context; it sleeps) removes the sysfs directory, then `del_gendisk`:
/// the disk is marked dead (new I/O fails
/// with an error at submission), dirty data is written back unless [`Disk::mark_dead`] came
/// first, and it **waits until every request has ended**. Only then are the gendisk, the queue
/// and the tag set freed, and the driver's references released.
///
/// So the driver must end (or fail) every request it owns, before or concurrently with the
/// drop, from another context: requests it holds tokens for, and also requests it requeues
/// (blk-mq dispatches them to [`Driver::queue_rq`] again while the drop waits, and they must
/// then be ended, e.g. with [`BlkStatus::IoErr`], not requeued again).
/// A driver that keeps a token, or keeps requeueing, hangs the drop; it never frees a request
/// under a token. Never drop a `Disk` from `queue_rq`, from a path that ends the disk's
/// requests (a completion handler of its transport), or from an attribute callback other
/// than a [`DiskAttr::wo_self_remove`] one.
///
/// [`BlkStatus::IoErr`]: super::BlkStatus::IoErr
/// [`DiskAttr::wo_self_remove`]: super::DiskAttr::wo_self_remove
pub(crate) struct Disk<D: Driver> {
    // Field order is teardown order (after `Drop::drop` has removed the directory):
    // `del_gendisk` and `put_disk`, then the tag set (and its `Arc` of the driver).
    gd: GenDisk,
    // After `gd`: the device keeps pointers to these until `del_gendisk`.
    _dev_groups: Pin<KBox<AttrGroups<{ MAX_DEV_ATTRS + 1 }>>>,
    _set: TagSet<D>,
    dir: Option<DiskDir<D>>,
    /// `mark_dead` was called.
    dead: AtomicBool,
}

// SAFETY: The gendisk and queue are used only through block-layer entry points that lock
// internally; the tag set is only freed in `Drop`; `D` is `Send + Sync`.
unsafe impl<D: Driver> Send for Disk<D> {}
// SAFETY: See `Send`; the `&self` methods are safe to call concurrently.
unsafe impl<D: Driver> Sync for Disk<D> {}

impl<D: Driver> Disk<D> {
    /// Creates the tag set (`cmd_size` = PDU + scatterlist array, `BLK_MQ_F_SHOULD_MERGE`),
    /// the disk with `cfg`'s limits, name, capacity and read-only flag, adds it, and creates
    /// its directory `/sys/block/rdmadisk{index}/rdmadisk/` with `attrs`.
    pub(crate) fn new(
        cfg: &DiskConfig,
        driver: Arc<D>,
        attrs: &'static DiskAttrs<D>,
    ) -> Result<Self> {
        cfg.limits.validate()?;
        if attrs.len() > MAX_DISK_ATTRS {
            return Err(EINVAL);
        }
        let name = CString::try_from_fmt(kernel::fmt!("rdmadisk{}", cfg.index))?;
        // Declared before `gd`, so dropped after it on the error paths below.
        let mut dev_groups = AttrGroups::new(D::dev_attrs().iter().map(|&a| a.attr()))?;
        let set = TagSet::<D>::new(cfg, driver.clone())?;
        let mut lim = cfg.limits.to_raw();
        // `LockClassKey` is a transparent wrapper of the C key (its own `as_ptr` is private to
        // the kernel crate).
        let lock_key = ptr::from_ref(kernel::static_lock_class!()).cast::<b::lock_class_key>();
        // SAFETY: `set` is set up; `lim` is a valid `queue_limits` (validated and completed by
        // the block layer); the queuedata is the tag set's `Arc<D>`, which outlives the queue
        // (the disk is dropped before the set); the lock class key is static (lockdep wants
        // one per call site, as the `blk_mq_alloc_disk` macro makes).
        let raw = unsafe {
            b::__blk_mq_alloc_disk(
                set.as_ptr(),
                &mut lim,
                (*set.as_ptr()).driver_data,
                lock_key.cast_mut(),
            )
        };
        let ptr = NonNull::new(kernel::error::from_err_ptr(raw)?).ok_or(ENOMEM)?;
        // Dropped before `set` on the error paths below (reverse declaration order).
        let mut gd = GenDisk { ptr, added: false };
        let disk = ptr.as_ptr();
        let bytes = name.as_bytes_with_nul();
        // SAFETY: The disk is not added yet, so it is ours alone.
        let dst = unsafe { &mut (*disk).disk_name };
        if bytes.len() > dst.len() {
            return Err(EINVAL);
        }
        for (d, s) in dst.iter_mut().zip(bytes) {
            *d = *s as ffi::c_char;
        }
        // SAFETY: As above; `FOPS` is static.
        unsafe {
            (*disk).fops = &FOPS.0;
            b::set_capacity(disk, cfg.capacity_sectors);
            b::set_disk_ro(disk, cfg.read_only);
        }
        // SAFETY: `disk` is allocated, and `gd` drops it only after `early` is gone (consumed
        // by `add_disk` below).
        let early = unsafe { EarlyDir::new(disk, driver, attrs) }?;
        let list = dev_groups.as_mut().list();
        // SAFETY: A fully set up disk of a blk-mq queue; no parent device; the groups (of
        // `DevAttr<D>`s, whose callbacks find `D` in the queue's `queuedata`) live until after
        // `del_gendisk` (`_dev_groups` drops after `gd`).
        let (ret, dir) =
            early.add_disk(|| unsafe { b::device_add_disk(ptr::null_mut(), disk, list) });
        kernel::error::to_result(ret)?;
        gd.added = true;
        let mut this = Self {
            gd,
            _dev_groups: dev_groups,
            _set: set,
            dir: None,
            dead: AtomicBool::new(false),
        };
        // Made inside `device_add_disk` (before its add uevent) or just after it. On failure,
        // dropping `this` deletes the disk again.
        this.dir = Some(dir.ok_or(EINVAL)??);
        Ok(this)
    }

    /// Reruns every hardware queue, asynchronously (`blk_mq_run_hw_queues(q, true)`): after
    /// resources that made `queue_rq` return [`BlkStatus::Resource`] came back. Any context.
    ///
    /// [`BlkStatus::Resource`]: super::BlkStatus::Resource
    pub(crate) fn run_queues(&self) {
        // SAFETY: The queue lives as long as `self`.
        unsafe { b::blk_mq_run_hw_queues(self.gd.queue(), true) };
    }

    /// Runs the requeue list now (`blk_mq_kick_requeue_list`), after [`Rq::requeue`]s without
    /// `kick`. Any context.
    ///
    /// [`Rq::requeue`]: super::Rq::requeue
    pub(crate) fn kick_requeue_list(&self) {
        // SAFETY: The queue lives as long as `self`.
        unsafe { b::blk_mq_kick_requeue_list(self.gd.queue()) };
    }

    /// Changes the capacity of the live disk (`set_capacity_and_notify`): the block layer's
    /// size, a kernel log line, and a `RESIZE=1` change uevent. Nothing on a disk marked dead:
    /// its capacity stays 0, and this returns false. Process context (the uevent allocates).
    pub(crate) fn resize(&self, sectors: u64) -> bool {
        if self.dead.load(Ordering::Acquire) {
            return false;
        }
        // SAFETY: The disk is added and lives as long as `self`.
        unsafe { b::set_capacity_and_notify(self.gd.ptr.as_ptr(), sectors) };
        true
    }

    /// Marks the disk dead (`blk_mark_disk_dead`), for a force-unmap or a target that is gone:
    /// new I/O fails at submission, filesystems are told of the surprise removal, and its
    /// capacity reads 0. Requests already queued still reach `queue_rq` (end them with an
    /// error). Irreversible; later calls do nothing. Process context.
    pub(crate) fn mark_dead(&self) {
        if !self.dead.swap(true, Ordering::AcqRel) {
            // SAFETY: The disk is added and lives as long as `self`.
            unsafe { b::blk_mark_disk_dead(self.gd.ptr.as_ptr()) };
        }
    }

    /// Whether the disk (or one of its partitions) is open now: by a process or a mounted
    /// filesystem (`disk_openers`). A snapshot: it may be opened right after, which a
    /// following drop still handles (the opener's I/O fails).
    pub(crate) fn is_open(&self) -> bool {
        // SAFETY: The disk is added and lives as long as `self`; this reads an atomic count.
        unsafe { b::rdmadisk_disk_openers(self.gd.ptr.as_ptr()) != 0 }
    }

    /// Changes blk-mq's request timeout ([`DiskConfig::timeout_ms`]) for requests started from
    /// now on (`blk_queue_rq_timeout`); 0 is ignored.
    pub(crate) fn set_timeout_ms(&self, ms: u32) {
        if ms == 0 {
            return;
        }
        // SAFETY: A pure conversion.
        let j = unsafe { b::rdmadisk_msecs_to_jiffies(ms) };
        // SAFETY: The queue lives as long as `self`; the timeout is a plain store.
        unsafe { b::blk_queue_rq_timeout(self.gd.queue(), u32::try_from(j).unwrap_or(u32::MAX)) };
    }
}

impl<D: Driver> Drop for Disk<D> {
    fn drop(&mut self) {
        // The directory first: its attributes may use the driver while they run, and it goes
        // away with the disk's device anyway. Waits for running callbacks, except the
        // self-removing one that may be dropping us (see `DiskDir`).
        drop(self.dir.take());
        // The fields now drop in order: `del_gendisk` + `put_disk`, the tag set (and its `Arc`).
    }
}
