//! `list`: the mapped disks, one line (or JSON object) each.

use serde::Serialize;

use crate::disk::{self, Disk};
use crate::error::Result;
use crate::sysfs::Sysfs;
use crate::table;

/// `list --json` prints `{"disks": [Entry, ...]}`, in device order:
///
/// ```json
/// {"disks":[{"device":"rdmadisk0","path":"/dev/rdmadisk0","name":"d1",
///            "address":"192.0.2.2:7700","export":"vol0","state":"live",
///            "active_transport":"rdma"}]}
/// ```
///
/// `active_transport` is `rdma`, `tcp` or `none` as the module says, and `null` while the disk
/// has no block device (its first connection is still being set up).
#[derive(Debug, Serialize, PartialEq)]
pub struct Listing {
    pub disks: Vec<Entry>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct Entry {
    pub device: String,
    pub path: String,
    pub name: String,
    pub address: String,
    pub export: String,
    pub state: String,
    pub active_transport: Option<String>,
}

pub fn listing(sysfs: &Sysfs) -> Result<Listing> {
    let mut disks = Vec::new();
    for dev in disk::list(sysfs)? {
        let d = Disk::of(sysfs, dev);
        // A disk can vanish between the two reads; it is then listed without a transport.
        let active_transport = d.read_optional("active_transport").ok().flatten();
        let dev = d.dev;
        disks.push(Entry {
            path: format!("/dev/{}", dev.device),
            device: dev.device,
            name: dev.name,
            address: dev.address,
            export: dev.export,
            state: dev.state,
            active_transport,
        });
    }
    Ok(Listing { disks })
}

pub fn text(l: &Listing) -> String {
    if l.disks.is_empty() {
        return "no rdmadisk disk is mapped\n".to_owned();
    }
    let mut rows =
        vec![["DEVICE", "NAME", "ADDRESS", "EXPORT", "STATE", "TRANSPORT"].map(String::from)];
    for e in &l.disks {
        rows.push([
            e.device.clone(),
            e.name.clone(),
            e.address.clone(),
            e.export.clone(),
            e.state.clone(),
            e.active_transport.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    table::render(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Listing {
        Listing {
            disks: vec![
                Entry {
                    device: "rdmadisk0".into(),
                    path: "/dev/rdmadisk0".into(),
                    name: "d1".into(),
                    address: "192.0.2.2:7700".into(),
                    export: "vol0".into(),
                    state: "live".into(),
                    active_transport: Some("rdma".into()),
                },
                Entry {
                    device: "rdmadisk1".into(),
                    path: "/dev/rdmadisk1".into(),
                    name: "data".into(),
                    address: "192.0.2.3:7700".into(),
                    export: "vol1".into(),
                    state: "connecting".into(),
                    active_transport: None,
                },
            ],
        }
    }

    #[test]
    fn json_shape() {
        let v = serde_json::to_value(sample()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"disks": [
                {"device": "rdmadisk0", "path": "/dev/rdmadisk0", "name": "d1",
                 "address": "192.0.2.2:7700", "export": "vol0", "state": "live",
                 "active_transport": "rdma"},
                {"device": "rdmadisk1", "path": "/dev/rdmadisk1", "name": "data",
                 "address": "192.0.2.3:7700", "export": "vol1", "state": "connecting",
                 "active_transport": null},
            ]})
        );
    }

    #[test]
    fn text_is_a_table() {
        assert_eq!(
            text(&sample()),
            "DEVICE     NAME  ADDRESS         EXPORT  STATE       TRANSPORT\n\
             rdmadisk0  d1    192.0.2.2:7700  vol0    live        rdma\n\
             rdmadisk1  data  192.0.2.3:7700  vol1    connecting  -\n"
        );
        assert_eq!(
            text(&Listing { disks: vec![] }),
            "no rdmadisk disk is mapped\n"
        );
    }
}
