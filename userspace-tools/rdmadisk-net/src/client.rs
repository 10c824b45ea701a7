//! A minimal TCP protocol client: one connection (one queue), pipelined requests.
//! Used by the test client and by the target's integration tests.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

use rdmadisk_proto::auth::{self, Secret};
use rdmadisk_proto::wire::{
    features, AuthRequest, ExportName, Hello, HelloReply, HelloStatus, Opcode, RemoteBuf, Request,
    Response, Status,
};

use crate::framing::{self, Frame};

/// Why a connection attempt failed.
#[derive(Debug)]
pub enum ConnectError {
    Io(io::Error),
    /// The target answered the Hello with this status.
    Refused(HelloStatus),
    /// The export wants a secret and none was given, or the target denied the one given.
    Denied(&'static str),
    /// The target's answer was not a valid HelloReply.
    Protocol(String),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Io(e) => write!(f, "{e}"),
            ConnectError::Refused(s) => write!(f, "target refused the connection: {s:?}"),
            ConnectError::Denied(why) => write!(f, "authentication: {why}"),
            ConnectError::Protocol(m) => write!(f, "protocol error: {m}"),
        }
    }
}

impl std::error::Error for ConnectError {}

impl From<io::Error> for ConnectError {
    fn from(e: io::Error) -> Self {
        ConnectError::Io(e)
    }
}

/// Options for [`TcpClient::connect`].
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    pub export: String,
    /// Responses the target may send before further grants.
    pub recv_credits: u16,
    /// Local address to bind before connecting (e.g. 127.0.0.3 to test allow-lists).
    pub bind: Option<IpAddr>,
    /// Session the connection belongs to; 0 (the default) is a probe, which the target never
    /// fences.
    pub session_id: u32,
    /// Connection set within the session (see `rdmadisk_proto::fence`).
    pub epoch: u32,
    pub queue_id: u16,
    pub queue_count: u16,
    pub timeout: Duration,
    /// The export's secret, proven when the target asks.
    pub secret: Option<Secret>,
    /// Hello flags (`hello_flags::READ_ONLY`).
    pub flags: u16,
}

impl ConnectOptions {
    /// Defaults for `export`: 32 receive credits, queue 0 of 1, session 0 (a probe), 10 s
    /// timeout.
    pub fn new(export: &str) -> Self {
        ConnectOptions {
            export: export.to_string(),
            recv_credits: 32,
            bind: None,
            session_id: 0,
            epoch: 0,
            queue_id: 0,
            queue_count: 1,
            timeout: Duration::from_secs(10),
            secret: None,
            flags: 0,
        }
    }
}

/// A connected, attached TCP queue.
pub struct TcpClient {
    stream: TcpStream,
    reply: HelloReply,
}

impl TcpClient {
    /// Connects, sends the Hello and waits for the HelloReply.
    pub fn connect(addr: SocketAddr, opts: &ConnectOptions) -> Result<TcpClient, ConnectError> {
        let stream = match opts.bind {
            None => TcpStream::connect_timeout(&addr, opts.timeout)?,
            Some(ip) => {
                let domain = if addr.is_ipv4() {
                    socket2::Domain::IPV4
                } else {
                    socket2::Domain::IPV6
                };
                let s = socket2::Socket::new(
                    domain,
                    socket2::Type::STREAM,
                    Some(socket2::Protocol::TCP),
                )?;
                s.bind(&SocketAddr::new(ip, 0).into())?;
                s.connect_timeout(&addr.into(), opts.timeout)?;
                s.into()
            }
        };
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(opts.timeout))?;
        let export = ExportName::new(opts.export.as_bytes())
            .map_err(|e| ConnectError::Protocol(e.to_string()))?;
        let hello = Hello {
            flags: opts.flags,
            queue_id: opts.queue_id,
            queue_count: opts.queue_count,
            recv_credits: opts.recv_credits,
            session_id: opts.session_id,
            epoch: opts.epoch,
            export,
        };
        let mut c = TcpClient {
            stream,
            reply: HelloReply::rejected(HelloStatus::Invalid),
        };
        framing::write_hello(&mut c.stream, &hello)?;
        match framing::read_frame(&mut c.stream, 0) {
            Ok(Frame::HelloReply(r)) if r.status == HelloStatus::Ok => {
                c.reply = r;
                if r.features & features::AUTH != 0 {
                    let Some(secret) = &opts.secret else {
                        return Err(ConnectError::Denied("the export requires a secret"));
                    };
                    let a = AuthRequest {
                        credits: 0,
                        tag: 0,
                        proof: auth::proof(secret.as_bytes(), &r.challenge, &hello),
                    };
                    framing::write_auth(&mut c.stream, &a)?;
                    match framing::read_frame(&mut c.stream, 0) {
                        Ok(Frame::Response(resp, 0)) if resp.status == Status::Ok => {}
                        Ok(Frame::Response(..)) => {
                            return Err(ConnectError::Denied("the target denied the secret"))
                        }
                        Ok(f) => {
                            return Err(ConnectError::Protocol(format!(
                                "expected the authentication's answer, got {f:?}"
                            )))
                        }
                        Err(framing::FrameError::Io(e)) => return Err(ConnectError::Io(e)),
                        Err(e) => return Err(ConnectError::Protocol(e.to_string())),
                    }
                }
                c.stream.set_read_timeout(None)?;
                Ok(c)
            }
            Ok(Frame::HelloReply(r)) => Err(ConnectError::Refused(r.status)),
            Ok(f) => Err(ConnectError::Protocol(format!(
                "expected HelloReply, got {f:?}"
            ))),
            Err(framing::FrameError::Io(e)) => Err(ConnectError::Io(e)),
            Err(e) => Err(ConnectError::Protocol(e.to_string())),
        }
    }

    /// The target's HelloReply.
    pub fn reply(&self) -> &HelloReply {
        &self.reply
    }

    /// The underlying stream (to send raw bytes in tests).
    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Sends one request; `data` is the write data (empty for other operations).
    pub fn send(&mut self, req: &Request, data: &[u8]) -> io::Result<()> {
        framing::write_request(&mut self.stream, req, data)
    }

    /// Receives the next response; read data (if any) goes to the front of `buf`.
    pub fn recv(&mut self, buf: &mut [u8]) -> io::Result<(Response, usize)> {
        match framing::read_frame(&mut self.stream, buf.len() as u32)? {
            Frame::Response(r, n) => {
                let n = n as usize;
                framing::read_full(&mut self.stream, &mut buf[..n])?;
                Ok((r, n))
            }
            f => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("expected Response, got {f:?}"),
            )),
        }
    }

    /// Sends one request and waits for its response.
    pub fn call(
        &mut self,
        req: &Request,
        data: &[u8],
        buf: &mut [u8],
    ) -> io::Result<(Response, usize)> {
        self.send(req, data)?;
        self.recv(buf)
    }

    /// Convenience: a request with the CRC of `data` filled in for writes, 1 credit granted.
    pub fn request(opcode: Opcode, tag: u32, sector: u64, length: u32, data: &[u8]) -> Request {
        let data_crc = if opcode == Opcode::Write {
            rdmadisk_proto::crc32c::crc32c(data)
        } else {
            0
        };
        let len = if opcode.has_data() { length } else { 0 };
        Request {
            opcode,
            flags: 0,
            credits: 1,
            tag,
            sector,
            length,
            data_crc,
            buf: RemoteBuf {
                addr: 0,
                rkey: 0,
                len,
            },
        }
    }

    /// Whether the target has closed the connection (reads EOF or an error within `wait`).
    pub fn is_closed(&mut self, wait: Duration) -> bool {
        let _ = self.stream.set_read_timeout(Some(wait));
        let mut b = [0u8; 1];
        let closed = match self.stream.read(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
        };
        let _ = self.stream.set_read_timeout(None);
        closed
    }

    /// Writes raw bytes (garbage) to the stream.
    pub fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }
}
