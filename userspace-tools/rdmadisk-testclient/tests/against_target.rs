//! The test client against the real target over TCP on the loopback (the target binary is
//! the workspace sibling of this package's binary; `cargo test` at the workspace root builds
//! both).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn target_bin() -> Option<PathBuf> {
    let p =
        PathBuf::from(env!("CARGO_BIN_EXE_rdmadisk-testclient")).with_file_name("rdmadisk-target");
    p.exists().then_some(p)
}

/// The process, its address, and the temp dir kept alive while it runs.
struct Target(Child, String, #[allow(dead_code)] tempfile::TempDir);

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(extra: &[&str]) -> Option<Target> {
    let Some(bin) = target_bin() else {
        eprintln!("rdmadisk-target not built next to the test client; run `cargo test` at the workspace root");
        return None;
    };
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d.img");
    std::fs::write(&img, vec![0u8; 16 << 20]).unwrap();
    // Loopback may attach, unless the test says who may.
    let who: &[&str] = if extra.contains(&"--allow") {
        &[]
    } else {
        &["--allow", "127.0.0.0/8"]
    };
    let child = Command::new(bin)
        .args([
            "--listen",
            "127.0.0.1",
            "--tcp-port",
            "0",
            "--no-rdma",
            "--export",
        ])
        .arg(format!("disk0={}", img.display()))
        .args(who)
        .args(extra)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut t = Target(child, String::new(), dir);
    let mut lines = BufReader::new(t.0.stdout.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let line = lines.next().unwrap().unwrap();
        if let Some(a) = line.strip_prefix("rdmadisk-target: tcp listening on ") {
            t.1 = a.trim().to_string();
            std::thread::spawn(move || for _ in lines.by_ref() {});
            return Some(t);
        }
    }
    panic!("target did not start");
}

fn client(t: &Target, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rdmadisk-testclient"))
        .args(["--transport", "tcp", "--target", &t.1])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn verified_workload_with_large_pipelined_ios() {
    let Some(t) = start(&["--credits", "4"]) else {
        return;
    };
    // 1 MiB reads and writes at queue depth 8: responses must be read while requests are
    // still being written, or client and target deadlock on full socket buffers.
    let (ok, out) = client(
        &t,
        &[
            "--count",
            "300",
            "--queue-depth",
            "8",
            "--min-size",
            "262144",
            "--negative",
        ],
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("credits: initial=4 max_in_flight=4 exceeded=no"),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("RESULT: ") && l.ends_with(", 0 failed")),
        "{out}"
    );
}

#[test]
fn corruption_is_detected() {
    let Some(t) = start(&["--corrupt-read-every", "5"]) else {
        return;
    };
    let (ok, out) = client(&t, &["--count", "100", "--read-pct", "70"]);
    assert!(!ok, "{out}");
    assert!(!out.contains("read_crc_mismatches=0"), "{out}");
}

#[test]
fn refusals() {
    let Some(t) = start(&["--allow", "127.0.0.2"]) else {
        return;
    };
    let (ok, out) = client(
        &t,
        &["--bind", "127.0.0.3", "--expect-refused", "not-allowed"],
    );
    assert!(ok, "{out}");
    let (ok, out) = client(
        &t,
        &[
            "--bind",
            "127.0.0.2",
            "--export",
            "nope",
            "--expect-refused",
            "no-such-export",
        ],
    );
    assert!(ok, "{out}");
    let (ok, out) = client(&t, &["--bind", "127.0.0.2", "--count", "20"]);
    assert!(ok, "{out}");
}

/// `--made-up-sessions`: every attempt from an ordinary port on an export without a key is
/// refused, and the mode says so; on an insecure export the same attempts get in, and the
/// mode fails (it can tell).
#[test]
fn made_up_sessions_are_refused() {
    let Some(t) = start(&[]) else {
        return;
    };
    let (ok, out) = client(&t, &["--made-up-sessions", "20", "--unreserved-port"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("attempts=20 attached=0 refused: not-allowed=20"),
        "{out}"
    );
    drop(t);
    let Some(t) = start(&["--insecure", "disk0"]) else {
        return;
    };
    let (ok, out) = client(&t, &["--made-up-sessions", "5", "--unreserved-port"]);
    assert!(!ok, "{out}");
    assert!(out.contains("attached="), "{out}");
}
