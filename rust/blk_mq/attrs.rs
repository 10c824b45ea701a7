// SPDX-License-Identifier: GPL-2.0

//! A disk's own sysfs directory, `/sys/block/<disk>/rdmadisk/`: a kobject with typed
//! attribute files, one of which may unmap the disk from inside its own write.

use core::{
    marker::PhantomData,
    mem,
    ptr::{self, NonNull},
    sync::atomic::{AtomicPtr, AtomicUsize, Ordering},
};
use kernel::{
    ffi,
    page::PAGE_SIZE,
    prelude::*,
    str::CStr,
    sync::Arc,
    task::Task,
    types::{ForeignOwnable, Opaque},
};

use super::super::bindings as b;
use super::super::sysfs::ShowBuf;

type ShowFn<D> = fn(&D, &mut ShowBuf<'_>) -> Result;
type StoreFn<D> = fn(&Arc<D>, &[u8]) -> Result;

/// One attribute file in a disk's `rdmadisk/` directory, typed by the driver state `D`.
#[repr(C)]
pub(crate) struct DiskAttr<D> {
    // First, so that the `kobj_attribute` pointer sysfs passes is also the `DiskAttr` pointer.
    raw: b::kobj_attribute,
    show: Option<ShowFn<D>>,
    store: Option<StoreFn<D>>,
    self_remove: bool,
}

// SAFETY: After construction a `DiskAttr` is immutable; the raw pointers in it point at
// `'static` data (the name) and the callbacks are plain functions.
unsafe impl<D> Sync for DiskAttr<D> {}

/// The attributes of a disk's directory: a static list, e.g.
/// `static ATTRS: &DiskAttrs<Dev> = &[&STATE, &UNMAP];`.
pub(crate) type DiskAttrs<D> = [&'static DiskAttr<D>];

/// Most attributes in a disk's directory.
pub(super) const MAX_DISK_ATTRS: usize = 48;

impl<D: Send + Sync + 'static> DiskAttr<D> {
    const fn new(
        name: &'static CStr,
        mode: u16,
        show: Option<ShowFn<D>>,
        store: Option<StoreFn<D>>,
        self_remove: bool,
    ) -> Self {
        // SAFETY: All-zero is a valid `kobj_attribute` (null name and callbacks, no lockdep
        // key: static attributes need none).
        let mut raw: b::kobj_attribute = unsafe { mem::zeroed() };
        raw.attr.name = name.as_char_ptr();
        raw.attr.mode = mode;
        if show.is_some() {
            raw.show = Some(attr_show::<D>);
        }
        if store.is_some() {
            raw.store = Some(attr_store::<D>);
        }
        Self {
            raw,
            show,
            store,
            self_remove,
        }
    }

    /// A read-only (0444) attribute.
    pub(crate) const fn ro(name: &'static CStr, show: ShowFn<D>) -> Self {
        Self::new(name, 0o444, Some(show), None, false)
    }

    /// A read-write (0644) attribute. `Err(e)` from `store` fails the write with `e`.
    ///
    /// `store` must not drop the [`Disk`] this directory belongs to (that waits for the store
    /// to finish: a deadlock); use [`DiskAttr::wo_self_remove`] for that.
    ///
    /// [`Disk`]: super::Disk
    pub(crate) const fn rw(name: &'static CStr, show: ShowFn<D>, store: StoreFn<D>) -> Self {
        Self::new(name, 0o644, Some(show), Some(store), false)
    }

    /// A write-only (0200) attribute. `Err(e)` from `store` fails the write with `e`; as for
    /// [`DiskAttr::rw`], `store` must not drop the [`Disk`].
    ///
    /// [`Disk`]: super::Disk
    pub(crate) const fn wo(name: &'static CStr, store: StoreFn<D>) -> Self {
        Self::new(name, 0o200, None, Some(store), false)
    }

    /// A write-only (0200) attribute whose `store` may drop the [`Disk`] (an `unmap`),
    /// synchronously, in the writer's task.
    ///
    /// If `store` drops the disk, the disk's teardown first removes this very file with
    /// `sysfs_remove_file_self` (as RNBD's `unmap_device` does), so that deleting the directory
    /// does not wait for the write in progress. If `store` does not (it refuses, e.g. the disk
    /// is open), the file stays, and the write fails with its error. While such a store runs,
    /// the module cannot be unloaded, and another self-removing write to the same directory
    /// fails with `EBUSY`.
    ///
    /// [`Disk`]: super::Disk
    pub(crate) const fn wo_self_remove(name: &'static CStr, store: StoreFn<D>) -> Self {
        Self::new(name, 0o200, None, Some(store), true)
    }
}

/// A read-only attribute file of the disk's device itself, `/sys/block/<disk>/<name>`,
/// created by `device_add_disk` with the device: it is there before the disk's add uevent,
/// so udev rules can read it then (the `rdmadisk/` directory is too, but for a map that
/// overlaps another's add: `early_dir`). For what rules name devices by: the identity
/// (docs/design.md, "Identity").
#[repr(C)]
pub(crate) struct DevAttr<D> {
    // First, so that the `device_attribute` pointer sysfs passes is also the `DevAttr` pointer.
    raw: b::device_attribute,
    show: ShowFn<D>,
}

// SAFETY: After construction a `DevAttr` is immutable; the raw pointers in it point at
// `'static` data (the name) and the callbacks are plain functions.
unsafe impl<D> Sync for DevAttr<D> {}

impl<D: Send + Sync + 'static> DevAttr<D> {
    /// A read-only (0444) attribute.
    pub(crate) const fn ro(name: &'static CStr, show: ShowFn<D>) -> Self {
        // SAFETY: All-zero is a valid `device_attribute` (null name and callbacks, no lockdep
        // key: static attributes need none).
        let mut raw: b::device_attribute = unsafe { mem::zeroed() };
        raw.attr.name = name.as_char_ptr();
        raw.attr.mode = 0o444;
        raw.show = Some(dev_attr_show::<D>);
        Self { raw, show }
    }

    /// The attribute as a group's member.
    pub(super) fn attr(&'static self) -> &'static b::attribute {
        &self.raw.attr
    }
}

unsafe extern "C" fn dev_attr_show<D: Send + Sync + 'static>(
    dev: *mut b::device,
    attr: *mut b::device_attribute,
    buf: *mut ffi::c_char,
) -> isize {
    // SAFETY: Installed only in the groups `Disk::new` passes to `device_add_disk` for a disk
    // of driver `D`, so `dev` is that disk's device, whose queue's `queuedata` is the tag set's
    // `Arc<D>` (from `into_foreign`). It is released only after the tag set is freed, which
    // comes after `del_gendisk` has removed these files and waited for their callbacks; and
    // `attr` is a `DevAttr<D>` (`repr(C)`, `raw` first), a static.
    let (attr, data) = unsafe {
        let disk = b::rdmadisk_dev_to_disk(dev);
        let borrowed = <Arc<D> as ForeignOwnable>::borrow((*(*disk).queue).queuedata);
        let data: &D = &*ptr::from_ref::<D>(&*borrowed);
        (&*attr.cast::<DevAttr<D>>(), data)
    };
    // SAFETY: sysfs hands `show` a zeroed buffer of one page, ours until we return.
    let page = unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), PAGE_SIZE) };
    let mut out = ShowBuf::new(page);
    match (attr.show)(data, &mut out) {
        Ok(()) => out.len() as isize,
        Err(e) => e.to_errno() as isize,
    }
}

/// The part of the directory's kobject container that does not depend on `D` (the static
/// `kobj_type` only knows this).
#[repr(C)]
struct KobjHead {
    // First, so that the kobject pointer is also the container pointer.
    kobj: Opaque<b::kobject>,
    /// Frees the whole container (a `DirKobj<D>`).
    free: unsafe fn(*mut KobjHead),
    /// The task running a self-removing store on this directory (as an address), or 0.
    remover: AtomicUsize,
    /// That store's attribute.
    remover_attr: AtomicPtr<b::attribute>,
}

/// The kobject of a disk's directory, with what its attribute callbacks need. Allocated in
/// `DiskDir::new`, freed by the kobject's release when its last reference goes.
#[repr(C)]
struct DirKobj<D> {
    head: KobjHead,
    driver: Arc<D>,
    attrs: [*mut b::attribute; MAX_DISK_ATTRS + 1],
    group: b::attribute_group,
}

/// `struct kobj_type` holding raw pointers, shareable because it is immutable.
#[repr(transparent)]
struct KobjType(b::kobj_type);

// SAFETY: Never written after initialisation; the pointers point to static data and functions.
unsafe impl Sync for KobjType {}

/// The type of every disk directory: attribute files through `kobj_sysfs_ops` (which calls the
/// `kobj_attribute` callbacks), freed through `KobjHead::free`.
static DIR_KTYPE: KobjType = KobjType(b::kobj_type {
    release: Some(dir_release),
    sysfs_ops: ptr::addr_of!(b::kobj_sysfs_ops),
    default_groups: ptr::null_mut(),
    child_ns_type: None,
    namespace: None,
    get_ownership: None,
});

/// The kobject's release: its last reference is gone.
///
/// # Safety
///
/// Called by the kobject core only, for a kobject of `DIR_KTYPE`.
unsafe extern "C" fn dir_release(kobj: *mut b::kobject) {
    let head = kobj.cast::<KobjHead>();
    // SAFETY: Every `DIR_KTYPE` kobject is the first field of a `KobjHead` (`repr(C)`), with
    // `free` set for its container; nobody uses it any more.
    unsafe { ((*head).free)(head) };
}

/// # Safety
///
/// `head` must be the head of a `DirKobj<D>` from `KBox::into_raw` that nobody uses any more.
unsafe fn dir_free<D>(head: *mut KobjHead) {
    // SAFETY: `DirKobj<D>` is `repr(C)` with `head` first; see the function's contract.
    drop(unsafe { KBox::from_raw(head.cast::<DirKobj<D>>()) });
}

fn current_task() -> usize {
    ptr::from_ref::<Task>(kernel::current!()) as usize
}

/// The attribute and the driver state of a callback.
///
/// # Safety
///
/// `kobj` must be a `DirKobj<D>`'s kobject whose attribute callback is running (sysfs then
/// holds the file active, so the directory and the container are still there), and `attr` one
/// of its attributes, a `DiskAttr<D>`.
unsafe fn attr_args<'a, D>(
    kobj: *mut b::kobject,
    attr: *mut b::kobj_attribute,
) -> (&'static DiskAttr<D>, &'a DirKobj<D>) {
    // SAFETY: `DiskAttr<D>` is `repr(C)` with `raw` first, and the attributes are statics; the
    // container outlives the callback (see the contract), and is only read.
    unsafe { (&*attr.cast::<DiskAttr<D>>(), &*kobj.cast::<DirKobj<D>>()) }
}

unsafe extern "C" fn attr_show<D: Send + Sync + 'static>(
    kobj: *mut b::kobject,
    attr: *mut b::kobj_attribute,
    buf: *mut ffi::c_char,
) -> isize {
    // SAFETY: Installed only on attributes of `DirKobj<D>` directories (`DiskDir::new`).
    let (attr, dir) = unsafe { attr_args::<D>(kobj, attr) };
    // SAFETY: sysfs hands `show` a zeroed buffer of one page, ours until we return.
    let page = unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), PAGE_SIZE) };
    let mut out = ShowBuf::new(page);
    let Some(show) = attr.show else {
        return EIO.to_errno() as isize;
    };
    match show(&dir.driver, &mut out) {
        Ok(()) => out.len() as isize,
        Err(e) => e.to_errno() as isize,
    }
}

unsafe extern "C" fn attr_store<D: Send + Sync + 'static>(
    kobj: *mut b::kobject,
    attr: *mut b::kobj_attribute,
    buf: *const ffi::c_char,
    count: usize,
) -> isize {
    // SAFETY: Installed only on attributes of `DirKobj<D>` directories (`DiskDir::new`).
    let (attr, dir) = unsafe { attr_args::<D>(kobj, attr) };
    // SAFETY: sysfs passes `count` valid bytes at `buf` for the duration of the call.
    let input = unsafe { core::slice::from_raw_parts(buf.cast::<u8>(), count) };
    let Some(store) = attr.store else {
        return EIO.to_errno() as isize;
    };
    let ret = if attr.self_remove {
        // SAFETY: The callback's contract (`attr_args`) holds.
        unsafe { store_self_removing(kobj, attr, dir, store, input) }
    } else {
        store(&dir.driver, input)
    };
    match ret {
        Ok(()) => count as isize,
        Err(e) => e.to_errno() as isize,
    }
}

/// A store that may drop the disk, and with it delete this directory, from inside the write.
///
/// # Safety
///
/// As for `attr_args`, with `dir` the container of `kobj` and `attr` the attribute written.
unsafe fn store_self_removing<D>(
    kobj: *mut b::kobject,
    attr: &'static DiskAttr<D>,
    dir: &DirKobj<D>,
    store: StoreFn<D>,
    input: &[u8],
) -> Result {
    // Once the disk's teardown has removed our file (see `DiskDir::drop`), nothing waits for
    // this write any more: module unload could go ahead (hence the module reference), and the
    // directory's kobject could be released (hence the kobject reference, which keeps `dir`,
    // the `Arc<D>` in it and the marker below alive until we are done).
    // SAFETY: `__this_module` is this module, live while its code runs.
    if !unsafe { b::try_module_get(ptr::addr_of_mut!(b::__this_module)) } {
        return Err(ENODEV);
    }
    // SAFETY: The kobject is live (its file is active).
    unsafe { b::kobject_get(kobj) };
    let head = &dir.head;
    let me = current_task();
    let ret = if head
        .remover
        .compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        head.remover_attr
            .store(ptr::from_ref(&attr.raw.attr).cast_mut(), Ordering::Release);
        let ret = store(&dir.driver, input);
        head.remover.store(0, Ordering::Release);
        ret
    } else {
        Err(EBUSY)
    };
    // SAFETY: The reference taken above; this may free `dir` (nothing uses it afterwards).
    unsafe { b::kobject_put(kobj) };
    // SAFETY: The reference taken above. Returning to the caller after this is the usual
    // (RNBD) pattern: unloading first waits for the disks, which are dropped before it.
    unsafe { b::module_put(ptr::addr_of_mut!(b::__this_module)) };
    ret
}

/// A disk's sysfs directory `rdmadisk/`: a kobject under the disk's device, with the
/// attributes as a group.
pub(super) struct DiskDir<D> {
    head: NonNull<KobjHead>,
    _p: PhantomData<Arc<D>>,
}

impl<D: Send + Sync + 'static> DiskDir<D> {
    pub(super) fn new(
        disk: *mut b::gendisk,
        driver: Arc<D>,
        attrs: &'static DiskAttrs<D>,
    ) -> Result<Self> {
        if attrs.len() > MAX_DISK_ATTRS {
            return Err(EINVAL);
        }
        let dir = KBox::new(
            DirKobj {
                head: KobjHead {
                    // SAFETY: `kobject_init` wants a zeroed kobject.
                    kobj: Opaque::new(unsafe { mem::zeroed() }),
                    free: dir_free::<D>,
                    remover: AtomicUsize::new(0),
                    remover_attr: AtomicPtr::new(ptr::null_mut()),
                },
                driver,
                attrs: [ptr::null_mut(); MAX_DISK_ATTRS + 1],
                // SAFETY: All-zero is an empty, unnamed `attribute_group`.
                group: unsafe { mem::zeroed() },
            },
            GFP_KERNEL,
        )?;
        let raw = KBox::into_raw(dir);
        // SAFETY: `raw` is ours and stays at this address until the kobject's release frees
        // it. The group's pointers into it (a NUL-terminated array of `'static` attributes)
        // stay valid as long as the files exist, which end at `kobject_del` at the latest.
        // `disk` is added, so its device kobject is there to be the parent.
        let kobj = unsafe {
            for (slot, attr) in (*raw).attrs.iter_mut().zip(attrs.iter()) {
                *slot = ptr::from_ref(&attr.raw.attr).cast_mut();
            }
            (*raw).group.attrs = ptr::addr_of_mut!((*raw).attrs).cast();
            let kobj = (*raw).head.kobj.get();
            let ret = b::kobject_init_and_add(
                kobj,
                &DIR_KTYPE.0,
                b::rdmadisk_disk_kobj(disk),
                c"%s".as_ptr().cast::<ffi::c_char>(),
                c"rdmadisk".as_ptr().cast::<ffi::c_char>(),
            );
            if ret != 0 {
                // The documented cleanup of a failed `kobject_init_and_add`: the release
                // frees the container.
                b::kobject_put(kobj);
                return Err(Error::from_errno(ret));
            }
            let ret = b::sysfs_create_group(kobj, ptr::addr_of!((*raw).group));
            if ret != 0 {
                b::kobject_del(kobj);
                b::kobject_put(kobj);
                return Err(Error::from_errno(ret));
            }
            kobj
        };
        Ok(Self {
            head: NonNull::new(kobj.cast::<KobjHead>()).ok_or(EINVAL)?,
            _p: PhantomData,
        })
    }
}

impl<D> Drop for DiskDir<D> {
    fn drop(&mut self) {
        let head = self.head.as_ptr();
        // SAFETY: We hold the kobject's initial reference, so the container is live.
        let kobj = unsafe { (*head).kobj.get() };
        // SAFETY: As above.
        let (remover, attr) = unsafe {
            (
                (*head).remover.load(Ordering::Acquire),
                (*head).remover_attr.load(Ordering::Acquire),
            )
        };
        if remover == current_task() {
            // We are dropped from inside a self-removing store on this directory (only that
            // task can see its own address here): remove its file first, so that deleting the
            // directory does not wait for the write we are part of.
            // SAFETY: `attr` is the attribute of the store this task is running on `kobj`.
            unsafe { b::sysfs_remove_file_self(kobj, attr) };
        }
        // SAFETY: Removes the directory, waiting for the other running callbacks, then drops
        // our reference; the container is freed by the release when the last one goes (a
        // running self-removing store holds one).
        unsafe {
            b::kobject_del(kobj);
            b::kobject_put(kobj);
        }
    }
}
