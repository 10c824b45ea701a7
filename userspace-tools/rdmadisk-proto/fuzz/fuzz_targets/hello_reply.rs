//! HelloReply decoding: never panics, and what decodes re-encodes to the
//! same bytes (reserved fields aside) and decodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmadisk_proto::wire::{
    hello_reply_off as off, identity_off, HelloReply, HELLO_REPLY_LEN, HELLO_REPLY_MAX_LEN,
};

fuzz_target!(|data: &[u8]| {
    let Ok(r) = HelloReply::decode(data) else {
        return;
    };
    let e = r.to_bytes();
    let bytes = e.as_bytes();
    assert_eq!(HelloReply::decode(bytes), Ok(r));
    if r.identity.is_some() {
        // The identity re-encodes as it came, reserved bytes aside.
        let id = HELLO_REPLY_LEN..HELLO_REPLY_LEN + identity_off::RESERVED;
        assert_eq!(bytes[id.clone()], data[id]);
        assert_eq!(bytes.len(), HELLO_REPLY_MAX_LEN);
    } else {
        assert_eq!(bytes.len(), HELLO_REPLY_LEN);
    }
    assert_eq!(bytes[..off::RESERVED0], data[..off::RESERVED0]);
    assert_eq!(bytes[off::FEATURES..off::RESERVED1], data[off::FEATURES..off::RESERVED1]);
    assert!(bytes[off::RESERVED1..HELLO_REPLY_LEN].iter().all(|&b| b == 0));
});
