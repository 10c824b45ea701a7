// SPDX-License-Identifier: GPL-2.0

//! debugfs directories with `u32`/`u64` files backed by the driver's own atomics, for the
//! per-disk fault injection knobs (`/sys/kernel/debug/rdmadisk/rdmadiskN/`).
//!
//! debugfs is a debugging aid: a directory that cannot be created (debugfs off, out of
//! memory) is simply absent, and the driver works the same without it. Its writable files
//! follow the driver's rule for bad knob input, which debugfs's own `u32` files do not (they
//! keep the low 32 bits of any larger number): anything but a whole number in the file's range
//! is refused with `EINVAL` and a log line naming the file, and changes nothing.

use core::{
    ffi::c_void,
    fmt::Write,
    ptr::{self, NonNull},
    sync::atomic::{AtomicU32, AtomicU64, Ordering},
};
use kernel::{
    ffi::c_char,
    fmt,
    prelude::*,
    str::{CStr, CString},
    sync::Arc,
};

use super::bindings as b;

/// A debugfs directory, removed (with everything in it) when dropped. It keeps `T`, whose
/// atomics its files read and write, alive at least as long as the files exist.
pub(crate) struct Dir<T: Send + Sync + 'static> {
    dentry: Option<NonNull<b::dentry>>,
    /// What the writable files' callbacks find through their inode (see [`U32File`]).
    _u32_files: KVec<KBox<U32File>>,
    _backing: Option<Arc<T>>,
}

// SAFETY: A dentry is used only through the debugfs API, which locks internally; the file
// records are read-only after creation and their atomics are `Sync`.
unsafe impl<T: Send + Sync + 'static> Send for Dir<T> {}
// SAFETY: `&Dir` exposes nothing.
unsafe impl<T: Send + Sync + 'static> Sync for Dir<T> {}

/// One file: its name and the atomic of `T` it shows.
pub(crate) enum File<T> {
    /// Read-write `u32` (mode 0600) taking a whole number from 0 to the given maximum.
    U32(&'static CStr, fn(&T) -> &AtomicU32, u32),
    /// Read-only `u64` (mode 0400).
    U64(&'static CStr, fn(&T) -> &AtomicU64),
}

/// What a writable `u32` file's callbacks need: its value, its range, and names for the log.
struct U32File {
    /// Inside the directory's backing `T`, which outlives the file (see [`Dir`]).
    value: *const AtomicU32,
    max: u32,
    name: &'static CStr,
    dir: CString,
}

impl U32File {
    fn value(&self) -> &AtomicU32 {
        // SAFETY: `value` points into the `Arc<T>` the directory holds until after
        // `debugfs_remove` has removed this file and waited for its callbacks.
        unsafe { &*self.value }
    }
}

/// `file_operations` holding raw pointers, shareable because it is immutable.
#[repr(transparent)]
struct FileOps(b::file_operations);

// SAFETY: Never written after initialisation; the pointers point to functions and to the module.
unsafe impl Sync for FileOps {}

/// The writable `u32` files' operations. Created with `debugfs_create_file`, so debugfs calls
/// them through its proxy, which lets `debugfs_remove` wait for a call in progress; `owner`
/// keeps the module (and this table) loaded while such a file is open.
static U32_FOPS: FileOps = FileOps(b::file_operations {
    owner: ptr::addr_of_mut!(b::__this_module),
    open: Some(b::simple_open),
    read: Some(u32_read),
    write: Some(u32_write),
    llseek: Some(b::default_llseek),
    // SAFETY: All-zero is "no callback" for every other member.
    ..unsafe { core::mem::zeroed() }
});

/// Text of at most `N` bytes, formatted in place.
struct Text<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Write for Text<N> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self.len + s.len();
        self.buf
            .get_mut(self.len..end)
            .ok_or(core::fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// A whole number from 0 to `max` in decimal digits, with surrounding whitespace (the newline
/// `echo` adds) and nothing else.
fn parse_u32(input: &[u8], max: u32) -> Option<u32> {
    let digits = input.trim_ascii();
    if digits.is_empty() || digits.len() > 10 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v = digits
        .iter()
        .fold(0u64, |v, d| v * 10 + u64::from(d - b'0'));
    u32::try_from(v).ok().filter(|v| *v <= max)
}

/// # Safety
///
/// Called by debugfs only, for a file of [`U32_FOPS`] opened with `simple_open`, whose
/// `private_data` is then its [`U32File`]; `buf` is a user buffer of `count` bytes.
unsafe extern "C" fn u32_read(
    file: *mut b::file,
    buf: *mut c_char,
    count: usize,
    ppos: *mut b::loff_t,
) -> isize {
    // SAFETY: See above; the record outlives every call (`Dir`).
    let f = unsafe { &*(*file).private_data.cast::<U32File>() };
    let mut text = Text::<16> {
        buf: [0; 16],
        len: 0,
    };
    let _ = writeln!(text, "{}", f.value().load(Ordering::Relaxed));
    // SAFETY: `buf` and `ppos` are the caller's, as debugfs passed them; `text` holds `len`
    // initialised bytes for the duration of the call.
    unsafe {
        b::simple_read_from_buffer(
            buf.cast::<c_void>(),
            count,
            ppos,
            text.buf.as_ptr().cast::<c_void>(),
            text.len,
        )
    }
}

/// # Safety
///
/// As [`u32_read`], with `buf` a user buffer of `count` bytes to read from.
unsafe extern "C" fn u32_write(
    file: *mut b::file,
    buf: *const c_char,
    count: usize,
    ppos: *mut b::loff_t,
) -> isize {
    // SAFETY: See above; the record outlives every call (`Dir`).
    let f = unsafe { &*(*file).private_data.cast::<U32File>() };
    let mut text = [0u8; 24];
    // One write of the whole value: a value in pieces, or longer than any number in range
    // with its newline, is refused whole.
    // SAFETY: `ppos` is the caller's, valid for the call.
    let value = if unsafe { *ppos } == 0 && count < text.len() {
        // SAFETY: `text` has room for `count` bytes; `buf` and `ppos` are the caller's.
        let n = unsafe {
            b::simple_write_to_buffer(
                text.as_mut_ptr().cast::<c_void>(),
                text.len(),
                ppos,
                buf.cast::<c_void>(),
                count,
            )
        };
        if n < 0 {
            // A fault reading the user's buffer: its error, not a bad value.
            return n;
        }
        text.get(..n as usize).and_then(|t| parse_u32(t, f.max))
    } else {
        None
    };
    match value {
        Some(v) => {
            f.value().store(v, Ordering::Relaxed);
            count as isize
        }
        None => {
            pr_err!(
                "{}: debugfs {}: expected a whole number from 0 to {}\n",
                &*f.dir,
                f.name,
                f.max
            );
            EINVAL.to_errno() as isize
        }
    }
}

impl<T: Send + Sync + 'static> Dir<T> {
    /// Creates `name` under `parent` (the debugfs root when `None`) with `files`, each backed by
    /// an atomic of `backing`. Never fails: without debugfs (or memory) the directory, or a
    /// file, is just not there.
    pub(crate) fn new(
        name: &CStr,
        parent: Option<&Dir<()>>,
        backing: Option<Arc<T>>,
        files: &[File<T>],
    ) -> Self {
        let parent = parent
            .and_then(|p| p.dentry)
            .map_or(ptr::null_mut(), NonNull::as_ptr);
        // SAFETY: `name` is NUL-terminated and copied by debugfs; `parent` is null (the root)
        // or a directory we created and still own.
        let raw = unsafe { b::debugfs_create_dir(name.as_char_ptr(), parent) };
        let dentry = match kernel::error::from_err_ptr(raw) {
            Ok(p) => NonNull::new(p),
            Err(_) => None,
        };
        let mut u32_files = KVec::new();
        if let (Some(d), Some(t)) = (dentry, backing.as_ref()) {
            for f in files {
                match f {
                    File::U32(n, get, max) => {
                        let Ok(dir) = CString::try_from_fmt(fmt!("{name}")) else {
                            continue;
                        };
                        let rec = U32File {
                            value: get(t),
                            max: *max,
                            name: n,
                            dir,
                        };
                        let Ok(rec) = KBox::new(rec, GFP_KERNEL) else {
                            continue;
                        };
                        if u32_files.push(rec, GFP_KERNEL).is_err() {
                            continue;
                        }
                        let data = u32_files
                            .last()
                            .map_or(ptr::null(), |r: &KBox<U32File>| ptr::from_ref(&**r));
                        // SAFETY: `d` is our directory; `data` is the boxed record, which keeps
                        // its address and lives in this `Dir` until after `debugfs_remove`
                        // removed the file and waited for its callbacks; `U32_FOPS` is static.
                        unsafe {
                            b::debugfs_create_file(
                                n.as_char_ptr(),
                                0o600,
                                d.as_ptr(),
                                data.cast_mut().cast::<c_void>(),
                                &U32_FOPS.0,
                            )
                        };
                    }
                    File::U64(n, get) => {
                        // SAFETY: `d` is our directory; the atomic lives inside `*t`, which
                        // this `Dir` keeps alive until after `debugfs_remove` has removed the
                        // file and waited for its users (debugfs's attribute files are
                        // removal-safe). An `AtomicU64` has the layout of a `u64`, and the file
                        // only reads it, with single aligned loads, as atomic ones are.
                        unsafe {
                            b::debugfs_create_u64(
                                n.as_char_ptr(),
                                0o400,
                                d.as_ptr(),
                                get(t).as_ptr(),
                            )
                        };
                    }
                }
            }
        }
        Self {
            dentry,
            _u32_files: u32_files,
            _backing: backing,
        }
    }
}

impl<T: Send + Sync + 'static> Drop for Dir<T> {
    fn drop(&mut self) {
        if let Some(d) = self.dentry {
            // SAFETY: Our directory; removing it removes its files and waits until no file
            // operation is running, so the file records and `_backing` may be released after
            // (the fields drop after this).
            unsafe { b::debugfs_remove(d.as_ptr()) };
        }
    }
}
