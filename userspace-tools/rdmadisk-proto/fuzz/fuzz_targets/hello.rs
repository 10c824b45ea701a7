//! Hello decoding: never panics, and what decodes re-encodes to the same
//! bytes and decodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmadisk_proto::wire::{hello_off, Hello, HELLO_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(h) = Hello::decode(data) else {
        return;
    };
    let bytes = h.to_bytes();
    assert_eq!(Hello::decode(&bytes), Ok(h));
    assert_eq!(bytes[..hello_off::SESSION_ID], data[..hello_off::SESSION_ID]);
    assert_eq!(
        bytes[hello_off::SESSION_ID..],
        data[hello_off::SESSION_ID..HELLO_LEN]
    );
    assert_eq!(h.export.as_bytes(), h.export.as_str().as_bytes());
});
