// SPDX-License-Identifier: GPL-2.0

//! Sleeping for a while (`msleep`), which 6.12's `kernel` crate lacks.

use super::bindings as b;

/// Sleeps at least `ms` milliseconds. Process context only.
pub(crate) fn sleep_ms(ms: u32) {
    // SAFETY: No preconditions beyond process context, which the caller provides.
    unsafe { b::msleep(ms) };
}
