//! The real target binary on temp files, for the integration tests that also need its log.

#![allow(dead_code)] // each test file uses its own part of this

use std::io::{BufRead, BufReader, Read};
use std::mem;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use rdmadisk_net::client::{ConnectError, ConnectOptions, TcpClient};
use rdmadisk_proto::crc32c::crc32c;
use rdmadisk_proto::wire::{HelloStatus, Opcode, Status};

pub const MIB: usize = 1 << 20;

pub struct Target {
    child: Child,
    pub addr: SocketAddr,
    stats: PathBuf,
    /// stdout and stderr, line by line.
    lines: mpsc::Receiver<String>,
    /// Every line seen so far.
    seen: Vec<String>,
    /// Set: the stdout reader stops after its next line, closing the pipe.
    close_out: Arc<AtomicBool>,
    _dir: tempfile::TempDir,
}

fn forward(out: impl Read + Send + 'static, tx: mpsc::Sender<String>, stop: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() || stop.load(Ordering::SeqCst) {
                break;
            }
        }
    });
}

impl Target {
    /// Starts the target with a 16 MiB read-write export `rw` and a 1 MiB read-only `ro`
    /// (every byte 0x42), TCP only on 127.0.0.1, allowing 127.0.0.0/8 unless `extra` says who
    /// may attach.
    pub fn start(extra: &[&str]) -> Target {
        Target::start_with(extra, |_| {})
    }

    /// [`Target::start`], with `setup` applied to the command first.
    pub fn start_with(extra: &[&str], setup: impl FnOnce(&mut Command)) -> Target {
        let who: &[&str] = if extra.iter().any(|a| *a == "--allow" || *a == "--allow-any") {
            &[]
        } else {
            &["--allow", "127.0.0.0/8"]
        };
        let dir = tempfile::tempdir().unwrap();
        let rw = dir.path().join("rw.img");
        let ro = dir.path().join("ro.img");
        std::fs::write(&rw, vec![0u8; 16 * MIB]).unwrap();
        std::fs::write(&ro, vec![0x42u8; MIB]).unwrap();
        let stats = dir.path().join("stats");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rdmadisk-target"));
        setup(&mut cmd);
        let mut child = cmd
            .args([
                "--listen",
                "127.0.0.1",
                "--tcp-port",
                "0",
                "--no-rdma",
                "--stats-file",
            ])
            .arg(&stats)
            .arg("--export")
            .arg(format!("rw={}", rw.display()))
            .arg("--export-ro")
            .arg(format!("ro={}", ro.display()))
            .args(who)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let close_out = Arc::new(AtomicBool::new(false));
        forward(child.stdout.take().unwrap(), tx.clone(), close_out.clone());
        forward(
            child.stderr.take().unwrap(),
            tx,
            Arc::new(AtomicBool::new(false)),
        );
        let mut t = Target {
            child,
            addr: "0.0.0.0:0".parse().unwrap(),
            stats,
            lines: rx,
            seen: Vec::new(),
            close_out,
            _dir: dir,
        };
        let line = t.wait_line("rdmadisk-target: tcp listening on ");
        t.addr = line
            .strip_prefix("rdmadisk-target: tcp listening on ")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        t
    }

    /// Waits (up to 20 s) for a line containing `needle`, which may have been printed already.
    pub fn wait_line(&mut self, needle: &str) -> String {
        if let Some(l) = self.seen.iter().find(|l| l.contains(needle)) {
            return l.clone();
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no line with {needle:?} in {:#?}", self.seen));
            self.seen.push(line.clone());
            if line.contains(needle) {
                return line;
            }
        }
    }

    pub fn connect_with(&self, opts: &ConnectOptions) -> TcpClient {
        TcpClient::connect(self.addr, opts).unwrap()
    }

    pub fn connect(&self) -> TcpClient {
        self.connect_to("rw")
    }

    /// A client session's connection (session 1): a probe (session 0) may not write.
    pub fn connect_to(&self, export: &str) -> TcpClient {
        self.connect_with(&client(export))
    }

    /// The status a Hello with `opts` is refused with (panics if it is accepted).
    pub fn refusal(&self, opts: &ConnectOptions) -> HelloStatus {
        match TcpClient::connect(self.addr, opts) {
            Err(ConnectError::Refused(st)) => st,
            Ok(_) => panic!("hello accepted: {opts:?}"),
            Err(e) => panic!("connect failed: {e}"),
        }
    }

    /// Like [`Target::refusal`], but a connection that fails before any answer (a listen
    /// queue a flood has just filled, on a loaded machine) is tried again, for up to 10 s.
    pub fn refusal_after_flood(&self, opts: &ConnectOptions) -> HelloStatus {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            match TcpClient::connect(self.addr, opts) {
                Err(ConnectError::Refused(st)) => return st,
                Ok(_) => panic!("hello accepted: {opts:?}"),
                Err(e) if Instant::now() > until => panic!("connect failed: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// The backing file of export `rw` (16 MiB) or `ro` (1 MiB).
    pub fn export_path(&self, name: &str) -> PathBuf {
        self._dir.path().join(format!("{name}.img"))
    }

    /// Closes the target's stdout (the reader goes after the next line, which SIGUSR1's
    /// counters provide): later writes there fail with EPIPE.
    pub fn close_stdout(&mut self) {
        self.close_out.store(true, Ordering::SeqCst);
        signal(&self.child, "USR1");
        std::thread::sleep(Duration::from_millis(500));
    }

    /// The target's stats file.
    pub fn stats_path(&self) -> &Path {
        &self.stats
    }

    /// The target's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn counter(&self, name: &str) -> u64 {
        // The file is rewritten every second; poke with SIGUSR1 for a fresh copy.
        signal(&self.child, "USR1");
        std::thread::sleep(Duration::from_millis(300));
        read_counter(&self.stats, name)
    }

    /// Polls a counter (fresh copies) until it reads `want` or `within` passes; the last value.
    /// For a gauge the target lowers after the event a client sees, such as a buffer freed
    /// after the socket closed.
    pub fn counter_settles(&self, name: &str, want: u64, within: Duration) -> u64 {
        let until = Instant::now() + within;
        loop {
            let v = self.counter(name);
            if v == want || Instant::now() > until {
                return v;
            }
        }
    }

    /// A counter from the file as last written (after [`Target::counter`]).
    pub fn counter_now(&self, name: &str) -> u64 {
        read_counter(&self.stats, name)
    }

    /// SIGTERM, then the exit status and every line printed (the counters at exit included).
    pub fn stop(mut self) -> (bool, Vec<String>) {
        signal(&self.child, "TERM");
        let status = self.child.wait().unwrap();
        let mut lines = mem::take(&mut self.seen);
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(2)) {
            lines.push(l);
        }
        (status.success(), lines)
    }
}

pub fn signal(child: &Child, sig: &str) {
    signal_pid(child.id(), sig);
}

pub fn signal_pid(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(ok.success());
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn read_counter(path: &Path, name: &str) -> u64 {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no counter {name} in {text}"))
        .parse()
        .unwrap()
}

pub fn pattern(seed: u32, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2654435761) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

pub fn write(c: &mut TcpClient, tag: u32, sector: u64, data: &[u8]) -> Status {
    let req = TcpClient::request(Opcode::Write, tag, sector, data.len() as u32, data);
    let (resp, n) = c.call(&req, data, &mut [0u8; 16]).unwrap();
    assert_eq!((resp.tag, n), (tag, 0));
    resp.status
}

/// Reads `len` bytes at `sector`; a successful read must bring exactly that many, with the
/// CRC the response states.
pub fn read(c: &mut TcpClient, tag: u32, sector: u64, len: usize) -> (Status, Vec<u8>) {
    let req = TcpClient::request(Opcode::Read, tag, sector, len as u32, &[]);
    let mut buf = vec![0u8; len.max(2 * MIB)];
    let (resp, n) = c.call(&req, &[], &mut buf).unwrap();
    assert_eq!(resp.tag, tag);
    if resp.status == Status::Ok {
        assert_eq!(n, len);
        assert_eq!(crc32c(&buf[..n]), resp.data_crc, "read CRC");
    } else {
        assert_eq!(n, 0);
    }
    buf.truncate(n);
    (resp.status, buf)
}

pub fn simple(c: &mut TcpClient, op: Opcode, tag: u32, sector: u64, len: u32) -> Status {
    let req = TcpClient::request(op, tag, sector, len, &[]);
    let (resp, _) = c.call(&req, &[], &mut [0u8; 16]).unwrap();
    assert_eq!(resp.tag, tag);
    resp.status
}

/// Connection options of a client session (session 1, epoch 0) for `export`.
pub fn client(export: &str) -> ConnectOptions {
    ConnectOptions {
        session_id: 1,
        ..ConnectOptions::new(export)
    }
}
