// SPDX-License-Identifier: GPL-2.0

//! The client's side of authentication, as every connection of a disk and every probe does it
//! (docs/design.md, "Access control"): it proves the host's key and checks the target's proof
//! of its own, both bound to the Hello, both nonces and both endpoints
//! ([`crate::proto::auth`]). A disk mapped with a key refuses a target that does not ask for
//! it: anyone who can answer a Hello could otherwise serve it.

use core::fmt::Display;
use core::net::IpAddr;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{bindings as kb, prelude::*};

use crate::kapi::errno;
use crate::kapi::random;
use crate::proto::auth::{ClientAuthError, ClientProof, Endpoint, Secret, Transcript};
use crate::proto::wire::{features, AuthReply, Hello, HelloReply, HelloStatus, CHALLENGE_LEN};

/// The keys a connection proves and expects: the host's (`secret=`), and the target's
/// (`target_secret=`, or the host's).
#[derive(Clone, Copy)]
pub(crate) struct Keys<'a> {
    key: &'a Secret,
    target: &'a Secret,
}

impl<'a> Keys<'a> {
    pub(crate) fn new(secret: Option<&'a Secret>, target: Option<&'a Secret>) -> Option<Self> {
        secret.map(|key| Keys {
            key,
            target: target.unwrap_or(key),
        })
    }
}

/// Whether the connection `reply` answered must prove `keys`: `Ok(Some)` if the target asked
/// and there are keys, `Ok(None)` if neither; `EACCES`, logged, if only one side has a key.
pub(crate) fn needed<'a>(
    who: impl Display,
    export: impl Display,
    keys: Option<Keys<'a>>,
    reply: &HelloReply,
) -> Result<Option<Keys<'a>>> {
    match (keys, reply.features & features::AUTH != 0) {
        (Some(k), true) => Ok(Some(k)),
        (None, false) => Ok(None),
        (None, true) => {
            pr_err!("{who}: export {export} requires a key: map it with secret=\n");
            Err(errno(kb::EACCES))
        }
        (Some(_), false) => {
            pr_err!(
                "{who}: the target did not ask for our key for export {export}: refusing a target that does not authenticate\n"
            );
            Err(errno(kb::EACCES))
        }
    }
}

/// One end of a connection as the proofs see it (an IPv4 address as IPv4-mapped IPv6, as the
/// target sees it when it listens on IPv6).
pub(crate) fn endpoint(addr: IpAddr, port: u16) -> Endpoint {
    match addr {
        IpAddr::V4(a) => Endpoint::v4(a.octets(), port),
        IpAddr::V6(a) => Endpoint::v6(a.octets(), port),
    }
}

/// Starts proving `keys` for the connection `hello` opened from `local` to `remote`: the
/// request to send (with a fresh nonce of ours), and what the answer must carry.
pub(crate) fn prove(
    keys: Keys<'_>,
    hello: &Hello,
    reply: &HelloReply,
    local: Endpoint,
    remote: Endpoint,
    tag: u32,
    credits: u16,
) -> ClientProof {
    let mut nonce = [0u8; CHALLENGE_LEN];
    random::fill(&mut nonce);
    let t = Transcript::new(hello, reply.challenge, nonce, local, remote);
    ClientProof::new(
        keys.key.as_bytes(),
        keys.target.as_bytes(),
        &t,
        tag,
        credits,
    )
}

/// Checks the target's answer to `proof`; `EACCES`, logged with `who`, if it refused our key
/// or did not prove its own. `ESTALE` if it proved its key and refused the session (the one
/// way a target with a key says so): its fence's session is stored in `floor`.
pub(crate) fn check(
    who: impl Display,
    proof: &ClientProof,
    reply: &AuthReply,
    floor: Option<&AtomicU32>,
) -> Result {
    match proof.check(reply) {
        Ok(()) => Ok(()),
        Err(ClientAuthError::Fenced { floor: f }) => {
            pr_warn!(
                "{who}: authenticated, and REJECTED by the target: Stale (its fence is at session {f})\n"
            );
            if let Some(floor) = floor {
                floor.store(f, Ordering::Relaxed);
            }
            Err(errno(kb::ESTALE))
        }
        Err(e) => {
            pr_err!("{who}: authentication failed: {e}\n");
            Err(errno(kb::EACCES))
        }
    }
}

/// What to add to a refusal's log line: a disk with a key connects from any port, which an
/// export without a key for this host refuses (`NotAllowed`) as it refuses any user process.
pub(crate) fn refusal_hint(keyed: bool, status: HelloStatus) -> &'static str {
    if keyed && status == HelloStatus::NotAllowed {
        " (this disk has a key and connects from any port; an export without a key for this host admits only reserved ports: is it mapped with a key the target does not know?)"
    } else {
        ""
    }
}

/// A `Stale` refusal in a HelloReply, to a connection that proves a key: a target with a key
/// says that only after both proofs ([`check`]), so this one may come from anyone who can
/// answer a Hello, and is not believed. `EPROTO`, logged: the connection failed, the session
/// stands.
pub(crate) fn unproved_stale(who: impl Display, floor: u32) -> Error {
    pr_err!(
        "{who}: the target answered Stale (fence at session {floor}) before authenticating: not believed, a target with our key says that only after both proofs\n"
    );
    errno(kb::EPROTO)
}
