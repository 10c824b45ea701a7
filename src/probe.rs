// SPDX-License-Identifier: GPL-2.0

//! `/sys/class/rdmadisk/ctl/probe`: one RDMA attach and one NOP against a target.
//!
//! Writing `addr=<ipv4> [port=<n>] export=<name>` resolves the target, creates a PD, CQ and
//! QP, connects with a [`Hello`], logs the [`HelloReply`] (or the refusal), sends a `Nop`
//! request, waits for its response, then tears everything down. It is the bring-up check of
//! the RDMA path (rdma_cm, QP, CQ, Send/Receive and the wire format against the real target),
//! and the building blocks are the ones a device queue connects with.
//!
//! Everything is bounded by one budget, [`BUDGET_MS`], so a dead target costs the writer at
//! most that long. The write returns 0, or an errno the log line explains.

use core::{
    fmt,
    sync::atomic::{AtomicU64, Ordering},
};
use kernel::{
    bindings as kb, new_condvar, new_mutex,
    prelude::*,
    sync::{Arc, CondVar, CondVarTimeoutResult, Mutex},
    time::{msecs_to_jiffies, Jiffies, Ktime},
};

use crate::kapi::rdma_cm::{CmEvent, CmHandler, CmId, ConnParams, QpCaps};
use crate::kapi::verbs::{Cq, Msg, MsgDir, MsgOwner, Pd, PollCtx, Wc};
use crate::proto::options::{Key, Options, DEFAULT_RDMA_PORT};
use crate::proto::wire::{
    ExportName, Hello, HelloReply, HelloStatus, Opcode, RemoteBuf, Request, Response, Status,
    REQUEST_LEN, RESPONSE_LEN,
};

/// The whole probe, from resolving to the NOP's response.
const BUDGET_MS: u32 = 10_000;
/// Address and route resolution each; shorter than the budget so that an unreachable host
/// is reported as such rather than as the budget running out.
const RESOLVE_MS: u32 = 3_000;
/// CM events kept until the prober reads them; a probe sees a handful.
const MAX_EVENTS: usize = 8;
/// The NOP's tag.
const NOP_TAG: u32 = 1;

/// Tells probes apart in the target's log (not a security token).
static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

/// The errnos of network failures, which the kernel crate does not name.
fn errno(n: u32) -> Error {
    Error::from_errno(-(n as i32))
}

/// Handles `probe` writes; see the module documentation.
pub(crate) fn probe(input: &[u8]) -> Result {
    let opts = Options::parse(input)
        .and_then(|o| {
            o.only(&[Key::Addr, Key::Port, Key::Export])?;
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
    run(peer, export).inspect_err(|e| pr_err!("probe {peer}: failed: {e:?}\n"))
}

#[derive(Clone, Copy)]
struct Peer {
    addr: [u8; 4],
    port: u16,
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d] = self.addr;
        write!(f, "{a}.{b}.{c}.{d}:{}", self.port)
    }
}

/// What the prober waits for, filled in by the CM handler and the completion handlers.
struct State {
    events: [Option<CmEvent>; MAX_EVENTS],
    lost_events: bool,
    sent: Option<Wc>,
    received: Option<(Wc, [u8; RESPONSE_LEN])>,
}

impl State {
    fn new() -> Self {
        Self {
            events: [None; MAX_EVENTS],
            lost_events: false,
            sent: None,
            received: None,
        }
    }

    fn push(&mut self, ev: CmEvent) {
        match self.events.iter_mut().find(|e| e.is_none()) {
            Some(slot) => *slot = Some(ev),
            None => self.lost_events = true,
        }
    }

    fn pop(&mut self) -> Option<CmEvent> {
        let first = self.events[0].take()?;
        self.events.rotate_left(1);
        Some(first)
    }
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

    fn next_event(&self, left: &mut Jiffies) -> Result<CmEvent> {
        self.wait(left, State::pop)
    }
}

impl CmHandler for Waiter {
    fn event(&self, ev: CmEvent) {
        self.state.lock().push(ev);
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
                let n = (wc.byte_len as usize).min(RESPONSE_LEN);
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

/// Logs an event that ended the probe and turns it into the errno the writer gets.
fn fail(peer: Peer, step: &str, ev: &CmEvent) -> Error {
    let status_or = |s: i32, dflt: Error| {
        if (-4095..0).contains(&s) {
            Error::from_errno(s)
        } else {
            dflt
        }
    };
    match *ev {
        CmEvent::AddrError(s) | CmEvent::RouteError(s) => {
            pr_err!("probe {peer}: {step}: {} (status {s})\n", ev.name());
            status_or(s, errno(kb::EHOSTUNREACH))
        }
        CmEvent::Unreachable(s) => {
            pr_err!("probe {peer}: {step}: UNREACHABLE (status {s})\n");
            if s == errno(kb::ETIMEDOUT).to_errno() {
                errno(kb::ETIMEDOUT)
            } else {
                errno(kb::EHOSTUNREACH)
            }
        }
        CmEvent::Rejected {
            status,
            consumer_data,
        } => {
            match consumer_data.map(|d| HelloReply::decode(d.as_bytes())) {
                Some(Ok(r)) => pr_err!(
                    "probe {peer}: {step}: REJECTED by the target: {:?}\n",
                    r.status
                ),
                Some(Err(e)) => pr_err!(
                    "probe {peer}: {step}: REJECTED with undecodable private data ({e:?})\n"
                ),
                None => pr_err!(
                    "probe {peer}: {step}: REJECTED (reason {status}; no listener or not our protocol)\n"
                ),
            }
            errno(kb::ECONNREFUSED)
        }
        CmEvent::ConnectError(s) => {
            pr_err!("probe {peer}: {step}: CONNECT_ERROR (status {s})\n");
            errno(kb::ECONNABORTED)
        }
        CmEvent::Disconnected | CmEvent::AddrChange => {
            pr_err!("probe {peer}: {step}: {}\n", ev.name());
            errno(kb::ECONNRESET)
        }
        CmEvent::DeviceRemoval => {
            pr_err!("probe {peer}: {step}: the RDMA device is going away\n");
            ENODEV
        }
        CmEvent::Other(n, s) => {
            pr_err!("probe {peer}: {step}: unexpected CM event {n} (status {s})\n");
            errno(kb::EPROTO)
        }
        _ => {
            pr_err!("probe {peer}: {step}: unexpected {}\n", ev.name());
            errno(kb::EPROTO)
        }
    }
}

/// Waits for the next CM event and requires it to be `want`.
fn expect(
    w: &Waiter,
    left: &mut Jiffies,
    peer: Peer,
    step: &str,
    want: fn(&CmEvent) -> bool,
) -> Result<CmEvent> {
    let ev = w.next_event(left).inspect_err(|e| {
        pr_err!("probe {peer}: {step}: no answer within the {BUDGET_MS} ms budget ({e:?})\n")
    })?;
    if want(&ev) {
        Ok(ev)
    } else {
        Err(fail(peer, step, &ev))
    }
}

fn run(peer: Peer, export: ExportName) -> Result {
    let waiter = Arc::pin_init(
        pin_init!(Waiter {
            state <- new_mutex!(State::new(), "rdmadisk::probe::state"),
            cv <- new_condvar!("rdmadisk::probe::cv"),
        }),
        GFP_KERNEL,
    )?;
    let mut left = msecs_to_jiffies(BUDGET_MS);

    // Dropped last among the RDMA objects (declared first): its drop drains and destroys the
    // QP, then the id; the PD and CQ below are shared with it and freed after.
    let mut cm = CmId::new(waiter.clone())?;
    cm.resolve_addr(peer.addr, peer.port, RESOLVE_MS)?;
    expect(&waiter, &mut left, peer, "resolving the address", |e| {
        matches!(e, CmEvent::AddrResolved)
    })?;
    cm.resolve_route(RESOLVE_MS)?;
    expect(&waiter, &mut left, peer, "resolving the route", |e| {
        matches!(e, CmEvent::RouteResolved)
    })?;

    let dev = cm.device()?;
    let pd = Pd::new(&dev)?;
    let cq = Cq::new(&dev, 8, 0, PollCtx::Workqueue)?;
    cm.create_qp(
        &pd,
        &cq,
        QpCaps {
            send_wr: 4,
            recv_wr: 4,
        },
    )?;
    // The response's receive is posted before connecting: the Hello grants it to the target.
    cm.post_recv(Msg::new(
        &pd,
        RESPONSE_LEN,
        MsgDir::Recv,
        ProbeMsg {
            waiter: waiter.clone(),
            recv: true,
        },
    )?)?;

    let hello = Hello {
        flags: 0,
        queue_id: 0,
        queue_count: 1,
        recv_credits: 1,
        session_id: (Ktime::ktime_get().to_ns() as u64) << 8
            ^ NEXT_SESSION.fetch_add(1, Ordering::Relaxed),
        export,
    };
    cm.connect(
        &hello.to_bytes(),
        ConnParams {
            responder_resources: 16,
            initiator_depth: 16,
            retry_count: 7,
            rnr_retry_count: 0,
        },
    )?;
    let CmEvent::Established(accept) = expect(&waiter, &mut left, peer, "connecting", |e| {
        matches!(e, CmEvent::Established(_))
    })?
    else {
        return Err(errno(kb::EPROTO));
    };
    let reply = HelloReply::decode(accept.as_bytes()).map_err(|e| {
        pr_err!("probe {peer}: accepted with an undecodable HelloReply ({e:?})\n");
        errno(kb::EPROTO)
    })?;
    if reply.status != HelloStatus::Ok {
        pr_err!("probe {peer}: accepted but refused: {:?}\n", reply.status);
        cm.disconnect();
        return Err(errno(kb::ECONNREFUSED));
    }
    pr_info!(
        "probe {peer}: connected on {} to export {}: capacity {} sectors, block size {}/{}, max_io {} bytes, max_segments {}, queue_depth {}, initial_credits {}, features {:#x}\n",
        dev.name(),
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
    let res = nop(&cm, &pd, &waiter, &mut left, peer, &reply);
    cm.disconnect();
    res
}

/// Sends one `Nop` and checks its response.
fn nop(
    cm: &CmId<Waiter>,
    pd: &Arc<Pd>,
    waiter: &Arc<Waiter>,
    left: &mut Jiffies,
    peer: Peer,
    reply: &HelloReply,
) -> Result {
    if reply.initial_credits == 0 {
        pr_err!("probe {peer}: the target granted no credits; cannot send a request\n");
        return Err(errno(kb::EPROTO));
    }
    let mut msg = Msg::new(
        pd,
        REQUEST_LEN,
        MsgDir::Send,
        ProbeMsg {
            waiter: waiter.clone(),
            recv: false,
        },
    )?;
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
    req.encode(msg.data_mut().first_chunk_mut().ok_or(EINVAL)?);
    let t0 = Ktime::ktime_get();
    cm.post_send(msg)?;

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
            s.pop().map(Outcome::Event)
        })
        .inspect_err(|e| pr_err!("probe {peer}: no response to the NOP ({e:?})\n"))?;
    let us = (Ktime::ktime_get().to_ns() - t0.to_ns()) / 1000;
    let (wc, data) = match outcome {
        Outcome::Received(wc, data) => (wc, data),
        Outcome::SendFailed(wc) => {
            pr_err!(
                "probe {peer}: the NOP's Send failed: {} (status {}, vendor {:#x})\n",
                wc.status_str(),
                wc.status,
                wc.vendor_err
            );
            return Err(EIO);
        }
        Outcome::Event(ev) => return Err(fail(peer, "waiting for the NOP's response", &ev)),
    };
    if !wc.is_ok() {
        pr_err!(
            "probe {peer}: the response's Receive failed: {} (status {}, vendor {:#x})\n",
            wc.status_str(),
            wc.status,
            wc.vendor_err
        );
        return Err(EIO);
    }
    let resp =
        Response::decode(&data[..(wc.byte_len as usize).min(RESPONSE_LEN)]).map_err(|e| {
            pr_err!(
                "probe {peer}: undecodable response ({e:?}, {} bytes)\n",
                wc.byte_len
            );
            errno(kb::EPROTO)
        })?;
    if resp.tag != NOP_TAG || resp.status != Status::Ok {
        pr_err!(
            "probe {peer}: NOP answered with tag {} status {}\n",
            resp.tag,
            resp.status
        );
        return Err(errno(kb::EPROTO));
    }
    let inv = wc.invalidated_rkey.is_some();
    pr_info!(
        "probe {peer}: NOP answered: tag {} status {}, {} credits granted, {} bytes, invalidate {}, {} us\n",
        resp.tag,
        resp.status,
        resp.credits,
        wc.byte_len,
        if inv { "yes" } else { "no" },
        us
    );
    Ok(())
}
