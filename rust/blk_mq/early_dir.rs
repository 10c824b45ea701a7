// SPDX-License-Identifier: GPL-2.0

//! A disk's `rdmadisk/` directory made while `device_add_disk` adds the disk's device, so that
//! it is there before the disk's add uevent (which `device_add_disk` sends last, once the
//! partitions are scanned): udev rules and tools that read it on "add" then never race it.
//!
//! The driver core calls a class interface's `add_dev` from inside `device_add`, for every
//! device of the class. So for the length of one `device_add_disk` a class interface on the
//! disk's class (the block class, which is not exported: the disk's own device names it) waits
//! for the disk's device and makes the directory there. One map at a time does this (a claim
//! on [`PENDING`]); another map meanwhile makes its directory after the add, as all did before.

use core::{
    marker::PhantomPinned,
    pin::Pin,
    ptr,
    sync::atomic::{AtomicPtr, Ordering},
};
use kernel::{ffi, prelude::*, sync::Arc};

use super::super::bindings as b;
use super::attrs::{DiskAttrs, DiskDir};

/// The hook of the `device_add_disk` under way, or null.
static PENDING: AtomicPtr<Hook> = AtomicPtr::new(ptr::null_mut());

/// What `add_dev` needs, without the driver's type: the device to wait for and the function
/// that makes its directory (`make::<D>`, on the [`EarlyDir`] this is the head of).
#[repr(C)]
struct Hook {
    dev: *mut b::device,
    make: unsafe fn(*mut Hook),
}

#[repr(C)]
struct EarlyDirInner<D: Send + Sync + 'static> {
    // First, so that a `*mut Hook` from `PENDING` is also the container's.
    hook: Hook,
    intf: b::class_interface,
    disk: *mut b::gendisk,
    driver: Arc<D>,
    attrs: &'static DiskAttrs<D>,
    /// Set by `make`, under the class's mutex, inside `device_add_disk`.
    dir: Option<DiskDir<D>>,
    _pin: PhantomPinned,
}

/// Makes the `rdmadisk/` directory of a disk during [`EarlyDir::add_disk`].
pub(super) struct EarlyDir<D: Send + Sync + 'static>(Pin<KBox<EarlyDirInner<D>>>);

impl<D: Send + Sync + 'static> EarlyDir<D> {
    /// For `disk`, allocated and not added yet.
    ///
    /// # Safety
    ///
    /// `disk` must be an allocated gendisk that outlives the returned value.
    pub(super) unsafe fn new(
        disk: *mut b::gendisk,
        driver: Arc<D>,
        attrs: &'static DiskAttrs<D>,
    ) -> Result<Self> {
        // SAFETY: `disk` is allocated (its device is initialised, with its class set).
        let dev = unsafe { b::rdmadisk_disk_to_dev(disk) };
        let inner = KBox::pin(
            EarlyDirInner {
                hook: Hook {
                    dev,
                    make: make::<D>,
                },
                intf: b::class_interface {
                    // SAFETY: All-zero is an unlinked list head, which registering links.
                    node: unsafe { core::mem::zeroed() },
                    // SAFETY: As above: the disk's device has its class from allocation.
                    class: unsafe { b::rdmadisk_disk_class(disk) },
                    add_dev: Some(add_dev),
                    remove_dev: None,
                },
                disk,
                driver,
                attrs,
                dir: None,
                _pin: PhantomPinned,
            },
            GFP_KERNEL,
        )?;
        Ok(Self(inner))
    }

    /// Runs `add` (the disk's `device_add_disk`) with the hook in place when no other map's is,
    /// and returns its result and the directory: made inside it, or after it (when the hook
    /// was busy, or the device never came by); `None` when `add` failed.
    pub(super) fn add_disk(
        mut self,
        add: impl FnOnce() -> ffi::c_int,
    ) -> (ffi::c_int, Option<Result<DiskDir<D>>>) {
        // A raw pointer, not a reference: `make` reaches the container through `PENDING`
        // while `add` runs.
        // SAFETY: Only a pointer is taken; nothing is moved out of the pinned box.
        let inner: *mut EarlyDirInner<D> = unsafe { self.0.as_mut().get_unchecked_mut() };
        // The hook is the container's head (`repr(C)`): the same address, valid for all of it.
        let hook = inner.cast::<Hook>();
        // SAFETY: `inner` is live and pinned until `self` drops, after this function.
        let intf = unsafe { &raw mut (*inner).intf };
        let claimed = PENDING
            .compare_exchange(ptr::null_mut(), hook, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        // SAFETY: `intf` is pinned and registered at most until the unregister below; its
        // class is the block class, which is registered for as long as the kernel runs.
        let registered = claimed && unsafe { b::class_interface_register(intf) } == 0;
        let ret = add();
        if registered {
            // SAFETY: Registered above. This takes the class's mutex, so every `add_dev` call
            // (which runs under it) has returned, and none comes after.
            unsafe { b::class_interface_unregister(intf) };
        }
        if claimed {
            PENDING.store(ptr::null_mut(), Ordering::Release);
        }
        if ret != 0 {
            // A directory `make` made went with the device's removal (`device_del` removes
            // the subtree); dropping it with `self` puts our kobject.
            return (ret, None);
        }
        // SAFETY: Nothing else reaches `inner` any more (the hook is out of `PENDING` and the
        // interface unregistered).
        let inner = unsafe { &mut *inner };
        let dir = match inner.dir.take() {
            Some(dir) => Ok(dir),
            None => DiskDir::new(inner.disk, inner.driver.clone(), inner.attrs),
        };
        (ret, Some(dir))
    }
}

/// `class_interface::add_dev`: called for each device of the block class while registered
/// (those already there at registration, then each one added), under the class's mutex.
///
/// # Safety
///
/// Called by the driver core only, with a live device.
unsafe extern "C" fn add_dev(dev: *mut b::device) -> ffi::c_int {
    let hook = PENDING.load(Ordering::Acquire);
    // SAFETY: A non-null `PENDING` is the hook of an `EarlyDir` whose `add_disk` is running:
    // it is cleared only after the interface is unregistered, which waits for this call.
    if !hook.is_null() && unsafe { (*hook).dev } == dev {
        // SAFETY: As above; `make` is the one for the hook's container.
        unsafe { ((*hook).make)(hook) };
    }
    0
}

/// Makes the directory of the `EarlyDirInner<D>` whose head `hook` is, once.
///
/// # Safety
///
/// `hook` must be the head of a live `EarlyDirInner<D>`, with its `add_disk` running and the
/// class's mutex held. Then nothing else touches `dir`: `make` runs nested in the mapping
/// thread's own `device_add` (inside `add`), and every other `add_dev` waits for the mutex.
unsafe fn make<D: Send + Sync + 'static>(hook: *mut Hook) {
    let p = hook.cast::<EarlyDirInner<D>>();
    // Fields one by one, not a `&mut` of the whole: `intf` is in the class's list, which the
    // driver core walks around this call.
    // SAFETY: `EarlyDirInner<D>` is `repr(C)` with the hook first; see the contract.
    let (dir, disk, driver, attrs) = unsafe {
        (
            &mut *(&raw mut (*p).dir),
            (*p).disk,
            &(*p).driver,
            (*p).attrs,
        )
    };
    if dir.is_none() {
        // The device is added (its kobject is in sysfs), so it can be the parent. A failure
        // leaves `dir` empty: `add_disk` tries again once the add is done.
        *dir = DiskDir::new(disk, driver.clone(), attrs).ok();
    }
}
