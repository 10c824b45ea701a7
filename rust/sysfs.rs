// SPDX-License-Identifier: GPL-2.0

//! A device class with attribute files, for the control directory `/sys/class/<class>/<dev>/`.
//!
//! Attributes are `static`s typed by the shared state `T` that the device carries as its
//! driver data (an `Arc<T>`), so a `show`/`store` always gets a `&T` of the right type.

use core::{
    fmt,
    marker::{PhantomData, PhantomPinned},
    pin::Pin,
    ptr::{self, NonNull},
};
use kernel::{ffi, page::PAGE_SIZE, prelude::*, str::CStr, sync::Arc, types::ForeignOwnable};

use super::bindings as b;

/// A device class, `/sys/class/<name>/`.
pub(crate) struct Class {
    ptr: NonNull<b::class>,
}

// SAFETY: A `struct class` is used under the driver core's own locking.
unsafe impl Send for Class {}
// SAFETY: See `Send`.
unsafe impl Sync for Class {}

impl Class {
    /// Creates and registers the class.
    pub(crate) fn new(name: &'static CStr) -> Result<Self> {
        // SAFETY: `name` is a static NUL-terminated string, as `class_create` requires.
        let ptr = kernel::error::from_err_ptr(unsafe { b::class_create(name.as_char_ptr()) })?;
        NonNull::new(ptr).map(|ptr| Self { ptr }).ok_or(ENOMEM)
    }
}

impl Drop for Class {
    fn drop(&mut self) {
        // SAFETY: Created by `class_create`; devices of the class borrow it and are gone.
        unsafe { b::class_destroy(self.ptr.as_ptr()) };
    }
}

/// The page a `show` writes into. Output beyond the page is cut, as sysfs requires.
pub(crate) struct ShowBuf<'a> {
    page: &'a mut [u8],
    len: usize,
}

impl<'a> ShowBuf<'a> {
    /// An empty writer into `page`, the page sysfs hands a `show` callback (also used by the
    /// disk attributes in `blk_mq.rs`).
    pub(super) fn new(page: &'a mut [u8]) -> Self {
        Self { page, len: 0 }
    }

    /// The number of bytes written, which is what a `show` callback returns.
    pub(super) fn len(&self) -> usize {
        self.len
    }
}

impl fmt::Write for ShowBuf<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // Keep one byte free: sysfs expects room for a terminating NUL.
        let room = self.page.len().saturating_sub(1).saturating_sub(self.len);
        let n = s.len().min(room);
        self.page[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        if n < s.len() {
            Err(fmt::Error)
        } else {
            Ok(())
        }
    }
}

type ShowFn<T> = fn(&T, &mut ShowBuf<'_>) -> Result;
type StoreFn<T> = fn(&T, &[u8]) -> Result;

/// One attribute file of a device whose driver data is an `Arc<T>`.
#[repr(C)]
pub(crate) struct Attr<T> {
    raw: b::device_attribute,
    show: Option<ShowFn<T>>,
    store: Option<StoreFn<T>>,
    /// What is written may hold a key: the buffer is wiped once the store returns.
    wipe: bool,
}

// SAFETY: After construction an `Attr` is immutable; the raw pointers in it point at `'static`
// data (the name) and the callbacks are plain functions.
unsafe impl<T> Sync for Attr<T> {}

impl<T: Send + Sync + 'static> Attr<T> {
    const fn new(
        name: &'static CStr,
        mode: u16,
        show: Option<ShowFn<T>>,
        store: Option<StoreFn<T>>,
    ) -> Self {
        // SAFETY: All-zero is a valid `device_attribute` (null name and callbacks, no lockdep
        // key: static attributes need none).
        let mut raw: b::device_attribute = unsafe { core::mem::zeroed() };
        raw.attr.name = name.as_char_ptr();
        raw.attr.mode = mode;
        if show.is_some() {
            raw.show = Some(show_callback::<T>);
        }
        if store.is_some() {
            raw.store = Some(store_callback::<T>);
        }
        Self {
            raw,
            show,
            store,
            wipe: false,
        }
    }

    /// A read-only (0444) attribute.
    pub(crate) const fn ro(name: &'static CStr, show: ShowFn<T>) -> Self {
        Self::new(name, 0o444, Some(show), None)
    }

    /// A write-only (0200) attribute. Its input may hold a key (the control files' do): the
    /// kernel's copy of what was written is overwritten with zeros once the store has read it,
    /// so that no freed buffer keeps the key.
    pub(crate) const fn wo_wiped(name: &'static CStr, store: StoreFn<T>) -> Self {
        let mut a = Self::new(name, 0o200, None, Some(store));
        a.wipe = true;
        a
    }
}

/// # Safety
///
/// `dev` must be a device created by [`ClassDevice::new`] for `T`, and `attr` an [`Attr<T>`].
unsafe fn callback_args<'a, T: Send + Sync + 'static>(
    dev: *mut b::device,
    attr: *mut b::device_attribute,
) -> (&'a Attr<T>, &'a T) {
    // SAFETY: `Attr<T>` is `repr(C)` with `raw` first, so the pointers coincide; the caller
    // guarantees the type.
    let attr = unsafe { &*attr.cast::<Attr<T>>() };
    // SAFETY: The drvdata of a `ClassDevice<T>` is an `Arc<T>` from `into_foreign`, released
    // only after `device_unregister` has drained all running callbacks.
    let data = unsafe { <Arc<T> as ForeignOwnable>::borrow(b::rdmadisk_dev_get_drvdata(dev)) };
    // SAFETY: The `Arc` outlives the callback (see above), so the reference does too.
    let data: &'a T = unsafe { &*ptr::from_ref::<T>(&*data) };
    (attr, data)
}

unsafe extern "C" fn show_callback<T: Send + Sync + 'static>(
    dev: *mut b::device,
    attr: *mut b::device_attribute,
    buf: *mut ffi::c_char,
) -> isize {
    // SAFETY: Installed only on attributes of `ClassDevice<T>` devices.
    let (attr, data) = unsafe { callback_args::<T>(dev, attr) };
    // SAFETY: sysfs hands `show` a zeroed buffer of one page, ours until we return.
    let page = unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), PAGE_SIZE) };
    let mut out = ShowBuf::new(page);
    let Some(show) = attr.show else {
        return EIO.to_errno() as isize;
    };
    match show(data, &mut out) {
        Ok(()) => out.len() as isize,
        Err(e) => e.to_errno() as isize,
    }
}

unsafe extern "C" fn store_callback<T: Send + Sync + 'static>(
    dev: *mut b::device,
    attr: *mut b::device_attribute,
    buf: *const ffi::c_char,
    count: usize,
) -> isize {
    // SAFETY: Installed only on attributes of `ClassDevice<T>` devices.
    let (attr, data) = unsafe { callback_args::<T>(dev, attr) };
    // SAFETY: sysfs passes `count` valid bytes at `buf` for the duration of the call.
    let input = unsafe { core::slice::from_raw_parts(buf.cast::<u8>(), count) };
    let Some(store) = attr.store else {
        return EIO.to_errno() as isize;
    };
    // A store may create things the module must tear down at unload (a disk, from
    // `map_device`). Holding a module reference makes an unload refuse ("in use") while a
    // store runs, and a store fail (ENODEV) once the unload has begun.
    // SAFETY: `__this_module` is this module, live while its code runs.
    if !unsafe { b::try_module_get(ptr::addr_of_mut!(b::__this_module)) } {
        return ENODEV.to_errno() as isize;
    }
    let ret = match store(data, input) {
        Ok(()) => count as isize,
        Err(e) => e.to_errno() as isize,
    };
    if attr.wipe {
        // SAFETY: kernfs hands `store` a buffer of its own for this write (kmalloc'ed for it,
        // or the open file's preallocated one, under that file's lock), which it frees or
        // reuses once the store returns: writable for `count` bytes, and read by nobody but
        // the store, which is done (`input` is not used after this). It is `const` only in
        // the callback's signature.
        unsafe { ptr::write_bytes(buf.cast_mut().cast::<u8>(), 0, count) };
        // The stores must happen although this code reads the bytes no more.
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
    }
    // SAFETY: The reference taken above. Returning to sysfs after this is the usual pattern:
    // the unload then removes this device, which waits for this callback to return.
    unsafe { b::module_put(ptr::addr_of_mut!(b::__this_module)) };
    ret
}

const MAX_ATTRS: usize = 16;

/// One unnamed attribute group, and the NUL-terminated list of it that the driver core takes
/// (`device_create_with_groups`, `device_add_disk`): self-referential arrays, pinned, that
/// must stay put while the device has the files. `SLOTS` counts the terminating NULL, so a
/// group holds at most `SLOTS - 1` attributes.
pub(crate) struct AttrGroups<const SLOTS: usize> {
    attrs: [*mut b::attribute; SLOTS],
    group: b::attribute_group,
    list: [*const b::attribute_group; 2],
    _pin: PhantomPinned,
}

impl<const SLOTS: usize> AttrGroups<SLOTS> {
    /// `attrs` as one group; `EINVAL` if they do not fit.
    pub(crate) fn new(
        mut attrs: impl Iterator<Item = &'static b::attribute>,
    ) -> Result<Pin<KBox<Self>>> {
        const { assert!(SLOTS >= 1) };
        let mut groups = KBox::pin(
            Self {
                attrs: [ptr::null_mut(); SLOTS],
                // SAFETY: All-zero is an empty, unnamed `attribute_group`.
                group: unsafe { core::mem::zeroed() },
                list: [ptr::null(); 2],
                _pin: PhantomPinned,
            },
            GFP_KERNEL,
        )?;
        // SAFETY: Only the self-referential pointers are set; nothing is moved out.
        let g = unsafe { groups.as_mut().get_unchecked_mut() };
        // The last slot stays the terminating NULL, whatever the iterator says of its length.
        for (slot, attr) in g.attrs[..SLOTS - 1].iter_mut().zip(&mut attrs) {
            // The driver core takes members as `*mut` but only reads them.
            *slot = ptr::from_ref(attr).cast_mut();
        }
        if attrs.next().is_some() {
            return Err(EINVAL);
        }
        g.group.attrs = g.attrs.as_mut_ptr();
        g.list[0] = ptr::from_ref(&g.group);
        Ok(groups)
    }

    /// The NUL-terminated list of groups, for the driver core to keep.
    pub(crate) fn list(self: Pin<&mut Self>) -> *mut *const b::attribute_group {
        // SAFETY: Only a pointer into the pinned value is taken; nothing is moved.
        unsafe { self.get_unchecked_mut().list.as_mut_ptr() }
    }
}

/// A device of a [`Class`] carrying an `Arc<T>` and a set of attributes.
pub(crate) struct ClassDevice<T: Send + Sync + 'static> {
    dev: NonNull<b::device>,
    _groups: Pin<KBox<AttrGroups<{ MAX_ATTRS + 1 }>>>,
    _data: PhantomData<Arc<T>>,
}

// SAFETY: The device is only unregistered from `drop`; the driver core does its own locking.
unsafe impl<T: Send + Sync + 'static> Send for ClassDevice<T> {}
// SAFETY: `&ClassDevice` exposes nothing.
unsafe impl<T: Send + Sync + 'static> Sync for ClassDevice<T> {}

impl<T: Send + Sync + 'static> ClassDevice<T> {
    /// Creates `/sys/class/<class>/<name>/` with `attrs`, each seeing `data`.
    pub(crate) fn new(
        class: &Class,
        name: &CStr,
        attrs: &[&'static Attr<T>],
        data: Arc<T>,
    ) -> Result<Self> {
        let mut groups = AttrGroups::new(attrs.iter().map(|&a| &a.raw.attr))?;
        let drvdata = data.into_foreign();
        // SAFETY: `class` is registered, `list` is a NUL-terminated array of groups that lives
        // (pinned) as long as the device, and `"%s"` with a NUL-terminated `name` is a valid
        // format.
        let dev = unsafe {
            b::device_create_with_groups(
                class.ptr.as_ptr(),
                ptr::null_mut(),
                0,
                drvdata.cast_mut(),
                groups.as_mut().list(),
                c"%s".as_ptr().cast(),
                name.as_char_ptr(),
            )
        };
        let dev = match kernel::error::from_err_ptr(dev).map(NonNull::new) {
            Ok(Some(dev)) => dev,
            Ok(None) | Err(_) => {
                // SAFETY: The device was not created, so nothing else holds `drvdata`.
                drop(unsafe { Arc::<T>::from_foreign(drvdata) });
                return Err(kernel::error::from_err_ptr(dev).err().unwrap_or(ENOMEM));
            }
        };
        Ok(Self {
            dev,
            _groups: groups,
            _data: PhantomData,
        })
    }
}

impl<T: Send + Sync + 'static> Drop for ClassDevice<T> {
    fn drop(&mut self) {
        let dev = self.dev.as_ptr();
        // SAFETY: `dev` is ours; read the drvdata before the device is gone.
        let drvdata = unsafe { b::rdmadisk_dev_get_drvdata(dev) };
        // SAFETY: Removes the attribute files, waiting for running callbacks, and drops the
        // driver core's reference.
        unsafe { b::device_unregister(dev) };
        // SAFETY: No callback can run any more, so the `Arc` from `new` can be released.
        drop(unsafe { Arc::<T>::from_foreign(drvdata) });
    }
}
