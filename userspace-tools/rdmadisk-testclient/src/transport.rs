//! What the workload needs from a transport, and the TCP implementation.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::thread;

use rdmadisk_net::framing::{self, Frame};

use rdmadisk_net::client::{ConnectError, ConnectOptions, TcpClient};
use rdmadisk_proto::credits::CreditSender;
use rdmadisk_proto::wire::{HelloReply, Opcode, Request, Response};

/// A completed request.
pub struct Done {
    pub slot: usize,
    pub resp: Response,
}

/// One queue to a target: `slots()` request slots, each with a data buffer of
/// `max_io` bytes.
pub trait Transport {
    fn reply(&self) -> &HelloReply;
    fn slots(&self) -> usize;
    /// The data buffer of a slot (write data before submit, read data after completion).
    fn buf(&mut self, slot: usize) -> &mut [u8];
    /// Sends a request using `slot`'s buffer. `Ok(false)`: no credit; complete something first.
    fn submit(&mut self, slot: usize, req: Request) -> io::Result<bool>;
    /// Waits for the next response.
    fn complete(&mut self) -> io::Result<Done>;
    /// Largest number of requests in flight, and the credits the target granted at attach.
    fn credit_report(&self) -> (u32, u16);
    /// Transport-specific checks as (name, value, is_failure_count) lines.
    fn checks(&self) -> Vec<(String, u64, bool)>;
}

type Incoming = io::Result<(Response, Vec<u8>)>;

/// The TCP transport: requests pipelined on one connection. Responses are read by a thread of
/// their own, so a large response never waits for a large request to be written (or the
/// other way round): with both directions blocked on full socket buffers, a single-threaded
/// pipelining client would deadlock against the target.
pub struct Tcp {
    c: TcpClient,
    rx: mpsc::Receiver<Incoming>,
    bufs: Vec<Vec<u8>>,
    by_tag: HashMap<u32, (usize, Opcode, u32)>,
    sender: CreditSender,
    reply: HelloReply,
    rkey_echo_mismatches: u64,
}

impl Tcp {
    pub fn connect(
        addr: SocketAddr,
        opts: &ConnectOptions,
        slots: usize,
        max_io: usize,
    ) -> Result<Tcp, ConnectError> {
        let mut c = TcpClient::connect(addr, opts)?;
        let reply = *c.reply();
        let max_io = max_io.min(reply.max_io_bytes as usize);
        let mut rs = c.stream().try_clone()?;
        let (tx, rx) = mpsc::channel::<Incoming>();
        let max_data = reply.max_io_bytes;
        thread::spawn(move || loop {
            let r = match framing::read_frame(&mut rs, max_data) {
                Ok(Frame::Response(resp, n)) => {
                    let mut data = vec![0u8; n as usize];
                    framing::read_full(&mut rs, &mut data).map(|()| (resp, data))
                }
                Ok(f) => Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("expected Response, got {f:?}"),
                )),
                Err(e) => Err(e.into()),
            };
            let stop = r.is_err();
            if tx.send(r).is_err() || stop {
                break;
            }
        });
        Ok(Tcp {
            c,
            rx,
            bufs: (0..slots).map(|_| vec![0u8; max_io]).collect(),
            by_tag: HashMap::new(),
            sender: CreditSender::new(reply.initial_credits),
            reply,
            rkey_echo_mismatches: 0,
        })
    }
}

impl Transport for Tcp {
    fn reply(&self) -> &HelloReply {
        &self.reply
    }

    fn slots(&self) -> usize {
        self.bufs.len()
    }

    fn buf(&mut self, slot: usize) -> &mut [u8] {
        &mut self.bufs[slot]
    }

    fn submit(&mut self, slot: usize, mut req: Request) -> io::Result<bool> {
        if !self.sender.try_consume() {
            return Ok(false);
        }
        req.credits = 1;
        // On TCP `buf` is not used for addressing; the rkey field carries the slot as a tag the
        // target echoes, so the echo can be checked.
        req.buf.rkey = slot as u32 + 1;
        let data: &[u8] = if req.opcode == Opcode::Write {
            &self.bufs[slot][..req.length as usize]
        } else {
            &[]
        };
        self.c.send(&req, data)?;
        self.by_tag
            .insert(req.tag, (slot, req.opcode, req.buf.rkey));
        Ok(true)
    }

    fn complete(&mut self) -> io::Result<Done> {
        let (resp, data) = self.rx.recv().map_err(|_| {
            io::Error::new(io::ErrorKind::UnexpectedEof, "response reader stopped")
        })??;
        let n = data.len();
        let (slot, _op, rkey) = self.by_tag.remove(&resp.tag).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("response for unknown tag {}", resp.tag),
            )
        })?;
        if resp.rkey != rkey {
            self.rkey_echo_mismatches += 1;
        }
        if n > self.bufs[slot].len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "response data larger than the request",
            ));
        }
        self.bufs[slot][..n].copy_from_slice(&data);
        self.sender.grant(resp.credits);
        self.sender.complete();
        Ok(Done { slot, resp })
    }

    fn credit_report(&self) -> (u32, u16) {
        (self.sender.high_water(), self.reply.initial_credits)
    }

    fn checks(&self) -> Vec<(String, u64, bool)> {
        vec![(
            "tcp_rkey_echo_mismatches".into(),
            self.rkey_echo_mismatches,
            true,
        )]
    }
}

impl Drop for Tcp {
    fn drop(&mut self) {
        // Ends the reader thread.
        let _ = self.c.stream().shutdown(std::net::Shutdown::Both);
    }
}
