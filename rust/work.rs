// SPDX-License-Identifier: GPL-2.0

//! What 6.12's `kernel::workqueue` lacks: waiting for a work item to finish.

use kernel::workqueue::Work;

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
