// SPDX-License-Identifier: GPL-2.0

//! Watching RDMA devices come and go (`rdma link add/delete`, NIC driver load/unload).
//!
//! Sessions will move between RDMA and TCP on these events; for now the driver records which
//! devices exist, for the control directory and the log.

use kernel::{prelude::*, sync::Arc};

use crate::ctl::{Ctl, DevName};
use crate::kapi::ib_client::{ClientOps, Device};

pub(crate) struct RdmaDevices {
    ctl: Arc<Ctl>,
}

impl RdmaDevices {
    pub(crate) fn new(ctl: Arc<Ctl>) -> Self {
        Self { ctl }
    }
}

impl ClientOps for RdmaDevices {
    type DeviceData = KBox<DevName>;

    fn add(&self, dev: &Device) -> Result<KBox<DevName>> {
        let name = KBox::new(DevName::new(dev.name().as_bytes()), GFP_KERNEL)?;
        self.ctl.ib_device_added(*name)?;
        pr_info!("RDMA device {} added\n", dev.name());
        Ok(name)
    }

    fn remove(&self, dev: &Device, name: KBox<DevName>) {
        self.ctl.ib_device_removed(&name);
        pr_info!("RDMA device {} removed\n", dev.name());
    }
}
