//! End-to-end runs of the built binary against a fake sysfs tree (see common/mod.rs).

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use common::Fake;
use serde_json::{json, Value};

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

fn ok(o: Output) -> String {
    assert!(o.status.success(), "{o:?}\n{}", stderr(&o));
    stdout(&o)
}

/// Exit status and standard error of a run that must fail.
fn fails(o: Output) -> (i32, String) {
    assert!(!o.status.success(), "{o:?}");
    assert!(o.stdout.is_empty(), "{}", stdout(&o));
    let e = stderr(&o);
    assert!(e.starts_with("rdmadiskctl: "), "{e}");
    (o.status.code().unwrap(), e)
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap()
}

#[test]
fn an_unloaded_module_is_named() {
    let f = Fake::unloaded();
    for args in [
        &["list"][..],
        &["show", "d1"],
        &["stats", "rdmadisk0"],
        &["unmap", "d1"],
        &["set", "d1", "max_credits", "8"],
        &[
            "map",
            "--name",
            "d1",
            "--addr",
            "192.0.2.2",
            "--export",
            "vol0",
        ],
    ] {
        let (code, e) = fails(f.run(args));
        assert_eq!(code, 3, "{args:?}");
        assert_eq!(
            e,
            format!(
                "rdmadiskctl: rdmadisk is not loaded: no {}/class/rdmadisk/ctl (load it with insmod rdmadisk.ko)\n",
                f.dir.path().display()
            )
        );
    }
}

#[test]
fn list_text_and_json() {
    let f = Fake::loaded();
    assert_eq!(
        ok(f.run(&["list"])),
        "DEVICE     NAME  ADDRESS         EXPORT  STATE       TRANSPORT\n\
         rdmadisk0  d1    192.0.2.2:7700  vol0    live        rdma\n\
         rdmadisk1  d2    192.0.2.3:7700  vol1    connecting  -\n"
    );
    let v: Value = serde_json::from_str(&ok(f.run(&["list", "--json"]))).unwrap();
    assert_eq!(
        v,
        json!({"disks": [
            {"device": "rdmadisk0", "path": "/dev/rdmadisk0", "name": "d1",
             "address": "192.0.2.2:7700", "export": "vol0", "state": "live",
             "active_transport": "rdma"},
            {"device": "rdmadisk1", "path": "/dev/rdmadisk1", "name": "d2",
             "address": "192.0.2.3:7700", "export": "vol1", "state": "connecting",
             "active_transport": null},
        ]})
    );
    fs::write(f.ctl().join("devices"), "").unwrap();
    assert_eq!(ok(f.run(&["list"])), "no rdmadisk disk is mapped\n");
    assert_eq!(
        serde_json::from_str::<Value>(&ok(f.run(&["list", "--json"]))).unwrap(),
        json!({"disks": []})
    );
}

#[test]
fn disks_are_found_by_any_name_or_listed() {
    let f = Fake::loaded();
    for name in ["rdmadisk0", "/dev/rdmadisk0", "d1"] {
        let v: Value = serde_json::from_str(&ok(f.run(&["show", name, "--json"]))).unwrap();
        assert_eq!(v["disk"], "rdmadisk0", "{name}");
    }
    let (code, e) = fails(f.run(&["show", "nope"]));
    assert_eq!(code, 4);
    assert_eq!(
        e,
        "rdmadiskctl: no disk 'nope'; mapped: rdmadisk0 (d1), rdmadisk1 (d2)\n"
    );
    let (code, e) = fails(f.run(&["stats", "d2"]));
    assert_eq!(code, 4);
    assert!(
        e.contains("rdmadisk1 (d2) has no block device (state connecting)"),
        "{e}"
    );
}

#[test]
fn show_reads_every_file_but_the_statistics() {
    let f = Fake::loaded();
    let v: Value = serde_json::from_str(&ok(f.run(&["show", "d1", "--json"]))).unwrap();
    assert_eq!(
        v,
        json!({
            "disk": "rdmadisk0",
            "identity": {"name": "d1", "export": "vol0", "address": "192.0.2.2:7700",
                         "port": "7700", "tcp_port": "7701", "queues": "2",
                         "poll_queues": "0", "ro": "0", "secret": "none"},
            "status": {"state": "live", "active_transport": "rdma", "session": "rdma"},
            "knobs": {"io_timeout_ms": "30000", "max_credits": "32", "transport": "auto",
                      "telemetry": "1"},
            "other": {},
        })
    );
    let text = ok(f.run(&["show", "d1"]));
    assert!(text.starts_with("rdmadisk0\nidentity:\n  name"), "{text}");
    assert!(text.contains("  max_credits       32\n"), "{text}");
    assert!(
        !text.contains("telemetry_") && !text.contains("reads"),
        "{text}"
    );
}

#[test]
fn stats_text_json_and_reset() {
    let f = Fake::loaded();
    let text = ok(f.run(&["stats", "d1"]));
    assert!(
        text.starts_with("rdmadisk0 (d1)\ncounters:\n  reads"),
        "{text}"
    );
    assert!(
        text.contains("  rdma       read  400  1638400  0       1"),
        "{text}"
    );
    assert!(text.contains("≤ 16383 µs"), "{text}");
    assert!(
        !text.contains("tcp "),
        "idle transports are left out: {text}"
    );

    let v: Value = serde_json::from_str(&ok(f.run(&["stats", "d1", "--json"]))).unwrap();
    let b13 = json!({"bucket": 13, "low_us": 8192, "high_us": 16383});
    let b14 = json!({"bucket": 14, "low_us": 16384, "high_us": 32767});
    assert_eq!(
        v,
        json!({
            "disk": "rdmadisk0",
            "name": "d1",
            "counters": {"reads": 400, "writes": 0, "read_bytes": 1638400, "write_bytes": 0,
                         "io_errors": 0, "failovers": 0},
            "telemetry": {"rdma": {"read": {
                "ios": 400, "bytes": 1638400, "errors": 0, "credit_waits": 1,
                "lat_us": {"buckets": [[12, 3], [13, 390], [14, 7]], "mean_us": 9120,
                           "p50": b13, "p90": b13, "p99": b14, "p99.9": b14},
                "wire_us": {"buckets": [[12, 10], [13, 390]], "mean_us": 8000,
                            "p50": b13, "p90": b13, "p99": b13, "p99.9": b13},
            }}},
        })
    );
    let reset = f.disk_dir("rdmadisk0").join("telemetry_reset");
    assert_eq!(read(&reset), "\n");
    let out = ok(f.run(&["stats", "d1", "--json", "--reset"]));
    assert!(out.contains("\"p99.9\""), "printed before the reset");
    assert_eq!(read(&reset), "1\n");
}

#[test]
fn broken_telemetry_is_reported_with_its_file() {
    let f = Fake::loaded();
    let file = f.disk_dir("rdmadisk0").join("telemetry_tcp_flush");
    fs::write(
        &file,
        "ios=1\nbytes=0\nerrors=0\ncredit_waits=0\nlat_us=9:1 3:1\nwire_us=\n",
    )
    .unwrap();
    let (code, e) = fails(f.run(&["stats", "d1"]));
    assert_eq!(code, 1);
    assert_eq!(
        e,
        format!(
            "rdmadiskctl: cannot parse {}: line 5: lat_us: the bucket indexes do not increase\n",
            file.display()
        )
    );
}

#[test]
fn set_checks_then_writes() {
    let f = Fake::loaded();
    let knob = f.disk_dir("rdmadisk0").join("max_credits");
    assert_eq!(
        ok(f.run(&["set", "d1", "max_credits", "8"])),
        "rdmadisk0: max_credits = 8\n"
    );
    assert_eq!(read(&knob), "8\n");

    let (code, e) = fails(f.run(&["set", "d1", "max_credits", "65"]));
    assert_eq!(code, 2);
    assert_eq!(
        e,
        "rdmadiskctl: invalid value '65' for max_credits: expected a whole number from 1 to 64\n"
    );
    assert_eq!(read(&knob), "8\n", "nothing written");

    let (code, e) = fails(f.run(&["set", "d1", "colour", "blue"]));
    assert_eq!(code, 2);
    assert!(
        e.starts_with("rdmadiskctl: unknown knob 'colour'; the knobs are:\n"),
        "{e}"
    );
    assert!(
        e.contains("  keepalive_ms ") && e.contains("0 (off) or 100 to 600000"),
        "{e}"
    );

    // Values are judged before the disk is looked for.
    let (code, _) = fails(Fake::unloaded().run(&["set", "d1", "transport", "fast"]));
    assert_eq!(code, 2);
}

#[test]
fn kernel_refusals_point_at_dmesg() {
    let f = Fake::loaded();
    let knob = f.disk_dir("rdmadisk0").join("io_timeout_ms");
    fs::remove_file(&knob).unwrap();
    std::os::unix::fs::symlink("/dev/full", &knob).unwrap();
    let (code, e) = fails(f.run(&["set", "d1", "io_timeout_ms", "5000"]));
    assert_eq!(code, 6);
    assert_eq!(
        e,
        format!(
            "rdmadiskctl: the kernel refused '5000' written to {}: No space left on device (ENOSPC) \
             (run `dmesg | tail` for the module's reason)\n",
            knob.display()
        )
    );

    let map = f.ctl().join("map_device");
    fs::remove_file(&map).unwrap();
    std::os::unix::fs::symlink("/dev/full", &map).unwrap();
    let keydir = tempfile::tempdir().unwrap();
    let key = keydir.path().join("d3.key");
    fs::write(&key, "00112233445566778899aabbccddeeff\n").unwrap();
    fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
    let (code, e) = fails(f.run(&[
        "map",
        "--name",
        "d3",
        "--addr",
        "192.0.2.2",
        "--export",
        "vol0",
        "--secret-file",
        key.to_str().unwrap(),
    ]));
    assert_eq!(code, 6);
    assert!(
        e.contains("'name=d3 addr=192.0.2.2 export=vol0 secret=<hidden>'"),
        "{e}"
    );
    assert!(e.contains("every disk slot is taken"), "{e}");
    assert!(!e.contains("0011"), "{e}");
    // A key that everyone may read is refused before anything is written.
    fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
    let (_, e) = fails(f.run(&[
        "map",
        "--name",
        "d3",
        "--addr",
        "192.0.2.2",
        "--export",
        "vol0",
        "--secret-file",
        key.to_str().unwrap(),
    ]));
    assert!(e.contains("readable by everyone"), "{e}");
    assert!(!e.contains("0011"), "{e}");
}

/// Root passes any permission bits, so the refusal is made with the immutable attribute
/// there; where neither can be had, the test has nothing to check.
#[test]
fn permission_denied_says_to_run_as_root() {
    let f = Fake::loaded();
    let knob = f.disk_dir("rdmadisk0").join("max_credits");
    fs::set_permissions(&knob, fs::Permissions::from_mode(0o444)).unwrap();
    let immutable = Command::new("chattr")
        .arg("+i")
        .arg(&knob)
        .output()
        .is_ok_and(|o| o.status.success());
    let out = f.run(&["set", "d1", "max_credits", "8"]);
    if immutable {
        let _ = Command::new("chattr").arg("-i").arg(&knob).status();
    }
    if out.status.success() {
        eprintln!("skipped: running as root on a filesystem without chattr +i");
        return;
    }
    let (code, e) = fails(out);
    assert_eq!(code, 5);
    assert_eq!(
        e,
        format!(
            "rdmadiskctl: permission denied writing {}: rdmadiskctl must run as root\n",
            knob.display()
        )
    );
}

#[test]
fn map_validates_writes_and_finds_the_disk() {
    let f = Fake::loaded();
    let line = f.ctl().join("map_device");
    // The fake kernel lists d1 already: a map of d1 "succeeds" and finds it as rdmadisk0.
    let out = ok(f.run(&[
        "map",
        "--name",
        "d1",
        "--addr",
        "192.0.2.2",
        "--export",
        "vol0",
        "--queues",
        "2",
        "--poll-queues",
        "1",
        "--port",
        "7700",
        "--tcp-port",
        "7701",
        "--ro",
    ]));
    assert_eq!(out, "/dev/rdmadisk0\n");
    assert_eq!(
        read(&line),
        "name=d1 addr=192.0.2.2 export=vol0 port=7700 tcp_port=7701 queues=2 poll_queues=1 ro\n"
    );

    fs::write(&line, "").unwrap();
    let (code, e) = fails(f.run(&[
        "map",
        "--name",
        "d9",
        "--addr",
        "192.0.2.256",
        "--export",
        "vol0",
    ]));
    assert_eq!(code, 2);
    assert_eq!(
        e,
        "rdmadiskctl: invalid map options: bad value for key 'addr' ('192.0.2.256'): expected an \
         IPv4 address as four numbers 0-255 without leading zeros, like 192.0.2.2, or an IPv6 \
         address, like fd00::2 (not a link-local one)\n"
    );
    assert_eq!(read(&line), "", "nothing written");

    // Taken by the module but not listed: said, not silently ignored.
    let (code, e) = fails(f.run(&[
        "map",
        "--name",
        "d9",
        "--addr",
        "192.0.2.2",
        "--export",
        "v",
    ]));
    assert_eq!(code, 1);
    assert!(e.contains("lists no disk named 'd9'"), "{e}");
}

#[test]
fn unmap_writes_the_mode() {
    let f = Fake::loaded();
    let unmap = f.disk_dir("rdmadisk0").join("unmap");
    assert_eq!(
        ok(f.run(&["unmap", "/dev/rdmadisk0"])),
        "unmapped rdmadisk0 (d1)\n"
    );
    assert_eq!(read(&unmap), "normal\n");
    ok(f.run(&["unmap", "d1", "--force"]));
    assert_eq!(read(&unmap), "force\n");
}

#[test]
fn failover_writes_and_waits() {
    let f = Fake::loaded();
    let dir = f.disk_dir("rdmadisk0");
    assert_eq!(
        ok(f.run(&["failover", "d1", "--to", "rdma", "--wait", "1"])),
        "rdmadisk0: on rdma\n"
    );
    assert_eq!(read(&dir.join("transport")), "rdma\n");

    let start = std::time::Instant::now();
    let (code, e) = fails(f.run(&["failover", "d1", "--to", "tcp", "--wait", "1"]));
    assert_eq!(code, 7);
    assert_eq!(
        e,
        "rdmadiskctl: rdmadisk0 is still on rdma after 1 s (asked for tcp; state live)\n"
    );
    assert!(start.elapsed() >= std::time::Duration::from_secs(1));
    assert_eq!(read(&dir.join("transport")), "tcp\n");

    assert_eq!(
        ok(f.run(&["failover", "d1", "--to", "auto"])),
        "rdmadisk0: transport = auto, active transport rdma\n"
    );
}

#[test]
fn completions_and_man_page() {
    let f = Fake::unloaded();
    for shell in ["bash", "zsh", "fish"] {
        let s = ok(f.run(&["completions", shell]));
        assert!(
            s.contains("rdmadiskctl") && s.contains("failover"),
            "{shell}"
        );
    }
    let man = ok(f.run(&["man"]));
    assert!(
        man.starts_with(".ie") || man.contains(".TH rdmadiskctl"),
        "{man}"
    );
    assert!(man.contains("RDMADISK_SYSFS"), "{man}");
    // The main page names one page per command; `--dir` writes them all.
    assert!(man.contains("rdmadiskctl\\-stats(1)"), "{man}");
    let dir = tempfile::tempdir().unwrap();
    ok(f.run(&["man", "--dir", dir.path().to_str().unwrap()]));
    for page in ["rdmadiskctl.1", "rdmadiskctl-stats.1", "rdmadiskctl-top.1"] {
        assert!(read(&dir.path().join(page)).contains(".TH"), "{page}");
    }
    let help = ok(f.run(&["set", "--help"]));
    assert!(help.contains("Knobs:\n  io_timeout_ms "), "{help}");
}

#[test]
fn top_needs_a_terminal() {
    let f = Fake::loaded();
    let (code, e) = fails(f.run(&["top", "--iterations", "1"]));
    assert_eq!(code, 1);
    assert!(e.contains("standard output is not a terminal"), "{e}");
}

#[test]
fn map_all_maps_what_is_not_mapped_and_says_what_failed() {
    let f = Fake::loaded();
    let line = f.ctl().join("map_device");
    let conf = f.dir.path().join("disks.conf");
    let run = |args: &[&str]| {
        Command::new(common::BIN)
            .args(args)
            .env("RDMADISK_SYSFS", f.dir.path())
            .env("RDMADISK_DISKS_CONF", &conf)
            .output()
            .unwrap()
    };
    // d1 and d2 are mapped already (to vol0 and vol1): nothing is written.
    fs::write(
        &conf,
        "# the fake's disks\nd1 addr=192.0.2.2 export=vol0\nd2 addr=192.0.2.3 export=vol1 ro\n",
    )
    .unwrap();
    assert_eq!(
        ok(run(&["map-all"])),
        "d1: already mapped as /dev/rdmadisk0\nd2: already mapped as /dev/rdmadisk1\n"
    );
    assert_eq!(read(&line), "", "nothing written");

    // A bad line: named with its file and line, and nothing is mapped, not even the good d3.
    fs::write(
        &conf,
        "d3 addr=192.0.2.2 export=vol3\n\nd4 addr=192.0.2.2 export=vol4 queues=0\n",
    )
    .unwrap();
    let (code, e) = fails(run(&["map-all"]));
    assert_eq!(code, 2);
    assert!(
        e.starts_with(&format!("rdmadiskctl: {}:3: ", conf.display()))
            && e.contains("'queues' ('0')"),
        "{e}"
    );
    assert_eq!(read(&line), "", "nothing written");
    let (code, _) = fails(run(&["map-all", "--check"]));
    assert_eq!(code, 2);

    // d3 is written (the fake never lists it: a failure), d1 is skipped, and d1 mapped to
    // another export is a failure of its own; each is said, and the status is the first's.
    fs::write(
        &conf,
        "d1 addr=192.0.2.2 export=vol0\nd3 addr=192.0.2.2 export=vol3\n",
    )
    .unwrap();
    assert_eq!(
        ok(run(&["map-all", "--check"])),
        format!("{}: 2 disks, every line valid\n", conf.display())
    );
    let o = run(&["map-all"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o), "d1: already mapped as /dev/rdmadisk0\n");
    let e = stderr(&o);
    assert!(
        e.contains(&format!("rdmadiskctl: map-all: {}:2: d3: ", conf.display()))
            && e.contains("lists no disk named 'd3'")
            && e.ends_with("rdmadiskctl: map-all: 1 of the disks failed\n"),
        "{e}"
    );
    assert_eq!(read(&line), "name=d3 addr=192.0.2.2 export=vol3\n");
    let conf2 = f.dir.path().join("other.conf");
    fs::write(&conf2, "d1 addr=192.0.2.2 export=volX\n").unwrap();
    let o = run(&["map-all", "--config", conf2.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(":1: d1: a disk of that name is mapped already, to export 'vol0'"),
        "{}",
        stderr(&o)
    );

    // unmap-all: only the file's disks that are mapped (d1), not d2, which the file lacks.
    let unmap = f.disk_dir("rdmadisk0").join("unmap");
    assert_eq!(ok(run(&["unmap-all"])), "unmapped rdmadisk0 (d1)\n");
    assert_eq!(read(&unmap), "normal\n");
    ok(run(&["unmap-all", "--force"]));
    assert_eq!(read(&unmap), "force\n");
    // With the module not loaded there is nothing to unmap; map-all says it is not loaded.
    let u = Fake::unloaded();
    let o = Command::new(common::BIN)
        .args(["unmap-all", "--config", conf.to_str().unwrap()])
        .env("RDMADISK_SYSFS", u.dir.path())
        .output()
        .unwrap();
    assert!(o.status.success() && o.stdout.is_empty(), "{o:?}");
    let o = Command::new(common::BIN)
        .args(["map-all", "--config", conf.to_str().unwrap()])
        .env("RDMADISK_SYSFS", u.dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
}
