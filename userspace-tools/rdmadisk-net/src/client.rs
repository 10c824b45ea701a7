//! A minimal TCP protocol client: one connection (one queue), pipelined requests.
//! Used by the test client and by the target's integration tests.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

use rdmadisk_proto::auth::{self, Endpoint, Secret, Transcript};
use rdmadisk_proto::wire::{
    features, AuthReply, AuthRequest, ExportName, Hello, HelloReply, HelloStatus, Opcode,
    RemoteBuf, Request, Response, CHALLENGE_LEN,
};

use crate::framing::{self, Frame};
use crate::resvport;

/// Why a connection attempt failed.
#[derive(Debug)]
pub enum ConnectError {
    Io(io::Error),
    /// The target answered the Hello with this status.
    Refused(HelloStatus),
    /// The export wants a secret and none was given, the target denied the one given, or
    /// the target did not prove its own (a client with a key refuses a target that does not).
    Denied(&'static str),
    /// The target's answer was not a valid HelloReply.
    Protocol(String),
    /// Refused Stale, with the fence's session (only inside [`TcpClient::connect`], which
    /// reports it as `Refused(Stale)`).
    Stale(u32),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Io(e) => write!(f, "{e}"),
            ConnectError::Refused(s) => write!(f, "target refused the connection: {s:?}"),
            ConnectError::Denied(why) => write!(f, "authentication: {why}"),
            ConnectError::Protocol(m) => write!(f, "protocol error: {m}"),
            ConnectError::Stale(floor) => {
                write!(
                    f,
                    "target refused the connection: Stale (fence at session {floor})"
                )
            }
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
    /// The key this client proves (its host's, or the export's secret). With one, the client
    /// refuses a target that does not ask for it and prove its own.
    pub secret: Option<Secret>,
    /// The key the target must prove, if not `secret` itself.
    pub target_secret: Option<Secret>,
    /// Hello flags (`hello_flags::READ_ONLY`).
    pub flags: u16,
    /// Connect from a reserved port (below 1024) when the process may bind one, as the kernel
    /// module does; false: from any port, as an unprivileged process would.
    pub reserved_port: bool,
    /// `session_id` starts a new session: the Hello says so (the target refuses it Stale
    /// unless it is above every session its fence has seen of this client and export), and
    /// a Stale answer is asked once more with the session above the fence's.
    pub new_session: bool,
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
            target_secret: None,
            flags: 0,
            reserved_port: true,
            new_session: false,
        }
    }
}

/// A fresh random nonce.
pub fn nonce() -> [u8; CHALLENGE_LEN] {
    let mut b = [0u8; CHALLENGE_LEN];
    let mut got = 0;
    while got < b.len() {
        // SAFETY: getrandom writes at most the given length into the buffer we own.
        let n = unsafe { libc::getrandom(b[got..].as_mut_ptr().cast(), b.len() - got, 0) };
        if n > 0 {
            got += n as usize;
        } else if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // A predictable nonce would let an impostor replay: fail closed.
            panic!("getrandom failed: {}", io::Error::last_os_error());
        }
    }
    b
}

/// One end of a connection as the proofs see it.
pub fn endpoint(a: SocketAddr) -> Endpoint {
    match a.ip().to_canonical() {
        IpAddr::V4(v4) => Endpoint::v4(v4.octets(), a.port()),
        IpAddr::V6(v6) => Endpoint::v6(v6.octets(), a.port()),
    }
}

/// A client's side of an authentication under way: what to send, and what the target must
/// answer.
pub struct Proving(auth::ClientProof);

impl Proving {
    /// Starts proving `opts`' key for the connection `hello` opened from `local` to `peer`,
    /// whose `reply` asked for it.
    pub fn new(
        opts: &ConnectOptions,
        hello: &Hello,
        reply: &HelloReply,
        local: SocketAddr,
        peer: SocketAddr,
        tag: u32,
        credits: u16,
    ) -> Result<Proving, ConnectError> {
        let Some(secret) = &opts.secret else {
            return Err(ConnectError::Denied("the export requires a secret"));
        };
        let t = Transcript::new(
            hello,
            reply.challenge,
            nonce(),
            endpoint(local),
            endpoint(peer),
        );
        let target_key = opts.target_secret.as_ref().unwrap_or(secret);
        Ok(Proving(auth::ClientProof::new(
            secret.as_bytes(),
            target_key.as_bytes(),
            &t,
            tag,
            credits,
        )))
    }

    /// The request to send.
    pub fn request(&self) -> &AuthRequest {
        &self.0.request
    }

    /// Checks the target's answer: it accepted our proof and proved its own key.
    pub fn check(&self, r: &AuthReply) -> Result<(), ConnectError> {
        self.0.check(r).map_err(|e| match e {
            auth::ClientAuthError::WrongTag => {
                ConnectError::Protocol(format!("the authentication's answer names tag {}", r.tag))
            }
            auth::ClientAuthError::Denied => ConnectError::Denied("the target denied the secret"),
            auth::ClientAuthError::TargetUnproven => ConnectError::Denied(
                "the target did not prove the key: a wrong target key, or not the target",
            ),
            auth::ClientAuthError::Fenced { floor } => ConnectError::Stale(floor),
        })
    }
}

/// Whether a reply lets a client with `opts` go on: one with a key refuses a target that does
/// not ask for it (anyone can answer a Hello; only the target knows the key).
pub fn check_auth_asked(opts: &ConnectOptions, reply: &HelloReply) -> Result<(), ConnectError> {
    if opts.secret.is_some() && reply.features & features::AUTH == 0 {
        return Err(ConnectError::Denied(
            "the target did not ask for our key: refusing a target that does not authenticate",
        ));
    }
    Ok(())
}

/// A TCP connection to `addr` from a reserved port if `reserved`, and the process may bind
/// one (else from any port), bound to `ip` if given.
pub fn dial(
    addr: SocketAddr,
    ip: Option<IpAddr>,
    reserved: bool,
    timeout: Duration,
) -> io::Result<TcpStream> {
    let domain = if addr.is_ipv4() {
        socket2::Domain::IPV4
    } else {
        socket2::Domain::IPV6
    };
    let local_ip = ip.unwrap_or(if addr.is_ipv4() {
        IpAddr::from([0, 0, 0, 0])
    } else {
        IpAddr::from([0u16; 8])
    });
    let socket =
        || socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP));
    if reserved {
        for port in resvport::candidates() {
            let s = socket()?;
            // A port whose last connection is in TIME_WAIT may be bound again; connect() then
            // says whether the (address, port) pair is free.
            s.set_reuse_address(true)?;
            match s.bind(&SocketAddr::new(local_ip, port).into()) {
                Ok(()) => {}
                Err(e) if resvport::taken(&e) => continue,
                Err(e) if resvport::refused(&e) => break,
                Err(e) => return Err(e),
            }
            match s.connect_timeout(&addr.into(), timeout) {
                Ok(()) => return Ok(s.into()),
                Err(e) if resvport::taken(&e) => continue,
                Err(e) => return Err(e),
            }
        }
    }
    let s = socket()?;
    if ip.is_some() {
        s.bind(&SocketAddr::new(local_ip, 0).into())?;
    }
    s.connect_timeout(&addr.into(), timeout)?;
    Ok(s.into())
}

/// A connected, attached TCP queue.
pub struct TcpClient {
    stream: TcpStream,
    reply: HelloReply,
    session: u32,
}

impl TcpClient {
    /// Connects, sends the Hello and waits for the HelloReply; authenticates both ways when
    /// the target asks (a client with a key insists). With `opts.new_session`, a Stale answer
    /// is asked once more above the fence's session ([`TcpClient::session`] says which).
    pub fn connect(addr: SocketAddr, opts: &ConnectOptions) -> Result<TcpClient, ConnectError> {
        match Self::connect_once(addr, opts) {
            Err(ConnectError::Stale(floor)) if opts.new_session => {
                // Once: the Hello still opens a session, now above the floor.
                let again = ConnectOptions {
                    session_id: floor
                        .checked_add(1)
                        .ok_or(ConnectError::Refused(HelloStatus::Stale))?,
                    ..opts.clone()
                };
                Self::connect_once(addr, &again)
            }
            r => r,
        }
        .map_err(|e| match e {
            ConnectError::Stale(_) => ConnectError::Refused(HelloStatus::Stale),
            e => e,
        })
    }

    fn connect_once(addr: SocketAddr, opts: &ConnectOptions) -> Result<TcpClient, ConnectError> {
        let stream = dial(addr, opts.bind, opts.reserved_port, opts.timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(opts.timeout))?;
        let export = ExportName::new(opts.export.as_bytes())
            .map_err(|e| ConnectError::Protocol(e.to_string()))?;
        let hello = Hello {
            flags: opts.flags
                | if opts.new_session {
                    rdmadisk_proto::wire::hello_flags::NEW_SESSION
                } else {
                    0
                },
            queue_id: opts.queue_id,
            queue_count: opts.queue_count,
            recv_credits: opts.recv_credits,
            caps: rdmadisk_proto::wire::hello_caps::IDENTITY,
            session_id: opts.session_id,
            epoch: opts.epoch,
            export,
        };
        let mut c = TcpClient {
            stream,
            reply: HelloReply::rejected(HelloStatus::Invalid),
            session: opts.session_id,
        };
        framing::write_hello(&mut c.stream, &hello)?;
        let r = match framing::read_frame(&mut c.stream, 0) {
            Ok(Frame::HelloReply(r)) if r.status == HelloStatus::Ok => r,
            // A target with a key refuses a session only after both proofs (AuthReply
            // `Fenced`): a client with a key believes no other.
            Ok(Frame::HelloReply(r)) if r.status == HelloStatus::Stale && opts.secret.is_some() => {
                return Err(ConnectError::Protocol(
                    "the target answered Stale before authenticating: not believed from a target that must prove its key".into(),
                ))
            }
            Ok(Frame::HelloReply(r)) if r.status == HelloStatus::Stale => {
                return Err(ConnectError::Stale(r.session_floor))
            }
            Ok(Frame::HelloReply(r)) => return Err(ConnectError::Refused(r.status)),
            Ok(f) => {
                return Err(ConnectError::Protocol(format!(
                    "expected HelloReply, got {f:?}"
                )))
            }
            Err(framing::FrameError::Io(e)) => return Err(ConnectError::Io(e)),
            Err(e) => return Err(ConnectError::Protocol(e.to_string())),
        };
        c.reply = r;
        check_auth_asked(opts, &r)?;
        if r.features & features::AUTH != 0 {
            let (local, peer) = (c.stream.local_addr()?, c.stream.peer_addr()?);
            let p = Proving::new(opts, &hello, &r, local, peer, 0, 0)?;
            framing::write_auth(&mut c.stream, p.request())?;
            match framing::read_frame(&mut c.stream, 0) {
                Ok(Frame::AuthReply(a)) => p.check(&a)?,
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

    /// The session the connection attached with (see [`ConnectOptions::new_session`]).
    pub fn session(&self) -> u32 {
        self.session
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
