//! Generates `include/rdmadisk_wire.h`, the C view of [`super::wire`], and
//! checks the committed copy for drift. `RDMADISK_BLESS=1 cargo test -p
//! rdmadisk-proto` rewrites it.

extern crate std;

use super::wire::{self, features, req_flags};
use std::fmt::Write as _;
use std::string::String;

/// Path of the committed header, relative to this crate.
const HEADER_REL: &str = "../../include/rdmadisk_wire.h";

/// The header in the checkout under test. The crate's directory is taken when the test runs
/// (cargo sets it then too): a test binary that cargo reuses from a build in another checkout
/// of the same sources (the shared build directory) must not read that checkout's header.
fn header_path() -> std::path::PathBuf {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
        || env!("CARGO_MANIFEST_DIR").into(),
        std::path::PathBuf::from,
    );
    dir.join(HEADER_REL)
}

type Fields<'a> = &'a [(&'a str, usize, &'a str)];

fn define(out: &mut String, name: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "#define {name:<40} {value}");
}

/// One message: its length and offsets, a C struct with `__le` fields, and
/// static assertions tying the struct to the offsets.
fn message(out: &mut String, prefix: &str, sname: &str, len: usize, fields: Fields<'_>) {
    let _ = writeln!(out);
    define(out, &std::format!("RDMADISK_{prefix}_LEN"), len);
    for (name, off, _) in fields {
        define(
            out,
            &std::format!("RDMADISK_{prefix}_OFF_{}", name.to_uppercase()),
            off,
        );
    }
    let _ = writeln!(out, "\nstruct {sname} {{");
    for (name, _, ctype) in fields {
        match ctype.split_once('[') {
            Some((t, dim)) => {
                let _ = writeln!(out, "\t{t} {name}[{dim};");
            }
            None => {
                let _ = writeln!(out, "\t{ctype} {name};");
            }
        }
    }
    let _ = writeln!(out, "}};");
    let _ = writeln!(
        out,
        "_Static_assert(sizeof(struct {sname}) == RDMADISK_{prefix}_LEN, \"{sname} size\");"
    );
    for (name, _, _) in fields {
        let _ = writeln!(
            out,
            "_Static_assert(offsetof(struct {sname}, {name}) == RDMADISK_{prefix}_OFF_{}, \"{sname}.{name}\");",
            name.to_uppercase()
        );
    }
}

/// Renders the header from the Rust constants.
pub(crate) fn render() -> String {
    use wire::{
        auth_off as au, auth_reply_off as ar, frame_off as f, hello_flags, hello_off as h,
        hello_reply_off as hr, identity_off as id, request_off as rq, response_off as rs,
    };
    let mut o = String::new();
    o.push_str(
        "/* SPDX-License-Identifier: GPL-2.0 */\n\
         /*\n\
         \x20* rdmadisk wire format, C view.\n\
         \x20*\n\
         \x20* GENERATED from userspace-tools/rdmadisk-proto/src/wire.rs, DO NOT EDIT.\n\
         \x20* Regenerate with: RDMADISK_BLESS=1 cargo test -p rdmadisk-proto\n\
         \x20*\n\
         \x20* All fields are little-endian. Reserved bytes are sent as zero and\n\
         \x20* ignored on receipt.\n\
         \x20*/\n\
         #ifndef RDMADISK_WIRE_H\n\
         #define RDMADISK_WIRE_H\n\
         \n\
         #include <linux/types.h>\n\
         #ifdef __KERNEL__\n\
         #include <linux/stddef.h>\n\
         #else\n\
         #include <stddef.h>\n\
         #endif\n\n",
    );
    define(
        &mut o,
        "RDMADISK_MAGIC",
        std::format!("0x{:08X}U", wire::MAGIC),
    );
    define(&mut o, "RDMADISK_VERSION", wire::VERSION);
    define(&mut o, "RDMADISK_EXPORT_NAME_MAX", wire::EXPORT_NAME_MAX);
    define(&mut o, "RDMADISK_SECTOR_SHIFT", wire::SECTOR_SHIFT);
    define(&mut o, "RDMADISK_SECTOR_SIZE", wire::SECTOR_SIZE);
    define(
        &mut o,
        "RDMADISK_FRAME_MAGIC",
        std::format!("0x{:04X}U", wire::FRAME_MAGIC),
    );

    let _ = writeln!(o, "\n/* Opcode (request.opcode) */");
    for op in [
        wire::Opcode::Read,
        wire::Opcode::Write,
        wire::Opcode::Flush,
        wire::Opcode::Discard,
        wire::Opcode::WriteZeroes,
        wire::Opcode::Nop,
        wire::Opcode::Close,
    ] {
        let name = std::format!("RDMADISK_OP_{}", snake_upper(&std::format!("{op:?}")));
        define(&mut o, &name, op as u8);
    }
    define(
        &mut o,
        "RDMADISK_OP_AUTH",
        std::format!("0x{:02X}", wire::AUTH_OPCODE),
    );
    let _ = writeln!(o, "\n/* Request flags (request.flags) */");
    define(&mut o, "RDMADISK_REQ_FUA", req_flags::FUA);
    define(&mut o, "RDMADISK_REQ_INLINE", req_flags::INLINE);

    let _ = writeln!(o, "\n/* Status (response.status) */");
    for s in [
        wire::Status::Ok,
        wire::Status::CrcMismatch,
        wire::Status::OutOfRange,
        wire::Status::ReadOnly,
        wire::Status::IoError,
        wire::Status::Unsupported,
        wire::Status::Invalid,
        wire::Status::Fenced,
        wire::Status::Denied,
    ] {
        let name = std::format!("RDMADISK_STATUS_{}", snake_upper(&std::format!("{s:?}")));
        define(&mut o, &name, s as u16);
    }
    let _ = writeln!(o, "\n/* Hello status (hello_reply.status) */");
    for s in [
        wire::HelloStatus::Ok,
        wire::HelloStatus::BadVersion,
        wire::HelloStatus::NoSuchExport,
        wire::HelloStatus::NotAllowed,
        wire::HelloStatus::Busy,
        wire::HelloStatus::Invalid,
        wire::HelloStatus::Stale,
    ] {
        let name = std::format!(
            "RDMADISK_HELLO_STATUS_{}",
            snake_upper(&std::format!("{s:?}"))
        );
        define(&mut o, &name, s as u16);
    }
    let _ = writeln!(o, "\n/* Feature bits (hello_reply.features) */");
    for (name, bit) in [
        ("FLUSH", features::FLUSH),
        ("FUA", features::FUA),
        ("DISCARD", features::DISCARD),
        ("WRITE_ZEROES", features::WRITE_ZEROES),
        ("READ_ONLY", features::READ_ONLY),
        ("AUTH", features::AUTH),
        ("RESIZE", features::RESIZE),
        ("IDENTITY", features::IDENTITY),
    ] {
        define(
            &mut o,
            &std::format!("RDMADISK_FEAT_{name}"),
            std::format!("0x{bit:X}U"),
        );
    }
    let _ = writeln!(o, "\n/* Hello flags (hello.flags) */");
    define(
        &mut o,
        "RDMADISK_HELLO_READ_ONLY",
        std::format!("0x{:X}U", hello_flags::READ_ONLY),
    );
    define(
        &mut o,
        "RDMADISK_HELLO_NEW_SESSION",
        std::format!("0x{:X}U", hello_flags::NEW_SESSION),
    );
    let _ = writeln!(o, "\n/* Hello caps (hello.caps) */");
    define(
        &mut o,
        "RDMADISK_HELLO_CAP_IDENTITY",
        std::format!("0x{:X}U", wire::hello_caps::IDENTITY),
    );
    define(&mut o, "RDMADISK_CHALLENGE_LEN", wire::CHALLENGE_LEN);
    let _ = writeln!(o, "\n/* TCP frame kinds (frame_header.kind) */");
    for k in [
        wire::FrameKind::Hello,
        wire::FrameKind::HelloReply,
        wire::FrameKind::Request,
        wire::FrameKind::Response,
        wire::FrameKind::Auth,
        wire::FrameKind::AuthReply,
    ] {
        let name = std::format!("RDMADISK_FRAME_{}", snake_upper(&std::format!("{k:?}")));
        define(&mut o, &name, k as u8);
    }

    let name_ty = std::format!("__u8[{}]", wire::EXPORT_NAME_MAX);
    message(
        &mut o,
        "HELLO",
        "rdmadisk_hello",
        wire::HELLO_LEN,
        &[
            ("magic", h::MAGIC, "__le32"),
            ("version", h::VERSION, "__le16"),
            ("flags", h::FLAGS, "__le16"),
            ("queue_id", h::QUEUE_ID, "__le16"),
            ("queue_count", h::QUEUE_COUNT, "__le16"),
            ("recv_credits", h::RECV_CREDITS, "__le16"),
            ("caps", h::CAPS, "__le16"),
            ("session_id", h::SESSION_ID, "__le32"),
            ("epoch", h::EPOCH, "__le32"),
            ("export_name", h::EXPORT_NAME, &name_ty),
        ],
    );
    let challenge = std::format!("__u8[{}]", wire::CHALLENGE_LEN);
    message(
        &mut o,
        "HELLO_REPLY",
        "rdmadisk_hello_reply",
        wire::HELLO_REPLY_LEN,
        &[
            ("magic", hr::MAGIC, "__le32"),
            ("version", hr::VERSION, "__le16"),
            ("status", hr::STATUS, "__le16"),
            ("capacity_sectors", hr::CAPACITY_SECTORS, "__le64"),
            ("logical_block_size", hr::LOGICAL_BLOCK_SIZE, "__le32"),
            ("physical_block_size", hr::PHYSICAL_BLOCK_SIZE, "__le32"),
            ("max_io_bytes", hr::MAX_IO_BYTES, "__le32"),
            ("max_segments", hr::MAX_SEGMENTS, "__le16"),
            ("queue_depth", hr::QUEUE_DEPTH, "__le16"),
            ("initial_credits", hr::INITIAL_CREDITS, "__le16"),
            ("reserved0", hr::RESERVED0, "__le16"),
            ("features", hr::FEATURES, "__le32"),
            ("max_discard_sectors", hr::MAX_DISCARD_SECTORS, "__le32"),
            ("challenge", hr::CHALLENGE, &challenge),
            ("max_inline", hr::MAX_INLINE, "__le32"),
            ("session_floor", hr::SESSION_FLOOR, "__le32"),
            ("reserved1", hr::RESERVED1, "__le32"),
        ],
    );
    message(
        &mut o,
        "IDENTITY",
        "rdmadisk_identity",
        wire::IDENTITY_LEN,
        &[
            ("uuid", id::UUID, &std::format!("__u8[{}]", wire::UUID_LEN)),
            (
                "serial",
                id::SERIAL,
                &std::format!("__u8[{}]", wire::SERIAL_MAX),
            ),
            (
                "reserved",
                id::RESERVED,
                &std::format!("__u8[{}]", wire::IDENTITY_LEN - id::RESERVED),
            ),
        ],
    );
    let req_reserved = std::format!("__u8[{}]", wire::REQUEST_LEN - rq::RESERVED);
    message(
        &mut o,
        "REQUEST",
        "rdmadisk_request",
        wire::REQUEST_LEN,
        &[
            ("opcode", rq::OPCODE, "__u8"),
            ("flags", rq::FLAGS, "__u8"),
            ("credits", rq::CREDITS, "__le16"),
            ("tag", rq::TAG, "__le32"),
            ("sector", rq::SECTOR, "__le64"),
            ("length", rq::LENGTH, "__le32"),
            ("data_crc", rq::DATA_CRC, "__le32"),
            ("buf_addr", rq::BUF_ADDR, "__le64"),
            ("buf_rkey", rq::BUF_RKEY, "__le32"),
            ("buf_len", rq::BUF_LEN, "__le32"),
            ("reserved", rq::RESERVED, &req_reserved),
        ],
    );
    let auth_reserved = std::format!("__u8[{}]", wire::AUTH_REQUEST_LEN - au::RESERVED);
    message(
        &mut o,
        "AUTH",
        "rdmadisk_auth",
        wire::AUTH_REQUEST_LEN,
        &[
            ("opcode", au::OPCODE, "__u8"),
            ("flags", au::FLAGS, "__u8"),
            ("credits", au::CREDITS, "__le16"),
            ("tag", au::TAG, "__le32"),
            ("nonce", au::NONCE, &challenge),
            ("proof", au::PROOF, "__u8[32]"),
            ("reserved", au::RESERVED, &auth_reserved),
        ],
    );
    let auth_reply_reserved = std::format!("__u8[{}]", wire::AUTH_REPLY_LEN - ar::RESERVED);
    message(
        &mut o,
        "AUTH_REPLY",
        "rdmadisk_auth_reply",
        wire::AUTH_REPLY_LEN,
        &[
            ("tag", ar::TAG, "__le32"),
            ("status", ar::STATUS, "__le16"),
            ("credits", ar::CREDITS, "__le16"),
            ("proof", ar::PROOF, "__u8[32]"),
            ("session_floor", ar::SESSION_FLOOR, "__le32"),
            ("reserved", ar::RESERVED, &auth_reply_reserved),
        ],
    );
    message(
        &mut o,
        "RESPONSE",
        "rdmadisk_response",
        wire::RESPONSE_LEN,
        &[
            ("tag", rs::TAG, "__le32"),
            ("status", rs::STATUS, "__le16"),
            ("credits", rs::CREDITS, "__le16"),
            ("data_crc", rs::DATA_CRC, "__le32"),
            ("length", rs::LENGTH, "__le32"),
            ("rkey", rs::RKEY, "__le32"),
            ("reserved", rs::RESERVED, "__le32"),
            ("capacity_sectors", rs::CAPACITY_SECTORS, "__le64"),
        ],
    );
    message(
        &mut o,
        "FRAME_HEADER",
        "rdmadisk_frame_header",
        wire::FRAME_HEADER_LEN,
        &[
            ("magic", f::MAGIC, "__le16"),
            ("kind", f::KIND, "__u8"),
            ("flags", f::FLAGS, "__u8"),
            ("data_len", f::DATA_LEN, "__le32"),
        ],
    );
    o.push_str("\n#endif /* RDMADISK_WIRE_H */\n");
    o
}

/// `WriteZeroes` -> `WRITE_ZEROES`.
fn snake_upper(camel: &str) -> String {
    let mut s = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            s.push('_');
        }
        s.push(c.to_ascii_uppercase());
    }
    s
}

#[test]
fn c_header_matches_rust() {
    let want = render();
    let path = header_path();
    if std::env::var_os("RDMADISK_BLESS").is_some() {
        std::fs::write(&path, &want).expect("write header");
        return;
    }
    let have = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    assert!(
        have == want,
        "{} is stale; regenerate with RDMADISK_BLESS=1 cargo test -p rdmadisk-proto",
        path.display()
    );
}

/// Compiles the rendered header when a C compiler is around, so the
/// `_Static_assert`s are actually checked.
#[test]
fn c_header_compiles() {
    let dir = std::env::temp_dir().join(std::format!("rdmadisk-wire-h-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let hdr = dir.join("rdmadisk_wire.h");
    std::fs::write(&hdr, render()).expect("write");
    let src = dir.join("t.c");
    std::fs::write(
        &src,
        "#include \"rdmadisk_wire.h\"\nint main(void) { return 0; }\n",
    )
    .expect("write");
    let status = std::process::Command::new("cc")
        .args(["-std=c11", "-Wall", "-Werror", "-fsyntax-only"])
        .arg(&src)
        .status();
    let _ = std::fs::remove_dir_all(&dir);
    match status {
        Ok(s) => assert!(s.success(), "generated header does not compile"),
        Err(e) => std::eprintln!("skipping: no C compiler ({e})"),
    }
}
