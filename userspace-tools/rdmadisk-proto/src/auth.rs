//! Authentication of a connection with a shared key: SHA-256, HMAC-SHA256, and the proofs both
//! sides send (docs/design.md, "Access control").
//!
//! A target that holds a key for a connection (the client host's own key, or the export's
//! shared secret) answers the Hello with `features::AUTH` and a random nonce, its challenge, in
//! the HelloReply. The client's first message is then an
//! [`AuthRequest`](super::wire::AuthRequest) carrying its own random nonce and its proof; the
//! target checks it, and answers with an [`AuthReply`](super::wire::AuthReply) that carries the
//! target's proof, which the client checks before it sends anything else. Each proof is
//!
//! ```text
//! HMAC-SHA256(key, CONTEXT || side || Hello || target nonce || client nonce
//!                  || client address || client port || target address || target port)
//! ```
//!
//! so it is bound to everything the Hello asked for (export, flags, session, epoch, queue,
//! credits), to both nonces (neither side can replay an old exchange to the other) and to both
//! endpoints (a relay that opens its own connection to the target presents another client
//! address, and its proof fails). `side` keeps a target's proof from passing as a client's.
//! The two sides may use different keys (DH-HMAC-CHAP's host and controller keys): the client
//! proves the host key, the target the target key, which defaults to the host key. In spirit
//! this is NVMe's DH-HMAC-CHAP without the Diffie-Hellman part: the key never crosses the
//! wire, but the traffic itself is neither encrypted nor integrity-protected after the
//! exchange.
//!
//! Plain `core` Rust: the kernel module computes its proofs with this very code.

use super::wire::{Hello, CHALLENGE_LEN, HELLO_LEN};

/// Bytes of a SHA-256 digest, and of a proof.
pub const MAC_LEN: usize = 32;
/// Shortest and longest secret, in bytes. 16 bytes is the least that resists guessing; 64 is
/// one SHA-256 block (a longer key would be hashed first, for no gain).
pub const SECRET_MIN: usize = 16;
pub const SECRET_MAX: usize = 64;
/// Domain separation: a proof for this protocol and version means nothing elsewhere.
pub const CONTEXT: &[u8] = b"rdmadisk auth v2\0";

const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

const H0: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// An incremental SHA-256 (FIPS 180-4).
#[derive(Clone)]
pub struct Sha256 {
    h: [u32; 8],
    block: [u8; 64],
    used: usize,
    total: u64,
}

impl Default for Sha256 {
    fn default() -> Self {
        Self::new()
    }
}

impl Sha256 {
    pub const fn new() -> Sha256 {
        Sha256 {
            h: H0,
            block: [0; 64],
            used: 0,
            total: 0,
        }
    }

    fn compress(h: &mut [u32; 8], block: &[u8; 64]) {
        let mut w = [0u32; 64];
        for (i, c) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = *h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }

    pub fn update(&mut self, mut data: &[u8]) {
        self.total = self.total.wrapping_add(data.len() as u64);
        while !data.is_empty() {
            let n = (64 - self.used).min(data.len());
            self.block[self.used..self.used + n].copy_from_slice(&data[..n]);
            self.used += n;
            data = &data[n..];
            if self.used == 64 {
                Self::compress(&mut self.h, &self.block);
                self.used = 0;
            }
        }
    }

    pub fn finish(mut self) -> [u8; MAC_LEN] {
        let bits = self.total.wrapping_mul(8);
        self.update(&[0x80]);
        while self.used != 56 {
            self.update(&[0]);
        }
        self.update(&bits.to_be_bytes());
        let mut out = [0u8; MAC_LEN];
        for (o, h) in out.chunks_exact_mut(4).zip(self.h) {
            o.copy_from_slice(&h.to_be_bytes());
        }
        out
    }

    /// SHA-256 of `data` at once.
    pub fn digest(data: &[u8]) -> [u8; MAC_LEN] {
        let mut s = Sha256::new();
        s.update(data);
        s.finish()
    }
}

/// An incremental HMAC-SHA256 (RFC 2104) with a key of at most one block (64 bytes): the
/// secrets here never need more. A longer key is hashed first, as the RFC says.
#[derive(Clone)]
pub struct HmacSha256 {
    inner: Sha256,
    okey: [u8; 64],
}

impl HmacSha256 {
    pub fn new(key: &[u8]) -> HmacSha256 {
        let mut k = [0u8; 64];
        if key.len() > 64 {
            k[..MAC_LEN].copy_from_slice(&Sha256::digest(key));
        } else {
            k[..key.len()].copy_from_slice(key);
        }
        let mut ikey = [0u8; 64];
        let mut okey = [0u8; 64];
        for i in 0..64 {
            ikey[i] = k[i] ^ 0x36;
            okey[i] = k[i] ^ 0x5c;
        }
        let mut inner = Sha256::new();
        inner.update(&ikey);
        HmacSha256 { inner, okey }
    }

    pub fn update(&mut self, data: &[u8]) {
        self.inner.update(data);
    }

    pub fn finish(self) -> [u8; MAC_LEN] {
        let ih = self.inner.finish();
        let mut o = Sha256::new();
        o.update(&self.okey);
        o.update(&ih);
        o.finish()
    }
}

/// Which side of a connection a proof speaks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Client,
    Target,
    /// The target refusing the connection's session (`Fenced`): the key of
    /// [`fenced_proof`].
    TargetFenced,
}

impl Side {
    fn label(self) -> &'static [u8] {
        match self {
            Side::Client => b"client\0",
            Side::Target => b"target\0",
            Side::TargetFenced => b"target fenced\0",
        }
    }
}

/// One end of a connection as both sides see it: an IPv6 address (an IPv4 one as IPv4-mapped
/// IPv6, so that a dual-stack listener and an IPv4 client agree) and a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Endpoint {
    pub addr: [u8; 16],
    pub port: u16,
}

impl Endpoint {
    pub fn v4(octets: [u8; 4], port: u16) -> Endpoint {
        let mut addr = [0u8; 16];
        addr[10] = 0xff;
        addr[11] = 0xff;
        addr[12..].copy_from_slice(&octets);
        Endpoint { addr, port }
    }

    pub fn v6(octets: [u8; 16], port: u16) -> Endpoint {
        Endpoint { addr: octets, port }
    }

    fn update(&self, m: &mut HmacSha256) {
        m.update(&self.addr);
        m.update(&self.port.to_be_bytes());
    }
}

/// What a proof is bound to: the connection's Hello, both nonces and both endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transcript {
    /// The Hello as encoded by [`Hello::to_bytes`] with its `caps` zero (reserved bytes zero
    /// too), so both sides hash the same bytes whatever reserved bits travelled: a target that
    /// predates `caps` re-encodes it as zero.
    pub hello: [u8; HELLO_LEN],
    /// The target's challenge ([`HelloReply::challenge`](super::wire::HelloReply)).
    pub target_nonce: [u8; CHALLENGE_LEN],
    /// The client's nonce ([`AuthRequest::nonce`](super::wire::AuthRequest)).
    pub client_nonce: [u8; CHALLENGE_LEN],
    pub client: Endpoint,
    pub target: Endpoint,
}

impl Transcript {
    pub fn new(
        hello: &Hello,
        target_nonce: [u8; CHALLENGE_LEN],
        client_nonce: [u8; CHALLENGE_LEN],
        client: Endpoint,
        target: Endpoint,
    ) -> Transcript {
        Transcript {
            hello: Hello { caps: 0, ..*hello }.to_bytes(),
            target_nonce,
            client_nonce,
            client,
            target,
        }
    }
}

/// The proof `side` sends for the connection `t` describes, with `key`.
pub fn proof(key: &[u8], side: Side, t: &Transcript) -> [u8; MAC_LEN] {
    let mut m = HmacSha256::new(key);
    m.update(CONTEXT);
    m.update(side.label());
    m.update(&t.hello);
    m.update(&t.target_nonce);
    m.update(&t.client_nonce);
    t.client.update(&mut m);
    t.target.update(&mut m);
    m.finish()
}

/// The target's proof of a `Fenced` answer naming `floor`, with `fenced_key` =
/// `proof(target key, Side::TargetFenced, t)`: a client checks it holding that derived key,
/// not the target's key, and the floor cannot be changed on the way.
pub fn fenced_proof(fenced_key: &[u8; MAC_LEN], floor: u32) -> [u8; MAC_LEN] {
    let mut m = HmacSha256::new(fenced_key);
    m.update(&floor.to_be_bytes());
    m.finish()
}

/// Why a client's authentication failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuthError {
    /// The answer names another tag than the request's.
    WrongTag,
    /// The target refused our proof (a wrong key).
    Denied,
    /// The target accepted, but its own proof is wrong: it does not hold the key we expect
    /// (a wrong target key configured on either side), or it is not the target.
    TargetUnproven,
    /// The target proved its key and refused the session: its fence for this client and
    /// export is at session `floor` (a newer mapping has superseded this one, or, for a new
    /// mapping, an earlier one went that far).
    Fenced { floor: u32 },
}

impl core::fmt::Display for ClientAuthError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            ClientAuthError::WrongTag => "the answer to the authentication names another request",
            ClientAuthError::Denied => "the target refused our key",
            ClientAuthError::TargetUnproven => {
                "the target did not prove the key we expect: a wrong target key, or not the target"
            }
            ClientAuthError::Fenced { floor } => {
                return write!(
                    f,
                    "the target refused the session: its fence is at session {floor}"
                )
            }
        })
    }
}

/// A client's side of one authentication: the [`AuthRequest`](super::wire::AuthRequest) to
/// send, and the target proof its answer must carry.
#[derive(Clone, Copy)]
pub struct ClientProof {
    pub request: super::wire::AuthRequest,
    expected: [u8; MAC_LEN],
    /// The key of the target's proof of a `Fenced` answer ([`fenced_proof`]).
    fenced_key: [u8; MAC_LEN],
}

impl ClientProof {
    /// Proves `key` for the connection `t` describes (its client nonce in `t`), expecting the
    /// target to prove `target_key` (the same key, unless a separate one is configured).
    pub fn new(key: &[u8], target_key: &[u8], t: &Transcript, tag: u32, credits: u16) -> Self {
        ClientProof {
            request: super::wire::AuthRequest {
                credits,
                tag,
                nonce: t.client_nonce,
                proof: proof(key, Side::Client, t),
            },
            expected: proof(target_key, Side::Target, t),
            fenced_key: proof(target_key, Side::TargetFenced, t),
        }
    }

    /// Checks the target's answer: it accepted our proof and proved its own key; or it
    /// proved its key and refused the session (`Fenced`, believed only then).
    pub fn check(&self, r: &super::wire::AuthReply) -> Result<(), ClientAuthError> {
        use super::wire::Status;
        if r.tag != self.request.tag {
            return Err(ClientAuthError::WrongTag);
        }
        match r.status {
            Status::Ok if proofs_equal(&r.proof, &self.expected) => Ok(()),
            Status::Fenced
                if proofs_equal(&r.proof, &fenced_proof(&self.fenced_key, r.session_floor)) =>
            {
                Err(ClientAuthError::Fenced {
                    floor: r.session_floor,
                })
            }
            Status::Ok | Status::Fenced => Err(ClientAuthError::TargetUnproven),
            _ => Err(ClientAuthError::Denied),
        }
    }
}

/// Compares two proofs in time that does not depend on where they differ.
pub fn proofs_equal(a: &[u8; MAC_LEN], b: &[u8; MAC_LEN]) -> bool {
    let mut d = 0u8;
    for i in 0..MAC_LEN {
        d |= a[i] ^ b[i];
    }
    // Every byte is looked at; black_box keeps the compiler from turning the fold into an
    // early exit.
    core::hint::black_box(d) == 0
}

/// Why a secret was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretError {
    /// Not an even number of hex digits, or not hex.
    NotHex,
    /// Shorter than [`SECRET_MIN`] or longer than [`SECRET_MAX`] bytes.
    Length(usize),
}

impl core::fmt::Display for SecretError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SecretError::NotHex => f.write_str("a secret is written as hex digits, two per byte"),
            SecretError::Length(n) => write!(
                f,
                "a secret of {n} bytes: it must have {SECRET_MIN} to {SECRET_MAX} bytes ({} to {} hex digits)",
                SECRET_MIN * 2,
                SECRET_MAX * 2
            ),
        }
    }
}

/// A secret, as the map option and the target's key files give it: hex, 16-64 bytes. Its bytes
/// are overwritten when it is dropped, so that no freed memory keeps a key.
#[derive(Clone)]
pub struct Secret {
    bytes: [u8; SECRET_MAX],
    len: usize,
}

impl Secret {
    pub fn from_hex(hex: &[u8]) -> Result<Secret, SecretError> {
        if hex.len() % 2 != 0 {
            return Err(SecretError::NotHex);
        }
        let n = hex.len() / 2;
        if !(SECRET_MIN..=SECRET_MAX).contains(&n) {
            return Err(SecretError::Length(n));
        }
        let digit = |c: u8| -> Result<u8, SecretError> {
            match c {
                b'0'..=b'9' => Ok(c - b'0'),
                b'a'..=b'f' => Ok(c - b'a' + 10),
                b'A'..=b'F' => Ok(c - b'A' + 10),
                _ => Err(SecretError::NotHex),
            }
        };
        let mut out = Secret {
            bytes: [0u8; SECRET_MAX],
            len: n,
        };
        for i in 0..n {
            out.bytes[i] = digit(hex[2 * i])? << 4 | digit(hex[2 * i + 1])?;
        }
        Ok(out)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Overwrites the key bytes (dropping a secret does it too).
    pub fn wipe(&mut self) {
        wipe(&mut self.bytes);
        self.len = 0;
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        self.wipe();
    }
}

/// Runs `parse` over the text of a key (`buf` with the whitespace around it trimmed), then wipes
/// `buf`, whatever `parse` returned: for key files read into memory.
pub fn parse_then_wipe<T>(buf: &mut [u8], parse: impl FnOnce(&[u8]) -> T) -> T {
    let r = parse(buf.trim_ascii());
    wipe(buf);
    r
}

/// Overwrites `buf` with zeros in a way the compiler may not drop as a dead store: for buffers
/// that held a key (a hex text read from a file, a map line) before they are let go.
pub fn wipe(buf: &mut [u8]) {
    buf.fill(0);
    // The stores must happen although nothing reads the bytes again: black_box makes the
    // optimiser assume something does.
    core::hint::black_box(&*buf);
}

impl core::fmt::Debug for Secret {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Secret({} bytes)", self.len)
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Secret) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::super::wire::{hello_flags, ExportName};
    use super::*;
    use std::vec::Vec;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn sha256_known_answers() {
        // FIPS 180-4 examples.
        assert_eq!(
            Sha256::digest(b"abc").to_vec(),
            hex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        );
        assert_eq!(
            Sha256::digest(b"").to_vec(),
            hex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        );
        assert_eq!(
            Sha256::digest(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq").to_vec(),
            hex("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        );
        let mut s = Sha256::new();
        for _ in 0..1000 {
            s.update(&[b'a'; 1000]);
        }
        assert_eq!(
            s.finish().to_vec(),
            hex("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
        );
    }

    #[test]
    fn hmac_rfc4231() {
        // Test cases 1, 2, 4, 6 and 7 of RFC 4231.
        let cases: [(Vec<u8>, Vec<u8>, &str); 5] = [
            (
                [0x0b; 20].to_vec(),
                b"Hi There".to_vec(),
                "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
            ),
            (
                b"Jefe".to_vec(),
                b"what do ya want for nothing?".to_vec(),
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
            ),
            (
                hex("0102030405060708090a0b0c0d0e0f10111213141516171819"),
                [0xcd; 50].to_vec(),
                "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
            ),
            (
                [0xaa; 131].to_vec(),
                b"Test Using Larger Than Block-Size Key - Hash Key First".to_vec(),
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
            ),
            (
                [0xaa; 131].to_vec(),
                b"This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm.".to_vec(),
                "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
            ),
        ];
        for (key, data, want) in cases {
            let mut m = HmacSha256::new(&key);
            m.update(&data);
            assert_eq!(m.finish().to_vec(), hex(want));
        }
    }

    #[test]
    fn secrets_parse() {
        let s = Secret::from_hex(b"00112233445566778899aabbccddeeff").unwrap();
        assert_eq!(s.as_bytes(), &hex("00112233445566778899aabbccddeeff")[..]);
        assert_eq!(
            Secret::from_hex(b"00112233445566778899AABBCCDDEEFF").unwrap(),
            s
        );
        assert_eq!(Secret::from_hex(b"0011"), Err(SecretError::Length(2)));
        assert_eq!(Secret::from_hex(b"001"), Err(SecretError::NotHex));
        assert_eq!(
            Secret::from_hex(b"zz112233445566778899aabbccddeeff"),
            Err(SecretError::NotHex)
        );
        let long = [b'a'; 130];
        assert_eq!(Secret::from_hex(&long), Err(SecretError::Length(65)));
        let mut w = s;
        w.wipe();
        assert!(w.as_bytes().is_empty());
    }

    fn transcript() -> Transcript {
        let hello = Hello {
            flags: 0,
            queue_id: 0,
            queue_count: 2,
            recv_credits: 32,
            caps: 0,
            session_id: 5,
            epoch: 6,
            export: ExportName::new(b"vol0").unwrap(),
        };
        Transcript::new(
            &hello,
            [1u8; CHALLENGE_LEN],
            [2u8; CHALLENGE_LEN],
            Endpoint::v4([192, 0, 2, 1], 1023),
            Endpoint::v4([192, 0, 2, 2], 7700),
        )
    }

    #[test]
    fn proofs_bind_every_field() {
        let key = [7u8; 32];
        let t = transcript();
        let base = proof(&key, Side::Client, &t);
        assert!(proofs_equal(&base, &proof(&key, Side::Client, &t)));
        let mut others = Vec::new();
        others.push(proof(&[8u8; 32], Side::Client, &t));
        others.push(proof(&key, Side::Target, &t));
        // Every byte of the Hello: export, flags, queue numbers, credits, session, epoch.
        for i in 0..HELLO_LEN {
            let mut x = t;
            x.hello[i] ^= 1;
            others.push(proof(&key, Side::Client, &x));
        }
        for i in 0..CHALLENGE_LEN {
            let mut x = t;
            x.target_nonce[i] ^= 1;
            others.push(proof(&key, Side::Client, &x));
            let mut x = t;
            x.client_nonce[i] ^= 1;
            others.push(proof(&key, Side::Client, &x));
        }
        let mut x = t;
        x.client.addr[15] ^= 1;
        others.push(proof(&key, Side::Client, &x));
        let mut x = t;
        x.client.port ^= 1;
        others.push(proof(&key, Side::Client, &x));
        let mut x = t;
        x.target.addr[15] ^= 1;
        others.push(proof(&key, Side::Client, &x));
        let mut x = t;
        x.target.port ^= 1;
        others.push(proof(&key, Side::Client, &x));
        // The nonces cannot trade places, nor the endpoints.
        let mut x = t;
        core::mem::swap(&mut x.target_nonce, &mut x.client_nonce);
        others.push(proof(&key, Side::Client, &x));
        let mut x = t;
        core::mem::swap(&mut x.client, &mut x.target);
        others.push(proof(&key, Side::Client, &x));
        for o in &others {
            assert!(!proofs_equal(&base, o));
        }
    }

    #[test]
    fn proof_known_answer() {
        // Pins the construction: a change to the transcript's layout changes this value, and
        // the kernel module and the target would then disagree with older builds of each other.
        let mut m = HmacSha256::new(&[7u8; 32]);
        m.update(CONTEXT);
        m.update(b"client\0");
        let t = transcript();
        m.update(&t.hello);
        m.update(&t.target_nonce);
        m.update(&t.client_nonce);
        m.update(&t.client.addr);
        m.update(&1023u16.to_be_bytes());
        m.update(&t.target.addr);
        m.update(&7700u16.to_be_bytes());
        assert_eq!(m.finish(), proof(&[7u8; 32], Side::Client, &t));
        let v4 = Endpoint::v4([192, 0, 2, 1], 1);
        assert_eq!(&v4.addr[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(Endpoint::v6(v4.addr, 1), v4);
    }

    #[test]
    fn a_client_checks_the_target_both_ways() {
        use super::super::wire::{AuthReply, Status};
        let (k, tk) = ([7u8; 32], [9u8; 32]);
        let t = transcript();
        let c = ClientProof::new(&k, &tk, &t, 5, 1);
        assert_eq!(c.request.nonce, t.client_nonce);
        assert!(proofs_equal(&c.request.proof, &proof(&k, Side::Client, &t)));
        let good = AuthReply {
            tag: 5,
            status: Status::Ok,
            credits: 1,
            proof: proof(&tk, Side::Target, &t),
            session_floor: 0,
        };
        assert_eq!(c.check(&good), Ok(()));
        let fenced_key = proof(&tk, Side::TargetFenced, &t);
        let fenced = AuthReply {
            status: Status::Fenced,
            proof: fenced_proof(&fenced_key, 41),
            session_floor: 41,
            ..good
        };
        assert_eq!(c.check(&fenced), Err(ClientAuthError::Fenced { floor: 41 }));
        for (bad, why) in [
            (AuthReply { tag: 6, ..good }, ClientAuthError::WrongTag),
            (
                AuthReply {
                    status: Status::Denied,
                    ..good
                },
                ClientAuthError::Denied,
            ),
            (
                AuthReply {
                    proof: proof(&k, Side::Target, &t),
                    ..good
                },
                ClientAuthError::TargetUnproven,
            ),
            (
                AuthReply {
                    // Our own proof reflected back is not the target's.
                    proof: c.request.proof,
                    ..good
                },
                ClientAuthError::TargetUnproven,
            ),
            (
                // A refusal of the session from anyone without the target's key, or with
                // its floor changed on the way, is not believed.
                AuthReply {
                    proof: fenced_proof(&proof(&k, Side::TargetFenced, &t), 41),
                    ..fenced
                },
                ClientAuthError::TargetUnproven,
            ),
            (
                AuthReply {
                    session_floor: u32::MAX - 1,
                    ..fenced
                },
                ClientAuthError::TargetUnproven,
            ),
            (
                AuthReply {
                    status: Status::Fenced,
                    ..good
                },
                ClientAuthError::TargetUnproven,
            ),
        ] {
            assert_eq!(c.check(&bad), Err(why));
        }
    }

    #[test]
    fn wipe_clears() {
        let mut b = *b"0011223344556677";
        wipe(&mut b);
        assert_eq!(b, [0; 16]);
        let mut s = Secret::from_hex(b"00112233445566778899aabbccddeeff").unwrap();
        s.wipe();
        assert!(s.as_bytes().is_empty());
        assert!(s.bytes.iter().all(|&x| x == 0), "the key bytes themselves");
        let mut text = *b"  00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n";
        let got = parse_then_wipe(&mut text, |t| Secret::from_hex(t).map(|k| k.len));
        assert_eq!(got, Ok(32), "parsed trimmed");
        assert!(text.iter().all(|&x| x == 0), "the text read is wiped");
    }

    /// The proof covers the Hello as sent: a transcript holds every byte of it, so a relay that
    /// changes the flags, the session or the epoch breaks the proof.
    #[test]
    fn a_transcript_holds_the_whole_hello() {
        let h = Hello {
            flags: hello_flags::NEW_SESSION,
            queue_id: 1,
            queue_count: 2,
            recv_credits: 8,
            caps: 0,
            session_id: 77,
            epoch: 3,
            export: ExportName::new(b"vol0").unwrap(),
        };
        let ends = (
            Endpoint::v4([10, 0, 0, 1], 1000),
            Endpoint::v4([10, 0, 0, 2], 4420),
        );
        let t =
            |h: &Hello| Transcript::new(h, [1; CHALLENGE_LEN], [2; CHALLENGE_LEN], ends.0, ends.1);
        assert_eq!(t(&h).hello, h.to_bytes());
        let changed = [
            Hello { flags: 0, ..h },
            Hello {
                session_id: 78,
                ..h
            },
            Hello { epoch: 4, ..h },
        ];
        for c in &changed {
            assert_ne!(
                proof(&[9; 32], Side::Client, &t(c)),
                proof(&[9; 32], Side::Client, &t(&h)),
                "{c:?}"
            );
        }
        // What the client can take in the reply is not bound: a target that predates `caps`
        // re-encodes it as zero, and its proof must still match a client that set a bit.
        let with_caps = Hello {
            caps: super::super::wire::hello_caps::IDENTITY,
            ..h
        };
        assert_eq!(
            proof(&[9; 32], Side::Client, &t(&with_caps)),
            proof(&[9; 32], Side::Client, &t(&h))
        );
    }
}
