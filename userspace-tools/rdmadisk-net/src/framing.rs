//! The TCP transport: every message travels as a [`FrameHeader`], the fixed message, then
//! `data_len` bytes of data (write data after a `Request`, read data after a `Response`, the
//! export's identity after a `HelloReply` that has one).

use std::fmt;
use std::io::{self, Read, Write};

use rdmadisk_proto::wire::{
    AuthReply, AuthRequest, DecodeError, FrameHeader, FrameKind, Hello, HelloReply, Request,
    Response, AUTH_REPLY_LEN, AUTH_REQUEST_LEN, FRAME_HEADER_LEN, HELLO_LEN, HELLO_REPLY_LEN,
    HELLO_REPLY_MAX_LEN, IDENTITY_LEN, REQUEST_LEN, RESPONSE_LEN,
};

/// Why a frame could not be read.
#[derive(Debug)]
pub enum FrameError {
    /// The stream failed or closed.
    Io(io::Error),
    /// The peer sent something that is not a valid frame: the connection must be reset.
    Malformed(String),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Io(e) => write!(f, "i/o: {e}"),
            FrameError::Malformed(m) => write!(f, "malformed frame: {m}"),
        }
    }
}

impl std::error::Error for FrameError {}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        FrameError::Io(e)
    }
}

impl From<DecodeError> for FrameError {
    fn from(e: DecodeError) -> Self {
        FrameError::Malformed(e.to_string())
    }
}

impl From<FrameError> for io::Error {
    fn from(e: FrameError) -> Self {
        match e {
            FrameError::Io(e) => e,
            FrameError::Malformed(m) => io::Error::new(io::ErrorKind::InvalidData, m),
        }
    }
}

/// A decoded frame; its data (if `data_len > 0`) is still in the stream.
#[derive(Debug, Clone, Copy)]
pub enum Frame {
    Hello(Hello),
    HelloReply(HelloReply),
    Request(Request, u32),
    Response(Response, u32),
    Auth(AuthRequest),
    AuthReply(AuthReply),
}

/// Reads one frame header and its fixed message. `max_data` bounds `data_len`; a larger value
/// is malformed. The first read may block indefinitely; use [`read_frame_or_idle`] to poll.
pub fn read_frame<R: Read>(r: &mut R, max_data: u32) -> Result<Frame, FrameError> {
    let mut hdr = [0u8; FRAME_HEADER_LEN];
    r.read_exact(&mut hdr)?;
    finish_frame(r, &hdr, max_data)
}

/// Like [`read_frame`], but returns `Ok(None)` when the read times out (socket read timeout)
/// before the first byte of a frame arrives, so the caller can check for shutdown. Once a
/// frame has started, timeouts are retried until it is complete.
pub fn read_frame_or_idle<R: Read>(r: &mut R, max_data: u32) -> Result<Option<Frame>, FrameError> {
    let mut hdr = [0u8; FRAME_HEADER_LEN];
    let mut got = 0;
    while got < hdr.len() {
        match r.read(&mut hdr[got..]) {
            Ok(0) => return Err(FrameError::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => got += n,
            Err(e) if is_timeout(&e) && got == 0 => return Ok(None),
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        }
    }
    finish_frame(r, &hdr, max_data).map(Some)
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// `read_exact` that retries socket read timeouts (the frame has started; finish it).
pub fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn finish_frame<R: Read>(
    r: &mut R,
    hdr: &[u8; FRAME_HEADER_LEN],
    max_data: u32,
) -> Result<Frame, FrameError> {
    let h = FrameHeader::decode(hdr)?;
    if h.flags != 0 {
        return Err(FrameError::Malformed(format!(
            "unknown frame flags {:#x}",
            h.flags
        )));
    }
    let allowed_data = matches!(h.kind, FrameKind::Request | FrameKind::Response);
    // A HelloReply's data is its identity, of one size (`features::IDENTITY`).
    let identity = h.kind == FrameKind::HelloReply && h.data_len as usize == IDENTITY_LEN;
    if h.data_len > 0 && !identity && (!allowed_data || h.data_len > max_data) {
        return Err(FrameError::Malformed(format!(
            "{:?} frame with {} data bytes",
            h.kind, h.data_len
        )));
    }
    Ok(match h.kind {
        FrameKind::Hello => {
            let mut b = [0u8; HELLO_LEN];
            read_full(r, &mut b)?;
            Frame::Hello(Hello::decode(&b)?)
        }
        FrameKind::HelloReply => {
            let mut b = [0u8; HELLO_REPLY_MAX_LEN];
            let len = HELLO_REPLY_LEN + h.data_len as usize;
            read_full(r, &mut b[..len])?;
            let reply = HelloReply::decode(&b[..len])?;
            // The data is there exactly when the reply says it carries an identity.
            if reply.identity.is_some() != identity {
                return Err(FrameError::Malformed(format!(
                    "HelloReply frame with {} data bytes and features {:#x}",
                    h.data_len, reply.features
                )));
            }
            Frame::HelloReply(reply)
        }
        FrameKind::Request => {
            let mut b = [0u8; REQUEST_LEN];
            read_full(r, &mut b)?;
            Frame::Request(Request::decode(&b)?, h.data_len)
        }
        FrameKind::Response => {
            let mut b = [0u8; RESPONSE_LEN];
            read_full(r, &mut b)?;
            Frame::Response(Response::decode(&b)?, h.data_len)
        }
        FrameKind::Auth => {
            let mut b = [0u8; AUTH_REQUEST_LEN];
            read_full(r, &mut b)?;
            Frame::Auth(AuthRequest::decode(&b)?)
        }
        FrameKind::AuthReply => {
            let mut b = [0u8; AUTH_REPLY_LEN];
            read_full(r, &mut b)?;
            Frame::AuthReply(AuthReply::decode(&b)?)
        }
    })
}

fn write_parts<W: Write>(w: &mut W, kind: FrameKind, msg: &[u8], data: &[u8]) -> io::Result<()> {
    let data_len = u32::try_from(data.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "data too long"))?;
    let hdr = FrameHeader {
        kind,
        flags: 0,
        data_len,
    }
    .to_bytes();
    // Header and message in one write keeps small frames in one segment.
    let mut head =
        Vec::with_capacity(hdr.len() + msg.len() + if data.len() <= 4096 { data.len() } else { 0 });
    head.extend_from_slice(&hdr);
    head.extend_from_slice(msg);
    if data.len() <= 4096 {
        head.extend_from_slice(data);
        w.write_all(&head)?;
    } else {
        w.write_all(&head)?;
        w.write_all(data)?;
    }
    w.flush()
}

/// Writes a Hello frame.
pub fn write_hello<W: Write>(w: &mut W, h: &Hello) -> io::Result<()> {
    write_parts(w, FrameKind::Hello, &h.to_bytes(), &[])
}

/// Writes a HelloReply frame.
pub fn write_hello_reply<W: Write>(w: &mut W, h: &HelloReply) -> io::Result<()> {
    let e = h.to_bytes();
    write_parts(w, FrameKind::HelloReply, e.fixed(), e.tail())
}

/// Writes a Request frame followed by `data` (write data; empty otherwise).
pub fn write_request<W: Write>(w: &mut W, req: &Request, data: &[u8]) -> io::Result<()> {
    write_parts(w, FrameKind::Request, &req.to_bytes(), data)
}

/// Writes an authentication frame.
pub fn write_auth<W: Write>(w: &mut W, a: &AuthRequest) -> io::Result<()> {
    write_parts(w, FrameKind::Auth, &a.to_bytes(), &[])
}

/// Writes the answer to an authentication.
pub fn write_auth_reply<W: Write>(w: &mut W, a: &AuthReply) -> io::Result<()> {
    write_parts(w, FrameKind::AuthReply, &a.to_bytes(), &[])
}

/// Writes a Response frame followed by `data` (read data; empty otherwise).
pub fn write_response<W: Write>(w: &mut W, resp: &Response, data: &[u8]) -> io::Result<()> {
    write_parts(w, FrameKind::Response, &resp.to_bytes(), data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmadisk_proto::wire::{Opcode, RemoteBuf, Status};

    fn req() -> Request {
        Request {
            opcode: Opcode::Write,
            flags: 0,
            credits: 1,
            tag: 7,
            sector: 8,
            length: 512,
            data_crc: 0,
            buf: RemoteBuf {
                addr: 0,
                rkey: 0,
                len: 512,
            },
        }
    }

    #[test]
    fn round_trip() {
        let mut v = Vec::new();
        write_request(&mut v, &req(), &[0xab; 512]).unwrap();
        let resp = Response {
            tag: 7,
            status: Status::Ok,
            credits: 1,
            data_crc: 3,
            length: 0,
            rkey: 0,
            capacity_sectors: 8,
        };
        write_response(&mut v, &resp, &[]).unwrap();
        let mut r = &v[..];
        match read_frame(&mut r, 4096).unwrap() {
            Frame::Request(q, n) => {
                assert_eq!(q, req());
                assert_eq!(n, 512);
                let mut d = [0u8; 512];
                read_full(&mut r, &mut d).unwrap();
                assert!(d.iter().all(|&b| b == 0xab));
            }
            f => panic!("{f:?}"),
        }
        assert!(matches!(read_frame(&mut r, 4096).unwrap(), Frame::Response(x, 0) if x == resp));
    }

    #[test]
    fn hello_reply_carries_its_identity_as_data() {
        use rdmadisk_proto::wire::{HelloStatus, Identity, Serial, Uuid};
        let id = Identity {
            uuid: Uuid::parse("0123abcd-4567-89ef-0011-223344556677").unwrap(),
            serial: Serial::new(b"SN1").unwrap(),
        };
        let reply = HelloReply {
            identity: Some(id),
            ..HelloReply::rejected(HelloStatus::Ok)
        };
        let mut v = Vec::new();
        write_hello_reply(&mut v, &reply).unwrap();
        assert_eq!(v.len(), FRAME_HEADER_LEN + HELLO_REPLY_MAX_LEN);
        assert_eq!(&v[4..8], &(IDENTITY_LEN as u32).to_le_bytes());
        match read_frame(&mut &v[..], 0).unwrap() {
            Frame::HelloReply(r) => assert_eq!(r.identity, Some(id)),
            f => panic!("{f:?}"),
        }
        // Without one: no data, as an older client wants.
        let mut plain = Vec::new();
        write_hello_reply(&mut plain, &HelloReply::rejected(HelloStatus::Ok)).unwrap();
        assert_eq!(plain.len(), FRAME_HEADER_LEN + HELLO_REPLY_LEN);
        // Data that the reply does not announce, or an announced identity without its data.
        let mut bad = plain.clone();
        bad[4..8].copy_from_slice(&(IDENTITY_LEN as u32).to_le_bytes());
        bad.extend_from_slice(&[0; IDENTITY_LEN]);
        assert!(matches!(
            read_frame(&mut &bad[..], 0),
            Err(FrameError::Malformed(_))
        ));
        let mut bad = v.clone();
        bad[4..8].copy_from_slice(&0u32.to_le_bytes());
        bad.truncate(FRAME_HEADER_LEN + HELLO_REPLY_LEN);
        assert!(read_frame(&mut &bad[..], 0).is_err());
    }

    #[test]
    fn rejects_garbage_and_oversize() {
        let mut r = &b"GARBAGE!GARBAGE!"[..];
        assert!(matches!(
            read_frame(&mut r, 4096),
            Err(FrameError::Malformed(_))
        ));
        let mut v = Vec::new();
        write_request(&mut v, &req(), &[0u8; 8192]).unwrap();
        assert!(matches!(
            read_frame(&mut &v[..], 4096),
            Err(FrameError::Malformed(_))
        ));
        let mut v = Vec::new();
        write_hello_reply(
            &mut v,
            &HelloReply::rejected(rdmadisk_proto::wire::HelloStatus::Busy),
        )
        .unwrap();
        assert!(matches!(
            read_frame(&mut &v[..], 0),
            Ok(Frame::HelloReply(_))
        ));
        assert!(matches!(
            read_frame(&mut &v[..8], 0),
            Err(FrameError::Io(_))
        ));
    }
}
