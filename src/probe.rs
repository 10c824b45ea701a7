// SPDX-License-Identifier: GPL-2.0

//! `/sys/class/rdmadisk/ctl/probe`: one RDMA attach and one NOP against a target.
//!
//! Writing `addr=<ipv4-or-ipv6> [port=<n>] export=<name> [secret=<hex> [target_secret=<hex>]]`
//! resolves the target, creates a PD, CQ and QP, connects with a Hello, logs the HelloReply
//! (or the refusal), authenticates both ways if a key is given or the export asks for one,
//! sends a `Nop` request, waits for its response, then tears everything down. It is the
//! bring-up check of the RDMA path (rdma_cm, QP, CQ, Send/Receive and the wire format against
//! the real target), and the building blocks are the ones a device queue connects with. A
//! disk's RDMA probes from TCP are the same exchange, and so is the `Close` a normal unmap
//! sends over RDMA ([`one_shot`]).
//!
//! Everything is bounded by one budget, [`BUDGET_MS`], so a dead target costs the writer at
//! most that long. The write returns 0, or an errno the log line explains.

use kernel::{
    bindings as kb, new_condvar, new_mutex,
    prelude::*,
    sync::{Arc, CondVar, CondVarTimeoutResult, Mutex},
    time::{msecs_to_jiffies, Jiffies, Ktime},
};

use crate::authn::{self, Keys};
use crate::kapi::errno;
use crate::kapi::rdma_cm::{CmEvent, CmId, QpCaps};
use crate::kapi::verbs::{Msg, MsgDir, MsgOwner, Pd, PollCtx, Wc};
use crate::proto::options::{Key, Options, DEFAULT_RDMA_PORT};
use crate::proto::wire::{
    AuthReply, ExportName, Opcode, Request, Response, Status, AUTH_REPLY_LEN, RESPONSE_LEN,
};
use crate::rdma_conn::{self, fail, Conn, ConnEvents, ConnSpec, Peer, Watcher};

/// The whole probe, from resolving to the NOP's response.
const BUDGET_MS: u32 = 10_000;
/// The NOP's tag.
const NOP_TAG: u32 = 1;
/// The authentication's tag.
const AUTH_TAG: u32 = 2;

/// Handles `probe` writes; see the module documentation.
pub(crate) fn probe(input: &[u8]) -> Result {
    let opts = Options::parse(input)
        .and_then(|o| {
            o.only(&[
                Key::Addr,
                Key::Port,
                Key::Export,
                Key::Secret,
                Key::TargetSecret,
            ])?;
            o.require(&[Key::Addr, Key::Export])?;
            Ok(o)
        })
        .map_err(|e| {
            pr_err!("probe: {e}\n");
            EINVAL
        })?;
    let (Some(addr), Some(export)) = (opts.addr, opts.export) else {
        return Err(EINVAL);
    };
    let peer = Peer {
        addr,
        port: opts.port.unwrap_or(DEFAULT_RDMA_PORT),
    };
    let keys = Keys::new(opts.secret.as_ref(), opts.target_secret.as_ref());
    run("probe", peer, export, keys, BUDGET_MS, true)
        .inspect_err(|e| pr_err!("probe {peer}: failed: {e:?}\n"))
}

/// What the prober waits for once connected, filled in by the CM watcher and the completion
/// handlers.
#[derive(Default)]
struct State {
    event: Option<CmEvent>,
    sent: Option<Wc>,
    received: Option<(Wc, [u8; AUTH_REPLY_LEN])>,
}

#[pin_data]
struct Waiter {
    #[pin]
    state: Mutex<State>,
    #[pin]
    cv: CondVar,
}

impl Waiter {
    /// Waits until `f` yields a value, spending from the budget `left`.
    fn wait<T>(&self, left: &mut Jiffies, mut f: impl FnMut(&mut State) -> Option<T>) -> Result<T> {
        let mut g = self.state.lock();
        loop {
            if let Some(v) = f(&mut g) {
                return Ok(v);
            }
            match self.cv.wait_interruptible_timeout(&mut g, *left) {
                CondVarTimeoutResult::Timeout => {
                    *left = 0;
                    return Err(errno(kb::ETIMEDOUT));
                }
                CondVarTimeoutResult::Signal { .. } => return Err(EINTR),
                CondVarTimeoutResult::Woken { jiffies } => *left = jiffies,
            }
        }
    }
}

impl Watcher for Arc<Waiter> {
    type Pdu = ();

    fn event(&self, ev: &CmEvent) {
        self.state.lock().event.get_or_insert(*ev);
        self.cv.notify_all();
    }
}

/// The owner of the probe's two buffers.
struct ProbeMsg {
    waiter: Arc<Waiter>,
    recv: bool,
}

impl MsgOwner for ProbeMsg {
    fn done(msg: KBox<Msg<Self>>, wc: &Wc) {
        let waiter = msg.owner().waiter.clone();
        {
            let mut s = waiter.state.lock();
            if msg.owner().recv {
                let mut data = [0; AUTH_REPLY_LEN];
                let n = (wc.byte_len() as usize).min(AUTH_REPLY_LEN);
                data[..n].copy_from_slice(&msg.data()[..n]);
                s.received = Some((*wc, data));
            } else {
                s.sent = Some(*wc);
            }
        }
        drop(msg);
        waiter.cv.notify_all();
    }
}

/// Connects to `export` at `peer` as a probe (session 0), authenticating both ways with
/// `keys`, sends one `Nop` and checks its answer, all within `budget_ms`. `who` prefixes the
/// log lines; `verbose` logs what the target offers.
pub(crate) fn run(
    who: &str,
    peer: Peer,
    export: ExportName,
    keys: Option<Keys<'_>>,
    budget_ms: u32,
    verbose: bool,
) -> Result {
    let shot = OneShot {
        who,
        peer,
        export,
        keys,
        session_id: 0,
        epoch: 0,
        hello_flags: 0,
        op: Opcode::Nop,
        budget_ms,
    };
    one_shot(&shot, verbose)
}

/// A connection made for one request: a probe's NOP (session 0, never fenced), or the
/// `Close` of a disk's session at a normal unmap (as the session's current set).
pub(crate) struct OneShot<'a> {
    pub(crate) who: &'a str,
    pub(crate) peer: Peer,
    pub(crate) export: ExportName,
    pub(crate) keys: Option<Keys<'a>>,
    pub(crate) session_id: u32,
    pub(crate) epoch: u32,
    pub(crate) hello_flags: u16,
    pub(crate) op: Opcode,
    pub(crate) budget_ms: u32,
}

/// Makes `shot`'s connection over RDMA, sends its request and checks that it is answered Ok.
pub(crate) fn one_shot(shot: &OneShot<'_>, verbose: bool) -> Result {
    let (who, peer, export, budget_ms) = (shot.who, shot.peer, shot.export, shot.budget_ms);
    let waiter = Arc::pin_init(
        pin_init!(Waiter {
            state <- new_mutex!(State::default(), "rdmadisk::probe::state"),
            cv <- new_condvar!("rdmadisk::probe::cv"),
        }),
        GFP_KERNEL,
    )?;
    let t0 = Ktime::ktime_get();
    let spec = ConnSpec {
        who,
        peer,
        export,
        queue_id: 0,
        queue_count: 1,
        session_id: shot.session_id,
        epoch: shot.epoch,
        hello_flags: shot.hello_flags,
        caps: QpCaps {
            send_wr: 4,
            recv_wr: 4,
            mrs: 0,
            mr_pages: 0,
        },
        cq_entries: 8,
        poll: PollCtx::Workqueue,
        budget_ms,
        floor: None,
        keyed: shot.keys.is_some(),
    };
    // The answers' receives (the authentication's, the request's) are posted before
    // connecting: the Hello grants them to the target.
    let conn = rdma_conn::connect(&spec, ConnEvents::new(waiter.clone())?, |cm, pd| {
        for _ in 0..2 {
            cm.post_recv(Msg::new(
                pd,
                AUTH_REPLY_LEN,
                MsgDir::Recv,
                ProbeMsg {
                    waiter: waiter.clone(),
                    recv: true,
                },
            )?)?;
        }
        Ok(2)
    })?;
    let reply = &conn.reply;
    if verbose {
        pr_info!(
        "{who} {peer}: connected on {} to export {}: capacity {} sectors, block size {}/{}, max_io {} bytes, max_segments {}, queue_depth {}, initial_credits {}, features {:#x}\n",
        conn.dev.name(),
        export,
        reply.capacity_sectors,
        reply.logical_block_size,
        reply.physical_block_size,
        reply.max_io_bytes,
        reply.max_segments,
        reply.queue_depth,
        reply.initial_credits,
        reply.features
    );
    }
    let spent = (Ktime::ktime_get().to_ns() - t0.to_ns()) / 1_000_000;
    let mut left = msecs_to_jiffies(budget_ms.saturating_sub(spent as u32));
    let res = (|| {
        let tag = crate::host::QueueName(who, 0);
        if let Some(keys) = authn::needed(tag, export, shot.keys, reply)? {
            authenticate(&conn, &waiter, &mut left, peer, keys)?;
        }
        request(&conn, &waiter, &mut left, peer, shot.op, verbose)
    })();
    conn.cm.disconnect();
    res
}

/// Proves `keys` for the connection and checks the target's proof of its own.
fn authenticate(
    conn: &Conn<Arc<Waiter>>,
    waiter: &Arc<Waiter>,
    left: &mut Jiffies,
    peer: Peer,
    keys: Keys<'_>,
) -> Result {
    let proof = authn::prove(
        keys,
        &conn.hello,
        &conn.reply,
        conn.local,
        conn.remote,
        AUTH_TAG,
        0,
    );
    let (_, data) = exchange(
        &conn.cm,
        &conn.pd,
        waiter,
        left,
        peer,
        &proof.request.to_bytes(),
        "authentication",
    )?;
    let answer = AuthReply::decode(&data).map_err(|e| {
        pr_err!("probe {peer}: the answer to the authentication is not one ({e:?})\n");
        errno(kb::EPROTO)
    })?;
    authn::check(peer, &proof, &answer, None)
}

/// Sends one data-less request (`op`: a NOP, or a Close) and checks it is answered Ok.
fn request(
    conn: &Conn<Arc<Waiter>>,
    waiter: &Arc<Waiter>,
    left: &mut Jiffies,
    peer: Peer,
    op: Opcode,
    verbose: bool,
) -> Result {
    if conn.reply.initial_credits == 0 {
        pr_err!("probe {peer}: the target granted no credits; cannot send a request\n");
        return Err(errno(kb::EPROTO));
    }
    let req = Request::bare(op, NOP_TAG);
    // The names the log has always used (tests and operators grep for "NOP answered").
    let op_name = match op {
        Opcode::Nop => "NOP",
        Opcode::Close => "Close",
        _ => "request",
    };
    let t0 = Ktime::ktime_get();
    let (wc, data) = exchange(
        &conn.cm,
        &conn.pd,
        waiter,
        left,
        peer,
        &req.to_bytes(),
        "request",
    )?;
    let n = (wc.byte_len() as usize).min(RESPONSE_LEN);
    let resp = Response::decode(&data[..n]).map_err(|e| {
        pr_err!(
            "probe {peer}: undecodable response ({e:?}, {} bytes)\n",
            wc.byte_len()
        );
        errno(kb::EPROTO)
    })?;
    let us = (Ktime::ktime_get().to_ns() - t0.to_ns()) / 1000;
    if resp.tag != NOP_TAG || resp.status != Status::Ok {
        pr_err!(
            "probe {peer}: {op_name} answered with tag {} status {}\n",
            resp.tag,
            resp.status
        );
        return Err(errno(kb::EPROTO));
    }
    let inv = wc.invalidated_rkey().is_some();
    if !verbose {
        return Ok(());
    }
    pr_info!(
        "probe {peer}: {op_name} answered: tag {} status {}, {} credits granted, {} bytes, invalidate {}, {} us\n",
        resp.tag,
        resp.status,
        resp.credits,
        wc.byte_len(),
        if inv { "yes" } else { "no" },
        us
    );
    Ok(())
}

/// Sends one message (a request or an authentication) and returns the bytes of its answer,
/// with the receive's completion.
fn exchange(
    cm: &CmId<ConnEvents<Arc<Waiter>>>,
    pd: &Arc<Pd>,
    waiter: &Arc<Waiter>,
    left: &mut Jiffies,
    peer: Peer,
    bytes: &[u8],
    what: &str,
) -> Result<(Wc, [u8; AUTH_REPLY_LEN])> {
    let mut msg = Msg::new(
        pd,
        bytes.len(),
        MsgDir::Send,
        ProbeMsg {
            waiter: waiter.clone(),
            recv: false,
        },
    )?;
    msg.data_mut()
        .get_mut(..bytes.len())
        .ok_or(EINVAL)?
        .copy_from_slice(bytes);
    waiter.state.lock().sent = None;
    cm.post_send(msg).map_err(|(e, _)| e)?;

    enum Outcome {
        Received(Wc, [u8; AUTH_REPLY_LEN]),
        SendFailed(Wc),
        Event(CmEvent),
    }
    let outcome = waiter
        .wait(left, |s| {
            if let Some((wc, data)) = s.received.take() {
                return Some(Outcome::Received(wc, data));
            }
            if let Some(wc) = s.sent.filter(|wc| !wc.is_ok()) {
                return Some(Outcome::SendFailed(wc));
            }
            s.event.take().map(Outcome::Event)
        })
        .inspect_err(|e| pr_err!("probe {peer}: no answer to the {what} ({e:?})\n"))?;
    let (wc, data) = match outcome {
        Outcome::Received(wc, data) => (wc, data),
        Outcome::SendFailed(wc) => {
            pr_err!(
                "probe {peer}: the {what}'s Send failed: {} (status {}, vendor {:#x})\n",
                wc.status_str(),
                wc.status(),
                wc.vendor_err()
            );
            return Err(EIO);
        }
        Outcome::Event(ev) => {
            return Err(fail(
                "probe",
                peer,
                "waiting for a response",
                &ev,
                None,
                false,
            ))
        }
    };
    if !wc.is_ok() {
        pr_err!(
            "probe {peer}: the answer's Receive failed: {} (status {}, vendor {:#x})\n",
            wc.status_str(),
            wc.status(),
            wc.vendor_err()
        );
        return Err(EIO);
    }
    Ok((wc, data))
}
