//! Wire format shared by the client (kernel module) and the storage target.
//!
//! Every message is a fixed-size, explicitly little-endian layout. Layouts are
//! described by offset constants (the `*_off` modules) rather than by
//! `#[repr(C)]` structs so that encoding and decoding never depend on host
//! endianness, padding or `unsafe` transmutes, and so the C view in
//! `include/rdmadisk_wire.h` can be generated from the same numbers.
//!
//! Decoders take `&[u8]`, accept trailing bytes (connect private data and
//! receive buffers are often larger than the message) and never panic.
//! Reserved bytes are written as zero and ignored when read, so later versions
//! can give them a meaning without breaking this one.

use core::fmt;

/// Magic at the start of [`Hello`] and [`HelloReply`] ("RDSK" read as a
/// big-endian word), so a stray connection is rejected at once.
pub const MAGIC: u32 = 0x5244_534B;
/// Protocol version carried in [`Hello`] and [`HelloReply`]. Version 2 added
/// connection epochs ([`Hello::epoch`], [`Status::Fenced`]) and request ids
/// with generations ([`ReqId`]). Version 4 ordered sessions
/// ([`HelloReply::session_floor`]), made authentication mutual ([`AuthRequest`]
/// carries the client's nonce, [`AuthReply`] the target's proof) and added
/// [`Opcode::Close`].
pub const VERSION: u16 = 4;
/// Maximum length in bytes of an export name.
pub const EXPORT_NAME_MAX: usize = 32;
/// log2 of the sector size that `sector` fields count in.
pub const SECTOR_SHIFT: u32 = 9;
/// Sector size in bytes; lengths must be multiples of it.
pub const SECTOR_SIZE: u32 = 1 << SECTOR_SHIFT;

/// Encoded length of [`Hello`]; it must fit rdma_cm connect private data
/// (56 bytes for RC on InfiniBand/RoCE).
pub const HELLO_LEN: usize = 56;
/// Encoded length of [`HelloReply`] without its [`Identity`]: a refusal, a reply to a client
/// that did not ask for the identity, and the message of a TCP `HelloReply` frame. It must fit
/// rdma_cm reject private data (148 bytes): a refusal carries it.
pub const HELLO_REPLY_LEN: usize = 72;
/// Encoded length of an [`Identity`]: it follows the [`HelloReply`] (in the same rdma_cm accept
/// private data, or as the data of its TCP frame) when the reply has [`features::IDENTITY`].
pub const IDENTITY_LEN: usize = 40;
/// Encoded length of a [`HelloReply`] with its [`Identity`]; it must fit rdma_cm accept
/// private data (196 bytes).
pub const HELLO_REPLY_MAX_LEN: usize = HELLO_REPLY_LEN + IDENTITY_LEN;
/// Bytes of an export's UUID ([`Uuid`]).
pub const UUID_LEN: usize = 16;
/// Longest serial of an export ([`Serial`]).
pub const SERIAL_MAX: usize = 20;
/// Encoded length of [`Request`].
pub const REQUEST_LEN: usize = 48;
/// Encoded length of [`Response`].
pub const RESPONSE_LEN: usize = 32;
/// Encoded length of [`AuthRequest`]. Every RDMA receive of the target holds
/// at least this much (its receives are multiples of 64 bytes).
pub const AUTH_REQUEST_LEN: usize = 64;
/// Encoded length of [`AuthReply`]. A client sizes its RDMA receives for it.
pub const AUTH_REPLY_LEN: usize = 64;
/// Encoded length of [`FrameHeader`].
pub const FRAME_HEADER_LEN: usize = 8;
/// Magic at the start of every TCP frame ("RD").
pub const FRAME_MAGIC: u16 = 0x5244;
/// Bytes of each side's nonce in an authentication: the target's challenge
/// ([`HelloReply::challenge`]) and the client's ([`AuthRequest::nonce`]).
pub const CHALLENGE_LEN: usize = 16;

/// Field offsets of [`Hello`].
pub mod hello_off {
    /// `u32` [`super::MAGIC`].
    pub const MAGIC: usize = 0;
    /// `u16` protocol version.
    pub const VERSION: usize = 4;
    /// `u16` flags, none defined yet.
    pub const FLAGS: usize = 6;
    /// `u16` index of this queue within the session.
    pub const QUEUE_ID: usize = 8;
    /// `u16` number of queues the session will open.
    pub const QUEUE_COUNT: usize = 10;
    /// `u16` receives the client has posted for responses.
    pub const RECV_CREDITS: usize = 12;
    /// `u16` [`super::hello_caps`]: what the client can take in the reply. Reserved (zero,
    /// ignored) before, so a target that does not know them ignores them.
    pub const CAPS: usize = 14;
    /// `u32` session identifier (0: not fenced).
    pub const SESSION_ID: usize = 16;
    /// `u32` connection epoch within the session.
    pub const EPOCH: usize = 20;
    /// `[u8; 32]` export name, NUL padded.
    pub const EXPORT_NAME: usize = 24;
}

/// Field offsets of [`HelloReply`].
pub mod hello_reply_off {
    /// `u32` [`super::MAGIC`].
    pub const MAGIC: usize = 0;
    /// `u16` protocol version.
    pub const VERSION: usize = 4;
    /// `u16` [`super::HelloStatus`].
    pub const STATUS: usize = 6;
    /// `u64` export capacity in 512-byte sectors.
    pub const CAPACITY_SECTORS: usize = 8;
    /// `u32` logical block size in bytes.
    pub const LOGICAL_BLOCK_SIZE: usize = 16;
    /// `u32` physical block size in bytes.
    pub const PHYSICAL_BLOCK_SIZE: usize = 20;
    /// `u32` largest I/O in bytes.
    pub const MAX_IO_BYTES: usize = 24;
    /// `u16` largest number of data segments per I/O.
    pub const MAX_SEGMENTS: usize = 28;
    /// `u16` requests the target accepts in flight per queue.
    pub const QUEUE_DEPTH: usize = 30;
    /// `u16` request credits granted with the reply.
    pub const INITIAL_CREDITS: usize = 32;
    /// `u16` reserved, zero.
    pub const RESERVED0: usize = 34;
    /// `u32` [`super::features`] bits.
    pub const FEATURES: usize = 36;
    /// `u32` largest discard in sectors.
    pub const MAX_DISCARD_SECTORS: usize = 40;
    /// [`super::CHALLENGE_LEN`] bytes: the challenge of an export that requires
    /// authentication (zero otherwise).
    pub const CHALLENGE: usize = 44;
    /// `u32` largest write in bytes the client may send inline in its request
    /// (RDMA only; 0: none).
    pub const MAX_INLINE: usize = 60;
    /// `u32` with status `Stale`: the session the target's fence is at; a new
    /// session must take an id above it (0 otherwise).
    pub const SESSION_FLOOR: usize = 64;
    /// `u32` reserved, zero.
    pub const RESERVED1: usize = 68;
}

/// Field offsets of [`Identity`], from its start (which is [`super::HELLO_REPLY_LEN`] bytes
/// into the reply).
pub mod identity_off {
    /// [`super::UUID_LEN`] bytes: the export's UUID, as in its text form's order.
    pub const UUID: usize = 0;
    /// [`super::SERIAL_MAX`] bytes: the export's serial, NUL padded.
    pub const SERIAL: usize = 16;
    /// Reserved, zero, up to [`super::IDENTITY_LEN`].
    pub const RESERVED: usize = 36;
}

/// Field offsets of [`Request`].
pub mod request_off {
    /// `u8` [`super::Opcode`].
    pub const OPCODE: usize = 0;
    /// `u8` [`super::req_flags`] bits.
    pub const FLAGS: usize = 1;
    /// `u16` response credits the client grants the target.
    pub const CREDITS: usize = 2;
    /// `u32` request tag, echoed in the response.
    pub const TAG: usize = 4;
    /// `u64` first sector.
    pub const SECTOR: usize = 8;
    /// `u32` length in bytes.
    pub const LENGTH: usize = 16;
    /// `u32` CRC32C of write data.
    pub const DATA_CRC: usize = 20;
    /// `u64` remote buffer address.
    pub const BUF_ADDR: usize = 24;
    /// `u32` remote buffer rkey.
    pub const BUF_RKEY: usize = 32;
    /// `u32` remote buffer length.
    pub const BUF_LEN: usize = 36;
    /// Reserved, zero, up to [`super::REQUEST_LEN`].
    pub const RESERVED: usize = 40;
}

/// Field offsets of [`AuthRequest`]: the opcode, flags, credits and tag sit
/// where a [`Request`] has them.
pub mod auth_off {
    /// `u8` [`super::AUTH_OPCODE`].
    pub const OPCODE: usize = 0;
    /// `u8` flags, none defined; zero.
    pub const FLAGS: usize = 1;
    /// `u16` response credits the client grants the target.
    pub const CREDITS: usize = 2;
    /// `u32` request tag, echoed in the reply.
    pub const TAG: usize = 4;
    /// [`super::CHALLENGE_LEN`] bytes: the client's nonce.
    pub const NONCE: usize = 8;
    /// 32 bytes: the client's proof (see `auth.rs`).
    pub const PROOF: usize = 24;
    /// Reserved, zero, up to [`super::AUTH_REQUEST_LEN`].
    pub const RESERVED: usize = 56;
}

/// Field offsets of [`AuthReply`]: the tag, status and credits sit where a
/// [`Response`] has them.
pub mod auth_reply_off {
    /// `u32` tag of the [`super::AuthRequest`] answered.
    pub const TAG: usize = 0;
    /// `u16` [`super::Status`]: `Ok`, `Denied`, or `Fenced` (the session is superseded).
    pub const STATUS: usize = 4;
    /// `u16` request credits the target grants the client.
    pub const CREDITS: usize = 6;
    /// 32 bytes: the target's proof (zero when denied).
    pub const PROOF: usize = 8;
    /// `u32`: with `Fenced`, the session the target's fence is at (0 otherwise).
    pub const SESSION_FLOOR: usize = 40;
    /// Reserved, zero, up to [`super::AUTH_REPLY_LEN`].
    pub const RESERVED: usize = 44;
}

/// Field offsets of [`Response`].
pub mod response_off {
    /// `u32` tag of the request answered.
    pub const TAG: usize = 0;
    /// `u16` [`super::Status`].
    pub const STATUS: usize = 4;
    /// `u16` request credits the target grants the client.
    pub const CREDITS: usize = 6;
    /// `u32` CRC32C of read data.
    pub const DATA_CRC: usize = 8;
    /// `u32` length in bytes.
    pub const LENGTH: usize = 12;
    /// `u32` rkey invalidated by the Send-with-Invalidate.
    pub const RKEY: usize = 16;
    /// `u32` reserved, zero.
    pub const RESERVED: usize = 20;
    /// `u64` the export's capacity in sectors when the response was sent
    /// ([`super::features::RESIZE`]); the last field.
    pub const CAPACITY_SECTORS: usize = 24;
}

/// Field offsets of [`FrameHeader`].
pub mod frame_off {
    /// `u16` [`super::FRAME_MAGIC`].
    pub const MAGIC: usize = 0;
    /// `u8` [`super::FrameKind`].
    pub const KIND: usize = 2;
    /// `u8` flags, none defined yet.
    pub const FLAGS: usize = 3;
    /// `u32` bytes of data after the fixed message.
    pub const DATA_LEN: usize = 4;
}

// The layouts are part of the protocol: any change must be deliberate.
const _: () = assert!(hello_off::EXPORT_NAME + EXPORT_NAME_MAX == HELLO_LEN);
const _: () = assert!(HELLO_LEN <= 56);
const _: () = assert!(hello_off::SESSION_ID + 4 == hello_off::EPOCH);
const _: () = assert!(hello_off::EPOCH + 4 == hello_off::EXPORT_NAME);
const _: () = assert!(hello_reply_off::CHALLENGE + CHALLENGE_LEN == hello_reply_off::MAX_INLINE);
const _: () = assert!(hello_reply_off::MAX_INLINE + 4 == hello_reply_off::SESSION_FLOOR);
const _: () = assert!(hello_reply_off::RESERVED1 + 4 == HELLO_REPLY_LEN);
const _: () = assert!(auth_off::NONCE + CHALLENGE_LEN == auth_off::PROOF);
const _: () = assert!(auth_off::PROOF + 32 == auth_off::RESERVED);
const _: () = assert!(auth_off::RESERVED < AUTH_REQUEST_LEN);
const _: () = assert!(auth_reply_off::PROOF + 32 == auth_reply_off::SESSION_FLOOR);
const _: () = assert!(auth_reply_off::SESSION_FLOOR + 4 == auth_reply_off::RESERVED);
const _: () = assert!(auth_reply_off::RESERVED < AUTH_REPLY_LEN);
const _: () = assert!(HELLO_REPLY_LEN <= 148);
const _: () = assert!(HELLO_REPLY_MAX_LEN <= 196);
const _: () = assert!(identity_off::UUID + UUID_LEN == identity_off::SERIAL);
const _: () = assert!(identity_off::SERIAL + SERIAL_MAX == identity_off::RESERVED);
const _: () = assert!(identity_off::RESERVED + 4 == IDENTITY_LEN);
const _: () = assert!(hello_reply_off::CAPACITY_SECTORS % 8 == 0);
const _: () = assert!(request_off::RESERVED + 8 == REQUEST_LEN);
const _: () = assert!(request_off::SECTOR % 8 == 0 && request_off::BUF_ADDR % 8 == 0);
const _: () = assert!(response_off::RESERVED + 4 == response_off::CAPACITY_SECTORS);
const _: () = assert!(response_off::CAPACITY_SECTORS % 8 == 0);
const _: () = assert!(response_off::CAPACITY_SECTORS + 8 == RESPONSE_LEN);
const _: () = assert!(frame_off::DATA_LEN + 4 == FRAME_HEADER_LEN);

/// Feature bits advertised in [`HelloReply::features`].
pub mod features {
    /// The export has a volatile cache; `Flush` and FUA writes are meaningful.
    pub const FLUSH: u32 = 1 << 0;
    /// FUA writes are honoured natively.
    pub const FUA: u32 = 1 << 1;
    /// `Discard` is supported.
    pub const DISCARD: u32 = 1 << 2;
    /// `WriteZeroes` is supported.
    pub const WRITE_ZEROES: u32 = 1 << 3;
    /// The export is read-only.
    pub const READ_ONLY: u32 = 1 << 4;
    /// The client must authenticate (an [`super::AuthRequest`] answering
    /// [`super::HelloReply::challenge`]) before anything else on this
    /// connection.
    pub const AUTH: u32 = 1 << 5;
    /// The export may change size while served (an RBD image): every
    /// [`super::Response`] carries its capacity as it is then
    /// ([`super::Response::capacity_sectors`]), so a client sees an export
    /// that grew while it is mapped (online resize). Without it the field is 0.
    /// A reserved field before, so a client that does not know the bit ignores
    /// it: no [`super::VERSION`] change.
    pub const RESIZE: u32 = 1 << 6;
    /// The export is one gateway of a shared store (an RBD image with the
    /// target's `gateway` setting): other targets may serve the same data,
    /// and this one takes the store's writer lock over, fencing the previous
    /// writer, when a read-write session attaches here. A client maps such an
    /// export through several targets; one without the bit (a local file) has
    /// one writer target only (docs/design.md, "Several gateways").
    pub const GATEWAY: u32 = 1 << 7;
    /// The reply carries the export's [`super::Identity`] (its UUID and serial) after its
    /// [`super::HELLO_REPLY_LEN`] bytes: in the same accept private data over RDMA, as the
    /// frame's data over TCP. A target sets it only for a client whose Hello has
    /// [`super::hello_caps::IDENTITY`], so a client that does not know it never gets the
    /// longer reply: no [`super::VERSION`] change.
    pub const IDENTITY: u32 = 1 << 8;
    /// Every bit defined above.
    pub const ALL: u32 =
        FLUSH | FUA | DISCARD | WRITE_ZEROES | READ_ONLY | AUTH | RESIZE | GATEWAY | IDENTITY;
}

/// Bits of [`Hello::caps`]: what the client can take in the [`HelloReply`]. A target ignores
/// bits it does not know (the field was reserved), so a client may always set them.
pub mod hello_caps {
    /// The client takes the export's [`super::Identity`] after the reply
    /// ([`super::features::IDENTITY`]).
    pub const IDENTITY: u16 = 1;
    /// Every bit defined above.
    pub const ALL: u16 = IDENTITY;
}

/// Flag bits of [`Hello::flags`].
pub mod hello_flags {
    /// The client maps the export read-only: it will not write, and takes no
    /// exclusive hold on it.
    pub const READ_ONLY: u16 = 1;
    /// The Hello opens a session: the client's mapping has not attached yet.
    /// Its session must be above every one the target's fence has seen of this
    /// client and export (else `Stale`, naming the floor), so that a new
    /// mapping never joins an old one's session and its stale writes (see
    /// [`crate::fence`]).
    pub const NEW_SESSION: u16 = 2;
    /// Every bit defined above.
    pub const ALL: u16 = READ_ONLY | NEW_SESSION;
}

/// Flag bits of [`Request::flags`].
pub mod req_flags {
    /// Force unit access: the write is durable before the response.
    pub const FUA: u8 = 1;
    /// A write whose data follows the request in the same RDMA Send, at most
    /// [`super::HelloReply::max_inline`] bytes: no buffer is registered and the
    /// target pulls nothing (`buf` has no address and no rkey). Over TCP the
    /// data always follows the request, so the flag changes nothing there.
    pub const INLINE: u8 = 2;
    /// Every bit defined above.
    pub const ALL: u8 = FUA | INLINE;
}

/// Why a buffer could not be decoded, or a value could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The buffer is shorter than the message.
    Short,
    /// The magic number is wrong.
    BadMagic,
    /// The protocol version is not [`VERSION`].
    BadVersion,
    /// Unknown [`Opcode`].
    BadOpcode(u8),
    /// Unknown [`Status`].
    BadStatus(u16),
    /// Unknown [`HelloStatus`].
    BadHelloStatus(u16),
    /// Unknown [`FrameKind`].
    BadKind(u8),
    /// The export name is empty, too long, not NUL padded or has a
    /// character outside `[A-Za-z0-9._-]`.
    BadExportName,
    /// The [`Identity`] has a nil UUID, or a serial that is empty, not NUL padded or has a
    /// character outside `[A-Za-z0-9._-]`.
    BadIdentity,
}

impl DecodeError {
    /// The [`HelloStatus`] a target answers when a [`Hello`] fails to decode.
    pub fn hello_status(self) -> HelloStatus {
        match self {
            DecodeError::BadVersion => HelloStatus::BadVersion,
            DecodeError::BadExportName => HelloStatus::NoSuchExport,
            _ => HelloStatus::Invalid,
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Short => f.write_str("message too short"),
            DecodeError::BadMagic => f.write_str("bad magic"),
            DecodeError::BadVersion => f.write_str("unsupported protocol version"),
            DecodeError::BadOpcode(op) => write!(f, "unknown opcode {op}"),
            DecodeError::BadStatus(s) => write!(f, "unknown status {s}"),
            DecodeError::BadHelloStatus(s) => write!(f, "unknown hello status {s}"),
            DecodeError::BadKind(k) => write!(f, "unknown frame kind {k}"),
            DecodeError::BadExportName => f.write_str("invalid export name"),
            DecodeError::BadIdentity => f.write_str("invalid export identity"),
        }
    }
}

// Offsets are const generics so that every bound is checked at compile time:
// the accessors contain no fallible indexing at all.
fn get<const OFF: usize, const W: usize, const N: usize>(b: &[u8; N]) -> [u8; W] {
    const { assert!(OFF + W <= N) };
    let mut out = [0u8; W];
    for (dst, src) in out.iter_mut().zip(b.iter().skip(OFF)) {
        *dst = *src;
    }
    out
}

fn put<const OFF: usize, const W: usize, const N: usize>(b: &mut [u8; N], v: [u8; W]) {
    const { assert!(OFF + W <= N) };
    for (dst, src) in b.iter_mut().skip(OFF).zip(v.iter()) {
        *dst = *src;
    }
}

fn get_u8<const OFF: usize, const N: usize>(b: &[u8; N]) -> u8 {
    let [v] = get::<OFF, 1, N>(b);
    v
}

fn get_u16<const OFF: usize, const N: usize>(b: &[u8; N]) -> u16 {
    u16::from_le_bytes(get::<OFF, 2, N>(b))
}

fn get_u32<const OFF: usize, const N: usize>(b: &[u8; N]) -> u32 {
    u32::from_le_bytes(get::<OFF, 4, N>(b))
}

fn get_u64<const OFF: usize, const N: usize>(b: &[u8; N]) -> u64 {
    u64::from_le_bytes(get::<OFF, 8, N>(b))
}

fn put_u8<const OFF: usize, const N: usize>(b: &mut [u8; N], v: u8) {
    put::<OFF, 1, N>(b, [v]);
}

fn put_u16<const OFF: usize, const N: usize>(b: &mut [u8; N], v: u16) {
    put::<OFF, 2, N>(b, v.to_le_bytes());
}

fn put_u32<const OFF: usize, const N: usize>(b: &mut [u8; N], v: u32) {
    put::<OFF, 4, N>(b, v.to_le_bytes());
}

fn put_u64<const OFF: usize, const N: usize>(b: &mut [u8; N], v: u64) {
    put::<OFF, 8, N>(b, v.to_le_bytes());
}

fn fixed<const N: usize>(buf: &[u8]) -> Result<&[u8; N], DecodeError> {
    buf.first_chunk::<N>().ok_or(DecodeError::Short)
}

/// Whether `c` may be in an export name or a serial: both are printed in logs, sysfs, paths
/// and udev link names without escaping.
fn name_char(c: &u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(*c, b'.' | b'_' | b'-')
}

/// Name of an export: 1..=[`EXPORT_NAME_MAX`] bytes of `[A-Za-z0-9._-]`.
///
/// The character set keeps names safe to print in logs, sysfs and paths
/// without escaping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportName {
    // Bytes past `len` are always zero, which makes the derived `Eq` exact.
    bytes: [u8; EXPORT_NAME_MAX],
    len: u8,
}

impl ExportName {
    /// Checks and copies `name`.
    pub fn new(name: &[u8]) -> Result<ExportName, DecodeError> {
        if name.is_empty() || name.len() > EXPORT_NAME_MAX {
            return Err(DecodeError::BadExportName);
        }
        if !name.iter().all(name_char) {
            return Err(DecodeError::BadExportName);
        }
        let mut bytes = [0u8; EXPORT_NAME_MAX];
        for (dst, src) in bytes.iter_mut().zip(name.iter()) {
            *dst = *src;
        }
        Ok(ExportName {
            bytes,
            // Cannot truncate: the length was checked against EXPORT_NAME_MAX.
            len: name.len() as u8,
        })
    }

    /// The name without padding.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or(&[])
    }

    /// The name as a string; it is ASCII by construction.
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(self.as_bytes()).unwrap_or("")
    }

    /// The NUL-padded form carried on the wire.
    pub fn to_padded(&self) -> [u8; EXPORT_NAME_MAX] {
        self.bytes
    }

    /// Parses the NUL-padded wire form. Padding must be all NUL so that every
    /// name has exactly one encoding.
    pub fn from_padded(padded: &[u8; EXPORT_NAME_MAX]) -> Result<ExportName, DecodeError> {
        let len = padded
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(EXPORT_NAME_MAX);
        let (name, pad) = padded.split_at(len);
        if pad.iter().any(|&c| c != 0) {
            return Err(DecodeError::BadExportName);
        }
        ExportName::new(name)
    }
}

impl fmt::Display for ExportName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An export's UUID: 16 bytes, in the order of its text form
/// (`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, lowercase hex). Configured at the target, or made
/// once there and kept beside the export (docs/design.md, "Identity"); never nil on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Uuid(pub [u8; UUID_LEN]);

impl Uuid {
    /// Parses the hyphenated text form (either case); `None` if it is not one, or is nil.
    pub fn parse(s: &str) -> Option<Uuid> {
        let b = s.as_bytes();
        if b.len() != 36 {
            return None;
        }
        let mut out = [0u8; UUID_LEN];
        let mut nibbles = 0usize;
        for (i, &c) in b.iter().enumerate() {
            if matches!(i, 8 | 13 | 18 | 23) {
                if c != b'-' {
                    return None;
                }
                continue;
            }
            let v = (c as char).to_digit(16)? as u8;
            let byte = out.get_mut(nibbles / 2)?;
            *byte = *byte << 4 | v;
            nibbles += 1;
        }
        let u = Uuid(out);
        (!u.is_nil()).then_some(u)
    }

    /// Whether every byte is zero (no UUID).
    pub fn is_nil(&self) -> bool {
        self.0.iter().all(|&b| b == 0)
    }

    /// The serial an export without a configured one gets: the UUID's first 8 bytes in hex (16
    /// characters).
    pub fn default_serial(&self) -> Serial {
        let mut hex = [0u8; 16];
        for (pair, b) in hex.chunks_exact_mut(2).zip(self.0.iter()) {
            let digit = |n: u8| {
                b"0123456789abcdef"
                    .get(usize::from(n))
                    .copied()
                    .unwrap_or(b'0')
            };
            if let [hi, lo] = pair {
                *hi = digit(b >> 4);
                *lo = digit(b & 15);
            }
        }
        // 16 hex digits are a valid serial.
        Serial::new(&hex).unwrap_or(Serial {
            bytes: [b'0'; SERIAL_MAX],
            len: 1,
        })
    }
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// An export's serial: 1..=[`SERIAL_MAX`] bytes of `[A-Za-z0-9._-]`, so that it can name a
/// udev link (`/dev/disk/by-id/rdmadisk-<serial>`) as it is. Configured at the target, or
/// [`Uuid::default_serial`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Serial {
    // Bytes past `len` are always zero, which makes the derived `Eq` exact.
    bytes: [u8; SERIAL_MAX],
    len: u8,
}

impl Serial {
    /// Checks and copies `s`.
    pub fn new(s: &[u8]) -> Result<Serial, DecodeError> {
        if s.is_empty() || s.len() > SERIAL_MAX || !s.iter().all(name_char) {
            return Err(DecodeError::BadIdentity);
        }
        let mut bytes = [0u8; SERIAL_MAX];
        for (dst, src) in bytes.iter_mut().zip(s.iter()) {
            *dst = *src;
        }
        Ok(Serial {
            bytes,
            // Cannot truncate: the length was checked against SERIAL_MAX.
            len: s.len() as u8,
        })
    }

    /// The serial as a string; it is ASCII by construction.
    pub fn as_str(&self) -> &str {
        let b = self.bytes.get(..usize::from(self.len)).unwrap_or(&[]);
        core::str::from_utf8(b).unwrap_or("")
    }

    /// Parses the NUL-padded wire form; padding must be all NUL.
    fn from_padded(padded: &[u8; SERIAL_MAX]) -> Result<Serial, DecodeError> {
        let len = padded.iter().position(|&c| c == 0).unwrap_or(SERIAL_MAX);
        let (s, pad) = padded.split_at(len);
        if pad.iter().any(|&c| c != 0) {
            return Err(DecodeError::BadIdentity);
        }
        Serial::new(s)
    }
}

impl fmt::Display for Serial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who an export is, whichever target serves it and whatever slot a client maps it to: sent
/// after the [`HelloReply`] ([`features::IDENTITY`]). A client shows it in sysfs (`serial`,
/// `uuid`, `wwid`) and refuses a reconnect to a target whose export has another UUID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Identity {
    /// Never nil.
    pub uuid: Uuid,
    /// The export's serial.
    pub serial: Serial,
}

impl Identity {
    /// Writes the identity, reserved bytes zeroed.
    pub fn encode(&self, out: &mut [u8; IDENTITY_LEN]) {
        *out = [0; IDENTITY_LEN];
        put::<{ identity_off::UUID }, UUID_LEN, IDENTITY_LEN>(out, self.uuid.0);
        put::<{ identity_off::SERIAL }, SERIAL_MAX, IDENTITY_LEN>(out, self.serial.bytes);
    }

    /// Parses an identity; trailing bytes are ignored.
    pub fn decode(buf: &[u8]) -> Result<Identity, DecodeError> {
        let b = fixed::<IDENTITY_LEN>(buf)?;
        let uuid = Uuid(get::<{ identity_off::UUID }, UUID_LEN, IDENTITY_LEN>(b));
        if uuid.is_nil() {
            return Err(DecodeError::BadIdentity);
        }
        let serial = get::<{ identity_off::SERIAL }, SERIAL_MAX, IDENTITY_LEN>(b);
        Ok(Identity {
            uuid,
            serial: Serial::from_padded(&serial)?,
        })
    }
}

/// A [`HelloReply`] as sent: [`HELLO_REPLY_LEN`] bytes, then the [`Identity`] if it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodedReply {
    bytes: [u8; HELLO_REPLY_MAX_LEN],
    len: usize,
}

impl EncodedReply {
    /// Everything, as rdma_cm accept or reject private data carries it.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or(&self.bytes)
    }

    /// The fixed part: the message of a TCP `HelloReply` frame.
    pub fn fixed(&self) -> &[u8] {
        self.bytes.get(..HELLO_REPLY_LEN).unwrap_or(&self.bytes)
    }

    /// What follows the fixed part (the identity, or nothing): the data of a TCP `HelloReply`
    /// frame.
    pub fn tail(&self) -> &[u8] {
        self.bytes.get(HELLO_REPLY_LEN..self.len).unwrap_or(&[])
    }
}

/// First message on every queue, client to target. Travels as rdma_cm
/// connect private data, or as the first TCP frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// [`hello_flags`] bits; a target refuses others (`Invalid`).
    pub flags: u16,
    /// Index of this queue, `0..queue_count`.
    pub queue_id: u16,
    /// Number of queues in the session.
    pub queue_count: u16,
    /// Receives the client has posted for responses on this queue, which is
    /// the number of responses the target may send before further grants.
    pub recv_credits: u16,
    /// [`hello_caps`] bits; a target ignores those it does not know.
    pub caps: u16,
    /// Ties a device's queues and both of its transports together, so the
    /// target can tell a reconnect (failover/failback) from a new client.
    /// 0: a connection outside any session (a probe), which is never fenced
    /// and fences nothing.
    pub session_id: u32,
    /// Which connection set of the session this queue belongs to. The client
    /// raises it for every new set (reconnect, transport switch); see
    /// [`Fence`] for what the target does with it.
    pub epoch: u32,
    /// Export to attach to.
    pub export: ExportName,
}

impl Hello {
    /// Writes the message, reserved bytes zeroed.
    pub fn encode(&self, out: &mut [u8; HELLO_LEN]) {
        *out = [0; HELLO_LEN];
        put_u32::<{ hello_off::MAGIC }, HELLO_LEN>(out, MAGIC);
        put_u16::<{ hello_off::VERSION }, HELLO_LEN>(out, VERSION);
        put_u16::<{ hello_off::FLAGS }, HELLO_LEN>(out, self.flags);
        put_u16::<{ hello_off::QUEUE_ID }, HELLO_LEN>(out, self.queue_id);
        put_u16::<{ hello_off::QUEUE_COUNT }, HELLO_LEN>(out, self.queue_count);
        put_u16::<{ hello_off::RECV_CREDITS }, HELLO_LEN>(out, self.recv_credits);
        put_u16::<{ hello_off::CAPS }, HELLO_LEN>(out, self.caps);
        put_u32::<{ hello_off::SESSION_ID }, HELLO_LEN>(out, self.session_id);
        put_u32::<{ hello_off::EPOCH }, HELLO_LEN>(out, self.epoch);
        put::<{ hello_off::EXPORT_NAME }, EXPORT_NAME_MAX, HELLO_LEN>(out, self.export.to_padded());
    }

    /// Returns the encoded message.
    pub fn to_bytes(&self) -> [u8; HELLO_LEN] {
        let mut out = [0; HELLO_LEN];
        self.encode(&mut out);
        out
    }

    /// Parses a message; trailing bytes are ignored.
    pub fn decode(buf: &[u8]) -> Result<Hello, DecodeError> {
        let b = fixed::<HELLO_LEN>(buf)?;
        if get_u32::<{ hello_off::MAGIC }, HELLO_LEN>(b) != MAGIC {
            return Err(DecodeError::BadMagic);
        }
        if get_u16::<{ hello_off::VERSION }, HELLO_LEN>(b) != VERSION {
            return Err(DecodeError::BadVersion);
        }
        let name = get::<{ hello_off::EXPORT_NAME }, EXPORT_NAME_MAX, HELLO_LEN>(b);
        Ok(Hello {
            flags: get_u16::<{ hello_off::FLAGS }, HELLO_LEN>(b),
            queue_id: get_u16::<{ hello_off::QUEUE_ID }, HELLO_LEN>(b),
            queue_count: get_u16::<{ hello_off::QUEUE_COUNT }, HELLO_LEN>(b),
            recv_credits: get_u16::<{ hello_off::RECV_CREDITS }, HELLO_LEN>(b),
            caps: get_u16::<{ hello_off::CAPS }, HELLO_LEN>(b),
            session_id: get_u32::<{ hello_off::SESSION_ID }, HELLO_LEN>(b),
            epoch: get_u32::<{ hello_off::EPOCH }, HELLO_LEN>(b),
            export: ExportName::from_padded(&name)?,
        })
    }
}

/// Outcome of a [`Hello`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum HelloStatus {
    /// Attached; the other [`HelloReply`] fields are valid.
    Ok = 0,
    /// The target does not speak the client's [`VERSION`].
    BadVersion = 1,
    /// No export by that name.
    NoSuchExport = 2,
    /// The client may not attach to this export.
    NotAllowed = 3,
    /// The target cannot take the queue now; retry later.
    Busy = 4,
    /// The hello was malformed (bad queue numbers, bad magic, ...).
    Invalid = 5,
    /// The hello's (session, epoch) is older than the one the target's fence
    /// is at: its connection set, or its whole session, has been superseded
    /// (see [`crate::fence`]; [`HelloReply::session_floor`] names the fence's
    /// session).
    Stale = 6,
}

impl TryFrom<u16> for HelloStatus {
    type Error = DecodeError;
    fn try_from(v: u16) -> Result<Self, DecodeError> {
        Ok(match v {
            0 => HelloStatus::Ok,
            1 => HelloStatus::BadVersion,
            2 => HelloStatus::NoSuchExport,
            3 => HelloStatus::NotAllowed,
            4 => HelloStatus::Busy,
            5 => HelloStatus::Invalid,
            6 => HelloStatus::Stale,
            _ => return Err(DecodeError::BadHelloStatus(v)),
        })
    }
}

/// The target's answer to a [`Hello`]: rdma_cm accept private data, or the
/// first TCP frame from the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloReply {
    /// Outcome; when not `Ok`, every other field is zero.
    pub status: HelloStatus,
    /// Export size in 512-byte sectors.
    pub capacity_sectors: u64,
    /// Logical block size in bytes.
    pub logical_block_size: u32,
    /// Physical block size in bytes.
    pub physical_block_size: u32,
    /// Largest I/O in bytes the target accepts.
    pub max_io_bytes: u32,
    /// Largest number of data segments per I/O.
    pub max_segments: u16,
    /// Requests the target accepts in flight on this queue.
    pub queue_depth: u16,
    /// Request credits granted now: the receives the target has posted.
    pub initial_credits: u16,
    /// [`features`] bits.
    pub features: u32,
    /// Largest discard or write-zeroes in sectors; the target must keep it
    /// within `max_io_bytes` (see [`Request::validate`]).
    pub max_discard_sectors: u32,
    /// With [`features::AUTH`]: what the client's proof must answer.
    pub challenge: [u8; CHALLENGE_LEN],
    /// Largest write the client may send inline ([`req_flags::INLINE`]); 0:
    /// none. A target sizes its receives for it, so a larger inline write
    /// breaks the connection.
    pub max_inline: u32,
    /// With status `Stale`: the session the fence is at. A client whose new
    /// mapping asked with a session at or below it asks again above it (see
    /// [`crate::fence`]); an attached session told `Stale` has been superseded.
    pub session_floor: u32,
    /// The export's identity: `Some` exactly when [`Self::features`] has
    /// [`features::IDENTITY`] (the encoder sets or clears the bit to match).
    pub identity: Option<Identity>,
}

impl HelloReply {
    /// A refusal carrying only a status.
    pub fn rejected(status: HelloStatus) -> HelloReply {
        HelloReply {
            status,
            capacity_sectors: 0,
            logical_block_size: 0,
            physical_block_size: 0,
            max_io_bytes: 0,
            max_segments: 0,
            queue_depth: 0,
            initial_credits: 0,
            features: 0,
            max_discard_sectors: 0,
            challenge: [0; CHALLENGE_LEN],
            max_inline: 0,
            session_floor: 0,
            identity: None,
        }
    }

    /// Writes the message, reserved bytes zeroed, and the identity after it if there is one;
    /// returns the length written ([`HELLO_REPLY_LEN`] or [`HELLO_REPLY_MAX_LEN`]).
    pub fn encode(&self, all: &mut [u8; HELLO_REPLY_MAX_LEN]) -> usize {
        const N: usize = HELLO_REPLY_LEN;
        *all = [0; HELLO_REPLY_MAX_LEN];
        let (head, tail) = all.split_at_mut(N);
        let (Ok(out), Ok(tail)) = (
            <&mut [u8; N]>::try_from(head),
            <&mut [u8; IDENTITY_LEN]>::try_from(tail),
        ) else {
            return 0;
        };
        let features = match self.identity {
            Some(_) => self.features | features::IDENTITY,
            None => self.features & !features::IDENTITY,
        };
        put_u32::<{ hello_reply_off::MAGIC }, N>(out, MAGIC);
        put_u16::<{ hello_reply_off::VERSION }, N>(out, VERSION);
        put_u16::<{ hello_reply_off::STATUS }, N>(out, self.status as u16);
        put_u64::<{ hello_reply_off::CAPACITY_SECTORS }, N>(out, self.capacity_sectors);
        put_u32::<{ hello_reply_off::LOGICAL_BLOCK_SIZE }, N>(out, self.logical_block_size);
        put_u32::<{ hello_reply_off::PHYSICAL_BLOCK_SIZE }, N>(out, self.physical_block_size);
        put_u32::<{ hello_reply_off::MAX_IO_BYTES }, N>(out, self.max_io_bytes);
        put_u16::<{ hello_reply_off::MAX_SEGMENTS }, N>(out, self.max_segments);
        put_u16::<{ hello_reply_off::QUEUE_DEPTH }, N>(out, self.queue_depth);
        put_u16::<{ hello_reply_off::INITIAL_CREDITS }, N>(out, self.initial_credits);
        put_u32::<{ hello_reply_off::FEATURES }, N>(out, features);
        put_u32::<{ hello_reply_off::MAX_DISCARD_SECTORS }, N>(out, self.max_discard_sectors);
        put::<{ hello_reply_off::CHALLENGE }, CHALLENGE_LEN, N>(out, self.challenge);
        put_u32::<{ hello_reply_off::MAX_INLINE }, N>(out, self.max_inline);
        put_u32::<{ hello_reply_off::SESSION_FLOOR }, N>(out, self.session_floor);
        match &self.identity {
            Some(id) => {
                id.encode(tail);
                HELLO_REPLY_MAX_LEN
            }
            None => N,
        }
    }

    /// Returns the encoded message, with the identity if there is one.
    pub fn to_bytes(&self) -> EncodedReply {
        let mut bytes = [0; HELLO_REPLY_MAX_LEN];
        let len = self.encode(&mut bytes);
        EncodedReply { bytes, len }
    }

    /// Parses a message, and its [`Identity`] if it has [`features::IDENTITY`] (then
    /// [`HELLO_REPLY_MAX_LEN`] bytes are needed); trailing bytes are ignored.
    ///
    /// A reply with a version other than [`VERSION`] is an error even when
    /// its status is `BadVersion`: the fields cannot be trusted either way.
    pub fn decode(buf: &[u8]) -> Result<HelloReply, DecodeError> {
        const N: usize = HELLO_REPLY_LEN;
        let b = fixed::<N>(buf)?;
        if get_u32::<{ hello_reply_off::MAGIC }, N>(b) != MAGIC {
            return Err(DecodeError::BadMagic);
        }
        if get_u16::<{ hello_reply_off::VERSION }, N>(b) != VERSION {
            return Err(DecodeError::BadVersion);
        }
        let features = get_u32::<{ hello_reply_off::FEATURES }, N>(b);
        let identity = if features & features::IDENTITY != 0 {
            Some(Identity::decode(buf.get(N..).unwrap_or(&[]))?)
        } else {
            None
        };
        Ok(HelloReply {
            status: HelloStatus::try_from(get_u16::<{ hello_reply_off::STATUS }, N>(b))?,
            capacity_sectors: get_u64::<{ hello_reply_off::CAPACITY_SECTORS }, N>(b),
            logical_block_size: get_u32::<{ hello_reply_off::LOGICAL_BLOCK_SIZE }, N>(b),
            physical_block_size: get_u32::<{ hello_reply_off::PHYSICAL_BLOCK_SIZE }, N>(b),
            max_io_bytes: get_u32::<{ hello_reply_off::MAX_IO_BYTES }, N>(b),
            max_segments: get_u16::<{ hello_reply_off::MAX_SEGMENTS }, N>(b),
            queue_depth: get_u16::<{ hello_reply_off::QUEUE_DEPTH }, N>(b),
            initial_credits: get_u16::<{ hello_reply_off::INITIAL_CREDITS }, N>(b),
            features,
            max_discard_sectors: get_u32::<{ hello_reply_off::MAX_DISCARD_SECTORS }, N>(b),
            challenge: get::<{ hello_reply_off::CHALLENGE }, CHALLENGE_LEN, N>(b),
            max_inline: get_u32::<{ hello_reply_off::MAX_INLINE }, N>(b),
            session_floor: get_u32::<{ hello_reply_off::SESSION_FLOOR }, N>(b),
            identity,
        })
    }
}

/// Request operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Opcode {
    /// Read `length` bytes; the target RDMA-Writes them into `buf`.
    Read = 1,
    /// Write `length` bytes; the target RDMA-Reads them from `buf`.
    Write = 2,
    /// Make completed writes durable.
    Flush = 3,
    /// Discard a sector range.
    Discard = 4,
    /// Zero a sector range without a data transfer.
    WriteZeroes = 5,
    /// Keepalive; carries no data and only returns credits.
    Nop = 6,
    /// The client's mapping ends (a normal unmap): no session of this client
    /// at or below this one will attach this export again, so the target may
    /// forget its fence once the session's connections are gone. No data.
    Close = 7,
}

impl Opcode {
    /// True for the operations that move data through `buf`.
    pub fn has_data(self) -> bool {
        matches!(self, Opcode::Read | Opcode::Write)
    }

    /// True for the operations that change the export's contents.
    pub fn modifies(self) -> bool {
        matches!(self, Opcode::Write | Opcode::Discard | Opcode::WriteZeroes)
    }
}

impl TryFrom<u8> for Opcode {
    type Error = DecodeError;
    fn try_from(v: u8) -> Result<Self, DecodeError> {
        Ok(match v {
            1 => Opcode::Read,
            2 => Opcode::Write,
            3 => Opcode::Flush,
            4 => Opcode::Discard,
            5 => Opcode::WriteZeroes,
            6 => Opcode::Nop,
            7 => Opcode::Close,
            _ => return Err(DecodeError::BadOpcode(v)),
        })
    }
}

/// What a [`Request::tag`] and a [`Response::tag`] carry: the client's slot
/// for the request (low 16 bits) and the slot's generation (high 16 bits).
///
/// The client raises a slot's generation every time it issues a request from
/// it, and completes a slot only with a response that carries the current
/// one, so a late or replayed response for an earlier use of the slot can
/// never complete the request that uses it now (see [`super::tags`]). The
/// target echoes the id and never interprets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReqId {
    /// The client's slot (a blk-mq tag, or a reserved slot for keepalives).
    pub slot: u16,
    /// Generation of the slot when the request was issued.
    pub gen: u16,
}

impl ReqId {
    /// The id carried in a tag field.
    pub fn from_tag(tag: u32) -> ReqId {
        ReqId {
            slot: tag as u16,
            gen: (tag >> 16) as u16,
        }
    }

    /// The tag field that carries this id.
    pub fn tag(self) -> u32 {
        u32::from(self.gen) << 16 | u32::from(self.slot)
    }
}

/// A client buffer the target may access once, with RDMA Read (writes) or
/// RDMA Write (reads), through a fast-registered memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoteBuf {
    /// I/O virtual address of the region.
    pub addr: u64,
    /// Remote key; invalidated by the response.
    pub rkey: u32,
    /// Region length in bytes.
    pub len: u32,
}

/// Result of a [`Request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Status {
    /// Done.
    Ok = 0,
    /// Write data did not match `data_crc`; the client retries.
    CrcMismatch = 1,
    /// The range is outside the export.
    OutOfRange = 2,
    /// The export is read-only.
    ReadOnly = 3,
    /// The backing store failed.
    IoError = 4,
    /// The operation is not supported by this export.
    Unsupported = 5,
    /// The request is malformed.
    Invalid = 6,
    /// The request came on a connection that a newer epoch or session of the
    /// same client has superseded; it was not applied (see [`Fence`]).
    Fenced = 7,
    /// The answer ([`AuthReply`]) to an [`AuthRequest`] whose proof is wrong:
    /// the target closes the connection.
    Denied = 8,
}

impl TryFrom<u16> for Status {
    type Error = DecodeError;
    fn try_from(v: u16) -> Result<Self, DecodeError> {
        Ok(match v {
            0 => Status::Ok,
            1 => Status::CrcMismatch,
            2 => Status::OutOfRange,
            3 => Status::ReadOnly,
            4 => Status::IoError,
            5 => Status::Unsupported,
            6 => Status::Invalid,
            7 => Status::Fenced,
            8 => Status::Denied,
            _ => return Err(DecodeError::BadStatus(v)),
        })
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Ok => "ok",
            Status::CrcMismatch => "crc mismatch",
            Status::OutOfRange => "out of range",
            Status::ReadOnly => "read-only",
            Status::IoError => "i/o error",
            Status::Unsupported => "unsupported",
            Status::Invalid => "invalid request",
            Status::Fenced => "fenced (superseded connection)",
            Status::Denied => "denied (authentication failed)",
        })
    }
}

/// One I/O, client to target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Operation.
    pub opcode: Opcode,
    /// [`req_flags`] bits.
    pub flags: u8,
    /// Response credits the client grants back (receives it re-posted).
    pub credits: u16,
    /// Request id ([`ReqId`]: slot and generation), echoed in the response.
    pub tag: u32,
    /// First 512-byte sector.
    pub sector: u64,
    /// Length in bytes.
    pub length: u32,
    /// CRC32C of the write data; 0 for other operations.
    pub data_crc: u32,
    /// Data buffer for `Read`/`Write`; zero otherwise.
    pub buf: RemoteBuf,
}

impl Request {
    /// A request with no range, no data and no buffer (a `Nop`, a `Close`, a `Flush`), with
    /// `tag`.
    pub fn bare(opcode: Opcode, tag: u32) -> Request {
        Request {
            opcode,
            flags: 0,
            credits: 0,
            tag,
            sector: 0,
            length: 0,
            data_crc: 0,
            buf: RemoteBuf::default(),
        }
    }

    /// Writes the message, reserved bytes zeroed.
    pub fn encode(&self, out: &mut [u8; REQUEST_LEN]) {
        const N: usize = REQUEST_LEN;
        *out = [0; N];
        put_u8::<{ request_off::OPCODE }, N>(out, self.opcode as u8);
        put_u8::<{ request_off::FLAGS }, N>(out, self.flags);
        put_u16::<{ request_off::CREDITS }, N>(out, self.credits);
        put_u32::<{ request_off::TAG }, N>(out, self.tag);
        put_u64::<{ request_off::SECTOR }, N>(out, self.sector);
        put_u32::<{ request_off::LENGTH }, N>(out, self.length);
        put_u32::<{ request_off::DATA_CRC }, N>(out, self.data_crc);
        put_u64::<{ request_off::BUF_ADDR }, N>(out, self.buf.addr);
        put_u32::<{ request_off::BUF_RKEY }, N>(out, self.buf.rkey);
        put_u32::<{ request_off::BUF_LEN }, N>(out, self.buf.len);
    }

    /// Returns the encoded message.
    pub fn to_bytes(&self) -> [u8; REQUEST_LEN] {
        let mut out = [0; REQUEST_LEN];
        self.encode(&mut out);
        out
    }

    /// Parses a message; trailing bytes are ignored. Only the opcode is
    /// checked here; [`Request::validate`] checks the rest.
    pub fn decode(buf: &[u8]) -> Result<Request, DecodeError> {
        const N: usize = REQUEST_LEN;
        let b = fixed::<N>(buf)?;
        Ok(Request {
            opcode: Opcode::try_from(get_u8::<{ request_off::OPCODE }, N>(b))?,
            flags: get_u8::<{ request_off::FLAGS }, N>(b),
            credits: get_u16::<{ request_off::CREDITS }, N>(b),
            tag: get_u32::<{ request_off::TAG }, N>(b),
            sector: get_u64::<{ request_off::SECTOR }, N>(b),
            length: get_u32::<{ request_off::LENGTH }, N>(b),
            data_crc: get_u32::<{ request_off::DATA_CRC }, N>(b),
            buf: RemoteBuf {
                addr: get_u64::<{ request_off::BUF_ADDR }, N>(b),
                rkey: get_u32::<{ request_off::BUF_RKEY }, N>(b),
                len: get_u32::<{ request_off::BUF_LEN }, N>(b),
            },
        })
    }

    /// Whether the write's data follows the request in its message
    /// ([`req_flags::INLINE`]).
    pub fn is_inline(&self) -> bool {
        self.flags & req_flags::INLINE != 0
    }

    /// The target's admission check, run before any data moves.
    ///
    /// Checks, in this order (the first failure wins):
    /// 1. unknown flag bits, or [`req_flags::INLINE`] on anything but a `Write`
    ///    or with a `buf` address or rkey → `Invalid`;
    /// 2. `Write`, `Discard`, `WriteZeroes` on a read-only export → `ReadOnly`;
    /// 3. `Flush`, `Nop`, `Close`: `length` must be 0 → else `Invalid`;
    ///    nothing more is checked (their `sector` and `buf` are ignored);
    /// 4. `length` must be non-zero, a multiple of 512 and at most
    ///    `max_io_bytes` (for `Discard`/`WriteZeroes` too, so the target
    ///    advertises `max_discard_sectors` within that) → else `Invalid`;
    /// 5. `Read`, `Write`: `buf.len` must equal `length` → else `Invalid`
    ///    (`buf` is ignored for the other operations);
    /// 6. `sector + length / 512` must not exceed `capacity_sectors`, with no
    ///    overflow → else `OutOfRange`.
    pub fn validate(
        &self,
        capacity_sectors: u64,
        max_io_bytes: u32,
        read_only: bool,
    ) -> Result<(), Status> {
        if self.flags & !req_flags::ALL != 0 {
            return Err(Status::Invalid);
        }
        if self.is_inline()
            && (self.opcode != Opcode::Write || self.buf.addr != 0 || self.buf.rkey != 0)
        {
            return Err(Status::Invalid);
        }
        if read_only && self.opcode.modifies() {
            return Err(Status::ReadOnly);
        }
        if matches!(self.opcode, Opcode::Flush | Opcode::Nop | Opcode::Close) {
            return if self.length == 0 {
                Ok(())
            } else {
                Err(Status::Invalid)
            };
        }
        if self.length == 0 || self.length % SECTOR_SIZE != 0 || self.length > max_io_bytes {
            return Err(Status::Invalid);
        }
        if self.opcode.has_data() && self.buf.len != self.length {
            return Err(Status::Invalid);
        }
        let sectors = u64::from(self.length >> SECTOR_SHIFT);
        match self.sector.checked_add(sectors) {
            Some(end) if end <= capacity_sectors => Ok(()),
            _ => Err(Status::OutOfRange),
        }
    }
}

/// The opcode byte of an [`AuthRequest`]; no [`Opcode`] has it.
pub const AUTH_OPCODE: u8 = 0x41;

/// A client's proof that it knows the key of the connection: the first
/// message on a connection whose [`HelloReply`] said [`features::AUTH`]. Its
/// opcode, credits and tag sit where a [`Request`]'s do, but it is longer
/// ([`AUTH_REQUEST_LEN`]); it carries the client's nonce, and the target
/// answers it with an [`AuthReply`] that proves the target's side: `Ok`, or
/// `Denied` and the connection closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthRequest {
    /// Response credits the client grants the target.
    pub credits: u16,
    /// Echoed in the reply.
    pub tag: u32,
    /// The client's fresh random nonce.
    pub nonce: [u8; CHALLENGE_LEN],
    /// `auth::proof` of the client's side.
    pub proof: [u8; 32],
}

impl AuthRequest {
    /// Writes the message, reserved bytes zeroed.
    pub fn encode(&self, out: &mut [u8; AUTH_REQUEST_LEN]) {
        const N: usize = AUTH_REQUEST_LEN;
        *out = [0; N];
        put_u8::<{ auth_off::OPCODE }, N>(out, AUTH_OPCODE);
        put_u16::<{ auth_off::CREDITS }, N>(out, self.credits);
        put_u32::<{ auth_off::TAG }, N>(out, self.tag);
        put::<{ auth_off::NONCE }, CHALLENGE_LEN, N>(out, self.nonce);
        put::<{ auth_off::PROOF }, 32, N>(out, self.proof);
    }

    /// Returns the encoded message.
    pub fn to_bytes(&self) -> [u8; AUTH_REQUEST_LEN] {
        let mut out = [0; AUTH_REQUEST_LEN];
        self.encode(&mut out);
        out
    }

    /// Parses a message; trailing bytes are ignored.
    pub fn decode(buf: &[u8]) -> Result<AuthRequest, DecodeError> {
        const N: usize = AUTH_REQUEST_LEN;
        let op = *buf.first().ok_or(DecodeError::Short)?;
        if op != AUTH_OPCODE {
            return Err(DecodeError::BadOpcode(op));
        }
        let b = fixed::<N>(buf)?;
        Ok(AuthRequest {
            credits: get_u16::<{ auth_off::CREDITS }, N>(b),
            tag: get_u32::<{ auth_off::TAG }, N>(b),
            nonce: get::<{ auth_off::NONCE }, CHALLENGE_LEN, N>(b),
            proof: get::<{ auth_off::PROOF }, 32, N>(b),
        })
    }
}

/// The target's answer to an [`AuthRequest`]: its status and, when `Ok` or `Fenced`,
/// the target's own proof, which the client checks before it sends anything else (or
/// believes the `Fenced`: a target with a key refuses a superseded session only here,
/// after both proofs, so that nobody without the key can tell a client it is superseded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthReply {
    /// The [`AuthRequest::tag`] answered.
    pub tag: u32,
    /// `Ok`; `Denied` (the client's proof is wrong); or `Fenced`: the Hello's session is
    /// not admitted (as a Hello refused `Stale`), the fence is at `session_floor`.
    pub status: Status,
    /// Request credits the target grants the client.
    pub credits: u16,
    /// The target's proof: `auth::proof` of its side when `Ok`, `auth::fenced_proof` when
    /// `Fenced`; zero when denied.
    pub proof: [u8; 32],
    /// With `Fenced`: the session the target's fence is at.
    pub session_floor: u32,
}

impl AuthReply {
    /// Writes the message, reserved bytes zeroed.
    pub fn encode(&self, out: &mut [u8; AUTH_REPLY_LEN]) {
        const N: usize = AUTH_REPLY_LEN;
        *out = [0; N];
        put_u32::<{ auth_reply_off::TAG }, N>(out, self.tag);
        put_u16::<{ auth_reply_off::STATUS }, N>(out, self.status as u16);
        put_u16::<{ auth_reply_off::CREDITS }, N>(out, self.credits);
        put::<{ auth_reply_off::PROOF }, 32, N>(out, self.proof);
        put_u32::<{ auth_reply_off::SESSION_FLOOR }, N>(out, self.session_floor);
    }

    /// Returns the encoded message.
    pub fn to_bytes(&self) -> [u8; AUTH_REPLY_LEN] {
        let mut out = [0; AUTH_REPLY_LEN];
        self.encode(&mut out);
        out
    }

    /// Parses a message; trailing bytes are ignored.
    pub fn decode(buf: &[u8]) -> Result<AuthReply, DecodeError> {
        const N: usize = AUTH_REPLY_LEN;
        let b = fixed::<N>(buf)?;
        Ok(AuthReply {
            tag: get_u32::<{ auth_reply_off::TAG }, N>(b),
            status: Status::try_from(get_u16::<{ auth_reply_off::STATUS }, N>(b))?,
            credits: get_u16::<{ auth_reply_off::CREDITS }, N>(b),
            proof: get::<{ auth_reply_off::PROOF }, 32, N>(b),
            session_floor: get_u32::<{ auth_reply_off::SESSION_FLOOR }, N>(b),
        })
    }
}

/// Any message a client sends after its Hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientMsg {
    Request(Request),
    Auth(AuthRequest),
}

impl ClientMsg {
    /// Parses a request or an authentication by its opcode byte.
    pub fn decode(buf: &[u8]) -> Result<ClientMsg, DecodeError> {
        match buf.first() {
            Some(&AUTH_OPCODE) => AuthRequest::decode(buf).map(ClientMsg::Auth),
            _ => Request::decode(buf).map(ClientMsg::Request),
        }
    }
}

/// Completion of one [`Request`], target to client. On RDMA it is sent with
/// Send-with-Invalidate of `rkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    /// Request id ([`ReqId`]) of the request answered.
    pub tag: u32,
    /// Outcome.
    pub status: Status,
    /// Request credits the target grants the client.
    pub credits: u16,
    /// CRC32C of the read data; 0 for other operations.
    pub data_crc: u32,
    /// Bytes transferred.
    pub length: u32,
    /// The rkey invalidated (or, on TCP, echoed), so the client can check the
    /// right region was fenced.
    pub rkey: u32,
    /// The export's capacity in sectors as the target sent this, with
    /// [`features::RESIZE`]; 0 otherwise.
    pub capacity_sectors: u64,
}

impl Response {
    /// Writes the message, reserved bytes zeroed.
    pub fn encode(&self, out: &mut [u8; RESPONSE_LEN]) {
        const N: usize = RESPONSE_LEN;
        *out = [0; N];
        put_u32::<{ response_off::TAG }, N>(out, self.tag);
        put_u16::<{ response_off::STATUS }, N>(out, self.status as u16);
        put_u16::<{ response_off::CREDITS }, N>(out, self.credits);
        put_u32::<{ response_off::DATA_CRC }, N>(out, self.data_crc);
        put_u32::<{ response_off::LENGTH }, N>(out, self.length);
        put_u32::<{ response_off::RKEY }, N>(out, self.rkey);
        put_u64::<{ response_off::CAPACITY_SECTORS }, N>(out, self.capacity_sectors);
    }

    /// Returns the encoded message.
    pub fn to_bytes(&self) -> [u8; RESPONSE_LEN] {
        let mut out = [0; RESPONSE_LEN];
        self.encode(&mut out);
        out
    }

    /// Parses a message; trailing bytes are ignored.
    pub fn decode(buf: &[u8]) -> Result<Response, DecodeError> {
        const N: usize = RESPONSE_LEN;
        let b = fixed::<N>(buf)?;
        Ok(Response {
            tag: get_u32::<{ response_off::TAG }, N>(b),
            status: Status::try_from(get_u16::<{ response_off::STATUS }, N>(b))?,
            credits: get_u16::<{ response_off::CREDITS }, N>(b),
            data_crc: get_u32::<{ response_off::DATA_CRC }, N>(b),
            length: get_u32::<{ response_off::LENGTH }, N>(b),
            rkey: get_u32::<{ response_off::RKEY }, N>(b),
            capacity_sectors: get_u64::<{ response_off::CAPACITY_SECTORS }, N>(b),
        })
    }
}

/// What a TCP frame carries after its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// A [`Hello`].
    Hello = 1,
    /// A [`HelloReply`], then its [`Identity`] ([`IDENTITY_LEN`] bytes of data) if it has
    /// [`features::IDENTITY`].
    HelloReply = 2,
    /// A [`Request`], then the write data if any.
    Request = 3,
    /// A [`Response`], then the read data if any.
    Response = 4,
    /// An [`AuthRequest`].
    Auth = 5,
    /// An [`AuthReply`].
    AuthReply = 6,
}

impl FrameKind {
    /// Length of the fixed message that follows the frame header.
    pub fn message_len(self) -> usize {
        match self {
            FrameKind::Hello => HELLO_LEN,
            FrameKind::HelloReply => HELLO_REPLY_LEN,
            FrameKind::Request => REQUEST_LEN,
            FrameKind::Response => RESPONSE_LEN,
            FrameKind::Auth => AUTH_REQUEST_LEN,
            FrameKind::AuthReply => AUTH_REPLY_LEN,
        }
    }
}

impl TryFrom<u8> for FrameKind {
    type Error = DecodeError;
    fn try_from(v: u8) -> Result<Self, DecodeError> {
        Ok(match v {
            1 => FrameKind::Hello,
            2 => FrameKind::HelloReply,
            3 => FrameKind::Request,
            4 => FrameKind::Response,
            5 => FrameKind::Auth,
            6 => FrameKind::AuthReply,
            _ => return Err(DecodeError::BadKind(v)),
        })
    }
}

/// Header of a TCP frame: the header, the fixed message of `kind`, then
/// `data_len` bytes of data. Receivers must bound `data_len` themselves (by
/// the negotiated `max_io_bytes`) before reading the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Message kind.
    pub kind: FrameKind,
    /// Flags, none defined yet; sent as zero.
    pub flags: u8,
    /// Bytes of data after the fixed message.
    pub data_len: u32,
}

impl FrameHeader {
    /// Writes the header.
    pub fn encode(&self, out: &mut [u8; FRAME_HEADER_LEN]) {
        const N: usize = FRAME_HEADER_LEN;
        put_u16::<{ frame_off::MAGIC }, N>(out, FRAME_MAGIC);
        put_u8::<{ frame_off::KIND }, N>(out, self.kind as u8);
        put_u8::<{ frame_off::FLAGS }, N>(out, self.flags);
        put_u32::<{ frame_off::DATA_LEN }, N>(out, self.data_len);
    }

    /// Returns the encoded header.
    pub fn to_bytes(&self) -> [u8; FRAME_HEADER_LEN] {
        let mut out = [0; FRAME_HEADER_LEN];
        self.encode(&mut out);
        out
    }

    /// Parses a header; trailing bytes are ignored.
    pub fn decode(buf: &[u8]) -> Result<FrameHeader, DecodeError> {
        const N: usize = FRAME_HEADER_LEN;
        let b = fixed::<N>(buf)?;
        if get_u16::<{ frame_off::MAGIC }, N>(b) != FRAME_MAGIC {
            return Err(DecodeError::BadMagic);
        }
        Ok(FrameHeader {
            kind: FrameKind::try_from(get_u8::<{ frame_off::KIND }, N>(b))?,
            flags: get_u8::<{ frame_off::FLAGS }, N>(b),
            data_len: get_u32::<{ frame_off::DATA_LEN }, N>(b),
        })
    }

    /// Bytes after the header: the fixed message plus the data, or `None` if
    /// that does not fit `usize`.
    pub fn body_len(&self) -> Option<usize> {
        usize::try_from(self.data_len)
            .ok()?
            .checked_add(self.kind.message_len())
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use proptest::prelude::*;

    fn name(s: &str) -> ExportName {
        ExportName::new(s.as_bytes()).unwrap()
    }

    fn hello() -> Hello {
        Hello {
            flags: 0,
            queue_id: 3,
            queue_count: 4,
            recv_credits: 128,
            caps: 0,
            session_id: 0x0102_0304,
            epoch: 0x0506_0708,
            export: name("vol-0"),
        }
    }

    fn identity() -> Identity {
        Identity {
            uuid: Uuid::parse("0123abcd-4567-89ef-0011-223344556677").unwrap(),
            serial: Serial::new(b"SN-0042").unwrap(),
        }
    }

    fn reply() -> HelloReply {
        HelloReply {
            status: HelloStatus::Ok,
            capacity_sectors: 1 << 21,
            logical_block_size: 512,
            physical_block_size: 4096,
            max_io_bytes: 1 << 20,
            max_segments: 256,
            queue_depth: 128,
            initial_credits: 64,
            features: features::FLUSH | features::DISCARD,
            max_discard_sectors: 2048,
            challenge: *b"0123456789abcdef",
            max_inline: 4096,
            session_floor: 0x0a0b_0c0d,
            identity: None,
        }
    }

    fn request(opcode: Opcode, sector: u64, length: u32) -> Request {
        Request {
            opcode,
            flags: 0,
            credits: 1,
            tag: 7,
            sector,
            length,
            data_crc: 0,
            buf: RemoteBuf {
                addr: 0x1000,
                rkey: 0x55,
                len: if opcode.has_data() { length } else { 0 },
            },
        }
    }

    fn response() -> Response {
        Response {
            tag: 0xdead_beef,
            status: Status::CrcMismatch,
            credits: 9,
            data_crc: 0x1234_5678,
            length: 4096,
            rkey: 0xabcd,
            capacity_sectors: 0x0102_0304_0506_0708,
        }
    }

    #[test]
    fn hello_layout_is_little_endian_at_documented_offsets() {
        let b = hello().to_bytes();
        assert_eq!(&b[0..4], &[0x4B, 0x53, 0x44, 0x52]);
        assert_eq!(&b[4..6], &[4, 0]);
        assert_eq!(&b[8..10], &[3, 0]);
        assert_eq!(&b[10..12], &[4, 0]);
        assert_eq!(&b[12..14], &[128, 0]);
        assert_eq!(&b[16..20], &[4, 3, 2, 1]);
        assert_eq!(&b[20..24], &[8, 7, 6, 5]);
        assert_eq!(&b[24..29], b"vol-0");
        assert!(b[29..].iter().all(|&c| c == 0));
        assert_eq!(Hello::decode(&b), Ok(hello()));
    }

    #[test]
    fn hello_decode_errors() {
        let good = hello().to_bytes();
        assert_eq!(
            Hello::decode(&good[..HELLO_LEN - 1]),
            Err(DecodeError::Short)
        );
        assert_eq!(Hello::decode(&[]), Err(DecodeError::Short));
        let mut b = good;
        b[0] ^= 1;
        assert_eq!(Hello::decode(&b), Err(DecodeError::BadMagic));
        let mut b = good;
        b[4] = 1;
        assert_eq!(Hello::decode(&b), Err(DecodeError::BadVersion));
        let mut b = good;
        b[24] = 0;
        assert_eq!(Hello::decode(&b), Err(DecodeError::BadExportName));
        let mut b = good;
        b[40] = b'x'; // garbage after the terminating NUL
        assert_eq!(Hello::decode(&b), Err(DecodeError::BadExportName));
        let mut b = good;
        b[25] = b'/';
        assert_eq!(Hello::decode(&b), Err(DecodeError::BadExportName));
        // Trailing bytes and reserved fields are ignored.
        let mut long = [0xffu8; HELLO_LEN + 8];
        long[..HELLO_LEN].copy_from_slice(&good);
        long[hello_off::CAPS] = 0;
        long[hello_off::CAPS + 1] = 0;
        assert_eq!(Hello::decode(&long), Ok(hello()));
        // Caps are carried whatever they are: a target ignores those it does not know.
        let caps = Hello {
            caps: 0x8001,
            ..hello()
        };
        let b = caps.to_bytes();
        assert_eq!(&b[14..16], &[1, 0x80]);
        assert_eq!(Hello::decode(&b), Ok(caps));
    }

    #[test]
    fn uuid_and_serial_text() {
        let u = identity().uuid;
        assert_eq!(
            u.0,
            [
                0x01, 0x23, 0xab, 0xcd, 0x45, 0x67, 0x89, 0xef, 0x00, 0x11, 0x22, 0x33, 0x44, 0x55,
                0x66, 0x77
            ]
        );
        assert_eq!(std::format!("{u}"), "0123abcd-4567-89ef-0011-223344556677");
        assert_eq!(Uuid::parse("0123ABCD-4567-89EF-0011-223344556677"), Some(u));
        for bad in [
            "",
            "0123abcd-4567-89ef-0011-22334455667",
            "0123abcd-4567-89ef-0011-2233445566778",
            "0123abcd+4567-89ef-0011-223344556677",
            "0123abcd-4567-89ef-0011-22334455667g",
            "00000000-0000-0000-0000-000000000000",
            "0123abcd4567-89ef-0011-2233445566778",
        ] {
            assert_eq!(Uuid::parse(bad), None, "{bad:?}");
        }
        assert_eq!(u.default_serial().as_str(), "0123abcd456789ef");
        assert_eq!(Serial::new(b""), Err(DecodeError::BadIdentity));
        assert_eq!(Serial::new(&[b'a'; 21]), Err(DecodeError::BadIdentity));
        assert_eq!(Serial::new(b"a/b"), Err(DecodeError::BadIdentity));
        assert_eq!(Serial::new(b"a b"), Err(DecodeError::BadIdentity));
        assert_eq!(
            Serial::new(&[b'Z'; 20]).unwrap().as_str(),
            "ZZZZZZZZZZZZZZZZZZZZ"
        );
        assert_eq!(std::format!("{}", identity().serial), "SN-0042");
    }

    #[test]
    fn hello_reply_with_identity() {
        let r = HelloReply {
            identity: Some(identity()),
            ..reply()
        };
        let e = r.to_bytes();
        let b = e.as_bytes();
        assert_eq!(b.len(), HELLO_REPLY_MAX_LEN);
        assert_eq!(e.fixed().len(), HELLO_REPLY_LEN);
        assert_eq!(e.tail().len(), IDENTITY_LEN);
        // The encoder sets the bit to match the identity.
        let feat = u32::from_le_bytes(b[36..40].try_into().unwrap());
        assert_eq!(
            feat,
            features::FLUSH | features::DISCARD | features::IDENTITY
        );
        assert_eq!(&b[72..88], &identity().uuid.0);
        assert_eq!(&b[88..95], b"SN-0042");
        assert!(b[95..].iter().all(|&c| c == 0));
        let back = HelloReply::decode(b).unwrap();
        assert_eq!(back.identity, Some(identity()));
        assert_eq!(back.features & !features::IDENTITY, reply().features);
        // Without its identity, a reply that says it has one is short.
        assert_eq!(HelloReply::decode(e.fixed()), Err(DecodeError::Short));
        assert_eq!(
            HelloReply::decode(&b[..HELLO_REPLY_MAX_LEN - 1]),
            Err(DecodeError::Short)
        );
        // A nil UUID, a bad serial, garbage after the serial's NUL.
        for (at, v) in [
            (72usize, None),
            (88, Some(0u8)),
            (89, Some(b'/')),
            (95 + 1, Some(b'x')),
        ] {
            let mut bad = [0u8; HELLO_REPLY_MAX_LEN];
            bad.copy_from_slice(b);
            match v {
                None => bad[72..88].fill(0),
                Some(v) => bad[at] = v,
            }
            assert_eq!(
                HelloReply::decode(&bad),
                Err(DecodeError::BadIdentity),
                "at {at}"
            );
        }
        // The reserved bytes after the serial are ignored.
        let mut res = [0u8; HELLO_REPLY_MAX_LEN];
        res.copy_from_slice(b);
        res[HELLO_REPLY_MAX_LEN - 1] = 0xff;
        assert_eq!(HelloReply::decode(&res), Ok(back));
        // No identity: the bit is cleared, the reply is the short one, and what an older
        // client reads (the first HELLO_REPLY_LEN bytes) is the same either way.
        let plain = HelloReply {
            features: reply().features | features::IDENTITY,
            ..reply()
        };
        let p = plain.to_bytes();
        assert_eq!(p.as_bytes().len(), HELLO_REPLY_LEN);
        assert!(p.tail().is_empty());
        assert_eq!(HelloReply::decode(p.as_bytes()), Ok(reply()));
        assert_eq!(&p.as_bytes()[..36], &b[..36]);
        assert_eq!(&p.as_bytes()[40..], &b[40..72]);
    }

    #[test]
    fn export_name_rules() {
        assert_eq!(ExportName::new(b""), Err(DecodeError::BadExportName));
        assert_eq!(
            ExportName::new(&[b'a'; 33]),
            Err(DecodeError::BadExportName)
        );
        assert_eq!(ExportName::new(b"a b"), Err(DecodeError::BadExportName));
        assert_eq!(ExportName::new(b"a\0"), Err(DecodeError::BadExportName));
        assert_eq!(
            ExportName::new(&[0xc3, 0xa9]),
            Err(DecodeError::BadExportName)
        );
        let full = ExportName::new(&[b'z'; 32]).unwrap();
        assert_eq!(full.as_bytes(), &[b'z'; 32]);
        assert_eq!(ExportName::from_padded(&full.to_padded()), Ok(full));
        let n = name("Az09._-");
        assert_eq!(n.as_str(), "Az09._-");
        assert_eq!(std::format!("{n}"), "Az09._-");
    }

    #[test]
    fn hello_reply_layout_and_errors() {
        let b: [u8; HELLO_REPLY_LEN] = reply().to_bytes().as_bytes().try_into().unwrap();
        assert_eq!(&b[0..4], &MAGIC.to_le_bytes());
        assert_eq!(&b[6..8], &[0, 0]);
        assert_eq!(&b[8..16], &(1u64 << 21).to_le_bytes());
        assert_eq!(&b[16..20], &512u32.to_le_bytes());
        assert_eq!(&b[20..24], &4096u32.to_le_bytes());
        assert_eq!(&b[24..28], &(1u32 << 20).to_le_bytes());
        assert_eq!(&b[28..30], &256u16.to_le_bytes());
        assert_eq!(&b[30..32], &128u16.to_le_bytes());
        assert_eq!(&b[32..34], &64u16.to_le_bytes());
        assert_eq!(&b[36..40], &5u32.to_le_bytes());
        assert_eq!(&b[40..44], &2048u32.to_le_bytes());
        assert_eq!(&b[44..60], b"0123456789abcdef");
        assert_eq!(&b[60..64], &4096u32.to_le_bytes());
        assert_eq!(&b[64..68], &0x0a0b_0c0du32.to_le_bytes());
        assert_eq!(&b[68..72], &[0; 4]);
        assert_eq!(HelloReply::decode(&b), Ok(reply()));

        assert_eq!(HelloReply::decode(&b[..71]), Err(DecodeError::Short));
        let mut bad = b;
        bad[3] = 0;
        assert_eq!(HelloReply::decode(&bad), Err(DecodeError::BadMagic));
        let mut bad = b;
        bad[5] = 1;
        assert_eq!(HelloReply::decode(&bad), Err(DecodeError::BadVersion));
        let mut bad = b;
        bad[6] = 7;
        assert_eq!(
            HelloReply::decode(&bad),
            Err(DecodeError::BadHelloStatus(7))
        );
        let r = HelloReply::rejected(HelloStatus::Busy);
        assert_eq!(HelloReply::decode(r.to_bytes().as_bytes()), Ok(r));
    }

    #[test]
    fn status_enums_round_trip() {
        for v in 0..=6u16 {
            assert_eq!(HelloStatus::try_from(v).map(|s| s as u16), Ok(v));
        }
        assert_eq!(
            HelloStatus::try_from(7),
            Err(DecodeError::BadHelloStatus(7))
        );
        for v in 0..=8u16 {
            assert_eq!(Status::try_from(v).map(|s| s as u16), Ok(v));
        }
        assert_eq!(Status::try_from(9), Err(DecodeError::BadStatus(9)));
        for v in 1..=7u8 {
            assert_eq!(Opcode::try_from(v).map(|o| o as u8), Ok(v));
        }
        assert_eq!(Opcode::try_from(0), Err(DecodeError::BadOpcode(0)));
        assert_eq!(Opcode::try_from(8), Err(DecodeError::BadOpcode(8)));
        for v in 1..=6u8 {
            assert_eq!(FrameKind::try_from(v).map(|k| k as u8), Ok(v));
        }
        assert_eq!(FrameKind::try_from(7), Err(DecodeError::BadKind(7)));
    }

    #[test]
    fn request_layout() {
        let r = Request {
            opcode: Opcode::Write,
            flags: req_flags::FUA,
            credits: 0x0201,
            tag: 0x0605_0403,
            sector: 0x0f0e_0d0c_0b0a_0908,
            length: 0x1000,
            data_crc: 0x1413_1211,
            buf: RemoteBuf {
                addr: 0x2221_201f_1e1d_1c1b,
                rkey: 0x2625_2423,
                len: 0x1000,
            },
        };
        let b = r.to_bytes();
        assert_eq!(b[0], 2);
        assert_eq!(b[1], 1);
        assert_eq!(&b[2..4], &[1, 2]);
        assert_eq!(&b[4..8], &[3, 4, 5, 6]);
        assert_eq!(&b[8..16], &[8, 9, 10, 11, 12, 13, 14, 15]);
        assert_eq!(&b[16..20], &[0, 0x10, 0, 0]);
        assert_eq!(&b[20..24], &[0x11, 0x12, 0x13, 0x14]);
        assert_eq!(
            &b[24..32],
            &[0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22]
        );
        assert_eq!(&b[32..36], &[0x23, 0x24, 0x25, 0x26]);
        assert_eq!(&b[36..40], &[0, 0x10, 0, 0]);
        assert_eq!(&b[40..48], &[0; 8]);
        assert_eq!(Request::decode(&b), Ok(r));
        assert_eq!(Request::decode(&b[..47]), Err(DecodeError::Short));
        let mut bad = b;
        bad[0] = 9;
        assert_eq!(Request::decode(&bad), Err(DecodeError::BadOpcode(9)));
        let mut reserved = b;
        reserved[47] = 0xff;
        assert_eq!(Request::decode(&reserved), Ok(r));
    }

    #[test]
    fn response_layout() {
        let b = response().to_bytes();
        assert_eq!(&b[0..4], &[0xef, 0xbe, 0xad, 0xde]);
        assert_eq!(&b[4..6], &[1, 0]);
        assert_eq!(&b[6..8], &[9, 0]);
        assert_eq!(&b[8..12], &[0x78, 0x56, 0x34, 0x12]);
        assert_eq!(&b[12..16], &[0, 0x10, 0, 0]);
        assert_eq!(&b[16..20], &[0xcd, 0xab, 0, 0]);
        assert_eq!(&b[20..24], &[0; 4]);
        assert_eq!(&b[24..32], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(Response::decode(&b), Ok(response()));
        assert_eq!(Response::decode(&b[..31]), Err(DecodeError::Short));
        let mut bad = b;
        bad[4] = 0xff;
        assert_eq!(Response::decode(&bad), Err(DecodeError::BadStatus(0xff)));
    }

    #[test]
    fn frame_header_layout() {
        let h = FrameHeader {
            kind: FrameKind::Response,
            flags: 0,
            data_len: 4096,
        };
        let b = h.to_bytes();
        assert_eq!(b, [0x44, 0x52, 4, 0, 0, 0x10, 0, 0]);
        assert_eq!(FrameHeader::decode(&b), Ok(h));
        assert_eq!(h.body_len(), Some(RESPONSE_LEN + 4096));
        assert_eq!(FrameHeader::decode(&b[..7]), Err(DecodeError::Short));
        let mut bad = b;
        bad[1] = 0;
        assert_eq!(FrameHeader::decode(&bad), Err(DecodeError::BadMagic));
        let mut bad = b;
        bad[2] = 0;
        assert_eq!(FrameHeader::decode(&bad), Err(DecodeError::BadKind(0)));
        assert_eq!(FrameKind::Hello.message_len(), HELLO_LEN);
        assert_eq!(FrameKind::HelloReply.message_len(), HELLO_REPLY_LEN);
        assert_eq!(FrameKind::Request.message_len(), REQUEST_LEN);
        assert_eq!(FrameKind::Response.message_len(), RESPONSE_LEN);
        assert_eq!(FrameKind::Auth.message_len(), AUTH_REQUEST_LEN);
        assert_eq!(FrameKind::AuthReply.message_len(), AUTH_REPLY_LEN);
    }

    #[test]
    fn auth_messages_layout() {
        let a = AuthRequest {
            credits: 0x0201,
            tag: 0x0605_0403,
            nonce: *b"0123456789abcdef",
            proof: [0x5a; 32],
        };
        let b = a.to_bytes();
        assert_eq!(b[0], AUTH_OPCODE);
        assert_eq!(b[1], 0);
        assert_eq!(&b[2..4], &[1, 2]);
        assert_eq!(&b[4..8], &[3, 4, 5, 6]);
        assert_eq!(&b[8..24], b"0123456789abcdef");
        assert_eq!(&b[24..56], &[0x5a; 32]);
        assert_eq!(&b[56..], &[0; 8]);
        assert_eq!(AuthRequest::decode(&b), Ok(a));
        assert_eq!(AuthRequest::decode(&b[..63]), Err(DecodeError::Short));
        assert_eq!(AuthRequest::decode(&[]), Err(DecodeError::Short));
        let r = AuthReply {
            tag: 0x0605_0403,
            status: Status::Denied,
            credits: 3,
            proof: [0xa5; 32],
            session_floor: 0x0d0c_0b0a,
        };
        let b = r.to_bytes();
        assert_eq!(&b[0..4], &[3, 4, 5, 6]);
        assert_eq!(&b[4..6], &[8, 0]);
        assert_eq!(&b[6..8], &[3, 0]);
        assert_eq!(&b[8..40], &[0xa5; 32]);
        assert_eq!(&b[40..44], &[0x0a, 0x0b, 0x0c, 0x0d]);
        assert_eq!(&b[44..], &[0; 20]);
        assert_eq!(AuthReply::decode(&b), Ok(r));
        assert_eq!(AuthReply::decode(&b[..63]), Err(DecodeError::Short));
        let mut bad = b;
        bad[4] = 0xff;
        assert_eq!(AuthReply::decode(&bad), Err(DecodeError::BadStatus(0xff)));
    }

    #[test]
    fn decode_error_display_and_hello_status() {
        let all = [
            DecodeError::Short,
            DecodeError::BadMagic,
            DecodeError::BadVersion,
            DecodeError::BadOpcode(9),
            DecodeError::BadStatus(9),
            DecodeError::BadHelloStatus(9),
            DecodeError::BadKind(9),
            DecodeError::BadExportName,
            DecodeError::BadIdentity,
        ];
        let texts: std::vec::Vec<std::string::String> =
            all.iter().map(|e| std::format!("{e}")).collect();
        for (i, t) in texts.iter().enumerate() {
            assert!(!t.is_empty());
            assert!(texts[..i].iter().all(|o| o != t), "duplicate text {t}");
        }
        assert_eq!(texts[3], "unknown opcode 9");
        assert_eq!(
            DecodeError::BadVersion.hello_status(),
            HelloStatus::BadVersion
        );
        assert_eq!(
            DecodeError::BadExportName.hello_status(),
            HelloStatus::NoSuchExport
        );
        assert_eq!(DecodeError::Short.hello_status(), HelloStatus::Invalid);
        assert_eq!(std::format!("{}", Status::ReadOnly), "read-only");
    }

    const CAP: u64 = 1000;
    const MAX_IO: u32 = 64 * 1024;

    #[test]
    fn validate_accepts_good_requests() {
        for op in [
            Opcode::Read,
            Opcode::Write,
            Opcode::Discard,
            Opcode::WriteZeroes,
        ] {
            assert_eq!(request(op, 0, 512).validate(CAP, MAX_IO, false), Ok(()));
            // Ends exactly at the last sector.
            assert_eq!(
                request(op, CAP - 8, 4096).validate(CAP, MAX_IO, false),
                Ok(())
            );
            assert_eq!(request(op, 0, MAX_IO).validate(CAP, MAX_IO, false), Ok(()));
        }
        for op in [Opcode::Flush, Opcode::Nop, Opcode::Close] {
            assert_eq!(request(op, 0, 0).validate(CAP, MAX_IO, false), Ok(()));
            // Sector and buf are ignored for these.
            let mut r = request(op, u64::MAX, 0);
            r.buf.len = 77;
            assert_eq!(r.validate(CAP, MAX_IO, true), Ok(()));
        }
        assert_eq!(
            request(Opcode::Read, 0, 512).validate(CAP, MAX_IO, true),
            Ok(())
        );
        let mut fua = request(Opcode::Write, 0, 512);
        fua.flags = req_flags::FUA;
        assert_eq!(fua.validate(CAP, MAX_IO, false), Ok(()));
        // Discard carries no buffer; whatever is there is ignored.
        let mut d = request(Opcode::Discard, 0, 512);
        d.buf.len = 1;
        assert_eq!(d.validate(CAP, MAX_IO, false), Ok(()));
        // An inline write names no remote buffer, only its length.
        let mut i = request(Opcode::Write, 0, 4096);
        i.flags = req_flags::INLINE | req_flags::FUA;
        i.buf = RemoteBuf {
            addr: 0,
            rkey: 0,
            len: 4096,
        };
        assert!(i.is_inline());
        assert_eq!(i.validate(CAP, MAX_IO, false), Ok(()));
    }

    #[test]
    fn validate_rejects_inline_but_on_a_write_without_a_buffer() {
        let inline = |op| {
            let mut r = request(op, 0, 512);
            r.flags = req_flags::INLINE;
            r.buf = RemoteBuf {
                addr: 0,
                rkey: 0,
                len: 512,
            };
            r
        };
        for op in [
            Opcode::Read,
            Opcode::Discard,
            Opcode::WriteZeroes,
            Opcode::Flush,
            Opcode::Nop,
        ] {
            let mut r = inline(op);
            if !op.has_data() {
                r.length = 0;
            }
            assert_eq!(
                r.validate(CAP, MAX_IO, false),
                Err(Status::Invalid),
                "{op:?}"
            );
        }
        let mut r = inline(Opcode::Write);
        r.buf.rkey = 0x1234;
        assert_eq!(r.validate(CAP, MAX_IO, false), Err(Status::Invalid));
        let mut r = inline(Opcode::Write);
        r.buf.addr = 0x1000;
        assert_eq!(r.validate(CAP, MAX_IO, false), Err(Status::Invalid));
        let mut r = inline(Opcode::Write);
        r.buf.len = 1024;
        assert_eq!(r.validate(CAP, MAX_IO, false), Err(Status::Invalid));
    }

    #[test]
    fn validate_rejects_each_rule() {
        let mut r = request(Opcode::Read, 0, 512);
        r.flags = 0x80;
        assert_eq!(r.validate(CAP, MAX_IO, false), Err(Status::Invalid));

        for op in [Opcode::Write, Opcode::Discard, Opcode::WriteZeroes] {
            assert_eq!(
                request(op, 0, 512).validate(CAP, MAX_IO, true),
                Err(Status::ReadOnly)
            );
        }
        for op in [Opcode::Flush, Opcode::Nop, Opcode::Close] {
            assert_eq!(
                request(op, 0, 512).validate(CAP, MAX_IO, false),
                Err(Status::Invalid)
            );
        }
        for op in [
            Opcode::Read,
            Opcode::Write,
            Opcode::Discard,
            Opcode::WriteZeroes,
        ] {
            let v = |r: Request| r.validate(CAP, MAX_IO, false);
            assert_eq!(v(request(op, 0, 0)), Err(Status::Invalid), "{op:?} zero");
            assert_eq!(
                v(request(op, 0, 513)),
                Err(Status::Invalid),
                "{op:?} unaligned"
            );
            assert_eq!(v(request(op, 0, 100)), Err(Status::Invalid), "{op:?} short");
            assert_eq!(
                v(request(op, 0, MAX_IO + 512)),
                Err(Status::Invalid),
                "{op:?} too long"
            );
            assert_eq!(
                v(request(op, CAP, 512)),
                Err(Status::OutOfRange),
                "{op:?} past end"
            );
            assert_eq!(
                v(request(op, CAP - 7, 4096)),
                Err(Status::OutOfRange),
                "{op:?} straddles end"
            );
            assert_eq!(
                v(request(op, u64::MAX, 512)),
                Err(Status::OutOfRange),
                "{op:?} overflow"
            );
            assert_eq!(
                request(op, u64::MAX - 1, 4096).validate(u64::MAX, MAX_IO, false),
                Err(Status::OutOfRange),
                "{op:?} overflow at max capacity"
            );
        }
        for op in [Opcode::Read, Opcode::Write] {
            let mut r = request(op, 0, 4096);
            r.buf.len = 512;
            assert_eq!(r.validate(CAP, MAX_IO, false), Err(Status::Invalid));
            r.buf.len = 8192;
            assert_eq!(r.validate(CAP, MAX_IO, false), Err(Status::Invalid));
        }
        // Read-only wins over a malformed length.
        assert_eq!(
            request(Opcode::Write, 0, 3).validate(CAP, MAX_IO, true),
            Err(Status::ReadOnly)
        );
        // The last sector of a u64::MAX export is reachable without overflow.
        assert_eq!(
            request(Opcode::Read, u64::MAX - 1, 512).validate(u64::MAX, MAX_IO, false),
            Ok(())
        );
    }

    fn arb_name() -> impl Strategy<Value = ExportName> {
        proptest::collection::vec(
            prop_oneof![
                proptest::char::range('a', 'z'),
                proptest::char::range('A', 'Z'),
                proptest::char::range('0', '9'),
                Just('.'),
                Just('_'),
                Just('-')
            ],
            1..=EXPORT_NAME_MAX,
        )
        .prop_map(|cs| {
            let bytes: std::vec::Vec<u8> = cs.into_iter().map(|c| c as u8).collect();
            ExportName::new(&bytes).unwrap()
        })
    }

    fn arb_opcode() -> impl Strategy<Value = Opcode> {
        (1u8..=7).prop_map(|v| Opcode::try_from(v).unwrap())
    }

    proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = Hello::decode(&bytes);
            let _ = HelloReply::decode(&bytes);
            let _ = Identity::decode(&bytes);
            let _ = Request::decode(&bytes);
            let _ = Response::decode(&bytes);
            let _ = AuthRequest::decode(&bytes);
            let _ = AuthReply::decode(&bytes);
            let _ = ClientMsg::decode(&bytes);
            let _ = FrameHeader::decode(&bytes);
        }

        #[test]
        fn decoded_requests_reencode_canonically(mut bytes in proptest::array::uniform32(any::<u8>()), tail in proptest::array::uniform16(any::<u8>())) {
            bytes[0] = bytes[0] % 7 + 1;
            let mut b = [0u8; REQUEST_LEN];
            b[..32].copy_from_slice(&bytes);
            b[32..].copy_from_slice(&tail);
            let r = Request::decode(&b).unwrap();
            let again = r.to_bytes();
            prop_assert_eq!(&again[..40], &b[..40]);
            prop_assert_eq!(Request::decode(&again), Ok(r));
        }

        #[test]
        fn hello_round_trips(flags in any::<u16>(), queue_id in any::<u16>(), queue_count in any::<u16>(),
                             recv_credits in any::<u16>(), session_id in any::<u32>(), epoch in any::<u32>(), export in arb_name()) {
            let h = Hello { flags, queue_id, queue_count, recv_credits, caps: flags ^ queue_id, session_id, epoch, export };
            prop_assert_eq!(Hello::decode(&h.to_bytes()), Ok(h));
        }

        #[test]
        fn request_round_trips(opcode in arb_opcode(), flags in any::<u8>(), credits in any::<u16>(), tag in any::<u32>(),
                               sector in any::<u64>(), length in any::<u32>(), data_crc in any::<u32>(),
                               addr in any::<u64>(), rkey in any::<u32>(), len in any::<u32>()) {
            let r = Request { opcode, flags, credits, tag, sector, length, data_crc, buf: RemoteBuf { addr, rkey, len } };
            prop_assert_eq!(Request::decode(&r.to_bytes()), Ok(r));
            // validate never panics, and accepts only in-range requests.
            if r.validate(CAP, MAX_IO, false).is_ok() && opcode.has_data() {
                prop_assert!(sector + u64::from(length / 512) <= CAP);
            }
        }

        #[test]
        fn response_round_trips(tag in any::<u32>(), status in 0u16..=8, credits in any::<u16>(),
                                data_crc in any::<u32>(), length in any::<u32>(), rkey in any::<u32>(),
                                capacity_sectors in any::<u64>()) {
            let r = Response { tag, status: Status::try_from(status).unwrap(), credits, data_crc, length, rkey,
                               capacity_sectors };
            prop_assert_eq!(Response::decode(&r.to_bytes()), Ok(r));
        }

        #[test]
        fn hello_reply_round_trips(status in 0u16..=6, capacity_sectors in any::<u64>(), lbs in any::<u32>(),
                                   pbs in any::<u32>(), max_io_bytes in any::<u32>(), max_segments in any::<u16>(),
                                   queue_depth in any::<u16>(), initial_credits in any::<u16>(),
                                   features in any::<u32>(), max_discard_sectors in any::<u32>(),
                                   challenge in any::<[u8; CHALLENGE_LEN]>(), max_inline in any::<u32>(),
                                   session_floor in any::<u32>(), uuid in any::<[u8; UUID_LEN]>(),
                                   serial in arb_name(), with_id in any::<bool>()) {
            let identity = (with_id && uuid != [0; UUID_LEN]).then(|| Identity {
                uuid: Uuid(uuid),
                serial: Serial::new(&serial.as_bytes()[..serial.as_bytes().len().min(SERIAL_MAX)]).unwrap(),
            });
            let features = match identity {
                Some(_) => features | features::IDENTITY,
                None => features & !features::IDENTITY,
            };
            let r = HelloReply {
                status: HelloStatus::try_from(status).unwrap(), capacity_sectors,
                logical_block_size: lbs, physical_block_size: pbs, max_io_bytes, max_segments,
                queue_depth, initial_credits, features, max_discard_sectors, challenge, max_inline,
                session_floor, identity,
            };
            let e = r.to_bytes();
            prop_assert_eq!(HelloReply::decode(e.as_bytes()), Ok(r));
            prop_assert_eq!(e.as_bytes().len(), if identity.is_some() { HELLO_REPLY_MAX_LEN } else { HELLO_REPLY_LEN });
            prop_assert_eq!(Identity::decode(e.tail()).ok(), identity);
        }

        #[test]
        fn client_messages_round_trip(credits in any::<u16>(), tag in any::<u32>(), proof in any::<[u8; 32]>(),
                                      nonce in any::<[u8; CHALLENGE_LEN]>(), opcode in arb_opcode(), sector in any::<u64>(),
                                      session_floor in any::<u32>()) {
            let a = AuthRequest { credits, tag, nonce, proof };
            let reply = AuthReply { tag, status: Status::Fenced, credits, proof, session_floor };
            prop_assert_eq!(AuthReply::decode(&reply.to_bytes()), Ok(reply));
            prop_assert_eq!(ClientMsg::decode(&a.to_bytes()), Ok(ClientMsg::Auth(a)));
            let r = Request { opcode, flags: 0, credits, tag, sector, length: 0, data_crc: 0, buf: RemoteBuf::default() };
            prop_assert_eq!(ClientMsg::decode(&r.to_bytes()), Ok(ClientMsg::Request(r)));
            // Neither decoder takes the other's message.
            prop_assert!(Request::decode(&a.to_bytes()).is_err());
            prop_assert!(AuthRequest::decode(&r.to_bytes()).is_err());
        }

        #[test]
        fn frame_header_round_trips(kind in 1u8..=6, flags in any::<u8>(), data_len in any::<u32>()) {
            let h = FrameHeader { kind: FrameKind::try_from(kind).unwrap(), flags, data_len };
            prop_assert_eq!(FrameHeader::decode(&h.to_bytes()), Ok(h));
        }
    }
}
