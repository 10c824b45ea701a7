//! TCP frame parsing: the header round-trips exactly, and the message that
//! follows decodes (or fails) without panicking, round-tripping if it decodes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmadisk_proto::wire::{
    AuthReply, AuthRequest, FrameHeader, FrameKind, Hello, HelloReply, Request, Response,
    FRAME_HEADER_LEN,
};

fuzz_target!(|data: &[u8]| {
    let Ok(h) = FrameHeader::decode(data) else {
        return;
    };
    let bytes = h.to_bytes();
    assert_eq!(bytes[..], data[..FRAME_HEADER_LEN]);
    assert_eq!(FrameHeader::decode(&bytes), Ok(h));
    let body = &data[FRAME_HEADER_LEN..];
    let body_len = h.body_len().expect("u32 + message length fits usize");
    assert_eq!(body_len - h.kind.message_len(), h.data_len as usize);
    let msg = body.get(..h.kind.message_len()).unwrap_or(body);
    match h.kind {
        FrameKind::Hello => {
            if let Ok(m) = Hello::decode(msg) {
                assert_eq!(Hello::decode(&m.to_bytes()), Ok(m));
            }
        }
        FrameKind::HelloReply => {
            if let Ok(m) = HelloReply::decode(msg) {
                assert_eq!(HelloReply::decode(m.to_bytes().as_bytes()), Ok(m));
            }
        }
        FrameKind::Request => {
            if let Ok(m) = Request::decode(msg) {
                assert_eq!(Request::decode(&m.to_bytes()), Ok(m));
            }
        }
        FrameKind::Response => {
            if let Ok(m) = Response::decode(msg) {
                assert_eq!(Response::decode(&m.to_bytes()), Ok(m));
            }
        }
        FrameKind::Auth => {
            if let Ok(m) = AuthRequest::decode(msg) {
                assert_eq!(AuthRequest::decode(&m.to_bytes()), Ok(m));
            }
        }
        FrameKind::AuthReply => {
            if let Ok(m) = AuthReply::decode(msg) {
                assert_eq!(AuthReply::decode(&m.to_bytes()), Ok(m));
            }
        }
    }
});
