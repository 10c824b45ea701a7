// SPDX-License-Identifier: GPL-2.0

//! What 6.12's `kernel::workqueue` lacks: waiting for a work item to finish, a workqueue of
//! the module's own that may run during memory reclaim, and the `memalloc_noio` scope.

use core::ptr::NonNull;
use kernel::{
    prelude::*,
    str::CStr,
    workqueue::{Queue, RawWorkItem, Work},
};

use super::bindings as b;

/// Waits until `work` is neither queued nor running (`flush_work`). A module must do this for
/// each of its work items before its code goes away. May sleep; never call it from the work
/// item itself.
pub(crate) fn flush<T: ?Sized, const ID: u64>(work: &Work<T, ID>) {
    // SAFETY: `work` is a valid, initialised work item (it is borrowed, so it is alive), and
    // `raw_get` only computes the address of its `work_struct`. Flushing has no other
    // requirement than not being called from the item itself, which the caller ensures.
    unsafe { b::flush_work(Work::raw_get(work).cast()) };
}

/// For [`ReclaimQueue::enqueue_on`]: no CPU in particular (`WORK_CPU_UNBOUND`).
pub(crate) const ANY_CPU: u32 = kernel::bindings::wq_misc_consts_WORK_CPU_UNBOUND;

/// The CPU the caller runs on now (`raw_smp_processor_id`): a hint, as the caller may move.
pub(crate) fn this_cpu() -> u32 {
    // SAFETY: Reads a per-CPU word; no preconditions.
    unsafe { b::rdmadisk_raw_smp_processor_id() }
}

/// A workqueue of the module's own with `WQ_MEM_RECLAIM`: it keeps a rescuer thread, so the
/// work that completes writeback to a disk (reconnecting it, moving its data over TCP) makes
/// progress even when no new worker thread can be created under memory pressure (as nvme-tcp
/// and nbd do). Destroyed (after running what is queued) when dropped.
pub(crate) struct ReclaimQueue {
    ptr: NonNull<b::workqueue_struct>,
}

// SAFETY: A workqueue is used through the workqueue API, which locks internally.
unsafe impl Send for ReclaimQueue {}
// SAFETY: See `Send`.
unsafe impl Sync for ReclaimQueue {}

impl ReclaimQueue {
    /// Allocates an unbound `WQ_MEM_RECLAIM` queue named `name`, for work that may sleep long
    /// (connecting, switching transports).
    pub(crate) fn new(name: &'static CStr) -> Result<Self> {
        Self::alloc(name, b::wq_flags_WQ_MEM_RECLAIM | b::wq_flags_WQ_UNBOUND)
    }

    /// Allocates a per-CPU `WQ_MEM_RECLAIM | WQ_HIGHPRI` queue named `name`, for the I/O path's
    /// short work (as nvme-tcp's `nvme_tcp_wq`): a work item runs on the CPU that queued it, or
    /// the one it is queued on ([`Self::enqueue_on`]), ahead of normal tasks, instead of
    /// waiting for a worker of the unbound pool on another CPU.
    pub(crate) fn new_io(name: &'static CStr) -> Result<Self> {
        Self::alloc(name, b::wq_flags_WQ_MEM_RECLAIM | b::wq_flags_WQ_HIGHPRI)
    }

    fn alloc(name: &'static CStr, flags: b::wq_flags) -> Result<Self> {
        // SAFETY: `"%s"` with a static NUL-terminated `name` is a valid format; 0 asks for the
        // default concurrency.
        let raw =
            unsafe { b::alloc_workqueue(c"%s".as_ptr().cast(), flags, 0, name.as_char_ptr()) };
        NonNull::new(raw).map(|ptr| Self { ptr }).ok_or(ENOMEM)
    }

    /// Queues `w` to run on CPU `cpu` (`queue_work_on`), or, with [`ANY_CPU`], on the current
    /// one, as [`Queue::enqueue`] does. Should `cpu` go offline, the workqueue runs the item
    /// on another CPU. Meant for per-CPU queues ([`Self::new_io`]); on an unbound one the CPU
    /// is only a hint. Any context.
    pub(crate) fn enqueue_on<W, const ID: u64>(&self, cpu: u32, w: W) -> W::EnqueueOutput
    where
        W: RawWorkItem<ID> + Send + 'static,
    {
        let queue = self
            .ptr
            .as_ptr()
            .cast::<kernel::bindings::workqueue_struct>();
        let cpu = i32::try_from(cpu).unwrap_or(ANY_CPU as i32);
        // SAFETY: As in `Queue::enqueue`, which differs only in the CPU: `__enqueue` hands the
        // closure a pointer valid for the call, and keeps it valid until the item runs if
        // `queue_work_on` returns true; it returns false only when the item is already queued.
        // The queue is live while `self` is.
        unsafe { w.__enqueue(move |work| kernel::bindings::queue_work_on(cpu, queue, work)) }
    }

    /// The queue, to enqueue work items on.
    pub(crate) fn queue(&self) -> &Queue {
        // SAFETY: The pointer is a live workqueue until `self` is dropped, which outlives the
        // returned borrow.
        unsafe { Queue::from_raw(self.ptr.as_ptr().cast_const().cast()) }
    }
}

impl Drop for ReclaimQueue {
    fn drop(&mut self) {
        // SAFETY: Ours; `destroy_workqueue` drains what is queued first. The owner drops it
        // only when no work item of the module can be queued any more (at unload, after every
        // disk is gone), and never from a work item on it.
        unsafe { b::destroy_workqueue(self.ptr.as_ptr()) };
    }
}

/// While it lives, allocations of the current task behave as `GFP_NOIO`
/// (`memalloc_noio_save`/`_restore`): code that reconnects a disk must not recurse into I/O
/// on that very disk to reclaim memory. Not `Send`: it belongs to the task that made it.
pub(crate) struct NoIo {
    flags: u32,
    _not_send: core::marker::PhantomData<*mut ()>,
}

impl NoIo {
    /// Enters the scope.
    pub(crate) fn enter() -> Self {
        // SAFETY: Only changes the current task's allocation flags; restored in `drop`.
        let flags = unsafe { b::rdmadisk_memalloc_noio_save() };
        Self {
            flags,
            _not_send: core::marker::PhantomData,
        }
    }
}

impl Drop for NoIo {
    fn drop(&mut self) {
        // SAFETY: Restores what `enter` saved, in the same task (the type is not `Send`), and
        // scopes nest in order because each is a stack value.
        unsafe { b::rdmadisk_memalloc_noio_restore(self.flags) };
    }
}
