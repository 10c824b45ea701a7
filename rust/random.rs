// SPDX-License-Identifier: GPL-2.0

//! Random numbers from the kernel's generator (`get_random_u32`).

use super::bindings as b;

/// A uniformly random `u32`. Any context.
pub(crate) fn u32() -> u32 {
    // SAFETY: No preconditions; callable from any context.
    unsafe { b::get_random_u32() }
}
