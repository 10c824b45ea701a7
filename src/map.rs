// SPDX-License-Identifier: GPL-2.0

//! Mapping and unmapping disks: `ctl/map_device`, `ctl/devices`, and the table of mapped
//! disks, whose slot number is the `N` of `/dev/rdmadiskN`.

use core::fmt::Write;
use kernel::{new_mutex, prelude::*, sync::Arc, sync::Mutex};

use crate::disk::{DiskDev, DiskParams, ATTRS};
use crate::kapi::blk_mq::{Disk, DiskConfig, Limits};
use crate::kapi::sysfs::ShowBuf;
use crate::proto::options::{Key, Options, DEFAULT_RDMA_PORT, DEFAULT_TCP_PORT};
use crate::proto::wire::{features, SECTOR_SHIFT};
use crate::rdma_conn::Peer;
use crate::rdma_queue::{MAX_IO_BYTES, QUEUE_DEPTH};

/// Disks one host maps at most.
pub(crate) const MAX_DISKS: usize = 32;

/// The mapped disks. Each entry holds its disk alive; removing it is the last step of an
/// unmap.
#[pin_data]
pub(crate) struct DiskTable {
    #[pin]
    disks: Mutex<[Option<Arc<DiskDev>>; MAX_DISKS]>,
}

impl DiskTable {
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                disks <- new_mutex!([const { None }; MAX_DISKS], "rdmadisk::map::disks"),
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
        let Some(index) = disks.iter().position(Option::is_none) else {
            pr_err!("map_device: {MAX_DISKS} disks are mapped already\n");
            return Err(ENOSPC);
        };
        p.index = index as u32;
        let dev = DiskDev::new(p, self.clone())?;
        disks[index] = Some(dev.clone());
        Ok(dev)
    }

    /// Drops the entry of a deleted disk.
    pub(crate) fn remove(&self, index: u32) {
        if let Some(slot) = self.disks.lock().get_mut(index as usize) {
            *slot = None;
        }
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
                d.peer,
                d.export,
                d.state_name()
            )
            .map_err(|_| EFBIG)?;
        }
        Ok(())
    }
}

/// Handles a `map_device` write: `name= addr= [port=] export= [ro] [queues=] [tcp_port=]`.
pub(crate) fn map_device(table: &Arc<DiskTable>, input: &[u8]) -> Result {
    let opts = Options::parse(input)
        .and_then(|o| {
            o.require(&[Key::Name, Key::Addr, Key::Export])?;
            Ok(o)
        })
        .map_err(|e| {
            pr_err!("map_device: {e}\n");
            EINVAL
        })?;
    let (Some(name), Some(addr), Some(export)) = (opts.name, opts.addr, opts.export) else {
        return Err(EINVAL);
    };
    let params = DiskParams {
        index: 0,
        name,
        export,
        peer: Peer {
            addr,
            port: opts.port.unwrap_or(DEFAULT_RDMA_PORT),
        },
        tcp_port: opts.tcp_port.unwrap_or(DEFAULT_TCP_PORT),
        read_only: opts.read_only,
        nr_queues: opts.queues.unwrap_or(1),
    };
    let dev = table.insert(params)?;
    let res = attach(&dev);
    if let Err(e) = res {
        pr_err!(
            "{}: mapping {} at {} failed: {e:?}\n",
            dev.name(),
            dev.export,
            dev.peer
        );
        table.remove(dev.index);
    }
    res
}

/// Connects `dev` and adds its block device.
fn attach(dev: &Arc<DiskDev>) -> Result {
    let reply = dev.connect_queues()?;
    let lbs = reply.logical_block_size;
    if !(512..=4096).contains(&lbs) || !lbs.is_power_of_two() {
        pr_err!(
            "{}: the target's block size {lbs} is not supported\n",
            dev.name()
        );
        dev.shutdown();
        return Err(EINVAL);
    }
    let max_io = reply.max_io_bytes.min(MAX_IO_BYTES);
    let feat = reply.features;
    let read_only = dev.read_only || feat & features::READ_ONLY != 0;
    let cfg = DiskConfig {
        index: dev.index,
        nr_hw_queues: u32::from(dev.nr_queues),
        queue_depth: u32::from(QUEUE_DEPTH),
        timeout_ms: dev.io_timeout_ms(),
        capacity_sectors: reply.capacity_sectors,
        read_only,
        limits: Limits {
            logical_block_size: lbs,
            physical_block_size: reply.physical_block_size.max(lbs),
            max_hw_sectors: max_io >> SECTOR_SHIFT,
            max_segments: (max_io / 4096) as u16 + 1,
            max_segment_size: max_io,
            virt_boundary_mask: 4095,
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
    };
    dev.go_live();
    let disk = match Disk::new(&cfg, dev.clone(), ATTRS) {
        Ok(d) => d,
        Err(e) => {
            dev.shutdown();
            return Err(e);
        }
    };
    pr_info!(
        "{}: mapped export {} at {} as rdmadisk{}: {} sectors, block size {lbs}, {} queue(s), features {feat:#x}{}\n",
        dev.name(),
        dev.export,
        dev.peer,
        dev.index,
        reply.capacity_sectors,
        dev.nr_queues,
        if read_only { ", read-only" } else { "" }
    );
    dev.set_disk(disk);
    Ok(())
}
