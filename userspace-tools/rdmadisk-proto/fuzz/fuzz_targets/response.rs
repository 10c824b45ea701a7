//! Response decoding: never panics, and what decodes re-encodes to the same
//! bytes (reserved aside) and decodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmadisk_proto::wire::{response_off, Response, RESPONSE_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(r) = Response::decode(data) else {
        return;
    };
    let bytes = r.to_bytes();
    assert_eq!(Response::decode(&bytes), Ok(r));
    let (res, cap) = (response_off::RESERVED, response_off::CAPACITY_SECTORS);
    assert_eq!(bytes[..res], data[..res]);
    assert!(bytes[res..cap].iter().all(|&b| b == 0));
    assert_eq!(bytes[cap..RESPONSE_LEN], data[cap..RESPONSE_LEN]);
});
