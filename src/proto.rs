// SPDX-License-Identifier: GPL-2.0

//! The protocol core, shared with the userspace tools: these are the very files that
//! `userspace-tools/rdmadisk-proto` builds, tests and fuzzes on the host.
//!
//! The module compiles every file whole, so that both sides build one definition. It uses all
//! of them but `fence` (the target's side of the fencing rule; the module only sends the
//! session and epoch it checks), and not every item of the others (some are for the target or
//! the tools): hence the `allow` below.

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
#[path = "../userspace-tools/rdmadisk-proto/src/paths.rs"]
pub(crate) mod paths;
#[path = "../userspace-tools/rdmadisk-proto/src/policy.rs"]
pub(crate) mod policy;
#[path = "../userspace-tools/rdmadisk-proto/src/tags.rs"]
pub(crate) mod tags;
#[path = "../userspace-tools/rdmadisk-proto/src/wire.rs"]
pub(crate) mod wire;
