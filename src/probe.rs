// SPDX-License-Identifier: GPL-2.0

//! `/sys/class/rdmadisk/ctl/probe`: one RDMA attach and one NOP against a target.
//!
//! Writing `addr=<ipv4> [port=<n>] export=<name> [secret=<hex>]` resolves the target,
//! creates a PD, CQ and QP, connects with a [`Hello`], logs the [`HelloReply`] (or the
//! refusal), authenticates if the export asks for it, sends a `Nop` request, waits for its
//! response, then tears everything down. It is the bring-up check of
//! the RDMA path (rdma_cm, QP, CQ, Send/Receive and the wire format against the real target),
//! and the building blocks are the ones a device queue connects with.
//!
//! Everything is bounded by one budget, [`BUDGET_MS`], so a dead target costs the writer at
//! most that long. The write returns 0, or an errno the log line explains.

use kernel::{
    bindings as kb, new_condvar, new_mutex,
    prelude::*,
    sync::{Arc, CondVar, CondVarTimeoutResult, Mutex},
    time::{msecs_to_jiffies, Jiffies, Ktime},
};

use crate::kapi::rdma_cm::{CmEvent, CmId, QpCaps};
use crate::kapi::verbs::{Msg, MsgDir, MsgOwner, Pd, PollCtx, Wc};
use crate::proto::auth::{self, Secret};
use crate::proto::options::{Key, Options, DEFAULT_RDMA_PORT};
use crate::proto::wire::{
    features, AuthRequest, ExportName, Hello, HelloReply, Opcode, RemoteBuf, Request, Response,
    Status, REQUEST_LEN, RESPONSE_LEN,
};
use crate::rdma_conn::{self, errno, fail, ConnEvents, ConnSpec, Peer, Watcher};

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
            o.only(&[Key::Addr, Key::Port, Key::Export, Key::Secret])?;
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
    run("probe", peer, export, opts.secret.as_ref(), BUDGET_MS, true)
        .inspect_err(|e| pr_err!("probe {peer}: failed: {e:?}\n"))
}

/// What the prober waits for once connected, filled in by the CM watcher and the completion
/// handlers.
#[derive(Default)]
struct State {
    event: Option<CmEvent>,
    sent: Option<Wc>,
    received: Option<(Wc, [u8; RESPONSE_LEN])>,
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
                let mut data = [0; RESPONSE_LEN];
                let n = (wc.byte_len() as usize).min(RESPONSE_LEN);
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

/// Connects to `export` at `peer` (proving `secret` if the export asks), sends one `Nop` and
/// checks its answer, all within `budget_ms`. `who` prefixes the log lines; `verbose` logs
/// what the target offers.
pub(crate) fn run(
    who: &str,
    peer: Peer,
    export: ExportName,
    secret: Option<&Secret>,
    budget_ms: u32,
    verbose: bool,
) -> Result {
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
        // Outside any session: a probe is never fenced and fences nothing.
        session_id: 0,
        epoch: 0,
        hello_flags: 0,
        caps: QpCaps {
            send_wr: 4,
            recv_wr: 4,
            mrs: 0,
            mr_pages: 0,
        },
        cq_entries: 8,
        poll: PollCtx::Workqueue,
        budget_ms,
    };
    // The responses' receives (the authentication's, the NOP's) are posted before connecting:
    // the Hello grants them to the target.
    let conn = rdma_conn::connect(&spec, ConnEvents::new(waiter.clone())?, |cm, pd| {
        for _ in 0..2 {
            cm.post_recv(Msg::new(
                pd,
                RESPONSE_LEN,
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
        if reply.features & features::AUTH != 0 {
            let hello = spec.hello(0);
            authenticate(
                &conn.cm, &conn.pd, &waiter, &mut left, peer, reply, &hello, secret,
            )?;
        }
        nop(&conn.cm, &conn.pd, &waiter, &mut left, peer, reply, verbose)
    })();
    conn.cm.disconnect();
    res
}

/// Proves `secret` for the connection `hello` opened: the export asked for it.
#[allow(clippy::too_many_arguments)]
fn authenticate(
    cm: &CmId<ConnEvents<Arc<Waiter>>>,
    pd: &Arc<Pd>,
    waiter: &Arc<Waiter>,
    left: &mut Jiffies,
    peer: Peer,
    reply: &HelloReply,
    hello: &Hello,
    secret: Option<&Secret>,
) -> Result {
    let Some(secret) = secret else {
        pr_err!(
            "probe {peer}: export {} requires a secret (give secret=)\n",
            hello.export
        );
        return Err(errno(kb::EACCES));
    };
    let a = AuthRequest {
        credits: 0,
        tag: AUTH_TAG,
        proof: auth::proof(secret.as_bytes(), &reply.challenge, hello),
    };
    let resp = exchange(cm, pd, waiter, left, peer, &a.to_bytes(), "authentication")?;
    if resp.tag != AUTH_TAG || resp.status != Status::Ok {
        pr_err!(
            "probe {peer}: authentication refused: tag {} status {}\n",
            resp.tag,
            resp.status
        );
        return Err(errno(kb::EACCES));
    }
    Ok(())
}

/// Sends one `Nop` and checks its response.
fn nop(
    cm: &CmId<ConnEvents<Arc<Waiter>>>,
    pd: &Arc<Pd>,
    waiter: &Arc<Waiter>,
    left: &mut Jiffies,
    peer: Peer,
    reply: &HelloReply,
    verbose: bool,
) -> Result {
    if reply.initial_credits == 0 {
        pr_err!("probe {peer}: the target granted no credits; cannot send a request\n");
        return Err(errno(kb::EPROTO));
    }
    let req = Request {
        opcode: Opcode::Nop,
        flags: 0,
        credits: 0,
        tag: NOP_TAG,
        sector: 0,
        length: 0,
        data_crc: 0,
        buf: RemoteBuf::default(),
    };
    let t0 = Ktime::ktime_get();
    let (resp, wc) = exchange_wc(cm, pd, waiter, left, peer, &req.to_bytes(), "NOP")?;
    let us = (Ktime::ktime_get().to_ns() - t0.to_ns()) / 1000;
    if resp.tag != NOP_TAG || resp.status != Status::Ok {
        pr_err!(
            "probe {peer}: NOP answered with tag {} status {}\n",
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
        "probe {peer}: NOP answered: tag {} status {}, {} credits granted, {} bytes, invalidate {}, {} us\n",
        resp.tag,
        resp.status,
        resp.credits,
        wc.byte_len(),
        if inv { "yes" } else { "no" },
        us
    );
    Ok(())
}

/// Sends one message and returns its response.
fn exchange(
    cm: &CmId<ConnEvents<Arc<Waiter>>>,
    pd: &Arc<Pd>,
    waiter: &Arc<Waiter>,
    left: &mut Jiffies,
    peer: Peer,
    bytes: &[u8; REQUEST_LEN],
    what: &str,
) -> Result<Response> {
    exchange_wc(cm, pd, waiter, left, peer, bytes, what).map(|(r, _)| r)
}

/// Sends one message and returns its response, with the receive's completion.
fn exchange_wc(
    cm: &CmId<ConnEvents<Arc<Waiter>>>,
    pd: &Arc<Pd>,
    waiter: &Arc<Waiter>,
    left: &mut Jiffies,
    peer: Peer,
    bytes: &[u8; REQUEST_LEN],
    what: &str,
) -> Result<(Response, Wc)> {
    let mut msg = Msg::new(
        pd,
        REQUEST_LEN,
        MsgDir::Send,
        ProbeMsg {
            waiter: waiter.clone(),
            recv: false,
        },
    )?;
    *msg.data_mut().first_chunk_mut().ok_or(EINVAL)? = *bytes;
    waiter.state.lock().sent = None;
    cm.post_send(msg).map_err(|(e, _)| e)?;

    enum Outcome {
        Received(Wc, [u8; RESPONSE_LEN]),
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
        .inspect_err(|e| pr_err!("probe {peer}: no response to the {what} ({e:?})\n"))?;
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
        Outcome::Event(ev) => return Err(fail("probe", peer, "waiting for a response", &ev)),
    };
    if !wc.is_ok() {
        pr_err!(
            "probe {peer}: the response's Receive failed: {} (status {}, vendor {:#x})\n",
            wc.status_str(),
            wc.status(),
            wc.vendor_err()
        );
        return Err(EIO);
    }
    let resp =
        Response::decode(&data[..(wc.byte_len() as usize).min(RESPONSE_LEN)]).map_err(|e| {
            pr_err!(
                "probe {peer}: undecodable response ({e:?}, {} bytes)\n",
                wc.byte_len()
            );
            errno(kb::EPROTO)
        })?;
    Ok((resp, wc))
}
