//! Authentication: client messages and auth replies never panic to decode and
//! re-encode to the same bytes; a proof is accepted only for the key, side,
//! nonces, Hello and endpoints it was made for; secrets parse only from 32-128
//! hex digits.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmadisk_proto::auth::{
    proof, proofs_equal, Endpoint, HmacSha256, Secret, Side, Transcript, SECRET_MAX, SECRET_MIN,
};
use rdmadisk_proto::wire::{
    auth_off, AuthReply, AuthRequest, ClientMsg, ExportName, Hello, CHALLENGE_LEN, REQUEST_LEN,
};

fuzz_target!(|data: &[u8]| {
    // Any bytes as a client message.
    match ClientMsg::decode(data) {
        Ok(ClientMsg::Auth(a)) => {
            let b = a.to_bytes();
            assert_eq!(AuthRequest::decode(&b), Ok(a));
            assert_eq!(b[..auth_off::RESERVED], data[..auth_off::RESERVED]
                .iter()
                .enumerate()
                .map(|(i, &x)| if i == auth_off::FLAGS { 0 } else { x })
                .collect::<Vec<_>>()[..]);
        }
        Ok(ClientMsg::Request(r)) => assert_eq!(r.to_bytes().len(), REQUEST_LEN),
        Err(_) => {}
    }
    if let Ok(r) = AuthReply::decode(data) {
        assert_eq!(AuthReply::decode(&r.to_bytes()), Ok(r));
    }
    // Any bytes as a hex secret: accepted exactly when the length and digits are right.
    let s = Secret::from_hex(data);
    let hex = data.len() % 2 == 0 && data.iter().all(u8::is_ascii_hexdigit);
    let len_ok = (SECRET_MIN..=SECRET_MAX).contains(&(data.len() / 2));
    assert_eq!(s.is_ok(), hex && len_ok);
    // A proof made for one (secret, challenge, hello) is refused for any other.
    if data.len() < 1 + CHALLENGE_LEN + 16 {
        return;
    }
    let (key, rest) = data.split_at(16);
    let (ch, rest) = rest.split_at(CHALLENGE_LEN);
    let ch: [u8; CHALLENGE_LEN] = ch.try_into().unwrap();
    let hello = Hello {
        flags: 0,
        queue_id: u16::from(rest[0] % 4),
        queue_count: 4,
        recv_credits: 64,
        caps: 0,
        session_id: u32::from(rest[0]) << 8 | 1,
        epoch: 7,
        export: ExportName::new(b"vol0").unwrap(),
    };
    let t = Transcript::new(
        &hello,
        ch,
        [rest[0]; CHALLENGE_LEN],
        Endpoint::v4([192, 0, 2, 1], u16::from(rest[0]) + 600),
        Endpoint::v4([192, 0, 2, 2], 7700),
    );
    let p = proof(key, Side::Client, &t);
    assert!(proofs_equal(&p, &proof(key, Side::Client, &t)));
    assert!(!proofs_equal(&p, &proof(key, Side::Target, &t)));
    let mut other = t;
    other.target_nonce[usize::from(rest[0]) % CHALLENGE_LEN] ^= 1;
    assert!(!proofs_equal(&p, &proof(key, Side::Client, &other)));
    let mut other = t;
    other.client.port ^= 1;
    assert!(!proofs_equal(&p, &proof(key, Side::Client, &other)));
    let mut k2 = key.to_vec();
    k2[0] ^= 0x80;
    assert!(!proofs_equal(&p, &proof(&k2, Side::Client, &t)));
    // Incremental HMAC over a split input equals the one-shot one.
    let cut = usize::from(rest[0]) % data.len();
    let mut a = HmacSha256::new(key);
    a.update(&data[..cut]);
    a.update(&data[cut..]);
    let mut b = HmacSha256::new(key);
    b.update(data);
    assert_eq!(a.finish(), b.finish());
});
