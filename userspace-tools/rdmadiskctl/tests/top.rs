//! `top` in a real terminal: tmux runs it, the test reads the screen and types the keys.
//! Skipped where tmux is not installed.

mod common;

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use common::{Fake, BIN};

/// A tmux server of the test's own, killed however the test ends; its socket lives in a
/// temporary directory so that nothing is left behind.
struct Tmux {
    dir: tempfile::TempDir,
}

impl Tmux {
    fn start(tag: &str, fake: &Fake, top_args: &str) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            eprintln!("skipped: tmux is not installed");
            return None;
        }
        let t = Tmux {
            dir: tempfile::Builder::new()
                .prefix(&format!("rdmadiskctl-tmux-{tag}"))
                .tempdir()
                .unwrap(),
        };
        // The shell stays after top exits so the screen it leaves behind can be read.
        let script = format!(
            "RDMADISK_SYSFS='{}' '{BIN}' top {top_args}; echo \"exit=$?\"; sleep 60",
            fake.dir.path().display()
        );
        let ok = t
            .tmux(&[
                "new-session",
                "-d",
                "-x",
                "132",
                "-y",
                "12",
                "sh",
                "-c",
                &script,
            ])
            .status
            .success();
        assert!(ok, "tmux new-session failed");
        Some(t)
    }

    fn tmux(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-S")
            .arg(self.dir.path().join("socket"))
            .args(["-f", "/dev/null"])
            .args(args)
            .output()
            .unwrap()
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p"]).stdout).into_owned()
    }

    /// The screen once it shows `what`; panics with the screen after 20 s.
    fn wait_for(&self, what: &str) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if s.contains(what) {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "'{what}' never showed:\n{s}"
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    fn keys(&self, keys: &str) {
        assert!(self.tmux(&["send-keys", keys]).status.success());
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

#[test]
fn top_draws_the_disks_and_gives_the_terminal_back() {
    let fake = Fake::loaded();
    let Some(t) = Tmux::start("iter", &fake, "--interval-ms 200 --iterations 10") else {
        return;
    };
    let s = t.wait_for("refresh 2");
    assert!(s.contains("READ/s") && s.contains("INFLIGHT"), "{s}");
    let line = s.lines().find(|l| l.contains("rdmadisk0")).expect(&s);
    let words: Vec<&str> = line.trim_matches(['│', ' ']).split_whitespace().collect();
    // The fake counters do not move: rates of zero, no latency, 3 + 1 in flight.
    assert_eq!(
        words,
        [
            "rdmadisk0",
            "d1",
            "live",
            "rdma",
            "0",
            "0",
            "0.0",
            "0.0",
            "-",
            "-",
            "4"
        ],
        "{s}"
    );
    let line = s.lines().find(|l| l.contains("rdmadisk1")).expect(&s);
    assert!(line.contains("connecting"), "{s}");
    let s = t.wait_for("exit=0");
    assert!(!s.contains("READ/s"), "the alternate screen was left:\n{s}");
}

#[test]
fn q_and_ctrl_c_quit() {
    for (tag, key) in [("q", "q"), ("ctrlc", "C-c")] {
        let fake = Fake::loaded();
        let Some(t) = Tmux::start(tag, &fake, "--interval-ms 200") else {
            return;
        };
        t.wait_for("rdmadisk0");
        t.keys(key);
        let s = t.wait_for("exit=");
        assert!(s.contains("exit=0"), "{key}:\n{s}");
    }
}
