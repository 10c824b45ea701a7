//! rdmadisk protocol core: wire format, CRC32C, credit accounting, request
//! ids, the fencing rule, the RDMA/TCP failover policy, the shared-secret
//! authentication and the latency histograms' buckets.
//!
//! Everything here is plain `core` Rust with no dependencies because the kernel
//! module compiles these very files (one `#[path]` module each, inside its own
//! `proto` module) while userspace tests and fuzzes them with cargo. Modules
//! therefore reach each other through `super::`, never through `crate::`.
#![no_std]

pub mod auth;
pub mod crc32c;
pub mod credits;
pub mod fence;
pub mod histogram;
pub mod knobs;
pub mod options;
pub mod paths;
pub mod policy;
pub mod tags;
pub mod wire;

#[cfg(test)]
mod cheader;
#[cfg(test)]
mod gateways;
