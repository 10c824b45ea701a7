// SPDX-License-Identifier: GPL-2.0

//! Mapping and unmapping disks: `ctl/map_device`, `ctl/devices`, and the table of mapped
//! disks, whose slot number is the `N` of `/dev/rdmadiskN`.

use core::fmt::Write;
use kernel::{c_str, new_mutex, prelude::*, str::CString, sync::Arc, sync::Mutex};

use crate::disk::{DiskDev, DiskParams, Registry, ATTRS};
use crate::kapi::blk_mq::{Disk, DiskConfig, Limits};
use crate::kapi::debugfs;
use crate::kapi::frwr::MR_PAGE_SIZE;
use crate::kapi::sysfs::ShowBuf;
use crate::kapi::work::ReclaimQueue;
use crate::paths::Paths;
use crate::proto::options::{Key, Options};
use crate::proto::wire::{features, SECTOR_SHIFT};
use crate::rdma_queue::{MAX_IO_BYTES, QUEUE_DEPTH};

/// Disks one host maps at most.
pub(crate) const MAX_DISKS: usize = 32;

/// The mapped disks. Each entry holds its disk alive; removing it is the last step of an
/// unmap.
#[pin_data]
pub(crate) struct DiskTable {
    #[pin]
    disks: Mutex<[Option<Arc<DiskDev>>; MAX_DISKS]>,
    /// Where the disks' session work runs.
    session_wq: Arc<ReclaimQueue>,
    /// Where the disks' TCP send and receive work runs: a queue of its own, since the session
    /// work waits for it when it tears a connection down, and a work item must not wait for
    /// another on the same reclaim queue (both could need its one rescuer thread).
    io_wq: Arc<ReclaimQueue>,
    /// `/sys/kernel/debug/rdmadisk/`, the parent of each disk's fault switches.
    debugfs: debugfs::Dir<()>,
}

impl Registry for DiskTable {
    fn remove(&self, index: u32) {
        if let Some(slot) = self.disks.lock().get_mut(index as usize) {
            *slot = None;
        }
    }
}

impl DiskTable {
    pub(crate) fn new() -> Result<Arc<Self>> {
        let session_wq = Arc::new(ReclaimQueue::new(c_str!("rdmadisk"))?, GFP_KERNEL)?;
        let io_wq = Arc::new(ReclaimQueue::new_io(c_str!("rdmadisk_io"))?, GFP_KERNEL)?;
        Arc::pin_init(
            pin_init!(Self {
                disks <- new_mutex!([const { None }; MAX_DISKS], "rdmadisk::map::disks"),
                session_wq,
                io_wq,
                debugfs: debugfs::Dir::new(c_str!("rdmadisk"), None, None, &[]),
            }),
            GFP_KERNEL,
        )
    }

    /// Takes the lowest free index for a new disk; `EEXIST` if the name is mapped.
    fn insert(self: &Arc<Self>, mut p: DiskParams) -> Result<Arc<DiskDev>> {
        let mut disks = self.disks.lock();
        if disks.iter().flatten().any(|d| d.name() == p.name.as_str()) {
            pr_err!("map_device: {} is already mapped\n", p.name.as_str());
            return Err(EEXIST);
        }
        // One read-write mapping of an export per target at a time: the target fences per
        // client host and export, so a second one would be a second writer the first knows
        // nothing of, and the newer would supersede the older (docs/design.md, "The fence
        // invariant").
        let shares_a_target = |d: &DiskDev| {
            d.paths()
                .addrs()
                .iter()
                .any(|a| p.paths.addrs().iter().any(|b| a.rdma.addr == b.rdma.addr))
        };
        if let Some(d) = disks
            .iter()
            .flatten()
            .find(|d| !p.read_only && !d.read_only && d.export() == p.export && shares_a_target(d))
        {
            pr_err!(
                "map_device: export {} at {} is mapped read-write already, as rdmadisk{} ({})\n",
                p.export,
                d.peer(),
                d.index,
                d.name()
            );
            return Err(EBUSY);
        }
        let Some(index) = disks.iter().position(Option::is_none) else {
            pr_err!("map_device: {MAX_DISKS} disks are mapped already\n");
            return Err(ENOSPC);
        };
        p.index = index as u32;
        let dev = DiskDev::new(p, self.clone(), self.session_wq.clone(), self.io_wq.clone())?;
        disks[index] = Some(dev.clone());
        Ok(dev)
    }

    /// Disk `index`, if mapped.
    pub(crate) fn get(&self, index: u32) -> Option<Arc<DiskDev>> {
        self.disks.lock().get(index as usize).and_then(Clone::clone)
    }

    /// Calls `f` for each mapped disk, outside the table's lock.
    pub(crate) fn each(&self, mut f: impl FnMut(&Arc<DiskDev>)) {
        for index in 0..MAX_DISKS as u32 {
            if let Some(d) = self.get(index) {
                f(&d);
            }
        }
    }

    /// Unmaps disk `index` (see [`DiskDev::delete`]).
    pub(crate) fn delete(&self, index: u32, force: bool) -> Result {
        self.get(index).ok_or(ENODEV)?.delete(force)
    }

    /// Unmaps every disk, at module unload. A disk that is open cannot be here: its opener
    /// holds a reference on the module.
    pub(crate) fn delete_all(&self) {
        for index in 0..MAX_DISKS as u32 {
            if let Err(e) = self.delete(index, false) {
                if e != ENODEV {
                    pr_err!("unload: rdmadisk{index} stays: {e:?}\n");
                }
            }
        }
    }

    /// `ctl/devices`: one line per disk.
    pub(crate) fn show(&self, out: &mut ShowBuf<'_>) -> Result {
        for d in self.disks.lock().iter().flatten() {
            writeln!(
                out,
                "rdmadisk{} {} {} {} {}",
                d.index,
                d.name(),
                d.peer(),
                d.export(),
                d.state_name()
            )
            .map_err(|_| EFBIG)?;
        }
        Ok(())
    }
}

/// Handles a `map_device` write: `name= (addr= [port=] [tcp_port=] | target=ADDR[:PORT[:TCP_PORT]],...)
/// export= [ro] [queues=] [poll_queues=] [secret= [target_secret=]]`.
pub(crate) fn map_device(table: &Arc<DiskTable>, input: &[u8]) -> Result {
    let opts = Options::parse(input)
        .and_then(|o| {
            // `addr` is there with either `addr=` or `target=`.
            o.require(&[Key::Name, Key::Addr, Key::Export])?;
            Ok(o)
        })
        .map_err(|e| {
            pr_err!("map_device: {e}\n");
            EINVAL
        })?;
    let targets = opts.target_list().map_err(|e| {
        pr_err!("map_device: {e}\n");
        EINVAL
    })?;
    let (Some(name), Some(export)) = (opts.name, opts.export) else {
        return Err(EINVAL);
    };
    let params = DiskParams {
        index: 0,
        name,
        export,
        paths: Paths::new(&targets),
        read_only: opts.read_only,
        secret: opts.secret,
        target_secret: opts.target_secret,
        // The parser keeps the sum within MAX_QUEUES.
        nr_queues: opts.queues.unwrap_or(1) + opts.poll_queues.unwrap_or(0),
        nr_poll_queues: opts.poll_queues.unwrap_or(0),
    };
    let dev = table.insert(params)?;
    let res = attach(table, &dev);
    if let Err(e) = res {
        pr_err!(
            "{}: mapping {} at {} failed: {e:?}\n",
            dev.name(),
            dev.export(),
            dev.peer()
        );
        dev.abort();
    }
    res
}

/// Connects `dev` and adds its block device.
fn attach(table: &DiskTable, dev: &Arc<DiskDev>) -> Result {
    let name = CString::try_from_fmt(kernel::fmt!("rdmadisk{}", dev.index))?;
    dev.start(&name, &table.debugfs);
    let attached = dev.wait_attached()?;
    let reply = attached.reply;
    let lbs = reply.logical_block_size;
    if !(512..=4096).contains(&lbs) || !lbs.is_power_of_two() {
        pr_err!(
            "{}: the target's block size {lbs} is not supported\n",
            dev.name()
        );
        return Err(EINVAL);
    }
    // Whole pages, so that every request's pages fit the MRs of any later connection too.
    let max_io = reply
        .max_io_bytes
        .min(MAX_IO_BYTES)
        .min(attached.max_io_bytes)
        / MR_PAGE_SIZE
        * MR_PAGE_SIZE;
    if max_io < MR_PAGE_SIZE.max(lbs) {
        pr_err!(
            "{}: the target's largest request ({} bytes) is too small\n",
            dev.name(),
            reply.max_io_bytes
        );
        return Err(EINVAL);
    }
    dev.set_max_io_bytes(max_io);
    let feat = reply.features;
    let read_only = dev.read_only || feat & features::READ_ONLY != 0;
    let cfg = DiskConfig {
        index: dev.index,
        nr_hw_queues: u32::from(dev.nr_queues()),
        nr_poll_queues: u32::from(dev.nr_poll_queues()),
        queue_depth: u32::from(QUEUE_DEPTH),
        timeout_ms: dev.io_timeout_ms(),
        capacity_sectors: reply.capacity_sectors,
        read_only,
        limits: Limits {
            logical_block_size: lbs,
            physical_block_size: reply.physical_block_size.max(lbs),
            max_hw_sectors: max_io >> SECTOR_SHIFT,
            // One more page for a request that does not start on a page boundary.
            max_segments: (max_io / MR_PAGE_SIZE) as u16 + 1,
            max_segment_size: max_io,
            // Segments may not cross an MR page boundary except at its edges.
            virt_boundary_mask: u64::from(MR_PAGE_SIZE - 1),
            write_cache: feat & features::FLUSH != 0,
            fua: feat & features::FUA != 0,
            max_discard_sectors: if feat & features::DISCARD != 0 {
                reply.max_discard_sectors
            } else {
                0
            },
            max_write_zeroes_sectors: if feat & features::WRITE_ZEROES != 0 {
                max_io >> SECTOR_SHIFT
            } else {
                0
            },
        },
        numa_node: kernel::bindings::NUMA_NO_NODE,
        // The TCP queues send a request from `queue_rq` when they can, as nvme-tcp does,
        // which takes the socket's lock; the RDMA queues never sleep there either way.
        blocking: true,
    };
    let disk = Disk::new(&cfg, dev.clone(), ATTRS)?;
    pr_info!(
        "{}: mapped export {} at {} as rdmadisk{}: {} sectors, block size {lbs}, {} queue(s) ({} polled), features {feat:#x}{}\n",
        dev.name(),
        dev.export(),
        dev.peer(),
        dev.index,
        reply.capacity_sectors,
        dev.nr_queues(),
        dev.nr_poll_queues(),
        if read_only { ", read-only" } else { "" }
    );
    dev.set_disk(disk);
    Ok(())
}
