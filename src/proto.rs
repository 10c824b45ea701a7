// SPDX-License-Identifier: GPL-2.0

//! The protocol core, shared with the userspace tools: these are the very files that
//! `userspace-tools/rdmadisk-proto` builds, tests and fuzzes on the host.
//!
//! The userspace side uses all of it; the module uses more of it as the data path grows.

#![allow(dead_code, unreachable_pub)]

#[path = "../userspace-tools/rdmadisk-proto/src/auth.rs"]
pub(crate) mod auth;
#[path = "../userspace-tools/rdmadisk-proto/src/crc32c.rs"]
pub(crate) mod crc32c;
#[path = "../userspace-tools/rdmadisk-proto/src/credits.rs"]
pub(crate) mod credits;
#[path = "../userspace-tools/rdmadisk-proto/src/fence.rs"]
pub(crate) mod fence;
#[path = "../userspace-tools/rdmadisk-proto/src/histogram.rs"]
pub(crate) mod histogram;
#[path = "../userspace-tools/rdmadisk-proto/src/knobs.rs"]
pub(crate) mod knobs;
#[path = "../userspace-tools/rdmadisk-proto/src/options.rs"]
pub(crate) mod options;
#[path = "../userspace-tools/rdmadisk-proto/src/policy.rs"]
pub(crate) mod policy;
#[path = "../userspace-tools/rdmadisk-proto/src/tags.rs"]
pub(crate) mod tags;
#[path = "../userspace-tools/rdmadisk-proto/src/wire.rs"]
pub(crate) mod wire;
