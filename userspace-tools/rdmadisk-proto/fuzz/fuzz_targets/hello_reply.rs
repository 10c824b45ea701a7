//! HelloReply decoding: never panics, and what decodes re-encodes to the
//! same bytes (reserved fields aside) and decodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmadisk_proto::wire::{hello_reply_off as off, HelloReply, HELLO_REPLY_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(r) = HelloReply::decode(data) else {
        return;
    };
    let bytes = r.to_bytes();
    assert_eq!(HelloReply::decode(&bytes), Ok(r));
    assert_eq!(bytes[..off::RESERVED0], data[..off::RESERVED0]);
    assert_eq!(bytes[off::FEATURES..off::RESERVED1], data[off::FEATURES..off::RESERVED1]);
    assert!(bytes[off::RESERVED1..HELLO_REPLY_LEN].iter().all(|&b| b == 0));
});
