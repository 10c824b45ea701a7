// SPDX-License-Identifier: GPL-2.0

//! Module-local safe abstractions for the kernel APIs that the 6.12 `kernel` crate lacks.
//!
//! All of the driver's `unsafe` lives under this directory; `src/` only uses the safe types
//! exported here.

#![allow(unsafe_code)]

mod bindings;
pub(crate) mod blk_mq;
pub(crate) mod debugfs;
pub(crate) mod delay;
pub(crate) mod frwr;
pub(crate) mod ib_client;
pub(crate) mod inet;
pub(crate) mod random;
pub(crate) mod rdma_cm;
pub(crate) mod socket;
pub(crate) mod sysfs;
pub(crate) mod verbs;
pub(crate) mod work;

/// The errnos of network failures, which the kernel crate does not name.
pub(crate) fn errno(n: u32) -> kernel::error::Error {
    kernel::error::Error::from_errno(-(n as i32))
}
