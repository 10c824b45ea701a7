// SPDX-License-Identifier: GPL-2.0

//! rdmadisk: block devices backed by a remote storage target over RDMA, with an in-kernel TCP
//! fallback.
//!
//! The driver's logic lives in `src/` and is safe Rust; the kernel APIs that the `kernel` crate
//! lacks are wrapped in `rust/` (the only place with `unsafe`).

#![deny(unsafe_code)]
// pin_init! of the per-disk state nests deeper than the default limit.
#![recursion_limit = "256"]

use kernel::{c_str, prelude::*, sync::Arc};

#[path = "../rust/lib.rs"]
mod kapi;

mod authn;
mod ctl;
mod disk;
mod faults;
mod host;
mod io;
mod map;
mod paths;
mod probe;
mod proto;
mod queue;
mod rdma_conn;
mod rdma_devices;
mod rdma_queue;
mod resvport;
mod stats;
mod tcp_queue;
mod telemetry;

use kapi::{ib_client, socket, sysfs};

/// The driver's version, shown with the wire protocol version in `/sys/class/rdmadisk/ctl/version`.
pub(crate) const VERSION: &str = "0.1.0";

module! {
    type: RdmaDisk,
    name: "rdmadisk",
    author: "rdmadisk developers",
    description: "Block devices on a remote target over RDMA, with TCP fallback",
    license: "GPL",
}

struct RdmaDisk {
    // Teardown order (see `drop`): the control directory goes first, so that no map can
    // start or still run; then every disk is unmapped; then the fields below drop in order:
    // stop hearing about RDMA devices, remove the class.
    ctl_dev: Option<sysfs::ClassDevice<ctl::Ctl>>,
    disks: Arc<map::DiskTable>,
    _ib: Pin<KBox<ib_client::Registration<rdma_devices::RdmaDevices>>>,
    _class: sysfs::Class,
    // Last, so that it outlives every socket (see `MemallocSocksHold`).
    _memalloc: socket::MemallocSocksHold,
}

impl kernel::Module for RdmaDisk {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let memalloc = socket::MemallocSocksHold::new();
        let disks = map::DiskTable::new()?;
        let ctl = Arc::pin_init(ctl::Ctl::new(disks.clone()), GFP_KERNEL)?;
        let devices = rdma_devices::RdmaDevices::new(ctl.clone(), disks.clone());
        let ib = ib_client::Registration::new(c_str!("rdmadisk"), devices)?;
        let class = sysfs::Class::new(c_str!("rdmadisk"))?;
        // Last: once the control files exist a map may start, and nothing after may fail.
        let ctl_dev = sysfs::ClassDevice::new(&class, c_str!("ctl"), ctl::ATTRS, ctl.clone())?;
        pr_info!("loaded\n");
        Ok(Self {
            ctl_dev: Some(ctl_dev),
            disks,
            _ib: ib,
            _class: class,
            _memalloc: memalloc,
        })
    }
}

impl Drop for RdmaDisk {
    fn drop(&mut self) {
        pr_info!("unloading\n");
        // Waits for a running `map_device` (which holds a module reference, so an unload
        // cannot even begin during one) and makes new ones impossible.
        drop(self.ctl_dev.take());
        self.disks.delete_all();
    }
}
