//! A fake sysfs tree for running the built binary against (`RDMADISK_SYSFS`).
//!
//! The tree is regular files, so what the kernel would do on a write is played by the test:
//! `ctl/devices` is written up front, and a kernel refusal is a link to /dev/full, whose
//! writes fail (ENOSPC) as a store handler's would.

// Each test binary uses its own part of this.
#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output};

pub const BIN: &str = env!("CARGO_BIN_EXE_rdmadiskctl");

pub const TELEMETRY_READ: &str = "ios=400\nbytes=1638400\nerrors=0\ncredit_waits=1\n\
                              lat_us_sum=3648000\nwire_us_sum=3200000\n\
                              lat_us=12:3 13:390 14:7\nwire_us=12:10 13:390\n";
pub const TELEMETRY_IDLE: &str = "ios=0\nbytes=0\nerrors=0\ncredit_waits=0\n\
                              lat_us_sum=0\nwire_us_sum=0\nlat_us=\nwire_us=\n";

pub struct Fake {
    pub dir: tempfile::TempDir,
}

impl Fake {
    /// An empty root: the module is not loaded.
    pub fn unloaded() -> Fake {
        Fake {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// The module loaded with two disks: rdmadisk0 "d1" live on RDMA with some I/O, and
    /// rdmadisk1 "d2" still connecting (no block device yet).
    pub fn loaded() -> Fake {
        let f = Fake::unloaded();
        let ctl = f.ctl();
        fs::create_dir_all(&ctl).unwrap();
        for (name, v) in [
            (
                "devices",
                "rdmadisk0 d1 192.0.2.2:7700 vol0 live\nrdmadisk1 d2 192.0.2.3:7700 vol1 connecting\n",
            ),
            ("map_device", ""),
            ("version", "0.1.0\n"),
            ("ib_devices", "rxe0\n"),
        ] {
            fs::write(ctl.join(name), v).unwrap();
        }
        let d = f.disk_dir("rdmadisk0");
        fs::create_dir_all(&d).unwrap();
        for (name, v) in [
            ("name", "d1"),
            ("export", "vol0"),
            ("address", "192.0.2.2:7700"),
            ("port", "7700"),
            ("tcp_port", "7701"),
            ("queues", "2"),
            ("poll_queues", "0"),
            ("ro", "0"),
            ("secret", "none"),
            ("state", "live"),
            ("active_transport", "rdma"),
            ("session", "rdma"),
            ("io_timeout_ms", "30000"),
            ("max_credits", "32"),
            ("transport", "auto"),
            ("telemetry", "1"),
            (
                "stats",
                "reads=400\nwrites=0\nread_bytes=1638400\nwrite_bytes=0\nio_errors=0\nfailovers=0",
            ),
            ("unmap", ""),
            ("telemetry_reset", ""),
        ] {
            fs::write(d.join(name), format!("{v}\n")).unwrap();
        }
        for name in ["unmap", "telemetry_reset"] {
            fs::set_permissions(d.join(name), fs::Permissions::from_mode(0o200)).unwrap();
        }
        for via in ["rdma", "tcp"] {
            for op in ["read", "write", "flush", "discard", "write_zeroes"] {
                let v = if (via, op) == ("rdma", "read") {
                    TELEMETRY_READ
                } else {
                    TELEMETRY_IDLE
                };
                fs::write(d.join(format!("telemetry_{via}_{op}")), v).unwrap();
            }
        }
        fs::write(
            f.dir.path().join("block/rdmadisk0/inflight"),
            "       3        1\n",
        )
        .unwrap();
        f
    }

    pub fn ctl(&self) -> PathBuf {
        self.dir.path().join("class/rdmadisk/ctl")
    }

    pub fn disk_dir(&self, dev: &str) -> PathBuf {
        self.dir.path().join("block").join(dev).join("rdmadisk")
    }

    pub fn run(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .env("RDMADISK_SYSFS", self.dir.path())
            .output()
            .unwrap()
    }
}
