//! Exports: a backing file or block device, opened with O_DIRECT where the backing allows it.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rdmadisk_net::buf::AlignedBuf;
use rdmadisk_proto::wire::SECTOR_SIZE;

/// O_DIRECT I/O is used only when offset and length are multiples of this (and the buffer is
/// page-aligned, which AlignedBuf guarantees): safe for any logical block size up to 4 KiB.
const DIRECT_ALIGN: u64 = 4096;

/// One export.
pub struct Export {
    pub name: String,
    pub path: PathBuf,
    pub read_only: bool,
    pub capacity_sectors: u64,
    pub logical_block_size: u32,
    pub physical_block_size: u32,
    file: File,
    direct: Option<File>,
    direct_ok: AtomicBool,
}

fn sysfs_block_size(rdev: u64, which: &str) -> Option<u32> {
    let (maj, min) = (libc::major(rdev), libc::minor(rdev));
    let p = format!("/sys/dev/block/{maj}:{min}/queue/{which}");
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

fn fallocate(f: &File, mode: i32, off: u64, len: u64) -> io::Result<()> {
    let (off, len) = (
        i64::try_from(off).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
        i64::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
    );
    // SAFETY: fallocate takes an fd we own for the call's duration and plain integers.
    let r = unsafe { libc::fallocate(f.as_raw_fd(), mode, off, len) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl Export {
    /// Opens `path`. `use_direct` asks for O_DIRECT, which falls back to buffered I/O (with a
    /// log line) where the filesystem refuses it, e.g. tmpfs.
    pub fn open(name: &str, path: &Path, read_only: bool, use_direct: bool) -> io::Result<Export> {
        let mut file = OpenOptions::new().read(true).write(!read_only).open(path)?;
        let meta = file.metadata()?;
        let is_blk = meta.file_type().is_block_device();
        let size = if is_blk {
            file.seek(SeekFrom::End(0))?
        } else {
            meta.len()
        };
        let (lbs, pbs) = if is_blk {
            let l = sysfs_block_size(meta.rdev(), "logical_block_size").unwrap_or(SECTOR_SIZE);
            let p = sysfs_block_size(meta.rdev(), "physical_block_size").unwrap_or(l);
            (l, p.max(l))
        } else {
            (SECTOR_SIZE, 4096)
        };
        let direct = if use_direct {
            match OpenOptions::new()
                .read(true)
                .write(!read_only)
                .custom_flags(libc::O_DIRECT)
                .open(path)
            {
                Ok(f) => Some(f),
                Err(e) => {
                    eprintln!("rdmadisk-target: export {name}: O_DIRECT unavailable on {} ({e}); using buffered I/O", path.display());
                    None
                }
            }
        } else {
            None
        };
        let lbs_sectors = u64::from(lbs / SECTOR_SIZE).max(1);
        let capacity_sectors = (size / u64::from(SECTOR_SIZE)) / lbs_sectors * lbs_sectors;
        Ok(Export {
            name: name.to_string(),
            path: path.to_path_buf(),
            read_only,
            capacity_sectors,
            logical_block_size: lbs,
            physical_block_size: pbs,
            direct_ok: AtomicBool::new(direct.is_some()),
            file,
            direct,
        })
    }

    /// Whether O_DIRECT is in use.
    pub fn is_direct(&self) -> bool {
        self.direct_ok.load(Ordering::Relaxed)
    }

    fn direct_for(&self, off: u64, len: usize) -> Option<&File> {
        if !self.is_direct() || off % DIRECT_ALIGN != 0 || len as u64 % DIRECT_ALIGN != 0 {
            return None;
        }
        self.direct.as_ref()
    }

    fn disable_direct(&self, e: &io::Error) {
        if self.direct_ok.swap(false, Ordering::Relaxed) {
            eprintln!("rdmadisk-target: export {}: O_DIRECT I/O failed ({e}); falling back to buffered I/O", self.name);
        }
    }

    /// Reads `buf.len()` bytes at byte offset `off`. `buf` must come from an AlignedBuf-backed
    /// region for O_DIRECT; any slice works for buffered I/O.
    pub fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        if let Some(f) = self
            .direct_for(off, buf.len())
            .filter(|_| aligned(buf.as_ptr()))
        {
            match f.read_exact_at(buf, off) {
                Ok(()) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.disable_direct(&e),
                Err(e) => return Err(e),
            }
        }
        self.file.read_exact_at(buf, off)
    }

    /// Writes `buf` at byte offset `off`; with `fua`, the data is durable on return.
    pub fn write_at(&self, buf: &[u8], off: u64, fua: bool) -> io::Result<()> {
        let mut done = false;
        if let Some(f) = self
            .direct_for(off, buf.len())
            .filter(|_| aligned(buf.as_ptr()))
        {
            match f.write_all_at(buf, off) {
                Ok(()) => done = true,
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.disable_direct(&e),
                Err(e) => return Err(e),
            }
        }
        if !done {
            self.file.write_all_at(buf, off)?;
        }
        if fua {
            self.flush()?;
        }
        Ok(())
    }

    /// Makes completed writes durable (fdatasync).
    pub fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// Discards a range: punches a hole (reads back as zeroes), or writes zeroes where the
    /// backing cannot punch.
    pub fn discard(&self, off: u64, len: u64) -> io::Result<()> {
        match fallocate(
            &self.file,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            off,
            len,
        ) {
            Ok(()) => Ok(()),
            Err(e) if unsupported(&e) => self.write_zeroes_slow(off, len),
            Err(e) => Err(e),
        }
    }

    /// Zeroes a range: FALLOC_FL_ZERO_RANGE, else a hole, else written zeroes.
    pub fn write_zeroes(&self, off: u64, len: u64) -> io::Result<()> {
        match fallocate(
            &self.file,
            libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
            off,
            len,
        ) {
            Ok(()) => Ok(()),
            Err(e) if unsupported(&e) => self.discard(off, len),
            Err(e) => Err(e),
        }
    }

    fn write_zeroes_slow(&self, off: u64, len: u64) -> io::Result<()> {
        let chunk = AlignedBuf::new(len.min(1 << 20) as usize);
        let mut pos = 0;
        while pos < len {
            let n = (len - pos).min(chunk.len() as u64) as usize;
            self.write_at(&chunk[..n], off + pos, false)?;
            pos += n as u64;
        }
        Ok(())
    }
}

fn aligned(p: *const u8) -> bool {
    (p as usize) % AlignedBuf::ALIGN == 0
}

fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINVAL)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_export_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("e.img");
        std::fs::write(&p, vec![0x11u8; 1 << 20]).unwrap();
        let e = Export::open("e", &p, false, true).unwrap();
        assert_eq!(e.capacity_sectors, 2048);
        let mut b = AlignedBuf::new(8192);
        b.fill(0x5a);
        e.write_at(&b, 4096, true).unwrap();
        let mut r = AlignedBuf::new(8192);
        e.read_at(&mut r, 4096).unwrap();
        assert!(r.iter().all(|&x| x == 0x5a));
        // Unaligned (buffered) path.
        let mut small = [0u8; 512];
        e.read_at(&mut small, 4096 + 512).unwrap();
        assert!(small.iter().all(|&x| x == 0x5a));
        e.discard(4096, 4096).unwrap();
        e.write_zeroes(8192, 4096).unwrap();
        e.read_at(&mut r, 4096).unwrap();
        assert!(r.iter().all(|&x| x == 0));
        e.read_at(&mut small, 0).unwrap();
        assert!(small.iter().all(|&x| x == 0x11));
        e.flush().unwrap();
    }
}
