//! Request decoding and validation: never panic; what decodes re-encodes to
//! the same bytes (reserved aside); validate agrees with a u128 reference.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmadisk_proto::wire::{req_flags, request_off, Opcode, Request, Status};

fuzz_target!(|data: &[u8]| {
    let Ok(r) = Request::decode(data) else {
        return;
    };
    let bytes = r.to_bytes();
    assert_eq!(Request::decode(&bytes), Ok(r));
    assert_eq!(
        bytes[..request_off::RESERVED],
        data[..request_off::RESERVED]
    );
    assert!(bytes[request_off::RESERVED..].iter().all(|&b| b == 0));

    // Limits come from the bytes after the message, so the fuzzer explores
    // the edges (capacity near u64::MAX, tiny max_io) too.
    let tail = data.get(48..).unwrap_or(&[]);
    let mut cap = [0u8; 8];
    let mut max_io = [0u8; 4];
    for (d, s) in cap.iter_mut().zip(tail.iter()) {
        *d = *s;
    }
    for (d, s) in max_io.iter_mut().zip(tail.iter().skip(8)) {
        *d = *s;
    }
    let cap = u64::from_le_bytes(cap);
    let max_io = u32::from_le_bytes(max_io);
    let ro = tail.get(12).is_some_and(|b| b & 1 != 0);
    assert_eq!(r.validate(cap, max_io, ro), reference(&r, cap, max_io, ro));
});

/// Straightforward restatement of the documented rules, in wide arithmetic.
fn reference(r: &Request, cap: u64, max_io: u32, ro: bool) -> Result<(), Status> {
    if r.flags & !(req_flags::FUA | req_flags::INLINE) != 0 {
        return Err(Status::Invalid);
    }
    if r.flags & req_flags::INLINE != 0
        && (r.opcode != Opcode::Write || r.buf.addr != 0 || r.buf.rkey != 0)
    {
        return Err(Status::Invalid);
    }
    let modifies = matches!(
        r.opcode,
        Opcode::Write | Opcode::Discard | Opcode::WriteZeroes
    );
    if ro && modifies {
        return Err(Status::ReadOnly);
    }
    if matches!(r.opcode, Opcode::Flush | Opcode::Nop | Opcode::Close) {
        return if r.length == 0 {
            Ok(())
        } else {
            Err(Status::Invalid)
        };
    }
    if r.length == 0 || !r.length.is_multiple_of(512) || r.length > max_io {
        return Err(Status::Invalid);
    }
    if matches!(r.opcode, Opcode::Read | Opcode::Write) && r.buf.len != r.length {
        return Err(Status::Invalid);
    }
    if u128::from(r.sector) + u128::from(r.length / 512) > u128::from(cap) {
        return Err(Status::OutOfRange);
    }
    Ok(())
}
