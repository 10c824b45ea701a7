//! For the unit tests: a target in this process with exports on any [`Backing`], and
//! connections' cores driven by hand, one ring turn at a time, so that a test decides which
//! connection sees which completion when.

use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdmadisk_net::allow::AllowList;
use rdmadisk_proto::wire::{ExportName, Hello, Opcode, RemoteBuf, Request, Status};

use crate::backing::{Backing, FdBacking, Geometry, IoOp};
use crate::conn::Core;
use crate::engine::{Limits, Target};
use crate::export::Export;
use crate::pool::{Budget, Pool, Take};
use crate::ring::Ring;

/// The target's defaults.
pub fn limits() -> Limits {
    Limits {
        max_io_bytes: 1 << 20,
        queue_depth: 32,
        credits: 32,
        rdma_window: 256 << 10,
        inline_max: 4096,
        ack_timeout_exp: 17,
        poll: Duration::ZERO,
        max_connections: 256,
        max_connections_per_host: 64,
        hello_timeout: Duration::from_secs(5),
        idle_timeout: None,
        send_timeout: Duration::from_secs(30),
        shutdown_timeout: Duration::from_secs(10),
        corrupt_read_every: 0,
        fail_write_crc_every: 0,
        no_invalidate: false,
        hostile: Default::default(),
        refuse_rdma_file: None,
        stall_sector: None,
        refuse_writes_file: None,
        grant_no_credits: false,
    }
}

/// A target serving `exports` (read-write, shared, no key) to anyone.
pub fn target(exports: Vec<(&str, Box<dyn Backing>)>) -> Arc<Target> {
    let exports = exports
        .into_iter()
        .map(|(name, b)| Export::new(name, b, false, None, None, false, false))
        .collect();
    Arc::new(Target::new(
        exports,
        Vec::new(),
        AllowList::parse::<&str>(&[]).unwrap(),
        true,
        limits(),
        Budget::new(256 << 20, 1 << 20),
    ))
}

/// A connection's core: queue `queue` of session 1 from a reserved port of 127.0.0.1.
pub fn core(t: &Arc<Target>, export: &str, queue: u16, pool: &Arc<Pool>) -> Core {
    let hello = Hello {
        flags: 0,
        queue_id: queue,
        queue_count: 8,
        recv_credits: 32,
        caps: 0,
        session_id: 1,
        epoch: 0,
        export: ExportName::new(export.as_bytes()).unwrap(),
    };
    let peer: SocketAddr = format!("127.0.0.1:{}", 600 + queue).parse().unwrap();
    let a = t.attach(Some(peer), None, &hello).unwrap();
    Core::new(t.clone(), a.export, a.fence, a.writes, pool.clone(), 8).unwrap()
}

/// A request as a TCP client sends it: `data` is a write's, for its CRC.
pub fn request(opcode: Opcode, tag: u32, sector: u64, data: &[u8], len: u32) -> Request {
    Request {
        opcode,
        flags: 0,
        credits: 1,
        tag,
        sector,
        length: len,
        data_crc: rdmadisk_proto::crc32c::crc32c(data),
        buf: RemoteBuf {
            addr: 0,
            rkey: 0,
            len: if opcode.has_data() { len } else { 0 },
        },
    }
}

/// Starts `req` in slot `slot`, with `data` as a write's (taken from `pool`).
pub fn start(c: &mut Core, slot: usize, req: Request, data: Option<&[u8]>) {
    let buf = data.map(|d| {
        let Ok(Take::Got(mut b)) = c.pool.get(d.len(), None, &mut None) else {
            panic!("no buffer for the test's write");
        };
        b.as_mut_slice()[..d.len()].copy_from_slice(d);
        b
    });
    c.start(slot, req, buf).unwrap();
}

/// Turns `c`'s ring until a response is ready, or `limit` passes; returns (slot, status)
/// and frees the slot.
pub fn answer(c: &mut Core, limit: Duration) -> Option<(usize, Status)> {
    answer_data(c, limit).map(|(i, st, _)| (i, st))
}

/// [`answer`], with the data the response carries (a successful read's).
pub fn answer_data(c: &mut Core, limit: Duration) -> Option<(usize, Status, Vec<u8>)> {
    let end = Instant::now() + limit;
    loop {
        c.poll_waiting();
        if let Some(i) = c.to_answer.pop_front() {
            let s = &c.slots[i];
            let data = s
                .buf
                .as_ref()
                .map_or(Vec::new(), |b| b.as_slice()[..s.out_len()].to_vec());
            let st = s.status;
            c.responded(i);
            c.release(i);
            return Some((i, st, data));
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let mut other = Vec::new();
        c.turn(Some(left.min(Duration::from_millis(5))), &mut other)
            .unwrap();
    }
}

/// A file whose page cache can lose a write the way the kernel reports it (errseq): one
/// error, given to the first fdatasync or RWF_DSYNC write that checks after it, on the one
/// open file description every connection shares; the others succeed. Here that first one is
/// the first started after [`WritebackFails::lose`], and it fails for real, on the ring:
/// a fdatasync of a pipe (EINVAL), a write to a file opened read-only (EBADF).
pub struct WritebackFails {
    file: FdBacking,
    read_only: File,
    pipe: (OwnedFd, OwnedFd),
    lost: Arc<AtomicBool>,
}

impl WritebackFails {
    pub fn new(path: &Path) -> WritebackFails {
        std::fs::write(path, vec![0u8; 1 << 20]).unwrap();
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two fds, which become ours alone.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        WritebackFails {
            file: FdBacking::open(path, false, false).unwrap(),
            read_only: File::open(path).unwrap(),
            // SAFETY: just opened above, owned by nothing else.
            pipe: unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) },
            lost: Arc::default(),
        }
    }

    /// Set: writeback of some page failed, and the next flush or FUA write to check is told.
    pub fn lost(&self) -> Arc<AtomicBool> {
        self.lost.clone()
    }
}

impl Backing for WritebackFails {
    fn describe(&self) -> String {
        "a file whose writeback fails on demand".into()
    }

    fn geometry(&self) -> Geometry {
        self.file.geometry()
    }

    unsafe fn start(
        &self,
        ring: &mut Ring,
        op: IoOp,
        buf: *mut u8,
        user_data: u64,
    ) -> io::Result<()> {
        let checks = matches!(op, IoOp::Flush | IoOp::Write { fua: true, .. });
        if !(checks && self.lost.swap(false, Ordering::SeqCst)) {
            // SAFETY: forwarded to the caller.
            return unsafe { self.file.start(ring, op, buf, user_data) };
        }
        match op {
            IoOp::Write { off, len, .. } => {
                // SAFETY: forwarded to the caller.
                unsafe { ring.write(self.read_only.as_raw_fd(), buf, len, off, true, user_data) }
            }
            _ => ring.fdatasync(self.pipe.1.as_raw_fd(), user_data),
        }
    }

    fn sync(&self) -> io::Result<()> {
        if self.lost.swap(false, Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.file.sync()
    }

    fn fixed_fd(&self) -> Option<std::os::fd::RawFd> {
        self.file.fixed_fd()
    }
}

/// A file that says its blocks are `block_size` bytes (a 4Kn disk, say, which the host's
/// test files are not).
pub struct Blocks {
    file: FdBacking,
    block_size: u32,
}

impl Blocks {
    pub fn new(path: &Path, block_size: u32) -> Blocks {
        std::fs::write(path, vec![0u8; 1 << 20]).unwrap();
        Blocks {
            file: FdBacking::open(path, false, false).unwrap(),
            block_size,
        }
    }
}

impl Backing for Blocks {
    fn describe(&self) -> String {
        format!("a file of {}-byte blocks", self.block_size)
    }

    fn geometry(&self) -> Geometry {
        Geometry {
            block_size: self.block_size,
            physical_block_size: self.block_size,
            ..self.file.geometry()
        }
    }

    unsafe fn start(
        &self,
        ring: &mut Ring,
        op: IoOp,
        buf: *mut u8,
        user_data: u64,
    ) -> io::Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { self.file.start(ring, op, buf, user_data) }
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync()
    }

    fn fixed_fd(&self) -> Option<std::os::fd::RawFd> {
        self.file.fixed_fd()
    }
}

/// A store that hangs: every operation waits (a poll of a pipe on the ring) until
/// [`Hangs::release`] is called, then completes with 0 bytes.
pub struct Hangs {
    file: FdBacking,
    pipe: (OwnedFd, Arc<OwnedFd>),
}

impl Hangs {
    pub fn new(path: &Path) -> Hangs {
        std::fs::write(path, vec![0u8; 1 << 20]).unwrap();
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two fds, which become ours alone.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        Hangs {
            file: FdBacking::open(path, false, false).unwrap(),
            // SAFETY: just opened above, owned by nothing else.
            pipe: unsafe {
                (
                    OwnedFd::from_raw_fd(fds[0]),
                    Arc::new(OwnedFd::from_raw_fd(fds[1])),
                )
            },
        }
    }

    /// What ends the hang: its operations complete once it is called.
    pub fn releaser(&self) -> impl Fn() + Send + 'static {
        let w = self.pipe.1.clone();
        move || {
            // SAFETY: a one-byte write from a valid buffer to a pipe we own.
            assert_eq!(
                unsafe { libc::write(w.as_raw_fd(), [1u8].as_ptr().cast(), 1) },
                1
            );
        }
    }
}

impl Backing for Hangs {
    fn describe(&self) -> String {
        "a store that hangs".into()
    }

    fn geometry(&self) -> Geometry {
        self.file.geometry()
    }

    unsafe fn start(
        &self,
        ring: &mut Ring,
        _op: IoOp,
        _buf: *mut u8,
        user_data: u64,
    ) -> io::Result<()> {
        ring.poll_in(self.pipe.0.as_raw_fd(), user_data)
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }
}
