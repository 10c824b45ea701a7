//! Response decoding: never panics, and what decodes re-encodes to the same
//! bytes (reserved aside) and decodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmadisk_proto::wire::{response_off, Response};

fuzz_target!(|data: &[u8]| {
    let Ok(r) = Response::decode(data) else {
        return;
    };
    let bytes = r.to_bytes();
    assert_eq!(Response::decode(&bytes), Ok(r));
    assert_eq!(
        bytes[..response_off::RESERVED],
        data[..response_off::RESERVED]
    );
    assert!(bytes[response_off::RESERVED..].iter().all(|&b| b == 0));
});
