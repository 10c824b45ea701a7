//! Many requests in flight at once, from two queues, to overlapping ranges, against the real
//! target over TCP; what lands in the backing file is checked against what the block layer's
//! rules allow (docs/design.md, "The target": ordering, flush and FUA).
//!
//! - Writes in flight at the same time may land in either order, but each 512-byte sector
//!   holds one write's data, never a mix.
//! - A write that completed before another was sent is overwritten by it.
//! - A Flush covers every write that completed before it was sent; a FUA write is in the
//!   backing file when it completes.

mod common;

use std::collections::HashMap;

use common::{pattern, read, simple, write, Target};
use rdmadisk_net::client::{ConnectOptions, TcpClient};
use rdmadisk_proto::wire::{req_flags, Opcode, Status};

fn queue(t: &Target, q: u16) -> TcpClient {
    t.connect_with(&ConnectOptions {
        session_id: 42,
        epoch: 1,
        queue_id: q,
        queue_count: 2,
        ..ConnectOptions::new("rw")
    })
}

/// Sends every request first, then takes the responses in whatever order they come.
fn pipelined(c: &mut TcpClient, writes: &[(u32, u64, Vec<u8>)]) {
    for (tag, sector, data) in writes {
        let req = TcpClient::request(Opcode::Write, *tag, *sector, data.len() as u32, data);
        c.send(&req, data).unwrap();
    }
    let mut seen = HashMap::new();
    for _ in writes {
        let (resp, n) = c.recv(&mut [0u8; 16]).unwrap();
        assert_eq!((resp.status, n), (Status::Ok, 0), "tag {}", resp.tag);
        assert!(
            seen.insert(resp.tag, ()).is_none(),
            "tag {} answered twice",
            resp.tag
        );
    }
}

#[test]
fn concurrent_overlapping_writes_never_tear_a_sector() {
    let t = Target::start(&["--credits", "16"]);
    let (mut a, mut b) = (queue(&t, 0), queue(&t, 1));
    // 16 writes of 16 KiB from each queue, B's shifted by 8 KiB onto A's: every second half
    // block is written by both, concurrently.
    let wa: Vec<_> = (0..16u32)
        .map(|i| (i, u64::from(i) * 64, pattern(100 + i, 16 * 1024)))
        .collect();
    let wb: Vec<_> = (0..16u32)
        .map(|i| (100 + i, u64::from(i) * 64 + 16, pattern(200 + i, 16 * 1024)))
        .collect();
    std::thread::scope(|s| {
        s.spawn(|| pipelined(&mut a, &wa));
        s.spawn(|| pipelined(&mut b, &wb));
    });
    let image = std::fs::read(t.export_path("rw")).unwrap();
    for sector in 0..(16 * 64 + 48) as usize {
        let got = &image[sector * 512..(sector + 1) * 512];
        let candidates: Vec<&[u8]> = wa
            .iter()
            .chain(&wb)
            .filter_map(|(_, s, d)| {
                let (s, n) = (*s as usize, d.len() / 512);
                (s..s + n)
                    .contains(&sector)
                    .then(|| &d[(sector - s) * 512..(sector - s + 1) * 512])
            })
            .collect();
        if candidates.is_empty() {
            assert!(
                got.iter().all(|&x| x == 0),
                "sector {sector} written by no one"
            );
        } else {
            assert!(
                candidates.contains(&got),
                "sector {sector} holds none of the {} writes to it",
                candidates.len()
            );
        }
    }
}

#[test]
fn completion_orders_writes_and_flush_covers_what_completed() {
    let t = Target::start(&["--credits", "16"]);
    let (mut a, mut b) = (queue(&t, 0), queue(&t, 1));
    let path = t.export_path("rw");
    for round in 0..40u32 {
        let base = u64::from(round) * 128;
        let x = pattern(1000 + round, 32 * 1024);
        let y = pattern(2000 + round, 16 * 1024);
        // A's write completes, then B's overlapping write is sent: B's data wins the overlap.
        assert_eq!(write(&mut a, round * 3, base, &x), Status::Ok);
        assert_eq!(write(&mut b, round * 3 + 1, base + 32, &y), Status::Ok);
        assert_eq!(
            simple(&mut a, Opcode::Flush, round * 3 + 2, 0, 0),
            Status::Ok
        );
        let mut want = x.clone();
        want[16 * 1024..].copy_from_slice(&y);
        let (st, got) = read(&mut b, 9000 + round, base, 32 * 1024);
        assert_eq!(st, Status::Ok);
        assert!(got == want, "round {round}: read back");
        let image = std::fs::read(&path).unwrap();
        let off = base as usize * 512;
        assert!(
            image[off..off + 32 * 1024] == want[..],
            "round {round}: backing file after the flush"
        );
    }
    // FUA: in the backing file by the time the write completes.
    let z = pattern(3000, 8192);
    let mut req = TcpClient::request(Opcode::Write, 7777, 10_000, 8192, &z);
    req.flags = req_flags::FUA;
    let (resp, _) = a.call(&req, &z, &mut [0u8; 16]).unwrap();
    assert_eq!(resp.status, Status::Ok);
    let image = std::fs::read(&path).unwrap();
    assert!(image[10_000 * 512..10_000 * 512 + 8192] == z[..]);
    // Many requests in flight on one connection at once, all answered once.
    let many: Vec<_> = (0..16u32)
        .map(|i| (500 + i, 20_000 + u64::from(i) * 8, pattern(4000 + i, 4096)))
        .collect();
    pipelined(&mut a, &many);
    assert!(t.counter("requests") > 100);
}

/// What cachestat(2) (Linux 6.5) says of `len` bytes at `off` of `path`: (pages cached,
/// dirty, under writeback).
fn page_cache(path: &std::path::Path, off: u64, len: u64) -> (u64, u64, u64) {
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        cache: u64,
        dirty: u64,
        writeback: u64,
        evicted: u64,
        recently_evicted: u64,
    }
    let f = std::fs::File::open(path).unwrap();
    let range = Range { off, len };
    let mut st = Stat::default();
    // SAFETY: cachestat reads `range` and fills `st`, both live and of the kernel's layout.
    let r = unsafe {
        libc::syscall(
            451, // cachestat
            std::os::fd::AsRawFd::as_raw_fd(&f),
            &range as *const Range,
            &mut st as *mut Stat,
            0,
        )
    };
    assert_eq!(r, 0, "cachestat: {}", std::io::Error::last_os_error());
    (st.cache, st.dirty, st.writeback)
}

/// A Flush must reach the store, not only the page cache: served through the page cache
/// (`--no-direct`), the pages of a write that completed are dirty, and after another
/// queue's Flush none of them is dirty or still being written back. (Reading the file back
/// cannot tell: a read is served from those very pages, and an O_DIRECT read writes them
/// back first.)
#[test]
fn a_flush_writes_what_completed_to_the_store() {
    let t = Target::start(&["--no-direct"]);
    let (mut a, mut b) = (queue(&t, 0), queue(&t, 1));
    let path = t.export_path("rw");
    let len = 1 << 20;
    for round in 0..3u64 {
        let sector = round * 2048;
        assert_eq!(
            write(&mut a, round as u32, sector, &pattern(round as u32, len)),
            Status::Ok
        );
        let (_, dirty, _) = page_cache(&path, sector * 512, len as u64);
        if dirty == 0 {
            // Written back already by the kernel on its own: this round cannot tell.
            continue;
        }
        assert_eq!(
            simple(&mut b, Opcode::Flush, 100 + round as u32, 0, 0),
            Status::Ok
        );
        let (cached, dirty_after, writeback) = page_cache(&path, sector * 512, len as u64);
        println!("round {round}: {dirty} pages dirty after the write; after the flush {dirty_after} dirty, {writeback} under writeback, {cached} cached");
        assert_eq!((dirty_after, writeback), (0, 0), "round {round}");
        return;
    }
    panic!("the kernel wrote every round back by itself: nothing was left for a flush to do");
}
