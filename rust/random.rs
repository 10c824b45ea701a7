// SPDX-License-Identifier: GPL-2.0

//! Random numbers from the kernel's generator (`get_random_u32`, `get_random_bytes`).

use super::bindings as b;

/// A uniformly random `u32`. Any context.
pub(crate) fn u32() -> u32 {
    // SAFETY: No preconditions; callable from any context.
    unsafe { b::get_random_u32() }
}

/// Fills `buf` with random bytes (a nonce). May be called from any context.
pub(crate) fn fill(buf: &mut [u8]) {
    // SAFETY: `buf` is valid for writes of its length for the call's duration.
    unsafe { b::get_random_bytes(buf.as_mut_ptr().cast(), buf.len()) }
}
