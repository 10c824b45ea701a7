//! The mapped disks: `ctl/devices`, turning what the user typed into one of them, and the
//! files of one disk's directory.

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::sysfs::{self, Sysfs};

/// Block devices the module creates are `rdmadisk<N>`.
pub const DEVICE_PREFIX: &str = "rdmadisk";

/// One line of `ctl/devices`: `rdmadisk<N> <name> <ip:port> <export> <state>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// `rdmadisk<N>`.
    pub device: String,
    pub index: u32,
    /// The name given at map time.
    pub name: String,
    /// `ip:port` of the target's RDMA listener.
    pub address: String,
    pub export: String,
    pub state: String,
}

impl Device {
    /// How a disk is named in messages.
    pub fn label(&self) -> String {
        format!("{} ({})", self.device, self.name)
    }
}

/// The `N` of `rdmadisk<N>`, for a well-formed device name.
fn device_index(dev: &str) -> Option<u32> {
    let n = dev.strip_prefix(DEVICE_PREFIX)?;
    // Digits only: `u32::from_str` would also take "+1", and "01" is not a name the kernel gives.
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || (n.len() > 1 && n.starts_with('0'))
    {
        return None;
    }
    n.parse().ok()
}

/// Parses `ctl/devices`. Fields past the fifth are ignored, so that a module that adds one
/// does not break this tool.
pub fn parse_devices(text: &str) -> Result<Vec<Device>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        if f.is_empty() {
            continue;
        }
        let [device, name, address, export, state, ..] = f[..] else {
            return Err(format!(
                "line {}: expected 'rdmadiskN name ip:port export state', got '{line}'",
                i + 1
            ));
        };
        let index = device_index(device)
            .ok_or_else(|| format!("line {}: '{device}' is not an rdmadisk device", i + 1))?;
        out.push(Device {
            device: device.to_owned(),
            index,
            name: name.to_owned(),
            address: address.to_owned(),
            export: export.to_owned(),
            state: state.to_owned(),
        });
    }
    Ok(out)
}

/// The mapped disks, in the order of `ctl/devices` (by index).
pub fn list(sysfs: &Sysfs) -> Result<Vec<Device>> {
    sysfs.check_loaded()?;
    let path = sysfs.ctl_file("devices");
    let text = sysfs::read(&path)?;
    parse_devices(&text).map_err(|msg| Error::Parse { path, msg })
}

/// The disk `wanted` names: `rdmadiskN`, `/dev/rdmadiskN`, or a map name. A device name wins
/// over a map name that looks the same, as the kernel's own name is the unambiguous one.
pub fn resolve<'a>(devices: &'a [Device], wanted: &str) -> Result<&'a Device> {
    let bare = wanted.strip_prefix("/dev/").unwrap_or(wanted);
    devices
        .iter()
        .find(|d| d.device == bare)
        .or_else(|| devices.iter().find(|d| d.name == wanted))
        .ok_or_else(|| Error::NoDisk {
            wanted: wanted.to_owned(),
            mapped: devices.iter().map(Device::label).collect(),
        })
}

/// One mapped disk and its directory of files.
#[derive(Debug, Clone)]
pub struct Disk {
    pub dev: Device,
    pub dir: PathBuf,
    /// blk-mq's directory of the disk (`inflight` is there).
    pub block_dir: PathBuf,
}

impl Disk {
    /// Finds the disk `wanted` names; it must have its block device.
    pub fn open(sysfs: &Sysfs, wanted: &str) -> Result<Disk> {
        let devices = list(sysfs)?;
        let dev = resolve(&devices, wanted)?.clone();
        let disk = Disk::of(sysfs, dev);
        if !disk.dir.is_dir() {
            // Listed while its first connection is being set up (or torn down): the block
            // device and its files come and go with it.
            return Err(Error::NoBlockDevice {
                disk: disk.dev.label(),
                state: disk.dev.state,
            });
        }
        Ok(disk)
    }

    /// The disk of a `ctl/devices` line, whether or not its directory is there.
    pub fn of(sysfs: &Sysfs, dev: Device) -> Disk {
        Disk {
            dir: sysfs.disk_dir(&dev.device),
            block_dir: sysfs.block_dir(&dev.device),
            dev,
        }
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A file's value without its newline.
    pub fn read(&self, name: &str) -> Result<String> {
        Ok(sysfs::read(&self.file(name))?.trim_end().to_owned())
    }

    /// As [`Disk::read`], `None` when the module does not have the file.
    pub fn read_optional(&self, name: &str) -> Result<Option<String>> {
        Ok(sysfs::read_optional(&self.file(name))?.map(|s| s.trim_end().to_owned()))
    }

    pub fn write(&self, name: &str, value: &str) -> Result<()> {
        sysfs::write(&self.file(name), value, value)
    }

    /// Requests in flight, from blk-mq's `inflight` ("reads writes"); `None` when unknown.
    pub fn inflight(&self) -> Option<u64> {
        let text = sysfs::read_optional(&self.block_dir.join("inflight")).ok()??;
        let mut sum = 0u64;
        for f in text.split_ascii_whitespace() {
            sum += f.parse::<u64>().ok()?;
        }
        Some(sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEVICES: &str = "rdmadisk0 d1 192.0.2.2:7700 vol0 live\n\
                           rdmadisk1 rdmadisk0 192.0.2.3:7700 vol1 reconnecting\n\
                           rdmadisk2 d3 192.0.2.2:7700 vol2 connecting extra\n";

    #[test]
    fn devices_lines_parse() {
        let d = parse_devices(DEVICES).unwrap();
        assert_eq!(d.len(), 3);
        assert_eq!(
            d[0],
            Device {
                device: "rdmadisk0".into(),
                index: 0,
                name: "d1".into(),
                address: "192.0.2.2:7700".into(),
                export: "vol0".into(),
                state: "live".into(),
            }
        );
        assert_eq!(d[1].state, "reconnecting");
        assert_eq!(d[2].index, 2);
        assert_eq!(d[2].state, "connecting");
        assert_eq!(parse_devices("").unwrap(), vec![]);
        assert_eq!(parse_devices("\n").unwrap(), vec![]);
    }

    #[test]
    fn bad_devices_lines_are_refused() {
        let e = parse_devices("rdmadisk0 d1 192.0.2.2:7700 vol0\n").unwrap_err();
        assert!(e.starts_with("line 1: expected"), "{e}");
        for dev in ["sda", "rdmadisk", "rdmadisk+1", "rdmadisk01", "rdmadiskx"] {
            let line = format!("{dev} d1 1.2.3.4:1 e live");
            assert!(parse_devices(&line).is_err(), "{dev}");
        }
    }

    #[test]
    fn disks_resolve_by_device_path_or_name() {
        let d = parse_devices(DEVICES).unwrap();
        assert_eq!(resolve(&d, "rdmadisk2").unwrap().name, "d3");
        assert_eq!(resolve(&d, "/dev/rdmadisk2").unwrap().name, "d3");
        assert_eq!(resolve(&d, "d1").unwrap().device, "rdmadisk0");
        // The device rdmadisk0 wins over the disk whose map name is "rdmadisk0".
        assert_eq!(resolve(&d, "rdmadisk0").unwrap().name, "d1");
        // "/dev/" names a device, never a map name.
        assert!(resolve(&d, "/dev/d1").is_err());
    }

    #[test]
    fn unknown_disks_list_the_mapped_ones() {
        let d = parse_devices(DEVICES).unwrap();
        let e = resolve(&d, "rdmadisk7").unwrap_err();
        assert_eq!(
            e.to_string(),
            "no disk 'rdmadisk7'; mapped: rdmadisk0 (d1), rdmadisk1 (rdmadisk0), rdmadisk2 (d3)"
        );
    }
}
