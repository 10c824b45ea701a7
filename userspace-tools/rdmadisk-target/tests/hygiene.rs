//! The target's hygiene as a process: one image is served by one target at a time, the stats
//! file is never written through a symlink, and a closed stdout is not fatal.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{simple, Target};
use rdmadisk_proto::wire::{Opcode, Status};

fn target() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rdmadisk-target"));
    c.args([
        "--listen",
        "127.0.0.1",
        "--allow",
        "127.0.0.1",
        "--allow",
        "127.0.0.1",
        "--tcp-port",
        "0",
        "--no-rdma",
    ]);
    c
}

#[test]
fn a_second_target_cannot_serve_the_same_image() {
    let t = Target::start(&[]);
    let out = target()
        .arg("--export")
        .arg(format!("x={}", t.export_path("rw").display()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a second target started: {err}");
    assert!(err.contains("locked by another program"), "{err}");
    // Read-only both ways is fine: a shared lock.
    let ro = t.export_path("ro");
    let mut a = target()
        .arg("--export-ro")
        .arg(format!("a={}", ro.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    assert!(
        a.try_wait().unwrap().is_none(),
        "a read-only share was refused"
    );
    let _ = a.kill();
    let _ = a.wait();
}

#[test]
fn the_stats_file_replaces_a_symlink_and_never_writes_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("rw.img");
    std::fs::write(&img, vec![0u8; 1 << 20]).unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let link = dir.path().join("stats");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let mut c = target()
        .arg("--stats-file")
        .arg(&link)
        .arg("--export")
        .arg(format!("rw={}", img.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while link.is_symlink() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = c.kill();
    let _ = c.wait();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert!(!link.is_symlink(), "the link was not replaced");
    assert!(std::fs::read_to_string(&link)
        .unwrap()
        .contains("requests="));
}

#[test]
fn sigusr1_with_stdout_closed_is_not_fatal() {
    let mut t = Target::start(&[]);
    t.close_stdout();
    for _ in 0..3 {
        common::signal_pid(t.pid(), "USR1");
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut c = t.connect();
    assert_eq!(simple(&mut c, Opcode::Nop, 1, 0, 0), Status::Ok);
    drop(c);
    let (ok, _) = t.stop();
    assert!(ok, "the target did not exit 0 after SIGTERM");
}

#[test]
fn a_target_that_cannot_listen_says_why() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("rw.img");
    std::fs::write(&img, vec![0u8; 1 << 20]).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_rdmadisk-target"))
        .args([
            "--listen",
            "127.0.0.1",
            "--allow",
            "127.0.0.1",
            "--tcp-port",
            &port,
            "--no-rdma",
        ])
        .arg("--export")
        .arg(format!("rw={}", img.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = String::new();
    c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(!c.wait().unwrap().success());
    assert!(err.to_lowercase().contains("address"), "{err}");
}
