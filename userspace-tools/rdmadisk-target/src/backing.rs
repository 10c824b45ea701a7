//! Where an export's blocks live: the [`Backing`] trait, and its implementation for a file or
//! a block device, opened exclusively and (by default) with O_DIRECT.
//!
//! The trait is the seam for other stores (a distributed one, say): a backing starts an
//! operation and its completion arrives on the connection's ring like any other. An fd-based
//! backing hands its operations to io_uring; another store would complete into the ring itself.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rdmadisk_proto::wire::SECTOR_SIZE;

use crate::config::ExportSpec;
use crate::ring::Ring;

/// Opens export `e`'s backing as it will be served: a file or block device (with O_DIRECT if
/// `direct`), or an RBD image.
pub fn open(e: &ExportSpec, direct: bool) -> io::Result<Box<dyn Backing>> {
    match &e.rbd {
        #[cfg(feature = "rbd")]
        Some(r) => Ok(Box::new(crate::backing_rbd::RbdBacking::open(
            r,
            e.read_only,
        )?)),
        #[cfg(not(feature = "rbd"))]
        Some(_) => Err(no_rbd()),
        None => Ok(Box::new(FdBacking::open(&e.path, e.read_only, direct)?)),
    }
}

/// For --check-config: export `e`'s geometry and description, found as [`open`] would, but
/// without taking its exclusive hold.
pub fn inspect(e: &ExportSpec, direct: bool) -> io::Result<(Geometry, String)> {
    match &e.rbd {
        #[cfg(feature = "rbd")]
        Some(r) => crate::backing_rbd::RbdBacking::inspect(r, e.read_only),
        #[cfg(not(feature = "rbd"))]
        Some(_) => Err(no_rbd()),
        None => {
            let b = FdBacking::inspect(&e.path, e.read_only, direct)?;
            Ok((b.geometry(), b.describe()))
        }
    }
}

#[cfg(not(feature = "rbd"))]
fn no_rbd() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "this rdmadisk-target was built without RBD support (cargo feature rbd)",
    )
}

/// One operation on a backing store. Offsets and lengths are in bytes and aligned to the
/// backing's [`Geometry::block_size`] (the target refuses anything else).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoOp {
    Read {
        off: u64,
        len: u32,
    },
    /// `fua`: durable before the completion.
    Write {
        off: u64,
        len: u32,
        fua: bool,
    },
    /// Makes every completed write durable.
    Flush,
    /// Deallocates a range; it reads back as zeroes.
    PunchHole {
        off: u64,
        len: u64,
    },
    /// Zeroes a range.
    ZeroRange {
        off: u64,
        len: u64,
    },
}

/// What a backing store looks like from outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Usable bytes: a whole number of blocks.
    pub capacity: u64,
    /// The smallest unit of I/O, and its alignment: the device's logical block size, raised to
    /// what O_DIRECT needs. Clients are told this as the logical block size.
    pub block_size: u32,
    pub physical_block_size: u32,
}

pub trait Backing: Send + Sync {
    /// For logs: what it is and where.
    fn describe(&self) -> String;

    fn geometry(&self) -> Geometry;

    /// Usable bytes now: [`Geometry::capacity`], unless the store can grow or shrink while it
    /// is served ([`Backing::resizable`]), when this follows it. Requests are checked against
    /// it.
    fn capacity(&self) -> u64 {
        self.geometry().capacity
    }

    /// Whether [`Backing::capacity`] may change while served (an RBD image): clients are
    /// told so (`features::RESIZE`), and every response reports it.
    fn resizable(&self) -> bool {
        false
    }

    /// Starts `op`; its completion arrives on `ring` with `user_data` and the operation's
    /// result (bytes moved, 0, or `-errno`). `buf` is the data of a Read or Write (at least
    /// `len` bytes), unused by the others.
    ///
    /// # Safety
    ///
    /// As for [`Ring::read`]: `buf` stays allocated and untouched until the completion.
    unsafe fn start(
        &self,
        ring: &mut Ring,
        op: IoOp,
        buf: *mut u8,
        user_data: u64,
    ) -> io::Result<()>;

    /// What to try when `op` failed with `errno` for want of support (a discard where the
    /// store can only zero, say); `None`: it fails.
    fn fallback(&self, op: IoOp, errno: i32) -> Option<IoOp> {
        let unsupported = matches!(errno, libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL);
        match op {
            IoOp::PunchHole { off, len } if unsupported => Some(IoOp::ZeroRange { off, len }),
            _ => None,
        }
    }

    /// Makes every completed write durable, synchronously (at shutdown).
    fn sync(&self) -> io::Result<()>;

    /// The fd its operations go to, if one does: a connection's ring registers it as a fixed
    /// file ([`Ring::register_file`]). It stays open as long as the backing.
    fn fixed_fd(&self) -> Option<RawFd> {
        None
    }

    /// Whether other targets may serve the same store (an RBD export with `gateway`):
    /// clients are told so (`features::GATEWAY`), and [`Backing::take_over`] makes this one
    /// its writer.
    fn gateway(&self) -> bool {
        false
    }

    /// Makes sure this target is the store's one writer before a read-write session is let
    /// in, fencing out the one that was (blocking, for a few seconds at most). `Ok(true)`: it
    /// took the store over now; `Ok(false)`: it was the writer already. Only a
    /// [`Backing::gateway`] has anything to do.
    fn take_over(&self) -> io::Result<bool> {
        Ok(false)
    }

    /// Before a read-write session of an export that is not a gateway is let in: takes back a
    /// lock on the store that this target held and lost without anyone taking it (librbd
    /// recovering its watch after a stalled OSD). One that another took stays lost: that one
    /// fenced this target out on purpose. Never fails the session: its writes are refused
    /// (`Fenced`) while the lock is not held.
    fn take_back(&self) {}

    /// Whether a modifying operation that completed with `errno` was refused because another
    /// writer has fenced this target out of the store: it was not applied, lost nothing the
    /// export must report later, and is counted (`writes_refused_unlocked`).
    fn fenced_out(&self, _errno: i32) -> bool {
        false
    }

    /// Which connection to the store serves now (a gateway connects afresh after another
    /// fenced it out; 0 for others). A connection admitted under an earlier one may modify
    /// nothing: what it still has queued was sent before the takeover that fenced this target
    /// out, and the fresh connection would write it unchecked (docs/design.md, "Several
    /// gateways", the fresh-instance rule).
    fn instance(&self) -> u64 {
        0
    }
}

/// What [`Backing::start`] fails with when another writer has fenced this target out of the
/// store: the operation was not started (see [`is_fenced_out`]).
#[derive(Debug)]
pub struct FencedOut(pub String);

impl std::fmt::Display for FencedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FencedOut {}

/// Whether `e` is a [`FencedOut`].
pub fn is_fenced_out(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|x| x.is::<FencedOut>())
}

/// A file or block device.
pub struct FdBacking {
    path: PathBuf,
    file: File,
    block_device: bool,
    direct: bool,
    geometry: Geometry,
}

/// A queue attribute of block device `rdev`, or of the disk a partition `rdev` is on.
fn sysfs_block_size(rdev: u64, which: &str) -> Option<u32> {
    let (maj, min) = (libc::major(rdev), libc::minor(rdev));
    ["queue", "../queue"].iter().find_map(|q| {
        let p = format!("/sys/dev/block/{maj}:{min}/{q}/{which}");
        std::fs::read_to_string(p).ok()?.trim().parse().ok()
    })
}

/// The O_DIRECT offset alignment the kernel reports for an open file (statx, Linux 6.1+),
/// 0 if it does not say.
fn dio_offset_align(f: &File) -> u32 {
    // SAFETY: statx is plain data; zero is a valid value for every field.
    let mut sx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: the fd is open for the call, the empty path with AT_EMPTY_PATH names it, and
    // `sx` is a valid out-pointer.
    let r = unsafe {
        libc::statx(
            f.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut sx,
        )
    };
    if r != 0 || sx.stx_mask & libc::STATX_DIOALIGN == 0 {
        return 0;
    }
    sx.stx_dio_offset_align
}

impl FdBacking {
    /// Opens `path` for an export: read-write unless `read_only`, with O_DIRECT if `direct`
    /// (an error where the filesystem refuses it: never a silent second path through the
    /// page cache), and exclusively. A block device is opened O_EXCL, which fails while it is
    /// mounted or held by another exclusive opener; a file is locked (flock), exclusively for
    /// read-write and shared for read-only, so two targets cannot serve one image.
    pub fn open(path: &Path, read_only: bool, direct: bool) -> io::Result<FdBacking> {
        Self::open_with(path, read_only, direct, true)
    }

    /// Opens `path` as [`FdBacking::open`] does (the same access, O_DIRECT, type and block
    /// size checks) but without the exclusive hold: no O_EXCL, no lock. For
    /// `--check-config`, which must neither disturb a target serving the export now nor fail
    /// because one does.
    pub fn inspect(path: &Path, read_only: bool, direct: bool) -> io::Result<FdBacking> {
        Self::open_with(path, read_only, direct, false)
    }

    fn open_with(path: &Path, read_only: bool, direct: bool, hold: bool) -> io::Result<FdBacking> {
        let meta = std::fs::metadata(path)?;
        let block_device = meta.file_type().is_block_device();
        if !block_device && !meta.file_type().is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file or a block device",
            ));
        }
        let mut flags = 0;
        if direct {
            flags |= libc::O_DIRECT;
        }
        if block_device && hold {
            flags |= libc::O_EXCL;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(!read_only)
            .custom_flags(flags)
            .open(path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EINVAL) if direct => io::Error::new(
                    e.kind(),
                    format!("{e}: this filesystem refuses O_DIRECT (set direct = false to serve it through the page cache)"),
                ),
                Some(libc::EBUSY) => io::Error::new(
                    e.kind(),
                    format!("{e}: the device is mounted or held exclusively by another program"),
                ),
                _ => e,
            })?;
        if !block_device && hold {
            let op = if read_only {
                libc::LOCK_SH
            } else {
                libc::LOCK_EX
            };
            // SAFETY: flock on an fd we own, with plain flags.
            if unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) } != 0 {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(
                    e.kind(),
                    format!("{e}: the image is locked by another program (another target?)"),
                ));
            }
        }
        // What was opened, not what the path named a moment before.
        let meta = file.metadata()?;
        let ft = meta.file_type();
        if ft.is_block_device() != block_device || !(block_device || ft.is_file()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the path changed while it was being opened",
            ));
        }
        let size = if block_device {
            file.seek(SeekFrom::End(0))?
        } else {
            meta.len()
        };
        let (lbs, pbs) = if block_device {
            let l = sysfs_block_size(meta.rdev(), "logical_block_size").unwrap_or(SECTOR_SIZE);
            let p = sysfs_block_size(meta.rdev(), "physical_block_size").unwrap_or(l);
            (l, p.max(l))
        } else {
            (SECTOR_SIZE, 4096)
        };
        let align = match direct {
            false => 0,
            // A kernel that does not report it (before 6.1): the logical block size of the
            // device the file lives on, the alignment O_DIRECT asks of most filesystems.
            true => match dio_offset_align(&file) {
                0 if !block_device => {
                    sysfs_block_size(meta.dev(), "logical_block_size").unwrap_or(SECTOR_SIZE)
                }
                a => a,
            },
        };
        let block_size = lbs.max(align).max(SECTOR_SIZE);
        if !block_size.is_power_of_two() || block_size > 4096 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a block size of {block_size} bytes is not supported (512 to 4096)"),
            ));
        }
        let capacity = size / u64::from(block_size) * u64::from(block_size);
        Ok(FdBacking {
            path: path.to_path_buf(),
            file,
            block_device,
            direct,
            geometry: Geometry {
                capacity,
                block_size,
                physical_block_size: pbs.max(block_size),
            },
        })
    }

    fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl Backing for FdBacking {
    fn describe(&self) -> String {
        format!(
            "{} {}{}",
            if self.block_device {
                "block device"
            } else {
                "file"
            },
            self.path.display(),
            if self.direct { " (O_DIRECT)" } else { "" }
        )
    }

    fn geometry(&self) -> Geometry {
        self.geometry
    }

    unsafe fn start(
        &self,
        ring: &mut Ring,
        op: IoOp,
        buf: *mut u8,
        user_data: u64,
    ) -> io::Result<()> {
        let keep = libc::FALLOC_FL_KEEP_SIZE;
        match op {
            // SAFETY: forwarded to the caller.
            IoOp::Read { off, len } => unsafe { ring.read(self.fd(), buf, len, off, user_data) },
            IoOp::Write { off, len, fua } => {
                // SAFETY: forwarded to the caller.
                unsafe { ring.write(self.fd(), buf, len, off, fua, user_data) }
            }
            IoOp::Flush => ring.fdatasync(self.fd(), user_data),
            IoOp::PunchHole { off, len } => ring.fallocate(
                self.fd(),
                libc::FALLOC_FL_PUNCH_HOLE | keep,
                off,
                len,
                user_data,
            ),
            IoOp::ZeroRange { off, len } => ring.fallocate(
                self.fd(),
                libc::FALLOC_FL_ZERO_RANGE | keep,
                off,
                len,
                user_data,
            ),
        }
    }

    fn fallback(&self, op: IoOp, errno: i32) -> Option<IoOp> {
        let unsupported = matches!(errno, libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL);
        match op {
            IoOp::PunchHole { off, len } if unsupported => Some(IoOp::ZeroRange { off, len }),
            // tmpfs and others punch holes but cannot zero a range: a hole reads as zeroes.
            IoOp::ZeroRange { off, len } if unsupported && !self.block_device => {
                Some(IoOp::PunchHole { off, len })
            }
            _ => None,
        }
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn fixed_fd(&self) -> Option<RawFd> {
        Some(self.fd())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ring_op(b: &FdBacking, op: IoOp, buf: &mut [u8]) -> i32 {
        let mut r = Ring::new(4).unwrap();
        // SAFETY: `buf` outlives the drain below, which waits for the completion.
        unsafe { b.start(&mut r, op, buf.as_mut_ptr(), 1) }.unwrap();
        let mut out = Vec::new();
        assert!(r.drain(Duration::from_secs(5), &mut out));
        out[0].result
    }

    #[test]
    fn a_file_through_the_ring() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("e.img");
        std::fs::write(&p, vec![0x11u8; 1 << 20]).unwrap();
        // tempfile's filesystem may refuse O_DIRECT; the buffered path is the same code.
        let b = FdBacking::open(&p, false, true).or_else(|_| FdBacking::open(&p, false, false));
        let b = b.unwrap();
        assert_eq!(b.geometry().capacity, 1 << 20);
        let mut w = rdmadisk_net::buf::AlignedBuf::new(8192);
        w.fill(0x5a);
        let fua = IoOp::Write {
            off: 4096,
            len: 8192,
            fua: true,
        };
        assert_eq!(ring_op(&b, fua, &mut w), 8192);
        let mut r = rdmadisk_net::buf::AlignedBuf::new(8192);
        assert_eq!(
            ring_op(
                &b,
                IoOp::Read {
                    off: 4096,
                    len: 8192
                },
                &mut r
            ),
            8192
        );
        assert!(r.iter().all(|&x| x == 0x5a));
        assert_eq!(ring_op(&b, IoOp::Flush, &mut []), 0);
        let hole = ring_op(
            &b,
            IoOp::PunchHole {
                off: 4096,
                len: 4096,
            },
            &mut [],
        );
        let zero = ring_op(
            &b,
            IoOp::ZeroRange {
                off: 8192,
                len: 4096,
            },
            &mut [],
        );
        assert!(
            hole == 0
                || b.fallback(IoOp::PunchHole { off: 0, len: 1 }, -hole)
                    .is_some()
        );
        assert!(
            zero == 0
                || b.fallback(IoOp::ZeroRange { off: 0, len: 1 }, -zero)
                    .is_some()
        );
        // Exclusive: a second open of the image fails while this one holds it.
        let e = FdBacking::open(&p, false, false).err().unwrap();
        assert!(e.to_string().contains("locked"), "{e}");
        // An inspection takes no hold: it works beside the holder, and leaves it alone.
        let seen = FdBacking::inspect(&p, false, false).unwrap();
        assert_eq!(seen.geometry().capacity, 1 << 20);
        drop(seen);
        drop(b);
        assert!(FdBacking::open(&p, true, false).is_ok());
    }

    #[test]
    fn inspecting_reports_what_opening_would() {
        let dir = tempfile::tempdir().unwrap();
        let missing = FdBacking::inspect(&dir.path().join("none"), true, false);
        assert_eq!(missing.err().unwrap().kind(), io::ErrorKind::NotFound);
        let not_a_file = FdBacking::inspect(dir.path(), true, false).err().unwrap();
        assert!(not_a_file.to_string().contains("not a regular file"));
    }
}
