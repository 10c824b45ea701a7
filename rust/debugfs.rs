// SPDX-License-Identifier: GPL-2.0

//! debugfs directories with `u32`/`u64` files backed by the driver's own atomics, for the
//! per-disk fault injection knobs (`/sys/kernel/debug/rdmadisk/rdmadiskN/`).
//!
//! debugfs is a debugging aid: a directory that cannot be created (debugfs off, out of
//! memory) is simply absent, and the driver works the same without it.

use core::{
    ptr::{self, NonNull},
    sync::atomic::{AtomicU32, AtomicU64},
};
use kernel::{str::CStr, sync::Arc};

use super::bindings as b;

/// A debugfs directory, removed (with everything in it) when dropped. It keeps `T`, whose
/// atomics its files read and write, alive at least as long as the files exist.
pub(crate) struct Dir<T: Send + Sync + 'static> {
    dentry: Option<NonNull<b::dentry>>,
    _backing: Option<Arc<T>>,
}

// SAFETY: A dentry is used only through the debugfs API, which locks internally.
unsafe impl<T: Send + Sync + 'static> Send for Dir<T> {}
// SAFETY: `&Dir` exposes nothing.
unsafe impl<T: Send + Sync + 'static> Sync for Dir<T> {}

/// One file: its name and the atomic of `T` it shows.
pub(crate) enum File<T> {
    /// Read-write `u32` (mode 0600).
    U32(&'static CStr, fn(&T) -> &AtomicU32),
    /// Read-only `u64` (mode 0400).
    U64(&'static CStr, fn(&T) -> &AtomicU64),
}

impl<T: Send + Sync + 'static> Dir<T> {
    /// Creates `name` under `parent` (the debugfs root when `None`) with `files`, each backed by
    /// an atomic of `backing`. Never fails: without debugfs the directory is just not there.
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
        if let (Some(d), Some(t)) = (dentry, backing.as_ref()) {
            for f in files {
                // SAFETY: `d` is our directory; the atomic lives inside `*t`, which this `Dir`
                // keeps alive until after `debugfs_remove` has removed the file and waited for
                // its users (debugfs's attribute files are removal-safe). An `AtomicU32` has
                // the layout of a `u32`, and the file's reads and writes are single aligned
                // accesses, as atomic ones are.
                unsafe {
                    match f {
                        File::U32(n, get) => b::debugfs_create_u32(
                            n.as_char_ptr(),
                            0o600,
                            d.as_ptr(),
                            get(t).as_ptr(),
                        ),
                        File::U64(n, get) => b::debugfs_create_u64(
                            n.as_char_ptr(),
                            0o400,
                            d.as_ptr(),
                            get(t).as_ptr(),
                        ),
                    }
                };
            }
        }
        Self {
            dentry,
            _backing: backing,
        }
    }
}

impl<T: Send + Sync + 'static> Drop for Dir<T> {
    fn drop(&mut self) {
        if let Some(d) = self.dentry {
            // SAFETY: Our directory; removing it removes its files and waits until no file
            // operation is running, so `_backing` may be released after.
            unsafe { b::debugfs_remove(d.as_ptr()) };
        }
    }
}
