//! How long the shared CRC32C takes over a 4 KiB block here: the work rdmadisk does per 4 KiB
//! I/O on each side (the client over a write's data or a read's, the target likewise) that
//! nvme-rdma and nvme-tcp without digests do not. `make bench` runs it in each VM
//! (bench/peers.sh) so that the report can set the cost beside the latencies.
//!
//! `cargo run --release -p rdmadisk-proto --example crc32c_speed [ROUNDS]` prints
//! `crc32c_4k_us=<mean microseconds>`.

use rdmadisk_proto::crc32c::crc32c;
use std::time::Instant;

fn main() {
    let rounds: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let block: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let mut acc = 0u32;
    let start = Instant::now();
    for _ in 0..rounds {
        acc = acc.wrapping_add(crc32c(std::hint::black_box(&block)));
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / f64::from(rounds.max(1));
    println!("crc32c_4k_us={us:.1} (check {acc:08x})");
}
