//! CRC32C (Castagnoli), the checksum carried in requests and responses.
//!
//! Software slice-by-8: portable and dependency-free so the client, the
//! target and the fuzzers agree bit for bit. The kernel module may instead use
//! the kernel's accelerated `crc32c()`; both compute the same function
//! (reflected polynomial 0x82F63B78, initial value and final XOR all ones),
//! which the tests here pin down with the standard check value.

/// Reflected CRC32C polynomial.
pub const POLY: u32 = 0x82F6_3B78;

const fn make_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
            bit += 1;
        }
        t[0][i] = crc;
        i += 1;
    }
    // t[k][i] is the CRC of byte i followed by k zero bytes, which lets the
    // main loop fold eight bytes with eight independent lookups.
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

static TABLES: [[u32; 256]; 8] = make_tables();

// A byte index into a 256-entry table can never be out of bounds, and the
// compiler sees that, so no bounds check (or panic path) is emitted.
#[inline(always)]
fn lookup(table: &[u32; 256], byte: u32) -> u32 {
    table[usize::from(byte as u8)]
}

/// CRC32C of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

/// Continues a CRC32C: `crc32c_append(crc32c(a), b) == crc32c(a ++ b)`, and
/// `crc32c_append(0, x) == crc32c(x)`, so data split into segments (a bio's
/// pages) can be checksummed piece by piece.
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    let [t0, t1, t2, t3, t4, t5, t6, t7] = &TABLES;
    let mut crc = !crc;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        // Always matches: chunks_exact yields 8-byte slices.
        let &[b0, b1, b2, b3, b4, b5, b6, b7] = c else {
            continue;
        };
        let lo = u32::from_le_bytes([b0, b1, b2, b3]) ^ crc;
        let hi = u32::from_le_bytes([b4, b5, b6, b7]);
        crc = lookup(t7, lo)
            ^ lookup(t6, lo >> 8)
            ^ lookup(t5, lo >> 16)
            ^ lookup(t4, lo >> 24)
            ^ lookup(t3, hi)
            ^ lookup(t2, hi >> 8)
            ^ lookup(t1, hi >> 16)
            ^ lookup(t0, hi >> 24);
    }
    for &b in chunks.remainder() {
        crc = (crc >> 8) ^ lookup(t0, crc ^ u32::from(b));
    }
    !crc
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use proptest::prelude::*;

    fn bitwise(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ POLY
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    #[test]
    fn check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(bitwise(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn known_vectors() {
        // RFC 3720 (iSCSI) appendix B.4 test patterns.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62A8_AB43);
        let inc: std::vec::Vec<u8> = (0u8..32).collect();
        assert_eq!(crc32c(&inc), 0x46DD_794E);
        let dec: std::vec::Vec<u8> = (0u8..32).rev().collect();
        assert_eq!(crc32c(&dec), 0x113F_DB5C);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn append_identities() {
        assert_eq!(crc32c_append(0, b"abc"), crc32c(b"abc"));
        assert_eq!(crc32c_append(crc32c(b"1234"), b"56789"), 0xE306_9283);
        assert_eq!(crc32c_append(0xE306_9283, b""), 0xE306_9283);
    }

    proptest! {
        #[test]
        fn matches_bitwise_reference(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            prop_assert_eq!(crc32c(&data), bitwise(&data));
        }

        #[test]
        fn append_equals_concatenation(data in proptest::collection::vec(any::<u8>(), 0..300), split in any::<prop::sample::Index>()) {
            let at = split.index(data.len() + 1);
            let (a, b) = data.split_at(at);
            prop_assert_eq!(crc32c_append(crc32c(a), b), crc32c(&data));
        }
    }

    /// Host throughput; run with
    /// `cargo test --release -p rdmadisk-proto -- --ignored --nocapture crc32c_throughput`.
    #[test]
    #[ignore]
    fn crc32c_throughput() {
        let buf: std::vec::Vec<u8> = (0..1u32 << 20).map(|i| (i * 131 % 251) as u8).collect();
        let rounds = 512u32;
        let start = std::time::Instant::now();
        let mut acc = 0u32;
        for _ in 0..rounds {
            acc = acc.wrapping_add(crc32c(core::hint::black_box(&buf)));
        }
        let secs = start.elapsed().as_secs_f64();
        let mb = f64::from(rounds) * buf.len() as f64 / 1e6;
        std::println!("crc32c slice-by-8: {:.0} MB/s (acc {acc:08x})", mb / secs);
    }
}
