//! `show`: every readable file of a disk's directory but its statistics (which `stats`
//! shows), grouped as what the disk is, how it is doing, and its knobs.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;

use rdmadisk_proto::knobs::KNOBS;
use serde::Serialize;

use crate::disk::Disk;
use crate::error::{Error, Result};
use crate::table;

/// What the map line gave, read back (`port` and the rest only from modules that have them).
const IDENTITY: &[&str] = &[
    "name",
    "export",
    "address",
    "port",
    "tcp_port",
    "queues",
    "poll_queues",
    "ro",
    "secret",
    "serial",
    "uuid",
    "wwid",
];
/// How the disk is doing now.
const STATUS: &[&str] = &[
    "state",
    "active_transport",
    "session",
    "last_switch",
    "active_path",
    "paths",
];

/// `show --json` prints one object of file name to value (as the module writes it, without
/// its newline), grouped; a file the module does not have is left out:
///
/// ```json
/// {"disk":"rdmadisk0",
///  "identity":{"name":"d1","export":"vol0","address":"192.0.2.2:7700","port":"7700",...},
///  "status":{"state":"live","active_transport":"rdma","session":"rdma"},
///  "knobs":{"io_timeout_ms":"30000","transport":"auto",...},
///  "other":{}}
/// ```
///
/// Keys are sorted within each group; `other` holds readable files this tool does not know.
#[derive(Debug, Serialize, PartialEq, Default)]
pub struct Shown {
    pub disk: String,
    pub identity: BTreeMap<String, String>,
    pub status: BTreeMap<String, String>,
    pub knobs: BTreeMap<String, String>,
    pub other: BTreeMap<String, String>,
}

/// Files `show` leaves to `stats`.
fn is_statistics(name: &str) -> bool {
    name == "stats" || name.starts_with("telemetry_")
}

pub fn show(disk: &Disk) -> Result<Shown> {
    let mut s = Shown {
        disk: disk.dev.device.clone(),
        ..Shown::default()
    };
    let entries = fs::read_dir(&disk.dir).map_err(|err| Error::Io {
        action: "list",
        path: disk.dir.clone(),
        err,
    })?;
    for entry in entries {
        let entry = entry.map_err(|err| Error::Io {
            action: "list",
            path: disk.dir.clone(),
            err,
        })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(meta) = entry.metadata() else { continue };
        // Write-only files (`unmap`, `telemetry_reset`) have no read bit; reading them would
        // fail even as root.
        if !meta.is_file() || meta.permissions().mode() & 0o444 == 0 || is_statistics(&name) {
            continue;
        }
        let value = match fs::read_to_string(entry.path()) {
            Ok(v) => v.trim_end().to_owned(),
            // Gone since the listing: the disk is being unmapped, which `state` shows.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(err) => {
                return Err(Error::Io {
                    action: "read",
                    path: entry.path(),
                    err,
                })
            }
        };
        let group = if IDENTITY.contains(&name.as_str()) {
            &mut s.identity
        } else if STATUS.contains(&name.as_str()) {
            &mut s.status
        } else if KNOBS.iter().any(|k| k.name == name) {
            &mut s.knobs
        } else {
            &mut s.other
        };
        group.insert(name, value);
    }
    Ok(s)
}

/// Groups in a fixed order, the files within each in the order a reader expects (identity and
/// status as listed above, knobs as the module's table lists them, others sorted).
pub fn text(s: &Shown) -> String {
    let mut rows: Vec<[String; 2]> = Vec::new();
    let mut group = |title: &str, m: &BTreeMap<String, String>, order: &[&str]| {
        if m.is_empty() {
            return;
        }
        rows.push([format!("{title}:"), String::new()]);
        let known = order.iter().filter_map(|k| m.get_key_value(*k));
        let rest = m.iter().filter(|(k, _)| !order.contains(&k.as_str()));
        for (k, v) in known.chain(rest) {
            // A file of several lines (`paths`: one per target) shows a row per line.
            for (i, line) in v.lines().enumerate() {
                let key = if i == 0 {
                    format!("  {k}")
                } else {
                    String::new()
                };
                rows.push([key, line.to_owned()]);
            }
            if v.is_empty() {
                rows.push([format!("  {k}"), String::new()]);
            }
        }
    };
    let knob_order: Vec<&str> = KNOBS.iter().map(|k| k.name).collect();
    group("identity", &s.identity, IDENTITY);
    group("status", &s.status, STATUS);
    group("knobs", &s.knobs, &knob_order);
    group("other", &s.other, &[]);
    format!("{}\n{}", s.disk, table::render(&rows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::{parse_devices, Disk};
    use crate::sysfs::Sysfs;

    #[test]
    fn groups_the_readable_files_and_skips_statistics() {
        let root = tempfile::tempdir().unwrap();
        let sysfs = Sysfs::at(root.path());
        let dev = parse_devices("rdmadisk0 d1 192.0.2.2:7700 vol0 live\n").unwrap();
        let disk = Disk::of(&sysfs, dev[0].clone());
        fs::create_dir_all(&disk.dir).unwrap();
        for (f, v) in [
            ("name", "d1"),
            ("port", "7700"),
            ("state", "live"),
            ("session", "rdma"),
            (
                "paths",
                "0 192.0.2.2:7700 state=active\n1 192.0.2.3:7700 state=standby",
            ),
            ("max_credits", "32"),
            ("transport", "auto"),
            ("stats", "reads=1"),
            ("telemetry", "1"),
            ("telemetry_rdma_read", "ios=1"),
            ("future_file", "x"),
            ("unmap", ""),
        ] {
            fs::write(disk.file(f), format!("{v}\n")).unwrap();
        }
        fs::set_permissions(disk.file("unmap"), fs::Permissions::from_mode(0o200)).unwrap();
        let s = show(&disk).unwrap();
        let m = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        assert_eq!(
            s,
            Shown {
                disk: "rdmadisk0".into(),
                identity: m(&[("name", "d1"), ("port", "7700")]),
                status: m(&[
                    ("state", "live"),
                    ("session", "rdma"),
                    (
                        "paths",
                        "0 192.0.2.2:7700 state=active\n1 192.0.2.3:7700 state=standby"
                    )
                ]),
                knobs: m(&[
                    ("max_credits", "32"),
                    ("transport", "auto"),
                    ("telemetry", "1")
                ]),
                other: m(&[("future_file", "x")]),
            }
        );
        assert_eq!(
            text(&s),
            "rdmadisk0\n\
             identity:\n\
             \x20 name         d1\n\
             \x20 port         7700\n\
             status:\n\
             \x20 state        live\n\
             \x20 session      rdma\n\
             \x20 paths        0 192.0.2.2:7700 state=active\n\
             \x20              1 192.0.2.3:7700 state=standby\n\
             knobs:\n\
             \x20 max_credits  32\n\
             \x20 transport    auto\n\
             \x20 telemetry    1\n\
             other:\n\
             \x20 future_file  x\n"
        );
    }
}
