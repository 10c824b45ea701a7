// SPDX-License-Identifier: GPL-2.0

//! The control directory, `/sys/class/rdmadisk/ctl/`: driver-wide state and its attributes.

use core::fmt::Write;
use kernel::{c_str, new_mutex, prelude::*, sync::Arc, sync::Mutex};

use crate::kapi::sysfs::{Attr, ShowBuf};
use crate::map::{self, DiskTable};

/// Longest RDMA device name we keep (IB_DEVICE_NAME_MAX).
pub(crate) const DEV_NAME_MAX: usize = 64;

/// An RDMA device name, copied out of the device so it can outlive it.
#[derive(Clone, Copy)]
pub(crate) struct DevName {
    bytes: [u8; DEV_NAME_MAX],
    len: usize,
}

impl DevName {
    pub(crate) fn new(name: &[u8]) -> Self {
        let len = name.len().min(DEV_NAME_MAX);
        let mut bytes = [0; DEV_NAME_MAX];
        bytes[..len].copy_from_slice(&name[..len]);
        Self { bytes, len }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// How many RDMA devices the driver tracks at once; a host has a handful.
const MAX_IB_DEVICES: usize = 32;

/// Driver-wide state shared by the control attributes and the RDMA device watcher.
#[pin_data]
pub(crate) struct Ctl {
    /// RDMA devices present now. A fixed table, so that tracking them never allocates.
    #[pin]
    ib_devices: Mutex<[Option<DevName>; MAX_IB_DEVICES]>,
    /// The mapped disks.
    pub(crate) disks: Arc<DiskTable>,
}

impl Ctl {
    pub(crate) fn new(disks: Arc<DiskTable>) -> impl PinInit<Self> {
        pin_init!(Self {
            ib_devices <- new_mutex!([None; MAX_IB_DEVICES], "rdmadisk::ctl::ib_devices"),
            disks,
        })
    }

    /// Records a new RDMA device; `ENOSPC` when the table is full.
    pub(crate) fn ib_device_added(&self, name: DevName) -> Result {
        let mut devs = self.ib_devices.lock();
        let slot = devs.iter_mut().find(|d| d.is_none()).ok_or(ENOSPC)?;
        *slot = Some(name);
        Ok(())
    }

    pub(crate) fn ib_device_removed(&self, name: &DevName) {
        for slot in self.ib_devices.lock().iter_mut() {
            if slot
                .as_ref()
                .is_some_and(|d| d.as_bytes() == name.as_bytes())
            {
                *slot = None;
            }
        }
    }

    fn show_ib_devices(&self, out: &mut ShowBuf<'_>) -> Result {
        for dev in self.ib_devices.lock().iter().flatten() {
            let name = core::str::from_utf8(dev.as_bytes()).unwrap_or("?");
            writeln!(out, "{name}").map_err(|_| EFBIG)?;
        }
        Ok(())
    }

    fn show_version(&self, out: &mut ShowBuf<'_>) -> Result {
        writeln!(
            out,
            "{} protocol {}",
            crate::VERSION,
            crate::proto::wire::VERSION
        )
        .map_err(|_| EFBIG)
    }
}

static IB_DEVICES: Attr<Ctl> = Attr::ro(c_str!("ib_devices"), Ctl::show_ib_devices);
static VERSION: Attr<Ctl> = Attr::ro(c_str!("version"), Ctl::show_version);
// Both lines may carry keys (`secret=`, `target_secret=`).
static PROBE: Attr<Ctl> = Attr::wo_wiped(c_str!("probe"), |_, input| crate::probe::probe(input));
static MAP_DEVICE: Attr<Ctl> = Attr::wo_wiped(c_str!("map_device"), |ctl, input| {
    map::map_device(&ctl.disks, input)
});
static DEVICES: Attr<Ctl> = Attr::ro(c_str!("devices"), |ctl, out| ctl.disks.show(out));

/// The attributes of `/sys/class/rdmadisk/ctl/`.
pub(crate) static ATTRS: &[&Attr<Ctl>] = &[&IB_DEVICES, &VERSION, &PROBE, &MAP_DEVICE, &DEVICES];
