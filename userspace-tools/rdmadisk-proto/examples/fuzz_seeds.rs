//! Writes the fuzz seed corpus (valid encodings) to `fuzz/seeds/<target>/`.
//!
//! `cargo run -p rdmadisk-proto --example fuzz_seeds` regenerates it; the
//! seeds give libFuzzer valid messages to mutate from, so it reaches the
//! checks past the magic and enum decoding at once.

use rdmadisk_proto::wire::{
    features, req_flags, AuthReply, AuthRequest, ExportName, FrameHeader, FrameKind, Hello,
    HelloReply, HelloStatus, Identity, Opcode, RemoteBuf, Request, Response, Serial, Status, Uuid,
};
use std::path::{Path, PathBuf};

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) {
    let d = dir.join(target);
    std::fs::create_dir_all(&d).expect("create seed dir");
    std::fs::write(d.join(name), bytes).expect("write seed");
}

fn main() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");

    let hello = Hello {
        flags: 0,
        queue_id: 1,
        queue_count: 4,
        recv_credits: 128,
        caps: 0,
        session_id: 0x1122_3344,
        epoch: 0x5566_7788,
        export: ExportName::new(b"vol0").expect("valid name"),
    };
    write(&dir, "hello", "basic", &hello.to_bytes());
    let long = Hello {
        export: ExportName::new(b"export-name_with.32.characters_x").expect("valid name"),
        ..hello
    };
    write(&dir, "hello", "long_name", &long.to_bytes());

    let reply = HelloReply {
        status: HelloStatus::Ok,
        capacity_sectors: 1 << 30,
        logical_block_size: 512,
        physical_block_size: 4096,
        max_io_bytes: 1 << 20,
        max_segments: 256,
        queue_depth: 128,
        initial_credits: 128,
        features: features::FLUSH | features::FUA | features::DISCARD | features::WRITE_ZEROES,
        max_discard_sectors: 2048,
        challenge: [0; rdmadisk_proto::wire::CHALLENGE_LEN],
        max_inline: 4096,
        session_floor: 0,
        identity: None,
    };
    write(&dir, "hello_reply", "ok", reply.to_bytes().as_bytes());
    let with_id = HelloReply {
        identity: Some(Identity {
            uuid: Uuid::parse("0123abcd-4567-89ef-0011-223344556677").expect("valid uuid"),
            serial: Serial::new(b"SN-0042").expect("valid serial"),
        }),
        ..reply
    };
    write(
        &dir,
        "hello_reply",
        "identity",
        with_id.to_bytes().as_bytes(),
    );
    let stale = HelloReply {
        session_floor: 41,
        ..HelloReply::rejected(HelloStatus::Stale)
    };
    write(&dir, "hello_reply", "stale", stale.to_bytes().as_bytes());

    let auth = AuthRequest {
        credits: 1,
        tag: 32,
        nonce: *b"client-nonce-16b",
        proof: [0x5a; 32],
    };
    write(&dir, "auth", "authreq", &auth.to_bytes());
    let auth_reply = AuthReply {
        tag: 32,
        status: Status::Ok,
        credits: 1,
        proof: [0xa5; 32],
        session_floor: 0,
    };
    write(&dir, "auth", "authreply", &auth_reply.to_bytes());
    let fenced = AuthReply {
        status: Status::Fenced,
        session_floor: 7,
        ..auth_reply
    };
    write(&dir, "auth", "authreply-fenced", &fenced.to_bytes());
    write(
        &dir,
        "hello_reply",
        "busy",
        HelloReply::rejected(HelloStatus::Busy)
            .to_bytes()
            .as_bytes(),
    );

    // Limits after the request: capacity u64, max_io u32, read-only bit.
    let mut limits = Vec::new();
    limits.extend_from_slice(&(1u64 << 21).to_le_bytes());
    limits.extend_from_slice(&(1u32 << 20).to_le_bytes());
    limits.push(0);
    for (i, op) in [
        Opcode::Read,
        Opcode::Write,
        Opcode::Flush,
        Opcode::Discard,
        Opcode::WriteZeroes,
        Opcode::Nop,
    ]
    .into_iter()
    .enumerate()
    {
        let length = if matches!(op, Opcode::Flush | Opcode::Nop) {
            0
        } else {
            4096
        };
        let req = Request {
            opcode: op,
            flags: if op == Opcode::Write {
                req_flags::FUA
            } else {
                0
            },
            credits: 2,
            tag: i as u32,
            sector: 8,
            length,
            data_crc: 0,
            buf: RemoteBuf {
                addr: 0x7f00_0000_1000,
                rkey: 0x1234,
                len: if op.has_data() { length } else { 0 },
            },
        };
        let mut seed = req.to_bytes().to_vec();
        seed.extend_from_slice(&limits);
        write(&dir, "request", &format!("{op:?}").to_lowercase(), &seed);

        let body = req.to_bytes();
        let frame = FrameHeader {
            kind: FrameKind::Request,
            flags: 0,
            data_len: if op == Opcode::Write { length } else { 0 },
        };
        let mut seed = frame.to_bytes().to_vec();
        seed.extend_from_slice(&body);
        write(
            &dir,
            "frame_header",
            &format!("request_{op:?}").to_lowercase(),
            &seed,
        );
    }
    // An inline write: the flag, no address or rkey.
    let inline = Request {
        opcode: Opcode::Write,
        flags: req_flags::INLINE,
        credits: 2,
        tag: 9,
        sector: 8,
        length: 4096,
        data_crc: 0,
        buf: RemoteBuf {
            addr: 0,
            rkey: 0,
            len: 4096,
        },
    };
    let mut seed = inline.to_bytes().to_vec();
    seed.extend_from_slice(&limits);
    write(&dir, "request", "write_inline", &seed);

    let resp = Response {
        tag: 7,
        status: Status::Ok,
        credits: 1,
        data_crc: rdmadisk_proto::crc32c::crc32c(&[0u8; 4096]),
        length: 4096,
        rkey: 0x1234,
        capacity_sectors: 1 << 17,
    };
    write(&dir, "response", "ok", &resp.to_bytes());
    write(
        &dir,
        "response",
        "crc_mismatch",
        &Response {
            status: Status::CrcMismatch,
            ..resp
        }
        .to_bytes(),
    );

    for (name, kind, body) in [
        ("hello", FrameKind::Hello, hello.to_bytes().to_vec()),
        (
            "hello_reply",
            FrameKind::HelloReply,
            reply.to_bytes().as_bytes().to_vec(),
        ),
        ("response", FrameKind::Response, resp.to_bytes().to_vec()),
    ] {
        let data_len = if kind == FrameKind::Response { 4096 } else { 0 };
        let mut seed = FrameHeader {
            kind,
            flags: 0,
            data_len,
        }
        .to_bytes()
        .to_vec();
        seed.extend_from_slice(&body);
        write(&dir, "frame_header", name, &seed);
    }

    // Policy: three failures, drain, ticks and successful probes, drain back.
    let failback: &[u8] = &[
        0, 1, 10, 1, 20, 1, 3, 1, 4, 20, 5, 1, 4, 20, 5, 1, 4, 20, 5, 1, 3, 1,
    ];
    write(&dir, "events", "failover_failback", failback);
    // Device removal and return, mode changes.
    let device: &[u8] = &[
        1, 1, 3, 1, 4, 200, 2, 1, 3, 1, 6, 2, 3, 1, 6, 0, 6, 1, 4, 200,
    ];
    write(&dir, "events", "device_and_modes", device);
    // Credits: post receives, grant, deliver, send, deliver messages.
    let credits: &[u8] = &[
        128, 0, 128, 0, 128, 0, 129, 8, 130, 0, 131, 0, 131, 0, 132, 0, 128, 0, 129, 8, 130, 0,
        131, 0, 132, 0, 132, 0,
    ];
    write(&dir, "events", "credits", credits);
    // Ids: issue slots 0-2, answer them (current generation), replay, abandon,
    // reissue; fences: two sessions, epochs moving forward and back.
    let ids_and_fences: &[u8] = &[
        0, 0, 0, 0, 1, 0, 0, 2, 0, 1, 0, 0, 1, 0, 0, 1, 1, 1, 2, 2, 0, 0, 2, 0, 1, 2, 0, 1, 2, 1,
        1, 128, 1, 129, 1, 128, 2, 128, 1, 130, 2, 129, 0, 0, 2, 127, 3, 1, 2, 130,
    ];
    write(&dir, "ids_and_fences", "sequence", ids_and_fences);
    println!("seeds written to {}", dir.display());
}
