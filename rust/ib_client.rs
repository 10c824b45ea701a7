// SPDX-License-Identifier: GPL-2.0

//! `struct ib_client`: being told when RDMA devices appear and disappear.
//!
//! The IB core calls `add` for every device present at registration and for each one added
//! later, and `remove` when a device goes away (`rdma link delete`, NIC driver unload) or the
//! client unregisters. `remove` must release everything the client holds on that device before
//! it returns, or the device's unregistration waits.

use core::{
    marker::PhantomPinned,
    pin::Pin,
    ptr::{self, NonNull},
    sync::atomic::{AtomicBool, AtomicPtr, Ordering},
};
use kernel::{ffi, prelude::*, str::CStr, types::ForeignOwnable, types::Opaque};

use super::bindings as b;
use super::verbs::DeviceId;

/// An RDMA device, borrowed for the duration of a callback.
pub(crate) struct Device {
    ptr: NonNull<b::ib_device>,
}

impl Device {
    /// Which device this is (see [`DeviceId`]).
    pub(crate) fn id(&self) -> DeviceId {
        DeviceId(self.ptr.as_ptr() as usize)
    }

    /// The device's name, e.g. `rxe0`.
    pub(crate) fn name(&self) -> &CStr {
        // SAFETY: `ptr` is a live, registered `ib_device` for the lifetime of `&self` (see
        // the trampolines), and `dev_name()` of a registered device is a NUL-terminated string
        // that lives as long as the device.
        unsafe { CStr::from_char_ptr(b::rdmadisk_ib_device_name(self.ptr.as_ptr())) }
    }
}

/// What a client does when devices come and go.
pub(crate) trait ClientOps: Send + Sync + 'static {
    /// Per-device state kept from `add` until `remove`.
    type DeviceData: ForeignOwnable + Send;

    /// A device appeared. An error means the client does not use this device; `remove` is then
    /// not called for it.
    fn add(&self, dev: &Device) -> Result<Self::DeviceData>;

    /// The device is going away; release every resource held on it before returning.
    fn remove(&self, dev: &Device, data: Self::DeviceData);
}

/// The registration whose `ib_client` the C callbacks belong to. `add` does not pass the
/// client back, so the callbacks find their registration here; hence one registration at a time.
static ACTIVE: AtomicPtr<ffi::c_void> = AtomicPtr::new(ptr::null_mut());

/// A registered `ib_client`. Unregisters (calling `remove` for every device) when dropped.
#[pin_data(PinnedDrop)]
pub(crate) struct Registration<T: ClientOps> {
    #[pin]
    client: Opaque<b::ib_client>,
    ops: T,
    registered: AtomicBool,
    #[pin]
    _pin: PhantomPinned,
}

// SAFETY: The C side only touches `client` under its own locks; `ops` is `Send + Sync`.
unsafe impl<T: ClientOps> Send for Registration<T> {}
// SAFETY: See `Send`; shared access only reaches `ops`, which is `Sync`.
unsafe impl<T: ClientOps> Sync for Registration<T> {}

impl<T: ClientOps> Registration<T> {
    /// Registers `ops` as the ib_client `name`. `add` runs for every existing device before
    /// this returns.
    pub(crate) fn new(name: &'static CStr, ops: T) -> Result<Pin<KBox<Self>>> {
        let reg = KBox::pin_init(
            pin_init!(Self {
                client <- Opaque::ffi_init(|slot: *mut b::ib_client| {
                    // SAFETY: `slot` is valid for writes; an all-zero `ib_client` is its
                    // "no callbacks" state, which the IB core initialises further itself.
                    unsafe {
                        slot.write(core::mem::zeroed());
                        (*slot).name = name.as_char_ptr();
                        (*slot).add = Some(add_callback::<T>);
                        (*slot).remove = Some(remove_callback::<T>);
                    }
                }),
                ops,
                registered: AtomicBool::new(false),
                _pin: PhantomPinned,
            }),
            GFP_KERNEL,
        )?;
        let me: *const Self = &*reg;
        ACTIVE
            .compare_exchange(
                ptr::null_mut(),
                me.cast_mut().cast(),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .map_err(|_| EBUSY)?;
        // SAFETY: `client` is initialised and pinned in `reg`, which outlives the registration
        // (the drop of `reg` unregisters).
        let ret = unsafe { b::ib_register_client(reg.client.get()) };
        if ret != 0 {
            ACTIVE.store(ptr::null_mut(), Ordering::Release);
            return Err(Error::from_errno(ret));
        }
        reg.registered.store(true, Ordering::Release);
        Ok(reg)
    }
}

#[pinned_drop]
impl<T: ClientOps> PinnedDrop for Registration<T> {
    fn drop(self: Pin<&mut Self>) {
        if !self.registered.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: `registered` says `ib_register_client` succeeded. Unregistering waits for
        // running callbacks and calls `remove` for every device, so no callback can reach
        // `self` afterwards.
        unsafe { b::ib_unregister_client(self.client.get()) };
        ACTIVE.store(ptr::null_mut(), Ordering::Release);
    }
}

/// # Safety
///
/// Called only by the IB core, while the `Registration<T>` in `ACTIVE` is registered.
unsafe fn active<'a, T: ClientOps>() -> &'a Registration<T> {
    let reg = ACTIVE.load(Ordering::Acquire).cast::<Registration<T>>();
    // SAFETY: The caller guarantees that the registration is live; the type is right because
    // only `Registration<T>::new` stores into `ACTIVE` and it installs `*_callback::<T>`.
    unsafe { &*reg }
}

unsafe extern "C" fn add_callback<T: ClientOps>(ibdev: *mut b::ib_device) -> ffi::c_int {
    let Some(ptr) = NonNull::new(ibdev) else {
        return EINVAL.to_errno();
    };
    // SAFETY: The IB core calls `add` only for a registered client.
    let reg = unsafe { active::<T>() };
    let dev = Device { ptr };
    match reg.ops.add(&dev) {
        Ok(data) => {
            // SAFETY: `ibdev` and the client are both registered; the IB core expects
            // `ib_set_client_data` from within `add`. The pointer is handed back to `remove`.
            unsafe {
                b::ib_set_client_data(ibdev, reg.client.get(), data.into_foreign().cast_mut())
            };
            0
        }
        Err(e) => e.to_errno(),
    }
}

unsafe extern "C" fn remove_callback<T: ClientOps>(
    ibdev: *mut b::ib_device,
    client_data: *mut ffi::c_void,
) {
    let Some(ptr) = NonNull::new(ibdev) else {
        return;
    };
    // SAFETY: The IB core calls `remove` only for a registered client, and only for devices
    // whose `add` succeeded, so `client_data` came from `into_foreign` in `add_callback`.
    let (reg, data) = unsafe { (active::<T>(), T::DeviceData::from_foreign(client_data)) };
    reg.ops.remove(&Device { ptr }, data);
}
