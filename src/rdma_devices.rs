// SPDX-License-Identifier: GPL-2.0

//! Watching RDMA devices come and go (`rdma link add/delete`, NIC driver load/unload).
//!
//! The driver records which devices exist, for the control directory and the log, and tells
//! every disk: a disk moves its I/O to TCP when the device it uses goes, and back to RDMA
//! when a device comes (docs/design.md, "Transport switching").

use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{prelude::*, sync::Arc};

use crate::ctl::{Ctl, DevName};
use crate::kapi::ib_client::{ClientOps, Device};
use crate::map::DiskTable;

pub(crate) struct RdmaDevices {
    ctl: Arc<Ctl>,
    disks: Arc<DiskTable>,
    /// How many devices are present (`ctl/ib_devices` may not list them all).
    present: AtomicU32,
}

impl RdmaDevices {
    pub(crate) fn new(ctl: Arc<Ctl>, disks: Arc<DiskTable>) -> Self {
        Self {
            ctl,
            disks,
            present: AtomicU32::new(0),
        }
    }
}

impl ClientOps for RdmaDevices {
    type DeviceData = KBox<DevName>;

    fn add(&self, dev: &Device) -> Result<KBox<DevName>> {
        let name = KBox::new(DevName::new(dev.name().as_bytes()), GFP_KERNEL)?;
        // The list is what `ctl/ib_devices` shows; a full one must not cost the device its
        // `remove` call, which the disks need.
        if self.ctl.ib_device_added(*name).is_err() {
            pr_warn!(
                "RDMA device {} not listed in ctl/ib_devices: the list is full\n",
                dev.name()
            );
        }
        pr_info!("RDMA device {} added\n", dev.name());
        self.present.fetch_add(1, Ordering::Relaxed);
        self.disks.each(|d| d.rdma_device_added());
        Ok(name)
    }

    fn remove(&self, dev: &Device, name: KBox<DevName>) {
        // `add` ran for this device (its data is here), so the count is at least 1.
        let others = self.present.fetch_sub(1, Ordering::Relaxed) > 1;
        // Before returning: the device's unregistration waits for its resources.
        self.disks
            .each(|d| d.rdma_device_removed(dev.id(), dev.name(), others));
        self.ctl.ib_device_removed(&name);
        pr_info!("RDMA device {} removed\n", dev.name());
    }
}
