//! The target as a service: `--check-config` (what a systemd `ExecStartPre` runs), the
//! `stats` subcommand, and the readiness it reports to systemd (`Type=notify`), all on the
//! real binary.

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{signal_pid, Target};

fn target() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rdmadisk-target"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn check(args: &[&str], config: Option<&Path>) -> Output {
    let mut c = target();
    c.arg("--check-config").args(args);
    if let Some(p) = config {
        c.arg("--config").arg(p);
    }
    c.output().unwrap()
}

#[test]
fn check_config_sums_up_a_good_config_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("d.img");
    std::fs::write(&img, vec![0u8; 4 << 20]).unwrap();
    let conf = dir.path().join("t.toml");
    std::fs::write(
        &conf,
        format!(
            "listen = \"127.0.0.1\"\nallow = [\"127.0.0.1\"]\nno_rdma = true\ndirect = false\nstats_file = \"{}\"\n\
             [[export]]\nname = \"d\"\npath = \"{}\"\nread_only = true\n",
            dir.path().join("stats").display(),
            img.display()
        ),
    )
    .unwrap();
    let out = check(&[], Some(&conf));
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{so}{se}");
    assert!(so.contains("configuration ok"), "{so}");
    assert!(
        so.contains("listen: 127.0.0.1, rdma port off, tcp port 7701"),
        "{so}"
    );
    assert!(
        so.contains("export d: file") && so.contains("4194304 bytes (8192 sectors of 512)"),
        "{so}"
    );
    assert!(so.contains("read-only"), "{so}");
    // Flags are checked with the file, and win over it.
    let out = check(&["--tcp-port", "9999", "--credits", "0"], Some(&conf));
    let se = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{se}");
    assert!(se.contains("credits = 0: must be 1 to 1024"), "{se}");
    assert!(text(&out.stdout).contains("tcp port 9999"));
}

#[test]
fn check_config_lists_every_problem_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("t.toml");
    std::fs::write(
        &conf,
        format!(
            "listen = \"127.0.0.1\"\nallow = [\"127.0.0.1\"]\nno_rdma = true\ncredits = 0\nlog_level = \"loud\"\n\
             stats_file = \"{}/no/dir/stats\"\n\
             [[export]]\nname = \"gone\"\npath = \"{}/gone.img\"\n\
             [[export]]\nname = \"dir\"\npath = \"{}\"\n",
            dir.path().display(),
            dir.path().display(),
            dir.path().display()
        ),
    )
    .unwrap();
    let out = check(&[], Some(&conf));
    let se = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{se}");
    for needle in [
        "credits = 0",
        "log level \"loud\"",
        "export gone:",
        "No such file or directory",
        "export dir:",
        "not a regular file or a block device",
        "does not exist",
        "the configuration has 5 problem(s)",
    ] {
        assert!(se.contains(needle), "{needle:?} in\n{se}");
    }
    // A file that does not parse is one problem among the flags' own.
    std::fs::write(&conf, "listen = [").unwrap();
    let out = check(&["--credits", "0"], Some(&conf));
    let se = text(&out.stderr);
    assert!(se.contains("t.toml") && se.contains("credits = 0"), "{se}");
    assert!(!se.contains("no exports"), "not what the file lacks: {se}");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn check_config_takes_no_hold_beside_a_running_target() {
    let t = Target::start(&[]);
    let rw = t.export_path("rw");
    let out = check(
        &[
            "--listen",
            "127.0.0.1",
            "--allow",
            "127.0.0.1",
            "--no-rdma",
            "--export",
            &format!("rw={}", rw.display()),
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    // And the target still holds the image: a second target is refused as before.
    let second = target()
        .args([
            "--listen",
            "127.0.0.1",
            "--allow",
            "127.0.0.1",
            "--no-rdma",
            "--tcp-port",
            "0",
        ])
        .arg("--export")
        .arg(format!("x={}", rw.display()))
        .output()
        .unwrap();
    assert!(text(&second.stderr).contains("locked by another program"));
    let (ok, _) = t.stop();
    assert!(ok);
}

#[test]
fn stats_prints_the_counters_as_lines_or_json() {
    let t = Target::start(&[]);
    let _ = t.counter("requests"); // a fresh file
    let out = target()
        .arg("stats")
        .arg("--stats-file")
        .arg(t.stats_path())
        .output()
        .unwrap();
    let so = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(so.lines().any(|l| l == "requests=0"), "{so}");
    assert!(
        so.lines().any(|l| l.starts_with("tcp_connections=")),
        "{so}"
    );
    let out = target()
        .args(["stats", "--json", "--stats-file"])
        .arg(t.stats_path())
        .output()
        .unwrap();
    let json = text(&out.stdout);
    assert!(out.status.success());
    assert!(
        json.starts_with("{\"stats_file\":") && json.trim_end().ends_with("}}"),
        "{json}"
    );
    assert!(json.contains("\"counters\":{\"requests\":0,"), "{json}");
    // The config file names the stats file too.
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("t.toml");
    std::fs::write(
        &conf,
        format!("stats_file = \"{}\"\n", t.stats_path().display()),
    )
    .unwrap();
    let out = target()
        .args(["stats", "--config"])
        .arg(&conf)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // No file: an error, exit 1; stats is a subcommand, its flags are its own.
    let out = target()
        .args(["stats", "--stats-file"])
        .arg(dir.path().join("none"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let out = target()
        .args(["--listen", "127.0.0.1", "stats"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let (ok, _) = t.stop();
    assert!(ok);
}

#[test]
fn readiness_and_stopping_reach_systemd() {
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let img = dir.path().join("d.img");
    std::fs::write(&img, vec![0u8; 1 << 20]).unwrap();
    let mut child = target()
        .args([
            "--listen",
            "127.0.0.1",
            "--allow",
            "127.0.0.1",
            "--no-rdma",
            "--tcp-port",
            "0",
        ])
        .arg("--export")
        .arg(format!("d={}", img.display()))
        .env("NOTIFY_SOCKET", &sock_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 256];
    let n = sock.recv(&mut buf).unwrap();
    let ready = text(&buf[..n]);
    assert!(ready.starts_with("READY=1\n"), "{ready}");
    assert!(ready.contains("STATUS=serving 1 export(s)"), "{ready}");
    signal_pid(child.id(), "TERM");
    let n = sock.recv(&mut buf).unwrap();
    assert!(text(&buf[..n]).starts_with("STOPPING=1"));
    assert!(child.wait().unwrap().success());
}
